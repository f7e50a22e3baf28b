//! Report routing: a C function that receives rcukit's reports (a reader stalling a grace
//! period, and the like) instead of standard error.
//!
//! The C hook is wrapped in a Rust closure handed to `RcuBuilder::on_report` (or
//! `QsbrBuilder::on_report`), so every guarantee of [`rcukit::report`] holds: it runs on
//! whichever thread makes the report, a report never fails, and the hook must not wait for a
//! grace period or a barrier of the domain (such a call aborts with the Rust API's message, as
//! it would panic in Rust). The strings it receives live for the duration of the call.

use rcukit::Report;
use std::ffi::{c_char, c_void, CString};

/// What a report is about.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum rcukit_report_kind {
    /// A grace period has waited for one reader longer than the stall timeout; it keeps
    /// waiting.
    RCUKIT_REPORT_STALL = 0,
    /// A callback panicked (only Rust callbacks can; C callbacks never do).
    RCUKIT_REPORT_CALLBACK_PANIC = 1,
    /// Any other report (later versions may add kinds).
    RCUKIT_REPORT_OTHER = 2,
}

/// One report, valid for the duration of the hook call.
#[repr(C)]
#[derive(Debug)]
pub struct rcukit_report {
    /// What it is about.
    pub kind: rcukit_report_kind,
    /// The name of the domain that made it (NUL-terminated).
    pub domain: *const c_char,
    /// The whole report in words, one line without a newline, exactly what would have gone
    /// to standard error (NUL-terminated).
    pub message: *const c_char,
}

/// A report hook: `context` is the pointer given to `rcukit_config_set_report_hook`.
pub type rcukit_report_fn =
    Option<unsafe extern "C" fn(report: *const rcukit_report, context: *mut c_void)>;

/// A C hook and its context, callable from any thread.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CHook {
    hook: unsafe extern "C" fn(*const rcukit_report, *mut c_void),
    context: *mut c_void,
}

// SAFETY: `rcukit_config_set_report_hook` documents that the hook is called from any thread
// with `context`; the C caller promises that this is sound.
unsafe impl Send for CHook {}
// SAFETY: as above: calls may happen from several threads at once.
unsafe impl Sync for CHook {}

impl CHook {
    pub(crate) fn new(
        hook: unsafe extern "C" fn(*const rcukit_report, *mut c_void),
        context: *mut c_void,
    ) -> CHook {
        CHook { hook, context }
    }

    /// Hand `report` to the C hook.
    pub(crate) fn deliver(&self, report: &Report) {
        let (kind, domain) = match report {
            Report::Stall(stall) => (rcukit_report_kind::RCUKIT_REPORT_STALL, &stall.domain),
            Report::CallbackPanic(panic) => (
                rcukit_report_kind::RCUKIT_REPORT_CALLBACK_PANIC,
                &panic.domain,
            ),
            Report::WakerPanic(panic) => (rcukit_report_kind::RCUKIT_REPORT_OTHER, &panic.domain),
            _ => (rcukit_report_kind::RCUKIT_REPORT_OTHER, &String::new()),
        };
        let domain = c_string(domain);
        let message = c_string(&report.to_string());
        let c_report = rcukit_report {
            kind,
            domain: domain.as_ptr(),
            message: message.as_ptr(),
        };
        // SAFETY: the C caller gave a hook that accepts a report pointer valid for the call and
        // its own context, from any thread (see `rcukit_config_set_report_hook`).
        unsafe { (self.hook)(&c_report, self.context) };
    }
}

/// `text` as a C string (a NUL byte inside, which rcukit's names never contain, becomes U+FFFD).
fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', "\u{FFFD}")).expect("NUL bytes were replaced")
}
