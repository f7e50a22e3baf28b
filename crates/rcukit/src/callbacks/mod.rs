#![doc = include_str!("README.md")]

pub(crate) mod callback;
pub(crate) mod hand_back;
pub(crate) mod intake;
pub(crate) mod invoke;
pub(crate) mod local;
pub(crate) mod port;
pub(crate) mod producer;
pub(crate) mod segcblist;
pub(crate) mod shard;
pub(crate) mod worker;

#[cfg(all(test, rcukit_loom))]
mod loom;

use crate::barrier::FenceKind;
use crate::report::Reporter;
use callback::{BarrierCount, Work};
#[cfg(rcukit_loom)]
use shard::ProducerShared;
use shard::Shard;
use std::cell::Cell;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Arc;

/// Settings of the callback machinery (validated by the domain builder). Whether expedited
/// grace periods release callbacks is not here: it is the domain's, asked through the
/// [`port`](crate::docs::internal::callbacks::port) (stored once).
#[derive(Clone, Debug)]
pub(crate) struct CallbackConfig {
    pub(crate) workers: usize,
    pub(crate) backlog_callbacks: u64,
    pub(crate) backlog_bytes: u64,
    /// Objects and bytes a producer retires into its own list between two expedited grace
    /// periods it tries itself (see [`local`](crate::docs::internal::callbacks::local)).
    pub(crate) producer_backlog_callbacks: u64,
    pub(crate) producer_backlog_bytes: u64,
    pub(crate) batch: usize,
    pub(crate) retire_on_producers: bool,
    /// The domain's barrier pair (producers and a worker going idle use it too).
    pub(crate) fence: FenceKind,
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
    pub(crate) run_by_producers: u64,
    pub(crate) abandoned: u64,
    pub(crate) producers_gave_way: u64,
}

/// The callback machinery of one domain.
pub(crate) struct Callbacks {
    pub(crate) config: CallbackConfig,
    shards: Box<[Arc<Shard>]>,
    pub(crate) released_by_normal: AtomicU64,
    pub(crate) released_by_expedited: AtomicU64,
    pub(crate) panics: AtomicU64,
    /// Callbacks run by producer threads from
    /// [`hand_back`](crate::docs::internal::callbacks::hand_back) batches (those they ran from
    /// their own lists are counted in their producer counters).
    pub(crate) run_by_producers: AtomicU64,
    /// Times a producer gave way to a worker far behind it (see `producer`: "Floods").
    pub(crate) producers_gave_way: AtomicU64,
    shutdown: AtomicBool,
    /// The domain is being dropped: workers expedite everything (see `Rcu::drop`).
    draining: AtomicBool,
    domain: u64,
    name: String,
    reporter: Reporter,
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
    pub(crate) fn new(
        config: CallbackConfig,
        domain: u64,
        name: String,
        reporter: Reporter,
    ) -> Callbacks {
        let shards = (0..config.workers)
            .map(|_| Arc::new(Shard::new()))
            .collect();
        Callbacks {
            config,
            shards,
            released_by_normal: AtomicU64::new(0),
            released_by_expedited: AtomicU64::new(0),
            panics: AtomicU64::new(0),
            run_by_producers: AtomicU64::new(0),
            producers_gave_way: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            domain,
            name,
            reporter,
        }
    }

    pub(crate) fn shard(&self, index: usize) -> &Shard {
        &self.shards[index]
    }

    /// Shard `index`, shared (for a closure that outlives the borrow).
    pub(crate) fn shard_arc(&self, index: usize) -> Arc<Shard> {
        Arc::clone(&self.shards[index])
    }

