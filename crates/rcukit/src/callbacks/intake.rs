#![doc = include_str!("intake.md")]

use super::callback::Work;
use crate::sync::{AtomicBool, AtomicPtr, AtomicUsize, Mutex, UnsafeCell};
use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::time::{Duration, Instant};

/// Slots per chunk.
pub(crate) const CHUNK_LEN: usize = if cfg!(rcukit_small) { 4 } else { 64 };

/// A producer nudges a worker that waits for a grace period once per this many entries.
pub(crate) const NUDGE_EVERY: usize = if cfg!(rcukit_small) { 4 } else { 1024 };

/// A producer's block of slots.
pub(crate) struct Chunk {
    /// Link in the shard's chunk stack.
    next: AtomicPtr<Chunk>,
    /// Slots published so far (written by the producer only).
    filled: AtomicUsize,
    /// The producer will write no more slots.
    sealed: AtomicBool,
    /// Owners left (producer and worker); the last one frees the chunk.
    owners: AtomicUsize,
    slots: [UnsafeCell<MaybeUninit<Work>>; CHUNK_LEN],
}

impl Chunk {
    fn alloc(owners: usize) -> *mut Chunk {
        Box::into_raw(Box::new(Chunk {
            next: AtomicPtr::new(ptr::null_mut()),
            filled: AtomicUsize::new(0),
            sealed: AtomicBool::new(false),
            owners: AtomicUsize::new(owners),
            slots: std::array::from_fn(|_| UnsafeCell::new(MaybeUninit::uninit())),
        }))
    }

    /// Give up one owner's share; free the chunk if it was the last.
    ///
    /// # Safety
    ///
    /// The caller holds one of the chunk's shares and does not use the chunk afterwards.
    unsafe fn release(chunk: *mut Chunk) {
        // SAFETY: forwarded from the caller.
        if let Some(chunk) = unsafe { Chunk::release_share(chunk) } {
            // SAFETY: that was the last share: nobody else can reach the chunk. Slots not taken
            // (only possible if a domain is torn down abnormally) are leaked, not run.
            drop(unsafe { Box::from_raw(chunk) });
        }
    }

    /// Give up one owner's share. Returns the chunk if that was the last share: the caller
    /// then owns it outright (to free or recycle).
    ///
    /// # Safety
    ///
    /// As for [`release`](Chunk::release).
    unsafe fn release_share(chunk: *mut Chunk) -> Option<*mut Chunk> {
        // SAFETY: the caller holds a share, so the chunk is alive.
        (unsafe { (*chunk).owners.fetch_sub(1, AcqRel) } == 1).then_some(chunk)
    }
}

/// Most drained chunks a shard keeps for reuse.
const MAX_SPARE_CHUNKS: usize = if cfg!(rcukit_small) { 1 } else { 16 };

/// Drained chunks kept for reuse, so that producers do not allocate a chunk the worker then
/// frees: with glibc malloc, frees of another thread's memory slow down both threads.
struct SpareChunks(Vec<*mut Chunk>);

// SAFETY: the chunks in the list are owned by nobody else (their last share was given up
// before they were put here); the list moves them between threads under its mutex.
unsafe impl Send for SpareChunks {}

/// The shard's stack of chunks that the worker has not picked up yet.
pub(crate) struct Intake {
    head: AtomicPtr<Chunk>,
    spare: Mutex<SpareChunks>,
}

impl Intake {
    pub(crate) fn new() -> Intake {
        Intake {
            head: AtomicPtr::new(ptr::null_mut()),
            spare: Mutex::new(SpareChunks(Vec::new())),
        }
    }

    /// A chunk with `owners` shares, nothing published and not sealed: a spare one if there
    /// is one, else a new one.
    fn fresh_chunk(&self, owners: usize) -> *mut Chunk {
        let Some(chunk) = self.spare.lock().0.pop() else {
            return Chunk::alloc(owners);
        };
        // SAFETY: spare chunks are owned by nobody else (see `recycle`); the stores below reset
        // it before it is shared again by `push_chunk`.
        unsafe {
            (*chunk).next.store(ptr::null_mut(), Relaxed);
            (*chunk).filled.store(0, Relaxed);
            (*chunk).sealed.store(false, Relaxed);
            (*chunk).owners.store(owners, Relaxed);
        }
        chunk
    }

