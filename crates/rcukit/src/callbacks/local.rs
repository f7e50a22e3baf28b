#![doc = include_str!("local.md")]

use super::callback::Callback;
use super::invoke::Few;
use super::port::ReleasedBy;
use crate::barrier::{self, FenceKind, Heavy};
use crate::seq::GpCookie;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Backoff, UnsafeCell};
use std::collections::VecDeque;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::time::{Duration, Instant};

/// A block is sealed when it holds this many callbacks...
pub(crate) const BLOCK: usize = if cfg!(rcukit_small) { 4 } else { 256 };

/// ... or when it holds this many bytes (large objects: a few of them are a block's worth of
/// memory) ...
pub(crate) const SEAL_BYTES: u64 = if cfg!(rcukit_small) { 256 } else { 64 << 10 };

/// ... or when it has been open this long (checked every 64 callbacks, so that the clock is
/// read five times per full block).
pub(crate) const SEAL_AFTER: Duration = if cfg!(rcukit_small) {
    Duration::from_micros(20)
} else {
    Duration::from_millis(1)
};

/// The shortest time between two expedited grace periods a producer tries: each interrupts
/// the CPUs that run the process's other threads (readers among them) once, so a producer that
/// retires large objects back to back tries at most this often (and reuses the memory of a few
/// tens of microseconds' worth of objects rather than of a few).
pub(crate) const TRY_INTERVAL: Duration = if cfg!(rcukit_small) {
    Duration::ZERO
} else {
    Duration::from_micros(50)
};

/// Emptied block vectors a list keeps for reuse: enough for the blocks of a backlog between two
/// tried grace periods, so that a flood allocates no block vectors (a block vector is a large
/// allocation, and with many small objects freed in between, glibc consolidates its fast bins
/// on every large one).
const SPARE_BLOCKS: usize = if cfg!(rcukit_small) { 1 } else { 16 };

/// Every `DROP_EVERY`th `retire` drops that many ready objects, twice as many while the list
/// is long (see "Dropping a few at a time"): the list drains as fast as it fills, or twice as
/// fast, and no `retire` runs more than `FEW` drops.
pub(crate) const DROP_EVERY: u64 = 2;

/// The most ready objects one `retire` drops.
pub(crate) const FEW: usize = 2 * DROP_EVERY as usize;

/// The block a producer is filling: callbacks not yet stamped. The only way to a
/// [`SealedBlock`] is [`seal`](Self::seal), so a block that may run is always stamped.
struct OpenBlock {
    callbacks: Vec<Callback>,
    /// Bytes its callbacks account for.
    bytes: u64,
    /// When its first callback was added.
    opened_at: Option<Instant>,
}

impl OpenBlock {
    const fn empty() -> OpenBlock {
        OpenBlock {
            callbacks: Vec::new(),
            bytes: 0,
            opened_at: None,
        }
    }

    /// Stamp the block with `cookie`, read after its last callback was queued.
    fn seal(self, cookie: GpCookie) -> SealedBlock {
        SealedBlock {
            cookie,
            bytes: self.bytes,
            callbacks: self.callbacks,
        }
    }
}

/// Callbacks stamped with one cookie: they may run once it has been released.
pub(crate) struct SealedBlock {
    cookie: GpCookie,
    bytes: u64,
    callbacks: Vec<Callback>,
}

impl SealedBlock {
    /// The stamp.
    pub(crate) fn cookie(&self) -> &GpCookie {
        &self.cookie
    }

    pub(crate) fn len(&self) -> usize {
        self.callbacks.len()
    }

    /// Bytes its callbacks account for.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The callbacks, to run (once the stamp is released) or to stamp again.
    pub(crate) fn into_callbacks(self) -> Vec<Callback> {
        self.callbacks
    }
}

/// What a steal or a flush takes out of a list: sealed blocks oldest first, then the open
/// callbacks.
#[derive(Default)]
pub(crate) struct Taken {
    pub(crate) blocks: Vec<SealedBlock>,
    pub(crate) open: Vec<Callback>,
}

impl Taken {
    /// Every callback, oldest first.
    pub(crate) fn into_callbacks(self) -> impl Iterator<Item = Callback> {
        self.blocks
            .into_iter()
            .flat_map(SealedBlock::into_callbacks)
            .chain(self.open)
    }
}

/// What the owner does after [`LocalList::push`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Nothing more.
    Nothing,
    /// Seal the open block (then look whether the oldest sealed block is ready).
    Seal,
    /// Look whether the oldest sealed block is ready (every 16 callbacks while it is not known
    /// to be, so that a grace period's end is noticed without waiting for the next seal).
    Poll,
}

