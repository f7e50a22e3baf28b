#![doc = include_str!("fork.md")]

use std::cell::Cell;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU64, AtomicUsize};

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

/// The survivor's [`thread_address`]: the thread that made the latest fork.
static SURVIVOR_ADDRESS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// A byte of each thread's own, whose address names the thread (see `thread_address`).
    static HERE: Cell<u8> = const { Cell::new(0) };
}

/// A number that tells the calling thread from every other thread alive with it: the address
/// of a thread-local byte (no load, no allocation, and it stays readable in thread-local
/// destructors). For an object that records its holder in an atomic word, cheaply enough to
/// do it at every use; in a forked child, [`is_survivor_address`] tells whether that holder
/// is the one thread the child has of its parent's.
#[inline(always)]
pub(crate) fn thread_address() -> usize {
    HERE.with(|here| here as *const Cell<u8> as usize)
}

/// Was `address` (a [`thread_address`]) the thread that made the latest fork? Never in a
/// process that has not forked. (Other threads of the parent had other addresses; threads
/// the child starts may be given one of those, never the survivor's.)
pub(crate) fn is_survivor_address(address: usize) -> bool {
    address != 0 && address == SURVIVOR_ADDRESS.load(Acquire)
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

/// The fork generation an object was made or last repaired in, for an object that a forked
/// child repairs once, at its first use (the containers' writer locks, `RcuHashMap`): every
/// use compares it with the process's generation (two loads of words that stay in the cache),
/// and the first use in a child repairs the object while the child's other users wait.
pub(crate) struct ForkStamp(AtomicU64);

/// Set in a [`ForkStamp`] while a thread of a forked child repairs its object.
const REPAIRING: u64 = 1 << 63;

impl ForkStamp {
    /// Stamped with the current generation: nothing to repair here.
    pub(crate) fn new() -> ForkStamp {
        ForkStamp(AtomicU64::new(generation()))
    }

    /// Has this process forked since the object was made or repaired?
    #[inline(always)]
    pub(crate) fn forked(&self) -> bool {
        self.0.load(Acquire) != generation()
    }

    /// If the process forked since: run `repair(interrupted)` in this thread, or wait while
    /// another thread of the process runs it; once per fork. `interrupted`: the fork copied a
    /// repair that a thread of the parent (itself a forked child) had begun and not finished,
    /// so what it was repairing may be half written.
    #[inline(always)]
    pub(crate) fn repair_if_forked(&self, repair: impl FnOnce(bool)) {
        if self.forked() {
            self.repair(repair);
        }
    }

    #[cold]
    #[inline(never)]
    fn repair(&self, repair: impl FnOnce(bool)) {
        loop {
            let now = generation();
            let seen = self.0.load(Acquire);
            if seen == now {
                return;
            }
            if seen == now | REPAIRING {
                std::thread::yield_now();
                continue;
            }
            // A generation of an earlier process, or a repair that a thread of an earlier
            // process left halfway (that thread is gone too): this thread repairs.
            if self
                .0
                .compare_exchange(seen, now | REPAIRING, Acquire, Relaxed)
                .is_ok()
            {
                // A repair that panics (a thread the child cannot start) is left halfway: the
                // stamp then says so (an earlier generation, marked), and the next use
                // starts it again, told it was interrupted, instead of waiting for it for ever.
                let unfinished = Unfinished {
                    stamp: &self.0,
                    back_to: seen | REPAIRING,
                };
                repair(seen & REPAIRING != 0);
                std::mem::forget(unfinished);
                self.0.store(now, Release);
                return;
            }
        }
    }
}

/// Puts a [`ForkStamp`] back to `back_to` if the repair unwinds.
struct Unfinished<'s> {
    stamp: &'s AtomicU64,
    back_to: u64,
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        self.stamp.store(self.back_to, Release);
    }
}

#[cfg(unix)]
pub(crate) use handlers::{at_prepare, Held, Stage};

#[cfg(unix)]
// Miri cannot fork: there the handlers are never installed, and what only they use is unused.
#[cfg_attr(miri, allow(dead_code))]
mod handlers {
    use super::{thread_address, token, GENERATION, SURVIVOR, SURVIVOR_ADDRESS};
    use std::any::Any;
    use std::cell::RefCell;
    use std::sync::atomic::Ordering::Release;
    use std::sync::{Mutex, MutexGuard};

    /// Guards of internal locks held across a fork.
    #[derive(Default)]
    pub(crate) struct Held {
        /// Released front to back.
        guards: Vec<Box<dyn Any>>,
    }

    impl Held {
        /// Take `mutex` and keep it until the parent or child handler releases everything.
        pub(crate) fn hold<T: 'static>(&mut self, mutex: &'static Mutex<T>) {
            self.keep(crate::sync::lock(mutex));
        }

