//! loom models of the grace-period protocol (run with `RUSTFLAGS="--cfg rcukit_loom"`; see README).
//!
//! The models drive the real reader records, registry, sequence counters and expedited engine
//! (their atomics and locks come from `sync.rs`, which switches to loom), in
//! [`FenceKind::SeqCst`] mode: loom cannot model membarrier.

use crate::barrier::FenceKind;
use crate::gp::expedited::ExpeditedGp;
use crate::gp::{GpCore, GpEvent};
use crate::reader::{ReaderRecord, ThreadInfo};
use crate::sync::AtomicU64;
use loom::thread;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

struct Domain {
    core: GpCore,
    exp: ExpeditedGp,
    event: GpEvent,
}

fn domain() -> Arc<Domain> {
    Arc::new(Domain {
        core: GpCore::new(
            FenceKind::SeqCst,
            Duration::from_secs(3600),
            "loom".into(),
            Default::default(),
        ),
        exp: ExpeditedGp::new(),
        event: GpEvent::new("loom".into(), Default::default()),
    })
}

fn reader_record(d: &Domain) -> Arc<ReaderRecord> {
    let record = Arc::new(ReaderRecord::new(
        ThreadInfo {
            name: "loom-reader".into(),
            tid: 0,
        },
        Arc::downgrade(&d.core.registry),
    ));
    d.core.registry.register(record.clone());
    record
}

/// The litmus test of the grace-period guarantee: reader `r1 = x; r2 = y`, updater
/// `x = 1; synchronize; y = 1`. Seeing the second write but not the first would mean the
/// reader's critical section overlapped the whole grace period.
fn litmus(run_grace_period: bool) {
    loom::model(move || {
        let d = domain();
        let x = Arc::new(AtomicU64::new(0));
        let y = Arc::new(AtomicU64::new(0));
        let record = reader_record(&d);
        let reader = {
            let (d, x, y) = (d.clone(), x.clone(), y.clone());
            thread::spawn(move || {
                record.enter(&d.core.read_side.epoch, d.core.fence());
                let r1 = x.load(Relaxed);
                let r2 = y.load(Relaxed);
                record.exit();
                (r1, r2)
            })
        };
        x.store(1, Relaxed);
        if run_grace_period {
            d.exp.synchronize(&d.core, &d.event);
        }
        y.store(1, Relaxed);
        let (r1, r2) = reader.join().unwrap();
        assert!(
            !(r1 == 0 && r2 == 1),
            "grace period ended before a pre-existing reader"
        );
    });
}

#[test]
fn grace_period_litmus() {
    litmus(true);
}

/// The checker must be able to fail: without the grace period the forbidden outcome appears.
#[test]
#[should_panic(expected = "grace period ended before a pre-existing reader")]
fn grace_period_litmus_busted() {
    litmus(false);
}

/// The reader's announce store R2 must be a `Release` store (see `reader`, case 2). The reader
/// runs two critical sections; in the first it reads an object if it still finds it published.
/// The updater unpublishes the object, waits for readers and frees it (a write loom checks
/// for races). The scan may read the *second* section's R2; with a `Relaxed` R2 nothing then
/// orders the first section's read before the free (C++20 release sequences, which loom
/// models, are not continued by plain stores), and loom reports the race.
fn announce_store(busted: bool) {
    loom::model(move || {
        let d = domain();
        let published = Arc::new(AtomicU64::new(1));
        let object = Arc::new(loom::cell::UnsafeCell::new(7u64));
        let record = reader_record(&d);
        let reader = {
            let (d, published, object) = (d.clone(), published.clone(), object.clone());
            thread::spawn(move || {
                let epoch = &d.core.read_side.epoch;
                let enter = || {
                    if busted {
                        record.enter_announcing(epoch, d.core.fence(), Relaxed);
                    } else {
                        record.enter(epoch, d.core.fence()); // the real R1-R3
                    }
                };
                enter();
                if published.load(std::sync::atomic::Ordering::Acquire) == 1 {
                    // SAFETY: only read here, and freed (written) only after a grace period.
                    let _ = object.with(|p| unsafe { *p });
                }
                record.exit();
                enter();
                record.exit();
            })
        };
        published.store(0, std::sync::atomic::Ordering::Release);
        // G1-G3 alone: the claim is that the scan's end orders the sections it waited for
        // before what follows. (A full grace period ends with `SeqCounter::end`'s fence, and
        // loom lets an acquire fence synchronize with every release store older than the one
        // read, which C++20 does not promise; the scan alone shows the bare protocol.)
        d.core.wait_for_readers(crate::gp::GpKind::Expedited);
        // SAFETY: "free" the object: loom checks this write against the reader's read.
        object.with_mut(|p| unsafe { *p = 0 });
        reader.join().unwrap();
    });
}

