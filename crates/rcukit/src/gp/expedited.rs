//! Expedited grace periods: run by the caller, shared by concurrent callers.
//!
//! `synchronize_expedited()` snapshots the expedited counter, then takes the right to run an
//! expedited grace period (the `running` flag). Holding it, it checks the snapshot once more:
//! if another caller's grace period ran while this one waited, and that grace period *started
//! after the snapshot*, the work is done and the caller returns without running one (it
//! piggybacks). Otherwise it runs the grace period itself with the IPI-ing heavy barrier
//! (`MEMBARRIER_CMD_PRIVATE_EXPEDITED`). A caller that finds the flag taken waits for the
//! domain's grace-period event, which fires when the flag is released, and looks again.
//!
//! # Why piggybacking is safe
//!
//! The snapshot is the value the counter takes at the end of the first grace period that starts
//! after the snapshot was read (see `seq`); a counter at or past it proves that such
//! a grace period has completed, which is all the caller needs. A storm of N callers therefore
//! costs about two grace periods: the one running when they arrive (too early for them) and one
//! more that they all share.
//!
//! # Why a flag and not a mutex
//!
//! The flag is taken with an `Acquire` compare-and-swap and released with a `Release` store,
//! which is all a mutex without data gives. Unlike a mutex it can be cleared after `fork()`
//! when the thread that held it does not exist in the child (see [`fork`](crate::fork)); the
//! grace period that thread had started is then finished by the next caller, which finds the
//! counter's state bits set while it holds the flag (only possible after a fork).
//!
//! # Polled expedited requests
//!
//! [`Rcu::start_poll_expedited`](crate::Rcu::start_poll_expedited) must not block the caller,
//! so it hands its snapshot to a per-domain
//! helper thread (`ExpeditedGp::run_helper`) that runs expedited grace periods until the
//! highest requested snapshot is reached (the kernel queues work for this on a workqueue).

use super::{GpCore, GpEvent, GpKind};
use crate::seq::{self, SeqCounter};
use crate::sync::{lock, AtomicBool};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::{Condvar, Mutex};

struct HelperRequests {
    needed: u64,
    shutdown: bool,
}

/// The expedited grace-period engine of one domain.
pub(crate) struct ExpeditedGp {
    pub(crate) seq: SeqCounter,
    /// Set while a caller runs (or decides whether to run) an expedited grace period of this
    /// domain; waiting for it is where concurrent callers find out that someone else did their
    /// work.
    running: AtomicBool,
    completed: AtomicU64,
    helper: Mutex<HelperRequests>,
    helper_wake: Condvar,
}

impl ExpeditedGp {
    pub(crate) fn new() -> ExpeditedGp {
        let seq = SeqCounter::new();
        let needed = seq.load();
        ExpeditedGp {
            seq,
            running: AtomicBool::new(false),
            completed: AtomicU64::new(0),
            helper: Mutex::new(HelperRequests {
                needed,
                shutdown: false,
            }),
            helper_wake: Condvar::new(),
        }
    }

    /// Number of expedited grace periods actually run (piggybacked callers run none).
    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Relaxed)
    }

    /// Make sure an expedited grace period that started after the caller's snapshot `snap` has
    /// completed, running one if nobody else has.
    pub(crate) fn run_until(&self, snap: u64, core: &GpCore, event: &GpEvent) {
        loop {
            if self.seq.poll(snap) {
                return;
            }
            if self
                .running
                .compare_exchange(false, true, Acquire, Relaxed)
                .is_ok()
            {
                break;
            }
            // Someone else runs one: wait until the flag is released, then look again.
            self.wait_for_turn(event);
        }
        if self.seq.poll(snap) {
            // Piggybacked on a grace period that ran while we waited.
            self.running.store(false, Release);
            event.notify_waiters();
            return;
        }
        if seq::state(self.seq.load()) == 0 {
            self.seq.start();
        } // else: one whose runner did not survive `fork()`; finishing it is enough
        core.wait_for_readers(GpKind::Expedited);
        self.seq.end();
        self.completed.fetch_add(1, Relaxed);
        self.running.store(false, Release);
        event.notify();
    }

    /// Wait until the `running` flag may be free: for the grace-period event (which fires
    /// after every release of the flag). Under loom, a yield.
    fn wait_for_turn(&self, event: &GpEvent) {
        #[cfg(loom)]
        {
            let _ = event;
            loom::thread::yield_now();
        }
        #[cfg(not(loom))]
        event.wait_until(|| !self.running.load(Acquire));
    }

    /// After `fork()`: the flag's holder, if any, does not exist in this process (see
    /// [`fork`](crate::fork)).
    pub(crate) fn after_fork(&self) {
        self.running.store(false, Release);
    }

    /// Hold this engine's lock across `fork()` (see [`fork`](crate::fork)).
    pub(crate) fn hold_for_fork(&'static self, held: &mut crate::fork::Held) {
        held.hold(&self.helper);
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
        let mut requests = lock(&self.helper);
        if seq::cmp_lt(requests.needed, snap) {
            requests.needed = snap;
            self.helper_wake.notify_all(); // one waiter, the helper thread
        }
    }

    pub(crate) fn shutdown(&self) {
        lock(&self.helper).shutdown = true;
        self.helper_wake.notify_all();
    }

    /// The body of the helper thread.
    pub(crate) fn run_helper(&self, core: &GpCore, event: &GpEvent) {
        loop {
            let needed = {
                let mut requests = lock(&self.helper);
                while !requests.shutdown && seq::done(self.seq.load(), requests.needed) {
                    requests = self
                        .helper_wake
                        .wait(requests)
                        .unwrap_or_else(|e| e.into_inner());
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
