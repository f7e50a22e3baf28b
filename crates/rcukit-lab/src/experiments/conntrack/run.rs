//! The packet threads, the writer, the measured points, and the figures.

use super::clock::{Clock, TimerFacts};
use super::flow::{FlowKey, FlowRecord, HASHER_DESCRIPTION};
use super::schemes::{with_map, AnyMap, FlowTable, MapId};
use super::{Config, Conntrack, Report, BASELINE, NAME, UNAVAILABLE};
use crate::env::Environment;
use crate::experiments::{join, spawn_scoped, Envelope, Unavailable};
use crate::measure::{self, per_sec, ratio, Counter, Summary};
use crate::progress::{Progress, Task};
use anyhow::Result;
use crossbeam_utils::CachePadded;
use serde::Serialize;
use std::hint::black_box;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU64, AtomicU8};
use std::time::{Duration, Instant};

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

/// The live flows: ids in `tail..head`. The writer stores `head + 1` after inserting flow
/// `head`, and `tail + 1` before removing flow `tail`.
struct Window {
    head: CachePadded<AtomicU64>,
    tail: CachePadded<AtomicU64>,
}

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

/// What one packet thread measured (only while the phase was `MEASURE`).
#[derive(Default)]
struct PacketOut {
    lookups: u64,
    hits: u64,
    misses: u64,
    stale_misses: u64,
    wrong: u64,
    lost: u64,
    samples: Vec<u64>,
}

#[derive(Default)]
struct WriterOut {
    /// Pairs done while measuring.
    pairs: u64,
    /// Pairs done in the whole point.
    pairs_total: u64,
    /// Expiries that found no flow (must be 0).
    expire_misses: u64,
    /// Pairs skipped because the writer was more than 10 ms behind its schedule.
    skipped: u64,
}

#[inline]
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[allow(clippy::too_many_arguments)]
fn packet_loop<M: FlowTable>(
    map: &M,
    window: &Window,
    phase: &AtomicU8,
    progress: &Counter,
    clock: Clock,
    seed: u64,
    miss_percent: u32,
    sample_every: u32,
) -> PacketOut {
    let reg = map.register();
    let mut out = PacketOut {
        samples: Vec::with_capacity(1 << 16),
        ..PacketOut::default()
    };
    let miss_below = u64::from(miss_percent) * 65_536 / 100;
    let mut rng = seed | 1;
    let mut acc = 0u64;
    let mut done = 0u64;
    loop {
        let ph = phase.load(Acquire);
        if ph == STOP {
            break;
        }
        let measuring = ph == MEASURE;
        let tail = window.tail.load(Acquire);
        let head = window.head.load(Acquire);
        let span = head.saturating_sub(tail).max(1);
        let (mut hits, mut misses, mut stale, mut wrong, mut lost) = (0u64, 0u64, 0, 0, 0);
        for i in 0..sample_every {
            let r = xorshift(&mut rng);
            let id = tail + (((r >> 32) * span) >> 32);
            let absent = (r & 0xFFFF) < miss_below;
            let key = if absent {
                FlowKey::absent(id)
            } else {
                FlowKey::of(id)
            };
            let found = if i == 0 {
                let t0 = clock.ticks();
                let found = map.lookup(&reg, &key);
                let t1 = clock.ticks();
                if measuring {
                    out.samples.push(t1.wrapping_sub(t0));
                }
                found
            } else {
                map.lookup(&reg, &key)
            };
            match found {
                Some((got, expires)) => {
                    hits += 1;
                    acc = acc.wrapping_add(expires);
                    if absent || got != id {
                        wrong += 1;
                    }
                }
                None => {
                    misses += 1;
                    if !absent {
                        // Live before the lookup (`tail <= id < head`); still live after it?
                        if id >= window.tail.load(Acquire) {
                            lost += 1;
                        } else {
                            stale += 1;
                        }
                    }
                }
            }
        }
        done += u64::from(sample_every);
        progress.publish(done);
        if measuring {
            out.lookups += u64::from(sample_every);
            out.hits += hits;
            out.misses += misses;
            out.stale_misses += stale;
            out.wrong += wrong;
            out.lost += lost;
        }
    }
    black_box(acc);
    out
}

