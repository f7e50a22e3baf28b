//! Expedited grace periods: run by the caller, shared by concurrent callers.
//!
//! `synchronize_expedited()` snapshots the expedited counter, then takes the expedited mutex.
//! Holding it, it checks the snapshot once more: if another caller's grace period ran while
//! this one waited for the mutex, and that grace period *started after the snapshot*, the work
//! is done and the caller returns without running one (it piggybacks). Otherwise it runs the
//! grace period itself with the IPI-ing heavy barrier (`MEMBARRIER_CMD_PRIVATE_EXPEDITED`).
//!
//! # Why piggybacking is safe
//!
//! The snapshot is the value the counter takes at the end of the first grace period that starts
//! after the snapshot was read (see `seq`); a counter at or past it proves that such
//! a grace period has completed, which is all the caller needs. A storm of N callers therefore
//! costs about two grace periods: the one running when they arrive (too early for them) and one
//! more that they all share.
//!
//! # Polled expedited requests
//!
//! [`Rcu::start_poll_expedited`](crate::Rcu::start_poll_expedited) must not block the caller,
//! so it hands its snapshot to a per-domain
//! helper thread (`ExpeditedGp::run_helper`) that runs expedited grace periods until the
//! highest requested snapshot is reached (the kernel queues work for this on a workqueue).

use super::{GpCore, GpEvent, GpKind};
use crate::seq::{self, SeqCounter};
use crate::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

struct HelperRequests {
    needed: u64,
    shutdown: bool,
}

/// The expedited grace-period engine of one domain.
pub(crate) struct ExpeditedGp {
    pub(crate) seq: SeqCounter,
    /// Serializes expedited grace periods of this domain; waiting for it is where concurrent
    /// callers find out that someone else did their work.
    mutex: Mutex<()>,
    completed: AtomicU64,
    helper: parking_lot::Mutex<HelperRequests>,
    helper_wake: parking_lot::Condvar,
}

impl ExpeditedGp {
    pub(crate) fn new() -> ExpeditedGp {
        let seq = SeqCounter::new();
        let needed = seq.load();
        ExpeditedGp {
            seq,
            mutex: Mutex::new(()),
            completed: AtomicU64::new(0),
            helper: parking_lot::Mutex::new(HelperRequests {
                needed,
                shutdown: false,
            }),
            helper_wake: parking_lot::Condvar::new(),
        }
    }

    /// Number of expedited grace periods actually run (piggybacked callers run none).
    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Relaxed)
    }

    /// Make sure an expedited grace period that started after the caller's snapshot `snap` has
    /// completed, running one if nobody else has.
    pub(crate) fn run_until(&self, snap: u64, core: &GpCore, event: &GpEvent) {
        if self.seq.poll(snap) {
            return;
        }
        let guard = self.mutex.lock();
        if self.seq.poll(snap) {
            return; // piggybacked on a grace period that ran while we waited
        }
        self.seq.start();
        core.wait_for_readers(GpKind::Expedited);
        self.seq.end();
        self.completed.fetch_add(1, Relaxed);
        drop(guard);
        event.notify();
    }

    /// `synchronize_expedited`: snapshot, then run or piggyback.
    pub(crate) fn synchronize(&self, core: &GpCore, event: &GpEvent) {
        let snap = self.seq.snap();
        self.run_until(snap, core, event);
    }

    /// Ask the helper thread to reach `snap` without blocking the caller.
    pub(crate) fn request(&self, snap: u64) {
        if seq::half_done(self.seq.load(), snap) {
            return;
        }
        let mut requests = self.helper.lock();
        if seq::cmp_lt(requests.needed, snap) {
            requests.needed = snap;
            self.helper_wake.notify_one();
        }
    }

    pub(crate) fn shutdown(&self) {
        self.helper.lock().shutdown = true;
        self.helper_wake.notify_one();
    }

    /// The body of the helper thread.
    pub(crate) fn run_helper(&self, core: &GpCore, event: &GpEvent) {
        loop {
            let needed = {
                let mut requests = self.helper.lock();
                while !requests.shutdown && seq::done(self.seq.load(), requests.needed) {
                    self.helper_wake.wait(&mut requests);
                }
                if requests.shutdown {
                    return;
                }
                requests.needed
            };
            self.run_until(needed, core, event);
        }
    }
}
