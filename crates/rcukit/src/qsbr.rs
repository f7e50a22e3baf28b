#![doc = include_str!("qsbr.md")]

use crate::domain::Inner;
use crate::error::Error;
use crate::gp::{give_way, Flavor, ReadSide};
use crate::reader::{self, ReaderRecord, ThreadInfo};
use crate::seq::GpCookie;
use crate::{FenceKind, Rcu, RcuBuilder, Stats};
use std::marker::PhantomData;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

static NEXT_QSBR: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Builder for [`Qsbr`] domains; see [`Qsbr::builder`].
#[derive(Clone, Debug)]
pub struct QsbrBuilder {
    name: Option<String>,
    fenced: bool,
    give_way: bool,
    rcu: RcuBuilder,
}

impl Default for QsbrBuilder {
    fn default() -> QsbrBuilder {
        QsbrBuilder {
            name: None,
            fenced: true,
            give_way: true,
            rcu: RcuBuilder::default(),
        }
    }
}

impl QsbrBuilder {
    /// A name for the domain's threads and its stall reports (default `qsbr#<n>`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// How long an online thread may go without a quiescent state, while a grace period waits
    /// for it, before a stall report names it on stderr (default 10 s; at least 1 ms).
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.rcu = self.rcu.stall_timeout(timeout);
        self
    }

    /// Where stall and callback-panic reports go (default: standard error), as
    /// [`RcuBuilder::on_report`].
    pub fn on_report(mut self, hook: impl Fn(&crate::Report) + Send + Sync + 'static) -> Self {
        self.rcu = self.rcu.on_report(hook);
        self
    }

    /// Batching window of normal grace periods (default 1 ms; at most 10 s), as
    /// [`RcuBuilder::normal_gp_delay`].
    pub fn normal_gp_delay(mut self, delay: Duration) -> Self {
        self.rcu = self.rcu.normal_gp_delay(delay);
        self
    }

    /// Number of callback worker threads (default 1; 1 to 256), as
    /// [`RcuBuilder::callback_workers`].
    pub fn callback_workers(mut self, workers: usize) -> Self {
        self.rcu = self.rcu.callback_workers(workers);
        self
    }

    /// Pending callbacks per worker past which expedited grace periods are requested (default
    /// 10,000), as [`RcuBuilder::backlog_callbacks`].
    pub fn backlog_callbacks(mut self, callbacks: u64) -> Self {
        self.rcu = self.rcu.backlog_callbacks(callbacks);
        self
    }

    /// Whether each quiescent state (and each [`offline`](QsbrThread::offline)) ends with a
    /// full fence, as liburcu's QSBR flavor does (default `true`).
    ///
    /// With it each quiescent state costs a fence (a few nanoseconds), and a grace period that
    /// finds an online thread it must wait for pairs that fence with one of its own before it
    /// sleeps until the thread's next quiescent state wakes it: no interrupts, and normal grace
    /// periods sleep until woken too. Without it (`false`) a quiescent state is a load and a
    /// store, and such a grace period pays a `membarrier` instead (an interrupt to every CPU
    /// that runs a thread of the process; in a virtual machine, an exit on each), and a normal
    /// one naps on a timer. Turn it off only where quiescent states are very frequent (every
    /// few reads) and writers seldom wait for a thread; see the
    /// [`qsbr`](crate::docs::internal::qsbr) essay.
    pub fn fenced_quiescent_states(mut self, fenced: bool) -> Self {
        self.fenced = fenced;
        self
    }

    /// Whether a registered thread that announces a quiescent state while a grace period has
    /// long been waiting for *other* threads yields its CPU, once per grace period, so that a
    /// thread waiting for that CPU gets to run and announce its own (default `true`).
    ///
    /// With more runnable threads than cores, a grace period otherwise waits until the
    /// scheduler gets round to every online thread that is not running (a time slice or more,
    /// milliseconds); with it, the threads that are running make room. Only waits that have
    /// slept 500 µs, or follow such a wait closely, ask; a thread gives way at most once per
    /// grace period, and never while a grace period still waits for it. Counted in
    /// [`Stats::readers_gave_way`](crate::Stats::readers_gave_way). Turn it off where
    /// registered threads must never yield (they then still never block). See the
    /// [`give_way`](crate::docs::internal::gp::give_way) essay.
    pub fn readers_give_way(mut self, give_way: bool) -> Self {
        self.give_way = give_way;
        self
    }

    /// Build the domain and start its threads.
    pub fn build(self) -> Result<Qsbr, Error> {
        let name = match self.name {
            Some(name) => name,
            None => format!("qsbr#{}", NEXT_QSBR.fetch_add(1, Relaxed)),
        };
        let rcu = self
            .rcu
            .name(name)
            .fence(FenceKind::SeqCst)
            .flavor(Flavor::Qsbr {
                fenced: self.fenced,
                give_way: self.give_way,
            })
            .build()?;
        Ok(Qsbr { rcu })
    }
}

