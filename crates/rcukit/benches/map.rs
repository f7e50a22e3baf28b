//! `RcuHashMap` beside the concurrent maps people use for read-mostly work, in one process
//! (the memory part in one fresh process per map).
//!
//! Run with `cargo bench -p rcukit --bench map` (about 15 minutes on 2 cores).
//! `RCUKIT_BENCH_QUICK=1` (or `-- --quick`) gives a smoke run; `RCUKIT_BENCH_PARTS` picks parts
//! (`lookups,writes,memory`, the default all three, and `layouts`, `costs` and `owned`),
//! `RCUKIT_BENCH_SIZES` the key counts (default `100000,1000000`), `RCUKIT_BENCH_ROUNDS` and
//! `RCUKIT_BENCH_MS` the number of rounds and the length of one lookup measurement;
//! `RCUKIT_BENCH_READERS` the reader thread counts of the lookup part (default `1,2`);
//! `RCUKIT_BENCH_VERBOSE=1` prints every measurement to stderr as it is taken. Built as a test (`cargo test --benches`, no
//! `--bench` argument) it runs as a tiny smoke run.
//!
//! **Maps** (one row each, every row in every round, the order rotating from round to round):
//! * `RcuHashMap` (global domain), a guard (`map.domain().read()`) per lookup, and one guard
//!   per 64 lookups;
//! * `std::sync::RwLock<hashbrown::HashMap>` and `parking_lot::RwLock<hashbrown::HashMap>`,
//!   a read lock per lookup;
//! * `dashmap::DashMap` (6.x), `get` per lookup (a shard read lock);
//! * `papaya::HashMap` (0.2.x), `pin()` per lookup; `flurry::HashMap` (0.5.x), `pin()` per
//!   lookup;
//! * `scc::HashMap` (2.x, `read`: a shared bucket lock) and `scc::HashIndex` (`peek_with`,
//!   lock-free);
//! * evmap (10.x, left-right): each reader thread reads through a handle of its own; the one
//!   writer sits behind a mutex and publishes (`refresh`) after every write;
//! * `RcuFlatMap` (global domain, entries inline), `get_copied` per lookup (which takes and
//!   drops a guard); its writes take no handle;
//! * `RcuFlatMap` on a QSBR domain: each reader thread registers once and reads with no code
//!   around a lookup, announcing a quiescent state per 256 lookups (liburcu's QSBR harness
//!   announces one per so many reads too); lookups only (its writes are the row above's).
//!
//! The tables give ratios with `RcuHashMap`, `RcuFlatMap` and `RcuFlatMap` on a QSBR domain on
//! top.
//!
//! Every map uses the same hasher, `foldhash::fast::FixedState::with_seed(SEED)`, with `u64`
//! keys and `u64` values (`splitmix64` keys, spread over the whole `u64` range).
//!
//! **Lookups** (`map_parts/lookups.rs`): readers look up random present keys (a per-thread
//! xorshift64 picks an index) and check every value (a panic otherwise). Scenarios, each at 1
//! and 2 reader threads (or the counts `RCUKIT_BENCH_READERS` names): **(a)** alone; **(b)**
//! beside a writer running flat out a 90/10 mix of its own (9 verified lookups, then 1 write:
//! inserting a fresh churn key or removing the one inserted 1,024 writes earlier); **(b')**
//! the same writer paced at 100,000 writes/s; **(c)** beside a writer that inserts four times
//! the key count of extra keys and removes them again, then calls `shrink_to_fit` where the
//! map has one, on a map built afresh for each measurement. (b') and (c) run at sizes up to
//! 100,000 keys only. Each measurement runs for `RCUKIT_BENCH_MS` (default 400 ms); each
//! reader divides its count by its own time. Beside a writer ((b) and (b')), a second ratio
//! table divides each reader's count by its own CPU time (`CLOCK_THREAD_CPUTIME_ID`) instead:
//! with more busy threads than cores, a writer that waits for its readers leaves them more of
//! the CPU, and the first table counts that as their speed. The writer's ratio column is
//! taken beside the most readers measured.
//!
//! **Writes** (`map_parts/writes.rs`): one thread inserts every key into an empty map (no
//! capacity given), then removes every key; inserts/s and removes/s per map (evmap, a
//! single-writer map that publishes in batches, and the guard-per-64 row, the same map as the
//! first, are left out).
//!
//! **Memory** (`map_parts/memory.rs`): per map and round, a fresh process inserts the entries
//! into an empty map, and reads its resident set (`/proc/self/statm`) before, with all of them
//! (after deferred frees ran: `barrier()` for `RcuHashMap`), after removing them all, and
//! 1.5 s after that (an allocator trim that `RcuHashMap` held back to once a second has run
//! by then).
//!
//! **Layouts** (`map_parts/layouts.rs`, only when named in `RCUKIT_BENCH_PARTS`): one reader's
//! lookups in `RcuHashMap` beside hashbrown read under a guard (the most an RCU map with
//! hashbrown's layout could reach), beside a probe of the map's lines with the entries in
//! place of the node pointers, and `RcuFlatMap` with a guard per lookup and with one guard for
//! the run beside hashbrown with neither guard nor lock (what the tables cost alone), and
//! `RcuFlatMap` on a QSBR domain.
//!
//! **Costs** (`map_parts/costs.rs`, only when named in `RCUKIT_BENCH_PARTS`): one thread's
//! inserts and removes of 1,024 keys in maps made with room for them (no cache miss to pay:
//! each map's own work per operation), and one thread emptying a map of each size with
//! `RcuHashMap` built with and without shrinking and allocator trims, beside papaya.
//!
//! **Owned values** (`map_parts/owned.rs`, only when named in `RCUKIT_BENCH_PARTS`): `u64`
//! keys and `String` values (24 bytes on the heap), one thread filling an empty map, looking
//! up random present keys and emptying it, for `RcuFlatMap` (which clones values at each
//! rebuild), `RcuHashMap`, papaya, `scc::HashIndex` and the two locked hashbrowns.
//!
//! The tables give the median over the rounds and the min-max; the ratios are ratios of
//! medians, with the min-max of the per-round ratios. On a 2-core machine a busy writer beside
//! 2 readers makes 3 busy threads on 2 cores.

