//! Hostile use of callbacks and grace periods: several threads calling the same API at once,
//! user code that re-enters the library, panics inside panics, a closed stderr, `fork()`.
//!
//! Every test runs under a watchdog: a hang fails the test instead of blocking the run.

use rcukit::{Rcu, RcuCell, RcuList};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Run `body` on its own thread and fail if it does not finish within `limit`.
fn watchdog<R: Send + 'static>(limit: Duration, body: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("watched".into())
        .spawn(move || {
            let r = body();
            let _ = tx.send(());
            r
        })
        .unwrap();
    match rx.recv_timeout(limit) {
        Ok(()) => handle.join().unwrap(),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Ok(_) => unreachable!("the body sends before it returns"),
            Err(payload) => std::panic::resume_unwind(payload),
        },
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("hung: did not finish within {limit:?}")
        }
    }
}

/// Counts its drops in a shared counter.
struct Counted(Arc<AtomicU64>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Defect 1: two threads call `barrier()` back to back, two flood `retire()`, and a checker
/// retires k objects, calls `barrier()` and finds all k dropped. A marker that arrived in a
/// later intake pass than the one that stole the producers' lists used to complete without
/// the objects retired between the two.
#[test]
fn barrier_racing_barriers_and_floods_sees_every_earlier_retire() {
    watchdog(Duration::from_secs(120), || {
        let rcu = Arc::new(Rcu::new());
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for _ in 0..2 {
            let (rcu, stop) = (rcu.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    rcu.barrier();
                }
            }));
        }
        for _ in 0..2 {
            let (rcu, stop) = (rcu.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let sink = Arc::new(AtomicU64::new(0));
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    rcu.retire(Box::new(Counted(sink.clone())));
                    n += 1;
                    if n % 4096 == 0 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            }));
        }
        let dropped = Arc::new(AtomicU64::new(0));
        let (mut barriers, mut early, mut worst) = (0u64, 0u64, 0u64);
        let mut retired = 0u64;
        let deadline = Instant::now() + Duration::from_secs(4);
        while Instant::now() < deadline {
            let k = 1 + barriers % 300;
            for _ in 0..k {
                rcu.retire(Box::new(Counted(dropped.clone())));
            }
            retired += k;
            rcu.barrier();
            barriers += 1;
            let missing = retired.saturating_sub(dropped.load(Ordering::Relaxed));
            if missing > 0 {
                early += 1;
                worst = worst.max(missing);
            }
        }
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        assert!(barriers > 10, "only {barriers} barriers ran");
        assert_eq!(
            early, 0,
            "{early} of {barriers} barriers returned before every object retired before them \
             was dropped (up to {worst} missing)"
        );
    });
}
