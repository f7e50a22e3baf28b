//! What an owned read section costs beside a guard and beside the peers' owned reads.
//!
//! Each figure is one read of a two-word value: enter a read section, load the pointer,
//! read a field, leave. Measured at 1 and 2 threads, 7 rounds interleaved across all schemes
//! (so that drift on a shared machine hits every scheme alike); the median and the range are
//! printed, with ratios to `read()` of the same domain in the same run:
//!
//! * `read` / `read_owned`, global domain (`Rcu::global()` in the loop, as the README shows);
//! * `read` / `read_owned`, a domain handle (no count is taken there either: a dropped
//!   handle's state is parked until its last owned guard closes);
//! * `RcuCell::snapshot` (an owned guard and the value, `Send`, global domain) and
//!   `RcuCell::load_arc` (a clone of the `Arc` in an `RcuCell<Arc<_>>`, holding nothing);
//! * arc-swap `load` (a borrowed guard, not `Send`) and `load_full` (an owned `Arc`);
//! * seize `enter_owned` (a `Send` guard that borrows its collector) + `protect`.
//!
//! Run with `cargo bench -p rcukit --bench owned` (about 20 s).

use arc_swap::ArcSwap;
use rcukit::{Rcu, RcuCell};
use seize::Guard as _;
use std::hint::black_box;
use std::sync::atomic::AtomicPtr;
use std::sync::atomic::Ordering::Acquire;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[derive(Clone, Debug, Default)]
struct Payload {
    a: u64,
    b: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    GlobalRead,
    GlobalReadOwned,
    HandleRead,
    HandleReadOwned,
    ArcSwapLoad,
    ArcSwapLoadFull,
    SeizeOwned,
    CellSnapshot,
    CellLoadArc,
}

const SCHEMES: [Scheme; 9] = [
    Scheme::GlobalRead,
    Scheme::GlobalReadOwned,
    Scheme::HandleRead,
    Scheme::HandleReadOwned,
    Scheme::CellSnapshot,
    Scheme::CellLoadArc,
    Scheme::ArcSwapLoad,
    Scheme::ArcSwapLoadFull,
    Scheme::SeizeOwned,
];

impl Scheme {
    fn name(self) -> &'static str {
        match self {
            Scheme::GlobalRead => "rcukit global read()",
            Scheme::GlobalReadOwned => "rcukit global read_owned()",
            Scheme::HandleRead => "rcukit handle read()",
            Scheme::HandleReadOwned => "rcukit handle read_owned()",
            Scheme::ArcSwapLoad => "arc-swap load()",
            Scheme::ArcSwapLoadFull => "arc-swap load_full()",
            Scheme::SeizeOwned => "seize enter_owned()",
            Scheme::CellSnapshot => "rcukit RcuCell::snapshot()",
            Scheme::CellLoadArc => "rcukit RcuCell::load_arc()",
        }
    }
}

struct Subjects {
    global_cell: RcuCell<Payload>,
    global_arc_cell: RcuCell<Arc<Payload>>,
    handle: Arc<Rcu>,
    handle_cell: RcuCell<Payload, Arc<Rcu>>,
    arc_swap: ArcSwap<Payload>,
    seize: seize::Collector,
    seize_ptr: AtomicPtr<Payload>,
}

impl Subjects {
    fn new() -> Subjects {
        let handle = Arc::new(Rcu::new());
        Subjects {
            global_cell: RcuCell::new(Payload::default()),
            global_arc_cell: RcuCell::new(Arc::new(Payload::default())),
            handle_cell: RcuCell::with_domain(Payload::default(), handle.clone()),
            handle,
            arc_swap: ArcSwap::from_pointee(Payload::default()),
            seize: seize::Collector::new(),
            seize_ptr: AtomicPtr::new(Box::into_raw(Box::new(Payload::default()))),
        }
    }

