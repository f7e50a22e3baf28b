//! How long one `retire` call takes while a reader of the same domain sits in long read
//! sections on a busy machine: a retiring thread's tail latency with tried expedited grace
//! periods on (the default) and off (`producer_backlog_*` at `u64::MAX`).
//!
//! The shape: one thread re-enters 50 µs read-side critical sections back to back; one thread
//! retires 64-byte objects in a loop and times each call; `--hogs N` more threads (default 2)
//! spin, so that more threads are runnable than the machine has cores. A tried grace period
//! must give up on the reader within microseconds, whoever has the cores, so the retiring
//! thread's p99.99 stays within a few microseconds of the run without tries.
//!
//! Rounds alternate the two settings (7 by default, `--rounds N`), 1 s each (`--secs S`); the
//! median of each percentile across rounds is printed with its range, and the ratio of the
//! tried setting's p99.99 to the untried one, round by round.
//!
//! Run with `cargo bench -p rcukit --bench retire_latency` (about 20 s).

use rcukit::Rcu;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SECTION: Duration = Duration::from_micros(50);
const PERCENTILES: [(f64, &str); 4] = [
    (0.5, "p50"),
    (0.99, "p99"),
    (0.999, "p99.9"),
    (0.9999, "p99.99"),
];

struct Args {
    rounds: usize,
    secs: f64,
    hogs: usize,
}

fn args() -> Args {
    let mut a = Args {
        rounds: 7,
        secs: 1.0,
        hogs: 2,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let value = || argv.get(i + 1).and_then(|v| v.parse::<f64>().ok());
        match argv[i].as_str() {
            "--rounds" => a.rounds = value().expect("--rounds N") as usize,
            "--secs" => a.secs = value().expect("--secs S"),
            "--hogs" => a.hogs = value().expect("--hogs N") as usize,
            _ => {
                i += 1; // cargo bench passes `--bench`
                continue;
            }
        }
        i += 2;
    }
    a
}

/// Latencies of one round's `retire` calls, in nanoseconds, sorted.
fn round(tried: bool, secs: f64, hogs: usize) -> Vec<u64> {
    let mut builder = Rcu::builder();
    if !tried {
        builder = builder
            .producer_backlog_callbacks(u64::MAX)
            .producer_backlog_bytes(u64::MAX);
    }
    let rcu = Arc::new(builder.build().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    {
        let (rcu, stop) = (rcu.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Relaxed) {
                let _g = rcu.read();
                let start = Instant::now();
                while start.elapsed() < SECTION {
                    std::hint::spin_loop();
                }
            }
        }));
    }
    for _ in 0..hogs {
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || {
            let mut x = 0u64;
            while !stop.load(Relaxed) {
                x = black_box(x.wrapping_add(1));
            }
        }));
    }
    let mut latencies = Vec::with_capacity(1 << 22);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        let object = Box::new([0u64; 8]);
        let t = Instant::now();
        rcu.retire(object);
        latencies.push(t.elapsed().as_nanos() as u64);
    }
    stop.store(true, Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    latencies.sort_unstable();
    latencies
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let a = args();
    println!(
        "retire latency beside a reader in 50 µs sections, {} spinning threads, {} rounds of {} s",
        a.hogs, a.rounds, a.secs
    );
    let mut figures: [Vec<Vec<f64>>; 2] = [vec![Vec::new(); 4], vec![Vec::new(); 4]];
    let mut ratios = Vec::new();
    for r in 0..a.rounds {
        let order = if r % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        let mut tail = [0.0; 2];
        for tried in order {
            let lat = round(tried, a.secs, a.hogs);
            let arm = usize::from(!tried);
            for (i, (p, _)) in PERCENTILES.iter().enumerate() {
                figures[arm][i].push(percentile(&lat, *p) as f64 / 1e3);
            }
            tail[arm] = percentile(&lat, 0.9999) as f64;
        }
        ratios.push(tail[0] / tail[1]);
    }
    for (arm, name) in ["tried grace periods on ", "tried grace periods off"]
        .iter()
        .enumerate()
    {
        let cells: Vec<String> = PERCENTILES
            .iter()
            .enumerate()
            .map(|(i, (_, label))| {
                let (m, lo, hi) = median(figures[arm][i].clone());
                format!("{label} {m:.2} µs ({lo:.2}-{hi:.2})")
            })
            .collect();
        println!("{name}: {}", cells.join(", "));
    }
    let (m, lo, hi) = median(ratios);
    println!("p99.99 on / off, round by round: median {m:.2}x ({lo:.2}x-{hi:.2}x)");
}
