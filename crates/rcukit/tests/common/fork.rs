//! Running code in a forked child under a deadline: a child that hangs is killed and reported,
//! so no debugger is needed to tell a hang from a slow child.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Fork, run `body` in the child (its exit status: 0 if it returned, 3 if it panicked) and
/// return the child's wait status, killing it if it has not exited within `limit`.
pub(crate) fn fork_within(limit: Duration, body: impl FnOnce()) -> Result<i32, String> {
    // SAFETY: the child only runs `body` and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(if outcome.is_ok() { 0 } else { 3 }) };
    }
    wait_within(pid, limit)
}

/// Wait for child `pid` to exit; kill it if it has not within `limit`.
pub(crate) fn wait_within(pid: libc::pid_t, limit: Duration) -> Result<i32, String> {
    let deadline = Instant::now() + limit;
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            return Ok(status);
        }
        if Instant::now() > deadline {
            // SAFETY: killing and reaping our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return Err(format!("the child hung (no exit within {limit:?})"));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Did the child exit with status 0?
pub(crate) fn succeeded(status: i32) -> bool {
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

/// Round `round` of a test that forks beside busy threads of its own: run `body` in a child
/// ([`fork_within`] `limit`) and require it to succeed. A hung child first sets `stop`, so that
/// the busy threads end, then fails the test; a failed one fails it. Both name the round.
pub(crate) fn child_round(round: u64, limit: Duration, stop: &AtomicBool, body: impl FnOnce()) {
    let status = match fork_within(limit, body) {
        Ok(status) => status,
        Err(e) => {
            stop.store(true, Ordering::Relaxed);
            panic!("round {round}: {e}");
        }
    };
    assert!(
        succeeded(status),
        "round {round}: the child failed ({status:#x})"
    );
}
