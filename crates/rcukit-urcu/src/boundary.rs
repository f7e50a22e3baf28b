//! The boundary between C and Rust: no panic crosses it.
//!
//! The mechanism is shared with `librcukit` and lives in the internal crate `rcukit-ffi` (its
//! documentation explains it): every exported function runs its body through `FFI.guarded`
//! (the read-side fast paths through `FFI.guarded_fast`), so that a panic (the rcukit API's
//! answer to misuse, such as waiting for a grace period inside a read-side critical section) is
//! reported on one line and aborts the process, as liburcu's own assertions abort. Misuse that
//! only this layer sees goes through `FFI.misuse`; `FFI.warn_once` is for the few situations
//! where liburcu itself prints an error and goes on. Every line starts with
//! `rcukit (liburcu ABI):`.

use rcukit_ffi::{Boundary, Library};

/// `liburcu-rcukit`, as its lines name it ("rcukit (liburcu ABI)").
pub(crate) struct LiburcuAbi;

impl Library for LiburcuAbi {
    const NAME: &'static str = "rcukit (liburcu ABI)";
}

/// This library's boundary.
pub(crate) const FFI: Boundary<LiburcuAbi> = Boundary::NEW;
