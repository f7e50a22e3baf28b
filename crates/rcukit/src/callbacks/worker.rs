//! The callback worker: one thread per shard, the user-space image of the kernel's offloaded
//! ("NOCB") callback kthreads.
//!
//! Each pass of the loop:
//!
//! 1. moves up to 16 × `batch` entries from the shard's lock-free intake into its segmented list
//!    (callbacks to NEXT, barrier markers entrained behind the last non-empty segment); on a
//!    barrier marker, first steals every producer's local list of retired objects (see
//!    [`local`](super::local)), and at most once per millisecond steals the lists of
//!    producers that have gone quiet;
//! 2. *accelerates*: stamps NEXT with a fresh full cookie and requests the normal grace period
//!    it needs;
//! 3. *advances*: moves every leading segment whose cookie polls complete, by the normal or,
//!    with `expedited_callbacks` on, the expedited counter, to DONE, counting which released it;
//! 4. runs up to `batch` DONE callbacks, each under `catch_unwind`; while producers are
//!    queuing, it first hands DONE `retire` drops back to them in batches (see
//!    [`ready`](super::ready)), runs drops itself only when four batches already wait, and
//!    runs what producers leave for longer than 1 ms;
//! 5. runs an expedited grace period if more callbacks than a threshold wait for a grace
//!    period and nothing is ready that only the worker will run (see
//!    [the backlog control](super#backlog-control));
//! 6. parks when there is nothing to do.
//!
//! The worker is subscribed to the domain's grace-period event, so the end of a grace period of
//! *either* kind unparks it ([seed 004](crate::docs::seeds)'s first notification gap). Producers unpark it when it
//! parked with nothing pending; while it waits for a grace period it asked for, new callbacks
//! wait to be taken when that grace period ends, and a producer nudges it only once per 1,024
//! callbacks (one wake-up per grace period instead of one per callback, while a flood is still
//! seen quickly). A periodic tick is only a safety net.
//!
//! On shutdown (the domain is being dropped) the worker keeps going until its intake and list
//! are empty, running expedited grace periods itself for whatever is still waiting, so nothing
//! queued is ever lost.

use super::callback::Work;
use super::intake::Consumer;
use super::local::LocalRetires;
use super::ready::{MAX_BATCHES, PATIENCE};
use super::segcblist::{ReleasedBy, SegCbList, NEXT, NEXT_READY, WAIT};
use super::{Callbacks, Shard, AWAKE, IDLE, SHARD_HINT, WAITING_FOR_GP, WORKER_OF};
use crate::barrier::{self, Heavy};
use crate::domain::Inner;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Duration;

/// A pass takes up to this many `batch`es from the intake: stamping, and under a backlog the
/// expedited grace period, are then paid once per large group of callbacks. Running callbacks
/// stays bounded by `batch` per pass.
const INTAKE_BATCHES: usize = 16;

/// How long a parked worker sleeps before looking around on its own.
const TICK: Duration = Duration::from_millis(10);

