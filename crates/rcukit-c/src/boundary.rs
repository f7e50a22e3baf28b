//! The boundary between C and Rust: no panic crosses it, and misuse ends the process with a
//! message.
//!
//! Unwinding out of an `extern "C"` function is undefined behaviour on the Rust versions this
//! crate supports, and a C caller could not catch a panic anyway. So every exported function
//! runs its whole body through `guarded`: a panic inside (the Rust API's answer to misuse,
//! such as `synchronize()` inside a read-side critical section of the same domain) is caught
//! at the boundary, its message is written to standard error as one line, and the process
//! aborts. The Rust panic hook has printed the same message just before, with the location
//! inside rcukit, so the C programmer reads exactly the words a Rust programmer would.
//!
//! Misuse that only this layer can see (an unlock of a guard that is not locked, a NULL
//! handle) goes through `misuse`, which writes the same kind of line and aborts.
//!
//! Why abort rather than return an error code: these are programming errors after which the
//! program's RCU state is not what it believes (a read-side critical section that never ends,
//! a grace period that would wait for its own caller). The functions whose failures a correct
//! program must expect (building a domain, configuration values) return a
//! [`rcukit_status`](crate::status::rcukit_status) instead.

use std::any::Any;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Run `body`, the whole of the exported function `what`. A panic is caught here, reported
/// and turned into an abort: it never unwinds into C.
#[inline(always)]
pub(crate) fn guarded<R>(what: &'static str, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(payload) => panicked(what, payload),
    }
}

/// `guarded` for the read-side fast paths: the same promise (no unwinding into C) without
/// a call through `catch_unwind`'s closure, which measurably slowed a read-side critical
/// section. A panic there (only an rcukit bug could cause one: these paths detect misuse
/// themselves and call `misuse`) has printed its message through the panic hook already;
/// the guard's `Drop` then aborts.
#[inline(always)]
pub(crate) fn guarded_fast<R>(what: &'static str, body: impl FnOnce() -> R) -> R {
    let abort_on_unwind = AbortOnUnwind(what);
    let result = body();
    std::mem::forget(abort_on_unwind);
    result
}

/// Aborts when dropped, which only happens while unwinding (see `guarded_fast`).
struct AbortOnUnwind(&'static str);

impl Drop for AbortOnUnwind {
    #[cold]
    fn drop(&mut self) {
        misuse(self.0, "a panic (reported above) reached the boundary")
    }
}

#[cold]
#[inline(never)]
fn panicked(what: &'static str, payload: Box<dyn Any + Send>) -> ! {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "<non-string panic payload>".to_string());
    // rcukit's messages start with "rcukit: ", which the line below says already.
    let message = message
        .strip_prefix("rcukit: ")
        .unwrap_or(&message)
        .to_string();
    // The payload is leaked: its `Drop` could panic again, and the process ends anyway.
    std::mem::forget(payload);
    fatal(what, &message)
}

/// Abort because the C caller of `what` misused the API in a way described by `message`.
#[cold]
#[inline(never)]
pub(crate) fn misuse(what: &'static str, message: &str) -> ! {
    fatal(what, message)
}

fn fatal(what: &str, message: &str) -> ! {
    let _ = writeln!(
        std::io::stderr().lock(),
        "rcukit: fatal error in {what}(), aborting: {message}"
    );
    std::process::abort()
}

/// `pointer`, or an abort naming `what` and the argument if it is NULL.
#[inline(always)]
pub(crate) fn non_null<T>(pointer: *const T, what: &'static str, argument: &str) -> *const T {
    if pointer.is_null() {
        null_argument(what, argument);
    }
    pointer
}

#[cold]
#[inline(never)]
fn null_argument(what: &'static str, argument: &str) -> ! {
    misuse(what, &format!("`{argument}` is NULL"))
}
