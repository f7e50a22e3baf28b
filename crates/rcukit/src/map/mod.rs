//! [`RcuHashMap`]: a resizable hash map whose lookups take no lock and write nothing shared
//! (the kernel's `rhashtable`, liburcu's `rculfhash`), for tables that are read on every
//! packet and changed now and then: connection tracking, routing caches, session tables.
//!
//! ```
//! use rcukit::RcuHashMap;
//! use std::sync::Arc;
//!
//! #[derive(Clone, Debug, PartialEq)]
//! struct Flow { packets: u64, verdict: &'static str }
//!
//! // A flow table, keyed by (source, destination, port), on the global domain.
//! let flows: Arc<RcuHashMap<(u32, u32, u16), Flow>> = Arc::new(RcuHashMap::new());
//! flows.insert((1, 2, 443), Flow { packets: 0, verdict: "accept" });
//!
//! // Packet threads: one guard per packet, no lock, nothing written.
//! let packet_thread = {
//!     let flows = Arc::clone(&flows);
//!     std::thread::spawn(move || {
//!         for _ in 0..1000 {
//!             let guard = flows.domain().read();
//!             if let Some(flow) = flows.get(&(1, 2, 443), &guard) {
//!                 assert_eq!(flow.verdict, "accept");
//!             }
//!         }
//!     })
//! };
//!
//! // The control plane: create, change and expire flows while packets are looked up.
//! for port in 0..1000 {
//!     flows.insert((9, 9, port), Flow { packets: 0, verdict: "drop" }); // the table grows
//! }
//! flows.update(&(1, 2, 443), |f| Flow { packets: f.packets + 1, ..f.clone() });
//! flows.retain(|&(src, _, _), _| src != 9); // and shrinks again
//! packet_thread.join().unwrap();
//! assert_eq!(flows.len(), 1);
//! ```
//!
//! # Structure
//!
//! A bucket table of `2^k` chains of immutable nodes (`hash`, `next`, key, value), as in
//! `rhashtable`. The chain heads are an array of pointers on their own (a lookup touches 8
//! bytes of table per probe); each bucket's lock and state word sit in a second array. While
//! the table is resized, the old table points at the new one (`next`), and buckets move from
//! the old to the new one at a time. Nodes carry their full hash, so moving a node never runs
//! the user's `Hash`.
//!
//! **Writers lock one bucket at a time, never the map.** Inserts, removals and updates of keys
//! in different buckets run in parallel. A writer first walks the bucket *without* the lock,
//! comparing keys with the user's `Eq`, then takes the bucket's lock and checks that the
//! bucket's state did not move (a per-bucket sequence count, claim 4); if it did, it walks
//! again. So user code (`Hash`, `Eq`, the closure of
//! [`update`](RcuHashMap::update), `Drop`) never runs under a lock of the map and may use the
//! map itself. Lock-free insertion (`rculfhash`) would spare the lock but needs a compare-and-
//! swap per link and logically deleted markers that every reader must skip; with per-bucket
//! locks a reader's walk is the plain linked-list walk of `RcuList`, which is what makes
//! lookups as cheap as they are.
//!
//! **Resizing: relocation between tables, as in `rhashtable`.** `rculfhash` instead keeps
//! every node in one split-ordered list and resizes by adding dummy nodes to an index, which
//! never moves a node but costs a bit-reversed ordering, dummy nodes on every walk and a
//! lock-free list. Relocation keeps each chain short and each walk direct, and it is simple to
//! argue (below). A resize is started by the write that crosses the load factor (grow above
//! `max_load_factor`, 0.75 by default; shrink below `min_load_factor`, 0.3 by default, never
//! below the capacity the map was made with), and then *every* write helps it by moving up to
//! 8 buckets, so the work is spread over the writes that follow and no write ever rehashes the
//! whole table. If writes stop in the middle of a resize, the map stays correct; lookups of
//! absent keys then look in two tables.
//!
//! # Why it is correct
//!
//! Readers walk chains with `Acquire` loads inside a read-side critical section of the map's
//! domain; every unlinked node and every replaced table is retired into that domain, so it is
//! freed only after every reader that might stand on it has left (as in [`RcuList`]). What has
//! to be argued is that a walk is always over published nodes, and that a key present
//! throughout a lookup is found even while buckets move.
//!
//! 1. **Links change only under the lock of the bucket whose chain holds them.** A node's
//!    `next` is written when it is linked (before it is published), by a writer of its bucket
//!    that unlinks or replaces its successor, or by the mover of its bucket when it relocates
//!    it. An unlinked node's `next` is never written again, so a reader standing on it walks
//!    on to what followed it when it was unlinked (as in `RcuList`).
//! 2. **Every node a reader reaches is published.** Nodes are initialised, then linked with a
//!    `Release` store; readers load every link with `Acquire`.
//! 3. **A relocated node is in the new table before it leaves the old one.** A mover holds the
//!    old bucket's lock and moves its *tail* node `X`: it locks `X`'s new bucket, points
//!    `X.next` at that bucket's chain, links `X` at its head (`Release`), and only then stores
//!    null into the link that pointed at `X` in the old chain. A reader standing on `X` walks
//!    on into the new bucket (published nodes; at worst a few keys that do not match). A
//!    reader that reaches the old chain's end without meeting `X` has read that null store
//!    (`Acquire`), so it also sees what happened before it: the new table installed in
//!    `old.next` (before any move) and `X` linked in the new table. After the old table, a
//!    lookup therefore reads `old.next` and walks the new bucket, where `X` is (or was moved
//!    on, before, to a newer table: by induction down the chain of tables, which ends at the
//!    current table). Hence a key present throughout a lookup is never missed; the loom model
//!    with the busted order (unlink first) finds a lookup that misses it.
//! 4. **A walk that began and ended on the same even state saw the chain as it is.** Each
//!    bucket has a sequence count: under its lock a writer sets `CHANGING` before it changes
//!    the bucket's links and, after them, clears it and bumps the version with a `Release`
//!    store. A writer's walk reads the state first (`Acquire`) and, if `CHANGING` is set,
//!    waits for the lock holder and reads again. If the state it read is even, every earlier
//!    change is visible to it (the `Release` bump); if the walk then observed a later change
//!    (an `Acquire` load of a link stored with `Release` after `CHANGING` was set), a second
//!    read of the state sees `CHANGING` or a newer version. So a removal may conclude
//!    "absent" without the lock when the state did not move, and a writer that locks the
//!    bucket and finds the state it started from may use the link its unlocked walk found.
//!    (Bumping only *before* the change is not enough: a walker could read the new version
//!    and still the old links; two writers would then both replace one node, losing an
//!    update and retiring the node twice. `concurrent_updates_of_one_key_lose_nothing` in
//!    `tests/map.rs` caught exactly that.)
//! 5. **Each key has one owning bucket.** A mover moves a whole bucket inside *one* change
//!    of the old bucket (claim 4): `CHANGING` is set before the first node leaves and the
//!    store that clears it also sets `MOVED`, after `next` was installed. A writer that reads
//!    `CHANGING` waits for the lock; one that reads `MOVED` follows `next`. So whenever a
//!    writer reads a settled, unmoved state, every node with the bucket's hash is in its
//!    chain (a writer only inserts where the key's bucket is not `MOVED`), and two writers of
//!    one key serialize on one lock. (Marking the bucket only after the last node left is
//!    not enough: a removal walking the half-moved chain under a settled version concluded
//!    "absent" for a key that was in the new table. The loom model found that.)
//! 6. **The old table is retired only once nothing needs it.** The mover of the last bucket
//!    (counted with `AcqRel` increments, so it sees every other mover's links) makes the new
//!    table current with a `Release` store and retires the old one. Walkers that start from
//!    the new table never look at the old one; walkers that started before still hold a
//!    guard, so the old table is freed after they leave. Nodes are not freed with it: they
//!    live in the new table.
//!
//! Progress: a lookup is wait-free (a bounded walk over at most two or three tables; nothing
//! to retry). Writers retry only when another write changed the same bucket in between.
//!
//! # Where user code runs
//!
//! `Hash` and `Eq` run in the calling thread, with no lock of the map held, inside a read-side
//! critical section that the map opens (so they must not wait for a grace period of the map's
//! domain; a `synchronize` there panics, as always inside a guard). The closures of
//! [`update`](RcuHashMap::update) and [`retain`](RcuHashMap::retain) run the same way;
//! `update`'s may run more than once when another writer changes the bucket in between (like
//! `AtomicU64::fetch_update`). Removed and replaced entries are retired after the map's
//! critical section ends, so their `Drop` runs where [retired objects run](crate::docs::internal::callbacks::invoke).
//!
//! # `Send` and `Sync`
//!
//! `RcuHashMap<K, V, S, D>` is `Sync` when `K` and `V` are `Send + Sync` (readers on many
//! threads share `&K` and `&V`; entries inserted on one thread are dropped on another), `S`
//! is `Sync` and `D` is `Sync`; it is `Send` when `K`, `V`, `S` and `D` are `Send`.
//!
//! # Thread exit and `fork()`
//!
//! The map keeps no per-thread state. Its bucket locks are held only for a few pointer
//! stores; a child forked while another thread held one would wait on it forever, as with any
//! mutex: do not fork while other threads write the map.
//!
//! [`RcuList`]: crate::RcuList

