#![doc = include_str!("port.md")]

use crate::seq::GpCookie;
use std::thread::Thread;

/// Which kind of grace period released a stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReleasedBy {
    Normal = 0,
    Expedited = 1,
}

/// The grace-period services of a domain, as the callback machinery sees them.
pub(crate) trait GpPort {
    /// A stamp for callbacks queued so far: a snapshot of both counters, taken with a full
    /// fence (`get_state_synchronize_rcu_full`).
    fn cookie(&self) -> GpCookie;

    /// Has a grace period released `stamp`, and which kind did? The normal counter always
    /// counts; the expedited one when the domain lets expedited grace periods release
    /// callbacks, or with `any_kind` (a domain being dropped expedites everything).
    fn released(&self, stamp: &GpCookie, any_kind: bool) -> Option<ReleasedBy>;

    /// Do expedited grace periods release callbacks in this domain (`expedited_callbacks`)?
    /// When not, the machinery neither stamps nor hurries for them.
    fn expedited_releases(&self) -> bool;

    /// Ask the domain's grace-period thread for the normal grace period `stamp` needs.
    fn request_normal(&self, stamp: &GpCookie);

    /// Ask the domain's helper thread for the expedited grace period `stamp` needs, without
    /// waiting for it.
    fn request_expedited(&self, stamp: &GpCookie);

    /// Run (or piggyback on) expedited grace periods in the calling thread until `stamp`'s
    /// expedited half has completed.
    fn run_expedited(&self, stamp: &GpCookie);

    /// Try to complete `stamp`'s expedited half in the calling thread without waiting for any
    /// reader more than a few microseconds: true if it has completed, false if not (the
    /// domain's helper thread then finishes what this call started). Never blocks on another
    /// thread's grace period.
    fn try_expedited(&self, stamp: &GpCookie) -> bool;

    /// Unpark `thread` at the end of every grace period of either kind while `wants()` says
    /// so.
    fn subscribe(&self, thread: Thread, wants: Box<dyn Fn() -> bool + Send + Sync>);

    /// Repair the domain if the process has forked since it last ran (see
    /// [`fork`](crate::docs::internal::domain::fork)).
    fn check_fork(&self);

    /// Is the calling thread inside a read-side critical section of the domain (QSBR: online)?
    fn is_reading_here(&self) -> bool;

    /// Has `stamp` been released (by the domain's rule, see [`released`](Self::released))?
    #[inline]
    fn is_released(&self, stamp: &GpCookie) -> bool {
        self.released(stamp, false).is_some()
    }
}
