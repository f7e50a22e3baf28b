//! Connection tracking in miniature: a flow table read by every packet while a writer creates
//! and expires flows, on `rcukit::RcuHashMap` and on the concurrent maps people use today.
//!
//! # What the kernel does
//!
//! netfilter's conntrack keeps every connection in one hash table (`nf_conntrack_hash`).
//! Every packet looks its flow up (`__nf_conntrack_find_get`) under `rcu_read_lock()` with no
//! lock and no atomic on the bucket; new connections are inserted and expired ones removed
//! under a per-bucket spinlock, and the removed entry is freed after a grace period. Lookups
//! outnumber changes by orders of magnitude, and must not slow down when changes happen.
//!
//! # The model
//!
//! * A table of `flows` flows (default 100,000). A key is a 5-tuple (`FlowKey`: source and
//!   destination address, ports, protocol; 13 bytes of fields); a value is a small flow record
//!   (`FlowRecord`: id, creation and expiry times, packet and byte counters: 48 bytes).
//! * `P` packet threads (`--packet-threads`, default 1 and the number of cores) each look up
//!   one flow per packet: a flow picked uniformly among the live ones, or, for `miss_percent`
//!   of packets (5 %), a key that is never in the table (a packet of an unknown flow). Each
//!   lookup takes the map's read side once (one `read()` guard, one read lock, one pin ...),
//!   copies two fields of the record out and leaves.
//! * One writer thread creates a new flow and expires the oldest at a steady `churn_rate`
//!   (50,000 create+expire pairs per second by default), so the table stays at `flows` flows
//!   (the oldest flow expires when the newest is created; a flow lives `flows / churn_rate`
//!   seconds, 2 s by default). Its rate is paced, not flat out: it is what a busy host sees,
//!   and the writer's *achieved* rate is reported (it falls short when the map starves it).
//!
//! Each (map, packet-thread count) point runs `point` long, once per round; rounds interleave
//! the maps so that noise from elsewhere hits them alike, and a point's figures add up its
//! rounds.
//!
//! # Latency
//!
//! Every `sample_every`-th lookup (64) of each packet thread is timed alone with the CPU's
//! time-stamp counter (`rdtsc` between `lfence`s, calibrated against the monotonic clock; on
//! other CPUs, or without an invariant TSC, `Instant`). A timed section's own cost (measured
//! empty) is reported beside the percentiles and not subtracted. The other 63 lookups are not
//! timed, so the clock barely changes the throughput.
//!
//! # Checks
//!
//! Every hit must return the record of the key looked up (`wrong_records == 0`), no key of the
//! never-present kind may be found, and a flow that is live before the lookup starts and still
//! live after it ends must be found (`lost_flows == 0`: the writer publishes a new flow's id
//! only after inserting it and retires an old id before removing it, so the live window read
//! around a lookup brackets the flows it must find). The writer's expiry must find every flow
//! it removes. At the end the map holds exactly the live flows, and every record ever created
//! is dropped once the map is dropped and its deferred frees have run.
//!
//! # Maps
//!
//! | id | map | read side per packet |
//! |---|---|---|
//! | `rwlock-hashmap` (baseline) | `std::sync::RwLock<std::collections::HashMap>` | `read()` lock |
//! | `rcu-hashmap` | `rcukit::RcuHashMap` in a domain of its own | one `read()` guard |
//! | `dashmap` | `dashmap::DashMap` (default shards) | the shard's read lock |
//! | `papaya` | `papaya::HashMap` | `pin()` (a seize guard) |
//! | `flurry` | `flurry::HashMap` (its own seize collector) | `guard()` |
//! | `rculfhash` (feature `c-peers`) | liburcu's `cds_lfht`, memb flavor, auto-resize | `urcu_memb_read_lock()` (in C, one FFI call per lookup) |
//!
//! Every Rust map hashes with [`FlowBuild`] and is created with room for `flows`; the C table
//! computes the same function in C (`lab_lfht_hash`) and starts with the next power of two.

use super::{
    check_duration, check_range, check_threads, ser_ms, Common, Experiment, Rendered, Unavailable,
};
use crate::env::Environment;
use crate::measure::{self, per_sec, ratio, Counter, Summary};
use crate::plot::{self, Axis, Panel};
use crate::progress::Progress;
use crate::report::{self, Table};
use anyhow::{bail, Result};
use crossbeam_utils::CachePadded;
use rcukit::{Rcu, RcuHashMap};
use serde::{Serialize, Serializer};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::hint::black_box;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU64, AtomicU8};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// File stem and subcommand name.
pub const NAME: &str = "conntrack";

/// Maps the experiment knows but this build cannot run: liburcu's rculfhash needs the C peers.
#[cfg(not(feature = "c-peers"))]
pub const UNAVAILABLE: &[Unavailable] = &[Unavailable {
    scheme: "rculfhash",
    needs: "the `c-peers` cargo feature (liburcu's rculfhash: `sudo scripts/install-c-peers.sh`, \
            then `--features c-peers`)",
}];

/// Maps the experiment knows but this build cannot run (none with the C peers).
#[cfg(feature = "c-peers")]
pub const UNAVAILABLE: &[Unavailable] = &[];

/// The baseline every ratio is taken against.
pub const BASELINE: MapId = MapId::RwlockHashmap;

/// Settings.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Flows in the table (kept constant by the writer).
    pub flows: u64,
    /// Packet-thread counts to measure (default 1 and the number of cores).
    pub packet_threads: Vec<usize>,
    /// Percent of packets whose flow is not in the table.
    pub miss_percent: u32,
    /// Create+expire pairs per second the writer aims at (0: no writer).
    pub churn_rate: u64,
    /// Measuring time per (map, thread count) and round.
    #[serde(rename = "point_ms", serialize_with = "ser_ms")]
    pub point: Duration,
    /// Rounds; each measures every point once, the maps interleaved.
    pub rounds: usize,
    /// One lookup in this many is timed (per packet thread).
    pub sample_every: u32,
    /// The maps to measure, in table order.
    #[serde(serialize_with = "ser_ids")]
    pub maps: Vec<MapId>,
    /// Quick mode.
    pub quick: bool,
}

fn ser_ids<S: Serializer>(maps: &[MapId], s: S) -> std::result::Result<S::Ok, S::Error> {
    s.collect_seq(maps.iter().map(|m| m.id()))
}

impl Config {
    /// Defaults for `common`.
    pub fn new(common: &Common) -> Config {
        let mut packet_threads = vec![1, common.threads];
        packet_threads.dedup();
        Config {
            flows: 100_000,
            packet_threads,
            miss_percent: 5,
            churn_rate: 50_000,
            point: common.pick(Duration::from_millis(150), Duration::from_millis(400)),
            rounds: common.pick(2, 6),
            sample_every: 64,
            maps: MapId::all(),
            quick: common.quick,
        }
    }

    /// Reject impossible settings.
    pub fn validate(&self) -> Result<()> {
        check_range("--flows", self.flows, 1_000, 10_000_000)?;
        if self.packet_threads.is_empty() {
            bail!("--packet-threads needs at least one count");
        }
        for &n in &self.packet_threads {
            check_threads("--packet-threads", n)?;
        }
        check_range("--miss-percent", u64::from(self.miss_percent), 0, 100)?;
        check_range("--churn-rate", self.churn_rate, 0, 10_000_000)?;
        check_duration("--point", self.point)?;
        check_range("--rounds", self.rounds as u64, 1, 100)?;
        check_range("--sample-every", u64::from(self.sample_every), 1, 1 << 20)?;
        if self.maps.is_empty() {
            bail!("--maps needs at least one map");
        }
        Ok(())
    }
}

