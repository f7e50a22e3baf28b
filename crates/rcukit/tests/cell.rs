//! `RcuCell`: readers never see a dropped or torn value while writers use every write path,
//! and every value is dropped exactly once; the concurrent tests run against every domain
//! configuration (`common::each_config`).

mod common;
mod tracked;

use rcukit::{Rcu, RcuCell, Reclaim};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracked::{budget, Counts, Quarantine, Tracked, XorShift};

#[global_allocator]
static ALLOC: Quarantine = Quarantine;

fn domain(name: &str) -> Rcu {
    Rcu::builder()
        .name(name)
        .normal_gp_delay(Duration::from_micros(200))
        .build()
        .expect("domain")
}

/// Every way a writer can replace the value of a cell.
const WRITE_PATHS: u64 = 11;

fn write(cell: &RcuCell<Tracked, &Rcu>, path: u64, id: u64, counts: &'static Counts) {
    let rcu = cell.domain();
    let new = Tracked::new(id, counts);
    match path {
        0 => cell.store(new),
        1 => cell.store_with(new, Reclaim::Synchronize),
        2 => cell.store_with(new, Reclaim::Expedited),
        3 => cell.update(|old| {
            old.check();
            new
        }),
        4 => cell.update_with(Reclaim::Synchronize, |old| {
            old.check();
            new
        }),
        5 => cell.update_with(Reclaim::Expedited, |old| {
            old.check();
            new
        }),
        6 => cell.replace(new).check(),
        7 => cell.swap(new).wait().check(),
        8 => cell.swap(new).wait_expedited().check(),
        9 => {
            // Dropping an Unpublished retires the value.
            let old = cell.swap(new);
            if let Ok(value) = old.try_take() {
                value.check();
            }
        }
        10 => {
            let old = cell.swap(new);
            rcu.synchronize();
            assert!(
                old.is_ready(),
                "a grace period after the swap must expire its cookie"
            );
            old.try_take().expect("ready").check();
        }
        _ => unreachable!(),
    }
}

#[test]
fn readers_never_see_freed_or_torn_values_on_any_write_path() {
    common::each_config(readers_never_see_freed_or_torn_values);
}

