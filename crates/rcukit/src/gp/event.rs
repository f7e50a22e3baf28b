#![doc = include_str!("event.md")]

use crate::report::{Report, Reporter, WakerPanic};
use crate::sync::lock;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Condvar, Mutex};
use std::task::Waker;
use std::thread::Thread;

/// A thread subscribed to the end of grace periods.
struct Listener {
    thread: Thread,
    /// Does it want to be unparked now?
    wants: Box<dyn Fn() -> bool + Send + Sync>,
}

/// "A grace period of some kind just ended": a generation counter, a condition variable for
/// blocked waiters, the worker threads to unpark and the futures' wakers (see the module docs).
pub(crate) struct GpEvent {
    /// Grace periods announced so far, and threads blocked in [`wait_until`](Self::wait_until)
    /// (so that an end nobody waits for costs no notification, which is a system call).
    state: Mutex<EventState>,
    cond: Condvar,
    listeners: Mutex<Vec<Listener>>,
    /// Futures waiting for a grace period.
    pub(crate) wakers: Wakers,
    /// Where a panicking waker is reported, and the domain's name for it.
    reporter: Reporter,
    name: String,
}

struct EventState {
    generation: u64,
    blocked: u32,
}

impl GpEvent {
    pub(crate) fn new(name: String, reporter: Reporter) -> GpEvent {
        GpEvent {
            state: Mutex::new(EventState {
                generation: 0,
                blocked: 0,
            }),
            cond: Condvar::new(),
            listeners: Mutex::new(Vec::new()),
            wakers: Wakers::default(),
            reporter,
            name,
        }
    }

    /// Add a thread to unpark whenever a grace period ends while `wants()` says so (a callback
    /// worker parked with an empty list has nothing a grace period could release: waking it
    /// would only cost it a trip through the scheduler).
    pub(crate) fn subscribe(&self, thread: Thread, wants: Box<dyn Fn() -> bool + Send + Sync>) {
        lock(&self.listeners).push(Listener { thread, wants });
    }

    /// Announce the end of a grace period. Call after the sequence counter has been ended, so a
    /// waiter that checks its condition under the lock cannot miss the change.
    pub(crate) fn notify(&self) {
        let blocked = {
            let mut state = lock(&self.state);
            state.generation = state.generation.wrapping_add(1);
            state.blocked
        };
        if blocked != 0 {
            self.cond.notify_all();
        }
        for listener in lock(&self.listeners).iter() {
            if (listener.wants)() {
                listener.thread.unpark();
            }
        }
        self.wakers.wake_all(|message| {
            self.reporter.report(Report::WakerPanic(WakerPanic {
                domain: self.name.clone(),
                message,
            }))
        });
    }

    /// Block until `done()` is true; `done` is re-evaluated after every grace period.
    pub(crate) fn wait_until(&self, mut done: impl FnMut() -> bool) {
        if done() {
            return;
        }
        let mut state = lock(&self.state);
        while !done() {
            state.blocked += 1;
            state = self.cond.wait(state).unwrap_or_else(|e| e.into_inner());
            state.blocked -= 1;
        }
    }

    /// Forget every subscribed thread (after `fork()`, the workers that subscribed are gone;
    /// their replacements subscribe again), and every registered waker (they belong to the
    /// parent's executors; a future polled again in the child registers again).
    pub(crate) fn forget_listeners(&self) {
        lock(&self.state).blocked = 0; // the blocked threads were the parent's
        lock(&self.listeners).clear();
        self.wakers.forget_all();
    }

    /// Hold this event's locks across `fork()` (see [`fork`](crate::docs::internal::domain::fork)).
    #[cfg(unix)]
    pub(crate) fn hold_for_fork(&'static self, held: &mut crate::sync::fork::Held) {
        held.hold(&self.state);
        held.hold(&self.listeners);
        self.wakers.hold_for_fork(held);
    }
}

/// The wakers of the futures waiting for a grace period of one domain.
#[derive(Default)]
pub(crate) struct Wakers {
    slots: std::sync::Mutex<Slots>,
}

#[derive(Default)]
struct Slots {
    next_key: u64,
    wakers: HashMap<u64, Waker>,
}

impl Wakers {
    /// Register `waker` under `key` (given one on first use), then check `done` once more;
    /// returns `done`'s answer, having unregistered if it is true.
    ///
    /// A waker's `clone` and `drop` are the executor's code, as its `wake` is: they run with the
    /// lock released (one that calls into the domain, say for its statistics, would otherwise
    /// wait for the lock its own thread holds). The waker is cloned between two holds of the
    /// lock when the one registered would not wake the same task; a grace period that ends in
    /// between takes the old one, and the check of `done` after the second hold sees it ended.
    pub(crate) fn register(
        &self,
        key: &mut Option<u64>,
        waker: &Waker,
        done: impl Fn() -> bool,
    ) -> bool {
        let (k, same) = {
            let mut slots = lock(&self.slots);
            let k = *key.get_or_insert_with(|| {
                slots.next_key = slots.next_key.wrapping_add(1);
                slots.next_key
            });
            (k, slots.wakers.get(&k).is_some_and(|w| w.will_wake(waker)))
        };
        let fresh = (!same).then(|| waker.clone());
        // Bound here, the wakers replaced or removed are dropped after the lock.
        let (_replaced, finished) = {
            let mut slots = lock(&self.slots);
            let replaced = fresh.and_then(|fresh| slots.wakers.insert(k, fresh));
            (replaced, done().then(|| slots.wakers.remove(&k)))
        };
        if finished.is_some() {
            *key = None;
        }
        finished.is_some()
    }

    /// Forget `key`'s waker (its future completed or was dropped); the waker is dropped with
    /// the lock released.
    pub(crate) fn unregister(&self, key: &mut Option<u64>) {
        if let Some(k) = key.take() {
            let removed = lock(&self.slots).wakers.remove(&k);
            drop(removed);
        }
    }

    /// Wake every registered future (a grace period just ended). The wakers run after the
    /// lock is released: they are the executors' code.
    ///
    /// A `wake` that panics is caught and handed to `panicked` with its message, and the others
    /// are still woken: it runs on whatever thread ended the grace period (one of the domain's
    /// own, or a caller of the library), which must not die of it.
    pub(crate) fn wake_all(&self, panicked: impl Fn(String)) {
        let woken = {
            let mut slots = lock(&self.slots);
            if slots.wakers.is_empty() {
                return;
            }
            std::mem::take(&mut slots.wakers)
        };
        for (_, waker) in woken {
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| waker.wake())) {
                panicked(crate::report::payload_message(&*payload));
                crate::report::drop_payload(payload);
            }
        }
    }

    /// After `fork()`: leak the wakers without calling into them (their executors' threads
    /// are the parent's). A future polled again registers again.
    pub(crate) fn forget_all(&self) {
        std::mem::forget(std::mem::take(&mut lock(&self.slots).wakers));
    }

    /// Futures waiting now.
    pub(crate) fn len(&self) -> usize {
        lock(&self.slots).wakers.len()
    }

    /// Hold the lock across `fork()` (see [`fork`](crate::docs::internal::domain::fork)).
    #[cfg(unix)]
    pub(crate) fn hold_for_fork(&'static self, held: &mut crate::sync::fork::Held) {
        held.hold(&self.slots);
    }
}
