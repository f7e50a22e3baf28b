//! The bucket tables of [`RcuHashMap`](super::RcuHashMap) and every operation on them that
//! changes a bucket: lookups, the writers' locate–lock–validate step, placing, replacing and
//! clearing an entry. Moving buckets between tables is in `moves.rs`. The essay in [the
//! module docs](super) says why each step is correct; the comments here point at its
//! numbered claims.
//!
//! Nothing in this file knows about grace periods. Every function that reads nodes or tables
//! is `unsafe` with the same contract: the caller keeps whatever it may reach alive (the map
//! holds a read-side critical section of its domain; the loom models simply never free before
//! the end of the model), and the caller takes ownership of every node or table a function
//! hands back as unlinked (the map retires them).

use super::hint;
use super::line::{self, Lanes, Line, LineLock, CHANGING, LANES, MOVED};
pub(crate) use super::node::Node;
use super::overflow::Overflows;
use crate::sync::fork;
use crate::sync::{AtomicPtr, AtomicUsize};
use crossbeam_utils::CachePadded;
use std::ptr;
// Not `crate::sync`'s: a hint outside the protocol, which the loom models need not see.
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// One bucket array, and, while a resize is under way, the link to its successor.
pub(crate) struct Table<K, V> {
    mask: usize,
    buckets: line::Lines<Node<K, V>>,
    /// The table this one is being moved into (null when no resize is under way). Set once,
    /// before any bucket is moved (claim 3).
    pub(crate) next: AtomicPtr<Table<K, V>>,
    /// What writers count, on cache lines of their own.
    pub(crate) counts: CachePadded<Counts>,
    /// Where the buckets' overflow lines come from (`overflow.rs`).
    overflow: Overflows<Node<K, V>>,
    /// The map's entry count when this table was made, and whether it was moved into a
    /// smaller one: hints for `trim`, outside the map's protocol (see [`Table::shrunk_away`]).
    entries_when_made: usize,
    shrunk_away: AtomicBool,
    /// The entry counts outside which the map's policy may want another size (grow past
    /// `.0`, shrink below `.1`): a write compares the count with these and looks at the policy
    /// only beyond them. Hints: set when the table is made, and refreshed when the resize
    /// that made it finishes and when the map's floor changes (`RcuHashMap::refresh_limits`).
    limits: (AtomicUsize, AtomicUsize),
}

/// What the writers of a table count. Every lookup reads the table's `mask` and `buckets`; a
/// count updated on their cache line would take that line from every reader's cache at each
/// update (for `claimed` and `finished`, every run of buckets a resize moves), so the counts
/// have lines of their own.
pub(crate) struct Counts {
    /// Buckets handed to movers so far (may run past `len`).
    pub(crate) claimed: AtomicUsize,
    /// Buckets whose move has finished.
    pub(crate) finished: AtomicUsize,
}

/// See [`Table::limits`]: grow past `above` entries, shrink below `below`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) above: usize,
    pub(crate) below: usize,
}

impl Limits {
    /// Never resize (tables of the loom models).
    pub(crate) const NEVER: Limits = Limits {
        above: usize::MAX,
        below: 0,
    };
}

impl<K, V> Table<K, V> {
    /// A table of `buckets` buckets (a power of two) that never asks to be resized.
    #[cfg(test)]
    pub(crate) fn new(buckets: usize) -> Box<Self> {
        Self::with_limits(buckets, Limits::NEVER)
    }

    /// A table of `buckets` buckets (a power of two).
    pub(crate) fn with_limits(buckets: usize, limits: Limits) -> Box<Self> {
        debug_assert!(buckets.is_power_of_two());
        Box::new(Table {
            mask: buckets - 1,
            buckets: line::lines(buckets),
            next: AtomicPtr::new(ptr::null_mut()),
            counts: CachePadded::new(Counts {
                claimed: AtomicUsize::new(0),
                finished: AtomicUsize::new(0),
            }),
            overflow: Overflows::for_table(buckets),
            entries_when_made: 0,
            shrunk_away: AtomicBool::new(false),
            limits: (
                AtomicUsize::new(limits.above),
                AtomicUsize::new(limits.below),
            ),
        })
    }

    /// Whether a map of `len` entries is outside this table's limits.
    #[inline(always)]
    pub(crate) fn outside_limits(&self, len: usize) -> bool {
        len > self.limits.0.load(Relaxed) || len < self.limits.1.load(Relaxed)
    }

