//! Running user code: `call` closures and the `Drop` of retired objects, where and how.
//!
//! # Where user code runs (the rule users rely on)
//!
//! * Closures queued with `call` run on the domain's callback workers, never on the thread
//!   that queued them.
//! * Retired objects (`retire`, `retire_raw`, and through them `RcuCell` and `RcuList`
//!   writers) are dropped on a worker, or, with
//!   [`retire_on_producers`](crate::RcuBuilder::retire_on_producers) on (the default), by a
//!   thread of the program *inside a later `retire` call of the same domain*: two objects
//!   whose grace period has ended every second call (four while its list is long), retired
//!   earlier by that same thread, or a batch handed back to it by the worker. Never the object being retired, never one
//!   whose grace period has not ended.
//! * rcukit never runs user code while it holds a lock of its own: a retire-path call made by
//!   a container (`RcuList` removals, `RcuCell` writes) happens after the container's writer
//!   lock is released.
//! * Never inside a read-side critical section of the same domain (for a QSBR domain: never
//!   on a thread that is online in it): a `retire` made there leaves the drops to the worker.
//! * Never nested: a `Drop` run this way that retires more objects only queues them.
//!
//! # Why producer-side drops are the default
//!
//! The kernel never invokes callbacks inside `call_rcu`; crossbeam-epoch and seize run
//! destructors inline, in `pin`/`defer` and `retire`. rcukit sides with the latter for
//! `retire` because it is what makes reclamation keep up under a flood on a small machine:
//! memory goes back to the allocator cache of the thread that allocated it, a thread that
//! retires faster than grace periods end is paced by its own frees (bounded memory without
//! blocking), and no other thread has to be scheduled. The price is the re-entrancy hazard the
//! kernel avoids: a `Drop` that takes a lock the retiring thread may hold deadlocks. The three
//! "never"s above remove the cases rcukit itself creates; for the rest, choose worker-side
//! drops for the domain (`retire_on_producers(false)`, for the global domain through
//! [`RcuBuilder::build_global`](crate::RcuBuilder::build_global)): then no rcukit call ever
//! runs user code on the calling thread.
//!
//! # Panics
//!
//! Every callback and every drop runs under `catch_unwind`; a panic is counted, reported
//! through the domain's report hook, and the remaining callbacks still run. The panic payload
//! is dropped under `catch_unwind` too (a payload whose own `Drop` panics is leaked, see
//! the `report` module), so no user panic ever unwinds
//! into rcukit: no library thread dies of one, and no per-thread or shared state is left
//! half-changed. State set around user code ("this thread is running drops", a local list's
//! `dropping` mark, a ready batch counted as running) is restored by drop guards regardless.

use super::callback::Callback;
use super::Callbacks;
use crate::report::{self, CallbackPanic, Report};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::Relaxed;

thread_local! {
    /// The domain whose drops this (producer) thread is running (0 when none).
    static RUNNING_DROPS_OF: Cell<u64> = const { Cell::new(0) };
}

/// Is this thread already running drops of some domain (a ready batch or blocks of its own
/// list)? Drops that retire more objects then only queue them, so runs never nest. A thread
/// whose thread-local storage is gone counts as running (it must not start).
#[inline]
pub(crate) fn running_drops() -> bool {
    RUNNING_DROPS_OF.try_with(|r| r.get() != 0).unwrap_or(true)
}

/// Is this thread running drops of domain `domain`?
pub(crate) fn running_drops_of(domain: u64) -> bool {
    RUNNING_DROPS_OF
        .try_with(|r| r.get() == domain)
        .unwrap_or(false)
}

/// Marks the calling thread as running drops of a domain until dropped (also on unwind).
pub(crate) struct RunningDrops;

impl RunningDrops {
    #[inline]
    pub(crate) fn enter(domain: u64) -> RunningDrops {
        RUNNING_DROPS_OF.with(|r| r.set(domain));
        RunningDrops
    }
}

impl Drop for RunningDrops {
    #[inline]
    fn drop(&mut self) {
        let _ = RUNNING_DROPS_OF.try_with(|r| r.set(0));
    }
}

impl Callbacks {
    /// Run every callback of `batch` (emptying it), each under `catch_unwind`. Returns how many
    /// ran and their bytes. Never unwinds.
    pub(crate) fn invoke_all(&self, batch: &mut Vec<Callback>) -> (u64, u64) {
        self.invoke_each(&mut batch.drain(..))
    }

    /// Run every callback `callbacks` yields, each under `catch_unwind` (a panic is reported,
    /// and the rest still run). Returns how many ran and their bytes. Never unwinds.
    #[inline]
    pub(crate) fn invoke_each(&self, callbacks: &mut impl Iterator<Item = Callback>) -> (u64, u64) {
        let (mut invoked, mut bytes) = (0u64, 0u64);
        loop {
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                for cb in callbacks.by_ref() {
                    invoked += 1;
                    bytes += cb.bytes() as u64;
                    cb.invoke();
                }
            }));
            match outcome {
                Ok(()) => break,
                Err(payload) => self.report_panic(payload),
            }
        }
        (invoked, bytes)
    }

    /// Count a callback's panic, drop its payload safely and report it. Never unwinds.
    pub(crate) fn report_panic(&self, payload: Box<dyn std::any::Any + Send>) {
        let total = self.panics.fetch_add(1, Relaxed) + 1;
        let message = report::payload_message(&*payload);
        report::drop_payload(payload);
        self.reporter.report(Report::CallbackPanic(CallbackPanic {
            domain: self.name.clone(),
            message,
            total,
        }));
    }
}