        /// Keep a guard taken by the caller (released after every guard kept before it).
        pub(crate) fn keep<G: 'static>(&mut self, guard: G) {
            self.guards.push(Box::new(guard));
        }
    }

    /// When a step of the prepare handler runs: every step of an earlier stage first.
    #[derive(Clone, Copy, Debug)]
    pub(crate) enum Stage {
        /// Do now, in the forking thread, work that a thread of the process was to do soon
        /// for the process as a whole: the child, which has none of those threads, would never
        /// see it done. (Only glibc's allocator trim is owed so far: unused elsewhere.)
        #[cfg_attr(
            not(all(target_os = "linux", target_env = "gnu", not(rcukit_loom), not(miri))),
            allow(dead_code)
        )]
        Owed = 0,
        /// Finish one-time set-up that another thread may be in the middle of: the child
        /// cannot, as that thread is not copied.
        SetUp = 1,
        /// Take the locks that must not be copied held, keeping them in the `Held`.
        Locks = 2,
    }

    type Step = fn(&mut Held);

    /// How many stages there are (one step each).
    const STAGES: usize = Stage::Locks as usize + 1;

    /// The registered steps, one per stage. The prepare handler holds this lock across the
    /// fork too (released last), so a child never finds it taken by a registering thread.
    static STEPS: Mutex<[Option<Step>; STAGES]> = Mutex::new([None; STAGES]);

    /// Install the handlers (see `install`) and have the prepare handler run `step` at
    /// `stage`. Each stage has one step, registered by the one layer that owns it (again on
    /// every use: the same step each time).
    ///
    /// A step must not call `at_prepare`: the prepare handler holds the list of steps while
    /// they run.
    pub(crate) fn at_prepare(stage: Stage, step: Step) {
        install();
        crate::sync::lock(&STEPS)[stage as usize] = Some(step);
    }

    /// What the prepare handler holds until the parent or child handler: the steps' locks,
    /// then the list of steps itself (released in that order).
    type Holding = (Held, MutexGuard<'static, [Option<Step>; STAGES]>);

    thread_local! {
        static HOLDING: RefCell<Option<Holding>> = const { RefCell::new(None) };
    }

    extern "C" fn prepare() {
        // Registered twice (see `install`), the handler runs twice per fork: the second run
        // finds the first one's holdings and leaves them be.
        if HOLDING.try_with(|h| h.borrow().is_some()).unwrap_or(false) {
            return;
        }
        let steps = crate::sync::lock(&STEPS);
        let mut held = Held::default();
        for step in steps.iter().flatten() {
            step(&mut held);
        }
        // (Without thread-local storage, a fork from a thread-local destructor, the locks are
        // released at once: the child then only relies on the repair.)
        let _ = HOLDING.try_with(|h| *h.borrow_mut() = Some((held, steps)));
    }

    fn release() {
        let _ = HOLDING.try_with(|h| drop(h.borrow_mut().take()));
    }

    extern "C" fn parent() {
        release();
    }

    extern "C" fn child() {
        SURVIVOR.store(token(), Release);
        SURVIVOR_ADDRESS.store(thread_address(), Release);
        GENERATION.fetch_add(1, Release);
        release();
    }

    /// Install the fork handlers, once per process, before the caller goes on: a thread that
    /// finds another one installing them waits until they are in place (otherwise it could
    /// start a one-time set-up, or take a lock, that a fork in that moment copies half done
    /// with no prepare handler to wait for it). `pthread_once`, not a `Once` or a flag: a
    /// child forked while another thread was installing them must not wait for that thread,
    /// which it does not have, and glibc's `pthread_once` starts an initialization that a fork
    /// interrupted over again in the child. If the interrupted one had already registered the
    /// handlers, the child registers them a second time; `prepare` then runs twice per fork
    /// and its second run does nothing. (On Linux; not under loom or miri, which cannot fork.)
    fn install() {
        #[cfg(all(target_os = "linux", not(any(rcukit_loom, miri))))]
        {
            struct Once(std::cell::UnsafeCell<libc::pthread_once_t>);
            // SAFETY: the control is only ever handed to `pthread_once`, which synchronizes
            // its users.
            unsafe impl Sync for Once {}
            static ONCE: Once = Once(std::cell::UnsafeCell::new(libc::PTHREAD_ONCE_INIT));
            // SAFETY: `ONCE` is a statically initialized once-control used only here.
            unsafe { libc::pthread_once(ONCE.0.get(), register) };
            let r = RESULT.load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(r, 0, "rcukit: pthread_atfork failed ({r})");
        }
        // Elsewhere a flag: a thread that finds it set goes on at once, so a fork in the moment
        // between another thread setting it and registering the handlers is not prepared for.
        #[cfg(all(not(target_os = "linux"), not(any(rcukit_loom, miri))))]
        {
            use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
            static INSTALLED: AtomicBool = AtomicBool::new(false);
            if !INSTALLED.swap(true, Relaxed) {
                register();
                let r = RESULT.load(Relaxed);
                assert_eq!(r, 0, "rcukit: pthread_atfork failed ({r})");
            }
        }
    }

    /// `pthread_atfork`'s result (no panic may leave the `extern "C"` function).
    #[cfg(not(any(rcukit_loom, miri)))]
    static RESULT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

    #[cfg(not(any(rcukit_loom, miri)))]
    extern "C" fn register() {
        // SAFETY: the handlers are `extern "C"` functions that live for the whole program.
        let r = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        RESULT.store(r, std::sync::atomic::Ordering::Relaxed);
    }
}
