//! The bucket tables of [`RcuHashMap`](super::RcuHashMap) and every operation on them that
//! changes links: lookup walks, the writers' locate–lock–validate step, linking and
//! unlinking. The essay in [the module docs](super) says why each step is correct; the
//! comments here point at its numbered claims.
//!
//! Nothing in this file knows about grace periods. Every function that reads nodes or tables
//! is `unsafe` with the same contract: the caller keeps whatever it may reach alive (the map
//! holds a read-side critical section of its domain; the loom models simply never free before
//! the end of the model), and the caller takes ownership of every node or table a function
//! hands back as unlinked (the map retires them).

pub(crate) use super::node::Node;
use super::slot::{self, Slot, SlotLock, CHANGING, MOVED};
use crate::sync::{AtomicPtr, AtomicUsize};
use std::ptr;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

/// One bucket array, and, while a resize is under way, the link to its successor.
pub(crate) struct Table<K, V> {
    mask: usize,
    slots: Box<[Slot<Node<K, V>>]>,
    /// The table this one is being moved into (null when no resize is under way). Set once,
    /// before any bucket is moved (claim 3).
    pub(crate) next: AtomicPtr<Table<K, V>>,
    /// Buckets handed to movers so far (may run past `len`).
    claimed: AtomicUsize,
    /// Buckets whose move has finished.
    finished: AtomicUsize,
}

impl<K, V> Table<K, V> {
    /// A table of `buckets` buckets (a power of two).
    pub(crate) fn new(buckets: usize) -> Box<Self> {
        debug_assert!(buckets.is_power_of_two());
        Box::new(Table {
            mask: buckets - 1,
            slots: slot::slots(buckets),
            next: AtomicPtr::new(ptr::null_mut()),
            claimed: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.mask + 1
    }

    /// `log2(len)`.
    pub(crate) fn bits(&self) -> u32 {
        self.len().trailing_zeros()
    }

    #[inline(always)]
    pub(crate) fn index(&self, hash: u64) -> usize {
        hash as usize & self.mask
    }

    /// The head of bucket `index`'s chain.
    #[inline(always)]
    pub(crate) fn head(&self, index: usize) -> &AtomicPtr<Node<K, V>> {
        &self.slots[index].head
    }
}

/// Find the first node with `hash` whose key `matches`, looking in `table` and then in each
/// table it is being moved into (claim 3: a node missed in one table is in the next).
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

/// [`find`], returning the node pointer as loaded from its link (with the provenance that
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
        let mut p = table.head(table.index(hash)).load(Acquire);
        while !p.is_null() {
            // SAFETY: non-null links point at published nodes (Acquire load, claim 2), alive
            // by the caller's contract.
            let node = unsafe { &*p };
            if node.hash == hash && matches(&node.key) {
                return p;
            }
            p = node.next.load(Acquire);
        }
        let next = table.next.load(Acquire);
        if next.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: a successor table is alive as long as its predecessor is reachable.
        table = unsafe { &*next };
    }
}

/// Where a key is (or would be inserted): the bucket that owns the hash, the state it had when
/// the walk began, and the link that points at the matching node.
pub(crate) struct Spot<K, V> {
    table: *const Table<K, V>,
    index: usize,
    state: u64,
    link: *const AtomicPtr<Node<K, V>>,
    pub(crate) found: *mut Node<K, V>,
}

impl<K, V> Spot<K, V> {
    fn slot(&self) -> &Slot<Node<K, V>> {
        // SAFETY: `table` was reached by `locate`, whose caller keeps it alive while the spot
        // is used (same contract).
        unsafe { &(&*self.table).slots[self.index] }
    }

    /// Whether the bucket is unchanged since the walk began: then the walk saw its chain as it
    /// still is, and a key it did not find is absent (claim 4). No lock needed.
    pub(crate) fn unchanged(&self) -> bool {
        self.slot().seq() == self.state
    }

    /// Lock the bucket and check nothing changed since the walk; `None` means walk again.
    pub(crate) fn lock(&self) -> Option<Locked<'_, K, V>> {
        let lock = self.slot().lock();
        (lock.seq() == self.state).then_some(Locked { spot: self, lock })
    }
}

