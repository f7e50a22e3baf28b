//! liburcu's own benchmark shape (`test_urcu`): N reader threads run read-side sections back
//! to back, each dereferencing a shared pointer and checking the value behind it; one writer
//! loops publish → wait for a grace period → poison and free the old value. With N = 1, 2 and
//! 4 on a 2-core machine, 2 to 5 threads are runnable at once: who holds the cores decides how
//! fast a grace period can end, which is what the shape measures.
//!
//! Reported per peer and N: reads per second (all readers), grace periods per second (the
//! writer's loop), the writer's CPU time per grace period (`getrusage(RUSAGE_THREAD)`, so a
//! writer that spins while its reader is not running shows it) and the mean time per loop.
//! QSBR readers announce a quiescent state every 1,024 sections, as the read-side part does.

use crate::experiments::spawn_scoped;
use crate::experiments::{OnExit, StartGate};
use crate::measure;
use anyhow::{bail, Result};
use rcukit::{Qsbr, Rcu, RcuCell, Reclaim};
use serde::Serialize;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64};
use std::time::{Duration, Instant};

/// Sections between two quiescent states of a QSBR reader.
pub(super) const QS_EVERY: u64 = 1024;

/// The value every version holds while it is published (freed versions are poisoned to 0).
const LIVE: u64 = 8;

/// Peers of the shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShapePeer {
    /// `Rcu::synchronize_expedited()` in the writer's loop.
    RcuExpedited,
    /// `Rcu::synchronize()` (normal: batched, IPI-free).
    RcuNormal,
    /// `Qsbr::synchronize_expedited()`.
    QsbrExpedited,
    /// `Qsbr::synchronize()`.
    QsbrNormal,
    /// `Qsbr::synchronize_expedited()` in a domain with unfenced quiescent states
    /// (`fenced_quiescent_states(false)`).
    QsbrUnfencedExpedited,
    /// `Qsbr::synchronize()` in a domain with unfenced quiescent states
    /// (`fenced_quiescent_states(false)`).
    QsbrUnfencedNormal,
    /// `Qsbr::synchronize_expedited()` in a domain whose readers do not give way
    /// (`readers_give_way(false)`).
    QsbrNoGiveWayExpedited,
    /// `RcuCell::store_with(v, Reclaim::Expedited)`: publish, expedited wait, drop.
    CellExpedited,
    /// liburcu memb `synchronize_rcu()`.
    #[cfg(feature = "c-peers")]
    UrcuMemb,
    /// liburcu qsbr `synchronize_rcu()`.
    #[cfg(feature = "c-peers")]
    UrcuQsbr,
}

impl ShapePeer {
    /// Every shape peer of this build.
    pub fn all() -> Vec<ShapePeer> {
        #[allow(unused_mut)]
        let mut v = vec![
            ShapePeer::RcuExpedited,
            ShapePeer::RcuNormal,
            ShapePeer::QsbrExpedited,
            ShapePeer::QsbrNormal,
            ShapePeer::QsbrUnfencedExpedited,
            ShapePeer::QsbrUnfencedNormal,
            ShapePeer::QsbrNoGiveWayExpedited,
            ShapePeer::CellExpedited,
        ];
        #[cfg(feature = "c-peers")]
        v.extend([ShapePeer::UrcuMemb, ShapePeer::UrcuQsbr]);
        v
    }

    /// The peer whose [`id`](Self::id) is `id`.
    pub fn from_id(id: &str) -> Option<ShapePeer> {
        ShapePeer::all().into_iter().find(|p| p.id() == id)
    }

