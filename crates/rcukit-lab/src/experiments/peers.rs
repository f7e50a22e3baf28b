//! rcukit beside the systems people use today, in one run.
//!
//! Three measurements, each on every peer that offers the operation:
//!
//! * **Read-side cost**: nanoseconds per read-side section that loads a shared pointer and
//!   reads the value behind it, with 1 thread and with as many threads as cores, all reading
//!   at once. The plain atomic load is the floor. rcukit appears with each of its read sides:
//!   `Rcu::read` (global and custom domain), `RcuCell::load`, a `Qsbr` domain (a plain load,
//!   a quiescent state every 1024 sections, as the liburcu-qsbr loop), `RecSeq::read` and
//!   `PerCpuRwLock::read`.
//! * **Grace-period latency**: how long one grace period takes while one other thread runs
//!   read-side sections back to back (a "busy reader"; for QSBR, a registered thread that
//!   announces a quiescent state after every section). For crossbeam-epoch, which has no
//!   grace-period call, it is the time from `defer` (and `flush`) until the deferred closure
//!   runs while the caller keeps pinning and flushing: the earliest point its reclamation can
//!   happen. arc-swap, seize and the locks have no grace period to measure.
//! * **Retire throughput**: objects per second through each library's deferred-free API, end
//!   to end: one thread queues `retire_objects` 64-byte objects, then waits until every one
//!   has been dropped (rcukit `barrier`, crossbeam pins and flushes, seize drops its
//!   collector, liburcu `rcu_barrier`, ck `ck_epoch_barrier`). Every object is counted when
//!   dropped; the count must equal the number queued.
//!
//! With the `c-peers` feature, liburcu's memb and qsbr flavors and Concurrency Kit's ck_epoch
//! join through FFI (their loops run in C; see `c_peers`, compiled with the feature).

use super::{
    check_duration, check_range, check_threads, ser_ms, Common, Experiment, Rendered, Unavailable,
};
use crate::env::Environment;
use crate::measure::{self, ratio, StopFlag, Summary};
use crate::plot::{self, Axis, Panel};
use crate::progress::Progress;
use crate::report::{self, Table};
use anyhow::{bail, Result};
use arc_swap::ArcSwap;
use crossbeam_epoch as epoch;
use rcukit::{PerCpuRwLock, Qsbr, QsbrThread, Rcu, RcuCell, RecSeq};
use seize::Guard as _;
use serde::Serialize;
use std::hint::black_box;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// File stem and subcommand name.
pub const NAME: &str = "peers";

/// Schemes the experiment knows but this build cannot run yet (none: every peer of the issue
/// runs).
pub const UNAVAILABLE: &[Unavailable] = &[];

/// Settings.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Thread counts for the read-side cost (default 1 and the number of cores).
    pub read_threads: Vec<usize>,
    /// Measuring time per (peer, thread count).
    #[serde(rename = "read_time_ms", serialize_with = "ser_ms")]
    pub read_time: Duration,
    /// Measuring time per grace-period peer.
    #[serde(rename = "gp_time_ms", serialize_with = "ser_ms")]
    pub gp_time: Duration,
    /// Most grace periods timed per peer.
    pub gp_max_samples: usize,
    /// Objects each retire-throughput peer queues.
    pub retire_objects: u64,
    /// Quick mode.
    pub quick: bool,
}

impl Config {
    /// Defaults for `common`.
    pub fn new(common: &Common) -> Config {
        let mut read_threads = vec![1, common.threads];
        read_threads.dedup();
        Config {
            read_threads,
            read_time: common.pick(Duration::from_millis(100), Duration::from_millis(500)),
            gp_time: common.pick(Duration::from_millis(400), Duration::from_secs(2)),
            gp_max_samples: 5000,
            retire_objects: common.pick(200_000, 1_000_000),
            quick: common.quick,
        }
    }

    /// Reject impossible settings.
    pub fn validate(&self) -> Result<()> {
        if self.read_threads.is_empty() {
            bail!("--read-threads needs at least one count");
        }
        for &n in &self.read_threads {
            check_threads("--read-threads", n)?;
        }
        check_duration("--read-time", self.read_time)?;
        check_duration("--gp-time", self.gp_time)?;
        check_range("gp samples", self.gp_max_samples as u64, 1, 1_000_000)?;
        check_range("--retire-objects", self.retire_objects, 1, 100_000_000)?;
        Ok(())
    }
}

/// Flags of the `peers` subcommand.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Args {
    /// Thread counts for the read-side cost, comma-separated [default: 1 and the cores]
    #[arg(long, value_delimiter = ',')]
    pub read_threads: Vec<usize>,
    /// Measuring time per read-side point [default: 100ms quick, 500ms full]
    #[arg(long, value_parser = crate::cli::parse_duration)]
    pub read_time: Option<Duration>,
    /// Measuring time per grace-period peer [default: 400ms quick, 2s full]
    #[arg(long, value_parser = crate::cli::parse_duration)]
    pub gp_time: Option<Duration>,
    /// Objects queued per retire-throughput peer [default: 200000 quick, 1000000 full]
    #[arg(long)]
    pub retire_objects: Option<u64>,
}

