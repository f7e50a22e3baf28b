//! Owned snapshots of an [`RcuCell`]'s value: [`Snapshot`] and [`OwnedSnapshot`] (see "Keeping
//! a value without a guard" in the cell's docs), and why they are sound.

use super::RcuCell;
use crate::domain_ref::DomainRef;
use crate::{OwnedGuard, Rcu};
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

/// The pointer of a value loaded by a snapshot: sharing it shares `&T` (hence `T: Sync` for
/// both `Send` and `Sync`); it never owns or drops the value.
pub(super) struct ValuePtr<T>(pub(super) NonNull<T>);

// SAFETY: a `ValuePtr` is only ever dereferenced as `&T` (by the snapshot that holds it, for as
// long as that snapshot's guard keeps the value alive); handing `&T` to another thread needs
// exactly `T: Sync`, as for `&T` itself. It never drops or moves the value, so `T: Send` is
// not needed.
unsafe impl<T: Sync> Send for ValuePtr<T> {}
// SAFETY: as above: `&ValuePtr` gives nothing but `&T`.
unsafe impl<T: Sync> Sync for ValuePtr<T> {}

/// An owned snapshot of an [`RcuCell`]'s value, made by [`RcuCell::snapshot`]: dereferences
/// to the value, needs no guard beside it, and may cross `.await`, move to another thread
/// and end there. `Send` and `Sync` when `T: Sync`.
///
/// It borrows the cell (whose drop frees the current value at once), so it cannot outlive it:
///
/// ```compile_fail
/// let snapshot = {
///     let cell = rcukit::RcuCell::new(1);
///     cell.snapshot()
/// };
/// println!("{}", *snapshot);
/// ```
///
/// and a value that is not `Sync` cannot be shared through it:
///
/// ```compile_fail
/// let cell = rcukit::RcuCell::new(std::cell::Cell::new(1));
/// let snapshot = cell.snapshot();
/// std::thread::scope(|s| {
///     s.spawn(move || snapshot.get());
/// });
/// ```
///
/// # Why it is sound
///
/// A snapshot is an [`OwnedGuard`] of the cell's domain and the value's pointer, loaded with
/// `Acquire` *after* the guard was taken. The value can only be reclaimed after a grace period
/// of that domain that starts after the value was swapped out of the cell, and such a grace
/// period waits for the guard, which the snapshot drops only when it is dropped itself; the
/// references [`Deref`](std::ops::Deref) hands out borrow the snapshot, so none outlives the
/// guard. The one other way a value is freed, dropping the cell (or `into_inner`, `get_mut`:
/// no grace period, since readers borrow the cell), is excluded by the snapshot's borrow of
/// the cell for `'a`. The snapshot never drops the value, so sharing or sending it only
/// shares `&T`, hence the `T: Sync` bound.
///
/// While it lives it holds back every grace period of the cell's domain: see
/// [`RcuCell::snapshot`] for what that costs and what not to do while holding one.
#[must_use = "a snapshot holds back grace periods until it is dropped"]
pub struct Snapshot<'a, T> {
    /// Loaded under `guard`; dereferenced only while `guard` is alive.
    pub(super) value: ValuePtr<T>,
    /// The owned read-side critical section that keeps `value` alive.
    pub(super) guard: OwnedGuard,
    /// The borrow of the cell (whose drop would free the current value without a grace
    /// period), and covariance in `T` (the snapshot only ever hands out `&T`).
    pub(super) _cell: PhantomData<&'a T>,
}

impl<T> Snapshot<'_, T> {
    /// The owned read-side critical section the snapshot holds: other containers of the same
    /// domain can be read under it, for as long as the snapshot is borrowed.
    pub fn guard(&self) -> &OwnedGuard {
        &self.guard
    }
}

impl<T> std::ops::Deref for Snapshot<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY ("Why it is sound"): `value` was loaded under `self.guard`, an owned section
        // of the cell's domain living as long as `self`, and the cell is borrowed as long.
        unsafe { self.value.0.as_ref() }
    }
}

impl<T: fmt::Debug> fmt::Debug for Snapshot<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: fmt::Display> fmt::Display for Snapshot<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}

/// An owned snapshot of an [`RcuCell`]'s value that holds the cell by an `Arc`, made by
/// [`RcuCell::snapshot_owned`]: like [`Snapshot`], and `'static` (when `T` and `D` are), so it
/// may go into `std::thread::spawn` or a spawned task. `Send` and `Sync` when `T` is
/// `Send + Sync` and `D` is `Send + Sync` (the `Arc`'d cell is shared).
///
/// Sound for the reasons [`Snapshot`] is, with the `Arc` in place of the borrow: the cell, and
/// with it the domain handle `D`, lives at least until the snapshot's guard has been dropped
/// (fields drop in order: the pointer, which owns nothing, then the guard, then the `Arc`).
#[must_use = "a snapshot holds back grace periods until it is dropped"]
pub struct OwnedSnapshot<T, D: DomainRef = &'static Rcu> {
    /// Loaded under `guard`; dereferenced only while `guard` is alive.
    pub(super) value: ValuePtr<T>,
    /// The owned read-side critical section that keeps `value` alive.
    pub(super) guard: OwnedGuard,
    /// Keeps the cell (whose drop would free the current value at once) and its domain alive.
    pub(super) cell: Arc<RcuCell<T, D>>,
}

impl<T, D: DomainRef> OwnedSnapshot<T, D> {
    /// The owned read-side critical section the snapshot holds (see [`Snapshot::guard`]).
    pub fn guard(&self) -> &OwnedGuard {
        &self.guard
    }

    /// The cell the snapshot was taken from (for a fresh snapshot or a write).
    pub fn cell(&self) -> &Arc<RcuCell<T, D>> {
        &self.cell
    }
}

impl<T, D: DomainRef> std::ops::Deref for OwnedSnapshot<T, D> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: as for `Snapshot`: loaded under `self.guard`, which lives as long as `self`,
        // and the cell is kept alive by `self.cell`.
        unsafe { self.value.0.as_ref() }
    }
}

impl<T: fmt::Debug, D: DomainRef> fmt::Debug for OwnedSnapshot<T, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: fmt::Display, D: DomainRef> fmt::Display for OwnedSnapshot<T, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}
