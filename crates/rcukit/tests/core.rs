//! Behaviour of the core: domains, builder errors, readers, cookies, misuse, stalls, batching and
//! piggybacking.

use rcukit::{Error, FenceKind, GpCookie, Rcu};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn domain() -> Rcu {
    Rcu::builder().build().unwrap()
}

#[test]
fn builder_rejects_bad_settings_with_the_setting_named() {
    let cases: Vec<(&str, rcukit::RcuBuilder)> = vec![
        (
            "normal_gp_delay",
            Rcu::builder().normal_gp_delay(Duration::from_secs(11)),
        ),
        (
            "stall_timeout",
            Rcu::builder().stall_timeout(Duration::from_micros(10)),
        ),
        ("callback_workers", Rcu::builder().callback_workers(0)),
        ("callback_workers", Rcu::builder().callback_workers(100_000)),
        ("backlog_callbacks", Rcu::builder().backlog_callbacks(0)),
        ("backlog_bytes", Rcu::builder().backlog_bytes(0)),
        (
            "producer_backlog_callbacks",
            Rcu::builder().producer_backlog_callbacks(0),
        ),
        (
            "producer_backlog_bytes",
            Rcu::builder().producer_backlog_bytes(0),
        ),
        ("callback_batch", Rcu::builder().callback_batch(0)),
        ("name", Rcu::builder().name("")),
    ];
    for (setting, builder) in cases {
        let err = builder.build().expect_err(setting);
        assert_eq!(err.setting(), Some(setting), "{err}");
        let text = err.to_string();
        assert!(text.contains(setting), "message names the setting: {text}");
        assert!(matches!(err, Error::InvalidSetting { .. }));
    }
}

#[test]
fn fence_kinds() {
    let seqcst = Rcu::builder().fence(FenceKind::SeqCst).build().unwrap();
    assert_eq!(seqcst.fence_kind(), FenceKind::SeqCst);
    seqcst.synchronize_expedited();
    seqcst.synchronize();
    // Default: membarrier where the kernel has it, else the fallback.
    let auto = domain();
    match Rcu::builder().fence(FenceKind::Membarrier).build() {
        Ok(mb) => {
            assert_eq!(mb.fence_kind(), FenceKind::Membarrier);
            assert_eq!(auto.fence_kind(), FenceKind::Membarrier);
        }
        Err(err) => {
            assert_eq!(err.setting(), Some("fence"));
            assert_eq!(auto.fence_kind(), FenceKind::SeqCst);
        }
    }
    assert_eq!("seqcst".parse::<FenceKind>(), Ok(FenceKind::SeqCst));
    assert_eq!("membarrier".parse::<FenceKind>(), Ok(FenceKind::Membarrier));
    assert!("mb".parse::<FenceKind>().is_err());
}

#[test]
fn global_domain_is_one_domain() {
    let a = Rcu::global();
    let b = Rcu::global();
    assert!(std::ptr::eq(a, b));
    let _g = a.read();
    assert!(a.is_reading());
}

#[test]
fn guards_nest_and_track_reading() {
    let rcu = domain();
    assert!(!rcu.is_reading());
    let g1 = rcu.read();
    {
        let g2 = rcu.read();
        assert!(rcu.is_reading());
        assert_eq!(g2.domain().id(), rcu.id());
    }
    assert!(rcu.is_reading(), "outer guard still open");
    drop(g1);
    assert!(!rcu.is_reading());
    // A guard of another domain does not make this one "reading".
    let other = domain();
    let _g = other.read();
    assert!(!rcu.is_reading());
    rcu.synchronize_expedited(); // fine: we only read `other`
}

