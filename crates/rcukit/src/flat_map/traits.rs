//! The standard traits of [`RcuFlatMap`]: `Debug`, `Extend`, `FromIterator`, `Clone`,
//! `PartialEq`, `Eq`.

use super::RcuFlatMap;
use crate::domain_ref::DomainRef;
use std::fmt;
use std::hash::{BuildHasher, Hash};

impl<K, V, S, D> fmt::Debug for RcuFlatMap<K, V, S, D>
where
    K: Copy + Send + 'static + fmt::Debug,
    V: Copy + Send + 'static + fmt::Debug,
    D: DomainRef,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let guard = self.domain().read();
        f.debug_map().entries(self.iter(&guard)).finish()
    }
}

impl<K, V, S, D> Extend<(K, V)> for RcuFlatMap<K, V, S, D>
where
    K: Copy + Hash + Eq + Send + 'static,
    V: Copy + Send + 'static,
    S: BuildHasher,
    D: DomainRef,
{
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, entries: I) {
        for (k, v) in entries {
            self.insert(k, v);
        }
    }
}

impl<K, V, S> FromIterator<(K, V)> for RcuFlatMap<K, V, S>
where
    K: Copy + Hash + Eq + Send + 'static,
    V: Copy + Send + 'static,
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
    K: Copy + Hash + Eq + Send + 'static,
    V: Copy + Send + 'static,
    S: BuildHasher + Clone,
    D: DomainRef + Clone,
{
    /// A map with the same entries (as one iteration sees them), hasher and domain.
    fn clone(&self) -> Self {
        let copy = RcuFlatMap::with_capacity_hasher_in(
            self.len(),
            self.hasher().clone(),
            self.domain_ref().clone(),
        );
        let guard = self.domain().read();
        for (k, v) in self.iter(&guard) {
            copy.insert(*k, *v);
        }
        copy
    }
}

impl<K, V, S, D> PartialEq for RcuFlatMap<K, V, S, D>
where
    K: Copy + Hash + Eq + Send + 'static,
    V: Copy + PartialEq + Send + 'static,
    S: BuildHasher,
    D: DomainRef,
{
    /// The same entries, as an iteration of each map sees them (exact when neither is written
    /// meanwhile).
    fn eq(&self, other: &Self) -> bool {
        let (mine, theirs) = (self.domain().read(), other.domain().read());
        self.len() == other.len()
            && self
                .iter(&mine)
                .all(|(k, v)| other.get(k, &theirs) == Some(v))
    }
}

impl<K, V, S, D> Eq for RcuFlatMap<K, V, S, D>
where
    K: Copy + Hash + Eq + Send + 'static,
    V: Copy + Eq + Send + 'static,
    S: BuildHasher,
    D: DomainRef,
{
}
