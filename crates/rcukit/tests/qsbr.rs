//! QSBR domain: API, misuse panics, the stall report for a silent online thread, and a stress
//! test with online/offline and registration churn over every wait path.

mod common;

use rcukit::Qsbr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[test]
fn register_quiescent_offline_online() {
    let qsbr = Qsbr::builder().name("api").build().unwrap();
    assert_eq!(qsbr.name(), "api");
    assert!(!qsbr.is_online());
    {
        let mut me = qsbr.register();
        assert!(me.is_online() && qsbr.is_online());
        assert_eq!(qsbr.stats().readers, 1);
        me.quiescent_state();
        me.offline();
        assert!(!me.is_online() && !qsbr.is_online());
        me.quiescent_state(); // no-op while offline
        assert!(!qsbr.is_online());
        qsbr.synchronize(); // allowed while offline
        qsbr.synchronize_expedited();
        me.online();
        assert!(qsbr.is_online());
        me.offline_while(|| {
            assert!(!qsbr.is_online());
            qsbr.synchronize();
            qsbr.barrier();
        });
        assert!(me.is_online());
        // Non-blocking calls are fine while online.
        let cookie = qsbr.start_poll();
        let _ = qsbr.poll(&cookie);
        qsbr.call(|| {});
    }
    assert!(!qsbr.is_online());
    assert_eq!(qsbr.stats().readers, 0);
    // Unregistered threads never hold grace periods.
    qsbr.synchronize();
    let cookie = qsbr.get_state();
    qsbr.cond_synchronize(&cookie);
    assert!(qsbr.poll(&cookie));
    qsbr.barrier();
    assert!(qsbr.stats().normal_gps + qsbr.stats().expedited_gps >= 2);
}

/// `call_raw` queues an allocation-free callback that runs once, after a grace period that
/// waits for an online thread's quiescent state.
#[test]
fn call_raw_runs_once_after_a_quiescent_state() {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    unsafe fn run(data: *mut ()) {
        // SAFETY: `data` is the `&'static AtomicBool` passed below, which outlives the test.
        let seen_qs = unsafe { &*data.cast::<AtomicBool>() };
        assert!(
            seen_qs.load(SeqCst),
            "ran before the online thread's quiescent state"
        );
        RUNS.fetch_add(1, SeqCst);
    }
    static QUIESCED: AtomicBool = AtomicBool::new(false);
    let qsbr = Arc::new(Qsbr::new());
    let online = Arc::new(Barrier::new(2));
    let queued = Arc::new(Barrier::new(2));
    let reader = {
        let (qsbr, online, queued) = (qsbr.clone(), online.clone(), queued.clone());
        std::thread::spawn(move || {
            let mut me = qsbr.register();
            online.wait();
            queued.wait();
            std::thread::sleep(Duration::from_millis(20));
            QUIESCED.store(true, SeqCst);
            me.quiescent_state();
        })
    };
    online.wait();
    let data = (&QUIESCED as *const AtomicBool).cast_mut().cast::<()>();
    // SAFETY: `run` only reads the static flag behind `data`, from any thread, once.
    unsafe { qsbr.call_raw(run, data, 0) };
    queued.wait();
    qsbr.barrier();
    reader.join().unwrap();
    assert_eq!(RUNS.load(SeqCst), 1);
    assert_eq!(qsbr.stats().callbacks_invoked, 1);
}

#[test]
fn offline_while_restores_online_after_a_panic() {
    let qsbr = Qsbr::new();
    let mut me = qsbr.register();
    let result = catch_unwind(AssertUnwindSafe(|| me.offline_while(|| panic!("inside"))));
    assert!(result.is_err());
    assert!(me.is_online() && qsbr.is_online());
}

#[test]
#[should_panic(expected = "is already registered with QSBR domain")]
fn double_registration_panics() {
    let qsbr = Qsbr::new();
    let _a = qsbr.register();
    let _b = qsbr.register();
}

#[test]
fn waiting_while_online_panics_with_an_explanation() {
    let qsbr = Qsbr::builder().name("misuse").build().unwrap();
    let me = qsbr.register();
    let fresh = qsbr.get_state();
    type Attempt<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let attempts: Vec<Attempt<'_>> = vec![
        ("synchronize()", Box::new(|| qsbr.synchronize())),
        (
            "synchronize_expedited()",
            Box::new(|| qsbr.synchronize_expedited()),
        ),
        (
            "cond_synchronize()",
            Box::new(|| qsbr.cond_synchronize(&fresh)),
        ),
        (
            "cond_synchronize_expedited()",
            Box::new(|| qsbr.cond_synchronize_expedited(&fresh)),
        ),
        ("barrier()", Box::new(|| qsbr.barrier())),
    ];
    for (what, attempt) in attempts {
        let err = catch_unwind(AssertUnwindSafe(attempt)).expect_err(what);
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains(what) && msg.contains("online in QSBR domain 'misuse'"),
            "{what}: unexpected message {msg:?}"
        );
    }
    drop(me);
    qsbr.synchronize();
}

