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
//!   `Stats::pending_bytes` every millisecond. The domain's backlog "hurry" is disabled (set to
//!   its maximum) in both configurations, so that the switch is the only difference.
//! * **Part (b), `synchronize()` latency.** `writers` threads loop `synchronize()` `runs`
//!   times each, timing every call, while 2 threads loop `synchronize_expedited()` with
//!   `exp_interval` between calls (rcuscale's `nexp`/`exp_interval`).
//!
//! Every object retired is freed by the end of every point (checked: the objects count their
//! own drops, and the domain's invoked count equals its queued count).

use super::{
    check_duration, check_range, check_threads, ser_ms, ser_ms_list, Common, Experiment, Rendered,
};
use crate::env::Environment;
use crate::measure::{self, ratio, Counter, StopFlag, Summary};
use crate::plot::{self, Axis, Panel, Series};
use crate::progress::{Progress, Task};
use crate::report::{self, Table};
use anyhow::{bail, Result};
use rcukit::Rcu;
use serde::Serialize;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    #[arg(long, value_parser = crate::cli::parse_duration)]
    pub churn_pause: Option<Duration>,
    /// (a) Threads running expedited grace periods [default: 1]
    #[arg(long)]
    pub exp_threads: Option<usize>,
    /// (a) Sleeps between expedited grace periods, comma-separated, e.g. 0ms,1ms,10ms
    #[arg(long, value_delimiter = ',', value_parser = crate::cli::parse_duration)]
    pub delays: Vec<Duration>,
    /// (a) Measuring time per point [default: 500ms quick, 2s full]
    #[arg(long, value_parser = crate::cli::parse_duration)]
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
    #[arg(long, value_delimiter = ',', value_parser = crate::cli::parse_duration)]
    pub exp_intervals: Vec<Duration>,
}

impl Args {
    /// Apply the flags given on top of `cfg`.
    pub fn apply(&self, cfg: &mut Config) {
        if let Some(v) = self.churn_threads {
            cfg.churn_threads = v;
        }
        if let Some(v) = self.churn_batch {
            cfg.churn_batch = v;
        }
        if let Some(v) = self.churn_pause {
            cfg.churn_pause = v;
        }
        if let Some(v) = self.exp_threads {
            cfg.exp_threads = v;
        }
        if !self.delays.is_empty() {
            cfg.delays = self.delays.clone();
        }
        if let Some(v) = self.point {
            cfg.point = v;
        }
        if let Some(v) = self.writers {
            cfg.writers = v;
        }
        if let Some(v) = self.runs {
            cfg.runs = v;
        }
        if let Some(v) = self.sync_exp_threads {
            cfg.sync_exp_threads = v;
        }
        if !self.exp_intervals.is_empty() {
            cfg.exp_intervals = self.exp_intervals.clone();
        }
    }
}

/// A retired object: 1 KiB that counts its own destruction.
struct Sock {
    _payload: [u8; OBJECT_BYTES - std::mem::size_of::<Arc<AtomicU64>>()],
    freed: Arc<AtomicU64>,
}

impl Drop for Sock {
    fn drop(&mut self) {
        self.freed.fetch_add(1, Relaxed);
    }
}

/// A domain with the seed-004 switch set, and the hurry disabled.
fn domain(expedited_callbacks: bool) -> Result<Rcu> {
    Ok(Rcu::builder()
        .name(if expedited_callbacks {
            "lab-cb-on"
        } else {
            "lab-cb-off"
        })
        .expedited_callbacks(expedited_callbacks)
        .backlog_callbacks(u64::MAX)
        .backlog_bytes(u64::MAX)
        .build()?)
}

/// Wait until every callback of `rcu` has run.
fn drain(rcu: &Rcu) {
    while rcu.stats().callbacks_pending > 0 {
        rcu.barrier();
    }
}

// ----------------------------------------------------------------------------------------------
// Part (a)

