//! The `map` runs: an [`rcukit::RcuHashMap`] tortured with the pipe's method.
//!
//! A `map` run is the `rcu` run (same domain, writer, updaters, readers, faults and checks)
//! plus a hash map built on that domain, whose values are elements of a second [`Pool`]:
//!
//! * **Values.** A map value is a handle on a pool element, with the key it was inserted under.
//!   The map writer that owns a key moves the element it is about to remove or replace from
//!   age 0 to age 1 (removed from reader view: readers may still see it), then calls
//!   `insert`, `update`, `remove`, `retain` or `clear`. The handle's `Drop` moves the element
//!   from 1 to 2: the map must drop it only after a grace period, when no reader that found it
//!   can still hold its guard. From then on the map writers age it once per grace period they
//!   wait for, and free it at [`PIPE_LEN`], as the `rcu` writer does with its elements. A
//!   `Drop` that finds age 0 (the map dropped a value still in it) or 2 and more (dropped
//!   twice) is an error. `update`'s closure may run more than once (when another writer
//!   changed the bucket meanwhile) and the map drops the values of the runs it discards at
//!   once, unpublished: those are marked as candidates until `update` returns, and their drop
//!   frees them directly (counted as discarded).
//! * **Readers.** Each reader section of a `map` run also takes a guard of the map's domain and
//!   looks up a few keys (`get`, `get_key_value` or `contains_key`; now and then the whole
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
//!   or with one `retain`), so the table grows from tens of buckets to over ten thousand and
//!   shrinks back, over and over, while readers look keys up. Half of the bursts also run a
//!   `retain` that keeps everything while the table is large, racing the readers' held
//!   iterations and the other writer's resizes: it must visit each stable key exactly once. They record the capacities they
//!   see (`capacity()` after each step).
//! * **The end.** After the run, the writers' keys are marked removed and the map is
//!   `clear()`ed; after `barrier()` and [`PIPE_LEN`] grace periods every value must have been
//!   dropped exactly once and every element be back in the free list.
//!
//! The `busted-map` run builds the map with `__busted_drop_values_at_once`: removed values are
//! dropped at once on the writer thread. Readers then see ages past 1, and the run must report
//! FAILURE.

use crate::counters::{Counters, Histogram, LocalHistogram, BUCKETS};
use crate::engine::Shared;
use crate::flavor::{Flavor, UpdateKind};
use crate::pipe::{Pool, PIPE_LEN};
use crate::update::wait_for_gp;
use fastrand::Rng;
use parking_lot::Mutex;
use rcukit::{Guard, Rcu, RcuHashMap};
use std::collections::hash_map::RandomState;
use std::ops::RangeInclusive;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
const BURST_EVERY_MS: RangeInclusive<u64> = 100..=500;

/// The first burst key; writer `w`'s keys start at `BURST_BASE + w * BURST_STRIDE`.
const BURST_BASE: u64 = 1 << 32;
const BURST_STRIDE: u64 = 1 << 24;

/// A capacity at least this large, then one at most [`CYCLE_LOW`], counts one resize cycle.
pub const CYCLE_HIGH: usize = 8_192;
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
const HELD_ONE_IN: u32 = 4;

/// The map under test.
pub(crate) type Map = RcuHashMap<u64, Value, RandomState, Arc<Rcu>>;

/// A map value: a handle on an element of the value pool, and the key it was inserted under.
/// Its fields are plain integers that a reader copies out; only `Drop` touches the pool.
pub(crate) struct Value {
    key: u64,
    index: u32,
    values: Arc<Values>,
}

impl Drop for Value {
    fn drop(&mut self) {
        self.values.dropped(self.key, self.index as usize);
    }
}

/// The value pool and what the values' `Drop` counts.
pub(crate) struct Values {
    pool: Pool,
    /// Elements made by a run of `update`'s closure, until `update` returns: if the map
    /// discards the value, its drop frees the element directly.
    candidate: Box<[AtomicBool]>,
    /// Candidate values the map discarded (dropped unpublished).
    discarded: AtomicU64,
    /// Elements whose value the map dropped (age 2), waiting for a map writer to age them.
    released: Mutex<Vec<usize>>,
    /// `Drop` calls.
    drops: AtomicU64,
    /// Values dropped while their element was at age 0: still in the map for their writer.
    live_drops: AtomicU64,
    /// Values dropped when their element was already past age 1: dropped twice.
    double_drops: AtomicU64,
    /// Set on either error (the `--stop-on-error` watchdog reads it).
    failed: AtomicBool,
    /// The first few errors of the map writers and of the values' drops, in words.
    notes: Mutex<Vec<String>>,
}

