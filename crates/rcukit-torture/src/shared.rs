//! The state every thread of a run shares: the flavor under test, the element pool, the
//! counters, the stop flag, the map under test in a map run, and the owned readers' settings
//! and helper channels. Every actor (readers, writer, updaters, fault injector, map writers)
//! and the report see the run through it; the engine builds it and starts them.

use crate::config::Config;
use crate::counters::{Counters, FaultCounters};
use crate::flavor::{Flavor, UpdateKind};
use crate::handoff::{Inbox, OwnedReaders};
use crate::map::MapTorture;
use crate::pipe::{Pool, POOL_SIZE};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicUsize};

/// Everything the torture threads share.
pub(crate) struct Shared<F: Flavor> {
    pub(crate) flavor: F,
    pub(crate) pool: Pool,
    pub(crate) counters: Counters,
    pub(crate) faults: FaultCounters,
    pub(crate) stop: AtomicBool,
    /// The update kinds the flavor supports.
    pub(crate) kinds: Vec<UpdateKind>,
    /// The map under test, in a map run.
    pub(crate) map: Option<MapTorture>,
    /// The owned readers' settings and helper channels.
    pub(crate) owned: OwnedReaders<F::Cookie>,
    /// The flavor has owned sections ([`Flavor::read_owned`]).
    pub(crate) has_owned: bool,
    /// Threads that have finished (successfully or by panicking).
    pub(crate) finished: AtomicUsize,
    /// Reader threads that reached the end of their lifetime before the run stopped: the
    /// first, third, ... of them read through their thread's exit.
    pub(crate) lifetimes_ended: AtomicUsize,
}

impl<F: Flavor> Shared<F> {
    /// The shared state of a run, and the inboxes of its owned-section helpers.
    pub(crate) fn new(
        flavor: F,
        map: Option<MapTorture>,
        config: &Config,
    ) -> (Shared<F>, Vec<Inbox<F::Cookie>>) {
        let kinds = UpdateKind::ALL
            .into_iter()
            .filter(|&k| flavor.supports(k))
            .collect();
        // Does the flavor have owned sections? (One, ended at once, to find out.)
        let has_owned = flavor.read_owned().is_some();
        let (owned, inboxes) = OwnedReaders::new(if has_owned { config.owned } else { 0.0 });
        let shared = Shared {
            flavor,
            pool: Pool::new(POOL_SIZE),
            counters: Counters::default(),
            faults: FaultCounters::default(),
            stop: AtomicBool::new(false),
            kinds,
            map,
            owned,
            has_owned,
            finished: AtomicUsize::new(0),
            lifetimes_ended: AtomicUsize::new(0),
        };
        (shared, inboxes)
    }

    /// Whether any error was seen so far.
    pub(crate) fn failed(&self) -> bool {
        self.counters.failed.load(Relaxed) || self.map.as_ref().is_some_and(|m| m.failed())
    }
}
