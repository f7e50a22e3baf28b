#![doc = include_str!("owned.md")]

use super::Inner;
use crate::barrier;
use crate::reader::owned::Side;
use crate::reader::{self, Registry};
use std::ptr::NonNull;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::Arc;

/// An owned read-side critical section of an [`Rcu`](crate::Rcu) domain, from
/// [`Rcu::read_owned`](crate::Rcu::read_owned): like a [`Guard`](crate::Guard), but `Send`,
/// `Sync` and `'static`, so it may be held across `.await`, sleep, and be moved to and dropped
/// on another thread.
///
/// Every grace period of the domain that starts after the guard was taken (normal or
/// expedited, waited for, polled through a [`GpCookie`](crate::GpCookie) or ending a callback's
/// wait) waits for it to drop. Containers accept it wherever they accept a `Guard` (see
/// [`ReadSection`](crate::ReadSection)), with the same rule: a reference read under it cannot
/// outlive it.
///
/// ```compile_fail
/// let cell = rcukit::RcuCell::new(1);
/// let value = {
///     let guard = rcukit::Rcu::global().read_owned();
///     cell.load(&guard) // the reference cannot outlive the guard
/// };
/// ```
///
/// It keeps its domain's shared state alive, so it may outlive the [`Rcu`](crate::Rcu) handle
/// (the state is freed when the last owned guard closes); once that handle is dropped there are
/// no more grace periods to hold back.
///
/// # Do not wait while holding one
///
/// A thread or task that waits for a grace period of the guard's domain while it holds the guard
/// waits for itself forever. A `Guard` is tied to its thread, so such waits panic; an owned guard
/// is not, so the wait cannot tell. The grace period reports the stall instead (after the domain's
/// stall timeout, see [`RcuBuilder::stall_timeout`](crate::RcuBuilder::stall_timeout)), naming the
/// owned sections it waits for.
///
/// # Nor leave one to the domain's reclamation
///
/// The same holds for a guard (or a snapshot, which is one) kept inside a value that is
/// retired to, or replaced in a container of, the guard's own domain, when nothing else will
/// drop it: the value is dropped after a grace period, and that grace period waits for the
/// guard inside it. It never ends, and from then on no retired object or callback of the domain
/// is freed or run. Drop such a guard before the value holding it is retired, or keep it in a
/// value reclaimed by another domain.
#[must_use = "the read-side critical section ends when the guard is dropped"]
pub struct OwnedGuard {
    inner: NonNull<Inner>,
    /// The guard's domain is the global one, which is never dropped (no parking).
    immortal: bool,
    /// The phase the section counted its lock under (O1).
    phase: usize,
}

// SAFETY: an owned guard is an index into counters that any thread may update (its drop counts
// on the dropping thread's own record, or the shared residue), plus a pointer to the domain's
// shared state, which is `Sync` and which outlives the guard (parking, or the global domain's
// static lifetime). Nothing in it is tied to the thread that made it.
unsafe impl Send for OwnedGuard {}
// SAFETY: `&OwnedGuard` only reads the domain's id and name, which are immutable.
unsafe impl Sync for OwnedGuard {}

impl OwnedGuard {
    /// O1-O3. `immortal` says that `inner` belongs to a domain that is never dropped.
    #[inline]
    pub(crate) fn enter(inner: &Arc<Inner>, immortal: bool) -> OwnedGuard {
        if !immortal {
            inner.parking.mark_used();
        }
        let phase = inner.core.owned.phase();
        count(inner, Side::Locks, phase);
        barrier::light(inner.core.read_side.fence);
        OwnedGuard {
            inner: NonNull::from(&**inner),
            immortal,
            phase,
        }
    }

    #[inline(always)]
    pub(crate) fn inner(&self) -> &Inner {
        // SAFETY: the domain's shared state outlives the guard: it is the global domain's,
        // which is never dropped, or it stays parked until this guard has closed (see the
        // module docs, "Lifetime").
        unsafe { self.inner.as_ref() }
    }

