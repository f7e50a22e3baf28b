//! `RcuHashMap` lookups beside the concurrent maps people use, in one process.
//!
//! Run with `cargo bench -p rcukit --bench map` (about 2 minutes). `RCUKIT_BENCH_QUICK=1`
//! (or `-- --quick`) gives a smoke run of a few seconds; `RCUKIT_BENCH_ROUNDS` and
//! `RCUKIT_BENCH_MS` override the number of rounds and the length of one measurement, and
//! `RCUKIT_BENCH_VERBOSE=1` prints every measurement to stderr as it is taken. Built
//! as a test (`cargo test --benches`, no `--bench` argument) it runs as the quick smoke run.
//!
//! **Maps** (one row each, every row in every round):
//! * `RcuHashMap`, a guard (`map.domain().read()`) per lookup: one packet, one guard;
//! * `RcuHashMap`, one guard per 64 lookups;
//! * `std::sync::RwLock<std::collections::HashMap>`, a read lock per lookup;
//! * `dashmap::DashMap` (6.x), `get` per lookup (a shard read lock);
//! * `papaya::HashMap` (0.2.x, default incremental resize), `pin()` per lookup;
//! * `flurry::HashMap` (0.5.x), `pin()` per lookup.
//!
//! Every map uses the same hasher, `foldhash::fast::FixedState::with_seed(SEED)`, with `u64`
//! keys and `u64` values. The looked-up set is [`KEYS`] = 65,536 keys (`splitmix64(i)`, so
//! spread over the whole `u64` range), each with the value `value_of(key)`.
//!
//! **Readers** look up random present keys: a per-thread xorshift64 picks an index into the
//! key array (one shift-xor triple and a mask per lookup). Every lookup checks that the key is
//! found with `value_of(key)` (a panic otherwise) and the values are summed into a
//! `black_box`, so no lookup can be optimised away and a wrong answer cannot go unnoticed.
//!
//! **Scenarios**, each at 1 and 2 reader threads (the writer, where there is one, is an extra
//! thread):
//! * **(a) alone**: the readers only.
//! * **(b) writer**: plus one writer thread running a 90/10 mix: of every 10 operations, 9 are
//!   lookups of present keys (verified like the readers', not counted in the readers' figure)
//!   and 1 is a write. Writes alternate between inserting a fresh churn key and removing the
//!   churn key inserted [`CHURN_WINDOW`] writes earlier, so the map holds at most 65,536 + 1,024
//!   entries and the churn keys are never the looked-up ones. The writer runs flat out (it
//!   never sleeps); its writes/s are printed beside the readers' figure, since a map that
//!   starves its writer would otherwise look good. On 2 cores a busy writer takes a third of
//!   the CPU from 2 readers, unless the map makes it wait: that share, not the map, then
//!   decides much of the readers' figure.
//! * **(b') paced writer**: the same writer paced at [`PACED_WRITES`] = 100,000 writes/s (it
//!   sleeps 0.5 ms whenever it is ahead of schedule), the same for every map, so that the
//!   readers of every map get about the same CPU and the figure shows what the writes
//!   themselves cost the readers.
//! * **(c) resize**: plus one writer thread that repeatedly inserts [`RESIZE_EXTRA`] = 262,144
//!   extra keys (the map grows from 65,536 to 327,680 entries) and removes them again, then
//!   calls `shrink_to_fit` where the map has one (std, DashMap), while the readers look up the
//!   65,536 keys that are present throughout. Every measurement starts from a freshly built
//!   map holding only the 65,536 keys. `RcuHashMap` grows and shrinks by itself; papaya
//!   resizes when an insert runs past its probe limit (tombstones count) and then halves a
//!   table at most 1/8 full; flurry never shrinks, so only its first grow in each measurement
//!   is a resize (the table then stays large). The bench prints the capacities it saw where a
//!   map reports one.
//!
//! The machine this is written for has 2 cores: with a busy writer running, "2 threads" means
//! 3 busy threads on 2 cores, and "1 thread" means 2 busy threads, so the 2-thread/1-thread
//! ratios of (b) and (c) are bounded by the scheduler (4/3 if the writer keeps its share), not
//! by the maps.
//!
//! **Measurement**: every measurement runs its threads for a fixed time (`RCUKIT_BENCH_MS`,
//! default 400 ms) and counts lookups; each reader divides its count by its own elapsed time
//! and the figures are summed. Rounds ([`ROUNDS`] by default) are interleaved: each round
//! measures every scenario, thread count and map once, the map order rotating from round to
//! round. The tables give the median over the rounds and the min-max; the ratios at the end
//! are ratios of medians, with the min-max of the per-round ratios beside them.

