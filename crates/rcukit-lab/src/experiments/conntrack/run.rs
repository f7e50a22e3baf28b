//! The run: the maps filled once, their points measured round by round (see `point`), and
//! the figures.

use super::clock::{Clock, TimerFacts};
use super::flow::HASHER_DESCRIPTION;
use super::point::{drain, fill, len_of, measure_point, resident_bytes, Acc, Window};
use super::schemes::{with_map, AnyMap, MapId};
use super::{Config, Conntrack, Report, BASELINE, NAME, UNAVAILABLE};
use crate::env::Environment;
use crate::experiments::{Envelope, Unavailable};
use crate::measure::{self, per_sec, ratio, Summary};
use crate::progress::{Progress, Task};
use anyhow::Result;
use crossbeam_utils::CachePadded;
use serde::Serialize;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// One map's state across its points.
struct MapState {
    id: MapId,
    map: AnyMap,
    window: Window,
    dropped: &'static AtomicU64,
    created: u64,
    fill_ms: f64,
    fill_rss_per_flow: Option<f64>,
}

/// The writer's figures at one point.
#[derive(Clone, Debug, Serialize)]
pub struct WriterFigures {
    /// Create+expire pairs per second aimed at.
    pub target_per_s: f64,
    /// Pairs per second achieved while the packet threads were measured.
    pub achieved_per_s: f64,
    /// achieved / target (1 when the map let the writer keep its pace).
    pub share_of_target: Option<f64>,
    /// Pairs the writer had to skip because it fell more than 10 ms behind its schedule.
    pub skipped: u64,
    /// Expiries that found no flow to remove (must be 0).
    pub expire_misses: u64,
}

/// Ratios to the baseline (`rwlock-hashmap`) at the same thread count, same run.
#[derive(Clone, Debug, Serialize)]
pub struct VsBaseline {
    /// lookups/s ÷ the baseline's (higher is better).
    pub lookups: Option<f64>,
    /// p50 latency ÷ the baseline's (lower is better).
    pub p50: Option<f64>,
    /// p99 latency ÷ the baseline's (lower is better).
    pub p99: Option<f64>,
    /// writer pairs/s ÷ the baseline's.
    pub writer: Option<f64>,
}

/// One (map, packet-thread count) point, all rounds together.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// Packet threads.
    pub packet_threads: usize,
    /// Seconds measured (all rounds).
    pub seconds: f64,
    /// Lookups measured.
    pub lookups: u64,
    /// Lookups per second, all packet threads together.
    pub lookups_per_s: f64,
    /// Lookups per second of each packet thread.
    pub lookups_per_s_per_thread: Vec<f64>,
    /// Lookups per second, all threads, in each round (their spread shows the noise).
    pub lookups_per_s_by_round: Vec<f64>,
    /// Sampled single-lookup latency, nanoseconds (timer overhead included).
    pub latency_ns: Summary,
    /// Lookups that found their flow.
    pub hits: u64,
    /// Lookups that found nothing (absent keys, and live keys expired during the lookup).
    pub misses: u64,
    /// misses ÷ lookups.
    pub miss_share: f64,
    /// Of the misses: live keys that the writer expired while they were looked up (benign).
    pub stale_misses: u64,
    /// Hits that returned another flow's record or found a never-present key (must be 0).
    pub wrong_records: u64,
    /// Live flows (before and after the lookup) not found (must be 0).
    pub lost_flows: u64,
    /// The writer.
    pub writer: WriterFigures,
    /// Ratios to the baseline.
    pub vs_baseline: VsBaseline,
}

/// One map's figures.
#[derive(Clone, Debug, Serialize)]
pub struct MapResult {
    /// Map id.
    pub map: MapId,
    /// What it is.
    pub description: &'static str,
    /// Time to insert the initial flows from one thread, milliseconds.
    pub fill_ms: f64,
    /// Resident-set growth while the initial flows were inserted, bytes per flow (Linux; the
    /// maps are filled one after the other and all kept, so no map reuses another's memory).
    pub fill_rss_bytes_per_flow: Option<f64>,
    /// Time to remove every live flow, one at a time from one thread, after the last round,
    /// milliseconds.
    pub drain_ms: f64,
    /// Removals of live flows in the drain that found nothing (must be 0).
    pub drain_misses: u64,
    /// One point per packet-thread count.
    pub points: Vec<Point>,
    /// Flows in the map at the end (`len()`).
    pub flows_at_end: u64,
    /// Flows that should be there (the live window).
    pub flows_expected: u64,
    /// Records created over the run (initial flows and the writer's).
    pub records_created: u64,
    /// Records freed once the map was dropped and its deferred frees had run (must equal
    /// `records_created`).
    pub records_freed: u64,
}

