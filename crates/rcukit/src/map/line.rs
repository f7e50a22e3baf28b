//! The cache lines a table is made of. A bucket is one 64-byte line: its state word (the
//! bucket's bit lock and sequence count, claim 4 of the [map's essay](super)), a word of
//! hash tags, the link to an overflow line, and [`LANES`] entry pointers. A lookup reads the
//! line, compares the key's tag with the tags of the occupied lanes, and dereferences only the
//! nodes whose tag matches: one cache miss for the bucket and one for the node it finds, and
//! none for a node whose key differs (a chained bucket dereferenced every node before it).
//!
//! The state word is `version << 23 | hints << 3 | LOCKED | CHANGING | MOVED`. `LOCKED` is a
//! bit lock (as `rhashtable`'s bucket locks are bit spinlocks): a writer holds it for a handful
//! of stores, never while user code runs, so a waiter spins briefly and then yields. The rest
//! of the word is the bucket's sequence count, which writers compare with `LOCKED` masked off;
//! the 4-bit index hint of each lane of the first line (`hint.rs`) changes only with the
//! version, in the store that ends a change. The lock and the count of a bucket cover its
//! overflow lines too, which have no state word of their own (an overflow line is [`Lanes`]
//! alone).
//!
//! The tag word holds one 12-bit tag per lane (lane `i` at bits `12 i ..`): the top 12 bits of
//! the entry's hash with the lowest of them forced to one, so that a tag is never zero and a
//! zero lane means an empty one. The table's index takes the hash's low bits, so tag and index
//! never share a bit while a table has fewer than 2^52 buckets.
//!
//! A table's buckets are one allocation, a [`PageArray`]: on Linux, a table of 4 MiB or more is
//! a mapping of its own (zero pages are empty lines), advised to use transparent huge pages
//! before any page is touched: a lookup in a table of millions of buckets then pays a cache
//! miss for its line, not also a miss in the TLB; and the mapping goes back to the system when
//! the table is freed.

use super::hint;
use super::own_writes;
use crate::pages::{PageArray, Pages};
use crate::sync::{AtomicPtr, AtomicU64, Backoff};
use std::ptr;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Bit of the state word: every entry of this bucket now lives in the next table.
pub(crate) const MOVED: u64 = 1;
/// Bit of the state word: the lock holder is changing the bucket.
pub(crate) const CHANGING: u64 = 2;
/// Bit of the state word: the bucket's lock is held.
const LOCKED: u64 = 4;
/// The lanes' index hints live above the three flag bits.
const HINTS: u32 = 3;
/// The version lives above the hints (41 bits of it).
const VERSION: u64 = 1 << (HINTS + LANES as u32 * hint::BITS);

/// Entry pointers per line.
pub(crate) const LANES: usize = 5;
/// Bits of one lane's tag.
const TAG_BITS: u32 = 12;
/// One lane's tag bits.
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
/// A one in the lowest bit of every lane.
const LANE_LOW: u64 = 1 | 1 << 12 | 1 << 24 | 1 << 36 | 1 << 48;
/// A one in the highest bit of every lane.
const LANE_HIGH: u64 = LANE_LOW << (TAG_BITS - 1);

/// The tag of `hash`: its top 12 bits, never zero.
#[inline(always)]
pub(crate) fn tag_of(hash: u64) -> u64 {
    (hash >> (64 - TAG_BITS)) | 1
}

/// The lanes whose tag may be `tag`, as a mask with the highest bit of each such lane set.
/// Exact up to the first matching lane; lanes above it may be reported falsely (a borrow of
/// the word-wide subtraction), which costs a comparison of the lane's node and nothing else.
#[inline(always)]
pub(crate) fn candidates(tags: u64, tag: u64) -> u64 {
    let x = tags ^ tag.wrapping_mul(LANE_LOW);
    x.wrapping_sub(LANE_LOW) & !x & LANE_HIGH
}

