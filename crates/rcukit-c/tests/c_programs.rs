//! The C API from C: programs in `tests/c/`, compiled by the system C compiler against the
//! installed header and library (see `rcukit-c-harness`), each run in a child process.
//!
//! They check the grace-period guarantee (readers assert that what they read was not freed,
//! as liburcu's `test_urcu` does; with guard tokens, owned sections and reader handles),
//! callback chains and barriers, owned sections crossing threads, QSBR, cookies, `fork()`,
//! thread exit (reader handles in pthread key destructors included), configuration errors, and
//! misuse aborting with its message. Every program is bounded (a few seconds) and killed if it hangs.

use rcukit_c_harness::{self as harness, Ran};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// A hung program is killed after this long (they take a second or two; a loaded machine and
/// debug builds of the libraries make some much slower).
const LIMIT: Duration = Duration::from_secs(120);

/// `tests/c/NAME.c`, compiled once against the shared library (`static`: against
/// `librcukit.a`).
fn program(name: &str, linking: Linking) -> PathBuf {
    static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let key = format!("{name}-{linking:?}");
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = built.get_or_insert_with(HashMap::new).get(&key) {
        return path.clone();
    }
    let staged = harness::staged();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let args = match linking {
        Linking::Shared => staged.rcukit_shared_args(),
        Linking::Static => staged.rcukit_static_args(),
        Linking::SharedInline => {
            let mut args = staged.rcukit_shared_args();
            args.insert(0, "-DRCUKIT_INLINE_READERS".to_string());
            args
        }
    };
    let path = harness::compile(&key, &[source], &args);
    built
        .get_or_insert_with(HashMap::new)
        .insert(key, path.clone());
    path
}

#[derive(Clone, Copy, Debug)]
enum Linking {
    Shared,
    Static,
    /// Shared, with the header's inline reader sections (`RCUKIT_INLINE_READERS`).
    SharedInline,
}

fn run(name: &str, args: &[&str]) -> Ran {
    harness::run(&program(name, Linking::Shared), args, &[], LIMIT)
}

#[track_caller]
fn passes(name: &str, args: &[&str]) {
    run(name, args).assert_success(&format!("{name} {}", args.join(" ")));
}

/// Run a misuse case and check that it aborted (SIGABRT) with every one of `messages` on
/// standard error.
#[track_caller]
fn aborts(case: &str, messages: &[&str]) {
    run("misuse", &[case]).assert_aborted(&format!("misuse {case}"), messages);
}

#[test]
fn grace_periods_protect_readers_normal() {
    passes("grace_period", &["sync", "own"]);
}

#[test]
fn grace_periods_protect_readers_expedited_global_domain() {
    passes("grace_period", &["expedited", "global"]);
}

#[test]
fn grace_periods_protect_readers_cond_synchronize() {
    passes("grace_period", &["cond", "own"]);
}

#[test]
fn grace_periods_protect_readers_polled_cookies() {
    passes("grace_period", &["poll", "own"]);
}

#[test]
fn callbacks_free_only_after_readers_are_done() {
    passes("grace_period", &["call", "own"]);
}

#[test]
fn grace_periods_wait_for_owned_sections() {
    passes("grace_period", &["owned", "own"]);
}

#[test]
fn grace_periods_wait_for_reader_handles() {
    passes("grace_period", &["reader", "own"]);
}

#[test]
fn reader_handles_of_the_global_domain() {
    passes("grace_period", &["reader", "global"]);
}

/// `name` built with the header's inline reader sections, run with `args`.
#[track_caller]
fn passes_inline(name: &str, args: &[&str]) {
    harness::run(&program(name, Linking::SharedInline), args, &[], LIMIT)
        .assert_success(&format!("{name} (inline readers) {}", args.join(" ")));
}

#[test]
fn grace_periods_wait_for_inline_reader_sections() {
    passes_inline("grace_period", &["reader", "own"]);
    passes_inline("grace_period", &["reader", "global"]);
}

#[test]
fn an_inline_reader_handle_in_a_pthread_key_destructor_still_protects() {
    passes_inline("thread_exit", &["reader-key-destructor"]);
}

#[test]
fn forked_children_make_inline_reader_handles() {
    passes_inline("reader_fork", &[]);
}

#[test]
fn misuse_through_inline_reader_sections_aborts_with_the_checked_message() {
    harness::run(
        &program("misuse", Linking::SharedInline),
        &["reader-unlock-unlocked"],
        &[],
        LIMIT,
    )
    .assert_aborted(
        "misuse (inline readers) reader-unlock-unlocked",
        &["rcukit_reader_unlock()", "this reader is not locked"],
    );
}

