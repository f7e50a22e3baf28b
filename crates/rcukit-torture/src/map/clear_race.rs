//! The `map` run's clear race: a second [`RcuHashMap`] on the run's domain, outside the pipe's
//! books, that one thread grows and empties while another `clear()`s it.
//!
//! The map run's own map is cleared only at the end, when every thread has stopped, since its
//! stable keys must never go. But a `clear` racing writers walks the current table *and* the
//! table a resize is moving into, bucket by bucket, while movers fill that table (a larger
//! one without its buckets' locks) and place entries in it: it must leave a bucket to the
//! mover filling it, and must not retire an entry whose old bucket, still unmarked, lookups
//! still read. So:
//!
//! * **The grower** inserts bursts of 1,000-8,000 fresh keys (the table grows a few
//!   doublings, buckets moving under every insert) and removes every other burst again one by
//!   one (the table shrinks).
//! * **The clearer** calls `clear()` every 0.1-1 ms. Between clears it looks up recently
//!   inserted keys under a guard, pauses inside the guard, and then checks that every value it
//!   found is still alive: a value's `Drop` marks it dead first, so a value the map freed
//!   while this reader could still reach it is seen dead (until its memory is reused).
//!
//! At the end every value must have been dropped exactly once, no lookup may have found a dead
//! value, `len()` must equal an iteration's count, and nothing may be left after a last
//! `clear()`.

use rcukit::{Rcu, RcuHashMap};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

/// A value's mark while the map may hold it.
const ALIVE: u64 = 0xA11F_E000_0000_0001;
/// A value's mark once dropped.
const DEAD: u64 = 0xDEAD_DEAD_DEAD_DEAD;

/// Keys a clearer's read section looks up.
const LOOKUPS: usize = 32;

/// The race's books.
#[derive(Default)]
struct Books {
    made: AtomicU64,
    dropped: AtomicU64,
    /// Drops of a value already dropped (errors).
    double_drops: AtomicU64,
    /// Values found dead or under another key (errors).
    dead_reads: AtomicU64,
    clears: AtomicU64,
    found: AtomicU64,
}

/// The race map's hasher: each run of 32 consecutive keys shares one hash, so that a bucket
/// holds 32 entries or none and each move of a bucket fills seven lines, keeping a mover in
/// the new table long enough for a clear to meet it there.
#[derive(Clone, Copy, Default)]
struct InRuns;

struct InRunsHasher(u64);

impl BuildHasher for InRuns {
    type Hasher = InRunsHasher;
    fn build_hasher(&self) -> InRunsHasher {
        InRunsHasher(0)
    }
}

impl Hasher for InRunsHasher {
    fn finish(&self) -> u64 {
        (self.0 >> 5).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0 << 8 | u64::from(b);
        }
    }
    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }
}

/// A value of the race's map: its mark and its key.
struct Marked {
    mark: AtomicU64,
    key: u64,
    books: Arc<Books>,
}

impl Marked {
    fn new(key: u64, books: &Arc<Books>) -> Marked {
        books.made.fetch_add(1, Relaxed);
        Marked {
            mark: AtomicU64::new(ALIVE),
            key,
            books: Arc::clone(books),
        }
    }
}

impl Drop for Marked {
    fn drop(&mut self) {
        if self.mark.swap(DEAD, SeqCst) == ALIVE {
            self.books.dropped.fetch_add(1, Relaxed);
        } else {
            self.books.double_drops.fetch_add(1, Relaxed);
        }
    }
}

/// What a run's report says of the race.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClearRaceReport {
    /// `clear()` calls racing the grower.
    pub clears: u64,
    /// Values inserted.
    pub values: u64,
    /// Values dropped.
    pub drops: u64,
    /// Values the clearer found (and checked alive after a pause).
    pub found: u64,
    /// Values dropped twice, and values found dead or under another key (errors).
    pub errors: u64,
}

