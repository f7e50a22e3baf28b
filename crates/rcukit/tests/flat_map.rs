//! `RcuFlatMap`: the API against `std::collections::HashMap`, readers beside a writer that
//! rebuilds the table under them, iteration under rebuilds, and hostile keys and closures.

mod common;

use common::flat::{op, scale, stamp, Op};

use proptest::prelude::*;
use rcukit::flat_map::{Compute, Operation};
use rcukit::{FenceKind, Rcu, RcuFlatMap};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;

#[test]
fn the_api_in_one_thread() {
    let map: RcuFlatMap<u32, u64> = RcuFlatMap::new();
    assert!(map.is_empty());
    assert_eq!(map.insert(1, 10), None);
    assert_eq!(map.insert(1, 11), Some(10));
    assert_eq!(map.try_insert(1, 12), Err(11));
    assert_eq!(map.try_insert(2, 20), Ok(()));
    assert_eq!(map.get_or_insert_with(3, || 30), 30);
    assert_eq!(map.get_or_insert_with(3, || unreachable!()), 30);
    assert_eq!(map.update(&1, |v| v + 1), Some(12));
    assert_eq!(map.update(&9, |_| unreachable!()), None);
    assert_eq!(map.remove_if(&2, |_, v| *v == 0), None);
    assert_eq!(map.remove_if(&2, |_, v| *v == 20), Some((2, 20)));
    assert_eq!(map.len(), 2);
    let guard = map.domain().read();
    assert_eq!(map.get(&1, &guard), Some(&12));
    assert_eq!(map.get_key_value(&3, &guard), Some((&3, &30)));
    assert!(map.contains_key(&3, &guard));
    assert!(!map.contains_key(&2, &guard));
    let mut all: Vec<_> = map.iter(&guard).map(|(k, v)| (*k, *v)).collect();
    all.sort();
    assert_eq!(all, [(1, 12), (3, 30)]);
    drop(guard);
    assert_eq!(format!("{map:?}").len(), "{1: 12, 3: 30}".len());
    map.retain(|k, _| *k == 3);
    assert_eq!(map.get_copied(&3), Some(30));
    assert_eq!(map.get_copied(&1), None);
    map.clear();
    assert!(map.is_empty());
    assert_eq!(map.get_copied(&3), None);
    map.reserve(1000);
    assert!(map.capacity() >= 1000);
    let mut map: RcuFlatMap<u32, u32> = (0..100).map(|i| (i, i * 2)).collect();
    map.extend([(1000, 1), (1, 1)]);
    assert_eq!(map.len(), 101);
    assert_eq!(map.get_copied(&1), Some(1));
    assert_eq!(map.update_or_insert_with(1, |v| v + 1, || 0), 2);
    assert_eq!(map.update_or_insert_with(2000, |_| unreachable!(), || 7), 7);
    let copy = map.clone();
    assert!(copy == map);
    copy.insert(1, 0);
    assert!(copy != map);
    let guard = map.domain().read();
    let mut keys: Vec<u32> = map.keys(&guard).copied().collect();
    keys.sort();
    assert_eq!(keys.len(), 102);
    assert_eq!(keys[..3], [0, 1, 2]);
    assert_eq!(
        map.values(&guard).map(|v| *v as u64).sum::<u64>(),
        (0..100).map(|i| i * 2).sum::<u64>() - 2 + 2 + 1 + 7
    );
    drop(guard);
    let big = map.capacity();
    for k in 0..100 {
        map.remove(&k);
    }
    map.shrink_to_fit();
    assert!(
        map.capacity() < big,
        "{} after shrink_to_fit, {big} before",
        map.capacity()
    );
    assert_eq!(map.len(), 2);
    assert_eq!(map.get_copied(&2000), Some(7));
}

/// A value on a page of its own: alignment far above what the allocator gives by default.
#[repr(align(4096))]
#[derive(Clone, Debug, PartialEq)]
struct PageAligned(u64);

/// A zero-sized value that counts the copies made of it (by inserts and by rebuilds' clones)
/// and their drops.
struct ZeroSized;

static ZERO_SIZED_MADE: AtomicUsize = AtomicUsize::new(0);
static ZERO_SIZED_DROPPED: AtomicUsize = AtomicUsize::new(0);

impl ZeroSized {
    fn new() -> Self {
        ZERO_SIZED_MADE.fetch_add(1, SeqCst);
        ZeroSized
    }
}

impl Clone for ZeroSized {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl Drop for ZeroSized {
    fn drop(&mut self) {
        ZERO_SIZED_DROPPED.fetch_add(1, SeqCst);
    }
}

#[test]
fn zero_sized_and_page_aligned_entries_are_stored_found_and_dropped_once() {
    let rcu = Arc::new(Rcu::new());
    // Zero-sized keys and values: one entry at most, and it behaves as any other.
    let unit: RcuFlatMap<(), (), _, Arc<Rcu>> =
        RcuFlatMap::with_capacity_hasher_in(0, std::hash::RandomState::new(), rcu.clone());
    assert_eq!(unit.insert((), ()), None);
    assert_eq!(unit.insert((), ()), Some(()));
    assert_eq!((unit.len(), unit.get_cloned(&())), (1, Some(())));
    assert_eq!(unit.remove(&()), Some(()));
    unit.reserve(scale(1000, 50));
    unit.shrink_to_fit();
    assert!(unit.is_empty() && unit.get_cloned(&()).is_none());

    // Values aligned to 4 KiB stay aligned in the table through inserts, rebuilds and removes.
    let n = scale(2000, 40) as u64;
    let aligned: RcuFlatMap<u64, PageAligned, _, Arc<Rcu>> =
        RcuFlatMap::with_capacity_hasher_in(0, std::hash::RandomState::new(), rcu.clone());
    for i in 0..n {
        aligned.insert(i, PageAligned(i));
    }
    {
        let guard = rcu.read();
        for i in 0..n {
            let v = aligned.get(&i, &guard).unwrap();
            assert_eq!((v.0, v as *const PageAligned as usize % 4096), (i, 0));
        }
    }
    for i in 0..n {
        assert_eq!(aligned.remove(&i), Some(PageAligned(i)));
    }
    aligned.shrink_to_fit();
    assert!(aligned.is_empty());

    // Zero-sized values with drops: every copy made (inserts, the rebuilds' clones) is
    // dropped once, through removes, replacements, rebuilds and the map's own drop.
    {
        let map: RcuFlatMap<u8, ZeroSized, _, Arc<Rcu>> =
            RcuFlatMap::with_capacity_hasher_in(0, std::hash::RandomState::new(), rcu.clone());
        for _ in 0..scale(6, 2) {
            for k in 0..=u8::MAX {
                map.insert(k, ZeroSized::new());
            }
            for k in 0..=u8::MAX / 2 {
                assert!(map.remove(&k).is_some());
            }
        }
    }
    rcu.barrier();
    let made = ZERO_SIZED_MADE.load(SeqCst);
    assert!(made >= scale(6, 2) * 256);
    assert_eq!(ZERO_SIZED_DROPPED.load(SeqCst), made);
}

/// A map dropped with the frame that panicked, whose values panic in their drops with a
/// payload that panics in its own drop: every value is dropped, those panics stop in the
/// map's drop, and the frame's panic comes out. (The payloads were dropped plainly there, and
/// their panics went on out of the drop while the frame's unwound: an abort.)
#[test]
fn a_map_dropped_while_a_panic_unwinds_contains_payloads_that_panic_in_their_drops() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    struct Payload;
    impl Drop for Payload {
        fn drop(&mut self) {
            panic!("a payload's drop");
        }
    }
    #[derive(Clone)]
    struct Value;
    impl Drop for Value {
        fn drop(&mut self) {
            DROPS.fetch_add(1, SeqCst);
            std::panic::panic_any(Payload);
        }
    }
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        let map = RcuFlatMap::with_capacity(16);
        for k in 0..4u32 {
            map.insert(k, Value);
        }
        panic!("the frame's panic");
    }));
    let payload = unwound.expect_err("the frame panicked");
    assert_eq!(
        payload.downcast_ref::<&str>().copied(),
        Some("the frame's panic")
    );
    assert_eq!(DROPS.load(SeqCst), 4, "every value dropped");
}

