//! Read-side critical sections through C: [`rcukit_guard`] (a thread's section, nestable) and
//! [`rcukit_owned_guard`] (an owned section, which may end on another thread).
//!
//! A thread that reads often does better with a reader handle (`rcukit_reader_new`):
//! `rcukit_read_lock` finds the thread's reader record on every call, which in `librcukit.so`
//! costs thread-local lookups through `__tls_get_addr`, and its token travels through memory.
//!
//! # Tokens
//!
//! C has no destructors, so the Rust guard itself travels through C as a *token*: a small
//! value type whose first words hold the `rcukit::Guard` (or `rcukit::OwnedGuard`) moved in by
//! `rcukit_read_lock` and moved out, and dropped, by `rcukit_read_unlock`. Moving a Rust value
//! as bytes is always sound, so the token costs nothing beyond the Rust API's own work (the
//! kernel's SRCU hands its callers an index the same way: `idx = srcu_read_lock(ss)`). The
//! compile-time assertions below keep the words large enough.
//!
//! # Catching misuse
//!
//! The last word of a token is a *marker* that `rcukit_read_unlock` checks and clears before
//! it drops the guard:
//!
//! * for a guard, the identity of the thread that locked it (`pthread_self()`), so that an
//!   unlock of a token that is not locked (unlocked already, never locked, zero-initialized)
//!   or that another thread locked aborts with a message instead of corrupting the reader
//!   record of the wrong thread (a `Guard` is `!Send` in Rust; the compiler cannot say so in
//!   C);
//! * for an owned guard, a constant (owned sections may end on any thread).
//!
//! A *copy* of a token that was unlocked through another copy cannot be told from a locked one;
//! unlocking both is undefined, as a double `free` is.
//!
//! Nesting works as in Rust: any number of guards of the same domain may be held at once and
//! unlocked in any order; only the outermost pair costs anything.

use crate::boundary::FFI;
use crate::domain::{rcu, rcukit_domain};
use crate::thread::thread_marker;
use rcukit::{Guard, OwnedGuard};
use std::ffi::c_void;
use std::mem::{align_of, size_of, MaybeUninit};

/// Words of a [`rcukit_guard`]: the guard, then the marker.
pub const RCUKIT_GUARD_WORDS: usize = 3;
/// Words of a [`rcukit_owned_guard`]: the owned guard, then the marker.
pub const RCUKIT_OWNED_GUARD_WORDS: usize = 4;
/// The marker of an owned token that is locked (a recognisable non-zero constant).
const OWNED_LOCKED: usize = 0x5243_554B_4F57_4E44_u64 as usize;

const _: () = assert!(
    size_of::<Guard<'static>>() <= (RCUKIT_GUARD_WORDS - 1) * size_of::<usize>()
        && align_of::<Guard<'static>>() <= align_of::<*mut c_void>()
);
const _: () = assert!(
    size_of::<OwnedGuard>() <= (RCUKIT_OWNED_GUARD_WORDS - 1) * size_of::<usize>()
        && align_of::<OwnedGuard>() <= align_of::<*mut c_void>()
);

/// A read-side critical section of one thread, from `rcukit_read_lock` (opaque words; copy it
/// around freely, but unlock it once, on the thread that locked it).
#[repr(C)]
pub struct rcukit_guard {
    _private: [MaybeUninit<*mut c_void>; RCUKIT_GUARD_WORDS],
}

/// An owned read-side critical section, from `rcukit_read_owned_begin` (opaque words): it may
/// be ended by `rcukit_read_owned_end` on any thread, once.
#[repr(C)]
pub struct rcukit_owned_guard {
    _private: [MaybeUninit<*mut c_void>; RCUKIT_OWNED_GUARD_WORDS],
}

