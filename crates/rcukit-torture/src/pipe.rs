//! The element pool and its pipeline: publish, age, free, reuse; and the histograms of ages.
//!
//! # The pipeline
//!
//! One element at a time is *current*: readers find it through [`Pool::current`]. The writer
//! takes a free element, resets it (age 0, `mbtest` 1), publishes it with a `Release` store,
//! and moves the old one to age 1 ("removed from reader view"). From then on, every grace
//! period that the writer waits for, or every link of a callback chain, adds one to the
//! removed element's age; at age [`PIPE_LEN`] it is freed: `mbtest` goes back to 0 and it
//! returns to the free list, from where the writer will publish it again.
//!
//! # Why a reader never sees an age above 1
//!
//! A reader loads the current index and later, still inside its critical section, reads the
//! element's age. Age 2 is written only after a grace period that started after the element
//! was removed, hence after the reader loaded it. Such a grace period must wait for the reader
//! (the grace-period guarantee), so the reader's load of the age happens before the store of
//! 2 and cannot return it. A reader that sees 2 or more proves a grace period ended too early.
//! A reader that sees `mbtest == 0` just after loading the element saw a freed element, or saw
//! the index without the writes that preceded its publication (a publish/subscribe error,
//! rcutorture's `rtmbe`).
//!
//! # Why the checker itself has no undefined behaviour
//!
//! Elements are never really freed while the run lasts: "free" means back in the pool, which
//! lives as long as every thread that can touch it. All fields are atomics. A broken flavor
//! therefore lets a reader observe a recycled element, which it reports, and never lets it
//! touch released memory.

use parking_lot::Mutex;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize};

/// Age at which an element is freed (rcutorture's `RCU_TORTURE_PIPE_LEN`).
pub const PIPE_LEN: usize = 10;

/// Number of histogram buckets: ages 0..=PIPE_LEN (the last bucket also takes anything larger).
pub const BUCKETS: usize = PIPE_LEN + 1;

/// A shared histogram over `0..BUCKETS`; values past the end land in the last bucket.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS],
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Histogram {
        Histogram::default()
    }

    /// Count one `value`.
    pub fn record(&self, value: usize) {
        self.buckets[value.min(BUCKETS - 1)].fetch_add(1, Relaxed);
    }

    /// Add a thread's local counts.
    pub fn add(&self, local: &LocalHistogram) {
        for (shared, &n) in self.buckets.iter().zip(local.0.iter()) {
            if n > 0 {
                shared.fetch_add(n, Relaxed);
            }
        }
    }

    /// The counts now.
    pub fn snapshot(&self) -> [u64; BUCKETS] {
        std::array::from_fn(|i| self.buckets[i].load(Relaxed))
    }
}

/// A thread-private histogram, flushed into a [`Histogram`].
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalHistogram(pub [u64; BUCKETS]);

impl LocalHistogram {
    /// Count one `value`.
    #[inline]
    pub fn record(&mut self, value: u64) {
        let i = usize::try_from(value)
            .unwrap_or(usize::MAX)
            .min(BUCKETS - 1);
        self.0[i] += 1;
    }
}

/// Elements in the pool. Call chains keep elements for about nine grace periods, so the writer
/// can run out; it then counts an allocation failure and waits for a grace period.
pub const POOL_SIZE: usize = 10 * PIPE_LEN;

/// One torture element (rcutorture's `struct rcu_torture`).
#[derive(Debug)]
pub struct Element {
    /// Grace periods since removal, plus one; 0 while current.
    age: AtomicU32,
    /// 1 while published or removed, 0 while free (rcutorture's `rtort_mbtest`).
    mbtest: AtomicU32,
}

/// The pool, the current element and the free list.
#[derive(Debug)]
pub struct Pool {
    elements: Box<[Element]>,
    current: AtomicUsize,
    free: Mutex<Vec<usize>>,
    /// Free-Block Circulation: `circulation[i]` counts transitions out of age `i`. The last
    /// bucket counts transitions out of age `PIPE_LEN` or more, which never happen unless an
    /// element is aged after it was freed: it must stay 0.
    pub circulation: Histogram,
    /// Elements published (rcutorture's `rta`, allocations).
    pub allocated: AtomicU64,
    /// Elements freed (rcutorture's `rtf`).
    pub freed: AtomicU64,
}

impl Pool {
    /// A pool with element 0 current and every other element free.
    pub fn new(size: usize) -> Pool {
        assert!(size >= 2, "the pool needs at least two elements");
        let elements: Box<[Element]> = (0..size)
            .map(|i| Element {
                age: AtomicU32::new(0),
                mbtest: AtomicU32::new(u32::from(i == 0)),
            })
            .collect();
        Pool {
            elements,
            current: AtomicUsize::new(0),
            free: Mutex::new((1..size).rev().collect()),
            circulation: Histogram::new(),
            allocated: AtomicU64::new(0),
            freed: AtomicU64::new(0),
        }
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        self.elements.len()
    }