/// One (delay, switch) point of part (a).
#[derive(Clone, Debug, Serialize)]
pub struct PendingPoint {
    /// Mean of the sampled pending bytes.
    pub mean_pending_bytes: f64,
    /// Largest sampled pending bytes.
    pub peak_pending_bytes: u64,
    /// Samples taken.
    pub samples: usize,
    /// Expedited grace periods run per second (measured).
    pub exp_gps_per_s: f64,
    /// Normal grace periods completed per second.
    pub normal_gps_per_s: f64,
    /// Objects retired.
    pub retired: u64,
    /// Objects freed by the end of the point (must equal `retired`).
    pub freed: u64,
    /// The domain's `callbacks_invoked` (must equal its `callbacks_queued`).
    pub callbacks_invoked: u64,
    /// The domain's `callbacks_queued`.
    pub callbacks_queued: u64,
    /// Callbacks released by a normal grace period.
    pub released_by_normal: u64,
    /// Callbacks released by an expedited grace period first.
    pub released_by_expedited: u64,
}

/// One delay of part (a): the switch off and on.
#[derive(Clone, Debug, Serialize)]
pub struct PendingDelay {
    /// Sleep between expedited grace periods, ms.
    pub delay_ms: f64,
    /// `expedited_callbacks(false)`: the pre-seed-004 behaviour.
    pub baseline: PendingPoint,
    /// `expedited_callbacks(true)`.
    pub on: PendingPoint,
    /// baseline mean pending bytes / on (the seed: 1.5 to 1.7).
    pub ratio_mean: Option<f64>,
    /// baseline peak / on peak.
    pub ratio_peak: Option<f64>,
}

fn pending_point(cfg: &Config, on: bool, delay: Duration) -> Result<PendingPoint> {
    let rcu = domain(on)?;
    let freed = Arc::new(AtomicU64::new(0));
    let retired: Vec<Counter> = (0..cfg.churn_threads).map(|_| Counter::default()).collect();
    let stop = StopFlag::new();
    let mut samples = Vec::new();
    let (elapsed, exp_gps, normal_gps) = std::thread::scope(|s| -> Result<(Duration, u64, u64)> {
        let mut handles = Vec::new();
        for (t, count) in retired.iter().enumerate() {
            let (rcu, stop, freed) = (&rcu, &stop, &freed);
            handles.push(super::spawn_scoped(
                s,
                &format!("cb-churn{t}"),
                move || {
                    let mut n = 0;
                    while !stop.stopped() {
                        for _ in 0..cfg.churn_batch {
                            rcu.retire(Box::new(Sock {
                                _payload: [0; OBJECT_BYTES - std::mem::size_of::<Arc<AtomicU64>>()],
                                freed: freed.clone(),
                            }));
                        }
                        n += cfg.churn_batch as u64;
                        count.publish(n);
                        std::thread::sleep(cfg.churn_pause);
                    }
                },
            )?);
        }
        for t in 0..cfg.exp_threads {
            let (rcu, stop) = (&rcu, &stop);
            handles.push(super::spawn_scoped(s, &format!("cb-exp{t}"), move || {
                while !stop.stopped() {
                    rcu.synchronize_expedited();
                    if !delay.is_zero() {
                        std::thread::sleep(delay);
                    }
                }
            })?);
        }
        // Let the pipeline fill before sampling.
        std::thread::sleep(Duration::from_millis(50));
        let before = rcu.stats();
        let start = Instant::now();
        let mut next = start;
        while start.elapsed() < cfg.point {
            samples.push(rcu.stats().pending_bytes);
            next += cfg.sample;
            measure::sleep_until(next);
        }
        let elapsed = start.elapsed();
        let after = rcu.stats();
        stop.stop();
        for h in handles {
            super::join(h)?;
        }
        Ok((
            elapsed,
            after.expedited_gps - before.expedited_gps,
            after.normal_gps - before.normal_gps,
        ))
    })?;
    drain(&rcu);
    let stats = rcu.stats();
    let sampled: Vec<f64> = samples.iter().map(|&b| b as f64).collect();
    Ok(PendingPoint {
        mean_pending_bytes: Summary::of(&sampled).mean,
        peak_pending_bytes: samples.iter().copied().max().unwrap_or(0),
        samples: samples.len(),
        exp_gps_per_s: measure::per_sec(exp_gps, elapsed),
        normal_gps_per_s: measure::per_sec(normal_gps, elapsed),
        retired: measure::sum(&retired),
        freed: freed.load(Relaxed),
        callbacks_invoked: stats.callbacks_invoked,
        callbacks_queued: stats.callbacks_queued,
        released_by_normal: stats.released_by_normal,
        released_by_expedited: stats.released_by_expedited,
    })
}

