#![doc = include_str!("README.md")]

mod local;
pub(crate) mod owned;
pub(crate) mod qsbr;
pub(crate) mod wake;

pub(crate) use local::{
    held_record, in_section, is_reading, let_go_of_record, local_record, orphan_of_this_thread,
    with_local_record,
};

use crate::barrier::{self, FenceKind};
use crate::sync::{AtomicU64, Mutex};
use owned::{OwnedCounts, Side};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{self, Acquire, Relaxed, Release};
use std::sync::{Arc, Weak};
use wake::WakeWord;

/// Nesting bit set on a record whose owning thread's thread-local storage is gone while a guard
/// still references it; the last guard to drop unregisters it.
const ORPHAN: u32 = 1 << 31;
const COUNT_MASK: u32 = ORPHAN - 1;

/// Name and id of the thread that owns a record, for stall reports.
#[derive(Clone, Debug)]
pub(crate) struct ThreadInfo {
    pub(crate) name: String,
    pub(crate) tid: i64,
}

impl ThreadInfo {
    /// The calling thread's name and OS thread id.
    pub(crate) fn current() -> ThreadInfo {
        ThreadInfo {
            name: crate::threads::current_name(),
            tid: os_tid(),
        }
    }

    fn exiting() -> ThreadInfo {
        ThreadInfo {
            name: "<exiting thread>".to_string(),
            tid: os_tid(),
        }
    }

    /// Has this thread exited? (Linux: its `/proc/self/task` entry is gone; elsewhere, or if
    /// that cannot be told, false.) For reports only: a thread id can be reused.
    pub(crate) fn has_exited(&self) -> bool {
        #[cfg(all(target_os = "linux", not(miri)))]
        {
            self.tid > 0
                && std::path::Path::new("/proc/self/task").is_dir()
                && !std::path::Path::new(&format!("/proc/self/task/{}", self.tid)).exists()
        }
        #[cfg(not(all(target_os = "linux", not(miri))))]
        {
            false
        }
    }
}

impl std::fmt::Display for ThreadInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "thread '{}' (tid {})", self.name, self.tid)
    }
}

#[cfg(all(target_os = "linux", not(miri)))]
fn os_tid() -> i64 {
    i64::from(rustix::thread::gettid().as_raw_nonzero().get())
}

#[cfg(not(all(target_os = "linux", not(miri))))]
fn os_tid() -> i64 {
    -1
}

/// Bytes that fill a record's first line after `ctr`, `nesting`, `wake` and `handles`.
#[cfg(not(rcukit_loom))]
const HOT_PAD: usize = 64 - 8 - 4 - 8 - 4;
#[cfg(rcukit_loom)]
const HOT_PAD: usize = 0;

// The layout the docs of `ReaderRecord` describe (loom's atomics are larger).
#[cfg(all(target_pointer_width = "64", not(rcukit_loom)))]
const _: () = assert!(
    std::mem::offset_of!(ReaderRecord, thread) == 64 && std::mem::size_of::<ReaderRecord>() == 192
);

