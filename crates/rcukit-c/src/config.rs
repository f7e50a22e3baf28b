//! [`rcukit_config`]: a domain's settings, filled in by C before the domain is built.
//!
//! The configuration is the C image of `RcuBuilder` (and of `QsbrBuilder`): an opaque object
//! made by [`rcukit_config_new`], changed by setters, read by `rcukit_domain_new`,
//! `rcukit_global_init` and `rcukit_qsbr_new` (any number of times), and freed by
//! [`rcukit_config_free`]. It records only the settings the program chose; everything else
//! keeps rcukit's default. Values are checked when a domain is built, by the Rust builder
//! itself, so that C and Rust accept exactly the same ranges with the same messages; a setter
//! only refuses what it cannot even store (a name that is not UTF-8, an unknown fence kind).
//!
//! A QSBR domain has fewer settings than an RCU domain: building one from a configuration that
//! sets an RCU-only setting fails with `RCUKIT_INVALID_SETTING` naming it, rather than
//! silently ignoring the program's choice.

use crate::boundary::FFI;
use crate::report::{rcukit_report_fn, CHook};
use crate::status::{fail, rcukit_status};
use rcukit::{FenceKind, QsbrBuilder, RcuBuilder};
use std::ffi::{c_char, c_void, CStr};
use std::time::Duration;

/// The domain picks `membarrier(2)` where the kernel has it, full fences otherwise (default).
pub const RCUKIT_FENCE_AUTO: u32 = 0;
/// Readers use a compiler fence and grace periods `membarrier(2)`; building fails where the
/// kernel lacks it.
pub const RCUKIT_FENCE_MEMBARRIER: u32 = 1;
/// Readers and grace periods use full fences (no system call).
pub const RCUKIT_FENCE_SEQCST: u32 = 2;

/// A domain's settings (opaque; see `rcukit_config_new`).
#[derive(Clone, Debug, Default)]
pub struct rcukit_config {
    name: Option<String>,
    normal_gp_delay: Option<Duration>,
    stall_timeout: Option<Duration>,
    fence: Option<FenceKind>,
    callback_workers: Option<usize>,
    expedited_callbacks: Option<bool>,
    backlog_callbacks: Option<u64>,
    backlog_bytes: Option<u64>,
    callback_batch: Option<usize>,
    fenced_quiescent_states: Option<bool>,
    readers_give_way: Option<bool>,
    report_hook: Option<CHook>,
}

impl rcukit_config {
    /// The settings as an `RcuBuilder`, or the name of a QSBR-only setting that was chosen.
    pub(crate) fn rcu_builder(&self) -> Result<RcuBuilder, &'static str> {
        if self.fenced_quiescent_states.is_some() {
            return Err("fenced_quiescent_states");
        }
        if self.readers_give_way.is_some() {
            return Err("readers_give_way");
        }
        let mut builder = RcuBuilder::default();
        if let Some(name) = &self.name {
            builder = builder.name(name.clone());
        }
        if let Some(delay) = self.normal_gp_delay {
            builder = builder.normal_gp_delay(delay);
        }
        if let Some(timeout) = self.stall_timeout {
            builder = builder.stall_timeout(timeout);
        }
        if let Some(fence) = self.fence {
            builder = builder.fence(fence);
        }
        if let Some(workers) = self.callback_workers {
            builder = builder.callback_workers(workers);
        }
        if let Some(enabled) = self.expedited_callbacks {
            builder = builder.expedited_callbacks(enabled);
        }
        if let Some(callbacks) = self.backlog_callbacks {
            builder = builder.backlog_callbacks(callbacks);
        }
        if let Some(bytes) = self.backlog_bytes {
            builder = builder.backlog_bytes(bytes);
        }
        if let Some(batch) = self.callback_batch {
            builder = builder.callback_batch(batch);
        }
        if let Some(hook) = self.report_hook {
            builder = builder.on_report(move |report| hook.deliver(report));
        }
        Ok(builder)
    }

    /// The settings as a `QsbrBuilder`, or the name of an RCU-only setting that was chosen.
    pub(crate) fn qsbr_builder(&self) -> Result<QsbrBuilder, &'static str> {
        let rcu_only = [
            ("fence", self.fence.is_some()),
            ("expedited_callbacks", self.expedited_callbacks.is_some()),
            ("backlog_bytes", self.backlog_bytes.is_some()),
            ("callback_batch", self.callback_batch.is_some()),
        ];
        if let Some((setting, _)) = rcu_only.iter().find(|(_, set)| *set) {
            return Err(setting);
        }
        let mut builder = QsbrBuilder::default();
        if let Some(name) = &self.name {
            builder = builder.name(name.clone());
        }
        if let Some(delay) = self.normal_gp_delay {
            builder = builder.normal_gp_delay(delay);
        }
        if let Some(timeout) = self.stall_timeout {
            builder = builder.stall_timeout(timeout);
        }
        if let Some(workers) = self.callback_workers {
            builder = builder.callback_workers(workers);
        }
        if let Some(callbacks) = self.backlog_callbacks {
            builder = builder.backlog_callbacks(callbacks);
        }
        if let Some(give_way) = self.readers_give_way {
            builder = builder.readers_give_way(give_way);
        }
        if let Some(fenced) = self.fenced_quiescent_states {
            builder = builder.fenced_quiescent_states(fenced);
        }
        if let Some(hook) = self.report_hook {
            builder = builder.on_report(move |report| hook.deliver(report));
        }
        Ok(builder)
    }
}

