#![doc = include_str!("README.md")]

mod after_fork;
mod builder;
mod bulk;
#[cfg(test)]
mod by_hand;
mod compute;
mod hint;
mod iter;
mod line;
#[cfg(all(test, rcukit_loom))]
mod loom;
mod moves;
mod node;
mod overflow;
mod own_writes;
mod pin;
pub(crate) mod table;
mod traits;
mod trim;
mod write;

pub use crate::compute::{Compute, Operation};
pub use builder::MapBuilder;
pub use iter::{IntoIter, Iter, IterMut, Keys, Values};
pub use pin::MapRef;
pub use write::OccupiedError;

use crate::domain_ref::{self, DomainRef};
use crate::sync::AtomicPtr;
use crate::{Rcu, ReadSection};
use crossbeam_utils::CachePadded;
use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use table::{Node, Table};

/// Buckets each write moves while a resize is under way.
const HELP_BUDGET: usize = 8;
/// The smallest table.
const MIN_BUCKETS: usize = 16;
/// The largest table: 2^40 buckets, far beyond any memory.
const MAX_BUCKETS: usize = 1 << 40;

/// The fewest buckets (a power of two, at least [`MIN_BUCKETS`]) that hold `entries` at the
/// load factor `max_load`; `None` past [`MAX_BUCKETS`], a table the map never has.
fn buckets_to_hold(entries: usize, max_load: f32) -> Option<usize> {
    let wanted = (entries as f64 / f64::from(max_load)).ceil() as usize;
    wanted
        .checked_next_power_of_two()
        .filter(|&buckets| buckets <= MAX_BUCKETS)
        .map(|buckets| buckets.max(MIN_BUCKETS))
}

/// A concurrent hash map whose readers take no lock; see the [module docs](self).
pub struct RcuHashMap<K, V, S = RandomState, D: DomainRef = &'static Rcu> {
    root: AtomicPtr<Table<K, V>>,
    /// On cache lines of its own: every write changes it, and on the line of `root`, the
    /// hasher and the domain it would take that line from every reader at each write.
    len: CachePadded<AtomicUsize>,
    hasher: S,
    domain: D,
    policy: Policy,
    /// The table never shrinks below this many buckets (the capacity asked for at
    /// construction or by `reserve`; `shrink_to_fit` lowers it).
    min_buckets: AtomicUsize,
    /// What the map freed since it last asked for an allocator trim (a hint: see `trim`).
    freed: trim::Freed,
    /// The fork generation the map was made or last repaired in (see `after_fork`).
    generation: crate::sync::fork::ForkStamp,
    _owns: PhantomData<Box<Node<K, V>>>,
}

/// When to resize.
#[derive(Clone, Copy, Debug)]
struct Policy {
    max_load: f32,
    min_load: f32,
    trim_allocator: bool,
    busted_drop_values_at_once: bool,
}

// SAFETY: readers on any thread share `&K`/`&V` (need `Sync`); entries inserted on one thread
// are dropped on another after a grace period (need `Send`); the hasher is used by every
// thread through `&S`, the handle through `&D`.
unsafe impl<K: Send + Sync, V: Send + Sync, S: Sync, D: DomainRef + Sync> Sync
    for RcuHashMap<K, V, S, D>
{
}
// SAFETY: moving the map moves ownership of its entries, hasher and handle; no thread-affine
// state is kept.
unsafe impl<K: Send, V: Send, S: Send, D: DomainRef + Send> Send for RcuHashMap<K, V, S, D> {}

impl<K, V> RcuHashMap<K, V> {
    /// An empty map on the global domain with the standard hasher.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty map on the global domain with room for `capacity` entries before it grows; it
    /// does not shrink below that room (until [`shrink_to_fit`](Self::shrink_to_fit)).
    ///
    /// # Panics
    ///
    /// With "capacity overflow" if the room needs more than the largest table (2^40 buckets),
    /// as std's maps do; [`builder`](Self::builder) returns that as an error instead.
    pub fn with_capacity(capacity: usize) -> Self {
        Self::with_capacity_and_hasher(capacity, RandomState::new())
    }
}

/// An empty map on the global domain with the hasher's default (as std's `HashMap` with any
/// `S: Default`).
impl<K, V, S: Default> Default for RcuHashMap<K, V, S> {
    fn default() -> Self {
        Self::with_hasher(S::default())
    }
}

