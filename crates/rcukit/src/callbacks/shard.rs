#![doc = include_str!("shard.md")]

use super::hand_back::{self, HandBack};
use super::intake::Intake;
use super::local::LocalRetires;
use super::port::ReleasedBy;
use crate::barrier::{self, FenceKind};
use crate::sync::fork::Owner;
use crate::sync::{lock, AtomicU8};
use crossbeam_utils::CachePadded;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::Thread;
use std::time::Instant;

/// How a shard's worker is doing, as producers see it.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The worker is running: nobody needs to wake it.
    Awake = 0,
    /// The worker is parked with callbacks waiting for a grace period it has requested: the
    /// end of that grace period wakes it, and it takes new callbacks then. Producers wake it
    /// only once per 1,024 calls, so a stream of sparse `call`s costs about one wake-up per
    /// grace period, not one per call (the kernel's `call_rcu` wakes nobody).
    WaitingForGp = 1,
    /// The worker is parked with nothing pending: the next callback must wake it.
    Idle = 2,
}

/// A [`Wake`] in an atomic byte (relaxed accesses: the barriers of the handshake order them).
pub(crate) struct WakeState(AtomicU8);

impl WakeState {
    fn new() -> WakeState {
        WakeState(AtomicU8::new(Wake::Awake as u8))
    }

    pub(crate) fn load(&self) -> Wake {
        match self.0.load(Relaxed) {
            0 => Wake::Awake,
            1 => Wake::WaitingForGp,
            _ => Wake::Idle,
        }
    }

    pub(crate) fn store(&self, state: Wake) {
        self.0.store(state as u8, Relaxed);
    }
}

/// Counters and wake-up state written by the shard's worker.
pub(crate) struct WorkerSide {
    /// Callbacks (and their bytes) the worker has taken from the intake.
    pub(crate) taken: AtomicU64,
    pub(crate) taken_bytes: AtomicU64,
    pub(crate) invoked: AtomicU64,
    pub(crate) invoked_bytes: AtomicU64,
    /// Whether producers must wake the worker (see the module docs).
    pub(crate) sleeping: WakeState,
    pub(crate) thread: Mutex<Option<Thread>>,
    /// When the worker last looked for producers' lists left behind.
    last_scan: Mutex<Option<Instant>>,
}

impl WorkerSide {
    fn new() -> WorkerSide {
        WorkerSide {
            taken: AtomicU64::new(0),
            taken_bytes: AtomicU64::new(0),
            invoked: AtomicU64::new(0),
            invoked_bytes: AtomicU64::new(0),
            sleeping: WakeState::new(),
            thread: Mutex::new(None),
            last_scan: Mutex::new(None),
        }
    }

    /// Is it time to look for producers' local lists left behind (at most once per
    /// [`PATIENCE`](hand_back::PATIENCE))? Under loom, always.
    pub(crate) fn scan_due(&self) -> bool {
        if cfg!(rcukit_loom) {
            return true;
        }
        let mut last = lock(&self.last_scan);
        let now = Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < hand_back::PATIENCE) {
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

    /// Count `callbacks` (of `bytes` bytes) taken by the worker (only the worker writes these).
    pub(crate) fn count_taken(&self, callbacks: u64, bytes: u64) {
        if callbacks > 0 {
            bump(&self.taken, callbacks);
            bump(&self.taken_bytes, bytes);
        }
    }

    /// Count callbacks run (by the worker or from ready batches by producers).
    pub(crate) fn count_invoked(&self, callbacks: u64, bytes: u64) {
        if callbacks > 0 {
            self.invoked.fetch_add(callbacks, Relaxed);
            self.invoked_bytes.fetch_add(bytes, Relaxed);
        }
    }
}

/// Add `by` to a counter that only its owner writes (a plain load and store, wrapping).
#[inline]
pub(crate) fn bump(counter: &AtomicU64, by: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(by), Relaxed);
}