/// The body of worker thread `index` of the domain `inner`.
pub(crate) fn run(inner: &Inner, index: usize) {
    SHARD_HINT.with(|h| h.set(index));
    WORKER_OF.with(|w| w.set(inner.id));
    let shard = inner.callbacks.shard(index);
    let me = std::thread::current();
    *crate::sync::lock(&shard.worker.thread) = Some(me.clone());
    inner.event.subscribe(me);

    let mut consumer = Consumer::new();
    let mut list: SegCbList<Work> = SegCbList::new();
    loop {
        match step(inner, shard, &mut consumer, &mut list) {
            Step::Busy => {
                // Found work after an idle park: producers need not wake us any more.
                if shard.worker.sleeping.load(Relaxed) != AWAKE {
                    shard.worker.sleeping.store(AWAKE, Relaxed);
                }
            }
            Step::Idle => park(inner, shard, &consumer, &list),
            Step::Drain => drain_step(inner, &list),
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

/// One pass of the worker loop (steps 1-5 of the module docs).
pub(crate) fn step(
    inner: &Inner,
    shard: &Shard,
    consumer: &mut Consumer,
    list: &mut SegCbList<Work>,
) -> Step {
    let shutting_down = inner.callbacks.is_shutting_down();
    let mut took = take_intake(inner, shard, consumer, list);
    if shutting_down {
        took += steal_locals(inner, shard, list, Which::All);
    } else if shard.worker.scan_due() {
        took += steal_locals(inner, shard, list, Which::Idle);
    }
    stamp(inner, list);
    // A domain being dropped waits for no normal grace period: expedite everything.
    let draining = shutting_down || inner.callbacks.is_draining();
    advance(inner, list, draining);
    let hand_back = inner.callbacks.config.retire_on_producers
        && !shutting_down
        && consumer.taken_within(PATIENCE);
    let ran = run_done(inner, shard, list, hand_back);
    list.shrink_if_sparse();
    hurry(inner, shard, list, hand_back, draining);
    if took > 0 || ran > 0 || list.done_len() > 0 {
        Step::Busy
    } else if !shutting_down {
        Step::Idle
    } else if list.is_empty() && consumer.is_drained(&shard.intake) && shard.ready.is_quiet() {
        Step::Exit
    } else {
        Step::Drain
    }
}

/// Move published entries from the intake into the list: callbacks to NEXT, barrier markers
/// entrained behind everything taken so far. A marker is entrained only after a full pass that
/// started after it was seen, so every callback queued before its barrier call is ahead of it
/// (see [`intake`](super::intake)).
fn take_intake(
    inner: &Inner,
    shard: &Shard,
    consumer: &mut Consumer,
    list: &mut SegCbList<Work>,
) -> usize {
    let mut markers = Vec::new();
    let (mut took, mut bytes) = (0, 0u64);
    let mut limit = inner.callbacks.config.batch.saturating_mul(INTAKE_BATCHES);
    loop {
        let seen = markers.len();
        took += consumer.take(&shard.intake, limit, |work| match work {
            Work::Callback(cb) => {
                bytes += cb.bytes() as u64;
                list.enqueue(Work::Callback(cb));
            }
            Work::Barrier(count) => markers.push(count),
        });
        if markers.len() == seen {
            break;
        }
        // New markers were seen: every object retired before their barrier calls is now in a
        // producer's local list (or being dropped by it): take them all, ahead of the markers.
        // The steal must follow *each* pass that finds a marker: a marker found in a later
        // pass may come from a thread that retired objects after the previous steal. Then one
        // more full pass over the intake before the markers may be entrained.
        steal_locals(inner, shard, list, Which::All);
        limit = usize::MAX;
    }
    let callbacks = (took - markers.len()) as u64;
    if callbacks > 0 {
        let worker = &shard.worker;
        worker
            .taken
            .store(worker.taken.load(Relaxed).wrapping_add(callbacks), Relaxed);
        worker.taken_bytes.store(
            worker.taken_bytes.load(Relaxed).wrapping_add(bytes),
            Relaxed,
        );
    }
    for count in markers {
        if let Err(Work::Barrier(count)) = list.entrain(Work::Barrier(count)) {
            // Nothing queued before it is still in the list; batches handed back to producers
            // may still be waiting or running: finish them, then complete the marker.
            let callbacks = &inner.callbacks;
            shard.ready.finish(|b| {
                callbacks.run_batch(shard, b);
            });
            count.arrive();
        }
    }
    took
}

/// Which producers' local lists a steal takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    /// Every one (a barrier marker arrived, or shutdown), and wait for their drops.
    All,
    /// Those with callbacks whose owner queued nothing since the previous look.
    Idle,
}

/// Take producers' local lists of retired objects (see [`local`](super::local)) into this
/// worker: blocks whose grace period has already ended run now, the rest join NEXT. Returns
/// how many callbacks were taken.
fn steal_locals(inner: &Inner, shard: &Shard, list: &mut SegCbList<Work>, which: Which) -> usize {
    let producers = Callbacks::producers_of(shard);
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
    let callbacks = &inner.callbacks;
    let (mut took, mut bytes) = (0usize, 0u64);
    for taken in LocalRetires::steal_all(&locals, callbacks.config.fence) {
        for mut block in taken.blocks {
            took += block.callbacks.len();
            bytes += block
                .callbacks
                .iter()
                .map(|c| c.bytes() as u64)
                .sum::<u64>();
            if callbacks.expired(inner, &block.cookie) {
                callbacks.count_released(inner, &block);
                callbacks.run_batch(shard, &mut block.callbacks);
            } else {
                block
                    .callbacks
                    .into_iter()
                    .for_each(|c| list.enqueue(Work::Callback(c)));
            }
        }
        took += taken.open.len();
        for c in taken.open {
            bytes += c.bytes() as u64;
            list.enqueue(Work::Callback(c));
        }
    }
    if took > 0 {
        let worker = &shard.worker;
        worker.taken.store(
            worker.taken.load(Relaxed).wrapping_add(took as u64),
            Relaxed,
        );
        worker.taken_bytes.store(
            worker.taken_bytes.load(Relaxed).wrapping_add(bytes),
            Relaxed,
        );
    }
    took
}

fn stamp(inner: &Inner, list: &mut SegCbList<Work>) {
    if list.seg_len(NEXT) == 0 {
        return;
    }
    let cookie = inner.get_state();
    if list.accelerate(cookie, inner.callbacks.config.expedited) {
        inner.normal.request(cookie.normal);
    }
}

fn advance(inner: &Inner, list: &mut SegCbList<Work>, draining: bool) {
    let by_expedited = inner.callbacks.config.expedited || draining;
    let released = list.advance(
        |cookie| {
            if inner.normal.seq.poll(cookie.normal) {
                Some(ReleasedBy::Normal)
            } else if by_expedited && inner.exp.seq.poll(cookie.expedited) {
                Some(ReleasedBy::Expedited)
            } else {
                None
            }
        },
        |work| matches!(work, Work::Callback(_)),
    );
    if released.by_normal > 0 {
        inner
            .callbacks
            .released_by_normal
            .fetch_add(released.by_normal, Relaxed);
    }
    if released.by_expedited > 0 {
        inner
            .callbacks
            .released_by_expedited
            .fetch_add(released.by_expedited, Relaxed);
    }
}

/// Run up to `batch` DONE entries, or with `hand_back` give ready `retire` drops to producers
/// (see [`ready`](super::ready)). Returns how many entries (callbacks and markers) it ran or
/// handed back.
fn run_done(inner: &Inner, shard: &Shard, list: &mut SegCbList<Work>, hand_back: bool) -> usize {
    let callbacks = &inner.callbacks;
    let batch = callbacks.config.batch;
    let ready = &shard.ready;
    let mut taken = 0usize;
    let mut run = |b: &mut Vec<_>| taken += callbacks.run_batch(shard, b) as usize;
    if hand_back {
        // Batches the producers have left waiting too long.
        while let Some(mut b) = ready.take_stale() {
            run(&mut b);
            ready.finished(b);
        }
    } else {
        // Producers are gone (or we are shutting down): run what they did not take.
        ready.finish(&mut run);
    }
    if hand_back {
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
    }
    let mut invoked = 0u64;
    let mut bytes = 0u64;
    let flush = |invoked: &mut u64, bytes: &mut u64| {
        if *invoked > 0 {
            shard.worker.invoked.fetch_add(*invoked, Relaxed);
            shard.worker.invoked_bytes.fetch_add(*bytes, Relaxed);
            *invoked = 0;
            *bytes = 0;
        }
    };
    loop {
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            while taken < batch {
                if hand_back && front_is_drop(list) && ready.queued() < MAX_BATCHES {
                    // Left for the next pass to hand back.
                    return;
                }
                // (With the queue full, the worker drops objects too: both threads work.)
                match list.pop_done() {
                    None => return,
                    Some(Work::Callback(cb)) => {
                        if !cb.is_drop_only() {
                            // Everything queued before a closure runs before it.
                            ready.finish(|b| taken += callbacks.run_batch(shard, b) as usize);
                        }
                        taken += 1;
                        invoked += 1;
                        bytes += cb.bytes() as u64;
                        cb.invoke();
                    }
                    Some(Work::Barrier(count)) => {
                        taken += 1;
                        // Everything before the marker has run, including batches handed
                        // back: make the counters say so before the barrier returns.
                        ready.finish(|b| taken += callbacks.run_batch(shard, b) as usize);
                        flush(&mut invoked, &mut bytes);
                        count.arrive();
                    }
                }
            }
        }));
        match outcome {
            Ok(()) => break,
            Err(payload) => callbacks.report_panic(payload),
        }
    }
    flush(&mut invoked, &mut bytes);
    taken
}

