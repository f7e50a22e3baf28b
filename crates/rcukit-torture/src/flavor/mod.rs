//! Flavors: what the torture engine needs from an RCU implementation.
//!
//! rcutorture drives every RCU flavor of the kernel through one table of operations
//! (`struct rcu_torture_ops`). [`Flavor`] is that table for rcukit: the read side, the update
//! primitives (each optional, announced by [`Flavor::supports`]), polling cookies, callbacks and
//! the statistics the fault checks read. The engine is generic over it, so a flavor costs no
//! dynamic dispatch on the read side.
//!
//! # Adding a flavor
//!
//! Implement [`Flavor`] in a module next to [`rcu`] and [`busted`], list the [`UpdateKind`]s it
//! supports, and add an arm to [`crate::run`]. A flavor built on an rcukit domain with the
//! `Rcu` API takes its whole update side from the `forward_to_domain!` macro, as [`rcu`] and
//! [`qsbr`] do. The flavors of this build show the three shapes the trait is made to fit:
//!
//! * **Guards** ([`rcu`], [`busted`]): [`Flavor::Reader`] is `()`, [`Flavor::read`] returns
//!   the domain's guard, and every hook between sections does nothing.
//! * **QSBR** ([`qsbr`], `rcukit::Qsbr`): [`Flavor::Reader`] is the thread's registration
//!   (`QsbrThread`, online while it lives), [`Flavor::read`] returns `()` (an online thread is
//!   always reading), and [`Flavor::quiescent_state`] announces a quiescent state. Readers call
//!   it between critical sections, where the borrow checker proves that no guard is alive, so
//!   a "critical section" is the whole stretch from one quiescent state to the next: with
//!   [`Flavor::protects_until_quiescent_state`] the engine announces one only after a burst of
//!   up to 32 sections and checks everything the burst loaded just before it. Such a
//!   reader must not block while online ([`Flavor::readers_may_sleep`] is false: the delays
//!   inside its sections spin instead of sleeping) and goes offline around the sleeps it takes
//!   between sections ([`Flavor::offline_while`]). Only reader threads (and the stalling
//!   fault, for the length of its stall) register, so the writer and the updaters are never
//!   online while they wait.
//!   Guard flavors built on an `rcukit::Rcu` also have owned sections ([`Flavor::read_owned`],
//!   `Rcu::read_owned`): a fraction of the readers' sections are owned, and some of those
//!   sleep or end on another thread (see the reader module's docs).
//! * **A cell that waits on replace** ([`recseq`], `rcukit::RecSeq`): `read` is the cell's
//!   read guard and `synchronize` replaces a dummy value (`RecSeq<()>::replace(())` waits for
//!   every reader section running at the swap, which is a grace period for that cell's
//!   readers). It supports only [`UpdateKind::Sync`] and has no cookies; the pipe, nesting,
//!   reader exits and the stall fault still apply, and the report lists the update paths that
//!   were skipped.
//!
//! # The batch bound
//!
//! [`Flavor::gps_between`] counts grace periods completed between two cookies. The engine
//! takes one cookie just after a reader enters its critical section and one just before it
//! leaves. A grace-period engine that starts a grace period after the reader entered cannot end
//! it before the reader leaves, so each engine can complete at most *one* grace period inside
//! a critical section: the one already running when the reader entered. Anything more is a
//! "batch" error, the same rule rcutorture applies to its `Reader Batch` histogram.

pub mod busted;
pub mod qsbr;
pub mod rcu;
pub mod recseq;

use rcukit::{GpCookie, QsbrThread};

use std::time::Duration;

/// An owned read-side critical section ([`Flavor::read_owned`]): it ends when dropped, on
/// whichever thread drops it (for rcukit, a boxed `rcukit::OwnedGuard`).
pub type OwnedSection = Box<dyn Send + 'static>;

