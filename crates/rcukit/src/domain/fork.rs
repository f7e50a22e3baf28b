#![doc = include_str!("fork.md")]

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
        let mut reset_in = lock(&self.fork_repair);
        let generation = fork::generation();
        if self.fork_generation.load(Relaxed) == generation {
            return; // another thread did it
        }
        // Every entry point waits here, so nothing of this domain runs in this process but
        // readers and this repair; every internal lock is free (the fork handlers held them
        // across the fork). The state is reset once per fork: a repair that could not start
        // every thread leaves those it started running (with the state they were started on),
        // and the next one starts only the others.
        if *reset_in != generation {
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
            *reset_in = generation;
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
