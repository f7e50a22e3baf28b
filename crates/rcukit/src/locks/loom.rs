//! loom models of the lock alternatives (run with `RUSTFLAGS="--cfg rcukit_loom"`; see
//! README): `RecSeq`'s writer wait and `PerCpuRwLock`'s exclusion, each with a busted variant
//! the checker must catch.

use super::percpu_rwlock::{Path, RawPerCpuRwLock};
use super::recseq::RecSeq;
use crate::barrier::FenceKind;
use crate::sync::AtomicU64;
use loom::thread;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// A table whose "freed" mark a reader must never see while it is inside a section that
/// found the table.
struct Table {
    freed: AtomicU64,
}

fn table() -> Box<Table> {
    Box::new(Table {
        freed: AtomicU64::new(0),
    })
}

/// Reader: one section that loads the table and checks the mark. Writer: replace, then mark
/// the old table freed (`wait = true`: through `replace_box`, which waits for odd counters;
/// `wait = false`: a writer that swaps and frees at once).
fn recseq_model(wait: bool) {
    loom::model(move || {
        let r = Arc::new(RecSeq::with_settings(
            table(),
            FenceKind::SeqCst,
            Duration::from_secs(3600),
        ));
        let record = crate::reader::model_record(&r.registry, "loom-reader");
        let reader = {
            let r = r.clone();
            thread::spawn(move || {
                // SAFETY: the record is registered with `r` and used only by this thread.
                let guard = unsafe { r.read_on(Arc::as_ptr(&record)) };
                let freed = guard.freed.load(Relaxed);
                drop(guard);
                freed
            })
        };
        let old = if wait {
            r.replace_box(table())
        } else {
            let old = r
                .ptr
                .swap(Box::into_raw(table()), std::sync::atomic::Ordering::AcqRel);
            // SAFETY: `old` came from `Box::into_raw` and the swap took it out of `r`.
            unsafe { Box::from_raw(old) }
        };
        old.freed.store(1, Relaxed);
        assert_eq!(
            reader.join().unwrap(),
            0,
            "a RecSeq reader saw a table after the writer took it back"
        );
    });
}

#[test]
fn recseq_writer_waits_for_odd_counters() {
    recseq_model(true);
}

/// The checker must be able to fail: without the wait the reader sees a freed table.
#[test]
#[should_panic(expected = "a RecSeq reader saw a table after the writer took it back")]
fn recseq_writer_without_wait_busted() {
    recseq_model(false);
}

/// A reader on slot 1 and a writer share a `loom` cell: any overlap of their critical sections
/// is a causality violation. `writer_slots` is what the writer locks: `0..2` (all, correct) or
/// `0..1` (busted: it forgets the reader's slot).
fn percpu_model(writer_slots: std::ops::Range<usize>, path: Path) {
    loom::model(move || {
        let lock = Arc::new(RawPerCpuRwLock::with_slots(2).unwrap());
        // loom's cell is not `Sync`: sharing it unsynchronized is what the model checks.
        #[allow(clippy::arc_with_non_send_sync)]
        let data = Arc::new(loom::cell::UnsafeCell::new(0u64));
        let reader = {
            let (lock, data) = (lock.clone(), data.clone());
            thread::spawn(move || {
                lock.lock_shared_on(1, path);
                // SAFETY: under the read lock; writers are excluded (what loom checks).
                let v = data.with(|p| unsafe { *p });
                lock.unlock_shared_on(1, path);
                v
            })
        };
        lock.lock_exclusive_slots(writer_slots.clone());
        // SAFETY: under the write lock (what loom checks).
        data.with_mut(|p| unsafe { *p += 1 });
        lock.unlock_exclusive_slots(writer_slots.clone());
        let v = reader.join().unwrap();
        assert!(v <= 1);
    });
}

#[test]
fn percpu_rwlock_writer_excludes_owner_readers() {
    percpu_model(0..2, Path::Owner);
}

#[test]
fn percpu_rwlock_writer_excludes_shared_readers() {
    percpu_model(0..2, Path::Shared);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn percpu_rwlock_writer_missing_a_slot_busted() {
    percpu_model(0..1, Path::Owner);
}

/// Two writers exclude each other (they meet on slot 0 first).
#[test]
fn percpu_rwlock_writers_exclude_each_other() {
    loom::model(|| {
        let lock = Arc::new(RawPerCpuRwLock::with_slots(2).unwrap());
        // loom's cell is not `Sync`: sharing it unsynchronized is what the model checks.
        #[allow(clippy::arc_with_non_send_sync)]
        let data = Arc::new(loom::cell::UnsafeCell::new(0u64));
        let other = {
            let (lock, data) = (lock.clone(), data.clone());
            thread::spawn(move || {
                lock.lock_exclusive_slots(0..2);
                // SAFETY: under the write lock (what loom checks).
                data.with_mut(|p| unsafe { *p += 1 });
                lock.unlock_exclusive_slots(0..2);
            })
        };
        lock.lock_exclusive_slots(0..2);
        // SAFETY: under the write lock (what loom checks).
        data.with_mut(|p| unsafe { *p += 1 });
        lock.unlock_exclusive_slots(0..2);
        other.join().unwrap();
        // SAFETY: both threads are done.
        assert_eq!(data.with(|p| unsafe { *p }), 2);
    });
}
