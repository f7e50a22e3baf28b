//! The schemes: one `Tap` impl each (what the packet path and the tcpdump thread do), built from [`SchemeId`].

use anyhow::Result;
use crossbeam_epoch as epoch;
use rcukit::{Qsbr, QsbrThread, Rcu, RcuList};
use serde::Serialize;
use std::hint::black_box;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::packets::{run_filters, DescList, Descriptor, Packet};

/// The schemes this build runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchemeId {
    /// No listener: no lock and no filter (the fast path without tcpdump); the noise floor.
    NoListener,
    /// The same filters as the schemes run, with no synchronization: the capacity of the filter
    /// work itself, which a scheme whose synchronization costs nothing reaches.
    FilterOnly,
    /// parking_lot RwLock around the descriptor list.
    Rwlock,
    /// rcukit RCU: copy-on-write list behind an AtomicPtr, old lists retired.
    Rcu,
    /// rcukit RCU with the descriptors in an `RcuList` (the patch's `CK_LIST`).
    RcuList,
    /// rcukit QSBR: no read-side code, a quiescent state per burst, old lists retired.
    Qsbr,
    /// crossbeam-epoch: the same list behind an `epoch::Atomic`, old lists deferred.
    Epoch,
}

impl SchemeId {
    /// Every scheme this build runs, reference first, then the baseline.
    pub const ALL: [SchemeId; 7] = [
        SchemeId::NoListener,
        SchemeId::FilterOnly,
        SchemeId::Rwlock,
        SchemeId::Rcu,
        SchemeId::RcuList,
        SchemeId::Qsbr,
        SchemeId::Epoch,
    ];

    /// Short id.
    pub fn id(self) -> &'static str {
        match self {
            SchemeId::NoListener => "no-listener",
            SchemeId::FilterOnly => "filter-only",
            SchemeId::Rwlock => "rwlock",
            SchemeId::Rcu => "rcu",
            SchemeId::RcuList => "rcu-list",
            SchemeId::Qsbr => "qsbr",
            SchemeId::Epoch => "epoch",
        }
    }

    /// One-line description.
    pub fn describe(self) -> &'static str {
        match self {
            SchemeId::NoListener => "no tcpdump: no lock, no filter (noise floor)",
            SchemeId::FilterOnly => {
                "the same filters, no synchronization: lists built up front, never freed"
            }
            SchemeId::Rwlock => "parking_lot RwLock per packet (FreeBSD before the patch)",
            SchemeId::Rcu => "rcukit Rcu::read per packet, copy-on-write list, retire",
            SchemeId::RcuList => "rcukit Rcu::read per packet, RcuList walk, node retired",
            SchemeId::Qsbr => {
                "rcukit Qsbr: plain load per packet, quiescent state per burst, retire"
            }
            SchemeId::Epoch => "crossbeam-epoch pin per packet, defer_destroy",
        }
    }

    pub(super) fn build(self, filter_len: usize) -> Result<Box<dyn Tap>> {
        let first = Arc::new(Descriptor::new(filter_len, 1));
        Ok(match self {
            SchemeId::NoListener => Box::new(NoListener),
            SchemeId::FilterOnly => Box::new(FilterOnlyTap::new(first, filter_len)),
            SchemeId::Rwlock => Box::new(RwLockTap {
                list: parking_lot::RwLock::new(vec![first]),
            }),
            SchemeId::Rcu => Box::new(RcuTap::new(vec![first])?),
            SchemeId::RcuList => Box::new(RcuListTap::new(first)?),
            SchemeId::Qsbr => Box::new(QsbrTap::new(vec![first])?),
            SchemeId::Epoch => Box::new(EpochTap::new(vec![first])),
        })
    }
}