/// What one producer thread shares with others for one shard.
pub(crate) struct ProducerShared {
    queued: AtomicU64,
    queued_bytes: AtomicU64,
    /// Callbacks this thread ran from its own list.
    invoked: AtomicU64,
    invoked_bytes: AtomicU64,
    /// Of those, released by a normal and by an expedited grace period.
    released: [AtomicU64; 2],
    pub(crate) local: LocalRetires,
    /// The producer thread, for the repair after `fork()`.
    owner: Owner,
}

impl ProducerShared {
    pub(crate) fn new() -> ProducerShared {
        ProducerShared {
            queued: AtomicU64::new(0),
            queued_bytes: AtomicU64::new(0),
            invoked: AtomicU64::new(0),
            invoked_bytes: AtomicU64::new(0),
            released: [AtomicU64::new(0), AtomicU64::new(0)],
            local: LocalRetires::new(),
            owner: Owner::current(),
        }
    }

    // Counters wrap (never panic) and are only ever compared by difference, which wrapping
    // keeps exact: the library's counters never overflow-check into a half-updated state.
    /// Count one callback queued (owner only; before it is published).
    #[inline]
    pub(crate) fn add(&self, bytes: u64) {
        bump(&self.queued, 1);
        bump(&self.queued_bytes, bytes);
    }

    /// Count `n` callbacks of its own list, released by a grace period of kind `by`, that this
    /// thread takes to drop (owner only).
    #[inline]
    pub(crate) fn add_released(&self, by: ReleasedBy, n: u64) {
        bump(&self.released[by as usize], n);
    }

    /// Count callbacks this thread ran from its own list (owner only).
    #[inline]
    pub(crate) fn add_invoked(&self, invoked: u64, bytes: u64) {
        bump(&self.invoked, invoked);
        bump(&self.invoked_bytes, bytes);
    }
}

/// `a - b` for counters that wrap, where `a` is never truly below `b`; 0 if it looks negative
/// (a counter read out of order, for estimates).
pub(crate) fn difference(a: u64, b: u64) -> u64 {
    let d = a.wrapping_sub(b);
    if d > u64::MAX / 2 {
        0
    } else {
        d
    }
}

/// Counters of every producer that ever queued to a shard.
#[derive(Default)]
pub(crate) struct ProducerRegistry {
    pub(crate) live: Vec<Arc<ProducerShared>>,
    /// Totals of producers whose threads have exited (and of callbacks queued without a
    /// thread-local slot).
    exited_queued: u64,
    exited_bytes: u64,
    exited_invoked: u64,
    exited_invoked_bytes: u64,
    exited_released: [u64; 2],
    /// Callbacks (and their bytes) abandoned by `fork()`: queued before it, never to run in
    /// this process (see [`fork`](crate::docs::internal::domain::fork)).
    abandoned: u64,
    abandoned_bytes: u64,
}

/// The registry's share of a shard's counters (see [`ProducerRegistry::totals`]).
pub(crate) struct ProducerTotals {
    pub(crate) queued: u64,
    pub(crate) queued_bytes: u64,
    /// Run by producers, plus abandoned (which will never run).
    pub(crate) invoked: u64,
    /// Run by producers from their own lists.
    pub(crate) run_by_producers: u64,
    /// Of those, released by a normal and by an expedited grace period.
    pub(crate) released: [u64; 2],
    pub(crate) invoked_bytes: u64,
    pub(crate) abandoned: u64,
}

impl ProducerRegistry {
    /// Add a producer (its thread's first callback for this shard).
    pub(crate) fn register(&mut self) -> Arc<ProducerShared> {
        let producer = Arc::new(ProducerShared::new());
        self.live.push(producer.clone());
        producer
    }

    /// A producer leaves (its thread exits): fold its counters into the totals.
    pub(crate) fn leave(&mut self, p: &Arc<ProducerShared>) {
        self.add_exited(p);
        self.live.retain(|q| !Arc::ptr_eq(q, p));
    }

