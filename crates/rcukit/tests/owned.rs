//! Owned read sections (`read_owned`) and the awaitable waits (`synchronize_async`,
//! `synchronize_expedited_async`, `wait_for`, `barrier_async`).
//!
//! Every test that could hang runs under a watchdog.

use rcukit::report::Report;
use rcukit::{OwnedGuard, Rcu, RcuCell, RcuHashMap, RcuList, ReadSection};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// Run `body` on its own thread and fail if it does not finish within `limit`.
fn watchdog<R: Send + 'static>(limit: Duration, body: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let r = body();
        let _ = tx.send(());
        r
    });
    match rx.recv_timeout(limit) {
        Ok(()) => handle.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Ok(_) => unreachable!("the body sends before it returns"),
            Err(payload) => std::panic::resume_unwind(payload),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("hung: did not finish within {limit:?}"),
    }
}

fn quiet(stall: Duration) -> Rcu {
    Rcu::builder()
        .stall_timeout(stall)
        .normal_gp_delay(Duration::from_millis(1))
        .on_report(|_| {})
        .build()
        .unwrap()
}

/// A waker that counts its wake-ups and unparks the thread that made it.
struct CountingWaker {
    woken: AtomicUsize,
    thread: std::thread::Thread,
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

fn counting_waker() -> (Arc<CountingWaker>, Waker) {
    let state = Arc::new(CountingWaker {
        woken: AtomicUsize::new(0),
        thread: std::thread::current(),
    });
    (state.clone(), Waker::from(state))
}

fn poll_once<F: Future + Unpin>(fut: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(fut).poll(&mut Context::from_waker(waker))
}

/// Poll `fut` to completion on this thread, parking between wake-ups: no polling loop, so a
/// future that is never woken hangs (and the watchdog says so).
fn block_on<F: Future + Unpin>(mut fut: F) -> F::Output {
    let (_, waker) = counting_waker();
    loop {
        if let Poll::Ready(v) = poll_once(&mut fut, &waker) {
            return v;
        }
        std::thread::park();
    }
}

/// Does `done` stay false for `window` (a grace period that must not end)?
fn stays_false(done: &AtomicBool, window: Duration) -> bool {
    let until = Instant::now() + window;
    while Instant::now() < until {
        if done.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

#[test]
fn an_owned_guard_moved_to_another_thread_holds_back_both_kinds_of_grace_period() {
    watchdog(Duration::from_secs(60), || {
        let rcu = Arc::new(quiet(Duration::from_secs(30)));
        for expedited in [false, true] {
            // Taken on a thread that then exits: its record leaves the registry.
            let guard = {
                let rcu = rcu.clone();
                std::thread::spawn(move || rcu.read_owned()).join().unwrap()
            };
            let done = Arc::new(AtomicBool::new(false));
            let waiter = {
                let (rcu, done) = (rcu.clone(), done.clone());
                std::thread::spawn(move || {
                    if expedited {
                        rcu.synchronize_expedited();
                    } else {
                        rcu.synchronize();
                    }
                    done.store(true, Ordering::SeqCst);
                })
            };
            assert!(
                stays_false(&done, Duration::from_millis(150)),
                "a grace period ended under an owned guard (expedited: {expedited})"
            );
            // Moved once more, and dropped there.
            let mover = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                drop(guard);
            });
            mover.join().unwrap();
            waiter.join().unwrap();
            assert!(done.load(Ordering::SeqCst));
            assert_eq!(rcu.stats().owned_sections, 0);
        }
    });
}

#[test]
fn cookies_and_callbacks_wait_for_owned_guards() {
    watchdog(Duration::from_secs(60), || {
        let rcu = Arc::new(quiet(Duration::from_secs(30)));
        let guard = rcu.read_owned();
        let cookie = rcu.start_poll();
        let ran = Arc::new(AtomicBool::new(false));
        {
            let ran = ran.clone();
            rcu.call(move || ran.store(true, Ordering::SeqCst));
        }
        let _ = rcu.start_poll_expedited();
        std::thread::sleep(Duration::from_millis(150));
        assert!(!rcu.poll(&cookie), "a cookie expired under an owned guard");
        assert!(
            !ran.load(Ordering::SeqCst),
            "a callback ran under an owned guard"
        );
        std::thread::spawn(move || drop(guard)).join().unwrap();
        rcu.cond_synchronize(&cookie);
        assert!(rcu.poll(&cookie));
        rcu.barrier();
        assert!(ran.load(Ordering::SeqCst));
    });
}

#[test]
fn thousands_of_owned_guards_taken_and_dropped_on_different_threads() {
    watchdog(Duration::from_secs(120), || {
        let rcu = Arc::new(quiet(Duration::from_secs(60)));
        let stop = Arc::new(AtomicBool::new(false));
        // Grace periods run while the guards come and go: the producers start once this thread
        // has, and it asks for one more after the last guard was dropped (a loop that looked
        // at `stop` first ran none when the scheduler started it after the producers ended).
        let started = Arc::new(std::sync::Barrier::new(2));
        let syncer = {
            let (rcu, stop, started) = (rcu.clone(), stop.clone(), started.clone());
            std::thread::spawn(move || {
                started.wait();
                let mut gps = 0u64;
                loop {
                    if gps % 2 == 0 {
                        rcu.synchronize_expedited();
                    } else {
                        rcu.synchronize();
                    }
                    gps += 1;
                    if stop.load(Ordering::SeqCst) {
                        return gps;
                    }
                }
            })
        };
        started.wait();
        // Four producers hand their guards to four droppers, round robin.
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..4).map(|_| mpsc::channel::<OwnedGuard>()).unzip();
        let droppers: Vec<_> = rxs
            .into_iter()
            .map(|rx| std::thread::spawn(move || rx.into_iter().count()))
            .collect();
        let producers: Vec<_> = (0..4)
            .map(|p| {
                let (rcu, txs) = (rcu.clone(), txs.clone());
                std::thread::spawn(move || {
                    for i in 0..2_500 {
                        txs[(p + i) % 4].send(rcu.read_owned()).unwrap();
                    }
                })
            })
            .collect();
        drop(txs);
        for p in producers {
            p.join().unwrap();
        }
        let dropped: usize = droppers.into_iter().map(|d| d.join().unwrap()).sum();
        assert_eq!(dropped, 10_000);
        stop.store(true, Ordering::SeqCst);
        assert!(
            syncer.join().unwrap() > 0,
            "grace periods ran beside the guards"
        );
        assert_eq!(rcu.stats().owned_sections, 0);
        rcu.synchronize(); // nothing is left open
    });
}

