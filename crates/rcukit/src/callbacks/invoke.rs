#![doc = include_str!("invoke.md")]

use super::callback::Callback;
use super::hand_back;
use super::local;
use super::port::{GpPort, ReleasedBy};
use super::shard::{ProducerShared, Shard};
use super::Callbacks;
use crate::report::{self, CallbackPanic, Report, WakerPanic};
use std::cell::Cell;
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::Relaxed;

thread_local! {
    /// The domain whose drops this (producer) thread is running (0 when none).
    static RUNNING_DROPS_OF: Cell<u64> = const { Cell::new(0) };
}

/// Must this producer thread leave ready drops for later? While it runs drops of some domain
/// already (a ready batch or blocks of its own list): drops that retire more objects then only
/// queue them, so runs never nest. While it holds a container's writer lock: the user's code
/// that a container runs under its lock wrote another container, whose retire must not run
/// drops under the outer lock. A thread whose thread-local storage is gone must not start
/// either.
#[inline]
pub(crate) fn drops_must_wait() -> bool {
    RUNNING_DROPS_OF.try_with(|r| r.get() != 0).unwrap_or(true)
        || crate::sync::fork_lock::held_here()
}

/// Is this thread running drops of some domain?
pub(crate) fn running_drops() -> bool {
    RUNNING_DROPS_OF.try_with(|r| r.get() != 0).unwrap_or(false)
}

/// Is this thread running drops of domain `domain`?
pub(crate) fn running_drops_of(domain: u64) -> bool {
    RUNNING_DROPS_OF
        .try_with(|r| r.get() == domain)
        .unwrap_or(false)
}

/// Marks the calling thread as running drops of a domain until dropped (also on unwind).
pub(crate) struct RunningDrops;

impl RunningDrops {
    #[inline]
    pub(crate) fn enter(domain: u64) -> RunningDrops {
        RUNNING_DROPS_OF.with(|r| r.set(domain));
        RunningDrops
    }
}

impl Drop for RunningDrops {
    #[inline]
    fn drop(&mut self) {
        let _ = RUNNING_DROPS_OF.try_with(|r| r.set(0));
    }
}

/// Ready callbacks taken from a list to run after leaving it: at most [`FEW`](local::FEW), held
/// inline
/// (a `retire` allocates nothing to drop them). Filled and emptied in place by the producer,
/// never moved while it holds callbacks.
pub(crate) struct Few {
    items: [MaybeUninit<Callback>; local::FEW],
    /// `items[..len]` are initialized.
    len: usize,
}

impl Few {
    #[inline]
    pub(crate) fn new() -> Few {
        Few {
            items: [const { MaybeUninit::uninit() }; local::FEW],
            len: 0,
        }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn push(&mut self, callback: Callback) {
        self.items[self.len].write(callback);
        self.len += 1;
    }

    /// Take the callbacks out, last taken first (each is run once; the rest are dropped, so
    /// run, if the iterator is dropped early).
    #[inline]
    pub(crate) fn drain(&mut self) -> FewDrain<'_> {
        FewDrain { few: self }
    }
}

impl Drop for Few {
    #[inline]
    fn drop(&mut self) {
        // Unreachable in practice (the producer drains what it takes), but a callback is never
        // lost: run what is left.
        if self.len > 0 {
            self.drain().for_each(Callback::invoke);
        }
    }
}

/// The callbacks of a [`Few`], taken out one by one.
pub(crate) struct FewDrain<'a> {
    few: &'a mut Few,
}

impl Iterator for FewDrain<'_> {
    type Item = Callback;

    #[inline]
    fn next(&mut self) -> Option<Callback> {
        if self.few.len == 0 {
            return None;
        }
        self.few.len -= 1;
        // SAFETY: `items[..len]` are initialized; lowering `len` first gives this one up, so it
        // is read exactly once.
        Some(unsafe { self.few.items[self.few.len].assume_init_read() })
    }
}

/// Adds what a producer ran to its counters and clears its list's `dropping` mark when
/// dropped (also on unwind).
struct FinishDropping<'a> {
    shared: &'a ProducerShared,
    invoked: u64,
    bytes: u64,
}

impl Drop for FinishDropping<'_> {
    #[inline]
    fn drop(&mut self) {
        self.shared.add_invoked(self.invoked, self.bytes);
        self.shared.local.finished_dropping();
    }
}

impl Callbacks {
    /// Run every callback of `batch` (emptying it), each under `catch_unwind`. Returns how many
    /// ran and their bytes. Never unwinds.
    pub(crate) fn invoke_all(&self, batch: &mut Vec<Callback>) -> (u64, u64) {
        self.invoke_each(&mut batch.drain(..))
    }