fn writer_loop<M: FlowTable>(
    map: &M,
    window: &Window,
    phase: &AtomicU8,
    rate: u64,
    flows: u64,
    dropped: &'static AtomicU64,
) -> WriterOut {
    let reg = map.register();
    let mut out = WriterOut::default();
    let start = Instant::now();
    let max_backlog = (rate / 100).max(1);
    let mut scheduled = 0u64;
    loop {
        let ph = phase.load(Acquire);
        if ph == STOP {
            break;
        }
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        if due > scheduled + max_backlog {
            out.skipped += due - max_backlog - scheduled;
            scheduled = due - max_backlog;
        }
        if scheduled >= due {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        let n = (due - scheduled).min(64);
        for _ in 0..n {
            let head = window.head.load(Relaxed);
            map.insert(
                &reg,
                FlowKey::of(head),
                FlowRecord::new(head, flows, dropped),
            );
            window.head.store(head + 1, Release);
            let tail = window.tail.load(Relaxed);
            window.tail.store(tail + 1, Release);
            if !map.remove(&reg, &FlowKey::of(tail)) {
                out.expire_misses += 1;
            }
        }
        scheduled += n;
        out.pairs_total += n;
        if ph == MEASURE {
            out.pairs += n;
        }
    }
    out
}

/// Insert flows `0..flows` from the calling thread.
fn fill<M: FlowTable>(map: &M, flows: u64, dropped: &'static AtomicU64) {
    let reg = map.register();
    for i in 0..flows {
        map.insert(&reg, FlowKey::of(i), FlowRecord::new(i, flows, dropped));
    }
}

/// Remove flows `tail..head` from the calling thread; the removals that found nothing.
fn drain<M: FlowTable>(map: &M, tail: u64, head: u64) -> u64 {
    let reg = map.register();
    (tail..head)
        .filter(|&id| !map.remove(&reg, &FlowKey::of(id)))
        .count() as u64
}

/// This process's resident set, in bytes (Linux: `/proc/self/statm`).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// The map's `len()`, from the calling thread.
fn len_of<M: FlowTable>(map: &M) -> u64 {
    let reg = map.register();
    map.len(&reg)
}

/// One (map, thread count) point, accumulated over the rounds.
#[derive(Default)]
struct Acc {
    seconds: f64,
    lookups: u64,
    per_thread: Vec<u64>,
    hits: u64,
    misses: u64,
    stale: u64,
    wrong: u64,
    lost: u64,
    samples: Vec<u64>,
    writer_pairs: u64,
    expire_misses: u64,
    skipped: u64,
    /// Lookups/s of each round.
    rounds: Vec<f64>,
}

#[allow(clippy::too_many_arguments)]
fn measure_point<M: FlowTable>(
    map: &M,
    window: &Window,
    threads: usize,
    cfg: &Config,
    clock: Clock,
    seed: u64,
    dropped: &'static AtomicU64,
    acc: &mut Acc,
) -> Result<u64> {
    let phase = AtomicU8::new(WARMUP);
    let counters: Vec<Counter> = (0..threads).map(|_| Counter::default()).collect();
    std::thread::scope(|s| -> Result<u64> {
        let phase = &phase;
        let writer = if cfg.churn_rate > 0 {
            Some(spawn_scoped(s, "conntrack-writer", move || {
                writer_loop(map, window, phase, cfg.churn_rate, cfg.flows, dropped)
            })?)
        } else {
            None
        };
        let mut packets = Vec::new();
        for (t, counter) in counters.iter().enumerate() {
            let seed = seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            packets.push(spawn_scoped(s, &format!("conntrack-p{t}"), move || {
                packet_loop(
                    map,
                    window,
                    phase,
                    counter,
                    clock,
                    seed,
                    cfg.miss_percent,
                    cfg.sample_every,
                )
            })?);
        }
        // Warm up until every packet thread has made a pass (a thread may start late on a
        // loaded machine); a deadline bounds the wait.
        let deadline = Instant::now() + Duration::from_secs(10);
        std::thread::sleep(Duration::from_millis(20));
        while counters.iter().any(|c| c.get() == 0) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        phase.store(MEASURE, Release);
        let (c0, t0) = (measure::sum(&counters), Instant::now());
        std::thread::sleep(cfg.point);
        while measure::sum(&counters) == c0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let t1 = Instant::now();
        phase.store(STOP, Release);
        let mut outs = Vec::new();
        for h in packets {
            outs.push(join(h)?);
        }
        let w = match writer {
            Some(h) => join(h)?,
            None => WriterOut::default(),
        };
        acc.seconds += (t1 - t0).as_secs_f64();
        acc.per_thread.resize(threads, 0);
        acc.rounds
            .push(per_sec(outs.iter().map(|o| o.lookups).sum(), t1 - t0));
        for (i, o) in outs.into_iter().enumerate() {
            acc.lookups += o.lookups;
            acc.per_thread[i] += o.lookups;
            acc.hits += o.hits;
            acc.misses += o.misses;
            acc.stale += o.stale_misses;
            acc.wrong += o.wrong;
            acc.lost += o.lost;
            acc.samples.extend(o.samples);
        }
        acc.writer_pairs += w.pairs;
        acc.expire_misses += w.expire_misses;
        acc.skipped += w.skipped;
        Ok(w.pairs_total)
    })
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
