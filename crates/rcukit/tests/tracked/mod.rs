//! Test values that detect early reclamation, torn reads and double drops, and an allocator
//! that keeps freed test values in quarantine so that detection does not depend on luck.
//!
//! A [`Tracked`] value carries a state word (`LIVE` until it is dropped, then `DEAD`) and a
//! payload derived from its id. Readers call [`Tracked::check`]: a value dropped while a reader
//! could still reach it shows up as `DEAD`, a value read before it was fully published as a
//! payload that does not match its id.
//!
//! Reading a value after it was freed is undefined behaviour, so a *correct* implementation
//! must never let it happen; these helpers only make a *broken* one fail loudly and
//! reproducibly instead of randomly: [`Quarantine`] (installed as the global allocator of the
//! test binaries that use this module) does not hand the memory of a dropped `Tracked` (or of a
//! list node holding one) back to the system until 16,384 later such frees have happened, so
//! the `DEAD` mark stays readable instead of being overwritten by a new value. The state is an
//! atomic, so the drop's write and a late reader's read are not a data race either.

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};

const LIVE: u64 = 0x4c49_5645_4c49_5645;
const DEAD: u64 = 0xdead_dead_dead_dead;
const PAYLOAD: usize = 6;

/// The alignment that marks an allocation as a tracked value (or a node holding one): large
/// and unusual, so that nothing else in the test binary is quarantined.
pub(crate) const QUARANTINE_ALIGN: usize = 256;
const QUARANTINE_SLOTS: usize = 1 << 14;

/// Counts of one test's values.
#[derive(Default, Debug)]
pub(crate) struct Counts {
    pub created: AtomicUsize,
    pub dropped: AtomicUsize,
    pub double_drops: AtomicUsize,
}

impl Counts {
    /// Counters that live for the rest of the process (values may be dropped by callback
    /// workers after the test's stack frame is gone only if a test is broken; leaking keeps
    /// even that case free of use-after-free).
    pub(crate) fn leak() -> &'static Counts {
        Box::leak(Box::default())
    }

    pub(crate) fn created(&self) -> usize {
        self.created.load(Acquire)
    }

    pub(crate) fn dropped(&self) -> usize {
        self.dropped.load(Acquire)
    }

    pub(crate) fn live(&self) -> usize {
        self.created() - self.dropped()
    }
}

/// A value that knows whether it has been dropped.
#[repr(C, align(256))]
pub(crate) struct Tracked {
    state: AtomicU64,
    id: u64,
    payload: [u64; PAYLOAD],
    counts: &'static Counts,
}

fn word(id: u64, i: usize) -> u64 {
    id.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .rotate_left(i as u32 * 7)
        ^ i as u64
}

impl Tracked {
    pub(crate) fn new(id: u64, counts: &'static Counts) -> Tracked {
        counts.created.fetch_add(1, Relaxed);
        Tracked {
            state: AtomicU64::new(LIVE),
            id,
            payload: std::array::from_fn(|i| word(id, i)),
            counts,
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Panics unless the value is alive and whole.
    #[track_caller]
    pub(crate) fn check(&self) {
        let state = self.state.load(Acquire);
        assert_ne!(
            state, DEAD,
            "a reader saw a dropped value (early reclamation)"
        );
        assert_eq!(
            state, LIVE,
            "a reader saw a value that was never initialised"
        );
        for (i, w) in self.payload.iter().enumerate() {
            assert_eq!(
                *w,
                word(self.id, i),
                "a reader saw a torn value (id {})",
                self.id
            );
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if self.state.swap(DEAD, Release) != LIVE {
            self.counts.double_drops.fetch_add(1, Relaxed);
        }
        self.counts.dropped.fetch_add(1, Release);
    }
}

/// The system allocator, except that frees of `QUARANTINE_ALIGN`-aligned blocks are delayed
/// by `QUARANTINE_SLOTS` such frees (a FIFO quarantine, as in AddressSanitizer).
pub(crate) struct Quarantine;

struct Ring {
    slots: [(*mut u8, usize); QUARANTINE_SLOTS],
    next: usize,
}

struct RingCell {
    busy: AtomicBool,
    ring: UnsafeCell<Ring>,
}

// SAFETY: `ring` is only accessed while `busy` is held (a spin lock that never allocates).
unsafe impl Sync for RingCell {}

static RING: RingCell = RingCell {
    busy: AtomicBool::new(false),
    ring: UnsafeCell::new(Ring {
        slots: [(std::ptr::null_mut(), 0); QUARANTINE_SLOTS],
        next: 0,
    }),
};

// SAFETY: every block is allocated and freed by `System` with the layout it was allocated
// with; quarantined blocks are only freed later, once, when they leave the ring.
unsafe impl GlobalAlloc for Quarantine {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.align() != QUARANTINE_ALIGN {
            // SAFETY: forwarded.
            return unsafe { System.dealloc(ptr, layout) };
        }
        while RING
            .busy
            .compare_exchange_weak(false, true, Acquire, Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        // SAFETY: the spin lock is held.
        let ring = unsafe { &mut *RING.ring.get() };
        let slot = ring.next;
        let (old, old_size) = std::mem::replace(&mut ring.slots[slot], (ptr, layout.size()));
        ring.next = (slot + 1) % QUARANTINE_SLOTS;
        RING.busy.store(false, Release);
        if !old.is_null() {
            // SAFETY: `old` was allocated by `System` with this size and alignment and entered
            // the ring exactly once.
            unsafe {
                System.dealloc(
                    old,
                    Layout::from_size_align_unchecked(old_size, QUARANTINE_ALIGN),
                )
            };
        }
    }
}

/// Small deterministic PRNG for the tests.
pub(crate) struct XorShift(pub u64);

impl XorShift {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// How long a stress test runs, and how many writes it does at most (small under miri).
pub(crate) fn budget() -> (std::time::Duration, u64) {
    if cfg!(miri) {
        (std::time::Duration::from_secs(3600), 12)
    } else {
        (std::time::Duration::from_millis(800), u64::MAX)
    }
}
