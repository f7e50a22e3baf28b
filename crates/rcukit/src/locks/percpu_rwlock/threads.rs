//! The thread side of [`PerCpuRwLock`](crate::PerCpuRwLock): each thread's index (which slot it
//! reads through, and on which path), and its tally of the read guards it holds (see *Slots and
//! threads* and *Recursion* in the [lock's
//! documentation](crate::docs::internal::locks::percpu_rwlock)).
//!
//! An index is dense and recycled: a thread takes the smallest index an exited thread gave
//! back, else a new one. It is given back at thread exit only when the thread holds no read
//! guard on the owner path, so two live threads never write one slot's `owned` counter.
//!
//! The indices given back are bits of a fixed bitmap, taken and given back with atomic
//! read-modify-writes, not a list under a lock: a `fork()` copies no half-taken lock into the
//! child, whose threads take indices from the same bitmap at once. (Behind a process-wide
//! mutex, a fork while another thread took or gave back an index left the child's first read
//! waiting for ever.) Indices from [`RECYCLED`] on, reached only with that many threads alive
//! at once, are not given back: a thread that gets one later takes a new index instead.

use std::cell::Cell;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Which counter of its slot a thread reads through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// The thread owns the slot: plain loads and stores on `owned`.
    Owner,
    /// The thread shares the slot: read-modify-writes on `shared`.
    Shared,
}

/// Set in the thread index once the index has been given back (at thread exit): from then on
/// the thread reads through the shared path.
const RELEASED: usize = 1 << (usize::BITS - 1);

/// Per-thread state. No destructor: readable until the thread is gone.
struct ThreadSlot {
    /// This thread's index (`usize::MAX` until its first lock operation), maybe with RELEASED.
    index: Cell<usize>,
    /// Read guards this thread holds on the owner path, over all locks.
    owned_guards: Cell<usize>,
    /// Read guards this thread holds on the shared path, per lock.
    shared: SharedHolds,
}

/// How many locks' shared-path guards a thread tallies without allocating.
const TALLIED: usize = 8;

/// A thread's shared-path read guards, per lock (see *Recursion* in the module docs): `(lock
/// id, guards)` pairs, the first [`TALLIED`] in place (no destructor, so usable in late
/// thread-local destructors), more in `SHARED_OVERFLOW`. A lock's pair stays where it was put
/// until its last guard goes, so once an in-place pair has gone, the overflow may hold locks
/// while there is room in place: `overflowed` counts its pairs, and a lookup that misses in
/// place looks there whenever it is not empty.
struct SharedHolds {
    len: Cell<usize>,
    locks: [Cell<u64>; TALLIED],
    guards: [Cell<usize>; TALLIED],
    /// Pairs in `SHARED_OVERFLOW`.
    overflowed: Cell<usize>,
}

impl SharedHolds {
    /// If the thread holds a guard of `lock`, count one more and return true.
    fn add_if_held(&self, lock: u64) -> bool {
        let len = self.len.get();
        if let Some(i) = (0..len).find(|&i| self.locks[i].get() == lock) {
            self.guards[i].set(self.guards[i].get() + 1);
            return true;
        }
        self.overflowed.get() > 0
            && SHARED_OVERFLOW
                .try_with(
                    |o| match o.borrow_mut().iter_mut().find(|(l, _)| *l == lock) {
                        Some((_, n)) => {
                            *n += 1;
                            true
                        }
                        None => false,
                    },
                )
                .unwrap_or(false)
    }

    /// Count the first guard of `lock`.
    fn add(&self, lock: u64) {
        let len = self.len.get();
        if len < TALLIED {
            self.locks[len].set(lock);
            self.guards[len].set(1);
            self.len.set(len + 1);
            return;
        }
        // Without thread-local storage (a late thread-local destructor holding guards of more
        // than `TALLIED` locks) the guard goes untallied: only a nested read of it would block
        // behind a waiting writer.
        if SHARED_OVERFLOW
            .try_with(|o| o.borrow_mut().push((lock, 1)))
            .is_ok()
        {
            self.overflowed.set(self.overflowed.get() + 1);
        }
    }

    /// Count one guard of `lock` less.
    fn remove(&self, lock: u64) {
        let len = self.len.get();
        if let Some(i) = (0..len).find(|&i| self.locks[i].get() == lock) {
            let n = self.guards[i].get() - 1;
            if n > 0 {
                self.guards[i].set(n);
            } else {
                // Move the last entry into the gap.
                self.locks[i].set(self.locks[len - 1].get());
                self.guards[i].set(self.guards[len - 1].get());
                self.len.set(len - 1);
            }
            return;
        }
        let _ = SHARED_OVERFLOW.try_with(|o| {
            let mut o = o.borrow_mut();
            if let Some(at) = o.iter().position(|(l, _)| *l == lock) {
                o[at].1 -= 1;
                if o[at].1 == 0 {
                    o.swap_remove(at);
                    self.overflowed.set(self.overflowed.get() - 1);
                }
            }
        });
    }
}

