#![doc = include_str!("thread_reader.md")]

use super::guard::RecordPtr;
use super::{Guard, NotSendUseReadOwned, Rcu};
use crate::gp::ReadSidePtr;
use crate::reader;
use std::marker::PhantomData;

/// The calling thread's reader record for one domain, looked up once: its
/// [`read`](ThreadReader::read) enters a read-side critical section without the per-call lookup
/// that [`Rcu::read`] makes.
///
/// Made by [`Rcu::thread_reader`]. `ThreadReader::read` returns the same [`Guard`] as
/// `Rcu::read`, on the same record, so the two mix freely on one thread (they nest with each
/// other, and [`Rcu::is_reading`] sees both). What it saves is the lookup of the thread's record:
/// a thread-local access, which is a call (`__tls_get_addr`) inside a shared library, and a
/// hash probe for a thread that reads several domains in turn. Most Rust programs gain nothing
/// measurable from it (in an executable the lookup is a load and a compare); it exists for
/// rcukit's C library (`rcukit_reader_lock`) and for code that reads many domains in turn.
///
/// A handle is tied to its thread and to its domain, as a guard is:
///
/// ```compile_fail
/// let reader = rcukit::Rcu::global().thread_reader();
/// std::thread::spawn(move || drop(reader.read())); // a handle cannot move to another thread
/// ```
///
/// ```compile_fail
/// let domain = rcukit::Rcu::new();
/// let reader = domain.thread_reader();
/// drop(domain); // the domain cannot go while a handle borrows it
/// drop(reader);
/// ```
///
/// # Signal handlers
///
/// A signal handler reads through a handle its thread made beforehand (kept in a thread-local
/// initialized before the signals come): its [`read`](ThreadReader::read) and the guard's drop
/// touch the thread's record and nothing else, wherever the handler interrupts the thread's own
/// sections. [`Rcu::read`] is not for handlers: it finds the record through per-thread
/// caches that the interrupted code may be updating (two words stored one at a time, an index
/// being replaced), so a handler's section could be counted in another domain's record, or a
/// freed index probed; and once the thread's table is gone, at thread exit, it allocates.
///
/// # Thread exit
///
/// A handle kept in a thread-local (of the global domain, or another `'static` one) keeps
/// working in thread-local destructors, in whichever order the thread's thread-locals are torn
/// down: if rcukit's own table goes first, the record is handed to the handle (*orphaned*) and
/// stays registered until the handle, and every guard taken from it, have dropped. A handle
/// leaked with `mem::forget` keeps its record registered for good (with no section open, no
/// grace period waits for it; [`Stats::orphaned_readers`](crate::Stats::orphaned_readers) counts
/// it once its thread has exited).
///
/// ```
/// use rcukit::{Rcu, RcuCell};
///
/// let cell = RcuCell::new(1);
/// let reader = Rcu::global().thread_reader();
/// let mut sum = 0;
/// for _ in 0..1000 {
///     let guard = reader.read();
///     sum += *cell.load(&guard);
/// }
/// assert_eq!(sum, 1000);
/// ```
pub struct ThreadReader<'a> {
    /// Keeps the handle on its thread (see [`NotSendUseReadOwned`]).
    _not_send: PhantomData<dyn NotSendUseReadOwned>,
    domain: &'a Rcu,
    /// `domain`'s read side (a copy of the handle's pointer, valid while `domain` is borrowed):
    /// `read` goes from this handle to the line without reaching the `Rcu` value, which
    /// shares its cache line with whatever the allocator put beside it.
    read_side: ReadSidePtr,
    /// The calling thread's record for `domain`, held (see the module docs).
    record: RecordPtr,
}

impl Rcu {
    /// A handle on the calling thread's reader record for this domain (registered now if the
    /// thread has none yet), whose [`read`](ThreadReader::read) skips the lookup of the record
    /// that [`read`](Rcu::read) makes on every call. See [`ThreadReader`].
    pub fn thread_reader(&self) -> ThreadReader<'_> {
        let record = reader::held_record(self.inner.key(), &self.inner.core.registry);
        ThreadReader {
            _not_send: PhantomData,
            domain: self,
            read_side: self.read_side,
            record: RecordPtr(record),
        }
    }
}