#[test]
fn a_domain_never_waits_for_another_domains_readers() {
    let a = domain();
    let b = domain();
    let held = Arc::new(Barrier::new(2));
    let release = Arc::new(AtomicBool::new(false));
    std::thread::scope(|s| {
        s.spawn(|| {
            let _g = b.read();
            held.wait();
            while !release.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        held.wait();
        // A reader of `b` is open and stays open until we release it: grace periods of `a`
        // complete regardless (if they waited, this would hang).
        a.synchronize_expedited();
        a.synchronize();
        release.store(true, Ordering::Release);
    });
}

#[test]
fn ten_thousand_short_lived_threads_leave_no_records() {
    let rcu = Arc::new(domain());
    let before = rcu.stats().readers;
    for batch in 0..100 {
        let handles: Vec<_> = (0..100)
            .map(|_| {
                let rcu = rcu.clone();
                std::thread::spawn(move || {
                    let _g = rcu.read();
                    let _g2 = Rcu::global().read();
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        if batch % 25 == 0 {
            rcu.synchronize_expedited();
        }
    }
    assert_eq!(
        rcu.stats().readers,
        before,
        "records released at thread exit"
    );
    rcu.synchronize_expedited();
}

#[test]
fn a_reader_of_a_dropped_domain_keeps_working_elsewhere() {
    // A thread reads a domain that is dropped while the thread lives on, then reads another.
    let short = domain();
    {
        let _g = short.read();
    }
    drop(short);
    let long = domain();
    let _g = long.read();
    drop(_g);
    long.synchronize_expedited();
}

/// A `ThreadReader` enters the thread's own record: its guards nest with `Rcu::read`'s (any
/// order of drops), `is_reading` sees them, no second record is made, and a guard may outlive
/// the handle it came from.
#[test]
fn a_thread_reader_reads_the_threads_own_record() {
    let rcu = domain();
    drop(rcu.read());
    let reader = rcu.thread_reader();
    assert_eq!(reader.domain().id(), rcu.id());
    assert_eq!(
        rcu.stats().readers,
        1,
        "the handle names the thread's one record"
    );
    assert!(!rcu.is_reading());
    let g1 = reader.read();
    assert!(rcu.is_reading());
    let g2 = rcu.read();
    let second = rcu.thread_reader();
    let g3 = second.read();
    drop(g1);
    drop(second);
    assert!(rcu.is_reading(), "g2 and g3 are still open");
    drop(g2);
    drop(reader);
    assert!(rcu.is_reading(), "g3 outlives both handles");
    drop(g3);
    assert!(!rcu.is_reading());
    assert_eq!(rcu.stats().readers, 1);
    rcu.synchronize_expedited();
    rcu.synchronize();
}

/// Grace periods wait for a section entered through a `ThreadReader`, of another thread.
#[test]
fn grace_periods_wait_for_a_thread_readers_sections() {
    let rcu = Arc::new(domain());
    for expedited in [false, true] {
        let entered = Arc::new(Barrier::new(2));
        let leaving = Arc::new(AtomicBool::new(false));
        let t = {
            let (rcu, entered, leaving) = (rcu.clone(), entered.clone(), leaving.clone());
            std::thread::spawn(move || {
                let reader = rcu.thread_reader();
                let guard = reader.read();
                entered.wait();
                std::thread::sleep(Duration::from_millis(50));
                leaving.store(true, Ordering::Release);
                drop(guard);
            })
        };
        entered.wait();
        if expedited {
            rcu.synchronize_expedited();
        } else {
            rcu.synchronize();
        }
        assert!(
            leaving.load(Ordering::Acquire),
            "expedited={expedited}: a grace period ended inside a thread reader's section"
        );
        t.join().unwrap();
    }
}

/// Threads that take a handle, read through it and exit leave no record behind, and neither
/// do threads that take a handle without ever reading.
#[test]
fn short_lived_threads_with_thread_readers_leave_no_records() {
    let rcu = Arc::new(domain());
    for i in 0..200 {
        let rcu2 = rcu.clone();
        std::thread::spawn(move || {
            let reader = rcu2.thread_reader();
            if i % 2 == 0 {
                drop(reader.read());
            }
        })
        .join()
        .unwrap();
    }
    let stats = rcu.stats();
    assert_eq!((stats.readers, stats.orphaned_readers), (0, 0), "{stats:?}");
    rcu.synchronize_expedited();
}

#[test]
#[should_panic(expected = "inside a read-side critical section")]
fn synchronize_inside_a_thread_readers_section_panics() {
    let rcu = domain();
    let reader = rcu.thread_reader();
    let _g = reader.read();
    rcu.synchronize();
}

// --- misuse ---------------------------------------------------------------------------------

/// One thread reads many domains in turn (each read misses the one-entry cache), nested and
/// not, while domains are dropped and new ones made: each read lands on the thread's own
/// record for that domain (one record per domain, sections seen by the right domain only).
#[test]
fn a_thread_reading_many_domains_in_turn_keeps_one_record_per_domain() {
    let mut domains: Vec<Rcu> = (0..100)
        .map(|_| Rcu::builder().callback_workers(1).build().unwrap())
        .collect();
    for round in 0..3 {
        for (i, rcu) in domains.iter().enumerate() {
            let outer = rcu.read();
            let next = &domains[(i + 1) % domains.len()];
            assert!(
                rcu.is_reading() && !next.is_reading(),
                "round {round}, domain {i}"
            );
            {
                let _inner = next.read();
                let _again = rcu.read();
                assert!(next.is_reading());
            }
            assert!(!next.is_reading());
            drop(outer);
            assert!(!rcu.is_reading());
        }
        // Drop every other domain and make new ones: the thread's table forgets the records
        // of the dropped ones when it adds the new ones.
        let mut kept = Vec::new();
        for (i, rcu) in domains.into_iter().enumerate() {
            if i % 2 == 0 {
                kept.push(rcu);
            }
        }
        kept.extend((0..50).map(|_| Rcu::builder().callback_workers(1).build().unwrap()));
        domains = kept;
    }
    for rcu in &domains {
        drop(rcu.read());
        assert_eq!(rcu.stats().readers, 1, "one record for this thread");
        rcu.synchronize_expedited(); // no section of this thread is left open
    }
}

/// Domains' read sides are lines packed in shared pages, reused once a domain is dropped. A
/// thread that read a dropped domain, and so has it in its caches, reads a new domain built in
/// the same line: its section must be of the new domain (registered there, holding up its
/// grace periods), not a match on the old domain's entry.
#[test]
fn a_domain_built_in_a_dropped_ones_line_gets_its_own_readers() {
    for _ in 0..20 {
        let old = Rcu::builder().callback_workers(1).build().unwrap();
        drop(old.read());
        drop(old);
        // The free list hands the line just given back out first (unless another test took
        // it in between: then the test is merely weaker this time).
        let new = Arc::new(Rcu::builder().callback_workers(1).build().unwrap());
        let guard = new.read();
        assert!(new.is_reading());
        assert_eq!(
            new.stats().readers,
            1,
            "this thread's record is the new domain's"
        );
        let done = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (new, done) = (new.clone(), done.clone());
            std::thread::spawn(move || {
                new.synchronize_expedited();
                done.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(5));
        assert!(
            !done.load(Ordering::SeqCst),
            "a grace period ended inside a reader"
        );
        drop(guard);
        waiter.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
    }
}

#[test]
#[should_panic(expected = "synchronize() called inside a read-side critical section")]
fn synchronize_inside_reader_panics() {
    let rcu = domain();
    let _g = rcu.read();
    rcu.synchronize();
}

#[test]
#[should_panic(expected = "synchronize_expedited() called inside a read-side critical section")]
fn synchronize_expedited_inside_reader_panics() {
    let rcu = domain();
    let _g = rcu.read();
    let _nested = rcu.read();
    rcu.synchronize_expedited();
}

#[test]
#[should_panic(expected = "cond_synchronize() called inside a read-side critical section")]
fn cond_synchronize_inside_reader_panics() {
    let rcu = domain();
    let _g = rcu.read();
    let cookie = rcu.get_state();
    rcu.cond_synchronize(&cookie);
}

#[test]
#[should_panic(expected = "barrier() called inside a read-side critical section")]
fn barrier_inside_reader_panics() {
    let rcu = domain();
    let _g = rcu.read();
    rcu.barrier();
}

#[test]
#[should_panic(expected = "cookies are only meaningful for the domain that produced them")]
fn foreign_cookie_panics() {
    let a = domain();
    let b = domain();
    let cookie = a.get_state();
    b.poll(&cookie);
}

#[test]
fn expired_cookie_inside_reader_is_fine() {
    // cond_synchronize on an expired cookie does not wait, so it is legal inside a reader.
    let rcu = domain();
    let cookie = rcu.get_state();
    rcu.synchronize_expedited();
    let _g = rcu.read();
    rcu.cond_synchronize(&cookie);
    rcu.cond_synchronize_expedited(&GpCookie::completed());
}

// --- cookies ----------------------------------------------------------------------------------

#[test]
fn get_state_starts_nothing_and_start_poll_does() {
    let rcu = Rcu::builder()
        .normal_gp_delay(Duration::ZERO)
        .build()
        .unwrap();
    let cookie = rcu.get_state();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !rcu.poll(&cookie),
        "get_state must not start a grace period"
    );
    assert_eq!(rcu.stats().normal_gps, 0);

    let polled = rcu.start_poll();
    while !rcu.poll(&polled) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(rcu.stats().normal_gps >= 1);
    assert!(rcu.poll(&cookie), "the earlier cookie is covered too");

    let exp = rcu.start_poll_expedited();
    while !rcu.poll(&exp) {
        std::thread::sleep(Duration::from_micros(100));
    }
    assert!(rcu.stats().expedited_gps >= 1);
}

#[test]
fn cookie_taken_before_synchronize_expires_after_it() {
    let rcu = domain();
    for _ in 0..20 {
        let a = rcu.get_state();
        rcu.synchronize();
        assert!(rcu.poll(&a));
        let b = rcu.get_state();
        rcu.synchronize_expedited();
        assert!(rcu.poll(&b));
        let c = rcu.get_state();
        rcu.cond_synchronize(&c);
        assert!(rcu.poll(&c));
        let d = rcu.get_state();
        rcu.cond_synchronize_expedited(&d);
        assert!(rcu.poll(&d));
    }
    assert!(rcu.poll(&GpCookie::completed()));
}

#[test]
fn cond_synchronize_on_expired_cookie_runs_no_grace_period() {
    let rcu = domain();
    let cookie = rcu.get_state();
    rcu.synchronize_expedited();
    let before = rcu.stats();
    rcu.cond_synchronize(&cookie);
    rcu.cond_synchronize_expedited(&cookie);
    let after = rcu.stats();
    assert_eq!(before.expedited_gps, after.expedited_gps);
    assert_eq!(before.normal_gps, after.normal_gps);
}

#[test]
fn cookie_taken_inside_a_reader_does_not_expire_before_the_reader_ends() {
    let rcu = domain();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // Background grace periods of both kinds.
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                rcu.synchronize_expedited();
            }
        });
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                rcu.synchronize();
            }
        });
        for _ in 0..200 {
            let g = rcu.read();
            let cookie = rcu.get_state();
            for _ in 0..5 {
                assert!(!rcu.poll(&cookie), "cookie expired inside its reader");
                std::thread::yield_now();
            }
            drop(g);
            rcu.cond_synchronize(&cookie);
            assert!(rcu.poll(&cookie));
        }
        stop.store(true, Ordering::Relaxed);
    });
}

