//! Seed 001: packet capture while `tcpdump` attaches and detaches filters.
//!
//! # What the seed measured
//!
//! FreeBSD's BPF took a reader-writer lock for every inbound packet once a listener was
//! attached. On a 28-core Xeon receiving 6 Mpps, running `tcpdump` made the NIC drop 0.5 to
//! 1.9 Mpps (netstat's `idrops`: 1.9M of 6.0M, about 32 %) from lock contention alone; the
//! patch moved the descriptor lists to `CK_LIST` under `epoch(9)` and the drops went away.
//!
//! # The model
//!
//! * `packet` threads each serve a NIC queue: packets arrive at a fixed rate into a ring of
//!   `ring` descriptors. A thread processes packets in order; when it falls more than `ring`
//!   packets behind, the oldest are overwritten (dropped), exactly like a NIC ring overflow.
//!   When it has caught up it sleeps for a quarter of the ring's time (at most 100 µs), like
//!   interrupt moderation, so that an idle queue leaves the CPU to the other threads.
//!   Processing a packet means entering the scheme's read side and running every attached
//!   descriptor's filter (a list of comparisons, like a compiled BPF program) over it.
//! * One descriptor stays attached throughout (a first `tcpdump`); a `tcpdump` thread attaches
//!   and detaches a second descriptor every `interval`, taking the writer side. A writer builds
//!   the new descriptor outside any lock, as the patched and unpatched kernels both do.
//! * The offered rate is swept: at low rates every scheme keeps up; the rate at which a
//!   scheme starts dropping is its capacity. Drops under the `no-listener` reference (no lock,
//!   no filter: the path without tcpdump) are the machine's own noise floor.
//!
//! Every packet is accounted for: `processed + drops + backlog == offered` at every point.
//!
//! # Schemes
//!
//! | id | read side per packet | tcpdump's attach / detach |
//! |---|---|---|
//! | `no-listener` | nothing (no lock, no filter): the reference | none |
//! | `rwlock` | parking_lot `RwLock::read` (FreeBSD before the patch) | in place under the write lock |
//! | `rcu` | `Rcu::read` | copy-on-write vector behind an `AtomicPtr`, old vector retired |
//! | `rcu-list` | `Rcu::read`, walk an `rcukit::RcuList` (the patch's `CK_LIST`) | `push_front` / `remove_first`, the node retired |
//! | `qsbr` | nothing: a plain load; the thread announces a quiescent state after each burst of at most 32 packets and goes offline while it sleeps | copy-on-write vector, old vector retired through the QSBR domain |
//! | `epoch` | crossbeam-epoch `pin` (the peer closest to FreeBSD's epoch(9)) | copy-on-write vector, `defer_destroy` |
//!
//! Every scheme that defers frees does so through callbacks (no writer ever blocks on a grace
//! period), so the schemes differ only in what the packet path does.

use super::{
    check_duration, check_range, check_threads, ser_ms, Common, Experiment, Rendered, Unavailable,
};
use crate::env::Environment;
use crate::measure::{self, ratio, StopFlag};
use crate::plot::{self, Axis, Panel, Series};
use crate::progress::Progress;
use crate::report::{self, Table};
use anyhow::{bail, Result};
use crossbeam_epoch as epoch;
use rcukit::{Qsbr, QsbrThread, Rcu, RcuList};
use serde::Serialize;
use std::hint::black_box;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::atomic::{AtomicPtr, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// File stem and subcommand name.
pub const NAME: &str = "capture";

/// Schemes the experiment knows but this build cannot run yet (none: every scheme of the
/// issue runs).
pub const UNAVAILABLE: &[Unavailable] = &[];

/// Settings.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Packet threads (NIC queues); default one per core.
    pub packet_threads: usize,
    /// Offered rates to sweep, packets per second per thread.
    pub rates: Vec<f64>,
    /// Ring size in packets: a thread more than this many packets behind drops the oldest.
    pub ring: u64,
    /// Comparisons in each filter program.
    pub filter_len: usize,
    /// How often the tcpdump thread attaches or detaches its descriptor.
    #[serde(rename = "interval_ms", serialize_with = "ser_ms")]
    pub interval: Duration,
    /// Total measuring time of each (scheme, rate) point, split over `rounds`.
    #[serde(rename = "point_ms", serialize_with = "ser_ms")]
    pub point: Duration,
    /// Rounds: every round visits every (rate, scheme) pair once, so that a burst of load
    /// from elsewhere on the machine hits all schemes alike.
    pub rounds: u32,
    /// Quick mode.
    pub quick: bool,
}

