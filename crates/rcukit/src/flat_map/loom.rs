//! loom models of the flat map's table (run with `RUSTFLAGS="--cfg rcukit_loom"`; see
//! README): a lookup racing a replacement whose new slot is in another group, one racing a
//! replacement whose new slot is in the other control word of the same group, and one racing
//! a rebuild into a new table followed by a replacement there. The real table code
//! runs (the reader's `find`, the writer's `probe_for_write`, `place`, `bury` and
//! `copy_live_into`); the map's lock and the domain are left out (one writer per model, and
//! tables are freed when the model ends).

use super::table::{Table, GROUP, WORD};
use crate::sync::AtomicPtr;
use loom::thread;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;

/// Hash for key `k` of a 2-group table: home group 0, tag `k` (top seven bits).
fn hash(k: u64) -> u64 {
    k << 57
}

fn lookup(root: &AtomicPtr<Table<u64, u64>>, k: u64) -> Option<u64> {
    // SAFETY: tables are freed only when the model ends.
    let table = unsafe { &*root.load(Acquire) };
    table.find(hash(k), |key| *key == k).map(|e| e.1)
}

fn put(table: &Table<u64, u64>, k: u64, v: u64) -> Option<u64> {
    let found = table.probe_for_write(hash(k), |key| *key == k);
    // SAFETY: the key's slot, if any, is full (the writer's own probe).
    let old = found.at.map(|at| unsafe { table.entry(at) }.1);
    // SAFETY: the model's one writer; `found` is fresh and has a free slot.
    unsafe { table.place(&found, hash(k), (k, v)) };
    old
}

/// A thread that looks `key` up twice: it must find it, with `old` or `new`, and never `old`
/// after `new`.
fn spawn_reader(
    root: &Arc<AtomicPtr<Table<u64, u64>>>,
    key: u64,
    old: u64,
    new: u64,
) -> thread::JoinHandle<()> {
    let root = root.clone();
    thread::spawn(move || {
        let mut last = 0;
        for _ in 0..2 {
            let v = lookup(&root, key).expect("a key present throughout missed");
            assert!(v == old || v == new, "a value never written: {v}");
            assert!(v >= last, "the new value, then the old one");
            last = v;
        }
    })
}

/// A table of two groups whose group 0 is full: keys 1..=16 (values 10 * key), all homed in
/// group 0, so a replacement's new slot is in group 1.
fn full_first_group() -> Box<Table<u64, u64>> {
    let table = Box::new(Table::new(2));
    for k in 1..=GROUP as u64 {
        assert_eq!(put(&table, k, 10 * k), None);
    }
    table
}

#[test]
fn a_lookup_racing_a_replacement_in_another_group_sees_old_or_new() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let root = Arc::new(AtomicPtr::new(Box::into_raw(full_first_group())));
        let reader = spawn_reader(&root, 3, 30, 31);
        // SAFETY: freed at the model's end.
        let table = unsafe { &*root.load(Acquire) };
        assert_eq!(put(table, 3, 31), Some(30));
        table.bury(0); // key 1's slot: a removal beside it
        reader.join().unwrap();
        assert_eq!(lookup(&root, 3), Some(31));
        assert_eq!(lookup(&root, 1), None);
        // SAFETY: the model is over: nobody reads the table any more.
        drop(unsafe { Box::from_raw(root.load(Acquire)) });
    });
}

#[test]
fn a_lookup_racing_a_replacement_into_the_other_word_of_its_group_sees_old_or_new() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        // One group: keys 1..=8 fill its first control word, so key 4's new slot is the first
        // of the second word (two stores: the new byte, then the tombstone).
        let table = Box::new(Table::new(1));
        for k in 1..=WORD as u64 {
            assert_eq!(put(&table, k, 10 * k), None);
        }
        let root = Arc::new(AtomicPtr::new(Box::into_raw(table)));
        let reader = spawn_reader(&root, 4, 40, 41);
        // SAFETY: freed at the model's end.
        let table = unsafe { &*root.load(Acquire) };
        assert_eq!(put(table, 4, 41), Some(40));
        reader.join().unwrap();
        assert_eq!(lookup(&root, 4), Some(41));
        // SAFETY: the model is over: nobody reads the table any more.
        drop(unsafe { Box::from_raw(root.load(Acquire)) });
    });
}

#[test]
fn a_lookup_racing_a_rebuild_and_a_replacement_in_the_new_table_sees_old_or_new() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let root = Arc::new(AtomicPtr::new(Box::into_raw(full_first_group())));
        let reader = spawn_reader(&root, 5, 50, 51);
        // SAFETY: freed at the model's end.
        let old = unsafe { &*root.load(Acquire) };
        let new = Box::new(Table::new(4));
        assert_eq!(old.copy_live_into(&new, |k| hash(*k), None), GROUP);
        let new = Box::into_raw(new);
        let was = root.swap(new, Release);
        // SAFETY: `new` is the root; freed at the model's end.
        assert_eq!(put(unsafe { &*new }, 5, 51), Some(50));
        reader.join().unwrap();
        assert_eq!(lookup(&root, 5), Some(51));
        // SAFETY: the model is over: nobody reads the tables any more.
        unsafe {
            drop(Box::from_raw(was));
            drop(Box::from_raw(new));
        }
    });
}
