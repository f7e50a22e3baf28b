//! # rcukit: read-copy-update for Rust
//!
//! For data that many threads read far more often than anyone changes it: a configuration, a
//! routing or rule table, a flow table, a registry of connections. Readers take no lock, never
//! wait for a writer and write nothing that other threads read, so a second reader thread does
//! not slow the first one down. A writer publishes a new version with one pointer swap; the old
//! version is dropped once every reader that could still see it has finished (after a *grace
//! period*), by a background thread or by a later write.
//!
//! ```
//! use rcukit::RcuCell;
//! use std::sync::Arc;
//!
//! let config = Arc::new(RcuCell::new(vec![String::from("allow ssh")]));
//!
//! // Readers, on any number of threads: no lock, and the borrow checker keeps the reference
//! // inside its read-side critical section.
//! let reader = {
//!     let config = Arc::clone(&config);
//!     std::thread::spawn(move || {
//!         let rules = config.read(); // enter, load; leaves when `rules` drops
//!         rules.len()
//!     })
//! };
//!
//! // A writer: copy, change, publish. The old vector is dropped after a grace period.
//! config.update(|old| {
//!     let mut new = old.clone();
//!     new.push(String::from("deny telnet"));
//!     new
//! });
//! let seen = reader.join().unwrap();
//! assert!(seen == 1 || seen == 2);
//! assert_eq!(config.read().len(), 2);
//! ```
//!
//! A whole protected read of an [`RcuCell`] measured 2.25 ns where arc-swap's `load` took
//! 14.12 ns and a `RwLock<Arc<T>>` read 11.70 ns, and with two reader threads the lock's read
//! went to 51.35 ns while the cell's stayed at 1.99 ns (`cargo bench -p rcukit --bench cell`; the
//! figures, their dates and how they compare are in [`docs::choosing`] and
//! [`docs::performance`]).
//!
//! ## Which type
//!
//! | for | use |
//! |---|---|
//! | one value read everywhere, replaced now and then | [`RcuCell<T>`](RcuCell) |
//! | a value to keep past the read: in a struct, across `.await`, on another thread | [`RcuCell::snapshot`], [`RcuCell::load_arc`] |
//! | a list that readers walk while writers edit it | [`RcuList<T>`](RcuList) |
//! | a hash map with many more lookups than writes | [`RcuHashMap<K, V>`](RcuHashMap) (see [`map`] for a flow table served to packet threads) |
//! | the same with entries inline, for `Clone` keys and values (cloned when the table is rebuilt; for `Copy` numbers, addresses and tuples a clone is a copy): no allocation per write, one cache miss per lookup | [`RcuFlatMap<K, V>`](RcuFlatMap) (see [`flat_map`]) |
//! | a read section held across `.await` or handed to another thread | [`Rcu::read_owned`] → [`OwnedGuard`] |
//! | your own lock-free structure with raw pointers | [`Rcu`]: [`read`](Rcu::read), [`retire`](Rcu::retire), [`synchronize`](Rcu::synchronize) |
//! | threads that own their cores (packet loops) | [`Qsbr`] |
//! | a rarely written table and no background threads | [`RecSeq<T>`](RecSeq) |
//! | data updated in place under a lock that readers take very often | [`PerCpuRwLock<T>`](PerCpuRwLock) |
//!
//! [`docs::choosing`] says when each is the right choice, when arc-swap, papaya, DashMap or a plain
//! lock is, and when not to use RCU at all, with the measured trade-offs.
//!
//! The containers publish, reclaim after a grace period, and tie every reference to its guard:
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
//! With raw pointers, a domain ([`Rcu`]) is all there is: a read-side critical section, and a
//! grace period before the old version may be freed:
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
//! ## Platforms and features
//!
//! The cheap read side uses Linux's `membarrier(2)`; elsewhere, on kernels without it, and under
//! Miri or loom, every domain falls back to a full fence per outermost read
//! ([`FenceKind::SeqCst`]): correct, slower ([`docs::limitations`]). Each domain runs background
//! threads (a grace-period thread, an expedited helper and callback workers). The `log` feature
//! adds [`report::log`](crate::report), a report hook for the `log` facade. Minimum supported
//! Rust version: 1.80.
//!
//! The rest of this page uses the kernel's vocabulary: rcukit's design follows the Linux kernel's
//! RCU and the texts behind it ([`docs::seeds`]).
//!
//! ## The model
//!
//! * **Readers** ([`Rcu::read`] → [`Guard`]) publish "reading since epoch *e*" in a per-thread
//!   record: one load, one store and a compiler fence when the kernel has `membarrier`
//!   ([`FenceKind::Membarrier`]), or a full fence otherwise ([`FenceKind::SeqCst`]). A
//!   [`ThreadReader`] ([`Rcu::thread_reader`]) names the thread's record once, for code that
//!   cannot afford finding it on every read (rcukit's C library, threads reading many domains).
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
//! ([`RcuCell`], [`RcuList`], [`RcuHashMap`] and [`RcuFlatMap`], whose guides are the public
//! [`map`] and [`flat_map`] modules).
//! Every module opens with an essay on why its algorithm is correct, and
//! [`docs::internal`] gathers them in that order.
//!
//! [`docs`] holds no code: what the seeds behind rcukit are ([`docs::seeds`]; module docs cite
//! them as "seed 000" to "seed 004"), the performance model with measured figures
//! ([`docs::performance`]) and the limitations ([`docs::limitations`]).

#![warn(missing_docs)]
// docs.rs builds with `--cfg docsrs` (see Cargo.toml): items behind a feature say so.
#![cfg_attr(docsrs, feature(doc_cfg))]
// An essay renders in two places, its module and `docs::internal`, whose scopes differ: a link
// one of them could write shorter stays explicit for the other.
#![allow(rustdoc::redundant_explicit_links)]
// Under loom the thread-local fast paths are compiled out (see `callbacks::producer`).
#![cfg_attr(rcukit_loom, allow(dead_code))]

// Public modules: documentation, the hash map's guide, reports. Everything else is reached
// through the re-exports below.
pub mod docs;
pub mod flat_map;
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
mod pages;
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
// What containers share: how a container names its domain, the words of `compute`.
mod compute;
mod domain_ref;
// Containers (with the public `map`).
mod cell;
mod list;

pub use barrier::FenceKind;
pub use cell::{OwnedSnapshot, RcuCell, RcuRef, Reclaim, Snapshot, Unpublished};
pub use domain::OwnedGuard;
#[cfg(all(feature = "raw-sections", not(rcukit_loom)))]
pub use domain::RawSection;
pub use domain::{BarrierFuture, GpFuture};
pub use domain::{Guard, NotSendUseReadOwned, Rcu, RcuBuilder, Stats, ThreadReader};
pub use domain_ref::{AnyDomainRef, DomainRef};
pub use error::Error;
pub use flat_map::RcuFlatMap;
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

/// The crate README's Rust examples (the crates.io page), compiled and run as doctests; the
/// workspace README's are run by `rcukit-lab`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
