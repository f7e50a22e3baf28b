//! The torture runs of every `cargo test`: ten seconds of rcutorture's method against rcukit in
//! each fence mode, five seconds of the qsbr flavor, four of the recseq flavor, six each of the
//! map flavors (an `RcuHashMap`, then an `RcuFlatMap`, on the domain, and an `RcuFlatMap` on
//! the qsbr flavor's domain, three more with fenced quiescent states), three of owned readers
//! (`read_owned()`, which the `rcu` and map runs also take), and the busted flavors (rcukit's,
//! a broken RecSeq, maps that drop values at once, owned sections that end at once), which
//! must fail.
//!
//! The runs are separate tests, so cargo runs them side by side: on a 2-core machine they share
//! the CPUs, which slows them down but changes nothing they check (no assertion is about
//! time). The whole file takes about twenty seconds.

use clap::Parser;
use rcukit::{FenceKind, RecSeq};
use rcukit_torture::map::{MapKind, MapReport};
use rcukit_torture::{
    run, run_flavor, Config, FlavorName, Report, TortureArgs, TortureError, UpdateKind,
};
use std::process::Command;
use std::time::Duration;

fn config(flavor: FlavorName, fence: Option<FenceKind>, seconds: u64) -> Config {
    Config {
        duration: Duration::from_secs(seconds),
        flavor,
        fence,
        readers: 2,
        updaters: 2,
        progress: None,
        ..Config::default()
    }
}

/// A run of a flavor with every update path must pass, use every path and see every fault
/// take effect.
fn assert_clean_run(report: &Report) {
    println!("{report}");
    assert!(
        report.passed(),
        "the {} flavor failed the torture run:\n{report}",
        report.flavor
    );
    assert!(report.paths_skipped().is_empty(), "{report}");
    assert!(report.reads > 0 && report.versions > 0, "{report}");
    for kind in UpdateKind::ALL {
        assert!(
            report.writer_updates[kind.index()] > 0,
            "the writer never used {}:\n{report}",
            kind.name()
        );
    }
    assert!(report.reader_cookie_checks > 0 && report.updater_cookie_checks > 0);
    assert!(report.barrier_checks > 0);
    // Every element is back: the writer drained its list and every chain finished.
    assert_eq!(
        report.circulation[0], report.circulation[9],
        "every published element must have been freed:\n{report}"
    );
    let faults = &report.faults;
    assert!(faults.reader_exits > 0, "no reader exited:\n{report}");
    assert!(
        faults.reads_during_exit > 0,
        "no reader read through thread exit:\n{report}"
    );
    assert!(faults.panics_injected > 0);
    assert_eq!(report.stats.callback_panics, faults.panics_injected);
    assert!(
        faults.stalls_injected > 0,
        "no stall was injected:\n{report}"
    );
    assert_eq!(faults.stalls_reported, faults.stalls_injected);
    assert!(report.stats.stalls >= faults.stalls_reported);
    assert!(faults.bursts > 0, "no callback burst:\n{report}");
    assert!(
        faults.reentrant_rounds > 0 && faults.reentrant_drops > 0,
        "no re-entrant drops:\n{report}"
    );
    assert!(report.stats.expedited_gps > 0 && report.stats.normal_gps > 0);
    let owned = &report.owned;
    if owned.available {
        assert!(
            owned.sections > 0 && owned.moved > 0 && owned.slept > 0,
            "owned sections did not run, move and sleep:\n{report}"
        );
    }
}

