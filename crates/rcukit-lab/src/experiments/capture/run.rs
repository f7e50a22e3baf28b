//! The packet threads, the tcpdump thread, the measured points, and the figures.

use crate::env::Environment;
use crate::measure::{self, ratio, StopFlag};
use crate::progress::{Progress, Task};
use crate::report::{self};
use anyhow::Result;
use serde::Serialize;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::packets::{Descriptor, Packet};
use super::schemes::{SchemeId, Tap};
use super::{Capture, Config, Report, NAME, UNAVAILABLE};
use crate::experiments::{join, seeds, spawn_scoped, Envelope, OnExit, Unavailable};

/// One (scheme, rate) point.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// Offered packets per second per thread.
    pub rate_pps_per_thread: f64,
    /// Packets that arrived (all threads).
    pub offered: u64,
    /// Packets processed.
    pub processed: u64,
    /// Packets dropped (ring overflow).
    pub drops: u64,
    /// Packets still in the rings when the point ended.
    pub backlog: u64,
    /// drops / offered.
    pub drop_fraction: f64,
    /// Filter matches (descriptors × packets that matched).
    pub matches: u64,
    /// tcpdump attaches + detaches during the point.
    pub writer_updates: u64,
}

impl Point {
    fn empty(rate: f64) -> Point {
        Point {
            rate_pps_per_thread: rate,
            offered: 0,
            processed: 0,
            drops: 0,
            backlog: 0,
            drop_fraction: 0.0,
            matches: 0,
            writer_updates: 0,
        }
    }

    fn add(&mut self, o: &Point) {
        self.offered += o.offered;
        self.processed += o.processed;
        self.drops += o.drops;
        self.backlog += o.backlog;
        self.matches += o.matches;
        self.writer_updates += o.writer_updates;
        self.drop_fraction = if self.offered > 0 {
            self.drops as f64 / self.offered as f64
        } else {
            0.0
        };
    }
}

/// One scheme's figures.
#[derive(Clone, Debug, Serialize)]
pub struct SchemeResult {
    /// Scheme id.
    pub scheme: SchemeId,
    /// Description.
    pub description: &'static str,
    /// Drops over all rates.
    pub drops: u64,
    /// Processed over all rates.
    pub processed: u64,
    /// Offered over all rates.
    pub offered: u64,
    /// Highest swept rate (packets/s per thread) at which the scheme's drop fraction stays
    /// within one percentage point of the `no-listener` noise floor at the same rate (`None`
    /// for the reference itself, or when no rate qualifies).
    pub capacity_pps_per_thread: Option<f64>,
    /// Per-rate figures.
    pub points: Vec<Point>,
    /// Descriptor lists retired by the writer (RCU, QSBR and epoch schemes; for `rcu-list`
    /// the list nodes retired on detach).
    pub lists_retired: u64,
    /// Retired lists freed by the end (must equal `lists_retired`).
    pub lists_freed: u64,
    /// This scheme's drops / the baseline's (`rwlock`), over all rates.
    pub drops_vs_rwlock: Option<f64>,
    /// This scheme's capacity / `filter-only`'s: 1.0 means its synchronization costs the packet
    /// path nothing that shows (the seed's claim for epoch(9)); `None` when either has no
    /// capacity in the swept range.
    pub capacity_vs_filter_only: Option<f64>,
}

/// The seed's figures.
#[derive(Clone, Debug, Serialize)]
pub struct SeedFigures {
    /// Where they come from.
    pub source: &'static str,
    /// Inbound rate, packets/s.
    pub inbound_pps: f64,
    /// Drops while tcpdump ran (netstat idrops), packets/s.
    pub idrops_pps: f64,
    /// idrops / inbound.
    pub drop_fraction: f64,
}

/// The experiment's figures (inside the [`Envelope`]).
#[derive(Clone, Debug, Serialize)]
pub struct Body {
    /// Every scheme run.
    pub schemes: Vec<SchemeResult>,
    /// Schemes not in this build.
    pub not_available: Vec<Unavailable>,
    /// The seed's figures.
    pub seed: SeedFigures,
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
    let steps = SchemeId::ALL.len() * cfg.rates.len() * cfg.rounds as usize;
    let task = progress.task(NAME, steps as u64);
    let taps = SchemeId::ALL
        .iter()
        .map(|id| id.build(cfg.filter_len))
        .collect::<Result<Vec<_>>>()?;
    let points = measure_points(cfg, &task, &taps)?;
    task.finish();
    let body = Body {
        schemes: scheme_results(cfg, taps, points),
        not_available: UNAVAILABLE.to_vec(),
        seed: SeedFigures::from_seed(),
    };
    Ok(Envelope::new::<Capture>(env, cfg.clone(), body))
}

