//! The counting protocol of owned read-side critical sections: the readers' counters in every
//! reader record, the domain's phase, and the drain every grace period runs. The guard that
//! counts (`OwnedGuard`, the user-space image of the kernel's SRCU) is the domain's (see
//! `domain::owned`); this is what grace periods and reader records need of it.
//!
//! A [`Guard`](crate::Guard) is cheap because its whole state is one word in its thread's own
//! reader record: grace periods learn "this thread reads" by looking at that word. A section
//! that may move to another thread cannot live in one thread's word, so owned sections are
//! *counted* instead: the thread that opens one adds one to a *lock* count, the thread that
//! closes it (possibly another) adds one to an *unlock* count, and a grace period waits until
//! the two totals agree.
//!
//! # The counters
//!
//! Each reader record carries, next to its `ctr` word, two pairs of counters indexed by a
//! *phase* bit: `locks[0..2]` and `unlocks[0..2]`. Only the record's own thread writes them, so
//! an increment is a load and a store, never a read-modify-write. Records that unregister (their
//! thread exited) add their counts into the registry's *residue* counters, under the registry
//! lock, and a section opened or closed on a thread whose thread-local storage is already gone
//! counts straight into the residue with an atomic add. The domain holds the current phase.
//!
//! ```text
//! O1  p = phase.load(Acquire) & 1
//! O2  record.locks[p] += 1                     (the opening thread's record)
//! O3  light barrier (as R3 of a Guard)
//!     ... the critical section, which may sleep and move threads ...
//! O4  record'.unlocks[p] += 1, a Release store  (the closing thread's record; p kept in the guard)
//! ```
//!
//! A grace period, after its heavy barrier G1 and its scan of the guards' words (see the
//! [parent module](super)), runs holding the domain's owned-scan turn:
//!
//! ```text
//! W1  drain(phase ^ 1)      (sections that loaded the phase before the previous flip)
//! W2  phase += 1
//! W3  drain(the old phase)
//!
//! drain(i): repeat { U = total of unlocks[i] (Acquire loads); L = total of locks[i] } until U == L
//! ```
//!
//! Each total is taken under the registry lock, so that a record folding its counts into the
//! residue is counted once, either in the record or in the residue.
//!
//! # Why it is correct
//!
//! The claim is the same as for guards: when W3 ends, every owned section whose barrier O3 came
//! before G1 has ended, and its accesses happen-before the rest of the grace period.
//!
//! 1. **Counted unlocks have counted locks.** A section's O2 happens-before its O4: program
//!    order on one thread, or, when the guard moved, the synchronization that moved it (a
//!    `Send` transfer always synchronizes). A drain reads U first with `Acquire` loads; reading
//!    an O4 makes its O2 happen-before the later loads of L, which therefore count that O2
//!    (coherence: a later load of the same counter cannot return an older value). So the
//!    sections whose unlock is in U are a subset of those whose lock is in L, and every
//!    section adds exactly one to each. `U == L` therefore means: every section whose lock was
//!    counted has its unlock counted too, i.e. has ended, and (by the `Acquire` load that read
//!    its O4) its critical section happens-before the drain's end.
//! 2. **Pre-existing sections are counted.** Take a section whose O3 came before G1 (the
//!    barrier pair orders O3 and G1 one way or the other; if G1 came first, the section sees
//!    every removal made before G1 and need not be waited for, exactly as case 1 of the guard
//!    proof). Its O2 precedes O3, so every load made after G1 sees it (case 2 of the guard
//!    proof). It counted under phase `p`, which is either the phase W2 flips from, or the
//!    other one. W3 drains the first, W1 the second; both run after G1 and see the O2. By
//!    step 1 the drain that sees it cannot end before that section's O4.
//! 3. **Why both phases.** A section may load the phase (O1), be preempted past the next flip
//!    and only then count (O2) under the stale phase. If it did so after a grace period's W1,
//!    its O3 is after that grace period's G1 and it is safe for *that* grace period, but it
//!    stays counted under a phase the next grace period would not drain without W1. Draining
//!    both phases in every grace period closes that hole (the busted loom model skips W1 and
//!    loses a pre-existing section). Draining with one phase only is also correct but may never
//!    end: new sections keep adding locks faster than old ones add unlocks.
//! 4. **Why it ends.** New sections count under the phase W2 flipped to; W3 drains the phase
//!    flipped from, which only sections that loaded the phase before W2 still enter. W1 drains
//!    the phase that only stragglers of an earlier flip enter. Neither keeps receiving new
//!    sections, so each drain ends once the sections it counted end.
//!
//! Concurrent grace periods (normal and expedited) serialize on the owned-scan turn: each one
//! flips and drains, so each sees its own pre-existing sections counted and drained. The
//! counters are 64 bits wide and never wrap in practice.
//!
//! # Cost
//!
//! Opening an owned section is a [`Guard`](crate::Guard)'s work plus reading the phase; closing
//! one looks up the closing thread's record (the same one-entry cache `read()` uses). No
//! read-modify-write, and no shared cache line written: two threads taking owned guards of one
//! domain do not contend. That rules out an `Arc` count per guard, so a domain other than the
//! global one outlives its handle by *parking* instead (see `domain::owned`).