    /// Run every callback `callbacks` yields, each under `catch_unwind` (a panic is reported,
    /// and the rest still run). Returns how many ran and their bytes. Never unwinds.
    ///
    /// One `catch_unwind` per callback, counted before it runs: with the counts updated inside
    /// one `catch_unwind` around the whole loop, rustc 1.95 at `opt-level = 1` compiled its
    /// landing pad to overwrite the panic's exception pointer with the byte count, and a
    /// callback that panicked crashed the worker (SIGSEGV). A `catch_unwind` costs nothing
    /// until something panics.
    #[inline]
    pub(crate) fn invoke_each(&self, callbacks: &mut impl Iterator<Item = Callback>) -> (u64, u64) {
        let (mut invoked, mut bytes) = (0u64, 0u64);
        for cb in callbacks {
            invoked += 1;
            bytes += cb.bytes() as u64;
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| cb.invoke())) {
                self.report_panic(payload);
            }
        }
        (invoked, bytes)
    }

    /// Count a callback's panic, drop its payload safely and report it. Never unwinds.
    pub(crate) fn report_panic(&self, payload: Box<dyn std::any::Any + Send>) {
        let total = self.panics.fetch_add(1, Relaxed) + 1;
        let message = report::payload_message(&*payload);
        report::drop_payload(payload);
        self.reporter.report(Report::CallbackPanic(CallbackPanic {
            domain: self.name.clone(),
            message,
            total,
        }));
    }

    /// Report the panic of a `barrier_async()` future's waker, which a barrier's last
    /// arrival woke (see [`BarrierCount::arrive`]). Never unwinds.
    pub(crate) fn report_waker_panic(&self, message: String) {
        self.reporter.report(Report::WakerPanic(WakerPanic {
            domain: self.name.clone(),
            message,
        }));
    }

    /// Case 1 of "Drops on producers" (module docs): drop `few` ready callbacks taken from
    /// this thread's list (`shared`, marked `dropping`), or hand them to the worker of `shard`
    /// inside a read-side critical section of the domain or while unwinding.
    #[inline]
    pub(crate) fn drop_few<P: GpPort>(
        &self,
        gp: &P,
        few: &mut Few,
        shared: &ProducerShared,
        shard: &Shard,
    ) {
        // Until they have run (or been handed to the worker) and been counted, the list stays
        // marked `dropping`; also on unwind.
        let mut finish = FinishDropping {
            shared,
            invoked: 0,
            bytes: 0,
        };
        if gp.is_reading_here() || std::thread::panicking() {
            shard.hand_back.publish(few.drain().collect());
            shard.wake();
            return;
        }
        let _running = RunningDrops::enter(self.domain);
        let (invoked, bytes) = self.invoke_each(&mut few.drain());
        finish.invoked = invoked;
        finish.bytes = bytes;
    }

    /// Count `n` callbacks released by `by` (an expedited grace period when `None`: the stamp
    /// was found released before, and only the expedited counter can have done it then).
    pub(crate) fn count_released_by(&self, by: Option<ReleasedBy>, n: u64) {
        if n == 0 {
            return;
        }
        match by {
            Some(ReleasedBy::Normal) => self.released_by_normal.fetch_add(n, Relaxed),
            _ => self.released_by_expedited.fetch_add(n, Relaxed),
        };
    }

    /// Case 2 of "Drops on producers" (module docs): run one ready batch of drop-only callbacks
    /// on this producer thread, unless this thread is already running one.
    #[cold]
    #[inline(never)]
    pub(crate) fn run_ready_batch<P: GpPort>(&self, gp: &P, shard: &Shard) {
        if drops_must_wait() || gp.is_reading_here() || std::thread::panicking() {
            return;
        }
        let Some(batch) = shard.hand_back.take() else {
            return;
        };
        // Counted as running until `finished`, also on unwind, so a barrier waits for it.
        let mut batch = hand_back::Taken::new(&shard.hand_back, batch);
        let _running = RunningDrops::enter(self.domain);
        let ran = self.run_batch(shard, batch.callbacks());
        self.run_by_producers.fetch_add(ran, Relaxed);
    }

    /// Run every callback of `batch` (emptying it), each under `catch_unwind`, and add them to
    /// the shard's invoked counters. Returns how many ran.
    pub(crate) fn run_batch(&self, shard: &Shard, batch: &mut Vec<Callback>) -> u64 {
        let (invoked, bytes) = self.invoke_all(batch);
        shard.worker.count_invoked(invoked, bytes);
        invoked
    }
}
