//! Per-thread reader handles: [`rcukit_reader`], the fast way to read through C.
//!
//! ```c
//! rcukit_reader *reader = rcukit_reader_new(domain); // once per thread and domain
//! for (;;) {
//!     rcukit_reader_lock(reader);
//!     /* ... read RCU-protected data ... */
//!     rcukit_reader_unlock(reader);
//! }
//! rcukit_reader_free(reader); // on the same thread, before it exits
//! ```
//!
//! # Why a handle
//!
//! `rcukit_read_lock(domain)` finds the calling thread's reader record for `domain` on every
//! call, through rcukit's thread-locals. Inside `librcukit.so` each thread-local access is a
//! call to `__tls_get_addr` (a Rust shared library cannot use the initial-exec TLS model on
//! stable Rust), and its `rcukit_guard` token, three words, travels through memory both ways.
//! A handle is `rcukit::ThreadReader` (the record, found once) with the handle's nesting depth
//! beside it, in one cache line of its own: lock and unlock touch that line and the record, and
//! take and return nothing but the pointer. liburcu's readers register per thread too
//! (`rcu_register_thread`); here the handle is also what makes the section cheap.
//!
//! # Inline sections
//!
//! A call into `librcukit.so` costs more than the section it enters (a PLT stub and an
//! indirect jump into another object: two calls that do nothing cost about as much as a whole
//! section inlined in Rust). So the header also has the section itself, inline:
//! `rcukit_reader_lock_inline`/`rcukit_reader_unlock_inline`, and with `RCUKIT_INLINE_READERS`
//! defined before the include, `rcukit_reader_lock`/`rcukit_reader_unlock` become them (as
//! liburcu's `_LGPL_SOURCE` inlines its readers). They read and write the handle's first
//! member, [`rcukit_reader_words`]: the owner and depth above, and pointers to the thread's
//! record (`ctr`, `nesting`, `asked`) and the domain's `epoch`, with its fence kind, from
//! `rcukit::ThreadReader::raw_section`.
//!
//! Why the inline forms are the same sections: the outermost lock (handle depth 0, no other
//! section of the thread open on the record) is exactly what `ThreadReader::read` does, R1-R3
//! of rcukit's `reader` essay with the same orderings through the `__atomic` builtins (a
//! relaxed load and store of the nesting word, an acquire load of the epoch, a release store
//! to `ctr`, then a compiler fence, or a full fence in a `FenceKind::SeqCst` domain), and the
//! unlock that ends it is what a guard's drop does (R4-R5: the nesting word, a release store
//! of 0, a compiler fence, a relaxed load of `asked`, and the wake-up, out of line, if a
//! writer asked for one). Every other case goes to the checked functions: an inner lock of the
//! handle only counts its depth inline, and a lock or unlock that is not the thread's
//! outermost, or an unlock of a handle not locked, calls `rcukit_reader_lock`/`unlock`, which
//! check the thread and abort on misuse as before. The out-of-line functions use the same words
//! (`ThreadReader::enter_raw`/`leave_raw`, no guard stored in the handle), so the two forms mix
//! freely on one handle. The price of inlining: the inline forms skip the check that the
//! handle is the calling thread's (define `RCUKIT_CHECKED_INLINE` to make them call the checked
//! functions), and the words' layout and meaning are part of the C ABI:
//! `RCUKIT_READER_WORDS_VERSION` names them, and `rcukit_reader_new_inline` aborts with a
//! message when the library it runs with has another version.
//!
//! # Sections
//!
//! `rcukit_reader_lock`/`rcukit_reader_unlock` nest, as liburcu's `rcu_read_lock`/`unlock`:
//! the outermost lock enters a read-side critical section of the domain (the same section
//! `rcukit_read_lock` enters: the two nest with each other on one thread, and
//! `rcukit_is_reading` sees both), inner ones count, and the unlock that brings the count back
//! to zero ends it. Several handles of one thread and domain share the thread's record.
//!
//! # Misuse (each aborts with a message naming the function)
//!
//! * an unlock with no lock open on the handle: "this reader is not locked";
//! * a lock, an unlock or a free on a thread other than the one that made the handle: "this
//!   reader belongs to another thread". The check compares the thread pointer (one register
//!   read on x86-64 and AArch64 Linux) with the one recorded at `rcukit_reader_new`; a handle
//!   leaked by a thread that exited may pass it on a new thread that reuses the exited one's
//!   thread pointer (its reads are then still protected, through the exited thread's record,
//!   but a grace period waited for inside them hangs instead of aborting);
//! * `rcukit_reader_free` with a section open: "this reader is locked";
//! * `rcukit_domain_free` of a domain with live handles: "reader(s) of this domain are still
//!   alive" (every handle must be freed, on its thread, before its domain);
//! * NULL handles and domains: abort naming the argument. `rcukit_reader_free(NULL)` does
//!   nothing.
//!
//! # Thread exit
//!
//! Free a thread's handles before it exits, or in one of its `pthread_key_create` destructors:
//! those run after rcukit's own thread-local destructors, and a handle keeps its record
//! registered (orphaned) until it is freed, so locking it there still protects. A handle never
//! freed stays registered for good (an orphaned reader in the statistics once its thread has
//! exited; with no section open, no grace period waits for it), and keeps its domain from being
//! freed.
//!
//! # fork
//!
//! A child makes, locks and frees handles of its own at once, even when another thread of the
//! parent was making or freeing one at the moment of the fork (the table of live handles is
//! held across it). The forking thread's handles keep working in the child. Handles of the
//! parent's other threads are copied with memory but their threads are not: they stay counted
//! as live in the child, so freeing their domain there aborts (as it would in the parent).