/// One way of waiting for (or deferring work past) a grace period. The writer and the updaters
/// pick one at random for every update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UpdateKind {
    /// `synchronize()`.
    Sync,
    /// `synchronize_expedited()`.
    SyncExp,
    /// `get_state()`, then `cond_synchronize()` on the cookie.
    Cond,
    /// `get_state()`, then `cond_synchronize_expedited()` on the cookie.
    CondExp,
    /// `get_state()`, then a polling loop (falling back to `cond_synchronize()`, since nothing
    /// asked for a grace period).
    PollState,
    /// `start_poll()`, then a polling loop.
    Poll,
    /// `start_poll_expedited()`, then a polling loop.
    PollExp,
    /// `call()`: a chain of callbacks that re-post themselves until the element is freed.
    Call,
    /// `retire()`: a chain of boxes whose drop retires the next one.
    Retire,
    /// `call()` then `barrier()`: the first link of the chain must have run when it returns.
    Barrier,
}

impl UpdateKind {
    /// Every kind, in report order.
    pub const ALL: [UpdateKind; 10] = [
        UpdateKind::Sync,
        UpdateKind::SyncExp,
        UpdateKind::Cond,
        UpdateKind::CondExp,
        UpdateKind::PollState,
        UpdateKind::Poll,
        UpdateKind::PollExp,
        UpdateKind::Call,
        UpdateKind::Retire,
        UpdateKind::Barrier,
    ];

    /// Position in [`UpdateKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Short name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            UpdateKind::Sync => "sync",
            UpdateKind::SyncExp => "sync_exp",
            UpdateKind::Cond => "cond",
            UpdateKind::CondExp => "cond_exp",
            UpdateKind::PollState => "poll_state",
            UpdateKind::Poll => "poll",
            UpdateKind::PollExp => "poll_exp",
            UpdateKind::Call => "call",
            UpdateKind::Retire => "retire",
            UpdateKind::Barrier => "barrier",
        }
    }

    /// The kinds that wait for a grace period in the calling thread (after which every element
    /// the writer removed earlier ages by one).
    pub fn waits(self) -> bool {
        !matches!(
            self,
            UpdateKind::Call | UpdateKind::Retire | UpdateKind::Barrier
        )
    }
}

/// Statistics a flavor reports (all counters since the flavor was built).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlavorStats {
    /// Normal grace periods completed (for `busted`: calls that claimed to be one).
    pub normal_gps: u64,
    /// Expedited grace periods run.
    pub expedited_gps: u64,
    /// Stall reports issued.
    pub stalls: u64,
    /// Callbacks that have run.
    pub callbacks_invoked: u64,
    /// Callbacks queued but not yet run.
    pub callbacks_pending: u64,
    /// Callbacks that panicked (caught).
    pub callback_panics: u64,
    /// Callbacks released by a normal grace period.
    pub released_by_normal: u64,
    /// Callbacks released by an expedited grace period.
    pub released_by_expedited: u64,
    /// Retired objects dropped by the threads that retire (rcukit's `retire_on_producers`).
    pub callbacks_run_by_producers: u64,
    /// Quiescent states after which a QSBR reader gave way to a long grace period.
    pub readers_gave_way: u64,
}

impl From<rcukit::Stats> for FlavorStats {
    fn from(s: rcukit::Stats) -> FlavorStats {
        FlavorStats {
            normal_gps: s.normal_gps,
            expedited_gps: s.expedited_gps,
            stalls: s.stalls,
            callbacks_invoked: s.callbacks_invoked,
            callbacks_pending: s.callbacks_pending,
            callback_panics: s.callback_panics,
            released_by_normal: s.released_by_normal,
            released_by_expedited: s.released_by_expedited,
            callbacks_run_by_producers: s.callbacks_run_by_producers,
            readers_gave_way: s.readers_gave_way,
        }
    }
}

