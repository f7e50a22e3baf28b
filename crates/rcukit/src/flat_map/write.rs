//! The write path of [`RcuFlatMap`] that every write but a removal shares: what a write holds
//! of the user's values while it runs under the writer lock, and the placement of an entry
//! (rebuilding the table first when it has no room).

use super::table::{usable, word_of, Found};
use super::write_lock::WriteLock;
use super::RcuFlatMap;
use crate::domain_ref::AnyDomainRef;
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::Ordering::Relaxed;

/// What a write holds of user values while it runs under the writer lock: the caller's key
/// and what it gave (a value, closures), until the write uses them, and the key and value it
/// makes for the entry, until the entry is placed. [`RcuFlatMap::write`] keeps it in its frame
/// from before it takes the lock, so whatever is still held when the write returns, or when
/// user code under the lock panics, is dropped after the lock is released: those drops are
/// user code too, which may write the map (and would panic under the lock, and abort the
/// process if a panic were unwinding already).
pub(super) struct Held<B, P, K, V> {
    /// The caller's key (owned or borrowed), until a new entry takes it.
    pub(super) key: Option<B>,
    /// What the caller gave besides the key (each call takes out what it uses).
    pub(super) given: P,
    /// The entry's key, as soon as it is made.
    pub(super) new_key: Option<K>,
    /// The entry's value, as soon as it is made.
    pub(super) new_value: Option<V>,
    /// The entry being placed (the two above, once nothing but the placement is left).
    entry: Option<(K, V)>,
}

impl<B, P, K, V> Held<B, P, K, V> {
    /// The value the entry will hold: kept here while user code runs (its clone for the
    /// caller), and returned by reference.
    pub(super) fn hold_value(&mut self, value: V) -> &V {
        self.new_value.insert(value)
    }
}

impl<K, V> Held<K, Option<V>, K, V> {
    /// The caller's own key and value, as they were given, become the entry.
    pub(super) fn use_given(&mut self) {
        self.new_value = self.given.take();
        self.new_key = self.key.take();
    }
}

/// Take out what a write was given, once.
pub(super) fn given<T>(slot: &mut Option<T>) -> T {
    slot.take()
        .expect("rcukit: what a write was given is taken once")
}

impl<K, V, S, D> RcuFlatMap<K, V, S, D>
where
    K: Clone + Hash + Eq + Send + 'static,
    V: Clone + Send + 'static,
    S: BuildHasher,
    D: AnyDomainRef,
{
    /// Every write but a removal: under the writer lock, find the entry of `key` (the caller's
    /// own, or borrowed), ask `decide` (once) what to write given that entry, and write it,
    /// rebuilding the table first when it has no room (or when an iteration walks it and the
    /// entry would change control words: see "Iteration"). `decide` gets the key and what the
    /// caller gave (`given`) in a [`Held`], and leaves there the key and value of the entry to
    /// write, if any, taking out only what it uses; it also makes what the write returns
    /// (clones of the values the caller gets), before anything changes: a panic in it, or in
    /// the user's code it runs, leaves the map as it was. What is still held when the write
    /// ends, or unwinds, is dropped after the lock is released.
    pub(super) fn write<Q, B, P, R>(
        &self,
        key: B,
        given: P,
        decide: impl FnOnce(Option<&(K, V)>, &mut Held<B, P, K, V>) -> R,
    ) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        B: Borrow<Q>,
    {
        let (key, given) = self.refuse_reentry((key, given));
        let hash = self.hasher.hash_one(key.borrow());
        // Both declared before the lock, so dropped after it, on unwind too (see `Held`).
        let mut held = Held {
            key: Some(key),
            given,
            new_key: None,
            new_value: None,
            entry: None,
        };
        let result;
        let mut lock = self.lock_checked();
        let found = match &held.key {
            Some(key) => self
                .table_mine(&lock)
                .probe_for_write(hash, |k| k.borrow() == key.borrow()),
            None => unreachable!("the key is held until `decide` runs"),
        };
        // SAFETY: the key's slot is full; the table is alive under the lock.
        let current = found
            .at
            .map(|at| unsafe { self.table_mine(&lock).entry(at) });
        result = decide(current, &mut held);
        if let (Some(key), Some(value)) = (held.new_key.take(), held.new_value.take()) {
            held.entry = Some((key, value));
            self.put(&mut lock, found, hash, &mut held.entry);
        }
        drop(lock);
        result
    }

    /// Write `entry` (whose key hashes to `hash`) where the probe `found` says, under the
    /// writer lock, rebuilding the table first when it has no room (or when an iteration walks
    /// it and the entry would change control words); returns the slot of the current table the
    /// entry went to. The entry is taken out of its slot (which the caller declared before
    /// the lock: see [`Held`]) only to be placed, so a rebuild's `Clone` that panics leaves it
    /// to be dropped after the lock.
    #[inline]
    pub(super) fn put(
        &self,
        lock: &mut WriteLock<'_, K, V, S, D>,
        mut found: Found,
        hash: u64,
        entry: &mut Option<(K, V)>,
    ) -> usize {
        loop {
            let table = self.table_mine(lock);
            let moves = matches!((found.at, found.free), (Some(at), Some(free)) if word_of(at) != word_of(free));
            let walked = moves && table.iterators.load(Relaxed) > 0;
            let Some(free) = found.free.filter(|_| lock.room > 0 && !walked) else {
                // Rebuild, then probe again for the key being written (the user's `Eq` runs
                // again; its answers may differ, which only changes what the map holds).
                let len = self.written.len.load(Relaxed);
                let groups = if len + 1 > usable(table.groups()) / 2 {
                    table.groups() * 2
                } else {
                    table.groups()
                };
                let floor = lock.min_groups;
                self.rebuild(lock, groups, floor);
                let Some((key, _)) = entry.as_ref() else {
                    unreachable!("the entry is held until it is placed")
                };
                found = self.table_mine(lock).probe_for_write(hash, |k| k == key);
                continue;
            };
            let Some(entry) = entry.take() else {
                unreachable!("the entry is held until it is placed")
            };
            lock.room -= 1;
            let added = found.at.is_none();
            // SAFETY: this writer holds the lock; `found` is fresh and has a free slot.
            unsafe { table.place(&found, hash, entry) };
            if added {
                self.written
                    .len
                    .store(self.written.len.load(Relaxed) + 1, Relaxed);
            }
            return free;
        }
    }
}
