#![doc = include_str!("fork_lock.md")]

use super::fork::{self, ForkStamp};
use super::Mutex;
use std::cell::UnsafeCell;
use std::mem::ManuallyDrop;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

/// A mutex that a forked child takes over from a holder it does not have (see the module
/// docs).
pub(crate) struct ForkLock<T> {
    /// In a cell so that a forked child can put a new mutex in its place.
    mutex: UnsafeCell<Mutex<T>>,
    /// The fork generation whose threads may hold the mutex.
    generation: ForkStamp,
    /// The thread that holds the mutex (0: nobody, or the moments around taking and letting go
    /// of the mutex: see the module docs).
    holder: AtomicUsize,
}

// SAFETY: the mutex is shared as any mutex is (`T: Send`); the cell is written only by a
// repair, while no other thread of the process borrows the mutex (see `ForkLock::after_fork`).
unsafe impl<T: Send> Sync for ForkLock<T> {}

#[cfg(not(rcukit_loom))]
std::thread_local! {
    /// How many `ForkLock`s this thread holds.
    static HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Does this thread hold a container's writer lock (a `ForkLock`)? Then the code running is a
/// write, or the user's code that the write runs under the lock (a closure, `Hash`, `Eq`,
/// `Clone`): where the domains' producers must not start running other objects' drops, which
/// may write that container (see "Where user code runs" in
/// [`invoke`](crate::docs::internal::callbacks::invoke)). Always false under loom, whose model
/// threads share one thread of the process.
#[inline]
pub(crate) fn held_here() -> bool {
    #[cfg(not(rcukit_loom))]
    return HELD.with(|held| held.get() != 0);
    #[cfg(rcukit_loom)]
    return false;
}

/// Count one more (`1`) or one fewer (`-1`) lock held by this thread.
#[inline(always)]
fn count_held(by: i32) {
    #[cfg(not(rcukit_loom))]
    HELD.with(|held| held.set(held.get().wrapping_add_signed(by)));
    #[cfg(rcukit_loom)]
    let _ = by;
}

/// The lock held; lets it go (clearing the holder's record first) when dropped.
pub(crate) struct ForkLockGuard<'a, T> {
    lock: &'a ForkLock<T>,
    guard: ManuallyDrop<super::MutexGuard<'a, T>>,
}

impl<T> ForkLock<T> {
    pub(crate) fn new(value: T) -> ForkLock<T> {
        ForkLock {
            mutex: UnsafeCell::new(Mutex::new(value)),
            generation: ForkStamp::new(),
            holder: AtomicUsize::new(0),
        }
    }

    fn mutex(&self) -> &Mutex<T> {
        // SAFETY: the cell is replaced only while no thread borrows the mutex (see the `Sync`
        // impl).
        unsafe { &*self.mutex.get() }
    }

    /// Take the lock. In a forked child whose parent's thread held it, `taken_over` first
    /// repairs the value that thread left (see the module docs); it runs at most once per
    /// fork, in whichever thread of the child locks first, and must not lock this lock.
    ///
    /// Panics if the calling thread holds this lock already (the user's code that a write runs
    /// under it wrote the same container): it would wait for itself forever.
    #[track_caller]
    #[inline(always)]
    pub(crate) fn lock(&self, taken_over: impl FnOnce(Option<T>) -> T) -> ForkLockGuard<'_, T> {
        self.generation
            .repair_if_forked(|interrupted| self.after_fork(interrupted, taken_over));
        // A repair above cleared a vanished thread's `holder`.
        if self.held_by_me() {
            reentered();
        }
        let guard = self.mutex().lock();
        self.holder.store(fork::thread_address(), Relaxed);
        count_held(1);
        ForkLockGuard {
            lock: self,
            guard: ManuallyDrop::new(guard),
        }
    }

    /// Does the calling thread hold this lock? Only a thread that holds some lock can hold
    /// this one, and `holder` is its own store then. (In a forked child before the first
    /// `lock`'s repair, `holder` may name a thread the child does not have, at an address that
    /// a thread of the child may have got again: `lock` asks after its repair, and
    /// `refuse_reentry` believes only the surviving thread's address before it.)
    #[inline(always)]
    fn held_by_me(&self) -> bool {
        held_here() && self.holder.load(Relaxed) == fork::thread_address()
    }

    /// `given` (what a write was given: values, closures) back, or, when the calling thread
    /// holds this lock already (a write from the user's code that a write of the same
    /// container runs under it), `given` dropped and then the panic that [`lock`](Self::lock)
    /// would raise. Dropped by that panic's unwinding instead, a `Drop` in `given` that writes
    /// the container would be refused in turn while a panic unwinds, which aborts the process.
    /// Call before `lock`, with everything the write owns of the caller's.
    #[track_caller]
    #[inline(always)]
    pub(crate) fn refuse_reentry<X>(&self, given: X) -> X {
        // In a forked child before the repair, `holder` may be a vanished thread's address that
        // this thread got again; the surviving thread's own hold is still its own.
        if self.held_by_me()
            && (!self.generation.forked() || fork::is_survivor_address(self.holder.load(Relaxed)))
        {
            drop(given);
            reentered();
        }
        given
    }

    /// The first `lock` in a forked child: repair the lock if a thread the child does not have
    /// holds it (or if the fork `interrupted` a repair, which may have left the mutex half
    /// written).
    #[cold]
    #[inline(never)]
    fn after_fork(&self, interrupted: bool, taken_over: impl FnOnce(Option<T>) -> T) {
        let holder = self.holder.load(Relaxed);
        let vanished = interrupted
            || match self.mutex().try_lock() {
                Some(free) => {
                    drop(free);
                    false
                }
                None => !fork::is_survivor_address(holder),
            };
        if vanished {
            // SAFETY: every other thread of the child that locks waits for the repair (the
            // stamp), and none borrows the mutex: its holder does not exist here.
            unsafe { self.take_over(interrupted, taken_over) };
        }
    }

    /// Put a new mutex, with the value `taken_over` repaired, in place of the abandoned one.
    ///
    /// # Safety
    ///
    /// No other thread borrows the mutex meanwhile.
    unsafe fn take_over(&self, interrupted: bool, taken_over: impl FnOnce(Option<T>) -> T) {
        let abandoned = self.mutex.get();
        let left = if interrupted {
            None
        } else {
            // SAFETY: no other thread borrows the mutex (caller's contract); the value is moved
            // out, and the mutex overwritten below without being dropped, so it is owned once.
            Some(unsafe { std::ptr::read((*abandoned).get_mut()) })
        };
        let value = taken_over(left);
        // SAFETY: as above; the abandoned mutex is overwritten as it is (no drop: its value was
        // moved out, or was never whole, and its guard belongs to a thread that is gone).
        unsafe { std::ptr::write(abandoned, Mutex::new(value)) };
        self.holder.store(0, Relaxed);
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn reentered() -> ! {
    panic!(
        "rcukit: a container written from code its own write runs under its writer lock (a \
         closure given to the write, or a Drop or Clone it runs there): that would wait for \
         itself forever (reads are fine there)"
    );
}

impl<T> std::ops::Deref for ForkLockGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for ForkLockGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<T> Drop for ForkLockGuard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        self.lock.holder.store(0, Relaxed);
        // SAFETY: dropped once, here.
        unsafe { ManuallyDrop::drop(&mut self.guard) };
        count_held(-1);
    }
}
