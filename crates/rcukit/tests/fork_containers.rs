//! `fork()` of a process whose other threads read and write the containers. The maps:
//! `RcuHashMap` resizing on the global domain, `RcuFlatMap` rebuilding on a QSBR domain with an
//! online reader; the child reads every entry that no thread of the parent ever removes, writes
//! both maps enough to grow and shrink them, waits for grace periods of the QSBR domain (whose
//! online reader the child does not have), and reads from a thread of its own; or it drops its
//! copy of the `RcuHashMap` without writing it. Then the writer locks of `RcuFlatMap`,
//! `RcuCell` and `RcuList`, held in the user's closure by a thread of the parent at the fork,
//! and `RcuList` written by other threads at the fork. Last, `RcuHashMap` writes that fork
//! from their own user code while other threads write the same bucket; and a thread online in
//! a QSBR domain that forks while other threads read, register and rebuild a flat map there.
//! A test binary of its own: it forks the whole process.
#![cfg(unix)]

mod common;

use common::fork::{child_round, fork_within, succeeded};
use rcukit::{Qsbr, RcuCell, RcuFlatMap, RcuHashMap, RcuList};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// Keys `0..STABLE` are in both maps from the start and never removed.
const STABLE: u64 = 1_000;

/// Keys the parent's writers churn (inserted and removed, so that the tables grow and shrink).
const CHURN: std::ops::Range<u64> = 1_000_000..1_030_000;

/// Keys the child writes.
const CHILD: std::ops::Range<u64> = 2_000_000..2_040_000;

type FlatQsbr = RcuFlatMap<u64, u64, std::collections::hash_map::RandomState, Arc<Qsbr>>;

fn value_of(key: u64) -> u64 {
    key.wrapping_mul(3) + 1
}

/// The child's checks (panics on failure).
fn child(hash: &RcuHashMap<u64, u64>, flat: &FlatQsbr, qsbr: &Arc<Qsbr>) {
    let check_stable = |me: &rcukit::QsbrThread<'_>| {
        let guard = hash.domain().read();
        for k in 0..STABLE {
            assert_eq!(
                hash.get(&k, &guard),
                Some(&value_of(k)),
                "RcuHashMap lost {k}"
            );
            assert_eq!(flat.get(&k, me), Some(&value_of(k)), "RcuFlatMap lost {k}");
        }
    };
    let mut me = qsbr.register();
    check_stable(&me);
    me.quiescent_state();
    drop(me);
    // A read that the flat map makes under its writer lock on a QSBR domain: the first use of
    // that lock in the child.
    assert_eq!(flat.get_copied(&0), Some(value_of(0)));
    // Writes in the child: enough to grow both tables, then to shrink them again.
    for k in CHILD {
        hash.pin().insert(k, value_of(k));
        flat.insert(k, value_of(k));
    }
    for k in CHILD {
        assert_eq!(hash.pin().remove(&k).copied(), Some(value_of(k)));
        assert_eq!(flat.remove(&k), Some(value_of(k)));
    }
    // Grace periods of the QSBR domain: the parent's online reader is not in the child.
    qsbr.synchronize();
    qsbr.barrier();
    hash.domain().barrier();
    // A thread of the child's own reads too.
    common::fork::on_a_thread(|| {
        let me = qsbr.register();
        check_stable(&me);
    });
    let mut me = qsbr.register();
    check_stable(&me);
    // Every entry once, and counted: what the parent's writers were halfway through at the
    // fork left neither a repeated entry nor a wrong count.
    let guard = hash.domain().read();
    let keys: Vec<u64> = hash.keys(&guard).copied().collect();
    assert_eq!(keys.len(), hash.len(), "RcuHashMap's count");
    assert_eq!(
        keys.iter().collect::<HashSet<_>>().len(),
        keys.len(),
        "RcuHashMap repeats"
    );
    drop(guard);
    let keys: Vec<u64> = flat.keys(&me).copied().collect();
    assert_eq!(keys.len(), flat.len(), "RcuFlatMap's count");
    assert_eq!(
        keys.iter().collect::<HashSet<_>>().len(),
        keys.len(),
        "RcuFlatMap repeats"
    );
    me.quiescent_state();
}

