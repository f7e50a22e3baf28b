//! The memory of a map's removed entries goes back to the system: after the map is emptied,
//! and after a large map is dropped, the process's resident set returns near where it was
//! before the map was filled. A test binary of its own (one test): it reads the resident set
//! of the whole process, so no other test may allocate beside it.
//!
//! With glibc, freed 64-byte nodes stay in the allocator's bins and keep the resident set at
//! its peak unless the map asks the allocator to trim; other C libraries are not checked here.

#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;

use common::fork::{fork_within, succeeded};
use common::support::{gives_back_a_quarter, mib, resident};
use rcukit::{Rcu, RcuHashMap};
use std::time::Duration;

/// 200,000 entries of 48-byte nodes (64-byte blocks): about 13 MB of nodes, a table of 4 MiB.
const ENTRIES: u64 = 200_000;

/// A map whose largest table is small: 25,000 entries, about 1.6 MB of nodes, a table of
/// 512 KiB.
const FEW_ENTRIES: u64 = 25_000;

type Map = RcuHashMap<u64, [u64; 4]>;

/// Fill a new map with `entries` entries, let `empty` empty or drop it, and check that what
/// the fill added to the resident set (at least `least` MiB) mostly goes away. The process
/// trims at most once a second, and a trim asked for sooner runs when the second is up: the
/// check waits for it (30 s at most, a guard against a trim that never comes, not a
/// measurement).
fn gives_back(what: &str, entries: u64, least: f64, empty: impl FnOnce(Map, u64)) {
    let map = Map::new();
    let before = resident();
    for k in 0..entries {
        map.pin().insert(k, [k; 4]);
    }
    map.domain().barrier();
    let peak = resident();
    empty(map, entries);
    let grown = peak - before;
    assert!(
        mib(grown) > least,
        "the fill grew the resident set by {:.1} MiB only",
        mib(grown)
    );
    gives_back_a_quarter(&format!("after {what}"), before, grown);
}

/// Fill a new map, drop it and fork: a child, which has none of its parent's threads (the
/// one that waits to trim, the callback workers that run queued trims), must not keep the
/// memory the drop freed; neither must the parent. With `ask_first`, the drop's trim has been
/// asked for (within the second of the last trim: a thread waits to run it) before the fork;
/// without, it is still queued.
fn a_child_forked_after_a_drop_gives_back(what: &str, ask_first: bool) {
    let map = Map::new();
    let before = resident();
    for k in 0..ENTRIES {
        map.pin().insert(k, [k; 4]);
    }
    Rcu::global().barrier();
    let grown = resident() - before;
    drop(map);
    if ask_first {
        Rcu::global().barrier();
    }
    let what = format!("a child forked after {what}");
    let status = fork_within(Duration::from_secs(60), || {
        gives_back_a_quarter(&what, before, grown)
    })
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(succeeded(status), "{what}: the child kept the memory");
    gives_back_a_quarter(&format!("the parent of {what}"), before, grown);
}

/// Remove the `entries` entries of `map` and let the deferred frees run.
fn remove_all(map: Map, entries: u64) {
    for k in 0..entries {
        assert_eq!(map.pin().remove(&k).map(|v| v[0]), Some(k));
    }
    assert!(map.is_empty());
    map.domain().barrier();
    map.domain().barrier();
}

#[test]
fn removed_entries_and_dropped_maps_give_their_memory_back() {
    // Start the domain's threads before the baseline (a small map: a large one freed here
    // would leave memory for the fill below to reuse).
    let warm = Map::new();
    warm.pin().insert(0, [0; 4]);
    warm.pin().remove(&0);
    warm.domain().barrier();

    // Emptied by removes: the table shrinks away, and a large shrink trims.
    gives_back("removing every entry", ENTRIES, 10.0, remove_all);
    // At once again: this shrink's trim comes less than a second after the last one, and
    // runs when the second is up.
    gives_back(
        "removing every entry again within the second",
        ENTRIES,
        10.0,
        remove_all,
    );
    // Dropped whole (its trim runs on a callback worker, or a second after the last one).
    gives_back("dropping the map", ENTRIES, 10.0, |map, _| drop(map));
    // A map that never had a large table: what it freed counts, not the size of one table.
    gives_back(
        "removing every entry of a smaller map",
        FEW_ENTRIES,
        1.0,
        remove_all,
    );
    // Consumed: the iterator asks for the trim once it has freed every entry.
    gives_back("consuming the map", ENTRIES, 10.0, |map, entries| {
        assert_eq!(map.into_iter().count() as u64, entries);
    });
    // A fork while a trim is owed: it runs before the fork.
    a_child_forked_after_a_drop_gives_back("a drop whose trim waits for its second", true);
    a_child_forked_after_a_drop_gives_back("a drop whose trim is queued", false);
}
