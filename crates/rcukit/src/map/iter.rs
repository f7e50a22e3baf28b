//! Iteration over an [`RcuHashMap`](super::RcuHashMap): under a guard while writers and
//! resizes run ([`Iter`]), and with exclusive access ([`IterMut`], [`IntoIter`]).
//!
//! # How a concurrent iteration walks
//!
//! [`Iter`] moves a *cursor* through the space of bit-reversed hashes, from 0 to the end, in
//! *steps*. Bit-reversed order is the order in which a table of any power-of-two size lays
//! out its buckets' hash classes: bucket `i` of a table with `2^k` buckets holds the hashes
//! whose low `k` bits are `i`, which reversed are one contiguous *class* of the reversed
//! space (its top `k` bits are `i` reversed). A class of a smaller table is the union of
//! adjacent classes of a larger one. So a position in the reversed space means the same in
//! every table, and an iteration can change tables between steps without losing its place.
//!
//! A step loads the map's current table `R` (and its successor `N` when a resize is under
//! way), takes the class containing the cursor at the coarser of the two sizes, walks every
//! bucket of `R`, then of `N`, then of any newer table, whose class overlaps the part of that
//! class at or after the cursor, yields the nodes whose reversed hash lies there, and moves
//! the cursor to the class's end.
//!
//! # Why each entry present throughout is yielded exactly once
//!
//! A step records, for each table it walks, which of the range's buckets in that table it
//! found unmoved: it *took* those buckets' entries from that table. In a later table of the
//! same step, a node whose bucket an earlier table took is skipped. So an entry's hash class
//! is taken from exactly one table per step: the first whose bucket for it the step found
//! unmoved.
//!
//! *At most once:* a node is yielded only in the step whose range `[cursor, end)` holds its
//! reversed hash, and the steps' ranges are disjoint and increasing. Within a step, a hash
//! class comes from one table, and from one bucket there (a hash has one bucket per table),
//! whose lanes the walk reads once each; an entry keeps its lane, and a replacement stores the
//! new node into the old one's lane (claim 1 of the [map's essay](super)). So an entry present
//! throughout, and also one replaced while the step walked, is met once: a node moved while
//! the step walked (met in its old bucket, unmoved then, and again in the new table), or
//! moved and then replaced in the new table, is skipped there. Without the record, such a step
//! yielded the key twice: the loom model with the record left out finds the moved node met
//! twice, and a unit test replays the replacement.
//!
//! *At least once:* take a node `X` present throughout, and the step whose range holds its
//! reversed hash. When that step loaded `R`, the resize before `R` had finished (a table
//! becomes current only once every bucket of its predecessor moved, claim 6), so `X` was in
//! `R`, or in `N` if `R`'s bucket had already moved. The step walks `R`'s buckets of the
//! range, reading each bucket's state (`Acquire`) before its lanes. If `X`'s bucket was not
//! `MOVED`, the walk meets `X` in its lane, which a move leaves as it was (claims 1 and 3),
//! and takes it: no earlier table of the step took that class. If it was, the step took
//! nothing of that class from `R`, and the load that saw `MOVED` makes the successor table and
//! `X` in it visible (claim 3). The step loads each table's successor only after walking that
//! table's buckets, so by induction down the tables it meets `X` in the first table whose
//! bucket for it was unmoved, and takes it there. Entries inserted or removed during the
//! iteration may or may not appear (a key removed and inserted again is two entries, and may
//! appear twice); an entry whose value was replaced appears once, with its old value or its
//! new one.
//!
//! # Why an iteration costs what it visits
//!
//! A step walks at most the buckets of its range in `R` and `N` (the coarser table has one
//! bucket there, the finer one as many as the ratio of sizes), plus those of tables whose
//! resize *began during that step* (a table gets a successor only once it is current, so a
//! step never follows a chain of resizes that began before it). So each (table, bucket) is
//! walked by one step, with one exception: a table that appears in the middle of a step
//! *smaller* than the step's class (a shrink that began during the step) has one bucket
//! covering more than the step's range, and the next step walks that bucket once more for
//! the rest. That is at most one extra bucket per resize that begins while a step runs.
//! Resizes that happened before a step cost it nothing: the step starts from the current
//! table, not from the one the iteration started in. (An earlier design walked from the
//! first table down every successor, and each grow multiplied its walks while each shrink
//! failed to merge them: exponential in the number of resizes during one iteration.)
//! `rhashtable` instead restarts a walk when the table changes under it, which would yield
//! entries twice; the cursor keeps "exactly once".

