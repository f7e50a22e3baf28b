//! [`MapBuilder`]: the settings of an [`RcuHashMap`] (capacity, hasher, domain, load
//! factors), checked when the map is built.

use super::table::{Limits, Table};
use super::{buckets_to_hold, Policy, RcuHashMap, MAX_BUCKETS};
use crate::domain_ref::DomainRef;
use crate::sync::AtomicPtr;
use crate::{Error, Rcu};
use crossbeam_utils::CachePadded;
use std::collections::hash_map::RandomState;
use std::marker::PhantomData;
use std::sync::atomic::AtomicUsize;

/// Entries per bucket past which the table grows, by default: four fifths of a bucket's first
/// line (five entries), so that few entries spill into overflow lines.
const DEFAULT_MAX_LOAD: f32 = 4.0;
/// Entries per bucket below which the table shrinks, by default: a sixteenth of the maximum,
/// so that a map being emptied shrinks a few times, not at every halving (each shrink visits
/// every bucket of the table it leaves).
const DEFAULT_MIN_LOAD: f32 = 0.25;

/// Settings for an [`RcuHashMap`]; from [`RcuHashMap::builder`].
#[derive(Debug)]
pub struct MapBuilder<S = RandomState, D = &'static Rcu> {
    capacity: usize,
    hasher: S,
    domain: D,
    max_load: f32,
    min_load: f32,
    trim_allocator: bool,
    busted: bool,
}

impl MapBuilder {
    pub(super) fn new() -> Self {
        MapBuilder {
            capacity: 0,
            hasher: RandomState::new(),
            domain: Rcu::global(),
            max_load: DEFAULT_MAX_LOAD,
            min_load: DEFAULT_MIN_LOAD,
            trim_allocator: true,
            busted: false,
        }
    }
}

impl<S, D> MapBuilder<S, D> {
    /// Room for `capacity` entries before the first resize; the map does not shrink below it
    /// (until [`shrink_to_fit`](RcuHashMap::shrink_to_fit)).
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// The hasher (default: the standard `RandomState`).
    pub fn hasher<T>(self, hasher: T) -> MapBuilder<T, D> {
        MapBuilder {
            capacity: self.capacity,
            hasher,
            domain: self.domain,
            max_load: self.max_load,
            min_load: self.min_load,
            trim_allocator: self.trim_allocator,
            busted: self.busted,
        }
    }

    /// The domain (default: [`Rcu::global`]).
    pub fn domain<E: DomainRef>(self, domain: E) -> MapBuilder<S, E> {
        MapBuilder {
            capacity: self.capacity,
            hasher: self.hasher,
            domain,
            max_load: self.max_load,
            min_load: self.min_load,
            trim_allocator: self.trim_allocator,
            busted: self.busted,
        }
    }

    /// Grow when entries exceed this many per bucket (default 4: a bucket is a cache line with
    /// room for 5; more spill into overflow lines; 0.1 to 16).
    pub fn max_load_factor(mut self, load: f32) -> Self {
        self.max_load = load;
        self
    }

    /// Shrink when entries fall below this many per bucket (default 0.25, a sixteenth of the
    /// default maximum; 0 disables shrinking; at most a quarter of the maximum).
    pub fn min_load_factor(mut self, load: f32) -> Self {
        self.min_load = load;
        self
    }

    /// Whether to ask the C allocator to give free memory back to the system once the map has freed
    /// 128 KiB since it last asked, by shrinking (the tables it shrank away and the entries they
    /// lost), by being dropped or by being consumed by `into_iter` (default: yes). With glibc, the nodes of removed entries otherwise
    /// stay in the allocator's bins for the life of the process. The trim runs on a callback
    /// worker, at most once a second in the process (one asked for sooner runs when the second is
    /// up, on a thread of its own, `rcukit-trim`, that then exits), and costs about 5 ns per block
    /// freed since the last one, during which other threads' allocations in the heap it trims
    /// wait for glibc's lock (an insert waited 3.8-6.6 ms on the trim after a million-entry map was
    /// dropped); memory given back is faulted in again when the process fills it
    /// later (a fill of a million entries ran about 12% slower into memory just given back than
    /// into memory the allocator had kept). A `fork()` made while a trim is still to run runs it
    /// first, in the forking thread, so that the child, which has none of the threads that would
    /// run it, does not keep that memory. See [the map's memory](crate::map#memory). It does
    /// nothing with other C libraries.
    pub fn trim_allocator(mut self, trim: bool) -> Self {
        self.trim_allocator = trim;
        self
    }

    /// Testing knob for the torture's self-test: removed and replaced values are dropped at
    /// once on the writing thread, while readers may still hold them (their nodes are still
    /// freed after a grace period, so the bytes stay readable).
    ///
    /// # Safety
    ///
    /// Unsound by design: readers can observe dropped values. Only for values whose `Drop`
    /// leaves them readable (handles into a pool), to show that a checker notices.
    #[doc(hidden)]
    pub unsafe fn __busted_drop_values_at_once(mut self) -> Self {
        self.busted = true;
        self
    }

    /// Build the map.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSetting`] for load factors out of range, and for a capacity past the
    /// largest table (2^40 buckets; "capacity overflow").
    pub fn build<K, V>(self) -> Result<RcuHashMap<K, V, S, D>, Error>
    where
        D: DomainRef,
    {
        if !(0.1..=16.0).contains(&self.max_load) {
            return Err(Error::invalid(
                "max_load_factor",
                format!("{} is outside 0.1..=16", self.max_load),
            ));
        }
        // A doubling halves the load and a halving doubles it: with the minimum at most a
        // quarter of the maximum, a table just grown (or shrunk) is a factor of two inside both
        // limits, so a few writes back and forth at a limit never resize it again and again.
        if !(self.min_load >= 0.0 && self.min_load <= self.max_load / 4.0) {
            return Err(Error::invalid(
                "min_load_factor",
                format!(
                    "{} must be at least 0 and at most a quarter of the maximum ({}), so \
                     that a table just resized is well inside both limits",
                    self.min_load, self.max_load
                ),
            ));
        }
        let Some(buckets) = buckets_to_hold(self.capacity, self.max_load) else {
            return Err(Error::invalid(
                "capacity",
                format!(
                    "capacity overflow: {} entries need more than the largest table \
                     ({MAX_BUCKETS} buckets)",
                    self.capacity
                ),
            ));
        };
        let mut map = RcuHashMap {
            root: AtomicPtr::new(Box::into_raw(Table::with_limits(buckets, Limits::NEVER))),
            len: CachePadded::new(AtomicUsize::new(0)),
            hasher: self.hasher,
            domain: self.domain,
            policy: Policy {
                max_load: self.max_load,
                min_load: self.min_load,
                trim_allocator: self.trim_allocator,
                busted_drop_values_at_once: self.busted,
            },
            min_buckets: AtomicUsize::new(buckets),
            freed: Default::default(),
            generation: crate::sync::fork::ForkStamp::new(),
            _owns: PhantomData,
        };
        map.init_limits();
        Ok(map)
    }
}

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use super::*;
    use crate::sync::{on_lines_apart, span_of};

    #[test]
    fn the_entry_count_shares_no_cache_line_with_what_lookups_read() {
        type M = RcuHashMap<u64, u64>;
        let len = span_of!(M, len);
        for read in [span_of!(M, root), span_of!(M, hasher), span_of!(M, domain)] {
            assert!(on_lines_apart::<M>(len, read));
        }
    }
}
