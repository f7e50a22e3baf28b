//! Atomic read-modify-write of one key of an [`RcuHashMap`]: [`compute`](RcuHashMap::compute)
//! and what is built on it.
//!
//! The closure sees the key's entry as an unlocked walk found it (or `None`) and says what to
//! do ([`Operation`]). The decision is applied under the bucket's lock only if the bucket did
//! not change since the walk (claim 4 of the [module docs](super)); otherwise the walk and the
//! closure run again with the newest entry. A decision that changes nothing (abort, or remove
//! of an absent key) holds if the bucket was still unchanged after the closure returned. So
//! the closure's view and its effect are one atomic step with respect to every other write of
//! the key, and the closure may run more than once (as `AtomicU64::fetch_update`'s does).

use super::node::Node;
use super::own_writes::Undone;
use super::table;
use super::write::{link, watched_locate, OwnedNode, Sink};
use super::RcuHashMap;
use crate::compute::{Compute, Operation};
use crate::domain_ref::DomainRef;
use crate::report::DropLater;
use crate::ReadSection;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::Ordering::Relaxed;

fn entry<K, V>(node: &Node<K, V>) -> (&K, &V) {
    (&node.key, &node.value)
}

impl<K, V, S, D> RcuHashMap<K, V, S, D>
where
    K: Hash + Eq + Send + 'static,
    V: Send + 'static,
    S: BuildHasher,
    D: DomainRef,
{
    /// [`compute`](Self::compute) whose closure also gets back the value its previous
    /// `Insert` carried when that attempt had to be retried (so that a value made once can be
    /// offered again). `what` names the method for a panic message (see `own_writes`).
    #[track_caller]
    pub(crate) fn compute_in<'g, G, F, T>(
        &'g self,
        key: K,
        mut f: F,
        guard: &'g G,
        sink: &impl Sink<K, V>,
        what: &'static str,
    ) -> Compute<'g, K, V, T>
    where
        G: ReadSection,
        F: FnMut(Option<(&K, &V)>, Option<V>) -> Operation<V, T>,
    {
        // `key` is ours between attempts, and `rejected` the value of the last one's `Insert`.
        let (hash, mut key, mut rejected) = (self.hasher.hash_one(&key), Some(key), None);
        // Results of aborts that had to be retried: dropped when the call returns, not while
        // it retries (as for rejected values: see `compute_dropping_late`).
        let mut stale = DropLater::new();
        let mut undone = Undone::new();
        loop {
            // Before each attempt: `Eq` or `f` may have forked (`after_fork`).
            self.repair_if_forked();
            let table = self.table(guard);
            // SAFETY: protected by the guard.
            let (spot, watch) =
                unsafe { watched_locate(table, hash, &mut |x| key.as_ref() == Some(x), &undone) };
            // SAFETY: a published node found under the guard, alive for 'g.
            let current = unsafe { spot.found.as_ref() };
            match watch.run(|| f(current.map(entry), rejected.take())) {
                Operation::Abort(t) if spot.unchanged() => return Compute::Aborted(t),
                Operation::Remove if current.is_none() && spot.unchanged() => {
                    return Compute::Absent
                }
                Operation::Abort(t) => stale.push(t),
                Operation::Remove if current.is_none() => {}
                Operation::Remove => {
                    if let Some(locked) = spot.lock() {
                        // SAFETY: validated lock, and the spot found a node.
                        let old = unsafe { locked.unlink() };
                        drop(locked);
                        return self.finish_remove(old, guard, sink);
                    }
                }
                Operation::Insert(value) => {
                    let node = OwnedNode(Node::new(hash, key.take().expect("ours"), value));
                    let Some(locked) = spot.lock() else {
                        let (k, v) = node.into_parts();
                        (key, rejected) = (Some(k), Some(v));
                        undone.failed(&watch, what);
                        continue;
                    };
                    let new = node.publish();
                    // SAFETY: validated lock; `new` is unpublished with this hash; the spot
                    // found the old node if `current` is some.
                    let (old, len) = unsafe { link(locked, new, current.is_some(), &self.len) };
                    return self.finish_insert(table, new, old, len, guard, sink);
                }
            }
            undone.failed(&watch, what); // the bucket changed since the walk: stale
        }
    }

    /// The bookkeeping after `compute` unlinked `old`.
    fn finish_remove<'g, G: ReadSection, T>(
        &'g self,
        old: *mut Node<K, V>,
        guard: &'g G,
        sink: &impl Sink<K, V>,
    ) -> Compute<'g, K, V, T> {
        let len = self.len.fetch_sub(1, Relaxed).wrapping_sub(1);
        self.maybe_start_resize(self.table(guard), len);
        sink.take(Some(old), self.help_resize(guard));
        // SAFETY: unlinked, retired no earlier than just now: alive for 'g.
        let (k, v) = entry(unsafe { &*old });
        Compute::Removed(k, v)
    }

    /// The bookkeeping after `compute` linked `new` (in place of `old`, if any; `len`: the
    /// count it left, if it added an entry).
    fn finish_insert<'g, G: ReadSection, T>(
        &'g self,
        table: &table::Table<K, V>,
        new: *mut Node<K, V>,
        old: Option<*mut Node<K, V>>,
        len: Option<usize>,
        guard: &'g G,
        sink: &impl Sink<K, V>,
    ) -> Compute<'g, K, V, T> {
        if let Some(len) = len {
            self.maybe_start_resize(table, len);
        }
        sink.take(old, self.help_resize(guard));
        // SAFETY: linked under the guard, so alive for 'g (retired later, if ever, after it).
        let new = entry(unsafe { &*new });
        match old {
            None => Compute::Inserted(new.0, new.1),
            Some(old) => Compute::Updated {
                // SAFETY: unlinked, retired no earlier than just now: alive for 'g.
                old: entry(unsafe { &*old }),
                new,
            },
        }
    }

    /// The entry of `key` after `update(&value)` replaced a present value, or after
    /// `insert()` was inserted for an absent key, in one atomic step. `update` may run more
    /// than once; `insert` runs at most once (a value it made for an attempt that had to be
    /// retried is offered again).
    #[track_caller]
    pub(crate) fn update_or_insert_in<'g, G, U, I>(
        &'g self,
        key: K,
        mut update: U,
        insert: I,
        guard: &'g G,
        sink: &impl Sink<K, V>,
    ) -> &'g V
    where
        G: ReadSection,
        U: FnMut(&V) -> V,
        I: FnOnce() -> V,
    {
        let mut insert = Some(insert);
        // The value `insert` made, while it is not in the map: offered again after a retry.
        let mut spare = None;
        let mut offered_spare = false;
        // Updated values of retried attempts, dropped when the call returns.
        let mut discarded = DropLater::new();
        let op = |current: Option<(&K, &V)>, rejected: Option<V>| {
            if offered_spare {
                spare = rejected; // the attempt that carried it was retried
            } else {
                discarded.extend(rejected);
            }
            offered_spare = current.is_none();
            match current {
                Some((_, v)) => Operation::<V, ()>::Insert(update(v)),
                None => Operation::Insert(
                    spare
                        .take()
                        .unwrap_or_else(|| (insert.take().expect("runs once"))()),
                ),
            }
        };
        let done = self.compute_in(key, op, guard, sink, "update_or_insert");
        // With them, the value `insert` made if the entry was then updated instead.
        discarded.extend(spare);
        drop(discarded);
        match done {
            Compute::Inserted(_, v) | Compute::Updated { new: (_, v), .. } => v,
            Compute::Removed(..) | Compute::Absent | Compute::Aborted(()) => {
                unreachable!("the closure always inserts")
            }
        }
    }
}