/// A value whose `Drop` writes the map it was meant for (once armed), and whose next `Clone`
/// panics when told to (once: the write its `Drop` makes may clone).
#[derive(Debug)]
struct WritesOnDrop {
    key: u64,
    armed: bool,
}

static WRITES_ON_DROP_MAP: std::sync::OnceLock<RcuFlatMap<u64, WritesOnDrop>> =
    std::sync::OnceLock::new();
static CLONES_PANIC: AtomicBool = AtomicBool::new(false);

impl Clone for WritesOnDrop {
    fn clone(&self) -> Self {
        assert!(
            !CLONES_PANIC.swap(false, SeqCst),
            "the clone of {}",
            self.key
        );
        WritesOnDrop {
            key: self.key,
            armed: false,
        }
    }
}

impl Drop for WritesOnDrop {
    fn drop(&mut self) {
        if self.armed {
            let unarmed = WritesOnDrop {
                key: 0,
                armed: false,
            };
            WRITES_ON_DROP_MAP
                .get()
                .unwrap()
                .insert(1_000 + self.key, unarmed);
        }
    }
}

/// Writes whose user code under the writer lock panics (a `Clone` of the current value, of
/// the entries a rebuild copies): the caller's key and value are dropped after the lock is
/// released, so a value whose `Drop` writes the map does so, and the process goes on. (They
/// were dropped as the panic unwound, under the lock, where the `Drop`'s write panicked too:
/// a panic while unwinding, which aborts the process.)
#[test]
fn values_whose_drop_writes_the_map_are_dropped_after_the_lock_when_a_clone_panics() {
    let map = WRITES_ON_DROP_MAP.get_or_init(RcuFlatMap::new);
    let armed = |key| WritesOnDrop { key, armed: true };
    map.insert(
        1,
        WritesOnDrop {
            key: 1,
            armed: false,
        },
    );
    let panics = |what: &str, write: &mut dyn FnMut()| {
        CLONES_PANIC.store(true, SeqCst);
        let result = catch_unwind(AssertUnwindSafe(write));
        assert!(result.is_err(), "{what}: the clone's panic goes on");
        assert!(!CLONES_PANIC.load(SeqCst), "{what}: a clone was made");
    };
    // A present key: the clone of its value (returned to the caller) panics.
    panics("try_insert", &mut || drop(map.try_insert(1, armed(2))));
    panics("insert", &mut || drop(map.insert(1, armed(3))));
    panics("update_or_insert_with", &mut || {
        let value = armed(4);
        drop(map.update_or_insert_with(1, |v| v, move || value));
    });
    // A new key when the table is full: the rebuild's clones panic.
    let mut key = 10;
    while map.len() < map.capacity() {
        map.insert(key, WritesOnDrop { key, armed: false });
        key += 1;
    }
    panics("a rebuild", &mut || drop(map.insert(key, armed(5))));
    // Each armed value was dropped once, after its write, and wrote the map from its `Drop`.
    for key in [2, 3, 4, 5] {
        assert!(map.get_cloned(&(1_000 + key)).is_some(), "value {key}");
    }
    assert!(
        map.get_cloned(&key).is_none(),
        "the interrupted insert left nothing"
    );
    assert_eq!(map.get_cloned(&1).map(|v| v.key), Some(1), "unchanged");
}

#[test]
fn a_guard_of_another_domain_is_refused() {
    let other = Rcu::new();
    let map: RcuFlatMap<u32, u32> = RcuFlatMap::new();
    map.insert(1, 1);
    let guard = other.read();
    let err = catch_unwind(AssertUnwindSafe(|| map.get(&1, &guard).copied())).unwrap_err();
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(msg.contains("RcuFlatMap"), "{msg}");
}

#[test]
fn the_map_is_send_sync_and_unwind_safe() {
    fn check<T: Send + Sync + std::panic::UnwindSafe + std::panic::RefUnwindSafe>() {}
    check::<RcuFlatMap<u64, (u32, u32)>>();
    check::<RcuFlatMap<u64, u64, std::collections::hash_map::RandomState, Arc<Rcu>>>();
}

#[test]
fn a_capacity_no_table_can_have_panics_as_capacity_overflow_and_changes_nothing() {
    // As std's collections do: a size past `isize::MAX` bytes is a capacity overflow (a panic,
    // which a caller can catch), not an allocation that fails (which aborts the process).
    common::support::assert_panics_with("capacity overflow", || {
        RcuFlatMap::<u64, u64>::with_capacity(usize::MAX)
    });
    let map = RcuFlatMap::<u64, u64>::new();
    for k in 0..100 {
        map.insert(k, k * 10);
    }
    let capacity = map.capacity();
    for additional in [usize::MAX, usize::MAX / 2, 1 << 60] {
        common::support::assert_panics_with("capacity overflow", || map.reserve(additional));
        assert_eq!((map.len(), map.capacity()), (100, capacity));
    }
    map.insert(100, 1000);
    for k in 0..=100 {
        assert_eq!(map.get_copied(&k), Some(k * 10));
    }
    // Nor the room the map keeps (the failed `reserve` had raised it to the table it could
    // not make: removals no longer shrank the map, and every `clear` panicked).
    for k in 0..=100 {
        assert_eq!(map.remove(&k), Some(k * 10));
    }
    let empty = RcuFlatMap::<u64, u64>::new().capacity();
    assert_eq!(map.capacity(), empty, "the emptied map shrank");
    map.clear();
    assert_eq!(map.capacity(), empty);
}

