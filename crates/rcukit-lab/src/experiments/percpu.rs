//! Seed 002: read throughput by thread count, one central reader-writer lock against readers
//! that touch no shared cache line.
//!
//! # What the seed measured
//!
//! Eric Dumazet's 2005 ip_tables series replaced the central rwlock of each table by one lock
//! per CPU ("it avoids cache line ping pongs for each packet"); with the loop unrolling and
//! NUMA placement that came with it, `ipt_do_table` went from the top of the profile to 6th
//! place, using a third of the CPU it used before, on dual Xeon and dual Opteron machines.
//!
//! # The model
//!
//! Reader threads loop over a short critical section (scan a small rule table of `work`
//! entries) under each scheme's read side; no writer runs. What differs is only what the read
//! side touches: the central lock's word is written by every reader (two atomic
//! read-modify-writes per section, so its cache line moves between cores), the per-CPU lock's
//! reader makes the same two atomics on a line of its own slot, RCU's reader writes only its
//! own record, and a QSBR reader writes nothing at all (one store per 64 sections, its
//! quiescent state).
//!
//! # Schemes
//!
//! | id | read side |
//! |---|---|
//! | `rwlock` (baseline) | parking_lot `RwLock::read`, one central lock |
//! | `std-rwlock` | std `RwLock::read`, one central lock |
//! | `percpu-rwlock` | `rcukit::PerCpuRwLock::read`: one lock word per slot (the seed's fix) |
//! | `rcu` | `Rcu::read` on a domain of its own |
//! | `qsbr` | a plain load; each thread registered with an `rcukit::Qsbr` domain, a quiescent state every 64 sections |

use super::{
    check_duration, check_range, check_threads, ser_ms, Common, Experiment, Rendered, Unavailable,
};
use crate::env::Environment;
use crate::measure::{self, per_sec, ratio, Counter, StopFlag};
use crate::plot::{self, Axis, Panel, Series};
use crate::progress::Progress;
use crate::report::{self, Table};
use anyhow::{bail, Result};
use rcukit::{PerCpuRwLock, Qsbr, QsbrThread, Rcu};
use serde::Serialize;
use std::hint::black_box;
use std::sync::atomic::AtomicPtr;
use std::sync::atomic::Ordering::Acquire;
use std::time::{Duration, Instant};

/// File stem and subcommand name.
pub const NAME: &str = "percpu";

/// Schemes the experiment knows but this build cannot run yet (none: every scheme of the
/// issue runs).
pub const UNAVAILABLE: &[Unavailable] = &[];

/// Settings.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Reader thread counts to measure (default 1..=cores).
    pub thread_counts: Vec<usize>,
    /// Entries in the rule table each read scans.
    pub work: usize,
    /// Measuring time per (scheme, thread count).
    #[serde(rename = "point_ms", serialize_with = "ser_ms")]
    pub point: Duration,
    /// Quick mode.
    pub quick: bool,
}

impl Config {
    /// Defaults for `common`.
    pub fn new(common: &Common) -> Config {
        Config {
            thread_counts: (1..=common.threads).collect(),
            work: 8,
            point: common.pick(Duration::from_millis(250), Duration::from_secs(1)),
            quick: common.quick,
        }
    }

    /// Reject impossible settings.
    pub fn validate(&self) -> Result<()> {
        if self.thread_counts.is_empty() {
            bail!("--thread-counts needs at least one count");
        }
        for &n in &self.thread_counts {
            check_threads("--thread-counts", n)?;
        }
        check_range("--work", self.work as u64, 1, 1 << 20)?;
        check_duration("--point", self.point)?;
        Ok(())
    }
}

/// Flags of the `percpu` subcommand.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Args {
    /// Reader thread counts, comma-separated [default: 1 to the number of cores]
    #[arg(long, value_delimiter = ',')]
    pub thread_counts: Vec<usize>,
    /// Rule-table entries each read scans [default: 8]
    #[arg(long)]
    pub work: Option<usize>,
    /// Measuring time per (scheme, thread count) [default: 250ms quick, 1s full]
    #[arg(long, value_parser = crate::cli::parse_duration)]
    pub point: Option<Duration>,
}

impl Args {
    /// Apply the flags given on top of `cfg`.
    pub fn apply(&self, cfg: &mut Config) {
        if !self.thread_counts.is_empty() {
            cfg.thread_counts = self.thread_counts.clone();
        }
        if let Some(v) = self.work {
            cfg.work = v;
        }
        if let Some(v) = self.point {
            cfg.point = v;
        }
    }
}