// --- synchronize released by either kind --------------------------------------------------------

#[test]
fn synchronize_returns_on_an_expedited_grace_period() {
    // Normal grace periods are held back by a 10 s batching window; expedited ones run all the
    // time. synchronize() must come back without any normal grace period completing.
    let rcu = Rcu::builder()
        .normal_gp_delay(Duration::from_secs(10))
        .build()
        .unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                rcu.synchronize_expedited();
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        for _ in 0..10 {
            rcu.synchronize();
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(
        rcu.stats().normal_gps,
        0,
        "released by expedited grace periods"
    );
}

#[test]
fn with_expedited_callbacks_off_synchronize_waits_for_a_normal_grace_period() {
    let rcu = Rcu::builder()
        .normal_gp_delay(Duration::from_millis(20))
        .expedited_callbacks(false)
        .build()
        .unwrap();
    assert!(!rcu.expedited_callbacks());
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                rcu.synchronize_expedited();
            }
        });
        for i in 1..=3 {
            rcu.synchronize();
            assert!(rcu.stats().normal_gps >= i, "normal grace period completed");
        }
        stop.store(true, Ordering::Relaxed);
    });
}

// --- batching and piggybacking -------------------------------------------------------------------

#[test]
fn a_thousand_concurrent_synchronize_calls_share_a_few_grace_periods() {
    let rcu = Rcu::builder()
        .normal_gp_delay(Duration::from_millis(50))
        .build()
        .unwrap();
    let n = 1000;
    let entering = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    std::thread::scope(|s| {
        // A reader inside its section holds the first grace period, so that every caller
        // arrives while one is in progress, however slowly a loaded machine starts them (the
        // reader is held until every caller is at its call, not for a fixed time).
        let reader = rcu.read();
        for _ in 0..n {
            s.spawn(|| {
                entering.fetch_add(1, Ordering::Relaxed);
                rcu.synchronize();
                done.fetch_add(1, Ordering::Relaxed);
            });
        }
        while entering.load(Ordering::Relaxed) < n {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(100)); // the last callers enter synchronize()
        assert_eq!(done.load(Ordering::Relaxed), 0, "returned under a reader");
        drop(reader);
    });
    assert_eq!(done.load(Ordering::Relaxed), n);
    let gps = rcu.stats().normal_gps;
    println!("1000 synchronize() callers: {gps} normal grace periods");
    assert!(
        (1..=5).contains(&gps),
        "{gps} grace periods for {n} callers"
    );
}

