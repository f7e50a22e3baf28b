#![doc = include_str!("producer.md")]

use super::callback::{Callback, Work};
use super::intake::Producer;
use super::port::GpPort;
use super::shard::{ProducerShared, Shard};
use super::Callbacks;
use crate::barrier::FenceKind;
use crate::per_thread::{DomainKey, Entry, PerDomain};
use crate::seq::GpCookie;
use crate::sync::fork;
use crate::sync::lock;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Callbacks pending in a shard beyond which a producer that queues more gives way to its
/// worker ("Floods" in the module docs).
pub(crate) const GIVE_WAY_BACKLOG: u64 = if cfg!(rcukit_small) { 64 } else { 1 << 18 };

/// The longest pause of a producer far ahead of its worker, per
/// [`NUDGE_EVERY`](super::intake::NUDGE_EVERY) entries (which `rcukit_small` makes 4: its
/// pauses are as much shorter, so that a flood there is no slower per callback).
const MOST_PAUSE: Duration = if cfg!(rcukit_small) {
    Duration::from_micros(4)
} else {
    Duration::from_millis(1)
};

/// How long a pausing producer sleeps before it looks at the backlog again.
const PAUSE_STEP: Duration = if cfg!(rcukit_small) {
    Duration::from_micros(1)
} else {
    Duration::from_micros(50)
};
#[cfg(not(rcukit_loom))]
use {
    super::invoke::{drops_must_wait, Few},
    super::local,
    super::port::ReleasedBy,
};

/// What a producer does after sealing a block of its local list.
pub(crate) struct AfterSeal {
    pub(crate) shared: Arc<ProducerShared>,
    /// The cookie of the block just sealed: its normal grace period is requested.
    pub(crate) cookie: GpCookie,
    /// With the list past the backlog thresholds: the newest cookie, to expedite.
    pub(crate) hurry: Option<GpCookie>,
    /// Every `producer_backlog_*` objects or bytes sealed: the newest cookie, for an
    /// expedited grace period tried in this thread.
    pub(crate) try_expedited: Option<GpCookie>,
}

impl Callbacks {
    /// After a seal: step 5 of the module docs.
    pub(crate) fn after_seal<P: GpPort>(&self, gp: &P, after: AfterSeal) {
        gp.request_normal(&after.cookie);
        if let Some(newest) = after.try_expedited {
            self.try_expedited_here(gp, &newest, &after.shared);
        } else if let Some(newest) = after.hurry {
            // Past the backlog thresholds: the kernel's hurry, on the helper thread.
            gp.request_expedited(&newest);
        }
    }

    /// Step 5's tried grace period: end an expedited grace period covering `newest` in this
    /// thread if no reader is in the way (the blocks it releases are then dropped a few at a
    /// time by the next `retire` calls); else leave it to the helper thread. Not inside a
    /// read-side critical section of the domain (the grace period would wait for this thread)
    /// nor while unwinding.
    fn try_expedited_here<P: GpPort>(&self, gp: &P, newest: &GpCookie, shared: &ProducerShared) {
        if gp.is_reading_here() || std::thread::panicking() {
            gp.request_expedited(newest);
            return;
        }
        if !gp.try_expedited(newest) {
            // The helper finishes it; no other try until it has.
            if let Some(mut guard) = shared.local.enter(self.config.fence) {
                guard.with(|list| list.try_gave_up(*newest));
            }
        }
    }
}

/// What a seal of the local list found (for [`AfterSeal`]).
#[cfg(not(rcukit_loom))]
struct SealFacts {
    /// Callbacks and bytes in the list.
    backlog: (usize, u64),
    /// The newest stamp in the list.
    newest: Option<GpCookie>,
    /// A tried expedited grace period is due.
    try_due: bool,
}

