//! Read-side cost: the read peers, the data they read, and the measurement.

use crate::experiments::{OnExit, StartGate};
use crate::measure::Rounds;
use anyhow::Result;
use arc_swap::ArcSwap;
use crossbeam_epoch as epoch;
use rcukit::{PerCpuRwLock, Qsbr, QsbrThread, Rcu, RcuCell, RecSeq};
use seize::Guard as _;
use serde::Serialize;
use std::hint::black_box;
use std::sync::atomic::AtomicPtr;
use std::sync::atomic::Ordering::Acquire;
use std::time::{Duration, Instant};

/// Peers measured for read-side cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadPeer {
    /// A plain `Acquire` load: the floor.
    PlainLoad,
    /// `Rcu::global().read()`, the lookup of the global domain included in every section.
    RcukitGlobal,
    /// `read()` on a domain built with `Rcu::builder()`.
    RcukitDomain,
    /// `RcuCell::load` under a guard of the cell's (global) domain.
    RcukitRcucell,
    /// `Rcu::global().read_owned()` (an owned, `Send + 'static` section) and `RcuCell::load`.
    RcukitOwned,
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
    /// `ArcSwap::load_full()`: an owned `Arc` of the value (the owned read arc-swap offers).
    ArcSwapFull,
    /// `seize::Collector::enter()` and `Guard::protect`.
    Seize,
    /// `seize::Collector::enter_owned()` (a `Send` guard) and `Guard::protect`.
    SeizeOwned,
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
            ReadPeer::RcukitOwned,
            ReadPeer::RcukitQsbr,
            ReadPeer::RcukitRecseq,
            ReadPeer::RcukitPercpuRwlock,
            ReadPeer::CrossbeamEpoch,
            ReadPeer::ArcSwap,
            ReadPeer::ArcSwapFull,
            ReadPeer::Seize,
            ReadPeer::SeizeOwned,
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
            ReadPeer::RcukitOwned => "rcukit-owned",
            ReadPeer::RcukitQsbr => "rcukit-qsbr",
            ReadPeer::RcukitRecseq => "rcukit-recseq",
            ReadPeer::RcukitPercpuRwlock => "rcukit-percpu-rwlock",
            ReadPeer::CrossbeamEpoch => "crossbeam-epoch",
            ReadPeer::ArcSwap => "arc-swap",
            ReadPeer::ArcSwapFull => "arc-swap-full",
            ReadPeer::Seize => "seize",
            ReadPeer::SeizeOwned => "seize-owned",
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
pub(super) const QS_EVERY: u64 = 1024;

/// A reader thread's own state for the peers that need one.
pub(super) struct ReadLocal<'a> {
    /// The thread's registration with the QSBR domain (for `rcukit-qsbr` only).
    qsbr: Option<QsbrThread<'a>>,
}

/// The shared data every read peer reads: one `u64` behind each library's pointer type.
pub(super) struct ReadState {
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
    pub(super) fn new() -> Result<ReadState> {
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
    pub(super) fn local(&self, peer: ReadPeer) -> ReadLocal<'_> {
        ReadLocal {
            qsbr: (peer == ReadPeer::RcukitQsbr).then(|| self.qsbr.register()),
        }
    }

    /// The `rcukit-qsbr` loop: a plain load per section, a quiescent state every
    /// [`QS_EVERY`] sections.
    #[inline(always)]
    fn qsbr_chunk(&self, iters: u64, local: &mut ReadLocal<'_>) -> u64 {
        let mut sum = 0u64;
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
        sum
    }

    /// The C peers' loops, run in C (liburcu-qsbr with its quiescent state every 1024
    /// sections).
    #[cfg(feature = "c-peers")]
    fn c_chunk(&self, peer: ReadPeer, iters: u64) -> u64 {
        use crate::c_peers::{read_loop, Flavor};
        match peer {
            ReadPeer::UrcuMemb => read_loop(Flavor::UrcuMemb, &self.c_target, iters, 0),
            ReadPeer::UrcuQsbr => read_loop(Flavor::UrcuQsbr, &self.c_target, iters, 1024),
            _ => read_loop(Flavor::CkEpoch, &self.c_target, iters, 0),
        }
    }

    /// The owned reads: a section that may move threads, per peer.
    #[inline(always)]
    fn owned_chunk(&self, peer: ReadPeer, iters: u64) -> u64 {
        let mut sum = 0u64;
        match peer {
            ReadPeer::RcukitOwned => {
                let (rcu, cell) = (Rcu::global(), &self.cell);
                for _ in 0..iters {
                    let g = rcu.read_owned();
                    sum += *black_box(cell).load(&g);
                }
            }
            ReadPeer::ArcSwapFull => {
                for _ in 0..iters {
                    sum += *black_box(&self.arc).load_full();
                }
            }
            _ => {
                for _ in 0..iters {
                    let g = self.seize.enter_owned();
                    let p = g.protect(black_box(&self.seize_ptr), Acquire);
                    // SAFETY: never retired during the run; `g` protects it.
                    sum += unsafe { *p };
                }
            }
        }
        sum
    }