impl Args {
    /// Apply the flags given on top of `cfg`.
    pub fn apply(&self, cfg: &mut Config) {
        if !self.read_threads.is_empty() {
            cfg.read_threads = self.read_threads.clone();
        }
        if let Some(v) = self.read_time {
            cfg.read_time = v;
        }
        if let Some(v) = self.gp_time {
            cfg.gp_time = v;
        }
        if let Some(v) = self.retire_objects {
            cfg.retire_objects = v;
        }
    }
}

// ----------------------------------------------------------------------------------------------
// Read-side cost

/// Peers measured for read-side cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadPeer {
    /// A plain `Acquire` load: the floor.
    PlainLoad,
    /// `Rcu::global().read()`.
    RcukitGlobal,
    /// `read()` on a domain built with `Rcu::builder()`.
    RcukitDomain,
    /// `RcuCell::load` under a guard of the cell's (global) domain.
    RcukitRcucell,
    /// `rcukit::Qsbr`: a registered thread, a plain load per section, `quiescent_state()` every
    /// 1024 sections (the liburcu-qsbr loop's cadence).
    RcukitQsbr,
    /// `rcukit::RecSeq::read` (xt_recseq: the thread's counter made odd, a fence, even again).
    RcukitRecseq,
    /// `rcukit::PerCpuRwLock::read` (an atomic add and subtract on the thread's slot).
    RcukitPercpuRwlock,
    /// `crossbeam_epoch::pin()` (default collector) and an `Atomic` load.
    CrossbeamEpoch,
    /// `ArcSwap::load()`.
    ArcSwap,
    /// `seize::Collector::enter()` and `Guard::protect`.
    Seize,
    /// `parking_lot::RwLock::read()`.
    ParkingLotRwlock,
    /// `std::sync::RwLock::read()`.
    StdRwlock,
    /// liburcu memb: `rcu_read_lock` / `rcu_dereference` / `rcu_read_unlock` (loop in C).
    #[cfg(feature = "c-peers")]
    UrcuMemb,
    /// liburcu qsbr: the same, with `rcu_quiescent_state()` every 1024 sections (loop in C).
    #[cfg(feature = "c-peers")]
    UrcuQsbr,
    /// ck_epoch: `ck_epoch_begin` / load / `ck_epoch_end`, no section (loop in C).
    #[cfg(feature = "c-peers")]
    CkEpoch,
}

impl ReadPeer {
    /// Every read peer of this build.
    pub fn all() -> Vec<ReadPeer> {
        #[allow(unused_mut)]
        let mut v = vec![
            ReadPeer::PlainLoad,
            ReadPeer::RcukitGlobal,
            ReadPeer::RcukitDomain,
            ReadPeer::RcukitRcucell,
            ReadPeer::RcukitQsbr,
            ReadPeer::RcukitRecseq,
            ReadPeer::RcukitPercpuRwlock,
            ReadPeer::CrossbeamEpoch,
            ReadPeer::ArcSwap,
            ReadPeer::Seize,
            ReadPeer::ParkingLotRwlock,
            ReadPeer::StdRwlock,
        ];
        #[cfg(feature = "c-peers")]
        v.extend([ReadPeer::UrcuMemb, ReadPeer::UrcuQsbr, ReadPeer::CkEpoch]);
        v
    }

    /// Short id.
    pub fn id(self) -> &'static str {
        match self {
            ReadPeer::PlainLoad => "plain-load",
            ReadPeer::RcukitGlobal => "rcukit-global",
            ReadPeer::RcukitDomain => "rcukit-domain",
            ReadPeer::RcukitRcucell => "rcukit-rcucell",
            ReadPeer::RcukitQsbr => "rcukit-qsbr",
            ReadPeer::RcukitRecseq => "rcukit-recseq",
            ReadPeer::RcukitPercpuRwlock => "rcukit-percpu-rwlock",
            ReadPeer::CrossbeamEpoch => "crossbeam-epoch",
            ReadPeer::ArcSwap => "arc-swap",
            ReadPeer::Seize => "seize",
            ReadPeer::ParkingLotRwlock => "parking_lot-rwlock",
            ReadPeer::StdRwlock => "std-rwlock",
            #[cfg(feature = "c-peers")]
            ReadPeer::UrcuMemb => "liburcu-memb",
            #[cfg(feature = "c-peers")]
            ReadPeer::UrcuQsbr => "liburcu-qsbr",
            #[cfg(feature = "c-peers")]
            ReadPeer::CkEpoch => "ck-epoch",
        }
    }
}

/// Sections between two quiescent states of the QSBR read loops (liburcu-qsbr's cadence).
const QS_EVERY: u64 = 1024;

/// A reader thread's own state for the peers that need one.
struct ReadLocal<'a> {
    /// The thread's registration with the QSBR domain (for `rcukit-qsbr` only).
    qsbr: Option<QsbrThread<'a>>,
}

/// The shared data every read peer reads: one `u64` behind each library's pointer type.
struct ReadState {
    plain: AtomicPtr<u64>,
    domain: Rcu,
    cell: RcuCell<u64>,
    qsbr: Qsbr,
    recseq: RecSeq<u64>,
    percpu: PerCpuRwLock<u64>,
    epoch: epoch::Atomic<u64>,
    arc: ArcSwap<u64>,
    seize: seize::Collector,
    seize_ptr: AtomicPtr<u64>,
    pl: parking_lot::RwLock<u64>,
    std: std::sync::RwLock<u64>,
    #[cfg(feature = "c-peers")]
    c_target: crate::c_peers::Target,
}

