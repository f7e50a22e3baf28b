#![doc = include_str!("spin.md")]

use crate::reader::ReaderRecord;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{Acquire, Relaxed};

/// The most passes a waiter spins over the readers before it sleeps.
pub(crate) const SPINS: u32 = if cfg!(rcukit_small) { 2 } else { 128 };

/// The fewest passes, however often spinning has been in vain.
pub(crate) const MIN_SPINS: u32 = if cfg!(rcukit_small) { 1 } else { 4 };

/// One wait in this many spins the full [`SPINS`].
pub(crate) const PROBE_EVERY: u32 = 16;

/// How many passes a domain's waiters spin (see the module documentation).
pub(crate) struct SpinBudget {
    passes: AtomicU32,
    waits: AtomicU32,
}

impl SpinBudget {
    pub(crate) fn new() -> SpinBudget {
        SpinBudget {
            passes: AtomicU32::new(SPINS),
            waits: AtomicU32::new(0),
        }
    }

    /// The passes the next wait may spin.
    pub(crate) fn limit(&self) -> u32 {
        let wait = self.waits.fetch_add(1, Relaxed);
        if wait % PROBE_EVERY == PROBE_EVERY - 1 {
            SPINS
        } else {
            self.passes.load(Relaxed).clamp(MIN_SPINS, SPINS)
        }
    }

    /// Learn from a wait that spun: `ended` if the spin saw every reader leave.
    pub(crate) fn learn(&self, ended: bool) {
        let passes = self.passes.load(Relaxed);
        let next = if ended {
            SPINS
        } else {
            (passes / 2).max(MIN_SPINS)
        };
        if next != passes {
            self.passes.store(next, Relaxed);
        }
    }
}

/// Spin until every reader of `inside` has left the section it was in when a grace period
/// with `target` began, dropping each from `inside` as it is seen outside; stops after `limit`
/// passes over those still inside. One pass looks at every reader, so a reader that is not
/// running costs the waiter no more spins than one that is (a spin per reader in turn would
/// spend the limit on each preempted reader, CPU that the readers need when threads outnumber
/// cores). True if `inside` is empty at the end.
pub(crate) fn spin_until_left(inside: &mut Vec<&ReaderRecord>, target: u64, limit: u32) -> bool {
    let left = |record: &&ReaderRecord| {
        let v = record.ctr.load(Acquire);
        v == 0 || v >= target
    };
    for _ in 0..limit.max(1) {
        inside.retain(|record| !left(record));
        if inside.is_empty() {
            return true;
        }
        #[cfg(rcukit_loom)]
        ::loom::thread::yield_now();
        #[cfg(not(rcukit_loom))]
        std::hint::spin_loop();
    }
    false
}

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use super::*;
    use crate::reader::ThreadInfo;

    /// The limits of `n` waits in a row, each learning `ended`.
    fn limits(budget: &SpinBudget, n: usize, ended: bool) -> Vec<u32> {
        (0..n)
            .map(|_| {
                let limit = budget.limit();
                budget.learn(ended);
                limit
            })
            .collect()
    }

    #[test]
    fn spinning_in_vain_halves_the_spin_down_to_the_floor_with_a_full_probe_now_and_then() {
        let budget = SpinBudget::new();
        let seen = limits(&budget, 2 * PROBE_EVERY as usize, false);
        assert_eq!(seen[0], SPINS);
        assert_eq!(seen[1], (SPINS / 2).max(MIN_SPINS));
        assert!(seen
            .windows(2)
            .take(PROBE_EVERY as usize - 2)
            .all(|w| w[1] <= w[0]));
        let probes: Vec<usize> = (0..seen.len()).filter(|&i| seen[i] == SPINS).collect();
        assert_eq!(
            probes,
            [0, PROBE_EVERY as usize - 1, 2 * PROBE_EVERY as usize - 1]
        );
        assert_eq!(seen[PROBE_EVERY as usize - 2], MIN_SPINS);
        assert_eq!(seen[PROBE_EVERY as usize], MIN_SPINS);
    }

    #[test]
    fn one_spin_that_ends_the_wait_restores_the_full_spin() {
        let budget = SpinBudget::new();
        limits(&budget, 5, false);
        assert!(budget.limit() < SPINS);
        budget.learn(true);
        assert_eq!(budget.limit(), SPINS);
        assert_eq!(limits(&budget, 6, true), [SPINS; 6]);
    }

    #[test]
    fn the_spin_drops_readers_seen_outside_and_reports_those_left_inside() {
        let record = || ReaderRecord::new(ThreadInfo::current(), std::sync::Weak::new());
        let (out, inside, newer) = (record(), record(), record());
        inside.ctr.store(5, Relaxed);
        newer.ctr.store(7, Relaxed);
        let mut waiting = vec![&out, &inside, &newer];
        assert!(!spin_until_left(&mut waiting, 6, 3));
        assert_eq!(waiting.len(), 1);
        assert!(std::ptr::eq(waiting[0], &inside));
        inside.ctr.store(0, Relaxed);
        assert!(spin_until_left(&mut waiting, 6, 0));
        assert!(waiting.is_empty());
    }
}
