//! Runs the three parts in turn and takes the ratios.

use crate::env::Environment;
use crate::measure::{self, ratio};
use crate::progress::{Progress, Task};
use anyhow::Result;
use serde::Serialize;

use super::grace_period::{measure_gp, GpPeer, GpResult};
use super::read::{measure_read, ReadPeer, ReadResult, ReadState};
use super::retire::{measure_retire, RetirePeer, RetireResult};
use super::{Config, Peers, Report, NAME, UNAVAILABLE};
use crate::experiments::{Envelope, Unavailable};

/// The experiment's figures (inside the [`Envelope`]).
#[derive(Clone, Debug, Serialize)]
pub struct Body {
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
    let steps = ReadPeer::all().len() * cfg.read_threads.len()
        + GpPeer::all().len()
        + RetirePeer::all().len();
    let task = progress.task(NAME, steps as u64);
    let body = Body {
        read: run_read(cfg, &task)?,
        grace_period: run_grace_period(cfg, &task)?,
        retire: run_retire(cfg, &task)?,
        not_available: UNAVAILABLE.to_vec(),
        c_peers: cfg!(feature = "c-peers"),
    };
    task.finish();
    Ok(Envelope::new::<Peers>(env, cfg.clone(), body))
}

/// Read-side cost of every read peer at every thread count (for each thread count, every
/// peer in turn), and the ratios to rcukit's.
fn run_read(cfg: &Config, task: &Task) -> Result<Vec<ReadResult>> {
    let reads = ReadPeer::all();
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
    Ok(read)
}

/// Grace-period latency of every peer, and the ratios to rcukit's expedited one.
fn run_grace_period(cfg: &Config, task: &Task) -> Result<Vec<GpResult>> {
    let gps = GpPeer::all();
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
    Ok(grace_period)
}

/// Retire throughput of every peer, and the ratios to rcukit's.
fn run_retire(cfg: &Config, task: &Task) -> Result<Vec<RetireResult>> {
    let retires = RetirePeer::all();
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
    Ok(retire)
}
