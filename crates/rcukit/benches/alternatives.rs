//! The seeds' alternatives to RCU side by side, in one process: `Qsbr`, `RecSeq`, `PerCpuRwLock`
//! beside `Rcu` and the locks.
//!
//! * `read_cost/<scheme>/<threads>`: one read-side access (enter, load the shared pointer, read
//!   one field, leave) per iteration, on 1 and 2 threads that all read the same object. The
//!   floor (`plain_load`) and `qsbr_qs_every_64` run the same loop of bursts of 64 reads, QSBR
//!   announcing a quiescent state after each burst, like a packet loop.
//! * `writer_cost/<scheme>/<readers>`: one replacement (or one grace period, or one write lock)
//!   while 2 or 1 reader threads read as fast as they can.
//!
//! Run with `cargo bench -p rcukit --bench alternatives`. Besides criterion's own report, the
//! run ends with a summary table (median over criterion's samples of the time per operation,
//! per thread) and the ratios against the baselines measured in the same run:
//! read costs against the plain-load floor and against `parking_lot::RwLock`, writer costs
//! against `Rcu::synchronize_expedited`.

use criterion::{criterion_group, BenchmarkId, Criterion};
use crossbeam_utils::sync::ShardedLock;
use rcukit::{FenceKind, PerCpuRwLock, Qsbr, Rcu, RecSeq};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::atomic::{AtomicBool, AtomicPtr};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

/// The shared object every scheme protects.
struct Table {
    x: u64,
}

/// Time per operation of every criterion sample (warm-up included) of each benchmark.
static RESULTS: Mutex<BTreeMap<String, Vec<f64>>> = Mutex::new(BTreeMap::new());

fn record(name: &str, elapsed: Duration, ops: u64) {
    let per_op = elapsed.as_nanos() as f64 / ops.max(1) as f64;
    let mut results = RESULTS.lock().unwrap();
    results.entry(name.to_string()).or_default().push(per_op);
}

/// Median over samples of the time per operation: robust against the samples in which a
/// thread was preempted on this shared machine.
fn median_ns(name: &str) -> Option<f64> {
    let results = RESULTS.lock().unwrap();
    let mut v = results.get(name)?.clone();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// Run `body` on `threads` threads (the caller's and `threads - 1` more) and return the mean
/// of their elapsed times. `body(iters, start)` does its per-thread setup, waits on `start`,
/// times `iters` operations and returns the time.
fn on_threads<F>(threads: usize, iters: u64, body: &F) -> Duration
where
    F: Fn(u64, &Barrier) -> Duration + Sync,
{
    let start = Barrier::new(threads);
    let total = std::thread::scope(|s| {
        let others: Vec<_> = (1..threads)
            .map(|_| s.spawn(|| body(iters, &start)))
            .collect();
        let mine = body(iters, &start);
        others
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold(mine, |a, b| a + b)
    });
    total / threads as u32
}

/// Time `iters` calls of `op` after `start`.
#[inline(always)]
fn timed(iters: u64, start: &Barrier, mut op: impl FnMut(u64)) -> Duration {
    start.wait();
    let t = Instant::now();
    for i in 0..iters {
        op(i);
    }
    t.elapsed()
}

/// Time `iters` reads (rounded up to whole bursts of 64) after `start`, calling `after_burst`
/// after every 64: the shape of a packet loop that announces a quiescent state per burst.
#[inline(always)]
fn timed_bursts(
    iters: u64,
    start: &Barrier,
    mut read: impl FnMut() -> u64,
    mut after_burst: impl FnMut(),
) -> Duration {
    start.wait();
    let t = Instant::now();
    for _ in 0..iters.div_ceil(64) {
        for _ in 0..64 {
            black_box(read());
        }
        after_burst();
    }
    t.elapsed()
}

fn read_cost(c: &mut Criterion) {
    let mut group = c.benchmark_group("read_cost");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);

    let raw = AtomicPtr::new(Box::into_raw(Box::new(Table { x: 1 })));
    let rcu = Rcu::global();
    let qsbr = Qsbr::builder().name("bench-qsbr").build().unwrap();
    let recseq = RecSeq::new(Table { x: 1 });
    let recseq_mb = RecSeq::builder()
        .fence(FenceKind::Membarrier)
        .build(Table { x: 1 })
        .ok();
    let percpu = PerCpuRwLock::new(Table { x: 1 });
    let pl = parking_lot::RwLock::new(Table { x: 1 });
    let sharded = ShardedLock::new(Table { x: 1 });

    for threads in [1usize, 2] {
        let mut bench = |name: &str, body: &(dyn Fn(u64, &Barrier) -> Duration + Sync)| {
            let id = format!("read_cost/{name}/{threads}");
            group.bench_function(BenchmarkId::new(name, threads), |b| {
                b.iter_custom(|iters| {
                    let d = on_threads(threads, iters, &body);
                    record(&id, d, iters);
                    d
                })
            });
        };

        bench("plain_load", &|iters, start| {
            timed_bursts(
                iters,
                start,
                // SAFETY: the table is never freed during the benchmark.
                || unsafe { &*raw.load(Acquire) }.x,
                || {},
            )
        });
        bench("qsbr_qs_every_64", &|iters, start| {
            let mut me = qsbr.register();
            timed_bursts(
                iters,
                start,
                // SAFETY: as above (and QSBR would protect it).
                || unsafe { &*raw.load(Acquire) }.x,
                || me.quiescent_state(),
            )
        });
        bench("qsbr_qs_every_read", &|iters, start| {
            let mut me = qsbr.register();
            timed(iters, start, |_| {
                // SAFETY: as above.
                black_box(unsafe { &*raw.load(Acquire) }.x);
                me.quiescent_state();
            })
        });
        bench("rcu_read", &|iters, start| {
            timed(iters, start, |_| {
                let _guard = rcu.read();
                // SAFETY: as above (and the guard would protect it).
                black_box(unsafe { &*raw.load(Acquire) }.x);
            })
        });
        bench("recseq_seqcst", &|iters, start| {
            timed(iters, start, |_| {
                black_box(recseq.read().x);
            })
        });
        if let Some(recseq_mb) = &recseq_mb {
            bench("recseq_membarrier", &|iters, start| {
                timed(iters, start, |_| {
                    black_box(recseq_mb.read().x);
                })
            });
        }
        bench("percpu_rwlock", &|iters, start| {
            timed(iters, start, |_| {
                black_box(percpu.read().x);
            })
        });
        bench("parking_lot_rwlock", &|iters, start| {
            timed(iters, start, |_| {
                black_box(pl.read().x);
            })
        });
        bench("sharded_lock", &|iters, start| {
            timed(iters, start, |_| {
                black_box(sharded.read().unwrap().x);
            })
        });
    }
    group.finish();
    // SAFETY: no reader is left.
    drop(unsafe { Box::from_raw(raw.load(Relaxed)) });
}

