#![doc = include_str!("owned.md")]

#[cfg(all(test, rcukit_loom))]
mod loom;

use super::Registry;
use crate::report::{Report, Stall};
use crate::sync::{AtomicBool, AtomicU64, Backoff, Brief, Turn};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

/// Lock and unlock counts of owned sections, per phase.
pub(crate) struct OwnedCounts {
    locks: [AtomicU64; 2],
    unlocks: [AtomicU64; 2],
}

/// Which of the two counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Locks,
    Unlocks,
}

impl OwnedCounts {
    pub(crate) fn new() -> OwnedCounts {
        OwnedCounts {
            locks: [AtomicU64::new(0), AtomicU64::new(0)],
            unlocks: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    fn side(&self, side: Side) -> &[AtomicU64; 2] {
        match side {
            Side::Locks => &self.locks,
            Side::Unlocks => &self.unlocks,
        }
    }

    /// O2 or O4 on a record: only the record's own thread calls this, so a load and a store.
    /// Unlocks are `Release` stores (step 1 of the module docs).
    #[inline(always)]
    pub(crate) fn bump_own(&self, side: Side, phase: usize) {
        let counter = &self.side(side)[phase];
        let order = if side == Side::Unlocks {
            Release
        } else {
            Relaxed
        };
        counter.store(counter.load(Relaxed).wrapping_add(1), order);
    }

    /// O2 or O4 on the registry's residue, which many threads share.
    pub(crate) fn bump_shared(&self, side: Side, phase: usize) {
        self.side(side)[phase].fetch_add(1, AcqRel);
    }

    /// One counter's value, for a drain's total.
    pub(crate) fn load(&self, side: Side, phase: usize) -> u64 {
        self.side(side)[phase].load(Acquire)
    }

    /// Add every count of `self` (a record that is leaving the registry) into `residue`.
    pub(crate) fn fold_into(&self, residue: &OwnedCounts) {
        for side in [Side::Locks, Side::Unlocks] {
            for phase in 0..2 {
                let n = self.load(side, phase);
                if n != 0 {
                    residue.side(side)[phase].fetch_add(n, AcqRel);
                }
            }
        }
    }
}

/// A grace period's variant of the owned-section wait: only the loom model's busted variant
/// uses anything but `Drain::Both`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Drain {
    /// W1-W3 of the module docs.
    Both,
    /// Busted: skip W1 (step 3 of the module docs shows what it loses).
    #[cfg(rcukit_loom)]
    FlippedOnly,
}

/// A domain's phase and the turn that serializes the owned part of grace periods.
///
/// The turn ([`Turn`]) is held across a drain, which can wait for a long time; its mutex is
/// held only to take or give it back (as the expedited engine's turn, and for the same reason:
/// a mutex held across the drain could be neither held across `fork()` by the fork handlers nor
/// released in the child).
///
/// `opened` says whether an owned section of this domain was ever opened. Until one is, a
/// grace period has nothing to drain and skips W1-W3: a section sets it (O0) before its lock
/// count (O2), so by step 2 of the module docs a grace period whose heavy barrier came after
/// that section's O3 sees it set.
pub(crate) struct OwnedReaders {
    phase: AtomicU64,
    opened: AtomicBool,
    turn: Turn,
}

impl OwnedReaders {
    pub(crate) fn new() -> OwnedReaders {
        OwnedReaders {
            phase: AtomicU64::new(0),
            opened: AtomicBool::new(false),
            turn: Turn::new(),
        }
    }

    /// O0 and O1: note that owned sections exist, and the phase a new one counts under.
    #[inline(always)]
    pub(crate) fn phase(&self) -> usize {
        // Read first: once set, the line stays shared among the readers. (Not under loom:
        // the two extra steps would use up the models' preemption bound before the
        // interleavings they look for; there every grace period drains.)
        #[cfg(not(rcukit_loom))]
        if !self.opened.load(Relaxed) {
            self.note_opened();
        }
        self.current_phase()
    }

    /// O0's store, once per domain: out of line, so that `phase` stays small enough for the
    /// callers' read paths to inline it.
    #[cold]
    #[inline(never)]
    fn note_opened(&self) {
        self.opened.store(true, Relaxed);
    }

    #[inline(always)]
    fn current_phase(&self) -> usize {
        (self.phase.load(Acquire) & 1) as usize
    }

