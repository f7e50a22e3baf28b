//! Giving the memory of removed entries back to the system: once a map has freed 128 KiB by
//! shrinking or by being dropped, the C allocator is asked to return its free pages.
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
//! A map counts the bytes it frees ([`Freed`]). When it shrinks away a table, it adds that
//! table's lines and the nodes of the entries it lost since the table was made: the map's
//! entry count then less its count now, a lower bound (entries inserted and removed again
//! while the table was current do not count). When it is dropped, it adds its table and every
//! node. Once the count since the map's last ask reaches [`FROM_BYTES`], 128 KiB, the thread
//! that crossed it asks for a trim. That is glibc's own default trim threshold: less free
//! memory than that at the top of its heap, glibc keeps too.
//!
//! With the default load factors, a table of `B` buckets that a grow made held more than `2B`
//! entries, and it is shrunk away below `B / 4`: that shrink comes with at least `1.75 B`
//! entries lost. So a map that held a few thousand entries asks at its first shrink, and one
//! emptied after holding 100,000 `u64` entries asks at its first two (from 32,768 and 4,096
//! buckets); its last shrinks, from small tables, free less than the mark, which waits for
//! the map's next ask. Counting what was freed, not the size of the table shrunk away,
//! matters for maps that never grow large tables: 25,000 entries of 64-byte blocks have a
//! table of 512 KiB and 1.6 MB of nodes, and a rule that waited for a table of 1 MiB left all
//! of it resident after they were removed (`tests/map_memory.rs`). With 20,000 `u64` entries
//! removed, 0.9 MiB stayed above the empty map under that rule and 0.3 MiB when counting; a
//! `malloc_trim(0)` called afterwards left 0.1-0.3 MiB either way (a scratch program, three
//! runs each).
//!
//! The shrinking writer asks after retiring the old table, by retiring a marker behind it
//! ([`after_retired`]) whose drop asks the waiting thread below for the trim: it is dropped
//! once a grace period that began after the old table and the nodes this thread removed
//! before the shrink were retired has ended, when they are ready to be freed too, and nearly
//! always after they were (a thread's list of retired objects is freed from its oldest end,
//! whichever thread frees it); nodes that other threads removed are freed about then, and
//! what a trim misses the next one takes. A dropped map frees its nodes at once and asks the same way. (Queuing
//! the trim as a closure of the domain would keep that order too, but a thread that queues a
//! closure first hands every object it retired to the domain's workers, which then free them
//! at their pace instead of the retiring thread at its own: a map emptied and filled again
//! beside readers that held guards for milliseconds, on a machine busier than its cores, left
//! the workers millions of nodes behind, and its memory grew by gigabytes.) (A table
//! made large by a capacity or `reserve` and shrunk by `shrink_to_fit` counts too.) A map
//! consumed by `into_iter` counts as dropped, and its iterator asks once it has handed out or
//! dropped its last entry; with no domain left to queue on, the trim runs on the waiting
//! thread below (at once if the last trim started a second ago or more).
//!
//! The trim never runs on the thread that removes, shrinks or drops: a trim takes milliseconds
//! (5 ms after a million frees on an idle machine, 15 ms beside two busy threads), which would
//! stall whichever `remove` happened to free the old table (retired objects are freed a few at
//! a time by their thread's later writes): it runs on a thread of its own (below). It does not spare other threads the
//! allocator's lock: while it runs, glibc holds the lock of the heap it trims (the main one,
//! where most programs' nodes are), and another thread that allocates there meanwhile waits
//! for it. In scratch programs that filled a map of a million `u64` entries, dropped it and
//! filled a second one at once, one insert of the second fill, about 8,500 entries in, waited
//! 3.8-6.6 ms (nine runs), about the trim's length; in three runs with the trim turned off,
//! none did. Removes wait less (glibc frees small blocks into per-thread and lock-free bins).
//! Most of that wait is work glibc does at its next large allocation anyway (merging the
//! binned blocks), on whichever thread makes it: emptying a million-entry map in one thread,
//! the remove that starts the first shrink (before any trim was asked) allocates the smaller
//! table and waited 10-15 ms there for that merge.
//!
//! # How often
//!
//! A trim costs time in proportion to the blocks freed since the last one, a few percent of
//! what removing them cost (0.36 ms after 100,000 removes, 5 ms after a million), and the
//! memory it gives back must be faulted in again when the map, or anything else, fills it
//! later: a program that fills a map with 100,000 entries and empties it again and again
//! spent half again as much time per insert when every emptying trimmed (129 ns against 85
//! on the development machine: the page faults of each refill). So a process trims at most
//! once per second ([`EVERY`]). Trims run on one thread of rcukit, `rcukit-trim`: asked for a
//! second or more after the last one started, it trims at once; asked for sooner, it sleeps
//! until the second is up and then trims once for every trim asked for meanwhile, and exits. A map
//! emptied once gives its memory back at once and the rest a second later (a million `u64`
//! entries removed: 3.4-4.1 MiB resident above the empty map just after, from the entries
//! removed after the first trim, and 0.6 MiB a second later); a map filled and emptied many
//! times a second gives it back once a second.
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
//! it found old enough ([`Trims::claim`]). Two threads that find the same old value cannot both
//! win, so two trims start at least a second apart. A thread that loses the race to another
//! claim needs no trim of its own: that claim was made after it looked, so that trim starts
//! after everything it had freed.
//!
//! # The waiting thread
//!
//! A trim asked for too soon must still run after the frees that asked for it. The asker sets
//! a flag, `wanted`, and then makes sure that a thread waits: the word `waiter` names the
//! process in which one does (0: none), and the asker that swaps its own process in starts the
//! thread. The waiting thread sleeps until a second after the last trim started, clears
//! `wanted`, claims and trims, then stores 0 into `waiter` and reads `wanted` again; if it is
//! set, it takes `waiter` back (unless a new asker took it first) and goes round again.
//!
//! No ask is lost. An ask whose `wanted` came before the thread cleared it is followed by the
//! thread's trim, which starts after the clear (or, if another thread's claim took the turn, by
//! that trim, claimed after the clear). An ask whose `wanted` came after the clear is seen by
//! the thread's last read: the asker stores `wanted` and then reads `waiter`, the thread
//! stores 0 into `waiter` and then reads `wanted`, all sequentially consistent, so at least one
//! of them sees the other's store. If the asker reads the thread's value, the thread reads
//! `wanted` set and goes round; if the thread reads `wanted` clear, the asker reads 0 and starts
//! a thread. If both act, one compare-exchange on `waiter` wins, and one thread goes on. A
//! claim that finds a newer trim than the one the thread slept for sets `wanted` again, since
//! that trim may have started before some ask's frees.
//!
//! A child forked while a thread of its parent sleeps inherits `waiter` but not the thread.
//! `waiter` holds the process's fork generation (the count of forks it descends from, which
//! rcukit's fork handler keeps), one more than its parent's, so the child finds a value that is
//! not its own and starts its own thread. A child forked in the middle of a trim inherits the
//! time of that trim, not a held lock, and trims again a second later (a lock taken at the fork
//! would never be released in the child, which would then never trim).
//!
//! # Forks
//!
//! A child would start that thread only at its own next ask, and the trims queued on its
//! domains before the fork never run in it (a child abandons the callbacks it inherits, see
//! [`fork`](crate::docs::internal::domain::fork)). A child that frees no more 128 KiB would
//! keep what its parent freed and had not yet given back: a pre-forking server that dropped a
//! large map just before starting its workers kept that memory in every worker (their copies
//! of the freed pages, shared until written, but kept until the parent and every child let
//! them go). So a trim that is owed runs before the fork: rcukit's fork handler has the
//! forking thread trim if one was asked for too soon (`wanted`) or is queued on a domain and
//! has not run yet (`queued` counts those closures while they live), and moves the time of the
//! last trim on. Parent and child then start from the trimmed heap. In the parent the waiting
//! thread and the queued trims still run, a second later, which costs little: nothing much
//! was freed since. The price is that a fork made while a trim is owed takes the trim's time
//! (milliseconds after a million frees), in the thread that forks. A child keeps the count of
//! the queued closures it abandoned, so each of its own forks trims first, a cheap trim when
//! nothing was freed.
//!
//! # No thread
//!
//! If the waiting thread cannot be started (the system refuses threads: `RLIMIT_NPROC`, no
//! memory for a stack), the asker trims at once, on its own thread (the one that dropped the
//! marker), perhaps less than a second after the last trim: the once-a-second rule gives way rather than the memory staying with the
//! allocator until some later ask, which may never come.
//!
//! # Clocks
//!
//! The time of the last trim is on the monotonic clock, which only moves forward, but a
//! process can move to another clock: a child of a process that entered a new time namespace
//! (`unshare(CLONE_NEWTIME)`, as checkpoint-restore tools do) reads its monotonic clock with
//! the namespace's offset, perhaps far behind the time its parent recorded. A clock behind the
//! recorded time therefore allows a trim at once (and records the new time), where
//! subtracting would have made the waiting thread sleep for the whole offset.