// ----------------------------------------------------------------------------------------------
// Part (b)

/// `synchronize()` latency with the switch off or on.
#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    /// Mean, µs.
    pub mean_us: f64,
    /// Median, µs.
    pub p50_us: f64,
    /// 90th percentile, µs.
    pub p90_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Fastest, µs.
    pub min_us: f64,
    /// Slowest, µs.
    pub max_us: f64,
    /// Calls timed.
    pub samples: usize,
    /// Expedited grace periods per second the background threads ran.
    pub exp_gps_per_s: f64,
    /// Every sample, µs (for the distribution plot).
    pub all_us: Vec<f64>,
}

/// One expedited interval of part (b).
#[derive(Clone, Debug, Serialize)]
pub struct LatencyPoint {
    /// Pause between the background expedited grace periods, µs.
    pub exp_interval_us: f64,
    /// Switch off.
    pub baseline: Latency,
    /// Switch on.
    pub on: Latency,
    /// baseline mean / on mean (the seed: 12.0 / 8.1 = 1.48).
    pub ratio_mean: Option<f64>,
}

fn latency_point(cfg: &Config, on: bool, interval: Duration) -> Result<Latency> {
    let rcu = domain(on)?;
    let stop = StopFlag::new();
    let exp_runs = AtomicU64::new(0);
    let (samples, elapsed) = std::thread::scope(|s| -> Result<(Vec<f64>, Duration)> {
        let mut exp = Vec::new();
        for t in 0..cfg.sync_exp_threads {
            let (rcu, stop, runs) = (&rcu, &stop, &exp_runs);
            exp.push(super::spawn_scoped(s, &format!("cb-bexp{t}"), move || {
                while !stop.stopped() {
                    rcu.synchronize_expedited();
                    runs.fetch_add(1, Relaxed);
                    if !interval.is_zero() {
                        std::thread::sleep(interval);
                    }
                }
            })?);
        }
        let start = Instant::now();
        let mut writers = Vec::new();
        for t in 0..cfg.writers {
            let rcu = &rcu;
            writers.push(super::spawn_scoped(
                s,
                &format!("cb-writer{t}"),
                move || {
                    (0..cfg.runs)
                        .map(|_| {
                            let t = Instant::now();
                            rcu.synchronize();
                            measure::us(t.elapsed())
                        })
                        .collect::<Vec<f64>>()
                },
            )?);
        }
        let mut all = Vec::new();
        for h in writers {
            all.extend(super::join(h)?);
        }
        let elapsed = start.elapsed();
        stop.stop();
        for h in exp {
            super::join(h)?;
        }
        Ok((all, elapsed))
    })?;
    drain(&rcu);
    let s = Summary::of(&samples);
    Ok(Latency {
        mean_us: s.mean,
        p50_us: s.p50,
        p90_us: s.p90,
        p99_us: s.p99,
        min_us: s.min,
        max_us: s.max,
        samples: s.count,
        exp_gps_per_s: measure::per_sec(exp_runs.load(Relaxed), elapsed),
        all_us: samples,
    })
}

// ----------------------------------------------------------------------------------------------
// The report