fn readers_never_see_freed_or_torn_values(rcu: &Rcu) {
    let counts = Counts::leak();
    let cell = RcuCell::with_domain(Tracked::new(0, counts), rcu);
    let next_id = AtomicU64::new(1);
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let writes: Vec<AtomicU64> = (0..WRITE_PATHS).map(|_| AtomicU64::new(0)).collect();
    let (run_for, max_writes) = budget();
    let deadline = Instant::now() + run_for / 3; // per configuration

    std::thread::scope(|s| {
        for r in 0..2u64 {
            let (cell, stop, reads) = (&cell, &stop, &reads);
            s.spawn(move || {
                let mut rng = XorShift(0x1234 + r);
                let mut n = 0u64;
                loop {
                    if n % 2 == 0 {
                        let guard = cell.domain().read();
                        let first = cell.load(&guard);
                        first.check();
                        // Stay a while so that writers replace the value under our feet.
                        for _ in 0..rng.next() % 256 {
                            std::hint::spin_loop();
                        }
                        cell.load(&guard).check();
                        first.check();
                    } else {
                        let value = cell.read();
                        value.check();
                    }
                    n += 1;
                    if cfg!(miri) {
                        std::thread::yield_now();
                    }
                    // At least one pass, however late this thread starts.
                    if stop.load(Relaxed) {
                        break;
                    }
                }
                reads.fetch_add(n, Relaxed);
            });
        }
        for w in 0..2u64 {
            let (cell, stop, next_id, writes) = (&cell, &stop, &next_id, &writes);
            s.spawn(move || {
                // Writer 0 cycles through every path; writer 1 churns through the paths that
                // never wait, so that many values are in flight at once.
                const NO_WAIT: [u64; 3] = [0, 3, 9];
                let mut i = 0;
                // Writer 0 runs every path at least once, however slow the machine; it then
                // stops everybody.
                let more = |i: u64| match w {
                    0 => (Instant::now() < deadline || i < WRITE_PATHS) && i < max_writes,
                    _ => !stop.load(Relaxed) && i < max_writes,
                };
                while more(i) {
                    let path = if w == 0 {
                        i % WRITE_PATHS
                    } else {
                        NO_WAIT[i as usize % NO_WAIT.len()]
                    };
                    write(cell, path, next_id.fetch_add(1, Relaxed), counts);
                    writes[path as usize].fetch_add(1, Relaxed);
                    i += 1;
                    if w == 1 && i % 16 == 0 {
                        // Leave the CPUs (2 here) to the waiting writer now and then.
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
                if w == 0 {
                    stop.store(true, Relaxed);
                }
            });
        }
    });

    let writes: Vec<u64> = writes.iter().map(|w| w.load(Relaxed)).collect();
    eprintln!(
        "reads: {}, writes per path: {writes:?}",
        reads.load(Relaxed)
    );
    assert!(writes.iter().all(|&w| w > 0), "every write path ran");
    assert_eq!(counts.double_drops.load(Relaxed), 0);
    rcu.barrier();
    assert_eq!(
        counts.live(),
        1,
        "every replaced value was dropped, the current one was not"
    );
    cell.load(&rcu.read()).check();
    drop(cell);
    assert_eq!(
        counts.live(),
        0,
        "dropping the cell drops the current value"
    );
    assert_eq!(counts.double_drops.load(Relaxed), 0);
}

#[test]
fn updates_are_atomic_and_readers_see_them_in_order() {
    common::each_config(updates_are_atomic_and_in_order);
}

fn updates_are_atomic_and_in_order(rcu: &Rcu) {
    let cell = RcuCell::with_domain(0u64, rcu);
    let per_writer: u64 = if cfg!(miri) { 20 } else { 5_000 };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut last = 0;
            let mut reads = 0u64;
            loop {
                let now = *cell.read();
                assert!(now >= last, "a reader saw {now} after {last}");
                last = now;
                reads += 1;
                // At least one pass, however late this thread starts.
                if stop.load(Relaxed) {
                    break;
                }
            }
            reads
        });
        let writers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    for _ in 0..per_writer {
                        cell.update(|x| x + 1);
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Relaxed);
        assert!(reader.join().unwrap() > 0);
    });
    assert_eq!(*cell.read(), 2 * per_writer, "no update was lost");
}

#[test]
fn every_value_is_dropped_once() {
    common::each_config(every_value_dropped_once);
}

fn every_value_dropped_once(rcu: &Rcu) {
    let counts = Counts::leak();
    let cell = RcuCell::with_domain(Tracked::new(0, counts), rcu);
    let stop = AtomicBool::new(false);
    let (run_for, max_writes) = budget();
    let deadline = Instant::now() + run_for / 6;
    std::thread::scope(|s| {
        s.spawn(|| {
            loop {
                let guard = rcu.read();
                cell.load(&guard).check();
                // At least one pass, however late this thread starts.
                if stop.load(Relaxed) {
                    break;
                }
            }
        });
        s.spawn(|| {
            let mut id = 1;
            while Instant::now() < deadline && id < max_writes {
                cell.store(Tracked::new(id, counts));
                id += 1;
            }
            stop.store(true, Relaxed);
        });
    });
    rcu.barrier();
    assert_eq!(counts.live(), 1);
    drop(cell);
    assert_eq!(counts.live(), 0);
    assert_eq!(counts.double_drops.load(Relaxed), 0);
}

#[test]
#[should_panic(expected = "read with a Guard of domain")]
fn a_guard_of_another_domain_is_refused() {
    let a = domain("a");
    let b = domain("b");
    let cell = RcuCell::with_domain(1, &a);
    let guard = b.read();
    let _ = cell.load(&guard);
}