    /// The current element's index, for readers (subscribe: `Acquire`).
    #[inline]
    pub fn current(&self) -> usize {
        self.current.load(Acquire)
    }

    /// The age of element `index`.
    #[inline]
    pub fn age(&self, index: usize) -> u32 {
        self.elements[index].age.load(Relaxed)
    }

    /// The `mbtest` field of element `index`.
    #[inline]
    pub fn mbtest(&self, index: usize) -> u32 {
        self.elements[index].mbtest.load(Relaxed)
    }

    /// Take a free element and reset it (age 0, `mbtest` 1), without publishing it: the caller
    /// publishes it some other way (the map torture inserts it into the map). `None` when the
    /// pool is exhausted.
    pub fn alloc(&self) -> Option<usize> {
        let new = self.free.lock().pop()?;
        let element = &self.elements[new];
        element.age.store(0, Relaxed);
        element.mbtest.store(1, Relaxed);
        self.allocated.fetch_add(1, Relaxed);
        Some(new)
    }

    /// Take a free element, reset it and publish it; return the element it replaced, now at
    /// age 1. `None` when the pool is exhausted.
    pub fn publish_new(&self) -> Option<usize> {
        let new = self.alloc()?;
        let old = self.current.swap(new, Release);
        self.age_one(old);
        Some(old)
    }

    /// Put element `index`, taken by [`alloc`](Pool::alloc) but never published (no reader can
    /// have seen it), straight back in the free list.
    pub fn free_unpublished(&self, index: usize) {
        let element = &self.elements[index];
        element.mbtest.store(0, Relaxed);
        element.age.store(PIPE_LEN as u32, Relaxed);
        self.freed.fetch_add(1, Relaxed);
        self.free.lock().push(index);
    }

    /// Move element `index` from age `from` to `from + 1` if it is at age `from`, recording
    /// the transition; otherwise leave it alone and return the age it had. The map torture
    /// uses it for the two steps whose starting age it knows: 0 to 1 when an element is
    /// removed from the map (by its only writer), 1 to 2 when the map drops the value.
    pub fn advance_from(&self, index: usize, from: u32) -> Result<(), u32> {
        self.elements[index]
            .age
            .compare_exchange(from, from + 1, Relaxed, Relaxed)?;
        self.circulation.record(from as usize);
        Ok(())
    }

    /// One grace period has passed for removed element `index`: age it, and free it at
    /// [`PIPE_LEN`]. Returns true when it was freed.
    pub fn age_one(&self, index: usize) -> bool {
        let element = &self.elements[index];
        let before = element.age.fetch_add(1, Relaxed) as usize;
        self.circulation.record(before);
        if before + 1 >= PIPE_LEN {
            if before + 1 == PIPE_LEN {
                element.mbtest.store(0, Relaxed);
                self.freed.fetch_add(1, Relaxed);
                self.free.lock().push(index);
            }
            // Past PIPE_LEN: aged after it was freed; the circulation's last bucket shows it.
            return true;
        }
        false
    }

    /// Age every element of `removed` once, dropping the ones that were freed.
    pub fn age_all(&self, removed: &mut Vec<usize>) {
        removed.retain(|&index| !self.age_one(index));
    }

    /// Elements in the free list.
    pub fn free_count(&self) -> usize {
        self.free.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_element_circulates_through_the_pipe() {
        let pool = Pool::new(3);
        assert_eq!(pool.current(), 0);
        let old = pool.publish_new().unwrap();
        assert_eq!(old, 0);
        assert_eq!(pool.age(0), 1);
        assert_eq!(pool.mbtest(pool.current()), 1);
        let mut removed = vec![old];
        for _ in 1..PIPE_LEN {
            assert_eq!(pool.mbtest(0), 1);
            pool.age_all(&mut removed);
        }
        assert!(removed.is_empty());
        assert_eq!(pool.age(0), PIPE_LEN as u32);
        assert_eq!(pool.mbtest(0), 0);
        assert_eq!(pool.free_count(), 2);
        let c = pool.circulation.snapshot();
        assert_eq!(&c[..PIPE_LEN], &[1; PIPE_LEN]);
        assert_eq!(c[PIPE_LEN], 0);
    }

    #[test]
    fn exhaustion_and_over_aging_are_visible() {
        let pool = Pool::new(2);
        let old = pool.publish_new().unwrap();
        assert!(pool.publish_new().is_none());
        for _ in 1..PIPE_LEN {
            pool.age_one(old);
        }
        assert_eq!(pool.free_count(), 1);
        pool.age_one(old); // a bug: aged after it was freed
        assert_eq!(pool.circulation.snapshot()[PIPE_LEN], 1);
        assert_eq!(pool.free_count(), 1);
    }
}
