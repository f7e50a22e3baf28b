//! [`Stats`]: the counters a domain reports.

/// Statistics of a domain, from [`Rcu::stats`](crate::Rcu::stats). A snapshot: fields are read one
/// by one while the domain runs, so they may be mutually off by a few events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Normal grace periods completed.
    pub normal_gps: u64,
    /// Expedited grace periods run (callers that piggybacked on another's ran none).
    pub expedited_gps: u64,
    /// Reader records held by live threads (one per thread that has read this domain; for a
    /// QSBR domain, one per registered thread).
    pub readers: usize,
    /// Reader records that outlived their thread's thread-local table while still in a
    /// read-side critical section (QSBR: still registered): a guard kept in a thread-local
    /// destroyed late (transient), or leaked with `mem::forget` by a thread that has exited
    /// since, which holds every grace period forever (the stall report says so). Not counted
    /// in `readers`.
    pub orphaned_readers: usize,
    /// Owned read-side critical sections ([`OwnedGuard`](crate::OwnedGuard)s) open now: opened
    /// minus closed.
    pub owned_sections: u64,
    /// Futures ([`GpFuture`](crate::GpFuture)) registered to be woken by the next grace
    /// period: polled, not yet complete, not dropped.
    pub waiting_futures: usize,
    /// Stall reports issued (a reader held a grace period past the stall timeout).
    pub stalls: u64,
    /// Callbacks queued with `call`, `retire` and the raw variants.
    pub callbacks_queued: u64,
    /// Callbacks that have run (including ones that panicked).
    pub callbacks_invoked: u64,
    /// Callbacks queued but not yet run.
    pub callbacks_pending: u64,
    /// Bytes the pending callbacks account for: `size_of::<T>()` for `retire(Box<T>)` (the
    /// box's own allocation, not memory the `T` owns elsewhere, such as a `Vec`'s buffer), the
    /// closure's size for `call` (its captures, not what they own), and what the caller
    /// declared for raw callbacks (clamped to 1 TiB each). rcukit's own record per callback
    /// (24 bytes in a queue slot or list) is not included. An estimate of the memory waiting
    /// callbacks keep alive, not an allocator measurement.
    pub pending_bytes: u64,
    /// Callbacks moved to the ready list because a *normal* grace period covered them
    /// (counted in callbacks, not segments).
    pub released_by_normal: u64,
    /// Callbacks moved to the ready list because an *expedited* grace period covered them
    /// before a normal one did (counted in callbacks, not segments).
    pub released_by_expedited: u64,
    /// Callbacks that panicked (caught; the others still ran).
    pub callback_panics: u64,
    /// Retired objects dropped by threads calling `retire` rather than by a worker (see
    /// [`RcuBuilder::retire_on_producers`](crate::RcuBuilder::retire_on_producers)); included in
    /// `callbacks_invoked`.
    pub callbacks_run_by_producers: u64,
    /// Callbacks that will never run in this process: queued before a `fork()` that this process is
    /// the child of (they run in the parent; see [`fork`](crate::docs::internal::domain::fork)).
    /// Not counted in `callbacks_pending` or `callbacks_invoked`.
    pub callbacks_abandoned: u64,
    /// [`Qsbr`](crate::Qsbr) domains: quiescent states after which a registered thread yielded
    /// its CPU because a grace period had long been waiting for other threads (see
    /// [`QsbrBuilder::readers_give_way`](crate::QsbrBuilder::readers_give_way)); 0 for other
    /// domains.
    pub readers_gave_way: u64,
    /// Times a thread that queued callbacks far faster than the domain's workers ran them gave
    /// way to them: a yield of its CPU, or a pause of up to a millisecond, per 1,024 callbacks
    /// queued while over 262,144 were pending (see [`Rcu::call`](crate::Rcu::call)).
    pub producers_gave_way: u64,
}
