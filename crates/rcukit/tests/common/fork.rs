//! Running code in a forked child under a deadline: a child that hangs is killed and reported,
//! so no debugger is needed to tell a hang from a slow child. The report says what the child's
//! threads were doing: their states and kernel wait channels, and their stacks where `gdb` is
//! installed and may attach.

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
            let doing = what_it_was_doing(pid);
            // SAFETY: killing and reaping our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return Err(format!(
                "the child hung (no exit within {limit:?}); its threads:\n{doing}"
            ));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// What the threads of the hung process `pid` are doing: each one's name, state and kernel
/// wait channel, then their stacks as `gdb` prints them (if it is installed and may attach).
fn what_it_was_doing(pid: libc::pid_t) -> String {
    let mut out = String::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"));
    for task in tasks.into_iter().flatten().flatten() {
        let dir = task.path();
        let read = |file: &str| std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        let stat = read("stat");
        // The state follows the name, which is in parentheses and may hold anything.
        let state = stat
            .rsplit(") ")
            .next()
            .and_then(|rest| rest.split(' ').next());
        out += &format!(
            "  thread {} '{}': state {}, waiting in {}\n",
            task.file_name().to_string_lossy(),
            read("comm").trim_end(),
            state.unwrap_or("?"),
            read("wchan"),
        );
    }
    out + &stacks(pid)
}

/// The stacks of `pid`'s threads from `gdb` (given a minute), or why there are none.
fn stacks(pid: libc::pid_t) -> String {
    let gdb = std::process::Command::new("gdb")
        .args([
            "-batch",
            "-nx",
            "-p",
            &pid.to_string(),
            "-ex",
            "thread apply all bt",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn();
    let Ok(mut gdb) = gdb else {
        return "  (no stacks: gdb is not installed)\n".to_string();
    };
    // Read on another thread, so that a long output cannot block gdb.
    let mut pipe = gdb.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = std::io::Read::read_to_end(&mut pipe, &mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while gdb.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = gdb.kill();
            let _ = gdb.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let text = reader.join().unwrap_or_default();
    let frames: String = String::from_utf8_lossy(&text)
        .lines()
        .filter(|line| line.starts_with("Thread ") || line.starts_with('#'))
        .map(|line| format!("  {line}\n"))
        .collect();
    if frames.is_empty() {
        "  (no stacks: gdb could not attach)\n".to_string()
    } else {
        frames
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

/// A thread that a forked child started with [`spawn`]; [`join`](ChildThread::join) waits for
/// it.
pub(crate) struct ChildThread<R> {
    id: libc::pthread_t,
    returns: std::marker::PhantomData<R>,
}

/// Start `body` on a new thread, in a forked child. A `std` thread takes a lock of the standard
/// library as it starts and as it exits; a child forked while any other thread of the parent
/// was starting or exiting (another test's, the test harness's own) inherits that lock held,
/// and `std::thread::spawn` there waits for it for ever (see `rcukit::docs::limitations`).
/// This thread is started with `pthread_create` and takes no such lock.
pub(crate) fn spawn<R: Send + 'static>(
    body: impl FnOnce() -> R + Send + 'static,
) -> ChildThread<R> {
    // SAFETY: `body` borrows nothing.
    unsafe { spawn_unchecked(body) }
}

/// Run `body` on a new thread started as [`spawn`] starts it, and wait for it; as with a scoped
/// thread, `body` may borrow from the caller. A panic in `body` resumes here.
pub(crate) fn on_a_thread<R: Send>(body: impl FnOnce() -> R + Send) -> R {
    // SAFETY: the thread is joined before this returns, so it ends before anything it borrows.
    unsafe { spawn_unchecked(body) }.join()
}

/// [`spawn`] for a body that may borrow.
///
/// # Safety
///
/// The thread must be joined before anything `body` borrows ends.
unsafe fn spawn_unchecked<'a, R: Send + 'a>(
    body: impl FnOnce() -> R + Send + 'a,
) -> ChildThread<R> {
    let body: Box<dyn FnOnce() -> R + Send + 'a> = Box::new(body);
    // SAFETY: only the lifetime changes; the caller joins the thread before `'a` ends.
    let body: Box<dyn FnOnce() -> R + Send + 'static> = unsafe { std::mem::transmute(body) };
    let data = Box::into_raw(Box::new(body));
    // SAFETY: `start::<R>` takes back the box it is given, once; on failure it is ours again.
    unsafe {
        let mut id: libc::pthread_t = std::mem::zeroed();
        let r = libc::pthread_create(&mut id, std::ptr::null(), start::<R>, data.cast());
        if r != 0 {
            drop(Box::from_raw(data));
            panic!(
                "pthread_create failed: {}",
                std::io::Error::from_raw_os_error(r)
            );
        }
        ChildThread {
            id,
            returns: std::marker::PhantomData,
        }
    }
}

/// The thread's entry: runs the body and returns its outcome, boxed, to `pthread_join`.
extern "C" fn start<R>(data: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `data` is the box that `spawn_unchecked` leaked for this thread alone.
    let body = unsafe { Box::from_raw(data.cast::<Box<dyn FnOnce() -> R + Send>>()) };
    let outcome: std::thread::Result<R> =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
    Box::into_raw(Box::new(outcome)).cast()
}

impl<R> ChildThread<R> {
    /// Wait for the thread to end; what its body returned, or its panic resumed here.
    pub(crate) fn join(self) -> R {
        let mut returned = std::ptr::null_mut();
        // SAFETY: a joinable thread of ours, joined once (`join` takes `self`).
        let r = unsafe { libc::pthread_join(self.id, &mut returned) };
        assert_eq!(r, 0, "pthread_join failed");
        // SAFETY: what `start::<R>` returned: a leaked box of the body's outcome.
        let outcome = unsafe { Box::from_raw(returned.cast::<std::thread::Result<R>>()) };
        match *outcome {
            Ok(value) => value,
            Err(payload) => std::panic::resume_unwind(payload),
        }
    }
}
