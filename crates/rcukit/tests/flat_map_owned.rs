//! `RcuFlatMap` with keys and values that own memory and run code of their own (`Clone`,
//! `Drop`): the API against `std::collections::HashMap` with every entry counted (each made is
//! dropped exactly once), readers that read owned values while the writer rebuilds the table
//! (under guards of an `Rcu` domain in both fence modes, and as online threads of a QSBR
//! domain), values borrowed from writes for a guard, and `Clone`s and `Drop`s that panic or
//! write the map.

mod common;

use common::flat::{op, scale, Op};

use proptest::prelude::*;
use rcukit::flat_map::{Compute, Operation};
use rcukit::{AnyDomainRef, FenceKind, Qsbr, Rcu, RcuFlatMap};
use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering::*};
use std::sync::Arc;

type OnDomain<K, V> = RcuFlatMap<K, V, RandomState, Arc<Rcu>>;

fn map_on<K, V>(rcu: &Arc<Rcu>) -> OnDomain<K, V>
where
    K: Clone + Send + 'static,
    V: Clone + Send + 'static,
{
    RcuFlatMap::with_capacity_hasher_in(0, RandomState::new(), Arc::clone(rcu))
}

/// The values made and not yet dropped, per test.
#[derive(Default)]
struct Ledger {
    live: AtomicIsize,
    clones: AtomicUsize,
    /// A clone panics once this many more have been made (0: never).
    panic_after: AtomicUsize,
}

/// A value that owns memory (its text) and counts itself in a ledger.
struct Counted {
    text: String,
    ledger: Arc<Ledger>,
}

impl Counted {
    fn new(text: impl Into<String>, ledger: &Arc<Ledger>) -> Counted {
        ledger.live.fetch_add(1, SeqCst);
        Counted {
            text: text.into(),
            ledger: Arc::clone(ledger),
        }
    }
}

impl Clone for Counted {
    fn clone(&self) -> Counted {
        let n = self.ledger.clones.fetch_add(1, SeqCst) + 1;
        if n == self.ledger.panic_after.load(SeqCst) {
            panic!("clone number {n} fails");
        }
        Counted::new(self.text.clone(), &self.ledger)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.ledger.live.fetch_sub(1, SeqCst);
    }
}

impl PartialEq for Counted {
    fn eq(&self, other: &Counted) -> bool {
        self.text == other.text
    }
}

impl std::fmt::Debug for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.text.fmt(f)
    }
}

/// Drop the map and wait for the tables it retired: every value it held is dropped then.
fn drop_and_settle<K: Clone + Send + 'static, V: Clone + Send + 'static>(
    map: OnDomain<K, V>,
    rcu: &Rcu,
) {
    drop(map);
    rcu.barrier();
    rcu.barrier();
}