/// One thread's reader state for one domain.
///
/// `ctr` and `nesting`, the two words every read writes, fill the first line alone. The record
/// is three lines, aligned to one, and lives in an `Arc`, whose two counts take the line in
/// front of it: the allocation is four lines, the hot one second. So the 128-byte pair the
/// adjacent-line prefetcher brings in with the hot line is either the counts' line or the
/// record's next line, both its own: no other thread's data shares the line or its pair (what
/// `CachePadded`'s 128-byte alignment gives), without that alignment's cost. Aligned to 128
/// bytes, one thread's records came every 512 bytes and fell in 8 of L1's 64 sets, so that a
/// thread reading about 100 domains in turn missed L1 on its own records; four 64-aligned lines
/// come every 448 bytes (the allocator's header adds one), which covers every set.
#[repr(C, align(64))]
pub(crate) struct ReaderRecord {
    /// 0 outside a critical section, else the epoch read at the outermost `read()`.
    /// Written only by the owner; read by grace periods.
    pub(crate) ctr: AtomicU64,
    /// Nesting depth plus the `ORPHAN` bit. Touched only by the owning thread, so a std atomic
    /// with relaxed loads and stores (no read-modify-write) is enough and loom need not see it.
    nesting: AtomicU32,
    /// What an expedited grace period that waits for this reader sleeps on, and what the
    /// reader looks at after leaving (see [`wake`](crate::docs::internal::reader::wake)): on the line the reader
    /// writes anyway, so that looking costs it no cache miss.
    pub(crate) wake: WakeWord,
    /// Live [`ThreadReader`](crate::ThreadReader) handles on the record. Like `nesting`, touched
    /// only by the owning thread (a handle is `!Send`); read when the thread's table goes (a
    /// held record is orphaned, not freed) and when an orphaned record's last guard leaves. On
    /// the hot line so that the latter look, rare as it is, never costs a miss.
    handles: AtomicU32,
    /// The rest of the first line: nothing else shares the line every read writes.
    _hot_line: [u8; HOT_PAD],
    pub(crate) thread: ThreadInfo,
    /// The thread that owns it, for the repair after `fork()` (see
    /// [`fork`](crate::docs::internal::domain::fork)).
    pub(crate) owner: crate::sync::fork::Owner,
    registry: Weak<Registry>,
    /// The `ctr` value of the critical section a stall was last reported for, so that one
    /// stalled section yields one report even when several grace periods wait for it.
    stall_reported: std::sync::atomic::AtomicU64,
    /// The owning thread's thread-local table is gone while a critical section (or, for QSBR,
    /// a registration) is still open: the record is kept alive by that section alone.
    orphaned: std::sync::atomic::AtomicBool,
    /// Owned sections this thread opened and closed (see
    /// [`owned`](crate::docs::internal::reader::owned)).
    pub(crate) owned: OwnedCounts,
}

impl ReaderRecord {
    pub(crate) fn new(thread: ThreadInfo, registry: Weak<Registry>) -> ReaderRecord {
        ReaderRecord {
            ctr: AtomicU64::new(0),
            nesting: AtomicU32::new(0),
            wake: WakeWord::new(),
            handles: AtomicU32::new(0),
            _hot_line: [0; HOT_PAD],
            thread,
            owner: crate::sync::fork::Owner::current(),
            registry,
            stall_reported: std::sync::atomic::AtomicU64::new(0),
            orphaned: std::sync::atomic::AtomicBool::new(false),
            owned: OwnedCounts::new(),
        }
    }

    /// Mark the record as outliving its thread's table (see `orphaned`).
    pub(crate) fn orphan(&self) {
        self.orphaned.store(true, Relaxed);
    }

    /// Does the record outlive its thread's table?
    pub(crate) fn is_orphaned(&self) -> bool {
        self.orphaned.load(Relaxed)
    }

    /// The owning thread in words for a stall report: its name and id, and, for a record that
    /// outlived the thread's table, whether the thread has exited since.
    pub(crate) fn describe_thread(&self) -> String {
        if !self.is_orphaned() {
            self.thread.to_string()
        } else if self.thread.has_exited() {
            format!(
                "{}, which has EXITED with it still open (a guard or handle never dropped, as \
                 with mem::forget, or a C thread that exited holding a read lock or registered \
                 online): no grace period will ever end",
                self.thread
            )
        } else {
            format!(
                "{}, which is exiting (held by a thread-local destructor)",
                self.thread
            )
        }
    }

    /// Claim the stall report for the critical section that stored `ctr`: true the first time
    /// for that section, false for every later grace period that finds the same section.
    pub(crate) fn claim_stall_report(&self, ctr: u64) -> bool {
        self.stall_reported.swap(ctr, Relaxed) != ctr
    }

    /// Enter a read-side critical section (R1-R3 of the module docs, or a nested entry).
    #[inline]
    pub(crate) fn enter(&self, epoch: &AtomicU64, fence: FenceKind) {
        self.enter_announcing(epoch, fence, Release);
    }

    /// [`enter`](Self::enter) with the announce store R2 made with `announce` ordering; only
    /// the loom model's busted variant passes anything but `Release`.
    #[inline(always)]
    pub(crate) fn enter_announcing(&self, epoch: &AtomicU64, fence: FenceKind, announce: Ordering) {
        if self.nest() || self.unannounced() {
            let e = epoch.load(Acquire);
            self.ctr.store(e, announce);
            barrier::light(fence);
        }
    }

