#![doc = include_str!("worker.md")]

use super::callback::{BarrierCount, Callback, Work};
use super::hand_back::{MAX_BATCHES, PATIENCE};
use super::intake::Consumer;
use super::local::LocalRetires;
use super::port::{GpPort, ReleasedBy};
use super::segcblist::{SegCbList, NEXT, NEXT_READY, WAIT};
use super::shard::{Shard, Wake};
use super::{Callbacks, SHARD_HINT, WORKER_OF};
use crate::barrier::{self, Heavy};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::Duration;

/// A pass takes up to this many `batch`es from the intake: stamping, and under a backlog the
/// expedited grace period, are then paid once per large group of callbacks. Running callbacks
/// stays bounded by `batch` per pass.
const INTAKE_BATCHES: usize = if cfg!(rcukit_small) { 1 } else { 16 };

/// How long a parked worker sleeps before looking around on its own.
const TICK: Duration = if cfg!(rcukit_small) {
    Duration::from_millis(1)
} else {
    Duration::from_millis(10)
};

/// The body of worker thread `index` of a domain: its grace-period port and its callbacks.
pub(crate) fn run<P: GpPort>(gp: &P, callbacks: &Callbacks, index: usize) {
    SHARD_HINT.with(|h| h.set(index));
    WORKER_OF.with(|w| w.set(callbacks.domain));
    let worker = Worker::new(gp, callbacks, index);
    let me = std::thread::current();
    *crate::sync::lock(&worker.shard.worker.thread) = Some(me.clone());
    // A worker parked with an empty list (`Idle`) has nothing a grace period could release;
    // producers wake it when they queue.
    let shard = callbacks.shard_arc(index);
    gp.subscribe(
        me,
        Box::new(move || shard.worker.sleeping.load() != Wake::Idle),
    );

    let mut consumer = Consumer::new();
    let mut list: SegCbList<Work> = SegCbList::new();
    loop {
        match worker.step(&mut consumer, &mut list) {
            Step::Busy => {
                // Found work after an idle park: producers need not wake us any more.
                let sleeping = &worker.shard.worker.sleeping;
                if sleeping.load() != Wake::Awake {
                    sleeping.store(Wake::Awake);
                }
            }
            Step::Idle => worker.park(&consumer, &list),
            Step::Drain => worker.drain_step(&list),
            Step::Exit => return,
        }
    }
}

/// What the worker should do after one pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// It did something; go again.
    Busy,
    /// Nothing to do until a grace period ends or work arrives.
    Idle,
    /// Shutting down with entries still waiting: run a grace period, then go again.
    Drain,
    /// Shutting down and empty.
    Exit,
}

/// Which producers' local lists a steal takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    /// Every one (a barrier marker arrived, or shutdown), and wait for their drops.
    All,
    /// Those with callbacks whose owner queued nothing since the previous look.
    Idle,
}

/// The worker of one shard: what it works with (its own state, the consumer and the list, is
/// passed to each pass).
pub(crate) struct Worker<'a, P> {
    gp: &'a P,
    callbacks: &'a Callbacks,
    shard: &'a Shard,
}

impl<'a, P: GpPort> Worker<'a, P> {
    /// The worker of shard `index` of `callbacks`.
    pub(crate) fn new(gp: &'a P, callbacks: &'a Callbacks, index: usize) -> Self {
        Worker {
            gp,
            callbacks,
            shard: callbacks.shard(index),
        }
    }

