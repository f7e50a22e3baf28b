//! The maps: one `FlowTable` impl each, built from [`MapId`] into an [`AnyMap`].

use super::flow::{FlowBuild, FlowKey, FlowRecord};
use anyhow::Result;
use rcukit::{Qsbr, QsbrThread, Rcu, RcuFlatMap, RcuHashMap};
use serde::{Serialize, Serializer};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The maps this build runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapId {
    /// `std::sync::RwLock<HashMap>` (the baseline).
    RwlockHashmap,
    /// `rcukit::RcuHashMap`.
    RcuHashmap,
    /// `rcukit::RcuFlatMap` (the record's `(id, expiry)` inline).
    RcuFlatmap,
    /// `rcukit::RcuFlatMap` on a `rcukit::Qsbr` domain (packet threads registered online).
    RcuFlatmapQsbr,
    /// `dashmap::DashMap`.
    Dashmap,
    /// `papaya::HashMap`.
    Papaya,
    /// `flurry::HashMap`.
    Flurry,
    /// `parking_lot::RwLock<hashbrown::HashMap>`.
    PlRwlockHashbrown,
    /// `scc::HashMap`.
    SccHashmap,
    /// `scc::HashIndex`.
    SccHashindex,
    /// evmap (left-right).
    Evmap,
    /// liburcu's rculfhash (C).
    #[cfg(feature = "c-peers")]
    Rculfhash,
}

impl Serialize for MapId {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.id())
    }
}

impl MapId {
    /// Every map of this build, the baseline first.
    pub fn all() -> Vec<MapId> {
        #[allow(unused_mut)]
        let mut v = vec![
            MapId::RwlockHashmap,
            MapId::RcuHashmap,
            MapId::RcuFlatmap,
            MapId::RcuFlatmapQsbr,
            MapId::Dashmap,
            MapId::Papaya,
            MapId::Flurry,
            MapId::PlRwlockHashbrown,
            MapId::SccHashmap,
            MapId::SccHashindex,
            MapId::Evmap,
        ];
        #[cfg(feature = "c-peers")]
        v.push(MapId::Rculfhash);
        v
    }

    /// Short id.
    pub fn id(self) -> &'static str {
        match self {
            MapId::RwlockHashmap => "rwlock-hashmap",
            MapId::RcuHashmap => "rcu-hashmap",
            MapId::RcuFlatmap => "rcu-flatmap",
            MapId::RcuFlatmapQsbr => "rcu-flatmap-qsbr",
            MapId::Dashmap => "dashmap",
            MapId::Papaya => "papaya",
            MapId::Flurry => "flurry",
            MapId::PlRwlockHashbrown => "pl-rwlock-hashbrown",
            MapId::SccHashmap => "scc-hashmap",
            MapId::SccHashindex => "scc-hashindex",
            MapId::Evmap => "evmap",
            #[cfg(feature = "c-peers")]
            MapId::Rculfhash => "rculfhash",
        }
    }

    /// What it is and what a lookup takes.
    pub fn describe(self) -> &'static str {
        match self {
            MapId::RwlockHashmap => {
                "std::sync::RwLock<std::collections::HashMap>: read lock per lookup"
            }
            MapId::RcuHashmap => "rcukit::RcuHashMap (own domain): one read() guard per lookup",
            MapId::RcuFlatmap => {
                "rcukit::RcuFlatMap (own domain; the record's (id, expiry) stored inline, the \
                 record itself dropped at insert): one read() guard per lookup"
            }
            MapId::RcuFlatmapQsbr => {
                "rcukit::RcuFlatMap on a Qsbr domain of its own (the record's (id, expiry) stored \
                 inline, the record itself dropped at insert; packet threads registered online, \
                 the writer's registration offline): no code around a lookup, a quiescent state \
                 per batch of --sample-every (64) lookups"
            }
            MapId::Dashmap => "dashmap::DashMap 6 (default shards): shard read lock per lookup",
            MapId::Papaya => "papaya::HashMap 0.2: pin() per lookup",
            MapId::Flurry => "flurry::HashMap 0.5 (own collector): guard() per lookup",
            MapId::PlRwlockHashbrown => {
                "parking_lot::RwLock<hashbrown::HashMap> 0.17: read lock per lookup"
            }
            MapId::SccHashmap => "scc::HashMap 2: read() per lookup (a shared bucket lock)",
            MapId::SccHashindex => "scc::HashIndex 2: peek_with() per lookup (lock-free)",
            MapId::Evmap => {
                "evmap 10 (left-right): a read handle per packet thread; one writer behind a \
                 mutex, publishing after every write"
            }
            #[cfg(feature = "c-peers")]
            MapId::Rculfhash => {
                "liburcu rculfhash (memb flavor, auto-resize): urcu_memb_read_lock() per lookup, \
                 one FFI call"
            }
        }
    }
}

