#![doc = include_str!("README.md")]

mod snapshot;

use snapshot::ValuePtr;
pub use snapshot::{OwnedSnapshot, Snapshot};

use crate::domain_ref::{self, DomainRef};
use crate::sync::fork_lock::ForkLock;
use crate::{GpCookie, Guard, OwnedGuard, Rcu, ReadSection};
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::AtomicPtr;
use std::sync::atomic::Ordering::{AcqRel, Acquire};
use std::sync::Arc;

/// How a writer reclaims the value it replaced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Reclaim {
    /// Retire it ([`Rcu::retire`]): the writer never blocks, and the value is dropped after a grace
    /// period of either kind, on a callback worker or, with the domain's
    /// [`retire_on_producers`](crate::RcuBuilder::retire_on_producers) on (the default), by this
    /// thread in a later retire of the same domain. The write itself may drop older values retired
    /// earlier (see [where user code runs](crate::docs::internal::callbacks::invoke)). The default.
    #[default]
    Deferred,
    /// Wait for a normal grace period ([`Rcu::synchronize`], milliseconds, batched with other
    /// requests and free for readers), then drop the value in the writer.
    Synchronize,
    /// Wait for an expedited grace period ([`Rcu::synchronize_expedited`], microseconds, at the
    /// price of interrupting other CPUs), then drop the value in the writer.
    Expedited,
}

/// One RCU-protected value: lock-free reads under a [`Guard`], writes that publish a new
/// version and reclaim the old one after a grace period.
///
/// `D` is the [domain handle](DomainRef): `&'static Rcu` (the global domain) by default. See the
/// [module docs](crate::docs::internal::cell) for the algorithm, the `Send`/`Sync` rules and why
/// the borrow checker keeps readers safe.
///
/// ```
/// use rcukit::{Rcu, RcuCell, Reclaim};
/// use std::sync::Arc;
///
/// // A cell in its own domain, shared with reader threads.
/// let rcu = Arc::new(Rcu::new());
/// let limits = Arc::new(RcuCell::with_domain(vec![10, 20], rcu.clone()));
/// let reader = {
///     let limits = limits.clone();
///     std::thread::spawn(move || {
///         let guard = limits.domain().read();
///         limits.load(&guard).iter().sum::<i32>()
///     })
/// };
/// limits.update_with(Reclaim::Expedited, |old| old.iter().map(|x| x * 2).collect());
/// let sum = reader.join().unwrap();
/// assert!(sum == 30 || sum == 60);
/// ```
///
/// The borrow checker refuses a reference that outlives its guard:
///
/// ```compile_fail
/// let cell = rcukit::RcuCell::new(1);
/// let value = {
///     let guard = cell.domain().read();
///     cell.load(&guard)
/// };
/// println!("{value}");
/// ```
///
/// and a cell of a non-`Send` value cannot be shared with other threads:
///
/// ```compile_fail
/// use std::rc::Rc;
/// let cell = rcukit::RcuCell::new(Rc::new(1));
/// std::thread::scope(|s| {
///     s.spawn(|| **cell.read() + 1);
/// });
/// ```
pub struct RcuCell<T, D: DomainRef = &'static Rcu> {
    /// The current value; never null; owned by the cell.
    ptr: AtomicPtr<T>,
    /// Serializes writers (see the module docs).
    writer: ForkLock<()>,
    domain: D,
    /// What dropping a value frees, for the domain's accounting (see
    /// [`retired_size`](RcuCell::retired_size)).
    size_of: fn(&T) -> usize,
    /// The cell owns a `T` (drop check) and hands out `&T` across threads (see the `Send` and
    /// `Sync` impls below for the exact rules).
    _owns: PhantomData<T>,
}

// SAFETY: readers on any thread get `&T` (needs `T: Sync`); values stored on one thread are
// dropped on another (a writer, a callback worker or a later retiring thread; needs
// `T: Send`); the handle is shared
// (needs `D: Sync`). The raw pointer is owned by the cell and only reached through these paths.
unsafe impl<T: Send + Sync, D: DomainRef + Sync> Sync for RcuCell<T, D> {}

