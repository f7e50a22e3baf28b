//! loom models of the callback machinery (run with `RUSTFLAGS="--cfg rcukit_loom"`; see README):
//! the intake, the worker's accelerate/advance and barriers, the wake handshake, the hand-back of
//! ready batches, the local lists' steal, and barriers racing a retire. They run the real producers
//! and worker against a small fake port (see [`port`](crate::docs::internal::callbacks::port))
//! whose expedited grace periods are real, over a real reader registry.

use super::callback::{BarrierCount, Callback, Work};
use super::intake::{Consumer, Producer};
use super::local::LocalRetires;
use super::port::{GpPort, ReleasedBy};
use super::segcblist::SegCbList;
use super::shard::{ProducerShared, Wake};
use super::worker::{Step, Worker};
use super::{CallbackConfig, Callbacks};
use crate::barrier::FenceKind;
use crate::gp::expedited::ExpeditedGp;
use crate::gp::{GpCore, GpEvent};
use crate::seq::{GpCookie, SeqCounter};
use crate::sync::AtomicUsize;
use loom::thread;
use loom::thread::JoinHandle;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc;
use std::time::Duration;

/// The grace-period port the models run the callbacks against: no normal grace period
/// ever completes, expedited ones are real, run by whoever asks, over a real registry.
struct FakePort {
    core: GpCore,
    normal: SeqCounter,
    exp: ExpeditedGp,
    event: GpEvent,
}

impl GpPort for FakePort {
    fn cookie(&self) -> GpCookie {
        let (normal, expedited) = (self.normal.snap(), self.exp.seq.snap());
        GpCookie {
            normal,
            expedited,
            domain: 7,
        }
    }
    fn released(&self, stamp: &GpCookie, _any_kind: bool) -> Option<ReleasedBy> {
        let by_exp = self.exp.seq.poll(stamp.expedited);
        by_exp.then_some(ReleasedBy::Expedited)
    }
    fn expedited_releases(&self) -> bool {
        true
    }
    fn request_normal(&self, _: &GpCookie) {}
    fn request_expedited(&self, _: &GpCookie) {}
    fn run_expedited(&self, stamp: &GpCookie) {
        self.exp.run_until(stamp.expedited, &self.core, &self.event);
    }
    fn try_expedited(&self, _: &GpCookie) -> bool {
        false
    }
    fn subscribe(&self, _: std::thread::Thread, _: Box<dyn Fn() -> bool + Send + Sync>) {}
    fn check_fork(&self) {}
    fn is_reading_here(&self) -> bool {
        false
    }
}

/// A domain as the callback machinery sees it: the port and the callbacks.
struct Fake {
    gp: FakePort,
    callbacks: Callbacks,
}

fn fake() -> Arc<Fake> {
    let gp = FakePort {
        core: GpCore::new(
            FenceKind::SeqCst,
            Duration::from_secs(3600),
            "loom".into(),
            Default::default(),
        ),
        normal: SeqCounter::new(),
        exp: ExpeditedGp::new(),
        event: GpEvent::new("loom".into(), Default::default()),
    };
    let config = CallbackConfig {
        workers: 1,
        backlog_callbacks: 1_000,
        backlog_bytes: 1 << 20,
        producer_backlog_callbacks: 1_000,
        producer_backlog_bytes: 1 << 20,
        batch: 16,
        retire_on_producers: true,
        fence: FenceKind::SeqCst,
    };
    let callbacks = Callbacks::new(config, 7, "loom".into(), Default::default());
    Arc::new(Fake { gp, callbacks })
}

/// One pass of shard 0's worker.
fn step(fake: &Fake, consumer: &mut Consumer, list: &mut SegCbList<Work>) -> Step {
    Worker::new(&fake.gp, &fake.callbacks, 0).step(consumer, list)
}

/// The worker's grace period while it drains (an expedited one, in this thread).
fn drain_step(fake: &Fake, list: &SegCbList<Work>) {
    Worker::new(&fake.gp, &fake.callbacks, 0).drain_step(list);
}

/// One pass of shard 0's worker; where the real worker would park, the model runs the
/// grace period it would wait for (as the worker does when draining), or yields.
fn worker_pass(fake: &Fake, consumer: &mut Consumer, list: &mut SegCbList<Work>) {
    match step(fake, consumer, list) {
        Step::Busy => {}
        Step::Idle | Step::Drain => {
            if list.is_empty() {
                thread::yield_now();
            } else {
                drain_step(fake, list);
            }
        }
        Step::Exit => unreachable!("not shutting down"),
    }
}