/// Flags of the `conntrack` subcommand.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Args {
    /// Flows in the table [default: 100000]
    #[arg(long)]
    pub flows: Option<u64>,
    /// Packet-thread counts, comma-separated [default: 1 and the number of cores]
    #[arg(long, value_delimiter = ',')]
    pub packet_threads: Vec<usize>,
    /// Percent of packets whose flow is not in the table [default: 5]
    #[arg(long)]
    pub miss_percent: Option<u32>,
    /// Create+expire pairs per second the writer aims at; 0 runs no writer [default: 50000]
    #[arg(long)]
    pub churn_rate: Option<u64>,
    /// Measuring time per (map, thread count) and round [default: 150ms quick, 400ms full]
    #[arg(long, value_parser = crate::cli::parse_duration)]
    pub point: Option<Duration>,
    /// Rounds, the maps interleaved in each [default: 2 quick, 6 full]
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Time one lookup in this many [default: 64]
    #[arg(long)]
    pub sample_every: Option<u32>,
    /// Maps to measure, comma-separated (rwlock-hashmap, rcu-hashmap, dashmap, papaya,
    /// flurry, and with the c-peers feature rculfhash) [default: all]
    #[arg(long, value_delimiter = ',', value_parser = parse_map)]
    pub maps: Vec<MapId>,
}

impl Args {
    /// Apply the flags given on top of `cfg`.
    pub fn apply(&self, cfg: &mut Config) {
        if let Some(v) = self.flows {
            cfg.flows = v;
        }
        if !self.packet_threads.is_empty() {
            cfg.packet_threads = self.packet_threads.clone();
        }
        if let Some(v) = self.miss_percent {
            cfg.miss_percent = v;
        }
        if let Some(v) = self.churn_rate {
            cfg.churn_rate = v;
        }
        if let Some(v) = self.point {
            cfg.point = v;
        }
        if let Some(v) = self.rounds {
            cfg.rounds = v;
        }
        if let Some(v) = self.sample_every {
            cfg.sample_every = v;
        }
        if !self.maps.is_empty() {
            cfg.maps = self.maps.clone();
        }
    }
}

/// Parse a map id for `--maps`.
pub fn parse_map(s: &str) -> std::result::Result<MapId, String> {
    let s = s.trim();
    if let Some(m) = MapId::all().into_iter().find(|m| m.id() == s) {
        return Ok(m);
    }
    if UNAVAILABLE.iter().any(|u| u.scheme == s) {
        return Err(format!(
            "map '{s}' is not in this build (it needs the c-peers feature)"
        ));
    }
    let known: Vec<&str> = MapId::all().iter().map(|m| m.id()).collect();
    Err(format!("unknown map '{s}' (known: {})", known.join(", ")))
}

// ----------------------------------------------------------------------------------------------
// Keys, records and the hash

/// A flow's 5-tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FlowKey {
    /// Source IPv4 address.
    pub src: u32,
    /// Destination IPv4 address.
    pub dst: u32,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
}

/// The protocol of keys that are never in the table (SCTP: no flow of the model uses it).
const ABSENT_PROTO: u8 = 132;

impl FlowKey {
    /// The key of flow `id` (one-to-one for ids below 2^40): a client in 10.0.0.0/8 talking to
    /// one of a few servers on 443, 80, 53 (UDP) or 22.
    pub fn of(id: u64) -> FlowKey {
        let dport = [443, 80, 53, 22][((id >> 3) & 3) as usize];
        FlowKey {
            src: 0x0A00_0000 | ((id >> 16) as u32 & 0x00FF_FFFF),
            dst: 0xC633_6400 | (id % 97) as u32,
            sport: id as u16,
            dport,
            proto: if dport == 53 { 17 } else { 6 },
        }
    }

    /// A key like flow `id`'s that no flow ever has (a packet of an unknown connection).
    pub fn absent(id: u64) -> FlowKey {
        FlowKey {
            proto: ABSENT_PROTO,
            ..FlowKey::of(id)
        }
    }

    /// The key as two words: what is hashed and what the C table compares.
    #[inline]
    pub fn words(&self) -> (u64, u64) {
        (
            (u64::from(self.src) << 32) | u64::from(self.dst),
            (u64::from(self.sport) << 24) | (u64::from(self.dport) << 8) | u64::from(self.proto),
        )
    }
}

impl Hash for FlowKey {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        let (w0, w1) = self.words();
        state.write_u64(w0);
        state.write_u64(w1);
    }
}

/// A flow's record. Counts its own drop, so that the run can check every record is freed.
#[derive(Debug)]
pub struct FlowRecord {
    /// The flow's id.
    pub id: u64,
    /// When it was created (the writer's count of creations).
    pub created: u64,
    /// When it expires (on the same clock).
    pub expires: u64,
    /// Packets seen.
    pub packets: u64,
    /// Bytes seen.
    pub bytes: u64,
    dropped: &'static AtomicU64,
}

impl FlowRecord {
    fn new(id: u64, flows: u64, dropped: &'static AtomicU64) -> FlowRecord {
        FlowRecord {
            id,
            created: id,
            expires: id + flows,
            packets: 1,
            bytes: 64,
            dropped,
        }
    }

    /// What a lookup copies out of the record while the read side is held.
    #[inline]
    fn seen(&self) -> (u64, u64) {
        (self.id, self.expires)
    }
}

impl Drop for FlowRecord {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Relaxed);
    }
}

const HASH_SEED: u64 = 0x243F_6A88_85A3_08D3;
const HASH_MUL: u64 = 0x9E37_79B9_7F4A_7C15;

#[inline]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// The hasher every map of the experiment uses: per 64-bit word, `state = fold(state ^ word,
/// K)`, where `fold` is the folded 64×64→128-bit multiply (low half xor high half) that
/// foldhash and wyhash mix with; a fixed seed. The C table computes the same function
/// (`lab_lfht_hash`). Fast and well mixed in every bit; not meant to resist chosen keys.
#[derive(Clone, Copy, Debug)]
pub struct FlowHasher {
    state: u64,
}

impl Hasher for FlowHasher {
    #[inline]
    fn write_u64(&mut self, word: u64) {
        self.state = fold(self.state ^ word, HASH_MUL);
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.write_u64(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.state
    }
}

/// Builds [`FlowHasher`]s (the `S` of every Rust map here).
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowBuild;

impl BuildHasher for FlowBuild {
    type Hasher = FlowHasher;

    #[inline]
    fn build_hasher(&self) -> FlowHasher {
        FlowHasher { state: HASH_SEED }
    }
}

/// The hash of `key` (what every Rust map computes, and the C table's `lab_lfht_hash`).
pub fn flow_hash(key: &FlowKey) -> u64 {
    FlowBuild.hash_one(key)
}

const HASHER_DESCRIPTION: &str = "FlowHasher: the key's two 64-bit words each mixed in with a \
    folded 64x64->128-bit multiply (foldhash/wyhash style), fixed seed; the same function in \
    C for rculfhash";

// ----------------------------------------------------------------------------------------------
// The maps

/// The maps this build runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapId {
    /// `std::sync::RwLock<HashMap>` (the baseline).
    RwlockHashmap,
    /// `rcukit::RcuHashMap`.
    RcuHashmap,
    /// `dashmap::DashMap`.
    Dashmap,
    /// `papaya::HashMap`.
    Papaya,
    /// `flurry::HashMap`.
    Flurry,
    /// liburcu's rculfhash (C).
    #[cfg(feature = "c-peers")]
    Rculfhash,
}

impl Serialize for MapId {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.id())
    }
}

impl MapId {
    /// Every map of this build, the baseline first.
    pub fn all() -> Vec<MapId> {
        #[allow(unused_mut)]
        let mut v = vec![
            MapId::RwlockHashmap,
            MapId::RcuHashmap,
            MapId::Dashmap,
            MapId::Papaya,
            MapId::Flurry,
        ];
        #[cfg(feature = "c-peers")]
        v.push(MapId::Rculfhash);
        v
    }