#[test]
fn the_static_library_works_too() {
    let program = program("grace_period", Linking::Static);
    harness::run(&program, &["expedited", "own"], &[], LIMIT)
        .assert_success("grace_period (static) expedited own");
}

#[test]
fn callback_chains_need_several_barriers() {
    passes("callbacks", &["chain"]);
}

#[test]
fn a_barrier_waits_for_every_producer() {
    passes("callbacks", &["producers"]);
}

#[test]
fn callbacks_of_one_thread_run_in_order() {
    passes("callbacks", &["order"]);
}

#[test]
fn callbacks_may_call_back_into_the_api() {
    passes("callbacks", &["reentry"]);
}

#[test]
fn a_callback_may_free_its_own_domain() {
    passes("callbacks", &["free-from-callback"]);
}

#[test]
fn owned_sections_end_on_another_thread() {
    passes("owned", &["cross-thread"]);
}

#[test]
fn owned_sections_outlive_their_domain_handle() {
    passes("owned", &["outlive-domain"]);
}

#[test]
fn qsbr_readers_are_protected_normal() {
    passes("qsbr", &["sync"]);
}

#[test]
fn qsbr_readers_are_protected_expedited() {
    passes("qsbr", &["expedited"]);
}

#[test]
fn qsbr_readers_are_protected_with_fenced_quiescent_states() {
    passes("qsbr", &["sync", "fenced"]);
    passes("qsbr", &["expedited", "fenced"]);
}

#[test]
fn qsbr_callbacks_wait_for_quiescent_states() {
    passes("qsbr", &["call"]);
}

#[test]
fn qsbr_cookies() {
    passes("qsbr", &["poll"]);
}

#[test]
fn a_qsbr_thread_that_exits_offline_holds_nothing() {
    passes("qsbr", &["exit-offline"]);
}

#[test]
fn cookies_are_values() {
    passes("cookies", &[]);
}

#[test]
fn forked_children_have_working_domains() {
    passes("fork", &[]);
}

/// A child forked while other threads make and free reader handles makes its own at once (the
/// table of live handles is held across `fork()`, never copied locked).
#[test]
fn forked_children_make_reader_handles() {
    passes("reader_fork", &[]);
}

#[test]
fn short_lived_threads_leave_nothing_behind() {
    passes("thread_exit", &["churn"]);
}

#[test]
fn a_thread_exiting_inside_a_section_is_reported() {
    passes("thread_exit", &["exit-reading"]);
}

#[test]
fn a_reader_handle_in_a_pthread_key_destructor_still_protects() {
    passes("thread_exit", &["reader-key-destructor"]);
}

#[test]
fn a_leaked_reader_handle_holds_no_grace_period() {
    passes("thread_exit", &["reader-leaked"]);
}

#[test]
fn a_qsbr_thread_exiting_online_is_reported() {
    passes("thread_exit", &["exit-online"]);
}

#[test]
fn configuration_errors_are_status_codes() {
    passes("config", &[]);
}

#[test]
fn misuse_synchronize_inside_a_read_section() {
    aborts(
        "synchronize-in-read",
        &[
            "rcukit: fatal error in rcukit_synchronize(), aborting: synchronize() called",
            "synchronize() called inside a read-side critical section of the same domain",
        ],
    );
}

#[test]
fn misuse_expedited_inside_a_read_section() {
    aborts(
        "expedited-in-read",
        &["synchronize_expedited() called inside a read-side critical section"],
    );
}

#[test]
fn misuse_barrier_inside_a_read_section() {
    aborts(
        "barrier-in-read",
        &["barrier() called inside a read-side critical section"],
    );
}

#[test]
fn misuse_cond_synchronize_inside_a_read_section() {
    aborts(
        "cond-in-read",
        &["cond_synchronize() called inside a read-side critical section"],
    );
}

#[test]
fn misuse_unlock_twice() {
    aborts(
        "unlock-twice",
        &["rcukit_read_unlock()", "this guard is not locked"],
    );
}

#[test]
fn misuse_unlock_without_lock() {
    aborts("unlock-zeroed", &["this guard is not locked"]);
}

#[test]
fn misuse_unlock_on_another_thread() {
    aborts("unlock-other-thread", &["locked by another thread"]);
}

