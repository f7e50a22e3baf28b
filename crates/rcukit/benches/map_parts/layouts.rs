//! The layout part: what one reader's lookup costs in `RcuHashMap`'s layout (a bucket's line
//! of tags and node pointers, then the node) beside two layouts it could have, each measured
//! against `std::sync::RwLock<hashbrown::HashMap>` in the same rounds:
//!
//! * **hashbrown under a guard**: the same `hashbrown::HashMap` read inside an rcukit read-side
//!   critical section instead of under the lock, as a map copied on every write behind an
//!   `RcuCell` is read.
//!   No RCU map can read faster with hashbrown's layout; it bounds what a change of layout
//!   could gain.
//! * **inline entries**: the map's line layout with the entries in the line instead of
//!   pointers to nodes (a state word, a word of seven 9-bit tags and seven `(u64, u64)`
//!   entries in 128 bytes), probed as `RcuHashMap` probes a line (the state, then the tags,
//!   then the entries whose tag matches), under a guard. It is built for this measurement
//!   only: filled once, never written, with the keys of a full bucket in a side table that
//!   the probe reads when the bucket lacks the key (an overflow line's part). Entries in the
//!   table move at every resize, which is sound only for values without interior mutability
//!   (`Copy`), so this layout would be a second map type.
//!
//! * **`RcuFlatMap`** (hashbrown's layout with sixteen-slot groups, made concurrent; entries
//!   inline), with a guard per lookup (`get_copied`, which takes and drops one) and with one
//!   guard for the whole run; and hashbrown with no guard and no lock (the lock held
//!   throughout, never contended): the last two show what the tables cost alone, the first
//!   what a guard per lookup adds. And `RcuFlatMap` on a QSBR domain, read by a registered
//!   thread with no code around a lookup and a quiescent state per 1,024 lookups.
//!
//! One thread looks up random present keys (as the lookup part does) and checks every value.

use crate::maps::{check, hasher, next_key, splitmix64, value_of, Hasher};
use crate::stats::{mops, ratio, show_ratio};
use crate::Config;
use rcukit::{Qsbr, Rcu, RcuFlatMap, RcuHashMap};
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::hint::black_box;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Acquire;
use std::time::Instant;

/// Entries per inline bucket.
const SLOTS: usize = 7;
/// Bits of one tag.
const TAG_BITS: u32 = 9;
/// A one in the lowest bit of every tag.
const TAG_LOW: u64 = {
    let mut low = 0;
    let mut i = 0;
    while i < SLOTS {
        low |= 1 << (i as u32 * TAG_BITS);
        i += 1;
    }
    low
};
/// A one in the highest bit of every tag.
const TAG_HIGH: u64 = TAG_LOW << (TAG_BITS - 1);
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;

/// One bucket of the inline layout: 128 bytes.
#[repr(C, align(128))]
struct Bucket {
    state: AtomicU64,
    tags: AtomicU64,
    entries: [UnsafeCell<(u64, u64)>; SLOTS],
}

/// The inline-entry layout, filled once (module docs).
struct Inline {
    buckets: Vec<Bucket>,
    mask: u64,
    overflow: HashMap<u64, u64, Hasher>,
    hasher: Hasher,
}

// SAFETY: the entries are written only while the table is built (`&mut self`), then only read.
unsafe impl Sync for Inline {}

fn tag_of(hash: u64) -> u64 {
    (hash >> (64 - TAG_BITS)) | 1
}

impl Inline {
    /// A table of `keys.len() / 4` buckets (a power of two), the load at which `RcuHashMap`
    /// grows.
    fn new(keys: &[u64]) -> Inline {
        let n = (keys.len() / 4).next_power_of_two().max(1);
        let mut table = Inline {
            buckets: (0..n)
                .map(|_| Bucket {
                    state: AtomicU64::new(0),
                    tags: AtomicU64::new(0),
                    entries: std::array::from_fn(|_| UnsafeCell::new((0, 0))),
                })
                .collect(),
            mask: n as u64 - 1,
            overflow: HashMap::with_hasher(hasher()),
            hasher: hasher(),
        };
        for &k in keys {
            let hash = table.hasher.hash_one(k);
            let bucket = &mut table.buckets[(hash & table.mask) as usize];
            let tags = *bucket.tags.get_mut();
            match (0..SLOTS).find(|&i| (tags >> (i as u32 * TAG_BITS)) & TAG_MASK == 0) {
                Some(i) => {
                    *bucket.entries[i].get_mut() = (k, value_of(k));
                    *bucket.tags.get_mut() = tags | tag_of(hash) << (i as u32 * TAG_BITS);
                }
                None => drop(table.overflow.insert(k, value_of(k))),
            }
        }
        table
    }

