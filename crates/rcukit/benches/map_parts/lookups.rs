//! The lookup part: readers alone, beside a writer (flat out or paced), and during resizes.

use crate::maps::{
    consume, filled, splitmix64, value_of, with_row, BenchMap, FLAT, FLAT_QSBR, RCU, ROWS,
};
use crate::stats::{median, mops, ratio, show_ratio};
use crate::Config;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Churn keys live at once in scenarios (b) and (b').
const CHURN_WINDOW: u64 = 1024;

/// Writes per second of the paced writer of scenario (b').
const PACED_WRITES: f64 = 100_000.0;

/// Lookups between two looks at the stop flag.
const BATCH: usize = 256;

/// Churn keys of scenario (b): never among the looked-up keys.
fn churn_key(n: u64) -> u64 {
    splitmix64((1 << 40) + n)
}

/// Extra keys of scenario (c): never among the looked-up or churn keys.
fn extra_key(n: u64) -> u64 {
    splitmix64((1 << 50) + n)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Scenario {
    Alone,
    Writer,
    Paced,
    Resize,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Alone => "(a) alone",
            Scenario::Writer => "(b) with a 90/10 writer, flat out",
            Scenario::Paced => "(b') with a 90/10 writer, paced",
            Scenario::Resize => "(c) during resizes",
        }
    }
}

/// The scenarios measured at `keys` keys: all of them up to 100,000 keys; alone and with the
/// flat-out writer above (a resize cycle of four times a million keys takes too long).
fn scenarios(keys: usize) -> Vec<Scenario> {
    if keys <= 100_000 {
        vec![
            Scenario::Alone,
            Scenario::Writer,
            Scenario::Paced,
            Scenario::Resize,
        ]
    } else {
        vec![Scenario::Alone, Scenario::Writer]
    }
}

/// One measurement.
#[derive(Clone, Copy, Default)]
struct Sample {
    lookups: f64,
    /// Lookups per second of each reader's own CPU time, summed over the readers: beside a
    /// writer, with more busy threads than cores, what the readers did with the CPU they got.
    lookups_per_cpu: f64,
    writes: f64,
    cycles: u64,
}

/// The calling thread's CPU time, in seconds (`CLOCK_THREAD_CPUTIME_ID`; wall time where
/// there is no such clock).
fn thread_cpu_seconds(wall: Instant) -> f64 {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec for the call to fill.
        if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0 {
            return ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9;
        }
    }
    wall.elapsed().as_secs_f64()
}

/// Runs `threads` readers (and the scenario's writer) on `map` for `cfg.run_for`.
fn measure<M: BenchMap>(
    map: &M,
    keys: &[u64],
    scenario: Scenario,
    threads: usize,
    cfg: &Config,
) -> Sample {
    let stop = AtomicBool::new(false);
    let with_writer = scenario != Scenario::Alone;
    let barrier = Barrier::new(threads + 1 + usize::from(with_writer));
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, barrier) = (&stop, &barrier);
                s.spawn(move || {
                    let rng = splitmix64(0xdead_beef + t as u64) | 1;
                    barrier.wait();
                    let start = Instant::now();
                    let cpu = thread_cpu_seconds(start);
                    let count = read_until_stopped(map, keys, rng, stop);
                    let cpu = thread_cpu_seconds(start) - cpu;
                    let wall = start.elapsed().as_secs_f64();
                    (count as f64 / wall, count as f64 / cpu.max(1e-9))
                })
            })
            .collect();
        let writer = with_writer.then(|| {
            let (stop, barrier) = (&stop, &barrier);
            s.spawn(move || {
                barrier.wait();
                let start = Instant::now();
                let (writes, cycles) = match scenario {
                    Scenario::Writer => churn_writer(map, keys, stop, None),
                    Scenario::Paced => churn_writer(map, keys, stop, Some(PACED_WRITES)),
                    _ => resize_writer(map, keys.len() as u64 * 4, stop),
                };
                (writes as f64 / start.elapsed().as_secs_f64(), cycles)
            })
        });
        barrier.wait();
        std::thread::sleep(cfg.run_for);
        stop.store(true, Ordering::Relaxed);
        let rates: Vec<(f64, f64)> = readers.into_iter().map(|h| h.join().unwrap()).collect();
        let (writes, cycles) = writer.map_or((0.0, 0), |h| h.join().unwrap());
        Sample {
            lookups: rates.iter().map(|r| r.0).sum(),
            lookups_per_cpu: rates.iter().map(|r| r.1).sum(),
            writes,
            cycles,
        }
    })
}

/// A reader: verified lookups in batches of [`BATCH`] until `stop`; returns the count.
#[inline(never)]
fn read_until_stopped<M: BenchMap>(map: &M, keys: &[u64], mut rng: u64, stop: &AtomicBool) -> u64 {
    let mut sum = 0u64;
    let mut count = 0u64;
    while !stop.load(Ordering::Relaxed) {
        sum = sum.wrapping_add(map.lookups(keys, &mut rng, BATCH));
        count += BATCH as u64;
    }
    consume(sum);
    count
}

