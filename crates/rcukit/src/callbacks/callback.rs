#![doc = include_str!("callback.md")]

use crate::sync::AtomicUsize;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::{AcqRel, Acquire};
use std::sync::Arc;

/// A queued unit of deferred work.
pub(crate) struct Callback {
    run: unsafe fn(*mut ()),
    data: *mut (),
    /// The bytes accounted, with [`DROP_ONLY`] set for callbacks that only drop a box.
    bytes: usize,
}

/// Marks a callback that only drops a box (`retire`, `retire_raw`): such callbacks may be run by
/// producer threads (see [`hand_back`](crate::docs::internal::callbacks::hand_back)). Sizes never
/// reach the top bit: no Rust object is larger than `isize::MAX` bytes.
const DROP_ONLY: usize = 1 << (usize::BITS - 1);

/// The most bytes one callback accounts for (1 TiB): a declared size is clamped to it, so that
/// no sum of pending bytes comes near overflowing before memory runs out.
pub(crate) const MAX_BYTES: usize = 1 << 40;

// SAFETY: a Callback is only ever built from `Send` closures and `Send` boxes (see the
// constructors), or by `from_raw`, whose contract requires the data to be sendable.
unsafe impl Send for Callback {}

unsafe fn call_boxed<F: FnOnce()>(data: *mut ()) {
    // SAFETY: `data` came from `Box::into_raw(Box<F>)` in `Callback::from_fn`, and each
    // callback is run at most once (`invoke` consumes it).
    let f = unsafe { Box::from_raw(data.cast::<F>()) };
    f();
}

unsafe fn drop_boxed<T>(data: *mut ()) {
    // SAFETY: `data` came from `Box::into_raw(Box<T>)` in `Callback::from_box` or from a caller
    // of `retire_raw` who promised the same, and is dropped exactly once.
    drop(unsafe { Box::from_raw(data.cast::<T>()) });
}

impl Callback {
    /// A callback that runs `f`.
    pub(crate) fn from_fn<F: FnOnce() + Send + 'static>(f: F) -> Callback {
        let bytes = std::mem::size_of::<F>();
        Callback {
            run: call_boxed::<F>,
            data: Box::into_raw(Box::new(f)).cast(),
            bytes,
        }
    }

    /// A callback that drops `value`.
    pub(crate) fn from_box<T: Send + 'static>(value: Box<T>) -> Callback {
        Callback {
            run: drop_boxed::<T>,
            data: Box::into_raw(value).cast(),
            bytes: std::mem::size_of::<T>() | DROP_ONLY,
        }
    }

    /// A callback that drops the box behind `ptr`, accounting `bytes` (clamped to 1 TiB).
    ///
    /// # Safety
    ///
    /// `ptr` must come from `Box::<T>::into_raw`, must not be used by anyone else afterwards
    /// (other than readers that started before the grace period), and `T` must be `Send`.
    pub(crate) unsafe fn from_raw_box<T: Send + 'static>(ptr: *mut T, bytes: usize) -> Callback {
        Callback {
            run: drop_boxed::<T>,
            data: ptr.cast(),
            bytes: bytes.min(MAX_BYTES) | DROP_ONLY,
        }
    }

    /// A callback that calls `run(data)`.
    ///
    /// # Safety
    ///
    /// Calling `run(data)` once, on any thread, after a grace period, must be sound.
    pub(crate) unsafe fn from_raw(run: unsafe fn(*mut ()), data: *mut (), bytes: usize) -> Self {
        Callback {
            run,
            data,
            // Absurd declared sizes are clamped (this also keeps the marker bit clear).
            bytes: bytes.min(MAX_BYTES),
        }
    }

    #[inline]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes & !DROP_ONLY
    }

    /// Does this callback only drop a box (queued by `retire` or `retire_raw`)?
    #[inline]
    pub(crate) fn is_drop_only(&self) -> bool {
        self.bytes & DROP_ONLY != 0
    }

    /// Run the callback, consuming it.
    #[inline]
    pub(crate) fn invoke(self) {
        // SAFETY: the constructors pair `run` with a `data` it accepts, and `self` is consumed,
        // so this is the only time `run` sees `data`.
        unsafe { (self.run)(self.data) };
    }
}

/// Completion count of one `barrier()` call: one marker per shard plus a bias of one held by
/// the caller until every marker is queued (so the count cannot reach zero early).
pub(crate) struct BarrierCount {
    remaining: AtomicUsize,
    /// The waker of a `barrier_async()` future, if one waits.
    lock: std::sync::Mutex<Option<std::task::Waker>>,
    cond: std::sync::Condvar,
}

impl BarrierCount {
    pub(crate) fn new(count: usize) -> Arc<BarrierCount> {
        Arc::new(BarrierCount {
            remaining: AtomicUsize::new(count),
            lock: std::sync::Mutex::new(None),
            cond: std::sync::Condvar::new(),
        })
    }

    /// One marker (or the bias) is done. The `AcqRel` decrement makes everything that ran
    /// before each arrival happen-before the waiter's return. The last arrival wakes the
    /// `barrier_async()` future, if one waits: its waker is an executor's code, run on a
    /// callback worker (or a thread that called `barrier`), which must not die of its panic;
    /// a panic is caught and its message handed to `panicked`.
    pub(crate) fn arrive(&self, panicked: impl FnOnce(String)) {
        if self.remaining.fetch_sub(1, AcqRel) == 1 {
            // Taking the lock orders this wake-up after a waiter's check-then-wait.
            let waker = crate::sync::lock(&self.lock).take();
            self.cond.notify_all();
            if let Some(waker) = waker {
                if let Err(payload) = catch_unwind(AssertUnwindSafe(|| waker.wake())) {
                    panicked(crate::report::payload_message(&*payload));
                    crate::report::drop_payload(payload);
                }
            }
        }
    }

    /// For a future: true once every marker has arrived; else keep `waker` to be woken then.
    pub(crate) fn poll_done(&self, waker: &std::task::Waker) -> bool {
        let mut slot = crate::sync::lock(&self.lock);
        if self.is_done() {
            return true;
        }
        match &mut *slot {
            Some(w) => w.clone_from(waker),
            None => *slot = Some(waker.clone()),
        }
        false
    }

    /// The future is gone: drop its waker.
    pub(crate) fn forget_waker(&self) {
        let _ = crate::sync::lock(&self.lock).take();
    }

    pub(crate) fn is_done(&self) -> bool {
        self.remaining.load(Acquire) == 0
    }

    /// Block until every marker has arrived.
    pub(crate) fn wait(&self) {
        let mut guard = crate::sync::lock(&self.lock);
        while !self.is_done() {
            guard = self.cond.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// What flows through a shard's intake and its segmented list.
pub(crate) enum Work {
    Callback(Callback),
    /// A `barrier()` marker: ready once everything queued before it on this shard has run.
    Barrier(Arc<BarrierCount>),
}
