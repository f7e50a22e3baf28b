//! `RcuHashMap`: the API against `std::collections::HashMap`, every domain configuration
//! (`common::each_config`), drops, concurrency across grow/shrink cycles, and user code that
//! panics, re-enters the map or runs more than once.

mod common;

use proptest::prelude::*;
use rcukit::map::{Compute, Operation};
use rcukit::{Rcu, RcuHashMap};
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Scale for Miri: small sizes there, real ones otherwise.
const fn scale(normal: usize, miri: usize) -> usize {
    if cfg!(miri) {
        miri
    } else {
        normal
    }
}

/// The default maximum load factor: entries per bucket past which the table grows.
const MAX_LOAD: f64 = 4.0;

/// A map on `rcu` (as `common::each_config` hands it).
type Map<'r, K, V> = RcuHashMap<K, V, RandomState, &'r Rcu>;

fn domain() -> Arc<Rcu> {
    Arc::new(Rcu::builder().build().unwrap())
}

#[test]
fn the_basic_api_behaves_like_a_hash_map() {
    common::each_config(|rcu| {
        let map: Map<String, u32> = RcuHashMap::with_domain(rcu);
        assert!(map.is_empty());
        let g = rcu.read();
        assert_eq!(map.insert("a".into(), 1, &g), None);
        assert_eq!(map.insert("b".into(), 2, &g), None);
        assert_eq!(map.insert("a".into(), 10, &g), Some(&1), "the old value");
        assert_eq!(map.len(), 2);
        assert_eq!(map.get("a", &g), Some(&10)); // Borrow<str> lookup
        assert_eq!(map.get_key_value("b", &g), Some((&"b".to_string(), &2)));
        assert!(map.contains_key("b", &g));
        assert!(!map.contains_key("c", &g));
        let mut all: Vec<_> = map.iter(&g).map(|(k, v)| (k.clone(), *v)).collect();
        all.sort();
        assert_eq!(all, [("a".into(), 10), ("b".into(), 2)]);
        let mut keys: Vec<_> = map.keys(&g).cloned().collect();
        keys.sort();
        assert_eq!(keys, ["a", "b"]);
        let mut values: Vec<_> = map.values(&g).copied().collect();
        values.sort();
        assert_eq!(values, [2, 10]);
        assert_eq!(map.update("a", |v| v + 1, &g), Some(&11));
        assert_eq!(
            map.update("zz", |_| unreachable!("absent keys do not call f"), &g),
            None
        );
        assert_eq!(map.remove("b", &g), Some(&2));
        assert_eq!(map.remove("b", &g), None);
        assert_eq!(map.remove_entry("a", &g), Some((&"a".to_string(), &11)));
        assert_eq!(map.try_insert("a".into(), 1, &g), Ok(&1));
        let err = map.try_insert("a".into(), 2, &g).unwrap_err();
        assert_eq!((err.current, err.not_inserted), (&1, 2));
        assert_eq!(map.get_or_insert("a".into(), 5, &g), &1);
        assert_eq!(map.get_or_insert_with("n".into(), || 7, &g), &7);
        assert_eq!(map.remove_if("n", |_, v| *v > 100, &g), None);
        assert_eq!(
            map.remove_if("n", |_, v| *v == 7, &g).map(|e| *e.1),
            Some(7)
        );
        assert_eq!(map.update_or_insert("c".into(), |v| v + 1, 0, &g), &0);
        assert_eq!(map.update_or_insert("c".into(), |v| v + 1, 0, &g), &1);
        assert_eq!(map.get_cloned("c"), Some(1));
        drop(g);
        for i in 0..100 {
            map.pin().insert(format!("k{i}"), i);
        }
        assert_eq!(map.retain(|k, v| k == "a" || v % 2 == 0), 51);
        assert_eq!(map.len(), 51);
        map.clear();
        assert!(map.is_empty());
        assert_eq!(map.pin().iter().count(), 0);
    });
}

#[test]
fn compute_inserts_updates_removes_and_aborts() {
    common::each_config(|rcu| {
        let map: Map<u32, u32> = RcuHashMap::with_domain(rcu);
        let g = rcu.read();
        let bump = |e: Option<(&u32, &u32)>| match e {
            Some((_, v)) => Operation::<u32, ()>::Insert(v + 1),
            None => Operation::Insert(1),
        };
        assert_eq!(map.compute(7, bump, &g), Compute::Inserted(&7, &1));
        assert_eq!(
            map.compute(7, bump, &g),
            Compute::Updated {
                old: (&7, &1),
                new: (&7, &2)
            }
        );
        let abort = |_: Option<(&u32, &u32)>| Operation::<u32, &str>::Abort("no");
        assert_eq!(map.compute(7, abort, &g), Compute::Aborted("no"));
        let remove = |_: Option<(&u32, &u32)>| Operation::<u32, ()>::Remove;
        assert_eq!(map.compute(7, remove, &g), Compute::Removed(&7, &2));
        assert_eq!(map.compute(7, remove, &g), Compute::Absent);
        assert!(map.is_empty());
        let pinned = map.pin();
        assert_eq!(pinned.compute(1, bump), Compute::Inserted(&1, &1));
        assert_eq!(pinned.update_or_insert_with(1, |v| v * 10, || 0), &10);
        assert_eq!(pinned.get(&1), Some(&10));
    });
}

#[test]
fn a_pinned_handle_offers_the_maps_value_taking_writes() {
    common::each_config(|rcu| {
        let map: Map<u32, u32> = RcuHashMap::with_domain(rcu);
        let pinned = map.pin();
        assert_eq!(pinned.get_or_insert(1, 10), &10);
        assert_eq!(
            pinned.get_or_insert(1, 20),
            &10,
            "present: the value given is dropped"
        );
        assert_eq!(pinned.update_or_insert(2, |v| v + 1, 5), &5);
        assert_eq!(pinned.update_or_insert(2, |v| v + 1, 5), &6);
        assert_eq!(pinned.remove_entry(&2), Some((&2, &6)));
        assert_eq!(pinned.remove_entry(&2), None);
        assert_eq!((pinned.len(), pinned.get(&1)), (1, Some(&10)));
    });
}

#[test]
fn the_whole_map_traits_hasher_clone_eq_extend() {
    common::each_config(|rcu| {
        let mut a: Map<u32, String> = RcuHashMap::with_domain(rcu);
        a.extend((0..50).map(|i| (i, i.to_string())));
        (&a).extend([(50, "50".to_string()), (0, "zero".to_string())]);
        assert_eq!(a.len(), 51);
        let b = a.clone();
        assert!(a == b);
        assert_eq!(b.get_cloned(&0).as_deref(), Some("zero"));
        assert_eq!(b.hasher().hash_one(7u32), a.hasher().hash_one(7u32));
        b.pin().insert(1, "one".into());
        assert!(a != b, "a different value");
        b.pin().insert(1, "1".into());
        assert!(a == b);
        b.pin().remove(&1);
        assert!(a != b, "a missing key");
    });
}

#[test]
fn exclusive_access_gives_mutable_values_and_owned_entries() {
    let mut map: RcuHashMap<u32, u32> = (0..100).map(|i| (i, i)).collect();
    *map.get_mut(&7).unwrap() = 700;
    assert!(map.get_mut(&1000).is_none());
    for (_, v) in map.iter_mut() {
        *v += 1;
    }
    for (_, v) in &mut map {
        *v += 1;
    }
    let mut entries: Vec<_> = map.into_iter().collect();
    entries.sort();
    assert_eq!(entries.len(), 100);
    assert_eq!(entries[7], (7, 702));
    assert_eq!(entries[8], (8, 10));
}

/// Duplicates met by `collect` are dropped at once: nobody can see the map yet, so there is
/// nothing to wait for. (They used to be retired into the domain.)
#[test]
fn from_iterator_drops_replaced_duplicates_at_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let map: RcuHashMap<u32, Counted> = (0..100)
        .map(|i| (i % 10, Counted(i as u64, Arc::clone(&drops))))
        .collect();
    assert_eq!(
        drops.load(SeqCst),
        90,
        "the 90 replaced values, dropped in collect"
    );
    assert_eq!(map.len(), 10);
    assert_eq!(map.get_cloned_id(&3), Some(93));
}

/// Replaced duplicates whose `Drop` panics: `collect` lets the first panic go on, and every
/// value, replaced or in the map, is dropped once (the replaced ones of the same batch and
/// the map being built too). (The drops stopped at the first panic and leaked the rest.)
#[test]
fn from_iterator_drops_every_value_when_replaced_duplicates_panic() {
    let drops = Arc::new(AtomicUsize::new(0));
    let made = 40;
    let collected = catch_unwind(AssertUnwindSafe(|| {
        (0..made)
            .map(|i| (i % 10, Loud(i < 20, Arc::clone(&drops))))
            .collect::<RcuHashMap<u32, Loud>>()
    }));
    assert!(collected.is_err(), "the first panic goes on");
    assert_eq!(
        drops.load(SeqCst),
        made as usize,
        "every value dropped once"
    );
}

/// A key whose `Hash` panics in the middle of a `collect`, after pairs of the same batch had
/// replaced others: every value made is dropped once, the replaced duplicates too, and when
/// their own drops panic as well the process goes on (the first panic is the one that comes
/// out). (The duplicates were freed only when the batch's inserts returned, and leaked when one
/// of them panicked.)
#[test]
fn from_iterator_whose_key_panics_in_hash_drops_every_value_once() {
    #[derive(PartialEq, Eq)]
    struct FailsAt999(u32);
    impl std::hash::Hash for FailsAt999 {
        fn hash<H: Hasher>(&self, state: &mut H) {
            assert!(self.0 != 999, "the Hash of key 999");
            self.0.hash(state);
        }
    }
    for duplicates_panic in [false, true] {
        let drops = Arc::new(AtomicUsize::new(0));
        let value = |loud: bool| Loud(loud && duplicates_panic, Arc::clone(&drops));
        // 20 keys twice (the first 20 values replaced), the failing key, 5 more: one batch.
        let pairs = (0..40)
            .map(|i| (FailsAt999(i % 20), value(i < 20)))
            .chain([(FailsAt999(999), value(false))])
            .chain((0..5).map(|i| (FailsAt999(100 + i), value(false))));
        let collected = catch_unwind(AssertUnwindSafe(|| pairs.collect::<RcuHashMap<_, _>>()));
        let payload = collected.err().expect("the panic goes on");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"the Hash of key 999"));
        assert_eq!(drops.load(SeqCst), 46, "every value dropped once");
    }
}

/// An iterator given to `extend` that panics: the pairs it gave before are in the map, as a
/// loop of single inserts would have left them, and every value is dropped once. (`extend`
/// takes pairs a batch at a time, outside its guards; the batch taken when the iterator
/// panicked was dropped, not inserted: up to 255 pairs the iterator had handed over were
/// lost.)
#[test]
fn extend_from_an_iterator_that_panics_keeps_the_pairs_it_gave() {
    let drops = Arc::new(AtomicUsize::new(0));
    let mut map: RcuHashMap<u32, Counted> = RcuHashMap::new();
    // `made` pairs, then a panic: past the first batch (256 pairs), and with duplicates (keys
    // below `made - keys` twice), so that the pairs of the interrupted batch replace entries
    // too.
    let (made, keys) = (scale(700, 300) as u32, scale(600, 260) as u32);
    let extended = catch_unwind(AssertUnwindSafe(|| {
        map.extend((0..made + 300).map(|i| {
            assert!(i < made, "the iterator fails at pair {i}");
            (i % keys, Counted(i as u64, Arc::clone(&drops)))
        }))
    }));
    assert!(extended.is_err(), "the iterator's panic goes on");
    assert_eq!(map.len(), keys as usize);
    for key in 0..keys {
        let last = if key < made - keys { key + keys } else { key };
        assert_eq!(map.get_cloned_id(&key), Some(last as u64), "key {key}");
    }
    // The same through a shared reference, as another thread's writes would go on.
    let more = scale(290, 30) as u32;
    let extended = catch_unwind(AssertUnwindSafe(|| {
        (&map).extend((1000..1000 + more + 10).map(|i| {
            assert!(i < 1000 + more, "the iterator fails at pair {i}");
            (i, Counted(i as u64, Arc::clone(&drops)))
        }))
    }));
    assert!(extended.is_err());
    assert_eq!(map.len(), (keys + more) as usize);
    drop(map);
    Rcu::global().barrier();
    assert_eq!(
        drops.load(SeqCst),
        (made + more) as usize,
        "every value made, dropped once"
    );
}

/// An iterator that is not fused (it yields again after a `None`): `extend` and `collect`
/// stop at its first `None`, as std's maps and a loop of inserts do. (They asked it for a
/// next batch after a short one, and inserted what it yielded after its `None`.)
#[test]
fn extend_and_collect_stop_at_the_first_none() {
    /// Yields 0..3, then `None`, then 3..6, then `None` for ever.
    struct Twice(u32);
    impl Iterator for Twice {
        type Item = (u32, u32);
        fn next(&mut self) -> Option<(u32, u32)> {
            self.0 += 1;
            match self.0 {
                1..=3 => Some((self.0 - 1, 0)),
                5..=7 => Some((self.0 - 2, 0)),
                _ => None,
            }
        }
    }
    let mut map: RcuHashMap<u32, u32> = RcuHashMap::new();
    map.extend(Twice(0));
    assert_eq!(map.len(), 3);
    (&map).extend(Twice(0));
    assert_eq!(map.len(), 3);
    let collected: RcuHashMap<u32, u32> = Twice(0).collect();
    assert_eq!(collected.len(), 3);
    let mut std_map = HashMap::new();
    std_map.extend(Twice(0));
    assert_eq!(std_map.len(), 3, "std's extend, for comparison");
}

trait CountedId {
    fn get_cloned_id(&self, key: &u32) -> Option<u64>;
}

impl CountedId for RcuHashMap<u32, Counted> {
    fn get_cloned_id(&self, key: &u32) -> Option<u64> {
        self.get(key, &self.domain().read()).map(|c| c.0)
    }
}

