//! liburcu's per-flavor symbols for the parts written once in [`call_rcu`](mod@crate::call_rcu),
//! [`defer`](mod@crate::defer) and [`poll`](mod@crate::poll), and the flavor tables
//! (`urcu_memb_flavor`, `urcu_qsbr_flavor`).
//!
//! `flavor_exports!` takes every symbol name explicitly (so that each exported name can be
//! found with grep) and defines it as a call of the generic function for the flavor.
//!
//! The flavor table is `struct rcu_flavor_struct` in liburcu 0.13's layout (Debian 12's
//! liburcu-dev): 14 entries, 112 bytes. An executable that refers to the table (rculfhash's
//! `cds_lfht_new()` takes its address) gets a copy of it at load time, of the size its headers
//! said, and the loader warns when the library's symbol is larger; liburcu 0.14 appended two
//! polling entries (128 bytes), which a 0.13 program would be warned about on every start. So
//! the table keeps 0.13's size: a program built against 0.14 or later headers works, except
//! that it must call the polling functions by name (they are exported), not through the
//! table's two extra entries (rculfhash does not use them).

use crate::call_rcu::{self, call_rcu_data, rcu_head, urcu_atfork, ForkPhase};
use crate::defer;
use crate::flavor::{Memb, Qsbr};
use crate::poll::{self, urcu_gp_poll_state};

const _: () =
    assert!(std::mem::size_of::<rcu_flavor_struct>() == 14 * std::mem::size_of::<usize>());
use crate::{memb, qsbr};
use std::ffi::{c_int, c_ulong, c_void};

/// liburcu's `struct rcu_flavor_struct`.
#[repr(C)]
#[derive(Debug)]
pub struct rcu_flavor_struct {
    read_lock: extern "C" fn(),
    read_unlock: extern "C" fn(),
    read_ongoing: extern "C" fn() -> c_int,
    read_quiescent_state: extern "C" fn(),
    update_call_rcu:
        unsafe extern "C" fn(*mut rcu_head, Option<unsafe extern "C" fn(*mut rcu_head)>),
    update_synchronize_rcu: extern "C" fn(),
    update_defer_rcu: unsafe extern "C" fn(Option<unsafe extern "C" fn(*mut c_void)>, *mut c_void),
    thread_offline: extern "C" fn(),
    thread_online: extern "C" fn(),
    register_thread: extern "C" fn(),
    unregister_thread: extern "C" fn(),
    barrier: extern "C" fn(),
    register_rculfhash_atfork: extern "C" fn(*mut urcu_atfork),
    unregister_rculfhash_atfork: extern "C" fn(*mut urcu_atfork),
}

