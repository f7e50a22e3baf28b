//! A clone of an `RcuHashMap` whose hasher's `clone` panics leaves nothing behind: the copy's
//! table is made after the user's clones. (It was made before, and leaked by the unwinding: a
//! mapping of 64 MiB for a map made with room for four million entries.) A test binary of its
//! own (one test): it reads the process's virtual size, which other tests' threads would move.
#![cfg(all(target_os = "linux", not(miri)))]

use rcukit::RcuHashMap;
use std::hash::BuildHasher;
use std::panic::{catch_unwind, AssertUnwindSafe};

#[derive(Default)]
struct Refuses;

impl Clone for Refuses {
    fn clone(&self) -> Self {
        panic!("no clone")
    }
}

impl BuildHasher for Refuses {
    type Hasher = std::collections::hash_map::DefaultHasher;
    fn build_hasher(&self) -> Self::Hasher {
        Default::default()
    }
}

fn virtual_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmSize:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_clone_whose_hasher_panics_leaves_no_table_behind() {
    let map = RcuHashMap::builder()
        .hasher(Refuses)
        .capacity(4_000_000)
        .build::<u64, u64>()
        .unwrap();
    map.pin().insert(1, 1);
    // Panics quietly (a backtrace's symbols would be mapped), after a first one that sets up
    // whatever unwinding maps once.
    std::panic::set_hook(Box::new(|_| {}));
    assert!(catch_unwind(AssertUnwindSafe(|| map.clone())).is_err());
    let before = virtual_kib();
    for _ in 0..10 {
        assert!(catch_unwind(AssertUnwindSafe(|| map.clone())).is_err());
    }
    let grown = virtual_kib().saturating_sub(before);
    let _ = std::panic::take_hook();
    // One leaked table is 65,536 KiB; the margin is for the allocator's own arenas.
    assert!(
        grown < 32 << 10,
        "the failed clones left {grown} KiB mapped"
    );
    assert_eq!(map.pin().get(&1), Some(&1));
}
