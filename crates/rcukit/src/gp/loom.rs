//! loom models of the grace-period protocol (run with `RUSTFLAGS="--cfg rcukit_loom"`; see
//! README): the litmus test of a grace period, the reader's announce store, cookies, expedited
//! callers sharing grace periods, and a QSBR thread coming online.
//!
//! The models drive the real reader records, registry, sequence counters and expedited engine
//! (their atomics and locks come from `sync`, which switches to loom), in
//! [`FenceKind::SeqCst`] mode: loom cannot model membarrier.

use super::expedited::ExpeditedGp;
use super::{GpCore, GpEvent};
use crate::barrier::FenceKind;
use crate::reader::ReaderRecord;
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
    crate::reader::model_record(&d.core.registry, "loom-reader")
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
        // loom's cell is not `Sync`: sharing it unsynchronized is what the model checks.
        #[allow(clippy::arc_with_non_send_sync)]
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

// --- QSBR: coming online and quiescent states -------------------------------------------------

mod qsbr_model {
    use super::*;
    use crate::reader::qsbr::{announce_quiescent_state, come_online, go_offline, quiescent_state};

    /// The QSBR litmus test. The reader starts offline, comes online (N1-N3), reads `x` then
    /// `y`, announces a quiescent state (which stores nothing if the epoch has not moved) and
    /// goes offline; the updater writes `x`, runs a grace period and writes `y`. Seeing `y == 1` but `x == 0` would mean the grace period missed
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
                    quiescent_state(&record, &d.core.read_side.epoch, false);
                    go_offline(&record, false);
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
        litmus(|record, epoch| {
            announce_quiescent_state(record, epoch, false);
        });
    }
}