/// What `push` does once it has let go of the thread-local table.
#[cfg(not(rcukit_loom))]
enum After {
    /// Queued on the intake of this shard (valid while the domain lives); whether the entry
    /// started a block of [`NUDGE_EVERY`](super::intake::NUDGE_EVERY) (the producer then looks
    /// at the shard's backlog: see "Floods" in the module docs).
    Intake(*const Shard, bool),
    /// Kept in the local list; after a seal there is more to do, and the ready callbacks
    /// taken from the list into the caller's `Few` (marked `dropping`) are to be dropped.
    Local {
        seal: Option<AfterSeal>,
        /// The thread's shared state for this shard and the shard (valid while the domain
        /// lives: the slot that owns them is dropped only at thread exit or once the domain is
        /// gone, and we are borrowed from the domain).
        shared: *const ProducerShared,
        shard: *const Shard,
    },
}

impl Callbacks {
    /// Queue a callback. Never waits for a grace period (a flood gives way: see "Floods" in
    /// the module docs).
    #[inline]
    pub(crate) fn push<P: GpPort>(&self, gp: &P, callback: Callback) {
        // Loom runs every execution of a model on one OS thread, so a thread-local would carry
        // loom objects from one execution into the next: models drive `Producer` directly.
        #[cfg(rcukit_loom)]
        {
            self.push_without_thread_local(gp, callback);
        }
        #[cfg(not(rcukit_loom))]
        self.push_with_thread_local(gp, callback);
    }

    #[cfg(not(rcukit_loom))]
    #[inline]
    fn push_with_thread_local<P: GpPort>(&self, gp: &P, callback: Callback) {
        let drop_only = callback.is_drop_only();
        let mut callback = Some(callback);
        // Filled in place (not returned by value): it is moved on every `retire`.
        let mut few = Few::new();
        let create = || {
            gp.check_fork();
            let shard = &self.shards[self.shard_index_for_current_thread()];
            ProducerSlot::new(shard, self.config.fence)
        };
        // SAFETY: we are borrowed from the domain, alive for this call; `push_in_slot` runs no
        // user code and queues nothing through the table (ready blocks run below, after
        // `with_slot` has returned).
        let after = unsafe {
            with_slot(self.domain, create, |slot| {
                let callback = callback.take().expect("taken once");
                self.push_in_slot(gp, slot, callback, &mut few)
            })
        };
        if let Some(callback) = callback {
            self.push_without_thread_local(gp, callback);
        }
        match after {
            Some(After::Local {
                seal,
                shared,
                shard,
            }) => {
                // The drops first: until they have run the list is marked `dropping`, and a
                // tried grace period (in `after_seal`) wakes futures, whose wakers may call
                // `barrier()`, which waits for that mark to clear.
                if !few.is_empty() {
                    // SAFETY: see `After::Local`.
                    let (shared, shard) = unsafe { (&*shared, &*shard) };
                    self.drop_few(gp, &mut few, shared, shard);
                }
                if let Some(seal) = seal {
                    self.after_seal(gp, seal);
                }
            }
            Some(After::Intake(shard, nudged)) => {
                // SAFETY: the shard belongs to this domain, which is alive.
                let shard = unsafe { &*shard };
                if nudged {
                    self.give_way_if_far_ahead(shard);
                }
                if drop_only && self.config.retire_on_producers && shard.hand_back.queued() > 0 {
                    self.run_ready_batch(gp, shard);
                }
            }
            None => {}
        }
    }

    /// A producer that has queued another [`NUDGE_EVERY`](super::intake::NUDGE_EVERY) entries
    /// on `shard` gives way to its worker if the shard's callbacks are far behind ("Floods" in
    /// the module docs): it yields its CPU once past [`GIVE_WAY_BACKLOG`], and past four times
    /// that it pauses until the backlog is back under twice it, for at most [`MOST_PAUSE`].
    /// Not on the domain's own workers.
    #[cold]
    #[inline(never)]
    fn give_way_if_far_ahead(&self, shard: &Shard) {
        if self.on_worker_thread() {
            return;
        }
        let mut pending = shard.pending();
        if pending <= GIVE_WAY_BACKLOG {
            return;
        }
        self.producers_gave_way.fetch_add(1, Relaxed);
        if pending <= 4 * GIVE_WAY_BACKLOG {
            std::thread::yield_now();
            return;
        }
        let start = Instant::now();
        while pending > 2 * GIVE_WAY_BACKLOG && start.elapsed() < MOST_PAUSE {
            shard.wake();
            std::thread::sleep(PAUSE_STEP);
            pending = shard.pending();
        }
    }

