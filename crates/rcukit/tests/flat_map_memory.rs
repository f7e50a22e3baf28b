//! The memory of an `RcuFlatMap`'s removed entries goes back to the system: after the map is
//! emptied (its table shrinks as it empties) and after a large map is dropped, the process's
//! resident set returns near where it was before the map was filled. A test binary of its own
//! (one test): it reads the resident set of the whole process, so no other test may allocate
//! beside it.
//!
//! The map's large tables are mappings of their own, unmapped when freed; without that, glibc
//! (whose mmap threshold rises each time it frees a block it had mapped) serves the shrinking
//! tables from its heap and keeps them.

#![cfg(target_os = "linux")]

mod common;

use common::support::resident;
use rcukit::RcuFlatMap;

/// 500,000 entries of 16 bytes: a table of 16 MiB of slots and 1 MiB of control words.
const ENTRIES: u64 = 500_000;

fn mib(b: i64) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// Fill a map, empty it with `empty`, let the domain free what it retired, and check that
/// what the fill added to the resident set mostly went away.
fn gives_back(what: &str, empty: impl FnOnce(RcuFlatMap<u64, u64>)) {
    let map: RcuFlatMap<u64, u64> = RcuFlatMap::new();
    let rcu = rcukit::Rcu::global();
    let before = resident();
    for k in 0..ENTRIES {
        map.insert(k, k);
    }
    rcu.barrier();
    let grown = mib(resident() - before);
    assert!(
        grown > 10.0,
        "the fill grew the resident set by {grown:.1} MiB only"
    );
    empty(map);
    rcu.barrier();
    rcu.barrier();
    let stays = mib(resident() - before);
    assert!(
        stays < grown / 4.0,
        "{what}: {stays:.1} MiB of the {grown:.1} MiB the fill took stayed resident"
    );
}

#[test]
fn emptied_and_dropped_maps_give_their_memory_back() {
    gives_back("removing every entry", |map| {
        for k in 0..ENTRIES {
            assert_eq!(map.remove(&k), Some(k));
        }
        assert!(map.capacity() < 1000);
        std::mem::forget(map); // only the removals give back here
    });
    gives_back("dropping the map", drop);
}
