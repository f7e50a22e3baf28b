//! liburcu's `defer_rcu()` family, generic over the `Flavor`.
//!
//! In liburcu, `defer_rcu(fct, p)` appends to a per-thread queue that a "defer" thread (or
//! the calling thread, with a `synchronize_rcu()`, when the queue is full) runs after a grace
//! period; the thread must be registered with `rcu_defer_register_thread()`. Here each
//! `defer_rcu` is one callback on the flavor's callback workers: `fct(p)` runs after a grace
//! period, in the flavor's callback context, and `defer_rcu` never waits for a grace period
//! (a flood gives way to the workers, as `call_rcu` does). It allocates one
//! small record per call (the function and its argument; a callback carries one word) where
//! liburcu appends to a preallocated queue. Registration is not needed and always succeeds;
//! the barriers wait for every callback of the flavor (a superset of liburcu's, which wait
//! for the deferred work of all threads, or of the calling thread); unregistering waits for
//! them too, as liburcu's flushes the thread's queue.

use crate::boundary::FFI;
use crate::flavor::Flavor;
use std::ffi::c_void;
use std::mem::size_of;

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
    })
}

/// `rcu_defer_barrier()`, `rcu_defer_barrier_thread()` and `rcu_defer_unregister_thread()`.
pub(crate) fn barrier<F: Flavor>(what: &'static str) {
    FFI.guarded(what, F::barrier)
}
