//! [`RcuBuilder`]: a domain's settings, their limits, and the build that starts its threads.

use super::{Inner, Rcu, GLOBAL, GLOBAL_NAME};
use crate::barrier::{self, FenceKind};
use crate::callbacks::{CallbackConfig, Callbacks};
use crate::error::Error;
use crate::gp::expedited::ExpeditedGp;
use crate::gp::normal::NormalGp;
use crate::gp::{Flavor, GpCore, GpEvent};
use crate::report::{Report, Reporter};
use crate::sync::fork;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Builder for [`Rcu`] domains; see [`Rcu::builder`].
#[derive(Clone, Debug)]
pub struct RcuBuilder {
    name: Option<String>,
    normal_gp_delay: Duration,
    stall_timeout: Duration,
    fence: Option<FenceKind>,
    callback_workers: usize,
    expedited_callbacks: bool,
    backlog_callbacks: u64,
    backlog_bytes: u64,
    producer_backlog_callbacks: u64,
    producer_backlog_bytes: u64,
    callback_batch: usize,
    retire_on_producers: bool,
    flavor: Flavor,
    reporter: Reporter,
}

impl Default for RcuBuilder {
    fn default() -> Self {
        RcuBuilder {
            name: None,
            normal_gp_delay: Duration::from_millis(1),
            stall_timeout: Duration::from_secs(10),
            fence: None,
            callback_workers: 1,
            expedited_callbacks: true,
            backlog_callbacks: if cfg!(rcukit_small) { 64 } else { 10_000 },
            backlog_bytes: 16 << 20,
            producer_backlog_callbacks: if cfg!(rcukit_small) { 16 } else { 2048 },
            producer_backlog_bytes: if cfg!(rcukit_small) {
                4 << 10
            } else {
                256 << 10
            },
            callback_batch: if cfg!(rcukit_small) { 8 } else { 1024 },
            retire_on_producers: true,
            flavor: Flavor::Guards,
            reporter: Reporter::default(),
        }
    }
}

/// Limits the builder enforces.
const MAX_NORMAL_GP_DELAY: Duration = Duration::from_secs(10);
const MIN_STALL_TIMEOUT: Duration = Duration::from_millis(1);
const MAX_CALLBACK_WORKERS: usize = 256;

impl RcuBuilder {
    /// A name for the domain's threads and its stall and panic reports.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// How long the normal grace-period thread waits, once woken by a request, for more
    /// requests to batch into the same grace period (default 1 ms; at most 10 s).
    pub fn normal_gp_delay(mut self, delay: Duration) -> Self {
        self.normal_gp_delay = delay;
        self
    }