    #[inline(always)]
    fn get(&self, key: u64) -> Option<&u64> {
        let hash = self.hasher.hash_one(key);
        let bucket = &self.buckets[(hash & self.mask) as usize];
        if bucket.state.load(Acquire) & 1 != 0 {
            return None; // a moved bucket (never, here), as the map checks
        }
        let tags = bucket.tags.load(Acquire);
        let tag = tag_of(hash);
        let x = tags ^ tag.wrapping_mul(TAG_LOW);
        let mut candidates = x.wrapping_sub(TAG_LOW) & !x & TAG_HIGH;
        while candidates != 0 {
            let i = (candidates.trailing_zeros() / TAG_BITS) as usize;
            candidates &= candidates - 1;
            if (tags >> (i as u32 * TAG_BITS)) & TAG_MASK == tag {
                // SAFETY: written before the table was shared, never since.
                let entry = unsafe { &*bucket.entries[i].get() };
                if entry.0 == key {
                    return Some(&entry.1);
                }
            }
        }
        self.overflow.get(&key)
    }
}

/// The rows, in table order.
const ROWS: [&str; 8] = [
    "`RcuHashMap`, a guard per lookup",
    "std `RwLock<hashbrown>`",
    "hashbrown under a guard",
    "inline entries, a guard per lookup",
    "`RcuFlatMap`, `get_copied` (a guard per lookup)",
    "`RcuFlatMap`, one guard for the run",
    "hashbrown, no guard, no lock",
    "`RcuFlatMap` on a QSBR domain, a quiescent state per 1,024 lookups",
];

/// Checked lookups per second of one thread for `lookup`, over `count` random keys.
fn rate(keys: &[u64], count: usize, mut lookup: impl FnMut(u64) -> Option<u64>) -> f64 {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut sum = 0u64;
    let start = Instant::now();
    for _ in 0..count {
        let k = next_key(keys, &mut rng);
        sum = sum.wrapping_add(check(k, lookup(k)));
    }
    black_box(sum);
    count as f64 / start.elapsed().as_secs_f64()
}

/// The layout part at `n` keys.
pub(crate) fn run(cfg: &Config, n: usize) {
    let keys: Vec<u64> = (0..n as u64).map(|i| splitmix64((1 << 60) + i)).collect();
    let rcu = Rcu::global();
    let map: RcuHashMap<u64, u64, Hasher> = RcuHashMap::with_hasher(hasher());
    let flat: RcuFlatMap<u64, u64, Hasher> = RcuFlatMap::with_hasher(hasher());
    let qsbr = Qsbr::new();
    let on_qsbr: RcuFlatMap<u64, u64, Hasher, &Qsbr> =
        RcuFlatMap::with_capacity_hasher_in(0, hasher(), &qsbr);
    let mut brown: hashbrown::HashMap<u64, u64, Hasher> = hashbrown::HashMap::with_hasher(hasher());
    for &k in &keys {
        map.pin().insert(k, value_of(k));
        flat.insert(k, value_of(k));
        on_qsbr.insert(k, value_of(k));
        brown.insert(k, value_of(k));
    }
    // One table for both hashbrown rows, so that they differ only in the lock.
    let locked = std::sync::RwLock::new(brown);
    let inline = Inline::new(&keys);
    // About as many lookups as the lookup part's measurement takes at 20 M lookups/s.
    let count = (cfg.run_for.as_secs_f64() * 20e6) as usize;
    let mut rates = vec![Vec::new(); ROWS.len()];
    for round in 0..cfg.rounds {
        for i in 0..ROWS.len() {
            let row = (i + round) % ROWS.len();
            let r = match row {
                0 => rate(&keys, count, |k| map.get(&k, &rcu.read()).copied()),
                1 => rate(&keys, count, |k| locked.read().unwrap().get(&k).copied()),
                2 => {
                    let brown = locked.read().unwrap(); // held throughout, never contended
                    rate(&keys, count, |k| {
                        let _guard = rcu.read();
                        brown.get(&k).copied()
                    })
                }
                3 => rate(&keys, count, |k| {
                    let _guard = rcu.read();
                    inline.get(k).copied()
                }),
                4 => rate(&keys, count, |k| flat.get_copied(&k)),
                5 => {
                    let guard = rcu.read(); // held throughout: no writer waits for it
                    rate(&keys, count, |k| flat.get(&k, &guard).copied())
                }
                6 => {
                    let brown = locked.read().unwrap();
                    rate(&keys, count, |k| brown.get(&k).copied())
                }
                _ => {
                    let mut me = qsbr.register();
                    let mut n = 0u32;
                    rate(&keys, count, |k| {
                        n = n.wrapping_add(1);
                        if n % 1024 == 0 {
                            me.quiescent_state();
                        }
                        on_qsbr.get(&k, &me).copied()
                    })
                }
            };
            rates[row].push(r);
        }
    }
    println!("### Layouts: one reader's lookups at {n} keys\n");
    println!(
        "(the inline table: {} buckets of 128 bytes, {} of the {n} keys in its side table)\n",
        inline.buckets.len(),
        inline.overflow.len()
    );
    println!("| layout | M lookups/s | ÷ std `RwLock<hashbrown>` |");
    println!("|---|---:|---:|");
    for (row, name) in ROWS.iter().enumerate() {
        println!(
            "| {name} | {} | {} |",
            mops(&rates[row]),
            show_ratio(ratio(&rates[row], &rates[1]))
        );
    }
    println!();
}
