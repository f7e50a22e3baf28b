//! Part (a), pending memory; part (b), `synchronize()` latency; and the figures.

use crate::env::Environment;
use crate::measure::{self, ratio, Counter, StopFlag, Summary};
use crate::progress::{Progress, Task};
use anyhow::Result;
use rcukit::Rcu;
use serde::Serialize;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::schemes::{domain, drain, Sock};
use super::{Callbacks, Config, Report, NAME, OBJECT_BYTES};
use crate::experiments::{join, seeds, spawn_scoped, Envelope, OnExit};

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
        let _release = OnExit(|| stop.stop());
        let mut handles = Vec::new();
        for (t, count) in retired.iter().enumerate() {
            let (rcu, stop, freed) = (&rcu, &stop, &freed);
            let name = format!("cb-churn{t}");
            handles.push(spawn_scoped(s, &name, move || {
                churn(cfg, rcu, stop, freed, count)
            })?);
        }
        for t in 0..cfg.exp_threads {
            let (rcu, stop) = (&rcu, &stop);
            handles.push(spawn_scoped(s, &format!("cb-exp{t}"), move || {
                while !stop.stopped() {
                    rcu.synchronize_expedited();
                    if !delay.is_zero() {
                        std::thread::sleep(delay);
                    }
                }
            })?);
        }
        let measured = sample_pending(cfg, &rcu, &mut samples);
        stop.stop();
        for h in handles {
            join(h)?;
        }
        Ok(measured)
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

/// A churn thread of part (a): retire sockets in batches, with a pause between batches.
fn churn(cfg: &Config, rcu: &Rcu, stop: &StopFlag, freed: &Arc<AtomicU64>, count: &Counter) {
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
}

/// Once the pipeline has filled, sample the pending bytes every `cfg.sample` for `cfg.point`;
/// returns the time it took and the expedited and normal grace periods completed meanwhile.
fn sample_pending(cfg: &Config, rcu: &Rcu, samples: &mut Vec<u64>) -> (Duration, u64, u64) {
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
    (
        elapsed,
        after.expedited_gps - before.expedited_gps,
        after.normal_gps - before.normal_gps,
    )
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
        let _release = OnExit(|| stop.stop());
        let mut exp = Vec::new();
        for t in 0..cfg.sync_exp_threads {
            let (rcu, stop, runs) = (&rcu, &stop, &exp_runs);
            exp.push(spawn_scoped(s, &format!("cb-bexp{t}"), move || {
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
            writers.push(spawn_scoped(s, &format!("cb-writer{t}"), move || {
                (0..cfg.runs)
                    .map(|_| {
                        let t = Instant::now();
                        rcu.synchronize();
                        measure::us(t.elapsed())
                    })
                    .collect::<Vec<f64>>()
            })?);
        }
        let mut all = Vec::new();
        for h in writers {
            all.extend(join(h)?);
        }
        let elapsed = start.elapsed();
        stop.stop();
        for h in exp {
            join(h)?;
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

impl SeedFigures {
    /// The figures quoted in [`seeds::callbacks`].
    fn from_seed() -> SeedFigures {
        use seeds::callbacks::*;
        SeedFigures {
            source: SOURCE,
            slab_ratio_low: SLAB_RATIO_LOW,
            slab_ratio_high: SLAB_RATIO_HIGH,
            sync_before_ms: SYNC_BEFORE_MS,
            sync_after_ms: SYNC_AFTER_MS,
            sync_ratio: SYNC_BEFORE_MS / SYNC_AFTER_MS,
        }
    }
}

/// The experiment's figures (inside the [`Envelope`]).
#[derive(Clone, Debug, Serialize)]
pub struct Body {
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
    let body = Body {
        object_bytes: OBJECT_BYTES,
        pending,
        synchronize,
        seed: SeedFigures::from_seed(),
    };
    Ok(Envelope::new::<Callbacks>(env, cfg.clone(), body))
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
