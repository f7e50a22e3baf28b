#![doc = include_str!("shutdown.md")]

use super::{Inner, Rcu};
use crate::callbacks::Callbacks;
use crate::sync::lock;
use std::sync::Arc;
use std::time::Duration;

/// `Rcu::drop` gives up running chains of callbacks after this many rounds of `barrier()`.
const MAX_DRAIN_ROUNDS: u32 = 10_000;

/// The finisher's longest nap between looks at the owned sections.
const FINISHER_NAP: Duration = Duration::from_millis(10);

impl Drop for Rcu {
    fn drop(&mut self) {
        self.inner.check_fork();
        if self.is_reading() {
            // A guard of this domain was forgotten on this thread (nothing else lets a section
            // outlive the handle it borrows): no grace period can end, so nothing pending may
            // run, and waiting for one would wait for this thread.
            // A line on stderr that never panics (`eprintln!` panics if the write fails: a
            // stderr whose reader is gone), as a drop must not.
            crate::report::stderr_line(format_args!(
                "rcukit: domain '{}' dropped inside a read-side critical section of its own on \
                 this thread (a guard forgotten with mem::forget?): no grace period can end, so \
                 its threads and pending callbacks are left as they are",
                self.inner.name
            ));
            std::mem::forget(Arc::clone(&self.inner));
            return;
        }
        // Under a container's writer lock (the last handle dropped by a closure a write runs),
        // a pending callback may need that lock, and ending here would wait for it; in a
        // callback of another domain (or a drop it runs), a pending callback of this one may
        // wait for that domain's callbacks (its `barrier()`), which wait for this thread: a
        // thread of its own ends the domain, as it does while owned sections are open.
        let elsewhere = crate::sync::fork_lock::held_here()
            || (Callbacks::in_any_callback_context()
                && !self.inner.callbacks.in_callback_context());
        if !owned_sections_open(&self.inner) && !elsewhere {
            finish(&self.inner);
            return;
        }
        let inner = Arc::clone(&self.inner);
        let name = format!("{}-finish", inner.name);
        match crate::threads::spawn(name, move || {
            let mut nap = Duration::from_micros(100);
            while owned_sections_open(&inner) {
                std::thread::sleep(nap);
                nap = (nap * 2).min(FINISHER_NAP);
            }
            finish(&inner);
        }) {
            Ok(finisher) => drop(finisher), // detached: nobody waits for it
            Err(e) => {
                // Ending the domain here could wait for this very thread: leave it running.
                crate::report::stderr_line(format_args!(
                    "rcukit: domain '{}' dropped while owned guards are open or under a \
                     container's writer lock, and its finisher thread could not start ({e}): \
                     its threads and pending callbacks are left as they are",
                    self.inner.name
                ));
                std::mem::forget(Arc::clone(&self.inner));
            }
        }
    }
}

/// Are owned sections of this domain open now?
fn owned_sections_open(inner: &Inner) -> bool {
    inner.parking.was_used() && inner.core.registry.owned_open() != 0
}

/// Run what is pending, stop and join the threads, and free the state (or park it for the
/// owned guards that may still close; see [`owned`](crate::docs::internal::domain::owned)).
fn finish(inner: &Arc<Inner>) {
    if !inner.callbacks.in_callback_context() {
        drain_callbacks(inner);
    }
    // Workers drain whatever is left (a drop from inside a callback leaves the rest to the
    // worker running it) and exit; then the grace-period threads stop.
    inner.callbacks.shutdown();
    inner.normal.shutdown();
    inner.exp.shutdown();
    let threads = std::mem::take(&mut *lock(&inner.threads));
    for thread in threads {
        if !thread.is_calling_thread() {
            thread.join();
        } // else: dropped from one of its own threads, which detaches itself
    }
    // Owned guards may outlive this handle: the state then waits for the last of them.
    super::owned::Parking::park(inner);
}

/// Run every pending callback, chains included: rounds of `barrier()` until one round saw no
/// new callback queued, with every grace period expedited (a dropped domain does not wait for
/// a normal one). The end does not depend on the pending count being right: it is reached when
/// the callbacks stop queueing callbacks, which a chain does once it ends (a chain that never
/// ends needs a handle on this domain, which keeps it alive). Bounded anyway: after
/// `MAX_DRAIN_ROUNDS` rounds the rest is left to the workers' shutdown.
fn drain_callbacks(inner: &Inner) {
    let callbacks = &inner.callbacks;
    if callbacks.pending() == 0 {
        return;
    }
    callbacks.start_draining();
    for _ in 0..MAX_DRAIN_ROUNDS {
        let queued = callbacks.queued();
        callbacks.barrier();
        if callbacks.queued() == queued {
            return;
        }
    }
}