impl ReadState {
    fn new() -> Result<ReadState> {
        Ok(ReadState {
            plain: AtomicPtr::new(Box::into_raw(Box::new(1))),
            domain: Rcu::builder().name("lab-peers").build()?,
            cell: RcuCell::new(1),
            qsbr: Qsbr::builder().name("lab-peers-qsbr").build()?,
            recseq: RecSeq::new(1),
            percpu: PerCpuRwLock::new(1),
            epoch: epoch::Atomic::new(1),
            arc: ArcSwap::from_pointee(1),
            seize: seize::Collector::new(),
            seize_ptr: AtomicPtr::new(Box::into_raw(Box::new(1))),
            pl: parking_lot::RwLock::new(1),
            std: std::sync::RwLock::new(1),
            #[cfg(feature = "c-peers")]
            c_target: crate::c_peers::Target::new(1),
        })
    }

    /// The calling reader thread's state for `peer` (registers it with the QSBR domain for
    /// `rcukit-qsbr`; the registration ends when the state drops).
    fn local(&self, peer: ReadPeer) -> ReadLocal<'_> {
        ReadLocal {
            qsbr: (peer == ReadPeer::RcukitQsbr).then(|| self.qsbr.register()),
        }
    }

    /// `iters` read-side sections of `peer`; a tight, monomorphic loop per peer.
    fn chunk(&self, peer: ReadPeer, iters: u64, local: &mut ReadLocal<'_>) -> u64 {
        let mut sum = 0u64;
        match peer {
            ReadPeer::PlainLoad => {
                for _ in 0..iters {
                    // SAFETY: the pointee lives as long as `self` and is never written.
                    sum += unsafe { *black_box(&self.plain).load(Acquire) };
                }
            }
            ReadPeer::RcukitGlobal => {
                let rcu = Rcu::global();
                for _ in 0..iters {
                    let _g = rcu.read();
                    // SAFETY: as above (the pointer is never replaced during the run).
                    sum += unsafe { *black_box(&self.plain).load(Acquire) };
                }
            }
            ReadPeer::RcukitDomain => {
                for _ in 0..iters {
                    let _g = self.domain.read();
                    // SAFETY: as above.
                    sum += unsafe { *black_box(&self.plain).load(Acquire) };
                }
            }
            ReadPeer::RcukitRcucell => {
                let cell = &self.cell;
                for _ in 0..iters {
                    let g = cell.domain().read();
                    sum += *black_box(cell).load(&g);
                }
            }
            ReadPeer::RcukitQsbr => {
                let Some(me) = local.qsbr.as_mut() else {
                    unreachable!("rcukit-qsbr reader without its registration")
                };
                let mut left = QS_EVERY;
                for _ in 0..iters {
                    // SAFETY: the pointee lives as long as `self` and is never replaced; a
                    // replaced value would be freed only after this registered thread's next
                    // quiescent state.
                    sum += unsafe { *black_box(&self.plain).load(Acquire) };
                    // A countdown, as in the C loop: no division per section.
                    left -= 1;
                    if left == 0 {
                        me.quiescent_state();
                        left = QS_EVERY;
                    }
                }
            }
            ReadPeer::RcukitRecseq => {
                for _ in 0..iters {
                    sum += *black_box(&self.recseq).read();
                }
            }
            ReadPeer::RcukitPercpuRwlock => {
                for _ in 0..iters {
                    sum += *black_box(&self.percpu).read();
                }
            }
            ReadPeer::CrossbeamEpoch => {
                for _ in 0..iters {
                    let g = epoch::pin();
                    let p = black_box(&self.epoch).load(Acquire, &g);
                    // SAFETY: never null, never retired during the run; `g` protects it.
                    sum += unsafe { *p.deref() };
                }
            }
            ReadPeer::ArcSwap => {
                for _ in 0..iters {
                    sum += **black_box(&self.arc).load();
                }
            }
            ReadPeer::Seize => {
                for _ in 0..iters {
                    let g = self.seize.enter();
                    let p = g.protect(black_box(&self.seize_ptr), Acquire);
                    // SAFETY: never retired during the run; `g` protects it.
                    sum += unsafe { *p };
                }
            }
            ReadPeer::ParkingLotRwlock => {
                for _ in 0..iters {
                    sum += *black_box(&self.pl).read();
                }
            }
            ReadPeer::StdRwlock => {
                for _ in 0..iters {
                    sum += match black_box(&self.std).read() {
                        Ok(v) => *v,
                        Err(p) => *p.into_inner(),
                    };
                }
            }
            #[cfg(feature = "c-peers")]
            ReadPeer::UrcuMemb => {
                use crate::c_peers::{read_loop, Flavor};
                sum = read_loop(Flavor::UrcuMemb, &self.c_target, iters, 0);
            }
            #[cfg(feature = "c-peers")]
            ReadPeer::UrcuQsbr => {
                use crate::c_peers::{read_loop, Flavor};
                sum = read_loop(Flavor::UrcuQsbr, &self.c_target, iters, 1024);
            }
            #[cfg(feature = "c-peers")]
            ReadPeer::CkEpoch => {
                use crate::c_peers::{read_loop, Flavor};
                sum = read_loop(Flavor::CkEpoch, &self.c_target, iters, 0);
            }
        }
        sum
    }
}