/// Scenarios (b) and (b'): 9 verified lookups, then one write, until stopped, flat out or at
/// `rate` writes per second; leaves the map as it found it. Returns the number of writes.
fn churn_writer<M: BenchMap>(
    map: &M,
    keys: &[u64],
    stop: &AtomicBool,
    rate: Option<f64>,
) -> (u64, u64) {
    let start = Instant::now();
    let mut rng = 0x1234_5678_9abc_def1u64;
    let mut sum = 0u64;
    let (mut inserted, mut removed, mut writes) = (0u64, 0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        if let Some(rate) = rate {
            if writes as f64 >= start.elapsed().as_secs_f64() * rate {
                std::thread::sleep(Duration::from_micros(500));
                continue;
            }
        }
        for _ in 0..10 {
            sum = sum.wrapping_add(map.lookups(keys, &mut rng, 9));
            if inserted - removed < CHURN_WINDOW || writes & 1 == 0 {
                let k = churn_key(inserted);
                map.insert(k, value_of(k));
                inserted += 1;
            } else {
                map.remove(churn_key(removed));
                removed += 1;
            }
            writes += 1;
        }
    }
    consume(sum);
    for n in removed..inserted {
        map.remove(churn_key(n));
    }
    (writes, 0)
}

/// Scenario (c): insert `extra` keys, remove them, shrink where possible; repeat until
/// stopped. Returns the number of writes and of completed cycles.
fn resize_writer<M: BenchMap>(map: &M, extra: u64, stop: &AtomicBool) -> (u64, u64) {
    let (mut writes, mut cycles) = (0u64, 0u64);
    'outer: loop {
        for n in 0..extra {
            if n & 255 == 0 && stop.load(Ordering::Relaxed) {
                break 'outer;
            }
            let k = extra_key(n);
            map.insert(k, value_of(k));
            writes += 1;
        }
        for n in 0..extra {
            if n & 255 == 0 && stop.load(Ordering::Relaxed) {
                break 'outer;
            }
            map.remove(extra_key(n));
            writes += 1;
        }
        map.shrink();
        cycles += 1;
    }
    (writes, cycles)
}

/// Every map of the lookup part, built once per size (scenario (c) builds its own).
struct Built {
    maps: Vec<Box<dyn std::any::Any + Send + Sync>>,
}

impl Built {
    fn new(keys: &[u64]) -> Built {
        let maps = (0..ROWS.len())
            .map(|row| with_row!(row, M => Box::new(filled::<M>(keys)) as Box<dyn std::any::Any + Send + Sync>))
            .collect();
        Built { maps }
    }

    fn get<M: BenchMap + 'static>(&self, row: usize) -> &M {
        self.maps[row].downcast_ref::<M>().expect("row type")
    }
}

fn measure_row(
    built: &Built,
    row: usize,
    keys: &[u64],
    s: Scenario,
    t: usize,
    cfg: &Config,
) -> Sample {
    with_row!(row, M => {
        if s == Scenario::Resize {
            let map = filled::<M>(keys);
            measure(&map, keys, s, t, cfg)
        } else {
            measure(built.get::<M>(row), keys, s, t, cfg)
        }
    })
}

/// samples[scenario][reader count's index in `cfg.readers`][row] = one sample per round.
type Samples = Vec<Vec<Vec<Vec<Sample>>>>;

/// The lookup part at `n` keys: every scenario, thread count and map in every round.
pub(crate) fn run(cfg: &Config, n: usize) {
    let keys: Vec<u64> = (0..n as u64).map(splitmix64).collect();
    let scen = scenarios(n);
    let built = Built::new(&keys);
    let counts = &cfg.readers;
    let mut samples: Samples = vec![vec![vec![Vec::new(); ROWS.len()]; counts.len()]; scen.len()];
    let started = Instant::now();
    for round in 0..cfg.rounds {
        for (si, &scenario) in scen.iter().enumerate() {
            for (ti, &threads) in counts.iter().enumerate() {
                for i in 0..ROWS.len() {
                    let row = (i + round) % ROWS.len();
                    let sample = measure_row(&built, row, &keys, scenario, threads, cfg);
                    if cfg.verbose {
                        eprintln!(
                            "{n} keys, round {round}, {}, {threads} thr, {}: {:.2} M lookups/s, \
                             writer {:.2} M writes/s",
                            scenario.name(),
                            ROWS[row],
                            sample.lookups / 1e6,
                            sample.writes / 1e6
                        );
                    }
                    samples[si][ti][row].push(sample);
                }
            }
        }
        eprintln!(
            "lookups, {n} keys: round {}/{} done ({:.0} s)",
            round + 1,
            cfg.rounds,
            started.elapsed().as_secs_f64()
        );
    }
    drop(built);
    print_tables(n, &scen, counts, &samples);
}

/// One map's samples by `f` in one scenario, at the reader count of index `ti`.
fn series(samples: &Samples, si: usize, ti: usize, row: usize, f: fn(&Sample) -> f64) -> Vec<f64> {
    samples[si][ti][row].iter().map(f).collect()
}

