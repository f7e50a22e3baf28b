//! Deferred work: `call`, `retire` and `barrier`, released by whichever grace period ends first.
//!
//! # The pieces
//!
//! * [`callback`]: the type-erased unit of work.
//! * [`port`]: the grace-period port, the only way callbacks see their domain (stamps, the
//!   release rule, grace-period requests, wake-ups). Read it first.
//! * [`producer`]: a thread that queues callbacks: its slot per domain, and where each new
//!   callback goes.
//! * [`local`]: by default `retire` keeps objects in the retiring thread's own list, stamped in
//!   blocks, and that thread drops them once their grace period has ended (the kernel's
//!   non-offloaded callbacks); the worker steals lists left behind and, for `barrier()`, all
//!   of them.
//! * [`shard`]: a lock-free intake queue ([`intake`]), the registry of the threads that queue to
//!   it, its worker's counters and the handshake that wakes the worker. A producer thread
//!   always uses the same shard, so its closures run in the order it queued them, each after
//!   every object it retired before it. Retired objects are dropped when their own grace
//!   period has ended, possibly before a closure queued ahead of them has run (the kernel's
//!   `kfree_rcu` batches are not ordered against `call_rcu` callbacks either).
//! * [`worker`]: one thread per shard (the kernel's offloaded "NOCB" kthreads) that moves
//!   callbacks from the intake into its [`segcblist`] (the segmented list, a pure data
//!   structure), stamps them, requests grace periods, advances and runs what is ready in
//!   bounded batches.
//! * [`hand_back`]: batches of ready `retire` drops that the worker hands back to the threads
//!   that are retiring, so that memory is freed by the thread that allocated it (for drop-only
//!   callbacks that reach the worker: lists it stole, and a thread's objects flushed ahead of
//!   its closures).
//! * [`invoke`]: running user code under `catch_unwind`, panic reports, the drops producers
//!   run, and the rules on where user code runs.
//!
//! # How a retired object travels
//!
//! From `Rcu::retire(Box<T>)` to `T`'s `Drop`, on the default path (`retire_on_producers`):
//!
//! 1. `Rcu::retire` (`domain`) wraps the box in a [`Callback`](callback) (no allocation: the
//!    data pointer is the box) and hands it to `Callbacks::push` ([`producer`]).
//! 2. `push` finds the thread's slot for the domain (one compare for the domain used last, a
//!    hash probe otherwise: `per_thread`) and adds the callback to the thread's open block
//!    ([`local`]).
//! 3. Every 256 objects (or 64 KiB, or 1 ms) the block is sealed: stamped with a cookie read
//!    through the [`port`] (the domain's `GpPort::cookie`, a snapshot of both sequence
//!    counters, `seq`), and the normal grace period it needs is requested; every
//!    `producer_backlog_*` objects the producer also tries an expedited grace period itself
//!    ([`producer`], through the port to `gp::expedited`).
//! 4. A later `retire` of the same thread finds the oldest block released (the port's
//!    release rule), takes a few of its objects and drops them ([`invoke`]): `Callback::invoke`
//!    runs `T`'s `Drop` under `catch_unwind`.
//!
//! Off that path the object takes the offloaded route: a `retire` from a worker or inside a
//! read-side critical section, a thread that exits or queues a closure with `call` (its list
//! is flushed ahead), a list the worker steals (idle, or for a barrier), or a domain built
//! with `retire_on_producers(false)`. Then the callback is published on the thread's chunk of
//! its shard's [`intake`]; the [`worker`] takes it into its [`segcblist`], stamps and advances
//! it, and either drops it itself or, while producers are retiring, hands it back in a ready
//! batch ([`hand_back`]) that a later `retire` runs ([`invoke`]).
//!
//! # [Seed 004](crate::docs::seeds) in one function
//!
//! A stamp is a full [`GpCookie`](crate::GpCookie): the normal *and* expedited targets.
//! Stamping requests only a normal grace period, but the worker is woken at the end of *every*
//! grace period of either kind and polls both halves, so an expedited grace period that some
//! other thread ran for its own reasons releases the callbacks early. With
//! `expedited_callbacks(false)` the poll looks at the normal half only: the pre-seed-004
//! behaviour, on the same build, for A/B measurements. The one function is the domain's
//! `GpPort::released`; the switch is stored once, in the domain.
//!
//! # Backlog control
//!
//! A worker whose list holds more than `backlog_callbacks` callbacks waiting for a grace
//! period, or more than `backlog_bytes` bytes of them (estimated from the mean size of the
//! shard's pending callbacks), and has nothing ready that only it will run, runs an expedited
//! grace period itself covering its newest stamp (the kernel's "hurry"), instead of waiting
//! for the slow normal one. Callbacks already released do not count: no grace period would
//! release them. Running it in the worker (not on the domain's expedited helper thread) saves a
//! thread hand-off per grace period, which under a flood on a small machine is the difference
//! between keeping the backlog near the threshold and letting it run away. While it waits in
//! that grace period for a long reader the worker takes no new callbacks, but none of its
//! callbacks could be released anyway. `call` itself never waits, so a flood of `call` that
//! outruns even back-to-back expedited grace periods grows the backlog without bound: memory is
//! the only limit, as with the kernel's `call_rcu`. A flood of `retire` is paced by its own
//! drops: the retiring thread keeps its objects in its own list (see [`local`]), tries an
//! expedited grace period itself every `producer_backlog_*` objects or bytes (the helper
//! thread finishes one a reader holds up), and drops ready objects a few at a time, up to
//! twice as fast as it retires. Producers that can outrun reclamation should apply their own
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
pub mod hand_back;
pub mod intake;
pub mod invoke;
pub mod local;
pub mod port;
pub mod producer;
pub mod segcblist;
pub mod shard;
pub mod worker;

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
/// [`port`] (stored once).
#[derive(Clone, Debug)]
pub(crate) struct CallbackConfig {
    pub(crate) workers: usize,
    pub(crate) backlog_callbacks: u64,
    pub(crate) backlog_bytes: u64,
    /// Objects and bytes a producer retires into its own list between two expedited grace
    /// periods it tries itself (see [`local`]).
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
}

/// The callback machinery of one domain.
pub(crate) struct Callbacks {
    pub(crate) config: CallbackConfig,
    shards: Box<[Arc<Shard>]>,
    pub(crate) released_by_normal: AtomicU64,
    pub(crate) released_by_expedited: AtomicU64,
    pub(crate) panics: AtomicU64,
    /// Callbacks run by producer threads from [`hand_back`] batches (those they ran from their own
    /// lists are counted in their producer counters).
    pub(crate) run_by_producers: AtomicU64,
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
        count.arrive();
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