/// One of the claims rcukit makes for `RcuHashMap`, checked in this run.
#[derive(Clone, Debug, Serialize)]
pub struct Claim {
    /// What is claimed.
    pub claim: String,
    /// The map compared with.
    pub against: &'static str,
    /// Packet threads of the comparison.
    pub packet_threads: usize,
    /// rcu-hashmap lookups/s ÷ the other map's (all rounds together).
    pub ratio: Option<f64>,
    /// The same ratio round by round (each round measures the two maps close together in
    /// time): its spread shows how much the machine's noise moved it.
    pub ratio_by_round: Vec<f64>,
    /// The ratio the claim needs.
    pub needed: f64,
    /// Whether it holds (`null`: not measured in this run).
    pub holds: Option<bool>,
    /// The other map's writer pace (achieved ÷ target) at that point: below 0.9 its lookups
    /// were served with less writing going on.
    pub their_writer_share: Option<f64>,
}

/// The experiment's figures (inside the [`Envelope`]).
#[derive(Clone, Debug, Serialize)]
pub struct Body {
    /// The baseline of every ratio.
    pub baseline: &'static str,
    /// The hash function of every map.
    pub hasher: &'static str,
    /// How latency is measured.
    pub latency_method: String,
    /// The clock behind the latency samples.
    pub timer: TimerFacts,
    /// Every map run.
    pub maps: Vec<MapResult>,
    /// rcukit's claims for `RcuHashMap`, checked at the most packet threads with the writer
    /// running.
    pub claims: Vec<Claim>,
    /// Maps not in this build.
    pub not_available: Vec<Unavailable>,
    /// One-minute load average at the end of the run (`env` has it at the start): above the
    /// core count, other work shared the machine and the figures are noisier.
    pub load_average_1m_end: Option<f64>,
}

impl Report {
    /// One map's result.
    pub fn map(&self, id: MapId) -> Option<&MapResult> {
        self.maps.iter().find(|m| m.map == id)
    }

    pub(super) fn point(&self, id: MapId, threads: usize) -> Option<&Point> {
        self.map(id)?
            .points
            .iter()
            .find(|p| p.packet_threads == threads)
    }

    pub(super) fn max_threads(&self) -> usize {
        self.config
            .packet_threads
            .iter()
            .copied()
            .max()
            .unwrap_or(1)
    }
}

/// Run the experiment.
pub fn run(cfg: &Config, progress: &Progress) -> Result<Report> {
    cfg.validate()?;
    let env = Environment::collect(cfg.quick);
    let steps = cfg.maps.len() * (1 + cfg.rounds * cfg.packet_threads.len());
    let task = progress.task(NAME, steps as u64);
    let clock = Clock::new();
    let timer = clock.facts();
    let mut states = fill_maps(cfg, &task)?;
    let accs = measure_rounds(cfg, &task, clock, &mut states)?;
    task.finish();
    let mut maps = map_results(cfg, &timer, states, accs);
    fill_ratios(&mut maps);
    let body = Body {
        baseline: BASELINE.id(),
        hasher: HASHER_DESCRIPTION,
        latency_method: latency_method(cfg, &timer),
        timer,
        maps,
        claims: Vec::new(),
        not_available: UNAVAILABLE.to_vec(),
        load_average_1m_end: std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok()),
    };
    let mut report = Envelope::new::<Conntrack>(env, cfg.clone(), body);
    report.body.claims = claims(&report);
    Ok(report)
}

