//! Unit tests of the tables: their counts, their layout, and `detach_all` beside a mover.

use super::super::by_hand;
use super::*;
use crate::sync::{on_lines_apart, span_of};

/// A table of `old` buckets holding keys with `hashes` (each key its hash plus 10), and its
/// successor of `new` buckets installed: a resize about to move. Frees both tables and the
/// nodes given when dropped.
struct ResizeUnderWay {
    root: by_hand::Root,
    new: *mut Table<u64, u64>,
    nodes: Vec<*mut Node<u64, u64>>,
}

impl ResizeUnderWay {
    fn start(old: usize, hashes: [u64; 2], new: usize) -> Self {
        let root = by_hand::filled(old, &hashes);
        let new = by_hand::install_successor(&root, new);
        ResizeUnderWay {
            root,
            new,
            nodes: Vec::new(),
        }
    }

    fn old(&self) -> &Table<u64, u64> {
        by_hand::current(&self.root)
    }

    fn successor(&self) -> &Table<u64, u64> {
        // SAFETY: freed only when `self` drops.
        unsafe { &*self.new }
    }
}

impl Drop for ResizeUnderWay {
    fn drop(&mut self) {
        // SAFETY: nothing reaches the nodes or the tables any more; each is freed once.
        unsafe {
            for &p in &self.nodes {
                drop(Box::from_raw(p));
            }
            drop(Box::from_raw(self.root.load(Relaxed)));
            drop(Box::from_raw(self.new));
        }
    }
}

#[test]
fn a_table_shrunk_away_counts_its_lines_and_the_entries_it_lost() {
    let node = std::mem::size_of::<Node<u64, u64>>();
    let old = Table::<u64, u64>::new(64).made_for(200);
    assert_eq!(old.shrunk_away(10), None, "not moved yet");
    old.note_moved_into(&Table::new(128));
    assert_eq!(old.shrunk_away(10), None, "a grow frees no entries");
    old.note_moved_into(&Table::new(16));
    assert_eq!(old.shrunk_away(10), Some(old.bytes() + 190 * node));
    // More entries now than when it was made: only its lines count.
    assert_eq!(old.shrunk_away(300), Some(old.bytes()));
}

/// A clear that reaches the table being grown into leaves a bucket alone while its mover
/// fills it without its lock (the source not yet `MOVED`), and empties it once the source
/// has moved. Emptying it meanwhile raced the mover's unlocked stores (and debug builds
/// then assert in the mover's next fill that nobody reached the bucket).
#[test]
fn a_clear_leaves_a_bucket_to_the_mover_filling_it() {
    // Two entries of the old table's bucket 0, both for bucket 0 of the larger table.
    let mut resize = ResizeUnderWay::start(2, [0, 4], 4);
    let (old, new) = (resize.old(), resize.successor());
    let source = old.bucket(0);
    // SAFETY: the source is alive and no other thread changes it.
    let nodes: Vec<_> = unsafe { occupied(source) }.map(|(_, _, p)| p).collect();
    assert_eq!(nodes.len(), 2);
    let fill = |p: *mut Node<u64, u64>| {
        // SAFETY: a node of the source, which this thread holds locked (below).
        let hash = unsafe { (*p).hash };
        // SAFETY: `new` is larger than `old`, and its bucket 0's one source is locked.
        unsafe {
            new.fill(
                new.bucket(0),
                p,
                line::tag_of(hash),
                hint::of_hash(hash, new.bits()),
            )
        };
    };
    // The mover: the source locked, its first entry filled into the larger table.
    let lock = source.lock();
    fill(nodes[0]);
    let mut out = Vec::new();
    // SAFETY: both tables alive; `old.next` is `new`.
    unsafe { detach_all(new, Some(old), &mut out) };
    assert!(
        out.is_empty(),
        "a bucket whose source has not moved was emptied"
    );
    // The mover goes on, undisturbed, and marks the source moved.
    fill(nodes[1]);
    lock.change_marking(MOVED, || {});
    drop(lock);
    // SAFETY: as above.
    unsafe { detach_all(new, Some(old), &mut out) };
    out.sort();
    let mut expected = nodes.clone();
    expected.sort();
    assert_eq!(
        out, expected,
        "once its source moved, the bucket is emptied"
    );
    resize.nodes = nodes;
}

/// A clear that reaches the smaller table being shrunk into takes only the entries whose
/// source bucket has moved: one placed while its source is still being moved is still in
/// the source's lanes, where a lookup that starts after its retirement would read it.
#[test]
fn a_clear_leaves_an_entry_whose_source_has_not_moved_in_a_smaller_table() {
    // Entries of the old table's buckets 0 and 2, both for bucket 0 of the smaller table.
    let mut resize = ResizeUnderWay::start(4, [0, 2], 2);
    let (old, new) = (resize.old(), resize.successor());
    // SAFETY: the buckets are alive and no other thread changes them.
    let node_of = |index: usize| unsafe { occupied(old.bucket(index)) }.next().unwrap().2;
    let (x, w) = (node_of(0), node_of(2));
    let place = |p: *mut Node<u64, u64>| {
        // SAFETY: a node of a source bucket this thread holds locked (below).
        let hash = unsafe { (*p).hash };
        let target = new.bucket(new.index(hash));
        let lock = target.lock();
        // SAFETY: `target` is `new`'s bucket for the node's hash, locked here.
        unsafe {
            new.place(
                target,
                &lock,
                p,
                line::tag_of(hash),
                hint::of_hash(hash, new.bits()),
            )
        };
    };
    // Bucket 2 moves whole; bucket 0's mover has placed its entry but not yet marked it.
    let lock = old.bucket(2).lock();
    place(w);
    lock.change_marking(MOVED, || {});
    drop(lock);
    let lock = old.bucket(0).lock();
    place(x);
    let mut out = Vec::new();
    // SAFETY: both tables alive; `old.next` is `new`.
    unsafe { detach_all(new, Some(old), &mut out) };
    assert_eq!(out, [w], "only the entry whose source moved");
    lock.change_marking(MOVED, || {});
    drop(lock);
    // SAFETY: as above.
    unsafe { detach_all(new, Some(old), &mut out) };
    assert_eq!(out, [w, x], "the rest once its source moved");
    resize.nodes = vec![x, w];
}

#[test]
fn the_writers_counts_share_no_cache_line_with_what_lookups_read() {
    type T = Table<u64, u64>;
    let counts = span_of!(T, counts);
    for read in [span_of!(T, mask), span_of!(T, buckets)] {
        assert!(on_lines_apart::<T>(counts, read));
    }
}