/// Run a setter on `config` (`None`: a NULL pointer, refused): `set` changes the
/// configuration and says whether the value was accepted.
fn setter(
    what: &'static str,
    config: Option<&mut rcukit_config>,
    set: impl FnOnce(&mut rcukit_config) -> rcukit_status,
) -> rcukit_status {
    FFI.guarded(what, || match config {
        Some(config) => set(config),
        None => fail(
            rcukit_status::RCUKIT_INVALID_ARGUMENT,
            format!("{what}(): the configuration is NULL"),
        ),
    })
}

/// A new configuration with every setting at rcukit's default. Free it with
/// `rcukit_config_free`; a domain built from it does not need it any more.
#[no_mangle]
pub extern "C" fn rcukit_config_new() -> *mut rcukit_config {
    FFI.guarded("rcukit_config_new", || {
        Box::into_raw(Box::<rcukit_config>::default())
    })
}

/// Free a configuration (NULL is ignored).
///
/// # Safety
///
/// `config` is NULL or came from `rcukit_config_new` and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rcukit_config_free(config: *mut rcukit_config) {
    FFI.guarded("rcukit_config_free", || {
        if !config.is_null() {
            // SAFETY: the caller gives back a pointer from `rcukit_config_new`, once.
            drop(unsafe { Box::from_raw(config) });
        }
    })
}

/// A name for the domain's threads and its reports (copied). `RCUKIT_INVALID_ARGUMENT` if it
/// is NULL or not UTF-8; an empty name is refused when the domain is built.
///
/// # Safety
///
/// `config` is NULL or live; `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn rcukit_config_set_name(
    config: *mut rcukit_config,
    name: *const c_char,
) -> rcukit_status {
    // SAFETY: the caller passes NULL or a live configuration.
    let config = unsafe { config.as_mut() };
    setter("rcukit_config_set_name", config, |config| {
        if name.is_null() {
            return fail(
                rcukit_status::RCUKIT_INVALID_ARGUMENT,
                "rcukit_config_set_name(): the name is NULL",
            );
        }
        // SAFETY: the caller passes a NUL-terminated string.
        match unsafe { CStr::from_ptr(name) }.to_str() {
            Ok(name) => {
                config.name = Some(name.to_string());
                rcukit_status::RCUKIT_OK
            }
            Err(e) => fail(
                rcukit_status::RCUKIT_INVALID_ARGUMENT,
                format!("rcukit_config_set_name(): the name is not UTF-8 ({e})"),
            ),
        }
    })
}