/// Define one flavor's shared symbols.
macro_rules! flavor_exports {
    (
        flavor: $F:ty,
        call_rcu: $call_rcu:ident,
        barrier: $barrier:ident,
        create_call_rcu_data: $create:ident,
        call_rcu_data_free: $free:ident,
        get_default_call_rcu_data: $default:ident,
        get_cpu_call_rcu_data: $get_cpu:ident,
        set_cpu_call_rcu_data: $set_cpu:ident,
        get_thread_call_rcu_data: $get_thread:ident,
        set_thread_call_rcu_data: $set_thread:ident,
        get_call_rcu_data: $current:ident,
        get_call_rcu_thread: $worker:ident,
        create_all_cpu_call_rcu_data: $create_all:ident,
        free_all_cpu_call_rcu_data: $free_all:ident,
        call_rcu_before_fork: $before:ident,
        call_rcu_after_fork_parent: $parent:ident,
        call_rcu_after_fork_child: $child:ident,
        register_rculfhash_atfork: $register_atfork:ident,
        unregister_rculfhash_atfork: $unregister_atfork:ident,
        defer_rcu: $defer:ident,
        defer_register_thread: $defer_register:ident,
        defer_unregister_thread: $defer_unregister:ident,
        defer_barrier: $defer_barrier:ident,
        defer_barrier_thread: $defer_barrier_thread:ident,
        defer_exit: $defer_exit:ident,
        start_poll_synchronize_rcu: $start_poll:ident,
        poll_state_synchronize_rcu: $poll_state:ident,
    ) => {
        /// `call_rcu(head, func)`: `func(head)` on a callback worker after a grace period.
        ///
        /// # Safety
        ///
        /// `head` stays valid, and is not queued again, until `func` runs.
        #[no_mangle]
        pub unsafe extern "C" fn $call_rcu(
            head: *mut rcu_head,
            func: Option<unsafe extern "C" fn(*mut rcu_head)>,
        ) {
            // SAFETY: forwarded to the caller.
            unsafe { call_rcu::call_rcu::<$F>(stringify!($call_rcu), head, func) }
        }

        /// `rcu_barrier()`: wait until every callback queued before has run.
        #[no_mangle]
        pub extern "C" fn $barrier() {
            call_rcu::barrier::<$F>(stringify!($barrier))
        }

        /// `create_call_rcu_data(flags, cpu_affinity)`: a new descriptor (see `call_rcu`).
        #[no_mangle]
        pub extern "C" fn $create(flags: c_ulong, cpu_affinity: c_int) -> *mut call_rcu_data {
            crate::boundary::FFI.guarded(stringify!($create), || {
                call_rcu::create(flags, cpu_affinity)
            })
        }

        /// `call_rcu_data_free(crdp)`.
        ///
        /// # Safety
        ///
        /// `crdp` is NULL, the default, or a descriptor no longer in use.
        #[no_mangle]
        pub unsafe extern "C" fn $free(crdp: *mut call_rcu_data) {
            // SAFETY: forwarded to the caller.
            crate::boundary::FFI
                .guarded(stringify!($free), || unsafe { call_rcu::free::<$F>(crdp) })
        }

        /// `get_default_call_rcu_data()`.
        #[no_mangle]
        pub extern "C" fn $default() -> *mut call_rcu_data {
            crate::boundary::FFI.guarded(stringify!($default), call_rcu::default::<$F>)
        }

        /// `get_cpu_call_rcu_data(cpu)`.
        #[no_mangle]
        pub extern "C" fn $get_cpu(cpu: c_int) -> *mut call_rcu_data {
            crate::boundary::FFI.guarded(stringify!($get_cpu), || call_rcu::cpu::<$F>(cpu))
        }

        /// `set_cpu_call_rcu_data(cpu, crdp)`.
        #[no_mangle]
        pub extern "C" fn $set_cpu(cpu: c_int, crdp: *mut call_rcu_data) -> c_int {
            crate::boundary::FFI
                .guarded(stringify!($set_cpu), || call_rcu::set_cpu::<$F>(cpu, crdp))
        }

        /// `get_thread_call_rcu_data()`.
        #[no_mangle]
        pub extern "C" fn $get_thread() -> *mut call_rcu_data {
            crate::boundary::FFI.guarded(stringify!($get_thread), call_rcu::thread::<$F>)
        }

        /// `set_thread_call_rcu_data(crdp)`.
        #[no_mangle]
        pub extern "C" fn $set_thread(crdp: *mut call_rcu_data) {
            crate::boundary::FFI
                .guarded(stringify!($set_thread), || call_rcu::set_thread::<$F>(crdp))
        }

        /// `get_call_rcu_data()`.
        #[no_mangle]
        pub extern "C" fn $current() -> *mut call_rcu_data {
            crate::boundary::FFI.guarded(stringify!($current), call_rcu::current::<$F>)
        }

        /// `get_call_rcu_thread(crdp)`: a thread that runs this flavor's callbacks.
        #[no_mangle]
        pub extern "C" fn $worker(_crdp: *mut call_rcu_data) -> libc::pthread_t {
            crate::boundary::FFI.guarded(stringify!($worker), call_rcu::worker_thread::<$F>)
        }

        /// `create_all_cpu_call_rcu_data(flags)`.
        #[no_mangle]
        pub extern "C" fn $create_all(flags: c_ulong) -> c_int {
            crate::boundary::FFI.guarded(stringify!($create_all), || {
                call_rcu::create_all_cpu::<$F>(flags)
            })
        }

        /// `free_all_cpu_call_rcu_data()`.
        #[no_mangle]
        pub extern "C" fn $free_all() {
            crate::boundary::FFI.guarded(stringify!($free_all), call_rcu::free_all_cpu::<$F>)
        }

        /// `call_rcu_before_fork()`: runs rculfhash's hook (rcukit needs nothing).
        #[no_mangle]
        pub extern "C" fn $before() {
            crate::boundary::FFI.guarded(stringify!($before), || {
                call_rcu::fork_hook::<$F>(ForkPhase::Before)
            })
        }

        /// `call_rcu_after_fork_parent()`: runs rculfhash's hook.
        #[no_mangle]
        pub extern "C" fn $parent() {
            crate::boundary::FFI.guarded(stringify!($parent), || {
                call_rcu::fork_hook::<$F>(ForkPhase::Parent)
            })
        }

        /// `call_rcu_after_fork_child()`: runs rculfhash's hook.
        #[no_mangle]
        pub extern "C" fn $child() {
            crate::boundary::FFI.guarded(stringify!($child), || {
                call_rcu::fork_hook::<$F>(ForkPhase::Child)
            })
        }

        /// `urcu_register_rculfhash_atfork(atfork)`.
        #[no_mangle]
        pub extern "C" fn $register_atfork(atfork: *mut urcu_atfork) {
            crate::boundary::FFI.guarded(stringify!($register_atfork), || {
                call_rcu::register_atfork::<$F>(atfork)
            })
        }

        /// `urcu_unregister_rculfhash_atfork(atfork)`.
        #[no_mangle]
        pub extern "C" fn $unregister_atfork(_atfork: *mut urcu_atfork) {
            crate::boundary::FFI.guarded(
                stringify!($unregister_atfork),
                call_rcu::unregister_atfork::<$F>,
            )
        }

        /// `defer_rcu(fct, p)`: `fct(p)` on a callback worker after a grace period.
        ///
        /// # Safety
        ///
        /// Calling `fct(p)` once, on any thread, after a grace period, is sound.
        #[no_mangle]
        pub unsafe extern "C" fn $defer(
            fct: Option<unsafe extern "C" fn(*mut c_void)>,
            p: *mut c_void,
        ) {
            // SAFETY: forwarded to the caller.
            unsafe { defer::defer::<$F>(stringify!($defer), fct, p) }
        }

        /// `rcu_defer_register_thread()`: not needed; always 0.
        #[no_mangle]
        pub extern "C" fn $defer_register() -> c_int {
            0
        }

        /// `rcu_defer_unregister_thread()`: waits for the deferred work, as liburcu's flushes it.
        #[no_mangle]
        pub extern "C" fn $defer_unregister() {
            defer::barrier::<$F>(stringify!($defer_unregister))
        }

        /// `rcu_defer_barrier()`.
        #[no_mangle]
        pub extern "C" fn $defer_barrier() {
            defer::barrier::<$F>(stringify!($defer_barrier))
        }

        /// `rcu_defer_barrier_thread()`.
        #[no_mangle]
        pub extern "C" fn $defer_barrier_thread() {
            defer::barrier::<$F>(stringify!($defer_barrier_thread))
        }

        /// `rcu_defer_exit()`: nothing to do.
        #[no_mangle]
        pub extern "C" fn $defer_exit() {}

        /// `start_poll_synchronize_rcu()`.
        #[no_mangle]
        pub extern "C" fn $start_poll() -> urcu_gp_poll_state {
            crate::boundary::FFI.guarded(stringify!($start_poll), poll::start::<$F>)
        }

        /// `poll_state_synchronize_rcu(state)`.
        #[no_mangle]
        pub extern "C" fn $poll_state(state: urcu_gp_poll_state) -> bool {
            crate::boundary::FFI.guarded(stringify!($poll_state), || poll::poll::<$F>(state))
        }
    };
}

