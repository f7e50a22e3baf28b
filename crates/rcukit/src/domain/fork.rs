//! `fork()`: what a child process inherits from rcukit, and how its domains come back to life.
//!
//! # The problem
//!
//! `fork()` copies the whole address space but only the calling thread. In the child, every
//! domain still has its state, but not the threads behind it: the normal grace-period thread,
//! the expedited helper and the callback workers are gone, so `synchronize()` and `barrier()`
//! would wait forever. Worse, the copied state describes threads that no longer exist: reader
//! records that say "reading" (a grace period would wait for them forever), a lock or an
//! expedited grace period held by a thread that vanished, a steal of a producer's list half
//! done, callbacks in the worker's private list (on its stack) that nobody can reach.
//!
//! # What rcukit does
//!
//! * **Before the fork** (`pthread_atfork` *prepare* handler, in the forking thread) it takes
//!   every short internal lock of every live domain, in one fixed order, and keeps them across
//!   the fork; the *parent* and *child* handlers release them. So no copied lock is held by a
//!   vanished thread, and no copied structure is half-updated. These locks are never held
//!   while waiting for anything else, so taking them all only waits for short critical
//!   sections. (They are `std` futex mutexes, whose waiters live in the kernel's queues: a
//!   `parking_lot` lock keeps its waiters in a user-space table that the child would inherit,
//!   and an unlock could hand the lock to a thread that does not exist.)
//! * **The child handler** only counts the fork (a generation number) and remembers which
//!   thread survived it; a handler runs in a fragile context, so everything else waits.
//! * **On the child's first use of a domain** (any call that needs its threads: grace-period
//!   waits and requests, `call`/`retire`, `barrier`, `stats`, dropping it) the domain notices
//!   the new generation and repairs itself, once, before anything else of it runs:
//!   - reader records of threads that do not exist in the child are unregistered: grace
//!     periods wait only for the child's readers (the surviving thread's own read-side
//!     critical section, if it forked inside one, is waited for as usual);
//!   - the right to run expedited grace periods, held by a vanished thread, is released; a
//!     grace period a vanished thread had started is finished by the next one to run one
//!     (normal: the new grace-period thread, first thing);
//!   - **callbacks queued before the fork are abandoned in the child**: not run, and their
//!     memory (the child's copy) not freed. They run in the parent, which owns the same
//!     callbacks; running them in the child too would run each closure twice. They are
//!     counted in [`Stats::callbacks_abandoned`](crate::Stats::callbacks_abandoned), not in
//!     `callbacks_pending`, and `barrier()` in the child waits only for callbacks queued in
//!     the child;
//!   - fresh threads are started, and the old thread handles are forgotten (joining a thread
//!     that does not exist would hang).
//!
//! Reads need none of this: `read()` works in the child at once, whatever the state.
//!
//! Two more things are copied mid-way by an unlucky fork, and handled where they live:
//!
//! * **The global domain being built** by another thread: its slot records the builder's
//!   fork generation, and a child takes an interrupted build over instead of waiting for a
//!   builder it does not have (see `domain::global`).
//! * **A thread starting or exiting**: `std`'s thread start and exit take a process-wide
//!   lock that the child would inherit locked; rcukit starts its threads without it (see
//!   [`threads`](crate::threads)), so the repair and new domains can start theirs.
//!
//! # Who is alive
//!
//! Every per-thread object records its owner, and after a fork only the thread that forked
//! and the ones created since are alive (see `sync::fork`, the bottom half of this support:
//! generations, owners and the handlers themselves).
//!
//! # Limits
//!
//! * `RecSeq` and `PerCpuRwLock` have no threads and are not repaired: a reader section or a
//!   write lock held by a vanished thread stays held in the child, as with any lock.
//! * Forking from inside rcukit's own context (a report hook, a callback, a `Drop` that rcukit
//!   runs) is not supported: that thread may be in the middle of the very state being copied.
//! * Like any multithreaded program's child, the child may only rely on what the C library
//!   makes safe after `fork()` (glibc: allocation works); rcukit's repair allocates and
//!   starts threads, on first use, not in the handler.

