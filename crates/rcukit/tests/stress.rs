//! Stress: readers check that the element they hold was not retired while updaters use every
//! wait path, in both fence modes.
//!
//! Elements are never freed during the run (they are leaked into a graveyard and freed at the
//! end), so a grace period that ends too early shows up as a reader seeing a `DEAD` element
//! instead of as undefined behaviour.

use rcukit::{FenceKind, Rcu};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const LIVE: u8 = 1;
const DEAD: u8 = 2;

struct Elem {
    state: AtomicU8,
}

/// Marks its element dead when dropped: what `retire` and `call` reclaim.
struct Tomb(&'static Elem);

impl Drop for Tomb {
    fn drop(&mut self) {
        self.0.state.store(DEAD, Ordering::Release);
    }
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[derive(Default)]
struct Counts {
    reads: AtomicU64,
    early_retirements: AtomicU64,
    updates: [AtomicU64; WAIT_PATHS],
}

const WAIT_PATHS: usize = 8;
const PATH_NAMES: [&str; WAIT_PATHS] = [
    "synchronize",
    "synchronize_expedited",
    "cond_synchronize",
    "cond_synchronize_expedited",
    "poll(start_poll)",
    "poll(start_poll_expedited)",
    "retire",
    "call",
];

fn stress(fence: FenceKind, run_for: Duration) {
    let rcu = Rcu::builder()
        .fence(fence)
        .normal_gp_delay(Duration::from_micros(200))
        .build()
        .expect("domain");
    let graveyard: Mutex<Vec<&'static Elem>> = Mutex::new(Vec::new());
    let new_elem = || {
        let e: &'static Elem = Box::leak(Box::new(Elem {
            state: AtomicU8::new(LIVE),
        }));
        graveyard.lock().unwrap().push(e);
        e as *const Elem as *mut Elem
    };
    let current = AtomicPtr::new(new_elem());
    let counts = Counts::default();
    let deadline = Instant::now() + run_for;

    std::thread::scope(|s| {
        for r in 0..3u64 {
            let (rcu, current, counts) = (&rcu, &current, &counts);
            s.spawn(move || {
                let mut rng = XorShift(0x9e37_79b9 + r);
                while Instant::now() < deadline {
                    let guard = rcu.read();
                    // SAFETY: elements are never freed during the run.
                    let e = unsafe { &*current.load(Ordering::Acquire) };
                    let nested = (rng.next() % 4 == 0).then(|| rcu.read());
                    for _ in 0..(rng.next() % 64) {
                        std::hint::spin_loop();
                    }
                    if rng.next() % 128 == 0 {
                        std::thread::yield_now();
                    }
                    if e.state.load(Ordering::Acquire) != LIVE {
                        counts.early_retirements.fetch_add(1, Ordering::Relaxed);
                    }
                    drop(nested);
                    drop(guard);
                    counts.reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for u in 0..2u64 {
            let (rcu, current, counts, new_elem) = (&rcu, &current, &counts, &new_elem);
            s.spawn(move || {
                let mut rng = XorShift(0x5151_abcd + u);
                let mut i = 0usize;
                while Instant::now() < deadline {
                    let old_ptr = current.swap(new_elem(), Ordering::AcqRel);
                    // SAFETY: elements are never freed during the run.
                    let old: &'static Elem = unsafe { &*old_ptr };
                    // Cycle through every path, with some randomness in the order.
                    let path = (i + (rng.next() % 2) as usize) % WAIT_PATHS;
                    i += 1;
                    match path {
                        0 => rcu.synchronize(),
                        1 => rcu.synchronize_expedited(),
                        2 => rcu.cond_synchronize(&rcu.get_state()),
                        3 => rcu.cond_synchronize_expedited(&rcu.get_state()),
                        4 => {
                            let c = rcu.start_poll();
                            while !rcu.poll(&c) {
                                std::thread::sleep(Duration::from_micros(50));
                            }
                        }
                        5 => {
                            let c = rcu.start_poll_expedited();
                            while !rcu.poll(&c) {
                                std::thread::yield_now();
                            }
                        }
                        6 => {
                            rcu.retire(Box::new(Tomb(old)));
                        }
                        _ => {
                            let tomb = Tomb(old);
                            rcu.call(move || drop(tomb));
                        }
                    }
                    if path < 6 {
                        old.state.store(DEAD, Ordering::Release);
                    }
                    counts.updates[path].fetch_add(1, Ordering::Relaxed);
                    if rng.next() % 64 == 0 {
                        rcu.barrier();
                    }
                }
            });
        }
    });
    rcu.barrier();

    let reads = counts.reads.load(Ordering::Relaxed);
    let errors = counts.early_retirements.load(Ordering::Relaxed);
    let stats = rcu.stats();
    println!("{fence}: {reads} reads, {stats:?}");
    for (name, n) in PATH_NAMES.iter().zip(&counts.updates) {
        println!("  {name:<28} {}", n.load(Ordering::Relaxed));
    }
    assert_eq!(errors, 0, "readers saw retired elements");
    assert!(reads > 1000, "readers made progress");
    for (name, n) in PATH_NAMES.iter().zip(&counts.updates) {
        assert!(n.load(Ordering::Relaxed) > 0, "{name} was exercised");
    }
    assert_eq!(stats.callbacks_pending, 0);
    assert_eq!(stats.callbacks_queued, stats.callbacks_invoked);

    drop(rcu);
    let graveyard = graveyard.into_inner().unwrap();
    let live = graveyard
        .iter()
        .filter(|e| e.state.load(Ordering::Relaxed) == LIVE)
        .count();
    assert_eq!(live, 1, "everything but the current element was retired");
    for e in graveyard {
        // SAFETY: every thread has finished; each element was leaked from a Box exactly once.
        drop(unsafe { Box::from_raw(e as *const Elem as *mut Elem) });
    }
}

#[test]
fn stress_membarrier() {
    if rcukit::Rcu::builder()
        .fence(FenceKind::Membarrier)
        .build()
        .is_err()
    {
        eprintln!("membarrier unavailable here; the seqcst test covers the protocol");
        return;
    }
    stress(FenceKind::Membarrier, Duration::from_millis(2500));
}

#[test]
fn stress_seqcst() {
    stress(FenceKind::SeqCst, Duration::from_millis(2500));
}
