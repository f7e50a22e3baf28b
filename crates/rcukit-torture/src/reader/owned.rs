//! Owned readers: outermost sections that are owned sections ([`Flavor::read_owned`]), some of
//! which sleep and some of which end on a helper thread.
//!
//! An owned section runs like an ordinary outermost one: it takes a cookie one time in four,
//! loads the current element, delays, and nests up to two *ordinary* sections (guards of the
//! same domain, each dropped before the owned section moves on). Then:
//!
//! * one owned section in [`SLEEP_ONE_IN`] sleeps for [`SLEEP_US`] microseconds before it ends
//!   (long enough for several grace periods to try to end under it, far below the stall
//!   timeout);
//! * one in [`MOVE_ONE_IN`] is *moved*: the guard, the elements it loaded and its cookie go
//!   through a bounded channel to one of [`HELPERS`] helper threads, which (after the sleep,
//!   if the section drew one) makes the end-of-section checks there and drops the guard there.
//!   When the helper's channel is full, or the helpers have left at the end of the run, the
//!   reader ends the section itself.
//!
//! The end of an owned section, on whichever thread, makes every check of an ordinary
//! section's end (the cookie must not have expired, Reader Batch, Reader Pipe) and one more:
//! every element it loaded must still be in use (`mbtest == 1`, counted with the
//! publish/subscribe errors otherwise). An element is freed only after nine grace periods
//! since its removal, each of which had to wait for the owned section, so a freed element
//! there means a grace period ignored an owned section, as an age above 1 does.

use super::{check_cookie, delay, nested, record_age, Local};
use crate::flavor::{Flavor, OwnedSection};
use crate::handoff::{End, Inbox, Seen, MAX_DEPTH, MOVE_ONE_IN, SLEEP_ONE_IN, SLEEP_US};
use crate::shared::Shared;
use fastrand::Rng;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

/// Enter an owned section for this outermost section, with probability `fraction`.
pub(super) fn maybe_enter<F: Flavor>(shared: &Shared<F>, rng: &mut Rng) -> Option<OwnedSection> {
    let fraction = shared.owned.fraction;
    if fraction > 0.0 && rng.f64() < fraction {
        shared.flavor.read_owned()
    } else {
        None
    }
}

/// One outermost owned section, begun by `section`; returns the first element it loaded.
pub(super) fn one_read<F: Flavor>(
    shared: &Shared<F>,
    registration: &F::Reader<'_>,
    rng: &mut Rng,
    local: &mut Local,
    section: OwnedSection,
) -> usize {
    let cookie = super::sample_cookie(shared, rng);
    let mut seen = Seen::new();
    seen.load(shared, local);
    delay(rng, shared.flavor.readers_may_sleep());
    let depth = rng.u32(0..MAX_DEPTH as u32);
    if depth > 0 {
        nested(shared, registration, rng, local, &mut seen, None, depth);
    }
    local.owned_sections += 1;
    let sleep = (rng.u32(0..SLEEP_ONE_IN) == 0).then(|| Duration::from_micros(rng.u64(SLEEP_US)));
    let first = seen.elements[0];
    let end = End {
        section,
        seen,
        cookie,
        sleep,
    };
    if rng.u32(0..MOVE_ONE_IN) == 0 {
        match shared.owned.send(rng, end) {
            Ok(()) => return first,
            Err(end) => end.finish(shared, local),
        }
    } else {
        end.finish(shared, local);
    }
    first
}

impl<C> End<C> {
    /// Sleep if the section drew a sleep, make the end-of-section checks, end the section.
    fn finish<F: Flavor<Cookie = C>>(self, shared: &Shared<F>, local: &mut Local) {
        if let Some(d) = self.sleep {
            std::thread::sleep(d);
            local.owned_slept += 1;
        }
        let loaded = &self.seen.elements[..self.seen.len];
        for &index in loaded {
            if shared.pool.mbtest(index) == 0 {
                shared.counters.error(&shared.counters.mbtest_errors, 1);
            }
        }
        if let Some(start) = &self.cookie {
            check_cookie(shared, start, local);
        }
        for &index in loaded {
            record_age(shared, index, local);
        }
        local.reads += 1;
        drop(self.section);
    }
}

/// The body of a helper thread: end the sections readers move to it until the run stops and
/// its inbox has stayed empty for a moment, then end what is still queued.
pub(crate) fn run_helper<F: Flavor>(shared: &Shared<F>, inbox: Inbox<F::Cookie>) {
    let mut local = Local::default();
    let mut n: u64 = 0;
    let mut finish = |end: End<F::Cookie>, local: &mut Local| {
        end.finish(shared, local);
        local.owned_moved += 1;
        n += 1;
        if n % 256 == 0 {
            local.flush(shared);
        }
    };
    loop {
        match inbox.recv_timeout(Duration::from_millis(10)) {
            Ok(end) => finish(end, &mut local),
            Err(RecvTimeoutError::Timeout) if !shared.stop.load(Relaxed) => {}
            Err(_) => break,
        }
    }
    while let Ok(end) = inbox.try_recv() {
        finish(end, &mut local);
    }
    // A reader that sends after this gets its section back and ends it itself; one that sent
    // just before it loses its checks, but its guard still drops (with the inbox).
    drop(inbox);
    local.flush(shared);
}
