//! The owned-values part (only when named in `RCUKIT_BENCH_PARTS`): `u64` keys and `String`
//! values (a 24-byte text on the heap each), where a map pays for what its values own:
//! `RcuFlatMap` clones every live value at each rebuild (its removes here return the value
//! borrowed for a guard, `remove_borrowed`, not a clone), `RcuHashMap`
//! allocates a node per entry and never moves a value, the locked hashbrowns move them, and
//! `scc::HashIndex` clones them as `RcuFlatMap` does.
//!
//! Per map and round: one thread inserts the size's keys into an empty map (no capacity
//! given), looks up random present keys for `RCUKIT_BENCH_MS` (each lookup reads its value's
//! length and first byte: `RcuHashMap` and `RcuFlatMap` under a guard per lookup, papaya under
//! a `pin()`, `scc::HashIndex` through `peek_with`, the hashbrowns under their read locks),
//! then removes every key. Rows rotate within each round; medians over the rounds, per-round
//! min-max; ratios are medians of per-round ratios.

use crate::maps::{hasher, next_key, splitmix64, Hasher};
use crate::stats::{mops, ratio, show_ratio};
use crate::Config;
use rcukit::{RcuFlatMap, RcuHashMap};
use std::time::{Duration, Instant};

/// A key's value: 24 bytes of text, on the heap.
fn text_of(key: u64) -> String {
    format!("{key:016x}-value!!")
}

/// The check a lookup makes of what it found: the text's length and first byte.
#[inline(always)]
fn seen(key: u64, v: Option<(usize, u8)>) -> u64 {
    match v {
        Some((24, b)) => b as u64,
        _ => panic!("lookup of {key:#x} gave {v:?}"),
    }
}

/// What the part needs of a map with `String` values.
trait OwnedMap: Sync {
    fn build() -> Self;
    fn insert(&self, key: u64, value: String);
    fn remove(&self, key: u64);
    /// The value's length and first byte.
    fn peek(&self, key: u64) -> Option<(usize, u8)>;
    fn settle(&self) {}
}

fn peek_str(s: &str) -> (usize, u8) {
    (s.len(), s.as_bytes()[0])
}

impl OwnedMap for RcuFlatMap<u64, String, Hasher> {
    fn build() -> Self {
        RcuFlatMap::with_hasher(hasher())
    }
    fn insert(&self, key: u64, value: String) {
        RcuFlatMap::insert(self, key, value);
    }
    fn remove(&self, key: u64) {
        // The removed value borrowed for a guard, as `RcuHashMap`'s and papaya's removes give
        // it (`remove` would clone it).
        let guard = self.domain().read();
        self.remove_borrowed(&key, &guard);
    }
    #[inline(always)]
    fn peek(&self, key: u64) -> Option<(usize, u8)> {
        let guard = self.domain().read();
        self.get(&key, &guard).map(|s| peek_str(s))
    }
    fn settle(&self) {
        self.domain().barrier();
    }
}

impl OwnedMap for RcuHashMap<u64, String, Hasher> {
    fn build() -> Self {
        RcuHashMap::with_hasher(hasher())
    }
    fn insert(&self, key: u64, value: String) {
        self.pin().insert(key, value);
    }
    fn remove(&self, key: u64) {
        self.pin().remove(&key);
    }
    #[inline(always)]
    fn peek(&self, key: u64) -> Option<(usize, u8)> {
        let guard = self.domain().read();
        self.get(&key, &guard).map(|s| peek_str(s))
    }
    fn settle(&self) {
        self.domain().barrier();
    }
}

impl OwnedMap for papaya::HashMap<u64, String, Hasher> {
    fn build() -> Self {
        papaya::HashMap::with_hasher(hasher())
    }
    fn insert(&self, key: u64, value: String) {
        self.pin().insert(key, value);
    }
    fn remove(&self, key: u64) {
        self.pin().remove(&key);
    }
    #[inline(always)]
    fn peek(&self, key: u64) -> Option<(usize, u8)> {
        self.pin().get(&key).map(|s| peek_str(s))
    }
}

impl OwnedMap for scc::HashIndex<u64, String, Hasher> {
    fn build() -> Self {
        scc::HashIndex::with_hasher(hasher())
    }
    fn insert(&self, key: u64, value: String) {
        if let Err((key, value)) = scc::HashIndex::insert(self, key, value) {
            scc::HashIndex::remove(self, &key);
            let _ = scc::HashIndex::insert(self, key, value);
        }
    }
    fn remove(&self, key: u64) {
        scc::HashIndex::remove(self, &key);
    }
    #[inline(always)]
    fn peek(&self, key: u64) -> Option<(usize, u8)> {
        self.peek_with(&key, |_, s| peek_str(s))
    }
}

impl OwnedMap for parking_lot::RwLock<hashbrown::HashMap<u64, String, Hasher>> {
    fn build() -> Self {
        parking_lot::RwLock::new(hashbrown::HashMap::with_hasher(hasher()))
    }
    fn insert(&self, key: u64, value: String) {
        self.write().insert(key, value);
    }
    fn remove(&self, key: u64) {
        self.write().remove(&key);
    }
    #[inline(always)]
    fn peek(&self, key: u64) -> Option<(usize, u8)> {
        self.read().get(&key).map(|s| peek_str(s))
    }
}