thread_local! {
    static THREAD: ThreadSlot = const {
        ThreadSlot {
            index: Cell::new(usize::MAX),
            owned_guards: Cell::new(0),
            shared: SharedHolds {
                len: Cell::new(0),
                locks: [const { Cell::new(0) }; TALLIED],
                guards: [const { Cell::new(0) }; TALLIED],
                overflowed: Cell::new(0),
            },
        }
    };
    /// Shared-path guards of locks past the first [`TALLIED`] (rare).
    static SHARED_OVERFLOW: std::cell::RefCell<Vec<(u64, usize)>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// Gives the thread's index back when thread-local storage is torn down.
    static INDEX_RELEASER: IndexReleaser = const { IndexReleaser };
}

/// Indices below this are given back at thread exit (see the module docs).
const RECYCLED: usize = 64 * FREE_WORDS;
const FREE_WORDS: usize = 64;

/// Indices of exited threads (bit `i % 64` of word `i / 64`), handed out again smallest
/// first, so that the live threads hold the smallest indices and, up to the slot count, a slot
/// each.
static FREE_INDICES: [AtomicU64; FREE_WORDS] = [const { AtomicU64::new(0) }; FREE_WORDS];
static NEXT_THREAD_INDEX: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Take the smallest index given back, if any. `Acquire`: the thread that gave it back had
/// finished with its slot's `owned` counter.
fn take_free_index() -> Option<usize> {
    for (w, word) in FREE_INDICES.iter().enumerate() {
        let mut bits = word.load(Relaxed);
        while bits != 0 {
            let bit = bits.trailing_zeros() as usize;
            match word.compare_exchange_weak(bits, bits & !(1 << bit), Acquire, Relaxed) {
                Ok(_) => return Some(w * 64 + bit),
                Err(now) => bits = now,
            }
        }
    }
    None
}

/// Give `index` back (if it is below [`RECYCLED`]). `Release`: after this thread's last use
/// of its slot's `owned` counter.
fn give_back_index(index: usize) {
    if index < RECYCLED {
        FREE_INDICES[index / 64].fetch_or(1 << (index % 64), Release);
    }
}

struct IndexReleaser;

impl Drop for IndexReleaser {
    fn drop(&mut self) {
        let _ = THREAD.try_with(|t| {
            let index = t.index.get();
            // An owner-path guard still alive (in a later destructor) keeps the index: giving
            // it away would let two threads write one `owned` counter.
            if index == usize::MAX || index & RELEASED != 0 || t.owned_guards.get() != 0 {
                return;
            }
            t.index.set(index | RELEASED);
            give_back_index(index);
        });
    }
}

#[cfg_attr(rcukit_loom, allow(dead_code))]
#[inline]
pub(super) fn thread_index() -> usize {
    THREAD.with(|t| {
        let index = t.index.get();
        if index != usize::MAX {
            index
        } else {
            assign_thread_index(t)
        }
    })
}

#[cold]
#[cfg_attr(rcukit_loom, allow(dead_code))]
fn assign_thread_index(t: &ThreadSlot) -> usize {
    // Only take an index if this thread can give it back at exit; otherwise read through the
    // shared path from the start.
    let releasable = INDEX_RELEASER.try_with(|_| ()).is_ok();
    let index = if releasable {
        take_free_index().unwrap_or_else(|| NEXT_THREAD_INDEX.fetch_add(1, Relaxed) & !RELEASED)
    } else {
        NEXT_THREAD_INDEX.fetch_add(1, Relaxed) | RELEASED
    };
    t.index.set(index);
    index
}

/// Tally a read guard of `lock` taken (`delta` 1) or released (-1) by this thread: owner-path
/// guards over all locks (for the index release at thread exit), shared-path guards per lock
/// (for nested reads).
#[cfg(not(rcukit_loom))]
#[inline]
pub(super) fn note_guard(lock: u64, path: Path, delta: isize) {
    match path {
        Path::Owner => THREAD.with(|t| {
            let n = t.owned_guards.get();
            t.owned_guards.set(n.wrapping_add_signed(delta));
        }),
        Path::Shared => note_shared_guard(lock, delta),
    }
}

/// The shared-path half of [`note_guard`], out of line.
#[cfg(not(rcukit_loom))]
#[inline(never)]
fn note_shared_guard(lock: u64, delta: isize) {
    THREAD.with(|t| {
        if delta > 0 {
            t.shared.add(lock)
        } else {
            t.shared.remove(lock)
        }
    });
}

/// If the calling thread holds a shared-path read guard of `lock`, count one more and return
/// true (a nested read; see *Recursion*).
#[cfg(not(rcukit_loom))]
#[inline]
pub(super) fn add_nested_shared(lock: u64) -> bool {
    THREAD.with(|t| t.shared.add_if_held(lock))
}
