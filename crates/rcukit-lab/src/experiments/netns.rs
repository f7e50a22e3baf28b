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

use super::{check_duration, check_threads, ser_ms, Common, Experiment, Rendered};
use crate::env::Environment;
use crate::measure::{self, per_sec, ratio, spin_for, StopFlag, Summary};
use crate::plot::{self, Axis, Panel, Series};
use crate::progress::Progress;
use crate::report::{self, Table};
use anyhow::Result;
use parking_lot::{Condvar, Mutex};
use rcukit::{Rcu, RcuList};
use serde::Serialize;
use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    #[arg(long, value_parser = crate::cli::parse_duration)]
    pub process: Option<Duration>,
    /// Work under the lock when creating, e.g. 300us [default: 300us]
    #[arg(long, value_parser = crate::cli::parse_duration)]
    pub setup: Option<Duration>,
    /// Work per namespace in teardown, e.g. 100us [default: 100us]
    #[arg(long, value_parser = crate::cli::parse_duration)]
    pub exit: Option<Duration>,
    /// Measuring time per scheme [default: 1s quick, 4s full]
    #[arg(long, value_parser = crate::cli::parse_duration)]
    pub duration: Option<Duration>,
}

impl Args {
    /// Apply the flags given on top of `cfg`.
    pub fn apply(&self, cfg: &mut Config) {
        if let Some(v) = self.creators {
            cfg.creators = v;
        }
        if let Some(v) = self.process {
            cfg.process = v;
        }
        if let Some(v) = self.setup {
            cfg.setup = v;
        }
        if let Some(v) = self.exit {
            cfg.exit = v;
        }
        if let Some(v) = self.duration {
            cfg.duration = v;
        }
    }
}

/// The two schemes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchemeId {
    /// Before the patch: one mutex, held by teardown across the grace period.
    NetMutex,
    /// After the patch: a reader-writer lock taken for reading by create and teardown.
    NetRwsem,
}

impl SchemeId {
    /// Both, old first.
    pub const ALL: [SchemeId; 2] = [SchemeId::NetMutex, SchemeId::NetRwsem];

    /// Short id.
    pub fn id(self) -> &'static str {
        match self {
            SchemeId::NetMutex => "net-mutex",
            SchemeId::NetRwsem => "net-rwsem",
        }
    }

    /// Description.
    pub fn describe(self) -> &'static str {
        match self {
            SchemeId::NetMutex => "parking_lot Mutex for create and teardown (before the patch)",
            SchemeId::NetRwsem => "parking_lot RwLock, read side for create and teardown (after)",
        }
    }
}

/// `net_mutex` or `net_sem`.
enum NetLock {
    Mutex(Mutex<()>),
    Rwsem(parking_lot::RwLock<()>),
}

impl NetLock {
    /// Run `f` holding the lock as create/teardown take it.
    fn with<R>(&self, f: impl FnOnce() -> R) -> R {
        match self {
            NetLock::Mutex(m) => {
                let _g = m.lock();
                f()
            }
            NetLock::Rwsem(l) => {
                let _g = l.read();
                f()
            }
        }
    }
}

/// A namespace; counts its own destruction.
struct Net {
    id: u64,
    freed: Arc<AtomicU64>,
}

impl Drop for Net {
    fn drop(&mut self) {
        self.freed.fetch_add(1, Relaxed);
    }
}

/// `net_namespace_list`: an `rcukit::RcuList` in the scheme's own domain. Creation links a
/// namespace at the tail (`list_add_tail_rcu`), teardown unlinks a batch (`list_del_rcu`; the
/// nodes are retired, the namespaces themselves stay alive in the batch until teardown frees
/// them), and `for_each_net` walks it under `Rcu::read`.
type NetList = RcuList<Arc<Net>, Arc<Rcu>>;

/// `for_each_net`: the number of namespaces seen.
fn walk(list: &NetList) -> usize {
    let guard = list.domain().read();
    list.iter(&guard).filter(|n| n.id != u64::MAX).count()
}