/// The race (see the module docs).
pub(crate) struct ClearRace {
    map: RcuHashMap<u64, Marked, InRuns, Arc<Rcu>>,
    books: Arc<Books>,
    /// One past the last key the grower inserted.
    newest: AtomicU64,
}

impl ClearRace {
    /// An empty race map on `domain`.
    pub(crate) fn new(domain: Arc<Rcu>) -> Result<ClearRace, rcukit::Error> {
        Ok(ClearRace {
            map: RcuHashMap::builder()
                .hasher(InRuns)
                .domain(domain)
                .build()?,
            books: Arc::default(),
            newest: AtomicU64::new(0),
        })
    }

    /// Whether an error has been seen so far.
    pub(crate) fn failed(&self) -> bool {
        self.errors() > 0
    }

    /// Values dropped twice, and values found dead or under another key.
    fn errors(&self) -> u64 {
        self.books.double_drops.load(Relaxed) + self.books.dead_reads.load(Relaxed)
    }

    /// The grower's loop, until `stop`.
    pub(crate) fn grow(&self, stop: &AtomicBool, seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut next = 0u64;
        let mut burst = 0u64;
        while !stop.load(Relaxed) {
            burst += 1;
            let first = next;
            for _ in 0..rng.u64(1_000..=8_000) {
                if stop.load(Relaxed) {
                    break;
                }
                self.map.pin().insert(next, Marked::new(next, &self.books));
                next += 1;
                self.newest.store(next, Relaxed);
            }
            if burst % 2 == 0 {
                for key in first..next {
                    self.map.pin().remove(&key);
                }
            }
        }
    }

    /// The clearer's loop, until `stop`.
    pub(crate) fn clear_and_look(&self, stop: &AtomicBool, seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed);
        while !stop.load(Relaxed) {
            std::thread::sleep(Duration::from_micros(rng.u64(100..=1_000)));
            self.map.clear();
            self.books.clears.fetch_add(1, Relaxed);
            let newest = self.newest.load(Relaxed);
            let guard = self.map.domain().read();
            let mut found = Vec::with_capacity(LOOKUPS);
            for _ in 0..LOOKUPS {
                let key = newest.saturating_sub(rng.u64(0..30_000));
                if let Some(value) = self.map.get(&key, &guard) {
                    found.push((key, value));
                }
            }
            for _ in 0..rng.u32(0..5_000) {
                std::hint::spin_loop();
            }
            for (key, value) in found {
                self.books.found.fetch_add(1, Relaxed);
                if value.mark.load(SeqCst) != ALIVE || value.key != key {
                    self.books.dead_reads.fetch_add(1, Relaxed);
                }
            }
        }
    }

    /// The end of the run, every thread stopped: check the books, noting problems.
    pub(crate) fn finish(&self, problems: &mut Vec<String>) {
        let guard = self.map.domain().read();
        let (len, counted) = (self.map.len(), self.map.iter(&guard).count());
        drop(guard);
        if len != counted {
            problems.push(format!(
                "clear race: len() is {len} but an iteration yields {counted}"
            ));
        }
        self.map.clear();
        if !self.map.is_empty() {
            problems.push(format!(
                "clear race: len() is {} after the last clear()",
                self.map.len()
            ));
        }
        // Twice: the retired values' drops run in the first one's callbacks.
        self.map.domain().barrier();
        self.map.domain().barrier();
        let report = self.report();
        if report.values != report.drops {
            problems.push(format!(
                "clear race: {} values inserted, {} dropped",
                report.values, report.drops
            ));
        }
        if report.errors > 0 {
            problems.push(format!(
                "clear race: {} values dropped twice, {} found dead or under another key",
                self.books.double_drops.load(Relaxed),
                self.books.dead_reads.load(Relaxed)
            ));
        }
    }

    pub(crate) fn report(&self) -> ClearRaceReport {
        let b = &self.books;
        ClearRaceReport {
            clears: b.clears.load(Relaxed),
            values: b.made.load(Relaxed),
            drops: b.dropped.load(Relaxed),
            found: b.found.load(Relaxed),
            errors: self.errors(),
        }
    }
}
