#![doc = include_str!("normal.md")]

use super::{GpCore, GpEvent, GpKind};
use crate::seq::{self, SeqCounter};
use crate::sync::lock;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

struct Requests {
    /// The highest snapshot anybody asked for.
    needed: u64,
    shutdown: bool,
}

/// The normal grace-period engine of one domain.
pub(crate) struct NormalGp {
    pub(crate) seq: SeqCounter,
    requests: Mutex<Requests>,
    wake: Condvar,
    delay: Duration,
    completed: AtomicU64,
}

impl NormalGp {
    pub(crate) fn new(delay: Duration) -> NormalGp {
        let seq = SeqCounter::new();
        let needed = seq.load();
        NormalGp {
            seq,
            requests: Mutex::new(Requests {
                needed,
                shutdown: false,
            }),
            wake: Condvar::new(),
            delay,
            completed: AtomicU64::new(0),
        }
    }

    /// Number of normal grace periods completed.
    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Relaxed)
    }

    /// Ask for a normal grace period that ends the counter at or after `snap`.
    pub(crate) fn request(&self, snap: u64) {
        if seq::half_done(self.seq.load(), snap) {
            return;
        }
        let mut requests = lock(&self.requests);
        if seq::cmp_lt(requests.needed, snap) {
            requests.needed = snap;
            self.wake.notify_all(); // one waiter, the grace-period thread
        }
    }

    /// Stop the grace-period thread after the grace period in progress (if any).
    pub(crate) fn shutdown(&self) {
        lock(&self.requests).shutdown = true;
        self.wake.notify_all();
    }

    /// The body of the grace-period thread.
    pub(crate) fn run(&self, core: &GpCore, event: &GpEvent) {
        if seq::state(self.seq.load()) != 0 {
            // A grace period whose thread did not survive `fork()`: finish it here (its wait
            // for readers, in this process) before anything else.
            self.finish_one(core, event);
        }
        loop {
            {
                let mut requests = lock(&self.requests);
                while !requests.shutdown && seq::done(self.seq.load(), requests.needed) {
                    requests = self.wake.wait(requests).unwrap_or_else(|e| e.into_inner());
                }
                if requests.shutdown {
                    return;
                }
                // The batching window: requests arriving now join this grace period.
                let deadline = std::time::Instant::now() + self.delay;
                loop {
                    let now = std::time::Instant::now();
                    if requests.shutdown || now >= deadline {
                        break;
                    }
                    requests = self
                        .wake
                        .wait_timeout(requests, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                if requests.shutdown {
                    return;
                }
            }
            self.run_one(core, event);
        }
    }

    /// Hold this engine's lock across `fork()` (see [`fork`](crate::docs::internal::domain::fork)).
    #[cfg(unix)]
    pub(crate) fn hold_for_fork(&'static self, held: &mut crate::sync::fork::Held) {
        held.hold(&self.requests);
    }

    fn run_one(&self, core: &GpCore, event: &GpEvent) {
        self.seq.start();
        self.finish_one(core, event);
    }

    /// G1-G3 and the end of the grace period in progress.
    fn finish_one(&self, core: &GpCore, event: &GpEvent) {
        core.wait_for_readers(GpKind::Normal);
        self.seq.end();
        self.completed.fetch_add(1, Relaxed);
        event.notify();
    }
}
