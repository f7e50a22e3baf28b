//! liburcu (memb and qsbr flavors, and the rculfhash hash table) and Concurrency Kit's
//! ck_epoch, through the C shims in `csrc/` (feature `c-peers`).
//!
//! liburcu's read-side primitives are inline functions, and a foreign call per operation
//! would cost more than the operation, so each shim runs a whole loop in C (see
//! `csrc/lab_c_peers.h`); the functions here only make those loops safe to call. The
//! rculfhash table ([`Lfht`], for `conntrack`) is called one lookup at a time: a hash-table
//! lookup costs far more than the call.

use std::sync::atomic::AtomicI32;

mod ffi {
    use std::os::raw::c_int;

    extern "C" {
        pub(super) fn lab_urcu_memb_read_loop(pp: *const *mut u64, iters: u64) -> u64;
        pub(super) fn lab_urcu_qsbr_read_loop(
            pp: *const *mut u64,
            iters: u64,
            qs_every: u64,
        ) -> u64;
        pub(super) fn lab_ck_epoch_read_loop(pp: *const *mut u64, iters: u64) -> u64;
        pub(super) fn lab_urcu_memb_busy_reader(stop: *const c_int);
        pub(super) fn lab_urcu_qsbr_busy_reader(stop: *const c_int);
        pub(super) fn lab_ck_epoch_busy_reader(stop: *const c_int);
        pub(super) fn lab_urcu_memb_synchronize();
        pub(super) fn lab_urcu_qsbr_synchronize();
        pub(super) fn lab_ck_epoch_synchronize();
        pub(super) fn lab_urcu_memb_retire(n: u64) -> u64;
        pub(super) fn lab_urcu_memb_shape_reader(stop: *const c_int) -> u64;
        pub(super) fn lab_urcu_memb_shape_writer(stop: *const c_int) -> u64;
        pub(super) fn lab_urcu_qsbr_shape_reader(stop: *const c_int, qs_every: u64) -> u64;
        pub(super) fn lab_urcu_qsbr_shape_writer(stop: *const c_int) -> u64;
        pub(super) fn lab_ck_epoch_retire(n: u64) -> u64;
    }
}

/// The C flavors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// liburcu's memb flavor (membarrier, the default liburcu).
    UrcuMemb,
    /// liburcu's qsbr flavor.
    UrcuQsbr,
    /// Concurrency Kit's ck_epoch.
    CkEpoch,
}

/// A `u64` the C read loops dereference: a pointer that is never changed while they run.
pub struct Target {
    ptr: *mut u64,
}

// SAFETY: the pointee is only read, and freed in `Drop` when no loop can be running (loops
// borrow the `Target`).
unsafe impl Send for Target {}
// SAFETY: as above: shared access is read-only.
unsafe impl Sync for Target {}

