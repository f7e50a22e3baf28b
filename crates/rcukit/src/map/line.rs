//! The cache lines a table is made of. A bucket is one 64-byte line: its state word (the
//! bucket's bit lock and sequence count, claim 4 of the [map's essay](super)), a word of
//! hash tags, the link to an overflow line, and [`LANES`] entry pointers. A lookup reads the
//! line, compares the key's tag with the tags of the occupied lanes, and dereferences only the
//! nodes whose tag matches: one cache miss for the bucket and one for the node it finds, and
//! none for a node whose key differs (a chained bucket dereferenced every node before it).
//!
//! The state word is `version << 3 | LOCKED | CHANGING | MOVED`. `LOCKED` is a bit lock (as
//! `rhashtable`'s bucket locks are bit spinlocks): a writer holds it for a handful of stores,
//! never while user code runs, so a waiter spins briefly and then yields. The rest of the word
//! is the bucket's sequence count, which writers compare with `LOCKED` masked off. The lock and
//! the count of a bucket cover its overflow lines too, which have no state word of their own
//! (an overflow line is [`Lanes`] alone).
//!
//! The tag word holds one 12-bit tag per lane (lane `i` at bits `12 i ..`): the top 12 bits of
//! the entry's hash with the lowest of them forced to one, so that a tag is never zero and a
//! zero lane means an empty one. The table's index takes the hash's low bits, so tag and index
//! never share a bit while a table has fewer than 2^52 buckets.
//!
//! A lane's pointer also carries 16 bits of its node's hash (bits `HINT_LOW` to
//! `HINT_LOW + 15`) in the bits a user-space address leaves unused: the 16 above bit 47, and
//! bit 0 (a node is 8-aligned) set to say the others hold the hash's. A move into a larger
//! table needs the bits of the hash between the two tables' sizes, the old bucket's index
//! gives those below, and the lane's hint those above, so growing a table of 32 buckets or
//! more into one of up to 2^21 reads no node (it did: a cache miss per entry moved, a tenth of
//! the time of a million inserts into an empty map). Every reader strips the hint before it
//! follows the pointer ([`unpack`]); a node at an address that uses those bits (an allocator
//! that maps memory above 2^48, or tags its pointers) is stored as it is, with bit 0 clear,
//! and its moves read it.
//!
//! A table's buckets are one allocation, a [`PageArray`]: on Linux, a table of 4 MiB or more is
//! a mapping of its own (zero pages are empty lines), advised to use transparent huge pages
//! before any page is touched: a lookup in a table of millions of buckets then pays a cache
//! miss for its line, not also a miss in the TLB; and the mapping goes back to the system when
//! the table is freed.

use crate::pages::{PageArray, Pages};
use crate::sync::{AtomicPtr, AtomicU64, Backoff};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Bit of the state word: every entry of this bucket now lives in the next table.
pub(crate) const MOVED: u64 = 1;
/// Bit of the state word: the lock holder is changing the bucket.
pub(crate) const CHANGING: u64 = 2;
/// Bit of the state word: the bucket's lock is held.
const LOCKED: u64 = 4;
/// The version lives above the three flag bits.
const VERSION: u64 = 8;

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

/// The lowest hash bit a lane's pointer keeps (module docs): a table of `2^HINT_LOW` buckets
/// or more knows the bits below from a bucket's index.
const HINT_LOW: u32 = 5;
/// Hash bits a lane's pointer keeps, above the 48 bits of a user-space address.
const HINT_BITS: u32 = 16;
/// Bit 0 of a lane's pointer: the top [`HINT_BITS`] bits hold hash bits.
const HINTED: u64 = 1;
/// Whether addresses are 64-bit, with 16 unused bits on top (the hints are off elsewhere).
const HINTS: bool = usize::BITS == 64;

/// What a lane stores for `node`, whose hash is `hash`: its address, with the hash's hint bits
/// in the bits a user-space address leaves unused, if it leaves them (module docs). The bits
/// are added to the pointer (whose address has them clear), so it keeps its provenance.
#[inline(always)]
pub(crate) fn pack<N>(node: *mut N, hash: u64) -> *mut N {
    let addr = node as usize as u64;
    if !HINTS || addr >> (64 - HINT_BITS) != 0 || addr & HINTED != 0 {
        return node;
    }
    let hint = (hash >> HINT_LOW) << (64 - HINT_BITS) | HINTED;
    node.wrapping_byte_add(hint as usize)
}