#[test]
fn announce_store_must_release() {
    announce_store(false);
}

/// The checker must be able to fail: with a `Relaxed` announce store loom finds the race.
#[test]
#[should_panic(expected = "Causality violation")]
fn announce_store_relaxed_busted() {
    announce_store(true);
}

/// A cookie taken inside a reader does not poll complete before that reader ends, even while
/// another thread runs expedited grace periods.
#[test]
fn cookie_inside_reader_does_not_expire_early() {
    loom::model(|| {
        let d = domain();
        let record = reader_record(&d);
        let updater = {
            let d = d.clone();
            thread::spawn(move || d.exp.synchronize(&d.core, &d.event))
        };
        record.enter(&d.core.read_side.epoch, d.core.fence());
        let cookie = d.exp.seq.snap();
        assert!(!d.exp.seq.poll(cookie), "cookie expired at once");
        thread::yield_now();
        assert!(
            !d.exp.seq.poll(cookie),
            "cookie taken inside a reader expired before the reader ended"
        );
        record.exit();
        updater.join().unwrap();
    });
}

/// Two concurrent expedited callers: each returns only after a grace period that started
/// after its snapshot, and together they run at most two.
#[test]
fn expedited_piggyback_is_sound() {
    let mut model = loom::model::Builder::new();
    // Three threads, each taking and giving back the expedited turn: bound the preemptions
    // (unbounded takes minutes) unless LOOM_MAX_PREEMPTIONS asks for another bound.
    model.preemption_bound = model.preemption_bound.or(Some(4));
    model.check(|| {
        let d = domain();
        let record = reader_record(&d);
        let flag = Arc::new(AtomicU64::new(0));
        let reader = {
            let (d, flag) = (d.clone(), flag.clone());
            thread::spawn(move || {
                record.enter(&d.core.read_side.epoch, d.core.fence());
                let seen = flag.load(Relaxed);
                thread::yield_now();
                let again = flag.load(Relaxed);
                record.exit();
                (seen, again)
            })
        };
        let other = {
            let d = d.clone();
            thread::spawn(move || d.exp.synchronize(&d.core, &d.event))
        };
        flag.store(1, Relaxed);
        d.exp.synchronize(&d.core, &d.event);
        flag.store(2, Relaxed);
        let (seen, again) = reader.join().unwrap();
        other.join().unwrap();
        // A reader that saw 2 started after our grace period, so it must not have seen 0.
        assert!(!(seen == 0 && again == 2));
        assert!(d.exp.completed() <= 2);
    });
}

// ---------------------------------------------------------------------------------------------
// The alternatives: RecSeq's writer wait and PerCpuRwLock's exclusion.

use crate::locks::percpu_rwlock::{Path, RawPerCpuRwLock};
use crate::locks::recseq::RecSeq;

/// A table whose "freed" mark a reader must never see while it is inside a section that
/// found the table.
struct Table {
    freed: AtomicU64,
}

fn table() -> Box<Table> {
    Box::new(Table {
        freed: AtomicU64::new(0),
    })
}

