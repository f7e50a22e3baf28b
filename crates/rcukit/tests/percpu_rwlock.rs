//! PerCpuRwLock: shared readers, exclusive writers (also across slots shared by several
//! threads), writers getting in among busy readers, and thread churn.

use rcukit::{PerCpuRwLock, RawPerCpuRwLock};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[test]
fn slot_settings() {
    assert_eq!(
        RawPerCpuRwLock::with_slots(0).unwrap_err().setting(),
        Some("slots")
    );
    assert!(RawPerCpuRwLock::with_slots(100_000).is_err());
    assert_eq!(RawPerCpuRwLock::with_slots(5).unwrap().slot_count(), 8);
    let default = PerCpuRwLock::new(0u8);
    // SAFETY: only reads the slot count; the lock's state is not touched.
    let n = unsafe { default.raw() }.slot_count();
    assert!(n.is_power_of_two() && n >= 4, "{n}");
}

#[test]
fn readers_share_writers_exclude() {
    let lock = Arc::new(PerCpuRwLock::new(7u32));
    let held = Arc::new(Barrier::new(2));
    let checked = Arc::new(Barrier::new(2));
    let other = {
        let (lock, held, checked) = (lock.clone(), held.clone(), checked.clone());
        std::thread::spawn(move || {
            held.wait(); // main holds a read lock
            assert_eq!(*lock.try_read().expect("readers share"), 7);
            assert!(lock.try_write().is_none(), "a reader excludes writers");
            checked.wait();
            held.wait(); // main holds the write lock
            assert!(lock.try_read().is_none(), "a writer excludes readers");
            assert!(lock.try_write().is_none(), "a writer excludes writers");
            checked.wait();
        })
    };
    {
        let _r = lock.read();
        held.wait();
        checked.wait();
    }
    {
        let mut w = lock.write();
        *w += 1;
        held.wait();
        checked.wait();
    }
    other.join().unwrap();
    assert_eq!(*lock.read(), 8);
    assert!(!lock.is_locked());
}

#[test]
fn downgrade_keeps_writers_out() {
    let lock = PerCpuRwLock::new(1u32);
    let mut w = lock.write();
    *w = 2;
    let r = lock_api::RwLockWriteGuard::downgrade(w);
    assert_eq!(*r, 2);
    assert!(lock.try_write().is_none());
    drop(r);
    assert!(lock.try_write().is_some());
}

#[test]
fn a_writer_gets_in_among_busy_readers() {
    let lock = Arc::new(PerCpuRwLock::new(0u64));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (lock, stop) = (lock.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Relaxed) {
                    // Back-to-back, overlapping read sections: the slot is almost never free.
                    let g = lock.read();
                    for _ in 0..64 {
                        std::hint::spin_loop();
                    }
                    n += *g;
                }
                n
            })
        })
        .collect();
    for _ in 0..200 {
        *lock.write() += 1;
    }
    stop.store(true, Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(*lock.read(), 200);
}

struct Pair {
    a: u64,
    b: u64,
}

