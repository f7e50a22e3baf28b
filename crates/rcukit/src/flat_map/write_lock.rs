//! The map's writer lock: one writer at a time, this thread's mark of holding it (so that the
//! user's code that runs under it cannot take it again and deadlock), the tables the writes
//! under it unlinked, retired once it is let go, and its repair in a forked child.
//!
//! # After `fork()`
//!
//! A child has only the thread that forked. If another thread of the parent held the writer
//! lock at that moment (a write takes it for its whole length, the user's `Hash`, `Eq` and
//! closures included, and a rebuild copies the whole table under it), the child's copy of the
//! lock stays held forever, and the child's first write would wait for a thread it does not
//! have. So the lock records the fork generation its holders belong to, and the thread that
//! holds it (the address of a thread-local byte, from
//! [`sync::fork`](crate::docs::internal::sync::fork), stored after the mutex is taken and
//! cleared before it is let go). The first write (or self-read) of the
//! map in a child sees a generation that is not the process's and repairs the lock, once,
//! while every other thread of the child that writes waits for it:
//!
//! * If the mutex is free, or held by the thread that forked (which may fork from code that a
//!   write runs under the lock, and will let it go), nothing is repaired. (Unless the fork
//!   interrupted a repair of the parent's, itself a forked child: the mutex may be half
//!   written, and is replaced as below, with a floor that is not a power of two no larger than
//!   the table taken as the table's size.)
//! * Otherwise its holder is a thread the child does not have, which may have stopped at any
//!   point of a write. The child puts a new mutex in its place and takes the writer's counts
//!   again from the current table's control words (entries, and slots used), as a write that
//!   stopped halfway may have published its entry without counting it, or counted a table not
//!   yet published. A write changes what readers see only by single stores of control words,
//!   and one change takes two: a replacement whose new slot is in another word than the old
//!   one. The table records such a replacement while it is between its stores, and the repair
//!   finishes it (`Table::finish_replace`), so a key never has two entries. A table that the
//!   vanished writer was filling and had not published is never seen and stays allocated, and
//!   the tables it had unlinked but not yet retired stay too: the child's copies of memory
//!   the parent frees.
//!
//! The check costs a write two loads of words that stay in the cache (the map's generation and
//! the process's); the holder's record, one store after taking the mutex and one before letting
//! it go.

use super::table::usable;
use super::{RcuFlatMap, Table};
use crate::domain_ref::AnyDomainRef;
use crate::sync::fork;
use crate::sync::Mutex;
use std::cell::{Cell, RefCell, UnsafeCell};
use std::mem::ManuallyDrop;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU64, AtomicUsize};

/// The writer's mutex, and what a forked child needs to take it over (see "After `fork()`").
pub(super) struct WriterLock {
    /// In a cell so that a forked child can put a new mutex in its place.
    mutex: UnsafeCell<Mutex<Writer>>,
    /// The fork generation whose threads may hold the mutex, with [`REPAIRING`] while a
    /// child's thread repairs it.
    generation: AtomicU64,
    /// The thread that holds the mutex, as its [`thread_address`](fork::thread_address) (0:
    /// nobody, or the moments between taking the mutex and recording it, and between clearing
    /// it and letting the mutex go).
    holder: AtomicUsize,
}

/// Set in [`WriterLock::generation`] while a thread of a forked child repairs the lock.
const REPAIRING: u64 = 1 << 63;

// SAFETY: the mutex is shared as any mutex is; the cell is written only by the repair, while no
// other thread of the process can reach the mutex (see `RcuFlatMap::repair_after_fork`).
unsafe impl Sync for WriterLock {}

impl WriterLock {
    pub(super) fn new(writer: Writer) -> WriterLock {
        WriterLock {
            mutex: UnsafeCell::new(Mutex::new(writer)),
            generation: AtomicU64::new(fork::generation()),
            holder: AtomicUsize::new(0),
        }
    }

    fn mutex(&self) -> &Mutex<Writer> {
        // SAFETY: the cell is replaced only while no thread borrows the mutex (see the `Sync`
        // impl).
        unsafe { &*self.mutex.get() }
    }
}

/// The writer's own counts, for the current table.
pub(super) struct Writer {
    /// `EMPTY` slots the table may still give before it is full (seven in eight slots full
    /// or tombstones).
    pub(super) room: usize,
    /// The table never shrinks below this many groups.
    pub(super) min_groups: usize,
    /// A removal that leaves fewer entries than this rebuilds the table smaller (one-eighth
    /// of the table's usable slots; 0 at `min_groups`). Set with each new table, so that a
    /// removal checks it with one comparison.
    pub(super) sparse_below: usize,
}