/// The value a reader holds under an owned guard across `.await`s, while the task moves
/// between the runtime's threads, is not dropped until the guard is.
#[test]
fn a_value_read_under_an_owned_guard_survives_awaits_and_thread_moves() {
    watchdog(Duration::from_secs(60), || {
        struct Canary(Arc<AtomicBool>);
        impl Drop for Canary {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let rcu: &'static Rcu = Box::leak(Box::new(quiet(Duration::from_secs(30))));
            let dropped = Arc::new(AtomicBool::new(false));
            let cell = Arc::new(RcuCell::with_domain(Canary(dropped.clone()), rcu));
            let (read_tx, read_rx) = tokio::sync::oneshot::channel();
            let released = Arc::new(AtomicBool::new(false));
            let reader = {
                let (cell, dropped, released) = (cell.clone(), dropped.clone(), released.clone());
                tokio::spawn(async move {
                    let guard = rcu.read_owned();
                    let value = cell.load(&guard);
                    let _ = read_tx.send(());
                    let mut threads = std::collections::HashSet::new();
                    for _ in 0..20 {
                        threads.insert(std::thread::current().id());
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        tokio::task::yield_now().await;
                        assert!(
                            !dropped.load(Ordering::SeqCst),
                            "freed under an owned guard"
                        );
                        assert!(!value.0.load(Ordering::SeqCst));
                    }
                    released.store(true, Ordering::SeqCst);
                    drop(guard);
                    threads.len()
                })
            };
            read_rx.await.unwrap();
            drop(cell.swap(Canary(Arc::new(AtomicBool::new(false)))));
            rcu.synchronize_async().await;
            assert!(
                released.load(Ordering::SeqCst),
                "synchronize_async() completed while an owned guard taken before it was held"
            );
            let _threads = reader.await.unwrap();
            rcu.barrier_async().await;
            assert!(
                dropped.load(Ordering::SeqCst),
                "the old value was never dropped"
            );
        });
    });
}