/// The seed's figures.
#[derive(Clone, Debug, Serialize)]
pub struct SeedFigures {
    /// Where they come from.
    pub source: &'static str,
    /// Slab reduction, low end.
    pub slab_ratio_low: f64,
    /// Slab reduction, high end.
    pub slab_ratio_high: f64,
    /// synchronize_rcu() mean before, ms.
    pub sync_before_ms: f64,
    /// synchronize_rcu() mean after, ms.
    pub sync_after_ms: f64,
    /// before / after.
    pub sync_ratio: f64,
}

/// The experiment's result.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `callbacks`.
    pub experiment: &'static str,
    /// Seeds reproduced.
    pub seeds: [&'static str; 1],
    /// Where and how it ran.
    pub env: Environment,
    /// Settings.
    pub config: Config,
    /// Size of each retired object, bytes.
    pub object_bytes: usize,
    /// Part (a), one entry per delay.
    pub pending: Vec<PendingDelay>,
    /// Part (b), one entry per expedited interval; the first is the headline.
    pub synchronize: Vec<LatencyPoint>,
    /// The seed's figures.
    pub seed: SeedFigures,
}

/// Run the experiment.
pub fn run(cfg: &Config, progress: &Progress) -> Result<Report> {
    cfg.validate()?;
    let env = Environment::collect(cfg.quick);
    let steps = 2 * (cfg.delays.len() + cfg.exp_intervals.len());
    let task = progress.task(NAME, steps as u64);
    let pending = run_pending(cfg, &task)?;
    let synchronize = run_latency(cfg, &task)?;
    task.finish();
    Ok(Report {
        experiment: NAME,
        seeds: ["004"],
        env,
        config: cfg.clone(),
        object_bytes: OBJECT_BYTES,
        pending,
        synchronize,
        seed: SeedFigures {
            source: "seed 004: Puranjay Mohan, \"Enabling RCU Callbacks to Benefit from Expedited \
                     Grace Periods\" (LSFMM+BPF 2026): 15 socket threads + BPF map-in-map \
                     expedited GPs every 0-10 ms, sock_inode slab; rcuscale 16 writers + 2 \
                     expedited threads, 30 runs",
            slab_ratio_low: 1.5,
            slab_ratio_high: 1.7,
            sync_before_ms: 12.0,
            sync_after_ms: 8.1,
            sync_ratio: 12.0 / 8.1,
        },
    })
}

fn run_pending(cfg: &Config, task: &Task) -> Result<Vec<PendingDelay>> {
    let mut out = Vec::new();
    for &delay in &cfg.delays {
        let ms = measure::ms(delay);
        task.message(format!("(a) delay {ms} ms, switch off"));
        let baseline = pending_point(cfg, false, delay)?;
        task.inc();
        task.message(format!("(a) delay {ms} ms, switch on"));
        let on = pending_point(cfg, true, delay)?;
        task.inc();
        out.push(PendingDelay {
            delay_ms: ms,
            ratio_mean: ratio(baseline.mean_pending_bytes, on.mean_pending_bytes),
            ratio_peak: ratio(
                baseline.peak_pending_bytes as f64,
                on.peak_pending_bytes as f64,
            ),
            baseline,
            on,
        });
    }
    Ok(out)
}

fn run_latency(cfg: &Config, task: &Task) -> Result<Vec<LatencyPoint>> {
    let mut out = Vec::new();
    for &interval in &cfg.exp_intervals {
        let us = measure::us(interval);
        task.message(format!("(b) expedited every {us} µs, switch off"));
        let baseline = latency_point(cfg, false, interval)?;
        task.inc();
        task.message(format!("(b) expedited every {us} µs, switch on"));
        let on = latency_point(cfg, true, interval)?;
        task.inc();
        out.push(LatencyPoint {
            exp_interval_us: us,
            ratio_mean: ratio(baseline.mean_us, on.mean_us),
            baseline,
            on,
        });
    }
    Ok(out)
}