    /// Whether a nested entry finds `ctr` still 0: it interrupted the outermost entry of its
    /// thread between the nesting store and R2 (a signal handler's section), and announces
    /// itself (see "Signal handlers" in the module docs).
    #[inline(always)]
    fn unannounced(&self) -> bool {
        self.ctr.load(Relaxed) == 0
    }

    /// Leave a critical section (R4 for the outermost one). Returns true when the record was
    /// orphaned and this was its last guard, with no handle left: the caller must then call
    /// [`release_orphan`].
    #[inline]
    pub(crate) fn exit(&self) -> bool {
        let unnest = self.unnest();
        if unnest.outermost {
            self.ctr.store(0, Release);
            self.wake.after_leaving(); // R5
        }
        unnest.last_orphan_guard
    }

    /// The nesting word, for [`RawSection`](crate::RawSection)'s read side written outside Rust.
    #[cfg(all(feature = "raw-sections", not(rcukit_loom)))]
    pub(crate) fn nesting_word(&self) -> &AtomicU32 {
        &self.nesting
    }

    /// Count one more (possibly nested) entry and say whether it is the outermost one, in which
    /// case the caller publishes its own `ctr` value. [`enter`](Self::enter) is this plus RCU's
    /// epoch; [`RecSeq`](crate::RecSeq) reuses records with a sequence counter instead.
    ///
    /// The common case, an outermost entry on a record that is not orphaned, stores a constant
    /// (`1`), and [`unnest`](Self::unnest)'s common case stores `0`: the value a store writes
    /// then does not wait for the load before it, so one read's nesting word is no link in a
    /// chain of loads and stores from every read before it (see "The protocol" in
    /// [`reader`](crate::docs::internal::reader)).
    #[inline(always)]
    pub(crate) fn nest(&self) -> bool {
        let n = self.nesting.load(Relaxed);
        if n == 0 {
            self.nesting.store(1, Relaxed);
            return true;
        }
        self.nest_other(n)
    }

    /// [`nest`](Self::nest) for a nested entry or an orphaned record (`n` is the word it
    /// loaded).
    #[cold]
    #[inline(never)]
    fn nest_other(&self, n: u32) -> bool {
        assert!(
            n & COUNT_MASK != COUNT_MASK,
            "rcukit: read-side critical sections nested 2^31 deep"
        );
        self.nesting.store(n + 1, Relaxed);
        n & COUNT_MASK == 0
    }

    /// Undo one [`nest`](Self::nest). The caller publishes its "not reading" value when the
    /// answer says `outermost`, then calls [`release_orphan`] if it says `last_orphan_guard`.
    #[inline(always)]
    pub(crate) fn unnest(&self) -> Unnest {
        let n = self.nesting.load(Relaxed);
        if n == 1 {
            self.nesting.store(0, Relaxed);
            return Unnest {
                outermost: true,
                last_orphan_guard: false,
            };
        }
        self.unnest_other(n)
    }

    /// [`unnest`](Self::unnest) for a nested exit or an orphaned record (`n` is the word it
    /// loaded).
    #[cold]
    #[inline(never)]
    fn unnest_other(&self, n: u32) -> Unnest {
        let n = n.wrapping_sub(1);
        self.nesting.store(n, Relaxed);
        Unnest {
            outermost: n & COUNT_MASK == 0,
            last_orphan_guard: n == ORPHAN && !self.is_held(),
        }
    }

    /// True while the owning thread is inside a critical section of this record's domain.
    pub(crate) fn is_reading(&self) -> bool {
        self.nesting.load(Relaxed) & COUNT_MASK != 0
    }

    /// Count one more [`ThreadReader`](crate::ThreadReader) on the record (owning thread only).
    pub(crate) fn hold(&self) {
        let n = self.handles.load(Relaxed);
        assert!(
            n != u32::MAX,
            "rcukit: 2^32 - 1 thread readers on one record"
        );
        self.handles.store(n + 1, Relaxed);
    }

    /// Does a [`ThreadReader`](crate::ThreadReader) hold the record?
    pub(crate) fn is_held(&self) -> bool {
        self.handles.load(Relaxed) != 0
    }