#[test]
fn a_gp_future_is_woken_by_the_grace_period_not_polled() {
    watchdog(Duration::from_secs(60), || {
        let rcu = quiet(Duration::from_secs(30));
        for kind in 0..3 {
            let guard = rcu.read_owned();
            let (state, waker) = counting_waker();
            let cookie = rcu.get_state();
            let mut fut = match kind {
                0 => rcu.synchronize_async(),
                1 => rcu.synchronize_expedited_async(),
                _ => rcu.wait_for(&cookie),
            };
            assert!(poll_once(&mut fut, &waker).is_pending());
            std::thread::sleep(Duration::from_millis(100));
            assert!(
                poll_once(&mut fut, &waker).is_pending(),
                "ready under a guard"
            );
            assert_eq!(rcu.stats().waiting_futures, 1);
            drop(guard);
            while state.woken.load(Ordering::SeqCst) == 0 {
                std::thread::park_timeout(Duration::from_millis(100));
            }
            let mut polls = 0;
            while poll_once(&mut fut, &waker).is_pending() {
                polls += 1;
                std::thread::park();
            }
            assert!(
                polls < 10,
                "woken {polls} times before its grace period ended"
            );
            assert_eq!(rcu.stats().waiting_futures, 0);
            assert!(rcu.poll(&cookie));
        }
    });
}

#[test]
fn an_expired_cookie_is_ready_at_once_and_a_foreign_one_panics() {
    let rcu = quiet(Duration::from_secs(30));
    let cookie = rcu.get_state();
    rcu.synchronize();
    let (_, waker) = counting_waker();
    assert!(poll_once(&mut rcu.wait_for(&cookie), &waker).is_ready());
    let other = quiet(Duration::from_secs(30));
    let foreign = other.get_state();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        drop(rcu.wait_for(&foreign));
    }));
    assert!(caught.is_err());
}

#[test]
fn dropped_futures_leave_nothing_behind() {
    watchdog(Duration::from_secs(60), || {
        let rcu = quiet(Duration::from_secs(30));
        let guard = rcu.read_owned();
        let (_, waker) = counting_waker();
        let mut futs: Vec<_> = (0..100).map(|_| rcu.synchronize_async()).collect();
        for f in &mut futs {
            assert!(poll_once(f, &waker).is_pending());
        }
        assert_eq!(rcu.stats().waiting_futures, 100);
        drop(futs);
        assert_eq!(rcu.stats().waiting_futures, 0);
        // A barrier future dropped before its callbacks ran.
        let blocker = Arc::new(Mutex::new(()));
        let held = blocker.lock().unwrap();
        {
            let blocker = blocker.clone();
            rcu.call(move || drop(blocker.lock()));
        }
        let mut barrier = rcu.barrier_async();
        assert!(poll_once(&mut barrier, &waker).is_pending());
        drop(barrier);
        drop(held);
        drop(guard);
        rcu.barrier();
        rcu.synchronize();
        assert_eq!(rcu.stats().callbacks_pending, 0);
    });
}

