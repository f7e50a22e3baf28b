//! Seed 003: network-namespace creation while teardown waits for a grace period.
//!
//! # What the seed measured
//!
//! `cleanup_net()` took `net_mutex`, unlinked the dying namespaces with `list_del_rcu`, and
//! then slept in `synchronize_rcu()` *with the mutex held*; `copy_net_ns()` (every
//! `unshare(CLONE_NEWNET)`) needs the same mutex, so creating namespaces stalled behind every
//! teardown's grace period. Kirill Tkhai's patch made `net_mutex` a reader-writer semaphore
//! taken for reading by both paths. A loop of 10,000 `unshare -n bash -c exit` went from
//! 1m24.19s to 18.235s: 4.6 times faster (a tighter C loop of 100,000 `unshare()`: 99.85 s to
//! 68.34 s, 1.46x).
//!
//! # The model
//!
//! * A *creator* thread (or several) loops like the seed's shell loop: `process` work outside
//!   any lock (fork and exec of `bash`), then `copy_net_ns`: take the lock (mutex, or the
//!   rwlock for reading), `setup` work, link the namespace at the tail of
//!   `net_namespace_list` (an `rcukit::RcuList`, `list_add_tail_rcu`), unlock; then the
//!   process exits and the namespace is queued for cleanup.
//! * A *cleanup* thread (the kernel's `cleanup_net` work item) takes every queued namespace,
//!   takes the lock (mutex / rwlock read), unlinks them from the list (`retain`, the kernel's
//!   `list_del_rcu` per namespace), waits for a normal grace period with `synchronize()`
//!   while still holding the lock, runs `exit` work per namespace, unlocks and frees them.
//! * A `for_each_net` reader walks the list under `Rcu::read` now and then, so the grace
//!   periods have a reader to wait for.
//!
//! The default work lengths follow the seed: the patched loop spent 1.8 ms per iteration
//! (18.235 s / 10,000), which we split as 1.5 ms of process work and 0.3 ms of setup under the
//! lock; teardown does 0.1 ms of exit work per namespace. The ratio then comes out of our own
//! grace-period latency, which is measured and reported beside it.
//!
//! Every namespace created is destroyed and freed by the end of the run (checked).

mod render;
mod run;
mod schemes;

pub use run::{run, Body, SchemeResult};
pub use schemes::SchemeId;

use super::{check_duration, check_threads, ser_ms, Common, Envelope, Experiment, Rendered};
use crate::measure;
use crate::progress::Progress;
use anyhow::Result;
use serde::Serialize;
use std::time::Duration;

/// File stem and subcommand name.
pub const NAME: &str = "netns";

/// Settings.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Creator threads (the seed: one shell loop).
    pub creators: usize,
    /// Work per iteration outside any lock (process creation).
    #[serde(rename = "process_us", serialize_with = "ser_us")]
    pub process: Duration,
    /// Work under the lock in `copy_net_ns` (`setup_net`).
    #[serde(rename = "setup_us", serialize_with = "ser_us")]
    pub setup: Duration,
    /// Work per namespace in teardown, under the lock (`ops_exit_list`).
    #[serde(rename = "exit_us", serialize_with = "ser_us")]
    pub exit: Duration,
    /// Measuring time per scheme.
    #[serde(rename = "duration_ms", serialize_with = "ser_ms")]
    pub duration: Duration,
    /// Quick mode.
    pub quick: bool,
}

fn ser_us<S: serde::Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(measure::us(*d))
}

impl Config {
    /// Defaults for `common`.
    pub fn new(common: &Common) -> Config {
        Config {
            creators: 1,
            process: Duration::from_micros(1500),
            setup: Duration::from_micros(300),
            exit: Duration::from_micros(100),
            duration: common.pick(Duration::from_secs(1), Duration::from_secs(4)),
            quick: common.quick,
        }
    }

    /// Reject impossible settings.
    pub fn validate(&self) -> Result<()> {
        check_threads("--creators", self.creators)?;
        check_duration("--duration", self.duration)?;
        for (what, d) in [
            ("--process", self.process),
            ("--setup", self.setup),
            ("--exit", self.exit),
        ] {
            if d > Duration::from_secs(1) {
                anyhow::bail!("{what} = {d:?} is longer than the 1 s the lab allows");
            }
        }
        Ok(())
    }
}

/// Flags of the `netns` subcommand.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Args {
    /// Creator threads [default: 1, like the seed's loop]
    #[arg(long)]
    pub creators: Option<usize>,
    /// Work per iteration outside the lock, e.g. 1500us [default: 1500us]
    #[arg(long, value_parser = crate::args::parse_duration)]
    pub process: Option<Duration>,
    /// Work under the lock when creating, e.g. 300us [default: 300us]
    #[arg(long, value_parser = crate::args::parse_duration)]
    pub setup: Option<Duration>,
    /// Work per namespace in teardown, e.g. 100us [default: 100us]
    #[arg(long, value_parser = crate::args::parse_duration)]
    pub exit: Option<Duration>,
    /// Measuring time per scheme [default: 1s quick, 4s full]
    #[arg(long, value_parser = crate::args::parse_duration)]
    pub duration: Option<Duration>,
}

/// The experiment's result: the envelope around [`Body`].
pub type Report = Envelope<Config, Body>;

/// The experiment, for the shared drivers.
pub struct Netns;

impl Experiment for Netns {
    const NAME: &'static str = NAME;
    const TITLE: &'static str = "Seed 003: netns create/destroy, net_mutex vs rw_semaphore";
    const SEEDS: &'static [&'static str] = &["003"];
    type Config = Config;
    type Args = Args;
    type Report = Report;

    fn config(common: &Common) -> Config {
        Config::new(common)
    }

    fn apply(args: &Args, cfg: &mut Config) {
        crate::override_fields!(args => cfg; creators, process, setup, exit, duration);
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
