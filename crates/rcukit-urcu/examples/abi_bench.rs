//! liburcu against rcukit's liburcu ABI, in the same run: `cargo run --release -p rcukit-urcu
//! --example abi_bench [-- ROUNDS MILLISECONDS]` (default 7 rounds of 1000 ms per run). Needs
//! Debian's liburcu-dev (`sudo scripts/install-c-peers.sh`).
//!
//! `examples/c/urcu_shape.c` is shaped like liburcu's `test_urcu`: N readers, M writers, a
//! duration; it counts read-side critical sections and grace periods (`synchronize_rcu()`
//! calls by the writers). It is compiled once per flavor against liburcu's headers without
//! `_LGPL_SOURCE` and linked against Debian's liburcu; the *same binary* then runs on
//! liburcu and, with `LD_LIBRARY_PATH` pointing at the installed `liburcu-rcukit`, on rcukit.
//! Every round runs every (flavor, shape) on both libraries back to back, in an order that
//! alternates between rounds; each pair gives a ratio rcukit/liburcu for reads/s and grace
//! periods/s, and the table shows the medians over the rounds with their spread. The qsbr
//! flavor also runs with a quiescent state after every read (one reader, alone and beside a
//! writer), where the reads/s ratio is mostly what a quiescent state costs. A second table
//! floods `defer_rcu` (the memb program built with `-DDEFER`: writers defer the old value's
//! `free` and never wait): deferred calls per second and the process's peak resident memory.

use rcukit_c_harness as harness;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Flavor {
    Memb,
    Qsbr,
    /// memb, its writers deferring the old value's `free` with `defer_rcu`.
    MembDefer,
}

/// One run's rates.
#[derive(Clone, Copy, Debug, Default)]
struct Rates {
    reads: f64,
    /// Deferred calls for `MembDefer`.
    grace_periods: f64,
    /// The process's peak resident memory.
    max_rss_mib: f64,
}

/// One (flavor, shape) measured on both libraries, round by round.
struct Series {
    flavor: Flavor,
    shape: Shape,
    liburcu: Vec<Rates>,
    rcukit: Vec<Rates>,
}

/// Readers, writers, and how many reads a QSBR reader makes per quiescent state.
#[derive(Clone, Copy)]
struct Shape {
    readers: u32,
    writers: u32,
    qs_every: u32,
}

fn build(flavor: Flavor) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/c/urcu_shape.c");
    let (name, args) = match flavor {
        Flavor::Memb => ("urcu_shape-memb", vec!["-lurcu".to_string()]),
        Flavor::Qsbr => (
            "urcu_shape-qsbr",
            vec!["-DQSBR".to_string(), "-lurcu-qsbr".to_string()],
        ),
        Flavor::MembDefer => (
            "urcu_shape-defer",
            vec!["-DDEFER".to_string(), "-lurcu".to_string()],
        ),
    };
    harness::compile(name, &[source], &args)
}