/// What every map offers the experiment. `Reg` is a thread's registration, which may borrow
/// the map (liburcu's threads must be registered readers, the QSBR map's readers are the
/// domain's online threads; the other Rust maps need none).
pub(super) trait FlowTable: Sync {
    type Reg<'m>
    where
        Self: 'm;
    /// The registration of a packet thread (it looks flows up).
    fn register(&self) -> Self::Reg<'_>;
    /// The registration of a thread that makes no `lookup` (the writer, the fill and the
    /// drain, `len`): `register`'s, but for a map whose registration would hold its grace
    /// periods while the thread does other things.
    fn register_writer(&self) -> Self::Reg<'_> {
        self.register()
    }
    /// The thread holds no reference into the map here: the packet loop calls this after each
    /// batch of `sample_every` lookups (nothing but for the QSBR map, where it announces a
    /// quiescent state).
    #[inline]
    fn quiescent(&self, _reg: &mut Self::Reg<'_>) {}
    /// (id, expiry) of the flow, under one read-side section.
    fn lookup(&self, reg: &Self::Reg<'_>, key: &FlowKey) -> Option<(u64, u64)>;
    fn insert(&self, reg: &Self::Reg<'_>, key: FlowKey, rec: FlowRecord);
    /// Whether the flow was there.
    fn remove(&self, reg: &Self::Reg<'_>, key: &FlowKey) -> bool;
    fn len(&self, reg: &Self::Reg<'_>) -> u64;
}

pub(super) type RcuMap = RcuHashMap<FlowKey, FlowRecord, FlowBuild, Arc<Rcu>>;

impl FlowTable for RcuMap {
    type Reg<'m> = ();
    fn register(&self) {}
    #[inline]
    fn lookup(&self, _: &(), key: &FlowKey) -> Option<(u64, u64)> {
        let guard = self.domain().read();
        self.get(key, &guard).map(FlowRecord::seen)
    }
    fn insert(&self, _: &(), key: FlowKey, rec: FlowRecord) {
        self.pin().insert(key, rec);
    }
    fn remove(&self, _: &(), key: &FlowKey) -> bool {
        self.pin().remove(key).is_some()
    }
    fn len(&self, _: &()) -> u64 {
        RcuHashMap::len(self) as u64
    }
}

pub(super) type FlatMap = RcuFlatMap<FlowKey, (u64, u64), FlowBuild, Arc<Rcu>>;

impl FlowTable for FlatMap {
    type Reg<'m> = ();
    fn register(&self) {}
    #[inline]
    fn lookup(&self, _: &(), key: &FlowKey) -> Option<(u64, u64)> {
        let guard = self.domain().read();
        self.get(key, &guard).copied()
    }
    fn insert(&self, _: &(), key: FlowKey, rec: FlowRecord) {
        RcuFlatMap::insert(self, key, rec.seen());
    }
    fn remove(&self, _: &(), key: &FlowKey) -> bool {
        RcuFlatMap::remove(self, key).is_some()
    }
    fn len(&self, _: &()) -> u64 {
        RcuFlatMap::len(self) as u64
    }
}

pub(super) type FlatQsbrMap = RcuFlatMap<FlowKey, (u64, u64), FlowBuild, Arc<Qsbr>>;

/// The flat map on a QSBR domain. A packet thread registers with the domain and stays online
/// from its first lookup to its exit, announcing a quiescent state after each batch of
/// lookups (it holds no reference into the map there: every lookup copies its two fields
/// out). Every other thread (the writer, the fill and the drain, `len`) registers and goes
/// offline at once: an offline registration holds no grace period, and writes and `len` read
/// nothing through it; being a registration all the same keeps one handle type, so a lookup
/// is the map's `get` and nothing else. The main thread holds none of these when it waits for
/// the domain's callbacks at teardown (its fill, `len` and drain have dropped theirs).
impl FlowTable for FlatQsbrMap {
    type Reg<'m> = QsbrThread<'m>;
    fn register(&self) -> QsbrThread<'_> {
        self.domain().register()
    }
    fn register_writer(&self) -> QsbrThread<'_> {
        let mut me = self.domain().register();
        me.offline();
        me
    }
    #[inline]
    fn quiescent(&self, reg: &mut QsbrThread<'_>) {
        reg.quiescent_state();
    }
    #[inline]
    fn lookup(&self, reg: &QsbrThread<'_>, key: &FlowKey) -> Option<(u64, u64)> {
        self.get(key, reg).copied()
    }
    fn insert(&self, _: &QsbrThread<'_>, key: FlowKey, rec: FlowRecord) {
        RcuFlatMap::insert(self, key, rec.seen());
    }
    fn remove(&self, _: &QsbrThread<'_>, key: &FlowKey) -> bool {
        RcuFlatMap::remove(self, key).is_some()
    }
    fn len(&self, _: &QsbrThread<'_>) -> u64 {
        RcuFlatMap::len(self) as u64
    }
}

pub(super) type StdMap = std::sync::RwLock<HashMap<FlowKey, FlowRecord, FlowBuild>>;

pub(super) fn read_std(
    m: &StdMap,
) -> std::sync::RwLockReadGuard<'_, HashMap<FlowKey, FlowRecord, FlowBuild>> {
    m.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub(super) fn write_std(
    m: &StdMap,
) -> std::sync::RwLockWriteGuard<'_, HashMap<FlowKey, FlowRecord, FlowBuild>> {
    m.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl FlowTable for StdMap {
    type Reg<'m> = ();
    fn register(&self) {}
    #[inline]
    fn lookup(&self, _: &(), key: &FlowKey) -> Option<(u64, u64)> {
        read_std(self).get(key).map(FlowRecord::seen)
    }
    fn insert(&self, _: &(), key: FlowKey, rec: FlowRecord) {
        let old = write_std(self).insert(key, rec);
        drop(old); // outside the lock
    }
    fn remove(&self, _: &(), key: &FlowKey) -> bool {
        let old = write_std(self).remove(key);
        old.is_some()
    }
    fn len(&self, _: &()) -> u64 {
        read_std(self).len() as u64
    }
}

pub(super) type DashFlows = dashmap::DashMap<FlowKey, FlowRecord, FlowBuild>;

impl FlowTable for DashFlows {
    type Reg<'m> = ();
    fn register(&self) {}
    #[inline]
    fn lookup(&self, _: &(), key: &FlowKey) -> Option<(u64, u64)> {
        self.get(key).map(|r| r.seen())
    }
    fn insert(&self, _: &(), key: FlowKey, rec: FlowRecord) {
        dashmap::DashMap::insert(self, key, rec);
    }
    fn remove(&self, _: &(), key: &FlowKey) -> bool {
        dashmap::DashMap::remove(self, key).is_some()
    }
    fn len(&self, _: &()) -> u64 {
        dashmap::DashMap::len(self) as u64
    }
}

pub(super) type PapayaFlows = papaya::HashMap<FlowKey, FlowRecord, FlowBuild>;

impl FlowTable for PapayaFlows {
    type Reg<'m> = ();
    fn register(&self) {}
    #[inline]
    fn lookup(&self, _: &(), key: &FlowKey) -> Option<(u64, u64)> {
        self.pin().get(key).map(FlowRecord::seen)
    }
    fn insert(&self, _: &(), key: FlowKey, rec: FlowRecord) {
        self.pin().insert(key, rec);
    }
    fn remove(&self, _: &(), key: &FlowKey) -> bool {
        self.pin().remove(key).is_some()
    }
    fn len(&self, _: &()) -> u64 {
        papaya::HashMap::len(self) as u64
    }
}

pub(super) type FlurryFlows = flurry::HashMap<FlowKey, FlowRecord, FlowBuild>;

impl FlowTable for FlurryFlows {
    type Reg<'m> = ();
    fn register(&self) {}
    #[inline]
    fn lookup(&self, _: &(), key: &FlowKey) -> Option<(u64, u64)> {
        let guard = self.guard();
        self.get(key, &guard).map(FlowRecord::seen)
    }
    fn insert(&self, _: &(), key: FlowKey, rec: FlowRecord) {
        let guard = self.guard();
        flurry::HashMap::insert(self, key, rec, &guard);
    }
    fn remove(&self, _: &(), key: &FlowKey) -> bool {
        let guard = self.guard();
        flurry::HashMap::remove(self, key, &guard).is_some()
    }
    fn len(&self, _: &()) -> u64 {
        flurry::HashMap::len(self) as u64
    }
}

pub(super) type PlFlows = parking_lot::RwLock<hashbrown::HashMap<FlowKey, FlowRecord, FlowBuild>>;

impl FlowTable for PlFlows {
    type Reg<'m> = ();
    fn register(&self) {}
    #[inline]
    fn lookup(&self, _: &(), key: &FlowKey) -> Option<(u64, u64)> {
        self.read().get(key).map(FlowRecord::seen)
    }
    fn insert(&self, _: &(), key: FlowKey, rec: FlowRecord) {
        let old = self.write().insert(key, rec);
        drop(old); // outside the lock
    }
    fn remove(&self, _: &(), key: &FlowKey) -> bool {
        let old = self.write().remove(key);
        old.is_some()
    }
    fn len(&self, _: &()) -> u64 {
        self.read().len() as u64
    }
}

pub(super) type SccFlows = scc::HashMap<FlowKey, FlowRecord, FlowBuild>;

impl FlowTable for SccFlows {
    type Reg<'m> = ();
    fn register(&self) {}
    #[inline]
    fn lookup(&self, _: &(), key: &FlowKey) -> Option<(u64, u64)> {
        self.read(key, |_, r| r.seen())
    }
    fn insert(&self, _: &(), key: FlowKey, rec: FlowRecord) {
        self.upsert(key, rec);
    }
    fn remove(&self, _: &(), key: &FlowKey) -> bool {
        scc::HashMap::remove(self, key).is_some()
    }
    fn len(&self, _: &()) -> u64 {
        scc::HashMap::len(self) as u64
    }
}

/// `scc::HashIndex` needs `Clone` values: records are shared behind an `Arc` (dropped, and
/// counted, once).
pub(super) type SccIndexFlows = scc::HashIndex<FlowKey, Arc<FlowRecord>, FlowBuild>;

impl FlowTable for SccIndexFlows {
    type Reg<'m> = ();
    fn register(&self) {}
    #[inline]
    fn lookup(&self, _: &(), key: &FlowKey) -> Option<(u64, u64)> {
        self.peek_with(key, |_, r| r.seen())
    }
    fn insert(&self, _: &(), key: FlowKey, rec: FlowRecord) {
        if let Err((key, rec)) = scc::HashIndex::insert(self, key, Arc::new(rec)) {
            scc::HashIndex::remove(self, &key);
            let _ = scc::HashIndex::insert(self, key, rec);
        }
    }
    fn remove(&self, _: &(), key: &FlowKey) -> bool {
        scc::HashIndex::remove(self, key)
    }
    fn len(&self, _: &()) -> u64 {
        scc::HashIndex::len(self) as u64
    }
}

/// evmap stores values in bags and needs them `Eq + Hash + ShallowCopy`: the flows' records
/// are kept boxed behind this handle, compared by address.
pub(super) struct EvRecord(Box<FlowRecord>);

impl PartialEq for EvRecord {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(&*self.0, &*other.0)
    }
}

impl Eq for EvRecord {}

impl std::hash::Hash for EvRecord {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(&*self.0, state)
    }
}

