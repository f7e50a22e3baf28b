//! Seed 004: callbacks (and `synchronize()`) released by expedited grace periods.
//!
//! # What the seed measured
//!
//! Before the series, `call_rcu()` callbacks waited for a *normal* grace period even when an
//! expedited one, which proves the same thing, had already ended. Two benchmarks, each on the
//! same machine with and without the patches:
//!
//! * 15 threads create and close UDP sockets (each close frees the socket through
//!   `call_rcu`) while other threads trigger expedited grace periods through BPF map-in-map
//!   updates, sleeping 0 to 10 ms between them. The patched kernel held 1.5 to 1.7 times less
//!   `sock_inode` slab at every rate.
//! * rcuscale: 16 writers time `synchronize_rcu()` while 2 threads run expedited grace
//!   periods; the average fell from 12.0 ms to 8.1 ms.
//!
//! # The model
//!
//! rcukit has the seed's switch built in: `Rcu::builder().expedited_callbacks(false)` is the
//! pre-series behaviour (callbacks and `synchronize()` wait for a normal grace period only),
//! `true` (the default) lets either kind release them. Both run on the same build, in domains of
//! their own, interleaved point by point.
//!
//! * **Part (a), pending memory.** `churn` threads retire 1 KiB objects (`retire(Box<Sock>)`,
//!   the socket close) in batches with a short pause between batches, so that the machine is
//!   not saturated and the retire rate is the same with the switch on and off. `exp` threads
//!   loop `synchronize_expedited()` and sleep `delay` (0 to 10 ms). The main thread samples
//!   `Stats::pending_bytes` every millisecond. The domain's backlog "hurry" and the retiring
//!   threads' own tried grace periods are disabled (thresholds at their maximum) in both
//!   configurations, so that the switch is the only difference and the only expedited grace
//!   periods are the `exp` threads'.
//! * **Part (b), `synchronize()` latency.** `writers` threads loop `synchronize()` `runs`
//!   times each, timing every call, while 2 threads loop `synchronize_expedited()` with
//!   `exp_interval` between calls (rcuscale's `nexp`/`exp_interval`).
//!
//! Every object retired is freed by the end of every point (checked: the objects count their
//! own drops, and the domain's invoked count equals its queued count).

mod render;
mod run;
mod schemes;

pub use run::{run, Body, Latency, LatencyPoint, PendingDelay, PendingPoint, SeedFigures};

use super::{
    check_distinct, check_duration, check_range, check_threads, ser_ms, ser_ms_list, Common,
    Envelope, Experiment, Rendered,
};
use crate::measure;
use crate::progress::Progress;
use anyhow::{bail, Result};
use serde::Serialize;
use std::time::Duration;

/// File stem and subcommand name.
pub const NAME: &str = "callbacks";

/// Size of a retired object (the seed's socket inode is about this size).
pub const OBJECT_BYTES: usize = 1024;

/// Settings.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Part (a): threads retiring objects (default one per core).
    pub churn_threads: usize,
    /// Part (a): objects retired per batch.
    pub churn_batch: usize,
    /// Part (a): pause after each batch.
    #[serde(rename = "churn_pause_us", serialize_with = "ser_us")]
    pub churn_pause: Duration,
    /// Part (a): threads running expedited grace periods.
    pub exp_threads: usize,
    /// Part (a): sleep between expedited grace periods, one point per value.
    #[serde(rename = "delays_ms", serialize_with = "ser_ms_list")]
    pub delays: Vec<Duration>,
    /// Part (a): measuring time per (delay, switch) point.
    #[serde(rename = "point_ms", serialize_with = "ser_ms")]
    pub point: Duration,
    /// Part (a): sampling interval of `pending_bytes`.
    #[serde(rename = "sample_us", serialize_with = "ser_us")]
    pub sample: Duration,
    /// Part (b): threads timing `synchronize()` (default one per core; the seed: 16).
    pub writers: usize,
    /// Part (b): `synchronize()` calls per writer (the seed: 30 runs).
    pub runs: usize,
    /// Part (b): threads running expedited grace periods (the seed: 2).
    pub sync_exp_threads: usize,
    /// Part (b): pause between their expedited grace periods, one point per value (the first
    /// is the headline).
    #[serde(rename = "exp_intervals_us", serialize_with = "ser_us_list")]
    pub exp_intervals: Vec<Duration>,
    /// Quick mode.
    pub quick: bool,
}

fn ser_us<S: serde::Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(measure::us(*d))
}

fn ser_us_list<S: serde::Serializer>(d: &[Duration], s: S) -> std::result::Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(d.len()))?;
    for x in d {
        seq.serialize_element(&measure::us(*x))?;
    }
    seq.end()
}