#[test]
fn the_api_with_owned_keys_and_values() {
    let rcu = Arc::new(Rcu::new());
    let map: OnDomain<String, Vec<u32>> = map_on(&rcu);
    assert_eq!(map.insert("a".into(), vec![1]), None);
    assert_eq!(map.insert("a".into(), vec![1, 2]), Some(vec![1]));
    assert_eq!(map.try_insert("a".into(), vec![9]), Err(vec![1, 2]));
    assert_eq!(map.try_insert("b".into(), vec![3]), Ok(()));
    assert_eq!(map.get_or_insert_with("c".into(), || vec![4]), vec![4]);
    assert_eq!(
        map.get_or_insert_with("c".into(), || unreachable!()),
        vec![4]
    );
    assert_eq!(
        map.update("a", |mut v| {
            v.push(3);
            v
        }),
        Some(vec![1, 2, 3])
    );
    assert_eq!(map.update("zz", |_| unreachable!()), None);
    assert_eq!(
        map.update_or_insert_with("d".into(), |_| unreachable!(), || vec![5]),
        vec![5]
    );
    assert_eq!(
        map.update_or_insert_with("d".into(), |v| [v, vec![6]].concat(), || unreachable!()),
        vec![5, 6]
    );
    {
        // Lookups by `&str`, through `Borrow`.
        let guard = map.domain().read();
        assert_eq!(map.get("a", &guard), Some(&vec![1, 2, 3]));
        assert_eq!(
            map.get_key_value("b", &guard),
            Some((&"b".to_string(), &vec![3]))
        );
        assert!(map.contains_key("c", &guard));
        let mut keys: Vec<&String> = map.keys(&guard).collect();
        keys.sort();
        assert_eq!(keys, ["a", "b", "c", "d"]);
        assert_eq!(map.values(&guard).map(Vec::len).sum::<usize>(), 7);
    }
    assert_eq!(map.get_cloned("d"), Some(vec![5, 6]));
    assert_eq!(map.remove("b"), Some(vec![3]));
    assert_eq!(map.remove_if("c", |_, v| v.is_empty()), None);
    assert_eq!(
        map.remove_if("c", |k, _| k == "c"),
        Some(("c".into(), vec![4]))
    );
    map.retain(|k, _| k != "d");
    assert_eq!(map.len(), 1);
    let copy = map.clone();
    assert_eq!(copy, map);
    assert_eq!(format!("{copy:?}"), r#"{"a": [1, 2, 3]}"#);
    map.clear();
    assert!(map.is_empty());
    assert_ne!(copy, map);
    let built: RcuFlatMap<String, String> =
        [("x".to_string(), "y".to_string())].into_iter().collect();
    assert_eq!(built.get_cloned("x").as_deref(), Some("y"));
}

/// The model's value: the text of the map's.
fn text(v: Option<Counted>) -> Option<String> {
    v.map(|c| c.text.clone())
}

fn check_against_std(ops: &[Op]) {
    let rcu = Arc::new(Rcu::new());
    let ledger = Arc::new(Ledger::default());
    let map: OnDomain<String, Counted> = map_on(&rcu);
    let mut model: HashMap<String, String> = HashMap::new();
    let value = |v: u16| Counted::new(format!("value {v}"), &ledger);
    for op in ops {
        match *op {
            Op::Insert(k, v) => assert_eq!(
                text(map.insert(k.to_string(), value(v))),
                model.insert(k.to_string(), format!("value {v}"))
            ),
            Op::TryInsert(k, v) => {
                let expected = match model.get(&k.to_string()) {
                    Some(c) => Err(c.clone()),
                    None => {
                        model.insert(k.to_string(), format!("value {v}"));
                        Ok(())
                    }
                };
                let got = map
                    .try_insert(k.to_string(), value(v))
                    .map_err(|c| c.text.clone());
                assert_eq!(got, expected);
            }
            Op::Remove(k) => assert_eq!(
                text(map.remove(k.to_string().as_str())),
                model.remove(&k.to_string())
            ),
            Op::RemoveIf(k, v) => {
                let odd = |t: &str| t.len() % 2 == v as usize % 2;
                let hit = model.get(&k.to_string()).is_some_and(|c| odd(c));
                let expected = if hit {
                    model.remove_entry(&k.to_string())
                } else {
                    None
                };
                let got = map.remove_if(k.to_string().as_str(), |_, c| odd(&c.text));
                assert_eq!(got.map(|(k, c)| (k, c.text.clone())), expected);
            }
            Op::Update(k) => {
                let expected = model.get_mut(&k.to_string()).map(|v| {
                    v.push('!');
                    v.clone()
                });
                let got = map.update(k.to_string().as_str(), |mut c| {
                    c.text.push('!');
                    c
                });
                assert_eq!(text(got), expected);
            }
            Op::GetOrInsert(k, v) => {
                let expected = model
                    .entry(k.to_string())
                    .or_insert(format!("value {v}"))
                    .clone();
                let got = map.get_or_insert_with(k.to_string(), || value(v));
                assert_eq!(got.text, expected);
            }
            Op::Retain(m) => {
                let m = m | 1;
                let keep = |k: &String| k.parse::<u8>().unwrap() % m != 0;
                model.retain(|k, _| keep(k));
                map.retain(|k, _| keep(k));
            }
            Op::Clear => {
                model.clear();
                map.clear();
            }
            Op::Reserve(n) => map.reserve(n as usize * 4),
            Op::UpdateOrInsert(k, v) => {
                let now = model
                    .entry(k.to_string())
                    .and_modify(|c| c.push('+'))
                    .or_insert(format!("value {v}"))
                    .clone();
                let got = map.update_or_insert_with(
                    k.to_string(),
                    |mut c| {
                        c.text.push('+');
                        c
                    },
                    || value(v),
                );
                assert_eq!(got.text, now);
            }
            Op::ShrinkToFit => map.shrink_to_fit(),
            Op::InsertBorrowed(k, v) => {
                let guard = map.domain().read();
                let old = map.insert_borrowed(k.to_string(), value(v), &guard);
                assert_eq!(
                    old.map(|c| c.text.clone()),
                    model.insert(k.to_string(), format!("value {v}"))
                );
            }
            Op::RemoveBorrowed(k) => {
                let guard = map.domain().read();
                let old = map.remove_borrowed(k.to_string().as_str(), &guard);
                assert_eq!(old.map(|c| c.text.clone()), model.remove(&k.to_string()));
            }
            Op::CloneMap => {
                let copy = map.clone();
                assert!(copy == map);
                drop_and_settle(copy, &rcu);
            }
            Op::Compute(k, v) => {
                let key = k.to_string();
                let guard = map.domain().read();
                let got = map.compute(
                    key.clone(),
                    |entry| match v % 4 {
                        0 => Operation::Remove,
                        1 => Operation::Abort(v),
                        _ => Operation::Insert(match entry {
                            Some((_, c)) => Counted::new(format!("{}+", c.text), &ledger),
                            None => value(v),
                        }),
                    },
                    &guard,
                );
                // What it did, as (what, the key, the old text, the new text).
                let got = match got {
                    Compute::Inserted(k, c) => ("inserted", k.clone(), None, Some(c.text.clone())),
                    Compute::Updated { old, new } => {
                        assert_eq!(old.0, new.0);
                        let (o, n) = (old.1.text.clone(), new.1.text.clone());
                        ("updated", new.0.clone(), Some(o), Some(n))
                    }
                    Compute::Removed(k, c) => ("removed", k.clone(), Some(c.text.clone()), None),
                    Compute::Absent => ("absent", key.clone(), None, None),
                    Compute::Aborted(a) => {
                        assert_eq!(a, v);
                        ("aborted", key.clone(), model.get(&key).cloned(), None)
                    }
                };
                let old = model.get(&key).cloned();
                let expected = match (v % 4, old) {
                    (0, Some(o)) => ("removed", key.clone(), Some(o), None),
                    (0, None) => ("absent", key.clone(), None, None),
                    (1, o) => ("aborted", key.clone(), o, None),
                    (_, Some(o)) => (
                        "updated",
                        key.clone(),
                        Some(o.clone()),
                        Some(format!("{o}+")),
                    ),
                    (_, None) => ("inserted", key.clone(), None, Some(format!("value {v}"))),
                };
                assert_eq!(got, expected);
                match (v % 4, expected.3) {
                    (0, _) => drop(model.remove(&key)),
                    (_, Some(new)) => drop(model.insert(key, new)),
                    _ => {}
                }
            }
        }
        assert_eq!(map.len(), model.len());
    }
    {
        let guard = map.domain().read();
        let mut seen = HashMap::new();
        for (k, v) in map.iter(&guard) {
            assert!(
                seen.insert(k.clone(), v.text.clone()).is_none(),
                "key {k} yielded twice"
            );
        }
        assert_eq!(seen, model);
    }
    drop_and_settle(map, &rcu);
    assert_eq!(ledger.live.load(SeqCst), 0, "every value dropped once");
}

proptest! {
    #![proptest_config(common::support::proptest_config(64))]

    #[test]
    fn sequences_of_operations_match_std_hashmap_and_drop_every_value_once(
        ops in proptest::collection::vec(op(), 0..scale(400, 30))
    ) {
        check_against_std(&ops);
    }
}

/// A value of `len` bytes, each `byte`: a reader that read freed memory, or a value half
/// written, would see other bytes or another length.
fn filled(byte: u8, len: usize) -> Vec<u8> {
    vec![byte; len]
}

fn check_filled(v: &[u8], key: u64) {
    let byte = (key % 251) as u8;
    assert!(
        v.len() >= 8 && v.iter().all(|&b| b == byte),
        "key {key}: a value of {} bytes, not all {byte}",
        v.len()
    );
}

/// Keys `0..STABLE` stay in the map throughout (their values replaced); churn keys from
/// `1_000` come and go.
const STABLE: u64 = 64;

/// One pass of a reader over the stable keys and the first churn keys, with `get` as the
/// reader's section gives it: every stable key is found, every value found is whole.
fn read_pass<'g>(get: impl Fn(u64) -> Option<&'g Vec<u8>>) -> u64 {
    for k in 0..STABLE {
        check_filled(get(k).expect("a stable key is missing"), k);
    }
    // Values of churn keys may come and go; those found are whole.
    for k in 1_000..1_064 {
        if let Some(v) = get(k) {
            check_filled(v, k);
        }
    }
    STABLE
}

