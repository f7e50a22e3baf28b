#![doc = include_str!("give_way.md")]

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::{Duration, Instant};

/// A wait that has slept this long (from its first sleep) asks readers to give way, and makes
/// the domain's next [`WAITS_AFTER_LONG`] waits ask from their first sleep.
pub(crate) const LONG_WAIT: Duration = Duration::from_micros(500);

/// How many waits after a long one ask from their first sleep.
pub(crate) const WAITS_AFTER_LONG: u32 = 16;

/// A QSBR domain's memory of its recent waits: whether the next one asks readers to give way
/// from its first sleep (see the module documentation); and how often readers gave way.
pub(crate) struct GiveWay {
    /// Waits left that ask from their first sleep.
    waits_left: AtomicU32,
    /// Quiescent states after which a reader gave way.
    gave_way: AtomicU64,
}

impl GiveWay {
    pub(crate) fn new() -> GiveWay {
        GiveWay {
            waits_left: AtomicU32::new(0),
            gave_way: AtomicU64::new(0),
        }
    }

    /// Count a reader's giving way.
    pub(crate) fn count(&self) {
        self.gave_way.fetch_add(1, Relaxed);
    }

    /// Quiescent states after which a reader gave way.
    pub(crate) fn gave_way(&self) -> u64 {
        self.gave_way.load(Relaxed)
    }

    /// Does a wait that is about to sleep for the first time ask now? (Counts that wait.)
    fn ask_at_first_sleep(&self) -> bool {
        let left = self.waits_left.load(Relaxed);
        if left > 0 {
            self.waits_left.store(left - 1, Relaxed);
        }
        left > 0
    }

    /// Learn from a wait that slept for `slept` in all.
    fn learn(&self, slept: Duration) {
        if slept >= LONG_WAIT {
            self.waits_left.store(WAITS_AFTER_LONG, Relaxed);
        }
    }
}

/// One sleeping wait's part: when to raise the request, and what the domain learns from the
/// wait when it ends (dropped).
pub(crate) struct WaitGivingWay<'a> {
    policy: &'a GiveWay,
    word: &'a AtomicU64,
    target: u64,
    first_sleep: Option<Instant>,
    raised: bool,
}

impl<'a> WaitGivingWay<'a> {
    /// A wait for readers to reach `target`, in a domain with `policy` and the request word
    /// `word` (on the read side's line).
    pub(crate) fn new(policy: &'a GiveWay, word: &'a AtomicU64, target: u64) -> Self {
        WaitGivingWay {
            policy,
            word,
            target,
            first_sleep: None,
            raised: false,
        }
    }

    /// Before each sleep: raise the request if the domain's recent waits were long, or this
    /// one has slept long already.
    pub(crate) fn before_sleep(&mut self) {
        if self.raised {
            return;
        }
        let ask = match self.first_sleep {
            None => {
                self.first_sleep = Some(Instant::now());
                self.policy.ask_at_first_sleep()
            }
            Some(first) => first.elapsed() >= LONG_WAIT,
        };
        if ask {
            self.word.store(self.target, Relaxed);
            self.raised = true;
        }
    }
}

impl Drop for WaitGivingWay<'_> {
    fn drop(&mut self) {
        if self.raised {
            // Withdrawn unless a later waiter's request replaced it (that one withdraws its own).
            let _ = self.word.compare_exchange(self.target, 0, Relaxed, Relaxed);
        }
        if let Some(first) = self.first_sleep {
            self.policy.learn(first.elapsed());
        }
    }
}

/// R (a reader, after announcing a quiescent state at epoch `announced`): give way if a
/// sleeping waiter asks readers at or past its target to, once per target (`last` is the
/// target this reader last gave way to). True if it yielded its CPU.
#[inline]
pub(crate) fn give_way(word: &AtomicU64, announced: u64, last: &mut u64) -> bool {
    let target = word.load(Relaxed);
    if target != 0 && target != *last && announced >= target {
        *last = target;
        yield_cpu();
        true
    } else {
        false
    }
}

#[cold]
#[inline(never)]
fn yield_cpu() {
    std::thread::yield_now();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_wait_makes_the_next_waits_ask_from_their_first_sleep() {
        let policy = GiveWay::new();
        let word = AtomicU64::new(0);
        // A short wait: nothing raised, nothing learned.
        let mut wait = WaitGivingWay::new(&policy, &word, 5);
        wait.before_sleep();
        assert_eq!(word.load(Relaxed), 0);
        drop(wait);
        // A long one (its first sleep pretended to be long ago) raises at its next sleep and
        // withdraws when it ends.
        let mut wait = WaitGivingWay::new(&policy, &word, 6);
        wait.before_sleep();
        assert_eq!(word.load(Relaxed), 0);
        wait.first_sleep = Some(Instant::now() - LONG_WAIT);
        wait.before_sleep();
        assert_eq!(word.load(Relaxed), 6);
        drop(wait);
        assert_eq!(word.load(Relaxed), 0);
        // The next WAITS_AFTER_LONG waits raise at their first sleep, then no more.
        for target in 0..u64::from(WAITS_AFTER_LONG) {
            let mut wait = WaitGivingWay::new(&policy, &word, 10 + target);
            wait.before_sleep();
            assert_eq!(word.load(Relaxed), 10 + target);
        }
        let mut wait = WaitGivingWay::new(&policy, &word, 99);
        wait.before_sleep();
        assert_eq!(word.load(Relaxed), 0);
    }

    #[test]
    fn a_request_replaced_by_a_later_waiter_is_left_to_it() {
        let policy = GiveWay::new();
        policy.learn(LONG_WAIT);
        let word = AtomicU64::new(0);
        let mut a = WaitGivingWay::new(&policy, &word, 7);
        let mut b = WaitGivingWay::new(&policy, &word, 8);
        a.before_sleep();
        b.before_sleep();
        drop(a);
        assert_eq!(word.load(Relaxed), 8);
        drop(b);
        assert_eq!(word.load(Relaxed), 0);
    }

    #[test]
    fn a_reader_gives_way_once_per_target_and_only_at_or_past_it() {
        let word = AtomicU64::new(0);
        let mut last = 0;
        assert!(!give_way(&word, 9, &mut last), "no request");
        word.store(9, Relaxed);
        assert!(
            !give_way(&word, 8, &mut last),
            "short of the target: a holdout"
        );
        assert!(give_way(&word, 9, &mut last));
        assert!(!give_way(&word, 10, &mut last), "once per target");
        word.store(11, Relaxed);
        assert!(give_way(&word, 12, &mut last));
    }
}