#[path = "map_parts/costs.rs"]
mod costs;
#[path = "map_parts/layouts.rs"]
mod layouts;
#[path = "map_parts/lookups.rs"]
mod lookups;
#[path = "map_parts/maps.rs"]
mod maps;
#[path = "map_parts/memory.rs"]
mod memory;
#[path = "map_parts/owned.rs"]
mod owned;
#[path = "map_parts/stats.rs"]
mod stats;
#[path = "map_parts/writes.rs"]
mod writes;

use std::time::Duration;

/// Default number of interleaved rounds.
const ROUNDS: usize = 5;

pub(crate) struct Config {
    /// A smoke run (`RCUKIT_BENCH_QUICK`, `--quick` or test mode): figures mean little.
    quick: bool,
    verbose: bool,
    rounds: usize,
    run_for: Duration,
    sizes: Vec<usize>,
    /// Reader thread counts of the lookup part (`RCUKIT_BENCH_READERS`, default `1,2`).
    readers: Vec<usize>,
    parts: Vec<String>,
}

fn config() -> Config {
    let args: Vec<String> = std::env::args().collect();
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    // `cargo bench` passes `--bench`; a test-mode run (`cargo test --benches`) does not.
    let test_mode = !args.iter().any(|a| a == "--bench");
    let quick = test_mode
        || args.iter().any(|a| a == "--quick")
        || env("RCUKIT_BENCH_QUICK").is_some_and(|v| v != "0");
    let rounds = env("RCUKIT_BENCH_ROUNDS")
        .map(|v| v.parse().expect("RCUKIT_BENCH_ROUNDS: a number"))
        .unwrap_or(if quick { 1 } else { ROUNDS });
    let ms = env("RCUKIT_BENCH_MS")
        .map(|v| v.parse().expect("RCUKIT_BENCH_MS: milliseconds"))
        .unwrap_or(if test_mode {
            10
        } else if quick {
            100
        } else {
            400
        });
    let sizes = env("RCUKIT_BENCH_SIZES")
        .map(|v| {
            v.split(',')
                .map(|s| s.trim().parse().expect("RCUKIT_BENCH_SIZES: numbers"))
                .collect()
        })
        .unwrap_or(if test_mode {
            vec![2_000]
        } else if quick {
            vec![100_000]
        } else {
            vec![100_000, 1_000_000]
        });
    let readers: Vec<usize> = env("RCUKIT_BENCH_READERS")
        .map(|v| {
            v.split(',')
                .map(|s| match s.trim().parse() {
                    Ok(n) if n > 0 => n,
                    _ => panic!("RCUKIT_BENCH_READERS: thread counts of at least 1, got {s:?}"),
                })
                .collect()
        })
        .unwrap_or_else(|| vec![1, 2]);
    let parts = env("RCUKIT_BENCH_PARTS")
        .unwrap_or_else(|| "lookups,writes,memory".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    Config {
        quick,
        verbose: env("RCUKIT_BENCH_VERBOSE").is_some_and(|v| v != "0"),
        rounds: rounds.max(1),
        run_for: Duration::from_millis(ms),
        sizes,
        readers,
        parts,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--memory-child") {
        let row = args[i + 1].parse().expect("row");
        let n = args[i + 2].parse().expect("entries");
        memory::child(row, n);
        return;
    }
    let cfg = config();
    println!(
        "# RcuHashMap beside its peers\n\nu64 -> u64, foldhash::fast::FixedState (seed {:#x}) \
         for every map; {} rounds, {} ms per lookup measurement; sizes {:?}\n",
        maps::SEED,
        cfg.rounds,
        cfg.run_for.as_millis(),
        cfg.sizes
    );
    if cfg.quick {
        println!("(a smoke run: too short for figures to mean much)\n");
    }
    for &n in &cfg.sizes {
        for part in &cfg.parts {
            match part.as_str() {
                "lookups" => lookups::run(&cfg, n),
                "writes" => writes::run(&cfg, n),
                "memory" => memory::run(&cfg, n),
                "layouts" => layouts::run(&cfg, n),
                "costs" => costs::run(&cfg, n),
                "owned" => owned::run(&cfg, n),
                other => panic!("RCUKIT_BENCH_PARTS: unknown part {other:?}"),
            }
        }
    }
}