    /// One pass of the worker loop (steps 1-5 of the module docs).
    pub(crate) fn step(&self, consumer: &mut Consumer, list: &mut SegCbList<Work>) -> Step {
        let shutting_down = self.callbacks.is_shutting_down();
        let (mut took, barrier_waits) = self.take_intake(consumer, list);
        if shutting_down {
            took += self.steal_locals(list, Which::All);
        } else if self.shard.worker.scan_due() {
            took += self.steal_locals(list, Which::Idle);
        }
        self.stamp(list);
        if barrier_waits {
            self.hurry_for_barrier(list);
        }
        // A domain being dropped waits for no normal grace period: expedite everything.
        let draining = shutting_down || self.callbacks.is_draining();
        self.advance(list, draining);
        let hand_back = self.callbacks.config.retire_on_producers
            && !shutting_down
            && consumer.taken_within(PATIENCE);
        let ran = self.run_done(list, hand_back);
        list.shrink_if_sparse();
        self.hurry(list, hand_back, draining);
        if took > 0 || ran > 0 || list.done_len() > 0 {
            Step::Busy
        } else if !shutting_down {
            Step::Idle
        } else if list.is_empty()
            && consumer.is_drained(&self.shard.intake)
            && self.shard.hand_back.is_quiet()
        {
            Step::Exit
        } else {
            Step::Drain
        }
    }

    /// Move published entries from the intake into the list: callbacks to NEXT, barrier
    /// markers entrained behind everything taken so far. A marker is entrained only after a
    /// full pass that started after it was seen, so every callback queued before its barrier
    /// call is ahead of it (see [`intake`](crate::docs::internal::callbacks::intake)).
    ///
    /// Returns how many entries it took, and whether a marker now waits behind callbacks.
    fn take_intake(&self, consumer: &mut Consumer, list: &mut SegCbList<Work>) -> (usize, bool) {
        let mut markers = Vec::new();
        let (mut took, mut bytes) = (0, 0u64);
        let mut limit = self.callbacks.config.batch.saturating_mul(INTAKE_BATCHES);
        loop {
            let seen = markers.len();
            took += consumer.take(&self.shard.intake, limit, |work| match work {
                Work::Callback(cb) => {
                    bytes += cb.bytes() as u64;
                    list.enqueue(Work::Callback(cb));
                }
                Work::Barrier(count) => markers.push(count),
            });
            if markers.len() == seen {
                break;
            }
            // New markers were seen: every object retired before their barrier calls is now in
            // a producer's local list (or being dropped by it): take them all, ahead of the
            // markers. The steal must follow *each* pass that finds a marker: a marker found in
            // a later pass may come from a thread that retired objects after the previous
            // steal. Then one more full pass over the intake before the markers may be
            // entrained.
            self.steal_locals(list, Which::All);
            limit = usize::MAX;
        }
        let callbacks = (took - markers.len()) as u64;
        self.shard.worker.count_taken(callbacks, bytes);
        let waits = self.entrain_markers(list, markers);
        (took, waits)
    }

    /// Entrain barrier markers behind the last non-empty segment; on an empty list, complete
    /// them once the batches handed back to producers have run. Returns whether a marker now
    /// waits behind callbacks.
    fn entrain_markers(&self, list: &mut SegCbList<Work>, markers: Vec<Arc<BarrierCount>>) -> bool {
        let mut waits = false;
        for count in markers {
            match list.entrain(Work::Barrier(count)) {
                Ok(()) => waits = true,
                Err(Work::Barrier(count)) => {
                    // Nothing queued before it is still in the list; batches handed back to
                    // producers may still be waiting or running: finish them, then complete the
                    // marker.
                    self.shard.hand_back.finish(|b| {
                        self.callbacks.run_batch(self.shard, b);
                    });
                    count.arrive(|m| self.callbacks.report_waker_panic(m));
                }
                Err(Work::Callback(_)) => unreachable!("entrain gives back what it was given"),
            }
        }
        waits
    }

