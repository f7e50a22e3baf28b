#![doc = include_str!("list.md")]

use crate::domain_ref::{self, DomainRef};
use crate::sync::fork_lock::{ForkLock, ForkLockGuard};
#[cfg(doc)]
use crate::Guard;
use crate::{Rcu, ReadSection};
use crossbeam_utils::CachePadded;
use std::fmt;
use std::iter::FusedIterator;
use std::marker::PhantomData;
use std::panic::RefUnwindSafe;
use std::ptr;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize};

struct Node<T> {
    value: T,
    next: AtomicPtr<Node<T>>,
    /// Its place in the order of pushes at the back (from 1), or 0 for a node pushed at the
    /// front; a replacement takes the place of the node it replaces. A walk stops at the first
    /// node pushed at the back after it began (see "Every walk ends" in the module docs).
    appended: u64,
}

/// What only the writer (holding the mutex) touches.
struct Writer<T> {
    /// The last node, or null when the list is empty.
    tail: *mut Node<T>,
}

/// What every write changes: the writer lock and the count (changed under the lock). The list
/// keeps them together, on lines of their own, apart from what iterations read.
struct Written<T> {
    writer: ForkLock<Writer<T>>,
    /// Number of elements, written only under the writer lock.
    len: AtomicUsize,
    /// Pushes at the back so far, written only under the writer lock; each walk reads it once,
    /// when it begins.
    appended: AtomicU64,
}

/// A linked list whose readers iterate lock-free under a [`Guard`] while writers, serialized
/// by a mutex, insert at either end, remove by predicate and replace elements. Removed
/// elements are dropped after a grace period.
///
/// `D` is the [domain handle](crate::DomainRef): `&'static Rcu` (the global domain) by default. See
/// the [module docs](crate::docs::internal::list) for why concurrent iteration is safe.
///
/// Element references cannot outlive the guard:
///
/// ```compile_fail
/// let list = rcukit::RcuList::new();
/// list.push_back(1);
/// let first = {
///     let guard = list.domain().read();
///     list.iter(&guard).next()
/// };
/// println!("{first:?}");
/// ```
pub struct RcuList<T, D: DomainRef = &'static Rcu> {
    head: AtomicPtr<Node<T>>,
    /// The writer lock and the count, which every write changes, together on cache lines of
    /// their own: every iteration reads `head` and the domain, and a word written beside them
    /// would take their line from every reader's cache at each write.
    written: CachePadded<Written<T>>,
    domain: D,
    /// The list owns its nodes (drop check).
    _owns: PhantomData<Box<Node<T>>>,
}

// SAFETY: readers on any thread get `&T` (needs `T: Sync`); elements pushed on one thread are
// dropped on another (a callback worker, a later retiring thread or whoever drops the list;
// needs `T: Send`); the handle is shared (needs `D: Sync`). The raw pointers (head, links, tail) are owned by the
// list and only used under the rules in the module docs.
unsafe impl<T: Send + Sync, D: DomainRef + Sync> Sync for RcuList<T, D> {}

// SAFETY: moving the list moves ownership of its elements (needs `T: Send`) and its handle.
unsafe impl<T: Send, D: DomainRef + Send> Send for RcuList<T, D> {}

// As std's collections: unwind-safe when the elements are (a panic in the user's code under a
// write leaves the list whole, with the elements removed so far removed).
impl<T: RefUnwindSafe, D: DomainRef + RefUnwindSafe> RefUnwindSafe for RcuList<T, D> {}

impl<T> RcuList<T> {
    /// An empty list in the global domain ([`Rcu::global`]).
    pub fn new() -> Self {
        RcuList::with_domain(Rcu::global())
    }
}

impl<T> Default for RcuList<T> {
    fn default() -> Self {
        RcuList::new()
    }
}

impl<T> FromIterator<T> for RcuList<T> {
    /// A global-domain list holding the items in order.
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let list = RcuList::new();
        for value in iter {
            list.push_back(value);
        }
        list
    }
}

impl<T, D: DomainRef> RcuList<T, D> {
    /// An empty list protected by the domain behind `domain` (`&rcu` or `Arc<Rcu>`).
    pub fn with_domain(domain: D) -> Self {
        RcuList {
            head: AtomicPtr::new(ptr::null_mut()),
            written: CachePadded::new(Written {
                writer: ForkLock::new(Writer {
                    tail: ptr::null_mut(),
                }),
                len: AtomicUsize::new(0),
                appended: AtomicU64::new(0),
            }),
            domain,
            _owns: PhantomData,
        }
    }

    /// The domain whose guards protect this list's readers.
    #[inline]
    pub fn domain(&self) -> &Rcu {
        self.domain.rcu()
    }