#[test]
fn the_builder_refuses_bad_load_factors_with_the_setting_named() {
    let err = RcuHashMap::builder()
        .max_load_factor(0.0)
        .build::<u32, u32>()
        .unwrap_err();
    assert_eq!(err.setting(), Some("max_load_factor"));
    let err = RcuHashMap::builder()
        .max_load_factor(1.0)
        .min_load_factor(0.6)
        .build::<u32, u32>()
        .unwrap_err();
    assert_eq!(err.setting(), Some("min_load_factor"));
    assert!(err.to_string().contains("quarter"), "{err}");
    // Just under half the maximum: a table just grown sat at the shrink limit, and a few
    // writes back and forth resized it on every other write.
    let err = RcuHashMap::builder()
        .max_load_factor(16.0)
        .min_load_factor(7.99)
        .build::<u32, u32>()
        .unwrap_err();
    assert_eq!(err.setting(), Some("min_load_factor"));
    assert!(RcuHashMap::builder()
        .max_load_factor(16.0)
        .min_load_factor(4.0)
        .build::<u32, u32>()
        .is_ok());
    let err = RcuHashMap::builder()
        .min_load_factor(f32::NAN)
        .build::<u32, u32>()
        .unwrap_err();
    assert_eq!(err.setting(), Some("min_load_factor"));
}

#[test]
fn a_capacity_past_the_largest_table_is_refused_and_changes_nothing() {
    // The builder says so in its error; `with_capacity` and `reserve` panic with "capacity
    // overflow" (as std's maps do) instead of asking the system for a table of 2^40 buckets,
    // which aborts the process when it is refused.
    let err = RcuHashMap::builder()
        .capacity(usize::MAX)
        .build::<u32, u32>()
        .unwrap_err();
    assert_eq!(err.setting(), Some("capacity"));
    assert!(err.to_string().contains("capacity overflow"), "{err}");
    common::support::assert_panics_with("capacity overflow", || {
        RcuHashMap::<u64, u64>::with_capacity(usize::MAX)
    });
    let map: RcuHashMap<u64, u64> = RcuHashMap::new();
    for k in 0..100 {
        map.pin().insert(k, k * 10);
    }
    let capacity = map.buckets();
    for additional in [usize::MAX, usize::MAX / 2, 1 << 60] {
        common::support::assert_panics_with("capacity overflow", || map.reserve(additional));
        assert_eq!((map.len(), map.buckets()), (100, capacity));
    }
    // No floor was left behind: the map still shrinks to fit.
    for k in 0..90 {
        map.pin().remove(&k);
    }
    map.shrink_to_fit();
    assert!(map.buckets() <= capacity);
    let pinned = map.pin();
    assert!((90..100).all(|k| pinned.get(&k) == Some(&(k * 10))));
}

#[test]
#[should_panic(expected = "read with a Guard of domain")]
fn a_guard_of_another_domain_is_refused() {
    let own = domain();
    let map: RcuHashMap<u32, u32, _, _> = RcuHashMap::with_domain(Arc::clone(&own));
    let g = Rcu::global().read();
    let _ = map.get(&1, &g);
}

#[test]
#[should_panic(expected = "read with a Guard of domain")]
fn a_writer_refuses_a_guard_of_another_domain() {
    let own = domain();
    let map: RcuHashMap<u32, u32, _, _> = RcuHashMap::with_domain(Arc::clone(&own));
    let g = Rcu::global().read();
    let _ = map.insert(1, 1, &g);
}

#[test]
fn the_table_grows_and_shrinks_with_the_load() {
    common::each_config(|rcu| {
        let map: Map<u64, u64> = RcuHashMap::with_domain(rcu);
        assert_eq!(map.buckets(), 16);
        let n = scale(20_000, 300) as u64;
        for i in 0..n {
            map.pin().insert(i, i);
        }
        let grown = map.buckets();
        assert!(grown as f64 >= n as f64 / MAX_LOAD / 2.0, "grew to {grown}");
        for i in 0..n {
            assert!(map.pin().remove(&i).is_some());
        }
        assert_eq!(map.len(), 0);
        // Removals help the shrink along; a few more writes finish it.
        for i in 0..64 {
            map.pin().insert(i, i);
            map.pin().remove(&i);
        }
        assert_eq!(map.buckets(), 16, "shrank back");
    });
    let big: RcuHashMap<u64, u64> = RcuHashMap::with_capacity(1000);
    let floor = big.buckets();
    assert!(floor as f64 * MAX_LOAD >= 1000.0, "{floor} buckets");
    big.pin().insert(1, 1);
    big.pin().remove(&1);
    assert_eq!(big.buckets(), floor, "never below the capacity asked for");
    // `capacity` counts entries, as std's does: at least what was asked for.
    for load in [0.5f32, 1.0, 3.0, 4.0, 7.5, 16.0] {
        for n in [0, 1, 5, 100, 1000, 4097, 100_000] {
            let map = RcuHashMap::builder()
                .max_load_factor(load)
                .min_load_factor(0.0)
                .capacity(n)
                .build::<u64, u64>()
                .unwrap();
            let c = map.capacity();
            assert!(c >= n, "made for {n} at load {load}: capacity {c}");
            assert_eq!(c, (map.buckets() as f64 * f64::from(load)) as usize);
            map.reserve(3 * n);
            assert!(
                map.capacity() >= 3 * n,
                "reserved {}: {}",
                3 * n,
                map.buckets()
            );
        }
    }
}

#[test]
fn reserve_grows_at_once_and_shrink_to_fit_lets_go() {
    common::each_config(|rcu| {
        let map: Map<u64, u64> = RcuHashMap::with_domain(rcu);
        let room = scale(10_000, 1_000);
        map.reserve(room);
        let reserved = map.buckets();
        assert!(
            reserved as f64 * MAX_LOAD >= room as f64,
            "{reserved} buckets"
        );
        for i in 0..100 {
            map.pin().insert(i, i);
            map.pin().remove(&(i / 2));
        }
        assert_eq!(map.buckets(), reserved, "no shrink below the reserved room");
        map.shrink_to_fit();
        let fit = map.buckets();
        assert!(
            fit < reserved && fit as f64 * MAX_LOAD >= map.len() as f64,
            "{fit}"
        );
        let pinned = map.pin();
        assert_eq!(pinned.len(), 50);
        assert!((50..100).all(|k| pinned.get(&k) == Some(&k)));
    });
}

/// `reserve` and `shrink_to_fit` beside writers whose own inserts and removes start resizes:
/// a resize under way can have every bucket claimed by writers that have not finished their
/// runs (preempted, with more threads than cores). `reserve` must still return with its room,
/// and the floor must hold afterwards, however the resizes it raced end.
#[test]
fn reserve_and_shrink_to_fit_racing_resizes_started_by_writers_keep_their_promises() {
    let map: RcuHashMap<u64, u64, RandomState, Arc<Rcu>> = RcuHashMap::with_domain(domain());
    let room = scale(200_000, 2_000);
    let wanted = (room as f64 / MAX_LOAD).ceil() as usize;
    let stop = AtomicBool::new(false);
    let short = thread::scope(|s| {
        let _stop = common::support::StopOnDrop(&stop);
        for w in 1..=4u64 {
            let (map, stop) = (&map, &stop);
            s.spawn(move || {
                let mut x = w * 7919;
                while !stop.load(Relaxed) {
                    // Fills and drains of 2,000-12,000 keys: each crosses several resizes.
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    let n = scale(2_000, 20) as u64 + (x >> 33) % scale(10_000, 20) as u64;
                    for k in (0..n).take_while(|_| !stop.load(Relaxed)) {
                        map.pin().insert(w << 40 | k, k);
                    }
                    for k in 0..n {
                        map.pin().remove(&(w << 40 | k));
                    }
                }
            });
        }
        // The first `reserve` that returned short, if any (checked once the writers stopped).
        let mut short = None;
        for round in 0..scale(100, 3) {
            map.reserve(room);
            let buckets = map.buckets();
            if buckets < wanted {
                short = Some((round, buckets, map.len()));
                break;
            }
            map.shrink_to_fit();
            // Time for the writers' own resizes to start again.
            thread::sleep(Duration::from_millis(2));
        }
        map.reserve(room);
        stop.store(true, Relaxed);
        short
    });
    assert_eq!(
        short, None,
        "reserve({room}) returned short: (round, buckets, entries)"
    );
    // The writers are gone, and each emptied what it filled: the last `reserve`'s floor holds
    // through every resize they started after it.
    assert!(map.is_empty());
    assert!(map.buckets() >= wanted, "{} buckets", map.buckets());
    map.shrink_to_fit();
    assert!(map.buckets() < wanted, "{} buckets", map.buckets());
}

/// Entries carried through resizes of several doublings at once, both ways, and then grown
/// one doubling at a time from what the big shrink left (a move into a larger table finds a
/// node's bucket from the index bits its bucket keeps, or else reads the node): every key is
/// found, with its value, after each step.
#[test]
fn entries_are_found_after_resizes_of_many_doublings_both_ways_then_single_grows() {
    common::each_config(|rcu| {
        let map: Map<u64, u64> = RcuHashMap::with_domain(rcu);
        let n = scale(3_000, 300) as u64;
        let all_there = |map: &Map<u64, u64>, keys: std::ops::Range<u64>, step: &str| {
            let pinned = map.pin();
            for k in keys {
                assert_eq!(pinned.get(&k), Some(&(k * 3)), "key {k} after {step}");
            }
        };
        for k in 0..n {
            map.pin().insert(k, k * 3);
        }
        map.reserve(n as usize * 64); // several doublings at once
        all_there(&map, 0..n, "a reserve");
        for k in n / 8..n {
            map.pin().remove(&k);
        }
        map.shrink_to_fit(); // several halvings at once
        all_there(&map, 0..n / 8, "a shrink_to_fit");
        let fit = map.buckets();
        // Checked every few inserts, so before each misplaced node is next read (which would
        // put it right again).
        for k in n / 8..n * 4 {
            map.pin().insert(k, k * 3);
            if k % 256 == 0 {
                all_there(&map, 0..k + 1, "single grows");
            }
        }
        assert!(map.buckets() >= fit * 16, "grew one doubling at a time");
        all_there(&map, 0..n * 4, "the grows");
    });
}

/// A hasher that sends every key to a few buckets: long chains, many collisions.
#[derive(Clone, Default)]
struct Clumpy;
struct ClumpyHasher(u64);
impl BuildHasher for Clumpy {
    type Hasher = ClumpyHasher;
    fn build_hasher(&self) -> ClumpyHasher {
        ClumpyHasher(0)
    }
}
impl Hasher for ClumpyHasher {
    fn finish(&self) -> u64 {
        self.0 % 5
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.wrapping_mul(31).wrapping_add(*b as u64);
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u16, u32),
    TryInsert(u16, u32),
    GetOrInsert(u16, u32),
    Remove(u16),
    RemoveIfEven(u16),
    Update(u16),
    Count(u16),
    RemoveIfOdd(u16),
    UpdateOrInsert(u16, u32),
    Get(u16),
    RetainEven,
    Clear,
    Reserve(u16),
    ShrinkToFit,
}

