//! Behaviour of `call`, `retire` and `barrier`: nothing early, nothing lost, nothing twice.

mod common;

use rcukit::Rcu;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn domain() -> Rcu {
    Rcu::builder().build().unwrap()
}

/// An object whose drop is recorded in a side table that outlives it.
struct Tracked {
    id: usize,
    drops: Arc<Vec<AtomicU8>>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.drops[self.id].fetch_add(1, Ordering::AcqRel);
    }
}

#[test]
fn a_million_retired_objects_each_dropped_once_never_under_a_reader() {
    const OBJECTS: usize = 1_000_000;
    const SLOTS: usize = 64;
    let rcu = Rcu::builder().name("million").build().unwrap();
    let drops: Arc<Vec<AtomicU8>> =
        Arc::new((0..OBJECTS + SLOTS).map(|_| AtomicU8::new(0)).collect());
    let new = |id: usize| {
        Box::into_raw(Box::new(Tracked {
            id,
            drops: drops.clone(),
        }))
    };
    let slots: Vec<AtomicPtr<Tracked>> = (0..SLOTS).map(|i| AtomicPtr::new(new(i))).collect();
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let early = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        for r in 0..2 {
            let (rcu, slots, stop, reads, early, drops) =
                (&rcu, &slots, &stop, &reads, &early, &drops);
            s.spawn(move || {
                let mut i = r;
                let mut n = 0u64;
                // At least one read, however late a loaded machine starts this thread.
                while !stop.load(Ordering::Relaxed) || n == 0 {
                    let _g = rcu.read();
                    i = (i * 7 + 3) % SLOTS;
                    // SAFETY: objects are retired only after being unpublished, and freed after a
                    // grace period; we are inside a read-side critical section.
                    let obj = unsafe { &*slots[i].load(Ordering::Acquire) };
                    if drops[obj.id].load(Ordering::Acquire) != 0 {
                        early.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                }
                reads.fetch_add(n, Ordering::Relaxed);
            });
        }
        let mut slot = 0;
        for id in SLOTS..SLOTS + OBJECTS {
            slot = (slot + 1) % SLOTS;
            let old = slots[slot].swap(new(id), Ordering::AcqRel);
            // SAFETY: `old` came from Box::into_raw and has just been unpublished.
            rcu.retire(unsafe { Box::from_raw(old) });
        }
        let elapsed = start.elapsed();
        rcu.barrier();
        println!(
            "retired {OBJECTS} in {elapsed:.2?} ({:.1} M/s), all dropped {:.2?} after start",
            OBJECTS as f64 / elapsed.as_secs_f64() / 1e6,
            start.elapsed()
        );
        stop.store(true, Ordering::Relaxed);
    });
    let stats = rcu.stats();
    println!("{stats:?}, reads {}", reads.load(Ordering::Relaxed));
    assert_eq!(
        early.load(Ordering::Relaxed),
        0,
        "a reader held a dropped object"
    );
    assert!(reads.load(Ordering::Relaxed) > 0);
    assert_eq!(stats.callbacks_queued, OBJECTS as u64);
    assert_eq!(stats.callbacks_invoked, OBJECTS as u64);
    assert_eq!(stats.callbacks_pending, 0);
    assert_eq!(stats.pending_bytes, 0);
    assert_eq!(
        stats.released_by_normal + stats.released_by_expedited,
        OBJECTS as u64,
        "every callback released by exactly one kind of grace period"
    );
    // Every retired object dropped exactly once; the published ones not at all.
    for slot in &slots {
        // SAFETY: all readers are done; each published object is owned by its slot.
        drop(unsafe { Box::from_raw(slot.load(Ordering::Acquire)) });
    }
    assert!(drops.iter().all(|d| d.load(Ordering::Relaxed) == 1));
}