use rcukit::RcuHashMap;
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex, RwLock};
use std::time::{Duration, Instant};

type Hasher = foldhash::fast::FixedState;

/// The seed of the hasher every map uses.
const SEED: u64 = 0x243f_6a88_85a3_08d3;

/// Number of looked-up keys (a power of two, so that an index is a mask away).
const KEYS: usize = 1 << 16;

/// Churn keys live at once in scenarios (b) and (b').
const CHURN_WINDOW: u64 = 1024;

/// Writes per second of the paced writer of scenario (b').
const PACED_WRITES: f64 = 100_000.0;

/// Extra keys inserted and removed per cycle in scenario (c).
const RESIZE_EXTRA: u64 = 4 * KEYS as u64;

/// Default number of interleaved rounds.
const ROUNDS: usize = 5;

/// Lookups between two looks at the stop flag.
const BATCH: usize = 256;

fn hasher() -> Hasher {
    Hasher::with_seed(SEED)
}

/// A bijection on `u64`: distinct inputs give distinct keys.
fn splitmix64(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The looked-up keys: `key(0..KEYS)`.
fn key(i: u64) -> u64 {
    splitmix64(i)
}

/// Churn keys of scenario (b): never among the looked-up keys.
fn churn_key(n: u64) -> u64 {
    splitmix64((1 << 40) + n)
}

/// Extra keys of scenario (c): never among the looked-up or churn keys.
fn extra_key(n: u64) -> u64 {
    splitmix64((1 << 50) + n)
}

fn value_of(key: u64) -> u64 {
    key.rotate_left(17) ^ 0x5555_5555_5555_5555
}

#[inline(always)]
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[inline(always)]
fn next_key(keys: &[u64], rng: &mut u64) -> u64 {
    keys[xorshift(rng) as usize & (KEYS - 1)]
}

#[cold]
#[inline(never)]
fn wrong(key: u64, got: Option<u64>) -> ! {
    panic!(
        "lookup of {key:#x} gave {got:x?}, expected Some({:#x})",
        value_of(key)
    )
}

/// Checks a lookup's answer; returns the value.
#[inline(always)]
fn check(key: u64, got: Option<u64>) -> u64 {
    match got {
        Some(v) if v == value_of(key) => v,
        _ => wrong(key, got),
    }
}

/// What the bench needs of a map. `lookups` does `n` verified lookups of random present keys
/// and returns the sum of the values; the default takes one lookup at a time through `get`.
trait BenchMap: Sync + Sized {
    fn build(keys: &[u64]) -> Self;
    fn get(&self, key: u64) -> Option<u64>;
    fn insert(&self, key: u64, value: u64);
    fn remove(&self, key: u64);
    /// Give memory back after a mass removal, where the map can (it cannot shrink by itself).
    fn shrink(&self) {}
    /// The table's capacity, where the map tells it.
    fn capacity(&self) -> Option<usize> {
        None
    }
    /// Grace periods completed so far (normal, expedited), for a map on an rcukit domain.
    fn grace_periods(&self) -> Option<(u64, u64)> {
        None
    }

    #[inline(always)]
    fn lookups(&self, keys: &[u64], rng: &mut u64, n: usize) -> u64 {
        let mut sum = 0u64;
        for _ in 0..n {
            let k = next_key(keys, rng);
            sum = sum.wrapping_add(check(k, self.get(k)));
        }
        sum
    }
}

fn filled<M: BenchMap>(keys: &[u64]) -> M {
    let map = M::build(keys);
    for &k in keys {
        map.insert(k, value_of(k));
    }
    map
}

type RcuMap = RcuHashMap<u64, u64, Hasher>;

/// `RcuHashMap`, a guard per lookup.
struct RcuPerLookup(RcuMap);

/// `RcuHashMap`, a guard per 64 lookups.
struct RcuPer64(RcuMap);

fn rcu_map() -> RcuMap {
    RcuHashMap::with_hasher(hasher())
}

impl BenchMap for RcuPerLookup {
    fn build(_: &[u64]) -> Self {
        Self(rcu_map())
    }
    fn grace_periods(&self) -> Option<(u64, u64)> {
        let stats = self.0.domain().stats();
        Some((stats.normal_gps, stats.expedited_gps))
    }
    #[inline(always)]
    fn get(&self, key: u64) -> Option<u64> {
        let guard = self.0.domain().read();
        self.0.get(&key, &guard).copied()
    }
    fn insert(&self, key: u64, value: u64) {
        self.0.insert(key, value);
    }
    fn remove(&self, key: u64) {
        self.0.remove(&key);
    }
    fn capacity(&self) -> Option<usize> {
        Some(self.0.capacity())
    }
}

impl BenchMap for RcuPer64 {
    fn build(_: &[u64]) -> Self {
        Self(rcu_map())
    }
    fn grace_periods(&self) -> Option<(u64, u64)> {
        let stats = self.0.domain().stats();
        Some((stats.normal_gps, stats.expedited_gps))
    }
    fn get(&self, key: u64) -> Option<u64> {
        let guard = self.0.domain().read();
        self.0.get(&key, &guard).copied()
    }
    fn insert(&self, key: u64, value: u64) {
        self.0.insert(key, value);
    }
    fn remove(&self, key: u64) {
        self.0.remove(&key);
    }
    fn capacity(&self) -> Option<usize> {
        Some(self.0.capacity())
    }
    #[inline(always)]
    fn lookups(&self, keys: &[u64], rng: &mut u64, n: usize) -> u64 {
        let mut sum = 0u64;
        let mut left = n;
        while left > 0 {
            let batch = left.min(64);
            let guard = self.0.domain().read();
            for _ in 0..batch {
                let k = next_key(keys, rng);
                sum = sum.wrapping_add(check(k, self.0.get(&k, &guard).copied()));
            }
            left -= batch;
        }
        sum
    }
}

struct StdRwLock(RwLock<HashMap<u64, u64, Hasher>>);

impl BenchMap for StdRwLock {
    fn build(_: &[u64]) -> Self {
        Self(RwLock::new(HashMap::with_hasher(hasher())))
    }
    #[inline(always)]
    fn get(&self, key: u64) -> Option<u64> {
        self.0.read().unwrap().get(&key).copied()
    }
    fn insert(&self, key: u64, value: u64) {
        self.0.write().unwrap().insert(key, value);
    }
    fn remove(&self, key: u64) {
        self.0.write().unwrap().remove(&key);
    }
    fn shrink(&self) {
        self.0.write().unwrap().shrink_to_fit();
    }
    fn capacity(&self) -> Option<usize> {
        Some(self.0.read().unwrap().capacity())
    }
}

struct Dash(dashmap::DashMap<u64, u64, Hasher>);

impl BenchMap for Dash {
    fn build(_: &[u64]) -> Self {
        Self(dashmap::DashMap::with_hasher(hasher()))
    }
    #[inline(always)]
    fn get(&self, key: u64) -> Option<u64> {
        self.0.get(&key).map(|v| *v)
    }
    fn insert(&self, key: u64, value: u64) {
        self.0.insert(key, value);
    }
    fn remove(&self, key: u64) {
        self.0.remove(&key);
    }
    fn shrink(&self) {
        self.0.shrink_to_fit();
    }
    fn capacity(&self) -> Option<usize> {
        Some(self.0.capacity())
    }
}

struct Papaya(papaya::HashMap<u64, u64, Hasher>);

impl BenchMap for Papaya {
    fn build(_: &[u64]) -> Self {
        Self(papaya::HashMap::with_hasher(hasher()))
    }
    #[inline(always)]
    fn get(&self, key: u64) -> Option<u64> {
        self.0.pin().get(&key).copied()
    }
    fn insert(&self, key: u64, value: u64) {
        self.0.pin().insert(key, value);
    }
    fn remove(&self, key: u64) {
        self.0.pin().remove(&key);
    }
}

struct Flurry(flurry::HashMap<u64, u64, Hasher>);

impl BenchMap for Flurry {
    fn build(_: &[u64]) -> Self {
        Self(flurry::HashMap::with_hasher(hasher()))
    }
    #[inline(always)]
    fn get(&self, key: u64) -> Option<u64> {
        self.0.pin().get(&key).copied()
    }
    fn insert(&self, key: u64, value: u64) {
        self.0.pin().insert(key, value);
    }
    fn remove(&self, key: u64) {
        self.0.pin().remove(&key);
    }
}

/// The rows, in table order.
const MAPS: [&str; 6] = [
    "RcuHashMap, guard per lookup",
    "RcuHashMap, guard per 64 lookups",
    "std RwLock<HashMap>",
    "DashMap",
    "papaya, pin per lookup",
    "flurry, pin per lookup",
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Scenario {
    Alone,
    Writer,
    Paced,
    Resize,
}

const SCENARIOS: [Scenario; 4] = [
    Scenario::Alone,
    Scenario::Writer,
    Scenario::Paced,
    Scenario::Resize,
];

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Alone => "(a) alone",
            Scenario::Writer => "(b) with a 90/10 writer, flat out",
            Scenario::Paced => "(b') with a 90/10 writer, paced",
            Scenario::Resize => "(c) during resizes",
        }
    }
}

