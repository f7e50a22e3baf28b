//! The command line: files written, and bad input rejected with a message and a non-zero exit
//! status (never a panic).

use std::path::Path;
use std::process::{Command, Output};

fn lab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rcukit-lab"))
        .args(args)
        .output()
        .expect("run rcukit-lab")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A clean failure: non-zero exit, a message, no panic.
fn assert_fails(args: &[&str], needle: &str) {
    let o = lab(args);
    let err = stderr(&o);
    assert!(!o.status.success(), "{args:?} succeeded");
    assert!(
        err.contains(needle),
        "{args:?}: expected {needle:?} in stderr:\n{err}"
    );
    assert!(!err.contains("panicked"), "{args:?} panicked:\n{err}");
}

#[test]
fn bad_flags_give_clear_errors() {
    assert_fails(&["reproduce", "--threads", "0"], "at least 1");
    assert_fails(&["netfilter", "--threads", "two"], "not a thread count");
    assert_fails(&["reproduce", "--only", "nosuch"], "nosuch");
    assert_fails(&["nosuch"], "nosuch");
    assert_fails(
        &["netfilter", "--readers", "0", "--no-progress"],
        "--readers",
    );
    assert_fails(&["netfilter", "--rounds", "0", "--no-progress"], "--rounds");
    assert_fails(&["netns", "--duration", "soon"], "not a duration");
    assert_fails(
        &["netns", "--duration", "0s", "--no-progress"],
        "--duration",
    );
    assert_fails(&["capture", "--rates", "0"], "--rates");
    assert_fails(&["callbacks", "--runs", "0"], "--runs");
    assert_fails(&["conntrack", "--maps", "nosuch"], "unknown map");
    assert_fails(&["conntrack", "--flows", "10", "--no-progress"], "--flows");
}

#[test]
fn a_value_listed_twice_is_an_error_and_bad_settings_make_no_output_directory() {
    let dir = tempfile::tempdir().unwrap();
    let never = dir.path().join("never");
    let out = never.to_str().unwrap();
    for (args, needle) in [
        (
            "conntrack --maps papaya,rcu-hashmap,papaya",
            "--maps lists papaya twice",
        ),
        (
            "conntrack --packet-threads 1,1",
            "--packet-threads lists 1 twice",
        ),
        (
            "percpu --thread-counts 2,1,2",
            "--thread-counts lists 2 twice",
        ),
        ("peers --parts read,read", "--parts lists read twice"),
        ("peers --read-threads 1,1", "--read-threads lists 1 twice"),
        ("peers --shape-readers 2,2", "--shape-readers lists 2 twice"),
        ("callbacks --delays 1ms,1ms", "--delays lists 1ms twice"),
        (
            "callbacks --exp-intervals 1ms,1ms",
            "--exp-intervals lists 1ms twice",
        ),
        ("capture --rates 1e6,1000000", "--rates lists 1000000 twice"),
        ("netfilter --readers 0", "--readers"),
    ] {
        let mut all: Vec<&str> = args.split(' ').collect();
        all.extend(["--no-progress", "--out", out]);
        assert_fails(&all, needle);
        assert!(!never.exists(), "{all:?} made its output directory");
    }
}

#[test]
fn a_run_into_a_directory_another_run_writes_is_an_error() {
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    // Hold the directory's lock as a run in progress does.
    let held = std::fs::File::create(dir.path().join(rcukit_lab::report::LOCK_FILE)).unwrap();
    // SAFETY: `flock` on a descriptor the test owns.
    assert_eq!(
        unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    assert_fails(
        &["netns", "--out", out, "--duration", "50ms", "--no-progress"],
        "another rcukit-lab run is writing to",
    );
    assert_fails(
        &["reproduce", "--quick", "--out", out],
        "another rcukit-lab run",
    );
    assert!(!dir.path().join("netns.json").exists());
    // Once that run is over, the directory is free.
    drop(held);
    let o = lab(&["netns", "--out", out, "--duration", "50ms", "--no-progress"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(dir.path().join("netns.json").exists());
}

#[test]
fn unwritable_output_directory_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let out = file.to_str().unwrap();
    assert_fails(
        &["netns", "--out", out, "--duration", "50ms"],
        "output directory",
    );
    assert_fails(&["reproduce", "--quick", "--out", out], "output directory");
}

fn assert_files(dir: &Path, name: &str) {
    for ext in ["json", "md", "svg"] {
        let p = dir.join(format!("{name}.{ext}"));
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(!text.is_empty(), "{} is empty", p.display());
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap())
            .unwrap();
    assert_eq!(json["experiment"], name);
}

#[test]
fn a_subcommand_writes_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nested/results");
    let o = lab(&[
        "netns",
        "--duration",
        "200ms",
        "--process",
        "200us",
        "--no-progress",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("| `net-mutex`"), "{stdout}");
    assert_files(&out, "netns");
}

#[test]
fn conntrack_writes_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let o = lab(&[
        "conntrack",
        "--quick",
        "--flows",
        "2000",
        "--packet-threads",
        "1",
        "--point",
        "30ms",
        "--maps",
        "rwlock-hashmap,rcu-hashmap",
        "--no-progress",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("| `rcu-hashmap`"), "{stdout}");
    assert_files(dir.path(), "conntrack");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("conntrack.json")).unwrap())
            .unwrap();
    for key in ["lookups_per_s", "latency_ns", "writer", "vs_baseline"] {
        assert!(
            json["maps"][1]["points"][0].get(key).is_some(),
            "{key} missing"
        );
    }
    assert_eq!(json["maps"][1]["map"], "rcu-hashmap");
    assert!(json["latency_method"].as_str().unwrap().contains("timed"));
}

