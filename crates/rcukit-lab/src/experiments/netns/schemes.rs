//! The two schemes (the lock `copy_net_ns` and `cleanup_net` share) and the namespace list.

use parking_lot::Mutex;
use rcukit::{Rcu, RcuList};
use serde::Serialize;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The two schemes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchemeId {
    /// Before the patch: one mutex, held by teardown across the grace period.
    NetMutex,
    /// After the patch: a reader-writer lock taken for reading by create and teardown.
    NetRwsem,
}

impl SchemeId {
    /// Both, old first.
    pub const ALL: [SchemeId; 2] = [SchemeId::NetMutex, SchemeId::NetRwsem];

    /// Short id.
    pub fn id(self) -> &'static str {
        match self {
            SchemeId::NetMutex => "net-mutex",
            SchemeId::NetRwsem => "net-rwsem",
        }
    }

    /// Description.
    pub fn describe(self) -> &'static str {
        match self {
            SchemeId::NetMutex => "parking_lot Mutex for create and teardown (before the patch)",
            SchemeId::NetRwsem => "parking_lot RwLock, read side for create and teardown (after)",
        }
    }
}

/// `net_mutex` or `net_sem`.
pub(super) enum NetLock {
    Mutex(Mutex<()>),
    Rwsem(parking_lot::RwLock<()>),
}

impl NetLock {
    /// The lock of scheme `id`.
    pub(super) fn new(id: SchemeId) -> NetLock {
        match id {
            SchemeId::NetMutex => NetLock::Mutex(Mutex::new(())),
            SchemeId::NetRwsem => NetLock::Rwsem(parking_lot::RwLock::new(())),
        }
    }

    /// Run `f` holding the lock as create/teardown take it.
    pub(super) fn with<R>(&self, f: impl FnOnce() -> R) -> R {
        match self {
            NetLock::Mutex(m) => {
                let _g = m.lock();
                f()
            }
            NetLock::Rwsem(l) => {
                let _g = l.read();
                f()
            }
        }
    }
}

/// A namespace; counts its own destruction.
pub(super) struct Net {
    pub(super) id: u64,
    pub(super) freed: Arc<AtomicU64>,
}

impl Drop for Net {
    fn drop(&mut self) {
        self.freed.fetch_add(1, Relaxed);
    }
}

/// `net_namespace_list`: an `rcukit::RcuList` in the scheme's own domain. Creation links a
/// namespace at the tail (`list_add_tail_rcu`), teardown unlinks a batch (`list_del_rcu`; the
/// nodes are retired, the namespaces themselves stay alive in the batch until teardown frees
/// them), and `for_each_net` walks it under `Rcu::read`.
pub(super) type NetList = RcuList<Arc<Net>, Arc<Rcu>>;

/// `for_each_net`: the number of namespaces seen.
pub(super) fn walk(list: &NetList) -> usize {
    let guard = list.domain().read();
    list.iter(&guard).filter(|n| n.id != u64::MAX).count()
}