fn op() -> impl Strategy<Value = Op> {
    let k = || 0u16..300;
    prop_oneof![
        10 => (k(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        3 => (k(), any::<u32>()).prop_map(|(k, v)| Op::TryInsert(k, v)),
        3 => (k(), any::<u32>()).prop_map(|(k, v)| Op::GetOrInsert(k, v)),
        6 => k().prop_map(Op::Remove),
        2 => k().prop_map(Op::RemoveIfEven),
        3 => k().prop_map(Op::Update),
        3 => k().prop_map(Op::Count),
        2 => k().prop_map(Op::RemoveIfOdd),
        2 => (k(), any::<u32>()).prop_map(|(k, v)| Op::UpdateOrInsert(k, v)),
        4 => k().prop_map(Op::Get),
        1 => Just(Op::RetainEven),
        1 => Just(Op::Clear),
        1 => (0u16..2000).prop_map(Op::Reserve),
        1 => Just(Op::ShrinkToFit),
    ]
}

/// One operation on the map and on the model; every answer must agree.
fn apply<S: BuildHasher>(map: &RcuHashMap<u16, u32, S>, model: &mut HashMap<u16, u32>, op: &Op) {
    let g = map.domain().read();
    match *op {
        Op::Insert(k, v) => assert_eq!(map.insert(k, v, &g).copied(), model.insert(k, v)),
        Op::TryInsert(k, v) => {
            let got = map.try_insert(k, v, &g).copied().map_err(|e| *e.current);
            let want = match model.get(&k) {
                Some(&cur) => Err(cur),
                None => Ok(*model.entry(k).or_insert(v)),
            };
            assert_eq!(got, want);
        }
        Op::GetOrInsert(k, v) => {
            assert_eq!(map.get_or_insert(k, v, &g), model.entry(k).or_insert(v))
        }
        Op::Remove(k) => assert_eq!(map.remove(&k, &g).copied(), model.remove(&k)),
        Op::RemoveIfEven(k) => {
            let want = model.get(&k).filter(|v| *v % 2 == 0).copied();
            if want.is_some() {
                model.remove(&k);
            }
            let got = map.remove_if(&k, |_, v| v % 2 == 0, &g).map(|(_, v)| *v);
            assert_eq!(got, want);
        }
        Op::Update(k) => {
            let want = model.get_mut(&k).map(|v| {
                *v = v.wrapping_add(1);
                *v
            });
            assert_eq!(map.update(&k, |v| v.wrapping_add(1), &g).copied(), want);
        }
        Op::Count(k) => {
            let c = map.compute(
                k,
                |e| Operation::<u32, ()>::Insert(e.map_or(1, |(_, v)| v.wrapping_add(1))),
                &g,
            );
            let m = model.entry(k).or_insert(0);
            *m = m.wrapping_add(1);
            let now = match c {
                Compute::Inserted(_, v) | Compute::Updated { new: (_, v), .. } => *v,
                other => panic!("{other:?}"),
            };
            assert_eq!(now, *m);
        }
        Op::RemoveIfOdd(k) => {
            let c = map.compute(
                k,
                |e| match e {
                    Some((_, v)) if v % 2 == 1 => Operation::Remove,
                    Some(_) => Operation::Abort(()),
                    None => Operation::Remove,
                },
                &g,
            );
            match model.get(&k).copied() {
                Some(v) if v % 2 == 1 => {
                    assert_eq!(c, Compute::Removed(&k, &v));
                    model.remove(&k);
                }
                Some(_) => assert_eq!(c, Compute::Aborted(())),
                None => assert_eq!(c, Compute::Absent),
            }
        }
        Op::UpdateOrInsert(k, v) => {
            let m = model.entry(k).and_modify(|x| *x ^= 1).or_insert(v);
            assert_eq!(map.update_or_insert_with(k, |x| x ^ 1, || v, &g), m);
        }
        Op::Get(k) => {
            assert_eq!(map.get(&k, &g), model.get(&k));
            assert_eq!(map.get_cloned(&k).as_ref(), model.get(&k));
        }
        Op::RetainEven => {
            let before = model.len();
            model.retain(|_, v| *v % 2 == 0);
            assert_eq!(map.retain(|_, v| *v % 2 == 0), before - model.len());
        }
        Op::Clear => {
            model.clear();
            map.clear();
        }
        Op::Reserve(n) => map.reserve(n as usize),
        Op::ShrinkToFit => map.shrink_to_fit(),
    }
}

fn check_against_std<S: BuildHasher>(map: &RcuHashMap<u16, u32, S>, ops: &[Op]) {
    let mut model = HashMap::new();
    for op in ops {
        apply(map, &mut model, op);
        assert_eq!(map.len(), model.len());
    }
    let g = Rcu::global().read();
    let mut seen: Vec<_> = map.iter(&g).map(|(k, v)| (*k, *v)).collect();
    seen.sort();
    let mut expected: Vec<_> = model.into_iter().collect();
    expected.sort();
    assert_eq!(seen, expected);
}

proptest! {
    #![proptest_config(common::support::proptest_config(64))]

    #[test]
    fn sequences_of_operations_match_std_hashmap(ops in proptest::collection::vec(op(), 0..scale(400, 30))) {
        check_against_std(&RcuHashMap::new(), &ops);
    }

    #[test]
    fn sequences_with_colliding_hashes_match_std_hashmap(ops in proptest::collection::vec(op(), 0..scale(300, 30))) {
        check_against_std(&RcuHashMap::with_hasher(Clumpy), &ops);
    }
}

/// Counts drops, to check that every value is dropped exactly once.
#[derive(Debug)]
struct Counted(u64, Arc<AtomicUsize>);
impl Drop for Counted {
    fn drop(&mut self) {
        self.1.fetch_add(1, SeqCst);
    }
}

/// Counts drops, and panics in its drop when told to.
struct Loud(bool, Arc<AtomicUsize>);
impl Drop for Loud {
    fn drop(&mut self) {
        self.1.fetch_add(1, SeqCst);
        if self.0 {
            panic!("a loud value's drop");
        }
    }
}

/// A key or value that counts its drop and then always panics; keys compare and hash by
/// number.
struct Bomb(u64, Arc<AtomicUsize>);
impl Drop for Bomb {
    fn drop(&mut self) {
        self.1.fetch_add(1, SeqCst);
        panic!("bomb {} exploded", self.0);
    }
}
impl PartialEq for Bomb {
    fn eq(&self, other: &Bomb) -> bool {
        self.0 == other.0
    }
}
impl Eq for Bomb {}
impl std::hash::Hash for Bomb {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.hash(h)
    }
}

#[test]
fn every_value_is_dropped_exactly_once() {
    common::each_config(|rcu| {
        let drops = Arc::new(AtomicUsize::new(0));
        let made = scale(2000, 60);
        {
            let map: Map<usize, Counted> = RcuHashMap::with_domain(rcu);
            let c = |i: usize| Counted(i as u64, Arc::clone(&drops));
            for i in 0..made {
                map.pin().insert(i % (made / 2), c(i)); // half of them replace
            }
            for i in 0..made / 10 {
                map.pin().remove(&i);
            }
            let pinned = map.pin();
            pinned.update(&(made / 2 - 1), |v| Counted(v.0 + 1, Arc::clone(&v.1)));
            // A make that loses nothing: the key is present, so it never runs.
            pinned.get_or_insert_with(made / 2 - 1, || unreachable!());
            // A refused insert drops the value it did not insert (at once).
            let refused = pinned.try_insert(made / 2 - 1, c(0)).unwrap_err();
            drop(refused);
            drop(pinned);
            map.retain(|k, _| k % 3 != 0);
            rcu.barrier();
            let live = map.len();
            assert_eq!(
                drops.load(SeqCst),
                made + 2 - live,
                "retired values dropped once"
            );
            // The rest goes with the map.
        }
        rcu.barrier();
        assert_eq!(drops.load(SeqCst), made + 2);
    });
}

/// A value on a page of its own: alignment far above what the allocator gives by default.
#[repr(align(4096))]
#[derive(Clone, Debug, PartialEq)]
struct PageAligned(u64);

/// A zero-sized value that counts its drops (and nothing else: it has no bytes).
struct ZeroSized(&'static AtomicUsize);

impl Drop for ZeroSized {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

#[test]
fn zero_sized_and_page_aligned_entries_are_stored_found_and_dropped_once() {
    let rcu = domain();
    // Zero-sized keys and values: one entry at most, and it behaves as any other.
    let unit: RcuHashMap<(), (), RandomState, Arc<Rcu>> = RcuHashMap::with_domain(rcu.clone());
    assert_eq!(unit.pin().insert((), ()), None);
    assert_eq!(unit.pin().insert((), ()), Some(&()));
    assert_eq!(
        (unit.len(), unit.pin().get(&()), unit.pin().iter().count()),
        (1, Some(&()), 1)
    );
    assert_eq!(unit.pin().remove(&()), Some(&()));
    unit.reserve(scale(1000, 50));
    unit.shrink_to_fit();
    assert!(unit.is_empty() && unit.pin().get(&()).is_none());

    // Values aligned to 4 KiB stay aligned through inserts, resizes, clones and removes.
    let n = scale(3000, 40) as u64;
    let aligned: RcuHashMap<u64, PageAligned, RandomState, Arc<Rcu>> =
        RcuHashMap::with_domain(rcu.clone());
    for i in 0..n {
        aligned.pin().insert(i, PageAligned(i));
    }
    let copy = aligned.clone();
    for map in [&aligned, &copy] {
        let pinned = map.pin();
        for i in 0..n {
            let v = pinned.get(&i).unwrap();
            assert_eq!((v.0, v as *const PageAligned as usize % 4096), (i, 0));
        }
    }
    assert!(aligned == copy);
    for i in 0..n {
        assert_eq!(aligned.pin().remove(&i), Some(&PageAligned(i)));
    }
    assert!(aligned.is_empty());

    // Zero-sized values with drops: each one made is dropped once, through the removes,
    // the replacements and the map's own drop.
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    let rounds = scale(20, 3);
    {
        let map: RcuHashMap<u8, ZeroSized, RandomState, Arc<Rcu>> =
            RcuHashMap::with_domain(rcu.clone());
        for round in 0..rounds {
            for k in 0..=u8::MAX {
                map.pin().insert(k, ZeroSized(&DROPS));
            }
            if round % 2 == 0 {
                for k in 0..=u8::MAX {
                    assert!(map.pin().remove(&k).is_some());
                }
            }
        }
    }
    rcu.barrier();
    assert_eq!(DROPS.load(SeqCst), rounds * 256);
}

#[test]
fn clear_retires_and_into_iter_hands_values_out() {
    let own = domain();
    let drops = Arc::new(AtomicUsize::new(0));
    let map = RcuHashMap::with_domain(Arc::clone(&own));
    for i in 0..100 {
        map.pin().insert(i, Counted(i, Arc::clone(&drops)));
    }
    map.clear();
    own.barrier();
    assert_eq!(drops.load(SeqCst), 100);
    for i in 0..10 {
        map.pin().insert(i, Counted(i, Arc::clone(&drops)));
    }
    let taken: Vec<_> = map.into_iter().collect();
    assert_eq!(drops.load(SeqCst), 100);
    drop(taken);
    assert_eq!(drops.load(SeqCst), 110);
}

#[test]
fn values_removed_or_replaced_under_a_guard_stay_valid_until_it_leaves() {
    common::each_config(|rcu| {
        let drops = Arc::new(AtomicUsize::new(0));
        let map: Map<u32, Counted> = RcuHashMap::with_domain(rcu);
        map.pin().insert(1, Counted(1, Arc::clone(&drops)));
        map.pin().insert(2, Counted(2, Arc::clone(&drops)));
        let g = rcu.read();
        let found = map.get(&1, &g).unwrap();
        let removed = map.remove(&1, &g).unwrap();
        let replaced = map.insert(2, Counted(20, Arc::clone(&drops)), &g).unwrap();
        map.pin().insert(3, Counted(3, Arc::clone(&drops)));
        assert_eq!((found.0, removed.0, replaced.0), (1, 1, 2));
        assert_eq!(drops.load(SeqCst), 0, "not freed under the guard");
        drop(g);
        rcu.barrier();
        assert_eq!(drops.load(SeqCst), 2);
        // A pinned handle keeps what it removed until it drops (it is not even retired
        // before: no grace period could free it).
        let pinned = map.pin();
        let old = pinned.remove(&3).unwrap();
        assert_eq!((old.0, drops.load(SeqCst)), (3, 2));
        drop(pinned);
        rcu.barrier();
        assert_eq!(drops.load(SeqCst), 3);
    });
}

/// Readers look up keys present throughout while a writer pushes the table through grow/shrink
/// cycles; every lookup must find them, with their value, and every iteration each once.
#[test]
fn keys_present_throughout_are_always_found_across_grow_and_shrink_cycles() {
    common::each_config(|rcu| {
        let map: Map<u64, u64> = RcuHashMap::with_domain(rcu);
        let stable = scale(500, 8) as u64;
        for k in 0..stable {
            map.pin().insert(k, k * 3);
        }
        let stop = AtomicBool::new(false);
        let lookups = AtomicUsize::new(0);
        thread::scope(|s| {
            let _stop = common::support::StopOnDrop(&stop);
            for r in 0..2 {
                let (map, stop, lookups) = (&map, &stop, &lookups);
                s.spawn(move || {
                    let mut k = r as u64;
                    let mut n = 0;
                    // At least one batch, however late the scheduler starts this thread.
                    loop {
                        let g = map.domain().read();
                        for _ in 0..64 {
                            k = (k + 7) % stable;
                            assert_eq!(map.get(&k, &g), Some(&(k * 3)), "key {k} missed");
                            n += 1;
                        }
                        if n % 2048 == 0 {
                            let mut seen: Vec<u64> =
                                map.keys(&g).copied().filter(|k| *k < stable).collect();
                            seen.sort_unstable();
                            assert_eq!(seen, (0..stable).collect::<Vec<_>>(), "iteration");
                        }
                        drop(g);
                        if stop.load(Relaxed) {
                            break;
                        }
                    }
                    lookups.fetch_add(n, Relaxed);
                });
            }
            let churn = scale(20_000, 200) as u64;
            let mut largest = 0;
            for cycle in 0..scale(2, 1) {
                for k in 0..churn {
                    map.pin().insert(stable + k, cycle as u64);
                }
                largest = largest.max(map.buckets());
                for k in 0..churn {
                    assert!(map.pin().remove(&(stable + k)).is_some());
                }
                for k in 0..64 {
                    map.pin().insert(u64::MAX - k, 0);
                    map.pin().remove(&(u64::MAX - k));
                }
                assert!(map.buckets() <= 2048, "shrank back: {}", map.buckets());
            }
            stop.store(true, Relaxed);
            let entries = (stable + churn) as f64;
            assert!(
                largest as f64 >= entries / MAX_LOAD / 2.0,
                "grew to {largest}"
            );
            assert!(
                largest >= 32 * scale(64, 2),
                "grew through several resizes: {largest}"
            );
        });
        assert!(lookups.load(Relaxed) > 0);
        assert_eq!(map.len(), stable as usize);
    });
}

/// Tables large enough to be mappings of their own (4 MiB and more) are unmapped only after
/// the readers that may see them are done: readers that hold their guards across a `reserve`
/// into such a table and a `shrink_to_fit` out of it keep finding every key (a table unmapped
/// too early is a fault, not a stale read).
#[test]
fn readers_outlive_large_tables_grown_into_and_shrunk_out_of() {
    common::each_config(|rcu| {
        let map: Map<u64, u64> = RcuHashMap::with_domain(rcu);
        let stable = 300u64;
        for k in 0..stable {
            map.pin().insert(k, k + 1);
        }
        let stop = AtomicBool::new(false);
        thread::scope(|s| {
            let _stop = common::support::StopOnDrop(&stop);
            for r in 0..2 {
                let (map, stop) = (&map, &stop);
                s.spawn(move || {
                    let mut k = r;
                    while !stop.load(Relaxed) {
                        let g = map.domain().read();
                        for _ in 0..256 {
                            k = (k + 13) % stable;
                            assert_eq!(map.get(&k, &g), Some(&(k + 1)), "key {k} missed");
                        }
                        assert_eq!(map.keys(&g).count(), stable as usize, "iteration");
                    }
                });
            }
            // At least 150,000 buckets of 64 bytes: a mapping (under Miri, where every table
            // is a boxed slice, 500).
            let (room, large) = (scale(600_000, 2_000), scale(131_072, 512));
            for _ in 0..scale(4, 2) {
                map.reserve(room);
                assert!(map.buckets() >= large, "{}", map.buckets());
                map.shrink_to_fit();
                assert!(map.buckets() < large, "{}", map.buckets());
            }
            stop.store(true, Relaxed);
        });
        assert_eq!(map.len(), stable as usize);
    });
}

/// Values replaced under readers: a reader sees one consistent version of each entry.
#[test]
fn values_replaced_under_readers_are_whole_versions() {
    common::each_config(|rcu| {
        let map: Map<u64, (u64, u64, Vec<u64>)> = RcuHashMap::with_domain(rcu);
        let keys = scale(64, 4) as u64;
        for k in 0..keys {
            map.pin().insert(k, (k, 0u64, vec![k; 4]));
        }
        let stop = AtomicBool::new(false);
        thread::scope(|s| {
            let _stop = common::support::StopOnDrop(&stop);
            let reader = s.spawn(|| {
                let mut k = 0;
                while !stop.load(Relaxed) {
                    let g = map.domain().read();
                    let (key, version, payload) = map.get(&k, &g).expect("always present");
                    assert_eq!(*key, k);
                    assert_eq!(payload, &vec![k + version; 4], "a torn or freed value");
                    k = (k + 1) % keys;
                }
            });
            let writers: Vec<_> = (0..2)
                .map(|w| {
                    let map = &map;
                    s.spawn(move || {
                        for round in 0..scale(4_000, 20) as u64 {
                            let k = (round * 2 + w) % keys;
                            let p = map.pin();
                            match round % 3 {
                                0 => {
                                    let _ =
                                        p.update(&k, |(k, v, _)| (*k, v + 1, vec![k + v + 1; 4]));
                                }
                                1 => {
                                    let _ = p.insert(k, (k, round, vec![k + round; 4]));
                                }
                                _ => {
                                    let _ = p.compute(k, |e| {
                                        let (_, v, _) = e.expect("present").1;
                                        Operation::<_, ()>::Insert((k, v + 2, vec![k + v + 2; 4]))
                                    });
                                }
                            }
                        }
                    })
                })
                .collect();
            for w in writers {
                w.join().unwrap();
            }
            stop.store(true, Relaxed);
            reader.join().unwrap();
        });
    });
}

/// Concurrent read-modify-writes of one key serialize: no increment is lost, whichever of
/// `update`, `compute` and `update_or_insert_with` makes it.
#[test]
fn concurrent_read_modify_writes_of_one_key_lose_nothing() {
    common::each_config(|rcu| {
        let map: Map<u32, u64> = RcuHashMap::with_domain(rcu);
        map.pin().insert(0, 0);
        let per = scale(3_000, 30);
        thread::scope(|s| {
            for t in 0..3 {
                let map = &map;
                s.spawn(move || {
                    for i in 0..per {
                        let p = map.pin();
                        match i % 3 {
                            0 => assert!(p.update(&0, |v| v + 1).is_some()),
                            1 => {
                                let _ = p.compute(0, |e| {
                                    Operation::<u64, ()>::Insert(e.map_or(1, |(_, v)| v + 1))
                                });
                            }
                            _ => {
                                let _ = p.update_or_insert_with(0, |v| v + 1, || 1);
                            }
                        }
                        // Other keys in the same and other buckets keep writers busy.
                        p.insert(1 + (t * per + i) as u32 % 512, 0);
                    }
                });
            }
        });
        assert_eq!(map.get_cloned(&0), Some(3 * per as u64));
    });
}

/// The entry count never runs below the entries present: an insert counts its entry before
/// it unlocks the bucket, so a removal of that entry (which locks the bucket after it)
/// always counts down after the insert counted up. Counting after the unlock let a removal
/// that ran in between take the count below zero, to `usize::MAX`: `len()` said so, and the
/// write that saw it started a needless grow. Inserters and removers of one key, many more
/// threads than cores, so that the scheduler preempts writers at every point.
#[test]
fn the_count_never_drops_below_the_entries_present() {
    let rcu = domain();
    let map: Map<u64, u64> = RcuHashMap::with_domain(&*rcu);
    let threads = scale(8, 1);
    // At most one entry is present; each remover may have unlinked one not yet counted down.
    let bound = 1 + threads;
    let wrapped = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_millis(scale(3_000, 50) as u64);
    let check = |map: &Map<u64, u64>| {
        if map.len() > bound {
            wrapped.store(true, Relaxed);
        }
    };
    thread::scope(|s| {
        for _ in 0..threads {
            let (map, wrapped, check) = (&map, &wrapped, &check);
            s.spawn(move || {
                let mut i = 0u64;
                while Instant::now() < deadline && !wrapped.load(Relaxed) {
                    let p = map.pin();
                    match i % 3 {
                        0 => drop(p.insert(0, i)),
                        1 => drop(p.try_insert(0, i)),
                        _ => drop(p.update_or_insert_with(0, |v| v + 1, || i)),
                    }
                    drop(p);
                    i += 1;
                    check(map);
                }
            });
            s.spawn(move || {
                let mut i = 0u64;
                while Instant::now() < deadline && !wrapped.load(Relaxed) {
                    let p = map.pin();
                    match i % 2 {
                        0 => drop(p.remove(&0)),
                        _ => drop(p.compute(0, |_| Operation::<u64, ()>::Remove)),
                    }
                    drop(p);
                    i += 1;
                    check(map);
                }
            });
        }
    });
    assert!(!wrapped.load(Relaxed), "len() ran past the entries present");
    assert!(map.len() <= 1);
}

/// Racing `try_insert`, `get_or_insert_with` and `update_or_insert_with` of fresh keys: each
/// key gets exactly one winner, every thread agrees on its value, and each maker runs at
/// most once per call.
#[test]
fn racing_inserts_of_absent_keys_agree_on_one_winner() {
    common::each_config(|rcu| {
        let map: Map<u32, usize> = RcuHashMap::with_domain(rcu);
        let keys = scale(2_000, 20) as u32;
        let made = AtomicUsize::new(0);
        let wins: Vec<AtomicUsize> = (0..keys).map(|_| AtomicUsize::new(0)).collect();
        let seen: Vec<Mutex<Vec<usize>>> = (0..keys).map(|_| Mutex::new(Vec::new())).collect();
        thread::scope(|s| {
            for t in 0..3usize {
                let (map, made, wins, seen) = (&map, &made, &wins, &seen);
                s.spawn(move || {
                    for k in 0..keys {
                        let p = map.pin();
                        let v = match (k as usize + t) % 3 {
                            0 => match p.try_insert(k, t) {
                                Ok(v) => {
                                    wins[k as usize].fetch_add(1, SeqCst);
                                    *v
                                }
                                Err(e) => *e.current,
                            },
                            1 => *p.get_or_insert_with(k, || {
                                made.fetch_add(1, SeqCst);
                                t
                            }),
                            _ => *p.update_or_insert_with(
                                k,
                                |v| *v,
                                || {
                                    made.fetch_add(1, SeqCst);
                                    t
                                },
                            ),
                        };
                        seen[k as usize].lock().unwrap().push(v);
                    }
                });
            }
        });
        let g = map.domain().read();
        for k in 0..keys {
            let v = *map.get(&k, &g).unwrap();
            let seen = seen[k as usize].lock().unwrap();
            assert!(seen.iter().all(|&s| s == v), "key {k}: {seen:?} vs {v}");
            assert!(wins[k as usize].load(SeqCst) <= 1);
        }
        assert!(
            made.load(SeqCst) <= 2 * keys as usize,
            "a maker ran more than once"
        );
    });
}

/// Keys whose `Hash` gives a new value on every call and whose `Eq` says "equal" to every key,
/// to none (not even itself) or the truth, written (by every keyed write, `Extend`, `clear`,
/// `retain`, `reserve` and `shrink_to_fit`), read and iterated by four threads at once: the
/// map cannot find such keys again, but it must stay sound. Every value made is dropped
/// exactly once, and an iteration yields exactly the entries the map counts.
#[test]
fn keys_whose_hash_and_eq_lie_leave_the_map_sound() {
    use std::hash::Hash;
    use std::sync::atomic::AtomicU64;
    static NOISE: AtomicU64 = AtomicU64::new(1);
    static MODE: AtomicUsize = AtomicUsize::new(0);
    #[derive(Clone, Copy)]
    struct Liar(u64);
    impl Hash for Liar {
        fn hash<H: Hasher>(&self, h: &mut H) {
            let noise = NOISE.fetch_add(0x9E37_79B9_7F4A_7C15, Relaxed);
            match MODE.load(Relaxed) % 3 {
                0 => noise.hash(h),                  // a new hash on every call
                1 => (self.0 ^ (noise & 3)).hash(h), // one of four hashes per key
                _ => (noise & 1).hash(h),            // two hashes for all keys
            }
        }
    }
    impl PartialEq for Liar {
        fn eq(&self, other: &Self) -> bool {
            match MODE.load(Relaxed) / 3 {
                0 => self.0 == other.0,
                1 => true,
                _ => false,
            }
        }
    }
    impl Eq for Liar {}

    let per_thread = scale(3_000, 40) as u64;
    for mode in 0..9 {
        MODE.store(mode, Relaxed);
        let rcu = domain();
        let drops = Arc::new(AtomicUsize::new(0));
        let made = AtomicUsize::new(0);
        {
            let map = RcuHashMap::<Liar, Counted, RandomState, _>::with_domain(Arc::clone(&rcu));
            thread::scope(|s| {
                for t in 0..4 {
                    let (map, drops, made) = (&map, &drops, &made);
                    s.spawn(move || {
                        let value = || {
                            made.fetch_add(1, SeqCst);
                            Counted(t, Arc::clone(drops))
                        };
                        for i in 0..per_thread {
                            let key = Liar((i * 7 + t) % 500);
                            let pinned = map.pin();
                            match (i + t) % 16 {
                                0..=2 => drop(pinned.insert(key, value())),
                                3 => drop(pinned.remove(&key)),
                                4 => drop(pinned.get(&key)),
                                5 => drop(pinned.try_insert(key, value())),
                                6 => drop(pinned.get_or_insert_with(key, value)),
                                7 => drop(pinned.compute(key, |entry| match entry {
                                    Some(_) if i % 2 == 0 => Operation::<_, ()>::Remove,
                                    _ => Operation::Insert(value()),
                                })),
                                8 => drop(pinned.update(&key, |_| value())),
                                9 => drop(pinned.update_or_insert_with(key, |_| value(), value)),
                                10 => drop(pinned.remove_if(&key, |_, v| v.0 == t)),
                                11 if i % 50 == 11 => {
                                    drop(pinned);
                                    (&*map).extend((0..20).map(|j| (Liar(j), value())));
                                }
                                12 if i % 300 == 12 => map.clear(),
                                13 if i % 100 == 13 => {
                                    map.reserve(2_000);
                                    map.shrink_to_fit();
                                }
                                14 if i % 200 == 14 => drop(map.retain(|k, _| k.0 % 5 != 0)),
                                _ => assert!(pinned.iter().count() <= (8 * per_thread) as usize),
                            }
                        }
                    });
                }
            });
            assert_eq!(map.pin().iter().count(), map.len(), "mode {mode}");
        }
        rcu.barrier();
        assert_eq!(drops.load(SeqCst), made.load(SeqCst), "mode {mode}");
    }
}

/// A value whose `Drop` writes to the map it lived in, keys whose `Eq` reads it, closures
/// that write to the map they run in: user code re-entering the map must neither deadlock
/// nor corrupt it.
#[test]
fn user_code_that_re_enters_the_map_does_not_deadlock() {
    type Slot = Arc<Mutex<Option<Arc<RcuHashMap<Key, Reentrant>>>>>;
    struct Reentrant {
        map: Slot,
        id: u32,
    }
    impl Drop for Reentrant {
        fn drop(&mut self) {
            // The slot's lock is released before the map is used: a drop run inside that
            // insert may be another `Reentrant`'s.
            let map = self.map.lock().unwrap().clone();
            if let Some(map) = map {
                if self.id < 1000 {
                    let reentrant = Reentrant {
                        map: Arc::clone(&self.map),
                        id: 1000 + self.id,
                    };
                    let p = map.pin();
                    p.insert(Key(10_000 + self.id, None), reentrant);
                    p.remove(&Key(10_000 + self.id, None));
                }
            }
        }
    }
    /// A key whose `Eq` looks something up in the map.
    #[derive(Clone)]
    struct Key(u32, Option<Arc<RcuHashMap<u32, u32>>>);
    impl PartialEq for Key {
        fn eq(&self, other: &Key) -> bool {
            if let Some(side) = &self.1 {
                let p = side.pin();
                p.insert(self.0, other.0);
                assert!(p.get(&self.0).is_some());
            }
            self.0 == other.0
        }
    }
    impl Eq for Key {}
    impl std::hash::Hash for Key {
        fn hash<H: Hasher>(&self, h: &mut H) {
            self.0.hash(h)
        }
    }

    let body = thread::spawn(|| {
        let slot = Arc::new(Mutex::new(None));
        let map = Arc::new(RcuHashMap::new());
        *slot.lock().unwrap() = Some(Arc::clone(&map));
        let side = Arc::new(RcuHashMap::new());
        for i in 0..scale(300, 20) as u32 {
            let key = Key(i % 50, Some(Arc::clone(&side)));
            let r = |id| Reentrant {
                map: Arc::clone(&slot),
                id,
            };
            map.pin().insert(key.clone(), r(i));
            map.pin().update(&key, |v| r(v.id + 1));
            // Closures that write to the map they run in (other keys; same bucket or not).
            // Only the first run writes: a closure that changes its own bucket on every run
            // would make every run's decision stale, and the map would ask it forever.
            let mut first_run = true;
            map.pin().compute(key.clone(), |e| {
                if std::mem::take(&mut first_run) {
                    map.pin().insert(Key(5000 + i, None), r(5000));
                }
                Operation::<_, ()>::Insert(r(e.map_or(0, |(_, v)| v.id)))
            });
            map.pin().get_or_insert_with(Key(6000 + i, None), || {
                map.pin().insert(Key(6000 + i, None), r(6000)); // the same key: theirs wins
                r(6001)
            });
            assert_eq!(
                map.pin().get(&Key(6000 + i, None)).map(|v| v.id),
                Some(6000)
            );
            map.pin()
                .remove_if(&key, |_, _| map.pin().contains_key(&Key(5000 + i, None)));
        }
        map.retain(|k, _| k.0 % 2 == 0);
        Rcu::global().barrier();
        *slot.lock().unwrap() = None; // break the cycle
        map.clear();
        Rcu::global().barrier();
    });
    // A deadlock here is a test that does not end (no time limit: a loaded machine may be slow).
    body.join().unwrap();
}

/// Closures that resize the map they run in (`reserve`, which moves every bucket at once, and
/// `shrink_to_fit`) while the write that called them is between its walk and its lock: each
/// write lands once, in whatever table is current; and a `reserve` past the largest table
/// panics, leaving the map as it was and usable.
#[test]
fn closures_that_reserve_and_shrink_their_own_map_land_each_write_once() {
    let map: RcuHashMap<u64, u64> = RcuHashMap::new();
    let n = scale(3_000, 60) as u64;
    for i in 0..n {
        map.pin().get_or_insert_with(i, || {
            match i % 100 {
                0 => map.reserve(scale(50_000, 500)),
                50 => map.shrink_to_fit(),
                _ => {}
            }
            i
        });
        map.pin().update(&i, |v| {
            if i % 7 == 0 {
                map.shrink_to_fit();
            }
            v + 1
        });
    }
    assert_eq!(map.len(), n as usize);
    for i in 0..n {
        assert_eq!(map.pin().get(&i).copied(), Some(i + 1));
    }
    let refused = catch_unwind(AssertUnwindSafe(|| map.reserve(usize::MAX)));
    assert!(refused.is_err(), "capacity overflow");
    assert_eq!(map.len(), n as usize);
    assert_eq!(map.pin().insert(n, 0), None);
    assert_eq!(map.pin().remove(&0).copied(), Some(1));
}

/// Panicking user code (update, compute, remove_if and retain closures, makers, `Hash`, `Eq`)
/// leaves the map as it was: no lock held, nothing half-linked, nothing leaked.
#[test]
fn panics_in_user_code_leave_the_map_unchanged() {
    #[derive(PartialEq, Eq, Debug, Clone)]
    struct Touchy(u32);
    impl std::hash::Hash for Touchy {
        fn hash<H: Hasher>(&self, h: &mut H) {
            assert!(self.0 != 666, "hash of 666");
            self.0.hash(h)
        }
    }
    common::each_config(|rcu| {
        let map: Map<Touchy, String> = RcuHashMap::with_domain(rcu);
        map.pin().insert(Touchy(1), "one".into());
        let boom = |f: &dyn Fn()| assert!(catch_unwind(AssertUnwindSafe(f)).is_err());
        boom(&|| {
            let _ = map.pin().update(&Touchy(1), |_| panic!("boom"));
        });
        boom(&|| {
            let _ = map
                .pin()
                .compute(Touchy(1), |_| -> Operation<String, ()> { panic!("boom") });
        });
        boom(&|| {
            let _ = map
                .pin()
                .compute(Touchy(2), |_| -> Operation<String, ()> { panic!("boom") });
        });
        boom(&|| {
            let _ = map.pin().remove_if(&Touchy(1), |_, _| panic!("boom"));
        });
        boom(&|| {
            let _ = map.pin().get_or_insert_with(Touchy(3), || panic!("boom"));
        });
        boom(&|| {
            let _ = map
                .pin()
                .update_or_insert_with(Touchy(1), |_| panic!("boom"), String::new);
        });
        boom(&|| {
            let _ = map.pin().insert(Touchy(666), "x".into());
        });
        boom(&|| {
            let _ = map.retain(|_, _| panic!("boom"));
        });
        // Still fully usable.
        assert_eq!(
            map.pin()
                .insert(Touchy(1), "uno".into())
                .map(String::as_str),
            Some("one")
        );
        map.pin().insert(Touchy(2), "two".into());
        assert_eq!(map.get_cloned(&Touchy(1)).as_deref(), Some("uno"));
        assert_eq!(map.len(), 2);
    });
}

/// A closure that must run again: its first run changes the key's bucket (another key of the
/// same hash class), so the map discards that run's decision and asks again with the newest
/// entry. The value of the discarded run is dropped, not leaked, and not published.
#[test]
fn a_closure_whose_bucket_changed_runs_again_with_the_newest_entry() {
    common::each_config(|rcu| {
        let map = RcuHashMap::builder()
            .hasher(Clumpy)
            .domain(rcu)
            .build::<u32, Counted>()
            .unwrap();
        let drops = Arc::new(AtomicUsize::new(0));
        let c = |n| Counted(n, Arc::clone(&drops));
        map.pin().insert(0, c(0));
        let mut runs = Vec::new();
        let p = map.pin();
        let out = p.compute(0, |e| {
            runs.push(e.map(|(_, v)| v.0));
            if runs.len() == 1 {
                // Every key lands in one of 5 buckets: this changes key 0's chain or not;
                // a write of key 0 itself surely does.
                map.pin().insert(0, c(100));
            }
            Operation::<_, ()>::Insert(c(runs.len() as u64 * 1000))
        });
        assert!(matches!(
            out,
            Compute::Updated {
                new: (_, Counted(2000, _)),
                ..
            }
        ));
        assert_eq!(
            runs,
            [Some(0), Some(100)],
            "the second run saw the newest entry"
        );
        drop(p);
        rcu.barrier();
        // Dropped: the first run's value (discarded), 0 and 100 (replaced).
        assert_eq!(drops.load(SeqCst), 3);
        drop(map);
        assert_eq!(drops.load(SeqCst), 4);
    });
}

/// A key whose `Eq` writes the map: every comparison the walk of a keyed write makes bumps a
/// counter kept in the map itself, at most `budget` times (then it only compares, so that a
/// write that would retry for ever ends instead of hanging the run).
mod eq_writes {
    use rcukit::RcuHashMap;
    use std::cell::{Cell, RefCell};
    use std::hash::{BuildHasher, Hash, Hasher};
    use std::sync::Arc;

    /// Every key hashes alike: one bucket holds them all, so a write of any key changes the
    /// bucket of every other.
    #[derive(Clone, Default)]
    pub(crate) struct OneBucket;

    pub(crate) struct Zero;

    impl Hasher for Zero {
        fn finish(&self) -> u64 {
            0
        }
        fn write(&mut self, _: &[u8]) {}
    }

    impl BuildHasher for OneBucket {
        type Hasher = Zero;
        fn build_hasher(&self) -> Zero {
            Zero
        }
    }

    pub(crate) type KeyMap = RcuHashMap<Key, u64, OneBucket>;

    /// The counter's key.
    pub(crate) const COUNTER: Key = Key(u64::MAX);

    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Key(pub(crate) u64);

    impl Hash for Key {
        fn hash<H: Hasher>(&self, state: &mut H) {
            state.write_u64(self.0);
        }
    }

    thread_local! {
        /// The map a comparison counts itself in, and how many more times it may.
        static COUNT_IN: RefCell<Option<(Arc<KeyMap>, u32)>> = const { RefCell::new(None) };
        static COMPARING: Cell<bool> = const { Cell::new(false) };
    }

    /// Count comparisons in `map` (at most `budget` of them) while `f` runs.
    pub(crate) fn counting<R>(map: &Arc<KeyMap>, budget: u32, f: impl FnOnce() -> R) -> R {
        COUNT_IN.with(|c| *c.borrow_mut() = Some((Arc::clone(map), budget)));
        let r = f();
        COUNT_IN.with(|c| *c.borrow_mut() = None);
        r
    }

    impl PartialEq for Key {
        fn eq(&self, other: &Key) -> bool {
            if !COMPARING.with(|c| c.replace(true)) {
                let map = COUNT_IN.with(|c| match &mut *c.borrow_mut() {
                    Some((map, left)) if *left > 0 => {
                        *left -= 1;
                        Some(Arc::clone(map))
                    }
                    _ => None,
                });
                if let Some(map) = map {
                    map.pin().update_or_insert(COUNTER, |n| n + 1, 1);
                }
                COMPARING.with(|c| c.set(false));
            }
            self.0 == other.0
        }
    }

    impl Eq for Key {}
}

/// A key whose `Eq` writes the key's own bucket on every comparison makes every attempt of a
/// keyed write stale: each write (not only the read-modify-writes) panics with the cause once
/// 64 attempts in a row were undone that way, instead of retrying for ever, and the map stays
/// usable. An `Eq` that writes another map's bucket lets every write complete. (Before
/// writes watched the walk, each of these calls retried until the comparisons' budget ran
/// out, and with no budget for ever, its memory growing with every attempt.)
#[test]
fn a_key_whose_eq_writes_its_own_bucket_panics_instead_of_running_for_ever() {
    use eq_writes::{counting, Key, KeyMap, COUNTER};
    use rcukit::map::Operation;
    common::support::watchdog(Duration::from_secs(120), || {
        let map = Arc::new(KeyMap::with_hasher(eq_writes::OneBucket));
        map.pin().insert(Key(1), 1);
        map.pin().insert(COUNTER, 0);
        type Call = Box<dyn Fn(&KeyMap)>;
        let calls: Vec<(&str, Call)> = vec![
            (
                "insert",
                Box::new(|m| assert!(m.pin().insert(Key(1), 2).is_some())),
            ),
            (
                "insert",
                Box::new(|m| assert!(m.pin().insert(Key(2), 2).is_none())),
            ),
            (
                "try_insert",
                Box::new(|m| assert!(m.pin().try_insert(Key(1), 2).is_err())),
            ),
            (
                "get_or_insert",
                Box::new(|m| assert_eq!(m.pin().get_or_insert(Key(3), 3), &3)),
            ),
            (
                "remove",
                Box::new(|m| assert!(m.pin().remove(&Key(1)).is_some())),
            ),
            (
                "remove",
                Box::new(|m| assert!(m.pin().remove(&Key(9)).is_none())),
            ),
            (
                "remove_entry",
                Box::new(|m| assert!(m.pin().remove_entry(&Key(1)).is_some())),
            ),
            (
                "remove_if",
                Box::new(|m| assert!(m.pin().remove_if(&Key(1), |_, _| true).is_some())),
            ),
            (
                "update",
                Box::new(|m| assert!(m.pin().update(&Key(1), |v| v + 1).is_some())),
            ),
            (
                "compute",
                Box::new(|m| {
                    let pinned = m.pin();
                    let done = pinned.compute(Key(1), |_| Operation::<u64, ()>::Insert(5));
                    assert!(matches!(done, Compute::Updated { .. }));
                }),
            ),
        ];
        for (what, call) in &calls {
            let payload = catch_unwind(AssertUnwindSafe(|| counting(&map, 10_000, || call(&map))))
                .expect_err(what);
            let msg = common::support::panic_message(payload);
            assert!(
                msg.contains(&format!("RcuHashMap::{what}:")) && msg.contains("run for ever"),
                "{what}: {msg}"
            );
        }
        // Usable, and holding what it held (each panicking call changed nothing but the
        // counter): key 1 and the counter.
        assert_eq!(map.pin().get(&Key(1)), Some(&1));
        assert_eq!(map.len(), 2);
        // Counting in another map: the writes' buckets stay as their walks saw them.
        let elsewhere = Arc::new(KeyMap::with_hasher(eq_writes::OneBucket));
        counting(&elsewhere, 10_000, || {
            let m = map.pin();
            assert_eq!(m.insert(Key(1), 2), Some(&1));
            assert!(m.try_insert(Key(2), 2).is_ok());
            assert_eq!(m.update(&Key(2), |v| v + 1), Some(&3));
            assert_eq!(m.remove(&Key(2)), Some(&3));
        });
        assert!(elsewhere.pin().get(&COUNTER).is_some_and(|&n| n > 0));
        assert_eq!(map.pin().get(&Key(1)), Some(&2));
    });
}

/// Only a write's own thread counts toward the limit of undone attempts: a read-modify-write
/// whose closure another thread's write of the same bucket undoes on each of its first 100
/// runs (more than the limit of 64) retries every time, without a panic, and applies its
/// 101st decision. (Counting every undone attempt, whoever undid it, panics at the 64th run.)
#[test]
fn a_read_modify_write_that_other_threads_undo_again_and_again_retries_without_a_panic() {
    use eq_writes::{Key, KeyMap};
    use std::sync::mpsc;
    common::support::watchdog(Duration::from_secs(120), || {
        let map = Arc::new(KeyMap::with_hasher(eq_writes::OneBucket));
        map.pin().insert(Key(0), 0);
        let (ask, asked) = mpsc::channel::<()>();
        let (done, written) = mpsc::channel::<()>();
        // Another thread: one write of the bucket (every key shares it) per request.
        let other = {
            let map = Arc::clone(&map);
            thread::spawn(move || {
                let mut present = false;
                for () in asked {
                    let m = map.pin();
                    if present {
                        m.remove(&Key(99));
                    } else {
                        m.insert(Key(99), 0);
                    }
                    present = !present;
                    done.send(()).unwrap();
                }
            })
        };
        let mut runs = 0u64;
        let pinned = map.pin();
        let outcome = pinned.compute(Key(0), |entry| {
            runs += 1;
            if runs <= 100 {
                ask.send(()).unwrap();
                written.recv().unwrap();
            }
            Operation::<u64, ()>::Insert(entry.map_or(0, |(_, v)| v + runs))
        });
        assert!(matches!(outcome, Compute::Updated { .. }));
        assert_eq!(runs, 101);
        assert_eq!(pinned.get(&Key(0)), Some(&101));
        drop(pinned);
        drop(ask);
        other.join().unwrap();
    });
}

/// User code of a read-modify-write that changes the key's own bucket on every run (here it
/// writes the key itself, directly or from a read-modify-write of another map nested in it)
/// would make every run's decision stale for ever: the call panics with the cause once 64
/// runs in a row were undone that way, the map stays usable, and every value is dropped once.
/// User code that stops writing the bucket before that, or writes elsewhere, completes.
#[test]
fn a_closure_that_writes_its_own_key_on_every_run_panics_instead_of_running_for_ever() {
    common::each_config(|rcu| {
        let drops = Arc::new(AtomicUsize::new(0));
        let made = AtomicUsize::new(0);
        let map: Map<u32, Counted> = RcuHashMap::with_domain(rcu);
        let other: Map<u32, u32> = RcuHashMap::with_domain(rcu);
        let c = |n| {
            made.fetch_add(1, SeqCst);
            Counted(n, Arc::clone(&drops))
        };
        map.pin().insert(0, c(0));
        let runs = AtomicUsize::new(0);
        // One run of user code that writes key 0 itself.
        let write = || {
            runs.fetch_add(1, SeqCst);
            map.pin().insert(0, c(7));
        };
        let expect_panic = |what: &str, call: &dyn Fn()| {
            runs.store(0, SeqCst);
            let err = catch_unwind(AssertUnwindSafe(call)).expect_err(what);
            let msg = err.downcast_ref::<String>().expect("a formatted message");
            assert!(
                msg.contains(&format!("RcuHashMap::{what}:")) && msg.contains("run for ever"),
                "{what}: {msg}"
            );
            assert_eq!(runs.load(SeqCst), 64, "{what}");
        };
        expect_panic("compute", &|| {
            map.pin().compute(0, |_| {
                write();
                Operation::<_, ()>::Insert(c(1))
            });
        });
        expect_panic("compute", &|| {
            map.pin().compute(0, |_| {
                write();
                Operation::<Counted, _>::Abort(())
            });
        });
        expect_panic("update", &|| {
            let guard = map.domain().read();
            map.update(
                &0,
                |_| {
                    write();
                    c(1)
                },
                &guard,
            );
        });
        expect_panic("update_or_insert", &|| {
            map.pin().update_or_insert_with(
                0,
                |_| {
                    write();
                    c(1)
                },
                || c(2),
            );
        });
        expect_panic("remove_if", &|| {
            map.pin().remove_if(&0, |_, _| {
                write();
                true
            });
        });
        // The write of key 0 made by a read-modify-write of another map, inside this one's.
        expect_panic("compute", &|| {
            map.pin().compute(0, |_| {
                other.pin().compute(1, |_| {
                    write();
                    Operation::<u32, ()>::Insert(1)
                });
                Operation::<_, ()>::Insert(c(1))
            });
        });
        // Writing the bucket on the first 63 runs only: the 64th run's decision stands.
        runs.store(0, SeqCst);
        let pinned = map.pin();
        let done = pinned.compute(0, |_| {
            if runs.load(SeqCst) < 63 {
                write();
            } else {
                runs.fetch_add(1, SeqCst);
            }
            Operation::<_, ()>::Insert(c(64))
        });
        assert!(matches!(done, Compute::Updated { .. }));
        assert_eq!(runs.load(SeqCst), 64);
        // Writing only elsewhere on every run: the first run's decision stands.
        let done = pinned.update(&0, |v| {
            other.pin().insert(2, 2);
            c(v.0 + 1)
        });
        assert_eq!(done.map(|v| v.0), Some(65));
        assert_eq!(map.len(), 1);
        drop(pinned);
        drop(map);
        rcu.barrier();
        assert_eq!(drops.load(SeqCst), made.load(SeqCst));
    });
}

/// A `clear()` that finds nothing to remove changes no bucket, also where emptied overflow
/// lines stay linked: a read-modify-write whose closure calls it on an empty map completes at
/// its first run. (It used to change every bucket with an overflow line, so such a closure ran
/// for ever, and other writers of those buckets walked again for nothing.)
#[test]
fn a_clear_that_removes_nothing_leaves_the_buckets_as_they_are() {
    let map = RcuHashMap::builder()
        .hasher(Clumpy)
        .build::<u32, u32>()
        .unwrap();
    // Every key in one of five buckets: eight or more each, so each has an overflow line.
    for k in 0..60 {
        map.pin().insert(k, k);
    }
    map.clear();
    assert!(map.is_empty());
    let mut runs = 0;
    let pinned = map.pin();
    let done = pinned.compute(7, |_| {
        runs += 1;
        map.clear();
        Operation::<_, ()>::Insert(70)
    });
    assert!(matches!(done, Compute::Inserted(_, 70)));
    assert_eq!(runs, 1);
    drop(pinned);
    assert_eq!(map.len(), 1);
}

/// A removed entry whose key's `Drop` panics and whose value's `Drop` panics too: both are
/// dropped, each panic is reported by the domain, and the process goes on. (Dropping them
/// together, the value's panic came while unwinding from the key's: an abort.)
#[test]
fn an_entry_whose_key_and_value_both_panic_in_drop_does_not_abort() {
    let reports = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&reports);
    let rcu = Rcu::builder()
        .on_report(move |_| {
            counted.fetch_add(1, SeqCst);
        })
        .build()
        .unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let map = RcuHashMap::with_domain(&rcu);
    map.pin()
        .insert(Bomb(1, Arc::clone(&drops)), Bomb(2, Arc::clone(&drops)));
    // Look the key up by a twin (keys compare by number), forgotten afterwards.
    let key = Bomb(1, Arc::new(AtomicUsize::new(0)));
    assert!(map.pin().remove(&key).is_some());
    std::mem::forget(key);
    rcu.barrier();
    rcu.barrier();
    assert_eq!(
        drops.load(SeqCst),
        2,
        "the key and the value were both dropped"
    );
    assert_eq!(rcu.stats().callback_panics, 1, "one retired entry panicked");
    assert!(reports.load(SeqCst) >= 1, "and it was reported");
}

/// An `update` whose first attempt is discarded (its closure wrote the key itself, so the
/// bucket changed) frees that attempt's node: a clone of the key and the closure's value. When
/// both of their drops panic, the panic comes out of `update` and the process goes on. (The
/// node was freed with its plain drop glue, which dropped the value while unwinding from the
/// key's panic: an abort.)
#[test]
fn a_discarded_update_attempt_whose_key_and_value_panic_in_drop_does_not_abort() {
    static ARMED: AtomicBool = AtomicBool::new(false);
    /// A key whose clones panic in their drop while armed.
    #[derive(PartialEq, Eq, Hash)]
    struct Key(u32, bool);
    impl Clone for Key {
        fn clone(&self) -> Key {
            Key(self.0, true)
        }
    }
    impl Drop for Key {
        fn drop(&mut self) {
            if self.1 && ARMED.load(SeqCst) {
                panic!("a key clone's drop");
            }
        }
    }
    let map: RcuHashMap<Key, Loud, RandomState, Arc<Rcu>> = RcuHashMap::with_domain(domain());
    let drops = Arc::new(AtomicUsize::new(0));
    map.pin()
        .insert(Key(1, false), Loud(false, Arc::clone(&drops)));
    ARMED.store(true, SeqCst);
    let mut runs = 0;
    let updated = catch_unwind(AssertUnwindSafe(|| {
        let pinned = map.pin();
        pinned.update(&Key(1, false), |_| {
            runs += 1;
            if runs > 1 {
                return Loud(false, Arc::clone(&drops));
            }
            // A write of the same key changes the bucket: this attempt is discarded (and
            // dropped when the call returns).
            map.pin()
                .insert(Key(1, false), Loud(false, Arc::clone(&drops)));
            Loud(true, Arc::clone(&drops))
        });
    }));
    ARMED.store(false, SeqCst);
    assert!(updated.is_err(), "the panic comes out of update");
    assert_eq!(runs, 2);
    // Dropped: the discarded attempt's value, and the two values replaced (by the closure's
    // insert, then by the update).
    map.domain().barrier();
    assert_eq!(drops.load(SeqCst), 3);
    assert_eq!(map.len(), 1);
}

type LoudMap = RcuHashMap<u32, Loud, RandomState, Arc<Rcu>>;

/// `write`, a keyed read-modify-write of key 1 in a map that holds it, calls `attempt` once
/// per attempt. The first two attempts write key 1 themselves, so the bucket changed and each
/// is discarded, and they make values whose `Drop` panics; the third makes a quiet one. The
/// two discarded values are dropped when the call returns: both are dropped, the first panic
/// comes out of the call, and the process goes on. (Kept in a plain `Vec`, the second value's
/// panic came while unwinding from the first's: an abort.)
fn check_two_discarded_attempts_that_panic_in_drop(
    write: impl FnOnce(&LoudMap, &mut dyn FnMut() -> Loud),
) {
    let map: LoudMap = RcuHashMap::with_domain(domain());
    let drops = Arc::new(AtomicUsize::new(0));
    map.pin().insert(1, Loud(false, Arc::clone(&drops)));
    let mut runs = 0;
    let mut attempt = || {
        runs += 1;
        if runs <= 2 {
            map.pin().insert(1, Loud(false, Arc::clone(&drops)));
            Loud(true, Arc::clone(&drops))
        } else {
            Loud(false, Arc::clone(&drops))
        }
    };
    let written = catch_unwind(AssertUnwindSafe(|| write(&map, &mut attempt)));
    assert!(written.is_err(), "the first panic comes out of the call");
    assert_eq!(runs, 3);
    // Dropped: the two discarded values, and the three replaced (twice by the attempts'
    // own inserts, then by the write).
    map.domain().barrier();
    assert_eq!(drops.load(SeqCst), 5);
    assert_eq!(map.len(), 1);
    assert!(
        !map.pin().get(&1).expect("present").0,
        "the third attempt's value"
    );
}

#[test]
fn an_update_whose_discarded_attempts_panic_in_drop_does_not_abort() {
    check_two_discarded_attempts_that_panic_in_drop(|map, attempt| {
        map.pin().update(&1, |_| attempt());
    });
}

#[test]
fn a_compute_whose_discarded_inserts_panic_in_drop_does_not_abort() {
    check_two_discarded_attempts_that_panic_in_drop(|map, attempt| {
        map.pin()
            .compute(1, |_| Operation::<Loud, ()>::Insert(attempt()));
    });
}

#[test]
fn a_compute_whose_discarded_aborts_panic_in_drop_does_not_abort() {
    check_two_discarded_attempts_that_panic_in_drop(|map, attempt| {
        map.pin().compute(1, |_| match attempt() {
            loud @ Loud(true, _) => Operation::Abort(loud),
            quiet => Operation::Insert(quiet),
        });
    });
}

#[test]
fn an_update_or_insert_whose_discarded_updates_panic_in_drop_does_not_abort() {
    check_two_discarded_attempts_that_panic_in_drop(|map, attempt| {
        map.pin()
            .update_or_insert_with(1, |_| attempt(), || unreachable!("the key is present"));
    });
}

/// An `update_or_insert_with` whose maker ran for an attempt that was discarded (it wrote the
/// absent key itself), and whose next attempt found the key and updated it instead, once more
/// discarded: the maker's unused value and the discarded update are both dropped when the call
/// returns, even though both of their `Drop`s panic. (The unused value was dropped while
/// unwinding from the update's panic: an abort.)
#[test]
fn an_update_or_insert_whose_unused_made_value_and_discarded_update_panic_in_drop_does_not_abort() {
    let map: LoudMap = RcuHashMap::with_domain(domain());
    let drops = Arc::new(AtomicUsize::new(0));
    let loud = |panics| Loud(panics, Arc::clone(&drops));
    let mut updates = 0;
    let written = catch_unwind(AssertUnwindSafe(|| {
        map.pin().update_or_insert_with(
            1,
            |_| {
                updates += 1;
                if updates == 1 {
                    map.pin().insert(1, loud(false));
                    return loud(true);
                }
                loud(false)
            },
            || {
                map.pin().insert(1, loud(false));
                loud(true)
            },
        );
    }));
    assert!(written.is_err(), "the first panic comes out of the call");
    assert_eq!(updates, 2);
    // Dropped: the made value, the discarded update, and the two values replaced.
    map.domain().barrier();
    assert_eq!(drops.load(SeqCst), 4);
    assert_eq!(map.len(), 1);
}

/// A write whose key's `Eq` panics frees the node it had made for the key as the panic
/// unwinds; when that key's `Drop` panics too, its panic is dropped there and the first one
/// comes out of the write. (The key's panic went on out of the node's drop while the first
/// unwound: an abort.)
#[test]
fn a_write_whose_key_panics_in_eq_and_in_drop_does_not_abort() {
    static ARMED: AtomicBool = AtomicBool::new(false);
    /// A key whose `Eq` panics while armed, as does the `Drop` of a key made loud; keys hash
    /// by number.
    struct Key(u32, bool);
    impl std::hash::Hash for Key {
        fn hash<H: Hasher>(&self, h: &mut H) {
            self.0.hash(h)
        }
    }
    impl PartialEq for Key {
        fn eq(&self, other: &Key) -> bool {
            assert!(!ARMED.load(SeqCst), "a key's eq");
            self.0 == other.0
        }
    }
    impl Eq for Key {}
    impl Drop for Key {
        fn drop(&mut self) {
            if self.1 && ARMED.load(SeqCst) {
                panic!("a loud key's drop");
            }
        }
    }
    let map: RcuHashMap<Key, Loud, RandomState, Arc<Rcu>> = RcuHashMap::with_domain(domain());
    let drops = Arc::new(AtomicUsize::new(0));
    map.pin()
        .insert(Key(1, false), Loud(false, Arc::clone(&drops)));
    ARMED.store(true, SeqCst);
    let inserted = catch_unwind(AssertUnwindSafe(|| {
        map.pin()
            .insert(Key(1, true), Loud(false, Arc::clone(&drops)));
    }));
    ARMED.store(false, SeqCst);
    let payload = inserted.expect_err("the eq's panic comes out of insert");
    assert_eq!(
        payload.downcast_ref::<&str>().copied(),
        Some("a key's eq"),
        "the first panic, not the drop's"
    );
    map.domain().barrier();
    assert_eq!(drops.load(SeqCst), 1, "the value not inserted was dropped");
    assert_eq!(map.len(), 1);
    assert!(
        map.pin().get(&Key(1, false)).is_some(),
        "the entry is unchanged"
    );
}

/// A map consumed by `into_iter` whose hasher panics in its `Drop`: the panic goes on, and
/// every entry is dropped with the iterator it was already in. (The entries were still raw
/// pointers when the hasher was dropped, and leaked.)
#[test]
fn into_iter_of_a_map_whose_hasher_panics_in_drop_drops_every_entry() {
    struct Touchy(RandomState);
    impl BuildHasher for Touchy {
        type Hasher = <RandomState as BuildHasher>::Hasher;
        fn build_hasher(&self) -> Self::Hasher {
            self.0.build_hasher()
        }
    }
    impl Drop for Touchy {
        fn drop(&mut self) {
            panic!("the hasher's drop");
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let map = RcuHashMap::with_hasher(Touchy(RandomState::new()));
    for k in 0..10 {
        map.pin().insert(k, Counted(k, Arc::clone(&drops)));
    }
    let consumed = catch_unwind(AssertUnwindSafe(|| drop(map.into_iter())));
    assert!(consumed.is_err(), "the hasher's panic goes on");
    assert_eq!(drops.load(SeqCst), 10, "every entry dropped");
}

/// The iterator given to `Extend` and `FromIterator` is user code too, and runs outside the
/// map's read-side critical sections: pairs received from a thread that waits for a grace
/// period of the map's domain before each send, and an iterator that waits for one itself.
/// (With the iterator pulled under the map's guard, the sender's grace period waited for the
/// receiver, which waited for the sender: a hang; and the iterator's own `synchronize`
/// panicked, inside a read-side critical section.) A duplicate key's replaced value, which
/// `FromIterator` drops at once, may wait for a grace period in its `Drop` too.
#[test]
fn pairs_for_extend_and_from_iterator_may_wait_for_grace_periods() {
    use common::support::watchdog;
    use std::sync::mpsc::sync_channel;
    watchdog(Duration::from_secs(120), || {
        let rcu = domain();
        let map: RcuHashMap<u64, u64, RandomState, Arc<Rcu>> =
            RcuHashMap::with_domain(Arc::clone(&rcu));
        let (tx, rx) = sync_channel::<(u64, u64)>(0);
        let sender = {
            let rcu = Arc::clone(&rcu);
            thread::spawn(move || {
                for k in 0..300 {
                    if k % 100 == 0 {
                        rcu.synchronize();
                    }
                    tx.send((k, k)).unwrap();
                }
            })
        };
        (&map).extend(rx);
        sender.join().unwrap();
        assert_eq!(map.len(), 300);
        (&map).extend((300..310).map(|k| {
            rcu.synchronize();
            (k, k)
        }));
        assert_eq!(map.len(), 310);

        // `FromIterator`, on the global domain.
        let (tx, rx) = sync_channel::<(u64, u64)>(0);
        let sender = thread::spawn(move || {
            for k in 0..300 {
                if k % 100 == 0 {
                    Rcu::global().synchronize();
                }
                tx.send((k % 290, k)).unwrap();
            }
        });
        let map: RcuHashMap<u64, u64> = rx.into_iter().collect();
        sender.join().unwrap();
        assert_eq!(map.len(), 290);
        struct Waits(u64);
        impl Drop for Waits {
            fn drop(&mut self) {
                Rcu::global().synchronize();
            }
        }
        let map: RcuHashMap<u64, Waits> = (0..20).map(|k| (k % 10, Waits(k))).collect();
        assert_eq!(map.len(), 10);
        let guard = map.domain().read();
        assert!(
            map.values(&guard).all(|w| w.0 >= 10),
            "the last pair of a key stays"
        );
        drop(guard);
        drop(map); // each value's drop waits for a grace period: outside any guard here
    });
}

/// A map dropped, and an owning iterator dropped part-way, with entries whose key's and
/// value's `Drop` both panic: every key and value is dropped, the first panic goes on to the
/// caller, and the process goes on. (With the entries dropped as plain `(K, V)` pairs, the
/// second panic came while unwinding from the first: the test binary aborted.)
#[test]
fn maps_and_owning_iterators_dropped_with_panicking_entries_drop_all_and_do_not_abort() {
    let drops = Arc::new(AtomicUsize::new(0));
    let filled = || {
        let map = RcuHashMap::new();
        for k in 0..4 {
            map.pin()
                .insert(Bomb(k, Arc::clone(&drops)), Bomb(k, Arc::clone(&drops)));
        }
        map
    };
    let map = filled();
    assert!(catch_unwind(AssertUnwindSafe(|| drop(map))).is_err());
    assert_eq!(
        drops.load(SeqCst),
        8,
        "every key and value of the map dropped"
    );

    drops.store(0, SeqCst);
    let mut entries = filled().into_iter();
    let (key, value) = entries.next().unwrap();
    std::mem::forget((key, value));
    assert!(catch_unwind(AssertUnwindSafe(|| drop(entries))).is_err());
    assert_eq!(drops.load(SeqCst), 6, "every entry not handed out dropped");
}

/// A map dropped with the frame that panicked (as the panic unwinds) whose entries panic in
/// their drops: every key and value is dropped, their panics stop there, and the frame's
/// panic comes out. (The first entry's panic went on out of the map's drop while the frame's
/// unwound: an abort.)
#[test]
fn a_map_dropped_while_a_panic_unwinds_drops_every_entry_and_does_not_abort() {
    let drops = Arc::new(AtomicUsize::new(0));
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        let map = RcuHashMap::new();
        for k in 0..4 {
            map.pin()
                .insert(Bomb(k, Arc::clone(&drops)), Bomb(k, Arc::clone(&drops)));
        }
        panic!("the frame's panic");
    }));
    let payload = unwound.expect_err("the frame panicked");
    assert_eq!(
        payload.downcast_ref::<&str>().copied(),
        Some("the frame's panic")
    );
    assert_eq!(drops.load(SeqCst), 8, "every key and value dropped");
}

/// What one handle removed is retired as one object of the domain (one callback): a value
/// that panics in its drop still lets the others of the batch drop, and the domain reports
/// the panic once.
#[test]
fn entries_retired_together_all_drop_when_one_panics() {
    let rcu = Rcu::builder().on_report(|_| {}).build().unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let map = RcuHashMap::with_domain(&rcu);
    for k in 0..5u32 {
        map.pin().insert(k, Loud(k == 2, Arc::clone(&drops)));
    }
    let before = rcu.stats().callbacks_queued;
    {
        let pinned = map.pin();
        for k in 0..5u32 {
            assert!(pinned.remove(&k).is_some());
        }
    }
    assert_eq!(
        rcu.stats().callbacks_queued - before,
        1,
        "one callback for the batch"
    );
    rcu.barrier();
    rcu.barrier();
    assert_eq!(
        drops.load(SeqCst),
        5,
        "every value of the batch was dropped"
    );
    assert_eq!(
        rcu.stats().callback_panics,
        1,
        "the panic went on to the domain"
    );
}

#[test]
fn the_map_is_send_sync_and_unwind_safe_when_its_entries_are() {
    fn send_sync<T: Send + Sync>() {}
    fn unwind_safe<T: std::panic::UnwindSafe + std::panic::RefUnwindSafe>() {}
    send_sync::<RcuHashMap<String, Vec<u8>>>();
    send_sync::<RcuHashMap<u32, u32, RandomState, Arc<Rcu>>>();
    unwind_safe::<RcuHashMap<String, Vec<u8>>>();
    unwind_safe::<RcuHashMap<u32, u32, RandomState, Arc<Rcu>>>();
    unwind_safe::<Rcu>();
}

/// A `retain` whose closure panics part-way retires what it had removed by then (nothing is
/// leaked) and leaves the rest in the map.
#[test]
fn a_panicking_retain_retires_what_it_removed() {
    common::each_config(|rcu| {
        let drops = Arc::new(AtomicUsize::new(0));
        let map: Map<u64, Counted> = RcuHashMap::with_domain(rcu);
        for i in 0..100 {
            map.pin().insert(i, Counted(i, Arc::clone(&drops)));
        }
        let mut visited = 0;
        let r = catch_unwind(AssertUnwindSafe(|| {
            map.retain(|_, _| {
                visited += 1;
                assert!(visited <= 50, "boom");
                false
            })
        }));
        assert!(r.is_err());
        assert_eq!(map.len(), 50);
        rcu.barrier();
        assert_eq!(
            drops.load(SeqCst),
            50,
            "the removed half was retired, not leaked"
        );
        drop(map);
        assert_eq!(drops.load(SeqCst), 100);
    });
}

/// Grow the map to 16 times its capacity and shrink it back, `cycles` times, with keys above
/// `base` (which the caller's entries never use).
fn grow_and_shrink(map: &Map<u64, u64>, base: u64, cycles: usize) {
    for _ in 0..cycles {
        let start = map.buckets();
        let mut k = base;
        while map.buckets() < 16 * start {
            map.pin().insert(k, 0);
            k += 1;
        }
        for j in base..k {
            assert!(map.pin().remove(&j).is_some());
        }
        // More writes finish the shrink.
        for j in 0..256 {
            map.pin().insert(base + j, 0);
            map.pin().remove(&(base + j));
        }
    }
}

/// An iteration that yields one entry and then waits while the table grows and shrinks many
/// times still finishes, and yields each entry present throughout exactly once. (An iterator
/// that walked every table its buckets had moved through, without merging the walks, took
/// time exponential in the number of resizes: 37 s after five cycles.)
#[test]
fn an_iteration_held_across_many_resizes_finishes_and_yields_each_entry_once() {
    common::each_config(|rcu| {
        let map: Map<u64, u64> = RcuHashMap::with_domain(rcu);
        let stable = scale(300, 8) as u64;
        for k in 0..stable {
            map.pin().insert(k, k);
        }
        let cycles = scale(6, 2);
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let seen = thread::scope(|s| {
            let map = &map;
            let runner = s.spawn(move || {
                let g = map.domain().read();
                let mut it = map.iter(&g);
                let mut seen = vec![*it.next().unwrap().0];
                // Let the writer resize the map while this iteration is under way.
                go_rx.recv().unwrap();
                seen.extend(it.map(|(k, _)| *k));
                seen.retain(|k| *k < stable);
                seen.sort_unstable();
                seen
            });
            grow_and_shrink(map, 1 << 32, cycles);
            go_tx.send(()).unwrap();
            // The walk's cost is bounded by the buckets it visits (the walk-bound unit test in
            // `map::iter` counts them); the iteration that followed every table never ended here.
            runner.join().unwrap()
        });
        assert_eq!(
            seen,
            (0..stable).collect::<Vec<_>>(),
            "each entry exactly once"
        );
    });
}

/// Eight writers of the same four keys (update, compute, update_or_insert_with, get_or_insert
/// and a remove_if that never approves) on two cores, while another thread grows, shrinks,
/// reserves and shrinks to fit with other keys: no increment is lost.
#[test]
fn eight_writers_of_four_keys_beside_resizes_on_two_cores_lose_nothing() {
    common::support::watchdog(Duration::from_secs(120), || {
        let map: Arc<RcuHashMap<u64, u64>> = Arc::new(RcuHashMap::new());
        const ROUNDS: u64 = 3_000;
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicUsize::new(0));
        let resizer = {
            let (map, stop, rounds) = (map.clone(), stop.clone(), rounds.clone());
            std::thread::spawn(move || {
                let mut round = 0usize;
                while !stop.load(SeqCst) {
                    for k in 100..3_000 {
                        map.pin().insert(k, k);
                    }
                    match round % 4 {
                        0 => map.shrink_to_fit(),
                        1 => map.reserve(10_000),
                        2 => {
                            map.retain(|k, _| *k < 100);
                        }
                        _ => map.shrink_to_fit(),
                    }
                    map.retain(|k, _| *k < 100);
                    round += 1;
                    rounds.store(round, SeqCst);
                }
            })
        };
        let writers: Vec<_> = (0..8u64)
            .map(|w| {
                let (map, rounds) = (map.clone(), rounds.clone());
                std::thread::spawn(move || {
                    // Until the resizing thread has had a few rounds among the writes.
                    let mut i = 0;
                    while i < ROUNDS || rounds.load(SeqCst) < 3 {
                        let key = (w + i) % 4;
                        let guard = map.domain().read();
                        match (w + i) % 4 {
                            0 => {
                                map.update_or_insert_with(key, |v| v + 1, || 1, &guard);
                            }
                            1 => {
                                map.compute(
                                    key,
                                    |e| match e {
                                        Some((_, v)) => Operation::<u64, ()>::Insert(v + 1),
                                        None => Operation::Insert(1),
                                    },
                                    &guard,
                                );
                            }
                            2 => {
                                map.get_or_insert(key, 0, &guard);
                                if map.update(&key, |v| v + 1, &guard).is_none() {
                                    unreachable!("the key is never removed");
                                }
                            }
                            _ => {
                                assert!(map
                                    .remove_if(&key, |_, v| *v == u64::MAX, &guard)
                                    .is_none());
                                let p = map.pin();
                                let r = p.compute(key, |e| match e {
                                    Some((_, v)) => Operation::<u64, ()>::Insert(v + 1),
                                    None => Operation::Insert(1),
                                });
                                assert!(matches!(
                                    r,
                                    Compute::Inserted(..) | Compute::Updated { .. }
                                ));
                            }
                        }
                        i += 1;
                    }
                    i
                })
            })
            .collect();
        let writes: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
        stop.store(true, SeqCst);
        resizer.join().unwrap();
        let guard = map.domain().read();
        let total: u64 = (0..4).map(|k| *map.get(&k, &guard).unwrap()).sum();
        assert_eq!(total, writes, "an increment was lost");
        assert_eq!(map.iter(&guard).filter(|(k, _)| **k < 4).count(), 4);
    });
}

