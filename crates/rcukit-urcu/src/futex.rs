//! `compat_futex_noasync` and `compat_futex_async`: liburcu exports them from every flavor's
//! library for its headers' futex fallback (used where the `futex(2)` system call is
//! missing). Here they are the system call itself, with the compatibility functions' results:
//! `FUTEX_WAIT` and `FUTEX_WAKE` only (anything else is `EINVAL`), 0 on success, and a wait
//! whose word no longer holds `val` returns 0 at once.

use std::ffi::{c_int, c_long};

fn futex(
    uaddr: *mut i32,
    op: c_int,
    val: i32,
    timeout: *const libc::timespec,
    uaddr2: *mut i32,
    val3: i32,
) -> c_int {
    let command = op & 0x7f; // without FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME
    if command != libc::FUTEX_WAIT && command != libc::FUTEX_WAKE {
        // SAFETY: `__errno_location` returns the calling thread's errno.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return -1;
    }
    // SAFETY: the futex system call checks its arguments; the caller passes liburcu's.
    let r: c_long =
        unsafe { libc::syscall(libc::SYS_futex, uaddr, op, val, timeout, uaddr2, val3) };
    if r >= 0 {
        return 0;
    }
    // SAFETY: as above.
    let errno = unsafe { *libc::__errno_location() };
    if command == libc::FUTEX_WAIT && errno == libc::EAGAIN {
        0
    } else {
        -1
    }
}

/// liburcu's futex fallback, for callers that must not be signal handlers.
///
/// # Safety
///
/// The arguments of `futex(2)`.
#[no_mangle]
pub unsafe extern "C" fn compat_futex_noasync(
    uaddr: *mut i32,
    op: c_int,
    val: i32,
    timeout: *const libc::timespec,
    uaddr2: *mut i32,
    val3: i32,
) -> c_int {
    futex(uaddr, op, val, timeout, uaddr2, val3)
}

/// liburcu's futex fallback, callable from signal handlers.
///
/// # Safety
///
/// The arguments of `futex(2)`.
#[no_mangle]
pub unsafe extern "C" fn compat_futex_async(
    uaddr: *mut i32,
    op: c_int,
    val: i32,
    timeout: *const libc::timespec,
    uaddr2: *mut i32,
    val3: i32,
) -> c_int {
    futex(uaddr, op, val, timeout, uaddr2, val3)
}