/// Reader: one section that loads the table and checks the mark. Writer: replace, then mark
/// the old table freed (`wait = true`: through `replace_box`, which waits for odd counters;
/// `wait = false`: a writer that swaps and frees at once).
fn recseq_model(wait: bool) {
    loom::model(move || {
        let r = Arc::new(RecSeq::with_settings(
            table(),
            FenceKind::SeqCst,
            Duration::from_secs(3600),
        ));
        let record = Arc::new(ReaderRecord::new(
            ThreadInfo {
                name: "loom-reader".into(),
                tid: 0,
            },
            Arc::downgrade(&r.registry),
        ));
        r.registry.register(record.clone());
        let reader = {
            let r = r.clone();
            thread::spawn(move || {
                // SAFETY: the record is registered with `r` and used only by this thread.
                let guard = unsafe { r.read_on(Arc::as_ptr(&record)) };
                let freed = guard.freed.load(Relaxed);
                drop(guard);
                freed
            })
        };
        let old = if wait {
            r.replace_box(table())
        } else {
            let old = r
                .ptr
                .swap(Box::into_raw(table()), std::sync::atomic::Ordering::AcqRel);
            // SAFETY: `old` came from `Box::into_raw` and the swap took it out of `r`.
            unsafe { Box::from_raw(old) }
        };
        old.freed.store(1, Relaxed);
        assert_eq!(
            reader.join().unwrap(),
            0,
            "a RecSeq reader saw a table after the writer took it back"
        );
    });
}

#[test]
fn recseq_writer_waits_for_odd_counters() {
    recseq_model(true);
}

/// The checker must be able to fail: without the wait the reader sees a freed table.
#[test]
#[should_panic(expected = "a RecSeq reader saw a table after the writer took it back")]
fn recseq_writer_without_wait_busted() {
    recseq_model(false);
}

/// A reader on slot 1 and a writer share a `loom` cell: any overlap of their critical sections
/// is a causality violation. `writer_slots` is what the writer locks: `0..2` (all, correct) or
/// `0..1` (busted: it forgets the reader's slot).
fn percpu_model(writer_slots: std::ops::Range<usize>, path: Path) {
    loom::model(move || {
        let lock = Arc::new(RawPerCpuRwLock::with_slots(2).unwrap());
        let data = Arc::new(loom::cell::UnsafeCell::new(0u64));
        let reader = {
            let (lock, data) = (lock.clone(), data.clone());
            thread::spawn(move || {
                lock.lock_shared_on(1, path);
                // SAFETY: under the read lock; writers are excluded (what loom checks).
                let v = data.with(|p| unsafe { *p });
                lock.unlock_shared_on(1, path);
                v
            })
        };
        lock.lock_exclusive_slots(writer_slots.clone());
        // SAFETY: under the write lock (what loom checks).
        data.with_mut(|p| unsafe { *p += 1 });
        lock.unlock_exclusive_slots(writer_slots.clone());
        let v = reader.join().unwrap();
        assert!(v <= 1);
    });
}

#[test]
fn percpu_rwlock_writer_excludes_owner_readers() {
    percpu_model(0..2, Path::Owner);
}

