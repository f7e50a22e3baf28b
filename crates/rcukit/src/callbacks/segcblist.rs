#![doc = include_str!("segcblist.md")]

use super::port::ReleasedBy;
use crate::seq::{self, GpCookie};
use std::collections::VecDeque;

/// A list never shrinks below this many slots.
const SHRINK_ABOVE: usize = if cfg!(rcukit_small) { 8 } else { 4096 };

/// Segment indices.
pub(crate) const DONE: usize = 0;
pub(crate) const WAIT: usize = 1;
pub(crate) const NEXT_READY: usize = 2;
pub(crate) const NEXT: usize = 3;

/// Counts of entries moved to DONE by one [`SegCbList::advance`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Released {
    pub(crate) by_normal: u64,
    pub(crate) by_expedited: u64,
    pub(crate) segments: u32,
}

/// The segmented list. `T` is the entry type (callbacks, barrier markers, test values).
pub(crate) struct SegCbList<T> {
    items: VecDeque<T>,
    /// `ends[i]` is one past the last item of segment `i` for DONE, WAIT and NEXT_READY; NEXT
    /// always ends at `items.len()`. Non-decreasing.
    ends: [usize; 3],
    /// The cookies of WAIT and NEXT_READY (indices 1 and 2); meaningless when the segment is
    /// empty and for DONE.
    gp: [GpCookie; 3],
}

impl<T> Default for SegCbList<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> SegCbList<T> {
    pub(crate) fn new() -> Self {
        SegCbList {
            items: VecDeque::new(),
            ends: [0; 3],
            gp: [GpCookie::completed(); 3],
        }
    }

    fn start(&self, seg: usize) -> usize {
        if seg == DONE {
            0
        } else {
            self.ends[seg - 1]
        }
    }

    fn end(&self, seg: usize) -> usize {
        if seg == NEXT {
            self.items.len()
        } else {
            self.ends[seg]
        }
    }

    /// Number of entries in segment `seg`.
    pub(crate) fn seg_len(&self, seg: usize) -> usize {
        self.end(seg) - self.start(seg)
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The cookie of segment `seg` (WAIT or NEXT_READY) if it holds entries.
    pub(crate) fn cookie(&self, seg: usize) -> Option<GpCookie> {
        debug_assert!(seg == WAIT || seg == NEXT_READY);
        (self.seg_len(seg) > 0).then_some(self.gp[seg])
    }

    /// Give memory back after a backlog: when fewer than a quarter of the slots are in use (and
    /// the list has grown past a few thousand), shrink to twice the entries held. The worker
    /// calls this every pass; a 5-million-callback backlog would otherwise keep over 100 MB for
    /// the domain's lifetime. Shrinking halves at least each time, so the copies cost O(1)
    /// amortized per entry.
    pub(crate) fn shrink_if_sparse(&mut self) {
        let capacity = self.items.capacity();
        if capacity > SHRINK_ABOVE && self.items.len() < capacity / 4 {
            self.items
                .shrink_to((self.items.len() * 2).max(SHRINK_ABOVE));
        }
    }

    /// Slots allocated (for tests).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.items.capacity()
    }

    /// Append an entry to NEXT.
    pub(crate) fn enqueue(&mut self, item: T) {
        self.items.push_back(item);
    }

    /// Stamp the entries of NEXT with `cookie`. Returns true when a segment was stamped, in
    /// which case the caller must make sure a normal grace period reaching `cookie.normal` is
    /// requested. `by_expedited` says whether the expedited half releases entries (then a
    /// segment is only merged into when its expedited target is the same too).
    pub(crate) fn accelerate(&mut self, cookie: GpCookie, by_expedited: bool) -> bool {
        if self.seg_len(NEXT) == 0 {
            return false;
        }
        // The newest segment whose cookie is strictly older than the new one keeps its stamp;
        // everything after it merges under the new stamp. With expedited releases, "older"
        // means older in *either* half: merging a segment whose expedited target is older
        // would re-stamp its entries with a later expedited target, and under a stream of
        // callbacks each merge would push their release by an expedited grace period one
        // grace period further away, forever.
        let mut keep = DONE;
        for seg in [NEXT_READY, WAIT] {
            let older = seq::cmp_lt(self.gp[seg].normal, cookie.normal)
                || (by_expedited && seq::cmp_lt(self.gp[seg].expedited, cookie.expedited));
            if self.seg_len(seg) > 0 && older {
                keep = seg;
                break;
            }
        }
        let into = keep + 1;
        if into >= NEXT {
            // WAIT and NEXT_READY both hold older stamps: NEXT waits for a free segment.
            return false;
        }
        let len = self.items.len();
        for seg in into..NEXT {
            self.ends[seg] = len;
            self.gp[seg] = cookie;
        }
        true
    }

