//! The report: rcutorture-style lines, ending with `SUCCESS` or `FAILURE`.
//!
//! # Pass/fail rules (rcutorture's, adapted)
//!
//! * **Reader Pipe**: the age each reader saw at the end of its critical section. Only the
//!   first two buckets (ages 0 and 1) may be non-zero; anything further means a grace period
//!   ended while a reader that could see the element was still running. The line gets `!!!`.
//! * **Reader Batch**: grace periods (all engines together) completed inside a sampled
//!   critical section. Each engine may complete at most one (the one running when the reader
//!   entered); an engine that completed two is a batch error and the line gets `!!!`.
//! * **Free-Block Circulation**: transitions out of each age. The last bucket must be 0.
//! * `rtmbe` (publish/subscribe), `rtbe` (barrier), cookie errors and the fault and bookkeeping
//!   problems listed at the end must all be 0.
//! * In a map run, the map's errors too ([`MapReport::errors`]): its Map Pipe follows the
//!   Reader Pipe's rule, and misses of stable keys, mismatched values, wrong results and values
//!   dropped while in the map or twice must all be 0.

use crate::config::Config;
use crate::counters::{Counters, BUCKETS};
use crate::faults::BURST_FACTOR;
use crate::flavor::{Flavor, FlavorStats, UpdateKind};
pub use crate::map::MapReport;
use crate::shared::Shared;
use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

mod text;

/// A histogram as printed: `BUCKETS` counts.
pub type Buckets = [u64; BUCKETS];

/// What the fault injection did.
#[derive(Clone, Debug, Default)]
pub struct FaultReport {
    /// Faults were on.
    pub enabled: bool,
    /// Reader threads that exited and were respawned.
    pub reader_exits: u64,
    /// Sections read in thread-exit destructors, after rcukit's thread-locals were gone.
    pub reads_during_exit: u64,
    /// Panicking callbacks queued.
    pub panics_injected: u64,
    /// Stall timeout of the flavor, if it detects stalls.
    pub stall_timeout: Option<Duration>,
    /// Stalls injected.
    pub stalls_injected: u64,
    /// Stalls reported by the flavor.
    pub stalls_reported: u64,
    /// Longest stall held.
    pub longest_stall: Duration,
    /// Backlog threshold, if the flavor has backlog control.
    pub backlog_callbacks: Option<u64>,
    /// Callback bursts.
    pub bursts: u64,
    /// Callbacks queued by bursts.
    pub burst_calls: u64,
    /// Most callbacks pending right after a burst was queued.
    pub burst_peak_pending: u64,
    /// Expedited grace periods during bursts.
    pub burst_expedited_gps: u64,
    /// Callbacks released by expedited grace periods during bursts.
    pub burst_released_by_expedited: u64,
    /// Rounds of re-entrant drops.
    pub reentrant_rounds: u64,
    /// Objects whose `Drop` re-entered the library.
    pub reentrant_drops: u64,
}

impl FaultReport {
    fn collect<F: Flavor>(shared: &Shared<F>, config: &Config) -> FaultReport {
        let c = &shared.counters;
        let f = &shared.faults;
        let flavor = &shared.flavor;
        FaultReport {
            enabled: config.faults,
            reader_exits: c.reader_exits.load(Relaxed),
            reads_during_exit: c.reads_during_exit.load(Relaxed),
            panics_injected: f.panics_injected.load(Relaxed),
            stall_timeout: flavor.stall_timeout(),
            stalls_injected: f.stalls_injected.load(Relaxed),
            stalls_reported: f.stalls_reported.load(Relaxed),
            longest_stall: Duration::from_micros(f.longest_stall_us.load(Relaxed)),
            backlog_callbacks: flavor.backlog_callbacks(),
            bursts: f.bursts.load(Relaxed),
            burst_calls: f.burst_calls.load(Relaxed),
            burst_peak_pending: f.burst_peak_pending.load(Relaxed),
            burst_expedited_gps: f.burst_expedited_gps.load(Relaxed),
            burst_released_by_expedited: f.burst_released_by_expedited.load(Relaxed),
            reentrant_rounds: f.reentrant_rounds.load(Relaxed),
            reentrant_drops: f.reentrant_drops.load(Relaxed),
        }
    }
}

/// What the owned readers did ([`Flavor::read_owned`]).
#[derive(Clone, Debug, Default)]
pub struct OwnedReport {
    /// The flavor has owned sections.
    pub available: bool,
    /// Fraction of outermost sections that were to be owned ([`Config::owned`]).
    pub fraction: f64,
    /// Owned sections run.
    pub sections: u64,
    /// Owned sections that ended on a helper thread, where their guard was moved.
    pub moved: u64,
    /// Owned sections that slept before they ended.
    pub slept: u64,
}

impl OwnedReport {
    fn collect<F: Flavor>(shared: &Shared<F>, config: &Config) -> OwnedReport {
        let c = &shared.counters;
        OwnedReport {
            available: shared.has_owned,
            fraction: config.owned,
            sections: c.owned_sections.load(Relaxed),
            moved: c.owned_moved.load(Relaxed),
            slept: c.owned_slept.load(Relaxed),
        }
    }
}