// SAFETY: moving the cell moves ownership of its value (needs `T: Send`) and of its handle
// (needs `D: Send`); no thread-affine state is kept anywhere else.
unsafe impl<T: Send, D: DomainRef + Send> Send for RcuCell<T, D> {}

// Unwind-safe when the value is (a panic in the user's code under a write leaves the cell as
// it was). Only the writer lock's cell (for a forked child's repair) kept the auto trait away.
impl<T: std::panic::RefUnwindSafe, D: DomainRef + std::panic::RefUnwindSafe>
    std::panic::RefUnwindSafe for RcuCell<T, D>
{
}

impl<T> RcuCell<T> {
    /// A cell in the global domain ([`Rcu::global`]).
    pub fn new(value: T) -> Self {
        RcuCell::with_domain(value, Rcu::global())
    }
}

impl<T, D: DomainRef> RcuCell<T, D> {
    /// A cell protected by the domain behind `domain`: `&rcu` (the cell borrows the domain) or
    /// an `Arc<Rcu>` (the cell co-owns it).
    pub fn with_domain(value: T, domain: D) -> Self {
        RcuCell {
            ptr: AtomicPtr::new(Box::into_raw(Box::new(value))),
            writer: ForkLock::new(()),
            domain,
            size_of: |_| std::mem::size_of::<T>(),
            _owns: PhantomData,
        }
    }

    /// Tell the domain how many bytes dropping a value of this cell frees (default
    /// `size_of::<T>()`), when values own memory of their own: retired values are then counted
    /// at their real size by the backlog thresholds and [`Stats::pending_bytes`](crate::Stats),
    /// so that a cell whose values are large tables is reclaimed after a few replacements, and
    /// new copies reuse the memory of old ones.
    ///
    /// ```
    /// use rcukit::RcuCell;
    /// let rules = RcuCell::new(vec![0u64; 10_000])
    ///     .retired_size(|v| std::mem::size_of_val(v.as_slice()));
    /// rules.update(|old| old.iter().map(|r| r + 1).collect());
    /// ```
    pub fn retired_size(mut self, size_of: fn(&T) -> usize) -> Self {
        self.size_of = size_of;
        self
    }

    /// The domain whose guards protect this cell's readers.
    #[inline]
    pub fn domain(&self) -> &Rcu {
        self.domain.rcu()
    }

    /// The current value, valid for as long as both `guard` and the cell are borrowed.
    ///
    /// Lock-free and wait-free: a pointer comparison, one `Acquire` load (a plain load on x86
    /// and ARMv8's `ldar`), no store.
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another domain than the cell's: it would protect nothing.
    #[inline]
    #[track_caller]
    pub fn load<'g, G: ReadSection>(&'g self, guard: &'g G) -> &'g T {
        domain_ref::check_guard("RcuCell", guard, self.domain.rcu());
        let ptr = self.ptr.load(Acquire);
        // The pointer is never null and was published with a Release swap after the value was
        // written (this Acquire load sees the initialised value). It is reclaimed only after a
        // grace period of this domain that starts after it was swapped out; the guard (of this
        // domain, checked above; a `Guard` is held by this thread, an `OwnedGuard` is counted
        // wherever it is) holds any
        // such grace period back for 'g. SAFETY: so the value outlives 'g, and the cell
        // cannot be dropped while borrowed for 'g.
        unsafe { &*ptr }
    }

