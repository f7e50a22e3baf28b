//! Reader threads: randomly extended, nested critical sections that record what they saw.
//!
//! Each outermost critical section (rcutorture's `rcu_torture_one_read`):
//!
//! 1. enters a read-side critical section and, in one section out of four, takes a cookie
//!    (usually `get_state`, now and then `start_poll` or `start_poll_expedited`, which make the
//!    domain start a grace period that must wait for this very reader);
//! 2. loads the current element and checks its `mbtest` (publish/subscribe);
//! 3. delays at random: spins, yields, short sleeps and rare sleeps of milliseconds (busy
//!    waits of the same lengths for flavors whose readers must not block, see
//!    [`Flavor::readers_may_sleep`]);
//! 4. nests up to two more sections, each loading the current element again;
//! 5. now and then queues a `call()` from inside the section (an update from a reader is
//!    legal; a wait is not);
//! 6. before leaving: polls the cookie (it must *not* have expired), takes a second cookie to
//!    count the grace periods that completed meanwhile (Reader Batch), and reads the age of
//!    every element it loaded (Reader Pipe; anything above 1 is an error).
//!
//! In a map run ([`crate::map`]), each outermost section also takes a guard of the map's domain,
//! looks up one to three keys (and as many in each nested section), checks what it found,
//! and reads the age of every value it found just before the guard drops (Map Pipe).
//!
//! Between sections the reader calls [`Flavor::quiescent_state`] and now and then pauses:
//! sleeps of 10-200 µs or, rarely, 1-10 ms, and offline periods with nothing in them, all
//! through [`Flavor::offline_while`] (a QSBR reader goes offline around them and comes back
//! online before its next section, which exercises the one step of QSBR that needs a fence).
//!
//! # Owned sections
//!
//! For a flavor with owned sections ([`Flavor::read_owned`]), a fraction
//! ([`Config::owned`](crate::Config::owned)) of the outermost sections are owned sections:
//! some sleep, some end on a helper thread, and each makes the checks of a section's end
//! wherever it ends. See [`owned`].
//!
//! # QSBR bursts
//!
//! For a flavor whose protection lasts until the next quiescent state
//! ([`Flavor::protects_until_quiescent_state`]), a quiescent state comes only after a burst of
//! 1 to 32 sections. The reader keeps the first element of every section of the burst, and
//! one burst in four takes a cookie when it starts; just before the quiescent state it checks
//! that none of those elements aged past 1, that the cookie has not expired and that each
//! engine completed at most one grace period since it was taken. The whole burst is one
//! critical section: that is QSBR's promise.
//!
//! Only sampled sections take cookies, because a cookie costs a full fence: the others keep
//! the read side exactly as light as production readers, which is what the membarrier mode
//! must be tested with.
//!
//! # Reading through thread exit
//!
//! With faults on, every other reader thread that reaches the end of its lifetime (the first,
//! the third, ...: so any run in which a reader's lifetime ended reads through an exit) does
//! not leave directly: its registration moves into a thread-local of its own, which the thread
//! used before any of rcukit's, so it is destroyed *after* rcukit's per-thread tables. Its
//! destructor keeps reading (still online, for a QSBR reader; with guards taken after rcukit's
//! table is gone, for the others), with every check of a normal section, and only then drops
//! the registration. A grace period that ignored such a reader would show in the Reader Pipe.

use crate::counters::LocalHistogram;
use crate::flavor::{wait_in_section, Flavor, UpdateKind};
use crate::handoff::{Seen, MAX_DEPTH};
use crate::map::{MapLocal, MapSection};
use crate::shared::Shared;
use fastrand::Rng;
use std::cell::RefCell;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) mod owned;

/// Sections a reader reads in its thread-exit destructor (see the module docs).
const EXIT_SECTIONS: u64 = 64;

/// Runs the closure it holds when the thread's thread-locals are destroyed.
struct AtExit(RefCell<Option<Box<dyn FnOnce()>>>);

impl Drop for AtExit {
    fn drop(&mut self) {
        if let Some(f) = self.0.get_mut().take() {
            f();
        }
    }
}

thread_local! {
    static AT_EXIT: AtExit = const { AtExit(RefCell::new(None)) };
}

