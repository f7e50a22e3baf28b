#![doc = include_str!("README.md")]

pub(crate) mod fork;
pub(crate) mod fork_lock;

#[cfg(rcukit_loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};

#[cfg(not(rcukit_loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};

#[cfg(rcukit_loom)]
pub(crate) use loom::cell::UnsafeCell;

/// `std::cell::UnsafeCell` with loom's closure-based API, so that loom can check accesses.
#[cfg(not(rcukit_loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(rcukit_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// A compiler-only fence. Loom has no notion of compiler reordering, and under loom the crate
/// always runs in [`FenceKind::SeqCst`](crate::FenceKind::SeqCst) mode, so this is never the
/// only ordering a model relies on.
#[inline(always)]
pub(crate) fn compiler_fence(order: std::sync::atomic::Ordering) {
    std::sync::atomic::compiler_fence(order);
}

/// A mutex with one API under both std and loom: `lock()` returns the guard directly (a
/// poisoned lock is taken anyway: no rcukit critical section runs user code).
pub(crate) struct Mutex<T>(
    #[cfg(rcukit_loom)] loom::sync::Mutex<T>,
    #[cfg(not(rcukit_loom))] std::sync::Mutex<T>,
);

#[cfg(rcukit_loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;
#[cfg(not(rcukit_loom))]
pub(crate) type MutexGuard<'a, T> = std::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        #[cfg(rcukit_loom)]
        {
            Mutex(loom::sync::Mutex::new(value))
        }
        #[cfg(not(rcukit_loom))]
        {
            Mutex(std::sync::Mutex::new(value))
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(rcukit_loom)]
        {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
        #[cfg(not(rcukit_loom))]
        {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    /// The lock if nobody holds it, without waiting (for paths that must not wait behind a
    /// holder the scheduler has put aside).
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        // loom's `try_lock` returns std's result type too.
        match self.0.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// The value, through exclusive access (a poisoned lock's too).
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    /// Hold this lock across `fork()` (see [`fork`](crate::docs::internal::sync::fork)).
    #[cfg(unix)]
    pub(crate) fn hold_for_fork(&'static self, held: &mut fork::Held) {
        #[cfg(not(rcukit_loom))]
        held.hold(&self.0);
        #[cfg(rcukit_loom)]
        let _ = held;
    }
}

/// A condition variable for [`Mutex`], with one API under both std and loom.
pub(crate) struct Condvar(
    #[cfg(rcukit_loom)] loom::sync::Condvar,
    #[cfg(not(rcukit_loom))] std::sync::Condvar,
);

impl Condvar {
    pub(crate) fn new() -> Self {
        #[cfg(rcukit_loom)]
        {
            Condvar(loom::sync::Condvar::new())
        }
        #[cfg(not(rcukit_loom))]
        {
            Condvar(std::sync::Condvar::new())
        }
    }

    /// Release `guard`'s lock, wait for a notification, take the lock again.
    pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(guard).unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}

/// The right to run something long (an expedited grace period, the owned-section part of
/// one), taken and given back under a mutex held only for that, with a condition variable to
/// wait on: such a mutex can be held across `fork()` by the fork handlers, and a turn whose
/// holder does not exist in the child is simply given back ([`after_fork`](Turn::after_fork)).
/// Giving the turn back notifies only when somebody waits (a notification is a system call).
pub(crate) struct Turn {
    state: Mutex<TurnState>,
    free: Condvar,
}

struct TurnState {
    taken: bool,
    waiting: u32,
}

impl Turn {
    pub(crate) fn new() -> Turn {
        Turn {
            state: Mutex::new(TurnState {
                taken: false,
                waiting: 0,
            }),
            free: Condvar::new(),
        }
    }

    /// Take the turn, waiting while another holder has it, unless `done()` (asked before
    /// taking and after every wait) says there is nothing left to run: then false.
    pub(crate) fn take_unless(&self, mut done: impl FnMut() -> bool) -> bool {
        let mut state = self.state.lock();
        loop {
            if done() {
                return false;
            }
            if !state.taken {
                state.taken = true;
                return true;
            }
            state.waiting += 1;
            state = self.free.wait(state);
            state.waiting -= 1;
        }
    }

    /// Take the turn if it is free and its mutex is not held, without waiting at all.
    pub(crate) fn try_take(&self) -> bool {
        match self.state.try_lock() {
            Some(mut state) if !state.taken => {
                state.taken = true;
                true
            }
            _ => false,
        }
    }

    /// Give the turn back (the caller holds it).
    pub(crate) fn give_back(&self) {
        let waiting = {
            let mut state = self.state.lock();
            state.taken = false;
            state.waiting
        };
        if waiting != 0 {
            self.free.notify_all();
        }
    }

    /// After `fork()`: the holder, if any, does not exist in this process, and neither do
    /// the threads that waited.
    pub(crate) fn after_fork(&self) {
        let mut state = self.state.lock();
        state.taken = false;
        state.waiting = 0;
    }

    /// Hold the turn's mutex across `fork()` (see [`fork`](crate::docs::internal::sync::fork)).
    #[cfg(unix)]
    pub(crate) fn hold_for_fork(&'static self, held: &mut fork::Held) {
        self.state.hold_for_fork(held);
    }
}

/// Lock a `std` mutex, taking it even if poisoned (no rcukit critical section runs user code,
/// so a poisoned lock only means some unrelated panic unwound through a guard).
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Backoff for a thread that waits for another thread to change a shared word.
///
/// Spins briefly (the common case: a reader leaves its critical section within a few hundred
/// nanoseconds), then yields the CPU, then sleeps with exponentially growing naps capped at one
/// millisecond, so that a waiter on a long reader costs almost nothing on a 2-core machine.
/// Under loom every step is a `yield_now`, which is what loom needs to make progress.
pub(crate) struct Backoff {
    step: u32,
}

impl Backoff {
    #[cfg(not(rcukit_loom))]
    const SPIN_STEPS: u32 = 64;
    const YIELD_STEPS: u32 = 64 + 16;

    pub(crate) fn new() -> Self {
        Backoff { step: 0 }
    }

    /// True once the backoff has moved past spinning; callers use it to decide when to start
    /// looking at the clock (stall detection) without paying for `Instant::now` on fast waits.
    pub(crate) fn is_sleeping(&self) -> bool {
        self.step >= Self::YIELD_STEPS
    }

    /// Spin, then yield, but never sleep: for waits that end as soon as another thread's short
    /// critical section does (a reader waiting out a writer of a spinning lock). A sleeping
    /// waiter would miss the gaps between back-to-back writers and starve.
    pub(crate) fn spin_or_yield(&mut self) {
        #[cfg(rcukit_loom)]
        {
            loom::thread::yield_now();
        }
        #[cfg(not(rcukit_loom))]
        {
            if self.step < Self::SPIN_STEPS {
                std::hint::spin_loop();
                self.step += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }

    pub(crate) fn snooze(&mut self) {
        #[cfg(rcukit_loom)]
        {
            loom::thread::yield_now();
        }
        #[cfg(not(rcukit_loom))]
        {
            if self.step < Self::SPIN_STEPS {
                std::hint::spin_loop();
            } else if self.step < Self::YIELD_STEPS {
                std::thread::yield_now();
            } else {
                let exp = (self.step - Self::YIELD_STEPS).min(7);
                // 10 µs, 20 µs, ... capped at 1 ms.
                let nap = std::time::Duration::from_micros((10u64 << exp).min(1000));
                std::thread::sleep(nap);
            }
        }
        self.step = self.step.saturating_add(1);
    }
}

/// A bounded wait: spin until a condition holds, for at most a given time, never yielding
/// and never sleeping. A yield gives the core away for as long as the scheduler likes (a whole
/// time slice, milliseconds, when more threads are runnable than there are cores), so a wait
/// that must end within microseconds only spins, and reads the clock every few spins (the
/// first read only once the condition has failed a few times, so a wait that ends at once
/// costs no clock read).
pub(crate) struct Brief {
    patience: std::time::Duration,
    deadline: Option<std::time::Instant>,
    tries: u32,
}

impl Brief {
    /// Spins between two looks at the clock.
    const SPINS_PER_CLOCK: u32 = 8;

    pub(crate) fn new(patience: std::time::Duration) -> Brief {
        Brief {
            patience,
            deadline: None,
            tries: 0,
        }
    }

    /// Wait until `done()` is true (then true) or the patience, shared by every call on this
    /// `Brief`, has run out (then false).
    pub(crate) fn wait(&mut self, mut done: impl FnMut() -> bool) -> bool {
        loop {
            if done() {
                return true;
            }
            self.tries += 1;
            if self.tries % Self::SPINS_PER_CLOCK == 0 {
                let now = std::time::Instant::now();
                if now >= *self.deadline.get_or_insert(now + self.patience) {
                    return false;
                }
            }
            #[cfg(rcukit_loom)]
            loom::thread::yield_now();
            #[cfg(not(rcukit_loom))]
            std::hint::spin_loop();
        }
    }
}

/// Whether two fields of a `T`, each given as (offset, size) by [`span_of!`], lie on different
/// cache lines wherever a `T` is placed: `T` is aligned to a line, and no line holds bytes of
/// both.
#[cfg(all(test, not(rcukit_loom)))]
pub(crate) fn on_lines_apart<T>(a: (usize, usize), b: (usize, usize)) -> bool {
    const LINE: usize = 64;
    let lines = |(offset, size): (usize, usize)| (offset / LINE, (offset + size.max(1) - 1) / LINE);
    let ((a_first, a_last), (b_first, b_last)) = (lines(a), lines(b));
    std::mem::align_of::<T>() >= LINE && (a_last < b_first || b_last < a_first)
}

/// The size of the field that `field` borrows (for [`span_of!`]).
#[cfg(all(test, not(rcukit_loom)))]
pub(crate) fn size_of_field<T, F>(_field: fn(&T) -> &F) -> usize {
    std::mem::size_of::<F>()
}

/// `(offset, size)` of `$field` in `$t`, for [`on_lines_apart`].
#[cfg(all(test, not(rcukit_loom)))]
macro_rules! span_of {
    ($t:ty, $field:ident) => {
        (
            std::mem::offset_of!($t, $field),
            $crate::sync::size_of_field(|v: &$t| &v.$field),
        )
    };
}
#[cfg(all(test, not(rcukit_loom)))]
pub(crate) use span_of;
