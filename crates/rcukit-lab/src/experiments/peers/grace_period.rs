//! Grace-period latency: the peers and the measurement.

use crate::experiments::OnExit;
use crate::measure::{self, Rounds, StopFlag, Summary};
use anyhow::Result;
use crossbeam_epoch as epoch;
use rcukit::{Qsbr, Rcu};
use serde::Serialize;
use std::hint::black_box;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use super::Config;

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
    /// Latency, µs: every grace period timed, over all rounds.
    pub latency_us: Summary,
    /// Mean latency of each round, µs, with the median and the spread.
    pub mean_us_rounds: Rounds,
    /// Median over the rounds of mean / rcukit-expedited's mean in the same round.
    pub vs_rcukit_expedited: Option<f64>,
    /// That ratio in every round, with the median and the spread.
    pub vs_rcukit_expedited_rounds: Rounds,
}

/// Time grace periods of `peer` for `cfg.gp_time` (at most `cfg.gp_max_samples` of them)
/// while one reader thread stays busy: one round's latencies, microseconds.
pub(super) fn measure_gp(cfg: &Config, peer: GpPeer) -> Result<Vec<f64>> {
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
        GpPeer::RcukitSynchronize | GpPeer::RcukitExpedited => gp_rcu(peer, &mut time)?,
        GpPeer::RcukitQsbrSynchronize | GpPeer::RcukitQsbrExpedited => gp_qsbr(peer, &mut time)?,
        GpPeer::CrossbeamEpoch => gp_epoch(&mut time)?,
        #[cfg(feature = "c-peers")]
        GpPeer::UrcuMemb | GpPeer::UrcuQsbr | GpPeer::CkEpoch => gp_c(peer, &mut time)?,
    }
    Ok(samples)
}

/// `time(op)` times `op` repeatedly.
type Timer<'a> = dyn FnMut(&mut dyn FnMut()) + 'a;

/// rcukit's `Rcu`, normal or expedited, with a reader looping `read()`.
fn gp_rcu(peer: GpPeer, time: &mut Timer<'_>) -> Result<()> {
    let stop = StopFlag::new();
    let rcu = Rcu::builder().name("lab-peers-gp").build()?;
    std::thread::scope(|s| -> Result<()> {
        let _release = OnExit(|| stop.stop());
        let (rcu, stop) = (&rcu, &stop);
        let reader = crate::experiments::spawn_scoped(s, "peers-busy", move || {
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
        crate::experiments::join(reader)
    })?;
    Ok(())
}

/// rcukit's `Qsbr`, normal or expedited, with a registered reader announcing quiescent states.
fn gp_qsbr(peer: GpPeer, time: &mut Timer<'_>) -> Result<()> {
    let stop = StopFlag::new();
    let qsbr = Qsbr::builder().name("lab-peers-qsbr-gp").build()?;
    let registered = AtomicBool::new(false);
    std::thread::scope(|s| -> Result<()> {
        let _release = OnExit(|| stop.stop());
        let (qsbr, stop, registered) = (&qsbr, &stop, &registered);
        let reader = crate::experiments::spawn_scoped(s, "peers-busy", move || {
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
        crate::experiments::join(reader)
    })?;
    Ok(())
}

/// crossbeam-epoch: a deferred function's run, flushed until it has run, with a pinned reader.
fn gp_epoch(time: &mut Timer<'_>) -> Result<()> {
    let stop = StopFlag::new();
    let collector = epoch::Collector::new();
    std::thread::scope(|s| -> Result<()> {
        let _release = OnExit(|| stop.stop());
        let (c, stop) = (&collector, &stop);
        let reader = crate::experiments::spawn_scoped(s, "peers-busy", move || {
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
        crate::experiments::join(reader)
    })?;
    Ok(())
}

/// liburcu (memb, qsbr) and ck_epoch through the C shims, with the shim's busy reader.
#[cfg(feature = "c-peers")]
fn gp_c(peer: GpPeer, time: &mut Timer<'_>) -> Result<()> {
    use crate::c_peers::{busy_reader, synchronize, Flavor};
    let flavor = match peer {
        GpPeer::UrcuMemb => Flavor::UrcuMemb,
        GpPeer::UrcuQsbr => Flavor::UrcuQsbr,
        _ => Flavor::CkEpoch,
    };
    let c_stop = std::sync::atomic::AtomicI32::new(0);
    std::thread::scope(|s| -> Result<()> {
        let c_stop = &c_stop;
        let _release = OnExit(|| c_stop.store(1, Relaxed));
        let reader =
            crate::experiments::spawn_scoped(s, "peers-busy", move || busy_reader(flavor, c_stop))?;
        // Let the reader register before the first grace period.
        std::thread::sleep(std::time::Duration::from_millis(5));
        time(&mut || synchronize(flavor));
        c_stop.store(1, Relaxed);
        crate::experiments::join(reader)
    })?;
    Ok(())
}
