//! Small helpers several test binaries share: the process's resident set, the wait for it
//! to come down and for kept mappings to go, the proptest configuration for Miri, the
//! message of a caught panic, a watchdog that turns a hang into a failure, and a flag raised
//! however a scope ends.

use proptest::test_runner::Config as ProptestConfig;

/// Resident bytes of this process (Linux).
pub(crate) fn resident() -> i64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: i64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("resident pages");
    pages * 4096
}

/// Wait until this process keeps no mapping of a dropped table for reuse (see `pages` in the
/// crate's internal docs): the thread that gives them back, `rcukit-pages`, exits once nothing
/// is kept. A resident set read before then can fall in the middle of the next measurement,
/// when a kept mapping goes. Fails if mappings are still kept after 30 s (memory never given
/// back).
pub(crate) fn wait_until_no_mapping_is_kept() {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while thread_named("rcukit-pages") {
        assert!(
            std::time::Instant::now() < deadline,
            "dropped tables' mappings were still kept after 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether a thread of this process is named `name` (Linux).
fn thread_named(name: &str) -> bool {
    thread_names().iter().any(|n| n == name)
}

/// The names of this process's threads (Linux: `/proc/self/task/*/comm`; none elsewhere).
pub(crate) fn thread_names() -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .map(|comm| comm.trim_end().to_string())
        .collect()
}

/// `bytes` in MiB, for messages.
pub(crate) fn mib(bytes: i64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// Wait until the resident set is less than a quarter of `grown` bytes above `before`, and fail
/// (naming `what`) if it is not within 30 s: a guard against memory never given back, not a
/// measurement (a process trims or unmaps what it kept at most once a second).
pub(crate) fn gives_back_a_quarter(what: &str, before: i64, grown: i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let stays = resident() - before;
        if stays < grown / 4 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: {:.1} MiB of the {:.1} MiB the fill took stayed resident",
            mib(stays),
            mib(grown)
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `cases` cases, 2 under Miri, and no regression file there (Miri's isolation has no
/// `getcwd`).
pub(crate) fn proptest_config(cases: u32) -> ProptestConfig {
    let mut config = ProptestConfig::with_cases(if cfg!(miri) { 2 } else { cases });
    if cfg!(miri) {
        config.failure_persistence = None;
    }
    config
}

/// The message of a caught panic (a `String` or a `&str` payload; empty for any other).
pub(crate) fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => payload
            .downcast_ref::<&str>()
            .map_or_else(String::new, |s| s.to_string()),
    }
}

/// Run `f`, which must panic with a message that contains `text`.
#[track_caller]
pub(crate) fn assert_panics_with<R>(text: &str, f: impl FnOnce() -> R) {
    let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) else {
        panic!("returned; expected a panic with {text:?}");
    };
    let message = panic_message(payload);
    assert!(message.contains(text), "{message}");
}

/// Run `body` on a thread of its own and return what it returned; fail with "hung" if it has
/// not finished within `limit` (so that a deadlock fails the test instead of stopping the run).
pub(crate) fn watchdog<R: Send + 'static>(
    limit: std::time::Duration,
    body: impl FnOnce() -> R + Send + 'static,
) -> R {
    use std::sync::mpsc::{channel, RecvTimeoutError};
    let (tx, rx) = channel();
    let handle = std::thread::Builder::new()
        .name("watched".into())
        .spawn(move || {
            let r = body();
            let _ = tx.send(());
            r
        })
        .unwrap();
    match rx.recv_timeout(limit) {
        Ok(()) => handle.join().unwrap(),
        Err(RecvTimeoutError::Disconnected) => match handle.join() {
            Ok(_) => unreachable!("the body sends before it returns"),
            Err(payload) => std::panic::resume_unwind(payload),
        },
        Err(RecvTimeoutError::Timeout) => panic!("hung: did not finish within {limit:?}"),
    }
}

/// Raises its flag when dropped, also while a failed assertion unwinds: threads of a
/// `thread::scope` that run until the flag is raised then stop, and the scope reports the
/// failure instead of waiting for them for ever.
pub(crate) struct StopOnDrop<'a>(pub(crate) &'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
