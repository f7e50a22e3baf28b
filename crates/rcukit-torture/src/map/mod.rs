//! The `map` runs: an [`rcukit::RcuHashMap`] (the `map` flavor) or an [`rcukit::RcuFlatMap`]
//! (`flat-map`, and `qsbr-flat-map` on a QSBR domain) tortured with the pipe's method.
//!
//! A map run is the `rcu` run (or the `qsbr` run: same domain, writer, updaters, readers,
//! faults and checks) plus a hash map built on that domain, whose values are elements of a
//! second [`Pool`]:
//!
//! * **Values.** A map value is a handle on a pool element, with the key it was inserted under.
//!   The map writer that owns a key moves the element it is about to remove or replace from
//!   age 0 to age 1 (removed from reader view: readers may still see it), then calls
//!   `insert`, `update`, `compute`, `remove`, `retain` or `clear`. A handle may be cloned
//!   (the flat map clones the live entries into each new table, and returns clones of what
//!   its writes replace), and the element counts its handles: the `Drop` of its last one
//!   moves it from 1 to 2. The map must drop that one only after a grace period, when no reader that found a
//!   handle of the element can still hold its guard. From then on the map writers age it once
//!   per grace period they wait for, and free it at [`PIPE_LEN`], as the `rcu` writer does with
//!   its elements. A last `Drop` that finds age 0 (the map dropped a value still in it) or 2
//!   and more (dropped twice), a `Drop` of a handle the count says is gone, and a clone of an
//!   element whose handles were all dropped are errors. The hash map drops a removed value a
//!   grace period after its removal; the flat map keeps it in the table's slot until a rebuild
//!   replaces the table, and drops it with that table a grace period later (a writer that
//!   finds the pool empty calls `shrink_to_fit`, which rebuilds, before it waits). The hash
//!   map's `update` closure may run more than once (when another writer changed the bucket
//!   meanwhile) and the map drops the values of the runs it discards at once, unpublished:
//!   those are marked as candidates until `update` returns, and their drop frees them directly
//!   (counted as discarded). The flat map runs it once, under its writer lock.
//! * **Readers.** Each reader section of a `map` run also takes a guard of the map's domain (a
//!   QSBR reader passes the map its own online registration instead) and looks up a few keys
//!   (`get`, `get_key_value` or `contains_key`; now and then the whole
//!   `iter`, which must yield each stable key exactly once; one iteration in four is *held*:
//!   it pauses part-way, inside its section, while the writers' bursts grow and shrink the
//!   table, and the report counts the iterations a resize happened during). A found value must carry the key it was found under and an element that is not
//!   free (`mbtest`); the ages of the elements found are read at the end of the section,
//!   before the guard drops (the Map Pipe histogram: anything past 1 means the map dropped a
//!   value while a reader that found it was still inside its section). The stable keys are
//!   never removed, only replaced: a lookup that misses one is an error.
//! * **Map writers** ([`MAP_WRITERS`] threads). Each owns a share of the keys, so it knows what
//!   every call must return (`insert` true on a present key, `remove` true, ...; anything else
//!   is a result error). They replace stable keys, insert and remove churned keys, and, every
//!   0.1-0.5 s, run a burst: insert 2,000-12,000 keys of their own, touch a few while the table
//!   is large, then remove them all (one by one in some order, with replacements in between,
//!   or with one `retain`), so the table grows from tens of buckets to thousands and
//!   shrinks back, over and over, while readers look keys up. One burst in three first calls
//!   `reserve` for its keys and ends with `shrink_to_fit`: the table jumps several doublings
//!   up in one resize and several halvings down in another (the hash map's movers then place
//!   nodes whose index hints are used up), racing the other writer's bursts, which grow and
//!   shrink it a step at a time. Half of the bursts also run a
//!   `retain` that keeps everything while the table is large, racing the readers' held
//!   iterations and the other writer's resizes: it must visit each stable key exactly once. They record the capacities they
//!   see (`capacity()` after each step).
//! * **The clear race** (`map` runs, `map/clear_race.rs`). The map above is cleared only at the
//!   end, since its stable keys must stay. A second `RcuHashMap` on the same domain, outside
//!   these books, is grown and emptied by one thread in bursts while another `clear()`s it
//!   every 0.1-1 ms, so that clears walk tables being resized into; its own books (every value
//!   dropped once, none found dead by the clearer's lookups) count as map errors.
//! * **The end.** After the run, the writers' keys are marked removed and the map is
//!   `clear()`ed; after `barrier()` and [`PIPE_LEN`] grace periods every value must have been
//!   dropped exactly once and every element be back in the free list.
//!
//! The `busted-map` run builds the hash map with `__busted_drop_values_at_once`: removed
//! values are dropped at once on the writer thread. The `busted-flat-map` run builds the flat
//! map with `__busted_drop_entries_at_once`: a table that a rebuild replaced drops its entries
//! at once, removed values with them. Readers then see ages past 1, and the run must report
//! FAILURE.