use crate::Rcu;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::time::Duration;

/// A map asks for a trim once it has freed this many bytes since its last ask (module docs:
/// "When"): glibc's own default trim threshold.
pub(crate) const FROM_BYTES: usize = 128 << 10;

/// The least time between two trims in the process (module docs: "How often").
pub(crate) const EVERY: Duration = Duration::from_secs(1);

/// [`EVERY`] in nanoseconds.
const EVERY_NANOS: u64 = EVERY.as_nanos() as u64;

/// The process's trims.
static TRIMS: Trims = Trims::new();

/// Ask for a trim after a grace period, once the objects the calling thread retired into
/// `rcu` before have been freed (module docs: "When"): a marker retired behind them asks the
/// waiting thread when it is dropped.
pub(crate) fn after_retired(rcu: &Rcu) {
    /// Asks for a trim when dropped; counted as queued until then (module docs: "Forks").
    struct AskWhenDropped(#[allow(dead_code)] Queued);
    impl Drop for AskWhenDropped {
        fn drop(&mut self) {
            TRIMS.ask_waiter(&System);
        }
    }
    rcu.retire(Box::new(AskWhenDropped(Queued::new(&TRIMS))));
}

/// Ask for a trim when no domain can run it: on the waiting thread, at once if the last trim
/// started a second ago or more (module docs: "When", a map consumed by `into_iter`).
pub(crate) fn soon() {
    TRIMS.ask_waiter(&System);
}

/// A trim queued on a domain that has not run yet (module docs: "Forks"): counted while it
/// lives, so that a fork meanwhile runs it first.
struct Queued(&'static Trims);

impl Queued {
    fn new(trims: &'static Trims) -> Queued {
        owed_at_forks();
        trims.queued.fetch_add(1, SeqCst);
        Queued(trims)
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, SeqCst);
    }
}

/// Have the fork handlers run a trim that is owed before the fork (module docs: "Forks").
fn owed_at_forks() {
    #[cfg(all(target_os = "linux", target_env = "gnu", not(rcukit_loom), not(miri)))]
    crate::sync::fork::at_prepare(crate::sync::fork::Stage::Owed, |_| {
        TRIMS.before_fork(&System);
    });
}

/// What one map freed since it last asked for a trim (module docs: "When").
#[derive(Debug, Default)]
pub(crate) struct Freed(AtomicUsize);

impl Freed {
    /// Count `bytes` freed; whether the caller should ask for a trim.
    pub(crate) fn count(&self, bytes: usize) -> bool {
        let total = self.0.fetch_add(bytes, Relaxed) + bytes;
        // Of two threads that both cross the mark, the one that takes the count asks.
        total >= FROM_BYTES && self.0.swap(0, Relaxed) >= FROM_BYTES
    }
}

/// What trimming needs from the system: a clock, the trim itself, a way to wait and a thread
/// to wait on. The tests give a clock and a trim of their own.
trait World: Sync + 'static {
    /// The monotonic clock in nanoseconds (`None`: no trimming here).
    fn now(&self) -> Option<u64>;
    /// Ask the allocator to give its free pages back.
    fn trim(&self);
    /// Wait `nanos` nanoseconds.
    fn sleep(&self, nanos: u64);
    /// Run `body` on a new thread; false if none could be started.
    fn spawn(&self, body: Box<dyn FnOnce() + Send>) -> bool;
    /// Tells this process from the processes it was forked from (see [`Trims::waiter`]).
    fn process(&self) -> u64;
}

