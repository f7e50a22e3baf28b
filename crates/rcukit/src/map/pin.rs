//! [`MapRef`]: a map and a guard of its domain in one handle (as papaya's `pin()`), for code
//! that does not want to carry a guard beside the map.
//!
//! Its writers return references valid for the handle. What they unlink is kept by the
//! handle and retired when it drops, *after* its guard: retiring outside a read-side critical
//! section lets the retiring thread free earlier retired entries itself (see
//! [`callbacks::invoke`](crate::callbacks::invoke)), which is what keeps memory bounded under
//! a flood of writes. A handle kept for a long time therefore keeps what it removed until it
//! drops; drop it between batches.

use super::iter::{Iter, Keys, Values};
use super::node::Node;
use super::table::Table;
use super::write::{OccupiedError, Put, Sink};
use super::RcuHashMap;
use crate::compute::{Compute, Operation};
use crate::domain_ref::DomainRef;
use crate::Guard;
use std::borrow::Borrow;
use std::cell::RefCell;
use std::hash::{BuildHasher, Hash};
use std::mem::ManuallyDrop;

/// A map with a guard of its domain; from [`RcuHashMap::pin`].
///
/// Its writers return references valid for the handle. What they unlink is kept by the handle
/// and retired when it drops, after its guard, so that the retiring thread may free earlier
/// retired entries itself (retires made inside a read-side critical section leave that to the
/// domain's workers). A handle kept for a long time keeps what it removed until it drops:
/// drop it between batches.
pub struct MapRef<'m, K, V, S, D>
where
    K: Send + 'static,
    V: Send + 'static,
    D: DomainRef,
{
    map: &'m RcuHashMap<K, V, S, D>,
    guard: ManuallyDrop<Guard<'m>>,
    unlinked: RefCell<Kept<K, V>>,
}

/// What a [`MapRef`]'s writes unlinked: nodes (the first one without an allocation: a handle
/// made for one write is the common case), and tables whose resize they finished.
struct Kept<K, V> {
    first: Option<*mut Node<K, V>>,
    nodes: Vec<*mut Node<K, V>>,
    tables: Vec<*mut Table<K, V>>,
}

impl<K, V, S, D> Sink<K, V> for MapRef<'_, K, V, S, D>
where
    K: Send + 'static,
    V: Send + 'static,
    D: DomainRef,
{
    fn take(&self, node: Option<*mut Node<K, V>>, table: Option<*mut Table<K, V>>) {
        let mut unlinked = self.unlinked.borrow_mut();
        if let Some(node) = node {
            match unlinked.first {
                None => unlinked.first = Some(node),
                Some(_) => unlinked.nodes.push(node),
            }
        }
        unlinked.tables.extend(table);
    }
}

impl<K, V, S, D> Drop for MapRef<'_, K, V, S, D>
where
    K: Send + 'static,
    V: Send + 'static,
    D: DomainRef,
{
    #[inline]
    fn drop(&mut self) {
        // SAFETY: dropped exactly once, here; nothing borrowed from it outlives `self`.
        unsafe { ManuallyDrop::drop(&mut self.guard) };
        let kept = self.unlinked.get_mut();
        // A handle that unlinked nothing (a read, an insert of a new key) ends here.
        if kept.first.is_some() || !kept.tables.is_empty() {
            self.retire_kept();
        }
    }
}

impl<K, V, S, D> MapRef<'_, K, V, S, D>
where
    K: Send + 'static,
    V: Send + 'static,
    D: DomainRef,
{
    /// Retire what the handle's writes unlinked (its guard has ended).
    fn retire_kept(&mut self) {
        let kept = self.unlinked.get_mut();
        if kept.nodes.is_empty() {
            // The common case (a handle made for one write): at most one node.
            self.map.retire(kept.first.take(), None);
        } else {
            // One object of the domain for all the nodes (see `node::Batch`).
            self.map.retire(
                kept.first.take().into_iter().chain(kept.nodes.drain(..)),
                None,
            );
        }
        for table in kept.tables.drain(..) {
            self.map.retire([], Some(table));
        }
    }
}

impl<K, V, S, D> RcuHashMap<K, V, S, D>
where
    K: Send + 'static,
    V: Send + 'static,
    D: DomainRef,
{
    /// The map with a guard of its domain, in one handle ([`MapRef`]).
    pub fn pin(&self) -> MapRef<'_, K, V, S, D> {
        MapRef {
            map: self,
            guard: ManuallyDrop::new(self.domain().read()),
            unlinked: RefCell::new(Kept {
                first: None,
                nodes: Vec::new(),
                tables: Vec::new(),
            }),
        }
    }
}

