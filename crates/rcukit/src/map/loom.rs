//! loom models of the map's tables (run with `RUSTFLAGS="--cfg rcukit_loom"`; see README):
//! a lookup racing an insert, a removal and a resize step; a lookup racing the reuse of a lane
//! and the move of a bucket with an overflow line; an iteration racing resizes, and racing a
//! resize and a replacement; an insert racing the lock-free move of an empty bucket; `clear`'s
//! step in the table a grow or a shrink moves into, racing the mover. The real table code
//! runs (its atomics and locks come from `sync.rs`, driven as in `by_hand.rs`); reclamation is
//! left out (unlinked nodes are freed when the model ends), since the domain's own models
//! cover grace periods.

use super::by_hand::{self, current, insert, Root};
use super::iter::Iter;
use super::moves::Busted;
use super::table::{self, Node, Table};
use crate::sync::AtomicPtr;
use loom::thread;
use std::ptr;
use std::sync::atomic::Ordering::Acquire;
use std::sync::{Arc, Mutex};

/// What the model unlinked, freed at its end.
#[derive(Default)]
struct Unlinked {
    nodes: Vec<usize>,
    tables: Vec<usize>,
}

fn remove(root: &Root, hash: u64, key: u64) -> Option<*mut Node<u64, u64>> {
    loop {
        // SAFETY: nothing is freed before the model ends.
        let spot = unsafe { table::locate(current(root), hash, &mut |k| *k == key) };
        if spot.found.is_null() {
            if spot.unchanged() {
                return None;
            }
            continue;
        }
        let Some(locked) = spot.lock() else { continue };
        // SAFETY: validated lock; the spot found a node.
        return Some(unsafe { locked.unlink() });
    }
}

fn lookup(root: &Root, hash: u64, key: u64) -> Option<u64> {
    // SAFETY: nothing is freed before the model ends.
    unsafe { table::find(current(root), hash, |k| *k == key) }.map(|n| n.value)
}

/// Keys 1 and 3 share bucket 1 of a 2-bucket table (hashes 1 and 3); a resize into 4 buckets
/// separates them. A reader looks up key 1 (present throughout) while a mover moves the
/// buckets and a writer removes key 3 and inserts key 5 (hash 5: bucket 1, then 1).
fn lookup_racing_a_resize_step(busted: Busted) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(move || {
        let root: Arc<Root> = Arc::new(AtomicPtr::new(Box::into_raw(Table::new(2))));
        let unlinked = Arc::new(Mutex::new(Unlinked::default()));
        assert!(insert(&root, 3, 3, 30).is_none());
        assert!(insert(&root, 1, 1, 10).is_none());
        by_hand::install_successor(&root, 4);

        let reader = {
            let root = root.clone();
            thread::spawn(move || {
                for _ in 0..2 {
                    assert_eq!(
                        lookup(&root, 1, 1),
                        Some(10),
                        "a key present throughout missed"
                    );
                }
            })
        };
        let writer = {
            let (root, unlinked) = (root.clone(), unlinked.clone());
            thread::spawn(move || {
                let removed = remove(&root, 3, 3).expect("a key present until its removal missed");
                assert!(insert(&root, 5, 5, 50).is_none());
                unlinked.lock().unwrap().nodes.push(removed as usize);
            })
        };
        let old = root.load(Acquire);
        // SAFETY: nothing is freed before the model ends; `old` came from the root.
        let finished = unsafe { by_hand::finish_move(&root, old, 2, busted) };
        unlinked.lock().unwrap().tables.push(finished as usize);
        reader.join().unwrap();
        writer.join().unwrap();

        assert_eq!(lookup(&root, 1, 1), Some(10));
        assert_eq!(lookup(&root, 3, 3), None);
        assert_eq!(lookup(&root, 5, 5), Some(50));
        // SAFETY: the model is over: nobody else uses the map.
        drop(unsafe { table::take_all(root.load(Acquire), false) });
        let unlinked = unlinked.lock().unwrap();
        for &node in &unlinked.nodes {
            // SAFETY: unlinked once, never reachable again.
            drop(unsafe { Box::from_raw(node as *mut Node<u64, u64>) });
        }
        for &table in &unlinked.tables {
            // SAFETY: the old table, no longer the root; its nodes moved to the new one.
            drop(unsafe { Box::from_raw(table as *mut Table<u64, u64>) });
        }
    });
}

#[test]
fn loom_map_lookup_racing_insert_remove_and_a_resize_step() {
    lookup_racing_a_resize_step(Busted::No);
}

/// The busted mover marks a bucket moved before its entries are in the new table: a lookup
/// (the reader's, or the writer's walk for its removal) can then miss a present key, and loom
/// finds the interleaving.
#[test]
#[should_panic(expected = "missed")]
fn loom_map_busted_move_order_is_caught() {
    lookup_racing_a_resize_step(Busted::MarkFirst);
}