    /// Move to DONE every leading WAIT/NEXT_READY segment whose cookie `poll` reports
    /// complete, stopping at the first that is not. `poll` says which counter completed it;
    /// `counts` says which entries the returned counts include (the worker leaves out barrier
    /// markers).
    pub(crate) fn advance(
        &mut self,
        mut poll: impl FnMut(&GpCookie) -> Option<ReleasedBy>,
        counts: impl Fn(&T) -> bool,
    ) -> Released {
        let mut released = Released::default();
        let mut moved_to = DONE;
        for seg in [WAIT, NEXT_READY] {
            if self.seg_len(seg) == 0 {
                break;
            }
            match poll(&self.gp[seg]) {
                None => break,
                Some(by) => {
                    let n = self
                        .items
                        .range(self.start(seg)..self.end(seg))
                        .filter(|item| counts(item))
                        .count();
                    match by {
                        ReleasedBy::Normal => released.by_normal += n as u64,
                        ReleasedBy::Expedited => released.by_expedited += n as u64,
                    }
                    released.segments += 1;
                    moved_to = seg;
                }
            }
        }
        if moved_to == DONE {
            return released;
        }
        let done_end = self.ends[moved_to];
        self.ends[DONE] = done_end;
        // Compact: the segments that did not move slide down to WAIT.
        if moved_to == WAIT && self.ends[NEXT_READY] > done_end {
            self.ends[WAIT] = self.ends[NEXT_READY];
            self.gp[WAIT] = self.gp[NEXT_READY];
        } else {
            self.ends[WAIT] = done_end;
        }
        self.ends[NEXT_READY] = self.ends[WAIT];
        released
    }

    /// Remove and return the oldest DONE entry.
    pub(crate) fn pop_done(&mut self) -> Option<T> {
        if self.ends[DONE] == 0 {
            return None;
        }
        let item = self.items.pop_front();
        for end in &mut self.ends {
            *end -= 1;
        }
        item
    }

    /// The oldest DONE entry, left in place.
    pub(crate) fn peek_done(&self) -> Option<&T> {
        if self.ends[DONE] == 0 {
            return None;
        }
        self.items.front()
    }

    /// Number of DONE entries.
    pub(crate) fn done_len(&self) -> usize {
        self.ends[DONE]
    }

    /// Append `item` behind the last non-empty segment so that it becomes ready exactly when
    /// everything queued before it is. Returns the item back if the list is empty (it then
    /// depends on nothing and the caller may complete it at once).
    pub(crate) fn entrain(&mut self, item: T) -> Result<(), T> {
        if self.items.is_empty() {
            return Err(item);
        }
        let last = (DONE..=NEXT)
            .rev()
            .find(|&seg| self.seg_len(seg) > 0)
            .expect("non-empty list has a non-empty segment");
        self.items.push_back(item);
        let len = self.items.len();
        for seg in last..NEXT {
            self.ends[seg] = len;
        }
        Ok(())
    }

