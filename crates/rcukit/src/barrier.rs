#![doc = include_str!("barrier.md")]

use std::fmt;
#[cfg(not(any(rcukit_loom, miri)))]
use std::sync::OnceLock;

/// Which barrier pair a domain uses between its readers and its grace periods.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum FenceKind {
    /// Compiler fence in readers, `membarrier(2)` in grace periods. Readers execute no fence
    /// instruction at all.
    Membarrier,
    /// `fence(SeqCst)` on both sides. Portable; costs a full fence per outermost read.
    SeqCst,
}

impl fmt::Display for FenceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FenceKind::Membarrier => "membarrier",
            FenceKind::SeqCst => "seqcst",
        })
    }
}

impl std::str::FromStr for FenceKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "membarrier" => Ok(FenceKind::Membarrier),
            "seqcst" | "seq-cst" | "fence" => Ok(FenceKind::SeqCst),
            other => Err(format!(
                "unknown fence kind {other:?}: expected \"membarrier\" or \"seqcst\""
            )),
        }
    }
}

/// What the running kernel offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Support {
    /// `MEMBARRIER_CMD_PRIVATE_EXPEDITED` is available and this process is registered for it.
    pub(crate) private_expedited: bool,
    /// `MEMBARRIER_CMD_GLOBAL` is available.
    pub(crate) global: bool,
}

/// Query (once per process) which membarrier commands work here, registering this process for
/// the private expedited command on the way.
pub(crate) fn support() -> Support {
    #[cfg(not(any(rcukit_loom, miri)))]
    {
        if let Some(support) = SUPPORT.get() {
            return *support;
        }
        // Before the (slow) detection starts: a `fork()` while it runs must find the handlers
        // and this step, which waits for it to finish (a child that inherited it half done
        // would wait for it forever).
        #[cfg(unix)]
        crate::sync::fork::at_prepare(crate::sync::fork::Stage::SetUp, |_| {
            detected();
        });
        detected()
    }
    #[cfg(any(rcukit_loom, miri))]
    {
        Support {
            private_expedited: false,
            global: false,
        }
    }
}

#[cfg(not(any(rcukit_loom, miri)))]
static SUPPORT: OnceLock<Support> = OnceLock::new();

/// The detection's answer, detecting here unless another thread is (then waiting for it).
#[cfg(not(any(rcukit_loom, miri)))]
fn detected() -> Support {
    *SUPPORT.get_or_init(detect)
}

#[cfg(all(target_os = "linux", not(any(rcukit_loom, miri))))]
fn detect() -> Support {
    use rustix::thread::{membarrier, membarrier_query, MembarrierCommand, MembarrierQuery};
    // Set to anything but "0" or nothing: `=0` and `=` leave membarrier on.
    if std::env::var_os("RCUKIT_NO_MEMBARRIER").is_some_and(|v| !v.is_empty() && v != "0") {
        return Support {
            private_expedited: false,
            global: false,
        };
    }
    let q = membarrier_query();
    let private_expedited = q.contains(MembarrierQuery::PRIVATE_EXPEDITED)
        && q.contains(MembarrierQuery::REGISTER_PRIVATE_EXPEDITED)
        && membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok()
        // A first call proves the registration took.
        && membarrier(MembarrierCommand::PrivateExpedited).is_ok();
    let global = q.contains(MembarrierQuery::GLOBAL);
    Support {
        private_expedited,
        global,
    }
}

#[cfg(all(not(target_os = "linux"), not(any(rcukit_loom, miri))))]
fn detect() -> Support {
    Support {
        private_expedited: false,
        global: false,
    }
}

/// The read-side half of the pair.
#[inline(always)]
pub(crate) fn light(kind: FenceKind) {
    match kind {
        FenceKind::Membarrier => crate::sync::compiler_fence(std::sync::atomic::Ordering::SeqCst),
        FenceKind::SeqCst => crate::sync::fence(std::sync::atomic::Ordering::SeqCst),
    }
}

/// Which heavy barrier a grace period issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Heavy {
    /// For expedited grace periods: IPIs the CPUs running this process.
    Expedited,
    /// For normal grace periods: no IPIs where the kernel can avoid them.
    Normal,
}

/// The grace-period half of the pair. Also a full fence for the calling thread.
pub(crate) fn heavy(kind: FenceKind, which: Heavy) {
    crate::sync::fence(std::sync::atomic::Ordering::SeqCst);
    if kind == FenceKind::Membarrier {
        membarrier(which);
    }
}

#[cfg(all(target_os = "linux", not(any(rcukit_loom, miri))))]
fn membarrier(which: Heavy) {
    use rustix::thread::{membarrier, MembarrierCommand};
    let cmd = if which == Heavy::Normal && support().global {
        MembarrierCommand::Global
    } else {
        MembarrierCommand::PrivateExpedited
    };
    if let Err(err) = membarrier(cmd) {
        // The domain was only built in membarrier mode after this very command worked, and
        // readers rely on it for correctness: continuing would risk use-after-free.
        panic!("rcukit: membarrier({cmd:?}) failed after working before: {err}");
    }
    crate::sync::fence(std::sync::atomic::Ordering::SeqCst);
}

#[cfg(not(all(target_os = "linux", not(any(rcukit_loom, miri)))))]
fn membarrier(_which: Heavy) {
    unreachable!("membarrier mode is never selected where membarrier is unavailable");
}