/// The iterating thread is the writer: the map is extended from its own iteration
/// (`(&map).extend(map.iter(..))`, each key `k` yielding `k + OFFSET`), so the table grows
/// under the iteration, its buckets moved by the thread that iterates, and the keys it adds
/// land ahead of the cursor and behind it. The iteration ends (each yielded key's successor
/// lies ahead with a probability that falls as the cursor moves, so about `e - 1` times the
/// first keys are yielded in all), every key is a chain `k, k + OFFSET, ..` of a first key
/// with no gap, and nothing is yielded twice (each yield inserts a key that was absent).
/// Then an iteration that removes each key it yields and inserts another: it ends too, and
/// yields every key present at its start, each once.
#[test]
fn a_map_extended_from_its_own_iteration_grows_under_it_and_the_iteration_ends() {
    const OFFSET: u64 = 1 << 40;
    common::each_config(|rcu| {
        let map: Map<u64, u64> = RcuHashMap::with_domain(rcu);
        let first = scale(20_000, 40) as u64;
        for k in 0..first {
            map.pin().insert(k, 0);
        }
        let yielded = AtomicUsize::new(0);
        {
            let g = map.domain().read();
            (&map).extend(map.iter(&g).map(|(k, v)| {
                yielded.fetch_add(1, Relaxed);
                (k + OFFSET, v + 1)
            }));
        }
        let yielded = yielded.load(Relaxed);
        assert!(
            yielded >= first as usize && map.len() == first as usize + yielded,
            "{yielded} yielded, {} entries: a key inserted twice",
            map.len()
        );
        let g = map.domain().read();
        for (k, v) in map.iter(&g) {
            assert_eq!(*v, k / OFFSET, "key {k}: its value counts its links");
            if *k >= OFFSET {
                assert!(
                    map.contains_key(&(k - OFFSET), &g),
                    "{k} has no predecessor"
                );
            }
        }
        drop(g);

        // Remove each yielded key and insert one the iteration may meet again: the count
        // stays, the buckets change under the walk. Every key there at the start is yielded
        // (none is removed before its turn), each once.
        let before = map.len();
        let mut next = 1u64 << 50;
        {
            let g = map.domain().read();
            for (k, _) in map.iter(&g) {
                let h = map.pin();
                assert!(h.remove(k).is_some(), "{k} yielded twice");
                assert!(h.insert(next, 0).is_none());
                next += 1;
            }
        }
        assert_eq!(map.len(), before);
        assert!(
            next - (1 << 50) >= before as u64,
            "a key present throughout was missed"
        );
        map.clear();
        assert!(map.is_empty());
    });
}

