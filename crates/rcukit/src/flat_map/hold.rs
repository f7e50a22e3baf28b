//! How the map reads by itself, for the calls that take no read section from their caller
//! (`capacity`, `get_copied`, `Debug`, `Clone`, `PartialEq`): on an `Rcu` domain under a guard
//! it takes; on a QSBR domain under its writer lock.
//!
//! A QSBR domain's read sections are its online threads, and only a thread's own
//! [`QsbrThread`](crate::QsbrThread) puts it online. The map cannot tell whether the calling
//! thread is online for the whole call either: the user's code that the call runs (`Hash`,
//! `Eq`, `Debug`, `PartialEq` of the entries) could announce a quiescent state through a
//! handle kept in a thread-local. So it holds the table in place instead: only a holder of the
//! writer lock replaces the root, and a table is retired only after it stopped being the root.
//! Such a call waits for a write under way and makes writes wait; the user's code it runs may
//! read the map, and a write from it panics, as from any code the map runs under its lock.
//! Called from such code (a closure given to a write, the key's `Hash` or `Eq` in a write), it
//! takes no lock: the thread holds it already, and the write waits for the call. Called from
//! code that *another* map runs under its lock, it nests two locks, as a write would.

use super::iter::Iter;
use super::table::Table;
use super::write_lock::WriteLock;
use super::RcuFlatMap;
use crate::domain_ref::{self, AnyDomainRef};
use crate::Guard;
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

/// What keeps the map's table alive for a call that reads by itself.
pub(super) enum Hold<'m, K, V, S, D>
where
    K: Clone + Send + 'static,
    V: Clone + Send + 'static,
    D: AnyDomainRef,
{
    /// A guard of the map's `Rcu` domain.
    Guard(Guard<'m>),
    /// The writer lock (a QSBR domain).
    Lock(WriteLock<'m, K, V, S, D>),
    /// The writer lock, held by this thread already: the call comes from the user's code that
    /// a write runs under it (a QSBR domain). The write waits for the call, so the table
    /// stays as it is until the call returns.
    Held,
}

impl<K: Clone + Send + 'static, V: Clone + Send + 'static, S, D: AnyDomainRef>
    RcuFlatMap<K, V, S, D>
{
    /// A guard of the map's domain, or its writer lock where the domain gives no guard.
    #[inline]
    pub(super) fn hold(&self) -> Hold<'_, K, V, S, D> {
        match domain_ref::read_by_itself(&self.domain) {
            Some(guard) => Hold::Guard(guard),
            None if self.locked_here() => Hold::Held,
            None => Hold::Lock(self.lock()),
        }
    }

    /// The table `hold` keeps alive.
    pub(super) fn held_table<'h>(&'h self, hold: &'h Hold<'_, K, V, S, D>) -> &'h Table<K, V> {
        match hold {
            Hold::Guard(guard) => self.table(guard),
            Hold::Lock(lock) => self.table_mine(lock),
            // SAFETY: this thread holds the writer lock, which only its holder uses to replace
            // the root, and the write that holds it waits for this call (see `Hold::Held`);
            // the borrow of `hold` ends within the call.
            Hold::Held => unsafe { &*self.root.load(std::sync::atomic::Ordering::Relaxed) },
        }
    }

    /// The entries, as [`iter`](Self::iter) yields them, under `hold`.
    pub(super) fn iter_held<'h>(&'h self, hold: &'h Hold<'_, K, V, S, D>) -> Iter<'h, K, V> {
        match hold {
            // An iteration registers under the writer lock: it takes it, unless this thread
            // holds it already (the call comes from the user's code that a write runs under it,
            // where taking it again would panic).
            Hold::Guard(guard) if !self.locked_here() => self.iter(guard),
            // The lock is held: register the walk without taking it again.
            Hold::Guard(_) | Hold::Lock(_) | Hold::Held => Iter::walk(self.held_table(hold)),
        }
    }
}

impl<K, V, S, D> RcuFlatMap<K, V, S, D>
where
    K: Clone + Hash + Eq + Send + 'static,
    V: Clone + Send + 'static,
    S: BuildHasher,
    D: AnyDomainRef,
{
    /// The value for `key`, under `hold`.
    pub(super) fn get_held<'h, Q>(
        &'h self,
        key: &Q,
        hold: &'h Hold<'_, K, V, S, D>,
    ) -> Option<&'h V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.find_in(self.held_table(hold), key).map(|(_, v)| v)
    }
}
