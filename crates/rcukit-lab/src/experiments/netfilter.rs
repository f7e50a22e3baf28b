//! Seeds 000 and 002: a rule table that packets read and `iptables -A` rewrites.
//!
//! # What the seeds measured
//!
//! Seed 000 times 200 `iptables -A INPUT -s 192.168.105.$i -j DROP` on a Raspberry Pi 4 with
//! three ways of protecting `table->private`: the current per-CPU sequence counter
//! (`xt_recseq`, 1109 ms), RCU with `synchronize_rcu()` (5073 ms) and RCU with
//! `synchronize_rcu_expedited()` (1104 ms); and recalls the 2009 regression, 0.2 s with the
//! rwlock of 2.6.29 against 6.0 s with RCU in 2.6.30-rc1. Seed 002 is about the reader side:
//! one central rwlock makes every packet bounce a cache line.
//!
//! # The model
//!
//! * The table is a vector of rules (addresses with masks, protocol, port range, verdict).
//!   Classifying a packet is a linear scan to the first matching rule, like `ipt_do_table`.
//!   The packets match rules in the last tenth of the table (and one in eight matches nothing
//!   and falls through to the policy), so a lookup costs a real scan.
//! * `reader` threads classify packets in a loop and check each verdict against one computed
//!   beforehand (a torn or freed table would show up as a wrong verdict).
//! * The writer performs `additions` rule additions. Each is what `iptables -A` makes the
//!   kernel do: a copy of the whole table plus one rule, then the replacement, then whatever the
//!   scheme needs before the old table may be freed.
//! * Reader throughput is measured in three windows: during the timed additions (short for
//!   the schemes that do not wait, so only informative), during a *sustained* phase in which
//!   the writer adds and removes a rule back to back as fast as its scheme lets it (the
//!   `during_writer` figure; the writer's own rate is reported beside it), and in a
//!   reader-only phase.
//! * By default there is one reader per core *but one*: the seed timed `iptables` on an
//!   otherwise idle CPU, and on a small machine a writer that must wait for a reader's core
//!   measures the scheduler, not the scheme. `--readers` overrides it.
//!
//! # Schemes
//!
//! | id | replacement | before freeing the old table |
//! |---|---|---|
//! | `recseq` (baseline) | copy, pointer swap in an `rcukit::RecSeq` | wait until every reader counter that was odd has moved |
//! | `rwlock` | in place under a parking_lot write lock (no copy) | nothing (readers excluded) |
//! | `rwlock-copy` | copy outside, swap under the write lock (2.6.29) | nothing |
//! | `percpu-rwlock` | in place under `rcukit::PerCpuRwLock`'s write side (every slot) | nothing |
//! | `rcu-sync` | copy, `RcuCell` swap | `synchronize()` (`Reclaim::Synchronize`) |
//! | `rcu-expedited` | copy, `RcuCell` swap | `synchronize_expedited()` (`Reclaim::Expedited`) |
//! | `rcu-retire` | copy, `RcuCell` swap | nothing: retired, freed after a grace period (`Reclaim::Deferred`) |
//!
//! The baseline for every ratio is `recseq`, the seed's "current" scheme: netfilter's
//! `xt_recseq`, which `rcukit::RecSeq` rebuilds (readers make a per-thread sequence counter
//! odd with a full fence, the writer swaps the table and scans the counters).

use super::{
    check_duration, check_range, check_threads, ser_ms, Common, Experiment, Rendered, Unavailable,
};
use crate::env::Environment;
use crate::measure::{self, per_sec, ratio, Counter, StopFlag, Summary};
use crate::plot::{self, Axis, Panel};
use crate::progress::Progress;
use crate::report::{self, Table};
use anyhow::Result;
use rcukit::{Rcu, RcuCell, RecSeq, Reclaim};
use serde::Serialize;
use std::hint::black_box;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// File stem and subcommand name.
pub const NAME: &str = "netfilter";

/// Schemes the experiment knows but this build cannot run yet (none: every scheme of the
/// issue runs).
pub const UNAVAILABLE: &[Unavailable] = &[];

/// Settings.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Rules in the table before the writer starts.
    pub rules: usize,
    /// Rule additions the writer performs (the seed: 200).
    pub additions: usize,
    /// Reader threads (default: one per core but one, left for the writer).
    pub readers: usize,
    /// Readers run this long before the writer starts.
    #[serde(rename = "warmup_ms", serialize_with = "ser_ms")]
    pub warmup: Duration,
    /// Length of the sustained-update phase and of the reader-only phase.
    #[serde(rename = "phase_ms", serialize_with = "ser_ms")]
    pub phase: Duration,
    /// Quick mode.
    pub quick: bool,
}

impl Config {
    /// Defaults for `common`.
    pub fn new(common: &Common) -> Config {
        Config {
            rules: 1000,
            additions: 200,
            readers: common.threads.saturating_sub(1).max(1),
            warmup: common.pick(Duration::from_millis(50), Duration::from_millis(200)),
            phase: common.pick(Duration::from_millis(300), Duration::from_secs(2)),
            quick: common.quick,
        }
    }