    /// New limits (the map's floor as it is now).
    pub(crate) fn set_limits(&self, limits: Limits) {
        self.limits.0.store(limits.above, Relaxed);
        self.limits.1.store(limits.below, Relaxed);
    }

    /// The limits set now.
    #[cfg(test)]
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            above: self.limits.0.load(Relaxed),
            below: self.limits.1.load(Relaxed),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.mask + 1
    }

    /// Note that the map held `entries` entries when this table was made (see
    /// [`Table::shrunk_away`]).
    pub(crate) fn made_for(mut self: Box<Self>, entries: usize) -> Box<Self> {
        self.entries_when_made = entries;
        self
    }

    /// If this table was moved into a smaller one, at least how many bytes the map freed
    /// between this table's making and now, when it holds `entries` entries: this table's
    /// lines, and the nodes of the entries it lost (a lower bound: entries inserted and
    /// removed again while this table was current do not count). Set by the thread that
    /// finished the resize, for that thread, which retires the table (the successor may be
    /// freed by then, so it is not looked at again).
    pub(crate) fn shrunk_away(&self, entries: usize) -> Option<usize> {
        self.shrunk_away.load(Relaxed).then(|| {
            let lost = self.entries_when_made.saturating_sub(entries);
            self.bytes() + lost * std::mem::size_of::<Node<K, V>>()
        })
    }

    /// The finisher of this table's resize into `new` notes whether it was a shrink (see
    /// [`Table::shrunk_away`]).
    pub(crate) fn note_moved_into(&self, new: &Table<K, V>) {
        self.shrunk_away.store(new.len() < self.len(), Relaxed);
    }

    /// `log2(len)`.
    pub(crate) fn bits(&self) -> u32 {
        self.len().trailing_zeros()
    }

    #[inline(always)]
    pub(crate) fn index(&self, hash: u64) -> usize {
        hash as usize & self.mask
    }

    /// Bucket `index` (its first line).
    #[inline(always)]
    pub(crate) fn bucket(&self, index: usize) -> &Line<Node<K, V>> {
        &self.buckets[index]
    }

    /// The bytes this table holds: what freeing it gives back.
    pub(crate) fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.len() * std::mem::size_of::<Line<Node<K, V>>>()
            + self.overflow.bytes()
    }

    /// Put `node` (whose tag is `tag`, and whose index hint in this table is `hint`) in a free
    /// lane of `bucket`, locked by `lock`, or in a new overflow line: one change of the bucket
    /// (claim 4), which also sets the lane's hint if the lane is in the first line. Published
    /// by `Release` stores: the slot before the tag, a new line's contents before the link to
    /// it.
    ///
    /// # Safety
    ///
    /// `bucket` is one of this table's, `lock` is its held lock, and `node` is a published or
    /// unpublished node that belongs in it.
    pub(crate) unsafe fn place(
        &self,
        bucket: &Line<Node<K, V>>,
        lock: &LineLock<'_, Node<K, V>>,
        node: *mut Node<K, V>,
        tag: u64,
        hint: u64,
    ) {
        // SAFETY: under the lock the bucket's lines are its own (caller's contract).
        match unsafe { free_lane(&bucket.lanes) } {
            Ok((line, lane)) => {
                let fill = || fill_lane(line, lane, node, tag);
                if ptr::eq(line, &bucket.lanes) {
                    lock.change_hinting(lane, hint, fill);
                } else {
                    lock.change(fill);
                }
            }
            Err(last) => {
                // Taken before the change begins: nothing can fail inside it. No reader reaches
                // the line before the link's `Release` store publishes it, filled.
                let fresh = self.overflow_line_with(node, tag);
                lock.change(|| last.overflow.store(fresh, Release));
            }
        }
    }

    /// [`place`](Self::place) without the bucket's lock, its sequence count or the thread's
    /// watches: for a bucket of a table larger than the one being moved into it, whose only
    /// source is the old bucket that the caller holds locked and marks `MOVED` after this
    /// (claim 3): no writer or reader reaches `bucket` through the old table before that mark,
    /// none starts from this table before it is current, and `clear` leaves the bucket alone
    /// until then ([`detach_all`]).
    ///
    /// # Safety
    ///
    /// As for [`place`](Self::place), with the old bucket's lock held instead of this one's,
    /// and this table larger than the old one.
    pub(crate) unsafe fn fill(
        &self,
        bucket: &Line<Node<K, V>>,
        node: *mut Node<K, V>,
        tag: u64,
        hint: u64,
    ) {
        bucket.debug_assert_unreached();
        // SAFETY: the mover alone writes the bucket (caller's contract).
        match unsafe { free_lane(&bucket.lanes) } {
            Ok((line, lane)) => {
                fill_lane(line, lane, node, tag);
                if ptr::eq(line, &bucket.lanes) {
                    bucket.set_hint_unlocked(lane, hint);
                }
            }
            Err(last) => last
                .overflow
                .store(self.overflow_line_with(node, tag), Release),
        }
    }

    /// A fresh overflow line of this table holding `node` (tag `tag`) in its first lane, to be
    /// linked (published) with a `Release` store.
    fn overflow_line_with(&self, node: *mut Node<K, V>, tag: u64) -> *mut Lanes<Node<K, V>> {
        let fresh = self.overflow.take();
        fresh.slots[0].store(node, Relaxed);
        fresh.tags.store(line::with_lane(0, 0, tag), Relaxed);
        ptr::from_ref(fresh).cast_mut()
    }
}