impl<'a> ThreadReader<'a> {
    /// Enter a read-side critical section of the handle's domain: what [`Rcu::read`] does,
    /// without looking the thread's record up. Nestable (with guards from `Rcu::read` too);
    /// the section ends when the returned guard drops, which may be after the handle drops.
    #[inline]
    pub fn read(&self) -> Guard<'a> {
        // SAFETY: `domain.inner` owns the line and is held for as long as `domain` is borrowed.
        let read_side = unsafe { self.read_side.get() };
        // SAFETY: the record is the calling thread's (the handle never leaves it) and stays
        // alive and registered while the handle holds it (see the module docs); a guard on it
        // keeps it so after the handle drops.
        unsafe {
            (*self.record.0).enter(&read_side.epoch, read_side.fence);
            Guard::new(self.domain, self.record.0)
        }
    }

    /// The domain whose record this is.
    pub fn domain(&self) -> &'a Rcu {
        self.domain
    }

    /// The words this handle's read-side critical sections write and read, for a read side
    /// written in another language that enters and leaves sections of the same record without
    /// a call (rcukit's C header does). See [`RawSection`] for the protocol.
    #[cfg(all(feature = "raw-sections", not(rcukit_loom)))]
    pub fn raw_section(&self) -> RawSection {
        // SAFETY: as in `read`.
        let read_side = unsafe { self.read_side.get() };
        // SAFETY: the record is alive while the handle holds it.
        let record = unsafe { &*self.record.0 };
        RawSection {
            ctr: record.ctr.as_ptr(),
            nesting: record.nesting_word().as_ptr(),
            asked: record.wake.asked_word().as_ptr(),
            epoch: read_side.epoch.as_ptr(),
            full_fence: read_side.fence == crate::FenceKind::SeqCst,
        }
    }

    /// Enter a read-side critical section without a guard: what [`read`](Self::read) does.
    ///
    /// # Safety
    ///
    /// Leave it with [`leave_raw`](Self::leave_raw) on the same handle (or with the sections
    /// of [`raw_section`](Self::raw_section)), before the handle drops.
    #[cfg(feature = "raw-sections")]
    #[inline]
    pub unsafe fn enter_raw(&self) {
        // SAFETY: as in `read`.
        let read_side = unsafe { self.read_side.get() };
        // SAFETY: as in `read`; the handle outlives the section (the caller's contract).
        unsafe { (*self.record.0).enter(&read_side.epoch, read_side.fence) };
    }

    /// Leave a read-side critical section entered by [`enter_raw`](Self::enter_raw): what a
    /// guard's drop does.
    ///
    /// # Safety
    ///
    /// A section entered through this handle (or its [`raw_section`](Self::raw_section)) is
    /// open, on this thread.
    #[cfg(feature = "raw-sections")]
    #[inline]
    pub unsafe fn leave_raw(&self) {
        // SAFETY: the record is alive while the handle holds it; a section is open on it.
        let last_orphan_guard = unsafe { (*self.record.0).exit() };
        // The handle still holds the record, so no section of it is an orphan's last.
        debug_assert!(!last_orphan_guard);
    }

    /// Wake the writers waiting for this thread to leave its section: what a section left
    /// through [`raw_section`](Self::raw_section)'s words must call when it finds `asked`
    /// non-zero after its last store.
    #[cfg(feature = "raw-sections")]
    #[cold]
    pub fn wake_writers(&self) {
        // SAFETY: the record is alive while the handle holds it.
        unsafe { (*self.record.0).wake.after_leaving() };
    }
}

/// The words of a thread's read-side critical sections of one domain, from
/// [`ThreadReader::raw_section`], valid while that handle lives. A section entered and left
/// through them is the section [`ThreadReader::read`] enters and its guard's drop leaves
/// (R1-R5 of the [`reader`](crate::docs::internal::reader) essay), written out:
///
/// ```text
/// enter:  n = nesting.load(Relaxed)
///         if n & 0x7fff_ffff != 0: not the outermost section: use enter_raw instead
///         nesting.store(n + 1, Relaxed)
///         ctr.store(epoch.load(Acquire), Release)
///         full_fence ? fence(SeqCst) : compiler_fence(SeqCst)
/// leave:  n = nesting.load(Relaxed) - 1
///         if n & 0x7fff_ffff != 0: not the outermost section: use leave_raw instead
///         nesting.store(n, Relaxed)
///         ctr.store(0, Release)
///         compiler_fence(SeqCst)
///         if asked.load(Relaxed) != 0: ThreadReader::wake_writers()
/// ```
///
/// Only the owning thread may touch `ctr` and `nesting` (they are the thread's own record);
/// `epoch` and `asked` are written by grace periods. The words are `AtomicU64`/`AtomicU32`;
/// another language accesses them with its atomics of the same size and orderings.
#[cfg(all(feature = "raw-sections", not(rcukit_loom)))]
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct RawSection {
    /// 0 outside a section, else the epoch read when the outermost one began.
    pub ctr: *mut u64,
    /// Open sections of the thread on this record (low 31 bits), and a flag bit (bit 31) to
    /// keep.
    pub nesting: *mut u32,
    /// Non-zero while a grace period asks to be woken when the thread leaves.
    pub asked: *const u32,
    /// The domain's epoch.
    pub epoch: *const u64,
    /// The domain reads with a full fence (`FenceKind::SeqCst`) rather than a compiler fence.
    pub full_fence: bool,
}

impl Drop for ThreadReader<'_> {
    fn drop(&mut self) {
        // SAFETY: `record` came from `held_record` on this thread (the handle never leaves it),
        // and a handle drops once.
        unsafe { reader::let_go_of_record(self.record.0) };
    }
}

impl std::fmt::Debug for ThreadReader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadReader")
            .field("domain", &self.domain.id())
            .finish()
    }
}