#[test]
fn ten_thousand_waiting_futures_start_no_thread() {
    watchdog(Duration::from_secs(60), || {
        let rcu = Rcu::builder()
            .name("waiters")
            .on_report(|_| {})
            .build()
            .unwrap();
        // The domain's own threads (named after it): other tests in this binary start and stop
        // threads of their own meanwhile, so the process's thread count would not do.
        let threads = || {
            std::fs::read_dir("/proc/self/task")
                .map(|tasks| {
                    tasks
                        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                        .filter(|comm| comm.starts_with("waiters"))
                        .count()
                })
                .ok()
        };
        // A thread names itself once it runs: let every one of the domain's threads run (the
        // grace-period thread, the expedited helper, each callback worker through the
        // barrier), then wait until they show their names.
        rcu.synchronize();
        rcu.synchronize_expedited();
        rcu.barrier();
        while !threads().is_some_and(|n| n >= 3) {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(100));
        let guard = rcu.read_owned();
        let before = threads();
        let wakers: Vec<_> = (0..10_000).map(|_| counting_waker()).collect();
        let mut futs: Vec<_> = (0..10_000)
            .map(|i| {
                if i % 2 == 0 {
                    rcu.synchronize_async()
                } else {
                    rcu.synchronize_expedited_async()
                }
            })
            .collect();
        for (f, (_, w)) in futs.iter_mut().zip(&wakers) {
            assert!(poll_once(f, w).is_pending());
        }
        assert_eq!(threads(), before, "waiting futures started threads");
        drop(guard);
        for (f, (state, w)) in futs.iter_mut().zip(&wakers) {
            while poll_once(f, w).is_pending() {
                while state.woken.load(Ordering::SeqCst) == 0 {
                    std::thread::park_timeout(Duration::from_millis(50));
                }
                state.woken.store(0, Ordering::SeqCst);
            }
        }
        assert_eq!(rcu.stats().waiting_futures, 0);
    });
}

#[test]
fn barrier_async_waits_for_every_earlier_callback() {
    watchdog(Duration::from_secs(60), || {
        let rcu = quiet(Duration::from_secs(30));
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..1_000 {
            let ran = ran.clone();
            rcu.call(move || {
                ran.fetch_add(1, Ordering::SeqCst);
            });
        }
        block_on(rcu.barrier_async());
        assert_eq!(ran.load(Ordering::SeqCst), 1_000);
    });
}

#[test]
fn awaiting_a_grace_period_inside_a_guard_panics() {
    let rcu = quiet(Duration::from_secs(30));
    let guard = rcu.read();
    let mut fut = rcu.synchronize_async();
    let (_, waker) = counting_waker();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = poll_once(&mut fut, &waker);
    }));
    let message = caught.unwrap_err();
    let message = message.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("inside a read-side critical section"),
        "{message}"
    );
    drop(guard);
}

/// A domain that reports stalls after 100 ms, and its stall reports so far (each "reader /
/// advice").
fn stall_reporting_domain() -> (Arc<Rcu>, Arc<Mutex<Vec<String>>>) {
    let reports = Arc::new(Mutex::new(Vec::new()));
    let seen = reports.clone();
    let rcu = Rcu::builder()
        .stall_timeout(Duration::from_millis(100))
        .on_report(move |r: &Report| {
            if let Report::Stall(s) = r {
                seen.lock()
                    .unwrap()
                    .push(s.reader.clone() + " / " + s.advice);
            }
        })
        .build()
        .unwrap();
    (Arc::new(rcu), reports)
}

/// The stall reports once there is one (30 s at most: a guard against none, not a timing).
fn first_stalls(reports: &Mutex<Vec<String>>) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while reports.lock().unwrap().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    reports.lock().unwrap().clone()
}

/// Waiting while holding an owned guard cannot be refused (the guard is not tied to the
/// thread), so the grace period reports the stall and names the owned sections.
#[test]
fn waiting_under_ones_own_owned_guard_is_reported_as_a_stall() {
    watchdog(Duration::from_secs(60), || {
        let (rcu, reports) = stall_reporting_domain();
        let guard = rcu.read_owned();
        let waiter = {
            let rcu = rcu.clone();
            std::thread::spawn(move || rcu.synchronize_expedited())
        };
        let seen = first_stalls(&reports);
        assert!(
            seen.iter()
                .any(|r| r.contains("1 owned read-side") && r.contains("OwnedGuard")),
            "{seen:?}"
        );
        assert!(rcu.stats().stalls >= 1);
        drop(guard);
        waiter.join().unwrap();
    });
}

