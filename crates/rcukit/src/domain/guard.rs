#![doc = include_str!("guard.md")]

use super::Rcu;
use crate::reader::{release_orphan, ReaderRecord};
use std::marker::PhantomData;

/// Why a [`Guard`] is neither `Send` nor `Sync`, and what to use instead: the name the compiler
/// gives when a guard is held across an `.await` in a future that must be `Send`, or moved to
/// another thread.
///
/// A `Guard` is tied to the thread that took it: its read-side critical section lives in that
/// thread's reader record, which is what grace periods watch, so it cannot follow a task to
/// another thread. For a read section that crosses an `.await`, sleeps, or ends on another
/// thread, take an [`OwnedGuard`](crate::OwnedGuard) with [`Rcu::read_owned`]: it is `Send`,
/// `Sync` and `'static`, and containers accept it wherever they accept a `Guard` (see
/// [`ReadSection`](crate::ReadSection)). Or drop the guard before the `.await`.
///
/// ```compile_fail
/// fn spawn<F: std::future::Future + Send + 'static>(_: F) {}
/// spawn(async {
///     let guard = rcukit::Rcu::global().read();
///     std::future::ready(()).await; // error: `dyn NotSendUseReadOwned` cannot be sent
///     drop(guard);
/// });
/// ```
///
/// ```
/// fn spawn<F: std::future::Future + Send + 'static>(_: F) {}
/// spawn(async {
///     let guard = rcukit::Rcu::global().read_owned(); // Send + 'static
///     std::future::ready(()).await;
///     drop(guard);
/// });
/// ```
///
/// No type implements this trait: it exists only as the marker inside `Guard` (and inside
/// [`ThreadReader`](crate::ThreadReader), which names the thread's reader record in the same
/// way).
pub trait NotSendUseReadOwned: sealed::Sealed + Unpin {}

mod sealed {
    pub trait Sealed {}
}

/// A read-side critical section of an [`Rcu`](crate::Rcu) domain.
///
/// While a `Guard` lives, no grace period of its domain that starts after the guard was taken
/// can complete, so data read from RCU-protected pointers stays valid. Guards nest: only the
/// outermost one costs anything, and the critical section ends when the outermost guard drops.
///
/// A guard is tied to its thread (`!Send`, `!Sync`): the thread's reader record is what grace
/// periods watch. Data borrowed under a guard (for example through
/// [`RcuCell::load`](crate::RcuCell::load)) carries the guard's lifetime, so the borrow checker
/// refuses to let it escape the critical section.
///
/// ```compile_fail
/// let guard = rcukit::Rcu::global().read();
/// std::thread::spawn(move || drop(guard)); // a guard cannot move to another thread
/// ```
///
/// # Thread exit
///
/// A guard kept in a thread-local protects its thread's reads until that thread-local is
/// destroyed, whatever the order in which the thread's thread-locals are torn down: if
/// rcukit's own table goes first, the guard's record is handed to the guard (*orphaned*) and
/// stays registered until the guard drops. Reads, `is_reading()` and the "waiting inside a
/// read-side critical section" panics keep working in thread-local destructors. A guard leaked
/// with `mem::forget` keeps its section open forever: every later grace period of the domain
/// waits for it, the stall report says that its thread has exited, and
/// [`Stats::orphaned_readers`](crate::Stats::orphaned_readers) counts it.
#[must_use = "the read-side critical section ends when the guard is dropped"]
pub struct Guard<'a> {
    /// What keeps the guard on its thread: the only field that is not `Send` or `Sync`, so
    /// that the compiler names it (and what to use instead) when a guard would leave.
    _not_send: PhantomData<dyn NotSendUseReadOwned>,
    pub(crate) domain: &'a Rcu,
    record: RecordPtr,
}

/// The calling thread's reader record, as its guard (or its `ThreadReader`) holds it.
pub(super) struct RecordPtr(pub(super) *const ReaderRecord);

// SAFETY: a `RecordPtr` is only ever a field of a `Guard` or a `ThreadReader`, which their
// marker keeps `!Send` and `!Sync`: the pointer never reaches another thread. (These impls only
// keep the raw pointer out of the compiler's message about a guard that would leave its
// thread.)
unsafe impl Send for RecordPtr {}
// SAFETY: as above.
unsafe impl Sync for RecordPtr {}

impl<'a> Guard<'a> {
    /// # Safety
    ///
    /// `record` must be the calling thread's record for `domain`, already entered.
    #[inline]
    pub(crate) unsafe fn new(domain: &'a Rcu, record: *const ReaderRecord) -> Guard<'a> {
        Guard {
            domain,
            record: RecordPtr(record),
            _not_send: PhantomData,
        }
    }

    /// The domain this critical section belongs to.
    pub fn domain(&self) -> &'a Rcu {
        self.domain
    }
}

impl Drop for Guard<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the record outlives every guard on it: the thread-local table keeps it alive
        // until the thread exits, and an orphaned record is kept alive until this very exit
        // reports that its last guard is gone.
        let last_orphan_guard = unsafe { (*self.record.0).exit() };
        if last_orphan_guard {
            // SAFETY: `exit` returned true exactly once, for the last guard of an orphaned
            // record, whose owning Arc was leaked when it was orphaned.
            unsafe { release_orphan(self.record.0) };
        }
    }
}

impl std::fmt::Debug for Guard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("domain", &self.domain.id())
            .finish()
    }
}