/// The child drops its copy of the map without writing it first: each node once, though a
/// move may have been halfway at the fork (its nodes then in two tables; freeing them twice
/// aborts the child).
fn drop_in_child(hash: &RcuHashMap<u64, u64>) {
    // SAFETY: the child's own copy of the map, taken over by the child; the parent's copy (and
    // the child's `Arc` of it) is never used in the child again (it leaves with `_exit`).
    let mine: RcuHashMap<u64, u64> = unsafe { std::ptr::read(hash) };
    let guard = mine.domain().read();
    for k in 0..STABLE {
        assert_eq!(
            mine.get(&k, &guard),
            Some(&value_of(k)),
            "RcuHashMap lost {k}"
        );
    }
    drop(guard);
    drop(mine);
}

#[test]
fn a_forked_child_reads_and_writes_maps_its_parent_was_writing() {
    let qsbr = Arc::new(Qsbr::new());
    let hash = Arc::new(RcuHashMap::<u64, u64>::new());
    let flat: Arc<FlatQsbr> = Arc::new(RcuFlatMap::new_in(qsbr.clone()));
    for k in 0..STABLE {
        hash.pin().insert(k, value_of(k));
        flat.insert(k, value_of(k));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    // Writers that fill and empty their churn keys again and again: tables grow, shrink and
    // move (RcuHashMap) or are rebuilt (RcuFlatMap) all the time.
    {
        let (hash, stop) = (hash.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for k in CHURN {
                    hash.pin().insert(k, value_of(k));
                }
                for k in CHURN {
                    hash.pin().remove(&k);
                }
            }
        }));
    }
    {
        let (flat, stop) = (flat.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for k in CHURN {
                    flat.insert(k, value_of(k));
                }
                for k in CHURN {
                    flat.remove(&k);
                }
            }
        }));
    }
    // Readers: one online in the QSBR domain, one with guards of the global domain.
    {
        let (flat, qsbr, hash, stop) = (flat.clone(), qsbr.clone(), hash.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut me = qsbr.register();
            let mut k = 0;
            while !stop.load(Ordering::Relaxed) {
                assert_eq!(flat.get(&k, &me), Some(&value_of(k)));
                let guard = hash.domain().read();
                assert_eq!(hash.get(&k, &guard), Some(&value_of(k)));
                drop(guard);
                k = (k + 1) % STABLE;
                if k % 64 == 0 {
                    me.quiescent_state();
                }
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(50));
    for round in 0..24u64 {
        child_round(round, Duration::from_secs(60), &stop, || {
            if round % 2 == 0 {
                child(&hash, &flat, &qsbr);
            } else {
                drop_in_child(&hash);
            }
        });
        std::thread::sleep(Duration::from_millis(round * 7 % 20));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
}

/// A fork while another thread is in the middle of a flat map write, inside the user's closure
/// (which runs under the map's writer lock): the child does not have that thread, and takes
/// the lock over; the write that thread was making never happened there.
#[test]
fn a_forked_child_writes_a_flat_map_whose_lock_a_vanished_thread_held() {
    let map: Arc<RcuFlatMap<u64, u64>> = Arc::new(RcuFlatMap::new());
    for k in 0..STABLE {
        map.insert(k, value_of(k));
    }
    let writer_map = map.clone();
    let updated = fork_while_held(
        move |wait| {
            writer_map.update(&1, |v| {
                wait();
                v + 1
            })
        },
        || {
            assert_eq!(
                map.get_copied(&1),
                Some(value_of(1)),
                "the vanished write happened"
            );
            for k in CHILD {
                map.insert(k, value_of(k));
            }
            assert_eq!(map.update(&1, |v| v + 10), Some(value_of(1) + 10));
            assert_eq!(map.len() as u64, STABLE + CHILD.end - CHILD.start);
            map.retain(|&k, _| k < STABLE);
            assert_eq!(map.len() as u64, STABLE);
        },
    );
    assert_eq!(updated, Some(value_of(1) + 1));
}

/// A fork from the user's closure of a flat map write, which runs under the map's writer lock:
/// the forking thread is the child's, and so is the lock. The write finishes in the child as
/// in the parent; a thread the child starts meanwhile waits for the lock, then writes too.
#[test]
fn a_child_forked_from_a_flat_map_write_finishes_it() {
    let map: Arc<RcuFlatMap<u64, u64>> = Arc::new(RcuFlatMap::new());
    map.insert(1, 100);
    let mut pid = 0;
    let mut other = None;
    let updated = map.update(&1, |v| {
        // SAFETY: the child runs the rest of this test and leaves with `_exit`.
        pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let map = map.clone();
            other = Some(common::fork::spawn(move || map.insert(2, 200)));
        }
        v + 1
    });
    if pid == 0 {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            assert_eq!(updated, Some(101));
            assert_eq!(other.take().unwrap().join(), None);
            assert_eq!(map.get_copied(&2), Some(200));
            assert_eq!(map.insert(3, 300), None);
            assert_eq!(map.len(), 3);
        }));
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(if outcome.is_ok() { 0 } else { 3 }) };
    }
    assert_eq!(updated, Some(101));
    let status = common::fork::wait_within(pid, Duration::from_secs(60)).unwrap();
    assert!(succeeded(status), "the child failed ({status:#x})");
}