/// The locked bucket of a [`Spot`] that was validated: its chain is exactly what the walk saw.
pub(crate) struct Locked<'s, K, V> {
    spot: &'s Spot<K, V>,
    lock: SlotLock<'s, Node<K, V>>,
}

impl<K, V> Locked<'_, K, V> {
    /// Put `node` at the head of the bucket.
    ///
    /// # Safety
    ///
    /// `node` is an unpublished node from [`Node::new`] with the bucket's hash.
    pub(crate) unsafe fn link_first(&self, node: *mut Node<K, V>) {
        let head = &self.spot.slot().head;
        self.lock.change(|| {
            // SAFETY: `node` is not yet published, so this thread has it to itself.
            unsafe { (*node).next.store(head.load(Relaxed), Relaxed) };
            head.store(node, Release);
        });
    }

    /// Put `node` in place of the found node, which is returned unlinked.
    ///
    /// # Safety
    ///
    /// As for [`link_first`](Self::link_first), and the spot found a node.
    pub(crate) unsafe fn replace(&self, node: *mut Node<K, V>) -> *mut Node<K, V> {
        let old = self.spot.found;
        self.lock.change(|| {
            // SAFETY: the bucket is locked and validated, so `old` is still in its chain and
            // its `next` changes only under this lock (claim 1); `node` is ours alone.
            unsafe { (*node).next.store((*old).next.load(Relaxed), Relaxed) };
            // SAFETY: the validated walk found `old` behind `link`, which is unchanged.
            unsafe { (*self.spot.link).store(node, Release) };
        });
        old
    }

    /// Unlink the found node and return it. Its own `next` is left alone (claim 1).
    ///
    /// # Safety
    ///
    /// The spot found a node.
    pub(crate) unsafe fn unlink(&self) -> *mut Node<K, V> {
        let old = self.spot.found;
        // SAFETY: as in `replace`.
        self.lock
            .change(|| unsafe { (*self.spot.link).store((*old).next.load(Relaxed), Release) });
        old
    }
}

/// The writers' walk: from `current`, follow `MOVED` buckets to the table that owns `hash`
/// (claim 5), and find the first node whose key `matches` and the link that points at it.
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
    let mut table = current;
    loop {
        let index = table.index(hash);
        let slot = &table.slots[index];
        let state = slot.seq();
        if state & CHANGING != 0 {
            slot.wait_for_change();
            continue;
        }
        if state & MOVED != 0 {
            let next = table.next.load(Acquire);
            debug_assert!(!next.is_null(), "a moved bucket has a next table");
            // SAFETY: `MOVED` is set only after `next` was installed (claim 3), and the
            // successor lives as long as its predecessor is reachable.
            table = unsafe { &*next };
            continue;
        }
        let mut link: *const AtomicPtr<Node<K, V>> = &slot.head;
        loop {
            // SAFETY: `link` is a head of a live table or the `next` of a live node.
            let p = unsafe { (*link).load(Acquire) };
            if p.is_null() {
                break;
            }
            // SAFETY: published node, alive by the caller's contract.
            let node = unsafe { &*p };
            if node.hash == hash && matches(&node.key) {
                return Spot {
                    table,
                    index,
                    state,
                    link,
                    found: p,
                };
            }
            link = &node.next;
        }
        return Spot {
            table,
            index,
            state,
            link,
            found: ptr::null_mut(),
        };
    }
}

/// Unlink exactly `target` (found by pointer, with no user code) if it is still in the map.
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
        let index = table.index(hash);
        let slot = &table.slots[index];
        let lock = slot.lock();
        if lock.seq() & MOVED != 0 {
            drop(lock);
            // SAFETY: as in `locate`.
            table = unsafe { &*table.next.load(Acquire) };
            continue;
        }
        let mut link = &slot.head;
        loop {
            let p = link.load(Relaxed);
            if p.is_null() {
                return None;
            }
            // SAFETY: under the lock the chain is this bucket's own (claim 1), and alive.
            let node = unsafe { &*p };
            if ptr::eq(p, target) {
                lock.change(|| link.store(node.next.load(Relaxed), Release));
                return Some(p);
            }
            link = &node.next;
        }
    }
}