/// A producer's list (single-threaded; [`LocalRetires`] guards it).
pub(crate) struct LocalList {
    open: OpenBlock,
    sealed: VecDeque<SealedBlock>,
    /// Callbacks and bytes in `open` and `sealed`.
    len: usize,
    bytes: u64,
    /// Callbacks and bytes sealed since the owner last tried an expedited grace period.
    since_try: (u64, u64),
    /// The stamp of a tried grace period that gave up (a reader was in the way): no new try
    /// until it has been released, by the helper that finishes it or otherwise.
    try_gave_up: Option<GpCookie>,
    /// When the owner last tried an expedited grace period.
    last_try: Option<Instant>,
    /// The oldest sealed block is known to be released, and by which kind of grace period: its
    /// callbacks may be taken a few at a time. Cleared whenever the oldest block leaves.
    front_released: Option<ReleasedBy>,
    /// Emptied vectors, to refill.
    spare: Vec<Vec<Callback>>,
}

impl LocalList {
    fn new() -> LocalList {
        LocalList {
            open: OpenBlock::empty(),
            sealed: VecDeque::new(),
            len: 0,
            bytes: 0,
            since_try: (0, 0),
            try_gave_up: None,
            last_try: None,
            front_released: None,
            spare: Vec::new(),
        }
    }

    /// Add a callback. Returns what the owner should do next.
    #[inline]
    pub(crate) fn push(&mut self, callback: Callback) -> Next {
        let open = &mut self.open;
        if open.callbacks.capacity() == 0 {
            open.callbacks = self
                .spare
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(BLOCK));
        }
        let bytes = callback.bytes() as u64;
        self.len += 1;
        self.bytes += bytes;
        open.bytes += bytes;
        open.callbacks.push(callback);
        let n = open.callbacks.len();
        if n >= BLOCK || open.bytes >= SEAL_BYTES {
            return Next::Seal;
        }
        if n == 1 {
            open.opened_at = Some(Instant::now());
            return Next::Nothing;
        }
        if n % 16 != 0 {
            return Next::Nothing;
        }
        if n % 64 == 0 && open.opened_at.is_some_and(|t| t.elapsed() > SEAL_AFTER) {
            Next::Seal
        } else if self.sealed.is_empty() || self.front_released.is_some() {
            Next::Nothing
        } else {
            Next::Poll
        }
    }

    /// The stamp of the oldest sealed block, if it is not yet known to be released.
    pub(crate) fn front_to_check(&self) -> Option<GpCookie> {
        match self.sealed.front() {
            Some(block) if self.front_released.is_none() => Some(block.cookie),
            _ => None,
        }
    }

    /// The oldest sealed block has been released, by a grace period of kind `by` (its stamp
    /// checked by the caller).
    pub(crate) fn release_front(&mut self, by: ReleasedBy) {
        debug_assert!(!self.sealed.is_empty());
        self.front_released = Some(by);
    }

    /// Move callbacks of the oldest block into `out` if it is known to be released:
    /// [`DROP_EVERY`], or [`FEW`] while more than `backlog` callbacks wait in the list. Returns
    /// which kind of grace period released them (for the statistics, counted as they are
    /// dropped: a block taken by a steal before it is empty counts the rest where they run).
    #[inline]
    pub(crate) fn take_few(&mut self, out: &mut Few, backlog: usize) -> Option<ReleasedBy> {
        let by = self.front_released?;
        let want = if self.len > backlog {
            FEW
        } else {
            DROP_EVERY as usize
        };
        // Sealed blocks are never empty, and the released one leaves as soon as it is.
        while out.len() < want {
            let block = self.sealed.front_mut().expect("a released block");
            let callback = block
                .callbacks
                .pop()
                .expect("sealed blocks are never empty");
            let bytes = callback.bytes() as u64;
            block.bytes -= bytes;
            self.len -= 1;
            self.bytes -= bytes;
            out.push(callback);
            if block.callbacks.is_empty() {
                let empty = self.sealed.pop_front().expect("a released block");
                self.front_released = None;
                self.recycle(empty.callbacks);
                break;
            }
        }
        Some(by)
    }

    /// Seal the open block with `cookie`, read after its last callback was queued.
    pub(crate) fn seal(&mut self, cookie: GpCookie) {
        if self.open.callbacks.is_empty() {
            return;
        }
        let open = std::mem::replace(&mut self.open, OpenBlock::empty());
        self.since_try.0 += open.callbacks.len() as u64;
        self.since_try.1 += open.bytes;
        self.sealed.push_back(open.seal(cookie));
    }

    /// Has the owner sealed `callbacks` callbacks or `bytes` bytes since it last tried an
    /// expedited grace period, and has the last try that gave up been `released` since? If so,
    /// start counting again and say yes.
    pub(crate) fn try_due(
        &mut self,
        callbacks: u64,
        bytes: u64,
        released: impl Fn(&GpCookie) -> bool,
    ) -> bool {
        if self.since_try.0 < callbacks && self.since_try.1 < bytes {
            return false;
        }
        if self.try_gave_up.is_some_and(|stamp| !released(&stamp)) {
            return false; // the reader in the way is still there, most likely
        }
        let now = Instant::now();
        if self
            .last_try
            .is_some_and(|t| now.duration_since(t) < TRY_INTERVAL)
        {
            return false;
        }
        self.last_try = Some(now);
        self.try_gave_up = None;
        self.since_try = (0, 0);
        true
    }

    /// A tried grace period for `stamp` gave up: try no other until `stamp` is released.
    pub(crate) fn try_gave_up(&mut self, stamp: GpCookie) {
        self.try_gave_up = Some(stamp);
    }

    /// The cookie of the newest sealed block.
    pub(crate) fn newest_cookie(&self) -> Option<GpCookie> {
        self.sealed.back().map(|b| b.cookie)
    }

    /// Give an emptied vector back for reuse, and memory back after a flood (blocks are
    /// small, but a long flood makes many).
    fn recycle(&mut self, mut v: Vec<Callback>) {
        debug_assert!(v.is_empty());
        v.clear();
        if self.spare.len() < SPARE_BLOCKS && v.capacity() >= BLOCK {
            self.spare.push(v);
        }
        let capacity = self.sealed.capacity();
        if capacity > 64 && self.sealed.len() < capacity / 4 {
            self.sealed.shrink_to(self.sealed.len() * 2);
        }
    }

    /// Callbacks waiting here, and their bytes.
    pub(crate) fn backlog(&self) -> (usize, u64) {
        (self.len, self.bytes)
    }

    /// Take everything.
    pub(crate) fn take_all(&mut self) -> Taken {
        self.len = 0;
        self.bytes = 0;
        self.since_try = (0, 0);
        self.front_released = None;
        Taken {
            blocks: self.sealed.drain(..).collect(),
            open: std::mem::replace(&mut self.open, OpenBlock::empty()).callbacks,
        }
    }
}

