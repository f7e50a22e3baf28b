//! Fault injection: things that go wrong in real programs, injected while the torture runs.
//!
//! * **Reader exits**: with faults on, every reader thread lives 0.1-1 s, then exits and the
//!   engine starts a new one in its slot (rcutorture's read-exit test). Each exit unregisters a
//!   reader record while grace periods scan the registry.
//! * **Panicking callbacks**: about once a second, in turn: a `call()` whose callback panics; a
//!   `call()` whose callback panics with a payload whose own `Drop` panics; a retired object
//!   whose `Drop` panics that way (dropped by a worker or by a retiring thread). The domain
//!   must catch each, count it in `callback_panics` and keep running callbacks; no library
//!   thread may die and no state may be left half-changed. Panics are raised with
//!   `resume_unwind`, which skips the panic hook, so they print only the domain's own report.
//!   At the end, the domain's count must equal the number injected.
//! * **Re-entrant drops**: about every three seconds, objects are retired whose `Drop` uses the
//!   library again (retires another object, queues a closure, takes a cookie and polls it,
//!   and, where the flavor's readers need no registration, enters a read-side critical
//!   section), then `barrier()` twice: every object and everything its drop queued must have
//!   run.
//! * **A stalled reader**: about every three seconds, a reader holds its critical section past
//!   the domain's stall timeout, after asking for an expedited grace period so that one is
//!   certainly waiting for it. It keeps holding until the domain's stall count goes up (the
//!   report appeared), then leaves; a stall that is never reported (within 50 timeouts) is an
//!   error. The other threads keep going: the run continues. For a QSBR flavor the injector
//!   registers itself for the length of the stall: an online thread that announces no
//!   quiescent state is exactly what a QSBR stall is. For a flavor without polling (RecSeq) no
//!   grace period is requested; the writer's next wait is the one that stalls.
//! * **Callback bursts**: about every three seconds, four times the backlog threshold of
//!   `call()`s in a tight loop (every other burst: `retire()`s of counted objects, which the
//!   domain partly drops on the bursting thread itself), then `barrier()`. Every callback of
//!   the burst must run, every retired object be dropped exactly once; the
//!   report shows how far the backlog went past the threshold and how many expedited grace
//!   periods ran during the bursts (the backlog control asks for them).
//!
//! Faults a flavor cannot have are left out: panics and bursts need `call`, stalls a stall
//! timeout, bursts a backlog threshold.

use crate::flavor::{Flavor, UpdateKind};
use crate::shared::Shared;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The payload of injected callback panics.
pub const INJECTED_PANIC: &str = "rcukit-torture: injected callback panic";

/// A panic payload whose own `Drop` panics again.
struct PanickingPayload;

impl Drop for PanickingPayload {
    fn drop(&mut self) {
        std::panic::resume_unwind(Box::new(
            "rcukit-torture: injected panic in a payload's drop",
        ));
    }
}

/// A retired object whose `Drop` panics with a [`PanickingPayload`].
struct PanickingDrop;

impl Drop for PanickingDrop {
    fn drop(&mut self) {
        std::panic::resume_unwind(Box::new(PanickingPayload));
    }
}

const PANIC_EVERY: Duration = Duration::from_secs(1);
const STALL_EVERY: Duration = Duration::from_secs(3);
const BURST_EVERY: Duration = Duration::from_secs(3);
/// A stall that has not been reported after this many stall timeouts is an error.
const STALL_PATIENCE: u32 = 50;
/// A burst queues this many times the backlog threshold.
pub const BURST_FACTOR: u64 = 4;

