//! The memory part: each map in a fresh process (the bench re-runs itself with
//! `--memory-child ROW N`), its resident set measured empty, with `N` entries, after removing
//! them all, and [`LATER`] after that (what a map gives back once its deferred work ran: an
//! allocator trim held back by `RcuHashMap`'s once-a-second rule runs when the second is up).

use crate::maps::{splitmix64, value_of, with_row, BenchMap, PAPAYA, RCU, ROWS, WRITE_ROWS};
use crate::stats::{median, min_max};
use crate::Config;
use std::process::Command;
use std::time::Duration;

/// How long after removing all entries the last resident set is measured.
const LATER: Duration = Duration::from_millis(1500);

/// The resident set of this process, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Bytes per entry, and KiB above the empty map after removing all and [`LATER`] after that.
fn child_of<M: BenchMap>(n: usize) -> (f64, f64, f64) {
    let keys: Vec<u64> = (0..n as u64).map(|i| splitmix64((1 << 61) + i)).collect();
    let map = M::build();
    let empty = rss();
    for &k in &keys {
        map.insert(k, value_of(k));
    }
    map.settle();
    let full = rss();
    for &k in &keys {
        map.remove(k);
    }
    map.settle();
    let after = rss();
    std::thread::sleep(LATER);
    let later = rss();
    drop(map);
    (
        (full as f64 - empty as f64) / n as f64,
        (after as f64 - empty as f64) / 1024.0,
        (later as f64 - empty as f64) / 1024.0,
    )
}

/// The child: measure row `row` with `n` entries and print one line for the parent.
pub(crate) fn child(row: usize, n: usize) {
    let (per_entry, after_kib, later_kib) = with_row!(row, M => child_of::<M>(n));
    println!("MEMORY {per_entry} {after_kib} {later_kib}");
}

fn measure(row: usize, n: usize) -> Option<(f64, f64, f64)> {
    let exe = std::env::current_exe().ok()?;
    let out = Command::new(exe)
        .args(["--memory-child", &row.to_string(), &n.to_string()])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("MEMORY "))?;
    let mut it = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse::<f64>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

/// The memory part at `n` entries.
pub(crate) fn run(cfg: &Config, n: usize) {
    let rounds = cfg.rounds.min(3);
    let mut per = vec![Vec::new(); ROWS.len()];
    let mut after = vec![Vec::new(); ROWS.len()];
    let mut later = vec![Vec::new(); ROWS.len()];
    for round in 0..rounds {
        for i in 0..WRITE_ROWS.len() {
            let row = WRITE_ROWS[(i + round) % WRITE_ROWS.len()];
            if let Some((p, a, l)) = measure(row, n) {
                per[row].push(p);
                after[row].push(a);
                later[row].push(l);
            }
        }
    }
    println!("### Memory: {n} u64 → u64 entries, one fresh process per map and round ({rounds} rounds)\n");
    println!(
        "| map | bytes per entry (resident set growth) | resident set after removing all, KiB \
         above the empty map | the same {:.1} s later |",
        LATER.as_secs_f64()
    );
    println!("|---|---:|---:|---:|");
    for &row in &WRITE_ROWS {
        let (lo, hi) = min_max(&per[row]);
        let (alo, ahi) = min_max(&after[row]);
        let (llo, lhi) = min_max(&later[row]);
        println!(
            "| {} | {:.1} ({lo:.1}-{hi:.1}) | {:.0} ({alo:.0}-{ahi:.0}) | {:.0} ({llo:.0}-{lhi:.0}) |",
            ROWS[row],
            median(&per[row]),
            median(&after[row]),
            median(&later[row])
        );
    }
    let (rcu, papaya) = (median(&per[RCU]), median(&per[PAPAYA]));
    println!(
        "\n* bytes per entry, RcuHashMap {rcu:.1} against papaya {papaya:.1} (goal ≤ papaya: {})",
        if rcu <= papaya { "met" } else { "**not met**" }
    );
    // "Near the empty map's": what stays is less than a quarter of what the entries took (the
    // bound `tests/map_memory.rs` checks; glibc kept all of it before the map trimmed).
    let (stays, took) = (median(&after[RCU]), rcu * n as f64 / 1024.0);
    let stays_later = median(&later[RCU]);
    println!(
        "* resident set after removing all, RcuHashMap {stays:.0} KiB above the empty map, {:.1}% \
         of the {took:.0} KiB the entries took, and {stays_later:.0} KiB ({:.1}%) {:.1} s later \
         (goal: near the empty map's, under 25%: {})\n",
        100.0 * stays / took,
        100.0 * stays_later / took,
        LATER.as_secs_f64(),
        if stays < took / 4.0 {
            "met"
        } else {
            "**not met**"
        }
    );
}