    /// Short id.
    pub fn id(self) -> &'static str {
        match self {
            MapId::RwlockHashmap => "rwlock-hashmap",
            MapId::RcuHashmap => "rcu-hashmap",
            MapId::Dashmap => "dashmap",
            MapId::Papaya => "papaya",
            MapId::Flurry => "flurry",
            #[cfg(feature = "c-peers")]
            MapId::Rculfhash => "rculfhash",
        }
    }

    /// What it is and what a lookup takes.
    pub fn describe(self) -> &'static str {
        match self {
            MapId::RwlockHashmap => {
                "std::sync::RwLock<std::collections::HashMap>: read lock per lookup"
            }
            MapId::RcuHashmap => "rcukit::RcuHashMap (own domain): one read() guard per lookup",
            MapId::Dashmap => "dashmap::DashMap 6 (default shards): shard read lock per lookup",
            MapId::Papaya => "papaya::HashMap 0.2: pin() per lookup",
            MapId::Flurry => "flurry::HashMap 0.5 (own collector): guard() per lookup",
            #[cfg(feature = "c-peers")]
            MapId::Rculfhash => {
                "liburcu rculfhash (memb flavor, auto-resize): urcu_memb_read_lock() per lookup, \
                 one FFI call"
            }
        }
    }
}

/// What every map offers the experiment. `Reg` is a thread's registration (liburcu's
/// threads must be registered readers; the Rust maps need none).
trait FlowTable: Sync {
    type Reg;
    fn register(&self) -> Self::Reg;
    /// (id, expiry) of the flow, under one read-side section.
    fn lookup(&self, reg: &Self::Reg, key: &FlowKey) -> Option<(u64, u64)>;
    fn insert(&self, reg: &Self::Reg, key: FlowKey, rec: FlowRecord);
    /// Whether the flow was there.
    fn remove(&self, reg: &Self::Reg, key: &FlowKey) -> bool;
    fn len(&self, reg: &Self::Reg) -> u64;
}

type RcuMap = RcuHashMap<FlowKey, FlowRecord, FlowBuild, Arc<Rcu>>;

impl FlowTable for RcuMap {
    type Reg = ();
    fn register(&self) {}
    #[inline]
    fn lookup(&self, _: &(), key: &FlowKey) -> Option<(u64, u64)> {
        let guard = self.domain().read();
        self.get(key, &guard).map(FlowRecord::seen)
    }
    fn insert(&self, _: &(), key: FlowKey, rec: FlowRecord) {
        RcuHashMap::insert(self, key, rec);
    }
    fn remove(&self, _: &(), key: &FlowKey) -> bool {
        RcuHashMap::remove(self, key)
    }
    fn len(&self, _: &()) -> u64 {
        RcuHashMap::len(self) as u64
    }
}

type StdMap = std::sync::RwLock<HashMap<FlowKey, FlowRecord, FlowBuild>>;

fn read_std(m: &StdMap) -> std::sync::RwLockReadGuard<'_, HashMap<FlowKey, FlowRecord, FlowBuild>> {
    m.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write_std(
    m: &StdMap,
) -> std::sync::RwLockWriteGuard<'_, HashMap<FlowKey, FlowRecord, FlowBuild>> {
    m.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl FlowTable for StdMap {
    type Reg = ();
    fn register(&self) {}
    #[inline]
    fn lookup(&self, _: &(), key: &FlowKey) -> Option<(u64, u64)> {
        read_std(self).get(key).map(FlowRecord::seen)
    }
    fn insert(&self, _: &(), key: FlowKey, rec: FlowRecord) {
        let old = write_std(self).insert(key, rec);
        drop(old); // outside the lock
    }
    fn remove(&self, _: &(), key: &FlowKey) -> bool {
        let old = write_std(self).remove(key);
        old.is_some()
    }
    fn len(&self, _: &()) -> u64 {
        read_std(self).len() as u64
    }
}

type DashFlows = dashmap::DashMap<FlowKey, FlowRecord, FlowBuild>;

impl FlowTable for DashFlows {
    type Reg = ();
    fn register(&self) {}
    #[inline]
    fn lookup(&self, _: &(), key: &FlowKey) -> Option<(u64, u64)> {
        self.get(key).map(|r| r.seen())
    }
    fn insert(&self, _: &(), key: FlowKey, rec: FlowRecord) {
        dashmap::DashMap::insert(self, key, rec);
    }
    fn remove(&self, _: &(), key: &FlowKey) -> bool {
        dashmap::DashMap::remove(self, key).is_some()
    }
    fn len(&self, _: &()) -> u64 {
        dashmap::DashMap::len(self) as u64
    }
}

type PapayaFlows = papaya::HashMap<FlowKey, FlowRecord, FlowBuild>;

impl FlowTable for PapayaFlows {
    type Reg = ();
    fn register(&self) {}
    #[inline]
    fn lookup(&self, _: &(), key: &FlowKey) -> Option<(u64, u64)> {
        self.pin().get(key).map(FlowRecord::seen)
    }
    fn insert(&self, _: &(), key: FlowKey, rec: FlowRecord) {
        self.pin().insert(key, rec);
    }
    fn remove(&self, _: &(), key: &FlowKey) -> bool {
        self.pin().remove(key).is_some()
    }
    fn len(&self, _: &()) -> u64 {
        papaya::HashMap::len(self) as u64
    }
}

type FlurryFlows = flurry::HashMap<FlowKey, FlowRecord, FlowBuild>;

impl FlowTable for FlurryFlows {
    type Reg = ();
    fn register(&self) {}
    #[inline]
    fn lookup(&self, _: &(), key: &FlowKey) -> Option<(u64, u64)> {
        let guard = self.guard();
        self.get(key, &guard).map(FlowRecord::seen)
    }
    fn insert(&self, _: &(), key: FlowKey, rec: FlowRecord) {
        let guard = self.guard();
        flurry::HashMap::insert(self, key, rec, &guard);
    }
    fn remove(&self, _: &(), key: &FlowKey) -> bool {
        let guard = self.guard();
        flurry::HashMap::remove(self, key, &guard).is_some()
    }
    fn len(&self, _: &()) -> u64 {
        flurry::HashMap::len(self) as u64
    }
}

/// liburcu's rculfhash. The C table keeps its own copy of the record's fields; the Rust record
/// is dropped on insertion (and counted there), the C node is counted when its grace period
/// has freed it.
#[cfg(feature = "c-peers")]
impl FlowTable for crate::c_peers::Lfht {
    type Reg = crate::c_peers::LfhtThread;
    fn register(&self) -> Self::Reg {
        crate::c_peers::Lfht::register(self)
    }
    #[inline]
    fn lookup(&self, reg: &Self::Reg, key: &FlowKey) -> Option<(u64, u64)> {
        let (w0, w1) = key.words();
        crate::c_peers::Lfht::lookup(self, reg, w0, w1)
    }
    fn insert(&self, reg: &Self::Reg, key: FlowKey, rec: FlowRecord) {
        let (w0, w1) = key.words();
        let r = crate::c_peers::LfhtRecord {
            id: rec.id,
            created: rec.created,
            expires: rec.expires,
            packets: rec.packets,
            bytes: rec.bytes,
        };
        crate::c_peers::Lfht::insert(self, reg, w0, w1, r);
        // The record itself is not stored: forget it without counting a drop (the C node's
        // free is counted instead).
        std::mem::forget(rec);
    }
    fn remove(&self, reg: &Self::Reg, key: &FlowKey) -> bool {
        let (w0, w1) = key.words();
        crate::c_peers::Lfht::remove(self, reg, w0, w1)
    }
    fn len(&self, reg: &Self::Reg) -> u64 {
        crate::c_peers::Lfht::len(self, reg)
    }
}

