//! [`PerCpuRwLock<T>`]: a reader-writer lock with one reader lock per slot, after the per-CPU
//! locks Eric Dumazet gave ip_tables in 2005 (seed 002).
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
//! A central reader-writer lock costs every reader an atomic read-modify-write on *one* cache
//! line, which then bounces between every CPU that reads: with two readers the lock word
//! ping-pongs on every acquisition and release, and that transfer, not the atomic itself,
//! dominates (seed 002: "the cache line containing rwlock still must be taken exclusively by
//! each CPU"). Here each slot has its own cache-line-padded lock word. A reader uses only its
//! thread's slot, so readers on different slots never share a line; a writer, which is rare,
//! takes every slot in turn.
//!
//! # Slots and threads
//!
//! The kernel indexes by CPU with preemption disabled. A user thread can migrate between
//! `lock` and `unlock`, and `lock_api`'s `unlock_shared` takes no argument, so a CPU number
//! read at lock time could not be found again at unlock time. Instead every thread gets a
//! *thread index* on its first lock operation and uses slot `index % slots`. The index lives
//! in a thread-local that never changes for the thread's lifetime and has no destructor, so it
//! is readable even while the thread exits; read guards are `!Send` (`GuardNoSend`), so a
//! guard is released on the thread that took it, on the same slot.
//!
//! Indices are dense: a thread takes the smallest index an exited thread gave back (a second,
//! destructor-carrying thread-local returns it at thread exit), else a new one. So the live
//! threads hold the smallest indices, and up to `slots` live threads have a slot each, however
//! many threads came and went before. Threads that share a slot share its lock word: still
//! correct, only contended. (A thread whose index was given back while one of its guards is
//! still alive in a later thread-local destructor shares its slot with the next thread that
//! takes the index, which is again merely sharing.)
//!
//! The slot count is fixed per lock: by default `4 × available_parallelism` rounded up to a
//! power of two (at least 4, at most 1024), chosen on first use; or exactly what
//! [`RawPerCpuRwLock::with_slots`] asks for. More slots means fewer collisions between reader
//! threads and a longer walk for writers.
//!
//! # The slot word
//!
//! ```text
//! bit WRITER       a writer owns this slot
//! bits below it    number of readers inside (or trying to get in) on this slot
//!
//! lock_shared:     s = slot.fetch_add(1, Acquire)
//!                  if s has WRITER: slot.fetch_sub(1); wait until WRITER is clear; retry
//! unlock_shared:   slot.fetch_sub(1, Release)
//! lock_exclusive:  for each slot in index order:
//!                      set WRITER with a CAS from a value without it (Acquire), waiting
//!                      while another writer holds it
//!                      wait until the reader count is 0 (Acquire)
//! unlock_exclusive: for each slot: slot.fetch_sub(WRITER, Release)
//! ```
//!
//! # Why it is correct
//!
//! *Exclusion.* All read-modify-writes of one slot word are totally ordered. A reader's
//! `fetch_add` either comes before the writer's CAS, and then the writer sees its count and
//! waits for its `fetch_sub`, or after it, and then the reader sees `WRITER`, undoes its
//! increment and waits. A writer returns from `lock_exclusive` holding `WRITER` on every slot
//! with every count at zero, so no reader on any slot is inside, and none can enter until
//! `unlock_exclusive`. Two writers serialize on slot 0 (and, taking slots in the same order,
//! cannot deadlock).
//!
//! *Ordering.* The reader's `Release` decrement is read by the writer's `Acquire` wait; the
//! writer's `Release` unlock is read by the next reader's `Acquire` increment, or by the next
//! writer's `Acquire` CAS. Each critical section therefore happens-before the next conflicting
//! one.
//!
//! *Writers get in among busy readers.* Once a writer has set `WRITER` on a slot, new readers
//! of that slot wait, so the slot's count can only fall; each reader section is finite, so
//! the writer gets every slot in turn, however many readers keep arriving. Readers never
//! starve for long either: a writer holds the slots only for its own critical section.
//!
//! *Recursion.* Like `parking_lot::RwLock`, a thread must not take the read lock again while it
//! holds it: a writer waiting between the two acquisitions would wait for the first while the
//! second waits for the writer. (`lock_api`'s `read_recursive` is not offered for this
//! reason.)
//!
//! Waiting spins, then yields, then sleeps in growing naps of at most one millisecond.

use crate::error::Error;
use crate::sync::{AtomicUsize, Backoff};
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// A slot's lock word is owned by a writer.
const WRITER: usize = 1 << (usize::BITS - 1);
/// Most slots a lock may have.
pub const MAX_SLOTS: usize = 1024;

type Slot = CachePadded<AtomicUsize>;

