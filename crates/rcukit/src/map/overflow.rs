//! Overflow lines: the lines a bucket with more than [`LANES`](super::line::LANES) entries hangs
//! on its link, handed out in order from chunks of lines that belong to their table.
//!
//! A table takes its overflow lines from a chunk, a [`PageArray`] of its own, and makes a new
//! chunk when one is used up; the chunks are freed with the table, never a line alone. One
//! allocation per line would cost three things:
//!
//! * **Memory that stays.** The lines of a table the map grew out of were freed, a grace
//!   period after the grow, into the allocator's heap between the nodes: 64-byte holes that no
//!   trim can return (a page that also holds a node stays) and that only allocations of 64
//!   bytes or less reuse. At 100,000 `u64` entries they were 2 to 4 bytes an entry of the
//!   resident set. A chunk of a large table is a mapping of its own, whose untouched pages are
//!   not resident, and it is unmapped when the table is freed.
//! * **A second cache line.** A line is 56 bytes; from the allocator it lay across two cache
//!   lines in three cases out of four. Here each one has a cache line of its own.
//! * **A walk to free.** Freeing a table freed its lines one by one, found by reading every
//!   bucket; now it frees a few chunks.
//!
//! # Why it is correct
//!
//! A line is handed out once: a chunk counts the lines it gave with an atomic add, and an add
//! that finds the chunk used up takes none. A new chunk is published with a compare-exchange on
//! the table's current chunk; one that loses the race was never seen and is freed at once. A
//! chunk lives as long as its table, so a line does too (the essay's claim 1). A line starts as
//! all-zero bits, an empty line (no tag, no link, no entry); the writer that takes it fills it
//! under its bucket's lock, before the `Release` store of the link that publishes it (claim 2),
//! so a reader that follows the link sees it filled. A thread that stops between taking a line
//! and linking it (a forked child's vanished thread) leaves that line unused, nothing more.

use super::line::Lanes;
use crate::pages::{PageArray, Pages, MAPPED_BYTES};
use crate::sync::{AtomicPtr, AtomicUsize};
use std::ptr;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

/// An overflow line: [`Lanes`] alone, on a cache line of its own.
#[repr(C, align(64))]
struct OverflowLine<N>(Lanes<N>);

/// Lines handed out in order.
struct Chunk<N> {
    lines: PageArray<OverflowLine<N>>,
    /// Lines handed out, and adds that found none left (past `lines.len()`).
    taken: AtomicUsize,
    /// The chunk used before this one (null: none); freed with this one.
    older: *mut Chunk<N>,
}

/// The overflow lines of one table.
pub(crate) struct Overflows<N> {
    /// The chunk lines are taken from (null: none yet).
    current: AtomicPtr<Chunk<N>>,
    /// Lines per chunk.
    per_chunk: usize,
}

/// Lines per chunk in a table of `buckets` buckets. From 4,096 buckets (256 KiB of lines), a
/// chunk is the smallest array that is a mapping of its own (128 KiB), resident only as far as
/// lines are taken and unmapped with its table. A smaller table takes chunks of a sixteenth of
/// its buckets' number (at the largest load, about a fifth of the buckets have an overflow
/// line) from the allocator: at most 8 KiB each, and 55 KiB for the lines of a table of 4,096
/// buckets, the most that a map growing past it leaves in the allocator's heap.
fn lines_per_chunk(buckets: usize) -> usize {
    let mapped = MAPPED_BYTES / std::mem::size_of::<OverflowLine<()>>();
    if buckets >= 2 * mapped {
        mapped
    } else {
        (buckets / 16).max(4)
    }
}

impl<N> Overflows<N> {
    /// No lines yet, for a table of `buckets` buckets.
    pub(crate) fn for_table(buckets: usize) -> Self {
        Overflows {
            current: AtomicPtr::new(ptr::null_mut()),
            per_chunk: lines_per_chunk(buckets),
        }
    }

