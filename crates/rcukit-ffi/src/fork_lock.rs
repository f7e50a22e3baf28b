//! `ForkLock`: a mutex that the thread calling `fork()` holds across the fork.
//!
//! `fork()` copies memory but only the calling thread: a mutex that another thread held at
//! that moment stays locked forever in the child. rcukit solves this for its own locks (see
//! `rcukit::docs::internal::domain::fork`); this module does the same for the few locks of the
//! C libraries (librcukit's table of live reader handles; the liburcu layer's polling table,
//! `call_rcu_data` table and rculfhash fork hooks). Each library links its own copy, with its
//! own handlers. Every `ForkLock`
//! registers itself on first use; a `pthread_atfork` *prepare* handler takes them all, in
//! registration order, and the *parent* and *child* handlers release them.
//!
//! This cannot deadlock as long as no code holds one of these locks while it takes another, or
//! while it calls into rcukit or into C code (the modules that use them copy what they need and
//! let go first): every holder then finishes its short critical section without waiting for
//! anything the forking thread holds.

use std::any::Any;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Something whose lock `fork()` must hold.
trait Holdable: Sync {
    /// Lock it, returning the guard as an opaque box.
    fn hold(&'static self) -> Box<dyn Any>;
}

/// A mutex held across `fork()` by the forking thread.
pub struct ForkLock<T> {
    mutex: Mutex<T>,
    registered: AtomicBool,
}

impl<T: Send + 'static> Holdable for ForkLock<T> {
    fn hold(&'static self) -> Box<dyn Any> {
        Box::new(self.mutex.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Every registered lock, in registration order.
static LOCKS: Mutex<Vec<&'static dyn Holdable>> = Mutex::new(Vec::new());

thread_local! {
    /// The guards the prepare handler took, until the parent or child handler drops them.
    static HELD: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

impl<T: Send + 'static> ForkLock<T> {
    pub const fn new(value: T) -> ForkLock<T> {
        ForkLock {
            mutex: Mutex::new(value),
            registered: AtomicBool::new(false),
        }
    }

    /// Lock it (registering it for `fork()` on first use). A poisoned lock is used as is: every
    /// critical section that uses one leaves its data consistent before anything can panic.
    pub fn lock(&'static self) -> MutexGuard<'static, T> {
        if !self.registered.load(Relaxed) {
            self.register();
        }
        self.mutex.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cold]
    fn register(&'static self) {
        install_handlers();
        let mut locks = LOCKS.lock().unwrap_or_else(PoisonError::into_inner);
        if !self.registered.swap(true, Relaxed) {
            locks.push(self);
        }
    }
}

extern "C" fn prepare() {
    let locks = LOCKS.lock().unwrap_or_else(PoisonError::into_inner);
    let mut guards: Vec<Box<dyn Any>> = locks.iter().map(|lock| lock.hold()).collect();
    // The list stays locked across the fork too, so that a lock cannot be registered (and
    // then held by its registering thread) behind the handler's back.
    guards.push(Box::new(locks));
    let _ = HELD.try_with(|held| *held.borrow_mut() = guards);
}

extern "C" fn release() {
    let _ = HELD.try_with(|held| held.borrow_mut().clear());
}

fn install_handlers() {
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if !INSTALLED.swap(true, Relaxed) {
        // SAFETY: the handlers are `extern "C"` functions that live as long as the program.
        let r = unsafe { libc::pthread_atfork(Some(prepare), Some(release), Some(release)) };
        assert_eq!(r, 0, "rcukit: pthread_atfork failed ({r})");
    }
}