flavor_exports! {
    flavor: Memb,
    call_rcu: urcu_memb_call_rcu,
    barrier: urcu_memb_barrier,
    create_call_rcu_data: urcu_memb_create_call_rcu_data,
    call_rcu_data_free: urcu_memb_call_rcu_data_free,
    get_default_call_rcu_data: urcu_memb_get_default_call_rcu_data,
    get_cpu_call_rcu_data: urcu_memb_get_cpu_call_rcu_data,
    set_cpu_call_rcu_data: urcu_memb_set_cpu_call_rcu_data,
    get_thread_call_rcu_data: urcu_memb_get_thread_call_rcu_data,
    set_thread_call_rcu_data: urcu_memb_set_thread_call_rcu_data,
    get_call_rcu_data: urcu_memb_get_call_rcu_data,
    get_call_rcu_thread: urcu_memb_get_call_rcu_thread,
    create_all_cpu_call_rcu_data: urcu_memb_create_all_cpu_call_rcu_data,
    free_all_cpu_call_rcu_data: urcu_memb_free_all_cpu_call_rcu_data,
    call_rcu_before_fork: urcu_memb_call_rcu_before_fork,
    call_rcu_after_fork_parent: urcu_memb_call_rcu_after_fork_parent,
    call_rcu_after_fork_child: urcu_memb_call_rcu_after_fork_child,
    register_rculfhash_atfork: urcu_memb_register_rculfhash_atfork,
    unregister_rculfhash_atfork: urcu_memb_unregister_rculfhash_atfork,
    defer_rcu: urcu_memb_defer_rcu,
    defer_register_thread: urcu_memb_defer_register_thread,
    defer_unregister_thread: urcu_memb_defer_unregister_thread,
    defer_barrier: urcu_memb_defer_barrier,
    defer_barrier_thread: urcu_memb_defer_barrier_thread,
    defer_exit: urcu_memb_defer_exit,
    start_poll_synchronize_rcu: urcu_memb_start_poll_synchronize_rcu,
    poll_state_synchronize_rcu: urcu_memb_poll_state_synchronize_rcu,
}

