//! The standard traits of [`RcuFlatMap`]: `Debug`, `Extend`, `FromIterator`, `Clone`,
//! `PartialEq`, `Eq`. Those that read the map read it by themselves (see `hold`): on a QSBR
//! domain, under its writer lock.

use super::RcuFlatMap;
use crate::domain_ref::AnyDomainRef;
use std::fmt;
use std::hash::{BuildHasher, Hash};

impl<K, V, S, D> fmt::Debug for RcuFlatMap<K, V, S, D>
where
    K: Clone + Send + 'static + fmt::Debug,
    V: Clone + Send + 'static + fmt::Debug,
    D: AnyDomainRef,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hold = self.hold();
        let result = f.debug_map().entries(self.iter_held(&hold)).finish();
        result
    }
}

impl<K, V, S, D> Extend<(K, V)> for RcuFlatMap<K, V, S, D>
where
    K: Clone + Hash + Eq + Send + 'static,
    V: Clone + Send + 'static,
    S: BuildHasher,
    D: AnyDomainRef,
{
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, entries: I) {
        for (k, v) in entries {
            self.insert(k, v);
        }
    }
}

impl<K, V, S> FromIterator<(K, V)> for RcuFlatMap<K, V, S>
where
    K: Clone + Hash + Eq + Send + 'static,
    V: Clone + Send + 'static,
    S: BuildHasher + Default,
{
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Self {
        let mut map = Self::with_hasher(S::default());
        map.extend(entries);
        map
    }
}

impl<K, V, S, D> Clone for RcuFlatMap<K, V, S, D>
where
    K: Clone + Hash + Eq + Send + 'static,
    V: Clone + Send + 'static,
    S: BuildHasher + Clone,
    D: AnyDomainRef + Clone,
{
    /// A map with the same entries (as one iteration sees them), hasher and domain.
    fn clone(&self) -> Self {
        let copy = RcuFlatMap::with_capacity_hasher_in(
            self.len(),
            self.hasher().clone(),
            self.domain_ref().clone(),
        );
        let hold = self.hold();
        for (k, v) in self.iter_held(&hold) {
            copy.insert(k.clone(), v.clone());
        }
        drop(hold);
        copy
    }
}

impl<K, V, S, D> PartialEq for RcuFlatMap<K, V, S, D>
where
    K: Clone + Hash + Eq + Send + 'static,
    V: Clone + PartialEq + Send + 'static,
    S: BuildHasher,
    D: AnyDomainRef,
{
    /// The same entries, as an iteration of each map sees them (exact when neither is written
    /// meanwhile).
    fn eq(&self, other: &Self) -> bool {
        if self.len() != other.len() {
            return false;
        }
        // On QSBR domains the holds are writer locks: taken in address order, so that `a == b`
        // and `b == a` on two threads cannot deadlock, and let go in the reverse order. A map
        // compared with itself holds its lock once: the second hold finds it held here.
        let self_first = (self as *const Self) <= (other as *const Self);
        let (a, b) = if self_first {
            (self, other)
        } else {
            (other, self)
        };
        let first = a.hold();
        let second = b.hold();
        let (mine, theirs) = if self_first {
            (&first, &second)
        } else {
            (&second, &first)
        };
        let equal = self
            .iter_held(mine)
            .all(|(k, v)| other.get_held(k, theirs) == Some(v));
        drop(second);
        drop(first);
        equal
    }
}

impl<K, V, S, D> Eq for RcuFlatMap<K, V, S, D>
where
    K: Clone + Hash + Eq + Send + 'static,
    V: Clone + Eq + Send + 'static,
    S: BuildHasher,
    D: AnyDomainRef,
{
}
