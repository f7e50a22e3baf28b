//! Deferred work: `call`, `retire` and `barrier`, released by whichever grace period ends first.
//!
//! # The pieces
//!
//! * [`callback`]: the type-erased unit of work.
//! * [`segcblist`]: the segmented list each worker keeps (pure data structure).
//! * `Shard` (here): a lock-free intake queue and its producer/worker counters. A producer
//!   thread always uses the same shard, so its closures run in the order it queued them, each
//!   after every object it retired before it. Retired objects are dropped when their own grace
//!   period has ended, possibly before a closure queued ahead of them has run (the kernel's
//!   `kfree_rcu` batches are not ordered against `call_rcu` callbacks either).
//! * [`worker`]: one thread per shard (the kernel's offloaded "NOCB" kthreads) that moves
//!   callbacks from the intake into its list, stamps them, requests grace periods, advances
//!   and runs what is ready in bounded batches.
//! * [`local`]: by default `retire` keeps objects in the retiring thread's own list, stamped in
//!   blocks, and that thread drops them once their grace period has ended (the kernel's
//!   non-offloaded callbacks); the worker steals lists left behind and, for `barrier()`, all
//!   of them.
//! * [`ready`]: batches of ready `retire` drops that the worker hands back to the threads that
//!   are retiring, so that memory is freed by the thread that allocated it (for drop-only
//!   callbacks that reach the worker: lists it stole, and a thread's objects flushed ahead of
//!   its closures).
//!
//! # [Seed 004](crate::docs::seeds) in one function
//!
//! A stamp is a full [`GpCookie`]: the normal *and* expedited targets.
//! Stamping requests only a normal grace period, but the worker is woken at the end of *every*
//! grace period of either kind and polls both halves, so an expedited grace period that some
//! other thread ran for its own reasons releases the callbacks early. With
//! `expedited_callbacks(false)` the poll looks at the normal half only: the pre-seed-004
//! behaviour, on the same build, for A/B measurements.
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
//! drops: the retiring thread keeps its objects in its own list (see [`local`]), asks the
//! domain's helper thread for an expedited grace period once that list holds more than the
//! thresholds, and drops up to four blocks of ready objects each time it seals a block, so it
//! frees four times as fast as it retires whenever grace periods keep up. Producers that can outrun reclamation should apply their own
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
pub mod invoke;
pub mod local;
pub mod ready;
pub mod segcblist;
pub mod worker;

use crate::barrier::{self, FenceKind};
use crate::domain::Inner;
use crate::fork::{self, Owner};
use crate::report::Reporter;
use crate::seq::GpCookie;
use crate::sync::lock;
use callback::{BarrierCount, Callback, Work};
use crossbeam_utils::CachePadded;
use intake::{Intake, Producer};
use invoke::running_drops;
use local::LocalRetires;
use ready::Ready;
use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
use std::sync::Mutex;
use std::sync::{Arc, Weak};
use std::thread::Thread;
use std::time::Instant;

/// Settings of the callback machinery (validated by the domain builder).
#[derive(Clone, Debug)]
pub(crate) struct CallbackConfig {
    pub(crate) workers: usize,
    pub(crate) expedited: bool,
    pub(crate) backlog_callbacks: u64,
    pub(crate) backlog_bytes: u64,
    pub(crate) batch: usize,
    pub(crate) retire_on_producers: bool,
    /// The domain's barrier pair (producers and a worker going idle use it too).
    pub(crate) fence: FenceKind,
}

/// What one producer thread shares with others for one shard: its counters, written only by
/// that thread (plain load and store, no read-modify-write) and read by `stats()`, and its
/// list of retired objects (see [`local`]).
pub(crate) struct ProducerShared {
    queued: AtomicU64,
    queued_bytes: AtomicU64,
    /// Callbacks this thread ran from its own list.
    invoked: AtomicU64,
    invoked_bytes: AtomicU64,
    pub(crate) local: LocalRetires,
    /// The producer thread, for the repair after `fork()`.
    owner: Owner,
}

impl ProducerShared {
    fn new() -> ProducerShared {
        ProducerShared {
            queued: AtomicU64::new(0),
            queued_bytes: AtomicU64::new(0),
            invoked: AtomicU64::new(0),
            invoked_bytes: AtomicU64::new(0),
            local: LocalRetires::new(),
            owner: Owner::current(),
        }
    }