    /// `iters` read-side sections of `peer`; a tight, monomorphic loop per peer.
    pub(super) fn chunk(&self, peer: ReadPeer, iters: u64, local: &mut ReadLocal<'_>) -> u64 {
        match peer {
            ReadPeer::PlainLoad => {
                let mut sum = 0u64;
                for _ in 0..iters {
                    // SAFETY: the pointee lives as long as `self` and is never written.
                    sum += unsafe { *black_box(&self.plain).load(Acquire) };
                }
                sum
            }
            ReadPeer::RcukitQsbr => self.qsbr_chunk(iters, local),
            ReadPeer::RcukitOwned | ReadPeer::ArcSwapFull | ReadPeer::SeizeOwned => {
                self.owned_chunk(peer, iters)
            }
            ReadPeer::RcukitGlobal
            | ReadPeer::RcukitDomain
            | ReadPeer::RcukitRcucell
            | ReadPeer::RcukitRecseq
            | ReadPeer::RcukitPercpuRwlock => self.rcukit_chunk(peer, iters),
            #[cfg(feature = "c-peers")]
            ReadPeer::UrcuMemb | ReadPeer::UrcuQsbr | ReadPeer::CkEpoch => {
                self.c_chunk(peer, iters)
            }
            _ => self.peer_chunk(peer, iters),
        }
    }

    /// [`chunk`](Self::chunk) for rcukit's guards of a domain, its cell, and its locks.
    fn rcukit_chunk(&self, peer: ReadPeer, iters: u64) -> u64 {
        let mut sum = 0u64;
        match peer {
            ReadPeer::RcukitGlobal => {
                for _ in 0..iters {
                    // As the README writes it: the global domain looked up in every section.
                    let _g = Rcu::global().read();
                    // SAFETY: the pointee lives as long as `self`, is never written, and the
                    // pointer is never replaced during the run.
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
            _ => unreachable!("not an rcukit peer with guards: {peer:?}"),
        }
        sum
    }

    /// [`chunk`](Self::chunk) for the peers outside rcukit: crossbeam-epoch, arc-swap, seize
    /// and the two locks.
    fn peer_chunk(&self, peer: ReadPeer, iters: u64) -> u64 {
        let mut sum = 0u64;
        match peer {
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
            _ => unreachable!("not a peer outside rcukit: {peer:?}"),
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
    /// (threads, ns per read-side section per thread: the median of the rounds).
    pub ns_per_op: Vec<(usize, f64)>,
    /// (threads, ns per section in every round, with the median and the spread).
    pub rounds: Vec<(usize, Rounds)>,
    /// (threads, median over the rounds of ns / rcukit-global's ns in the same round).
    pub vs_rcukit: Vec<(usize, Option<f64>)>,
    /// (threads, that ratio in every round, with the median and the spread).
    pub vs_rcukit_rounds: Vec<(usize, Rounds)>,
}

pub(super) fn measure_read(
    state: &ReadState,
    peer: ReadPeer,
    threads: usize,
    time: Duration,
) -> Result<f64> {
    // Foreign loops register the thread per call: give them bigger chunks.
    let chunk: u64 = match peer.id() {
        "liburcu-memb" | "liburcu-qsbr" | "ck-epoch" => 1 << 20,
        _ => 1 << 16,
    };
    let barrier = StartGate::new(threads);
    let per_thread = std::thread::scope(|s| -> Result<Vec<f64>> {
        let _release = OnExit(|| barrier.call_off());
        let mut handles = Vec::new();
        for t in 0..threads {
            let barrier = &barrier;
            handles.push(crate::experiments::spawn_scoped(
                s,
                &format!("peers-r{t}"),
                move || {
                    let mut local = state.local(peer);
                    black_box(state.chunk(peer, chunk / 16, &mut local)); // warm up, register
                    if !barrier.wait() {
                        return f64::NAN; // called off: the scope's result is an error
                    }
                    let start = Instant::now();
                    let mut ops = 0u64;
                    let mut sum = 0u64;
                    while start.elapsed() < time {
                        sum = sum.wrapping_add(state.chunk(peer, chunk, &mut local));
                        ops += chunk;
                    }
                    black_box(sum);
                    start.elapsed().as_nanos() as f64 / ops as f64
                },
            )?);
        }
        handles.into_iter().map(crate::experiments::join).collect()
    })?;
    Ok(per_thread.iter().sum::<f64>() / per_thread.len() as f64)
}