thread_local! {
    /// This thread's index, `usize::MAX` until its first lock operation. No destructor, so it
    /// stays readable (and unchanged) until the thread is gone.
    static THREAD_INDEX: Cell<usize> = const { Cell::new(usize::MAX) };
    /// Returns the thread's index to the free list when thread-local storage is torn down.
    static INDEX_RELEASER: IndexReleaser = const { IndexReleaser };
}

/// Indices of exited threads, handed out again smallest first, so that the live threads hold
/// the smallest indices and, up to the slot count, distinct slots.
static FREE_INDICES: parking_lot::Mutex<Vec<usize>> = parking_lot::Mutex::new(Vec::new());
static NEXT_THREAD_INDEX: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

struct IndexReleaser;

impl Drop for IndexReleaser {
    fn drop(&mut self) {
        // The thread keeps using its index until it is gone (a guard may still be released
        // by a later destructor): a new thread that gets it shares the slot, which is correct.
        let index = THREAD_INDEX.with(Cell::get);
        if index != usize::MAX {
            FREE_INDICES.lock().push(index);
        }
    }
}

#[cfg_attr(loom, allow(dead_code))]
#[inline]
fn thread_index() -> usize {
    let index = THREAD_INDEX.with(Cell::get);
    if index != usize::MAX {
        index
    } else {
        assign_thread_index()
    }
}

#[cold]
#[cfg_attr(loom, allow(dead_code))]
fn assign_thread_index() -> usize {
    // Only recycle an index if this thread can give it back at exit.
    let recycled = INDEX_RELEASER.try_with(|_| ()).ok().and_then(|()| {
        let mut free = FREE_INDICES.lock();
        let (at, _) = free.iter().enumerate().min_by_key(|&(_, &i)| i)?;
        Some(free.swap_remove(at))
    });
    let index =
        recycled.unwrap_or_else(|| NEXT_THREAD_INDEX.fetch_add(1, Relaxed) & (usize::MAX >> 1));
    THREAD_INDEX.with(|cell| cell.set(index));
    index
}

/// The default slot count: `4 × available_parallelism`, a power of two in `4..=MAX_SLOTS`.
pub fn default_slots() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cpus.saturating_mul(4))
        .next_power_of_two()
        .clamp(4, MAX_SLOTS)
}

fn new_slots(n: usize) -> Box<[Slot]> {
    (0..n)
        .map(|_| CachePadded::new(AtomicUsize::new(0)))
        .collect()
}

/// The raw per-slot reader-writer lock; use it through [`PerCpuRwLock`].
pub struct RawPerCpuRwLock {
    #[cfg(not(loom))]
    slots: std::sync::OnceLock<Box<[Slot]>>,
    #[cfg(loom)]
    slots: Box<[Slot]>,
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
        let table = new_slots(slots.next_power_of_two());
        #[cfg(not(loom))]
        {
            let cell = std::sync::OnceLock::new();
            let _ = cell.set(table);
            Ok(RawPerCpuRwLock { slots: cell })
        }
        #[cfg(loom)]
        {
            Ok(RawPerCpuRwLock { slots: table })
        }
    }

    #[inline]
    fn slots(&self) -> &[Slot] {
        #[cfg(not(loom))]
        {
            self.slots.get_or_init(|| new_slots(default_slots()))
        }
        #[cfg(loom)]
        {
            &self.slots
        }
    }

    /// Number of slots (allocating them if this is the first use).
    pub fn slot_count(&self) -> usize {
        self.slots().len()
    }

    /// The slot the calling thread reads through.
    #[cfg_attr(loom, allow(dead_code))]
    #[inline]
    fn my_slot(&self) -> usize {
        let slots = self.slots().len();
        thread_index() & (slots - 1)
    }

    #[inline]
    pub(crate) fn lock_shared_on(&self, slot: usize) {
        let word = &self.slots()[slot];
        loop {
            let s = word.fetch_add(1, Acquire);
            if s & WRITER == 0 {
                return;
            }
            word.fetch_sub(1, Relaxed);
            let mut backoff = Backoff::new();
            while word.load(Relaxed) & WRITER != 0 {
                backoff.snooze();
            }
        }
    }

    #[cfg_attr(loom, allow(dead_code))]
    #[inline]
    pub(crate) fn try_lock_shared_on(&self, slot: usize) -> bool {
        let word = &self.slots()[slot];
        let s = word.fetch_add(1, Acquire);
        if s & WRITER == 0 {
            return true;
        }
        word.fetch_sub(1, Relaxed);
        false
    }

    #[inline]
    pub(crate) fn unlock_shared_on(&self, slot: usize) {
        let prev = self.slots()[slot].fetch_sub(1, Release);
        debug_assert!(prev & !WRITER != 0, "unlock_shared without a reader");
    }

    /// Take `WRITER` on one slot (waiting for other writers), then wait for its readers.
    fn lock_slot_exclusive(word: &AtomicUsize) {
        let mut backoff = Backoff::new();
        let mut s = word.load(Relaxed);
        loop {
            if s & WRITER != 0 {
                backoff.snooze();
                s = word.load(Relaxed);
                continue;
            }
            match word.compare_exchange_weak(s, s | WRITER, Acquire, Relaxed) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        let mut backoff = Backoff::new();
        while word.load(Acquire) & !WRITER != 0 {
            backoff.snooze();
        }
    }

    pub(crate) fn lock_exclusive_slots(&self, slots: impl Iterator<Item = usize>) {
        let table = self.slots();
        for i in slots {
            Self::lock_slot_exclusive(&table[i]);
        }
    }

    pub(crate) fn unlock_exclusive_slots(&self, slots: impl Iterator<Item = usize>) {
        let table = self.slots();
        for i in slots {
            let prev = table[i].fetch_sub(WRITER, Release);
            debug_assert!(prev & WRITER != 0, "unlock_exclusive without the lock");
        }
    }
}

