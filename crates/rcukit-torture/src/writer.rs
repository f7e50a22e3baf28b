//! The writer: publishes a new element, removes the old one and retires it by a random path
//! (rcutorture's `rcu_torture_writer`).
//!
//! * Paths that wait (`synchronize*`, `cond_*`, polling loops): the old element joins the
//!   writer's list of removed elements, and after the wait every element of the list ages by
//!   one (rcutorture's `rcu_torture_pipe_update`).
//! * `call`: the old element is handed to a callback that ages it and re-posts itself until
//!   the element is freed: about nine chained grace periods through the callback machinery.
//! * `retire`: the same chain built from boxes whose *drop* ages the element and retires the
//!   next box, exercising the `retire` path.
//! * `barrier`: a `call` chain followed by `barrier()`; when `barrier()` returns, the chain's
//!   first callback must have run, so the element must be at age 2 at least (`rtbe`).
//!
//! When the run stops, the writer waits for grace periods until its removed list is empty, so
//! that the engine can check that every element came back to the free list.

use crate::flavor::{Flavor, UpdateKind};
use crate::shared::Shared;
use crate::update::{pick, wait_for_gp};
use fastrand::Rng;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// The body of the writer thread.
pub(crate) fn run<F: Flavor>(shared: &Arc<Shared<F>>, seed: u64) {
    let mut rng = Rng::with_seed(seed);
    let mut removed: Vec<usize> = Vec::new();
    let flavor = &shared.flavor;
    while !shared.stop.load(Relaxed) {
        let Some(old) = shared.pool.publish_new() else {
            // Every element is removed and waiting: let a grace period pass.
            shared.counters.alloc_failures.fetch_add(1, Relaxed);
            flavor.synchronize();
            shared.pool.age_all(&mut removed);
            continue;
        };
        let kind = pick(&shared.kinds, &mut rng);
        match kind {
            UpdateKind::Call => call_chain(shared.clone(), old),
            UpdateKind::Retire => retire_chain(shared, old),
            UpdateKind::Barrier => {
                call_chain(shared.clone(), old);
                flavor.barrier();
                shared.counters.barrier_checks.fetch_add(1, Relaxed);
                if shared.pool.age(old) < 2 {
                    shared.counters.error(&shared.counters.barrier_errors, 1);
                }
            }
            waiting => {
                removed.push(old);
                wait_for_gp(shared, waiting, &mut rng);
                shared.pool.age_all(&mut removed);
            }
        }
        shared.counters.writer_updates[kind.index()].fetch_add(1, Relaxed);
        // rcutorture's writer sleeps 0.5-1 ms between updates; a little less here, and
        // sometimes not at all, so that back-to-back updates happen too.
        if rng.u32(0..4) != 0 {
            std::thread::sleep(Duration::from_micros(rng.u64(0..=500)));
        }
    }
    while !removed.is_empty() {
        flavor.synchronize();
        shared.pool.age_all(&mut removed);
    }
}

/// Hand removed element `index` to a chain of callbacks that age it once per grace period.
fn call_chain<F: Flavor>(shared: Arc<Shared<F>>, index: usize) {
    shared.counters.chains_in_flight.fetch_add(1, Relaxed);
    call_link(shared, index);
}

fn call_link<F: Flavor>(shared: Arc<Shared<F>>, index: usize) {
    let next = shared.clone();
    shared.flavor.call(move || {
        if next.pool.age_one(index) {
            next.counters.chains_in_flight.fetch_sub(1, Relaxed);
        } else {
            call_link(next, index);
        }
    });
}

/// A box whose drop (after a grace period) ages its element and retires the next link.
struct RetireLink<F: Flavor> {
    shared: Arc<Shared<F>>,
    index: usize,
}

impl<F: Flavor> Drop for RetireLink<F> {
    fn drop(&mut self) {
        if self.shared.pool.age_one(self.index) {
            self.shared.counters.chains_in_flight.fetch_sub(1, Relaxed);
        } else {
            self.shared.flavor.retire(Box::new(RetireLink {
                shared: self.shared.clone(),
                index: self.index,
            }));
        }
    }
}

fn retire_chain<F: Flavor>(shared: &Arc<Shared<F>>, index: usize) {
    shared.counters.chains_in_flight.fetch_add(1, Relaxed);
    shared.flavor.retire(Box::new(RetireLink {
        shared: shared.clone(),
        index,
    }));
}