/// What every scheme provides. `ReaderState` is per-thread state (an epoch handle, a QSBR
/// registration, ...).
pub(super) trait Tap: Send + Sync {
    /// Process one packet on a packet thread; the number of descriptors that matched.
    fn process(&self, reader: &mut ReaderState<'_>, p: &Packet) -> u64;
    /// Attach `d` (tcpdump starts).
    fn attach(&self, d: Arc<Descriptor>);
    /// Detach the most recently attached descriptor, keeping the first.
    fn detach(&self);
    /// Does this scheme have a tcpdump thread at all?
    fn has_writer(&self) -> bool {
        true
    }
    /// Per-thread state for a packet thread.
    fn reader_state(&self) -> ReaderState<'_> {
        ReaderState::None
    }
    /// Wait for deferred frees; (lists retired, lists freed).
    fn finish(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// Per-packet-thread state some schemes need.
pub(super) enum ReaderState<'a> {
    None,
    Epoch(epoch::LocalHandle),
    /// The thread's registration with the scheme's QSBR domain (online while it processes).
    Qsbr(QsbrThread<'a>),
}

impl ReaderState<'_> {
    /// Between bursts: the thread holds no reference to any descriptor list.
    #[inline]
    pub(super) fn quiescent(&mut self) {
        if let ReaderState::Qsbr(me) = self {
            me.quiescent_state();
        }
    }

    /// Sleep while the queue is empty (offline for QSBR, so grace periods need not wait).
    pub(super) fn idle(&mut self, nap: Duration) {
        match self {
            ReaderState::Qsbr(me) => me.offline_while(|| std::thread::sleep(nap)),
            _ => std::thread::sleep(nap),
        }
    }
}

pub(super) struct NoListener;

impl Tap for NoListener {
    fn process(&self, _: &mut ReaderState<'_>, p: &Packet) -> u64 {
        black_box(p);
        0
    }
    fn attach(&self, _: Arc<Descriptor>) {}
    fn detach(&self) {}
    fn has_writer(&self) -> bool {
        false
    }
}

/// The filter work alone. The packet path runs exactly the filters the other schemes run
/// (the first descriptor, and the tcpdump descriptor while it is attached), but the two lists
/// it switches between are built before the run and live until its end, so the packet path
/// reads a flag with a plain load: no lock, no read-side section, no allocation, no grace
/// period. A scheme whose synchronization costs nothing has this capacity.
pub(super) struct FilterOnlyTap {
    /// `[first]` and `[first, tcpdump's]`.
    lists: [Vec<Arc<Descriptor>>; 2],
    attached: AtomicBool,
}

impl FilterOnlyTap {
    fn new(first: Arc<Descriptor>, filter_len: usize) -> FilterOnlyTap {
        let second = Arc::new(Descriptor::new(filter_len, 2));
        FilterOnlyTap {
            lists: [vec![first.clone()], vec![first, second]],
            attached: AtomicBool::new(false),
        }
    }
}

impl Tap for FilterOnlyTap {
    fn process(&self, _: &mut ReaderState<'_>, p: &Packet) -> u64 {
        let attached = self.attached.load(Relaxed);
        run_filters(&self.lists[usize::from(attached)], p)
    }
    /// The descriptor's filter is the same program as the prebuilt second one (only the
    /// matched address differs), so `d` itself is not kept.
    fn attach(&self, d: Arc<Descriptor>) {
        drop(d);
        self.attached.store(true, Relaxed);
    }
    fn detach(&self) {
        self.attached.store(false, Relaxed);
    }
}

pub(super) struct RwLockTap {
    list: parking_lot::RwLock<Vec<Arc<Descriptor>>>,
}

impl Tap for RwLockTap {
    fn process(&self, _: &mut ReaderState<'_>, p: &Packet) -> u64 {
        run_filters(&self.list.read(), p)
    }
    fn attach(&self, d: Arc<Descriptor>) {
        self.list.write().push(d);
    }
    fn detach(&self) {
        let mut list = self.list.write();
        if list.len() > 1 {
            list.pop();
        }
    }
}

/// A descriptor list behind a pointer that writers replace (copy, edit, swap) and retire
/// through a grace-period domain: what the `rcu` and `qsbr` taps share.
pub(super) struct PublishedList {
    current: AtomicPtr<DescList>,
    writer: parking_lot::Mutex<()>,
    retired: AtomicU64,
    freed: Arc<AtomicU64>,
}

impl PublishedList {
    pub(super) fn new(list: Vec<Arc<Descriptor>>) -> PublishedList {
        let freed = Arc::new(AtomicU64::new(0));
        let first = Box::new(DescList {
            list,
            freed: freed.clone(),
        });
        PublishedList {
            current: AtomicPtr::new(Box::into_raw(first)),
            writer: parking_lot::Mutex::new(()),
            retired: AtomicU64::new(0),
            freed,
        }
    }