impl Config {
    /// Defaults for `common`.
    pub fn new(common: &Common) -> Config {
        let ms = Duration::from_millis;
        Config {
            churn_threads: common.threads,
            churn_batch: 16,
            churn_pause: Duration::from_micros(200),
            exp_threads: 1,
            delays: common.pick(
                vec![ms(0), ms(2), ms(10)],
                vec![ms(0), ms(1), ms(2), ms(5), ms(10)],
            ),
            point: common.pick(ms(500), ms(2000)),
            sample: Duration::from_millis(1),
            writers: common.threads,
            runs: common.pick(10, 30),
            sync_exp_threads: 2,
            exp_intervals: common.pick(vec![ms(1)], vec![ms(1), Duration::from_micros(100), ms(5)]),
            quick: common.quick,
        }
    }

    /// Reject impossible settings.
    pub fn validate(&self) -> Result<()> {
        check_threads("--churn-threads", self.churn_threads)?;
        check_range("--churn-batch", self.churn_batch as u64, 1, 1_000_000)?;
        if self.churn_pause > Duration::from_secs(1) {
            bail!("--churn-pause = {:?} is longer than 1 s", self.churn_pause);
        }
        check_threads("--exp-threads", self.exp_threads)?;
        if self.delays.is_empty() {
            bail!("--delays needs at least one delay");
        }
        for d in &self.delays {
            if *d > Duration::from_secs(10) {
                bail!("--delays: {d:?} is longer than 10 s");
            }
        }
        check_distinct("--delays", &self.delays, |d| format!("{d:?}"))?;
        check_duration("--point", self.point)?;
        check_duration("sample interval", self.sample)?;
        check_threads("--writers", self.writers)?;
        check_range("--runs", self.runs as u64, 1, 100_000)?;
        check_threads("--sync-exp-threads", self.sync_exp_threads)?;
        if self.exp_intervals.is_empty() {
            bail!("--exp-intervals needs at least one interval");
        }
        for d in &self.exp_intervals {
            if *d > Duration::from_secs(10) {
                bail!("--exp-intervals: {d:?} is longer than 10 s");
            }
        }
        check_distinct("--exp-intervals", &self.exp_intervals, |d| format!("{d:?}"))?;
        Ok(())
    }
}

/// Flags of the `callbacks` subcommand.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Args {
    /// (a) Threads retiring 1 KiB objects [default: one per core]
    #[arg(long)]
    pub churn_threads: Option<usize>,
    /// (a) Objects retired per batch [default: 16]
    #[arg(long)]
    pub churn_batch: Option<usize>,
    /// (a) Pause after each batch, e.g. 200us [default: 200us]
    #[arg(long, value_parser = crate::args::parse_duration)]
    pub churn_pause: Option<Duration>,
    /// (a) Threads running expedited grace periods [default: 1]
    #[arg(long)]
    pub exp_threads: Option<usize>,
    /// (a) Sleeps between expedited grace periods, comma-separated, e.g. 0ms,1ms,10ms
    #[arg(long, value_delimiter = ',', value_parser = crate::args::parse_duration)]
    pub delays: Vec<Duration>,
    /// (a) Measuring time per point [default: 500ms quick, 2s full]
    #[arg(long, value_parser = crate::args::parse_duration)]
    pub point: Option<Duration>,
    /// (b) Threads timing synchronize() [default: one per core]
    #[arg(long)]
    pub writers: Option<usize>,
    /// (b) synchronize() calls per writer [default: 10 quick, 30 full]
    #[arg(long)]
    pub runs: Option<usize>,
    /// (b) Threads running expedited grace periods [default: 2, as in the seed]
    #[arg(long)]
    pub sync_exp_threads: Option<usize>,
    /// (b) Pauses between their expedited grace periods, comma-separated [default: 1ms]
    #[arg(long, value_delimiter = ',', value_parser = crate::args::parse_duration)]
    pub exp_intervals: Vec<Duration>,
}

/// The experiment's result: the envelope around [`Body`].
pub type Report = Envelope<Config, Body>;

/// The experiment, for the shared drivers.
pub struct Callbacks;

impl Experiment for Callbacks {
    const NAME: &'static str = NAME;
    const TITLE: &'static str = "Seed 004: callbacks released by expedited grace periods";
    const SEEDS: &'static [&'static str] = &["004"];
    type Config = Config;
    type Args = Args;
    type Report = Report;

    fn config(common: &Common) -> Config {
        Config::new(common)
    }

    fn apply(args: &Args, cfg: &mut Config) {
        crate::override_fields!(
            args => cfg; churn_threads, churn_batch, churn_pause, exp_threads, point, writers,
            runs, sync_exp_threads;
            lists: delays, exp_intervals
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