use super::Inner;
use crate::sync::fork::{self, Owner};
use crate::sync::lock;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
#[cfg(unix)]
use {
    crate::sync::fork::{Held, Stage},
    std::sync::{Arc, Mutex, Weak},
};

/// Every live domain, for the prepare handler. A domain leaves this list at the start of its
/// drop (see `Inner`'s `Drop`), under this lock, so a domain in the list is fully alive for
/// as long as the lock is held.
#[cfg(unix)]
static DOMAINS: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

/// Install the fork handlers with this module's step. Called before a domain is built (before
/// anything it builds takes a lock of its own, such as the read-side pages'): a fork from then
/// on finds every such lock held by the handlers.
#[cfg(unix)]
pub(super) fn install() {
    fork::at_prepare(Stage::Locks, hold_every_domain);
}

/// Add a domain built since [`install`].
#[cfg(unix)]
pub(super) fn register(inner: &Arc<Inner>) {
    lock(&DOMAINS).push(Arc::downgrade(inner));
}

/// Remove a domain that is being dropped.
#[cfg(unix)]
pub(super) fn unregister(inner: *const Inner) {
    lock(&DOMAINS).retain(|w| !std::ptr::eq(w.as_ptr(), inner));
}

/// The prepare handler's step for domains: the list of domains, the read-side pages, then
/// every domain's locks, in one fixed order, kept until after the fork (the list released
/// last).
#[cfg(unix)]
fn hold_every_domain(held: &mut Held) {
    let domains = lock(&DOMAINS);
    crate::gp::read_side::hold_for_fork(held);
    for weak in domains.iter() {
        // SAFETY: a domain in the list is alive while the list is locked (see `DOMAINS`), and
        // stays so until the guards taken here are released with the list's, after the fork.
        let inner: &'static Inner = unsafe { &*weak.as_ptr() };
        inner.hold_for_fork(held);
    }
    held.keep(domains);
}

impl Inner {
    /// Repair the domain if the process has forked since it last ran (see the module docs).
    /// Every entry point that needs the domain's threads, or that scans its per-thread state,
    /// calls this first.
    #[inline]
    pub(crate) fn check_fork(&self) {
        if self.fork_generation.load(Acquire) != fork::generation() {
            self.repair_after_fork();
        }
    }

    #[cold]
    #[inline(never)]
    fn repair_after_fork(&self) {
        let _repair = lock(&self.fork_repair);
        let generation = fork::generation();
        if self.fork_generation.load(Relaxed) == generation {
            return; // another thread did it
        }
        // Every entry point waits here, so nothing of this domain runs in this process but
        // readers and this repair; every internal lock is free (the fork handlers held them
        // across the fork).
        self.exp.after_fork();
        self.core.owned.after_fork();
        self.core
            .registry
            .retain(|record| Owner::is_alive(&record.owner));
        self.callbacks.after_fork();
        self.event.forget_listeners();
        // Those threads do not exist here.
        for thread in std::mem::take(&mut *lock(&self.threads)) {
            thread.forget();
        }
        if let Err(e) = self.start_threads() {
            panic!(
                "rcukit: cannot restart the threads of domain '{}' after fork(): {e}",
                self.name
            );
        }
        self.fork_generation.store(generation, Release);
    }

    /// Hold the domain's internal locks across `fork()`, in one fixed order.
    #[cfg(unix)]
    fn hold_for_fork(&'static self, held: &mut Held) {
        held.hold(&self.fork_repair);
        held.hold(&self.threads);
        self.normal.hold_for_fork(held);
        self.exp.hold_for_fork(held);
        self.event.hold_for_fork(held);
        self.core.owned.hold_for_fork(held);
        self.core.registry.hold_for_fork(held);
        self.callbacks.hold_for_fork(held);
    }
}
