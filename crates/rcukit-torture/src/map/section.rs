//! The readers' side of a map run: the keys each section looks up, what it must find, and the
//! ages of the values it found, read before its guard drops (the Map Pipe).

use super::{
    burst_base, is_stable, MapGuard, MapTorture, BURST_KEYS, CHURN_KEYS, HELD_ONE_IN, ITER_ONE_IN,
    MAP_WRITERS, MAX_SEEN, STABLE_KEYS,
};
use crate::counters::{Counters, LocalHistogram};
use crate::flavor::wait_in_section;
use fastrand::Rng;
use rcukit::QsbrThread;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

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

impl MapTorture {
    /// A reader's map section, inside the reader's own section: a guard of the map's domain,
    /// or, on a QSBR domain, the reader's registration (`qsbr`: online, and it stays online
    /// for as long as the map section lives). `may_sleep`: whether the reader may block
    /// inside its section (a QSBR reader spins instead).
    pub(crate) fn section<'m>(
        &'m self,
        qsbr: Option<&'m QsbrThread<'m>>,
        may_sleep: bool,
    ) -> MapSection<'m> {
        MapSection {
            m: self,
            guard: match qsbr {
                Some(thread) => MapGuard::Reader(thread),
                None => self.map.guard(),
            },
            may_sleep,
            seen: [0; MAX_SEEN],
            len: 0,
        }
    }
}

/// A reader's lookups inside one of its sections, under a read section of the map's domain.
pub(crate) struct MapSection<'m> {
    m: &'m MapTorture,
    guard: MapGuard<'m>,
    may_sleep: bool,
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
                let found = map.contains_key(key, &self.guard);
                if found {
                    local.hits += 1;
                } else if stable {
                    counters.error(&self.m.counters.stable_misses, 1);
                }
                return;
            }
            1..=2 => map.get_key_value(key, &self.guard).map(|(k, v)| {
                if *k != key {
                    counters.error(&self.m.counters.value_mismatches, 1);
                }
                (v.key, v.index)
            }),
            _ => map.get(key, &self.guard).map(|v| (v.key, v.index)),
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
    /// shrink the table and their `retain`s race it, then goes on (a QSBR reader spins
    /// instead of napping).
    fn iterate(&mut self, counters: &Counters, rng: &mut Rng, local: &mut MapLocal) {
        local.iterations += 1;
        let held = rng.u32(0..HELD_ONE_IN) == 0;
        let pause_after = rng.usize(0..8);
        let capacity_before = self.m.map.capacity();
        let mut stable_seen = [0u32; STABLE_KEYS as usize];
        let mut found = Vec::new();
        self.m.map.for_each(&self.guard, |n, key, v| {
            if held && n == pause_after {
                local.held_iterations += 1;
                for _ in 0..rng.u32(1..=16) {
                    std::thread::yield_now();
                }
                wait_in_section(Duration::from_micros(rng.u64(0..=1_000)), self.may_sleep);
            }
            local.iter_entries += 1;
            if is_stable(*key) {
                stable_seen[*key as usize] += 1;
            }
            found.push((*key, v.key, v.index));
        });
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