use crate::boundary::FFI;
use crate::domain::{rcu, rcukit_domain};
use crate::live_readers::count_live;
use crate::thread::thread_marker;
use rcukit::{Rcu, ThreadReader};

/// A thread's reader of one domain, from `rcukit_reader_new`: lock and unlock it on that
/// thread only, free it there with `rcukit_reader_free`. Opaque but for its first member, the
/// [`rcukit_reader_words`] that the header's inline sections use. One cache line of its own:
/// lock and unlock write it, and no other thread's data shares it.
#[repr(C, align(64))]
pub struct rcukit_reader {
    words: rcukit_reader_words,
    /// The thread's record for the domain.
    reader: ThreadReader<'static>,
}

/// The first member of every [`rcukit_reader`]: what the header's inline
/// `rcukit_reader_lock_inline`/`rcukit_reader_unlock_inline` read and write (see the module
/// documentation). Part of the C ABI: a change is a new `RCUKIT_READER_WORDS_VERSION`.
#[repr(C)]
pub struct rcukit_reader_words {
    /// The thread that made the reader (its thread pointer).
    pub owner: usize,
    /// Open locks on this reader.
    pub depth: usize,
    /// The thread's record: 0 outside a section, else the epoch read when it began.
    pub ctr: *mut u64,
    /// The thread's open sections on the record (low 31 bits; keep bit 31).
    pub nesting: *mut u32,
    /// Non-zero while a grace period asks to be woken when the thread leaves its section.
    pub asked: *const u32,
    /// The domain's epoch.
    pub epoch: *const u64,
    /// The domain reads with a full fence (`FenceKind::SeqCst`), not a compiler fence.
    pub full_fence: bool,
}

/// The layout version of [`rcukit_reader_words`] and of the protocol the header's inline
/// sections follow; `rcukit_reader_words_version()` returns the library's.
pub const RCUKIT_READER_WORDS_VERSION: u32 = 1;

/// The layout version of `rcukit_reader_words` this library was built with (the header's
/// `RCUKIT_READER_WORDS_VERSION` at that time). A program that inlines sections checks it once,
/// as `rcukit_reader_new_inline` does.
#[no_mangle]
pub extern "C" fn rcukit_reader_words_version() -> u32 {
    RCUKIT_READER_WORDS_VERSION
}

/// The calling thread's reader of `domain`: lock and unlock it (on this thread) for read-side
/// critical sections that skip the lookup `rcukit_read_lock` makes each time. Free it with
/// `rcukit_reader_free`, on this thread, before the thread exits and before the domain is
/// freed. Its sections are the ones a signal handler of the thread may open (made before the
/// signals come: making it allocates): they touch the thread's record and nothing else,
/// wherever the signal interrupts the thread.
///
/// # Safety
///
/// `domain` is a live handle, and stays alive until the reader is freed.
#[no_mangle]
pub unsafe extern "C" fn rcukit_reader_new(domain: *const rcukit_domain) -> *mut rcukit_reader {
    FFI.guarded("rcukit_reader_new", || {
        // SAFETY: forwarded to the caller, who keeps the domain alive while the reader lives
        // (`rcukit_domain_free` aborts otherwise).
        let domain: &'static Rcu = unsafe { rcu(domain, "rcukit_reader_new") };
        count_live(domain.id(), true);
        let reader = domain.thread_reader();
        let raw = reader.raw_section();
        Box::into_raw(Box::new(rcukit_reader {
            words: rcukit_reader_words {
                owner: thread_marker(),
                depth: 0,
                ctr: raw.ctr,
                nesting: raw.nesting,
                asked: raw.asked,
                epoch: raw.epoch,
                full_fence: raw.full_fence,
            },
            reader,
        }))
    })
}