/// One map, built. (A handful exist per run, so the variants' sizes do not matter.)
#[allow(clippy::large_enum_variant)]
enum AnyMap {
    Std(StdMap),
    Rcu(RcuMap, Arc<Rcu>),
    Dash(DashFlows),
    Papaya(PapayaFlows),
    Flurry(FlurryFlows),
    #[cfg(feature = "c-peers")]
    Lfht(crate::c_peers::Lfht),
}

/// Run `$body` with `$t` bound to the concrete map (so each map gets its own monomorphic
/// packet loop).
macro_rules! with_map {
    ($map:expr, $t:ident => $body:expr) => {
        match $map {
            AnyMap::Std($t) => $body,
            AnyMap::Rcu($t, _) => $body,
            AnyMap::Dash($t) => $body,
            AnyMap::Papaya($t) => $body,
            AnyMap::Flurry($t) => $body,
            #[cfg(feature = "c-peers")]
            AnyMap::Lfht($t) => $body,
        }
    };
}

impl AnyMap {
    fn build(id: MapId, capacity: usize) -> Result<AnyMap> {
        Ok(match id {
            MapId::RwlockHashmap => AnyMap::Std(std::sync::RwLock::new(
                HashMap::with_capacity_and_hasher(capacity, FlowBuild),
            )),
            MapId::RcuHashmap => {
                let rcu = Arc::new(Rcu::builder().name("lab-conntrack").build()?);
                let map = RcuHashMap::builder()
                    .capacity(capacity)
                    .hasher(FlowBuild)
                    .domain(rcu.clone())
                    .build()?;
                AnyMap::Rcu(map, rcu)
            }
            MapId::Dashmap => AnyMap::Dash(dashmap::DashMap::with_capacity_and_hasher(
                capacity, FlowBuild,
            )),
            MapId::Papaya => AnyMap::Papaya(
                papaya::HashMap::builder()
                    .capacity(capacity)
                    .hasher(FlowBuild)
                    .build(),
            ),
            MapId::Flurry => AnyMap::Flurry(flurry::HashMap::with_capacity_and_hasher(
                capacity, FlowBuild,
            )),
            #[cfg(feature = "c-peers")]
            MapId::Rculfhash => AnyMap::Lfht(
                crate::c_peers::Lfht::new(capacity as u64)
                    .ok_or_else(|| anyhow::anyhow!("liburcu could not allocate an rculfhash"))?,
            ),
        })
    }

    /// Drop the map and wait until every record it held or retired is freed; the number of
    /// records freed over its life (for the C table: nodes freed).
    fn teardown(self, dropped: &AtomicU64) -> u64 {
        match self {
            AnyMap::Rcu(map, rcu) => {
                drop(map);
                let deadline = Instant::now() + Duration::from_secs(10);
                while rcu.stats().callbacks_pending > 0 && Instant::now() < deadline {
                    rcu.barrier();
                }
                dropped.load(Relaxed)
            }
            #[cfg(feature = "c-peers")]
            AnyMap::Lfht(mut table) => table.destroy(),
            other => {
                drop(other);
                dropped.load(Relaxed)
            }
        }
    }
}

// ----------------------------------------------------------------------------------------------
// The clock for latency samples

/// How latency samples are taken.
#[derive(Clone, Debug, Serialize)]
pub struct TimerFacts {
    /// `rdtsc` or `instant`.
    pub kind: &'static str,
    /// Clock ticks per nanosecond (calibrated against `Instant` for the TSC).
    pub ticks_per_ns: f64,
    /// Median cost of an empty timed section, nanoseconds (included in every sample, not
    /// subtracted).
    pub overhead_ns: f64,
    /// The smallest step the clock was seen to take, nanoseconds (samples are multiples of
    /// it: AMD's TSC, for one, moves in steps of 10 ns).
    pub resolution_ns: f64,
}

#[derive(Clone, Copy, Debug)]
struct Clock {
    tsc: bool,
    epoch: Instant,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            tsc: tsc_usable(),
            epoch: Instant::now(),
        }
    }

    #[inline(always)]
    fn ticks(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.tsc {
            return rdtsc_fenced();
        }
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Calibrate (about 30 ms) and measure the empty section.
    fn facts(&self) -> TimerFacts {
        let ticks_per_ns = if self.tsc {
            let (i0, k0) = (Instant::now(), self.ticks());
            measure::spin_for(Duration::from_millis(30));
            let (k1, i1) = (self.ticks(), Instant::now());
            (k1.wrapping_sub(k0)) as f64 / (i1 - i0).as_nanos().max(1) as f64
        } else {
            1.0
        };
        let mut empty: Vec<u64> = (0..10_001)
            .map(|_| {
                let a = self.ticks();
                let b = self.ticks();
                b.wrapping_sub(a)
            })
            .collect();
        empty.sort_unstable();
        // Every reading is a multiple of the clock's step: the gcd of the differences.
        let step = empty
            .iter()
            .copied()
            .filter(|&d| d > 0)
            .fold(0u64, gcd)
            .max(1);
        TimerFacts {
            kind: if self.tsc { "rdtsc" } else { "instant" },
            ticks_per_ns,
            overhead_ns: empty[empty.len() / 2] as f64 / ticks_per_ns,
            resolution_ns: step as f64 / ticks_per_ns,
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(unused_unsafe)]
fn rdtsc_fenced() -> u64 {
    use std::arch::x86_64::{_mm_lfence, _rdtsc};
    // SAFETY: `lfence` (SSE2) and `rdtsc` exist on every x86-64 CPU and touch no memory.
    unsafe {
        _mm_lfence();
        let t = _rdtsc();
        _mm_lfence();
        t
    }
}

/// An invariant TSC (`constant_tsc` and `nonstop_tsc` in `/proc/cpuinfo`) on x86-64.
fn tsc_usable() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return false;
    };
    info.lines()
        .find(|l| l.starts_with("flags"))
        .map(|l| {
            let flags: Vec<&str> = l.split_whitespace().collect();
            flags.contains(&"constant_tsc") && flags.contains(&"nonstop_tsc")
        })
        .unwrap_or(false)
}

// ----------------------------------------------------------------------------------------------
// Measurement

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

/// The live flows: ids in `tail..head`. The writer stores `head + 1` after inserting flow
/// `head`, and `tail + 1` before removing flow `tail`.
struct Window {
    head: CachePadded<AtomicU64>,
    tail: CachePadded<AtomicU64>,
}

/// One map's state across its points.
struct MapState {
    id: MapId,
    map: AnyMap,
    window: Window,
    dropped: &'static AtomicU64,
    created: u64,
    fill_ms: f64,
}

/// What one packet thread measured (only while the phase was `MEASURE`).
#[derive(Default)]
struct PacketOut {
    lookups: u64,
    hits: u64,
    misses: u64,
    stale_misses: u64,
    wrong: u64,
    lost: u64,
    samples: Vec<u64>,
}

#[derive(Default)]
struct WriterOut {
    /// Pairs done while measuring.
    pairs: u64,
    /// Pairs done in the whole point.
    pairs_total: u64,
    /// Expiries that found no flow (must be 0).
    expire_misses: u64,
    /// Pairs skipped because the writer was more than 10 ms behind its schedule.
    skipped: u64,
}

