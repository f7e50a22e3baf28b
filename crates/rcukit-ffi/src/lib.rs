//! # rcukit-ffi: the boundary between C and Rust of rcukit's C libraries
//!
//! `librcukit` (`rcukit-c`) and `liburcu-rcukit` (`rcukit-urcu`) both promise that no Rust
//! panic crosses into C, and both end the process with one line on standard error when their
//! caller misuses them. This crate is that promise, written once. It is internal (not
//! published) and exports no symbol: each library links its own copy, and neither library's
//! symbols reach the other.
//!
//! # The boundary
//!
//! Unwinding out of an `extern "C"` function is undefined behaviour on the Rust versions rcukit
//! supports, and a C caller could not catch a panic anyway. So every exported function runs its
//! whole body through [`Boundary::guarded`]: a panic inside (the rcukit API's answer to misuse,
//! such as waiting for a grace period inside a read-side critical section of the same domain)
//! is caught, its message is written to standard error as one line, and the process aborts.
//! The Rust panic hook has printed the same message just before, with the location inside
//! rcukit, so the C programmer reads the words a Rust programmer would. Misuse that only the C
//! layer can see (an unlock without a lock, a NULL handle) goes through [`Boundary::misuse`],
//! which writes the same kind of line and aborts:
//!
//! ```text
//! LIBRARY: fatal error in FUNCTION(), aborting: MESSAGE
//! ```
//!
//! where `LIBRARY` is the [`Library::NAME`] of the library that speaks ("rcukit", "rcukit
//! (liburcu ABI)").
//!
//! # The read-side fast paths
//!
//! [`Boundary::guarded_fast`] makes the same promise at no cost on the path that does not
//! panic: no call through `catch_unwind`'s closure, and a guard that aborts if it is dropped
//! while unwinding. The guard is zero-sized (the library is a type, the function's name a
//! closure that returns it), so that nothing is stored on the stack for it: a guard holding
//! the name as a `&str` made every lock and unlock store it: a guard-token section through
//! `librcukit.a` measured 1.45x Rust's `Rcu::read` behind two calls with it, 1.26x without, and
//! a reader-handle section 1.04x and 0.93x (`cargo run --release -p rcukit-c --example
//! read_cost`, medians of round ratios). A panic there (only an rcukit bug could cause one:
//! those paths detect misuse themselves and call `misuse`) has printed its message through the
//! panic hook already.
//!
//! ```
//! use rcukit_ffi::{Boundary, Library};
//!
//! struct Example;
//! impl Library for Example {
//!     const NAME: &'static str = "example";
//! }
//! const FFI: Boundary<Example> = Boundary::NEW;
//!
//! #[no_mangle]
//! pub extern "C" fn example_add(a: u32, b: u32) -> u32 {
//!     FFI.guarded("example_add", || {
//!         a.checked_add(b)
//!             .unwrap_or_else(|| FFI.misuse("example_add", "the sum overflows"))
//!     })
//! }
//! # assert_eq!(example_add(1, 2), 3);
//! ```

pub mod fork_lock;
pub mod fork_once;

use std::any::Any;
use std::io::Write;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// A C library built on rcukit: the name that starts every line its boundary writes.
pub trait Library: 'static {
    /// "rcukit", "rcukit (liburcu ABI)".
    const NAME: &'static str;
}

/// The boundary of the library `L` (zero-sized; each library keeps one as a constant).
pub struct Boundary<L: Library>(PhantomData<L>);

impl<L: Library> Clone for Boundary<L> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<L: Library> Copy for Boundary<L> {}

impl<L: Library> Boundary<L> {
    /// The boundary (it holds nothing).
    pub const NEW: Boundary<L> = Boundary(PhantomData);

