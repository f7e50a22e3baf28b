//! The cost part (only when named in `RCUKIT_BENCH_PARTS`): what one thread's writes cost
//! with the table in the cache, and what shrinking and trimming add to emptying a map.
//!
//! * **Cached writes:** `CACHED_KEYS` keys in a map made with room for them, inserted and
//!   removed again until about `CACHED_OPS` operations are done (`RcuHashMap` through one
//!   `pin()` per operation, papaya through one `pin()`, hashbrown under parking_lot's write
//!   lock, `RcuFlatMap` as it is). No cache miss to pay: what is left is each map's own work
//!   per operation (for `RcuHashMap`, the node's allocation, and a removed node's retire and
//!   free).
//! * **Emptying:** the size's keys inserted into an empty map, then every one removed (timed),
//!   with `RcuHashMap` built four ways (the defaults; never shrinking, `min_load_factor(0.0)`;
//!   no allocator trims, `trim_allocator(false)`; neither) beside papaya, which never
//!   shrinks.
//!
//! Rows alternate within each round; medians over the rounds, per-round min-max.

use crate::maps::{hasher, splitmix64, value_of, Hasher};
use crate::stats::{median, min_max, ratio, show_ratio};
use crate::Config;
use rcukit::{RcuFlatMap, RcuHashMap};
use std::time::Instant;

/// Keys of the cached-writes measurement: 256 buckets of `RcuHashMap`, 16 KiB of lines.
const CACHED_KEYS: u64 = 1_024;
/// Operations (inserts and removes) per map and round of the cached-writes measurement.
const CACHED_OPS: u64 = 8_000_000;

/// ns per insert and per remove of `keys`, inserted and removed `cycles` times by `insert`
/// and `remove`.
fn cycles(
    keys: &[u64],
    cycles: u64,
    mut insert: impl FnMut(u64),
    mut remove: impl FnMut(u64),
) -> (f64, f64) {
    let (mut ins, mut rem) = (0.0, 0.0);
    for _ in 0..cycles {
        let start = Instant::now();
        for &k in keys {
            insert(k);
        }
        ins += start.elapsed().as_secs_f64();
        let start = Instant::now();
        for &k in keys {
            remove(k);
        }
        rem += start.elapsed().as_secs_f64();
    }
    let ops = (keys.len() as u64 * cycles) as f64;
    (ins * 1e9 / ops, rem * 1e9 / ops)
}

/// The cached-writes rows.
const CACHED_ROWS: [&str; 4] = [
    "RcuHashMap",
    "papaya",
    "parking_lot RwLock<hashbrown>",
    "RcuFlatMap",
];

/// One row's (ns per insert, ns per remove).
fn cached_row(row: usize, keys: &[u64], n: u64) -> (f64, f64) {
    let cap = keys.len();
    match row {
        0 => {
            let map: RcuHashMap<u64, u64, Hasher> =
                RcuHashMap::with_capacity_and_hasher(cap, hasher());
            let r = cycles(
                keys,
                n,
                |k| {
                    map.pin().insert(k, value_of(k));
                },
                |k| {
                    map.pin().remove(&k);
                },
            );
            map.domain().barrier();
            r
        }
        1 => {
            let map = papaya::HashMap::with_capacity_and_hasher(cap, hasher());
            cycles(
                keys,
                n,
                |k| {
                    map.pin().insert(k, value_of(k));
                },
                |k| {
                    map.pin().remove(&k);
                },
            )
        }
        2 => {
            let map = parking_lot::RwLock::new(hashbrown::HashMap::with_capacity_and_hasher(
                cap,
                hasher(),
            ));
            cycles(
                keys,
                n,
                |k| {
                    map.write().insert(k, value_of(k));
                },
                |k| {
                    map.write().remove(&k);
                },
            )
        }
        _ => {
            let map: RcuFlatMap<u64, u64, Hasher> =
                RcuFlatMap::with_capacity_and_hasher(cap, hasher());
            cycles(
                keys,
                n,
                |k| {
                    map.insert(k, value_of(k));
                },
                |k| {
                    map.remove(&k);
                },
            )
        }
    }
}

/// `median (min-max)` of nanoseconds.
fn ns(v: &[f64]) -> String {
    let (lo, hi) = min_max(v);
    format!("{:.1} ({lo:.1}-{hi:.1})", median(v))
}