/// How long the normal grace-period thread waits, once woken, for more requests to batch into
/// the same grace period, in microseconds (default 1000; at most 10 s).
///
/// # Safety
///
/// `config` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rcukit_config_set_normal_gp_delay_us(
    config: *mut rcukit_config,
    microseconds: u64,
) -> rcukit_status {
    // SAFETY: the caller passes NULL or a live configuration.
    let config = unsafe { config.as_mut() };
    setter("rcukit_config_set_normal_gp_delay_us", config, |config| {
        config.normal_gp_delay = Some(Duration::from_micros(microseconds));
        rcukit_status::RCUKIT_OK
    })
}

/// How long a grace period may wait for one reader before a stall report, in milliseconds
/// (default 10000; at least 1).
///
/// # Safety
///
/// `config` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rcukit_config_set_stall_timeout_ms(
    config: *mut rcukit_config,
    milliseconds: u64,
) -> rcukit_status {
    // SAFETY: the caller passes NULL or a live configuration.
    let config = unsafe { config.as_mut() };
    setter("rcukit_config_set_stall_timeout_ms", config, |config| {
        config.stall_timeout = Some(Duration::from_millis(milliseconds));
        rcukit_status::RCUKIT_OK
    })
}

/// The barrier pair: `RCUKIT_FENCE_AUTO` (default), `RCUKIT_FENCE_MEMBARRIER` or
/// `RCUKIT_FENCE_SEQCST`; anything else is `RCUKIT_INVALID_ARGUMENT`. RCU domains only.
///
/// # Safety
///
/// `config` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rcukit_config_set_fence(
    config: *mut rcukit_config,
    fence: u32,
) -> rcukit_status {
    // SAFETY: the caller passes NULL or a live configuration.
    let config = unsafe { config.as_mut() };
    setter("rcukit_config_set_fence", config, |config| {
        config.fence = match fence {
            RCUKIT_FENCE_AUTO => None,
            RCUKIT_FENCE_MEMBARRIER => Some(FenceKind::Membarrier),
            RCUKIT_FENCE_SEQCST => Some(FenceKind::SeqCst),
            other => {
                return fail(
                    rcukit_status::RCUKIT_INVALID_ARGUMENT,
                    format!("rcukit_config_set_fence(): unknown fence kind {other}"),
                )
            }
        };
        rcukit_status::RCUKIT_OK
    })
}

/// Number of callback worker threads (default 1; 1 to 256).
///
/// # Safety
///
/// `config` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rcukit_config_set_callback_workers(
    config: *mut rcukit_config,
    workers: usize,
) -> rcukit_status {
    // SAFETY: the caller passes NULL or a live configuration.
    let config = unsafe { config.as_mut() };
    setter("rcukit_config_set_callback_workers", config, |config| {
        config.callback_workers = Some(workers);
        rcukit_status::RCUKIT_OK
    })
}

/// Whether expedited grace periods also release callbacks and `rcukit_synchronize()` callers
/// (default true). RCU domains only.
///
/// # Safety
///
/// `config` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rcukit_config_set_expedited_callbacks(
    config: *mut rcukit_config,
    enabled: bool,
) -> rcukit_status {
    // SAFETY: the caller passes NULL or a live configuration.
    let config = unsafe { config.as_mut() };
    setter("rcukit_config_set_expedited_callbacks", config, |config| {
        config.expedited_callbacks = Some(enabled);
        rcukit_status::RCUKIT_OK
    })
}

/// Whether each quiescent state (and each `rcukit_qsbr_thread_offline`) ends with a full
/// fence, as liburcu-qsbr's does (default true): a grace period that sleeps until a thread
/// wakes it pairs a fence of its own with it; without it (false) such a grace period
/// interrupts every CPU with `membarrier` instead (see `QsbrBuilder::fenced_quiescent_states`).
/// QSBR domains only.
///
/// # Safety
///
/// `config` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rcukit_config_set_fenced_quiescent_states(
    config: *mut rcukit_config,
    fenced: bool,
) -> rcukit_status {
    // SAFETY: the caller passes NULL or a live configuration.
    let config = unsafe { config.as_mut() };
    setter(
        "rcukit_config_set_fenced_quiescent_states",
        config,
        |config| {
            config.fenced_quiescent_states = Some(fenced);
            rcukit_status::RCUKIT_OK
        },
    )
}

