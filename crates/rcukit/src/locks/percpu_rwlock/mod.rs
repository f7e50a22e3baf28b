//! [`PerCpuRwLock<T>`]: a reader-writer lock with one reader lock per slot, after the per-CPU
//! locks Eric Dumazet gave ip_tables in 2005 ([seed 002](crate::docs::seeds)).
//!
//! ```
//! use rcukit::PerCpuRwLock;
//!
//! let table = PerCpuRwLock::new(vec![0u64; 4]);
//! {
//!     let rules = table.read(); // touches only this thread's slot
//!     assert_eq!(rules.len(), 4);
//! }
//! table.write().push(5); // takes every slot
//! assert_eq!(table.read().len(), 5);
//! ```
//!
//! # Why per slot
//!
//! A central reader-writer lock costs every reader an atomic read-modify-write on *one* cache line,
//! which then bounces between every CPU that reads: with two readers the lock word ping-pongs on
//! every acquisition and release, and that transfer, not the atomic itself, dominates
//! ([seed 002](crate::docs::seeds): "the cache line containing rwlock still must be taken
//! exclusively by each CPU"). Here each slot has its own cache-line-padded lock word. A reader uses
//! only its thread's slot, so readers on different slots never share a line; a writer, which is
//! rare, takes every slot in turn.
//!
//! # Slots and threads
//!
//! The kernel indexes by CPU with preemption disabled. A user thread can migrate between
//! `lock` and `unlock`, and `lock_api`'s `unlock_shared` takes no argument, so a CPU number
//! read at lock time could not be found again at unlock time. Instead every thread gets a
//! *thread index* on its first lock operation. The index lives in a thread-local that has no
//! destructor, so it is readable (and unchanged) until the thread is gone; read guards are
//! `!Send` (`GuardNoSend`), so a guard is released on the thread that took it.
//!
//! Indices are dense: a thread takes the smallest index an exited thread gave back, else a new
//! one, so the live threads hold the smallest indices. A thread whose index is below the slot
//! count *owns* slot `index`: no other live thread uses that index, so the slot's `owned`
//! counter has a single writer and needs no read-modify-write (the kernel's `this_cpu_inc`).
//! Threads with larger indices (more live threads than slots) share slot `index % slots`
//! through its `shared` counter, with atomic read-modify-writes.
//!
//! An index is given back at thread exit only when the thread holds no read guard on the
//! owner path (a guard may live on in a later thread-local destructor); from then on the
//! exiting thread itself uses the shared path. So two threads never use one `owned` counter.
//!
//! The slot count is fixed per lock: by default `4 × available_parallelism` rounded up to a
//! power of two (at least 4, at most 1024), chosen on first use; or exactly what
//! [`RawPerCpuRwLock::with_slots`] asks for. More slots means fewer threads on the shared path
//! and a longer walk for writers.
//!
//! # The protocol
//!
//! Each slot is one cache line holding `writer` (a flag), `owned` (readers of the owning
//! thread) and `shared` (readers of threads without a slot of their own). `light` and `heavy`
//! are rcukit's barrier pair ([`barrier`]): a compiler fence and
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` where the kernel has it, `fence(SeqCst)` on
//! both sides otherwise.
//!
//! ```text
//! lock_shared (owner):   n = owned; if n > 0 { owned = n + 1; done }      (nested)
//!                        R1 owned = 1; R2 light; R3 if writer { owned = 0; wait !writer; retry }
//! lock_shared (shared):  R1 shared.fetch_add(1); R2 light; R3 if writer { fetch_sub; wait; retry }
//! unlock_shared:         owned = n - 1 (Release) / shared.fetch_sub(1, Release)
//! lock_exclusive:        W1 for each slot in order: CAS writer false -> true (waits for writers)
//!                        W2 heavy
//!                        W3 for each slot: wait until owned == 0 and shared == 0 (Acquire)
//! unlock_exclusive:      for each slot: writer = false (Release)
//! ```
//!
//! # Why it is correct
//!
//! *Exclusion.* For a reader's R1-R3 and a writer's W1-W3 on the same slot, the barrier pair
//! orders R2 and W2 one way or the other (the store-buffering argument of
//! [`reader`](crate::reader)). If W2 comes first, R3 sees `writer` set and the reader backs
//! off before touching the data. If R2 comes first, W3 sees R1's count (or a later value), so
//! the writer waits until the reader's `Release` decrement, which then happens-before the
//! writer's critical section. Either way the two never overlap. Writers serialize on the
//! `writer` flags, taken in slot order (so two writers cannot deadlock).
//!
//! *Ordering.* The writer's `Release` clear of `writer` is read by a reader's wait (`Acquire`)
//! before its retry, and the reader's `Release` decrement by the writer's W3: each critical
//! section happens-before the next conflicting one.
//!
//! *Writers get in among busy readers.* Once `writer` is set, new readers of that slot back
//! off, so the counts can only fall; each reader section is finite.
//!
//! *Readers get in among busy writers.* A reader that backed off counts itself in the slot's
//! `waiting`; a writer yields (a bounded number of times) while any reader waits before it
//! takes the flags, so a writer that unlocks and locks again in a loop does not shut readers
//! out for good.
//!
//! *Cost.* An outermost read is a store, a compiler fence and a load, all on the reader's own
//! cache line, and the unlock is one store: no atomic read-modify-write, no fence instruction
//! (with membarrier). A writer pays one membarrier, a few microseconds: the asymmetry of the
//! kernel's `percpu_rw_semaphore`, whose readers skip the barrier unless a writer is pending.
//!
//! *Recursion.* A thread may take a read guard of a lock while it holds one of the same lock,
//! on either path, even while a writer waits: a nested read never looks at the writer flag,
//! since the outer read already keeps every writer out of its critical section (the writer
//! waits for the outer read's count anyway). On the owner path the slot's `owned` counter
//! shows the nesting (only this thread writes it). On the shared path the counter is shared, so
//! each thread keeps its own tally of the shared-path read guards it holds, per lock, in a
//! thread-local table (`SharedHolds`): a lookup among the few locks the thread holds right
//! now. Without that, a writer arriving between the two acquisitions would wait for the first
//! while the second waited for the writer, on the shared path only: code that passed its
//! tests on threads that own their slots would deadlock in production with more threads. A
//! write while holding a read guard of the same lock deadlocks, as with every reader-writer
//! lock.
//!
//! A writer waiting for readers spins, then yields, then sleeps in growing naps of at most one
//! millisecond. A reader waiting out a writer only spins and yields: writer sections are short,
//! and a sleeping reader would miss the gaps between back-to-back writers.

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
pub const MAX_SLOTS: usize = 1024;

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
pub fn default_slots() -> usize {
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
        Table {
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
impl RawPerCpuRwLock {
    /// This lock's key in the thread's tally of shared-path guards.
    fn key(&self) -> usize {
        self as *const RawPerCpuRwLock as usize
    }

    /// A read on the shared path by a thread that already holds a read guard of this lock:
    /// enter without looking at the writer flag (see *Recursion* in the module docs), tally it
    /// and return true; else return false, with nothing done.
    #[inline]
    fn nested_shared(&self, slot: usize) -> bool {
        let nested = threads::add_nested_shared(self.key());
        if nested {
            self.table().slots[slot].shared.fetch_add(1, Relaxed);
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
        if path == Path::Shared && self.nested_shared(slot) {
            return;
        }
        table.lock_shared(slot, path);
        note_guard(self.key(), path, 1);
    }

    #[inline]
    fn try_lock_shared(&self) -> bool {
        let table = self.table();
        let (slot, path) = table.my_slot();
        if path == Path::Shared && self.nested_shared(slot) {
            return true;
        }
        let ok = table.try_lock_shared(slot, path);
        if ok {
            note_guard(self.key(), path, 1);
        }
        ok
    }

    #[inline]
    unsafe fn unlock_shared(&self) {
        let table = self.table();
        let (slot, path) = table.my_slot();
        table.unlock_shared(slot, path);
        note_guard(self.key(), path, -1);
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
        let (slot, path) = self.table().my_slot();
        let s = &self.table().slots[slot];
        match path {
            Path::Owner => s.owned.store(s.owned.load(Relaxed) + 1, Relaxed),
            Path::Shared => {
                s.shared.fetch_add(1, Relaxed);
            }
        }
        note_guard(self.key(), path, 1);
        self.unlock_exclusive_slots(0..self.slot_count());
    }
}

/// A reader-writer lock with one reader lock per slot: readers touch only their thread's
/// slot, writers take every slot. See the [module documentation](self).
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