/// The writer: rounds (`RCUKIT_FLAT_ROUNDS`, for a long stress run) of inserting thousands of
/// churn keys with values of many lengths, replacing stable keys' values meanwhile, and
/// removing the churn keys again: the table grows, is rebuilt and shrinks, over and over.
fn churn<D: AnyDomainRef>(map: &ValuesMap<D>) {
    let rounds = std::env::var("RCUKIT_FLAT_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(scale(30, 2));
    for round in 0..rounds {
        for i in 0..scale(3_000, 150) as u64 {
            let k = 1_000 + i;
            map.insert(k, filled((k % 251) as u8, 8 + (i as usize % 40)));
            if i % 13 == 0 {
                // Replace a stable key's value with a new allocation of a new length.
                let k = i % STABLE;
                map.insert(k, filled((k % 251) as u8, 8 + round % 50));
            }
        }
        for i in 0..scale(3_000, 150) as u64 {
            assert!(map.remove(&(1_000 + i)).is_some());
        }
    }
    assert_eq!(map.len(), STABLE as usize);
}

fn fences() -> &'static [FenceKind] {
    // Miri has no membarrier: the `SeqCst` mode only there.
    if cfg!(miri) {
        &[FenceKind::SeqCst]
    } else {
        &[FenceKind::Membarrier, FenceKind::SeqCst]
    }
}