/// The trims of a process: when the last one started, and the thread that waits to run one
/// that was asked for too soon (module docs: "How often").
struct Trims {
    /// When the last trim started, in nanoseconds of the monotonic clock (0: none yet).
    started: AtomicU64,
    /// A trim was asked for too soon, since the waiting thread last looked.
    wanted: AtomicBool,
    /// [`World::process`] + 1 of the process in which a thread waits to trim (0: none). A
    /// child forked while a thread of its parent waited inherits the parent's value, which is
    /// not its own, and starts a thread of its own.
    waiter: AtomicU64,
    /// Trims queued on a domain that have not run yet ([`Queued`]).
    queued: AtomicUsize,
}

/// What [`Trims::claim`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    /// The caller may trim now.
    Won,
    /// Another thread claimed a trim after the caller looked: that trim starts after
    /// everything the caller freed before it asked.
    Taken,
    /// A trim started less than [`EVERY`] ago.
    TooSoon,
}

impl Trims {
    const fn new() -> Trims {
        Trims {
            started: AtomicU64::new(0),
            wanted: AtomicBool::new(false),
            waiter: AtomicU64::new(0),
            queued: AtomicUsize::new(0),
        }
    }

    /// A trim is wanted at `world.now()`: trim at once, on the calling thread, if the last
    /// one started at least [`EVERY`] ago, and otherwise make sure that a thread trims when
    /// that time is up. The unit tests' way in; maps ask the waiting thread
    /// ([`ask_waiter`](Self::ask_waiter)), so that no trim runs on a thread of the user's.
    #[cfg(test)]
    fn ask<W: World>(&'static self, world: &'static W) {
        let Some(now) = world.now() else {
            return;
        };
        match self.claim(now) {
            Claim::Won => world.trim(),
            Claim::Taken => {}
            Claim::TooSoon => self.ask_waiter(world),
        }
    }