/// Grace periods completed between two cookies of a flavor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpsBetween {
    /// All engines together (the `Reader Batch` histogram bucket).
    pub total: u64,
    /// The most any single engine completed (more than 1 inside a critical section is an
    /// error; see the module docs).
    pub worst_engine: u64,
}

/// An RCU implementation as the torture engine sees it (rcutorture's `rcu_torture_ops`).
///
/// Methods for update kinds that [`supports`](Flavor::supports) denies are never called; their
/// default bodies panic.
pub trait Flavor: Send + Sync + 'static {
    /// A reader thread's registration (`()` for flavors whose readers need none).
    type Reader<'a>
    where
        Self: 'a;
    /// A read-side critical section; it ends when the guard drops. Must nest.
    type Guard<'a>
    where
        Self: 'a;
    /// A polling cookie (use `()` for a flavor without polling and deny the polling kinds).
    type Cookie: Copy + Send + 'static;

    /// The flavor's name, used as the report prefix (`rcu` gives `rcu-torture:`).
    fn name(&self) -> &'static str;

    /// A description of the settings (fence kind, thresholds), for the report header.
    fn describe(&self) -> String;

    /// Register the calling thread as a reader. A reader thread calls it once, before its
    /// first critical section, and drops the registration before it exits.
    fn register_reader(&self) -> Self::Reader<'_>;

    /// Enter a read-side critical section on the calling thread's registration.
    fn read<'r>(&'r self, reader: &'r Self::Reader<'_>) -> Self::Guard<'r>;

    /// Enter an *owned* read-side critical section (`rcukit::Rcu::read_owned`): one that may
    /// sleep, move to another thread and end there, and that every grace period begun after it
    /// must wait for like any other section. `None` (the default) for flavors without one;
    /// the readers of such a flavor take no owned sections.
    fn read_owned(&self) -> Option<OwnedSection> {
        None
    }

    /// Called by readers between critical sections, with no guard alive (a QSBR flavor
    /// announces a quiescent state).
    fn quiescent_state(&self, _reader: &mut Self::Reader<'_>) {}

    /// Run `f`, a sleep a reader takes between critical sections, with the reader offline where
    /// the flavor has such a state (a QSBR flavor: grace periods stop waiting for the thread
    /// while it sleeps, and it comes back online before the next section). The default just
    /// runs `f`.
    fn offline_while<R>(&self, _reader: &mut Self::Reader<'_>, f: impl FnOnce() -> R) -> R {
        f()
    }

    /// Whether what a reader loaded stays protected after its guard drops, until its next
    /// [`quiescent_state`](Flavor::quiescent_state) (QSBR: a critical section *is* the stretch
    /// between two quiescent states). The engine then announces quiescent states only after
    /// bursts of 1 to 32 sections, as a packet loop does after a burst, and checks the
    /// elements and a cookie it took at the start of the burst just before announcing one.
    fn protects_until_quiescent_state(&self) -> bool {
        false
    }

    /// The QSBR registration through which a reader reads a map built on the flavor's domain
    /// (a map run's lookups), if its registration is one: a QSBR flavor's online reader needs
    /// no guard for the map. `None` (the default): the map's lookups take a guard of the map's
    /// domain inside the reader's section.
    fn qsbr_thread<'r>(&self, _reader: &'r Self::Reader<'_>) -> Option<&'r QsbrThread<'r>> {
        None
    }

    /// Whether a reader may sleep inside a critical section. A flavor whose sections hold every
    /// grace period of the domain while the thread is blocked, and whose users are told to go
    /// offline around anything that blocks (QSBR), says false: its readers busy-wait for the
    /// same random delays, as rcutorture's readers of non-preemptible flavors use `udelay()`.
    fn readers_may_sleep(&self) -> bool {
        true
    }

    /// Whether the flavor implements `kind`. [`UpdateKind::Barrier`] also uses `call`, and the
    /// callback faults need [`UpdateKind::Call`]: a flavor without callbacks denies `Call`,
    /// `Retire` and `Barrier`.
    fn supports(&self, kind: UpdateKind) -> bool;

    /// Whether the cookie functions (`get_state`, `poll`, `gps_between`) work. The cookie
    /// checks and the batch histogram need them.
    fn has_cookies(&self) -> bool;

    /// Wait for a normal grace period.
    fn synchronize(&self);

    /// Wait for an expedited grace period.
    fn synchronize_expedited(&self) {
        unimplemented!("{}: synchronize_expedited", self.name())
    }

    /// Snapshot the grace-period state.
    fn get_state(&self) -> Self::Cookie {
        unimplemented!("{}: get_state", self.name())
    }

    /// Snapshot and request a normal grace period.
    fn start_poll(&self) -> Self::Cookie {
        unimplemented!("{}: start_poll", self.name())
    }

    /// Snapshot and request an expedited grace period.
    fn start_poll_expedited(&self) -> Self::Cookie {
        unimplemented!("{}: start_poll_expedited", self.name())
    }

    /// Has a grace period covered `cookie`?
    fn poll(&self, _cookie: &Self::Cookie) -> bool {
        unimplemented!("{}: poll", self.name())
    }

    /// Wait for a normal grace period unless `cookie` has expired.
    fn cond_synchronize(&self, _cookie: &Self::Cookie) {
        unimplemented!("{}: cond_synchronize", self.name())
    }

    /// Wait for an expedited grace period unless `cookie` has expired.
    fn cond_synchronize_expedited(&self, _cookie: &Self::Cookie) {
        unimplemented!("{}: cond_synchronize_expedited", self.name())
    }

    /// A cookie that has already expired (`get_completed_synchronize_rcu`).
    fn completed_cookie(&self) -> Self::Cookie {
        unimplemented!("{}: completed_cookie", self.name())
    }

    /// Grace periods completed between `earlier` and `later` (both from `get_state`-like
    /// calls, in that order).
    fn gps_between(&self, _earlier: &Self::Cookie, _later: &Self::Cookie) -> GpsBetween {
        unimplemented!("{}: gps_between", self.name())
    }

    /// Run `f` after a grace period.
    fn call<F: FnOnce() + Send + 'static>(&self, _f: F) {
        unimplemented!("{}: call", self.name())
    }

    /// Drop `value` after a grace period.
    // The box is the API (rcukit's `retire(Box<T>)`), even where this default ignores it.
    #[allow(clippy::boxed_local)]
    fn retire<T: Send + 'static>(&self, _value: Box<T>) {
        unimplemented!("{}: retire", self.name())
    }

    /// Wait for every callback queued so far.
    fn barrier(&self) {
        unimplemented!("{}: barrier", self.name())
    }

    /// Current statistics.
    fn stats(&self) -> FlavorStats;

    /// The stall timeout, if the flavor detects and counts stalled readers (enables the stall
    /// fault).
    fn stall_timeout(&self) -> Option<Duration> {
        None
    }

    /// The per-worker backlog threshold, if the flavor has backlog control (enables the
    /// callback-burst fault).
    fn backlog_callbacks(&self) -> Option<u64> {
        None
    }
}