impl Writer {
    /// The counts for a table of `groups` groups of which `used` slots are not `EMPTY`, in a
    /// map that never shrinks below `min_groups` groups.
    pub(super) fn for_table(groups: usize, min_groups: usize, used: usize) -> Writer {
        Writer {
            room: usable(groups).saturating_sub(used),
            min_groups,
            sparse_below: if groups > min_groups {
                usable(groups) / 8
            } else {
                0
            },
        }
    }
}

thread_local! {
    /// The map whose writer lock this thread took last and holds, if any (to refuse re-entry).
    static WRITING: Cell<usize> = const { Cell::new(0) };
    /// The other maps whose writer locks this thread holds, the one taken first first: the
    /// user's code that a write runs may write another map, and that map's user code may
    /// come back to the first. Only such nested writes push here.
    static OUTER: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

impl<K: Copy + Send + 'static, V: Copy + Send + 'static, S, D: AnyDomainRef>
    RcuFlatMap<K, V, S, D>
{
    /// Does this thread hold the writer lock (it runs the user's code under it, perhaps that
    /// of a write to another map inside)? Never under loom, where every model thread is one OS
    /// thread.
    #[inline(always)]
    pub(super) fn locked_here(&self) -> bool {
        let me = self as *const Self as usize;
        let last = WRITING.with(Cell::get);
        !cfg!(rcukit_loom) && (last == me || (last != 0 && held_outside(me)))
    }

    /// The writer lock, refusing re-entry from the user's code that runs under it. Inlined,
    /// with its drop: a write's lock and unlock in a function of their own (the lock handed
    /// back through memory) made a one-thread loop of removes in a table of a million entries
    /// take about 1.2 times as long.
    #[track_caller]
    #[inline(always)]
    pub(super) fn lock(&self) -> WriteLock<'_, K, V, S, D> {
        // Under loom every model thread is one OS thread: the mark would see the others.
        let me = if cfg!(rcukit_loom) {
            0
        } else {
            self as *const Self as usize
        };
        if self.locked_here() {
            reentered();
        }
        if self.writer.generation.load(Acquire) != fork::generation() {
            self.repair_after_fork();
        }
        let guard = self.writer.mutex().lock();
        self.writer.holder.store(fork::thread_address(), Relaxed);
        let outer = WRITING.with(|w| w.replace(me));
        if outer != 0 {
            nest(outer);
        }
        WriteLock {
            map: self,
            writer: ManuallyDrop::new(guard),
            outer,
            unlinked: ManuallyDrop::new(Vec::new()),
        }
    }
}

impl<K: Copy + Send + 'static, V: Copy + Send + 'static, S, D: AnyDomainRef>
    RcuFlatMap<K, V, S, D>
{
    /// The first write in a forked child: repair the writer lock if a thread the child does
    /// not have holds it, or wait while another thread of the child repairs it (see "After
    /// `fork()`").
    #[cold]
    #[inline(never)]
    fn repair_after_fork(&self) {
        let lock = &self.writer;
        loop {
            let now = fork::generation();
            let seen = lock.generation.load(Acquire);
            if seen == now {
                return;
            }
            if seen == now | REPAIRING {
                std::thread::yield_now();
                continue;
            }
            // A generation of an earlier process, or a repair that a thread of an earlier
            // process left halfway (that thread is gone too): this thread repairs.
            if lock
                .generation
                .compare_exchange(seen, now | REPAIRING, Acquire, Relaxed)
                .is_err()
            {
                continue;
            }
            // A repair the fork interrupted may have left the mutex half written: replace it.
            let interrupted = seen & REPAIRING != 0;
            let holder = lock.holder.load(Relaxed);
            let vanished = interrupted
                || match lock.mutex().try_lock() {
                    Some(free) => {
                        drop(free);
                        false
                    }
                    None => !fork::is_survivor_address(holder),
                };
            if vanished {
                // SAFETY: every other thread of the child that writes waits for `REPAIRING`
                // to clear, and no thread of the child borrows the mutex: its holder is gone.
                unsafe { self.take_over_writer() };
            }
            lock.generation.store(now, Release);
            return;
        }
    }

    /// Put a new mutex in place of the one a vanished thread holds, with the writer's counts
    /// taken again from the current table.
    ///
    /// # Safety
    ///
    /// No other thread borrows the mutex or writes the map while this runs.
    unsafe fn take_over_writer(&self) {
        // SAFETY: no other thread borrows the mutex (caller's contract).
        let abandoned = unsafe { &mut *self.writer.mutex.get() };
        // SAFETY: the root is alive (the map is), and only this thread writes it.
        let table = unsafe { &*self.root.load(Acquire) };
        // A table never has fewer groups than the floor, which is a power of two; a floor that
        // is neither (a repair interrupted while it wrote the counts) becomes the table's size.
        let min_groups = Some(abandoned.get_mut().min_groups)
            .filter(|&floor| floor.is_power_of_two() && floor <= table.groups())
            .unwrap_or(table.groups());
        table.finish_replace();
        let (full, used) = table.count_slots();
        self.len.store(full, Relaxed);
        let writer = Writer::for_table(table.groups(), min_groups, used);
        // SAFETY: as above. The abandoned mutex is overwritten as it is, without a drop: its
        // guard is on the stack of a thread that does not exist here.
        unsafe { std::ptr::write(abandoned, Mutex::new(writer)) };
        self.writer.holder.store(0, Relaxed);
    }
}

