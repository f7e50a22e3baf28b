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
//! The `RcuCell`s tell their domain what a retired table frees (`RcuCell::retired_size`: the
//! rules' buffer, not the 32-byte `Vec` header). Without it, `rcu-retire` kept thousands of
//! 24 KiB tables waiting for their grace period before the writer tried to reclaim any, so
//! that every copy went to fresh pages (page faults inside `memcpy`): 10 µs per addition at
//! the median against `recseq`'s 1.4 µs. With it, the writer reclaims after about ten
//! tables, and new copies reuse old tables' memory.
//!
//! The baseline for every ratio is `recseq`, the seed's "current" scheme: netfilter's
//! `xt_recseq`, which `rcukit::RecSeq` rebuilds (readers make a per-thread sequence counter
//! odd with a full fence, the writer swaps the table and scans the counters).
//!
//! # Rounds
//!
//! The main table runs each scheme once, about four seconds apart, and on a shared machine
//! the cost of copying a table drifts over such spans: in ten runs in a row, every copying
//! scheme's p50 per addition was about 1.4 µs in six and about 3 µs in four, all schemes
//! together. So the per-addition time is also measured in `--rounds` interleaved rounds
//! (every scheme but `rcu-sync`, whose 200 additions take seconds): each round runs each
//! scheme's additions once on a fresh table with its readers, in an order rotated from round
//! to round, and the ratio to `recseq` is taken within each round ([`AdditionRounds`]).

mod render;
mod rules;
mod run;
mod schemes;

pub use run::{
    round_schemes, run, AdditionRounds, Body, LookupRates, Ratios, SchemeResult, SeedFigures,
};
pub use schemes::SchemeId;

use super::{
    check_duration, check_range, check_threads, ser_ms, Common, Envelope, Experiment, Rendered,
    Unavailable,
};
use crate::progress::Progress;
use anyhow::Result;
use serde::Serialize;
use std::time::Duration;

/// File stem and subcommand name.
pub const NAME: &str = "netfilter";

/// Schemes the experiment knows but this build cannot run yet (none: every scheme it
/// compares runs).
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
    /// Length of the sustained-update phase and of the reader-only phase (each stretches, up
    /// to 50 times, while the readers have not yet run at all: see `run.rs`).
    #[serde(rename = "phase_ms", serialize_with = "ser_ms")]
    pub phase: Duration,
    /// Interleaved rounds of the per-addition timing ([`AdditionRounds`]).
    pub rounds: usize,
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
            rounds: common.pick(5, 7),
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
        check_range("--rounds", self.rounds as u64, 1, 1000)?;
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
    #[arg(long, value_parser = crate::args::parse_duration)]
    pub phase: Option<Duration>,
    /// Interleaved rounds of the per-addition timing (every scheme but rcu-sync)
    /// [default: 5 quick, 7 full]
    #[arg(long)]
    pub rounds: Option<usize>,
}

/// The experiment's result: the envelope around [`Body`].
pub type Report = Envelope<Config, Body>;

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
        crate::override_fields!(args => cfg; rules, additions, readers, phase, rounds);
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