#[test]
fn percpu_rwlock_writer_excludes_shared_readers() {
    percpu_model(0..2, Path::Shared);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn percpu_rwlock_writer_missing_a_slot_busted() {
    percpu_model(0..1, Path::Owner);
}

/// Two writers exclude each other (they meet on slot 0 first).
#[test]
fn percpu_rwlock_writers_exclude_each_other() {
    loom::model(|| {
        let lock = Arc::new(RawPerCpuRwLock::with_slots(2).unwrap());
        let data = Arc::new(loom::cell::UnsafeCell::new(0u64));
        let other = {
            let (lock, data) = (lock.clone(), data.clone());
            thread::spawn(move || {
                lock.lock_exclusive_slots(0..2);
                // SAFETY: under the write lock (what loom checks).
                data.with_mut(|p| unsafe { *p += 1 });
                lock.unlock_exclusive_slots(0..2);
            })
        };
        lock.lock_exclusive_slots(0..2);
        // SAFETY: under the write lock (what loom checks).
        data.with_mut(|p| unsafe { *p += 1 });
        lock.unlock_exclusive_slots(0..2);
        other.join().unwrap();
        // SAFETY: both threads are done.
        assert_eq!(data.with(|p| unsafe { *p }), 2);
    });
}

// --- callbacks: intake, accelerate/advance and barrier ----------------------------------------

mod callbacks_model {
    use super::*;
    use crate::callbacks::callback::{Callback, Work};
    use crate::callbacks::intake::{Consumer, Producer};
    use crate::callbacks::port::{GpPort, ReleasedBy};
    use crate::callbacks::segcblist::SegCbList;
    use crate::callbacks::worker::{Step, Worker};
    use crate::callbacks::{CallbackConfig, Callbacks};
    use crate::seq::{GpCookie, SeqCounter};
    use crate::sync::AtomicUsize;
    use std::sync::atomic::Ordering::{Acquire, Release};

    /// The grace-period port the models run the callbacks against: no normal grace period
    /// ever completes, expedited ones are real, run by whoever asks, over a real registry.
    pub(super) struct FakePort {
        pub(super) core: GpCore,
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
    pub(super) struct Fake {
        pub(super) gp: FakePort,
        pub(super) callbacks: Callbacks,
    }

    pub(super) fn fake() -> Arc<Fake> {
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
    pub(super) fn step(fake: &Fake, consumer: &mut Consumer, list: &mut SegCbList<Work>) -> Step {
        Worker::new(&fake.gp, &fake.callbacks, 0).step(consumer, list)
    }

    /// The worker's grace period while it drains (an expedited one, in this thread).
    pub(super) fn drain_step(fake: &Fake, list: &SegCbList<Work>) {
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
            let record = Arc::new(ReaderRecord::new(
                ThreadInfo {
                    name: "loom-reader".into(),
                    tid: 0,
                },
                Arc::downgrade(&fake.gp.core.registry),
            ));
            fake.gp.core.registry.register(record.clone());
            let published = Arc::new(AtomicUsize::new(1));
            let freed = Arc::new(AtomicUsize::new(0));

            let reader = {
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
            };

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
        use crate::callbacks::shard::Wake;
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

    /// A retired object, handed back to producers once ready, and `barrier()`: the barrier must
    /// not complete before the object is dropped, whoever drops it (the worker, after taking
    /// the batch back, or the producer thread that took it). With `late_barrier` the barrier
    /// starts only once the object has left the worker's list (its marker then finds the list
    /// empty); otherwise it is queued right behind the object. `counted` selects a correct
    /// producer (`Ready::take`) or a busted one that takes the batch without counting it as
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
            // The producer thread, later, in some `retire` call: run a batch if one is ready.
            let helper = {
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
            };
            let mut consumer = Consumer::new();
            let mut list: SegCbList<Work> = SegCbList::new();
            let mut worker_until = |done: &dyn Fn(&SegCbList<Work>) -> bool| {
                while !done(&list) {
                    worker_pass(&fake, &mut consumer, &mut list);
                }
            };
            // The barrier caller: checks the object as soon as its barrier returns.
            let returned = Arc::new(AtomicUsize::new(0));
            let barrier_caller = || {
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
            };
            let caller = if late_barrier {
                worker_until(&|list| list.is_empty());
                barrier_caller()
            } else {
                barrier_caller()
            };
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

    /// A producer's local list (`local.rs`). The owner retires an object into its list, then,
    /// in a later call, seals the block, takes it as ready and drops the object itself. A
    /// stealer (the worker meeting a barrier marker) starts after the retire (happens-before)
    /// and steals the list, dropping what it took. When the steal returns the object must have
    /// been dropped, by one of the two, exactly once. Without `after_retire` the steal races
    /// with the retire. `correct` selects the real steal or a busted one that does not wait
    /// for the owner's drops.
    fn local_steal(after_retire: bool, correct: bool) {
        use crate::callbacks::local::LocalRetires;
        use crate::seq::GpCookie;
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(move || {
            let local = Arc::new(LocalRetires::new());
            let drops = Arc::new(AtomicUsize::new(0));
            let retired = Arc::new(AtomicUsize::new(0));
            let owner = {
                let (local, drops, retired) = (local.clone(), drops.clone(), retired.clone());
                thread::spawn(move || {
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
                    let mut few = crate::callbacks::invoke::Few::new();
                    guard.with(|list| {
                        list.seal(GpCookie::completed());
                        if list.front_to_check().is_some() {
                            list.release_front(crate::callbacks::port::ReleasedBy::Normal);
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
                })
            };
            let steal = || {
                let taken = if correct {
                    LocalRetires::steal_all(&[&local], FenceKind::SeqCst)
                } else {
                    LocalRetires::steal_all_busted(&[&local], FenceKind::SeqCst)
                };
                for callback in taken.into_iter().flat_map(|t| t.into_callbacks()) {
                    callback.invoke();
                }
            };
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
}

// --- callbacks: two barriers from different threads racing a retire ---------------------------

mod barrier_race_model {
    use super::callbacks_model::{drain_step, step};
    use super::*;
    use crate::callbacks::callback::{Callback, Work};
    use crate::callbacks::intake::Consumer;
    use crate::callbacks::segcblist::SegCbList;
    use crate::callbacks::worker::Step;
    use crate::callbacks::Callbacks;
    use crate::sync::AtomicUsize;

    struct CountOnDrop(Arc<AtomicUsize>);

    impl Drop for CountOnDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Relaxed);
        }
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
            let fake = super::callbacks_model::fake();
            let producer = Callbacks::register_producer_for_model(fake.callbacks.shard(0));
            let drops = Arc::new(AtomicUsize::new(0));
            let a = {
                let fake = fake.clone();
                thread::spawn(move || fake.callbacks.start_barrier())
            };
            let c = {
                let (fake, drops) = (fake.clone(), drops.clone());
                thread::spawn(move || {
                    let object = Callback::from_box(Box::new(CountOnDrop(drops)));
                    match producer.local.enter(FenceKind::SeqCst) {
                        Some(mut guard) => {
                            guard.with(|list| list.push(object));
                        }
                        // A steal is under way: `retire` queues on the intake instead.
                        None => {
                            let shard = fake.callbacks.shard(0);
                            shard.intake.push_single(Work::Callback(object));
                        }
                    }
                    fake.callbacks.start_barrier()
                })
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
}

// --- QSBR: coming online and quiescent states -------------------------------------------------

mod qsbr_model {
    use super::*;
    use crate::reader::qsbr::{announce_quiescent_state, come_online, go_offline};

    /// The QSBR litmus test. The reader starts offline, comes online (N1-N3), reads `x` then
    /// `y`, announces a quiescent state and goes offline; the updater writes `x`, runs a grace
    /// period and writes `y`. Seeing `y == 1` but `x == 0` would mean the grace period missed
    /// the reader's online stretch.
    fn litmus(online: fn(&ReaderRecord, &AtomicU64)) {
        loom::model(move || {
            let d = domain();
            let record = reader_record(&d); // registered offline (0)
            let x = Arc::new(AtomicU64::new(0));
            let y = Arc::new(AtomicU64::new(0));
            let reader = {
                let (d, x, y) = (d.clone(), x.clone(), y.clone());
                thread::spawn(move || {
                    online(&record, &d.core.read_side.epoch);
                    let r1 = x.load(Relaxed);
                    let r2 = y.load(Relaxed);
                    announce_quiescent_state(&record, &d.core.read_side.epoch);
                    go_offline(&record);
                    (r1, r2)
                })
            };
            x.store(1, Relaxed);
            d.exp.synchronize(&d.core, &d.event);
            y.store(1, Relaxed);
            let (r1, r2) = reader.join().unwrap();
            assert!(
                !(r1 == 0 && r2 == 1),
                "grace period ended before an online reader's quiescent state"
            );
        });
    }

    #[test]
    fn qsbr_online_litmus() {
        litmus(come_online);
    }

    /// Coming online without the fence: loom finds the forbidden outcome.
    #[test]
    #[should_panic(expected = "grace period ended before an online reader's quiescent state")]
    fn qsbr_online_without_fence_busted() {
        litmus(announce_quiescent_state);
    }
}