#[test]
fn concurrent_expedited_callers_piggyback() {
    let rcu = domain();
    let n = 16;
    let entering = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    std::thread::scope(|s| {
        // Hold a reader so that the first grace period cannot finish while the others arrive
        // (until every caller is at its call, however late a loaded machine starts it).
        let guard = rcu.read();
        for _ in 0..n {
            s.spawn(|| {
                entering.fetch_add(1, Ordering::Relaxed);
                rcu.synchronize_expedited();
                finished.fetch_add(1, Ordering::Relaxed);
            });
        }
        while entering.load(Ordering::Relaxed) < n {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            finished.load(Ordering::Relaxed),
            0,
            "waiting for our reader"
        );
        drop(guard);
    });
    let gps = rcu.stats().expedited_gps;
    println!("{n} concurrent synchronize_expedited() callers: {gps} expedited grace periods");
    assert!(gps < n as u64, "{gps} grace periods for {n} callers");
}

// --- stalls ------------------------------------------------------------------------------------

#[test]
fn a_long_reader_yields_one_stall_report_and_the_grace_period_completes() {
    let rcu = Rcu::builder()
        .name("stall-test")
        .stall_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let in_reader = Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            let _g = rcu.read();
            in_reader.wait();
            // Held until the stall has been reported, however late a loaded machine runs the
            // grace periods that wait for it.
            let deadline = Instant::now() + Duration::from_secs(20);
            while rcu.stats().stalls == 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        in_reader.wait();
        // A normal and an expedited grace period both wait for the same stalled section.
        s.spawn(|| rcu.synchronize());
        rcu.synchronize_expedited();
    });
    assert_eq!(rcu.stats().stalls, 1, "exactly one report for one stall");
    rcu.synchronize_expedited();
    assert_eq!(rcu.stats().stalls, 1);
}