impl<'m, K, V, S, D> MapRef<'m, K, V, S, D>
where
    K: Hash + Eq + Send + 'static,
    V: Send + 'static,
    S: BuildHasher,
    D: DomainRef,
{
    /// The guard this handle holds.
    pub fn guard(&self) -> &Guard<'m> {
        &self.guard
    }

    /// The map.
    pub fn map(&self) -> &'m RcuHashMap<K, V, S, D> {
        self.map
    }

    /// See [`RcuHashMap::get`].
    pub fn get<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.map.get(key, &*self.guard)
    }

    /// See [`RcuHashMap::get_key_value`].
    pub fn get_key_value<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
    {
        self.map.get_key_value(key, &*self.guard)
    }

    /// See [`RcuHashMap::contains_key`].
    pub fn contains_key<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.map.contains_key(key, &*self.guard)
    }

    /// See [`RcuHashMap::insert`]; the replaced value is retired when this handle drops.
    #[track_caller]
    pub fn insert(&self, key: K, value: V) -> Option<&V> {
        let hash = self.map.hasher.hash_one(&key);
        match self
            .map
            .put(hash, key, value, true, &*self.guard, self, "insert")
        {
            Put::Replaced { old, .. } => Some(&old.value),
            Put::Inserted(_) | Put::Occupied { .. } => None,
        }
    }

    /// See [`RcuHashMap::try_insert`].
    #[track_caller]
    pub fn try_insert(&self, key: K, value: V) -> Result<&V, OccupiedError<'_, V>> {
        let hash = self.map.hasher.hash_one(&key);
        match self
            .map
            .put(hash, key, value, false, &*self.guard, self, "try_insert")
        {
            Put::Inserted(node) => Ok(&node.value),
            Put::Occupied { current, value, .. } => Err(OccupiedError {
                current: &current.value,
                not_inserted: value,
            }),
            Put::Replaced { .. } => unreachable!("put without replace never replaces"),
        }
    }

    /// See [`RcuHashMap::get_or_insert_with`].
    #[track_caller]
    pub fn get_or_insert_with<F: FnOnce() -> V>(&self, key: K, make: F) -> &V {
        &self.map.get_or_put(key, make, &*self.guard, self).value
    }

    /// See [`RcuHashMap::get_or_insert`].
    #[track_caller]
    pub fn get_or_insert(&self, key: K, value: V) -> &V {
        self.get_or_insert_with(key, || value)
    }

    /// See [`RcuHashMap::remove`]; the entry is retired when this handle drops.
    #[track_caller]
    pub fn remove<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.map
            .remove_where(key, |_, _| true, false, &*self.guard, self, "remove")
            .map(|n| &n.value)
    }

    /// See [`RcuHashMap::remove_entry`]; the entry is retired when this handle drops.
    #[track_caller]
    pub fn remove_entry<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
    {
        self.map
            .remove_where(key, |_, _| true, false, &*self.guard, self, "remove_entry")
            .map(|n| (&n.key, &n.value))
    }

    /// See [`RcuHashMap::remove_if`].
    #[track_caller]
    pub fn remove_if<Q, F>(&self, key: &Q, condition: F) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        F: FnMut(&K, &V) -> bool,
    {
        self.map
            .remove_where(key, condition, true, &*self.guard, self, "remove_if")
            .map(|n| (&n.key, &n.value))
    }

    /// See [`RcuHashMap::update`].
    #[track_caller]
    pub fn update<Q, F>(&self, key: &Q, f: F) -> Option<&V>
    where
        K: Borrow<Q> + Clone,
        Q: Hash + Eq + ?Sized,
        F: FnMut(&V) -> V,
    {
        self.map
            .update_where(key, f, &*self.guard, self)
            .map(|n| &n.value)
    }

    /// See [`RcuHashMap::compute`].
    #[track_caller]
    pub fn compute<F, T>(&self, key: K, f: F) -> Compute<'_, K, V, T>
    where
        F: FnMut(Option<(&K, &V)>) -> Operation<V, T>,
    {
        self.map.compute_dropping_late(key, f, &*self.guard, self)
    }

    /// See [`RcuHashMap::update_or_insert_with`].
    #[track_caller]
    pub fn update_or_insert_with<U, I>(&self, key: K, update: U, insert: I) -> &V
    where
        U: FnMut(&V) -> V,
        I: FnOnce() -> V,
    {
        self.map
            .update_or_insert_in(key, update, insert, &*self.guard, self)
    }

    /// See [`RcuHashMap::update_or_insert`].
    #[track_caller]
    pub fn update_or_insert<U>(&self, key: K, update: U, value: V) -> &V
    where
        U: FnMut(&V) -> V,
    {
        self.update_or_insert_with(key, update, || value)
    }

    /// See [`RcuHashMap::iter`].
    pub fn iter(&self) -> Iter<'_, K, V> {
        self.map.iter(&*self.guard)
    }

    /// See [`RcuHashMap::keys`].
    pub fn keys(&self) -> Keys<'_, K, V> {
        self.map.keys(&*self.guard)
    }

    /// See [`RcuHashMap::values`].
    pub fn values(&self) -> Values<'_, K, V> {
        self.map.values(&*self.guard)
    }

    /// See [`RcuHashMap::len`].
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// See [`RcuHashMap::is_empty`].
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