    /// How long a grace period may wait for one reader before a stall report is printed to stderr
    /// and counted in [`Stats::stalls`](crate::Stats::stalls) (default 10 s; at least 1 ms). The
    /// grace period keeps waiting after the report.
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.stall_timeout = timeout;
        self
    }

    /// Force a barrier pair. By default the domain uses [`FenceKind::Membarrier`] where the
    /// kernel supports it and [`FenceKind::SeqCst`] otherwise; asking for `Membarrier` where it
    /// is unsupported is an error.
    pub fn fence(mut self, fence: FenceKind) -> Self {
        self.fence = Some(fence);
        self
    }

    /// Number of callback worker threads, each with its own intake shard (default 1; 1 to 256).
    pub fn callback_workers(mut self, workers: usize) -> Self {
        self.callback_workers = workers;
        self
    }

    /// Let expedited grace periods release callbacks and `synchronize()` callers (default
    /// true, [seed 004](crate::docs::seeds)). With `false`, both wait for a normal grace
    /// period only: the behaviour before seed 004, for A/B measurements on one build.
    pub fn expedited_callbacks(mut self, enabled: bool) -> Self {
        self.expedited_callbacks = enabled;
        self
    }

    /// Callbacks waiting for a grace period, per worker shard, past which the worker runs
    /// expedited grace periods (default 10,000, the kernel's `qhimark`; at least 1).
    /// Callbacks already released and waiting to run do not count.
    pub fn backlog_callbacks(mut self, callbacks: u64) -> Self {
        self.backlog_callbacks = callbacks;
        self
    }

    /// Bytes of callbacks waiting for a grace period, per worker shard, past which the worker
    /// runs expedited grace periods (default 16 MiB; at least 1).
    pub fn backlog_bytes(mut self, bytes: u64) -> Self {
        self.backlog_bytes = bytes;
        self
    }

    /// Objects a thread may retire into its own list (see
    /// [`retire_on_producers`](Self::retire_on_producers)) between two expedited grace periods
    /// it *tries* itself (default 2,048; at least 1; `u64::MAX` never tries). A tried grace
    /// period runs in the retiring thread and waits for no reader longer than a few
    /// microseconds: with no reader in the way it ends at once, and the objects are dropped
    /// while they are still in the caches (ck_epoch's `poll` does the same); otherwise the
    /// domain's helper thread finishes it. Its cost is one `membarrier(2)` (which interrupts
    /// the CPUs running this process's other threads) per so many objects. Only with
    /// [`expedited_callbacks`](Self::expedited_callbacks) on, since only then does an
    /// expedited grace period release callbacks.
    pub fn producer_backlog_callbacks(mut self, callbacks: u64) -> Self {
        self.producer_backlog_callbacks = callbacks;
        self
    }

    /// Bytes (as `retire` counts them: the object's size) a thread may retire into its own list
    /// between two expedited grace periods it tries itself, as
    /// [`producer_backlog_callbacks`](Self::producer_backlog_callbacks) (default 256 KiB, about
    /// what a core's L2 cache holds; at least 1; `u64::MAX` never tries).
    pub fn producer_backlog_bytes(mut self, bytes: u64) -> Self {
        self.producer_backlog_bytes = bytes;
        self
    }

    /// Most callbacks a worker runs before it looks at its intake and the grace periods again
    /// (default 1,024; 1 to 1,000,000).
    pub fn callback_batch(mut self, batch: usize) -> Self {
        self.callback_batch = batch;
        self
    }

    /// Let threads that call [`retire`](Rcu::retire) or [`retire_raw`](Rcu::retire_raw) keep
    /// the objects in a list of their own and drop them themselves once their grace period has
    /// ended (default true), like a kernel CPU whose callbacks are not offloaded. Each thread
    /// stamps its objects in blocks of up to 256 (or 64 KiB, or whatever it retired within
    /// 1 ms), requests the grace period a block needs, tries an expedited one itself every
    /// [`producer_backlog_callbacks`](Self::producer_backlog_callbacks) objects or
    /// [`producer_backlog_bytes`](Self::producer_backlog_bytes) bytes (asking the domain's
    /// helper thread to finish it when a reader is in the way), and drops objects whose grace
    /// period has ended a few at a time, up to twice as fast as it retires. Memory goes back
    /// to the thread that allocated it while it is still warm, no other thread has to be
    /// scheduled for a flood to be reclaimed, and a thread that retires faster than grace
    /// periods end is paced by its own drops. A thread that stops retiring has its list
    /// taken over by the worker within a few milliseconds; `barrier()` takes every list, and a
    /// thread's list goes to the worker before a closure it queues with [`call`](Rcu::call)
    /// (closures always run on a worker) and when the thread exits. So a thread that retires
    /// in a flood and queues a closure now and then hands its backlog to the worker at each
    /// closure, to be freed at the worker's pace: where the worker gets little of a core (more
    /// busy threads than cores) and readers hold grace periods back, that backlog grows
    /// (measured: millions of objects behind within seconds). Such a thread may retire a value
    /// whose `Drop` does the closure's work instead, if that work needs no worker: it runs once
    /// a grace period after the objects retired before it has ended, on whichever thread frees
    /// it, as `RcuHashMap` asks for its allocator trims.
    ///
    /// A `retire` call (and so an `RcuCell` write or an `RcuList` removal) may therefore run `Drop`
    /// of *other*, earlier retired objects (never one still waiting for its grace period) on the
    /// calling thread, as crossbeam-epoch and seize do: such a `Drop` should not take a lock the
    /// retiring thread may hold. rcukit itself never does that under a lock of its own, inside a
    /// read-side critical section of the domain, or inside another such drop; see [where user code
    /// runs](crate::docs::internal::callbacks::invoke) for the rule and why it is the default.
    /// The one section a `retire` cannot see is an *owned* one ([`read_owned`](Rcu::read_owned),
    /// [`RcuCell::snapshot`](crate::RcuCell::snapshot)), which belongs to no thread: a `Drop`
    /// run by a `retire` (or a cell write) made while the caller holds one runs inside it, and
    /// such a `Drop` must not wait for a grace period of the domain (`synchronize`, `barrier`):
    /// that would wait for the caller's own section. Drops that wait belong on the workers
    /// (`false` here).
    ///
    /// With `false`, every retired object is dropped on a callback worker thread, like every
    /// `call` closure, and no rcukit call runs user code on the calling thread (the kernel's
    /// rule: `call_rcu` never invokes callbacks). For the global domain, choose this with
    /// [`build_global`](RcuBuilder::build_global) before its first use.
    pub fn retire_on_producers(mut self, enabled: bool) -> Self {
        self.retire_on_producers = enabled;
        self
    }

    /// Where the domain's reports go: stall reports and caught callback panics (see
    /// [`report`](crate::report)). By default each is one line on standard error; write
    /// errors are ignored, so a closed stderr never stops the domain. `hook` runs on whichever
    /// thread makes the report (the grace-period thread, a callback worker, a thread running
    /// drops, a caller of `synchronize_expedited`); if it panics, the panic is caught and one
    /// line about it goes to standard error. The hook must not wait for a grace period or a
    /// barrier (it may run on the thread that runs them): such a call panics there. With the
    /// `log` feature, `on_report(rcukit::report::log)` sends reports to the `log` facade.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let sink = seen.clone();
    /// let rcu = rcukit::Rcu::builder()
    ///     .on_report(move |report| sink.lock().unwrap().push(report.to_string()))
    ///     .build()
    ///     .unwrap();
    /// rcu.call(|| panic!("oops"));
    /// rcu.barrier();
    /// assert!(seen.lock().unwrap()[0].contains("oops"));
    /// ```
    pub fn on_report(mut self, hook: impl Fn(&Report) + Send + Sync + 'static) -> Self {
        self.reporter = Reporter::new(Some(crate::report::hook(hook)));
        self
    }

    /// Who writes the reader records (only [`Qsbr`](crate::Qsbr) sets this).
    pub(crate) fn flavor(mut self, flavor: Flavor) -> Self {
        self.flavor = flavor;
        self
    }

    fn validate(&self) -> Result<FenceKind, Error> {
        if self.normal_gp_delay > MAX_NORMAL_GP_DELAY {
            return Err(Error::invalid(
                "normal_gp_delay",
                format!(
                    "{:?} is longer than the maximum of {:?}; a longer batching window would \
                     make every synchronize() look hung",
                    self.normal_gp_delay, MAX_NORMAL_GP_DELAY
                ),
            ));
        }
        if self.stall_timeout < MIN_STALL_TIMEOUT {
            return Err(Error::invalid(
                "stall_timeout",
                format!(
                    "{:?} is shorter than the minimum of {:?}; every grace period would report \
                     a stall",
                    self.stall_timeout, MIN_STALL_TIMEOUT
                ),
            ));
        }
        if !(1..=MAX_CALLBACK_WORKERS).contains(&self.callback_workers) {
            return Err(Error::invalid(
                "callback_workers",
                format!(
                    "{} is outside 1..={MAX_CALLBACK_WORKERS}",
                    self.callback_workers
                ),
            ));
        }
        let thresholds = [
            ("backlog_callbacks", self.backlog_callbacks),
            ("backlog_bytes", self.backlog_bytes),
            (
                "producer_backlog_callbacks",
                self.producer_backlog_callbacks,
            ),
            ("producer_backlog_bytes", self.producer_backlog_bytes),
        ];
        if let Some((setting, _)) = thresholds.iter().find(|(_, value)| *value == 0) {
            return Err(Error::invalid(setting, "must be at least 1"));
        }
        if !(1..=1_000_000).contains(&self.callback_batch) {
            return Err(Error::invalid(
                "callback_batch",
                format!("{} is outside 1..=1000000", self.callback_batch),
            ));
        }
        if let Some(name) = &self.name {
            if name.is_empty() || name.contains('\0') {
                return Err(Error::invalid(
                    "name",
                    "must be non-empty and contain no NUL byte",
                ));
            }
        }
        self.choose_fence()
    }

    /// The barrier pair: the one asked for, if this kernel supports it, else the best one it
    /// supports.
    fn choose_fence(&self) -> Result<FenceKind, Error> {
        let supported = barrier::support().private_expedited;
        match self.fence {
            Some(FenceKind::Membarrier) if !supported => Err(Error::invalid(
                "fence",
                "FenceKind::Membarrier needs membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which \
                 this kernel (or loom/miri, or RCUKIT_NO_MEMBARRIER) does not provide; use \
                 FenceKind::SeqCst or leave the fence unset to fall back automatically",
            )),
            Some(kind) => Ok(kind),
            None if supported => Ok(FenceKind::Membarrier),
            None => Ok(FenceKind::SeqCst),
        }
    }

    /// Build the process-wide domain ([`Rcu::global`]) with these settings, like rayon's
    /// `ThreadPoolBuilder::build_global`. Call it once, early in `main`, before anything uses
    /// the global domain (`Rcu::global()`, `RcuCell::new`, `RcuList::new`); the name defaults
    /// to `rcu-global`.
    ///
    /// ```no_run
    /// // Every retired object of the global domain is dropped on its worker thread.
    /// rcukit::Rcu::builder()
    ///     .retire_on_producers(false)
    ///     .build_global()
    ///     .expect("first use of the global domain");
    /// let cell = rcukit::RcuCell::new(1); // uses it
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::GlobalAlreadyBuilt`] if the global domain already exists (it was built by an
    /// earlier call or on first use with default settings; it cannot be changed), or any
    /// error of [`build`](RcuBuilder::build).
    pub fn build_global(mut self) -> Result<&'static Rcu, Error> {
        if GLOBAL.get().is_some() {
            return Err(Error::GlobalAlreadyBuilt);
        }
        if self.name.is_none() {
            self.name = Some(GLOBAL_NAME.to_string());
        }
        // A racing first use may have built it meanwhile.
        match GLOBAL.get_or_build(|| self.build())? {
            (global, true) => Ok(global),
            (_, false) => Err(Error::GlobalAlreadyBuilt),
        }
    }

    /// Build the domain and start its threads.
    pub fn build(self) -> Result<Rcu, Error> {
        // First: a fork from now on must find every process-wide lock of rcukit held by the
        // handlers (the barrier's detection and the read-side pages take theirs below).
        #[cfg(unix)]
        super::fork::install();
        let fence = self.validate()?;
        let id = crate::per_thread::DomainKey::fresh().id();
        let name = self.name.clone().unwrap_or_else(|| format!("rcu#{id}"));
        let inner = Arc::new_cyclic(|me| Inner {
            name: name.clone(),
            core: GpCore::new(
                fence,
                self.stall_timeout,
                name.clone(),
                self.reporter.clone(),
            )
            .with_domain(id)
            .with_flavor(self.flavor),
            normal: NormalGp::new(self.normal_gp_delay),
            exp: ExpeditedGp::new(),
            event: GpEvent::new(name.clone(), self.reporter.clone()),
            callbacks: Callbacks::new(
                CallbackConfig {
                    workers: self.callback_workers,
                    backlog_callbacks: self.backlog_callbacks,
                    backlog_bytes: self.backlog_bytes,
                    producer_backlog_callbacks: self.producer_backlog_callbacks,
                    producer_backlog_bytes: self.producer_backlog_bytes,
                    batch: self.callback_batch,
                    retire_on_producers: self.retire_on_producers,
                    fence,
                },
                id,
                name.clone(),
                self.reporter.clone(),
            ),
            expedited_callbacks: self.expedited_callbacks,
            fork_generation: AtomicU64::new(fork::generation()),
            fork_repair: Mutex::new(fork::generation()),
            threads: Mutex::new(Vec::new()),
            me: me.clone(),
            parking: super::owned::Parking::new(),
        });
        #[cfg(unix)]
        super::fork::register(&inner);
        let read_side = inner.core.read_side.share();
        let rcu = Rcu { inner, read_side };
        // On an error, dropping `rcu` stops the threads already started.
        rcu.inner.start_threads()?;
        Ok(rcu)
    }
}
