//! RecSeq: API, nesting, misuse, and a stress test in which readers must never see a table the
//! writer has taken back.

use rcukit::{FenceKind, RecSeq};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[test]
fn read_replace_store_and_take() {
    let r = RecSeq::new(vec![1, 2, 3]);
    assert_eq!(r.read().len(), 3);
    assert_eq!(r.replace(vec![4]), vec![1, 2, 3]);
    assert_eq!(*r.read(), vec![4]);
    r.store(vec![5, 6]);
    assert_eq!(*r.read(), vec![5, 6]);
    assert_eq!(r.replacements(), 2);
    assert_eq!(r.readers(), 1, "this thread's counter");
    assert_eq!(*r.replace_box(Box::new(vec![7])), vec![5, 6]);
    let mut r = r;
    r.get_mut().push(8);
    assert_eq!(r.into_inner(), vec![7, 8]);
    assert_eq!(format!("{:?}", RecSeq::new(1)), "RecSeq { value: 1, .. }");
}

#[test]
fn guards_nest_and_may_drop_in_any_order() {
    let r = RecSeq::new(1u32);
    let outer = r.read();
    let inner = r.read();
    assert!(r.is_reading());
    drop(outer); // the section continues while `inner` lives
    assert!(r.is_reading());
    assert_eq!(*inner, 1);
    drop(inner);
    assert!(!r.is_reading());
    r.store(2);
    assert_eq!(*r.read(), 2);
}

#[test]
#[should_panic(expected = "holds a read guard of the same RecSeq")]
fn replace_inside_a_read_section_panics() {
    let r = RecSeq::new(0);
    let _g = r.read();
    r.store(1);
}

#[test]
fn builder_checks_its_settings() {
    let err = RecSeq::builder()
        .stall_timeout(Duration::from_micros(10))
        .build(0)
        .unwrap_err();
    assert_eq!(err.setting(), Some("stall_timeout"));
    let r = RecSeq::builder().fence(FenceKind::SeqCst).build(0).unwrap();
    assert_eq!(r.fence_kind(), FenceKind::SeqCst);
}

#[test]
fn writer_waits_for_a_reader_inside_its_section() {
    let r = Arc::new(RecSeq::new(0u64));
    let left = Arc::new(AtomicBool::new(false));
    let inside = Arc::new(Barrier::new(2));
    let reader = {
        let (r, left, inside) = (r.clone(), left.clone(), inside.clone());
        std::thread::spawn(move || {
            let g = r.read();
            inside.wait();
            std::thread::sleep(Duration::from_millis(30));
            left.store(true, Relaxed);
            drop(g);
        })
    };
    inside.wait();
    r.store(1);
    assert!(
        left.load(Relaxed),
        "replace returned while a reader that could hold the old value was still inside"
    );
    reader.join().unwrap();
}

