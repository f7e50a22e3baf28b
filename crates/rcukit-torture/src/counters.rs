//! Counters the torture threads share: histograms, error counts and what the fault injector
//! did.
//!
//! Readers count into thread-private [`LocalHistogram`]s and flush them every few hundred
//! critical sections, so the shared cache lines are touched rarely. Errors are flushed at
//! once: they are rare, and the `--stop-on-error` watchdog must see them.

use crate::flavor::UpdateKind;
pub use crate::pipe::{Histogram, LocalHistogram, BUCKETS};
use parking_lot::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};

/// Everything the threads of one run count together.
#[derive(Debug, Default)]
pub struct Counters {
    /// Reader Pipe: the age each reader saw at the end of its critical section.
    pub pipe: Histogram,
    /// Reader Batch: grace periods completed during a sampled critical section.
    pub batch: Histogram,
    /// Outermost critical sections completed.
    pub reads: AtomicU64,
    /// Element loads (outermost and nested).
    pub loads: AtomicU64,
    /// Reader cookie checks made (cookies taken inside a critical section and polled before it
    /// ended).
    pub reader_cookie_checks: AtomicU64,
    /// `call()`s made from inside a critical section.
    pub reader_calls: AtomicU64,
    /// Reader threads that exited (and were respawned) during the run.
    pub reader_exits: AtomicU64,
    /// Pauses readers took between critical sections (sleeps and empty offline periods; a
    /// QSBR reader goes offline for each).
    pub reader_pauses: AtomicU64,
    /// Sections read by reader threads in their thread-exit destructors, after rcukit's own
    /// thread-locals were destroyed.
    pub reads_during_exit: AtomicU64,
    /// Outermost sections that were owned sections (`read_owned`).
    pub owned_sections: AtomicU64,
    /// Owned sections that ended on a helper thread (moved there with their guard).
    pub owned_moved: AtomicU64,
    /// Owned sections that slept before they ended.
    pub owned_slept: AtomicU64,

    /// Writer updates, by kind.
    pub writer_updates: [AtomicU64; UpdateKind::ALL.len()],
    /// Updater operations, by kind.
    pub updater_ops: [AtomicU64; UpdateKind::ALL.len()],
    /// Writer found the pool exhausted (rcutorture's `rtaf`).
    pub alloc_failures: AtomicU64,
    /// Barrier checks made (rcutorture's `rtb`).
    pub barrier_checks: AtomicU64,
    /// Cookie checks made by updaters and the writer.
    pub updater_cookie_checks: AtomicU64,
    /// `get_state` polling loops that fell back to `cond_synchronize`.
    pub poll_fallbacks: AtomicU64,
    /// Call and retire chains still holding an element.
    pub chains_in_flight: AtomicU64,

    /// Publish/subscribe errors: a reader saw `mbtest == 0` (rcutorture's `rtmbe`).
    pub mbtest_errors: AtomicU64,
    /// A cookie taken inside a critical section polled complete before the section ended.
    pub reader_cookie_errors: AtomicU64,
    /// A cookie taken before a wait did not poll complete after it (or a completed cookie did
    /// not poll complete).
    pub updater_cookie_errors: AtomicU64,
    /// Barrier errors: `barrier()` returned before a callback queued before it ran (`rtbe`).
    pub barrier_errors: AtomicU64,
    /// Batch errors: one grace-period engine completed more than one grace period inside a
    /// critical section.
    pub batch_errors: AtomicU64,

    /// Set on the first error of any kind (the `--stop-on-error` watchdog reads it).
    pub failed: AtomicBool,
}

impl Counters {
    /// Count `n` errors into `counter` and raise the failure flag.
    pub fn error(&self, counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Relaxed);
            self.failed.store(true, Relaxed);
        }
    }

    /// Load every per-kind counter of `array`.
    pub fn by_kind(array: &[AtomicU64; UpdateKind::ALL.len()]) -> [u64; UpdateKind::ALL.len()] {
        std::array::from_fn(|i| array[i].load(Relaxed))
    }
}

/// What the fault injector did and saw.
#[derive(Debug, Default)]
pub struct FaultCounters {
    /// Panicking callbacks queued.
    pub panics_injected: AtomicU64,
    /// Stalls injected (completed).
    pub stalls_injected: AtomicU64,
    /// Stalls that the flavor reported.
    pub stalls_reported: AtomicU64,
    /// Longest stall held, in microseconds.
    pub longest_stall_us: AtomicU64,
    /// Callback bursts.
    pub bursts: AtomicU64,
    /// Callbacks queued by bursts.
    pub burst_calls: AtomicU64,
    /// Most callbacks pending right after a burst was queued.
    pub burst_peak_pending: AtomicU64,
    /// Expedited grace periods that ran while bursts were being queued and drained.
    pub burst_expedited_gps: AtomicU64,
    /// Callbacks released by expedited grace periods while bursts were being drained.
    pub burst_released_by_expedited: AtomicU64,
    /// Rounds of re-entrant drops.
    pub reentrant_rounds: AtomicU64,
    /// Objects whose `Drop` re-entered the library.
    pub reentrant_drops: AtomicU64,
    /// Faults whose expected effect did not appear.
    pub problems: Mutex<Vec<String>>,
}

impl FaultCounters {
    pub(crate) fn problem(&self, counters: &Counters, message: String) {
        self.problems.lock().push(message);
        counters.failed.store(true, Relaxed);
    }
}
