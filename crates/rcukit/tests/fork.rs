//! `fork()` of a process that uses rcukit: the child's domains work (grace periods of both
//! kinds, cookies, callbacks, barriers, dropping a domain), whatever the parent's other threads
//! were doing at the moment of the fork. A test binary of its own: it forks the whole process.
#![cfg(unix)]

use rcukit::Rcu;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Counts its drops.
struct Counted(Arc<AtomicU64>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Everything the child checks on `rcu`: reads, both kinds of grace period, a polled cookie,
/// retire and call followed by barrier, and the same from a thread born in the child.
fn exercise(rcu: &Rcu) {
    drop(rcu.read());
    rcu.synchronize();
    rcu.synchronize_expedited();
    let cookie = rcu.start_poll();
    while !rcu.poll(&cookie) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let cookie = rcu.start_poll_expedited();
    while !rcu.poll(&cookie) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let dropped = Arc::new(AtomicU64::new(0));
    for _ in 0..1_000 {
        rcu.retire(Box::new(Counted(dropped.clone())));
    }
    let ran = Arc::new(AtomicU64::new(0));
    let r = ran.clone();
    rcu.call(move || {
        r.fetch_add(1, Ordering::Relaxed);
    });
    rcu.barrier();
    assert_eq!(
        dropped.load(Ordering::Relaxed),
        1_000,
        "retired objects not dropped"
    );
    assert_eq!(ran.load(Ordering::Relaxed), 1, "closure did not run");
    let _ = rcu.stats();
}

mod common;

use common::fork::{child_round, fork_within, succeeded};

/// [`fork_within`] a minute.
fn fork_and_wait(body: impl FnOnce()) -> Result<i32, String> {
    fork_within(Duration::from_secs(60), body)
}

/// The child's checks (panics on failure).
fn child(global: &'static Rcu, own: &Arc<Rcu>, alone: Rcu, grandchild: bool) {
    {
        exercise(global);
        exercise(own);
        exercise(&alone);
        // A thread born in the child uses the domains too.
        common::fork::on_a_thread(|| {
            exercise(Rcu::global());
            exercise(own);
        });
        let stats = own.stats();
        assert_eq!(stats.callbacks_pending, 0, "{stats:?}");
        if grandchild {
            // A child's child: the same again, one generation further.
            let status = fork_and_wait(|| {
                exercise(global);
                exercise(own);
            })
            .unwrap();
            assert!(succeeded(status), "the grandchild failed ({status:#x})");
        }
        // Dropping a domain joins its threads: the child's, not the parent's.
        drop(alone);
    }
}

#[test]
fn a_forked_child_can_use_every_domain() {
    let global = Rcu::global();
    let own = Arc::new(Rcu::builder().name("own").build().unwrap());
    let alone = Rcu::builder().name("alone").build().unwrap();
    for rcu in [global, &*own, &alone] {
        for _ in 0..10_000 {
            rcu.retire(Box::new(0u64));
        }
        rcu.call(|| ());
        rcu.synchronize();
    }
    // Leave retired objects and a callback pending in the forking thread's domain.
    alone.retire(Box::new(1u64));
    alone.call(|| ());

    // The parent's other threads at the moment of the fork: a reader holding guards, two
    // retire floods, expedited grace periods and barriers in a loop.
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    {
        let (own, stop) = (own.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _g1 = Rcu::global().read();
                let _g2 = own.read();
                std::thread::sleep(Duration::from_millis(5));
            }
        }));
    }
    for _ in 0..2 {
        let (own, stop) = (own.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                Rcu::global().retire(Box::new([0u8; 64]));
                own.retire(Box::new([0u8; 64]));
            }
        }));
    }
    {
        let (own, stop) = (own.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                own.synchronize_expedited();
                Rcu::global().barrier();
                own.call(|| ());
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(50));

    for round in 0..8u64 {
        child_round(round, Duration::from_secs(60), &stop, || {
            // SAFETY: the child's own copy of `alone`, taken over by the child; the parent's
            // copy is never used in the child (it leaves with `_exit`).
            let alone_in_child = unsafe { std::ptr::read(&alone) };
            child(global, &own, alone_in_child, round % 2 == 1);
        });
        std::thread::sleep(Duration::from_millis(round * 7 % 20));
        // The parent is unaffected.
        exercise(global);
        exercise(&own);
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    drop(alone);
}

/// A fork while a grace period of the parent waits for an owned section held by the forking
/// thread: in the child, that grace period's thread is gone but its turn on the owned-section
/// scan was taken; the child's copy of the guard ends its section, and the child's grace
/// periods of both kinds complete.
#[test]
fn a_forked_child_ends_the_owned_sections_it_inherited() {
    let own = Arc::new(Rcu::builder().name("owned-fork").build().unwrap());
    let guard = own.read_owned();
    let waiting = {
        let own = own.clone();
        std::thread::spawn(move || own.synchronize_expedited())
    };
    // Let the waiter reach the owned-section drain (it holds the turn there).
    std::thread::sleep(Duration::from_millis(100));
    assert!(!waiting.is_finished());
    let status = fork_and_wait(|| {
        assert_eq!(own.stats().owned_sections, 1);
        drop(guard);
        own.synchronize_expedited();
        own.synchronize();
        drop(own.read_owned());
        own.synchronize_expedited();
        assert_eq!(own.stats().owned_sections, 0);
    })
    .unwrap();
    assert!(succeeded(status), "the child failed ({status:#x})");
    waiting.join().unwrap();
}

/// Domains' read-side lines come from pages shared by every domain, handed out under one lock,
/// and building or dropping a domain starts or joins threads. A fork while another thread of
/// the parent builds or drops domains must leave neither that lock nor the thread machinery
/// taken in the child: the child builds, uses and drops domains of its own. (With `std`
/// threads, about 1 child in 90 hung in the thread start of its first domain: the standard
/// library's thread-info lock, copied locked from a parent thread that was starting or
/// exiting; rcukit's threads no longer take it. `tests/fork_stress.rs` forks more often.)
#[test]
fn a_forked_child_builds_domains_while_the_parent_was_building_them() {
    let stop = Arc::new(AtomicBool::new(false));
    let builders: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let rcu = Rcu::builder().callback_workers(1).build().unwrap();
                    drop(rcu.read());
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    for round in 0..16 {
        child_round(round, Duration::from_secs(60), &stop, || {
            for _ in 0..3 {
                let rcu = Rcu::builder().callback_workers(1).build().unwrap();
                exercise(&rcu);
            }
        });
    }
    stop.store(true, Ordering::Relaxed);
    for b in builders {
        b.join().unwrap();
    }
}

/// Poll `fut` on this thread until it is ready, parking between polls.
fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

/// Waits begun before a fork and finished in the child, where the first thing the child does
/// with the domain is that wait: a grace-period future polled, a cookie polled, a barrier
/// future polled. Each is the child's entry point and repairs the domain first, so the child's
/// own threads end the grace period; the barrier's callbacks and markers are abandoned in the
/// child, so its future is ready there. (Futures and `poll` did not repair: the child waited
/// for the parent's threads, which it does not have, for ever.)
#[test]
fn waits_begun_before_a_fork_end_in_the_child() {
    use std::future::Future;
    for wait in ["future", "cookie", "barrier"] {
        let own = Rcu::builder().name("waits-fork").build().unwrap();
        // The forking thread's owned section keeps every grace period of the parent waiting.
        let guard = own.read_owned();
        let cookie = own.start_poll();
        let mut future = Box::pin(own.synchronize_async());
        let waker = std::task::Waker::noop();
        assert!(future
            .as_mut()
            .poll(&mut std::task::Context::from_waker(waker))
            .is_pending());
        own.call(|| {});
        let barrier = own.barrier_async();
        let status = fork_and_wait(|| {
            drop(guard);
            match wait {
                "future" => block_on(future),
                "cookie" => {
                    while !own.poll(&cookie) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                _ => block_on(barrier),
            }
        })
        .unwrap();
        assert!(succeeded(status), "{wait}: the child failed ({status:#x})");
    }
}

/// A child that cannot start every thread of a domain at its first use (here `RLIMIT_NPROC`
/// lets it start one, the grace-period thread) panics there, as documented; once threads can
/// be started again, the next use repairs what is left: a map's write completes (it waited
/// for ever on the map's repair that the panic had left marked as running), and the domain
/// starts only the threads it lacks (it started a second grace-period thread beside the
/// first, and grace periods then ended while readers that began before them still read).
/// Needs root, to make the child a user of its own whose thread count the limit governs.
#[cfg(target_os = "linux")]
#[test]
fn a_child_that_could_not_start_a_domains_threads_repairs_it_at_the_next_use() {
    // SAFETY: a plain getter.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root, to give the child a user of its own");
        return;
    }
    let rcu = Arc::new(
        Rcu::builder()
            .name("npr")
            .callback_workers(1)
            .build()
            .unwrap(),
    );
    let map: rcukit::RcuHashMap<u64, u64, std::collections::hash_map::RandomState, Arc<Rcu>> =
        rcukit::RcuHashMap::with_domain(Arc::clone(&rcu));
    map.pin().insert(1, 1);
    rcu.synchronize();
    let status = fork_and_wait(|| {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: a plain system call on this process.
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut limit) },
            0
        );
        let hard = limit.rlim_max;
        let set_nproc = |soft: libc::rlim_t| {
            let limit = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            // SAFETY: a plain system call on this process.
            let done = unsafe { libc::setrlimit(libc::RLIMIT_NPROC, &limit) };
            assert_eq!(done, 0, "{}", std::io::Error::last_os_error());
        };
        // A user no other process has: this child alone counts against its limit.
        // SAFETY: plain system calls on this process.
        let id = 40_000 + unsafe { libc::getpid() } as u32 % 20_000;
        set_nproc(2); // this thread and one more
                      // SAFETY: as above (root may change its ids; the limit is checked at thread start).
        unsafe {
            assert_eq!(libc::setgid(id), 0);
            assert_eq!(libc::setuid(id), 0);
        }
        let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            map.pin().insert(2, 2);
        }));
        let message = common::support::panic_message(first.expect_err("threads were refused"));
        assert!(message.contains("cannot restart the threads"), "{message}");
        set_nproc(hard);
        map.pin().insert(3, 3);
        // The refused write changed nothing; the later one stands.
        assert_eq!(map.pin().get(&2), None);
        assert_eq!(map.pin().get(&3), Some(&3));
        assert_eq!(map.len(), 2);
        // One thread of each kind (a new thread names itself as it starts: until then it
        // has its creator's name).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let names = common::support::thread_names();
            let count = |kind: &str| names.iter().filter(|n| *n == kind).count();
            let kinds = ["npr-gp", "npr-exp", "npr-cb0"];
            for kind in kinds {
                assert!(count(kind) <= 1, "{kind} threads: {names:?}");
            }
            // And no other thread beside this one (a second of a kind not yet named).
            if kinds.iter().all(|&kind| count(kind) == 1) && names.len() == kinds.len() + 1 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "threads: {names:?}");
            std::thread::sleep(Duration::from_millis(1));
        }
        exercise(&rcu);
    });
    let status = status.unwrap_or_else(|e| panic!("{e}"));
    assert!(succeeded(status), "the child failed ({status:#x})");
}

/// A child that does not exit in time is killed, and the failure says what its threads were
/// doing (so that a hang in CI can be told apart from a slow child, and located, from the log).
#[test]
fn a_hung_child_is_killed_and_its_threads_reported() {
    let report = fork_within(Duration::from_millis(300), || loop {
        std::thread::sleep(Duration::from_secs(1));
    })
    .unwrap_err();
    assert!(report.contains("the child hung"), "{report}");
    // Its one thread, with a state (sleeping, or still on its way there on a loaded machine).
    assert_eq!(report.matches("': state ").count(), 1, "{report}");
}