/// An iteration racing a grow that a shrink follows: keys 0, 1 and 3 (hashes 0, 1 and 3) are
/// present throughout, a mover moves the 2-bucket table into 4 buckets and then into 1. The
/// iteration must yield each key exactly once, whichever tables its steps meet.
fn iteration_racing_a_grow_and_a_shrink(busted_no_record: bool) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(move || {
        let root: Arc<Root> = Arc::new(AtomicPtr::new(Box::into_raw(Table::new(2))));
        for key in [0, 1, 3] {
            assert!(insert(&root, key, key, key * 10).is_none());
        }
        let iterator = {
            let root = root.clone();
            thread::spawn(move || {
                // SAFETY: nothing is freed before the model ends.
                let mut iter = unsafe { Iter::new(&*root) };
                iter.busted_no_record = busted_no_record;
                let mut keys: Vec<u64> = iter.map(|(k, _)| *k).collect();
                keys.sort_unstable();
                assert_eq!(keys, [0, 1, 3], "each key present throughout exactly once");
            })
        };
        // SAFETY: this thread is the model's only mover.
        let old_tables: Vec<_> = [4, 1]
            .into_iter()
            .map(|size| unsafe { by_hand::resize(&root, size) })
            .collect();
        iterator.join().unwrap();
        // SAFETY: the model is over: nobody else uses the map.
        drop(unsafe { table::take_all(root.load(Acquire), false) });
        for table in old_tables {
            // SAFETY: old tables, no longer the root; their nodes moved on.
            drop(unsafe { Box::from_raw(table) });
        }
    });
}

/// With buckets as lines, every step of the iteration reads a bucket's state, tag word and
/// lanes, and loom's exploration of this model runs for more than an hour even with two
/// preemptions: it is opt-in (`-- --ignored`, see the README). The busted twin below finds its
/// failure in a second, and the map torture checks the same property on every held
/// iteration.
#[test]
#[ignore = "runs for more than an hour: opt-in, see the README's loom rows"]
fn loom_map_iteration_racing_a_grow_and_a_shrink() {
    iteration_racing_a_grow_and_a_shrink(false);
}

/// Without its record of the buckets each table took (a node moved while the step walked is
/// met in its old bucket, unmoved then, and again in the new table), loom finds an iteration
/// that yields a key twice.
#[test]
#[should_panic(expected = "each key present throughout exactly once")]
fn loom_map_busted_iteration_without_its_record_is_caught() {
    iteration_racing_a_grow_and_a_shrink(true);
}

/// An iteration racing a grow and a replacement of the one key: key 1 (hash 1) in a 2-bucket
/// table is replaced (value 10, then 11) while a mover moves the table into 4 buckets. The
/// replacement lands in the old table or the new one, before or after the iteration's step
/// walks either; the iteration must yield key 1 exactly once, with either value.
fn iteration_racing_a_grow_and_a_replacement(busted_no_record: bool) {
    let mut model = loom::model::Builder::new();
    // One preemption finds the broken twin's failure; `LOOM_MAX_PREEMPTIONS=2` explores more
    // (about two minutes).
    model.preemption_bound = model.preemption_bound.or(Some(1));
    model.check(move || {
        let root: Arc<Root> = Arc::new(AtomicPtr::new(Box::into_raw(Table::new(2))));
        assert!(insert(&root, 1, 1, 10).is_none());
        let iterator = {
            let root = root.clone();
            thread::spawn(move || {
                // SAFETY: nothing is freed before the model ends.
                let mut iter = unsafe { Iter::new(&*root) };
                iter.busted_no_record = busted_no_record;
                let values: Vec<u64> = iter.map(|(_, v)| *v).collect();
                assert!(
                    values == [10] || values == [11],
                    "key 1 exactly once, with either value: {values:?}"
                );
            })
        };
        let writer = {
            let root = root.clone();
            thread::spawn(move || insert(&root, 1, 1, 11).map(|old| old as usize))
        };
        // SAFETY: this thread is the model's only mover.
        let old = unsafe { by_hand::resize(&root, 4) };
        iterator.join().unwrap();
        let replaced = writer.join().unwrap().expect("key 1 was present");
        // SAFETY: the model is over: nobody else uses the map; the old table's nodes moved on,
        // and the replaced node is unlinked.
        unsafe {
            drop(table::take_all(root.load(Acquire), false));
            drop(Box::from_raw(old));
            drop(Box::from_raw(replaced as *mut Node<u64, u64>));
        }
    });
}

#[test]
fn loom_map_iteration_racing_a_grow_and_a_replacement() {
    iteration_racing_a_grow_and_a_replacement(false);
}

