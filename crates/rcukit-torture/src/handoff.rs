//! Owned sections that end on another thread: what a reader's section carries to its end, and
//! the channels to the helper threads that end the sections readers move to them (see
//! `reader::owned` for the readers' side and the checks made at the end).

use crate::flavor::OwnedSection;
use fastrand::Rng;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::time::Duration;

/// Deepest nesting of critical sections a reader uses (outermost included).
pub(crate) const MAX_DEPTH: usize = 3;

/// Elements one outermost section has loaded.
pub(crate) struct Seen {
    pub(crate) elements: [usize; MAX_DEPTH],
    pub(crate) len: usize,
}

impl Seen {
    pub(crate) fn new() -> Seen {
        Seen {
            elements: [0; MAX_DEPTH],
            len: 0,
        }
    }
}

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
    pub(crate) section: OwnedSection,
    pub(crate) seen: Seen,
    pub(crate) cookie: Option<C>,
    pub(crate) sleep: Option<Duration>,
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
    pub(crate) fn send(&self, rng: &mut Rng, end: End<C>) -> Result<(), End<C>> {
        if self.helpers.is_empty() {
            return Err(end);
        }
        let helper = &self.helpers[rng.usize(..self.helpers.len())];
        helper.try_send(end).map_err(|e| match e {
            TrySendError::Full(end) | TrySendError::Disconnected(end) => end,
        })
    }
}
