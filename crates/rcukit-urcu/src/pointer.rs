//! liburcu's pointer helpers for programs built without `_LGPL_SOURCE`: `rcu_dereference_sym`,
//! `rcu_set_pointer_sym`, `rcu_xchg_pointer_sym` and `rcu_cmpxchg_pointer_sym` (the macros
//! `rcu_dereference()`, `rcu_assign_pointer()`, `rcu_xchg_pointer()` and
//! `rcu_cmpxchg_pointer()` of liburcu's headers call them).
//!
//! The orderings are liburcu's: a dereference orders the loads that depend on the pointer
//! after it (the caller loaded the pointer; the call is also a compiler barrier); publishing
//! is a release store; exchanges are full barriers. `Acquire` on the dereference side is a
//! little stronger than liburcu's dependency ordering where the two differ (not on x86).

use std::ffi::c_void;
use std::sync::atomic::{fence, AtomicPtr, Ordering};

/// Return `p`, ordering the loads through it after the load that produced it.
#[no_mangle]
pub extern "C" fn rcu_dereference_sym(p: *mut c_void) -> *mut c_void {
    fence(Ordering::Acquire);
    p
}

/// Publish `v` in `*p` (a release store) and return `v`.
///
/// # Safety
///
/// `p` points to a pointer that every concurrent access reads or writes atomically.
#[no_mangle]
pub unsafe extern "C" fn rcu_set_pointer_sym(p: *mut *mut c_void, v: *mut c_void) -> *mut c_void {
    // SAFETY: the caller passes an aligned, valid pointer location accessed atomically.
    unsafe { AtomicPtr::from_ptr(p) }.store(v, Ordering::Release);
    v
}

/// Store `v` in `*p` and return the old value (a full barrier).
///
/// # Safety
///
/// As `rcu_set_pointer_sym`.
#[no_mangle]
pub unsafe extern "C" fn rcu_xchg_pointer_sym(p: *mut *mut c_void, v: *mut c_void) -> *mut c_void {
    // SAFETY: the caller passes an aligned, valid pointer location accessed atomically.
    unsafe { AtomicPtr::from_ptr(p) }.swap(v, Ordering::SeqCst)
}

/// If `*p` is `old`, store `new`; return the value found (a full barrier).
///
/// # Safety
///
/// As `rcu_set_pointer_sym`.
#[no_mangle]
pub unsafe extern "C" fn rcu_cmpxchg_pointer_sym(
    p: *mut *mut c_void,
    old: *mut c_void,
    new: *mut c_void,
) -> *mut c_void {
    // SAFETY: the caller passes an aligned, valid pointer location accessed atomically.
    match unsafe { AtomicPtr::from_ptr(p) }.compare_exchange(
        old,
        new,
        Ordering::SeqCst,
        Ordering::SeqCst,
    ) {
        Ok(found) | Err(found) => found,
    }
}