    /// Have the waiting thread trim, when the second since the last trim is up (at once if
    /// it is already).
    fn ask_waiter<W: World>(&'static self, world: &'static W) {
        self.wanted.store(true, SeqCst);
        self.start_waiter(world);
    }

    /// The fork handler's step (module docs: "Forks"): a trim asked for or queued that has not
    /// run yet runs now, before the fork, whenever the last one started.
    #[cfg_attr(
        not(all(target_os = "linux", target_env = "gnu", not(rcukit_loom), not(miri))),
        allow(dead_code)
    )]
    fn before_fork<W: World>(&self, world: &W) {
        if self.wanted.load(SeqCst) || self.queued.load(SeqCst) != 0 {
            self.trim_regardless(world);
        }
    }

    /// Trim now, whenever the last trim started (a fork, or no thread to wait: module docs),
    /// and record the time.
    fn trim_regardless<W: World>(&self, world: &W) {
        if let Some(now) = world.now() {
            // Never moved back: a claim made meanwhile at a later time stands.
            self.started.fetch_max(now.max(1), Relaxed);
        }
        world.trim();
    }

    /// Whether a trim may start at `now`, recording it in `started` if so: none started in the
    /// [`EVERY`] before `now`, and no other thread claimed this turn first.
    fn claim(&self, now: u64) -> Claim {
        let last = self.started.load(Relaxed);
        if wait_left(last, now) > 0 {
            return Claim::TooSoon;
        }
        // `max(1)`: 0 means "never".
        match self
            .started
            .compare_exchange(last, now.max(1), Relaxed, Relaxed)
        {
            Ok(_) => Claim::Won,
            Err(_) => Claim::Taken,
        }
    }

    /// Start the thread that waits to trim, unless one of this process already waits (it
    /// then sees `wanted`).
    fn start_waiter<W: World>(&'static self, world: &'static W) {
        let me = world.process() + 1;
        let seen = self.waiter.load(SeqCst);
        if seen == me
            || self
                .waiter
                .compare_exchange(seen, me, SeqCst, SeqCst)
                .is_err()
        {
            return;
        }
        if !world.spawn(Box::new(move || self.wait(world, me))) {
            // No thread (module docs: "No thread"): trim now, on the asker.
            self.waiter.store(0, SeqCst);
            self.trim_regardless(world);
        }
    }

    /// The waiting thread (`me`: its value of `waiter`): sleep until a trim may start, trim,
    /// and go on as long as trims were asked for meanwhile.
    fn wait<W: World>(&'static self, world: &'static W, me: u64) {
        while let Some(now) = world.now() {
            let left = wait_left(self.started.load(Relaxed), now);
            if left > 0 {
                world.sleep(left);
                continue;
            }
            self.wanted.store(false, SeqCst);
            match self.claim(now) {
                Claim::Won => world.trim(),
                Claim::Taken => {}
                Claim::TooSoon => {
                    // A trim started since this thread looked, perhaps before some asker's
                    // frees: one more, a second after it.
                    self.wanted.store(true, SeqCst);
                    continue;
                }
            }
            self.waiter.store(0, SeqCst);
            if !self.wanted.load(SeqCst)
                || self.waiter.compare_exchange(0, me, SeqCst, SeqCst).is_err()
            {
                return;
            }
        }
        self.waiter.store(0, SeqCst);
    }
}