type ValuesMap<D> = RcuFlatMap<u64, Vec<u8>, RandomState, D>;

/// The stable keys with their first values, then three readers running `reader` (which reads
/// until told to stop and returns its count of lookups) beside [`churn`] on this thread.
fn readers_beside_churn<D>(
    map: ValuesMap<D>,
    reader: impl Fn(&ValuesMap<D>, &AtomicBool) -> u64 + Send + Sync + 'static,
) where
    D: AnyDomainRef + Send + Sync + 'static,
{
    let map = Arc::new(map);
    for k in 0..STABLE {
        map.insert(k, filled((k % 251) as u8, 8));
    }
    let (stop, reader) = (Arc::new(AtomicBool::new(false)), Arc::new(reader));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (map, stop, reader) = (map.clone(), stop.clone(), reader.clone());
            std::thread::spawn(move || reader(&map, &stop))
        })
        .collect();
    churn(&map);
    stop.store(true, Relaxed);
    for r in readers {
        assert!(r.join().expect("a reader failed") > 0);
    }
}

#[test]
fn readers_read_owned_values_while_the_writer_rebuilds_replaces_and_removes() {
    for &fence in fences() {
        let rcu = Arc::new(Rcu::builder().fence(fence).build().unwrap());
        readers_beside_churn(map_on(&rcu), |map, stop| {
            let mut n = 0;
            // At least one pass, however late a loaded machine starts this thread.
            while !stop.load(Relaxed) || n == 0 {
                let guard = map.domain().read();
                n += read_pass(|k| map.get(&k, &guard));
            }
            n
        });
    }
}

#[test]
fn qsbr_readers_read_owned_values_while_the_writer_rebuilds_replaces_and_removes() {
    for fenced in [false, true] {
        let qsbr = Qsbr::builder()
            .fenced_quiescent_states(fenced)
            .build()
            .unwrap();
        readers_beside_churn(RcuFlatMap::new_in(Arc::new(qsbr)), |map, stop| {
            let mut me = map.domain().register();
            let mut n = 0;
            // At least one pass, however late a loaded machine starts this thread.
            while !stop.load(Relaxed) || n == 0 {
                n += read_pass(|k| map.get(&k, &me));
                // No reference into the map is held here.
                me.quiescent_state();
            }
            n
        });
    }
}

