//! Markdown tables, the per-experiment output files and `REPORT.md`.

use crate::env::Environment;
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

/// A Markdown table built row by row.
#[derive(Clone, Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new<S: AsRef<str>>(header: &[S]) -> Table {
        Table {
            header: header.iter().map(|h| h.as_ref().to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Append a row (missing cells are left empty, extra cells are dropped).
    pub fn row(&mut self, mut cells: Vec<String>) {
        cells.resize(self.header.len(), String::new());
        self.rows.push(cells);
    }

    /// Number of data rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Does the table have no data rows?
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Render as GitHub-flavoured Markdown, first column left-aligned, the others right.
    pub fn to_markdown(&self) -> String {
        let cols = self.header.len();
        let mut width = vec![3usize; cols];
        for row in std::iter::once(&self.header).chain(&self.rows) {
            for (i, cell) in row.iter().enumerate() {
                width[i] = width[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let line = |out: &mut String, row: &[String]| {
            out.push('|');
            for (i, cell) in row.iter().enumerate() {
                let pad = width[i] - cell.chars().count();
                if i == 0 {
                    let _ = write!(out, " {cell}{} |", " ".repeat(pad));
                } else {
                    let _ = write!(out, " {}{cell} |", " ".repeat(pad));
                }
            }
            out.push('\n');
        };
        line(&mut out, &self.header);
        out.push('|');
        for (i, w) in width.iter().enumerate() {
            if i == 0 {
                let _ = write!(out, " {} |", "-".repeat(*w));
            } else {
                let _ = write!(out, " {}: |", "-".repeat(w - 1));
            }
        }
        out.push('\n');
        for row in &self.rows {
            line(&mut out, row);
        }
        out
    }
}

/// What an experiment hands to the report writer.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// File stem (`netfilter` → `netfilter.json`, `.md`, `.svg`).
    pub name: &'static str,
    /// Section title.
    pub title: String,
    /// The seeds it reproduces, e.g. `000, 002` (empty for the peers comparison).
    pub seeds: String,
    /// The full result (environment, config, figures).
    pub json: serde_json::Value,
    /// Markdown: the seed's figures beside ours, our tables, notes.
    pub markdown: String,
    /// The plot, if any.
    pub svg: Option<String>,
    /// One-line headline figures for the summary.
    pub headlines: Vec<String>,
}

/// A number with a sensible number of significant digits.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        return "n/a".to_string();
    }
    let a = x.abs();
    if a >= 1e9 {
        format!("{:.2}G", x / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", x / 1e3)
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else if a == 0.0 {
        "0".to_string()
    } else {
        format!("{x:.3}")
    }
}

/// A ratio as `4.57x`, or `n/a`.
pub fn ratio(r: Option<f64>) -> String {
    match r {
        Some(r) if r >= 100.0 => format!("{r:.0}x"),
        Some(r) if r >= 10.0 => format!("{r:.1}x"),
        Some(r) => format!("{r:.2}x"),
        None => "n/a".to_string(),
    }
}

/// A figure over rounds: the median, and the smallest and largest round in brackets.
pub fn spread(r: &crate::measure::Rounds, digits: usize) -> String {
    if !r.median.is_finite() {
        return "n/a".to_string();
    }
    if r.values.len() < 2 {
        return format!("{:.digits$}", r.median);
    }
    format!(
        "{:.digits$} ({:.digits$}-{:.digits$})",
        r.median, r.min, r.max
    )
}

/// A ratio over rounds: the median ratio, and the smallest and largest round's in brackets.
pub fn ratio_spread(r: &crate::measure::Rounds) -> String {
    match r.median_ratio() {
        None => "n/a".to_string(),
        Some(m) if r.values.len() < 2 => ratio(Some(m)),
        Some(m) => format!("{} ({:.2}-{:.2})", ratio(Some(m)), r.min, r.max),
    }
}

/// Bytes with a binary unit.
pub fn bytes(b: f64) -> String {
    if b >= (1u64 << 20) as f64 {
        format!("{:.2} MiB", b / (1u64 << 20) as f64)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}

/// Make sure `dir` exists and is writable, and that no other run of the lab writes to it, with
/// a clear error otherwise. The run holds the returned lock until it has written its files:
/// two runs into one directory would mix their results (each file whole, but `REPORT.md` of
/// one run beside the figures of the other).
pub fn prepare_out_dir(dir: &Path) -> Result<OutDirLock> {
    fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the output directory {}", dir.display()))?;
    let path = dir.join(LOCK_FILE);
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("the output directory {} is not writable", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: `flock` on a descriptor this function owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock {
                anyhow::bail!(
                    "another rcukit-lab run is writing to {}: wait for it to end, or give \
                     this one another --out",
                    dir.display()
                );
            }
            return Err(e).with_context(|| format!("cannot lock {}", path.display()));
        }
    }
    Ok(OutDirLock { _file: file })
}

/// The file in an output directory that a run holds locked (`flock`) while it writes there.
pub const LOCK_FILE: &str = ".rcukit-lab.lock";

/// An output directory held by this run (see [`prepare_out_dir`]); dropping it lets another
/// run in. The lock goes with the process too, however it ends.
#[derive(Debug)]
pub struct OutDirLock {
    _file: fs::File,
}

/// Write `text` to `path` whole or not at all: into a file of its own beside it, renamed over
/// `path` once complete. A run stopped or failing mid-write (a full disk, a signal) leaves the
/// previous file, or none, never a truncated one that the other files link to.
fn write_whole(path: &Path, text: &str) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".partial-{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    let written = fs::write(&tmp, text).and_then(|()| fs::rename(&tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written.with_context(|| format!("cannot write {}", path.display()))
}

/// Write `NAME.json`, `NAME.md` and (if there is a plot) `NAME.svg` for one experiment.
pub fn write_outcome(dir: &Path, env: &Environment, outcome: &Outcome) -> Result<()> {
    let write = |name: String, text: &str| -> Result<()> { write_whole(&dir.join(name), text) };
    let json = serde_json::to_string_pretty(&outcome.json)?;
    write(format!("{}.json", outcome.name), &json)?;
    let mut md = format!("# {}\n\n{}\n", outcome.title, env.markdown());
    md.push_str(&outcome.markdown);
    if outcome.svg.is_some() {
        let _ = write!(md, "\n![{0}]({0}.svg)\n", outcome.name);
    }
    write(format!("{}.md", outcome.name), &md)?;
    if let Some(svg) = &outcome.svg {
        write(format!("{}.svg", outcome.name), svg)?;
    }
    Ok(())
}

/// Write `REPORT.md`: every experiment's tables, the seeds' figures beside ours, links to the
/// plots and JSON files, and the headline summary.
pub fn write_report(dir: &Path, env: &Environment, outcomes: &[Outcome]) -> Result<()> {
    let mut md = String::new();
    md.push_str("# rcukit-lab: the seeds reproduced\n\n");
    md.push_str(&env.markdown());
    let _ = writeln!(md, "\nCommand: `{}`\n", env.command);
    md.push_str(
        "Every figure below was measured in this run; comparisons are ratios taken within it. \
         The seeds' own figures come from their kernels and machines: compare ratios and \
         directions, not absolute times.\n\n",
    );
    md.push_str("## Headlines\n\n");
    md.push_str(&headlines(outcomes));
    md.push_str("\n## Contents\n\n");
    for o in outcomes {
        let seeds = if o.seeds.is_empty() {
            String::new()
        } else {
            format!(" (seed {})", o.seeds)
        };
        let _ = writeln!(md, "* [{}](#{}){seeds}", o.title, anchor(&o.title));
    }
    for o in outcomes {
        let _ = writeln!(md, "\n## {}\n", o.title);
        md.push_str(&o.markdown);
        let _ = write!(md, "\nData: [{0}.json]({0}.json)", o.name);
        if o.svg.is_some() {
            let _ = write!(
                md,
                " · plot: [{0}.svg]({0}.svg)\n\n![{0}]({0}.svg)\n",
                o.name
            );
        } else {
            md.push('\n');
        }
    }
    write_whole(&dir.join("REPORT.md"), &md)
}

/// The headline lines of every outcome, as a Markdown list.
pub fn headlines(outcomes: &[Outcome]) -> String {
    let mut md = String::new();
    for o in outcomes {
        for h in &o.headlines {
            let _ = writeln!(md, "* **{}**: {h}", o.name);
        }
    }
    md
}

/// GitHub's heading anchor for `title` (lowercase, spaces to dashes, punctuation dropped).
fn anchor(title: &str) -> String {
    title
        .chars()
        .filter_map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '_' => Some(c),
            'A'..='Z' => Some(c.to_ascii_lowercase()),
            ' ' => Some('-'),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_renders_aligned_markdown() {
        let mut t = Table::new(&["scheme", "ms"]);
        t.row(vec!["rwlock".into(), "1.5".into()]);
        t.row(vec!["rcu".into()]);
        let md = t.to_markdown();
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[1].ends_with("--: |"));
        assert!(lines.iter().all(|l| l.len() == lines[0].len()));
    }

    #[test]
    fn numbers_format() {
        assert_eq!(num(1234567.0), "1.23M");
        assert_eq!(num(0.5), "0.500");
        assert_eq!(ratio(Some(4.5734)), "4.57x");
        assert_eq!(ratio(None), "n/a");
        assert_eq!(anchor("Seed 000: netfilter (x)"), "seed-000-netfilter-x");
    }
}
