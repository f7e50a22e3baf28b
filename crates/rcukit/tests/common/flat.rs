//! What the `RcuFlatMap` tests on either kind of domain share: the stable keys' stamped values
//! and the writer that grows, shrinks and rebuilds the table under the readers.

use proptest::prelude::*;
use rcukit::{AnyDomainRef, RcuFlatMap};
use std::hash::BuildHasher;

/// `normal` in ordinary runs, `miri` under Miri.
pub(crate) const fn scale(normal: usize, miri: usize) -> usize {
    if cfg!(miri) {
        miri
    } else {
        normal
    }
}

/// A stable key's value: the key in the high half, a version in the low half.
pub(crate) fn stamp(key: u64, version: u64) -> u64 {
    (key << 32) | (version & 0xFFFF_FFFF)
}

/// The writer: grow to thousands of churn keys and shrink back, again and again
/// (`RCUKIT_FLAT_ROUNDS` times, default 40), and bump the versions of the `stable` keys
/// `0..stable` in between.
pub(crate) fn rebuild_under_readers<S: BuildHasher, D: AnyDomainRef>(
    map: &RcuFlatMap<u64, u64, S, D>,
    stable: u64,
) {
    let rounds = std::env::var("RCUKIT_FLAT_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(scale(40, 2));
    for round in 1..=rounds as u64 {
        for i in 0..scale(5_000, 200) as u64 {
            map.insert(1_000_000 + i, i);
            if i % 97 == 0 {
                let k = i % stable;
                map.insert(k, stamp(k, round * 100_000 + i));
            }
        }
        for i in 0..scale(5_000, 200) as u64 {
            map.remove(&(1_000_000 + i));
            if i % 89 == 0 {
                let k = i % stable;
                map.update(&k, |v| stamp(k, (v & 0xFFFF_FFFF) + 1));
            }
        }
    }
}

/// One write (or other call) of the property tests, on small keys so that they collide often.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Insert(u8, u16),
    TryInsert(u8, u16),
    Remove(u8),
    RemoveIf(u8, u16),
    Update(u8),
    GetOrInsert(u8, u16),
    Retain(u8),
    Clear,
    Reserve(u8),
    UpdateOrInsert(u8, u16),
    ShrinkToFit,
    CloneMap,
    InsertBorrowed(u8, u16),
    RemoveBorrowed(u8),
    /// `compute` on key `.0`: by `.1 % 4`, remove (0), abort (1), or insert (a new value made
    /// from the present one, or from `.1`).
    Compute(u8, u16),
}

/// The operations, weighted towards inserts and removes.
pub(crate) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (any::<u8>(), any::<u16>()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => (any::<u8>(), any::<u16>()).prop_map(|(k, v)| Op::TryInsert(k, v)),
        6 => any::<u8>().prop_map(Op::Remove),
        1 => (any::<u8>(), any::<u16>()).prop_map(|(k, v)| Op::RemoveIf(k, v)),
        2 => any::<u8>().prop_map(Op::Update),
        2 => (any::<u8>(), any::<u16>()).prop_map(|(k, v)| Op::GetOrInsert(k, v)),
        1 => any::<u8>().prop_map(Op::Retain),
        1 => Just(Op::Clear),
        1 => any::<u8>().prop_map(Op::Reserve),
        2 => (any::<u8>(), any::<u16>()).prop_map(|(k, v)| Op::UpdateOrInsert(k, v)),
        1 => Just(Op::ShrinkToFit),
        1 => Just(Op::CloneMap),
        3 => (any::<u8>(), any::<u16>()).prop_map(|(k, v)| Op::InsertBorrowed(k, v)),
        3 => any::<u8>().prop_map(Op::RemoveBorrowed),
        4 => (any::<u8>(), any::<u16>()).prop_map(|(k, v)| Op::Compute(k, v)),
    ]
}