/// Without its record of the buckets each table took, loom finds the step that takes key 1
/// from the old table, and then its replacement from the new one.
#[test]
#[should_panic(expected = "key 1 exactly once")]
fn loom_map_busted_iteration_racing_a_replacement_is_caught() {
    iteration_racing_a_grow_and_a_replacement(true);
}

/// An insert into an empty bucket racing the mover that marks that bucket moved without its
/// lock (one compare-exchange, claim 5): key 2 (hash 2: bucket 0 of 2, bucket 2 of 4) must
/// be in the map once both are done, and a reader that looks it up after the insert returned
/// must find it. The busted twin looks at the bucket's lanes before its state
/// ([`Busted::EmptyBeforeState`]).
///
/// The model's thread yields once the writer is spawned, so that the writer runs first in
/// loom's first interleaving. Without the yield the mover runs first, the writer's stores to
/// the bucket each follow its own load of the same word, and loom 0.7 does not try the
/// writer between the mover's reads (tokio-rs/loom#392): the model explored 208
/// interleavings and the busted twin passed. With it, 893, and the twin fails.
fn insert_racing_the_move_of_an_empty_bucket(busted: Busted) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(move || {
        let root: Arc<Root> = Arc::new(AtomicPtr::new(Box::into_raw(Table::new(2))));
        by_hand::install_successor(&root, 4);
        let writer = {
            let root = root.clone();
            thread::spawn(move || {
                assert!(insert(&root, 2, 2, 20).is_none());
                assert_eq!(lookup(&root, 2, 2), Some(20), "an inserted key missed");
            })
        };
        thread::yield_now();
        let old = root.load(Acquire);
        // SAFETY: nothing is freed before the model ends; `old` came from the root.
        let finished = unsafe { by_hand::finish_move(&root, old, 2, busted) };
        writer.join().unwrap();
        assert_eq!(lookup(&root, 2, 2), Some(20), "the insert was lost");
        // SAFETY: the model is over: nobody else uses the map.
        drop(unsafe { table::take_all(root.load(Acquire), false) });
        // SAFETY: the old table, no longer the root; its nodes (if any) moved on.
        drop(unsafe { Box::from_raw(finished) });
    });
}

#[test]
fn loom_map_insert_racing_the_move_of_an_empty_bucket() {
    insert_racing_the_move_of_an_empty_bucket(Busted::No);
}

#[test]
#[should_panic(expected = "the insert was lost")]
fn loom_map_busted_empty_bucket_checked_before_its_state_is_caught() {
    insert_racing_the_move_of_an_empty_bucket(Busted::EmptyBeforeState);
}

/// One bucket of six entries: five in its line and one in an overflow line (keys 0, 2, ...,
/// 10, hashed to themselves: bucket 0 of 2; their tags are all equal, so every occupied lane
/// is a candidate). A reader looks up the key in the overflow line and the key of the first
/// lane, both present throughout, while a writer empties lane 1 (key 2) and reuses it for
/// key 12, and a mover moves the bucket, overflow line and all, into 4 buckets (keys 0, 4,
/// 8, 12 to bucket 0, keys 2, 6, 10 to bucket 2).
#[test]
fn loom_map_lookup_racing_lane_reuse_and_the_move_of_an_overflow_line() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(|| {
        let root: Arc<Root> = Arc::new(AtomicPtr::new(Box::into_raw(Table::new(2))));
        for key in (0..12).step_by(2) {
            assert!(insert(&root, key, key, key * 10).is_none());
        }
        by_hand::install_successor(&root, 4);
        let reader = {
            let root = root.clone();
            thread::spawn(move || {
                assert_eq!(lookup(&root, 10, 10), Some(100), "an overflow entry missed");
                assert_eq!(lookup(&root, 0, 0), Some(0), "a lane's entry missed");
            })
        };
        let writer = {
            let root = root.clone();
            thread::spawn(move || {
                let removed = remove(&root, 2, 2).expect("a key present until its removal missed");
                assert!(insert(&root, 12, 12, 120).is_none());
                removed as usize
            })
        };
        let old = root.load(Acquire);
        // SAFETY: nothing is freed before the model ends; `old` came from the root.
        let finished = unsafe { by_hand::finish_move(&root, old, 2, Busted::No) };
        reader.join().unwrap();
        let removed = writer.join().unwrap();
        for key in [0, 4, 6, 8, 10, 12] {
            assert_eq!(lookup(&root, key, key), Some(key * 10), "key {key}");
        }
        assert_eq!(lookup(&root, 2, 2), None);
        // SAFETY: the model is over: nobody else uses the map.
        drop(unsafe { table::take_all(root.load(Acquire), false) });
        // SAFETY: unlinked once, never reachable again.
        drop(unsafe { Box::from_raw(removed as *mut Node<u64, u64>) });
        // SAFETY: the old table, no longer the root; its nodes moved on.
        drop(unsafe { Box::from_raw(finished) });
    });
}