/// Most sections between two quiescent states, for flavors that protect until the next one.
const MAX_BURST: usize = 32;

/// What one reader thread counts before it flushes into the shared counters.
#[derive(Default)]
struct Local {
    pipe: LocalHistogram,
    batch: LocalHistogram,
    reads: u64,
    loads: u64,
    cookie_checks: u64,
    calls: u64,
    pauses: u64,
    owned_sections: u64,
    owned_moved: u64,
    owned_slept: u64,
    map: MapLocal,
}

impl Local {
    fn flush<F: Flavor>(&mut self, shared: &Shared<F>) {
        let c = &shared.counters;
        c.pipe.add(&self.pipe);
        c.batch.add(&self.batch);
        c.reads.fetch_add(self.reads, Relaxed);
        c.loads.fetch_add(self.loads, Relaxed);
        c.reader_cookie_checks
            .fetch_add(self.cookie_checks, Relaxed);
        c.reader_calls.fetch_add(self.calls, Relaxed);
        c.reader_pauses.fetch_add(self.pauses, Relaxed);
        c.owned_sections.fetch_add(self.owned_sections, Relaxed);
        c.owned_moved.fetch_add(self.owned_moved, Relaxed);
        c.owned_slept.fetch_add(self.owned_slept, Relaxed);
        if let Some(m) = &shared.map {
            self.map.flush(m);
        }
        *self = Local::default();
    }
}