impl Config {
    /// Defaults for `common`.
    pub fn new(common: &Common) -> Config {
        Config {
            packet_threads: common.threads,
            rates: common.pick(
                vec![2e6, 8e6, 16e6, 32e6],
                vec![500e3, 1e6, 2e6, 4e6, 8e6, 16e6, 32e6],
            ),
            ring: 4096,
            filter_len: 16,
            interval: Duration::from_millis(1),
            point: common.pick(Duration::from_millis(400), Duration::from_millis(1500)),
            rounds: common.pick(4, 8),
            quick: common.quick,
        }
    }

    /// Reject impossible settings.
    pub fn validate(&self) -> Result<()> {
        check_threads("--packet-threads", self.packet_threads)?;
        if self.rates.is_empty() {
            bail!("--rates needs at least one rate");
        }
        for &r in &self.rates {
            if !(r.is_finite() && (1.0..=1e9).contains(&r)) {
                bail!("--rates: {r} packets/s per thread is outside 1..=1e9");
            }
        }
        check_range("--ring", self.ring, 1, 1 << 24)?;
        check_range("--filter-len", self.filter_len as u64, 1, 4096)?;
        check_duration("--interval", self.interval)?;
        check_duration("--point", self.point)?;
        check_range("--rounds", self.rounds as u64, 1, 1000)?;
        Ok(())
    }
}

/// Flags of the `capture` subcommand.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Args {
    /// Packet threads [default: one per core]
    #[arg(long)]
    pub packet_threads: Option<usize>,
    /// Offered rates to sweep, packets/s per thread, comma-separated (e.g. 1e6,2e6)
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<f64>,
    /// Ring size in packets [default: 4096]
    #[arg(long)]
    pub ring: Option<u64>,
    /// Comparisons per filter program [default: 16]
    #[arg(long)]
    pub filter_len: Option<usize>,
    /// How often tcpdump attaches or detaches, e.g. 1ms [default: 1ms]
    #[arg(long, value_parser = crate::cli::parse_duration)]
    pub interval: Option<Duration>,
    /// Measuring time of each (scheme, rate) point [default: 400ms quick, 1500ms full]
    #[arg(long, value_parser = crate::cli::parse_duration)]
    pub point: Option<Duration>,
    /// Rounds the points are split over, interleaving the schemes [default: 4 quick, 8 full]
    #[arg(long)]
    pub rounds: Option<u32>,
}

impl Args {
    /// Apply the flags given on top of `cfg`.
    pub fn apply(&self, cfg: &mut Config) {
        if let Some(v) = self.packet_threads {
            cfg.packet_threads = v;
        }
        if !self.rates.is_empty() {
            cfg.rates = self.rates.clone();
        }
        if let Some(v) = self.ring {
            cfg.ring = v;
        }
        if let Some(v) = self.filter_len {
            cfg.filter_len = v;
        }
        if let Some(v) = self.interval {
            cfg.interval = v;
        }
        if let Some(v) = self.point {
            cfg.point = v;
        }
        if let Some(v) = self.rounds {
            cfg.rounds = v;
        }
    }
}

// ----------------------------------------------------------------------------------------------
// Packets, filters, descriptors

#[derive(Clone, Copy, Debug)]
struct Packet {
    src: u32,
    dst: u32,
    ports: u32,
}

/// One comparison of a filter program: `packet.field & mask == value`.
#[derive(Clone, Copy, Debug)]
struct Insn {
    field: u8,
    mask: u32,
    value: u32,
}