    /// An empty line, which no other call has handed out; it lives as long as `self`.
    pub(crate) fn take(&self) -> &Lanes<N> {
        loop {
            let current = self.current.load(Acquire);
            // SAFETY: a published chunk lives as long as `self`.
            if let Some(chunk) = unsafe { current.as_ref() } {
                let at = chunk.taken.fetch_add(1, Relaxed);
                if let Some(line) = chunk.lines.get(at) {
                    return &line.0;
                }
            }
            let fresh = Box::into_raw(Box::new(Chunk {
                lines: self.chunk_lines(),
                taken: AtomicUsize::new(1),
                older: current,
            }));
            match self
                .current
                .compare_exchange(current, fresh, AcqRel, Acquire)
            {
                // SAFETY: published, so it lives as long as `self`.
                Ok(_) => return unsafe { &(&(*fresh).lines)[0].0 },
                // SAFETY: never published: ours alone.
                Err(_) => drop(unsafe { Box::from_raw(fresh) }),
            }
        }
    }

    /// The lines of a new chunk, empty.
    fn chunk_lines(&self) -> PageArray<OverflowLine<N>> {
        // SAFETY: all-zero bits are an empty line (zero tags, null pointers), as `Lanes::new`.
        let mut lines = unsafe {
            PageArray::zeroed(
                self.per_chunk,
                Pages::Default,
                || OverflowLine(Lanes::new()),
            )
        };
        // A chunk is freed with its table; a table of this size is seldom made again at once.
        lines.give_back_when_dropped();
        lines
    }

    /// The bytes of the lines handed out so far: what freeing the table gives back of its
    /// chunks (a mapped chunk's untouched pages were never resident; a chunk from the
    /// allocator holds at most a sixteenth of its table's buckets in lines, so its unused ones
    /// are not counted). A line taken by a writer that has not linked it yet counts.
    pub(crate) fn bytes(&self) -> usize {
        let mut lines = 0;
        let mut chunk = self.current.load(Acquire);
        // SAFETY: a published chunk, and the chunks older than it, live as long as `self`.
        while let Some(c) = unsafe { chunk.as_ref() } {
            lines += c.taken.load(Relaxed).min(c.lines.len());
            chunk = c.older;
        }
        lines * Self::LINE_BYTES
    }

    /// The bytes of a line.
    const LINE_BYTES: usize = std::mem::size_of::<OverflowLine<N>>();
}

impl<N> Drop for Overflows<N> {
    fn drop(&mut self) {
        let mut chunk = self.current.load(Relaxed);
        while !chunk.is_null() {
            // SAFETY: chunks are boxed, published once and owned by their table, which is being
            // dropped (no reader can reach it any more).
            let owned = unsafe { Box::from_raw(chunk) };
            chunk = owned.older;
        }
    }
}

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_line_is_one_cache_line() {
        assert_eq!(Overflows::<u64>::LINE_BYTES, 64);
        assert_eq!(std::mem::align_of::<OverflowLine<u64>>(), 64);
    }

    #[test]
    fn lines_are_empty_aligned_and_handed_out_once_across_chunks() {
        // Under Miri, small tables only (a large table's chunk is 2,048 lines to initialize).
        let sizes: &[usize] = if cfg!(miri) {
            &[1, 64]
        } else {
            &[1, 64, 1 << 12, 1 << 16]
        };
        for &buckets in sizes {
            let pool = Overflows::<u64>::for_table(buckets);
            let n = 3 * pool.per_chunk + 1;
            let mut seen = HashSet::new();
            for _ in 0..n {
                let line = pool.take();
                assert_eq!(std::ptr::from_ref(line) as usize % 64, 0);
                assert_eq!(line.tags.load(Relaxed), 0);
                assert!(line.overflow.load(Relaxed).is_null());
                assert!(line.slots.iter().all(|s| s.load(Relaxed).is_null()));
                line.tags.store(1, Relaxed); // taken: a second hand-out would not read 0
                assert!(seen.insert(std::ptr::from_ref(line) as usize));
                assert_eq!(pool.bytes(), seen.len() * 64, "{buckets} buckets");
            }
        }
    }

    #[test]
    fn threads_taking_lines_at_once_never_share_one() {
        let pool = Overflows::<u64>::for_table(64);
        let per_thread = 10 * pool.per_chunk;
        let taken: Vec<Vec<usize>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..per_thread)
                            .map(|_| std::ptr::from_ref(pool.take()) as usize)
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let all: HashSet<usize> = taken.iter().flatten().copied().collect();
        assert_eq!(all.len(), 4 * per_thread);
        // Lines counted once each, though adds past a chunk's end ran on.
        assert_eq!(pool.bytes(), 4 * per_thread * 64);
    }
}