impl evmap::ShallowCopy for EvRecord {
    unsafe fn shallow_copy(&self) -> std::mem::ManuallyDrop<Self> {
        // SAFETY: forwarded to evmap's contract: the copy aliases the box and is never
        // dropped as an owner (evmap drops exactly one of the two copies).
        let copy = unsafe { self.0.shallow_copy() };
        std::mem::ManuallyDrop::new(EvRecord(std::mem::ManuallyDrop::into_inner(copy)))
    }
}

/// evmap: the read side of every packet thread is a handle of its own (its `Reg`).
pub(super) struct EvFlows {
    factory: evmap::ReadHandleFactory<FlowKey, EvRecord, (), FlowBuild>,
    writer: std::sync::Mutex<evmap::WriteHandle<FlowKey, EvRecord, (), FlowBuild>>,
}

impl EvFlows {
    fn new() -> EvFlows {
        let (read, write) = evmap::Options::default().with_hasher(FlowBuild).construct();
        EvFlows {
            factory: read.factory(),
            writer: std::sync::Mutex::new(write),
        }
    }
}

impl FlowTable for EvFlows {
    type Reg<'m> = evmap::ReadHandle<FlowKey, EvRecord, (), FlowBuild>;
    fn register(&self) -> Self::Reg<'_> {
        self.factory.handle()
    }
    #[inline]
    fn lookup(&self, reg: &Self::Reg<'_>, key: &FlowKey) -> Option<(u64, u64)> {
        reg.get_one(key).map(|r| r.0.seen())
    }
    fn insert(&self, _: &Self::Reg<'_>, key: FlowKey, rec: FlowRecord) {
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        w.update(key, EvRecord(Box::new(rec)));
        w.refresh();
    }
    fn remove(&self, reg: &Self::Reg<'_>, key: &FlowKey) -> bool {
        let present = reg.contains_key(key);
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        w.empty(*key);
        w.refresh();
        present
    }
    fn len(&self, reg: &Self::Reg<'_>) -> u64 {
        reg.len() as u64
    }
}

