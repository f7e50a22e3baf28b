#![doc = include_str!("port.md")]

use super::Inner;
use crate::callbacks::port::{GpPort, ReleasedBy};
use crate::gp::Flavor;
use crate::seq::GpCookie;
use std::thread::Thread;

impl Inner {
    /// The release rule (see the module docs): which kind of grace period, if any, has
    /// released `cookie`.
    #[inline]
    pub(super) fn released_by(&self, cookie: &GpCookie, any_kind: bool) -> Option<ReleasedBy> {
        if self.normal.seq.poll(cookie.normal) {
            Some(ReleasedBy::Normal)
        } else if (any_kind || self.expedited_callbacks) && self.exp.seq.poll(cookie.expedited) {
            Some(ReleasedBy::Expedited)
        } else {
            None
        }
    }

    /// Snapshot both counters (`get_state_synchronize_rcu_full`).
    pub(crate) fn get_state(&self) -> GpCookie {
        GpCookie {
            normal: self.normal.seq.snap(),
            expedited: self.exp.seq.snap(),
            domain: self.id(),
        }
    }

    /// Is the calling thread inside a read-side critical section of this domain (for a QSBR
    /// domain: online in it)?
    #[inline]
    pub(crate) fn is_reading_here(&self) -> bool {
        match self.core.flavor() {
            Flavor::Guards => crate::reader::is_reading(self.key(), &self.core.registry),
            Flavor::Qsbr { .. } => crate::reader::qsbr::online_here(self.id(), &self.core.registry),
        }
    }
}

/// How long a grace period tried by a retiring thread waits for a reader still in a critical
/// section before it leaves the rest to the helper thread: a few short sections' worth.
const TRIED_PATIENCE: std::time::Duration = if cfg!(rcukit_small) {
    std::time::Duration::from_micros(1)
} else {
    std::time::Duration::from_micros(20)
};

impl GpPort for Inner {
    #[inline]
    fn cookie(&self) -> GpCookie {
        self.get_state()
    }

    #[inline]
    fn released(&self, stamp: &GpCookie, any_kind: bool) -> Option<ReleasedBy> {
        self.released_by(stamp, any_kind)
    }

    #[inline]
    fn expedited_releases(&self) -> bool {
        self.expedited_callbacks
    }

    fn request_normal(&self, stamp: &GpCookie) {
        self.normal.request(stamp.normal);
    }

    fn request_expedited(&self, stamp: &GpCookie) {
        self.exp.request(stamp.expedited);
    }

    fn run_expedited(&self, stamp: &GpCookie) {
        self.exp.run_until(stamp.expedited, &self.core, &self.event);
    }

    fn try_expedited(&self, stamp: &GpCookie) -> bool {
        self.exp
            .try_run(stamp.expedited, &self.core, &self.event, TRIED_PATIENCE)
    }

    fn subscribe(&self, thread: Thread, wants: Box<dyn Fn() -> bool + Send + Sync>) {
        self.event.subscribe(thread, wants);
    }

    #[inline]
    fn check_fork(&self) {
        Inner::check_fork(self);
    }

    #[inline]
    fn is_reading_here(&self) -> bool {
        Inner::is_reading_here(self)
    }
}