    /// Short id.
    pub fn id(self) -> &'static str {
        match self {
            ShapePeer::RcuExpedited => "rcukit-expedited",
            ShapePeer::RcuNormal => "rcukit-normal",
            ShapePeer::QsbrExpedited => "rcukit-qsbr-expedited",
            ShapePeer::QsbrNormal => "rcukit-qsbr-normal",
            ShapePeer::QsbrUnfencedExpedited => "rcukit-qsbr-unfenced-expedited",
            ShapePeer::QsbrUnfencedNormal => "rcukit-qsbr-unfenced-normal",
            ShapePeer::QsbrNoGiveWayExpedited => "rcukit-qsbr-no-give-way-expedited",
            ShapePeer::CellExpedited => "rcukit-cell-expedited",
            #[cfg(feature = "c-peers")]
            ShapePeer::UrcuMemb => "liburcu-memb",
            #[cfg(feature = "c-peers")]
            ShapePeer::UrcuQsbr => "liburcu-qsbr",
        }
    }

    /// The writer's wait.
    pub fn describe(self) -> &'static str {
        match self {
            ShapePeer::RcuExpedited => "Rcu::synchronize_expedited()",
            ShapePeer::RcuNormal => "Rcu::synchronize() (normal, batched, IPI-free)",
            ShapePeer::QsbrExpedited => "Qsbr::synchronize_expedited()",
            ShapePeer::QsbrNormal => "Qsbr::synchronize() (normal)",
            ShapePeer::QsbrUnfencedExpedited => {
                "Qsbr::synchronize_expedited(), unfenced quiescent states"
            }
            ShapePeer::QsbrUnfencedNormal => {
                "Qsbr::synchronize() (normal), unfenced quiescent states"
            }
            ShapePeer::QsbrNoGiveWayExpedited => {
                "Qsbr::synchronize_expedited(), readers_give_way(false)"
            }
            ShapePeer::CellExpedited => "RcuCell::store_with(v, Reclaim::Expedited)",
            #[cfg(feature = "c-peers")]
            ShapePeer::UrcuMemb => "synchronize_rcu(), memb flavor",
            #[cfg(feature = "c-peers")]
            ShapePeer::UrcuQsbr => "synchronize_rcu(), qsbr flavor",
        }
    }

    /// The liburcu peer the shape's ratios compare this one with (itself for a liburcu peer;
    /// `None` without the C peers).
    pub fn liburcu_baseline(self) -> Option<ShapePeer> {
        #[cfg(feature = "c-peers")]
        {
            Some(match self {
                ShapePeer::QsbrExpedited
                | ShapePeer::QsbrNormal
                | ShapePeer::QsbrUnfencedExpedited
                | ShapePeer::QsbrUnfencedNormal
                | ShapePeer::QsbrNoGiveWayExpedited
                | ShapePeer::UrcuQsbr => ShapePeer::UrcuQsbr,
                _ => ShapePeer::UrcuMemb,
            })
        }
        #[cfg(not(feature = "c-peers"))]
        {
            let _ = self;
            None
        }
    }
}

/// One run of the shape.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ShapeRun {
    /// Read-side sections per second, all readers together.
    pub(super) reads_per_s: f64,
    /// Grace periods per second (writer loops).
    pub(super) gps_per_s: f64,
    /// The writer thread's CPU time per grace period, µs.
    pub(super) writer_cpu_us_per_gp: f64,
    /// Wall time per writer loop, µs.
    pub(super) loop_us: f64,
}

/// The shape's stop flag: an `int` the C loops can read too.
type Stop = AtomicI32;

/// `--shape-peers`' parser: one id of this build's shape peers.
pub(super) fn parse_shape_peer(id: &str) -> std::result::Result<ShapePeer, String> {
    ShapePeer::from_id(id).ok_or_else(|| {
        let ids: Vec<&str> = ShapePeer::all().into_iter().map(ShapePeer::id).collect();
        format!(
            "no shape peer '{id}' in this build; one of: {}",
            ids.join(", ")
        )
    })
}