#[test]
fn ten_seconds_with_membarrier() {
    match run(&config(FlavorName::Rcu, Some(FenceKind::Membarrier), 10)) {
        Ok(report) => {
            assert!(report.settings.contains("fence=membarrier"));
            assert_clean_run(&report);
        }
        Err(TortureError::Domain(e)) if e.setting() == Some("fence") => {
            // The kernel (or RCUKIT_NO_MEMBARRIER) has no membarrier: nothing to test here.
            eprintln!("skipped: {e}");
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn ten_seconds_with_seqcst_fences() {
    let report = run(&config(FlavorName::Rcu, Some(FenceKind::SeqCst), 10)).unwrap();
    assert!(report.settings.contains("fence=seqcst"));
    assert_clean_run(&report);
}

#[test]
fn busted_fails_fast() {
    let mut cfg = config(FlavorName::Busted, None, 10);
    cfg.stop_on_error = true;
    let report = run(&cfg).unwrap();
    println!("{report}");
    assert!(!report.passed());
    assert!(report.stopped_early, "it should stop at the first error");
    assert!(report.to_string().ends_with("\nFAILURE"));
}

/// A domain whose `barrier()` returns at once: the updaters' barrier checks (callbacks and
/// retired objects queued before each call) must catch it.
#[test]
fn a_busted_barrier_fails_the_barrier_checks() {
    let report = run(&config(FlavorName::BustedBarrier, None, 4)).unwrap();
    println!("{report}");
    assert!(!report.passed(), "{report}");
    assert!(report.barrier_errors > 0, "no barrier error:\n{report}");
    assert_eq!(
        report.pipe_errors(),
        0,
        "only the barrier is broken:\n{report}"
    );
}

#[test]
fn busted_trips_the_pipe_the_cookies_and_the_batch_checks() {
    let report = run(&config(FlavorName::Busted, None, 2)).unwrap();
    println!("{report}");
    assert!(!report.passed());
    assert!(report.pipe_errors() > 0, "no Reader Pipe error:\n{report}");
    assert!(report.reader_cookie_errors > 0);
    assert!(report.batch_errors > 0);
    assert!(report.to_string().contains("Reader Pipe: !!!"));
}

#[test]
fn five_seconds_of_qsbr() {
    let report = run(&config(FlavorName::Qsbr, None, 5)).unwrap();
    assert_eq!(report.flavor, "qsbr");
    assert!(report.settings.contains("fence=seqcst"));
    assert_clean_run(&report);
    // Readers went offline between sections (and came back online) many times.
    assert!(report.pauses > 0, "{report}");
    // Some stayed online through thread exit, reading after rcukit's thread-locals were gone.
    assert!(report.faults.reads_during_exit > 0, "{report}");
}

/// The `qsbr` run on a domain whose quiescent states end with a fence, so that its writers
/// sleep until woken with a fence of their own for a barrier.
#[test]
fn five_seconds_of_fenced_qsbr() {
    let report = run(&config(FlavorName::QsbrFenced, None, 5)).unwrap();
    assert_eq!(report.flavor, "qsbr-fenced");
    assert_clean_run(&report);
    assert!(report.pauses > 0, "{report}");
}

/// The `rcu` run plus an `RcuHashMap` on its domain: everything the `rcu` run checks, and the
/// map's own checks, with the table growing past two thousand buckets and shrinking back.
#[test]
fn six_seconds_of_map() {
    let report = run(&config(FlavorName::Map, None, 6)).unwrap();
    assert_eq!(report.flavor, "map");
    let m = assert_clean_map_run(&report, MapKind::Hash);
    // The hash map never clones a value.
    assert_eq!(m.clones, 0, "{report}");
}

/// The same with an `RcuFlatMap`: its rebuilds clone the live values into each new table, and
/// every value is dropped once its last clone is, with the table it was removed from.
#[test]
fn six_seconds_of_flat_map() {
    let report = run(&config(FlavorName::FlatMap, None, 6)).unwrap();
    assert_eq!(report.flavor, "flat-map");
    let m = assert_clean_map_run(&report, MapKind::Flat);
    assert!(
        m.clones > m.values,
        "rebuilds cloned too few values:\n{report}"
    );
    assert!(report
        .to_string()
        .contains("map: RcuFlatMap on the domain under test"));
}

/// The `qsbr` run plus an `RcuFlatMap` on its QSBR domain: the readers look keys up through
/// their own registrations, with no guard, and announce quiescent states and go offline
/// between their sections while the map writers rebuild the table (writers that write with a
/// borrowed result register for the call).
#[test]
fn six_seconds_of_qsbr_flat_map() {
    let report = run(&config(FlavorName::QsbrFlatMap, None, 6)).unwrap();
    assert_eq!(report.flavor, "qsbr-flat-map");
    let m = assert_clean_map_run(&report, MapKind::FlatQsbr);
    assert!(
        m.clones > m.values,
        "rebuilds cloned too few values:\n{report}"
    );
    assert!(report.pauses > 0, "{report}");
    assert!(report
        .to_string()
        .contains("map: RcuFlatMap on a QSBR domain on the domain under test"));
}

/// The same on a domain with fenced quiescent states.
#[test]
fn three_seconds_of_fenced_qsbr_flat_map() {
    let report = run(&config(FlavorName::QsbrFencedFlatMap, None, 3)).unwrap();
    assert_eq!(report.flavor, "qsbr-fenced-flat-map");
    println!("{report}");
    assert!(report.passed(), "{report}");
    let m = report.map.as_ref().expect("a map run reports its map");
    assert_eq!(m.kind, Some(MapKind::FlatQsbr));
    assert!(m.lookups > 0 && m.errors() == 0, "{report}");
    assert_eq!(m.drops + m.discarded, m.values, "{report}");
}

/// A map run (of `kind`) must pass as the `rcu` run does, with none of the map's errors, and
/// have done all it is there for: lookups, iterations, every kind of write, bursts, and the
/// table grown past [`CYCLE_HIGH`](rcukit_torture::map::CYCLE_HIGH) and shrunk back.
fn assert_clean_map_run(report: &Report, kind: MapKind) -> &MapReport {
    assert_clean_run(report);
    let m = report.map.as_ref().expect("a map run reports its map");
    assert_eq!(m.kind, Some(kind));
    assert!(!m.busted);
    assert_eq!(m.errors(), 0, "{report}");
    assert!(
        m.lookups > 0 && m.stable_lookups > 0 && m.hits > 0,
        "{report}"
    );
    assert!(m.iterations > 0, "no reader iterated the map:\n{report}");
    assert!(m.inserts > 0 && m.removes > 0, "{report}");
    assert!(m.replaces > 0 && m.updates > m.computes, "{report}");
    assert!(m.computes > 0, "no replacement by compute:\n{report}");
    assert!(m.bursts > 0, "no burst:\n{report}");
    // 16 buckets, then 2,048 or more, then back to 256 or fewer, at least once.
    assert!(
        m.capacity_max >= rcukit_torture::map::CYCLE_HIGH as u64,
        "{report}"
    );
    assert!(
        m.cycles > 0,
        "the table never grew and shrank back:\n{report}"
    );
    assert!(m.grows > 0 && m.shrinks > 0, "{report}");
    // Every value was dropped exactly once (or discarded unpublished by `update`).
    assert_eq!(m.drops + m.discarded, m.values, "{report}");
    assert_eq!(m.live_drops + m.double_drops + m.dead_clones, 0, "{report}");
    assert!(report.to_string().contains("map lookups: "));
    m
}

/// A map that drops removed values at once, while readers may hold them: the Map Pipe must
/// catch it, and nothing else is broken.
#[test]
fn busted_map_fails_the_map_pipe() {
    assert_busted_map_fails(FlavorName::BustedMap, MapKind::Hash);
}

/// A flat map whose replaced tables drop their entries at once, removed values with them,
/// while readers may hold them: the Map Pipe must catch it.
#[test]
fn busted_flat_map_fails_the_map_pipe() {
    assert_busted_map_fails(FlavorName::BustedFlatMap, MapKind::Flat);
}

/// The busted flat map on a QSBR domain: the Map Pipe must catch it with readers that hold no
/// guard, only their online registration.
#[test]
fn busted_qsbr_flat_map_fails_the_map_pipe() {
    assert_busted_map_fails(FlavorName::BustedQsbrFlatMap, MapKind::FlatQsbr);
}

/// A busted map run, stopped at its first error (the flat map's busted tables are rebuilt,
/// and so dropped early, less often than the hash map drops its values: on a loaded machine a
/// run of a few seconds might see none).
fn assert_busted_map_fails(flavor: FlavorName, kind: MapKind) {
    let mut cfg = config(flavor, None, 30);
    cfg.stop_on_error = true;
    let report = run(&cfg).unwrap();
    println!("{report}");
    assert!(!report.passed(), "{report}");
    let m = report.map.as_ref().expect("a map run reports its map");
    assert!(m.busted);
    assert_eq!(m.kind, Some(kind));
    assert!(m.pipe_errors() > 0, "no Map Pipe error:\n{report}");
    assert_eq!(report.pipe_errors(), 0, "only the map is broken:\n{report}");
    let text = report.to_string();
    assert!(text.contains("Map Pipe: !!!"), "{text}");
    assert!(text.ends_with("\nFAILURE"));
}

/// Half the readers' sections owned (`read_owned()`): many sleep, many end on a helper thread,
/// and every check still passes.
#[test]
fn owned_readers_sleep_and_move() {
    let mut cfg = config(FlavorName::Rcu, None, 3);
    cfg.owned = 0.5;
    let report = run(&cfg).unwrap();
    assert_clean_run(&report);
    let owned = &report.owned;
    assert!(owned.available && owned.fraction == 0.5, "{report}");
    assert!(owned.sections * 4 > report.reads, "{report}");
    assert!(report.to_string().contains("owned sections: "));
}

/// Owned sections that end before the reader reads (`busted-owned`): a reader that sleeps or
/// hands its element to another thread is unprotected, and the pipe or the cookies catch it.
#[test]
fn busted_owned_fails() {
    let mut cfg = config(FlavorName::BustedOwned, None, 10);
    cfg.owned = 0.5;
    cfg.stop_on_error = true;
    let report = run(&cfg).unwrap();
    println!("{report}");
    assert!(!report.passed(), "{report}");
    assert!(report.owned.sections > 0, "{report}");
    assert!(
        report.pipe_errors() + report.reader_cookie_errors + report.mbtest_errors > 0,
        "{report}"
    );
    assert!(report.to_string().ends_with("\nFAILURE"));
}

#[test]
fn owned_sections_can_be_turned_off() {
    let mut cfg = config(FlavorName::Rcu, None, 1);
    cfg.owned = 0.0;
    cfg.faults = false;
    let report = run(&cfg).unwrap();
    assert!(report.passed(), "{report}");
    assert_eq!(report.owned.sections, 0, "{report}");
    assert!(report.to_string().contains("owned sections: off"));
    cfg.owned = 1.5;
    assert!(matches!(run(&cfg), Err(TortureError::InvalidConfig(_))));
}

#[test]
fn qsbr_refuses_membarrier() {
    let err = run(&config(FlavorName::Qsbr, Some(FenceKind::Membarrier), 1)).unwrap_err();
    assert!(matches!(err, TortureError::InvalidConfig(_)));
    assert!(err
        .to_string()
        .contains("does not apply to the qsbr flavor"));
    for flavor in [FlavorName::QsbrFlatMap, FlavorName::QsbrFencedFlatMap] {
        let err = run(&config(flavor, Some(FenceKind::Membarrier), 1)).unwrap_err();
        assert!(err
            .to_string()
            .contains(&format!("does not apply to the {} flavor", flavor.as_str())));
    }
}

#[test]
fn four_seconds_of_recseq() {
    let report = run(&config(FlavorName::Recseq, None, 4)).unwrap();
    println!("{report}");
    assert!(report.passed(), "the recseq flavor failed:\n{report}");
    assert_eq!(report.flavor, "recseq");
    // Only the writer wait runs; every other path is skipped, and the report says so.
    assert_eq!(report.paths_run(), [UpdateKind::Sync]);
    assert_eq!(report.paths_skipped().len(), UpdateKind::ALL.len() - 1);
    let text = report.to_string();
    assert!(
        text.contains("update paths: ran sync; skipped (not supported) sync_exp cond"),
        "{text}"
    );
    assert!(report.writer_updates[UpdateKind::Sync.index()] > 0);
    assert!(report.updater_ops[UpdateKind::Sync.index()] > 0);
    assert!(report.stats.normal_gps > 0, "no replacement completed");
    assert!(report.reads > 0 && report.pauses > 0);
    assert_eq!(
        report.circulation[0], report.circulation[9],
        "every published element must have been freed:\n{report}"
    );
    let faults = &report.faults;
    assert!(faults.reader_exits > 0, "no reader exited:\n{report}");
    assert!(
        faults.reads_during_exit > 0,
        "no reader read through thread exit:\n{report}"
    );
    assert_eq!(faults.panics_injected, 0, "RecSeq has no callbacks");
    assert!(
        faults.stalls_injected > 0,
        "no stall was injected:\n{report}"
    );
    assert_eq!(faults.stalls_reported, faults.stalls_injected);
}

/// A broken RecSeq, for the checker's sake: readers read one cell, and `synchronize` replaces
/// another that no reader ever reads, so its scan finds no counter and returns at once (the
/// bug of a writer that scans the wrong counters, or none). With no cookies, the Reader Pipe
/// alone must catch it.
mod busted_recseq {
    use rcukit::{RecSeq, RecSeqGuard};
    use rcukit_torture::flavor::{Flavor, FlavorStats, UpdateKind};

    pub(crate) struct WrongCell {
        pub read: RecSeq<()>,
        pub replaced: RecSeq<()>,
    }

    impl Flavor for WrongCell {
        type Reader<'a> = ();
        type Guard<'a> = RecSeqGuard<'a, ()>;
        type Cookie = ();

        fn name(&self) -> &'static str {
            "recseq-busted"
        }
        fn describe(&self) -> String {
            "readers read one RecSeq, synchronize replaces another".into()
        }
        fn register_reader(&self) {}
        fn read<'r>(&'r self, _reader: &'r ()) -> RecSeqGuard<'r, ()> {
            self.read.read()
        }
        fn supports(&self, kind: UpdateKind) -> bool {
            kind == UpdateKind::Sync
        }
        fn has_cookies(&self) -> bool {
            false
        }
        fn synchronize(&self) {
            self.replaced.replace(());
        }
        fn stats(&self) -> FlavorStats {
            FlavorStats {
                normal_gps: self.replaced.replacements(),
                ..FlavorStats::default()
            }
        }
    }
}

#[test]
fn a_recseq_whose_writer_does_not_wait_fails() {
    let flavor = busted_recseq::WrongCell {
        read: RecSeq::new(()),
        replaced: RecSeq::new(()),
    };
    let mut cfg = config(FlavorName::Recseq, None, 10);
    cfg.stop_on_error = true;
    let report = run_flavor(flavor, &cfg).unwrap();
    println!("{report}");
    assert!(!report.passed());
    assert!(report.pipe_errors() > 0, "no Reader Pipe error:\n{report}");
    assert!(report.stopped_early, "it should stop at the first error");
}

#[test]
fn bad_settings_are_refused() {
    let mut cfg = config(FlavorName::Rcu, None, 1);
    cfg.readers = 0;
    assert!(matches!(run(&cfg), Err(TortureError::InvalidConfig(_))));
    cfg.readers = 1;
    cfg.duration = Duration::ZERO;
    assert!(matches!(run(&cfg), Err(TortureError::InvalidConfig(_))));
}

/// How the lab (or any clap binary) embeds the torture command.
#[derive(Parser)]
struct Embedding {
    #[command(flatten)]
    torture: TortureArgs,
}

#[test]
fn the_arguments_flatten_into_another_command() {
    let e = Embedding::parse_from([
        "lab",
        "--duration",
        "1500ms",
        "--flavor",
        "busted",
        "--fence",
        "seqcst",
        "--readers",
        "3",
        "--updaters",
        "0",
        "--no-faults",
    ]);
    let cfg = e.torture.config();
    assert_eq!(cfg.duration, Duration::from_millis(1500));
    assert_eq!(cfg.flavor, FlavorName::Busted);
    assert_eq!(cfg.fence, Some(FenceKind::SeqCst));
    assert_eq!((cfg.readers, cfg.updaters, cfg.faults), (3, 0, false));
    let defaults = Embedding::parse_from(["lab"]).torture.config();
    assert_eq!(defaults.duration, Duration::from_secs(30));
    assert_eq!(defaults.flavor, FlavorName::Rcu);
    assert!(defaults.faults);
    for (arg, name) in [
        ("qsbr", FlavorName::Qsbr),
        ("qsbr-fenced", FlavorName::QsbrFenced),
        ("recseq", FlavorName::Recseq),
        ("map", FlavorName::Map),
        ("busted-map", FlavorName::BustedMap),
        ("flat-map", FlavorName::FlatMap),
        ("busted-flat-map", FlavorName::BustedFlatMap),
    ] {
        let cfg = Embedding::parse_from(["lab", "--flavor", arg])
            .torture
            .config();
        assert_eq!(cfg.flavor, name);
        assert_eq!(name.as_str(), arg);
    }
}

#[test]
fn the_binary_exits_non_zero_on_failure_and_on_bad_usage() {
    let bin = env!("CARGO_BIN_EXE_rcukit-torture");
    let out = Command::new(bin)
        .args([
            "--flavor",
            "busted",
            "--stop-on-error",
            "--duration",
            "10s",
            "--progress",
            "0s",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert_eq!(
        stdout.trim_end().lines().last(),
        Some("FAILURE"),
        "{stdout}"
    );

    let out = Command::new(bin)
        .args(["--flavor", "qsbr", "--fence", "membarrier"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not apply to the qsbr flavor"));

    let out = Command::new(bin).args(["--readers", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A QSBR-shaped flavor emulated on an rcukit domain: a registered reader is "online" and holds
/// a guard all the time, and a quiescent state drops it and takes a new one. It checks that the
/// trait's registration path (`register_reader`, `quiescent_state`) works, with a correct
/// flavor that must pass.
mod qsbr_shaped {
    use rcukit::Rcu;
    use rcukit_torture::flavor::{Flavor, FlavorStats, UpdateKind};
    use std::cell::RefCell;
    use std::time::Duration;

    pub(crate) struct Emulated(pub Rcu);

    pub(crate) struct Online<'a> {
        rcu: &'a Rcu,
        guard: RefCell<Option<rcukit::Guard<'a>>>,
    }

    impl Flavor for Emulated {
        type Reader<'a> = Online<'a>;
        type Guard<'a> = ();
        type Cookie = ();

        fn name(&self) -> &'static str {
            "qsbr-emulated"
        }
        fn describe(&self) -> String {
            "online readers hold an rcukit guard between quiescent states".into()
        }
        fn register_reader(&self) -> Online<'_> {
            Online {
                rcu: &self.0,
                guard: RefCell::new(Some(self.0.read())),
            }
        }
        fn read<'r>(&'r self, reader: &'r Online<'_>) {
            assert!(reader.guard.borrow().is_some(), "reading while offline");
        }
        fn quiescent_state(&self, reader: &mut Online<'_>) {
            let guard = reader.guard.get_mut();
            *guard = None;
            *guard = Some(reader.rcu.read());
        }
        fn supports(&self, kind: UpdateKind) -> bool {
            matches!(kind, UpdateKind::Sync | UpdateKind::SyncExp)
        }
        fn has_cookies(&self) -> bool {
            false
        }
        fn synchronize(&self) {
            self.0.synchronize()
        }
        fn synchronize_expedited(&self) {
            self.0.synchronize_expedited()
        }
        fn stats(&self) -> FlavorStats {
            let s = self.0.stats();
            FlavorStats {
                normal_gps: s.normal_gps,
                expedited_gps: s.expedited_gps,
                stalls: s.stalls,
                ..FlavorStats::default()
            }
        }
        fn stall_timeout(&self) -> Option<Duration> {
            Some(Duration::from_millis(200))
        }
    }
}

#[test]
fn a_registration_based_flavor_runs_through_the_same_engine() {
    let rcu = rcukit::Rcu::builder()
        .stall_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let report = rcukit_torture::run_flavor(
        qsbr_shaped::Emulated(rcu),
        &config(FlavorName::Rcu, None, 3),
    )
    .unwrap();
    println!("{report}");
    assert!(report.passed(), "{report}");
    assert!(report.flavor == "qsbr-emulated");
    assert!(report.writer_updates[UpdateKind::Sync.index()] > 0);
    assert!(report.writer_updates[UpdateKind::Call.index()] == 0);
    assert!(report.faults.stalls_reported > 0, "{report}");
}

/// The verdict's exit code stands where the output cannot be written: a report that stdout
/// cannot take (a full disk) is named on stderr with its verdict, and progress lines on a stderr
/// whose reader is gone are dropped. (`println!` and `eprintln!` panicked there: exit code 101,
/// the verdict lost.)
#[cfg(target_os = "linux")]
#[test]
fn the_verdict_stands_when_the_output_cannot_be_written() {
    let bin = env!("CARGO_BIN_EXE_rcukit-torture");
    let args = ["--duration", "1s", "--progress", "100ms"];
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(bin).args(args).stdout(full).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("cannot print the report"), "{stderr}");
    assert!(stderr.contains("SUCCESS"), "{stderr}");

    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(bin)
        .args(args)
        .stderr(writer)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(
        stdout.trim_end().lines().last(),
        Some("SUCCESS"),
        "{stdout}"
    );
}