thread_local! {
    /// What the next clone of a `Hooked` value on this thread runs (once).
    static ON_CLONE: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
}

/// A flat map value whose `Clone` (which a rebuild runs for every live entry, under the
/// map's writer lock) runs this thread's hook first.
#[derive(Debug, PartialEq)]
struct Hooked(u64);

impl Clone for Hooked {
    fn clone(&self) -> Hooked {
        if let Some(hook) = ON_CLONE.with(|h| h.borrow_mut().take()) {
            hook();
        }
        Hooked(self.0)
    }
}

/// Insert fresh keys from `next` on until one insert's rebuild ran the hook (its clones run it
/// part-way through copying the table); returns the key of that insert.
fn insert_until_a_rebuild_runs(map: &RcuFlatMap<u64, Hooked>, next: &mut u64) -> u64 {
    loop {
        let k = *next;
        *next += 1;
        assert_eq!(map.insert(k, Hooked(value_of(k))), None);
        if ON_CLONE.with(|h| h.borrow().is_none()) {
            return k;
        }
    }
}

/// A fork from a value's `Clone` in the middle of a rebuild: the forking thread is the
/// child's, it finishes the rebuild and the insert there, and a thread the child starts in
/// the `Clone` waits for the lock, then writes too. Every entry is there once.
#[test]
fn a_child_forked_from_a_clone_in_a_flat_map_rebuild_finishes_it() {
    let map: Arc<RcuFlatMap<u64, Hooked>> = Arc::new(RcuFlatMap::new());
    for k in 0..STABLE {
        map.insert(k, Hooked(value_of(k)));
    }
    let pid = Arc::new(std::sync::Mutex::new(0));
    let other = Arc::new(std::sync::Mutex::new(None));
    let hook = {
        let (map, pid, other) = (map.clone(), pid.clone(), other.clone());
        move || {
            // SAFETY: the child runs the rest of this test and leaves with `_exit`.
            let forked = unsafe { libc::fork() };
            assert!(forked >= 0, "fork failed");
            *pid.lock().unwrap() = forked;
            if forked == 0 {
                let map = map.clone();
                *other.lock().unwrap() =
                    Some(common::fork::spawn(move || map.insert(u64::MAX, Hooked(1))));
            }
        }
    };
    ON_CLONE.with(|h| *h.borrow_mut() = Some(Box::new(hook)));
    let mut next = STABLE;
    let last = insert_until_a_rebuild_runs(&map, &mut next);
    let forked = *pid.lock().unwrap();
    if forked == 0 {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let writer = other.lock().unwrap().take().unwrap();
            assert_eq!(writer.join(), None);
            assert_eq!(map.get_cloned(&last), Some(Hooked(value_of(last))));
            assert_eq!(map.get_cloned(&u64::MAX), Some(Hooked(1)));
            for k in CHILD.start..CHILD.start + 5_000 {
                map.insert(k, Hooked(value_of(k)));
            }
            let guard = map.domain().read();
            let keys: HashSet<u64> = map.keys(&guard).copied().collect();
            assert_eq!(keys.len(), map.len(), "a key yielded twice");
            assert_eq!(map.len() as u64, last + 1 + 1 + 5_000);
            for k in 0..=last {
                assert_eq!(map.get(&k, &guard), Some(&Hooked(value_of(k))), "key {k}");
            }
        }));
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(if outcome.is_ok() { 0 } else { 3 }) };
    }
    assert_eq!(map.len() as u64, last + 1);
    let status = common::fork::wait_within(forked, Duration::from_secs(60)).unwrap();
    assert!(succeeded(status), "the child failed ({status:#x})");
}