/// Run `peer` with `readers` readers for `time`.
pub(super) fn measure_shape(peer: ShapePeer, readers: usize, time: Duration) -> Result<ShapeRun> {
    let stop = Stop::new(0);
    let reads = AtomicU64::new(0);
    let start = StartGate::new(readers + 1);
    let rcu = Rcu::builder().name("lab-shape").build()?;
    let fenced = !matches!(
        peer,
        ShapePeer::QsbrUnfencedExpedited | ShapePeer::QsbrUnfencedNormal
    );
    let qsbr = Qsbr::builder()
        .name("lab-shape-qsbr")
        .fenced_quiescent_states(fenced)
        .readers_give_way(peer != ShapePeer::QsbrNoGiveWayExpedited)
        .build()?;
    let cell = RcuCell::with_domain(Poisoned(LIVE), &rcu);
    let shared = Shared::new();
    let run = std::thread::scope(|s| -> Result<ShapeRun> {
        let (stop, reads, start, rcu, qsbr, cell, shared) =
            (&stop, &reads, &start, &rcu, &qsbr, &cell, &shared);
        let _release = OnExit(|| {
            stop.store(1, Relaxed);
            start.call_off();
        });
        let mut threads = Vec::new();
        for _ in 0..readers {
            threads.push(spawn_scoped(s, "shape-reader", move || {
                let n = read_loop(peer, stop, start, rcu, qsbr, cell, shared);
                reads.fetch_add(n, Relaxed);
            })?);
        }
        if !start.wait() {
            bail!("{}: the readers' start was called off", peer.id());
        }
        let cpu = thread_cpu();
        let t = Instant::now();
        let timer = spawn_scoped(s, "shape-timer", move || {
            std::thread::sleep(time);
            stop.store(1, Relaxed);
        })?;
        let gps = write_loop(peer, stop, rcu, qsbr, cell, shared);
        let elapsed = t.elapsed();
        let cpu = thread_cpu().saturating_sub(cpu);
        crate::experiments::join(timer)?;
        for r in threads {
            crate::experiments::join(r)?;
        }
        if gps == 0 {
            bail!("{}: no grace period ended in {time:?}", peer.id());
        }
        Ok(ShapeRun {
            reads_per_s: measure::per_sec(reads.load(Relaxed), elapsed),
            gps_per_s: measure::per_sec(gps, elapsed),
            writer_cpu_us_per_gp: measure::us(cpu) / gps as f64,
            loop_us: measure::us(elapsed) / gps as f64,
        })
    })?;
    drop(shared);
    Ok(run)
}

/// The pointer the Rust readers dereference.
struct Shared(AtomicPtr<u64>);

impl Shared {
    fn new() -> Shared {
        Shared(AtomicPtr::new(Box::into_raw(Box::new(LIVE))))
    }

    /// Check one version read in a read-side section.
    fn check(&self) {
        // SAFETY: called inside a read-side section (or, for QSBR, between two quiescent
        // states) of the domain whose grace period the writer waits for before freeing.
        let v = unsafe { *self.0.load(Acquire) };
        assert_eq!(
            v, LIVE,
            "a reader saw a freed version (the grace period was too short)"
        );
    }

    /// Publish a new version and return the old one, which the caller frees after a grace
    /// period.
    fn publish(&self) -> *mut u64 {
        self.0.swap(Box::into_raw(Box::new(LIVE)), AcqRel)
    }

