//! A table driven by hand, for the loom models and the unit tests that race the map's parts one
//! step at a time: a root with `u64` keys whose hash is chosen by the test, an insert or
//! replacement, and a whole resize. Nothing here frees what it unlinks: the caller does, once
//! nothing can reach it.

use super::moves::{self, Busted, Moved};
use super::table::{self, Node, Table};
use crate::sync::AtomicPtr;
use std::sync::atomic::Ordering::{Acquire, Release};

/// The map's current-table pointer.
pub(crate) type Root = AtomicPtr<Table<u64, u64>>;

/// The current table.
pub(crate) fn current(root: &Root) -> &Table<u64, u64> {
    // SAFETY: the callers free no table before they end.
    unsafe { &*root.load(Acquire) }
}

/// Insert `key` with `hash` and `value`, or replace its value: the replaced node, if any
/// (unlinked, for the caller to free).
pub(crate) fn insert(root: &Root, hash: u64, key: u64, value: u64) -> Option<*mut Node<u64, u64>> {
    let node = Node::new(hash, key, value);
    loop {
        // SAFETY: the callers free nothing reachable before they end.
        let spot = unsafe { table::locate(current(root), hash, &mut |k| *k == key) };
        let Some(locked) = spot.lock() else { continue };
        return if spot.found.is_null() {
            // SAFETY: validated lock; `node` is unpublished with this hash.
            unsafe { locked.insert(node) };
            None
        } else {
            // SAFETY: as above, and the spot found a node.
            Some(unsafe { locked.replace(node) })
        };
    }
}

/// A root whose table of `buckets` buckets holds keys with `hashes`, each key and its value
/// the hash plus 10.
pub(crate) fn filled(buckets: usize, hashes: &[u64]) -> Root {
    let root = AtomicPtr::new(Box::into_raw(Table::new(buckets)));
    for &hash in hashes {
        assert!(insert(&root, hash, hash + 10, hash + 10).is_none());
    }
    root
}

/// Install a new table of `buckets` buckets as the current table's successor (a resize about
/// to move), and return it. The current table has none yet.
pub(crate) fn install_successor(root: &Root, buckets: usize) -> *mut Table<u64, u64> {
    let new = Box::into_raw(Table::new(buckets));
    current(root).next.store(new, Release);
    new
}

/// Resize the current table into a new one of `buckets` buckets, moving every bucket: the old
/// table, no longer the root (its nodes moved on), for the caller to free.
///
/// # Safety
///
/// No other resize of `root` is under way.
pub(crate) unsafe fn resize(root: &Root, buckets: usize) -> *mut Table<u64, u64> {
    let old = root.load(Acquire);
    install_successor(root, buckets);
    // SAFETY: `old` came from the root and is alive; its successor was installed just above.
    unsafe { finish_move(root, old, usize::MAX, Busted::No) }
}

/// Move the buckets of `old` into its successor on this thread, with the mover `busted`
/// ([`Busted::No`] but in the loom models' busted twins) and a `budget` of at least every
/// bucket, so that this thread finishes the move: `old`, no longer the root (its nodes moved
/// on), for the caller to free.
///
/// # Safety
///
/// `old` is the current table of `root`, with its successor installed; both stay alive.
pub(crate) unsafe fn finish_move(
    root: &Root,
    old: *mut Table<u64, u64>,
    budget: usize,
    busted: Busted,
) -> *mut Table<u64, u64> {
    // SAFETY: forwarded.
    match unsafe { moves::help_move(root, old, budget, busted) } {
        Moved::Finished(old) => old,
        _ => unreachable!("a budget of every bucket: this thread finishes the move"),
    }
}
