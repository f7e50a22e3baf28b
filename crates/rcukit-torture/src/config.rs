//! What a torture run is asked to do: [`Config`] for the library, [`TortureArgs`] for command
//! lines (a `clap::Args` struct, so another binary can flatten it into a subcommand).

use rcukit::FenceKind;
use std::time::Duration;

/// Which implementation to torture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FlavorName {
    /// An `rcukit::Rcu` domain.
    Rcu,
    /// An `rcukit::Qsbr` domain (readers registered, quiescent states between bursts of
    /// sections, offline while they sleep) with unfenced quiescent states
    /// (`QsbrBuilder::fenced_quiescent_states(false)`: a sleeping writer pairs `membarrier`
    /// with them).
    Qsbr,
    /// The `qsbr` run on a domain with fenced quiescent states, the default of `Qsbr` (the
    /// readers' fence, not `membarrier`, pairs with a sleeping writer's).
    QsbrFenced,
    /// An `rcukit::RecSeq<()>`: `synchronize` is `replace(())`, the only update path it has.
    Recseq,
    /// Grace periods that return at once: the run must fail (the checker's self-test).
    Busted,
    /// An `rcukit::Rcu` domain whose `barrier()` returns at once: the run must fail (the
    /// barrier checks' self-test).
    BustedBarrier,
    /// An `rcukit::Rcu` domain whose owned sections end as soon as they begin (`read_owned()`
    /// drops its guard at once): the run must fail (the owned readers' self-test).
    BustedOwned,
    /// The `rcu` run plus an `rcukit::RcuHashMap` on the same domain: map writers replace,
    /// insert and remove keys and push the table through grow/shrink cycles, readers look keys
    /// up and check the values' ages (see [`crate::map`]).
    Map,
    /// The `map` run with a map that drops removed values at once instead of after a grace
    /// period: the run must fail (the map checks' self-test).
    BustedMap,
    /// The `map` run with an `rcukit::RcuFlatMap` (entries inline, cloned into each new table,
    /// removed values dropped with their table) in place of the `RcuHashMap`.
    FlatMap,
    /// The `flat-map` run with a map whose replaced tables drop their entries at once instead
    /// of after a grace period: the run must fail (the flat map checks' self-test).
    BustedFlatMap,
    /// The `qsbr` run plus an `rcukit::RcuFlatMap` on the same QSBR domain: the `flat-map`
    /// run's map, writers and checks, read by the online reader threads with no guard.
    QsbrFlatMap,
    /// The `qsbr-flat-map` run on a domain with fenced quiescent states (as `qsbr-fenced`).
    QsbrFencedFlatMap,
    /// The `qsbr-flat-map` run with the `busted-flat-map` run's map: the run must fail (the
    /// QSBR map readers' self-test).
    BustedQsbrFlatMap,
}

impl FlavorName {
    /// The name as written on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            FlavorName::Rcu => "rcu",
            FlavorName::Qsbr => "qsbr",
            FlavorName::QsbrFenced => "qsbr-fenced",
            FlavorName::Recseq => "recseq",
            FlavorName::Busted => "busted",
            FlavorName::BustedBarrier => "busted-barrier",
            FlavorName::BustedOwned => "busted-owned",
            FlavorName::Map => "map",
            FlavorName::BustedMap => "busted-map",
            FlavorName::FlatMap => "flat-map",
            FlavorName::BustedFlatMap => "busted-flat-map",
            FlavorName::QsbrFlatMap => "qsbr-flat-map",
            FlavorName::QsbrFencedFlatMap => "qsbr-fenced-flat-map",
            FlavorName::BustedQsbrFlatMap => "busted-qsbr-flat-map",
        }
    }
}

/// The barrier pair, as a command-line value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FenceArg {
    /// Compiler fence in readers, `membarrier(2)` in grace periods.
    Membarrier,
    /// `fence(SeqCst)` on both sides.
    Seqcst,
}