impl<K, V, S> RcuHashMap<K, V, S> {
    /// An empty map on the global domain that hashes with `hasher`.
    pub fn with_hasher(hasher: S) -> Self {
        Self::with_capacity_and_hasher(0, hasher)
    }

    /// An empty map on the global domain with room for `capacity` entries, hashing with
    /// `hasher`.
    ///
    /// # Panics
    ///
    /// With "capacity overflow" if the room needs more than the largest table (2^40 buckets),
    /// as std's maps do; [`builder`](Self::builder) returns that as an error instead.
    pub fn with_capacity_and_hasher(capacity: usize, hasher: S) -> Self {
        MapBuilder::new()
            .capacity(capacity)
            .hasher(hasher)
            .build()
            .unwrap_or_else(|error| panic!("rcukit: RcuHashMap: {error}"))
    }
}

impl<K, V, D: DomainRef> RcuHashMap<K, V, RandomState, D> {
    /// An empty map protected by `domain` (`&Rcu`, `&'static Rcu` or `Arc<Rcu>`).
    pub fn with_domain(domain: D) -> Self {
        MapBuilder::new()
            .domain(domain)
            .build()
            .unwrap_or_else(|error| panic!("rcukit: RcuHashMap: {error}"))
    }
}

impl RcuHashMap<(), ()> {
    /// A builder for the less common settings: capacity, hasher, domain and load factors.
    pub fn builder() -> MapBuilder {
        MapBuilder::new()
    }
}

impl<K, V, S, D: DomainRef> RcuHashMap<K, V, S, D> {
    /// The domain whose guards protect this map's readers.
    pub fn domain(&self) -> &Rcu {
        self.domain.rcu()
    }

    /// The number of entries (exact when no write is under way). In a child process forked
    /// while a write of the parent's was under way, that write stays under way for `len`
    /// until the child's first write of the map repairs it (it may count the entry the
    /// write placed or removed, or not).
    pub fn len(&self) -> usize {
        self.len.load(Relaxed)
    }

    /// Whether the map has no entries (exact when no write is under way).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many entries the map holds before its table grows, as `std`'s maps count their
    /// capacity: `max_load_factor` times the [`buckets`](Self::buckets) of the current table
    /// (the newest one while a resize is under way). A map made or [`reserve`](Self::reserve)d
    /// for `n` entries has a capacity of at least `n`.
    pub fn capacity(&self) -> usize {
        self.limits_for(self.buckets()).above
    }

    /// The number of buckets of the current table (the newest one while a resize is under
    /// way), a power of two: the map grows when `len()` passes `max_load_factor` times this.
    pub fn buckets(&self) -> usize {
        let guard = self.domain().read();
        // SAFETY: the guard keeps the current table and its successors alive.
        let mut table = unsafe { &*self.root.load(Acquire) };
        loop {
            let next = table.next.load(Acquire);
            if next.is_null() {
                break;
            }
            // SAFETY: as above.
            table = unsafe { &*next };
        }
        let buckets = table.len();
        drop(guard);
        buckets
    }

    /// The current table, for a walk that the caller's guard (of this domain) protects.
    fn table<'g, G: ReadSection>(&'g self, guard: &'g G) -> &'g Table<K, V> {
        domain_ref::check_guard("RcuHashMap", guard, self.domain.rcu());
        // SAFETY: the root is never null; tables are retired only after they stop being the
        // root, and the guard (of this domain, held by this thread) holds that grace period
        // back for 'g (claim 6).
        unsafe { &*self.root.load(Acquire) }
    }

    /// The entry for `key`, valid while both `guard` and the map are borrowed. Lock-free: a
    /// scan of one bucket (two while a resize is under way and the key is absent or moved).
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another domain than the map's.
    #[inline]
    #[track_caller]
    pub fn get_key_value<'g, Q, G>(&'g self, key: &Q, guard: &'g G) -> Option<(&'g K, &'g V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        S: BuildHasher,
        G: ReadSection,
    {
        let table = self.table(guard);
        let hash = self.hasher.hash_one(key);
        // SAFETY: `table` and what it reaches are protected by `guard` for 'g.
        unsafe { table::find(table, hash, |k| k.borrow() == key) }.map(|n| (&n.key, &n.value))
    }

    /// The value for `key`, valid while both `guard` and the map are borrowed; see
    /// [`get_key_value`](Self::get_key_value).
    #[inline]
    #[track_caller]
    pub fn get<'g, Q, G>(&'g self, key: &Q, guard: &'g G) -> Option<&'g V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        S: BuildHasher,
        G: ReadSection,
    {
        self.get_key_value(key, guard).map(|(_, v)| v)
    }

