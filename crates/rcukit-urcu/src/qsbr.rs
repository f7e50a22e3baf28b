//! The qsbr flavor's own functions: its domain, thread registration, quiescent states,
//! offline/online, `synchronize_rcu`.
//!
//! # The domain and registration
//!
//! liburcu-qsbr is one process-wide domain; here it is one `rcukit::Qsbr` (named
//! `urcu-qsbr`). A thread's registration is a `QsbrThread` kept in a thread-local: made by
//! `rcu_register_thread()` (online from then on, as in liburcu), dropped by
//! `rcu_unregister_thread()`, and dropped when the thread exits registered (liburcu would keep
//! a dangling registry entry; here the thread simply stops being waited for). Registering twice, or unregistering a thread that is not registered,
//! aborts, as liburcu's assertions do.
//!
//! `rcu_read_lock()`/`rcu_read_unlock()` cost nothing in QSBR and do nothing here either;
//! `rcu_read_ongoing()` says whether the thread is online. `rcu_quiescent_state()`,
//! `rcu_thread_offline()` and `rcu_thread_online()` act on the registration, and do nothing
//! on a thread that is not registered. As in liburcu (whose quiescent state stores the grace
//! period counter in the thread's record, which is what being online is), a quiescent state
//! of an offline thread brings it online: a program that reads after it is protected.
//!
//! The domain has fenced quiescent states, as liburcu-qsbr's are (a full barrier around the
//! store, paid, as there, only by a quiescent state that finds a new grace period counter): a
//! program written for liburcu already pays that, and a `synchronize_rcu()` that sleeps until
//! a reader wakes it then pairs a fence of its own with it instead of interrupting every CPU
//! with `membarrier`.
//!
//! # Waiting while online
//!
//! liburcu lets an online thread call `synchronize_rcu()` and `rcu_barrier()`: they go
//! offline around the wait and come back online. `offline_while` does that; rcukit's own
//! `Qsbr::synchronize*` would refuse an online caller (it would wait for itself).
//! `synchronize_rcu()` runs the grace period in the caller (`Qsbr::synchronize_expedited`:
//! no batching delay, and in QSBR an expedited grace period interrupts nobody), as liburcu's
//! does.
//!
//! # Callbacks
//!
//! liburcu's call_rcu threads are registered QSBR readers and run callbacks *online*, so a
//! callback may read RCU-protected data. rcukit's callback workers are not registered; so
//! every callback of this flavor runs inside `online_while`, which registers the worker on
//! its first callback and keeps it online for the callback's duration, offline otherwise.

use crate::boundary::FFI;
use rcukit::{Qsbr, QsbrThread};
use rcukit_ffi::fork_once::ForkOnce;
use std::cell::RefCell;
use std::mem::ManuallyDrop;

/// Built on first use; a child forked in the middle of the build builds it again (see
/// `ForkOnce`): a `OnceLock` there waited for the parent's builder for ever.
static DOMAIN: ForkOnce<Qsbr> = ForkOnce::new();

/// The qsbr flavor's domain (built on first use).
#[inline]
pub(crate) fn domain() -> &'static Qsbr {
    match DOMAIN.get() {
        Some(qsbr) => qsbr,
        None => build(),
    }
}

#[cold]
#[inline(never)]
fn build() -> &'static Qsbr {
    DOMAIN.get_or_build(|| {
        Qsbr::builder()
            .name("urcu-qsbr")
            .fenced_quiescent_states(true)
            .build()
            .unwrap_or_else(|e| panic!("cannot start the qsbr flavor's domain: {e}"))
    })
}

thread_local! {
    /// The calling thread's registration, if it registered. Without a destructor
    /// (`ManuallyDrop`): glibc runs Rust's thread-local destructors before the thread's
    /// `pthread_key` destructors, and a program's key destructor may still read, unregister or
    /// register, as it may with liburcu. A registration left at exit is dropped by
    /// [`EXIT_KEY`]'s destructor instead.
    static ME: ManuallyDrop<RefCell<Option<QsbrThread<'static>>>> =
        const { ManuallyDrop::new(RefCell::new(None)) };
}

