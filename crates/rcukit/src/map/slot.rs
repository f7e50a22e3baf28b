//! A bucket of the map's tables: the chain head and the bucket's state word side by side in
//! 16 bytes, so that a lookup touches one cache line per probe and a writer finds the head,
//! the lock and the sequence count (claim 4 of the [map's essay](super)) in that same line.
//!
//! The state word is `version << 3 | LOCKED | CHANGING | MOVED`. `LOCKED` is a bit lock (as
//! `rhashtable`'s bucket locks are bit spinlocks): a writer holds it for a handful of pointer
//! stores, never while user code runs, so a waiter spins briefly and then yields. The rest of
//! the word is the bucket's sequence count, which writers compare with `LOCKED` masked off.
//!
//! A table's slots are one allocation. Large tables are allocated zeroed (all-zero bits are a
//! null head and state 0) and, on Linux, advised to use transparent huge pages before their
//! pages are first touched: a lookup in a table of millions of buckets then pays a cache miss
//! for its slot, not also a miss in the TLB.

use crate::sync::{AtomicPtr, AtomicU64, Backoff};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Bit of the state word: every node of this bucket now lives in the next table.
pub(crate) const MOVED: u64 = 1;
/// Bit of the state word: the lock holder is changing the bucket's links.
pub(crate) const CHANGING: u64 = 2;
/// Bit of the state word: the bucket's lock is held.
const LOCKED: u64 = 4;
/// The version lives above the three flag bits.
const VERSION: u64 = 8;

/// One bucket: its chain head and its state word.
#[repr(C, align(16))]
pub(crate) struct Slot<N> {
    /// The first node of the chain (null: empty).
    pub(crate) head: AtomicPtr<N>,
    /// `version * 8 | LOCKED | CHANGING | MOVED`: under the lock, `CHANGING` is set before the
    /// bucket's links change and cleared, with the version bumped, after (claim 4).
    state: AtomicU64,
}

impl<N> Slot<N> {
    fn new() -> Self {
        Slot {
            head: AtomicPtr::new(std::ptr::null_mut()),
            state: AtomicU64::new(0),
        }
    }

    /// The sequence count as a writer's walk records it: `LOCKED` masked off. `Acquire`: every
    /// change published by an earlier version bump is visible to the walk that follows.
    #[inline]
    pub(crate) fn seq(&self) -> u64 {
        self.state.load(Acquire) & !LOCKED
    }

    /// Wait until the lock holder finished changing the bucket (`CHANGING` clear).
    pub(crate) fn wait_for_change(&self) {
        let mut backoff = Backoff::new();
        while self.state.load(Acquire) & CHANGING != 0 {
            backoff.spin_or_yield();
        }
    }

    /// Mark an empty, unlocked bucket `MOVED` with one compare-exchange, as a locked move of an
    /// empty chain would (the version bumped and `MOVED` set in one `Release` store). Fails
    /// (false) if the bucket is locked, changing or not empty, or if its state moved meanwhile:
    /// any change of the chain bumps the version, so a successful exchange proves the chain
    /// was still empty when the bucket became `MOVED`.
    pub(crate) fn mark_moved_if_empty(&self) -> bool {
        let state = self.state.load(Acquire);
        state & (LOCKED | CHANGING | MOVED) == 0
            && self.head.load(Acquire).is_null()
            && self
                .state
                .compare_exchange(state, state.wrapping_add(VERSION) | MOVED, Release, Relaxed)
                .is_ok()
    }

    /// Take the bucket's lock (`Acquire`: the holder sees every earlier holder's stores).
    pub(crate) fn lock(&self) -> SlotLock<'_, N> {
        let mut backoff = Backoff::new();
        loop {
            let state = self.state.load(Relaxed);
            if state & LOCKED == 0
                && self
                    .state
                    .compare_exchange_weak(state, state | LOCKED, Acquire, Relaxed)
                    .is_ok()
            {
                return SlotLock { slot: self };
            }
            backoff.spin_or_yield();
        }
    }
}

/// The held lock of a [`Slot`]; released when dropped (also on unwind).
pub(crate) struct SlotLock<'s, N> {
    slot: &'s Slot<N>,
}

impl<N> SlotLock<'_, N> {
    /// The sequence count (`LOCKED` masked off). Only the holder changes it.
    #[inline]
    pub(crate) fn seq(&self) -> u64 {
        self.slot.state.load(Relaxed) & !LOCKED
    }

    /// Change the bucket's links in `change`, announced in the state word (claim 4). The
    /// `Relaxed` store of `CHANGING` is ordered before the changes by their own `Release`
    /// stores; the version bump is a `Release` store after them.
    pub(crate) fn change<R>(&self, change: impl FnOnce() -> R) -> R {
        self.change_marking(0, change)
    }

    /// [`change`](Self::change), setting `flags` (`MOVED`) in the same store that ends it.
    pub(crate) fn change_marking<R>(&self, flags: u64, change: impl FnOnce() -> R) -> R {
        let state = self.slot.state.load(Relaxed);
        self.slot.state.store(state | CHANGING, Relaxed);
        let result = change();
        let next = (state & !CHANGING).wrapping_add(VERSION) | flags;
        self.slot.state.store(next, Release);
        result
    }
}

impl<N> Drop for SlotLock<'_, N> {
    fn drop(&mut self) {
        // Only the holder writes the word while `LOCKED` is set (others only load it or try a
        // compare-exchange that fails), so a plain store releases it.
        let state = self.slot.state.load(Relaxed);
        self.slot.state.store(state & !LOCKED, Release);
    }
}

/// Tables of at least this many bytes are advised to use huge pages.
#[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
const HUGE_TABLE_BYTES: usize = 4 << 20;

/// `n` empty slots.
pub(crate) fn slots<N>(n: usize) -> Box<[Slot<N>]> {
    #[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
    if n * std::mem::size_of::<Slot<N>>() >= HUGE_TABLE_BYTES {
        return huge_zeroed(n);
    }
    (0..n).map(|_| Slot::new()).collect()
}

/// `n` slots from a zeroed allocation whose pages are advised to be huge before any is touched.
#[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
fn huge_zeroed<N>(n: usize) -> Box<[Slot<N>]> {
    use std::alloc::{alloc_zeroed, handle_alloc_error, Layout};
    let layout = Layout::array::<Slot<N>>(n).expect("a table smaller than the address space");
    // SAFETY: the layout has a non-zero size (n > 0: callers ask for at least 4 MiB).
    let p = unsafe { alloc_zeroed(layout) };
    if p.is_null() {
        handle_alloc_error(layout);
    }
    let page = 4096;
    let start = (p as usize).next_multiple_of(page);
    let end = (p as usize + layout.size()) / page * page;
    if end > start {
        // SAFETY: `[start, end)` is whole pages inside our fresh allocation; the advice changes
        // no contents (zero pages stay zero) and failure is harmless, so its result is ignored.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
    // SAFETY: the allocation has `Layout::array::<Slot<N>>(n)`, the layout `Box<[Slot<N>]>`
    // frees with; all-zero bits are a valid `Slot` (a null `AtomicPtr`, a zero `AtomicU64`).
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p.cast::<Slot<N>>(), n)) }
}
