#![doc = include_str!("recseq.md")]

use crate::barrier::{self, FenceKind, Heavy};
use crate::error::Error;
use crate::gp::StallWatch;
use crate::per_thread::DomainKey;
use crate::reader::{self, ReaderRecord, Registry};
use crate::report::{Report, Reporter, Stall};
use crate::sync::{AtomicPtr, Backoff};
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::Arc;
use std::time::Duration;

/// Builder for [`RecSeq`]; see [`RecSeq::builder`].
#[derive(Clone, Debug)]
pub struct RecSeqBuilder {
    fence: FenceKind,
    stall_timeout: Duration,
    reporter: Reporter,
}

impl Default for RecSeqBuilder {
    fn default() -> Self {
        RecSeqBuilder {
            fence: FenceKind::SeqCst,
            stall_timeout: Duration::from_secs(10),
            reporter: Reporter::default(),
        }
    }
}

impl RecSeqBuilder {
    /// The barrier pair (default [`FenceKind::SeqCst`], as netfilter: a fence per read, no
    /// interruption of other CPUs on replace). [`FenceKind::Membarrier`] makes reads free of
    /// fences and replacements an IPI to every CPU running this process.
    pub fn fence(mut self, fence: FenceKind) -> Self {
        self.fence = fence;
        self
    }

    /// How long a replacement may wait for one reader before a stall report is printed to
    /// stderr and counted in [`RecSeq::stalls`] (default 10 s; at least 1 ms).
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.stall_timeout = timeout;
        self
    }

    /// Where stall reports go (default: one line on standard error, write errors ignored), as
    /// [`RcuBuilder::on_report`](crate::RcuBuilder::on_report).
    pub fn on_report(mut self, hook: impl Fn(&Report) + Send + Sync + 'static) -> Self {
        self.reporter = Reporter::new(Some(crate::report::hook(hook)));
        self
    }

    /// Build the `RecSeq` holding `value`.
    pub fn build<T>(self, value: T) -> Result<RecSeq<T>, Error> {
        if self.stall_timeout < Duration::from_millis(1) {
            return Err(Error::invalid(
                "stall_timeout",
                format!(
                    "{:?} is shorter than the minimum of 1ms",
                    self.stall_timeout
                ),
            ));
        }
        if self.fence == FenceKind::Membarrier && !barrier::support().private_expedited {
            return Err(Error::invalid(
                "fence",
                "FenceKind::Membarrier needs membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which \
                 this kernel (or loom/miri, or RCUKIT_NO_MEMBARRIER) does not provide",
            ));
        }
        Ok(
            RecSeq::with_settings(Box::new(value), self.fence, self.stall_timeout)
                .with_reporter(self.reporter),
        )
    }
}

/// A value that readers use without locks and a writer replaces by waiting for every reader's
/// sequence counter (netfilter's `xt_recseq`). See the [module
/// documentation](crate::docs::internal::locks::recseq).
///
/// # Thread exit
///
/// A read guard kept in a thread-local holds replacements back until it drops, whatever the
/// order in which the thread's thread-locals are destroyed (its counter is handed to the guard
/// if rcukit's table goes first), and `replace` inside such a guard panics there as anywhere.
/// A guard leaked with `mem::forget` blocks every later `replace` (reported as a stall).
pub struct RecSeq<T> {
    pub(crate) ptr: AtomicPtr<T>,
    /// The id of this lock's readers' records (a domain id) and its hash.
    key: DomainKey,
    pub(crate) registry: Arc<Registry>,
    fence: FenceKind,
    stall_timeout: Duration,
    stalls: AtomicU64,
    replacements: AtomicU64,
    reporter: Reporter,
    /// Owns a `T`; `Send`/`Sync` are implemented below with the bounds sharing needs.
    _owns: PhantomData<*mut T>,
}

// SAFETY: moving a RecSeq moves its `T` (owned through `ptr`) to another thread.
unsafe impl<T: Send> Send for RecSeq<T> {}
// SAFETY: through `&RecSeq`, readers on any thread get `&T` (needs `T: Sync`) and `replace`
// moves values in and out from any thread (needs `T: Send`).
unsafe impl<T: Send + Sync> Sync for RecSeq<T> {}

impl RecSeq<()> {
    /// A builder for other settings; the value's type comes from
    /// [`RecSeqBuilder::build`]'s argument.
    pub fn builder() -> RecSeqBuilder {
        RecSeqBuilder::default()
    }
}

