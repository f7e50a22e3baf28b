//! The words of a container's atomic read-modify-write, shared by the maps: what a `compute`
//! closure asks for ([`Operation`]) and what the write then did ([`Compute`]). Each map says in
//! its own docs when the closure runs and what the step is atomic with: the closure of
//! [`RcuHashMap::compute`](crate::RcuHashMap::compute) may run more than once, with no lock held;
//! that of [`RcuFlatMap::compute`](crate::RcuFlatMap::compute) runs once, under the map's writer
//! lock.

/// What a `compute` closure asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation<V, T> {
    /// Insert this value (replacing the present one, if any).
    Insert(V),
    /// Remove the entry (nothing happens if the key is absent).
    Remove,
    /// Change nothing, and hand `T` back to the caller.
    Abort(T),
}

/// What `compute` did. The references are valid for the guard.
#[derive(Debug, PartialEq, Eq)]
pub enum Compute<'g, K, V, T> {
    /// The key was absent; this entry was inserted.
    Inserted(&'g K, &'g V),
    /// The key was present: `old` was replaced by `new` (`old` stays readable for the
    /// guards that may have found it, then goes).
    Updated {
        /// The entry replaced.
        old: (&'g K, &'g V),
        /// The entry now in the map.
        new: (&'g K, &'g V),
    },
    /// The key was present; this entry was removed (it stays readable for the guards that
    /// may have found it, then goes).
    Removed(&'g K, &'g V),
    /// The closure asked to remove an absent key: nothing changed.
    Absent,
    /// The closure aborted with this value: nothing changed.
    Aborted(T),
}
