//! # rcukit: read-copy-update with kernel-grade grace periods
//!
//! RCU lets many threads read shared data with almost no cost while a writer replaces it: the
//! writer publishes a new version, and frees the old one only after a *grace period*, once
//! every reader that might still hold it has finished.
//!
//! ```
//! use rcukit::Rcu;
//! use std::sync::atomic::{AtomicPtr, Ordering};
//!
//! let rcu = Rcu::global();
//! let table = AtomicPtr::new(Box::into_raw(Box::new(vec![1, 2, 3])));
//!
//! // Reader: no locks, no atomic read-modify-write, no fence instruction.
//! {
//!     let _guard = rcu.read();
//!     // SAFETY: the pointer is only freed after a grace period, and we are in a reader.
//!     let rules = unsafe { &*table.load(Ordering::Acquire) };
//!     assert_eq!(rules.len(), 3);
//! }
//!
//! // Writer: publish a copy, then reclaim the old version after a grace period.
//! let new = Box::into_raw(Box::new(vec![1, 2, 3, 4]));
//! let old = table.swap(new, Ordering::AcqRel);
//! rcu.synchronize(); // or synchronize_expedited(), or retire() without waiting
//! // SAFETY: no reader can still see `old` after the grace period.
//! drop(unsafe { Box::from_raw(old) });
//! # drop(unsafe { Box::from_raw(table.load(Ordering::Relaxed)) });
//! ```
//!
//! Most programs need no raw pointers: [`RcuCell`] (one value, netfilter's `table->private`),
//! [`RcuList`] (a list, `list_add_rcu`/CK_LIST) and [`RcuHashMap`] (a resizable hash map,
//! `rhashtable`; see [`map`] for a flow table served to packet threads) publish, reclaim after
//! a grace period, and let the borrow checker keep every reference inside its guard:
//!
//! ```
//! use rcukit::{RcuCell, RcuList};
//!
//! let table = RcuCell::new(vec![1, 2, 3]);
//! let rules = RcuList::new();
//! rules.push_back("allow ssh");
//! {
//!     let guard = table.domain().read();
//!     assert_eq!(table.load(&guard).len(), 3);
//!     assert_eq!(rules.iter(&guard).count(), 1);
//! }
//! table.update(|old| [old.as_slice(), &[4]].concat()); // copy-update, old table retired
//! rules.remove_first(|rule| rule.ends_with("ssh")); // node retired after a grace period
//! assert_eq!(*table.read(), [1, 2, 3, 4]);
//! ```
//!
//! ## The model
//!
//! * **Readers** ([`Rcu::read`] → [`Guard`]) publish "reading since epoch *e*" in a per-thread
//!   record: one load, one store and a compiler fence when the kernel has `membarrier`
//!   ([`FenceKind::Membarrier`]), or a full fence otherwise ([`FenceKind::SeqCst`]).
//! * **Normal grace periods** ([`Rcu::synchronize`]) run on a background thread that batches
//!   every request arriving before it starts, with a heavy barrier that interrupts nobody
//!   (`MEMBARRIER_CMD_GLOBAL`). Cheap for the system, milliseconds for the caller.
//! * **Expedited grace periods** ([`Rcu::synchronize_expedited`]) run in the caller with
//!   `MEMBARRIER_CMD_PRIVATE_EXPEDITED`: microseconds, at the price of IPIs. Concurrent callers
//!   share them.
//! * **Polling cookies** ([`Rcu::get_state`], [`Rcu::start_poll`], [`Rcu::poll`],
//!   [`Rcu::cond_synchronize`], ...) let an updater do other work instead of blocking. A
//!   [`GpCookie`] holds a target for both kinds and expires when *either* is reached.
//! * **Callbacks** ([`Rcu::call`], [`Rcu::retire`], [`Rcu::barrier`]) run once a grace period of
//!   *either* kind covers them ([seed 004](crate::docs::seeds)): expedited grace periods that other
//!   threads run anyway release memory early. Closures run on worker threads; retired objects are
//!   dropped by default by the retiring thread in a later `retire` (never under an rcukit lock,
//!   never inside a read-side critical section of the domain), or on workers with
//!   [`RcuBuilder::retire_on_producers`]`(false)`: see
//!   [where user code runs](docs::internal::callbacks::invoke).
//! * **Owned readers** ([`Rcu::read_owned`] → [`OwnedGuard`]) are the kernel's SRCU: a read
//!   section that is `Send + Sync + 'static`, may be held across `.await`, sleep, and end on
//!   another thread. Containers accept either guard ([`ReadSection`]).
//! * **Awaitable waits** ([`Rcu::synchronize_async`], [`Rcu::synchronize_expedited_async`],
//!   [`Rcu::wait_for`], [`Rcu::barrier_async`]) return futures that the grace-period engines
//!   wake: no runtime dependency, no thread per waiter, nothing left behind when dropped.
//!
//! ```
//! use rcukit::{Rcu, RcuCell};
//!
//! let config = RcuCell::new(String::from("v1"));
//! let guard = Rcu::global().read_owned(); // Send + 'static: may cross an .await
//! let seen = config.load(&guard);
//! std::thread::scope(|s| {
//!     s.spawn(|| config.store(String::from("v2"))); // "v1" is retired, not freed
//! });
//! assert_eq!(seen, "v1");
//! std::thread::spawn(move || drop(guard)).join().unwrap(); // ends on another thread
//! ```
//!
//! ## The guarantees
//!
//! * **Grace period:** when `synchronize*()` returns, a cookie polls complete, or a callback
//!   runs, every read-side critical section that was running when the call (or the cookie, or
//!   the `call`) was made has ended, and everything it did happens-before what follows.
//! * **Publish/subscribe** is the data structure's business: store new versions with
//!   `Release`, load them with `Acquire` inside a guard. [`RcuCell`] and [`RcuList`] do this for
//!   you, and tie every reference to its guard's lifetime.
//! * **Misuse is loud:** waiting for a grace period inside a read-side critical section of the
//!   same domain panics with an explanation instead of deadlocking; a reader that holds a grace
//!   period longer than the stall timeout is reported (to stderr, or wherever
//!   [`RcuBuilder::on_report`] sends [`Report`]s) and counted in [`Stats`].
//! * **Hostile use is survived:** a panicking callback or `Drop` (even one whose panic payload
//!   panics again) is caught and reported, and no library thread dies of it; a closed stderr
//!   stops nothing; a [`fork`](docs::internal::domain::fork)ed child's domains work (callbacks
//!   queued before the fork are abandoned in the child, which counts them).
//!
//! ## Architecture
//!
//! The modules are private and come in layers, each using only the layers below it: the
//! foundations (`sync`, `threads`, with the public [`report`]); the primitives (the barrier
//! pair, sequence numbers and cookies, per-thread state); the read side (reader records and
//! the registry grace periods scan); grace periods; deferred work (callbacks, which see their
//! domain only through a port) beside the lock alternatives; the domain ([`Rcu`], its guards,
//! futures, fork repair); the read sections containers accept, and [`Qsbr`]; the containers
//! ([`RcuCell`], [`RcuList`], and [`RcuHashMap`], whose guide is the public [`map`] module).
//! Every module opens with an essay on why its algorithm is correct, and
//! [`docs::internal`] gathers them in that order.
//!
//! [`docs`] holds no code: what the seeds behind rcukit are ([`docs::seeds`]; module docs cite
//! them as "seed 000" to "seed 004"), the performance model with measured figures
//! ([`docs::performance`]) and the limitations ([`docs::limitations`]).