impl Default for RawPerCpuRwLock {
    fn default() -> Self {
        #[cfg(not(loom))]
        {
            RawPerCpuRwLock {
                slots: std::sync::OnceLock::new(),
            }
        }
        #[cfg(loom)]
        {
            RawPerCpuRwLock {
                slots: new_slots(2),
            }
        }
    }
}

impl std::fmt::Debug for RawPerCpuRwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawPerCpuRwLock")
            .field("slots", &self.slot_count())
            .finish()
    }
}

#[cfg(not(loom))]
// SAFETY: exclusive holders hold WRITER on every slot with no reader inside (module docs); the
// guards are `GuardNoSend`, so `unlock_shared` runs on the locking thread, on the same slot.
unsafe impl lock_api::RawRwLock for RawPerCpuRwLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: RawPerCpuRwLock = RawPerCpuRwLock {
        slots: std::sync::OnceLock::new(),
    };

    type GuardMarker = lock_api::GuardNoSend;

    #[inline]
    fn lock_shared(&self) {
        self.lock_shared_on(self.my_slot());
    }

    #[inline]
    fn try_lock_shared(&self) -> bool {
        self.try_lock_shared_on(self.my_slot())
    }

    #[inline]
    unsafe fn unlock_shared(&self) {
        self.unlock_shared_on(self.my_slot());
    }

    fn lock_exclusive(&self) {
        self.lock_exclusive_slots(0..self.slot_count());
    }

    fn try_lock_exclusive(&self) -> bool {
        let table = self.slots();
        for (i, word) in table.iter().enumerate() {
            if word.compare_exchange(0, WRITER, Acquire, Relaxed).is_err() {
                self.unlock_exclusive_slots(0..i);
                return false;
            }
        }
        true
    }

    unsafe fn unlock_exclusive(&self) {
        self.unlock_exclusive_slots(0..self.slot_count());
    }

    fn is_locked(&self) -> bool {
        self.slots().iter().any(|word| word.load(Relaxed) != 0)
    }

    fn is_locked_exclusive(&self) -> bool {
        self.slots()
            .first()
            .is_some_and(|word| word.load(Relaxed) & WRITER != 0)
    }
}

#[cfg(not(loom))]
// SAFETY: the writer joins its own slot as a reader before it releases WRITER anywhere, so no
// writer slips in between; the read guard is released on that same slot.
unsafe impl lock_api::RawRwLockDowngrade for RawPerCpuRwLock {
    unsafe fn downgrade(&self) {
        self.slots()[self.my_slot()].fetch_add(1, Relaxed);
        self.unlock_exclusive_slots(0..self.slot_count());
    }
}

/// A reader-writer lock with one reader lock per slot: readers touch only their thread's
/// slot, writers take every slot. See the [module documentation](self).
///
/// This is `lock_api::RwLock`, so it has the usual guards, `read`, `write`, `try_read`,
/// `try_write`, `get_mut`, `into_inner` and (through
/// [`RwLockWriteGuard::downgrade`](lock_api::RwLockWriteGuard::downgrade)) downgrading.
#[cfg(not(loom))]
pub type PerCpuRwLock<T> = lock_api::RwLock<RawPerCpuRwLock, T>;

/// Read guard of a [`PerCpuRwLock`] (`!Send`).
#[cfg(not(loom))]
pub type PerCpuRwLockReadGuard<'a, T> = lock_api::RwLockReadGuard<'a, RawPerCpuRwLock, T>;

/// Write guard of a [`PerCpuRwLock`] (`!Send`).
#[cfg(not(loom))]
pub type PerCpuRwLockWriteGuard<'a, T> = lock_api::RwLockWriteGuard<'a, RawPerCpuRwLock, T>;
