//! Iteration over an [`RcuFlatMap`]: one walk of one table (see the map's module docs,
//! "Iteration", for why an entry present throughout is yielded exactly once).

use super::table::{self, Table};
use super::RcuFlatMap;
use crate::domain_ref::AnyDomainRef;
use crate::section::ReadSection;
use std::iter::FusedIterator;
use std::sync::atomic::Ordering::Relaxed;

impl<K: Clone + Send + 'static, V: Clone + Send + 'static, S, D: AnyDomainRef>
    RcuFlatMap<K, V, S, D>
{
    /// The entries, in no particular order, valid while both `guard` and the map are borrowed:
    /// a walk of the table that was the map's when the iteration began (see [`Iter`]).
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another domain than the map's, or is an offline `QsbrThread`.
    #[track_caller]
    pub fn iter<'g, G: ReadSection>(&'g self, guard: &'g G) -> Iter<'g, K, V> {
        // Counted under the writer lock, so that every write either sees the count or is done
        // (and seen by the walk) before it.
        let lock = self.lock();
        let iter = Iter::walk(self.table(guard));
        drop(lock);
        iter
    }

    /// The keys, as [`iter`](Self::iter) yields them.
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another domain than the map's, or is an offline `QsbrThread`.
    #[track_caller]
    pub fn keys<'g, G: ReadSection>(&'g self, guard: &'g G) -> Keys<'g, K, V> {
        Keys(self.iter(guard))
    }

    /// The values, as [`iter`](Self::iter) yields them.
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another domain than the map's, or is an offline `QsbrThread`.
    #[track_caller]
    pub fn values<'g, G: ReadSection>(&'g self, guard: &'g G) -> Values<'g, K, V> {
        Values(self.iter(guard))
    }
}

/// The entries of an [`RcuFlatMap`], from [`RcuFlatMap::iter`].
///
/// It walks one table, the map's when the iteration began, control word by control word
/// (eight slots each), and yields the
/// slots it sees full: it ends after one pass over that table whatever the writers do (a
/// rebuild makes a new table and leaves this one as it was). An entry present throughout the
/// iteration is yielded exactly once, with its value before or after any replacement made
/// meanwhile; an entry inserted or removed meanwhile may or may not be (a key removed and
/// inserted again is two entries, and may be yielded twice). Starting an iteration
/// waits for a write under way; while it lasts, the first replacement that would move an entry
/// to another control word rebuilds the table instead (see the module docs, "Iteration").
pub struct Iter<'g, K, V> {
    table: &'g Table<K, V>,
    word: usize,
    fulls: table::Mask,
}

/// The keys of an [`RcuFlatMap`], from [`RcuFlatMap::keys`]; see [`Iter`].
pub struct Keys<'g, K, V>(Iter<'g, K, V>);

impl<'g, K, V> Iterator for Keys<'g, K, V> {
    type Item = &'g K;

    fn next(&mut self) -> Option<&'g K> {
        self.0.next().map(|(k, _)| k)
    }
}

impl<K, V> FusedIterator for Keys<'_, K, V> {}

/// The values of an [`RcuFlatMap`], from [`RcuFlatMap::values`]; see [`Iter`].
pub struct Values<'g, K, V>(Iter<'g, K, V>);

impl<'g, K, V> Iterator for Values<'g, K, V> {
    type Item = &'g V;

    fn next(&mut self) -> Option<&'g V> {
        self.0.next().map(|(_, v)| v)
    }
}

impl<K, V> FusedIterator for Values<'_, K, V> {}

impl<K, V> FusedIterator for Iter<'_, K, V> {}

impl<'g, K, V> Iter<'g, K, V> {
    /// A walk of `table`, registered on it. The caller holds the writer lock (see
    /// [`RcuFlatMap::iter`]).
    pub(super) fn walk(table: &'g Table<K, V>) -> Self {
        table.iterators.fetch_add(1, Relaxed);
        Iter {
            table,
            word: 0,
            fulls: table::fulls(table.ctrl(0)),
        }
    }
}

impl<K, V> Drop for Iter<'_, K, V> {
    fn drop(&mut self) {
        self.table.iterators.fetch_sub(1, Relaxed);
    }
}

impl<'g, K, V> Iterator for Iter<'g, K, V> {
    type Item = (&'g K, &'g V);

    fn next(&mut self) -> Option<(&'g K, &'g V)> {
        loop {
            if let Some(slot) = self.fulls.next() {
                // SAFETY: seen full with acquire (claim 1); the table lives for 'g.
                let (k, v) = unsafe { self.table.entry(self.word * table::WORD + slot) };
                return Some((k, v));
            }
            self.word += 1;
            if self.word >= self.table.words() {
                self.word = self.table.words();
                return None;
            }
            self.fulls = table::fulls(self.table.ctrl(self.word));
        }
    }
}
