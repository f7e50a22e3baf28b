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
//!   lookup takes the map's read side once (one `read()` guard, one read lock, one pin ...;
//!   nothing on a QSBR domain, whose packet threads stay online and announce a quiescent state
//!   after every `sample_every` lookups), copies two fields of the record out and leaves.
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
//! | `rcu-flatmap` | `rcukit::RcuFlatMap` in a domain of its own, the record's `(id, expiry)` inline (the record is dropped at insert) | one `read()` guard |
//! | `rcu-flatmap-qsbr` | `rcukit::RcuFlatMap` on a `rcukit::Qsbr` domain of its own, the record's `(id, expiry)` inline; packet threads registered online, every other thread's registration offline | nothing (a `quiescent_state()` per batch of `sample_every` lookups) |
//! | `dashmap` | `dashmap::DashMap` (default shards) | the shard's read lock |
//! | `papaya` | `papaya::HashMap` | `pin()` (a seize guard) |
//! | `flurry` | `flurry::HashMap` (its own seize collector) | `guard()` |
//! | `pl-rwlock-hashbrown` | `parking_lot::RwLock<hashbrown::HashMap>` | `read()` lock |
//! | `scc-hashmap` | `scc::HashMap` | `read()` (a shared bucket lock) |
//! | `scc-hashindex` | `scc::HashIndex` (records behind an `Arc`: it needs `Clone`) | `peek_with()` (lock-free) |
//! | `evmap` | evmap (left-right; records boxed, the one writer behind a mutex, publishing after every write) | the packet thread's own read handle |
//! | `rculfhash` (feature `c-peers`) | liburcu's `cds_lfht`, memb flavor, auto-resize | `urcu_memb_read_lock()` (in C, one FFI call per lookup) |
//!
//! Every Rust map hashes with [`FlowBuild`] and is created with room for `flows`; the C table
//! computes the same function in C (`lab_lfht_hash`) and starts with the next power of two.

mod clock;
mod flow;
mod point;
mod render;
mod run;
mod schemes;

pub use clock::TimerFacts;
pub use flow::{flow_hash, FlowBuild, FlowHasher, FlowKey, FlowRecord};
pub use render::STARVED_BELOW;
pub use run::{run, Body, Claim, MapResult, Point, VsBaseline, WriterFigures};
pub use schemes::MapId;

use super::{
    check_distinct, check_duration, check_range, check_threads, ser_ms, Common, Envelope,
    Experiment, Rendered, Unavailable,
};
use crate::progress::Progress;
use anyhow::{bail, Result};
use serde::{Serialize, Serializer};
use std::time::Duration;

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
        check_distinct("--packet-threads", &self.packet_threads, usize::to_string)?;
        check_range("--miss-percent", u64::from(self.miss_percent), 0, 100)?;
        check_range("--churn-rate", self.churn_rate, 0, 10_000_000)?;
        check_duration("--point", self.point)?;
        check_range("--rounds", self.rounds as u64, 1, 100)?;
        check_range("--sample-every", u64::from(self.sample_every), 1, 1 << 20)?;
        if self.maps.is_empty() {
            bail!("--maps needs at least one map");
        }
        check_distinct("--maps", &self.maps, |m| m.id().to_string())?;
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
    #[arg(long, value_parser = crate::args::parse_duration)]
    pub point: Option<Duration>,
    /// Rounds, the maps interleaved in each [default: 2 quick, 6 full]
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Time one lookup in this many [default: 64]
    #[arg(long)]
    pub sample_every: Option<u32>,
    /// Maps to measure, comma-separated (rwlock-hashmap, rcu-hashmap, rcu-flatmap,
    /// rcu-flatmap-qsbr, dashmap, papaya, flurry, pl-rwlock-hashbrown, scc-hashmap,
    /// scc-hashindex, evmap, and with the c-peers feature rculfhash) [default: all]
    #[arg(long, value_delimiter = ',', value_parser = parse_map)]
    pub maps: Vec<MapId>,
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

/// The experiment's result: the envelope around [`Body`].
pub type Report = Envelope<Config, Body>;

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
        crate::override_fields!(
            args => cfg; flows, miss_percent, churn_rate, point, rounds, sample_every;
            lists: packet_threads, maps
        );
    }

    fn validate(cfg: &Config) -> Result<()> {
        cfg.validate()
    }

    fn run(cfg: &Config, progress: &Progress) -> Result<Report> {
        run(cfg, progress)
    }

    fn render(report: &Report) -> Result<Rendered> {
        render::render(report)
    }
}