/// One scheme's figures.
#[derive(Clone, Debug, Serialize)]
pub struct SchemeResult {
    /// Scheme id.
    pub scheme: SchemeId,
    /// Description.
    pub description: &'static str,
    /// Namespaces created in the measuring window.
    pub creates: u64,
    /// Creates per second.
    pub creates_per_s: f64,
    /// Time per `copy_net_ns` (lock wait + setup), microseconds.
    pub create_us: Summary,
    /// Teardown batches run.
    pub cleanup_batches: u64,
    /// Mean namespaces per teardown batch.
    pub mean_batch: f64,
    /// Time teardown spent in `synchronize()` per batch (with the lock held), milliseconds.
    pub gp_wait_ms: Summary,
    /// Namespaces created in the whole run.
    pub created_total: u64,
    /// Namespaces torn down (must equal `created_total`).
    pub destroyed: u64,
    /// Namespaces freed (must equal `created_total`).
    pub freed: u64,
    /// `for_each_net` walks done by the reader.
    pub reader_walks: u64,
}

/// The experiment's result.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `netns`.
    pub experiment: &'static str,
    /// Seeds reproduced.
    pub seeds: [&'static str; 1],
    /// Where and how it ran.
    pub env: Environment,
    /// Settings.
    pub config: Config,
    /// Both schemes.
    pub schemes: Vec<SchemeResult>,
    /// creates/s after (rwsem) / before (mutex).
    pub ratio: Option<f64>,
    /// The seed's ratio for `unshare -n bash -c exit` (84.19 s / 18.235 s).
    pub seed_ratio: f64,
    /// The seed's ratio for the C `unshare()` loop (99.85 s / 68.34 s).
    pub seed_ratio_c_loop: f64,
    /// Where the seed's figures come from.
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
    let task = progress.task(NAME, SchemeId::ALL.len() as u64);
    let mut schemes = Vec::new();
    for id in SchemeId::ALL {
        task.message(id.id());
        schemes.push(run_scheme(cfg, id)?);
        task.inc();
    }
    task.finish();
    let r = ratio(schemes[1].creates_per_s, schemes[0].creates_per_s);
    Ok(Report {
        experiment: NAME,
        seeds: ["003"],
        env,
        config: cfg.clone(),
        schemes,
        ratio: r,
        seed_ratio: 84.190 / 18.235,
        seed_ratio_c_loop: 99.85 / 68.34,
        seed_source: "seed 003: Kirill Tkhai, Nov 2017, `for i in {1..10000}; do unshare -n bash \
                      -c exit; done` 1m24.190s before, 0m18.235s after; 100,000 unshare() in C \
                      1:39.85 before, 1:08.34 after",
    })
}

/// Shared state of one scheme's run.
struct World {
    lock: NetLock,
    list: NetList,
    queue: Mutex<Vec<Arc<Net>>>,
    queued: Condvar,
    next_id: AtomicU64,
    destroyed: AtomicU64,
    freed: Arc<AtomicU64>,
    batches: Mutex<(u64, Vec<f64>)>,
}

