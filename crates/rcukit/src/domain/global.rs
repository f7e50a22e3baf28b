#![doc = include_str!("global.md")]

use super::Rcu;
use crate::error::Error;
use crate::sync::fork;
use crate::sync::Backoff;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
use std::sync::atomic::{AtomicPtr, AtomicU64};

/// The process-wide domain's slot.
pub(super) struct GlobalSlot {
    /// The domain, once built (a leaked box: never freed).
    domain: AtomicPtr<Rcu>,
    /// 0 when nobody builds; else 1 + the fork generation of the builder's process.
    builder: AtomicU64,
}

pub(super) static GLOBAL: GlobalSlot = GlobalSlot {
    domain: AtomicPtr::new(std::ptr::null_mut()),
    builder: AtomicU64::new(0),
};

/// Gives the builder's claim back if the build fails or panics.
struct Claim<'a>(&'a AtomicU64);

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.store(0, Release);
    }
}

impl GlobalSlot {
    /// The domain, if built.
    #[inline]
    pub(super) fn get(&self) -> Option<&'static Rcu> {
        let domain = self.domain.load(Acquire);
        // SAFETY: a non-null pointer is a leaked box, published with `Release` after it was
        // fully built, and never freed.
        unsafe { domain.as_ref() }
    }

    /// The domain, building it with `build` if nobody has; the flag says whether this call
    /// built it.
    pub(super) fn get_or_build(
        &self,
        build: impl FnOnce() -> Result<Rcu, Error>,
    ) -> Result<(&'static Rcu, bool), Error> {
        #[cfg(unix)]
        super::fork::install();
        let mut backoff = Backoff::new();
        loop {
            if let Some(domain) = self.get() {
                return Ok((domain, false));
            }
            let me = fork::generation() + 1;
            let builder = self.builder.load(Acquire);
            let claimed = match builder {
                0 => self
                    .builder
                    .compare_exchange(0, me, AcqRel, Acquire)
                    .is_ok(),
                b if b == me => false, // a thread of this process builds: wait for it
                // Forked while an ancestor built it: that builder is not here.
                b => self
                    .builder
                    .compare_exchange(b, me, AcqRel, Acquire)
                    .is_ok(),
            };
            if !claimed {
                backoff.snooze();
                continue;
            }
            let claim = Claim(&self.builder);
            let domain: &'static Rcu = Box::leak(Box::new(build()?));
            self.domain.store(domain as *const Rcu as *mut Rcu, Release);
            drop(claim);
            return Ok((domain, true));
        }
    }
}
