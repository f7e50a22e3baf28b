//! The keyed writers of [`RcuHashMap`]: insert, insert-if-absent, get-or-insert, remove,
//! remove-if and update, each locking one bucket (claims 1 to 5 of the [module docs](super)).
//!
//! Every writer runs inside a read-side critical section the caller holds (a guard of the
//! map's domain), so that what it returns (the entry it replaced or removed, the entry it
//! found) stays valid for that guard. What a writer unlinks goes to a [`Sink`]: the map
//! itself retires it at once (it is freed after the caller's guard, and every other reader,
//! has left), and a [`MapRef`](super::MapRef) keeps it until it drops its own guard.
//!
//! # Atomicity
//!
//! Each writer changes one bucket under its lock, after checking that the bucket did not
//! change since its unlocked walk (claim 4); otherwise it walks again. A conclusion drawn
//! without the lock ("absent", "present with this value, so nothing to do") holds only if the
//! bucket's state did not move between the walk and that check, which is the moment the
//! writer linearizes at. So each operation is atomic with respect to every other write of the
//! same key; closures that decide (`remove_if`'s condition, `update`'s function) may run more
//! than once, each time with the newest entry.

use super::line;
use super::node::{Node, Retired};
use super::own_writes::{Undone, Watch};
use super::table::{self, Table};
use super::RcuHashMap;
use crate::domain_ref::DomainRef;
use crate::report::DropLater;
use crate::ReadSection;
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

/// Where a write puts what it unlinked: a node, and a table whose resize it finished.
pub(crate) trait Sink<K, V> {
    fn take(&self, node: Option<*mut Node<K, V>>, table: Option<*mut Table<K, V>>);
}

impl<K, V, S, D> Sink<K, V> for RcuHashMap<K, V, S, D>
where
    K: Send + 'static,
    V: Send + 'static,
    D: DomainRef,
{
    fn take(&self, node: Option<*mut Node<K, V>>, table: Option<*mut Table<K, V>>) {
        self.retire(node, table);
    }
}