/// Maps held as values of a map: a removed one is dropped where retired objects run, and a
/// dropped outer map drops the rest in place. An inner map that freed enough asks for an
/// allocator trim from there (a `call` into the domain from inside its own callbacks, or from
/// a map's `Drop`). Every inner entry is still dropped exactly once, and nothing hangs.
#[test]
fn maps_dropped_as_values_ask_for_trims_and_drop_every_entry() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    struct Counted;
    impl Drop for Counted {
        fn drop(&mut self) {
            DROPS.fetch_add(1, SeqCst);
        }
    }
    // 5,000 entries: a table of 2,048 buckets (128 KiB), enough to ask on drop.
    let per_inner = scale(5_000, 50) as u64;
    let outer: RcuHashMap<u64, RcuHashMap<u64, Counted>> = RcuHashMap::new();
    for o in 0..8 {
        let inner = RcuHashMap::new();
        for k in 0..per_inner {
            inner.pin().insert(k, Counted);
        }
        outer.pin().insert(o, inner);
    }
    for o in 0..4 {
        assert!(outer.pin().remove(&o).is_some());
    }
    drop(outer);
    Rcu::global().barrier();
    Rcu::global().barrier();
    assert_eq!(DROPS.load(SeqCst), 8 * per_inner as usize);
}