/// One measurement.
#[derive(Clone, Copy, Default)]
struct Sample {
    /// Lookups per second, all readers together.
    lookups: f64,
    /// The writer's writes (inserts + removes) per second; 0 without a writer.
    writes: f64,
    /// Scenario (c): completed grow-and-shrink cycles.
    cycles: u64,
    /// `RcuHashMap` rows: grace periods of the map's domain per second, normal and expedited.
    gps: Option<(f64, f64)>,
}

/// Capacities seen by the resize writer: at the start, at the largest, after the removals.
#[derive(Clone, Copy, Default, Debug)]
struct Capacities {
    start: usize,
    grown: usize,
    shrunk: usize,
}

struct Config {
    /// A smoke run (`RCUKIT_BENCH_QUICK`, `--quick` or test mode): figures mean little.
    quick: bool,
    /// `RCUKIT_BENCH_VERBOSE=1`: print every measurement to stderr as it is taken.
    verbose: bool,
    rounds: usize,
    run_for: Duration,
}

/// Runs `threads` readers (and the scenario's writer) on `map` for `cfg.run_for`.
fn measure<M: BenchMap>(
    map: &M,
    keys: &[u64],
    scenario: Scenario,
    threads: usize,
    cfg: &Config,
    caps: &Mutex<Option<Capacities>>,
) -> Sample {
    let stop = AtomicBool::new(false);
    let with_writer = scenario != Scenario::Alone;
    let barrier = Barrier::new(threads + 1 + usize::from(with_writer));
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, barrier) = (&stop, &barrier);
                s.spawn(move || {
                    let rng = splitmix64(0xdead_beef + t as u64) | 1;
                    barrier.wait();
                    let start = Instant::now();
                    let count = read_until_stopped(map, keys, rng, stop);
                    count as f64 / start.elapsed().as_secs_f64()
                })
            })
            .collect();
        let writer = with_writer.then(|| {
            let (stop, barrier) = (&stop, &barrier);
            s.spawn(move || {
                barrier.wait();
                let start = Instant::now();
                let (writes, cycles) = match scenario {
                    Scenario::Writer => churn_writer(map, keys, stop, None),
                    Scenario::Paced => churn_writer(map, keys, stop, Some(PACED_WRITES)),
                    _ => resize_writer(map, stop, caps),
                };
                (writes as f64 / start.elapsed().as_secs_f64(), cycles)
            })
        });
        barrier.wait();
        let (gps_before, start) = (map.grace_periods(), Instant::now());
        std::thread::sleep(cfg.run_for);
        stop.store(true, Ordering::Relaxed);
        let gps = map.grace_periods().zip(gps_before).map(|(after, before)| {
            let secs = start.elapsed().as_secs_f64();
            (
                (after.0 - before.0) as f64 / secs,
                (after.1 - before.1) as f64 / secs,
            )
        });
        let lookups = readers.into_iter().map(|h| h.join().unwrap()).sum();
        let (writes, cycles) = writer.map_or((0.0, 0), |h| h.join().unwrap());
        Sample {
            lookups,
            writes,
            cycles,
            gps,
        }
    })
}