    /// Keep a drained chunk for reuse (or free it if enough are kept).
    ///
    /// # Safety
    ///
    /// The caller owns `chunk` outright (it gave up the last share) and every published slot
    /// has been taken.
    unsafe fn recycle(&self, chunk: *mut Chunk) {
        let mut spare = self.spare.lock();
        if spare.0.len() < MAX_SPARE_CHUNKS {
            spare.0.push(chunk);
        } else {
            drop(spare);
            // SAFETY: owned outright (the caller's contract).
            drop(unsafe { Box::from_raw(chunk) });
        }
    }

    fn push_chunk(&self, chunk: *mut Chunk) {
        let mut head = self.head.load(Relaxed);
        loop {
            // SAFETY: `chunk` is ours until the compare-exchange below publishes it.
            unsafe { (*chunk).next.store(head, Relaxed) };
            // SeqCst: pairs with the worker's check before it parks (see `Producer::push`).
            match self
                .head
                .compare_exchange_weak(head, chunk, SeqCst, Relaxed)
            {
                Ok(_) => return,
                Err(current) => head = current,
            }
        }
    }

    /// Queue one entry in a chunk of its own, born sealed (for barrier markers and producers
    /// without thread-local storage).
    pub(crate) fn push_single(&self, work: Work) {
        let chunk = self.fresh_chunk(1);
        // SAFETY: the chunk is not shared yet; slot 0 is written once.
        unsafe {
            (*chunk).slots[0].with_mut(|slot| (*slot).write(work));
            (*chunk).filled.store(1, Relaxed);
            (*chunk).sealed.store(true, Relaxed);
        }
        self.push_chunk(chunk);
    }

    /// After `fork()` (see [`fork`](crate::docs::internal::domain::fork)): forget every chunk on
    /// the stack. They are leaked, not freed: their other owners (producers and the worker of the
    /// parent) may hold shares, and what they hold is abandoned in the child.
    pub(crate) fn forget_chunks(&self) {
        self.head.store(ptr::null_mut(), Relaxed);
    }

    /// Hold the spare-chunk lock across `fork()`.
    #[cfg(unix)]
    pub(crate) fn hold_for_fork(&'static self, held: &mut crate::sync::fork::Held) {
        self.spare.hold_for_fork(held);
    }

    /// Is a chunk waiting to be picked up?
    pub(crate) fn has_new_chunks(&self) -> bool {
        !self.head.load(SeqCst).is_null()
    }
}

impl Drop for Intake {
    fn drop(&mut self) {
        let mut chunk = self.head.swap(ptr::null_mut(), Acquire);
        while !chunk.is_null() {
            // SAFETY: the stack held the worker's share of every chunk on it; we take it over.
            let next = unsafe { (*chunk).next.load(Relaxed) };
            // SAFETY: as above; the chunk is not used after this.
            unsafe { Chunk::release(chunk) };
            chunk = next;
        }
        for chunk in self.spare.lock().0.drain(..) {
            // SAFETY: spare chunks are owned by the intake alone.
            drop(unsafe { Box::from_raw(chunk) });
        }
    }
}

/// One producer thread's chunk on one shard.
pub(crate) struct Producer {
    chunk: *mut Chunk,
    /// Our own copy of the chunk's fill count.
    filled: usize,
    /// Chunks started so far.
    chunks: usize,
}

impl Producer {
    pub(crate) const fn new() -> Producer {
        Producer {
            chunk: ptr::null_mut(),
            filled: 0,
            chunks: 0,
        }
    }