/// Closures of one map that write a second map whose closures write the first again (A → B →
/// A), and closures of a map that read and iterate that same map. The map runs no user code
/// under a bucket lock (module docs, "Where user code runs"), so it needs no "which lock do I
/// hold" mark and refuses no nesting: every nested call completes, and each nested write lands
/// exactly once. (A map that ran user code under a lock and marked only the innermost one it
/// held would deadlock here: `RcuFlatMap` did.) Keys clump into five buckets, so the innermost
/// write to `a` often changes the bucket the outer write walked, and the outer closure runs
/// again; only its first run nests.
#[test]
fn closures_that_write_a_second_map_which_writes_the_first_complete_and_count_once() {
    common::each_config(|rcu| {
        let clumpy = || {
            RcuHashMap::builder()
                .hasher(Clumpy)
                .domain(rcu)
                .build::<u32, u64>()
                .unwrap()
        };
        let (a, b) = (clumpy(), clumpy());
        let n = scale(200, 10) as u32;
        for i in 0..n {
            nest_through_a_second_map(&a, &b, i);
            // a's closure reads and iterates a itself.
            let pinned = a.pin();
            let seen = pinned.compute(i, |e| {
                assert_eq!(a.pin().get(&i), e.map(|(_, v)| v));
                Operation::<u64, usize>::Abort(a.pin().iter().count())
            });
            assert!(matches!(seen, Compute::Aborted(c) if c == 5 * (i as usize + 1)));
        }
        // retain's closure reads `a`, and computes in `b`, whose closure inserts into `a`.
        let removed = a.retain(|&k, v| {
            assert_eq!(a.pin().get(&k), Some(v));
            if k >= n {
                return true;
            }
            b.pin().compute(k, |f| {
                assert!(f.is_none(), "b's entry of {k} was removed");
                a.pin().insert(600_000 + k, u64::from(k));
                Operation::<_, ()>::Insert(1)
            });
            k % 2 == 0
        });
        assert_eq!(removed, n as usize / 2, "the odd keys below n");
        for i in 0..n {
            let key = u64::from(i);
            let expect_a = [(i, (i % 2 == 0).then_some(11)), (200_000 + i, Some(7))];
            let expect_a = expect_a.into_iter().chain([
                (100_000 + i, None),
                (300_000 + i, Some(key)),
                (400_000 + i, Some(key)),
                (500_000 + i, Some(41)),
                (600_000 + i, Some(key)),
            ]);
            for (k, v) in expect_a {
                assert_eq!(a.get_cloned(&k), v, "a[{k}]");
            }
            for (k, v) in [
                (i, Some(1)),
                (200_000 + i, Some(8)),
                (500_000 + i, Some(50)),
            ] {
                assert_eq!(b.get_cloned(&k), v, "b[{k}]");
            }
        }
        assert_eq!(
            (a.len(), b.len()),
            (6 * n as usize - n as usize / 2, 3 * n as usize)
        );
        // Both maps still work.
        for m in [&a, &b] {
            assert_eq!(m.pin().insert(7_000_000, 1), None);
            assert_eq!(m.pin().remove(&7_000_000), Some(&1));
        }
    });
}

