//! The schemes: one `RuleTable` impl each, built from [`SchemeId`].

use anyhow::Result;
use rcukit::{Rcu, RcuCell, RecSeq, Reclaim};
use serde::Serialize;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::rules::{classify, Op, Packet, Rule, RuleSet};

/// The schemes this build can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchemeId {
    /// `rcukit::RecSeq`: readers make a per-thread sequence counter odd, the writer swaps in a
    /// copy and waits until every odd counter has changed (the seed's "current", xt_recseq).
    Recseq,
    /// parking_lot RwLock, the rule added (or removed) in place under the write lock.
    Rwlock,
    /// parking_lot RwLock, a copy built outside and swapped in under the write lock (the
    /// 2.6.29 kernel's scheme: `iptables` hands the kernel a whole new table).
    RwlockCopy,
    /// `rcukit::PerCpuRwLock`, the rule added in place under the write side (every slot), like
    /// the per-CPU reader locks of seed 002.
    PercpuRwlock,
    /// `rcukit::RcuCell`, `Reclaim::Synchronize`: `synchronize()` before freeing.
    RcuSync,
    /// `rcukit::RcuCell`, `Reclaim::Expedited`: `synchronize_expedited()` before freeing.
    RcuExpedited,
    /// `rcukit::RcuCell`, `Reclaim::Deferred`: `retire()` (no wait).
    RcuRetire,
}

impl SchemeId {
    /// Every scheme this build runs, baseline first.
    pub const ALL: [SchemeId; 7] = [
        SchemeId::Recseq,
        SchemeId::Rwlock,
        SchemeId::RwlockCopy,
        SchemeId::PercpuRwlock,
        SchemeId::RcuSync,
        SchemeId::RcuExpedited,
        SchemeId::RcuRetire,
    ];

    /// Short id used in tables and JSON.
    pub fn id(self) -> &'static str {
        match self {
            SchemeId::Recseq => "recseq",
            SchemeId::Rwlock => "rwlock",
            SchemeId::RwlockCopy => "rwlock-copy",
            SchemeId::PercpuRwlock => "percpu-rwlock",
            SchemeId::RcuSync => "rcu-sync",
            SchemeId::RcuExpedited => "rcu-expedited",
            SchemeId::RcuRetire => "rcu-retire",
        }
    }

    /// What the writer does, for the table.
    pub fn describe(self) -> &'static str {
        match self {
            SchemeId::Recseq => "copy, swap, wait for odd reader counters (RecSeq), free",
            SchemeId::Rwlock => "in place under parking_lot write lock (no copy)",
            SchemeId::RwlockCopy => "copy, swap under parking_lot write lock",
            SchemeId::PercpuRwlock => "in place under PerCpuRwLock write side (no copy)",
            SchemeId::RcuSync => "RcuCell copy-update, synchronize(), free",
            SchemeId::RcuExpedited => "RcuCell copy-update, synchronize_expedited(), free",
            SchemeId::RcuRetire => "RcuCell copy-update, retired (no wait)",
        }
    }

    /// Does the writer update the table in place (no table is ever replaced)?
    pub fn in_place(self) -> bool {
        matches!(self, SchemeId::Rwlock | SchemeId::PercpuRwlock)
    }

    pub(super) fn build(self, rules: Vec<Rule>) -> Result<Box<dyn RuleTable>> {
        type ParkingLot = LockTable<parking_lot::RawRwLock>;
        type PerCpu = LockTable<rcukit::RawPerCpuRwLock>;
        Ok(match self {
            SchemeId::Recseq => Box::new(RecSeqTable::new(rules)),
            SchemeId::Rwlock => Box::new(ParkingLot::new(rules, true)),
            SchemeId::RwlockCopy => Box::new(ParkingLot::new(rules, false)),
            SchemeId::PercpuRwlock => Box::new(PerCpu::new(rules, true)),
            SchemeId::RcuSync => Box::new(RcuTable::new(rules, Reclaim::Synchronize)?),
            SchemeId::RcuExpedited => Box::new(RcuTable::new(rules, Reclaim::Expedited)?),
            SchemeId::RcuRetire => Box::new(RcuTable::new(rules, Reclaim::Deferred)?),
        })
    }
}

/// What every scheme provides.
pub(super) trait RuleTable: Send + Sync {
    /// Classify one packet (the reader side, `ipt_do_table`).
    fn classify(&self, p: &Packet) -> u8;
    /// One table update (`iptables -A` or `-D`): copy the table with `op` applied, replace,
    /// and make the old table safe to free (or freed).
    fn update(&self, op: Op);
    /// Wait until every replaced table has been freed; returns the number of rules now.
    fn finish(&self) -> usize;
    /// Tables freed so far.
    fn freed(&self) -> u64;
    /// Tables replaced so far (0 for in-place updates).
    fn replaced(&self) -> u64;
}

/// The table behind a `lock_api` reader-writer lock: parking_lot's central one or rcukit's
/// per-CPU one.
pub(super) struct LockTable<R: lock_api::RawRwLock> {
    lock: lock_api::RwLock<R, RuleSet>,
    in_place: bool,
    replaced: AtomicU64,
    freed: Arc<AtomicU64>,
}

