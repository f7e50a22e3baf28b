//! QSBR domains through C: [`rcukit_qsbr`] and the registration of a thread,
//! [`rcukit_qsbr_thread`].
//!
//! A `rcukit_qsbr *` is a pointer to an `rcukit::Qsbr` made by `Box::new`, as a
//! `rcukit_domain *` is to an `Rcu`. A `rcukit_qsbr_thread *` owns a boxed `QsbrThread`
//! (with the thread that registered), which is why registration is explicit here as in Rust:
//! the thread is *online* from `rcukit_qsbr_register` on, reads with no code at all, and
//! announces quiescent states; `rcukit_qsbr_unregister` drops the registration.
//!
//! Rust's borrow checker keeps a `QsbrThread` on its thread and inside its domain's lifetime;
//! in C the rules are the caller's, checked where it is cheap: unregistering from another
//! thread aborts, and so does freeing a domain that still has registered threads. A thread
//! that exits without unregistering behaves as a leaked Rust handle: it stays registered (an
//! *orphaned* reader in the statistics); offline it costs nothing, online it holds every grace
//! period and the stall report says that its thread has exited.
//!
//! Waiting for a grace period (`synchronize*`, `cond_synchronize*`, `barrier`) while the
//! calling thread is online in the same domain aborts with the Rust API's message; go offline
//! first.

use crate::boundary::FFI;
use crate::callback::{prepare, rcukit_callback_fn, rcukit_head, run_head};
use crate::config::{config_or_default, rcukit_config};
use crate::cookie::rcukit_cookie;
use crate::stats::rcukit_stats;
use crate::status::{fail, from_error, rcukit_status};
use rcukit::{Qsbr, QsbrThread};
use std::mem::size_of;

/// A QSBR domain (opaque; an `rcukit::Qsbr` inside).
pub struct rcukit_qsbr {
    _opaque: [u8; 0],
}

/// A thread's registration with a QSBR domain (opaque).
pub struct rcukit_qsbr_thread {
    thread: QsbrThread<'static>,
    owner: libc::pthread_t,
}

/// # Safety
///
/// `qsbr` is NULL or a live handle, kept alive while the reference is used.
#[inline(always)]
unsafe fn domain<'a>(qsbr: *const rcukit_qsbr, what: &'static str) -> &'a Qsbr {
    let qsbr = FFI.non_null(qsbr, what, "qsbr");
    // SAFETY: a live handle points to a `Qsbr` (see the module docs).
    unsafe { &*qsbr.cast::<Qsbr>() }
}

/// # Safety
///
/// `thread` is NULL or a live registration, used by its own thread.
#[inline(always)]
unsafe fn registration<'a>(
    thread: *mut rcukit_qsbr_thread,
    what: &'static str,
) -> &'a mut rcukit_qsbr_thread {
    let thread = FFI.non_null(thread, what, "thread").cast_mut();
    // SAFETY: a live registration, not used by another thread at the same time.
    unsafe { &mut *thread }
}

/// A new QSBR domain built with `config` (NULL: defaults); NULL on failure, with the reason in
/// `rcukit_last_error()`. Only the settings that apply to QSBR may be set: name, stall
/// timeout, normal grace-period delay, callback workers, backlog callbacks, fenced quiescent
/// states and the report hook; any other is `RCUKIT_INVALID_SETTING`.
///
/// # Safety
///
/// `config` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_new(config: *const rcukit_config) -> *mut rcukit_qsbr {
    FFI.guarded("rcukit_qsbr_new", || {
        // SAFETY: forwarded to the caller.
        let config = unsafe { config_or_default(config) };
        let built = match config.qsbr_builder() {
            Ok(builder) => builder.build(),
            Err(setting) => {
                fail(
                    rcukit_status::RCUKIT_INVALID_SETTING,
                    format!("invalid setting `{setting}`: it does not apply to QSBR domains"),
                );
                return std::ptr::null_mut();
            }
        };
        match built {
            Ok(qsbr) => Box::into_raw(Box::new(qsbr)).cast(),
            Err(e) => {
                from_error(&e);
                std::ptr::null_mut()
            }
        }
    })
}

/// Free a QSBR domain (NULL is ignored), running its pending callbacks first. Aborts if a
/// live thread is still registered with it. A thread that exited registered and online (see
/// the module docs) holds every grace period, this free's too: it then waits for ever, and
/// the stall reports say that the thread has exited.
///
/// # Safety
///
/// `qsbr` is NULL or came from `rcukit_qsbr_new`, is freed once and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_free(qsbr: *mut rcukit_qsbr) {
    FFI.guarded("rcukit_qsbr_free", || {
        if qsbr.is_null() {
            return;
        }
        // SAFETY: the caller passes a live handle.
        let registered = unsafe { domain(qsbr, "rcukit_qsbr_free") }.stats().readers;
        if registered > 0 {
            FFI.misuse(
                "rcukit_qsbr_free",
                &format!(
                    "{registered} thread(s) are still registered with this QSBR domain; \
                     unregister them first"
                ),
            );
        }
        // SAFETY: the caller gives back a pointer made by `Box::into_raw` in
        // `rcukit_qsbr_new`, once.
        drop(unsafe { Box::from_raw(qsbr.cast::<Qsbr>()) });
    })
}