    /// Steps 1 and 2 of the module docs, with the thread's slot.
    #[cfg(not(rcukit_loom))]
    #[inline]
    fn push_in_slot<P: GpPort>(
        &self,
        gp: &P,
        slot: &mut ProducerSlot,
        mut callback: Callback,
        few: &mut Few,
    ) -> After {
        if slot.forked() {
            gp.check_fork();
            slot.forget_chunk_after_fork();
        }
        // SAFETY: the shard belongs to this domain, which is alive.
        let shard = unsafe { &*slot.shard };
        let drop_only = callback.is_drop_only();
        // Retired objects stay on this thread (see `local`), except on a worker, whose chains
        // stay on its own list.
        let keep_local = drop_only && self.config.retire_on_producers && !self.on_worker_thread();
        // Count before publishing, so `pending` never under-counts.
        slot.counters.add(callback.bytes() as u64);
        if keep_local {
            match self.retire_local(gp, slot, callback, few) {
                Ok(seal) => {
                    return After::Local {
                        seal,
                        shared: Arc::as_ptr(&slot.counters),
                        shard: slot.shard,
                    }
                }
                // The worker is stealing the list right now: use the intake this once.
                Err(back) => callback = back,
            }
        } else if !drop_only && slot.counters.local.len() > 0 {
            // Objects this thread retired earlier are dropped before this closure runs.
            slot.flush_local(shard, false);
        }
        let nudge = slot.producer.push(&shard.intake, Work::Callback(callback));
        shard.wake_if_sleeping(nudge, self.config.fence);
        After::Intake(slot.shard, nudge)
    }

    /// Add a drop-only callback to this thread's local list (see [`local`]), and take up to
    /// [`FEW`](local::FEW) ready ones to drop. Returns what to do once the thread-local table is
    /// let go (after a seal) and the ready callbacks, or the callback if the worker is stealing
    /// the list.
    #[cfg(not(rcukit_loom))]
    #[inline]
    fn retire_local<P: GpPort>(
        &self,
        gp: &P,
        slot: &mut ProducerSlot,
        callback: Callback,
        few: &mut Few,
    ) -> Result<Option<AfterSeal>, Callback> {
        let local = &slot.counters.local;
        let Some(mut guard) = local.enter(self.config.fence) else {
            return Err(callback);
        };
        let ops = local.count_op();
        let next = guard.with(|list| list.push(callback));
        let mut sealed = None;
        let by = if next == local::Next::Nothing {
            // Every few calls, a few drops (a drop that retires more objects only queues them:
            // its thread is running drops).
            if ops % local::DROP_EVERY == 0 && !drops_must_wait() {
                let backlog = self.few_backlog();
                guard.with(|list| list.take_few(few, backlog))
            } else {
                None
            }
        } else {
            let running = drops_must_wait();
            // Read after every callback of the block was queued (with a full fence).
            let cookie = (next == local::Next::Seal).then(|| gp.cookie());
            let (facts, by) = guard.with(|list| self.seal_and_look(gp, list, cookie, running, few));
            sealed = cookie.zip(facts);
            by
        };
        if let Some(by) = by {
            slot.counters.add_released(by, few.len() as u64);
        }
        if !few.is_empty() {
            guard.mark_dropping();
        }
        drop(guard);
        Ok(sealed.map(|(cookie, facts)| {
            let past_thresholds = facts.backlog.0 as u64 > self.config.backlog_callbacks
                || facts.backlog.1 > self.config.backlog_bytes;
            let expedite = gp.expedited_releases();
            AfterSeal {
                shared: slot.counters.clone(),
                cookie,
                try_expedited: facts.newest.filter(|_| facts.try_due && expedite),
                hurry: facts.newest.filter(|_| expedite && past_thresholds),
            }
        }))
    }

