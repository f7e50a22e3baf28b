//! `call_rcu`, `rcu_barrier`, the `call_rcu_data` functions and the fork hooks, generic over
//! the `Flavor`.
//!
//! # `call_rcu`
//!
//! liburcu's `struct rcu_head` is `{ struct cds_wfcq_node next; void (*func)(struct rcu_head *); }`,
//! embedded in the caller's object. `call_rcu(head, func)` stores `func` in the head and queues
//! the head itself with `call_raw` (no allocation, as in liburcu): after a grace period a
//! worker calls `run_head`, which reads the function back and calls it with the head,
//! inside the flavor's callback context (QSBR: online). The `next` field is not used.
//!
//! # `call_rcu_data` (the honest approximation)
//!
//! In liburcu a `struct call_rcu_data` is a callback queue with its own worker thread
//! (optionally real-time, optionally pinned to a CPU), chosen per thread, per CPU or by
//! default. rcukit has one callback machinery per domain, with its own workers, shared by
//! every thread. So here a `call_rcu_data` is a *descriptor*: creating, assigning, looking up
//! and freeing them behaves as in liburcu (the same return values and `errno`s), but every
//! callback goes to the domain's workers whichever descriptor is selected, the flags
//! (`URCU_CALL_RCU_RT`) and CPU affinity are recorded and not applied, and
//! `get_call_rcu_thread()` returns a thread that runs this flavor's callbacks (a worker seen
//! running one, noted before each callback runs, so also from inside the first; it runs a
//! callback once to find one if none has run yet, and returns 0, with a message, where it
//! cannot wait for that: inside a memb read-side critical section). Callbacks queued by
//! one thread run in order; liburcu also orders callbacks of different threads that share a
//! descriptor, rcukit does not.
//!
//! # Fork hooks
//!
//! rcukit repairs its domains in a forked child by itself, so `call_rcu_before_fork()` and
//! the two `after_fork` hooks are not needed around `fork()` here; they only run the hooks
//! that liburcu's rculfhash registered (`urcu_register_rculfhash_atfork`), as liburcu's do.
//! Callbacks queued before a fork run in the parent only: liburcu's child hook moves them to
//! a new worker in the child, rcukit abandons the child's copies (running them in both would
//! free everything twice).

use crate::boundary::FFI;
use crate::flavor::Flavor;
use crate::fork_lock::ForkLock;
use std::cell::Cell;
use std::ffi::{c_int, c_ulong, c_void};
use std::mem::size_of;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// liburcu's `struct rcu_head`.
#[repr(C)]
pub struct rcu_head {
    next: *mut c_void,
    func: Option<unsafe extern "C" fn(*mut rcu_head)>,
}

/// liburcu's `struct urcu_atfork`.
#[repr(C)]
pub struct urcu_atfork {
    before_fork: Option<unsafe extern "C" fn(*mut c_void)>,
    after_fork_parent: Option<unsafe extern "C" fn(*mut c_void)>,
    after_fork_child: Option<unsafe extern "C" fn(*mut c_void)>,
    private: *mut c_void,
}

/// A `call_rcu_data` descriptor (opaque to C).
#[derive(Debug)]
pub struct call_rcu_data {
    /// The flags it was created with (recorded, not applied).
    #[allow(dead_code)]
    flags: c_ulong,
    /// The CPU it was to be pinned to (recorded, not applied).
    #[allow(dead_code)]
    cpu_affinity: c_int,
}

/// One flavor's descriptor tables and rculfhash hooks.
struct Table {
    /// The per-CPU descriptors (empty until one is set).
    per_cpu: Vec<*mut call_rcu_data>,
    /// The registered rculfhash fork hooks and how many times they were registered.
    atfork: *mut urcu_atfork,
    atfork_refs: u64,
}

// SAFETY: the raw pointers are descriptors and C hook tables, usable from any thread; the
// table is only reached under its lock.
unsafe impl Send for Table {}

static TABLES: [ForkLock<Table>; 2] = [ForkLock::new(Table::new()), ForkLock::new(Table::new())];