/// A `reserve` or `shrink_to_fit` whose rebuild panics in a `Clone` leaves the map as it was,
/// the room it keeps included. (The floor changed before the rebuild: a failed `reserve` kept
/// its room for good, a failed `shrink_to_fit` gave up the room the map was made with.)
#[test]
fn a_reserve_or_shrink_to_fit_whose_clone_panics_keeps_the_room_as_it_was() {
    static PANIC: AtomicBool = AtomicBool::new(false);
    #[derive(Debug, PartialEq)]
    struct Value(u64);
    impl Clone for Value {
        fn clone(&self) -> Value {
            assert!(!PANIC.swap(false, SeqCst), "the clone of {}", self.0);
            Value(self.0)
        }
    }
    let fails = |what: &str, f: &dyn Fn()| {
        PANIC.store(true, SeqCst);
        assert!(catch_unwind(AssertUnwindSafe(f)).is_err(), "{what} panics");
        assert!(!PANIC.load(SeqCst), "{what} cloned");
    };
    let empty = RcuFlatMap::<u64, Value>::new().capacity();
    let map = RcuFlatMap::<u64, Value>::new();
    for k in 0..100 {
        map.insert(k, Value(k));
    }
    fails("reserve", &|| map.reserve(100_000));
    assert_eq!(map.len(), 100);
    map.clear();
    assert_eq!(map.capacity(), empty, "a failed reserve kept its room");

    let map = RcuFlatMap::<u64, Value>::with_capacity(10_000);
    let made = map.capacity();
    for k in 0..100 {
        map.insert(k, Value(k));
    }
    fails("shrink_to_fit", &|| map.shrink_to_fit());
    assert_eq!((map.len(), map.capacity()), (100, made));
    map.clear();
    assert_eq!(
        map.capacity(),
        made,
        "a failed shrink_to_fit gave the room up"
    );
}

/// A removal that leaves the table sparse rebuilds it smaller; if a `Clone` panics there, the
/// clone of the removed entry made for the caller is dropped after the writer lock, so its
/// `Drop` may write the map. (It was dropped under the lock as the panic unwound, where its
/// write panicked too: a panic while unwinding, which aborted the process.)
#[test]
fn a_removal_whose_shrink_panics_drops_the_clone_it_made_after_the_lock() {
    static MAP: std::sync::OnceLock<RcuFlatMap<u64, Value>> = std::sync::OnceLock::new();
    /// Clones made since the count was reset to 0 (none counted at `usize::MAX`): the first
    /// writes the map if dropped while a panic unwinds, the second panics.
    static CLONES: AtomicUsize = AtomicUsize::new(usize::MAX);
    static WROTE: AtomicUsize = AtomicUsize::new(0);
    #[derive(Debug)]
    struct Value {
        writes: bool,
    }
    impl Clone for Value {
        fn clone(&self) -> Value {
            let counted = CLONES.fetch_update(SeqCst, SeqCst, |n| n.checked_add(1));
            let n = counted.map_or(0, |before| before + 1);
            assert_ne!(n, 2, "the rebuild's clone");
            Value { writes: n == 1 }
        }
    }
    impl Drop for Value {
        fn drop(&mut self) {
            if self.writes && std::thread::panicking() {
                MAP.get().unwrap().insert(u64::MAX, Value { writes: false });
                WROTE.fetch_add(1, SeqCst);
            }
        }
    }
    let map = MAP.get_or_init(RcuFlatMap::new);
    for k in 0..1000 {
        map.insert(k, Value { writes: false });
    }
    let mut shrank_at = None;
    for k in 0..1000 {
        CLONES.store(0, SeqCst);
        if catch_unwind(AssertUnwindSafe(|| map.remove(&k))).is_err() {
            shrank_at = Some(k);
            break;
        }
    }
    CLONES.store(usize::MAX, SeqCst);
    let k = shrank_at.expect("a removal rebuilt the table");
    assert_eq!(
        WROTE.load(SeqCst),
        1,
        "the removed entry's clone wrote the map"
    );
    assert!(map.get_cloned(&u64::MAX).is_some());
    assert!(
        map.get_cloned(&k).is_some(),
        "the failed removal left its entry"
    );
}

/// The room `reserve` made stays until `shrink_to_fit`: removals and `clear` leave the table
/// at least that large, whether `reserve` grew the table or found the room there. (The next
/// removal shrank the table back to its entries.)
#[test]
fn the_room_reserve_made_outlasts_removals_and_clear_until_shrink_to_fit() {
    let map: RcuFlatMap<u64, u64> = RcuFlatMap::new();
    for k in 0..100 {
        map.insert(k, k);
    }
    map.reserve(100_000);
    let reserved = map.capacity();
    assert!(reserved >= 100_100);
    map.remove(&0);
    assert_eq!(map.capacity(), reserved, "a removal kept the room");
    for k in 1..100 {
        map.remove(&k);
    }
    assert_eq!(map.capacity(), reserved, "emptying kept the room");
    map.clear();
    assert_eq!(map.capacity(), reserved, "clear kept the room");
    for k in 0..100_000 {
        map.insert(k, k);
    }
    assert_eq!(
        map.capacity(),
        reserved,
        "the reserved entries fit without a rebuild"
    );
    for k in 0..100_000 {
        map.remove(&k);
    }
    map.shrink_to_fit();
    assert!(
        map.capacity() < reserved / 100,
        "shrink_to_fit let the room go"
    );

    // A reserve that finds the room in the table a fill grew keeps it too: the room is for
    // the entries the map holds then and `additional` more.
    for k in 0..100_000 {
        map.insert(k, k);
    }
    let grown = map.capacity();
    map.reserve(10);
    assert_eq!(map.capacity(), grown, "the room was there");
    for k in 0..100_000 {
        map.remove(&k);
    }
    assert_eq!(map.capacity(), grown, "emptying kept it");
}

