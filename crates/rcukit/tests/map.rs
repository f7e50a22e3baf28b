//! `RcuHashMap`: the API against `std::collections::HashMap`, drops, concurrency across
//! grow/shrink cycles, and user code that re-enters the map.

use proptest::prelude::*;
use rcukit::{Rcu, RcuHashMap};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
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

fn domain() -> Arc<Rcu> {
    Arc::new(Rcu::builder().build().unwrap())
}

#[test]
fn the_basic_api_behaves_like_a_hash_map() {
    let map: RcuHashMap<String, u32> = RcuHashMap::new();
    assert!(map.is_empty());
    assert!(!map.insert("a".into(), 1));
    assert!(!map.insert("b".into(), 2));
    assert!(map.insert("a".into(), 10), "replacing returns true");
    assert_eq!(map.len(), 2);
    {
        let g = Rcu::global().read();
        assert_eq!(map.get("a", &g), Some(&10)); // Borrow<str> lookup
        assert_eq!(map.get_key_value("b", &g), Some((&"b".to_string(), &2)));
        assert!(map.contains_key("b", &g));
        assert!(!map.contains_key("c", &g));
        let mut all: Vec<_> = map.iter(&g).map(|(k, v)| (k.clone(), *v)).collect();
        all.sort();
        assert_eq!(all, [("a".into(), 10), ("b".into(), 2)]);
    }
    assert!(map.update("a", |v| v + 1));
    assert!(!map.update("zz", |_| unreachable!("absent keys do not call f")));
    assert!(map.remove("b"));
    assert!(!map.remove("b"));
    assert_eq!(map.len(), 1);
    {
        let g = Rcu::global().read();
        assert_eq!(map.get("a", &g), Some(&11));
    }
    for i in 0..100 {
        map.insert(format!("k{i}"), i);
    }
    assert_eq!(map.retain(|k, v| k == "a" || v % 2 == 0), 50);
    assert_eq!(map.len(), 51);
    map.clear();
    assert!(map.is_empty());
    let g = Rcu::global().read();
    assert_eq!(map.iter(&g).count(), 0);
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
    assert!(err.to_string().contains("half"), "{err}");
    let err = RcuHashMap::builder()
        .min_load_factor(f32::NAN)
        .build::<u32, u32>()
        .unwrap_err();
    assert_eq!(err.setting(), Some("min_load_factor"));
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
fn the_table_grows_and_shrinks_with_the_load() {
    let own = domain();
    let map = RcuHashMap::with_domain(&*own);
    assert_eq!(map.capacity(), 16);
    let n = scale(100_000, 300) as u64;
    for i in 0..n {
        map.insert(i, i);
    }
    let grown = map.capacity();
    assert!(grown as f64 >= n as f64 / 0.75 / 2.0, "grew to {grown}");
    for i in 0..n {
        assert!(map.remove(&i));
    }
    assert_eq!(map.len(), 0);
    // Removals help the shrink along; a few more writes finish it.
    for i in 0..64 {
        map.insert(i, i);
        map.remove(&i);
    }
    assert_eq!(map.capacity(), 16, "shrank back");
    let big: RcuHashMap<u64, u64> = RcuHashMap::with_capacity(1000);
    let floor = big.capacity();
    assert!(floor >= 1024);
    big.insert(1, 1);
    big.remove(&1);
    assert_eq!(big.capacity(), floor, "never below the capacity asked for");
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
    Remove(u16),
    Update(u16),
    Get(u16),
    RetainEven,
    Clear,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (0u16..300, any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        6 => (0u16..300).prop_map(Op::Remove),
        3 => (0u16..300).prop_map(Op::Update),
        4 => (0u16..300).prop_map(Op::Get),
        1 => Just(Op::RetainEven),
        1 => Just(Op::Clear),
    ]
}

fn check_against_std<S: BuildHasher>(map: &RcuHashMap<u16, u32, S>, ops: &[Op]) {
    let mut model = HashMap::new();
    for op in ops {
        match *op {
            Op::Insert(k, v) => assert_eq!(map.insert(k, v), model.insert(k, v).is_some()),
            Op::Remove(k) => assert_eq!(map.remove(&k), model.remove(&k).is_some()),
            Op::Update(k) => {
                let in_model = model.get_mut(&k).map(|v| *v = v.wrapping_add(1)).is_some();
                assert_eq!(map.update(&k, |v| v.wrapping_add(1)), in_model);
            }
            Op::Get(k) => {
                let g = Rcu::global().read();
                assert_eq!(map.get(&k, &g), model.get(&k));
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
        }
        assert_eq!(map.len(), model.len());
    }
    let g = Rcu::global().read();
    let mut seen: Vec<_> = map.iter(&g).map(|(k, v)| (*k, *v)).collect();
    seen.sort();
    let mut expected: Vec<_> = model.into_iter().collect();
    expected.sort();
    assert_eq!(seen, expected);
}

/// Fewer cases under Miri, and no regression file there (Miri's isolation has no `getcwd`).
fn proptest_config() -> ProptestConfig {
    let mut config = ProptestConfig::with_cases(if cfg!(miri) { 2 } else { 96 });
    if cfg!(miri) {
        config.failure_persistence = None;
    }
    config
}

proptest! {
    #![proptest_config(proptest_config())]

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
struct Counted(u64, Arc<AtomicUsize>);
impl Drop for Counted {
    fn drop(&mut self) {
        self.1.fetch_add(1, SeqCst);
    }
}

#[test]
fn every_value_is_dropped_exactly_once() {
    let own = domain();
    let drops = Arc::new(AtomicUsize::new(0));
    let made = scale(5000, 60);
    {
        let map = RcuHashMap::with_domain(Arc::clone(&own));
        let c = |i: usize| Counted(i as u64, Arc::clone(&drops));
        for i in 0..made {
            map.insert(i % (made / 2), c(i)); // half of them replace
        }
        for i in 0..made / 10 {
            map.remove(&i);
        }
        map.update(&(made / 2 - 1), |v| Counted(v.0 + 1, Arc::clone(&v.1)));
        map.retain(|k, _| k % 3 != 0);
        own.barrier();
        let live = map.len();
        assert_eq!(
            drops.load(SeqCst),
            made + 1 - live,
            "retired values dropped once"
        );
        // The rest goes with the map.
    }
    own.barrier();
    assert_eq!(drops.load(SeqCst), made + 1);

    // into_iter hands values out; clear retires them.
    let drops2 = Arc::new(AtomicUsize::new(0));
    let map = RcuHashMap::with_domain(Arc::clone(&own));
    for i in 0..100 {
        map.insert(i, Counted(i, Arc::clone(&drops2)));
    }
    map.clear();
    own.barrier();
    assert_eq!(drops2.load(SeqCst), 100);
    for i in 0..10 {
        map.insert(i, Counted(i, Arc::clone(&drops2)));
    }
    let taken: Vec<_> = map.into_iter().collect();
    assert_eq!(drops2.load(SeqCst), 100);
    drop(taken);
    assert_eq!(drops2.load(SeqCst), 110);
}

#[test]
fn values_removed_under_a_reader_stay_valid_until_it_leaves() {
    let own = domain();
    let drops = Arc::new(AtomicUsize::new(0));
    let map = RcuHashMap::with_domain(&*own);
    map.insert(1u32, Counted(1, Arc::clone(&drops)));
    let g = own.read();
    let v = map.get(&1, &g).unwrap();
    assert!(map.remove(&1));
    map.insert(2, Counted(2, Arc::clone(&drops)));
    assert_eq!(v.0, 1);
    assert_eq!(drops.load(SeqCst), 0, "not freed under the guard");
    drop(g);
    own.barrier();
    assert_eq!(drops.load(SeqCst), 1);
}

/// Readers look up keys present throughout while writers push the table through grow/shrink
/// cycles; every lookup must find them, with their value.
#[test]
fn keys_present_throughout_are_always_found_across_grow_and_shrink_cycles() {
    let own = domain();
    let map = Arc::new(RcuHashMap::with_domain(Arc::clone(&own)));
    let stable = scale(1000, 8) as u64;
    for k in 0..stable {
        map.insert(k, k * 3);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let lookups = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (map, stop, lookups) = (Arc::clone(&map), Arc::clone(&stop), Arc::clone(&lookups));
            thread::spawn(move || {
                let mut k = r as u64;
                let mut n = 0;
                while !stop.load(Relaxed) {
                    let g = map.domain().read();
                    for _ in 0..64 {
                        k = (k + 7) % stable;
                        assert_eq!(map.get(&k, &g), Some(&(k * 3)), "key {k} missed");
                        n += 1;
                    }
                    // An iteration sees each stable key once, even across a resize.
                    if n % 4096 == 0 {
                        let mut seen: Vec<u64> = map
                            .iter(&g)
                            .map(|(k, _)| *k)
                            .filter(|k| *k < stable)
                            .collect();
                        seen.sort_unstable();
                        assert_eq!(seen, (0..stable).collect::<Vec<_>>(), "iteration");
                    }
                }
                lookups.fetch_add(n, Relaxed);
            })
        })
        .collect();
    let churn = scale(100_000, 200) as u64;
    let cycles = scale(3, 1);
    let mut peak = 0;
    let mut floors = Vec::new();
    for cycle in 0..cycles {
        for k in 0..churn {
            map.insert(stable + k, cycle as u64);
        }
        peak = peak.max(map.capacity());
        for k in 0..churn {
            assert!(map.remove(&(stable + k)));
        }
        for k in 0..64 {
            // extra writes finish the shrink
            map.insert(u64::MAX - k, 0);
            map.remove(&(u64::MAX - k));
        }
        floors.push(map.capacity());
    }
    stop.store(true, Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert!(peak >= scale(131_072, 256), "grew to {peak}");
    assert!(
        floors.iter().all(|&f| f <= 2048),
        "shrank back each cycle: {floors:?}"
    );
    assert!(lookups.load(Relaxed) > 0);
    assert_eq!(map.len(), stable as usize);
}

/// Values replaced under readers: a reader sees one consistent version of each entry.
#[test]
fn values_replaced_under_readers_are_whole_versions() {
    let own = domain();
    let map = Arc::new(RcuHashMap::with_domain(Arc::clone(&own)));
    let keys = scale(64, 4) as u64;
    for k in 0..keys {
        map.insert(k, (k, 0u64, vec![k; 4]));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (map, stop) = (Arc::clone(&map), Arc::clone(&stop));
        thread::spawn(move || {
            let mut k = 0;
            while !stop.load(Relaxed) {
                let g = map.domain().read();
                let (key, version, payload) = map.get(&k, &g).expect("always present");
                assert_eq!(*key, k);
                assert_eq!(payload, &vec![k + version; 4], "a torn or freed value");
                k = (k + 1) % keys;
            }
        })
    };
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let map = Arc::clone(&map);
            thread::spawn(move || {
                for round in 0..scale(20_000, 20) as u64 {
                    let k = (round * 2 + w) % keys;
                    if round % 2 == 0 {
                        map.update(&k, |(k, v, _)| (*k, v + 1, vec![k + v + 1; 4]));
                    } else {
                        map.insert(k, (k, round, vec![k + round; 4]));
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
}

/// Concurrent updates of one key serialize: no increment is lost.
#[test]
fn concurrent_updates_of_one_key_lose_nothing() {
    let map = Arc::new(RcuHashMap::<u32, u64>::new());
    map.insert(0, 0);
    let per = scale(20_000, 30);
    let threads: Vec<_> = (0..3)
        .map(|t| {
            let map = Arc::clone(&map);
            thread::spawn(move || {
                for i in 0..per {
                    assert!(map.update(&0, |v| v + 1));
                    // Other keys in the same and other buckets keep writers busy.
                    map.insert(1 + (t * per + i) as u32 % 512, 0);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let g = Rcu::global().read();
    assert_eq!(map.get(&0, &g), Some(&(3 * per as u64)));
}

/// A value whose `Drop` writes to the map it lived in, keys whose `Eq` reads it: user code
/// re-entering the map must neither deadlock nor corrupt it.
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
                    // Writes from inside the drop of one of its own values.
                    map.insert(
                        Key(10_000 + self.id, None),
                        Reentrant {
                            map: Arc::clone(&self.map),
                            id: 1000 + self.id,
                        },
                    );
                    map.remove(&Key(10_000 + self.id, None));
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
                side.insert(self.0, other.0);
                let g = side.domain().read();
                assert!(side.get(&self.0, &g).is_some());
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

    let watchdog = thread::spawn(|| {
        let slot = Arc::new(Mutex::new(None));
        let map = Arc::new(RcuHashMap::new());
        *slot.lock().unwrap() = Some(Arc::clone(&map));
        let side = Arc::new(RcuHashMap::new());
        for i in 0..scale(300, 20) as u32 {
            let key = Key(i % 50, Some(Arc::clone(&side)));
            map.insert(
                key.clone(),
                Reentrant {
                    map: Arc::clone(&slot),
                    id: i,
                },
            );
            map.update(&key, |v| Reentrant {
                map: Arc::clone(&v.map),
                id: v.id + 1,
            });
            if i % 3 == 0 {
                map.remove(&key);
            }
        }
        map.retain(|k, _| k.0 % 2 == 0);
        Rcu::global().barrier();
        *slot.lock().unwrap() = None; // break the cycle
        map.clear();
        Rcu::global().barrier();
    });
    let start = Instant::now();
    while !watchdog.is_finished() {
        assert!(start.elapsed() < Duration::from_secs(120), "deadlock");
        thread::sleep(Duration::from_millis(10));
    }
    watchdog.join().unwrap();
}

/// A panicking `Hash`, `Eq` or update closure leaves the map as it was.
#[test]
fn panics_in_user_code_leave_the_map_unchanged() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    let map: RcuHashMap<u32, String> = RcuHashMap::new();
    map.insert(1, "one".into());
    let r = catch_unwind(AssertUnwindSafe(|| {
        map.update(&1, |_| panic!("boom"));
    }));
    assert!(r.is_err());
    let r = catch_unwind(AssertUnwindSafe(|| map.retain(|_, _| panic!("boom"))));
    assert!(r.is_err());
    // Still fully usable: no lock left held, nothing half-linked.
    assert!(map.insert(1, "uno".into()));
    map.insert(2, "two".into());
    let g = Rcu::global().read();
    assert_eq!(map.get(&1, &g).map(String::as_str), Some("uno"));
    assert_eq!(map.len(), 2);
}

#[test]
fn the_map_is_send_and_sync_when_its_entries_are() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<RcuHashMap<String, Vec<u8>>>();
    send_sync::<RcuHashMap<u32, u32, std::collections::hash_map::RandomState, Arc<Rcu>>>();
}

/// A `retain` whose closure panics part-way retires what it had removed by then (nothing is
/// leaked) and leaves the rest in the map.
#[test]
fn a_panicking_retain_retires_what_it_removed() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    let own = domain();
    let drops = Arc::new(AtomicUsize::new(0));
    let map = RcuHashMap::with_domain(&*own);
    for i in 0..100 {
        map.insert(i, Counted(i, Arc::clone(&drops)));
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
    own.barrier();
    assert_eq!(
        drops.load(SeqCst),
        50,
        "the removed half was retired, not leaked"
    );
    drop(map);
    assert_eq!(drops.load(SeqCst), 100);
}

/// Grow the map to 16 times its capacity and shrink it back, `cycles` times, with keys above
/// `base` (which the caller's entries never use).
fn grow_and_shrink(
    map: &RcuHashMap<u64, u64, std::collections::hash_map::RandomState, Arc<Rcu>>,
    base: u64,
    cycles: usize,
) {
    for _ in 0..cycles {
        let start = map.capacity();
        let mut k = base;
        while map.capacity() < 16 * start {
            map.insert(k, 0);
            k += 1;
        }
        for j in base..k {
            assert!(map.remove(&j));
        }
        // More writes finish the shrink.
        for j in 0..256 {
            map.insert(base + j, 0);
            map.remove(&(base + j));
        }
    }
}

/// An iteration that yields one entry and then waits while the table grows and shrinks many
/// times still finishes, and yields each entry present throughout exactly once. (An iterator
/// that walked every table its buckets had moved through, without merging the walks, took
/// time exponential in the number of resizes: 37 s after five cycles.)
#[test]
fn an_iteration_held_across_many_resizes_finishes_and_yields_each_entry_once() {
    let own = domain();
    let map = Arc::new(RcuHashMap::with_domain(Arc::clone(&own)));
    let stable = scale(1000, 8) as u64;
    for k in 0..stable {
        map.insert(k, k);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let cycles = scale(8, 2);
    let runner = {
        let map = Arc::clone(&map);
        thread::spawn(move || {
            let g = map.domain().read();
            let mut it = map.iter(&g);
            let mut seen = vec![*it.next().unwrap().0];
            // Let the writer resize the map while this iteration is under way.
            let (go, done) = std::sync::mpsc::channel::<()>();
            tx.send(go).unwrap();
            done.recv().unwrap();
            seen.extend(it.map(|(k, _)| *k).filter(|k| *k < stable));
            seen.sort_unstable();
            seen
        })
    };
    let go = rx.recv().unwrap();
    grow_and_shrink(&map, 1 << 32, cycles);
    go.send(()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !runner.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the iteration hung after {cycles} resize cycles"
        );
        thread::sleep(Duration::from_millis(10));
    }
    let seen = runner.join().unwrap();
    assert_eq!(
        seen,
        (0..stable).collect::<Vec<_>>(),
        "each entry exactly once"
    );
}