impl rcukit_guard {
    #[inline(always)]
    fn new(guard: Guard<'_>) -> rcukit_guard {
        let mut token = rcukit_guard {
            _private: [MaybeUninit::uninit(); RCUKIT_GUARD_WORDS],
        };
        // SAFETY: the words are large and aligned enough for a guard (asserted above); the
        // guard is moved in and will be moved out once, by `take`.
        unsafe { token._private.as_mut_ptr().cast::<Guard<'_>>().write(guard) };
        token._private[RCUKIT_GUARD_WORDS - 1] = MaybeUninit::new(thread_marker() as *mut c_void);
        token
    }

    /// The guard moved in by `new`, after checking and clearing the marker.
    ///
    /// # Safety
    ///
    /// The token was made by `new` (or is recognisably not locked: zero-initialized) and its
    /// domain is still alive.
    #[inline(always)]
    unsafe fn take(&mut self, what: &'static str) -> Guard<'static> {
        // SAFETY: every token is initialized by `new` or by the C caller (which writes all of
        // its words), so the marker word holds a value.
        let marker = unsafe { self._private[RCUKIT_GUARD_WORDS - 1].assume_init() } as usize;
        if marker != thread_marker() {
            not_locked_here(what, marker);
        }
        self._private[RCUKIT_GUARD_WORDS - 1] = MaybeUninit::new(std::ptr::null_mut());
        // SAFETY: the marker says `new` moved a guard in on this thread and nobody has moved
        // it out yet; its domain is alive (the caller's contract).
        unsafe { self._private.as_ptr().cast::<Guard<'static>>().read() }
    }
}

#[cold]
#[inline(never)]
fn not_locked_here(what: &'static str, marker: usize) -> ! {
    if marker == 0 {
        FFI.misuse(
            what,
            "this guard is not locked: it was unlocked already or never locked (a guard is \
             unlocked once, by the thread that locked it)",
        )
    }
    FFI.misuse(
        what,
        "this guard was locked by another thread, or is not a guard: a read-side critical \
         section ends on the thread that began it (use rcukit_read_owned_begin() for sections \
         that move between threads)",
    )
}

/// Enter a read-side critical section of `domain` and return its guard. Nestable; no
/// registration is needed. The outermost lock of a thread is a load, a store to the thread's
/// own reader record and a compiler fence (with membarrier). Not from a signal handler: lock
/// a reader handle made beforehand there (`rcukit_reader_new`), whose sections touch only the
/// thread's record; this lookup goes through per-thread caches the interrupted code may be
/// changing.
///
/// # Safety
///
/// `domain` is a live handle, and stays alive until the guard is unlocked.
#[no_mangle]
pub unsafe extern "C" fn rcukit_read_lock(domain: *const rcukit_domain) -> rcukit_guard {
    FFI.guarded_fast(
        || "rcukit_read_lock",
        || {
            // SAFETY: forwarded to the caller.
            rcukit_guard::new(unsafe { rcu(domain, "rcukit_read_lock") }.read())
        },
    )
}

/// Leave the read-side critical section of `*guard` (the outermost unlock is one store), and
/// mark the token unlocked. Aborts with an explanation if the token is not locked, or was
/// locked by another thread.
///
/// # Safety
///
/// `guard` points to a token from `rcukit_read_lock` (or a zero-initialized one), whose domain
/// is still alive.
#[no_mangle]
pub unsafe extern "C" fn rcukit_read_unlock(guard: *mut rcukit_guard) {
    FFI.guarded_fast(
        || "rcukit_read_unlock",
        || {
            let guard = FFI
                .non_null(guard, "rcukit_read_unlock", "guard")
                .cast_mut();
            // SAFETY: the caller passes a token; its domain is alive.
            drop(unsafe { (*guard).take("rcukit_read_unlock") });
        },
    )
}

impl rcukit_owned_guard {
    fn new(guard: OwnedGuard) -> rcukit_owned_guard {
        let mut token = rcukit_owned_guard {
            _private: [MaybeUninit::uninit(); RCUKIT_OWNED_GUARD_WORDS],
        };
        // SAFETY: the words are large and aligned enough for an owned guard (asserted above);
        // it is moved in here and moved out once, by `take`.
        unsafe {
            token
                ._private
                .as_mut_ptr()
                .cast::<OwnedGuard>()
                .write(guard)
        };
        token._private[RCUKIT_OWNED_GUARD_WORDS - 1] =
            MaybeUninit::new(OWNED_LOCKED as *mut c_void);
        token
    }

    /// # Safety
    ///
    /// The token was made by `new` (or is recognisably not locked: zero-initialized).
    unsafe fn take(&mut self) -> OwnedGuard {
        // SAFETY: every token is initialized by `new` or by the C caller.
        let marker = unsafe { self._private[RCUKIT_OWNED_GUARD_WORDS - 1].assume_init() } as usize;
        if marker != OWNED_LOCKED {
            FFI.misuse(
                "rcukit_read_owned_end",
                "this owned guard is not open: it was ended already or never begun",
            );
        }
        self._private[RCUKIT_OWNED_GUARD_WORDS - 1] = MaybeUninit::new(std::ptr::null_mut());
        // SAFETY: the marker says `new` moved an owned guard in and nobody moved it out.
        unsafe { self._private.as_ptr().cast::<OwnedGuard>().read() }
    }
}

/// Begin an *owned* read-side critical section of `domain` (the kernel's SRCU): it may sleep,
/// and may be ended on another thread. Every grace period of the domain waits for it. Owned
/// sections do not nest with guards or each other: each is counted on its own. A thread that
/// holds one must not wait for a grace period of the same domain (it would wait for itself;
/// the stall report names the owned sections).
///
/// # Safety
///
/// `domain` is a live handle (the domain may be freed while the section is open: its state
/// then waits for the section's end).
#[no_mangle]
pub unsafe extern "C" fn rcukit_read_owned_begin(
    domain: *const rcukit_domain,
) -> rcukit_owned_guard {
    FFI.guarded("rcukit_read_owned_begin", || {
        // SAFETY: forwarded to the caller.
        rcukit_owned_guard::new(unsafe { rcu(domain, "rcukit_read_owned_begin") }.read_owned())
    })
}

/// End the owned section of `*guard`, on any thread, and mark the token ended. Aborts with an
/// explanation if it is not open.
///
/// # Safety
///
/// `guard` points to a token from `rcukit_read_owned_begin` (or a zero-initialized one).
#[no_mangle]
pub unsafe extern "C" fn rcukit_read_owned_end(guard: *mut rcukit_owned_guard) {
    FFI.guarded("rcukit_read_owned_end", || {
        let guard = FFI
            .non_null(guard, "rcukit_read_owned_end", "guard")
            .cast_mut();
        // SAFETY: the caller passes a token.
        drop(unsafe { (*guard).take() });
    })
}