    /// Reject impossible settings.
    pub fn validate(&self) -> Result<()> {
        check_range("--rules", self.rules as u64, 1, 1_000_000)?;
        check_range("--additions", self.additions as u64, 1, 100_000)?;
        check_threads("--readers", self.readers)?;
        check_duration("--phase", self.phase)?;
        check_duration("warm-up", self.warmup)?;
        Ok(())
    }
}

/// Flags of the `netfilter` subcommand.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Args {
    /// Rules in the table before the writer starts [default: 1000]
    #[arg(long)]
    pub rules: Option<usize>,
    /// Rule additions the writer performs [default: 200, as in the seed]
    #[arg(long)]
    pub additions: Option<usize>,
    /// Reader threads [default: one per core but one]
    #[arg(long)]
    pub readers: Option<usize>,
    /// Length of the sustained-update and reader-only phases, e.g. 500ms or 2s
    /// [default: 300ms quick, 2s full]
    #[arg(long, value_parser = crate::cli::parse_duration)]
    pub phase: Option<Duration>,
}

impl Args {
    /// Apply the flags given on top of `cfg`.
    pub fn apply(&self, cfg: &mut Config) {
        if let Some(v) = self.rules {
            cfg.rules = v;
        }
        if let Some(v) = self.additions {
            cfg.additions = v;
        }
        if let Some(v) = self.readers {
            cfg.readers = v;
        }
        if let Some(v) = self.phase {
            cfg.phase = v;
        }
    }
}

// ----------------------------------------------------------------------------------------------
// Rules and packets

const ACCEPT: u8 = 1;
const DROP: u8 = 0;

/// One rule: source and destination with masks, protocol (0 = any), port range, verdict.
#[derive(Clone, Copy, Debug)]
struct Rule {
    src: u32,
    src_mask: u32,
    dst: u32,
    dst_mask: u32,
    proto: u8,
    verdict: u8,
    dport_lo: u16,
    dport_hi: u16,
}

impl Rule {
    #[inline]
    fn matches(&self, p: &Packet) -> bool {
        (p.src & self.src_mask) == self.src
            && (p.dst & self.dst_mask) == self.dst
            && (self.proto == 0 || self.proto == p.proto)
            && p.dport >= self.dport_lo
            && p.dport <= self.dport_hi
    }

    /// The `i`-th rule of the initial table: one host in 10.0.0.0/8, TCP, any port.
    fn initial(i: usize) -> Rule {
        Rule {
            src: 0x0A00_0000 | (i as u32 & 0x00FF_FFFF),
            src_mask: u32::MAX,
            dst: 0,
            dst_mask: 0,
            proto: 6,
            verdict: if i % 2 == 0 { ACCEPT } else { DROP },
            dport_lo: 1,
            dport_hi: u16::MAX,
        }
    }