/// The owned-sections line of the report.
fn write_owned(f: &mut fmt::Formatter<'_>, p: &str, o: &OwnedReport) -> fmt::Result {
    if !o.available {
        return writeln!(f, "{p} owned sections: n/a (the flavor has none)");
    }
    if o.fraction == 0.0 {
        return writeln!(f, "{p} owned sections: off (--owned 0)");
    }
    writeln!(
        f,
        "{p} owned sections: {} (fraction {}): moved to and ended on a helper thread {}, slept \
         {}",
        o.sections, o.fraction, o.moved, o.slept
    )
}

/// Everything a torture run measured, and its verdict ([`Report::passed`]).
#[derive(Clone, Debug)]
pub struct Report {
    /// The flavor's name (`rcu`, `busted`, ...).
    pub flavor: &'static str,
    /// The flavor's settings.
    pub settings: String,
    /// Reader slots.
    pub readers: usize,
    /// Updater threads.
    pub updaters: usize,
    /// The seed of the run.
    pub seed: u64,
    /// How long the threads ran.
    pub duration: Duration,
    /// The run was asked for this long.
    pub requested: Duration,
    /// The run stopped at the first error (`stop_on_error`).
    pub stopped_early: bool,
    /// Elements published (`rta`; also `ver`).
    pub versions: u64,
    /// Elements freed (`rtf`).
    pub freed: u64,
    /// Times the writer found the pool empty (`rtaf`).
    pub alloc_failures: u64,
    /// Outermost critical sections (`nt`).
    pub reads: u64,
    /// Element loads, nested ones included.
    pub loads: u64,
    /// Pauses readers took between critical sections (offline, for QSBR).
    pub pauses: u64,
    /// The update paths the flavor supports, in report order; the others were skipped.
    pub supported: Vec<UpdateKind>,
    /// The flavor has cookies (reader and updater cookie checks, Reader Batch).
    pub has_cookies: bool,
    /// Reader Pipe histogram.
    pub pipe: Buckets,
    /// Reader Batch histogram.
    pub batch: Buckets,
    /// Free-Block Circulation histogram.
    pub circulation: Buckets,
    /// Writer updates by kind, indexed like [`UpdateKind::ALL`].
    pub writer_updates: [u64; UpdateKind::ALL.len()],
    /// Updater operations by kind, indexed like [`UpdateKind::ALL`].
    pub updater_ops: [u64; UpdateKind::ALL.len()],
    /// Cookies taken in readers and checked before the section ended.
    pub reader_cookie_checks: u64,
    /// Cookies checked after a wait.
    pub updater_cookie_checks: u64,
    /// Barrier checks (`rtb`).
    pub barrier_checks: u64,
    /// `get_state` polling loops that fell back to `cond_synchronize`.
    pub poll_fallbacks: u64,
    /// `call()`s made inside critical sections.
    pub reader_calls: u64,
    /// Publish/subscribe errors (`rtmbe`).
    pub mbtest_errors: u64,
    /// Cookies that expired inside the critical section that took them.
    pub reader_cookie_errors: u64,
    /// Cookies that had not expired after a wait (or completed cookies that did not poll
    /// complete).
    pub updater_cookie_errors: u64,
    /// Barrier errors (`rtbe`).
    pub barrier_errors: u64,
    /// Batch errors.
    pub batch_errors: u64,
    /// The flavor's statistics at the end.
    pub stats: FlavorStats,
    /// Fault injection.
    pub faults: FaultReport,
    /// The owned readers.
    pub owned: OwnedReport,
    /// The map's counters, in a map run.
    pub map: Option<MapReport>,
    /// Fault checks and bookkeeping checks that failed, in words.
    pub problems: Vec<String>,
}

impl Report {
    pub(crate) fn collect<F: Flavor>(
        shared: &Shared<F>,
        config: &Config,
        seed: u64,
        settings: String,
        duration: Duration,
        mut problems: Vec<String>,
    ) -> Report {
        let c = &shared.counters;
        let f = &shared.faults;
        let flavor = &shared.flavor;
        problems.extend(f.problems.lock().iter().cloned());
        Report {
            flavor: flavor.name(),
            settings,
            readers: config.readers,
            updaters: config.updaters,
            seed,
            duration,
            requested: config.duration,
            stopped_early: duration < config.duration,
            versions: shared.pool.allocated.load(Relaxed),
            freed: shared.pool.freed.load(Relaxed),
            alloc_failures: c.alloc_failures.load(Relaxed),
            reads: c.reads.load(Relaxed),
            loads: c.loads.load(Relaxed),
            pauses: c.reader_pauses.load(Relaxed),
            supported: shared.kinds.clone(),
            has_cookies: flavor.has_cookies(),
            pipe: c.pipe.snapshot(),
            batch: c.batch.snapshot(),
            circulation: shared.pool.circulation.snapshot(),
            writer_updates: Counters::by_kind(&c.writer_updates),
            updater_ops: Counters::by_kind(&c.updater_ops),
            reader_cookie_checks: c.reader_cookie_checks.load(Relaxed),
            updater_cookie_checks: c.updater_cookie_checks.load(Relaxed),
            barrier_checks: c.barrier_checks.load(Relaxed),
            poll_fallbacks: c.poll_fallbacks.load(Relaxed),
            reader_calls: c.reader_calls.load(Relaxed),
            mbtest_errors: c.mbtest_errors.load(Relaxed),
            reader_cookie_errors: c.reader_cookie_errors.load(Relaxed),
            updater_cookie_errors: c.updater_cookie_errors.load(Relaxed),
            barrier_errors: c.barrier_errors.load(Relaxed),
            batch_errors: c.batch_errors.load(Relaxed),
            stats: flavor.stats(),
            faults: FaultReport::collect(shared, config),
            owned: OwnedReport::collect(shared, config),
            map: shared.map.as_ref().map(MapReport::collect),
            problems,
        }
    }