/// The schemes this build runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchemeId {
    /// One central parking_lot RwLock.
    Rwlock,
    /// One central std RwLock.
    StdRwlock,
    /// rcukit `PerCpuRwLock`: one reader lock word per slot.
    PercpuRwlock,
    /// rcukit `Rcu::read` and an RCU-protected pointer.
    Rcu,
    /// rcukit `Qsbr`: registered readers, a plain load, a quiescent state every 64 reads.
    Qsbr,
}

impl SchemeId {
    /// Every scheme this build runs, baseline first.
    pub const ALL: [SchemeId; 5] = [
        SchemeId::Rwlock,
        SchemeId::StdRwlock,
        SchemeId::PercpuRwlock,
        SchemeId::Rcu,
        SchemeId::Qsbr,
    ];

    /// Short id.
    pub fn id(self) -> &'static str {
        match self {
            SchemeId::Rwlock => "rwlock",
            SchemeId::StdRwlock => "std-rwlock",
            SchemeId::PercpuRwlock => "percpu-rwlock",
            SchemeId::Rcu => "rcu",
            SchemeId::Qsbr => "qsbr",
        }
    }

    fn build(self, table: Vec<u32>) -> Result<Box<dyn ReadSide>> {
        Ok(match self {
            SchemeId::Rwlock => Box::new(parking_lot::RwLock::new(table)),
            SchemeId::StdRwlock => Box::new(std::sync::RwLock::new(table)),
            SchemeId::PercpuRwlock => Box::new(PerCpuRwLock::new(table)),
            SchemeId::Rcu => Box::new(RcuTable::new(table)?),
            SchemeId::Qsbr => Box::new(QsbrTable::new(table)?),
        })
    }
}

/// Reads between two quiescent states of a QSBR reader (one batch of the reader loop).
const QS_EVERY: u64 = 64;

/// One read-side critical section over the table.
trait ReadSide: Send + Sync {
    fn read(&self, key: u32) -> u32;
    /// A reader thread's registration, for schemes that need one (QSBR); the reader loop
    /// announces a quiescent state through it after every [`QS_EVERY`] reads.
    fn register(&self) -> Option<QsbrThread<'_>> {
        None
    }
}

#[inline]
fn scan(table: &[u32], key: u32) -> u32 {
    table.iter().position(|&v| v == key).unwrap_or(table.len()) as u32
}

impl ReadSide for parking_lot::RwLock<Vec<u32>> {
    fn read(&self, key: u32) -> u32 {
        scan(&self.read(), key)
    }
}

impl ReadSide for std::sync::RwLock<Vec<u32>> {
    fn read(&self, key: u32) -> u32 {
        match self.read() {
            Ok(table) => scan(&table, key),
            Err(poisoned) => scan(&poisoned.into_inner(), key),
        }
    }
}

impl ReadSide for PerCpuRwLock<Vec<u32>> {
    fn read(&self, key: u32) -> u32 {
        scan(&self.read(), key)
    }
}

struct RcuTable {
    rcu: Rcu,
    table: AtomicPtr<Vec<u32>>,
}

impl RcuTable {
    fn new(table: Vec<u32>) -> Result<RcuTable> {
        Ok(RcuTable {
            rcu: Rcu::builder().name("lab-percpu").build()?,
            table: AtomicPtr::new(Box::into_raw(Box::new(table))),
        })
    }
}

impl ReadSide for RcuTable {
    fn read(&self, key: u32) -> u32 {
        let _guard = self.rcu.read();
        // SAFETY: the table is only freed in `drop`, when no reader is left.
        scan(unsafe { &*self.table.load(Acquire) }, key)
    }
}

impl Drop for RcuTable {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader is left; the table came from `Box::into_raw`.
        drop(unsafe { Box::from_raw(*self.table.get_mut()) });
    }
}

struct QsbrTable {
    qsbr: Qsbr,
    table: AtomicPtr<Vec<u32>>,
}

impl QsbrTable {
    fn new(table: Vec<u32>) -> Result<QsbrTable> {
        Ok(QsbrTable {
            qsbr: Qsbr::builder().name("lab-percpu-qsbr").build()?,
            table: AtomicPtr::new(Box::into_raw(Box::new(table))),
        })
    }
}

impl ReadSide for QsbrTable {
    fn read(&self, key: u32) -> u32 {
        // SAFETY: the table is only freed in `drop`, when no reader is left. (With a writer,
        // it would be freed after a QSBR grace period, which the registered reader threads
        // hold back until their next quiescent state.)
        scan(unsafe { &*self.table.load(Acquire) }, key)
    }

    fn register(&self) -> Option<QsbrThread<'_>> {
        Some(self.qsbr.register())
    }
}

impl Drop for QsbrTable {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader is left; the table came from `Box::into_raw`.
        drop(unsafe { Box::from_raw(*self.table.get_mut()) });
    }
}

