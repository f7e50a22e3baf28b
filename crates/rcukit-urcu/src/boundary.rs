//! The boundary between C and Rust: no panic crosses it.
//!
//! Every exported function runs its body through `guarded`: a panic inside (the rcukit API's
//! answer to misuse, such as waiting for a grace period inside a read-side critical section)
//! is caught, its message written to standard error as one line, and the process aborts, as
//! liburcu's own assertions abort. Misuse that only this layer sees goes through `misuse`.
//! `warn_once` is for the few situations where liburcu itself prints an error and goes on.

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
