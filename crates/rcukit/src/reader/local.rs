#![doc = include_str!("local.md")]

use super::{release_orphan, ReaderRecord, Registry, ThreadInfo, ORPHAN};
use crate::barrier::FenceKind;
use crate::per_thread::{DirectCache, DomainKey, Entry, IndexView, PerDomain};
use crate::sync::AtomicU64;
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// A thread's record for one domain, as its table holds it.
struct LocalEntry(Arc<ReaderRecord>);

impl Entry for LocalEntry {
    type Target = ReaderRecord;

    fn target(&mut self) -> NonNull<ReaderRecord> {
        // `Arc::as_ptr`, not `&*arc`: the pointer must keep the provenance of the whole
        // allocation, since an orphaned record's last guard turns it back into the `Arc`
        // (`release_orphan`), which reaches the reference counts in front of the record.
        NonNull::new(Arc::as_ptr(&self.0).cast_mut()).expect("an Arc is never null")
    }

    fn domain_gone(&self) -> bool {
        self.0.registry.strong_count() == 0
    }
}

impl LocalEntry {
    /// The calling thread's new record for the domain of `registry`, registered there.
    fn register(registry: &Arc<Registry>) -> LocalEntry {
        let record = Arc::new(ReaderRecord::new(
            ThreadInfo::current(),
            Arc::downgrade(registry),
        ));
        registry.register(record.clone());
        LocalEntry(record)
    }
}

/// The calling thread's reader records, one per domain it has read (see
/// [`per_thread`](crate::docs::internal::per_thread): the same domain again costs a compare, any
/// other one a hash probe).
struct LocalRecords(PerDomain<LocalEntry>);

impl Drop for LocalRecords {
    fn drop(&mut self) {
        // Reads from now on (in later thread-local destructors) must not find these records.
        LAST.set((0, std::ptr::null()));
        CACHE.with(DirectCache::clear);
        INDEX.set(IndexView::EMPTY);
        for (_, LocalEntry(record)) in self.0.take_all() {
            if record.is_reading() || record.is_held() {
                // A guard or a `ThreadReader` outlives this thread-local (it lives in another
                // thread-local that is destroyed later). Hand the record over to them.
                let n = record.nesting.load(Relaxed);
                record.nesting.store(n | ORPHAN, Relaxed);
                record.orphan();
                let _ = Arc::into_raw(record);
            } else if let Some(registry) = record.registry.upgrade() {
                registry.unregister(Arc::as_ptr(&record));
            }
        }
    }
}

thread_local! {
    static LOCAL: LocalRecords = const { LocalRecords(PerDomain::new()) };
    /// The domain read last and the thread's record for it: the fast path of every read. A
    /// thread-local without a destructor, so that reading it needs no check of whether it has
    /// been initialized or destroyed (`LOCAL`, which has one, is only reached on a miss of all
    /// three caches). Its record's address does not depend on the domain's line, so the
    /// processor starts on the record while the compare is still waiting for the domain's id
    /// (a direct-mapped lookup alone, which needs the domain's hash first, measured 1.4x
    /// slower for a thread that keeps to one domain). A domain id is never reused, so an entry
    /// left here after its domain is gone (and its record freed) never matches a later read;
    /// `LocalRecords::drop` clears it.
    static LAST: Cell<(u64, *const ReaderRecord)> = const { Cell::new((0, std::ptr::null())) };
    /// The thread's records by domain, direct-mapped (see [`DirectCache`]): the next path, for
    /// a thread that reads several domains in turn (up to about a hundred fit). No destructor,
    /// entries by id, cleared with `LAST`, for the same reasons.
    static CACHE: DirectCache<ReaderRecord> = const { DirectCache::new() };
    /// Where `LOCAL`'s index is, for the same reason: a thread that reads several domains in
    /// turn finds each record with a hash probe, no call and no thread-local check. Refreshed
    /// whenever `LOCAL` adds a record, cleared when it goes.
    static INDEX: Cell<IndexView<ReaderRecord>> = const { Cell::new(IndexView::EMPTY) };
}

/// The calling thread's record for `domain` in its table, registering one on first use; the
/// caches (`LAST`, `CACHE`, `INDEX`) are brought up to date.
#[inline]
fn record_in(
    local: &LocalRecords,
    domain: DomainKey,
    registry: &Arc<Registry>,
) -> *const ReaderRecord {
    let record = local
        .0
        .get_or_insert(domain, || LocalEntry::register(registry))
        .as_ptr()
        .cast_const();
    INDEX.set(local.0.view());
    CACHE.with(|cache| cache.set(domain, record));
    LAST.set((domain.id(), record));
    record
}

/// The calling thread's record for `domain` from the destructor-less caches (`LAST`, `CACHE`,
/// then `INDEX`), if it has one and its table is alive.
#[inline]
fn cached_record(domain: DomainKey) -> Option<*const ReaderRecord> {
    let (last, record) = LAST.get();
    if last == domain.id() {
        return Some(record);
    }
    CACHE.with(|cache| {
        if let Some(record) = cache.get(domain) {
            LAST.set((domain.id(), record));
            return Some(record);
        }
        // SAFETY: `INDEX` is refreshed every time `LOCAL`'s table adds a record and cleared
        // when it goes, so it views the table's current index.
        let record = unsafe { INDEX.get().find(domain) }?.as_ptr().cast_const();
        cache.set(domain, record);
        LAST.set((domain.id(), record));
        Some(record)
    })
}

