//! `fork()`: what a child process inherits from rcukit, and how its domains come back to life.
//!
//! # The problem
//!
//! `fork()` copies the whole address space but only the calling thread. In the child, every
//! domain still has its state, but not the threads behind it: the normal grace-period thread,
//! the expedited helper and the callback workers are gone, so `synchronize()` and `barrier()`
//! would wait forever. Worse, the copied state describes threads that no longer exist: reader
//! records that say "reading" (a grace period would wait for them forever), a lock or an
//! expedited grace period held by a thread that vanished, a steal of a producer's list half
//! done, callbacks in the worker's private list (on its stack) that nobody can reach.
//!
//! # What rcukit does
//!
//! * **Before the fork** (`pthread_atfork` *prepare* handler, in the forking thread) it takes
//!   every short internal lock of every live domain, in one fixed order, and keeps them across
//!   the fork; the *parent* and *child* handlers release them. So no copied lock is held by a
//!   vanished thread, and no copied structure is half-updated. These locks are never held
//!   while waiting for anything else, so taking them all only waits for short critical
//!   sections. (They are `std` futex mutexes, whose waiters live in the kernel's queues: a
//!   `parking_lot` lock keeps its waiters in a user-space table that the child would inherit,
//!   and an unlock could hand the lock to a thread that does not exist.)
//! * **The child handler** only counts the fork (a generation number) and remembers which
//!   thread survived it; a handler runs in a fragile context, so everything else waits.
//! * **On the child's first use of a domain** (any call that needs its threads: grace-period
//!   waits and requests, `call`/`retire`, `barrier`, `stats`, dropping it) the domain notices
//!   the new generation and repairs itself, once, before anything else of it runs:
//!   - reader records of threads that do not exist in the child are unregistered: grace
//!     periods wait only for the child's readers (the surviving thread's own read-side
//!     critical section, if it forked inside one, is waited for as usual);
//!   - the right to run expedited grace periods, held by a vanished thread, is released; a
//!     grace period a vanished thread had started is finished by the next one to run one
//!     (normal: the new grace-period thread, first thing);
//!   - **callbacks queued before the fork are abandoned in the child**: not run, and their
//!     memory (the child's copy) not freed. They run in the parent, which owns the same
//!     callbacks; running them in the child too would run each closure twice. They are
//!     counted in [`Stats::callbacks_abandoned`](crate::Stats::callbacks_abandoned), not in
//!     `callbacks_pending`, and `barrier()` in the child waits only for callbacks queued in
//!     the child;
//!   - fresh threads are started, and the old thread handles are forgotten (joining a thread
//!     that does not exist would hang).
//!
//! Reads need none of this: `read()` works in the child at once, whatever the state.
//!
//! Two more things are copied mid-way by an unlucky fork, and handled where they live:
//!
//! * **The global domain being built** by another thread: its slot records the builder's
//!   fork generation, and a child takes an interrupted build over instead of waiting for a
//!   builder it does not have (see `domain::global`).
//! * **A thread starting or exiting**: `std`'s thread start and exit take a process-wide
//!   lock that the child would inherit locked; rcukit starts its threads without it (see
//!   [`threads`](crate::threads)), so the repair and new domains can start theirs.
//!
//! # Who is alive
//!
//! Every per-thread object (reader record, producer list) records its owner: a per-thread
//! token and the fork generation it was created in. In a process that has forked, the threads
//! that exist are the one that made the latest fork and the ones created since; so an object
//! is alive if it was created in the current generation or by the thread that forked last.
//!
//! # Limits
//!
//! * `RecSeq` and `PerCpuRwLock` have no threads and are not repaired: a reader section or a
//!   write lock held by a vanished thread stays held in the child, as with any lock.
//! * Forking from inside rcukit's own context (a report hook, a callback, a `Drop` that rcukit
//!   runs) is not supported: that thread may be in the middle of the very state being copied.
//! * Like any multithreaded program's child, the child may only rely on what the C library
//!   makes safe after `fork()` (glibc: allocation works); rcukit's repair allocates and
//!   starts threads, on first use, not in the handler.

use crate::domain::Inner;
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Forks this process descends from (0 in the original process), counted by the child handler.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The token of the thread that made the latest fork: the one thread that survived it.
static SURVIVOR: AtomicU64 = AtomicU64::new(0);

static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's token (0 until first needed).
    static TOKEN: Cell<u64> = const { Cell::new(0) };
}