    /// The list as published now.
    ///
    /// # Safety
    ///
    /// The caller must be protected by the grace-period domain the old lists are retired
    /// through, for as long as it uses the returned list.
    unsafe fn load(&self) -> &DescList {
        // SAFETY: lists are retired only after being swapped out, and the caller is protected
        // by the domain that frees them.
        unsafe { &*self.current.load(Acquire) }
    }

    /// Copy the list, edit the copy, publish it, and hand the old one to `retire`, which must
    /// free it (with `Box::from_raw`) only after a grace period of the readers' domain.
    pub(super) fn replace(
        &self,
        edit: impl FnOnce(&mut Vec<Arc<Descriptor>>),
        retire: impl FnOnce(*mut DescList),
    ) {
        let _writer = self.writer.lock();
        // SAFETY: only writers replace (and retire) lists, serialised by `writer`, which we
        // hold; the current list stays valid while we copy it.
        let mut list = unsafe { &*self.current.load(Acquire) }.list.clone();
        edit(&mut list);
        let new = Box::into_raw(Box::new(DescList {
            list,
            freed: self.freed.clone(),
        }));
        retire(self.current.swap(new, AcqRel));
        self.retired.fetch_add(1, Relaxed);
    }

    pub(super) fn counts(&self) -> (u64, u64) {
        (self.retired.load(Relaxed), self.freed.load(Relaxed))
    }
}

impl Drop for PublishedList {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader or writer is left; the current list came from
        // `Box::into_raw` and is freed once, here.
        drop(unsafe { Box::from_raw(*self.current.get_mut()) });
    }
}

/// The descriptor list behind an RCU-protected pointer in a domain of its own.
pub(super) struct RcuTap {
    rcu: Rcu,
    list: PublishedList,
}

impl RcuTap {
    pub(super) fn new(list: Vec<Arc<Descriptor>>) -> Result<RcuTap> {
        Ok(RcuTap {
            rcu: Rcu::builder().name("lab-capture").build()?,
            list: PublishedList::new(list),
        })
    }

    pub(super) fn replace(&self, edit: impl FnOnce(&mut Vec<Arc<Descriptor>>)) {
        self.list.replace(edit, |old| {
            // SAFETY: `old` came from `Box::into_raw`, the swap made it unreachable for new
            // readers, and it is retired exactly once.
            unsafe { self.rcu.retire_raw(old) }
        });
    }
}

impl Tap for RcuTap {
    fn process(&self, _: &mut ReaderState<'_>, p: &Packet) -> u64 {
        let _guard = self.rcu.read();
        // SAFETY: lists are freed only by `retire`, after a grace period; we are in a
        // read-side critical section until `_guard` drops.
        let list = unsafe { self.list.load() };
        run_filters(&list.list, p)
    }
    fn attach(&self, d: Arc<Descriptor>) {
        self.replace(|l| l.push(d));
    }
    fn detach(&self) {
        self.replace(|l| {
            if l.len() > 1 {
                l.pop();
            }
        });
    }
    fn finish(&self) -> (u64, u64) {
        while self.rcu.stats().callbacks_pending > 0 {
            self.rcu.barrier();
        }
        self.list.counts()
    }
}