    /// Iterate over the elements, lock-free. Every element reference lives as long as both the
    /// guard and the list are borrowed.
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another domain than the list's.
    #[inline]
    #[track_caller]
    pub fn iter<'g, G: ReadSection>(&'g self, guard: &'g G) -> Iter<'g, T> {
        domain_ref::check_guard("RcuList", guard, self.domain.rcu());
        // The bound first, then the head (see "Every walk ends" in the module docs).
        let last = self.written.appended.load(Acquire);
        Iter {
            next: self.head.load(Acquire),
            last,
            _borrow: PhantomData,
        }
    }

    /// Number of elements after the last completed write (a snapshot: writers may be changing
    /// it).
    pub fn len(&self) -> usize {
        self.written.len.load(Relaxed)
    }

    /// Is the list empty right now (a snapshot)?
    pub fn is_empty(&self) -> bool {
        self.head.load(Relaxed).is_null()
    }

    /// Insert `value` at the front. Readers already past the head do not see it.
    pub fn push_front(&self, value: T) {
        let value = self.written.writer.refuse_reentry(value);
        let mut w = self.lock_writer();
        let node = Box::into_raw(Box::new(Node {
            value,
            next: AtomicPtr::new(self.head.load(Relaxed)),
            appended: 0,
        }));
        self.head.store(node, Release);
        if w.tail.is_null() {
            w.tail = node;
        }
        self.bump_len(1);
    }

    /// Insert `value` at the back, in O(1).
    pub fn push_back(&self, value: T) {
        let value = self.written.writer.refuse_reentry(value);
        let mut w = self.lock_writer();
        // Counted before the node is linked, so that a walk that can reach it through a link
        // stored before it began also read a count that includes it.
        let appended = self.written.appended.load(Relaxed) + 1;
        self.written.appended.store(appended, Relaxed);
        let node = Box::into_raw(Box::new(Node {
            value,
            next: AtomicPtr::new(ptr::null_mut()),
            appended,
        }));
        self.link_after(w.tail).store(node, Release);
        w.tail = node;
        self.bump_len(1);
    }

    /// Remove the first element for which `pred` is true; it is dropped after a grace period.
    /// Returns whether one was found. Like every removal, it may run the `Drop` of elements
    /// removed earlier, on this thread after the writer lock is released (the domain's
    /// [`retire_on_producers`](crate::RcuBuilder::retire_on_producers), on by default): such
    /// a `Drop` must not take a lock that the caller holds around the removal, nor wait for a
    /// grace period while the caller holds an owned section of the domain. `pred` runs under
    /// the writer lock and must not write to this list (such a write panics).
    pub fn remove_first<F>(&self, pred: F) -> bool
    where
        F: FnMut(&T) -> bool,
        T: Send + 'static,
    {
        let mut pred = self.written.writer.refuse_reentry(pred);
        let mut w = self.lock_writer();
        let Some((prev, node)) = self.find(&mut pred) else {
            return false;
        };
        // SAFETY: under the writer lock, `node` is in the list right after `prev`.
        unsafe { self.unlink(&mut w, prev, node) };
        // Retired after the lock is released: a retire may run drops of earlier objects (see
        // `Rcu::retire`), and one of them may use this list.
        drop(w);
        // SAFETY: `node` was unlinked above and is retired exactly once.
        unsafe { self.domain.rcu().retire_raw(node) };
        true
    }

    /// Remove every element for which `keep` is false; each is dropped after a grace period.
    /// Returns how many were removed. `keep` runs under the writer lock and must not write to
    /// this list (such a write panics); if it panics, the elements removed so far stay
    /// removed.
    pub fn retain<F>(&self, keep: F) -> usize
    where
        F: FnMut(&T) -> bool,
        T: Send + 'static,
    {
        let mut keep = self.written.writer.refuse_reentry(keep);
        // Declared before the lock guard, so dropped after it: the unlinked nodes are retired
        // once the lock is released, also if `keep` panics.
        let mut unlinked = Unlinked {
            rcu: self.domain.rcu(),
            nodes: Vec::new(),
        };
        let mut w = self.lock_writer();
        let mut removed = 0;
        let mut prev: *mut Node<T> = ptr::null_mut();
        let mut node = self.head.load(Relaxed);
        while !node.is_null() {
            // SAFETY: under the writer lock every node in the list is alive (only writers
            // retire nodes), and `node` is in the list.
            let n = unsafe { &*node };
            let next = n.next.load(Relaxed);
            if keep(&n.value) {
                prev = node;
            } else {
                // SAFETY: `node` is in the list right after `prev`; `unlinked` retires it once.
                unsafe { self.unlink(&mut w, prev, node) };
                unlinked.nodes.push(node);
                removed += 1;
            }
            node = next;
        }
        removed
    }