#[test]
fn removing_everything_gives_the_room_back() {
    let map: RcuFlatMap<u64, u64> = RcuFlatMap::new();
    let empty = map.capacity();
    for i in 0..scale(100_000, 2_000) as u64 {
        map.insert(i, i);
    }
    let full = map.capacity();
    assert!(full >= map.len());
    for i in 0..scale(100_000, 2_000) as u64 {
        assert_eq!(map.remove(&i), Some(i));
    }
    assert!(map.is_empty());
    assert!(
        map.capacity() <= empty.max(64),
        "capacity {} after removing all (empty {empty}, full {full})",
        map.capacity()
    );
    // Updates of one key use fresh slots; the table is rebuilt at its size, not grown.
    map.insert(7, 0);
    let before = map.capacity();
    for v in 0..scale(100_000, 2_000) as u64 {
        map.insert(7, v);
    }
    assert_eq!(map.capacity(), before);
    assert_eq!(map.len(), 1);
}

#[test]
fn with_capacity_keeps_its_room() {
    let n = scale(10_000, 500) as u64;
    let map: RcuFlatMap<u64, u64> = RcuFlatMap::with_capacity(n as usize);
    let room = map.capacity();
    assert!(room >= n as usize);
    for i in 0..n {
        map.insert(i, i);
    }
    for i in 0..n {
        map.remove(&i);
    }
    assert_eq!(map.capacity(), room);
}

#[test]
fn after_shrink_to_fit_a_map_made_with_capacity_shrinks_as_it_empties() {
    let n = scale(10_000, 500) as u64;
    let map: RcuFlatMap<u64, u64> = RcuFlatMap::with_capacity(n as usize);
    map.shrink_to_fit();
    let least = map.capacity();
    assert!(least < n as usize);
    for i in 0..n {
        map.insert(i, i);
    }
    assert!(map.capacity() >= n as usize);
    for i in 0..n {
        map.remove(&i);
    }
    assert!(
        map.capacity() <= least.max(64),
        "capacity {} after removing all (least {least})",
        map.capacity()
    );
    // `clear` goes back to the least table too, and a map refilled and emptied shrinks again.
    for i in 0..n {
        map.insert(i, i);
    }
    map.clear();
    assert_eq!(map.capacity(), least);
    for i in 0..n {
        map.insert(i, i);
    }
    map.retain(|k, _| *k < 3);
    assert!(map.capacity() <= least.max(64));
    // Shrunk to fit a few hundred entries, a map made large shrinks further as they go.
    let map: RcuFlatMap<u64, u64> = RcuFlatMap::with_capacity(n as usize);
    for i in 0..300 {
        map.insert(i, i);
    }
    map.shrink_to_fit();
    let fit = map.capacity();
    for i in 5..300 {
        map.remove(&i);
    }
    assert!(
        map.capacity() < fit,
        "{} after removals, {fit} before",
        map.capacity()
    );
}

/// The shrink rule of a map made with `new()` (whose least table is one group) and given
/// `floor` entries of room by `reserve` since its last `shrink_to_fit`: a removal leaves the
/// table at its least size, within that room, or at least one-eighth full.
fn assert_not_sparse(map: &RcuFlatMap<u8, u16>, floor: usize, op: &Op) {
    let least = RcuFlatMap::<u8, u16>::with_capacity(floor).capacity();
    assert!(
        map.capacity() <= least || map.len() >= map.capacity() / 8,
        "{} entries in a table of {} after {op:?}",
        map.len(),
        map.capacity()
    );
}

/// `Op::Compute`: the map's `compute` against the model, and what it says it did.
fn check_compute(map: &RcuFlatMap<u8, u16>, model: &mut HashMap<u8, u16>, k: u8, v: u16) {
    let guard = map.domain().read();
    let old = model.get(&k).copied();
    let mut runs = 0;
    let got = map.compute(
        k,
        |entry| {
            runs += 1;
            assert_eq!(entry.map(|(k, v)| (*k, *v)), old.map(|o| (k, o)));
            match v % 4 {
                0 => Operation::Remove,
                1 => Operation::Abort(v),
                _ => Operation::Insert(entry.map_or(v, |(_, c)| c.wrapping_add(v))),
            }
        },
        &guard,
    );
    assert_eq!(runs, 1, "the closure runs once");
    let new = old.map_or(v, |o| o.wrapping_add(v));
    let expected = match (v % 4, old.as_ref()) {
        (0, Some(o)) => Compute::Removed(&k, o),
        (0, None) => Compute::Absent,
        (1, _) => Compute::Aborted(v),
        (_, Some(o)) => Compute::Updated {
            old: (&k, o),
            new: (&k, &new),
        },
        (_, None) => Compute::Inserted(&k, &new),
    };
    assert_eq!(got, expected);
    match v % 4 {
        0 => drop(model.remove(&k)),
        1 => {}
        _ => drop(model.insert(k, new)),
    }
}

fn check_against_std(map: &RcuFlatMap<u8, u16>, ops: &[Op]) {
    let mut model: HashMap<u8, u16> = HashMap::new();
    // The room the last `reserve`s promised (entries), until a `shrink_to_fit`.
    let mut floor = 0;
    for op in ops {
        let len = model.len();
        match *op {
            Op::Insert(k, v) => assert_eq!(map.insert(k, v), model.insert(k, v)),
            Op::TryInsert(k, v) => {
                let expected = match model.get(&k) {
                    Some(&c) => Err(c),
                    None => {
                        model.insert(k, v);
                        Ok(())
                    }
                };
                assert_eq!(map.try_insert(k, v), expected);
            }
            Op::Remove(k) => assert_eq!(map.remove(&k), model.remove(&k)),
            Op::RemoveIf(k, v) => {
                let hit = model.get(&k).is_some_and(|&c| c % 2 == v % 2);
                let expected = if hit { model.remove_entry(&k) } else { None };
                assert_eq!(map.remove_if(&k, |_, c| c % 2 == v % 2), expected);
            }
            Op::Update(k) => {
                let expected = model.get_mut(&k).map(|v| {
                    *v = v.wrapping_mul(3).wrapping_add(1);
                    *v
                });
                assert_eq!(
                    map.update(&k, |v| v.wrapping_mul(3).wrapping_add(1)),
                    expected
                );
            }
            Op::GetOrInsert(k, v) => {
                assert_eq!(
                    map.get_or_insert_with(k, || v),
                    *model.entry(k).or_insert(v)
                );
            }
            Op::Retain(m) => {
                let m = m | 1;
                model.retain(|k, _| k % m != 0);
                map.retain(|k, _| k % m != 0);
            }
            Op::Clear => {
                model.clear();
                map.clear();
            }
            Op::Reserve(n) => {
                map.reserve(n as usize * 4);
                floor = floor.max(len + n as usize * 4);
                assert!(map.capacity() >= len + n as usize * 4);
            }
            Op::UpdateOrInsert(k, v) => {
                let now = model
                    .entry(k)
                    .and_modify(|c| *c = c.wrapping_add(v))
                    .or_insert(v);
                assert_eq!(
                    map.update_or_insert_with(k, |c| c.wrapping_add(v), || v),
                    *now
                );
            }
            Op::ShrinkToFit => {
                map.shrink_to_fit();
                floor = 0;
            }
            Op::CloneMap => assert!(map.clone() == *map),
            Op::InsertBorrowed(k, v) => {
                let guard = map.domain().read();
                let old = map.insert_borrowed(k, v, &guard).copied();
                assert_eq!(old, model.insert(k, v));
            }
            Op::RemoveBorrowed(k) => {
                let guard = map.domain().read();
                assert_eq!(map.remove_borrowed(&k, &guard).copied(), model.remove(&k));
            }
            Op::Compute(k, v) => check_compute(map, &mut model, k, v),
        }
        assert_eq!(map.len(), model.len());
        if model.len() < len || matches!(op, Op::Retain(_)) {
            assert_not_sparse(map, floor, op);
        }
    }
    let guard = map.domain().read();
    let mut seen = HashMap::new();
    for (k, v) in map.iter(&guard) {
        assert!(seen.insert(*k, *v).is_none(), "key {k} yielded twice");
    }
    assert_eq!(seen, model);
    for k in 0..=255u8 {
        assert_eq!(map.get(&k, &guard), model.get(&k));
    }
}