#[test]
fn cookie_from_another_domain_panics() {
    let a = Qsbr::new();
    let b = Qsbr::new();
    let cookie = a.get_state();
    assert!(catch_unwind(AssertUnwindSafe(|| b.poll(&cookie))).is_err());
}

#[test]
fn grace_period_waits_for_the_online_thread() {
    grace_period_waits_for_the_online_thread_in(false);
}

#[test]
fn grace_period_waits_for_the_online_thread_with_fenced_quiescent_states() {
    grace_period_waits_for_the_online_thread_in(true);
}

fn grace_period_waits_for_the_online_thread_in(fenced: bool) {
    let qsbr = Qsbr::builder()
        .fenced_quiescent_states(fenced)
        .build()
        .unwrap();
    let qsbr = Arc::new(qsbr);
    let announced = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(2));
    let reader = {
        let (qsbr, announced, start) = (qsbr.clone(), announced.clone(), start.clone());
        std::thread::spawn(move || {
            let mut me = qsbr.register();
            start.wait();
            std::thread::sleep(Duration::from_millis(30)); // online and silent
            announced.store(true, Relaxed);
            me.quiescent_state();
            me.offline();
            std::thread::sleep(Duration::from_millis(30)); // offline: never waited for
        })
    };
    start.wait();
    qsbr.synchronize_expedited();
    // The quiescent state's Release store orders the flag before the grace period's end.
    assert!(
        announced.load(Relaxed),
        "the grace period ended before the online thread announced a quiescent state"
    );
    qsbr.synchronize(); // the thread is offline now: returns without it
    reader.join().unwrap();
}

