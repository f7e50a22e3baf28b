//! `RcuFlatMap` on a QSBR domain: read by online threads with no per-lookup code; the calls
//! that read by themselves (under the writer lock there); offline threads and other domains'
//! sections refused; readers beside a writer that rebuilds the table, in both fence modes;
//! hostile user code that announces quiescent states or writes while the map reads for it.

mod common;

use common::flat::{scale, stamp};

use common::support::{assert_panics_with, panic_message};
use rcukit::flat_map::{Compute, Operation};
use rcukit::{Qsbr, QsbrThread, Rcu, RcuFlatMap};
use std::cell::RefCell;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Barrier};

type QsbrMap<K = u64, V = u64> = RcuFlatMap<K, V, RandomState, Arc<Qsbr>>;

fn map_in(qsbr: &Arc<Qsbr>) -> QsbrMap {
    RcuFlatMap::new_in(qsbr.clone())
}

#[test]
fn online_threads_read_and_every_call_works() {
    let qsbr = Arc::new(Qsbr::new());
    let map = map_in(&qsbr);
    assert!(std::ptr::eq(map.domain(), &*qsbr));
    let mut me = qsbr.register();
    let n = scale(1_000, 100) as u64;
    for i in 0..n {
        assert_eq!(map.insert(i, i * 2), None);
    }
    assert_eq!(map.insert(7, 70), Some(14));
    assert_eq!(map.get(&7, &me), Some(&70));
    assert_eq!(map.get_key_value(&8, &me), Some((&8, &16)));
    assert!(map.contains_key(&(n - 1), &me));
    assert!(!map.contains_key(&n, &me));
    assert_eq!(map.iter(&me).count() as u64, n);
    assert_eq!(map.keys(&me).copied().max(), Some(n - 1));
    assert_eq!(map.values(&me).copied().max(), Some(2 * (n - 1)));
    me.quiescent_state();
    // The calls that read by themselves: online, and from a thread that never registered.
    assert_eq!(map.get_copied(&7), Some(70));
    assert!(map.capacity() as u64 >= n);
    let copy = map.clone();
    assert_eq!(copy, map);
    assert_eq!(map, copy);
    #[allow(clippy::eq_op)] // a map compared with itself takes one hold, not two
    let itself = map == map;
    assert!(itself);
    assert!(format!("{map:?}").contains("7: 70"));
    std::thread::scope(|s| {
        s.spawn(|| {
            assert!(!qsbr.is_online());
            assert_eq!(map.get_copied(&7), Some(70));
            assert!(map.capacity() as u64 >= n);
            assert!(map.clone() == map);
            assert!(format!("{map:?}").contains("8: 16"));
        });
    });
    // `compute` borrows for the thread's online stretch, as the borrowed writes do.
    let done = map.compute(7, |e| Operation::<u64, ()>::Insert(e.unwrap().1 + 1), &me);
    assert_eq!(
        done,
        Compute::Updated {
            old: (&7, &70),
            new: (&7, &71)
        }
    );
    assert_eq!(map.insert_borrowed(7, 70, &me), Some(&71));
    assert_eq!(map.remove(&7), Some(70));
    assert_ne!(copy, map);
    map.retain(|k, _| k % 2 == 0);
    assert_eq!(map.len() as u64, n / 2);
    map.shrink_to_fit();
    assert_eq!(map.iter(&me).filter(|(k, _)| *k % 2 == 1).count(), 0);
    map.clear();
    assert!(map.is_empty());
    // The replaced tables were retired to the QSBR domain; the grace period needs this thread
    // offline (or a quiescent state) to end.
    drop(me);
    qsbr.barrier();
    let stats = qsbr.stats();
    assert!(stats.callbacks_invoked > 0, "no table retired: {stats:?}");
    assert_eq!(stats.callbacks_queued, stats.callbacks_invoked, "{stats:?}");
}

