//! `RcuList`: readers walking the list while writers insert, remove and replace never see a
//! dropped or torn element, always see the elements that stay in the list, in order; the
//! writer operations match a simple model; every element is dropped exactly once. The
//! concurrent tests run against every domain configuration (`common::each_config`).

mod common;
mod tracked;

use rcukit::{Rcu, RcuList};
use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
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

/// Ids below this are sentinels: inserted first, never removed or replaced.
const SENTINELS: u64 = 4;
/// Ids of sentinels are 0..SENTINELS; others start here.
const FIRST_ID: u64 = 1000;

#[test]
fn readers_walk_safely_while_writers_edit() {
    common::each_config(readers_walk_safely);
}

fn readers_walk_safely(rcu: &Rcu) {
    let counts = Counts::leak();
    let list = RcuList::with_domain(rcu);
    for id in 0..SENTINELS {
        list.push_back(Tracked::new(id, counts));
        list.push_back(Tracked::new(FIRST_ID + id, counts));
    }
    let next_id = AtomicU64::new(FIRST_ID + SENTINELS);
    let stop = AtomicBool::new(false);
    let walks = AtomicU64::new(0);
    let ops = AtomicU64::new(0);
    let (run_for, max_writes) = budget();
    let deadline = Instant::now() + run_for / 3; // per configuration

    std::thread::scope(|s| {
        for r in 0..2u64 {
            let (list, stop, walks) = (&list, &stop, &walks);
            s.spawn(move || {
                let mut rng = XorShift(0x77 + r);
                let mut n = 0;
                loop {
                    let guard = list.domain().read();
                    let mut sentinels_seen = 0;
                    let mut held = Vec::new();
                    for value in list.iter(&guard) {
                        value.check();
                        if value.id() < SENTINELS {
                            assert_eq!(value.id(), sentinels_seen, "sentinels in order, once");
                            sentinels_seen += 1;
                        }
                        if rng.next() % 8 == 0 {
                            held.push(value);
                            for _ in 0..rng.next() % 128 {
                                std::hint::spin_loop();
                            }
                        }
                    }
                    assert_eq!(sentinels_seen, SENTINELS, "every sentinel seen");
                    // Elements read earlier in the walk are still alive.
                    for value in held {
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
                walks.fetch_add(n, Relaxed);
            });
        }
        for w in 0..2u64 {
            let (list, stop, next_id, ops) = (&list, &stop, &next_id, &ops);
            s.spawn(move || {
                let mut rng = XorShift(0x99 + w);
                let mut i = 0;
                while Instant::now() < deadline && i < max_writes {
                    let id = next_id.fetch_add(1, Relaxed);
                    let victim = FIRST_ID + rng.next() % (id - FIRST_ID);
                    match rng.next() % 6 {
                        0 => list.push_front(Tracked::new(id, counts)),
                        1 => list.push_back(Tracked::new(id, counts)),
                        2 | 3 => {
                            list.remove_first(|v| v.id() >= FIRST_ID && v.id() <= victim);
                        }
                        4 => {
                            list.update_first(
                                |v| v.id() >= victim,
                                |old| {
                                    old.check();
                                    Tracked::new(id, counts)
                                },
                            );
                        }
                        _ => {
                            // Thin out when the list grows long.
                            if list.len() > 32 {
                                list.retain(|v| v.id() < SENTINELS || v.id() + 64 > id);
                            }
                        }
                    }
                    i += 1;
                    if i % 64 == 0 {
                        std::thread::sleep(Duration::from_micros(20));
                    }
                }
                ops.fetch_add(i, Relaxed);
                stop.store(true, Relaxed);
            });
        }
    });

    eprintln!(
        "walks: {}, writes: {}, final length: {}",
        walks.load(Relaxed),
        ops.load(Relaxed),
        list.len()
    );
    assert!(walks.load(Relaxed) > 0);
    let guard = rcu.read();
    let ids: Vec<u64> = list.iter(&guard).map(Tracked::id).collect();
    drop(guard);
    assert_eq!(ids.len(), list.len());
    assert_eq!(
        ids.iter().filter(|&&id| id < SENTINELS).count() as u64,
        SENTINELS
    );
    assert_eq!(counts.double_drops.load(Relaxed), 0);
    rcu.barrier();
    assert_eq!(
        counts.live(),
        list.len(),
        "every removed element was dropped"
    );
    drop(list);
    assert_eq!(counts.live(), 0, "dropping the list drops the rest");
    assert_eq!(counts.double_drops.load(Relaxed), 0);
}

/// The writer operations against a `VecDeque` model, including the tail bookkeeping
/// (removing or replacing the last element, then pushing at the back).
#[test]
fn writer_operations_match_a_model() {
    let rcu = domain("list-model");
    let mut list = RcuList::with_domain(&rcu);
    let mut model: VecDeque<u32> = VecDeque::new();
    let mut rng = XorShift(5);
    let steps = if cfg!(miri) { 200 } else { 20_000 };
    for step in 0..steps {
        let value = (rng.next() % 16) as u32;
        match rng.next() % 7 {
            0 => {
                list.push_front(value);
                model.push_front(value);
            }
            1 | 2 => {
                list.push_back(value);
                model.push_back(value);
            }
            3 => {
                let found = list.remove_first(|&v| v == value);
                let position = model.iter().position(|&v| v == value);
                assert_eq!(found, position.is_some());
                if let Some(p) = position {
                    model.remove(p);
                }
            }
            4 => {
                let found = list.update_first(|&v| v == value, |&v| v + 100);
                let position = model.iter().position(|&v| v == value);
                assert_eq!(found, position.is_some());
                if let Some(p) = position {
                    model[p] += 100;
                }
            }
            5 => {
                let before = model.len();
                model.retain(|&v| v % 5 != value % 5);
                assert_eq!(list.retain(|&v| v % 5 != value % 5), before - model.len());
            }
            _ => {
                if step % 50 == 0 {
                    assert_eq!(list.clear(), model.len());
                    model.clear();
                }
                // Shrink big numbers so that values keep matching predicates.
                list.retain(|&v| v < 1000);
                model.retain(|&v| v < 1000);
            }
        }
        let guard = rcu.read();
        assert!(list.iter(&guard).eq(model.iter()), "step {step}");
        assert_eq!(list.len(), model.len());
        assert_eq!(list.is_empty(), model.is_empty());
    }
    for v in list.iter_mut() {
        *v += 1;
    }
    let guard = rcu.read();
    assert!(list
        .iter(&guard)
        .eq(model.iter().map(|v| v + 1).collect::<Vec<_>>().iter()));
}

/// A reader standing on a node keeps walking after the node and its successor are removed.
#[test]
fn a_reader_on_removed_nodes_walks_on() {
    common::each_config(a_reader_on_removed_nodes);
}

fn a_reader_on_removed_nodes(rcu: &Rcu) {
    let counts = Counts::leak();
    let list = RcuList::with_domain(rcu);
    for id in 0..5 {
        list.push_back(Tracked::new(id, counts));
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let guard = rcu.read();
        let mut it = list.iter(&guard);
        assert_eq!(it.next().map(Tracked::id), Some(0));
        let on = it.next().unwrap();
        assert_eq!(on.id(), 1);
        // Remove the node we stand on and the next one, replace the one after, add at the back.
        assert!(list.remove_first(|v| v.id() == 1));
        assert!(list.remove_first(|v| v.id() == 2));
        assert!(list.update_first(|v| v.id() == 3, |_| Tracked::new(30, counts)));
        list.push_back(Tracked::new(5, counts));
        // Another thread's grace period cannot end while we hold the guard: start one in the
        // background and check that it has not finished while we keep reading.
        let waiter = s.spawn(|| {
            rcu.synchronize_expedited();
            done.store(true, Relaxed);
        });
        std::thread::sleep(Duration::from_millis(20));
        on.check();
        let rest: Vec<u64> = it
            .map(|v| {
                v.check();
                v.id()
            })
            .collect();
        // (5 was pushed at the back after the walk began: the walk ends before it.)
        assert_eq!(rest, [2, 3, 4], "the removed nodes lead back into the list");
        assert!(
            !done.load(Relaxed),
            "a grace period ended under a live reader"
        );
        drop(guard);
        waiter.join().unwrap();
    });
    let guard = rcu.read();
    let ids: Vec<u64> = list.iter(&guard).map(Tracked::id).collect();
    assert_eq!(ids, [0, 30, 4, 5]);
    drop(guard);
    rcu.barrier();
    assert_eq!(counts.live(), 4);
    drop(list);
    assert_eq!(counts.live(), 0);
}

#[test]
fn every_element_is_dropped_once() {
    common::each_config(every_element_dropped_once);
    assert_eq!(
        format!("{:?}", [1, 2].into_iter().collect::<RcuList<_>>()),
        "[1, 2]"
    );
}

fn every_element_dropped_once(rcu: &Rcu) {
    let counts = Counts::leak();
    let list = RcuList::with_domain(rcu);
    let stop = AtomicBool::new(false);
    let rounds = if cfg!(miri) { 3 } else { 500 };
    std::thread::scope(|s| {
        s.spawn(|| {
            loop {
                let guard = rcu.read();
                list.iter(&guard).for_each(Tracked::check);
                // At least one pass, however late this thread starts.
                if stop.load(Relaxed) {
                    break;
                }
            }
        });
        s.spawn(|| {
            for round in 0..rounds {
                for i in 0..4 {
                    list.push_back(Tracked::new(round * 10 + i, counts));
                }
                list.remove_first(|v| v.id() % 10 == 1);
                list.clear();
            }
            stop.store(true, Relaxed);
        });
    });
    rcu.barrier();
    assert_eq!(counts.live(), 0);
    assert_eq!(counts.double_drops.load(Relaxed), 0);
}

#[test]
#[should_panic(expected = "RcuList of domain")]
fn a_guard_of_another_domain_is_refused() {
    let a = domain("a");
    let b = domain("b");
    let list = RcuList::with_domain(&a);
    list.push_back(1);
    let guard = b.read();
    let _ = list.iter(&guard).count();
}

/// A list dropped with an element whose `Drop` panics: every other element is dropped too,
/// and the panic goes on to the caller. (The drop stopped at the panic and leaked the rest.)
#[test]
fn a_list_dropped_with_a_panicking_element_drops_every_element() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    struct Element(bool);
    impl Drop for Element {
        fn drop(&mut self) {
            DROPS.fetch_add(1, SeqCst);
            if self.0 {
                panic!("an element's drop");
            }
        }
    }
    let list = RcuList::new();
    for i in 0..10 {
        list.push_back(Element(i == 2));
    }
    assert!(catch_unwind(AssertUnwindSafe(|| drop(list))).is_err());
    assert_eq!(DROPS.load(SeqCst), 10, "every element dropped");

    // Dropped with the frame that panicked: the element's panic stops in the list's drop, and
    // the frame's comes out. (It went on out of the drop while the frame's unwound: an abort.)
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        let list = RcuList::new();
        for i in 0..10 {
            list.push_back(Element(i == 2));
        }
        panic!("the frame's panic");
    }));
    let payload = unwound.expect_err("the frame panicked");
    assert_eq!(
        payload.downcast_ref::<&str>().copied(),
        Some("the frame's panic")
    );
    assert_eq!(
        DROPS.load(SeqCst),
        20,
        "every element of the second list dropped"
    );
}