    /// The list length past which a `retire` drops two ready objects instead of one: twice
    /// the cadence of tried grace periods, which is what the list holds between two of them.
    #[cfg(not(rcukit_loom))]
    #[inline]
    fn few_backlog(&self) -> usize {
        usize::try_from(self.config.producer_backlog_callbacks.saturating_mul(2))
            .unwrap_or(usize::MAX)
    }

    /// A seal (with `cookie`) or a poll of the local list: seal the open block, see whether
    /// the oldest block has been released, take up to [`FEW`](local::FEW) ready callbacks
    /// unless `running`; return what released them and, after a seal, what the seal found.
    #[cfg(not(rcukit_loom))]
    fn seal_and_look<P: GpPort>(
        &self,
        gp: &P,
        list: &mut local::LocalList,
        cookie: Option<GpCookie>,
        running: bool,
        few: &mut Few,
    ) -> (Option<SealFacts>, Option<ReleasedBy>) {
        if let Some(cookie) = cookie {
            list.seal(cookie);
        }
        if let Some(front) = list.front_to_check() {
            if let Some(by) = gp.released(&front, false) {
                list.release_front(by);
            }
        }
        let by = if running {
            None
        } else {
            list.take_few(few, self.few_backlog())
        };
        let facts = cookie.map(|_| {
            let config = &self.config;
            SealFacts {
                backlog: list.backlog(),
                newest: list.newest_cookie(),
                try_due: !running
                    && list.try_due(
                        config.producer_backlog_callbacks,
                        config.producer_backlog_bytes,
                        |c| gp.is_released(c),
                    ),
            }
        });
        (facts, by)
    }

    /// Queue from a thread whose thread-local storage is already destroyed (a callback queued
    /// by another thread-local's destructor): a chunk of its own.
    #[cold]
    pub(super) fn push_without_thread_local<P: GpPort>(&self, gp: &P, callback: Callback) {
        gp.check_fork();
        let shard = &self.shards[0];
        crate::sync::lock(&shard.producers).add_unregistered(callback.bytes() as u64);
        shard.intake.push_single(Work::Callback(callback));
        shard.wake_if_sleeping(true, self.config.fence);
    }
}

/// A thread's producer state for one domain: its shard, its chunk, its counters.
pub(crate) struct ProducerSlot {
    /// Valid while the domain lives, which is whenever `call()` can reach this slot.
    pub(crate) shard: *const Shard,
    /// For the thread-exit destructor, which may run after the domain is gone.
    shard_weak: Weak<Shard>,
    pub(crate) producer: Producer,
    pub(crate) counters: Arc<ProducerShared>,
    /// The domain's barrier pair (for the local list's lock).
    fence: FenceKind,
    /// The fork generation the slot was last used in (see [`fork`]).
    generation: u64,
}

impl ProducerSlot {
    /// A slot on `shard`, registered as one of its producers.
    pub(crate) fn new(shard: &Arc<Shard>, fence: FenceKind) -> ProducerSlot {
        let counters = lock(&shard.producers).register();
        ProducerSlot {
            shard: Arc::as_ptr(shard),
            shard_weak: Arc::downgrade(shard),
            producer: Producer::new(),
            counters,
            fence,
            generation: fork::generation(),
        }
    }

    /// Has the process forked since this slot was last used? Then call
    /// [`forget_chunk_after_fork`](Self::forget_chunk_after_fork) (after repairing the domain).
    #[inline]
    pub(crate) fn forked(&self) -> bool {
        self.generation != fork::generation()
    }