/// Build and fill every map.
fn fill_maps(cfg: &Config, task: &Task) -> Result<Vec<MapState>> {
    let mut states = Vec::new();
    for &id in &cfg.maps {
        task.message(format!("filling {} with {} flows", id.id(), cfg.flows));
        // Every record of this map counts its drop here; a counter of its own (8 bytes,
        // leaked so that records can hold a plain `&'static`) keeps runs and maps apart.
        let dropped: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        let rss_before = resident_bytes();
        let map = AnyMap::build(id, cfg.flows as usize)?;
        let t = Instant::now();
        with_map!(&map, m => fill(m, cfg.flows, dropped));
        let fill_ms = measure::ms(t.elapsed());
        let fill_rss_per_flow = rss_before
            .zip(resident_bytes())
            .map(|(before, after)| (after as f64 - before as f64) / cfg.flows as f64);
        states.push(MapState {
            id,
            map,
            window: Window {
                head: CachePadded::new(AtomicU64::new(cfg.flows)),
                tail: CachePadded::new(AtomicU64::new(0)),
            },
            dropped,
            created: cfg.flows,
            fill_ms,
            fill_rss_per_flow,
        });
        task.inc();
    }

    Ok(states)
}

/// Every round: for each thread count, every map in turn. Returns the accumulated figures per
/// map and thread count.
fn measure_rounds(
    cfg: &Config,
    task: &Task,
    clock: Clock,
    states: &mut [MapState],
) -> Result<Vec<Vec<Acc>>> {
    let mut accs: Vec<Vec<Acc>> = (0..states.len())
        .map(|_| {
            (0..cfg.packet_threads.len())
                .map(|_| Acc::default())
                .collect()
        })
        .collect();
    let mut seed = 0x5EED_C0FF_EE00_0001u64;
    for round in 0..cfg.rounds {
        for (ti, &threads) in cfg.packet_threads.iter().enumerate() {
            for (si, st) in states.iter_mut().enumerate() {
                task.message(format!(
                    "round {}/{}: {} with {threads} packet thread(s)",
                    round + 1,
                    cfg.rounds,
                    st.id.id()
                ));
                seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let acc = &mut accs[si][ti];
                let created = with_map!(&st.map, m => measure_point(
                    m, &st.window, threads, cfg, clock, seed, st.dropped, acc
                ))?;
                st.created += created;
                task.inc();
            }
        }
    }
    Ok(accs)
}

/// Points, then the checks at the end and the teardown.
fn map_results(
    cfg: &Config,
    timer: &TimerFacts,
    states: Vec<MapState>,
    accs: Vec<Vec<Acc>>,
) -> Vec<MapResult> {
    let mut maps = Vec::new();
    for (st, accs) in states.into_iter().zip(accs) {
        let points = cfg
            .packet_threads
            .iter()
            .zip(accs)
            .map(|(&threads, a)| point_of(threads, a, cfg, timer))
            .collect();
        let flows_expected = st.window.head.load(Relaxed) - st.window.tail.load(Relaxed);
        let flows_at_end = with_map!(&st.map, m => len_of(m));
        let (tail, head) = (st.window.tail.load(Relaxed), st.window.head.load(Relaxed));
        let t = Instant::now();
        let drain_misses = with_map!(&st.map, m => drain(m, tail, head));
        let drain_ms = measure::ms(t.elapsed());
        let records_freed = st.map.teardown(st.dropped);
        maps.push(MapResult {
            map: st.id,
            description: st.id.describe(),
            fill_ms: st.fill_ms,
            fill_rss_bytes_per_flow: st.fill_rss_per_flow,
            drain_ms,
            drain_misses,
            points,
            flows_at_end,
            flows_expected,
            records_created: st.created,
            records_freed,
        });
    }
    maps
}

/// How the latency samples were taken, in words.
fn latency_method(cfg: &Config, timer: &TimerFacts) -> String {
    format!(
        "every {}th lookup of each packet thread timed alone with {} ({:.2} ticks/ns, \
     steps of {:.0} ns); an empty timed section costs {:.0} ns, included in the \
     samples",
        cfg.sample_every,
        if timer.kind == "rdtsc" {
            "rdtsc between lfences, calibrated against the monotonic clock"
        } else {
            "Instant (the monotonic clock)"
        },
        timer.ticks_per_ns,
        timer.resolution_ns,
        timer.overhead_ns
    )
}