    /// Queue `work`. The publishing store is a release store; the caller then issues the light
    /// half of the domain's barrier pair and looks at the worker's `sleeping` flag, which the
    /// worker sets before the heavy half and a last look at the intake, so a worker that is
    /// about to park idle either sees this entry or is seen sleeping and woken (see
    /// the `shard` module docs).
    ///
    /// Returns true once every [`NUDGE_EVERY`] entries (when a chunk starts): the caller then
    /// wakes a worker that is waiting for a grace period, so a flood is seen by the backlog
    /// control without a wake-up per callback.
    #[inline]
    pub(crate) fn push(&mut self, intake: &Intake, work: Work) -> bool {
        let mut nudge = false;
        if self.chunk.is_null() || self.filled == CHUNK_LEN {
            self.start_chunk(intake);
            self.chunks = self.chunks.wrapping_add(1);
            // The first chunk of every `NUDGE_EVERY / CHUNK_LEN` (every one when they are
            // equal, as under `rcukit_small`).
            nudge = self.chunks.wrapping_sub(1) % (NUDGE_EVERY / CHUNK_LEN) == 0;
        }
        let i = self.filled;
        // SAFETY: we own the chunk's producer share and slot `i` has not been published, so
        // nobody else reads or writes it.
        unsafe {
            (*self.chunk).slots[i].with_mut(|slot| (*slot).write(work));
            (*self.chunk).filled.store(i + 1, Release);
        }
        self.filled = i + 1;
        nudge
    }

    #[cold]
    fn start_chunk(&mut self, intake: &Intake) {
        self.seal();
        self.chunk = intake.fresh_chunk(2);
        self.filled = 0;
        intake.push_chunk(self.chunk);
    }

    /// After `fork()`: forget the current chunk without touching it (its other owner, the
    /// parent's worker, is gone from this process; the chunk is leaked). The next push starts
    /// a fresh chunk on the intake.
    pub(crate) fn abandon(&mut self) {
        self.chunk = ptr::null_mut();
        self.filled = 0;
    }

    /// Give the current chunk up: no more slots will be written to it.
    pub(crate) fn seal(&mut self) {
        if self.chunk.is_null() {
            return;
        }
        // SAFETY: we hold the producer share of the chunk until `release`.
        unsafe {
            (*self.chunk).sealed.store(true, Release);
            Chunk::release(self.chunk);
        }
        self.chunk = ptr::null_mut();
        self.filled = 0;
    }
}

struct OpenChunk {
    chunk: *mut Chunk,
    taken: usize,
}

/// The worker's side of a shard's intake: the chunks it is draining.
pub(crate) struct Consumer {
    /// Oldest first. Drained chunks are almost always at the front, so removal is cheap.
    open: VecDeque<OpenChunk>,
    /// Scratch list used to reverse a batch taken off the stack.
    fresh: Vec<*mut Chunk>,
    /// When `take` last found an entry.
    last_taken: Option<Instant>,
}

// SAFETY: the consumer holds the worker's shares of its chunks; moving it to another thread
// moves those shares with it.
unsafe impl Send for Consumer {}

impl Consumer {
    pub(crate) fn new() -> Consumer {
        Consumer {
            open: VecDeque::new(),
            fresh: Vec::new(),
            last_taken: None,
        }
    }

    fn collect_new_chunks(&mut self, intake: &Intake) {
        let mut chunk = intake.head.swap(ptr::null_mut(), Acquire);
        while !chunk.is_null() {
            self.fresh.push(chunk);
            // SAFETY: chunks on the stack are alive (the stack holds the worker's share).
            chunk = unsafe { (*chunk).next.load(Relaxed) };
        }
        // The stack is newest first; open chunks are kept oldest first.
        while let Some(chunk) = self.fresh.pop() {
            self.open.push_back(OpenChunk { chunk, taken: 0 });
        }
    }

    /// Take up to `limit` published entries, oldest chunk first, passing each to `f`. Returns
    /// how many were taken.
    pub(crate) fn take(&mut self, intake: &Intake, limit: usize, mut f: impl FnMut(Work)) -> usize {
        self.collect_new_chunks(intake);
        let mut taken = 0;
        let mut i = 0;
        while i < self.open.len() && taken < limit {
            let open = &mut self.open[i];
            // SAFETY: we hold the worker's share of every open chunk.
            let chunk = unsafe { &*open.chunk };
            let sealed = chunk.sealed.load(Acquire);
            let filled = chunk.filled.load(Acquire);
            while open.taken < filled && taken < limit {
                // SAFETY: slots below `filled` were published (Acquire above) and are read
                // exactly once, here.
                let work =
                    chunk.slots[open.taken].with_mut(|slot| unsafe { (*slot).assume_init_read() });
                open.taken += 1;
                taken += 1;
                f(work);
            }
            if sealed && open.taken == filled {
                let done = self.open.remove(i).expect("index in range");
                // SAFETY: drained and sealed: we give up our share and never touch it again.
                if let Some(chunk) = unsafe { Chunk::release_share(done.chunk) } {
                    // SAFETY: ours outright now, and drained.
                    unsafe { intake.recycle(chunk) };
                }
                continue;
            }
            i += 1;
        }
        if taken > 0 {
            self.last_taken = Some(Instant::now());
        }
        taken
    }