use super::line::MOVED;
use super::node::Batch;
use super::table::{self, Node, Table};
use crate::sync::AtomicPtr;
use std::fmt;
use std::iter::FusedIterator;
use std::marker::PhantomData;
use std::sync::atomic::Ordering::Acquire;

/// The part of the bit-reversed hash space one step covers: `[from, end)`, where `end` is
/// `None` for the end of the space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    from: u64,
    end: Option<u64>,
}

impl Range {
    /// From `cursor` to the end of the class of a table with `2^bits` buckets that holds it.
    fn step(cursor: u64, bits: u32) -> Range {
        let end = match bits {
            0 => None,
            _ => (cursor >> (64 - bits))
                .checked_add(1)
                .and_then(|top| top.checked_shl(64 - bits))
                .filter(|&end| end != 0),
        };
        Range { from: cursor, end }
    }

    fn holds(&self, reversed: u64) -> bool {
        reversed >= self.from && self.end.map_or(true, |end| reversed < end)
    }

    /// The class (the top `bits` bits) of reversed hash `reversed` in a table with `2^bits`
    /// buckets.
    fn class(reversed: u64, bits: u32) -> u64 {
        if bits == 0 {
            0
        } else {
            reversed >> (64 - bits)
        }
    }

    /// The buckets of a table with `2^bits` buckets whose class overlaps this range, in the
    /// order of their classes (from the class of `from`).
    fn buckets(&self, bits: u32) -> impl Iterator<Item = usize> {
        let first = Range::class(self.from, bits);
        let last = Range::class(self.end.map_or(u64::MAX, |end| end - 1), bits);
        // The bucket of class `t` is `t` reversed in `bits` bits.
        (first..=last).map(move |t| {
            if bits == 0 {
                0
            } else {
                (t.reverse_bits() >> (64 - bits)) as usize
            }
        })
    }
}

/// Iterator over the entries of an [`RcuHashMap`](super::RcuHashMap) under a guard; see
/// [`RcuHashMap::iter`](super::RcuHashMap::iter), which says what it yields.
pub struct Iter<'g, K, V> {
    root: &'g AtomicPtr<Table<K, V>>,
    /// Where the next step starts in the bit-reversed hash space; `None` once done.
    cursor: Option<u64>,
    /// The nodes of the current step, yielded from the back.
    gathered: Vec<&'g Node<K, V>>,
    /// The tables the current step has walked (module docs: "exactly once").
    took: Vec<Took>,
    /// For each table in `took`, one flag per bucket of the step's range: found unmoved (its
    /// entries were taken from that table).
    unmoved: Vec<bool>,
    /// (table, bucket) walks so far (for the unit tests of the bound).
    #[cfg(test)]
    walks: usize,
    /// The loom model's broken variant: a step does not skip, in a later table, the classes an
    /// earlier table took.
    #[cfg(rcukit_loom)]
    pub(crate) busted_no_record: bool,
}

#[cfg(test)]
thread_local! {
    /// Run after each table a step of this thread walks (for the unit test that changes the
    /// map there).
    static BETWEEN_TABLES: std::cell::Cell<Option<fn()>> = const { std::cell::Cell::new(None) };
}

/// A table a step walked: its size, and where its flags start in [`Iter::unmoved`] (the flag
/// of class `c` is at `at + c - first`).
struct Took {
    bits: u32,
    first: u64,
    at: usize,
}

impl<'g, K, V> Iter<'g, K, V> {
    /// # Safety
    ///
    /// Every table loaded from `root` during `'g`, and everything reachable from it, stays
    /// alive for `'g` (the caller holds a read-side critical section of the map's domain).
    pub(crate) unsafe fn new(root: &'g AtomicPtr<Table<K, V>>) -> Self {
        Iter {
            root,
            cursor: Some(0),
            gathered: Vec::new(),
            took: Vec::new(),
            unmoved: Vec::new(),
            #[cfg(test)]
            walks: 0,
            #[cfg(rcukit_loom)]
            busted_no_record: false,
        }
    }