/// A snapshot left inside a value retired to its own domain holds back the grace period that
/// would drop it, and so every later one: the stall report names owned sections and its advice
/// names this case. (The domain never recovers: the test leaves it behind.)
#[test]
fn a_snapshot_left_in_a_value_retired_to_its_domain_is_reported_as_a_stall() {
    watchdog(Duration::from_secs(60), || {
        let (rcu, reports) = stall_reporting_domain();
        let config = Arc::new(RcuCell::with_domain(1u32, rcu.clone()));
        let holder = RcuCell::with_domain(Some(config.clone().snapshot_owned()), rcu.clone());
        holder.store(None); // retires the value that holds the snapshot
        let cookie = rcu.start_poll();
        let seen = first_stalls(&reports);
        assert!(
            seen.iter()
                .any(|a| a.contains("kept inside a value retired")),
            "{seen:?}"
        );
        assert!(!rcu.poll(&cookie), "the grace period cannot end");
        std::mem::forget((holder, config, rcu));
    });
}

#[test]
fn containers_accept_owned_guards_and_refuse_foreign_ones() {
    let rcu = Arc::new(quiet(Duration::from_secs(30)));
    let cell = RcuCell::with_domain(7, rcu.clone());
    let list = RcuList::with_domain(rcu.clone());
    list.push_back(1);
    list.push_back(2);
    let map: RcuHashMap<u32, u32, _, Arc<Rcu>> = RcuHashMap::with_domain(rcu.clone());
    map.pin().insert(1, 10);
    let guard = rcu.read_owned();
    assert!(guard.is_of(&rcu));
    assert_eq!(guard.domain_id(), rcu.id());
    assert_eq!(*cell.load(&guard), 7);
    assert_eq!(list.iter(&guard).copied().collect::<Vec<_>>(), [1, 2]);
    assert_eq!(map.get(&1, &guard), Some(&10));
    assert!(map.contains_key(&1, &guard));
    assert_eq!(map.iter(&guard).count(), 1);
    let foreign = Rcu::global().read_owned();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = cell.load(&foreign);
    }));
    assert!(caught.is_err(), "a guard of another domain was accepted");
}

#[test]
fn an_owned_guard_outlives_its_domain_handle() {
    let rcu = quiet(Duration::from_secs(30));
    let guard = rcu.read_owned();
    let id = rcu.id();
    drop(rcu);
    assert_eq!(guard.domain_id(), id);
    drop(guard);
    // And the global domain's guards are 'static too.
    fn is_static<T: Send + Sync + 'static>(_: &T) {}
    let global = Rcu::global().read_owned();
    is_static(&global);
}

thread_local! {
    static KEPT: std::cell::RefCell<Option<OwnedGuard>> = const { std::cell::RefCell::new(None) };
}

/// An owned guard dropped in a thread-local destructor (possibly after rcukit's own table is
/// gone) still ends its section.
#[test]
fn an_owned_guard_dropped_at_thread_exit_ends_its_section() {
    watchdog(Duration::from_secs(60), || {
        let rcu: &'static Rcu = Box::leak(Box::new(quiet(Duration::from_secs(30))));
        for _ in 0..50 {
            std::thread::spawn(move || {
                let _ = rcu.read(); // rcukit's table exists before ours: destroyed after it
                KEPT.with(|k| *k.borrow_mut() = Some(rcu.read_owned()));
            })
            .join()
            .unwrap();
            std::thread::spawn(move || {
                KEPT.with(|k| *k.borrow_mut() = Some(rcu.read_owned()));
                let _ = rcu.read();
            })
            .join()
            .unwrap();
        }
        assert_eq!(rcu.stats().owned_sections, 0);
        rcu.synchronize_expedited();
    });
}