/// What [`RcuHashMap::put`] did.
pub(crate) enum Put<'g, K, V> {
    /// The key was absent; this node now holds it.
    Inserted(&'g Node<K, V>),
    /// The key was present; `old` (unlinked, handed to the sink) was replaced.
    Replaced { old: &'g Node<K, V> },
    /// The key was present and `put` was asked not to replace: the current entry, and the
    /// value that was not inserted (the key is dropped).
    Occupied { current: &'g Node<K, V>, value: V },
}

impl<K, V, S, D> RcuHashMap<K, V, S, D>
where
    K: Hash + Eq + Send + 'static,
    V: Send + 'static,
    S: BuildHasher,
    D: DomainRef,
{
    /// Insert `key` (whose hash is `hash`) with `value`, replacing a present entry if
    /// `replace`, under the caller's `guard`; what is unlinked goes to `sink`. `what` names the
    /// method for the panic of a key whose `Eq` undoes every attempt (see `own_writes`).
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn put<'g, G: ReadSection>(
        &'g self,
        hash: u64,
        key: K,
        value: V,
        replace: bool,
        guard: &'g G,
        sink: &impl Sink<K, V>,
        what: &'static str,
    ) -> Put<'g, K, V> {
        let first = self.table(guard);
        // The bucket's line is usually a cache miss: ask for it before allocating the node, so
        // that the allocation runs while it comes (a hint: in a child before the repair below,
        // a line of a table the repair replaces).
        line::prefetch(first.bucket(first.index(hash)));
        let node = OwnedNode(Node::new(hash, key, value));
        let mut undone = Undone::new();
        let (table, new, (old, len)) = loop {
            // Before each attempt: `Eq` may have forked in the last one (`after_fork`).
            self.repair_if_forked();
            let table = self.table(guard);
            // SAFETY: the node is ours until linked.
            let key = unsafe { &(*node.0).key };
            // SAFETY: nodes and tables are protected by the guard.
            let (spot, watch) = unsafe { watched_locate(table, hash, &mut |k| k == key, &undone) };
            if !replace && !spot.found.is_null() {
                if !spot.unchanged() {
                    // The found node may have left the map meanwhile.
                    undone.failed(&watch, what);
                    continue;
                }
                let (_, value) = node.into_parts();
                sink.take(None, self.help_resize(guard));
                // SAFETY: found in the bucket as it still is: a published node, alive for 'g.
                let current = unsafe { &*spot.found };
                return Put::Occupied { current, value };
            }
            let Some(locked) = spot.lock() else {
                undone.failed(&watch, what);
                continue;
            };
            let new = node.publish();
            // SAFETY: validated lock; `new` is unpublished, with this hash; `found`: the old node.
            let linked = unsafe { link(locked, new, !spot.found.is_null(), &self.len) };
            break (table, new, linked);
        };
        if let Some(len) = len {
            self.maybe_start_resize(table, len);
        }
        sink.take(old, self.help_resize(guard));
        match old {
            // SAFETY: `new` is linked (and retired, if ever, after the guard): alive for 'g.
            None => Put::Inserted(unsafe { &*new }),
            // SAFETY: unlinked, retired no earlier than just now: alive for 'g.
            Some(old) => Put::Replaced {
                old: unsafe { &*old },
            },
        }
    }

    /// Remove `key`'s entry if `condition` holds for it; returns the removed entry. The
    /// condition may run more than once (each time with the newest entry).
    ///
    /// The walk (the key's `Eq`) is watched (see `own_writes`), and so is the condition when
    /// it is user code (`user_condition`; not the trivial one of a plain removal); `what`
    /// names the method for the panic of user code that undoes every attempt.
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn remove_where<'g, Q, G, F>(
        &'g self,
        key: &Q,
        mut condition: F,
        user_condition: bool,
        guard: &'g G,
        sink: &impl Sink<K, V>,
        what: &'static str,
    ) -> Option<&'g Node<K, V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        G: ReadSection,
        F: FnMut(&K, &V) -> bool,
    {
        let hash = self.hasher.hash_one(key);
        let mut undone = Undone::new();
        let removed = loop {
            // Before each attempt: `Eq` or the condition may have forked (`after_fork`).
            self.repair_if_forked();
            let table = self.table(guard);
            // SAFETY: protected by the guard.
            let (spot, watch) =
                unsafe { watched_locate(table, hash, &mut |k| k.borrow() == key, &undone) };
            if spot.found.is_null() {
                if spot.unchanged() {
                    return None; // claim 4: absent
                }
                undone.failed(&watch, what);
                continue;
            }
            // SAFETY: a published node, alive for 'g.
            let found = unsafe { &*spot.found };
            let qualifies = if user_condition {
                watch.run(|| condition(&found.key, &found.value))
            } else {
                condition(&found.key, &found.value)
            };
            if !qualifies {
                if spot.unchanged() {
                    return None; // the entry as it still is does not qualify
                }
                undone.failed(&watch, what);
                continue;
            }
            let Some(locked) = spot.lock() else {
                undone.failed(&watch, what);
                continue;
            };
            // SAFETY: validated lock, and the spot found a node.
            break unsafe { locked.unlink() };
        };
        let len = self.len.fetch_sub(1, Relaxed).wrapping_sub(1);
        self.maybe_start_resize(self.table(guard), len);
        sink.take(Some(removed), self.help_resize(guard));
        // SAFETY: unlinked but retired no earlier than now: alive for 'g.
        Some(unsafe { &*removed })
    }

    /// Replace `key`'s value by `f(&value)`; returns the new entry, `None` (without calling
    /// `f`) if the key is absent. `f` may run more than once.
    #[track_caller]
    pub(crate) fn update_where<'g, Q, G, F>(
        &'g self,
        key: &Q,
        mut f: F,
        guard: &'g G,
        sink: &impl Sink<K, V>,
    ) -> Option<&'g Node<K, V>>
    where
        K: Borrow<Q> + Clone,
        Q: Hash + Eq + ?Sized,
        G: ReadSection,
        F: FnMut(&V) -> V,
    {
        let hash = self.hasher.hash_one(key);
        // Values of attempts that had to be retried: dropped when the call returns, not while
        // it retries (a value whose `Drop` writes to the key's bucket would otherwise make
        // every attempt stale).
        let mut discarded = DropLater::new();
        let mut undone = Undone::new();
        let (old, new) = loop {
            // Before each attempt: `Eq`, `Clone` or `f` may have forked (`after_fork`).
            self.repair_if_forked();
            let table = self.table(guard);
            // SAFETY: protected by the guard.
            let (spot, watch) =
                unsafe { watched_locate(table, hash, &mut |k| k.borrow() == key, &undone) };
            if spot.found.is_null() {
                if spot.unchanged() {
                    return None;
                }
                undone.failed(&watch, "update");
                continue;
            }
            // SAFETY: the found node is protected by the guard.
            let old = unsafe { &*spot.found };
            let node = watch.run(|| OwnedNode(Node::new(hash, old.key.clone(), f(&old.value))));
            let Some(locked) = spot.lock() else {
                discarded.push(node);
                undone.failed(&watch, "update");
                continue;
            };
            let new = node.publish();
            // SAFETY: validated lock; the spot found the old node; ours is unpublished.
            break (unsafe { locked.replace(new) }, new);
        };
        sink.take(Some(old), self.help_resize(guard));
        drop(discarded);
        // SAFETY: linked (or replaced later, then retired after the guard): alive for 'g.
        Some(unsafe { &*new })
    }

    /// The entry of `key`, inserting `make()` first if the key is absent: `make` runs at most
    /// once, and not at all if the key is present.
    #[track_caller]
    pub(crate) fn get_or_put<'g, G, F>(
        &'g self,
        key: K,
        make: F,
        guard: &'g G,
        sink: &impl Sink<K, V>,
    ) -> &'g Node<K, V>
    where
        G: ReadSection,
        F: FnOnce() -> V,
    {
        let hash = self.hasher.hash_one(&key);
        // SAFETY: protected by the guard.
        if let Some(node) = unsafe { table::find(self.table(guard), hash, |k| *k == key) } {
            return node;
        }
        match self.put(hash, key, make(), false, guard, sink, "get_or_insert") {
            Put::Inserted(node) => node,
            // Inserted by another thread meanwhile: theirs stands, ours is dropped.
            Put::Occupied { current, .. } => current,
            Put::Replaced { .. } => unreachable!("put without replace never replaces"),
        }
    }
}