    /// Replace the first element for which `pred` is true by `f(old)`, in place (the kernel's
    /// `list_replace_rcu`): a concurrent reader sees the old or the new version, never both
    /// and never neither. The old element is dropped after a grace period. Returns whether
    /// one was found. `pred` and `f` run under the writer lock and must not write to this list
    /// (such a write panics).
    pub fn update_first<P, F>(&self, pred: P, f: F) -> bool
    where
        P: FnMut(&T) -> bool,
        F: FnOnce(&T) -> T,
        T: Send + 'static,
    {
        let (mut pred, f) = self.written.writer.refuse_reentry((pred, f));
        let mut w = self.lock_writer();
        let Some((prev, old)) = self.find(&mut pred) else {
            return false;
        };
        // SAFETY: under the writer lock `old` is in the list, hence alive.
        let old_ref = unsafe { &*old };
        let new = Box::into_raw(Box::new(Node {
            value: f(&old_ref.value),
            next: AtomicPtr::new(old_ref.next.load(Relaxed)),
            appended: old_ref.appended,
        }));
        self.link_after(prev).store(new, Release);
        if w.tail == old {
            w.tail = new;
        }
        drop(w); // before the retire, as in `remove_first`
                 // SAFETY: `old` is unlinked (its predecessor now points at `new`) and retired once.
        unsafe { self.domain.rcu().retire_raw(old) };
        true
    }

    /// Remove every element; each is dropped after a grace period. Returns how many there were.
    pub fn clear(&self) -> usize
    where
        T: Send + 'static,
    {
        self.retain(|_| false)
    }

    /// Exclusive iteration: no reader can be walking the list, since readers borrow it.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        let mut next = *self.head.get_mut();
        std::iter::from_fn(move || {
            // SAFETY: `&mut self` is borrowed for the iterator's life: no reader or writer
            // can touch the nodes, and each node is yielded once.
            let node = unsafe { next.as_mut() }?;
            next = *node.next.get_mut();
            Some(&mut node.value)
        })
    }

    /// The first node for which `pred` is true, with its predecessor (null: the head).
    /// Call only under the writer lock.
    fn find(&self, pred: &mut impl FnMut(&T) -> bool) -> Option<(*mut Node<T>, *mut Node<T>)> {
        let mut prev: *mut Node<T> = ptr::null_mut();
        let mut node = self.head.load(Relaxed);
        while !node.is_null() {
            // SAFETY: under the writer lock every node in the list is alive.
            let n = unsafe { &*node };
            if pred(&n.value) {
                return Some((prev, node));
            }
            prev = node;
            node = n.next.load(Relaxed);
        }
        None
    }

    /// The link that points at the node after `prev` (the head when `prev` is null). Call only
    /// under the writer lock, with `prev` null or in the list.
    fn link_after(&self, prev: *mut Node<T>) -> &AtomicPtr<Node<T>> {
        if prev.is_null() {
            &self.head
        } else {
            // SAFETY: `prev` is in the list and the writer lock is held: it is alive.
            unsafe { &(*prev).next }
        }
    }

    /// Unlink `node` (whose predecessor is `prev`, null for the head), leaving `node.next`
    /// untouched for readers that stand on it.
    ///
    /// # Safety
    ///
    /// The writer lock is held (`w`), and `node` is in the list right after `prev`.
    unsafe fn unlink(
        &self,
        w: &mut ForkLockGuard<'_, Writer<T>>,
        prev: *mut Node<T>,
        node: *mut Node<T>,
    ) {
        // SAFETY: `node` is in the list, hence alive, per the contract.
        let next = unsafe { (*node).next.load(Relaxed) };
        self.link_after(prev).store(next, Release);
        if w.tail == node {
            w.tail = prev;
        }
        self.written
            .len
            .store(self.written.len.load(Relaxed) - 1, Relaxed);
    }

    fn bump_len(&self, by: usize) {
        self.written
            .len
            .store(self.written.len.load(Relaxed) + by, Relaxed);
    }

    /// The writer lock: a [`ForkLock`](crate::docs::internal::sync::fork_lock), which a forked child takes
    /// over from a thread of its parent that held it (see "`fork()`" in the module docs).
    #[inline(always)]
    fn lock_writer(&self) -> ForkLockGuard<'_, Writer<T>> {
        self.written.writer.lock(|_| self.writer_after_fork())
    }

    /// The writer's state in a forked child that took the lock over from a thread it does not
    /// have, which may have stopped anywhere in a write: the tail and the count, from a walk of
    /// the list. Each change readers see is one store of a link, so the list itself is whole;
    /// what a write that stopped halfway may have left behind is a node linked but not yet
    /// counted, or a tail not yet moved.
    #[cold]
    #[inline(never)]
    fn writer_after_fork(&self) -> Writer<T> {
        let (mut tail, mut len) = (ptr::null_mut(), 0);
        let mut node = self.head.load(Acquire);
        while !node.is_null() {
            tail = node;
            len += 1;
            // SAFETY: a node in the list is alive: only writers retire nodes, and the other
            // threads of the child that write wait for this takeover.
            node = unsafe { (*node).next.load(Acquire) };
        }
        self.written.len.store(len, Relaxed);
        Writer { tail }
    }
}