#[inline]
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[allow(clippy::too_many_arguments)]
fn packet_loop<M: FlowTable>(
    map: &M,
    window: &Window,
    phase: &AtomicU8,
    progress: &Counter,
    clock: Clock,
    seed: u64,
    miss_percent: u32,
    sample_every: u32,
) -> PacketOut {
    let reg = map.register();
    let mut out = PacketOut {
        samples: Vec::with_capacity(1 << 16),
        ..PacketOut::default()
    };
    let miss_below = u64::from(miss_percent) * 65_536 / 100;
    let mut rng = seed | 1;
    let mut acc = 0u64;
    let mut done = 0u64;
    loop {
        let ph = phase.load(Acquire);
        if ph == STOP {
            break;
        }
        let measuring = ph == MEASURE;
        let tail = window.tail.load(Acquire);
        let head = window.head.load(Acquire);
        let span = head.saturating_sub(tail).max(1);
        let (mut hits, mut misses, mut stale, mut wrong, mut lost) = (0u64, 0u64, 0, 0, 0);
        for i in 0..sample_every {
            let r = xorshift(&mut rng);
            let id = tail + (((r >> 32) * span) >> 32);
            let absent = (r & 0xFFFF) < miss_below;
            let key = if absent {
                FlowKey::absent(id)
            } else {
                FlowKey::of(id)
            };
            let found = if i == 0 {
                let t0 = clock.ticks();
                let found = map.lookup(&reg, &key);
                let t1 = clock.ticks();
                if measuring {
                    out.samples.push(t1.wrapping_sub(t0));
                }
                found
            } else {
                map.lookup(&reg, &key)
            };
            match found {
                Some((got, expires)) => {
                    hits += 1;
                    acc = acc.wrapping_add(expires);
                    if absent || got != id {
                        wrong += 1;
                    }
                }
                None => {
                    misses += 1;
                    if !absent {
                        // Live before the lookup (`tail <= id < head`); still live after it?
                        if id >= window.tail.load(Acquire) {
                            lost += 1;
                        } else {
                            stale += 1;
                        }
                    }
                }
            }
        }
        done += u64::from(sample_every);
        progress.publish(done);
        if measuring {
            out.lookups += u64::from(sample_every);
            out.hits += hits;
            out.misses += misses;
            out.stale_misses += stale;
            out.wrong += wrong;
            out.lost += lost;
        }
    }
    black_box(acc);
    out
}

fn writer_loop<M: FlowTable>(
    map: &M,
    window: &Window,
    phase: &AtomicU8,
    rate: u64,
    flows: u64,
    dropped: &'static AtomicU64,
) -> WriterOut {
    let reg = map.register();
    let mut out = WriterOut::default();
    let start = Instant::now();
    let max_backlog = (rate / 100).max(1);
    let mut scheduled = 0u64;
    loop {
        let ph = phase.load(Acquire);
        if ph == STOP {
            break;
        }
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        if due > scheduled + max_backlog {
            out.skipped += due - max_backlog - scheduled;
            scheduled = due - max_backlog;
        }
        if scheduled >= due {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        let n = (due - scheduled).min(64);
        for _ in 0..n {
            let head = window.head.load(Relaxed);
            map.insert(
                &reg,
                FlowKey::of(head),
                FlowRecord::new(head, flows, dropped),
            );
            window.head.store(head + 1, Release);
            let tail = window.tail.load(Relaxed);
            window.tail.store(tail + 1, Release);
            if !map.remove(&reg, &FlowKey::of(tail)) {
                out.expire_misses += 1;
            }
        }
        scheduled += n;
        out.pairs_total += n;
        if ph == MEASURE {
            out.pairs += n;
        }
    }
    out
}

/// Insert flows `0..flows` from the calling thread.
fn fill<M: FlowTable>(map: &M, flows: u64, dropped: &'static AtomicU64) {
    let reg = map.register();
    for i in 0..flows {
        map.insert(&reg, FlowKey::of(i), FlowRecord::new(i, flows, dropped));
    }
}

/// The map's `len()`, from the calling thread.
fn len_of<M: FlowTable>(map: &M) -> u64 {
    let reg = map.register();
    map.len(&reg)
}

/// One (map, thread count) point, accumulated over the rounds.
#[derive(Default)]
struct Acc {
    seconds: f64,
    lookups: u64,
    per_thread: Vec<u64>,
    hits: u64,
    misses: u64,
    stale: u64,
    wrong: u64,
    lost: u64,
    samples: Vec<u64>,
    writer_pairs: u64,
    expire_misses: u64,
    skipped: u64,
    /// Lookups/s of each round.
    rounds: Vec<f64>,
}

#[allow(clippy::too_many_arguments)]
fn measure_point<M: FlowTable>(
    map: &M,
    window: &Window,
    threads: usize,
    cfg: &Config,
    clock: Clock,
    seed: u64,
    dropped: &'static AtomicU64,
    acc: &mut Acc,
) -> Result<u64> {
    let phase = AtomicU8::new(WARMUP);
    let counters: Vec<Counter> = (0..threads).map(|_| Counter::default()).collect();
    std::thread::scope(|s| -> Result<u64> {
        let phase = &phase;
        let writer = if cfg.churn_rate > 0 {
            Some(super::spawn_scoped(s, "conntrack-writer", move || {
                writer_loop(map, window, phase, cfg.churn_rate, cfg.flows, dropped)
            })?)
        } else {
            None
        };
        let mut packets = Vec::new();
        for (t, counter) in counters.iter().enumerate() {
            let seed = seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            packets.push(super::spawn_scoped(
                s,
                &format!("conntrack-p{t}"),
                move || {
                    packet_loop(
                        map,
                        window,
                        phase,
                        counter,
                        clock,
                        seed,
                        cfg.miss_percent,
                        cfg.sample_every,
                    )
                },
            )?);
        }
        // Warm up until every packet thread has made a pass (a thread may start late on a
        // loaded machine); a deadline bounds the wait.
        let deadline = Instant::now() + Duration::from_secs(10);
        std::thread::sleep(Duration::from_millis(20));
        while counters.iter().any(|c| c.get() == 0) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        phase.store(MEASURE, Release);
        let (c0, t0) = (measure::sum(&counters), Instant::now());
        std::thread::sleep(cfg.point);
        while measure::sum(&counters) == c0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let t1 = Instant::now();
        phase.store(STOP, Release);
        let mut outs = Vec::new();
        for h in packets {
            outs.push(super::join(h)?);
        }
        let w = match writer {
            Some(h) => super::join(h)?,
            None => WriterOut::default(),
        };
        acc.seconds += (t1 - t0).as_secs_f64();
        acc.per_thread.resize(threads, 0);
        acc.rounds
            .push(per_sec(outs.iter().map(|o| o.lookups).sum(), t1 - t0));
        for (i, o) in outs.into_iter().enumerate() {
            acc.lookups += o.lookups;
            acc.per_thread[i] += o.lookups;
            acc.hits += o.hits;
            acc.misses += o.misses;
            acc.stale += o.stale_misses;
            acc.wrong += o.wrong;
            acc.lost += o.lost;
            acc.samples.extend(o.samples);
        }
        acc.writer_pairs += w.pairs;
        acc.expire_misses += w.expire_misses;
        acc.skipped += w.skipped;
        Ok(w.pairs_total)
    })
}

// ----------------------------------------------------------------------------------------------
// Results

/// The writer's figures at one point.
#[derive(Clone, Debug, Serialize)]
pub struct WriterFigures {
    /// Create+expire pairs per second aimed at.
    pub target_per_s: f64,
    /// Pairs per second achieved while the packet threads were measured.
    pub achieved_per_s: f64,
    /// achieved / target (1 when the map let the writer keep its pace).
    pub share_of_target: Option<f64>,
    /// Pairs the writer had to skip because it fell more than 10 ms behind its schedule.
    pub skipped: u64,
    /// Expiries that found no flow to remove (must be 0).
    pub expire_misses: u64,
}

/// Ratios to the baseline (`rwlock-hashmap`) at the same thread count, same run.
#[derive(Clone, Debug, Serialize)]
pub struct VsBaseline {
    /// lookups/s ÷ the baseline's (higher is better).
    pub lookups: Option<f64>,
    /// p50 latency ÷ the baseline's (lower is better).
    pub p50: Option<f64>,
    /// p99 latency ÷ the baseline's (lower is better).
    pub p99: Option<f64>,
    /// writer pairs/s ÷ the baseline's.
    pub writer: Option<f64>,
}

/// One (map, packet-thread count) point, all rounds together.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// Packet threads.
    pub packet_threads: usize,
    /// Seconds measured (all rounds).
    pub seconds: f64,
    /// Lookups measured.
    pub lookups: u64,
    /// Lookups per second, all packet threads together.
    pub lookups_per_s: f64,
    /// Lookups per second of each packet thread.
    pub lookups_per_s_per_thread: Vec<f64>,
    /// Lookups per second, all threads, in each round (their spread shows the noise).
    pub lookups_per_s_by_round: Vec<f64>,
    /// Sampled single-lookup latency, nanoseconds (timer overhead included).
    pub latency_ns: Summary,
    /// Lookups that found their flow.
    pub hits: u64,
    /// Lookups that found nothing (absent keys, and live keys expired during the lookup).
    pub misses: u64,
    /// misses ÷ lookups.
    pub miss_share: f64,
    /// Of the misses: live keys that the writer expired while they were looked up (benign).
    pub stale_misses: u64,
    /// Hits that returned another flow's record or found a never-present key (must be 0).
    pub wrong_records: u64,
    /// Live flows (before and after the lookup) not found (must be 0).
    pub lost_flows: u64,
    /// The writer.
    pub writer: WriterFigures,
    /// Ratios to the baseline.
    pub vs_baseline: VsBaseline,
}