    /// Check the structural invariants (tests and debug assertions).
    #[cfg(all(test, not(rcukit_loom)))]
    pub(crate) fn check_invariants(&self) {
        assert!(self.ends[DONE] <= self.ends[WAIT]);
        assert!(self.ends[WAIT] <= self.ends[NEXT_READY]);
        assert!(self.ends[NEXT_READY] <= self.items.len());
        let (wait, next_ready) = (self.seg_len(WAIT), self.seg_len(NEXT_READY));
        assert!(
            wait > 0 || next_ready == 0,
            "WAIT empty implies NEXT_READY empty"
        );
        if wait > 0 && next_ready > 0 {
            let (w, r) = (self.gp[WAIT], self.gp[NEXT_READY]);
            assert!(seq::cmp_ge(r.normal, w.normal), "normal stamps go forward");
            assert!(
                seq::cmp_ge(r.expedited, w.expedited),
                "expedited stamps go forward"
            );
        }
    }
}

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use super::*;

    fn cookie(normal: u64, expedited: u64) -> GpCookie {
        GpCookie {
            normal,
            expedited,
            domain: 1,
        }
    }

    fn all<T>(_: &T) -> bool {
        true
    }

    /// Poll against fixed counter values, normal first.
    fn poller(norm: u64, exp: u64) -> impl FnMut(&GpCookie) -> Option<ReleasedBy> {
        move |c| {
            if seq::half_done(norm, c.normal) {
                Some(ReleasedBy::Normal)
            } else if seq::half_done(exp, c.expedited) {
                Some(ReleasedBy::Expedited)
            } else {
                None
            }
        }
    }

    #[test]
    fn a_drained_backlog_gives_its_memory_back() {
        let mut l = SegCbList::new();
        for i in 0..1_000_000u32 {
            l.enqueue(i);
        }
        assert!(l.accelerate(cookie(8, 8), true));
        l.advance(poller(8, 8), all);
        let grown = l.capacity();
        assert!(grown >= 1_000_000);
        let mut popped = 0u32;
        while let Some(i) = l.pop_done() {
            assert_eq!(i, popped);
            popped += 1;
            l.shrink_if_sparse();
            if popped == 900_000 {
                assert!(l.capacity() < grown / 2, "shrinks while it drains");
            }
        }
        assert_eq!(popped, 1_000_000);
        assert!(
            l.capacity() <= SHRINK_ABOVE,
            "capacity {} left",
            l.capacity()
        );
        // Still a working list.
        l.enqueue(1);
        assert!(l.accelerate(cookie(12, 12), true));
        l.advance(poller(12, 12), all);
        assert_eq!(l.pop_done(), Some(1));
    }

    #[test]
    fn a_newer_expedited_target_restamps_nothing_when_it_releases() {
        let mut l = SegCbList::new();
        l.enqueue(1);
        assert!(l.accelerate(cookie(8, 100), true));
        l.enqueue(2);
        // Same normal target, later expedited one: entry 1 keeps its stamp.
        assert!(l.accelerate(cookie(8, 104), true));
        assert_eq!(l.cookie(WAIT), Some(cookie(8, 100)));
        assert_eq!(l.cookie(NEXT_READY), Some(cookie(8, 104)));
        // The expedited grace period entry 1 asked for releases it alone.
        let r = l.advance(poller(4, 100), all);
        assert_eq!((r.by_normal, r.by_expedited), (0, 1));
        assert_eq!(l.pop_done(), Some(1));

        // Without expedited releases only the normal half matters: merge.
        let mut l = SegCbList::new();
        l.enqueue(1);
        assert!(l.accelerate(cookie(8, 100), false));
        l.enqueue(2);
        assert!(l.accelerate(cookie(8, 104), false));
        assert_eq!(l.seg_len(WAIT), 2);
        assert_eq!(l.seg_len(NEXT_READY), 0);
    }

    #[test]
    fn pipeline_wait_then_next_ready() {
        // Realistic values: the normal counter idles at 4, the expedited one at 96, and every
        // cookie is a snapshot of them (at most two grace periods ahead).
        let mut l = SegCbList::new();
        l.enqueue(1);
        l.enqueue(2);
        assert!(l.accelerate(cookie(8, 100), true));
        assert_eq!(l.seg_len(WAIT), 2);
        l.enqueue(3);
        // Same targets: merges into WAIT.
        assert!(l.accelerate(cookie(8, 100), true));
        assert_eq!(l.seg_len(WAIT), 3);
        assert_eq!(l.cookie(WAIT), Some(cookie(8, 100)));
        l.enqueue(4);
        // Later target: NEXT_READY.
        assert!(l.accelerate(cookie(12, 108), true));
        assert_eq!(l.seg_len(NEXT_READY), 1);
        l.enqueue(5);
        // Still later target, but no free segment.
        assert!(!l.accelerate(cookie(16, 112), true));
        assert_eq!(l.seg_len(NEXT), 1);
        l.check_invariants();

        // Normal counter reaches 8: WAIT completes by normal, NEXT_READY does not.
        let r = l.advance(poller(8, 101), all);
        assert_eq!((r.by_normal, r.by_expedited), (3, 0));
        assert_eq!(l.done_len(), 3);
        assert_eq!(
            l.cookie(WAIT),
            Some(cookie(12, 108)),
            "NEXT_READY slid down"
        );
        assert_eq!(l.seg_len(NEXT_READY), 0);
        l.check_invariants();
        // Now NEXT can be stamped.
        assert!(l.accelerate(cookie(16, 112), true));
        l.check_invariants();
        // The expedited counter passes both: released by expedited.
        let r = l.advance(poller(8, 112), all);
        assert_eq!((r.by_normal, r.by_expedited, r.segments), (0, 2, 2));
        let order: Vec<_> = std::iter::from_fn(|| l.pop_done()).collect();
        assert_eq!(order, vec![1, 2, 3, 4, 5]);
        assert!(l.is_empty());
    }

    #[test]
    fn advance_stops_at_first_incomplete_segment() {
        let mut l = SegCbList::new();
        l.enqueue('a');
        l.accelerate(cookie(8, 100), true);
        l.enqueue('b');
        l.accelerate(cookie(12, 104), true);
        // Only NEXT_READY's cookie would poll complete (cannot happen with monotonic stamps,
        // but advance must still not reorder).
        let r = l.advance(|c| (c.normal == 12).then_some(ReleasedBy::Normal), all);
        assert_eq!(r, Released::default());
        assert_eq!(l.done_len(), 0);
    }

    #[test]
    fn entrain_waits_for_the_last_segment_only() {
        let mut l: SegCbList<u32> = SegCbList::new();
        assert_eq!(l.entrain(9), Err(9));
        l.enqueue(1);
        l.accelerate(cookie(8, 100), true);
        l.entrain(99).unwrap();
        assert_eq!(l.seg_len(WAIT), 2, "the marker joins WAIT, not NEXT");
        l.advance(poller(8, 0), all);
        assert_eq!(
            std::iter::from_fn(|| l.pop_done()).collect::<Vec<_>>(),
            [1, 99]
        );
        // Behind DONE only: ready at once.
        l.enqueue(2);
        l.accelerate(cookie(12, 104), true);
        l.advance(poller(12, 0), all);
        l.entrain(98).unwrap();
        assert_eq!(l.done_len(), 2);
    }

    #[test]
    fn completed_and_not_tracked_halves() {
        let mut l = SegCbList::new();
        l.enqueue(1);
        l.accelerate(cookie(8, seq::NOT_TRACKED), true);
        // Expedited counter far ahead, but the half is not tracked.
        assert_eq!(l.advance(poller(4, u64::MAX / 4), all), Released::default());
        assert_eq!(l.advance(poller(8, 0), all).by_normal, 1);
    }
}