/// A reader on a record of its own: if it finds the object published, the object must not
/// have been freed.
fn spawn_reader(
    fake: &Arc<Fake>,
    published: &Arc<AtomicUsize>,
    freed: &Arc<AtomicUsize>,
) -> JoinHandle<()> {
    let record = crate::reader::model_record(&fake.gp.core.registry, "loom-reader");
    let (fake, published, freed) = (fake.clone(), published.clone(), freed.clone());
    thread::spawn(move || {
        record.enter(&fake.gp.core.read_side.epoch, fake.gp.core.fence());
        if published.load(Acquire) == 1 {
            assert_eq!(
                freed.load(Relaxed),
                0,
                "callback ran during a pre-existing reader"
            );
        }
        record.exit();
    })
}

/// An updater unpublishes an object, queues its "free" with `call`, and runs `barrier`,
/// while a reader may hold the object and the worker runs its loop (making grace periods
/// itself, as it does when draining). The callback must not run while a reader that saw the
/// object is still inside its critical section, and it must have run when the barrier
/// completes.
#[test]
fn intake_advance_barrier() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(|| {
        let fake = fake();
        let published = Arc::new(AtomicUsize::new(1));
        let freed = Arc::new(AtomicUsize::new(0));
        let reader = spawn_reader(&fake, &published, &freed);
        published.store(0, Release);
        let f = freed.clone();
        let mut producer = Producer::new();
        producer.push(
            &fake.callbacks.shard(0).intake,
            Work::Callback(Callback::from_fn(move || f.store(1, Relaxed))),
        );
        let count = fake.callbacks.start_barrier();

        let worker = {
            let (fake, count) = (fake.clone(), count.clone());
            thread::spawn(move || {
                let mut consumer = Consumer::new();
                let mut list: SegCbList<Work> = SegCbList::new();
                while !count.is_done() {
                    worker_pass(&fake, &mut consumer, &mut list);
                }
            })
        };
        worker.join().unwrap();
        producer.seal();
        assert!(count.is_done());
        assert_eq!(
            freed.load(Relaxed),
            1,
            "barrier returned before the callback ran"
        );
        reader.join().unwrap();
    });
}

/// The wake handshake (see the `shard` module docs): a producer publishes a callback and
/// looks at the worker's state while the worker, with nothing pending, announces that it
/// parks idle and looks at the intake once more. Either the worker sees the callback (and
/// does not park) or the producer sees it idle and wakes it (the state is `Awake` again):
/// a parked worker is never left with a callback nobody will wake it for.
#[test]
fn wake_handshake_never_strands_a_callback() {
    loom::model(|| {
        let fake = fake();
        let producer = {
            let fake = fake.clone();
            thread::spawn(move || {
                let shard = fake.callbacks.shard(0);
                let callback = Callback::from_fn(|| {});
                shard.intake.push_single(Work::Callback(callback));
                shard.wake_if_sleeping(false, FenceKind::SeqCst);
            })
        };
        let mut consumer = Consumer::new();
        let list: SegCbList<Work> = SegCbList::new();
        let worker = Worker::new(&fake.gp, &fake.callbacks, 0);
        let parks = worker.announce_park(&consumer, &list);
        producer.join().unwrap();
        let shard = fake.callbacks.shard(0);
        assert!(
            parks.is_none() || shard.worker.sleeping.load() == Wake::Awake,
            "the worker parked idle with a callback and nobody woke it"
        );
        consumer.take(&shard.intake, usize::MAX, drop);
    });
}

/// Sets its flag when dropped: a retired object.
struct SetOnDrop(Arc<AtomicUsize>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(1, Relaxed);
    }
}

/// The producer thread, later, in some `retire` call: run a batch if one is ready (`counted`:
/// as `HandBack::take` does; else a busted take that does not count it as running).
fn spawn_batch_taker(fake: &Arc<Fake>, counted: bool) -> JoinHandle<()> {
    let fake = fake.clone();
    thread::spawn(move || {
        let shard = fake.callbacks.shard(0);
        for _ in 0..3 {
            let batch = if counted {
                shard.hand_back.take()
            } else {
                shard.hand_back.take_uncounted_busted()
            };
            if let Some(mut batch) = batch {
                fake.callbacks.run_batch(shard, &mut batch);
                if counted {
                    shard.hand_back.finished(batch);
                }
                return;
            }
            thread::yield_now();
        }
    })
}