/// One (scheme, thread count) point.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// Reader threads.
    pub threads: usize,
    /// Reads per second, all threads together.
    pub reads_per_s: f64,
    /// Reads per second per thread.
    pub reads_per_s_per_thread: f64,
    /// reads_per_s / the baseline's at the same thread count.
    pub vs_rwlock: Option<f64>,
}

/// One scheme's figures.
#[derive(Clone, Debug, Serialize)]
pub struct SchemeResult {
    /// Scheme id.
    pub scheme: SchemeId,
    /// One point per thread count.
    pub points: Vec<Point>,
    /// reads_per_s at the most threads / at the fewest.
    pub scaling: Option<f64>,
}

/// The experiment's result.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `percpu`.
    pub experiment: &'static str,
    /// Seeds reproduced.
    pub seeds: [&'static str; 1],
    /// Where and how it ran.
    pub env: Environment,
    /// Settings.
    pub config: Config,
    /// Every scheme run.
    pub schemes: Vec<SchemeResult>,
    /// Schemes not in this build.
    pub not_available: Vec<Unavailable>,
    /// The seed's figure: ipt_do_table's CPU use after the series, as a fraction of before.
    pub seed_cpu_fraction_after: f64,
    /// Where the seed's figure comes from.
    pub seed_source: &'static str,
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
    let task = progress.task(NAME, (SchemeId::ALL.len() * cfg.thread_counts.len()) as u64);
    let table: Vec<u32> = (0..cfg.work as u32).map(|i| i * 7 + 1).collect();
    let schemes_built = SchemeId::ALL
        .iter()
        .map(|id| id.build(table.clone()))
        .collect::<Result<Vec<_>>>()?;
    let mut points: Vec<Vec<Point>> = vec![Vec::new(); SchemeId::ALL.len()];
    // Interleave: for each thread count, every scheme in turn.
    for &threads in &cfg.thread_counts {
        for (si, id) in SchemeId::ALL.iter().enumerate() {
            task.message(format!("{} with {threads} thread(s)", id.id()));
            let rate = measure_point(&*schemes_built[si], threads, cfg.point, cfg.work)?;
            points[si].push(Point {
                threads,
                reads_per_s: rate,
                reads_per_s_per_thread: rate / threads as f64,
                vs_rwlock: None,
            });
            task.inc();
        }
    }
    task.finish();
    let base: Vec<f64> = points[0].iter().map(|p| p.reads_per_s).collect();
    let schemes = SchemeId::ALL
        .into_iter()
        .zip(points)
        .map(|(id, mut pts)| {
            for (p, b) in pts.iter_mut().zip(&base) {
                p.vs_rwlock = ratio(p.reads_per_s, *b);
            }
            let min = pts.iter().min_by_key(|p| p.threads);
            let max = pts.iter().max_by_key(|p| p.threads);
            let scaling = match (min, max) {
                (Some(a), Some(b)) => ratio(b.reads_per_s, a.reads_per_s),
                _ => None,
            };
            SchemeResult {
                scheme: id,
                points: pts,
                scaling,
            }
        })
        .collect();
    Ok(Report {
        experiment: NAME,
        seeds: ["002"],
        env,
        config: cfg.clone(),
        schemes,
        not_available: UNAVAILABLE.to_vec(),
        seed_cpu_fraction_after: 1.0 / 3.0,
        seed_source: "seed 002: Eric Dumazet, 2005, oprofile of ipt_do_table on dual Xeon and \
                      dual Opteron before and after per-CPU locks (with loop unrolling and \
                      NUMA placement in the same series)",
    })
}

fn measure_point(
    scheme: &dyn ReadSide,
    threads: usize,
    point: Duration,
    work: usize,
) -> Result<f64> {
    let counters: Vec<Counter> = (0..threads).map(|_| Counter::default()).collect();
    let stop = StopFlag::new();
    std::thread::scope(|s| -> Result<f64> {
        let mut handles = Vec::new();
        for (t, counter) in counters.iter().enumerate() {
            let stop = &stop;
            handles.push(super::spawn_scoped(
                s,
                &format!("percpu-r{t}"),
                move || {
                    let mut me = scheme.register();
                    let mut key = t as u32;
                    let (mut n, mut acc) = (0u64, 0u32);
                    while !stop.stopped() {
                        for _ in 0..QS_EVERY {
                            key = key.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                            acc = acc.wrapping_add(scheme.read(key % (work as u32 * 7 + 8)));
                        }
                        if let Some(me) = &mut me {
                            me.quiescent_state();
                        }
                        n += QS_EVERY;
                        counter.publish(n);
                    }
                    black_box(acc);
                },
            )?);
        }
        // Warm up until every reader has made a pass (a thread may start late on a loaded
        // machine), and measure at least until the readers have made progress: a window in
        // which the scheduler ran none of them says nothing about the scheme. Both waits
        // only matter for tiny points; a deadline bounds them.
        let deadline = Instant::now() + Duration::from_secs(10);
        std::thread::sleep(Duration::from_millis(20));
        while counters.iter().any(|c| c.get() == 0) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let (c0, t0) = (measure::sum(&counters), Instant::now());
        std::thread::sleep(point);
        while measure::sum(&counters) == c0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let (c1, t1) = (measure::sum(&counters), Instant::now());
        stop.stop();
        for h in handles {
            super::join(h)?;
        }
        Ok(per_sec(c1 - c0, t1 - t0))
    })
}

