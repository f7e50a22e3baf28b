//! The memory of an `RcuFlatMap`'s removed entries goes back to the system: after the map is
//! emptied (its table shrinks as it empties) and after a map is dropped, the process's resident
//! set returns near where it was before the map was filled. A test binary of its own (one
//! test): it reads the resident set of the whole process, so no other test may allocate beside
//! it.
//!
//! A table's arrays of 128 KiB and more are mappings of their own, unmapped when freed or a
//! second later; without that, glibc (whose mmap threshold rises each time it frees a block it
//! had mapped) serves them from its heap and keeps them, and `malloc_trim` does not release the
//! free space at the top of a thread's heap. Other C libraries are not checked here.

#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;

use common::support::{gives_back_a_quarter, mib, resident, wait_until_no_mapping_is_kept};
use rcukit::RcuFlatMap;

/// 500,000 entries of 16 bytes: a table of 16 MiB of slots and 1 MiB of control words.
const ENTRIES: u64 = 500_000;

/// 100,000 entries: a table of 2 MiB of slots and 128 KiB of control words, arrays below
/// 4 MiB (mappings of their own from 128 KiB, kept a second for reuse).
const FEW_ENTRIES: u64 = 100_000;

type Map = RcuFlatMap<u64, u64>;

/// Fill a new map with `entries` entries, empty it with `empty`, and check that what the fill
/// added to the resident set (at least `least` MiB) mostly goes away. A dropped table's
/// mappings are kept a second for reuse: the check waits for them to go (30 s at most).
fn gives_back(what: &str, entries: u64, least: f64, empty: impl FnOnce(Map)) {
    let map = Map::new();
    let rcu = rcukit::Rcu::global();
    // What the previous measurement freed is gone before the baseline: deferred frees ran, and
    // no dropped table's mapping is kept any more (one going in the middle of the fill once
    // made the fill look as if it had shrunk the resident set).
    rcu.barrier();
    rcu.barrier();
    wait_until_no_mapping_is_kept();
    let before = resident();
    for k in 0..entries {
        map.insert(k, k);
    }
    rcu.barrier();
    let grown = resident() - before;
    assert!(
        mib(grown) > least,
        "the fill grew the resident set by {:.1} MiB only",
        mib(grown)
    );
    empty(map);
    rcu.barrier();
    rcu.barrier();
    gives_back_a_quarter(what, before, grown);
}

/// Remove every entry of `map`, which then has a table of one group.
fn remove_all(map: Map, entries: u64) {
    for k in 0..entries {
        assert_eq!(map.remove(&k), Some(k));
    }
    assert!(map.capacity() < 1000);
    std::mem::forget(map); // only the removals give back here
}

#[test]
fn emptied_and_dropped_maps_give_their_memory_back() {
    // Start the domain's threads before the first baseline.
    let warm = Map::new();
    warm.insert(0, 0);
    drop(warm);
    rcukit::Rcu::global().barrier();

    gives_back("removing every entry", ENTRIES, 10.0, |map| {
        remove_all(map, ENTRIES)
    });
    gives_back("dropping the map", ENTRIES, 10.0, drop);
    // Smaller tables, after the large ones: glibc would serve these from its heap (its mmap
    // threshold raised by the frees above), and keep them.
    gives_back(
        "removing every entry of a smaller map",
        FEW_ENTRIES,
        1.0,
        |map| remove_all(map, FEW_ENTRIES),
    );
    gives_back("dropping a smaller map", FEW_ENTRIES, 1.0, drop);
}