/// A thread the child does not have, stopped in a value's `Clone` in the middle of a
/// rebuild, holding the writer lock: the child takes the lock over, the insert that thread
/// was making never happened there (its half-built table is never seen), and the child's
/// writes rebuild the table again and find every entry once.
#[test]
fn a_forked_child_writes_a_flat_map_whose_rebuild_a_vanished_thread_was_cloning_for() {
    let map: Arc<RcuFlatMap<u64, Hooked>> = Arc::new(RcuFlatMap::new());
    for k in 0..STABLE {
        map.insert(k, Hooked(value_of(k)));
    }
    let before = map.len() as u64;
    let writer_map = map.clone();
    let last = fork_while_held(
        move |wait| {
            // The hook is the holder's: only its clones wait.
            let wait = Arc::clone(wait);
            ON_CLONE.with(|h| *h.borrow_mut() = Some(Box::new(move || wait())));
            let mut next = STABLE;
            insert_until_a_rebuild_runs(&writer_map, &mut next)
        },
        || {
            let len = map.len() as u64;
            assert!(len >= before, "entries lost: {len}");
            let guard = map.domain().read();
            let present: Vec<u64> = map.keys(&guard).copied().collect();
            drop(guard);
            for k in CHILD {
                map.insert(k, Hooked(value_of(k)));
            }
            assert_eq!(map.len() as u64, len + (CHILD.end - CHILD.start));
            let guard = map.domain().read();
            for k in present.into_iter().chain(CHILD) {
                assert_eq!(map.get(&k, &guard), Some(&Hooked(value_of(k))), "key {k}");
            }
            let keys: HashSet<u64> = map.keys(&guard).copied().collect();
            assert_eq!(keys.len(), map.len(), "a key yielded twice");
        },
    );
    assert_eq!(map.len() as u64, last + 1);
}

/// A thread of the parent inside `hold` (which blocks until told to go on), holding whatever
/// lock `hold` runs under, while the test forks: run `in_child` in the child, then let the
/// thread go on and return what it returned.
fn fork_while_held<R: Send + 'static>(
    hold: impl FnOnce(&Arc<dyn Fn() + Send + Sync>) -> R + Send + 'static,
    in_child: impl FnOnce(),
) -> R {
    let (inside, release) = (Arc::new(Barrier::new(2)), Arc::new(AtomicBool::new(false)));
    let holder = {
        let (inside, release) = (inside.clone(), release.clone());
        let wait: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            inside.wait();
            while !release.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        std::thread::spawn(move || hold(&wait))
    };
    inside.wait();
    let status = fork_within(Duration::from_secs(60), in_child);
    release.store(true, Ordering::Release);
    let held = holder.join().unwrap();
    let status = status.unwrap();
    assert!(succeeded(status), "the child failed ({status:#x})");
    held
}