impl Values {
    /// Keep the description of an error, if fewer than [`MAX_NOTES`] were kept.
    fn note(&self, what: impl FnOnce() -> String) {
        let mut notes = self.notes.lock();
        if notes.len() < MAX_NOTES {
            notes.push(what());
        }
    }

    fn dropped(&self, key: u64, index: usize) {
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

    fn take_released(&self, into: &mut Vec<usize>) {
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
    pub(crate) removes: AtomicU64,
    pub(crate) retains: AtomicU64,
    pub(crate) bursts: AtomicU64,
    pub(crate) burst_keys: AtomicU64,
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
    cycle_armed: AtomicBool,
    pub(crate) len_max: AtomicU64,
}

impl MapCounters {
    fn new(capacity: usize) -> MapCounters {
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
            removes: AtomicU64::new(0),
            retains: AtomicU64::new(0),
            bursts: AtomicU64::new(0),
            burst_keys: AtomicU64::new(0),
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
struct Handoff {
    /// Keys present in the map, with their elements.
    live: Vec<(u64, usize)>,
    /// Elements removed from the map that are still aging.
    removed: Vec<usize>,
}

/// The map part of a run.
pub(crate) struct MapTorture {
    pub(crate) map: Map,
    pub(crate) values: Arc<Values>,
    pub(crate) counters: MapCounters,
    busted: bool,
    handoff: Mutex<Handoff>,
}

impl MapTorture {
    /// A map on `domain`, holding the stable keys. `busted`: removed values are dropped at
    /// once (the self-test, which must fail).
    pub(crate) fn new(domain: Arc<Rcu>, busted: bool) -> Result<MapTorture, rcukit::Error> {
        let mut builder = RcuHashMap::builder().domain(domain);
        if busted {
            // The values are `Value`s, plain integers plus an `Arc` that readers never touch;
            // the map keeps the node memory until a grace period has passed, so a reader that
            // copies a dropped value's integers reads initialized memory. The torture exists
            // to see this misuse reported.
            // SAFETY: as just said, dropped values stay readable as plain integers.
            builder = unsafe { builder.__busted_drop_values_at_once() };
        }
        let map: Map = builder.build()?;
        let values = Arc::new(Values {
            pool: Pool::new(VALUE_POOL),
            candidate: (0..VALUE_POOL).map(|_| AtomicBool::new(false)).collect(),
            discarded: AtomicU64::new(0),
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
            map.pin().insert(key, value(&values, key, index));
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
        })
    }

    /// Whether a value's `Drop` found an error (the readers' and writers' errors raise the
    /// engine's flag directly).
    pub(crate) fn failed(&self) -> bool {
        self.values.failed.load(Relaxed)
    }

    /// A reader's map section: a guard of the map's domain, taken inside the reader's own
    /// section.
    pub(crate) fn section(&self) -> MapSection<'_> {
        MapSection {
            m: self,
            guard: self.map.domain().read(),
            seen: [0; MAX_SEEN],
            len: 0,
        }
    }

    fn observe_capacity(&self) {
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

fn value(values: &Arc<Values>, key: u64, index: usize) -> Value {
    Value {
        key,
        index: u32::try_from(index).expect("pool indices fit in u32"),
        values: values.clone(),
    }
}

fn is_stable(key: u64) -> bool {
    key < STABLE_KEYS
}

fn burst_base(writer: usize) -> u64 {
    BURST_BASE + writer as u64 * BURST_STRIDE
}

/// What a reader thread counts for the map, flushed with its other counts.
#[derive(Default)]
pub(crate) struct MapLocal {
    pipe: LocalHistogram,
    lookups: u64,
    stable_lookups: u64,
    hits: u64,
    iterations: u64,
    iter_entries: u64,
    held_iterations: u64,
    iter_across_resizes: u64,
}

impl MapLocal {
    pub(crate) fn flush(&mut self, m: &MapTorture) {
        let c = &m.counters;
        c.pipe.add(&self.pipe);
        c.lookups.fetch_add(self.lookups, Relaxed);
        c.stable_lookups.fetch_add(self.stable_lookups, Relaxed);
        c.hits.fetch_add(self.hits, Relaxed);
        c.iterations.fetch_add(self.iterations, Relaxed);
        c.iter_entries.fetch_add(self.iter_entries, Relaxed);
        c.held_iterations.fetch_add(self.held_iterations, Relaxed);
        c.iter_across_resizes
            .fetch_add(self.iter_across_resizes, Relaxed);
        *self = MapLocal::default();
    }
}

/// A reader's lookups inside one of its sections, under a guard of the map's domain.
pub(crate) struct MapSection<'m> {
    m: &'m MapTorture,
    guard: Guard<'m>,
    /// Elements found, checked at the end of the section.
    seen: [u32; MAX_SEEN],
    len: usize,
}

impl MapSection<'_> {
    /// Look up one to three keys (now and then: iterate the whole map).
    pub(crate) fn lookups(&mut self, counters: &Counters, rng: &mut Rng, local: &mut MapLocal) {
        if rng.u32(0..ITER_ONE_IN) == 0 {
            self.iterate(counters, rng, local);
        }
        for _ in 0..rng.u32(1..=3) {
            let key = match rng.u32(0..10) {
                0..=4 => rng.u64(0..STABLE_KEYS),
                5..=6 => rng.u64(STABLE_KEYS..STABLE_KEYS + CHURN_KEYS),
                _ => burst_base(rng.usize(0..MAP_WRITERS)) + rng.u64(0..=*BURST_KEYS.end() + 100),
            };
            self.lookup(key, counters, rng, local);
        }
    }

    fn lookup(&mut self, key: u64, counters: &Counters, rng: &mut Rng, local: &mut MapLocal) {
        let map = &self.m.map;
        local.lookups += 1;
        let stable = is_stable(key);
        if stable {
            local.stable_lookups += 1;
        }
        let found = match rng.u32(0..8) {
            0 => {
                let found = map.contains_key(&key, &self.guard);
                if found {
                    local.hits += 1;
                } else if stable {
                    counters.error(&self.m.counters.stable_misses, 1);
                }
                return;
            }
            1..=2 => map.get_key_value(&key, &self.guard).map(|(k, v)| {
                if *k != key {
                    counters.error(&self.m.counters.value_mismatches, 1);
                }
                (v.key, v.index)
            }),
            _ => map.get(&key, &self.guard).map(|v| (v.key, v.index)),
        };
        match found {
            Some((value_key, index)) => {
                local.hits += 1;
                self.check(key, value_key, index, counters);
            }
            None if stable => counters.error(&self.m.counters.stable_misses, 1),
            None => {}
        }
    }

    /// A value found under `key`: it must carry that key and a live element; its element's
    /// age is read again at the end of the section.
    fn check(&mut self, key: u64, value_key: u64, index: u32, counters: &Counters) {
        let c = &self.m.counters;
        let pool = &self.m.values.pool;
        if value_key != key || index as usize >= pool.size() {
            counters.error(&c.value_mismatches, 1);
            return;
        }
        if pool.mbtest(index as usize) == 0 {
            counters.error(&c.mbtest_errors, 1);
        }
        if self.len < MAX_SEEN {
            self.seen[self.len] = index;
            self.len += 1;
        }
    }

    /// Iterate the whole map and check that each stable key is yielded exactly once. One
    /// iteration in [`HELD_ONE_IN`] is *held*: after a few entries it pauses inside the
    /// section (yielding and napping up to a millisecond) while the writers' bursts grow and
    /// shrink the table and their `retain`s race it, then goes on.
    fn iterate(&mut self, counters: &Counters, rng: &mut Rng, local: &mut MapLocal) {
        local.iterations += 1;
        let held = rng.u32(0..HELD_ONE_IN) == 0;
        let pause_after = rng.usize(0..8);
        let capacity_before = self.m.map.capacity();
        let mut stable_seen = [0u32; STABLE_KEYS as usize];
        let mut found = Vec::new();
        for (n, (key, v)) in self.m.map.iter(&self.guard).enumerate() {
            if held && n == pause_after {
                local.held_iterations += 1;
                for _ in 0..rng.u32(1..=16) {
                    std::thread::yield_now();
                }
                std::thread::sleep(Duration::from_micros(rng.u64(0..=1_000)));
            }
            local.iter_entries += 1;
            if is_stable(*key) {
                stable_seen[*key as usize] += 1;
            }
            found.push((*key, v.key, v.index));
        }
        if self.m.map.capacity() != capacity_before {
            local.iter_across_resizes += 1;
        }
        for (key, value_key, index) in found {
            self.check(key, value_key, index, counters);
        }
        // `iter` yields every entry present throughout the iteration exactly once.
        if stable_seen.contains(&0) {
            counters.error(&self.m.counters.iter_stable_missing, 1);
        }
        if stable_seen.iter().any(|&n| n > 1) {
            counters.error(&self.m.counters.iter_stable_duplicates, 1);
        }
    }

    /// The end of the reader's section: read the age of every element found (Map Pipe), then
    /// drop the guard.
    pub(crate) fn finish(self, counters: &Counters, local: &mut MapLocal) {
        for &index in &self.seen[..self.len] {
            let age = self.m.values.pool.age(index as usize);
            local.pipe.record(u64::from(age));
            if age > 1 {
                counters.failed.store(true, Relaxed);
            }
        }
        drop(self.guard);
    }
}

/// A key a map writer owns and the element its value holds (`None`: absent).
struct Owned {
    key: u64,
    element: Option<usize>,
}

/// One map writer thread's state. Its `Drop` hands its keys and aging elements over to the end
/// of the run, even if the thread panicked.
struct MapWriter<'a, F: Flavor> {
    shared: &'a Shared<F>,
    m: &'a MapTorture,
    id: usize,
    rng: Rng,
    stable: Vec<Owned>,
    churn: Vec<Owned>,
    /// Elements whose values the map dropped, aging with this thread's grace periods.
    removed: Vec<usize>,
    waits: Vec<UpdateKind>,
}

impl<F: Flavor> Drop for MapWriter<'_, F> {
    fn drop(&mut self) {
        let mut handoff = self.m.handoff.lock();
        for owned in self.stable.iter().chain(&self.churn) {
            if let Some(element) = owned.element {
                handoff.live.push((owned.key, element));
            }
        }
        handoff.removed.append(&mut self.removed);
    }
}

/// The body of map writer `id`.
pub(crate) fn run_writer<F: Flavor>(shared: &Shared<F>, id: usize, seed: u64) {
    let m = shared
        .map
        .as_ref()
        .expect("map writers run only in map runs");
    let mut stable = Vec::new();
    {
        let mut handoff = m.handoff.lock();
        handoff.live.retain(|&(key, element)| {
            let mine = key as usize % MAP_WRITERS == id;
            if mine {
                stable.push(Owned {
                    key,
                    element: Some(element),
                });
            }
            !mine
        });
    }
    let churn = (STABLE_KEYS..STABLE_KEYS + CHURN_KEYS)
        .filter(|&key| key as usize % MAP_WRITERS == id)
        .map(|key| Owned { key, element: None })
        .collect();
    let waits = shared.kinds.iter().copied().filter(|k| k.waits()).collect();
    let mut w = MapWriter {
        shared,
        m,
        id,
        rng: Rng::with_seed(seed),
        stable,
        churn,
        removed: Vec::new(),
        waits,
    };
    let mut next_burst = Instant::now() + Duration::from_millis(w.rng.u64(BURST_EVERY_MS));
    while !shared.stop.load(Relaxed) {
        match w.rng.u32(0..16) {
            0..=6 => w.replace_stable(),
            7..=13 => w.toggle_churn(),
            _ => w.wait(),
        }
        m.observe_capacity();
        if Instant::now() >= next_burst {
            w.burst();
            next_burst = Instant::now() + Duration::from_millis(w.rng.u64(BURST_EVERY_MS));
        }
        if w.rng.u32(0..4) == 0 {
            std::thread::sleep(Duration::from_micros(w.rng.u64(0..=200)));
        }
    }
}

impl<F: Flavor> MapWriter<'_, F> {
    /// Wait for a grace period by a random path, then age every element removed before it.
    fn wait(&mut self) {
        self.m.values.take_released(&mut self.removed);
        if self.waits.is_empty() {
            return;
        }
        let kind = self.waits[self.rng.usize(..self.waits.len())];
        wait_for_gp(self.shared, kind, &mut self.rng);
        self.m.values.pool.age_all(&mut self.removed);
        self.m.counters.waits.fetch_add(1, Relaxed);
    }