#[test]
fn misuse_reader_unlock_without_lock() {
    aborts(
        "reader-unlock-unlocked",
        &[
            "rcukit: fatal error in rcukit_reader_unlock(), aborting: this reader is not locked",
            "without a matching rcukit_reader_lock()",
        ],
    );
}

#[test]
fn misuse_reader_lock_on_another_thread() {
    aborts(
        "reader-lock-other-thread",
        &[
            "rcukit_reader_lock()",
            "this reader belongs to another thread",
        ],
    );
}

#[test]
fn misuse_reader_unlock_on_another_thread() {
    aborts(
        "reader-unlock-other-thread",
        &[
            "rcukit_reader_unlock()",
            "this reader belongs to another thread",
        ],
    );
}

#[test]
fn misuse_reader_free_on_another_thread() {
    aborts(
        "reader-free-other-thread",
        &[
            "rcukit_reader_free()",
            "this reader belongs to another thread",
        ],
    );
}

#[test]
fn misuse_reader_free_while_locked() {
    aborts(
        "reader-free-locked",
        &["rcukit_reader_free()", "this reader is locked"],
    );
}

#[test]
fn misuse_null_reader() {
    aborts("reader-null", &["rcukit_reader_lock()", "`reader` is NULL"]);
}

#[test]
fn misuse_synchronize_inside_a_reader_section() {
    aborts(
        "synchronize-in-reader",
        &["synchronize() called inside a read-side critical section of the same domain"],
    );
}

#[test]
fn misuse_free_a_domain_with_live_readers() {
    aborts(
        "free-domain-with-readers",
        &[
            "rcukit_domain_free()",
            "1 reader(s) of this domain are still alive",
        ],
    );
}

#[test]
fn misuse_owned_end_twice() {
    aborts("owned-end-twice", &["this owned guard is not open"]);
}

#[test]
fn misuse_foreign_cookie() {
    aborts(
        "foreign-cookie",
        &["cookies are only meaningful for the domain that produced them"],
    );
}

#[test]
fn misuse_barrier_from_a_callback() {
    aborts("barrier-from-callback", &["rcukit_barrier()"]);
}

#[test]
fn misuse_free_the_global_domain() {
    aborts("free-global", &["the global domain is never freed"]);
}

#[test]
fn misuse_null_domain() {
    aborts("null-domain", &["rcukit_synchronize()", "`domain` is NULL"]);
}

#[test]
fn misuse_qsbr_synchronize_while_online() {
    aborts(
        "qsbr-synchronize-online",
        &["which is online in QSBR domain", "Go offline first"],
    );
}

#[test]
fn misuse_qsbr_register_twice() {
    aborts(
        "qsbr-register-twice",
        &["is already registered with QSBR domain"],
    );
}

#[test]
fn misuse_qsbr_free_with_registered_threads() {
    aborts("qsbr-free-registered", &["still registered"]);
}

/// The shared library calls none of its own exported functions through the dynamic symbol
/// table, so a program that also holds another copy of it and exports that copy's symbols
/// (linked with `librcukit.a` and `-rdynamic`, then loading a plugin built on `librcukit.so`)
/// cannot bind such a call to the other copy, whose domains are other domains. (`rcukit_call`
/// called the exported `rcukit_call_sized`: the shared copy's callback went to the static
/// copy's domain, and ran while a reader of its own domain was still inside.) `readelf -r`
/// lists the relocations that would bind elsewhere.
#[test]
fn the_shared_library_binds_its_own_functions_to_itself() {
    let library = harness::staged().lib_dir().join("librcukit.so");
    let Ok(out) = std::process::Command::new("readelf")
        .arg("-rW")
        .arg(&library)
        .output()
    else {
        eprintln!("skipped: no readelf here");
        return;
    };
    assert!(out.status.success(), "readelf -rW {}", library.display());
    let listed = String::from_utf8_lossy(&out.stdout);
    let own: Vec<&str> = listed
        .lines()
        .filter(|line| line.split_whitespace().any(|w| w.starts_with("rcukit_")))
        .collect();
    assert!(
        own.is_empty(),
        "the library's relocations to its own exported functions:\n{}",
        own.join("\n")
    );
}

/// A stall report written to a standard error that is a pipe with no reader does not end the
/// process (a C program keeps `SIGPIPE`'s default action; it did end it).
#[test]
fn a_report_to_a_closed_pipe_leaves_the_program_running() {
    passes("closed_pipe", &[]);
}
