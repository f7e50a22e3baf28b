#![doc = include_str!("per_thread.md")]

use std::cell::{Cell, RefCell, UnsafeCell};
use std::ptr::NonNull;

/// What a [`PerDomain`] table holds per domain.
pub(crate) trait Entry {
    /// The state the table hands out pointers to.
    type Target;

    /// A pointer to the state, stable while the entry lives (also when the entry moves).
    fn target(&mut self) -> NonNull<Self::Target>;

    /// The entry's domain is gone: the table may drop the entry when it next adds one.
    fn domain_gone(&self) -> bool;
}

/// A domain's id and its hash, computed once when the domain is made (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DomainKey {
    id: u64,
    hash: u64,
}

static NEXT_DOMAIN_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl DomainKey {
    /// The key of a new domain, with a fresh identifier. Everything that keys per-thread
    /// state by identifier (domains, [`Qsbr`](crate::Qsbr), [`RecSeq`](crate::RecSeq)) takes
    /// its identifier from here, so that the keys never collide; identifiers are never reused.
    pub(crate) fn fresh() -> DomainKey {
        DomainKey::new(NEXT_DOMAIN_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// The key of no domain (id 0).
    pub(crate) const NONE: DomainKey = DomainKey::new(0);

    /// The key of domain `id`.
    #[inline]
    pub(crate) const fn new(id: u64) -> DomainKey {
        DomainKey {
            id,
            hash: id.wrapping_mul(FIBONACCI),
        }
    }

    /// The domain's id.
    #[inline]
    pub(crate) const fn id(self) -> u64 {
        self.id
    }

    /// The slot where the probe for this domain starts, in an index of `2^(64 - shift)` slots
    /// (`shift` < 64).
    #[inline]
    fn home(self, shift: u32) -> usize {
        (self.hash >> shift) as usize
    }

    /// This domain's slot in a [`DirectCache`].
    #[inline]
    fn cache_slot(self) -> usize {
        (self.hash >> (64 - CACHE_BITS)) as usize
    }
}

/// log2 of a [`DirectCache`]'s slots.
const CACHE_BITS: u32 = if cfg!(rcukit_small) { 1 } else { 8 };

/// A direct-mapped cache in front of a thread's index: each domain has one slot (by its
/// hash), which holds the state of the domain that used it last.
///
/// A hit costs what a one-entry cache of the last domain costs (a load and a compare at a
/// slot picked by a shift of the key's hash), but it serves a thread that uses up to about a
/// hundred domains in turn as well as one that keeps to one: a thread reading domains
/// round-robin misses a one-entry cache every time. Two domains whose hashes share their top
/// bits evict each other; a miss costs a probe of the index (see the module docs), then fills
/// the slot.
///
/// Without a destructor and constant-initialized, so that a thread-local of it is read with
/// no check of whether it is initialized or destroyed. 256 slots of 16 bytes: 4 KiB of
/// static thread-local storage per thread. (Made on a thread's first read instead and reached
/// through a pointer, it measured 1.76-1.79x of one domain's cost at k = 10-100 against
/// 1.46-1.49x: it is kept static.) An entry names its domain by id, and ids are never reused,
/// so an entry left after its domain is gone never matches again; the owner clears the cache
/// before the states it points to can be freed otherwise (thread exit).
pub(crate) struct DirectCache<T> {
    slots: [Cell<(u64, *const T)>; 1 << CACHE_BITS],
}

impl<T> DirectCache<T> {
    /// An empty cache (usable in a `const` thread-local initializer).
    pub(crate) const fn new() -> DirectCache<T> {
        DirectCache {
            slots: [const { Cell::new((0, std::ptr::null())) }; 1 << CACHE_BITS],
        }
    }

    /// The state cached for the domain of `key`, if its slot holds it.
    #[inline]
    pub(crate) fn get(&self, key: DomainKey) -> Option<*const T> {
        let (domain, target) = self.slots[key.cache_slot()].get();
        (domain == key.id).then_some(target)
    }

    /// Cache `target` as the state of the domain of `key` (evicting the slot's domain).
    #[inline]
    pub(crate) fn set(&self, key: DomainKey, target: *const T) {
        self.slots[key.cache_slot()].set((key.id, target));
    }

    /// Forget every entry.
    pub(crate) fn clear(&self) {
        for slot in &self.slots {
            slot.set((0, std::ptr::null()));
        }
    }
}

/// One slot of the index: a domain id (0 for an empty slot) and its state.
struct Slot<T> {
    domain: u64,
    target: *const T,
}

impl<T> Clone for Slot<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Slot<T> {}

/// A thread's entries, one per domain it has used, with O(1) lookup by domain id (see the
/// module docs).
pub(crate) struct PerDomain<E: Entry> {
    /// The domain looked up last (0 for none) and its state.
    last_domain: Cell<u64>,
    last: Cell<*const E::Target>,
    /// The hash index: empty, or a power-of-two number of slots, at most half of them used.
    index: UnsafeCell<Vec<Slot<E::Target>>>,
    /// `64 - log2(index.len())`: the shift of the Fibonacci hash.
    shift: Cell<u32>,
    entries: RefCell<Vec<(u64, E)>>,
}

/// A copy of a [`PerDomain`] index's location: valid until the table next adds an entry or is
/// emptied (the owner refreshes or clears its copy then). Lets the owner look domains up from
/// a thread-local without a destructor, with no check of the table's own thread-local.
pub(crate) struct IndexView<T> {
    slots: *const Slot<T>,
    /// `len - 1`; `usize::MAX` for an empty index (no slots).
    mask: usize,
    shift: u32,
}

impl<T> Clone for IndexView<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for IndexView<T> {}

impl<T> IndexView<T> {
    /// A view of no index: finds nothing.
    pub(crate) const EMPTY: IndexView<T> = IndexView {
        slots: std::ptr::null(),
        mask: usize::MAX,
        shift: 64,
    };

    /// The state of `domain`, if the index has it.
    ///
    /// # Safety
    ///
    /// The table this view was taken of has not added an entry or been emptied since.
    #[inline]
    pub(crate) unsafe fn find(&self, key: DomainKey) -> Option<NonNull<T>> {
        if self.mask == usize::MAX {
            return None;
        }
        let domain = key.id;
        let mut at = key.home(self.shift);
        loop {
            // SAFETY: `at & mask` is below the index's length, and the caller guarantees the
            // index is still the one viewed.
            let slot = unsafe { *self.slots.add(at & self.mask) };
            if slot.domain == domain {
                return NonNull::new(slot.target.cast_mut());
            }
            if slot.domain == 0 {
                return None;
            }
            at += 1;
        }
    }
}

/// 2^64 / φ: multiplying by it spreads consecutive ids over the whole word.
const FIBONACCI: u64 = 0x9E37_79B9_7F4A_7C15;

impl<E: Entry> PerDomain<E> {
    /// An empty table (usable in a `const` thread-local initializer).
    pub(crate) const fn new() -> PerDomain<E> {
        PerDomain {
            last_domain: Cell::new(0),
            last: Cell::new(std::ptr::null()),
            index: UnsafeCell::new(Vec::new()),
            shift: Cell::new(64),
            entries: RefCell::new(Vec::new()),
        }
    }

    /// The state of `domain`, made with `create` (and added) on the thread's first use of it.
    ///
    /// `create` must not use this table (it runs while the table is borrowed).
    #[inline]
    pub(crate) fn get_or_insert(
        &self,
        key: DomainKey,
        create: impl FnOnce() -> E,
    ) -> NonNull<E::Target> {
        debug_assert_ne!(key.id, 0, "domain ids start at 1");
        if self.last_domain.get() == key.id {
            // SAFETY: `last` is set together with `last_domain`, to a pointer from the index,
            // and cleared before its entry can be dropped.
            return unsafe { NonNull::new_unchecked(self.last.get().cast_mut()) };
        }
        self.get_or_insert_uncached(key, create)
    }

    /// [`get_or_insert`](Self::get_or_insert) past the cache: out of line, so that the cached
    /// case inlines into every read as a compare and a load.
    #[inline(never)]
    fn get_or_insert_uncached(
        &self,
        key: DomainKey,
        create: impl FnOnce() -> E,
    ) -> NonNull<E::Target> {
        match self.find(key) {
            Some(target) => {
                self.last_domain.set(key.id);
                self.last.set(target.as_ptr());
                target
            }
            None => self.insert(key, create),
        }
    }

    /// The state of `domain` if the thread has one (the cache, then the index; nothing is
    /// added).
    #[inline]
    pub(crate) fn get(&self, key: DomainKey) -> Option<NonNull<E::Target>> {
        if self.last_domain.get() == key.id && key.id != 0 {
            // SAFETY: as in `get_or_insert`.
            return Some(unsafe { NonNull::new_unchecked(self.last.get().cast_mut()) });
        }
        self.find(key)
    }

    /// Look the domain of `key` up in the index.
    #[inline]
    fn find(&self, key: DomainKey) -> Option<NonNull<E::Target>> {
        // SAFETY: the view is of the current index, used before this function returns.
        unsafe { self.view().find(key) }
    }

    /// A raw view of the index as it is now, for a caller that keeps its own copy in a
    /// thread-local without a destructor (see [`IndexView`]).
    #[inline]
    pub(crate) fn view(&self) -> IndexView<E::Target> {
        // SAFETY: the index is only replaced by `insert` and `take_all`, on this thread, and
        // no reference to it outlives this function.
        let index = unsafe { &*self.index.get() };
        IndexView {
            slots: index.as_ptr(),
            mask: index.len().wrapping_sub(1),
            shift: self.shift.get(),
        }
    }

    /// Add the entry of `domain`, dropping the entries of domains that are gone.
    #[cold]
    #[inline(never)]
    fn insert(&self, key: DomainKey, create: impl FnOnce() -> E) -> NonNull<E::Target> {
        let gone = {
            let mut entries = self.entries.borrow_mut();
            let (live, gone): (Vec<_>, Vec<_>) = std::mem::take(&mut *entries)
                .into_iter()
                .partition(|(_, e)| !e.domain_gone());
            *entries = live;
            entries.push((key.id, create()));
            self.rebuild(&mut entries);
            gone
        };
        // The index and the cache no longer point into the entries that are gone: drop them
        // now, outside the borrow (a producer slot's drop publishes what it still holds).
        drop(gone);
        let target = self.find(key).expect("just added");
        self.last_domain.set(key.id);
        self.last.set(target.as_ptr());
        target
    }

    /// Rebuild the index over `entries`, and forget the cache.
    fn rebuild(&self, entries: &mut [(u64, E)]) {
        self.last_domain.set(0);
        let len = (entries.len() * 2).next_power_of_two().max(8);
        let empty = Slot {
            domain: 0,
            target: std::ptr::null(),
        };
        let mut index = vec![empty; len];
        let shift = 64 - len.trailing_zeros();
        for (domain, entry) in entries.iter_mut() {
            let mut at = DomainKey::new(*domain).home(shift);
            while index[at & (len - 1)].domain != 0 {
                at += 1;
            }
            index[at & (len - 1)] = Slot {
                domain: *domain,
                target: entry.target().as_ptr(),
            };
        }
        // SAFETY: no reference to the index is live (see `find`).
        unsafe { *self.index.get() = index };
        self.shift.set(shift);
    }

    /// Take every entry out (at thread exit), leaving the table empty.
    pub(crate) fn take_all(&self) -> Vec<(u64, E)> {
        self.last_domain.set(0);
        self.last.set(std::ptr::null());
        // SAFETY: no reference to the index is live (see `find`).
        unsafe { *self.index.get() = Vec::new() };
        self.shift.set(64);
        std::mem::take(&mut *self.entries.borrow_mut())
    }

    /// The entries, to look through (`None` while the table is being changed).
    #[cfg(test)]
    pub(crate) fn entries(&self) -> Option<std::cell::Ref<'_, Vec<(u64, E)>>> {
        self.entries.try_borrow().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    struct Test {
        state: Box<u64>,
        gone: Rc<Cell<bool>>,
    }

    impl Entry for Test {
        type Target = u64;
        fn target(&mut self) -> NonNull<u64> {
            NonNull::from(&mut *self.state)
        }
        fn domain_gone(&self) -> bool {
            self.gone.get()
        }
    }

    fn entry(v: u64, gone: &Rc<Cell<bool>>) -> Test {
        Test {
            state: Box::new(v),
            gone: gone.clone(),
        }
    }

    #[test]
    fn finds_every_domain_and_creates_each_once() {
        let table = PerDomain::<Test>::new();
        let alive = Rc::new(Cell::new(false));
        let created = Cell::new(0);
        // Ids in steps of a power of two, the worst case for a plain mask.
        let n = if cfg!(miri) { 50 } else { 1000 };
        for round in 0..3 {
            for d in (1..=n).map(|i| i * 64) {
                let p = table.get_or_insert(DomainKey::new(d), || {
                    created.set(created.get() + 1);
                    entry(d, &alive)
                });
                // SAFETY: the entry lives in the table.
                assert_eq!(unsafe { *p.as_ptr() }, d, "round {round}");
            }
        }
        assert_eq!(created.get(), n as usize);
        assert_eq!(table.entries().unwrap().len(), n as usize);
    }

    #[test]
    fn entries_of_gone_domains_are_dropped_when_one_is_added() {
        let table = PerDomain::<Test>::new();
        let gone = Rc::new(Cell::new(false));
        let alive = Rc::new(Cell::new(false));
        for d in 1..=10 {
            table.get_or_insert(DomainKey::new(d), || entry(d, &gone));
        }
        gone.set(true);
        let p = table.get_or_insert(DomainKey::new(11), || entry(11, &alive));
        // SAFETY: the entry lives in the table.
        assert_eq!(unsafe { *p.as_ptr() }, 11);
        assert_eq!(table.entries().unwrap().len(), 1);
        // A domain that is gone is not found (its entry was dropped); the cache forgot it.
        let again = table.get_or_insert(DomainKey::new(3), || entry(300, &alive));
        // SAFETY: the entry lives in the table.
        assert_eq!(unsafe { *again.as_ptr() }, 300);
        assert_eq!(table.take_all().len(), 2);
        assert!(table.entries().unwrap().is_empty());
    }
}