    /// A fresh element, waiting for grace periods while the pool is empty. `None` if the run
    /// stopped meanwhile.
    fn alloc(&mut self) -> Option<usize> {
        loop {
            if let Some(index) = self.m.values.pool.alloc() {
                return Some(index);
            }
            self.m.counters.alloc_failures.fetch_add(1, Relaxed);
            if self.shared.stop.load(Relaxed) || self.waits.is_empty() {
                return None;
            }
            self.wait();
        }
    }

    fn value(&self, key: u64, index: usize) -> Value {
        value(&self.m.values, key, index)
    }

    /// Count a map call that returned what it must not, and keep its description (the first
    /// few go into the report).
    fn result_error(&self, what: impl FnOnce() -> String) {
        self.shared
            .counters
            .error(&self.m.counters.result_errors, 1);
        self.m.values.note(what);
    }

    /// Mark `element` removed from reader view (age 0 to 1), just before the map call that
    /// removes or replaces it.
    fn mark_removed(&self, key: u64, element: usize) {
        if let Err(age) = self.m.values.pool.advance_from(element, 0) {
            // Its value was dropped (or it was aged) while the map still held it.
            self.result_error(|| {
                format!(
                    "the value of key {key:#x} was at age {age}, not 0, when its writer removed \
                     it"
                )
            });
        }
    }