    /// One step (see the module docs): gather the nodes of the range after the cursor.
    fn step(&mut self, cursor: u64) {
        // SAFETY: the root is never null, and tables loaded from it live for 'g
        // (constructor's contract).
        let current: &'g Table<K, V> = unsafe { &*self.root.load(Acquire) };
        // SAFETY: a successor table is alive as long as its predecessor is reachable.
        let bits = match unsafe { current.next.load(Acquire).as_ref() } {
            Some(next) => current.bits().min(next.bits()),
            None => current.bits(),
        };
        let range = Range::step(cursor, bits);
        self.took.clear();
        self.unmoved.clear();
        let mut table = current;
        loop {
            let bits = table.bits();
            let took = Took {
                bits,
                first: Range::class(range.from, bits),
                at: self.unmoved.len(),
            };
            for b in range.buckets(bits) {
                let unmoved = self.walk(table, b, range);
                self.unmoved.push(unmoved);
            }
            self.took.push(took);
            #[cfg(test)]
            if let Some(between) = BETWEEN_TABLES.with(|b| b.get()) {
                between();
            }
            // Loaded after the walks above (the induction of the module docs).
            let next = table.next.load(Acquire);
            if next.is_null() {
                break;
            }
            // SAFETY: as above.
            table = unsafe { &*next };
        }
        self.cursor = range.end;
    }

    /// Gather the nodes of `range` in bucket `b` of `table` that no table walked before in
    /// this step took, unless the bucket has moved (its entries are then in the newer tables,
    /// which the step walks next). Whether the bucket was unmoved (its entries taken here).
    fn walk(&mut self, table: &'g Table<K, V>, b: usize, range: Range) -> bool {
        #[cfg(test)]
        {
            self.walks += 1;
        }
        let bucket = table.bucket(b);
        if bucket.seq() & MOVED != 0 {
            return false;
        }
        // SAFETY: the bucket's lines live as long as its table, alive for 'g.
        for (_, _, p) in unsafe { table::occupied(bucket) } {
            // SAFETY: published node (Acquire), alive for 'g (constructor's contract).
            let node: &'g Node<K, V> = unsafe { &*p };
            let reversed = node.hash.reverse_bits();
            if range.holds(reversed) && !self.taken_before(reversed) {
                self.gathered.push(node);
            }
        }
        true
    }

    /// Whether a table walked before the current one in this step took the class of
    /// `reversed` (found its bucket unmoved).
    fn taken_before(&self, reversed: u64) -> bool {
        #[cfg(rcukit_loom)]
        if self.busted_no_record {
            return false;
        }
        self.took.iter().any(|t| {
            let offset = (Range::class(reversed, t.bits) - t.first) as usize;
            self.unmoved[t.at + offset]
        })
    }

    /// The next node (for `retain`, which unlinks it by address).
    pub(crate) fn next_node(&mut self) -> Option<&'g Node<K, V>> {
        loop {
            if let Some(node) = self.gathered.pop() {
                return Some(node);
            }
            let cursor = self.cursor?;
            self.step(cursor);
        }
    }
}

impl<'g, K, V> Iterator for Iter<'g, K, V> {
    type Item = (&'g K, &'g V);

    fn next(&mut self) -> Option<Self::Item> {
        self.next_node().map(|node| (&node.key, &node.value))
    }
}

impl<K, V> FusedIterator for Iter<'_, K, V> {}

impl<K, V> fmt::Debug for Iter<'_, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Iter")
            .field("cursor", &self.cursor)
            .finish()
    }
}

/// The keys of an [`RcuHashMap`](super::RcuHashMap) under a guard; see
/// [`RcuHashMap::keys`](super::RcuHashMap::keys).
#[derive(Debug)]
pub struct Keys<'g, K, V>(pub(crate) Iter<'g, K, V>);

impl<'g, K, V> Iterator for Keys<'g, K, V> {
    type Item = &'g K;

    fn next(&mut self) -> Option<&'g K> {
        self.0.next_node().map(|node| &node.key)
    }
}

impl<K, V> FusedIterator for Keys<'_, K, V> {}

/// The values of an [`RcuHashMap`](super::RcuHashMap) under a guard; see
/// [`RcuHashMap::values`](super::RcuHashMap::values).
#[derive(Debug)]
pub struct Values<'g, K, V>(pub(crate) Iter<'g, K, V>);