    // Counters wrap (never panic) and are only ever compared by difference, which wrapping
    // keeps exact: the library's counters never overflow-check into a half-updated state.
    #[inline]
    fn add(&self, bytes: u64) {
        bump(&self.queued, 1);
        bump(&self.queued_bytes, bytes);
    }

    fn add_invoked(&self, invoked: u64, bytes: u64) {
        bump(&self.invoked, invoked);
        bump(&self.invoked_bytes, bytes);
    }
}

/// `a - b` for counters that wrap, where `a` is never truly below `b`; 0 if it looks negative
/// (a counter read out of order, for estimates).
fn difference(a: u64, b: u64) -> u64 {
    let d = a.wrapping_sub(b);
    if d > u64::MAX / 2 {
        0
    } else {
        d
    }
}

/// Add `by` to a counter that only its owner writes (a plain load and store, wrapping).
#[inline]
fn bump(counter: &AtomicU64, by: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(by), Relaxed);
}

/// Counters of every producer that ever queued to a shard.
#[derive(Default)]
struct ProducerRegistry {
    live: Vec<Arc<ProducerShared>>,
    /// Totals of producers whose threads have exited.
    exited_queued: u64,
    exited_bytes: u64,
    exited_invoked: u64,
    exited_invoked_bytes: u64,
    /// Callbacks (and their bytes) abandoned by `fork()`: queued before it, never to run in
    /// this process (see [`fork`](crate::fork)).
    abandoned: u64,
    abandoned_bytes: u64,
}

impl ProducerRegistry {
    /// Fold the counters of a producer that leaves into the totals.
    fn add_exited(&mut self, p: &ProducerShared) {
        self.exited_queued = self.exited_queued.wrapping_add(p.queued.load(Relaxed));
        self.exited_bytes = self.exited_bytes.wrapping_add(p.queued_bytes.load(Relaxed));
        self.exited_invoked = self.exited_invoked.wrapping_add(p.invoked.load(Relaxed));
        self.exited_invoked_bytes = self
            .exited_invoked_bytes
            .wrapping_add(p.invoked_bytes.load(Relaxed));
    }
}

/// Counters and wake-up state written by the shard's worker.
#[derive(Default)]
pub(crate) struct WorkerSide {
    /// Callbacks (and their bytes) the worker has taken from the intake.
    pub(crate) taken: AtomicU64,
    pub(crate) taken_bytes: AtomicU64,
    pub(crate) invoked: AtomicU64,
    pub(crate) invoked_bytes: AtomicU64,
    /// [`AWAKE`], or how the worker is parked: [`WAITING_FOR_GP`] (a grace period it asked
    /// for will wake it) or [`IDLE`] (nothing pending: producers must wake it).
    pub(crate) sleeping: AtomicU8,
    pub(crate) thread: Mutex<Option<Thread>>,
    /// When the worker last looked for producers' lists left behind.
    last_scan: Mutex<Option<Instant>>,
}

impl WorkerSide {
    /// Is it time to look for producers' local lists left behind (at most once per
    /// [`PATIENCE`](ready::PATIENCE))? Under loom, always.
    pub(crate) fn scan_due(&self) -> bool {
        if cfg!(rcukit_loom) {
            return true;
        }
        let mut last = lock(&self.last_scan);
        let now = Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < ready::PATIENCE) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// Callbacks and bytes the worker holds (taken, not yet run): what the backlog control
    /// looks at, without touching the producers' counters.
    pub(crate) fn backlog(&self) -> (u64, u64) {
        let taken = self.taken.load(Relaxed);
        let bytes = self.taken_bytes.load(Relaxed);
        (
            difference(taken, self.invoked.load(Relaxed)),
            difference(bytes, self.invoked_bytes.load(Relaxed)),
        )
    }
}

/// The worker is running.
pub(crate) const AWAKE: u8 = 0;
/// The worker is parked with callbacks waiting for a grace period it has requested: the end of
/// that grace period wakes it, and it will take new callbacks then. Producers wake it only
/// once per 1,024 calls, so a stream of sparse `call`s costs about one wake-up per grace
/// period, not one per call (the kernel's `call_rcu` wakes nobody).
pub(crate) const WAITING_FOR_GP: u8 = 1;
/// The worker is parked with nothing pending: the next callback must wake it.
pub(crate) const IDLE: u8 = 2;