/// The barrier caller: checks the object as soon as its barrier returns, then says so.
fn spawn_barrier_caller(
    fake: &Arc<Fake>,
    freed: &Arc<AtomicUsize>,
    returned: &Arc<AtomicUsize>,
) -> JoinHandle<()> {
    let (fake, freed, returned) = (fake.clone(), freed.clone(), returned.clone());
    thread::spawn(move || {
        let count = fake.callbacks.start_barrier();
        while !count.is_done() {
            thread::yield_now();
        }
        assert_eq!(
            freed.load(Relaxed),
            1,
            "barrier returned before a handed-back object was dropped"
        );
        returned.store(1, Relaxed);
    })
}

/// A retired object, handed back to producers once ready, and `barrier()`: the barrier must
/// not complete before the object is dropped, whoever drops it (the worker, after taking
/// the batch back, or the producer thread that took it). With `late_barrier` the barrier
/// starts only once the object has left the worker's list (its marker then finds the list
/// empty); otherwise it is queued right behind the object. `counted` selects a correct
/// producer (`HandBack::take`) or a busted one that takes the batch without counting it as
/// running.
fn handback_barrier(late_barrier: bool, counted: bool) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(move || {
        let fake = fake();
        let freed = Arc::new(AtomicUsize::new(0));
        let mut producer = Producer::new();
        producer.push(
            &fake.callbacks.shard(0).intake,
            Work::Callback(Callback::from_box(Box::new(SetOnDrop(freed.clone())))),
        );
        let helper = spawn_batch_taker(&fake, counted);
        let mut consumer = Consumer::new();
        let mut list: SegCbList<Work> = SegCbList::new();
        let mut worker_until = |done: &dyn Fn(&SegCbList<Work>) -> bool| {
            while !done(&list) {
                worker_pass(&fake, &mut consumer, &mut list);
            }
        };
        let returned = Arc::new(AtomicUsize::new(0));
        if late_barrier {
            // Until the object has entered the list and left it again (a fresh list is empty
            // before the worker's first pass takes the object from the intake).
            let entered = std::cell::Cell::new(false);
            worker_until(&|list| {
                entered.set(entered.get() || !list.is_empty());
                entered.get() && list.is_empty()
            });
        }
        let caller = spawn_barrier_caller(&fake, &freed, &returned);
        worker_until(&|_| returned.load(Relaxed) == 1);
        caller.join().unwrap();
        helper.join().unwrap();
        producer.seal();
    });
}

#[test]
fn handback_barrier_behind_the_object() {
    handback_barrier(false, true);
}

#[test]
fn handback_barrier_on_an_empty_list() {
    handback_barrier(true, true);
}

#[test]
#[should_panic(expected = "barrier returned before a handed-back object was dropped")]
fn handback_barrier_uncounted_take_busted() {
    handback_barrier(true, false);
}

/// The owner of a local list: retires an object into it (or, while a steal is under way,
/// drops it as the worker would), says so, then, in a later `retire`, seals the block, finds
/// it ready and drops it.
fn retire_then_drop(local: &LocalRetires, drops: Arc<AtomicUsize>, retired: &AtomicUsize) {
    let object = Callback::from_box(Box::new(CountOnDrop(drops)));
    match local.enter(FenceKind::SeqCst) {
        Some(mut guard) => {
            guard.with(|list| list.push(object));
        }
        // A steal is under way: `retire` queues on the intake instead, and the
        // worker runs it later.
        None => object.invoke(),
    }
    retired.store(1, Release);
    // A later `retire` call seals the block and finds it ready.
    let Some(mut guard) = local.enter(FenceKind::SeqCst) else {
        return; // the list is being stolen
    };
    let mut few = super::invoke::Few::new();
    guard.with(|list| {
        list.seal(GpCookie::completed());
        if list.front_to_check().is_some() {
            list.release_front(ReleasedBy::Normal);
        }
        list.take_few(&mut few, 0);
    });
    let dropping = !few.is_empty();
    if dropping {
        guard.mark_dropping();
    }
    drop(guard);
    few.drain().for_each(Callback::invoke);
    if dropping {
        local.finished_dropping();
    }
}

/// The worker's steal of the list (`correct`: the real one; else one that does not wait for
/// the owner's drops), dropping what it took.
fn steal_and_drop(local: &LocalRetires, correct: bool) {
    let taken = if correct {
        LocalRetires::steal_all(&[local], FenceKind::SeqCst)
    } else {
        LocalRetires::steal_all_busted(&[local], FenceKind::SeqCst)
    };
    for callback in taken.into_iter().flat_map(|t| t.into_callbacks()) {
        callback.invoke();
    }
}

