//! Drops run by producer threads: blocks of a thread's own local list, and ready batches the
//! worker hands back (see [`local`](super::local) and [`ready`](super::ready)).
//!
//! 1. After a `retire` sealed a block (or found the oldest one ready) and let go of its slot,
//!    the producer requests the grace periods its list needs: the normal one for the new
//!    stamp; every `producer_backlog_*` objects or bytes, an expedited one it tries itself
//!    (see [`local`](super::local)), taking the blocks it releases; and past the backlog
//!    thresholds an expedited one on the helper thread.
//! 2. It runs the ready blocks it took, marked as running drops (so drops that retire more
//!    objects only queue them, see [`invoke`](super::invoke)), each under `catch_unwind`.
//!    Until they have run and been counted, its list stays marked `dropping`, also on unwind,
//!    so that a barrier's steal waits for them.
//! 3. Inside a read-side critical section of the domain, or while unwinding, it hands the
//!    blocks to the worker instead.
//! 4. After a `retire` that went to the intake, a producer runs one ready batch the worker
//!    handed back, if any (with the same three exceptions: inside a read-side critical section,
//!    unwinding, already running drops).

use super::callback::Callback;
use super::invoke::{running_drops, RunningDrops};
use super::local::Few;
use super::port::{GpPort, ReleasedBy};
use super::producers::ProducerShared;
use super::ready;
use super::shard::Shard;
use super::Callbacks;
use crate::seq::GpCookie;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

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

/// Adds what a producer ran to its counters and clears its list's `dropping` mark when
/// dropped (also on unwind).
struct FinishDropping<'a> {
    shared: &'a ProducerShared,
    invoked: u64,
    bytes: u64,
}

impl Drop for FinishDropping<'_> {
    #[inline]
    fn drop(&mut self) {
        self.shared.add_invoked(self.invoked, self.bytes);
        self.shared.local.finished_dropping();
    }
}

impl Callbacks {
    /// After a seal: step 1 of the module docs.
    pub(crate) fn after_seal<P: GpPort>(&self, gp: &P, after: AfterSeal) {
        gp.request_normal(&after.cookie);
        if let Some(newest) = after.try_expedited {
            self.try_expedited_here(gp, &newest, &after.shared);
        } else if let Some(newest) = after.hurry {
            // Past the backlog thresholds: the kernel's hurry, on the helper thread.
            gp.request_expedited(&newest);
        }
    }

    /// Step 1's tried grace period: end an expedited grace period covering `newest` in this
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

    /// Steps 2 and 3 of the module docs: drop `few` ready callbacks taken from this thread's
    /// list (`shared`, marked `dropping`), or hand them to the worker of `shard` inside a
    /// read-side critical section of the domain or while unwinding.
    #[inline]
    pub(crate) fn drop_few<P: GpPort>(
        &self,
        gp: &P,
        few: &mut Few,
        shared: &ProducerShared,
        shard: &Shard,
    ) {
        // Until they have run (or been handed to the worker) and been counted, the list stays
        // marked `dropping`; also on unwind.
        let mut finish = FinishDropping {
            shared,
            invoked: 0,
            bytes: 0,
        };
        if gp.is_reading_here() || std::thread::panicking() {
            shard.ready.publish(few.drain().collect());
            shard.wake();
            return;
        }
        let _running = RunningDrops::enter(self.domain);
        let (invoked, bytes) = self.invoke_each(&mut few.drain());
        finish.invoked = invoked;
        finish.bytes = bytes;
    }

    /// Count `n` callbacks released by `by` (an expedited grace period when `None`: the stamp
    /// was found released before, and only the expedited counter can have done it then).
    pub(crate) fn count_released_by(&self, by: Option<ReleasedBy>, n: u64) {
        if n == 0 {
            return;
        }
        match by {
            Some(ReleasedBy::Normal) => self.released_by_normal.fetch_add(n, Relaxed),
            _ => self.released_by_expedited.fetch_add(n, Relaxed),
        };
    }

    /// Run one ready batch of drop-only callbacks on this producer thread (step 4 of the
    /// module docs), unless this thread is already running one.
    #[cold]
    #[inline(never)]
    pub(crate) fn run_ready_batch<P: GpPort>(&self, gp: &P, shard: &Shard) {
        if running_drops() || gp.is_reading_here() || std::thread::panicking() {
            return;
        }
        let Some(batch) = shard.ready.take() else {
            return;
        };
        // Counted as running until `finished`, also on unwind, so a barrier waits for it.
        let mut batch = ready::Taken::new(&shard.ready, batch);
        let _running = RunningDrops::enter(self.domain);
        let ran = self.run_batch(shard, batch.callbacks());
        self.run_by_producers.fetch_add(ran, Relaxed);
    }

    /// Run every callback of `batch` (emptying it), each under `catch_unwind`, and add them to
    /// the shard's invoked counters. Returns how many ran.
    pub(crate) fn run_batch(&self, shard: &Shard, batch: &mut Vec<Callback>) -> u64 {
        let (invoked, bytes) = self.invoke_all(batch);
        shard.worker.count_invoked(invoked, bytes);
        invoked
    }
}