/// The child half of `silent_online_thread_is_reported`: runs in a subprocess so that the
/// parent can read its stderr.
fn stall_child() {
    let qsbr = Arc::new(
        Qsbr::builder()
            .name("stall-test")
            .stall_timeout(Duration::from_millis(50))
            .build()
            .unwrap(),
    );
    let release = Arc::new(AtomicBool::new(false));
    let registered = Arc::new(Barrier::new(2));
    let silent = {
        let (qsbr, release, registered) = (qsbr.clone(), release.clone(), registered.clone());
        std::thread::Builder::new()
            .name("silent-reader".into())
            .spawn(move || {
                let mut me = qsbr.register();
                registered.wait();
                while !release.load(Acquire) {
                    std::thread::sleep(Duration::from_millis(5)); // online, no quiescent state
                }
                me.quiescent_state();
            })
            .unwrap()
    };
    registered.wait();
    let waiter = {
        let qsbr = qsbr.clone();
        std::thread::spawn(move || qsbr.synchronize())
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while qsbr.stats().stalls == 0 {
        assert!(Instant::now() < deadline, "no stall was reported");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!waiter.is_finished(), "the grace period must keep waiting");
    release.store(true, Release);
    waiter.join().unwrap();
    silent.join().unwrap();
    assert_eq!(
        qsbr.stats().stalls,
        1,
        "one report per stalled grace period"
    );
}

#[test]
fn silent_online_thread_is_reported() {
    if std::env::var_os("RCUKIT_QSBR_STALL_CHILD").is_some() {
        stall_child();
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "silent_online_thread_is_reported",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RCUKIT_QSBR_STALL_CHILD", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stderr}");
    let reports: Vec<_> = stderr
        .lines()
        .filter(|l| l.starts_with("rcukit: stall:"))
        .collect();
    assert_eq!(reports.len(), 1, "expected one stall report:\n{stderr}");
    let report = reports[0];
    assert!(
        report.contains("QSBR domain 'stall-test'")
            && report.contains("thread 'silent-reader' (tid ")
            && report.contains("quiescent state"),
        "the report must name the domain and the thread: {report}"
    );
}

/// A node readers find through the shared pointer. "Freeing" it marks it; the memory itself
/// is kept until the end of the test, so a premature free shows up as a marked node seen by a
/// reader rather than as undefined behaviour.
struct Node {
    freed: AtomicBool,
    value: u64,
}

/// Marks a node freed when dropped: what `retire` runs.
struct FreeOnDrop(&'static Node);

impl Drop for FreeOnDrop {
    fn drop(&mut self) {
        self.0.freed.store(true, Relaxed);
    }
}

#[test]
fn stress_with_churn_and_every_wait_path() {
    stress_with_churn_and_every_wait_path_in(false);
}

#[test]
fn stress_with_churn_and_every_wait_path_with_fenced_quiescent_states() {
    stress_with_churn_and_every_wait_path_in(true);
}

fn stress_with_churn_and_every_wait_path_in(fenced: bool) {
    let qsbr: &'static Qsbr = Box::leak(Box::new(
        Qsbr::builder()
            .fenced_quiescent_states(fenced)
            .normal_gp_delay(Duration::from_micros(200))
            .build()
            .unwrap(),
    ));
    let new_node = |value| -> &'static Node {
        Box::leak(Box::new(Node {
            freed: AtomicBool::new(false),
            value,
        }))
    };
    let current = Arc::new(AtomicPtr::new(new_node(0) as *const Node as *mut Node));
    let stop = Arc::new(AtomicBool::new(false));
    let violations = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicU64::new(0));

    let reader_body = {
        let (current, stop, violations, reads) = (
            current.clone(),
            stop.clone(),
            violations.clone(),
            reads.clone(),
        );
        move |seed: u64, lifetime: Option<usize>| {
            let mut me = qsbr.register();
            let mut n = 0usize;
            let mut rng = seed | 1;
            // At least one read, however late a loaded machine starts this thread.
            while (!stop.load(Relaxed) || n == 0) && lifetime.map_or(true, |l| n < l) {
                n += 1;
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                // SAFETY: nodes are never deallocated during the test.
                let node = unsafe { &*current.load(Acquire) };
                if node.freed.load(Relaxed) {
                    violations.fetch_add(1, SeqCst);
                }
                for _ in 0..(rng % 64) {
                    std::hint::spin_loop();
                }
                std::hint::black_box(node.value);
                if node.freed.load(Relaxed) {
                    violations.fetch_add(1, SeqCst);
                }
                reads.fetch_add(1, Relaxed);
                match rng % 97 {
                    0 => me.offline_while(std::thread::yield_now),
                    1 => {
                        me.offline();
                        std::thread::sleep(Duration::from_micros(50));
                        me.online();
                    }
                    2 => {
                        // Registration churn inside one thread.
                        drop(me);
                        me = qsbr.register();
                    }
                    _ => me.quiescent_state(),
                }
            }
        }
    };

    let readers: Vec<_> = (0..2)
        .map(|i| {
            let body = reader_body.clone();
            std::thread::spawn(move || body(0x9e37_79b9 + i, None))
        })
        .collect();
    // Thread churn: short-lived registered threads coming and going.
    let churn = {
        let (body, stop) = (reader_body.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut k = 0u64;
            while !stop.load(Relaxed) || k == 0 {
                k += 1;
                let body = body.clone();
                std::thread::spawn(move || body(k.wrapping_mul(0x2545_f491), Some(200)))
                    .join()
                    .unwrap();
            }
            k
        })
    };

    let deadline = Instant::now() + Duration::from_millis(1500);
    let mut counts = [0u64; 7];
    let mut value = 0;
    // Every path at least once, however slow a loaded machine makes the grace periods.
    while Instant::now() < deadline || counts.contains(&0) {
        value += 1;
        let node = new_node(value);
        let old_ptr = current.swap(node as *const Node as *mut Node, AcqRel);
        // SAFETY: nodes are never deallocated during the test.
        let old: &'static Node = unsafe { &*old_ptr };
        let path = (value % 7) as usize;
        counts[path] += 1;
        match path {
            0 => {
                qsbr.synchronize();
                old.freed.store(true, Relaxed);
            }
            1 => {
                qsbr.synchronize_expedited();
                old.freed.store(true, Relaxed);
            }
            2 => {
                let cookie = qsbr.get_state();
                qsbr.cond_synchronize(&cookie);
                old.freed.store(true, Relaxed);
            }
            3 => {
                let cookie = qsbr.start_poll();
                while !qsbr.poll(&cookie) {
                    std::thread::yield_now();
                }
                old.freed.store(true, Relaxed);
            }
            4 => {
                let cookie = qsbr.start_poll_expedited();
                while !qsbr.poll(&cookie) {
                    std::thread::yield_now();
                }
                old.freed.store(true, Relaxed);
            }
            5 => qsbr.call(move || old.freed.store(true, Relaxed)),
            _ => {
                let cookie = qsbr.get_state();
                qsbr.cond_synchronize_expedited(&cookie);
                qsbr.retire(Box::new(FreeOnDrop(old)));
            }
        }
    }
    qsbr.barrier();
    stop.store(true, Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    let churned = churn.join().unwrap();
    qsbr.barrier();

    assert_eq!(violations.load(SeqCst), 0, "a reader saw a freed node");
    assert!(counts.iter().all(|&c| c > 0), "every path ran: {counts:?}");
    assert!(reads.load(Relaxed) > 0 && churned > 0);
    let stats = qsbr.stats();
    assert_eq!(stats.readers, 0, "every registration was released");
    assert_eq!(stats.callbacks_pending, 0);
    assert_eq!(stats.stalls, 0);
}