mod clear_race;
mod report;
mod section;
mod under_test;

pub(crate) use clear_race::ClearRace;
pub use clear_race::ClearRaceReport;
pub use report::MapReport;
pub(crate) use section::{MapLocal, MapSection};
pub use under_test::MapKind;
pub(crate) use under_test::{MapDomain, MapGuard, MapUnderTest};

use crate::counters::Histogram;
use crate::flavor::Flavor;
use crate::pipe::{Pool, PIPE_LEN};
use parking_lot::Mutex;
use std::ops::RangeInclusive;
use std::sync::atomic::Ordering::{AcqRel, Relaxed};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::Arc;

/// Map writer threads (each owns every `MAP_WRITERS`th stable and churned key, and its own
/// burst keys).
pub const MAP_WRITERS: usize = 2;

/// Keys `0..STABLE_KEYS`: present from before the run starts to its end, only replaced. A
/// lookup that misses one is an error.
pub const STABLE_KEYS: u64 = 8;

/// Keys `STABLE_KEYS..STABLE_KEYS + CHURN_KEYS`: inserted and removed all the time.
pub const CHURN_KEYS: u64 = 24;

/// Keys one burst inserts, then removes.
pub const BURST_KEYS: RangeInclusive<u64> = 2_000..=12_000;

/// Time between two bursts of one map writer, in milliseconds.
pub(crate) const BURST_EVERY_MS: RangeInclusive<u64> = 100..=500;

/// The first burst key; writer `w`'s keys start at `BURST_BASE + w * BURST_STRIDE`.
const BURST_BASE: u64 = 1 << 32;
const BURST_STRIDE: u64 = 1 << 24;

/// A capacity at least this large, then one at most [`CYCLE_LOW`], counts one resize cycle.
pub const CYCLE_HIGH: usize = 2_048;
/// See [`CYCLE_HIGH`].
pub const CYCLE_LOW: usize = 256;

/// Elements of the value pool: every live key, three bursts' worth per writer (one in the
/// map, up to two still aging), and some slack. The writer waits for grace periods when it
/// runs out.
pub const VALUE_POOL: usize =
    (STABLE_KEYS + CHURN_KEYS) as usize + MAP_WRITERS * 3 * (*BURST_KEYS.end() as usize) + 1_024;

/// Values a reader section checks at its end (lookups past this are checked on the spot only).
const MAX_SEEN: usize = 16;

/// Errors described in the report (the counts cover all of them).
const MAX_NOTES: usize = 8;

/// A reader section iterates the whole map once in this many.
const ITER_ONE_IN: u32 = 1_024;

/// One iteration in this many is held across resizes (see `MapSection::iterate`).
pub(super) const HELD_ONE_IN: u32 = 4;

/// A map value: a handle on an element of the value pool, and the key it was inserted under.
/// Its fields are plain integers that a reader copies out; only `Clone` and `Drop` touch the
/// pool.
pub(crate) struct Value {
    pub(crate) key: u64,
    pub(crate) index: u32,
    pub(crate) values: Arc<Values>,
}