impl OwnedMap for std::sync::RwLock<hashbrown::HashMap<u64, String, Hasher>> {
    fn build() -> Self {
        std::sync::RwLock::new(hashbrown::HashMap::with_hasher(hasher()))
    }
    fn insert(&self, key: u64, value: String) {
        self.write().unwrap().insert(key, value);
    }
    fn remove(&self, key: u64) {
        self.write().unwrap().remove(&key);
    }
    #[inline(always)]
    fn peek(&self, key: u64) -> Option<(usize, u8)> {
        self.read().unwrap().get(&key).map(|s| peek_str(s))
    }
}

const ROWS: [&str; 6] = [
    "RcuFlatMap",
    "RcuHashMap",
    "papaya",
    "scc::HashIndex",
    "parking_lot RwLock<hashbrown>",
    "std RwLock<hashbrown>",
];

/// (inserts/s, lookups/s, removes/s) of one fresh map of type `M` with `keys`.
fn one<M: OwnedMap>(keys: &[u64], texts: &[String], run_for: Duration) -> (f64, f64, f64) {
    let map = M::build();
    let start = Instant::now();
    for (&k, t) in keys.iter().zip(texts) {
        map.insert(k, t.clone());
    }
    let inserts = keys.len() as f64 / start.elapsed().as_secs_f64();
    let (mut rng, mut n, mut sum) = (0x9e37_79b9_7f4a_7c15u64, 0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < run_for {
        for _ in 0..256 {
            let k = next_key(keys, &mut rng);
            sum = sum.wrapping_add(seen(k, map.peek(k)));
        }
        n += 256;
    }
    let lookups = n as f64 / start.elapsed().as_secs_f64();
    std::hint::black_box(sum);
    let start = Instant::now();
    for &k in keys {
        map.remove(k);
    }
    let removes = keys.len() as f64 / start.elapsed().as_secs_f64();
    map.settle();
    (inserts, lookups, removes)
}

fn row(row: usize, keys: &[u64], texts: &[String], run_for: Duration) -> (f64, f64, f64) {
    type Flat = RcuFlatMap<u64, String, Hasher>;
    type Nodes = RcuHashMap<u64, String, Hasher>;
    type Papaya = papaya::HashMap<u64, String, Hasher>;
    type Index = scc::HashIndex<u64, String, Hasher>;
    type Pl = parking_lot::RwLock<hashbrown::HashMap<u64, String, Hasher>>;
    type Std = std::sync::RwLock<hashbrown::HashMap<u64, String, Hasher>>;
    match row {
        0 => one::<Flat>(keys, texts, run_for),
        1 => one::<Nodes>(keys, texts, run_for),
        2 => one::<Papaya>(keys, texts, run_for),
        3 => one::<Index>(keys, texts, run_for),
        4 => one::<Pl>(keys, texts, run_for),
        _ => one::<Std>(keys, texts, run_for),
    }
}

/// The owned-values part at `n` keys.
pub(crate) fn run(cfg: &Config, n: usize) {
    let keys: Vec<u64> = (0..n as u64).map(|i| splitmix64((3 << 60) + i)).collect();
    let texts: Vec<String> = keys.iter().map(|&k| text_of(k)).collect();
    let mut got = [(); 3].map(|_| vec![Vec::new(); ROWS.len()]);
    for round in 0..cfg.rounds {
        for i in 0..ROWS.len() {
            let r = (i + round) % ROWS.len();
            let (a, b, c) = row(r, &keys, &texts, cfg.run_for);
            if cfg.verbose {
                eprintln!(
                    "owned, {n} keys, round {round}, {}: {:.2} / {:.2} / {:.2} M/s",
                    ROWS[r],
                    a / 1e6,
                    b / 1e6,
                    c / 1e6
                );
            }
            for (what, v) in got.iter_mut().zip([a, b, c]) {
                what[r].push(v);
            }
        }
        eprintln!("owned, {n} keys: round {}/{} done", round + 1, cfg.rounds);
    }
    let [ins, look, rem] = &got;
    println!(
        "### `u64` → `String` (24 bytes on the heap), {n} keys: one thread fills an empty map, \
         looks up, empties it\n"
    );
    println!(
        "| map | M inserts/s | M lookups/s | M removes/s | RcuFlatMap ÷ it: inserts, lookups, \
         removes | RcuHashMap ÷ it: inserts, lookups, removes |"
    );
    println!("|---|---:|---:|---:|---|---|");
    for (r, name) in ROWS.iter().enumerate() {
        let of = |top: usize| {
            [ins, look, rem]
                .iter()
                .map(|v| show_ratio(ratio(&v[top], &v[r])))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "| {name} | {} | {} | {} | {} | {} |",
            mops(&ins[r]),
            mops(&look[r]),
            mops(&rem[r]),
            of(0),
            of(1)
        );
    }
    println!();
}