    /// Undo one [`hold`](Self::hold). Returns true when the record was orphaned and this was the
    /// last handle, with no guard open: the caller must then call [`release_orphan`].
    pub(crate) fn let_go(&self) -> bool {
        let n = self.handles.load(Relaxed) - 1;
        self.handles.store(n, Relaxed);
        n == 0 && self.nesting.load(Relaxed) == ORPHAN
    }
}

/// What [`ReaderRecord::unnest`] found.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unnest {
    /// The outermost entry just ended.
    pub(crate) outermost: bool,
    /// The record is orphaned and this was its last guard; no handle holds it.
    pub(crate) last_orphan_guard: bool,
}

/// The set of reader records a domain's grace periods must scan.
///
/// The list is copy-on-write: registering or unregistering (once per thread and domain) builds
/// a new vector, and a grace period takes a snapshot by cloning one `Arc`, so no thread ever
/// waits for a grace period to register or exit.
pub(crate) struct Registry {
    records: Mutex<Arc<Vec<Arc<ReaderRecord>>>>,
    /// Owned-section counts of records that left the registry, and of sections opened or closed by
    /// threads whose table was already gone (see [`owned`](crate::docs::internal::reader::owned)).
    pub(crate) owned_residue: OwnedCounts,
}

impl Registry {
    pub(crate) fn new() -> Registry {
        Registry {
            records: Mutex::new(Arc::new(Vec::new())),
            owned_residue: OwnedCounts::new(),
        }
    }

    /// The total of one owned-section counter over every record and the residue, taken under
    /// the registry lock so that a record folding into the residue is counted exactly once.
    pub(crate) fn owned_total(&self, side: Side, phase: usize) -> u64 {
        Self::sum_owned(&self.records.lock(), &self.owned_residue, side, phase)
    }

    /// [`owned_total`](Self::owned_total) if the registry lock is free now (`None` if not):
    /// for waits that must not wait behind a descheduled holder.
    pub(crate) fn try_owned_total(&self, side: Side, phase: usize) -> Option<u64> {
        let records = self.records.try_lock()?;
        Some(Self::sum_owned(&records, &self.owned_residue, side, phase))
    }

    fn sum_owned(
        records: &[Arc<ReaderRecord>],
        residue: &OwnedCounts,
        side: Side,
        phase: usize,
    ) -> u64 {
        records.iter().fold(residue.load(side, phase), |sum, r| {
            sum.wrapping_add(r.owned.load(side, phase))
        })
    }

    /// Owned sections opened and not yet closed (statistics).
    pub(crate) fn owned_open(&self) -> u64 {
        // Per phase, the unlocks first (`Acquire`: each pairs with its unlock's `Release`,
        // after which its lock is counted), then the locks: never fewer locks than unlocks.
        // (Locks first, a section opened and closed between the two loads made the difference
        // wrap around. One record's counts may differ either way: a section opened on one
        // thread may close on another.)
        (0..2)
            .map(|phase| {
                let unlocks = self.owned_total(Side::Unlocks, phase);
                let locks = self.owned_total(Side::Locks, phase);
                locks.saturating_sub(unlocks)
            })
            .sum()
    }

    pub(crate) fn register(&self, record: Arc<ReaderRecord>) {
        let mut records = self.records.lock();
        let mut next = Vec::with_capacity(records.len() + 1);
        next.extend(records.iter().cloned());
        next.push(record);
        *records = Arc::new(next);
    }

    pub(crate) fn unregister(&self, record: *const ReaderRecord) {
        let mut records = self.records.lock();
        if let Some(leaving) = records
            .iter()
            .find(|r| std::ptr::eq(Arc::as_ptr(r), record))
        {
            leaving.owned.fold_into(&self.owned_residue);
            let next: Vec<_> = records
                .iter()
                .filter(|r| !std::ptr::eq(Arc::as_ptr(r), record))
                .cloned()
                .collect();
            *records = Arc::new(next);
        }
    }

    /// Keep only the records for which `keep` says yes (after `fork()`).
    pub(crate) fn retain(&self, mut keep: impl FnMut(&ReaderRecord) -> bool) {
        let mut records = self.records.lock();
        let (next, leaving): (Vec<_>, Vec<_>) = records.iter().cloned().partition(|r| keep(r));
        for record in leaving {
            record.owned.fold_into(&self.owned_residue);
        }
        *records = Arc::new(next);
    }