#[test]
fn a_reader_stuck_past_the_timeout_is_reported() {
    let r = Arc::new(
        RecSeq::builder()
            .stall_timeout(Duration::from_millis(20))
            .build(0u64)
            .unwrap(),
    );
    let inside = Arc::new(Barrier::new(2));
    let release = Arc::new(AtomicBool::new(false));
    let reader = {
        let (r, inside, release) = (r.clone(), inside.clone(), release.clone());
        std::thread::spawn(move || {
            let g = r.read();
            inside.wait();
            while !release.load(Relaxed) {
                std::thread::sleep(Duration::from_millis(2));
            }
            drop(g);
        })
    };
    inside.wait();
    let writer = {
        let r = r.clone();
        std::thread::spawn(move || r.store(1))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while r.stalls() == 0 {
        assert!(Instant::now() < deadline, "no stall was reported");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        !writer.is_finished(),
        "the writer keeps waiting after the report"
    );
    release.store(true, Relaxed);
    writer.join().unwrap();
    reader.join().unwrap();
    assert_eq!(r.stalls(), 1);
}

/// A table; the writer poisons every table it gets back from `replace` and keeps it, so a
/// reader that still holds one sees the poison instead of freed memory.
struct Table {
    poisoned: AtomicBool,
    rows: Vec<u64>,
}

fn stress(fence: FenceKind) {
    let r = Arc::new(
        RecSeq::builder()
            .fence(fence)
            .build(Table {
                poisoned: AtomicBool::new(false),
                rows: vec![0; 8],
            })
            .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let violations = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicU64::new(0));
    let body = {
        let (r, stop, violations, reads) =
            (r.clone(), stop.clone(), violations.clone(), reads.clone());
        move |seed: u64, lifetime: Option<u64>| {
            let mut rng = seed | 1;
            let mut n = 0;
            // At least one read, however late a loaded machine starts this thread.
            while (!stop.load(Relaxed) || n == 0) && lifetime.map_or(true, |l| n < l) {
                n += 1;
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let table = r.read();
                let check = |t: &Table| {
                    if t.poisoned.load(Relaxed) || t.rows.iter().any(|&x| x != t.rows[0]) {
                        violations.fetch_add(1, SeqCst);
                    }
                };
                check(&table);
                if rng % 5 == 0 {
                    let nested = r.read(); // re-entry: may see a newer table
                    check(&nested);
                    if rng % 2 == 0 {
                        drop(table);
                        check(&nested);
                        continue;
                    }
                }
                for _ in 0..(rng % 128) {
                    std::hint::spin_loop();
                }
                check(&table);
                reads.fetch_add(1, Relaxed);
            }
        }
    };
    let readers: Vec<_> = (0..2)
        .map(|i| {
            let body = body.clone();
            std::thread::spawn(move || body(0x51ed_270b + i, None))
        })
        .collect();
    let churn = {
        let (body, stop) = (body.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut k = 0u64;
            while !stop.load(Relaxed) || k == 0 {
                k += 1;
                let body = body.clone();
                std::thread::spawn(move || body(k.wrapping_mul(0x2545_f491), Some(300)))
                    .join()
                    .unwrap();
            }
            k
        })
    };
    let mut graveyard = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(1000);
    let mut generation = 0;
    while Instant::now() < deadline || generation == 0 {
        generation += 1;
        // `replace_box`, so the old table stays at the address readers might hold.
        let old = r.replace_box(Box::new(Table {
            poisoned: AtomicBool::new(false),
            rows: vec![generation; 8],
        }));
        old.poisoned.store(true, Relaxed);
        graveyard.push(old);
    }
    stop.store(true, Relaxed);
    for h in readers {
        h.join().unwrap();
    }
    assert!(churn.join().unwrap() > 0);
    assert_eq!(
        violations.load(SeqCst),
        0,
        "a reader saw a table after replace returned it"
    );
    assert!(reads.load(Relaxed) > 0 && generation > 0);
    assert_eq!(r.stalls(), 0);
    assert!(r.readers() <= 1, "exited threads released their counters");
}

#[test]
fn stress_readers_never_see_a_returned_table() {
    stress(FenceKind::SeqCst);
}

#[test]
fn stress_with_membarrier_where_available() {
    if RecSeq::builder()
        .fence(FenceKind::Membarrier)
        .build(())
        .is_ok()
    {
        stress(FenceKind::Membarrier);
    }
}

/// A thread that reads a thousand `RecSeq`s in turn finds each one's own record through its
/// caches, including the ones whose cache slots collide (a thousand keys in a 256-slot
/// direct-mapped cache): a reader holding a guard on any of them still holds up that
/// `RecSeq`'s writer, and never another's.
#[test]
fn a_thread_reading_a_thousand_in_turn_protects_each_one() {
    let locks: Arc<Vec<RecSeq<u64>>> = Arc::new((0..1000u64).map(RecSeq::new).collect());
    let (sample_tx, sample_rx) = std::sync::mpsc::channel::<usize>();
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let reader = {
        let locks = locks.clone();
        std::thread::spawn(move || {
            for round in 0..3 {
                for (i, lock) in locks.iter().enumerate() {
                    assert_eq!(*lock.read(), i as u64 + round * 1000, "round {round}");
                    assert!(!lock.is_reading());
                }
                // Between rounds the writer adds 1000 to every value: wait for it.
                held_tx.send(()).unwrap();
                release_rx.recv().unwrap();
            }
            // Hold one guard at a time on a sample, each after the whole round-robin again
            // (so the caches are as full of collisions as they get), while the writer tries.
            for i in sample_rx {
                for lock in locks.iter() {
                    drop(lock.read());
                }
                let guard = locks[i].read();
                assert!(locks[i].is_reading());
                held_tx.send(()).unwrap();
                release_rx.recv().unwrap();
                drop(guard);
            }
        })
    };
    for _ in 0..3 {
        held_rx.recv().unwrap();
        for lock in locks.iter() {
            let v = *lock.read();
            lock.store(v + 1000);
        }
        release_tx.send(()).unwrap();
    }
    for i in (0..1000).step_by(97) {
        sample_tx.send(i).unwrap();
        held_rx.recv().unwrap();
        // Another lock's writer does not wait for this reader.
        locks[(i + 1) % 1000].store(7);
        let left = Arc::new(AtomicBool::new(false));
        let writer = {
            let (locks, left) = (locks.clone(), left.clone());
            std::thread::spawn(move || {
                locks[i].store(7);
                assert!(
                    left.load(SeqCst),
                    "replace of {i} returned inside its reader"
                );
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        left.store(true, SeqCst);
        release_tx.send(()).unwrap();
        writer.join().unwrap();
    }
    drop(sample_tx);
    reader.join().unwrap();
}
