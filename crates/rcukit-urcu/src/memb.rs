//! The memb flavor's own functions: its domain, read-side critical sections without a token,
//! thread registration, `synchronize_rcu`.
//!
//! # The domain
//!
//! liburcu's memb flavor is one process-wide domain; here it is one `rcukit::Rcu` (named
//! `urcu-memb`), built on first use. Its readers are rcukit's: a load, a store to the thread's
//! own record and a compiler fence, with `membarrier(2)` on the grace-period side, which is
//! what liburcu-memb does too.
//!
//! # Read-side critical sections
//!
//! liburcu's `rcu_read_lock()`/`rcu_read_unlock()` take no argument, while rcukit's read
//! section is a `Guard` value. Each thread keeps a nesting depth and, while the depth is not
//! zero, the guard of its outermost section, in a thread-local without a destructor (so that
//! reaching it is a plain thread-local access): the outermost lock stores a fresh guard, nested
//! ones only count, and the outermost unlock drops the guard. An unlock at depth zero aborts
//! (liburcu would corrupt its nesting counter). A thread that exits inside a section leaves it
//! open forever, as in liburcu (there, and in rcukit's stall report, a bug to fix).
//!
//! A signal handler may open a section (as liburcu allows), whatever point of the thread's
//! own lock or unlock it interrupts, provided the thread has read once before (the first read
//! makes the thread's record). A handler that interrupts the program's very first call, while
//! its thread builds the domain, cannot be served (the domain is half built): it aborts with
//! that explanation rather than wait for its own thread (`ForkOnce`). The depth is 1 exactly
//! while an announced guard stands for the section: the outermost lock makes the guard
//! (which announces the section), then stores depth 1, then puts the guard in its slot; the outermost unlock takes the guard out
//! of its slot, stores depth 0, then drops the guard; compiler fences keep those steps in
//! that order. A handler that finds depth 1 only counts, and is covered by that guard; one
//! that finds 0 makes and drops a guard of its own in the slot, which is empty then and
//! again when it returns (rcukit's records take a section nested in one whose announcement
//! the signal interrupted as an outermost one).
//!
//! # Registration
//!
//! rcukit readers need no registration, but a registered thread reads faster:
//! `rcu_register_thread()` takes the thread's `rcukit::ThreadReader` for the domain, and the
//! outermost `rcu_read_lock()` of a registered thread enters its record through it instead of
//! looking the record up (inside this shared library each lookup is a `__tls_get_addr` call).
//! The handle is owned by a thread-local of its own, with a destructor, and dropped by
//! `rcu_unregister_thread()` or when the thread exits registered; `READER` only points at it
//! (cleared before it goes), so that the read path stays a plain thread-local access. A
//! thread that never registered reads through `Rcu::read`. Registration is also recorded for
//! liburcu's assertions: registering twice, or inside a read-side critical section, and
//! unregistering a thread that is not registered, abort as they do in liburcu. A thread's
//! reader record is removed when the thread exits whether it unregistered or not.
//!
//! # `synchronize_rcu`
//!
//! liburcu-memb's `synchronize_rcu()` runs the grace period in the caller, with
//! `membarrier(2)`: an expedited grace period in rcukit's terms, so it calls
//! `Rcu::synchronize_expedited`. Called inside a read-side critical section it would wait
//! forever; it aborts with rcukit's explanation.

use crate::boundary::FFI;
use rcukit::{Guard, Rcu, ThreadReader};
use rcukit_ffi::fork_once::ForkOnce;
use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;
use std::sync::atomic::{compiler_fence, Ordering::SeqCst};

/// Built on first use; a child forked in the middle of the build builds it again (see
/// `ForkOnce`): a `OnceLock` there waited for the parent's builder for ever.
static DOMAIN: ForkOnce<Rcu> = ForkOnce::new();

/// The memb flavor's domain (built on first use).
#[inline]
pub(crate) fn domain() -> &'static Rcu {
    match DOMAIN.get() {
        Some(rcu) => rcu,
        None => build(),
    }
}

#[cold]
#[inline(never)]
fn build() -> &'static Rcu {
    DOMAIN.get_or_build(|| {
        Rcu::builder()
            .name("urcu-memb")
            .build()
            .unwrap_or_else(|e| panic!("cannot start the memb flavor's domain: {e}"))
    })
}

