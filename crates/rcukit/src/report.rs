//! Reports: what rcukit tells a human (a reader stalling a grace period, a callback that
//! panicked), and where it goes.
//!
//! A report is a value ([`Report`]) handed to the domain's *report hook*: standard error by
//! default, or any function set with [`RcuBuilder::on_report`](crate::RcuBuilder::on_report)
//! (also on [`QsbrBuilder`](crate::QsbrBuilder) and [`RecSeqBuilder`](crate::RecSeqBuilder)).
//! With the `log` feature, `rcukit::report::log` is a ready-made hook that sends reports to the
//! [`log`](https://docs.rs/log) facade.
//!
//! # Reports never fail
//!
//! Reports are made by rcukit's own threads (the grace-period thread, callback workers) and in
//! the middle of its own work. `eprintln!` panics when standard error is a closed pipe, and a
//! hook may panic too; either would kill a thread that grace periods or callbacks depend on. So:
//!
//! * the default hook writes with `writeln!` and ignores write errors;
//! * a hook is called under `catch_unwind`: a panicking hook is caught, its payload dropped
//!   safely (a payload whose own `Drop` panics is leaked), and a line about it written to standard error (errors
//!   ignored again);
//! * making a report allocates a little (the names in it) but takes no lock of the domain.

use std::any::Any;
use std::fmt;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe, RefUnwindSafe, UnwindSafe};
use std::sync::Arc;
use std::time::Duration;

/// Something a human should know about, from a domain, a QSBR domain or a `RecSeq`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Report {
    /// A grace period (or a `RecSeq` replacement) has waited for one reader longer than the
    /// stall timeout. It keeps waiting; one report per stalled critical section.
    Stall(Stall),
    /// A callback (a `call` closure, or the `Drop` of a retired object) panicked. The panic was
    /// caught and counted, and the other callbacks still run.
    CallbackPanic(CallbackPanic),
    /// The `Waker` of a future waiting for a grace period (`synchronize_async()` and the like)
    /// or a barrier (`barrier_async()`) panicked when the grace period or the barrier's last
    /// marker woke it. The panic was caught; the other futures are still woken, and the thread
    /// that woke it (one that ended the grace period, or a callback worker) goes on.
    WakerPanic(WakerPanic),
}

/// A waker that panicked: see [`Report::WakerPanic`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WakerPanic {
    /// The domain's name.
    pub domain: String,
    /// The panic message (`"<non-string panic payload>"` when the payload is not a string).
    pub message: String,
}

/// A reader holding back a grace period: see [`Report::Stall`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Stall {
    /// What kind of object is stalled: `"domain"`, `"QSBR domain"` or `"RecSeq"`.
    pub domain_kind: &'static str,
    /// Its name (for a `RecSeq`, `#<id>`).
    pub domain: String,
    /// What is waiting: `"normal grace period"`, `"expedited grace period"` or `"replace()"`.
    pub waiter: &'static str,
    /// What it waits for, in words (the reader's thread name and OS thread id).
    pub reader: String,
    /// How long it had waited when the report was made.
    pub waited: Duration,
    /// The stall timeout it passed.
    pub timeout: Duration,
    /// What to do about it, in words (empty if nothing specific).
    pub advice: &'static str,
}

/// A callback that panicked: see [`Report::CallbackPanic`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CallbackPanic {
    /// The domain's name.
    pub domain: String,
    /// The panic message (`"<non-string panic payload>"` when the payload is not a string).
    pub message: String,
    /// Callbacks of this domain that have panicked so far, this one included.
    pub total: u64,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Report::Stall(s) => {
                write!(
                    f,
                    "rcukit: stall: {} of {} '{}' has waited {:.1?} for {} (stall timeout {:?}); ",
                    s.waiter, s.domain_kind, s.domain, s.waited, s.reader, s.timeout
                )?;
                if !s.advice.is_empty() {
                    write!(f, "{}; ", s.advice)?;
                }
                f.write_str("still waiting")
            }
            Report::CallbackPanic(p) => write!(
                f,
                "rcukit: a callback of domain '{}' panicked ({}); caught, counted ({} so far), \
                 the remaining callbacks still run",
                p.domain, p.message, p.total
            ),
            Report::WakerPanic(p) => write!(
                f,
                "rcukit: a future's waker panicked when a grace period or barrier of domain \
                 '{}' woke it ({}); caught, the other futures are still woken",
                p.domain, p.message
            ),
        }
    }
}