/// Each flavor's default descriptor (made on first use, never freed, as in liburcu).
static DEFAULTS: [AtomicPtr<call_rcu_data>; 2] =
    [AtomicPtr::new(null_mut()), AtomicPtr::new(null_mut())];

/// Each flavor's last seen worker thread (a `pthread_t`, 0 until one ran a callback).
static WORKERS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

thread_local! {
    /// The calling thread's descriptor, per flavor (`set_thread_call_rcu_data`).
    static THREAD_DATA: [Cell<*mut call_rcu_data>; 2] = const { [Cell::new(null_mut()), Cell::new(null_mut())] };
}

impl Table {
    const fn new() -> Table {
        Table {
            per_cpu: Vec::new(),
            atfork: null_mut(),
            atfork_refs: 0,
        }
    }
}

fn table<F: Flavor>() -> &'static ForkLock<Table> {
    &TABLES[F::INDEX]
}

/// The number of CPUs descriptors can be set for (`sysconf(_SC_NPROCESSORS_CONF)`).
fn cpus() -> usize {
    // SAFETY: `sysconf` has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    usize::try_from(n).unwrap_or(0)
}

fn set_errno(value: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno.
    unsafe { *libc::__errno_location() = value };
}

/// The Rust side of every `call_rcu` callback of flavor `F`.
///
/// # Safety
///
/// `data` is a head queued by [`call_rcu`], whose function was set, and valid until it runs.
unsafe fn run_head<F: Flavor>(data: *mut ()) {
    let head = data.cast::<rcu_head>();
    // SAFETY: the head is valid until its function runs; the function is read first, since
    // the call may free or reuse the head.
    if let Some(func) = unsafe { (*head).func } {
        // SAFETY: a C callback that accepts its own head.
        run_callback::<F>(|| unsafe { func(head) });
    }
}

/// Run `f`, a callback of flavor `F` (`call_rcu`'s or `defer_rcu`'s), noting its thread as one
/// that runs this flavor's callbacks (for `get_call_rcu_thread()`, also from inside `f`).
pub(crate) fn run_callback<F: Flavor>(f: impl FnOnce()) {
    let worker = &WORKERS[F::INDEX];
    // SAFETY: `pthread_self` has no preconditions.
    let me = unsafe { libc::pthread_self() } as usize;
    if worker.load(Ordering::Relaxed) != me {
        worker.store(me, Ordering::Relaxed);
    }
    /// Clears the mark however the callback ends.
    struct Leave(bool);
    impl Drop for Leave {
        fn drop(&mut self) {
            let _ = IN_CALLBACK.try_with(|c| c.set(self.0));
        }
    }
    let was = IN_CALLBACK.try_with(|c| c.replace(true)).unwrap_or(false);
    let _leave = Leave(was);
    F::in_callback(f);
}

