//! Rebuilding a map's table: a new table of the size the map needs (larger when a write finds
//! no room, smaller when removals leave it one-eighth full, in which case the removal's own
//! entry is left out too, any size `reserve` and `shrink_to_fit` ask for), filled with clones
//! of the live entries (tombstones left behind),
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
    /// After removals that leave `len` entries: if the table is one-eighth full, rebuild it
    /// smaller, leaving out slot `except` (the entry a removal takes out, not buried yet: the
    /// new root is then that removal), and return true. The rebuild runs the user's `Hash` and
    /// `Clone` before anything changes, so a panic there leaves the map as it was, that entry
    /// in it. One comparison with a bound kept beside the lock; the rebuild is out of line.
    #[inline(always)]
    pub(super) fn shrink_if_sparse(
        &self,
        lock: &mut WriteLock<'_, K, V, S, D>,
        len: usize,
        except: Option<usize>,
    ) -> bool {
        len < lock.sparse_below && self.shrink(lock, len, except)
    }

    /// Rebuild the table smaller, without slot `except`: the least size with room for twice
    /// its `len` entries, if that is smaller.
    #[cold]
    #[inline(never)]
    fn shrink(
        &self,
        lock: &mut WriteLock<'_, K, V, S, D>,
        len: usize,
        except: Option<usize>,
    ) -> bool {
        let floor = lock.min_groups;
        let target = groups_for(len.saturating_mul(2)).max(floor);
        if target >= self.table_mine(lock).groups() {
            return false;
        }
        self.rebuild_without(lock, target, floor, except);
        true
    }

    /// Copy the live entries into a new table of `groups` groups and make it the root of a map
    /// that will not shrink below `floor` groups (the old root is retired when the lock is let
    /// go). The floor changes only with the root: a rebuild that panics changes neither.
    pub(super) fn rebuild(
        &self,
        lock: &mut WriteLock<'_, K, V, S, D>,
        groups: usize,
        floor: usize,
    ) {
        self.rebuild_without(lock, groups, floor, None);
    }

    /// [`rebuild`](Self::rebuild), leaving out the entry in slot `except` of the current table.
    fn rebuild_without(
        &self,
        lock: &mut WriteLock<'_, K, V, S, D>,
        groups: usize,
        floor: usize,
        except: Option<usize>,
    ) {
        // A table too large for the address space panics here ("capacity overflow").
        let new = Box::new(Table::to_fill(groups, self.written.len.load(Relaxed)));
        // The user's `Hash` or `Clone` may panic here: `new` is then dropped, unseen, with
        // the clones it holds.
        let len = self
            .table_mine(lock)
            .copy_live_into(&new, |k| self.hasher.hash_one(k), except);
        self.replace_root(lock, new, floor, len);
    }

    /// Make `new` (holding `len` entries) the root of a map that will not shrink below `floor`
    /// groups; the old root is retired when the lock is let go.
    pub(super) fn replace_root(
        &self,
        lock: &mut WriteLock<'_, K, V, S, D>,
        new: Box<Table<K, V>>,
        floor: usize,
        len: usize,
    ) {
        **lock = Writer::for_table(new.groups(), floor, len);
        self.written.len.store(len, Relaxed);
        if new.groups() > self.table_mine(lock).groups() {
            self.table_mine(lock).give_back_when_freed();
        }
        let old = self.root.swap(Box::into_raw(new), Release);
        lock.unlinked.push(old);
    }
}
