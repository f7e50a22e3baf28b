#![doc = include_str!("README.md")]

mod threads;

use crate::barrier::{self, FenceKind, Heavy};
use crate::error::Error;
use crate::sync::{AtomicBool, AtomicUsize, Backoff};
use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
#[cfg(not(rcukit_loom))]
use threads::note_guard;
use threads::thread_index;
pub(crate) use threads::Path;

/// Most slots a lock may have.
pub(crate) const MAX_SLOTS: usize = 1024;

/// How many times a writer yields to readers that are waiting to retry before it takes the
/// slots anyway.
const READER_TURN_YIELDS: u32 = 64;

/// One slot: a cache line that its owning thread's readers write, and writers visit.
#[derive(Default)]
struct SlotState {
    /// A writer holds (or is taking) this slot.
    writer: AtomicBool,
    /// Read guards of the thread that owns this slot. Written only by that thread.
    owned: AtomicUsize,
    /// Read guards of threads that share this slot (read-modify-write).
    shared: AtomicUsize,
    /// Readers of this slot that backed off for a writer and are waiting to retry; the next
    /// writer lets them in first (fairness; see `lock_exclusive_slots`).
    waiting: AtomicUsize,
}

type Slot = CachePadded<SlotState>;

/// The default slot count: `4 × available_parallelism`, a power of two in `4..=MAX_SLOTS`.
pub(crate) fn default_slots() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cpus.saturating_mul(4))
        .next_power_of_two()
        .clamp(4, MAX_SLOTS)
}

fn new_slots(n: usize) -> Box<[Slot]> {
    (0..n).map(|_| Slot::default()).collect()
}

/// The slots and the barrier pair of one lock.
struct Table {
    /// This lock's key in a thread's tally of its shared-path guards (see *Recursion* in the
    /// module docs): unique in the process and never reused, and carried along when the lock
    /// moves. An address would not be: a guard leaked with `mem::forget` stays tallied, and
    /// another lock later at the same address (assigned over the first, or swapped into its
    /// place) would let this thread's reads of it skip the writer flag while a writer is in.
    #[cfg_attr(rcukit_loom, allow(dead_code))]
    id: u64,
    slots: Box<[Slot]>,
    fence: FenceKind,
    /// A writer holds every slot with no reader inside (for `is_locked_exclusive`).
    exclusive: AtomicBool,
}

impl Table {
    /// The slot and path of the calling thread.
    #[cfg_attr(rcukit_loom, allow(dead_code))]
    #[inline]
    fn my_slot(&self) -> (usize, Path) {
        let slots = self.slots.len();
        let index = thread_index();
        if index < slots {
            (index, Path::Owner)
        } else {
            (index & (slots - 1), Path::Shared)
        }
    }

    /// R1-R3 once on `slot` through `path`: true if the reader is in.
    #[inline]
    fn try_lock_shared(&self, slot: usize, path: Path) -> bool {
        let s = &self.slots[slot];
        match path {
            Path::Owner => {
                let n = s.owned.load(Relaxed);
                if n > 0 {
                    s.owned.store(n + 1, Relaxed);
                    return true;
                }
                s.owned.store(1, Relaxed); // R1
            }
            Path::Shared => {
                s.shared.fetch_add(1, Relaxed); // R1
            }
        }
        barrier::light(self.fence); // R2
        if !s.writer.load(Acquire) {
            // R3: no writer; or one that will see our count and wait for us.
            return true;
        }
        match path {
            Path::Owner => s.owned.store(0, Release),
            Path::Shared => {
                s.shared.fetch_sub(1, Release);
            }
        }
        false
    }

