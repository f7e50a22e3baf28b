//! The map a map run tortures, behind the calls the run makes: an [`RcuHashMap`] (the `map`
//! runs) or an [`RcuFlatMap`] (the `flat-map` runs) on the run's `Rcu` domain, or an
//! [`RcuFlatMap`] on the run's QSBR domain (the `qsbr-flat-map` runs), all holding
//! [`Value`]s.
//!
//! The maps differ in what a write returns and in when a removed value is dropped, and the
//! calls here hide only the first: each keyed write says whether the key was there, through
//! one of the map's two paths (`borrowed`: the old value borrowed for a read section of the
//! caller's, otherwise the map's own handle, `pin()`, or a clone for the flat map). When values
//! are dropped is what the run checks, with the same books for every map (see the parent
//! module).
//!
//! A read section is a [`MapGuard`]: a guard of an `Rcu` domain, or a thread online in the QSBR
//! domain. A QSBR reader thread reads through its own registration; a thread that is not
//! registered (a map writer, the end of the run) registers for the length of the call and
//! unregisters after it, so that it is never online while it waits for a grace period.

use super::Value;
use rcukit::map::{Compute, Operation};
use rcukit::{AnyDomainRef, Guard, Qsbr, QsbrThread, Rcu, RcuFlatMap, RcuHashMap};
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
    /// [`RcuFlatMap`] on a QSBR domain: read by the online reader threads with no code per
    /// lookup; removed values dropped as for `Flat`.
    FlatQsbr,
}

impl MapKind {
    /// The map's type name, as the report prints it.
    pub fn type_name(self) -> &'static str {
        match self {
            MapKind::Hash => "RcuHashMap",
            MapKind::Flat => "RcuFlatMap",
            MapKind::FlatQsbr => "RcuFlatMap on a QSBR domain",
        }
    }

    /// Whether removed values go with their table (the flat maps) rather than one by one.
    pub fn is_flat(self) -> bool {
        matches!(self, MapKind::Flat | MapKind::FlatQsbr)
    }
}

/// The domain of the run, on which its map is built.
pub(crate) enum MapDomain {
    Rcu(Arc<Rcu>),
    Qsbr(Arc<Qsbr>),
}

/// The map under test.
pub(crate) enum MapUnderTest {
    Hash(RcuHashMap<u64, Value, RandomState, Arc<Rcu>>),
    Flat(RcuFlatMap<u64, Value, RandomState, Arc<Rcu>>),
    FlatQsbr(RcuFlatMap<u64, Value, RandomState, Arc<Qsbr>>),
}

/// An empty flat map on `domain`; `busted`: its replaced tables drop their entries at once.
fn flat_in<D: AnyDomainRef>(domain: D, busted: bool) -> RcuFlatMap<u64, Value, RandomState, D> {
    let map = RcuFlatMap::with_capacity_hasher_in(0, RandomState::new(), domain);
    if busted {
        // SAFETY: as for the hash map: the table's memory is freed after a grace period, so a
        // dropped entry's integers stay readable.
        unsafe { map.__busted_drop_entries_at_once() }
    } else {
        map
    }
}

/// A read section of the map's domain (see the module docs).
pub(crate) enum MapGuard<'m> {
    /// A guard of the `Rcu` domain.
    Rcu(Guard<'m>),
    /// A QSBR reader thread's own registration, online.
    Reader(&'m QsbrThread<'m>),
    /// A registration taken for this section by a thread that had none.
    Registered(QsbrThread<'m>),
}

impl MapGuard<'_> {
    /// The online QSBR thread of a QSBR section.
    fn qsbr(&self) -> &QsbrThread<'_> {
        match self {
            MapGuard::Reader(thread) => thread,
            MapGuard::Registered(thread) => thread,
            MapGuard::Rcu(_) => unreachable!("a guard of an Rcu domain for a QSBR map"),
        }
    }

    /// The guard of an `Rcu` section.
    fn rcu(&self) -> &Guard<'_> {
        match self {
            MapGuard::Rcu(guard) => guard,
            _ => unreachable!("a QSBR thread for a map on an Rcu domain"),
        }
    }
}

