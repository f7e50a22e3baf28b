//! The torture runs of every `cargo test`: ten seconds of rcutorture's method against rcukit in
//! each fence mode, and the busted flavor, which must fail.
//!
//! The two ten-second runs are separate tests, so cargo runs them side by side: on a 2-core
//! machine they share the CPUs, which slows them down but changes nothing they check (no
//! assertion is about time). The whole file takes a little over ten seconds.

use clap::Parser;
use rcukit::FenceKind;
use rcukit_torture::{run, Config, FlavorName, Report, TortureArgs, TortureError, UpdateKind};
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

/// A ten-second run must pass, use every update path and see every fault take effect.
fn assert_clean_run(report: &Report) {
    println!("{report}");
    assert!(
        report.passed(),
        "the rcu flavor failed the torture run:\n{report}"
    );
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
    assert!(faults.panics_injected > 0);
    assert_eq!(report.stats.callback_panics, faults.panics_injected);
    assert!(
        faults.stalls_injected > 0,
        "no stall was injected:\n{report}"
    );
    assert_eq!(faults.stalls_reported, faults.stalls_injected);
    assert!(report.stats.stalls >= faults.stalls_reported);
    assert!(faults.bursts > 0, "no callback burst:\n{report}");
    assert!(report.stats.expedited_gps > 0 && report.stats.normal_gps > 0);
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
fn qsbr_is_refused_until_it_exists() {
    let err = run(&config(FlavorName::Qsbr, None, 1)).unwrap_err();
    assert_eq!(err.to_string(), "qsbr flavor not available in this build");
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
        .args(["--flavor", "qsbr"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("qsbr flavor not available in this build")
    );

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

    pub struct Emulated(pub Rcu);

    pub struct Online<'a> {
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