    /// Run `body`, the whole of the exported function `what`. A panic is caught here, reported
    /// and turned into an abort: it never unwinds into C.
    #[inline(always)]
    pub fn guarded<R>(self, what: &'static str, body: impl FnOnce() -> R) -> R {
        match catch_unwind(AssertUnwindSafe(body)) {
            Ok(result) => result,
            Err(payload) => self.panicked(what, payload),
        }
    }

    /// [`guarded`](Self::guarded) for the read-side fast paths (see the crate docs): `what`
    /// returns the function's name, and is only called if a panic reaches the boundary.
    #[inline(always)]
    pub fn guarded_fast<W: Fn() -> &'static str, R>(self, what: W, body: impl FnOnce() -> R) -> R {
        let abort_on_unwind = AbortOnUnwind::<L, W>(what, PhantomData);
        let result = body();
        std::mem::forget(abort_on_unwind);
        result
    }

    /// Abort because the caller of `what` misused the API as `message` says.
    #[cold]
    #[inline(never)]
    pub fn misuse(self, what: &str, message: &str) -> ! {
        let _ = writeln!(
            std::io::stderr().lock(),
            "{}: fatal error in {what}(), aborting: {message}",
            L::NAME
        );
        std::process::abort()
    }

    /// `pointer`, or an abort naming `what` and the argument if it is NULL.
    #[inline(always)]
    pub fn non_null<T>(self, pointer: *const T, what: &'static str, argument: &str) -> *const T {
        if pointer.is_null() {
            self.null_argument(what, argument);
        }
        pointer
    }

    #[cold]
    #[inline(never)]
    fn null_argument(self, what: &'static str, argument: &str) -> ! {
        self.misuse(what, &format!("`{argument}` is NULL"))
    }

    /// Write `LIBRARY: message` to standard error the first time `flag` is seen unset (for the
    /// few situations where the library reports an error and goes on).
    #[cold]
    #[inline(never)]
    pub fn warn_once(self, flag: &AtomicBool, message: &str) {
        if !flag.swap(true, Relaxed) {
            let _ = writeln!(std::io::stderr().lock(), "{}: {message}", L::NAME);
        }
    }

    #[cold]
    #[inline(never)]
    fn panicked(self, what: &'static str, payload: Box<dyn Any + Send>) -> ! {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "<non-string panic payload>".to_string());
        // rcukit's messages start with "rcukit: ", which the line says already.
        let message = message
            .strip_prefix("rcukit: ")
            .unwrap_or(&message)
            .to_string();
        // The payload is leaked: its `Drop` could panic again, and the process ends anyway.
        std::mem::forget(payload);
        self.misuse(what, &message)
    }
}

/// Aborts when dropped, which only happens while unwinding (see
/// [`Boundary::guarded_fast`]). Zero-sized: `W` is a closure that captures nothing.
struct AbortOnUnwind<L: Library, W: Fn() -> &'static str>(W, PhantomData<L>);

impl<L: Library, W: Fn() -> &'static str> Drop for AbortOnUnwind<L, W> {
    #[cold]
    fn drop(&mut self) {
        Boundary::<L>::NEW.misuse((self.0)(), "a panic (reported above) reached the boundary")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Test;
    impl Library for Test {
        const NAME: &'static str = "test";
    }
    const FFI: Boundary<Test> = Boundary::NEW;

    #[test]
    fn bodies_run_and_return_through_the_boundary() {
        assert_eq!(FFI.guarded("f", || 1 + 1), 2);
        assert_eq!(FFI.guarded_fast(|| "g", || 2 + 2), 4);
        let x = 5;
        assert_eq!(FFI.non_null(&x, "h", "x"), &x as *const i32);
    }

    #[test]
    fn the_fast_guard_is_zero_sized() {
        let guard = AbortOnUnwind::<Test, _>(|| "f", PhantomData);
        assert_eq!(std::mem::size_of_val(&guard), 0);
        std::mem::forget(guard);
        assert_eq!(std::mem::size_of::<Boundary<Test>>(), 0);
    }
}