thread_local! {
    /// Set while this thread runs a report hook.
    static IN_HOOK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Is the calling thread running a report hook? (Waiting for a grace period there could wait
/// for the thread itself: the callers of the waits check.)
pub(crate) fn in_hook() -> bool {
    IN_HOOK.try_with(|h| h.get()).unwrap_or(false)
}

/// Marks the thread as running a hook until dropped (also on unwind).
struct InHook;

impl InHook {
    fn enter() -> InHook {
        let _ = IN_HOOK.try_with(|h| h.set(true));
        InHook
    }
}

impl Drop for InHook {
    fn drop(&mut self) {
        let _ = IN_HOOK.try_with(|h| h.set(false));
    }
}

/// A user's report hook. `UnwindSafe` and `RefUnwindSafe`, so that a domain (and every
/// container on it, as std's `HashMap` is) can cross `catch_unwind`: see [`hook`].
pub(crate) type Hook = Arc<dyn Fn(&Report) + Send + Sync + UnwindSafe + RefUnwindSafe>;

/// `f` as a [`Hook`]. It is called only inside `catch_unwind` by [`Reporter::report`], which
/// contains a panic of the hook and leaves no state of rcukit half-changed by it, so a domain
/// holding the hook is as unwind-safe as one without: the assertion is about rcukit's own
/// state, and whatever the hook itself captures is the user's to keep consistent (as with any
/// callback they call themselves).
pub(crate) fn hook(f: impl Fn(&Report) + Send + Sync + 'static) -> Hook {
    let f = AssertUnwindSafe(f);
    Arc::new(move |report: &Report| {
        let f = &f; // the whole wrapper is captured, not its field
        (f.0)(report)
    })
}

/// Where a domain's reports go (cheap to clone: shared by its threads).
#[derive(Clone, Default)]
pub(crate) struct Reporter {
    hook: Option<Hook>,
}

impl Reporter {
    pub(crate) fn new(hook: Option<Hook>) -> Reporter {
        Reporter { hook }
    }

    /// Deliver `report`. Never panics and never unwinds into the caller.
    pub(crate) fn report(&self, report: Report) {
        let Some(hook) = &self.hook else {
            to_stderr(&report);
            return;
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let _in_hook = InHook::enter();
            hook(&report)
        }));
        if let Err(payload) = outcome {
            let message = payload_message(&*payload);
            drop_payload(payload);
            stderr_line(format_args!(
                "rcukit: the report hook panicked ({message}) on: {report}"
            ));
        }
    }
}

impl fmt::Debug for Reporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.hook.is_some() {
            "Reporter(hook)"
        } else {
            "Reporter(stderr)"
        })
    }
}

/// The default hook: one line on standard error, write errors ignored (a closed pipe must not
/// kill the thread that reports).
fn to_stderr(report: &Report) {
    stderr_line(format_args!("{report}"));
}

/// Write one line to standard error, in one write where it fits, ignoring errors: a closed
/// stderr, or a pipe whose reader is gone. A program written in C keeps `SIGPIPE`'s default
/// action, which ends the process on a write to such a pipe (Rust programs ignore the signal):
/// on Linux the line is written with `SIGPIPE` blocked in this thread, and the signal that
/// write raised is taken back before it is unblocked (one already pending is left alone).
pub(crate) fn stderr_line(line: fmt::Arguments<'_>) {
    let line = format!("{line}\n");
    without_sigpipe(|| {
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    });
}

/// Run `write` with `SIGPIPE` blocked in this thread, and take back the `SIGPIPE` it raised
/// (see [`stderr_line`]).
#[cfg(all(target_os = "linux", not(miri), not(rcukit_loom)))]
fn without_sigpipe(write: impl FnOnce()) {
    use std::mem::MaybeUninit;
    use std::ptr::null_mut;
    // SAFETY: each set is initialised by `sigemptyset` or filled by the call it is given to
    // before it is read; the calls only read and write those sets and this thread's mask.
    unsafe {
        let mut pipe = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(pipe.as_mut_ptr());
        libc::sigaddset(pipe.as_mut_ptr(), libc::SIGPIPE);
        let pipe = pipe.assume_init();
        let mut pending = MaybeUninit::<libc::sigset_t>::uninit();
        let was_pending = libc::sigpending(pending.as_mut_ptr()) == 0
            && libc::sigismember(pending.as_ptr(), libc::SIGPIPE) == 1;
        let mut old = MaybeUninit::<libc::sigset_t>::uninit();
        if libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, old.as_mut_ptr()) != 0 {
            write();
            return;
        }
        write();
        if !was_pending {
            let now = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // Returns at once: the signal the write raised, if any, is taken.
            libc::sigtimedwait(&pipe, null_mut(), &now);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), null_mut());
    }
}