/// Put `node` with tag `tag` into the free lane `lane` of `line`: the pointer, then the tag
/// (both `Release`, claim 2).
fn fill_lane<N>(line: &Lanes<N>, lane: usize, node: *mut N, tag: u64) {
    line.slots[lane].store(node, Release);
    let tags = line.tags.load(Relaxed);
    line.tags.store(line::with_lane(tags, lane, tag), Release);
}

/// A free lane of `bucket` (a zero tag), or its last line if there is none.
///
/// # Safety
///
/// The caller holds the bucket's lock, and the bucket's lines are alive.
unsafe fn free_lane<N>(first: &Lanes<N>) -> Result<(&Lanes<N>, usize), &Lanes<N>> {
    let mut line = first;
    loop {
        let tags = line.tags.load(Relaxed);
        if let Some(lane) = (0..LANES).find(|&lane| line::lane_tag(tags, lane) == 0) {
            return Ok((line, lane));
        }
        let next = line.overflow.load(Relaxed);
        if next.is_null() {
            return Err(line);
        }
        // SAFETY: overflow lines live as long as their table.
        line = unsafe { &*next };
    }
}

/// Empty lane `lane` of `line` (under the bucket's lock, inside a change).
fn clear<N>(line: &Lanes<N>, lane: usize) {
    let tags = line.tags.load(Relaxed);
    line.tags.store(line::with_lane(tags, lane, 0), Release);
    line.slots[lane].store(ptr::null_mut(), Release);
}

/// An entry as a scan found it: its line, its lane and its node.
type Found<'a, K, V> = (&'a Lanes<Node<K, V>>, usize, *mut Node<K, V>);

/// The first node of `bucket` with `hash` whose key `matches`: its line, lane and address.
/// Only the nodes whose tag matches are read.
///
/// # Safety
///
/// The bucket and what it reaches stay alive for `'a`.
#[inline(always)]
unsafe fn scan<'a, K, V>(
    bucket: &'a Line<Node<K, V>>,
    hash: u64,
    matches: &mut impl FnMut(&K) -> bool,
) -> Option<Found<'a, K, V>> {
    let tag = line::tag_of(hash);
    let mut line = &bucket.lanes;
    loop {
        let mut lanes = line::candidates(line.tags.load(Acquire), tag);
        while lanes != 0 {
            let lane = line::lane_of(lanes);
            lanes &= lanes - 1;
            let p = line.slots[lane].load(Acquire);
            if !p.is_null() {
                // SAFETY: non-null slots point at published nodes (Acquire load, claim 2),
                // alive by the caller's contract.
                let node = unsafe { &*p };
                if node.hash == hash && matches(&node.key) {
                    return Some((line, lane, p));
                }
            }
        }
        let next = line.overflow.load(Acquire);
        if next.is_null() {
            return None;
        }
        // SAFETY: overflow lines are published (Release) full and live as long as the table.
        line = unsafe { &*next };
    }
}

/// Find the first node with `hash` whose key `matches`: in the key's bucket of `table`, or, if
/// that bucket has moved, of the table it moved into (claims 3 and 5).
///
/// # Safety
///
/// `table` and everything reachable from it stays alive for `'a`.
#[inline]
#[allow(clippy::needless_lifetimes)] // 'a is the contract's subject: keep it visible
pub(crate) unsafe fn find<'a, K, V>(
    table: &'a Table<K, V>,
    hash: u64,
    matches: impl FnMut(&K) -> bool,
) -> Option<&'a Node<K, V>> {
    // SAFETY: forwarded; a non-null result is a published node alive for 'a.
    unsafe { find_raw(table, hash, matches).as_ref() }
}