    /// Take producers' local lists of retired objects (see
    /// [`local`](crate::docs::internal::callbacks::local)) into this worker: blocks whose grace
    /// period has already ended run now, the rest join NEXT. Returns how many callbacks were taken.
    fn steal_locals(&self, list: &mut SegCbList<Work>, which: Which) -> usize {
        let producers = self.shard.producers();
        let locals: Vec<&LocalRetires> = producers
            .iter()
            .map(|p| &p.local)
            .filter(|local| match which {
                Which::All => true,
                // (Every producer's look is recorded, so `&&` must not skip it.)
                Which::Idle => local.idle_since_last_look() & (local.len() > 0),
            })
            .collect();
        if locals.is_empty() {
            return 0;
        }
        let (mut took, mut bytes) = (0usize, 0u64);
        for taken in LocalRetires::steal_all(&locals, self.callbacks.config.fence) {
            for block in taken.blocks {
                took += block.len();
                bytes += block.bytes();
                let released = self.gp.released(block.cookie(), false);
                if released.is_some() {
                    self.callbacks
                        .count_released_by(released, block.len() as u64);
                    self.callbacks
                        .run_batch(self.shard, &mut block.into_callbacks());
                } else {
                    enqueue_all(list, block.into_callbacks());
                }
            }
            took += taken.open.len();
            bytes += taken.open.iter().map(|c| c.bytes() as u64).sum::<u64>();
            enqueue_all(list, taken.open);
        }
        self.shard.worker.count_taken(took as u64, bytes);
        took
    }

    /// *Accelerate*: stamp NEXT and request the normal grace period it needs.
    fn stamp(&self, list: &mut SegCbList<Work>) {
        if list.seg_len(NEXT) == 0 {
            return;
        }
        let cookie = self.gp.cookie();
        if list.accelerate(cookie, self.gp.expedited_releases()) {
            self.gp.request_normal(&cookie);
        }
    }

    /// *Advance*: move released segments to DONE, counting which kind released them.
    fn advance(&self, list: &mut SegCbList<Work>, draining: bool) {
        let released = list.advance(
            |cookie| self.gp.released(cookie, draining),
            |work| matches!(work, Work::Callback(_)),
        );
        let callbacks = self.callbacks;
        callbacks.count_released_by(Some(ReleasedBy::Normal), released.by_normal);
        callbacks.count_released_by(Some(ReleasedBy::Expedited), released.by_expedited);
    }

    /// Run up to `batch` DONE entries, or with `hand_back` give ready `retire` drops to producers
    /// (see [`hand_back`](crate::docs::internal::callbacks::hand_back)). Returns how many entries
    /// (callbacks and markers) it ran or handed back.
    fn run_done(&self, list: &mut SegCbList<Work>, hand_back: bool) -> usize {
        let mut taken = self.finish_ready_batches(hand_back);
        if hand_back {
            taken += self.hand_back_drops(list);
        }
        let mut run = RunDone {
            worker: self,
            hand_back,
            taken,
            invoked: 0,
            bytes: 0,
        };
        loop {
            match catch_unwind(AssertUnwindSafe(|| run.run(list))) {
                Ok(()) => break,
                Err(payload) => self.callbacks.report_panic(payload),
            }
        }
        run.flush();
        run.taken
    }

    /// Run the ready batches that must not wait for producers: with `hand_back`, those they
    /// have left waiting too long; without, all of them (producers are gone, or we are
    /// shutting down). Returns how many callbacks ran.
    fn finish_ready_batches(&self, hand_back: bool) -> usize {
        let ready = &self.shard.hand_back;
        let mut taken = 0usize;
        let mut run = |b: &mut Vec<_>| taken += self.callbacks.run_batch(self.shard, b) as usize;
        if hand_back {
            while let Some(mut b) = ready.take_stale() {
                run(&mut b);
                ready.finished(b);
            }
        } else {
            ready.finish(&mut run);
        }
        taken
    }

    /// Hand leading DONE drops back to producers in batches, while fewer than `MAX_BATCHES`
    /// wait. Returns how many it handed back.
    fn hand_back_drops(&self, list: &mut SegCbList<Work>) -> usize {
        let (ready, batch) = (&self.shard.hand_back, self.callbacks.config.batch);
        let mut taken = 0;
        while ready.queued() < MAX_BATCHES && front_is_drop(list) {
            let mut b = ready.empty_batch(batch);
            while b.len() < batch && front_is_drop(list) {
                match list.pop_done() {
                    Some(Work::Callback(cb)) => b.push(cb),
                    _ => unreachable!("the front entry is a drop-only callback"),
                }
            }
            taken += b.len();
            ready.publish(b);
        }
        taken
    }

