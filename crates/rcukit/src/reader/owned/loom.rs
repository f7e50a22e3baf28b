//! loom models of owned read sections (run with `RUSTFLAGS="--cfg rcukit_loom"`; see README):
//! an owned section that opens under one record and closes under another (a guard that moved
//! threads) racing two grace periods' owned waits. The real counters, phase, turn and registry
//! run (their atomics and locks come from `sync`).

use super::{Drain, OwnedReaders, Side};
use crate::reader::{ReaderRecord, Registry};
use crate::sync::{fence, AtomicU64};
use loom::thread;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;

/// What a grace period's owned-section wait needs: the registry and the phase.
struct Core {
    registry: Arc<Registry>,
    owned: OwnedReaders,
}

fn core() -> Arc<Core> {
    Arc::new(Core {
        registry: Arc::new(Registry::new()),
        owned: OwnedReaders::new(),
    })
}

fn record(core: &Core, name: &str) -> Arc<ReaderRecord> {
    crate::reader::model_record(&core.registry, name)
}

/// One owned-section wait of a grace period: its heavy barrier (a full fence in `SeqCst`
/// mode), then W1-W3 (or the busted drain).
fn grace_period(core: &Core, drain: Drain) {
    fence(SeqCst);
    core.owned.wait(&core.registry, drain, &mut |_| ());
}

/// Reader: O1-O3 on one record, `r1 = x; r2 = y`, O4 on another record (the guard moved).
/// Updater: grace period 1; `x = 1`; grace period 2; `y = 1`. The reader seeing `y == 1` but
/// `x == 0` would mean that its section overlapped all of grace period 2.
///
/// Grace period 1 is what lets the reader count under a stale phase: it may load phase 0,
/// then count only after grace period 1 has flipped to 1 and drained phase 0.
fn two_grace_periods(drain: Drain) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(move || {
        let core = core();
        let opener = record(&core, "opener");
        let closer = record(&core, "closer");
        let x = Arc::new(AtomicU64::new(0));
        let y = Arc::new(AtomicU64::new(0));
        let reader = {
            let (core, x, y) = (core.clone(), x.clone(), y.clone());
            thread::spawn(move || {
                let phase = core.owned.phase();
                opener.owned.bump_own(Side::Locks, phase);
                fence(SeqCst); // O3 in SeqCst mode
                let r1 = x.load(Relaxed);
                let r2 = y.load(Relaxed);
                closer.owned.bump_own(Side::Unlocks, phase);
                (r1, r2)
            })
        };
        grace_period(&core, drain);
        x.store(1, Relaxed);
        grace_period(&core, drain);
        y.store(1, Relaxed);
        let (r1, r2) = reader.join().unwrap();
        assert!(
            !(r2 == 1 && r1 == 0),
            "an owned section overlapped a whole grace period"
        );
    });
}

#[test]
fn loom_owned_section_moving_threads_racing_two_grace_periods() {
    two_grace_periods(Drain::Both);
}

/// Skipping W1 loses a section that counted under the phase it loaded before a flip.
#[test]
#[should_panic(expected = "overlapped a whole grace period")]
fn loom_owned_busted_drain_of_the_flipped_phase_only() {
    two_grace_periods(Drain::FlippedOnly);
}