/// One map's figures.
#[derive(Clone, Debug, Serialize)]
pub struct MapResult {
    /// Map id.
    pub map: MapId,
    /// What it is.
    pub description: &'static str,
    /// Time to insert the initial flows from one thread, milliseconds.
    pub fill_ms: f64,
    /// One point per packet-thread count.
    pub points: Vec<Point>,
    /// Flows in the map at the end (`len()`).
    pub flows_at_end: u64,
    /// Flows that should be there (the live window).
    pub flows_expected: u64,
    /// Records created over the run (initial flows and the writer's).
    pub records_created: u64,
    /// Records freed once the map was dropped and its deferred frees had run (must equal
    /// `records_created`).
    pub records_freed: u64,
}

/// The claim, checked in this run.
#[derive(Clone, Debug, Serialize)]
pub struct Claim {
    /// What is claimed.
    pub claim: String,
    /// The map compared with.
    pub against: &'static str,
    /// Packet threads of the comparison.
    pub packet_threads: usize,
    /// rcu-hashmap lookups/s ÷ the other map's (all rounds together).
    pub ratio: Option<f64>,
    /// The same ratio round by round (each round measures the two maps close together in
    /// time): its spread shows how much the machine's noise moved it.
    pub ratio_by_round: Vec<f64>,
    /// The ratio the claim needs.
    pub needed: f64,
    /// Whether it holds (`null`: not measured in this run).
    pub holds: Option<bool>,
    /// The other map's writer pace (achieved ÷ target) at that point: below 0.9 its lookups
    /// were served with less writing going on.
    pub their_writer_share: Option<f64>,
}

/// The experiment's result.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `conntrack`.
    pub experiment: &'static str,
    /// Where and how it ran.
    pub env: Environment,
    /// Settings.
    pub config: Config,
    /// The baseline of every ratio.
    pub baseline: &'static str,
    /// The hash function of every map.
    pub hasher: &'static str,
    /// How latency is measured.
    pub latency_method: String,
    /// The clock behind the latency samples.
    pub timer: TimerFacts,
    /// Every map run.
    pub maps: Vec<MapResult>,
    /// The claims, checked at the most packet threads with the writer running.
    pub claims: Vec<Claim>,
    /// Maps not in this build.
    pub not_available: Vec<Unavailable>,
    /// One-minute load average at the end of the run (`env` has it at the start): above the
    /// core count, other work shared the machine and the figures are noisier.
    pub load_average_1m_end: Option<f64>,
}

impl Report {
    /// One map's result.
    pub fn map(&self, id: MapId) -> Option<&MapResult> {
        self.maps.iter().find(|m| m.map == id)
    }

    fn point(&self, id: MapId, threads: usize) -> Option<&Point> {
        self.map(id)?
            .points
            .iter()
            .find(|p| p.packet_threads == threads)
    }

    fn max_threads(&self) -> usize {
        self.config
            .packet_threads
            .iter()
            .copied()
            .max()
            .unwrap_or(1)
    }
}

/// Run the experiment.
pub fn run(cfg: &Config, progress: &Progress) -> Result<Report> {
    cfg.validate()?;
    let env = Environment::collect(cfg.quick);
    let steps = cfg.maps.len() * (1 + cfg.rounds * cfg.packet_threads.len());
    let task = progress.task(NAME, steps as u64);
    let clock = Clock::new();
    let timer = clock.facts();

    // Build and fill every map.
    let mut states = Vec::new();
    for &id in &cfg.maps {
        task.message(format!("filling {} with {} flows", id.id(), cfg.flows));
        // Every record of this map counts its drop here; a counter of its own (8 bytes,
        // leaked so that records can hold a plain `&'static`) keeps runs and maps apart.
        let dropped: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        let map = AnyMap::build(id, cfg.flows as usize)?;
        let t = Instant::now();
        with_map!(&map, m => fill(m, cfg.flows, dropped));
        let fill_ms = measure::ms(t.elapsed());
        states.push(MapState {
            id,
            map,
            window: Window {
                head: CachePadded::new(AtomicU64::new(cfg.flows)),
                tail: CachePadded::new(AtomicU64::new(0)),
            },
            dropped,
            created: cfg.flows,
            fill_ms,
        });
        task.inc();
    }

    let mut accs: Vec<Vec<Acc>> = (0..states.len())
        .map(|_| {
            (0..cfg.packet_threads.len())
                .map(|_| Acc::default())
                .collect()
        })
        .collect();
    let mut seed = 0x5EED_C0FF_EE00_0001u64;
    for round in 0..cfg.rounds {
        for (ti, &threads) in cfg.packet_threads.iter().enumerate() {
            for (si, st) in states.iter_mut().enumerate() {
                task.message(format!(
                    "round {}/{}: {} with {threads} packet thread(s)",
                    round + 1,
                    cfg.rounds,
                    st.id.id()
                ));
                seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let acc = &mut accs[si][ti];
                let created = with_map!(&st.map, m => measure_point(
                    m, &st.window, threads, cfg, clock, seed, st.dropped, acc
                ))?;
                st.created += created;
                task.inc();
            }
        }
    }
    task.finish();

    // Points, then the checks at the end and the teardown.
    let mut maps = Vec::new();
    for (st, accs) in states.into_iter().zip(accs) {
        let points = cfg
            .packet_threads
            .iter()
            .zip(accs)
            .map(|(&threads, a)| point_of(threads, a, cfg, &timer))
            .collect();
        let flows_expected = st.window.head.load(Relaxed) - st.window.tail.load(Relaxed);
        let flows_at_end = with_map!(&st.map, m => len_of(m));
        let records_freed = st.map.teardown(st.dropped);
        maps.push(MapResult {
            map: st.id,
            description: st.id.describe(),
            fill_ms: st.fill_ms,
            points,
            flows_at_end,
            flows_expected,
            records_created: st.created,
            records_freed,
        });
    }
    fill_ratios(&mut maps);
    let mut report = Report {
        experiment: NAME,
        env,
        config: cfg.clone(),
        baseline: BASELINE.id(),
        hasher: HASHER_DESCRIPTION,
        latency_method: format!(
            "every {}th lookup of each packet thread timed alone with {} ({:.2} ticks/ns, \
             steps of {:.0} ns); an empty timed section costs {:.0} ns, included in the \
             samples",
            cfg.sample_every,
            if timer.kind == "rdtsc" {
                "rdtsc between lfences, calibrated against the monotonic clock"
            } else {
                "Instant (the monotonic clock)"
            },
            timer.ticks_per_ns,
            timer.resolution_ns,
            timer.overhead_ns
        ),
        timer,
        maps,
        claims: Vec::new(),
        not_available: UNAVAILABLE.to_vec(),
        load_average_1m_end: std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok()),
    };
    report.claims = claims(&report);
    Ok(report)
}