    /// The seed's `iptables -A INPUT -s 192.168.105.$i -j DROP` (i counts from 1).
    fn added(i: usize) -> Rule {
        Rule {
            src: 0xC0A8_6900u32.wrapping_add(i as u32),
            src_mask: u32::MAX,
            dst: 0,
            dst_mask: 0,
            proto: 0,
            verdict: DROP,
            dport_lo: 0,
            dport_hi: u16::MAX,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Packet {
    src: u32,
    dst: u32,
    dport: u16,
    proto: u8,
}

/// Classify: the verdict of the first matching rule, else the policy (ACCEPT).
#[inline]
fn classify(rules: &[Rule], p: &Packet) -> u8 {
    rules
        .iter()
        .find(|r| r.matches(p))
        .map(|r| r.verdict)
        .unwrap_or(ACCEPT)
}

/// Packets for reader `thread`: sources in the last tenth of the table, one in eight matching
/// nothing. Returns (packet, expected verdict) pairs; 1024 of them (a power of two).
fn packets(rules: usize, thread: usize) -> Vec<(Packet, u8)> {
    let mut x = 0x2545_F491_4F6C_DD1Du64 ^ (thread as u64).wrapping_mul(0x9E37_79B9);
    let tail = (rules / 10).max(1);
    (0..1024)
        .map(|k| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let src = if k % 8 == 7 {
                0x0B00_0000 | (x as u32 & 0xFFFF) // 11.0.x.x: no rule matches
            } else {
                let i = rules - 1 - (x as usize % tail);
                0x0A00_0000 | (i as u32 & 0x00FF_FFFF)
            };
            let p = Packet {
                src,
                dst: 0xC0A8_0001,
                dport: 1 + (x >> 20) as u16 % 60000,
                proto: 6,
            };
            // Initial rule i matches exactly source 10.0.0.0 + i; the added rules match
            // 192.168.105.0 + i, which no packet uses.
            let expected = {
                if src >> 24 == 0x0A {
                    let i = (src & 0x00FF_FFFF) as usize;
                    if i % 2 == 0 {
                        ACCEPT
                    } else {
                        DROP
                    }
                } else {
                    ACCEPT
                }
            };
            (p, expected)
        })
        .collect()
}

/// A table update.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// Append a rule (`iptables -A`).
    Append(Rule),
    /// Remove the last rule (`iptables -D`).
    RemoveLast,
}

impl Op {
    /// The copy of `rules` with this update applied.
    fn apply(self, rules: &[Rule]) -> Vec<Rule> {
        match self {
            Op::Append(rule) => {
                let mut v = Vec::with_capacity(rules.len() + 1);
                v.extend_from_slice(rules);
                v.push(rule);
                v
            }
            Op::RemoveLast => rules[..rules.len().saturating_sub(1)].to_vec(),
        }
    }
}

/// A table version that counts its own destruction (every replaced table must be freed).
struct RuleSet {
    rules: Vec<Rule>,
    freed: Arc<AtomicU64>,
}

impl Drop for RuleSet {
    fn drop(&mut self) {
        self.freed.fetch_add(1, Relaxed);
    }
}

// ----------------------------------------------------------------------------------------------
// Schemes

/// The schemes this build can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchemeId {
    /// `rcukit::RecSeq`: readers make a per-thread sequence counter odd, the writer swaps in a
    /// copy and waits until every odd counter has changed (the seed's "current", xt_recseq).
    Recseq,
    /// parking_lot RwLock, the rule added (or removed) in place under the write lock.
    Rwlock,
    /// parking_lot RwLock, a copy built outside and swapped in under the write lock (the
    /// 2.6.29 kernel's scheme: `iptables` hands the kernel a whole new table).
    RwlockCopy,
    /// `rcukit::PerCpuRwLock`, the rule added in place under the write side (every slot), like
    /// the per-CPU reader locks of seed 002.
    PercpuRwlock,
    /// `rcukit::RcuCell`, `Reclaim::Synchronize`: `synchronize()` before freeing.
    RcuSync,
    /// `rcukit::RcuCell`, `Reclaim::Expedited`: `synchronize_expedited()` before freeing.
    RcuExpedited,
    /// `rcukit::RcuCell`, `Reclaim::Deferred`: `retire()` (no wait).
    RcuRetire,
}

impl SchemeId {
    /// Every scheme this build runs, baseline first.
    pub const ALL: [SchemeId; 7] = [
        SchemeId::Recseq,
        SchemeId::Rwlock,
        SchemeId::RwlockCopy,
        SchemeId::PercpuRwlock,
        SchemeId::RcuSync,
        SchemeId::RcuExpedited,
        SchemeId::RcuRetire,
    ];

    /// Short id used in tables and JSON.
    pub fn id(self) -> &'static str {
        match self {
            SchemeId::Recseq => "recseq",
            SchemeId::Rwlock => "rwlock",
            SchemeId::RwlockCopy => "rwlock-copy",
            SchemeId::PercpuRwlock => "percpu-rwlock",
            SchemeId::RcuSync => "rcu-sync",
            SchemeId::RcuExpedited => "rcu-expedited",
            SchemeId::RcuRetire => "rcu-retire",
        }
    }

    /// What the writer does, for the table.
    pub fn describe(self) -> &'static str {
        match self {
            SchemeId::Recseq => "copy, swap, wait for odd reader counters (RecSeq), free",
            SchemeId::Rwlock => "in place under parking_lot write lock (no copy)",
            SchemeId::RwlockCopy => "copy, swap under parking_lot write lock",
            SchemeId::PercpuRwlock => "in place under PerCpuRwLock write side (no copy)",
            SchemeId::RcuSync => "RcuCell copy-update, synchronize(), free",
            SchemeId::RcuExpedited => "RcuCell copy-update, synchronize_expedited(), free",
            SchemeId::RcuRetire => "RcuCell copy-update, retired (no wait)",
        }
    }

    /// Does the writer update the table in place (no table is ever replaced)?
    pub fn in_place(self) -> bool {
        matches!(self, SchemeId::Rwlock | SchemeId::PercpuRwlock)
    }

    fn build(self, rules: Vec<Rule>) -> Result<Box<dyn RuleTable>> {
        type ParkingLot = LockTable<parking_lot::RawRwLock>;
        type PerCpu = LockTable<rcukit::RawPerCpuRwLock>;
        Ok(match self {
            SchemeId::Recseq => Box::new(RecSeqTable::new(rules)),
            SchemeId::Rwlock => Box::new(ParkingLot::new(rules, true)),
            SchemeId::RwlockCopy => Box::new(ParkingLot::new(rules, false)),
            SchemeId::PercpuRwlock => Box::new(PerCpu::new(rules, true)),
            SchemeId::RcuSync => Box::new(RcuTable::new(rules, Reclaim::Synchronize)?),
            SchemeId::RcuExpedited => Box::new(RcuTable::new(rules, Reclaim::Expedited)?),
            SchemeId::RcuRetire => Box::new(RcuTable::new(rules, Reclaim::Deferred)?),
        })
    }
}