    fn shard_index_for_current_thread(&self) -> usize {
        if self.shards.len() == 1 {
            return 0;
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
        hint % self.shards.len()
    }

    /// Is the calling thread one of this domain's workers?
    #[inline]
    fn on_worker_thread(&self) -> bool {
        WORKER_OF
            .try_with(|w| w.get() == self.domain)
            .unwrap_or(false)
    }

    /// Register a producer on `shard` without a thread-local slot (loom models drive the
    /// owner's side of its local list by hand).
    #[cfg(rcukit_loom)]
    pub(crate) fn register_producer_for_model(shard: &Shard) -> Arc<ProducerShared> {
        crate::sync::lock(&shard.producers).register()
    }

    /// Is the calling thread running callbacks of any domain: a worker, or a producer running
    /// ready drops?
    pub(crate) fn in_any_callback_context() -> bool {
        WORKER_OF.try_with(|w| w.get() != 0).unwrap_or(false) || invoke::running_drops()
    }

    /// Is the calling thread running this domain's callbacks: one of its workers, or a
    /// producer running a ready batch?
    pub(crate) fn in_callback_context(&self) -> bool {
        self.on_worker_thread() || invoke::running_drops_of(self.domain)
    }

    /// Wait until every callback queued before this call has run.
    pub(crate) fn barrier(&self) {
        assert!(
            !self.in_callback_context(),
            "rcukit: barrier() called from a callback of the same domain; the barrier would \
             wait for the very thread that runs it. Queue another callback instead."
        );
        self.start_barrier().wait();
    }

    /// Queue a barrier marker on every shard; the returned count reaches zero once every
    /// callback queued before this call has run.
    pub(crate) fn start_barrier(&self) -> Arc<BarrierCount> {
        let count = BarrierCount::new(self.shards.len() + 1);
        for shard in self.shards.iter() {
            shard.intake.push_single(Work::Barrier(count.clone()));
            shard.wake();
        }
        count.arrive(|m| self.report_waker_panic(m));
        count
    }

    /// Repair after `fork()` (see [`Shard::after_fork`]).
    pub(crate) fn after_fork(&self) {
        for shard in self.shards.iter() {
            shard.after_fork(self.config.fence);
        }
    }

    /// Hold every shard's locks across `fork()`.
    #[cfg(unix)]
    pub(crate) fn hold_for_fork(&'static self, held: &mut crate::sync::fork::Held) {
        for shard in self.shards.iter() {
            let shard: &'static Shard = shard;
            shard.hold_for_fork(held);
        }
    }

    pub(crate) fn stats(&self) -> CallbackStats {
        let mut s = CallbackStats {
            released_by_normal: self.released_by_normal.load(Relaxed),
            released_by_expedited: self.released_by_expedited.load(Relaxed),
            panics: self.panics.load(Relaxed),
            run_by_producers: self.run_by_producers.load(Relaxed),
            producers_gave_way: self.producers_gave_way.load(Relaxed),
            ..CallbackStats::default()
        };
        for shard in self.shards.iter() {
            let c = shard.counts();
            s.pending += c.pending;
            s.pending_bytes = s.pending_bytes.saturating_add(c.pending_bytes);
            s.invoked = s.invoked.wrapping_add(c.invoked);
            s.queued = s.queued.wrapping_add(c.queued);
            s.abandoned = s.abandoned.wrapping_add(c.abandoned);
            s.run_by_producers = s.run_by_producers.wrapping_add(c.run_by_producers);
            let [normal, expedited] = c.released_by_producers;
            s.released_by_normal = s.released_by_normal.wrapping_add(normal);
            s.released_by_expedited = s.released_by_expedited.wrapping_add(expedited);
        }
        s
    }

    /// Callbacks queued and not yet run (nor abandoned).
    pub(crate) fn pending(&self) -> u64 {
        self.shards.iter().map(|s| s.counts().pending).sum()
    }

    /// Callbacks queued so far (a wrapping count, for comparisons).
    pub(crate) fn queued(&self) -> u64 {
        self.shards
            .iter()
            .fold(0u64, |n, s| n.wrapping_add(s.counts().queued))
    }

    /// From now on, workers run expedited grace periods for everything that waits.
    pub(crate) fn start_draining(&self) {
        self.draining.store(true, SeqCst);
        for shard in self.shards.iter() {
            shard.wake();
        }
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Relaxed)
    }

    /// Tell the workers to finish what they hold and exit.
    pub(crate) fn shutdown(&self) {
        self.shutdown.store(true, SeqCst);
        for shard in self.shards.iter() {
            shard.wake();
        }
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutdown.load(SeqCst)
    }
}
