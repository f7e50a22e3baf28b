//! `rcukit-torture`: run rcutorture's method against rcukit from the command line.
//!
//! ```text
//! cargo run --release -p rcukit-torture -- --duration 30s --flavor rcu --fence membarrier
//! ```
//!
//! The report goes to stdout and ends with `SUCCESS` or `FAILURE`; progress lines and the
//! domain's own stall and panic reports go to stderr. Exit status: 0 success, 1 failure,
//! 2 usage error.

use clap::Parser;
use std::process::ExitCode;

/// Torture rcukit the way rcutorture tortures the kernel's RCU.
#[derive(Parser, Debug)]
#[command(name = "rcukit-torture", version)]
struct Cli {
    #[command(flatten)]
    args: rcukit_torture::TortureArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    rcukit_torture::cli(&cli.args)
}