/// Poll `done` every millisecond; panic with `what` after 60 s (a progress bound, not a
/// timing assertion).
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what}: not after 60 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A registered thread that announces quiescent states while a grace period has long been
/// waiting for another (online, silent) thread gives way once in that grace period, however
/// many it announces; not at all once the grace period has ended, nor with
/// `readers_give_way(false)`.
#[test]
fn running_threads_give_way_once_to_a_long_grace_period() {
    for give_way in [true, false] {
        let qsbr = Qsbr::builder().readers_give_way(give_way).build().unwrap();
        give_way_script(&qsbr, give_way);
    }
}

fn give_way_script(qsbr: &Qsbr, give_way: bool) {
    let (announce, announcements) = std::sync::mpsc::channel::<()>();
    let (start_second, second) = std::sync::mpsc::channel::<()>();
    let stop = AtomicBool::new(false);
    let announced = AtomicU64::new(0);
    let done = AtomicUsize::new(0);
    // H's quiescent states that have returned: a thread counts its giving way after its
    // quiescent state, which may already have ended the grace period.
    let h_returned = AtomicU64::new(0);
    let gave_way = || qsbr.stats().readers_gave_way;
    // H announces until the synchronizing thread has ended its `n`th grace period (a quiescent
    // state announced before that grace period began does not end it, and a busy machine may
    // start it late); then every quiescent state H was told to announce returns. So the one
    // that ended the grace period, with any giving way in it, has returned, and none is left
    // to announce in the next grace period. (Those after the end do not give way: the waiter
    // withdrew its request before its grace period ended.)
    let sent = std::cell::Cell::new(0u64);
    let end_grace_period = |n: usize| {
        wait_until("the grace period", || {
            announce.send(()).unwrap();
            sent.set(sent.get() + 1);
            done.load(Acquire) == n
        });
        wait_until("H's quiescent states", || {
            h_returned.load(Acquire) == sent.get()
        });
    };
    // Y's quiescent states, waited for: `n` more than now.
    let more_announced = |n: u64| {
        let from = announced.load(Relaxed);
        wait_until("the announcing thread", || {
            announced.load(Relaxed) >= from + n
        });
    };
    std::thread::scope(|s| {
        // Whatever happens below (a failed assertion too), the threads end.
        let _stop = common::support::StopOnDrop(&stop);
        // H: online, silent but for the quiescent states it is told to announce.
        let stop_ref = &stop;
        let h_returned_ref = &h_returned;
        s.spawn(move || {
            let mut me = qsbr.register();
            while !stop_ref.load(Acquire) {
                if announcements.recv_timeout(Duration::from_millis(1)).is_ok() {
                    me.quiescent_state();
                    h_returned_ref.fetch_add(1, Release);
                }
            }
        });
        // Y: announces quiescent states all the time.
        s.spawn(|| {
            let mut me = qsbr.register();
            while !stop.load(Acquire) {
                me.quiescent_state();
                announced.fetch_add(1, Relaxed);
            }
        });
        wait_until("registration", || qsbr.stats().readers == 2);
        let done_ref = &done;
        s.spawn(move || {
            let done = done_ref;
            qsbr.synchronize_expedited();
            done.fetch_add(1, Release);
            while second.recv_timeout(Duration::from_millis(1)).is_err() {
                if stop_ref.load(Acquire) {
                    return;
                }
            }
            qsbr.synchronize_expedited();
            done.fetch_add(1, Release);
        });
        // The first grace period waits 20 ms for H: a long wait.
        std::thread::sleep(Duration::from_millis(20));
        end_grace_period(1);
        // Y at most once, and H at most once: at the quiescent state that ended the grace
        // period, if the waiter's request still stood (H is then past its target).
        let after_first = gave_way();
        assert!(
            after_first <= 2,
            "gave way {after_first} times in one grace period"
        );
        start_second.send(()).unwrap();
        // The second, while H stays silent: Y gives way once (after a long wait, a wait asks
        // from its first sleep), however many quiescent states it announces.
        if give_way {
            wait_until("giving way", || gave_way() > after_first);
        }
        more_announced(10_000);
        let expected = after_first + u64::from(give_way);
        assert_eq!(gave_way(), expected, "once per grace period");
        // H's quiescent state ends it (H may give way then too: it is past the target).
        end_grace_period(2);
        let after_second = gave_way();
        assert!(after_second <= expected + 1);
        // No grace period waits now: nobody gives way.
        more_announced(10_000);
        assert_eq!(
            gave_way(),
            after_second,
            "gave way with no grace period waiting"
        );
        if !give_way {
            assert_eq!(after_second, 0, "gave way with readers_give_way(false)");
        }
    });
}