    /// Enter a read-side critical section of the cell's domain and load the current value: the
    /// short form of `let g = cell.domain().read(); cell.load(&g)`, with the guard inside the
    /// returned [`RcuRef`].
    #[inline]
    pub fn read(&self) -> RcuRef<'_, T> {
        let guard = self.domain.rcu().read();
        let ptr = self.ptr.load(Acquire);
        // SAFETY: as in `load`: the guard is of this cell's domain by construction and lives
        // inside the `RcuRef`, which borrows the cell and hands out the value only for as long
        // as it lives itself.
        let value = unsafe { &*ptr };
        RcuRef {
            value,
            _guard: guard,
        }
    }

    /// An owned snapshot of the current value: it dereferences to the value and keeps it
    /// alive without a guard in sight, so it can be stored in a struct beside the cell's
    /// reference, held across `.await`, and sent to or shared with other threads (when
    /// `T: Sync`). It borrows the cell; [`snapshot_owned`](RcuCell::snapshot_owned) makes one
    /// that owns a handle on an `Arc`'d cell instead and is `'static`.
    ///
    /// A snapshot is an owned read-side critical section ([`OwnedGuard`]) with the value's
    /// pointer loaded under it: while it lives, **every grace period of the cell's domain
    /// waits for it**, so values retired in the meantime (by this cell and by every other user
    /// of the domain) are not dropped until it is. Keep snapshots for the length of a request,
    /// not for the life of a connection; for a value to keep indefinitely, store an `Arc` in
    /// the cell and take it with [`load_arc`](RcuCell::load_arc), which holds nothing back.
    /// Like an `OwnedGuard`, a snapshot must not be held by a thread or task that waits for a
    /// grace period of the same domain (a [`Reclaim::Synchronize`] write, [`replace`](RcuCell::replace),
    /// [`Unpublished::wait`], `barrier()`): it would wait for itself, and the stall report
    /// names it. Nor may a snapshot be left inside a value that is retired to the same domain
    /// (a cell's old value, a map's removed entry): that value is dropped after a grace
    /// period, which waits for the snapshot inside it, so the domain never reclaims anything
    /// again (see [`OwnedGuard`]).
    ///
    /// Costs an owned guard ([`Rcu::read_owned`]: about twice a [`Rcu::read`] in the `owned`
    /// bench, see [`docs::choosing`](crate::docs::choosing)) and the cell's `Acquire` load; no
    /// reference count, no shared cache line written.
    ///
    /// ```
    /// use rcukit::Snapshot;
    /// use rcukit::RcuCell;
    ///
    /// struct Request<'c> {
    ///     config: Snapshot<'c, String>, // no guard to keep beside it
    /// }
    ///
    /// let config = RcuCell::new(String::from("v1"));
    /// let request = Request { config: config.snapshot() };
    /// config.store(String::from("v2")); // "v1" is retired, not freed
    /// std::thread::scope(|s| {
    ///     // A snapshot may move to another thread and end there.
    ///     s.spawn(move || assert_eq!(*request.config, "v1"));
    /// });
    /// assert_eq!(*config.snapshot(), "v2");
    /// ```
    #[inline]
    pub fn snapshot(&self) -> Snapshot<'_, T> {
        let guard = self.domain.rcu().read_owned();
        Snapshot {
            value: self.load_under(&guard),
            guard,
            _cell: PhantomData,
        }
    }

    /// An owned snapshot of the current value that holds the cell by an `Arc`, so that it is
    /// `'static` (and `Send + Sync` when `T` and the domain handle are): it may go into
    /// `std::thread::spawn` or `tokio::spawn`, or into a long-lived struct. The cell lives at
    /// least as long as the snapshot. Like tokio's `RwLock::read_owned`, it takes the `Arc` by
    /// value: call it on a clone (`cell.clone().snapshot_owned()`).
    ///
    /// Holds back grace periods exactly like [`snapshot`](RcuCell::snapshot), which says what
    /// that costs.
    ///
    /// ```
    /// use rcukit::RcuCell;
    /// use std::sync::Arc;
    ///
    /// let routes = Arc::new(RcuCell::new(vec!["/a", "/b"]));
    /// let snapshot = routes.clone().snapshot_owned();
    /// routes.store(vec!["/c"]);
    /// let n = std::thread::spawn(move || snapshot.len()).join().unwrap();
    /// assert_eq!(n, 2);
    /// ```
    #[inline]
    pub fn snapshot_owned(self: Arc<Self>) -> OwnedSnapshot<T, D> {
        let guard = self.domain.rcu().read_owned();
        OwnedSnapshot {
            value: self.load_under(&guard),
            guard,
            cell: self,
        }
    }

    /// The current value's pointer, loaded under `guard` (an owned section of this cell's
    /// domain, taken by the caller before this load).
    #[inline]
    fn load_under(&self, guard: &OwnedGuard) -> ValuePtr<T> {
        debug_assert!(guard.is_of(self.domain.rcu()));
        // The Acquire load comes after the guard's light barrier (O3 of `owned`), as `read`'s
        // load comes after the guard's, so a grace period that must wait for this section sees
        // it.
        let ptr = self.ptr.load(Acquire);
        // SAFETY: the cell's pointer is never null (only `into_inner`, which consumes the
        // cell, leaves null behind).
        ValuePtr(unsafe { NonNull::new_unchecked(ptr) })
    }

    /// Exclusive access to the value: no reader can hold it, since readers borrow the cell.
    pub fn get_mut(&mut self) -> &mut T {
        // SAFETY: `&mut self` excludes every reference `load`/`read` handed out (they borrow
        // the cell), and the pointer is a live, owned box.
        unsafe { &mut **self.ptr.get_mut() }
    }

    /// The value, without a grace period: no reader can hold it, since readers borrow the cell.
    pub fn into_inner(mut self) -> T {
        // Leave a null pointer behind: `Drop` skips it.
        let ptr = std::mem::replace(self.ptr.get_mut(), std::ptr::null_mut());
        // SAFETY: we own the cell, so nothing else references the value, and the pointer is a
        // live, owned box that the cell's `Drop` will no longer see.
        unsafe { *Box::from_raw(ptr) }
    }

    /// Publish `new` (a pointer from `Box::into_raw`) under the writer lock; return the old
    /// pointer, now unreachable for readers that start later.
    fn publish(&self, new: *mut T) -> *mut T {
        let _writer = self.writer.lock(|_| ());
        self.ptr.swap(new, AcqRel)
    }

    /// Wait for a grace period (unless deferred) and drop `old`.
    ///
    /// # Safety
    ///
    /// `old` came from `publish` (an owned box now unreachable for new readers) and is
    /// reclaimed only here.
    unsafe fn reclaim(&self, old: *mut T, how: Reclaim)
    where
        T: Send + 'static,
    {
        let rcu = self.domain.rcu();
        match how {
            // SAFETY: forwarded: `old` is an owned box, unlinked before this call, retired once
            // (and alive until then, so it may be measured).
            Reclaim::Deferred => unsafe { rcu.retire_raw_sized(old, (self.size_of)(&*old)) },
            Reclaim::Synchronize => {
                rcu.synchronize();
                // SAFETY: a grace period has passed since `old` was unlinked: no reader holds it.
                drop(unsafe { Box::from_raw(old) });
            }
            Reclaim::Expedited => {
                rcu.synchronize_expedited();
                // SAFETY: as above, with an expedited grace period.
                drop(unsafe { Box::from_raw(old) });
            }
        }
    }

    /// Publish `value`; the old value is retired and dropped after a grace period
    /// ([`Reclaim::Deferred`], which says on which thread). Never waits for a grace period.
    /// May drop values retired earlier in this domain, never under the cell's writer lock and
    /// never inside a read-side critical section of the domain.
    pub fn store(&self, value: T)
    where
        T: Send + 'static,
    {
        self.store_with(value, Reclaim::Deferred);
    }

    /// Publish `value` and reclaim the old value as `how` says.
    ///
    /// # Panics
    ///
    /// With [`Reclaim::Synchronize`] or [`Reclaim::Expedited`], inside a read-side critical
    /// section of the cell's domain (the wait would never end).
    #[track_caller]
    pub fn store_with(&self, value: T, how: Reclaim)
    where
        T: Send + 'static,
    {
        let value = self.writer.refuse_reentry(value);
        self.check_can_wait(how);
        let old = self.publish(Box::into_raw(Box::new(value)));
        // SAFETY: `old` was just unlinked by `publish` and is reclaimed only here.
        unsafe { self.reclaim(old, how) };
    }

    /// Publish `value`, wait for a normal grace period and hand back the old value.
    ///
    /// For an expedited wait, or to do other work while the grace period runs, use
    /// [`swap`](RcuCell::swap).
    ///
    /// # Panics
    ///
    /// Inside a read-side critical section of the cell's domain.
    #[track_caller]
    pub fn replace(&self, value: T) -> T {
        let value = self.writer.refuse_reentry(value);
        let rcu = self.domain.rcu();
        if rcu.is_reading() {
            cannot_wait(rcu, "RcuCell::replace");
        }
        let old = self.publish(Box::into_raw(Box::new(value)));
        rcu.synchronize();
        // SAFETY: a grace period has passed since `old` was unlinked: no reader holds it, and
        // the pointer is an owned box that nothing else will reclaim.
        unsafe { *Box::from_raw(old) }
    }

    /// Publish `value` and return the old value wrapped in an [`Unpublished`], which hands it
    /// back once a grace period has passed ([`wait`](Unpublished::wait),
    /// [`wait_expedited`](Unpublished::wait_expedited), [`try_take`](Unpublished::try_take))
    /// or retires it if dropped. Never waits, and asks the domain for a normal grace period
    /// (as [`Rcu::start_poll`] does), so that polling `try_take` or `is_ready` ends even when
    /// nothing else in the program starts one.
    pub fn swap(&self, value: T) -> Unpublished<'_, T>
    where
        T: Send + 'static,
    {
        let old = self.publish(Box::into_raw(Box::new(self.writer.refuse_reentry(value))));
        let rcu = self.domain.rcu();
        // The cookie is taken after the swap (start_poll's snapshot starts with a full fence),
        // so a grace period that covers it covers every reader that could have loaded `old`.
        let cookie = rcu.start_poll();
        Unpublished {
            // SAFETY: the cell's pointer is never null.
            ptr: unsafe { NonNull::new_unchecked(old) },
            rcu,
            cookie,
        }
    }

    /// Copy-update: under the writer lock, compute a new value from the current one and
    /// publish it; the old value is retired through a callback ([`Reclaim::Deferred`]).
    ///
    /// Updates are atomic with respect to every other write of the cell: no write is lost
    /// between reading `old` and publishing the result. `f` must not write to the same cell:
    /// the writer lock is not reentrant, and such a write panics (reads are fine).
    pub fn update<F>(&self, f: F)
    where
        F: FnOnce(&T) -> T,
        T: Send + 'static,
    {
        self.update_with(Reclaim::Deferred, f);
    }

    /// Copy-update like [`update`](RcuCell::update), reclaiming the old value as `how` says.
    /// The writer lock is released before any grace-period wait.
    ///
    /// If `f` panics, the cell is unchanged and the lock is released.
    ///
    /// # Panics
    ///
    /// With [`Reclaim::Synchronize`] or [`Reclaim::Expedited`], inside a read-side critical
    /// section of the cell's domain.
    #[track_caller]
    pub fn update_with<F>(&self, how: Reclaim, f: F)
    where
        F: FnOnce(&T) -> T,
        T: Send + 'static,
    {
        let f = self.writer.refuse_reentry(f);
        self.check_can_wait(how);
        let old = {
            let _writer = self.writer.lock(|_| ());
            let current = self.ptr.load(Acquire);
            // SAFETY: only writers reclaim values and they all hold the writer lock, so the
            // current value stays alive while we hold it.
            let new = Box::new(f(unsafe { &*current }));
            self.ptr.swap(Box::into_raw(new), AcqRel)
        };
        // SAFETY: `old` was just unlinked under the lock and is reclaimed only here.
        unsafe { self.reclaim(old, how) };
    }

    #[track_caller]
    fn check_can_wait(&self, how: Reclaim) {
        let rcu = self.domain.rcu();
        if how != Reclaim::Deferred && rcu.is_reading() {
            cannot_wait(rcu, "an RcuCell write with Reclaim::Synchronize/Expedited");
        }
    }
}