/// Tables, plots and headlines.
pub fn render(r: &Report) -> Result<Rendered> {
    let seed = &r.seed;
    let c = &r.config;
    let mut md = String::new();
    md.push_str(&format!(
        "Same build, two domains per point: `expedited_callbacks(false)` (baseline, before the \
         series) and `(true)` (on). Backlog hurry disabled in both.\n\n\
         (a) {} churn thread(s) retire {}-byte objects, {} per batch with a {} µs pause; {} \
         thread(s) run expedited grace periods with a sleep of 0-10 ms between them; pending \
         bytes sampled every {} µs for {} ms per point.\n\n\
         (b) {} writer(s) time {} synchronize() calls each while {} thread(s) run expedited \
         grace periods.\n\n",
        c.churn_threads,
        r.object_bytes,
        c.churn_batch,
        measure::us(c.churn_pause),
        c.exp_threads,
        measure::us(c.sample),
        c.point.as_millis(),
        c.writers,
        c.runs,
        c.sync_exp_threads,
    ));
    md.push_str("### The seed's figures beside ours\n\n");
    let ratios: Vec<f64> = r.pending.iter().filter_map(|p| p.ratio_mean).collect();
    let (lo, hi) = ratios
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    let mut side = Table::new(&["", "seed (kernel)", "ours (this run)"]);
    side.row(vec![
        "memory held by pending frees, baseline / on".into(),
        format!(
            "{:.1}-{:.1}x less sock_inode slab",
            seed.slab_ratio_low, seed.slab_ratio_high
        ),
        if ratios.is_empty() {
            "n/a".into()
        } else {
            format!("{lo:.2}-{hi:.2}x less pending bytes (mean, over the delays)")
        },
    ]);
    if let Some(p) = r.synchronize.first() {
        side.row(vec![
            "synchronize() mean, baseline → on".into(),
            format!(
                "{:.1} → {:.1} ms ({:.2}x)",
                seed.sync_before_ms, seed.sync_after_ms, seed.sync_ratio
            ),
            format!(
                "{:.2} → {:.2} ms ({}), expedited every {} µs",
                p.baseline.mean_us / 1e3,
                p.on.mean_us / 1e3,
                report::ratio(p.ratio_mean),
                p.exp_interval_us
            ),
        ]);
    }
    md.push_str(&side.to_markdown());
    md.push_str(&format!(
        "\nSeed: {}. Our ratios are larger than the kernel's because the gap between the two \
         kinds is wider here: a normal grace period waits for `membarrier(GLOBAL)` (itself a \
         kernel grace period, about 10 ms) after a 1 ms batching window, while an expedited one \
         takes microseconds; so with the switch on, callbacks wait about as long as the gap \
         between expedited grace periods, not a normal one. The kernel's callbacks also wait \
         for softirq or rcuog processing that expedited grace periods do not shorten.\n\n",
        seed.source
    ));
    md.push_str("### (a) Pending bytes against the expedited rate\n\n");
    let mut t = Table::new(&[
        "delay (ms)",
        "exp GPs/s (base / on)",
        "mean pending, baseline",
        "mean pending, on",
        "baseline / on",
        "peak, baseline",
        "peak, on",
        "peak ratio",
        "released by exp (on)",
        "freed / retired (base; on)",
    ]);
    for p in &r.pending {
        t.row(vec![
            format!("{}", p.delay_ms),
            format!(
                "{} / {}",
                report::num(p.baseline.exp_gps_per_s),
                report::num(p.on.exp_gps_per_s)
            ),
            report::bytes(p.baseline.mean_pending_bytes),
            report::bytes(p.on.mean_pending_bytes),
            report::ratio(p.ratio_mean),
            report::bytes(p.baseline.peak_pending_bytes as f64),
            report::bytes(p.on.peak_pending_bytes as f64),
            report::ratio(p.ratio_peak),
            format!(
                "{:.0} %",
                100.0 * p.on.released_by_expedited as f64
                    / (p.on.released_by_expedited + p.on.released_by_normal).max(1) as f64
            ),
            format!(
                "{}/{}; {}/{}",
                p.baseline.freed, p.baseline.retired, p.on.freed, p.on.retired
            ),
        ]);
    }
    md.push_str(&t.to_markdown());
    md.push_str("\n### (b) synchronize() latency\n\n");
    let mut t = Table::new(&[
        "exp interval (µs)",
        "switch",
        "mean (ms)",
        "p50 (ms)",
        "p90 (ms)",
        "p99 (ms)",
        "samples",
        "exp GPs/s",
        "baseline / on (mean)",
    ]);
    for p in &r.synchronize {
        for (name, l, ratio_cell) in [
            ("baseline", &p.baseline, String::new()),
            ("on", &p.on, report::ratio(p.ratio_mean)),
        ] {
            t.row(vec![
                format!("{}", p.exp_interval_us),
                name.into(),
                format!("{:.2}", l.mean_us / 1e3),
                format!("{:.2}", l.p50_us / 1e3),
                format!("{:.2}", l.p90_us / 1e3),
                format!("{:.2}", l.p99_us / 1e3),
                l.samples.to_string(),
                report::num(l.exp_gps_per_s),
                ratio_cell,
            ]);
        }
    }
    md.push_str(&t.to_markdown());

    let pending_series = |name: &str, pick: fn(&PendingDelay) -> &PendingPoint| Series {
        name: name.into(),
        points: r
            .pending
            .iter()
            .map(|p| {
                let q = pick(p);
                (q.exp_gps_per_s, q.mean_pending_bytes / 1024.0)
            })
            .collect(),
    };
    let mut panels = vec![Panel::Lines {
        title: "(a) mean pending bytes against the expedited grace-period rate".into(),
        x: Axis::log("expedited grace periods per second (log)"),
        y: Axis::linear("mean pending KiB"),
        series: vec![
            pending_series("baseline (expedited_callbacks off)", |p| &p.baseline),
            pending_series("on", |p| &p.on),
        ],
    }];
    if let Some(p) = r.synchronize.first() {
        let cdf = |l: &Latency| {
            measure::cdf(&l.all_us, 200)
                .into_iter()
                .map(|(x, y)| (x / 1e3, y))
                .collect()
        };
        panels.push(Panel::Lines {
            title: format!(
                "(b) synchronize() latency, CDF ({} writers, {} expedited threads every {} µs)",
                c.writers, c.sync_exp_threads, p.exp_interval_us
            ),
            x: Axis::log("milliseconds (log)"),
            y: Axis::linear("fraction of calls"),
            series: vec![
                Series {
                    name: "baseline".into(),
                    points: cdf(&p.baseline),
                },
                Series {
                    name: "on".into(),
                    points: cdf(&p.on),
                },
            ],
        });
    }
    let svg = plot::render(&panels)?;
    let mut headlines = Vec::new();
    if !ratios.is_empty() {
        headlines.push(format!(
            "pending bytes {lo:.2}-{hi:.2}x lower with expedited callbacks (seed: 1.5-1.7x less \
             slab)"
        ));
    }
    if let Some(p) = r.synchronize.first() {
        headlines.push(format!(
            "synchronize() mean {:.2} → {:.2} ms ({}) with 2 expedited threads every {} µs (seed: \
             12.0 → 8.1 ms, 1.48x)",
            p.baseline.mean_us / 1e3,
            p.on.mean_us / 1e3,
            report::ratio(p.ratio_mean),
            p.exp_interval_us
        ));
    }
    Ok(Rendered {
        markdown: md,
        svg: Some(svg),
        headlines,
    })
}

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
        args.apply(cfg);
    }

    fn run(cfg: &Config, progress: &Progress) -> Result<Report> {
        run(cfg, progress)
    }

    fn render(report: &Report) -> Result<Rendered> {
        render(report)
    }
}