    /// `iters` reads; returns a checksum so that nothing is optimized away.
    fn reads(&self, scheme: Scheme, iters: u64) -> u64 {
        let mut sum = 0u64;
        for _ in 0..iters {
            sum = sum.wrapping_add(match scheme {
                Scheme::GlobalRead => {
                    let g = Rcu::global().read();
                    black_box(self.global_cell.load(&g)).a
                }
                Scheme::GlobalReadOwned => {
                    let g = Rcu::global().read_owned();
                    black_box(self.global_cell.load(&g)).a
                }
                Scheme::HandleRead => {
                    let g = self.handle.read();
                    black_box(self.handle_cell.load(&g)).a
                }
                Scheme::HandleReadOwned => {
                    let g = self.handle.read_owned();
                    black_box(self.handle_cell.load(&g)).a
                }
                Scheme::CellSnapshot => {
                    let snapshot = self.global_cell.snapshot();
                    black_box(&*snapshot).a
                }
                Scheme::CellLoadArc => {
                    let arc = self.global_arc_cell.load_arc();
                    black_box(&*arc).a
                }
                Scheme::ArcSwapLoad => black_box(self.arc_swap.load()).a,
                Scheme::ArcSwapLoadFull => black_box(self.arc_swap.load_full()).a,
                Scheme::SeizeOwned => {
                    let g = self.seize.enter_owned();
                    let p = g.protect(black_box(&self.seize_ptr), Acquire);
                    // SAFETY: the pointer is never retired; the guard protects it anyway.
                    black_box(unsafe { &*p }).b
                }
            });
        }
        sum
    }
}

impl Drop for Subjects {
    fn drop(&mut self) {
        // SAFETY: made with Box::into_raw in `new`, never retired, no reader is left.
        drop(unsafe { Box::from_raw(*self.seize_ptr.get_mut()) });
    }
}

/// ns per read, mean over `threads` threads started together.
fn measure(subjects: &Subjects, scheme: Scheme, threads: usize, iters: u64) -> f64 {
    let start = Barrier::new(threads);
    let total: Duration = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    subjects.reads(scheme, 1_000); // warm: records, caches
                    start.wait();
                    let t = Instant::now();
                    black_box(subjects.reads(scheme, iters));
                    t.elapsed()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    total.as_nanos() as f64 / threads as f64 / iters as f64
}

fn index(scheme: Scheme) -> usize {
    SCHEMES.iter().position(|&s| s == scheme).unwrap()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds = 7;
    let iters = 2_000_000;
    let subjects = Subjects::new();
    println!("owned read sections: ns per read (median of {rounds} interleaved rounds, min-max)");
    for threads in [1, 2] {
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); SCHEMES.len()];
        for _ in 0..rounds {
            for (i, &scheme) in SCHEMES.iter().enumerate() {
                samples[i].push(measure(&subjects, scheme, threads, iters));
            }
        }
        let medians: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
        println!("\n{threads} thread(s):");
        for (i, &scheme) in SCHEMES.iter().enumerate() {
            let base = match scheme {
                Scheme::HandleRead | Scheme::HandleReadOwned => medians[2],
                _ => medians[0],
            };
            let (lo, hi) = (samples[i][0], samples[i][rounds - 1]);
            println!(
                "  {:<28} {:>7.2} ns  ({lo:.2}-{hi:.2})  {:>5.2}x read()",
                scheme.name(),
                medians[i],
                medians[i] / base
            );
        }
        let load_full = medians[index(Scheme::ArcSwapLoadFull)];
        println!(
            "  vs arc-swap load_full (below 1 = faster): read_owned global {:.2}x, handle {:.2}x; \
             snapshot {:.2}x; load_arc {:.2}x",
            medians[1] / load_full,
            medians[3] / load_full,
            medians[index(Scheme::CellSnapshot)] / load_full,
            medians[index(Scheme::CellLoadArc)] / load_full,
        );
    }
}
