//! The experiments, one module per seed experiment, and what they share.
//!
//! # Shape of an experiment
//!
//! Every experiment is a folder, `experiments/NAME/`, and one `impl` of the [`Experiment`]
//! trait (in [`kit`], with the rest of the shared plumbing):
//!
//! * `mod.rs`: the module documentation (what the seed measured, the model, the schemes), a
//!   `Config` with every setting, built from [`Common`] (quick or full, thread count) by
//!   `Config::new` and checked by `Config::validate` (bad settings are errors, never panics);
//!   an `Args` (clap) whose flags override the config when the experiment runs alone, applied
//!   with [`override_fields!`](crate::override_fields); `type Report = Envelope<Config, Body>`;
//!   and the `impl Experiment` (name, title, seeds, and the four functions below);
//! * `schemes.rs`: the ways to do the seed's job (a lock, RCU with one kind of wait, an epoch
//!   peer ...). One idiom everywhere: a `SchemeId` enum (`ALL`, `id`, `describe`; `MapId` in
//!   `conntrack`, one enum per part in `peers`) names the schemes, and a `match` on it builds
//!   or runs each one, behind a small trait where the schemes are different types;
//! * `run.rs`: `run(&Config, &Progress) -> Result<Report>`, the workload and the measurements;
//!   the [`Envelope`] records the experiment, its seeds, the environment and the config beside
//!   the experiment's `Body` (flattened into one JSON object);
//! * `render.rs`: `render(&Report) -> Result<Rendered>`, the Markdown tables (ours and the
//!   seed's figures side by side), the SVG plot and the headline lines, each in a function of
//!   its own; [`outcome`] adds the names and the JSON.
//!
//! Larger experiments split the workload further (`conntrack/flow.rs` and `clock.rs`,
//! `netfilter/rules.rs`, `capture/packets.rs`, `peers/{read,grace_period,retire}.rs`). The
//! seeds' own figures live in [`seeds`], once. The command line reaches every experiment
//! through [`configure`] (its settings checked before anything is written) and
//! [`run_configured`], and `reproduce` through [`run_default`].
//!
//! # Schemes that this build does not have
//!
//! A scheme an experiment knows but this build cannot run (because a primitive it needs is
//! missing) goes in the module's `UNAVAILABLE` constant of [`Unavailable`] entries; the JSON
//! and the report list it under "not available in this build", and nothing is ever measured
//! or claimed for it. Every scheme the experiments compare runs today, so those lists are empty;
//! only `conntrack` lists liburcu's rculfhash when built without the `c-peers` feature.

pub mod callbacks;
pub mod capture;
pub mod conntrack;
pub mod kit;
pub mod netfilter;
pub mod netns;
pub mod peers;
pub mod percpu;
pub mod seeds;

pub use kit::{
    configure, measure_each, outcome, run_configured, run_default, Envelope, Experiment, Rendered,
};

use crate::env::available_cores;
use crate::progress::Progress;
pub use crate::report::Outcome;
use anyhow::{bail, Result};
use serde::Serialize;
use std::time::Duration;

/// A scheme the experiment knows about but this build cannot run yet.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct Unavailable {
    /// The scheme's name as it will appear once available.
    pub scheme: &'static str,
    /// What it needs (the missing primitive, or the build feature).
    pub needs: &'static str,
}

/// Markdown note listing the schemes not available in this build.
pub fn unavailable_note(list: &[Unavailable]) -> String {
    if list.is_empty() {
        return String::new();
    }
    let mut s = String::from("\nNot available in this build (nothing is measured for them):\n\n");
    for u in list {
        s.push_str(&format!("* `{}`: needs {}\n", u.scheme, u.needs));
    }
    s
}

/// Settings every experiment takes.
#[derive(Clone, Copy, Debug)]
pub struct Common {
    /// Short runs (the whole `reproduce --quick` within 3 minutes on 2 cores).
    pub quick: bool,
    /// Thread count that "as many as the machine has" defaults to.
    pub threads: usize,
}

