#![doc = include_str!("README.md")]

mod compute;
mod hold;
mod iter;
#[cfg(all(test, rcukit_loom))]
mod loom;
mod rebuild;
mod table;
mod traits;
mod write;
mod write_lock;

pub use crate::compute::{Compute, Operation};
pub use iter::{Iter, Keys, Values};

use crate::domain_ref::{self, AnyDomainRef};
use crate::section::ReadSection;
use crate::sync::{AtomicPtr, AtomicUsize};
use crate::Rcu;
use crossbeam_utils::CachePadded;
use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use table::{groups_for, usable, Table, TOMBSTONE, WORD};
use write::given;
use write_lock::{WriteLock, Writer, WriterLock, Written};

/// A hash map of entries stored inline (cloned when the table is rebuilt), whose readers take
/// no lock; see the [module docs](self).
pub struct RcuFlatMap<K, V, S = RandomState, D = &'static Rcu>
where
    K: Clone + Send + 'static,
    V: Clone + Send + 'static,
    D: AnyDomainRef,
{
    root: AtomicPtr<Table<K, V>>,
    /// The entry count and the writer lock, which every write changes, together on cache
    /// lines of their own: every lookup reads `root`, the hasher and the domain, and a word
    /// written beside them would take their line from every reader's cache at each write.
    written: CachePadded<Written>,
    hasher: S,
    domain: D,
    /// The torture's self-test knob
    /// ([`__busted_drop_entries_at_once`](Self::__busted_drop_entries_at_once)).
    busted: bool,
    _entries: PhantomData<(K, V)>,
}

// SAFETY: readers on any thread share `&K`/`&V` (need `Sync`); entries written by one thread
// are read and cloned by others, and dropped with their table on whichever thread frees it
// (need `Send`); the hasher is used through `&S` by every thread, the domain handle through
// `&D`.
unsafe impl<K, V, S, D> Sync for RcuFlatMap<K, V, S, D>
where
    K: Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    S: Sync,
    D: AnyDomainRef + Sync,
{
}
// SAFETY: moving the map moves its tables (which it owns, with their entries: `Send`), its
// hasher and its handle.
unsafe impl<K, V, S, D> Send for RcuFlatMap<K, V, S, D>
where
    K: Clone + Send + 'static,
    V: Clone + Send + 'static,
    S: Send,
    D: AnyDomainRef + Send,
{
}

// As std's maps: unwind-safe when the entries are (a panic in the user's code under a write
// leaves the map as it was, or for `retain` with the removals made so far, a consistent map
// either way; an entry's own state is the entry's affair).
impl<K, V, S, D> std::panic::RefUnwindSafe for RcuFlatMap<K, V, S, D>
where
    K: Clone + Send + std::panic::RefUnwindSafe + 'static,
    V: Clone + Send + std::panic::RefUnwindSafe + 'static,
    D: AnyDomainRef,
{
}
impl<K, V, S, D> std::panic::UnwindSafe for RcuFlatMap<K, V, S, D>
where
    K: Clone + Send + std::panic::UnwindSafe + 'static,
    V: Clone + Send + std::panic::UnwindSafe + 'static,
    D: AnyDomainRef,
{
}

impl<K: Clone + Send + 'static, V: Clone + Send + 'static> RcuFlatMap<K, V> {
    /// An empty map on the global domain.
    pub fn new() -> Self {
        Self::with_capacity_and_hasher(0, RandomState::new())
    }

    /// An empty map on the global domain with room for `capacity` entries before it grows; it
    /// does not shrink below that room.
    ///
    /// # Panics
    ///
    /// With "capacity overflow" if a table with that room would take more than `isize::MAX`
    /// bytes (as std's maps do; an allocation the system refuses aborts the process, as
    /// theirs do too).
    pub fn with_capacity(capacity: usize) -> Self {
        Self::with_capacity_and_hasher(capacity, RandomState::new())
    }
}

/// An empty map on the global domain with the hasher's default (as std's `HashMap` with any
/// `S: Default`).
impl<K: Clone + Send + 'static, V: Clone + Send + 'static, S: Default> Default
    for RcuFlatMap<K, V, S>
{
    fn default() -> Self {
        Self::with_hasher(S::default())
    }
}

impl<K: Clone + Send + 'static, V: Clone + Send + 'static, D: AnyDomainRef>
    RcuFlatMap<K, V, RandomState, D>
{
    /// An empty map on `domain`: `&rcu` or `Arc<Rcu>` (read under its guards), `&qsbr` or
    /// `Arc<Qsbr>` (read by its online threads; see the [module docs](self), "On a QSBR
    /// domain").
    pub fn new_in(domain: D) -> Self {
        Self::with_capacity_hasher_in(0, RandomState::new(), domain)
    }
}

