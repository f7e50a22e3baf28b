//! Per-thread producer slots: a thread's state for each domain it queues to.
//!
//! A slot holds the thread's shard, its intake chunk ([`Producer`]) and its shared counters and
//! local list ([`ProducerShared`]). The slots live in a thread-local table, boxed, shared in
//! shape with the reader records ([`per_thread`](crate::per_thread)): the same domain again
//! costs a compare and a load, any other one a hash probe. The interface is [`with_slot`] and
//! nothing else reaches the table.
//!
//! # Lifetime
//!
//! 1. A slot is created on a thread's first callback for a domain, registering a producer on
//!    the thread's shard.
//! 2. While its domain lives, the slot's raw shard pointer is valid: `with_slot` is only ever
//!    called by that domain's `push`, which borrows the domain.
//! 3. When the thread next adds a slot for another domain, slots whose domain is gone (their
//!    shard's last strong reference dropped) are dropped; the rest at thread exit.
//!    Dropping a slot flushes its local list to the shard's worker (if the domain still
//!    lives), seals its chunk and folds its counters into the registry's totals.

use super::callback::Work;
use super::intake::Producer;
use super::producers::ProducerShared;
use super::shard::Shard;
use crate::barrier::FenceKind;
use crate::per_thread::{DomainKey, Entry, PerDomain};
use crate::sync::fork;
use crate::sync::lock;
use std::ptr::NonNull;
use std::sync::{Arc, Weak};

/// A thread's producer state for one domain: its shard, its chunk, its counters.
pub(crate) struct ProducerSlot {
    /// Valid while the domain lives, which is whenever `call()` can reach this slot.
    pub(crate) shard: *const Shard,
    /// For the thread-exit destructor, which may run after the domain is gone.
    shard_weak: Weak<Shard>,
    pub(crate) producer: Producer,
    pub(crate) counters: Arc<ProducerShared>,
    /// The domain's barrier pair (for the local list's lock).
    fence: FenceKind,
    /// The fork generation the slot was last used in (see [`fork`]).
    generation: u64,
}

impl ProducerSlot {
    /// A slot on `shard`, registered as one of its producers.
    pub(crate) fn new(shard: &Arc<Shard>, fence: FenceKind) -> ProducerSlot {
        let counters = lock(&shard.producers).register();
        ProducerSlot {
            shard: Arc::as_ptr(shard),
            shard_weak: Arc::downgrade(shard),
            producer: Producer::new(),
            counters,
            fence,
            generation: fork::generation(),
        }
    }

    /// Has the process forked since this slot was last used? Then call
    /// [`forget_chunk_after_fork`](Self::forget_chunk_after_fork) (after repairing the domain).
    #[inline]
    pub(crate) fn forked(&self) -> bool {
        self.generation != fork::generation()
    }

    /// Forget the chunk this thread was filling: the worker that had it is gone (see
    /// [`fork`]).
    #[cold]
    #[inline(never)]
    pub(crate) fn forget_chunk_after_fork(&mut self) {
        self.producer.abandon();
        self.generation = fork::generation();
    }

    /// Move this thread's local list of retired objects to its intake chunk, in order, so
    /// that the worker runs them. With `wait` false it gives up if the worker is stealing the
    /// list right now (the worker then has it); with `wait` true it waits for the steal.
    pub(crate) fn flush_local(&mut self, shard: &Shard, wait: bool) {
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
            lock(&shard.producers).leave(&self.counters);
        } else {
            self.producer.seal();
        }
    }
}

/// A thread's slot for one domain, as its table holds it (boxed: the table hands out pointers
/// to it).
struct SlotEntry(Box<ProducerSlot>);

impl Entry for SlotEntry {
    type Target = ProducerSlot;

    fn target(&mut self) -> NonNull<ProducerSlot> {
        NonNull::from(&mut *self.0)
    }

    /// Dropping the entry then flushes nothing (the domain is gone), seals the chunk and
    /// leaves.
    fn domain_gone(&self) -> bool {
        self.0.shard_weak.strong_count() == 0
    }
}

thread_local! {
    /// The calling thread's producer slots, one per domain it has queued to (see
    /// [`per_thread`](crate::per_thread)).
    static PRODUCERS: PerDomain<SlotEntry> = const { PerDomain::new() };
}

/// Run `f` on the calling thread's slot for `domain` (created by `create` on first use).
/// `None` if the thread's thread-local storage is already destroyed (a callback queued by
/// another thread-local's destructor).
///
/// # Safety
///
/// * The domain `domain` must be alive for the whole call (its `push` borrows it), so that the
///   slot's shard pointer is valid.
/// * Re-entrancy: `f` must not call `with_slot` again, directly or through user code (running
///   callbacks, dropping retired objects): `f` holds the only reference to the slot, and a
///   nested call could drop or alias it. Do such work after `with_slot` returns.
#[inline]
pub(crate) unsafe fn with_slot<R>(
    domain: u64,
    create: impl FnOnce() -> ProducerSlot,
    f: impl FnOnce(&mut ProducerSlot) -> R,
) -> Option<R> {
    PRODUCERS
        .try_with(|p| {
            let slot = p.get_or_insert(DomainKey::new(domain), || SlotEntry(Box::new(create())));
            // Slots are boxed and owned by this thread's table, which drops them only at thread
            // exit or (when it adds a slot) once their domain is gone.
            // SAFETY: the caller keeps `domain` alive, so `slot` is valid (above), and its
            // no-re-entry promise makes this the only reference to the slot while `f` runs.
            f(unsafe { &mut *slot.as_ptr() })
        })
        .ok()
}
