//! # rcukit-torture: rcutorture's method, for rcukit
//!
//! Linux's rcutorture is how the kernel's RCU earns trust: a writer keeps replacing an element
//! that readers keep reading, the removed elements *age* with every grace period, and a reader
//! that ever sees an element that has aged past one grace period proves that a grace period
//! ended while a reader could still see what it protected. This crate applies that method,
//! written anew, to rcukit.
//!
//! ```no_run
//! use rcukit_torture::{run, Config, FlavorName};
//! use std::time::Duration;
//!
//! let report = run(&Config {
//!     duration: Duration::from_secs(10),
//!     flavor: FlavorName::Rcu,
//!     ..Config::default()
//! })
//! .expect("valid configuration");
//! println!("{report}"); // rcutorture-style lines, then SUCCESS or FAILURE
//! assert!(report.passed());
//! ```
//!
//! ## What runs
//!
//! * `writer`: publishes, removes, and retires by a random update path:
//!   every wait (`synchronize`, `synchronize_expedited`, `cond_synchronize*`, polling loops on
//!   cookies from `get_state`/`start_poll`/`start_poll_expedited`), `call` chains, `retire`
//!   chains and `barrier`.
//! * `reader`: randomly extended and nested critical sections that record the
//!   ages they saw (Reader Pipe), the grace periods that completed meanwhile (Reader Batch),
//!   and check that a cookie taken inside never expires before the section ends. Between
//!   sections, the flavor's quiescent-state hook (QSBR readers: after bursts of sections,
//!   checked as one critical section) and pauses, offline for QSBR.
//! * `updater`: rcutorture's "fake writers", waiting in every way
//!   concurrently, checking that a cookie taken before a wait expires by its end, and testing
//!   `barrier()`.
//! * [`faults`]: reader threads that exit and respawn, panicking callbacks, a
//!   reader that stalls past the stall timeout, bursts of `call` or `retire` past the backlog
//!   threshold.
//!
//! ## Why a pass means something
//!
//! [`pipe`] explains why a correct RCU never lets a reader see an age above 1,
//! and [`flavor`] why no engine can complete two grace periods inside one
//! critical section. The `busted` flavor, whose grace periods return at once, must make the
//! same checker report FAILURE: the test suite runs it every time, so a checker that stopped
//! detecting anything would fail the build.
//!
//! ## Flavors
//!
//! The engine is generic over [`Flavor`] (rcutorture's `rcu_torture_ops`). This build has
//! [`FlavorName::Rcu`] (an `rcukit::Rcu` domain), [`FlavorName::Qsbr`] (an `rcukit::Qsbr`
//! domain: registered readers, quiescent states, offline sleeps), [`FlavorName::Recseq`] (an
//! `rcukit::RecSeq` whose `replace` is the grace period; the update paths it lacks are skipped
//! and listed in the report) and [`FlavorName::Busted`]. [`run_flavor`] tortures any other
//! implementation of the trait.
//!
//! The `rcu` flavor's readers also take *owned* sections (`Rcu::read_owned`, a fraction
//! [`Config::owned`] of them): some sleep inside, some hand their guard and what they read to
//! a helper thread that makes the section's end-of-section checks there and drops the guard.
//! [`FlavorName::BustedOwned`] drops every owned guard as soon as it is taken, and must fail.
//!
//! [`FlavorName::Map`] is the `rcu` run plus an `rcukit::RcuHashMap` on the same domain, whose
//! values are elements of a second pipe: readers look keys up and check the values' ages, map
//! writers replace, insert and remove keys and push the table through grow/shrink cycles (see
//! [`map`]). [`FlavorName::BustedMap`] builds the map so that it drops removed values at once,
//! and must fail. [`FlavorName::FlatMap`] and [`FlavorName::BustedFlatMap`] are the same runs
//! with an `rcukit::RcuFlatMap`, whose values are cloned into each new table and dropped with
//! the table they were removed from. [`FlavorName::QsbrFlatMap`] and
//! [`FlavorName::QsbrFencedFlatMap`] are the `qsbr` runs plus an `RcuFlatMap` on their QSBR
//! domain, read through the readers' registrations ([`Flavor::qsbr_thread`]);
//! [`FlavorName::BustedQsbrFlatMap`] must fail.
//!
//! ## Layers
//!
//! Each module uses only modules of the layers before it (`scripts/check-layers.sh` checks
//! it): `config` and `flavor` (the settings and the implementations under test); `pipe` (the
//! element pool and the histograms of ages); `counters`; [`map`] and `handoff` (the map under
//! test, and the owned sections readers hand to helper threads); `shared` (the state every
//! thread of a run shares); `update` (the update paths); the actors, `reader`, `writer`,
//! `updater`, [`faults`] and `map_writer`; [`report`] (the verdict); and `engine`, which
//! builds the shared state, starts the actors, stops them and writes the report.
//!
//! ## From another binary
//!
//! [`TortureArgs`] is a `clap::Args` struct: flatten it into a subcommand and call [`cli`],
//! which runs, prints the report and returns the exit code (0 pass, 1 failure, 2 bad usage).

#![warn(missing_docs)]

pub mod config;
pub mod counters;
mod engine;
pub mod faults;
pub mod flavor;
mod handoff;
pub mod map;
mod map_writer;
pub mod pipe;
mod reader;
pub mod report;
mod shared;
mod update;
mod updater;
mod writer;

pub use config::{Config, FenceArg, FlavorName, TortureArgs, TortureError};
pub use flavor::{Flavor, FlavorSettings, FlavorStats, UpdateKind};
pub use report::Report;

use std::process::ExitCode;