#[test]
fn waiting_writes_inside_a_reader_panic_before_publishing() {
    let rcu = domain("cell-misuse");
    let cell = RcuCell::with_domain(String::from("old"), &rcu);
    let guard = rcu.read();
    for how in [Reclaim::Synchronize, Reclaim::Expedited] {
        let result = catch_unwind(AssertUnwindSafe(|| cell.store_with("new".into(), how)));
        let message = *result.unwrap_err().downcast::<String>().unwrap();
        assert!(message.contains("read-side critical section"), "{message}");
        let result = catch_unwind(AssertUnwindSafe(|| cell.update_with(how, |_| "new".into())));
        assert!(result.is_err());
    }
    assert!(catch_unwind(AssertUnwindSafe(|| cell.replace("new".into()))).is_err());
    assert_eq!(
        cell.load(&guard),
        "old",
        "a refused write left the cell unchanged"
    );
    // Deferred reclamation never waits, so it is fine inside a reader.
    cell.store("new".into());
    drop(guard);
    assert_eq!(*cell.read(), "new");
}

#[test]
fn a_panicking_update_leaves_the_cell_unchanged_and_unlocked() {
    let cell = RcuCell::new(vec![1]);
    let result = catch_unwind(AssertUnwindSafe(|| {
        cell.update(|_| panic!("no new value"));
    }));
    assert!(result.is_err());
    assert_eq!(*cell.read(), [1]);
    cell.update(|v| [v.as_slice(), &[2]].concat());
    assert_eq!(*cell.read(), [1, 2]);
}

/// A cell whose value panics in its drop: dropped plainly, the value's panic comes out;
/// dropped with the frame that panicked, the value's panic stops in the cell's drop and the
/// frame's comes out. (It went on out of the drop while the frame's unwound: an abort.)
#[test]
fn a_cell_whose_value_panics_in_its_drop_does_not_abort_while_another_panic_unwinds() {
    static DROPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    struct Loud;
    impl Drop for Loud {
        fn drop(&mut self) {
            DROPS.fetch_add(1, Relaxed);
            panic!("a loud value's drop");
        }
    }
    let cell = RcuCell::new(Loud);
    let payload = catch_unwind(AssertUnwindSafe(|| drop(cell))).expect_err("the value's panic");
    assert_eq!(
        payload.downcast_ref::<&str>().copied(),
        Some("a loud value's drop")
    );
    let payload = catch_unwind(AssertUnwindSafe(|| {
        let _cell = RcuCell::new(Loud);
        panic!("the frame's panic");
    }))
    .expect_err("the frame panicked");
    assert_eq!(
        payload.downcast_ref::<&str>().copied(),
        Some("the frame's panic")
    );
    assert_eq!(DROPS.load(Relaxed), 2, "each value dropped once");
}