/// Register the calling thread; it is online from now on: grace periods wait for its
/// quiescent states until it goes offline or unregisters. Aborts if the thread is already
/// registered with this domain.
///
/// # Safety
///
/// `qsbr` is a live handle that outlives the registration.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_register(qsbr: *const rcukit_qsbr) -> *mut rcukit_qsbr_thread {
    FFI.guarded("rcukit_qsbr_register", || {
        // SAFETY: forwarded to the caller, who keeps the domain alive while registered.
        let qsbr: &'static Qsbr = unsafe { domain(qsbr, "rcukit_qsbr_register") };
        let thread = qsbr.register();
        // SAFETY: `pthread_self` has no preconditions.
        let owner = unsafe { libc::pthread_self() };
        Box::into_raw(Box::new(rcukit_qsbr_thread { thread, owner }))
    })
}

/// Unregister (NULL is ignored). Aborts if called by another thread than the one that
/// registered.
///
/// # Safety
///
/// `thread` is NULL or a live registration, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_unregister(thread: *mut rcukit_qsbr_thread) {
    FFI.guarded("rcukit_qsbr_unregister", || {
        if thread.is_null() {
            return;
        }
        // SAFETY: the caller passes a live registration.
        let owner = unsafe { (*thread).owner };
        // SAFETY: `pthread_equal` and `pthread_self` have no preconditions.
        if unsafe { libc::pthread_equal(owner, libc::pthread_self()) } == 0 {
            FFI.misuse(
                "rcukit_qsbr_unregister",
                "a registration is dropped by the thread that registered",
            );
        }
        // SAFETY: made by `Box::into_raw` in `rcukit_qsbr_register`; given back once.
        drop(unsafe { Box::from_raw(thread) });
    })
}

/// Announce a quiescent state: the calling thread holds no reference to data protected by the
/// domain here. One load and one store, no fence. Does nothing while offline.
///
/// # Safety
///
/// `thread` is a live registration of the calling thread.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_quiescent_state(thread: *mut rcukit_qsbr_thread) {
    FFI.guarded_fast(
        || "rcukit_qsbr_quiescent_state",
        || {
            // SAFETY: forwarded to the caller.
            unsafe { registration(thread, "rcukit_qsbr_quiescent_state") }
                .thread
                .quiescent_state()
        },
    )
}

/// Go offline (implies a quiescent state): grace periods stop waiting for this thread until
/// `rcukit_qsbr_online`. Use it around blocking calls.
///
/// # Safety
///
/// `thread` is a live registration of the calling thread.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_offline(thread: *mut rcukit_qsbr_thread) {
    FFI.guarded("rcukit_qsbr_offline", || {
        // SAFETY: forwarded to the caller.
        unsafe { registration(thread, "rcukit_qsbr_offline") }
            .thread
            .offline()
    })
}

/// Come back online (a load, a store and a full fence).
///
/// # Safety
///
/// `thread` is a live registration of the calling thread.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_online(thread: *mut rcukit_qsbr_thread) {
    FFI.guarded("rcukit_qsbr_online", || {
        // SAFETY: forwarded to the caller.
        unsafe { registration(thread, "rcukit_qsbr_online") }
            .thread
            .online()
    })
}

/// Is the calling thread registered with the domain and online?
///
/// # Safety
///
/// `qsbr` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_is_online(qsbr: *const rcukit_qsbr) -> bool {
    // SAFETY: forwarded to the caller.
    FFI.guarded("rcukit_qsbr_is_online", || {
        unsafe { domain(qsbr, "rcukit_qsbr_is_online") }.is_online()
    })
}

/// Wait for a grace period: every thread online when it was called has since announced a
/// quiescent state or gone offline. Aborts if the calling thread is online in the domain.
///
/// # Safety
///
/// `qsbr` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_synchronize(qsbr: *const rcukit_qsbr) {
    // SAFETY: forwarded to the caller.
    FFI.guarded("rcukit_qsbr_synchronize", || {
        unsafe { domain(qsbr, "rcukit_qsbr_synchronize") }.synchronize()
    })
}

/// Run (or share) a grace period in the calling thread, without the normal batching delay.
/// Aborts if the calling thread is online in the domain.
///
/// # Safety
///
/// `qsbr` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_synchronize_expedited(qsbr: *const rcukit_qsbr) {
    FFI.guarded("rcukit_qsbr_synchronize_expedited", || {
        // SAFETY: forwarded to the caller.
        unsafe { domain(qsbr, "rcukit_qsbr_synchronize_expedited") }.synchronize_expedited()
    })
}

/// Snapshot the domain's grace-period state.
///
/// # Safety
///
/// `qsbr` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_get_state(qsbr: *const rcukit_qsbr) -> rcukit_cookie {
    // SAFETY: forwarded to the caller.
    FFI.guarded("rcukit_qsbr_get_state", || {
        unsafe { domain(qsbr, "rcukit_qsbr_get_state") }
            .get_state()
            .into()
    })
}