    #[inline]
    fn lock_shared(&self, slot: usize, path: Path) {
        if !self.try_lock_shared(slot, path) {
            self.lock_shared_slow(slot, path);
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_shared_slow(&self, slot: usize, path: Path) {
        let s = &self.slots[slot];
        s.waiting.fetch_add(1, Relaxed);
        loop {
            let mut backoff = Backoff::new();
            while s.writer.load(Acquire) {
                backoff.spin_or_yield();
            }
            if self.try_lock_shared(slot, path) {
                break;
            }
        }
        s.waiting.fetch_sub(1, Relaxed);
    }

    #[inline]
    fn unlock_shared(&self, slot: usize, path: Path) {
        let s = &self.slots[slot];
        match path {
            Path::Owner => {
                let n = s.owned.load(Relaxed);
                debug_assert!(n > 0, "unlock_shared without a reader");
                s.owned.store(n - 1, Release);
            }
            Path::Shared => {
                let prev = s.shared.fetch_sub(1, Release);
                debug_assert!(prev > 0, "unlock_shared without a reader");
            }
        }
    }

    fn new(slots: usize) -> Table {
        let fence = if barrier::support().private_expedited {
            FenceKind::Membarrier
        } else {
            FenceKind::SeqCst
        };
        static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Table {
            id: IDS.fetch_add(1, Relaxed),
            slots: new_slots(slots),
            fence,
            exclusive: AtomicBool::new(false),
        }
    }
}

/// The raw per-slot reader-writer lock; use it through [`PerCpuRwLock`].
pub struct RawPerCpuRwLock {
    #[cfg(not(rcukit_loom))]
    table: std::sync::OnceLock<Table>,
    #[cfg(rcukit_loom)]
    table: Table,
}

impl RawPerCpuRwLock {
    /// A lock with exactly `slots` slots (rounded up to a power of two), allocated now.
    ///
    /// Use it with [`PerCpuRwLock::from_raw`](lock_api::RwLock::from_raw):
    ///
    /// ```
    /// use rcukit::{PerCpuRwLock, RawPerCpuRwLock};
    /// let lock = PerCpuRwLock::from_raw(RawPerCpuRwLock::with_slots(16).unwrap(), 0u32);
    /// assert_eq!(*lock.read(), 0);
    /// ```
    pub fn with_slots(slots: usize) -> Result<RawPerCpuRwLock, Error> {
        if !(1..=MAX_SLOTS).contains(&slots) {
            return Err(Error::invalid(
                "slots",
                format!("{slots} is outside 1..={MAX_SLOTS}"),
            ));
        }
        let table = Table::new(slots.next_power_of_two());
        #[cfg(not(rcukit_loom))]
        {
            let cell = std::sync::OnceLock::new();
            let _ = cell.set(table);
            Ok(RawPerCpuRwLock { table: cell })
        }
        #[cfg(rcukit_loom)]
        {
            Ok(RawPerCpuRwLock { table })
        }
    }

    #[inline]
    fn table(&self) -> &Table {
        #[cfg(not(rcukit_loom))]
        {
            self.table.get_or_init(|| Table::new(default_slots()))
        }
        #[cfg(rcukit_loom)]
        {
            &self.table
        }
    }

    /// Number of slots (allocating them if this is the first use).
    #[inline]
    pub fn slot_count(&self) -> usize {
        self.table().slots.len()
    }

    /// The barrier pair this lock uses between readers and writers.
    pub fn fence_kind(&self) -> FenceKind {
        self.table().fence
    }

    /// Enter as a reader on `slot` through `path` (the loom models choose both).
    #[cfg(rcukit_loom)]
    pub(crate) fn lock_shared_on(&self, slot: usize, path: Path) {
        self.table().lock_shared(slot, path);
    }

    /// Leave as a reader of `slot` through `path`.
    #[cfg(rcukit_loom)]
    pub(crate) fn unlock_shared_on(&self, slot: usize, path: Path) {
        self.table().unlock_shared(slot, path);
    }

    /// W1 on one slot: take its writer flag, waiting while another writer holds it.
    fn take_writer_flag(slot: &SlotState) {
        let mut backoff = Backoff::new();
        while slot
            .writer
            .compare_exchange_weak(false, true, AcqRel, Relaxed)
            .is_err()
        {
            backoff.snooze();
        }
    }

    fn readers_gone(slot: &SlotState) -> bool {
        slot.owned.load(Acquire) == 0 && slot.shared.load(Acquire) == 0
    }

    /// W1-W3 over `slots` (all of them, except in the loom model's deliberately broken
    /// variant).
    pub(crate) fn lock_exclusive_slots(&self, slots: impl Iterator<Item = usize> + Clone) {
        let table = self.table();
        // Fairness: readers that backed off for the previous writer get in before this one
        // takes the flags again (bounded, so that writers cannot starve either).
        for i in slots.clone() {
            let mut waits = 0;
            while table.slots[i].waiting.load(Relaxed) > 0 && waits < READER_TURN_YIELDS {
                std::thread::yield_now();
                waits += 1;
            }
        }
        for i in slots.clone() {
            Self::take_writer_flag(&table.slots[i]);
        }
        barrier::heavy(table.fence, Heavy::Expedited); // W2
        for i in slots {
            let mut backoff = Backoff::new();
            while !Self::readers_gone(&table.slots[i]) {
                backoff.snooze();
            }
        }
        table.exclusive.store(true, Relaxed);
    }

    pub(crate) fn unlock_exclusive_slots(&self, slots: impl Iterator<Item = usize>) {
        let table = self.table();
        table.exclusive.store(false, Relaxed);
        for i in slots {
            let was = table.slots[i].writer.swap(false, Release);
            debug_assert!(was, "unlock_exclusive without the lock");
        }
    }
}

impl Default for RawPerCpuRwLock {
    fn default() -> Self {
        #[cfg(not(rcukit_loom))]
        {
            RawPerCpuRwLock {
                table: std::sync::OnceLock::new(),
            }
        }
        #[cfg(rcukit_loom)]
        {
            RawPerCpuRwLock {
                table: Table::new(default_slots()),
            }
        }
    }
}

impl std::fmt::Debug for RawPerCpuRwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawPerCpuRwLock")
            .field("slots", &self.slot_count())
            .field("fence", &self.fence_kind())
            .finish()
    }
}