/// A key whose value is set while the thread is registered: its destructor drops a
/// registration the thread left at exit. It first lets one round of the thread's key
/// destructors go by (setting its value again), so that the program's own destructors of that
/// round run registered, then drops it in the next round. (A registration made or kept past
/// the last round the C library runs, `PTHREAD_DESTRUCTOR_ITERATIONS`, stays: grace periods
/// would then wait for it, as liburcu's wait for a thread that exits registered.)
static EXIT_KEY: ForkOnce<libc::pthread_key_t> = ForkOnce::new();

/// `EXIT_KEY`'s values: registered, and registered with one round of destructors gone by.
const REGISTERED: usize = 1;
const LAST_ROUND: usize = 2;

fn exit_key() -> libc::pthread_key_t {
    *EXIT_KEY.get_or_build(|| {
        let mut key = 0;
        // SAFETY: `key` is written by the call; `drop_left_registration` lives for ever.
        let r = unsafe { libc::pthread_key_create(&mut key, Some(drop_left_registration)) };
        assert_eq!(r, 0, "pthread_key_create failed ({r})");
        key
    })
}

/// Set `EXIT_KEY`'s value for the calling thread.
fn set_exit_value(value: usize) {
    // SAFETY: a key created by `exit_key`; the value is a number, never dereferenced.
    unsafe { libc::pthread_setspecific(exit_key(), value as *const libc::c_void) };
}

/// `EXIT_KEY`'s destructor (see there).
unsafe extern "C" fn drop_left_registration(value: *mut libc::c_void) {
    FFI.guarded("urcu_qsbr thread exit", || {
        if value as usize == REGISTERED {
            set_exit_value(LAST_ROUND);
            return;
        }
        let left = ME.try_with(|me| me.try_borrow_mut().ok().and_then(|mut me| me.take()));
        drop(left);
    })
}