#[test]
fn the_futures_and_the_owned_guard_are_send_and_unpin() {
    fn send_unpin<T: Send + Unpin>(_: &T) {}
    fn send_sync_static<T: Send + Sync + 'static>(_: &T) {}
    let rcu = Rcu::global();
    let cookie = rcu.get_state();
    send_unpin(&rcu.synchronize_async());
    send_unpin(&rcu.synchronize_expedited_async());
    send_unpin(&rcu.wait_for(&cookie));
    send_unpin(&rcu.barrier_async());
    send_sync_static(&rcu.read_owned());
}

/// Retired values whose `Drop` re-enters the domain's owned and async API: it takes and drops
/// an owned guard and registers, then drops, a grace-period future (on the retiring thread by
/// default, on a worker without `retire_on_producers`).
#[test]
fn a_drop_that_uses_owned_guards_and_futures_of_its_own_domain() {
    struct Reentrant {
        rcu: &'static Rcu,
        done: Arc<AtomicUsize>,
    }
    impl Drop for Reentrant {
        fn drop(&mut self) {
            let guard = self.rcu.read_owned();
            let (_, waker) = counting_waker();
            let mut fut = self.rcu.synchronize_async();
            let _ = poll_once(&mut fut, &waker);
            drop(fut);
            drop(guard);
            self.done.fetch_add(1, Ordering::SeqCst);
        }
    }
    watchdog(Duration::from_secs(60), || {
        for on_producers in [true, false] {
            let rcu: &'static Rcu = Box::leak(Box::new(
                Rcu::builder()
                    .retire_on_producers(on_producers)
                    .on_report(|_| {})
                    .build()
                    .unwrap(),
            ));
            let done = Arc::new(AtomicUsize::new(0));
            for _ in 0..2_000 {
                rcu.retire(Box::new(Reentrant {
                    rcu,
                    done: done.clone(),
                }));
            }
            rcu.barrier();
            assert_eq!(done.load(Ordering::SeqCst), 2_000);
            assert_eq!(rcu.stats().owned_sections, 0);
            assert_eq!(rcu.stats().waiting_futures, 0);
        }
    });
}

