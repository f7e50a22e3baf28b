//! `RcuCell` beside the peers people use for the same job, in one process, plus the update
//! throughput of each way to reclaim the old value.
//!
//! * Read cost, 1 and 2 reader threads: a plain `AtomicPtr` load (the floor: what an
//!   unprotected read costs), `RcuCell::read` (guard + load, per read), `RcuCell::load` under a
//!   guard held for 1,024 reads, arc-swap's `load`, and `RwLock<Arc<T>>` (std and parking_lot)
//!   read-and-dereference.
//! * List walks, 1 and 2 reader threads: 16 elements in an `RcuList` (guard per walk), in a
//!   `Vec` behind arc-swap and behind a std `RwLock`, and in a plain `Vec` (the floor).
//! * Update throughput: `RcuCell::update_with` with `Reclaim::Deferred`, `Expedited` and
//!   `Synchronize`, no readers.
//!
//! Run with `cargo bench -p rcukit --bench cell`. Besides criterion's own report, the bench
//! prints a summary with each figure as a ratio to the floor and to arc-swap, measured in the
//! same run: the machine may be shared, so absolute numbers drift between runs but ratios
//! within a run hold better. Criterion flags work as usual, e.g.
//! `cargo bench -p rcukit --bench cell -- --measurement-time 2 read/1`.

use arc_swap::ArcSwap;
use criterion::Criterion;
use rcukit::{Rcu, RcuCell, RcuList, Reclaim};
use std::hint::black_box;
use std::sync::atomic::AtomicPtr;
use std::sync::atomic::Ordering::Acquire;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

/// What readers read: two words, so that a read is "load the pointer, then a field".
#[derive(Clone, Debug, Default)]
struct Payload {
    a: u64,
    b: u64,
}

/// Total time and iterations per benchmark, in the order they ran, for the summary.
static RESULTS: Mutex<Vec<(String, Duration, u64)>> = Mutex::new(Vec::new());

fn record(name: &str, elapsed: Duration, iters: u64) {
    let mut results = RESULTS.lock().unwrap();
    match results.iter_mut().find(|(n, _, _)| n == name) {
        Some(entry) => {
            entry.1 += elapsed;
            entry.2 += iters;
        }
        None => results.push((name.to_string(), elapsed, iters)),
    }
}

/// Run `body(iters)` on `threads` threads started together; the mean per-thread time.
fn run<F: Fn(u64) -> u64 + Sync>(threads: usize, iters: u64, body: &F) -> Duration {
    if threads == 1 {
        let start = Instant::now();
        black_box(body(iters));
        return start.elapsed();
    }
    let barrier = Barrier::new(threads);
    let total: Duration = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let start = Instant::now();
                    black_box(body(iters));
                    start.elapsed()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    total / threads as u32
}

fn bench_read<F: Fn(u64) -> u64 + Sync>(c: &mut Criterion, threads: usize, name: &str, body: F) {
    let id = format!("read/{threads}/{name}");
    c.bench_function(&id, |b| {
        b.iter_custom(|iters| {
            let elapsed = run(threads, iters, &body);
            record(&id, elapsed, iters);
            elapsed
        })
    });
}

fn reads(c: &mut Criterion) {
    let value = Payload { a: 1, b: 2 };
    let raw = AtomicPtr::new(Box::into_raw(Box::new(value.clone())));
    let cell = RcuCell::new(value.clone());
    let swap = ArcSwap::from_pointee(value.clone());
    let std_lock = std::sync::RwLock::new(Arc::new(value.clone()));
    let pl_lock = parking_lot::RwLock::new(Arc::new(value));

    for threads in [1, 2] {
        bench_read(c, threads, "floor: AtomicPtr load", |n| {
            let mut sum = 0;
            for _ in 0..n {
                // SAFETY: the box lives until the end of `reads` and is never replaced.
                sum += black_box(unsafe { &*raw.load(Acquire) }).a;
            }
            sum
        });
        bench_read(c, threads, "RcuCell::read (guard + load)", |n| {
            let mut sum = 0;
            for _ in 0..n {
                sum += black_box(&*cell.read()).a;
            }
            sum
        });
        bench_read(c, threads, "RcuCell::load (guard per 1024)", |n| {
            let mut sum = 0;
            let mut left = n;
            while left > 0 {
                let batch = left.min(1024);
                let guard = cell.domain().read();
                for _ in 0..batch {
                    sum += black_box(cell.load(&guard)).a;
                }
                left -= batch;
            }
            sum
        });
        bench_read(c, threads, "arc-swap load", |n| {
            let mut sum = 0;
            for _ in 0..n {
                sum += black_box(&*swap.load()).a;
            }
            sum
        });
        bench_read(c, threads, "std RwLock<Arc> read", |n| {
            let mut sum = 0;
            for _ in 0..n {
                sum += black_box(&**std_lock.read().unwrap()).a;
            }
            sum
        });
        bench_read(c, threads, "parking_lot RwLock<Arc> read", |n| {
            let mut sum = 0;
            for _ in 0..n {
                sum += black_box(&**pl_lock.read()).a;
            }
            sum
        });
    }
    // SAFETY: no reader is left.
    drop(unsafe { Box::from_raw(raw.into_inner()) });
}

