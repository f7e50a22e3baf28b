//! liburcu (memb and qsbr flavors) and Concurrency Kit's ck_epoch, through the C shims in
//! `csrc/` (feature `c-peers`).
//!
//! liburcu's read-side primitives are inline functions, and a foreign call per operation
//! would cost more than the operation, so each shim runs a whole loop in C (see
//! `csrc/lab_c_peers.h`); the functions here only make those loops safe to call.

use std::sync::atomic::AtomicI32;

mod ffi {
    use std::os::raw::c_int;

    extern "C" {
        pub fn lab_urcu_memb_read_loop(pp: *const *mut u64, iters: u64) -> u64;
        pub fn lab_urcu_qsbr_read_loop(pp: *const *mut u64, iters: u64, qs_every: u64) -> u64;
        pub fn lab_ck_epoch_read_loop(pp: *const *mut u64, iters: u64) -> u64;
        pub fn lab_urcu_memb_busy_reader(stop: *const c_int);
        pub fn lab_urcu_qsbr_busy_reader(stop: *const c_int);
        pub fn lab_ck_epoch_busy_reader(stop: *const c_int);
        pub fn lab_urcu_memb_synchronize();
        pub fn lab_urcu_qsbr_synchronize();
        pub fn lab_ck_epoch_synchronize();
        pub fn lab_urcu_memb_retire(n: u64) -> u64;
        pub fn lab_ck_epoch_retire(n: u64) -> u64;
    }
}

/// The C flavors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// liburcu's memb flavor (membarrier, the default liburcu).
    UrcuMemb,
    /// liburcu's qsbr flavor.
    UrcuQsbr,
    /// Concurrency Kit's ck_epoch.
    CkEpoch,
}

/// A `u64` the C read loops dereference: a pointer that is never changed while they run.
pub struct Target {
    ptr: *mut u64,
}

// SAFETY: the pointee is only read, and freed in `Drop` when no loop can be running (loops
// borrow the `Target`).
unsafe impl Send for Target {}
// SAFETY: as above: shared access is read-only.
unsafe impl Sync for Target {}

impl Target {
    /// A target holding `value`.
    pub fn new(value: u64) -> Target {
        Target {
            ptr: Box::into_raw(Box::new(value)),
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        // SAFETY: created by `Box::into_raw` in `new`; no loop borrows `self` any more.
        drop(unsafe { Box::from_raw(self.ptr) });
    }
}

/// Run `iters` read-side sections of `flavor`, each loading `target`; returns the sum.
/// liburcu qsbr readers announce a quiescent state every `qs_every` sections.
pub fn read_loop(flavor: Flavor, target: &Target, iters: u64, qs_every: u64) -> u64 {
    let pp: *const *mut u64 = &target.ptr;
    // SAFETY: `pp` points to a valid pointer to a live `u64` for the whole call (`target` is
    // borrowed); the shims register and unregister the calling thread themselves.
    unsafe {
        match flavor {
            Flavor::UrcuMemb => ffi::lab_urcu_memb_read_loop(pp, iters),
            Flavor::UrcuQsbr => ffi::lab_urcu_qsbr_read_loop(pp, iters, qs_every),
            Flavor::CkEpoch => ffi::lab_ck_epoch_read_loop(pp, iters),
        }
    }
}

/// Loop short read-side sections of `flavor` until `stop` is non-zero.
pub fn busy_reader(flavor: Flavor, stop: &AtomicI32) {
    let p = stop.as_ptr() as *const std::os::raw::c_int;
    // SAFETY: `stop` outlives the call; the shim only reads it (volatile), and it is an
    // `AtomicI32`, so concurrent stores from Rust are fine.
    unsafe {
        match flavor {
            Flavor::UrcuMemb => ffi::lab_urcu_memb_busy_reader(p),
            Flavor::UrcuQsbr => ffi::lab_urcu_qsbr_busy_reader(p),
            Flavor::CkEpoch => ffi::lab_ck_epoch_busy_reader(p),
        }
    }
}

/// One grace period of `flavor` (the calling thread must not be one of its readers, which
/// no safe code in the lab makes it).
pub fn synchronize(flavor: Flavor) {
    // SAFETY: the shims take no arguments; the calling thread is not inside a read-side
    // section of the flavor (the read loops leave theirs before returning).
    unsafe {
        match flavor {
            Flavor::UrcuMemb => ffi::lab_urcu_memb_synchronize(),
            Flavor::UrcuQsbr => ffi::lab_urcu_qsbr_synchronize(),
            Flavor::CkEpoch => ffi::lab_ck_epoch_synchronize(),
        }
    }
}

/// Retire `n` objects through `flavor`'s callback API and wait for them all; the number
/// freed, or `None` for a flavor the lab does not retire through (qsbr shares liburcu's
/// call_rcu machinery with memb).
pub fn retire(flavor: Flavor, n: u64) -> Option<u64> {
    // SAFETY: the shims allocate, queue and free their own objects.
    unsafe {
        match flavor {
            Flavor::UrcuMemb => Some(ffi::lab_urcu_memb_retire(n)),
            Flavor::CkEpoch => Some(ffi::lab_ck_epoch_retire(n)),
            Flavor::UrcuQsbr => None,
        }
    }
}