impl Common {
    /// Quick or full, with the machine's core count.
    pub fn new(quick: bool) -> Common {
        Common {
            quick,
            threads: available_cores(),
        }
    }

    /// Pick the quick or the full value.
    pub fn pick<T>(&self, quick: T, full: T) -> T {
        if self.quick {
            quick
        } else {
            full
        }
    }
}

/// The experiments, in the order `reproduce` runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExperimentId {
    /// Seeds 000 and 002: rule-table updates under rwlock, RCU and friends.
    Netfilter,
    /// Seed 001: packet drops while tcpdump changes filters.
    Capture,
    /// Seed 002: read throughput by thread count.
    Percpu,
    /// Seed 003: netns create/destroy, mutex vs rwsem.
    Netns,
    /// Seed 004: callbacks released by expedited grace periods.
    Callbacks,
    /// Read-side cost, grace-period latency and retire throughput against the peers.
    Peers,
    /// A conntrack-like flow table: RcuHashMap beside the concurrent maps in use today.
    Conntrack,
}

impl ExperimentId {
    /// All experiments in run order.
    pub const ALL: [ExperimentId; 7] = [
        ExperimentId::Netfilter,
        ExperimentId::Capture,
        ExperimentId::Percpu,
        ExperimentId::Netns,
        ExperimentId::Callbacks,
        ExperimentId::Peers,
        ExperimentId::Conntrack,
    ];

    /// The file stem and subcommand name.
    pub fn name(self) -> &'static str {
        match self {
            ExperimentId::Netfilter => netfilter::Netfilter::NAME,
            ExperimentId::Capture => capture::Capture::NAME,
            ExperimentId::Percpu => percpu::Percpu::NAME,
            ExperimentId::Netns => netns::Netns::NAME,
            ExperimentId::Callbacks => callbacks::Callbacks::NAME,
            ExperimentId::Peers => peers::Peers::NAME,
            ExperimentId::Conntrack => conntrack::Conntrack::NAME,
        }
    }

    /// Run with the default configuration for `common` and render.
    pub fn run_default(self, common: &Common, progress: &Progress) -> Result<Outcome> {
        match self {
            ExperimentId::Netfilter => run_default::<netfilter::Netfilter>(common, progress),
            ExperimentId::Capture => run_default::<capture::Capture>(common, progress),
            ExperimentId::Percpu => run_default::<percpu::Percpu>(common, progress),
            ExperimentId::Netns => run_default::<netns::Netns>(common, progress),
            ExperimentId::Callbacks => run_default::<callbacks::Callbacks>(common, progress),
            ExperimentId::Peers => run_default::<peers::Peers>(common, progress),
            ExperimentId::Conntrack => run_default::<conntrack::Conntrack>(common, progress),
        }
    }
}

/// Longest duration any single phase may be given on the command line.
pub const MAX_PHASE: Duration = Duration::from_secs(600);

/// Check a thread count.
pub fn check_threads(what: &str, n: usize) -> Result<()> {
    if n == 0 {
        bail!("{what} must be at least 1");
    }
    if n > 1024 {
        bail!("{what} = {n} is more than the 1024 threads the lab allows");
    }
    Ok(())
}

/// Check a duration is positive and at most [`MAX_PHASE`].
pub fn check_duration(what: &str, d: Duration) -> Result<()> {
    if d.is_zero() {
        bail!("{what} must be longer than zero");
    }
    if d > MAX_PHASE {
        bail!("{what} = {d:?} is longer than the maximum of {MAX_PHASE:?}");
    }
    Ok(())
}

/// Check that a list flag names each value once (a value given twice would be measured
/// twice, under one name); `name` spells a value as the flag takes it.
pub fn check_distinct<T: PartialEq>(
    what: &str,
    list: &[T],
    name: impl Fn(&T) -> String,
) -> Result<()> {
    for (i, v) in list.iter().enumerate() {
        if list[..i].contains(v) {
            bail!("{what} lists {} twice", name(v));
        }
    }
    Ok(())
}