/// A thread's read-side state for the memb flavor.
struct Reader {
    /// Nesting depth of `rcu_read_lock()`.
    depth: Cell<usize>,
    /// The outermost section's guard, while `depth > 0`.
    guard: UnsafeCell<MaybeUninit<Guard<'static>>>,
    /// `rcu_register_thread()` was called and `rcu_unregister_thread()` not since.
    registered: Cell<bool>,
    /// The thread's `ThreadReader` while it is registered (null otherwise), owned by `HELD`,
    /// which clears this before dropping it.
    handle: Cell<*const ThreadReader<'static>>,
}

/// Owns a registered thread's `ThreadReader` (see "Registration" above).
struct Held(Cell<Option<Box<ThreadReader<'static>>>>);

impl Held {
    /// Stop reading through the thread's handle, and drop it.
    fn release(&self) {
        // SAFETY: the calling thread's own state; `READER` has no destructor, so it is there
        // in every thread-local destructor too.
        unsafe { (*reader()).handle.set(std::ptr::null()) };
        drop(self.0.take());
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.release();
    }
}

thread_local! {
    static READER: Reader = const {
        Reader {
            depth: Cell::new(0),
            guard: UnsafeCell::new(MaybeUninit::uninit()),
            registered: Cell::new(false),
            handle: Cell::new(std::ptr::null()),
        }
    };
    static HELD: Held = const { Held(Cell::new(None)) };
}

/// The calling thread's reader state. A pointer, so that the thread-local access is one
/// small inlined closure and the work happens outside it (a large closure kept `with` out of
/// line and cost a measurable part of a read-side critical section).
#[inline(always)]
fn reader() -> *const Reader {
    READER.with(|reader| reader as *const Reader)
}

/// Is the calling thread inside a read-side critical section of the memb flavor?
#[inline]
pub(crate) fn is_reading() -> bool {
    // SAFETY: the calling thread's own state, alive for the whole call.
    unsafe { (*reader()).depth.get() > 0 }
}

/// Enter a read-side critical section (nestable). No registration is needed.
#[no_mangle]
pub extern "C" fn urcu_memb_read_lock() {
    FFI.guarded_fast(
        || "urcu_memb_read_lock",
        || {
            // SAFETY: the calling thread's own state, alive for the whole call and touched by no
            // other thread.
            let reader = unsafe { &*reader() };
            let depth = reader.depth.get();
            if depth != 0 {
                reader.depth.set(depth + 1);
                return;
            }
            let handle = reader.handle.get();
            let guard = if handle.is_null() {
                domain().read()
            } else {
                // SAFETY: a handle stays alive while `READER` points at it (`Held` clears the
                // pointer first), and it is this thread's.
                unsafe { (*handle).read() }
            };
            // The order a signal handler's section relies on (module docs).
            compiler_fence(SeqCst);
            reader.depth.set(1);
            compiler_fence(SeqCst);
            // SAFETY: at depth 0 the slot held no guard, and a handler that ran since left it
            // empty; only this thread touches it.
            unsafe { (*reader.guard.get()).write(guard) };
        },
    )
}

/// Leave a read-side critical section; aborts if the thread is not in one.
#[no_mangle]
pub extern "C" fn urcu_memb_read_unlock() {
    FFI.guarded_fast(
        || "urcu_memb_read_unlock",
        || {
            // SAFETY: the calling thread's own state, alive for the whole call.
            let reader = unsafe { &*reader() };
            let depth = reader.depth.get();
            if depth == 0 {
                unlock_without_lock();
            }
            if depth != 1 {
                reader.depth.set(depth - 1);
                return;
            }
            // SAFETY: the outermost lock stored a guard in the slot, and nothing has taken it
            // since; it is taken out once, here.
            let guard = unsafe { (*reader.guard.get()).assume_init_read() };
            // The order a signal handler's section relies on (module docs).
            compiler_fence(SeqCst);
            reader.depth.set(0);
            compiler_fence(SeqCst);
            drop(guard);
        },
    )
}

#[cold]
#[inline(never)]
fn unlock_without_lock() -> ! {
    FFI.misuse(
        "urcu_memb_read_unlock",
        "rcu_read_unlock() without a matching rcu_read_lock() on this thread",
    )
}

/// Is the calling thread inside a read-side critical section? (Non-zero if so.)
#[no_mangle]
pub extern "C" fn urcu_memb_read_ongoing() -> i32 {
    FFI.guarded("urcu_memb_read_ongoing", || i32::from(is_reading()))
}

/// Register the calling thread (not needed by rcukit; recorded for liburcu's assertions).
#[no_mangle]
pub extern "C" fn urcu_memb_register_thread() {
    FFI.guarded("urcu_memb_register_thread", || {
        READER.with(|reader| {
            if reader.registered.get() {
                FFI.misuse(
                    "urcu_memb_register_thread",
                    "the calling thread is already registered",
                );
            }
            if reader.depth.get() > 0 {
                FFI.misuse(
                    "urcu_memb_register_thread",
                    "called inside a read-side critical section",
                );
            }
            reader.registered.set(true);
            let handle = Box::new(domain().thread_reader());
            let pointer: *const ThreadReader<'static> = &*handle;
            // In a thread-local destructor that runs after `HELD`'s, the handle would be
            // dropped here and the thread reads through `Rcu::read`.
            let _ = HELD.try_with(|held| {
                held.0.set(Some(handle));
                reader.handle.set(pointer);
            });
        });
    })
}

/// Unregister the calling thread; aborts if it is not registered.
#[no_mangle]
pub extern "C" fn urcu_memb_unregister_thread() {
    FFI.guarded("urcu_memb_unregister_thread", || {
        READER.with(|reader| {
            if !reader.registered.replace(false) {
                FFI.misuse(
                    "urcu_memb_unregister_thread",
                    "the calling thread is not registered",
                );
            }
        });
        let _ = HELD.try_with(Held::release);
    })
}

/// Wait for a grace period (an expedited one, run in the caller, as liburcu-memb's). Aborts
/// inside a read-side critical section.
#[no_mangle]
pub extern "C" fn urcu_memb_synchronize_rcu() {
    FFI.guarded("urcu_memb_synchronize_rcu", || {
        domain().synchronize_expedited()
    })
}

/// Start the flavor early (liburcu's constructor-time initialization); optional.
#[no_mangle]
pub extern "C" fn urcu_memb_init() {
    FFI.guarded("urcu_memb_init", || {
        domain();
    })
}

/// liburcu's destructor-time clean-up: nothing to do (the domain lives until the process
/// exits, as liburcu's does).
#[no_mangle]
pub extern "C" fn urcu_memb_exit() {}

/// The flavor table's quiescent-state and offline/online entries: no-ops for memb, as in
/// liburcu (where they are inline functions of the header).
pub(crate) extern "C" fn nothing() {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Registered threads read through their handle; whether they unregister or exit
    /// registered, their handles and records go with them, and a thread that registered in
    /// between reads through `Rcu::read` again after unregistering.
    #[test]
    fn registered_readers_leave_no_record_behind() {
        for unregister in [true, false] {
            let threads: Vec<_> = (0..16)
                .map(|_| {
                    std::thread::spawn(move || {
                        urcu_memb_register_thread();
                        // SAFETY: this thread's own state.
                        assert!(!unsafe { (*reader()).handle.get() }.is_null());
                        for _ in 0..10 {
                            urcu_memb_read_lock();
                            urcu_memb_read_lock();
                            assert!(is_reading());
                            urcu_memb_read_unlock();
                            urcu_memb_read_unlock();
                        }
                        assert!(!is_reading());
                        if unregister {
                            urcu_memb_unregister_thread();
                            // SAFETY: as above.
                            assert!(unsafe { (*reader()).handle.get() }.is_null());
                            urcu_memb_read_lock();
                            urcu_memb_read_unlock();
                        }
                    })
                })
                .collect();
            for thread in threads {
                thread.join().unwrap();
            }
            urcu_memb_synchronize_rcu();
            let stats = domain().stats();
            assert_eq!(
                (stats.readers, stats.orphaned_readers),
                (0, 0),
                "unregister {unregister}: {stats:?}"
            );
        }
    }
}