    /// With more callbacks (or bytes) waiting for a grace period than the backlog thresholds,
    /// and nothing ready that only this worker will run, run an expedited grace period
    /// covering the newest stamp.
    fn hurry(&self, list: &SegCbList<Work>, hand_back: bool, draining: bool) {
        let config = &self.callbacks.config;
        if !self.gp.expedited_releases() && !draining {
            return;
        }
        // Callbacks that are ready and that only this worker will run come first: a grace
        // period now would only add to its work. Ready drops being handed back to producers do
        // not hold the grace period up: the producers run them, while the flood they come from
        // grows.
        if list.done_len() > 0 && !hand_back {
            return;
        }
        // Count what a grace period would release: entries still waiting for one. Callbacks
        // already ready (handed back to producers, or running) need none, and counting them
        // would run grace periods back to back for nothing. Their bytes are estimated from the
        // mean size of the shard's pending callbacks.
        let waiting = list.len() as u64;
        let (pending, bytes) = self.shard.worker.backlog();
        let waiting_bytes = if pending == 0 {
            0
        } else {
            (u128::from(bytes) * u128::from(waiting.min(pending)) / u128::from(pending)) as u64
        };
        let past_thresholds =
            waiting > config.backlog_callbacks || waiting_bytes > config.backlog_bytes;
        if !past_thresholds && !draining {
            return;
        }
        self.expedite_waiting(list);
    }

    /// A `barrier()` caller waits for the callbacks ahead of its marker: run the expedited
    /// grace period they need now instead of leaving them to a normal one (milliseconds), as
    /// the backlog hurry does, and with the same reasoning: while this worker waits for a
    /// reader none of its callbacks could be released anyway. Only where expedited grace
    /// periods release callbacks.
    fn hurry_for_barrier(&self, list: &SegCbList<Work>) {
        if !self.gp.expedited_releases() {
            return;
        }
        self.expedite_waiting(list);
    }

    /// Run (in this thread) the expedited grace period every stamped entry of `list` needs.
    fn expedite_waiting(&self, list: &SegCbList<Work>) {
        if let Some(cookie) = newest_stamp(list) {
            self.gp.run_expedited(&cookie);
        }
    }

    /// During shutdown: make the oldest waiting entries ready by running an expedited grace
    /// period in this thread (the grace-period threads may already be gone).
    pub(crate) fn drain_step(&self, list: &SegCbList<Work>) {
        let target = newest_stamp(list).unwrap_or_else(|| self.gp.cookie());
        self.gp.run_expedited(&target);
    }

    /// Park until woken, unless work arrived meanwhile.
    fn park(&self, consumer: &Consumer, list: &SegCbList<Work>) {
        let Some(how) = self.announce_park(consumer, list) else {
            return;
        };
        // Batches handed back to producers must not wait much longer than `PATIENCE`.
        let nap = if self.shard.hand_back.queued() > 0 {
            PATIENCE
        } else {
            TICK
        };
        std::thread::park_timeout(nap);
        // An idle worker keeps its state (and its barrier) until it finds work or a producer
        // wakes it (which sets Awake); see `run`.
        if how != Wake::Idle {
            self.shard.worker.sleeping.store(Wake::Awake);
        }
    }