/// `RcuCell`'s writer lock, held in an `update` closure by a thread the child does not have:
/// the child stores and updates; the update that thread was making never happened there.
#[test]
fn a_forked_child_writes_a_cell_whose_lock_a_vanished_thread_held() {
    let cell = Arc::new(RcuCell::new(1u64));
    let writer_cell = cell.clone();
    fork_while_held(
        move |wait| {
            writer_cell.update(|v| {
                wait();
                v + 1
            })
        },
        || {
            assert_eq!(*cell.read(), 1, "the vanished update happened");
            cell.update(|v| v + 10);
            assert_eq!(*cell.read(), 11);
            cell.store(7);
            assert_eq!(*cell.read(), 7);
        },
    );
    assert_eq!(*cell.read(), 2);
}

/// `RcuList`'s writer lock, held in an `update_first` closure by a thread the child does not
/// have: the child pushes at both ends, removes and counts.
#[test]
fn a_forked_child_writes_a_list_whose_lock_a_vanished_thread_held() {
    let list = Arc::new(RcuList::new());
    for v in 0..10u64 {
        list.push_back(v);
    }
    let writer_list = list.clone();
    let updated = fork_while_held(
        move |wait| {
            writer_list.update_first(
                |&v| v == 5,
                |&v| {
                    wait();
                    v + 100
                },
            )
        },
        || {
            list.push_back(10);
            list.push_front(100);
            assert!(list.remove_first(|&v| v == 0));
            assert_eq!(list.len(), 11);
            let guard = list.domain().read();
            let all: Vec<u64> = list.iter(&guard).copied().collect();
            assert_eq!(all, [100, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        },
    );
    assert!(updated);
}

/// `RcuList` pushed to and emptied by other threads at the fork: in the child, after its first
/// write (a push at the back, which lands after the last element), the list's count is its
/// length (a write stopped after linking a node but before counting it or moving the tail is
/// taken into account).
#[test]
fn a_forked_child_writes_a_list_its_parent_was_writing() {
    let list = Arc::new(RcuList::new());
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let (list, stop) = (list.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for v in 0..200 {
                        if v % 2 == 0 {
                            list.push_back(w * 1_000 + v);
                        } else {
                            list.push_front(w * 1_000 + v);
                        }
                    }
                    list.retain(|v| v % 3 == 0);
                    while list.remove_first(|_| true) {}
                }
            })
        })
        .collect();
    for round in 0..24u64 {
        child_round(round, Duration::from_secs(60), &stop, || {
            // The count is a snapshot that a write in progress at the fork may have left
            // behind; the first write in the child sets it again.
            list.push_back(u64::MAX);
            let guard = list.domain().read();
            let (count, last) = (list.iter(&guard).count(), list.iter(&guard).last());
            assert_eq!(last, Some(&u64::MAX), "the tail");
            assert_eq!(list.len(), count, "the count");
        });
        std::thread::sleep(Duration::from_millis(round % 5));
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
}

/// Where the forking write's user code forks: armed by the test's thread for one site of its
/// next write, and taken by the first call of that site on that thread.
mod fork_site {
    use std::cell::Cell;

    /// The key's `Eq`.
    pub(super) const EQ: u8 = 1;
    /// The key's `Drop`.
    pub(super) const DROP: u8 = 2;
    /// The write's closure.
    pub(super) const CLOSURE: u8 = 3;

    thread_local! {
        static ARMED: Cell<u8> = const { Cell::new(0) };
        static PID: Cell<libc::pid_t> = const { Cell::new(-1) };
    }

    pub(super) fn arm(site: u8) {
        ARMED.with(|a| a.set(site));
        PID.with(|p| p.set(-1));
    }

    /// Fork here if `site` is armed (once); the child goes on from here.
    pub(super) fn fork_if_armed(site: u8) {
        if ARMED.with(|a| a.get()) == site {
            ARMED.with(|a| a.set(0));
            // SAFETY: the child goes on with the test's write, checks the map and leaves with
            // `_exit` (see the test).
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            PID.with(|p| p.set(pid));
        }
    }

    /// The fork's pid after the write: 0 in the child, -1 if the site was never reached.
    pub(super) fn pid() -> libc::pid_t {
        PID.with(|p| p.get())
    }
}

/// A key whose `Eq` and `Drop` fork when its thread armed them (`fork_site`).
#[derive(Debug, Clone)]
struct ForkKey(u64);

