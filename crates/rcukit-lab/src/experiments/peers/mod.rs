//! rcukit beside the systems people use today, in one run.
//!
//! Four measurements, each on every peer that offers the operation:
//!
//! * **Read-side cost**: nanoseconds per read-side section that loads a shared pointer and
//!   reads the value behind it, with 1 thread and with as many threads as cores, all reading
//!   at once. The plain atomic load is the floor. rcukit appears with each of its read sides:
//!   `Rcu::read` (global and custom domain), `RcuCell::load`, a `Qsbr` domain (a plain load,
//!   a quiescent state every 1024 sections, as the liburcu-qsbr loop), `RecSeq::read` and
//!   `PerCpuRwLock::read`.
//! * **Grace-period latency**: how long one grace period takes while one other thread runs
//!   read-side sections back to back (a "busy reader"; for QSBR, a registered thread that
//!   announces a quiescent state after every section). For crossbeam-epoch, which has no
//!   grace-period call, it is the time from `defer` (and `flush`) until the deferred closure
//!   runs while the caller keeps pinning and flushing: the earliest point its reclamation can
//!   happen. arc-swap, seize and the locks have no grace period to measure.
//! * **Retire throughput**: objects per second through each library's deferred-free API, end
//!   to end: one thread allocates and queues `retire_objects` objects of 56 bytes (one
//!   `malloc` each), then waits until every one has been dropped (rcukit `barrier`, crossbeam
//!   pins and flushes, seize drops its collector, liburcu `rcu_barrier`, ck
//!   `ck_epoch_barrier`); the clock runs from the first allocation to the last drop. Every
//!   object is counted when dropped (into a static counter, as the C peers do); the count
//!   must equal the number queued. rcukit's domain is started before and stopped after the
//!   clock (its threads are not part of retiring).
//!
//! * **liburcu's benchmark shape** (`test_urcu`): N readers in back-to-back sections and one
//!   writer looping publish → grace period → free, with N = 1, 2, 4 (2 to 5 runnable threads
//!   on a 2-core machine): reads/s, grace periods/s and the writer's CPU time per grace
//!   period, for `Rcu` and `Qsbr` (expedited and normal), `RcuCell` writes, and liburcu memb
//!   and qsbr (see `shapes`).
//!
//! Every figure is measured in `rounds` interleaved rounds (each round measures every peer once,
//! in an order rotated from round to round) and reported as the median with the smallest and
//! largest round; every ratio is taken round by round against rcukit's figure of the same round,
//! then summarised the same way. The machine is shared and costs drift between invocations:
//! figures from one round, or ratios between separate runs, decide nothing.
//!
//! With the `c-peers` feature, liburcu's memb and qsbr flavors and Concurrency Kit's ck_epoch
//! join through FFI (their loops run in C; see `c_peers`, compiled with the feature).

mod grace_period;
mod read;
mod render;
mod retire;
mod run;
mod shapes;

pub use grace_period::{GpPeer, GpResult};
pub use read::{ReadPeer, ReadResult};
pub use retire::{RetirePeer, RetireResult};
pub use run::{run, Body};
pub use shapes::{ShapePeer, ShapeResult};

use super::{
    check_distinct, check_duration, check_range, check_threads, ser_ms, Common, Envelope,
    Experiment, Rendered, Unavailable,
};
use crate::progress::Progress;
use anyhow::{bail, Result};
use serde::Serialize;
use std::time::Duration;

/// File stem and subcommand name.
pub const NAME: &str = "peers";

/// Schemes the experiment knows but this build cannot run yet (none: every peer it compares
/// runs).
pub const UNAVAILABLE: &[Unavailable] = &[];

/// The measurements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Part {
    /// Read-side cost.
    Read,
    /// Grace-period latency.
    GracePeriod,
    /// Retire throughput.
    Retire,
    /// liburcu's benchmark shape: N readers + 1 writer.
    Shapes,
}

/// Settings.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// The measurements to make (default all four).
    pub parts: Vec<Part>,
    /// Thread counts for the read-side cost (default 1 and the number of cores).
    pub read_threads: Vec<usize>,
    /// Measuring time per (peer, thread count) in each round.
    #[serde(rename = "read_time_ms", serialize_with = "ser_ms")]
    pub read_time: Duration,
    /// Measuring time per grace-period peer in each round.
    #[serde(rename = "gp_time_ms", serialize_with = "ser_ms")]
    pub gp_time: Duration,
    /// Most grace periods timed per peer in each round.
    pub gp_max_samples: usize,
    /// Objects each retire-throughput peer queues in each round.
    pub retire_objects: u64,
    /// Reader counts of the N readers + 1 writer shape (default 1, 2, 4).
    pub shape_readers: Vec<usize>,
    /// The shape's peers (default all of this build's).
    pub shape_peers: Vec<ShapePeer>,
    /// Measuring time per (shape peer, reader count) in each round.
    #[serde(rename = "shape_time_ms", serialize_with = "ser_ms")]
    pub shape_time: Duration,
    /// Interleaved rounds per figure (the median and the spread are reported).
    pub rounds: usize,
    /// Quick mode.
    pub quick: bool,
}