#[test]
fn reproduce_writes_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let o = lab(&[
        "reproduce",
        "--quick",
        "--only",
        "percpu,netns",
        "--threads",
        "1",
        "--no-progress",
        "--out",
        out,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("## Summary"), "{stdout}");
    assert_files(dir.path(), "percpu");
    assert_files(dir.path(), "netns");
    let report = std::fs::read_to_string(dir.path().join("REPORT.md")).unwrap();
    assert!(report.contains("(percpu.svg)"));
    assert!(report.contains("(netns.json)"));
    assert!(report.contains("seed"));
    // Experiments not asked for are not run.
    assert!(!dir.path().join("netfilter.json").exists());
}

/// Run the lab with `env` set; `None` if it was still running after a minute (then killed).
fn lab_within_a_minute(args: &[&str], env: (&str, &str)) -> Option<Output> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rcukit-lab"))
        .args(args)
        .env(env.0, env.1)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run rcukit-lab");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().expect("wait for rcukit-lab").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Some(
        child
            .wait_with_output()
            .expect("collect rcukit-lab's output"),
    )
}

/// A measurement thread the system refuses after others started (`RCUKIT_LAB_REFUSE_THREAD`
/// refuses the `N`th as a full thread table would): a clean error, not a hang. (The scope
/// returned the error before stopping the threads it had started, and then waited for them
/// for ever.)
#[test]
fn a_thread_refused_mid_experiment_is_an_error_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let runs: [&[&str]; 3] = [
        &[
            "netfilter",
            "--readers",
            "3",
            "--phase",
            "50ms",
            "--additions",
            "2",
            "--rules",
            "10",
            "--rounds",
            "1",
        ],
        &[
            "conntrack",
            "--flows",
            "1000",
            "--point",
            "20ms",
            "--rounds",
            "1",
            "--packet-threads",
            "3",
            "--maps",
            "rcu-hashmap",
        ],
        &["percpu", "--thread-counts", "3", "--point", "20ms"],
    ];
    for run in runs {
        let args: Vec<&str> = run
            .iter()
            .copied()
            .chain(["--no-progress", "--out", out])
            .collect();
        let o = lab_within_a_minute(&args, ("RCUKIT_LAB_REFUSE_THREAD", "3"))
            .unwrap_or_else(|| panic!("{args:?} hung after a thread was refused"));
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err.contains("cannot start thread"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?} panicked:\n{err}");
    }
}

/// Its error reported on a stderr whose reader is gone: still the error's exit status, not a
/// panic's (`eprintln!` panicked there, exit status 101).
#[test]
fn an_error_on_a_closed_stderr_keeps_its_exit_status() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = Command::new(env!("CARGO_BIN_EXE_rcukit-lab"))
        .args(["netns", "--duration", "0s", "--no-progress"])
        .stderr(writer)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1), "{status:?}");
}

/// Results that stdout cannot take (a full disk: `/dev/full`) fail the run, with a message on
/// stderr. (Every write error was taken for a closed pipe and ignored: exit status 0.)
#[cfg(target_os = "linux")]
#[test]
fn results_stdout_cannot_take_fail_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_rcukit-lab"))
        .args(["netns", "--duration", "50ms", "--no-progress", "--out"])
        .arg(dir.path())
        .stdout(full)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot write to stdout"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// An argument that is not UTF-8 (a path): no panic. (The run's record of its command line
/// used `std::env::args`, which panics there.)
#[cfg(unix)]
#[test]
fn an_argument_that_is_not_utf8_is_no_panic() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(std::ffi::OsStr::from_bytes(b"bad\xffdir"));
    let o = Command::new(env!("CARGO_BIN_EXE_rcukit-lab"))
        .args(["netns", "--duration", "50ms", "--no-progress", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.join("netns.json").exists());
}

/// A result file that cannot be written (here `percpu.svg` is a directory) fails its
/// experiment; the others still run and the report is written, and no file is left half
/// written. (The first failed write ended the whole `reproduce`, with no report.)
#[test]
fn a_result_that_cannot_be_written_fails_only_its_experiment() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("percpu.svg")).unwrap();
    let out = dir.path().to_str().unwrap();
    let o = lab(&[
        "reproduce",
        "--quick",
        "--only",
        "percpu,netns",
        "--no-progress",
        "--out",
        out,
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("experiment percpu failed"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_files(dir.path(), "netns");
    let report = std::fs::read_to_string(dir.path().join("REPORT.md")).unwrap();
    assert!(report.contains("netns"), "{report}");
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.contains(".partial-"), "{name} left behind");
    }
}

/// The commit recorded with the results is the lab's source tree's, wherever the lab runs.
/// (It was the commit of the directory it ran in: another repository's, or none.)
#[test]
fn the_commit_recorded_is_the_labs_not_the_working_directorys() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_rcukit-lab"))
        .args(["netns", "--duration", "50ms", "--no-progress", "--out", "."])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("netns.json")).unwrap())
            .unwrap();
    let tree = env!("CARGO_MANIFEST_DIR");
    let head = Command::new("git")
        .args(["-C", tree, "rev-parse", "--short", "HEAD"])
        .output()
        .unwrap();
    if !head.status.success() {
        return; // a source tree outside git: nothing to record
    }
    let head = String::from_utf8(head.stdout).unwrap().trim().to_string();
    let recorded = json["env"]["git_commit"].as_str().unwrap_or_default();
    assert!(
        recorded.starts_with(&head),
        "recorded {recorded:?}, tree at {head}"
    );
}