#[test]
fn an_arc_domain_outlives_its_last_user_and_runs_their_callbacks() {
    let counts = Counts::leak();
    let cell = {
        let rcu = Arc::new(domain("cell-arc"));
        Arc::new(RcuCell::with_domain(Tracked::new(0, counts), rcu))
    };
    let threads: Vec<_> = (1..=2u64)
        .map(|t| {
            let cell = cell.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    cell.read().check();
                    cell.store(Tracked::new(t * 1000 + i, counts));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(counts.created(), 101);
    // The last handle on the domain goes with the cell: the domain runs every pending
    // callback before it stops.
    drop(cell);
    assert_eq!(counts.live(), 0);
    assert_eq!(counts.double_drops.load(Relaxed), 0);
}

#[test]
fn exclusive_access_needs_no_grace_period() {
    let rcu = Rcu::new();
    let mut cell = RcuCell::with_domain(vec![1, 2], &rcu);
    cell.get_mut().push(3);
    assert_eq!(*cell.read(), [1, 2, 3]);
    assert_eq!(cell.into_inner(), [1, 2, 3]);
    assert!(format!("{:?}", RcuCell::new(7)).contains("value: 7"));
}

#[test]
fn values_that_borrow_can_be_replaced_with_a_wait() {
    let (a, b) = (String::from("a"), String::from("b"));
    let cell = RcuCell::new(a.as_str());
    assert_eq!(cell.replace(b.as_str()), "a");
    assert_eq!(*cell.read(), "b");
}

#[test]
fn unpublished_values_can_be_waited_for_on_another_thread() {
    let cell = RcuCell::new(vec![1u8; 16]);
    let old = cell.swap(vec![2; 16]);
    let cookie = old.cookie();
    let back = std::thread::scope(|s| s.spawn(move || old.wait()).join().unwrap());
    assert_eq!(back, vec![1; 16]);
    assert!(cell.domain().poll(&cookie));
}

/// Values that own large buffers, declared with `retired_size`: the domain counts them at their
/// real size, so the writing thread reclaims old values after a few replacements (tried
/// expedited grace periods, no normal grace period needed) instead of after thousands.
#[test]
fn a_cell_whose_values_declare_their_size_is_reclaimed_after_a_few_replacements() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static DROPPED: AtomicUsize = AtomicUsize::new(0);
    struct Table(Vec<u64>);
    impl Drop for Table {
        fn drop(&mut self) {
            DROPPED.fetch_add(1, Ordering::SeqCst);
        }
    }
    // Smaller under Miri: 16 KiB tables against a 64 KiB threshold instead of 256 KiB ones
    // against the default 256 KiB.
    let (words, tables, threshold) = if cfg!(miri) {
        (2 << 10, 40, 64 << 10)
    } else {
        (32 << 10, 200, 256 << 10)
    };
    let rcu = rcukit::Rcu::builder()
        .normal_gp_delay(std::time::Duration::from_secs(10))
        .backlog_bytes(u64::MAX)
        .backlog_callbacks(u64::MAX)
        .producer_backlog_bytes(threshold)
        .build()
        .unwrap();
    let cell = rcukit::RcuCell::with_domain(Table(vec![0; words]), &rcu)
        .retired_size(|t| std::mem::size_of_val(t.0.as_slice()));
    for i in 0..tables as u64 {
        cell.store(Table(vec![i; words]));
    }
    let dropped = DROPPED.load(Ordering::SeqCst);
    let stats = rcu.stats();
    assert!(
        stats.pending_bytes >= (words * 8) as u64,
        "declared sizes are counted: {stats:?}"
    );
    assert!(
        dropped >= tables * 3 / 4,
        "only {dropped} of {tables} old tables dropped while writing: {stats:?}"
    );
    rcu.barrier();
    assert_eq!(DROPPED.load(Ordering::SeqCst), tables);
}

/// Snapshots keep their value alive without a guard beside them, on the thread that took them
/// and on a thread they were sent to, while a writer replaces the value with every kind of
/// reclamation (the waiting ones drop the old value in the writer as soon as their grace
/// period ends); `load_arc` clones kept past any number of grace periods stay whole too.
#[test]
fn snapshots_keep_their_value_alive_without_a_guard() {
    common::each_config(snapshots_keep_values_alive);
}

fn snapshots_keep_values_alive(rcu: &Rcu) {
    use rcukit::Snapshot;
    use std::sync::mpsc;
    let counts = Counts::leak();
    let cell = RcuCell::with_domain(Tracked::new(0, counts), rcu);
    let arcs = RcuCell::with_domain(Arc::new(Tracked::new(0, counts)), rcu);
    let writes: usize = if cfg!(miri) { 6 } else { 120 };
    let written = AtomicBool::new(false);
    let mut rounds: usize = 0;
    std::thread::scope(|s| {
        // Bounded: snapshots queued faster than the checker drops them would hold every grace
        // period back for ever longer.
        let (to_checker, received) = mpsc::sync_channel::<Snapshot<'_, Tracked>>(4);
        let checker = s.spawn(move || {
            let mut n = 0;
            for snapshot in received {
                snapshot.check();
                std::thread::yield_now();
                snapshot.check();
                n += 1;
            }
            n
        });
        s.spawn(|| {
            for i in 1..=writes {
                let how = [Reclaim::Expedited, Reclaim::Synchronize, Reclaim::Deferred][i % 3];
                cell.store_with(Tracked::new(i as u64, counts), how);
                arcs.store_with(Arc::new(Tracked::new(i as u64, counts)), how);
            }
            written.store(true, Relaxed);
        });
        let mut kept = Vec::new();
        // Snapshots for as long as the writer writes (at least a few, however late it starts).
        while rounds < 8 || !written.load(Relaxed) {
            let snapshot = cell.snapshot();
            let id = snapshot.id();
            snapshot.check();
            for _ in 0..rounds % 64 {
                std::hint::spin_loop();
            }
            // Other containers of the domain can be read under the snapshot's guard.
            arcs.load(snapshot.guard()).check();
            assert_eq!(snapshot.id(), id, "a snapshot does not follow the cell");
            snapshot.check();
            if rounds % 2 == 0 {
                to_checker.send(snapshot).unwrap(); // ends on the checker's thread
            }
            if rounds % 64 == 0 {
                kept.push(arcs.load_arc());
            }
            rounds += 1;
            if cfg!(miri) {
                std::thread::yield_now();
            }
        }
        drop(to_checker);
        assert_eq!(checker.join().unwrap(), rounds.div_ceil(2));
        for arc in &kept {
            arc.check();
        }
    });
    rcu.barrier();
    assert_eq!(counts.double_drops.load(Relaxed), 0);
    assert_eq!(counts.live(), 2, "only the two current values are alive");
    drop((cell, arcs));
    assert_eq!(counts.live(), 0);
    assert_eq!(counts.double_drops.load(Relaxed), 0);
}

/// An owned snapshot is `'static`: it goes into `std::thread::spawn`, keeps the cell (and the
/// domain the cell holds) alive after every other handle is gone, and closes its section
/// before it lets go of the cell, so that the last handle's drop finds no section open and
/// runs the domain's pending callbacks at once.
#[test]
fn an_owned_snapshot_keeps_its_cell_and_domain_alive() {
    fn send_sync_static<T: Send + Sync + 'static>(_: &T) {}
    let counts = Counts::leak();
    let rcu = Arc::new(domain("snapshot-owned"));
    let cell = Arc::new(RcuCell::with_domain(Tracked::new(0, counts), rcu));
    let snapshot = cell.clone().snapshot_owned();
    send_sync_static(&snapshot);
    cell.store(Tracked::new(1, counts)); // value 0 is retired, held by the snapshot
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        wait.recv().unwrap();
        snapshot.check();
        assert_eq!(snapshot.id(), 0);
        assert_eq!(snapshot.cell().read().id(), 1);
        drop(snapshot);
    });
    drop(cell);
    assert_eq!(
        counts.live(),
        2,
        "the snapshot keeps its value and the cell's current one"
    );
    go.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(
        counts.live(),
        0,
        "the snapshot's drop dropped the cell, then the domain, which ran the retired value's callback"
    );
    assert_eq!(counts.double_drops.load(Relaxed), 0);
}

