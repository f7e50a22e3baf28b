//! Thread exit: a guard, a QSBR registration or a retire that lives in a user's thread-local,
//! and a map written from one, must keep their promises whichever thread-local is destroyed
//! first, rcukit's or the user's.
//!
//! Thread-local destructors run in the reverse order of registration, and a thread-local is
//! registered on first use. `Order::UserFirst` uses the user's thread-local before rcukit's, so
//! rcukit's table is destroyed *first* and the user's destructor runs after it (the hazard);
//! `Order::RcukitFirst` is the other way round. Every test runs both, each under a watchdog.

use rcukit::{PerCpuRwLock, Qsbr, RawPerCpuRwLock, Rcu, RcuCell, RcuHashMap, RecSeq, Reclaim};
use std::cell::RefCell;
use std::collections::hash_map::RandomState;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::channel;
use std::sync::LazyLock;
use std::time::Duration;

#[derive(Clone, Copy, Debug)]
enum Order {
    UserFirst,
    RcukitFirst,
}

const ORDERS: [Order; 2] = [Order::UserFirst, Order::RcukitFirst];

/// The user's thread-local: runs a closure when the thread's thread-locals are destroyed.
struct AtExit(Option<Box<dyn FnOnce()>>);

impl Drop for AtExit {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

thread_local! {
    static AT_EXIT: RefCell<AtExit> = const { RefCell::new(AtExit(None)) };
}

/// Spawn a thread that registers the user's thread-local and rcukit's (`touch`) in `order`,
/// then runs `body`, whose returned closure runs in the user's thread-local destructor.
fn exiting_thread(
    order: Order,
    touch: impl FnOnce() + Send + 'static,
    body: impl FnOnce() -> Box<dyn FnOnce()> + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        match order {
            Order::UserFirst => {
                AT_EXIT.with(|_| ());
                touch();
            }
            Order::RcukitFirst => {
                touch();
                AT_EXIT.with(|_| ());
            }
        }
        let at_exit = body();
        AT_EXIT.with(|a| a.borrow_mut().0 = Some(at_exit));
    })
}

/// Run `test` for both orders, each on its own watched thread.
fn both_orders(limit: Duration, test: fn(Order)) {
    for order in ORDERS {
        let (tx, rx) = channel();
        let h = std::thread::spawn(move || {
            test(order);
            let _ = tx.send(());
        });
        match rx.recv_timeout(limit) {
            Ok(()) => h.join().unwrap(),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                std::panic::resume_unwind(h.join().unwrap_err())
            }
            Err(_) => panic!("{order:?}: hung for {limit:?}"),
        }
    }
}

/// A thread, with the thread-locals registered in `order`, takes something with `hold` that
/// must keep writers out, and keeps it in its user thread-local. That destructor says so,
/// waits 100 ms, sets `releasing` and drops it. Meanwhile `wait` (a grace period, a
/// replacement, a write lock) starts and must not return before `releasing` is set: an early
/// return would come during the 100 ms.
fn writer_waits_for_an_exiting_holder<H: 'static>(
    order: Order,
    touch: fn(),
    hold: fn() -> H,
    wait: fn(),
    what: &str,
) {
    let releasing: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    let (entered, entered_rx) = channel::<()>();
    let t = exiting_thread(order, touch, move || {
        let held = hold();
        Box::new(move || {
            entered.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            // Set before the release, so the writer that the release lets go sees it.
            releasing.store(true, Ordering::Release);
            drop(held);
        })
    });
    entered_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the destructor ran");
    wait();
    assert!(
        releasing.load(Ordering::Acquire),
        "{order:?}: {what} returned while an exiting thread still held its read side"
    );
    t.join().unwrap();
}

static RCU: LazyLock<Rcu> = LazyLock::new(|| Rcu::builder().name("exit").build().unwrap());
static QSBR: LazyLock<Qsbr> = LazyLock::new(|| Qsbr::builder().name("exit-qsbr").build().unwrap());

#[test]
fn an_rcu_guard_in_a_thread_local_holds_grace_periods_back_until_it_drops() {
    both_orders(Duration::from_secs(60), |order| {
        writer_waits_for_an_exiting_holder(
            order,
            || drop(RCU.read()),
            || RCU.read(),
            || RCU.synchronize(),
            "synchronize()",
        )
    });
}