/// What every scheme provides.
trait RuleTable: Send + Sync {
    /// Classify one packet (the reader side, `ipt_do_table`).
    fn classify(&self, p: &Packet) -> u8;
    /// One table update (`iptables -A` or `-D`): copy the table with `op` applied, replace,
    /// and make the old table safe to free (or freed).
    fn update(&self, op: Op);
    /// Wait until every replaced table has been freed; returns the number of rules now.
    fn finish(&self) -> usize;
    /// Tables freed so far.
    fn freed(&self) -> u64;
    /// Tables replaced so far (0 for in-place updates).
    fn replaced(&self) -> u64;
}

/// The table behind a `lock_api` reader-writer lock: parking_lot's central one or rcukit's
/// per-CPU one.
struct LockTable<R: lock_api::RawRwLock> {
    lock: lock_api::RwLock<R, RuleSet>,
    in_place: bool,
    replaced: AtomicU64,
    freed: Arc<AtomicU64>,
}

impl<R: lock_api::RawRwLock> LockTable<R> {
    fn new(rules: Vec<Rule>, in_place: bool) -> LockTable<R> {
        let freed = Arc::new(AtomicU64::new(0));
        LockTable {
            lock: lock_api::RwLock::new(RuleSet {
                rules,
                freed: freed.clone(),
            }),
            in_place,
            replaced: AtomicU64::new(0),
            freed,
        }
    }
}

impl<R: lock_api::RawRwLock + Send + Sync> RuleTable for LockTable<R> {
    fn classify(&self, p: &Packet) -> u8 {
        classify(&self.lock.read().rules, p)
    }

    fn update(&self, op: Op) {
        if self.in_place {
            let mut table = self.lock.write();
            match op {
                Op::Append(rule) => table.rules.push(rule),
                Op::RemoveLast => {
                    table.rules.pop();
                }
            }
            return;
        }
        let rules = op.apply(&self.lock.read().rules);
        let new = RuleSet {
            rules,
            freed: self.freed.clone(),
        };
        let old = std::mem::replace(&mut *self.lock.write(), new);
        drop(old);
        self.replaced.fetch_add(1, Relaxed);
    }

    fn finish(&self) -> usize {
        self.lock.read().rules.len()
    }

    fn freed(&self) -> u64 {
        self.freed.load(Relaxed)
    }

    fn replaced(&self) -> u64 {
        self.replaced.load(Relaxed)
    }
}

/// xt_recseq: `table->private` in an `rcukit::RecSeq`. Readers run inside `RecSeq::read`;
/// the writer (one at a time, like the kernel's `xt_table` mutex) copies the table, swaps it
/// in with `replace`, which returns once every reader counter that was odd has moved, and
/// frees the old table itself.
struct RecSeqTable {
    table: RecSeq<RuleSet>,
    writer: parking_lot::Mutex<()>,
    replaced: AtomicU64,
    freed: Arc<AtomicU64>,
}

impl RecSeqTable {
    fn new(rules: Vec<Rule>) -> RecSeqTable {
        let freed = Arc::new(AtomicU64::new(0));
        RecSeqTable {
            table: RecSeq::new(RuleSet {
                rules,
                freed: freed.clone(),
            }),
            writer: parking_lot::Mutex::new(()),
            replaced: AtomicU64::new(0),
            freed,
        }
    }
}

impl RuleTable for RecSeqTable {
    fn classify(&self, p: &Packet) -> u8 {
        classify(&self.table.read().rules, p)
    }

    fn update(&self, op: Op) {
        let _writer = self.writer.lock();
        // The copy is made in a read section of our own, which ends before `replace` waits.
        let rules = op.apply(&self.table.read().rules);
        let old = self.table.replace_box(Box::new(RuleSet {
            rules,
            freed: self.freed.clone(),
        }));
        drop(old);
        self.replaced.fetch_add(1, Relaxed);
    }

    fn finish(&self) -> usize {
        self.table.read().rules.len()
    }

    fn freed(&self) -> u64 {
        self.freed.load(Relaxed)
    }

    fn replaced(&self) -> u64 {
        self.replaced.load(Relaxed)
    }
}

/// `table->private` as an `rcukit::RcuCell` in a domain of its own (so its grace periods wait
/// only for this experiment's readers). The writer copy-updates under the cell's writer lock
/// and reclaims the old table as `reclaim` says.
struct RcuTable {
    table: RcuCell<RuleSet, Arc<Rcu>>,
    reclaim: Reclaim,
    replaced: AtomicU64,
    freed: Arc<AtomicU64>,
}

impl RcuTable {
    fn new(rules: Vec<Rule>, reclaim: Reclaim) -> Result<RcuTable> {
        let freed = Arc::new(AtomicU64::new(0));
        let rcu = Arc::new(Rcu::builder().name("lab-netfilter").build()?);
        let set = RuleSet {
            rules,
            freed: freed.clone(),
        };
        Ok(RcuTable {
            table: RcuCell::with_domain(set, rcu),
            reclaim,
            replaced: AtomicU64::new(0),
            freed,
        })
    }
}