/// [`find`], returning the node pointer as loaded from its slot (with the provenance that
/// `get_mut` needs to hand out `&mut V`).
///
/// # Safety
///
/// As for [`find`].
#[inline]
pub(crate) unsafe fn find_raw<K, V>(
    mut table: &Table<K, V>,
    hash: u64,
    mut matches: impl FnMut(&K) -> bool,
) -> *mut Node<K, V> {
    loop {
        let bucket = table.bucket(table.index(hash));
        if bucket.seq() & MOVED == 0 {
            // SAFETY: forwarded. An unmoved bucket holds every entry with its hash (claim 3).
            return unsafe { scan(bucket, hash, &mut matches) }.map_or(ptr::null_mut(), |f| f.2);
        }
        // SAFETY: `MOVED` is set only after `next` was installed (claim 3), and a successor
        // table is alive as long as its predecessor is reachable.
        table = unsafe { &*table.next.load(Acquire) };
    }
}

/// Where a key is (or would be inserted): the bucket that owns the hash, the state it had when
/// the walk began, and the lane that holds the matching node; and the process's fork
/// generation when the walk began (see `after_fork`: user code run since, `Eq` in the walk or
/// a write's closure after it, may have forked).
pub(crate) struct Spot<K, V> {
    table: *const Table<K, V>,
    index: usize,
    state: u64,
    generation: u64,
    line: *const Lanes<Node<K, V>>,
    lane: usize,
    pub(crate) found: *mut Node<K, V>,
}

impl<K, V> Spot<K, V> {
    fn bucket(&self) -> &Line<Node<K, V>> {
        // SAFETY: `table` was reached by `locate`, whose caller keeps it alive while the spot
        // is used (same contract).
        unsafe { (*self.table).bucket(self.index) }
    }

    /// The bucket's identity (its first line's address), as `own_writes` watches it.
    pub(crate) fn bucket_id(&self) -> *const () {
        std::ptr::from_ref(self.bucket()).cast()
    }

    /// Whether the bucket is unchanged since the walk began: then the walk saw it as it still
    /// is, and a key it did not find is absent (claim 4). No lock needed.
    pub(crate) fn unchanged(&self) -> bool {
        self.bucket().seq() == self.state
    }

    /// Lock the bucket and check nothing changed since the walk; `None` means walk again. A
    /// spot from before a fork is stale too, and is not locked at all: in the child the
    /// bucket's lock may be held by a thread the child does not have (see `after_fork`).
    pub(crate) fn lock(&self) -> Option<Locked<'_, K, V>> {
        if fork::generation() != self.generation {
            return None;
        }
        let lock = self.bucket().lock();
        (lock.seq() == self.state).then_some(Locked { spot: self, lock })
    }
}

/// The locked bucket of a [`Spot`] that was validated: it is exactly what the walk saw.
pub(crate) struct Locked<'s, K, V> {
    spot: &'s Spot<K, V>,
    lock: LineLock<'s, Node<K, V>>,
}

impl<K, V> Locked<'_, K, V> {
    /// The slot that holds the found node.
    fn slot(&self) -> &AtomicPtr<Node<K, V>> {
        // SAFETY: the spot found a node (callers' contract), so `line` is one of the bucket's
        // lines, alive as long as its table.
        unsafe { &(*self.spot.line).slots[self.spot.lane] }
    }

    /// Put `node` in the bucket (a free lane, or a new overflow line).
    ///
    /// # Safety
    ///
    /// `node` is an unpublished node from [`Node::new`] with the bucket's hash.
    pub(crate) unsafe fn insert(&self, node: *mut Node<K, V>) {
        // SAFETY: the node is ours until published.
        let hash = unsafe { (*node).hash };
        // SAFETY: `table` is alive (as in `Spot::bucket`); we hold the bucket's lock.
        unsafe {
            let table = &*self.spot.table;
            let hint = hint::of_hash(hash, table.bits());
            table.place(
                self.spot.bucket(),
                &self.lock,
                node,
                line::tag_of(hash),
                hint,
            );
        }
    }

    /// Put `node` in place of the found node, which is returned unlinked.
    ///
    /// # Safety
    ///
    /// As for [`insert`](Self::insert), and the spot found a node.
    pub(crate) unsafe fn replace(&self, node: *mut Node<K, V>) -> *mut Node<K, V> {
        // Same key, same hash: the lane's tag stays.
        self.lock.change(|| self.slot().store(node, Release));
        self.spot.found
    }

    /// Empty the found node's lane and return the node.
    ///
    /// # Safety
    ///
    /// The spot found a node.
    pub(crate) unsafe fn unlink(&self) -> *mut Node<K, V> {
        // SAFETY: the spot found a node, so `line` is one of the bucket's lines, alive.
        let line = unsafe { &*self.spot.line };
        self.lock.change(|| clear(line, self.spot.lane));
        self.spot.found
    }
}