mod builder;
mod iter;
#[cfg(all(test, rcukit_loom))]
mod loom;
pub(crate) mod table;
mod write;

pub use builder::MapBuilder;
pub use iter::{IntoIter, Iter, IterMut};

use crate::domain_ref::{self, DomainRef};
use crate::sync::AtomicPtr;
use crate::{Guard, Rcu, ReadSection};
use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use table::{Moved, Node, Table};

/// Buckets each write moves while a resize is under way.
const HELP_BUDGET: usize = 8;
/// The smallest table.
const MIN_BUCKETS: usize = 16;
/// The largest table: 2^40 buckets, far beyond any memory.
const MAX_BUCKETS: usize = 1 << 40;

/// A concurrent hash map whose readers take no lock; see the [module docs](self).
pub struct RcuHashMap<K, V, S = RandomState, D: DomainRef = &'static Rcu> {
    root: AtomicPtr<Table<K, V>>,
    len: AtomicUsize,
    hasher: S,
    domain: D,
    policy: Policy,
    _owns: PhantomData<Box<Node<K, V>>>,
}

/// When to resize.
#[derive(Clone, Copy, Debug)]
struct Policy {
    max_load: f32,
    min_load: f32,
    min_buckets: usize,
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
    /// never shrinks below that room.
    pub fn with_capacity(capacity: usize) -> Self {
        Self::with_capacity_and_hasher(capacity, RandomState::new())
    }
}