impl From<FenceArg> for FenceKind {
    fn from(arg: FenceArg) -> FenceKind {
        match arg {
            FenceArg::Membarrier => FenceKind::Membarrier,
            FenceArg::Seqcst => FenceKind::SeqCst,
        }
    }
}

/// Settings of one torture run. [`Config::default`] is what the command line gives without
/// flags.
#[derive(Clone, Debug)]
pub struct Config {
    /// How long the readers and updaters run (the drain at the end comes on top).
    pub duration: Duration,
    /// The implementation under test.
    pub flavor: FlavorName,
    /// The barrier pair (`None`: the flavor's default, membarrier where the kernel has it for
    /// `rcu`, SeqCst for `recseq`). A `qsbr` domain always uses SeqCst fences and refuses
    /// membarrier.
    pub fence: Option<FenceKind>,
    /// Reader threads (each exits and is respawned now and then when `faults` is on).
    pub readers: usize,
    /// Updater threads besides the writer (rcutorture's "fake writers"): they wait for grace
    /// periods in every way, check cookies and test `barrier()`, without touching the pipe.
    pub updaters: usize,
    /// Inject faults: reader exits, panicking callbacks, a stalled reader, callback bursts.
    pub faults: bool,
    /// End the run at the first error instead of running for the whole duration.
    pub stop_on_error: bool,
    /// Seed for every thread's random choices (`None`: from the clock). Printed in the report.
    pub seed: Option<u64>,
    /// Print a progress line on stderr this often (`None`: never).
    pub progress: Option<Duration>,
    /// Stall timeout of the domain under test (the stall fault holds a reader past it).
    pub stall_timeout: Duration,
    /// Backlog threshold of the domain under test (the burst fault queues four times as many
    /// callbacks).
    pub backlog_callbacks: u64,
    /// Fraction (0 to 1) of the readers' outermost sections that are *owned* sections
    /// ([`Flavor::read_owned`](crate::Flavor::read_owned)), for flavors that have them; some of
    /// those sleep and some end on a helper thread (see the reader module). 0 turns them off.
    pub owned: f64,
}

/// Default [`Config::owned`]: one outermost section in eight.
pub const DEFAULT_OWNED: f64 = 0.125;

/// Default number of reader threads: the number of CPUs, at least 2.
pub fn default_readers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .max(2)
}

impl Default for Config {
    fn default() -> Self {
        Config {
            duration: Duration::from_secs(30),
            flavor: FlavorName::Rcu,
            fence: None,
            readers: default_readers(),
            updaters: 2,
            faults: true,
            stop_on_error: false,
            seed: None,
            progress: Some(Duration::from_secs(5)),
            stall_timeout: Duration::from_millis(200),
            backlog_callbacks: 1_000,
            owned: DEFAULT_OWNED,
        }
    }
}

/// Most reader or updater threads a run accepts.
pub const MAX_THREADS: usize = 1024;

impl Config {
    /// Check the settings; the error says what is wrong and what is accepted.
    pub fn validate(&self) -> Result<(), TortureError> {
        let bad = |msg: String| Err(TortureError::InvalidConfig(msg));
        if self.duration.is_zero() {
            return bad("--duration must be longer than zero".into());
        }
        if !(1..=MAX_THREADS).contains(&self.readers) {
            return bad(format!(
                "--readers {} is outside 1..={MAX_THREADS}",
                self.readers
            ));
        }
        if self.updaters > MAX_THREADS {
            return bad(format!(
                "--updaters {} is outside 0..={MAX_THREADS}",
                self.updaters
            ));
        }
        if self.stall_timeout < Duration::from_millis(10) {
            return bad(format!(
                "stall timeout {:?} is below 10 ms: ordinary readers would trip it",
                self.stall_timeout
            ));
        }
        if self.backlog_callbacks == 0 || self.backlog_callbacks > 1_000_000 {
            return bad(format!(
                "backlog threshold {} is outside 1..=1000000",
                self.backlog_callbacks
            ));
        }
        if !(0.0..=1.0).contains(&self.owned) {
            return bad(format!(
                "--owned {} is outside 0..=1 (a fraction of the outermost sections)",
                self.owned
            ));
        }
        Ok(())
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 30s, 2m, 1500ms)"))
}