/// The lane of the lowest candidate bit of `mask` (from [`candidates`]).
#[inline(always)]
pub(crate) fn lane_of(mask: u64) -> usize {
    (mask.trailing_zeros() / TAG_BITS) as usize
}

/// The tag of lane `lane` in `tags` (zero: empty).
#[inline(always)]
pub(crate) fn lane_tag(tags: u64, lane: usize) -> u64 {
    (tags >> (lane as u32 * TAG_BITS)) & TAG_MASK
}

/// `tags` with lane `lane` set to `tag` (zero: emptied).
#[inline(always)]
pub(crate) fn with_lane(tags: u64, lane: usize, tag: u64) -> u64 {
    let shift = lane as u32 * TAG_BITS;
    (tags & !(TAG_MASK << shift)) | tag << shift
}

/// The index hint of lane `lane` of a bucket's first line, in its state word `state`.
#[inline(always)]
pub(crate) fn hint_in(state: u64, lane: usize) -> u64 {
    state >> (HINTS + lane as u32 * hint::BITS) & ((1 << hint::BITS) - 1)
}

/// `state` with the index hint of lane `lane` set to `hint`.
#[inline(always)]
fn with_hint(state: u64, lane: usize, hint: u64) -> u64 {
    let shift = HINTS + lane as u32 * hint::BITS;
    (state & !(((1 << hint::BITS) - 1) << shift)) | hint << shift
}

/// A hint to bring `p`'s cache line in; never faults, whatever `p` is.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a prefetch only hints the cache: it reads nothing the program can observe and
    // does not fault on any address (null, freed or unmapped).
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = p;
}

/// [`LANES`] entries with their tags, and the link to the next such group of the bucket: the
/// body of a bucket's line, and on its own (56 bytes, on a cache line of its own: see
/// `overflow.rs`) an overflow line.
#[repr(C)]
pub(crate) struct Lanes<N> {
    /// The lanes' tags (zero: the lane is empty). Changed only under the bucket's lock.
    pub(crate) tags: AtomicU64,
    /// The bucket's next overflow line (null: none). Set once, under the lock; an overflow
    /// line lives as long as its table.
    pub(crate) overflow: AtomicPtr<Lanes<N>>,
    /// The entries (null: empty lane). Changed only under the bucket's lock.
    pub(crate) slots: [AtomicPtr<N>; LANES],
}

impl<N> Lanes<N> {
    pub(crate) fn new() -> Self {
        Lanes {
            tags: AtomicU64::new(0),
            overflow: AtomicPtr::new(std::ptr::null_mut()),
            slots: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
        }
    }
}

/// A bucket: its state word and its first lanes, in one cache line.
#[repr(C, align(64))]
pub(crate) struct Line<N> {
    /// `version << 23 | hints << 3 | LOCKED | CHANGING | MOVED`: under the lock, `CHANGING` is
    /// set before the bucket changes and cleared, with the version bumped, after (claim 4).
    state: AtomicU64,
    /// The bucket's first lanes.
    pub(crate) lanes: Lanes<N>,
}

impl<N> Line<N> {
    pub(crate) fn new() -> Self {
        Line {
            state: AtomicU64::new(0),
            lanes: Lanes::new(),
        }
    }

    /// The sequence count as a writer's walk (or a reader's check for `MOVED`) records it:
    /// `LOCKED` masked off. `Acquire`: every change published by an earlier version bump, and
    /// every copy made before `MOVED` was set, is visible to what follows.
    #[inline(always)]
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

    /// Whether the bucket has no entry in its line and no overflow line (`Acquire` loads).
    pub(crate) fn is_empty(&self) -> bool {
        self.lanes.tags.load(Acquire) == 0 && self.lanes.overflow.load(Acquire).is_null()
    }

