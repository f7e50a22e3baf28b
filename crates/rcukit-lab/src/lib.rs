//! # rcukit-lab: the seeds' kernel experiments, redone in user space
//!
//! One command (`rcukit-lab reproduce`) runs every experiment the seeds describe on rcukit
//! and on the systems people use today (parking_lot and std locks, crossbeam-epoch, arc-swap,
//! seize, and with the `c-peers` feature liburcu and Concurrency Kit), prints a Markdown table
//! per experiment, and writes `NAME.json`, `NAME.md`, `NAME.svg` and a `REPORT.md` that puts
//! each seed's own figures beside ours.
//!
//! The crate is a library with a thin `main.rs`, so integration tests can run each experiment
//! in a tiny configuration and inspect its result directly.
//!
//! * [`cli`]: the clap command line and the dispatch from subcommands to experiments.
//! * [`experiments`]: one folder per experiment, each the same shape (config and flags,
//!   schemes, run, render) behind the `experiments::Experiment` trait; the seeds' figures in
//!   `experiments::seeds`.
//! * [`env`](mod@env): the environment facts recorded in every JSON file.
//! * [`measure`]: timing helpers (busy work, percentiles, ratios).
//! * [`report`]: Markdown tables, the per-experiment files and `REPORT.md`.
//! * [`plot`]: SVG charts with plotters (SVG backend only, no system fonts).
//! * [`progress`]: indicatif progress bars, hidden when not on a terminal.
//! * `c_peers` (feature `c-peers`): liburcu and ck_epoch through small C shims.
//!
//! Every figure is measured in the run that prints it, and every comparison is a ratio taken
//! within that run: the lab machine is a shared 2-core VM whose absolute times drift.

#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]

pub mod args;
#[cfg(feature = "c-peers")]
pub mod c_peers;
pub mod cli;
pub mod env;
pub mod experiments;
pub mod measure;
pub mod plot;
pub mod progress;
pub mod report;

/// The workspace README's Rust examples, compiled and run as doctests (the crate README's, the
/// crates.io page, are run by `rcukit` itself).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct WorkspaceReadmeDoctests;
