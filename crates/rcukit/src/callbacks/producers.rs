//! The producer registry: what every thread that queues to a shard shares with the others.
//!
//! Each producer thread has, per shard it queues to, a [`ProducerShared`]: its counters (written
//! only by that thread, with a plain load and store, and read by `stats()`) and its local list
//! of retired objects (see [`local`](super::local)). The shard's [`ProducerRegistry`] lists
//! the live ones, for the worker's steals and for the statistics, and keeps the totals of the
//! producers that have left. The thread's own side (its slot, its intake chunk) is in
//! [`slots`](super::slots).

use super::local::LocalRetires;
use super::port::ReleasedBy;
use super::shard::bump;
use crate::barrier::FenceKind;
use crate::sync::fork::Owner;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::Arc;

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
    /// this process (see [`fork`](crate::domain::fork)).
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