impl<T, D: DomainRef> RcuCell<Arc<T>, D> {
    /// A clone of the current `Arc`, taken under a short read-side critical section: an
    /// owned value that holds back nothing, to keep as long as you like (arc-swap's
    /// `load_full`). The value it points to lives until the last clone is dropped, whatever
    /// the cell does meanwhile; the cell's own box of the `Arc` is still reclaimed after a
    /// grace period.
    ///
    /// Costs a guarded read (see [`read`](RcuCell::read)) and one atomic increment of the
    /// `Arc`'s count, a cache line that every thread calling it writes. For reads that end
    /// before the next grace period matters, [`read`](RcuCell::read) or
    /// [`load`](RcuCell::load) under a guard are cheaper and write nothing shared.
    ///
    /// ```
    /// use rcukit::RcuCell;
    /// use std::sync::Arc;
    ///
    /// let config = RcuCell::new(Arc::new(String::from("v1")));
    /// let kept: Arc<String> = config.load_arc(); // no guard, no snapshot: just an Arc
    /// config.store(Arc::new(String::from("v2")));
    /// config.domain().synchronize(); // grace periods are not held back by `kept`
    /// assert_eq!(*kept, "v1");
    /// assert_eq!(*config.load_arc(), "v2");
    /// ```
    #[inline]
    pub fn load_arc(&self) -> Arc<T> {
        Arc::clone(&*self.read())
    }
}