proptest! {
    #![proptest_config(common::support::proptest_config(128))]

    #[test]
    fn sequences_of_operations_match_std_hashmap(
        ops in proptest::collection::vec(op(), 0..scale(600, 40))
    ) {
        check_against_std(&RcuFlatMap::new(), &ops);
    }
}

type InDomain = RcuFlatMap<u64, u64, std::collections::hash_map::RandomState, Arc<Rcu>>;

#[test]
fn readers_find_every_stable_key_while_the_writer_rebuilds_the_table() {
    // Miri has no membarrier: the `SeqCst` mode only there.
    let fences: &[FenceKind] = if cfg!(miri) {
        &[FenceKind::SeqCst]
    } else {
        &[FenceKind::Membarrier, FenceKind::SeqCst]
    };
    for &fence in fences {
        let rcu = Arc::new(Rcu::builder().fence(fence).build().unwrap());
        readers_beside_rebuilds(RcuFlatMap::with_capacity_hasher_in(
            0,
            Default::default(),
            rcu,
        ));
    }
}

fn readers_beside_rebuilds(map: InDomain) {
    const STABLE: u64 = 64;
    let map = Arc::new(map);
    for k in 0..STABLE {
        map.insert(k, stamp(k, 0));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let lookups = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let (map, stop, lookups) = (map.clone(), stop.clone(), lookups.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                let mut last = vec![0u64; STABLE as usize];
                // At least one pass, however late a loaded machine starts this thread.
                while !stop.load(Relaxed) || n == 0 {
                    let guard = map.domain().read();
                    for k in 0..STABLE {
                        let v = *map
                            .get(&k, &guard)
                            .unwrap_or_else(|| panic!("reader {r}: stable key {k} missing"));
                        assert_eq!(v >> 32, k, "reader {r}: key {k} has another key's value");
                        // Versions of one key only go up, as seen by one reader.
                        assert!(v & 0xFFFF_FFFF >= last[k as usize], "key {k} went back");
                        last[k as usize] = v & 0xFFFF_FFFF;
                        n += 1;
                    }
                }
                lookups.fetch_add(n, Relaxed);
            })
        })
        .collect();
    // The writer: grow to thousands of churn keys and shrink back, again and again, and bump
    // the stable keys' versions in between.
    common::flat::rebuild_under_readers(&map, STABLE);
    stop.store(true, Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert!(lookups.load(Relaxed) > 0);
    assert_eq!(map.len(), STABLE as usize);
}

#[test]
fn iteration_under_rebuilds_and_replacements_yields_each_stable_key_once_and_ends() {
    const STABLE: u64 = 200;
    let map: Arc<RcuFlatMap<u64, u64>> = Arc::new(RcuFlatMap::new());
    for k in 0..STABLE {
        map.insert(k, stamp(k, 0));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (map, stop) = (map.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Relaxed) {
                map.insert(1_000_000 + i % 3_000, i);
                if i % 2 == 1 {
                    map.remove(&(1_000_000 + (i / 2) % 3_000));
                }
                if i % 7 == 0 {
                    map.update(&(i % STABLE), |v| v + 1);
                }
                i += 1;
            }
        })
    };
    for _ in 0..scale(300, 5) {
        let guard = map.domain().read();
        let mut counts: HashMap<u64, usize> = HashMap::new();
        let mut total = 0usize;
        for (k, v) in map.iter(&guard) {
            if *k < STABLE {
                assert_eq!(v >> 32, *k);
                *counts.entry(*k).or_default() += 1;
            }
            total += 1;
            assert!(total < 1 << 20, "the iteration does not end");
        }
        for k in 0..STABLE {
            let c = counts.get(&k).copied().unwrap_or(0);
            assert_eq!(c, 1, "stable key {k} yielded {c} times");
        }
    }
    stop.store(true, Relaxed);
    writer.join().unwrap();
}

/// The same walk with the writes made between its steps by the iterating thread itself: every
/// interleaving of the walk with replacements (within a control word, to the other word of a
/// group, to another group) comes up, without a race to win.
#[test]
fn writes_between_the_steps_of_an_iteration_leave_each_stable_key_yielded_once() {
    const STABLE: u64 = scale(300, 40) as u64;
    let map: RcuFlatMap<u64, u64> = RcuFlatMap::new();
    for k in 0..STABLE {
        map.insert(k, stamp(k, 0));
    }
    let mut churn = 0u64;
    for round in 0..scale(200, 3) as u64 {
        let guard = map.domain().read();
        let mut counts: HashMap<u64, usize> = HashMap::new();
        for (step, (k, v)) in map.iter(&guard).enumerate() {
            if *k < STABLE {
                assert_eq!(v >> 32, *k);
                *counts.entry(*k).or_default() += 1;
            }
            let step = step as u64;
            map.update(&((step * 7 + round * 31) % STABLE), |v| v + 1);
            if step % 3 == 0 {
                // At most `CHURN` churn keys live at once.
                const CHURN: u64 = scale(500, 60) as u64;
                map.insert(1_000_000 + churn, churn);
                if churn >= CHURN {
                    map.remove(&(1_000_000 + churn - CHURN));
                }
                churn += 1;
            }
        }
        for k in 0..STABLE {
            let c = counts.get(&k).copied().unwrap_or(0);
            assert_eq!(c, 1, "round {round}: stable key {k} yielded {c} times");
        }
    }
}

