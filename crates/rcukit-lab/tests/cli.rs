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
