//! The writers of [`RcuHashMap`] that change many entries or the table itself: `retain`,
//! `clear`, `reserve` and `shrink_to_fit`; and the resize policy they share with the keyed
//! writers.

use super::moves::{self, Busted, Moved};
use super::table::{self, Limits, Node, Table};
use super::{buckets_to_hold, Policy, RcuHashMap, MAX_BUCKETS, MIN_BUCKETS};
use crate::domain_ref::DomainRef;
use crate::sync::Backoff;
use crate::ReadSection;
use std::hash::{BuildHasher, Hash};
use std::ptr;
use std::sync::atomic::fence;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, SeqCst};

impl<K, V, S, D: DomainRef> RcuHashMap<K, V, S, D> {
    /// The table size the policy asks for now, if it differs from `buckets` (the current
    /// table's): grow past the maximum load factor, shrink below the minimum (never below the
    /// floor: the capacity asked for at construction or by `reserve`).
    fn wanted_buckets(&self, buckets: usize) -> Option<usize> {
        let len = self.len() as f64;
        // Pairs with the fence after a change of the floor (see `refresh_limits`).
        fence(SeqCst);
        let floor = self.min_buckets.load(Relaxed);
        let Policy {
            max_load, min_load, ..
        } = self.policy;
        if buckets < floor {
            Some(floor)
        } else if len > buckets as f64 * max_load as f64 && buckets < MAX_BUCKETS {
            Some(buckets * 2)
        } else if len < buckets as f64 * min_load as f64 && buckets > floor {
            let mid = (max_load + min_load) as f64 / 2.0;
            let wanted = ((len / mid) as usize).next_power_of_two();
            Some(wanted.clamp(floor, buckets / 2))
        } else {
            None
        }
    }

    /// The limits of a table of `buckets` buckets under the policy and the floor as they are
    /// now (see [`Table::outside_limits`]).
    pub(crate) fn limits_for(&self, buckets: usize) -> Limits {
        self.limits_with_floor(buckets, self.min_buckets.load(Relaxed))
    }

    fn limits_with_floor(&self, buckets: usize, floor: usize) -> Limits {
        let Policy {
            max_load, min_load, ..
        } = self.policy;
        let above = (buckets as f64 * max_load as f64) as usize;
        let below = if buckets > floor {
            (buckets as f64 * min_load as f64).ceil() as usize
        } else {
            0
        };
        Limits { above, below }
    }

    /// After a write that left `len` entries in the map: start the resize the policy asks
    /// for, if none is under way. Costs two comparisons while the count stays within the
    /// table's limits.
    #[inline]
    pub(crate) fn maybe_start_resize(&self, table: &Table<K, V>, len: usize) {
        if table.outside_limits(len) {
            self.start_wanted_resize(table);
        }
    }

    /// Set `table`'s limits from the floor as it is now. A table's limits are computed when it
    /// is made, from the floor then; the floor may change before the table is moved in (a
    /// `reserve` or `shrink_to_fit` meanwhile), so the thread that finishes a resize refreshes
    /// the new table's, and a change of the floor refreshes the current table's. Two
    /// refreshes may race with one change: each stores, then reads the floor again after a
    /// fence (as the change does after its store) and stores again if the floor moved, so the
    /// last store is computed from the floor as it is.
    pub(crate) fn refresh_limits(&self, table: &Table<K, V>) {
        loop {
            fence(SeqCst);
            let floor = self.min_buckets.load(Relaxed);
            table.set_limits(self.limits_with_floor(table.len(), floor));
            fence(SeqCst);
            if self.min_buckets.load(Relaxed) == floor {
                return;
            }
        }
    }

    /// Set the limits of the first table of a map that nobody else can see yet.
    pub(crate) fn init_limits(&mut self) {
        // SAFETY: `&mut self`: the root is the map's own table, alive.
        let table = unsafe { &*self.root.load(Relaxed) };
        table.set_limits(self.limits_for(table.len()));
    }

    /// Start the resize the policy asks for, if none is under way.
    pub(crate) fn start_wanted_resize(&self, table: &Table<K, V>) {
        if !table.next.load(Acquire).is_null() {
            return;
        }
        if let Some(target) = self.wanted_buckets(table.len()) {
            self.start_resize(table, target);
        }
    }

    /// Install a table of `target` buckets as `table`'s successor, unless one already is.
    fn start_resize(&self, table: &Table<K, V>, target: usize) {
        let new = Table::with_limits(target, self.limits_for(target)).made_for(self.len());
        let new = Box::into_raw(new);
        if table
            .next
            .compare_exchange(ptr::null_mut(), new, AcqRel, Acquire)
            .is_err()
        {
            // SAFETY: ours, never published.
            drop(unsafe { Box::from_raw(new) });
        }
    }