/// liburcu's rculfhash. The C table keeps its own copy of the record's fields; the Rust record
/// is dropped on insertion (and counted there), the C node is counted when its grace period
/// has freed it.
#[cfg(feature = "c-peers")]
impl FlowTable for crate::c_peers::Lfht {
    type Reg<'m> = crate::c_peers::LfhtThread;
    fn register(&self) -> Self::Reg<'_> {
        crate::c_peers::Lfht::register(self)
    }
    #[inline]
    fn lookup(&self, reg: &Self::Reg<'_>, key: &FlowKey) -> Option<(u64, u64)> {
        let (w0, w1) = key.words();
        crate::c_peers::Lfht::lookup(self, reg, w0, w1)
    }
    fn insert(&self, reg: &Self::Reg<'_>, key: FlowKey, rec: FlowRecord) {
        let (w0, w1) = key.words();
        let r = crate::c_peers::LfhtRecord {
            id: rec.id,
            created: rec.created,
            expires: rec.expires,
            packets: rec.packets,
            bytes: rec.bytes,
        };
        crate::c_peers::Lfht::insert(self, reg, w0, w1, r);
        // The record itself is not stored: forget it without counting a drop (the C node's
        // free is counted instead).
        std::mem::forget(rec);
    }
    fn remove(&self, reg: &Self::Reg<'_>, key: &FlowKey) -> bool {
        let (w0, w1) = key.words();
        crate::c_peers::Lfht::remove(self, reg, w0, w1)
    }
    fn len(&self, reg: &Self::Reg<'_>) -> u64 {
        crate::c_peers::Lfht::len(self, reg)
    }
}