    /// Replace the value of `key`, present with `old`, by a new one: `insert` or `update`.
    fn replace(&mut self, key: u64, old: usize) -> Option<usize> {
        let new = self.alloc()?;
        let fresh = self.value(key, new);
        self.mark_removed(key, old);
        let c = &self.m.counters;
        let values = &self.m.values;
        // `update`'s closure runs with the map's critical section open, where no grace period
        // can be waited for: use it only while the pool has plenty of elements for retries.
        if self.rng.bool() || values.pool.free_count() < 1_024 {
            c.replaces.fetch_add(1, Relaxed);
            if self.m.map.pin().insert(key, fresh).is_none() {
                self.result_error(|| {
                    format!("insert of present key {key:#x} returned false (not a replacement)")
                });
            }
            return Some(new);
        }
        self.replace_by_update(key, old, new, fresh)
    }

    /// The `update` half of [`replace`](Self::replace): `new` (as `fresh`) for the first run of
    /// the closure, a new element for each rerun; the results checked.
    fn replace_by_update(
        &mut self,
        key: u64,
        old: usize,
        new: usize,
        fresh: Value,
    ) -> Option<usize> {
        let c = &self.m.counters;
        let values = &self.m.values;
        c.updates.fetch_add(1, Relaxed);
        values.candidate[new].store(true, Relaxed);
        let discarded_before = values.discarded.load(Relaxed);
        let mut first = Some(fresh);
        let mut made = vec![new];
        let mut saw = None;
        // One update in four dawdles in its closure (inside the map's critical section): a
        // write or a bucket move by the other writer in the meantime makes the map run the
        // closure again and discard the first value.
        let dawdle = self.rng.u32(0..4) == 0;
        let pause = Duration::from_micros(self.rng.u64(10..=100));
        let updated = self
            .m
            .map
            .pin()
            .update(&key, |old_value: &Value| {
                saw = Some((old_value.key, old_value.index));
                if dawdle && made.len() == 1 {
                    std::thread::yield_now();
                    let end = Instant::now() + pause;
                    while Instant::now() < end {
                        std::hint::spin_loop();
                    }
                }
                first.take().unwrap_or_else(|| {
                    let element = values
                        .pool
                        .alloc()
                        .expect("the value pool ran dry inside update's closure");
                    values.candidate[element].store(true, Relaxed);
                    made.push(element);
                    value(values, key, element)
                })
            })
            .is_some();
        c.update_retries.fetch_add(made.len() as u64 - 1, Relaxed);
        if !updated {
            // The closure never ran: the value never reached the map, and its drop (still a
            // candidate) frees it.
            drop(first.take());
            return self.update_missed(key, old);
        }
        // Published: the value of the last run (the map dropped the others, unpublished).
        let published = *made.last().expect("holds `new`");
        values.candidate[published].store(false, Relaxed);
        self.check_update(key, old, saw, made.len(), discarded_before);
        Some(published)
    }