    /// Move up to `budget` buckets of the resize under way, if any; the table it finished, to
    /// be retired.
    pub(crate) fn help_resize_by<G: ReadSection>(
        &self,
        _guard: &G,
        budget: usize,
    ) -> Option<*mut Table<K, V>> {
        if self.forked() {
            // User code of the write forked (a key's `Drop`): no help in the tables of the
            // parent; the child's next write repairs the map (module `after_fork`).
            return None;
        }
        // SAFETY: the guard (of this domain: every caller checked it or took it from
        // `self.domain()`) protects the current table and what it reaches.
        match unsafe { moves::help_move(&self.root, self.root.load(Acquire), budget, Busted::No) } {
            Moved::Finished(old) => {
                // SAFETY: protected by the guard, as above.
                let new = unsafe { &*self.root.load(Acquire) };
                // The new table's limits may be those of a floor changed since it was made,
                // and the table itself may be below that floor (a shrink decided from the
                // floor as it was before a `reserve` raised it): no count of entries would
                // ask for the growth back to the floor, so it starts here.
                self.refresh_limits(new);
                self.start_wanted_resize(new);
                Some(old)
            }
            Moved::Some | Moved::Nothing => None,
        }
    }

    /// After a bulk change: start the resizes the policy asks for and help until none is
    /// left, returning the tables to retire.
    ///
    /// A resize whose buckets are all claimed may still be under way: writers that claimed
    /// the last runs move them (a few hundred buckets at most, with no user code and no wait
    /// but for a bucket's lock) and may be preempted meanwhile. This waits for the last of
    /// them to make the new table current, so that the call returns with no resize under way
    /// (`reserve` with its room, `shrink_to_fit` with the tight table).
    pub(crate) fn resize_now<G: ReadSection>(&self, guard: &G) -> Vec<*mut Table<K, V>> {
        let mut finished = Vec::new();
        let mut backoff = Backoff::new();
        loop {
            if self.forked() {
                // `retain`'s predicate forked: as in `help_resize_by`.
                return finished;
            }
            let before = self.root.load(Acquire);
            // SAFETY: protected by the guard (of this domain).
            let table = unsafe { &*before };
            self.start_wanted_resize(table);
            match self.help_resize_by(guard, usize::MAX) {
                Some(old) => finished.push(old),
                // Another thread finished a resize meanwhile: look again.
                None if !ptr::eq(before, self.root.load(Acquire)) => {}
                None if table.next.load(Acquire).is_null() => return finished,
                // Every bucket is claimed, some not yet moved.
                None => backoff.snooze(),
            }
        }
    }

    /// The smallest table size that holds `entries` without growing.
    pub(super) fn buckets_for(&self, entries: usize) -> usize {
        buckets_to_hold(entries, self.policy.max_load).unwrap_or(MAX_BUCKETS)
    }
}