fn run_scheme(cfg: &Config, id: SchemeId) -> Result<SchemeResult> {
    let rcu = Arc::new(Rcu::builder().name("lab-netns").build()?);
    let world = World {
        lock: match id {
            SchemeId::NetMutex => NetLock::Mutex(Mutex::new(())),
            SchemeId::NetRwsem => NetLock::Rwsem(parking_lot::RwLock::new(())),
        },
        list: NetList::with_domain(rcu),
        queue: Mutex::new(Vec::new()),
        queued: Condvar::new(),
        next_id: AtomicU64::new(0),
        destroyed: AtomicU64::new(0),
        freed: Arc::new(AtomicU64::new(0)),
        batches: Mutex::new((0, Vec::new())),
    };
    let stop_creators = StopFlag::new();
    let stop_cleanup = StopFlag::new();
    let walks = AtomicU64::new(0);
    let (creates, window, create_us) = std::thread::scope(|s| -> Result<_> {
        let w = &world;
        let cleanup = {
            let stop = &stop_cleanup;
            super::spawn_scoped(s, "netns-cleanup", move || cleanup(w, cfg, stop))?
        };
        let reader = {
            let (stop, walks) = (&stop_cleanup, &walks);
            super::spawn_scoped(s, "netns-for-each", move || {
                while !stop.stopped() {
                    std::hint::black_box(walk(&w.list));
                    walks.fetch_add(1, Relaxed);
                    std::thread::sleep(Duration::from_micros(200));
                }
            })?
        };
        let start = Instant::now();
        let mut creators = Vec::new();
        for c in 0..cfg.creators {
            let stop = &stop_creators;
            creators.push(super::spawn_scoped(
                s,
                &format!("netns-create{c}"),
                move || creator(w, cfg, stop),
            )?);
        }
        measure::sleep_until(start + cfg.duration);
        stop_creators.stop();
        let mut creates = 0;
        let mut create_us = Vec::new();
        for h in creators {
            let (n, lat) = super::join(h)?;
            creates += n;
            create_us.extend(lat);
        }
        let window = start.elapsed();
        stop_cleanup.stop();
        world.queued.notify_all();
        super::join(cleanup)?;
        super::join(reader)?;
        Ok((creates, window, create_us))
    })?;
    let World {
        list,
        next_id,
        destroyed,
        freed,
        batches,
        ..
    } = world;
    // Free every retired list node, then the list itself.
    while list.domain().stats().callbacks_pending > 0 {
        list.domain().barrier();
    }
    drop(list);
    let (cleanup_batches, gp_ms) = batches.into_inner();
    let destroyed = destroyed.load(Relaxed);
    Ok(SchemeResult {
        scheme: id,
        description: id.describe(),
        creates,
        creates_per_s: per_sec(creates, window),
        create_us: Summary::of(&create_us),
        cleanup_batches,
        mean_batch: if cleanup_batches > 0 {
            destroyed as f64 / cleanup_batches as f64
        } else {
            0.0
        },
        gp_wait_ms: Summary::of(&gp_ms),
        created_total: next_id.load(Relaxed),
        destroyed,
        freed: freed.load(Relaxed),
        reader_walks: walks.load(Relaxed),
    })
}

/// The `unshare -n bash -c exit` loop: returns (creates, create latencies in µs).
fn creator(w: &World, cfg: &Config, stop: &StopFlag) -> (u64, Vec<f64>) {
    let mut n = 0;
    let mut lat = Vec::new();
    while !stop.stopped() {
        spin_for(cfg.process);
        let t = Instant::now();
        let net = w.lock.with(|| {
            spin_for(cfg.setup);
            let net = Arc::new(Net {
                id: w.next_id.fetch_add(1, Relaxed),
                freed: w.freed.clone(),
            });
            w.list.push_back(net.clone());
            net
        });
        lat.push(measure::us(t.elapsed()));
        n += 1;
        // The process exits: its namespace goes to the cleanup work queue.
        w.queue.lock().push(net);
        w.queued.notify_one();
    }
    (n, lat)
}

/// `cleanup_net`: tear down queued namespaces in batches until stopped and drained.
fn cleanup(w: &World, cfg: &Config, stop: &StopFlag) {
    loop {
        let batch = {
            let mut q = w.queue.lock();
            while q.is_empty() && !stop.stopped() {
                w.queued.wait_for(&mut q, Duration::from_millis(10));
            }
            if q.is_empty() {
                return;
            }
            std::mem::take(&mut *q)
        };
        let gp_ms = w.lock.with(|| {
            let dying: HashSet<u64> = batch.iter().map(|n| n.id).collect();
            w.list.retain(|n| !dying.contains(&n.id));
            let t = Instant::now();
            w.list.domain().synchronize();
            let gp = measure::ms(t.elapsed());
            for _ in &batch {
                spin_for(cfg.exit);
            }
            gp
        });
        w.destroyed.fetch_add(batch.len() as u64, Relaxed);
        drop(batch);
        let mut b = w.batches.lock();
        b.0 += 1;
        b.1.push(gp_ms);
    }
}

