#![doc = include_str!("README.md")]

mod builder;
pub(crate) mod fork;
mod futures;
mod global;
mod guard;
pub(crate) mod owned;
mod port;
pub(crate) mod shutdown;
mod stats;
mod thread_reader;

pub use builder::RcuBuilder;
pub use futures::{BarrierFuture, GpFuture};
pub use guard::{Guard, NotSendUseReadOwned};
pub use owned::OwnedGuard;
pub use stats::Stats;
#[cfg(all(feature = "raw-sections", not(rcukit_loom)))]
pub use thread_reader::RawSection;
pub use thread_reader::ThreadReader;

use crate::barrier::FenceKind;
use crate::callbacks::callback::Callback;
use crate::callbacks::{self, Callbacks};
use crate::error::Error;
use crate::gp::expedited::ExpeditedGp;
use crate::gp::normal::NormalGp;
use crate::gp::{GpCore, GpEvent, ReadSidePtr};
use crate::reader;
use crate::seq::GpCookie;
use crate::sync::lock;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, Weak};

/// Everything a domain's threads share.
pub(crate) struct Inner {
    pub(crate) name: String,
    pub(crate) core: GpCore,
    pub(crate) normal: NormalGp,
    pub(crate) exp: ExpeditedGp,
    pub(crate) event: GpEvent,
    pub(crate) callbacks: Callbacks,
    /// Whether expedited grace periods release callbacks and `synchronize()` callers ([seed
    /// 004](crate::docs::seeds)): the one place the switch is stored (see
    /// [`port`](crate::docs::internal::domain::port)).
    pub(crate) expedited_callbacks: bool,
    /// The fork generation this domain's threads and state belong to (see
    /// [`fork`](crate::docs::internal::domain::fork)).
    pub(crate) fork_generation: AtomicU64,
    /// Serializes the repair after a fork, and holds the fork generation whose state the
    /// repair has reset (it starts the threads once that is done, and again until they all
    /// start).
    pub(crate) fork_repair: Mutex<u64>,
    /// The domain's threads, joined when it is dropped (replaced after a fork).
    pub(crate) threads: Mutex<Vec<crate::threads::Thread>>,
    /// This domain, for the threads it starts.
    pub(crate) me: Weak<Inner>,
    /// Keeps the state alive for owned guards that outlive the handle (see
    /// [`owned`](crate::docs::internal::domain::owned)).
    pub(crate) parking: owned::Parking,
}

#[cfg(unix)]
impl Drop for Inner {
    fn drop(&mut self) {
        fork::unregister(self as *const Inner);
    }
}

impl Inner {
    /// The domain's id (kept with what readers read, see `ReadSide`).
    #[inline]
    pub(crate) fn id(&self) -> u64 {
        self.key().id()
    }

    /// The domain's id and hash, to look the thread's state for it up.
    #[inline]
    pub(crate) fn key(&self) -> crate::per_thread::DomainKey {
        self.core.read_side.domain
    }

    /// Start the domain's threads: the normal grace-period thread, the expedited helper and
    /// the callback workers, in that order, skipping as many as are running already (a repair
    /// after fork that could not start them all leaves the first ones running: starting one of
    /// a kind twice would run two grace-period machines on one state).
    pub(super) fn start_threads(&self) -> Result<(), Error> {
        type Body = Box<dyn FnOnce(&Inner) + Send>;
        let name = &self.name;
        let mut threads: Vec<(&str, String, Body)> = vec![
            (
                "normal grace-period",
                format!("{name}-gp"),
                Box::new(|inner| {
                    GP_THREAD_OF.with(|d| d.set(inner.id()));
                    inner.normal.run(&inner.core, &inner.event)
                }),
            ),
            (
                "expedited helper",
                format!("{name}-exp"),
                Box::new(|inner| {
                    GP_THREAD_OF.with(|d| d.set(inner.id()));
                    inner.exp.run_helper(&inner.core, &inner.event)
                }),
            ),
        ];
        for index in 0..self.callbacks.config.workers {
            threads.push((
                "callback worker",
                format!("{name}-cb{index}"),
                Box::new(move |inner| callbacks::worker::run(inner, &inner.callbacks, index)),
            ));
        }
        let running = lock(&self.threads).len();
        for (what, thread_name, body) in threads.into_iter().skip(running) {
            self.spawn(what, thread_name, body)?;
        }
        Ok(())
    }