    /// Poison and free a version that no reader can still hold.
    ///
    /// # Safety
    ///
    /// `old` came from `publish`, and a grace period has ended since.
    unsafe fn retire(old: *mut u64) {
        // SAFETY: the caller's contract: no reader holds `old` any more.
        unsafe {
            *old = 0;
            drop(Box::from_raw(old));
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: the last version, freed when no thread runs the shape any more.
        drop(unsafe { Box::from_raw(self.0.load(Relaxed)) });
    }
}

/// A cell value that is poisoned when dropped.
struct Poisoned(u64);

impl Drop for Poisoned {
    fn drop(&mut self) {
        self.0 = 0;
    }
}

/// One reader: sections until `stop`; the count.
fn read_loop(
    peer: ShapePeer,
    stop: &Stop,
    start: &StartGate,
    rcu: &Rcu,
    qsbr: &Qsbr,
    cell: &RcuCell<Poisoned, &Rcu>,
    shared: &Shared,
) -> u64 {
    let mut n = 0u64;
    match peer {
        ShapePeer::RcuExpedited | ShapePeer::RcuNormal => {
            start.wait();
            while stop.load(Relaxed) == 0 {
                let _guard = rcu.read();
                shared.check();
                n += 1;
            }
        }
        ShapePeer::QsbrExpedited
        | ShapePeer::QsbrNormal
        | ShapePeer::QsbrUnfencedExpedited
        | ShapePeer::QsbrUnfencedNormal
        | ShapePeer::QsbrNoGiveWayExpedited => {
            let mut me = qsbr.register();
            start.wait();
            while stop.load(Relaxed) == 0 {
                for _ in 0..QS_EVERY {
                    shared.check();
                }
                n += QS_EVERY;
                me.quiescent_state();
            }
        }
        ShapePeer::CellExpedited => {
            start.wait();
            while stop.load(Relaxed) == 0 {
                let guard = rcu.read();
                assert_eq!(cell.load(&guard).0, LIVE, "a reader saw a dropped value");
                n += 1;
            }
        }
        #[cfg(feature = "c-peers")]
        ShapePeer::UrcuMemb | ShapePeer::UrcuQsbr => {
            start.wait();
            n = crate::c_peers::shape_reader(c_flavor(peer), stop, QS_EVERY).unwrap_or(0);
        }
    }
    n
}

/// The writer: loops until `stop`; the grace periods waited for.
fn write_loop(
    peer: ShapePeer,
    stop: &Stop,
    rcu: &Rcu,
    qsbr: &Qsbr,
    cell: &RcuCell<Poisoned, &Rcu>,
    shared: &Shared,
) -> u64 {
    let mut gps = 0;
    let wait: &dyn Fn() = match peer {
        ShapePeer::RcuExpedited => &|| rcu.synchronize_expedited(),
        ShapePeer::RcuNormal => &|| rcu.synchronize(),
        ShapePeer::QsbrExpedited
        | ShapePeer::QsbrUnfencedExpedited
        | ShapePeer::QsbrNoGiveWayExpedited => &|| qsbr.synchronize_expedited(),
        ShapePeer::QsbrNormal | ShapePeer::QsbrUnfencedNormal => &|| qsbr.synchronize(),
        ShapePeer::CellExpedited => {
            while stop.load(Relaxed) == 0 {
                cell.store_with(Poisoned(LIVE), Reclaim::Expedited);
                gps += 1;
            }
            return gps;
        }
        #[cfg(feature = "c-peers")]
        ShapePeer::UrcuMemb | ShapePeer::UrcuQsbr => {
            return crate::c_peers::shape_writer(c_flavor(peer), stop).unwrap_or(0);
        }
    };
    while stop.load(Relaxed) == 0 {
        let old = shared.publish();
        wait();
        // SAFETY: published by `publish`, and the grace period just waited for ended.
        unsafe { Shared::retire(old) };
        gps += 1;
    }
    gps
}

#[cfg(feature = "c-peers")]
fn c_flavor(peer: ShapePeer) -> crate::c_peers::Flavor {
    match peer {
        ShapePeer::UrcuQsbr => crate::c_peers::Flavor::UrcuQsbr,
        _ => crate::c_peers::Flavor::UrcuMemb,
    }
}

/// CPU time the calling thread has used (user + system).
fn thread_cpu() -> Duration {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getrusage fills the struct it is given.
        let usage = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
            usage
        };
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        tv(usage.ru_utime) + tv(usage.ru_stime)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Duration::ZERO
    }
}

/// One shape peer's figures at one reader count.
#[derive(Clone, Debug, Serialize)]
pub struct ShapeResult {
    /// Peer id.
    pub peer: ShapePeer,
    /// The writer's wait.
    pub description: &'static str,
    /// Reader threads (plus the writer).
    pub readers: usize,
    /// Read-side sections per second, all readers.
    pub reads_per_s: crate::measure::Rounds,
    /// Grace periods per second.
    pub gps_per_s: crate::measure::Rounds,
    /// The writer's CPU time per grace period, µs.
    pub writer_cpu_us_per_gp: crate::measure::Rounds,
    /// Wall time per writer loop, µs.
    pub loop_us: crate::measure::Rounds,
    /// Grace periods/s over the liburcu baseline's, round by round.
    pub gps_vs_liburcu: Option<crate::measure::Rounds>,
    /// Reads/s over the liburcu baseline's, round by round.
    pub reads_vs_liburcu: Option<crate::measure::Rounds>,
}
