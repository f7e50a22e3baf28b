//! Small helpers several test binaries share: the process's resident set, and the proptest
//! configuration for Miri.

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

/// `cases` cases, 2 under Miri, and no regression file there (Miri's isolation has no
/// `getcwd`).
pub(crate) fn proptest_config(cases: u32) -> ProptestConfig {
    let mut config = ProptestConfig::with_cases(if cfg!(miri) { 2 } else { cases });
    if cfg!(miri) {
        config.failure_persistence = None;
    }
    config
}