    /// Mark an empty, unlocked bucket `MOVED` with one compare-exchange, as a locked move of an
    /// empty bucket would (the version bumped and `MOVED` set in one `Release` store). Fails
    /// (false) if the bucket is locked, changing or not empty (an overflow line counts as not
    /// empty), or if its state moved meanwhile: any change of the bucket bumps the version, so
    /// a successful exchange proves the bucket was still empty when it became `MOVED`.
    pub(crate) fn mark_moved_if_empty(&self) -> bool {
        let state = self.state.load(Acquire);
        state & (LOCKED | CHANGING | MOVED) == 0 && self.is_empty() && self.mark_moved_from(state)
    }

    /// Swap `state`, read settled, unlocked and unmoved, for the next version with `MOVED`.
    fn mark_moved_from(&self, state: u64) -> bool {
        let marked = self
            .state
            .compare_exchange(state, state.wrapping_add(VERSION) | MOVED, Release, Relaxed)
            .is_ok();
        if marked {
            own_writes::note_change(ptr::from_ref(self).cast());
        }
        marked
    }

    /// [`mark_moved_if_empty`](Self::mark_moved_if_empty) that looks at the lanes before it
    /// reads the state: the loom model's broken mover. An insert that locks, fills and unlocks
    /// the bucket between the two reads leaves a state that the exchange then swaps for
    /// `MOVED`, and the insert is lost.
    #[cfg(rcukit_loom)]
    pub(crate) fn busted_mark_moved_if_empty_checked_first(&self) -> bool {
        let empty = self.is_empty();
        let state = self.state.load(Acquire);
        empty && state & (LOCKED | CHANGING | MOVED) == 0 && self.mark_moved_from(state)
    }

    /// Set the index hint of lane `lane` of the first line, without the lock or a version
    /// bump: for a bucket of a larger table that one mover alone fills, before any walker can
    /// reach it (see [`Table::fill`](super::table::Table::fill)).
    #[inline]
    pub(crate) fn set_hint_unlocked(&self, lane: usize, hint: u64) {
        let state = self.state.load(Relaxed);
        self.state.store(with_hint(state, lane, hint), Relaxed);
    }

    /// Debug builds check that nobody but the filling mover has reached the bucket: it is
    /// neither locked, changing nor moved, and its version was never bumped.
    #[inline]
    pub(crate) fn debug_assert_unreached(&self) {
        debug_assert_eq!(
            self.state.load(Relaxed) & (LOCKED | CHANGING | MOVED | !(VERSION - 1)),
            0,
            "a bucket of a table being grown into was reached before its source moved"
        );
    }

    /// Take the bucket's lock (`Acquire`: the holder sees every earlier holder's stores).
    pub(crate) fn lock(&self) -> LineLock<'_, N> {
        let mut backoff = Backoff::new();
        loop {
            let state = self.state.load(Relaxed);
            if state & LOCKED == 0
                && self
                    .state
                    .compare_exchange_weak(state, state | LOCKED, Acquire, Relaxed)
                    .is_ok()
            {
                return LineLock { line: self };
            }
            backoff.spin_or_yield();
        }
    }
}

/// The held lock of a bucket; released when dropped (also on unwind).
pub(crate) struct LineLock<'s, N> {
    line: &'s Line<N>,
}