/// Check a count lies in `lo..=hi`.
pub fn check_range(what: &str, n: u64, lo: u64, hi: u64) -> Result<()> {
    if n < lo || n > hi {
        bail!("{what} = {n} is outside {lo}..={hi}");
    }
    Ok(())
}

/// Serialize a [`Duration`] as milliseconds (f64).
pub fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(crate::measure::ms(*d))
}

/// Serialize a list of [`Duration`]s as milliseconds.
pub fn ser_ms_list<S: serde::Serializer>(
    d: &[Duration],
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(d.len()))?;
    for x in d {
        seq.serialize_element(&crate::measure::ms(*x))?;
    }
    seq.end()
}

/// Spawn a named scoped thread, turning a spawn failure into an error instead of a panic.
///
/// A scope whose closure returns that error early (or any other, or panics) must first release
/// the threads it already started, or the scope's own join waits for them for ever: put an
/// [`OnExit`] that stops them at the top of the closure. `RCUKIT_LAB_REFUSE_THREAD=N` makes the
/// process's `N`th thread started here fail as a refused one would (for the tests).
pub fn spawn_scoped<'scope, 'env, T, F>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    name: &str,
    f: F,
) -> Result<std::thread::ScopedJoinHandle<'scope, T>>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    if refused_for_tests() {
        anyhow::bail!("cannot start thread {name}: refused (RCUKIT_LAB_REFUSE_THREAD)");
    }
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn_scoped(scope, f)
        .map_err(|e| anyhow::anyhow!("cannot start thread {name}: {e}"))
}

/// Is this the thread that `RCUKIT_LAB_REFUSE_THREAD` names (counting every thread started by
/// [`spawn_scoped`] in the process, from 1)?
fn refused_for_tests() -> bool {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::OnceLock;
    static REFUSE: OnceLock<Option<u64>> = OnceLock::new();
    static STARTED: AtomicU64 = AtomicU64::new(0);
    let refuse = *REFUSE.get_or_init(|| {
        std::env::var("RCUKIT_LAB_REFUSE_THREAD")
            .ok()
            .and_then(|v| v.parse().ok())
    });
    refuse.is_some_and(|n| STARTED.fetch_add(1, Relaxed) + 1 == n)
}

/// Runs its closure when dropped. At the top of a thread scope's closure, with the closure
/// that stops the scope's threads (raises their stop flag, calls their start line off), it
/// releases them however the closure ends: a thread that could not start, a join that found a
/// panic, an early error, an unwind. Otherwise the scope would wait for them for ever. On a
/// normal return they were told to stop already, and telling them again changes nothing.
pub struct OnExit<F: FnMut()>(pub F);

impl<F: FnMut()> Drop for OnExit<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// A start line for a scope's threads, as `std::sync::Barrier` is, that can be called off: the
/// threads waiting at it when a later one cannot start are let go instead of waiting for ever.
pub struct StartGate {
    n: usize,
    /// Threads arrived, and whether the start was called off.
    state: std::sync::Mutex<(usize, bool)>,
    cond: std::sync::Condvar,
}

impl StartGate {
    /// A line that `n` threads wait at.
    pub fn new(n: usize) -> StartGate {
        StartGate {
            n,
            state: std::sync::Mutex::new((0, false)),
            cond: std::sync::Condvar::new(),
        }
    }

    /// Wait until all `n` threads have arrived (true), or the start was called off (false).
    pub fn wait(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.0 += 1;
        if state.0 >= self.n {
            self.cond.notify_all();
        }
        while state.0 < self.n && !state.1 {
            state = self.cond.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.0 >= self.n
    }

    /// Let every waiting thread go, unstarted.
    pub fn call_off(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        self.cond.notify_all();
    }
}

/// Join a scoped thread, turning a panic in it into an error.
pub fn join<T>(handle: std::thread::ScopedJoinHandle<'_, T>) -> Result<T> {
    handle
        .join()
        .map_err(|_| anyhow::anyhow!("a measurement thread panicked (see stderr)"))
}