/// Fail *before* publishing, so that a misuse leaves the cell unchanged.
#[cold]
#[inline(never)]
#[track_caller]
fn cannot_wait(rcu: &Rcu, what: &str) -> ! {
    panic!(
        "rcukit: {what} waits for a grace period, but it was called inside a read-side \
         critical section of the same domain ('{}'); the grace period would wait for this very \
         reader. Drop the Guard first, or use Reclaim::Deferred.",
        rcu.name()
    )
}

impl<T, D: DomainRef> Drop for RcuCell<T, D> {
    fn drop(&mut self) {
        let ptr = *self.ptr.get_mut();
        if !ptr.is_null() {
            // SAFETY: `&mut self`: every reference handed to readers borrowed the cell and is
            // gone (see the module docs); the pointer is an owned box (null only after
            // `into_inner` took it), dropped exactly once here.
            let value = unsafe { Box::from_raw(ptr) };
            // A cell dropped while another panic unwinds (with the frame that panicked) must
            // not let the value's panic out: that would abort the process.
            let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(value)));
            if let Err(payload) = dropped {
                crate::report::resume_unless_unwinding(payload);
            }
        }
    }
}

impl<T: Default> Default for RcuCell<T> {
    /// A global-domain cell holding `T::default()`.
    fn default() -> Self {
        RcuCell::new(T::default())
    }
}