    /// Have producers queued anything in the last `window`? Under loom, always yes: a model's
    /// outcome must not depend on the clock.
    pub(crate) fn taken_within(&self, window: Duration) -> bool {
        cfg!(rcukit_loom) || self.last_taken.is_some_and(|at| at.elapsed() <= window)
    }

    /// Nothing published is waiting (checked with sequentially consistent loads, to pair with
    /// producers' publishing stores before the worker parks).
    pub(crate) fn is_drained(&self, intake: &Intake) -> bool {
        if intake.has_new_chunks() {
            return false;
        }
        self.open.iter().all(|open| {
            // SAFETY: we hold the worker's share of every open chunk.
            let chunk = unsafe { &*open.chunk };
            chunk.filled.load(SeqCst) == open.taken
        })
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        for open in self.open.drain(..) {
            // SAFETY: we hold the worker's share and drop it here.
            unsafe { Chunk::release(open.chunk) };
        }
    }
}

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use super::*;
    use crate::callbacks::callback::Callback;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    fn numbered(log: &Arc<std::sync::Mutex<Vec<u64>>>, n: u64) -> Work {
        let log = log.clone();
        Work::Callback(Callback::from_fn(move || log.lock().unwrap().push(n)))
    }

    fn run_all(consumer: &mut Consumer, intake: &Intake) -> usize {
        consumer.take(intake, usize::MAX, |w| match w {
            Work::Callback(cb) => cb.invoke(),
            Work::Barrier(b) => b.arrive(|_| {}),
        })
    }

    #[test]
    fn fifo_per_producer_across_chunks() {
        let intake = Intake::new();
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut p = Producer::new();
        let mut c = Consumer::new();
        for n in 0..200 {
            p.push(&intake, numbered(&log, n));
            if n % 37 == 0 {
                run_all(&mut c, &intake);
            }
        }
        assert!(!c.is_drained(&intake));
        run_all(&mut c, &intake);
        assert!(c.is_drained(&intake));
        p.seal();
        run_all(&mut c, &intake);
        assert!(c.open.is_empty(), "sealed, drained chunks are released");
        assert_eq!(*log.lock().unwrap(), (0..200).collect::<Vec<_>>());
    }

    #[test]
    fn producers_on_many_threads_lose_nothing() {
        let intake = Arc::new(Intake::new());
        let count = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (intake, count) = (intake.clone(), count.clone());
                std::thread::spawn(move || {
                    let mut p = Producer::new();
                    for _ in 0..10_000 {
                        let count = count.clone();
                        p.push(
                            &intake,
                            Work::Callback(Callback::from_fn(move || {
                                count.fetch_add(1, Relaxed);
                            })),
                        );
                    }
                    p.seal();
                })
            })
            .collect();
        let mut c = Consumer::new();
        let mut taken = 0;
        while taken < 40_000 {
            taken += run_all(&mut c, &intake);
        }
        for t in threads {
            t.join().unwrap();
        }
        run_all(&mut c, &intake);
        assert_eq!(count.load(Relaxed), 40_000);
        assert!(c.open.is_empty());
    }

    #[test]
    fn a_worker_exiting_first_leaves_the_chunk_to_its_producer() {
        let intake = Intake::new();
        let mut p = Producer::new();
        p.push(&intake, Work::Callback(Callback::from_fn(|| ())));
        let mut c = Consumer::new();
        run_all(&mut c, &intake);
        drop(c); // worker share released; the producer's share keeps the chunk alive
        p.seal(); // frees it (miri or a sanitizer would flag a double free or a leak)
    }
}
