//! Retire throughput, end to end: the peers and the measurement.

use crate::measure::Rounds;
use anyhow::Result;
use crossbeam_epoch as epoch;
use rcukit::Rcu;
use serde::Serialize;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

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
    /// Objects queued, over all rounds.
    pub retired: u64,
    /// Objects dropped by the end of their round, over all rounds (must equal `retired`).
    pub freed: u64,
    /// Time from the first retire until the last drop, ms: the median round.
    pub elapsed_ms: f64,
    /// retired / elapsed: the median of the rounds.
    pub objects_per_s: f64,
    /// objects/s in every round, with the median and the spread.
    pub objects_per_s_rounds: Rounds,
    /// Median over the rounds of objects/s / rcukit's objects/s in the same round.
    pub vs_rcukit: Option<f64>,
    /// That ratio in every round, with the median and the spread.
    pub vs_rcukit_rounds: Rounds,
}

/// Drops of [`Obj`]s, over the whole process (the peers run one after another).
static FREED: AtomicU64 = AtomicU64::new(0);

/// A retired object of 56 bytes that counts its drop, like the C peers' object (a 16-byte list
/// entry and 40 bytes of payload, so every peer asks `malloc` for 56 bytes). It counts into a
/// static: an `Arc` counter per object would add two atomic read-modify-writes per object to
/// the Rust peers that the C peers do not pay.
pub(super) struct Obj {
    _payload: [u64; 7],
}

impl Obj {
    pub(super) fn new(i: u64) -> Obj {
        Obj { _payload: [i; 7] }
    }
}

impl Drop for Obj {
    fn drop(&mut self) {
        FREED.fetch_add(1, Relaxed);
    }
}

/// Retire `n` objects into a domain of its own and wait until every one is dropped. The domain
/// is started before the clock and stopped after it: starting and stopping a domain's threads
/// is not retiring (crossbeam's and seize's collectors have no threads; ck's and liburcu's
/// state is the process's).
fn retire_rcukit(n: u64) -> Result<Duration> {
    let rcu = Rcu::builder().name("lab-peers-retire").build()?;
    let start = Instant::now();
    for i in 0..n {
        rcu.retire(Box::new(Obj::new(i)));
    }
    while rcu.stats().callbacks_pending > 0 {
        rcu.barrier();
    }
    let elapsed = start.elapsed();
    drop(rcu);
    Ok(elapsed)
}

pub(super) fn measure_retire(n: u64, peer: RetirePeer) -> Result<(u64, Duration)> {
    let freed_before = FREED.load(Relaxed);
    let freed = || FREED.load(Relaxed) - freed_before;
    let start = Instant::now();
    match peer {
        RetirePeer::Rcukit => {
            let elapsed = retire_rcukit(n)?;
            return Ok((freed(), elapsed));
        }
        RetirePeer::CrossbeamEpoch => {
            let collector = epoch::Collector::new();
            let h = collector.register();
            for i in 0..n {
                let g = h.pin();
                let p = epoch::Owned::new(Obj::new(i)).into_shared(&g);
                // SAFETY: `p` was never shared with anyone; destroying it after the epoch
                // advances is trivially safe.
                unsafe { g.defer_destroy(p) };
            }
            let deadline = Instant::now() + Duration::from_secs(30);
            while freed() < n && Instant::now() < deadline {
                h.pin().flush();
            }
            drop(h);
            drop(collector); // frees whatever the deadline left
        }
        RetirePeer::Seize => {
            let collector = seize::Collector::new();
            for i in 0..n {
                let p = Box::into_raw(Box::new(Obj::new(i)));
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
            return Ok((f, start.elapsed()));
        }
    }
    Ok((freed(), start.elapsed()))
}