/// Snapshot and request a normal grace period.
///
/// # Safety
///
/// `qsbr` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_start_poll(qsbr: *const rcukit_qsbr) -> rcukit_cookie {
    // SAFETY: forwarded to the caller.
    FFI.guarded("rcukit_qsbr_start_poll", || {
        unsafe { domain(qsbr, "rcukit_qsbr_start_poll") }
            .start_poll()
            .into()
    })
}

/// Snapshot and have the helper thread run an expedited grace period, without blocking.
///
/// # Safety
///
/// `qsbr` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_start_poll_expedited(
    qsbr: *const rcukit_qsbr,
) -> rcukit_cookie {
    FFI.guarded("rcukit_qsbr_start_poll_expedited", || {
        // SAFETY: forwarded to the caller.
        unsafe { domain(qsbr, "rcukit_qsbr_start_poll_expedited") }
            .start_poll_expedited()
            .into()
    })
}

/// Has a grace period covering `cookie` completed? Never blocks; fine from online threads.
/// Aborts if the cookie came from another domain.
///
/// # Safety
///
/// `qsbr` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_poll(qsbr: *const rcukit_qsbr, cookie: rcukit_cookie) -> bool {
    // SAFETY: forwarded to the caller.
    FFI.guarded("rcukit_qsbr_poll", || {
        unsafe { domain(qsbr, "rcukit_qsbr_poll") }.poll(&cookie.into())
    })
}

/// Wait like `rcukit_qsbr_synchronize` unless `cookie` has expired. Aborts if it would wait
/// while the calling thread is online, or if the cookie came from another domain.
///
/// # Safety
///
/// `qsbr` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_cond_synchronize(
    qsbr: *const rcukit_qsbr,
    cookie: rcukit_cookie,
) {
    FFI.guarded("rcukit_qsbr_cond_synchronize", || {
        // SAFETY: forwarded to the caller.
        unsafe { domain(qsbr, "rcukit_qsbr_cond_synchronize") }.cond_synchronize(&cookie.into())
    })
}

/// Run an expedited grace period unless `cookie` has expired. Aborts as
/// `rcukit_qsbr_cond_synchronize`.
///
/// # Safety
///
/// `qsbr` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_cond_synchronize_expedited(
    qsbr: *const rcukit_qsbr,
    cookie: rcukit_cookie,
) {
    FFI.guarded("rcukit_qsbr_cond_synchronize_expedited", || {
        // SAFETY: forwarded to the caller.
        unsafe { domain(qsbr, "rcukit_qsbr_cond_synchronize_expedited") }
            .cond_synchronize_expedited(&cookie.into())
    })
}

/// Call `func(head)` on a callback worker after a grace period. Never waits for a grace period
/// (fine from online threads), never allocates (a flood gives way to the workers, as
/// `Rcu::call` says).
///
/// # Safety
///
/// As `rcukit_call`, with a live QSBR handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_call(
    qsbr: *const rcukit_qsbr,
    head: *mut rcukit_head,
    func: rcukit_callback_fn,
) {
    FFI.guarded("rcukit_qsbr_call", || {
        // SAFETY: forwarded to the caller.
        let qsbr = unsafe { domain(qsbr, "rcukit_qsbr_call") };
        // SAFETY: forwarded to the caller: the head is valid and unused until `func` runs.
        let data = unsafe { prepare("rcukit_qsbr_call", head, func) };
        // SAFETY: `run_head(data)` is sound once, on any thread, after a grace period: the head
        // stays valid until its function runs (the caller's contract).
        unsafe { qsbr.call_raw(run_head, data, size_of::<rcukit_head>()) };
    })
}

/// Wait until every callback queued before this call has run. Aborts if the calling thread is
/// online in the domain, or from one of its callbacks.
///
/// # Safety
///
/// `qsbr` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_barrier(qsbr: *const rcukit_qsbr) {
    // SAFETY: forwarded to the caller.
    FFI.guarded("rcukit_qsbr_barrier", || {
        unsafe { domain(qsbr, "rcukit_qsbr_barrier") }.barrier()
    })
}

/// Fill `*stats` with the domain's counters (`readers` counts registered threads).
///
/// # Safety
///
/// `qsbr` is a live handle; `stats` points to writable memory for one `rcukit_stats`.
#[no_mangle]
pub unsafe extern "C" fn rcukit_qsbr_stats(qsbr: *const rcukit_qsbr, stats: *mut rcukit_stats) {
    FFI.guarded("rcukit_qsbr_stats", || {
        let stats = FFI.non_null(stats, "rcukit_qsbr_stats", "stats").cast_mut();
        // SAFETY: forwarded to the caller.
        let snapshot = unsafe { domain(qsbr, "rcukit_qsbr_stats") }.stats();
        // SAFETY: the caller passes memory for one `rcukit_stats`.
        unsafe { stats.write(rcukit_stats::from(&snapshot)) };
    })
}