/// A reader: verified lookups in batches of [`BATCH`] until `stop`; returns the count. Not
/// inlined, so that a profile shows each map's reader loop under its own name.
#[inline(never)]
fn read_until_stopped<M: BenchMap>(map: &M, keys: &[u64], mut rng: u64, stop: &AtomicBool) -> u64 {
    let mut sum = 0u64;
    let mut count = 0u64;
    while !stop.load(Ordering::Relaxed) {
        sum = sum.wrapping_add(map.lookups(keys, &mut rng, BATCH));
        count += BATCH as u64;
    }
    black_box(sum);
    count
}

/// Scenarios (b) and (b'): 9 verified lookups, then one write, until stopped, flat out or at
/// `rate` writes per second; leaves the map as it found it. Returns the number of writes.
fn churn_writer<M: BenchMap>(
    map: &M,
    keys: &[u64],
    stop: &AtomicBool,
    rate: Option<f64>,
) -> (u64, u64) {
    let start = Instant::now();
    let mut rng = 0x1234_5678_9abc_def1u64;
    let mut sum = 0u64;
    let mut inserted = 0u64; // churn keys 0..inserted have been inserted
    let mut removed = 0u64; // churn keys 0..removed have been removed
    let mut writes = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if let Some(rate) = rate {
            // Catch up with the schedule, then sleep: the CPU goes to the readers.
            if writes as f64 >= start.elapsed().as_secs_f64() * rate {
                std::thread::sleep(Duration::from_micros(500));
                continue;
            }
        }
        for _ in 0..10 {
            sum = sum.wrapping_add(map.lookups(keys, &mut rng, 9));
            if inserted - removed < CHURN_WINDOW || writes & 1 == 0 {
                let k = churn_key(inserted);
                map.insert(k, value_of(k));
                inserted += 1;
            } else {
                map.remove(churn_key(removed));
                removed += 1;
            }
            writes += 1;
        }
    }
    black_box(sum);
    for n in removed..inserted {
        map.remove(churn_key(n));
    }
    (writes, 0)
}

