//! What a map run reports: its counters, histograms and problems, as the run's report prints
//! them.

use super::{ClearRaceReport, MapKind, MapTorture};
use crate::counters::BUCKETS;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// The map part of a report.
#[derive(Clone, Debug, Default)]
pub struct MapReport {
    /// The map under test (`None` only in a report made by hand).
    pub kind: Option<MapKind>,
    /// The map drops removed values at once (`busted-map`, `busted-flat-map`).
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
    /// Replacements by `update` or `compute`.
    pub updates: u64,
    /// Of those, the replacements by `compute`.
    pub computes: u64,
    /// `remove` calls.
    pub removes: u64,
    /// `retain` calls (each removes a whole burst).
    pub retains: u64,
    /// Bursts, and the keys they inserted.
    pub bursts: u64,
    /// Keys inserted by bursts.
    pub burst_keys: u64,
    /// Bursts that reserved room for their keys first (and ended with `shrink_to_fit`).
    pub reserves: u64,
    /// `shrink_to_fit` calls at the end of those bursts.
    pub shrinks_to_fit: u64,
    /// Grace periods the map writers waited for.
    pub waits: u64,
    /// Times a map writer found the value pool empty.
    pub alloc_failures: u64,
    /// Map calls that returned what their writer knew they must not (errors).
    pub result_errors: u64,
    /// Values created (elements allocated).
    pub values: u64,
    /// Values dropped (the last handle of each element).
    pub drops: u64,
    /// Handles cloned (by the flat map's rebuilds and writes).
    pub clones: u64,
    /// Clones of a value whose handles were all dropped, or that was past age 1, and fresh
    /// values of an element that still had handles (errors).
    pub dead_clones: u64,
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
    /// Resize cycles: a capacity of [`CYCLE_HIGH`](super::CYCLE_HIGH) or more, then
    /// [`CYCLE_LOW`](super::CYCLE_LOW) or less.
    pub cycles: u64,
    /// Largest `len()` seen.
    pub len_max: u64,
    /// The clear race (`map` runs only; see `map::clear_race`).
    pub clear_race: Option<ClearRaceReport>,
    /// The first few errors of the map writers, in words.
    pub notes: Vec<String>,
}

impl MapReport {
    pub(crate) fn collect(m: &MapTorture) -> MapReport {
        let c = &m.counters;
        let v = &m.values;
        let l = |a: &AtomicU64| a.load(Relaxed);
        MapReport {
            kind: Some(m.map.kind()),
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
            computes: l(&c.computes),
            removes: l(&c.removes),
            retains: l(&c.retains),
            bursts: l(&c.bursts),
            burst_keys: l(&c.burst_keys),
            reserves: l(&c.reserves),
            shrinks_to_fit: l(&c.shrinks_to_fit),
            waits: l(&c.waits),
            alloc_failures: l(&c.alloc_failures),
            result_errors: l(&c.result_errors),
            values: l(&v.pool.allocated),
            drops: l(&v.drops),
            clones: l(&v.clones),
            dead_clones: l(&v.dead_clones),
            live_drops: l(&v.live_drops),
            double_drops: l(&v.double_drops),
            capacity_first: l(&c.capacity_first),
            capacity_min: l(&c.capacity_min),
            capacity_max: l(&c.capacity_max),
            grows: l(&c.grows),
            shrinks: l(&c.shrinks),
            cycles: l(&c.cycles),
            len_max: l(&c.len_max),
            clear_race: m.clear_race.as_ref().map(|race| race.report()),
            notes: v.notes.lock().clone(),
        }
    }

    /// Map Pipe entries past age 1.
    pub fn pipe_errors(&self) -> u64 {
        self.pipe[2..].iter().sum()
    }

    /// Every map error: Map Pipe, stable-key misses, mismatched values, free elements found,
    /// wrong results, values dropped while in the map or twice, clones of dropped values, the
    /// value pool's circulation past the freeing age, and the clear race's errors.
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
            + self.dead_clones
            + self.circulation[BUCKETS - 1]
            + self.clear_race.map_or(0, |race| race.errors)
    }
}