#[test]
fn a_clone_that_panics_in_a_rebuild_leaves_the_map_as_it_was_and_leaks_nothing() {
    let rcu = Arc::new(Rcu::new());
    let ledger = Arc::new(Ledger::default());
    let map: OnDomain<u32, Counted> = map_on(&rcu);
    let mut k = 0u32;
    let mut failed = false;
    // Insert until a rebuild runs into the failing clone, part-way through its copy.
    while !failed {
        let before = map.len();
        ledger.clones.store(0, SeqCst);
        ledger.panic_after.store(before / 2 + 1, SeqCst);
        let r = catch_unwind(AssertUnwindSafe(|| {
            map.insert(k, Counted::new(format!("v{k}"), &ledger))
        }));
        ledger.panic_after.store(0, SeqCst);
        match r {
            Ok(None) => k += 1,
            Ok(Some(_)) => unreachable!("a new key each time"),
            Err(_) => {
                failed = true;
                assert_eq!(map.len(), before, "the failed insert changed nothing");
            }
        }
    }
    // Everything inserted before is there, and the map still works (its lock was let go).
    for j in 0..k {
        assert_eq!(
            map.get_cloned(&j).map(|c| c.text.clone()),
            Some(format!("v{j}"))
        );
    }
    assert_eq!(map.get_cloned(&k), None);
    assert_eq!(map.insert(k, Counted::new("late", &ledger)), None);
    assert_eq!(map.len(), k as usize + 1);
    drop_and_settle(map, &rcu);
    assert_eq!(
        ledger.live.load(SeqCst),
        0,
        "the clones of the abandoned table, the value that was not inserted and the map's \
         values were all dropped"
    );
}

/// A removal that leaves the table sparse rebuilds it smaller, cloning the live entries; a
/// `Clone` that panics there leaves the map as it was, the entry still in it, whichever call
/// removed (`remove`, which clones the value it returns first, `compute`, which clones
/// nothing itself, `remove_if`). (With the entry buried before the shrink, the call panicked
/// with the entry already gone.)
#[test]
fn a_clone_that_panics_in_the_shrink_of_a_removal_leaves_the_entry_in_the_map() {
    let rcu = Arc::new(Rcu::new());
    let ledger = Arc::new(Ledger::default());
    let map: OnDomain<u32, Counted> = map_on(&rcu);
    let n = 1_000u32;
    for k in 0..n {
        map.insert(k, Counted::new(format!("v{k}"), &ledger));
    }
    // Remove keys in turn, each call's clones counted from zero and the one past those the
    // call makes itself made to panic: only a shrink's clone can be that one.
    let mut shrinks_failed = 0;
    for k in 0..n {
        let before = map.len();
        let removed = match k % 3 {
            0 => call_failing(&ledger, 2, || map.remove(&k).map(|v| v.text.clone())),
            1 => call_failing(&ledger, 1, || {
                let guard = map.domain().read();
                match map.compute(k, |_| Operation::<Counted, ()>::Remove, &guard) {
                    Compute::Removed(_, v) => Some(v.text.clone()),
                    _ => None,
                }
            }),
            _ => call_failing(&ledger, 2, || {
                map.remove_if(&k, |_, _| true).map(|(_, v)| v.text.clone())
            }),
        };
        match removed {
            Ok(v) => {
                assert_eq!(v, Some(format!("v{k}")));
                assert_eq!(map.len(), before - 1);
            }
            Err(()) => {
                shrinks_failed += 1;
                assert_eq!(map.len(), before, "a failed removal changed the count");
                assert_eq!(
                    map.get_cloned(&k).map(|c| c.text.clone()),
                    Some(format!("v{k}")),
                    "a failed removal took the entry"
                );
                // Without a failing clone the same removal goes through (and shrinks).
                assert_eq!(
                    map.remove(&k).map(|c| c.text.clone()),
                    Some(format!("v{k}"))
                );
            }
        }
    }
    assert!(shrinks_failed > 0, "no removal shrank the table");
    assert!(map.is_empty());
    drop_and_settle(map, &rcu);
    assert_eq!(ledger.live.load(SeqCst), 0, "every value and clone dropped");
}