/// The body of the fault-injection thread.
pub(crate) fn run<F: Flavor>(shared: &Arc<Shared<F>>) {
    let flavor = &shared.flavor;
    let can_call = flavor.supports(UpdateKind::Call);
    let start = Instant::now();
    let mut next_panic = start + PANIC_EVERY / 2;
    let mut next_stall = start + STALL_EVERY / 2;
    let mut next_burst = start + BURST_EVERY * 5 / 6;
    let mut next_reentrant = start + REENTRANT_EVERY / 3;
    let mut bursts = 0u64;
    let mut panics = 0u64;
    let can_retire = flavor.supports(UpdateKind::Retire);
    while !shared.stop.load(Relaxed) {
        let now = Instant::now();
        if can_call && now >= next_panic {
            panics += 1;
            inject_panic(shared, panics % 3, can_retire);
            next_panic = now + PANIC_EVERY;
        }
        if can_call && can_retire && now >= next_reentrant {
            reentrant(shared);
            next_reentrant = Instant::now() + REENTRANT_EVERY;
        }
        if let Some(timeout) = flavor.stall_timeout() {
            if now >= next_stall {
                stall(shared, timeout);
                next_stall = Instant::now() + STALL_EVERY;
            }
        }
        if let Some(threshold) = flavor.backlog_callbacks() {
            if can_call && now >= next_burst {
                bursts += 1;
                burst(shared, threshold, can_retire && bursts % 2 == 0);
                next_burst = Instant::now() + BURST_EVERY;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Queue one callback that panics: `kind` 0, a plain panic in a closure; 1, a closure whose
/// panic payload panics again when dropped; 2 (with `retire`), a retired object whose `Drop`
/// panics that way.
fn inject_panic<F: Flavor>(shared: &Shared<F>, kind: u64, retire: bool) {
    shared.faults.panics_injected.fetch_add(1, Relaxed);
    match kind {
        0 => shared
            .flavor
            .call(|| std::panic::resume_unwind(Box::new(INJECTED_PANIC))),
        2 if retire => shared.flavor.retire(Box::new(PanickingDrop)),
        _ => shared
            .flavor
            .call(|| std::panic::resume_unwind(Box::new(PanickingPayload))),
    }
}

/// A retired object whose `Drop` uses the library again (see the module docs).
struct Reentrant<F: Flavor> {
    shared: Arc<Shared<F>>,
    done: Arc<AtomicU64>,
}

impl<F: Flavor> Drop for Reentrant<F> {
    fn drop(&mut self) {
        let flavor = &self.shared.flavor;
        self.shared.faults.reentrant_drops.fetch_add(1, Relaxed);
        flavor.retire(Box::new(CountsDrop(self.done.clone())));
        let done = self.done.clone();
        flavor.call(move || {
            done.fetch_add(1, Relaxed);
        });
        if flavor.has_cookies() {
            let cookie = flavor.get_state();
            let _ = flavor.poll(&cookie);
        }
        if !flavor.protects_until_quiescent_state() {
            // Readers of this flavor need no registration: read from inside a drop.
            let registration = flavor.register_reader();
            drop(flavor.read(&registration));
        }
    }
}

/// Objects per round of re-entrant drops.
const REENTRANT_OBJECTS: u64 = 2_000;
const REENTRANT_EVERY: Duration = Duration::from_secs(3);

/// Retire objects whose drops re-enter the library, then `barrier()` twice: the first covers
/// the objects, the second what their drops queued (all queued before it was called).
fn reentrant<F: Flavor>(shared: &Arc<Shared<F>>) {
    let flavor = &shared.flavor;
    let done = Arc::new(AtomicU64::new(0));
    for _ in 0..REENTRANT_OBJECTS {
        flavor.retire(Box::new(Reentrant {
            shared: shared.clone(),
            done: done.clone(),
        }));
    }
    flavor.barrier();
    flavor.barrier();
    shared.faults.reentrant_rounds.fetch_add(1, Relaxed);
    let done = done.load(Relaxed);
    if done != 2 * REENTRANT_OBJECTS {
        shared.faults.problem(
            &shared.counters,
            format!(
                "{REENTRANT_OBJECTS} objects with re-entrant drops: {done} of the {} callbacks                  their drops queued had run after two barriers",
                2 * REENTRANT_OBJECTS
            ),
        );
    }
}

fn stall<F: Flavor>(shared: &Shared<F>, timeout: Duration) {
    let flavor = &shared.flavor;
    let faults = &shared.faults;
    let before = flavor.stats().stalls;
    // Registered only for the length of the stall: the injector also waits (barrier()), which
    // a registered QSBR thread could not do.
    let registration = flavor.register_reader();
    let guard = flavor.read(&registration);
    let index = shared.pool.current();
    // Make sure a grace period waits for this reader: one that starts now must.
    if flavor.supports(UpdateKind::PollExp) {
        let _ = flavor.start_poll_expedited();
    } else if flavor.supports(UpdateKind::Poll) {
        let _ = flavor.start_poll();
    }
    let started = Instant::now();
    let reported = loop {
        std::thread::sleep(timeout / 4);
        if flavor.stats().stalls > before {
            break true;
        }
        if shared.stop.load(Relaxed) || started.elapsed() >= timeout * STALL_PATIENCE {
            break false;
        }
    };
    let held = started.elapsed();
    // The stalled reader is a reader like the others: its element must still be young.
    let age = shared.pool.age(index);
    shared.counters.pipe.record(age as usize);
    if age > 1 {
        shared.counters.failed.store(true, Relaxed);
    }
    drop(guard);
    drop(registration);
    if !reported && shared.stop.load(Relaxed) {
        return; // interrupted by the end of the run: neither a success nor a failure
    }
    faults.stalls_injected.fetch_add(1, Relaxed);
    faults
        .longest_stall_us
        .fetch_max(u64::try_from(held.as_micros()).unwrap_or(u64::MAX), Relaxed);
    if reported {
        faults.stalls_reported.fetch_add(1, Relaxed);
    } else {
        faults.problem(
            &shared.counters,
            format!(
                "a reader held its critical section for {held:.1?} (stall timeout {timeout:?}) \
                 and no stall was reported"
            ),
        );
    }
}

/// An object retired by a burst: counts its drop.
struct CountsDrop(Arc<AtomicU64>);

impl Drop for CountsDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Relaxed);
    }
}

/// Queue `BURST_FACTOR` times `threshold` callbacks (`call`, or with `retire` boxes to drop)
/// in a tight loop, then `barrier()`: all of them must have run by then.
fn burst<F: Flavor>(shared: &Shared<F>, threshold: u64, retire: bool) {
    let flavor = &shared.flavor;
    let faults = &shared.faults;
    let calls = threshold.saturating_mul(BURST_FACTOR);
    let ran = Arc::new(AtomicU64::new(0));
    let before = flavor.stats();
    for _ in 0..calls {
        if retire {
            flavor.retire(Box::new(CountsDrop(ran.clone())));
        } else {
            let ran = ran.clone();
            flavor.call(move || {
                ran.fetch_add(1, Relaxed);
            });
        }
    }
    let queued = flavor.stats();
    flavor.barrier();
    let after = flavor.stats();
    faults.bursts.fetch_add(1, Relaxed);
    faults.burst_calls.fetch_add(calls, Relaxed);
    faults
        .burst_peak_pending
        .fetch_max(queued.callbacks_pending, Relaxed);
    faults.burst_expedited_gps.fetch_add(
        after.expedited_gps.saturating_sub(before.expedited_gps),
        Relaxed,
    );
    faults.burst_released_by_expedited.fetch_add(
        after
            .released_by_expedited
            .saturating_sub(before.released_by_expedited),
        Relaxed,
    );
    let ran = ran.load(Ordering::Relaxed);
    if ran != calls {
        let what = if retire { "retires" } else { "calls" };
        faults.problem(
            &shared.counters,
            format!("a burst of {calls} {what} ran only {ran} of them before barrier() returned"),
        );
    }
}
