//! Seed 002: read throughput by thread count, one central reader-writer lock against readers
//! that touch no shared cache line.
//!
//! # What the seed measured
//!
//! Eric Dumazet's 2005 ip_tables series replaced the central rwlock of each table by one lock
//! per CPU ("it avoids cache line ping pongs for each packet"); with the loop unrolling and
//! NUMA placement that came with it, `ipt_do_table` went from the top of the profile to 6th
//! place, using a third of the CPU it used before, on dual Xeon and dual Opteron machines.
//!
//! # The model
//!
//! Reader threads loop over a short critical section (scan a small rule table of `work`
//! entries) under each scheme's read side; no writer runs. What differs is only what the read
//! side touches: the central lock's word is written by every reader (two atomic
//! read-modify-writes per section, so its cache line moves between cores), the per-CPU lock's
//! reader makes the same two atomics on a line of its own slot, RCU's reader writes only its
//! own record, and a QSBR reader writes nothing at all (one store per 64 sections, its
//! quiescent state).
//!
//! # Schemes
//!
//! | id | read side |
//! |---|---|
//! | `rwlock` (baseline) | parking_lot `RwLock::read`, one central lock |
//! | `std-rwlock` | std `RwLock::read`, one central lock |
//! | `percpu-rwlock` | `rcukit::PerCpuRwLock::read`: one lock word per slot (the seed's fix) |
//! | `rcu` | `Rcu::read` on a domain of its own |
//! | `qsbr` | a plain load; each thread registered with an `rcukit::Qsbr` domain, a quiescent state every 64 sections |

mod render;
mod run;
mod schemes;

pub use run::{run, Body, Point, SchemeResult};
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
pub const NAME: &str = "percpu";

/// Schemes the experiment knows but this build cannot run yet (none: every scheme it
/// compares runs).
pub const UNAVAILABLE: &[Unavailable] = &[];

/// Settings.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Reader thread counts to measure (default 1..=cores).
    pub thread_counts: Vec<usize>,
    /// Entries in the rule table each read scans.
    pub work: usize,
    /// Measuring time per (scheme, thread count).
    #[serde(rename = "point_ms", serialize_with = "ser_ms")]
    pub point: Duration,
    /// Quick mode.
    pub quick: bool,
}

impl Config {
    /// Defaults for `common`.
    pub fn new(common: &Common) -> Config {
        Config {
            thread_counts: (1..=common.threads).collect(),
            work: 8,
            point: common.pick(Duration::from_millis(250), Duration::from_secs(1)),
            quick: common.quick,
        }
    }

    /// Reject impossible settings.
    pub fn validate(&self) -> Result<()> {
        if self.thread_counts.is_empty() {
            bail!("--thread-counts needs at least one count");
        }
        for &n in &self.thread_counts {
            check_threads("--thread-counts", n)?;
        }
        check_distinct("--thread-counts", &self.thread_counts, usize::to_string)?;
        check_range("--work", self.work as u64, 1, 1 << 20)?;
        check_duration("--point", self.point)?;
        Ok(())
    }
}

/// Flags of the `percpu` subcommand.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Args {
    /// Reader thread counts, comma-separated [default: 1 to the number of cores]
    #[arg(long, value_delimiter = ',')]
    pub thread_counts: Vec<usize>,
    /// Rule-table entries each read scans [default: 8]
    #[arg(long)]
    pub work: Option<usize>,
    /// Measuring time per (scheme, thread count) [default: 250ms quick, 1s full]
    #[arg(long, value_parser = crate::args::parse_duration)]
    pub point: Option<Duration>,
}

/// The experiment's result: the envelope around [`Body`].
pub type Report = Envelope<Config, Body>;

/// The experiment, for the shared drivers.
pub struct Percpu;

impl Experiment for Percpu {
    const NAME: &'static str = NAME;
    const TITLE: &'static str = "Seed 002: read throughput, central rwlock vs per-reader state";
    const SEEDS: &'static [&'static str] = &["002"];
    type Config = Config;
    type Args = Args;
    type Report = Report;

    fn config(common: &Common) -> Config {
        Config::new(common)
    }

    fn apply(args: &Args, cfg: &mut Config) {
        if !args.thread_counts.is_empty() {
            cfg.thread_counts = args.thread_counts.clone();
        }
        crate::override_fields!(args => cfg; work, point);
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