/// The calling thread's record for `domain`, registering one on first use.
///
/// The returned pointer stays valid until the thread exits, or, if the record is orphaned,
/// until its last guard exits.
#[inline]
pub(crate) fn local_record(domain: DomainKey, registry: &Arc<Registry>) -> *const ReaderRecord {
    match cached_record(domain) {
        Some(record) => record,
        None => local_record_uncached(domain, registry),
    }
}

#[inline(never)]
fn local_record_uncached(domain: DomainKey, registry: &Arc<Registry>) -> *const ReaderRecord {
    LOCAL
        .try_with(|local| record_in(local, domain, registry))
        .unwrap_or_else(|_| orphan_record(registry))
}

/// The calling thread's record for `domain`, held for a [`ThreadReader`](crate::ThreadReader)
/// (registering one on first use; an orphaned one if the thread's table is gone). The record
/// stays valid until [`let_go_of_record`] is called for this hold, whatever happens to the
/// thread's table meanwhile: a table that goes while the record is held orphans it.
#[inline]
pub(crate) fn held_record(domain: DomainKey, registry: &Arc<Registry>) -> *const ReaderRecord {
    let record = local_record(domain, registry);
    // SAFETY: `local_record` returns the calling thread's live record; nothing between that
    // call and this one runs the table's destructor.
    unsafe { (*record).hold() };
    record
}

/// Undo one [`held_record`], releasing the record if it was orphaned and this was the last
/// hold on it with no section open.
///
/// # Safety
///
/// `record` came from [`held_record`] on the calling thread, and this is the one call for that
/// hold.
#[inline]
pub(crate) unsafe fn let_go_of_record(record: *const ReaderRecord) {
    // SAFETY: a held record stays alive until its holds are let go (the caller's contract).
    if unsafe { (*record).let_go() } {
        // SAFETY: `let_go` returned true once, for the last hold of an orphaned record with no
        // guard left: its owning `Arc` was leaked when it was orphaned.
        unsafe { release_orphan(record) };
    }
}

/// Run `f` inside a read-side critical section of `domain`, on the calling thread's record
/// for it (an orphaned one if the thread's table is gone, released when the section ends).
#[inline]
pub(crate) fn in_section<R>(
    domain: DomainKey,
    registry: &Arc<Registry>,
    read_side: (&AtomicU64, FenceKind),
    f: impl FnOnce(&ReaderRecord) -> R,
) -> R {
    let record = local_record(domain, registry);
    // SAFETY: `local_record` returns the calling thread's live record, which stays valid while
    // a section is open on it (see `Guard`); this function opens one and closes it below.
    let r = unsafe {
        (*record).enter(read_side.0, read_side.1);
        f(&*record)
    };
    // SAFETY: as above; `exit` says whether this was the last section of an orphaned record.
    if unsafe { (*record).exit() } {
        // SAFETY: `exit` returned true exactly once for this orphaned record.
        unsafe { release_orphan(record) };
    }
    r
}

/// Run `f` on the calling thread's record for `domain` (registering one on first use) and
/// return true; return false without calling it if the thread's table is already gone (in a
/// thread-local destructor), where no record of this thread may be written any more.
#[inline]
pub(crate) fn with_local_record(
    domain: DomainKey,
    registry: &Arc<Registry>,
    f: impl FnOnce(&ReaderRecord),
) -> bool {
    if let Some(record) = cached_record(domain) {
        // SAFETY: the caches name records of the thread's table, and are cleared before the
        // table goes: the table, and with it the record, is alive.
        f(unsafe { &*record });
        return true;
    }
    with_local_record_uncached(domain, registry, f)
}

#[inline(never)]
fn with_local_record_uncached(
    domain: DomainKey,
    registry: &Arc<Registry>,
    f: impl FnOnce(&ReaderRecord),
) -> bool {
    LOCAL
        .try_with(|local| {
            let record = record_in(local, domain, registry);
            // SAFETY: the table keeps its records alive while it exists, and it exists for the
            // duration of this closure.
            f(unsafe { &*record })
        })
        .is_ok()
}

/// A record for a thread whose thread-local storage is already destroyed: registered now,
/// orphaned from the start, released when its last guard or handle drops.
#[cold]
fn orphan_record(registry: &Arc<Registry>) -> *const ReaderRecord {
    let record = Arc::new(ReaderRecord::new(
        ThreadInfo::exiting(),
        Arc::downgrade(registry),
    ));
    record.nesting.store(ORPHAN, Relaxed);
    record.orphan();
    registry.register(record.clone());
    Arc::into_raw(record)
}

/// Is the calling thread inside a read-side critical section of `domain`, whose records are in
/// `registry`?
///
/// Normally one look at the thread's table (O(1), see
/// [`per_thread`](crate::docs::internal::per_thread)). In a thread-local destructor that runs after
/// the table is gone, the thread's open sections live in orphaned records (handed to their guards,
/// or made for reads in such destructors): those are found in the registry by owner, so that
/// waiting for a grace period there still panics instead of waiting for itself.
#[inline]
pub(crate) fn is_reading(domain: DomainKey, registry: &Registry) -> bool {
    LOCAL
        .try_with(|local| {
            local.0.get(domain).is_some_and(|record| {
                // SAFETY: a record found in the table lives as long as the table.
                unsafe { record.as_ref() }.is_reading()
            })
        })
        .unwrap_or_else(|_| orphan_of_this_thread(registry, |r| r.is_reading()))
}

/// Does the calling thread own an orphaned record of `registry` for which `open` says yes?
#[cold]
pub(crate) fn orphan_of_this_thread(
    registry: &Registry,
    open: impl Fn(&ReaderRecord) -> bool,
) -> bool {
    registry
        .snapshot()
        .iter()
        .any(|r| r.is_orphaned() && r.owner.is_calling_thread() && open(r))
}