impl<T> From<T> for RcuCell<T> {
    /// A global-domain cell holding `value`.
    fn from(value: T) -> Self {
        RcuCell::new(value)
    }
}

impl<T: fmt::Debug, D: DomainRef> fmt::Debug for RcuCell<T, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RcuCell")
            .field("value", &*self.read())
            .field("domain", &self.domain.rcu().id())
            .finish()
    }
}

/// A value read from an [`RcuCell`] together with the guard that keeps it alive: see
/// [`RcuCell::read`]. Dereferences to the value. The read-side critical section ends when it
/// drops; like [`Guard`], it cannot leave its thread.
///
/// ```compile_fail
/// let cell = rcukit::RcuCell::new(5);
/// let value = cell.read();
/// std::thread::scope(|s| {
///     s.spawn(move || *value); // an RcuRef holds a Guard: it is not Send
/// });
/// ```
#[must_use = "the read-side critical section ends when the RcuRef is dropped"]
pub struct RcuRef<'a, T> {
    value: &'a T,
    _guard: Guard<'a>,
}

impl<T> std::ops::Deref for RcuRef<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        self.value
    }
}

impl<T: fmt::Debug> fmt::Debug for RcuRef<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.value, f)
    }
}

impl<T: fmt::Display> fmt::Display for RcuRef<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.value, f)
    }
}

