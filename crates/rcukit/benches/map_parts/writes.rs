//! The one-thread write part: inserts into an empty map, then removes of every key, per map,
//! in interleaved rounds.

use crate::maps::{
    splitmix64, value_of, with_row, BenchMap, FLAT, PAPAYA, PL, RCU, ROWS, STD, WRITE_ROWS,
};
use crate::stats::{mops, ratio, show_ratio};
use crate::Config;
use std::time::Instant;

/// (inserts/s, removes/s) of one fresh map of type `M` with `keys`.
fn one<M: BenchMap>(keys: &[u64]) -> (f64, f64) {
    let map = M::build();
    let start = Instant::now();
    for &k in keys {
        map.insert(k, value_of(k));
    }
    let inserts = keys.len() as f64 / start.elapsed().as_secs_f64();
    let start = Instant::now();
    for &k in keys {
        map.remove(k);
    }
    let removes = keys.len() as f64 / start.elapsed().as_secs_f64();
    map.settle();
    (inserts, removes)
}

/// The write part at `n` keys.
pub(crate) fn run(cfg: &Config, n: usize) {
    let keys: Vec<u64> = (0..n as u64).map(|i| splitmix64((1 << 60) + i)).collect();
    let mut ins = vec![Vec::new(); ROWS.len()];
    let mut rem = vec![Vec::new(); ROWS.len()];
    let started = Instant::now();
    for round in 0..cfg.rounds {
        for i in 0..WRITE_ROWS.len() {
            let row = WRITE_ROWS[(i + round) % WRITE_ROWS.len()];
            let (a, b) = with_row!(row, M => one::<M>(&keys));
            if cfg.verbose {
                eprintln!(
                    "{n} keys, round {round}, {}: {:.2} M inserts/s, {:.2} M removes/s",
                    ROWS[row],
                    a / 1e6,
                    b / 1e6
                );
            }
            ins[row].push(a);
            rem[row].push(b);
        }
        eprintln!(
            "writes, {n} keys: round {}/{} done ({:.0} s)",
            round + 1,
            cfg.rounds,
            started.elapsed().as_secs_f64()
        );
    }
    println!("### One thread: {n} inserts into an empty map, then {n} removes\n");
    println!(
        "| map | M inserts/s | M removes/s | RcuHashMap ÷ it, inserts | RcuHashMap ÷ it, removes \
         | RcuFlatMap ÷ it, inserts | RcuFlatMap ÷ it, removes |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for &row in &WRITE_ROWS {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            ROWS[row],
            mops(&ins[row]),
            mops(&rem[row]),
            show_ratio(ratio(&ins[RCU], &ins[row])),
            show_ratio(ratio(&rem[RCU], &rem[row])),
            show_ratio(ratio(&ins[FLAT], &ins[row])),
            show_ratio(ratio(&rem[FLAT], &rem[row]))
        );
    }
    println!();
    for (top, top_name) in [(RCU, "RcuHashMap"), (FLAT, "RcuFlatMap")] {
        for (name, row, goal) in [
            ("papaya", PAPAYA, 1.0),
            ("std RwLock<hashbrown>", STD, 0.5),
            ("parking_lot RwLock<hashbrown>", PL, 0.5),
        ] {
            for (what, v) in [("inserts", &ins), ("removes", &rem)] {
                let r = ratio(&v[top], &v[row]);
                println!(
                    "* {what}, {top_name} ÷ {name}: {} (goal ≥ {goal}x: {})",
                    show_ratio(r),
                    if r.0 >= goal { "met" } else { "**not met**" }
                );
            }
        }
    }
    println!();
}