#[test]
fn writers_on_several_threads_lose_no_update() {
    let map: Arc<RcuFlatMap<u64, u64>> = Arc::new(RcuFlatMap::new());
    let threads = 4;
    let per = scale(20_000, 300) as u64;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let map = map.clone();
            std::thread::spawn(move || {
                for i in 0..per {
                    // A shared counter, a key of our own, and churn that rebuilds the table.
                    map.get_or_insert_with(0, || 0);
                    map.update(&0, |v| v + 1);
                    // And a second counter kept with `compute` alone.
                    let guard = map.domain().read();
                    map.compute(
                        u64::MAX,
                        |c| Operation::<u64, ()>::Insert(c.map_or(1, |(_, n)| n + 1)),
                        &guard,
                    );
                    drop(guard);
                    map.insert(1 + t * per + i, i);
                    if i % 2 == 0 {
                        map.remove(&(1 + t * per + i / 2));
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(map.get_copied(&0), Some(threads * per));
    assert_eq!(map.get_copied(&u64::MAX), Some(threads * per));
    assert_eq!(
        map.len() as u64,
        2 + threads * per - threads * per.div_ceil(2)
    );
}

/// `compute`'s closure: one that panics leaves the map as it was (and the lock free), one that
/// writes the map panics instead of deadlocking, one that reads it reads; what `compute`
/// returns stays readable for the guard across the rebuilds that later writes make; a guard of
/// another domain is refused.
#[test]
fn compute_with_hostile_closures() {
    let map: RcuFlatMap<u32, String> = RcuFlatMap::new();
    map.insert(1, "one".into());
    let guard = map.domain().read();
    for key in [1, 2] {
        let err = catch_unwind(AssertUnwindSafe(|| {
            map.compute(key, |_| -> Operation<String, ()> { panic!("mine") }, &guard)
        }))
        .unwrap_err();
        assert_eq!(err.downcast_ref::<&str>(), Some(&"mine"));
    }
    assert_eq!((map.len(), map.get_cloned(&1).as_deref()), (1, Some("one")));
    let err = catch_unwind(AssertUnwindSafe(|| {
        map.compute(
            1,
            |_| {
                map.insert(3, "three".into());
                Operation::<String, ()>::Remove
            },
            &guard,
        )
    }))
    .unwrap_err();
    let msg = err.downcast_ref::<&str>().copied().unwrap_or("");
    assert!(msg.contains("writer lock"), "{msg:?}");
    assert_eq!(
        map.len(),
        1,
        "the closure's write and its remove never happened"
    );
    // Reading the map from the closure is fine, and so are lookups with the caller's guard.
    let done = map.compute(
        2,
        |entry| {
            assert!(entry.is_none());
            let one = map.get(&1, &guard).expect("present").clone();
            Operation::<String, ()>::Insert(one + " and two")
        },
        &guard,
    );
    assert_eq!(done, Compute::Inserted(&2, &"one and two".to_string()));
    let Compute::Updated { old, new } = map.compute(
        2,
        |e| Operation::<_, ()>::Insert(format!("{}!", e.unwrap().1)),
        &guard,
    ) else {
        panic!("an update");
    };
    let removed = map.compute(1, |_| Operation::<String, ()>::Remove, &guard);
    // Rebuilds (growing, then shrinking) replace the tables those entries are in: the guard
    // keeps them readable.
    for k in 10..scale(5_000, 300) as u32 {
        map.insert(k, k.to_string());
    }
    map.retain(|k, _| *k < 10);
    map.shrink_to_fit();
    assert_eq!(old, (&2, &"one and two".to_string()));
    assert_eq!(new, (&2, &"one and two!".to_string()));
    assert_eq!(removed, Compute::Removed(&1, &"one".to_string()));
    assert_eq!(
        map.compute(7, |_| Operation::<String, u8>::Abort(7), &guard),
        Compute::Aborted(7)
    );
    assert_eq!(
        map.compute(7, |_| Operation::<String, ()>::Remove, &guard),
        Compute::Absent
    );
    drop(guard);
    let other = Rcu::new();
    let foreign = other.read();
    let err = catch_unwind(AssertUnwindSafe(|| {
        map.compute(2, |_| Operation::<String, ()>::Remove, &foreign)
    }))
    .unwrap_err();
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(msg.contains("RcuFlatMap"), "{msg}");
    assert_eq!(map.get_cloned(&2).as_deref(), Some("one and two!"));
}

/// A key whose `Hash` and `Eq` do what the test tells them to.
#[derive(Clone, Copy, Debug)]
struct Hostile(u32);

static MODE: AtomicUsize = AtomicUsize::new(0);
static CALLS: AtomicU64 = AtomicU64::new(0);
const HONEST: usize = 0;
const PANIC_IN_EQ: usize = 1;
const PANIC_IN_HASH: usize = 2;
const RANDOM_HASH: usize = 3;
const EQ_TO_ALL: usize = 4;

impl Hash for Hostile {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match MODE.load(Relaxed) {
            PANIC_IN_HASH => panic!("hash"),
            RANDOM_HASH => CALLS.fetch_add(1, Relaxed).hash(state),
            _ => self.0.hash(state),
        }
    }
}

impl PartialEq for Hostile {
    fn eq(&self, other: &Self) -> bool {
        match MODE.load(Relaxed) {
            PANIC_IN_EQ => panic!("eq"),
            EQ_TO_ALL => true,
            _ => self.0 == other.0,
        }
    }
}
impl Eq for Hostile {}

type HostileMap =
    RcuFlatMap<Hostile, u32, BuildHasherDefault<std::collections::hash_map::DefaultHasher>>;

#[test]
fn keys_whose_hash_and_eq_panic_or_lie_leave_the_map_sound() {
    // One test: MODE is global to the keys.
    let map: HostileMap = RcuFlatMap::with_hasher(Default::default());
    let n = scale(500, 40) as u32;
    for i in 0..n {
        map.insert(Hostile(i), i);
    }
    // Panics in `Eq` (a write's probe) and in `Hash` (before the lock, and in a rebuild).
    MODE.store(PANIC_IN_EQ, Relaxed);
    for i in 0..scale(50, 5) as u32 {
        assert!(catch_unwind(AssertUnwindSafe(|| map.insert(Hostile(i), 0))).is_err());
        assert!(catch_unwind(AssertUnwindSafe(|| map.remove(&Hostile(i)))).is_err());
    }
    // A lookup that panics (in `Eq` under its guard, in `Hash` before it) leaves no read-side
    // section open behind it: grace periods still end.
    assert!(catch_unwind(AssertUnwindSafe(|| map.get_copied(&Hostile(1)))).is_err());
    assert!(!map.domain().is_reading());
    MODE.store(PANIC_IN_HASH, Relaxed);
    assert!(catch_unwind(AssertUnwindSafe(|| map.get_copied(&Hostile(1)))).is_err());
    assert!(!map.domain().is_reading());
    map.domain().synchronize();
    assert!(catch_unwind(AssertUnwindSafe(|| map.insert(Hostile(1), 0))).is_err());
    assert!(catch_unwind(AssertUnwindSafe(|| map.reserve(100_000))).is_err());
    MODE.store(HONEST, Relaxed);
    assert_eq!(map.len(), n as usize);
    for i in 0..n {
        assert_eq!(
            map.get_copied(&Hostile(i)),
            Some(i),
            "key {i} after the panics"
        );
    }
    // Lying keys: the map holds what it holds, counts it right, and stays usable.
    for mode in [RANDOM_HASH, EQ_TO_ALL] {
        MODE.store(mode, Relaxed);
        for i in 0..scale(2_000, 100) as u32 {
            map.insert(Hostile(i % (n + n / 2)), i);
            if i % 3 == 0 {
                map.remove(&Hostile(i % n));
            }
            let _ = map.get_copied(&Hostile(i));
        }
        MODE.store(HONEST, Relaxed);
        let guard = map.domain().read();
        assert_eq!(map.iter(&guard).count(), map.len());
    }
    map.clear();
    for i in 0..100 {
        map.insert(Hostile(i), i);
    }
    assert_eq!(map.len(), 100);
}

/// A key that hashes like every other: all entries lie on one probe, which crosses every group
/// of the table, and a lookup of an absent key walks it to an `EMPTY` slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Colliding(u32);

impl Hash for Colliding {
    fn hash<H: Hasher>(&self, state: &mut H) {
        0u8.hash(state);
    }
}

#[test]
fn lookups_stop_and_find_stable_keys_when_every_key_collides() {
    const STABLE: u32 = 32;
    let churn = scale(600, 40) as u32;
    let rounds = scale(40, 2);
    let map: Arc<
        RcuFlatMap<Colliding, u32, BuildHasherDefault<std::collections::hash_map::DefaultHasher>>,
    > = Arc::new(RcuFlatMap::with_hasher(Default::default()));
    for k in 0..STABLE {
        map.insert(Colliding(k), k);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (map, stop) = (map.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut lookups = 0u64;
            while !stop.load(Relaxed) || lookups == 0 {
                for k in 0..STABLE {
                    assert_eq!(map.get_copied(&Colliding(k)), Some(k), "stable key {k}");
                }
                // Never inserted: the probe must end at an `EMPTY` slot, past every group the
                // churn filled or left tombstones in.
                assert_eq!(map.get_copied(&Colliding(u32::MAX)), None);
                lookups += u64::from(STABLE) + 1;
            }
            lookups
        })
    };
    for round in 0..rounds {
        // Fill the table to the brim (each insert walks the whole probe), then empty it
        // again: tombstones in every group, rebuilds at the same size, shrinks.
        for k in STABLE..STABLE + churn {
            map.insert(Colliding(k), round as u32);
        }
        for k in STABLE..STABLE + churn {
            assert_eq!(map.remove(&Colliding(k)), Some(round as u32));
        }
        assert_eq!(map.get_copied(&Colliding(u32::MAX)), None);
    }
    stop.store(true, Relaxed);
    assert!(reader.join().expect("the reader panicked") > 0);
    assert_eq!(map.len(), STABLE as usize);
}

/// Eight writers of the same four keys (`update_or_insert_with`, `compute`,
/// `get_or_insert_with` then `update`) on two cores, while another thread grows, reserves,
/// shrinks to fit, retains and iterates: no increment is lost.
#[test]
fn eight_writers_of_four_keys_beside_rebuilds_on_two_cores_lose_nothing() {
    common::support::watchdog(std::time::Duration::from_secs(120), || {
        let map: Arc<RcuFlatMap<u64, u64>> = Arc::new(RcuFlatMap::new());
        const ROUNDS: u64 = 3_000;
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicUsize::new(0));
        let rebuilder = {
            let (map, stop, rounds) = (map.clone(), stop.clone(), rounds.clone());
            std::thread::spawn(move || {
                let mut round = 0usize;
                while !stop.load(Relaxed) {
                    for k in 100..2_000 {
                        map.insert(k, k);
                    }
                    match round % 3 {
                        0 => map.shrink_to_fit(),
                        1 => map.reserve(10_000),
                        _ => {}
                    }
                    map.retain(|k, _| *k < 100);
                    // An iteration held while the others replace (replacements rebuild).
                    let guard = map.domain().read();
                    let n = map.iter(&guard).filter(|(k, _)| **k < 4).count();
                    assert!(n <= 4);
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
                        match (w + i) % 3 {
                            0 => {
                                map.update_or_insert_with(key, |v| v + 1, || 1);
                            }
                            1 => {
                                let guard = map.domain().read();
                                map.compute(
                                    key,
                                    |e| match e {
                                        Some((_, v)) => Operation::<u64, ()>::Insert(v + 1),
                                        None => Operation::Insert(1),
                                    },
                                    &guard,
                                );
                            }
                            _ => {
                                map.get_or_insert_with(key, || 0);
                                assert!(map.update(&key, |v| v + 1).is_some());
                            }
                        }
                        i += 1;
                    }
                    i
                })
            })
            .collect();
        let writes: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
        stop.store(true, Relaxed);
        rebuilder.join().unwrap();
        let total: u64 = (0..4).map(|k| map.get_copied(&k).unwrap()).sum();
        assert_eq!(total, writes, "an increment was lost");
    });
}