#[test]
fn stats_are_plain_data() {
    let rcu = domain();
    let s = rcu.stats();
    let copy = s.clone();
    assert_eq!(s, copy);
    assert_eq!(s.stalls, 0);
    assert!(format!("{s:?}").contains("normal_gps"));
}

/// Run `wait` (a grace period) while another thread stays inside a read-side critical section
/// long enough for the waiter to stop spinning and sleep; the wait must end, and only after the
/// reader left. `enter` runs on the reader thread and returns what keeps it inside.
fn a_waiter_that_sleeps_outlasts_the_reader<G>(
    enter: impl Fn() -> G + Send + Sync + 'static,
    wait: impl Fn() + Send + 'static,
) {
    let inside = Arc::new(Barrier::new(2));
    let leaving = Arc::new(AtomicBool::new(false));
    let reader = {
        let (inside, leaving) = (inside.clone(), leaving.clone());
        std::thread::spawn(move || {
            let section = enter();
            inside.wait();
            std::thread::sleep(Duration::from_millis(30));
            leaving.store(true, Ordering::SeqCst);
            drop(section);
        })
    };
    inside.wait();
    // The wait runs on a thread of its own so that a waiter that never ends fails the test
    // (after a minute) instead of hanging it.
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        wait();
        done_tx.send(()).unwrap();
    });
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the grace period never ended");
    assert!(
        leaving.load(Ordering::SeqCst),
        "the grace period ended before the reader left"
    );
    waiter.join().unwrap();
    reader.join().unwrap();
}

