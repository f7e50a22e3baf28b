//! The cost of a read-side critical section through the C API against the Rust API's, measured
//! in the same run: `cargo run --release -p rcukit-c --example read_cost [-- ROUNDS ITERATIONS]`
//! (default 9 rounds of 100,000,000 sections).
//!
//! The C side is `examples/c/read_loop.c`, one call to lock and one to unlock per section on
//! the global domain, in two shapes: the guard token (`rcukit_read_lock`/`rcukit_read_unlock`)
//! and the thread's reader handle (`rcukit_reader_lock`/`rcukit_reader_unlock`). It is compiled
//! by the system C compiler against the installed header and linked against `librcukit.so`
//! and, separately, `librcukit.a`. The Rust side is the same loop in this process:
//! `Rcu::global().read()` inlined, as a Rust program gets it; the same with the lock and the
//! unlock each behind one call that is not inlined, the C API's call boundary (the goal's
//! baseline); and `ThreadReader::read` behind the same two calls, the work the C handle does.
//! Two more C loops make two calls to `rcukit_version()` (which returns a constant) and enter no
//! section: what the two calls alone cost through `librcukit.so` and `librcukit.a`, the floor
//! under a section through C for each way of linking.
//! All of them run in interleaved rounds (the order rotates every round); each round gives a
//! ratio C/Rust, and the table shows the medians with the spread over rounds. Every loop is
//! timed in its thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), so that time spent descheduled
//! on a shared machine is not counted.

use rcukit::{Guard, Rcu, ThreadReader};
use rcukit_c_harness as harness;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The calling thread's CPU time in nanoseconds (time spent descheduled is not counted).
fn thread_cpu_ns() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to fill in.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
}

fn rust_ns_per_section(iterations: u64) -> f64 {
    let rcu = Rcu::global();
    for _ in 0..1000 {
        drop(rcu.read());
    }
    let start = thread_cpu_ns();
    for _ in 0..iterations {
        let guard = rcu.read();
        black_box(&guard);
        drop(guard);
    }
    (thread_cpu_ns() - start) / iterations as f64
}