/// Is the oldest DONE entry a callback that only drops a box (one that may be handed back)?
fn front_is_drop(list: &SegCbList<Work>) -> bool {
    matches!(list.peek_done(), Some(Work::Callback(cb)) if cb.is_drop_only())
}

/// With more callbacks (or bytes) waiting for a grace period than the backlog thresholds, and
/// nothing ready that only this worker will run, run an expedited grace period covering the
/// newest stamp.
fn hurry(inner: &Inner, shard: &Shard, list: &SegCbList<Work>, hand_back: bool, draining: bool) {
    let config = &inner.callbacks.config;
    if !config.expedited && !draining {
        return;
    }
    // Callbacks that are ready and that only this worker will run come first: a grace period
    // now would only add to its work. Ready drops being handed back to producers do not hold
    // the grace period up: the producers run them, while the flood they come from grows.
    if list.done_len() > 0 && !hand_back {
        return;
    }
    // Count what a grace period would release: entries still waiting for one. Callbacks
    // already ready (handed back to producers, or running) need none, and counting them would
    // run grace periods back to back for nothing. Their bytes are estimated from the mean
    // size of the shard's pending callbacks.
    let waiting = list.len() as u64;
    let (pending, bytes) = shard.worker.backlog();
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
    if let Some(cookie) = list.cookie(NEXT_READY).or(list.cookie(WAIT)) {
        inner
            .exp
            .run_until(cookie.expedited, &inner.core, &inner.event);
    }
}