/// A BPF descriptor: a filter program and its packet counters (per descriptor, like
/// `bd_rcount` / `bd_fcount`, kept by each packet thread and summed at the end).
#[derive(Debug)]
struct Descriptor {
    program: Vec<Insn>,
}

impl Descriptor {
    /// `host 198.18.0.x` in `len` comparisons: matches when any comparison holds (so packets
    /// that do not match run the whole program).
    fn new(len: usize, salt: u32) -> Descriptor {
        let program = (0..len)
            .map(|i| Insn {
                field: (i % 3) as u8,
                mask: u32::MAX,
                value: 0xC612_0000 | (salt.wrapping_mul(31).wrapping_add(i as u32) & 0xFFFF),
            })
            .collect();
        Descriptor { program }
    }

    #[inline]
    fn matches(&self, p: &Packet) -> bool {
        self.program.iter().any(|insn| {
            let v = match insn.field {
                0 => p.src,
                1 => p.dst,
                _ => p.ports,
            };
            v & insn.mask == insn.value
        })
    }
}

/// Run every descriptor's filter over `p`; the number that matched.
#[inline]
fn run_filters(list: &[Arc<Descriptor>], p: &Packet) -> u64 {
    list.iter().filter(|d| d.matches(p)).count() as u64
}

/// A descriptor-list version that counts its destruction.
struct DescList {
    list: Vec<Arc<Descriptor>>,
    freed: Arc<AtomicU64>,
}

impl Drop for DescList {
    fn drop(&mut self) {
        self.freed.fetch_add(1, Relaxed);
    }
}

// ----------------------------------------------------------------------------------------------
// Schemes