/// `clear`'s step in a successor table racing the mover that fills it. The old table of `old`
/// buckets holds keys with `hashes` (each key its hash plus 10), and its successor of `new`
/// buckets is installed: entries inserted into the old table after `clear`'s walk had emptied
/// it, as the walk reaches the successor. A mover moves the old table while the clearer
/// empties the successor (`table::detach_all`) and then looks up each entry it took: a lookup
/// that starts after the take must not reach the entry (it is retired then), and no entry may
/// be lost or taken twice (each is either taken or still in the map, never both). The busted
/// twin calls `detach_all` without the table it came from, as if every bucket of the
/// successor were its own: the step then takes entries whose source has not moved.
///
/// The mover runs on the model's own thread and the clearer on a spawned one. With the roles
/// swapped, loom 0.7 ran the model through one interleaving and the busted twin passed: the
/// clearer's loads of the successor's words came first, and the mover's later load and store
/// of each word hid them from loom's race detection (tokio-rs/loom#392; see "Loom models" in
/// `docs/reliability.md`). The whole walk (the current table too) racing an insert as well
/// needs three preemptions to reach the busted interleaving, past what runs in minutes; the
/// step models cover `detach_all`'s part of it.
fn clear_step_racing_a_mover(old: usize, hashes: [u64; 2], new: usize, busted_no_from: bool) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = model.preemption_bound.or(Some(2));
    model.check(move || {
        let root = Arc::new(by_hand::filled(old, &hashes));
        let mut all: Vec<usize> = hashes
            .iter()
            .map(|&hash| {
                // SAFETY: nothing is freed before the model ends.
                let node = unsafe { table::find(current(&root), hash, |k| *k == hash + 10) };
                ptr::from_ref(node.expect("just inserted")) as usize
            })
            .collect();
        let from = root.load(Acquire) as usize;
        let new = by_hand::install_successor(&root, new) as usize;
        let clearer = {
            let root = root.clone();
            thread::spawn(move || {
                let mut taken = Vec::new();
                // SAFETY: nothing is freed before the model ends; `from`'s `next` is `new`.
                unsafe {
                    let from = (!busted_no_from).then(|| &*(from as *const Table<u64, u64>));
                    table::detach_all(&*(new as *const Table<u64, u64>), from, &mut taken);
                }
                for &p in &taken {
                    // SAFETY: taken nodes are freed only when the model ends.
                    let (hash, key) = unsafe { ((*p).hash, (*p).key) };
                    // SAFETY: as above.
                    let found = unsafe { table::find(current(&root), hash, |k| *k == key) };
                    assert!(
                        !found.is_some_and(|n| ptr::eq(n, p)),
                        "a lookup that started after the take reached a taken entry"
                    );
                }
                taken.into_iter().map(|p| p as usize).collect::<Vec<_>>()
            })
        };
        // SAFETY: nothing is freed before the model ends; `from` came from the root.
        let finished = unsafe { by_hand::finish_move(&root, from as *mut _, old, Busted::No) };
        let taken = clearer.join().unwrap();
        // SAFETY: the model is over: nobody else uses the map.
        let left = unsafe { table::take_all(root.load(Acquire), false) };
        let mut accounted: Vec<usize> = left.into_iter().map(|p| p as usize).collect();
        accounted.extend(&taken);
        accounted.sort_unstable();
        all.sort_unstable();
        assert_eq!(accounted, all, "each entry taken or left, once");
        // SAFETY: each node is freed once (checked just above); the old table's nodes moved on.
        unsafe {
            for p in all {
                drop(Box::from_raw(p as *mut Node<u64, u64>));
            }
            drop(Box::from_raw(finished));
        }
    });
}

/// A grow: keys with hashes 0 and 2 share bucket 0 of the 1-bucket table and of the 2-bucket
/// successor, which the mover fills without its lock.
#[test]
fn loom_map_clear_step_racing_a_grow() {
    clear_step_racing_a_mover(1, [0, 2], 2, false);
}

#[test]
#[should_panic(expected = "reached a taken entry")]
fn loom_map_busted_clear_step_racing_a_grow_is_caught() {
    clear_step_racing_a_mover(1, [0, 2], 2, true);
}

/// A shrink: keys with hashes 0 and 1, in buckets 0 and 1 of the 2-bucket table, meet in the
/// 1-bucket successor, which the mover changes under its lock.
#[test]
fn loom_map_clear_step_racing_a_shrink() {
    clear_step_racing_a_mover(2, [0, 1], 1, false);
}

#[test]
#[should_panic(expected = "reached a taken entry")]
fn loom_map_busted_clear_step_racing_a_shrink_is_caught() {
    clear_step_racing_a_mover(2, [0, 1], 1, true);
}
