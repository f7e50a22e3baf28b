//! The command line: `reproduce` and one subcommand per experiment.
//!
//! Every subcommand takes the shared flags (`--quick`, `--out DIR`, `--threads N`,
//! `--no-progress`); each experiment's subcommand adds its own. Flag values are checked by clap
//! (syntax) and by the experiment's `Config::validate` (meaning); either way a bad value ends
//! the program with a message and a non-zero exit status, never a panic.

use crate::args::parse_threads;
use crate::env::Environment;
use crate::experiments::{
    self, callbacks, capture, conntrack, netfilter, netns, peers, percpu, Common, Experiment,
    ExperimentId, Outcome,
};
use crate::progress::Progress;
use crate::report;
use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Print a line on stdout. A closed stdout (`rcukit-lab reproduce | head`) is not an error:
/// the run goes on and still writes its files; only the printing stops.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::say_line(&format!($($arg)*))
    };
}

/// See `say!`: print one line, and stop printing once stdout cannot take more: silently when
/// its reader is gone (`| head`), and otherwise (a full disk) with the run's exit status made
/// a failure ([`stdout_failed`]).
pub fn say_line(line: &str) {
    use std::io::Write;
    use std::sync::atomic::Ordering::Relaxed;
    if STDOUT_CLOSED.load(Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
        STDOUT_CLOSED.store(true, Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            STDOUT_FAILED.store(true, Relaxed);
            warn_line(&format!("rcukit-lab: cannot write to stdout: {e}"));
        }
    }
}