/// The body of a reader thread: read until the run stops or, if `lifetime` is set, until it
/// has passed (the engine then respawns the reader in a new thread).
pub(crate) fn run<F: Flavor>(shared: &Arc<Shared<F>>, seed: u64, lifetime: Option<Duration>) {
    if lifetime.is_some() {
        // Used before any of rcukit's thread-locals, so destroyed after all of them (whether
        // this thread reads through its exit is decided when its lifetime ends).
        AT_EXIT.with(|_| ());
    }
    let owner = shared.clone();
    // SAFETY: `owner` keeps the flavor alive for as long as `registration` (which borrows it)
    // exists: both move into the thread-exit closure below, which drops `registration` first,
    // or both are dropped at the end of this function, `registration` first.
    let flavor: &'static F = unsafe { &*std::ptr::addr_of!(owner.flavor) };
    let shared: &Shared<F> = shared;
    let mut rng = Rng::with_seed(seed);
    let mut local = Local::default();
    let deadline = lifetime.map(|d| Instant::now() + d);
    let bursts = flavor.protects_until_quiescent_state();
    let mut n: u64 = 0;
    let mut registration = flavor.register_reader();
    let mut burst = Burst::start(shared, &mut rng, bursts);
    while !shared.stop.load(Relaxed) {
        let first = one_read(shared, &registration, &mut rng, &mut local);
        n += 1;
        if burst.add(first) {
            burst.check(shared, &mut local);
            flavor.quiescent_state(&mut registration);
            pause(flavor, &mut registration, &mut rng, &mut local);
            burst = Burst::start(shared, &mut rng, bursts);
        }
        if n % 64 == 0 {
            if n % 512 == 0 {
                local.flush(shared);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            // Let the updaters run on a small machine; readers are otherwise CPU-bound.
            std::thread::yield_now();
        }
    }
    let through_exit = lifetime.is_some()
        && !shared.stop.load(Relaxed)
        && shared.lifetimes_ended.fetch_add(1, Relaxed) % 2 == 0;
    if through_exit {
        AT_EXIT.with(|a| {
            *a.0.borrow_mut() = Some(Box::new(move || {
                let shared: &Shared<F> = &owner;
                let n = read_during_exit(shared, &mut registration, &mut rng, &mut local);
                shared.counters.reads_during_exit.fetch_add(n, Relaxed);
                drop(registration);
                local.flush(shared);
            }));
        });
        return;
    }
    // Leaving in the middle of a burst is fine: unregistering is a quiescent state.
    drop(registration);
    local.flush(shared);
}

/// The sections a reader reads in its thread-exit destructor (see the module docs): at least
/// [`EXIT_SECTIONS`], ending with a complete burst. Returns how many it read.
fn read_during_exit<F: Flavor>(
    shared: &Shared<F>,
    registration: &mut F::Reader<'_>,
    rng: &mut Rng,
    local: &mut Local,
) -> u64 {
    let flavor = &shared.flavor;
    let bursts = flavor.protects_until_quiescent_state();
    let mut n = 0;
    let mut burst = Burst::start(shared, rng, bursts);
    loop {
        let first = one_read(shared, registration, rng, local);
        n += 1;
        if burst.add(first) {
            burst.check(shared, local);
            if n >= EXIT_SECTIONS {
                return n;
            }
            flavor.quiescent_state(registration);
            burst = Burst::start(shared, rng, bursts);
        }
    }
}

/// The sections since the last quiescent state, for flavors that protect until the next one.
struct Burst<C> {
    /// Sections still to run before the next quiescent state.
    left: usize,
    /// The first element each section of the burst loaded.
    elements: [usize; MAX_BURST],
    len: usize,
    /// A cookie taken when the burst started (one burst in four).
    cookie: Option<C>,
}

impl<C: Copy> Burst<C> {
    /// A burst of one section (flavors whose guards end the protection), or of 1 to
    /// [`MAX_BURST`] sections.
    fn start<F: Flavor<Cookie = C>>(shared: &Shared<F>, rng: &mut Rng, bursts: bool) -> Self {
        let flavor = &shared.flavor;
        let (left, cookie) = if bursts {
            let sampled = flavor.has_cookies() && rng.u32(0..4) == 0;
            (
                rng.usize(1..=MAX_BURST),
                sampled.then(|| flavor.get_state()),
            )
        } else {
            (1, None)
        };
        Burst {
            left,
            elements: [0; MAX_BURST],
            len: 0,
            cookie,
        }
    }

    /// Count a section that first loaded `element`; true when the burst is over.
    fn add(&mut self, element: usize) -> bool {
        if self.len < MAX_BURST {
            self.elements[self.len] = element;
            self.len += 1;
        }
        self.left -= 1;
        self.left == 0
    }

    /// The end of a burst of more than one section: the checks of a section's end, for the
    /// whole burst. (A burst of one section was checked by the section itself.)
    fn check<F: Flavor<Cookie = C>>(&self, shared: &Shared<F>, local: &mut Local) {
        if self.len <= 1 && self.cookie.is_none() {
            return;
        }
        if let Some(start) = &self.cookie {
            check_cookie(shared, start, local);
        }
        for &index in &self.elements[..self.len] {
            record_age(shared, index, local);
        }
    }
}

/// Between sections: now and then a sleep or an empty offline period, offline where the
/// flavor has such a state.
fn pause<F: Flavor>(
    flavor: &F,
    registration: &mut F::Reader<'_>,
    rng: &mut Rng,
    local: &mut Local,
) {
    let sleep = match rng.u32(0..8192) {
        0 => Some(Duration::from_micros(rng.u64(1_000..=10_000))),
        1..=31 => Some(Duration::from_micros(rng.u64(10..=200))),
        // One in sixteen: offline and straight back online.
        32..=543 => None,
        _ => return,
    };
    local.pauses += 1;
    flavor.offline_while(registration, || {
        if let Some(d) = sleep {
            std::thread::sleep(d);
        }
    });
}

/// A random delay inside a critical section (rcutorture's `rcu_read_delay`); the sleeps are
/// busy waits where `may_sleep` is false.
fn delay(rng: &mut Rng, may_sleep: bool) {
    let wait = |d: Duration| wait_in_section(d, may_sleep);
    match rng.u32(0..8192) {
        0 => wait(Duration::from_micros(rng.u64(1_000..=10_000))),
        1..=31 => wait(Duration::from_micros(rng.u64(10..=200))),
        32..=95 => std::thread::yield_now(),
        _ => {
            for _ in 0..rng.u32(0..64) {
                std::hint::spin_loop();
            }
        }
    }
}

/// A reader's end-of-section look at an element it loaded: its age (Reader Pipe; above 1 is
/// an error).
fn record_age<F: Flavor>(shared: &Shared<F>, index: usize, local: &mut Local) {
    let age = shared.pool.age(index);
    local.pipe.record(u64::from(age));
    if age > 1 {
        shared.counters.failed.store(true, Relaxed);
    }
}

/// A cookie taken inside the critical section that is ending: it must not have expired, and
/// each engine may have completed at most one grace period since (Reader Batch).
fn check_cookie<F: Flavor>(shared: &Shared<F>, start: &F::Cookie, local: &mut Local) {
    let flavor = &shared.flavor;
    local.cookie_checks += 1;
    if flavor.poll(start) {
        shared
            .counters
            .error(&shared.counters.reader_cookie_errors, 1);
    }
    let end = flavor.get_state();
    let gps = flavor.gps_between(start, &end);
    local.batch.record(gps.total);
    if gps.worst_engine > 1 {
        shared.counters.error(&shared.counters.batch_errors, 1);
    }
}

impl Seen {
    /// Load the current element, check its `mbtest` and keep it (up to [`MAX_DEPTH`]).
    fn load<F: Flavor>(&mut self, shared: &Shared<F>, local: &mut Local) {
        let index = shared.pool.current();
        local.loads += 1;
        if shared.pool.mbtest(index) == 0 {
            shared.counters.error(&shared.counters.mbtest_errors, 1);
        }
        if self.len < MAX_DEPTH {
            self.elements[self.len] = index;
            self.len += 1;
        }
    }
}

/// Inside a section that just began: one time in four, a cookie (usually `get_state`, now and
/// then `start_poll` or `start_poll_expedited`) to check when the section ends.
fn sample_cookie<F: Flavor>(shared: &Shared<F>, rng: &mut Rng) -> Option<F::Cookie> {
    let flavor = &shared.flavor;
    let sampled = flavor.has_cookies() && rng.u32(0..4) == 0;
    sampled.then(|| match rng.u32(0..512) {
        0 if flavor.supports(UpdateKind::PollExp) => flavor.start_poll_expedited(),
        1..=4 if flavor.supports(UpdateKind::Poll) => flavor.start_poll(),
        _ => flavor.get_state(),
    })
}

/// One outermost section (an owned one, now and then); returns the first element it loaded.
fn one_read<F: Flavor>(
    shared: &Shared<F>,
    registration: &F::Reader<'_>,
    rng: &mut Rng,
    local: &mut Local,
) -> usize {
    if let Some(section) = owned::maybe_enter(shared, rng) {
        return owned::one_read(shared, registration, rng, local, section);
    }
    let flavor = &shared.flavor;
    let may_sleep = flavor.readers_may_sleep();
    let guard = flavor.read(registration);
    let cookie = sample_cookie(shared, rng);
    let mut seen = Seen::new();
    seen.load(shared, local);
    let qsbr = flavor.qsbr_thread(registration);
    let mut map = shared.map.as_ref().map(|m| m.section(qsbr, may_sleep));
    if let Some(section) = &mut map {
        section.lookups(&shared.counters, rng, &mut local.map);
    }
    delay(rng, may_sleep);
    let depth = rng.u32(0..MAX_DEPTH as u32);
    if depth > 0 {
        nested(
            shared,
            registration,
            rng,
            local,
            &mut seen,
            map.as_mut(),
            depth,
        );
    }
    if rng.u32(0..1024) == 0 && flavor.supports(UpdateKind::Call) {
        flavor.call(|| {
            std::hint::black_box(());
        });
        local.calls += 1;
    }
    delay(rng, may_sleep);

    if let Some(section) = map {
        section.finish(&shared.counters, &mut local.map);
    }
    if let Some(start) = &cookie {
        check_cookie(shared, start, local);
    }
    for &index in &seen.elements[..seen.len] {
        record_age(shared, index, local);
    }
    local.reads += 1;
    drop(guard);
    seen.elements[0]
}

fn nested<F: Flavor>(
    shared: &Shared<F>,
    registration: &F::Reader<'_>,
    rng: &mut Rng,
    local: &mut Local,
    seen: &mut Seen,
    mut map: Option<&mut MapSection<'_>>,
    depth: u32,
) {
    let _guard = shared.flavor.read(registration);
    seen.load(shared, local);
    if let Some(section) = map.as_deref_mut() {
        section.lookups(&shared.counters, rng, &mut local.map);
    }
    delay(rng, shared.flavor.readers_may_sleep());
    if depth > 1 && rng.bool() {
        nested(shared, registration, rng, local, seen, map, depth - 1);
    }
}
