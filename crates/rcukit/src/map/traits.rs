//! The standard traits of [`RcuHashMap`] that build or compare whole maps: `FromIterator`,
//! `Extend`, `Clone` and `PartialEq`.

use super::node::{Batch, Node};
use super::table::{Limits, Table};
use super::write::Sink;
use super::RcuHashMap;
use crate::domain_ref::DomainRef;
use crate::report;
use crossbeam_utils::CachePadded;
use std::any::Any;
use std::cell::RefCell;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

/// What a write into a map that nobody else can see unlinked: freed as soon as the write
/// returned (no reader can hold it), not retired into the domain; and when it drops, what is
/// left (a panic of the user's `Hash` or `Eq` unwound past the write: the duplicates the batch
/// had replaced, and tables a resize finished, are freed, not leaked).
struct Private<K, V> {
    nodes: RefCell<Vec<*mut Node<K, V>>>,
    tables: RefCell<Vec<*mut Table<K, V>>>,
}

impl<K, V> Sink<K, V> for Private<K, V> {
    fn take(&self, node: Option<*mut Node<K, V>>, table: Option<*mut Table<K, V>>) {
        self.nodes.borrow_mut().extend(node);
        self.tables.borrow_mut().extend(table);
    }
}

impl<K, V> Private<K, V> {
    /// Free what was collected.
    ///
    /// # Safety
    ///
    /// Nobody but the caller can reach the map the nodes and tables came from, and nothing
    /// borrowed from them is alive.
    unsafe fn free(&self) {
        for table in self.tables.borrow_mut().drain(..) {
            // SAFETY: unlinked, owned, unreachable (caller's contract); a finished table owns
            // only its arrays.
            drop(unsafe { Box::from_raw(table) });
        }
        let nodes = std::mem::take(&mut *self.nodes.borrow_mut());
        // SAFETY: as above. The batch drops each node in the drop-apart form, as a retired
        // node would be, and all of them even when some panic (then the first panic goes on).
        drop(unsafe { Batch::new(nodes) });
    }
}

impl<K, V> Drop for Private<K, V> {
    fn drop(&mut self) {
        // SAFETY: a `Private` is made by `from_iter` for a map that nobody else can see, and
        // dropped after every borrow of a write into it ended (on unwind too: the locals of
        // the write's frames go first).
        let freed = catch_unwind(AssertUnwindSafe(|| unsafe { self.free() }));
        if let Err(payload) = freed {
            // Every node was dropped. While the panic that left them behind unwinds, a value's
            // panic stops here (a second one would abort the process).
            report::resume_unless_unwinding(payload);
        }
    }
}

impl<K, V, S> FromIterator<(K, V)> for RcuHashMap<K, V, S>
where
    K: Hash + Eq + Send + 'static,
    V: Send + 'static,
    S: BuildHasher + Default,
{
    /// A map of the pairs; of pairs with equal keys, the last one stays (as with `insert`),
    /// and the ones it replaced are dropped at once: nobody else can see the map yet.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let map = RcuHashMap::with_hasher(S::default());
        let private = Private {
            nodes: RefCell::new(Vec::new()),
            tables: RefCell::new(Vec::new()),
        };
        let mut iter = iter.into_iter();
        loop {
            // The user's iterator runs outside the guard (it may wait for a grace period). If
            // it panics, nobody will see the map: the pairs taken go with it.
            let batch = Taken::from(&mut iter);
            if let Some(payload) = batch.panic {
                resume_unwind(payload);
            }
            let guard = map.domain().read();
            for (key, value) in batch.pairs {
                let hash = map.hasher.hash_one(&key);
                drop(map.put(hash, key, value, true, &guard, &private, "from_iter"));
            }
            drop(guard);
            // SAFETY: the map is this function's alone, and every `put` (what borrowed from
            // the nodes) is gone. After the guard: the drops of the replaced duplicates are
            // user code, which may wait for a grace period of the domain.
            unsafe { private.free() };
            if batch.ended {
                return map;
            }
        }
    }
}

/// Pairs taken from the user's iterator per read-side critical section of `Extend` and
/// `FromIterator`.
const BATCH: usize = 256;

