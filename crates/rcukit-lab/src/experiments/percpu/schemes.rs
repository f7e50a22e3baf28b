//! The schemes: one read side each, behind the `ReadSide` trait, built from [`SchemeId`].

use anyhow::Result;
use rcukit::{PerCpuRwLock, Qsbr, QsbrThread, Rcu};
use serde::Serialize;
use std::sync::atomic::AtomicPtr;
use std::sync::atomic::Ordering::Acquire;

/// The schemes this build runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchemeId {
    /// One central parking_lot RwLock.
    Rwlock,
    /// One central std RwLock.
    StdRwlock,
    /// rcukit `PerCpuRwLock`: one reader lock word per slot.
    PercpuRwlock,
    /// rcukit `Rcu::read` and an RCU-protected pointer.
    Rcu,
    /// rcukit `Qsbr`: registered readers, a plain load, a quiescent state every 64 reads.
    Qsbr,
}

impl SchemeId {
    /// Every scheme this build runs, baseline first.
    pub const ALL: [SchemeId; 5] = [
        SchemeId::Rwlock,
        SchemeId::StdRwlock,
        SchemeId::PercpuRwlock,
        SchemeId::Rcu,
        SchemeId::Qsbr,
    ];

    /// Short id.
    pub fn id(self) -> &'static str {
        match self {
            SchemeId::Rwlock => "rwlock",
            SchemeId::StdRwlock => "std-rwlock",
            SchemeId::PercpuRwlock => "percpu-rwlock",
            SchemeId::Rcu => "rcu",
            SchemeId::Qsbr => "qsbr",
        }
    }

    pub(super) fn build(self, table: Vec<u32>) -> Result<Box<dyn ReadSide>> {
        Ok(match self {
            SchemeId::Rwlock => Box::new(parking_lot::RwLock::new(table)),
            SchemeId::StdRwlock => Box::new(std::sync::RwLock::new(table)),
            SchemeId::PercpuRwlock => Box::new(PerCpuRwLock::new(table)),
            SchemeId::Rcu => Box::new(RcuTable::new(table)?),
            SchemeId::Qsbr => Box::new(QsbrTable::new(table)?),
        })
    }
}

/// Reads between two quiescent states of a QSBR reader (one batch of the reader loop).
pub(super) const QS_EVERY: u64 = 64;

/// One read-side critical section over the table.
pub(super) trait ReadSide: Send + Sync {
    fn read(&self, key: u32) -> u32;
    /// A reader thread's registration, for schemes that need one (QSBR); the reader loop
    /// announces a quiescent state through it after every [`QS_EVERY`] reads.
    fn register(&self) -> Option<QsbrThread<'_>> {
        None
    }
}

#[inline]
fn scan(table: &[u32], key: u32) -> u32 {
    table.iter().position(|&v| v == key).unwrap_or(table.len()) as u32
}

impl ReadSide for parking_lot::RwLock<Vec<u32>> {
    fn read(&self, key: u32) -> u32 {
        scan(&self.read(), key)
    }
}

impl ReadSide for std::sync::RwLock<Vec<u32>> {
    fn read(&self, key: u32) -> u32 {
        match self.read() {
            Ok(table) => scan(&table, key),
            Err(poisoned) => scan(&poisoned.into_inner(), key),
        }
    }
}

impl ReadSide for PerCpuRwLock<Vec<u32>> {
    fn read(&self, key: u32) -> u32 {
        scan(&self.read(), key)
    }
}

struct RcuTable {
    rcu: Rcu,
    table: AtomicPtr<Vec<u32>>,
}

impl RcuTable {
    fn new(table: Vec<u32>) -> Result<RcuTable> {
        Ok(RcuTable {
            rcu: Rcu::builder().name("lab-percpu").build()?,
            table: AtomicPtr::new(Box::into_raw(Box::new(table))),
        })
    }
}

impl ReadSide for RcuTable {
    fn read(&self, key: u32) -> u32 {
        let _guard = self.rcu.read();
        // SAFETY: the table is only freed in `drop`, when no reader is left.
        scan(unsafe { &*self.table.load(Acquire) }, key)
    }
}

impl Drop for RcuTable {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader is left; the table came from `Box::into_raw`.
        drop(unsafe { Box::from_raw(*self.table.get_mut()) });
    }
}

struct QsbrTable {
    qsbr: Qsbr,
    table: AtomicPtr<Vec<u32>>,
}

impl QsbrTable {
    fn new(table: Vec<u32>) -> Result<QsbrTable> {
        Ok(QsbrTable {
            qsbr: Qsbr::builder().name("lab-percpu-qsbr").build()?,
            table: AtomicPtr::new(Box::into_raw(Box::new(table))),
        })
    }
}

impl ReadSide for QsbrTable {
    fn read(&self, key: u32) -> u32 {
        // SAFETY: the table is only freed in `drop`, when no reader is left. (With a writer,
        // it would be freed after a QSBR grace period, which the registered reader threads
        // hold back until their next quiescent state.)
        scan(unsafe { &*self.table.load(Acquire) }, key)
    }

    fn register(&self) -> Option<QsbrThread<'_>> {
        Some(self.qsbr.register())
    }
}

impl Drop for QsbrTable {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader is left; the table came from `Box::into_raw`.
        drop(unsafe { Box::from_raw(*self.table.get_mut()) });
    }
}
