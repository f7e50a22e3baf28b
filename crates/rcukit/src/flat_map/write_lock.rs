//! The map's writer lock: one writer at a time, this thread's mark of holding it (so that the
//! user's code that runs under it cannot take it again and deadlock), the tables the writes
//! under it unlinked, retired once it is let go, and its repair in a forked child.
//!
//! # After `fork()`
//!
//! The lock is a [`ForkLock`](crate::docs::internal::sync::fork_lock): a child forked while a
//! thread of its parent held it (a write holds it for its whole length, the user's `Hash`, `Eq`
//! and closures included, and a rebuild copies the whole table under it) takes it over at its
//! first write or self-read. That thread may have stopped at any point of a write, so the
//! writer's counts are taken again from the current table's control words (entries, and slots
//! used): a write that stopped halfway may have published its entry without counting it, or
//! counted a table not yet published. A write changes what readers see only by single stores of
//! control words, and one change takes two: a replacement whose new slot is in another word
//! than the old one. The table records such a replacement while it is between its stores, and
//! the takeover finishes it (`Table::finish_replace`), so a key never has two entries. A table
//! that the vanished writer was filling and had not published is never seen and stays
//! allocated, and the tables it had unlinked but not yet retired stay too: the child's copies
//! of memory the parent frees.

use super::table::usable;
use super::{RcuFlatMap, Table};
use crate::domain_ref::AnyDomainRef;
use crate::sync::fork_lock::{ForkLock, ForkLockGuard};
use crate::sync::AtomicUsize;
use std::cell::{Cell, RefCell};
use std::mem::ManuallyDrop;
use std::sync::atomic::Ordering::{Acquire, Relaxed};

/// The map's writer lock.
pub(super) type WriterLock = ForkLock<Writer>;

/// What every write changes: the entry count (changed under the lock) and the lock. The map
/// keeps them together, on lines of their own, apart from what lookups read.
pub(super) struct Written {
    /// Entries in the map.
    pub(super) len: AtomicUsize,
    pub(super) writer: WriterLock,
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
        let mut writer = Writer {
            room: usable(groups).saturating_sub(used),
            min_groups,
            sparse_below: 0,
        };
        writer.set_floor(groups, min_groups);
        writer
    }

    /// Never shrink below `min_groups` groups, for a table of `groups` groups.
    pub(super) fn set_floor(&mut self, groups: usize, min_groups: usize) {
        self.min_groups = min_groups;
        self.sparse_below = if groups > min_groups {
            usable(groups) / 8
        } else {
            0
        };
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

impl<K: Clone + Send + 'static, V: Clone + Send + 'static, S, D: AnyDomainRef>
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

    /// `given` (what a write was given of the caller's: a key, values, closures) back, or, on
    /// re-entry from the user's code that runs under the writer lock, `given` dropped and then
    /// the panic that [`lock`](Self::lock) would raise. Dropped by that panic's unwinding
    /// instead, a `Drop` in `given` that writes this map would be refused in turn while a panic
    /// unwinds, which aborts the process. Call before [`lock_checked`](Self::lock_checked).
    #[track_caller]
    #[inline(always)]
    pub(super) fn refuse_reentry<X>(&self, given: X) -> X {
        if self.locked_here() {
            drop(given);
            reentered();
        }
        given
    }

    /// The writer lock, refusing re-entry from the user's code that runs under it. Inlined,
    /// with its drop: a write's lock and unlock in a function of their own (the lock handed
    /// back through memory) made a one-thread loop of removes in a table of a million entries
    /// take about 1.2 times as long.
    #[track_caller]
    #[inline(always)]
    pub(super) fn lock(&self) -> WriteLock<'_, K, V, S, D> {
        if self.locked_here() {
            reentered();
        }
        self.lock_checked()
    }

    /// The writer lock, for a write that asked [`refuse_reentry`](Self::refuse_reentry) first
    /// (the answer stays the same until this thread takes the lock: code that runs in between,
    /// such as the key's `Hash`, cannot keep the lock when it returns).
    #[inline(always)]
    pub(super) fn lock_checked(&self) -> WriteLock<'_, K, V, S, D> {
        // Under loom every model thread is one OS thread: the mark would see the others.
        let me = if cfg!(rcukit_loom) {
            0
        } else {
            self as *const Self as usize
        };
        let guard = self
            .written
            .writer
            .lock(|left| self.writer_after_fork(left));
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