/// How the engine builds a flavor: the settings it takes from the configuration.
#[derive(Clone, Debug)]
pub struct FlavorSettings {
    /// Barrier pair for flavors built on an rcukit domain (`None`: the domain's default).
    pub fence: Option<rcukit::FenceKind>,
    /// Stall timeout of the domain (short, so that the stall fault is quick).
    pub stall_timeout: Duration,
    /// Backlog threshold of the domain (small, so that the burst fault exceeds it).
    pub backlog_callbacks: u64,
    /// Callback worker threads of the domain.
    pub callback_workers: usize,
}

/// The update side of a [`Flavor`] built on an rcukit domain (`Rcu` or `Qsbr`), every
/// primitive forwarded as it is.
///
/// Expands, inside `impl Flavor for ...`, to every method from [`Flavor::supports`] to
/// [`Flavor::backlog_callbacks`] except [`Flavor::barrier`] (which the `rcu` flavor can bust):
/// `self.$domain` is the domain, `self.settings` the [`FlavorSettings`] it was built with, and
/// `Self::Cookie` must be [`GpCookie`]. The read side, the name and the description differ
/// between the flavors and stay in each.
macro_rules! forward_to_domain {
    ($domain:ident) => {
        fn supports(&self, _kind: $crate::flavor::UpdateKind) -> bool {
            true
        }

        fn has_cookies(&self) -> bool {
            true
        }

        fn synchronize(&self) {
            self.$domain.synchronize()
        }

        fn synchronize_expedited(&self) {
            self.$domain.synchronize_expedited()
        }

        fn get_state(&self) -> Self::Cookie {
            self.$domain.get_state()
        }

        fn start_poll(&self) -> Self::Cookie {
            self.$domain.start_poll()
        }

        fn start_poll_expedited(&self) -> Self::Cookie {
            self.$domain.start_poll_expedited()
        }

        fn poll(&self, cookie: &Self::Cookie) -> bool {
            self.$domain.poll(cookie)
        }

        fn cond_synchronize(&self, cookie: &Self::Cookie) {
            self.$domain.cond_synchronize(cookie)
        }

        fn cond_synchronize_expedited(&self, cookie: &Self::Cookie) {
            self.$domain.cond_synchronize_expedited(cookie)
        }

        fn completed_cookie(&self) -> Self::Cookie {
            ::rcukit::GpCookie::completed()
        }

        fn gps_between(
            &self,
            earlier: &Self::Cookie,
            later: &Self::Cookie,
        ) -> $crate::flavor::GpsBetween {
            $crate::flavor::gps_between_cookies(earlier, later)
        }

        fn call<F: FnOnce() + Send + 'static>(&self, f: F) {
            self.$domain.call(f)
        }

        fn retire<T: Send + 'static>(&self, value: Box<T>) {
            self.$domain.retire(value)
        }

        fn stats(&self) -> $crate::flavor::FlavorStats {
            $crate::flavor::FlavorStats::from(self.$domain.stats())
        }

        fn stall_timeout(&self) -> Option<::std::time::Duration> {
            Some(self.settings.stall_timeout)
        }

        fn backlog_callbacks(&self) -> Option<u64> {
            Some(self.settings.backlog_callbacks)
        }
    };
}
pub(crate) use forward_to_domain;

