//! [`rcukit_domain`]: RCU domains (the global one and any number of others), grace periods,
//! barriers and statistics.
//!
//! A `rcukit_domain *` *is* a pointer to an `rcukit::Rcu`: the global domain's, or one made
//! by `Box::new` in [`rcukit_domain_new`] and freed by [`rcukit_domain_free`]. No wrapper sits
//! in between, so a read-side critical section through C costs what it costs in Rust plus the
//! call. Every function here forwards to the `Rcu` method of the same name and inherits its
//! documentation and guarantees; misuse that makes the Rust method panic aborts the process
//! with the same message (see [`boundary`](crate::boundary)).

use crate::boundary::FFI;
use crate::config::{config_or_default, rcukit_config};
use crate::stats::rcukit_stats;
use crate::status::{fail, from_error, rcukit_status};
use rcukit::Rcu;

/// An RCU domain (opaque; an `rcukit::Rcu` inside).
pub struct rcukit_domain {
    _opaque: [u8; 0],
}

/// The `Rcu` behind a domain handle, or an abort naming `what` if the handle is NULL.
///
/// # Safety
///
/// `domain` is NULL or a live handle (from `rcukit_global` or `rcukit_domain_new`, not freed).
#[inline(always)]
pub(crate) unsafe fn rcu<'a>(domain: *const rcukit_domain, what: &'static str) -> &'a Rcu {
    let domain = FFI.non_null(domain, what, "domain");
    // SAFETY: a live handle points to an `Rcu` (see the module docs); the caller keeps it
    // alive for as long as the returned reference is used.
    unsafe { &*domain.cast::<Rcu>() }
}

fn handle(rcu: &Rcu) -> *mut rcukit_domain {
    (rcu as *const Rcu).cast_mut().cast()
}

/// The process-wide domain, built with default settings on first use (or with
/// `rcukit_global_init`'s) and never freed. Aborts if the system refuses to start its threads.
#[no_mangle]
pub extern "C" fn rcukit_global() -> *mut rcukit_domain {
    FFI.guarded("rcukit_global", || handle(Rcu::global()))
}

/// Build the global domain with `config` (NULL: defaults). Call it once, before anything uses
/// the global domain; `RCUKIT_ALREADY_BUILT` afterwards.
///
/// # Safety
///
/// `config` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rcukit_global_init(config: *const rcukit_config) -> rcukit_status {
    FFI.guarded("rcukit_global_init", || {
        // SAFETY: forwarded to the caller.
        let config = unsafe { config_or_default(config) };
        let builder = match config.rcu_builder() {
            Ok(builder) => builder,
            Err(setting) => return qsbr_only(setting),
        };
        match builder.build_global() {
            Ok(_) => rcukit_status::RCUKIT_OK,
            Err(e) => from_error(&e),
        }
    })
}

/// A new domain built with `config` (NULL: defaults), its threads started; NULL on failure,
/// with the reason in `rcukit_last_error()`. Free it with `rcukit_domain_free`.
///
/// # Safety
///
/// `config` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rcukit_domain_new(config: *const rcukit_config) -> *mut rcukit_domain {
    FFI.guarded("rcukit_domain_new", || {
        // SAFETY: forwarded to the caller.
        let config = unsafe { config_or_default(config) };
        let builder = match config.rcu_builder() {
            Ok(builder) => builder,
            Err(setting) => {
                qsbr_only(setting);
                return std::ptr::null_mut();
            }
        };
        match builder.build() {
            Ok(rcu) => Box::into_raw(Box::new(rcu)).cast(),
            Err(e) => {
                from_error(&e);
                std::ptr::null_mut()
            }
        }
    })
}