/// Read-modify-write under the caller's guard. Each panics if `guard` belongs to another
/// domain than the map's, and if its closure or the key's `Eq` changes the key's own bucket
/// (it writes the map) on 64 attempts in a row, which would keep it retrying for ever (see
/// "Where user code runs" in the [map's docs](RcuHashMap)).
impl<K, V, S, D> RcuHashMap<K, V, S, D>
where
    K: Hash + Eq + Send + 'static,
    V: Send + 'static,
    S: BuildHasher,
    D: DomainRef,
{
    /// Read-modify-write `key` in one atomic step: `f` sees the key's entry (`None` if
    /// absent) and returns an [`Operation`]: insert a value (replacing the present one),
    /// remove the entry, or abort with a result. Returns what happened ([`Compute`]), the
    /// entries valid for `guard`.
    ///
    /// `f` runs with no lock held, inside the caller's critical section, and may run more
    /// than once: when another write changed the key's bucket between the walk that found
    /// the entry and the moment `f`'s decision is applied, `f` runs again with the newest
    /// entry (the values of discarded attempts are dropped). So the entry `f` last saw is the
    /// one its decision replaces or keeps, and a counter kept with `compute` loses no
    /// increment.
    ///
    /// ```
    /// use rcukit::map::{Compute, Operation};
    /// use rcukit::RcuHashMap;
    ///
    /// let hits: RcuHashMap<&str, u64> = RcuHashMap::new();
    /// let guard = hits.domain().read();
    /// // Count a hit, inserting the counter on the first one.
    /// for _ in 0..3 {
    ///     hits.compute("/index.html", |entry| match entry {
    ///         Some((_, n)) => Operation::<u64, ()>::Insert(n + 1),
    ///         None => Operation::Insert(1),
    ///     }, &guard);
    /// }
    /// assert_eq!(hits.get("/index.html", &guard), Some(&3));
    /// // Remove it only if it was hit fewer than 10 times.
    /// let done = hits.compute("/index.html", |entry| match entry {
    ///     Some((_, &n)) if n < 10 => Operation::Remove,
    ///     _ => Operation::Abort("kept"),
    /// }, &guard);
    /// assert!(matches!(done, Compute::Removed(_, 3)));
    /// ```
    #[track_caller]
    pub fn compute<'g, G, F, T>(&'g self, key: K, f: F, guard: &'g G) -> Compute<'g, K, V, T>
    where
        G: ReadSection,
        F: FnMut(Option<(&K, &V)>) -> Operation<V, T>,
    {
        self.compute_dropping_late(key, f, guard, self)
    }

    /// [`compute_in`](Self::compute_in) for a closure that does not reuse rejected values:
    /// they are dropped after the call returns, not while it retries (a value whose `Drop`
    /// writes to the key's bucket would otherwise make every attempt stale).
    #[track_caller]
    pub(crate) fn compute_dropping_late<'g, G, F, T>(
        &'g self,
        key: K,
        mut f: F,
        guard: &'g G,
        sink: &impl Sink<K, V>,
    ) -> Compute<'g, K, V, T>
    where
        G: ReadSection,
        F: FnMut(Option<(&K, &V)>) -> Operation<V, T>,
    {
        let mut rejected = DropLater::new();
        let done = self.compute_in(
            key,
            |entry, r| {
                rejected.extend(r);
                f(entry)
            },
            guard,
            sink,
            "compute",
        );
        drop(rejected);
        done
    }

    /// Replace the value of `key` by `update(&value)` if it is present, or insert `insert()`
    /// if it is absent, in one atomic step; returns the value now in the map. `update` may run
    /// more than once (as in [`compute`](Self::compute)); `insert` runs at most once (its
    /// value is offered again if the attempt that carried it had to be retried).
    #[track_caller]
    pub fn update_or_insert_with<'g, G, U, I>(
        &'g self,
        key: K,
        update: U,
        insert: I,
        guard: &'g G,
    ) -> &'g V
    where
        G: ReadSection,
        U: FnMut(&V) -> V,
        I: FnOnce() -> V,
    {
        self.update_or_insert_in(key, update, insert, guard, self)
    }

    /// [`update_or_insert_with`](Self::update_or_insert_with) with a value made in advance.
    #[track_caller]
    pub fn update_or_insert<'g, G, U>(&'g self, key: K, update: U, value: V, guard: &'g G) -> &'g V
    where
        G: ReadSection,
        U: FnMut(&V) -> V,
    {
        self.update_or_insert_with(key, update, || value, guard)
    }
}
