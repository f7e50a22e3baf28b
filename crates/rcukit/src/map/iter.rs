//! Iteration over an [`RcuHashMap`](super::RcuHashMap): under a guard while writers and
//! resizes run ([`Iter`]), and with exclusive access ([`IterMut`], [`IntoIter`]).
//!
//! # Why a concurrent iteration yields each entry once
//!
//! [`Iter`] goes through the buckets of the table that was current when it started (`T0`)
//! one index `b` at a time, and at each index yields exactly the nodes whose hash has `b` in
//! its low bits for `T0` (`hash & mask0 == b`). Every node has one such index, so no node is
//! yielded at two indexes. At one index, it walks `T0`'s bucket `b`, then (when `T0` is being
//! moved) the buckets of the next table that can hold `b`'s nodes, and so on down the chain of
//! tables, and skips nodes it already yielded at this index (a node moved while the iterator
//! walked, met twice). A node present throughout is met at least once: if the walk of `T0`'s
//! bucket missed it, it had been moved before, so the next table held it when the walk went
//! there (claim 3 of the essay), and by induction down the chain.
//!
//! An entry whose value was *replaced* during the iteration is a new node: the iteration may
//! yield the old value, the new one, or both. Entries inserted or removed during the
//! iteration may or may not appear.

use super::table::{Node, Table};
use std::fmt;
use std::iter::FusedIterator;
use std::marker::PhantomData;
use std::sync::atomic::Ordering::Acquire;

/// Iterator over the entries of an [`RcuHashMap`](super::RcuHashMap) under a guard; see
/// [`RcuHashMap::iter`](super::RcuHashMap::iter).
pub struct Iter<'g, K, V> {
    first: &'g Table<K, V>,
    /// The next index of `first` to gather.
    index: usize,
    /// The nodes gathered for the current index, yielded from the back.
    gathered: Vec<&'g Node<K, V>>,
    /// (table, bucket) pairs still to walk for the current index.
    todo: Vec<(&'g Table<K, V>, usize)>,
}

impl<'g, K, V> Iter<'g, K, V> {
    /// # Safety
    ///
    /// `first` and everything reachable from it stay alive for `'g`.
    pub(crate) unsafe fn new(first: &'g Table<K, V>) -> Self {
        Iter {
            first,
            index: 0,
            gathered: Vec::new(),
            todo: Vec::new(),
        }
    }

    /// Gather the nodes of index `b` of the first table (see the module docs).
    fn gather(&mut self, b: usize) {
        let mask0 = self.first.len() - 1;
        self.todo.push((self.first, b));
        while let Some((table, i)) = self.todo.pop() {
            let mut p = table.heads[i].load(Acquire);
            while !p.is_null() {
                // SAFETY: published node (Acquire), alive for 'g (constructor's contract).
                let node: &'g Node<K, V> = unsafe { &*p };
                if node.hash as usize & mask0 == b
                    && !self.gathered.iter().any(|n| std::ptr::eq(*n, node))
                {
                    self.gathered.push(node);
                }
                p = node.next.load(Acquire);
            }
            let next = table.next.load(Acquire);
            if !next.is_null() {
                // SAFETY: a successor table is alive as long as its predecessor is reachable.
                let next: &'g Table<K, V> = unsafe { &*next };
                for c in table.covering(i, next) {
                    self.todo.push((next, c));
                }
            }
        }
        self.gathered.reverse(); // yield in chain order
    }
}

impl<'g, K, V> Iter<'g, K, V> {
    /// The next node (for `retain`, which unlinks it by address).
    pub(crate) fn next_node(&mut self) -> Option<&'g Node<K, V>> {
        loop {
            if let Some(node) = self.gathered.pop() {
                return Some(node);
            }
            if self.index >= self.first.len() {
                return None;
            }
            let b = self.index;
            self.index += 1;
            self.gather(b);
        }
    }
}

impl<'g, K, V> Iterator for Iter<'g, K, V> {
    type Item = (&'g K, &'g V);

    fn next(&mut self) -> Option<Self::Item> {
        self.next_node().map(|node| (&node.key, &node.value))
    }
}

impl<K, V> FusedIterator for Iter<'_, K, V> {}

impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for Iter<'_, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Iter").field("index", &self.index).finish()
    }
}

/// Mutable iterator over an [`RcuHashMap`](super::RcuHashMap); see
/// [`RcuHashMap::iter_mut`](super::RcuHashMap::iter_mut).
pub struct IterMut<'a, K, V> {
    pub(crate) nodes: std::vec::IntoIter<*mut Node<K, V>>,
    pub(crate) _map: PhantomData<&'a mut (K, V)>,
}

impl<'a, K, V> Iterator for IterMut<'a, K, V> {
    type Item = (&'a K, &'a mut V);

    fn next(&mut self) -> Option<Self::Item> {
        let p = self.nodes.next()?;
        // SAFETY: the map is borrowed mutably for 'a and each node is yielded once.
        let node = unsafe { &mut *p };
        Some((&node.key, &mut node.value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.nodes.size_hint()
    }
}

impl<K, V> ExactSizeIterator for IterMut<'_, K, V> {}
impl<K, V> FusedIterator for IterMut<'_, K, V> {}

// SAFETY: an IterMut is a unique borrow of the map's entries: like `&mut (K, V)`.
unsafe impl<K: Send, V: Send> Send for IterMut<'_, K, V> {}
// SAFETY: sharing it shares nothing but the iterator position (`next` needs `&mut`).
unsafe impl<K: Sync, V: Sync> Sync for IterMut<'_, K, V> {}

/// Owning iterator over an [`RcuHashMap`](super::RcuHashMap)'s entries.
pub struct IntoIter<K, V> {
    pub(crate) nodes: std::vec::IntoIter<Box<Node<K, V>>>,
}

impl<K, V> Iterator for IntoIter<K, V> {
    type Item = (K, V);

    fn next(&mut self) -> Option<Self::Item> {
        let node = *self.nodes.next()?;
        Some((node.key, node.value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.nodes.size_hint()
    }
}

impl<K, V> ExactSizeIterator for IntoIter<K, V> {}
impl<K, V> FusedIterator for IntoIter<K, V> {}
