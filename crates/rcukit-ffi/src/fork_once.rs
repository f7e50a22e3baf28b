//! `ForkOnce`: a process-wide value built on first use, whose build a forked child takes over.
//!
//! A lazily built static (`OnceLock`) waits for the thread that is building it. `fork()` copies
//! memory but only the calling thread: a child forked while another thread was in the middle
//! of the build would wait for a builder it does not have, for ever (the liburcu layer's
//! flavor domains are built on a program's first call, which may come from any thread).
//!
//! A `ForkOnce` records its builder's process id instead of a plain "being built" mark. A
//! thread that finds the value unbuilt and a build under way by its own process waits for it,
//! as with `OnceLock`; one that finds the mark of another process (its parent, forked in the
//! middle of a build) knows the builder is not in this process and builds the value itself.
//! The half-built value of the parent is abandoned in the child (its memory is the child's
//! copy). A process id is never that of one of the process's ancestors while they live, and a
//! child's is never its parent's, so the mark cannot be mistaken in either direction. A build
//! that panics gives its mark back, and the next caller builds.
//!
//! The mark also names the builder thread (a number each thread takes from a process-wide
//! counter on its first build). A thread that finds its own mark has re-entered its own build:
//! the build called back into it, or a signal handler interrupted the build and asked for the
//! value (a C program's handler calling `rcu_read_lock` while the thread's first call is
//! building the domain). Waiting would wait for itself for ever, so it panics with that
//! explanation instead; at the C boundary the panic becomes an abort that names the function.
//! (The report allocates: a handler that interrupted the builder inside the allocator can
//! still stop there, as any handler that allocates can.) Both halves of the mark are stored
//! in one atomic word, so no interruption can see a mark half written. A child keeps the
//! number of the thread that forked it, but a different process id, so the re-entry check
//! never mistakes a parent's build for its own.
//!
//! The value is leaked: a `ForkOnce` is for statics.

use std::cell::Cell;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64};

/// A value built once per process (see the module docs).
pub struct ForkOnce<T> {
    /// The value, once built (a leaked box).
    value: AtomicPtr<T>,
    /// Who builds it: the process id in the high half, the thread's number (see
    /// [`thread_number`]) in the low half; 0 while nobody does.
    builder: AtomicU64,
}

/// The numbers threads take for their marks; 0 is never handed out.
static THREAD_NUMBERS: AtomicU32 = AtomicU32::new(1);

thread_local! {
    /// This thread's number, 0 until its first build.
    static THREAD_NUMBER: Cell<u32> = const { Cell::new(0) };
}

/// This thread's number, distinct from every other thread's of this process. Only an atomic
/// add and a thread-local cell: safe in a signal handler.
fn thread_number() -> u32 {
    THREAD_NUMBER.with(|n| {
        if n.get() == 0 {
            n.set(THREAD_NUMBERS.fetch_add(1, Relaxed));
        }
        n.get()
    })
}

/// The mark of this thread of this process.
fn my_mark() -> u64 {
    // SAFETY: `getpid` has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    (u64::from(pid) << 32) | u64::from(thread_number())
}

impl<T> Default for ForkOnce<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> ForkOnce<T> {
    /// Nothing built yet.
    pub const fn new() -> Self {
        ForkOnce {
            value: AtomicPtr::new(std::ptr::null_mut()),
            builder: AtomicU64::new(0),
        }
    }

    /// The value, if built.
    #[inline]
    pub fn get(&self) -> Option<&'static T> {
        // SAFETY: a non-null pointer is a leaked box, published with `Release` once fully
        // built, and never freed.
        unsafe { self.value.load(Acquire).as_ref() }
    }

    /// The value, built by `build` if nobody has built it (or if the process that was building
    /// it is this one's parent, forked in the middle).
    pub fn get_or_build(&self, build: impl FnOnce() -> T) -> &'static T {
        let mut build = Some(build);
        loop {
            if let Some(value) = self.get() {
                return value;
            }
            let me = my_mark();
            let mark = self.builder.load(Acquire);
            if mark == me {
                panic!(
                    "the library's first use on this thread re-entered itself: a signal \
                     handler (or the setup itself) called into the library while this thread \
                     was setting it up; make a first call outside the handler (for example \
                     register the thread) before installing it"
                );
            }
            if mark >> 32 == me >> 32 {
                // Another thread of this process builds it.
                std::thread::yield_now();
                continue;
            }
            if self
                .builder
                .compare_exchange(mark, me, AcqRel, Acquire)
                .is_err()
            {
                continue;
            }
            /// Gives the mark back however the build ends.
            struct Unmark<'a>(&'a AtomicU64);
            impl Drop for Unmark<'_> {
                fn drop(&mut self) {
                    self.0.store(0, Release);
                }
            }
            let _unmark = Unmark(&self.builder);
            // Built meanwhile by a thread that gave its mark back just before ours was taken.
            if let Some(value) = self.get() {
                return value;
            }
            let built = (build.take().expect("built once"))();
            let value = Box::into_raw(Box::new(built));
            self.value.store(value, Release);
            // SAFETY: just published, never freed.
            return unsafe { &*value };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_once_across_threads() {
        static ONCE: ForkOnce<u64> = ForkOnce::new();
        let builds = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let v = ONCE.get_or_build(|| {
                        builds.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        7
                    });
                    assert_eq!(*v, 7);
                });
            }
        });
        assert_eq!(builds.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn a_build_that_panics_leaves_it_to_the_next_caller() {
        static ONCE: ForkOnce<u64> = ForkOnce::new();
        assert!(std::panic::catch_unwind(|| ONCE.get_or_build(|| panic!("no"))).is_err());
        assert_eq!(*ONCE.get_or_build(|| 3), 3);
    }

    /// A mark left by another process (a parent forked in the middle of a build) is taken
    /// over, not waited for.
    #[test]
    fn a_build_left_by_another_process_is_taken_over() {
        static ONCE: ForkOnce<u64> = ForkOnce::new();
        // SAFETY: `getpid` has no preconditions.
        let other = unsafe { libc::getpid() } as u32 + 1;
        // The parent's builder may have had this thread's number (the thread that forked).
        ONCE.builder.store(
            (u64::from(other) << 32) | u64::from(thread_number()),
            Release,
        );
        assert_eq!(*ONCE.get_or_build(|| 5), 5);
    }

    /// A build that asks for its own value (as a signal handler interrupting the build does)
    /// is told so, rather than waiting for itself for ever.
    #[test]
    fn a_build_that_re_enters_itself_panics() {
        static ONCE: ForkOnce<u64> = ForkOnce::new();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let outcome =
                std::panic::catch_unwind(|| *ONCE.get_or_build(|| *ONCE.get_or_build(|| 1) + 1));
            let message = outcome.err().and_then(|e| {
                e.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            });
            done.send(message).unwrap();
        });
        // A hang here is the defect; the minute is only how long it is waited for.
        let message = finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the re-entered build waited for itself");
        let message = message.expect("the re-entered build panicked");
        assert!(message.contains("re-entered itself"), "{message}");
        // The mark was given back: the next caller builds.
        assert_eq!(*ONCE.get_or_build(|| 9), 9);
    }
}