/// Owned guards of a domain outliving its handle, closed on four threads while the handle is
/// dropped: the domain's state is freed exactly once, after the last of them closes (the
/// report hook's captures are part of that state, so a sentinel `Arc` in it tells).
#[test]
fn the_last_owned_guard_to_close_frees_a_dropped_domain() {
    watchdog(Duration::from_secs(120), || {
        let rounds = if cfg!(miri) { 3 } else { 200 };
        for round in 0..rounds {
            let sentinel = Arc::new(());
            let rcu = {
                let s = sentinel.clone();
                Rcu::builder()
                    .on_report(move |_| {
                        let _ = &s;
                    })
                    .build()
                    .unwrap()
            };
            let start = Arc::new(std::sync::Barrier::new(5));
            let closers: Vec<_> = (0..4)
                .map(|i| {
                    let guard = rcu.read_owned();
                    let start = start.clone();
                    std::thread::spawn(move || {
                        if i == 0 && round % 2 == 0 {
                            drop(guard); // one closes before the handle goes
                            start.wait();
                        } else {
                            start.wait();
                            drop(guard);
                        }
                    })
                })
                .collect();
            start.wait();
            drop(rcu);
            for c in closers {
                c.join().unwrap();
            }
            // Freed by the last closer, or (when the drop found guards open) by the domain's
            // finisher right after.
            let deadline = Instant::now() + Duration::from_secs(30);
            while Arc::strong_count(&sentinel) != 1 {
                assert!(
                    Instant::now() < deadline,
                    "round {round}: the domain's state was not freed after its last owned guard"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });
}

/// Many tasks on a multi-threaded runtime at once: owned guards held across awaits, every
/// kind of wait awaited, and waits cancelled half-way by a timeout (the future dropped while
/// registered). Nothing hangs and nothing stays registered.
#[test]
fn concurrent_tasks_await_and_cancel_grace_periods() {
    watchdog(Duration::from_secs(120), || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let rcu: &'static Rcu = Box::leak(Box::new(quiet(Duration::from_secs(60))));
        runtime.block_on(async move {
            let tasks: Vec<_> = (0..8)
                .map(|t| {
                    tokio::spawn(async move {
                        for i in 0..100u32 {
                            let guard = rcu.read_owned();
                            tokio::task::yield_now().await;
                            drop(guard);
                            match (t + i) % 5 {
                                0 => rcu.synchronize_async().await,
                                1 => rcu.synchronize_expedited_async().await,
                                2 => rcu.wait_for(&rcu.start_poll()).await,
                                3 => rcu.barrier_async().await,
                                _ => {
                                    let _held = rcu.read_owned(); // the wait cannot end
                                    let wait = rcu.synchronize_expedited_async();
                                    let cut = tokio::time::timeout(Duration::from_millis(1), wait);
                                    assert!(cut.await.is_err(), "ended under an owned guard");
                                }
                            }
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
        });
        assert_eq!(rcu.stats().waiting_futures, 0);
        assert_eq!(rcu.stats().owned_sections, 0);
    });
}

/// What a dropped handle leaves pending for its grace periods.
#[derive(Clone, Copy, Debug)]
enum Pending {
    Retired,
    Cookie,
    UnpolledFuture,
}

/// The handle is dropped by a thread that holds an owned guard of its domain while something
/// waits for a grace period (which waits for that guard): the drop returns at once, and what
/// was pending is done, and the state freed, once the guard closes. (The drop used to run the
/// barriers itself and waited for its own thread's guard forever.)
#[test]
fn a_handle_dropped_under_its_own_owned_guard_with_work_pending_returns() {
    for pending in [Pending::Retired, Pending::Cookie, Pending::UnpolledFuture] {
        watchdog(Duration::from_secs(60), move || {
            let sentinel = Arc::new(());
            let s = sentinel.clone();
            let rcu = Rcu::builder()
                .on_report(move |_| {
                    let _ = &s;
                })
                .build()
                .unwrap();
            let dropped = Arc::new(AtomicUsize::new(0));
            let guard = rcu.read_owned();
            match pending {
                Pending::Retired => rcu.retire(Box::new(DropCount(dropped.clone()))),
                Pending::Cookie => {
                    let _ = rcu.start_poll();
                    let _ = rcu.start_poll_expedited();
                }
                Pending::UnpolledFuture => {
                    drop(rcu.synchronize_async());
                    drop(rcu.synchronize_expedited_async());
                }
            }
            drop(rcu); // returns although the guard is open
            std::thread::sleep(Duration::from_millis(5));
            assert_eq!(
                dropped.load(Ordering::SeqCst),
                0,
                "{pending:?}: freed under the guard"
            );
            drop(guard);
            let deadline = Instant::now() + Duration::from_secs(30);
            while Arc::strong_count(&sentinel) != 1 {
                assert!(
                    Instant::now() < deadline,
                    "{pending:?}: the state was never freed"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            if let Pending::Retired = pending {
                assert_eq!(
                    dropped.load(Ordering::SeqCst),
                    1,
                    "the retired object was dropped"
                );
            }
        });
    }
}

/// Counts its drops.
struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// `Stats::owned_sections` while another thread opens and closes owned sections as fast as it
/// can: a snapshot taken while it runs may count the sections opened while it was taken, but
/// never wraps around. (Read locks first, a section opened and closed between the two loads
/// made the count wrap around to nearly 2^64.)
#[test]
fn owned_sections_never_wraps_around() {
    let rcu = Arc::new(Rcu::new());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let (rcu, stop) = (rcu.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                drop(rcu.read_owned());
            }
        })
    };
    for _ in 0..100_000 {
        let open = rcu.stats().owned_sections;
        assert!(
            open < 1 << 32,
            "{open} owned sections counted, one at most open"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    churn.join().unwrap();
}