/// One producer's list and the asymmetric lock around it (see the module docs).
pub(crate) struct LocalRetires {
    busy: AtomicBool,
    steal: AtomicBool,
    /// The owner is running blocks it took (see the module docs).
    dropping: AtomicBool,
    /// Incremented by the owner each time it finishes running blocks.
    drops_done: AtomicU64,
    /// Callbacks queued here so far (only the owner writes it).
    ops: AtomicU64,
    /// Callbacks in the list (a hint, stored by whoever last changed it).
    len: AtomicUsize,
    /// `ops` at the worker's previous look.
    seen_ops: AtomicU64,
    /// Set while a stealer works on this list: serializes stealers (only the shard's worker
    /// steals, so it is never contended). A flag rather than a mutex, so that a steal cut short
    /// by `fork()` can be undone in the child (see [`fork`](crate::docs::internal::domain::fork)).
    stealing: AtomicBool,
    list: UnsafeCell<LocalList>,
}

// SAFETY: `list` is only touched by the owner between a successful `enter` and the guard's
// drop, or by a stealer between seeing `busy == false` with `steal` set and clearing `steal`;
// the module docs show these never overlap and hand the contents over with Release/Acquire.
// The callbacks in it are `Send`.
unsafe impl Sync for LocalRetires {}
// SAFETY: as above; the list's callbacks are `Send`.
unsafe impl Send for LocalRetires {}

impl LocalRetires {
    pub(crate) fn new() -> LocalRetires {
        LocalRetires {
            busy: AtomicBool::new(false),
            steal: AtomicBool::new(false),
            dropping: AtomicBool::new(false),
            drops_done: AtomicU64::new(0),
            ops: AtomicU64::new(0),
            len: AtomicUsize::new(0),
            seen_ops: AtomicU64::new(0),
            stealing: AtomicBool::new(false),
            list: UnsafeCell::new(LocalList::new()),
        }
    }

