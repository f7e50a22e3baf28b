//! Seed 001: packet capture while `tcpdump` attaches and detaches filters.
//!
//! # What the seed measured
//!
//! FreeBSD's BPF took a reader-writer lock for every inbound packet once a listener was
//! attached. On a 28-core Xeon receiving 6 Mpps, running `tcpdump` made the NIC drop 0.5 to
//! 1.9 Mpps (netstat's `idrops`: 1.9M of 6.0M, about 32 %) from lock contention alone; the
//! patch moved the descriptor lists to `CK_LIST` under `epoch(9)` and the drops went away.
//!
//! # The model
//!
//! * `packet` threads each serve a NIC queue: packets arrive at a fixed rate into a ring of
//!   `ring` descriptors. A thread processes packets in order; when it falls more than `ring`
//!   packets behind, the oldest are overwritten (dropped), exactly like a NIC ring overflow.
//!   When it has caught up it sleeps for a quarter of the ring's time (at most 100 µs), like
//!   interrupt moderation, so that an idle queue leaves the CPU to the other threads.
//!   Processing a packet means entering the scheme's read side and running every attached
//!   descriptor's filter (a list of comparisons, like a compiled BPF program) over it.
//! * One descriptor stays attached throughout (a first `tcpdump`); a `tcpdump` thread attaches
//!   and detaches a second descriptor every `interval`, taking the writer side. A writer builds
//!   the new descriptor outside any lock, as the patched and unpatched kernels both do.
//! * The offered rate is swept: at low rates every scheme keeps up; the rate at which a
//!   scheme starts dropping is its capacity. Drops under the `no-listener` reference (no lock,
//!   no filter: the path without tcpdump) are the machine's own noise floor.
//! * Every scheme that filters pays for the filters, and `no-listener` runs none, so against
//!   `no-listener` every such scheme looks like it drops packets. The `filter-only` reference
//!   runs the same filters (the first descriptor, and tcpdump's while it is attached) with no
//!   synchronization at all: the lists it switches between are built before the run and never
//!   freed. Its capacity is the filter's own, and the seed's claim, that with epoch(9) the
//!   drops are *gone*, reads here as: an RCU scheme's capacity equals `filter-only`'s
//!   (`capacity_vs_filter_only` = 1.0).
//!
//! Every packet is accounted for: `processed + drops + backlog == offered` at every point.
//!
//! # Schemes
//!
//! | id | read side per packet | tcpdump's attach / detach |
//! |---|---|---|
//! | `no-listener` | nothing (no lock, no filter): the noise floor | none |
//! | `filter-only` | the filters, no synchronization: the capacity reference | a flag flipped between two prebuilt lists |
//! | `rwlock` | parking_lot `RwLock::read` (FreeBSD before the patch) | in place under the write lock |
//! | `rcu` | `Rcu::read` | copy-on-write vector behind an `AtomicPtr`, old vector retired |
//! | `rcu-list` | `Rcu::read`, walk an `rcukit::RcuList` (the patch's `CK_LIST`) | `push_front` / `remove_first`, the node retired |
//! | `qsbr` | nothing: a plain load; the thread announces a quiescent state after each burst of at most 32 packets and goes offline while it sleeps | copy-on-write vector, old vector retired through the QSBR domain |
//! | `epoch` | crossbeam-epoch `pin` (the peer closest to FreeBSD's epoch(9)) | copy-on-write vector, `defer_destroy` |
//!
//! Every scheme that defers frees does so through callbacks (no writer ever blocks on a grace
//! period), so the schemes differ only in what the packet path does.

mod packets;
mod render;
mod run;
mod schemes;

pub use render::headline_rate;
pub use run::{run, Body, Point, SchemeResult, SeedFigures};
pub use schemes::SchemeId;

use super::{
    check_distinct, check_duration, check_range, check_threads, ser_ms, Common, Envelope,
    Experiment, Rendered, Unavailable,
};
use crate::progress::Progress;
use anyhow::{bail, Result};
use serde::Serialize;
use std::time::Duration;

/// File stem and subcommand name.
pub const NAME: &str = "capture";

/// Schemes the experiment knows but this build cannot run yet (none: every scheme it
/// compares runs).
pub const UNAVAILABLE: &[Unavailable] = &[];