impl Clone for Value {
    fn clone(&self) -> Value {
        self.values.cloned(self.key, self.index as usize);
        Value {
            key: self.key,
            index: self.index,
            values: Arc::clone(&self.values),
        }
    }
}

impl Drop for Value {
    fn drop(&mut self) {
        self.values.dropped(self.key, self.index as usize);
    }
}

/// The value pool and what the values' `Drop` counts.
pub(crate) struct Values {
    pub(crate) pool: Pool,
    /// Elements made by a run of `update`'s closure, until `update` returns: if the map
    /// discards the value, its drop frees the element directly.
    pub(crate) candidate: Box<[AtomicBool]>,
    /// Candidate values the map discarded (dropped unpublished).
    pub(crate) discarded: AtomicU64,
    /// The handles of each element (a value and its clones) not dropped yet.
    pub(crate) handles: Box<[AtomicU32]>,
    /// `Clone` calls.
    pub(crate) clones: AtomicU64,
    /// Clones of an element whose handles were all dropped, or that had aged past 1, and
    /// fresh values of an element that still had handles (errors).
    pub(crate) dead_clones: AtomicU64,
    /// Elements whose value the map dropped (age 2), waiting for a map writer to age them.
    pub(crate) released: Mutex<Vec<usize>>,
    /// Drops of an element's last handle.
    pub(crate) drops: AtomicU64,
    /// Values dropped while their element was at age 0: still in the map for their writer.
    pub(crate) live_drops: AtomicU64,
    /// Values dropped when their element was already past age 1, or with no handle left:
    /// dropped twice.
    pub(crate) double_drops: AtomicU64,
    /// Set on either error (the `--stop-on-error` watchdog reads it).
    pub(crate) failed: AtomicBool,
    /// The first few errors of the map writers and of the values' drops, in words.
    pub(crate) notes: Mutex<Vec<String>>,
}

impl Values {
    /// Keep the description of an error, if fewer than [`MAX_NOTES`] were kept.
    pub(crate) fn note(&self, what: impl FnOnce() -> String) {
        let mut notes = self.notes.lock();
        if notes.len() < MAX_NOTES {
            notes.push(what());
        }
    }

    /// A handle of element `index` was cloned.
    pub(crate) fn cloned(&self, key: u64, index: usize) {
        self.clones.fetch_add(1, Relaxed);
        let handles = self.handles[index].fetch_add(1, AcqRel);
        let age = self.pool.age(index);
        if handles == 0 || age > 1 {
            self.dead_clones.fetch_add(1, Relaxed);
            self.failed.store(true, Relaxed);
            self.note(|| {
                format!(
                    "the value of key {key:#x} (element {index}) was cloned with {handles} \
                     handles left, at age {age}"
                )
            });
        }
    }

    /// A handle of element `index` was dropped: if it was the last one, the element's value is
    /// gone (see the module docs).
    pub(crate) fn dropped(&self, key: u64, index: usize) {
        match self.handles[index].fetch_update(AcqRel, Relaxed, |n| n.checked_sub(1)) {
            Ok(1) => {}
            Ok(_) => return,
            Err(_) => {
                self.double_drops.fetch_add(1, Relaxed);
                self.failed.store(true, Relaxed);
                self.note(|| {
                    format!(
                        "a value of key {key:#x} (element {index}) was dropped after every \
                         handle of its element was"
                    )
                });
                return;
            }
        }
        if self.candidate[index].swap(false, Relaxed) {
            self.discarded.fetch_add(1, Relaxed);
            self.pool.free_unpublished(index);
            return;
        }
        self.drops.fetch_add(1, Relaxed);
        match self.pool.advance_from(index, 1) {
            Ok(()) => self.released.lock().push(index),
            Err(0) => {
                self.live_drops.fetch_add(1, Relaxed);
                self.failed.store(true, Relaxed);
                self.note(|| {
                    format!(
                        "the value of key {key:#x} (element {index}) was dropped while its \
                         writer still had it in the map"
                    )
                });
            }
            Err(age) => {
                self.double_drops.fetch_add(1, Relaxed);
                self.failed.store(true, Relaxed);
                self.note(|| {
                    format!(
                        "the value of key {key:#x} (element {index}) was dropped at age {age}: \
                         a second time"
                    )
                });
            }
        }
    }

