//! The standard traits of [`RcuFlatMap`]: `Debug`, `Extend`, `FromIterator`.

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