impl Drop for ReadState {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader is left; both pointers came from `Box::into_raw` and
        // were never replaced.
        unsafe {
            drop(Box::from_raw(*self.plain.get_mut()));
            drop(Box::from_raw(*self.seize_ptr.get_mut()));
        }
    }
}

/// One read peer's figures.
#[derive(Clone, Debug, Serialize)]
pub struct ReadResult {
    /// Peer id.
    pub peer: ReadPeer,
    /// (threads, ns per read-side section per thread).
    pub ns_per_op: Vec<(usize, f64)>,
    /// ns_per_op / rcukit-global's, per thread count.
    pub vs_rcukit: Vec<(usize, Option<f64>)>,
}

fn measure_read(state: &ReadState, peer: ReadPeer, threads: usize, time: Duration) -> Result<f64> {
    // Foreign loops register the thread per call: give them bigger chunks.
    let chunk: u64 = match peer.id() {
        "liburcu-memb" | "liburcu-qsbr" | "ck-epoch" => 1 << 20,
        _ => 1 << 16,
    };
    let barrier = Barrier::new(threads);
    let per_thread = std::thread::scope(|s| -> Result<Vec<f64>> {
        let mut handles = Vec::new();
        for t in 0..threads {
            let barrier = &barrier;
            handles.push(super::spawn_scoped(s, &format!("peers-r{t}"), move || {
                let mut local = state.local(peer);
                black_box(state.chunk(peer, chunk / 16, &mut local)); // warm up, register
                barrier.wait();
                let start = Instant::now();
                let mut ops = 0u64;
                let mut sum = 0u64;
                while start.elapsed() < time {
                    sum = sum.wrapping_add(state.chunk(peer, chunk, &mut local));
                    ops += chunk;
                }
                black_box(sum);
                start.elapsed().as_nanos() as f64 / ops as f64
            })?);
        }
        handles.into_iter().map(super::join).collect()
    })?;
    Ok(per_thread.iter().sum::<f64>() / per_thread.len() as f64)
}

// ----------------------------------------------------------------------------------------------
// Grace-period latency

/// Peers measured for grace-period latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpPeer {
    /// rcukit `synchronize()` (normal grace period).
    RcukitSynchronize,
    /// rcukit `synchronize_expedited()`.
    RcukitExpedited,
    /// rcukit `Qsbr::synchronize()` (normal, batched) with a busy QSBR reader.
    RcukitQsbrSynchronize,
    /// rcukit `Qsbr::synchronize_expedited()` (run in the caller) with a busy QSBR reader.
    RcukitQsbrExpedited,
    /// crossbeam-epoch: `defer` + `flush` until the closure has run, pinning and flushing.
    CrossbeamEpoch,
    /// liburcu memb `synchronize_rcu()`.
    #[cfg(feature = "c-peers")]
    UrcuMemb,
    /// liburcu qsbr `synchronize_rcu()`.
    #[cfg(feature = "c-peers")]
    UrcuQsbr,
    /// ck `ck_epoch_synchronize()`.
    #[cfg(feature = "c-peers")]
    CkEpoch,
}

impl GpPeer {
    /// Every grace-period peer of this build.
    pub fn all() -> Vec<GpPeer> {
        #[allow(unused_mut)]
        let mut v = vec![
            GpPeer::RcukitSynchronize,
            GpPeer::RcukitExpedited,
            GpPeer::RcukitQsbrSynchronize,
            GpPeer::RcukitQsbrExpedited,
            GpPeer::CrossbeamEpoch,
        ];
        #[cfg(feature = "c-peers")]
        v.extend([GpPeer::UrcuMemb, GpPeer::UrcuQsbr, GpPeer::CkEpoch]);
        v
    }

    /// Short id.
    pub fn id(self) -> &'static str {
        match self {
            GpPeer::RcukitSynchronize => "rcukit-synchronize",
            GpPeer::RcukitExpedited => "rcukit-expedited",
            GpPeer::RcukitQsbrSynchronize => "rcukit-qsbr-synchronize",
            GpPeer::RcukitQsbrExpedited => "rcukit-qsbr-expedited",
            GpPeer::CrossbeamEpoch => "crossbeam-epoch",
            #[cfg(feature = "c-peers")]
            GpPeer::UrcuMemb => "liburcu-memb",
            #[cfg(feature = "c-peers")]
            GpPeer::UrcuQsbr => "liburcu-qsbr",
            #[cfg(feature = "c-peers")]
            GpPeer::CkEpoch => "ck-epoch",
        }
    }

    /// What is timed.
    pub fn describe(self) -> &'static str {
        match self {
            GpPeer::RcukitSynchronize => "Rcu::synchronize() (normal, batched, IPI-free)",
            GpPeer::RcukitExpedited => "Rcu::synchronize_expedited()",
            GpPeer::RcukitQsbrSynchronize => {
                "Qsbr::synchronize() (normal, batched; reader: QS every section)"
            }
            GpPeer::RcukitQsbrExpedited => {
                "Qsbr::synchronize_expedited() (in the caller; reader: QS every section)"
            }
            GpPeer::CrossbeamEpoch => {
                "defer + flush until the closure runs (caller pins and flushes)"
            }
            #[cfg(feature = "c-peers")]
            GpPeer::UrcuMemb => "synchronize_rcu(), memb flavor",
            #[cfg(feature = "c-peers")]
            GpPeer::UrcuQsbr => "synchronize_rcu(), qsbr flavor (reader: QS every section)",
            #[cfg(feature = "c-peers")]
            GpPeer::CkEpoch => "ck_epoch_synchronize()",
        }
    }
}

