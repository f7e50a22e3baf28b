//! The `recseq` flavor: an [`rcukit::RecSeq`]`<()>` whose writer wait is the grace period.
//!
//! Readers enter the cell's read sections ([`RecSeq::read`], nested as the engine nests them).
//! `synchronize` is `replace(())`: it swaps the cell's pointer and waits until every reader
//! counter that was odd at the swap has changed, that is, until every section running at the
//! swap has ended. That is a grace period for *anything* removed before the call, not only for
//! the cell's value: the barrier pair that orders the swap against a section's start orders
//! the writer's earlier removal the same way (the cell's module docs, case 1 and case 2). So
//! the pipe test applies as it is.
//!
//! `RecSeq` has no expedited variant, no cookies and no callbacks: the flavor supports only
//! [`UpdateKind::Sync`], the engine skips every other update path (the report lists them),
//! and the cookie checks, the batch histogram, callback panics and bursts do not apply. Reader
//! exits, nesting and the stall fault (a reader that holds its section until a writer's stall
//! report appears) do. "Grace periods" in the report are completed replacements.

use super::{Flavor, FlavorSettings, FlavorStats, UpdateKind};
use rcukit::{RecSeq, RecSeqGuard};
use std::time::Duration;

/// A `RecSeq<()>` built for torturing: short stall timeout.
pub struct RecSeqFlavor {
    cell: RecSeq<()>,
    settings: FlavorSettings,
}

impl RecSeqFlavor {
    /// Build the cell. `settings.fence` `None` keeps `RecSeq`'s default (`SeqCst`, as
    /// netfilter); the backlog and worker settings do not apply.
    pub fn new(settings: &FlavorSettings) -> Result<RecSeqFlavor, rcukit::Error> {
        let mut builder = RecSeq::builder().stall_timeout(settings.stall_timeout);
        if let Some(fence) = settings.fence {
            builder = builder.fence(fence);
        }
        Ok(RecSeqFlavor {
            cell: builder.build(())?,
            settings: settings.clone(),
        })
    }

    /// The cell under test.
    pub fn cell(&self) -> &RecSeq<()> {
        &self.cell
    }
}

impl Flavor for RecSeqFlavor {
    type Reader<'a> = ();
    type Guard<'a> = RecSeqGuard<'a, ()>;
    type Cookie = ();

    fn name(&self) -> &'static str {
        "recseq"
    }

    fn describe(&self) -> String {
        format!(
            "fence={} stall_timeout={:?} (grace period = replace(()); no cookies, no callbacks)",
            self.cell.fence_kind(),
            self.settings.stall_timeout
        )
    }

    fn register_reader(&self) {}

    #[inline]
    fn read<'r>(&'r self, _reader: &'r ()) -> RecSeqGuard<'r, ()> {
        self.cell.read()
    }

    fn supports(&self, kind: UpdateKind) -> bool {
        kind == UpdateKind::Sync
    }

    fn has_cookies(&self) -> bool {
        false
    }

    fn synchronize(&self) {
        self.cell.replace(());
    }

    fn stats(&self) -> FlavorStats {
        FlavorStats {
            normal_gps: self.cell.replacements(),
            stalls: self.cell.stalls(),
            ..FlavorStats::default()
        }
    }

    fn stall_timeout(&self) -> Option<Duration> {
        Some(self.settings.stall_timeout)
    }
}
