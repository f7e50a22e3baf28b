//! Deferred work: `call`, `retire` and `barrier`, released by whichever grace period ends first.
//!
//! # The pieces
//!
//! * [`callback`]: the type-erased unit of work.
//! * [`segcblist`]: the segmented list each worker keeps (pure data structure).
//! * `Shard` (here): a lock-free intake queue and its producer/worker counters. A producer
//!   thread always uses the same shard, so its callbacks stay in FIFO order.
//! * [`worker`]: one thread per shard (the kernel's offloaded "NOCB" kthreads) that moves
//!   callbacks from the intake into its list, stamps them, requests grace periods, advances
//!   and runs what is ready in bounded batches.
//!
//! # Seed 004 in one function
//!
//! A stamp is a full [`GpCookie`](crate::GpCookie): the normal *and* expedited targets.
//! Stamping requests only a normal grace period, but the worker is woken at the end of *every*
//! grace period of either kind and polls both halves, so an expedited grace period that some
//! other thread ran for its own reasons releases the callbacks early. With
//! `expedited_callbacks(false)` the poll looks at the normal half only: the pre-seed-004
//! behaviour, on the same build, for A/B measurements.
//!
//! # Backlog control
//!
//! A worker whose shard holds more than `backlog_callbacks` pending callbacks or
//! `backlog_bytes` pending bytes asks the domain's expedited helper thread for an expedited
//! grace period covering its newest stamp (the kernel's "hurry"), instead of waiting for the
//! slow normal one. `call` itself never waits, so a flood that outruns even back-to-back
//! expedited grace periods grows the backlog without bound: memory is the only limit, as with
//! the kernel's `call_rcu`. Producers that can outrun reclamation should apply their own
//! back-pressure, for example by calling [`Rcu::synchronize`](crate::Rcu::synchronize) or
//! [`Rcu::barrier`](crate::Rcu::barrier) every so many callbacks, or by watching
//! [`Stats::pending_bytes`](crate::Stats::pending_bytes).
//!
//! # Barrier
//!
//! `barrier()` pushes a marker into every shard's intake behind everything queued so far and
//! waits for all markers. A worker *entrains* a marker behind the last non-empty segment of its
//! list, so the marker waits for exactly the callbacks queued before it and for no extra grace
//! period; on an empty list it completes at once. Callbacks queued later, including ones that
//! earlier callbacks queue (chains), are not waited for: loop on `barrier()` while
//! [`Stats::callbacks_pending`](crate::Stats::callbacks_pending) is non-zero to drain chains.

pub mod callback;
pub mod intake;
pub mod segcblist;
pub mod worker;

use callback::{BarrierCount, Callback, Work};
use crossbeam_utils::CachePadded;
use intake::Intake;
use std::cell::Cell;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;

/// Settings of the callback machinery (validated by the domain builder).
#[derive(Clone, Debug)]
pub(crate) struct CallbackConfig {
    pub(crate) workers: usize,
    pub(crate) expedited: bool,
    pub(crate) backlog_callbacks: u64,
    pub(crate) backlog_bytes: u64,
    pub(crate) batch: usize,
}

/// Counters written by producers.
#[derive(Default)]
struct ProducerSide {
    queued: AtomicU64,
    queued_bytes: AtomicU64,
}

/// Counters and wake-up state written by the shard's worker.
#[derive(Default)]
struct WorkerSide {
    invoked: AtomicU64,
    invoked_bytes: AtomicU64,
    /// Set by the worker just before it parks; producers that see it wake the worker.
    sleeping: AtomicBool,
    thread: OnceLock<Thread>,
}

/// One intake queue and its worker's state.
pub(crate) struct Shard {
    intake: Intake<Work>,
    producer: CachePadded<ProducerSide>,
    worker: CachePadded<WorkerSide>,
}

impl Shard {
    fn new() -> Shard {
        Shard {
            intake: Intake::new(),
            producer: CachePadded::new(ProducerSide::default()),
            worker: CachePadded::new(WorkerSide::default()),
        }
    }

    fn push(&self, work: Work) {
        self.intake.push(work);
        // Pairs with the worker's `sleeping.store(true, SeqCst)` followed by its SeqCst check
        // of the queue: one of the two sides sees the other (the queue's push is a SeqCst
        // read-modify-write).
        if self.worker.sleeping.load(SeqCst) {
            self.wake();
        }
    }

    fn wake(&self) {
        self.worker.sleeping.store(false, Relaxed);
        if let Some(thread) = self.worker.thread.get() {
            thread.unpark();
        }
    }

    fn pending(&self) -> (u64, u64) {
        // Read the worker's counters first: they never exceed the producers'.
        let invoked = self.worker.invoked.load(Relaxed);
        let invoked_bytes = self.worker.invoked_bytes.load(Relaxed);
        let queued = self.producer.queued.load(Relaxed);
        let queued_bytes = self.producer.queued_bytes.load(Relaxed);
        (
            queued.saturating_sub(invoked),
            queued_bytes.saturating_sub(invoked_bytes),
        )
    }
}