/// Stdout cannot take more lines (its reader is gone, or a write failed).
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// A write to stdout failed for another reason than a reader gone: the run fails.
static STDOUT_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Did a write to stdout fail (not counting a reader that went away)?
pub fn stdout_failed() -> bool {
    STDOUT_FAILED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Print one line on stderr, ignoring a stderr that cannot take it (closed, or its reader
/// gone): `eprintln!` panics there, which would stop a run that has more to do.
pub fn warn_line(line: &str) {
    rcukit_torture::warn_line(format_args!("{line}"));
}

/// rcukit-lab: reproduce the seeds' kernel experiments in user space, rcukit beside its peers.
#[derive(Debug, Parser)]
#[command(name = "rcukit-lab", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Flags every subcommand takes.
#[derive(Clone, Debug, clap::Args)]
pub struct CommonArgs {
    /// Short runs: the whole `reproduce --quick` finishes within 3 minutes on 2 cores
    #[arg(long)]
    pub quick: bool,
    /// Directory for NAME.json, NAME.md, NAME.svg and REPORT.md
    #[arg(long, value_name = "DIR", default_value = "results")]
    pub out: PathBuf,
    /// Thread count that every "one per core" default uses [default: the machine's cores]
    #[arg(long, value_name = "N", value_parser = parse_threads)]
    pub threads: Option<usize>,
    /// Never draw progress bars (they are also hidden when output is not a terminal)
    #[arg(long)]
    pub no_progress: bool,
}

impl CommonArgs {
    fn common(&self) -> Common {
        let mut c = Common::new(self.quick);
        if let Some(t) = self.threads {
            c.threads = t;
        }
        c
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run every experiment, print its tables and write DIR/NAME.{json,md,svg} and DIR/REPORT.md
    Reproduce {
        #[command(flatten)]
        common: CommonArgs,
        /// Run only these experiments (comma-separated)
        #[arg(long, value_delimiter = ',', value_name = "LIST")]
        only: Vec<ExperimentId>,
    },
    /// Seeds 000/002: rule-table updates under rwlock and RCU (synchronize, expedited, retire)
    Netfilter {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        args: netfilter::Args,
    },
    /// Seed 001: packet drops while a "tcpdump" thread attaches and detaches filters
    Capture {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        args: capture::Args,
    },
    /// Seed 002: read throughput by thread count, central rwlock vs RCU
    Percpu {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        args: percpu::Args,
    },
    /// Seed 003: netns create/destroy with net_mutex vs a reader-writer semaphore
    Netns {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        args: netns::Args,
    },
    /// Seed 004: callbacks released by expedited grace periods (pending bytes, synchronize latency)
    Callbacks {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        args: callbacks::Args,
    },
    /// Read-side cost, grace-period latency and retire throughput, rcukit beside its peers
    Peers {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        args: peers::Args,
    },
    /// A conntrack-like flow table under lookups and churn: RcuHashMap and RcuFlatMap beside
    /// locked hash maps and the concurrent maps in use (see --maps)
    Conntrack {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        args: conntrack::Args,
    },
    /// rcutorture's method on rcukit: last line SUCCESS or FAILURE, exit status 1 on failure
    /// (the same as the `rcukit-torture` binary)
    Torture(rcukit_torture::TortureArgs),
}

/// Parse the command line from the process arguments and run it.
pub fn main() -> Result<ExitCode> {
    run(Cli::parse())
}

/// Run a parsed command line. `Ok` carries the exit status of commands that set their own
/// (`torture`); the others succeed or return an error.
pub fn run(cli: Cli) -> Result<ExitCode> {
    if let Command::Torture(args) = &cli.command {
        return Ok(rcukit_torture::cli(args));
    }
    run_experiments(cli)?;
    if stdout_failed() {
        anyhow::bail!("the results could not all be written to stdout (see above)");
    }
    Ok(ExitCode::SUCCESS)
}

fn run_experiments(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Torture(_) => unreachable!("handled by run"),
        Command::Reproduce { common, only } => reproduce(&common, &only),
        Command::Netfilter { common, args } => single::<netfilter::Netfilter>(&common, &args),
        Command::Capture { common, args } => single::<capture::Capture>(&common, &args),
        Command::Percpu { common, args } => single::<percpu::Percpu>(&common, &args),
        Command::Netns { common, args } => single::<netns::Netns>(&common, &args),
        Command::Callbacks { common, args } => single::<callbacks::Callbacks>(&common, &args),
        Command::Peers { common, args } => single::<peers::Peers>(&common, &args),
        Command::Conntrack { common, args } => single::<conntrack::Conntrack>(&common, &args),
    }
}

fn single<E: Experiment>(args: &CommonArgs, flags: &E::Args) -> Result<()> {
    let common = args.common();
    // Bad settings are reported before the output directory is made.
    let cfg = experiments::configure::<E>(&common, flags)?;
    let _out = report::prepare_out_dir(&args.out)?;
    let progress = Progress::new(!args.no_progress);
    let env = Environment::collect(common.quick);
    let outcome = experiments::run_configured::<E>(&cfg, &progress)?;
    print_outcome(&outcome);
    report::write_outcome(&args.out, &env, &outcome)?;
    say!(
        "\nWrote {dir}/{n}.json, {dir}/{n}.md{svg}.",
        dir = args.out.display(),
        n = outcome.name,
        svg = if outcome.svg.is_some() {
            format!(" and {}/{}.svg", args.out.display(), outcome.name)
        } else {
            String::new()
        }
    );
    Ok(())
}

fn print_outcome(o: &Outcome) {
    say!("\n## {}\n\n{}", o.title, o.markdown);
}

fn reproduce(args: &CommonArgs, only: &[ExperimentId]) -> Result<()> {
    let _out = report::prepare_out_dir(&args.out)?;
    let common = args.common();
    let progress = Progress::new(!args.no_progress);
    let env = Environment::collect(common.quick);
    let list: Vec<ExperimentId> = ExperimentId::ALL
        .into_iter()
        .filter(|e| only.is_empty() || only.contains(e))
        .collect();
    say!(
        "# rcukit-lab reproduce ({} mode, {} experiment(s), {} threads by default)\n\n{}",
        env.mode,
        list.len(),
        common.threads,
        env.markdown()
    );
    let start = Instant::now();
    let mut outcomes = Vec::new();
    let mut failures = Vec::new();
    for exp in list {
        let t = Instant::now();
        let done = exp.run_default(&common, &progress).and_then(|outcome| {
            print_outcome(&outcome);
            say!("({} took {:.1} s)", exp.name(), t.elapsed().as_secs_f64());
            // A file that cannot be written fails this experiment, not the ones after it.
            report::write_outcome(&args.out, &env, &outcome).map(|()| outcome)
        });
        match done {
            Ok(outcome) => outcomes.push(outcome),
            Err(e) => {
                warn_line(&format!(
                    "rcukit-lab: experiment {} failed: {e:#}",
                    exp.name()
                ));
                failures.push(format!("{}: {e:#}", exp.name()));
            }
        }
    }
    report::write_report(&args.out, &env, &outcomes)?;
    say!(
        "\n## Summary ({:.0} s)\n\n{}\nReport: {}/REPORT.md",
        start.elapsed().as_secs_f64(),
        report::headlines(&outcomes),
        args.out.display()
    );
    if !failures.is_empty() {
        bail!(
            "{} experiment(s) failed: {}",
            failures.len(),
            failures.join("; ")
        );
    }
    Ok(())
}

/// Names of all experiments (for messages and tests).
pub fn experiment_names() -> Vec<&'static str> {
    ExperimentId::ALL.iter().map(|e| e.name()).collect()
}