impl<K: Clone + Send + 'static, V: Clone + Send + 'static, S> RcuFlatMap<K, V, S> {
    /// An empty map on the global domain, hashing with `hasher`.
    pub fn with_hasher(hasher: S) -> Self {
        Self::with_capacity_and_hasher(0, hasher)
    }

    /// An empty map on the global domain with room for `capacity` entries, hashing with
    /// `hasher`.
    ///
    /// # Panics
    ///
    /// With "capacity overflow" if a table with that room would take more than `isize::MAX`
    /// bytes (as std's maps do; an allocation the system refuses aborts the process, as
    /// theirs do too).
    pub fn with_capacity_and_hasher(capacity: usize, hasher: S) -> Self {
        Self::with_capacity_hasher_in(capacity, hasher, Rcu::global())
    }
}

impl<K: Clone + Send + 'static, V: Clone + Send + 'static, S, D: AnyDomainRef>
    RcuFlatMap<K, V, S, D>
{
    /// An empty map on `domain` with room for `capacity` entries, hashing with `hasher`.
    ///
    /// # Panics
    ///
    /// With "capacity overflow" if a table with that room would take more than `isize::MAX`
    /// bytes (as std's maps do; an allocation the system refuses aborts the process, as
    /// theirs do too).
    pub fn with_capacity_hasher_in(capacity: usize, hasher: S, domain: D) -> Self {
        let groups = groups_for(capacity);
        RcuFlatMap {
            root: AtomicPtr::new(Box::into_raw(Box::new(Table::new(groups)))),
            written: CachePadded::new(Written {
                len: AtomicUsize::new(0),
                writer: WriterLock::new(Writer::for_table(groups, groups, 0)),
            }),
            hasher,
            domain,
            busted: false,
            _entries: PhantomData,
        }
    }

    /// Testing knob for the torture's self-test: a table that stops being the map's drops its
    /// entries (removed ones and the originals of those a rebuild cloned) at once, on the
    /// writing thread, while readers may still hold them (the table's memory is still freed
    /// after a grace period, so the bytes stay readable).
    ///
    /// # Safety
    ///
    /// Unsound by design: readers can observe dropped entries. Only for keys and values whose
    /// `Drop` leaves them readable (handles into a pool), to show that a checker notices.
    #[doc(hidden)]
    pub unsafe fn __busted_drop_entries_at_once(mut self) -> Self {
        self.busted = true;
        self
    }

    /// The map's domain: an [`Rcu`], whose guards (`domain().read()`) readers show to
    /// [`get`](Self::get), or a [`Qsbr`](crate::Qsbr), whose online threads
    /// (`domain().register()`) readers show instead.
    pub fn domain(&self) -> &D::Domain {
        self.domain.domain()
    }

    /// The map's hasher.
    pub fn hasher(&self) -> &S {
        &self.hasher
    }

    /// The map's handle on its domain.
    pub(crate) fn domain_ref(&self) -> &D {
        &self.domain
    }

    /// The number of entries (exact when no write is under way). In a child process forked
    /// while a write of the parent's was under way, that write stays under way for `len`
    /// until the child's first write of the map repairs it (it may count the entry the
    /// write placed or removed, or not).
    pub fn len(&self) -> usize {
        self.written.len.load(Relaxed)
    }

    /// Whether the map has no entries (exact when no write is under way).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many entries the current table holds (seven in eight of its slots). Slots that
    /// removals and replacements used up count until the next rebuild drops them.
    ///
    /// On a QSBR domain it reads under the writer lock (see the [module docs](self), "On a
    /// QSBR domain").
    pub fn capacity(&self) -> usize {
        let hold = self.hold();
        usable(self.held_table(&hold).groups())
    }

    /// The table, for a reader holding `guard`.
    #[inline(always)]
    #[track_caller]
    fn table<'g, G: ReadSection>(&'g self, guard: &'g G) -> &'g Table<K, V> {
        self.check_section(guard);
        // SAFETY: the root is never null; a table is retired only after it stopped being the
        // root, and the guard (of this domain) holds that grace period back for 'g.
        unsafe { &*self.root.load(Acquire) }
    }

    /// Panic unless `guard` is a read section of the map's domain.
    #[inline(always)]
    #[track_caller]
    fn check_section<G: ReadSection>(&self, guard: &G) {
        domain_ref::check_guard("RcuFlatMap", guard, domain_ref::protector(&self.domain));
    }

    /// The current table, for the holder of the writer lock.
    fn table_mine(&self, _lock: &WriteLock<'_, K, V, S, D>) -> &Table<K, V> {
        // SAFETY: only a holder of the writer lock replaces the root, and a table is retired
        // only after that, so the root stays alive while `_lock` is held.
        unsafe { &*self.root.load(Relaxed) }
    }
}