/// A producer's local list (`local.rs`). The owner retires an object into its list, then,
/// in a later call, seals the block, takes it as ready and drops the object itself. A
/// stealer (the worker meeting a barrier marker) starts after the retire (happens-before)
/// and steals the list, dropping what it took. When the steal returns the object must have
/// been dropped, by one of the two, exactly once. Without `after_retire` the steal races
/// with the retire. `correct` selects the real steal or a busted one that does not wait
/// for the owner's drops.
fn local_steal(after_retire: bool, correct: bool) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(move || {
        let local = Arc::new(LocalRetires::new());
        let drops = Arc::new(AtomicUsize::new(0));
        let retired = Arc::new(AtomicUsize::new(0));
        let owner = {
            let (local, drops, retired) = (local.clone(), drops.clone(), retired.clone());
            thread::spawn(move || retire_then_drop(&local, drops, &retired))
        };
        let steal = || steal_and_drop(&local, correct);
        if after_retire {
            while retired.load(Acquire) == 0 {
                thread::yield_now();
            }
            steal();
            assert_eq!(
                drops.load(Relaxed),
                1,
                "a steal returned before a retired object was dropped"
            );
        } else {
            // Racing with the retire itself: owner and stealer must never both be in the
            // list (loom checks the list's cell), and nothing may be lost.
            steal();
        }
        owner.join().unwrap();
        steal();
        assert_eq!(
            drops.load(Relaxed),
            1,
            "an object was lost or dropped twice"
        );
    });
}

/// Counts its drops: a retired object.
struct CountOnDrop(Arc<AtomicUsize>);

impl Drop for CountOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Relaxed);
    }
}

#[test]
fn local_list_steal_sees_every_retired_object() {
    local_steal(true, true);
}

#[test]
fn local_list_steal_racing_with_a_retire_loses_nothing() {
    local_steal(false, true);
}

#[test]
#[should_panic(expected = "a steal returned before a retired object was dropped")]
fn local_list_steal_without_waiting_for_drops_busted() {
    local_steal(true, false);
}

// --- two barriers from different threads racing a retire ---------------------------------------

/// Thread C of the model below: retire an object into its local list (or, while a steal is
/// under way, on the intake, as `retire` does), then start a barrier.
fn retire_then_barrier(
    fake: &Fake,
    producer: &ProducerShared,
    drops: Arc<AtomicUsize>,
) -> Arc<BarrierCount> {
    let object = Callback::from_box(Box::new(CountOnDrop(drops)));
    match producer.local.enter(FenceKind::SeqCst) {
        Some(mut guard) => {
            guard.with(|list| list.push(object));
        }
        None => {
            let shard = fake.callbacks.shard(0);
            shard.intake.push_single(Work::Callback(object));
        }
    }
    fake.callbacks.start_barrier()
}

/// Thread A calls `barrier()`. Thread C retires an object into its own local list, then
/// calls `barrier()`. A worker pass runs meanwhile. A's marker may make the worker steal
/// every local list before C retires; C's marker then arrives in a later iteration of the
/// same intake drain and must cause a steal of its own (the defect: it was entrained at
/// once, and C's barrier completed with C's object still in C's list). Whenever C's
/// barrier has completed, C's object must have been dropped.
#[test]
fn two_barriers_from_different_threads_racing_a_retire() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(|| {
        let fake = fake();
        let producer = Callbacks::register_producer_for_model(fake.callbacks.shard(0));
        let drops = Arc::new(AtomicUsize::new(0));
        let a = {
            let fake = fake.clone();
            thread::spawn(move || fake.callbacks.start_barrier())
        };
        let c = {
            let (fake, drops) = (fake.clone(), drops.clone());
            thread::spawn(move || retire_then_barrier(&fake, &producer, drops))
        };
        let mut consumer = Consumer::new();
        let mut list: SegCbList<Work> = SegCbList::new();
        let worker = {
            let fake = fake.clone();
            thread::spawn(move || {
                let _ = step(&fake, &mut consumer, &mut list);
                (consumer, list)
            })
        };
        let count_a = a.join().unwrap();
        let count_c = c.join().unwrap();
        let (mut consumer, mut list) = worker.join().unwrap();
        if count_c.is_done() {
            assert_eq!(
                drops.load(Relaxed),
                1,
                "barrier returned before an object its caller retired was dropped"
            );
        }
        while !(count_a.is_done() && count_c.is_done()) {
            match step(&fake, &mut consumer, &mut list) {
                Step::Busy => {}
                Step::Idle | Step::Drain => drain_step(&fake, &list),
                Step::Exit => unreachable!("not shutting down"),
            }
        }
        assert_eq!(
            drops.load(Relaxed),
            1,
            "an object was lost or dropped twice"
        );
    });
}
