//! Giving the memory of removed entries back to the system: after the map shrinks away a large
//! table, and after a large map is dropped, the C allocator is asked to return its free pages.
//!
//! # Why
//!
//! Each entry is a node of its own, from Rust's global allocator, which is the C library's
//! `malloc` unless the program picked another. glibc keeps freed small blocks (a `u64` entry's
//! node is a 32-byte block) in per-size bins, and hands memory back to the system only from
//! the top of its heap, and only when a large free there crosses its trim threshold, which it
//! also raises each time a block it had mapped is freed. Freeing a million nodes one by one
//! triggers none of that: measured with one million `u64` entries inserted and then all
//! removed, 35.7 MiB stayed resident with 20 KiB in use; `malloc_trim(0)` then returned all
//! but 0.2 MiB, in about 5 ms (about 5 ns per freed block: it merges the binned blocks, which
//! glibc would do at its next large request anyway, then releases the free pages). A map that
//! held a million connections at a peak and a thousand now would otherwise keep the peak's
//! memory for the life of the process.
//!
//! # When
//!
//! With the default load factors, a table of `B` buckets is made for more than `2B` entries (it
//! grows past 4 per bucket from a table half its size), and it is shrunk away below `B / 4`
//! entries: a shrink away from a table of [`FROM_BYTES`] (1 MiB of lines, 16,384 buckets) or
//! more means that most of at least 28,000 removed nodes have been freed since that table was
//! made. So after retiring the old table of such a shrink, the writer that finished it queues
//! the trim as a closure of the map's domain ([`after_retired`]). A thread that queues a
//! closure first hands the objects it retired to the domain's workers (see
//! [`local`](crate::docs::internal::callbacks::local)), so the trim runs on a worker after the
//! grace period, after the old table and the nodes this thread removed before the shrink have
//! been freed; nodes that other threads removed are freed about then, and what a trim misses
//! the next one takes. A map dropped with a table of [`FROM_BYTES`] or more frees its nodes at
//! once and queues a trim the same way. (A table made large by a capacity or `reserve` and
//! shrunk by `shrink_to_fit` trims too, for little.)
//!
//! The trim never runs on the thread that removes, shrinks or drops: a trim takes milliseconds
//! (5 ms after a million frees on an idle machine, 15 ms beside two busy threads), which would
//! stall whichever `remove` happened to free the old table (retired objects are freed a few at
//! a time by their thread's later writes), and delays only the worker's other closures.
//!
//! # How often
//!
//! A trim costs time in proportion to the blocks freed since the last one, a few percent of
//! what removing them cost (0.36 ms after 100,000 removes, 5 ms after a million), and the
//! memory it gives back must be faulted in again when the map, or anything else, fills it
//! later: a program that fills a map with 100,000 entries and empties it again and again
//! spent half again as much time per insert when every emptying trimmed (129 ns against 85
//! on the development machine: the page faults of each refill). So a process trims at most
//! once per second ([`EVERY`]): one trim at a time, and a
//! trim asked for less than a second after the last one started is skipped; the memory of
//! that shrink then goes back at the next trim (a later large shrink or drop). A map emptied
//! once gives its memory back at once; a map filled and emptied many times a second keeps it
//! between trims, as it would without trimming.
//! [`MapBuilder::trim_allocator(false)`](crate::map::MapBuilder::trim_allocator) turns it off
//! for a map.
//!
//! # Where
//!
//! Only with glibc (`target_env = "gnu"`). musl's allocator returns freed pages by itself;
//! with another global allocator (jemalloc, mimalloc) the nodes are not in glibc's heap, and a
//! trim walks glibc's small heap for nothing, which is cheap. Trimming never changes what the
//! map holds: it is a request to the allocator, which takes its own locks, runs no user code
//! and never waits for a grace period; queuing it is a `call`, which a writer may make inside
//! a read-side critical section and a map's `Drop` anywhere. A child forked while a thread of its parent was
//! trimming finds the lock taken and never trims (`try_lock` skips; nothing waits on it).

use crate::Rcu;
use parking_lot::Mutex;
use std::time::{Duration, Instant};

/// Tables of at least this many bytes of lines trim when they are shrunk away (module docs).
pub(crate) const FROM_BYTES: usize = 1 << 20;

/// The least time between two trims in the process (module docs: "How often").
pub(crate) const EVERY: Duration = Duration::from_secs(1);

/// When the last trim in the process started; locked while one runs.
static LAST: Mutex<Option<Instant>> = Mutex::new(None);

/// Ask for a trim on a callback worker of `rcu`, after a grace period and after everything
/// the calling thread retired into `rcu` before (module docs: "When").
pub(crate) fn after_retired(rcu: &Rcu) {
    rcu.call(give_back);
}

/// Ask the allocator to give its free pages back to the system, unless a trim is running or
/// one started less than [`EVERY`] ago.
fn give_back() {
    let Some(mut last) = LAST.try_lock() else {
        return;
    };
    let now = Instant::now();
    if last.is_some_and(|at| now.duration_since(at) < EVERY) {
        return;
    }
    *last = Some(now);
    trim_allocator();
}

#[cfg(all(target_os = "linux", target_env = "gnu", not(rcukit_loom)))]
fn trim_allocator() {
    // SAFETY: `malloc_trim` has no preconditions; it takes each arena's lock itself, so any
    // thread may call it at any time, and it only releases pages of free blocks.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu", not(rcukit_loom))))]
fn trim_allocator() {}
