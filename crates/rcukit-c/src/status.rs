//! Status codes for the failures a correct program must expect, and the last error's message.
//!
//! Building a domain can fail (a setting out of range, the system refusing a thread, the
//! global domain already built), and so can a configuration call given a bad value. Those
//! functions return a [`rcukit_status`] (or NULL, for constructors) and leave a message for
//! [`rcukit_last_error`] in a thread-local buffer, the convention of SQLite's `errmsg` and
//! libgit2's `git_error_last`: the calling thread's last failure, valid until its next one.
//! Successful calls leave it alone. Everything else in the API cannot fail in a correct
//! program and aborts on misuse (see [`boundary`](crate::boundary)).

use crate::boundary::FFI;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};

/// The result of a call that can fail.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum rcukit_status {
    /// Success.
    RCUKIT_OK = 0,
    /// An argument was refused (a NULL configuration, a name that is not UTF-8, an unknown
    /// fence kind); `rcukit_last_error()` says which.
    RCUKIT_INVALID_ARGUMENT = 1,
    /// A setting is out of range or does not apply to this kind of domain;
    /// `rcukit_last_error()` names it and gives the accepted range.
    RCUKIT_INVALID_SETTING = 2,
    /// The operating system refused to start one of the domain's threads.
    RCUKIT_SPAWN_FAILED = 3,
    /// `rcukit_global_init()` was called after the global domain had been built (by an earlier
    /// call, or on first use with default settings).
    RCUKIT_ALREADY_BUILT = 4,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> =
        RefCell::new(CString::new("no error").expect("no NUL byte"));
}

/// Record `message` as the calling thread's last error and return `status`.
pub(crate) fn fail(status: rcukit_status, message: impl Into<String>) -> rcukit_status {
    let text = message.into().replace('\0', "\u{FFFD}");
    let text = CString::new(text).expect("NUL bytes were replaced");
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = text);
    status
}

/// The status and message for an error from rcukit's builders.
pub(crate) fn from_error(error: &rcukit::Error) -> rcukit_status {
    let status = match error {
        rcukit::Error::InvalidSetting { .. } => rcukit_status::RCUKIT_INVALID_SETTING,
        rcukit::Error::GlobalAlreadyBuilt => rcukit_status::RCUKIT_ALREADY_BUILT,
        _ => rcukit_status::RCUKIT_SPAWN_FAILED,
    };
    fail(status, error.to_string())
}

/// The message of the calling thread's last failed call ("no error" if none failed yet). The
/// string belongs to rcukit and stays valid until the next failing call on the same thread.
#[no_mangle]
pub extern "C" fn rcukit_last_error() -> *const c_char {
    FFI.guarded("rcukit_last_error", || {
        LAST_ERROR
            .try_with(|last| last.borrow().as_ptr())
            .unwrap_or(
                c"rcukit: the last error is not available in a thread-local destructor".as_ptr(),
            )
    })
}

/// A static description of a status code (never NULL; "unknown status" for values that are
/// not a `rcukit_status`).
#[no_mangle]
pub extern "C" fn rcukit_status_str(status: c_int) -> *const c_char {
    let text = match status {
        0 => c"success",
        1 => c"invalid argument",
        2 => c"invalid setting",
        3 => c"could not start a thread",
        4 => c"the global domain is already built",
        _ => c"unknown status",
    };
    text.as_ptr()
}