#[cfg(not(rcukit_loom))]
impl Table {
    /// A read on the shared path by a thread that already holds a read guard of this lock:
    /// enter without looking at the writer flag (see *Recursion* in the module docs), tally it
    /// and return true; else return false, with nothing done.
    #[inline]
    fn nested_shared(&self, slot: usize) -> bool {
        let nested = threads::add_nested_shared(self.id);
        if nested {
            self.slots[slot].shared.fetch_add(1, Relaxed);
        }
        nested
    }
}

#[cfg(not(rcukit_loom))]
// SAFETY: a writer holds every slot's writer flag with no reader inside (module docs); the
// guards are `GuardNoSend`, so `unlock_shared` runs on the locking thread, whose index (hence
// slot and path) cannot change while it holds a guard on the owner path.
unsafe impl lock_api::RawRwLock for RawPerCpuRwLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: RawPerCpuRwLock = RawPerCpuRwLock {
        table: std::sync::OnceLock::new(),
    };

    type GuardMarker = lock_api::GuardNoSend;

    #[inline]
    fn lock_shared(&self) {
        let table = self.table();
        let (slot, path) = table.my_slot();
        if path == Path::Shared && table.nested_shared(slot) {
            return;
        }
        table.lock_shared(slot, path);
        note_guard(table.id, path, 1);
    }

    #[inline]
    fn try_lock_shared(&self) -> bool {
        let table = self.table();
        let (slot, path) = table.my_slot();
        if path == Path::Shared && table.nested_shared(slot) {
            return true;
        }
        let ok = table.try_lock_shared(slot, path);
        if ok {
            note_guard(table.id, path, 1);
        }
        ok
    }

    #[inline]
    unsafe fn unlock_shared(&self) {
        let table = self.table();
        let (slot, path) = table.my_slot();
        table.unlock_shared(slot, path);
        note_guard(table.id, path, -1);
    }

    fn lock_exclusive(&self) {
        self.lock_exclusive_slots(0..self.slot_count());
    }

    fn try_lock_exclusive(&self) -> bool {
        let table = self.table();
        let n = table.slots.len();
        // The reader turn `lock_exclusive` gives: readers that backed off for the previous
        // writer get in first, or a writer polling `try_write` would shut them out.
        if table.slots.iter().any(|s| s.waiting.load(Relaxed) > 0) {
            return false;
        }
        for (i, slot) in table.slots.iter().enumerate() {
            if slot
                .writer
                .compare_exchange(false, true, AcqRel, Relaxed)
                .is_err()
            {
                self.unlock_exclusive_slots(0..i);
                return false;
            }
        }
        barrier::heavy(table.fence, Heavy::Expedited);
        if table.slots.iter().all(|s| Self::readers_gone(s)) {
            table.exclusive.store(true, Relaxed);
            true
        } else {
            self.unlock_exclusive_slots(0..n);
            false
        }
    }

    unsafe fn unlock_exclusive(&self) {
        self.unlock_exclusive_slots(0..self.slot_count());
    }

    fn is_locked(&self) -> bool {
        self.table().slots.iter().any(|s| {
            s.writer.load(Relaxed) || s.owned.load(Relaxed) != 0 || s.shared.load(Relaxed) != 0
        })
    }

    fn is_locked_exclusive(&self) -> bool {
        self.table().exclusive.load(Relaxed)
    }
}

