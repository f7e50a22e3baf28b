//! Hostile use of callbacks and grace periods: several threads calling the same API at once,
//! user code that re-enters the library, panics inside panics, a closed stderr, `fork()`.
//!
//! Every test runs under a watchdog: a hang fails the test instead of blocking the run.

mod common;

use common::support::watchdog;
use rcukit::{Rcu, RcuCell, RcuList};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
        // At least a few barriers, however long the floods make each wait on a loaded machine.
        while Instant::now() < deadline || barriers <= 10 {
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

// --- defect 2: where user code runs -------------------------------------------------------------

/// An element whose `Drop` uses the list it lived in.
struct Reentrant {
    reenter: bool,
}

static LIST: std::sync::LazyLock<RcuList<Reentrant>> = std::sync::LazyLock::new(RcuList::new);

impl Drop for Reentrant {
    fn drop(&mut self) {
        if self.reenter {
            // Takes the list's writer lock.
            LIST.remove_first(|_| false);
            LIST.push_back(Reentrant { reenter: false });
            LIST.remove_first(|e| !e.reenter);
        }
    }
}

/// `RcuList` removals used to retire under the writer lock, and a retire may drop earlier
/// removed elements: one whose `Drop` uses the same list deadlocked on the first such drop.
#[test]
fn a_list_element_whose_drop_uses_the_list_does_not_deadlock() {
    watchdog(Duration::from_secs(120), || {
        for i in 0..100_000u32 {
            LIST.push_back(Reentrant { reenter: true });
            assert!(LIST.remove_first(|e| e.reenter));
            if i % 10_000 == 0 {
                std::thread::sleep(Duration::from_millis(2)); // let grace periods end
            }
        }
        LIST.retain(|_| false);
        Rcu::global().barrier();
    });
}

thread_local! {
    static IN_GUARD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Counts drops, and drops that ran where the dropping thread must not run them: inside a
/// read-side critical section, or under a container's writer lock (marked by the test in
/// `IN_GUARD`).
struct Witness {
    dropped: Arc<AtomicU64>,
    under_guard: Arc<AtomicU64>,
}

impl Drop for Witness {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        if IN_GUARD.with(|g| g.get()) {
            self.under_guard.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A `retire` made inside a read-side critical section of the same domain must not run
/// earlier objects' drops there (a `Drop` that waits for a grace period would deadlock).
#[test]
fn drops_never_run_inside_a_read_side_critical_section_of_the_same_domain() {
    watchdog(Duration::from_secs(120), || {
        let rcu = Rcu::new();
        let dropped = Arc::new(AtomicU64::new(0));
        let under_guard = Arc::new(AtomicU64::new(0));
        let mut retired = 0u64;
        for _ in 0..100 {
            {
                let _guard = rcu.read();
                IN_GUARD.with(|g| g.set(true));
                for _ in 0..2_000 {
                    rcu.retire(Box::new(Witness {
                        dropped: dropped.clone(),
                        under_guard: under_guard.clone(),
                    }));
                    retired += 1;
                }
                IN_GUARD.with(|g| g.set(false));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        rcu.barrier();
        assert_eq!(dropped.load(Ordering::Relaxed), retired);
        assert_eq!(
            under_guard.load(Ordering::Relaxed),
            0,
            "retired objects were dropped inside the retiring thread's read-side section"
        );
    });
}

/// Nor under a container's writer lock: a `retire` made by user code that an `RcuCell`, an
/// `RcuList` or an `RcuFlatMap` runs under its lock (an update's closure, which writes, say,
/// another container) must not run earlier objects' drops there. A `Drop` that wrote the outer
/// container would wait for its own thread (`RcuCell`, `RcuList`) or panic (`RcuFlatMap`).
/// (Before the producers asked whether the thread holds such a lock, the witnesses counted
/// drops under it in every round.)
#[test]
fn drops_never_run_under_a_containers_writer_lock() {
    watchdog(Duration::from_secs(120), || {
        let rcu = Rcu::global();
        let cell = RcuCell::new(0u64);
        let list = RcuList::new();
        list.push_back(0u64);
        let map: rcukit::RcuFlatMap<u64, u64> = rcukit::RcuFlatMap::new();
        map.insert(0, 0);
        let dropped = Arc::new(AtomicU64::new(0));
        let under_lock = Arc::new(AtomicU64::new(0));
        let retired = AtomicU64::new(0);
        let retire_many = || {
            IN_GUARD.with(|g| g.set(true));
            for _ in 0..500 {
                rcu.retire(Box::new(Witness {
                    dropped: dropped.clone(),
                    under_guard: under_lock.clone(),
                }));
                retired.fetch_add(1, Ordering::Relaxed);
            }
            IN_GUARD.with(|g| g.set(false));
        };
        for round in 0..60 {
            match round % 3 {
                0 => cell.update(|v| {
                    retire_many();
                    v + 1
                }),
                1 => assert!(list.update_first(
                    |_| true,
                    |v| {
                        retire_many();
                        v + 1
                    }
                )),
                _ => assert!(map
                    .update(&0, |v| {
                        retire_many();
                        v + 1
                    })
                    .is_some()),
            }
            // Let the grace period of what was retired end, so that the next round's retires
            // find ready objects.
            std::thread::sleep(Duration::from_millis(2));
        }
        rcu.barrier();
        assert_eq!(
            dropped.load(Ordering::Relaxed),
            retired.load(Ordering::Relaxed)
        );
        assert_eq!(
            under_lock.load(Ordering::Relaxed),
            0,
            "retired objects were dropped under a container's writer lock"
        );
    });
}

/// `barrier()` called from user code that a container's write runs under its writer lock
/// (the closures of `RcuFlatMap::update`, `RcuCell::update`, `RcuList::update_first`) panics
/// with a message saying so, and the container stays usable. A callback the barrier waits for
/// may need that lock (a retired value whose `Drop` writes the container, as here): a
/// barrier waited for it forever.
#[test]
fn a_barrier_under_a_containers_writer_lock_panics_instead_of_waiting_for_itself() {
    watchdog(Duration::from_secs(120), || {
        static MAP: std::sync::OnceLock<rcukit::RcuFlatMap<u64, WritesMap>> =
            std::sync::OnceLock::new();
        /// A value whose drop writes the map it is in, if it is the one first inserted (its
        /// clones do not: the one `update` passes to its closure is dropped under the lock
        /// when the closure panics, which would be a write there while unwinding).
        struct WritesMap {
            first: bool,
        }
        impl Clone for WritesMap {
            fn clone(&self) -> WritesMap {
                WritesMap { first: false }
            }
        }
        impl Drop for WritesMap {
            fn drop(&mut self) {
                if self.first {
                    MAP.get()
                        .unwrap()
                        .insert(10_000, WritesMap { first: false });
                }
            }
        }
        let map = MAP.get_or_init(rcukit::RcuFlatMap::new);
        map.insert(1, WritesMap { first: true });
        // A rebuild retires the old table with the first value in it: when it is freed (by
        // the callbacks a barrier waits for), that value's drop writes the map.
        map.reserve(1_000);
        let refused = |what: &str, write: &mut dyn FnMut()| {
            let panic = catch_unwind(AssertUnwindSafe(write)).expect_err(what);
            let message = panic.downcast_ref::<&str>().expect(what);
            assert!(message.contains("writer lock"), "{what}: {message}");
        };
        refused("map", &mut || {
            map.update(&1, |v| {
                Rcu::global().barrier();
                v
            });
        });
        let cell = RcuCell::new(0u64);
        refused("cell", &mut || {
            cell.update(|v| {
                Rcu::global().barrier();
                v + 1
            })
        });
        let list = RcuList::new();
        list.push_back(0u64);
        refused("list", &mut || {
            list.update_first(
                |_| true,
                |v| {
                    Rcu::global().barrier();
                    v + 1
                },
            );
        });
        // Outside the writes the barrier runs, and the retired value's write lands.
        Rcu::global().barrier();
        assert!(map.get_cloned(&10_000).is_some());
        assert_eq!((*cell.read(), list.len()), (0, 1));
    });
}

/// User code that a write of `RcuCell` or `RcuList` runs under the writer lock (the closures of
/// `RcuCell::update` and of `RcuList::remove_first`, `retain` and `update_first`) and that
/// writes the same container panics with a message saying so, and the container stays usable,
/// as `RcuFlatMap` does. (It waited for the lock its own thread held: a hang.)
#[test]
fn a_cell_or_list_written_from_its_own_writes_closure_panics_instead_of_hanging() {
    watchdog(Duration::from_secs(120), || {
        let refused = |what: &str, write: &mut dyn FnMut()| {
            let panic = catch_unwind(AssertUnwindSafe(write)).expect_err(what);
            let message = panic
                .downcast_ref::<&str>()
                .copied()
                .or(panic.downcast_ref::<String>().map(String::as_str))
                .unwrap_or_else(|| panic!("{what}: a message"));
            assert!(message.contains("writer lock"), "{what}: {message}");
        };
        let cell = RcuCell::new(1u64);
        refused("cell update", &mut || {
            cell.update(|v| {
                cell.store(5);
                v + 1
            })
        });
        let list = RcuList::new();
        list.push_back(1u64);
        refused("list remove_first", &mut || {
            list.remove_first(|_| {
                list.push_back(2);
                true
            });
        });
        refused("list retain", &mut || {
            list.retain(|_| {
                list.push_back(3);
                true
            });
        });
        refused("list update_first", &mut || {
            list.update_first(
                |_| true,
                |v| {
                    list.push_back(4);
                    v + 1
                },
            );
        });
        // Both are as they were, and writable.
        assert_eq!(*cell.read(), 1);
        cell.store(2);
        assert_eq!(*cell.read(), 2);
        assert_eq!(list.len(), 1);
        list.push_back(5);
        assert_eq!(list.len(), 2);
    });
}

/// A domain whose last handle is dropped by a closure that a container's write runs under its
/// writer lock, while a callback of the domain that needs that lock is pending: the drop
/// returns, and the callback runs once the write lets the lock go. (The drop ran the pending
/// callbacks itself, and that one waited for the lock its own thread held: a hang.)
#[test]
fn a_domain_dropped_under_a_containers_writer_lock_ends_after_the_write() {
    watchdog(Duration::from_secs(120), || {
        let cell = Arc::new(RcuCell::new(0u64));
        let list = Arc::new(RcuList::new());
        list.push_back(0u64);
        let map = Arc::new(rcukit::RcuFlatMap::<u64, u64>::new());
        map.insert(1, 0);
        let done = Arc::new(AtomicUsize::new(0));
        // Each domain has a callback pending that writes the container, then is dropped by
        // that container's write.
        let pending = |write: Box<dyn FnOnce() + Send>| {
            let rcu = Rcu::new();
            let done = Arc::clone(&done);
            rcu.call(move || {
                write();
                done.fetch_add(1, Ordering::SeqCst);
            });
            Some(rcu)
        };
        let c = Arc::clone(&cell);
        let mut rcu = pending(Box::new(move || c.store(7)));
        cell.update(|v| {
            drop(rcu.take());
            v + 1
        });
        let l = Arc::clone(&list);
        let mut rcu = pending(Box::new(move || l.push_back(7)));
        list.update_first(
            |_| true,
            |v| {
                drop(rcu.take());
                v + 1
            },
        );
        let m = Arc::clone(&map);
        let mut rcu = pending(Box::new(move || {
            m.insert(7, 7);
        }));
        map.update(&1, |v| {
            drop(rcu.take());
            v + 1
        });
        // The callbacks run on the finishers, after the writes.
        while done.load(Ordering::SeqCst) < 3 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(*cell.read(), 7);
        assert_eq!(list.len(), 2);
        assert_eq!(map.get_cloned(&7), Some(7));
    });
}

/// A domain whose last handle is dropped by a thread that forgot a guard of it (through a
/// map handle from `pin()`, say): the drop returns, leaving the domain's threads and what is
/// pending as they are, since no grace period can end, and says so on stderr, here a closed
/// pipe, whose failed write must not panic in the drop. (It waited for a grace period that
/// waited for its own thread: a hang.)
#[test]
fn a_domain_dropped_by_a_thread_that_forgot_a_guard_of_it_leaks_instead_of_hanging() {
    if !in_child("forgotten-guard") {
        run_child_with_closed_stderr(
            "a_domain_dropped_by_a_thread_that_forgot_a_guard_of_it_leaks_instead_of_hanging",
            "forgotten-guard",
            Duration::from_secs(120),
        );
        return;
    }
    watchdog(Duration::from_secs(100), || {
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(AtomicBool::new(false));
        // Left running by the drop, waiting for the section: no stall report in the run.
        let quiet = Rcu::builder().stall_timeout(Duration::from_secs(24 * 3600));
        let rcu = Arc::new(quiet.build().unwrap());
        let map: rcukit::RcuHashMap<u64, u64, _, Arc<Rcu>> =
            rcukit::RcuHashMap::with_domain(Arc::clone(&rcu));
        map.pin().insert(1, 1);
        std::mem::forget(map.pin());
        rcu.retire(Box::new(Flag(Arc::clone(&dropped))));
        drop(map);
        drop(rcu);
        assert!(
            !dropped.load(Ordering::SeqCst),
            "nothing retired is freed: the forgotten section never ends"
        );
    });
}

// --- defect 3: panics inside panics --------------------------------------------------------------

/// A panic payload whose own `Drop` panics.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("the payload's drop panics too");
    }
}

/// A retired object whose `Drop` panics with a `PanicsOnDrop` payload.
struct DoublePanic(Arc<AtomicU64>);

impl Drop for DoublePanic {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
        std::panic::panic_any(PanicsOnDrop);
    }
}

fn quiet_domain() -> Rcu {
    Rcu::builder().on_report(|_| {}).build().unwrap()
}

/// A domain whose normal grace periods wait `seconds` to batch: what ends sooner was ended
/// by an expedited one.
fn slow_normal_domain(seconds: u64) -> Rcu {
    Rcu::builder()
        .normal_gp_delay(Duration::from_secs(seconds))
        .build()
        .unwrap()
}

/// [`slow_normal_domain`] (10 s) whose producers try an expedited grace period every 64
/// retires.
fn trying_domain() -> Rcu {
    Rcu::builder()
        .producer_backlog_callbacks(64)
        .normal_gp_delay(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// The payload used to be dropped outside `catch_unwind`: the worker thread died, the rest of
/// its batch was lost, `barrier()` never returned and dropping the domain looped forever.
#[test]
fn a_callback_panicking_with_a_payload_whose_drop_panics_is_contained() {
    watchdog(Duration::from_secs(60), || {
        let rcu = quiet_domain();
        let ran = Arc::new(AtomicU64::new(0));
        for round in 0..3 {
            rcu.call(|| std::panic::panic_any(PanicsOnDrop));
            for _ in 0..10 {
                let ran = ran.clone();
                rcu.call(move || {
                    ran.fetch_add(1, Ordering::Relaxed);
                });
            }
            rcu.barrier();
            assert_eq!(ran.load(Ordering::Relaxed), 10 * (round + 1));
        }
        assert_eq!(rcu.stats().callback_panics, 3);
        drop(rcu);
    });
}

/// The same on a retiring thread: the payload's panic escaped `retire()` and left "running a
/// batch" and the list's "dropping" mark set, so the thread's objects were never freed again
/// and other threads' steals spun.
#[test]
fn a_retired_object_whose_drop_panics_twice_is_contained_on_the_retiring_thread() {
    watchdog(Duration::from_secs(60), || {
        let rcu = Arc::new(quiet_domain());
        let panicked = Arc::new(AtomicU64::new(0));
        let dropped = Arc::new(AtomicU64::new(0));
        let producer = {
            let (rcu, panicked, dropped) = (rcu.clone(), panicked.clone(), dropped.clone());
            std::thread::spawn(move || {
                for i in 0..200_000u64 {
                    if i % 5_000 == 0 {
                        rcu.retire(Box::new(DoublePanic(panicked.clone())));
                    } else {
                        rcu.retire(Box::new(Counted(dropped.clone())));
                    }
                    if i % 20_000 == 0 {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
                rcu.barrier();
            })
        };
        producer.join().expect("no panic escapes retire()");
        rcu.barrier();
        assert_eq!(panicked.load(Ordering::Relaxed), 40);
        assert_eq!(dropped.load(Ordering::Relaxed), 200_000 - 40);
        assert_eq!(rcu.stats().callback_panics, 40);
        assert_eq!(rcu.stats().callbacks_pending, 0);
    });
}

/// With worker-side drops, a write made while holding a lock that the old value's `Drop`
/// takes cannot deadlock: no rcukit call runs user code on the calling thread.
#[test]
fn with_worker_side_drops_a_store_under_the_callers_lock_cannot_deadlock() {
    static HELD: Mutex<u64> = Mutex::new(0);
    struct TakesTheLock;
    impl Drop for TakesTheLock {
        fn drop(&mut self) {
            *HELD.lock().unwrap() += 1;
        }
    }
    watchdog(Duration::from_secs(60), || {
        let rcu = Rcu::builder().retire_on_producers(false).build().unwrap();
        let cell = RcuCell::with_domain(TakesTheLock, &rcu);
        for i in 0..200_000u32 {
            let _held = HELD.lock().unwrap();
            cell.store(TakesTheLock);
            if i % 20_000 == 0 {
                drop(_held);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        rcu.barrier();
        assert_eq!(*HELD.lock().unwrap(), 200_000);
    });
}

// --- defect 4: a closed stderr ----------------------------------------------------------------

/// Run this test binary again, as a child process, for the test `name` with `RCUKIT_CHILD` set
/// to `mode`, standard error a pipe whose reading end is already closed. Fails if the child
/// does not exit successfully within `limit`.
fn run_child_with_closed_stderr(name: &str, mode: &str, limit: Duration) {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env("RCUKIT_CHILD", mode)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take()); // close the reading end: writes to stderr now fail (EPIPE)
                               // The child's stdout (its test harness's lines and what it prints) explains a failure.
    let mut stdout = child.stdout.take().unwrap();
    let output = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let output = output.join().unwrap();
            assert!(status.success(), "the child failed: {status}\n{output}");
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child hung (did not exit within {limit:?})");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn in_child(mode: &str) -> bool {
    std::env::var("RCUKIT_CHILD").is_ok_and(|m| m == mode)
}

/// `eprintln!` panics when stderr is a closed pipe: the grace-period thread died at its first
/// stall report and the next `synchronize()` hung. Stall reports from both engines and
/// callback-panic reports are made here with stderr closed; everything must keep working.
#[test]
fn reports_with_a_closed_stderr_do_not_stop_the_domain() {
    if !in_child("closed-stderr") {
        run_child_with_closed_stderr(
            "reports_with_a_closed_stderr_do_not_stop_the_domain",
            "closed-stderr",
            Duration::from_secs(60),
        );
        return;
    }
    let rcu = Arc::new(
        Rcu::builder()
            .stall_timeout(Duration::from_millis(1))
            .build()
            .unwrap(),
    );
    for round in 0..3u64 {
        // A reader that holds the grace period until its stall has been reported (however
        // late a loaded machine runs the grace period).
        let (entered, entered_rx) = std::sync::mpsc::channel();
        let reader = {
            let rcu = rcu.clone();
            std::thread::spawn(move || {
                let _guard = rcu.read();
                entered.send(()).unwrap();
                let deadline = Instant::now() + Duration::from_secs(20);
                while rcu.stats().stalls <= round && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        entered_rx.recv().unwrap();
        if round % 2 == 0 {
            rcu.synchronize(); // the stall is reported by the grace-period thread
        } else {
            rcu.synchronize_expedited(); // ... by this thread
        }
        reader.join().unwrap();
        rcu.call(|| panic!("a callback panics")); // reported by the worker
        rcu.barrier();
    }
    rcu.synchronize();
    let stats = rcu.stats();
    // (Failures are printed on stdout: stderr is closed.)
    if stats.stalls < 3 || stats.callback_panics != 3 {
        println!("unexpected: {stats:?}");
        panic!("unexpected counts");
    }
}

// --- defect 7: memory and counters ---------------------------------------------------------------

unsafe fn count_raw(data: *mut ()) {
    // SAFETY: `data` is the `&'static AtomicU64` passed to `call_raw` below.
    unsafe { &*(data as *const AtomicU64) }.fetch_add(1, Ordering::Relaxed);
}

/// An absurd declared size used to overflow one counter after another had been bumped (debug:
/// a panic, then dropping the domain looped forever; release: `pending_bytes` wrapped).
#[test]
fn call_raw_with_absurd_byte_counts_keeps_the_counters_sane() {
    static RAN: AtomicU64 = AtomicU64::new(0);
    watchdog(Duration::from_secs(60), || {
        let rcu = Rcu::new();
        let data = &RAN as *const AtomicU64 as *mut ();
        for _ in 0..5 {
            // SAFETY: `count_raw` only reads a static through `data`; sound on any thread.
            unsafe { rcu.call_raw(count_raw, data, usize::MAX) };
        }
        let pending = rcu.stats().pending_bytes;
        assert!(pending <= 5 << 40, "pending_bytes {pending}");
        rcu.barrier();
        assert_eq!(RAN.load(Ordering::Relaxed), 5);
        assert_eq!(rcu.stats().pending_bytes, 0);
        assert_eq!(rcu.stats().callbacks_pending, 0);
        drop(rcu);
    });
}

/// Dropping a domain used to wait for a normal grace period (0.5 s with a long batching
/// window, up to 10 s): it now expedites.
#[test]
fn dropping_a_domain_with_work_pending_does_not_wait_for_a_normal_grace_period() {
    watchdog(Duration::from_secs(5), || {
        let rcu = slow_normal_domain(10);
        let dropped = Arc::new(AtomicU64::new(0));
        for _ in 0..1_000 {
            rcu.retire(Box::new(Counted(dropped.clone())));
        }
        let ran = Arc::new(AtomicU64::new(0));
        for _ in 0..10 {
            let ran = ran.clone();
            rcu.call(move || {
                ran.fetch_add(1, Ordering::Relaxed);
            });
        }
        drop(rcu);
        assert_eq!(dropped.load(Ordering::Relaxed), 1_000);
        assert_eq!(ran.load(Ordering::Relaxed), 10);
    });
}

/// A report hook that waits for a grace period of its own domain: the stall report runs on the
/// grace-period thread, which would wait for itself. The wait panics there instead (caught by
/// the hook's `catch_unwind`), and the domain keeps going.
#[test]
fn a_report_hook_that_waits_for_a_grace_period_cannot_wedge_the_domain() {
    watchdog(Duration::from_secs(60), || {
        let domain: Arc<std::sync::OnceLock<&'static Rcu>> = Arc::new(std::sync::OnceLock::new());
        let refused = Arc::new(AtomicU64::new(0));
        let (d, r) = (domain.clone(), refused.clone());
        let rcu: &'static Rcu = Box::leak(Box::new(
            Rcu::builder()
                .stall_timeout(Duration::from_millis(5))
                .on_report(move |_| {
                    if let Some(rcu) = d.get() {
                        let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            rcu.synchronize()
                        }));
                        if waited.is_err() {
                            r.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
                .build()
                .unwrap(),
        ));
        domain.set(rcu).unwrap();
        let (entered, entered_rx) = std::sync::mpsc::channel();
        let seen = refused.clone();
        let reader = std::thread::spawn(move || {
            let _guard = rcu.read();
            entered.send(()).unwrap();
            // Hold the grace period until the hook has run (however late it runs).
            let deadline = Instant::now() + Duration::from_secs(20);
            while seen.load(Ordering::Relaxed) == 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        entered_rx.recv().unwrap();
        rcu.synchronize(); // its stall report calls the hook on the grace-period thread
        reader.join().unwrap();
        rcu.synchronize();
        assert!(
            refused.load(Ordering::Relaxed) >= 1,
            "the hook's wait was not refused"
        );
    });
}

/// A reader holds a guard while another thread retires a flood: the retiring thread's tried
/// expedited grace periods find the reader in the way and give up instead of waiting (the
/// flood finishes while the guard is held), nothing retired after the guard was taken is
/// dropped while it is held, and the grace periods they left started are finished once the
/// reader leaves, with no further call from the retiring thread.
#[test]
fn tried_grace_periods_give_up_on_a_reader_and_free_nothing_early() {
    watchdog(Duration::from_secs(60), || {
        let rcu = Arc::new(
            Rcu::builder()
                .producer_backlog_callbacks(256)
                .stall_timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        );
        let dropped = Arc::new(AtomicU64::new(0));
        struct Obj(Arc<AtomicU64>);
        impl Drop for Obj {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (entered, release) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let reader = {
            let (rcu, entered, release) = (rcu.clone(), entered.clone(), release.clone());
            std::thread::spawn(move || {
                let _g = rcu.read();
                entered.store(true, Ordering::SeqCst);
                while !release.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        while !entered.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let start = Instant::now();
        for _ in 0..20_000 {
            rcu.retire(Box::new(Obj(dropped.clone())));
        }
        let took = start.elapsed();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            0,
            "dropped under the reader's guard"
        );
        let stats = rcu.stats();
        assert_eq!(
            stats.released_by_expedited + stats.released_by_normal,
            0,
            "{stats:?}"
        );
        println!("20,000 retires with a reader in the way took {took:?}");
        release.store(true, Ordering::SeqCst);
        reader.join().unwrap();
        // The grace periods left started (and the normal ones requested) end by themselves
        // now; the retiring thread drops its objects on its next retires.
        let deadline = Instant::now() + Duration::from_secs(30);
        while dropped.load(Ordering::SeqCst) < 20_000 {
            assert!(Instant::now() < deadline, "the flood was never freed");
            rcu.retire(Box::new(Obj(dropped.clone())));
            std::thread::sleep(Duration::from_micros(100));
        }
        assert!(rcu.stats().expedited_gps + rcu.stats().normal_gps > 0);
    });
}

/// A retiring thread that ends a tried expedited grace period wakes the futures waiting for
/// one, on its own thread, in the middle of `retire`. A waker that calls `barrier()` (which
/// steals the retiring thread's list and waits for the drops it has taken) must not find that
/// thread holding drops it has not run.
#[test]
fn a_waker_woken_inside_retire_may_call_barrier() {
    use std::future::Future;
    use std::task::{Context, Wake, Waker};
    struct BarrierWaker {
        rcu: Arc<Rcu>,
        woken: AtomicU64,
    }
    impl Wake for BarrierWaker {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.rcu.retire(Box::new([0u8; 64]));
            self.rcu.barrier();
            self.woken.fetch_add(1, Ordering::SeqCst);
        }
    }
    watchdog(Duration::from_secs(60), || {
        let rcu = Arc::new(trying_domain());
        let state = Arc::new(BarrierWaker {
            rcu: rcu.clone(),
            woken: AtomicU64::new(0),
        });
        let waker = Waker::from(state.clone());
        for round in 0..50 {
            // A normal grace period (held back 10 s): ended in practice by the retiring
            // thread's tried expedited ones, which wake the future on that thread.
            let mut fut = Box::pin(rcu.synchronize_async());
            let mut cx = Context::from_waker(&waker);
            let mut n = 0u64;
            while fut.as_mut().poll(&mut cx).is_pending() {
                // Retire until a tried grace period ends and wakes the future here.
                for _ in 0..8 {
                    rcu.retire(Box::new([n; 8]));
                    n += 1;
                }
                assert!(n < 10_000_000, "round {round}: never woken");
            }
        }
        assert!(state.woken.load(Ordering::SeqCst) > 0);
        rcu.barrier();
    });
}

/// A waker whose `wake` panics.
struct PanickingWaker;

impl std::task::Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        panic!("this waker fails on purpose");
    }
}

/// `builder`'s domain, with a report hook that counts the reports of `PanickingWaker`'s panics.
fn counting_waker_panics(builder: rcukit::RcuBuilder) -> (Rcu, Arc<AtomicU64>) {
    let reports = Arc::new(AtomicU64::new(0));
    let counted = reports.clone();
    let rcu = builder
        .on_report(move |r| {
            if let rcukit::Report::WakerPanic(_) = r {
                assert!(r.to_string().contains("fails on purpose"), "{r}");
                counted.fetch_add(1, Ordering::SeqCst);
            }
        })
        .build()
        .unwrap();
    (rcu, reports)
}

/// A future's waker that panics when a grace period wakes it: the panic is caught and reported,
/// whichever thread ended the grace period (the caller of `synchronize_expedited()`, the
/// domain's normal grace-period thread), and the domain goes on working.
#[test]
fn a_panicking_waker_is_contained_and_reported() {
    use std::future::Future;
    use std::task::{Context, Waker};
    watchdog(Duration::from_secs(60), || {
        let (rcu, reports) = counting_waker_panics(Rcu::builder());
        let waker = Waker::from(Arc::new(PanickingWaker));
        let mut cx = Context::from_waker(&waker);
        // A future left pending by its first poll: one whose grace period had not ended yet
        // (on a loaded machine it may have, and a future ready at once keeps no waker).
        fn pending<'a>(
            cx: &mut Context<'_>,
            make: impl Fn() -> rcukit::GpFuture<'a>,
        ) -> std::pin::Pin<Box<rcukit::GpFuture<'a>>> {
            loop {
                let mut fut = Box::pin(make());
                if fut.as_mut().poll(cx).is_pending() {
                    return fut;
                }
            }
        }
        // Woken by this thread's expedited grace period (or the helper's).
        let expedited = pending(&mut cx, || rcu.synchronize_expedited_async());
        rcu.synchronize_expedited();
        // Woken by the domain's normal grace-period thread.
        let normal = pending(&mut cx, || rcu.synchronize_async());
        let deadline = Instant::now() + Duration::from_secs(30);
        while reports.load(Ordering::SeqCst) < 2 {
            assert!(Instant::now() < deadline, "the wakers were never woken");
            std::thread::sleep(Duration::from_millis(1));
        }
        drop((expedited, normal));
        // Every thread of the domain is still there.
        rcu.synchronize();
        rcu.synchronize_expedited();
        rcu.call(|| {});
        rcu.barrier();
    });
}

/// A `barrier_async()` future's waker that panics when the barrier's last marker arrives: on
/// an idle worker (the marker completes as the worker takes it in) and behind a queued
/// callback (it completes where the worker runs callbacks). The panic is caught and reported
/// as a waker's, not counted as a callback's, and every worker is still there. (On the idle
/// worker it unwound out of the worker's loop and ended the thread: that shard's callbacks
/// never ran again, and `barrier()` and the domain's drop hung.)
#[test]
fn a_panicking_barrier_waker_leaves_every_worker_running() {
    use std::future::Future;
    use std::task::{Context, Waker};
    watchdog(Duration::from_secs(60), || {
        for behind_a_callback in [false, true] {
            let (rcu, reports) = counting_waker_panics(Rcu::builder().callback_workers(1));
            let waker = Waker::from(Arc::new(PanickingWaker));
            let mut cx = Context::from_waker(&waker);
            // Its waker is kept, to be woken by the last marker.
            let barrier = loop {
                if behind_a_callback {
                    rcu.call(|| std::thread::sleep(Duration::from_millis(20)));
                }
                let mut barrier = Box::pin(rcu.barrier_async());
                if barrier.as_mut().poll(&mut cx).is_pending() {
                    break barrier;
                }
            };
            let deadline = Instant::now() + Duration::from_secs(30);
            while reports.load(Ordering::SeqCst) == 0 {
                assert!(Instant::now() < deadline, "the waker was never woken");
                std::thread::sleep(Duration::from_millis(1));
            }
            let ran = Arc::new(AtomicBool::new(false));
            let r = ran.clone();
            rcu.call(move || r.store(true, Ordering::SeqCst));
            rcu.barrier();
            assert!(ran.load(Ordering::SeqCst), "the worker ran the callback");
            assert_eq!(
                rcu.stats().callback_panics,
                0,
                "a waker's panic, not a callback's"
            );
            drop(barrier);
            drop(rcu);
        }
    });
}

/// A waker that waits for a grace period of the same domain in its `wake`, woken on the
/// domain's normal grace-period thread (the only thread that can end the normal grace period
/// it would wait for): the wait panics there, the panic is caught and reported as a waker's,
/// and the domain goes on working. (Before the wait checked for the grace-period thread, it
/// waited for itself, and every later `synchronize()` of the domain, on any thread, hung.)
#[test]
fn a_waker_that_waits_for_a_grace_period_on_the_grace_period_thread_panics() {
    use std::future::Future;
    use std::task::{Context, Wake, Waker};
    struct Waits(Arc<Rcu>, AtomicBool, AtomicBool);
    impl Wake for Waits {
        fn wake(self: Arc<Self>) {
            if self.1.swap(false, Ordering::SeqCst) {
                // rcukit's threads are named for the kernel only (`std` does not know them).
                let on_gp_thread = std::fs::read_to_string("/proc/thread-self/comm")
                    .is_ok_and(|name| name.trim_end().ends_with("-gp"));
                self.2.store(on_gp_thread, Ordering::SeqCst);
                self.0.synchronize();
            }
        }
    }
    watchdog(Duration::from_secs(60), || {
        let reports = Arc::new(AtomicU64::new(0));
        let rcu = {
            let reports = reports.clone();
            Arc::new(
                Rcu::builder()
                    .on_report(move |r| {
                        if matches!(r, rcukit::Report::WakerPanic(_)) {
                            assert!(r.to_string().contains("grace-period thread"), "{r}");
                            reports.fetch_add(1, Ordering::SeqCst);
                        }
                    })
                    .build()
                    .unwrap(),
            )
        };
        let state = Arc::new(Waits(
            rcu.clone(),
            AtomicBool::new(true),
            AtomicBool::new(false),
        ));
        let waker = Waker::from(state.clone());
        // Pending until the owned section below ends: then only a normal grace period (the
        // grace-period thread's) ends the wait, and wakes the waker there.
        let section = rcu.read_owned();
        let mut fut = Box::pin(rcu.synchronize_async());
        assert!(fut
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        drop(section);
        let deadline = Instant::now() + Duration::from_secs(30);
        while state.1.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "the waker was never woken");
            std::thread::sleep(Duration::from_millis(1));
        }
        let on_gp_thread = state.2.load(Ordering::SeqCst);
        println!("woken on the grace-period thread: {on_gp_thread}");
        if on_gp_thread {
            while reports.load(Ordering::SeqCst) == 0 {
                assert!(
                    Instant::now() < deadline,
                    "the wait in the wake was not refused"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        drop(fut);
        // The domain still works, on every thread.
        rcu.synchronize();
        rcu.synchronize_expedited();
        rcu.barrier();
    });
}

/// A grace-period future first polled outside a guard, then polled inside a guard of its
/// domain on the same thread: the second poll panics, as the first would have. (The check ran
/// at the first poll only, and the second returned `Pending`: a future driven to completion
/// there waited for its own thread's guard forever.) The same for `barrier_async()`.
#[test]
fn a_future_polled_inside_a_guard_after_a_first_poll_outside_panics() {
    use std::future::Future;
    use std::task::{Context, Waker};
    watchdog(Duration::from_secs(60), || {
        let rcu = slow_normal_domain(5);
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        let section = rcu.read_owned(); // keeps the future pending
        let mut fut = Box::pin(rcu.synchronize_async());
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        let guard = rcu.read();
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = fut.as_mut().poll(&mut cx);
        }));
        assert!(polled.is_err(), "polled inside a guard without a panic");
        drop(guard);
        drop(section);
        drop(fut);
        let mut barrier = Box::pin(rcu.barrier_async());
        let _ = barrier.as_mut().poll(&mut cx);
        let guard = rcu.read();
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = barrier.as_mut().poll(&mut cx);
        }));
        assert!(
            polled.is_err(),
            "barrier_async polled inside a guard without a panic"
        );
        drop(guard);
    });
}

/// A waker whose `clone` and `drop` call into the domain (here its statistics, which count the
/// waiting futures under the futures' lock): polling a grace-period future with it, again with
/// another waker (the first one dropped), and dropping the future neither deadlocks nor
/// panics. (The waker was cloned and dropped under that lock: the first poll waited for the
/// lock its own thread held.)
#[test]
fn a_waker_whose_clone_and_drop_call_into_the_domain_does_not_deadlock() {
    use std::future::Future;
    use std::sync::OnceLock;
    use std::task::{Context, RawWaker, RawWakerVTable, Waker};
    static DOMAIN: OnceLock<Rcu> = OnceLock::new();
    static CALLS: AtomicU64 = AtomicU64::new(0);
    fn touch() {
        let _ = DOMAIN.get().unwrap().stats();
        CALLS.fetch_add(1, Ordering::SeqCst);
    }
    unsafe fn clone(data: *const ()) -> RawWaker {
        touch();
        RawWaker::new(data, &VTABLE)
    }
    unsafe fn wake(_: *const ()) {}
    unsafe fn drop_waker(_: *const ()) {
        touch();
    }
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake, drop_waker);
    watchdog(Duration::from_secs(60), || {
        let rcu = DOMAIN.get_or_init(|| slow_normal_domain(5));
        // SAFETY: the vtable's functions keep `RawWaker`'s contract (nothing to free).
        let (first, second) = unsafe {
            (
                Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)),
                Waker::from_raw(RawWaker::new(1 as *const (), &VTABLE)),
            )
        };
        let section = rcu.read_owned(); // keeps the future pending
        let mut fut = Box::pin(rcu.synchronize_async());
        assert!(fut
            .as_mut()
            .poll(&mut Context::from_waker(&first))
            .is_pending());
        assert!(fut
            .as_mut()
            .poll(&mut Context::from_waker(&second))
            .is_pending());
        assert_eq!(rcu.stats().waiting_futures, 1);
        drop(fut);
        assert_eq!(rcu.stats().waiting_futures, 0);
        drop(section);
        assert!(
            CALLS.load(Ordering::SeqCst) >= 3,
            "clone, clone and two drops"
        );
        rcu.synchronize_expedited();
    });
}

/// A waker that writes an `RcuCell`, woken by the grace period a retiring thread tries itself
/// while it holds that cell's writer lock (the retires come from `update`'s closure): the
/// wake must not run there, where it would wait for the lock its own thread holds.
#[test]
fn a_waker_is_not_woken_under_a_containers_writer_lock_by_a_tried_grace_period() {
    use std::future::Future;
    use std::task::{Context, Wake, Waker};
    struct WritesCell(Arc<RcuCell<u64, Arc<Rcu>>>, AtomicU64);
    impl Wake for WritesCell {
        fn wake(self: Arc<Self>) {
            self.0.store(7);
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }
    watchdog(Duration::from_secs(60), || {
        let rcu = Arc::new(trying_domain());
        let cell = Arc::new(RcuCell::with_domain(0u64, rcu.clone()));
        let state = Arc::new(WritesCell(cell.clone(), AtomicU64::new(0)));
        let waker = Waker::from(state.clone());
        for _ in 0..20 {
            // A normal grace period (held back 10 s): ended in practice by the tried expedited
            // ones of the retiring thread below.
            let mut fut = Box::pin(rcu.synchronize_async());
            if fut
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_ready()
            {
                continue;
            }
            cell.update(|v| {
                for i in 0..20_000u64 {
                    rcu.retire(Box::new(i));
                }
                v + 1
            });
            drop(fut);
        }
    });
}

// --- a write refused from under its own lock, given values whose `Drop` writes again ----------

/// A value whose `Drop` writes the container it was given to (through `write`), and counts.
struct WritesOnDrop {
    write: fn(),
    drops: &'static AtomicUsize,
}

impl Drop for WritesOnDrop {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
        (self.write)();
    }
}

impl Clone for WritesOnDrop {
    fn clone(&self) -> Self {
        WritesOnDrop {
            write: || {},
            drops: self.drops,
        }
    }
}

/// Run `outer` (a write whose closure writes the same container with a `WritesOnDrop`) and
/// expect a panic the caller can catch, with the given value dropped (not leaked). The
/// re-entrant write used to panic with the value still in its frame, so the unwinding dropped
/// it, its `Drop` wrote the container under the same lock, and that second refusal, raised
/// while a panic unwound, aborted the process (`RcuList`, `RcuFlatMap`); `RcuCell` leaked it.
fn refused_with_its_value_dropped(drops: &'static AtomicUsize, outer: impl FnOnce()) {
    let caught = catch_unwind(AssertUnwindSafe(outer));
    assert!(caught.is_err(), "the re-entrant write panics");
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "its value was dropped, once"
    );
}

#[test]
fn a_list_write_refused_under_its_lock_drops_what_it_was_given() {
    static LIST: std::sync::LazyLock<RcuList<WritesOnDrop>> =
        std::sync::LazyLock::new(RcuList::new);
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    static NONE: AtomicUsize = AtomicUsize::new(0);
    LIST.push_back(WritesOnDrop {
        write: || {},
        drops: &NONE,
    });
    refused_with_its_value_dropped(&DROPS, || {
        LIST.remove_first(|_| {
            LIST.push_back(WritesOnDrop {
                write: || {
                    LIST.push_front(WritesOnDrop {
                        write: || {},
                        drops: &NONE,
                    })
                },
                drops: &DROPS,
            });
            false
        });
    });
    assert_eq!(LIST.len(), 1, "nothing was added");
}

#[test]
fn a_flat_map_write_refused_under_its_lock_drops_what_it_was_given() {
    static MAP: std::sync::LazyLock<rcukit::RcuFlatMap<u32, WritesOnDrop>> =
        std::sync::LazyLock::new(rcukit::RcuFlatMap::new);
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    static NONE: AtomicUsize = AtomicUsize::new(0);
    let none = || WritesOnDrop {
        write: || {},
        drops: &NONE,
    };
    MAP.insert(1, none());
    refused_with_its_value_dropped(&DROPS, || {
        MAP.update(&1, |_| {
            MAP.insert(
                2,
                WritesOnDrop {
                    write: || {
                        MAP.insert(
                            3,
                            WritesOnDrop {
                                write: || {},
                                drops: &NONE,
                            },
                        );
                    },
                    drops: &DROPS,
                },
            );
            none()
        });
    });
    assert_eq!(MAP.len(), 1, "nothing was added");
}

#[test]
fn a_cell_write_refused_under_its_lock_drops_what_it_was_given() {
    static CELL: std::sync::LazyLock<RcuCell<Option<WritesOnDrop>>> =
        std::sync::LazyLock::new(|| RcuCell::new(None));
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    refused_with_its_value_dropped(&DROPS, || {
        CELL.update(|_| {
            CELL.store(Some(WritesOnDrop {
                write: || CELL.store(None),
                drops: &DROPS,
            }));
            None
        });
    });
    assert!(CELL.read().is_none());
}

/// A domain whose last handle is dropped in a callback of another domain, while one of its own
/// pending callbacks waits for that other domain's `barrier()`: the drop hands the ending to a
/// thread of its own, and both domains go on. (The drop drained the dropped domain's callbacks
/// on the other domain's worker, whose barrier then waited for that very worker: both hung.)
#[test]
fn a_domain_dropped_in_another_domains_callback_does_not_wait_for_it() {
    watchdog(Duration::from_secs(60), || {
        let outer = Arc::new(Rcu::builder().name("outer").build().unwrap());
        let dropped = Rcu::builder().name("dropped").build().unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        {
            let (outer, ran) = (outer.clone(), ran.clone());
            dropped.call(move || {
                outer.barrier();
                ran.store(true, Ordering::SeqCst);
            });
        }
        outer.call(move || drop(dropped));
        outer.barrier();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ran.load(Ordering::SeqCst) {
            assert!(
                Instant::now() < deadline,
                "the dropped domain's callback never ran"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        outer.barrier();
    });
}

/// A cell write that would wait for a grace period, refused for two reasons at once: from the
/// cell's own `update` closure (re-entry) and inside a read-side critical section (it cannot
/// wait there). The re-entry is refused first, with the value dropped before the panic. (The
/// read-section check panicked first, with the value still in the frame: its `Drop`, writing
/// the cell while that panic unwound, was refused in turn, and the process aborted.)
#[test]
fn a_waiting_cell_write_refused_under_its_lock_and_a_guard_drops_what_it_was_given() {
    static CELL: std::sync::LazyLock<RcuCell<Option<WritesOnDrop>>> =
        std::sync::LazyLock::new(|| RcuCell::new(None));
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    refused_with_its_value_dropped(&DROPS, || {
        CELL.update(|_| {
            let _guard = Rcu::global().read();
            CELL.replace(Some(WritesOnDrop {
                write: || CELL.store(None),
                drops: &DROPS,
            }));
            None
        });
    });
}

/// A write's closure that waits for a grace period of the container's domain panics, naming
/// the writer lock, and the containers stay usable: a thread that reads the domain and waits
/// for that writer lock inside its section (a flat map's iteration, `Debug` or `Clone`, any
/// write under a guard) would hold the grace period back for ever. (With such a thread it
/// hung; without one the wait ended and this test failed.)
#[test]
fn a_grace_period_waited_for_under_a_containers_writer_lock_panics() {
    watchdog(Duration::from_secs(60), || {
        let rcu = Arc::new(Rcu::new());
        let map: rcukit::RcuFlatMap<u32, u32, std::collections::hash_map::RandomState, Arc<Rcu>> =
            rcukit::RcuFlatMap::new_in(rcu.clone());
        map.insert(1, 1);
        let cell = RcuCell::with_domain(1u32, rcu.clone());
        let waits: [(&str, &dyn Fn()); 4] = [
            ("synchronize()", &|| rcu.synchronize()),
            ("synchronize_expedited()", &|| rcu.synchronize_expedited()),
            ("cond_synchronize()", &|| {
                rcu.cond_synchronize(&rcu.start_poll())
            }),
            ("cond_synchronize_expedited()", &|| {
                rcu.cond_synchronize_expedited(&rcu.start_poll())
            }),
        ];
        for (what, wait) in waits {
            let in_map = catch_unwind(AssertUnwindSafe(|| {
                map.update(&1, |v| {
                    wait();
                    v + 1
                })
            }));
            let in_cell = catch_unwind(AssertUnwindSafe(|| {
                cell.update(|v| {
                    wait();
                    v + 1
                })
            }));
            for outcome in [in_map.map(|_| ()), in_cell.map(|_| ())] {
                let err = outcome.expect_err(what);
                let msg = err.downcast_ref::<String>().expect("a formatted message");
                assert!(
                    msg.contains(what) && msg.contains("writer lock"),
                    "{what}: {msg}"
                );
            }
        }
        // Both still work, and a wait after the write is fine.
        map.update(&1, |v| v + 1);
        cell.update(|v| v + 1);
        rcu.synchronize();
        let guard = rcu.read();
        assert_eq!(map.get(&1, &guard), Some(&2));
        assert_eq!(*cell.load(&guard), 2);
    });
}