#[test]
fn an_offline_thread_and_other_domains_sections_are_refused() {
    let qsbr = Arc::new(Qsbr::new());
    let map = map_in(&qsbr);
    map.insert(1, 1);
    let mut me = qsbr.register();
    me.offline();
    assert_panics_with("offline", || map.get(&1, &me).copied());
    assert_panics_with("offline", || map.iter(&me).count());
    assert_panics_with("offline", || {
        map.compute(1, |_| Operation::<u64, ()>::Remove, &me) == Compute::Absent
    });
    assert_eq!(map.len(), 1);
    me.online();
    assert_eq!(map.get(&1, &me), Some(&1));
    // Another QSBR domain's thread, and an `Rcu` guard.
    let other = Qsbr::new();
    let stranger = other.register();
    let msg = panic_message(
        catch_unwind(AssertUnwindSafe(|| map.get(&1, &stranger).copied())).unwrap_err(),
    );
    assert!(
        msg.contains("another") || msg.contains("own domain"),
        "{msg}"
    );
    let rcu = Rcu::new();
    let guard = rcu.read();
    assert_panics_with("own domain", || map.get(&1, &guard).copied());
    // And a QSBR thread is no section of an `Rcu` domain's map.
    let rcu_map: RcuFlatMap<u64, u64> = RcuFlatMap::new();
    rcu_map.insert(1, 1);
    assert_panics_with("own domain", || rcu_map.get(&1, &me).copied());
    // Nothing was left locked or open.
    map.insert(2, 2);
    assert_eq!(map.get(&2, &me), Some(&2));
}

#[test]
fn online_readers_find_every_stable_key_while_the_writer_rebuilds_the_table() {
    for fenced in [true, false] {
        let qsbr = Arc::new(
            Qsbr::builder()
                .fenced_quiescent_states(fenced)
                .build()
                .unwrap(),
        );
        readers_beside_rebuilds(&qsbr);
        qsbr.barrier();
        let stats = qsbr.stats();
        assert!(
            stats.callbacks_invoked > 0,
            "fenced {fenced}: no table retired: {stats:?}"
        );
    }
}

fn readers_beside_rebuilds(qsbr: &Arc<Qsbr>) {
    const STABLE: u64 = 64;
    let map = Arc::new(map_in(qsbr));
    for k in 0..STABLE {
        map.insert(k, stamp(k, 0));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let lookups = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let (map, stop, lookups, qsbr) =
                (map.clone(), stop.clone(), lookups.clone(), qsbr.clone());
            std::thread::spawn(move || {
                let mut me = qsbr.register();
                let mut n = 0u64;
                let mut last = vec![0u64; STABLE as usize];
                let mut pass = 0u64;
                // At least one pass, however late a loaded machine starts this thread.
                while !stop.load(Relaxed) || pass == 0 {
                    // References from one pass, kept until its quiescent state.
                    let mut held = Vec::with_capacity(STABLE as usize);
                    for k in 0..STABLE {
                        let v = map
                            .get(&k, &me)
                            .unwrap_or_else(|| panic!("reader {r}: stable key {k} missing"));
                        assert_eq!(*v >> 32, k, "reader {r}: key {k} has another key's value");
                        assert!(*v & 0xFFFF_FFFF >= last[k as usize], "key {k} went back");
                        last[k as usize] = *v & 0xFFFF_FFFF;
                        held.push(v);
                        n += 1;
                    }
                    // What the pass read is still as it was read (its table not yet freed).
                    for (k, v) in held.iter().enumerate() {
                        assert_eq!(**v >> 32, k as u64, "reader {r}: a held value changed");
                    }
                    drop(held);
                    pass += 1;
                    match pass % 16 {
                        0 => me.offline_while(std::thread::yield_now),
                        _ => me.quiescent_state(),
                    }
                }
                lookups.fetch_add(n, Relaxed);
            })
        })
        .collect();
    common::flat::rebuild_under_readers(&map, STABLE);
    stop.store(true, Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert!(lookups.load(Relaxed) > 0);
    assert_eq!(map.len(), STABLE as usize);
}

thread_local! {
    /// A registration kept where the user's `Debug`, `Eq` and `Hash` can reach it.
    static ME: RefCell<Option<QsbrThread<'static>>> = const { RefCell::new(None) };
}

/// A key whose `Debug`, `Hash` and `Eq` announce a quiescent state through the thread's
/// registration (hostile: a reader that trusted the thread to stay online would lose its
/// table to the writer meanwhile).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Announcing(u64);

