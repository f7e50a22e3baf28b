//! Writes that undo themselves: a keyed write whose own user code writes the bucket of the
//! key it works on, on every attempt. The user code is the key's `Eq`, which the walk that
//! finds the key runs for every entry of the bucket whose tag matches, and for a
//! read-modify-write ([`compute`](super::RcuHashMap::compute),
//! [`update`](super::RcuHashMap::update), [`remove_if`](super::RcuHashMap::remove_if)) its
//! closure.
//!
//! A write runs that user code with no lock held and applies its decision only if the key's
//! bucket did not change meanwhile (claim 4 of the [map's essay](super)); if it did, it tries
//! again with the newest entry. Writers on other threads only delay it: each retry follows a
//! write that was applied. But user code that itself writes that bucket (an `Eq` that counts
//! comparisons in a key there, a closure that inserts a key that lands there or removes one,
//! a value whose `Drop` does) changes it on every attempt, so no attempt's decision can ever
//! be applied, and the call would run for ever, growing the values of its discarded attempts
//! and the entries its user code retires under the caller's guard.
//!
//! To tell the two apart, an attempt *watches* its bucket while its user code runs: a record
//! on the attempt's stack frame, pushed on a chain of this thread's watches (nested writes,
//! made by user code, push theirs above it). Every change of a bucket on this thread (under
//! its lock, or an empty bucket marked moved) marks the records on the chain that watch that
//! bucket. An attempt that then fails to apply its decision, with its record marked, was
//! undone by its own thread; a change made by another thread never marks it. After [`LIMIT`]
//! such attempts in a row the call panics with the cause, instead of looping. User code that
//! writes the bucket only on its first attempts (an insert-if-absent of a neighbouring key)
//! settles long before that.
//!
//! An attempt watches the key's bucket in the table it starts from, and then the bucket its
//! walk ended in ([`Watch::follow`]): they differ while a resize moves the key's bucket, and a
//! change the walk made to the newer one is then missed, so that attempt resets the count.
//! That delays the panic by at most the attempts of one resize: every write helps the resize
//! on, so it finishes after a bounded number of them, and the key's bucket then stays put.
//! The walk of a call's first attempt is not watched (the closure is): nearly every write
//! succeeds at once, and pays nothing for the watch; a walk's `Eq` that undoes every attempt
//! is then counted from the second one.
//!
//! Cost: a bucket change reads one thread-local pointer, null unless user code of a
//! read-modify-write, or the walk of a write's retry, is running on the thread. Under loom, whose threads share the process's
//! thread-locals, nothing is watched.

use std::cell::Cell;
use std::ptr;

/// Attempts in a row undone by their own thread after which a read-modify-write panics.
pub(crate) const LIMIT: u32 = 64;

/// One attempt's record of the bucket it watches.
pub(crate) struct Watch {
    /// The bucket (its first line's address).
    bucket: Cell<*const ()>,
    /// Set by a change of `bucket` on this thread while the record is on the chain.
    changed: Cell<bool>,
    /// The record below on the chain (null at the bottom).
    below: Cell<*const Watch>,
}

thread_local! {
    /// The top of this thread's chain of watches (null: no user code of a read-modify-write
    /// is running).
    static TOP: Cell<*const Watch> = const { Cell::new(ptr::null()) };
}

impl Watch {
    /// A record for `bucket`, not yet on the chain.
    #[inline]
    pub(crate) fn new(bucket: *const ()) -> Watch {
        Watch {
            bucket: Cell::new(bucket),
            changed: Cell::new(false),
            below: Cell::new(ptr::null()),
        }
    }

    /// Run `user` (the attempt's user code) with this record on the chain. The record is taken
    /// off again when `user` returns or unwinds.
    #[inline]
    pub(crate) fn run<R>(&self, user: impl FnOnce() -> R) -> R {
        let _on_chain = self.push();
        user()
    }

    /// Put this record on the chain until the returned value drops (also on unwind). The
    /// value must be dropped, never forgotten: `note_change` reads the records on the chain.
    #[inline]
    pub(crate) fn push(&self) -> OnChain<'_> {
        if cfg!(rcukit_loom) {
            return OnChain(None);
        }
        let pushed = TOP.try_with(|top| {
            self.below.set(top.get());
            top.set(self);
        });
        OnChain(pushed.is_ok().then_some(self))
    }

    /// Watch `bucket` from now on (the bucket the attempt's walk ended in); a mark already
    /// made stays.
    #[inline]
    pub(crate) fn follow(&self, bucket: *const ()) {
        self.bucket.set(bucket);
    }

    /// Whether this thread changed the bucket while the record was on the chain.
    pub(crate) fn changed(&self) -> bool {
        self.changed.get()
    }
}

/// A record on the chain ([`Watch::push`]); taken off when dropped.
pub(crate) struct OnChain<'w>(Option<&'w Watch>);

impl Drop for OnChain<'_> {
    #[inline]
    fn drop(&mut self) {
        if let Some(watch) = self.0 {
            let _ = TOP.try_with(|top| top.set(watch.below.get()));
        }
    }
}

/// Note that this thread changes `bucket`: every watch of it on the chain is marked.
#[inline]
pub(crate) fn note_change(bucket: *const ()) {
    let _ = TOP.try_with(|top| {
        let mut at = top.get();
        while !at.is_null() {
            // SAFETY: a record on the chain is borrowed by an `OnChain` of this thread that
            // has not dropped yet (`push`'s contract: it is never forgotten), which takes the
            // record off before the record's frame returns or unwinds.
            let watch = unsafe { &*at };
            if watch.bucket.get() == bucket {
                watch.changed.set(true);
            }
            at = watch.below.get();
        }
    });
}

/// The attempts of one write call that its own thread undid, in a row.
pub(crate) struct Undone {
    in_a_row: u32,
    /// Whether an attempt of the call failed already.
    retrying: bool,
}

impl Undone {
    #[inline]
    pub(crate) fn new() -> Undone {
        Undone {
            in_a_row: 0,
            retrying: false,
        }
    }

    /// Whether an attempt of the call failed already (the walks of the attempts after it are
    /// watched: see [`watched_locate`](super::write::watched_locate)).
    #[inline]
    pub(crate) fn retrying(&self) -> bool {
        self.retrying
    }

    /// An attempt of `what` (the method's name) could not apply its decision; `watch` was its
    /// record. Panics once [`LIMIT`] attempts in a row were undone by this thread.
    #[track_caller]
    pub(crate) fn failed(&mut self, watch: &Watch, what: &str) {
        self.retrying = true;
        if !watch.changed() {
            self.in_a_row = 0;
            return;
        }
        self.in_a_row += 1;
        if self.in_a_row >= LIMIT {
            panic!(
                "rcukit: RcuHashMap::{what}: its user code (the key's Eq, or the closure) changed \
                 the bucket of the key it works on in each of its last {LIMIT} attempts (it \
                 writes the map itself, or drops a value whose Drop does), so no attempt's \
                 decision can be applied: it would run for ever"
            );
        }
    }
}
