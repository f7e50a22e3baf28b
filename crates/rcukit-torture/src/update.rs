//! The update paths that wait in the caller, each followed by the updater-side cookie check.
//!
//! Whatever the path, a cookie taken *before* the wait must poll complete *after* it: every
//! path waits for a grace period that started after the cookie was taken (rcutorture's polled
//! API checks 3 and 4, with a full cookie, so one grace period is enough). The completed
//! cookie must always poll complete.

use crate::flavor::{Flavor, UpdateKind};
use crate::shared::Shared;
use fastrand::Rng;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// How long a polling loop on a `get_state` cookie polls before it falls back to
/// `cond_synchronize` (nothing asked for a grace period, so one may never come).
const POLL_STATE_PATIENCE: Duration = Duration::from_millis(5);

/// Wait for a grace period by path `kind` (one for which [`UpdateKind::waits`] is true), then
/// check the cookies.
pub(crate) fn wait_for_gp<F: Flavor>(shared: &Shared<F>, kind: UpdateKind, rng: &mut Rng) {
    debug_assert!(kind.waits());
    let flavor = &shared.flavor;
    let before = flavor.has_cookies().then(|| flavor.get_state());
    match kind {
        UpdateKind::Sync => flavor.synchronize(),
        UpdateKind::SyncExp => flavor.synchronize_expedited(),
        UpdateKind::Cond => {
            let cookie = flavor.get_state();
            maybe_pause(rng);
            flavor.cond_synchronize(&cookie);
        }
        UpdateKind::CondExp => {
            let cookie = flavor.get_state();
            maybe_pause(rng);
            flavor.cond_synchronize_expedited(&cookie);
        }
        UpdateKind::PollState => {
            let cookie = flavor.get_state();
            if !poll_loop(flavor, &cookie, rng, Some(POLL_STATE_PATIENCE)) {
                shared.counters.poll_fallbacks.fetch_add(1, Relaxed);
                flavor.cond_synchronize(&cookie);
            }
        }
        UpdateKind::Poll => {
            let cookie = flavor.start_poll();
            poll_loop(flavor, &cookie, rng, None);
        }
        UpdateKind::PollExp => {
            let cookie = flavor.start_poll_expedited();
            poll_loop(flavor, &cookie, rng, None);
        }
        UpdateKind::Call | UpdateKind::Retire | UpdateKind::Barrier => {
            unreachable!("{kind:?} does not wait")
        }
    }
    if let Some(cookie) = before {
        let counters = &shared.counters;
        counters.updater_cookie_checks.fetch_add(1, Relaxed);
        if !flavor.poll(&cookie) || !flavor.poll(&flavor.completed_cookie()) {
            counters.error(&counters.updater_cookie_errors, 1);
        }
    }
}

/// Half the time, give the grace period a head start so that the `cond_*` call sometimes finds
/// its cookie expired already (its fast path).
fn maybe_pause(rng: &mut Rng) {
    if rng.bool() {
        std::thread::sleep(Duration::from_micros(rng.u64(0..=2_000)));
    }
}

/// Poll `cookie` with short sleeps until it expires (true) or `patience` runs out (false).
fn poll_loop<F: Flavor>(
    flavor: &F,
    cookie: &F::Cookie,
    rng: &mut Rng,
    patience: Option<Duration>,
) -> bool {
    let started = Instant::now();
    loop {
        if flavor.poll(cookie) {
            return true;
        }
        if patience.is_some_and(|p| started.elapsed() >= p) {
            return false;
        }
        std::thread::sleep(Duration::from_micros(rng.u64(20..=200)));
    }
}

/// A random supported kind.
pub(crate) fn pick(kinds: &[UpdateKind], rng: &mut Rng) -> UpdateKind {
    kinds[rng.usize(..kinds.len())]
}