fn point_of(threads: usize, a: Acc, cfg: &Config, timer: &TimerFacts) -> Point {
    let ns: Vec<f64> = a
        .samples
        .iter()
        .map(|&t| t as f64 / timer.ticks_per_ns)
        .collect();
    let secs = Duration::from_secs_f64(a.seconds.max(1e-9));
    let achieved = per_sec(a.writer_pairs, secs);
    Point {
        packet_threads: threads,
        seconds: a.seconds,
        lookups: a.lookups,
        lookups_per_s: per_sec(a.lookups, secs),
        lookups_per_s_per_thread: a.per_thread.iter().map(|&n| per_sec(n, secs)).collect(),
        lookups_per_s_by_round: a.rounds.clone(),
        latency_ns: Summary::of(&ns),
        hits: a.hits,
        misses: a.misses,
        miss_share: if a.lookups > 0 {
            a.misses as f64 / a.lookups as f64
        } else {
            0.0
        },
        stale_misses: a.stale,
        wrong_records: a.wrong,
        lost_flows: a.lost,
        writer: WriterFigures {
            target_per_s: cfg.churn_rate as f64,
            achieved_per_s: achieved,
            share_of_target: ratio(achieved, cfg.churn_rate as f64),
            skipped: a.skipped,
            expire_misses: a.expire_misses,
        },
        vs_baseline: VsBaseline {
            lookups: None,
            p50: None,
            p99: None,
            writer: None,
        },
    }
}

fn fill_ratios(maps: &mut [MapResult]) {
    let Some(base) = maps.iter().find(|m| m.map == BASELINE).cloned() else {
        return;
    };
    for m in maps.iter_mut() {
        for p in &mut m.points {
            if let Some(b) = base
                .points
                .iter()
                .find(|b| b.packet_threads == p.packet_threads)
            {
                p.vs_baseline = VsBaseline {
                    lookups: ratio(p.lookups_per_s, b.lookups_per_s),
                    p50: ratio(p.latency_ns.p50, b.latency_ns.p50),
                    p99: ratio(p.latency_ns.p99, b.latency_ns.p99),
                    writer: ratio(p.writer.achieved_per_s, b.writer.achieved_per_s),
                };
            }
        }
    }
}