/// Settings.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Packet threads (NIC queues); default one per core.
    pub packet_threads: usize,
    /// Offered rates to sweep, packets per second per thread.
    pub rates: Vec<f64>,
    /// Ring size in packets: a thread more than this many packets behind drops the oldest.
    pub ring: u64,
    /// Comparisons in each filter program.
    pub filter_len: usize,
    /// How often the tcpdump thread attaches or detaches its descriptor.
    #[serde(rename = "interval_ms", serialize_with = "ser_ms")]
    pub interval: Duration,
    /// Total measuring time of each (scheme, rate) point, split over `rounds`.
    #[serde(rename = "point_ms", serialize_with = "ser_ms")]
    pub point: Duration,
    /// Rounds: every round visits every (rate, scheme) pair once, so that a burst of load
    /// from elsewhere on the machine hits all schemes alike.
    pub rounds: u32,
    /// Quick mode.
    pub quick: bool,
}

impl Config {
    /// Defaults for `common`.
    pub fn new(common: &Common) -> Config {
        Config {
            packet_threads: common.threads,
            rates: common.pick(
                vec![2e6, 8e6, 16e6, 32e6],
                vec![500e3, 1e6, 2e6, 4e6, 8e6, 16e6, 32e6],
            ),
            ring: 4096,
            filter_len: 16,
            interval: Duration::from_millis(1),
            point: common.pick(Duration::from_millis(400), Duration::from_millis(1500)),
            rounds: common.pick(4, 8),
            quick: common.quick,
        }
    }

    /// Reject impossible settings.
    pub fn validate(&self) -> Result<()> {
        check_threads("--packet-threads", self.packet_threads)?;
        if self.rates.is_empty() {
            bail!("--rates needs at least one rate");
        }
        for &r in &self.rates {
            if !(r.is_finite() && (1.0..=1e9).contains(&r)) {
                bail!("--rates: {r} packets/s per thread is outside 1..=1e9");
            }
        }
        check_distinct("--rates", &self.rates, f64::to_string)?;
        check_range("--ring", self.ring, 1, 1 << 24)?;
        check_range("--filter-len", self.filter_len as u64, 1, 4096)?;
        check_duration("--interval", self.interval)?;
        check_duration("--point", self.point)?;
        check_range("--rounds", self.rounds as u64, 1, 1000)?;
        Ok(())
    }
}

/// Flags of the `capture` subcommand.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Args {
    /// Packet threads [default: one per core]
    #[arg(long)]
    pub packet_threads: Option<usize>,
    /// Offered rates to sweep, packets/s per thread, comma-separated (e.g. 1e6,2e6)
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<f64>,
    /// Ring size in packets [default: 4096]
    #[arg(long)]
    pub ring: Option<u64>,
    /// Comparisons per filter program [default: 16]
    #[arg(long)]
    pub filter_len: Option<usize>,
    /// How often tcpdump attaches or detaches, e.g. 1ms [default: 1ms]
    #[arg(long, value_parser = crate::args::parse_duration)]
    pub interval: Option<Duration>,
    /// Measuring time of each (scheme, rate) point [default: 400ms quick, 1500ms full]
    #[arg(long, value_parser = crate::args::parse_duration)]
    pub point: Option<Duration>,
    /// Rounds the points are split over, interleaving the schemes [default: 4 quick, 8 full]
    #[arg(long)]
    pub rounds: Option<u32>,
}

/// The experiment's result: the envelope around [`Body`].
pub type Report = Envelope<Config, Body>;

/// The experiment, for the shared drivers.
pub struct Capture;

impl Experiment for Capture {
    const NAME: &'static str = NAME;
    const TITLE: &'static str = "Seed 001: packet capture while tcpdump changes filters";
    const SEEDS: &'static [&'static str] = &["001"];
    type Config = Config;
    type Args = Args;
    type Report = Report;

    fn config(common: &Common) -> Config {
        Config::new(common)
    }

    fn apply(args: &Args, cfg: &mut Config) {
        crate::override_fields!(
            args => cfg; packet_threads, ring, filter_len, interval, point, rounds;
            lists: rates
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
