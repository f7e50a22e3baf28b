//! The boundary between C and Rust: no panic crosses it.
//!
//! Every exported function runs its body through [`guarded`]: a panic inside (the rcukit API's
//! answer to misuse, such as waiting for a grace period inside a read-side critical section)
//! is caught, its message written to standard error as one line, and the process aborts, as
//! liburcu's own assertions abort. Misuse that only this layer sees goes through [`misuse`].
//! [`warn_once`] is for the few situations where liburcu itself prints an error and goes on.

use std::any::Any;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Run `body`, the whole of the exported function `what`; a panic aborts the process.
#[inline(always)]
pub(crate) fn guarded<R>(what: &'static str, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(payload) => panicked(what, payload),
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
    // Leaked: its `Drop` could panic again, and the process ends anyway.
    std::mem::forget(payload);
    misuse(what, &message)
}

/// Abort because the caller of `what` misused the API as `message` says.
#[cold]
#[inline(never)]
pub(crate) fn misuse(what: &str, message: &str) -> ! {
    let _ = writeln!(
        std::io::stderr().lock(),
        "rcukit (liburcu ABI): fatal error in {what}(), aborting: {message}"
    );
    std::process::abort()
}

/// Write `message` to standard error the first time `flag` is seen unset.
#[cold]
#[inline(never)]
pub(crate) fn warn_once(flag: &AtomicBool, message: &str) {
    if !flag.swap(true, Relaxed) {
        let _ = writeln!(std::io::stderr().lock(), "rcukit (liburcu ABI): {message}");
    }
}