/// One intake and its worker's state.
pub(crate) struct Shard {
    pub(crate) intake: Intake,
    producers: Mutex<ProducerRegistry>,
    pub(crate) worker: CachePadded<WorkerSide>,
    pub(crate) ready: CachePadded<Ready>,
}

impl Shard {
    fn new() -> Shard {
        Shard {
            intake: Intake::new(),
            producers: Mutex::new(ProducerRegistry::default()),
            worker: CachePadded::new(WorkerSide::default()),
            ready: CachePadded::new(Ready::new()),
        }
    }

    /// Wake the worker if it is parked idle, or, when `nudge` (every 1,024 callbacks from one
    /// producer), if it is waiting for a grace period: a flood must not wait a whole grace
    /// period to be seen by the backlog control. Called after publishing an entry.
    ///
    /// The same asymmetric pair as readers and grace periods: the producer publishes, issues
    /// the light barrier (a compiler fence under membarrier) and loads the flag; a worker going
    /// idle stores the flag, issues the heavy barrier (membarrier) and looks at the intake once
    /// more. One side always sees the other, and the per-callback cost stays a plain store
    /// (a sequentially consistent store here cost 13% of `retire` under a flood, waiting for
    /// the slot's cache misses). A worker parking while it waits for a grace period issues
    /// only a full fence: a nudge lost to that race is repeated 1,024 callbacks later, and the
    /// end of the grace period wakes the worker anyway.
    #[inline]
    fn wake_if_sleeping(&self, nudge: bool, fence: FenceKind) {
        barrier::light(fence);
        match self.worker.sleeping.load(Relaxed) {
            IDLE => self.wake(),
            WAITING_FOR_GP if nudge => self.wake(),
            _ => {}
        }
    }

    /// After `fork()` (see [`fork`](crate::fork)): everything queued before the fork is
    /// abandoned (the intake's chunks, the worker's list, ready batches, the producers'
    /// lists), the producers whose threads are gone are forgotten, and the counters say so.
    fn after_fork(&self, fence: FenceKind) {
        self.intake.forget_chunks();
        self.ready.forget_batches();
        *lock(&self.worker.thread) = None;
        self.worker.sleeping.store(AWAKE, Relaxed);
        let mut producers = lock(&self.producers);
        let (alive, gone): (Vec<_>, Vec<_>) = std::mem::take(&mut producers.live)
            .into_iter()
            .partition(|p| p.owner.is_alive());
        for p in &gone {
            producers.add_exited(p);
        }
        for p in &alive {
            // The objects are the child's copies of the parent's: never dropped here.
            std::mem::forget(p.local.take_after_fork(fence));
        }
        producers.live = alive;
        drop(producers);
        let counts = self.counts();
        let mut producers = lock(&self.producers);
        producers.abandoned = producers.abandoned.wrapping_add(counts.pending);
        producers.abandoned_bytes = producers.abandoned_bytes.wrapping_add(counts.pending_bytes);
        drop(producers);
        let worker = &self.worker;
        worker.taken.store(worker.invoked.load(Relaxed), Relaxed);
        worker
            .taken_bytes
            .store(worker.invoked_bytes.load(Relaxed), Relaxed);
    }

    /// Hold the shard's locks across `fork()`, in one fixed order.
    fn hold_for_fork(&'static self, held: &mut fork::Held) {
        held.hold(&self.producers);
        held.hold(&self.worker.thread);
        held.hold(&self.worker.last_scan);
        self.intake.hold_for_fork(held);
        self.ready.hold_for_fork(held);
    }

    pub(crate) fn wake(&self) {
        self.worker.sleeping.store(AWAKE, Relaxed);
        if let Some(thread) = lock(&self.worker.thread).as_ref() {
            thread.unpark();
        }
    }