impl<K, V> Default for RcuHashMap<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K, V, S> RcuHashMap<K, V, S> {
    /// An empty map on the global domain that hashes with `hasher`.
    pub fn with_hasher(hasher: S) -> Self {
        Self::with_capacity_and_hasher(0, hasher)
    }

    /// An empty map on the global domain with room for `capacity` entries, hashing with
    /// `hasher`.
    pub fn with_capacity_and_hasher(capacity: usize, hasher: S) -> Self {
        MapBuilder::new()
            .capacity(capacity)
            .hasher(hasher)
            .build()
            .expect("default load factors are valid")
    }
}

impl<K, V, D: DomainRef> RcuHashMap<K, V, RandomState, D> {
    /// An empty map protected by `domain` (`&Rcu`, `&'static Rcu` or `Arc<Rcu>`).
    pub fn with_domain(domain: D) -> Self {
        MapBuilder::new()
            .domain(domain)
            .build()
            .expect("default load factors are valid")
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

    /// The number of entries (exact when no write is under way).
    pub fn len(&self) -> usize {
        self.len.load(Relaxed)
    }

    /// Whether the map has no entries (exact when no write is under way).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of buckets of the current table (the newest one while a resize is under
    /// way): the map grows when `len()` passes `max_load_factor` times this.
    pub fn capacity(&self) -> usize {
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
    /// walk of one chain (two while a resize is under way and the key is absent or moved).
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
    /// across resizes (see [`Iter`]); an entry replaced meanwhile may appear with its old
    /// value, its new one, or both.
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
        let nodes = unsafe { table::exclusive_nodes(self.root.load(Relaxed)) };
        IterMut {
            nodes: nodes.into_iter(),
            _map: PhantomData,
        }
    }

    fn help_resize(&self, guard: &Guard<'_>) -> Option<*mut Table<K, V>> {
        debug_assert!(ptr::eq(guard.domain(), self.domain()));
        // SAFETY: the guard (of this domain: every caller took it with `self.domain()`)
        // protects the current table and what it reaches.
        match unsafe { table::help_move(&self.root, self.root.load(Acquire), HELP_BUDGET, false) } {
            Moved::Finished(old) => Some(old),
            Moved::Some | Moved::Nothing => None,
        }
    }

    /// After a bulk change (`retain`, `clear`): start the resize the load factor asks for and
    /// help until no bucket is left to move, returning the tables to retire.
    fn resize_now(&self, guard: &Guard<'_>) -> Vec<*mut Table<K, V>> {
        debug_assert!(ptr::eq(guard.domain(), self.domain()));
        let mut finished = Vec::new();
        loop {
            let table = self.root.load(Acquire);
            // SAFETY: protected by the guard (of this domain: see `table`).
            self.maybe_start_resize(unsafe { &*table });
            // SAFETY: as in `help_resize`.
            match unsafe { table::help_move(&self.root, table, usize::MAX, false) } {
                Moved::Finished(old) => finished.push(old),
                Moved::Some | Moved::Nothing => return finished,
            }
        }
    }

    /// Start a resize if the load factor says so and none is under way.
    fn maybe_start_resize(&self, table: &Table<K, V>) {
        if !table.next.load(Acquire).is_null() {
            return;
        }
        let len = self.len();
        let buckets = table.len();
        let Policy {
            max_load, min_load, ..
        } = self.policy;
        let target = if len as f64 > buckets as f64 * max_load as f64 && buckets < MAX_BUCKETS {
            buckets * 2
        } else if (len as f64) < buckets as f64 * min_load as f64
            && buckets > self.policy.min_buckets
        {
            let mid = (max_load + min_load) as f64 / 2.0;
            let wanted = ((len as f64 / mid) as usize).next_power_of_two();
            wanted.clamp(self.policy.min_buckets, buckets / 2)
        } else {
            return;
        };
        let new = Box::into_raw(Table::new(target));
        if table
            .next
            .compare_exchange(ptr::null_mut(), new, AcqRel, Acquire)
            .is_err()
        {
            // SAFETY: ours, never published.
            drop(unsafe { Box::from_raw(new) });
        }
    }

    /// Retire what a write unlinked, after its critical section ended.
    fn retire(
        &self,
        nodes: impl IntoIterator<Item = *mut Node<K, V>>,
        table: Option<*mut Table<K, V>>,
    ) where
        K: Send + 'static,
        V: Send + 'static,
    {
        let rcu = self.domain.rcu();
        for node in nodes {
            if self.policy.busted_drop_values_at_once {
                // SAFETY: unlinked and owned (the busted knob's contract covers readers).
                unsafe { rcu.retire_raw(table::drop_value_now(node)) };
            } else {
                // SAFETY: `node` was unlinked under its bucket's lock, so new readers cannot
                // reach it, and is retired exactly once.
                unsafe { rcu.retire_raw(node) };
            }
        }
        if let Some(old) = table {
            // SAFETY: the old table stopped being the root (claim 6) and is retired once; its
            // drop frees only its arrays.
            unsafe { rcu.retire_raw(old) };
        }
    }
}

impl<K, V, S, D: DomainRef> Drop for RcuHashMap<K, V, S, D> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader (they borrow the map) and no writer remains; nodes
        // retired earlier are owned by the domain, not reachable from here.
        drop(unsafe { table::take_all(self.root.load(Relaxed)) });
    }
}

impl<K, V, S, D: DomainRef> IntoIterator for RcuHashMap<K, V, S, D> {
    type Item = (K, V);
    type IntoIter = IntoIter<K, V>;

    fn into_iter(self) -> IntoIter<K, V> {
        // SAFETY: we own the map, and it is forgotten below (its drop never runs again).
        let boxes = unsafe { table::take_all(self.root.load(Relaxed)) };
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: the hasher and the handle are moved out exactly once, here, and dropped;
        // the map itself is never dropped (ManuallyDrop).
        drop(unsafe { (ptr::read(&this.hasher), ptr::read(&this.domain)) });
        IntoIter {
            nodes: boxes.into_iter(),
        }
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

impl<K, V, S> FromIterator<(K, V)> for RcuHashMap<K, V, S>
where
    K: Hash + Eq + Send + 'static,
    V: Send + 'static,
    S: BuildHasher + Default,
{
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let map = RcuHashMap::with_hasher(S::default());
        for (k, v) in iter {
            map.insert(k, v);
        }
        map
    }
}