/// Is `map`'s writer lock held by this thread, other than the one it took last?
#[cold]
#[inline(never)]
fn held_outside(map: usize) -> bool {
    // Gone only while the thread's locals are destroyed: nothing is known there, as before a
    // nested write pushed anything.
    OUTER
        .try_with(|outer| outer.borrow().contains(&map))
        .unwrap_or(false)
}

/// Note that this thread holds `map`'s writer lock under a newer one.
#[cold]
#[inline(never)]
fn nest(map: usize) {
    let _ = OUTER.try_with(|outer| outer.borrow_mut().push(map));
}

/// The writer lock taken after `map`'s was let go: `map`'s is the last one held again.
#[cold]
#[inline(never)]
fn unnest(map: usize) {
    let _ = OUTER.try_with(|outer| {
        let mut outer = outer.borrow_mut();
        if outer.last() == Some(&map) {
            outer.pop();
        }
    });
}

#[cold]
#[inline(never)]
#[track_caller]
fn reentered() -> ! {
    panic!(
        "rcukit: RcuFlatMap written or iterated from code the map runs under its writer lock \
         (the key's Hash or Eq, or a closure given to a write): that would deadlock (lookups \
         are fine there)"
    );
}

/// The writer lock, this thread's mark of holding it, and the tables the writes under it
/// unlinked: retired once the lock is let go (retiring may run other objects' drops, which
/// must not run under a lock of the map's), also when a write unwinds.
pub(super) struct WriteLock<'m, K, V, S, D>
where
    K: Copy + Send + 'static,
    V: Copy + Send + 'static,
    D: AnyDomainRef,
{
    map: &'m RcuFlatMap<K, V, S, D>,
    writer: ManuallyDrop<crate::sync::MutexGuard<'m, Writer>>,
    outer: usize,
    pub(super) unlinked: ManuallyDrop<Vec<*mut Table<K, V>>>,
}

impl<K: Copy + Send + 'static, V: Copy + Send + 'static, S, D: AnyDomainRef> Drop
    for WriteLock<'_, K, V, S, D>
{
    #[inline(always)]
    fn drop(&mut self) {
        WRITING.with(|w| w.set(self.outer));
        if self.outer != 0 {
            unnest(self.outer);
        }
        self.map.writer.holder.store(0, Relaxed);
        // SAFETY: dropped once, here.
        unsafe { ManuallyDrop::drop(&mut self.writer) };
        // A vector never pushed to holds no memory: nothing to retire or free.
        if self.unlinked.capacity() != 0 {
            self.retire_unlinked();
        }
    }
}

impl<K: Copy + Send + 'static, V: Copy + Send + 'static, S, D: AnyDomainRef>
    WriteLock<'_, K, V, S, D>
{
    /// Retire the tables the writes unlinked (after the lock was let go), and free their
    /// vector; out of line, as only a rebuild unlinks one.
    #[cold]
    #[inline(never)]
    fn retire_unlinked(&mut self) {
        // SAFETY: taken once, here, from the lock being dropped.
        let unlinked = unsafe { ManuallyDrop::take(&mut self.unlinked) };
        for old in unlinked {
            // SAFETY: `old` stopped being the root under the lock and is retired once, here;
            // dropping it frees its arrays and drops no entry (entries are bit copies, and a
            // table is never the sole owner of anything).
            unsafe {
                let bytes = (*old).bytes();
                crate::domain_ref::protector(&self.map.domain).retire_raw_sized(old, bytes);
            }
        }
    }
}

impl<K: Copy + Send + 'static, V: Copy + Send + 'static, S, D: AnyDomainRef> std::ops::Deref
    for WriteLock<'_, K, V, S, D>
{
    type Target = Writer;
    fn deref(&self) -> &Writer {
        &self.writer
    }
}

impl<K: Copy + Send + 'static, V: Copy + Send + 'static, S, D: AnyDomainRef> std::ops::DerefMut
    for WriteLock<'_, K, V, S, D>
{
    fn deref_mut(&mut self) -> &mut Writer {
        &mut self.writer
    }
}