/// A descriptor on an [`RcuList`]; counts its destruction (the node is retired on detach).
pub(super) struct Attached {
    desc: Arc<Descriptor>,
    /// The descriptor that stays attached throughout (never detached).
    permanent: bool,
    freed: Arc<AtomicU64>,
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.freed.fetch_add(1, Relaxed);
    }
}

/// The descriptors in an `rcukit::RcuList` in a domain of its own, like the patch's
/// `CK_LIST`: attach inserts at the head (`CK_LIST_INSERT_HEAD`), detach unlinks the node and
/// retires it; readers walk the list under `Rcu::read`.
pub(super) struct RcuListTap {
    list: RcuList<Attached, Arc<Rcu>>,
    retired: AtomicU64,
    freed: Arc<AtomicU64>,
}

impl RcuListTap {
    pub(super) fn new(first: Arc<Descriptor>) -> Result<RcuListTap> {
        let freed = Arc::new(AtomicU64::new(0));
        let rcu = Arc::new(Rcu::builder().name("lab-capture-list").build()?);
        let list = RcuList::with_domain(rcu);
        list.push_front(Attached {
            desc: first,
            permanent: true,
            freed: freed.clone(),
        });
        Ok(RcuListTap {
            list,
            retired: AtomicU64::new(0),
            freed,
        })
    }
}

impl Tap for RcuListTap {
    fn process(&self, _: &mut ReaderState<'_>, p: &Packet) -> u64 {
        let guard = self.list.domain().read();
        self.list.iter(&guard).filter(|a| a.desc.matches(p)).count() as u64
    }
    fn attach(&self, d: Arc<Descriptor>) {
        self.list.push_front(Attached {
            desc: d,
            permanent: false,
            freed: self.freed.clone(),
        });
    }
    fn detach(&self) {
        if self.list.remove_first(|a| !a.permanent) {
            self.retired.fetch_add(1, Relaxed);
        }
    }
    fn finish(&self) -> (u64, u64) {
        let rcu = self.list.domain();
        while rcu.stats().callbacks_pending > 0 {
            rcu.barrier();
        }
        (self.retired.load(Relaxed), self.freed.load(Relaxed))
    }
}

/// The copy-on-write descriptor list behind a pointer protected by an `rcukit::Qsbr` domain:
/// packet threads register, read with a plain load, announce a quiescent state after each
/// burst and go offline while they sleep; the writer retires old lists through the domain's
/// callbacks.
pub(super) struct QsbrTap {
    qsbr: Qsbr,
    list: PublishedList,
}

impl QsbrTap {
    pub(super) fn new(list: Vec<Arc<Descriptor>>) -> Result<QsbrTap> {
        Ok(QsbrTap {
            qsbr: Qsbr::builder().name("lab-capture-qsbr").build()?,
            list: PublishedList::new(list),
        })
    }

    pub(super) fn replace(&self, edit: impl FnOnce(&mut Vec<Arc<Descriptor>>)) {
        self.list.replace(edit, |old| {
            // SAFETY: `old` came from `Box::into_raw`, the swap made it unreachable for
            // threads that pass a quiescent state afterwards, and it is retired exactly once.
            unsafe { self.qsbr.retire_raw(old) }
        });
    }
}

impl Tap for QsbrTap {
    fn process(&self, reader: &mut ReaderState<'_>, p: &Packet) -> u64 {
        let ReaderState::Qsbr(me) = reader else {
            unreachable!("a qsbr packet thread without its registration")
        };
        assert!(
            me.is_online() && std::ptr::eq(me.domain(), &self.qsbr),
            "a qsbr packet thread must be online in the tap's domain"
        );
        // Lists are freed only by the domain's callbacks, after every online thread has passed
        // a quiescent state since the list was swapped out. SAFETY: so, as this thread is
        // online in `self.qsbr` (checked above) and announces no quiescent state before this
        // function returns, the list stays valid while we use it.
        let list = unsafe { self.list.load() };
        run_filters(&list.list, p)
    }
    fn attach(&self, d: Arc<Descriptor>) {
        self.replace(|l| l.push(d));
    }
    fn detach(&self) {
        self.replace(|l| {
            if l.len() > 1 {
                l.pop();
            }
        });
    }
    fn reader_state(&self) -> ReaderState<'_> {
        ReaderState::Qsbr(self.qsbr.register())
    }
    fn finish(&self) -> (u64, u64) {
        // Called from the main thread, which never registers with the domain.
        while self.qsbr.stats().callbacks_pending > 0 {
            self.qsbr.barrier();
        }
        self.list.counts()
    }
}

