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
//! once per second ([`EVERY`]): a trim asked for less than a second after the last one
//! started is skipped; the memory of that shrink then goes back at the next trim (a later
//! large shrink or drop). A map emptied once gives its memory back at once; a map filled and
//! emptied many times a second keeps it between trims, as it would without trimming.
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
//! a read-side critical section and a map's `Drop` anywhere.
//!
//! The once-a-second rule keeps no lock: the time the last trim started is one atomic word of
//! the monotonic clock, and a thread claims the next trim by a compare-exchange from the value
//! it found old enough ([`claim`]). Two threads that find the same old value cannot both win,
//! so two trims start at least a second apart. A child forked while a thread of its parent was
//! trimming inherits that time, not a held lock, and trims again a second later (a lock taken
//! at the fork would never be released in the child, which would then never trim).

use crate::Rcu;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Tables of at least this many bytes of lines trim when they are shrunk away (module docs).
pub(crate) const FROM_BYTES: usize = 1 << 20;

/// The least time between two trims in the process (module docs: "How often").
pub(crate) const EVERY: Duration = Duration::from_secs(1);

/// When the last trim in the process started, in nanoseconds of the monotonic clock (0: none
/// yet).
static STARTED: AtomicU64 = AtomicU64::new(0);

/// Ask for a trim on a callback worker of `rcu`, after a grace period and after everything
/// the calling thread retired into `rcu` before (module docs: "When").
pub(crate) fn after_retired(rcu: &Rcu) {
    rcu.call(give_back);
}

/// Ask the allocator to give its free pages back to the system, unless a trim started less
/// than [`EVERY`] ago.
fn give_back() {
    if let Some(now) = monotonic_nanos() {
        give_back_at(&STARTED, now, trim_allocator);
    }
}

/// [`give_back`] at `now`, with the process's time of the last trim in `started`, trimming by
/// `trim`.
fn give_back_at(started: &AtomicU64, now: u64, trim: impl FnOnce()) {
    if claim(started, now) {
        trim();
    }
}

/// Whether a trim may start at `now` (nanoseconds of the monotonic clock), recording it in
/// `started` if so: none started in the [`EVERY`] before `now`, and no other thread claimed
/// this turn first (module docs: "Where").
fn claim(started: &AtomicU64, now: u64) -> bool {
    let last = started.load(Relaxed);
    if last != 0 && now.saturating_sub(last) < EVERY.as_nanos() as u64 {
        return false;
    }
    // `max(1)`: 0 means "never".
    started
        .compare_exchange(last, now.max(1), Relaxed, Relaxed)
        .is_ok()
}

/// The monotonic clock in nanoseconds, where a trim can run (elsewhere `None`: nothing to do).
#[cfg(all(target_os = "linux", target_env = "gnu", not(rcukit_loom)))]
fn monotonic_nanos() -> Option<u64> {
    let mut now = std::mem::MaybeUninit::<libc::timespec>::uninit();
    // SAFETY: `clock_gettime` writes the time into the `timespec` we own and reads nothing else.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, now.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: it returned 0, so it filled the `timespec`.
    let now = unsafe { now.assume_init() };
    Some(now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu", not(rcukit_loom))))]
fn monotonic_nanos() -> Option<u64> {
    None
}

#[cfg(all(target_os = "linux", target_env = "gnu", not(rcukit_loom)))]
fn trim_allocator() {
    // SAFETY: `malloc_trim` has no preconditions; it takes each arena's lock itself, so any
    // thread may call it at any time, and it only releases pages of free blocks.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu", not(rcukit_loom))))]
fn trim_allocator() {}

#[cfg(all(test, unix, not(rcukit_loom), not(miri)))]
mod tests {
    use super::*;
    use std::sync::mpsc;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn trims_start_at_least_a_second_apart_and_one_racer_wins() {
        let started = AtomicU64::new(0);
        assert!(claim(&started, 5 * SECOND), "the first trim");
        assert!(
            !claim(&started, 5 * SECOND + SECOND / 2),
            "half a second later"
        );
        assert!(claim(&started, 6 * SECOND), "a second later");
        // Threads that all find the same old time: exactly one of them trims.
        let started = AtomicU64::new(SECOND);
        let won = std::thread::scope(|s| {
            let racers: Vec<_> = (0..4)
                .map(|_| s.spawn(|| claim(&started, 3 * SECOND)))
                .collect();
            racers
                .into_iter()
                .map(|r| r.join().unwrap())
                .filter(|&won| won)
                .count()
        });
        assert_eq!(won, 1);
        assert_eq!(started.load(Relaxed), 3 * SECOND);
        assert!(!claim(&started, 3 * SECOND + 1), "after the race");
    }

    /// A child forked while a thread of its parent is in the middle of a trim trims a second
    /// later: it inherits the time of that trim, not a lock that nobody in the child would
    /// ever release.
    #[test]
    fn a_child_forked_during_a_trim_trims_again() {
        static STARTED: AtomicU64 = AtomicU64::new(0);
        let (entered_tx, entered) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let trimmer = std::thread::spawn(move || {
            give_back_at(&STARTED, 10 * SECOND, || {
                entered_tx.send(()).unwrap();
                release_rx.recv().unwrap();
            })
        });
        entered.recv().unwrap();
        // SAFETY: the child runs two `give_back_at` calls (atomics and a flag) and leaves with
        // `_exit`, running none of the parent's destructors.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let mut early = false;
            give_back_at(&STARTED, 10 * SECOND + SECOND / 2, || early = true);
            let mut later = false;
            give_back_at(&STARTED, 11 * SECOND, || later = true);
            // SAFETY: leaving the child at once.
            unsafe { libc::_exit(if !early && later { 0 } else { 3 }) };
        }
        let mut status = 0;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        // SAFETY: waiting for our own child.
        while unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } != pid {
            if std::time::Instant::now() > deadline {
                // SAFETY: killing our own child, which hung.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!("the child hung");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        release.send(()).unwrap();
        trimmer.join().unwrap();
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child skipped a trim a second after its parent's (status {status:#x})"
        );
    }
}