/// Scenario (c): insert `RESIZE_EXTRA` keys, remove them, shrink where possible; repeat until
/// stopped. Returns the number of writes and of completed cycles.
fn resize_writer<M: BenchMap>(
    map: &M,
    stop: &AtomicBool,
    caps: &Mutex<Option<Capacities>>,
) -> (u64, u64) {
    let mut writes = 0u64;
    let mut cycles = 0u64;
    let mut seen = Capacities {
        start: map.capacity().unwrap_or(0),
        ..Capacities::default()
    };
    'outer: loop {
        for n in 0..RESIZE_EXTRA {
            if n & 255 == 0 && stop.load(Ordering::Relaxed) {
                break 'outer;
            }
            let k = extra_key(n);
            map.insert(k, value_of(k));
            writes += 1;
        }
        seen.grown = seen.grown.max(map.capacity().unwrap_or(0));
        for n in 0..RESIZE_EXTRA {
            if n & 255 == 0 && stop.load(Ordering::Relaxed) {
                break 'outer;
            }
            map.remove(extra_key(n));
            writes += 1;
        }
        map.shrink();
        seen.shrunk = map.capacity().unwrap_or(0);
        cycles += 1;
    }
    // Remember the first measurement that completed a cycle.
    let mut caps = caps.lock().unwrap();
    if caps.is_none() && cycles > 0 {
        *caps = Some(seen);
    }
    (writes, cycles)
}