/// A QSBR domain: registered threads announce quiescent states and read with no code at all.
///
/// See the [module documentation](crate::docs::internal::qsbr) for the protocol and why it is
/// correct. The grace-period API mirrors [`Rcu`]'s: [`synchronize`](Qsbr::synchronize),
/// [`synchronize_expedited`](Qsbr::synchronize_expedited), cookies ([`get_state`](Qsbr::get_state),
/// [`start_poll`](Qsbr::start_poll), [`poll`](Qsbr::poll),
/// [`cond_synchronize`](Qsbr::cond_synchronize)), callbacks ([`call`](Qsbr::call),
/// [`retire`](Qsbr::retire), [`barrier`](Qsbr::barrier)) and [`stats`](Qsbr::stats).
///
/// Threads that never register are never waited for, and may wait for grace periods. A thread
/// that registers must call [`QsbrThread::quiescent_state`] regularly, or go offline, or every
/// grace period of the domain waits for it.
pub struct Qsbr {
    rcu: Rcu,
}

impl Qsbr {
    /// A new domain with default settings.
    ///
    /// # Panics
    ///
    /// If the operating system refuses to start the domain's threads; use [`Qsbr::builder`] to
    /// get that as an error instead.
    pub fn new() -> Qsbr {
        Qsbr::builder()
            .build()
            .unwrap_or_else(|e| panic!("rcukit: cannot start a QSBR domain: {e}"))
    }

    /// A builder for a domain with custom settings.
    pub fn builder() -> QsbrBuilder {
        QsbrBuilder::default()
    }

    fn inner(&self) -> &Inner {
        self.rcu.inner()
    }

    /// The domain's inner `Rcu`: containers check an online [`QsbrThread`] against it and
    /// retire into it. Never handed to users: its guards and waits know nothing of QSBR.
    pub(crate) fn rcu(&self) -> &Rcu {
        &self.rcu
    }

    /// A unique, never reused identifier of this domain (shared with [`Rcu::id`]'s sequence).
    pub fn id(&self) -> u64 {
        self.rcu.id()
    }

    /// The domain's name.
    pub fn name(&self) -> &str {
        self.rcu.name()
    }