    /// The identifier of the guard's domain ([`Rcu::id`](crate::Rcu::id)).
    pub fn domain_id(&self) -> u64 {
        self.inner().id()
    }

    /// The name of the guard's domain ([`Rcu::name`](crate::Rcu::name)).
    pub fn domain_name(&self) -> &str {
        &self.inner().name
    }
}

/// O2 or O4 on the calling thread's record, or on the residue when the thread's table is gone.
#[inline(always)]
fn count(inner: &Inner, side: Side, phase: usize) {
    let registry = &inner.core.registry;
    if !reader::with_local_record(inner.key(), registry, |record| {
        record.owned.bump_own(side, phase)
    }) {
        registry.owned_residue.bump_shared(side, phase);
    }
}

impl Drop for OwnedGuard {
    #[inline]
    fn drop(&mut self) {
        let inner = self.inner();
        if self.immortal {
            // The critical section's accesses are ordered before the count by its `Release`
            // store (O4); no fence is needed.
            count(inner, Side::Unlocks, self.phase);
            return;
        }
        // C1-C4 of the module docs.
        let core = &inner.core;
        let read_side = (&core.read_side.epoch, core.read_side.fence);
        let taken = reader::in_section(inner.key(), &core.registry, read_side, |record| {
            record.owned.bump_own(Side::Unlocks, self.phase);
            inner.parking.reap_if_parked(&core.registry)
        });
        if let Some(last) = taken {
            Parking::release(last);
        }
    }
}

/// A domain's shared state waiting for its last owned guard after its handle was dropped
/// (see the module docs, "Lifetime").
pub(crate) struct Parking {
    parked: std::sync::atomic::AtomicPtr<Inner>,
    /// An owned guard of this domain was ever taken (else the handle's drop parks nothing).
    used: std::sync::atomic::AtomicBool,
}

impl Parking {
    pub(crate) fn new() -> Parking {
        Parking {
            parked: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()),
            used: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Has an owned guard of this domain ever been taken?
    pub(crate) fn was_used(&self) -> bool {
        self.used.load(Relaxed)
    }

    #[inline(always)]
    fn mark_used(&self) {
        // Read first: once set, the line stays shared among the readers.
        if !self.used.load(Relaxed) {
            self.used.store(true, Relaxed);
        }
    }

    /// P1-P3, from the handle's drop once the domain's threads are stopped. `inner` is the
    /// handle's reference, which this clones to park it.
    pub(crate) fn park(inner: &Arc<Inner>) {
        // `Relaxed` suffices: every `read_owned` happened before the handle's drop began.
        if !inner.parking.used.load(Relaxed) {
            return;
        }
        let me = Arc::into_raw(inner.clone()).cast_mut();
        inner.parking.parked.store(me, Release);
        inner.core.wait_for_sections(); // P2
        if let Some(last) = inner.parking.reap_if_parked(&inner.core.registry) {
            Parking::release(last);
        }
    }

    /// C3 / P3: take the parked reference if no owned section is open.
    fn reap_if_parked(&self, registry: &Registry) -> Option<NonNull<Inner>> {
        if self.parked.load(Acquire).is_null() || registry.owned_open() != 0 {
            return None;
        }
        NonNull::new(self.parked.swap(std::ptr::null_mut(), AcqRel))
    }

    /// The taker's half of C4: a scan, then the reference goes.
    fn release(last: NonNull<Inner>) {
        // The scan below waits for every closer that may still touch the state (step 2 of the
        // module docs) before the reference is dropped.
        // SAFETY: the parked pointer came from `Arc::into_raw` in `park`, and the swap in
        // `reap_if_parked` handed it to exactly one caller, this one.
        let last = unsafe { Arc::from_raw(last.as_ptr().cast_const()) };
        last.core.wait_for_sections();
        drop(last);
    }
}

impl std::fmt::Debug for OwnedGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedGuard")
            .field("domain", &self.domain_id())
            .field("phase", &self.phase)
            .finish()
    }
}