#![warn(missing_docs)]
// An essay renders in two places, its module and `docs::internal`, whose scopes differ: a link
// one of them could write shorter stays explicit for the other.
#![allow(rustdoc::redundant_explicit_links)]
// Under loom the thread-local fast paths are compiled out (see `callbacks::producer`).
#![cfg_attr(rcukit_loom, allow(dead_code))]

// Public modules: documentation, the hash map's guide, reports. Everything else is reached
// through the re-exports below.
pub mod docs;
pub mod map;
pub mod report;

// The layers, lowest first: a module uses only modules of the layers above it in this list
// (`scripts/check-layers.sh`; `docs::internal` tells the story).
// Foundations (with the public `report`).
mod error;
mod sync;
mod threads;
// Primitives.
mod barrier;
mod per_thread;
mod seq;
// The read side.
mod reader;
// Grace periods.
mod gp;
// Deferred work, and the lock alternatives.
mod callbacks;
mod locks;
// The domain.
mod domain;
// What a domain offers its users.
mod qsbr;
mod section;
// How a container names its domain.
mod domain_ref;
// Containers (with the public `map`).
mod cell;
mod list;

pub use barrier::FenceKind;
pub use cell::{RcuCell, RcuRef, Reclaim, Unpublished};
pub use domain::OwnedGuard;
pub use domain::{BarrierFuture, GpFuture};
pub use domain::{Guard, NotSendUseReadOwned, Rcu, RcuBuilder, Stats};
pub use domain_ref::DomainRef;
pub use error::Error;
pub use list::{Iter as ListIter, RcuList};
pub use locks::percpu_rwlock::RawPerCpuRwLock;
#[cfg(not(rcukit_loom))]
pub use locks::percpu_rwlock::{PerCpuRwLock, PerCpuRwLockReadGuard, PerCpuRwLockWriteGuard};
pub use locks::recseq::{RecSeq, RecSeqBuilder, RecSeqGuard};
pub use map::{MapBuilder, RcuHashMap};
pub use qsbr::{Qsbr, QsbrBuilder, QsbrThread};
pub use report::Report;
pub use section::ReadSection;
pub use seq::GpCookie;

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
