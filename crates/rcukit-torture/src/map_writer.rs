//! The map writers of a map run (see [`map`](crate::map)): each owns a share of the keys, so
//! it knows what every call must return; they replace stable keys, insert and remove churned
//! keys, run bursts that grow the table from tens of buckets to thousands and shrink it
//! back, and age the values the map dropped with the grace periods they wait for.

use crate::flavor::{Flavor, UpdateKind};
use crate::map::{
    burst_base, is_stable, value, MapTorture, Value, BURST_EVERY_MS, BURST_KEYS, CHURN_KEYS,
    MAP_WRITERS, STABLE_KEYS,
};
use crate::shared::Shared;
use crate::update::wait_for_gp;
use fastrand::Rng;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

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
pub(crate) fn run<F: Flavor>(shared: &Shared<F>, id: usize, seed: u64) {
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
            // The flat map drops removed values only with their table: rebuild it.
            self.m.map.release_removed();
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

    /// Replace the value of `key`, present with `old`, by a new one: `insert`, `update` or
    /// `compute`.
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
            if !self.m.map.insert(key, fresh, self.rng.bool()) {
                self.result_error(|| {
                    format!("insert of present key {key:#x} returned false (not a replacement)")
                });
            }
            return Some(new);
        }
        self.replace_by_update(key, old, new, fresh)
    }

    /// The `update` (or `compute`, at random) half of [`replace`](Self::replace): `new` (as
    /// `fresh`) for the first run of the closure, a new element for each rerun; the results
    /// checked.
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
        let by_compute = self.rng.bool();
        let mut f = |old_value: &Value| {
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
        };
        let updated = if by_compute {
            c.computes.fetch_add(1, Relaxed);
            self.m.map.update_by_compute(key, &mut f)
        } else {
            self.m.map.update(key, &mut f)
        };
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
        let was_present = self.m.map.insert(key, self.value(key, retry), false);
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
                if !self.m.map.remove(key, self.rng.bool()) {
                    self.result_error(|| format!("remove of present key {key:#x} returned false"));
                }
                self.churn[slot].element = None;
            }
            None => {
                let Some(new) = self.alloc() else { return };
                c.inserts.fetch_add(1, Relaxed);
                let fresh = self.value(key, new);
                if self.m.map.insert(key, fresh, self.rng.bool()) {
                    self.result_error(|| {
                        format!("insert of absent key {key:#x} returned true (a replacement)")
                    });
                }
                self.churn[slot].element = Some(new);
            }
        }
    }

    /// Insert thousands of keys, work a little while the table is large, remove them all.
    /// One burst in three first reserves room for its keys (the table jumps up several
    /// doublings in one resize) and ends with `shrink_to_fit` (several halvings in one), racing
    /// the other writers' bursts and resizes.
    fn burst(&mut self) {
        let m = self.m;
        let c = &m.counters;
        let base = burst_base(self.id);
        let keys = self.rng.u64(BURST_KEYS);
        let jump = self.rng.u32(0..3) == 0;
        if jump {
            c.reserves.fetch_add(1, Relaxed);
            m.map.reserve(keys as usize);
            m.observe_capacity();
        }
        let mut live = self.burst_insert(base, keys);
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
        if jump {
            c.shrinks_to_fit.fetch_add(1, Relaxed);
            m.map.shrink_to_fit();
            m.observe_capacity();
        }
    }

    /// A `retain` that keeps everything, racing the readers' held iterations and the other
    /// writer's resizes: it must visit each stable key exactly once.
    fn checking_retain(&mut self) {
        let mut visits = [0u32; STABLE_KEYS as usize];
        self.m.counters.checking_retains.fetch_add(1, Relaxed);
        let removed = self.m.map.retain(&mut |key, _| {
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

    /// Insert `n` burst keys from `base` on; their elements, in key order.
    fn burst_insert(&mut self, base: u64, n: u64) -> Vec<usize> {
        let m = self.m;
        let c = &m.counters;
        let mut live: Vec<usize> = Vec::with_capacity(n as usize);
        for i in 0..n {
            let Some(element) = self.alloc() else { break };
            let key = base + i;
            c.inserts.fetch_add(1, Relaxed);
            let fresh = self.value(key, element);
            if m.map.insert(key, fresh, self.rng.bool()) {
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
        let removed = m.map.retain(&mut |key, _| !(base..end).contains(key));
        // Which of the burst's keys are still there? (`retain` visits every entry
        // present throughout.)
        let left: Vec<u64> = {
            let guard = m.map.guard();
            (base..end)
                .filter(|&key| m.map.contains_key(key, &guard))
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
                m.map.remove(key, false);
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
            if !m.map.remove(key, self.rng.bool()) {
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