/// One map, built. (A handful exist per run, so the variants' sizes do not matter.)
#[allow(clippy::large_enum_variant)]
pub(super) enum AnyMap {
    Std(StdMap),
    Rcu(RcuMap, Arc<Rcu>),
    Flat(FlatMap, Arc<Rcu>),
    FlatQsbr(FlatQsbrMap, Arc<Qsbr>),
    Dash(DashFlows),
    Papaya(PapayaFlows),
    Flurry(FlurryFlows),
    Pl(PlFlows),
    Scc(SccFlows),
    SccIndex(SccIndexFlows),
    Ev(EvFlows),
    #[cfg(feature = "c-peers")]
    Lfht(crate::c_peers::Lfht),
}

/// Run `$body` with `$t` bound to the concrete map (so each map gets its own monomorphic
/// packet loop).
macro_rules! with_map {
    ($map:expr, $t:ident => $body:expr) => {
        match $map {
            AnyMap::Std($t) => $body,
            AnyMap::Rcu($t, _) => $body,
            AnyMap::Flat($t, _) => $body,
            AnyMap::FlatQsbr($t, _) => $body,
            AnyMap::Dash($t) => $body,
            AnyMap::Papaya($t) => $body,
            AnyMap::Flurry($t) => $body,
            AnyMap::Pl($t) => $body,
            AnyMap::Scc($t) => $body,
            AnyMap::SccIndex($t) => $body,
            AnyMap::Ev($t) => $body,
            #[cfg(feature = "c-peers")]
            AnyMap::Lfht($t) => $body,
        }
    };
}
pub(super) use with_map;