/// One grace-period peer's figures.
#[derive(Clone, Debug, Serialize)]
pub struct GpResult {
    /// Peer id.
    pub peer: GpPeer,
    /// What is timed.
    pub description: &'static str,
    /// Latency, µs.
    pub latency_us: Summary,
    /// mean / rcukit-expedited's mean.
    pub vs_rcukit_expedited: Option<f64>,
}

fn measure_gp(cfg: &Config, peer: GpPeer) -> Result<Summary> {
    let stop = StopFlag::new();
    let mut samples = Vec::new();
    let mut time = |op: &mut dyn FnMut()| {
        let start = Instant::now();
        while start.elapsed() < cfg.gp_time && samples.len() < cfg.gp_max_samples {
            let t = Instant::now();
            op();
            samples.push(measure::us(t.elapsed()));
        }
    };
    match peer {
        GpPeer::RcukitSynchronize | GpPeer::RcukitExpedited => {
            let rcu = Rcu::builder().name("lab-peers-gp").build()?;
            std::thread::scope(|s| -> Result<()> {
                let (rcu, stop) = (&rcu, &stop);
                let reader = super::spawn_scoped(s, "peers-busy", move || {
                    while !stop.stopped() {
                        let _g = rcu.read();
                        black_box(());
                    }
                })?;
                if peer == GpPeer::RcukitSynchronize {
                    time(&mut || rcu.synchronize());
                } else {
                    time(&mut || rcu.synchronize_expedited());
                }
                stop.stop();
                super::join(reader)
            })?;
        }
        GpPeer::RcukitQsbrSynchronize | GpPeer::RcukitQsbrExpedited => {
            let qsbr = Qsbr::builder().name("lab-peers-qsbr-gp").build()?;
            let registered = AtomicBool::new(false);
            std::thread::scope(|s| -> Result<()> {
                let (qsbr, stop, registered) = (&qsbr, &stop, &registered);
                let reader = super::spawn_scoped(s, "peers-busy", move || {
                    let mut me = qsbr.register();
                    registered.store(true, Relaxed);
                    while !stop.stopped() {
                        black_box(());
                        me.quiescent_state();
                    }
                })?;
                // The first grace period must have the reader to wait for.
                while !registered.load(Relaxed) {
                    std::thread::yield_now();
                }
                if peer == GpPeer::RcukitQsbrSynchronize {
                    time(&mut || qsbr.synchronize());
                } else {
                    time(&mut || qsbr.synchronize_expedited());
                }
                stop.stop();
                super::join(reader)
            })?;
        }
        GpPeer::CrossbeamEpoch => {
            let collector = epoch::Collector::new();
            std::thread::scope(|s| -> Result<()> {
                let (c, stop) = (&collector, &stop);
                let reader = super::spawn_scoped(s, "peers-busy", move || {
                    let h = c.register();
                    while !stop.stopped() {
                        let _g = h.pin();
                        black_box(());
                    }
                })?;
                let h = collector.register();
                time(&mut || {
                    let done = Arc::new(AtomicBool::new(false));
                    {
                        let g = h.pin();
                        let d = done.clone();
                        g.defer(move || d.store(true, Relaxed));
                        g.flush();
                    }
                    while !done.load(Relaxed) {
                        h.pin().flush();
                    }
                });
                stop.stop();
                super::join(reader)
            })?;
        }
        #[cfg(feature = "c-peers")]
        GpPeer::UrcuMemb | GpPeer::UrcuQsbr | GpPeer::CkEpoch => {
            use crate::c_peers::{busy_reader, synchronize, Flavor};
            let flavor = match peer {
                GpPeer::UrcuMemb => Flavor::UrcuMemb,
                GpPeer::UrcuQsbr => Flavor::UrcuQsbr,
                _ => Flavor::CkEpoch,
            };
            let c_stop = std::sync::atomic::AtomicI32::new(0);
            std::thread::scope(|s| -> Result<()> {
                let c_stop = &c_stop;
                let reader =
                    super::spawn_scoped(s, "peers-busy", move || busy_reader(flavor, c_stop))?;
                // Let the reader register before the first grace period.
                std::thread::sleep(Duration::from_millis(5));
                time(&mut || synchronize(flavor));
                c_stop.store(1, Relaxed);
                super::join(reader)
            })?;
        }
    }
    Ok(Summary::of(&samples))
}