/// [`table::locate`] for an attempt of a write whose earlier attempts `undone` counts: once
/// one has failed, with the key's bucket watched while the walk runs the key's `Eq` (see
/// `own_writes`; the first attempt, which nearly always succeeds, pays nothing for it). Then
/// the watch follows the bucket the walk ended in. Returns the spot, and the watch for the
/// rest of the attempt.
///
/// # Safety
///
/// As for [`table::locate`].
#[inline]
pub(crate) unsafe fn watched_locate<K, V>(
    table: &Table<K, V>,
    hash: u64,
    matches: &mut impl FnMut(&K) -> bool,
    undone: &Undone,
) -> (table::Spot<K, V>, Watch) {
    let watch = Watch::new(std::ptr::from_ref(table.bucket(table.index(hash))).cast());
    let on_chain = undone.retrying().then(|| watch.push());
    // SAFETY: forwarded to the caller.
    let spot = unsafe { table::locate(table, hash, matches) };
    drop(on_chain);
    watch.follow(spot.bucket_id());
    (spot, watch)
}

/// A node that is ours until published; freed if we unwind first.
pub(crate) struct OwnedNode<K, V>(pub(crate) *mut Node<K, V>);

impl<K, V> OwnedNode<K, V> {
    pub(crate) fn publish(self) -> *mut Node<K, V> {
        let node = self.0;
        std::mem::forget(self);
        node
    }

