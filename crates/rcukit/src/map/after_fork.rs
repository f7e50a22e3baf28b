//! The map in a forked child: rebuilt from what its tables hold, once, before the child's
//! first write.
//!
//! A child has only the thread that forked. Another thread of the parent may have been in the
//! middle of a write at that moment: holding a bucket's lock with `CHANGING` set (a writer's
//! walk waits for it to clear, and the child would wait forever), moving a bucket (some of its
//! nodes already placed in the next table, the bucket not yet `MOVED`), or having claimed a
//! run of buckets of a resize that it will never finish (the resize, and every later one,
//! would stay under way). None of that can be finished from the state alone in general, but
//! all of it can be left behind: every node the map holds is in some table reachable from the
//! root, in a lane whose tag is set, and the nodes a half-finished move copied are in two
//! tables at once, as the same pointer.
//!
//! So the first write in a child (any write: a keyed write, `retain`, `clear`, `reserve`,
//! `shrink_to_fit`) sees a fork generation that is not the map's and
//! repairs the map, once, while every other writer of the child waits for it:
//!
//! 1. It collects the nodes of every unmoved bucket of every table from the root on, as a drop
//!    of the map does, and drops repeated pointers (the nodes of a half-finished move).
//!    Lanes a vanished writer was filling or emptying (a pointer stored but no tag, or the
//!    tag cleared but not yet the pointer) hold an entry that no lookup sees: it is left out,
//!    as a write that had not happened (the child's copy of the node stays allocated).
//! 2. It places them in a new table sized for them, with no lock held by anyone, makes that
//!    table the root (readers of the child that were in the old tables finish there) and
//!    retires the old tables (their drops free lines, never nodes), and sets the entry count.
//!
//! Reads need none of this (lookups and iterations never wait for a bucket, and a bucket a
//! move left halfway still has every node it had), and they go on beside the repair. The check
//! costs a write two loads of words that stay in the cache. Dropping or consuming the map (with
//! `&mut` or by value) in a child collects its nodes the same way, without the new table.
//!
//! A write checks after it hashes the key, so a fork from the key's `Hash` is followed by the
//! repair in the forking thread itself. A fork from user code that runs later in a write (the
//! key's `Eq`, the write's closures, the drop of a key it did not insert, `retain`'s
//! predicate) leaves the forking thread in the middle of that write in the child, still in
//! the tables as they were. It holds no lock there (no lock of the map is held while user
//! code runs), and it takes none before it looks again:
//!
//! * A keyed write repairs the map if a repair is due at the start of every attempt, before
//!   it reads the table. The `Spot` its walk returns records the fork generation the walk
//!   began in, and `Spot::lock`, the check of a stale spot before every lock a keyed write
//!   takes, refuses a spot from an earlier generation: the attempt starts again, with the
//!   repair first. Comparing generations, not the map's stamp, also catches a repair that
//!   another thread of the child made meanwhile (a thread the user code started): the spot is
//!   then in a table the map no longer uses.
//! * `retain` repairs after its predicate, before each removal (which looks the node up in
//!   the current table); its walk goes on in the tables it began in, which still hold every
//!   node they held.
//! * Helping a resize at the end of a write, and finishing one after a bulk write, is skipped
//!   while a repair is due (after a key's `Drop` or `retain`'s predicate forked): the next
//!   write repairs the map, and the rebuilt table has no resize under way.
//!
//! The user code then runs again in the new attempt, as it does when another writer changed
//! the bucket in between (closures that may run more than once do; `Eq` runs on every walk).
//! Forking from code rcukit runs is not supported anywhere (see `domain::fork`).

use super::table::{self, Table};
use super::RcuHashMap;
use super::{hint, line};
use crate::domain_ref::DomainRef;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

impl<K, V, S, D: DomainRef> RcuHashMap<K, V, S, D> {
    /// Has this process forked since the map was last repaired or made (is a repair due)?
    #[inline(always)]
    pub(super) fn forked(&self) -> bool {
        self.generation.forked()
    }
}

impl<K, V, S, D> RcuHashMap<K, V, S, D>
where
    K: Send + 'static,
    V: Send + 'static,
    D: DomainRef,
{
    /// Before a write: repair the map if the process forked since (see the module docs), or
    /// wait while another thread of the child repairs it. An interrupted repair (copied by a
    /// fork, or one that panicked because the child could not start the domain's threads)
    /// needs nothing more: the rebuild starts again from the root, whichever table that is.
    #[inline(always)]
    pub(super) fn repair_if_forked(&self) {
        // SAFETY: every other writer of the child waits for the repair (the stamp).
        self.generation
            .repair_if_forked(|_| unsafe { self.rebuild_after_fork() });
    }

    /// Steps 1 and 2 of the module docs.
    ///
    /// # Safety
    ///
    /// No other thread writes the map meanwhile.
    unsafe fn rebuild_after_fork(&self) {
        // The domain first: its repair panics if the child cannot start its threads, and
        // then before this one changed anything (the old tables are retired at the end).
        self.domain.rcu().inner().check_fork();
        let old = self.root.load(Acquire);
        // SAFETY: no thread writes the map; the tables reachable from the root are alive.
        let nodes = unsafe { table::exclusive_nodes(old, true) };
        let buckets = self
            .buckets_for(nodes.len())
            .max(self.min_buckets.load(Relaxed));
        let new = Table::with_limits(buckets, self.limits_for(buckets)).made_for(nodes.len());
        for &node in &nodes {
            // SAFETY: a node the map holds: alive; its hash is its own.
            let hash = unsafe { (*node).hash };
            let bucket = new.bucket(new.index(hash));
            let lock = bucket.lock();
            // SAFETY: `new` is unseen and its bucket locked by this thread; each node is
            // placed once.
            unsafe {
                new.place(
                    bucket,
                    &lock,
                    node,
                    line::tag_of(hash),
                    hint::of_hash(hash, new.bits()),
                )
            };
        }
        self.len.store(nodes.len(), Relaxed);
        self.root.store(Box::into_raw(new), Release);
        let rcu = self.domain.rcu();
        let mut table = old;
        while !table.is_null() {
            // SAFETY: reachable from the old root, so alive; no longer reachable from the new
            // root, so retired once, here (its drop frees its lines, not the nodes).
            unsafe {
                let next = (*table).next.load(Acquire);
                let bytes = (*table).bytes();
                rcu.retire_raw_sized(table, bytes);
                table = next;
            }
        }
    }
}