    /// The owner's side: the list, unless a steal is under way. Only the owning thread may
    /// call this.
    #[inline]
    pub(crate) fn enter(&self, fence: FenceKind) -> Option<OwnerGuard<'_>> {
        self.busy.store(true, Relaxed);
        barrier::light(fence);
        if self.steal.load(Acquire) {
            self.busy.store(false, Release);
            return None;
        }
        Some(OwnerGuard { local: self })
    }

    /// Count one callback queued here (owner only); returns how many so far.
    #[inline]
    pub(crate) fn count_op(&self) -> u64 {
        let ops = self.ops.load(Relaxed).wrapping_add(1);
        self.ops.store(ops, Relaxed);
        ops
    }

    /// Callbacks in the list (a hint).
    pub(crate) fn len(&self) -> usize {
        self.len.load(Relaxed)
    }

    /// The owner has run and counted the blocks it marked `dropping` for.
    #[inline]
    pub(crate) fn finished_dropping(&self) {
        self.drops_done
            .store(self.drops_done.load(Relaxed) + 1, Release);
        self.dropping.store(false, Release);
    }

    /// Has the owner queued nothing since the previous call of this (by the worker)? Only one
    /// thread (the shard's worker) may call this.
    pub(crate) fn idle_since_last_look(&self) -> bool {
        let ops = self.ops.load(Relaxed);
        let idle = ops == self.seen_ops.load(Relaxed);
        self.seen_ops.store(ops, Relaxed);
        idle
    }

    /// The stealer's side, for several lists at once (one heavy barrier for all): take
    /// everything from each, then wait until none of their owners is still running blocks it
    /// took before. Must not be called by an owner of one of the lists.
    pub(crate) fn steal_all(locals: &[&LocalRetires], fence: FenceKind) -> Vec<Taken> {
        Self::steal(locals, fence, true)
    }

    /// A broken steal for the loom model's busted variant: it does not wait for the owner's
    /// drops, so a barrier could return before an object the owner took is dropped.
    #[cfg(rcukit_loom)]
    pub(crate) fn steal_all_busted(locals: &[&LocalRetires], fence: FenceKind) -> Vec<Taken> {
        Self::steal(locals, fence, false)
    }

    fn steal(locals: &[&LocalRetires], fence: FenceKind, wait_for_drops: bool) -> Vec<Taken> {
        for local in locals {
            let mut backoff = Backoff::new();
            while local
                .stealing
                .compare_exchange(false, true, Acquire, Relaxed)
                .is_err()
            {
                backoff.snooze();
            }
        }
        for local in locals {
            local.steal.store(true, Relaxed);
        }
        barrier::heavy(fence, Heavy::Expedited);
        let mut taken = Vec::with_capacity(locals.len());
        for local in locals {
            let mut backoff = Backoff::new();
            while local.busy.load(Acquire) {
                backoff.snooze();
            }
            // SAFETY: `steal` is set and visible to the owner (heavy barrier) and the owner has
            // left its side (`busy == false`, Acquire): the list is ours until we clear `steal`.
            let t = local.list.with_mut(|list| unsafe { (*list).take_all() });
            local.len.store(0, Relaxed);
            // Blocks the owner took before it left: wait until they have run and been counted.
            if wait_for_drops && local.dropping.load(Acquire) {
                // (Acquire on both: whichever shows the drops finished also shows their
                // effects and counters.)
                let done = local.drops_done.load(Acquire);
                let mut backoff = Backoff::new();
                while local.dropping.load(Acquire) && local.drops_done.load(Acquire) == done {
                    backoff.snooze();
                }
            }
            local.steal.store(false, Release);
            taken.push(t);
        }
        for local in locals {
            local.stealing.store(false, Release);
        }
        taken
    }

    /// After `fork()` (see [`fork`](crate::docs::internal::domain::fork)): a steal that the
    /// vanished worker had under way is forgotten, and whatever the list holds is taken out
    /// (without waiting for drops the owner may be running) for the caller to abandon.
    pub(crate) fn take_after_fork(&self, fence: FenceKind) -> Taken {
        self.stealing.store(false, Relaxed);
        self.steal.store(false, Relaxed);
        Self::steal(&[self], fence, false)
            .pop()
            .expect("one list stolen")
    }
}

/// The owner's access to its list; leaving (dropping the guard) publishes the changes.
pub(crate) struct OwnerGuard<'a> {
    local: &'a LocalRetires,
}

impl OwnerGuard<'_> {
    /// Mark that blocks taken in this section will be run by the owner after it leaves; it
    /// must call [`LocalRetires::finished_dropping`] once they have run.
    #[inline]
    pub(crate) fn mark_dropping(&self) {
        self.local.dropping.store(true, Relaxed);
    }

    /// The list.
    #[inline]
    pub(crate) fn with<R>(&mut self, f: impl FnOnce(&mut LocalList) -> R) -> R {
        // SAFETY: we are inside the owner's side of the lock (see `enter`), and `&mut self`
        // keeps this the only reference.
        self.local.list.with_mut(|list| f(unsafe { &mut *list }))
    }
}

impl Drop for OwnerGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        let len = self.with(|list| list.len);
        self.local.len.store(len, Relaxed);
        self.local.busy.store(false, Release);
    }
}