impl<T> RecSeq<T> {
    /// A `RecSeq` holding `value`, with the default settings (fence per read, 10 s stall
    /// timeout).
    pub fn new(value: T) -> RecSeq<T> {
        RecSeq::with_settings(Box::new(value), FenceKind::SeqCst, Duration::from_secs(10))
    }

    pub(crate) fn with_settings(
        value: Box<T>,
        fence: FenceKind,
        stall_timeout: Duration,
    ) -> RecSeq<T> {
        RecSeq {
            ptr: AtomicPtr::new(Box::into_raw(value)),
            key: DomainKey::fresh(),
            registry: Arc::new(Registry::new()),
            fence,
            stall_timeout,
            stalls: AtomicU64::new(0),
            replacements: AtomicU64::new(0),
            reporter: Reporter::default(),
            _owns: PhantomData,
        }
    }

    fn with_reporter(mut self, reporter: Reporter) -> RecSeq<T> {
        self.reporter = reporter;
        self
    }

    /// Enter a read-side section and borrow the current value. Nestable; the section ends when
    /// the thread's last guard of this `RecSeq` drops.
    ///
    /// The first read of a thread registers its counter (a short lock); after that the
    /// outermost read is a load and a store of the thread's own counter and the light barrier,
    /// and dropping the guard is one store.
    #[inline]
    pub fn read(&self) -> RecSeqGuard<'_, T> {
        let record = reader::local_record(self.key, &self.registry);
        // SAFETY: `local_record` returns the calling thread's record for this RecSeq, alive
        // while any guard on it exists.
        unsafe { self.read_on(record) }
    }

    /// R1-R4 on a given record.
    ///
    /// # Safety
    ///
    /// `record` must be registered in `self.registry`, written only by the calling thread, and
    /// stay valid while the guard lives.
    #[inline]
    pub(crate) unsafe fn read_on(&self, record: *const ReaderRecord) -> RecSeqGuard<'_, T> {
        // SAFETY: the caller guarantees the record is valid.
        let r = unsafe { &*record };
        if r.nest() {
            let s = r.ctr.load(Relaxed);
            r.ctr.store(s.wrapping_add(1), Release);
            barrier::light(self.fence);
        }
        let data = self.ptr.load(Acquire);
        RecSeqGuard {
            recseq: self,
            record,
            data,
            _not_send: PhantomData,
        }
    }

    /// Replace the value, wait until no reader can still use the old one, and return it.
    ///
    /// # Panics
    ///
    /// If the calling thread holds a guard of this `RecSeq` (it would wait for itself).
    #[track_caller]
    pub fn replace(&self, value: T) -> T {
        *self.replace_box(Box::new(value))
    }

    /// [`replace`](RecSeq::replace) for a value that is already boxed (no move of `T`).
    ///
    /// # Panics
    ///
    /// If the calling thread holds a guard of this `RecSeq`.
    #[track_caller]
    pub fn replace_box(&self, value: Box<T>) -> Box<T> {
        if reader::is_reading(self.key, &self.registry) {
            panic!(
                "rcukit: RecSeq::replace called while this thread holds a read guard of the same \
                 RecSeq; the writer would wait for this very reader and never return. Drop the \
                 guard first."
            );
        }
        let old = self.ptr.swap(Box::into_raw(value), AcqRel);
        self.wait_for_readers();
        self.replacements.fetch_add(1, Relaxed);
        // SAFETY: `old` came from `Box::into_raw` (in a constructor or an earlier replace), this
        // swap took it out of `ptr`, and `wait_for_readers` proved no reader still uses it.
        unsafe { Box::from_raw(old) }
    }

    /// Store a new value and drop the old one once no reader uses it.
    #[track_caller]
    pub fn store(&self, value: T) {
        drop(self.replace_box(Box::new(value)));
    }

    /// W2-W3: wait for every section that might have loaded the pointer before the swap.
    pub(crate) fn wait_for_readers(&self) {
        barrier::heavy(self.fence, Heavy::Expedited);
        let records = self.registry.snapshot();
        let mut stall = StallWatch::new(self.stall_timeout);
        for record in records.iter() {
            let v = record.ctr.load(Acquire);
            if v & 1 == 0 {
                continue;
            }
            let mut backoff = Backoff::new();
            while record.ctr.load(Acquire) == v {
                if backoff.is_sleeping() {
                    if let Some(held) = stall.check() {
                        self.stalls.fetch_add(1, Relaxed);
                        self.reporter.report(Report::Stall(Stall {
                            domain_kind: "RecSeq",
                            domain: format!("#{}", self.key.id()),
                            waiter: "replace()",
                            reader: format!("the read section of {}", record.describe_thread()),
                            waited: held,
                            timeout: self.stall_timeout,
                            advice: "",
                        }));
                    }
                }
                backoff.snooze();
            }
        }
    }

    /// The value, through exclusive access (no reader can exist).
    pub fn get_mut(&mut self) -> &mut T {
        // SAFETY: `ptr` always holds a live box, and `&mut self` excludes readers and writers.
        unsafe { &mut *self.ptr.load(Relaxed) }
    }

    /// Take the value out.
    pub fn into_inner(self) -> T {
        let this = std::mem::ManuallyDrop::new(self);
        let ptr = this.ptr.load(Relaxed);
        // SAFETY: `this` is never dropped, so the registry Arc must be released by hand; it is
        // read exactly once here.
        drop(unsafe { std::ptr::read(&this.registry) });
        // SAFETY: `ptr` holds a live box that nothing else references (we own `self`).
        *unsafe { Box::from_raw(ptr) }
    }

    /// Is the calling thread inside a read section of this `RecSeq`?
    pub fn is_reading(&self) -> bool {
        reader::is_reading(self.key, &self.registry)
    }

    /// Stall reports issued so far (a replacement waited longer than the stall timeout for one
    /// reader).
    pub fn stalls(&self) -> u64 {
        self.stalls.load(Relaxed)
    }

    /// Replacements completed so far.
    pub fn replacements(&self) -> u64 {
        self.replacements.load(Relaxed)
    }

    /// Threads with a registered counter (one per thread that has read this `RecSeq` and not
    /// exited).
    pub fn readers(&self) -> usize {
        self.registry.len()
    }

    /// The barrier pair in use.
    pub fn fence_kind(&self) -> FenceKind {
        self.fence
    }
}