    /// Hold the registry's lock across `fork()` (see
    /// [`fork`](crate::docs::internal::domain::fork)).
    #[cfg(unix)]
    pub(crate) fn hold_for_fork(&'static self, held: &mut crate::sync::fork::Held) {
        self.records.hold_for_fork(held);
    }

    /// The records registered now.
    pub(crate) fn snapshot(&self) -> Arc<Vec<Arc<ReaderRecord>>> {
        self.records.lock().clone()
    }

    /// [`snapshot`](Self::snapshot) if the registry lock is free now (`None` if not).
    pub(crate) fn try_snapshot(&self) -> Option<Arc<Vec<Arc<ReaderRecord>>>> {
        Some(self.records.try_lock()?.clone())
    }

    pub(crate) fn len(&self) -> usize {
        self.records.lock().len()
    }

    /// Records of live threads, and records that outlived their thread's table (orphaned).
    pub(crate) fn counts(&self) -> (usize, usize) {
        let records = self.records.lock();
        let orphaned = records.iter().filter(|r| r.is_orphaned()).count();
        (records.len() - orphaned, orphaned)
    }
}

/// Unregister an orphaned record once its last guard and its last handle have gone, and free
/// it.
///
/// # Safety
///
/// `record` must come from a record whose owning `Arc` was leaked with `Arc::into_raw` when the
/// record was orphaned, and this must be the one call made for it (its last guard just exited
/// with no handle left, or its last handle just went with no guard left).
#[cold]
pub(crate) unsafe fn release_orphan(record: *const ReaderRecord) {
    // SAFETY: the caller guarantees `record` is the pointer leaked by `Arc::into_raw` when the
    // record was orphaned and that nobody else reconstitutes it.
    let owned = unsafe { Arc::from_raw(record) };
    if let Some(registry) = owned.registry.upgrade() {
        registry.unregister(record);
    }
}

/// A record named `name`, registered with `registry`, for the loom models (which drive its
/// owner's side by hand).
#[cfg(all(test, rcukit_loom))]
pub(crate) fn model_record(registry: &Arc<Registry>, name: &str) -> Arc<ReaderRecord> {
    let thread = ThreadInfo {
        name: name.into(),
        tid: 0,
    };
    let record = Arc::new(ReaderRecord::new(thread, Arc::downgrade(registry)));
    registry.register(record.clone());
    record
}

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use super::*;

    /// A section that interrupts the outermost entry of its thread between the nesting store
    /// and R2 (a signal handler's, here called in that moment by hand) announces itself: `ctr`
    /// is not 0 while it runs, and the interrupted entry goes on as if nothing had happened.
    /// (It counted as nested and left `ctr` at 0: a grace period did not wait for it.)
    #[test]
    fn a_section_entered_between_the_outer_entrys_two_stores_is_announced() {
        let record = ReaderRecord::new(ThreadInfo::current(), Weak::new());
        let epoch = AtomicU64::new(7);
        assert!(record.nest(), "the outer entry, up to its nesting store");
        record.enter(&epoch, FenceKind::SeqCst);
        assert_eq!(
            record.ctr.load(Relaxed),
            7,
            "the interrupting section is announced"
        );
        assert!(!record.exit(), "its exit");
        assert_eq!(
            record.ctr.load(Relaxed),
            7,
            "still announced for the outer entry"
        );
        // The outer entry's R1-R2, then its exit.
        record.ctr.store(epoch.load(Acquire), Release);
        assert!(!record.exit());
        assert_eq!(record.ctr.load(Relaxed), 0, "out");
        // An ordinary nested entry changes nothing.
        record.enter(&epoch, FenceKind::SeqCst);
        epoch.store(8, Relaxed);
        record.enter(&epoch, FenceKind::SeqCst);
        assert_eq!(
            record.ctr.load(Relaxed),
            7,
            "a nested entry leaves the outer's epoch"
        );
        record.exit();
        record.exit();
        assert_eq!(record.ctr.load(Relaxed), 0);
    }
}