flavor_exports! {
    flavor: Qsbr,
    call_rcu: urcu_qsbr_call_rcu,
    barrier: urcu_qsbr_barrier,
    create_call_rcu_data: urcu_qsbr_create_call_rcu_data,
    call_rcu_data_free: urcu_qsbr_call_rcu_data_free,
    get_default_call_rcu_data: urcu_qsbr_get_default_call_rcu_data,
    get_cpu_call_rcu_data: urcu_qsbr_get_cpu_call_rcu_data,
    set_cpu_call_rcu_data: urcu_qsbr_set_cpu_call_rcu_data,
    get_thread_call_rcu_data: urcu_qsbr_get_thread_call_rcu_data,
    set_thread_call_rcu_data: urcu_qsbr_set_thread_call_rcu_data,
    get_call_rcu_data: urcu_qsbr_get_call_rcu_data,
    get_call_rcu_thread: urcu_qsbr_get_call_rcu_thread,
    create_all_cpu_call_rcu_data: urcu_qsbr_create_all_cpu_call_rcu_data,
    free_all_cpu_call_rcu_data: urcu_qsbr_free_all_cpu_call_rcu_data,
    call_rcu_before_fork: urcu_qsbr_call_rcu_before_fork,
    call_rcu_after_fork_parent: urcu_qsbr_call_rcu_after_fork_parent,
    call_rcu_after_fork_child: urcu_qsbr_call_rcu_after_fork_child,
    register_rculfhash_atfork: urcu_qsbr_register_rculfhash_atfork,
    unregister_rculfhash_atfork: urcu_qsbr_unregister_rculfhash_atfork,
    defer_rcu: urcu_qsbr_defer_rcu,
    defer_register_thread: urcu_qsbr_defer_register_thread,
    defer_unregister_thread: urcu_qsbr_defer_unregister_thread,
    defer_barrier: urcu_qsbr_defer_barrier,
    defer_barrier_thread: urcu_qsbr_defer_barrier_thread,
    defer_exit: urcu_qsbr_defer_exit,
    start_poll_synchronize_rcu: urcu_qsbr_start_poll_synchronize_rcu,
    poll_state_synchronize_rcu: urcu_qsbr_poll_state_synchronize_rcu,
}

/// The memb flavor's table (liburcu's `urcu_memb_flavor`, used by rculfhash and friends).
#[no_mangle]
pub static urcu_memb_flavor: rcu_flavor_struct = rcu_flavor_struct {
    read_lock: memb::urcu_memb_read_lock,
    read_unlock: memb::urcu_memb_read_unlock,
    read_ongoing: memb::urcu_memb_read_ongoing,
    read_quiescent_state: memb::nothing,
    update_call_rcu: urcu_memb_call_rcu,
    update_synchronize_rcu: memb::urcu_memb_synchronize_rcu,
    update_defer_rcu: urcu_memb_defer_rcu,
    thread_offline: memb::nothing,
    thread_online: memb::nothing,
    register_thread: memb::urcu_memb_register_thread,
    unregister_thread: memb::urcu_memb_unregister_thread,
    barrier: urcu_memb_barrier,
    register_rculfhash_atfork: urcu_memb_register_rculfhash_atfork,
    unregister_rculfhash_atfork: urcu_memb_unregister_rculfhash_atfork,
};

/// The qsbr flavor's table (liburcu's `urcu_qsbr_flavor`).
#[no_mangle]
pub static urcu_qsbr_flavor: rcu_flavor_struct = rcu_flavor_struct {
    read_lock: qsbr::urcu_qsbr_read_lock,
    read_unlock: qsbr::urcu_qsbr_read_unlock,
    read_ongoing: qsbr::urcu_qsbr_read_ongoing,
    read_quiescent_state: qsbr::urcu_qsbr_quiescent_state,
    update_call_rcu: urcu_qsbr_call_rcu,
    update_synchronize_rcu: qsbr::urcu_qsbr_synchronize_rcu,
    update_defer_rcu: urcu_qsbr_defer_rcu,
    thread_offline: qsbr::urcu_qsbr_thread_offline,
    thread_online: qsbr::urcu_qsbr_thread_online,
    register_thread: qsbr::urcu_qsbr_register_thread,
    unregister_thread: qsbr::urcu_qsbr_unregister_thread,
    barrier: urcu_qsbr_barrier,
    register_rculfhash_atfork: urcu_qsbr_register_rculfhash_atfork,
    unregister_rculfhash_atfork: urcu_qsbr_unregister_rculfhash_atfork,
};