    /// `update` of present `key` (holding `old`) returned false: an error; an insert tells
    /// whether the key really was absent.
    fn update_missed(&mut self, key: u64, old: usize) -> Option<usize> {
        let Some(retry) = self.alloc() else {
            return Some(old);
        };
        let was_present = self
            .m
            .map
            .pin()
            .insert(key, self.value(key, retry))
            .is_some();
        self.result_error(|| {
            format!(
                "update of present key {key:#x} returned false (key absent, closure not \
                 run); an insert right after {}",
                if was_present {
                    "replaced a value: the key was there"
                } else {
                    "found it absent too"
                }
            )
        });
        Some(retry)
    }

    /// After an `update` of `key` from `old` whose closure ran `runs` times: it saw the old
    /// value, and every discarded run's value was dropped before `update` returned.
    fn check_update(
        &self,
        key: u64,
        old: usize,
        saw: Option<(u64, u32)>,
        runs: usize,
        discarded_before: u64,
    ) {
        let values = &self.m.values;
        if saw != Some((key, old as u32)) {
            self.result_error(|| {
                format!(
                    "update of key {key:#x} showed its closure {saw:?} as (key, element), not \
                     {:?}",
                    (key, old)
                )
            });
        }
        if values.discarded.load(Relaxed) < discarded_before + runs as u64 - 1 {
            // A discarded run's value was not dropped before `update` returned. (Another
            // writer's discards count too, so this only catches a shortfall of ours.)
            self.result_error(|| {
                format!(
                    "update of key {key:#x} ran its closure {} times but dropped fewer of the \
                     unpublished values before returning",
                    runs
                )
            });
        }
    }