/// Snapshot of the callback counters, merged into [`Stats`](crate::Stats).
#[derive(Default)]
pub(crate) struct CallbackStats {
    pub(crate) queued: u64,
    pub(crate) invoked: u64,
    pub(crate) pending: u64,
    pub(crate) pending_bytes: u64,
    pub(crate) released_by_normal: u64,
    pub(crate) released_by_expedited: u64,
    pub(crate) panics: u64,
}

/// The callback machinery of one domain.
pub(crate) struct Callbacks {
    pub(crate) config: CallbackConfig,
    shards: Box<[Shard]>,
    released_by_normal: AtomicU64,
    released_by_expedited: AtomicU64,
    panics: AtomicU64,
    shutdown: AtomicBool,
    domain: u64,
}

thread_local! {
    /// Which shard this thread queues to (assigned round-robin on first use; a worker uses its
    /// own shard, so chains of callbacks stay on it).
    static SHARD_HINT: Cell<usize> = const { Cell::new(usize::MAX) };
    /// The domain whose callback worker this thread is (0 for other threads).
    static WORKER_OF: Cell<u64> = const { Cell::new(0) };
}

static NEXT_SHARD_HINT: AtomicUsize = AtomicUsize::new(0);

impl Callbacks {
    pub(crate) fn new(config: CallbackConfig, domain: u64) -> Callbacks {
        let shards = (0..config.workers).map(|_| Shard::new()).collect();
        Callbacks {
            config,
            shards,
            released_by_normal: AtomicU64::new(0),
            released_by_expedited: AtomicU64::new(0),
            panics: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
            domain,
        }
    }

    pub(crate) fn shard(&self, index: usize) -> &Shard {
        &self.shards[index]
    }

    #[inline]
    fn current_shard(&self) -> &Shard {
        if self.shards.len() == 1 {
            return &self.shards[0];
        }
        let hint = SHARD_HINT
            .try_with(|h| {
                let mut v = h.get();
                if v == usize::MAX {
                    v = NEXT_SHARD_HINT.fetch_add(1, Relaxed);
                    h.set(v);
                }
                v
            })
            .unwrap_or(0);
        &self.shards[hint % self.shards.len()]
    }

    /// Queue a callback. Never blocks, never waits for a grace period.
    #[inline]
    pub(crate) fn push(&self, callback: Callback) {
        let shard = self.current_shard();
        // Count before queuing, so `pending` never under-counts what a worker already sees.
        shard.producer.queued.fetch_add(1, Relaxed);
        shard
            .producer
            .queued_bytes
            .fetch_add(callback.bytes() as u64, Relaxed);
        shard.push(Work::Callback(callback));
    }

    /// Is the calling thread one of this domain's callback workers?
    pub(crate) fn on_worker_thread(&self) -> bool {
        WORKER_OF
            .try_with(|w| w.get() == self.domain)
            .unwrap_or(false)
    }

    /// Wait until every callback queued before this call has run.
    pub(crate) fn barrier(&self) {
        assert!(
            !self.on_worker_thread(),
            "rcukit: barrier() called from a callback of the same domain; the barrier would \
             wait for the very worker that runs it. Queue another callback instead."
        );
        self.start_barrier().wait();
    }

    /// Queue a barrier marker on every shard; the returned count reaches zero once every
    /// callback queued before this call has run.
    pub(crate) fn start_barrier(&self) -> Arc<BarrierCount> {
        let count = BarrierCount::new(self.shards.len() + 1);
        for shard in self.shards.iter() {
            shard.push(Work::Barrier(count.clone()));
            shard.wake();
        }
        count.arrive();
        count
    }

    pub(crate) fn stats(&self) -> CallbackStats {
        let mut s = CallbackStats {
            released_by_normal: self.released_by_normal.load(Relaxed),
            released_by_expedited: self.released_by_expedited.load(Relaxed),
            panics: self.panics.load(Relaxed),
            ..CallbackStats::default()
        };
        for shard in self.shards.iter() {
            let (pending, bytes) = shard.pending();
            s.pending += pending;
            s.pending_bytes += bytes;
            s.invoked += shard.worker.invoked.load(Relaxed);
            s.queued += shard.producer.queued.load(Relaxed);
        }
        s
    }

    pub(crate) fn pending(&self) -> u64 {
        self.shards.iter().map(|s| s.pending().0).sum()
    }

    /// Tell the workers to finish what they hold and exit.
    pub(crate) fn shutdown(&self) {
        self.shutdown.store(true, SeqCst);
        for shard in self.shards.iter() {
            shard.wake();
        }
    }

    fn is_shutting_down(&self) -> bool {
        self.shutdown.load(SeqCst)
    }
}