/// Up to [`BATCH`] pairs of the user's iterator, taken with no guard held: it may do anything
/// a thread outside a read-side critical section may (receive from a thread that waits for a
/// grace period, or wait for one itself).
struct Taken<T> {
    pairs: Vec<T>,
    /// The iterator returned `None`: its first `None` ends it, as it ends a loop of inserts
    /// (an iterator that is not fused may yield again after it).
    ended: bool,
    /// The iterator panicked (after giving `pairs`): `Extend` inserts them before the panic
    /// goes on, as a loop of single inserts would have (dropping them would lose pairs the
    /// iterator handed over).
    panic: Option<Box<dyn Any + Send>>,
}

impl<T> Taken<T> {
    fn from(iter: &mut impl Iterator<Item = T>) -> Taken<T> {
        let mut pairs = Vec::new();
        let mut ended = false;
        let taken = catch_unwind(AssertUnwindSafe(|| {
            pairs.reserve(iter.size_hint().0.min(BATCH));
            while pairs.len() < BATCH {
                match iter.next() {
                    Some(pair) => pairs.push(pair),
                    None => {
                        ended = true;
                        break;
                    }
                }
            }
        }));
        Taken {
            pairs,
            ended,
            panic: taken.err(),
        }
    }
}

/// Inserts each pair (as [`insert`](RcuHashMap::insert)), a batch of pairs per guard; the
/// iterator itself runs outside the guards. If it panics, the pairs it gave before are
/// inserted, then the panic goes on.
impl<K, V, S, D> Extend<(K, V)> for &RcuHashMap<K, V, S, D>
where
    K: Hash + Eq + Send + 'static,
    V: Send + 'static,
    S: BuildHasher,
    D: DomainRef,
{
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        let mut iter = iter.into_iter();
        loop {
            let batch = Taken::from(&mut iter);
            if !batch.pairs.is_empty() {
                // A handle per batch: what the batch replaced is retired when it drops.
                let pinned = self.pin();
                for (key, value) in batch.pairs {
                    pinned.insert(key, value);
                }
            }
            if let Some(payload) = batch.panic {
                resume_unwind(payload);
            }
            if batch.ended {
                return;
            }
        }
    }
}

impl<K, V, S, D> Extend<(K, V)> for RcuHashMap<K, V, S, D>
where
    K: Hash + Eq + Send + 'static,
    V: Send + 'static,
    S: BuildHasher,
    D: DomainRef,
{
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        (&*self).extend(iter);
    }
}

/// A map of the same entries (cloned under a guard: a clone taken while writers run has each
/// entry present throughout, old or new versions of entries changed meanwhile), with a clone
/// of the hasher, the same domain handle and the same settings.
impl<K, V, S, D> Clone for RcuHashMap<K, V, S, D>
where
    K: Hash + Eq + Clone + Send + 'static,
    V: Clone + Send + 'static,
    S: BuildHasher + Clone,
    D: DomainRef + Clone,
{
    fn clone(&self) -> Self {
        let floor = self.min_buckets.load(Relaxed);
        // The user's `Clone`s before the table: a panic in one of them leaves nothing to free
        // (the table behind the raw `root` pointer would be leaked by the unwinding).
        let (hasher, domain) = (self.hasher.clone(), self.domain.clone());
        let mut copy = RcuHashMap {
            root: crate::sync::AtomicPtr::new(Box::into_raw(Table::with_limits(
                floor,
                Limits::NEVER,
            ))),
            len: CachePadded::new(AtomicUsize::new(0)),
            hasher,
            domain,
            policy: self.policy,
            min_buckets: AtomicUsize::new(floor),
            freed: Default::default(),
            generation: crate::sync::fork::ForkStamp::new(),
            _owns: PhantomData,
        };
        copy.init_limits();
        let guard = self.domain().read();
        (&copy).extend(self.iter(&guard).map(|(k, v)| (k.clone(), v.clone())));
        copy
    }
}

/// Equal when both hold the same keys with equal values. Each map is read under a guard of
/// its own domain; while writers run, the answer is about entries as each was read, not
/// about one instant.
impl<K, V, S, D> PartialEq for RcuHashMap<K, V, S, D>
where
    K: Hash + Eq,
    V: PartialEq,
    S: BuildHasher,
    D: DomainRef,
{
    fn eq(&self, other: &Self) -> bool {
        if self.len() != other.len() {
            return false;
        }
        let mine = self.domain().read();
        let theirs = other.domain().read();
        self.iter(&mine)
            .all(|(k, v)| other.get(k, &theirs) == Some(v))
    }
}

impl<K, V, S, D> Eq for RcuHashMap<K, V, S, D>
where
    K: Hash + Eq,
    V: Eq,
    S: BuildHasher,
    D: DomainRef,
{
}