/// Run `call` with the `panic_at`-th clone (counted from zero now) made to panic: its result,
/// or `Err` if it panicked.
fn call_failing<R>(ledger: &Ledger, panic_at: usize, call: impl FnOnce() -> R) -> Result<R, ()> {
    ledger.clones.store(0, SeqCst);
    ledger.panic_after.store(panic_at, SeqCst);
    let r = catch_unwind(AssertUnwindSafe(call));
    ledger.panic_after.store(0, SeqCst);
    r.map_err(|_| ())
}

thread_local! {
    /// The map a `Meddler` writes when it is cloned.
    static MEDDLED: Cell<*const RcuFlatMap<u32, Meddler>> = const { Cell::new(std::ptr::null()) };
}

/// A value whose `Clone` writes the map it is in.
#[derive(Debug)]
struct Meddler;

impl Clone for Meddler {
    fn clone(&self) -> Meddler {
        let map = MEDDLED.with(Cell::get);
        if !map.is_null() {
            // SAFETY: the test sets the pointer while the map is alive and clears it after.
            unsafe { &*map }.insert(u32::MAX, Meddler);
        }
        Meddler
    }
}

#[test]
fn a_clone_that_writes_the_map_panics_instead_of_deadlocking() {
    let map: RcuFlatMap<u32, Meddler> = RcuFlatMap::new();
    map.insert(1, Meddler);
    MEDDLED.with(|m| m.set(&map));
    // `insert` clones the value it replaces, under the writer lock.
    let err = catch_unwind(AssertUnwindSafe(|| map.insert(1, Meddler))).unwrap_err();
    MEDDLED.with(|m| m.set(std::ptr::null()));
    assert!(common::support::panic_message(err).contains("writer lock"));
    assert_eq!(map.len(), 1);
    assert!(map.insert(2, Meddler).is_none());
    assert_eq!(map.len(), 2);
}

/// A key or value whose drop panics, once it is armed; keys compare by their number.
#[derive(Clone)]
struct Loud {
    n: u32,
    armed: bool,
    drops: Arc<AtomicUsize>,
}

impl Drop for Loud {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
        if self.armed {
            panic!("a loud drop");
        }
    }
}

impl PartialEq for Loud {
    fn eq(&self, other: &Loud) -> bool {
        self.n == other.n
    }
}

impl Eq for Loud {}

impl std::hash::Hash for Loud {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.n.hash(h)
    }
}

#[test]
fn drops_that_panic_in_a_freed_table_still_drop_the_rest() {
    let reports = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&reports);
    let rcu = Arc::new(
        Rcu::builder()
            .on_report(move |_| {
                counted.fetch_add(1, SeqCst);
            })
            .build()
            .unwrap(),
    );
    let drops = Arc::new(AtomicUsize::new(0));
    let loud = |n, armed| Loud {
        n,
        armed,
        drops: Arc::clone(&drops),
    };
    // A retired table: both the key and the value of one entry panic in their drops.
    let map: OnDomain<Loud, Loud> = map_on(&rcu);
    for k in 0..10 {
        map.insert(loud(k, false), loud(k, false));
    }
    map.insert(loud(10, true), loud(10, true));
    let before = drops.load(SeqCst);
    map.clear();
    rcu.barrier();
    rcu.barrier();
    assert_eq!(
        drops.load(SeqCst) - before,
        22,
        "the cleared table dropped every key and value, the loud ones too"
    );
    assert_eq!(
        rcu.stats().callback_panics,
        1,
        "one panic went on to the domain"
    );
    assert!(reports.load(SeqCst) >= 1);
    // The map's own table, dropped with the map: the panic comes out of the drop, after
    // every entry was dropped, and does not abort.
    for k in 0..10 {
        map.insert(loud(k, k == 3), loud(k, k == 3));
    }
    let before = drops.load(SeqCst);
    let dropped = catch_unwind(AssertUnwindSafe(|| drop(map)));
    assert!(dropped.is_err(), "the loud drop's panic comes out");
    assert_eq!(drops.load(SeqCst) - before, 20);
}