    /// Register the calling thread. It is *online* from now on: grace periods wait for its
    /// quiescent states until it goes offline or the returned handle drops.
    ///
    /// # Panics
    ///
    /// If the calling thread already holds a registration with this domain (one handle per
    /// thread and domain: a second one would let the thread announce quiescent states for
    /// one while it still reads through the other).
    pub fn register(&self) -> QsbrThread<'_> {
        let inner = self.inner();
        let registry = &inner.core.registry;
        let Ok(record) = reader::qsbr::register(self.id(), registry) else {
            panic!(
                "rcukit: {} is already registered with QSBR domain '{}'; keep one QsbrThread \
                 per thread and domain",
                ThreadInfo::current(),
                self.name()
            );
        };
        let mut thread = QsbrThread {
            qsbr: self,
            read_side: &inner.core.read_side,
            gave_way_to: 0,
            record,
            online: false,
            fenced: inner.core.flavor().fenced(),
            _not_send: PhantomData,
        };
        thread.online();
        thread
    }

    /// Is the calling thread registered with this domain and online?
    pub fn is_online(&self) -> bool {
        reader::qsbr::online_here(self.id(), &self.inner().core.registry)
    }

    #[track_caller]
    fn assert_offline(&self, what: &str) {
        if reader::qsbr::online_here(self.id(), &self.inner().core.registry) {
            panic!(
                "rcukit: {what} called by {}, which is online in QSBR domain '{}'; the grace \
                 period would wait for this very thread's quiescent state and never end. Go \
                 offline first (QsbrThread::offline or offline_while), or defer the work with \
                 call()/retire().",
                ThreadInfo::current(),
                self.name()
            );
        }
    }

    /// Wait for a grace period: every registered thread that was online when this was called
    /// has since announced a quiescent state or gone offline. Requests a normal grace period
    /// (batched) and returns on the first grace period of either kind that covers the call.
    ///
    /// # Panics
    ///
    /// If the calling thread is online in this domain (it would wait for itself).
    #[track_caller]
    pub fn synchronize(&self) {
        self.assert_offline("synchronize()");
        self.rcu.synchronize();
    }

    /// Run (or share) an expedited grace period in the calling thread: no batching delay.
    ///
    /// # Panics
    ///
    /// If the calling thread is online in this domain.
    #[track_caller]
    pub fn synchronize_expedited(&self) {
        self.assert_offline("synchronize_expedited()");
        self.rcu.synchronize_expedited();
    }

    /// Snapshot both grace-period counters without starting anything.
    pub fn get_state(&self) -> GpCookie {
        self.rcu.get_state()
    }

    /// Like [`get_state`](Qsbr::get_state), and request a normal grace period.
    pub fn start_poll(&self) -> GpCookie {
        self.rcu.start_poll()
    }

    /// Like [`get_state`](Qsbr::get_state), and have the helper thread run an expedited grace
    /// period without blocking the caller.
    pub fn start_poll_expedited(&self) -> GpCookie {
        self.rcu.start_poll_expedited()
    }

    /// Has a grace period covering `cookie` completed? Never blocks; fine from online threads.
    ///
    /// # Panics
    ///
    /// If `cookie` came from another domain.
    pub fn poll(&self, cookie: &GpCookie) -> bool {
        self.rcu.poll(cookie)
    }

    /// Wait like [`synchronize`](Qsbr::synchronize) unless `cookie` has already expired.
    ///
    /// # Panics
    ///
    /// If it would wait and the calling thread is online in this domain, or if `cookie` came
    /// from another domain.
    #[track_caller]
    pub fn cond_synchronize(&self, cookie: &GpCookie) {
        if self.poll(cookie) {
            return;
        }
        self.assert_offline("cond_synchronize()");
        self.rcu.cond_synchronize(cookie);
    }

    /// Run an expedited grace period unless `cookie` has already expired.
    ///
    /// # Panics
    ///
    /// As [`cond_synchronize`](Qsbr::cond_synchronize).
    #[track_caller]
    pub fn cond_synchronize_expedited(&self, cookie: &GpCookie) {
        if self.poll(cookie) {
            return;
        }
        self.assert_offline("cond_synchronize_expedited()");
        self.rcu.cond_synchronize_expedited(cookie);
    }

    /// Run `f` on a callback worker after a grace period. Never waits for a grace period:
    /// fine from online threads (in a flood, a thread gives way to the workers: see
    /// [`Rcu::call`]).
    pub fn call<F: FnOnce() + Send + 'static>(&self, f: F) {
        self.rcu.call(f);
    }

    /// Drop `value` after a grace period. Never waits for a grace period.
    pub fn retire<T: Send + 'static>(&self, value: Box<T>) {
        self.rcu.retire(value);
    }

    /// Drop the box behind `ptr` after a grace period.
    ///
    /// # Safety
    ///
    /// As [`Rcu::retire_raw`]: `ptr` came from `Box::into_raw`, is retired once, and is already
    /// unreachable for threads that pass a quiescent state after this call.
    pub unsafe fn retire_raw<T: Send + 'static>(&self, ptr: *mut T) {
        // SAFETY: forwarded to the caller, with the same contract as `Rcu::retire_raw`.
        unsafe { self.rcu.retire_raw(ptr) };
    }

    /// Call `run(data)` on a callback worker after a grace period, accounting `bytes` (clamped
    /// to 1 TiB): the type-erased variant of [`call`](Qsbr::call), which allocates nothing
    /// (an intrusive callback head can carry a foreign function pointer). Never waits for a grace
    /// period (a flood gives way as [`call`](Qsbr::call)'s does).
    ///
    /// # Safety
    ///
    /// As [`Rcu::call_raw`]: calling `run(data)` exactly once, from another thread, after a
    /// grace period, must be sound.
    pub unsafe fn call_raw(&self, run: unsafe fn(*mut ()), data: *mut (), bytes: usize) {
        // SAFETY: forwarded to the caller, with the same contract as `Rcu::call_raw`.
        unsafe { self.rcu.call_raw(run, data, bytes) };
    }

    /// Wait until every callback queued before this call has run.
    ///
    /// # Panics
    ///
    /// If the calling thread is online in this domain, or from one of its callbacks.
    #[track_caller]
    pub fn barrier(&self) {
        self.assert_offline("barrier()");
        self.rcu.barrier();
    }

    /// Statistics. `readers` counts registered threads; `stalls` counts stall reports about
    /// online threads that announced no quiescent state in time.
    pub fn stats(&self) -> Stats {
        self.rcu.stats()
    }
}

impl Default for Qsbr {
    fn default() -> Self {
        Qsbr::new()
    }
}

impl std::fmt::Debug for Qsbr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qsbr")
            .field("id", &self.id())
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