/// Nodes unlinked under the writer lock, retired when this drops: after the lock guard, which
/// is declared later (so nothing a retire runs executes under the lock), and also on unwind.
struct Unlinked<'a, T: Send + 'static> {
    rcu: &'a Rcu,
    nodes: Vec<*mut Node<T>>,
}

impl<T: Send + 'static> Drop for Unlinked<'_, T> {
    fn drop(&mut self) {
        for node in self.nodes.drain(..) {
            // SAFETY: every node here was unlinked from the list under the writer lock (so new
            // readers cannot reach it) and is pushed here once, so it is retired exactly once.
            unsafe { self.rcu.retire_raw(node) };
        }
    }
}

/// Drops every element, even when one's `Drop` panics (the others are still dropped, and the
/// first panic goes on afterwards, as std's collections do; in a list dropped while another
/// panic unwinds, the element's panic stops there, where std's collections abort the process).
impl<T, D: DomainRef> Drop for RcuList<T, D> {
    fn drop(&mut self) {
        let mut node = *self.head.get_mut();
        crate::report::drop_each(std::iter::from_fn(|| {
            (!node.is_null()).then(|| {
                // SAFETY: `&mut self`: no reader borrows the list any more, and removed nodes
                // are no longer linked, so each linked node is owned here and freed once; its
                // successor is read before it is dropped.
                let boxed = unsafe { Box::from_raw(node) };
                node = boxed.next.load(Relaxed);
                boxed
            })
        }));
    }
}

impl<T: fmt::Debug, D: DomainRef> fmt::Debug for RcuList<T, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let guard = self.domain.rcu().read();
        f.debug_list().entries(self.iter(&guard)).finish()
    }
}

/// Iterator over an [`RcuList`], from [`RcuList::iter`]: lock-free, one `Acquire` load per
/// element. Elements live as long as the guard and the list are borrowed. It ends at the end
/// of the list or at the first element pushed at the back after it began, whichever comes
/// first, so that a writer that keeps pushing cannot keep it going.
pub struct Iter<'g, T> {
    next: *const Node<T>,
    /// Pushes at the back when the walk began: a node pushed later ends it.
    last: u64,
    _borrow: PhantomData<&'g T>,
}

impl<'g, T> Iterator for Iter<'g, T> {
    type Item = &'g T;

    #[inline]
    fn next(&mut self) -> Option<&'g T> {
        // `next` is null or a node the reader reached through Acquire loads of links under a
        // guard of the list's domain that lives for 'g. SAFETY: such a node was initialised
        // before it was linked, and it is freed only after a grace period that waits for that
        // guard (see the module docs).
        let node = unsafe { self.next.as_ref() }?;
        if node.appended > self.last {
            self.next = ptr::null();
            return None;
        }
        self.next = node.next.load(Acquire);
        Some(&node.value)
    }
}

// SAFETY: an iterator holds only a pointer to a node and hands out `&'g T`: moved to or shared
// with another thread it is that thread's `&'g T` (needs `T: Sync`). The nodes stay alive for
// 'g whichever thread walks them, because the guard that protects them is borrowed for 'g
// where it was taken.
unsafe impl<T: Sync> Send for Iter<'_, T> {}
// SAFETY: `&Iter` gives access to nothing (`next` takes `&mut self`).
unsafe impl<T: Sync> Sync for Iter<'_, T> {}

impl<T> FusedIterator for Iter<'_, T> {}

impl<T> fmt::Debug for Iter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Iter").finish_non_exhaustive()
    }
}

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use super::*;
    use crate::sync::{on_lines_apart, span_of};

    #[test]
    fn what_writes_change_shares_no_cache_line_with_what_readers_read() {
        type L = RcuList<u64>;
        for read in [span_of!(L, head), span_of!(L, domain)] {
            assert!(on_lines_apart::<L>(span_of!(L, written), read));
        }
    }
}
