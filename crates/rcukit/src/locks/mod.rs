//! The read-mostly schemes the seeds weigh RCU against, built with the same care.
//!
//! * [`recseq`]: [`RecSeq<T>`](crate::RecSeq), netfilter's `xt_recseq`
//!   ([seed 000](crate::docs::seeds)). Readers make a per-thread sequence counter odd while they
//!   read; a writer swaps the pointer and waits until every counter that was odd has changed. No
//!   grace-period thread, no callbacks: the writer gets the old value back as soon as no reader can
//!   hold it.
//! * [`percpu_rwlock`]: [`PerCpuRwLock<T>`](crate::PerCpuRwLock), the per-CPU reader-writer lock of
//!   [seed 002](crate::docs::seeds). One cache-line-padded reader lock per slot, threads mapped to
//!   slots; readers touch only their slot, writers take every slot. Built on `lock_api`, so it has
//!   the usual guards.
//!
//! The QSBR domain, the third alternative, is a grace-period domain and lives beside
//! [`Rcu`](crate::Rcu) in [`qsbr`](crate::qsbr). Central reader-writer locks, mutexes and
//! sleeping locks are not rebuilt here: use `parking_lot` and `std`.
//!
//! # Choosing
//!
//! | | reader cost | writer cost | readers block writers? | writers block readers? |
//! |---|---|---|---|---|
//! | [`Rcu`](crate::Rcu) | load + store, no fence (membarrier) | a grace period (or a callback) | only delay them | no |
//! | [`Qsbr`](crate::Qsbr) | nothing; a store per quiescent state | a grace period (or a callback) | only delay them | no |
//! | [`RecSeq`](crate::RecSeq) | two stores and a fence | a scan of the readers' counters | only delay them | no |
//! | [`PerCpuRwLock`](crate::PerCpuRwLock) | an uncontended atomic add and subtract on the thread's own line | a lock and a wait per slot | yes | yes |
//! | `parking_lot::RwLock` | one atomic on a shared line (ping-pong) | one lock | yes | yes |
//!
//! `docs/benchmarks.md` has measured figures.

pub mod percpu_rwlock;
pub mod recseq;

#[cfg(all(test, rcukit_loom))]
mod loom;