    /// The worker's side of the wake handshake (step 2 of the
    /// [`shard`](crate::docs::internal::callbacks::shard) docs): announce how it is about to park,
    /// then look at the intake once more. Returns how it may park, or `None` if it must not (an
    /// entry arrived, or shutdown), with its state back to `Awake`.
    pub(crate) fn announce_park(
        &self,
        consumer: &Consumer,
        list: &SegCbList<Work>,
    ) -> Option<Wake> {
        // With entries waiting, a grace period we requested will wake us (and we take new
        // callbacks then); with none, producers must.
        let how = if list.is_empty() {
            Wake::Idle
        } else {
            Wake::WaitingForGp
        };
        let sleeping = &self.shard.worker.sleeping;
        if how == Wake::Idle {
            // If the state still says Idle from the last park (we woke for a grace period's
            // end or a tick, and no producer has woken us since), the barrier issued then still
            // holds: every producer that publishes from now on sees the state. Grace periods
            // wake an idle worker often, and a membarrier per wake-up would interrupt every
            // thread of the process each time.
            if sleeping.load() != Wake::Idle {
                sleeping.store(Wake::Idle);
                barrier::heavy(self.callbacks.config.fence, Heavy::Expedited);
            }
        } else {
            sleeping.store(how);
            crate::sync::fence(SeqCst);
        }
        if !consumer.is_drained(&self.shard.intake) || self.callbacks.is_shutting_down() {
            sleeping.store(Wake::Awake);
            return None;
        }
        Some(how)
    }
}

/// The stamp of the newest stamped segment of `list`, which covers every older one.
fn newest_stamp(list: &SegCbList<Work>) -> Option<crate::seq::GpCookie> {
    list.cookie(NEXT_READY).or(list.cookie(WAIT))
}

/// Append `callbacks` to NEXT.
fn enqueue_all(list: &mut SegCbList<Work>, callbacks: Vec<Callback>) {
    callbacks
        .into_iter()
        .for_each(|c| list.enqueue(Work::Callback(c)));
}

/// Is the oldest DONE entry a callback that only drops a box (one that may be handed back)?
fn front_is_drop(list: &SegCbList<Work>) -> bool {
    matches!(list.peek_done(), Some(Work::Callback(cb)) if cb.is_drop_only())
}

/// The worker running DONE entries, with its counts kept across a caught panic.
struct RunDone<'w, 'a, P> {
    worker: &'w Worker<'a, P>,
    hand_back: bool,
    /// Entries run or handed back in this pass (the bound is `batch`).
    taken: usize,
    /// Callbacks run and their bytes, not yet added to the shard's counters.
    invoked: u64,
    bytes: u64,
}

impl<P: GpPort> RunDone<'_, '_, P> {
    /// Run DONE entries until `batch` are taken, the list has none left, or (with
    /// `hand_back`) the front is a drop the next pass can hand back while there is room.
    fn run(&mut self, list: &mut SegCbList<Work>) {
        let batch = self.worker.callbacks.config.batch;
        let ready = &self.worker.shard.hand_back;
        while self.taken < batch {
            if self.hand_back && front_is_drop(list) && ready.queued() < MAX_BATCHES {
                // Left for the next pass to hand back.
                return;
            }
            // (With the queue full, the worker drops objects too: both threads work.)
            match list.pop_done() {
                None => return,
                Some(Work::Callback(cb)) => {
                    if !cb.is_drop_only() {
                        // Everything queued before a closure runs before it.
                        self.finish_handed_back();
                    }
                    self.taken += 1;
                    self.invoked += 1;
                    self.bytes += cb.bytes() as u64;
                    cb.invoke();
                }
                Some(Work::Barrier(count)) => {
                    self.taken += 1;
                    // Everything before the marker has run, including batches handed back:
                    // make the counters say so before the barrier returns.
                    self.finish_handed_back();
                    self.flush();
                    count.arrive(|m| self.worker.callbacks.report_waker_panic(m));
                }
            }
        }
    }

    /// Run (or wait for) every batch handed back to producers.
    fn finish_handed_back(&mut self) {
        let (callbacks, shard) = (self.worker.callbacks, self.worker.shard);
        let taken = &mut self.taken;
        shard
            .hand_back
            .finish(|b| *taken += callbacks.run_batch(shard, b) as usize);
    }

    /// Add the callbacks run so far to the shard's counters.
    fn flush(&mut self) {
        self.worker
            .shard
            .worker
            .count_invoked(self.invoked, self.bytes);
        self.invoked = 0;
        self.bytes = 0;
    }
}
