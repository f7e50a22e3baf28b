//! liburcu's ABI from C: programs in `tests/c/`, compiled by the system C compiler and run in
//! child processes against `liburcu-rcukit.so.8` as installed (see `rcukit-c-harness`).
//!
//! `flavor.c` (compiled once per flavor) and `misuse.c` declare liburcu's functions
//! themselves (`urcu_abi.h`) and always run. `liburcu_headers.c` is a program written with
//! liburcu's own headers; it needs Debian's `liburcu-dev` (`scripts/install-c-peers.sh`,
//! which `.ci/run` calls when it can) and is skipped, with a message, where it is missing. It
//! checks that a binary built and linked against liburcu runs on rcukit through
//! `LD_LIBRARY_PATH` alone, that relinking works, and that a binary built with `_LGPL_SOURCE`
//! refuses to start on rcukit instead of running unprotected.

use rcukit_c_harness::{self as harness, Ran};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// A hung program is killed after this long (they take a second or two; a loaded machine and
/// debug builds of the libraries make some much slower).
const LIMIT: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Flavor {
    Memb,
    Qsbr,
}

impl Flavor {
    fn library(self) -> &'static str {
        match self {
            Flavor::Memb => "-lurcu-memb",
            Flavor::Qsbr => "-lurcu-qsbr",
        }
    }

    fn define(self) -> Option<String> {
        (self == Flavor::Qsbr).then(|| "-DQSBR".to_string())
    }
}

/// How a program is linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Link {
    /// Against liburcu-rcukit directly (relinked), with an rpath.
    Rcukit,
    /// Against Debian's liburcu (the substitution happens at run time).
    Liburcu,
}

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"))
}

/// Compile `tests/c/NAME.c` once per (flavor, link, extra) combination.
fn program(name: &str, flavor: Flavor, link: Link, extra: &[&str]) -> PathBuf {
    static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let key = format!("{name}-{flavor:?}-{link:?}{}", extra.join(""));
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = built.get_or_insert_with(HashMap::new).get(&key) {
        return path.clone();
    }
    let staged = harness::staged();
    let mut args: Vec<String> = flavor.define().into_iter().collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    match link {
        Link::Rcukit => {
            let dir = staged.urcu_dir().display().to_string();
            args.extend([format!("-L{dir}"), format!("-Wl,-rpath,{dir}")]);
            args.push(flavor.library().to_string());
        }
        Link::Liburcu => {
            args.push(flavor.library().to_string());
            args.push("-lurcu-cds".to_string());
        }
    }
    let path = harness::compile(&key, &[source(name)], &args);
    built
        .get_or_insert_with(HashMap::new)
        .insert(key, path.clone());
    path
}

fn run_flavor(flavor: Flavor, test: &str) -> Ran {
    harness::run(
        &program("flavor", flavor, Link::Rcukit, &[]),
        &[test],
        &[],
        LIMIT,
    )
}

#[track_caller]
fn passes(flavor: Flavor, test: &str) {
    run_flavor(flavor, test).assert_success(&format!("flavor ({flavor:?}) {test}"));
}