impl<'g, K, V> Iterator for Values<'g, K, V> {
    type Item = &'g V;

    fn next(&mut self) -> Option<&'g V> {
        self.0.next_node().map(|node| &node.value)
    }
}

impl<K, V> FusedIterator for Values<'_, K, V> {}

/// Mutable iterator over an [`RcuHashMap`](super::RcuHashMap); see
/// [`RcuHashMap::iter_mut`](super::RcuHashMap::iter_mut).
pub struct IterMut<'a, K, V> {
    pub(crate) nodes: std::vec::IntoIter<*mut Node<K, V>>,
    pub(crate) _map: PhantomData<&'a mut (K, V)>,
}

impl<'a, K, V> Iterator for IterMut<'a, K, V> {
    type Item = (&'a K, &'a mut V);

    fn next(&mut self) -> Option<Self::Item> {
        let p = self.nodes.next()?;
        // SAFETY: the map is borrowed mutably for 'a and each node is yielded once.
        let node = unsafe { &mut *p };
        Some((&node.key, &mut node.value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.nodes.size_hint()
    }
}

impl<K, V> ExactSizeIterator for IterMut<'_, K, V> {}
impl<K, V> FusedIterator for IterMut<'_, K, V> {}

// SAFETY: an IterMut is a unique borrow of the map's entries: like `&mut (K, V)`.
unsafe impl<K: Send, V: Send> Send for IterMut<'_, K, V> {}
// SAFETY: sharing it shares nothing but the iterator position (`next` needs `&mut`).
unsafe impl<K: Sync, V: Sync> Sync for IterMut<'_, K, V> {}

/// Owning iterator over an [`RcuHashMap`](super::RcuHashMap)'s entries. The entries it has
/// not handed out are dropped with it, each key and value apart (a panicking `Drop` does not
/// keep the others from being dropped; the first panic goes on afterwards, unless the
/// iterator is dropped while another panic unwinds: then it stops there).
pub struct IntoIter<K, V> {
    /// Owned nodes (from `table::take_all`), each handed out or dropped once.
    pub(crate) nodes: std::vec::IntoIter<*mut Node<K, V>>,
    /// Ask for an allocator trim once every node is freed (see `trim`: "When"); cleared when
    /// asked.
    pub(crate) trim: bool,
}

impl<K, V> IntoIter<K, V> {
    /// Every node is freed: ask for the trim if one is due.
    fn all_freed(&mut self) {
        if std::mem::take(&mut self.trim) {
            super::trim::soon();
        }
    }
}

impl<K, V> Iterator for IntoIter<K, V> {
    type Item = (K, V);

    fn next(&mut self) -> Option<Self::Item> {
        let Some(node) = self.nodes.next() else {
            self.all_freed();
            return None;
        };
        // SAFETY: owned by the iterator, and taken out of it here, once.
        Some(unsafe { Node::into_parts(node) })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.nodes.size_hint()
    }
}

impl<K, V> Drop for IntoIter<K, V> {
    fn drop(&mut self) {
        // SAFETY: the nodes not handed out are owned by the iterator and given up here, once.
        drop(unsafe { Batch::new(self.nodes.by_ref().collect()) });
        self.all_freed();
    }
}

impl<K, V> ExactSizeIterator for IntoIter<K, V> {}
impl<K, V> FusedIterator for IntoIter<K, V> {}

// SAFETY: the iterator owns its entries (as a `Vec<(K, V)>`'s does): moving it to another
// thread moves them, and sharing it shares nothing (`next` needs `&mut`).
unsafe impl<K: Send, V: Send> Send for IntoIter<K, V> {}
// SAFETY: as above.
unsafe impl<K: Sync, V: Sync> Sync for IntoIter<K, V> {}

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use super::{Iter, Range, BETWEEN_TABLES};
    use crate::map::by_hand::{self, Root};
    use crate::map::table::{self, Node, Table};
    use crate::{Rcu, RcuHashMap};
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
    use std::sync::Mutex;

    /// A step takes key 1 from the bucket of the table it started in; then, before the step
    /// walks the successor, a resize moves that bucket into the successor and a writer
    /// replaces key 1 there. The step must not take key 1 again from the successor: the key
    /// is yielded once, with its old value (a step without its record of the buckets it took
    /// yielded both values).
    #[test]
    fn an_entry_moved_and_replaced_while_a_step_walks_is_yielded_once() {
        static ROOT: Root = Root::new(std::ptr::null_mut());
        static STEPS: AtomicUsize = AtomicUsize::new(0);
        static FREED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
        ROOT.store(Box::into_raw(Table::new(2)), Release);
        assert_eq!(by_hand::insert(&ROOT, 1, 1, 10), None);
        assert_eq!(by_hand::insert(&ROOT, 2, 2, 20), None);
        BETWEEN_TABLES.with(|b| {
            b.set(Some(|| {
                // Key 1 (hash 1: reversed, class 1 of 2) is in the second step.
                if STEPS.fetch_add(1, Relaxed) != 1 {
                    return;
                }
                // SAFETY: no other resize runs.
                let old = unsafe { by_hand::resize(&ROOT, 4) };
                let replaced = by_hand::insert(&ROOT, 1, 1, 11).expect("key 1 is in the new table");
                FREED
                    .lock()
                    .unwrap()
                    .extend([old as usize, replaced as usize]);
            }))
        });
        // SAFETY: nothing is freed before the iteration ends.
        let mut got: Vec<(u64, u64)> = unsafe { Iter::new(&ROOT) }.map(|(k, v)| (*k, *v)).collect();
        BETWEEN_TABLES.with(|b| b.set(None));
        got.sort_unstable();
        assert_eq!(got, [(1, 10), (2, 20)], "each key once");
        let [old_table, old_node] = FREED.lock().unwrap()[..] else {
            panic!("the step ran no resize")
        };
        // SAFETY: the iteration is over and nothing else uses the tables: the old table
        // (whose nodes moved on), the replaced node and the current table with its nodes.
        unsafe {
            drop(Box::from_raw(old_table as *mut Table<u64, u64>));
            drop(Box::from_raw(old_node as *mut Node<u64, u64>));
            drop(table::take_all(ROOT.load(Acquire), false));
        }
    }

    #[test]
    fn a_step_covers_one_class_of_the_coarser_table() {
        // 8 buckets: class of bucket 0b011 is reversed top bits 0b110.
        let r = Range::step(0b110 << 61, 3);
        assert_eq!(r.end, Some(0b111 << 61));
        assert_eq!(r.buckets(3).collect::<Vec<_>>(), [0b011]);
        // In a table of 16 buckets the same range is buckets 0b0011 and 0b1011.
        assert_eq!(r.buckets(4).collect::<Vec<_>>(), [0b0011, 0b1011]);
        // In a table of 4 buckets it lies in bucket 0b11.
        assert_eq!(r.buckets(2).collect::<Vec<_>>(), [0b11]);
        // A cursor in the middle of a class starts there; the last class ends the space.
        let mid = Range::step((0b111 << 61) + 5, 3);
        assert_eq!(mid.end, None);
        assert!(!mid.holds(0b111 << 61) && mid.holds(u64::MAX));
        assert_eq!(Range::step(0, 0).end, None);
        assert_eq!(Range::step(0, 0).buckets(0).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn an_iteration_walks_each_bucket_once_however_often_the_map_resized() {
        let rcu = Rcu::new();
        let map = RcuHashMap::with_domain(&rcu);
        for k in 0..1000u64 {
            map.pin().insert(k, k);
        }
        let g = rcu.read();
        let mut it = map.iter(&g);
        let mut seen = vec![*it.next().unwrap().0];
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..6 {
                    let start = map.buckets();
                    let mut k = 1 << 32;
                    while map.buckets() < 16 * start {
                        map.pin().insert(k, 0);
                        k += 1;
                    }
                    for j in 1 << 32..k {
                        map.pin().remove(&j);
                    }
                    for j in 0..256 {
                        map.pin().insert(j + (1 << 40), 0);
                        map.pin().remove(&(j + (1 << 40)));
                    }
                }
            });
        });
        while let Some(node) = it.next_node() {
            seen.push(node.key);
        }
        seen.retain(|&k| k < 1000);
        seen.sort_unstable();
        assert_eq!(seen, (0..1000).collect::<Vec<_>>());
        // The steps after the resizes walk the current table only, one bucket each.
        let buckets = map.buckets();
        assert!(
            it.walks <= 2 * buckets + 64,
            "{} walks for {buckets} buckets",
            it.walks
        );
    }
}
