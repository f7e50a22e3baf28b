#![doc = include_str!("seq.md")]

use crate::sync::{fence, AtomicU64};
use std::sync::atomic::Ordering;

/// Number of low bits holding the grace-period state.
pub(crate) const CTR_SHIFT: u32 = 2;
/// Mask of the state bits.
pub(crate) const STATE_MASK: u64 = (1 << CTR_SHIFT) - 1;
/// One whole grace period in counter units.
pub(crate) const ONE_GP: u64 = STATE_MASK + 1;

/// Cookie half that has already completed (cannot be produced by a snapshot: state bit set).
pub(crate) const COMPLETED: u64 = 0x1;
/// Cookie half that is not tracked and must be ignored when polling.
pub(crate) const NOT_TRACKED: u64 = 0x2;

/// The value every counter starts from: 300 grace periods below the wrap-around, in every
/// build (as the kernel does at boot), so that wrap bugs show at once in release builds and
/// benchmarks too, not only in debug tests.
pub(crate) const INITIAL: u64 = 0u64.wrapping_sub(300) << CTR_SHIFT;

/// The state bits of a sequence number (0 = idle).
#[inline]
pub(crate) const fn state(s: u64) -> u64 {
    s & STATE_MASK
}

/// The earliest counter value that proves a full grace period has elapsed since `s` was read.
#[inline]
pub(crate) const fn snap(s: u64) -> u64 {
    s.wrapping_add(2 * STATE_MASK + 1) & !STATE_MASK
}

/// The value a counter takes when the grace period in progress at `s` ends.
#[inline]
pub(crate) const fn end_value(s: u64) -> u64 {
    (s | STATE_MASK).wrapping_add(1)
}

/// Wrap-tolerant `a >= b` (the kernel's `ULONG_CMP_GE`).
#[inline]
pub(crate) const fn cmp_ge(a: u64, b: u64) -> bool {
    u64::MAX / 2 >= a.wrapping_sub(b)
}

/// Wrap-tolerant `a < b` (the kernel's `ULONG_CMP_LT`).
#[inline]
pub(crate) const fn cmp_lt(a: u64, b: u64) -> bool {
    u64::MAX / 2 < a.wrapping_sub(b)
}

/// Has the counter value `cur` reached the snapshot `s`? (`rcu_seq_done`)
#[inline]
pub(crate) const fn done(cur: u64, s: u64) -> bool {
    cmp_ge(cur, s)
}

/// Like [`done`], but only a narrow window of two grace periods just below `s` counts as "not
/// done" (`rcu_seq_done_exact`). A cookie kept for more than 2^63 grace periods would look like
/// a cookie from the future to [`done`]; here it correctly reads as expired. Polling uses this.
#[inline]
pub(crate) const fn done_exact(cur: u64, s: u64) -> bool {
    cmp_ge(cur, s) || cmp_lt(cur, s.wrapping_sub(2 * ONE_GP))
}

/// Does a cookie half at `s` count as expired given the counter value `cur`?
#[inline]
pub(crate) const fn half_done(cur: u64, s: u64) -> bool {
    if s == COMPLETED {
        return true;
    }
    if s == NOT_TRACKED {
        return false;
    }
    done_exact(cur, s)
}

/// An atomic grace-period sequence counter. One thread at a time starts and ends grace periods
/// on a given counter (the normal grace-period thread, or the holder of the expedited mutex);
/// any thread may snapshot and poll it.
pub(crate) struct SeqCounter {
    value: AtomicU64,
}

impl SeqCounter {
    pub(crate) fn new() -> Self {
        Self::starting_at(INITIAL)
    }

    pub(crate) fn starting_at(value: u64) -> Self {
        SeqCounter {
            value: AtomicU64::new(value),
        }
    }

    /// The current value, with `Acquire` ordering.
    #[inline]
    pub(crate) fn load(&self) -> u64 {
        self.value.load(Ordering::Acquire)
    }

    /// Mark a grace period as started (`rcu_seq_start`). Only the single owner of this counter's
    /// grace periods may call it.
    pub(crate) fn start(&self) {
        let s = self.value.load(Ordering::Relaxed);
        debug_assert_eq!(state(s), 0, "grace period started twice");
        self.value.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// Mark the grace period in progress as ended (`rcu_seq_end`).
    pub(crate) fn end(&self) {
        fence(Ordering::SeqCst);
        let s = self.value.load(Ordering::Relaxed);
        debug_assert_ne!(state(s), 0, "grace period ended without starting");
        self.value.store(end_value(s), Ordering::Release);
    }

    /// Snapshot for "a full grace period after now", preceded by a full fence (see the module
    /// docs for why).
    #[inline]
    pub(crate) fn snap(&self) -> u64 {
        fence(Ordering::SeqCst);
        snap(self.value.load(Ordering::Relaxed))
    }

    /// Has the cookie half `s` expired ([`half_done`] on the current value)? A true answer is
    /// followed by a full fence.
    #[inline]
    pub(crate) fn poll(&self, s: u64) -> bool {
        if half_done(self.load(), s) {
            fence(Ordering::SeqCst);
            true
        } else {
            false
        }
    }

    /// Number of grace periods between two counter values (for statistics only).
    #[cfg(all(test, not(rcukit_loom)))]
    pub(crate) fn gps_between(old: u64, new: u64) -> u64 {
        new.wrapping_sub(old) >> CTR_SHIFT
    }
}

/// A snapshot of both grace-period counters of a domain: the kernel's "full" polling cookie.
///
/// Obtain one with [`Rcu::get_state`](crate::Rcu::get_state),
/// [`Rcu::start_poll`](crate::Rcu::start_poll) or
/// [`Rcu::start_poll_expedited`](crate::Rcu::start_poll_expedited), and test it with
/// [`Rcu::poll`](crate::Rcu::poll): it expires as soon as a normal *or* an expedited grace
/// period that started after the cookie was taken has completed.
///
/// A cookie is only meaningful for the domain that produced it; polling it on another domain
/// panics. [`GpCookie::completed`] is the exception: it has already expired on every domain.
///
/// Cookies are small `Copy` values, so an updater can keep one per pending object. The kernel
/// documents that at most four distinct full cookies can be outstanding at once (two per
/// counter), so a structure that groups work by cookie needs at most four groups.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct GpCookie {
    pub(crate) normal: u64,
    pub(crate) expedited: u64,
    /// Identity of the domain that made the cookie; 0 for [`GpCookie::completed`].
    pub(crate) domain: u64,
}