impl Target {
    /// A target holding `value`.
    pub fn new(value: u64) -> Target {
        Target {
            ptr: Box::into_raw(Box::new(value)),
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        // SAFETY: created by `Box::into_raw` in `new`; no loop borrows `self` any more.
        drop(unsafe { Box::from_raw(self.ptr) });
    }
}

/// Run `iters` read-side sections of `flavor`, each loading `target`; returns the sum.
/// liburcu qsbr readers announce a quiescent state every `qs_every` sections.
pub fn read_loop(flavor: Flavor, target: &Target, iters: u64, qs_every: u64) -> u64 {
    let pp: *const *mut u64 = &target.ptr;
    // SAFETY: `pp` points to a valid pointer to a live `u64` for the whole call (`target` is
    // borrowed); the shims register and unregister the calling thread themselves.
    unsafe {
        match flavor {
            Flavor::UrcuMemb => ffi::lab_urcu_memb_read_loop(pp, iters),
            Flavor::UrcuQsbr => ffi::lab_urcu_qsbr_read_loop(pp, iters, qs_every),
            Flavor::CkEpoch => ffi::lab_ck_epoch_read_loop(pp, iters),
        }
    }
}

/// Loop short read-side sections of `flavor` until `stop` is non-zero.
pub fn busy_reader(flavor: Flavor, stop: &AtomicI32) {
    let p = stop.as_ptr() as *const std::os::raw::c_int;
    // SAFETY: `stop` outlives the call; the shim only reads it (volatile), and it is an
    // `AtomicI32`, so concurrent stores from Rust are fine.
    unsafe {
        match flavor {
            Flavor::UrcuMemb => ffi::lab_urcu_memb_busy_reader(p),
            Flavor::UrcuQsbr => ffi::lab_urcu_qsbr_busy_reader(p),
            Flavor::CkEpoch => ffi::lab_ck_epoch_busy_reader(p),
        }
    }
}

/// One grace period of `flavor` (the calling thread must not be one of its readers, which
/// no safe code in the lab makes it).
pub fn synchronize(flavor: Flavor) {
    // SAFETY: the shims take no arguments; the calling thread is not inside a read-side
    // section of the flavor (the read loops leave theirs before returning).
    unsafe {
        match flavor {
            Flavor::UrcuMemb => ffi::lab_urcu_memb_synchronize(),
            Flavor::UrcuQsbr => ffi::lab_urcu_qsbr_synchronize(),
            Flavor::CkEpoch => ffi::lab_ck_epoch_synchronize(),
        }
    }
}

/// A reader of liburcu's test_urcu shape: read-side sections that load and check a shared
/// value until `stop` is non-zero (qsbr: a quiescent state every `qs_every`); the sections
/// made. `None` for ck_epoch, which the shape does not cover.
pub fn shape_reader(flavor: Flavor, stop: &AtomicI32, qs_every: u64) -> Option<u64> {
    let p = stop.as_ptr() as *const std::os::raw::c_int;
    // SAFETY: as in `busy_reader`; the shims register and unregister the calling thread and
    // only read the shared pointer their writer publishes.
    unsafe {
        match flavor {
            Flavor::UrcuMemb => Some(ffi::lab_urcu_memb_shape_reader(p)),
            Flavor::UrcuQsbr => Some(ffi::lab_urcu_qsbr_shape_reader(p, qs_every)),
            Flavor::CkEpoch => None,
        }
    }
}

/// The writer of liburcu's test_urcu shape: publish, `synchronize_rcu`, poison and free until
/// `stop` is non-zero; the grace periods waited for. One writer per flavor at a time.
pub fn shape_writer(flavor: Flavor, stop: &AtomicI32) -> Option<u64> {
    let p = stop.as_ptr() as *const std::os::raw::c_int;
    // SAFETY: as in `busy_reader`; the calling thread is not a reader of the flavor, and the
    // lab runs one shape writer of a flavor at a time (the shims keep one shared pointer).
    unsafe {
        match flavor {
            Flavor::UrcuMemb => Some(ffi::lab_urcu_memb_shape_writer(p)),
            Flavor::UrcuQsbr => Some(ffi::lab_urcu_qsbr_shape_writer(p)),
            Flavor::CkEpoch => None,
        }
    }
}

/// Retire `n` objects through `flavor`'s callback API and wait for them all; the number
/// freed, or `None` for a flavor the lab does not retire through (qsbr shares liburcu's
/// call_rcu machinery with memb).
pub fn retire(flavor: Flavor, n: u64) -> Option<u64> {
    // SAFETY: the shims allocate, queue and free their own objects.
    unsafe {
        match flavor {
            Flavor::UrcuMemb => Some(ffi::lab_urcu_memb_retire(n)),
            Flavor::CkEpoch => Some(ffi::lab_ck_epoch_retire(n)),
            Flavor::UrcuQsbr => None,
        }
    }
}

// ----------------------------------------------------------------------------------------------
// rculfhash (the `conntrack` experiment)

mod lfht_ffi {
    /// `struct lab_lfht` (opaque).
    #[repr(C)]
    pub(super) struct LabLfht {
        _private: [u8; 0],
    }

