//! The map's writer lock: one writer at a time, this thread's mark of holding it (so that the
//! user's code that runs under it cannot take it again and deadlock), and the tables the
//! writes under it unlinked, retired once it is let go.

use super::{RcuFlatMap, Table};
use crate::domain_ref::DomainRef;
use std::cell::Cell;
use std::mem::ManuallyDrop;

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

thread_local! {
    /// The map whose writer lock this thread holds, if any (to refuse re-entry).
    static WRITING: Cell<usize> = const { Cell::new(0) };
}

impl<K: Copy + Send + 'static, V: Copy + Send + 'static, S, D: DomainRef> RcuFlatMap<K, V, S, D> {
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
        if me != 0 && WRITING.with(Cell::get) == me {
            reentered();
        }
        let guard = self.writer.lock();
        let outer = WRITING.with(|w| w.replace(me));
        WriteLock {
            map: self,
            writer: ManuallyDrop::new(guard),
            outer,
            unlinked: ManuallyDrop::new(Vec::new()),
        }
    }
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
    D: DomainRef,
{
    map: &'m RcuFlatMap<K, V, S, D>,
    writer: ManuallyDrop<crate::sync::MutexGuard<'m, Writer>>,
    outer: usize,
    pub(super) unlinked: ManuallyDrop<Vec<*mut Table<K, V>>>,
}

impl<K: Copy + Send + 'static, V: Copy + Send + 'static, S, D: DomainRef> Drop
    for WriteLock<'_, K, V, S, D>
{
    #[inline(always)]
    fn drop(&mut self) {
        WRITING.with(|w| w.set(self.outer));
        // SAFETY: dropped once, here.
        unsafe { ManuallyDrop::drop(&mut self.writer) };
        // A vector never pushed to holds no memory: nothing to retire or free.
        if self.unlinked.capacity() != 0 {
            self.retire_unlinked();
        }
    }
}

impl<K: Copy + Send + 'static, V: Copy + Send + 'static, S, D: DomainRef>
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
                self.map.domain.rcu().retire_raw_sized(old, bytes);
            }
        }
    }
}

impl<K: Copy + Send + 'static, V: Copy + Send + 'static, S, D: DomainRef> std::ops::Deref
    for WriteLock<'_, K, V, S, D>
{
    type Target = Writer;
    fn deref(&self) -> &Writer {
        &self.writer
    }
}

impl<K: Copy + Send + 'static, V: Copy + Send + 'static, S, D: DomainRef> std::ops::DerefMut
    for WriteLock<'_, K, V, S, D>
{
    fn deref_mut(&mut self) -> &mut Writer {
        &mut self.writer
    }
}