    /// Forget the chunk this thread was filling: the worker that had it is gone (see
    /// [`fork`]).
    #[cold]
    #[inline(never)]
    pub(crate) fn forget_chunk_after_fork(&mut self) {
        self.producer.abandon();
        self.generation = fork::generation();
    }

    /// Move this thread's local list of retired objects to its intake chunk, in order, so
    /// that the worker runs them. With `wait` false it gives up if the worker is stealing the
    /// list right now (the worker then has it); with `wait` true it waits for the steal.
    pub(crate) fn flush_local(&mut self, shard: &Shard, wait: bool) {
        let mut backoff = crate::sync::Backoff::new();
        let mut guard = loop {
            if let Some(guard) = self.counters.local.enter(self.fence) {
                break guard;
            }
            if !wait {
                return;
            }
            backoff.snooze();
        };
        // Published while still holding the list: a worker stealing for a barrier waits for
        // us, then looks at the intake again, so the objects are never out of its sight.
        let mut any = false;
        for callback in guard.with(|list| list.take_all()).into_callbacks() {
            any = true;
            self.producer.push(&shard.intake, Work::Callback(callback));
        }
        drop(guard);
        if any {
            shard.wake_if_sleeping(true, self.fence);
        }
    }
}

impl Drop for ProducerSlot {
    fn drop(&mut self) {
        if let Some(shard) = self.shard_weak.upgrade() {
            // Retired objects still in the local list go to the worker (no steal waits for
            // this thread: it is not running any).
            self.flush_local(&shard, true);
            // The chunk has a share of its own: sealing it is safe even if the domain is gone.
            self.producer.seal();
            lock(&shard.producers).leave(&self.counters);
        } else {
            self.producer.seal();
        }
    }
}

/// A thread's slot for one domain, as its table holds it (boxed: the table hands out pointers
/// to it).
struct SlotEntry(Box<ProducerSlot>);

impl Entry for SlotEntry {
    type Target = ProducerSlot;

    fn target(&mut self) -> NonNull<ProducerSlot> {
        NonNull::from(&mut *self.0)
    }

    /// Dropping the entry then flushes nothing (the domain is gone), seals the chunk and
    /// leaves.
    fn domain_gone(&self) -> bool {
        self.0.shard_weak.strong_count() == 0
    }
}

thread_local! {
    /// The calling thread's producer slots, one per domain it has queued to (see
    /// [`per_thread`](crate::docs::internal::per_thread)).
    static PRODUCERS: PerDomain<SlotEntry> = const { PerDomain::new() };
}

/// Run `f` on the calling thread's slot for `domain` (created by `create` on first use).
/// `None` if the thread's thread-local storage is already destroyed (a callback queued by
/// another thread-local's destructor).
///
/// # Safety
///
/// * The domain `domain` must be alive for the whole call (its `push` borrows it), so that the
///   slot's shard pointer is valid.
/// * Re-entrancy: `f` must not call `with_slot` again, directly or through user code (running
///   callbacks, dropping retired objects): `f` holds the only reference to the slot, and a
///   nested call could drop or alias it. Do such work after `with_slot` returns.
#[inline]
pub(crate) unsafe fn with_slot<R>(
    domain: u64,
    create: impl FnOnce() -> ProducerSlot,
    f: impl FnOnce(&mut ProducerSlot) -> R,
) -> Option<R> {
    PRODUCERS
        .try_with(|p| {
            let slot = p.get_or_insert(DomainKey::new(domain), || SlotEntry(Box::new(create())));
            // Slots are boxed and owned by this thread's table, which drops them only at thread
            // exit or (when it adds a slot) once their domain is gone.
            // SAFETY: the caller keeps `domain` alive, so `slot` is valid (above), and its
            // no-re-entry promise makes this the only reference to the slot while `f` runs.
            f(unsafe { &mut *slot.as_ptr() })
        })
        .ok()
}