    /// Take the unpublished node apart again.
    pub(crate) fn into_parts(self) -> (K, V) {
        let node = self.publish();
        // SAFETY: never published, so ours alone.
        unsafe { Node::into_parts(node) }
    }
}

impl<K, V> Drop for OwnedNode<K, V> {
    fn drop(&mut self) {
        // SAFETY: never published (publish forgets the guard), so ours alone; freed in the
        // retired form, which drops the key and the value apart (`node` module docs), as a
        // discarded attempt's clone of the key and the closure's value are user values.
        drop(unsafe { Box::from_raw(Retired::of(self.0)) });
    }
}

/// A key that was already present: what [`RcuHashMap::try_insert`] hands back.
#[derive(Debug, PartialEq, Eq)]
pub struct OccupiedError<'g, V> {
    /// The value in the map (valid for the guard).
    pub current: &'g V,
    /// The value that was not inserted.
    pub not_inserted: V,
}

impl<V: std::fmt::Debug> std::fmt::Display for OccupiedError<'_, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the key is already present (with {:?}); {:?} was not inserted",
            self.current, self.not_inserted
        )
    }
}

impl<V: std::fmt::Debug> std::error::Error for OccupiedError<'_, V> {}

/// The keyed writers, under the caller's guard. Each panics if `guard` belongs to another
/// domain than the map's, and if the key's `Eq` (or the closure of `update` and `remove_if`)
/// changes the key's own bucket (it writes the map) on 64 attempts in a row, which would keep
/// it retrying for ever (see "Where user code runs" in the [map's docs](RcuHashMap)).
impl<K, V, S, D> RcuHashMap<K, V, S, D>
where
    K: Hash + Eq + Send + 'static,
    V: Send + 'static,
    S: BuildHasher,
    D: DomainRef,
{
    /// Insert `value` for `key`; returns the value it replaced, valid for `guard` (as papaya
    /// does). The entry is replaced whole (readers see the old pair or the new one, never a
    /// mix): the new key is kept, and the old key and value are retired. Atomic with respect
    /// to every other write of the key.
    #[track_caller]
    pub fn insert<'g, G: ReadSection>(&'g self, key: K, value: V, guard: &'g G) -> Option<&'g V> {
        let hash = self.hasher.hash_one(&key);
        match self.put(hash, key, value, true, guard, self, "insert") {
            Put::Replaced { old, .. } => Some(&old.value),
            Put::Inserted(_) | Put::Occupied { .. } => None,
        }
    }

    /// Insert `value` for `key` only if the key is absent (one atomic step); returns the
    /// inserted value, or, if the key was present, the present value and the one not
    /// inserted (the key passed in is dropped).
    #[track_caller]
    pub fn try_insert<'g, G: ReadSection>(
        &'g self,
        key: K,
        value: V,
        guard: &'g G,
    ) -> Result<&'g V, OccupiedError<'g, V>> {
        let hash = self.hasher.hash_one(&key);
        match self.put(hash, key, value, false, guard, self, "try_insert") {
            Put::Inserted(node) => Ok(&node.value),
            Put::Occupied { current, value, .. } => Err(OccupiedError {
                current: &current.value,
                not_inserted: value,
            }),
            Put::Replaced { .. } => unreachable!("put without replace never replaces"),
        }
    }

    /// The value of `key`, inserting `make()` first if the key is absent. `make` runs at most
    /// once, and not at all when the key is present; if another thread inserts the key
    /// between the lookup and the insert, its value is returned and `make`'s is dropped. So
    /// concurrent callers all get the one value that made it into the map (a cache computes
    /// each entry at most once per caller, and all callers agree on the result).
    #[track_caller]
    pub fn get_or_insert_with<'g, G, F>(&'g self, key: K, make: F, guard: &'g G) -> &'g V
    where
        G: ReadSection,
        F: FnOnce() -> V,
    {
        &self.get_or_put(key, make, guard, self).value
    }

    /// [`get_or_insert_with`](Self::get_or_insert_with) with a value made in advance.
    #[track_caller]
    pub fn get_or_insert<'g, G: ReadSection>(&'g self, key: K, value: V, guard: &'g G) -> &'g V {
        self.get_or_insert_with(key, || value, guard)
    }

    /// Remove `key`; returns its value, valid for `guard` (the entry is retired).
    #[track_caller]
    pub fn remove<'g, Q, G>(&'g self, key: &Q, guard: &'g G) -> Option<&'g V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        G: ReadSection,
    {
        self.remove_where(key, |_, _| true, false, guard, self, "remove")
            .map(|n| &n.value)
    }

    /// Remove `key` and return its entry, valid for `guard`.
    #[track_caller]
    pub fn remove_entry<'g, Q, G>(&'g self, key: &Q, guard: &'g G) -> Option<(&'g K, &'g V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        G: ReadSection,
    {
        self.remove_where(key, |_, _| true, false, guard, self, "remove_entry")
            .map(|n| (&n.key, &n.value))
    }

    /// Remove `key`'s entry if `condition` holds for it, in one atomic step: the entry
    /// removed is the one the condition approved. Returns the removed entry; `None` if the
    /// key is absent or the condition refused. The condition runs with no lock held and may
    /// run more than once (each time with the newest entry).
    #[track_caller]
    pub fn remove_if<'g, Q, G, F>(
        &'g self,
        key: &Q,
        condition: F,
        guard: &'g G,
    ) -> Option<(&'g K, &'g V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        G: ReadSection,
        F: FnMut(&K, &V) -> bool,
    {
        self.remove_where(key, condition, true, guard, self, "remove_if")
            .map(|n| (&n.key, &n.value))
    }

    /// Copy-update the value of `key`: publish `f(&old)` in its place (the old entry is
    /// retired) in one atomic step with respect to other writes of the key. Returns the new
    /// value; `None`, without calling `f`, if the key is absent. `f` runs with no lock held
    /// and may run more than once if another writer changes the key's bucket in between
    /// (like `AtomicU64::fetch_update`), with the newest value each time.
    #[track_caller]
    pub fn update<'g, Q, G, F>(&'g self, key: &Q, f: F, guard: &'g G) -> Option<&'g V>
    where
        K: Borrow<Q> + Clone,
        Q: Hash + Eq + ?Sized,
        G: ReadSection,
        F: FnMut(&V) -> V,
    {
        self.update_where(key, f, guard, self).map(|n| &n.value)
    }
}

/// Link `new` under `locked`: in place of the found node if `replace` (returned, unlinked),
/// else in a free lane of the bucket, counted in `len` (the count it left is returned)
/// before the lock is released, so that a removal of the entry, which locks the bucket after
/// this, counts down after it (the count never runs below the entries present).
///
/// # Safety
///
/// As for [`table::Locked::insert`], and the spot found a node if `replace`.
pub(super) unsafe fn link<K, V>(
    locked: table::Locked<'_, K, V>,
    new: *mut Node<K, V>,
    replace: bool,
    len: &AtomicUsize,
) -> (Option<*mut Node<K, V>>, Option<usize>) {
    if replace {
        // SAFETY: forwarded to the caller.
        (Some(unsafe { locked.replace(new) }), None)
    } else {
        // SAFETY: forwarded to the caller.
        unsafe { locked.insert(new) };
        (None, Some(len.fetch_add(1, Relaxed).wrapping_add(1)))
    }
}