/// A value that [`RcuCell::swap`] unpublished: readers that started before the swap may still
/// use it, so it is handed back only after a grace period.
///
/// * [`wait`](Unpublished::wait) / [`wait_expedited`](Unpublished::wait_expedited): wait for
///   a normal / expedited grace period (only if the cookie has not expired yet) and return
///   the value;
/// * [`try_take`](Unpublished::try_take): return it if a grace period has already passed;
/// * dropping it retires the value through a callback, like [`RcuCell::store`].
///
/// It gives no access to the value before the grace period: readers on other threads may
/// still share it, and this wrapper may itself move to another thread.
///
/// ```
/// let cell = rcukit::RcuCell::new(vec![1, 2, 3]);
/// let old = cell.swap(vec![4]);
/// // ... other work while the grace period runs ...
/// assert_eq!(old.wait_expedited(), vec![1, 2, 3]);
/// ```
#[must_use = "dropping an Unpublished retires the value; call wait() to get it back"]
pub struct Unpublished<'a, T: Send + 'static> {
    /// An owned box, unlinked from the cell when `cookie` was taken.
    ptr: NonNull<T>,
    rcu: &'a Rcu,
    cookie: GpCookie,
}

// SAFETY: an Unpublished owns a `T` (moving it moves that ownership: `T: Send`) and never
// exposes a reference to it before a grace period, so sharing `&Unpublished` shares nothing of
// the value.
unsafe impl<T: Send + 'static> Send for Unpublished<'_, T> {}
// SAFETY: `&Unpublished` only reads the cookie and the domain (both Sync).
unsafe impl<T: Send + 'static> Sync for Unpublished<'_, T> {}

impl<T: Send + 'static> Unpublished<'_, T> {
    /// The cookie of the swap: the value is reclaimable once it polls complete.
    pub fn cookie(&self) -> GpCookie {
        self.cookie
    }

    /// Has a grace period passed since the swap?
    pub fn is_ready(&self) -> bool {
        self.rcu.poll(&self.cookie)
    }

    fn take(self) -> T {
        let ptr = self.ptr;
        std::mem::forget(self);
        // SAFETY: called only after the cookie (taken after the swap) has expired: no reader
        // holds the value any more, and `self` is forgotten so the box is taken only once.
        unsafe { *Box::from_raw(ptr.as_ptr()) }
    }

    /// Wait for a normal grace period, unless one has already passed, and return the value.
    ///
    /// # Panics
    ///
    /// Inside a read-side critical section of the cell's domain.
    #[track_caller]
    pub fn wait(self) -> T {
        self.rcu.cond_synchronize(&self.cookie);
        self.take()
    }

    /// Run an expedited grace period, unless one has already passed, and return the value.
    ///
    /// # Panics
    ///
    /// Inside a read-side critical section of the cell's domain.
    #[track_caller]
    pub fn wait_expedited(self) -> T {
        self.rcu.cond_synchronize_expedited(&self.cookie);
        self.take()
    }

    /// The value if a grace period has passed since the swap, else `self` back.
    pub fn try_take(self) -> Result<T, Self> {
        if self.is_ready() {
            Ok(self.take())
        } else {
            Err(self)
        }
    }
}

impl<T: Send + 'static> Drop for Unpublished<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the box was unlinked before the cookie was taken, is owned by `self`, and
        // `take` forgets `self`, so this retires it exactly once.
        unsafe { self.rcu.retire_raw(self.ptr.as_ptr()) };
    }
}

impl<T: Send + 'static> fmt::Debug for Unpublished<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unpublished")
            .field("cookie", &self.cookie)
            .field("ready", &self.is_ready())
            .finish()
    }
}