/// Wait for `d` inside a reader's critical section: a sleep, or, where the flavor's readers
/// may not block ([`Flavor::readers_may_sleep`] false), a busy wait (rcutorture's `udelay()`).
pub(crate) fn wait_in_section(d: Duration, may_sleep: bool) {
    if may_sleep {
        std::thread::sleep(d);
    } else {
        let end = std::time::Instant::now() + d;
        while std::time::Instant::now() < end {
            std::hint::spin_loop();
        }
    }
}

/// [`Flavor::gps_between`] for flavors whose cookies are rcukit [`GpCookie`]s (an `Rcu` or
/// `Qsbr` domain).
pub(crate) fn gps_between_cookies(earlier: &GpCookie, later: &GpCookie) -> GpsBetween {
    /// Grace-period counter units per grace period in a [`GpCookie`] half (two state bits).
    const ONE_GP: u64 = 4;
    // Both halves are snapshots `(s + 7) & !3` of monotonic counters; the difference of two
    // snapshots is the number of grace periods that ended in between, give or take the one
    // running at either end (see the module docs for why the bound still holds).
    let normal = later.normal().wrapping_sub(earlier.normal()) / ONE_GP;
    let expedited = later.expedited().wrapping_sub(earlier.expedited()) / ONE_GP;
    GpsBetween {
        total: normal.saturating_add(expedited),
        worst_engine: normal.max(expedited),
    }
}