/// Whether a registered thread that announces a quiescent state while a grace period has long
/// been waiting for other threads yields its CPU, once per grace period, so that threads
/// queued behind it run sooner (default true; see `QsbrBuilder::readers_give_way`). QSBR
/// domains only.
///
/// # Safety
///
/// `config` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rcukit_config_set_readers_give_way(
    config: *mut rcukit_config,
    give_way: bool,
) -> rcukit_status {
    // SAFETY: the caller passes NULL or a live configuration.
    let config = unsafe { config.as_mut() };
    setter("rcukit_config_set_readers_give_way", config, |config| {
        config.readers_give_way = Some(give_way);
        rcukit_status::RCUKIT_OK
    })
}

/// Callbacks waiting for a grace period, per worker, past which the worker runs expedited
/// grace periods (default 10000; at least 1).
///
/// # Safety
///
/// `config` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rcukit_config_set_backlog_callbacks(
    config: *mut rcukit_config,
    callbacks: u64,
) -> rcukit_status {
    // SAFETY: the caller passes NULL or a live configuration.
    let config = unsafe { config.as_mut() };
    setter("rcukit_config_set_backlog_callbacks", config, |config| {
        config.backlog_callbacks = Some(callbacks);
        rcukit_status::RCUKIT_OK
    })
}

/// Bytes of callbacks waiting for a grace period, per worker, past which the worker runs
/// expedited grace periods (default 16 MiB; at least 1). RCU domains only.
///
/// # Safety
///
/// `config` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rcukit_config_set_backlog_bytes(
    config: *mut rcukit_config,
    bytes: u64,
) -> rcukit_status {
    // SAFETY: the caller passes NULL or a live configuration.
    let config = unsafe { config.as_mut() };
    setter("rcukit_config_set_backlog_bytes", config, |config| {
        config.backlog_bytes = Some(bytes);
        rcukit_status::RCUKIT_OK
    })
}

/// Most callbacks a worker runs before it looks at its intake again (default 1024; 1 to
/// 1000000). RCU domains only.
///
/// # Safety
///
/// `config` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rcukit_config_set_callback_batch(
    config: *mut rcukit_config,
    batch: usize,
) -> rcukit_status {
    // SAFETY: the caller passes NULL or a live configuration.
    let config = unsafe { config.as_mut() };
    setter("rcukit_config_set_callback_batch", config, |config| {
        config.callback_batch = Some(batch);
        rcukit_status::RCUKIT_OK
    })
}

/// Send the domain's reports to `hook(report, context)` instead of standard error (NULL
/// restores standard error). The hook runs on whichever thread makes the report, possibly
/// several at once, and must not wait for a grace period or a barrier of any domain (that
/// aborts with an explanation: the thread is marked as in a hook, not the domain). It must
/// return: a `longjmp` out of it, or the thread's exit from it, leaves the state it runs under
/// held (later grace periods of the domain may wait for ever).
///
/// # Safety
///
/// `config` is NULL or live; `hook` may be called with `context` from any thread for as long
/// as a domain built from this configuration lives.
#[no_mangle]
pub unsafe extern "C" fn rcukit_config_set_report_hook(
    config: *mut rcukit_config,
    hook: rcukit_report_fn,
    context: *mut c_void,
) -> rcukit_status {
    // SAFETY: the caller passes NULL or a live configuration.
    let config = unsafe { config.as_mut() };
    setter("rcukit_config_set_report_hook", config, |config| {
        config.report_hook = hook.map(|hook| CHook::new(hook, context));
        rcukit_status::RCUKIT_OK
    })
}

/// The configuration behind a pointer that may be NULL (meaning: every default).
///
/// # Safety
///
/// `config` is NULL or live.
pub(crate) unsafe fn config_or_default(config: *const rcukit_config) -> rcukit_config {
    // SAFETY: forwarded to the caller.
    unsafe { config.as_ref() }.cloned().unwrap_or_default()
}