    pub(crate) fn take_released(&self, into: &mut Vec<usize>) {
        into.append(&mut self.released.lock());
    }
}

/// What the map part of a run counts.
#[derive(Debug)]
pub(crate) struct MapCounters {
    /// Map Pipe: the age of each value a reader found, read at the end of its section.
    pub(crate) pipe: Histogram,
    pub(crate) lookups: AtomicU64,
    pub(crate) stable_lookups: AtomicU64,
    pub(crate) hits: AtomicU64,
    pub(crate) iterations: AtomicU64,
    pub(crate) iter_entries: AtomicU64,
    pub(crate) iter_stable_missing: AtomicU64,
    pub(crate) iter_stable_duplicates: AtomicU64,
    pub(crate) held_iterations: AtomicU64,
    pub(crate) iter_across_resizes: AtomicU64,
    pub(crate) checking_retains: AtomicU64,
    pub(crate) stable_misses: AtomicU64,
    pub(crate) update_retries: AtomicU64,
    pub(crate) value_mismatches: AtomicU64,
    pub(crate) mbtest_errors: AtomicU64,

    pub(crate) inserts: AtomicU64,
    pub(crate) replaces: AtomicU64,
    pub(crate) updates: AtomicU64,
    pub(crate) computes: AtomicU64,
    pub(crate) removes: AtomicU64,
    pub(crate) retains: AtomicU64,
    pub(crate) bursts: AtomicU64,
    pub(crate) burst_keys: AtomicU64,
    pub(crate) reserves: AtomicU64,
    pub(crate) shrinks_to_fit: AtomicU64,
    pub(crate) waits: AtomicU64,
    pub(crate) alloc_failures: AtomicU64,
    pub(crate) result_errors: AtomicU64,

    pub(crate) capacity_first: AtomicU64,
    pub(crate) capacity_last: AtomicU64,
    pub(crate) capacity_min: AtomicU64,
    pub(crate) capacity_max: AtomicU64,
    pub(crate) grows: AtomicU64,
    pub(crate) shrinks: AtomicU64,
    pub(crate) cycles: AtomicU64,
    pub(crate) cycle_armed: AtomicBool,
    pub(crate) len_max: AtomicU64,
}

impl MapCounters {
    pub(crate) fn new(capacity: usize) -> MapCounters {
        let c = capacity as u64;
        MapCounters {
            pipe: Histogram::new(),
            lookups: AtomicU64::new(0),
            stable_lookups: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            iterations: AtomicU64::new(0),
            iter_entries: AtomicU64::new(0),
            iter_stable_missing: AtomicU64::new(0),
            iter_stable_duplicates: AtomicU64::new(0),
            held_iterations: AtomicU64::new(0),
            iter_across_resizes: AtomicU64::new(0),
            checking_retains: AtomicU64::new(0),
            stable_misses: AtomicU64::new(0),
            update_retries: AtomicU64::new(0),
            value_mismatches: AtomicU64::new(0),
            mbtest_errors: AtomicU64::new(0),
            inserts: AtomicU64::new(0),
            replaces: AtomicU64::new(0),
            updates: AtomicU64::new(0),
            computes: AtomicU64::new(0),
            removes: AtomicU64::new(0),
            retains: AtomicU64::new(0),
            bursts: AtomicU64::new(0),
            burst_keys: AtomicU64::new(0),
            reserves: AtomicU64::new(0),
            shrinks_to_fit: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            alloc_failures: AtomicU64::new(0),
            result_errors: AtomicU64::new(0),
            capacity_first: AtomicU64::new(c),
            capacity_last: AtomicU64::new(c),
            capacity_min: AtomicU64::new(c),
            capacity_max: AtomicU64::new(c),
            grows: AtomicU64::new(0),
            shrinks: AtomicU64::new(0),
            cycles: AtomicU64::new(0),
            cycle_armed: AtomicBool::new(false),
            len_max: AtomicU64::new(0),
        }
    }
}