    extern "C" {
        pub(super) fn lab_lfht_hash(w0: u64, w1: u64) -> u64;
        pub(super) fn lab_lfht_new(capacity: u64) -> *mut LabLfht;
        pub(super) fn lab_lfht_register_thread();
        pub(super) fn lab_lfht_unregister_thread();
        pub(super) fn lab_lfht_lookup(t: *mut LabLfht, w0: u64, w1: u64, aux: *mut u64) -> u64;
        pub(super) fn lab_lfht_insert(
            t: *mut LabLfht,
            w0: u64,
            w1: u64,
            id: u64,
            created: u64,
            expires: u64,
            packets: u64,
            bytes: u64,
        ) -> i32;
        pub(super) fn lab_lfht_remove(t: *mut LabLfht, w0: u64, w1: u64) -> i32;
        pub(super) fn lab_lfht_len(t: *mut LabLfht) -> u64;
        pub(super) fn lab_lfht_destroy(t: *mut LabLfht) -> u64;
    }
}

/// The C side's hash of a two-word key (must equal the Rust maps' `FlowHasher`).
pub fn lfht_hash(w0: u64, w1: u64) -> u64 {
    // SAFETY: a pure function of its arguments.
    unsafe { lfht_ffi::lab_lfht_hash(w0, w1) }
}

/// The calling thread's registration as a liburcu memb reader, which every rculfhash call
/// needs. Not `Send`: it must be dropped (unregistered) on the thread that made it.
pub struct LfhtThread {
    _not_send: std::marker::PhantomData<*const ()>,
}

/// A flow record as the C table stores it.
#[derive(Clone, Copy, Debug)]
pub struct LfhtRecord {
    /// The flow's id.
    pub id: u64,
    /// When it was created (the writer's clock).
    pub created: u64,
    /// When it expires.
    pub expires: u64,
    /// Packets seen.
    pub packets: u64,
    /// Bytes seen.
    pub bytes: u64,
}

/// liburcu's `cds_lfht` (memb flavor, auto-resizing) holding two-word keys and flow records.
/// Every method takes the calling thread's [`LfhtThread`], so no call is made unregistered.
pub struct Lfht {
    table: *mut lfht_ffi::LabLfht,
    destroyed: Option<u64>,
}

// SAFETY: the C table is a concurrent hash table: lookups, inserts and removals from any
// registered thread are safe together; destruction needs `&mut self`.
unsafe impl Send for Lfht {}
// SAFETY: as above.
unsafe impl Sync for Lfht {}

impl Lfht {
    /// An empty table sized for `capacity` flows; `None` if liburcu cannot allocate it.
    pub fn new(capacity: u64) -> Option<Lfht> {
        // SAFETY: allocates a new table; no registration needed (liburcu's documentation).
        let table = unsafe { lfht_ffi::lab_lfht_new(capacity) };
        (!table.is_null()).then_some(Lfht {
            table,
            destroyed: None,
        })
    }

    /// Register the calling thread (until the returned value is dropped).
    pub fn register(&self) -> LfhtThread {
        // SAFETY: the lab never registers a thread twice: each `LfhtThread` is made once per
        // thread and unregisters on drop.
        unsafe { lfht_ffi::lab_lfht_register_thread() };
        LfhtThread {
            _not_send: std::marker::PhantomData,
        }
    }

    /// The flow's (id, expiry), looked up under one read-side critical section.
    #[inline]
    pub fn lookup(&self, _me: &LfhtThread, w0: u64, w1: u64) -> Option<(u64, u64)> {
        let mut aux = 0u64;
        // SAFETY: the table is live (`&self`), the thread registered (`_me`), `aux` valid.
        let id = unsafe { lfht_ffi::lab_lfht_lookup(self.table, w0, w1, &mut aux) };
        (id != u64::MAX).then_some((id, aux))
    }

    /// Insert or replace; `true` if a flow was replaced.
    pub fn insert(&self, _me: &LfhtThread, w0: u64, w1: u64, r: LfhtRecord) -> bool {
        // SAFETY: as in `lookup`.
        unsafe {
            lfht_ffi::lab_lfht_insert(
                self.table, w0, w1, r.id, r.created, r.expires, r.packets, r.bytes,
            ) != 0
        }
    }

    /// Remove; `true` if the flow was there.
    pub fn remove(&self, _me: &LfhtThread, w0: u64, w1: u64) -> bool {
        // SAFETY: as in `lookup`.
        unsafe { lfht_ffi::lab_lfht_remove(self.table, w0, w1) != 0 }
    }

    /// Flows in the table (a traversal: exact when no writer runs).
    pub fn len(&self, _me: &LfhtThread) -> u64 {
        // SAFETY: as in `lookup`.
        unsafe { lfht_ffi::lab_lfht_len(self.table) }
    }

    /// Remove every flow, wait for their grace periods, free the table; the number of flows
    /// freed over the table's life. Call it from a thread that holds no [`LfhtThread`].
    pub fn destroy(&mut self) -> u64 {
        if let Some(freed) = self.destroyed {
            return freed;
        }
        // SAFETY: `&mut self`: no other thread uses the table; the C side registers the
        // calling thread itself (callers hold no `LfhtThread`, as documented).
        let freed = unsafe { lfht_ffi::lab_lfht_destroy(self.table) };
        self.table = std::ptr::null_mut();
        self.destroyed = Some(freed);
        freed
    }
}

impl Drop for Lfht {
    fn drop(&mut self) {
        if self.destroyed.is_none() {
            self.destroy();
        }
    }
}

impl Drop for LfhtThread {
    fn drop(&mut self) {
        // SAFETY: made by `Lfht::register` on this thread (the type is not `Send`).
        unsafe { lfht_ffi::lab_lfht_unregister_thread() };
    }
}