/// `1 reader`, `2 readers`, ...
fn readers_name(n: usize) -> String {
    if n == 1 {
        "1 reader".into()
    } else {
        format!("{n} readers")
    }
}

/// A table's header cells, one per reader count, each followed by `suffix`.
fn header_cells(counts: &[usize], suffix: &str) -> String {
    counts
        .iter()
        .map(|&n| format!(" {}{suffix} |", readers_name(n)))
        .collect()
}

/// A table's alignment cells: `---:|` per reader count.
fn align_cells(counts: &[usize]) -> String {
    "---:|".repeat(counts.len())
}

fn print_tables(n: usize, scen: &[Scenario], counts: &[usize], samples: &Samples) {
    let lookups = |s: &Sample| s.lookups;
    let writes = |s: &Sample| s.writes;
    // The writer's ratio is taken beside the most readers measured.
    let last = counts.len() - 1;
    let most = readers_name(counts[last]);
    for (si, &scenario) in scen.iter().enumerate() {
        println!("### Lookups, {n} keys, {}\n", scenario.name());
        print!("| map |{}", header_cells(counts, ": M lookups/s"));
        let side = scenario != Scenario::Alone;
        let per_count = counts
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(" / ");
        if side {
            println!(
                " writer: M writes/s ({per_count} readers) |\n|---|{}---:|",
                align_cells(counts)
            );
        } else {
            println!("\n|---|{}", align_cells(counts));
        }
        for (row, name) in ROWS.iter().enumerate() {
            print!("| {name} |");
            for ti in 0..counts.len() {
                print!(" {} |", mops(&series(samples, si, ti, row, lookups)));
            }
            let per = |f: &dyn Fn(usize) -> String| {
                (0..counts.len()).map(f).collect::<Vec<_>>().join(" / ")
            };
            if scenario == Scenario::Resize {
                let c = |ti| {
                    format!(
                        "{}",
                        median(&series(samples, si, ti, row, |s| s.cycles as f64))
                    )
                };
                println!(" {} cycles |", per(&c));
            } else if side {
                let w = |ti| format!("{:.2}", median(&series(samples, si, ti, row, writes)) / 1e6);
                println!(" {} |", per(&w));
            } else {
                println!();
            }
        }
        for (top, top_name) in [
            (RCU, "RcuHashMap (guard per lookup)"),
            (FLAT, "RcuFlatMap"),
            (FLAT_QSBR, "RcuFlatMap on a QSBR domain"),
        ] {
            println!(
                "\n{top_name} ÷ each map, lookups (median of per-map medians; per-round range):\n"
            );
            let writer_cell = format!(" writer's writes/s, {most} |");
            println!(
                "| map |{}{}",
                header_cells(counts, ""),
                if side { writer_cell.as_str() } else { "" }
            );
            println!(
                "|---|{}{}",
                align_cells(counts),
                if side { "---:|" } else { "" }
            );
            for (row, name) in ROWS.iter().enumerate().skip(2) {
                if row == top {
                    continue;
                }
                print!("| {name} |");
                print_ratio_cells(samples, si, counts.len(), top, row, lookups);
                if side {
                    let r = ratio(
                        &series(samples, si, last, top, writes),
                        &series(samples, si, last, row, writes),
                    );
                    print!(" {} |", show_ratio(r));
                }
                println!();
            }
        }
        if matches!(scenario, Scenario::Writer | Scenario::Paced) {
            print_per_cpu(samples, si, counts);
        }
        println!();
    }
}

/// `RcuHashMap`, `RcuFlatMap` and `RcuFlatMap` on a QSBR domain ÷ each map in lookups per
/// second of the readers' own CPU time: with a busy writer there are more busy threads than
/// this machine's cores, and a writer that waits for its readers leaves them more of the CPU,
/// which the wall-clock table counts as speed.
fn print_per_cpu(samples: &Samples, si: usize, counts: &[usize]) {
    for (top, top_name) in [
        (RCU, "RcuHashMap (guard per lookup)"),
        (FLAT, "RcuFlatMap"),
        (FLAT_QSBR, "RcuFlatMap on a QSBR domain"),
    ] {
        println!(
            "\n{top_name} ÷ each map, lookups per second of the readers' own CPU time (median \
             of per-map medians; per-round range):\n"
        );
        println!(
            "| map |{}\n|---|{}",
            header_cells(counts, ""),
            align_cells(counts)
        );
        for (row, name) in ROWS.iter().enumerate().skip(2) {
            if row == top {
                continue;
            }
            print!("| {name} |");
            print_ratio_cells(samples, si, counts.len(), top, row, |s| s.lookups_per_cpu);
            println!();
        }
    }
}

/// One ratio row's cells: `top` ÷ `row` by `f`, one per reader count.
fn print_ratio_cells(
    samples: &Samples,
    si: usize,
    counts: usize,
    top: usize,
    row: usize,
    f: fn(&Sample) -> f64,
) {
    for ti in 0..counts {
        let r = ratio(
            &series(samples, si, ti, top, f),
            &series(samples, si, ti, row, f),
        );
        print!(" {} |", show_ratio(r));
    }
}