impl RuleTable for RcuTable {
    fn classify(&self, p: &Packet) -> u8 {
        let guard = self.table.domain().read();
        classify(&self.table.load(&guard).rules, p)
    }

    fn update(&self, op: Op) {
        self.table.update_with(self.reclaim, |current| RuleSet {
            rules: op.apply(&current.rules),
            freed: self.freed.clone(),
        });
        self.replaced.fetch_add(1, Relaxed);
    }

    fn finish(&self) -> usize {
        let rcu = self.table.domain();
        while rcu.stats().callbacks_pending > 0 {
            rcu.barrier();
        }
        self.table.read().rules.len()
    }

    fn freed(&self) -> u64 {
        self.freed.load(Relaxed)
    }

    fn replaced(&self) -> u64 {
        self.replaced.load(Relaxed)
    }
}

// ----------------------------------------------------------------------------------------------
// Measurement

/// Reader lookups per second (all readers together) in each phase.
#[derive(Clone, Debug, Serialize)]
pub struct LookupRates {
    /// During the sustained-update phase (the writer updating back to back).
    pub during_writer: f64,
    /// In the reader-only phase.
    pub alone: f64,
    /// During the timed additions (over `writer_window_ms`; noisy when that is short).
    pub during_additions: f64,
}

/// Ratios of a scheme's figures to the baseline's.
#[derive(Clone, Debug, Serialize)]
pub struct Ratios {
    /// This scheme's total update time / the baseline's.
    pub update_time: Option<f64>,
    /// This scheme's lookups/s while the writer runs / the baseline's.
    pub lookups_during_writer: Option<f64>,
    /// This scheme's lookups/s alone / the baseline's.
    pub lookups_alone: Option<f64>,
}

/// One scheme's figures.
#[derive(Clone, Debug, Serialize)]
pub struct SchemeResult {
    /// Scheme id.
    pub scheme: SchemeId,
    /// What its writer does.
    pub description: &'static str,
    /// Total time of all additions, milliseconds.
    pub update_ms_total: f64,
    /// Per-addition time, microseconds.
    pub update_us: Summary,
    /// Reader throughput (all readers together).
    pub reader_lookups_per_s: LookupRates,
    /// Length of the window `during_additions` was measured over (= the update time).
    pub writer_window_ms: f64,
    /// Updates per second the writer achieved in the sustained phase.
    pub sustained_updates_per_s: f64,
    /// Ratios to the baseline scheme.
    pub vs_baseline: Ratios,
    /// Tables replaced by the writer (additions and sustained updates; 0 when updated in
    /// place).
    pub tables_replaced: u64,
    /// Replaced tables freed by the end of the run (must equal `tables_replaced`).
    pub tables_freed: u64,
    /// Rules in the final table (must be rules + additions: the sustained phase adds and
    /// removes in pairs).
    pub final_rules: usize,
    /// Lookups that returned a verdict other than the expected one (must be 0).
    pub wrong_verdicts: u64,
}

/// The seed's figures.
#[derive(Clone, Debug, Serialize)]
pub struct SeedFigures {
    /// Where they come from.
    pub source: &'static str,
    /// 200 additions with the current xt_recseq scheme, ms.
    pub current_ms: f64,
    /// ... with synchronize_rcu(), ms.
    pub synchronize_rcu_ms: f64,
    /// ... with synchronize_rcu_expedited(), ms.
    pub expedited_ms: f64,
    /// synchronize_rcu / current.
    pub synchronize_ratio: f64,
    /// expedited / current.
    pub expedited_ratio: f64,
    /// The 2009 regression: RCU in 2.6.30-rc1 (6.0 s) / rwlock in 2.6.29 (0.2 s).
    pub history_rcu_vs_rwlock_ratio: f64,
}

/// The seed's figures, constant.
pub fn seed_figures() -> SeedFigures {
    SeedFigures {
        source: "seed 000: 200 × `iptables -A`, Raspberry Pi 4 (4 cores), Linux v6.11; history \
                 from commit 942e4a2bd680's thread (2.6.29 rwlock 0.2 s, 2.6.30-rc1 RCU 6.0 s)",
        current_ms: 1109.0,
        synchronize_rcu_ms: 5073.0,
        expedited_ms: 1104.0,
        synchronize_ratio: 5073.0 / 1109.0,
        expedited_ratio: 1104.0 / 1109.0,
        history_rcu_vs_rwlock_ratio: 6.0 / 0.2,
    }
}

/// The experiment's result.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `netfilter`.
    pub experiment: &'static str,
    /// Seeds reproduced.
    pub seeds: [&'static str; 2],
    /// Where and how it ran.
    pub env: Environment,
    /// Settings.
    pub config: Config,
    /// The scheme ratios are taken against.
    pub baseline: SchemeId,
    /// Why that baseline.
    pub baseline_note: &'static str,
    /// Every scheme run, in order.
    pub schemes: Vec<SchemeResult>,
    /// Schemes not in this build.
    pub not_available: Vec<Unavailable>,
    /// The seed's own figures.
    pub seed: SeedFigures,
}

