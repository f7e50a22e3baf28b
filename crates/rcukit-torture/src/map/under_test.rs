//! The map a map run tortures, behind the calls the run makes: an [`RcuHashMap`] (the `map`
//! runs) or an [`RcuFlatMap`] (the `flat-map` runs), both on the run's `Rcu` domain and both
//! holding [`Value`]s.
//!
//! The two differ in what a write returns and in when a removed value is dropped, and the
//! calls here hide only the first: each keyed write says whether the key was there, through
//! one of the map's two paths (`borrowed`: the old value borrowed for a guard of the caller's,
//! otherwise the map's own handle, `pin()`, or a clone for the flat map). When values are
//! dropped is what the run checks, with the same books for both maps (see the parent module).

use super::Value;
use rcukit::map::{Compute, Operation};
use rcukit::{Rcu, RcuFlatMap, RcuHashMap, ReadSection};
use std::collections::hash_map::RandomState;
use std::sync::Arc;

/// Which map a run tortures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapKind {
    /// [`RcuHashMap`]: a node per entry, removed values dropped a grace period after their
    /// removal.
    Hash,
    /// [`RcuFlatMap`]: entries inline, cloned by rebuilds; removed values dropped with their
    /// table, a grace period after a rebuild replaced it.
    Flat,
}

impl MapKind {
    /// The map's type name, as the report prints it.
    pub fn type_name(self) -> &'static str {
        match self {
            MapKind::Hash => "RcuHashMap",
            MapKind::Flat => "RcuFlatMap",
        }
    }
}

/// The map under test.
pub(crate) enum MapUnderTest {
    Hash(RcuHashMap<u64, Value, RandomState, Arc<Rcu>>),
    Flat(RcuFlatMap<u64, Value, RandomState, Arc<Rcu>>),
}

impl MapUnderTest {
    /// An empty map of `kind` on `domain`; `busted`: the self-test's broken reclamation
    /// (the hash map drops removed values at once, the flat map a replaced table's entries).
    pub(crate) fn new(
        kind: MapKind,
        domain: Arc<Rcu>,
        busted: bool,
    ) -> Result<MapUnderTest, rcukit::Error> {
        Ok(match kind {
            MapKind::Hash => {
                let mut builder = RcuHashMap::builder().domain(domain);
                if busted {
                    // The values are `Value`s, plain integers plus an `Arc` that readers
                    // never touch; the map keeps the node memory until a grace period has
                    // passed, so a reader that copies a dropped value's integers reads
                    // initialized memory. The torture exists to see this misuse reported.
                    // SAFETY: as just said, dropped values stay readable as plain integers.
                    builder = unsafe { builder.__busted_drop_values_at_once() };
                }
                MapUnderTest::Hash(builder.build()?)
            }
            MapKind::Flat => {
                let map = RcuFlatMap::with_capacity_hasher_in(0, RandomState::new(), domain);
                MapUnderTest::Flat(if busted {
                    // SAFETY: as for the hash map: the table's memory is freed after a grace
                    // period, so a dropped entry's integers stay readable.
                    unsafe { map.__busted_drop_entries_at_once() }
                } else {
                    map
                })
            }
        })
    }

    pub(crate) fn kind(&self) -> MapKind {
        match self {
            MapUnderTest::Hash(_) => MapKind::Hash,
            MapUnderTest::Flat(_) => MapKind::Flat,
        }
    }

