//! Runs the three parts in turn, each in interleaved rounds, and takes the ratios round by
//! round.

use crate::env::Environment;
use crate::measure::{self, Summary};
use crate::progress::{Progress, Task};
use anyhow::Result;
use serde::Serialize;

use super::grace_period::{measure_gp, GpPeer, GpResult};
use super::read::{measure_read, ReadPeer, ReadResult, ReadState};
use super::retire::{measure_retire, RetirePeer, RetireResult};
use super::shapes::{measure_shape, ShapePeer, ShapeResult, ShapeRun};
use super::{Config, Part, Peers, Report, NAME, UNAVAILABLE};
use crate::experiments::kit::{one_round, rounds_of, with_ratios};
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
    /// liburcu's benchmark shape, per peer and reader count.
    pub shapes: Vec<ShapeResult>,
    /// Peers not in this build.
    pub not_available: Vec<Unavailable>,
    /// Whether the C peers are compiled in.
    pub c_peers: bool,
}

/// Run the experiment.
pub fn run(cfg: &Config, progress: &Progress) -> Result<Report> {
    cfg.validate()?;
    let env = Environment::collect(cfg.quick);
    let has = |part| cfg.parts.contains(&part);
    let steps = cfg.rounds
        * (usize::from(has(Part::Read)) * ReadPeer::all().len() * cfg.read_threads.len()
            + usize::from(has(Part::GracePeriod)) * GpPeer::all().len()
            + usize::from(has(Part::Retire)) * RetirePeer::all().len()
            + usize::from(has(Part::Shapes)) * cfg.shape_peers.len() * cfg.shape_readers.len());
    let task = progress.task(NAME, steps as u64);
    let body = Body {
        read: if has(Part::Read) {
            run_read(cfg, &task)?
        } else {
            Vec::new()
        },
        grace_period: if has(Part::GracePeriod) {
            run_grace_period(cfg, &task)?
        } else {
            Vec::new()
        },
        retire: if has(Part::Retire) {
            run_retire(cfg, &task)?
        } else {
            Vec::new()
        },
        shapes: if has(Part::Shapes) {
            run_shapes(cfg, &task)?
        } else {
            Vec::new()
        },
        not_available: UNAVAILABLE.to_vec(),
        c_peers: cfg!(feature = "c-peers"),
    };
    task.finish();
    Ok(Envelope::new::<Peers>(env, cfg.clone(), body))
}

/// Read-side cost of every read peer at every thread count, in rounds (each thread count's
/// peers interleaved within a round), and the ratios to rcukit-global's.
fn run_read(cfg: &Config, task: &Task) -> Result<Vec<ReadResult>> {
    let peers = ReadPeer::all();
    let state = ReadState::new()?;
    let base = peers.iter().position(|&p| p == ReadPeer::RcukitGlobal);
    let mut read: Vec<ReadResult> = peers
        .iter()
        .map(|&peer| ReadResult {
            peer,
            ns_per_op: Vec::new(),
            rounds: Vec::new(),
            vs_rcukit: Vec::new(),
            vs_rcukit_rounds: Vec::new(),
        })
        .collect();
    // A round measures every thread count, each with every peer in turn.
    let mut values = vec![vec![Vec::new(); peers.len()]; cfg.read_threads.len()];
    for round in 0..cfg.rounds {
        for (ti, &threads) in cfg.read_threads.iter().enumerate() {
            let label = format!("read side × {threads}, round {}/{}", round + 1, cfg.rounds);
            let mut measure = |p| measure_read(&state, p, threads, cfg.read_time);
            one_round(
                task,
                &label,
                &peers,
                round,
                &ReadPeer::id,
                &mut measure,
                &mut values[ti],
            )?;
        }
    }
    drop(state);
    for (ti, &threads) in cfg.read_threads.iter().enumerate() {
        let figures = with_ratios(std::mem::take(&mut values[ti]), base);
        for (r, (rounds, ratios)) in read.iter_mut().zip(figures) {
            r.ns_per_op.push((threads, rounds.median));
            r.vs_rcukit.push((threads, ratios.median_ratio()));
            r.rounds.push((threads, rounds));
            r.vs_rcukit_rounds.push((threads, ratios));
        }
    }
    Ok(read)
}