impl Report {
    /// The result of one scheme.
    pub fn scheme(&self, id: SchemeId) -> Option<&SchemeResult> {
        self.schemes.iter().find(|s| s.scheme == id)
    }
}

/// Run the experiment.
pub fn run(cfg: &Config, progress: &Progress) -> Result<Report> {
    cfg.validate()?;
    let env = Environment::collect(cfg.quick);
    let task = progress.task(NAME, SchemeId::ALL.len() as u64);
    let mut schemes = Vec::new();
    for id in SchemeId::ALL {
        task.message(id.id());
        schemes.push(run_scheme(cfg, id)?);
        task.inc();
    }
    task.finish();
    let baseline = SchemeId::ALL[0];
    let base = schemes[0].clone();
    for s in &mut schemes {
        s.vs_baseline = Ratios {
            update_time: ratio(s.update_ms_total, base.update_ms_total),
            lookups_during_writer: ratio(
                s.reader_lookups_per_s.during_writer,
                base.reader_lookups_per_s.during_writer,
            ),
            lookups_alone: ratio(
                s.reader_lookups_per_s.alone,
                base.reader_lookups_per_s.alone,
            ),
        };
    }
    Ok(Report {
        experiment: NAME,
        seeds: ["000", "002"],
        env,
        config: cfg.clone(),
        baseline,
        baseline_note: "recseq is the seed's \"current\" scheme, netfilter's xt_recseq rebuilt \
                        as rcukit::RecSeq: readers make a per-thread sequence counter odd (with a \
                        full fence) while they classify, the writer swaps in the new table and \
                        waits until every counter that was odd has moved",
        schemes,
        not_available: UNAVAILABLE.to_vec(),
        seed: seed_figures(),
    })
}

fn run_scheme(cfg: &Config, id: SchemeId) -> Result<SchemeResult> {
    let table = id.build((0..cfg.rules).map(Rule::initial).collect())?;
    let table: &dyn RuleTable = &*table;
    let counters: Vec<Counter> = (0..cfg.readers).map(|_| Counter::default()).collect();
    let wrong = AtomicU64::new(0);
    let stop = StopFlag::new();
    let mut update_times = Vec::with_capacity(cfg.additions);
    let mut sustained_updates = 0u64;
    let phases = std::thread::scope(|s| -> Result<_> {
        let mut handles = Vec::new();
        for (t, counter) in counters.iter().enumerate() {
            let packets = packets(cfg.rules, t);
            let (stop, wrong) = (&stop, &wrong);
            handles.push(super::spawn_scoped(
                s,
                &format!("nf-reader{t}"),
                move || reader(table, &packets, counter, stop, wrong),
            )?);
        }
        std::thread::sleep(cfg.warmup);
        // Phase 1: the seed's timed additions.
        let (c0, t0) = (measure::sum(&counters), Instant::now());
        for i in 0..cfg.additions {
            let start = Instant::now();
            table.update(Op::Append(Rule::added(i + 1)));
            update_times.push(measure::us(start.elapsed()));
        }
        let (c1, t1) = (measure::sum(&counters), Instant::now());
        // Phase 2: sustained updates, an addition and a removal at a time, as fast as the
        // scheme lets the writer go.
        let extra = Rule::added(cfg.additions + 1);
        while t1.elapsed() < cfg.phase || sustained_updates % 2 == 1 {
            let op = if sustained_updates % 2 == 0 {
                Op::Append(extra)
            } else {
                Op::RemoveLast
            };
            table.update(op);
            sustained_updates += 1;
        }
        let (c2, t2) = (measure::sum(&counters), Instant::now());
        // Phase 3: readers alone.
        std::thread::sleep(cfg.phase);
        let (c3, t3) = (measure::sum(&counters), Instant::now());
        stop.stop();
        for h in handles {
            super::join(h)?;
        }
        Ok([(c1 - c0, t1 - t0), (c2 - c1, t2 - t1), (c3 - c2, t3 - t2)])
    })?;
    let final_rules = table.finish();
    let [(additions, window), (sustained, sustained_len), (alone, alone_len)] = phases;
    Ok(SchemeResult {
        scheme: id,
        description: id.describe(),
        update_ms_total: measure::ms(window),
        update_us: Summary::of(&update_times),
        reader_lookups_per_s: LookupRates {
            during_writer: per_sec(sustained, sustained_len),
            alone: per_sec(alone, alone_len),
            during_additions: per_sec(additions, window),
        },
        writer_window_ms: measure::ms(window),
        sustained_updates_per_s: per_sec(sustained_updates, sustained_len),
        vs_baseline: Ratios {
            update_time: None,
            lookups_during_writer: None,
            lookups_alone: None,
        },
        tables_replaced: table.replaced(),
        tables_freed: table.freed(),
        final_rules,
        wrong_verdicts: wrong.load(Relaxed),
    })
}