    fn spawn(
        &self,
        what: &str,
        thread_name: String,
        body: impl FnOnce(&Inner) + Send + 'static,
    ) -> Result<(), Error> {
        let inner = self
            .me
            .upgrade()
            .expect("a domain starts threads only while alive");
        let thread =
            crate::threads::spawn(thread_name, move || body(&inner)).map_err(|source| {
                Error::Spawn {
                    thread: what.to_string(),
                    source,
                }
            })?;
        lock(&self.threads).push(thread);
        Ok(())
    }

    fn check_cookie(&self, cookie: &GpCookie) {
        assert!(
            cookie.domain == self.id() || cookie.domain == 0,
            "rcukit: a GpCookie from domain #{} was used with domain #{} ('{}'); cookies are \
             only meaningful for the domain that produced them",
            cookie.domain,
            self.id(),
            self.name
        );
    }

    /// Has a grace period covered `cookie`, by the domain's release rule (see
    /// [`port`](crate::docs::internal::domain::port)), or, with `any_kind`, by either kind?
    pub(crate) fn poll(&self, cookie: &GpCookie, any_kind: bool) -> bool {
        self.check_cookie(cookie);
        self.released_by(cookie, any_kind).is_some()
    }
}

std::thread_local! {
    /// The id of the domain whose grace-period thread (normal, or expedited helper) this thread
    /// is; 0 on every other thread. Wakers of grace-period futures run there.
    static GP_THREAD_OF: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

use global::GLOBAL;
pub(super) const GLOBAL_NAME: &str = "rcu-global";

/// An RCU domain: readers, normal and expedited grace periods, polling cookies and callbacks.
///
/// Most programs use the process-wide [`Rcu::global`] domain. Build separate domains with
/// [`Rcu::new`] or [`Rcu::builder`] when grace periods of one subsystem must not wait for the
/// readers of another, or to run with different settings.
pub struct Rcu {
    pub(super) inner: Arc<Inner>,
    /// `inner`'s read side (see [`read_side`](crate::docs::internal::gp::read_side)): `read()` goes
    /// from the handle straight to it. Valid while `inner` is held.
    pub(super) read_side: ReadSidePtr,
}

impl Rcu {
    /// The process-wide domain (built with default settings on first use; never dropped).
    ///
    /// # Panics
    ///
    /// If the operating system refuses to start the domain's threads on first use.
    #[inline]
    pub fn global() -> &'static Rcu {
        // Inlined into the caller: after the first use, one load and a compare, so
        // `Rcu::global().read()` costs what a domain handle's `read()` does.
        match GLOBAL.get() {
            Some(global) => global,
            None => Rcu::start_global(),
        }
    }

    #[cold]
    #[inline(never)]
    fn start_global() -> &'static Rcu {
        match GLOBAL.get_or_build(|| Rcu::builder().name(GLOBAL_NAME).build()) {
            Ok((global, _)) => global,
            Err(e) => panic!("rcukit: cannot start the global domain: {e}"),
        }
    }

    /// A new domain with default settings.
    ///
    /// # Panics
    ///
    /// If the operating system refuses to start the domain's threads; use [`Rcu::builder`] to
    /// get that as an error instead.
    pub fn new() -> Rcu {
        Rcu::builder()
            .build()
            .unwrap_or_else(|e| panic!("rcukit: cannot start a domain: {e}"))
    }

    /// A builder for a domain with custom settings.
    pub fn builder() -> RcuBuilder {
        RcuBuilder::default()
    }

    /// The shared state, for [`Qsbr`](crate::Qsbr), which is a domain whose reader records are
    /// written by quiescent states instead of guards.
    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// A unique, never reused identifier of this domain.
    pub fn id(&self) -> u64 {
        self.inner.id()
    }

    /// The domain's name (from [`RcuBuilder::name`], else `rcu#<id>`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The barrier pair this domain's readers and grace periods use.
    pub fn fence_kind(&self) -> FenceKind {
        self.inner.core.fence()
    }

    /// Whether expedited grace periods release callbacks and `synchronize()` callers.
    pub fn expedited_callbacks(&self) -> bool {
        self.inner.expedited_callbacks
    }

    /// Enter a read-side critical section. Nestable; ends when the returned guard drops.
    ///
    /// The first read of a thread registers its reader record (a short lock); after that the
    /// outermost `read()` is a load of the domain's epoch, a store to the thread's own record
    /// and the light barrier (a compiler fence with membarrier), and dropping the guard is one
    /// store. Not from a signal handler: read there through a
    /// [`ThreadReader`](crate::ThreadReader) made beforehand (see its "Signal handlers").
    #[inline]
    pub fn read(&self) -> Guard<'_> {
        // SAFETY: `self.inner` owns the line and is held for as long as `self` is borrowed.
        let read_side = unsafe { self.read_side.get() };
        let record = reader::local_record(read_side.domain, &self.inner.core.registry);
        // SAFETY: `local_record` returns the calling thread's live record for this domain; it
        // stays valid while any guard on it exists (see `reader`).
        unsafe {
            (*record).enter(&read_side.epoch, read_side.fence);
            Guard::new(self, record)
        }
    }

    /// Enter an *owned* read-side critical section: one that may be held across `.await`,
    /// sleep, and move to and end on another thread (the kernel's SRCU; see [`OwnedGuard`]).
    ///
    /// Costs about what [`read`](Rcu::read) costs, plus one load of the domain's phase; no
    /// reference count is taken (a dropped handle's state is *parked* until its last owned guard
    /// closes; see "Lifetime" in [`owned`](crate::docs::internal::domain::owned)). Owned sections
    /// do not nest with guards or each other: each is counted on its own.
    #[inline]
    pub fn read_owned(&self) -> OwnedGuard {
        OwnedGuard::enter(&self.inner, self.is_global())
    }

    /// Is this the process's global domain ([`Rcu::global`], which is never dropped)? Asking
    /// builds nothing: before the global domain's first use, every domain answers false.
    #[inline]
    pub fn is_global(&self) -> bool {
        GLOBAL
            .get()
            .is_some_and(|global| std::ptr::eq(global, self))
    }

    /// Is the calling thread inside a read-side critical section of this domain?
    pub fn is_reading(&self) -> bool {
        reader::is_reading(self.inner.key(), &self.inner.core.registry)
    }

    /// [`assert_not_reading`](Self::assert_not_reading), and not while the thread holds a
    /// container's writer lock: a reader of the domain may wait for that lock (a flat map's
    /// iteration, `Debug` or `Clone`, any write made under a guard) while the grace period
    /// waits for that reader.
    #[track_caller]
    pub(crate) fn assert_may_wait(&self, what: &str) {
        self.assert_not_reading(what);
        if crate::sync::fork_lock::held_here() {
            panic!(
                "rcukit: {what} called while this thread holds a container's writer lock (in \
                 the user code that a write of an RcuCell, RcuList or RcuFlatMap runs under \
                 it); a reader that waits for that lock inside a read-side critical section \
                 would hold the grace period back for ever. Wait after the write, or defer the \
                 work with call()/retire()."
            );
        }
    }

    pub(crate) fn assert_not_reading(&self, what: &str) {
        if crate::report::in_hook() {
            panic!(
                "rcukit: {what} called from a report hook; the hook may run on the very thread \
                 that runs this domain's grace periods, which would then wait for itself"
            );
        }
        if self.is_reading() {
            panic!(
                "rcukit: {what} called inside a read-side critical section of the same domain \
                 ('{}'); the grace period would wait for this very reader and never end. Drop \
                 the Guard first, or defer the work with call()/retire().",
                self.inner.name
            );
        }
        if GP_THREAD_OF
            .try_with(|d| d.get() == self.id())
            .unwrap_or(false)
        {
            panic!(
                "rcukit: {what} called on a grace-period thread of the same domain ('{}'), from \
                 the Waker of a future woken there: the wait could need this very thread and \
                 never end. A wake should only schedule its task.",
                self.inner.name
            );
        }
    }

    /// Wait for a grace period: returns once every read-side critical section that was running
    /// when it was called has ended.
    ///
    /// It requests a normal grace period (batched with every other request, costing readers
    /// nothing) and returns as soon as a normal *or* an expedited grace period that started
    /// after the call has completed (with `expedited_callbacks(false)`: a normal one only).
    ///
    /// # Panics
    ///
    /// If called inside a read-side critical section of this domain, on one of its
    /// grace-period threads (from the `Waker` of a future woken there), or while the thread
    /// holds a container's writer lock (in the closure of an [`RcuCell`](crate::RcuCell),
    /// [`RcuList`](crate::RcuList) or [`RcuFlatMap`](crate::RcuFlatMap) write, where a reader
    /// waiting for that lock inside its section would hold the grace period back): it would
    /// deadlock.
    #[track_caller]
    pub fn synchronize(&self) {
        self.assert_may_wait("synchronize()");
        let cookie = self.inner.get_state();
        self.wait_for_cookie(&cookie);
    }

    fn wait_for_cookie(&self, cookie: &GpCookie) {
        let inner = &*self.inner;
        inner.check_fork();
        if inner.poll(cookie, false) {
            return;
        }
        inner.normal.request(cookie.normal);
        inner.event.wait_until(|| inner.poll(cookie, false));
    }

    /// Run (or piggyback on) an expedited grace period: fast (microseconds without long
    /// readers) at the price of interrupting the CPUs that run this process's threads.
    ///
    /// # Panics
    ///
    /// If called inside a read-side critical section of this domain, on one of its
    /// grace-period threads (from the `Waker` of a future woken there), or while the thread
    /// holds a container's writer lock (in the closure of an [`RcuCell`](crate::RcuCell),
    /// [`RcuList`](crate::RcuList) or [`RcuFlatMap`](crate::RcuFlatMap) write, where a reader
    /// waiting for that lock inside its section would hold the grace period back): it would
    /// deadlock.
    #[track_caller]
    pub fn synchronize_expedited(&self) {
        self.assert_may_wait("synchronize_expedited()");
        let inner = &*self.inner;
        inner.check_fork();
        inner.exp.synchronize(&inner.core, &inner.event);
    }

    /// Snapshot both grace-period counters without starting anything
    /// (`get_state_synchronize_rcu_full`).
    pub fn get_state(&self) -> GpCookie {
        self.inner.get_state()
    }

    /// Like [`get_state`](Rcu::get_state), and also request a normal grace period so that the
    /// cookie will expire without anybody waiting on it.
    pub fn start_poll(&self) -> GpCookie {
        self.inner.check_fork();
        let cookie = self.inner.get_state();
        self.inner.normal.request(cookie.normal);
        cookie
    }

    /// Like [`get_state`](Rcu::get_state), and also have the domain's helper thread run an
    /// expedited grace period for the cookie, without blocking the caller.
    pub fn start_poll_expedited(&self) -> GpCookie {
        self.inner.check_fork();
        let cookie = self.inner.get_state();
        self.inner.exp.request(cookie.expedited);
        cookie
    }

    /// Has a grace period covering `cookie` (normal or expedited) completed? A true answer
    /// orders everything the covered readers did before the caller's next accesses.
    ///
    /// # Panics
    ///
    /// If `cookie` came from another domain.
    pub fn poll(&self, cookie: &GpCookie) -> bool {
        // In a forked child a cookie's grace period would be ended by the parent's threads:
        // the repair starts the child's.
        self.inner.check_fork();
        self.inner.poll(cookie, true)
    }

    /// Wait, like [`synchronize`](Rcu::synchronize), unless `cookie` has already expired.
    ///
    /// # Panics
    ///
    /// Inside a read-side critical section of this domain, while the thread holds a
    /// container's writer lock (see [`synchronize`](Rcu::synchronize)), or if `cookie` came
    /// from another domain.
    #[track_caller]
    pub fn cond_synchronize(&self, cookie: &GpCookie) {
        self.inner.check_cookie(cookie);
        if self.poll(cookie) {
            return;
        }
        self.assert_may_wait("cond_synchronize()");
        self.wait_for_cookie(cookie);
    }

    /// Run an expedited grace period, like
    /// [`synchronize_expedited`](Rcu::synchronize_expedited), unless `cookie` has already
    /// expired.
    ///
    /// # Panics
    ///
    /// Inside a read-side critical section of this domain, while the thread holds a
    /// container's writer lock (see [`synchronize`](Rcu::synchronize)), or if `cookie` came
    /// from another domain.
    #[track_caller]
    pub fn cond_synchronize_expedited(&self, cookie: &GpCookie) {
        self.inner.check_cookie(cookie);
        if self.poll(cookie) {
            return;
        }
        self.assert_may_wait("cond_synchronize_expedited()");
        let inner = &*self.inner;
        inner.check_fork();
        inner
            .exp
            .run_until(cookie.expedited, &inner.core, &inner.event);
    }

    /// Run `f` on a callback worker after a grace period. Never waits for a grace period, a
    /// lock or another thread; `f` runs once every reader that might see what the caller
    /// removed before this call has finished. Closures queued by one thread run in the order
    /// queued, each after every object that thread [`retire`](Rcu::retire)d before it.
    ///
    /// # Floods
    ///
    /// A thread that queues callbacks far faster than the workers run them gives way to them,
    /// so that what is pending stays bounded where producers outnumber the CPUs: past 262,144
    /// callbacks pending in its shard it yields its CPU once every 1,024 calls, and past four
    /// times that it pauses, for at most a millisecond every 1,024 calls, until they are back
    /// under twice that ([`Stats::producers_gave_way`] counts both). A pause inside a
    /// read-side critical section (or online, in a QSBR domain) holds the next grace period
    /// back by as much, so a flood from such threads only grows more slowly. Nothing on the
    /// domain's own workers.
    pub fn call<F: FnOnce() + Send + 'static>(&self, f: F) {
        self.inner
            .callbacks
            .push(&*self.inner, Callback::from_fn(f));
    }

    /// Drop `value` after a grace period (the kernel's `kfree_rcu`). Never waits for a grace
    /// period. By default the calling thread keeps `value` and drops it in a later `retire`
    /// once the grace period has ended (see [`RcuBuilder::retire_on_producers`]); objects are
    /// not ordered against closures queued before them with [`call`](Rcu::call). Objects that
    /// go to the workers instead (without `retire_on_producers`, or from a worker) give way to
    /// them in a flood as [`call`](Rcu::call)'s closures do.
    ///
    /// # Thread exit
    ///
    /// What a thread still holds when it exits goes to the domain's workers, and `retire` or
    /// `call` from a thread-local destructor (even after rcukit's own thread-locals are gone)
    /// queues there directly: nothing is lost, and `barrier()` waits for it.
    pub fn retire<T: Send + 'static>(&self, value: Box<T>) {
        self.inner
            .callbacks
            .push(&*self.inner, Callback::from_box(value));
    }

    /// Drop the box behind `ptr` after a grace period, for data structures that hold raw
    /// pointers (the unsafe counterpart of [`retire`](Rcu::retire)).
    ///
    /// # Safety
    ///
    /// * `ptr` came from [`Box::into_raw`] (of a `Box<T>`) and is retired only once;
    /// * it has already been made unreachable for *new* readers of this domain (unlinked from
    ///   every RCU-protected structure before this call), so that only readers that are in a
    ///   critical section now may still use it;
    /// * nothing but such readers uses it after this call.
    pub unsafe fn retire_raw<T: Send + 'static>(&self, ptr: *mut T) {
        // SAFETY: forwarded to the caller.
        unsafe { self.retire_raw_sized(ptr, std::mem::size_of::<T>()) };
    }

    /// [`retire`](Rcu::retire) for a value that owns more memory than its own size (a table
    /// behind a `Vec`, a tree): `bytes` is what dropping it frees (clamped to 1 TiB). The
    /// backlog thresholds (`producer_backlog_bytes`, `backlog_bytes`) and
    /// [`Stats::pending_bytes`] then count what is really waiting, so that large values are
    /// freed (and their memory reused) after a few of them, not after thousands.
    pub fn retire_sized<T: Send + 'static>(&self, value: Box<T>, bytes: usize) {
        // SAFETY: `Box::into_raw` of a box we own, given up here.
        unsafe { self.retire_raw_sized(Box::into_raw(value), bytes) };
    }

    /// [`retire_raw`](Rcu::retire_raw) accounting `bytes`, as
    /// [`retire_sized`](Rcu::retire_sized).
    ///
    /// # Safety
    ///
    /// As for [`retire_raw`](Rcu::retire_raw).
    pub unsafe fn retire_raw_sized<T: Send + 'static>(&self, ptr: *mut T, bytes: usize) {
        // SAFETY: forwarded to the caller: `ptr` is an owned, unreachable `Box<T>`.
        let callback = unsafe { Callback::from_raw_box(ptr, bytes) };
        self.inner.callbacks.push(&*self.inner, callback);
    }

    /// Call `run(data)` on a callback worker after a grace period, accounting `bytes` to the
    /// pending-bytes statistics (clamped to 1 TiB): the fully type-erased variant of
    /// [`call`](Rcu::call).
    ///
    /// # Safety
    ///
    /// Calling `run(data)` exactly once, from another thread, after a grace period, must be
    /// sound: `data` must be `Send` in spirit and not be used by the caller after this call
    /// other than by readers already in a critical section.
    pub unsafe fn call_raw(&self, run: unsafe fn(*mut ()), data: *mut (), bytes: usize) {
        // SAFETY: forwarded to the caller.
        let callback = unsafe { Callback::from_raw(run, data, bytes) };
        self.inner.callbacks.push(&*self.inner, callback);
    }

    /// Wait until every callback queued before this call has run (`rcu_barrier`). It is not a
    /// grace period and does not wait for one beyond what those callbacks need; callbacks queued
    /// later, even by those callbacks, are not waited for.
    ///
    /// From a callback of another domain it waits for this domain's callbacks on that domain's
    /// worker: if one of them waits in turn for that domain's callbacks (its `barrier()`), the
    /// two wait for each other for ever, as two locks taken in opposite orders do. Keep waits
    /// between domains' callbacks one way.
    ///
    /// # Panics
    ///
    /// Inside a read-side critical section of this domain, from one of its callbacks, or
    /// while the thread holds a container's writer lock (in the user code that a write of an
    /// [`RcuCell`](crate::RcuCell), [`RcuList`](crate::RcuList) or
    /// [`RcuFlatMap`](crate::RcuFlatMap) runs under it): a callback it waits for may write
    /// that container (a retired value's `Drop` may) and would wait for this thread.
    #[track_caller]
    pub fn barrier(&self) {
        self.assert_not_reading("barrier()");
        if crate::sync::fork_lock::held_here() {
            panic!(
                "rcukit: barrier() called while this thread holds a container's writer lock (in \
                 a closure or other user code that a write runs under it); a callback it waits \
                 for may need that lock, held by this very thread. Call it after the write."
            );
        }
        self.inner.check_fork();
        self.inner.callbacks.barrier();
    }

    /// Statistics for this domain.
    pub fn stats(&self) -> Stats {
        let inner = &*self.inner;
        inner.check_fork();
        let cb = inner.callbacks.stats();
        let (readers, orphaned_readers) = inner.core.registry.counts();
        Stats {
            normal_gps: inner.normal.completed(),
            expedited_gps: inner.exp.completed(),
            readers,
            orphaned_readers,
            owned_sections: inner.core.registry.owned_open(),
            waiting_futures: inner.event.wakers.len(),
            stalls: inner.core.stalls(),
            callbacks_queued: cb.queued,
            callbacks_invoked: cb.invoked,
            callbacks_pending: cb.pending,
            pending_bytes: cb.pending_bytes,
            released_by_normal: cb.released_by_normal,
            released_by_expedited: cb.released_by_expedited,
            callback_panics: cb.panics,
            callbacks_run_by_producers: cb.run_by_producers,
            callbacks_abandoned: cb.abandoned,
            readers_gave_way: inner.core.give_way.gave_way(),
            producers_gave_way: cb.producers_gave_way,
        }
    }
}

impl Default for Rcu {
    fn default() -> Self {
        Rcu::new()
    }
}

impl std::fmt::Debug for Rcu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rcu")
            .field("id", &self.inner.id())
            .field("name", &self.inner.name)
            .field("fence", &self.fence_kind())
            .finish_non_exhaustive()
    }
}