/// During shutdown: make the oldest waiting entries ready by running an expedited grace period
/// in this thread (the grace-period threads may already be gone).
pub(crate) fn drain_step(inner: &Inner, list: &SegCbList<Work>) {
    let target = match list.cookie(NEXT_READY).or(list.cookie(WAIT)) {
        Some(cookie) => cookie.expedited,
        None => inner.exp.seq.snap(),
    };
    inner.exp.run_until(target, &inner.core, &inner.event);
}

fn park(inner: &Inner, shard: &Shard, consumer: &Consumer, list: &SegCbList<Work>) {
    // With entries waiting, a grace period we requested will wake us (and we take new
    // callbacks then); with none, producers must.
    let how = if list.is_empty() {
        IDLE
    } else {
        WAITING_FOR_GP
    };
    let sleeping = &shard.worker.sleeping;
    if how == IDLE {
        // Pairs with producers' light barrier (see `Shard::wake_if_sleeping`). If the flag
        // still says IDLE from the last park (we woke for a grace period's end or a tick, and
        // no producer has woken us since), the barrier issued then still holds: every producer
        // that publishes from now on sees the flag. Grace periods wake an idle worker often,
        // and a membarrier per wake-up would interrupt every thread of the process each time.
        if sleeping.load(Relaxed) != IDLE {
            sleeping.store(IDLE, Relaxed);
            barrier::heavy(inner.callbacks.config.fence, Heavy::Expedited);
        }
    } else {
        sleeping.store(how, Relaxed);
        std::sync::atomic::fence(SeqCst);
    }
    if !consumer.is_drained(&shard.intake) || inner.callbacks.is_shutting_down() {
        sleeping.store(AWAKE, Relaxed);
        return;
    }
    // Batches handed back to producers must not wait much longer than `PATIENCE`.
    let nap = if shard.ready.queued() > 0 {
        PATIENCE
    } else {
        TICK
    };
    std::thread::park_timeout(nap);
    // An idle worker keeps its flag (and its barrier) until it finds work or a producer wakes
    // it (which sets AWAKE); see `run`.
    if how != IDLE {
        sleeping.store(AWAKE, Relaxed);
    }
}