/// The claims: at the most packet threads, with the writer running, rcu-hashmap's
/// lookups/s are at least 2x dashmap's, 1.5x papaya's and 1x rculfhash's.
fn claims(r: &Report) -> Vec<Claim> {
    let threads = r.max_threads();
    let rcu = r.point(MapId::RcuHashmap, threads);
    let writer = if r.config.churn_rate > 0 {
        "with the writer running"
    } else {
        "with no writer (--churn-rate 0: the claim is about a running writer)"
    };
    let against: [(&'static str, f64); 3] = [("dashmap", 2.0), ("papaya", 1.5), ("rculfhash", 1.0)];
    against
        .into_iter()
        .map(|(other, needed)| {
            let their_point = MapId::all()
                .into_iter()
                .find(|m| m.id() == other)
                .and_then(|m| r.point(m, threads));
            let (ratio, ratio_by_round) = match (rcu, their_point) {
                (Some(a), Some(b)) => (
                    ratio(a.lookups_per_s, b.lookups_per_s),
                    a.lookups_per_s_by_round
                        .iter()
                        .zip(&b.lookups_per_s_by_round)
                        .filter_map(|(x, y)| measure::ratio(*x, *y))
                        .collect(),
                ),
                _ => (None, Vec::new()),
            };
            let their_writer = MapId::all()
                .into_iter()
                .find(|m| m.id() == other)
                .and_then(|m| r.point(m, threads))
                .and_then(|p| p.writer.share_of_target);
            Claim {
                their_writer_share: their_writer,
                ratio_by_round,
                claim: format!(
                    "rcu-hashmap lookups/s >= {needed}x {other} at {threads} packet thread(s) \
                     {writer}"
                ),
                against: other,
                packet_threads: threads,
                ratio,
                needed,
                holds: ratio
                    .filter(|_| r.config.churn_rate > 0)
                    .map(|x| x >= needed),
            }
        })
        .collect()
}

// ----------------------------------------------------------------------------------------------
// Rendering

/// A writer below this share of its target pace was held back by the map.
pub const STARVED_BELOW: f64 = 0.9;

/// `map at N threads (share%)` for every point whose writer fell below [`STARVED_BELOW`].
fn starved_writers(r: &Report) -> Vec<String> {
    if r.config.churn_rate == 0 {
        return Vec::new();
    }
    r.maps
        .iter()
        .flat_map(|m| {
            m.points.iter().filter_map(move |p| {
                let share = p.writer.share_of_target.unwrap_or(0.0);
                (share < STARVED_BELOW).then(|| {
                    format!(
                        "`{}` at {} packet thread(s) ({:.0}%)",
                        m.map.id(),
                        p.packet_threads,
                        share * 100.0
                    )
                })
            })
        })
        .collect()
}

fn ns(x: f64) -> String {
    report::num(x)
}

/// Tables, plot and headlines.
pub fn render(r: &Report) -> Result<Rendered> {
    let c = &r.config;
    let maxt = r.max_threads();
    let mut md = String::new();
    md.push_str(&format!(
        "A flow table of {} flows (5-tuple keys, 48-byte records). Packet threads look up one \
         flow per packet ({}% of packets belong to no flow), each lookup one read-side \
         section; one writer creates a flow and expires the oldest at {} pairs/s{}. {} ms per \
         point × {} round(s), the maps interleaved. Hash: {}.\n\nLatency: {}.\n\n",
        c.flows,
        c.miss_percent,
        report::num(c.churn_rate as f64),
        if c.churn_rate == 0 {
            " (here: no writer)"
        } else {
            ""
        },
        c.point.as_millis(),
        c.rounds,
        r.hasher,
        r.latency_method
    ));
    for &threads in &c.packet_threads {
        md.push_str(&format!(
            "### {threads} packet thread(s), writer at {} pairs/s\n\n",
            report::num(c.churn_rate as f64)
        ));
        let mut t = Table::new(&[
            "map",
            "lookups/s",
            "vs rwlock",
            "per thread",
            "p50 ns",
            "p99 ns",
            "p99 vs rwlock",
            "writer pairs/s",
            "of target",
            "misses",
        ]);
        for m in &r.maps {
            let Some(p) = m.points.iter().find(|p| p.packet_threads == threads) else {
                continue;
            };
            let mean_thread = if p.lookups_per_s_per_thread.is_empty() {
                0.0
            } else {
                p.lookups_per_s_per_thread.iter().sum::<f64>()
                    / p.lookups_per_s_per_thread.len() as f64
            };
            t.row(vec![
                format!("`{}`", m.map.id()),
                report::num(p.lookups_per_s),
                report::ratio(p.vs_baseline.lookups),
                report::num(mean_thread),
                ns(p.latency_ns.p50),
                ns(p.latency_ns.p99),
                report::ratio(p.vs_baseline.p99),
                report::num(p.writer.achieved_per_s),
                p.writer
                    .share_of_target
                    .map_or("n/a".into(), |s| format!("{:.0}%", s * 100.0)),
                format!("{:.1}%", p.miss_share * 100.0),
            ]);
        }
        md.push_str(&t.to_markdown());
        md.push('\n');
    }
    md.push_str(&format!(
        "`vs rwlock`: lookups/s ÷ `{}`'s in this run (higher is better); `p99 vs rwlock`: p99 \
         ÷ its p99 (lower is better); `per thread`: mean over the packet threads; `of \
         target`: the writer's achieved pace.\n",
        r.baseline
    ));
    let starved = starved_writers(r);
    if !starved.is_empty() {
        md.push_str(&format!(
            "\n**Writer held back** (below {:.0}% of its pace): {}. Those maps served their \
             lookups while doing less of the writer's work, so their lookups/s are not a like-\
             for-like comparison.\n",
            STARVED_BELOW * 100.0,
            starved.join(", ")
        ));
    }
    md.push('\n');
    md.push_str("### The issue's claims\n\n");
    let mut t = Table::new(&[
        "claim",
        "needed",
        "measured",
        "rounds: min to max",
        "holds",
        "their writer's pace",
    ]);
    for cl in &r.claims {
        let lo = cl.ratio_by_round.iter().copied().reduce(f64::min);
        let hi = cl.ratio_by_round.iter().copied().reduce(f64::max);
        t.row(vec![
            cl.claim.clone(),
            format!("{:.1}x", cl.needed),
            report::ratio(cl.ratio),
            match (lo, hi) {
                (Some(lo), Some(hi)) => {
                    format!("{} to {}", report::ratio(Some(lo)), report::ratio(Some(hi)))
                }
                _ => "n/a".into(),
            },
            match cl.holds {
                Some(true) => "yes".into(),
                Some(false) => "**no**".into(),
                None => "not measured".into(),
            },
            cl.their_writer_share
                .map_or("n/a".into(), |s| format!("{:.0}%", s * 100.0)),
        ]);
    }
    md.push_str(&t.to_markdown());
    md.push_str("\n### Checks\n\n");
    let mut t = Table::new(&[
        "map",
        "fill ms",
        "wrong records",
        "lost flows",
        "expiries that missed",
        "flows at end / expected",
        "records freed / created",
    ]);
    for m in &r.maps {
        let sum = |f: fn(&Point) -> u64| m.points.iter().map(f).sum::<u64>();
        t.row(vec![
            format!("`{}`", m.map.id()),
            format!("{:.1}", m.fill_ms),
            sum(|p| p.wrong_records).to_string(),
            sum(|p| p.lost_flows).to_string(),
            sum(|p| p.writer.expire_misses).to_string(),
            format!("{} / {}", m.flows_at_end, m.flows_expected),
            format!("{} / {}", m.records_freed, m.records_created),
        ]);
    }
    md.push_str(&t.to_markdown());
    md.push_str(
        "\nEvery column but `fill ms` must read 0, or equal counts: a wrong record, a lost \
         flow (live before and after its lookup, not found) or an expiry that found nothing is a \
         bug in the map; so is a record never freed.\n",
    );
    if let Some(load) = r.load_average_1m_end {
        md.push_str(&format!(
            "\nLoad average (1 min) at the start {} and at the end {load:.2} on {} cores{}.\n",
            r.env
                .load_average_1m
                .map_or("unknown".into(), |l| format!("{l:.2}")),
            r.env.cores,
            if load > r.env.cores as f64 {
                ": other work shared the machine, and the figures (above all at the most \
                 threads) move with it"
            } else {
                ""
            }
        ));
    }
    md.push_str(&super::unavailable_note(&r.not_available));

    let names: Vec<String> = r.maps.iter().map(|m| m.map.id().to_string()).collect();
    let throughput: Vec<(String, Vec<f64>)> = c
        .packet_threads
        .iter()
        .map(|&threads| {
            (
                format!("{threads} packet thread(s)"),
                r.maps
                    .iter()
                    .map(|m| {
                        r.point(m.map, threads)
                            .map_or(f64::NAN, |p| p.lookups_per_s)
                    })
                    .collect(),
            )
        })
        .collect();
    let lat = |f: fn(&Summary) -> f64| -> Vec<f64> {
        r.maps
            .iter()
            .map(|m| r.point(m.map, maxt).map_or(f64::NAN, |p| f(&p.latency_ns)))
            .collect()
    };
    let svg = plot::render(&[
        Panel::Bars {
            title: format!(
                "flow lookups/s with the writer at {} pairs/s",
                report::num(c.churn_rate as f64)
            ),
            value: Axis::linear("lookups/s, all packet threads"),
            categories: names.clone(),
            series: throughput,
        },
        Panel::Bars {
            title: format!("sampled lookup latency at {maxt} packet thread(s)"),
            value: Axis::log("ns (log)"),
            categories: names,
            series: vec![
                ("p50".into(), lat(|s| s.p50)),
                ("p99".into(), lat(|s| s.p99)),
            ],
        },
    ])?;

    let mut headlines = Vec::new();
    if let Some(p) = r.point(MapId::RcuHashmap, maxt) {
        let others: Vec<String> = r
            .maps
            .iter()
            .filter(|m| m.map != MapId::RcuHashmap)
            .filter_map(|m| {
                let o = r.point(m.map, maxt)?;
                Some(format!(
                    "{} {}",
                    report::ratio(ratio(p.lookups_per_s, o.lookups_per_s)),
                    m.map.id()
                ))
            })
            .collect();
        headlines.push(format!(
            "rcu-hashmap at {maxt} packet thread(s), writer at {} pairs/s: {} lookups/s (p99 {} \
             ns) = {}",
            report::num(c.churn_rate as f64),
            report::num(p.lookups_per_s),
            ns(p.latency_ns.p99),
            others.join(", ")
        ));
    }
    let verdicts: Vec<String> = r
        .claims
        .iter()
        .map(|cl| {
            format!(
                "≥{}x {}: {}",
                cl.needed,
                cl.against,
                match cl.holds {
                    Some(true) => format!("holds ({})", report::ratio(cl.ratio)),
                    Some(false) => format!("does not hold ({})", report::ratio(cl.ratio)),
                    None => "not measured".into(),
                }
            )
        })
        .collect();
    headlines.push(format!("claims: {}", verdicts.join("; ")));
    Ok(Rendered {
        markdown: md,
        svg: Some(svg),
        headlines,
    })
}

/// The experiment, for the shared drivers.
pub struct Conntrack;

impl Experiment for Conntrack {
    const NAME: &'static str = NAME;
    const TITLE: &'static str =
        "Conntrack: a flow table under lookups and churn, RcuHashMap beside its peers";
    const SEEDS: &'static [&'static str] = &[];
    type Config = Config;
    type Args = Args;
    type Report = Report;

    fn config(common: &Common) -> Config {
        Config::new(common)
    }

    fn apply(args: &Args, cfg: &mut Config) {
        args.apply(cfg);
    }

    fn run(cfg: &Config, progress: &Progress) -> Result<Report> {
        run(cfg, progress)
    }

    fn render(report: &Report) -> Result<Rendered> {
        render(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct_and_absent_keys_never_collide() {
        let mut seen = std::collections::HashSet::new();
        for id in 0..200_000u64 {
            assert!(seen.insert(FlowKey::of(id)));
        }
        for id in 0..1000u64 {
            assert!(!seen.contains(&FlowKey::absent(id)));
        }
    }

    #[test]
    fn hasher_spreads_keys() {
        // The top 7 and the low 17 bits (control byte and bucket of a 128k-slot table) take
        // many values over consecutive flows.
        let top: std::collections::HashSet<u64> = (0..10_000)
            .map(|i| flow_hash(&FlowKey::of(i)) >> 57)
            .collect();
        let low: std::collections::HashSet<u64> = (0..10_000)
            .map(|i| flow_hash(&FlowKey::of(i)) & 0x1_FFFF)
            .collect();
        assert_eq!(top.len(), 128);
        assert!(low.len() > 9_000, "{}", low.len());
    }

    #[cfg(feature = "c-peers")]
    #[test]
    fn rust_and_c_hash_agree() {
        for id in [0u64, 1, 77, 123_456_789] {
            for key in [FlowKey::of(id), FlowKey::absent(id)] {
                let (w0, w1) = key.words();
                assert_eq!(flow_hash(&key), crate::c_peers::lfht_hash(w0, w1));
            }
        }
    }
}