    /// Whether the map holds `key`.
    #[inline]
    #[track_caller]
    pub fn contains_key<Q, G>(&self, key: &Q, guard: &G) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        S: BuildHasher,
        G: ReadSection,
    {
        self.get_key_value(key, guard).is_some()
    }

    /// The entries, in no particular order, valid while both `guard` and the map are
    /// borrowed. Each entry present throughout the iteration is yielded exactly once, also
    /// across resizes (see [`Iter`]); an entry replaced meanwhile is yielded once too, with
    /// its old value or its new one. Entries inserted or removed meanwhile may or may not be
    /// (a key removed and inserted again is two entries, and may be yielded twice).
    ///
    /// An iteration allocates (its record of the buckets each step walked), so unlike a
    /// lookup it is not for a signal handler (see "Signal handlers" in
    /// [`docs::limitations`](crate::docs::limitations)).
    #[track_caller]
    pub fn iter<'g, G: ReadSection>(&'g self, guard: &'g G) -> Iter<'g, K, V> {
        domain_ref::check_guard("RcuHashMap", guard, self.domain.rcu());
        // SAFETY: the guard (of this domain, held by this thread) keeps every table loaded
        // from the root, and what it reaches, alive for 'g (claim 6).
        unsafe { Iter::new(&self.root) }
    }

    /// The value for `key`, mutably: with `&mut self` no reader or writer can be running.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        S: BuildHasher,
    {
        let hash = self.hasher.hash_one(key);
        let root = self.root.load(Relaxed);
        // SAFETY: exclusive access: the tables and nodes are the map's alone for the borrow.
        let node = unsafe { table::find_raw(&*root, hash, |k| k.borrow() == key) };
        // SAFETY: as above; the node (if any) is owned by the map, which is mutably borrowed,
        // and the pointer comes straight from its link.
        unsafe { node.as_mut() }.map(|node| &mut node.value)
    }

    /// The entries with mutable values (`&mut self`: nothing else runs).
    pub fn iter_mut(&mut self) -> IterMut<'_, K, V> {
        // SAFETY: exclusive access for the iterator's lifetime.
        let nodes = unsafe { table::exclusive_nodes(self.root.load(Relaxed), self.forked()) };
        IterMut {
            nodes: nodes.into_iter(),
            _map: PhantomData,
        }
    }

    /// Help the resize under way (if any) by up to [`HELP_BUDGET`] buckets; the table it
    /// finished, to be retired.
    fn help_resize<G: ReadSection>(&self, guard: &G) -> Option<*mut Table<K, V>> {
        self.help_resize_by(guard, HELP_BUDGET)
    }

    /// The hasher.
    pub fn hasher(&self) -> &S {
        &self.hasher
    }

    /// The keys, in no particular order, as [`iter`](Self::iter) yields them.
    #[track_caller]
    pub fn keys<'g, G: ReadSection>(&'g self, guard: &'g G) -> Keys<'g, K, V> {
        Keys(self.iter(guard))
    }

    /// The values, in no particular order, as [`iter`](Self::iter) yields them.
    #[track_caller]
    pub fn values<'g, G: ReadSection>(&'g self, guard: &'g G) -> Values<'g, K, V> {
        Values(self.iter(guard))
    }

    /// A clone of the value of `key`, read under a guard the map takes and drops: for callers
    /// who do not want to hold a guard. The clone is of one version of the entry.
    pub fn get_cloned<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        S: BuildHasher,
        V: Clone,
    {
        let guard = self.domain().read();
        self.get(key, &guard).cloned()
    }

    /// Retire what a write unlinked, after its critical section ended.
    pub(crate) fn retire(
        &self,
        nodes: impl IntoIterator<Item = *mut Node<K, V>>,
        table: Option<*mut Table<K, V>>,
    ) where
        K: Send + 'static,
        V: Send + 'static,
    {
        let rcu = self.domain.rcu();
        let mut nodes = nodes.into_iter();
        if self.policy.busted_drop_values_at_once {
            for node in nodes {
                // SAFETY: unlinked and owned (the busted knob's contract covers readers).
                unsafe { rcu.retire_raw(node::drop_value_now(node)) };
            }
        } else {
            match (nodes.next(), nodes.next()) {
                (None, _) => {}
                // SAFETY: `node` was unlinked under its bucket's lock, so new readers cannot
                // reach it, and is retired exactly once (in its drop-apart form, same box).
                (Some(node), None) => unsafe { rcu.retire_raw(node::Retired::of(node)) },
                (Some(a), Some(b)) => {
                    let mut all = vec![a, b];
                    all.extend(nodes);
                    let bytes = all.len() * std::mem::size_of::<Node<K, V>>();
                    // SAFETY: as above, each node given up to the batch, which is retired
                    // once: one callback for them all.
                    rcu.retire_sized(Box::new(unsafe { node::Batch::new(all) }), bytes);
                }
            }
        }
        if let Some(old) = table {
            // SAFETY: the table is alive until retired just below.
            let (bytes, freed) = unsafe { ((*old).bytes(), (*old).shrunk_away(self.len())) };
            // SAFETY: the old table stopped being the root (claim 6) and is retired once; its
            // drop frees only its lines. Its size counts in full, so that the domain frees a
            // large table soon (its memory is most of what a shrink gives back).
            unsafe { rcu.retire_raw_sized(old, bytes) };
            if let Some(freed) = freed {
                self.trim_after_freeing(freed);
            }
        }
    }

    /// After the map freed `bytes` bytes, by a shrink or by its drop: ask for an allocator
    /// trim when it is due, if the map's policy wants trims (see `trim`: "When").
    fn trim_after_freeing(&self, bytes: usize) {
        if self.trim_due(bytes) {
            trim::after_retired(self.domain.rcu());
        }
    }

    /// Count `bytes` freed; whether a trim is due (see `trim`: "When").
    fn trim_due(&self, bytes: usize) -> bool {
        self.policy.trim_allocator && self.freed.count(bytes)
    }

    /// The bytes of the root table and of every entry, all freed when the map goes.
    ///
    /// # Safety
    ///
    /// No other thread may use the map (the caller has `&mut self` or owns it): the root
    /// table is then alive.
    unsafe fn bytes_held(&self) -> usize {
        // SAFETY: no writer can retire the root table meanwhile (the caller's contract).
        let table = unsafe { (*self.root.load(Relaxed)).bytes() };
        table + self.len() * std::mem::size_of::<Node<K, V>>()
    }
}

