//! # rcukit-urcu: liburcu's function ABI on rcukit
//!
//! `liburcu-rcukit.so.8` exports the functions of liburcu's *memb* and *qsbr* flavors
//! (`liburcu-memb.so.8`, `liburcu-qsbr.so.8`, and `liburcu.so.8`, whose default flavor is
//! memb), implemented on rcukit: a program compiled against liburcu's headers *without*
//! `_LGPL_SOURCE` runs on rcukit with no source change, either by
//!
//! ```sh
//! scripts/install-c.sh --prefix /opt/rcukit
//! LD_LIBRARY_PATH=/opt/rcukit/lib/rcukit-urcu ./program      # its own binary, unchanged
//! ```
//!
//! (the installer puts liburcu's file names, as links to this library, in
//! `lib/rcukit-urcu/`), or by relinking with `-L/opt/rcukit/lib/rcukit-urcu -lurcu-memb`
//! (or `pkg-config --libs liburcu-rcukit`). liburcu-common and liburcu-cds (the wait-free
//! queues and rculfhash) stay liburcu's own: they call the flavor through its functions and
//! its `rcu_flavor_struct`, which this library provides.
//!
//! **Programs built with `_LGPL_SOURCE`** inline liburcu's read side: they read and write
//! liburcu's internal variables (`urcu_memb_reader`, `urcu_memb_gp`, ...) directly, so no
//! other library can stand in for liburcu under them. This library does not define those
//! variables, so such a program fails to start with "undefined symbol" instead of running
//! unprotected.
//!
//! ## What is exported
//!
//! Every function symbol that Debian's liburcu 0.13 defines in `liburcu-memb.so.8` and
//! `liburcu-qsbr.so.8` (`nm -D --defined-only`), plus the later polling functions
//! (`urcu_*_start_poll_synchronize_rcu`, `urcu_*_poll_state_synchronize_rcu`) and
//! `urcu_memb_exit`/`urcu_qsbr_init`; the flavor tables `urcu_memb_flavor` and
//! `urcu_qsbr_flavor` (in liburcu 0.13's layout, see [`exports`]); the pointer helpers
//! (`rcu_dereference_sym`, ...) and `compat_futex_*`. Not exported, on purpose: liburcu's
//! internal variables (`urcu_memb_reader`, `urcu_memb_gp`, `urcu_memb_has_sys_membarrier`,
//! and qsbr's), which only `_LGPL_SOURCE` code uses.
//!
//! ## The mapping
//!
//! | liburcu | here |
//! |---|---|
//! | memb `rcu_read_lock`/`unlock`/`read_ongoing` | an `rcukit::Rcu` domain's guard, kept per thread, taken through the thread's `ThreadReader` once it registers ([`memb`]) |
//! | memb `synchronize_rcu` | `Rcu::synchronize_expedited` (liburcu-memb runs the grace period in the caller with `membarrier`: expedited, in rcukit's terms) |
//! | qsbr registration, `quiescent_state`, `thread_offline`/`online` | an `rcukit::Qsbr` domain's `QsbrThread`, kept per thread ([`qsbr`]) |
//! | qsbr `synchronize_rcu`, `rcu_barrier` | offline around the wait if online, as liburcu ([`qsbr`]) |
//! | `call_rcu`, `rcu_barrier` | `call_raw` with the `rcu_head` as data: no allocation ([`call_rcu`]) |
//! | `defer_rcu` and co. | one callback per call (`defer`) |
//! | `start_poll_synchronize_rcu`, `poll_state_synchronize_rcu` | rcukit cookies behind one-word tickets ([`poll`]) |
//! | `call_rcu_data` functions | descriptors; callbacks use the domain's workers ([`call_rcu`]) |
//! | fork hooks | run rculfhash's hooks; rcukit repairs itself in the child ([`call_rcu`]) |
//!
//! ## Where the semantics differ (each documented in its module)
//!
//! * **Registration is optional for memb readers** (liburcu requires it). A thread's record is
//!   removed when it exits, registered or not; a QSBR thread that exits registered is
//!   unregistered then (liburcu would keep a dangling entry). liburcu's assertions on
//!   registration (twice, or unregistering an unregistered thread) abort here too.
//! * **`call_rcu_data`**: no thread per descriptor; the flags (`URCU_CALL_RCU_RT`) and CPU
//!   affinity are recorded, not applied; `get_call_rcu_thread` returns a thread that runs
//!   the flavor's callbacks; callbacks are ordered per queueing thread, not per descriptor.
//! * **Polling cookies** are tickets for rcukit cookies, which expire on the first normal or
//!   expedited grace period that covers them; the number is not a grace-period count.
//! * **`defer_rcu`** never waits for a grace period (liburcu's may run one when its queue is full)
//!   and allocates a small record per call; the defer barriers wait for every callback of the
//!   flavor. Deferred functions run on the same callback threads as `call_rcu`'s callbacks
//!   (liburcu's run on a defer thread of their own), so a defer barrier, or
//!   `rcu_defer_unregister_thread()`, from a `call_rcu` callback would wait for its own thread
//!   and aborts, as `rcu_barrier()` there does; liburcu's completes.
//! * **`fork()`**: the fork hooks are not needed; callbacks queued before a fork run in the
//!   parent only (liburcu's child hook runs the child's copies too).
//! * **Misuse**: `synchronize_rcu()` (memb) inside a read-side critical section aborts with
//!   rcukit's explanation (liburcu deadlocks); `rcu_barrier()` from a callback aborts
//!   (liburcu deadlocks); `rcu_barrier()` inside a read-side critical section prints an
//!   error and returns, as liburcu does; an unlock without a lock aborts.
//!   `get_call_rcu_thread()` there, before any callback of the flavor has run, prints an error
//!   and returns 0 (finding a callback thread waits for one to run a callback; liburcu's
//!   threads exist from the start).
//! * **Callbacks run** on rcukit's callback workers, once a normal *or* an expedited grace
//!   period covers them; QSBR callbacks run online, as on liburcu's call_rcu threads.
//! * **Domains**: the memb and qsbr flavors are two rcukit domains of this library's own,
//!   distinct from `librcukit`'s global domain (a grace period of one never waits for
//!   readers of another, as liburcu's flavors are independent of each other).
//!
//! ## Layers
//!
//! [`boundary`], [`fork_lock`] and `rcukit_ffi`'s `ForkOnce` at the bottom; [`memb`] and
//! [`qsbr`] (the domains and the per-thread state); [`flavor`] (what both flavors offer the
//! shared code); [`call_rcu`], `defer` and [`poll`] (the shared code, generic over the
//! flavor); [`exports`] (the per-flavor symbols and tables); [`pointer`](mod@pointer) and
//! [`futex`] stand alone.

#![allow(non_camel_case_types)]

pub mod boundary;
pub mod call_rcu;
pub mod defer;
pub mod exports;
pub mod flavor;
pub use rcukit_ffi::fork_lock;
pub mod futex;
pub mod memb;
pub mod pointer;
pub mod poll;
pub mod qsbr;
