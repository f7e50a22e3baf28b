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

use super::{check_cookie, delay, nested, record_age, Local, Seen, MAX_DEPTH};
use crate::engine::Shared;
use crate::flavor::{Flavor, OwnedSection};
use fastrand::Rng;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::Duration;

/// One owned section in this many sleeps before it ends.
pub(crate) const SLEEP_ONE_IN: u32 = 64;

/// The sleep of an owned section, in microseconds.
pub(crate) const SLEEP_US: std::ops::RangeInclusive<u64> = 10..=300;

/// One owned section in this many is moved to a helper thread.
pub(crate) const MOVE_ONE_IN: u32 = 8;

/// Helper threads that end moved sections.
pub(crate) const HELPERS: usize = 2;

/// Moved sections a helper's channel holds; a reader that finds it full ends its section
/// itself. Small, so that a queue of sleeping sections stays far below the stall timeout.
const CHANNEL: usize = 16;

/// What the end of an owned section needs: the guard and what was read under it.
pub(crate) struct End<C> {
    section: OwnedSection,
    seen: Seen,
    cookie: Option<C>,
    sleep: Option<Duration>,
}

/// The inbox of one helper thread.
pub(crate) type Inbox<C> = Receiver<End<C>>;

/// The owned readers' settings and the helpers' channels, shared by the readers.
pub(crate) struct OwnedReaders<C> {
    /// Fraction of outermost sections that are owned (0 when the flavor has no owned sections
    /// or the run turned them off).
    pub(crate) fraction: f64,
    helpers: Vec<SyncSender<End<C>>>,
}

impl<C: Send> OwnedReaders<C> {
    /// The settings, and one inbox per helper thread to start (none when `fraction` is 0).
    pub(crate) fn new(fraction: f64) -> (OwnedReaders<C>, Vec<Inbox<C>>) {
        let helpers = if fraction > 0.0 { HELPERS } else { 0 };
        let (senders, inboxes) = (0..helpers).map(|_| sync_channel(CHANNEL)).unzip();
        let owned = OwnedReaders {
            fraction,
            helpers: senders,
        };
        (owned, inboxes)
    }

    /// Hand `end` to a random helper; gives it back when the helper cannot take it.
    fn send(&self, rng: &mut Rng, end: End<C>) -> Result<(), End<C>> {
        if self.helpers.is_empty() {
            return Err(end);
        }
        let helper = &self.helpers[rng.usize(..self.helpers.len())];
        helper.try_send(end).map_err(|e| match e {
            TrySendError::Full(end) | TrySendError::Disconnected(end) => end,
        })
    }
}

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
