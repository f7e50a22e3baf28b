#![doc = include_str!("hand_back.md")]

use super::callback::Callback;
use crate::sync::{AtomicUsize, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::time::{Duration, Instant};

/// At most this many batches wait for producers at once.
pub(crate) const MAX_BATCHES: usize = if cfg!(rcukit_small) { 1 } else { 4 };

/// How long producers may leave a batch waiting (and how recently they must have queued for
/// the worker to hand batches back at all).
pub(crate) const PATIENCE: Duration = if cfg!(rcukit_small) {
    Duration::from_micros(50)
} else {
    Duration::from_millis(1)
};

struct Batch {
    callbacks: Vec<Callback>,
    published: Instant,
}

#[derive(Default)]
struct State {
    batches: VecDeque<Batch>,
    /// Batches taken and not yet finished running.
    running: usize,
    /// Emptied batch vectors, for the worker to fill again.
    spare: Vec<Vec<Callback>>,
}

/// A shard's queue of ready batches.
pub(crate) struct HandBack {
    state: Mutex<State>,
    /// `batches.len()`, readable without the lock: producers look at it on every call.
    queued: AtomicUsize,
    /// `batches.len() + running`, stored (`Release`) under the lock after every change, so
    /// that a thread that loads 0 (`Acquire`) sees every callback published here as run and
    /// counted.
    outstanding: AtomicUsize,
}

impl HandBack {
    pub(crate) fn new() -> HandBack {
        HandBack {
            state: Mutex::new(State::default()),
            queued: AtomicUsize::new(0),
            outstanding: AtomicUsize::new(0),
        }
    }

    /// Batches waiting for a producer (a hint: read without the lock).
    #[inline]
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Relaxed)
    }

    /// An empty vector to fill with the next batch (recycled when one is available).
    pub(crate) fn empty_batch(&self, capacity: usize) -> Vec<Callback> {
        self.state
            .lock()
            .spare
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(capacity))
    }

    /// Queue a batch of ready drop-only callbacks for producers to run.
    pub(crate) fn publish(&self, callbacks: Vec<Callback>) {
        debug_assert!(callbacks.iter().all(Callback::is_drop_only));
        let mut state = self.state.lock();
        state.batches.push_back(Batch {
            callbacks,
            published: Instant::now(),
        });
        self.update_counts(&state);
    }

    fn update_counts(&self, state: &State) {
        self.queued.store(state.batches.len(), Relaxed);
        self.outstanding
            .store(state.batches.len() + state.running, Release);
    }

    /// Take the oldest batch to run it. The caller must hand the vector back to
    /// [`finished`](HandBack::finished) once every callback in it has run and been counted.
    pub(crate) fn take(&self) -> Option<Vec<Callback>> {
        if self.queued() == 0 {
            return None;
        }
        self.take_if(|_| true)
    }

    /// Take the oldest batch if it has waited longer than [`PATIENCE`] (the worker's rescue of
    /// batches that producers left behind). Same contract as [`take`](HandBack::take).
    pub(crate) fn take_stale(&self) -> Option<Vec<Callback>> {
        if self.queued() == 0 {
            return None;
        }
        self.take_if(|batch| is_stale(batch.published))
    }

    fn take_if(&self, pred: impl FnOnce(&Batch) -> bool) -> Option<Vec<Callback>> {
        let mut state = self.state.lock();
        if !pred(state.batches.front()?) {
            return None;
        }
        let batch = state.batches.pop_front()?;
        state.running += 1;
        self.update_counts(&state);
        Some(batch.callbacks)
    }

    /// A broken `take` for the loom model's busted variant: the batch leaves the queue
    /// without being counted as running, so `finish` cannot wait for it.
    #[cfg(rcukit_loom)]
    pub(crate) fn take_uncounted_busted(&self) -> Option<Vec<Callback>> {
        let mut state = self.state.lock();
        let batch = state.batches.pop_front()?;
        self.update_counts(&state);
        Some(batch.callbacks)
    }

    /// A batch from [`take`](HandBack::take) has run and been counted.
    pub(crate) fn finished(&self, mut callbacks: Vec<Callback>) {
        debug_assert!(callbacks.is_empty(), "every callback of the batch ran");
        callbacks.clear();
        let mut state = self.state.lock();
        state.running -= 1;
        self.update_counts(&state);
        if state.spare.len() < MAX_BATCHES && callbacks.capacity() > 0 {
            state.spare.push(callbacks);
        }
    }

    /// After `fork()` (see [`fork`](crate::docs::internal::domain::fork)): forget every batch,
    /// queued or being run by a thread that is gone (their callbacks are abandoned: a `Callback`
    /// dropped unrun leaks).
    pub(crate) fn forget_batches(&self) {
        let mut state = self.state.lock();
        state.batches.clear();
        state.running = 0;
        self.update_counts(&state);
    }

    /// Hold the queue's lock across `fork()`.
    #[cfg(unix)]
    pub(crate) fn hold_for_fork(&'static self, held: &mut crate::sync::fork::Held) {
        self.state.hold_for_fork(held);
    }

    /// Nothing queued and nothing running.
    pub(crate) fn is_quiet(&self) -> bool {
        self.outstanding.load(Acquire) == 0
    }

    /// Run (with `run`) every batch still queued, then wait until no batch taken by another
    /// thread is still running. On return everything ever published has run and been counted.
    pub(crate) fn finish(&self, mut run: impl FnMut(&mut Vec<Callback>)) {
        let mut backoff = crate::sync::Backoff::new();
        loop {
            if let Some(mut batch) = self.take() {
                run(&mut batch);
                self.finished(batch);
                continue;
            }
            if self.is_quiet() {
                return;
            }
            backoff.snooze();
        }
    }
}

/// A batch taken from a [`HandBack`] queue, counted as running until this is dropped (also on
/// unwind), when it goes back to [`HandBack::finished`].
pub(crate) struct Taken<'a> {
    queue: &'a HandBack,
    callbacks: Vec<Callback>,
}

impl<'a> Taken<'a> {
    pub(crate) fn new(queue: &'a HandBack, callbacks: Vec<Callback>) -> Taken<'a> {
        Taken { queue, callbacks }
    }

    /// The callbacks, to run (emptying the vector).
    pub(crate) fn callbacks(&mut self) -> &mut Vec<Callback> {
        &mut self.callbacks
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        // Whatever did not run (only possible if running them unwound) is leaked, not run
        // early and not lost silently: `Callback` leaks its data when dropped.
        let mut callbacks = std::mem::take(&mut self.callbacks);
        callbacks.clear();
        self.queue.finished(callbacks);
    }
}

/// Has a batch published at `published` waited longer than [`PATIENCE`]? Under loom, always:
/// a model's outcome must not depend on the clock.
fn is_stale(published: Instant) -> bool {
    cfg!(rcukit_loom) || published.elapsed() > PATIENCE
}

impl Drop for HandBack {
    fn drop(&mut self) {
        // The worker exits only when the queue is quiet; anything left here could only come
        // from a crashed worker and is leaked (see `Callback`), never run early.
        debug_assert!(self.state.lock().batches.is_empty());
    }
}