/// Grace-period latency of every peer, in rounds, and the ratios of the round means to rcukit's
/// expedited one.
fn run_grace_period(cfg: &Config, task: &Task) -> Result<Vec<GpResult>> {
    let peers = GpPeer::all();
    let mut pooled = vec![Vec::new(); peers.len()];
    let means = rounds_of(cfg.rounds, task, "grace period", &peers, GpPeer::id, |p| {
        let samples = measure_gp(cfg, p)?;
        let mean = Summary::of(&samples).mean;
        let at = peers.iter().position(|&q| q == p).unwrap_or(0);
        pooled[at].extend(samples);
        Ok(mean)
    })?;
    let base = peers.iter().position(|&p| p == GpPeer::RcukitExpedited);
    Ok(peers
        .iter()
        .zip(with_ratios(means, base))
        .zip(pooled)
        .map(|((&peer, (rounds, ratios)), samples)| GpResult {
            peer,
            description: peer.describe(),
            latency_us: Summary::of(&samples),
            mean_us_rounds: rounds,
            vs_rcukit_expedited: ratios.median_ratio(),
            vs_rcukit_expedited_rounds: ratios,
        })
        .collect())
}

/// Retire throughput of every peer, in rounds, and the ratios to rcukit's.
fn run_retire(cfg: &Config, task: &Task) -> Result<Vec<RetireResult>> {
    let peers = RetirePeer::all();
    let mut freed = vec![0u64; peers.len()];
    let rates = rounds_of(cfg.rounds, task, "retire", &peers, RetirePeer::id, |p| {
        let (f, elapsed) = measure_retire(cfg.retire_objects, p)?;
        let at = peers.iter().position(|&q| q == p).unwrap_or(0);
        freed[at] += f;
        Ok(measure::per_sec(cfg.retire_objects, elapsed))
    })?;
    let base = peers.iter().position(|&p| p == RetirePeer::Rcukit);
    Ok(peers
        .iter()
        .zip(with_ratios(rates, base))
        .zip(freed)
        .map(|((&peer, (rounds, ratios)), freed)| RetireResult {
            peer,
            retired: cfg.retire_objects * cfg.rounds as u64,
            freed,
            elapsed_ms: cfg.retire_objects as f64 / rounds.median * 1e3,
            objects_per_s: rounds.median,
            objects_per_s_rounds: rounds,
            vs_rcukit: ratios.median_ratio(),
            vs_rcukit_rounds: ratios,
        })
        .collect())
}

/// liburcu's benchmark shape for every peer at every reader count, in rounds (each reader
/// count's peers interleaved within a round), and the ratios to the liburcu flavor's figures
/// of the same round.
fn run_shapes(cfg: &Config, task: &Task) -> Result<Vec<ShapeResult>> {
    let peers = &cfg.shape_peers;
    let mut runs = vec![vec![Vec::new(); peers.len()]; cfg.shape_readers.len()];
    for round in 0..cfg.rounds {
        for (ni, &readers) in cfg.shape_readers.iter().enumerate() {
            let label = format!(
                "{readers} readers + 1 writer, round {}/{}",
                round + 1,
                cfg.rounds
            );
            let mut measure = |p| measure_shape(p, readers, cfg.shape_time);
            let values = &mut runs[ni];
            one_round(
                task,
                &label,
                peers,
                round,
                &ShapePeer::id,
                &mut measure,
                values,
            )?;
        }
    }
    let mut results = Vec::new();
    for (ni, &readers) in cfg.shape_readers.iter().enumerate() {
        let per_peer = &runs[ni];
        let metric = |at: usize, f: fn(&ShapeRun) -> f64| {
            crate::measure::Rounds::of(per_peer[at].iter().map(f).collect())
        };
        for (at, &peer) in peers.iter().enumerate() {
            let base = peer
                .liburcu_baseline()
                .and_then(|b| peers.iter().position(|&q| q == b));
            let vs = |f: fn(&ShapeRun) -> f64| base.map(|b| metric(at, f).ratio_to(&metric(b, f)));
            results.push(ShapeResult {
                peer,
                description: peer.describe(),
                readers,
                reads_per_s: metric(at, |r| r.reads_per_s),
                gps_per_s: metric(at, |r| r.gps_per_s),
                writer_cpu_us_per_gp: metric(at, |r| r.writer_cpu_us_per_gp),
                loop_us: metric(at, |r| r.loop_us),
                gps_vs_liburcu: vs(|r| r.gps_per_s),
                reads_vs_liburcu: vs(|r| r.reads_per_s),
            });
        }
    }
    Ok(results)
}
