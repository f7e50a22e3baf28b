//! The boundary between C and Rust: no panic crosses it, and misuse ends the process with a
//! message (`rcukit: fatal error in FUNCTION(), aborting: MESSAGE`).
//!
//! The mechanism is shared with the liburcu ABI and lives in the internal crate `rcukit-ffi`
//! (its documentation explains it): every exported function runs its body through
//! `FFI.guarded` (the read-side fast paths through `FFI.guarded_fast`, which costs nothing
//! until a panic), and misuse that only this layer can see (an unlock of a guard that is not
//! locked, a NULL handle) goes through `FFI.misuse`.
//!
//! Why abort rather than return an error code: these are programming errors after which the
//! program's RCU state is not what it believes (a read-side critical section that never ends,
//! a grace period that would wait for its own caller). The functions whose failures a correct
//! program must expect (building a domain, configuration values) return a
//! [`rcukit_status`](crate::status::rcukit_status) instead.

use rcukit_ffi::{Boundary, Library};

/// `librcukit`, as its fatal-error lines name it ("rcukit").
pub(crate) struct Rcukit;

impl Library for Rcukit {
    const NAME: &'static str = "rcukit";
}

/// This library's boundary.
pub(crate) const FFI: Boundary<Rcukit> = Boundary::NEW;
