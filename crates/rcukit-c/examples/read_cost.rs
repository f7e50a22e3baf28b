//! The cost of a read-side critical section through the C API against the Rust API's, measured
//! in the same run: `cargo run --release -p rcukit-c --example read_cost [-- ROUNDS ITERATIONS]`
//! (default 9 rounds of 100,000,000 sections).
//!
//! The C side is `examples/c/read_loop.c` (one call to `rcukit_read_lock`, one to
//! `rcukit_read_unlock`, per section, on the global domain), compiled by the system C compiler
//! against the installed header and linked against `librcukit.so` and, separately,
//! `librcukit.a`. The Rust side is the same loop in this process, twice: with
//! `Rcu::global().read()` inlined, as a Rust program gets it, and with the lock and the unlock
//! each behind one call that is not inlined, the same call boundary as C's. The four run in interleaved rounds (the order rotates every round); each round gives a
//! ratio C/Rust, and the table shows the medians with the spread over rounds. Every loop is
//! timed in its thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), so that time spent descheduled
//! on a shared machine is not counted.

use rcukit::Rcu;
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
fn lock_called(rcu: &'static Rcu) -> rcukit::Guard<'static> {
    rcu.read()
}

#[inline(never)]
fn unlock_called(guard: rcukit::Guard<'static>) {
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

fn c_ns_per_section(program: &Path, iterations: u64) -> f64 {
    let ran = harness::run(
        program,
        &[&iterations.to_string()],
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

    const NAMES: [&str; 4] = [
        "Rust, `Rcu::global().read()` inlined",
        "Rust, one call (not inlined) to lock and one to unlock",
        "C, `librcukit.so`",
        "C, `librcukit.a`",
    ];
    let mut ns: [Vec<f64>; 4] = Default::default();
    // Ratios of each round: C shared and C static against the inlined Rust loop, then against
    // the Rust loop with calls.
    let mut ratios: [Vec<f64>; 4] = Default::default();
    for round in 0..rounds {
        let mut measured = [0.0; 4];
        for step in 0..4 {
            let which = (step + round) % 4;
            measured[which] = match which {
                0 => rust_ns_per_section(iterations),
                1 => rust_called_ns_per_section(iterations),
                2 => c_ns_per_section(&shared, iterations),
                _ => c_ns_per_section(&static_, iterations),
            };
        }
        eprintln!(
            "round {}: Rust {:.3} ns, Rust with calls {:.3} ns, C shared {:.3} ns, C static {:.3} ns",
            round + 1,
            measured[0],
            measured[1],
            measured[2],
            measured[3]
        );
        for (all, value) in ns.iter_mut().zip(measured) {
            all.push(value);
        }
        ratios[0].push(measured[2] / measured[0]);
        ratios[1].push(measured[3] / measured[0]);
        ratios[2].push(measured[2] / measured[1]);
        ratios[3].push(measured[3] / measured[1]);
    }
    let spread = |v: &[f64]| {
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        format!("{lo:.2}-{hi:.2}")
    };
    let cell = |v: &mut Vec<f64>| {
        let range = spread(v);
        format!("{:.2} ({range})", median(v))
    };
    println!(
        "| read-side critical section, global domain | ns, median of {rounds} | ratio to Rust inlined | ratio to Rust with calls |"
    );
    println!("|---|---|---|---|");
    println!("| {} | {:.3} | 1 | |", NAMES[0], median(&mut ns[0]));
    println!("| {} | {:.3} | | 1 |", NAMES[1], median(&mut ns[1]));
    let (first, rest) = ratios.split_at_mut(2);
    println!(
        "| {} | {:.3} | {} | {} |",
        NAMES[2],
        median(&mut ns[2]),
        cell(&mut first[0]),
        cell(&mut rest[0])
    );
    println!(
        "| {} | {:.3} | {} | {} |",
        NAMES[3],
        median(&mut ns[3]),
        cell(&mut first[1]),
        cell(&mut rest[1])
    );
}