#[test]
fn every_kind_of_grace_period_that_sleeps_on_a_reader_ends_after_it_leaves() {
    for fence in [FenceKind::Membarrier, FenceKind::SeqCst] {
        let Ok(rcu) = Rcu::builder().fence(fence).build() else {
            continue; // no membarrier on this kernel
        };
        let rcu: &'static Rcu = Box::leak(Box::new(rcu));
        a_waiter_that_sleeps_outlasts_the_reader(|| rcu.read(), || rcu.synchronize());
        a_waiter_that_sleeps_outlasts_the_reader(|| rcu.read(), || rcu.synchronize_expedited());
        a_waiter_that_sleeps_outlasts_the_reader(|| rcu.read_owned(), || rcu.synchronize());
    }
    for fenced in [true, false] {
        let qsbr = rcukit::Qsbr::builder()
            .fenced_quiescent_states(fenced)
            .build()
            .unwrap();
        let qsbr: &'static rcukit::Qsbr = Box::leak(Box::new(qsbr));
        // An online thread with no quiescent state is the QSBR reader a grace period waits for.
        a_waiter_that_sleeps_outlasts_the_reader(|| qsbr.register(), || qsbr.synchronize());
        a_waiter_that_sleeps_outlasts_the_reader(
            || qsbr.register(),
            || qsbr.synchronize_expedited(),
        );
    }
}

/// `RCUKIT_NO_MEMBARRIER` turns membarrier off when set to a value, and not when set to `0` or
/// to nothing (it used to for any value at all). Each setting in a child process (the test
/// binary again, running only this test), where the first domain detects the system's support.
#[cfg(target_os = "linux")]
#[test]
fn no_membarrier_set_to_zero_or_nothing_leaves_membarrier_on() {
    const CHILD: &str = "RCUKIT_TEST_FENCE_CHILD";
    const NAME: &str = "no_membarrier_set_to_zero_or_nothing_leaves_membarrier_on";
    if std::env::var_os(CHILD).is_some() {
        println!("fence={:?}", Rcu::new().fence_kind());
        return;
    }
    if Rcu::new().fence_kind() != FenceKind::Membarrier {
        return; // no membarrier here (or turned off for the whole run): nothing to tell apart
    }
    for (value, expected) in [
        ("0", FenceKind::Membarrier),
        ("", FenceKind::Membarrier),
        ("1", FenceKind::SeqCst),
        ("yes", FenceKind::SeqCst),
    ] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env("RCUKIT_NO_MEMBARRIER", value)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(&format!("fence={expected:?}")),
            "RCUKIT_NO_MEMBARRIER={value:?}: {stdout}"
        );
    }
}