#[cfg(not(rcukit_loom))]
// SAFETY: the writer joins its own slot as a reader (it holds every writer flag, so no check is
// needed) before it clears the flags, so no writer slips in between; the read guard is released
// on that same slot and path.
unsafe impl lock_api::RawRwLockDowngrade for RawPerCpuRwLock {
    unsafe fn downgrade(&self) {
        let table = self.table();
        let (slot, path) = table.my_slot();
        let s = &table.slots[slot];
        match path {
            Path::Owner => s.owned.store(s.owned.load(Relaxed) + 1, Relaxed),
            Path::Shared => {
                s.shared.fetch_add(1, Relaxed);
            }
        }
        note_guard(table.id, path, 1);
        self.unlock_exclusive_slots(0..self.slot_count());
    }
}

/// A reader-writer lock with one reader lock per slot: readers touch only their thread's slot,
/// writers take every slot. See the [module
/// documentation](crate::docs::internal::locks::percpu_rwlock).
///
/// This is `lock_api::RwLock`, so it has the usual guards, `read`, `write`, `try_read`,
/// `try_write`, `get_mut`, `into_inner` and (through
/// [`RwLockWriteGuard::downgrade`](lock_api::RwLockWriteGuard::downgrade)) downgrading.
///
/// # Rules
///
/// * **Nested reads are allowed**, on every thread, even while a writer waits: a thread that
///   holds a read guard may take another of the same lock (unlike `parking_lot::RwLock`, where
///   that can deadlock). Whether a thread owns its slot or shares it (more threads than slots)
///   changes the cost of a read, never what is allowed.
/// * A write (or `try_write` in a loop) while holding a read guard of the same lock never
///   succeeds, as with every reader-writer lock.
/// * Writers let readers that backed off for the previous writer in first (bounded), so
///   back-to-back writers cannot shut readers out; `try_write` fails while such readers wait.
/// * Guards are `!Send`; a guard kept in a thread-local may be dropped during thread exit.
#[cfg(not(rcukit_loom))]
pub type PerCpuRwLock<T> = lock_api::RwLock<RawPerCpuRwLock, T>;

/// Read guard of a [`PerCpuRwLock`] (`!Send`).
#[cfg(not(rcukit_loom))]
pub type PerCpuRwLockReadGuard<'a, T> = lock_api::RwLockReadGuard<'a, RawPerCpuRwLock, T>;

/// Write guard of a [`PerCpuRwLock`] (`!Send`).
#[cfg(not(rcukit_loom))]
pub type PerCpuRwLockWriteGuard<'a, T> = lock_api::RwLockWriteGuard<'a, RawPerCpuRwLock, T>;

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use super::*;
    use lock_api::RawRwLock;

    /// `try_write` used to skip the reader turn that `write` gives: a writer polling it could
    /// keep readers that backed off waiting for tens of milliseconds.
    #[test]
    fn try_write_lets_readers_that_backed_off_in_first() {
        let lock = RawPerCpuRwLock::with_slots(4).unwrap();
        lock.table().slots[2].waiting.store(1, Relaxed); // a reader waits to retry
        assert!(!lock.try_lock_exclusive());
        assert!(!lock.is_locked());
        lock.table().slots[2].waiting.store(0, Relaxed);
        assert!(lock.try_lock_exclusive());
        assert!(lock.is_locked_exclusive());
        // SAFETY: locked exclusively just above.
        unsafe { lock.unlock_exclusive() };
        assert!(!lock.is_locked_exclusive());
    }
}