// ----------------------------------------------------------------------------------------------
// Retire throughput

/// Peers measured for retire throughput.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RetirePeer {
    /// rcukit `retire(Box<T>)`, then `barrier()`.
    Rcukit,
    /// crossbeam-epoch `defer_destroy` under a pin, then pin + flush until all are freed.
    CrossbeamEpoch,
    /// seize `Collector::retire`, then drop the collector.
    Seize,
    /// liburcu memb `call_rcu`, then `rcu_barrier()` (in C).
    #[cfg(feature = "c-peers")]
    UrcuMemb,
    /// ck `ck_epoch_call` (with `ck_epoch_poll` every 1024), then `ck_epoch_barrier` (in C).
    #[cfg(feature = "c-peers")]
    CkEpoch,
}

impl RetirePeer {
    /// Every retire peer of this build.
    pub fn all() -> Vec<RetirePeer> {
        #[allow(unused_mut)]
        let mut v = vec![
            RetirePeer::Rcukit,
            RetirePeer::CrossbeamEpoch,
            RetirePeer::Seize,
        ];
        #[cfg(feature = "c-peers")]
        v.extend([RetirePeer::UrcuMemb, RetirePeer::CkEpoch]);
        v
    }

    /// Short id.
    pub fn id(self) -> &'static str {
        match self {
            RetirePeer::Rcukit => "rcukit",
            RetirePeer::CrossbeamEpoch => "crossbeam-epoch",
            RetirePeer::Seize => "seize",
            #[cfg(feature = "c-peers")]
            RetirePeer::UrcuMemb => "liburcu-memb",
            #[cfg(feature = "c-peers")]
            RetirePeer::CkEpoch => "ck-epoch",
        }
    }
}

/// One retire peer's figures.
#[derive(Clone, Debug, Serialize)]
pub struct RetireResult {
    /// Peer id.
    pub peer: RetirePeer,
    /// Objects queued.
    pub retired: u64,
    /// Objects dropped by the end (must equal `retired`).
    pub freed: u64,
    /// Time from the first retire until the last drop, ms.
    pub elapsed_ms: f64,
    /// retired / elapsed.
    pub objects_per_s: f64,
    /// objects_per_s / rcukit's.
    pub vs_rcukit: Option<f64>,
}

/// A 64-byte retired object that counts its drop.
struct Obj {
    _payload: [u64; 7],
    freed: Arc<AtomicU64>,
}

impl Obj {
    fn new(freed: &Arc<AtomicU64>, i: u64) -> Obj {
        Obj {
            _payload: [i; 7],
            freed: freed.clone(),
        }
    }
}

impl Drop for Obj {
    fn drop(&mut self) {
        self.freed.fetch_add(1, Relaxed);
    }
}

fn measure_retire(n: u64, peer: RetirePeer) -> Result<(u64, Duration)> {
    let freed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    match peer {
        RetirePeer::Rcukit => {
            let rcu = Rcu::builder().name("lab-peers-retire").build()?;
            for i in 0..n {
                rcu.retire(Box::new(Obj::new(&freed, i)));
            }
            while rcu.stats().callbacks_pending > 0 {
                rcu.barrier();
            }
        }
        RetirePeer::CrossbeamEpoch => {
            let collector = epoch::Collector::new();
            let h = collector.register();
            for i in 0..n {
                let g = h.pin();
                let p = epoch::Owned::new(Obj::new(&freed, i)).into_shared(&g);
                // SAFETY: `p` was never shared with anyone; destroying it after the epoch
                // advances is trivially safe.
                unsafe { g.defer_destroy(p) };
            }
            let deadline = Instant::now() + Duration::from_secs(30);
            while freed.load(Relaxed) < n && Instant::now() < deadline {
                h.pin().flush();
            }
            drop(h);
            drop(collector); // frees whatever the deadline left
        }
        RetirePeer::Seize => {
            let collector = seize::Collector::new();
            for i in 0..n {
                let p = Box::into_raw(Box::new(Obj::new(&freed, i)));
                // SAFETY: `p` came from `Box::into_raw`, was never shared, and is retired
                // once with the matching reclaimer.
                unsafe { collector.retire(p, seize::reclaim::boxed) };
            }
            drop(collector); // reclaims the partial batches
        }
        #[cfg(feature = "c-peers")]
        RetirePeer::UrcuMemb | RetirePeer::CkEpoch => {
            use crate::c_peers::{retire, Flavor};
            let flavor = if peer == RetirePeer::UrcuMemb {
                Flavor::UrcuMemb
            } else {
                Flavor::CkEpoch
            };
            let f = retire(flavor, n).unwrap_or(0);
            freed.store(f, Relaxed);
        }
    }
    Ok((freed.load(Relaxed), start.elapsed()))
}

// ----------------------------------------------------------------------------------------------
// The report

/// The experiment's result.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `peers`.
    pub experiment: &'static str,
    /// Where and how it ran.
    pub env: Environment,
    /// Settings.
    pub config: Config,
    /// Read-side cost.
    pub read: Vec<ReadResult>,
    /// Grace-period latency.
    pub grace_period: Vec<GpResult>,
    /// Retire throughput.
    pub retire: Vec<RetireResult>,
    /// Peers not in this build.
    pub not_available: Vec<Unavailable>,
    /// Whether the C peers are compiled in.
    pub c_peers: bool,
}

