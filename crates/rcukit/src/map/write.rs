//! The writers of [`RcuHashMap`]: insert, remove, update and the bulk writes, each locking
//! one bucket at a time (claims 1 to 5 of the [module docs](super)); and the guards that
//! free or retire what a write holds if it unwinds.

use super::table::{self, Node, Table};
use super::RcuHashMap;
use crate::domain_ref::DomainRef;
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::Ordering::{Acquire, Relaxed};

impl<K, V, S, D> RcuHashMap<K, V, S, D>
where
    K: Hash + Eq + Send + 'static,
    V: Send + 'static,
    S: BuildHasher,
    D: DomainRef,
{
    /// Insert `value` for `key`. Returns `true` when it replaced a value. The entry is replaced
    /// whole (readers see the old pair or the new one): the new key is kept, and the old key
    /// and value are retired (dropped after a grace period).
    pub fn insert(&self, key: K, value: V) -> bool {
        let hash = self.hasher.hash_one(&key);
        let node = OwnedNode(Node::new(hash, key, value));
        let (replaced, finished) = {
            let guard = self.domain().read();
            let mut table = self.table(&guard);
            let replaced = loop {
                // SAFETY: the node is ours until linked.
                let key = unsafe { &(*node.0).key };
                // SAFETY: nodes and tables are protected by the guard.
                let spot = unsafe { table::locate(table, hash, &mut |k| k == key) };
                let Some(locked) = spot.lock() else {
                    table = self.table(&guard);
                    continue;
                };
                let node = node.publish();
                if spot.found.is_null() {
                    // SAFETY: validated lock; `node` is unpublished with this hash.
                    unsafe { locked.link_first(node) };
                    self.len.fetch_add(1, Relaxed);
                    break None;
                }
                // SAFETY: as above, and the spot found the old node.
                break Some(unsafe { locked.replace(node) });
            };
            if replaced.is_none() {
                self.maybe_start_resize(table);
            }
            (replaced, self.help_resize(&guard))
        };
        let was_replace = replaced.is_some();
        self.retire(replaced, finished);
        was_replace
    }

    /// Remove `key`. Returns `true` when it was present; the entry is retired.
    pub fn remove<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let (removed, finished) = {
            let guard = self.domain().read();
            let removed = loop {
                let table = self.table(&guard);
                // SAFETY: protected by the guard.
                let spot = unsafe { table::locate(table, hash, &mut |k| k.borrow() == key) };
                if spot.found.is_null() {
                    if spot.unchanged() {
                        break None; // claim 4: absent
                    }
                    continue;
                }
                let Some(locked) = spot.lock() else { continue };
                // SAFETY: validated lock, and the spot found a node.
                break Some(unsafe { locked.unlink() });
            };
            if removed.is_none() {
                return false;
            }
            self.len.fetch_sub(1, Relaxed);
            self.maybe_start_resize(self.table(&guard));
            (removed, self.help_resize(&guard))
        };
        self.retire(removed, finished);
        true
    }

    /// Copy-update the value of `key`: publish `f(&old)` in its place and retire the old
    /// entry. Returns `false` (and does not call `f`) when the key is absent. `f` runs with no
    /// lock held and may run more than once if another writer changes the key's bucket in
    /// between, with the newest value each time.
    pub fn update<Q, F>(&self, key: &Q, mut f: F) -> bool
    where
        K: Borrow<Q> + Clone,
        Q: Hash + Eq + ?Sized,
        F: FnMut(&V) -> V,
    {
        let hash = self.hasher.hash_one(key);
        loop {
            let guard = self.domain().read();
            let table = self.table(&guard);
            // SAFETY: protected by the guard.
            let spot = unsafe { table::locate(table, hash, &mut |k| k.borrow() == key) };
            if spot.found.is_null() {
                if spot.unchanged() {
                    return false;
                }
                continue;
            }
            // SAFETY: the found node is protected by the guard.
            let old = unsafe { &*spot.found };
            let node = OwnedNode(Node::new(hash, old.key.clone(), f(&old.value)));
            let Some(locked) = spot.lock() else {
                drop(guard);
                drop(node); // outside the lock and the critical section
                continue;
            };
            // SAFETY: validated lock; the spot found the old node; ours is unpublished.
            let replaced = unsafe { locked.replace(node.publish()) };
            drop(locked);
            let finished = self.help_resize(&guard);
            drop(guard);
            self.retire([replaced], finished);
            return true;
        }
    }

    /// Remove every entry for which `keep` returns `false`; returns how many were removed.
    /// `keep` runs with no lock held; entries inserted meanwhile may or may not be visited.
    pub fn retain<F>(&self, mut keep: F) -> usize
    where
        F: FnMut(&K, &V) -> bool,
    {
        // Declared before the guard, so it retires after the critical section ends, also
        // when `keep` panics: what was unlinked by then is retired, not leaked.
        let mut unlinked = Unlinked {
            map: self,
            nodes: Vec::new(),
            tables: Vec::new(),
        };
        let guard = self.domain().read();
        let mut iter = self.iter(&guard);
        while let Some(node) = iter.next_node() {
            if keep(&node.key, &node.value) {
                continue;
            }
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

    /// Remove every entry (each is retired).
    pub fn clear(&self) {
        // Declared before the guard, as in `retain`: retired after the critical section.
        let mut unlinked = Unlinked {
            map: self,
            nodes: Vec::new(),
            tables: Vec::new(),
        };
        let guard = self.domain().read();
        let mut table: *const Table<K, V> = self.table(&guard);
        while !table.is_null() {
            // SAFETY: protected by the guard.
            let t = unsafe { &*table };
            // SAFETY: as above.
            unsafe { table::detach_all(t, &mut unlinked.nodes) };
            table = t.next.load(Acquire);
        }
        self.len.fetch_sub(unlinked.nodes.len(), Relaxed);
        unlinked.tables = self.resize_now(&guard);
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

impl<K, V, S, D> Drop for Unlinked<'_, K, V, S, D>
where
    K: Send + 'static,
    V: Send + 'static,
    D: DomainRef,
{
    fn drop(&mut self) {
        self.map.retire(self.nodes.drain(..), None);
        for old in self.tables.drain(..) {
            self.map.retire([], Some(old));
        }
    }
}

/// A node that is ours until published; freed if we unwind first.
struct OwnedNode<K, V>(*mut Node<K, V>);

impl<K, V> OwnedNode<K, V> {
    fn publish(self) -> *mut Node<K, V> {
        let node = self.0;
        std::mem::forget(self);
        node
    }
}

impl<K, V> Drop for OwnedNode<K, V> {
    fn drop(&mut self) {
        // SAFETY: never published (publish forgets the guard), so ours alone.
        drop(unsafe { Box::from_raw(self.0) });
    }
}