/// The cached-writes measurement (once, whatever the sizes).
fn cached(cfg: &Config) {
    let keys: Vec<u64> = (0..CACHED_KEYS)
        .map(|i| splitmix64((2 << 60) + i))
        .collect();
    let n = if cfg.quick {
        20
    } else {
        CACHED_OPS / (2 * CACHED_KEYS)
    };
    let (mut ins, mut rem) = (vec![Vec::new(); 4], vec![Vec::new(); 4]);
    for round in 0..cfg.rounds {
        for i in 0..CACHED_ROWS.len() {
            let row = (i + round) % CACHED_ROWS.len();
            let (a, b) = cached_row(row, &keys, n);
            ins[row].push(a);
            rem[row].push(b);
        }
    }
    println!("### One thread, {CACHED_KEYS} keys in a map made with room for them\n");
    println!(
        "| map | ns an insert | ns a remove | RcuHashMap ÷ it, inserts/s \
         | RcuHashMap ÷ it, removes/s |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (row, name) in CACHED_ROWS.iter().enumerate() {
        // Rates are inverse times: RcuHashMap's rate ÷ the row's is the row's time ÷ ours.
        println!(
            "| {name} | {} | {} | {} | {} |",
            ns(&ins[row]),
            ns(&rem[row]),
            show_ratio(ratio(&ins[row], &ins[0])),
            show_ratio(ratio(&rem[row], &rem[0]))
        );
    }
    println!();
}

/// The emptying rows: `RcuHashMap` with (min load factor, allocator trims), then papaya.
const EMPTYING_ROWS: [(&str, f32, bool); 4] = [
    ("RcuHashMap, the defaults", 0.25, true),
    ("RcuHashMap, never shrinking", 0.0, true),
    ("RcuHashMap, no trims", 0.25, false),
    ("RcuHashMap, neither", 0.0, false),
];

/// ns per remove of emptying a map of `keys`: row `row` of `EMPTYING_ROWS`, or papaya after
/// them.
fn emptying_row(row: usize, keys: &[u64]) -> f64 {
    let time = |remove: &mut dyn FnMut(u64)| {
        let start = Instant::now();
        for &k in keys {
            remove(k);
        }
        start.elapsed().as_secs_f64() * 1e9 / keys.len() as f64
    };
    if let Some(&(_, min_load, trim)) = EMPTYING_ROWS.get(row) {
        let map: RcuHashMap<u64, u64, Hasher> = RcuHashMap::builder()
            .hasher(hasher())
            .min_load_factor(min_load)
            .trim_allocator(trim)
            .build()
            .expect("valid settings");
        for &k in keys {
            map.pin().insert(k, value_of(k));
        }
        let r = time(&mut |k| {
            map.pin().remove(&k);
        });
        map.domain().barrier();
        r
    } else {
        let map = papaya::HashMap::with_hasher(hasher());
        for &k in keys {
            map.pin().insert(k, value_of(k));
        }
        time(&mut |k| {
            map.pin().remove(&k);
        })
    }
}

/// The emptying measurement at `n` keys.
fn emptying(cfg: &Config, n: usize) {
    let keys: Vec<u64> = (0..n as u64).map(|i| splitmix64((1 << 60) + i)).collect();
    let rows = EMPTYING_ROWS.len() + 1;
    let mut rem = vec![Vec::new(); rows];
    for round in 0..cfg.rounds {
        for i in 0..rows {
            let row = (i + round) % rows;
            rem[row].push(emptying_row(row, &keys));
        }
    }
    println!("### One thread empties a map of {n} entries, built four ways, beside papaya\n");
    println!("| map | ns a remove | removes/s ÷ papaya's |\n|---|---:|---:|");
    let papaya = &rem[EMPTYING_ROWS.len()];
    for (row, (name, _, _)) in EMPTYING_ROWS.iter().enumerate() {
        println!(
            "| {name} | {} | {} |",
            ns(&rem[row]),
            show_ratio(ratio(papaya, &rem[row]))
        );
    }
    println!("| papaya | {} | 1.00x |\n", ns(papaya));
}

/// The cost part: the cached writes once (at the first size), the emptying at every size.
pub(crate) fn run(cfg: &Config, n: usize) {
    if cfg.sizes.first() == Some(&n) {
        cached(cfg);
    }
    emptying(cfg, n);
}