/// The current fork generation.
#[inline]
pub(crate) fn generation() -> u64 {
    GENERATION.load(Acquire)
}

/// The calling thread's token, 0 if its thread-local storage is gone.
fn token() -> u64 {
    TOKEN
        .try_with(|t| {
            if t.get() == 0 {
                t.set(NEXT_TOKEN.fetch_add(1, Relaxed));
            }
            t.get()
        })
        .unwrap_or(0)
}

/// The thread (and fork generation) that created a per-thread object.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Owner {
    token: u64,
    generation: u64,
}

impl Owner {
    /// The calling thread, now.
    pub(crate) fn current() -> Owner {
        Owner {
            token: token(),
            generation: generation(),
        }
    }

    /// Is the owner the calling thread? (By token, which stays readable in thread-local
    /// destructors.)
    pub(crate) fn is_calling_thread(&self) -> bool {
        self.token != 0 && self.token == token()
    }

    /// Does the owning thread exist in this process (see the module docs)? Always true in a
    /// process that has not forked since the object was created.
    pub(crate) fn is_alive(&self) -> bool {
        self.generation == generation() || (self.token != 0 && self.token == SURVIVOR.load(Acquire))
    }
}

/// Guards of internal locks held across a fork.
#[derive(Default)]
pub(crate) struct Held {
    guards: Vec<Box<dyn Any>>,
}

impl Held {
    /// Take `mutex` and keep it until the parent or child handler releases everything.
    pub(crate) fn hold<T: 'static>(&mut self, mutex: &'static Mutex<T>) {
        self.guards.push(Box::new(crate::sync::lock(mutex)));
    }
}

/// Every live domain, for the fork handlers. A domain leaves this list at the start of its
/// drop (see `Inner`'s `Drop`), under this lock, so a domain in the list is fully alive for
/// as long as the lock is held.
static DOMAINS: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

/// Add a domain (installing the fork handlers on first use).
pub(crate) fn register(inner: &Arc<Inner>) {
    install_handlers();
    crate::sync::lock(&DOMAINS).push(Arc::downgrade(inner));
}

/// Remove a domain that is being dropped.
pub(crate) fn unregister(inner: *const Inner) {
    crate::sync::lock(&DOMAINS).retain(|w| !std::ptr::eq(w.as_ptr(), inner));
}

/// What the prepare handler holds until the parent or child handler: the domains' locks, then
/// the list itself (dropped in that order).
type Holding = (Held, MutexGuard<'static, Vec<Weak<Inner>>>);

thread_local! {
    static HOLDING: RefCell<Option<Holding>> = const { RefCell::new(None) };
}

extern "C" fn prepare() {
    // One-time set-up another thread may be in the middle of (the barrier's detection, which
    // registers the process with membarrier): finish it first, as the child cannot.
    crate::barrier::support();
    let domains = crate::sync::lock(&DOMAINS);
    let mut held = Held::default();
    crate::gp::read_side::hold_for_fork(&mut held);
    for weak in domains.iter() {
        // SAFETY: a domain in the list is alive while the list is locked (see `DOMAINS`), and
        // stays so until the guards taken here are released with the list's, after the fork.
        let inner: &'static Inner = unsafe { &*weak.as_ptr() };
        inner.hold_for_fork(&mut held);
    }
    // (Without thread-local storage, a fork from a thread-local destructor, the locks are
    // released at once: the child then only relies on the repair.)
    let _ = HOLDING.try_with(|h| *h.borrow_mut() = Some((held, domains)));
}

fn release() {
    let _ = HOLDING.try_with(|h| drop(h.borrow_mut().take()));
}

extern "C" fn parent() {
    release();
}

extern "C" fn child() {
    SURVIVOR.store(token(), Release);
    GENERATION.fetch_add(1, Release);
    release();
}

/// Install the fork handlers, once per process. A flag, not a `Once`: a child forked while
/// another thread was installing them must not wait for that thread, which it does not have.
pub(crate) fn install_handlers() {
    #[cfg(all(unix, not(rcukit_loom), not(miri)))]
    {
        static INSTALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !INSTALLED.swap(true, Relaxed) {
            // SAFETY: the handlers are `extern "C"` functions that live for the whole program.
            let r = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
            assert_eq!(r, 0, "rcukit: pthread_atfork failed ({r})");
        }
    }
}