/// Detach every chain of `table` that is still its own (not moved), returning the nodes.
///
/// # Safety
///
/// As for [`find`].
pub(crate) unsafe fn detach_all<K, V>(table: &Table<K, V>, out: &mut Vec<*mut Node<K, V>>) {
    for slot in table.slots.iter() {
        let lock = slot.lock();
        if lock.seq() & MOVED != 0 {
            continue;
        }
        let head = &slot.head;
        let mut p = head.load(Relaxed);
        if p.is_null() {
            continue;
        }
        lock.change(|| head.store(ptr::null_mut(), Release));
        while !p.is_null() {
            out.push(p);
            // SAFETY: detached under the lock: the chain is ours to walk (readers only read).
            p = unsafe { (*p).next.load(Relaxed) };
        }
    }
}

/// What a resize step hands back.
pub(crate) enum Moved<K, V> {
    /// Nothing to move: no resize under way, or every bucket already claimed.
    Nothing,
    /// Some buckets were moved; the resize goes on.
    Some,
    /// This call moved the last bucket and made the new table current: the old table is
    /// unreachable for new walkers and must be retired.
    Finished(*mut Table<K, V>),
}

/// Move up to `budget` buckets of `old` into `old.next`. With `busted_unlink_first`, a
/// node is unlinked from the old chain *before* it is published in the new one (the loom
/// model's broken variant: a lookup then misses it).
///
/// # Safety
///
/// As for [`find`]; `root` is the map's current-table pointer and `old_ptr` was loaded from it
/// (the raw pointer is kept, not a reference, because a finished table is handed back for
/// `Box::from_raw`).
pub(crate) unsafe fn help_move<K, V>(
    root: &AtomicPtr<Table<K, V>>,
    old_ptr: *mut Table<K, V>,
    budget: usize,
    busted_unlink_first: bool,
) -> Moved<K, V> {
    // SAFETY: alive by the caller's contract.
    let old = unsafe { &*old_ptr };
    let next = old.next.load(Acquire);
    if next.is_null() {
        return Moved::Nothing;
    }
    // SAFETY: installed and alive (caller's contract).
    let new = unsafe { &*next };
    let mut moved_any = false;
    let mut left = budget;
    while left > 0 {
        // Buckets are claimed and counted as finished a run at a time: two atomic
        // read-modify-writes per run instead of two per bucket.
        let run = left.min(MAX_RUN);
        left -= run;
        let first = old.claimed.fetch_add(run, Relaxed);
        if first >= old.len() {
            break;
        }
        let end = old.len().min(first + run);
        for index in first..end {
            // Moving a bucket waits for a cache miss on its first node; asking for the nodes
            // of the buckets ahead now lets those misses overlap.
            if let Some(ahead) = old
                .slots
                .get(index + PREFETCH_AHEAD)
                .filter(|_| index + PREFETCH_AHEAD < end)
            {
                prefetch(ahead.head.load(Relaxed));
            }
            // SAFETY: forwarded; `index` was claimed by this thread alone.
            unsafe { move_bucket(old, new, index, busted_unlink_first) };
        }
        moved_any = true;
        // AcqRel: the finisher's root store must carry every mover's links (all the
        // increments form one release sequence that the last one acquires).
        if old.finished.fetch_add(end - first, AcqRel) + (end - first) == old.len() {
            // Every bucket is `MOVED`: `new` holds every node. Walkers that start from `new`
            // need nothing from `old` (claim 6).
            root.store(next, Release);
            return Moved::Finished(old_ptr);
        }
    }
    if moved_any {
        Moved::Some
    } else {
        Moved::Nothing
    }
}

/// The most buckets one claim takes.
const MAX_RUN: usize = 64;

/// How many buckets ahead a mover asks for the first node.
const PREFETCH_AHEAD: usize = 4;

