//! The environment facts every result records: where, when, how and with what it was measured.

use serde::Serialize;
use std::process::Command;
use std::time::SystemTime;

/// Facts about the run, stored in every experiment's JSON and at the top of `REPORT.md`.
#[derive(Clone, Debug, Serialize)]
pub struct Environment {
    /// UTC time the experiment started, RFC 3339.
    pub date: String,
    /// `std::thread::available_parallelism()`.
    pub cores: usize,
    /// The barrier pair rcukit domains use here (`membarrier` or `seqcst`).
    pub fence: String,
    /// `quick` or `full`.
    pub mode: String,
    /// Version of the rcukit crate the lab was built with.
    pub rcukit_version: String,
    /// Version of the lab.
    pub lab_version: String,
    /// Short git commit of the working directory, if it is a git checkout, with `-dirty`
    /// when it has uncommitted changes.
    pub git_commit: Option<String>,
    /// Kernel release (`/proc/sys/kernel/osrelease`).
    pub kernel: Option<String>,
    /// CPU model (`/proc/cpuinfo`).
    pub cpu_model: Option<String>,
    /// One-minute load average when the facts were collected (`/proc/loadavg`): above the core
    /// count, other work shared the machine and the figures are noisier.
    pub load_average_1m: Option<f64>,
    /// Whether the liburcu / Concurrency Kit peers are compiled in.
    pub c_peers: bool,
    /// Whether this is an optimised build (figures from debug builds mean little).
    pub release_build: bool,
    /// The command line.
    pub command: String,
}

impl Environment {
    /// Collect the facts now. `quick` selects the mode label.
    pub fn collect(quick: bool) -> Environment {
        Environment {
            date: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            cores: available_cores(),
            fence: rcukit::Rcu::global().fence_kind().to_string(),
            mode: if quick { "quick" } else { "full" }.to_string(),
            rcukit_version: env!("RCUKIT_VERSION").to_string(),
            lab_version: env!("CARGO_PKG_VERSION").to_string(),
            git_commit: git_commit(),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .ok()
                .map(|s| s.trim().to_string()),
            cpu_model: cpu_model(),
            load_average_1m: std::fs::read_to_string("/proc/loadavg")
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse().ok()),
            c_peers: cfg!(feature = "c-peers"),
            release_build: !cfg!(debug_assertions),
            // `args` panics on an argument that is not UTF-8 (a path, say).
            command: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" "),
        }
    }

    /// A short Markdown block describing the run.
    pub fn markdown(&self) -> String {
        format!(
            "Run: {} · {} mode · {} cores ({}) · load {} · kernel {} · fence `{}` · rcukit {} · \
             lab {}{} · C peers {}{}{}\n",
            self.date,
            self.mode,
            self.cores,
            self.cpu_model.as_deref().unwrap_or("unknown CPU"),
            self.load_average_1m
                .map_or("unknown".to_string(), |l| format!("{l:.2}")),
            self.kernel.as_deref().unwrap_or("unknown"),
            self.fence,
            self.rcukit_version,
            self.lab_version,
            self.git_commit
                .as_deref()
                .map(|c| format!(" ({c})"))
                .unwrap_or_default(),
            if self.c_peers { "on" } else { "off" },
            match self.load_average_1m {
                Some(l) if l > self.cores as f64 => {
                    " · **the machine was busy with other work: figures are noisier**"
                }
                _ => "",
            },
            if self.release_build {
                ""
            } else {
                " · **debug build: figures are not meaningful**"
            },
        )
    }
}

/// The number of cores the lab defaults its thread counts to.
pub fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// The commit of the source tree the lab was built from (`-dirty` with changes to tracked
/// files): asked of that tree, not of the directory the lab runs in, which may be another
/// repository or none.
fn git_commit() -> Option<String> {
    let tree = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("git")
        .args(["-C", tree, "rev-parse", "--short", "HEAD"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let commit = String::from_utf8(out.stdout).ok()?.trim().to_string();
    let dirty = Command::new("git")
        .args(["-C", tree, "status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    Some(if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    })
}

fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
}