thread_local! {
    /// Is this thread running a callback of either flavor (`run_callback`)?
    static IN_CALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Is the calling thread running a callback (in which it may not wait for callbacks)?
pub(crate) fn in_callback() -> bool {
    IN_CALLBACK.try_with(|c| c.get()).unwrap_or(false)
}

/// `call_rcu(head, func)`.
///
/// # Safety
///
/// `head` is valid, and not queued again, until `func` runs.
pub(crate) unsafe fn call_rcu<F: Flavor>(
    what: &'static str,
    head: *mut rcu_head,
    func: Option<unsafe extern "C" fn(*mut rcu_head)>,
) {
    FFI.guarded(what, || {
        if head.is_null() || func.is_none() {
            FFI.misuse(what, "the head or the function is NULL");
        }
        // SAFETY: the caller passes a valid head that nothing else uses until `func` runs.
        unsafe { (*head).func = func };
        // SAFETY: `run_head::<F>(head)` is sound once, on any thread, after a grace period:
        // the head stays valid until its function runs (the caller's contract).
        unsafe { F::call_raw(run_head::<F>, head.cast(), size_of::<rcu_head>()) };
    })
}

/// `rcu_barrier()`.
pub(crate) fn barrier<F: Flavor>(what: &'static str) {
    FFI.guarded(what, F::barrier)
}

/// `create_call_rcu_data(flags, cpu_affinity)`: a new descriptor.
pub(crate) fn create(flags: c_ulong, cpu_affinity: c_int) -> *mut call_rcu_data {
    Box::into_raw(Box::new(call_rcu_data {
        flags,
        cpu_affinity,
    }))
}

/// `get_default_call_rcu_data()`.
pub(crate) fn default<F: Flavor>() -> *mut call_rcu_data {
    let slot = &DEFAULTS[F::INDEX];
    let current = slot.load(Ordering::Acquire);
    if !current.is_null() {
        return current;
    }
    let fresh = create(0, -1);
    match slot.compare_exchange(null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => fresh,
        Err(winner) => {
            // SAFETY: `fresh` was made just above and never shared.
            drop(unsafe { Box::from_raw(fresh) });
            winner
        }
    }
}

/// `call_rcu_data_free(crdp)`: NULL and the default descriptor are ignored, as in liburcu.
///
/// # Safety
///
/// `crdp` is NULL, the default, or a descriptor from `create` no longer in use.
pub(crate) unsafe fn free<F: Flavor>(crdp: *mut call_rcu_data) {
    if crdp.is_null() || crdp == DEFAULTS[F::INDEX].load(Ordering::Acquire) {
        return;
    }
    // SAFETY: the caller gives back a descriptor made by `create`, once.
    drop(unsafe { Box::from_raw(crdp) });
}

/// `get_cpu_call_rcu_data(cpu)`: NULL if none is set (or the CPU is out of range).
pub(crate) fn cpu<F: Flavor>(cpu: c_int) -> *mut call_rcu_data {
    let table = table::<F>().lock();
    usize::try_from(cpu)
        .ok()
        .and_then(|cpu| table.per_cpu.get(cpu).copied())
        .unwrap_or(null_mut())
}

/// `set_cpu_call_rcu_data(cpu, crdp)`: 0, or `-EINVAL` for a CPU out of range and `-EEXIST`
/// when one is set already and `crdp` is not NULL (with `errno` set), as in liburcu.
pub(crate) fn set_cpu<F: Flavor>(cpu: c_int, crdp: *mut call_rcu_data) -> c_int {
    let cpus = cpus();
    let index = match usize::try_from(cpu) {
        Ok(index) if index < cpus => index,
        _ => {
            set_errno(libc::EINVAL);
            return -libc::EINVAL;
        }
    };
    let mut table = table::<F>().lock();
    if table.per_cpu.len() < cpus {
        table.per_cpu.resize(cpus, null_mut());
    }
    if !table.per_cpu[index].is_null() && !crdp.is_null() {
        set_errno(libc::EEXIST);
        return -libc::EEXIST;
    }
    table.per_cpu[index] = crdp;
    0
}

/// `create_all_cpu_call_rcu_data(flags)`: a descriptor for every CPU that has none; 0.
pub(crate) fn create_all_cpu<F: Flavor>(flags: c_ulong) -> c_int {
    let cpus = cpus();
    if cpus == 0 {
        set_errno(libc::EINVAL);
        return -libc::EINVAL;
    }
    for cpu in 0..cpus {
        let cpu = c_int::try_from(cpu).unwrap_or(c_int::MAX);
        if !self::cpu::<F>(cpu).is_null() {
            continue;
        }
        let crdp = create(flags, cpu);
        if set_cpu::<F>(cpu, crdp) != 0 {
            // SAFETY: made just above and not installed.
            unsafe { free::<F>(crdp) };
        }
    }
    0
}

/// `free_all_cpu_call_rcu_data()`: unset every per-CPU descriptor, wait for a grace period
/// (a `call_rcu` may still be reading them, in liburcu), then free them.
pub(crate) fn free_all_cpu<F: Flavor>() {
    let taken: Vec<*mut call_rcu_data> = std::mem::take(&mut table::<F>().lock().per_cpu);
    if taken.iter().all(|crdp| crdp.is_null()) {
        return;
    }
    F::synchronize_rcu();
    for crdp in taken {
        // SAFETY: descriptors set per CPU were made by `create` (the C caller's contract for
        // `set_cpu_call_rcu_data`) and are no longer reachable from the table.
        unsafe { free::<F>(crdp) };
    }
}

/// `get_thread_call_rcu_data()`.
pub(crate) fn thread<F: Flavor>() -> *mut call_rcu_data {
    THREAD_DATA
        .try_with(|data| data[F::INDEX].get())
        .unwrap_or(null_mut())
}

/// `set_thread_call_rcu_data(crdp)`.
pub(crate) fn set_thread<F: Flavor>(crdp: *mut call_rcu_data) {
    let _ = THREAD_DATA.try_with(|data| data[F::INDEX].set(crdp));
}

/// `get_call_rcu_data()`: the thread's descriptor, else the current CPU's, else the default.
pub(crate) fn current<F: Flavor>() -> *mut call_rcu_data {
    let mine = thread::<F>();
    if !mine.is_null() {
        return mine;
    }
    // SAFETY: `sched_getcpu` has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    let per_cpu = self::cpu::<F>(cpu);
    if !per_cpu.is_null() {
        return per_cpu;
    }
    default::<F>()
}

/// `get_call_rcu_thread(crdp)`: a thread that runs this flavor's callbacks.
pub(crate) fn worker_thread<F: Flavor>() -> libc::pthread_t {
    let worker = &WORKERS[F::INDEX];
    if worker.load(Ordering::Relaxed) != 0 {
        return worker.load(Ordering::Relaxed) as libc::pthread_t;
    }
    if !F::may_wait_for_callbacks() {
        static WARNED: AtomicBool = AtomicBool::new(false);
        FFI.warn_once(
            &WARNED,
            "get_call_rcu_thread() called within a read-side critical section before any \
             callback of this flavor has run: no callback thread is known yet, and finding one \
             waits for a grace period; it returns 0",
        );
        return 0;
    }
    // SAFETY: `record_worker` ignores its data; running it anywhere, once, is sound.
    unsafe { F::call_raw(record_worker::<F>, null_mut(), 0) };
    F::barrier();
    worker.load(Ordering::Relaxed) as libc::pthread_t
}

/// A callback that only records the worker thread it runs on.
///
/// # Safety
///
/// None: it ignores its data.
unsafe fn record_worker<F: Flavor>(_: *mut ()) {
    // SAFETY: `pthread_self` has no preconditions.
    let me = unsafe { libc::pthread_self() } as usize;
    WORKERS[F::INDEX].store(me, Ordering::Relaxed);
}

/// `urcu_register_rculfhash_atfork(atfork)`: counted; the first registration's hooks are kept.
pub(crate) fn register_atfork<F: Flavor>(atfork: *mut urcu_atfork) {
    let mut table = table::<F>().lock();
    if table.atfork_refs == 0 {
        table.atfork = atfork;
    }
    table.atfork_refs += 1;
}

/// `urcu_unregister_rculfhash_atfork(atfork)`: the hooks are forgotten with the last one.
pub(crate) fn unregister_atfork<F: Flavor>() {
    let mut table = table::<F>().lock();
    table.atfork_refs = table.atfork_refs.saturating_sub(1);
    if table.atfork_refs == 0 {
        table.atfork = null_mut();
    }
}

/// Which rculfhash hook to run.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ForkPhase {
    Before,
    Parent,
    Child,
}

/// `call_rcu_before_fork()` and the two `after_fork` hooks: run rculfhash's hook, if one is
/// registered (rcukit needs nothing of these around a fork).
pub(crate) fn fork_hook<F: Flavor>(phase: ForkPhase) {
    let atfork = table::<F>().lock().atfork;
    if atfork.is_null() {
        return;
    }
    // SAFETY: rculfhash registered a hook table that lives until it unregisters it.
    let atfork = unsafe { &*atfork };
    let hook = match phase {
        ForkPhase::Before => atfork.before_fork,
        ForkPhase::Parent => atfork.after_fork_parent,
        ForkPhase::Child => atfork.after_fork_child,
    };
    if let Some(hook) = hook {
        // SAFETY: rculfhash's hook, called with its own private data as liburcu calls it.
        unsafe { hook(atfork.private) };
    }
}