    fn replace_stable(&mut self) {
        if self.stable.is_empty() {
            return;
        }
        let slot = self.rng.usize(..self.stable.len());
        let Owned { key, element } = self.stable[slot];
        let old = element.expect("stable keys are always present");
        if let Some(new) = self.replace(key, old) {
            self.stable[slot].element = Some(new);
        }
    }

    fn toggle_churn(&mut self) {
        if self.churn.is_empty() {
            return;
        }
        let slot = self.rng.usize(..self.churn.len());
        let Owned { key, element } = self.churn[slot];
        let c = &self.m.counters;
        match element {
            Some(old) if self.rng.u32(0..4) == 0 => {
                if let Some(new) = self.replace(key, old) {
                    self.churn[slot].element = Some(new);
                }
            }
            Some(old) => {
                self.mark_removed(key, old);
                c.removes.fetch_add(1, Relaxed);
                if self.m.map.pin().remove(&key).is_none() {
                    self.result_error(|| format!("remove of present key {key:#x} returned false"));
                }
                self.churn[slot].element = None;
            }
            None => {
                let Some(new) = self.alloc() else { return };
                c.inserts.fetch_add(1, Relaxed);
                if self.m.map.pin().insert(key, self.value(key, new)).is_some() {
                    self.result_error(|| {
                        format!("insert of absent key {key:#x} returned true (a replacement)")
                    });
                }
                self.churn[slot].element = Some(new);
            }
        }
    }

    /// Insert thousands of keys, work a little while the table is large, remove them all.
    fn burst(&mut self) {
        let m = self.m;
        let c = &m.counters;
        let base = burst_base(self.id);
        let mut live = self.burst_insert(base);
        c.bursts.fetch_add(1, Relaxed);
        c.burst_keys.fetch_add(live.len() as u64, Relaxed);
        for _ in 0..self.rng.u32(0..32) {
            if self.rng.bool() {
                self.replace_stable();
            } else {
                self.toggle_churn();
            }
        }
        if self.rng.bool() {
            self.checking_retain();
        }
        match self.rng.u32(0..4) {
            0 => self.burst_retain(base, &live),
            order => self.burst_remove(base, &mut live, order),
        }
        m.observe_capacity();
    }

    /// A `retain` that keeps everything, racing the readers' held iterations and the other
    /// writer's resizes: it must visit each stable key exactly once.
    fn checking_retain(&mut self) {
        let mut visits = [0u32; STABLE_KEYS as usize];
        self.m.counters.checking_retains.fetch_add(1, Relaxed);
        let removed = self.m.map.retain(|key, _| {
            if is_stable(*key) {
                visits[*key as usize] += 1;
            }
            true
        });
        if removed != 0 || visits.iter().any(|&n| n != 1) {
            self.result_error(|| {
                format!(
                    "a retain keeping everything removed {removed} entries and visited the \
                     stable keys {visits:?} times (each must be visited once)"
                )
            });
        }
    }

    /// Insert a burst's keys from `base` on; their elements, in key order.
    fn burst_insert(&mut self, base: u64) -> Vec<usize> {
        let m = self.m;
        let c = &m.counters;
        let n = self.rng.u64(BURST_KEYS);
        let mut live: Vec<usize> = Vec::with_capacity(n as usize);
        for i in 0..n {
            let Some(element) = self.alloc() else { break };
            let key = base + i;
            c.inserts.fetch_add(1, Relaxed);
            if m.map.pin().insert(key, self.value(key, element)).is_some() {
                self.result_error(|| {
                    format!("insert of absent burst key {key:#x} returned true (a replacement)")
                });
            }
            live.push(element);
            if i % 256 == 255 {
                m.observe_capacity();
                std::thread::yield_now();
            }
        }
        m.observe_capacity();
        live
    }