/// The torture command line. Flatten it into another clap command with
/// `#[command(flatten)] args: TortureArgs`, then call [`crate::cli`].
#[derive(Clone, Debug, clap::Args)]
pub struct TortureArgs {
    /// How long to torture (30s, 2m, 1500ms, ...).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Implementation under test; `busted`, `busted-barrier`, `busted-map`, `busted-flat-map`
    /// and `busted-qsbr-flat-map` must FAIL (they prove the checker works), and so must
    /// `busted-owned`. `recseq` has only the `sync` update path (the others are skipped). `map`
    /// is the `rcu` run plus an `RcuHashMap` on the same domain, `flat-map` the same with an
    /// `RcuFlatMap`; `qsbr-flat-map` and `qsbr-fenced-flat-map` are the `qsbr` and
    /// `qsbr-fenced` runs plus an `RcuFlatMap` on their domain.
    #[arg(long, value_enum, default_value_t = FlavorName::Rcu)]
    pub flavor: FlavorName,
    /// Barrier pair of the domain [default: rcu and the maps: membarrier where the kernel has it,
    /// else seqcst; recseq: seqcst]. qsbr always uses seqcst.
    #[arg(long, value_enum)]
    pub fence: Option<FenceArg>,
    /// Reader threads [default: number of CPUs, at least 2].
    #[arg(long)]
    pub readers: Option<usize>,
    /// Updater threads besides the writer (rcutorture's fake writers).
    #[arg(long, default_value_t = 2)]
    pub updaters: usize,
    /// Do not inject faults (reader exits, panicking callbacks, stalls, callback bursts).
    #[arg(long)]
    pub no_faults: bool,
    /// Stop at the first error.
    #[arg(long)]
    pub stop_on_error: bool,
    /// Seed for the threads' random choices [default: from the clock].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Progress line interval on stderr; 0s turns it off.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub progress: Duration,
    /// Fraction (0-1) of the readers' sections that are owned sections (`read_owned()`; some
    /// sleep, some end on another thread), for the flavors that have them (rcu, the maps,
    /// busted-owned); 0 turns them off.
    #[arg(long, default_value_t = DEFAULT_OWNED)]
    pub owned: f64,
}

impl TortureArgs {
    /// The configuration these arguments describe.
    pub fn config(&self) -> Config {
        let defaults = Config::default();
        Config {
            duration: self.duration,
            flavor: self.flavor,
            fence: self.fence.map(FenceKind::from),
            readers: self.readers.unwrap_or(defaults.readers),
            updaters: self.updaters,
            faults: !self.no_faults,
            stop_on_error: self.stop_on_error,
            seed: self.seed,
            progress: (!self.progress.is_zero()).then_some(self.progress),
            owned: self.owned,
            ..defaults
        }
    }
}

/// Why a torture run could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum TortureError {
    /// The flavor is not part of this build (every [`FlavorName`] of this build is; kept for
    /// builds that leave one out).
    Unavailable(FlavorName),
    /// A setting is out of range.
    InvalidConfig(String),
    /// The domain under test could not be built (for example membarrier asked for where the
    /// kernel lacks it).
    Domain(rcukit::Error),
}

impl std::fmt::Display for TortureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TortureError::Unavailable(name) => {
                write!(f, "{} flavor not available in this build", name.as_str())
            }
            TortureError::InvalidConfig(msg) => f.write_str(msg),
            TortureError::Domain(e) => write!(f, "cannot build the domain under test: {e}"),
        }
    }
}

impl std::error::Error for TortureError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TortureError::Domain(e) => Some(e),
            _ => None,
        }
    }
}

impl From<rcukit::Error> for TortureError {
    fn from(e: rcukit::Error) -> Self {
        TortureError::Domain(e)
    }
}