/// The writers' walk: from `current`, follow `MOVED` buckets to the table that owns `hash`
/// (claim 5), and find the first node whose key `matches` and the lane that holds it.
/// `matches` (user code) runs here, with no lock held.
///
/// # Safety
///
/// As for [`find`].
pub(crate) unsafe fn locate<K, V>(
    current: &Table<K, V>,
    hash: u64,
    matches: &mut impl FnMut(&K) -> bool,
) -> Spot<K, V> {
    let generation = fork::generation();
    let mut table = current;
    loop {
        let index = table.index(hash);
        let bucket = table.bucket(index);
        let state = bucket.seq();
        if state & CHANGING != 0 {
            bucket.wait_for_change();
            continue;
        }
        if state & MOVED != 0 {
            let next = table.next.load(Acquire);
            debug_assert!(!next.is_null(), "a moved bucket has a next table");
            // SAFETY: as in `find_raw`.
            table = unsafe { &*next };
            continue;
        }
        // SAFETY: forwarded.
        let (line, lane, found) = match unsafe { scan(bucket, hash, matches) } {
            Some((line, lane, found)) => (line as *const _, lane, found),
            None => (ptr::null(), 0, ptr::null_mut()),
        };
        return Spot {
            table,
            index,
            state,
            generation,
            line,
            lane,
            found,
        };
    }
}