impl GpCookie {
    /// A cookie that has already expired: polling it is always true, waiting on it returns at
    /// once (`get_completed_synchronize_rcu_full`).
    pub const fn completed() -> GpCookie {
        GpCookie {
            normal: COMPLETED,
            expedited: COMPLETED,
            domain: 0,
        }
    }

    /// The normal-grace-period half of the cookie (a raw sequence number or a sentinel).
    pub fn normal(&self) -> u64 {
        self.normal
    }

    /// The expedited-grace-period half of the cookie (a raw sequence number or a sentinel).
    pub fn expedited(&self) -> u64 {
        self.expedited
    }

    /// True if this is [`GpCookie::completed`] (or otherwise known complete without polling).
    pub fn is_completed(&self) -> bool {
        self.normal == COMPLETED || self.expedited == COMPLETED
    }
}

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use super::*;

    const W: u64 = INITIAL; // near the wrap

    #[test]
    fn initial_value_is_near_wrap_in_every_build() {
        assert_eq!(INITIAL, 0u64.wrapping_sub(1200));
        assert_eq!(state(INITIAL), 0);
    }

    #[test]
    fn snap_table() {
        // (current value, expected snapshot)
        let table: &[(u64, u64)] = &[
            (0, 4),
            (1, 8),
            (2, 8),
            (3, 8),
            (4, 8),
            (8, 12),
            (9, 16),
            (11, 16),
            (12, 16),
            // Around the wrap: u64::MAX - 3 is an idle counter one GP below zero.
            (u64::MAX - 3, 0),
            (u64::MAX - 2, 4), // running: ends at 0, need the one after
            (u64::MAX, 4),
            (W, W.wrapping_add(4)),
            (W + 1, W.wrapping_add(8)),
        ];
        for &(s, want) in table {
            assert_eq!(snap(s), want, "snap({s:#x})");
            assert_eq!(state(snap(s)), 0, "snapshots are idle values");
        }
    }

    #[test]
    fn end_value_table() {
        let table: &[(u64, u64)] = &[
            (1, 4),
            (2, 4),
            (3, 4),
            (5, 8),
            (u64::MAX - 2, 0),
            (u64::MAX, 0),
        ];
        for &(s, want) in table {
            assert_eq!(end_value(s), want, "end_value({s:#x})");
        }
    }

    #[test]
    fn done_table_with_wrap() {
        // (current, snapshot, done, done_exact)
        let table: &[(u64, u64, bool, bool)] = &[
            (4, 4, true, true),
            (3, 4, false, false),
            (8, 4, true, true),
            (0, 4, false, false),
            // The counter wrapped past the snapshot.
            (0, u64::MAX - 3, true, true),
            (8, u64::MAX - 3, true, true),
            // The snapshot is just past the wrap, the counter just before it.
            (u64::MAX - 3, 0, false, false),
            (u64::MAX - 7, 0, false, false),
            // Far below the snapshot: a stale cookie. `done` says "from the future",
            // `done_exact` knows better.
            (u64::MAX - 100, 0, false, true),
            (100, 1 << 63, false, true),
        ];
        for &(cur, s, d, de) in table {
            assert_eq!(done(cur, s), d, "done({cur:#x}, {s:#x})");
            assert_eq!(done_exact(cur, s), de, "done_exact({cur:#x}, {s:#x})");
        }
    }

    #[test]
    fn sentinels() {
        assert_eq!(state(COMPLETED), 1);
        assert_eq!(state(NOT_TRACKED), 2);
        for cur in [0, 1, 4, u64::MAX, W] {
            assert!(half_done(cur, COMPLETED));
            assert!(!half_done(cur, NOT_TRACKED));
        }
        // No snapshot can ever equal a sentinel.
        for s in [0u64, 1, 2, 3, u64::MAX, u64::MAX - 1, W] {
            assert_ne!(snap(s), COMPLETED);
            assert_ne!(snap(s), NOT_TRACKED);
        }
    }

    #[test]
    fn counter_lifecycle_across_the_wrap() {
        let c = SeqCounter::starting_at(u64::MAX - 7);
        let mut wrapped = false;
        for _ in 0..10 {
            let before = c.load();
            let s = c.snap();
            assert!(!c.poll(s), "a fresh snapshot cannot be done");
            c.start();
            let during = c.snap();
            assert!(!c.poll(s));
            c.end();
            assert!(c.poll(s), "one GP after an idle snapshot suffices");
            assert!(
                !c.poll(during),
                "a snapshot taken mid-GP needs the next one"
            );
            c.start();
            c.end();
            assert!(c.poll(during));
            assert_eq!(SeqCounter::gps_between(before, c.load()), 2);
            wrapped |= c.load() < before;
        }
        assert!(wrapped, "the test must cross the wrap");
    }

    #[test]
    fn cookie_completed() {
        let c = GpCookie::completed();
        assert!(c.is_completed());
        assert_eq!(c.normal(), COMPLETED);
        assert_eq!(c.expedited(), COMPLETED);
    }
}