#[cfg(all(test, rcukit_loom))]
mod loom;

use super::Registry;
use crate::report::{Report, Stall};
use crate::sync::{AtomicU64, Backoff, Brief, Condvar, Mutex};
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

    /// Opened minus closed, over both phases (for statistics; not a drain).
    pub(crate) fn open(&self) -> u64 {
        let total = |side| self.load(side, 0).wrapping_add(self.load(side, 1));
        total(Side::Locks).wrapping_sub(total(Side::Unlocks))
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
/// The turn is a `bool` under a mutex held only to take or give it back (as the expedited
/// engine's turn, and for the same reason): a drain can wait for a long time, and a mutex held
/// across it could be neither held across `fork()` by the fork handlers nor released in the
/// child, where the thread that held it does not exist.
pub(crate) struct OwnedReaders {
    phase: AtomicU64,
    turn: Mutex<bool>,
    turn_free: Condvar,
}

impl OwnedReaders {
    pub(crate) fn new() -> OwnedReaders {
        OwnedReaders {
            phase: AtomicU64::new(0),
            turn: Mutex::new(false),
            turn_free: Condvar::new(),
        }
    }

    /// O1: the phase a new section counts under.
    #[inline(always)]
    pub(crate) fn phase(&self) -> usize {
        (self.phase.load(Acquire) & 1) as usize
    }

    /// W1-W3: wait for every owned section that began before the caller's heavy barrier.
    /// `stalled` is called while the wait is slow, with the number of sections it waits for.
    pub(crate) fn wait(&self, registry: &Registry, drain: Drain, stalled: &mut dyn FnMut(u64)) {
        {
            let mut taken = self.turn.lock();
            while *taken {
                taken = self.turn_free.wait(taken);
            }
            *taken = true;
        }
        let current = self.phase();
        if drain == Drain::Both {
            drain_phase(registry, current ^ 1, stalled);
        }
        self.phase.fetch_add(1, AcqRel);
        drain_phase(registry, current, stalled);
        *self.turn.lock() = false;
        self.turn_free.notify_all();
    }

    /// W1-W3 waiting no longer than `brief` allows, never sleeping or yielding; false if the
    /// turn is taken (another grace period is draining, or its mutex is held) or a section began before the caller's heavy
    /// barrier is still open. A W3 cut short leaves the phase flipped: harmless, every drain
    /// covers both phases (step 3 of the module docs).
    pub(crate) fn try_wait(&self, registry: &Registry, brief: &mut Brief) -> bool {
        match self.turn.try_lock() {
            Some(mut taken) if !*taken => *taken = true,
            _ => return false,
        }
        let current = self.phase();
        let drained = brief.wait(|| try_phase_drained(registry, current ^ 1)) && {
            self.phase.fetch_add(1, AcqRel);
            brief.wait(|| try_phase_drained(registry, current))
        };
        *self.turn.lock() = false;
        self.turn_free.notify_all();
        drained
    }

    /// After `fork()`: a grace period that held the turn did not survive (see
    /// [`fork`](crate::domain::fork)). The phase may have flipped already; every drain covers both
    /// phases, so the next grace period is complete anyway.
    pub(crate) fn after_fork(&self) {
        *self.turn.lock() = false;
    }

    /// Hold the turn's mutex across `fork()` (see [`fork`](crate::domain::fork)).
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
        advice: "an OwnedGuard held by the waiting thread or task itself never ends: drop it \
                 before waiting for a grace period of its domain",
    })
}
