//! # rcukit-c: rcukit for C programs
//!
//! `librcukit.so` and `librcukit.a` export rcukit's API to C with the header
//! `include/rcukit/rcukit.h`, which cbindgen generates from this crate (a test fails when the
//! checked-in header is out of date). `scripts/install-c.sh --prefix DIR` builds both libraries
//! (this one and the liburcu-compatible one) and installs the headers, the libraries with their
//! SONAMEs and the pkg-config files, as cargo-c would lay them out.
//!
//! ```c
//! #include <rcukit/rcukit.h>
//!
//! struct config { int value; rcukit_head head; };
//! static struct config *_Atomic current;
//!
//! static void free_config(rcukit_head *head) {
//!     free((char *)head - offsetof(struct config, head));
//! }
//!
//! int read_value(void) {
//!     rcukit_guard guard = rcukit_read_lock(rcukit_global());
//!     int value = atomic_load_explicit(&current, memory_order_acquire)->value;
//!     rcukit_read_unlock(&guard);
//!     return value;
//! }
//!
//! void set_value(struct config *next) {
//!     struct config *old = atomic_exchange(&current, next);
//!     rcukit_call(rcukit_global(), &old->head, free_config); // freed after a grace period
//! }
//! ```
//!
//! ## A crate, not a feature
//!
//! The C API is a crate of its own rather than a `capi` feature of `rcukit`: it is built as a
//! `cdylib` and a `staticlib`, which a feature cannot add to the `rcukit` crate without making
//! every Rust user build them; it needs `#[no_mangle]` symbols that must never be linked twice
//! into a Rust program that also uses rcukit; and it uses only rcukit's public API, so the
//! library's internals stay free to change. The `rlib` crate type is there for Rust tests.
//!
//! ## The mapping
//!
//! | C | Rust |
//! |---|---|
//! | `rcukit_config` + setters ([`config`]) | `RcuBuilder`, `QsbrBuilder` |
//! | `rcukit_global`, `rcukit_global_init`, `rcukit_domain_new`/`_free` ([`domain`]) | `Rcu::global`, `build_global`, `build`, `Drop` |
//! | `rcukit_read_lock`/`_unlock` → `rcukit_guard` ([`read`]) | `Rcu::read` → `Guard` |
//! | `rcukit_reader_new`/`_free`, `rcukit_reader_lock`/`_unlock` ([`reader`]) | `Rcu::thread_reader` → `ThreadReader`, its `read` |
//! | `rcukit_read_owned_begin`/`_end` → `rcukit_owned_guard` | `Rcu::read_owned` → `OwnedGuard` |
//! | `rcukit_synchronize`, `_expedited`, `rcukit_barrier` | the methods of the same name |
//! | `rcukit_cookie`, `rcukit_get_state`, `_start_poll`, `_start_poll_expedited`, `_poll`, `_cond_synchronize`, `_cond_synchronize_expedited` ([`cookie`]) | `GpCookie` and the methods of the same name |
//! | `rcukit_head`, `rcukit_call`, `rcukit_call_sized` ([`callback`]) | `Rcu::call_raw` |
//! | `rcukit_qsbr_*` ([`qsbr`]) | `Qsbr`, `QsbrThread` |
//! | `rcukit_stats`, `rcukit_domain_stats`, `rcukit_qsbr_stats` ([`stats`]) | `Stats`, `Rcu::stats`, `Qsbr::stats` |
//! | `rcukit_config_set_report_hook` ([`report`]) | `RcuBuilder::on_report` |
//!
//! Every function forwards to the Rust method and keeps its guarantees; the Rust
//! documentation of `rcukit` is the reference for what each one does.
//!
//! ## Misuse and errors
//!
//! No Rust panic crosses the boundary ([`boundary`]). Per function:
//!
//! | situation | result |
//! |---|---|
//! | a setting out of range, an RCU-only setting for a QSBR domain, a thread the system refuses | `rcukit_domain_new`/`rcukit_qsbr_new` return NULL, `rcukit_global_init` a `rcukit_status`; the message is in `rcukit_last_error()` |
//! | `rcukit_global_init` after the global domain exists | `RCUKIT_ALREADY_BUILT` |
//! | a NULL configuration given to a setter, a name that is not UTF-8, an unknown fence kind | `RCUKIT_INVALID_ARGUMENT` |
//! | `synchronize*`, `cond_synchronize*` (when it would wait), `barrier` inside a read-side critical section of the same domain, or online in the same QSBR domain | abort, with the Rust API's panic message |
//! | `barrier` from one of the domain's own callbacks; any wait from a report hook | abort, with the Rust API's message |
//! | a cookie used with another domain than the one that made it | abort, with the Rust API's message |
//! | `rcukit_read_unlock` of a guard that is not locked (unlocked already, never locked, zeroed) or was locked by another thread | abort: "this guard is not locked ..." / "... locked by another thread ..." |
//! | `rcukit_read_owned_end` of an owned guard that is not open | abort |
//! | `rcukit_reader_unlock` of a reader with no section open; `rcukit_reader_lock`, `_unlock` or `_free` on another thread than the reader's; `rcukit_reader_free` with a section open; `rcukit_domain_free` of a domain with live readers | abort: "this reader is not locked ...", "... belongs to another thread ...", "this reader is locked ...", "... reader(s) of this domain are still alive ..." |
//! | registering a thread twice with one QSBR domain | abort, with the Rust API's message |
//! | `rcukit_qsbr_unregister` from another thread; `rcukit_qsbr_free` with live registered threads; `rcukit_domain_free` of the global domain | abort |
//! | a NULL domain, guard, head, function or statistics pointer | abort naming the argument |
//! | `rcukit_domain_free(NULL)`, `rcukit_qsbr_free(NULL)`, `rcukit_qsbr_unregister(NULL)`, `rcukit_reader_free(NULL)`, `rcukit_config_free(NULL)` | nothing, like `free(NULL)` |
//!
//! An abort writes `rcukit: fatal error in FUNCTION(), aborting: MESSAGE` to standard error
//! (after the Rust panic line with the same message, where the Rust API panicked) and raises
//! `SIGABRT`.
//!
//! ## Threads, fork and callbacks
//!
//! These behave exactly as the Rust documentation says, because the C functions are the Rust
//! ones:
//!
//! * **No registration** is needed to read an RCU domain: a thread's reader record is made on
//!   its first read and removed when the thread exits (rcukit's thread-local destructors run
//!   for threads made with `pthread_create` too). A thread that exits *inside* a read-side
//!   critical section (a guard never unlocked) leaves it open forever, as a Rust guard leaked
//!   with `mem::forget`: every later grace period waits, the stall report says the thread has
//!   exited, and `orphaned_readers` counts it. QSBR: see [`qsbr`].
//! * **`fork()`**: a child's domains work on their first use; reader records of threads that
//!   did not survive the fork are dropped, the domains' threads are restarted, and callbacks
//!   queued before the fork are abandoned in the child (they run in the parent;
//!   `callbacks_abandoned` counts them). Details and limits in `rcukit::docs::internal::domain::fork`.
//! * **Callbacks** run on the domain's worker threads and may call back into the API (queue
//!   more callbacks, read, wait for a grace period); `rcukit_barrier` of their own domain aborts
//!   (it would wait for itself). A callback must not unwind or `longjmp` out of its call. A
//!   barrier waits for the callbacks queued before it on its own domain only: two callbacks
//!   of two domains that each wait for the other domain's barrier wait for ever.
//! * **Signal handlers** may open read-side critical sections through a reader handle the
//!   thread made beforehand (`rcukit_reader_new`, or liburcu's memb `rcu_read_lock` on a
//!   registered thread), wherever the signal interrupts the thread: such a section touches the
//!   thread's record and nothing else. Not with `rcukit_read_lock`: it finds the record through
//!   per-thread caches that the interrupted code may be changing (a handler could probe a
//!   freed index, or count its section in another domain's record), and at thread exit it
//!   allocates.
//! * **Owned sections and `fork()`**: an owned section open on another thread when the process
//!   forks stays open in the child, which has no thread to end it: the child's grace periods
//!   of that domain then wait for ever.
//! * **Reports on standard error** are written with `SIGPIPE` blocked in the writing thread:
//!   a standard error that is a pipe with no reader does not end the program.
//! * **Cancellation**: a thread cancelled with `pthread_cancel` while the library writes a
//!   report to standard error (a cancellation point) aborts the process, as a cancellation
//!   inside any rcukit call may: route reports to a hook (`rcukit_config_set_report_hook`) in
//!   programs that cancel threads, and cancel none while it is inside the library.

#![allow(non_camel_case_types)]

pub mod boundary;
pub mod callback;
pub mod config;
pub mod cookie;
pub mod domain;
mod live_readers;
pub mod qsbr;
pub mod read;
pub mod reader;
pub mod report;
pub mod stats;
pub mod status;
mod thread;

/// The version of rcukit this library was built from ("0.1.0"; a static string).
#[no_mangle]
pub extern "C" fn rcukit_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