fn announce() {
    ME.with(|me| {
        if let Ok(mut me) = me.try_borrow_mut() {
            if let Some(me) = me.as_mut() {
                me.quiescent_state();
            }
        }
    });
}

impl Hash for Announcing {
    fn hash<H: Hasher>(&self, state: &mut H) {
        announce();
        self.0.hash(state);
    }
}

impl fmt::Debug for Announcing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        announce();
        std::thread::yield_now();
        write!(f, "A{}", self.0)
    }
}

#[test]
fn reads_that_run_user_code_stay_sound_when_it_announces_quiescent_states() {
    let qsbr: &'static Qsbr = Box::leak(Box::new(Qsbr::new()));
    let map: Arc<RcuFlatMap<Announcing, u64, RandomState, &'static Qsbr>> = Arc::new(
        RcuFlatMap::with_capacity_hasher_in(0, RandomState::new(), qsbr),
    );
    let n = scale(2_000, 40) as u64;
    for i in 0..n {
        map.insert(Announcing(i), i);
    }
    ME.with(|me| *me.borrow_mut() = Some(qsbr.register()));
    let stop = Arc::new(AtomicBool::new(false));
    // A writer that rebuilds the table as fast as it can: any table the reads below lost
    // protection for would be freed under them.
    let writer = {
        let (map, stop) = (map.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Relaxed) {
                map.insert(Announcing(1_000_000 + i % 3_000), i);
                map.remove(&Announcing(1_000_000 + (i + 1_500) % 3_000));
                i += 1;
            }
        })
    };
    for _ in 0..scale(20, 2) {
        let text = format!("{map:?}");
        for i in (0..n).step_by(97) {
            assert!(text.contains(&format!("A{i}: {i}")), "A{i} missing");
        }
        assert_eq!(map.get_copied(&Announcing(5)), Some(5));
        assert!(map.clone().len() >= n as usize);
    }
    stop.store(true, Relaxed);
    writer.join().unwrap();
    ME.with(|me| me.borrow_mut().take());
}

#[test]
fn user_code_under_the_writer_lock_reads_by_itself_and_cannot_write() {
    let qsbr = Arc::new(Qsbr::new());
    let map = map_in(&qsbr);
    map.insert(1, 10);
    map.insert(2, 20);
    // Reads that take the writer lock, from a closure run under it: no deadlock.
    let mut capacity = 0;
    let updated = map.update(&1, |v| {
        capacity = map.capacity();
        v + map.get_copied(&2).unwrap()
    });
    assert_eq!((updated, capacity >= 2), (Some(30), true));
    map.retain(|_, _| format!("{map:?}").contains("2: 20") && map.clone() == map);
    assert_eq!(map.len(), 2);
    // A write from there panics, and leaves the lock and the mark let go.
    assert_panics_with("writer lock", || {
        map.update(&1, |v| v + map.insert(3, 3).unwrap_or(0))
    });
    assert_eq!(map.insert(3, 3), None);
    assert_eq!(map.get_copied(&3), Some(3));
}

#[test]
fn comparing_two_maps_both_ways_on_two_threads_does_not_deadlock() {
    let qsbr = Arc::new(Qsbr::new());
    let (a, b) = (map_in(&qsbr), map_in(&qsbr));
    for i in 0..scale(200, 20) as u64 {
        a.insert(i, i);
        b.insert(i, i);
    }
    let start = Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            start.wait();
            for _ in 0..scale(2_000, 20) {
                assert!(a == b);
            }
        });
        s.spawn(|| {
            start.wait();
            for _ in 0..scale(2_000, 20) {
                assert!(b == a);
            }
        });
    });
    // Both locks and marks were let go in order: each map can be written here.
    a.insert(1_000, 0);
    b.insert(1_000, 0);
    assert!(a == b);
}

#[test]
fn the_map_on_a_qsbr_domain_is_send_sync_and_unwind_safe() {
    fn check<T: Send + Sync + std::panic::UnwindSafe + std::panic::RefUnwindSafe>() {}
    check::<QsbrMap>();
    check::<RcuFlatMap<u64, u64, RandomState, &'static Qsbr>>();
}