fn churn(lock: Arc<PerCpuRwLock<Pair>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let readers_inside = Arc::new(AtomicUsize::new(0));
    let writers_inside = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicU64::new(0));
    let reader = {
        let (lock, stop, ri, wi, violations, reads) = (
            lock.clone(),
            stop.clone(),
            readers_inside.clone(),
            writers_inside.clone(),
            violations.clone(),
            reads.clone(),
        );
        move |lifetime: Option<u64>| {
            let mut n = 0;
            while !stop.load(Relaxed) && lifetime.map_or(true, |l| n < l) {
                n += 1;
                let g = lock.read();
                ri.fetch_add(1, SeqCst);
                if wi.load(SeqCst) != 0 || g.a != g.b {
                    violations.fetch_add(1, SeqCst);
                }
                std::hint::spin_loop();
                if g.a != g.b {
                    violations.fetch_add(1, SeqCst);
                }
                ri.fetch_sub(1, SeqCst);
                drop(g);
                reads.fetch_add(1, Relaxed);
            }
        }
    };
    let writer = {
        let (lock, stop, ri, wi, violations) = (
            lock.clone(),
            stop.clone(),
            readers_inside.clone(),
            writers_inside.clone(),
            violations.clone(),
        );
        move || {
            let mut n = 0u64;
            while !stop.load(Relaxed) {
                let mut g = lock.write();
                if wi.fetch_add(1, SeqCst) != 0 || ri.load(SeqCst) != 0 {
                    violations.fetch_add(1, SeqCst);
                }
                g.a += 1;
                std::hint::spin_loop();
                g.b += 1;
                wi.fetch_sub(1, SeqCst);
                drop(g);
                n += 1;
                if n % 16 == 0 {
                    std::thread::yield_now();
                }
            }
            n
        }
    };
    let steady: Vec<_> = (0..2)
        .map(|_| {
            let reader = reader.clone();
            std::thread::spawn(move || reader(None))
        })
        .collect();
    let writers: Vec<_> = (0..2).map(|_| std::thread::spawn(writer.clone())).collect();
    // Thread churn: waves of short-lived readers get fresh thread indices (and slots).
    let deadline = Instant::now() + Duration::from_millis(700);
    let mut waves = 0;
    while Instant::now() < deadline {
        waves += 1;
        let wave: Vec<_> = (0..3)
            .map(|_| {
                let reader = reader.clone();
                std::thread::spawn(move || reader(Some(200)))
            })
            .collect();
        for h in wave {
            h.join().unwrap();
        }
    }
    stop.store(true, Relaxed);
    for h in steady {
        h.join().unwrap();
    }
    let writes: u64 = writers.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(violations.load(SeqCst), 0, "exclusion was violated");
    let g = lock.read();
    assert_eq!((g.a, g.b), (writes, writes));
    assert!(waves > 0 && reads.load(Relaxed) > 0);
    drop(g);
    assert!(!lock.is_locked());
}

#[test]
fn exclusion_under_thread_churn() {
    churn(Arc::new(PerCpuRwLock::new(Pair { a: 0, b: 0 })));
}

#[test]
fn exclusion_with_threads_sharing_slots() {
    let raw = RawPerCpuRwLock::with_slots(2).unwrap();
    churn(Arc::new(PerCpuRwLock::from_raw(raw, Pair { a: 0, b: 0 })));
}

/// Run `body` on its own thread and fail if it does not finish within `limit`.
fn watchdog(limit: Duration, body: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        body();
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => handle.join().unwrap(),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(handle.join().unwrap_err())
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("hung for {limit:?}"),
    }
}