/// Like std's collections: the list crosses `catch_unwind` by reference when its elements do
/// (its writer lock's cell kept `RefUnwindSafe` away), and an iterator over `Sync` elements
/// may go to another thread, as the `&T` it yields may (a scoped thread, the guard held here).
#[test]
fn the_list_is_unwind_safe_and_its_iterator_crosses_threads() {
    fn unwind_safe<T: std::panic::UnwindSafe + std::panic::RefUnwindSafe>() {}
    fn send_sync<T: Send + Sync>(_: &T) {}
    unwind_safe::<RcuList<u64>>();
    unwind_safe::<rcukit::RcuCell<u64>>();
    let list: RcuList<u64> = (0..100).collect();
    let guard = list.domain().read();
    let mut iter = list.iter(&guard);
    send_sync(&iter);
    assert_eq!(iter.next(), Some(&0));
    let rest: u64 = std::thread::scope(|s| s.spawn(move || iter.sum()).join().unwrap());
    assert_eq!(rest, (1..100).sum::<u64>());
}

/// A walk ends at the first element pushed at the back after it began: elements pushed at the
/// front land behind it, and a replaced element keeps its place (its old version was there).
#[test]
fn a_walk_ends_before_what_was_pushed_at_the_back_after_it_began() {
    let list: RcuList<i64> = (0..10).collect();
    let guard = list.domain().read();
    let mut walk = list.iter(&guard);
    assert_eq!(walk.next(), Some(&0));
    list.push_back(100);
    list.push_front(-1);
    assert!(list.update_first(|&x| x == 5, |_| 50));
    assert!(list.update_first(|&x| x == 100, |_| 101));
    let rest: Vec<i64> = walk.copied().collect();
    assert_eq!(rest, [1, 2, 3, 4, 50, 6, 7, 8, 9]);
    let all: Vec<i64> = list.iter(&guard).copied().collect();
    assert_eq!(all, [-1, 0, 1, 2, 3, 4, 50, 6, 7, 8, 9, 101]);
}

/// A list used as a queue (a writer pushing at the back and removing at the front as fast as it
/// can) under a walk slower than the writer: the walk ends, having yielded no more than the list
/// held when it began (one more than `LEN` between a push and its removal). (It followed the writer for ever, and every node the writer removed stayed
/// allocated while its guard held the grace periods back.)
#[test]
fn a_walk_ends_while_a_writer_keeps_pushing() {
    const LEN: usize = 1_000;
    let list: std::sync::Arc<RcuList<u64>> = std::sync::Arc::new((0..LEN as u64).collect());
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let writer = {
        let (list, stop) = (list.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut next = LEN as u64;
            while !stop.load(Relaxed) {
                list.push_back(next);
                list.remove_first(|_| true);
                next += 1;
            }
        })
    };
    for _ in 0..3 {
        let guard = list.domain().read();
        let mut seen = 0;
        for _ in list.iter(&guard) {
            seen += 1;
            assert!(
                seen <= LEN + 1,
                "the walk went past what the list held when it began"
            );
            std::thread::yield_now();
        }
    }
    stop.store(true, Relaxed);
    writer.join().unwrap();
}