/// The descriptor list behind a crossbeam-epoch `Atomic`, in a collector of its own.
pub(super) struct EpochTap {
    collector: epoch::Collector,
    current: epoch::Atomic<DescList>,
    writer: parking_lot::Mutex<()>,
    retired: AtomicU64,
    freed: Arc<AtomicU64>,
}

impl EpochTap {
    pub(super) fn new(list: Vec<Arc<Descriptor>>) -> EpochTap {
        let freed = Arc::new(AtomicU64::new(0));
        EpochTap {
            collector: epoch::Collector::new(),
            current: epoch::Atomic::new(DescList {
                list,
                freed: freed.clone(),
            }),
            writer: parking_lot::Mutex::new(()),
            retired: AtomicU64::new(0),
            freed,
        }
    }

    pub(super) fn replace(&self, f: impl FnOnce(&mut Vec<Arc<Descriptor>>)) {
        let _writer = self.writer.lock();
        let handle = self.collector.register();
        let guard = handle.pin();
        // SAFETY: the pointer is never null (set in `new`, only ever swapped for non-null
        // ones) and the guard keeps it alive.
        let mut list = unsafe { self.current.load(Acquire, &guard).deref() }
            .list
            .clone();
        f(&mut list);
        let new = epoch::Owned::new(DescList {
            list,
            freed: self.freed.clone(),
        });
        let old = self.current.swap(new, AcqRel, &guard);
        // SAFETY: the swap made `old` unreachable for new pins; it is destroyed once, after
        // every pinned reader that could see it has unpinned.
        unsafe { guard.defer_destroy(old) };
        guard.flush();
        self.retired.fetch_add(1, Relaxed);
    }
}

impl Tap for EpochTap {
    fn process(&self, reader: &mut ReaderState<'_>, p: &Packet) -> u64 {
        let ReaderState::Epoch(handle) = reader else {
            return 0;
        };
        let guard = handle.pin();
        // SAFETY: never null; protected by `guard` until it drops at the end of this call.
        let list = unsafe { self.current.load(Acquire, &guard).deref() };
        run_filters(&list.list, p)
    }
    fn attach(&self, d: Arc<Descriptor>) {
        self.replace(|l| l.push(d));
    }
    fn detach(&self) {
        self.replace(|l| {
            if l.len() > 1 {
                l.pop();
            }
        });
    }
    fn reader_state(&self) -> ReaderState<'_> {
        ReaderState::Epoch(self.collector.register())
    }
    fn finish(&self) -> (u64, u64) {
        // Deferred lists run when epochs advance; drive them with pins from this thread (no
        // packet thread is pinned any more). Anything left after the deadline is freed when
        // the collector drops, but would show here as retired and not freed.
        let handle = self.collector.register();
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.freed.load(Relaxed) < self.retired.load(Relaxed) && Instant::now() < deadline {
            handle.pin().flush();
        }
        (self.retired.load(Relaxed), self.freed.load(Relaxed))
    }
}

impl Drop for EpochTap {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no thread is pinned any more; the current list is owned here.
        unsafe {
            let current = self
                .current
                .swap(epoch::Shared::null(), Relaxed, epoch::unprotected());
            if !current.is_null() {
                drop(current.into_owned());
            }
        }
    }
}