impl<T: Default> Default for RecSeq<T> {
    fn default() -> Self {
        RecSeq::new(T::default())
    }
}

impl<T> Drop for RecSeq<T> {
    fn drop(&mut self) {
        // SAFETY: `ptr` always holds a live box; `&mut self` means no guard exists.
        drop(unsafe { Box::from_raw(self.ptr.load(Relaxed)) });
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for RecSeq<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecSeq")
            .field("value", &*self.read())
            .finish_non_exhaustive()
    }
}

/// A read-side section of a [`RecSeq`] and the value it borrowed. Derefs to `T`; tied to its
/// thread (`!Send`).
///
/// ```compile_fail
/// let r: &'static rcukit::RecSeq<i32> = Box::leak(Box::new(rcukit::RecSeq::new(1)));
/// let g = r.read();
/// std::thread::spawn(move || drop(g));
/// ```
#[must_use = "the read section ends when the guard is dropped"]
pub struct RecSeqGuard<'a, T> {
    recseq: &'a RecSeq<T>,
    record: *const ReaderRecord,
    data: *const T,
    _not_send: PhantomData<*const ()>,
}

impl<T> RecSeqGuard<'_, T> {
    /// The `RecSeq` this guard reads.
    pub fn recseq(&self) -> &RecSeq<T> {
        self.recseq
    }
}

impl<T> Deref for RecSeqGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: `data` was loaded inside this guard's section, and writers free a value only
        // after every section that might have loaded it has ended (module docs).
        unsafe { &*self.data }
    }
}

impl<T> Drop for RecSeqGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the record outlives every guard on it (thread-local table, or orphan
        // ownership until its last guard, as for RCU guards).
        let r = unsafe { &*self.record };
        let unnest = r.unnest();
        if unnest.outermost {
            let s = r.ctr.load(Relaxed);
            r.ctr.store(s.wrapping_add(1), Release);
        }
        if unnest.last_orphan_guard {
            // SAFETY: `unnest` reported this exactly once, for the last guard of an orphaned
            // record whose owning Arc was leaked when it was orphaned.
            unsafe { reader::release_orphan(self.record) };
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for RecSeqGuard<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}