/// How long a trim must still wait at `now` when the last one started at `last` (0: it may
/// start now). A clock behind `last` is another clock than the one that recorded it (a
/// process moved into a time namespace since, module docs: "Clocks"): no wait.
fn wait_left(last: u64, now: u64) -> u64 {
    if last == 0 || now < last {
        return 0;
    }
    (last.saturating_add(EVERY_NANOS)).saturating_sub(now)
}

/// The system: glibc's trim, the monotonic clock and one of rcukit's own threads.
struct System;

impl World for System {
    fn now(&self) -> Option<u64> {
        monotonic_nanos()
    }

    fn trim(&self) {
        trim_allocator();
    }

    fn sleep(&self, nanos: u64) {
        std::thread::sleep(Duration::from_nanos(nanos));
    }

    fn spawn(&self, body: Box<dyn FnOnce() + Send>) -> bool {
        // Detached when dropped; started without `std`'s thread lock (see `threads`).
        crate::threads::spawn("rcukit-trim".to_string(), body).is_ok()
    }

    fn process(&self) -> u64 {
        crate::sync::fork::generation()
    }
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

#[cfg(all(target_os = "linux", target_env = "gnu", not(rcukit_loom), not(miri)))]
fn trim_allocator() {
    // SAFETY: `malloc_trim` has no preconditions; it takes each arena's lock itself, so any
    // thread may call it at any time, and it only releases pages of free blocks.
    unsafe { libc::malloc_trim(0) };
}

/// Off glibc, and under Miri (whose allocator is its own and which cannot call
/// `malloc_trim`): nothing to ask.
#[cfg(not(all(target_os = "linux", target_env = "gnu", not(rcukit_loom), not(miri))))]
fn trim_allocator() {}

#[cfg(all(test, unix, not(rcukit_loom), not(miri)))]
mod tests;
