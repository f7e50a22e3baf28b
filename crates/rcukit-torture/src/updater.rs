//! Updater threads (rcutorture's "fake writers"): grace periods by every path, concurrently
//! with the writer's, without touching the pipe.
//!
//! They create the concurrent normal and expedited traffic that the writer's grace periods
//! batch with or piggyback on, check cookies around every wait, and run rcutorture's barrier
//! test: queue a few callbacks, call `barrier()`, and check that every one of them ran.

use crate::flavor::{Flavor, UpdateKind};
use crate::shared::Shared;
use crate::update::{pick, wait_for_gp};
use fastrand::Rng;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// The body of an updater thread.
pub(crate) fn run<F: Flavor>(shared: &Shared<F>, seed: u64) {
    let mut rng = Rng::with_seed(seed);
    let flavor = &shared.flavor;
    while !shared.stop.load(Relaxed) {
        let kind = pick(&shared.kinds, &mut rng);
        match kind {
            UpdateKind::Call => flavor.call(|| {
                std::hint::black_box(());
            }),
            UpdateKind::Retire => flavor.retire(Box::new([0u64; 8])),
            UpdateKind::Barrier => barrier_test(shared, &mut rng),
            waiting => wait_for_gp(shared, waiting, &mut rng),
        }
        shared.counters.updater_ops[kind.index()].fetch_add(1, Relaxed);
        // rcutorture's fake writers sleep up to ten jiffies between updates.
        std::thread::sleep(Duration::from_micros(rng.u64(0..=5_000)));
    }
}

/// Counts its drop: an object retired by the barrier test.
struct CountsDrop(Arc<AtomicU64>);

impl Drop for CountsDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Relaxed);
    }
}

/// Rounds of: queue a few callbacks, retire a few counted objects, `barrier()`, and check that
/// all of them ran. Every updater does this, back to back, so `barrier()` calls race each
/// other, the writer's, the bursts' and the worker's steals of the retiring threads' lists.
/// Closures are queued before the objects: the objects are then still in this thread's own
/// list when `barrier()` is called (a closure queued after them would first move them to the
/// worker), which is the case the worker's steal for a barrier must get right.
fn barrier_test<F: Flavor>(shared: &Shared<F>, rng: &mut Rng) {
    let flavor = &shared.flavor;
    for _ in 0..rng.u64(1..=8) {
        let calls = rng.u64(1..=16);
        let retires = if flavor.supports(UpdateKind::Retire) {
            rng.u64(0..=300)
        } else {
            0
        };
        let ran = Arc::new(AtomicU64::new(0));
        for _ in 0..calls {
            let ran = ran.clone();
            flavor.call(move || {
                ran.fetch_add(1, Relaxed);
            });
        }
        for _ in 0..retires {
            flavor.retire(Box::new(CountsDrop(ran.clone())));
        }
        flavor.barrier();
        shared.counters.barrier_checks.fetch_add(1, Relaxed);
        let missing = (calls + retires).saturating_sub(ran.load(Relaxed));
        if missing > 0 {
            shared
                .counters
                .error(&shared.counters.barrier_errors, missing);
        }
    }
}