#[test]
fn call_and_retire_do_not_wait_and_work_inside_a_reader() {
    // A 10 s batching window: anything that waited for a normal grace period would hang here.
    let rcu = Rcu::builder()
        .normal_gp_delay(Duration::from_secs(10))
        .build()
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    {
        let _g = rcu.read();
        for _ in 0..100 {
            let ran = ran.clone();
            rcu.call(move || {
                ran.fetch_add(1, Ordering::Relaxed);
            });
            rcu.retire(Box::new([0u8; 64]));
        }
        assert_eq!(
            ran.load(Ordering::Relaxed),
            0,
            "nothing runs under a reader"
        );
        // Read while the reader still holds back every grace period: once it leaves, one the
        // backlog already started (at 64 callbacks in the `rcukit_small` build) may end and
        // release some of them before the counts are read.
        assert_eq!(rcu.stats().callbacks_queued, 200);
        assert_eq!(rcu.stats().pending_bytes, 100 * 64 + 100 * 8);
    }
    // Expedited grace periods release them (no normal one will complete for 10 s).
    while rcu.stats().callbacks_pending > 0 {
        rcu.synchronize_expedited();
        std::thread::sleep(Duration::from_millis(1));
    }
    rcu.barrier();
    assert_eq!(ran.load(Ordering::Relaxed), 100);
    assert_eq!(rcu.stats().normal_gps, 0);
    assert_eq!(rcu.stats().released_by_expedited, 200);
}

#[test]
fn barrier_with_nothing_queued_returns() {
    let rcu = domain();
    rcu.barrier();
    rcu.barrier();
    Rcu::global().barrier();
}

#[test]
fn barrier_waits_for_callbacks_of_every_worker() {
    let rcu = Rcu::builder().callback_workers(3).build().unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| {
                for _ in 0..1000 {
                    let ran = ran.clone();
                    rcu.call(move || {
                        ran.fetch_add(1, Ordering::Relaxed);
                    });
                }
            });
        }
    });
    rcu.barrier();
    assert_eq!(ran.load(Ordering::Relaxed), 6000);
    assert_eq!(rcu.stats().callbacks_pending, 0);
}

/// Increments its counter when dropped: a retired object that says it was reclaimed.
struct CountsDrop(Arc<Vec<AtomicU64>>, usize);