impl<R: lock_api::RawRwLock> LockTable<R> {
    pub(super) fn new(rules: Vec<Rule>, in_place: bool) -> LockTable<R> {
        let freed = Arc::new(AtomicU64::new(0));
        LockTable {
            lock: lock_api::RwLock::new(RuleSet {
                rules,
                freed: freed.clone(),
            }),
            in_place,
            replaced: AtomicU64::new(0),
            freed,
        }
    }
}

impl<R: lock_api::RawRwLock + Send + Sync> RuleTable for LockTable<R> {
    fn classify(&self, p: &Packet) -> u8 {
        classify(&self.lock.read().rules, p)
    }

    fn update(&self, op: Op) {
        if self.in_place {
            let mut table = self.lock.write();
            match op {
                Op::Append(rule) => table.rules.push(rule),
                Op::RemoveLast => {
                    table.rules.pop();
                }
            }
            return;
        }
        let rules = op.apply(&self.lock.read().rules);
        let new = RuleSet {
            rules,
            freed: self.freed.clone(),
        };
        let old = std::mem::replace(&mut *self.lock.write(), new);
        drop(old);
        self.replaced.fetch_add(1, Relaxed);
    }

    fn finish(&self) -> usize {
        self.lock.read().rules.len()
    }

    fn freed(&self) -> u64 {
        self.freed.load(Relaxed)
    }

    fn replaced(&self) -> u64 {
        self.replaced.load(Relaxed)
    }
}

/// xt_recseq: `table->private` in an `rcukit::RecSeq`. Readers run inside `RecSeq::read`;
/// the writer (one at a time, like the kernel's `xt_table` mutex) copies the table, swaps it
/// in with `replace`, which returns once every reader counter that was odd has moved, and
/// frees the old table itself.
pub(super) struct RecSeqTable {
    table: RecSeq<RuleSet>,
    writer: parking_lot::Mutex<()>,
    replaced: AtomicU64,
    freed: Arc<AtomicU64>,
}

impl RecSeqTable {
    pub(super) fn new(rules: Vec<Rule>) -> RecSeqTable {
        let freed = Arc::new(AtomicU64::new(0));
        RecSeqTable {
            table: RecSeq::new(RuleSet {
                rules,
                freed: freed.clone(),
            }),
            writer: parking_lot::Mutex::new(()),
            replaced: AtomicU64::new(0),
            freed,
        }
    }
}

impl RuleTable for RecSeqTable {
    fn classify(&self, p: &Packet) -> u8 {
        classify(&self.table.read().rules, p)
    }

    fn update(&self, op: Op) {
        let _writer = self.writer.lock();
        // The copy is made in a read section of our own, which ends before `replace` waits.
        let rules = op.apply(&self.table.read().rules);
        let old = self.table.replace_box(Box::new(RuleSet {
            rules,
            freed: self.freed.clone(),
        }));
        drop(old);
        self.replaced.fetch_add(1, Relaxed);
    }

    fn finish(&self) -> usize {
        self.table.read().rules.len()
    }

    fn freed(&self) -> u64 {
        self.freed.load(Relaxed)
    }

    fn replaced(&self) -> u64 {
        self.replaced.load(Relaxed)
    }
}

/// `table->private` as an `rcukit::RcuCell` in a domain of its own (so its grace periods wait
/// only for this experiment's readers). The writer copy-updates under the cell's writer lock
/// and reclaims the old table as `reclaim` says.
pub(super) struct RcuTable {
    table: RcuCell<RuleSet, Arc<Rcu>>,
    reclaim: Reclaim,
    replaced: AtomicU64,
    freed: Arc<AtomicU64>,
}

impl RcuTable {
    pub(super) fn new(rules: Vec<Rule>, reclaim: Reclaim) -> Result<RcuTable> {
        let freed = Arc::new(AtomicU64::new(0));
        let rcu = Arc::new(Rcu::builder().name("lab-netfilter").build()?);
        let set = RuleSet {
            rules,
            freed: freed.clone(),
        };
        Ok(RcuTable {
            // Each table owns its rules' buffer: tell the domain what a retired table frees.
            table: RcuCell::with_domain(set, rcu)
                .retired_size(|set| std::mem::size_of_val(set.rules.as_slice())),
            reclaim,
            replaced: AtomicU64::new(0),
            freed,
        })
    }
}

impl RuleTable for RcuTable {
    fn classify(&self, p: &Packet) -> u8 {
        let guard = self.table.domain().read();
        classify(&self.table.load(&guard).rules, p)
    }

    fn update(&self, op: Op) {
        self.table.update_with(self.reclaim, |current| RuleSet {
            rules: op.apply(&current.rules),
            freed: self.freed.clone(),
        });
        self.replaced.fetch_add(1, Relaxed);
    }

    fn finish(&self) -> usize {
        let rcu = self.table.domain();
        while rcu.stats().callbacks_pending > 0 {
            rcu.barrier();
        }
        self.table.read().rules.len()
    }

    fn freed(&self) -> u64 {
        self.freed.load(Relaxed)
    }

    fn replaced(&self) -> u64 {
        self.replaced.load(Relaxed)
    }
}
