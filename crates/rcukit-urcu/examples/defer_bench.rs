//! A flood of `defer_rcu` on liburcu and on rcukit's liburcu ABI, in the same run: `cargo run
//! --release -p rcukit-urcu --example defer_bench [-- ROUNDS MILLISECONDS]` (default 7 rounds
//! of 1000 ms per run). Needs Debian's liburcu-dev (`sudo scripts/install-c-peers.sh`).
//!
//! `examples/c/defer_flood.c`: writers publish a new object and defer the old one's `free` as
//! fast as they can, beside readers. It is compiled once against liburcu's headers (memb
//! flavor, without `_LGPL_SOURCE`); the *same binary* runs on liburcu and, with
//! `LD_LIBRARY_PATH` on the installed `liburcu-rcukit`, on rcukit, in an order that alternates
//! between rounds. The table shows medians over the rounds of deferred calls per second and
//! of the process's peak resident memory, with the round-by-round ratios (median and spread).

use rcukit_c_harness as harness;
use std::path::Path;
use std::time::Duration;

/// One run's figures.
#[derive(Clone, Copy, Debug)]
struct Run {
    defers: f64,
    max_rss_mib: f64,
}

fn run(program: &Path, shape: (u32, u32), millis: u64, on_rcukit: bool) -> Run {
    let env: Vec<(&str, String)> = if on_rcukit {
        let dir = harness::staged().urcu_dir().display().to_string();
        vec![("LD_LIBRARY_PATH", dir)]
    } else {
        Vec::new()
    };
    let args = [shape.0.to_string(), shape.1.to_string(), millis.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ran = harness::run(program, &args, &env, Duration::from_secs(60 + millis / 100));
    ran.assert_success("defer_flood");
    let field = |name: &str| -> f64 {
        ran.stdout
            .split_whitespace()
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in: {}", ran.stdout))
    };
    Run {
        defers: field("defers") / field("seconds"),
        max_rss_mib: field("max_rss_kib") / 1024.0,
    }
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut sorted: Vec<f64> = values.collect();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

fn ratio_cell(ratios: &[f64]) -> String {
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    format!("{:.2}x ({lo:.2}-{hi:.2})", median(ratios.iter().copied()))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(7, |a| a.parse().expect("ROUNDS"));
    let millis: u64 = args
        .next()
        .map_or(1000, |a| a.parse().expect("MILLISECONDS"));
    if !harness::has_header("urcu.h") || !harness::has_header("urcu-defer.h") {
        eprintln!(
            "defer_bench: liburcu's headers are missing; install Debian's liburcu-dev with \
             `sudo scripts/install-c-peers.sh`"
        );
        std::process::exit(1);
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/c/defer_flood.c");
    let program = harness::compile("defer_flood", &[source], &["-lurcu".to_string()]);
    let shapes = [(2u32, 1u32), (1, 2), (2, 4)];
    let mut runs: Vec<(Vec<Run>, Vec<Run>)> = vec![(Vec::new(), Vec::new()); shapes.len()];
    for round in 0..rounds {
        for (shape, (liburcu, rcukit)) in shapes.iter().zip(&mut runs) {
            let rcukit_first = round % 2 == 1;
            let first = run(&program, *shape, millis, rcukit_first);
            let second = run(&program, *shape, millis, !rcukit_first);
            let (l, r) = if rcukit_first {
                (second, first)
            } else {
                (first, second)
            };
            eprintln!(
                "round {} {}r+{}w: defers/s {:.1} M vs {:.1} M, peak RSS {:.1} vs {:.1} MiB \
                 (liburcu vs rcukit)",
                round + 1,
                shape.0,
                shape.1,
                l.defers / 1e6,
                r.defers / 1e6,
                l.max_rss_mib,
                r.max_rss_mib
            );
            liburcu.push(l);
            rcukit.push(r);
        }
    }
    println!(
        "| readers + writers | defers/s liburcu | defers/s rcukit | rcukit/liburcu | peak RSS liburcu | peak RSS rcukit | rcukit/liburcu |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (shape, (liburcu, rcukit)) in shapes.iter().zip(&runs) {
        let defers: Vec<f64> = liburcu
            .iter()
            .zip(rcukit)
            .map(|(l, r)| r.defers / l.defers)
            .collect();
        let rss: Vec<f64> = liburcu
            .iter()
            .zip(rcukit)
            .map(|(l, r)| r.max_rss_mib / l.max_rss_mib)
            .collect();
        println!(
            "| {} + {} | {:.1} M | {:.1} M | {} | {:.1} MiB | {:.1} MiB | {} |",
            shape.0,
            shape.1,
            median(liburcu.iter().map(|r| r.defers)) / 1e6,
            median(rcukit.iter().map(|r| r.defers)) / 1e6,
            ratio_cell(&defers),
            median(liburcu.iter().map(|r| r.max_rss_mib)),
            median(rcukit.iter().map(|r| r.max_rss_mib)),
            ratio_cell(&rss)
        );
    }
}
