//! The maps of the bench, each behind [`BenchMap`], and the rows that name them.

use rcukit::{Qsbr, QsbrThread, RcuFlatMap, RcuHashMap};
use std::cell::RefCell;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

pub(crate) type Hasher = foldhash::fast::FixedState;

/// The seed of the hasher every map uses.
pub(crate) const SEED: u64 = 0x243f_6a88_85a3_08d3;

pub(crate) fn hasher() -> Hasher {
    Hasher::with_seed(SEED)
}

/// A bijection on `u64`: distinct inputs give distinct keys.
pub(crate) fn splitmix64(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub(crate) fn value_of(key: u64) -> u64 {
    key.rotate_left(17) ^ 0x5555_5555_5555_5555
}

#[inline(always)]
pub(crate) fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// A random key of `keys` (a multiply-shift of the top half of the random word: no division).
#[inline(always)]
pub(crate) fn next_key(keys: &[u64], rng: &mut u64) -> u64 {
    let r = xorshift(rng) >> 32;
    keys[((r * keys.len() as u64) >> 32) as usize]
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
pub(crate) fn check(key: u64, got: Option<u64>) -> u64 {
    match got {
        Some(v) if v == value_of(key) => v,
        _ => wrong(key, got),
    }
}

/// What the bench needs of a map. `lookups` does `n` verified lookups of random present keys
/// and returns the sum of the values; the default takes one lookup at a time through `get`.
pub(crate) trait BenchMap: Sync + Sized {
    /// An empty map.
    fn build() -> Self;
    fn get(&self, key: u64) -> Option<u64>;
    fn insert(&self, key: u64, value: u64);
    fn remove(&self, key: u64);
    /// Give memory back after a mass removal, where the map cannot shrink by itself.
    fn shrink(&self) {}
    /// Wait until what the map deferred (retired entries) has been freed.
    fn settle(&self) {}
    /// Insert `keys` with their values.
    fn fill(&self, keys: &[u64]) {
        for &k in keys {
            self.insert(k, value_of(k));
        }
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

pub(crate) fn filled<M: BenchMap>(keys: &[u64]) -> M {
    let map = M::build();
    map.fill(keys);
    map
}

type RcuMap = RcuHashMap<u64, u64, Hasher>;

/// `RcuHashMap`, a guard per lookup.
pub(crate) struct RcuPerLookup(RcuMap);

/// `RcuHashMap`, a guard per 64 lookups.
pub(crate) struct RcuPer64(RcuMap);

macro_rules! rcu_common {
    () => {
        fn build() -> Self {
            Self(RcuHashMap::with_hasher(hasher()))
        }
        #[inline(always)]
        fn get(&self, key: u64) -> Option<u64> {
            let guard = self.0.domain().read();
            self.0.get(&key, &guard).copied()
        }
        fn insert(&self, key: u64, value: u64) {
            self.0.pin().insert(key, value);
        }
        fn remove(&self, key: u64) {
            self.0.pin().remove(&key);
        }
        fn settle(&self) {
            self.0.domain().barrier();
            self.0.domain().barrier();
        }
    };
}

impl BenchMap for RcuPerLookup {
    rcu_common!();
}

impl BenchMap for RcuPer64 {
    rcu_common!();

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

/// `RcuFlatMap` (inline entries), `get_copied` per lookup (a guard per lookup).
pub(crate) struct Flat(RcuFlatMap<u64, u64, Hasher>);

impl BenchMap for Flat {
    fn build() -> Self {
        Self(RcuFlatMap::with_hasher(hasher()))
    }
    #[inline(always)]
    fn get(&self, key: u64) -> Option<u64> {
        self.0.get_copied(&key)
    }
    fn insert(&self, key: u64, value: u64) {
        self.0.insert(key, value);
    }
    fn remove(&self, key: u64) {
        self.0.remove(&key);
    }
    fn settle(&self) {
        self.0.domain().barrier();
        self.0.domain().barrier();
    }
}

/// Lookups between two quiescent states of a QSBR reader: one `lookups` call's batch.
const QS_EVERY: usize = 256;

/// The QSBR domain of the `RcuFlatMap` row on one (one for the process).
fn qsbr() -> &'static Qsbr {
    static QSBR: std::sync::OnceLock<Qsbr> = std::sync::OnceLock::new();
    QSBR.get_or_init(Qsbr::new)
}

thread_local! {
    /// This thread's registration with `qsbr()`, made by its first lookup; the bench's threads
    /// end with their measurement, which unregisters them.
    static QSBR_ME: RefCell<Option<QsbrThread<'static>>> = const { RefCell::new(None) };
}

/// Run `f` with this thread online in `qsbr()`, then announce a quiescent state (liburcu's
/// QSBR harness does one per so many reads, as this does per `lookups` batch).
#[inline(always)]
fn online<R>(f: impl FnOnce(&QsbrThread<'static>) -> R) -> R {
    QSBR_ME.with(|me| {
        let mut me = me.borrow_mut();
        let me = me.get_or_insert_with(|| qsbr().register());
        let r = f(me);
        me.quiescent_state();
        r
    })
}

/// `RcuFlatMap` on a QSBR domain: reader threads register once and read with no code around
/// a lookup, announcing a quiescent state per `QS_EVERY` lookups.
pub(crate) struct FlatQsbr(RcuFlatMap<u64, u64, Hasher, &'static Qsbr>);

impl BenchMap for FlatQsbr {
    fn build() -> Self {
        Self(RcuFlatMap::with_capacity_hasher_in(0, hasher(), qsbr()))
    }
    #[inline(always)]
    fn get(&self, key: u64) -> Option<u64> {
        online(|me| self.0.get(&key, me).copied())
    }
    fn insert(&self, key: u64, value: u64) {
        self.0.insert(key, value);
    }
    fn remove(&self, key: u64) {
        self.0.remove(&key);
    }
    fn settle(&self) {
        // The calling thread must not be online: the barrier would wait for it.
        QSBR_ME.with(|me| drop(me.borrow_mut().take()));
        self.0.domain().barrier();
        self.0.domain().barrier();
    }

    #[inline(always)]
    fn lookups(&self, keys: &[u64], rng: &mut u64, n: usize) -> u64 {
        let mut sum = 0u64;
        let mut left = n;
        while left > 0 {
            let batch = left.min(QS_EVERY);
            let part = online(|me| {
                let mut part = 0u64;
                for _ in 0..batch {
                    let k = next_key(keys, rng);
                    part = part.wrapping_add(check(k, self.0.get(&k, me).copied()));
                }
                part
            });
            sum = sum.wrapping_add(part);
            left -= batch;
        }
        sum
    }
}

type Brown = hashbrown::HashMap<u64, u64, Hasher>;

/// `std::sync::RwLock<hashbrown::HashMap>`.
pub(crate) struct StdRwLock(std::sync::RwLock<Brown>);

impl BenchMap for StdRwLock {
    fn build() -> Self {
        Self(std::sync::RwLock::new(Brown::with_hasher(hasher())))
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
}

/// `parking_lot::RwLock<hashbrown::HashMap>`.
pub(crate) struct PlRwLock(parking_lot::RwLock<Brown>);

impl BenchMap for PlRwLock {
    fn build() -> Self {
        Self(parking_lot::RwLock::new(Brown::with_hasher(hasher())))
    }
    #[inline(always)]
    fn get(&self, key: u64) -> Option<u64> {
        self.0.read().get(&key).copied()
    }
    fn insert(&self, key: u64, value: u64) {
        self.0.write().insert(key, value);
    }
    fn remove(&self, key: u64) {
        self.0.write().remove(&key);
    }
    fn shrink(&self) {
        self.0.write().shrink_to_fit();
    }
}

pub(crate) struct Dash(dashmap::DashMap<u64, u64, Hasher>);

impl BenchMap for Dash {
    fn build() -> Self {
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
}

pub(crate) struct Papaya(papaya::HashMap<u64, u64, Hasher>);

impl BenchMap for Papaya {
    fn build() -> Self {
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

pub(crate) struct Flurry(flurry::HashMap<u64, u64, Hasher>);

impl BenchMap for Flurry {
    fn build() -> Self {
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

/// `scc::HashMap` (bucket locks; `read` takes a shared lock on one bucket).
pub(crate) struct SccMap(scc::HashMap<u64, u64, Hasher>);

impl BenchMap for SccMap {
    fn build() -> Self {
        Self(scc::HashMap::with_hasher(hasher()))
    }
    #[inline(always)]
    fn get(&self, key: u64) -> Option<u64> {
        self.0.read(&key, |_, v| *v)
    }
    fn insert(&self, key: u64, value: u64) {
        self.0.upsert(key, value);
    }
    fn remove(&self, key: u64) {
        self.0.remove(&key);
    }
}

/// `scc::HashIndex` (lock-free reads, `peek_with`).
pub(crate) struct SccIndex(scc::HashIndex<u64, u64, Hasher>);

impl BenchMap for SccIndex {
    fn build() -> Self {
        Self(scc::HashIndex::with_hasher(hasher()))
    }
    #[inline(always)]
    fn get(&self, key: u64) -> Option<u64> {
        self.0.peek_with(&key, |_, v| *v)
    }
    fn insert(&self, key: u64, value: u64) {
        if let Err((key, value)) = self.0.insert(key, value) {
            self.0.remove(&key);
            let _ = self.0.insert(key, value);
        }
    }
    fn remove(&self, key: u64) {
        self.0.remove(&key);
    }
}

type EvRead = evmap::ReadHandle<u64, u64, (), Hasher>;

/// evmap (left-right): one writer behind a mutex, publishing after every write; each reader
/// thread reads through a handle of its own.
pub(crate) struct Evmap {
    id: u64,
    factory: evmap::ReadHandleFactory<u64, u64, (), Hasher>,
    writer: Mutex<evmap::WriteHandle<u64, u64, (), Hasher>>,
}

static EVMAP_IDS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's read handle, and the id of the map it reads.
    static EVMAP_READER: RefCell<Option<(u64, EvRead)>> = const { RefCell::new(None) };
}

impl BenchMap for Evmap {
    fn build() -> Self {
        let (read, write) = evmap::Options::default().with_hasher(hasher()).construct();
        Evmap {
            id: EVMAP_IDS.fetch_add(1, Ordering::Relaxed),
            factory: read.factory(),
            writer: Mutex::new(write),
        }
    }
    #[inline(always)]
    fn get(&self, key: u64) -> Option<u64> {
        EVMAP_READER.with(|cell| {
            let mut cell = cell.borrow_mut();
            if !matches!(&*cell, Some((id, _)) if *id == self.id) {
                *cell = Some((self.id, self.factory.handle()));
            }
            let (_, read) = cell.as_ref().unwrap();
            read.get_one(&key).map(|v| *v)
        })
    }
    fn insert(&self, key: u64, value: u64) {
        let mut w = self.writer.lock().unwrap();
        w.update(key, value);
        w.refresh();
    }
    fn remove(&self, key: u64) {
        let mut w = self.writer.lock().unwrap();
        w.empty(key);
        w.refresh();
    }
    fn fill(&self, keys: &[u64]) {
        let mut w = self.writer.lock().unwrap();
        for &k in keys {
            w.update(k, value_of(k));
        }
        w.refresh();
    }
}

/// Every row of the lookup tables, in order.
pub(crate) const ROWS: [&str; 12] = [
    "RcuHashMap, guard per lookup",
    "RcuHashMap, guard per 64 lookups",
    "std RwLock<hashbrown>",
    "parking_lot RwLock<hashbrown>",
    "DashMap",
    "papaya, pin per lookup",
    "flurry, pin per lookup",
    "scc::HashMap",
    "scc::HashIndex",
    "evmap",
    "RcuFlatMap, guard per lookup",
    "RcuFlatMap on a QSBR domain",
];

/// Row indices the ratios name.
pub(crate) const RCU: usize = 0;
pub(crate) const STD: usize = 2;
pub(crate) const PL: usize = 3;
pub(crate) const PAPAYA: usize = 5;
pub(crate) const FLAT: usize = 10;
pub(crate) const FLAT_QSBR: usize = 11;

/// Rows that take part in the one-thread write part and the memory part (the guard-per-64
/// row is the same map as row 0, the QSBR row the same as row 10 for writes; evmap is a
/// single-writer map that publishes in batches).
pub(crate) const WRITE_ROWS: [usize; 9] = [0, 2, 3, 4, 5, 6, 7, 8, 10];

/// Run `$body` with `$M` the type of row `$row`.
macro_rules! with_row {
    ($row:expr, $M:ident => $body:expr) => {
        match $row {
            0 => {
                type $M = $crate::maps::RcuPerLookup;
                $body
            }
            1 => {
                type $M = $crate::maps::RcuPer64;
                $body
            }
            2 => {
                type $M = $crate::maps::StdRwLock;
                $body
            }
            3 => {
                type $M = $crate::maps::PlRwLock;
                $body
            }
            4 => {
                type $M = $crate::maps::Dash;
                $body
            }
            5 => {
                type $M = $crate::maps::Papaya;
                $body
            }
            6 => {
                type $M = $crate::maps::Flurry;
                $body
            }
            7 => {
                type $M = $crate::maps::SccMap;
                $body
            }
            8 => {
                type $M = $crate::maps::SccIndex;
                $body
            }
            9 => {
                type $M = $crate::maps::Evmap;
                $body
            }
            10 => {
                type $M = $crate::maps::Flat;
                $body
            }
            _ => {
                type $M = $crate::maps::FlatQsbr;
                $body
            }
        }
    };
}
pub(crate) use with_row;

/// Keep the optimiser from dropping a sum.
pub(crate) fn consume(x: u64) {
    black_box(x);
}
