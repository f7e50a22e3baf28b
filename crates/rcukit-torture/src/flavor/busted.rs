//! The `busted` flavor: real readers, grace periods that return at once.
//!
//! The self-test of the checker, after rcutorture's `torture_type=busted`: readers enter real
//! rcukit critical sections, but every wait returns immediately, every cookie polls complete
//! and `call`/`retire` run the callback in the caller. A torture run of this flavor must
//! report FAILURE; if it ever reports SUCCESS, the checker is what is broken.

use super::{Flavor, FlavorSettings, FlavorStats, GpsBetween, UpdateKind};
use rcukit::Rcu;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// A flavor whose grace periods do not wait for anything.
pub struct BustedFlavor {
    rcu: Rcu,
    /// "Grace periods" claimed so far: every wait and every cookie request counts one.
    fake_gps: AtomicU64,
    invoked: AtomicU64,
    panics: AtomicU64,
}

impl BustedFlavor {
    /// Build the flavor (the domain provides the read side only).
    pub fn new(settings: &FlavorSettings) -> Result<BustedFlavor, rcukit::Error> {
        let mut builder = Rcu::builder().name("busted");
        if let Some(fence) = settings.fence {
            builder = builder.fence(fence);
        }
        Ok(BustedFlavor {
            rcu: builder.build()?,
            fake_gps: AtomicU64::new(0),
            invoked: AtomicU64::new(0),
            panics: AtomicU64::new(0),
        })
    }

    fn fake_gp(&self) -> u64 {
        self.fake_gps.fetch_add(1, Relaxed) + 1
    }
}

impl Flavor for BustedFlavor {
    type Reader<'a> = ();
    type Guard<'a> = rcukit::Guard<'a>;
    type Cookie = u64;

    fn name(&self) -> &'static str {
        "busted"
    }

    fn describe(&self) -> String {
        format!(
            "fence={} (read side only; grace periods return at once)",
            self.rcu.fence_kind()
        )
    }

    fn register_reader(&self) {}

    #[inline]
    fn read<'r>(&'r self, _reader: &'r ()) -> rcukit::Guard<'r> {
        self.rcu.read()
    }

    fn supports(&self, _kind: UpdateKind) -> bool {
        true
    }

    fn has_cookies(&self) -> bool {
        true
    }

    fn synchronize(&self) {
        self.fake_gp();
    }

    fn synchronize_expedited(&self) {
        self.fake_gp();
    }

    fn get_state(&self) -> u64 {
        self.fake_gps.load(Relaxed)
    }

    fn start_poll(&self) -> u64 {
        self.fake_gp()
    }

    fn start_poll_expedited(&self) -> u64 {
        self.fake_gp()
    }

    fn poll(&self, _cookie: &u64) -> bool {
        true
    }

    fn cond_synchronize(&self, _cookie: &u64) {
        self.fake_gp();
    }

    fn cond_synchronize_expedited(&self, _cookie: &u64) {
        self.fake_gp();
    }

    fn completed_cookie(&self) -> u64 {
        0
    }

    fn gps_between(&self, earlier: &u64, later: &u64) -> GpsBetween {
        let n = later.wrapping_sub(*earlier);
        GpsBetween {
            total: n,
            worst_engine: n,
        }
    }

    fn call<F: FnOnce() + Send + 'static>(&self, f: F) {
        self.fake_gp();
        self.invoked.fetch_add(1, Relaxed);
        if catch_unwind(AssertUnwindSafe(f)).is_err() {
            self.panics.fetch_add(1, Relaxed);
        }
    }

    fn retire<T: Send + 'static>(&self, value: Box<T>) {
        self.fake_gp();
        self.invoked.fetch_add(1, Relaxed);
        drop(value);
    }

    fn barrier(&self) {}

    fn stats(&self) -> FlavorStats {
        let invoked = self.invoked.load(Relaxed);
        FlavorStats {
            normal_gps: self.fake_gps.load(Relaxed),
            callbacks_invoked: invoked,
            callback_panics: self.panics.load(Relaxed),
            released_by_normal: invoked,
            ..FlavorStats::default()
        }
    }
}