/// Every (scheme, rate) point, accumulated over the rounds: `points[scheme][rate]`.
fn measure_points(cfg: &Config, task: &Task, taps: &[Box<dyn Tap>]) -> Result<Vec<Vec<Point>>> {
    let slice = cfg.point / cfg.rounds;
    // points[scheme][rate], accumulated over the rounds.
    let mut points: Vec<Vec<Point>> = SchemeId::ALL
        .iter()
        .map(|_| cfg.rates.iter().map(|&r| Point::empty(r)).collect())
        .collect();
    for round in 0..cfg.rounds {
        for (ri, &rate) in cfg.rates.iter().enumerate() {
            for (si, id) in SchemeId::ALL.iter().enumerate() {
                task.message(format!(
                    "round {}: {} at {} pkt/s/thread",
                    round + 1,
                    id.id(),
                    report::num(rate)
                ));
                let p = run_point(cfg, &*taps[si], rate, slice)?;
                points[si][ri].add(&p);
                task.inc();
            }
        }
    }
    Ok(points)
}

/// Each scheme's totals, its capacity against the `no-listener` floor, and its drops against
/// the rwlock's; the taps are finished (their lists counted) and dropped.
fn scheme_results(
    cfg: &Config,
    taps: Vec<Box<dyn Tap>>,
    points: Vec<Vec<Point>>,
) -> Vec<SchemeResult> {
    let floor: Vec<f64> = SchemeId::ALL
        .iter()
        .position(|&id| id == SchemeId::NoListener)
        .map(|i| points[i].iter().map(|p| p.drop_fraction).collect())
        .unwrap_or_else(|| vec![0.0; cfg.rates.len()]);
    let mut schemes = Vec::new();
    for ((id, tap), points) in SchemeId::ALL.into_iter().zip(taps).zip(points) {
        let (lists_retired, lists_freed) = tap.finish();
        drop(tap);
        let sum = |f: fn(&Point) -> u64| points.iter().map(f).sum::<u64>();
        let capacity = if id == SchemeId::NoListener {
            None
        } else {
            capacity(&points, &floor)
        };
        schemes.push(SchemeResult {
            scheme: id,
            description: id.describe(),
            drops: sum(|p| p.drops),
            processed: sum(|p| p.processed),
            offered: sum(|p| p.offered),
            capacity_pps_per_thread: capacity,
            points,
            lists_retired,
            lists_freed,
            drops_vs_rwlock: None,
            capacity_vs_filter_only: None,
        });
    }
    let rw_drops = schemes
        .iter()
        .find(|s| s.scheme == SchemeId::Rwlock)
        .map(|s| s.drops as f64);
    let filter_capacity = schemes
        .iter()
        .find(|s| s.scheme == SchemeId::FilterOnly)
        .and_then(|s| s.capacity_pps_per_thread);
    for s in &mut schemes {
        s.drops_vs_rwlock = rw_drops.and_then(|b| ratio(s.drops as f64, b));
        s.capacity_vs_filter_only = s
            .capacity_pps_per_thread
            .zip(filter_capacity)
            .and_then(|(c, f)| ratio(c, f));
    }
    schemes
}

impl SeedFigures {
    /// The figures quoted in [`seeds::capture`].
    fn from_seed() -> SeedFigures {
        use seeds::capture::*;
        SeedFigures {
            source: SOURCE,
            inbound_pps: INBOUND_PPS,
            idrops_pps: IDROPS_PPS,
            drop_fraction: DROP_FRACTION,
        }
    }
}

/// The highest rate at which `points` stay within one percentage point of `floor` (the
/// reference's drops at the same rate). An isolated noisy point at a lower rate does not
/// hide a higher rate the scheme sustains.
fn capacity(points: &[Point], floor: &[f64]) -> Option<f64> {
    points
        .iter()
        .zip(floor)
        .filter(|(p, f)| p.drop_fraction <= *f + 0.01)
        .map(|(p, _)| p.rate_pps_per_thread)
        .reduce(f64::max)
}

