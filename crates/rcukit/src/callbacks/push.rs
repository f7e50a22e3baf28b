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
use super::Callbacks;
#[cfg(not(rcukit_loom))]
use super::{drops::AfterSeal, invoke::running_drops, local, shard::Shard, slots};

/// What `push` does once it has let go of the thread-local table.
#[cfg(not(rcukit_loom))]
enum After {
    /// Queued on the intake of this shard (valid while the domain lives).
    Intake(*const Shard),
    /// Kept in the local list; after a seal or a poll that found a ready block, there is
    /// more to do.
    Local(Option<AfterSeal>),
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
                self.push_in_slot(gp, slot, callback)
            })
        };
        if let Some(callback) = callback {
            self.push_without_thread_local(gp, callback);
        }
        match after {
            Some(After::Local(Some(after))) => self.after_seal(gp, after),
            Some(After::Intake(shard)) => {
                // SAFETY: the shard belongs to this domain, which is alive.
                let shard = unsafe { &*shard };
                if drop_only && self.config.retire_on_producers && shard.ready.queued() > 0 {
                    self.run_ready_batch(gp, shard);
                }
            }
            _ => {}
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
            match self.retire_local(gp, slot, callback) {
                Ok(after) => return After::Local(after),
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

    /// Add a drop-only callback to this thread's local list (see [`local`]). Returns what to
    /// do once the thread-local table is let go (after a seal), or the callback if the worker
    /// is stealing the list.
    #[cfg(not(rcukit_loom))]
    #[inline]
    fn retire_local<P: GpPort>(
        &self,
        gp: &P,
        slot: &mut slots::ProducerSlot,
        callback: Callback,
    ) -> Result<Option<AfterSeal>, Callback> {
        let local = &slot.counters.local;
        let Some(mut guard) = local.enter(self.config.fence) else {
            return Err(callback);
        };
        local.count_op();
        let cookie = match guard.with(|list| list.push(callback)) {
            local::Next::Nothing => return Ok(None),
            // Read after every callback of the block was queued (with a full fence).
            local::Next::Seal => Some(gp.cookie()),
            local::Next::Poll => {
                let oldest = guard.with(|list| list.oldest_cookie());
                if !oldest.is_some_and(|c| gp.is_released(&c)) {
                    return Ok(None);
                }
                None
            }
        };
        // A drop that retires more objects only queues them: its thread is running blocks.
        let running = running_drops();
        let mut ready = Vec::new();
        let config = &self.config;
        let (backlog, newest, try_due) = guard.with(|list| {
            if let Some(cookie) = cookie {
                list.seal(cookie);
            }
            if !running {
                list.take_ready(|c| gp.is_released(c), &mut ready);
            }
            let try_due = cookie.is_some()
                && !running
                && list.try_due(
                    config.producer_backlog_callbacks,
                    config.producer_backlog_bytes,
                    |c| gp.is_released(c),
                );
            (list.backlog(), list.newest_cookie(), try_due)
        });
        if !ready.is_empty() {
            guard.mark_dropping();
        }
        drop(guard);
        // Inside a read-side critical section of this domain, or while unwinding (a drop that
        // panicked then would abort the process), ready blocks go to the worker.
        let hand_off = !ready.is_empty() && (gp.is_reading_here() || std::thread::panicking());
        let past_thresholds = backlog.0 as u64 > self.config.backlog_callbacks
            || backlog.1 > self.config.backlog_bytes;
        Ok(Some(AfterSeal {
            shared: slot.counters.clone(),
            shard: slot.shard,
            hand_off,
            cookie,
            try_expedited: newest.filter(|_| try_due && gp.expedited_releases()),
            hurry: newest
                .filter(|_| cookie.is_some() && gp.expedited_releases() && past_thresholds),
            ready,
        }))
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