/// Run `f` on the calling thread's registration, if it has one.
#[inline]
fn with_me<R>(f: impl FnOnce(Option<&mut QsbrThread<'static>>) -> R) -> R {
    let mut f = Some(f);
    let outcome = ME.try_with(|me| match me.try_borrow_mut() {
        Ok(mut me) => (f.take().expect("called once"))(me.as_mut()),
        Err(_) => (f.take().expect("called once"))(None),
    });
    match outcome {
        Ok(result) => result,
        Err(_) => (f.take().expect("not called when the thread-local is gone"))(None),
    }
}

/// Is the calling thread registered and online?
pub(crate) fn is_online() -> bool {
    with_me(|me| me.is_some_and(|me| me.is_online()))
}

/// Run `f` offline if the calling thread is online, then come back online (liburcu's
/// behaviour around grace-period waits).
pub(crate) fn offline_while<R>(f: impl FnOnce() -> R) -> R {
    let was_online = with_me(|me| match me {
        Some(me) if me.is_online() => {
            me.offline();
            true
        }
        _ => false,
    });
    struct BackOnline(bool);
    impl Drop for BackOnline {
        fn drop(&mut self) {
            if self.0 {
                with_me(|me| {
                    if let Some(me) = me {
                        me.online();
                    }
                });
            }
        }
    }
    let _back = BackOnline(was_online);
    f()
}

/// Run `f` (a callback of this flavor) online: register the calling thread on first use, come
/// online for `f`, and go offline again afterwards if it was offline before.
pub(crate) fn online_while<R>(f: impl FnOnce() -> R) -> R {
    // `Some(true)`: it was online; `Some(false)`: it came online here; `None`: unregistered.
    let was_online = with_me(|me| {
        me.map(|me| {
            let online = me.is_online();
            if !online {
                me.online();
            }
            online
        })
    });
    let came_online = match was_online {
        Some(online) => !online,
        None => register_if_not(),
    };
    struct BackOffline(bool);
    impl Drop for BackOffline {
        fn drop(&mut self) {
            if self.0 {
                with_me(|me| {
                    if let Some(me) = me {
                        me.offline();
                    }
                });
            }
        }
    }
    let _back = BackOffline(came_online);
    f()
}

/// Register the calling thread if it is not registered; true if it did (it is online then).
fn register_if_not() -> bool {
    ME.try_with(|me| {
        let mut me = me.borrow_mut();
        if me.is_some() {
            return false;
        }
        *me = Some(domain().register());
        set_exit_value(REGISTERED);
        true
    })
    .unwrap_or(false)
}

/// Register the calling thread; it is online from now on. Aborts if it is already registered.
#[no_mangle]
pub extern "C" fn urcu_qsbr_register_thread() {
    FFI.guarded("urcu_qsbr_register_thread", || {
        if !register_if_not() {
            FFI.misuse(
                "urcu_qsbr_register_thread",
                "the calling thread is already registered",
            );
        }
    })
}

/// Unregister the calling thread (it goes offline first). Aborts if it is not registered.
#[no_mangle]
pub extern "C" fn urcu_qsbr_unregister_thread() {
    FFI.guarded("urcu_qsbr_unregister_thread", || {
        let registration = ME.try_with(|me| me.borrow_mut().take()).ok().flatten();
        match registration {
            Some(registration) => {
                set_exit_value(0);
                drop(registration)
            }
            None => FFI.misuse(
                "urcu_qsbr_unregister_thread",
                "the calling thread is not registered",
            ),
        }
    })
}

/// Announce a quiescent state (nothing if the thread is offline or not registered).
#[no_mangle]
pub extern "C" fn urcu_qsbr_quiescent_state() {
    FFI.guarded_fast(
        || "urcu_qsbr_quiescent_state",
        || {
            with_me(|me| match me {
                Some(me) if me.is_online() => me.quiescent_state(),
                // liburcu's quiescent state is the store that makes a thread online.
                Some(me) => me.online(),
                None => {}
            })
        },
    )
}

/// Go offline (nothing if not registered).
#[no_mangle]
pub extern "C" fn urcu_qsbr_thread_offline() {
    FFI.guarded("urcu_qsbr_thread_offline", || {
        with_me(|me| {
            if let Some(me) = me {
                me.offline();
            }
        })
    })
}

/// Come back online (nothing if not registered).
#[no_mangle]
pub extern "C" fn urcu_qsbr_thread_online() {
    FFI.guarded("urcu_qsbr_thread_online", || {
        with_me(|me| {
            if let Some(me) = me {
                me.online();
            }
        })
    })
}

/// Nothing: QSBR readers mark no section.
#[no_mangle]
pub extern "C" fn urcu_qsbr_read_lock() {}

/// Nothing: QSBR readers mark no section.
#[no_mangle]
pub extern "C" fn urcu_qsbr_read_unlock() {}

/// Non-zero if the calling thread is registered and online.
#[no_mangle]
pub extern "C" fn urcu_qsbr_read_ongoing() -> i32 {
    FFI.guarded("urcu_qsbr_read_ongoing", || i32::from(is_online()))
}

/// Wait for a grace period in the caller, going offline around the wait if the caller is
/// online.
#[no_mangle]
pub extern "C" fn urcu_qsbr_synchronize_rcu() {
    FFI.guarded("urcu_qsbr_synchronize_rcu", || {
        offline_while(|| domain().synchronize_expedited())
    })
}

/// Start the flavor early; optional.
#[no_mangle]
pub extern "C" fn urcu_qsbr_init() {
    FFI.guarded("urcu_qsbr_init", || {
        domain();
    })
}

/// liburcu's destructor-time clean-up: nothing to do.
#[no_mangle]
pub extern "C" fn urcu_qsbr_exit() {}