/// Run the experiment.
pub fn run(cfg: &Config, progress: &Progress) -> Result<Report> {
    cfg.validate()?;
    let env = Environment::collect(cfg.quick);
    let reads = ReadPeer::all();
    let gps = GpPeer::all();
    let retires = RetirePeer::all();
    let steps = reads.len() * cfg.read_threads.len() + gps.len() + retires.len();
    let task = progress.task(NAME, steps as u64);

    let state = ReadState::new()?;
    let mut read: Vec<ReadResult> = reads
        .iter()
        .map(|&peer| ReadResult {
            peer,
            ns_per_op: Vec::new(),
            vs_rcukit: Vec::new(),
        })
        .collect();
    // Interleave: for each thread count, every peer in turn.
    for &threads in &cfg.read_threads {
        for r in &mut read {
            task.message(format!("read side: {} × {threads}", r.peer.id()));
            let ns = measure_read(&state, r.peer, threads, cfg.read_time)?;
            r.ns_per_op.push((threads, ns));
            task.inc();
        }
    }
    drop(state);
    let base: Vec<(usize, f64)> = read
        .iter()
        .find(|r| r.peer == ReadPeer::RcukitGlobal)
        .map(|r| r.ns_per_op.clone())
        .unwrap_or_default();
    for r in &mut read {
        r.vs_rcukit = r
            .ns_per_op
            .iter()
            .zip(&base)
            .map(|(&(t, ns), &(_, b))| (t, ratio(ns, b)))
            .collect();
    }

    let mut grace_period = Vec::new();
    for peer in gps {
        task.message(format!("grace period: {}", peer.id()));
        grace_period.push(GpResult {
            peer,
            description: peer.describe(),
            latency_us: measure_gp(cfg, peer)?,
            vs_rcukit_expedited: None,
        });
        task.inc();
    }
    let exp_mean = grace_period
        .iter()
        .find(|g| g.peer == GpPeer::RcukitExpedited)
        .map(|g| g.latency_us.mean);
    for g in &mut grace_period {
        g.vs_rcukit_expedited = exp_mean.and_then(|b| ratio(g.latency_us.mean, b));
    }

    let mut retire = Vec::new();
    for peer in retires {
        task.message(format!("retire: {}", peer.id()));
        let (freed, elapsed) = measure_retire(cfg.retire_objects, peer)?;
        retire.push(RetireResult {
            peer,
            retired: cfg.retire_objects,
            freed,
            elapsed_ms: measure::ms(elapsed),
            objects_per_s: measure::per_sec(cfg.retire_objects, elapsed),
            vs_rcukit: None,
        });
        task.inc();
    }
    let rcukit_rate = retire
        .iter()
        .find(|r| r.peer == RetirePeer::Rcukit)
        .map(|r| r.objects_per_s);
    for r in &mut retire {
        r.vs_rcukit = rcukit_rate.and_then(|b| ratio(r.objects_per_s, b));
    }
    task.finish();
    Ok(Report {
        experiment: NAME,
        env,
        config: cfg.clone(),
        read,
        grace_period,
        retire,
        not_available: UNAVAILABLE.to_vec(),
        c_peers: cfg!(feature = "c-peers"),
    })
}

