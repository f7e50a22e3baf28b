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
//! flows.pin().insert((1, 2, 443), Flow { packets: 0, verdict: "accept" });
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
//!     let flows = flows.pin(); // the map and a guard of its domain in one handle
//!     flows.insert((9, 9, port), Flow { packets: 0, verdict: "drop" }); // the table grows
//! }
//! // Atomic read-modify-write of one flow; the closure may run again if the flow changes.
//! flows.pin().update(&(1, 2, 443), |f| Flow { packets: f.packets + 1, ..f.clone() });
//! flows.retain(|&(src, _, _), _| src != 9); // and shrinks again
//! packet_thread.join().unwrap();
//! assert_eq!(flows.len(), 1);
//! ```
//!
//! # `RcuHashMap` or [`RcuFlatMap`](crate::RcuFlatMap)
//!
//! Both maps take no lock and write nothing shared to look a key up. They differ in where an
//! entry lives:
//!
//! * **Here, an entry is a node of its own that never moves.** A reference from a lookup is to
//!   the one value the map holds, so a value with interior mutability (an `AtomicU64` counter
//!   bumped through `&V`) is shared by every reader; `V` needs no `Clone`, and no write clones.
//!   Writers lock one bucket each, so writes of different keys run in parallel.
//! * **`RcuFlatMap` keeps keys and values inline** and copies the live ones (`Clone`) into
//!   each new table. A lookup then pays one cache miss instead of two, a write allocates and
//!   retires nothing, and a million `u64` entries take about 37 bytes each instead of 52; but
//!   writers take one lock per map, and a value a reader changes in place must share that
//!   state through its clones (`Arc<AtomicU64>`).
//!
//! Small `Copy` entries that are read far more often than written (addresses, indices,
//! verdicts) belong in `RcuFlatMap`, on a QSBR domain where the readers can announce
//! quiescent states; entries of any type, entries updated in place, and many writers belong
//! here. `docs/benchmarks.md` measures both beside the maps Rust users pick ("`RcuHashMap`"
//! and "`RcuFlatMap`").
//!
//! # Structure
//!
//! A table of `2^k` buckets, each one 64-byte cache line (`map/line.rs`): a state word that holds
//! the bucket's bit lock and its sequence count, a word of 12-bit hash tags, a link to an overflow
//! line, and five *lanes*, each a pointer to an immutable node (hash, key, value). A bucket with
//! more than five entries hangs further lines of five lanes (56 bytes) on the link; the default
//! load factor (4 entries per bucket) keeps that rare. A lookup reads the line, compares the key's
//! tag with the tags of the occupied lanes, and reads only the nodes whose tag matches: one cache
//! miss for the bucket and one for the entry it finds, none for the entries whose key differs (a
//! chained bucket read every node before the one it looked for). On Linux, tables of 4 MiB and
//! more are mappings of their own, advised to use transparent huge pages before any page is
//! touched, so that a probe into a table of millions of buckets does not also miss in the TLB.
//! While the table is resized, the old table points at the new one (`next`), and buckets move from
//! the old to the new one a few at a time. Nodes carry their full hash, so moving a node never
//! runs the user's `Hash`; the state word keeps the next index bits of the first line's entries
//! (`map/hint.rs`), so a move into a larger table seldom reads a node.
//!
//! **Writers lock one bucket at a time, never the map.** Inserts, removals and updates of keys in
//! different buckets run in parallel. A writer first walks the bucket *without* the lock,
//! comparing keys with the user's `Eq`, then takes the bucket's lock and checks that the bucket's
//! state did not move (a per-bucket sequence count, claim 4); if it did, it walks again. So user
//! code (`Hash`, `Eq`, the closure of [`update`](RcuHashMap::update), `Drop`) never runs under a
//! lock of the map and may use the map itself. Under the lock a writer stores a pointer and a tag
//! into a free lane (or links a new overflow line), or replaces or empties the lane of the entry
//! it found: a handful of stores, no allocation but that of an overflow line (an insert allocates
//! its node before it walks, after asking the processor for the bucket's line, so that the
//! allocation runs while the line's cache miss is served). Lock-free insertion (`rculfhash`) would
//! spare the lock but needs a compare-and-swap per change and logically deleted markers that every
//! reader must skip; with per-bucket locks a reader's lookup is a plain scan of a line, which is
//! what makes lookups as cheap as they are.
//!
//! **Resizing: relocation between tables, as in `rhashtable`.** `rculfhash` instead keeps every
//! node in one split-ordered list and resizes by adding dummy nodes to an index, which never moves
//! a node but costs a bit-reversed ordering, dummy nodes on every walk and a lock-free list.
//! Relocation keeps each bucket short and each lookup direct, and it is simple to argue (below). A
//! resize is started by the write that crosses the load factor (grow above `max_load_factor`, 4 by
//! default; shrink below `min_load_factor`, 0.25 by default, never below a floor: the capacity the
//! map was made with or asked for by [`reserve`](RcuHashMap::reserve), until
//! [`shrink_to_fit`](RcuHashMap::shrink_to_fit)); each table keeps the entry counts outside which
//! that happens, so a write compares the count it left with two numbers (computed again when the
//! resize that made the table ends and when the floor changes). Then *every* write helps the
//! resize by moving up to 8 buckets, so the work is spread over the writes that follow and no
//! write ever rehashes the whole table. Movers claim buckets a run at a time (one atomic add to
//! claim the run and one to count it finished, not two per bucket) and ask for the nodes of the
//! buckets ahead while they move one, so that the cache misses of a run overlap; an empty bucket
//! is marked moved with a single compare-exchange (claim 5). If writes stop in the middle of a
//! resize, the map stays correct; lookups of absent keys then look in two tables.
//!
//! # Why it is correct
//!
//! Readers scan lines with `Acquire` loads inside a read-side critical section of the map's
//! domain; every unlinked node and every replaced table (with its overflow lines) is retired
//! into that domain, so it is freed only after every reader that might stand on it has left
//! (as in [`RcuList`]). What has to be argued is that a scan only ever reads published nodes,
//! and that a key present throughout a lookup is found even while writers change its bucket
//! and buckets move.
//!
//! 1. **A bucket changes only under its lock, and an entry stays in its lane.** The tags,
//!    the lanes and the overflow links of a bucket's lines are written only by the holder of
//!    the bucket's lock. A writer places an entry in a free lane (the lane's pointer, then its
//!    tag) or in a new overflow line, replaces the pointer of a lane (same key, same tag), or
//!    empties a lane (its tag, then its pointer). Entries are never compacted or moved to
//!    another lane or line: an entry present throughout a lookup keeps its lane, its tag and
//!    its pointer throughout. An overflow line, once linked, stays linked until its table is
//!    freed (emptied lanes are reused), so a reader standing on one never loses it.
//! 2. **Every node a reader reaches is published, and a stale tag costs a comparison.** Nodes
//!    are initialised, then stored into a lane with a `Release` store, and the lane's tag after
//!    it (`Release`); a new overflow line is filled before the link to it is stored (`Release`);
//!    readers load tags, lanes and links with `Acquire`. A reader that reads a tag and then
//!    the lane may meet a later change of that lane (emptied, or emptied and reused for
//!    another key): it then reads null (skipped) or another published node, and compares the
//!    node's full hash and key, so it never takes a node for a key it does not hold. A node
//!    it reads was in the lane during its critical section, so it is freed only after the
//!    reader left. By claim 1, the tag word a reader reads holds the tag of every entry
//!    present throughout, the tag comparison (exact up to the first match, and never missing
//!    a match) selects its lane, and the lane holds its node.
//! 3. **A moved entry is in the new table before its old bucket says so, and stays in the
//!    old lanes.** A mover holds the old bucket's lock, places every entry of it in its
//!    bucket of the new table (under that bucket's lock), and only then sets `MOVED`, in the
//!    `Release` store that ends its change (claim 5). It leaves the old lanes as they were. A
//!    lookup reads the bucket's state (`Acquire`) before its lanes: if it sees `MOVED`, it
//!    also sees `next` (installed before any move) and every entry placed in the new table,
//!    and looks there (or, if that bucket moved on in turn, in a newer table: by induction
//!    down the chain of tables, which ends at the current table); if it does not, it scans
//!    the old lanes, which still hold every entry the bucket had (a move empties none).
//!    Hence a key present throughout a lookup is never missed; the loom model with the
//!    busted order (`MOVED` first) finds a lookup that misses it. A walker never reads the
//!    lanes of a bucket it saw `MOVED`: they may point at nodes since removed from the new
//!    table, and freed.
//! 4. **A walk that began and ended on the same settled state saw the bucket as it is.** Each
//!    bucket has a sequence count: under its lock a writer sets `CHANGING` before it changes
//!    the bucket's lanes, tags or links and, after them, clears it and bumps the version with
//!    a `Release` store. A writer's walk reads the state first (`Acquire`) and, if `CHANGING`
//!    is set, waits until the lock holder clears it and reads again (the lock bit shares the
//!    word and is masked off in every comparison: taking and releasing the lock changes
//!    nothing). If the state it read has `CHANGING` clear, every earlier change is visible to
//!    it (the `Release` bump); if the walk then observed a later change (an `Acquire` load of
//!    a tag, lane or link stored with `Release` after `CHANGING` was set), a second read of
//!    the state sees `CHANGING` or a newer version. So a removal may conclude "absent"
//!    without the lock when the state did not move, and a writer that locks the bucket and
//!    finds the state it started from may use the lane its unlocked walk found. (Bumping only
//!    *before* the change is not enough: a walker could read the new version and still the
//!    old lanes; two writers would then both replace one node, losing an update and retiring
//!    the node twice. `concurrent_read_modify_writes_of_one_key_lose_nothing` in
//!    `tests/map.rs` checks exactly that.)
//! 5. **Each key has one owning bucket.** A mover moves a whole bucket inside *one* change
//!    of the old bucket (claim 4): `CHANGING` is set before the first entry is placed in the
//!    new table and the store that clears it also sets `MOVED`, after `next` was installed. A
//!    writer that reads `CHANGING` waits until it clears; one that reads `MOVED` follows
//!    `next`. So whenever a writer reads a settled, unmoved state, every entry with the
//!    bucket's hash is in its lines (a writer only inserts where the key's bucket is not
//!    `MOVED`), and two writers of one key serialize on one lock. An *empty* bucket is marked
//!    without the lock: the mover reads a settled, unlocked state, then a tag word of zero and
//!    no overflow line, then swaps that state for the next version with `MOVED` (`Release`,
//!    after `next` was installed). Any insert in between takes the lock and bumps the
//!    version, so the exchange fails and the mover falls back to the locked move; if it
//!    succeeds, the bucket was empty when it became `MOVED`. (Moving a bucket in several
//!    changes and marking it only after the last is not enough: a writer that read a settled
//!    state in between changed the old bucket while some of its entries were already in the
//!    new table, and a removal concluded "absent" for a key that was there. The loom model
//!    found that.)
//! 6. **The old table is retired only once nothing needs it.** The mover of the last bucket
//!    (counted with `AcqRel` increments, so it sees every other mover's placements) makes the
//!    new table current with a `Release` store and retires the old one. Walkers that start
//!    from the new table never look at the old one; walkers that started before still hold a
//!    guard, so the old table, with its overflow lines, is freed after they leave. Nodes are
//!    not freed with it: they live in the new table.
//!
//! Progress: a lookup is wait-free (a bounded scan of one bucket's lines in at most two or
//! three tables; nothing to retry). Writers retry only when another write changed the same
//! bucket in between.
//!
//! # The API, and what is atomic
//!
//! Reads ([`get`](RcuHashMap::get), [`iter`](RcuHashMap::iter), ...) and keyed writes
//! ([`insert`](RcuHashMap::insert), [`remove`](RcuHashMap::remove), ...) take a guard of the
//! map's domain, and what they return (the value found, the value replaced or removed) is
//! valid for that guard, as papaya's are for its pin. [`pin`](RcuHashMap::pin) bundles the
//! map and a guard in a [`MapRef`]; [`get_cloned`](RcuHashMap::get_cloned) reads a `Clone`
//! value without one. Every keyed write is one atomic step with respect to every other write
//! of the same key (it changes one bucket under its lock, after checking that the bucket did
//! not change since its walk: claim 4): [`insert`](RcuHashMap::insert) returns the value it
//! replaced, [`try_insert`](RcuHashMap::try_insert) inserts only an absent key,
//! [`get_or_insert_with`](RcuHashMap::get_or_insert_with) makes a value at most once,
//! [`remove_if`](RcuHashMap::remove_if) removes the entry its condition approved, and
//! [`compute`](RcuHashMap::compute) (with [`update`](RcuHashMap::update) and
//! [`update_or_insert_with`](RcuHashMap::update_or_insert_with)) reads and replaces, inserts
//! or removes in one step. The bulk writes ([`retain`](RcuHashMap::retain),
//! [`clear`](RcuHashMap::clear), [`Extend`]) are atomic per entry, not as a whole; a reader
//! sees each entry old or new, never a mix.
//!
//! # Where user code runs
//!
//! `Hash` and `Eq` run in the calling thread, with no lock of the map held, inside a read-side
//! critical section (the caller's guard, or one the map opens; so they must not wait for a
//! grace period of the map's domain: a `synchronize` there panics, as always inside a guard).
//! The closures of the writers run the same way; those of [`update`](RcuHashMap::update),
//! [`compute`](RcuHashMap::compute) and [`remove_if`](RcuHashMap::remove_if) may run more than
//! once when another writer changes the bucket in between (like `AtomicU64::fetch_update`; so
//! a closure that writes the map itself, on every run, may change its own key's bucket each
//! time and keep the call retrying: write other keys after the call, not inside it); the
//! makers of [`get_or_insert_with`](RcuHashMap::get_or_insert_with) and
//! [`update_or_insert_with`](RcuHashMap::update_or_insert_with) run at most once. Values made
//! by discarded attempts are dropped in the calling thread when the call returns (not while it
//! retries, so that a value whose `Drop` writes to the key's bucket cannot keep the call
//! retrying). Removed and replaced entries are retired (by a guard-taking writer at once, by a
//! [`MapRef`] when it drops, by the bulk writers after their critical section ends), so their
//! `Drop` runs where [retired objects run](crate::docs::internal::callbacks::invoke); a retired
//! entry drops its key and its value apart, so that a panic in one still drops the other (as
//! do the map's own drop and its owning iterator's, which drop every entry, and then let the
//! first panic go on). The iterator given to [`Extend`] and [`FromIterator`] runs outside the
//! map's read-side critical sections (pairs are taken from it 256 at a time, then inserted
//! under one guard), so it may wait for a grace period; the entries' `Clone` in the map's
//! `Clone` runs under a guard of the map cloned.
//!
//! # `Send` and `Sync`
//!
//! `RcuHashMap<K, V, S, D>` is `Sync` when `K` and `V` are `Send + Sync` (readers on many
//! threads share `&K` and `&V`; entries inserted on one thread are dropped on another), `S`
//! is `Sync` and `D` is `Sync`; it is `Send` when `K`, `V`, `S` and `D` are `Send`.
//!
//! # Memory
//!
//! An entry is a node of its own (24 bytes for `u64` keys and values), and a table is a line of
//! 64 bytes per bucket: 52 bytes per entry at a million `u64` entries, counted as resident
//! memory. Removed entries are freed after a grace period; a table whose entries fall below a
//! quarter per bucket is replaced by a smaller one, and the old one freed after a grace period.
//! With glibc, freed nodes stay in the allocator's bins, so once a map has freed 128 KiB (the
//! tables it shrank away and the entries they lost, or all of it when dropped) since it last
//! asked, it asks the allocator to give free pages back to the system (`malloc_trim`, on a
//! callback worker of the map's domain once the old table and the entries removed before it are
//! freed, and at most once a second in the process, so that a map filled and emptied many times
//! a second does not fault its memory in again each time; a trim asked for sooner runs when the
//! second is up, on a thread of its own): a million entries inserted and then all removed leave
//! about 4 MiB resident at once and 0.6 MiB a second later, instead of 35 MiB.
//! [`MapBuilder::trim_allocator`] turns that off. The essay in `map/trim.rs` gives the
//! measurements and the rule.
//!
//! # Thread exit and `fork()`
//!
//! The map keeps no per-thread state. A child forked while another thread of its parent was
//! in the middle of a write (holding a bucket's lock, moving a bucket, with a run of a resize
//! claimed) does not have that thread: its first write rebuilds the map into a fresh table
//! from the nodes the old tables hold, each once, and retires the old tables (`after_fork`;
//! `tests/fork_containers.rs`, whose children hung in their first writes before). A write
//! whose own user code forks (the key's `Eq`, a closure, a key's `Drop`, `retain`'s
//! predicate) holds no lock of the map in the child, and takes none there: the stale-spot
//! check before a lock also refuses a walk from before the fork, and the next attempt starts
//! with the repair.
//! Reads need no repair.
//!
//! [`RcuList`]: crate::RcuList

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
    len: AtomicUsize,
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
        if self.policy.trim_allocator && self.freed.count(bytes) {
            trim::after_retired(self.domain.rcu());
        }
    }
}

impl<K, V, S, D: DomainRef> Drop for RcuHashMap<K, V, S, D> {
    fn drop(&mut self) {
        let root = self.root.load(Relaxed);
        // SAFETY: `&mut self`: the root table is alive until `take_all` below.
        let bytes = unsafe { (*root).bytes() } + self.len() * std::mem::size_of::<Node<K, V>>();
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
        // SAFETY: we own the map, and it is forgotten below (its drop never runs again).
        let nodes = unsafe { table::take_all(self.root.load(Relaxed), self.forked()) };
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: the hasher and the handle are moved out exactly once, here, and dropped;
        // the map itself is never dropped (ManuallyDrop).
        drop(unsafe { (ptr::read(&this.hasher), ptr::read(&this.domain)) });
        IntoIter {
            nodes: nodes.into_iter(),
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