/// Every map, built once for scenarios (a) and (b).
struct Maps {
    rcu: RcuPerLookup,
    rcu64: RcuPer64,
    std: StdRwLock,
    dash: Dash,
    papaya: Papaya,
    flurry: Flurry,
}

fn measure_row(
    maps: &Maps,
    row: usize,
    keys: &[u64],
    scenario: Scenario,
    threads: usize,
    cfg: &Config,
    caps: &Mutex<Option<Capacities>>,
) -> Sample {
    // Scenario (c) starts every measurement from a fresh map holding only `keys`.
    fn fresh<M: BenchMap>(
        keys: &[u64],
        threads: usize,
        cfg: &Config,
        caps: &Mutex<Option<Capacities>>,
    ) -> Sample {
        let map = filled::<M>(keys);
        measure(&map, keys, Scenario::Resize, threads, cfg, caps)
    }
    if scenario == Scenario::Resize {
        return match row {
            0 => fresh::<RcuPerLookup>(keys, threads, cfg, caps),
            1 => fresh::<RcuPer64>(keys, threads, cfg, caps),
            2 => fresh::<StdRwLock>(keys, threads, cfg, caps),
            3 => fresh::<Dash>(keys, threads, cfg, caps),
            4 => fresh::<Papaya>(keys, threads, cfg, caps),
            _ => fresh::<Flurry>(keys, threads, cfg, caps),
        };
    }
    match row {
        0 => measure(&maps.rcu, keys, scenario, threads, cfg, caps),
        1 => measure(&maps.rcu64, keys, scenario, threads, cfg, caps),
        2 => measure(&maps.std, keys, scenario, threads, cfg, caps),
        3 => measure(&maps.dash, keys, scenario, threads, cfg, caps),
        4 => measure(&maps.papaya, keys, scenario, threads, cfg, caps),
        _ => measure(&maps.flurry, keys, scenario, threads, cfg, caps),
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

fn mops(x: f64) -> String {
    format!("{:.2}", x / 1e6)
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
            20
        } else if quick {
            100
        } else {
            400
        });
    Config {
        quick,
        verbose: env("RCUKIT_BENCH_VERBOSE").is_some_and(|v| v != "0"),
        rounds: rounds.max(1),
        run_for: Duration::from_millis(ms),
    }
}

