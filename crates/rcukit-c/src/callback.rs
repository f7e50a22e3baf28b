//! Callbacks with an intrusive head: [`rcukit_head`] and `rcukit_call`.
//!
//! As with the kernel's and liburcu's `call_rcu`, the program embeds a `rcukit_head` in the
//! object it wants to free (or otherwise process) after a grace period, and nothing is
//! allocated per call: the head carries the C function, and the head's address is the data
//! pointer of an `Rcu::call_raw` callback whose Rust function (`run_head`) reads the C
//! function back and calls it with the head. The function is read *before* the call, so the
//! callback may free the head's object, or queue the same head again.
//!
//! Callbacks run on the domain's callback worker threads, never on the caller's, once every
//! read-side critical section that was running when `rcukit_call` was called has ended; those
//! queued by one thread run in the order queued. A callback may call back into the API
//! (`rcukit_call`, `rcukit_read_lock`, even `rcukit_synchronize`), except `rcukit_barrier` of
//! its own domain, which would wait for itself: that aborts with the Rust API's message.

use crate::boundary::FFI;
use crate::domain::{rcu, rcukit_domain};
use std::mem::size_of;

/// A callback function: called once with the head it was queued with.
pub type rcukit_callback_fn = Option<unsafe extern "C" fn(head: *mut rcukit_head)>;

/// The callback head, embedded in the object a callback processes (no allocation per call).
#[repr(C)]
#[derive(Debug)]
pub struct rcukit_head {
    /// The function to call (set by `rcukit_call`).
    pub func: rcukit_callback_fn,
}

/// The Rust side of every C callback: call the head's function with the head.
///
/// # Safety
///
/// `data` is a head queued by `queue`, not yet run, whose function was set.
pub(crate) unsafe fn run_head(data: *mut ()) {
    let head = data.cast::<rcukit_head>();
    // SAFETY: the head is valid until its function runs (the caller of `rcukit_call` promised
    // it); the function is read before the call, which may free or reuse the head.
    if let Some(func) = unsafe { (*head).func } {
        // SAFETY: a C function that accepts its own head.
        unsafe { func(head) };
    }
}

/// Store `func` in `head` and return the data pointer of a `call_raw` callback whose function
/// is `run_head`.
///
/// # Safety
///
/// `head` is NULL (an abort) or valid, and not queued until `func` runs.
pub(crate) unsafe fn prepare(
    what: &'static str,
    head: *mut rcukit_head,
    func: rcukit_callback_fn,
) -> *mut () {
    let head = FFI.non_null(head, what, "head").cast_mut();
    if func.is_none() {
        FFI.misuse(what, "`func` is NULL");
    }
    // SAFETY: the caller passes a valid head that nothing else uses until `func` runs.
    unsafe { (*head).func = func };
    head.cast()
}

/// Call `func(head)` on a callback worker after a grace period. Never waits for a grace
/// period, never allocates (a flood gives way to the workers, as `Rcu::call` says).
///
/// # Safety
///
/// `domain` is a live handle; `head` stays valid, and is not queued again, until `func` runs;
/// `func` may run on another thread.
#[no_mangle]
pub unsafe extern "C" fn rcukit_call(
    domain: *const rcukit_domain,
    head: *mut rcukit_head,
    func: rcukit_callback_fn,
) {
    // SAFETY: forwarded to the caller.
    unsafe { call_sized(domain, head, func, size_of::<rcukit_head>()) }
}

/// `rcukit_call`, accounting `bytes` (what the callback frees) to the domain's pending bytes:
/// past its backlog threshold, the domain runs expedited grace periods to catch up.
///
/// # Safety
///
/// As `rcukit_call`.
#[no_mangle]
pub unsafe extern "C" fn rcukit_call_sized(
    domain: *const rcukit_domain,
    head: *mut rcukit_head,
    func: rcukit_callback_fn,
    bytes: usize,
) {
    // SAFETY: forwarded to the caller.
    unsafe { call_sized(domain, head, func, bytes) }
}

/// The body of `rcukit_call_sized`, which `rcukit_call` calls directly: a call to the exported
/// function would go through the dynamic symbol table, and bind to another copy of the library
/// that a program exports (its domains are other domains).
///
/// # Safety
///
/// As `rcukit_call`.
unsafe fn call_sized(
    domain: *const rcukit_domain,
    head: *mut rcukit_head,
    func: rcukit_callback_fn,
    bytes: usize,
) {
    FFI.guarded("rcukit_call", || {
        // SAFETY: forwarded to the caller.
        let rcu = unsafe { rcu(domain, "rcukit_call") };
        // SAFETY: forwarded to the caller: the head is valid and unused until `func` runs.
        let data = unsafe { prepare("rcukit_call", head, func) };
        // SAFETY: `run_head(data)` is sound once, on any thread, after a grace period: the head
        // stays valid until its function runs (the caller's contract).
        unsafe { rcu.call_raw(run_head, data, bytes) };
    })
}