#[cfg(all(test, not(rcukit_loom)))]
mod proptests {
    use super::*;
    use crate::seq::{done, end_value, snap, state, INITIAL};
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Enqueue,
        Entrain,
        Accelerate,
        StartNormal,
        EndNormal,
        StartExpedited,
        EndExpedited,
        Advance,
        Pop(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => Just(Op::Enqueue),
            1 => Just(Op::Entrain),
            3 => Just(Op::Accelerate),
            2 => Just(Op::StartNormal),
            2 => Just(Op::EndNormal),
            2 => Just(Op::StartExpedited),
            2 => Just(Op::EndExpedited),
            3 => Just(Op::Advance),
            2 => (1usize..8).prop_map(Op::Pop),
        ]
    }

    /// A reference model: two counters driven like the real engines, and for every entry the
    /// counter values when it was queued.
    struct Model {
        norm: u64,
        exp: u64,
        expedited_releases: bool,
        list: SegCbList<(u64, bool)>,
        queued_at: std::collections::HashMap<u64, (u64, u64)>,
        next_id: u64,
        last_popped: Option<u64>,
        popped: u64,
        last_wait_cookie: Option<GpCookie>,
        first_stamp: std::collections::HashMap<u64, GpCookie>,
    }

    impl Model {
        fn new(exp_offset: u64, expedited_releases: bool) -> Model {
            Model {
                norm: INITIAL,
                exp: INITIAL.wrapping_sub(exp_offset * 4),
                expedited_releases,
                list: SegCbList::new(),
                queued_at: Default::default(),
                next_id: 0,
                last_popped: None,
                popped: 0,
                last_wait_cookie: None,
                first_stamp: Default::default(),
            }
        }

        fn cookie(&self) -> GpCookie {
            GpCookie {
                normal: snap(self.norm),
                expedited: snap(self.exp),
                domain: 1,
            }
        }

        fn advance(&mut self) {
            let (norm, exp, either) = (self.norm, self.exp, self.expedited_releases);
            self.list.advance(
                |c| {
                    if seq::half_done(norm, c.normal) {
                        Some(ReleasedBy::Normal)
                    } else if either && seq::half_done(exp, c.expedited) {
                        Some(ReleasedBy::Expedited)
                    } else {
                        None
                    }
                },
                |&(_, marker)| !marker,
            );
        }

        fn pop(&mut self, n: usize) {
            for _ in 0..n {
                let Some((id, marker)) = self.list.pop_done() else {
                    return;
                };
                if let Some(last) = self.last_popped {
                    assert!(id > last, "FIFO: {id} popped after {last}");
                }
                self.last_popped = Some(id);
                self.popped += 1;
                if !marker {
                    let (n_at, e_at) = self.queued_at[&id];
                    let by_normal = done(self.norm, snap(n_at));
                    let by_exp = self.expedited_releases && done(self.exp, snap(e_at));
                    assert!(
                        by_normal || by_exp,
                        "entry {id} ran before a grace period that started after it was queued"
                    );
                }
            }
        }

        /// Remember the first stamp of every entry that just got one (stamped by `accelerate`,
        /// or a marker entrained into a stamped segment).
        fn record_first_stamps(&mut self) {
            for seg in [WAIT, NEXT_READY] {
                for i in self.list.start(seg)..self.list.end(seg) {
                    let (id, _) = self.list.items[i];
                    self.first_stamp.entry(id).or_insert(self.list.gp[seg]);
                }
            }
        }

        fn apply(&mut self, op: &Op) {
            match *op {
                Op::Enqueue => {
                    let id = self.next_id;
                    self.next_id += 1;
                    self.queued_at.insert(id, (self.norm, self.exp));
                    self.list.enqueue((id, false));
                }
                Op::Entrain => {
                    let id = self.next_id;
                    self.next_id += 1;
                    if self.list.entrain((id, true)).is_err() {
                        // Nothing before it: completes at once, in order.
                        self.last_popped = Some(id);
                        self.popped += 1;
                    }
                    self.record_first_stamps();
                }
                Op::Accelerate => {
                    let cookie = self.cookie();
                    self.list.accelerate(cookie, self.expedited_releases);
                    self.record_first_stamps();
                }
                Op::StartNormal if state(self.norm) == 0 => self.norm = self.norm.wrapping_add(1),
                Op::EndNormal if state(self.norm) != 0 => self.norm = end_value(self.norm),
                Op::StartExpedited if state(self.exp) == 0 => self.exp = self.exp.wrapping_add(1),
                Op::EndExpedited if state(self.exp) != 0 => self.exp = end_value(self.exp),
                Op::Advance => {
                    self.advance();
                    self.check_nothing_waits_for_a_completed_stamp();
                }
                Op::Pop(n) => self.pop(n),
                _ => {}
            }
            self.list.check_invariants();
            self.check_stamps_go_forward();
        }

        /// Stamps are kept, never postponed: whatever the grace periods that completed cover,
        /// by the first stamp an entry got, is ready after an advance.
        fn check_nothing_waits_for_a_completed_stamp(&self) {
            let (norm, exp) = (self.norm, self.exp);
            for seg in [WAIT, NEXT_READY] {
                for i in self.list.start(seg)..self.list.end(seg) {
                    let (id, _) = self.list.items[i];
                    let c = self.first_stamp[&id];
                    let covered = seq::half_done(norm, c.normal)
                        || (self.expedited_releases && seq::half_done(exp, c.expedited));
                    assert!(!covered, "entry {id} still waits for a completed stamp");
                }
            }
        }

        /// Stamps never go backwards: WAIT's cookie only moves forward.
        fn check_stamps_go_forward(&mut self) {
            let new = self.list.cookie(WAIT);
            if let (Some(old), Some(new)) = (self.last_wait_cookie, new) {
                assert!(
                    seq::cmp_ge(new.normal, old.normal),
                    "normal stamp went back"
                );
                assert!(
                    seq::cmp_ge(new.expedited, old.expedited),
                    "expedited stamp went back"
                );
            }
            self.last_wait_cookie = new;
        }

        /// Everything runs eventually: keep making normal grace periods.
        fn drain(&mut self) {
            for _ in 0..8 {
                self.apply(&Op::Accelerate);
                if state(self.norm) == 0 {
                    self.apply(&Op::StartNormal);
                }
                self.apply(&Op::EndNormal);
                self.apply(&Op::Advance);
                self.apply(&Op::Pop(usize::MAX));
            }
            assert!(self.list.is_empty(), "entries left after 8 grace periods");
            assert_eq!(self.popped, self.next_id, "every entry ran exactly once");
        }
    }

    /// 512 cases; under Miri 2, and no regression file (Miri's isolation has no `getcwd`).
    fn config() -> ProptestConfig {
        let mut config = ProptestConfig::with_cases(if cfg!(miri) { 2 } else { 512 });
        if cfg!(miri) {
            config.failure_persistence = None;
        }
        config
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn segmented_list_model(
            ops in proptest::collection::vec(op(), 1..300),
            exp_offset in 0u64..400,
            expedited_releases in any::<bool>(),
        ) {
            let mut m = Model::new(exp_offset, expedited_releases);
            for op in &ops {
                m.apply(op);
            }
            m.drain();
        }
    }
}
