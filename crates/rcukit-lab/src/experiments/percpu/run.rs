//! The readers, the measured points and the figures.

use super::schemes::{ReadSide, SchemeId, QS_EVERY};
use super::{Config, Percpu, Report, NAME, UNAVAILABLE};
use crate::env::Environment;
use crate::experiments::{join, seeds, spawn_scoped, Envelope, OnExit, Unavailable};
use crate::measure::{self, per_sec, ratio, Counter, StopFlag};
use crate::progress::Progress;
use anyhow::Result;
use serde::Serialize;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// One (scheme, thread count) point.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// Reader threads.
    pub threads: usize,
    /// Reads per second, all threads together.
    pub reads_per_s: f64,
    /// Reads per second per thread.
    pub reads_per_s_per_thread: f64,
    /// reads_per_s / the baseline's at the same thread count.
    pub vs_rwlock: Option<f64>,
}

/// One scheme's figures.
#[derive(Clone, Debug, Serialize)]
pub struct SchemeResult {
    /// Scheme id.
    pub scheme: SchemeId,
    /// One point per thread count.
    pub points: Vec<Point>,
    /// reads_per_s at the most threads / at the fewest.
    pub scaling: Option<f64>,
}

/// The experiment's figures (inside the [`Envelope`]).
#[derive(Clone, Debug, Serialize)]
pub struct Body {
    /// Every scheme run.
    pub schemes: Vec<SchemeResult>,
    /// Schemes not in this build.
    pub not_available: Vec<Unavailable>,
    /// The seed's figure: ipt_do_table's CPU use after the series, as a fraction of before.
    pub seed_cpu_fraction_after: f64,
    /// Where the seed's figure comes from.
    pub seed_source: &'static str,
}

impl Body {
    /// The result of one scheme.
    pub fn scheme(&self, id: SchemeId) -> Option<&SchemeResult> {
        self.schemes.iter().find(|s| s.scheme == id)
    }
}

/// Run the experiment.
pub fn run(cfg: &Config, progress: &Progress) -> Result<Report> {
    cfg.validate()?;
    let env = Environment::collect(cfg.quick);
    let points = measure_points(cfg, progress)?;
    let body = Body {
        schemes: scheme_results(points),
        not_available: UNAVAILABLE.to_vec(),
        seed_cpu_fraction_after: seeds::percpu::CPU_FRACTION_AFTER,
        seed_source: seeds::percpu::SOURCE,
    };
    Ok(Envelope::new::<Percpu>(env, cfg.clone(), body))
}

/// Every (scheme, thread count) point, per scheme; interleaved: for each thread count, every
/// scheme in turn.
fn measure_points(cfg: &Config, progress: &Progress) -> Result<Vec<Vec<Point>>> {
    let task = progress.task(NAME, (SchemeId::ALL.len() * cfg.thread_counts.len()) as u64);
    let table: Vec<u32> = (0..cfg.work as u32).map(|i| i * 7 + 1).collect();
    let schemes_built = SchemeId::ALL
        .iter()
        .map(|id| id.build(table.clone()))
        .collect::<Result<Vec<_>>>()?;
    let mut points: Vec<Vec<Point>> = vec![Vec::new(); SchemeId::ALL.len()];
    for &threads in &cfg.thread_counts {
        for (si, id) in SchemeId::ALL.iter().enumerate() {
            task.message(format!("{} with {threads} thread(s)", id.id()));
            let rate = measure_point(&*schemes_built[si], threads, cfg.point, cfg.work)?;
            points[si].push(Point {
                threads,
                reads_per_s: rate,
                reads_per_s_per_thread: rate / threads as f64,
                vs_rwlock: None,
            });
            task.inc();
        }
    }
    task.finish();
    Ok(points)
}

/// Ratios against the baseline (the first scheme) and the scaling of each scheme.
fn scheme_results(points: Vec<Vec<Point>>) -> Vec<SchemeResult> {
    let base: Vec<f64> = points[0].iter().map(|p| p.reads_per_s).collect();
    SchemeId::ALL
        .into_iter()
        .zip(points)
        .map(|(id, mut pts)| {
            for (p, b) in pts.iter_mut().zip(&base) {
                p.vs_rwlock = ratio(p.reads_per_s, *b);
            }
            let min = pts.iter().min_by_key(|p| p.threads);
            let max = pts.iter().max_by_key(|p| p.threads);
            let scaling = match (min, max) {
                (Some(a), Some(b)) => ratio(b.reads_per_s, a.reads_per_s),
                _ => None,
            };
            SchemeResult {
                scheme: id,
                points: pts,
                scaling,
            }
        })
        .collect()
}

fn measure_point(
    scheme: &dyn ReadSide,
    threads: usize,
    point: Duration,
    work: usize,
) -> Result<f64> {
    let counters: Vec<Counter> = (0..threads).map(|_| Counter::default()).collect();
    let stop = StopFlag::new();
    std::thread::scope(|s| -> Result<f64> {
        let _release = OnExit(|| stop.stop());
        let mut handles = Vec::new();
        for (t, counter) in counters.iter().enumerate() {
            let stop = &stop;
            handles.push(spawn_scoped(s, &format!("percpu-r{t}"), move || {
                let mut me = scheme.register();
                let mut key = t as u32;
                let (mut n, mut acc) = (0u64, 0u32);
                while !stop.stopped() {
                    for _ in 0..QS_EVERY {
                        key = key.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                        acc = acc.wrapping_add(scheme.read(key % (work as u32 * 7 + 8)));
                    }
                    if let Some(me) = &mut me {
                        me.quiescent_state();
                    }
                    n += QS_EVERY;
                    counter.publish(n);
                }
                black_box(acc);
            })?);
        }
        // Warm up until every reader has made a pass (a thread may start late on a loaded
        // machine), and measure at least until the readers have made progress: a window in
        // which the scheduler ran none of them says nothing about the scheme. Both waits
        // only matter for tiny points; a deadline bounds them.
        let deadline = Instant::now() + Duration::from_secs(10);
        std::thread::sleep(Duration::from_millis(20));
        while counters.iter().any(|c| c.get() == 0) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let (c0, t0) = (measure::sum(&counters), Instant::now());
        std::thread::sleep(point);
        while measure::sum(&counters) == c0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let (c1, t1) = (measure::sum(&counters), Instant::now());
        stop.stop();
        for h in handles {
            join(h)?;
        }
        Ok(per_sec(c1 - c0, t1 - t0))
    })
}