/// Keys and elements the map writers hand over: the stable keys inserted before the run
/// (taken by their writers when they start), and at the end everything the writers held.
#[derive(Default)]
pub(crate) struct Handoff {
    /// Keys present in the map, with their elements.
    pub(crate) live: Vec<(u64, usize)>,
    /// Elements removed from the map that are still aging.
    pub(crate) removed: Vec<usize>,
}

/// The map part of a run.
pub(crate) struct MapTorture {
    pub(crate) map: MapUnderTest,
    pub(crate) values: Arc<Values>,
    pub(crate) counters: MapCounters,
    pub(crate) busted: bool,
    pub(crate) handoff: Mutex<Handoff>,
    /// The clear race, in the `map` runs (see `clear_race`).
    pub(crate) clear_race: Option<ClearRace>,
}

impl MapTorture {
    /// A map of `kind` on `domain`, holding the stable keys. `busted`: removed values are
    /// dropped at once (the self-test, which must fail).
    pub(crate) fn new(
        kind: MapKind,
        domain: MapDomain,
        busted: bool,
    ) -> Result<MapTorture, rcukit::Error> {
        let clear_race = match &domain {
            MapDomain::Rcu(domain) if kind == MapKind::Hash => {
                Some(ClearRace::new(Arc::clone(domain))?)
            }
            _ => None,
        };
        let map = MapUnderTest::new(kind, domain, busted)?;
        let values = Arc::new(Values {
            pool: Pool::new(VALUE_POOL),
            candidate: (0..VALUE_POOL).map(|_| AtomicBool::new(false)).collect(),
            discarded: AtomicU64::new(0),
            handles: (0..VALUE_POOL).map(|_| AtomicU32::new(0)).collect(),
            clones: AtomicU64::new(0),
            dead_clones: AtomicU64::new(0),
            released: Mutex::new(Vec::new()),
            drops: AtomicU64::new(0),
            live_drops: AtomicU64::new(0),
            double_drops: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            notes: Mutex::new(Vec::new()),
        });
        // The pool makes element 0 its "current" element; the map torture has none, so it
        // stays unused (it is counted as such at the end).
        let mut live = Vec::new();
        for key in 0..STABLE_KEYS {
            let index = values
                .pool
                .alloc()
                .expect("the value pool holds the stable keys");
            map.insert(key, value(&values, key, index), false);
            live.push((key, index));
        }
        let counters = MapCounters::new(map.capacity());
        Ok(MapTorture {
            map,
            values,
            counters,
            busted,
            handoff: Mutex::new(Handoff {
                live,
                removed: Vec::new(),
            }),
            clear_race,
        })
    }

    /// Whether a value's `Drop` found an error (the readers' and writers' errors raise the
    /// engine's flag directly).
    pub(crate) fn failed(&self) -> bool {
        self.values.failed.load(Relaxed) || self.clear_race.as_ref().is_some_and(ClearRace::failed)
    }

    pub(crate) fn observe_capacity(&self) {
        let c = &self.counters;
        let cap = self.map.capacity();
        let capacity = cap as u64;
        c.len_max.fetch_max(self.map.len() as u64, Relaxed);
        c.capacity_min.fetch_min(capacity, Relaxed);
        c.capacity_max.fetch_max(capacity, Relaxed);
        let prev = c.capacity_last.swap(capacity, Relaxed);
        if capacity > prev {
            c.grows.fetch_add(1, Relaxed);
        } else if capacity < prev {
            c.shrinks.fetch_add(1, Relaxed);
        }
        if cap >= CYCLE_HIGH {
            c.cycle_armed.store(true, Relaxed);
        } else if cap <= CYCLE_LOW && c.cycle_armed.swap(false, Relaxed) {
            c.cycles.fetch_add(1, Relaxed);
        }
    }
}

/// The first handle of element `index`, a fresh element.
pub(crate) fn value(values: &Arc<Values>, key: u64, index: usize) -> Value {
    let left = values.handles[index].swap(1, AcqRel);
    if left != 0 {
        values.dead_clones.fetch_add(1, Relaxed);
        values.failed.store(true, Relaxed);
        values.note(|| format!("element {index} was handed out with {left} handles left"));
    }
    Value {
        key,
        index: u32::try_from(index).expect("pool indices fit in u32"),
        values: values.clone(),
    }
}