fn reader(
    table: &dyn RuleTable,
    packets: &[(Packet, u8)],
    counter: &Counter,
    stop: &StopFlag,
    wrong: &AtomicU64,
) {
    let mask = packets.len() - 1;
    let (mut n, mut i, mut bad) = (0u64, 0usize, 0u64);
    while !stop.stopped() {
        for _ in 0..16 {
            let (p, expected) = &packets[i];
            if table.classify(black_box(p)) != *expected {
                bad += 1;
            }
            i = (i + 1) & mask;
        }
        n += 16;
        counter.publish(n);
    }
    wrong.fetch_add(bad, Relaxed);
}

// ----------------------------------------------------------------------------------------------
// Rendering

/// Tables, plot and headlines.
pub fn render(r: &Report) -> Result<Rendered> {
    let seed = &r.seed;
    let base = r.baseline.id();
    let get = |id| r.scheme(id);
    let ours = |id: SchemeId| {
        get(id)
            .map(|s| {
                format!(
                    "{} / {base} = {} / {} ms = {}",
                    id.id(),
                    report::num(s.update_ms_total),
                    report::num(get(r.baseline).map_or(f64::NAN, |b| b.update_ms_total)),
                    report::ratio(s.vs_baseline.update_time)
                )
            })
            .unwrap_or_else(|| "not run".into())
    };
    let mut md = String::new();
    md.push_str(&format!(
        "{} rule additions (each a copy of the table plus one rule) against a {}-rule table \
         while {} reader thread(s) classify packets by linear scan.\n\n",
        r.config.additions, r.config.rules, r.config.readers
    ));
    md.push_str("### The seed's figures beside ours\n\n");
    let mut side = Table::new(&["comparison", "seed (kernel)", "ours (this run)"]);
    side.row(vec![
        format!("current, {} additions", r.config.additions),
        format!(
            "xt_recseq: {:.0} ms for 200 ({:.2} ms each, mostly starting `iptables`)",
            seed.current_ms,
            seed.current_ms / 200.0
        ),
        get(r.baseline)
            .map(|b| {
                format!(
                    "{base}: {} ms ({} µs each, p50 {} µs)",
                    report::num(b.update_ms_total),
                    report::num(b.update_ms_total * 1e3 / r.config.additions as f64),
                    report::num(b.update_us.p50)
                )
            })
            .unwrap_or_else(|| "not run".into()),
    ]);
    side.row(vec![
        "synchronize / current".into(),
        format!(
            "{:.0} / {:.0} ms = {:.2}x",
            seed.synchronize_rcu_ms, seed.current_ms, seed.synchronize_ratio
        ),
        ours(SchemeId::RcuSync),
    ]);
    side.row(vec![
        "expedited / current".into(),
        format!(
            "{:.0} / {:.0} ms = {:.2}x",
            seed.expedited_ms, seed.current_ms, seed.expedited_ratio
        ),
        ours(SchemeId::RcuExpedited),
    ]);
    let extra = |id: SchemeId| match (get(id), get(r.baseline)) {
        (Some(s), Some(b)) => format!(
            "{:+.3} ms per addition ({} − {base})",
            (s.update_ms_total - b.update_ms_total) / r.config.additions as f64,
            id.id()
        ),
        _ => "not run".into(),
    };
    side.row(vec![
        "time synchronize adds to each addition".into(),
        format!(
            "{:+.2} ms per addition",
            (seed.synchronize_rcu_ms - seed.current_ms) / 200.0
        ),
        extra(SchemeId::RcuSync),
    ]);
    side.row(vec![
        "time expedited adds to each addition".into(),
        format!(
            "{:+.3} ms per addition",
            (seed.expedited_ms - seed.current_ms) / 200.0
        ),
        extra(SchemeId::RcuExpedited),
    ]);
    side.row(vec![
        "RCU (2.6.30-rc1) / rwlock (2.6.29)".into(),
        format!("6.0 / 0.2 s = {:.0}x", seed.history_rcu_vs_rwlock_ratio),
        match (get(SchemeId::RcuSync), get(SchemeId::RwlockCopy)) {
            (Some(s), Some(c)) => format!(
                "rcu-sync / rwlock-copy = {} / {} ms = {}",
                report::num(s.update_ms_total),
                report::num(c.update_ms_total),
                report::ratio(ratio(s.update_ms_total, c.update_ms_total))
            ),
            _ => "not run".into(),
        },
    ]);
    md.push_str(&side.to_markdown());
    let order = match (
        get(SchemeId::RcuSync),
        get(SchemeId::RcuExpedited),
        get(r.baseline),
    ) {
        (Some(sync), Some(exp), Some(b)) => format!(
            " In this run synchronize took {} of expedited's time and expedited {} of \
             `{base}`'s (seed: {:.2}x and {:.2}x).",
            report::ratio(ratio(sync.update_ms_total, exp.update_ms_total)),
            report::ratio(ratio(exp.update_ms_total, b.update_ms_total)),
            seed.synchronize_rcu_ms / seed.expedited_ms,
            seed.expedited_ratio
        ),
        _ => String::new(),
    };
    md.push_str(&format!(
        "\nSeed: {}. Our \"current\" is `{base}`: {}. The seed's times include starting \
         `iptables` 200 times (about 5 ms each), which ours do not have, so our ratios are \
         far larger; the time each wait *adds* to an addition compares directly.{order}\n\n",
        seed.source, r.baseline_note
    ));
    md.push_str("### Our measurements\n\n");
    let mut t = Table::new(&[
        "scheme",
        "writer",
        "additions total (ms)",
        "vs baseline",
        "per addition p50 / p99 (µs)",
        "writer updates/s (sustained)",
        "lookups/s during writer",
        "vs baseline",
        "lookups/s alone",
        "vs baseline",
        "tables freed / replaced",
        "wrong verdicts",
    ]);
    for s in &r.schemes {
        t.row(vec![
            format!("`{}`", s.scheme.id()),
            s.description.into(),
            format!("{:.1}", s.update_ms_total),
            report::ratio(s.vs_baseline.update_time),
            format!(
                "{} / {}",
                report::num(s.update_us.p50),
                report::num(s.update_us.p99)
            ),
            report::num(s.sustained_updates_per_s),
            report::num(s.reader_lookups_per_s.during_writer),
            report::ratio(s.vs_baseline.lookups_during_writer),
            report::num(s.reader_lookups_per_s.alone),
            report::ratio(s.vs_baseline.lookups_alone),
            format!("{} / {}", s.tables_freed, s.tables_replaced),
            s.wrong_verdicts.to_string(),
        ]);
    }
    md.push_str(&t.to_markdown());
    md.push_str(&format!(
        "\n\"During writer\": the {} ms sustained phase in which the writer adds and removes a \
         rule back to back, as fast as its scheme lets it (its rate is the column before). \
         \"Alone\": readers only, {} ms. Lookups/s count all readers together.\n",
        r.config.phase.as_millis(),
        r.config.phase.as_millis()
    ));
    md.push_str(&super::unavailable_note(&r.not_available));

    let cats: Vec<String> = r
        .schemes
        .iter()
        .map(|s| s.scheme.id().to_string())
        .collect();
    let svg = plot::render(&[
        Panel::Bars {
            title: format!("{} rule additions: total time", r.config.additions),
            value: Axis::log("milliseconds (log)"),
            categories: cats.clone(),
            series: vec![(
                "total".into(),
                r.schemes.iter().map(|s| s.update_ms_total).collect(),
            )],
        },
        Panel::Bars {
            title: "reader lookups per second".into(),
            value: Axis::linear("lookups/s (all readers)"),
            categories: cats,
            series: vec![
                (
                    "during writer".into(),
                    r.schemes
                        .iter()
                        .map(|s| s.reader_lookups_per_s.during_writer)
                        .collect(),
                ),
                (
                    "alone".into(),
                    r.schemes
                        .iter()
                        .map(|s| s.reader_lookups_per_s.alone)
                        .collect(),
                ),
            ],
        },
    ])?;
    let mut headlines = Vec::new();
    if let (Some(sync), Some(exp), Some(b)) = (
        get(SchemeId::RcuSync),
        get(SchemeId::RcuExpedited),
        get(r.baseline),
    ) {
        let n = r.config.additions as f64;
        headlines.push(format!(
            "each addition: synchronize adds {:+.2} ms, expedited {:+.3} ms over `{base}` (seed: \
             {:+.2} ms and {:+.3} ms over current); totals {} and {} of `{base}`",
            (sync.update_ms_total - b.update_ms_total) / n,
            (exp.update_ms_total - b.update_ms_total) / n,
            (seed.synchronize_rcu_ms - seed.current_ms) / 200.0,
            (seed.expedited_ms - seed.current_ms) / 200.0,
            report::ratio(sync.vs_baseline.update_time),
            report::ratio(exp.vs_baseline.update_time),
        ));
    }
    let lookups = |id: SchemeId| {
        get(id).map_or_else(
            || "not run".to_string(),
            |s| {
                format!(
                    "{} {} / {}",
                    id.id(),
                    report::ratio(s.vs_baseline.lookups_during_writer),
                    report::ratio(s.vs_baseline.lookups_alone)
                )
            },
        )
    };
    headlines.push(format!(
        "reader lookups/s vs `{base}`, while the writer runs flat out / readers alone: {}, {}, \
         {}",
        lookups(SchemeId::RcuRetire),
        lookups(SchemeId::PercpuRwlock),
        lookups(SchemeId::Rwlock)
    ));
    Ok(Rendered {
        markdown: md,
        svg: Some(svg),
        headlines,
    })
}

/// The experiment, for the shared drivers.
pub struct Netfilter;

impl Experiment for Netfilter {
    const NAME: &'static str = NAME;
    const TITLE: &'static str = "Seeds 000 and 002: netfilter rule-table updates";
    const SEEDS: &'static [&'static str] = &["000", "002"];
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