impl std::hash::Hash for ForkKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl PartialEq for ForkKey {
    fn eq(&self, other: &Self) -> bool {
        fork_site::fork_if_armed(fork_site::EQ);
        self.0 == other.0
    }
}

impl Eq for ForkKey {}

impl Drop for ForkKey {
    fn drop(&mut self) {
        fork_site::fork_if_armed(fork_site::DROP);
    }
}

/// The key's value as the hash: keys that are equal modulo the table's bucket count share a
/// bucket, so that the writers below change the forking write's own bucket.
#[derive(Default, Clone)]
struct Identity(u64);

impl std::hash::Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0 << 8 | u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type ForkMap = RcuHashMap<ForkKey, u64, std::hash::BuildHasherDefault<Identity>>;

/// The key the forking writes use, and the keys of its bucket that the parent's writers churn.
const FORKING: u64 = 0;
const SAME_BUCKET: [u64; 6] = [1 << 20, 2 << 20, 3 << 20, 4 << 20, 5 << 20, 6 << 20];

/// The forking write of round `round`, from user code it runs: the key's `Eq`, the closures of
/// `remove_if`, `update` and `compute`, `retain`'s predicate, the drop of a key that
/// `try_insert` did not insert, and `update`'s closure again with a thread of the child writing
/// the map before the write goes on. Returns what the child checks afterwards: whether
/// `FORKING` is in the map, and with which value.
fn forking_write(map: &ForkMap, round: u64) -> Option<u64> {
    let m = map.pin();
    let before = m
        .get(&ForkKey(FORKING))
        .copied()
        .expect("FORKING is present");
    fork_site::arm(match round % SITES {
        0 => fork_site::EQ,
        5 => fork_site::DROP,
        _ => fork_site::CLOSURE,
    });
    match round % SITES {
        0 => {
            // Replaces FORKING: `Eq` runs on the key found in the bucket.
            m.insert(ForkKey(FORKING), before + 1);
            Some(before + 1)
        }
        1 => {
            let removed = m.remove_if(&ForkKey(FORKING), |_, _| {
                fork_site::fork_if_armed(fork_site::CLOSURE);
                true
            });
            assert_eq!(removed.map(|(_, v)| *v), Some(before));
            None
        }
        2 => {
            let new = m.update(&ForkKey(FORKING), |v| {
                fork_site::fork_if_armed(fork_site::CLOSURE);
                v + 2
            });
            assert_eq!(new, Some(&(before + 2)));
            Some(before + 2)
        }
        3 => {
            let _ = m.compute(ForkKey(FORKING), |entry| {
                fork_site::fork_if_armed(fork_site::CLOSURE);
                match entry {
                    Some((_, v)) => rcukit::map::Operation::<u64, ()>::Insert(v + 3),
                    None => rcukit::map::Operation::Insert(0),
                }
            });
            Some(before + 3)
        }
        4 => {
            drop(m);
            map.retain(|k, _| {
                fork_site::fork_if_armed(fork_site::CLOSURE);
                k.0 != FORKING
            });
            None
        }
        5 => {
            // The key not inserted is dropped before the write helps a resize.
            assert!(m.try_insert(ForkKey(FORKING), 0).is_err());
            Some(before)
        }
        _ => {
            // In the child, a thread of its own writes the map before the forking write goes
            // on: that thread repairs the map, and the write must not go on in the old tables
            // (where it would be lost) just because no repair is due any more.
            let mut started = false;
            let new = m.update(&ForkKey(FORKING), |v| {
                fork_site::fork_if_armed(fork_site::CLOSURE);
                if fork_site::pid() == 0 && !started {
                    started = true;
                    common::fork::on_a_thread(|| {
                        map.pin().insert(ForkKey(SAME_BUCKET[0]), 0);
                    });
                }
                v + 6
            });
            assert_eq!(new, Some(&(before + 6)));
            Some(before + 6)
        }
    }
}

/// The places [`forking_write`] forks from, one per round in turn.
const SITES: u64 = 7;