impl<K, V, S, D: DomainRef> Drop for RcuHashMap<K, V, S, D> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`.
        let bytes = unsafe { self.bytes_held() };
        let root = self.root.load(Relaxed);
        // SAFETY: `&mut self`: no reader (they borrow the map) and no writer remains; nodes
        // retired earlier are owned by the domain, not reachable from here. The batch drops
        // each entry's key and value apart, every entry even when some panic.
        drop(unsafe { node::Batch::new(table::take_all(root, self.forked())) });
        self.trim_after_freeing(bytes);
    }
}

impl<K, V, S, D: DomainRef> IntoIterator for RcuHashMap<K, V, S, D> {
    type Item = (K, V);
    type IntoIter = IntoIter<K, V>;

    fn into_iter(self) -> IntoIter<K, V> {
        // The trim, if due, is asked for when the iterator has let go of every entry.
        // SAFETY: we own the map.
        let trim = self.trim_due(unsafe { self.bytes_held() });
        // SAFETY: we own the map, and it is forgotten below (its drop never runs again).
        let nodes = unsafe { table::take_all(self.root.load(Relaxed), self.forked()) };
        // The iterator owns the entries before any user code runs: if the hasher's `Drop`
        // panics below, unwinding drops them with it.
        let iter = IntoIter {
            nodes: nodes.into_iter(),
            trim,
        };
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: the hasher and the handle are moved out exactly once, here, and dropped;
        // the map itself is never dropped (ManuallyDrop).
        drop(unsafe { (ptr::read(&this.hasher), ptr::read(&this.domain)) });
        iter
    }
}

impl<'a, K, V, S, D: DomainRef> IntoIterator for &'a mut RcuHashMap<K, V, S, D> {
    type Item = (&'a K, &'a mut V);
    type IntoIter = IterMut<'a, K, V>;

    fn into_iter(self) -> IterMut<'a, K, V> {
        self.iter_mut()
    }
}

impl<K, V, S, D> fmt::Debug for RcuHashMap<K, V, S, D>
where
    K: fmt::Debug,
    V: fmt::Debug,
    D: DomainRef,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let guard = self.domain().read();
        f.debug_map().entries(self.iter(&guard)).finish()
    }
}