/// Free a domain (NULL is ignored): run every callback still pending (chains included), then
/// stop its threads. Owned sections still open keep its state alive until they end. Freeing
/// the global domain aborts, and so does freeing a domain whose readers (`rcukit_reader_new`)
/// are not all freed.
///
/// # Safety
///
/// `domain` is NULL or came from `rcukit_domain_new`, is freed once, and no guard, call or
/// callback uses it afterwards (a callback of the domain may free it: the rest of its
/// callbacks then run on that worker, after the free, so none of them may queue another
/// callback on it, read it or wait for it: a chain of callbacks that re-queue themselves
/// must be stopped before the free).
#[no_mangle]
pub unsafe extern "C" fn rcukit_domain_free(domain: *mut rcukit_domain) {
    FFI.guarded("rcukit_domain_free", || {
        if domain.is_null() {
            return;
        }
        // SAFETY: the caller passes a live handle. (Asking builds no global domain: a
        // program that never used it must still be able to set it up afterwards.)
        if unsafe { &*domain.cast::<Rcu>() }.is_global() {
            FFI.misuse(
                "rcukit_domain_free",
                "the global domain is never freed (it lives until the process exits)",
            );
        }
        // SAFETY: the caller passes a live handle.
        crate::live_readers::check_no_readers(unsafe { rcu(domain, "rcukit_domain_free") });
        // SAFETY: the caller gives back a pointer made by `Box::into_raw` in
        // `rcukit_domain_new`, once.
        drop(unsafe { Box::from_raw(domain.cast::<Rcu>()) });
    })
}

/// A unique, never reused identifier of the domain.
///
/// # Safety
///
/// `domain` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_domain_id(domain: *const rcukit_domain) -> u64 {
    // SAFETY: forwarded to the caller.
    FFI.guarded("rcukit_domain_id", || {
        unsafe { rcu(domain, "rcukit_domain_id") }.id()
    })
}

/// Is the calling thread inside a read-side critical section (a guard) of the domain?
///
/// # Safety
///
/// `domain` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_is_reading(domain: *const rcukit_domain) -> bool {
    // SAFETY: forwarded to the caller.
    FFI.guarded("rcukit_is_reading", || {
        unsafe { rcu(domain, "rcukit_is_reading") }.is_reading()
    })
}

/// Wait for a grace period: every read-side critical section running when it was called has
/// ended. Requests a normal grace period (batched, interrupting nobody) and returns on the
/// first grace period of either kind that covers the call. Aborts inside a read-side critical
/// section of the same domain, where it would wait forever.
///
/// # Safety
///
/// `domain` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_synchronize(domain: *const rcukit_domain) {
    // SAFETY: forwarded to the caller.
    FFI.guarded("rcukit_synchronize", || {
        unsafe { rcu(domain, "rcukit_synchronize") }.synchronize()
    })
}

/// Run (or share) an expedited grace period in the caller: microseconds without long readers,
/// at the price of interrupting the CPUs that run this process's threads (`membarrier(2)`).
/// Aborts inside a read-side critical section of the same domain.
///
/// # Safety
///
/// `domain` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_synchronize_expedited(domain: *const rcukit_domain) {
    FFI.guarded("rcukit_synchronize_expedited", || {
        // SAFETY: forwarded to the caller.
        unsafe { rcu(domain, "rcukit_synchronize_expedited") }.synchronize_expedited()
    })
}

/// Wait until every callback queued before this call has run (`rcu_barrier`). Aborts inside a
/// read-side critical section of the domain or from one of its callbacks.
///
/// # Safety
///
/// `domain` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_barrier(domain: *const rcukit_domain) {
    // SAFETY: forwarded to the caller.
    FFI.guarded("rcukit_barrier", || {
        unsafe { rcu(domain, "rcukit_barrier") }.barrier()
    })
}

/// Fill `*stats` with the domain's counters (a snapshot).
///
/// # Safety
///
/// `domain` is a live handle; `stats` points to writable memory for one `rcukit_stats`.
#[no_mangle]
pub unsafe extern "C" fn rcukit_domain_stats(
    domain: *const rcukit_domain,
    stats: *mut rcukit_stats,
) {
    FFI.guarded("rcukit_domain_stats", || {
        let stats = FFI
            .non_null(stats, "rcukit_domain_stats", "stats")
            .cast_mut();
        // SAFETY: forwarded to the caller.
        let snapshot = unsafe { rcu(domain, "rcukit_domain_stats") }.stats();
        // SAFETY: the caller passes memory for one `rcukit_stats`.
        unsafe { stats.write(rcukit_stats::from(&snapshot)) };
    })
}

/// Refuse a setting that applies to QSBR domains only.
fn qsbr_only(setting: &str) -> rcukit_status {
    fail(
        rcukit_status::RCUKIT_INVALID_SETTING,
        format!("invalid setting `{setting}`: it applies to QSBR domains only"),
    )
}