    pub(crate) fn domain(&self) -> &Rcu {
        match self {
            MapUnderTest::Hash(map) => map.domain(),
            MapUnderTest::Flat(map) => map.domain(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            MapUnderTest::Hash(map) => map.len(),
            MapUnderTest::Flat(map) => map.len(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn capacity(&self) -> usize {
        match self {
            MapUnderTest::Hash(map) => map.capacity(),
            MapUnderTest::Flat(map) => map.capacity(),
        }
    }

    pub(crate) fn clear(&self) {
        match self {
            MapUnderTest::Hash(map) => map.clear(),
            MapUnderTest::Flat(map) => map.clear(),
        }
    }

    /// Insert `value` under `key`; whether it replaced a value.
    pub(crate) fn insert(&self, key: u64, value: Value, borrowed: bool) -> bool {
        match (self, borrowed) {
            (MapUnderTest::Hash(map), false) => map.pin().insert(key, value).is_some(),
            (MapUnderTest::Hash(map), true) => {
                let guard = map.domain().read();
                map.insert(key, value, &guard).is_some()
            }
            (MapUnderTest::Flat(map), false) => map.insert(key, value).is_some(),
            (MapUnderTest::Flat(map), true) => {
                let guard = map.domain().read();
                map.insert_borrowed(key, value, &guard).is_some()
            }
        }
    }

    /// Remove `key`; whether it was there.
    pub(crate) fn remove(&self, key: u64, borrowed: bool) -> bool {
        match (self, borrowed) {
            (MapUnderTest::Hash(map), false) => map.pin().remove(&key).is_some(),
            (MapUnderTest::Hash(map), true) => {
                let guard = map.domain().read();
                map.remove(&key, &guard).is_some()
            }
            (MapUnderTest::Flat(map), false) => map.remove(&key).is_some(),
            (MapUnderTest::Flat(map), true) => {
                let guard = map.domain().read();
                map.remove_borrowed(&key, &guard).is_some()
            }
        }
    }

    /// Replace the value of `key` by `f(value)`; whether the key was there (and `f` ran: more
    /// than once for the hash map when another writer changed the bucket meanwhile, once under
    /// the writer lock for the flat map, which hands it a clone of the value).
    pub(crate) fn update(&self, key: u64, f: &mut dyn FnMut(&Value) -> Value) -> bool {
        match self {
            MapUnderTest::Hash(map) => map.pin().update(&key, f).is_some(),
            MapUnderTest::Flat(map) => map.update(&key, |old| f(&old)).is_some(),
        }
    }

    /// [`update`](Self::update) by `compute` (an insert of `f(value)` if the key is there, an
    /// abort if not), under a guard of the caller's: whether it replaced a value. Its closure
    /// runs as `update`'s does (more than once for the hash map, once for the flat map).
    pub(crate) fn update_by_compute(&self, key: u64, f: &mut dyn FnMut(&Value) -> Value) -> bool {
        let guard = self.domain().read();
        let mut op = |entry: Option<(&u64, &Value)>| match entry {
            Some((_, value)) => Operation::Insert(f(value)),
            None => Operation::Abort(()),
        };
        let done = match self {
            MapUnderTest::Hash(map) => map.compute(key, &mut op, &guard),
            MapUnderTest::Flat(map) => map.compute(key, op, &guard),
        };
        matches!(done, Compute::Updated { .. })
    }

    /// Keep the entries for which `keep` holds; how many it removed (for the flat map, whose
    /// `retain` returns nothing: how many `keep` refused, each once).
    pub(crate) fn retain(&self, keep: &mut dyn FnMut(&u64, &Value) -> bool) -> usize {
        match self {
            MapUnderTest::Hash(map) => map.retain(keep),
            MapUnderTest::Flat(map) => {
                let mut refused = 0;
                map.retain(|key, value| {
                    let kept = keep(key, value);
                    refused += usize::from(!kept);
                    kept
                });
                refused
            }
        }
    }

    /// Let the values of removed entries go: the flat map keeps them in its table until a
    /// rebuild replaces the table (`shrink_to_fit` forces one); the hash map retires each at
    /// its removal, so there is nothing to do.
    pub(crate) fn release_removed(&self) {
        match self {
            MapUnderTest::Hash(_) => {}
            MapUnderTest::Flat(map) => map.shrink_to_fit(),
        }
    }

    pub(crate) fn get<'g, G: ReadSection>(&'g self, key: u64, guard: &'g G) -> Option<&'g Value> {
        match self {
            MapUnderTest::Hash(map) => map.get(&key, guard),
            MapUnderTest::Flat(map) => map.get(&key, guard),
        }
    }

    pub(crate) fn get_key_value<'g, G: ReadSection>(
        &'g self,
        key: u64,
        guard: &'g G,
    ) -> Option<(&'g u64, &'g Value)> {
        match self {
            MapUnderTest::Hash(map) => map.get_key_value(&key, guard),
            MapUnderTest::Flat(map) => map.get_key_value(&key, guard),
        }
    }

    pub(crate) fn contains_key<G: ReadSection>(&self, key: u64, guard: &G) -> bool {
        match self {
            MapUnderTest::Hash(map) => map.contains_key(&key, guard),
            MapUnderTest::Flat(map) => map.contains_key(&key, guard),
        }
    }

    /// Iterate the map under `guard`: `f(n, key, value)` for the `n`th entry yielded.
    pub(crate) fn for_each<G: ReadSection>(
        &self,
        guard: &G,
        mut f: impl FnMut(usize, &u64, &Value),
    ) {
        match self {
            MapUnderTest::Hash(map) => {
                for (n, (key, value)) in map.iter(guard).enumerate() {
                    f(n, key, value);
                }
            }
            MapUnderTest::Flat(map) => {
                for (n, (key, value)) in map.iter(guard).enumerate() {
                    f(n, key, value);
                }
            }
        }
    }
}