/// Walk 16 elements and sum a field: `RcuList` beside the same data in a `Vec` behind
/// arc-swap and behind a `RwLock`, and a plain `Vec` (the floor: contiguous and unprotected,
/// so the list's pointer chasing shows too).
fn walks(c: &mut Criterion) {
    const N: u64 = 16;
    let items: Vec<Payload> = (0..N).map(|a| Payload { a, b: 0 }).collect();
    let list: RcuList<Payload> = items.iter().cloned().collect();
    let plain = items.clone();
    let swap = ArcSwap::from_pointee(items.clone());
    let std_lock = std::sync::RwLock::new(items);
    for threads in [1, 2] {
        bench_read(c, threads, "walk 16: floor: Vec", |n| {
            let mut sum = 0;
            for _ in 0..n {
                sum += black_box(&plain).iter().map(|p| p.a).sum::<u64>();
            }
            sum
        });
        bench_read(c, threads, "walk 16: RcuList::iter (guard per walk)", |n| {
            let mut sum = 0;
            for _ in 0..n {
                let guard = list.domain().read();
                sum += list.iter(&guard).map(|p| p.a).sum::<u64>();
            }
            sum
        });
        bench_read(c, threads, "walk 16: arc-swap<Vec> load", |n| {
            let mut sum = 0;
            for _ in 0..n {
                sum += swap.load().iter().map(|p| p.a).sum::<u64>();
            }
            sum
        });
        bench_read(c, threads, "walk 16: std RwLock<Vec> read", |n| {
            let mut sum = 0;
            for _ in 0..n {
                sum += std_lock.read().unwrap().iter().map(|p| p.a).sum::<u64>();
            }
            sum
        });
    }
}

fn updates(c: &mut Criterion) {
    let mut group = c.benchmark_group("update");
    group.sample_size(10);
    let cell = RcuCell::new(Payload::default());
    for (name, how) in [
        ("Deferred", Reclaim::Deferred),
        ("Expedited", Reclaim::Expedited),
        ("Synchronize", Reclaim::Synchronize),
    ] {
        let id = format!("update/{name}");
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    cell.update_with(how, |old| Payload {
                        a: old.a + 1,
                        b: old.b,
                    });
                }
                let elapsed = start.elapsed();
                record(&id, elapsed, iters);
                // Reclaim the backlog outside the timed part so that samples stay independent.
                Rcu::global().barrier();
                elapsed
            })
        });
    }
    group.finish();
}

fn summary() {
    let results = RESULTS.lock().unwrap();
    let per_op = |name: &str| -> Option<f64> {
        results
            .iter()
            .find(|(n, _, iters)| n == name && *iters > 0)
            .map(|(_, total, iters)| total.as_nanos() as f64 / *iters as f64)
    };
    println!("\n## Summary (mean over every sample of this run, per thread)\n");
    println!("| benchmark | ns/op | × floor | arc-swap ÷ this |");
    println!("|---|---:|---:|---:|");
    for (name, _, _) in results.iter() {
        let Some(ns) = per_op(name) else { continue };
        if let Some(rest) = name.strip_prefix("read/") {
            let threads = rest.split('/').next().unwrap_or("1");
            let (floor, arc_swap) = if rest.contains("walk 16") {
                (
                    per_op(&format!("read/{threads}/walk 16: floor: Vec")),
                    per_op(&format!("read/{threads}/walk 16: arc-swap<Vec> load")),
                )
            } else {
                (
                    per_op(&format!("read/{threads}/floor: AtomicPtr load")),
                    per_op(&format!("read/{threads}/arc-swap load")),
                )
            };
            let ratio = |base: Option<f64>, f: fn(f64, f64) -> f64| {
                base.map_or("-".to_string(), |b| format!("{:.2}", f(ns, b)))
            };
            println!(
                "| {name} | {ns:.2} | {} | {} |",
                ratio(floor, |ns, b| ns / b),
                ratio(arc_swap, |ns, b| b / ns)
            );
        } else {
            println!("| {name} | {ns:.0} ({:.0} updates/s) | | |", 1e9 / ns);
        }
    }
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    reads(&mut c);
    walks(&mut c);
    updates(&mut c);
    c.final_summary();
    summary();
}