/// A fork from the user code of an `RcuHashMap` write (the key's `Eq` or `Drop`, the write's
/// closure, `retain`'s predicate) while two other threads write keys of the same bucket: the
/// forking write goes on in the child, where a lock of the bucket may be held by a thread the
/// child does not have. The child finishes the write, writes on and finds the map whole.
#[test]
fn a_child_forked_from_a_map_writes_user_code_finishes_the_write() {
    let map: Arc<ForkMap> = Arc::new(ForkMap::with_hasher(Default::default()));
    map.pin().insert(ForkKey(FORKING), 1);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (map, stop) = (map.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let k = SAME_BUCKET[(i as usize + w * 3) % SAME_BUCKET.len()];
                    let m = map.pin();
                    m.insert(ForkKey(k), i);
                    m.update(&ForkKey(k), |v| v + 1);
                    m.remove(&ForkKey(k));
                    i += 1;
                }
            })
        })
        .collect();
    for round in 0..(8 * SITES) {
        if map.pin().get(&ForkKey(FORKING)).is_none() {
            map.pin().insert(ForkKey(FORKING), round);
        }
        let expected = forking_write(&map, round);
        let pid = fork_site::pid();
        assert!(pid >= 0, "round {round}: the user code forked");
        if pid == 0 {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let m = map.pin();
                assert_eq!(
                    m.get(&ForkKey(FORKING)).copied(),
                    expected,
                    "the forking write"
                );
                for &k in &SAME_BUCKET {
                    m.insert(ForkKey(k), k);
                    assert_eq!(m.update(&ForkKey(k), |v| v + 1), Some(&(k + 1)));
                }
                for &k in &SAME_BUCKET[..3] {
                    assert_eq!(m.remove(&ForkKey(k)), Some(&(k + 1)));
                }
                drop(m);
                let guard = map.domain().read();
                let keys: HashSet<u64> = map.keys(&guard).map(|k| k.0).collect();
                assert_eq!(keys.len(), map.len(), "every entry once, and counted");
                assert!(SAME_BUCKET[3..].iter().all(|k| keys.contains(k)));
                assert!(!SAME_BUCKET[..3].iter().any(|k| keys.contains(k)));
            }));
            // SAFETY: leaving the child without running the parent's destructors.
            unsafe { libc::_exit(if outcome.is_ok() { 0 } else { 3 }) };
        }
        let status = match common::fork::wait_within(pid, Duration::from_secs(60)) {
            Ok(status) => status,
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                panic!("round {round} (fork site {}): {e}", round % SITES);
            }
        };
        assert!(
            succeeded(status),
            "round {round} (fork site {}): the child failed ({status:#x})",
            round % SITES
        );
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
}