    fn counts(&self) -> ShardCounts {
        // Read what ran first: producers count before they publish, so the queued totals read
        // afterwards are never below them.
        let mut invoked = self.worker.invoked.load(Acquire);
        let mut invoked_bytes = self.worker.invoked_bytes.load(Acquire);
        let producers = lock(&self.producers);
        invoked = invoked.wrapping_add(producers.exited_invoked);
        invoked_bytes = invoked_bytes.wrapping_add(producers.exited_invoked_bytes);
        for p in &producers.live {
            invoked = invoked.wrapping_add(p.invoked.load(Acquire));
            invoked_bytes = invoked_bytes.wrapping_add(p.invoked_bytes.load(Acquire));
        }
        let mut queued = producers.exited_queued;
        let mut queued_bytes = producers.exited_bytes;
        for p in &producers.live {
            queued = queued.wrapping_add(p.queued.load(Relaxed));
            queued_bytes = queued_bytes.wrapping_add(p.queued_bytes.load(Relaxed));
        }
        let abandoned = producers.abandoned;
        // Abandoned callbacks will never run: for what is pending they count as done.
        invoked = invoked.wrapping_add(abandoned);
        invoked_bytes = invoked_bytes.wrapping_add(producers.abandoned_bytes);
        drop(producers);
        ShardCounts {
            queued,
            abandoned,
            invoked,
            pending: difference(queued, invoked),
            pending_bytes: difference(queued_bytes, invoked_bytes),
        }
    }
}

struct ShardCounts {
    queued: u64,
    abandoned: u64,
    invoked: u64,
    pending: u64,
    pending_bytes: u64,
}

/// A thread's producer state for one domain: its shard, its chunk, its counters.
struct ProducerSlot {
    domain: u64,
    /// Valid while the domain lives, which is whenever `call()` can reach this slot.
    shard: *const Shard,
    /// For the thread-exit destructor, which may run after the domain is gone.
    shard_weak: Weak<Shard>,
    producer: Producer,
    counters: Arc<ProducerShared>,
    /// The domain's barrier pair (for the local list's lock).
    fence: FenceKind,
    /// The fork generation the slot was last used in (see [`fork`]).
    generation: u64,
}

impl ProducerSlot {
    /// Move this thread's local list of retired objects to its intake chunk, in order, so
    /// that the worker runs them. With `wait` false it gives up if the worker is stealing the
    /// list right now (the worker then has it); with `wait` true it waits for the steal.
    fn flush_local(&mut self, shard: &Shard, wait: bool) {
        let mut backoff = crate::sync::Backoff::new();
        let mut guard = loop {
            if let Some(guard) = self.counters.local.enter(self.fence) {
                break guard;
            }
            if !wait {
                return;
            }
            backoff.snooze();
        };
        // Published while still holding the list: a worker stealing for a barrier waits for
        // us, then looks at the intake again, so the objects are never out of its sight.
        let mut any = false;
        for callback in guard.with(|list| list.take_all()).into_callbacks() {
            any = true;
            self.producer.push(&shard.intake, Work::Callback(callback));
        }
        drop(guard);
        if any {
            shard.wake_if_sleeping(true, self.fence);
        }
    }
}

impl Drop for ProducerSlot {
    fn drop(&mut self) {
        if let Some(shard) = self.shard_weak.upgrade() {
            // Retired objects still in the local list go to the worker (no steal waits for
            // this thread: it is not running any).
            self.flush_local(&shard, true);
            // The chunk has a share of its own: sealing it is safe even if the domain is gone.
            self.producer.seal();
            let mut producers = lock(&shard.producers);
            producers.add_exited(&self.counters);
            producers.live.retain(|p| !Arc::ptr_eq(p, &self.counters));
        } else {
            self.producer.seal();
        }
    }
}

/// What `push` does once it has let go of the thread-local table.
#[cfg(not(rcukit_loom))]
enum After {
    /// Queued on the intake of this shard (valid while the domain lives).
    Intake(*const Shard),
    /// Kept in the local list; after a seal or a poll that found a ready block, there is
    /// more to do.
    Local(Option<AfterSeal>),
}

/// What a producer does after sealing a block of its local list, or after finding its oldest
/// block ready.
#[cfg(not(rcukit_loom))]
struct AfterSeal {
    shared: Arc<ProducerShared>,
    /// This thread's shard (valid while the domain lives).
    shard: *const Shard,
    /// Give the ready blocks to the worker instead of running them here (the thread is inside
    /// a read-side critical section of the domain).
    hand_off: bool,
    /// The cookie of the block just sealed (none after a poll): its normal grace period is
    /// requested.
    cookie: Option<GpCookie>,
    /// With the list past the backlog thresholds: the newest cookie, to expedite.
    hurry: Option<GpCookie>,
    /// Blocks taken to run (the list is marked `dropping` until they have).
    ready: Vec<local::Block>,
}

