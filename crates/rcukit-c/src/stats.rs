//! [`rcukit_stats`]: a domain's counters, as C sees them.
//!
//! The same fields as `rcukit::Stats`, every one widened to `uint64_t` so that the layout is
//! the same on every platform. A snapshot: fields are read one by one while the domain runs.

/// A domain's counters (see `rcukit::Stats` for each field's exact meaning).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct rcukit_stats {
    /// Normal grace periods completed.
    pub normal_gps: u64,
    /// Expedited grace periods run.
    pub expedited_gps: u64,
    /// Reader records of live threads (for QSBR: registered threads).
    pub readers: u64,
    /// Reader records whose thread exited inside a read-side critical section (or, for QSBR,
    /// without unregistering): they hold every grace period while that section is open.
    pub orphaned_readers: u64,
    /// Owned read-side critical sections open now.
    pub owned_sections: u64,
    /// Stall reports issued.
    pub stalls: u64,
    /// Callbacks queued.
    pub callbacks_queued: u64,
    /// Callbacks that have run.
    pub callbacks_invoked: u64,
    /// Callbacks queued and not yet run.
    pub callbacks_pending: u64,
    /// Bytes the pending callbacks account for (as declared to `rcukit_call_sized`).
    pub pending_bytes: u64,
    /// Callbacks released by a normal grace period.
    pub released_by_normal: u64,
    /// Callbacks released by an expedited grace period before a normal one.
    pub released_by_expedited: u64,
    /// Callbacks queued before a `fork()` that this process is the child of: they run in the
    /// parent, never here.
    pub callbacks_abandoned: u64,
}

impl From<&rcukit::Stats> for rcukit_stats {
    fn from(stats: &rcukit::Stats) -> rcukit_stats {
        rcukit_stats {
            normal_gps: stats.normal_gps,
            expedited_gps: stats.expedited_gps,
            readers: stats.readers as u64,
            orphaned_readers: stats.orphaned_readers as u64,
            owned_sections: stats.owned_sections,
            stalls: stats.stalls,
            callbacks_queued: stats.callbacks_queued,
            callbacks_invoked: stats.callbacks_invoked,
            callbacks_pending: stats.callbacks_pending,
            pending_bytes: stats.pending_bytes,
            released_by_normal: stats.released_by_normal,
            released_by_expedited: stats.released_by_expedited,
            callbacks_abandoned: stats.callbacks_abandoned,
        }
    }
}