/// A thread that is online in a QSBR domain forks, while another online reader and a writer
/// that rebuilds a flat map on that domain run beside it. The child's only thread is the
/// forking one, still registered and online: it reads with its registration, announces
/// quiescent states, writes the map (rebuilds retire old tables into the domain while it is
/// online), goes offline and waits for grace periods (the vanished reader must not hold them
/// back), comes online again, and registers a thread of its own. A third thread of the parent
/// registers and unregisters all along, so some forks fall in the middle of a registration.
/// In the parent the registration goes on as before.
#[test]
fn a_child_forked_by_an_online_qsbr_thread_keeps_its_registration() {
    let qsbr = Arc::new(Qsbr::new());
    let flat: Arc<FlatQsbr> = Arc::new(RcuFlatMap::new_in(qsbr.clone()));
    for k in 0..STABLE {
        flat.insert(k, value_of(k));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (flat, stop) = (flat.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for k in CHURN {
                    flat.insert(k, value_of(k));
                }
                for k in CHURN {
                    flat.remove(&k);
                }
            }
        })
    };
    let reader = {
        let (flat, qsbr, stop) = (flat.clone(), qsbr.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut me = qsbr.register();
            let mut k = 0;
            while !stop.load(Ordering::Relaxed) {
                assert_eq!(flat.get(&k, &me), Some(&value_of(k)));
                k = (k + 1) % STABLE;
                if k % 64 == 0 {
                    me.quiescent_state();
                }
            }
        })
    };
    let churner = {
        let (flat, qsbr, stop) = (flat.clone(), qsbr.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let me = qsbr.register();
                assert_eq!(flat.get(&7, &me), Some(&value_of(7)));
            }
        })
    };
    let mut me = qsbr.register();
    for round in 0..16u64 {
        // Online, with a value borrowed from the map through the registration, at the fork.
        let held = flat.get(&(round % STABLE), &me).copied();
        let (flat, qsbr) = (&*flat, &*qsbr);
        child_round(round, Duration::from_secs(60), &stop, || {
            assert!(
                me.is_online(),
                "the registration came through the fork offline"
            );
            assert_eq!(held, Some(value_of(round % STABLE)));
            for k in 0..STABLE {
                assert_eq!(flat.get(&k, &me), Some(&value_of(k)), "lost {k}");
            }
            me.quiescent_state();
            for k in CHILD {
                flat.insert(k, value_of(k));
            }
            for k in CHILD.step_by(2) {
                assert_eq!(flat.remove(&k), Some(value_of(k)));
            }
            for k in CHILD {
                let expected = (k % 2 == 1).then(|| value_of(k));
                assert_eq!(flat.get(&k, &me).copied(), expected, "child key {k}");
            }
            me.quiescent_state();
            // Offline, grace periods end without the parent's reader.
            me.offline_while(|| {
                qsbr.synchronize();
                qsbr.synchronize_expedited();
                qsbr.barrier();
            });
            assert_eq!(flat.get(&1, &me), Some(&value_of(1)));
            me.quiescent_state();
            common::fork::on_a_thread(|| {
                let mut other = qsbr.register();
                assert_eq!(flat.get(&2, &other), Some(&value_of(2)));
                other.quiescent_state();
            });
            me.offline_while(|| qsbr.synchronize());
        });
        me.quiescent_state();
        std::thread::sleep(Duration::from_millis(round * 7 % 20));
    }
    // The parent's registration still works: quiescent states, then a grace period offline.
    for k in 0..STABLE {
        assert_eq!(flat.get(&k, &me), Some(&value_of(k)));
    }
    me.offline_while(|| qsbr.synchronize());
    drop(me);
    stop.store(true, Ordering::Relaxed);
    for t in [writer, reader, churner] {
        t.join().unwrap();
    }
    qsbr.synchronize();
}

/// An element whose `Drop` pushes onto `LIST` (as `hostile.rs` allows), counting its drops.
struct PushesOnDrop;

static LIST: std::sync::OnceLock<RcuList<Option<PushesOnDrop>>> = std::sync::OnceLock::new();
static PUSHES_DROPPED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Drop for PushesOnDrop {
    fn drop(&mut self) {
        PUSHES_DROPPED.fetch_add(1, Ordering::SeqCst);
        LIST.get().unwrap().push_back(None);
    }
}

/// A child forked in a list's write closure, whose first use of the list is a write from that
/// closure (refused: the surviving thread holds the lock), given a value whose `Drop` writes
/// the list: the refusal drops the value first, so the child gets a panic it can catch. (The
/// early refusal did not trust the lock's record before the child's repair, and the value,
/// dropped while the later refusal unwound, wrote the list: an abort.)
#[test]
fn a_child_forked_in_a_list_write_refuses_a_write_from_it_cleanly() {
    let list = LIST.get_or_init(RcuList::new);
    list.push_back(None);
    let mut pid = 0;
    list.update_first(
        |_| true,
        |_| {
            // SAFETY: the child runs the rest of this closure and leaves with `_exit`.
            pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                let refused = std::panic::catch_unwind(|| list.push_back(Some(PushesOnDrop)));
                let dropped = PUSHES_DROPPED.load(Ordering::SeqCst) == 1;
                // SAFETY: leaving the child without running the parent's destructors.
                unsafe { libc::_exit(if refused.is_err() && dropped { 0 } else { 3 }) };
            }
            None
        },
    );
    let status = common::fork::wait_within(pid, Duration::from_secs(60)).unwrap();
    assert!(succeeded(status), "the child failed ({status:#x})");
}