/// Adds what a producer ran to its counters and clears its list's `dropping` mark when
/// dropped (also on unwind).
#[cfg(not(rcukit_loom))]
struct FinishDropping<'a> {
    shared: &'a ProducerShared,
    invoked: u64,
    bytes: u64,
}

#[cfg(not(rcukit_loom))]
impl Drop for FinishDropping<'_> {
    fn drop(&mut self) {
        self.shared.add_invoked(self.invoked, self.bytes);
        self.shared.local.finished_dropping();
    }
}

/// The calling thread's producer slots, one per domain it has queued to.
struct ProducerSlots {
    last_domain: Cell<u64>,
    last: Cell<*mut ProducerSlot>,
    /// Boxed so that `last` stays valid while the vector grows.
    #[allow(clippy::vec_box)]
    slots: RefCell<Vec<Box<ProducerSlot>>>,
}

thread_local! {
    static PRODUCERS: ProducerSlots = const {
        ProducerSlots {
            last_domain: Cell::new(0),
            last: Cell::new(std::ptr::null_mut()),
            slots: RefCell::new(Vec::new()),
        }
    };
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
    /// Callbacks run by producer threads from [`ready`] batches.
    run_by_producers: AtomicU64,
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

    /// Queue a callback. Never blocks, never waits for a grace period.
    #[inline]
    pub(crate) fn push(&self, inner: &Inner, callback: Callback) {
        // Loom runs every execution of a model on one OS thread, so a thread-local would carry
        // loom objects from one execution into the next: models drive `Producer` directly.
        #[cfg(rcukit_loom)]
        {
            self.push_without_thread_local(inner, callback);
        }
        #[cfg(not(rcukit_loom))]
        self.push_with_thread_local(inner, callback);
    }

    #[cfg(not(rcukit_loom))]
    #[inline]
    fn push_with_thread_local(&self, inner: &Inner, callback: Callback) {
        let drop_only = callback.is_drop_only();
        // Retired objects stay on this thread (see `local`), except on a worker, whose chains
        // stay on its own list.
        let keep_local = drop_only && self.config.retire_on_producers && !self.on_worker_thread();
        let mut callback = Some(callback);
        let after = PRODUCERS.try_with(|p| {
            let slot = if p.last_domain.get() == self.domain {
                p.last.get()
            } else {
                self.producer_slot(inner, p)
            };
            // Slots are boxed and owned by this thread's table, which drops them only at thread
            // exit or (in `producer_slot`) once their domain is gone. SAFETY: this domain is
            // alive (we are borrowed from it), so `slot` is valid, and no other reference to
            // it exists while we use it (nothing below re-enters the table).
            let slot = unsafe { &mut *slot };
            if slot.generation != fork::generation() {
                Self::slot_after_fork(inner, slot);
            }
            // SAFETY: the shard belongs to this domain, which is alive.
            let shard = unsafe { &*slot.shard };
            let mut callback = callback.take().expect("taken once");
            // Count before publishing, so `pending` never under-counts.
            slot.counters.add(callback.bytes() as u64);
            if keep_local {
                match self.retire_local(inner, slot, callback) {
                    Ok(after) => return After::Local(after),
                    // The worker is stealing the list right now: use the intake this once.
                    Err(back) => callback = back,
                }
            } else if !drop_only && slot.counters.local.len() > 0 {
                // Objects this thread retired earlier are dropped before this closure runs.
                slot.flush_local(shard, false);
            }
            let nudge = slot.producer.push(&shard.intake, Work::Callback(callback));
            shard.wake_if_sleeping(nudge, self.config.fence);
            After::Intake(slot.shard)
        });
        if let Some(callback) = callback {
            self.push_without_thread_local(inner, callback);
        }
        // The slot reference is gone, so callbacks run below may queue more (re-entering the
        // table) safely.
        match after {
            Ok(After::Local(Some(after))) => self.after_seal(inner, after),
            Ok(After::Intake(shard)) => {
                // SAFETY: the shard belongs to this domain, which is alive.
                let shard = unsafe { &*shard };
                if drop_only && self.config.retire_on_producers && shard.ready.queued() > 0 {
                    self.run_ready_batch(inner, shard);
                }
            }
            _ => {}
        }
    }

    /// Add a drop-only callback to this thread's local list (see [`local`]). Returns what to
    /// do once the thread-local table is let go (after a seal), or the callback if the worker
    /// is stealing the list.
    #[cfg(not(rcukit_loom))]
    #[inline]
    fn retire_local(
        &self,
        inner: &Inner,
        slot: &mut ProducerSlot,
        callback: Callback,
    ) -> Result<Option<AfterSeal>, Callback> {
        let local = &slot.counters.local;
        let Some(mut guard) = local.enter(self.config.fence) else {
            return Err(callback);
        };
        local.count_op();
        let cookie = match guard.with(|list| list.push(callback)) {
            local::Next::Nothing => return Ok(None),
            // Read after every callback of the block was queued (with a full fence).
            local::Next::Seal => Some(inner.get_state()),
            local::Next::Poll => {
                let oldest = guard.with(|list| list.oldest_cookie());
                if !oldest.is_some_and(|c| self.expired(inner, &c)) {
                    return Ok(None);
                }
                None
            }
        };
        // A drop that retires more objects only queues them: its thread is running blocks.
        let running = running_drops();
        let mut ready = Vec::new();
        let (backlog, newest) = guard.with(|list| {
            if let Some(cookie) = cookie {
                list.seal(cookie);
            }
            if !running {
                list.take_ready(|c| self.expired(inner, c), &mut ready);
            }
            (list.backlog(), list.newest_cookie())
        });
        if !ready.is_empty() {
            guard.mark_dropping();
        }
        drop(guard);
        // Inside a read-side critical section of this domain, or while unwinding (a drop that
        // panicked then would abort the process), ready blocks go to the worker.
        let hand_off = !ready.is_empty() && (inner.is_reading_here() || std::thread::panicking());
        Ok(Some(AfterSeal {
            shared: slot.counters.clone(),
            shard: slot.shard,
            hand_off,
            cookie,
            hurry: newest.filter(|_| {
                cookie.is_some()
                    && self.config.expedited
                    && (backlog.0 as u64 > self.config.backlog_callbacks
                        || backlog.1 > self.config.backlog_bytes)
            }),
            ready,
        }))
    }

    /// Has `cookie` expired, by the normal or (when enabled) the expedited counter?
    pub(crate) fn expired(&self, inner: &Inner, cookie: &GpCookie) -> bool {
        inner.normal.seq.poll(cookie.normal)
            || (self.config.expedited && inner.exp.seq.poll(cookie.expedited))
    }

    /// After a seal: request the grace periods the list needs, and run the blocks taken.
    #[cfg(not(rcukit_loom))]
    fn after_seal(&self, inner: &Inner, after: AfterSeal) {
        if let Some(cookie) = after.cookie {
            inner.normal.request(cookie.normal);
        }
        if let Some(newest) = after.hurry {
            // Past the backlog thresholds: the kernel's hurry, on the helper thread.
            inner.exp.request(newest.expedited);
        }
        if after.ready.is_empty() {
            return;
        }
        // Until the blocks have run (or been handed to the worker) and been counted, the list
        // stays marked `dropping`, so that a barrier's steal waits for them; also on unwind.
        let mut finish = FinishDropping {
            shared: &after.shared,
            invoked: 0,
            bytes: 0,
        };
        if after.hand_off {
            // SAFETY: the shard belongs to this domain, which is alive (we are borrowed from it).
            let shard = unsafe { &*after.shard };
            for block in after.ready {
                self.count_released(inner, &block);
                shard.ready.publish(block.callbacks);
            }
            shard.wake();
            return;
        }
        let mut spare = Vec::with_capacity(after.ready.len());
        self.run_as_producer(|| {
            for mut block in after.ready {
                self.count_released(inner, &block);
                let (i, b) = self.invoke_all(&mut block.callbacks);
                finish.invoked += i;
                finish.bytes += b;
                spare.push(block.callbacks);
            }
            finish.invoked
        });
        drop(finish);
        let local = &after.shared.local;
        if let Some(mut guard) = local.enter(self.config.fence) {
            guard.with(|list| spare.into_iter().for_each(|v| list.recycle(v)));
        }
    }

    /// Count `block` (whose cookie has expired) as released by the grace period that did it.
    pub(crate) fn count_released(&self, inner: &Inner, block: &local::Block) {
        let n = block.callbacks.len() as u64;
        if inner.normal.seq.poll(block.cookie.normal) {
            self.released_by_normal.fetch_add(n, Relaxed);
        } else {
            self.released_by_expedited.fetch_add(n, Relaxed);
        }
    }

    /// Is the calling thread one of this domain's workers?
    fn on_worker_thread(&self) -> bool {
        WORKER_OF
            .try_with(|w| w.get() == self.domain)
            .unwrap_or(false)
    }

    /// Register a producer on `shard` without a thread-local slot (loom models drive the
    /// owner's side of its local list by hand).
    #[cfg(rcukit_loom)]
    pub(crate) fn register_producer_for_model(shard: &Shard) -> Arc<ProducerShared> {
        let producer = Arc::new(ProducerShared::new());
        lock(&shard.producers).live.push(producer.clone());
        producer
    }

    /// The producers of `shard` (for its worker's steals).
    pub(crate) fn producers_of(shard: &Shard) -> Vec<Arc<ProducerShared>> {
        lock(&shard.producers).live.clone()
    }

    /// Run one ready batch of drop-only callbacks on this producer thread (see [`ready`]),
    /// unless this thread is already running one.
    #[cold]
    #[inline(never)]
    fn run_ready_batch(&self, inner: &Inner, shard: &Shard) {
        if running_drops() || inner.is_reading_here() || std::thread::panicking() {
            return;
        }
        let Some(batch) = shard.ready.take() else {
            return;
        };
        // Counted as running until `finished`, also on unwind, so a barrier waits for it.
        let mut batch = ready::Taken::new(&shard.ready, batch);
        self.run_as_producer(|| self.run_batch(shard, batch.callbacks()));
    }

    /// Run every callback of `batch` (emptying it), each under `catch_unwind`, and add them to
    /// the shard's invoked counters. Returns how many ran.
    pub(crate) fn run_batch(&self, shard: &Shard, batch: &mut Vec<Callback>) -> u64 {
        let (invoked, bytes) = self.invoke_all(batch);
        shard.worker.invoked.fetch_add(invoked, Relaxed);
        shard.worker.invoked_bytes.fetch_add(bytes, Relaxed);
        invoked
    }

    /// The first use of a slot after `fork()`: repair the domain, then forget the chunk this
    /// thread was filling (the worker that had it is gone; see [`fork`]).
    #[cfg(not(rcukit_loom))]
    #[cold]
    #[inline(never)]
    fn slot_after_fork(inner: &Inner, slot: &mut ProducerSlot) {
        inner.check_fork();
        slot.producer.abandon();
        slot.generation = fork::generation();
    }

    /// The calling thread's producer slot for this domain, created on first use.
    #[cfg(not(rcukit_loom))]
    #[cold]
    fn producer_slot(&self, inner: &Inner, p: &ProducerSlots) -> *mut ProducerSlot {
        inner.check_fork();
        let mut slots = p.slots.borrow_mut();
        // Forget (and seal) the slots of domains that are gone.
        slots.retain(|slot| slot.shard_weak.strong_count() > 0);
        let ptr: *mut ProducerSlot = match slots.iter_mut().find(|s| s.domain == self.domain) {
            Some(slot) => &mut **slot,
            None => {
                let shard = &self.shards[self.shard_index_for_current_thread()];
                let counters = Arc::new(ProducerShared::new());
                lock(&shard.producers).live.push(counters.clone());
                slots.push(Box::new(ProducerSlot {
                    domain: self.domain,
                    shard: Arc::as_ptr(shard),
                    shard_weak: Arc::downgrade(shard),
                    producer: Producer::new(),
                    counters,
                    fence: self.config.fence,
                    generation: fork::generation(),
                }));
                &mut **slots.last_mut().expect("just pushed")
            }
        };
        p.last_domain.set(self.domain);
        p.last.set(ptr);
        ptr
    }

    /// Queue from a thread whose thread-local storage is already destroyed (a callback queued
    /// by another thread-local's destructor): a chunk of its own.
    #[cold]
    fn push_without_thread_local(&self, inner: &Inner, callback: Callback) {
        inner.check_fork();
        let shard = &self.shards[0];
        {
            let mut producers = lock(&shard.producers);
            producers.exited_queued = producers.exited_queued.wrapping_add(1);
            producers.exited_bytes = producers.exited_bytes.wrapping_add(callback.bytes() as u64);
        }
        shard.intake.push_single(Work::Callback(callback));
        shard.wake_if_sleeping(true, self.config.fence);
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
    pub(crate) fn hold_for_fork(&'static self, held: &mut fork::Held) {
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
