#![doc = include_str!("qsbr.md")]

use super::{orphan_of_this_thread, ReaderRecord, Registry, ThreadInfo};
use crate::sync::{fence, AtomicU64};
use std::cell::RefCell;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::Arc;

/// One registration of the calling thread, kept in a thread-local table so that misuse can be
/// detected.
struct LocalRegistration {
    domain: u64,
    record: Arc<ReaderRecord>,
}

/// The calling thread's registrations: one entry per live registration, removed when it ends.
struct LocalTable(RefCell<Vec<LocalRegistration>>);

impl Drop for LocalTable {
    fn drop(&mut self) {
        // Every entry left belongs to a handle that has not dropped: one kept in a thread-local
        // destroyed after this one (still in use: its thread may read until that destructor
        // ends) or one leaked with `mem::forget`. Unregistering it would let grace periods end
        // while the thread may still read; so it stays registered, marked as outliving the
        // table, until the handle drops (a leaked one never does: stall reports then say that
        // its thread has exited).
        for entry in self.0.get_mut().drain(..) {
            entry.record.orphan();
        }
    }
}

thread_local! {
    static REGISTRATIONS: LocalTable = const { LocalTable(RefCell::new(Vec::new())) };
}

/// Is the calling thread registered with domain `id` (whose records are in `registry`) and
/// online? After the thread's table is gone (in a later thread-local destructor), its
/// registrations are found in the registry by owner.
pub(crate) fn online_here(id: u64, registry: &Registry) -> bool {
    REGISTRATIONS
        .try_with(|table| {
            table.0.try_borrow().is_ok_and(|entries| {
                entries
                    .iter()
                    .any(|e| e.domain == id && e.record.ctr.load(Relaxed) != 0)
            })
        })
        .unwrap_or_else(|_| orphan_of_this_thread(registry, |r| r.ctr.load(Relaxed) != 0))
}

/// The calling thread is already registered with the domain.
#[derive(Debug)]
pub(crate) struct AlreadyRegistered;

/// Register the calling thread with domain `id`: a new record, offline (0), in the thread's
/// table and in `registry`. One registration per thread and domain: a second one would let the
/// thread announce quiescent states for one while it still reads through the other.
pub(crate) fn register(
    id: u64,
    registry: &Arc<Registry>,
) -> Result<Arc<ReaderRecord>, AlreadyRegistered> {
    let record = Arc::new(ReaderRecord::new(
        ThreadInfo::current(),
        Arc::downgrade(registry),
    ));
    let recorded = REGISTRATIONS.try_with(|table| {
        let mut entries = table.0.borrow_mut();
        if entries.iter().any(|e| e.domain == id) {
            return Err(AlreadyRegistered);
        }
        entries.push(LocalRegistration {
            domain: id,
            record: record.clone(),
        });
        Ok(())
    });
    let duplicate = match recorded {
        Ok(result) => result.is_err(),
        // In a thread-local destructor after the table is gone: the registration lives
        // only in the registry, found there by owner (see `online_here`).
        Err(_) => {
            record.orphan();
            orphan_of_this_thread(registry, |_| true)
        }
    };
    if duplicate {
        return Err(AlreadyRegistered);
    }
    // Offline (0) until registered; the caller takes it online (N1-N3).
    registry.register(record.clone());
    Ok(record)
}

/// End a registration of the calling thread with domain `id`: offline, out of the thread's
/// table and out of `registry`.
pub(crate) fn unregister(id: u64, record: &Arc<ReaderRecord>, registry: &Registry) {
    // Fenced whatever the domain: rare, and a writer asleep on the record may rely on it.
    go_offline(record, true);
    let ptr = Arc::as_ptr(record);
    let _ = REGISTRATIONS.try_with(|table| {
        if let Ok(mut entries) = table.0.try_borrow_mut() {
            entries.retain(|e| !(e.domain == id && Arc::as_ptr(&e.record) == ptr));
        }
    });
    registry.unregister(ptr);
}

/// Q1-Q2: record the current epoch as this thread's quiescent state; with `fenced`, a full
/// fence before Q3 (which a sleeping writer then pairs with a fence instead of `membarrier`).
/// Returns the epoch recorded.
#[inline]
pub(crate) fn announce_quiescent_state(
    record: &ReaderRecord,
    epoch: &AtomicU64,
    fenced: bool,
) -> u64 {
    let e = epoch.load(Acquire);
    store_quiescent_state(record, e, fenced);
    e
}

/// A quiescent state of an online thread: Q1, and Q2-Q3 only if the epoch moved since the
/// thread's last announcement (if it did not, the record holds that epoch already). Returns
/// the epoch the record holds.
#[inline]
pub(crate) fn quiescent_state(record: &ReaderRecord, epoch: &AtomicU64, fenced: bool) -> u64 {
    let e = epoch.load(Acquire);
    // Only this thread stores to its record while it is online.
    if e != record.ctr.load(Relaxed) {
        store_quiescent_state(record, e, fenced);
    }
    e
}

/// Q2-Q3 for the epoch `e` read at Q1.
#[inline]
fn store_quiescent_state(record: &ReaderRecord, e: u64, fenced: bool) {
    record.ctr.store(e, Release);
    if fenced {
        fence(SeqCst);
    }
    record.wake.after_leaving(); // Q3
}

/// F1: stop being waited for (`fenced` as for a quiescent state).
#[inline]
pub(crate) fn go_offline(record: &ReaderRecord, fenced: bool) {
    record.ctr.store(0, Release);
    if fenced {
        fence(SeqCst);
    }
    record.wake.after_leaving(); // F2
}

/// N1-N3: be waited for again; the fence pairs with the grace period's G1.
#[inline]
pub(crate) fn come_online(record: &ReaderRecord, epoch: &AtomicU64) {
    let _ = announce_quiescent_state(record, epoch, false);
    fence(SeqCst);
}