impl MapUnderTest {
    /// An empty map of `kind` on `domain`; `busted`: the self-test's broken reclamation
    /// (the hash map drops removed values at once, the flat map a replaced table's entries).
    pub(crate) fn new(
        kind: MapKind,
        domain: MapDomain,
        busted: bool,
    ) -> Result<MapUnderTest, rcukit::Error> {
        Ok(match (kind, domain) {
            (MapKind::Hash, MapDomain::Rcu(domain)) => {
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
            (MapKind::Flat, MapDomain::Rcu(domain)) => MapUnderTest::Flat(flat_in(domain, busted)),
            (MapKind::FlatQsbr, MapDomain::Qsbr(domain)) => {
                MapUnderTest::FlatQsbr(flat_in(domain, busted))
            }
            (kind, _) => panic!("a {} on a domain of the other kind", kind.type_name()),
        })
    }

    pub(crate) fn kind(&self) -> MapKind {
        match self {
            MapUnderTest::Hash(_) => MapKind::Hash,
            MapUnderTest::Flat(_) => MapKind::Flat,
            MapUnderTest::FlatQsbr(_) => MapKind::FlatQsbr,
        }
    }

    /// A read section of the map's domain for a thread that holds none: a guard, or a QSBR
    /// registration for the section's length (the thread must not be registered already).
    pub(crate) fn guard(&self) -> MapGuard<'_> {
        match self {
            MapUnderTest::Hash(map) => MapGuard::Rcu(map.domain().read()),
            MapUnderTest::Flat(map) => MapGuard::Rcu(map.domain().read()),
            MapUnderTest::FlatQsbr(map) => MapGuard::Registered(map.domain().register()),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            MapUnderTest::Hash(map) => map.len(),
            MapUnderTest::Flat(map) => map.len(),
            MapUnderTest::FlatQsbr(map) => map.len(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn capacity(&self) -> usize {
        match self {
            MapUnderTest::Hash(map) => map.capacity(),
            MapUnderTest::Flat(map) => map.capacity(),
            MapUnderTest::FlatQsbr(map) => map.capacity(),
        }
    }

    /// Make room for `additional` more entries at once (the hash map also keeps the room
    /// as its floor until a `shrink_to_fit`).
    pub(crate) fn reserve(&self, additional: usize) {
        match self {
            MapUnderTest::Hash(map) => map.reserve(additional),
            MapUnderTest::Flat(map) => map.reserve(additional),
            MapUnderTest::FlatQsbr(map) => map.reserve(additional),
        }
    }

    /// Shrink the table to fit the entries, several halvings at once (and drop the hash map's
    /// floor).
    pub(crate) fn shrink_to_fit(&self) {
        match self {
            MapUnderTest::Hash(map) => map.shrink_to_fit(),
            MapUnderTest::Flat(map) => map.shrink_to_fit(),
            MapUnderTest::FlatQsbr(map) => map.shrink_to_fit(),
        }
    }

    pub(crate) fn clear(&self) {
        match self {
            MapUnderTest::Hash(map) => map.clear(),
            MapUnderTest::Flat(map) => map.clear(),
            MapUnderTest::FlatQsbr(map) => map.clear(),
        }
    }

    /// Insert `value` under `key`; whether it replaced a value.
    pub(crate) fn insert(&self, key: u64, value: Value, borrowed: bool) -> bool {
        match (self, borrowed) {
            (MapUnderTest::Hash(map), false) => map.pin().insert(key, value).is_some(),
            (MapUnderTest::Hash(map), true) => {
                let guard = self.guard();
                map.insert(key, value, guard.rcu()).is_some()
            }
            (MapUnderTest::Flat(map), false) => map.insert(key, value).is_some(),
            (MapUnderTest::Flat(map), true) => {
                let guard = self.guard();
                map.insert_borrowed(key, value, guard.rcu()).is_some()
            }
            (MapUnderTest::FlatQsbr(map), false) => map.insert(key, value).is_some(),
            (MapUnderTest::FlatQsbr(map), true) => {
                let guard = self.guard();
                map.insert_borrowed(key, value, guard.qsbr()).is_some()
            }
        }
    }

    /// Remove `key`; whether it was there.
    pub(crate) fn remove(&self, key: u64, borrowed: bool) -> bool {
        match (self, borrowed) {
            (MapUnderTest::Hash(map), false) => map.pin().remove(&key).is_some(),
            (MapUnderTest::Hash(map), true) => {
                let guard = self.guard();
                map.remove(&key, guard.rcu()).is_some()
            }
            (MapUnderTest::Flat(map), false) => map.remove(&key).is_some(),
            (MapUnderTest::Flat(map), true) => {
                let guard = self.guard();
                map.remove_borrowed(&key, guard.rcu()).is_some()
            }
            (MapUnderTest::FlatQsbr(map), false) => map.remove(&key).is_some(),
            (MapUnderTest::FlatQsbr(map), true) => {
                let guard = self.guard();
                map.remove_borrowed(&key, guard.qsbr()).is_some()
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
            MapUnderTest::FlatQsbr(map) => map.update(&key, |old| f(&old)).is_some(),
        }
    }

    /// [`update`](Self::update) by `compute` (an insert of `f(value)` if the key is there, an
    /// abort if not), under a read section of the caller's: whether it replaced a value. Its
    /// closure runs as `update`'s does (more than once for the hash map, once for the flat
    /// map).
    pub(crate) fn update_by_compute(&self, key: u64, f: &mut dyn FnMut(&Value) -> Value) -> bool {
        let guard = self.guard();
        let mut op = |entry: Option<(&u64, &Value)>| match entry {
            Some((_, value)) => Operation::Insert(f(value)),
            None => Operation::Abort(()),
        };
        let done = match self {
            MapUnderTest::Hash(map) => map.compute(key, &mut op, guard.rcu()),
            MapUnderTest::Flat(map) => map.compute(key, op, guard.rcu()),
            MapUnderTest::FlatQsbr(map) => map.compute(key, op, guard.qsbr()),
        };
        matches!(done, Compute::Updated { .. })
    }

    /// Keep the entries for which `keep` holds; how many it removed (for the flat map, whose
    /// `retain` returns nothing: how many `keep` refused, each once).
    pub(crate) fn retain(&self, keep: &mut dyn FnMut(&u64, &Value) -> bool) -> usize {
        let mut refused = 0;
        let mut counted = |key: &u64, value: &Value| {
            let kept = keep(key, value);
            refused += usize::from(!kept);
            kept
        };
        match self {
            MapUnderTest::Hash(map) => return map.retain(keep),
            MapUnderTest::Flat(map) => map.retain(&mut counted),
            MapUnderTest::FlatQsbr(map) => map.retain(&mut counted),
        }
        refused
    }

    /// Let the values of removed entries go: the flat map keeps them in its table until a
    /// rebuild replaces the table (`shrink_to_fit` forces one); the hash map retires each at
    /// its removal, so there is nothing to do.
    pub(crate) fn release_removed(&self) {
        match self {
            MapUnderTest::Hash(_) => {}
            MapUnderTest::Flat(map) => map.shrink_to_fit(),
            MapUnderTest::FlatQsbr(map) => map.shrink_to_fit(),
        }
    }

    pub(crate) fn get<'g>(&'g self, key: u64, guard: &'g MapGuard<'_>) -> Option<&'g Value> {
        match self {
            MapUnderTest::Hash(map) => map.get(&key, guard.rcu()),
            MapUnderTest::Flat(map) => map.get(&key, guard.rcu()),
            MapUnderTest::FlatQsbr(map) => map.get(&key, guard.qsbr()),
        }
    }

    pub(crate) fn get_key_value<'g>(
        &'g self,
        key: u64,
        guard: &'g MapGuard<'_>,
    ) -> Option<(&'g u64, &'g Value)> {
        match self {
            MapUnderTest::Hash(map) => map.get_key_value(&key, guard.rcu()),
            MapUnderTest::Flat(map) => map.get_key_value(&key, guard.rcu()),
            MapUnderTest::FlatQsbr(map) => map.get_key_value(&key, guard.qsbr()),
        }
    }

    pub(crate) fn contains_key(&self, key: u64, guard: &MapGuard<'_>) -> bool {
        match self {
            MapUnderTest::Hash(map) => map.contains_key(&key, guard.rcu()),
            MapUnderTest::Flat(map) => map.contains_key(&key, guard.rcu()),
            MapUnderTest::FlatQsbr(map) => map.contains_key(&key, guard.qsbr()),
        }
    }

    /// Iterate the map under `guard`: `f(n, key, value)` for the `n`th entry yielded.
    pub(crate) fn for_each(&self, guard: &MapGuard<'_>, mut f: impl FnMut(usize, &u64, &Value)) {
        let mut each = |n: usize, (key, value): (&u64, &Value)| f(n, key, value);
        match self {
            MapUnderTest::Hash(map) => map
                .iter(guard.rcu())
                .enumerate()
                .for_each(|(n, e)| each(n, e)),
            MapUnderTest::Flat(map) => map
                .iter(guard.rcu())
                .enumerate()
                .for_each(|(n, e)| each(n, e)),
            MapUnderTest::FlatQsbr(map) => map
                .iter(guard.qsbr())
                .enumerate()
                .for_each(|(n, e)| each(n, e)),
        }
    }
}