/// Run `writer` under criterion while `readers` threads run `reader` in a loop.
fn with_busy_readers<R, W>(c: &mut Criterion, name: &str, readers: usize, reader: R, mut writer: W)
where
    R: Fn(&AtomicBool) + Sync,
    W: FnMut(),
{
    let stop = AtomicBool::new(false);
    let started = Barrier::new(readers + 1);
    std::thread::scope(|s| {
        for _ in 0..readers {
            s.spawn(|| {
                started.wait();
                reader(&stop);
            });
        }
        started.wait();
        let id = format!("writer_cost/{name}/{readers}");
        let mut group = c.benchmark_group("writer_cost");
        group
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(2))
            .sample_size(10);
        group.bench_function(BenchmarkId::new(name, readers), |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for _ in 0..iters {
                    writer();
                }
                let d = t.elapsed();
                record(&id, d, iters);
                d
            })
        });
        group.finish();
        stop.store(true, Relaxed);
    });
}

fn writer_cost(c: &mut Criterion) {
    let recseq = RecSeq::new(Table { x: 1 });
    let recseq_mb = RecSeq::builder()
        .fence(FenceKind::Membarrier)
        .build(Table { x: 1 })
        .ok();
    let rcu = Rcu::builder().name("bench-rcu").build().unwrap();
    let qsbr = Qsbr::builder().name("bench-qsbr-w").build().unwrap();
    let raw = AtomicPtr::new(Box::into_raw(Box::new(Table { x: 1 })));
    let percpu = PerCpuRwLock::new(Table { x: 1 });
    let pl = parking_lot::RwLock::new(Table { x: 1 });

    // 2 busy readers and the writer are 3 busy threads on a 2-core machine (the scheduler
    // shows); 1 busy reader leaves the writer a CPU of its own, so it shows the algorithms.
    for readers in [2, 1] {
        // RecSeq, default (fence per read, no IPI on replace).
        with_busy_readers(
            c,
            "recseq_replace_seqcst",
            readers,
            |stop| {
                while !stop.load(Relaxed) {
                    black_box(recseq.read().x);
                }
            },
            || {
                black_box(recseq.replace(Table { x: 2 }));
            },
        );
        // RecSeq with membarrier (no fence per read; an IPI per replace).
        if let Some(recseq) = &recseq_mb {
            with_busy_readers(
                c,
                "recseq_replace_membarrier",
                readers,
                |stop| {
                    while !stop.load(Relaxed) {
                        black_box(recseq.read().x);
                    }
                },
                || {
                    black_box(recseq.replace(Table { x: 2 }));
                },
            );
        }
        // RCU expedited grace period with busy readers of the same domain.
        with_busy_readers(
            c,
            "rcu_synchronize_expedited",
            readers,
            |stop| {
                while !stop.load(Relaxed) {
                    let _guard = rcu.read();
                    // SAFETY: the table is never freed while readers run.
                    black_box(unsafe { &*raw.load(Acquire) }.x);
                }
            },
            || rcu.synchronize_expedited(),
        );
        // QSBR expedited grace period, readers announcing a quiescent state every 64 reads.
        with_busy_readers(
            c,
            "qsbr_synchronize_expedited",
            readers,
            |stop| {
                let mut me = qsbr.register();
                let mut i = 0u64;
                while !stop.load(Relaxed) {
                    // SAFETY: as above.
                    black_box(unsafe { &*raw.load(Acquire) }.x);
                    i += 1;
                    if i % 64 == 0 {
                        me.quiescent_state();
                    }
                }
            },
            || qsbr.synchronize_expedited(),
        );
        // Write locks among busy readers.
        with_busy_readers(
            c,
            "percpu_rwlock_write",
            readers,
            |stop| {
                while !stop.load(Relaxed) {
                    black_box(percpu.read().x);
                }
            },
            || percpu.write().x += 1,
        );
        with_busy_readers(
            c,
            "parking_lot_rwlock_write",
            readers,
            |stop| {
                while !stop.load(Relaxed) {
                    black_box(pl.read().x);
                }
            },
            || pl.write().x += 1,
        );
    }
    // SAFETY: the reader threads have stopped.
    drop(unsafe { Box::from_raw(raw.load(Relaxed)) });
}