/// A `ThreadReader` kept in a thread-local: a section entered through it in the thread-local's
/// destructor, which runs after rcukit's table is gone in `UserFirst` order, still holds grace
/// periods back; the record is released once the handle and the guard have both dropped
/// (either first), and so is the record of a handle made in the destructor itself.
#[test]
fn a_thread_reader_in_a_thread_local_protects_its_reads_until_it_drops() {
    static DOMAIN: LazyLock<Rcu> =
        LazyLock::new(|| Rcu::builder().name("exit-reader").build().unwrap());
    both_orders(Duration::from_secs(60), |order| {
        for handle_first in [false, true] {
            let releasing: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
            let (entered, entered_rx) = channel::<()>();
            let t = exiting_thread(
                order,
                || drop(DOMAIN.read()),
                move || {
                    let reader = DOMAIN.thread_reader();
                    Box::new(move || {
                        let guard = reader.read();
                        entered.send(()).unwrap();
                        std::thread::sleep(Duration::from_millis(100));
                        releasing.store(true, Ordering::Release);
                        if handle_first {
                            drop(reader);
                            drop(guard);
                        } else {
                            drop(guard);
                            drop(reader);
                        }
                        let late = DOMAIN.thread_reader();
                        drop(late.read());
                    })
                },
            );
            entered_rx
                .recv_timeout(Duration::from_secs(30))
                .expect("the destructor ran");
            DOMAIN.synchronize();
            assert!(
                releasing.load(Ordering::Acquire),
                "{order:?}: synchronize() returned inside a thread reader's section"
            );
            t.join().unwrap();
            let stats = DOMAIN.stats();
            assert_eq!(
                (stats.readers, stats.orphaned_readers),
                (0, 0),
                "{order:?}, handle first {handle_first}: records left behind: {stats:?}"
            );
        }
    });
}

/// A `ThreadReader` leaked by a thread that then exits keeps its record registered (an orphan),
/// with no section open: grace periods do not wait for it.
#[test]
fn a_leaked_thread_reader_holds_no_grace_period() {
    let rcu: &'static Rcu = Box::leak(Box::new(Rcu::builder().build().unwrap()));
    std::thread::spawn(move || {
        let reader = rcu.thread_reader();
        drop(reader.read());
        std::mem::forget(reader);
    })
    .join()
    .unwrap();
    let stats = rcu.stats();
    assert_eq!((stats.readers, stats.orphaned_readers), (0, 1), "{stats:?}");
    rcu.synchronize();
    rcu.synchronize_expedited();
}

/// Defect 1 of the thread-exit review: rcukit's QSBR table, destroyed first, unregistered a
/// handle that was still alive and online, and `synchronize()` returned while it still read.
#[test]
fn a_qsbr_registration_in_a_thread_local_holds_grace_periods_back_until_it_drops() {
    both_orders(Duration::from_secs(60), |order| {
        writer_waits_for_an_exiting_holder(
            order,
            || drop(QSBR.register()),
            || QSBR.register(),
            || QSBR.synchronize(),
            "synchronize()",
        )
    });
}

#[test]
fn a_recseq_guard_in_a_thread_local_holds_replacements_back_until_it_drops() {
    static CELL: LazyLock<RecSeq<u64>> = LazyLock::new(|| RecSeq::new(0));
    both_orders(Duration::from_secs(60), |order| {
        writer_waits_for_an_exiting_holder(
            order,
            || drop(CELL.read()),
            || CELL.read(),
            || {
                CELL.replace(1);
            },
            "RecSeq::replace()",
        )
    });
}

#[test]
fn a_percpu_read_guard_in_a_thread_local_keeps_writers_out_until_it_drops() {
    static LOCK: LazyLock<PerCpuRwLock<u64>> =
        LazyLock::new(|| PerCpuRwLock::from_raw(RawPerCpuRwLock::with_slots(2).unwrap(), 0));
    both_orders(Duration::from_secs(60), |order| {
        writer_waits_for_an_exiting_holder(
            order,
            || drop(LOCK.read()),
            || LOCK.read(),
            || *LOCK.write() += 1,
            "write()",
        )
    });
}