fn main() {
    let cfg = config();
    let keys: Vec<u64> = (0..KEYS as u64).map(key).collect();
    println!(
        "# RcuHashMap lookups\n\n{} keys, u64 -> u64, foldhash::fast::FixedState \
         (seed {SEED:#x}) for every map; {} rounds of {} ms per measurement\n",
        KEYS,
        cfg.rounds,
        cfg.run_for.as_millis()
    );
    if cfg.quick {
        println!("(a smoke run: too short for figures to mean much)\n");
    }
    let maps = Maps {
        rcu: filled(&keys),
        rcu64: filled(&keys),
        std: filled(&keys),
        dash: filled(&keys),
        papaya: filled(&keys),
        flurry: filled(&keys),
    };
    let caps: Vec<Mutex<Option<Capacities>>> = MAPS.iter().map(|_| Mutex::new(None)).collect();
    // samples[scenario][threads - 1][row] = one sample per round
    let mut samples = vec![vec![vec![Vec::<Sample>::new(); MAPS.len()]; 2]; SCENARIOS.len()];
    let started = Instant::now();
    for round in 0..cfg.rounds {
        for (si, &scenario) in SCENARIOS.iter().enumerate() {
            for threads in [1, 2] {
                for i in 0..MAPS.len() {
                    let row = (i + round) % MAPS.len();
                    let sample =
                        measure_row(&maps, row, &keys, scenario, threads, &cfg, &caps[row]);
                    if cfg.verbose {
                        eprintln!(
                            "round {round}, {}, {threads} thr, {}: {} M lookups/s, \
                             writer {} M writes/s, {} cycles",
                            scenario.name(),
                            MAPS[row],
                            mops(sample.lookups),
                            mops(sample.writes),
                            sample.cycles
                        );
                    }
                    samples[si][threads - 1][row].push(sample);
                }
            }
        }
        eprintln!(
            "round {}/{} done ({:.0} s)",
            round + 1,
            cfg.rounds,
            started.elapsed().as_secs_f64()
        );
    }

    let lookups = |si: usize, threads: usize, row: usize| -> Vec<f64> {
        samples[si][threads - 1][row]
            .iter()
            .map(|s| s.lookups)
            .collect()
    };
    for (si, &scenario) in SCENARIOS.iter().enumerate() {
        println!("## {}\n", scenario.name());
        print!("| map | 1 thread: M lookups/s (min-max) | 2 threads: M lookups/s (min-max) |");
        match scenario {
            Scenario::Alone => println!("\n|---|---:|---:|"),
            Scenario::Writer | Scenario::Paced => {
                println!(" writer M writes/s, 1 / 2 thr |\n|---|---:|---:|---:|")
            }
            Scenario::Resize => println!(" writer cycles, 1 / 2 thr |\n|---|---:|---:|---:|"),
        }
        for (row, name) in MAPS.iter().enumerate() {
            print!("| {name} |");
            for threads in [1, 2] {
                let v = lookups(si, threads, row);
                let (lo, hi) = min_max(&v);
                print!(" {} ({}-{}) |", mops(median(&v)), mops(lo), mops(hi));
            }
            let side = |threads: usize, f: fn(&Sample) -> f64| -> f64 {
                median(
                    &samples[si][threads - 1][row]
                        .iter()
                        .map(f)
                        .collect::<Vec<_>>(),
                )
            };
            match scenario {
                Scenario::Alone => println!(),
                Scenario::Writer | Scenario::Paced => println!(
                    " {} / {} |",
                    mops(side(1, |s| s.writes)),
                    mops(side(2, |s| s.writes))
                ),
                Scenario::Resize => println!(
                    " {} / {} |",
                    side(1, |s| s.cycles as f64),
                    side(2, |s| s.cycles as f64)
                ),
            }
        }
        println!();
        for (row, name) in MAPS.iter().enumerate().take(2) {
            let rate = |threads: usize, f: fn((f64, f64)) -> f64| -> f64 {
                let v: Vec<f64> = samples[si][threads - 1][row]
                    .iter()
                    .filter_map(|s| s.gps.map(f))
                    .collect();
                median(&v)
            };
            println!(
                "{name}: grace periods of its domain per second (median), normal / expedited: \
                 {:.0} / {:.0} at 1 thread, {:.0} / {:.0} at 2 threads",
                rate(1, |g| g.0),
                rate(1, |g| g.1),
                rate(2, |g| g.0),
                rate(2, |g| g.1)
            );
        }
        println!();
    }
    println!(
        "Scenario (c): one grow-and-shrink cycle inserts and removes {RESIZE_EXTRA} keys \
         (median completed cycles per measurement above). Capacities seen by the writer in \
         its first completed cycle (start / largest / after the removals and shrink_to_fit):\n"
    );
    for (row, name) in MAPS.iter().enumerate() {
        match *caps[row].lock().unwrap() {
            Some(c) if c.grown > 0 => {
                println!("* {name}: {} / {} / {}", c.start, c.grown, c.shrunk)
            }
            Some(_) => println!("* {name}: does not report a capacity"),
            None => println!("* {name}: no cycle completed"),
        }
    }

    // Ratios: of medians, with the range of the per-round ratios.
    let ratio = |a: &[f64], b: &[f64]| -> (f64, f64, f64) {
        let per_round: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
        let (lo, hi) = min_max(&per_round);
        (median(a) / median(b), lo, hi)
    };
    let (alone, writer, paced, resize) = (0, 1, 2, 3);
    let (rcu, dash, papaya) = (0, 3, 4);
    let targets: Vec<(String, (f64, f64, f64), f64)> = vec![
        (
            "RcuHashMap ÷ DashMap, 2 threads, (b) writer".into(),
            ratio(&lookups(writer, 2, rcu), &lookups(writer, 2, dash)),
            2.0,
        ),
        (
            "RcuHashMap ÷ papaya, 2 threads, (b) writer".into(),
            ratio(&lookups(writer, 2, rcu), &lookups(writer, 2, papaya)),
            1.5,
        ),
        (
            "RcuHashMap ÷ DashMap, 2 threads, (b') paced writer".into(),
            ratio(&lookups(paced, 2, rcu), &lookups(paced, 2, dash)),
            2.0,
        ),
        (
            "RcuHashMap ÷ papaya, 2 threads, (b') paced writer".into(),
            ratio(&lookups(paced, 2, rcu), &lookups(paced, 2, papaya)),
            1.5,
        ),
        (
            "RcuHashMap 2 threads ÷ 1 thread, (a) alone".into(),
            ratio(&lookups(alone, 2, rcu), &lookups(alone, 1, rcu)),
            1.8,
        ),
        (
            "RcuHashMap 2 threads ÷ 1 thread, (b) writer (3 threads on 2 cores)".into(),
            ratio(&lookups(writer, 2, rcu), &lookups(writer, 1, rcu)),
            1.8,
        ),
        (
            "RcuHashMap 2 threads ÷ 1 thread, (b') paced writer".into(),
            ratio(&lookups(paced, 2, rcu), &lookups(paced, 1, rcu)),
            1.8,
        ),
        (
            "RcuHashMap 2 threads ÷ 1 thread, (c) resize (3 threads on 2 cores)".into(),
            ratio(&lookups(resize, 2, rcu), &lookups(resize, 1, rcu)),
            1.8,
        ),
    ];
    println!("\n## Targets (ratio of medians; per-round min-max)\n");
    println!("| ratio | measured | target | met |");
    println!("|---|---:|---:|---|");
    for (name, (r, lo, hi), target) in &targets {
        println!(
            "| {name} | {r:.2}x ({lo:.2}-{hi:.2}) | ≥ {target}x | {} |",
            if *r >= *target { "yes" } else { "**no**" }
        );
    }
    println!("\nMore ratios at 2 threads (RcuHashMap, guard per lookup ÷ each map):\n");
    println!("| scenario | ÷ std RwLock | ÷ DashMap | ÷ papaya | ÷ flurry |");
    println!("|---|---:|---:|---:|---:|");
    for (si, &scenario) in SCENARIOS.iter().enumerate() {
        print!("| {} |", scenario.name());
        for row in 2..MAPS.len() {
            let (r, _, _) = ratio(&lookups(si, 2, rcu), &lookups(si, 2, row));
            print!(" {r:.2}x |");
        }
        println!();
    }
}
