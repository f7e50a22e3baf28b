//! One point of a map: packet threads looking flows up while the writer replaces them at the
//! churn rate, warmed up, measured and stopped together, and the figures of every round
//! added up.

use super::clock::Clock;
use super::flow::{FlowKey, FlowRecord};
use super::schemes::FlowTable;
use super::Config;
use crate::experiments::{join, spawn_scoped, OnExit};
use crate::measure::{self, per_sec, Counter};
use anyhow::Result;
use crossbeam_utils::CachePadded;
use std::hint::black_box;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU64, AtomicU8};
use std::time::{Duration, Instant};

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

/// The live flows: ids in `tail..head`. The writer stores `head + 1` after inserting flow
/// `head`, and `tail + 1` before removing flow `tail`.
pub(super) struct Window {
    pub(super) head: CachePadded<AtomicU64>,
    pub(super) tail: CachePadded<AtomicU64>,
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

/// The key of flow `id`, or (`absent`) a key of the kind that is never in the table.
#[inline]
fn key_of(id: u64, absent: bool) -> FlowKey {
    if absent {
        FlowKey::absent(id)
    } else {
        FlowKey::of(id)
    }
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
    // On a QSBR domain the thread is online from here: a quiescent state after every batch.
    let mut reg = map.register();
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
        let mut tally = Tally::default();
        for i in 0..sample_every {
            let r = xorshift(&mut rng);
            let id = tail + (((r >> 32) * span) >> 32);
            let absent = (r & 0xFFFF) < miss_below;
            let key = key_of(id, absent);
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
            tally.count(found, id, absent, window, &mut acc);
        }
        map.quiescent(&mut reg);
        done += u64::from(sample_every);
        progress.publish(done);
        if measuring {
            out.add(&tally, sample_every);
        }
    }
    black_box(acc);
    out
}

/// What one pass of a packet thread's lookups found.
#[derive(Default)]
struct Tally {
    hits: u64,
    misses: u64,
    stale: u64,
    wrong: u64,
    lost: u64,
}

impl Tally {
    /// Count a lookup of flow `id` (`absent`: a key never inserted) that found `found`,
    /// folding what it read into `acc`.
    fn count(
        &mut self,
        found: Option<(u64, u64)>,
        id: u64,
        absent: bool,
        window: &Window,
        acc: &mut u64,
    ) {
        match found {
            Some((got, expires)) => {
                self.hits += 1;
                *acc = acc.wrapping_add(expires);
                if absent || got != id {
                    self.wrong += 1;
                }
            }
            None => {
                self.misses += 1;
                if !absent {
                    // Live before the lookup (`tail <= id < head`); still live after it?
                    if id >= window.tail.load(Acquire) {
                        self.lost += 1;
                    } else {
                        self.stale += 1;
                    }
                }
            }
        }
    }
}

impl PacketOut {
    /// Add a pass of `n` lookups, measured.
    fn add(&mut self, tally: &Tally, n: u32) {
        self.lookups += u64::from(n);
        self.hits += tally.hits;
        self.misses += tally.misses;
        self.stale_misses += tally.stale;
        self.wrong += tally.wrong;
        self.lost += tally.lost;
    }
}

fn writer_loop<M: FlowTable>(
    map: &M,
    window: &Window,
    phase: &AtomicU8,
    rate: u64,
    flows: u64,
    dropped: &'static AtomicU64,
) -> WriterOut {
    let reg = map.register_writer();
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
pub(super) fn fill<M: FlowTable>(map: &M, flows: u64, dropped: &'static AtomicU64) {
    let reg = map.register_writer();
    for i in 0..flows {
        map.insert(&reg, FlowKey::of(i), FlowRecord::new(i, flows, dropped));
    }
}

/// Remove flows `tail..head` from the calling thread; the removals that found nothing.
pub(super) fn drain<M: FlowTable>(map: &M, tail: u64, head: u64) -> u64 {
    let reg = map.register_writer();
    (tail..head)
        .filter(|&id| !map.remove(&reg, &FlowKey::of(id)))
        .count() as u64
}

/// This process's resident set, in bytes (Linux: `/proc/self/statm`).
pub(super) fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// The map's `len()`, from the calling thread.
pub(super) fn len_of<M: FlowTable>(map: &M) -> u64 {
    let reg = map.register_writer();
    map.len(&reg)
}

/// One (map, thread count) point, accumulated over the rounds.
#[derive(Default)]
pub(super) struct Acc {
    pub(super) seconds: f64,
    pub(super) lookups: u64,
    pub(super) per_thread: Vec<u64>,
    pub(super) hits: u64,
    pub(super) misses: u64,
    pub(super) stale: u64,
    pub(super) wrong: u64,
    pub(super) lost: u64,
    pub(super) samples: Vec<u64>,
    pub(super) writer_pairs: u64,
    pub(super) expire_misses: u64,
    pub(super) skipped: u64,
    /// Lookups/s of each round.
    pub(super) rounds: Vec<f64>,
}

#[allow(clippy::too_many_arguments)]
pub(super) fn measure_point<M: FlowTable>(
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
        let _release = OnExit(|| phase.store(STOP, Release));
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
        let measured = run_phases(phase, &counters, cfg);
        let mut outs = Vec::new();
        for h in packets {
            outs.push(join(h)?);
        }
        let w = match writer {
            Some(h) => join(h)?,
            None => WriterOut::default(),
        };
        acc.add_round(measured, outs, &w);
        Ok(w.pairs_total)
    })
}

/// Warm up until every packet thread has made a pass (a thread may start late on a loaded
/// machine), measure for `cfg.point` (and until some lookup has been counted), stop; a
/// deadline bounds the waits. Returns how long the measurement lasted.
fn run_phases(phase: &AtomicU8, counters: &[Counter], cfg: &Config) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(10);
    std::thread::sleep(Duration::from_millis(20));
    while counters.iter().any(|c| c.get() == 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    phase.store(MEASURE, Release);
    let (c0, t0) = (measure::sum(counters), Instant::now());
    std::thread::sleep(cfg.point);
    while measure::sum(counters) == c0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let t1 = Instant::now();
    phase.store(STOP, Release);
    t1 - t0
}

impl Acc {
    /// Add one round that measured for `measured`: what each packet thread and the writer saw.
    fn add_round(&mut self, measured: Duration, outs: Vec<PacketOut>, w: &WriterOut) {
        self.seconds += measured.as_secs_f64();
        self.per_thread.resize(outs.len(), 0);
        self.rounds
            .push(per_sec(outs.iter().map(|o| o.lookups).sum(), measured));
        for (i, o) in outs.into_iter().enumerate() {
            self.lookups += o.lookups;
            self.per_thread[i] += o.lookups;
            self.hits += o.hits;
            self.misses += o.misses;
            self.stale += o.stale_misses;
            self.wrong += o.wrong;
            self.lost += o.lost;
            self.samples.extend(o.samples);
        }
        self.writer_pairs += w.pairs;
        self.expire_misses += w.expire_misses;
        self.skipped += w.skipped;
    }
}
