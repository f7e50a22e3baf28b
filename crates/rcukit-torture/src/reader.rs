//! Reader threads: randomly extended, nested critical sections that record what they saw.
//!
//! Each outermost critical section (rcutorture's `rcu_torture_one_read`):
//!
//! 1. enters a read-side critical section and, in one section out of four, takes a cookie
//!    (usually `get_state`, now and then `start_poll` or `start_poll_expedited`, which make the
//!    domain start a grace period that must wait for this very reader);
//! 2. loads the current element and checks its `mbtest` (publish/subscribe);
//! 3. delays at random: spins, yields, short sleeps and rare sleeps of milliseconds;
//! 4. nests up to two more sections, each loading the current element again;
//! 5. now and then queues a `call()` from inside the section (an update from a reader is
//!    legal; a wait is not);
//! 6. before leaving: polls the cookie (it must *not* have expired), takes a second cookie to
//!    count the grace periods that completed meanwhile (Reader Batch), and reads the age of
//!    every element it loaded (Reader Pipe; anything above 1 is an error).
//!
//! Only sampled sections take cookies, because a cookie costs a full fence: the others keep
//! the read side exactly as light as production readers, which is what the membarrier mode
//! must be tested with.

use crate::counters::LocalHistogram;
use crate::engine::Shared;
use crate::flavor::{Flavor, UpdateKind};
use fastrand::Rng;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// Deepest nesting of critical sections a reader uses (outermost included).
const MAX_DEPTH: usize = 3;

/// What one reader thread counts before it flushes into the shared counters.
#[derive(Default)]
struct Local {
    pipe: LocalHistogram,
    batch: LocalHistogram,
    reads: u64,
    loads: u64,
    cookie_checks: u64,
    calls: u64,
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
        *self = Local::default();
    }
}

/// The body of a reader thread: read until the run stops or, if `lifetime` is set, until it
/// has passed (the engine then respawns the reader in a new thread).
pub(crate) fn run<F: Flavor>(shared: &Shared<F>, seed: u64, lifetime: Option<Duration>) {
    let mut rng = Rng::with_seed(seed);
    let mut local = Local::default();
    let deadline = lifetime.map(|d| Instant::now() + d);
    let mut n: u64 = 0;
    let mut registration = shared.flavor.register_reader();
    while !shared.stop.load(Relaxed) {
        one_read(shared, &registration, &mut rng, &mut local);
        shared.flavor.quiescent_state(&mut registration);
        n += 1;
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
    drop(registration);
    local.flush(shared);
}

/// A random delay inside a critical section (rcutorture's `rcu_read_delay`).
fn delay(rng: &mut Rng) {
    match rng.u32(0..8192) {
        0 => std::thread::sleep(Duration::from_micros(rng.u64(1_000..=10_000))),
        1..=31 => std::thread::sleep(Duration::from_micros(rng.u64(10..=200))),
        32..=95 => std::thread::yield_now(),
        _ => {
            for _ in 0..rng.u32(0..64) {
                std::hint::spin_loop();
            }
        }
    }
}

/// Elements one outermost section has loaded.
struct Seen {
    elements: [usize; MAX_DEPTH],
    len: usize,
}

impl Seen {
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

fn one_read<F: Flavor>(
    shared: &Shared<F>,
    registration: &F::Reader<'_>,
    rng: &mut Rng,
    local: &mut Local,
) {
    let flavor = &shared.flavor;
    let sampled = flavor.has_cookies() && rng.u32(0..4) == 0;
    let guard = flavor.read(registration);
    let cookie = sampled.then(|| match rng.u32(0..512) {
        0 if flavor.supports(UpdateKind::PollExp) => flavor.start_poll_expedited(),
        1..=4 if flavor.supports(UpdateKind::Poll) => flavor.start_poll(),
        _ => flavor.get_state(),
    });
    let mut seen = Seen {
        elements: [0; MAX_DEPTH],
        len: 0,
    };
    seen.load(shared, local);
    delay(rng);
    let depth = rng.u32(0..MAX_DEPTH as u32);
    if depth > 0 {
        nested(shared, registration, rng, local, &mut seen, depth);
    }
    if rng.u32(0..1024) == 0 && flavor.supports(UpdateKind::Call) {
        flavor.call(|| {
            std::hint::black_box(());
        });
        local.calls += 1;
    }
    delay(rng);

    if let Some(start) = cookie {
        local.cookie_checks += 1;
        if flavor.poll(&start) {
            shared
                .counters
                .error(&shared.counters.reader_cookie_errors, 1);
        }
        let end = flavor.get_state();
        let gps = flavor.gps_between(&start, &end);
        local.batch.record(gps.total);
        if gps.worst_engine > 1 {
            shared.counters.error(&shared.counters.batch_errors, 1);
        }
    }
    for &index in &seen.elements[..seen.len] {
        let age = shared.pool.age(index);
        local.pipe.record(u64::from(age));
        if age > 1 {
            shared.counters.failed.store(true, Relaxed);
        }
    }
    local.reads += 1;
    drop(guard);
}

fn nested<F: Flavor>(
    shared: &Shared<F>,
    registration: &F::Reader<'_>,
    rng: &mut Rng,
    local: &mut Local,
    seen: &mut Seen,
    depth: u32,
) {
    let _guard = shared.flavor.read(registration);
    seen.load(shared, local);
    delay(rng);
    if depth > 1 && rng.bool() {
        nested(shared, registration, rng, local, seen, depth - 1);
    }
}