/// Tables, plot and headlines.
pub fn render(r: &Report) -> Result<Rendered> {
    let mut md = String::new();
    md.push_str(&format!(
        "All peers in one process, one after another, interleaved by thread count. C peers \
         (liburcu memb/qsbr, ck_epoch): {}.\n\n",
        if r.c_peers {
            "compiled in (feature `c-peers`)"
        } else {
            "not in this build (`--features c-peers`)"
        }
    ));
    md.push_str("### Read-side cost (ns per section: enter, load, read, leave)\n\n");
    let mut header = vec!["peer".to_string()];
    for t in &r.config.read_threads {
        header.push(format!("{t} thread(s)"));
        header.push("vs rcukit-global".into());
    }
    let mut t = Table::new(&header);
    for x in &r.read {
        let mut row = vec![format!("`{}`", x.peer.id())];
        for ((_, ns), (_, v)) in x.ns_per_op.iter().zip(&x.vs_rcukit) {
            row.push(format!("{ns:.2}"));
            row.push(report::ratio(*v));
        }
        t.row(row);
    }
    md.push_str(&t.to_markdown());
    md.push_str(
        "\n`rcukit-qsbr` is a plain load per section with `quiescent_state()` every 1024 \
         sections, the cadence of the `liburcu-qsbr` loop; `rcukit-rcucell` is `RcuCell::load` \
         in the global domain (so compare it with `rcukit-global`); `rcukit-recseq` pays a full \
         fence per section by design (netfilter's xt_recseq). Reference (c-peers.md, this \
         machine, single runs): liburcu memb 1.02 ns, qsbr 0.29 ns, ck_epoch 2.5 ns per section \
         with one thread.\n",
    );
    md.push_str("\n### Grace-period latency (one busy reader thread)\n\n");
    let mut t = Table::new(&[
        "peer",
        "what is timed",
        "mean (µs)",
        "p50 (µs)",
        "p99 (µs)",
        "samples",
        "vs rcukit-expedited",
    ]);
    for g in &r.grace_period {
        t.row(vec![
            format!("`{}`", g.peer.id()),
            g.description.into(),
            report::num(g.latency_us.mean),
            report::num(g.latency_us.p50),
            report::num(g.latency_us.p99),
            g.latency_us.count.to_string(),
            report::ratio(g.vs_rcukit_expedited),
        ]);
    }
    md.push_str(&t.to_markdown());
    md.push_str(
        "\nA QSBR reader is inside a read-side section whenever it is online, so a QSBR grace \
         period also waits while the scheduler has preempted the busy reader (`rcukit::qsbr`, \
         \"Preemption\"); an `Rcu` grace period waits only for a reader preempted inside its \
         short section. On a busy machine the QSBR rows therefore include scheduler time \
         slices.\n",
    );
    md.push_str(&format!(
        "\n### Retire throughput ({} objects of 64 bytes, queued by one thread, until all are \
         dropped)\n\n",
        r.config.retire_objects
    ));
    let mut t = Table::new(&[
        "peer",
        "objects/s",
        "vs rcukit",
        "elapsed (ms)",
        "freed / retired",
    ]);
    for x in &r.retire {
        t.row(vec![
            format!("`{}`", x.peer.id()),
            report::num(x.objects_per_s),
            report::ratio(x.vs_rcukit),
            format!("{:.1}", x.elapsed_ms),
            format!("{} / {}", x.freed, x.retired),
        ]);
    }
    md.push_str(&t.to_markdown());
    md.push_str(&super::unavailable_note(&r.not_available));

    let threads = r.config.read_threads.clone();
    let svg = plot::render(&[
        Panel::Bars {
            title: "read-side cost".into(),
            value: Axis::log("ns per section (log)"),
            categories: r.read.iter().map(|x| x.peer.id().into()).collect(),
            series: threads
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    (
                        format!("{t} thread(s)"),
                        r.read
                            .iter()
                            .map(|x| x.ns_per_op.get(i).map_or(f64::NAN, |p| p.1))
                            .collect(),
                    )
                })
                .collect(),
        },
        Panel::Bars {
            title: "grace-period latency, mean".into(),
            value: Axis::log("µs (log)"),
            categories: r.grace_period.iter().map(|g| g.peer.id().into()).collect(),
            series: vec![(
                "mean".into(),
                r.grace_period.iter().map(|g| g.latency_us.mean).collect(),
            )],
        },
        Panel::Bars {
            title: "retire throughput, end to end".into(),
            value: Axis::linear("objects/s"),
            categories: r.retire.iter().map(|x| x.peer.id().into()).collect(),
            series: vec![(
                "objects/s".into(),
                r.retire.iter().map(|x| x.objects_per_s).collect(),
            )],
        },
    ])?;
    let ns1 = |id: ReadPeer| {
        r.read
            .iter()
            .find(|x| x.peer == id)
            .and_then(|x| x.ns_per_op.first())
            .map(|p| format!("{:.2}", p.1))
            .unwrap_or_else(|| "n/a".into())
    };
    let gp = |id: GpPeer| {
        r.grace_period
            .iter()
            .find(|g| g.peer == id)
            .map(|g| report::num(g.latency_us.mean))
            .unwrap_or_else(|| "n/a".into())
    };
    let headlines = vec![
        format!(
            "read side, 1 thread: rcukit {} ns (qsbr {}, RcuCell {}, RecSeq {}, PerCpuRwLock {}), \
             crossbeam-epoch {} ns, arc-swap {} ns, seize {} ns, parking_lot RwLock {} ns, \
             plain load {} ns",
            ns1(ReadPeer::RcukitGlobal),
            ns1(ReadPeer::RcukitQsbr),
            ns1(ReadPeer::RcukitRcucell),
            ns1(ReadPeer::RcukitRecseq),
            ns1(ReadPeer::RcukitPercpuRwlock),
            ns1(ReadPeer::CrossbeamEpoch),
            ns1(ReadPeer::ArcSwap),
            ns1(ReadPeer::Seize),
            ns1(ReadPeer::ParkingLotRwlock),
            ns1(ReadPeer::PlainLoad)
        ),
        format!(
            "grace period with a busy reader: rcukit expedited {} µs, normal {} µs, qsbr \
             expedited {} µs, qsbr normal {} µs, crossbeam-epoch {} µs",
            gp(GpPeer::RcukitExpedited),
            gp(GpPeer::RcukitSynchronize),
            gp(GpPeer::RcukitQsbrExpedited),
            gp(GpPeer::RcukitQsbrSynchronize),
            gp(GpPeer::CrossbeamEpoch)
        ),
    ];
    Ok(Rendered {
        markdown: md,
        svg: Some(svg),
        headlines,
    })
}

/// The experiment, for the shared drivers.
pub struct Peers;

impl Experiment for Peers {
    const NAME: &'static str = NAME;
    const TITLE: &'static str =
        "Peers: rcukit beside crossbeam-epoch, arc-swap, seize, locks (and liburcu, ck)";
    const SEEDS: &'static [&'static str] = &[];
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
