#![doc = include_str!("expedited.md")]

use super::{GpCore, GpEvent, GpKind};
use crate::seq::{self, SeqCounter};
use crate::sync::lock;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

struct HelperRequests {
    needed: u64,
    shutdown: bool,
}

/// The expedited grace-period engine of one domain.
pub(crate) struct ExpeditedGp {
    pub(crate) seq: SeqCounter,
    /// True while a caller runs (or decides whether to run) an expedited grace period of this
    /// domain; waiting for it is where concurrent callers find out that someone else did their
    /// work.
    turn: crate::sync::Turn,
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
            turn: crate::sync::Turn::new(),
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
        // Each pass ends one grace period. The first may be one that was already started when
        // the turn came to us (left started by a tried grace period, or by a runner that did
        // not survive `fork()`); if `snap` was taken while it ran, it does not count, and the
        // next pass runs one that does.
        while !self.seq.poll(snap) {
            if !self.turn.take_unless(|| self.seq.poll(snap)) {
                return; // piggybacked on a grace period that ran while we waited
            }
            if seq::state(self.seq.load()) == 0 {
                self.seq.start();
            } // else: one left started (see above): finish it, with a full scan of our own
            core.wait_for_readers(GpKind::Expedited);
            self.seq.end();
            self.completed.fetch_add(1, Relaxed);
            self.turn.give_back();
            event.notify();
        }
    }

    /// Without waiting for anybody, try to make sure an expedited grace period that started
    /// after the snapshot `snap` has completed, running it in the caller: true if one has
    /// (here or elsewhere), false if the turn is taken, or a reader was still in a critical
    /// section after `patience` (see "Tried grace periods" in the module docs).
    pub(crate) fn try_run(
        &self,
        snap: u64,
        core: &GpCore,
        event: &GpEvent,
        patience: Duration,
    ) -> bool {
        // A snapshot taken while a grace period ran needs that one and the next: two at most.
        for _ in 0..2 {
            if self.seq.poll(snap) {
                return true;
            }
            // Never wait, not even for the turn's mutex: its holder may be descheduled.
            if !self.turn.try_take() {
                return false;
            }
            if seq::state(self.seq.load()) == 0 {
                self.seq.start();
            } // else: a grace period a tried one left started; finishing it is enough
            let ended = core.try_wait_for_readers(patience);
            if ended {
                self.seq.end();
                self.completed.fetch_add(1, Relaxed);
            }
            self.turn.give_back();
            if !ended {
                // Left started: the helper finishes it (and whatever else `snap` needs).
                self.request(snap);
                return false;
            }
            event.notify();
        }
        self.seq.poll(snap)
    }

    /// After `fork()`: the turn's holder, if any, does not exist in this process (see
    /// [`fork`](crate::docs::internal::domain::fork)).
    pub(crate) fn after_fork(&self) {
        self.turn.after_fork();
    }

    /// Hold this engine's lock across `fork()` (see [`fork`](crate::docs::internal::domain::fork)).
    #[cfg(unix)]
    pub(crate) fn hold_for_fork(&'static self, held: &mut crate::sync::fork::Held) {
        held.hold(&self.helper);
        self.turn.hold_for_fork(held);
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

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use super::*;
    use crate::barrier::FenceKind;
    use crate::reader::{ReaderRecord, ThreadInfo};
    use std::sync::Arc;
    use std::time::Duration;

    /// A tried grace period that gives up leaves the counter started with the turn free. A
    /// caller whose snapshot was taken then needs that grace period *and* another one: the
    /// torture caught `run_until` returning after finishing only the first (a cookie taken
    /// before `synchronize_expedited()` did not poll complete after it, once in 30 minutes).
    #[test]
    fn a_grace_period_left_started_does_not_count_for_a_snapshot_taken_while_it_ran() {
        let core = GpCore::new(
            FenceKind::SeqCst,
            Duration::from_secs(3600),
            "test".into(),
            Default::default(),
        );
        let event = GpEvent::new("test".into(), Default::default());
        let exp = ExpeditedGp::new();
        let reader = Arc::new(ReaderRecord::new(
            ThreadInfo::current(),
            Arc::downgrade(&core.registry),
        ));
        core.registry.register(reader.clone());
        reader.enter(&core.read_side.epoch, FenceKind::SeqCst);
        // The reader is in the way: the try gives up and leaves its grace period started.
        let first = exp.seq.snap();
        assert!(!exp.try_run(first, &core, &event, Duration::from_micros(10)));
        assert_ne!(seq::state(exp.seq.load()), 0, "left started");
        // Taken while that grace period is under way: it needs the next one too.
        let snap = exp.seq.snap();
        assert!(!reader.exit());
        exp.run_until(snap, &core, &event);
        assert!(
            exp.seq.poll(snap),
            "returned before a full grace period after the snapshot"
        );
        assert!(exp.seq.poll(first));
    }
}
