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
//! The value is leaked: a `ForkOnce` is for statics.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
use std::sync::atomic::{AtomicI32, AtomicPtr};

/// A value built once per process (see the module docs).
pub struct ForkOnce<T> {
    /// The value, once built (a leaked box).
    value: AtomicPtr<T>,
    /// The process id of the process whose thread builds it; 0 while nobody does.
    builder: AtomicI32,
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
            builder: AtomicI32::new(0),
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
            // SAFETY: `getpid` has no preconditions.
            let me = unsafe { libc::getpid() };
            let mark = self.builder.load(Acquire);
            if mark == me {
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
            struct Unmark<'a>(&'a AtomicI32);
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
        let other = unsafe { libc::getpid() } + 1;
        ONCE.builder.store(other, Release);
        assert_eq!(*ONCE.get_or_build(|| 5), 5);
    }
}