    /// Has an owned section of this domain ever been opened (after the caller's heavy
    /// barrier)?
    fn ever_opened(&self) -> bool {
        cfg!(rcukit_loom) || self.opened.load(Relaxed)
    }

    /// W1-W3: wait for every owned section that began before the caller's heavy barrier.
    /// `stalled` is called while the wait is slow, with the number of sections it waits for.
    pub(crate) fn wait(&self, registry: &Registry, drain: Drain, stalled: &mut dyn FnMut(u64)) {
        if !self.ever_opened() {
            return;
        }
        self.turn.take_unless(|| false);
        let current = self.current_phase();
        if drain == Drain::Both {
            drain_phase(registry, current ^ 1, stalled);
        }
        self.phase.fetch_add(1, AcqRel);
        drain_phase(registry, current, stalled);
        self.turn.give_back();
    }

    /// W1-W3 waiting no longer than `brief` allows, never sleeping or yielding; false if the turn
    /// is taken (another grace period is draining, or its mutex is held) or a section began before
    /// the caller's heavy barrier is still open. A W3 cut short leaves the phase flipped: harmless,
    /// every drain covers both phases (step 3 of the module docs).
    pub(crate) fn try_wait(&self, registry: &Registry, brief: &mut Brief) -> bool {
        if !self.ever_opened() {
            return true;
        }
        if !self.turn.try_take() {
            return false;
        }
        let current = self.current_phase();
        let drained = brief.wait(|| try_phase_drained(registry, current ^ 1)) && {
            self.phase.fetch_add(1, AcqRel);
            brief.wait(|| try_phase_drained(registry, current))
        };
        self.turn.give_back();
        drained
    }

    /// After `fork()`: a grace period that held the turn did not survive (see
    /// [`fork`](crate::docs::internal::domain::fork)). The phase may have flipped already; every
    /// drain covers both phases, so the next grace period is complete anyway.
    pub(crate) fn after_fork(&self) {
        self.turn.after_fork();
    }

    /// Hold the turn's mutex across `fork()` (see [`fork`](crate::docs::internal::domain::fork)).
    #[cfg(unix)]
    pub(crate) fn hold_for_fork(&'static self, held: &mut crate::sync::fork::Held) {
        self.turn.hold_for_fork(held);
    }
}

/// drain(i) of the module docs.
fn drain_phase(registry: &Registry, phase: usize, stalled: &mut dyn FnMut(u64)) {
    let mut backoff = Backoff::new();
    loop {
        let open = open_in_phase(registry, phase);
        if open == 0 {
            return;
        }
        if backoff.is_sleeping() {
            stalled(open);
        }
        backoff.snooze();
    }
}

/// One look of drain(i) that does not wait for the registry lock: is every section counted
/// under `phase` closed? (False when the lock is held: look again.)
fn try_phase_drained(registry: &Registry, phase: usize) -> bool {
    let Some(unlocks) = registry.try_owned_total(Side::Unlocks, phase) else {
        return false;
    };
    let Some(locks) = registry.try_owned_total(Side::Locks, phase) else {
        return false;
    };
    locks == unlocks
}

/// Sections counted under `phase` and not yet closed: the unlock total first (`Acquire`), then
/// the lock total (step 1 of the module docs).
fn open_in_phase(registry: &Registry, phase: usize) -> u64 {
    let unlocks = registry.owned_total(Side::Unlocks, phase);
    let locks = registry.owned_total(Side::Locks, phase);
    locks.wrapping_sub(unlocks)
}

/// The stall report for a grace period held up by owned sections.
pub(crate) fn stall_report(
    domain: &str,
    waiter: &'static str,
    open: u64,
    waited: std::time::Duration,
    timeout: std::time::Duration,
) -> Report {
    Report::Stall(Stall {
        domain_kind: "domain",
        domain: domain.to_string(),
        waiter,
        reader: format!("{open} owned read-side critical section(s) (OwnedGuard) begun before it"),
        waited,
        timeout,
        advice: "an OwnedGuard (or snapshot) held by the waiting thread or task itself never \
                 ends: drop it before waiting for a grace period of its domain; nor does one \
                 kept inside a value retired to this domain, which is dropped only after this \
                 grace period: drop it before retiring the value",
    })
}