impl<K, V, S, D> RcuFlatMap<K, V, S, D>
where
    K: Clone + Hash + Eq + Send + 'static,
    V: Clone + Send + 'static,
    S: BuildHasher,
    D: AnyDomainRef,
{
    /// The entry for `key`, valid while both `guard` and the map are borrowed. Lock-free: the
    /// probe of the key's groups.
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another domain than the map's, or is an offline `QsbrThread`.
    #[inline(always)]
    #[track_caller]
    pub fn get_key_value<'g, Q, G>(&'g self, key: &Q, guard: &'g G) -> Option<(&'g K, &'g V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        G: ReadSection,
    {
        self.find_in(self.table(guard), key).map(|(k, v)| (k, v))
    }

    /// The entry for `key` in `table`.
    #[inline(always)]
    fn find_in<'t, Q>(&self, table: &'t Table<K, V>, key: &Q) -> Option<&'t (K, V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        table.find(hash, |k| k.borrow() == key)
    }

    /// The value for `key`, valid while both `guard` and the map are borrowed.
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another domain than the map's, or is an offline `QsbrThread`.
    #[inline]
    #[track_caller]
    pub fn get<'g, Q, G>(&'g self, key: &Q, guard: &'g G) -> Option<&'g V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        G: ReadSection,
    {
        self.get_key_value(key, guard).map(|(_, v)| v)
    }

    /// A copy of the value for `key`, read under a guard the map takes and drops:
    /// [`get_cloned`](Self::get_cloned) for `Copy` values.
    #[inline]
    pub fn get_copied<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        V: Copy,
    {
        self.get_cloned(key)
    }

    /// A clone of the value for `key`, read under a guard the map takes and drops.
    ///
    /// The key is hashed before the guard is taken, and the guard, being the map's own
    /// domain's, is not checked: a few loads fewer than [`get`](Self::get) with a guard of
    /// the caller's, which counts for a lookup that costs little more than its cache misses.
    ///
    /// On a QSBR domain the map cannot put the calling thread online, so it reads under its
    /// writer lock (correct from any thread, but it waits for writes and makes them wait):
    /// there, read with [`get`](Self::get) and the thread's [`QsbrThread`](crate::QsbrThread).
    #[inline]
    pub fn get_cloned<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let Some(_guard) = domain_ref::read_by_itself(&self.domain) else {
            return self.get_cloned_held(hash, key);
        };
        // SAFETY: as in `table`: the root is never null, and a table is retired only after it
        // stopped being the root; the guard, of the map's own domain, holds that grace period
        // back while the table is used here.
        let table = unsafe { &*self.root.load(Acquire) };
        table
            .find(hash, |k| k.borrow() == key)
            .map(|(_, v)| v.clone())
    }

    /// `get_cloned` on a QSBR domain: under the writer lock (see `hold`).
    #[cold]
    #[inline(never)]
    fn get_cloned_held<Q>(&self, hash: u64, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hold = self.hold();
        let table = self.held_table(&hold);
        table
            .find(hash, |k| k.borrow() == key)
            .map(|(_, v)| v.clone())
    }

    /// Whether the map holds `key`.
    #[inline]
    #[track_caller]
    pub fn contains_key<Q, G>(&self, key: &Q, guard: &G) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        G: ReadSection,
    {
        self.get_key_value(key, guard).is_some()
    }

    /// Insert `key` → `value`; returns a clone of the value it replaced. The replaced entry
    /// stays readable by readers that found it until their guards end.
    pub fn insert(&self, key: K, value: V) -> Option<V> {
        self.write(key, Some(value), |current, held| {
            let old = current.map(|(_, v)| v.clone());
            held.use_given();
            old
        })
    }

    /// [`insert`](Self::insert) without a clone: the value it replaced, borrowed for `guard`
    /// (the replaced entry stays in its slot until its table is freed, after a grace period
    /// that `guard` holds back).
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another domain than the map's, or is an offline `QsbrThread`.
    #[track_caller]
    pub fn insert_borrowed<'g, G: ReadSection>(
        &'g self,
        key: K,
        value: V,
        guard: &'g G,
    ) -> Option<&'g V> {
        self.check_section(guard);
        let old = self.write(key, Some(value), |current, held| {
            held.use_given();
            current.map(|(_, v)| v as *const V)
        });
        // SAFETY: the replaced entry is never written again and is dropped only with its
        // table, which is freed after a grace period that began after this call, and which
        // `guard`, of the map's domain (checked above), holds back for 'g.
        old.map(|v| unsafe { &*v })
    }

    /// Insert `key` → `value` if the map has no entry for `key`; else leave the map as it is
    /// (dropping `key` and `value` once the writer lock is released) and return a clone of the
    /// current value.
    pub fn try_insert(&self, key: K, value: V) -> Result<(), V> {
        self.write(key, Some(value), |current, held| match current {
            None => {
                held.use_given();
                Ok(())
            }
            // What was not inserted stays held, to be dropped after the lock.
            Some((_, v)) => Err(v.clone()),
        })
    }

    /// A clone of the value for `key`, inserting `make()` first if there is none: atomic with
    /// respect to every other write (`make` runs under the map's writer lock, at most once; it
    /// must not write to this map, which panics).
    pub fn get_or_insert_with<F: FnOnce() -> V>(&self, key: K, make: F) -> V {
        self.write(key, Some(make), |current, held| match current {
            // The key and `make` stay held, to be dropped after the lock.
            Some((_, v)) => v.clone(),
            None => {
                let value = given(&mut held.given)();
                held.new_key = held.key.take();
                held.hold_value(value).clone()
            }
        })
    }

    /// Replace the value for `key` with `f(value)` (`f` gets a clone of the current value),
    /// atomically with respect to every other write (`f` runs under the map's writer lock,
    /// once; it must not write to this map, which panics). Returns a clone of the new value,
    /// or `None` (and does not call `f`) if `key` is absent.
    pub fn update<Q, F>(&self, key: &Q, f: F) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        F: FnOnce(V) -> V,
    {
        self.write(key, Some(f), |current, held| match current {
            // `f` stays held, to be dropped after the lock.
            None => None,
            Some((k, v)) => {
                held.new_key = Some(k.clone());
                let old = v.clone();
                let new = given(&mut held.given)(old);
                Some(held.hold_value(new).clone())
            }
        })
    }

    /// Replace the value for `key` with `update(value)` (given a clone of the current value),
    /// or insert `insert()` if there is none: atomic with respect to every other write (the
    /// closures run under the map's writer lock, one of them once; they must not write to
    /// this map, which panics). Returns a clone of the value now in the map.
    pub fn update_or_insert_with<U, I>(&self, key: K, update: U, insert: I) -> V
    where
        U: FnOnce(V) -> V,
        I: FnOnce() -> V,
    {
        // The key and the closure not called stay held, to be dropped after the lock.
        self.write(key, (Some(update), Some(insert)), |current, held| {
            let value = match current {
                Some((k, v)) => {
                    held.new_key = Some(k.clone());
                    let old = v.clone();
                    given(&mut held.given.0)(old)
                }
                None => {
                    let value = given(&mut held.given.1)();
                    held.new_key = held.key.take();
                    value
                }
            };
            held.hold_value(value).clone()
        })
    }

    /// Remove the entry for `key`; returns a clone of its value. Readers that found the entry
    /// keep reading it until their guards end.
    pub fn remove<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.remove_where(key, |(_, v)| Some(v.clone()))
    }

    /// [`remove`](Self::remove) without a clone: the removed value, borrowed for `guard` (the
    /// entry stays in its slot until its table is freed, after a grace period that `guard`
    /// holds back).
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another domain than the map's, or is an offline `QsbrThread`.
    #[track_caller]
    pub fn remove_borrowed<'g, Q, G>(&'g self, key: &Q, guard: &'g G) -> Option<&'g V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        G: ReadSection,
    {
        self.check_section(guard);
        let removed = self.remove_where(key, |(_, v)| Some(v as *const V));
        // SAFETY: as in `insert_borrowed`: the removed entry stays in its slot, and its table
        // is freed only after a grace period that `guard` holds back for 'g.
        removed.map(|v| unsafe { &*v })
    }

    /// Remove the entry for `key` if `condition(key, value)` holds, atomically with respect to
    /// every other write (`condition` runs under the map's writer lock); returns a clone of the
    /// entry.
    pub fn remove_if<Q, F>(&self, key: &Q, condition: F) -> Option<(K, V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        F: FnOnce(&K, &V) -> bool,
    {
        self.remove_where(key, |entry| {
            condition(&entry.0, &entry.1).then(|| entry.clone())
        })
    }

    /// Remove the entry for `key` if `decide` gives something for it, and return that (what the
    /// caller gets of the entry: a clone, taken before anything changes, so that a panic in
    /// `decide` leaves the map as it was).
    fn remove_where<Q, R>(&self, key: &Q, decide: impl FnOnce(&(K, V)) -> Option<R>) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let decide = self.refuse_reentry(decide);
        let hash = self.hasher.hash_one(key);
        // Declared before the lock, so dropped after it if a rebuild below panics: the
        // caller's clone is the caller's, and its `Drop` may write this map.
        let removed;
        let mut lock = self.lock_checked();
        let table = self.table_mine(&lock);
        let at = table.find_slot(hash, |k| k.borrow() == key)?;
        // SAFETY: the key's slot is full; the table is alive under the lock.
        removed = decide(unsafe { table.entry(at) })?;
        self.remove_at(&mut lock, at);
        Some(removed)
    }

    /// Remove the entry in slot `at` of the current table, under the writer lock: a tombstone
    /// in its place, or, if one entry fewer leaves the table sparse, a smaller table built
    /// without it.
    #[inline(always)]
    fn remove_at(&self, lock: &mut WriteLock<'_, K, V, S, D>, at: usize) {
        let len = self.written.len.load(Relaxed) - 1;
        if !self.shrink_if_sparse(lock, len, Some(at)) {
            self.table_mine(lock).bury(at);
            self.written.len.store(len, Relaxed);
        }
    }

    /// Keep only the entries for which `keep(key, value)` holds (`keep` runs under the map's
    /// writer lock, once per entry; it must not write to this map, which panics).
    ///
    /// Not all or nothing: if `keep` panics, the entries it refused so far are removed and
    /// the others stay, as with std's `retain`; and if a `Clone` panics in the smaller table
    /// that `retain` may then build, every removal it made stays made, in the table it had.
    pub fn retain<F: FnMut(&K, &V) -> bool>(&self, keep: F) {
        let mut keep = self.refuse_reentry(keep);
        let mut lock = self.lock_checked();
        let table = self.table_mine(&lock);
        let mut len = self.written.len.load(Relaxed);
        for w in 0..table.words() {
            let word = table.ctrl_mine(w);
            let mut next = word;
            for b in table::fulls(word) {
                // SAFETY: full; alive under the lock.
                let (k, v) = unsafe { table.entry(w * WORD + b) };
                if !keep(k, v) {
                    next = table::with_byte(next, b, TOMBSTONE);
                    len -= 1;
                }
            }
            if next != word {
                table.set_ctrl(w, next);
                self.written.len.store(len, Relaxed);
            }
        }
        self.shrink_if_sparse(&mut lock, len, None);
    }

    /// Remove every entry; the table goes back to the size the map was made with.
    pub fn clear(&self) {
        let mut lock = self.lock();
        let groups = lock.min_groups;
        self.replace_root(&mut lock, Box::new(Table::new(groups)), groups, 0);
    }

    /// Rebuild the table at the smallest size that holds the entries (and drops tombstones);
    /// the map may then shrink below the capacity it was made with.
    pub fn shrink_to_fit(&self) {
        let mut lock = self.lock();
        let groups = groups_for(self.written.len.load(Relaxed));
        self.rebuild(&mut lock, groups, 1);
    }

    /// Make sure `additional` more entries than the map holds now fit without a rebuild: the
    /// table grows at once if it must, and the map will not shrink below that room (removals
    /// leave it, and [`clear`](Self::clear) goes back to it) until
    /// [`shrink_to_fit`](Self::shrink_to_fit), as `RcuHashMap::reserve` does.
    ///
    /// # Panics
    ///
    /// With "capacity overflow" if a table with room for them and the map's entries would take
    /// more than `isize::MAX` bytes, leaving the map as it was (as std's maps do; an
    /// allocation the system refuses aborts the process, as theirs do too).
    pub fn reserve(&self, additional: usize) {
        let mut lock = self.lock();
        let len = self.written.len.load(Relaxed);
        let floor = groups_for(len.saturating_add(additional)).max(lock.min_groups);
        if lock.room >= additional {
            // The table has the room; removals must not shrink it below the floor.
            let groups = self.table_mine(&lock).groups();
            lock.set_floor(groups, floor);
            return;
        }
        self.rebuild(&mut lock, floor, floor);
    }
}

impl<K: Clone + Send + 'static, V: Clone + Send + 'static, S, D: AnyDomainRef> Drop
    for RcuFlatMap<K, V, S, D>
{
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader (they borrow the map) and no writer remains; earlier
        // tables were retired to the domain, the root is ours alone.
        drop(unsafe { Box::from_raw(self.root.load(Relaxed)) });
    }
}