/// Run a torture test as `config` says and return its report. Progress lines (if
/// `config.progress` is set) and the flavor's own stall and panic reports go to stderr.
pub fn run(config: &Config) -> Result<Report, TortureError> {
    config.validate()?;
    let seed = config.seed.unwrap_or_else(clock_seed);
    let settings = FlavorSettings {
        fence: config.fence,
        stall_timeout: config.stall_timeout,
        backlog_callbacks: config.backlog_callbacks,
        callback_workers: 2,
    };
    match config.flavor {
        FlavorName::Rcu => {
            let flavor = flavor::rcu::RcuFlavor::new(&settings)?;
            Ok(engine::run(flavor, None, config, seed))
        }
        FlavorName::Busted => {
            let flavor = flavor::busted::BustedFlavor::new(&settings)?;
            Ok(engine::run(flavor, None, config, seed))
        }
        FlavorName::BustedBarrier => {
            let flavor = flavor::rcu::RcuFlavor::new(&settings)?.with_busted_barrier();
            Ok(engine::run(flavor, None, config, seed))
        }
        FlavorName::BustedOwned => {
            let flavor = flavor::rcu::RcuFlavor::new(&settings)?.with_busted_owned();
            Ok(engine::run(flavor, None, config, seed))
        }
        FlavorName::Map
        | FlavorName::BustedMap
        | FlavorName::FlatMap
        | FlavorName::BustedFlatMap => {
            let flavor = flavor::rcu::RcuFlavor::new(&settings)?.named(config.flavor.as_str());
            let (kind, busted) = match config.flavor {
                FlavorName::Map => (map::MapKind::Hash, false),
                FlavorName::BustedMap => (map::MapKind::Hash, true),
                FlavorName::FlatMap => (map::MapKind::Flat, false),
                _ => (map::MapKind::Flat, true),
            };
            let domain = map::MapDomain::Rcu(flavor.domain_arc());
            let map = map::MapTorture::new(kind, domain, busted)?;
            Ok(engine::run(flavor, Some(map), config, seed))
        }
        FlavorName::Qsbr
        | FlavorName::QsbrFenced
        | FlavorName::QsbrFlatMap
        | FlavorName::QsbrFencedFlatMap
        | FlavorName::BustedQsbrFlatMap => run_qsbr(config, &settings, seed),
        FlavorName::Recseq => {
            let flavor = flavor::recseq::RecSeqFlavor::new(&settings)?;
            Ok(engine::run(flavor, None, config, seed))
        }
    }
}

/// The runs on a QSBR domain: `qsbr` and `qsbr-fenced`, and the same with an `RcuFlatMap` on
/// the domain.
fn run_qsbr(config: &Config, settings: &FlavorSettings, seed: u64) -> Result<Report, TortureError> {
    if config.fence == Some(rcukit::FenceKind::Membarrier) {
        return Err(TortureError::InvalidConfig(format!(
            "--fence membarrier does not apply to the {} flavor: a QSBR domain's readers have \
             no barrier, and its grace periods always use SeqCst fences",
            config.flavor.as_str()
        )));
    }
    let fenced = matches!(
        config.flavor,
        FlavorName::QsbrFenced | FlavorName::QsbrFencedFlatMap
    );
    let flavor = flavor::qsbr::QsbrFlavor::new(settings, fenced)?;
    let busted = match config.flavor {
        FlavorName::Qsbr | FlavorName::QsbrFenced => {
            return Ok(engine::run(flavor, None, config, seed));
        }
        FlavorName::BustedQsbrFlatMap => true,
        _ => false,
    };
    let flavor = flavor.named(config.flavor.as_str());
    let domain = map::MapDomain::Qsbr(flavor.domain_arc());
    let map = map::MapTorture::new(map::MapKind::FlatQsbr, domain, busted)?;
    Ok(engine::run(flavor, Some(map), config, seed))
}

/// Torture a flavor built by the caller, for example an implementation outside rcukit or a
/// flavor still under development. `config.flavor` and `config.fence` are ignored (the flavor
/// is already built; its own settings, such as its stall timeout, are what count).
pub fn run_flavor<F: Flavor>(flavor: F, config: &Config) -> Result<Report, TortureError> {
    config.validate()?;
    let seed = config.seed.unwrap_or_else(clock_seed);
    Ok(engine::run(flavor, None, config, seed))
}

/// Run with command-line arguments: print the report on stdout (last line `SUCCESS` or
/// `FAILURE`) or the error on stderr, and return the exit code: 0 on success, 1 on failure,
/// 2 when the run could not start.
///
/// The exit code is the verdict's even where the report cannot be printed: a stdout that
/// cannot take it (a full disk; a reader gone) gets a line on stderr instead, and lines on a
/// stderr that cannot take them are dropped (`println!` and `eprintln!` panic there).
pub fn cli(args: &TortureArgs) -> ExitCode {
    match run(&args.config()) {
        Ok(report) => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            if let Err(e) = writeln!(out, "{report}").and_then(|()| out.flush()) {
                let verdict = if report.passed() {
                    "SUCCESS"
                } else {
                    "FAILURE"
                };
                warn_line(format_args!(
                    "rcukit-torture: cannot print the report ({e}); {verdict}"
                ));
            }
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            warn_line(format_args!("rcukit-torture: error: {e}"));
            ExitCode::from(2)
        }
    }
}

/// Print one line on stderr, or nothing if stderr cannot take it (closed, or its reader gone):
/// `eprintln!` panics there, which would end a run that has more to do (or report). The lab,
/// which embeds the torture, prints its own stderr lines with it too.
pub fn warn_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}").and_then(|()| err.flush());
}

fn clock_seed() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ u64::from(std::process::id()).rotate_left(32)
}