/// `load_arc` holds nothing back: a waiting write completes while the clone is kept, and the
/// value then lives in the clone alone.
#[test]
fn load_arc_keeps_the_value_without_holding_back_grace_periods() {
    let counts = Counts::leak();
    let rcu = domain("load-arc");
    let cell = RcuCell::with_domain(Arc::new(Tracked::new(0, counts)), &rcu);
    let kept = cell.load_arc();
    cell.store_with(Arc::new(Tracked::new(1, counts)), Reclaim::Synchronize);
    cell.store_with(Arc::new(Tracked::new(2, counts)), Reclaim::Expedited);
    assert_eq!(
        Arc::strong_count(&kept),
        1,
        "the cell's old Arcs were dropped"
    );
    kept.check();
    assert_eq!(kept.id(), 0);
    assert_eq!(counts.live(), 2);
    drop(kept);
    assert_eq!(counts.live(), 1);
    assert_eq!(cell.load_arc().id(), 2);
    assert_eq!(format!("{:?}", RcuCell::new(3).snapshot()), "3");
}

/// A value handed back by `swap` becomes ready with nobody waiting: polling `try_take` (or
/// `is_ready`) and doing other work meanwhile must end. The swap took its cookie without
/// asking for a grace period, so on a domain with nothing else to do none ever started and
/// such a loop polled forever.
#[test]
fn a_swapped_out_value_becomes_ready_while_only_polled() {
    common::support::watchdog(Duration::from_secs(60), || {
        let rcu = Arc::new(Rcu::new());
        let cell = RcuCell::with_domain(1u64, rcu.clone());
        let mut old = cell.swap(2);
        let value = loop {
            match old.try_take() {
                Ok(value) => break value,
                Err(back) => old = back,
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(value, 1);
        let old = cell.swap(3);
        while !old.is_ready() {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(old.try_take().ok(), Some(2));
    });
}
