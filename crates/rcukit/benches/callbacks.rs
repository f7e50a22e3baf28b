//! Callback benchmarks: `retire` throughput end to end beside crossbeam-epoch, and
//! seed 004's A/B in miniature (pending bytes with and without `expedited_callbacks`).
//!
//! Run with `cargo bench -p rcukit --bench callbacks` (add `-- --quick` for a short run;
//! `--only=retire` or `--only=ab` for one part). `callbacks_mimalloc` runs the same code over
//! mimalloc.
//! Every figure is measured in the run that prints it; ratios compare runs of the same process.

use crossbeam_epoch::{self as epoch, Owned};
use rcukit::Rcu;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

static DROPPED: AtomicU64 = AtomicU64::new(0);

/// A small object whose drop is counted (16 bytes of payload).
struct Obj(#[allow(dead_code)] [u64; 2]);

impl Drop for Obj {
    fn drop(&mut self) {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

struct Run {
    per_sec: f64,
    peak_backlog: u64,
}

/// How often (in objects) the producer samples the backlog itself. Sampling from a separate
/// thread would put a third runnable thread on a 2-core machine and measure the scheduler.
const SAMPLE_EVERY: u64 = 1024;

/// `on_producers`: the `retire_on_producers` setting (the default is on).
fn rcukit_retire(n: u64, on_producers: bool) -> Run {
    let rcu = Rcu::builder()
        .retire_on_producers(on_producers)
        .build()
        .unwrap();
    DROPPED.store(0, Ordering::Relaxed);
    let backlog = || rcu.stats().callbacks_pending;
    let mut peak = 0;
    let start = Instant::now();
    for i in 0..n {
        rcu.retire(Box::new(Obj([i, i])));
        if i % SAMPLE_EVERY == 0 {
            peak = peak.max(backlog());
        }
    }
    while DROPPED.load(Ordering::Acquire) < n {
        peak = peak.max(backlog());
        std::thread::yield_now();
    }
    Run {
        per_sec: n as f64 / start.elapsed().as_secs_f64(),
        peak_backlog: peak,
    }
}

fn crossbeam_defer_destroy(n: u64, ops_per_pin: u64) -> Run {
    DROPPED.store(0, Ordering::Relaxed);
    let backlog = |deferred: u64| deferred.saturating_sub(DROPPED.load(Ordering::Relaxed));
    let mut peak = 0;
    let start = Instant::now();
    let mut i = 0;
    while i < n {
        let guard = epoch::pin();
        for _ in 0..ops_per_pin.min(n - i) {
            let obj = Owned::new(Obj([i, i])).into_shared(&guard);
            // SAFETY: the object was never shared with anyone.
            unsafe { guard.defer_destroy(obj) };
            i += 1;
            if i % SAMPLE_EVERY == 0 {
                peak = peak.max(backlog(i));
            }
        }
    }
    while DROPPED.load(Ordering::Acquire) < n {
        epoch::pin().flush();
        peak = peak.max(backlog(n));
    }
    Run {
        per_sec: n as f64 / start.elapsed().as_secs_f64(),
        peak_backlog: peak,
    }
}

/// Several runs of one scheme: the median throughput, its range, and the median and worst
/// peak backlog.
struct Runs {
    median: f64,
    min: f64,
    max: f64,
    median_peak: u64,
    worst_peak: u64,
}

fn runs_of(runs: usize, mut f: impl FnMut() -> Run) -> Runs {
    let mut all: Vec<Run> = (0..runs).map(|_| f()).collect();
    all.sort_by(|a, b| a.per_sec.total_cmp(&b.per_sec));
    let mut peaks: Vec<u64> = all.iter().map(|r| r.peak_backlog).collect();
    peaks.sort_unstable();
    Runs {
        median: all[runs / 2].per_sec,
        min: all[0].per_sec,
        max: all[runs - 1].per_sec,
        median_peak: peaks[runs / 2],
        worst_peak: peaks[runs - 1],
    }
}

/// Mean latency of `synchronize()` on an idle domain: the length of one normal grace period.
fn normal_gp_length() -> Duration {
    let rcu = Rcu::builder().build().unwrap();
    rcu.synchronize();
    let start = Instant::now();
    for _ in 0..10 {
        rcu.synchronize();
    }
    start.elapsed() / 10
}

/// Retire 1 KiB objects at a steady rate while another thread runs an expedited grace period
/// every millisecond; sample pending bytes. Returns (mean, peak) pending bytes.
fn pending_bytes(expedited_callbacks: bool, run_for: Duration) -> (f64, u64) {
    let rcu = Rcu::builder()
        .expedited_callbacks(expedited_callbacks)
        // Keep the backlog control out of the picture: we measure release by grace periods.
        .backlog_bytes(u64::MAX)
        .backlog_callbacks(u64::MAX)
        .producer_backlog_bytes(u64::MAX)
        .producer_backlog_callbacks(u64::MAX)
        .build()
        .unwrap();
    let stop = AtomicBool::new(false);
    let rcu = &rcu;
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                rcu.synchronize_expedited();
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let sampler = s.spawn(|| {
            let (mut sum, mut n, mut peak) = (0u128, 0u128, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let b = rcu.stats().pending_bytes;
                sum += u128::from(b);
                n += 1;
                peak = peak.max(b);
                std::thread::sleep(Duration::from_micros(250));
            }
            (sum as f64 / n.max(1) as f64, peak)
        });
        let deadline = Instant::now() + run_for;
        while Instant::now() < deadline {
            for _ in 0..64 {
                rcu.retire(Box::new([0u8; 1024]));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        stop.store(true, Ordering::Relaxed);
        let result = sampler.join().unwrap();
        rcu.barrier();
        result
    })
}

/// The most a paced producer catches up after oversleeping: 1 ms of its rate.
const MAX_DEBT: Duration = Duration::from_millis(1);

/// Retire objects at a steady `rate` per second (a burst every 100 µs) and report the peak
/// backlog (callbacks queued and not yet run), sampled by the producer after each burst, and
/// how often the producer's 100 µs sleep overran `MAX_DEBT`.
///
/// This VM sometimes oversleeps a 100 µs sleep by up to 10 ms even when idle (the same loop
/// without rcukit shows it). Catching up all of that at once would turn the steady stream into
/// a short flood, so the producer forgives debts beyond `MAX_DEBT`: the stream stays at most
/// `rate`, and the count of forgiven stalls is printed.
fn rcukit_paced(rate: f64, run_for: Duration) -> (u64, u32) {
    let rcu = Rcu::builder().build().unwrap();
    let start = Instant::now();
    let max_debt = (rate * MAX_DEBT.as_secs_f64()) as u64;
    let mut sent = 0u64;
    let mut forgiven = 0u64;
    let mut stalls = 0;
    let mut peak = 0;
    while start.elapsed() < run_for {
        let scheduled = (start.elapsed().as_secs_f64() * rate) as u64 - forgiven;
        let due = if scheduled > sent + max_debt {
            forgiven += scheduled - sent - max_debt;
            stalls += 1;
            sent + max_debt
        } else {
            scheduled
        };
        while sent < due {
            rcu.retire(Box::new(Obj([sent, sent])));
            sent += 1;
        }
        peak = peak.max(rcu.stats().callbacks_pending);
        std::thread::sleep(Duration::from_micros(100));
    }
    rcu.barrier();
    (peak, stalls)
}

fn main() {
    run("system allocator (glibc malloc)");
}

/// The whole benchmark; `allocator` names the global allocator of this binary (the
/// `callbacks_mimalloc` bench runs the same code over mimalloc).
pub(crate) fn run(allocator: &str) {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let only = |part: &str| {
        !args.iter().any(|a| a.starts_with("--only"))
            || args.iter().any(|a| a == &format!("--only={part}"))
    };
    let n: u64 = if quick { 1_000_000 } else { 5_000_000 };
    let runs = if quick { 1 } else { 5 };

    println!("# callbacks benchmark, {allocator}\n");
    if only("retire") {
        retire_table(n, runs);
    }
    if only("ab") {
        ab_table(quick);
    }
}

/// The steady rate of the backlog measurement: well below what one worker sustains here, so
/// the backlog shows what waiting for grace periods costs, not a worker falling behind.
const STEADY_RATE: f64 = 2e6;

fn retire_table(n: u64, runs: usize) {
    let gp = normal_gp_length();
    // First, on a fresh heap: a steady stream.
    let run_for = Duration::from_millis(if runs == 1 { 500 } else { 1500 });
    let paced: Vec<(u64, u32)> = (0..runs.min(3))
        .map(|_| rcukit_paced(STEADY_RATE, run_for))
        .collect();
    let peaks: Vec<u64> = paced.iter().map(|p| p.0).collect();
    let stalls: Vec<u32> = paced.iter().map(|p| p.1).collect();
    let peak = peaks.iter().copied().max().unwrap_or(0);
    let gp_worth = STEADY_RATE * gp.as_secs_f64();
    println!(
        "## peak backlog of a steady stream of {:.1} M retires/s for {run_for:?}\n\n\
         normal grace period (idle synchronize) {gp:.2?}; one grace period's worth at this rate \
         = {gp_worth:.0} objects; rcukit peak backlog per run {peaks:?}, worst {peak} = {:.2} \
         of that (producer oversleeps past {MAX_DEBT:?}, forgiven, per run: {stalls:?})\n",
        STEADY_RATE / 1e6,
        peak as f64 / gp_worth
    );

    println!("## retire throughput, one producer, end to end (queued to dropped), n = {n}");
    let ours = runs_of(runs, || rcukit_retire(n, true));
    let worker_only = runs_of(runs, || rcukit_retire(n, false));
    let cb1 = runs_of(runs, || crossbeam_defer_destroy(n, 1));
    let cb64 = runs_of(runs, || crossbeam_defer_destroy(n, 64));
    println!(
        "{runs} runs each: median objects/s (min-max); the median and the worst peak backlog of \
         the runs, against one normal grace period's worth of objects at the median rate.\n"
    );
    println!(
        "| scheme | objects/s | ratio to rcukit | peak backlog, median / worst | one normal \
         GP's worth | peak / GP's worth, median / worst |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, r) in [
        ("rcukit retire (default)", &ours),
        ("rcukit retire, retire_on_producers(false)", &worker_only),
        ("crossbeam-epoch defer_destroy (pin per op)", &cb1),
        ("crossbeam-epoch defer_destroy (pin per 64 ops)", &cb64),
    ] {
        let gp_worth = r.median * gp.as_secs_f64();
        println!(
            "| {name} | {:.2} M ({:.2}-{:.2}) | {:.2} | {} / {} | {gp_worth:.0} | {:.2} / {:.2} |",
            r.median / 1e6,
            r.min / 1e6,
            r.max / 1e6,
            r.median / ours.median,
            r.median_peak,
            r.worst_peak,
            r.median_peak as f64 / gp_worth,
            r.worst_peak as f64 / gp_worth
        );
    }
    println!(
        "\nA flood as fast as one thread can allocate. rcukit's retiring thread keeps its \
         objects in its own list and drops them once their grace period has ended, asking for \
         expedited grace periods past the backlog threshold (with `retire_on_producers(false)` \
         everything goes through the worker); crossbeam-epoch drops on the producer's own \
         thread. The normal grace period measured above ({gp:.2?}) sets the GP's worth."
    );
}

fn ab_table(quick: bool) {
    let run_for = if quick {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(3)
    };
    println!(
        "\n## seed 004 in miniature: pending bytes, expedited GP every 1 ms, {run_for:?} each"
    );
    let (off_mean, off_peak) = pending_bytes(false, run_for);
    let (on_mean, on_peak) = pending_bytes(true, run_for);
    println!("| expedited_callbacks | mean pending bytes | peak pending bytes |");
    println!("|---|---:|---:|");
    println!("| off (baseline) | {off_mean:.0} | {off_peak} |");
    println!("| on | {on_mean:.0} | {on_peak} |");
    println!(
        "\nmean pending bytes off/on = {:.2}x; peak off/on = {:.2}x",
        off_mean / on_mean.max(1.0),
        off_peak as f64 / (on_peak.max(1)) as f64
    );
}
