//! Rebuilding a map's table: a new table of the size the map needs (larger when a write finds
//! no room, smaller when removals leave it one-eighth full, any size `reserve` and
//! `shrink_to_fit` ask for), filled with clones of the live entries (tombstones left behind),
//! made the root in one pointer store, the old table retired once the writer lock is let go
//! (see "Why lookups are correct" and "Entries and their drops" in the [module docs](super)).

use super::table::{groups_for, Table};
use super::write_lock::{WriteLock, Writer};
use super::RcuFlatMap;
use crate::domain_ref::AnyDomainRef;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::Ordering::{Relaxed, Release};

impl<K, V, S, D> RcuFlatMap<K, V, S, D>
where
    K: Clone + Hash + Eq + Send + 'static,
    V: Clone + Send + 'static,
    S: BuildHasher,
    D: AnyDomainRef,
{
    /// After a removal left `len` entries: rebuild smaller if the table is one-eighth full
    /// (one comparison with a bound kept beside the lock; the rebuild is out of line).
    #[inline(always)]
    pub(super) fn shrink_if_sparse(&self, lock: &mut WriteLock<'_, K, V, S, D>, len: usize) {
        if len < lock.sparse_below {
            self.shrink(lock, len);
        }
    }

    /// Rebuild the table smaller: the least size with room for twice its `len` entries.
    #[cold]
    #[inline(never)]
    fn shrink(&self, lock: &mut WriteLock<'_, K, V, S, D>, len: usize) {
        let groups = self.table_mine(lock).groups();
        let target = groups_for(len.saturating_mul(2)).max(lock.min_groups);
        if target < groups {
            self.rebuild(lock, target);
        }
    }

    /// Copy the live entries into a new table of `groups` groups and make it the root (the
    /// old one is retired when the lock is let go).
    pub(super) fn rebuild(&self, lock: &mut WriteLock<'_, K, V, S, D>, groups: usize) {
        let new = Box::new(Table::to_fill(groups, self.len.load(Relaxed)));
        // The user's `Hash` or `Clone` may panic here: `new` is then dropped, unseen, with
        // the clones it holds.
        let len = self
            .table_mine(lock)
            .copy_live_into(&new, |k| self.hasher.hash_one(k));
        self.replace_root(lock, new, len);
    }

    /// Make `new` (holding `len` entries) the root; the old root is retired when the lock is
    /// let go.
    pub(super) fn replace_root(
        &self,
        lock: &mut WriteLock<'_, K, V, S, D>,
        new: Box<Table<K, V>>,
        len: usize,
    ) {
        **lock = Writer::for_table(new.groups(), lock.min_groups, len);
        self.len.store(len, Relaxed);
        if new.groups() > self.table_mine(lock).groups() {
            self.table_mine(lock).give_back_when_freed();
        }
        let old = self.root.swap(Box::into_raw(new), Release);
        lock.unlinked.push(old);
    }
}
