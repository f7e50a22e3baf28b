//! The scheme is the seed's switch: a domain with `expedited_callbacks` off (before the
//! series) or on (after); and the object every point retires.

use anyhow::Result;
use rcukit::Rcu;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::OBJECT_BYTES;

/// A retired object: 1 KiB that counts its own destruction.
pub(super) struct Sock {
    pub(super) _payload: [u8; OBJECT_BYTES - std::mem::size_of::<Arc<AtomicU64>>()],
    pub(super) freed: Arc<AtomicU64>,
}

impl Drop for Sock {
    fn drop(&mut self) {
        self.freed.fetch_add(1, Relaxed);
    }
}

/// A domain with the seed-004 switch set, and the hurry disabled: neither the backlog control
/// nor the retiring threads' own tried grace periods run expedited grace periods, so the only
/// expedited grace periods are the experiment's (as in the seed, where they come from BPF).
pub(super) fn domain(expedited_callbacks: bool) -> Result<Rcu> {
    Ok(Rcu::builder()
        .name(if expedited_callbacks {
            "lab-cb-on"
        } else {
            "lab-cb-off"
        })
        .expedited_callbacks(expedited_callbacks)
        .backlog_callbacks(u64::MAX)
        .backlog_bytes(u64::MAX)
        .producer_backlog_callbacks(u64::MAX)
        .producer_backlog_bytes(u64::MAX)
        .build()?)
}

/// Wait until every callback of `rcu` has run.
pub(super) fn drain(rcu: &Rcu) {
    while rcu.stats().callbacks_pending > 0 {
        rcu.barrier();
    }
}