impl<N> LineLock<'_, N> {
    /// The sequence count (`LOCKED` masked off). Only the holder changes it.
    #[inline]
    pub(crate) fn seq(&self) -> u64 {
        self.line.state.load(Relaxed) & !LOCKED
    }

    /// Change the bucket in `change`, announced in the state word (claim 4). The `Relaxed`
    /// store of `CHANGING` is ordered before the changes by their own `Release` stores; the
    /// version bump is a `Release` store after them.
    pub(crate) fn change<R>(&self, change: impl FnOnce() -> R) -> R {
        self.change_marking(0, change)
    }

    /// [`change`](Self::change), setting `flags` (`MOVED`) in the same store that ends it.
    pub(crate) fn change_marking<R>(&self, flags: u64, change: impl FnOnce() -> R) -> R {
        self.change_with(flags, None, change)
    }

    /// [`change`](Self::change) that puts a node in lane `lane` of the first line, setting the
    /// lane's index hint to `hint` in the same store that ends it.
    pub(crate) fn change_hinting<R>(
        &self,
        lane: usize,
        hint: u64,
        change: impl FnOnce() -> R,
    ) -> R {
        self.change_with(0, Some((lane, hint)), change)
    }

    fn change_with<R>(
        &self,
        flags: u64,
        hint: Option<(usize, u64)>,
        change: impl FnOnce() -> R,
    ) -> R {
        own_writes::note_change(ptr::from_ref(self.line).cast());
        let state = self.line.state.load(Relaxed);
        self.line.state.store(state | CHANGING, Relaxed);
        let result = change();
        let mut next = state & !CHANGING;
        if let Some((lane, hint)) = hint {
            next = with_hint(next, lane, hint);
        }
        let next = next.wrapping_add(VERSION) | flags;
        self.line.state.store(next, Release);
        result
    }

    /// Set `flags` (`MOVED`) before any change, in a change of its own: the loom model's
    /// broken mover, which marks a bucket moved before its entries are in the next table.
    #[cfg(rcukit_loom)]
    pub(crate) fn mark_first(&self, flags: u64) {
        self.change_marking(flags, || {});
    }
}

impl<N> Drop for LineLock<'_, N> {
    fn drop(&mut self) {
        // Only the holder writes the word while `LOCKED` is set (others only load it or try a
        // compare-exchange that fails), so a plain store releases it.
        let state = self.line.state.load(Relaxed);
        self.line.state.store(state & !LOCKED, Release);
    }
}

/// A table's lines, one allocation (large tables a mapping of their own: see [`PageArray`]).
pub(crate) type Lines<N> = PageArray<Line<N>>;

/// `n` empty lines.
pub(crate) fn lines<N>(n: usize) -> Lines<N> {
    // SAFETY: all-zero bits are an empty line (zero words, null pointers), as `Line::new`.
    unsafe { PageArray::zeroed(n, Pages::Huge, Line::new) }
}

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use super::*;

    #[test]
    fn lines_are_empty() {
        assert!(lines::<u64>(1000)
            .iter()
            .all(|l| l.seq() == 0 && l.lanes.tags.load(Relaxed) == 0));
    }

    #[test]
    fn a_line_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Line<u64>>(), 64);
        assert_eq!(std::mem::align_of::<Line<u64>>(), 64);
        assert_eq!(std::mem::size_of::<Lanes<u64>>(), 56);
    }

    #[test]
    fn candidates_include_every_matching_lane() {
        let tags = [0x801, 0x003, 0x801, 0, 0xfff];
        let word = tags
            .iter()
            .enumerate()
            .fold(0, |w, (lane, &t)| with_lane(w, lane, t));
        for (lane, &t) in tags.iter().enumerate() {
            assert_eq!(lane_tag(word, lane), t);
        }
        for tag in [0x801, 0x003, 0xfff, 0x555] {
            let mut mask = candidates(word, tag);
            let mut found = Vec::new();
            while mask != 0 {
                found.push(lane_of(mask));
                mask &= mask - 1;
            }
            for (lane, &t) in tags.iter().enumerate() {
                if t == tag {
                    assert!(found.contains(&lane), "tag {tag:#x}: lane {lane} missed");
                }
            }
            // Exact up to the first match.
            let first = tags.iter().position(|&t| t == tag).unwrap_or(LANES);
            assert!(found.iter().all(|&l| l >= first), "tag {tag:#x}: {found:?}");
        }
        assert_eq!(tag_of(0) & 1, 1);
        assert_eq!(tag_of(u64::MAX), 0xfff);
    }
}