/// Objects retired in a thread-local destructor, after rcukit's producer table is gone or
/// before, are dropped by `barrier()`.
#[test]
fn objects_retired_during_thread_exit_are_dropped_by_barrier() {
    both_orders(Duration::from_secs(60), |order| {
        static DROPPED: AtomicU64 = AtomicU64::new(0);
        struct Counted;
        impl Drop for Counted {
            fn drop(&mut self) {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
        DROPPED.store(0, Ordering::Relaxed);
        let t = exiting_thread(
            order,
            || RCU.retire(Box::new(0u8)),
            || {
                Box::new(|| {
                    for _ in 0..1_000 {
                        RCU.retire(Box::new(Counted));
                    }
                    RCU.call(|| ());
                })
            },
        );
        t.join().unwrap();
        RCU.barrier();
        assert_eq!(DROPPED.load(Ordering::Relaxed), 1_000);
    });
}

/// A map value that counts its drops.
struct Counted(u64, &'static AtomicU64);

impl Drop for Counted {
    fn drop(&mut self) {
        self.1.fetch_add(1, Ordering::Relaxed);
    }
}

type CountedMap = RcuHashMap<u64, Counted, RandomState, &'static Rcu>;

/// Entries the map tests write: under Miri, which runs every test thread of the binary on one
/// and is slow, a dozen (no resize), so that the other tests' watchdogs are not starved (with
/// 300, and with 90, one of them fired there).
const ENTRIES: u64 = if cfg!(miri) { 12 } else { 3_000 };

/// A map on the tests' domain, leaked: the exiting thread's destructors use it.
fn leaked_map() -> &'static CountedMap {
    Box::leak(Box::new(
        RcuHashMap::builder().domain(&*RCU).build().unwrap(),
    ))
}

/// A map written from a thread-local destructor, enough to grow it through several tables
/// and shrink it again (resizes that retire tables and ask for allocator trims): every write
/// lands, and every value is dropped once, whichever thread-local went first.
#[test]
fn a_map_written_in_a_thread_local_destructor_keeps_every_write() {
    both_orders(Duration::from_secs(120), |order| {
        static DROPPED: AtomicU64 = AtomicU64::new(0);
        DROPPED.store(0, Ordering::Relaxed);
        let map = leaked_map();
        let t = exiting_thread(
            order,
            move || {
                map.pin().insert(u64::MAX, Counted(u64::MAX, &DROPPED));
            },
            move || {
                Box::new(move || {
                    for k in 0..ENTRIES {
                        map.pin().insert(k, Counted(k, &DROPPED));
                    }
                    for k in 0..ENTRIES / 3 * 2 {
                        assert_eq!(map.pin().remove(&k).map(|v| v.0), Some(k));
                    }
                    let p = map.pin();
                    assert_eq!(p.iter().count() as u64, ENTRIES / 3 + 1);
                    assert_eq!(p.get(&(ENTRIES - 1)).map(|v| v.0), Some(ENTRIES - 1));
                })
            },
        );
        t.join().unwrap();
        assert_eq!(map.len() as u64, ENTRIES / 3 + 1);
        for k in ENTRIES / 3 * 2..ENTRIES {
            assert_eq!(map.pin().get(&k).map(|v| v.0), Some(k));
        }
        map.clear();
        RCU.barrier();
        assert_eq!(DROPPED.load(Ordering::Relaxed), ENTRIES + 1);
    });
}

/// A map handle (`pin()`: a guard and the entries its writes removed) kept in a thread-local
/// until the thread exits: it protects what it returned until it drops, then retires what it
/// removed, whichever thread-local went first; a barrier afterwards drops each removed value.
#[test]
fn a_map_handle_in_a_thread_local_retires_what_it_removed_when_it_drops() {
    both_orders(Duration::from_secs(120), |order| {
        static DROPPED: AtomicU64 = AtomicU64::new(0);
        DROPPED.store(0, Ordering::Relaxed);
        let map = leaked_map();
        for k in 0..ENTRIES {
            map.pin().insert(k, Counted(k, &DROPPED));
        }
        let t = exiting_thread(
            order,
            move || {
                map.pin().get(&0);
            },
            move || {
                let p = map.pin();
                for k in 0..ENTRIES / 2 {
                    assert_eq!(p.remove(&k).map(|v| v.0), Some(k));
                }
                Box::new(move || {
                    // Still protected: the handle's removed entries are not dropped yet.
                    assert_eq!(DROPPED.load(Ordering::Relaxed), 0);
                    drop(p);
                })
            },
        );
        t.join().unwrap();
        RCU.barrier();
        RCU.barrier();
        assert_eq!(DROPPED.load(Ordering::Relaxed), ENTRIES / 2);
        assert_eq!(map.len() as u64, ENTRIES - ENTRIES / 2);
    });
}

/// What a waiting call made inside a read-side section, from a thread-local destructor, did.
fn must_panic(what: &str, f: impl FnOnce()) -> String {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(()) => format!("{what} returned"),
        Err(e) => {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            if msg.contains("critical section")
                || msg.contains("online")
                || msg.contains("read guard")
                || msg.contains("callback")
            {
                String::new()
            } else {
                format!("{what} panicked for another reason: {msg}")
            }
        }
    }
}

/// Defect 2 of the thread-exit review: in a destructor that ran after rcukit's table was gone,
/// `is_reading()` said false while a guard was held, so waiting for a grace period hung
/// instead of panicking as documented.
#[test]
fn waiting_inside_a_read_section_panics_in_late_thread_local_destructors_too() {
    static CELL: LazyLock<RcuCell<u64, &'static Rcu>> =
        LazyLock::new(|| RcuCell::with_domain(0, &*RCU));
    static RECSEQ: LazyLock<RecSeq<u64>> = LazyLock::new(|| RecSeq::new(0));
    both_orders(Duration::from_secs(60), |order| {
        let (tx, rx) = channel::<Vec<String>>();
        let t = exiting_thread(
            order,
            || {
                drop(RCU.read());
                drop(RECSEQ.read());
                drop(QSBR.register());
            },
            move || {
                Box::new(move || {
                    let mut failures = Vec::new();
                    {
                        let _guard = RCU.read();
                        if !RCU.is_reading() {
                            failures.push("is_reading() said false inside a guard".to_string());
                            tx.send(failures).unwrap();
                            return; // the waits below would hang
                        }
                        for (what, f) in [
                            (
                                "synchronize",
                                Box::new(|| RCU.synchronize()) as Box<dyn FnOnce()>,
                            ),
                            (
                                "synchronize_expedited",
                                Box::new(|| RCU.synchronize_expedited()),
                            ),
                            ("barrier", Box::new(|| RCU.barrier())),
                            (
                                "store_with(Synchronize)",
                                Box::new(|| CELL.store_with(1, Reclaim::Synchronize)),
                            ),
                        ] {
                            failures.push(must_panic(what, f));
                        }
                    }
                    if RCU.is_reading() {
                        failures.push("is_reading() said true after the guard".to_string());
                    }
                    {
                        let _guard = RECSEQ.read();
                        failures.push(must_panic("RecSeq::replace", || {
                            RECSEQ.replace(2);
                        }));
                    }
                    {
                        let _online = QSBR.register();
                        if !QSBR.is_online() {
                            failures.push("is_online() said false while online".to_string());
                            tx.send(failures).unwrap();
                            return;
                        }
                        failures.push(must_panic("Qsbr::synchronize", || QSBR.synchronize()));
                    }
                    tx.send(failures).unwrap();
                })
            },
        );
        let failures: Vec<String> = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the destructor finished");
        let failures: Vec<_> = failures.into_iter().filter(|f| !f.is_empty()).collect();
        assert!(failures.is_empty(), "{order:?}: {failures:?}");
        t.join().unwrap();
    });
}

/// Defect 4 of the thread-exit review: a guard leaked with `mem::forget` by a thread that then
/// exits holds every grace period (expected), but the stall report named the thread as if it
/// were alive, and `Stats::readers` ("held by live threads") counted it.
#[test]
fn a_leaked_guard_of_an_exited_thread_is_reported_as_such() {
    for qsbr in [false, true] {
        let reports = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let sink = reports.clone();
        let hook = move |r: &rcukit::Report| sink.lock().unwrap().push(r.to_string());
        // Leaked on purpose: its grace periods can never end, so neither could its drop.
        type Probe = (Box<dyn Fn() -> rcukit::Stats>, Box<dyn Fn()>);
        let (stats, start): Probe = if qsbr {
            let d: &'static Qsbr = Box::leak(Box::new(
                Qsbr::builder()
                    .stall_timeout(Duration::from_millis(20))
                    .on_report(hook)
                    .build()
                    .unwrap(),
            ));
            std::thread::spawn(move || std::mem::forget(d.register()))
                .join()
                .unwrap();
            (
                Box::new(move || d.stats()),
                Box::new(move || {
                    let _ = d.start_poll_expedited();
                }),
            )
        } else {
            let d: &'static Rcu = Box::leak(Box::new(
                Rcu::builder()
                    .stall_timeout(Duration::from_millis(20))
                    .on_report(hook)
                    .build()
                    .unwrap(),
            ));
            std::thread::spawn(move || std::mem::forget(d.read()))
                .join()
                .unwrap();
            (
                Box::new(move || d.stats()),
                Box::new(move || {
                    let _ = d.start_poll_expedited();
                }),
            )
        };
        let s = stats();
        assert_eq!(
            (s.readers, s.orphaned_readers),
            (0, 1),
            "qsbr={qsbr}: the exited thread's record is not a live reader: {s:?}"
        );
        start(); // a grace period that will wait forever, and report the stall
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let report = loop {
            if let Some(r) = reports.lock().unwrap().first() {
                break r.clone();
            }
            assert!(std::time::Instant::now() < deadline, "no stall report");
            std::thread::sleep(Duration::from_millis(10));
        };
        // (Miri has no /proc to tell whether a thread has exited.)
        assert!(
            cfg!(miri) || report.contains("has EXITED"),
            "qsbr={qsbr}: the report must say the thread has exited: {report}"
        );
    }
}