impl<K: Clone + Send + 'static, V: Clone + Send + 'static, S, D: AnyDomainRef>
    RcuFlatMap<K, V, S, D>
{
    /// The writer's counts in a forked child that took the lock over from a thread it does not
    /// have (`left`: what that thread left, or `None` if the fork interrupted a takeover and
    /// it may be half written; see "After `fork()`"), taken again from the current table.
    #[cold]
    #[inline(never)]
    fn writer_after_fork(&self, left: Option<Writer>) -> Writer {
        // SAFETY: the root is alive (the map is), and only this thread writes it: the other
        // threads of the child wait for the takeover.
        let table = unsafe { &*self.root.load(Acquire) };
        table.finish_replace();
        let (full, used) = table.count_slots();
        self.written.len.store(full, Relaxed);
        // A table never has fewer groups than the floor, which is a power of two.
        let min_groups = left
            .map(|w| w.min_groups)
            .filter(|&floor| floor.is_power_of_two() && floor <= table.groups())
            .unwrap_or(table.groups());
        Writer::for_table(table.groups(), min_groups, used)
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
    K: Clone + Send + 'static,
    V: Clone + Send + 'static,
    D: AnyDomainRef,
{
    map: &'m RcuFlatMap<K, V, S, D>,
    writer: ManuallyDrop<ForkLockGuard<'m, Writer>>,
    outer: usize,
    pub(super) unlinked: ManuallyDrop<Vec<*mut Table<K, V>>>,
}

impl<K: Clone + Send + 'static, V: Clone + Send + 'static, S, D: AnyDomainRef> Drop
    for WriteLock<'_, K, V, S, D>
{
    #[inline(always)]
    fn drop(&mut self) {
        WRITING.with(|w| w.set(self.outer));
        if self.outer != 0 {
            unnest(self.outer);
        }
        // SAFETY: dropped once, here.
        unsafe { ManuallyDrop::drop(&mut self.writer) };
        // A vector never pushed to holds no memory: nothing to retire or free.
        if self.unlinked.capacity() != 0 {
            self.retire_unlinked();
        }
    }
}

impl<K: Clone + Send + 'static, V: Clone + Send + 'static, S, D: AnyDomainRef>
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
            if self.map.busted {
                // SAFETY: the knob's contract (readers may see the dropped entries); `old` is
                // no longer the root and only this thread drops its entries, once (the table
                // then skips them when it is freed).
                unsafe { (*old).busted_drop_entries_now() };
            }
            // SAFETY: `old` stopped being the root under the lock and is retired once, here:
            // dropped (its entries with it) after a grace period that began after no reader
            // could find it any more.
            unsafe {
                let bytes = (*old).bytes();
                crate::domain_ref::protector(&self.map.domain).retire_raw_sized(old, bytes);
            }
        }
    }
}

impl<K: Clone + Send + 'static, V: Clone + Send + 'static, S, D: AnyDomainRef> std::ops::Deref
    for WriteLock<'_, K, V, S, D>
{
    type Target = Writer;
    fn deref(&self) -> &Writer {
        &self.writer
    }
}

impl<K: Clone + Send + 'static, V: Clone + Send + 'static, S, D: AnyDomainRef> std::ops::DerefMut
    for WriteLock<'_, K, V, S, D>
{
    fn deref_mut(&mut self) -> &mut Writer {
        &mut self.writer
    }
}

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use crate::flat_map::RcuFlatMap;
    use crate::sync::{on_lines_apart, span_of};

    #[test]
    fn what_writes_change_shares_no_cache_line_with_what_lookups_read() {
        type M = RcuFlatMap<u64, u64>;
        for read in [span_of!(M, root), span_of!(M, hasher), span_of!(M, domain)] {
            assert!(on_lines_apart::<M>(span_of!(M, written), read));
        }
    }
}