    /// Count a callback queued without a producer slot (from a thread-local destructor).
    pub(crate) fn add_unregistered(&mut self, bytes: u64) {
        self.exited_queued = self.exited_queued.wrapping_add(1);
        self.exited_bytes = self.exited_bytes.wrapping_add(bytes);
    }

    /// Fold the counters of a producer that leaves into the totals.
    fn add_exited(&mut self, p: &ProducerShared) {
        self.exited_queued = self.exited_queued.wrapping_add(p.queued.load(Relaxed));
        self.exited_bytes = self.exited_bytes.wrapping_add(p.queued_bytes.load(Relaxed));
        self.exited_invoked = self.exited_invoked.wrapping_add(p.invoked.load(Relaxed));
        self.exited_invoked_bytes = self
            .exited_invoked_bytes
            .wrapping_add(p.invoked_bytes.load(Relaxed));
        for (total, n) in self.exited_released.iter_mut().zip(&p.released) {
            *total = total.wrapping_add(n.load(Relaxed));
        }
    }

    /// Sum the counters: what producers ran first (`Acquire`), then what they queued, so that
    /// the queued totals are never below what ran (producers count before they publish).
    pub(crate) fn totals(&self) -> ProducerTotals {
        let mut invoked = self.exited_invoked;
        let mut invoked_bytes = self.exited_invoked_bytes;
        for p in &self.live {
            invoked = invoked.wrapping_add(p.invoked.load(Acquire));
            invoked_bytes = invoked_bytes.wrapping_add(p.invoked_bytes.load(Acquire));
        }
        let mut queued = self.exited_queued;
        let mut queued_bytes = self.exited_bytes;
        for p in &self.live {
            queued = queued.wrapping_add(p.queued.load(Relaxed));
            queued_bytes = queued_bytes.wrapping_add(p.queued_bytes.load(Relaxed));
        }
        let mut released = self.exited_released;
        for p in &self.live {
            for (total, n) in released.iter_mut().zip(&p.released) {
                *total = total.wrapping_add(n.load(Relaxed));
            }
        }
        ProducerTotals {
            queued,
            queued_bytes,
            run_by_producers: invoked,
            released,
            invoked: invoked.wrapping_add(self.abandoned),
            invoked_bytes: invoked_bytes.wrapping_add(self.abandoned_bytes),
            abandoned: self.abandoned,
        }
    }

    /// After `fork()`: forget the producers whose threads are gone (folding their counters),
    /// and empty the lists of the others (their objects are the child's copies of the
    /// parent's: never dropped here).
    pub(crate) fn forget_after_fork(&mut self, fence: FenceKind) {
        let (alive, gone): (Vec<_>, Vec<_>) = std::mem::take(&mut self.live)
            .into_iter()
            .partition(|p| p.owner.is_alive());
        for p in &gone {
            self.add_exited(p);
        }
        for p in &alive {
            std::mem::forget(p.local.take_after_fork(fence));
        }
        self.live = alive;
    }

    /// After `fork()`: count what was pending as abandoned.
    pub(crate) fn abandon(&mut self, callbacks: u64, bytes: u64) {
        self.abandoned = self.abandoned.wrapping_add(callbacks);
        self.abandoned_bytes = self.abandoned_bytes.wrapping_add(bytes);
    }
}

/// One intake and its worker's state.
pub(crate) struct Shard {
    pub(crate) intake: Intake,
    pub(crate) producers: Mutex<ProducerRegistry>,
    pub(crate) worker: CachePadded<WorkerSide>,
    pub(crate) hand_back: CachePadded<HandBack>,
}

impl Shard {
    pub(crate) fn new() -> Shard {
        Shard {
            intake: Intake::new(),
            producers: Mutex::new(ProducerRegistry::default()),
            worker: CachePadded::new(WorkerSide::new()),
            hand_back: CachePadded::new(HandBack::new()),
        }
    }