impl<K, V, S, D> RcuHashMap<K, V, S, D>
where
    K: Hash + Eq + Send + 'static,
    V: Send + 'static,
    S: BuildHasher,
    D: DomainRef,
{
    /// Remove every entry for which `keep` returns `false`; returns how many were removed.
    /// `keep` runs with no lock held, inside a read-side critical section the map opens;
    /// entries present throughout are visited once, entries inserted meanwhile may or may not
    /// be. Each removal is atomic on its own (the entry visited is removed only if it is
    /// still the key's entry); the whole is not a snapshot.
    pub fn retain<F>(&self, mut keep: F) -> usize
    where
        F: FnMut(&K, &V) -> bool,
    {
        self.repair_if_forked();
        // Declared before the guard, so it retires after the critical section ends, also
        // when `keep` panics: what was unlinked by then is retired, not leaked.
        let mut unlinked = Unlinked::new(self);
        let guard = self.domain().read();
        let mut iter = self.iter(&guard);
        while let Some(node) = iter.next_node() {
            if keep(&node.key, &node.value) {
                continue;
            }
            // `keep` may have forked: the removal then locks the repaired table, which holds
            // the node too (module `after_fork`); the walk goes on in the tables it began in.
            self.repair_if_forked();
            // SAFETY: protected by the guard; `node.hash` is the node's own hash.
            if let Some(n) = unsafe { table::unlink_exact(self.table(&guard), node.hash, node) } {
                unlinked.nodes.push(n);
                self.len.fetch_sub(1, Relaxed);
            }
        }
        unlinked.tables = self.resize_now(&guard);
        drop(guard);
        unlinked.nodes.len()
    }

    /// Remove every entry (each is retired). Entries inserted while it runs may stay.
    pub fn clear(&self) {
        self.repair_if_forked();
        // Declared before the guard, as in `retain`: retired after the critical section.
        let mut unlinked = Unlinked::new(self);
        let guard = self.domain().read();
        let mut table: *const Table<K, V> = self.table(&guard);
        let mut from: Option<&Table<K, V>> = None;
        while !table.is_null() {
            // SAFETY: protected by the guard.
            let t = unsafe { &*table };
            // SAFETY: as above; `from` is the table whose `next` is `t`.
            unsafe { table::detach_all(t, from, &mut unlinked.nodes) };
            from = Some(t);
            table = t.next.load(Acquire);
        }
        self.len.fetch_sub(unlinked.nodes.len(), Relaxed);
        unlinked.tables = self.resize_now(&guard);
    }

    /// Make room for `additional` more entries than the map holds now: the table grows at
    /// once (this call moves every bucket, and waits for writers still moving the last buckets
    /// of a resize they started), and the map will not shrink below that room until
    /// [`shrink_to_fit`](Self::shrink_to_fit). Concurrent reads and writes go on meanwhile.
    ///
    /// # Panics
    ///
    /// With "capacity overflow" if the room needs more than the largest table (2^40 buckets),
    /// as std's maps do, leaving the map as it was. (A table the system cannot give aborts
    /// the process, as theirs do too.)
    pub fn reserve(&self, additional: usize) {
        self.repair_if_forked();
        let entries = self.len().saturating_add(additional);
        let Some(wanted) = buckets_to_hold(entries, self.policy.max_load) else {
            panic!(
                "rcukit: RcuHashMap capacity overflow: room for {additional} more entries needs \
                 more than the largest table ({MAX_BUCKETS} buckets)"
            );
        };
        self.min_buckets.fetch_max(wanted, Relaxed);
        // Before the table is read (see `refresh_limits`).
        fence(SeqCst);
        let mut unlinked = Unlinked::new(self);
        let guard = self.domain().read();
        unlinked.tables = self.resize_now(&guard);
        // The current table may have been made under the floor as it was.
        self.refresh_limits(self.table(&guard));
    }

    /// Shrink the table to the smallest that holds the entries present now, dropping the
    /// floor set by the capacity asked for at construction or by [`reserve`](Self::reserve)
    /// (the map then grows and shrinks by its load factors alone). Concurrent reads and
    /// writes go on meanwhile.
    pub fn shrink_to_fit(&self) {
        self.repair_if_forked();
        self.min_buckets.store(MIN_BUCKETS, Relaxed);
        // Before the table is read (see `refresh_limits`).
        fence(SeqCst);
        let mut unlinked = Unlinked::new(self);
        let guard = self.domain().read();
        // Finish a resize under way, then resize to the tightest table if it is smaller.
        unlinked.tables = self.resize_now(&guard);
        let current = self.table(&guard);
        let target = self.buckets_for(self.len());
        if target < current.len() {
            self.start_resize(current, target);
            unlinked.tables.extend(self.resize_now(&guard));
        }
        // The floor dropped: the current table may shrink by its load from now on.
        self.refresh_limits(self.table(&guard));
    }
}

/// What a bulk write unlinked, retired when this drops (after the write's guard, which is
/// declared later), also on unwind.
struct Unlinked<'m, K, V, S, D>
where
    K: Send + 'static,
    V: Send + 'static,
    D: DomainRef,
{
    map: &'m RcuHashMap<K, V, S, D>,
    nodes: Vec<*mut Node<K, V>>,
    tables: Vec<*mut Table<K, V>>,
}

impl<'m, K, V, S, D> Unlinked<'m, K, V, S, D>
where
    K: Send + 'static,
    V: Send + 'static,
    D: DomainRef,
{
    fn new(map: &'m RcuHashMap<K, V, S, D>) -> Self {
        Unlinked {
            map,
            nodes: Vec::new(),
            tables: Vec::new(),
        }
    }
}