impl AnyMap {
    pub(super) fn build(id: MapId, capacity: usize) -> Result<AnyMap> {
        Ok(match id {
            MapId::RwlockHashmap => AnyMap::Std(std::sync::RwLock::new(
                HashMap::with_capacity_and_hasher(capacity, FlowBuild),
            )),
            MapId::RcuHashmap => {
                let rcu = Arc::new(Rcu::builder().name("lab-conntrack").build()?);
                let map = RcuHashMap::builder()
                    .capacity(capacity)
                    .hasher(FlowBuild)
                    .domain(rcu.clone())
                    .build()?;
                AnyMap::Rcu(map, rcu)
            }
            MapId::RcuFlatmap => {
                let rcu = Arc::new(Rcu::builder().name("lab-conntrack-flat").build()?);
                let map = RcuFlatMap::with_capacity_hasher_in(capacity, FlowBuild, rcu.clone());
                AnyMap::Flat(map, rcu)
            }
            MapId::RcuFlatmapQsbr => {
                let qsbr = Arc::new(Qsbr::builder().name("lab-conntrack-flat-qsbr").build()?);
                let map = RcuFlatMap::with_capacity_hasher_in(capacity, FlowBuild, qsbr.clone());
                AnyMap::FlatQsbr(map, qsbr)
            }
            MapId::Dashmap => AnyMap::Dash(dashmap::DashMap::with_capacity_and_hasher(
                capacity, FlowBuild,
            )),
            MapId::Papaya => AnyMap::Papaya(
                papaya::HashMap::builder()
                    .capacity(capacity)
                    .hasher(FlowBuild)
                    .build(),
            ),
            MapId::Flurry => AnyMap::Flurry(flurry::HashMap::with_capacity_and_hasher(
                capacity, FlowBuild,
            )),
            MapId::PlRwlockHashbrown => AnyMap::Pl(parking_lot::RwLock::new(
                hashbrown::HashMap::with_capacity_and_hasher(capacity, FlowBuild),
            )),
            MapId::SccHashmap => {
                AnyMap::Scc(scc::HashMap::with_capacity_and_hasher(capacity, FlowBuild))
            }
            MapId::SccHashindex => AnyMap::SccIndex(scc::HashIndex::with_capacity_and_hasher(
                capacity, FlowBuild,
            )),
            MapId::Evmap => AnyMap::Ev(EvFlows::new()),
            #[cfg(feature = "c-peers")]
            MapId::Rculfhash => AnyMap::Lfht(
                crate::c_peers::Lfht::new(capacity as u64)
                    .ok_or_else(|| anyhow::anyhow!("liburcu could not allocate an rculfhash"))?,
            ),
        })
    }

    /// Drop the map and wait until every record it held or retired is freed; the number of
    /// records freed over its life (for the C table: nodes freed).
    pub(super) fn teardown(self, dropped: &AtomicU64) -> u64 {
        match self {
            AnyMap::Rcu(map, rcu) => {
                drop(map);
                let deadline = Instant::now() + Duration::from_secs(10);
                while rcu.stats().callbacks_pending > 0 && Instant::now() < deadline {
                    rcu.barrier();
                }
                dropped.load(Relaxed)
            }
            AnyMap::Flat(map, rcu) => {
                // Its records were dropped at insert; the tables it retired free after this.
                drop(map);
                rcu.barrier();
                dropped.load(Relaxed)
            }
            AnyMap::FlatQsbr(map, qsbr) => {
                // As `Flat`; this thread is not registered with the domain, so it may wait.
                drop(map);
                qsbr.barrier();
                dropped.load(Relaxed)
            }
            AnyMap::SccIndex(map) => {
                // scc reclaims removed entries through its own epoch collector (sdd): let it
                // advance until no more records are freed.
                drop(map);
                let deadline = Instant::now() + Duration::from_secs(5);
                let mut last = (dropped.load(Relaxed), Instant::now());
                while Instant::now() < deadline && last.1.elapsed() < Duration::from_millis(200) {
                    let guard = scc::ebr::Guard::new();
                    guard.accelerate();
                    drop(guard);
                    std::thread::sleep(Duration::from_millis(1));
                    let now = dropped.load(Relaxed);
                    if now != last.0 {
                        last = (now, Instant::now());
                    }
                }
                dropped.load(Relaxed)
            }
            #[cfg(feature = "c-peers")]
            AnyMap::Lfht(mut table) => table.destroy(),
            other => {
                drop(other);
                dropped.load(Relaxed)
            }
        }
    }
}