/// The lanes of `bucket` (its lines in order) that hold a node, with the node: the lanes whose
/// tag is set (`Acquire`, so that their slots are visible) and whose slot is not null (a lane
/// emptied meanwhile).
///
/// # Safety
///
/// The bucket's lines stay alive while the iterator is used.
pub(crate) unsafe fn occupied<'a, N>(
    bucket: &'a Line<N>,
) -> impl Iterator<Item = (&'a Lanes<N>, usize, *mut N)> + 'a {
    let mut line: *const Lanes<N> = &bucket.lanes;
    let mut tags = bucket.lanes.tags.load(Acquire);
    let mut lane = 0;
    std::iter::from_fn(move || loop {
        // SAFETY: null ends the walk; otherwise a line of the bucket (caller's contract).
        let l = unsafe { line.as_ref() }?;
        if lane == LANES {
            line = l.overflow.load(Acquire);
            // SAFETY: as above.
            tags = unsafe { line.as_ref() }.map_or(0, |l| l.tags.load(Acquire));
            lane = 0;
            continue;
        }
        lane += 1;
        if line::lane_tag(tags, lane - 1) != 0 {
            let p = l.slots[lane - 1].load(Acquire);
            if !p.is_null() {
                return Some((l, lane - 1, p));
            }
        }
    })
}

/// Remove exactly `target` (found by address, with no user code) if it is still in the map.
///
/// # Safety
///
/// As for [`find`]; `target` has the given hash.
pub(crate) unsafe fn unlink_exact<K, V>(
    current: &Table<K, V>,
    hash: u64,
    target: *const Node<K, V>,
) -> Option<*mut Node<K, V>> {
    let mut table = current;
    loop {
        let bucket = table.bucket(table.index(hash));
        let lock = bucket.lock();
        if lock.seq() & MOVED != 0 {
            drop(lock);
            // SAFETY: as in `find_raw`.
            table = unsafe { &*table.next.load(Acquire) };
            continue;
        }
        // SAFETY: under the lock the bucket is its own (claim 1), and alive.
        let (line, lane, p) = unsafe { occupied(bucket) }.find(|&(_, _, p)| ptr::eq(p, target))?;
        lock.change(|| clear(line, lane));
        return Some(p);
    }
}

/// Empty every bucket of `table` that is still its own (not moved), collecting the nodes.
/// `from` is the table whose `next` is `table`, when `clear`'s walk (the current table, then
/// each newer one) reached `table` as a successor.
///
/// In a successor, only the entries whose bucket in `from` is `MOVED` are taken, as writers
/// reach them (claim 3). An entry placed while its source is not yet `MOVED` is still in the
/// source's lanes, where lookups find it: retired now, it could be freed while a lookup that
/// starts later still reads it there. Leaving it loses nothing: the walk passed that source
/// before (`MOVED` is set once, for good; a walk that met the source locked waited), emptied
/// it then, and what it holds now was inserted after that, as entries inserted during a
/// `clear` may stay. The `Acquire` load that sees `MOVED` makes the mover's stores visible.
/// A successor larger than `from` is filled without its buckets' locks (each has one source,
/// whose mover alone writes it until the source is `MOVED`), so such a bucket is not even
/// locked before then; into a table no larger, movers place entries under the bucket's lock.
///
/// # Safety
///
/// As for [`find`]; `from`, when given, is the table whose `next` is `table`.
pub(crate) unsafe fn detach_all<K, V>(
    table: &Table<K, V>,
    from: Option<&Table<K, V>>,
    out: &mut Vec<*mut Node<K, V>>,
) {
    let moved = |from: &Table<K, V>, index: usize| from.bucket(index).seq() & MOVED != 0;
    let grown_from = from.filter(|from| table.bits() > from.bits());
    for (index, bucket) in table.buckets.iter().enumerate() {
        if bucket.seq() & MOVED != 0 || bucket.is_empty() {
            continue; // moved for good, or empty (entries inserted meanwhile may stay)
        }
        if grown_from.is_some_and(|from| !moved(from, index & from.mask)) {
            continue; // its mover may be filling it (above)
        }
        let lock = bucket.lock();
        if lock.seq() & MOVED != 0 {
            continue;
        }
        // In a successor no larger, entries still on their way are left to their movers.
        let ours = |p: *mut Node<K, V>| match from {
            // SAFETY: a node of the locked bucket, alive.
            Some(from) if grown_from.is_none() => moved(from, from.index(unsafe { (*p).hash })),
            _ => true,
        };
        // SAFETY: under the lock the bucket is ours to change, and alive.
        let mut entries = unsafe { occupied(bucket) }
            .filter(|&(_, _, p)| ours(p))
            .peekable();
        if entries.peek().is_none() {
            // Overflow lines whose lanes were all emptied, or only entries still on their way:
            // nothing to change, and a change would make every write of the bucket that is
            // between its walk and its lock walk again for nothing.
            continue;
        }
        lock.change(|| {
            for (line, lane, p) in entries {
                out.push(p);
                clear(line, lane);
            }
        });
    }
}

/// Every node reachable from `current`, each once: with exclusive access no move is under
/// way, so each node is in exactly one unmoved bucket of one table (a moved bucket's lanes
/// still point at the nodes it copied, which live on in the next table). In a process
/// `forked` since the map's threads wrote it, a move may have been left halfway, with some
/// nodes in two tables: then the repeats are dropped (see `after_fork`).
///
/// # Safety
///
/// Exclusive access to the map for as long as the pointers are used.
pub(crate) unsafe fn exclusive_nodes<K, V>(
    current: *mut Table<K, V>,
    forked: bool,
) -> Vec<*mut Node<K, V>> {
    let mut nodes = Vec::new();
    let mut table = current as *const Table<K, V>;
    while !table.is_null() {
        // SAFETY: tables reachable from the root are alive while the map is.
        let t = unsafe { &*table };
        for bucket in t.buckets.iter().filter(|b| b.seq() & MOVED == 0) {
            // SAFETY: as above; the bucket's lines live as long as its table.
            nodes.extend(unsafe { occupied(bucket) }.map(|(_, _, p)| p));
        }
        table = t.next.load(Relaxed);
    }
    if forked {
        nodes.sort_unstable();
        nodes.dedup();
    }
    nodes
}

/// Take every node reachable from `current`, each once (owned by the caller from here, as
/// from [`Node::new`]), and free the tables (whose drop frees only their lines): what dropping
/// or consuming the map does.
///
/// # Safety
///
/// Nobody else can reach the map any more (`&mut` access or ownership), and the root is not
/// used again.
pub(crate) unsafe fn take_all<K, V>(
    current: *mut Table<K, V>,
    forked: bool,
) -> Vec<*mut Node<K, V>> {
    // SAFETY: exclusive access (caller's contract).
    let nodes = unsafe { exclusive_nodes(current, forked) };
    let mut table = current;
    while !table.is_null() {
        // SAFETY: tables reachable from the root are owned by the map and freed once here.
        let t = unsafe { Box::from_raw(table) };
        table = t.next.load(Relaxed);
    }
    nodes
}

#[cfg(all(test, not(rcukit_loom)))]
mod tests;