fn summary() {
    println!("\n== summary (same run; median over samples of ns/op per thread, and ratios) ==");
    println!(
        "{:<28} {:>9} {:>9} {:>10} {:>10} {:>10}",
        "read_cost", "1 thr ns", "2 thr ns", "vs floor 1", "vs floor 2", "vs pl 2"
    );
    let names = [
        "plain_load",
        "qsbr_qs_every_64",
        "qsbr_qs_every_read",
        "rcu_read",
        "recseq_seqcst",
        "recseq_membarrier",
        "percpu_rwlock",
        "parking_lot_rwlock",
        "sharded_lock",
    ];
    let floor = |t| median_ns(&format!("read_cost/plain_load/{t}"));
    let pl2 = median_ns("read_cost/parking_lot_rwlock/2");
    for name in names {
        let (Some(a), Some(b)) = (
            median_ns(&format!("read_cost/{name}/1")),
            median_ns(&format!("read_cost/{name}/2")),
        ) else {
            continue;
        };
        let ratio = |x: f64, base: Option<f64>| base.map_or(f64::NAN, |base| x / base);
        let vs_pl = pl2.map_or(f64::NAN, |pl| pl / b);
        println!(
            "{name:<28} {a:>9.2} {b:>9.2} {:>9.2}x {:>9.2}x {:>8.1}x faster",
            ratio(a, floor(1)),
            ratio(b, floor(2)),
            vs_pl
        );
    }
    println!(
        "\n{:<28} {:>12} {:>12} {:>14} {:>14}",
        "writer_cost", "2 rdrs µs", "1 rdr µs", "vs sync_exp 2", "vs sync_exp 1"
    );
    let exp = |r: usize| median_ns(&format!("writer_cost/rcu_synchronize_expedited/{r}"));
    for name in [
        "recseq_replace_seqcst",
        "recseq_replace_membarrier",
        "rcu_synchronize_expedited",
        "qsbr_synchronize_expedited",
        "percpu_rwlock_write",
        "parking_lot_rwlock_write",
    ] {
        let (Some(two), Some(one)) = (
            median_ns(&format!("writer_cost/{name}/2")),
            median_ns(&format!("writer_cost/{name}/1")),
        ) else {
            continue;
        };
        let ratio = |x: f64, r| exp(r).map_or(f64::NAN, |e| x / e);
        println!(
            "{name:<28} {:>12.2} {:>12.2} {:>13.2}x {:>13.2}x",
            two / 1000.0,
            one / 1000.0,
            ratio(two, 2),
            ratio(one, 1)
        );
    }
}

criterion_group!(benches, read_cost, writer_cost);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // `cargo bench` passes `--bench`; without it (`cargo test`) criterion runs every benchmark
    // once as a smoke test, and per-operation figures would mean nothing.
    if std::env::args().any(|a| a == "--bench") {
        summary();
    }
}