fn point_of(threads: usize, a: Acc, cfg: &Config, timer: &TimerFacts) -> Point {
    let ns: Vec<f64> = a
        .samples
        .iter()
        .map(|&t| t as f64 / timer.ticks_per_ns)
        .collect();
    let secs = Duration::from_secs_f64(a.seconds.max(1e-9));
    let achieved = per_sec(a.writer_pairs, secs);
    Point {
        packet_threads: threads,
        seconds: a.seconds,
        lookups: a.lookups,
        lookups_per_s: per_sec(a.lookups, secs),
        lookups_per_s_per_thread: a.per_thread.iter().map(|&n| per_sec(n, secs)).collect(),
        lookups_per_s_by_round: a.rounds.clone(),
        latency_ns: Summary::of(&ns),
        hits: a.hits,
        misses: a.misses,
        miss_share: if a.lookups > 0 {
            a.misses as f64 / a.lookups as f64
        } else {
            0.0
        },
        stale_misses: a.stale,
        wrong_records: a.wrong,
        lost_flows: a.lost,
        writer: WriterFigures {
            target_per_s: cfg.churn_rate as f64,
            achieved_per_s: achieved,
            share_of_target: ratio(achieved, cfg.churn_rate as f64),
            skipped: a.skipped,
            expire_misses: a.expire_misses,
        },
        vs_baseline: VsBaseline {
            lookups: None,
            p50: None,
            p99: None,
            writer: None,
        },
    }
}

fn fill_ratios(maps: &mut [MapResult]) {
    let Some(base) = maps.iter().find(|m| m.map == BASELINE).cloned() else {
        return;
    };
    for m in maps.iter_mut() {
        for p in &mut m.points {
            if let Some(b) = base
                .points
                .iter()
                .find(|b| b.packet_threads == p.packet_threads)
            {
                p.vs_baseline = VsBaseline {
                    lookups: ratio(p.lookups_per_s, b.lookups_per_s),
                    p50: ratio(p.latency_ns.p50, b.latency_ns.p50),
                    p99: ratio(p.latency_ns.p99, b.latency_ns.p99),
                    writer: ratio(p.writer.achieved_per_s, b.writer.achieved_per_s),
                };
            }
        }
    }
}

/// rcukit's claims for `RcuHashMap`: at the most packet threads, with the writer running,
/// rcu-hashmap's lookups/s are at least 2x dashmap's, 1.5x papaya's and 1x rculfhash's.
fn claims(r: &Report) -> Vec<Claim> {
    let threads = r.max_threads();
    let rcu = r.point(MapId::RcuHashmap, threads);
    let writer = if r.config.churn_rate > 0 {
        "with the writer running"
    } else {
        "with no writer (--churn-rate 0: the claim is about a running writer)"
    };
    let against: [(&'static str, f64); 3] = [("dashmap", 2.0), ("papaya", 1.5), ("rculfhash", 1.0)];
    against
        .into_iter()
        .map(|(other, needed)| {
            let their_point = MapId::all()
                .into_iter()
                .find(|m| m.id() == other)
                .and_then(|m| r.point(m, threads));
            let (ratio, ratio_by_round) = match (rcu, their_point) {
                (Some(a), Some(b)) => (
                    ratio(a.lookups_per_s, b.lookups_per_s),
                    a.lookups_per_s_by_round
                        .iter()
                        .zip(&b.lookups_per_s_by_round)
                        .filter_map(|(x, y)| measure::ratio(*x, *y))
                        .collect(),
                ),
                _ => (None, Vec::new()),
            };
            let their_writer = MapId::all()
                .into_iter()
                .find(|m| m.id() == other)
                .and_then(|m| r.point(m, threads))
                .and_then(|p| p.writer.share_of_target);
            Claim {
                their_writer_share: their_writer,
                ratio_by_round,
                claim: format!(
                    "rcu-hashmap lookups/s >= {needed}x {other} at {threads} packet thread(s) \
                     {writer}"
                ),
                against: other,
                packet_threads: threads,
                ratio,
                needed,
                holds: ratio
                    .filter(|_| r.config.churn_rate > 0)
                    .map(|x| x >= needed),
            }
        })
        .collect()
}