/// A nested read while a writer waits, on `threads` threads at once with `slots` slots. With
/// more threads than slots, some threads share their slot: a nested read used to deadlock
/// there (the writer waits for the outer read, the inner read waits for the writer) while it
/// worked on a thread that owns its slot.
fn nested_reads_while_a_writer_waits(slots: usize, threads: usize) {
    let lock = Arc::new(PerCpuRwLock::from_raw(
        RawPerCpuRwLock::with_slots(slots).unwrap(),
        0u64,
    ));
    let all_live = Arc::new(Barrier::new(threads));
    let turn = Arc::new(std::sync::Mutex::new(()));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (lock, all_live, turn) = (lock.clone(), all_live.clone(), turn.clone());
            std::thread::spawn(move || {
                drop(lock.read()); // take a thread index (owner or shared path) ...
                all_live.wait(); // ... while all the threads are alive
                let _turn = turn.lock().unwrap();
                let outer = lock.read();
                let writer = {
                    let lock = lock.clone();
                    std::thread::spawn(move || *lock.write() += 1)
                };
                std::thread::sleep(Duration::from_millis(20)); // the writer now waits
                let inner = lock.read();
                assert_eq!(*inner, *outer);
                let inner2 = lock.try_read().expect("a nested try_read succeeds too");
                drop((inner2, inner, outer));
                writer.join().unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(*lock.read(), threads as u64);
}

#[test]
fn nested_reads_while_a_writer_waits_on_threads_that_share_a_slot() {
    // One slot, three live threads: at least two of them share it.
    watchdog(Duration::from_secs(60), || {
        nested_reads_while_a_writer_waits(1, 3)
    });
}

#[test]
fn nested_reads_while_a_writer_waits_on_threads_that_own_their_slot() {
    watchdog(Duration::from_secs(60), || {
        nested_reads_while_a_writer_waits(1024, 2)
    });
}

/// A nested read on the shared path of a lock tallied past the thread's eight in-place
/// entries (its ninth lock), after the guard of one of the first eight was let go, while a
/// writer waits: the read used to look for the outer guard in place only, miss it, and wait
/// for the writer, which waited for the outer guard.
#[test]
fn a_nested_read_of_a_ninth_lock_held_while_a_writer_waits() {
    watchdog(Duration::from_secs(60), || {
        let locks: Arc<Vec<PerCpuRwLock<u32>>> = Arc::new(
            (0..9)
                .map(|_| PerCpuRwLock::from_raw(RawPerCpuRwLock::with_slots(1).unwrap(), 0))
                .collect(),
        );
        // This thread takes a thread index before the reader: of two live threads on locks of
        // one slot, at least the reader shares the slot.
        drop(locks[0].read());
        let reader = {
            let locks = Arc::clone(&locks);
            std::thread::spawn(move || {
                let mut outer: Vec<_> = locks.iter().map(|l| l.read()).collect();
                drop(outer.remove(0));
                let writer = {
                    let locks = Arc::clone(&locks);
                    std::thread::spawn(move || *locks[8].write() += 1)
                };
                // The writer has raised its flag once a fresh reader backs off.
                let fresh = Arc::clone(&locks);
                std::thread::spawn(move || loop {
                    match fresh[8].try_read() {
                        Some(g) => drop(g),
                        None => break,
                    }
                    std::thread::yield_now();
                })
                .join()
                .unwrap();
                let inner = locks[8].read();
                assert_eq!(*inner, 0, "the writer is still waiting");
                drop((inner, outer));
                writer.join().unwrap();
            })
        };
        reader.join().unwrap();
        assert_eq!(*locks[8].read(), 1);
    });
}

/// `is_locked_exclusive` used to look at slot 0's writer flag only: true while a writer still
/// waited for readers (and even while it was backing out of a failed `try_write`).
#[test]
fn is_locked_exclusive_means_a_writer_holds_the_lock() {
    let lock = Arc::new(PerCpuRwLock::new(0u32));
    let reading = lock.read();
    let writer = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            let mut w = lock.write();
            *w += 1;
            assert!(lock.is_locked_exclusive());
        })
    };
    std::thread::sleep(Duration::from_millis(50)); // the writer holds the flags, waits for us
    assert!(
        !lock.is_locked_exclusive(),
        "a writer that still waits for a reader does not hold the lock"
    );
    assert!(lock.is_locked());
    drop(reading);
    writer.join().unwrap();
    assert!(!lock.is_locked_exclusive());
    assert_eq!(*lock.read(), 1);
}

/// A read guard leaked with `mem::forget` keeps its lock read-locked for good; a lock assigned
/// over it, or swapped into its place, is another lock, and the leaking thread's reads of it
/// must still wait for its writer. A thread's tally of the shared-path guards it holds was
/// keyed by the lock's address: such a read counted as nested and skipped the writer flag
/// while a writer was in (a data race, seen by Miri).
#[test]
fn a_lock_put_where_a_read_guard_was_forgotten_keeps_its_writer_alone() {
    type Lock = PerCpuRwLock<u64>;
    let one_slot = || Lock::from_raw(RawPerCpuRwLock::with_slots(1).unwrap(), 0);
    let check = |what: &str, lock: &Lock| {
        let write = lock.write();
        assert!(
            lock.try_read().is_none(),
            "{what}: a read beside the writer"
        );
        drop(write);
        assert!(
            lock.try_read().is_some(),
            "{what}: a read once the writer left"
        );
    };
    // Two live threads on a lock of one slot: at least one reads through the shared path.
    let both_live = Barrier::new(2);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                drop(one_slot().read()); // take a thread index while both threads live
                both_live.wait();
                let mut lock = one_slot();
                std::mem::forget(lock.read());
                lock = one_slot();
                check("assigned over", &lock);
                let mut other = one_slot();
                std::mem::forget(lock.read());
                std::mem::swap(&mut lock, &mut other);
                check("swapped in", &lock);
            });
        }
    });
}
