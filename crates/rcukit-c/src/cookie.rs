//! [`rcukit_cookie`]: polling cookies as a fixed-size value type.
//!
//! A cookie is `rcukit::GpCookie` moved into three 64-bit words: a snapshot of both
//! grace-period counters of one domain (the kernel's "full" cookie, with its encoding) plus the
//! domain's identity. Every bit pattern of three `u64`s is a valid `GpCookie` value (it has no
//! padding and no invalid values, which the assertion below checks by size), so reading one
//! back from C memory is sound; a cookie C *forged* can only make a poll answer wrong, as a
//! wrong pointer would. It expires as soon as a normal *or* an expedited grace period that
//! started after it was taken has completed.
//!
//! Using a cookie with another domain than the one that made it is a programming error and
//! aborts with the Rust API's message; `rcukit_cookie_completed()` works with every domain.

use crate::boundary::FFI;
use crate::domain::{rcu, rcukit_domain};
use rcukit::GpCookie;
use std::mem::size_of;

const _: () = assert!(size_of::<GpCookie>() == 3 * size_of::<u64>());

/// A snapshot of a domain's grace-period state (opaque words; copy and store it freely).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rcukit_cookie {
    _private: [u64; 3],
}

impl From<GpCookie> for rcukit_cookie {
    fn from(cookie: GpCookie) -> rcukit_cookie {
        let mut words = rcukit_cookie { _private: [0; 3] };
        // SAFETY: a `GpCookie` is three `u64`s without padding (asserted above), the size of
        // the words, whose alignment suffices for `u64` fields.
        unsafe { words._private.as_mut_ptr().cast::<GpCookie>().write(cookie) };
        words
    }
}

impl From<rcukit_cookie> for GpCookie {
    fn from(words: rcukit_cookie) -> GpCookie {
        // SAFETY: as above; every bit pattern of three `u64`s is a valid `GpCookie`.
        unsafe { words._private.as_ptr().cast::<GpCookie>().read() }
    }
}

/// A cookie that has already expired, for every domain.
#[no_mangle]
pub extern "C" fn rcukit_cookie_completed() -> rcukit_cookie {
    rcukit_cookie::from(GpCookie::completed())
}

/// Is `cookie` the already-expired cookie (`rcukit_cookie_completed()`)?
#[no_mangle]
pub extern "C" fn rcukit_cookie_is_completed(cookie: rcukit_cookie) -> bool {
    GpCookie::from(cookie).is_completed()
}

/// Snapshot the domain's grace-period state without starting anything.
///
/// # Safety
///
/// `domain` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_get_state(domain: *const rcukit_domain) -> rcukit_cookie {
    // SAFETY: forwarded to the caller.
    FFI.guarded("rcukit_get_state", || {
        unsafe { rcu(domain, "rcukit_get_state") }
            .get_state()
            .into()
    })
}

/// Snapshot, and request a normal grace period so that the cookie expires without anybody
/// waiting on it.
///
/// # Safety
///
/// `domain` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_start_poll(domain: *const rcukit_domain) -> rcukit_cookie {
    // SAFETY: forwarded to the caller.
    FFI.guarded("rcukit_start_poll", || {
        unsafe { rcu(domain, "rcukit_start_poll") }
            .start_poll()
            .into()
    })
}

/// Snapshot, and have the domain's helper thread run an expedited grace period for the
/// cookie, without blocking the caller.
///
/// # Safety
///
/// `domain` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_start_poll_expedited(
    domain: *const rcukit_domain,
) -> rcukit_cookie {
    FFI.guarded("rcukit_start_poll_expedited", || {
        // SAFETY: forwarded to the caller.
        unsafe { rcu(domain, "rcukit_start_poll_expedited") }
            .start_poll_expedited()
            .into()
    })
}

/// Has a grace period covering `cookie` (normal or expedited) completed? Never blocks. A true
/// answer orders everything the covered readers did before the caller's next accesses. Aborts
/// if the cookie came from another domain.
///
/// # Safety
///
/// `domain` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_poll(domain: *const rcukit_domain, cookie: rcukit_cookie) -> bool {
    // SAFETY: forwarded to the caller.
    FFI.guarded("rcukit_poll", || {
        unsafe { rcu(domain, "rcukit_poll") }.poll(&cookie.into())
    })
}

/// Wait like `rcukit_synchronize` unless `cookie` has already expired. Aborts inside a
/// read-side critical section of the domain (if it would wait) or if the cookie came from
/// another domain.
///
/// # Safety
///
/// `domain` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_cond_synchronize(
    domain: *const rcukit_domain,
    cookie: rcukit_cookie,
) {
    FFI.guarded("rcukit_cond_synchronize", || {
        // SAFETY: forwarded to the caller.
        unsafe { rcu(domain, "rcukit_cond_synchronize") }.cond_synchronize(&cookie.into())
    })
}

/// Run an expedited grace period unless `cookie` has already expired. Aborts as
/// `rcukit_cond_synchronize`.
///
/// # Safety
///
/// `domain` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_cond_synchronize_expedited(
    domain: *const rcukit_domain,
    cookie: rcukit_cookie,
) {
    FFI.guarded("rcukit_cond_synchronize_expedited", || {
        // SAFETY: forwarded to the caller.
        unsafe { rcu(domain, "rcukit_cond_synchronize_expedited") }
            .cond_synchronize_expedited(&cookie.into())
    })
}