/// The calls that read the map by themselves (`capacity`, `get_copied`, `Debug`, `Clone`,
/// `==`) work from a closure the map runs under its writer lock, on an `Rcu` domain as on a
/// QSBR one (`flat_map_qsbr.rs`): they read under the lock the thread holds. (They iterated
/// under a guard of their own, and an iteration registers under the writer lock: a panic.)
#[test]
fn user_code_under_the_writer_lock_reads_the_whole_map_by_itself() {
    let map: RcuFlatMap<u64, u64> = RcuFlatMap::new();
    map.insert(1, 10);
    map.insert(2, 20);
    let mut capacity = 0;
    let updated = map.update(&1, |v| {
        capacity = map.capacity();
        v + map.get_copied(&2).unwrap()
    });
    assert_eq!((updated, capacity >= 2), (Some(30), true));
    map.retain(|_, _| format!("{map:?}").contains("2: 20") && map.clone() == map);
    assert_eq!(map.len(), 2);
    let copy = map.get_or_insert_with(3, || map.clone().len() as u64);
    assert_eq!(copy, 2);
    // A write or an iteration with the caller's guard from there still panics.
    common::support::assert_panics_with("writer lock", || {
        map.update(&1, |v| v + map.insert(4, 4).unwrap_or(0))
    });
    common::support::assert_panics_with("writer lock", || {
        map.update(&1, |v| {
            let guard = map.domain().read();
            v + map.iter(&guard).count() as u64
        })
    });
    assert_eq!(map.len(), 3);
}