#[cfg(not(all(target_os = "linux", not(miri), not(rcukit_loom))))]
fn without_sigpipe(write: impl FnOnce()) {
    write();
}

/// A hook for [`RcuBuilder::on_report`](crate::RcuBuilder::on_report) that sends reports to
/// the [`log`](https://docs.rs/log) facade, target `"rcukit"`: stalls at `warn`, callback
/// panics at `error`.
#[cfg(feature = "log")]
pub fn log(report: &Report) {
    match report {
        Report::Stall(_) => log::warn!(target: "rcukit", "{report}"),
        Report::CallbackPanic(_) | Report::WakerPanic(_) => {
            log::error!(target: "rcukit", "{report}")
        }
    }
}

/// The message of a panic payload (`&str` or `String`), or a placeholder.
pub(crate) fn payload_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "<non-string panic payload>".to_string())
}

/// Drop every item, each under `catch_unwind`, so that a `Drop` that panics does not keep
/// the others from being dropped; then let the first panic go on as
/// [`resume_unless_unwinding`] does (the later payloads are dropped as [`drop_payload`]
/// does). What the containers' drops of many entries share.
pub(crate) fn drop_each<T>(items: impl IntoIterator<Item = T>) {
    let mut first_panic = None;
    for item in items {
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(item)))
        {
            match first_panic {
                None => first_panic = Some(payload),
                Some(_) => drop_payload(payload),
            }
        }
    }
    if let Some(payload) = first_panic {
        resume_unless_unwinding(payload);
    }
}

/// Values a call keeps to drop when it returns (those of attempts it retried), dropped then as
/// [`drop_each`] drops them: however many of their `Drop`s panic, each value is dropped once,
/// and only the first panic goes on (none, if the holder is dropped while the thread unwinds).
/// A plain `Vec` would drop the rest while unwinding from the first panic, and a second panic
/// there aborts the process.
pub(crate) struct DropLater<T>(Vec<T>);

impl<T> DropLater<T> {
    pub(crate) fn new() -> DropLater<T> {
        DropLater(Vec::new())
    }

    pub(crate) fn push(&mut self, value: T) {
        self.0.push(value);
    }
}

impl<T> Extend<T> for DropLater<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, values: I) {
        self.0.extend(values);
    }
}

impl<T> Drop for DropLater<T> {
    fn drop(&mut self) {
        drop_each(std::mem::take(&mut self.0));
    }
}

/// Let a panic caught in a drop go on, unless this thread is already unwinding from another
/// panic (the drop is part of that unwinding: a container dropped with the frame that
/// panicked). A panic out of such a drop would abort the process, so the payload is then
/// dropped as [`drop_payload`] does, and the first panic goes on alone.
pub(crate) fn resume_unless_unwinding(payload: Box<dyn Any + Send>) {
    if std::thread::panicking() {
        drop_payload(payload);
    } else {
        std::panic::resume_unwind(payload);
    }
}

/// Drop a panic payload without letting its `Drop` unwind into the caller. A payload whose own
/// `Drop` panics is caught; the second payload is leaked (`mem::forget`) rather than dropped,
/// since its `Drop` could panic again, and so on.
pub(crate) fn drop_payload(payload: Box<dyn Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct PanicsOnDrop;

    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            std::panic::panic_any(PanicsOnDrop);
        }
    }

    #[test]
    fn a_payload_whose_drop_panics_forever_is_contained() {
        drop_payload(Box::new(PanicsOnDrop));
    }

    #[test]
    fn a_panicking_hook_is_contained() {
        let reporter = Reporter::new(Some(Arc::new(|_: &Report| {
            std::panic::panic_any(PanicsOnDrop)
        })));
        reporter.report(Report::CallbackPanic(CallbackPanic {
            domain: "d".into(),
            message: "m".into(),
            total: 1,
        }));
    }
}