    /// Wake the worker if it is parked idle, or, when `nudge` (every 1,024 callbacks from one
    /// producer), if it is waiting for a grace period: a flood must not wait a whole grace
    /// period to be seen by the backlog control. The producer's side of the handshake (step 1
    /// of the module docs): call it after publishing an entry.
    #[inline]
    pub(crate) fn wake_if_sleeping(&self, nudge: bool, fence: FenceKind) {
        barrier::light(fence);
        match self.worker.sleeping.load() {
            Wake::Idle => self.wake(),
            Wake::WaitingForGp if nudge => self.wake(),
            _ => {}
        }
    }

    pub(crate) fn wake(&self) {
        self.worker.sleeping.store(Wake::Awake);
        if let Some(thread) = lock(&self.worker.thread).as_ref() {
            thread.unpark();
        }
    }

    /// Callbacks queued on this shard and not yet run (nor abandoned).
    pub(crate) fn pending(&self) -> u64 {
        self.counts().pending
    }

    /// The producers of this shard (for its worker's steals).
    pub(crate) fn producers(&self) -> Vec<Arc<ProducerShared>> {
        lock(&self.producers).live.clone()
    }

    /// After `fork()` (see [`fork`](crate::docs::internal::domain::fork)): everything queued before
    /// the fork is abandoned (the intake's chunks, the worker's list, ready batches, the producers'
    /// lists), the producers whose threads are gone are forgotten, and the counters say so.
    pub(crate) fn after_fork(&self, fence: FenceKind) {
        self.intake.forget_chunks();
        self.hand_back.forget_batches();
        *lock(&self.worker.thread) = None;
        self.worker.sleeping.store(Wake::Awake);
        lock(&self.producers).forget_after_fork(fence);
        let counts = self.counts();
        lock(&self.producers).abandon(counts.pending, counts.pending_bytes);
        let worker = &self.worker;
        worker.taken.store(worker.invoked.load(Relaxed), Relaxed);
        worker
            .taken_bytes
            .store(worker.invoked_bytes.load(Relaxed), Relaxed);
    }

    /// Hold the shard's locks across `fork()`, in one fixed order.
    #[cfg(unix)]
    pub(crate) fn hold_for_fork(&'static self, held: &mut crate::sync::fork::Held) {
        held.hold(&self.producers);
        held.hold(&self.worker.thread);
        held.hold(&self.worker.last_scan);
        self.intake.hold_for_fork(held);
        self.hand_back.hold_for_fork(held);
    }

    pub(crate) fn counts(&self) -> ShardCounts {
        // Read what ran first: producers count before they publish, so the queued totals read
        // afterwards are never below them.
        let invoked = self.worker.invoked.load(Acquire);
        let invoked_bytes = self.worker.invoked_bytes.load(Acquire);
        let totals = lock(&self.producers).totals();
        // Abandoned callbacks will never run: for what is pending they count as done.
        let invoked = invoked.wrapping_add(totals.invoked);
        let invoked_bytes = invoked_bytes.wrapping_add(totals.invoked_bytes);
        ShardCounts {
            run_by_producers: totals.run_by_producers,
            released_by_producers: totals.released,
            queued: totals.queued,
            abandoned: totals.abandoned,
            invoked,
            pending: difference(totals.queued, invoked),
            pending_bytes: difference(totals.queued_bytes, invoked_bytes),
        }
    }
}

pub(crate) struct ShardCounts {
    /// Callbacks producers ran from their own lists.
    pub(crate) run_by_producers: u64,
    /// Of those, released by a normal and by an expedited grace period.
    pub(crate) released_by_producers: [u64; 2],
    pub(crate) queued: u64,
    pub(crate) abandoned: u64,
    pub(crate) invoked: u64,
    pub(crate) pending: u64,
    pub(crate) pending_bytes: u64,
}