impl Drop for CountsDrop {
    fn drop(&mut self) {
        self.0[self.1].fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn barrier_racing_with_producers() {
    barrier_race(false);
}

/// The same race with `retire`: the objects sit in the producers' own lists (see
/// `callbacks::local`), which each barrier must reach.
#[test]
fn barrier_racing_with_retiring_producers() {
    barrier_race(true);
}

fn barrier_race(retire: bool) {
    let rcu = Rcu::builder().callback_workers(2).build().unwrap();
    const PRODUCERS: usize = 3;
    let queued: Vec<AtomicU64> = (0..PRODUCERS).map(|_| AtomicU64::new(0)).collect();
    let ran: Arc<Vec<AtomicU64>> = Arc::new((0..PRODUCERS).map(|_| AtomicU64::new(0)).collect());
    let stop = AtomicBool::new(false);
    let mut barriers = 0;
    std::thread::scope(|s| {
        for p in 0..PRODUCERS {
            let (rcu, queued, ran, stop) = (&rcu, &queued, &ran, &stop);
            s.spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let ran = ran.clone();
                    if retire {
                        rcu.retire(Box::new(CountsDrop(ran, p)));
                    } else {
                        rcu.call(move || {
                            ran[p].fetch_add(1, Ordering::Relaxed);
                        });
                    }
                    queued[p].fetch_add(1, Ordering::Release);
                    n += 1;
                    // Three unthrottled producers would outrun the one worker on two cores
                    // (a flood: correct, but every barrier would wait behind millions).
                    if n % 64 == 0 {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
            });
        }
        // Stop the producers even if an assertion below fails, so the scope can end.
        let _stop = common::support::StopOnDrop(&stop);
        // 1.5 s and at least four barriers, however slow a loaded machine makes them.
        let deadline = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < deadline || barriers < 4 {
            let before: Vec<u64> = queued.iter().map(|q| q.load(Ordering::Acquire)).collect();
            rcu.barrier();
            barriers += 1;
            for p in 0..PRODUCERS {
                let done = ran[p].load(Ordering::Relaxed);
                assert!(
                    done >= before[p],
                    "barrier returned with callbacks of producer {p} queued before it still \
                     pending ({done} ran, {} queued before)",
                    before[p]
                );
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    rcu.barrier();
    assert!(barriers > 3);
    for p in 0..PRODUCERS {
        assert_eq!(
            ran[p].load(Ordering::Relaxed),
            queued[p].load(Ordering::Relaxed)
        );
    }
}

#[test]
fn chains_of_callbacks_run_to_the_end() {
    let rcu = Arc::new(domain());
    let links = Arc::new(AtomicUsize::new(0));
    fn link(rcu: Arc<Rcu>, links: Arc<AtomicUsize>, left: usize) {
        links.fetch_add(1, Ordering::Relaxed);
        if left > 0 {
            let next = rcu.clone();
            rcu.call(move || link(next, links, left - 1));
        }
    }
    for _ in 0..5 {
        let (r, l) = (rcu.clone(), links.clone());
        rcu.call(move || link(r, l, 9));
    }
    // A barrier does not wait for callbacks queued after it; loop until nothing is pending.
    while rcu.stats().callbacks_pending > 0 {
        rcu.barrier();
    }
    assert_eq!(links.load(Ordering::Relaxed), 50);
}

#[test]
fn dropping_a_domain_runs_every_pending_callback_including_chains() {
    let ran = Arc::new(AtomicUsize::new(0));
    let rcu = Arc::new(
        Rcu::builder()
            .normal_gp_delay(Duration::from_millis(100))
            .callback_workers(2)
            .build()
            .unwrap(),
    );
    for _ in 0..10_000 {
        let ran = ran.clone();
        rcu.call(move || {
            ran.fetch_add(1, Ordering::Relaxed);
        });
    }
    // A chain that holds only a Weak reference, so it does not keep the domain alive.
    {
        let weak = Arc::downgrade(&rcu);
        let ran = ran.clone();
        rcu.call(move || {
            if let Some(rcu) = weak.upgrade() {
                let ran = ran.clone();
                rcu.call(move || {
                    ran.fetch_add(1, Ordering::Relaxed);
                });
            }
            ran.fetch_add(1, Ordering::Relaxed);
        });
    }
    // The chain may already be running and hold the domain it upgraded for a moment: wait
    // for it to let go, as an owner that drops a shared domain must.
    let mut rcu = rcu;
    let rcu = loop {
        match Arc::try_unwrap(rcu) {
            Ok(rcu) => break rcu,
            Err(shared) => {
                rcu = shared;
                std::thread::yield_now();
            }
        }
    };
    drop(rcu);
    let n = ran.load(Ordering::Relaxed);
    assert!(n == 10_002 || n == 10_001, "{n}");
    // If the chain's upgrade raced with the drop and lost, it ran without re-queuing: the
    // dropping thread held the only strong reference, so the upgrade can only fail once the
    // drop has begun. Either way nothing queued was lost.
}

#[test]
fn a_panicking_callback_is_caught_counted_and_the_rest_still_run() {
    let rcu = Arc::new(Rcu::builder().name("panics").build().unwrap());
    let ran = Arc::new(AtomicUsize::new(0));
    for i in 0..100 {
        let ran = ran.clone();
        rcu.call(move || {
            if i == 50 {
                panic!("callback {i} fails on purpose");
            }
            ran.fetch_add(1, Ordering::Relaxed);
        });
    }
    // barrier() from inside a callback of the same domain is misuse: it panics (caught too).
    let inner = rcu.clone();
    rcu.call(move || inner.barrier());
    rcu.barrier();
    let stats = rcu.stats();
    assert_eq!(ran.load(Ordering::Relaxed), 99);
    assert_eq!(stats.callback_panics, 2);
    assert_eq!(stats.callbacks_invoked, 101);
    assert_eq!(stats.callbacks_pending, 0);
}

/// Seed 004's A/B in a test: with expedited grace periods running every few milliseconds,
/// callbacks are released by them only when the switch is on.
fn expedited_releases(enabled: bool) -> rcukit::Stats {
    let rcu = Rcu::builder()
        .expedited_callbacks(enabled)
        .normal_gp_delay(Duration::from_millis(20))
        .build()
        .unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                rcu.synchronize_expedited();
                std::thread::sleep(Duration::from_millis(3));
            }
        });
        for _ in 0..40 {
            for _ in 0..50 {
                rcu.retire(Box::new([0u8; 256]));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        rcu.barrier();
        stop.store(true, Ordering::Relaxed);
    });
    rcu.stats()
}

#[test]
fn expedited_grace_periods_release_callbacks_only_with_the_switch_on() {
    let on = expedited_releases(true);
    let off = expedited_releases(false);
    println!("on: {on:?}\noff: {off:?}");
    assert!(on.released_by_expedited > 0, "{on:?}");
    assert_eq!(off.released_by_expedited, 0, "{off:?}");
    assert_eq!(off.released_by_normal, 2000);
    assert_eq!(on.released_by_normal + on.released_by_expedited, 2000);
}

#[test]
fn a_backlog_past_the_threshold_hurries_with_expedited_grace_periods() {
    // Normal grace periods are held back by a 10 s window: only the backlog control's
    // expedited grace periods can release these callbacks.
    let rcu = Rcu::builder()
        .normal_gp_delay(Duration::from_secs(10))
        .backlog_callbacks(100)
        .build()
        .unwrap();
    for _ in 0..5_000 {
        rcu.retire(Box::new(0u64));
    }
    // As long as a loaded machine may need, short of the normal grace period's 10 s delay.
    let deadline = Instant::now() + Duration::from_secs(9);
    while rcu.stats().callbacks_pending > 100 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    let stats = rcu.stats();
    assert!(stats.callbacks_pending <= 100, "{stats:?}");
    assert!(stats.expedited_gps > 0);
    assert_eq!(stats.normal_gps, 0);
    // The last few (at or under the threshold) wait for a grace period of either kind.
    rcu.synchronize_expedited();
    rcu.barrier();
}

#[test]
fn byte_threshold_also_hurries() {
    let rcu = Rcu::builder()
        .normal_gp_delay(Duration::from_secs(10))
        .backlog_bytes(64 * 1024)
        .build()
        .unwrap();
    for _ in 0..200 {
        rcu.retire(Box::new([0u8; 4096]));
    }
    // As long as a loaded machine may need, short of the normal grace period's 10 s delay.
    let deadline = Instant::now() + Duration::from_secs(9);
    while rcu.stats().pending_bytes > 64 * 1024 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    let stats = rcu.stats();
    assert!(stats.pending_bytes <= 64 * 1024, "{stats:?}");
    assert_eq!(stats.normal_gps, 0);
}

// --- retired objects dropped by the threads that retire (`retire_on_producers`) -------------

thread_local! {
    static IS_PRODUCER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Records, when dropped, whether it was dropped on a thread marked as the producer; panics
/// in its drop when asked to (after recording).
struct Recorded {
    on_producer: Arc<AtomicU64>,
    on_other: Arc<AtomicU64>,
    panics_on_producer: Arc<AtomicU64>,
    panic: bool,
}

impl Drop for Recorded {
    fn drop(&mut self) {
        let on_producer = IS_PRODUCER.with(|p| p.get());
        if on_producer {
            self.on_producer.fetch_add(1, Ordering::Relaxed);
        } else {
            self.on_other.fetch_add(1, Ordering::Relaxed);
        }
        if self.panic {
            if on_producer {
                self.panics_on_producer.fetch_add(1, Ordering::Relaxed);
            }
            panic!("a retired object's drop fails on purpose");
        }
    }
}

#[derive(Default, Clone)]
struct Counters {
    on_producer: Arc<AtomicU64>,
    on_other: Arc<AtomicU64>,
    panics_on_producer: Arc<AtomicU64>,
}

/// A `flood` goal: the producer has run at least one ready batch.
fn some_ran_on_the_producer(rcu: &Rcu) -> bool {
    rcu.stats().callbacks_run_by_producers > 0
}

impl Counters {
    /// Objects dropped so far, on any thread.
    fn dropped(&self) -> u64 {
        self.on_producer.load(Ordering::Relaxed) + self.on_other.load(Ordering::Relaxed)
    }

    fn object(&self, panic: bool) -> Box<Recorded> {
        Box::new(Recorded {
            on_producer: self.on_producer.clone(),
            on_other: self.on_other.clone(),
            panics_on_producer: self.panics_on_producer.clone(),
            panic,
        })
    }
}

/// Retire objects in a flood from this thread (marked as the producer) until `done` says so or
/// 20 s pass; returns how many were retired.
fn flood(rcu: &Rcu, c: &Counters, panic_every: u64, done: impl Fn(&Rcu) -> bool) -> u64 {
    IS_PRODUCER.with(|p| p.set(true));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut n = 0u64;
    while !(n >= 100_000 && done(rcu)) {
        assert!(Instant::now() < deadline, "flood did not reach its goal");
        for _ in 0..10_000 {
            n += 1;
            rcu.retire(c.object(panic_every != 0 && n % panic_every == 0));
        }
    }
    IS_PRODUCER.with(|p| p.set(false));
    n
}

#[test]
fn a_flood_of_retires_is_dropped_by_the_retiring_thread() {
    let rcu = domain();
    let c = Counters::default();
    let n = flood(&rcu, &c, 0, some_ran_on_the_producer);
    rcu.barrier();
    let stats = rcu.stats();
    let (mine, others) = (
        c.on_producer.load(Ordering::Relaxed),
        c.on_other.load(Ordering::Relaxed),
    );
    println!("{n} retired: {mine} dropped by the producer, {others} by the worker; {stats:?}");
    assert_eq!(mine + others, n, "each object dropped once");
    assert_eq!(stats.callbacks_run_by_producers, mine);
    assert_eq!(stats.callbacks_invoked, n);
    assert_eq!(stats.callbacks_pending, 0);
    assert_eq!(stats.pending_bytes, 0);
}

#[test]
fn with_retire_on_producers_off_every_drop_runs_on_a_worker() {
    let rcu = Rcu::builder().retire_on_producers(false).build().unwrap();
    let c = Counters::default();
    let n = flood(&rcu, &c, 0, |_| true);
    rcu.barrier();
    assert_eq!(c.on_producer.load(Ordering::Relaxed), 0);
    assert_eq!(c.on_other.load(Ordering::Relaxed), n);
    assert_eq!(rcu.stats().callbacks_run_by_producers, 0);
}

#[test]
fn closures_run_on_the_worker_after_every_earlier_retired_object_is_dropped() {
    let rcu = domain();
    let c = Counters::default();
    let misplaced = Arc::new(AtomicU64::new(0));
    let out_of_order = Arc::new(AtomicU64::new(0));
    IS_PRODUCER.with(|p| p.set(true));
    let mut retired = 0u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    while retired < 200_000 || rcu.stats().callbacks_run_by_producers == 0 {
        assert!(Instant::now() < deadline, "no batch was handed back");
        for _ in 0..2_000 {
            retired += 1;
            rcu.retire(c.object(false));
        }
        let (c2, misplaced, out_of_order) = (c.clone(), misplaced.clone(), out_of_order.clone());
        let before = retired;
        rcu.call(move || {
            if IS_PRODUCER.with(|p| p.get()) {
                misplaced.fetch_add(1, Ordering::Relaxed);
            }
            if c2.dropped() < before {
                out_of_order.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    IS_PRODUCER.with(|p| p.set(false));
    rcu.barrier();
    assert_eq!(
        misplaced.load(Ordering::Relaxed),
        0,
        "a closure ran on the producer"
    );
    assert_eq!(
        out_of_order.load(Ordering::Relaxed),
        0,
        "a closure ran before an object retired ahead of it was dropped"
    );
    assert_eq!(c.dropped(), retired);
}

#[test]
fn a_panicking_drop_on_a_producer_is_caught_and_counted() {
    let rcu = domain();
    let c = Counters::default();
    let n = flood(&rcu, &c, 20_000, |_| {
        c.panics_on_producer.load(Ordering::Relaxed) > 0
    });
    rcu.barrier();
    let stats = rcu.stats();
    assert_eq!(stats.callback_panics, n / 20_000);
    assert_eq!(c.dropped(), n);
    assert_eq!(stats.callbacks_pending, 0);
}

#[test]
fn batches_a_producer_leaves_behind_are_dropped_without_another_call() {
    let rcu = domain();
    let c = Counters::default();
    let n = flood(&rcu, &c, 0, some_ran_on_the_producer);
    // No barrier, no more calls: the worker must take back what the producer left.
    let deadline = Instant::now() + Duration::from_secs(20);
    while rcu.stats().callbacks_pending > 0 {
        assert!(Instant::now() < deadline, "{:?}", rcu.stats());
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(c.dropped(), n);
}

#[test]
fn a_few_objects_retired_by_a_thread_that_then_waits_are_dropped_without_another_call() {
    // Fewer objects than a block, from a thread that then blocks: the worker must find the
    // list left behind and release it (no barrier, no more calls).
    let rcu = domain();
    let dropped = Arc::new(vec![AtomicU64::new(0)]);
    std::thread::scope(|s| {
        // (A failed assertion drops `tx`, which ends the other thread's wait.)
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (rcu, dropped) = (&rcu, &dropped);
        s.spawn(move || {
            for _ in 0..10 {
                rcu.retire(Box::new(CountsDrop(dropped.clone(), 0)));
            }
            // Stay alive (and quiet) until the main thread has seen the drops.
            let _ = rx.recv();
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while dropped[0].load(Ordering::Relaxed) < 10 {
            assert!(Instant::now() < deadline, "{:?}", rcu.stats());
            std::thread::sleep(Duration::from_millis(1));
        }
        tx.send(()).unwrap();
    });
    // A batch is counted as invoked once the whole of it has run, a moment after its last
    // drop: wait for the count too.
    let deadline = Instant::now() + Duration::from_secs(20);
    while rcu.stats().callbacks_invoked < 10 {
        assert!(Instant::now() < deadline, "{:?}", rcu.stats());
        std::thread::sleep(Duration::from_millis(1));
    }
    let stats = rcu.stats();
    assert_eq!(stats.callbacks_pending, 0);
    assert_eq!(stats.callbacks_invoked, 10);
}

#[test]
fn objects_retired_by_threads_that_exit_are_dropped_by_barrier() {
    let rcu = domain();
    let dropped = Arc::new(vec![AtomicU64::new(0)]);
    for _ in 0..4 {
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..1_000 {
                    rcu.retire(Box::new(CountsDrop(dropped.clone(), 0)));
                }
            });
        });
    }
    rcu.barrier();
    assert_eq!(dropped[0].load(Ordering::Relaxed), 4_000);
    let stats = rcu.stats();
    assert_eq!(stats.callbacks_queued, 4_000);
    assert_eq!(stats.callbacks_invoked, 4_000);
    assert_eq!(stats.callbacks_pending, 0);
}

#[test]
fn a_flood_is_reclaimed_by_the_retiring_thread_with_expedited_grace_periods() {
    // Normal grace periods are held back by a 10 s window: objects can only be released by
    // the expedited grace periods that the retiring thread asks for past the threshold, and
    // the retiring thread drops them itself while the flood goes on.
    let rcu = Rcu::builder()
        .normal_gp_delay(Duration::from_secs(10))
        .backlog_callbacks(1_000)
        .build()
        .unwrap();
    let c = Counters::default();
    let n = flood(&rcu, &c, 0, |rcu| {
        rcu.stats().callbacks_run_by_producers > 0
    });
    let stats = rcu.stats();
    assert_eq!(stats.normal_gps, 0, "{stats:?}");
    assert!(stats.expedited_gps > 0, "{stats:?}");
    assert!(stats.released_by_expedited > 0, "{stats:?}");
    assert_eq!(
        c.on_producer.load(Ordering::Relaxed),
        stats.callbacks_run_by_producers
    );
    // The rest (left in the thread's list, then taken by the worker) go with more expedited
    // grace periods.
    let deadline = Instant::now() + Duration::from_secs(20);
    while rcu.stats().callbacks_pending > 0 {
        assert!(Instant::now() < deadline, "{:?}", rcu.stats());
        rcu.synchronize_expedited();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(c.dropped(), n);
    assert_eq!(rcu.stats().normal_gps, 0);
}

/// A thread that retires a flood tries expedited grace periods itself: with no reader in the
/// way the first one ends at once (nobody else holds the turn yet), and the thread drops the
/// objects it released in its later `retire` calls, with no `synchronize`, no hurry (the
/// backlog thresholds are out of reach) and no normal grace period needed. How small the
/// backlog stays depends on the scheduler, so it is a figure of `--bench callbacks`
/// (`peak backlog`), not an assertion here.
#[test]
fn a_retiring_thread_tries_expedited_grace_periods_and_drops_as_it_goes() {
    let rcu = Rcu::builder()
        .backlog_callbacks(u64::MAX)
        .backlog_bytes(u64::MAX)
        .normal_gp_delay(Duration::from_secs(10)) // normal grace periods out of the picture
        .producer_backlog_callbacks(1024)
        .build()
        .unwrap();
    let c = Counters::default();
    IS_PRODUCER.with(|p| p.set(true));
    for _ in 0..100_000u64 {
        rcu.retire(c.object(false));
    }
    IS_PRODUCER.with(|p| p.set(false));
    let stats = rcu.stats();
    assert!(
        stats.expedited_gps >= 1,
        "tried grace periods ran: {stats:?}"
    );
    assert!(stats.released_by_expedited > 0, "{stats:?}");
    assert!(
        c.on_producer.load(Ordering::Relaxed) > 0,
        "the retiring thread dropped what its tries released: {stats:?}"
    );
    drop(rcu);
    assert_eq!(c.dropped(), 100_000);
}

/// With `expedited_callbacks(false)` an expedited grace period releases nothing, so a
/// retiring thread tries none (the switch stays the only difference in A/B runs).
#[test]
fn without_expedited_callbacks_a_retiring_thread_tries_no_grace_period() {
    let rcu = Rcu::builder()
        .expedited_callbacks(false)
        .backlog_callbacks(u64::MAX)
        .backlog_bytes(u64::MAX)
        .producer_backlog_callbacks(256)
        .build()
        .unwrap();
    let c = Counters::default();
    for _ in 0..20_000 {
        rcu.retire(c.object(false));
    }
    assert_eq!(rcu.stats().expedited_gps, 0);
    rcu.barrier();
    assert_eq!(c.dropped(), 20_000);
}

/// Callbacks a producer queued past the point where it gives way (262,144 pending in its
/// shard; past four times that it pauses): with the only worker held up by a callback, the
/// producer still finishes (its pauses end whether the worker catches up or not), counts its
/// giving way, and nothing is lost once the worker goes on.
#[test]
fn a_producer_far_ahead_of_a_held_up_worker_gives_way_and_loses_nothing() {
    let rcu = Rcu::builder().callback_workers(1).build().unwrap();
    let hold = Arc::new(AtomicBool::new(true));
    let held = Arc::clone(&hold);
    rcu.call(move || {
        while held.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let ran = Arc::new(AtomicUsize::new(0));
    // Past four times the point where producers give way (262,144; 64 under `rcukit_small`).
    let n = if cfg!(rcukit_small) { 1_200 } else { 1_200_000 };
    for _ in 0..n {
        let ran = Arc::clone(&ran);
        rcu.call(move || {
            ran.fetch_add(1, Ordering::Relaxed);
        });
    }
    let stats = rcu.stats();
    // Let the worker go before asserting: a failed assertion would otherwise drop the domain,
    // which waits for the callback that holds the worker.
    hold.store(false, Ordering::Release);
    rcu.barrier();
    assert!(stats.producers_gave_way > 0, "{stats:?}");
    assert_eq!(ran.load(Ordering::Relaxed), n);
}

/// A flood of callbacks queued by a callback (on the domain's worker) does not give way: the
/// worker would only wait for itself.
#[test]
fn a_worker_queueing_a_flood_does_not_give_way() {
    let rcu = Arc::new(Rcu::builder().callback_workers(1).build().unwrap());
    let ran = Arc::new(AtomicUsize::new(0));
    let n = 400_000;
    {
        let (inner, ran) = (Arc::clone(&rcu), Arc::clone(&ran));
        rcu.call(move || {
            for _ in 0..n {
                let ran = Arc::clone(&ran);
                inner.call(move || {
                    ran.fetch_add(1, Ordering::Relaxed);
                });
            }
        });
    }
    rcu.barrier(); // the flood was queued ...
    rcu.barrier(); // ... and has run
    assert_eq!(ran.load(Ordering::Relaxed), n);
    assert_eq!(rcu.stats().producers_gave_way, 0);
}