    /// Reader Pipe entries past age 1.
    pub fn pipe_errors(&self) -> u64 {
        self.pipe[2..].iter().sum()
    }

    /// Circulation transitions out of an age at or past the freeing age.
    pub fn circulation_errors(&self) -> u64 {
        self.circulation[BUCKETS - 1]
    }

    /// Cookie errors of both kinds.
    pub fn cookie_errors(&self) -> u64 {
        self.reader_cookie_errors + self.updater_cookie_errors
    }

    /// Every error counted, problems included.
    pub fn errors(&self) -> u64 {
        self.pipe_errors()
            + self.circulation_errors()
            + self.mbtest_errors
            + self.cookie_errors()
            + self.barrier_errors
            + self.batch_errors
            + self.map.as_ref().map_or(0, MapReport::errors)
            + self.problems.len() as u64
    }

    /// True when the run found no error.
    pub fn passed(&self) -> bool {
        self.errors() == 0
    }

    /// `"SUCCESS"` or `"FAILURE"`.
    pub fn verdict(&self) -> &'static str {
        if self.passed() {
            "SUCCESS"
        } else {
            "FAILURE"
        }
    }

    /// Writer updates plus updater operations of `kind`.
    pub fn uses_of(&self, kind: UpdateKind) -> u64 {
        self.writer_updates[kind.index()] + self.updater_ops[kind.index()]
    }

    /// The update paths that ran (by the writer or an updater), in report order.
    pub fn paths_run(&self) -> Vec<UpdateKind> {
        UpdateKind::ALL
            .into_iter()
            .filter(|&k| self.uses_of(k) > 0)
            .collect()
    }

    /// The update paths the flavor does not support, skipped by the run.
    pub fn paths_skipped(&self) -> Vec<UpdateKind> {
        UpdateKind::ALL
            .into_iter()
            .filter(|k| !self.supported.contains(k))
            .collect()
    }
}

/// A progress line, printed every few seconds during long runs.
pub(crate) struct Progress {
    prefix: &'static str,
    elapsed: Duration,
    reads: u64,
    versions: u64,
    normal_gps: u64,
    expedited_gps: u64,
    pending: u64,
    stalls: u64,
    pipe_errors: u64,
    owned: u64,
    /// Map lookups, Map Pipe errors and capacity, in a map run.
    map: Option<(u64, u64, u64)>,
    failed: bool,
}

impl Progress {
    pub(crate) fn collect<F: Flavor>(shared: &Shared<F>, elapsed: Duration) -> Progress {
        let stats = shared.flavor.stats();
        let pipe = shared.counters.pipe.snapshot();
        Progress {
            prefix: shared.flavor.name(),
            elapsed,
            reads: shared.counters.reads.load(Relaxed),
            versions: shared.pool.allocated.load(Relaxed),
            normal_gps: stats.normal_gps,
            expedited_gps: stats.expedited_gps,
            pending: stats.callbacks_pending,
            stalls: stats.stalls,
            pipe_errors: pipe[2..].iter().sum(),
            owned: shared.counters.owned_sections.load(Relaxed),
            map: shared.map.as_ref().map(|m| {
                let c = &m.counters;
                (
                    c.lookups.load(Relaxed),
                    c.pipe.snapshot()[2..].iter().sum(),
                    m.map.capacity() as u64,
                )
            }),
            failed: shared.failed(),
        }
    }
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-torture: t={:.1}s nt: {} ver: {} gps: normal {} expedited {} cb-pending: {} \
             stalls: {} pipe-errors: {} owned: {}",
            self.prefix,
            self.elapsed.as_secs_f64(),
            self.reads,
            self.versions,
            self.normal_gps,
            self.expedited_gps,
            self.pending,
            self.stalls,
            self.pipe_errors,
            self.owned,
        )?;
        if let Some((lookups, errors, capacity)) = self.map {
            write!(
                f,
                " map: lookups {lookups} capacity {capacity} pipe-errors {errors}"
            )?;
        }
        write!(f, "{}", if self.failed { " !!! errors seen" } else { "" })
    }
}
