//! The producer's side of `call` and `retire`: where a new callback goes.
//!
//! 1. A drop-only callback (`retire`) on a domain with `retire_on_producers`, from a thread
//!    that is not one of the domain's workers, joins the thread's local list (see
//!    [`local`](super::local)); when that seals a block or finds the oldest one ready, the
//!    producer goes on in [`drops`](super::drops) once it has let go of its slot.
//! 2. Anything else is published on the thread's intake chunk of its shard, and the worker is
//!    woken if it sleeps (see [`shard`](super::shard)). A closure first flushes the thread's
//!    local list ahead of it, so it runs after every object the thread retired before it.
//! 3. A thread whose thread-local storage is gone (or any thread under loom, whose models
//!    drive `Producer` by hand) queues a chunk of its own on shard 0.

use super::callback::{Callback, Work};
use super::port::GpPort;
#[cfg(not(rcukit_loom))]
use super::port::ReleasedBy;
use super::Callbacks;
#[cfg(not(rcukit_loom))]
use super::{
    drops::AfterSeal, invoke::running_drops, local, local::Few, producers::ProducerShared,
    shard::Shard, slots,
};
#[cfg(not(rcukit_loom))]
use crate::seq::GpCookie;
#[cfg(not(rcukit_loom))]
use std::sync::Arc;

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
    /// Queued on the intake of this shard (valid while the domain lives).
    Intake(*const Shard),
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
    /// Queue a callback. Never blocks, never waits for a grace period.
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
            slots::ProducerSlot::new(shard, self.config.fence)
        };
        // SAFETY: we are borrowed from the domain, alive for this call; `push_in_slot` runs no
        // user code and queues nothing through the table (ready blocks run below, after
        // `with_slot` has returned).
        let after = unsafe {
            slots::with_slot(self.domain, create, |slot| {
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
            Some(After::Intake(shard)) => {
                // SAFETY: the shard belongs to this domain, which is alive.
                let shard = unsafe { &*shard };
                if drop_only && self.config.retire_on_producers && shard.ready.queued() > 0 {
                    self.run_ready_batch(gp, shard);
                }
            }
            None => {}
        }
    }

    /// Steps 1 and 2 of the module docs, with the thread's slot.
    #[cfg(not(rcukit_loom))]
    #[inline]
    fn push_in_slot<P: GpPort>(
        &self,
        gp: &P,
        slot: &mut slots::ProducerSlot,
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
        After::Intake(slot.shard)
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
        slot: &mut slots::ProducerSlot,
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
            if ops % local::DROP_EVERY == 0 && !running_drops() {
                let backlog = self.few_backlog();
                guard.with(|list| list.take_few(few, backlog))
            } else {
                None
            }
        } else {
            let running = running_drops();
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