/// A thread's registration with a [`Qsbr`] domain, from [`Qsbr::register`].
///
/// Tied to its thread (`!Send`) and to its domain (it borrows it). While the handle is
/// *online*, every grace period of the domain waits until the thread calls
/// [`quiescent_state`](QsbrThread::quiescent_state) or goes [`offline`](QsbrThread::offline).
/// Dropping the handle unregisters the thread.
///
/// ```compile_fail
/// let qsbr: &'static rcukit::Qsbr = Box::leak(Box::new(rcukit::Qsbr::new()));
/// let me = qsbr.register();
/// std::thread::spawn(move || drop(me)); // a registration cannot move to another thread
/// ```
///
/// # Thread exit
///
/// The thread stays registered until the handle drops, and only then, even when the handle
/// lives in a thread-local destroyed after rcukit's own: it protects the thread's reads for as
/// long as it exists. A handle leaked with `mem::forget` stays registered forever (online, it
/// holds every grace period; the stall report says its thread has exited).
/// `Qsbr::is_online` and the "waiting while online" panics keep working in thread-local
/// destructors.
pub struct QsbrThread<'a> {
    qsbr: &'a Qsbr,
    /// The domain's read-side line (its epoch, and its request to give way, see
    /// [`QsbrBuilder::readers_give_way`]), cached so that a quiescent state chases no
    /// pointers.
    read_side: &'a ReadSide,
    /// The grace period this thread last gave way to (its target epoch).
    gave_way_to: u64,
    record: Arc<ReaderRecord>,
    online: bool,
    /// A full fence after each quiescent state ([`QsbrBuilder::fenced_quiescent_states`]).
    fenced: bool,
    _not_send: PhantomData<*const ()>,
}

impl<'a> QsbrThread<'a> {
    /// Announce a quiescent state: the thread holds no reference to data protected by this
    /// domain at this point. One `Acquire` load of the domain's epoch and, only if it moved
    /// since the thread's last announcement, one `Release` store to the thread's record, a
    /// full fence (none with
    /// [`fenced_quiescent_states(false)`](QsbrBuilder::fenced_quiescent_states); the module
    /// docs say why the grace period needs none) and a relaxed load of whether a sleeping
    /// grace period asked to be woken; then a relaxed load of whether one that has long waited
    /// for other threads asks this thread to give way, in which case it yields its CPU once for
    /// that grace period ([`readers_give_way`](QsbrBuilder::readers_give_way)). No
    /// read-modify-write. Does nothing while offline.
    #[inline]
    pub fn quiescent_state(&mut self) {
        if self.online {
            let side = self.read_side;
            let e = reader::qsbr::quiescent_state(&self.record, &side.epoch, self.fenced);
            if give_way::give_way(&side.give_way, e, &mut self.gave_way_to) {
                self.qsbr.inner().core.give_way.count();
            }
        }
    }

    /// Go offline: grace periods stop waiting for this thread until [`online`](Self::online).
    /// Implies a quiescent state. Use it around blocking calls.
    #[inline]
    pub fn offline(&mut self) {
        if self.online {
            self.online = false;
            reader::qsbr::go_offline(&self.record, self.fenced);
        }
    }

    /// Come back online (N1-N3 in the module docs: a load, a store and a full fence).
    #[inline]
    pub fn online(&mut self) {
        if !self.online {
            reader::qsbr::come_online(&self.record, &self.read_side.epoch);
            self.online = true;
        }
    }

    /// Is this thread online?
    pub fn is_online(&self) -> bool {
        self.online
    }

    /// Run `f` offline (for example a blocking call, or a grace-period wait on this domain),
    /// then come back online, also if `f` panics. If the handle was offline already it stays
    /// offline.
    pub fn offline_while<R>(&mut self, f: impl FnOnce() -> R) -> R {
        struct Online<'h, 'a>(&'h mut QsbrThread<'a>, bool);
        impl Drop for Online<'_, '_> {
            fn drop(&mut self) {
                if self.1 {
                    self.0.online();
                }
            }
        }
        let was_online = self.online;
        self.offline();
        let _back = Online(self, was_online);
        f()
    }

    /// The domain this thread is registered with.
    pub fn domain(&self) -> &'a Qsbr {
        self.qsbr
    }
}

impl Drop for QsbrThread<'_> {
    fn drop(&mut self) {
        reader::qsbr::unregister(
            self.qsbr.id(),
            &self.record,
            &self.qsbr.inner().core.registry,
        );
    }
}

impl std::fmt::Debug for QsbrThread<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QsbrThread")
            .field("domain", &self.qsbr.id())
            .field("thread", &self.record.thread.to_string())
            .field("online", &self.online)
            .finish()
    }
}
