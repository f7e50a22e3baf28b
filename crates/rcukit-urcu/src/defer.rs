//! liburcu's `defer_rcu()` family, generic over the `Flavor`.
//!
//! In liburcu, `defer_rcu(fct, p)` appends to a per-thread queue that a "defer" thread (or
//! the calling thread, with a `synchronize_rcu()`, when the queue is full) runs after a grace
//! period; the thread must be registered with `rcu_defer_register_thread()`. Here each
//! `defer_rcu` is one callback on the flavor's callback workers: `fct(p)` runs after a grace
//! period, in the flavor's callback context. It allocates one small record per call (the
//! function and its argument; a callback carries one word) where liburcu appends to a
//! preallocated queue. Registration is not needed and always succeeds; the barriers wait for
//! every callback of the flavor (a superset of liburcu's, which wait for the deferred work of
//! all threads, or of the calling thread); unregistering waits for them too, as liburcu's
//! flushes the thread's queue.
//!
//! # A flood
//!
//! liburcu's queue holds 4,096 entries: a thread that fills it waits for a grace period and
//! runs the calls itself, so a thread that defers without pause keeps at most that many
//! objects waiting. Callbacks have no such bound: a thread freeing objects through
//! `defer_rcu` as fast as it can outran the workers (a writer swapping a pointer and deferring
//! the old object's `free`, beside two readers on 2 cores, peaked at 42-64 MiB resident
//! against liburcu's 2-4 MiB). So every 4,096 calls a thread looks at the flavor's callback
//! backlog, and while more than 16,384 callbacks wait, it sleeps (100 µs at a time, offline
//! if it is a registered qsbr thread) for at most 20 ms. It sleeps rather than waiting for a
//! grace period or a barrier: a queued callback may wait for a lock the deferring thread
//! holds, and a qsbr callback runs online, so either wait could wait for ever where a sleep
//! only costs time. It does not look inside a memb read-side critical section (its own
//! section holds the grace periods back) or in a callback (the worker is what drains the
//! backlog). `docs/benchmarks.md` has the figures.

use crate::boundary::FFI;
use crate::flavor::Flavor;
use std::cell::Cell;
use std::ffi::c_void;
use std::mem::size_of;
use std::time::{Duration, Instant};

/// One deferred call.
struct Deferred {
    fct: unsafe extern "C" fn(*mut c_void),
    p: *mut c_void,
}

/// Run and free a deferred call.
///
/// # Safety
///
/// `data` is a `Box<Deferred>` made by `defer`, run once.
unsafe fn run_deferred<F: Flavor>(data: *mut ()) {
    // SAFETY: made by `Box::into_raw` in `defer`; each callback runs once.
    let deferred = unsafe { Box::from_raw(data.cast::<Deferred>()) };
    // SAFETY: the C caller's function and argument, called once after a grace period, as
    // `defer_rcu` promises.
    crate::call_rcu::run_callback::<F>(|| unsafe { (deferred.fct)(deferred.p) });
}

/// `defer_rcu(fct, p)`.
///
/// # Safety
///
/// Calling `fct(p)` once, on any thread, after a grace period, is sound.
pub(crate) unsafe fn defer<F: Flavor>(
    what: &'static str,
    fct: Option<unsafe extern "C" fn(*mut c_void)>,
    p: *mut c_void,
) {
    FFI.guarded(what, || {
        let Some(fct) = fct else {
            FFI.misuse(what, "the function is NULL");
        };
        let data = Box::into_raw(Box::new(Deferred { fct, p }));
        // SAFETY: `run_deferred::<F>` frees the box and calls `fct(p)` once, which the caller
        // says is sound on any thread after a grace period.
        unsafe { F::call_raw(run_deferred::<F>, data.cast(), size_of::<Deferred>()) };
        throttle::<F>();
    })
}

/// How many calls a thread defers between two looks at the flavor's backlog (the size of
/// liburcu's per-thread queue, which its thread empties itself when it is full).
const DEFERRED_PER_LOOK: u32 = 4096;

/// The backlog of callbacks (of every thread, deferred calls or `call_rcu`'s) past which a
/// thread that defers waits for it to shrink.
const BACKLOG: u64 = 4 * DEFERRED_PER_LOOK as u64;

/// The longest a thread waits for the backlog at one look: a callback that waits for
/// something the deferring thread holds (a lock) then costs time, never a deadlock.
const LONGEST_WAIT: Duration = Duration::from_millis(20);

thread_local! {
    /// Calls this thread deferred since it last looked at the backlog, per flavor.
    static SINCE_LOOK: [Cell<u32>; 2] = const { [Cell::new(0), Cell::new(0)] };
}

/// Every `DEFERRED_PER_LOOK` calls of a thread, wait (for at most `LONGEST_WAIT`) while the
/// flavor's callbacks pending are more than `BACKLOG`, unless the thread may not wait (inside
/// a memb read-side critical section, or in a callback).
fn throttle<F: Flavor>() {
    let due = SINCE_LOOK
        .try_with(|since| {
            let n = since[F::INDEX].get() + 1;
            let due = n >= DEFERRED_PER_LOOK;
            since[F::INDEX].set(if due { 0 } else { n });
            due
        })
        .unwrap_or(false);
    if !due || !F::may_wait_for_callbacks() || crate::call_rcu::in_callback() {
        return;
    }
    if F::callbacks_pending() <= BACKLOG {
        return;
    }
    // Sleeping, not waiting for a grace period: a callback that waits for something this
    // thread holds may hold grace periods back (a qsbr callback runs online).
    F::waiting(|| {
        let start = Instant::now();
        while F::callbacks_pending() > BACKLOG && start.elapsed() < LONGEST_WAIT {
            std::thread::sleep(Duration::from_micros(100));
        }
    });
}

/// `rcu_defer_barrier()`, `rcu_defer_barrier_thread()` and `rcu_defer_unregister_thread()`.
pub(crate) fn barrier<F: Flavor>(what: &'static str) {
    FFI.guarded(what, F::barrier)
}
