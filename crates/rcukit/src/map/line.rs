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
//! A table's buckets are one allocation. On Linux, a table of 4 MiB or more is a mapping of
//! its own (zero pages are empty lines), aligned to huge pages and advised to use transparent
//! huge pages before any page is touched: a lookup in a table of millions of buckets then pays
//! a cache miss for its line, not also a miss in the TLB; and the mapping goes back to the
//! system when the table is freed.

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

/// Tables of at least this many bytes are advised to use huge pages.
#[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
const HUGE_TABLE_BYTES: usize = 4 << 20;

/// The size (and alignment) of a transparent huge page on x86-64 and most Arm kernels.
#[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
const HUGE_PAGE: usize = 2 << 20;

/// A table's lines, one allocation: from the global allocator, or, for a table of at least
/// [`HUGE_TABLE_BYTES`] on Linux, a private anonymous mapping of its own, aligned to huge pages
/// and advised to use them before any of its pages is touched. (From the allocator, a large
/// zeroed block may be recycled heap memory that the allocator zeroes itself: its pages are
/// then resident as small pages before any advice could apply.) Unmapped when dropped, so a
/// shrunk table's memory goes back to the system at once.
pub(crate) struct Lines<N> {
    ptr: std::ptr::NonNull<Line<N>>,
    len: usize,
    /// Bytes mapped for the lines (0: a `Box<[Line<N>]>`).
    mapped: usize,
}

// SAFETY: `Lines` owns its lines as a `Box<[Line<N>]>` would; it is `Send` and `Sync` exactly
// when the lines are.
unsafe impl<N> Send for Lines<N> where Line<N>: Send {}
// SAFETY: as above.
unsafe impl<N> Sync for Lines<N> where Line<N>: Sync {}

impl<N> std::ops::Deref for Lines<N> {
    type Target = [Line<N>];

    fn deref(&self) -> &[Line<N>] {
        // SAFETY: `ptr` points to `len` initialized lines that live as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<N> Drop for Lines<N> {
    fn drop(&mut self) {
        let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
        if self.mapped == 0 {
            // SAFETY: the lines came from `Box::into_raw` of a `Box<[Line<N>]>` of this length.
            drop(unsafe { Box::from_raw(slice) });
        } else {
            #[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
            // SAFETY: the lines are initialized and dropped once, here; then the mapping (ours
            // alone, `mapped` bytes from `ptr`) is unmapped and nothing refers to it any more.
            unsafe {
                std::ptr::drop_in_place(slice);
                libc::munmap(self.ptr.as_ptr().cast(), self.mapped);
            }
        }
    }
}

/// `n` empty lines.
pub(crate) fn lines<N>(n: usize) -> Lines<N> {
    #[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
    if n * std::mem::size_of::<Line<N>>() >= HUGE_TABLE_BYTES {
        if let Some(lines) = huge_zeroed(n) {
            return lines;
        }
    }
    let boxed: Box<[Line<N>]> = (0..n).map(|_| Line::new()).collect();
    let len = boxed.len();
    let ptr = Box::into_raw(boxed).cast::<Line<N>>();
    Lines {
        // SAFETY: `Box::into_raw` never returns null.
        ptr: unsafe { std::ptr::NonNull::new_unchecked(ptr) },
        len,
        mapped: 0,
    }
}

/// `n` lines in a fresh mapping aligned to huge pages and advised to use them before any page
/// is touched (zero pages: all-zero bits are an empty line); `None` if the system refuses the
/// mapping (the caller then takes the allocator's memory).
#[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
fn huge_zeroed<N>(n: usize) -> Option<Lines<N>> {
    let bytes = n
        .checked_mul(std::mem::size_of::<Line<N>>())?
        .checked_next_multiple_of(HUGE_PAGE)?;
    let reserve = bytes.checked_add(HUGE_PAGE)?;
    // SAFETY: a private anonymous mapping at an address of the kernel's choice; it overlaps
    // nothing of ours.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            reserve,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return None;
    }
    let start = (raw as usize).next_multiple_of(HUGE_PAGE);
    let (head, tail) = (
        start - raw as usize,
        reserve - bytes - (start - raw as usize),
    );
    // SAFETY: `[raw, start)` and `[start + bytes, raw + reserve)` are whole pages of the fresh
    // mapping outside the part kept (either may be empty); the advice on the kept part changes
    // no contents, and its failure only costs the huge pages, so results are ignored.
    unsafe {
        if head > 0 {
            libc::munmap(raw, head);
        }
        if tail > 0 {
            libc::munmap((start + bytes) as *mut libc::c_void, tail);
        }
        libc::madvise(start as *mut libc::c_void, bytes, libc::MADV_HUGEPAGE);
    }
    Some(Lines {
        // SAFETY: `start` lies inside a successful mapping, so it is not null; its zero pages
        // are `n` empty lines (zero words, null pointers), 64-byte aligned.
        ptr: unsafe { std::ptr::NonNull::new_unchecked(start as *mut Line<N>) },
        len: n,
        mapped: bytes,
    })
}

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use super::*;

    /// A large table is a mapping of its own, aligned to huge pages, with no page resident
    /// before its first use (so the advice applies to every page), advised to use huge pages,
    /// and of empty lines.
    #[test]
    #[cfg(target_os = "linux")]
    fn a_large_table_is_a_fresh_mapping_advised_to_use_huge_pages() {
        let n = 2 * HUGE_TABLE_BYTES / std::mem::size_of::<Line<u64>>();
        let lines = lines::<u64>(n);
        assert_eq!(lines.len(), n);
        assert_eq!(lines.mapped, 2 * HUGE_TABLE_BYTES);
        let start = lines.as_ptr() as usize;
        assert_eq!(start % HUGE_PAGE, 0);
        let pages = lines.mapped / 4096;
        let mut resident = vec![0u8; pages];
        // SAFETY: the range is our mapping, page-aligned; `resident` has a byte per page.
        let r = unsafe { libc::mincore(start as *mut _, lines.mapped, resident.as_mut_ptr()) };
        assert_eq!(r, 0);
        assert!(
            resident.iter().all(|&p| p & 1 == 0),
            "pages resident before use"
        );
        if std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let head = format!("{start:x}-");
            let vma = smaps
                .split_inclusive('\n')
                .skip_while(|line| !line.starts_with(&head))
                .take_while(|line| line.starts_with(&head) || !line.contains('-'))
                .collect::<String>();
            // `hg`: the mapping carries MADV_HUGEPAGE.
            let flags = vma
                .lines()
                .find(|l| l.starts_with("VmFlags:"))
                .unwrap_or("");
            assert!(flags.split_whitespace().any(|f| f == "hg"), "{vma}");
        }
        assert!(lines
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