/// For `i`, each writer of `a` whose user code writes `b`, whose user code writes `a` again.
fn nest_through_a_second_map<D: rcukit::DomainRef>(
    a: &RcuHashMap<u32, u64, Clumpy, D>,
    b: &RcuHashMap<u32, u64, Clumpy, D>,
    i: u32,
) {
    let key = u64::from(i);
    let mut first = true;
    let pinned = a.pin();
    let done = pinned.compute(i, |e| {
        if std::mem::take(&mut first) {
            b.pin().compute(i, |f| {
                a.pin().insert(100_000 + i, key);
                Operation::<_, ()>::Insert(f.map_or(1, |(_, v)| v + 1))
            });
        }
        Operation::<_, ()>::Insert(e.map_or(1, |(_, v)| v + 1))
    });
    assert!(matches!(done, Compute::Inserted(_, 1)));
    // The innermost insert into `a` comes first: it stands, and a's made value is dropped.
    let got = *a.pin().get_or_insert_with(200_000 + i, || {
        b.pin().get_or_insert_with(200_000 + i, || {
            a.pin().insert(200_000 + i, 7);
            8
        }) + 1000
    });
    assert_eq!(got, 7);
    let mut first = true;
    let updated = pinned.update(&i, |v| {
        if std::mem::take(&mut first) {
            b.pin().update(&i, |w| {
                a.pin().insert(300_000 + i, key);
                w + 10
            });
        }
        v + 10
    });
    assert_eq!(updated.copied(), Some(11));
    let mut verdict = None;
    let removed = pinned.remove_if(&(100_000 + i), |_, _| {
        *verdict.get_or_insert_with(|| {
            b.pin()
                .remove_if(&i, |_, _| {
                    a.pin().insert(400_000 + i, key);
                    true
                })
                .is_some()
        })
    });
    assert_eq!(removed.map(|(k, v)| (*k, *v)), Some((100_000 + i, key)));
    // a's maker runs b's, which inserts the key into `a`: the value a's maker made (60) is
    // rejected, and a's update runs on the entry now there instead: 40 + 1.
    let v = *a.pin().update_or_insert_with(
        500_000 + i,
        |v| v + 1,
        || {
            b.pin().update_or_insert_with(
                500_000 + i,
                |w| w + 1,
                || {
                    a.pin().insert(500_000 + i, 40);
                    50
                },
            ) + 10
        },
    );
    assert_eq!(v, 41);
}