impl<K, V, S, D> Drop for Unlinked<'_, K, V, S, D>
where
    K: Send + 'static,
    V: Send + 'static,
    D: DomainRef,
{
    fn drop(&mut self) {
        // One object of the domain for all the nodes (see `node::Batch`).
        self.map.retire(self.nodes.drain(..), None);
        for old in self.tables.drain(..) {
            self.map.retire(None, Some(old));
        }
    }
}

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use crate::map::table::Table;
    use crate::RcuHashMap;
    use std::ptr;
    use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
    use std::sync::Barrier;

    /// A `reserve` that made its larger table (with the limits of the floor it had just
    /// raised) and was then held up until a `shrink_to_fit` had dropped the floor and ended,
    /// replayed step by step: once its table is moved in, that table has the limits of the floor
    /// as it is, so the map shrinks again as its entries go (a table left with the old limits
    /// never shrank by its load).
    #[test]
    fn a_table_made_under_a_floor_since_dropped_gets_the_limits_of_the_floor_as_it_is() {
        let map: RcuHashMap<u64, u64> = RcuHashMap::new();
        for k in 0..2_100 {
            map.pin().insert(k, k);
        }
        // `reserve(6_000)`, up to its table: the floor rises, the table is made.
        let wanted = map.buckets_for(map.len() + 6_000);
        map.min_buckets.fetch_max(wanted, Relaxed);
        let made = Box::into_raw(Table::with_limits(wanted, map.limits_for(wanted)));
        // The whole `shrink_to_fit` (the table already fits: it only drops the floor).
        map.shrink_to_fit();
        // The rest of `reserve`: its table installed and moved in.
        let guard = map.domain().read();
        let old = map.table(&guard);
        assert!(old.len() < wanted, "the test wants a grow");
        assert!(old
            .next
            .compare_exchange(ptr::null_mut(), made, AcqRel, Acquire)
            .is_ok());
        let finished = map.resize_now(&guard);
        assert_eq!(
            map.table(&guard).len(),
            wanted,
            "no resize wanted after the grow"
        );
        assert_eq!(
            map.table(&guard).limits(),
            map.limits_for(wanted),
            "the limits of the floor as it is"
        );
        drop(guard);
        for old in finished {
            map.retire(None, Some(old));
        }
        let grown = map.buckets();
        for k in 0..2_100 {
            map.pin().remove(&k);
        }
        assert!(
            map.buckets() < grown,
            "the emptied map shrank ({grown} entries' room)"
        );
    }

    /// A shrink that a writer's removal decided from the floor as it was before a `reserve`
    /// raised it, installed after that `reserve` returned, replayed step by step: the writer
    /// that finishes moving it in starts the growth back to the floor at once. The count of
    /// entries would never ask for it (the small table holds them within its limits), so
    /// without that the table stayed below the floor until the load alone asked for a grow.
    #[test]
    fn a_shrink_decided_under_a_lower_floor_grows_back_to_the_floor_once_moved_in() {
        // The floor: 512 buckets (room for 2,000 entries), and the table that size.
        let map: RcuHashMap<u64, u64> = RcuHashMap::with_capacity(2_000);
        for k in 0..100 {
            map.pin().insert(k, k);
        }
        let guard = map.domain().read();
        let floor = map.min_buckets.load(Relaxed);
        assert_eq!((floor, map.table(&guard).len()), (512, 512));
        // The writer's shrink, decided as if the floor were still the smallest table: 64
        // buckets hold its 100 entries within their limits.
        let small = 64;
        assert!(map.limits_for(small).above >= map.len());
        let made = Box::into_raw(Table::with_limits(small, map.limits_for(small)));
        assert!(map
            .table(&guard)
            .next
            .compare_exchange(ptr::null_mut(), made, AcqRel, Acquire)
            .is_ok());
        // A keyed write's help moves it in (and finishes it).
        let old = map.help_resize_by(&guard, usize::MAX).expect("finished");
        assert_eq!(map.table(&guard).len(), small);
        assert_eq!(
            map.buckets(),
            floor,
            "the growth back to the floor is under way"
        );
        let mut finished = map.resize_now(&guard);
        finished.push(old);
        assert_eq!(map.table(&guard).len(), floor);
        assert!(map.table(&guard).next.load(Acquire).is_null());
        drop(guard);
        for old in finished {
            map.retire(None, Some(old));
        }
        assert!((0..100).all(|k| map.pin().get(&k) == Some(&k)));
    }

    /// `reserve` and `shrink_to_fit` racing each other and the shrinks that removals start
    /// leave a table no smaller than the floor, with the limits of that floor, and no resize
    /// wanted: whichever order the calls took effect in, the map is as that order leaves it.
    #[test]
    fn racing_floor_changes_leave_the_table_and_its_limits_in_agreement() {
        for round in 0..400u64 {
            let map: RcuHashMap<u64, u64> = RcuHashMap::new();
            for k in 0..2_000 {
                map.pin().insert(k, k);
            }
            let start = Barrier::new(3);
            std::thread::scope(|s| {
                s.spawn(|| {
                    start.wait();
                    map.reserve(20_000 + round as usize);
                });
                s.spawn(|| {
                    start.wait();
                    map.shrink_to_fit();
                });
                start.wait();
                map.retain(|k, _| k % 8 == round % 8);
            });
            let guard = map.domain().read();
            let table = map.table(&guard);
            assert!(
                table.next.load(Acquire).is_null(),
                "round {round}: a resize left"
            );
            let floor = map.min_buckets.load(Relaxed);
            assert!(
                table.len() >= floor,
                "round {round}: {} buckets below the floor of {floor}",
                table.len()
            );
            assert_eq!(map.wanted_buckets(table.len()), None, "round {round}");
            assert_eq!(
                table.limits(),
                map.limits_for(table.len()),
                "round {round}: the limits of another floor (floor {floor})"
            );
        }
    }
}