fn run(program: &Path, shape: Shape, millis: u64, on_rcukit: bool) -> Rates {
    let env: Vec<(&str, String)> = if on_rcukit {
        vec![(
            "LD_LIBRARY_PATH",
            harness::staged().urcu_dir().display().to_string(),
        )]
    } else {
        Vec::new()
    };
    let args = [
        shape.readers.to_string(),
        shape.writers.to_string(),
        millis.to_string(),
        shape.qs_every.to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ran = harness::run(program, &args, &env, Duration::from_secs(60 + millis / 100));
    ran.assert_success("urcu_shape");
    let field = |name: &str| -> f64 {
        ran.stdout
            .split_whitespace()
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in: {}", ran.stdout))
    };
    let seconds = field("seconds");
    Rates {
        reads: field("reads") / seconds,
        grace_periods: field("grace_periods") / seconds,
        max_rss_mib: field("max_rss_kib") / 1024.0,
    }
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

fn ratio_cell(ratios: &[f64]) -> String {
    if ratios.iter().any(|r| !r.is_finite()) {
        return "-".to_string(); // no writer, no grace periods
    }
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    format!("**{:.2}x** ({lo:.2}-{hi:.2})", median(ratios))
}

fn human(rate: f64) -> String {
    if rate >= 1e6 {
        format!("{:.1} M", rate / 1e6)
    } else if rate >= 1e3 {
        format!("{:.1} k", rate / 1e3)
    } else {
        format!("{rate:.0}")
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(7, |a| a.parse().expect("ROUNDS"));
    let millis: u64 = args
        .next()
        .map_or(1000, |a| a.parse().expect("MILLISECONDS"));
    if !harness::has_header("urcu.h") || !harness::has_header("urcu-qsbr.h") {
        eprintln!(
            "abi_bench: liburcu's headers are missing; install Debian's liburcu-dev with \
             `sudo scripts/install-c-peers.sh`"
        );
        std::process::exit(1);
    }
    let programs = [
        (Flavor::Memb, build(Flavor::Memb)),
        (Flavor::Qsbr, build(Flavor::Qsbr)),
        (Flavor::MembDefer, build(Flavor::MembDefer)),
    ];
    let shape = |readers, writers, qs_every| Shape {
        readers,
        writers,
        qs_every,
    };
    let shapes = [shape(1, 1, 1024), shape(2, 1, 1024)];
    // What a quiescent state costs: one after every read, with and without grace periods.
    let per_read = [shape(1, 0, 1), shape(1, 1, 1)];
    // A flood of deferred calls: writers that never wait.
    let floods = [shape(2, 1, 1024), shape(1, 2, 1024), shape(2, 4, 1024)];
    let mut results: Vec<Series> = Vec::new();
    for (flavor, _) in &programs {
        let these = match flavor {
            Flavor::Memb => &shapes[..],
            Flavor::Qsbr => &[shapes, per_read][..].concat(),
            Flavor::MembDefer => &floods[..],
        };
        for &shape in these {
            results.push(Series {
                flavor: *flavor,
                shape,
                liburcu: Vec::new(),
                rcukit: Vec::new(),
            });
        }
    }
    for round in 0..rounds {
        for Series {
            flavor,
            shape,
            liburcu,
            rcukit,
        } in results.iter_mut()
        {
            let program = &programs.iter().find(|(f, _)| f == flavor).expect("built").1;
            let Shape {
                readers,
                writers,
                qs_every,
            } = *shape;
            let rcukit_first = round % 2 == 1;
            let first = run(program, *shape, millis, rcukit_first);
            let second = run(program, *shape, millis, !rcukit_first);
            let (on_liburcu, on_rcukit) = if rcukit_first {
                (second, first)
            } else {
                (first, second)
            };
            eprintln!(
                "round {} {flavor:?} {readers}r+{writers}w qs/{qs_every}: reads/s {} vs {}, grace periods (or deferred calls)/s {} vs {}, peak RSS {:.1} vs {:.1} MiB (liburcu vs rcukit)",
                round + 1,
                human(on_liburcu.reads),
                human(on_rcukit.reads),
                human(on_liburcu.grace_periods),
                human(on_rcukit.grace_periods),
                on_liburcu.max_rss_mib,
                on_rcukit.max_rss_mib
            );
            liburcu.push(on_liburcu);
            rcukit.push(on_rcukit);
        }
    }
    print_grace_periods(results.iter().filter(|s| s.flavor != Flavor::MembDefer));
    println!();
    print_floods(results.iter().filter(|s| s.flavor == Flavor::MembDefer));
}

/// Round-by-round ratios rcukit/liburcu of `figure`.
fn ratios(series: &Series, figure: impl Fn(&Rates) -> f64) -> Vec<f64> {
    let pairs = series.liburcu.iter().zip(&series.rcukit);
    pairs.map(|(l, r)| figure(r) / figure(l)).collect()
}

/// The median over the rounds of `figure`.
fn med(runs: &[Rates], figure: impl Fn(&Rates) -> f64) -> f64 {
    median(&runs.iter().map(figure).collect::<Vec<_>>())
}

fn print_grace_periods<'a>(results: impl Iterator<Item = &'a Series>) {
    println!(
        "| flavor | readers + writers (reads per quiescent state) | reads/s liburcu | reads/s rcukit | reads/s rcukit/liburcu | grace periods/s liburcu | grace periods/s rcukit | grace periods/s rcukit/liburcu |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for series in results {
        let Shape {
            readers,
            writers,
            qs_every,
        } = series.shape;
        let (name, per_qs) = match series.flavor {
            Flavor::Qsbr => ("qsbr", format!(" ({qs_every})")),
            _ => ("memb", String::new()),
        };
        let (l, r) = (&series.liburcu, &series.rcukit);
        println!(
            "| {name} | {readers} + {writers}{per_qs} | {} | {} | {} | {} | {} | {} |",
            human(med(l, |r| r.reads)),
            human(med(r, |r| r.reads)),
            ratio_cell(&ratios(series, |r| r.reads)),
            human(med(l, |r| r.grace_periods)),
            human(med(r, |r| r.grace_periods)),
            ratio_cell(&ratios(series, |r| r.grace_periods))
        );
    }
}

fn print_floods<'a>(results: impl Iterator<Item = &'a Series>) {
    println!(
        "| memb, `defer_rcu` flood: readers + writers | deferred calls/s liburcu | rcukit | rcukit/liburcu | peak RSS liburcu | rcukit | rcukit/liburcu |"
    );
    println!("|---|---|---|---|---|---|---|");
    for series in results {
        let (l, r) = (&series.liburcu, &series.rcukit);
        println!(
            "| {} + {} | {} | {} | {} | {:.1} MiB | {:.1} MiB | {} |",
            series.shape.readers,
            series.shape.writers,
            human(med(l, |r| r.grace_periods)),
            human(med(r, |r| r.grace_periods)),
            ratio_cell(&ratios(series, |r| r.grace_periods)),
            med(l, |r| r.max_rss_mib),
            med(r, |r| r.max_rss_mib),
            ratio_cell(&ratios(series, |r| r.max_rss_mib))
        );
    }
}