/// `Rcu::read` behind one call that is not inlined, and the guard's drop behind another: the
/// Rust API with the same call boundary as the C API.
#[inline(never)]
fn lock_called(rcu: &'static Rcu) -> Guard<'static> {
    rcu.read()
}

/// `ThreadReader::read` behind one call that is not inlined.
#[inline(never)]
fn reader_lock_called(reader: &ThreadReader<'static>) -> Guard<'static> {
    reader.read()
}

#[inline(never)]
fn unlock_called(guard: Guard<'static>) {
    drop(guard)
}

fn rust_called_ns_per_section(iterations: u64) -> f64 {
    let rcu = Rcu::global();
    for _ in 0..1000 {
        unlock_called(lock_called(rcu));
    }
    let start = thread_cpu_ns();
    for _ in 0..iterations {
        let guard = lock_called(black_box(rcu));
        unlock_called(black_box(guard));
    }
    (thread_cpu_ns() - start) / iterations as f64
}

fn rust_reader_called_ns_per_section(iterations: u64) -> f64 {
    let reader = Rcu::global().thread_reader();
    for _ in 0..1000 {
        unlock_called(reader_lock_called(&reader));
    }
    let start = thread_cpu_ns();
    for _ in 0..iterations {
        let guard = reader_lock_called(black_box(&reader));
        unlock_called(black_box(guard));
    }
    (thread_cpu_ns() - start) / iterations as f64
}

fn c_ns_per_section(program: &Path, mode: &str, iterations: u64) -> f64 {
    let ran = harness::run(
        program,
        &[mode, &iterations.to_string()],
        &[],
        Duration::from_secs(300),
    );
    ran.assert_success("read_loop");
    ran.stdout
        .trim()
        .strip_prefix("ns_per_section=")
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output from read_loop: {}", ran.stdout))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The loops, in table order: the three Rust ones first (the baselines), then the C ones, then
/// what two calls into the library cost alone (the floor of a section through C, per way of
/// linking).
const NAMES: [&str; 11] = [
    "Rust, `Rcu::global().read()` inlined",
    "Rust, `Rcu::read`: one call (not inlined) to lock and one to unlock",
    "Rust, `ThreadReader::read`: one call to lock and one to unlock",
    "C, guard token (`rcukit_read_lock`), `librcukit.so`",
    "C, guard token (`rcukit_read_lock`), `librcukit.a`",
    "C, thread's reader (`rcukit_reader_lock`), `librcukit.so`",
    "C, thread's reader (`rcukit_reader_lock`), `librcukit.a`",
    "C, thread's reader inlined from the header (`rcukit_reader_lock_inline`), `librcukit.so`",
    "C, thread's reader inlined from the header (`rcukit_reader_lock_inline`), `librcukit.a`",
    "C, two calls to `rcukit_version()` and no section, `librcukit.so`",
    "C, two calls to `rcukit_version()` and no section, `librcukit.a`",
];
const RUST_CALLED: usize = 1;
const RUST_READER: usize = 2;
const FIRST_C: usize = 3;
const FIRST_CALLS: usize = 9;

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(9, |a| a.parse().expect("ROUNDS"));
    let iterations: u64 = args
        .next()
        .map_or(100_000_000, |a| a.parse().expect("ITERATIONS"));
    let staged = harness::staged();
    let source: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/c/read_loop.c");
    let shared = harness::compile(
        "read_loop-shared",
        std::slice::from_ref(&source),
        &staged.rcukit_shared_args(),
    );
    let static_ = harness::compile("read_loop-static", &[source], &staged.rcukit_static_args());
    let measure = |which: usize| match which {
        0 => rust_ns_per_section(iterations),
        RUST_CALLED => rust_called_ns_per_section(iterations),
        RUST_READER => rust_reader_called_ns_per_section(iterations),
        3 => c_ns_per_section(&shared, "guard", iterations),
        4 => c_ns_per_section(&static_, "guard", iterations),
        5 => c_ns_per_section(&shared, "reader", iterations),
        6 => c_ns_per_section(&static_, "reader", iterations),
        7 => c_ns_per_section(&shared, "inline", iterations),
        8 => c_ns_per_section(&static_, "inline", iterations),
        9 => c_ns_per_section(&shared, "calls", iterations),
        _ => c_ns_per_section(&static_, "calls", iterations),
    };

    let n = NAMES.len();
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); n];
    // Per C loop, its ratios to the three Rust loops, round by round.
    let mut ratios: Vec<[Vec<f64>; 3]> = vec![Default::default(); n];
    for round in 0..rounds {
        let mut measured = vec![0.0; n];
        for step in 0..n {
            let which = (step + round) % n;
            measured[which] = measure(which);
        }
        let line: Vec<String> = measured.iter().map(|v| format!("{v:.3}")).collect();
        eprintln!("round {} (ns, table order): {}", round + 1, line.join(", "));
        for (which, value) in measured.iter().enumerate() {
            ns[which].push(*value);
            if (FIRST_C..FIRST_CALLS).contains(&which) {
                for base in 0..3 {
                    ratios[which][base].push(value / measured[base]);
                }
            }
        }
    }
    let cell = |v: &mut Vec<f64>| {
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        format!("{:.2} ({lo:.2}-{hi:.2})", median(v))
    };
    println!(
        "| read-side critical section, global domain | ns, median of {rounds} | ratio to Rust inlined | ratio to Rust `Rcu::read` with calls | ratio to Rust `ThreadReader::read` with calls |"
    );
    println!("|---|---|---|---|---|");
    for which in 0..n {
        let mut row = format!("| {} | {:.3} |", NAMES[which], median(&mut ns[which]));
        if which < FIRST_C {
            for base in 0..3 {
                row += if base == which { " 1 |" } else { " |" };
            }
        } else if which >= FIRST_CALLS {
            row += " | | |";
        } else {
            for against in ratios[which].iter_mut() {
                row += &format!(" {} |", cell(against));
            }
        }
        println!("{row}");
    }
}
