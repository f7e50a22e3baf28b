#![doc = include_str!("futures.md")]

use super::Inner;
use crate::callbacks::callback::BarrierCount;
use crate::sync::fork;
use crate::{GpCookie, Rcu};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A grace period to `.await`: from [`Rcu::synchronize_async`],
/// [`Rcu::synchronize_expedited_async`] or [`Rcu::wait_for`]. Completes once a grace period
/// that covers its cookie has ended: the end of every grace period of the domain wakes it.
///
/// # Panics
///
/// When polled inside a read-side critical section ([`Guard`](crate::Guard)) of the same
/// domain on the polling thread, or on one of the domain's grace-period threads, which would
/// wait for itself (as [`Rcu::synchronize`] panics); at every poll.
#[must_use = "futures do nothing unless awaited"]
#[derive(Debug)]
pub struct GpFuture<'a> {
    rcu: &'a Rcu,
    cookie: GpCookie,
    /// Does an expedited grace period end the wait (or only a normal one)?
    either: bool,
    key: Option<u64>,
}

impl<'a> GpFuture<'a> {
    fn new(rcu: &'a Rcu, cookie: GpCookie, either: bool) -> GpFuture<'a> {
        GpFuture {
            rcu,
            cookie,
            either,
            key: None,
        }
    }

    /// The cookie this future waits for.
    pub fn cookie(&self) -> GpCookie {
        self.cookie
    }

    fn is_done(inner: &Inner, cookie: &GpCookie, either: bool) -> bool {
        inner.poll(cookie, either)
    }
}

impl Future for GpFuture<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        // At every poll: a future first polled outside a guard may be polled inside one later.
        this.rcu.assert_not_reading("awaiting a grace period");
        let inner = this.rcu.inner();
        // In a forked child, the threads that would end the grace period are the parent's:
        // the repair starts the child's (see "After `fork()`").
        inner.check_fork();
        let (cookie, either) = (this.cookie, this.either);
        if Self::is_done(inner, &cookie, either) {
            inner.event.wakers.unregister(&mut this.key);
            return Poll::Ready(());
        }
        let done = || Self::is_done(inner, &cookie, either);
        if inner.event.wakers.register(&mut this.key, cx.waker(), done) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for GpFuture<'_> {
    fn drop(&mut self) {
        self.rcu.inner().event.wakers.unregister(&mut self.key);
    }
}

/// A callback barrier to `.await`, from [`Rcu::barrier_async`]: completes once every callback
/// queued before the call has run.
///
/// # Panics
///
/// When polled on one of the domain's callback workers (inside a callback), which would wait
/// for itself, or inside a read-side critical section of the domain; at every poll.
#[must_use = "futures do nothing unless awaited"]
pub struct BarrierFuture<'a> {
    rcu: &'a Rcu,
    count: Arc<BarrierCount>,
    /// The fork generation the barrier was started in (see "After `fork()`").
    generation: u64,
}

impl Future for BarrierFuture<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        // At every poll, as for `GpFuture`.
        this.rcu.assert_not_reading("awaiting barrier_async()");
        assert!(
            !this.rcu.inner().callbacks.in_callback_context(),
            "rcukit: barrier_async() awaited on a callback worker of the same domain; the \
             barrier would wait for the very thread that runs it"
        );
        // Started before a fork, in this child: the callbacks it waited for are abandoned
        // here, and so are its markers (see "After `fork()`").
        if this.generation != fork::generation() || this.count.poll_done(cx.waker()) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for BarrierFuture<'_> {
    fn drop(&mut self) {
        // In a child forked since, the count's lock may have been copied held by a worker of
        // the parent (no fork handler takes it), and the count is abandoned anyway.
        if self.generation == fork::generation() {
            self.count.forget_waker();
        }
    }
}

impl std::fmt::Debug for BarrierFuture<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BarrierFuture")
            .field("done", &self.count.is_done())
            .finish_non_exhaustive()
    }
}

impl Rcu {
    /// [`synchronize`](Rcu::synchronize) for async code: a future that completes once every
    /// read-side critical section (guards and owned guards) running when this was called has
    /// ended. It requests a normal grace period now and is woken when a normal one (or, with
    /// [`expedited_callbacks`](crate::RcuBuilder::expedited_callbacks), an expedited one) that
    /// covers the call has ended. Blocks nobody; dropping the future cancels the wait.
    pub fn synchronize_async(&self) -> GpFuture<'_> {
        let inner = self.inner();
        inner.check_fork();
        let cookie = inner.get_state();
        inner.normal.request(cookie.normal);
        GpFuture::new(self, cookie, inner.expedited_callbacks)
    }

    /// [`synchronize_expedited`](Rcu::synchronize_expedited) for async code: the domain's
    /// helper thread runs (or piggybacks on) an expedited grace period, and the future is
    /// woken when it ends (or when any grace period covering the call does).
    pub fn synchronize_expedited_async(&self) -> GpFuture<'_> {
        let inner = self.inner();
        inner.check_fork();
        let cookie = inner.get_state();
        inner.exp.request(cookie.expedited);
        GpFuture::new(self, cookie, true)
    }

    /// Wait for `cookie` in async code, like [`cond_synchronize`](Rcu::cond_synchronize):
    /// ready at once if [`poll`](Rcu::poll) says the cookie has expired, else a normal grace
    /// period is requested and the future is woken when one covering the cookie ends.
    ///
    /// # Panics
    ///
    /// If `cookie` came from another domain.
    pub fn wait_for(&self, cookie: &GpCookie) -> GpFuture<'_> {
        let inner = self.inner();
        if !self.poll(cookie) {
            inner.check_fork();
            inner.normal.request(cookie.normal);
        }
        GpFuture::new(self, *cookie, true)
    }

    /// [`barrier`](Rcu::barrier) for async code: the barrier's markers are queued now, and the
    /// future completes once every callback queued before this call has run.
    pub fn barrier_async(&self) -> BarrierFuture<'_> {
        let inner = self.inner();
        inner.check_fork();
        BarrierFuture {
            rcu: self,
            count: inner.callbacks.start_barrier(),
            generation: fork::generation(),
        }
    }
}
