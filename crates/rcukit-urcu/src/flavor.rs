//! `Flavor`: what the shared parts of liburcu's ABI (callbacks, barriers, polling, deferral)
//! need from a flavor, for `Memb` and `Qsbr`.
//!
//! liburcu compiles the same call_rcu, defer and poll code once per flavor, with different
//! symbol names; here that code is written once, generic over this trait, and the symbols of
//! both flavors are generated from it in [`exports`](crate::exports).

use crate::boundary::FFI;
use crate::{memb, qsbr};
use rcukit::GpCookie;
use std::sync::atomic::AtomicBool;

/// A liburcu flavor on an rcukit domain.
pub(crate) trait Flavor: 'static {
    /// An index per flavor (0, 1), for per-flavor tables.
    const INDEX: usize;

    /// Queue `run(data)` on the domain's callback workers after a grace period.
    ///
    /// # Safety
    ///
    /// As `rcukit::Rcu::call_raw`.
    unsafe fn call_raw(run: unsafe fn(*mut ()), data: *mut (), bytes: usize);

    /// liburcu's `synchronize_rcu()` for this flavor.
    fn synchronize_rcu();

    /// liburcu's `rcu_barrier()` for this flavor: wait for every callback queued before.
    fn barrier();

    /// Callbacks of this flavor queued and not yet run.
    fn callbacks_pending() -> u64;

    /// Run `f`, a wait, where the calling thread holds no grace period of this flavor back
    /// (a registered qsbr thread goes offline around it).
    fn waiting<R>(f: impl FnOnce() -> R) -> R;

    /// May the calling thread wait for this flavor's callbacks (not inside one of its
    /// read-side critical sections, whose grace period they would wait for)?
    fn may_wait_for_callbacks() -> bool;

    /// A cookie for which a normal grace period has been requested.
    fn start_poll() -> GpCookie;

    /// Has a grace period covered `cookie`?
    fn poll(cookie: &GpCookie) -> bool;

    /// Run `f`, a callback of this flavor, in the context liburcu's call_rcu threads give
    /// callbacks.
    fn in_callback(f: impl FnOnce());
}

/// liburcu-memb on its `rcukit::Rcu` domain.
pub(crate) struct Memb;

/// liburcu-qsbr on its `rcukit::Qsbr` domain.
pub(crate) struct Qsbr;

impl Flavor for Memb {
    const INDEX: usize = 0;

    unsafe fn call_raw(run: unsafe fn(*mut ()), data: *mut (), bytes: usize) {
        // SAFETY: forwarded to the caller.
        unsafe { memb::domain().call_raw(run, data, bytes) }
    }

    fn synchronize_rcu() {
        memb::domain().synchronize_expedited();
    }

    fn barrier() {
        // liburcu refuses a barrier inside a read-side critical section with an error message
        // and returns at once; so does this (rcukit would abort).
        if memb::is_reading() {
            static WARNED: AtomicBool = AtomicBool::new(false);
            FFI.warn_once(
                &WARNED,
                "rcu_barrier() called from within a read-side critical section; it returns \
                 without waiting, as liburcu's does",
            );
            return;
        }
        memb::domain().barrier();
    }

    fn callbacks_pending() -> u64 {
        memb::domain().stats().callbacks_pending
    }

    fn waiting<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    fn may_wait_for_callbacks() -> bool {
        !memb::is_reading()
    }

    fn start_poll() -> GpCookie {
        memb::domain().start_poll()
    }

    fn poll(cookie: &GpCookie) -> bool {
        memb::domain().poll(cookie)
    }

    #[inline]
    fn in_callback(f: impl FnOnce()) {
        f()
    }
}

impl Flavor for Qsbr {
    const INDEX: usize = 1;

    unsafe fn call_raw(run: unsafe fn(*mut ()), data: *mut (), bytes: usize) {
        // SAFETY: forwarded to the caller.
        unsafe { qsbr::domain().call_raw(run, data, bytes) }
    }

    fn synchronize_rcu() {
        qsbr::offline_while(|| qsbr::domain().synchronize_expedited());
    }

    fn barrier() {
        qsbr::offline_while(|| qsbr::domain().barrier());
    }

    fn callbacks_pending() -> u64 {
        qsbr::domain().stats().callbacks_pending
    }

    fn waiting<R>(f: impl FnOnce() -> R) -> R {
        qsbr::offline_while(f)
    }

    fn may_wait_for_callbacks() -> bool {
        true // an online thread goes offline around the wait
    }

    fn start_poll() -> GpCookie {
        qsbr::domain().start_poll()
    }

    fn poll(cookie: &GpCookie) -> bool {
        qsbr::domain().poll(cookie)
    }

    fn in_callback(f: impl FnOnce()) {
        qsbr::online_while(f)
    }
}