/// What a write did not use (the caller's key and value when the key was there, a closure it
/// did not call) is the caller's, dropped after the writer lock is released: a `Drop` there
/// may write the map. (Dropped under the lock, such a `Drop` panicked as a write from code the
/// map runs under its lock.)
#[test]
fn what_a_write_did_not_use_is_dropped_after_the_writer_lock() {
    type Map = RcuFlatMap<u64, Writes>;
    static MAP: std::sync::OnceLock<Map> = std::sync::OnceLock::new();
    /// Writes key `500 + n` into the map when an original (not a clone the map made) drops.
    #[derive(Debug)]
    struct Writes(u64, bool);
    impl Clone for Writes {
        fn clone(&self) -> Writes {
            Writes(self.0, false)
        }
    }
    impl Drop for Writes {
        fn drop(&mut self) {
            if self.1 {
                MAP.get().unwrap().insert(500 + self.0, Writes(0, false));
            }
        }
    }
    let map = MAP.get_or_init(RcuFlatMap::new);
    map.insert(1, Writes(1, false));
    let wrote = |n: u64| map.remove(&(500 + n)).is_some();

    assert_eq!(map.try_insert(1, Writes(2, true)).map_err(|v| v.0), Err(1));
    assert!(wrote(2), "try_insert: the value not inserted");
    let armed = Writes(3, true);
    assert_eq!(map.get_or_insert_with(1, move || armed).0, 1);
    assert!(wrote(3), "get_or_insert_with: the maker not called");
    let armed = Writes(4, true);
    assert_eq!(map.update(&9, move |v| (armed, v).1).map(|v| v.0), None);
    assert!(wrote(4), "update: the closure not called");
    let armed = Writes(5, true);
    let v = map.update_or_insert_with(1, |v| Writes(v.0 + 10, false), move || armed);
    assert_eq!(v.0, 11);
    assert!(wrote(5), "update_or_insert_with: the maker not called");
    let armed = Writes(6, true);
    let v = map.update_or_insert_with(7, move |v| (armed, v).1, || Writes(70, false));
    assert_eq!(v.0, 70);
    assert!(wrote(6), "update_or_insert_with: the update not called");
    assert_eq!(map.len(), 2);
}

#[test]
fn writing_from_code_the_map_runs_under_its_lock_panics_instead_of_deadlocking() {
    let map: RcuFlatMap<u32, u32> = RcuFlatMap::new();
    map.insert(1, 1);
    let err = catch_unwind(AssertUnwindSafe(|| {
        map.update(&1, |v| {
            map.insert(2, 2);
            v
        })
    }))
    .unwrap_err();
    let msg = err.downcast_ref::<&str>().copied().unwrap_or("");
    assert!(msg.contains("writer lock"), "{msg:?}");
    // The lock and the thread's mark were let go: the map works, reads inside closures too.
    assert_eq!(map.insert(2, 2), None);
    assert_eq!(map.update(&1, |v| v + map.get_copied(&2).unwrap()), Some(3));
    let other: RcuFlatMap<u32, u32> = RcuFlatMap::new();
    // Iterating the map from inside is refused the same way.
    let err = catch_unwind(AssertUnwindSafe(|| {
        map.update(&1, |v| {
            let guard = map.domain().read();
            v + map.iter(&guard).count() as u32
        })
    }))
    .unwrap_err();
    let msg = err.downcast_ref::<&str>().copied().unwrap_or("");
    assert!(msg.contains("iterated"), "{msg:?}");
    // Another map may be written from inside.
    map.retain(|k, _| {
        other.insert(*k, 0);
        true
    });
    assert_eq!(other.len(), 2);
}

#[test]
fn writing_a_map_from_code_run_under_another_maps_lock_run_under_its_own_panics() {
    let (a, b): (RcuFlatMap<u32, u32>, RcuFlatMap<u32, u32>) =
        (RcuFlatMap::new(), RcuFlatMap::new());
    a.insert(1, 1);
    b.insert(1, 1);
    // A write to `a` runs a closure that writes `b`, whose closure comes back to `a`: `a`'s
    // lock is this thread's, though not the one it took last.
    let err = catch_unwind(AssertUnwindSafe(|| {
        a.update(&1, |v| {
            b.update(&1, |w| {
                a.insert(2, 2);
                w
            });
            v
        })
    }))
    .unwrap_err();
    assert!(common::support::panic_message(err).contains("writer lock"));
    // Writing `b` from there, and `a` after both, work; the marks were let go in order.
    assert_eq!(a.update(&1, |v| v + b.insert(1, 5).unwrap()), Some(2));
    assert_eq!(b.update(&1, |w| w + a.insert(3, 3).unwrap_or(0)), Some(5));
    assert_eq!((a.len(), b.len()), (2, 1));
}

#[test]
fn replaced_tables_are_freed_after_a_grace_period() {
    let rcu = Arc::new(Rcu::new());
    let map: RcuFlatMap<u64, u64, std::collections::hash_map::RandomState, Arc<Rcu>> =
        RcuFlatMap::with_capacity_hasher_in(0, Default::default(), rcu.clone());
    for i in 0..scale(50_000, 500) as u64 {
        map.insert(i, i);
    }
    rcu.barrier();
    let stats = rcu.stats();
    assert!(stats.callbacks_invoked > 0, "no table retired: {stats:?}");
    assert_eq!(stats.callbacks_queued, stats.callbacks_invoked, "{stats:?}");
    assert_eq!(stats.pending_bytes, 0, "{stats:?}");
}

/// A map with a hasher other than std's is made by `Default` too (as std's `HashMap` with any
/// `S: Default`), with that hasher's default.
#[test]
fn a_map_with_any_default_hasher_is_default() {
    type Hashed = BuildHasherDefault<std::collections::hash_map::DefaultHasher>;
    let map: RcuFlatMap<u64, u64, Hashed> = Default::default();
    for k in 0..100 {
        map.insert(k, k + 1);
    }
    assert!((0..100).all(|k| map.get_copied(&k) == Some(k + 1)));
    let plain: RcuFlatMap<u64, u64> = RcuFlatMap::default();
    assert!(plain.is_empty());
}
