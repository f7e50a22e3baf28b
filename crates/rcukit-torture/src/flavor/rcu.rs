//! The `rcu` flavor: an [`rcukit::Rcu`] domain, every primitive forwarded as it is (the update
//! side by `forward_to_domain!`, shared with the `qsbr` flavor); its `busted-barrier` variant,
//! whose `barrier()` returns at once (the barrier checks must catch it); its `busted-owned`
//! variant, whose owned sections end before the reader reads anything (the checks of owned
//! readers must catch it); and the domain under
//! the `map` and `busted-map` runs (the same flavor, renamed, whose domain an
//! [`rcukit::RcuHashMap`] shares: see [`crate::map`]).

use super::{forward_to_domain, Flavor, FlavorSettings, OwnedSection};
use rcukit::{GpCookie, Rcu};
use std::sync::Arc;

/// An rcukit domain built for torturing: short stall timeout, small backlog threshold, two
/// callback workers (so that `barrier()` spans shards).
pub struct RcuFlavor {
    rcu: Arc<Rcu>,
    settings: FlavorSettings,
    busted_barrier: bool,
    busted_owned: bool,
    name: &'static str,
}

impl RcuFlavor {
    /// Build the domain.
    pub fn new(settings: &FlavorSettings) -> Result<RcuFlavor, rcukit::Error> {
        let mut builder = Rcu::builder()
            .name("torture")
            .stall_timeout(settings.stall_timeout)
            .backlog_callbacks(settings.backlog_callbacks)
            .callback_workers(settings.callback_workers);
        if let Some(fence) = settings.fence {
            builder = builder.fence(fence);
        }
        Ok(RcuFlavor {
            rcu: Arc::new(builder.build()?),
            settings: settings.clone(),
            busted_barrier: false,
            busted_owned: false,
            name: "rcu",
        })
    }

    /// The same domain with a `barrier()` that returns at once, without waiting for anything:
    /// a torture run must report FAILURE.
    pub fn with_busted_barrier(mut self) -> RcuFlavor {
        self.busted_barrier = true;
        self.name = "busted-barrier";
        self
    }

    /// The same domain with owned sections that end as soon as they begin: `read_owned()`
    /// takes an `OwnedGuard` and drops it at once, so the reader that then reads, sleeps, or
    /// hands its element to another thread is protected by nothing. A torture run must report
    /// FAILURE.
    pub fn with_busted_owned(mut self) -> RcuFlavor {
        self.busted_owned = true;
        self.name = "busted-owned";
        self
    }

    /// The same domain under another name (the report's prefix): `map` and `busted-map` runs
    /// torture this flavor and a map on its domain.
    pub fn named(mut self, name: &'static str) -> RcuFlavor {
        self.name = name;
        self
    }

    /// The domain under test.
    pub fn domain(&self) -> &Rcu {
        &self.rcu
    }

    /// The domain under test, shared (a container built on it holds a clone).
    pub fn domain_arc(&self) -> Arc<Rcu> {
        self.rcu.clone()
    }
}

impl Flavor for RcuFlavor {
    type Reader<'a> = ();
    type Guard<'a> = rcukit::Guard<'a>;
    type Cookie = GpCookie;

    fn name(&self) -> &'static str {
        self.name
    }

    fn describe(&self) -> String {
        format!(
            "fence={} stall_timeout={:?} backlog_callbacks={} callback_workers={}",
            self.rcu.fence_kind(),
            self.settings.stall_timeout,
            self.settings.backlog_callbacks,
            self.settings.callback_workers
        )
    }

    fn register_reader(&self) {}

    #[inline]
    fn read<'r>(&'r self, _reader: &'r ()) -> rcukit::Guard<'r> {
        self.rcu.read()
    }

    fn read_owned(&self) -> Option<OwnedSection> {
        let guard = self.rcu.read_owned();
        if self.busted_owned {
            // Busted: the section is over before the reader loads anything.
            drop(guard);
            return Some(Box::new(()));
        }
        Some(Box::new(guard))
    }

    fn barrier(&self) {
        if !self.busted_barrier {
            self.rcu.barrier()
        }
    }

    forward_to_domain!(rcu);
}