#[test]
fn values_removed_or_replaced_without_a_clone_stay_readable_for_the_guard() {
    let rcu = Arc::new(Rcu::new());
    let ledger = Arc::new(Ledger::default());
    let map: OnDomain<u32, Counted> = map_on(&rcu);
    map.insert(1, Counted::new("first", &ledger));
    map.insert(2, Counted::new("second", &ledger));
    let guard = rcu.read();
    let clones = ledger.clones.load(SeqCst);
    let replaced = map
        .insert_borrowed(1, Counted::new("third", &ledger), &guard)
        .unwrap();
    let removed = map.remove_borrowed(&2, &guard).unwrap();
    assert_eq!(map.remove_borrowed(&2, &guard), None);
    assert_eq!(ledger.clones.load(SeqCst), clones, "no clone was made");
    // Rebuilds move the map to new tables and retire the old ones meanwhile.
    for k in 3..scale(2_000, 100) as u32 {
        map.insert(k, Counted::new("filler", &ledger));
    }
    assert_eq!(
        (replaced.text.as_str(), removed.text.as_str()),
        ("first", "second")
    );
    drop(guard);
    assert_eq!(map.get_cloned(&1).unwrap().text, "third");
    drop_and_settle(map, &rcu);
    assert_eq!(ledger.live.load(SeqCst), 0);
}

#[test]
fn a_guard_of_another_domain_is_refused_by_the_borrowed_writes() {
    let (mine, other) = (Arc::new(Rcu::new()), Rcu::new());
    let map: OnDomain<u32, String> = map_on(&mine);
    map.insert(1, "one".into());
    let foreign = other.read();
    assert!(catch_unwind(AssertUnwindSafe(|| map.remove_borrowed(&1, &foreign))).is_err());
    assert!(catch_unwind(AssertUnwindSafe(|| map.insert_borrowed(
        1,
        "uno".into(),
        &foreign
    )))
    .is_err());
    drop(foreign);
    assert_eq!(
        map.get_cloned(&1).as_deref(),
        Some("one"),
        "nothing changed"
    );
}

#[test]
fn removed_values_wait_for_their_table_and_shrink_to_fit_lets_them_go() {
    let rcu = Arc::new(Rcu::new());
    let ledger = Arc::new(Ledger::default());
    let map: OnDomain<u32, Counted> = map_on(&rcu);
    for k in 0..100 {
        map.insert(k, Counted::new("kept", &ledger));
    }
    rcu.barrier();
    let clones = ledger.clones.load(SeqCst) as isize;
    let live = ledger.live.load(SeqCst);
    let guard = rcu.read();
    for k in 0..10 {
        assert!(map.remove_borrowed(&k, &guard).is_some());
    }
    drop(guard);
    rcu.barrier();
    assert_eq!(
        ledger.live.load(SeqCst),
        live,
        "removed values stay in their table (a tombstone's slot) until it is freed"
    );
    map.shrink_to_fit();
    rcu.barrier();
    // The rebuild cloned the 90 live values; the old table, freed, dropped all 100.
    assert_eq!(ledger.clones.load(SeqCst) as isize - clones, 90);
    assert_eq!(ledger.live.load(SeqCst), live - 10);
    drop_and_settle(map, &rcu);
    assert_eq!(ledger.live.load(SeqCst), 0);
}

#[test]
fn a_removed_value_lives_while_a_reader_holds_it_and_is_dropped_once_after() {
    let rcu = Arc::new(Rcu::new());
    let ledger = Arc::new(Ledger::default());
    let map: OnDomain<u32, Counted> = map_on(&rcu);
    map.insert(1, Counted::new("held", &ledger));
    let guard = rcu.read();
    let held = map.get(&1, &guard).unwrap();
    assert_eq!(
        map.remove(&1).map(|c| c.text.clone()).as_deref(),
        Some("held")
    );
    // Rebuilds move on to new tables while the reader holds the removed value.
    for k in 2..scale(2_000, 100) as u32 {
        map.insert(k, Counted::new("filler", &ledger));
    }
    assert_eq!(held.text, "held");
    drop(guard);
    drop_and_settle(map, &rcu);
    assert_eq!(ledger.live.load(SeqCst), 0);
}