macro_rules! both_flavors {
    ($($name:ident => $test:literal,)*) => {
        mod memb {
            $(#[test] fn $name() { super::passes(super::Flavor::Memb, $test); })*
        }
        mod qsbr {
            $(#[test] fn $name() { super::passes(super::Flavor::Qsbr, $test); })*
        }
    };
}

both_flavors! {
    grace_periods_protect_readers => "gp",
    call_rcu_frees_after_readers_and_barrier_waits => "call",
    defer_rcu_runs_after_a_grace_period => "defer",
    a_defer_rcu_flood_waits_only_where_it_may => "defer-flood",
    one_word_poll_cookies => "poll",
    call_rcu_data_functions_keep_liburcus_contract => "crdp",
    pointer_helpers => "pointer",
    the_flavor_table_works => "table",
    forked_children_work_with_and_without_the_hooks => "fork",
    a_child_forked_during_the_first_call_builds_the_domain_again => "fork-first-use",
    pthread_key_destructors_run_registered => "key-destructor",
    the_callback_thread_asked_from_the_first_callback_is_its_own => "get-thread",
    exited_threads_hold_no_grace_period => "thread-exit",
    barrier_while_reading => "barrier-while-reading",
}

/// A signal handler's read section is protected wherever the signal interrupts the thread's
/// own lock or unlock. (Before the memb functions ordered their steps for it, and rcukit's
/// records took a section nested in an unannounced one as outermost, about one handler in
/// 4,000 read an object a grace period had let go.)
#[test]
fn memb_signal_handlers_read_protected() {
    passes(Flavor::Memb, "signal");
}

/// As in liburcu, a quiescent state of an offline QSBR thread brings it online. (It stayed
/// offline, and the reads that followed were unprotected.)
#[test]
fn qsbr_a_quiescent_state_brings_an_offline_thread_online() {
    passes(Flavor::Qsbr, "qs-online");
}

/// `get_call_rcu_thread()` within a memb read-side critical section, before any callback ran:
/// 0 and a message naming that call (it asked for a barrier, refused with a message naming
/// `rcu_barrier()`, which the program never called).
#[test]
fn memb_callback_thread_asked_while_reading_before_any_callback_reports_and_returns() {
    let ran = run_flavor(Flavor::Memb, "get-thread-reading");
    ran.assert_success("flavor (memb) get-thread-reading");
    assert!(
        ran.stderr
            .contains("get_call_rcu_thread() called within a read-side critical section")
            && !ran.stderr.contains("rcu_barrier()"),
        "stderr:\n{}",
        ran.stderr
    );
}

#[test]
fn memb_barrier_inside_a_read_section_reports_and_returns() {
    let ran = run_flavor(Flavor::Memb, "barrier-while-reading");
    ran.assert_success("flavor (memb) barrier-while-reading");
    assert!(
        ran.stderr
            .contains("rcu_barrier() called from within a read-side critical section"),
        "no error line:\n{}",
        ran.stderr
    );
}

#[track_caller]
fn aborts(case: &str, messages: &[&str]) {
    harness::run(
        &program("misuse", Flavor::Memb, Link::Rcukit, &["-lurcu-qsbr"]),
        &[case],
        &[],
        LIMIT,
    )
    .assert_aborted(&format!("misuse {case}"), messages);
}

#[test]
fn misuse_memb_unlock_without_lock() {
    aborts(
        "memb-unlock-without-lock",
        &[
            "urcu_memb_read_unlock()",
            "without a matching rcu_read_lock()",
        ],
    );
}

#[test]
fn misuse_memb_synchronize_inside_a_read_section() {
    aborts(
        "memb-synchronize-in-read",
        &["synchronize_expedited() called inside a read-side critical section"],
    );
}

#[test]
fn misuse_memb_register_twice() {
    aborts("memb-register-twice", &["already registered"]);
}

#[test]
fn misuse_memb_unregister_without_register() {
    aborts("memb-unregister-unregistered", &["not registered"]);
}

#[test]
fn misuse_memb_barrier_from_a_callback() {
    aborts(
        "memb-barrier-from-callback",
        &["urcu_memb_barrier()", "barrier() called from a callback"],
    );
}

#[test]
fn misuse_qsbr_register_twice() {
    aborts("qsbr-register-twice", &["already registered"]);
}

#[test]
fn misuse_qsbr_unregister_without_register() {
    aborts("qsbr-unregister-unregistered", &["not registered"]);
}

/// Is liburcu-dev there? If not, say so (the test passes without checking anything else).
fn liburcu_dev() -> bool {
    let found = harness::has_header("urcu.h") && harness::has_header("urcu/rculfhash.h");
    if !found {
        eprintln!(
            "SKIPPED: liburcu's headers are not installed (Debian's liburcu-dev; run \
             `sudo scripts/install-c-peers.sh`): the tests with liburcu's own headers did not run"
        );
    }
    found
}

fn with_liburcu_headers(flavor: Flavor) {
    if !liburcu_dev() {
        return;
    }
    let staged = harness::staged();
    // Built and linked against Debian's liburcu; first on liburcu itself...
    let native = program("liburcu_headers", flavor, Link::Liburcu, &[]);
    harness::run(&native, &["liburcu"], &[], LIMIT)
        .assert_success(&format!("liburcu_headers ({flavor:?}) on liburcu"));
    // ...then, unchanged, on rcukit through LD_LIBRARY_PATH.
    let env = [("LD_LIBRARY_PATH", staged.urcu_dir().display().to_string())];
    harness::run(&native, &["rcukit"], &env, LIMIT).assert_success(&format!(
        "liburcu_headers ({flavor:?}) on rcukit by LD_LIBRARY_PATH"
    ));
    // Relinked against rcukit.
    let relinked = program("liburcu_headers", flavor, Link::Rcukit, &["-lurcu-cds"]);
    harness::run(&relinked, &["rcukit"], &[], LIMIT).assert_success(&format!(
        "liburcu_headers ({flavor:?}) relinked against rcukit"
    ));
}

#[test]
fn a_memb_program_built_with_liburcus_headers_runs_on_rcukit() {
    with_liburcu_headers(Flavor::Memb);
}

#[test]
fn a_qsbr_program_built_with_liburcus_headers_runs_on_rcukit() {
    with_liburcu_headers(Flavor::Qsbr);
}

#[test]
fn a_program_built_with_lgpl_source_refuses_to_start_on_rcukit() {
    if !liburcu_dev() {
        return;
    }
    let staged = harness::staged();
    for flavor in [Flavor::Memb, Flavor::Qsbr] {
        let inlined = program(
            "liburcu_headers",
            flavor,
            Link::Liburcu,
            &["-D_LGPL_SOURCE"],
        );
        harness::run(&inlined, &["liburcu"], &[], LIMIT).assert_success(&format!(
            "liburcu_headers ({flavor:?}, _LGPL_SOURCE) on liburcu"
        ));
        let env = [("LD_LIBRARY_PATH", staged.urcu_dir().display().to_string())];
        let ran = harness::run(&inlined, &["rcukit"], &env, LIMIT);
        assert!(
            !ran.succeeded() && ran.stderr.contains("undefined symbol"),
            "an _LGPL_SOURCE program must not start on rcukit ({flavor:?}): {:?}\n{}",
            ran.status,
            ran.stderr
        );
    }
}