/// A hint to bring `p`'s cache line in; never faults, whatever `p` is.
#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a prefetch only hints the cache: it reads nothing the program can observe and
    // does not fault on any address (null, freed or unmapped).
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = p;
}

/// Relocate every node of bucket `index` of `old` into `new`, tail first: each node is linked
/// at the head of its new bucket, then unlinked from the old chain (claim 3), then the bucket
/// is marked `MOVED`.
///
/// # Safety
///
/// As for [`find`]; `new` is `old.next`; this thread claimed `index`.
unsafe fn move_bucket<K, V>(
    old: &Table<K, V>,
    new: &Table<K, V>,
    index: usize,
    busted_unlink_first: bool,
) {
    let slot = &old.slots[index];
    if !busted_unlink_first && slot.mark_moved_if_empty() {
        return;
    }
    let lock = slot.lock();
    // One change of the old bucket for the whole move, ending with `MOVED` in the same
    // store: a writer never sees a half-moved chain with a settled state (claims 4 and 5).
    lock.change_marking(MOVED, || loop {
        // The tail and the link that points at it.
        let mut link = &slot.head;
        let mut p = link.load(Relaxed);
        if p.is_null() {
            return;
        }
        // SAFETY (both derefs): under the old bucket's lock its chain is its own and alive.
        while !unsafe { (*p).next.load(Relaxed) }.is_null() {
            link = unsafe { &(*p).next };
            p = link.load(Relaxed);
        }
        // SAFETY: `p` is in the old chain (locked): alive.
        let node = unsafe { &*p };
        let target = new.index(node.hash);
        let new_slot = &new.slots[target];
        // Lock order: an old table's bucket before a newer table's (writers hold one lock).
        let new_lock = new_slot.lock();
        new_lock.change(|| {
            if busted_unlink_first {
                link.store(ptr::null_mut(), Release);
            }
            // `p`'s successor becomes the new chain: a reader standing on `p` walks on into
            // the new bucket, whose nodes are all published (Release), and finds nothing it
            // would miss.
            node.next.store(new_slot.head.load(Relaxed), Release);
            new_slot.head.store(p, Release);
            if !busted_unlink_first {
                link.store(ptr::null_mut(), Release);
            }
        });
    });
}

/// Every node reachable from `current`, each once: with exclusive access nothing moves, so
/// each node is in exactly one unmoved chain of one table.
///
/// # Safety
///
/// Exclusive access to the map for as long as the pointers are used.
pub(crate) unsafe fn exclusive_nodes<K, V>(current: *mut Table<K, V>) -> Vec<*mut Node<K, V>> {
    let mut nodes = Vec::new();
    let mut table = current as *const Table<K, V>;
    while !table.is_null() {
        // SAFETY: tables reachable from the root are alive while the map is.
        let t = unsafe { &*table };
        for slot in t.slots.iter() {
            let mut p = slot.head.load(Relaxed);
            while !p.is_null() {
                nodes.push(p);
                // SAFETY: a chain of a table with no mover: the bucket's own nodes, alive.
                p = unsafe { (*p).next.load(Relaxed) };
            }
        }
        table = t.next.load(Relaxed);
    }
    nodes
}

/// Take every node reachable from `current` as an owned box and free the tables (whose drop
/// frees only their arrays): what dropping or consuming the map does.
///
/// # Safety
///
/// Nobody else can reach the map any more (`&mut` access or ownership), and the root is not
/// used again.
pub(crate) unsafe fn take_all<K, V>(current: *mut Table<K, V>) -> Vec<Box<Node<K, V>>> {
    // SAFETY: exclusive access (caller's contract).
    let nodes = unsafe { exclusive_nodes(current) };
    let mut table = current;
    while !table.is_null() {
        // SAFETY: tables reachable from the root are owned by the map and freed once here.
        let t = unsafe { Box::from_raw(table) };
        table = t.next.load(Relaxed);
    }
    nodes
        .into_iter()
        // SAFETY: each node is in exactly one unmoved chain, so it is collected once; the
        // pointer comes from its link.
        .map(|node| unsafe { Box::from_raw(node) })
        .collect()
}
