//! Atomic read-modify-write of one key of an [`RcuFlatMap`]: [`compute`](RcuFlatMap::compute).
//!
//! The closure runs once, under the map's writer lock, with the key's entry as the lock holder
//! finds it; its decision is applied before the lock is let go. Every write of the map takes
//! that lock, so the closure's view and its effect are one step with respect to every other
//! write. What `compute` returns borrows the table's slots for the caller's guard: an entry
//! replaced or removed stays in its slot until its table is freed, after a grace period that
//! the guard holds back (see "Entries and their drops" in the [module docs](super)), and so
//! does the entry written.

use super::write_lock::WriteLock;
use super::RcuFlatMap;
use crate::compute::{Compute, Operation};
use crate::domain_ref::AnyDomainRef;
use crate::section::ReadSection;
use std::hash::{BuildHasher, Hash};

impl<K, V, S, D> RcuFlatMap<K, V, S, D>
where
    K: Clone + Hash + Eq + Send + 'static,
    V: Clone + Send + 'static,
    S: BuildHasher,
    D: AnyDomainRef,
{
    /// Read-modify-write `key` in one atomic step: `f` sees the key's entry (`None` if absent)
    /// and returns an [`Operation`]: insert a value (replacing the present entry, under the
    /// key given here), remove the entry, or abort with a result. Returns what happened
    /// ([`Compute`]), the entries borrowed for `guard`, with no clone.
    ///
    /// `f` runs once, under the map's writer lock (it must not write to this map, which
    /// panics; reading it is fine), and its decision is applied before any other write can
    /// run: so a counter kept with `compute` loses no increment. If `f` panics, the map is as
    /// it was.
    ///
    /// ```
    /// use rcukit::flat_map::{Compute, Operation};
    /// use rcukit::RcuFlatMap;
    ///
    /// // Open connections per source address; a source with none has no entry.
    /// let open: RcuFlatMap<u32, u16> = RcuFlatMap::new();
    /// let guard = open.domain().read();
    /// let connect = |src: u32| {
    ///     open.compute(src, |n| match n {
    ///         Some((_, &n)) if n >= 2 => Operation::Abort("refused: two already"),
    ///         Some((_, &n)) => Operation::Insert(n + 1),
    ///         None => Operation::Insert(1),
    ///     }, &guard)
    /// };
    /// let close = |src: u32| {
    ///     open.compute(src, |n| match n {
    ///         Some((_, &1)) => Operation::Remove,
    ///         Some((_, &n)) => Operation::Insert(n - 1),
    ///         None => Operation::Abort("not open"),
    ///     }, &guard)
    /// };
    /// assert_eq!(connect(10), Compute::Inserted(&10, &1));
    /// assert_eq!(connect(10), Compute::Updated { old: (&10, &1), new: (&10, &2) });
    /// assert_eq!(connect(10), Compute::Aborted("refused: two already"));
    /// close(10);
    /// assert_eq!(close(10), Compute::Removed(&10, &1));
    /// assert_eq!(close(10), Compute::Aborted("not open"));
    /// assert!(open.is_empty());
    /// ```
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another domain than the map's, or is an offline `QsbrThread`.
    #[track_caller]
    pub fn compute<'g, G, F, T>(&'g self, key: K, f: F, guard: &'g G) -> Compute<'g, K, V, T>
    where
        G: ReadSection,
        F: FnOnce(Option<(&K, &V)>) -> Operation<V, T>,
    {
        self.check_section(guard);
        let (key, f) = self.refuse_reentry((key, f));
        let hash = self.hasher.hash_one(&key);
        // Declared before the lock, so dropped after it if a rebuild's `Clone` panics (see
        // `Held`).
        let mut entry;
        let mut lock = self.lock_checked();
        let found = self.table_mine(&lock).probe_for_write(hash, |k| k == &key);
        // SAFETY: the key's slot is full; `guard`, checked above, is held for 'g.
        let current = found
            .at
            .map(|at| unsafe { self.entry_for_guard(&lock, at) });
        match f(current.map(|(k, v)| (k, v))) {
            Operation::Abort(t) => Compute::Aborted(t),
            Operation::Remove => match (found.at, current) {
                (Some(at), Some((k, v))) => {
                    self.remove_at(&mut lock, at);
                    Compute::Removed(k, v)
                }
                _ => Compute::Absent,
            },
            Operation::Insert(value) => {
                entry = Some((key, value));
                let slot = self.put(&mut lock, found, hash, &mut entry);
                // SAFETY: `put` filled the slot; `guard`, checked above, is held for 'g.
                let (k, v) = unsafe { self.entry_for_guard(&lock, slot) };
                match current {
                    None => Compute::Inserted(k, v),
                    Some((old_k, old_v)) => Compute::Updated {
                        old: (old_k, old_v),
                        new: (k, v),
                    },
                }
            }
        }
    }

    /// The entry in slot `at` of the current table, borrowed for 'g. It stays in its slot until
    /// the table is freed, after a grace period that begins once the table stopped being the
    /// root (a later rebuild under this lock only retires it): a read section held for 'g
    /// holds that grace period back.
    ///
    /// # Safety
    ///
    /// Slot `at` is full, and the caller holds a read section of the map's domain for 'g.
    unsafe fn entry_for_guard<'g>(
        &'g self,
        lock: &WriteLock<'_, K, V, S, D>,
        at: usize,
    ) -> &'g (K, V) {
        // SAFETY: forwarded: the slot is full, its table alive under the lock now and, by the
        // caller's read section, for 'g.
        unsafe { &*(self.table_mine(lock).entry(at) as *const (K, V)) }
    }
}