/// The schemes this build runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchemeId {
    /// No listener: no lock and no filter (the fast path without tcpdump); the noise floor.
    NoListener,
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
    pub const ALL: [SchemeId; 6] = [
        SchemeId::NoListener,
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
            SchemeId::Rwlock => "parking_lot RwLock per packet (FreeBSD before the patch)",
            SchemeId::Rcu => "rcukit Rcu::read per packet, copy-on-write list, retire",
            SchemeId::RcuList => "rcukit Rcu::read per packet, RcuList walk, node retired",
            SchemeId::Qsbr => {
                "rcukit Qsbr: plain load per packet, quiescent state per burst, retire"
            }
            SchemeId::Epoch => "crossbeam-epoch pin per packet, defer_destroy",
        }
    }

    fn build(self, filter_len: usize) -> Result<Box<dyn Tap>> {
        let first = Arc::new(Descriptor::new(filter_len, 1));
        Ok(match self {
            SchemeId::NoListener => Box::new(NoListener),
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
trait Tap: Send + Sync {
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
enum ReaderState<'a> {
    None,
    Epoch(epoch::LocalHandle),
    /// The thread's registration with the scheme's QSBR domain (online while it processes).
    Qsbr(QsbrThread<'a>),
}

impl ReaderState<'_> {
    /// Between bursts: the thread holds no reference to any descriptor list.
    #[inline]
    fn quiescent(&mut self) {
        if let ReaderState::Qsbr(me) = self {
            me.quiescent_state();
        }
    }

    /// Sleep while the queue is empty (offline for QSBR, so grace periods need not wait).
    fn idle(&mut self, nap: Duration) {
        match self {
            ReaderState::Qsbr(me) => me.offline_while(|| std::thread::sleep(nap)),
            _ => std::thread::sleep(nap),
        }
    }
}

struct NoListener;

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

struct RwLockTap {
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
struct PublishedList {
    current: AtomicPtr<DescList>,
    writer: parking_lot::Mutex<()>,
    retired: AtomicU64,
    freed: Arc<AtomicU64>,
}

impl PublishedList {
    fn new(list: Vec<Arc<Descriptor>>) -> PublishedList {
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
    fn replace(
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

    fn counts(&self) -> (u64, u64) {
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
struct RcuTap {
    rcu: Rcu,
    list: PublishedList,
}

impl RcuTap {
    fn new(list: Vec<Arc<Descriptor>>) -> Result<RcuTap> {
        Ok(RcuTap {
            rcu: Rcu::builder().name("lab-capture").build()?,
            list: PublishedList::new(list),
        })
    }

    fn replace(&self, edit: impl FnOnce(&mut Vec<Arc<Descriptor>>)) {
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
struct Attached {
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
struct RcuListTap {
    list: RcuList<Attached, Arc<Rcu>>,
    retired: AtomicU64,
    freed: Arc<AtomicU64>,
}

impl RcuListTap {
    fn new(first: Arc<Descriptor>) -> Result<RcuListTap> {
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
struct QsbrTap {
    qsbr: Qsbr,
    list: PublishedList,
}

impl QsbrTap {
    fn new(list: Vec<Arc<Descriptor>>) -> Result<QsbrTap> {
        Ok(QsbrTap {
            qsbr: Qsbr::builder().name("lab-capture-qsbr").build()?,
            list: PublishedList::new(list),
        })
    }

    fn replace(&self, edit: impl FnOnce(&mut Vec<Arc<Descriptor>>)) {
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
struct EpochTap {
    collector: epoch::Collector,
    current: epoch::Atomic<DescList>,
    writer: parking_lot::Mutex<()>,
    retired: AtomicU64,
    freed: Arc<AtomicU64>,
}

impl EpochTap {
    fn new(list: Vec<Arc<Descriptor>>) -> EpochTap {
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

    fn replace(&self, f: impl FnOnce(&mut Vec<Arc<Descriptor>>)) {
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

// ----------------------------------------------------------------------------------------------
// Measurement

/// One (scheme, rate) point.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// Offered packets per second per thread.
    pub rate_pps_per_thread: f64,
    /// Packets that arrived (all threads).
    pub offered: u64,
    /// Packets processed.
    pub processed: u64,
    /// Packets dropped (ring overflow).
    pub drops: u64,
    /// Packets still in the rings when the point ended.
    pub backlog: u64,
    /// drops / offered.
    pub drop_fraction: f64,
    /// Filter matches (descriptors × packets that matched).
    pub matches: u64,
    /// tcpdump attaches + detaches during the point.
    pub writer_updates: u64,
}

impl Point {
    fn empty(rate: f64) -> Point {
        Point {
            rate_pps_per_thread: rate,
            offered: 0,
            processed: 0,
            drops: 0,
            backlog: 0,
            drop_fraction: 0.0,
            matches: 0,
            writer_updates: 0,
        }
    }

    fn add(&mut self, o: &Point) {
        self.offered += o.offered;
        self.processed += o.processed;
        self.drops += o.drops;
        self.backlog += o.backlog;
        self.matches += o.matches;
        self.writer_updates += o.writer_updates;
        self.drop_fraction = if self.offered > 0 {
            self.drops as f64 / self.offered as f64
        } else {
            0.0
        };
    }
}

/// One scheme's figures.
#[derive(Clone, Debug, Serialize)]
pub struct SchemeResult {
    /// Scheme id.
    pub scheme: SchemeId,
    /// Description.
    pub description: &'static str,
    /// Drops over all rates.
    pub drops: u64,
    /// Processed over all rates.
    pub processed: u64,
    /// Offered over all rates.
    pub offered: u64,
    /// Highest swept rate (packets/s per thread) at which the scheme's drop fraction stays
    /// within one percentage point of the `no-listener` noise floor at the same rate (`None`
    /// for the reference itself, or when no rate qualifies).
    pub capacity_pps_per_thread: Option<f64>,
    /// Per-rate figures.
    pub points: Vec<Point>,
    /// Descriptor lists retired by the writer (RCU, QSBR and epoch schemes; for `rcu-list`
    /// the list nodes retired on detach).
    pub lists_retired: u64,
    /// Retired lists freed by the end (must equal `lists_retired`).
    pub lists_freed: u64,
    /// This scheme's drops / the baseline's (`rwlock`), over all rates.
    pub drops_vs_rwlock: Option<f64>,
}

/// The seed's figures.
#[derive(Clone, Debug, Serialize)]
pub struct SeedFigures {
    /// Where they come from.
    pub source: &'static str,
    /// Inbound rate, packets/s.
    pub inbound_pps: f64,
    /// Drops while tcpdump ran (netstat idrops), packets/s.
    pub idrops_pps: f64,
    /// idrops / inbound.
    pub drop_fraction: f64,
}

/// The experiment's result.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `capture`.
    pub experiment: &'static str,
    /// Seeds reproduced.
    pub seeds: [&'static str; 1],
    /// Where and how it ran.
    pub env: Environment,
    /// Settings.
    pub config: Config,
    /// Every scheme run.
    pub schemes: Vec<SchemeResult>,
    /// Schemes not in this build.
    pub not_available: Vec<Unavailable>,
    /// The seed's figures.
    pub seed: SeedFigures,
}

impl Report {
    /// The result of one scheme.
    pub fn scheme(&self, id: SchemeId) -> Option<&SchemeResult> {
        self.schemes.iter().find(|s| s.scheme == id)
    }
}

/// Run the experiment.
pub fn run(cfg: &Config, progress: &Progress) -> Result<Report> {
    cfg.validate()?;
    let env = Environment::collect(cfg.quick);
    let steps = SchemeId::ALL.len() * cfg.rates.len() * cfg.rounds as usize;
    let task = progress.task(NAME, steps as u64);
    let taps = SchemeId::ALL
        .iter()
        .map(|id| id.build(cfg.filter_len))
        .collect::<Result<Vec<_>>>()?;
    let slice = cfg.point / cfg.rounds;
    // points[scheme][rate], accumulated over the rounds.
    let mut points: Vec<Vec<Point>> = SchemeId::ALL
        .iter()
        .map(|_| cfg.rates.iter().map(|&r| Point::empty(r)).collect())
        .collect();
    for round in 0..cfg.rounds {
        for (ri, &rate) in cfg.rates.iter().enumerate() {
            for (si, id) in SchemeId::ALL.iter().enumerate() {
                task.message(format!(
                    "round {}: {} at {} pkt/s/thread",
                    round + 1,
                    id.id(),
                    report::num(rate)
                ));
                let p = run_point(cfg, &*taps[si], rate, slice)?;
                points[si][ri].add(&p);
                task.inc();
            }
        }
    }
    task.finish();
    let floor: Vec<f64> = SchemeId::ALL
        .iter()
        .position(|&id| id == SchemeId::NoListener)
        .map(|i| points[i].iter().map(|p| p.drop_fraction).collect())
        .unwrap_or_else(|| vec![0.0; cfg.rates.len()]);
    let mut schemes = Vec::new();
    for ((id, tap), points) in SchemeId::ALL.into_iter().zip(taps).zip(points) {
        let (lists_retired, lists_freed) = tap.finish();
        drop(tap);
        let sum = |f: fn(&Point) -> u64| points.iter().map(f).sum::<u64>();
        let capacity = if id == SchemeId::NoListener {
            None
        } else {
            capacity(&points, &floor)
        };
        schemes.push(SchemeResult {
            scheme: id,
            description: id.describe(),
            drops: sum(|p| p.drops),
            processed: sum(|p| p.processed),
            offered: sum(|p| p.offered),
            capacity_pps_per_thread: capacity,
            points,
            lists_retired,
            lists_freed,
            drops_vs_rwlock: None,
        });
    }
    let rw_drops = schemes
        .iter()
        .find(|s| s.scheme == SchemeId::Rwlock)
        .map(|s| s.drops as f64);
    for s in &mut schemes {
        s.drops_vs_rwlock = rw_drops.and_then(|b| ratio(s.drops as f64, b));
    }
    Ok(Report {
        experiment: NAME,
        seeds: ["001"],
        env,
        config: cfg.clone(),
        schemes,
        not_available: UNAVAILABLE.to_vec(),
        seed: SeedFigures {
            source: "seed 001: 28-core Xeon, Mellanox 100G mlx5en, 6 Mpps inbound, \
                     `tcpdump -npi mce3 host 198.18.0.1` (netstat -hw1)",
            inbound_pps: 6.0e6,
            idrops_pps: 1.9e6,
            drop_fraction: 1.9 / 6.0,
        },
    })
}

/// The highest rate at which `points` stay within one percentage point of `floor` (the
/// reference's drops at the same rate). An isolated noisy point at a lower rate does not
/// hide a higher rate the scheme sustains.
fn capacity(points: &[Point], floor: &[f64]) -> Option<f64> {
    points
        .iter()
        .zip(floor)
        .filter(|(p, f)| p.drop_fraction <= *f + 0.01)
        .map(|(p, _)| p.rate_pps_per_thread)
        .reduce(f64::max)
}

/// The rate the headline quotes: the highest swept rate at which the machine itself keeps up
/// (the `no-listener` reference drops under 5 %), else the lowest.
pub fn headline_rate(r: &Report) -> f64 {
    let lowest = r.config.rates.iter().copied().fold(f64::INFINITY, f64::min);
    r.scheme(SchemeId::NoListener)
        .and_then(|s| {
            s.points
                .iter()
                .filter(|p| p.drop_fraction < 0.05)
                .map(|p| p.rate_pps_per_thread)
                .reduce(f64::max)
        })
        .unwrap_or(lowest)
}

/// Per-thread counts of one point.
#[derive(Default, Clone, Copy)]
struct ThreadCounts {
    offered: u64,
    processed: u64,
    drops: u64,
    matches: u64,
}

fn run_point(cfg: &Config, tap: &dyn Tap, rate: f64, length: Duration) -> Result<Point> {
    let period_ns = 1e9 / rate;
    let stop = StopFlag::new();
    let writer_updates = AtomicU64::new(0);
    let counts = std::thread::scope(|s| -> Result<Vec<ThreadCounts>> {
        let start = Instant::now() + Duration::from_millis(5);
        let mut handles = Vec::new();
        for t in 0..cfg.packet_threads {
            let stop = &stop;
            handles.push(super::spawn_scoped(
                s,
                &format!("cap-queue{t}"),
                move || packet_thread(tap, t, start, period_ns, cfg.ring, stop),
            )?);
        }
        let writer = if tap.has_writer() {
            let (stop, updates) = (&stop, &writer_updates);
            Some(super::spawn_scoped(s, "cap-tcpdump", move || {
                tcpdump(tap, cfg, stop, updates)
            })?)
        } else {
            None
        };
        measure::sleep_until(start + length);
        stop.stop();
        let mut counts = Vec::new();
        for h in handles {
            counts.push(super::join(h)?);
        }
        if let Some(w) = writer {
            super::join(w)?;
        }
        Ok(counts)
    })?;
    let total = counts
        .iter()
        .fold(ThreadCounts::default(), |a, c| ThreadCounts {
            offered: a.offered + c.offered,
            processed: a.processed + c.processed,
            drops: a.drops + c.drops,
            matches: a.matches + c.matches,
        });
    Ok(Point {
        rate_pps_per_thread: rate,
        offered: total.offered,
        processed: total.processed,
        drops: total.drops,
        backlog: total.offered - total.processed - total.drops,
        drop_fraction: if total.offered > 0 {
            total.drops as f64 / total.offered as f64
        } else {
            0.0
        },
        matches: total.matches,
        writer_updates: writer_updates.load(Relaxed),
    })
}

/// One NIC queue: packets arrive every `period_ns` from `start`; process in order, drop what
/// overflows the ring.
fn packet_thread(
    tap: &dyn Tap,
    thread: usize,
    start: Instant,
    period_ns: f64,
    ring: u64,
    stop: &StopFlag,
) -> ThreadCounts {
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (thread as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    let mut next = 0u64; // index of the next packet to process
    let idle_sleep = Duration::from_nanos((period_ns * ring as f64 / 4.0) as u64)
        .min(Duration::from_micros(100));
    let mut c = ThreadCounts::default();
    measure::sleep_until(start);
    // Registered (QSBR: online) only once the queue starts.
    let mut state = tap.reader_state();
    loop {
        let arrived = (start.elapsed().as_nanos() as f64 / period_ns) as u64;
        if stop.stopped() {
            c.offered = arrived.max(next);
            break;
        }
        if arrived - next.min(arrived) > ring {
            let lost = arrived - next - ring;
            c.drops += lost;
            next += lost;
        }
        // Process what has arrived, re-reading the clock every 32 packets.
        let end = arrived.min(next + 32);
        while next < end {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let p = Packet {
                src: x as u32,
                dst: (x >> 32) as u32,
                ports: (x >> 16) as u32,
            };
            c.matches += tap.process(&mut state, &p);
            c.processed += 1;
            next += 1;
        }
        // Between bursts no descriptor list is referenced (QSBR's quiescent state).
        state.quiescent();
        if next >= arrived {
            state.idle(idle_sleep);
        }
    }
    c
}

/// The tcpdump thread: attach a descriptor, wait, detach, wait, ...
fn tcpdump(tap: &dyn Tap, cfg: &Config, stop: &StopFlag, updates: &AtomicU64) {
    let mut salt = 2u32;
    let mut attached = false;
    while !stop.stopped() {
        if attached {
            tap.detach();
        } else {
            // Build the descriptor outside any lock, as both kernels do.
            tap.attach(Arc::new(Descriptor::new(cfg.filter_len, salt)));
            salt = salt.wrapping_add(1);
        }
        attached = !attached;
        updates.fetch_add(1, Relaxed);
        std::thread::sleep(cfg.interval);
    }
    if attached {
        tap.detach();
        updates.fetch_add(1, Relaxed);
    }
}

// ----------------------------------------------------------------------------------------------
// Rendering

fn pct(x: f64) -> String {
    format!("{:.2} %", x * 100.0)
}

/// Tables, plot and headlines.
pub fn render(r: &Report) -> Result<Rendered> {
    let mut md = String::new();
    md.push_str(&format!(
        "{} packet thread(s), each a NIC queue with a {}-packet ring; one descriptor always \
         attached, a tcpdump thread attaching and detaching a second every {} ms; filters of \
         {} comparisons. Offered rates swept per thread.\n\n",
        r.config.packet_threads,
        r.config.ring,
        r.config.interval.as_secs_f64() * 1e3,
        r.config.filter_len
    ));
    md.push_str("### The seed's figures beside ours\n\n");
    let mut side = Table::new(&["", "seed (FreeBSD, 28 cores)", "ours (this run)"]);
    let top = headline_rate(r);
    let at_top = |id: SchemeId| {
        r.scheme(id)
            .and_then(|s| s.points.iter().find(|p| p.rate_pps_per_thread == top))
            .map(|p| pct(p.drop_fraction))
            .unwrap_or_else(|| "not run".into())
    };
    side.row(vec![
        "drops with the rwlock while tcpdump runs".into(),
        format!(
            "{} of {} pkt/s = {}",
            report::num(r.seed.idrops_pps),
            report::num(r.seed.inbound_pps),
            pct(r.seed.drop_fraction)
        ),
        format!(
            "{} at {} pkt/s per thread",
            at_top(SchemeId::Rwlock),
            report::num(top)
        ),
    ]);
    side.row(vec![
        "drops with epoch(9) / RCU".into(),
        "gone (the patch's point)".into(),
        format!(
            "rcu {}, rcu-list {}, qsbr {}, epoch {} at {} pkt/s per thread",
            at_top(SchemeId::Rcu),
            at_top(SchemeId::RcuList),
            at_top(SchemeId::Qsbr),
            at_top(SchemeId::Epoch),
            report::num(top)
        ),
    ]);
    md.push_str(&side.to_markdown());
    md.push_str(&format!(
        "\nSeed: {}. Our machine has far fewer cores, so the contention that costs FreeBSD 32 % \
         of 6 Mpps shows here as a lower per-thread capacity: the rate at which each scheme \
         starts dropping. Quoted rate: the highest at which the `no-listener` reference (no \
         lock, no filter) drops under 5 %.\n\n",
        r.seed.source
    ));
    md.push_str("### Our measurements\n\n");
    let mut header = vec!["scheme".to_string()];
    for rate in &r.config.rates {
        header.push(format!("drops @ {}/s", report::num(*rate)));
    }
    header.extend([
        "capacity (pkt/s/thread)".to_string(),
        "drops / processed (all rates)".to_string(),
        "drops vs rwlock".to_string(),
        "freed / retired".to_string(),
    ]);
    let mut t = Table::new(&header);
    for s in &r.schemes {
        let mut row = vec![format!("`{}`", s.scheme.id())];
        for p in &s.points {
            row.push(pct(p.drop_fraction));
        }
        row.push(match (s.scheme, s.capacity_pps_per_thread) {
            (SchemeId::NoListener, _) => "(reference)".into(),
            (_, Some(c)) => report::num(c),
            (_, None) => "below the lowest rate".into(),
        });
        row.push(format!(
            "{} / {}",
            report::num(s.drops as f64),
            report::num(s.processed as f64)
        ));
        row.push(if s.drops == 0 {
            "0".into()
        } else {
            report::ratio(s.drops_vs_rwlock)
        });
        row.push(if s.lists_retired == 0 {
            "n/a".into()
        } else {
            format!("{} / {}", s.lists_freed, s.lists_retired)
        });
        t.row(row);
    }
    md.push_str(&t.to_markdown());
    md.push_str(
        "\nCapacity: the highest swept rate at which drops stay within one percentage point \
         of `no-listener`, which runs no lock and no filter: its drops are the machine's own \
         noise. Freed / retired: descriptor-list versions, or for `rcu-list` list nodes.\n",
    );
    md.push_str(&super::unavailable_note(&r.not_available));

    let series = r
        .schemes
        .iter()
        .map(|s| Series {
            name: s.scheme.id().to_string(),
            points: s
                .points
                .iter()
                .map(|p| (p.rate_pps_per_thread, p.drop_fraction * 100.0))
                .collect(),
        })
        .collect();
    let svg = plot::render(&[Panel::Lines {
        title: "packets dropped while tcpdump attaches and detaches".into(),
        x: Axis::log("offered packets/s per thread (log)"),
        y: Axis::linear("dropped (%)"),
        series,
    }])?;
    let mut headlines = Vec::new();
    let cap = |id| {
        r.scheme(id)
            .and_then(|s| s.capacity_pps_per_thread)
            .map(report::num)
            .unwrap_or_else(|| "below the lowest rate".into())
    };
    let listed = |f: &dyn Fn(SchemeId) -> String| {
        [
            SchemeId::Rwlock,
            SchemeId::Rcu,
            SchemeId::RcuList,
            SchemeId::Qsbr,
            SchemeId::Epoch,
        ]
        .iter()
        .map(|&id| format!("{} {}", id.id(), f(id)))
        .collect::<Vec<_>>()
        .join(", ")
    };
    headlines.push(format!(
        "drops at {}/s per thread: {} (seed: 32 % with the rwlock, none with epoch); capacity \
         (pkt/s/thread): {}",
        report::num(top),
        listed(&at_top),
        listed(&cap)
    ));
    Ok(Rendered {
        markdown: md,
        svg: Some(svg),
        headlines,
    })
}

/// The experiment, for the shared drivers.
pub struct Capture;

impl Experiment for Capture {
    const NAME: &'static str = NAME;
    const TITLE: &'static str = "Seed 001: packet capture while tcpdump changes filters";
    const SEEDS: &'static [&'static str] = &["001"];
    type Config = Config;
    type Args = Args;
    type Report = Report;

    fn config(common: &Common) -> Config {
        Config::new(common)
    }

    fn apply(args: &Args, cfg: &mut Config) {
        args.apply(cfg);
    }

    fn run(cfg: &Config, progress: &Progress) -> Result<Report> {
        run(cfg, progress)
    }

    fn render(report: &Report) -> Result<Rendered> {
        render(report)
    }
}