/// The node a lane's pointer (from [`pack`]) points at: the hint's bits subtracted again.
#[inline(always)]
pub(crate) fn unpack<N>(word: *mut N) -> *mut N {
    let addr = word as usize as u64;
    if addr & HINTED == 0 {
        return word;
    }
    let hint = addr >> (64 - HINT_BITS) << (64 - HINT_BITS) | HINTED;
    word.wrapping_byte_sub(hint as usize)
}

/// The bucket of a table of `to` buckets that holds the node of lane pointer `word`, found in
/// bucket `index` of a table of `from` buckets, without reading the node: `None` if the
/// pointer keeps no hint or the hint does not hold the bits needed (both sizes are powers of
/// two; the buckets take the hash's low bits).
#[inline(always)]
pub(crate) fn hinted_bucket<N>(
    word: *mut N,
    index: usize,
    from: usize,
    to: usize,
) -> Option<usize> {
    let addr = word as usize as u64;
    if addr & HINTED == 0 || !hints_cover(from, to) {
        return None;
    }
    let high = (addr >> (64 - HINT_BITS)) << HINT_LOW;
    Some((high as usize | (index & (from - 1))) & (to - 1))
}

/// Whether a move from a table of `from` buckets into one of `to` can find every hinted
/// node's bucket without reading it ([`hinted_bucket`]).
#[inline(always)]
pub(crate) fn hints_cover(from: usize, to: usize) -> bool {
    HINTS && from >= 1 << HINT_LOW && (to as u64) <= 1 << (HINT_LOW + HINT_BITS)
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
/// body of a bucket's line, and on its own (56 bytes, a 64-byte block of the common
/// allocators) an overflow line.
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
    /// `version * 8 | LOCKED | CHANGING | MOVED`: under the lock, `CHANGING` is set before the
    /// bucket changes and cleared, with the version bumped, after (claim 4).
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
        state & (LOCKED | CHANGING | MOVED) == 0
            && self.is_empty()
            && self
                .state
                .compare_exchange(state, state.wrapping_add(VERSION) | MOVED, Release, Relaxed)
                .is_ok()
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
        let state = self.line.state.load(Relaxed);
        self.line.state.store(state | CHANGING, Relaxed);
        let result = change();
        let next = (state & !CHANGING).wrapping_add(VERSION) | flags;
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
    use std::ptr;

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

    /// A lane's pointer gives back its node, and its hint the node's bucket in every larger
    /// table the hint covers (a table of 32 buckets or more grown into one of up to 2^21);
    /// outside that, or for a pointer that keeps no hint, the move must read the node.
    #[test]
    fn hints_give_the_bucket_of_a_larger_table() {
        let node = Box::into_raw(Box::new(0u64));
        let mut hash = 0x243f_6a88_85a3_08d3u64;
        for _ in 0..10_000 {
            hash = hash.rotate_left(17).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ hash >> 29;
            let word = pack(node, hash);
            assert_eq!(unpack(word), node);
            for from_bits in 0..24 {
                let from = 1usize << from_bits;
                let index = hash as usize & (from - 1);
                for to_bits in from_bits + 1..26 {
                    let to = 1usize << to_bits;
                    let hinted = hinted_bucket(word, index, from, to);
                    if HINTS && from_bits >= HINT_LOW && to_bits <= HINT_LOW + HINT_BITS {
                        assert_eq!(hinted, Some(hash as usize & (to - 1)), "{from} -> {to}");
                        assert!(hints_cover(from, to));
                    } else {
                        assert_eq!(hinted, None, "{from} -> {to}");
                    }
                }
            }
        }
        // An address that uses the top bits is stored as it is, and gives no hint.
        let high = node.wrapping_byte_add(1 << (usize::BITS - 1));
        assert_eq!(pack(high, hash), high);
        assert_eq!(unpack(high), high);
        assert_eq!(hinted_bucket(high, 0, 64, 128), None);
        assert!(unpack(ptr::null_mut::<u64>()).is_null());
        // SAFETY: boxed above, freed once.
        drop(unsafe { Box::from_raw(node) });
    }
}