    /// Remove a burst's keys with one `retain`, and check that none is left.
    fn burst_retain(&mut self, base: u64, live: &[usize]) {
        let m = self.m;
        let end = base + live.len() as u64;
        for (i, &element) in live.iter().enumerate() {
            self.mark_removed(base + i as u64, element);
        }
        m.counters.retains.fetch_add(1, Relaxed);
        let removed = m.map.retain(|key, _| !(base..end).contains(key));
        // Which of the burst's keys are still there? (`retain` visits every entry
        // present throughout.)
        let left: Vec<u64> = {
            let guard = m.map.domain().read();
            (base..end)
                .filter(|key| m.map.contains_key(key, &guard))
                .collect()
        };
        if removed != live.len() || !left.is_empty() {
            self.result_error(|| {
                format!(
                    "retain removed {removed} of the {} keys of a burst; {} still \
                     present (first: {:#x?})",
                    live.len(),
                    left.len(),
                    &left[..left.len().min(4)]
                )
            });
            for key in left {
                m.map.pin().remove(&key);
            }
        }
    }

    /// Remove a burst's keys one by one: in key `order` 1 (reversed), 2 (shuffled) or 3
    /// (in order, replacing every seventh key first).
    fn burst_remove(&mut self, base: u64, live: &mut [usize], order: u32) {
        let m = self.m;
        let c = &m.counters;
        let mut slots: Vec<usize> = (0..live.len()).collect();
        match order {
            1 => slots.reverse(),
            2 => self.rng.shuffle(&mut slots),
            _ => {}
        }
        for (done, &slot) in slots.iter().enumerate() {
            let key = base + slot as u64;
            if order == 3 && slot % 7 == 0 {
                // Replace it first, in the large table, then remove the new value.
                if let Some(new) = self.replace(key, live[slot]) {
                    live[slot] = new;
                }
            }
            self.mark_removed(key, live[slot]);
            c.removes.fetch_add(1, Relaxed);
            if m.map.pin().remove(&key).is_none() {
                self.result_error(|| {
                    format!("remove of present burst key {key:#x} returned false")
                });
            }
            if done % 256 == 255 {
                m.observe_capacity();
                std::thread::yield_now();
            }
        }
    }
}