/// Per-thread counts of one point.
#[derive(Default, Clone, Copy)]
struct ThreadCounts {
    offered: u64,
    processed: u64,
    drops: u64,
    matches: u64,
}

fn run_point(cfg: &Config, tap: &dyn Tap, rate: f64, length: Duration) -> Result<Point> {
    let period_ns = 1e9 / rate;
    let stop = StopFlag::new();
    let writer_updates = AtomicU64::new(0);
    let counts = std::thread::scope(|s| -> Result<Vec<ThreadCounts>> {
        let _release = OnExit(|| stop.stop());
        let start = Instant::now() + Duration::from_millis(5);
        let mut handles = Vec::new();
        for t in 0..cfg.packet_threads {
            let stop = &stop;
            handles.push(spawn_scoped(s, &format!("cap-queue{t}"), move || {
                packet_thread(tap, t, start, period_ns, cfg.ring, stop)
            })?);
        }
        let writer = if tap.has_writer() {
            let (stop, updates) = (&stop, &writer_updates);
            Some(spawn_scoped(s, "cap-tcpdump", move || {
                tcpdump(tap, cfg, stop, updates)
            })?)
        } else {
            None
        };
        measure::sleep_until(start + length);
        stop.stop();
        let mut counts = Vec::new();
        for h in handles {
            counts.push(join(h)?);
        }
        if let Some(w) = writer {
            join(w)?;
        }
        Ok(counts)
    })?;
    let total = counts
        .iter()
        .fold(ThreadCounts::default(), |a, c| ThreadCounts {
            offered: a.offered + c.offered,
            processed: a.processed + c.processed,
            drops: a.drops + c.drops,
            matches: a.matches + c.matches,
        });
    Ok(Point {
        rate_pps_per_thread: rate,
        offered: total.offered,
        processed: total.processed,
        drops: total.drops,
        backlog: total.offered - total.processed - total.drops,
        drop_fraction: if total.offered > 0 {
            total.drops as f64 / total.offered as f64
        } else {
            0.0
        },
        matches: total.matches,
        writer_updates: writer_updates.load(Relaxed),
    })
}

/// One NIC queue: packets arrive every `period_ns` from `start`; process in order, drop what
/// overflows the ring.
fn packet_thread(
    tap: &dyn Tap,
    thread: usize,
    start: Instant,
    period_ns: f64,
    ring: u64,
    stop: &StopFlag,
) -> ThreadCounts {
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (thread as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    let mut next = 0u64; // index of the next packet to process
    let idle_sleep = Duration::from_nanos((period_ns * ring as f64 / 4.0) as u64)
        .min(Duration::from_micros(100));
    let mut c = ThreadCounts::default();
    measure::sleep_until(start);
    // Registered (QSBR: online) only once the queue starts.
    let mut state = tap.reader_state();
    loop {
        let arrived = (start.elapsed().as_nanos() as f64 / period_ns) as u64;
        if stop.stopped() {
            c.offered = arrived.max(next);
            break;
        }
        if arrived - next.min(arrived) > ring {
            let lost = arrived - next - ring;
            c.drops += lost;
            next += lost;
        }
        // Process what has arrived, re-reading the clock every 32 packets.
        let end = arrived.min(next + 32);
        while next < end {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let p = Packet {
                src: x as u32,
                dst: (x >> 32) as u32,
                ports: (x >> 16) as u32,
            };
            c.matches += tap.process(&mut state, &p);
            c.processed += 1;
            next += 1;
        }
        // Between bursts no descriptor list is referenced (QSBR's quiescent state).
        state.quiescent();
        if next >= arrived {
            state.idle(idle_sleep);
        }
    }
    c
}

/// The tcpdump thread: attach a descriptor, wait, detach, wait, ...
fn tcpdump(tap: &dyn Tap, cfg: &Config, stop: &StopFlag, updates: &AtomicU64) {
    let mut salt = 2u32;
    let mut attached = false;
    while !stop.stopped() {
        if attached {
            tap.detach();
        } else {
            // Build the descriptor outside any lock, as both kernels do.
            tap.attach(Arc::new(Descriptor::new(cfg.filter_len, salt)));
            salt = salt.wrapping_add(1);
        }
        attached = !attached;
        updates.fetch_add(1, Relaxed);
        std::thread::sleep(cfg.interval);
    }
    if attached {
        tap.detach();
        updates.fetch_add(1, Relaxed);
    }
}