impl Config {
    /// Defaults for `common`.
    pub fn new(common: &Common) -> Config {
        let mut read_threads = vec![1, common.threads];
        read_threads.dedup();
        Config {
            parts: vec![Part::Read, Part::GracePeriod, Part::Retire, Part::Shapes],
            read_threads,
            read_time: common.pick(Duration::from_millis(30), Duration::from_millis(200)),
            gp_time: common.pick(Duration::from_millis(80), Duration::from_millis(400)),
            gp_max_samples: 1000,
            retire_objects: common.pick(200_000, 1_000_000),
            shape_readers: common.pick(vec![1, 2], vec![1, 2, 4]),
            shape_peers: ShapePeer::all(),
            shape_time: common.pick(Duration::from_millis(150), Duration::from_millis(600)),
            rounds: common.pick(5, 7),
            quick: common.quick,
        }
    }

    /// Reject impossible settings.
    pub fn validate(&self) -> Result<()> {
        if self.parts.is_empty() {
            bail!("--parts needs at least one of read, grace-period, retire, shapes");
        }
        check_distinct("--parts", &self.parts, |p| {
            clap::ValueEnum::to_possible_value(p)
                .map_or_else(|| format!("{p:?}"), |v| v.get_name().to_string())
        })?;
        if self.read_threads.is_empty() {
            bail!("--read-threads needs at least one count");
        }
        for &n in &self.read_threads {
            check_threads("--read-threads", n)?;
        }
        check_distinct("--read-threads", &self.read_threads, usize::to_string)?;
        check_duration("--read-time", self.read_time)?;
        check_duration("--gp-time", self.gp_time)?;
        check_range("gp samples", self.gp_max_samples as u64, 1, 1_000_000)?;
        check_range("--retire-objects", self.retire_objects, 1, 100_000_000)?;
        if self.shape_readers.is_empty() {
            bail!("--shape-readers needs at least one count");
        }
        for &n in &self.shape_readers {
            check_threads("--shape-readers", n)?;
        }
        check_distinct("--shape-readers", &self.shape_readers, usize::to_string)?;
        if self.shape_peers.is_empty() {
            bail!("--shape-peers needs at least one peer");
        }
        check_distinct("--shape-peers", &self.shape_peers, |p| p.id().to_string())?;
        check_duration("--shape-time", self.shape_time)?;
        check_range("--rounds", self.rounds as u64, 1, 1000)?;
        Ok(())
    }
}

/// Flags of the `peers` subcommand.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Args {
    /// Measurements to make, comma-separated [default: all four]
    #[arg(long, value_enum, value_delimiter = ',')]
    pub parts: Vec<Part>,
    /// Thread counts for the read-side cost, comma-separated [default: 1 and the cores]
    #[arg(long, value_delimiter = ',')]
    pub read_threads: Vec<usize>,
    /// Measuring time per read-side point and round [default: 30ms quick, 200ms full]
    #[arg(long, value_parser = crate::args::parse_duration)]
    pub read_time: Option<Duration>,
    /// Measuring time per grace-period peer and round [default: 80ms quick, 400ms full]
    #[arg(long, value_parser = crate::args::parse_duration)]
    pub gp_time: Option<Duration>,
    /// Objects queued per retire-throughput peer and round [default: 200000 quick, 1000000 full]
    #[arg(long)]
    pub retire_objects: Option<u64>,
    /// Reader counts of the N readers + 1 writer shape, comma-separated [default: 1,2 quick; 1,2,4 full]
    #[arg(long, value_delimiter = ',')]
    pub shape_readers: Vec<usize>,
    /// Peers of the shape, comma-separated ids (as the report names them) [default: all]
    #[arg(long, value_delimiter = ',', value_parser = shapes::parse_shape_peer)]
    pub shape_peers: Vec<ShapePeer>,
    /// Measuring time per shape point and round [default: 150ms quick, 600ms full]
    #[arg(long, value_parser = crate::args::parse_duration)]
    pub shape_time: Option<Duration>,
    /// Interleaved rounds per figure; medians and min-max are reported [default: 5 quick, 7 full]
    #[arg(long)]
    pub rounds: Option<usize>,
}

/// The experiment's result: the envelope around [`Body`].
pub type Report = Envelope<Config, Body>;

/// The experiment, for the shared drivers.
pub struct Peers;

impl Experiment for Peers {
    const NAME: &'static str = NAME;
    const TITLE: &'static str =
        "Peers: rcukit beside crossbeam-epoch, arc-swap, seize, locks (and liburcu, ck)";
    const SEEDS: &'static [&'static str] = &[];
    type Config = Config;
    type Args = Args;
    type Report = Report;

    fn config(common: &Common) -> Config {
        Config::new(common)
    }

    fn apply(args: &Args, cfg: &mut Config) {
        crate::override_fields!(
            args => cfg; read_time, gp_time, retire_objects, shape_time, rounds;
            lists: read_threads, parts, shape_readers, shape_peers
        );
    }

    fn validate(cfg: &Config) -> Result<()> {
        cfg.validate()
    }

    fn run(cfg: &Config, progress: &Progress) -> Result<Report> {
        run(cfg, progress)
    }

    fn render(report: &Report) -> Result<Rendered> {
        render::render(report)
    }
}