/// A key whose `Hash` and `Eq` run a hook, unless three hooks already run in this thread (the
/// stored keys' `Eq` would otherwise nest without end).
#[derive(Clone)]
struct Hooked(u32, Option<Arc<dyn Fn() + Send + Sync>>);
type HookedMap = RcuHashMap<Hooked, u32, Clumpy>;

thread_local! {
    static HOOK_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

impl Hooked {
    fn run_hook(&self) {
        if let Some(hook) = &self.1 {
            let depth = HOOK_DEPTH.with(|d| d.replace(d.get() + 1));
            if depth < 3 {
                hook();
            }
            HOOK_DEPTH.with(|d| d.set(depth));
        }
    }

    /// The key `id`, whose hook tries to insert `Hooked(then_id, then)` (with value `then_id`)
    /// into `target`.
    fn to(id: u32, target: &Arc<HookedMap>, then_id: u32, then: Option<Hooked>) -> Hooked {
        let target = Arc::downgrade(target);
        let hook = move || {
            if let Some(m) = target.upgrade() {
                let key = Hooked(then_id, then.as_ref().and_then(|t| t.1.clone()));
                // Through the writers' walk (under which `Eq` runs) even when present.
                let _ = m.pin().try_insert(key, then_id);
            }
        };
        Hooked(id, Some(Arc::new(hook)))
    }
}
impl PartialEq for Hooked {
    fn eq(&self, other: &Hooked) -> bool {
        self.run_hook();
        self.0 == other.0
    }
}
impl Eq for Hooked {}
impl std::hash::Hash for Hooked {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.run_hook();
        self.0.hash(h)
    }
}

/// Keys of `a` whose `Hash` and `Eq` write `b` with keys whose `Hash` and `Eq` write `a`
/// (A → B → A), while another thread does the mirror (B → A → B): no lock of either map is
/// held while user code runs, so neither nesting nor the opposite orders of the two threads
/// (an ABBA deadlock for maps that hold locks there) can hang, and every hooked insert lands.
#[test]
fn keys_whose_hash_and_eq_write_a_second_map_which_writes_the_first_complete() {
    let a: Arc<HookedMap> = Arc::new(RcuHashMap::with_hasher(Clumpy));
    let b: Arc<HookedMap> = Arc::new(RcuHashMap::with_hasher(Clumpy));
    let n = scale(100, 8) as u32;
    thread::scope(|s| {
        for (first, second, base) in [(&a, &b, 0), (&b, &a, 10_000)] {
            s.spawn(move || {
                for i in base..base + n {
                    // first[i]'s hooks put second[i], whose hooks put first[1000 + i].
                    let back = Hooked::to(i, first, 1000 + i, None);
                    let key = Hooked::to(i, second, i, Some(back));
                    assert!(first.pin().insert(key, i).is_none());
                }
            });
        }
    });
    for (first, second, base) in [(&a, &b, 0), (&b, &a, 10_000)] {
        for i in base..base + n {
            let get = |m: &HookedMap, k| m.get_cloned(&Hooked(k, None));
            assert_eq!(
                (get(first, i), get(second, i)),
                (Some(i), Some(i)),
                "key {i}"
            );
            let back = 1000 + i;
            assert_eq!((get(first, back), get(second, back)), (Some(back), None));
        }
    }
    assert_eq!((a.len(), b.len()), (3 * n as usize, 3 * n as usize));
    // Both maps still work, and hooked keys still nest on removal.
    for m in [&a, &b] {
        assert_eq!(
            m.pin().remove(&Hooked::to(0, m, 5_000, None)).copied(),
            Some(0)
        );
        assert_eq!(m.get_cloned(&Hooked(5_000, None)), Some(5_000));
    }
}

/// A map's request for an allocator trim, made by a shrink, leaves the objects the writing
/// thread retired with that thread, which frees them itself at its later retires; the domain's
/// workers are not needed. Shown with the only worker held up by a closure: the writer's
/// removed values are all dropped while it waits. (The request was queued as a closure, and a
/// thread that queues one hands every object it retired to the workers first: with the workers
/// behind, as on a machine busier than its cores, the removed values waited for them, and a
/// map emptied and filled again beside readers grew by gigabytes.)
#[test]
fn a_shrinks_trim_request_leaves_the_writers_retired_objects_with_it() {
    static DROPPED: AtomicUsize = AtomicUsize::new(0);
    struct Counted;
    impl Drop for Counted {
        fn drop(&mut self) {
            DROPPED.fetch_add(1, SeqCst);
        }
    }
    const N: usize = 20_000;
    let rcu = Rcu::builder().callback_workers(1).build().unwrap();
    let (release, held) = std::sync::mpsc::channel::<()>();
    let holding = std::sync::Arc::new(AtomicBool::new(false));
    {
        let holding = holding.clone();
        rcu.call(move || {
            holding.store(true, SeqCst);
            let _ = held.recv();
        });
    }
    while !holding.load(SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let map: RcuHashMap<usize, Counted, RandomState, &Rcu> =
        RcuHashMap::builder().domain(&rcu).build().unwrap();
    for k in 0..N {
        map.pin().insert(k, Counted);
    }
    for k in 0..N {
        map.pin().remove(&k); // the shrinks on the way down ask for trims
    }
    // Later retires of this thread free what it retired before, once a grace period has
    // passed (a few per retire); bounded, so that a value stuck with the worker fails here.
    for _ in 0..200 {
        if DROPPED.load(SeqCst) == N {
            break;
        }
        rcu.synchronize();
        for _ in 0..1_000 {
            rcu.retire(Box::new(0u8));
        }
    }
    assert_eq!(
        DROPPED.load(SeqCst),
        N,
        "removed values left waiting for the worker"
    );
    release.send(()).unwrap();
    drop(map);
    rcu.barrier();
}

/// A map with a hasher other than std's is made by `Default` too (as std's `HashMap` with any
/// `S: Default`), with that hasher's default.
#[test]
fn a_map_with_any_default_hasher_is_default() {
    let map: RcuHashMap<u64, u64, Clumpy> = Default::default();
    for k in 0..100 {
        map.pin().insert(k, k + 1);
    }
    assert!((0..100).all(|k| map.pin().get(&k) == Some(&(k + 1))));
    let plain: RcuHashMap<u64, u64> = RcuHashMap::default();
    assert!(plain.is_empty());
}

/// `clear()` racing writers whose inserts keep the table growing: a clear walks the table
/// being grown into as well as the current one, and a mover fills that table's buckets without
/// their locks (each has one source, which the mover holds). A clear that locked and emptied
/// such a bucket before its source moved raced the mover: a lane's pointer and tag written by
/// one and cleared by the other (an entry left in no lane: never dropped, and counted by
/// `len()` but not by an iteration), or a lock bit lost in the state word. Every value is
/// dropped exactly once, and `len()` matches an iteration once the writers stop. (Debug builds
/// also assert in the mover that nobody reached the bucket.)
#[test]
fn clear_racing_a_growing_table_loses_and_leaks_nothing() {
    let made = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    let map: Arc<RcuHashMap<u64, Counted, InGroups>> = Arc::new(RcuHashMap::with_hasher(InGroups));
    let stop = Arc::new(AtomicBool::new(false));
    // Each thread reports how it ended: a panicking mover leaves its source bucket changing,
    // and a thread waiting for that bucket would never be joined.
    let (ended, endings) = std::sync::mpsc::channel();
    let mut writers = Vec::new();
    for t in 0..2u64 {
        let (map, made, dropped) = (Arc::clone(&map), Arc::clone(&made), Arc::clone(&dropped));
        let ended = ended.clone();
        writers.push(thread::spawn(move || {
            let inserted = catch_unwind(AssertUnwindSafe(|| {
                let first = t << 40;
                for key in first..first + scale(200_000, 2_000) as u64 {
                    made.fetch_add(1, SeqCst);
                    map.pin().insert(key, Counted(key, Arc::clone(&dropped)));
                }
            }));
            ended.send(inserted.is_ok()).unwrap();
        }));
    }
    let clearer = {
        let (map, stop) = (Arc::clone(&map), Arc::clone(&stop));
        thread::spawn(move || {
            while !stop.load(SeqCst) {
                // A pause lets the table grow to some hundreds of buckets between clears,
                // so that a clear often meets a resize under way.
                thread::sleep(Duration::from_micros(200));
                map.clear();
            }
        })
    };
    for _ in 0..2 {
        assert!(endings.recv().unwrap(), "a writer panicked");
    }
    for writer in writers {
        writer.join().unwrap();
    }
    stop.store(true, SeqCst);
    clearer.join().unwrap();
    let (len, counted) = {
        let guard = map.domain().read();
        (map.len(), map.iter(&guard).count())
    };
    assert_eq!(len, counted, "len() and an iteration disagree");
    let map = Arc::try_unwrap(map).expect("every thread has let go");
    drop(map);
    Rcu::global().barrier();
    assert_eq!(
        dropped.load(SeqCst),
        made.load(SeqCst),
        "every value dropped exactly once"
    );
}

/// A hasher that gives each run of 32 consecutive `u64` keys one hash: buckets of 32 entries
/// (seven lines), whose moves take long.
#[derive(Clone, Default)]
struct InGroups;
struct InGroupsHasher(u64);
impl BuildHasher for InGroups {
    type Hasher = InGroupsHasher;
    fn build_hasher(&self) -> InGroupsHasher {
        InGroupsHasher(0)
    }
}
impl Hasher for InGroupsHasher {
    fn finish(&self) -> u64 {
        (self.0 >> 5).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("keys are u64")
    }
    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }
}