/// Tables, plot and headlines.
pub fn render(r: &Report) -> Result<Rendered> {
    let mut md = String::new();
    md.push_str(&format!(
        "{} creator loop(s): {} µs of process work, then create a namespace ({} µs under the \
         lock); a cleanup thread tears namespaces down in batches, waiting in synchronize() \
         with the lock held ({} µs exit work each). {} s per scheme.\n\n",
        r.config.creators,
        measure::us(r.config.process),
        measure::us(r.config.setup),
        measure::us(r.config.exit),
        r.config.duration.as_secs_f64()
    ));
    md.push_str("### The seed's figures beside ours\n\n");
    let mut side = Table::new(&["", "seed (kernel)", "ours (this run)"]);
    let old = r.scheme(SchemeId::NetMutex);
    let new = r.scheme(SchemeId::NetRwsem);
    side.row(vec![
        "create/destroy loop, rwsem / mutex".into(),
        format!(
            "84.19 s / 18.235 s = {:.2}x (`unshare -n bash -c exit`)",
            r.seed_ratio
        ),
        format!(
            "{} / {} creates/s = {}",
            new.map_or("n/a".into(), |s| report::num(s.creates_per_s)),
            old.map_or("n/a".into(), |s| report::num(s.creates_per_s)),
            report::ratio(r.ratio)
        ),
    ]);
    side.row(vec![
        "tight unshare() loop in C".into(),
        format!("99.85 s / 68.34 s = {:.2}x", r.seed_ratio_c_loop),
        "(not modelled separately)".into(),
    ]);
    md.push_str(&side.to_markdown());
    md.push_str(&format!(
        "\nSeed: {}. Our ratio depends on how long a normal grace period takes here (the \
         `synchronize()` column) against the 1.8 ms of work per iteration taken from the seed.\n\n",
        r.seed_source
    ));
    md.push_str("### Our measurements\n\n");
    let mut t = Table::new(&[
        "scheme",
        "lock",
        "creates/s",
        "copy_net_ns p50 / p99 (µs)",
        "synchronize() in teardown, mean (ms)",
        "teardown batches (mean size)",
        "created / destroyed / freed",
        "for_each_net walks",
    ]);
    for s in &r.schemes {
        t.row(vec![
            format!("`{}`", s.scheme.id()),
            s.description.into(),
            report::num(s.creates_per_s),
            format!(
                "{} / {}",
                report::num(s.create_us.p50),
                report::num(s.create_us.p99)
            ),
            report::num(s.gp_wait_ms.mean),
            format!("{} ({:.1})", s.cleanup_batches, s.mean_batch),
            format!("{} / {} / {}", s.created_total, s.destroyed, s.freed),
            s.reader_walks.to_string(),
        ]);
    }
    md.push_str(&t.to_markdown());
    let svg = plot::render(&[
        Panel::Bars {
            title: "namespaces created per second".into(),
            value: Axis::linear("creates/s"),
            categories: r.schemes.iter().map(|s| s.scheme.id().into()).collect(),
            series: vec![(
                "creates/s".into(),
                r.schemes.iter().map(|s| s.creates_per_s).collect(),
            )],
        },
        Panel::Lines {
            title: "copy_net_ns latency (lock wait + setup): percentiles".into(),
            x: Axis::log("microseconds (log)"),
            y: Axis::linear("fraction of creates"),
            series: r
                .schemes
                .iter()
                .map(|s| Series {
                    name: s.scheme.id().into(),
                    points: percentile_points(&s.create_us),
                })
                .collect(),
        },
    ])?;
    let headlines = vec![format!(
        "creates/s with the rwsem {} of the mutex's (seed: {:.1}x); teardown's synchronize() \
         took {} ms on average",
        report::ratio(r.ratio),
        r.seed_ratio,
        old.map_or("n/a".into(), |s| report::num(s.gp_wait_ms.mean))
    )];
    Ok(Rendered {
        markdown: md,
        svg: Some(svg),
        headlines,
    })
}

/// The summary's percentiles as (value, fraction) points (the JSON keeps summaries).
fn percentile_points(s: &Summary) -> Vec<(f64, f64)> {
    if s.count == 0 {
        return Vec::new();
    }
    vec![
        (s.min, 0.0),
        (s.p50, 0.5),
        (s.p90, 0.9),
        (s.p99, 0.99),
        (s.max, 1.0),
    ]
}

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
        args.apply(cfg);
    }

    fn run(cfg: &Config, progress: &Progress) -> Result<Report> {
        run(cfg, progress)
    }

    fn render(report: &Report) -> Result<Rendered> {
        render(report)
    }
}