/// Free a reader (NULL is ignored), on the thread that made it. Aborts if a section is open on
/// it, or on another thread.
///
/// # Safety
///
/// `reader` is NULL or came from `rcukit_reader_new`, is freed once and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rcukit_reader_free(reader: *mut rcukit_reader) {
    FFI.guarded("rcukit_reader_free", || {
        if reader.is_null() {
            return;
        }
        // SAFETY: the caller passes a live reader (not NULL, checked above).
        let handle = unsafe { mine(reader, "rcukit_reader_free") };
        if handle.words.depth != 0 {
            FFI.misuse(
                "rcukit_reader_free",
                "this reader is locked: unlock it (rcukit_reader_unlock) before freeing it",
            );
        }
        let domain = handle.reader.domain().id();
        // SAFETY: made by `Box::into_raw` in `rcukit_reader_new`, given back once, with no
        // section open on it (depth 0). The `ThreadReader` drops on its own thread.
        drop(unsafe { Box::from_raw(reader) });
        count_live(domain, false);
    })
}

/// The calling thread's reader behind `reader`, or an abort from `what` if it is NULL or
/// another thread's.
///
/// # Safety
///
/// `reader` is NULL or a live reader.
#[inline(always)]
unsafe fn mine<'a>(reader: *mut rcukit_reader, what: &'static str) -> &'a mut rcukit_reader {
    let reader = FFI.non_null(reader, what, "reader").cast_mut();
    // SAFETY: the caller passes a live reader. `owner` is written once, before the pointer is
    // handed out, and read here through the raw pointer: a handle passed to another thread by
    // mistake is never borrowed there (its owner may hold `&mut` to it at the same moment).
    if unsafe { (*reader).words.owner } != thread_marker() {
        wrong_thread(what);
    }
    // SAFETY: a live reader of the calling thread (checked above), touched by no other thread.
    unsafe { &mut *reader }
}

/// Enter a read-side critical section through `reader` (nestable). The outermost lock is a
/// load of the domain's epoch, a store to the thread's own record and a compiler fence (with
/// membarrier); inner ones only count. Aborts on another thread than the reader's.
///
/// # Safety
///
/// `reader` is a live reader of the calling thread.
#[no_mangle]
pub unsafe extern "C" fn rcukit_reader_lock(reader: *mut rcukit_reader) {
    FFI.guarded_fast(
        || "rcukit_reader_lock",
        || {
            // SAFETY: forwarded to the caller.
            let reader = unsafe { mine(reader, "rcukit_reader_lock") };
            if reader.words.depth == 0 {
                // SAFETY: left by `rcukit_reader_unlock` (or its inline form) before the
                // reader is freed (`rcukit_reader_free` aborts otherwise).
                unsafe { reader.reader.enter_raw() };
            }
            reader.words.depth += 1;
        },
    )
}

/// Leave the read-side critical section of `reader` (the outermost unlock is one store and a
/// load). Aborts if no section is open on it, or on another thread than the reader's.
///
/// # Safety
///
/// `reader` is a live reader of the calling thread.
#[no_mangle]
pub unsafe extern "C" fn rcukit_reader_unlock(reader: *mut rcukit_reader) {
    FFI.guarded_fast(
        || "rcukit_reader_unlock",
        || {
            // SAFETY: forwarded to the caller.
            let reader = unsafe { mine(reader, "rcukit_reader_unlock") };
            match reader.words.depth {
                0 => not_locked(),
                1 => {
                    reader.words.depth = 0;
                    // SAFETY: at depth 1 the reader's outermost section is open, on this thread.
                    unsafe { reader.reader.leave_raw() };
                }
                depth => reader.words.depth = depth - 1,
            }
        },
    )
}

/// Wake the grace periods waiting for the reader's thread to leave its section: what the
/// header's `rcukit_reader_unlock_inline` calls when, after ending the outermost section, it
/// finds a writer's request. Not for other callers.
///
/// # Safety
///
/// `reader` is a live reader of the calling thread.
#[no_mangle]
pub unsafe extern "C" fn rcukit_reader_wake_writers(reader: *mut rcukit_reader) {
    FFI.guarded("rcukit_reader_wake_writers", || {
        // SAFETY: forwarded to the caller.
        let reader = unsafe { mine(reader, "rcukit_reader_wake_writers") };
        reader.reader.wake_writers();
    })
}

#[cold]
#[inline(never)]
fn wrong_thread(what: &'static str) -> ! {
    FFI.misuse(
        what,
        "this reader belongs to another thread: a reader is used, and freed, only by the \
         thread that made it (rcukit_reader_new() on each thread; rcukit_read_owned_begin() for \
         sections that move between threads)",
    )
}

#[cold]
#[inline(never)]
fn not_locked() -> ! {
    FFI.misuse(
        "rcukit_reader_unlock",
        "this reader is not locked: rcukit_reader_unlock() without a matching \
         rcukit_reader_lock()",
    )
}
