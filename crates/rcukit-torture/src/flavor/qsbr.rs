//! The `qsbr` flavor: an [`rcukit::Qsbr`] domain, every primitive forwarded as it is (the
//! update side by `forward_to_domain!`, shared with the `rcu` flavor).
//!
//! A reader thread registers once ([`Qsbr::register`]) and is online from then on. Its
//! critical sections are the stretches between two quiescent states: the engine announces one
//! after every outermost section, and goes offline around the sleeps it takes between
//! sections. Inside a section it never blocks (the delays spin and yield; a yield is what a
//! preemption of an online thread looks like). The writer, the updaters and the fault
//! injector's waits run on threads that are not registered, as the domain requires.
//!
//! Everything the domain offers is exercised: both grace-period engines, every cookie path,
//! callbacks, `retire`, `barrier`, the stall report (the fault injector registers itself,
//! stays online and silent past the stall timeout, and waits for the report), reader threads
//! that unregister while grace periods scan, panicking callbacks and callback bursts.

use super::{forward_to_domain, Flavor, FlavorSettings};
use rcukit::{GpCookie, Qsbr, QsbrThread};
use std::sync::Arc;

/// A QSBR domain built for torturing: short stall timeout, small backlog threshold, two
/// callback workers (so that `barrier()` spans shards).
pub struct QsbrFlavor {
    qsbr: Arc<Qsbr>,
    settings: FlavorSettings,
    name: &'static str,
}

impl QsbrFlavor {
    /// Build the domain. `settings.fence` must be `None` or `SeqCst`: a QSBR domain's
    /// readers have no barrier to choose (the engine refuses `--fence membarrier` before this).
    /// With `fenced`, the domain's quiescent states end with a full fence
    /// ([`rcukit::QsbrBuilder::fenced_quiescent_states`]).
    pub fn new(settings: &FlavorSettings, fenced: bool) -> Result<QsbrFlavor, rcukit::Error> {
        let qsbr = Qsbr::builder()
            .name(if fenced {
                "torture-qsbr-fenced"
            } else {
                "torture-qsbr"
            })
            .fenced_quiescent_states(fenced)
            .stall_timeout(settings.stall_timeout)
            .backlog_callbacks(settings.backlog_callbacks)
            .callback_workers(settings.callback_workers)
            .build()?;
        Ok(QsbrFlavor {
            qsbr: Arc::new(qsbr),
            settings: settings.clone(),
            name: if fenced { "qsbr-fenced" } else { "qsbr" },
        })
    }

    /// The same domain under another name (the report's prefix): the `qsbr-flat-map` runs
    /// torture this flavor and a map on its domain.
    pub fn named(mut self, name: &'static str) -> QsbrFlavor {
        self.name = name;
        self
    }

    /// The domain under test.
    pub fn domain(&self) -> &Qsbr {
        &self.qsbr
    }

    /// The domain under test, shared (a container built on it holds a clone).
    pub fn domain_arc(&self) -> Arc<Qsbr> {
        self.qsbr.clone()
    }
}

impl Flavor for QsbrFlavor {
    type Reader<'a> = QsbrThread<'a>;
    type Guard<'a> = ();
    type Cookie = GpCookie;

    fn name(&self) -> &'static str {
        self.name
    }

    fn describe(&self) -> String {
        format!(
            "fence=seqcst (always, for QSBR) stall_timeout={:?} backlog_callbacks={} \
             callback_workers={}",
            self.settings.stall_timeout,
            self.settings.backlog_callbacks,
            self.settings.callback_workers
        )
    }

    fn register_reader(&self) -> QsbrThread<'_> {
        self.qsbr.register()
    }

    #[inline]
    fn read<'r>(&'r self, reader: &'r QsbrThread<'_>) {
        // An online thread is always inside a critical section: nothing to do.
        debug_assert!(reader.is_online(), "a QSBR reader read while offline");
    }

    #[inline]
    fn quiescent_state(&self, reader: &mut QsbrThread<'_>) {
        reader.quiescent_state();
    }

    fn offline_while<R>(&self, reader: &mut QsbrThread<'_>, f: impl FnOnce() -> R) -> R {
        reader.offline_while(f)
    }

    fn qsbr_thread<'r>(&self, reader: &'r QsbrThread<'_>) -> Option<&'r QsbrThread<'r>> {
        Some(reader)
    }

    fn protects_until_quiescent_state(&self) -> bool {
        true
    }

    fn readers_may_sleep(&self) -> bool {
        false
    }

    fn barrier(&self) {
        self.qsbr.barrier()
    }

    forward_to_domain!(qsbr);
}