/// Tables, plot and headlines.
pub fn render(r: &Report) -> Result<Rendered> {
    let maxt = r.config.thread_counts.iter().copied().max().unwrap_or(1);
    let at = |id: SchemeId, threads: usize| {
        r.scheme(id)
            .and_then(|s| s.points.iter().find(|p| p.threads == threads))
    };
    let mut md = String::new();
    md.push_str(&format!(
        "Reader threads scan a {}-entry table under each scheme's read side; no writer. \
         {} ms per point.\n\n",
        r.config.work,
        r.config.point.as_millis()
    ));
    md.push_str("### The seed's figure beside ours\n\n");
    let vs = |id: SchemeId| {
        at(id, maxt)
            .map(|p| report::ratio(p.vs_rwlock))
            .unwrap_or_else(|| "n/a".into())
    };
    let mut side = Table::new(&["", "seed (2 CPUs, 2005)", "ours (this run)"]);
    side.row(vec![
        "central rwlock → per-CPU rwlocks".into(),
        format!(
            "ipt_do_table uses {:.2} of its former CPU (per-CPU locks, unrolling, NUMA)",
            r.seed_cpu_fraction_after
        ),
        format!(
            "percpu-rwlock reads/s = {} of rwlock at {maxt} thread(s)",
            vs(SchemeId::PercpuRwlock)
        ),
    ]);
    side.row(vec![
        "readers that write no shared line at all".into(),
        "(not measured by the seed)".into(),
        format!(
            "rcu {}, qsbr {} of rwlock at {maxt} thread(s)",
            vs(SchemeId::Rcu),
            vs(SchemeId::Qsbr)
        ),
    ]);
    md.push_str(&side.to_markdown());
    md.push_str(&format!("\nSeed: {}.\n\n", r.seed_source));
    md.push_str("### Our measurements (reads/s, all threads)\n\n");
    let mut header = vec!["scheme".to_string()];
    for t in &r.config.thread_counts {
        header.push(format!("{t} thread(s)"));
        header.push("vs rwlock".to_string());
    }
    header.push(format!(
        "scaling {}→{}",
        r.config.thread_counts.iter().min().unwrap_or(&1),
        maxt
    ));
    let mut t = Table::new(&header);
    for s in &r.schemes {
        let mut row = vec![format!("`{}`", s.scheme.id())];
        for p in &s.points {
            row.push(report::num(p.reads_per_s));
            row.push(report::ratio(p.vs_rwlock));
        }
        row.push(report::ratio(s.scaling));
        t.row(row);
    }
    md.push_str(&t.to_markdown());
    md.push_str(&super::unavailable_note(&r.not_available));
    let svg = plot::render(&[Panel::Lines {
        title: "read throughput by thread count".into(),
        x: Axis::linear("reader threads"),
        y: Axis::log("reads/s, all threads (log)"),
        series: r
            .schemes
            .iter()
            .map(|s| Series {
                name: s.scheme.id().into(),
                points: s
                    .points
                    .iter()
                    .map(|p| (p.threads as f64, p.reads_per_s))
                    .collect(),
            })
            .collect(),
    }])?;
    let headlines = vec![format!(
        "reads/s at {maxt} thread(s) vs the central rwlock: percpu-rwlock {}, rcu {}, qsbr {} \
         (seed: ipt_do_table at 1/3 of its CPU after per-CPU locks)",
        vs(SchemeId::PercpuRwlock),
        vs(SchemeId::Rcu),
        vs(SchemeId::Qsbr)
    )];
    Ok(Rendered {
        markdown: md,
        svg: Some(svg),
        headlines,
    })
}

/// The experiment, for the shared drivers.
pub struct Percpu;

impl Experiment for Percpu {
    const NAME: &'static str = NAME;
    const TITLE: &'static str = "Seed 002: read throughput, central rwlock vs per-reader state";
    const SEEDS: &'static [&'static str] = &["002"];
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