/// The end of a map run, after every thread stopped and the callbacks drained: remove what is
/// left, let the map drop it, age every element to the end of the pipe, and check the books.
pub(crate) fn finish<F: Flavor>(shared: &Shared<F>, problems: &mut Vec<String>) {
    let Some(m) = shared.map.as_ref() else { return };
    let Handoff { live, mut removed } = std::mem::take(&mut *m.handoff.lock());
    check_live(m, &live, problems);
    m.map.clear();
    if !m.map.is_empty() {
        problems.push(format!("map.len() is {} after clear()", m.map.len()));
    }
    if age_out(&shared.flavor, m, &mut removed, problems) {
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
    let guard = m.map.domain().read();
    for &(key, element) in live {
        match m.map.get(&key, &guard) {
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

/// The map part of a report.
#[derive(Clone, Debug, Default)]
pub struct MapReport {
    /// The map drops removed values at once (`busted-map`).
    pub busted: bool,
    /// Map Pipe: ages of the values readers found, read at the end of their sections.
    pub pipe: [u64; BUCKETS],
    /// Free-block circulation of the value pool.
    pub circulation: [u64; BUCKETS],
    /// Lookups (`get`, `get_key_value`, `contains_key`).
    pub lookups: u64,
    /// Lookups of stable keys.
    pub stable_lookups: u64,
    /// Lookups that found their key.
    pub hits: u64,
    /// Whole-map iterations by readers, and the entries they saw.
    pub iterations: u64,
    /// Entries seen by iterations.
    pub iter_entries: u64,
    /// Iterations that did not yield every stable key (errors: `iter` yields every entry
    /// present throughout the iteration).
    pub iter_stable_missing: u64,
    /// Iterations that yielded a stable key more than once (errors: exactly once).
    pub iter_stable_duplicates: u64,
    /// Iterations held (paused part-way inside their section) while writers ran.
    pub held_iterations: u64,
    /// Iterations during which the table's capacity changed.
    pub iter_across_resizes: u64,
    /// `retain` calls that keep everything and check they visit each stable key once.
    pub checking_retains: u64,
    /// Extra runs of `update`'s closure (another writer changed the bucket meanwhile).
    pub update_retries: u64,
    /// Values of those extra runs, dropped unpublished by the map.
    pub discarded: u64,
    /// Lookups of stable keys that found nothing (errors).
    pub stable_misses: u64,
    /// Values found under a key other than theirs (errors).
    pub value_mismatches: u64,
    /// Values found whose element was free (errors).
    pub mbtest_errors: u64,
    /// Inserts of absent keys.
    pub inserts: u64,
    /// Replacements by `insert`.
    pub replaces: u64,
    /// Replacements by `update`.
    pub updates: u64,
    /// `remove` calls.
    pub removes: u64,
    /// `retain` calls (each removes a whole burst).
    pub retains: u64,
    /// Bursts, and the keys they inserted.
    pub bursts: u64,
    /// Keys inserted by bursts.
    pub burst_keys: u64,
    /// Grace periods the map writers waited for.
    pub waits: u64,
    /// Times a map writer found the value pool empty.
    pub alloc_failures: u64,
    /// Map calls that returned what their writer knew they must not (errors).
    pub result_errors: u64,
    /// Values created (elements allocated).
    pub values: u64,
    /// Values dropped.
    pub drops: u64,
    /// Values dropped while still in the map (errors).
    pub live_drops: u64,
    /// Values dropped twice (errors).
    pub double_drops: u64,
    /// Capacity before the run.
    pub capacity_first: u64,
    /// Smallest and largest capacity seen.
    pub capacity_min: u64,
    /// Largest capacity seen.
    pub capacity_max: u64,
    /// Capacity changes seen by the writers (up, down).
    pub grows: u64,
    /// Capacity decreases seen.
    pub shrinks: u64,
    /// Resize cycles: a capacity of [`CYCLE_HIGH`] or more, then [`CYCLE_LOW`] or less.
    pub cycles: u64,
    /// Largest `len()` seen.
    pub len_max: u64,
    /// The first few errors of the map writers, in words.
    pub notes: Vec<String>,
}

impl MapReport {
    pub(crate) fn collect(m: &MapTorture) -> MapReport {
        let c = &m.counters;
        let v = &m.values;
        let l = |a: &AtomicU64| a.load(Relaxed);
        MapReport {
            busted: m.busted,
            pipe: c.pipe.snapshot(),
            circulation: v.pool.circulation.snapshot(),
            lookups: l(&c.lookups),
            stable_lookups: l(&c.stable_lookups),
            hits: l(&c.hits),
            iterations: l(&c.iterations),
            iter_entries: l(&c.iter_entries),
            iter_stable_missing: l(&c.iter_stable_missing),
            iter_stable_duplicates: l(&c.iter_stable_duplicates),
            held_iterations: l(&c.held_iterations),
            iter_across_resizes: l(&c.iter_across_resizes),
            checking_retains: l(&c.checking_retains),
            update_retries: l(&c.update_retries),
            discarded: l(&v.discarded),
            stable_misses: l(&c.stable_misses),
            value_mismatches: l(&c.value_mismatches),
            mbtest_errors: l(&c.mbtest_errors),
            inserts: l(&c.inserts),
            replaces: l(&c.replaces),
            updates: l(&c.updates),
            removes: l(&c.removes),
            retains: l(&c.retains),
            bursts: l(&c.bursts),
            burst_keys: l(&c.burst_keys),
            waits: l(&c.waits),
            alloc_failures: l(&c.alloc_failures),
            result_errors: l(&c.result_errors),
            values: l(&v.pool.allocated),
            drops: l(&v.drops),
            live_drops: l(&v.live_drops),
            double_drops: l(&v.double_drops),
            capacity_first: l(&c.capacity_first),
            capacity_min: l(&c.capacity_min),
            capacity_max: l(&c.capacity_max),
            grows: l(&c.grows),
            shrinks: l(&c.shrinks),
            cycles: l(&c.cycles),
            len_max: l(&c.len_max),
            notes: v.notes.lock().clone(),
        }
    }

    /// Map Pipe entries past age 1.
    pub fn pipe_errors(&self) -> u64 {
        self.pipe[2..].iter().sum()
    }

    /// Every map error: Map Pipe, stable-key misses, mismatched values, free elements found,
    /// wrong results, values dropped while in the map or twice, and the value pool's
    /// circulation past the freeing age.
    pub fn errors(&self) -> u64 {
        self.pipe_errors()
            + self.stable_misses
            + self.value_mismatches
            + self.mbtest_errors
            + self.iter_stable_missing
            + self.iter_stable_duplicates
            + self.result_errors
            + self.live_drops
            + self.double_drops
            + self.circulation[BUCKETS - 1]
    }
}