pub(crate) fn is_stable(key: u64) -> bool {
    key < STABLE_KEYS
}

pub(crate) fn burst_base(writer: usize) -> u64 {
    BURST_BASE + writer as u64 * BURST_STRIDE
}

/// The end of a map run, after every thread stopped and the callbacks drained: remove what is
/// left, let the map drop it, age every element to the end of the pipe, and check the books.
pub(crate) fn finish<F: Flavor>(flavor: &F, m: &MapTorture, problems: &mut Vec<String>) {
    if let Some(race) = &m.clear_race {
        race.finish(problems);
    }
    let Handoff { live, mut removed } = std::mem::take(&mut *m.handoff.lock());
    check_live(m, &live, problems);
    m.map.clear();
    if !m.map.is_empty() {
        problems.push(format!("map.len() is {} after clear()", m.map.len()));
    }
    if age_out(flavor, m, &mut removed, problems) {
        check_value_books(m, problems);
    }
}

/// The keys the writers hold at the end of the run are in the map, with their values, at
/// age 0.
fn check_live(m: &MapTorture, live: &[(u64, usize)], problems: &mut Vec<String>) {
    let pool = &m.values.pool;
    let len = m.map.len();
    if len != live.len() {
        problems.push(format!(
            "map.len() is {len} at the end of the run, but its writers hold {} keys",
            live.len()
        ));
    }
    let guard = m.map.guard();
    for &(key, element) in live {
        match m.map.get(key, &guard) {
            Some(v) if v.key == key && v.index as usize == element => {}
            _ => problems.push(format!(
                "at the end of the run, key {key} does not hold the value its writer put there"
            )),
        }
        if pool.advance_from(element, 0).is_err() {
            problems.push(format!("the element of key {key} aged while in the map"));
        }
    }
}

/// Wait until every value the map removed was dropped and its element aged to the end of the
/// pipe; false (and a problem) if that takes too many grace periods.
fn age_out<F: Flavor>(
    flavor: &F,
    m: &MapTorture,
    removed: &mut Vec<usize>,
    problems: &mut Vec<String>,
) -> bool {
    let pool = &m.values.pool;
    // The map drops what it removed after grace periods; then each element needs PIPE_LEN - 2
    // more to be free.
    let mut rounds = 0;
    loop {
        flavor.barrier();
        m.values.take_released(removed);
        let dropped = m.values.drops.load(Relaxed) + m.values.discarded.load(Relaxed);
        if removed.is_empty() && dropped >= pool.allocated.load(Relaxed) {
            break;
        }
        rounds += 1;
        if rounds > 4 * PIPE_LEN {
            problems.push(format!(
                "map values still not dropped and aged {} grace periods after clear(): {} drops \
                 of {} values, {} elements aging",
                4 * PIPE_LEN,
                m.values.drops.load(Relaxed),
                pool.allocated.load(Relaxed),
                removed.len()
            ));
            return false;
        }
        flavor.synchronize();
        pool.age_all(removed);
    }
    true
}

/// Every map value created was dropped (or discarded by `update`), and every element is back
/// on the free list.
fn check_value_books(m: &MapTorture, problems: &mut Vec<String>) {
    let pool = &m.values.pool;
    let drops = m.values.drops.load(Relaxed);
    let discarded = m.values.discarded.load(Relaxed);
    let allocated = pool.allocated.load(Relaxed);
    if drops + discarded != allocated {
        problems.push(format!(
            "{allocated} map values were created and {drops} dropped ({discarded} more \
             discarded by update)"
        ));
    }
    // Element 0 is the pool's unused "current" element.
    let free = pool.free_count();
    if free + 1 != pool.size() {
        problems.push(format!(
            "{} of {} map value elements did not come back to the free list",
            pool.size() - 1 - free,
            pool.size() - 1
        ));
    }
}
