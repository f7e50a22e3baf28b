//! Per-thread producer slots: a thread's state for each domain it queues to.
//!
//! A slot holds the thread's shard, its intake chunk ([`Producer`]) and its shared counters and
//! local list ([`ProducerShared`]). The slots live in a thread-local table, boxed, with the
//! last one used cached as a raw pointer, so that the common case (one domain, again) costs a
//! compare and a load. The interface is [`with_slot`] and nothing else reaches the table, so
//! that it can later move onto a per-thread helper shared with the reader records.
//!
//! # Lifetime
//!
//! 1. A slot is created on a thread's first callback for a domain, registering a producer on
//!    the thread's shard.
//! 2. While its domain lives, the slot's raw shard pointer is valid: `with_slot` is only ever
//!    called by that domain's `push`, which borrows the domain.
//! 3. When a later lookup for another domain finds a slot whose domain is gone (its shard's
//!    last strong reference dropped), the slot is dropped then; otherwise at thread exit.
//!    Dropping a slot flushes its local list to the shard's worker (if the domain still
//!    lives), seals its chunk and folds its counters into the registry's totals.

use super::callback::Work;
use super::intake::Producer;
use super::producers::ProducerShared;
use super::shard::Shard;
use crate::barrier::FenceKind;
use crate::fork;
use crate::sync::lock;
use std::cell::{Cell, RefCell};
use std::sync::{Arc, Weak};

/// A thread's producer state for one domain: its shard, its chunk, its counters.
pub(crate) struct ProducerSlot {
    domain: u64,
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
    /// A slot of domain `domain` on `shard`, registered as one of its producers.
    pub(crate) fn new(domain: u64, shard: &Arc<Shard>, fence: FenceKind) -> ProducerSlot {
        let counters = lock(&shard.producers).register();
        ProducerSlot {
            domain,
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

impl ProducerSlots {
    /// The slot of `domain`, created with `create` on first use (slow path).
    #[cold]
    fn find_or_create(
        &self,
        domain: u64,
        create: impl FnOnce() -> ProducerSlot,
    ) -> *mut ProducerSlot {
        let mut slots = self.slots.borrow_mut();
        // Forget (and flush) the slots of domains that are gone.
        slots.retain(|slot| slot.shard_weak.strong_count() > 0);
        let ptr: *mut ProducerSlot = match slots.iter_mut().find(|s| s.domain == domain) {
            Some(slot) => &mut **slot,
            None => {
                slots.push(Box::new(create()));
                &mut **slots.last_mut().expect("just pushed")
            }
        };
        self.last_domain.set(domain);
        self.last.set(ptr);
        ptr
    }
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
            let slot = if p.last_domain.get() == domain {
                p.last.get()
            } else {
                p.find_or_create(domain, create)
            };
            // SAFETY: slots are boxed and owned by this thread's table, which drops them only
            // at thread exit or (in `find_or_create`) once their domain is gone; the caller
            // keeps `domain` alive, so `slot` is valid, and the caller's no-re-entry promise
            // makes this the only reference to it while `f` runs.
            f(unsafe { &mut *slot })
        })
        .ok()
}
