#![doc = include_str!("README.md")]

mod event;
pub(crate) mod expedited;
pub(crate) mod give_way;
pub(crate) mod normal;
pub(crate) mod read_side;
mod spin;

#[cfg(all(test, rcukit_loom))]
mod loom;

pub(crate) use event::GpEvent;
use give_way::GiveWay;
pub(crate) use read_side::{ReadSide, ReadSideLine, ReadSidePtr};
use spin::{spin_until_left, SpinBudget};

use crate::barrier::{self, FenceKind, Heavy};
use crate::reader::owned::{self, Drain, OwnedReaders};
use crate::reader::{ReaderRecord, Registry};
use crate::report::{Report, Reporter, Stall};
use crate::sync::{AtomicU64, Brief};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which kind of grace period is running (for stall reports and statistics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GpKind {
    Normal,
    Expedited,
}

impl std::fmt::Display for GpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GpKind::Normal => "normal",
            GpKind::Expedited => "expedited",
        })
    }
}

/// What a domain's reader records stand for, so that stall reports say what the grace period
/// is waiting for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum Flavor {
    /// Records are written by read guards ([`Rcu`](crate::Rcu)).
    #[default]
    Guards,
    /// Records are written by quiescent-state announcements ([`Qsbr`](crate::Qsbr)); with
    /// `fenced`, each announcement ends with a full fence
    /// ([`QsbrBuilder::fenced_quiescent_states`](crate::QsbrBuilder::fenced_quiescent_states));
    /// with `give_way`, long waits ask readers to give way
    /// ([`QsbrBuilder::readers_give_way`](crate::QsbrBuilder::readers_give_way)).
    Qsbr { fenced: bool, give_way: bool },
}

impl Flavor {
    /// Does every reader run a full fence after leaving (fenced quiescent states)?
    pub(crate) fn fenced(self) -> bool {
        matches!(self, Flavor::Qsbr { fenced: true, .. })
    }

    /// Do this domain's long waits ask readers to give way?
    pub(crate) fn gives_way(self) -> bool {
        matches!(self, Flavor::Qsbr { give_way: true, .. })
    }
}

/// The state a grace period needs to wait for readers.
pub(crate) struct GpCore {
    pub(crate) read_side: ReadSideLine,
    pub(crate) registry: Arc<Registry>,
    /// The phase and turn of owned sections (see [`owned`](crate::docs::internal::reader::owned)).
    pub(crate) owned: OwnedReaders,
    stall_timeout: Duration,
    stalls: std::sync::atomic::AtomicU64,
    name: String,
    flavor: Flavor,
    reporter: Reporter,
    /// How long waiters spin before they sleep (see `spin`).
    spin: SpinBudget,
    /// The address of the record the domain's last sleep was on, a hint of which reader to
    /// sleep on first (compared, never dereferenced; std's atomic even under loom).
    last_slept_on: std::sync::atomic::AtomicUsize,
    /// Whether the next sleeping wait asks readers to give way, and how often they did
    /// (QSBR; see `give_way`).
    pub(crate) give_way: GiveWay,
}

impl GpCore {
    pub(crate) fn new(
        fence: FenceKind,
        stall_timeout: Duration,
        name: String,
        reporter: Reporter,
    ) -> GpCore {
        GpCore {
            read_side: ReadSideLine::new(ReadSide {
                // Starts at 1: 0 in a record means "not reading".
                epoch: AtomicU64::new(1),
                give_way: std::sync::atomic::AtomicU64::new(0),
                fence,
                domain: crate::per_thread::DomainKey::NONE,
            }),
            registry: Arc::new(Registry::new()),
            owned: OwnedReaders::new(),
            stall_timeout,
            stalls: std::sync::atomic::AtomicU64::new(0),
            name,
            flavor: Flavor::Guards,
            reporter,
            spin: SpinBudget::new(),
            last_slept_on: std::sync::atomic::AtomicUsize::new(0),
            give_way: GiveWay::new(),
        }
    }

    /// The same core, as the core of domain `id`.
    pub(crate) fn with_domain(mut self, id: u64) -> GpCore {
        self.read_side.domain = crate::per_thread::DomainKey::new(id);
        self
    }

    /// The same core, with stall reports worded for `flavor`'s readers.
    pub(crate) fn with_flavor(mut self, flavor: Flavor) -> GpCore {
        self.flavor = flavor;
        self
    }

    pub(crate) fn fence(&self) -> FenceKind {
        self.read_side.fence
    }

    pub(crate) fn stalls(&self) -> u64 {
        self.stalls.load(Relaxed)
    }

    /// G1 and G2 (the heavy barrier of kind `heavy`, the epoch moved on), and the records G3
    /// scans: the epoch a record must reach, and the registry's snapshot taken after G2.
    fn start_scan(&self, heavy: Heavy) -> (u64, Arc<Vec<Arc<ReaderRecord>>>) {
        barrier::heavy(self.fence(), heavy);
        let target = self.read_side.epoch.fetch_add(1, AcqRel) + 1;
        (target, self.registry.snapshot())
    }

    /// Wait until every reader that was in a critical section when this call started has left
    /// it (G1-G3 in the [`reader`](crate::docs::internal::reader) docs).
    pub(crate) fn wait_for_readers(&self, kind: GpKind) {
        let mut stall = self.wait_for_guards(kind);
        self.wait_for_owned(kind, Drain::Both, &mut stall);
    }

    /// G1-G3 for the guards' read sections, with the heavy barrier of `kind`; returns the
    /// stall watch, for the owned sections' part that may follow.
    fn wait_for_guards(&self, kind: GpKind) -> StallWatch {
        let heavy = match kind {
            GpKind::Normal => Heavy::Normal,
            GpKind::Expedited => Heavy::Expedited,
        };
        let (target, records) = self.start_scan(heavy);
        let mut stall = StallWatch::new(self.stall_timeout);
        // Spin briefly on all readers at once (for as long as the domain's recent waits say
        // pays); then sleep on those still inside, woken as they leave.
        let mut inside: Vec<&ReaderRecord> = records.iter().map(|r| &**r).collect();
        if inside.is_empty() {
            return stall;
        }
        let ended = spin_until_left(&mut inside, target, self.spin.limit());
        self.spin.learn(ended);
        if !ended {
            self.sleep_until_left(&inside, target, kind, &mut stall);
        }
        stall
    }

    /// Sleep until every one of `inside` has left the section it was in when the grace period
    /// began (S1-S5 of [`wake`](crate::docs::internal::reader::wake)): a request and a barrier
    /// (one `membarrier` for all the readers still inside, or a plain fence for the one reader
    /// slept on in a domain with fenced quiescent states), then a sleep on a reader that is
    /// still inside, until it wakes the waiter as it leaves; a reader is asked again (with
    /// another barrier) only once it has answered. An expedited grace period on a kernel with
    /// `membarrier` relies on that alone. A normal one must not interrupt other CPUs, and
    /// without `membarrier` there is no barrier to pair with the readers': then the request is
    /// made without a barrier, and the sleep also ends on a timer (10 µs, doubling up to 1
    /// ms), which catches the rare wake-up lost in the race the barrier would have closed.
    fn sleep_until_left(
        &self,
        inside: &[&ReaderRecord],
        target: u64,
        kind: GpKind,
        stall: &mut StallWatch,
    ) {
        #[cfg(rcukit_loom)]
        {
            // loom cannot model the barrier pair of the wake-up (see `wake`): poll.
            let _ = (kind, &stall);
            let mut rest = inside.to_vec();
            while !spin_until_left(&mut rest, target, spin::SPINS) {}
        }
        #[cfg(not(rcukit_loom))]
        self.sleep_on_each(inside, target, kind, stall);
    }

    /// [`sleep_until_left`](Self::sleep_until_left) outside loom.
    #[cfg(not(rcukit_loom))]
    fn sleep_on_each(
        &self,
        inside: &[&ReaderRecord],
        target: u64,
        kind: GpKind,
        stall: &mut StallWatch,
    ) {
        let WakeBarrier { barrier, ask_all } = self.wake_barrier(kind);
        let strict = barrier.is_some();
        let left = |record: &ReaderRecord| {
            let v = record.ctr.load(Acquire);
            (v == 0 || v >= target, v)
        };
        let mut nap = NAP_FIRST;
        let mut giving_way = self.flavor.gives_way().then(|| {
            give_way::WaitGivingWay::new(&self.give_way, &self.read_side.give_way, target)
        });
        // Each reader still inside, with the wake count of the request this writer made of it
        // (none yet).
        let mut pending: Vec<(&ReaderRecord, Option<u32>)> =
            inside.iter().map(|&r| (r, None)).collect();
        loop {
            pending.retain(|(r, _)| !left(r).0);
            if pending.is_empty() {
                return;
            }
            // The reader to sleep on: the one this domain's last sleep was on if it is still
            // inside, else the first still inside. (The reader a grace period waited for last
            // is likely off its core again, its core taken by the writer; a sleep on it is
            // woken once, where a sleep on a running reader that leaves first is woken, and
            // sleeps again, once more.)
            let addresses = pending
                .iter()
                .map(|(r, _)| std::ptr::addr_of!(**r) as usize);
            let hint = self.last_slept_on.load(Relaxed);
            let Some(at) = sleep_first(addresses, hint, |at| !left(pending[at].0).0) else {
                return;
            };
            // S1 (see `ask`), one S2 for every request it made, then S3.
            let asked = ask(&mut pending, at, ask_all);
            if let Some(barrier) = barrier.filter(|_| asked) {
                barrier();
            }
            if left(pending[at].0).0 {
                continue;
            }
            let (record, seen) = pending[at];
            self.last_slept_on
                .store(std::ptr::addr_of!(*record) as usize, Relaxed);
            let (v, seen) = (left(record).1, seen.expect("asked above"));
            if let Some(giving_way) = giving_way.as_mut() {
                giving_way.before_sleep();
            }
            let timeout = if strict { STALL_LOOK } else { nap };
            record.wake.sleep(seen, timeout);
            nap = (nap * 2).min(NAP_LAST);
            self.report_stall(stall, kind, record, v);
        }
    }

    /// Report a stall on `record` (whose section's `ctr` is `v`) if this wait has passed the
    /// stall timeout and nobody reported that section yet.
    #[cfg(not(rcukit_loom))]
    fn report_stall(&self, stall: &mut StallWatch, kind: GpKind, record: &ReaderRecord, v: u64) {
        let report = stall.check();
        if let Some(held) = report.filter(|_| record.claim_stall_report(v)) {
            self.stalls.fetch_add(1, Relaxed);
            self.reporter.report(self.stall_report(kind, held, record));
        }
    }

    /// G1-G3 and the owned sections as [`wait_for_readers`](Self::wait_for_readers) does for an
    /// expedited grace period, but waiting for no reader longer than `patience` (spinning, never
    /// yielding or sleeping, and not waiting for a lock): true if every reader that was in a
    /// critical section when this call started has left it, false if one still had not within
    /// `patience`. A `false` leaves nothing half done that matters: the epoch has moved on and the
    /// owned phase may have flipped, as in any grace period, and the next grace period drains both
    /// owned phases.
    pub(crate) fn try_wait_for_readers(&self, patience: Duration) -> bool {
        barrier::heavy(self.fence(), Heavy::Expedited);
        let target = self.read_side.epoch.fetch_add(1, AcqRel) + 1;
        // Not even the registry lock is waited for: its holder may be descheduled.
        let Some(records) = self.registry.try_snapshot() else {
            return false;
        };
        let mut brief = Brief::new(patience);
        records.iter().all(|record| {
            brief.wait(|| {
                let v = record.ctr.load(Acquire);
                v == 0 || v >= target
            })
        }) && self.owned.try_wait(&self.registry, &mut brief)
    }

    /// Wait for the guards' read sections only (G1-G3, not the owned sections), with the
    /// expedited barrier, in the caller: for the owned guards' parking (`domain::owned`), where the
    /// domain's threads are already stopped.
    pub(crate) fn wait_for_sections(&self) {
        self.wait_for_guards(GpKind::Expedited);
    }

    /// The owned-section part of a grace period (W1-W3 in the
    /// [`owned`](crate::docs::internal::reader::owned) docs), after G1. `drain` is `Drain::Both`
    /// but in the loom model's busted variant.
    pub(crate) fn wait_for_owned(&self, kind: GpKind, drain: Drain, stall: &mut StallWatch) {
        let mut stalled = |open: u64| {
            if let Some(held) = stall.check() {
                self.stalls.fetch_add(1, Relaxed);
                let waiter = match kind {
                    GpKind::Normal => "normal grace period",
                    GpKind::Expedited => "expedited grace period",
                };
                self.reporter.report(owned::stall_report(
                    &self.name,
                    waiter,
                    open,
                    held,
                    self.stall_timeout,
                ));
            }
        };
        self.owned.wait(&self.registry, drain, &mut stalled);
    }
}

/// S1 of a waiter about to sleep on `pending[at]`: ask that reader, and every other one still
/// pending too with `all`, if it was not asked yet or has answered since (its request may be
/// spent); true if any request was made (then S2 must follow). A request nobody has answered
/// still stands, and the S2 that followed it covers every later leaving (`wake`, "A standing
/// request"). A waiter whose S2 is a `membarrier` asks all, so that one barrier serves them
/// all; one whose S2 is a plain fence (fenced quiescent states) asks only the reader it sleeps
/// on: the others, most often running, then leave without a wake-up call that nobody waits
/// for, and are looked at again when it wakes. (`WakeBarrier` decides which.)
#[cfg(not(rcukit_loom))]
fn ask(pending: &mut [(&ReaderRecord, Option<u32>)], at: usize, all: bool) -> bool {
    let mut asked = false;
    for (i, (record, seen)) in pending.iter_mut().enumerate() {
        if (all || i == at) && seen.map_or(true, |s| record.wake.woken_since(s)) {
            *seen = Some(record.wake.ask());
            asked = true;
        }
    }
    asked
}

/// Which of the readers a waiter waits for (their record addresses, in order) it sleeps on:
/// the one at `hint` (the reader the domain's last sleep was on) if it is still `inside`, else
/// the first one still inside; `None` if none is.
#[cfg(not(rcukit_loom))]
fn sleep_first(
    addresses: impl Iterator<Item = usize> + Clone,
    hint: usize,
    inside: impl Fn(usize) -> bool,
) -> Option<usize> {
    addresses
        .clone()
        .position(|a| a == hint)
        .filter(|&at| inside(at))
        .or_else(|| (0..addresses.count()).find(|&at| inside(at)))
}

/// A waiter's first and longest timed sleep, where a wake-up may be lost (see
/// `sleep_until_left`).
const NAP_FIRST: std::time::Duration = std::time::Duration::from_micros(10);
const NAP_LAST: std::time::Duration = std::time::Duration::from_millis(1);

/// How long a sleeping waiter sleeps at most before it looks at the stall timeout.
const STALL_LOOK: std::time::Duration = std::time::Duration::from_millis(100);

impl GpCore {
    fn stall_report(&self, kind: GpKind, held: Duration, record: &ReaderRecord) -> Report {
        let (waiter, reader, advice) = match (self.flavor, kind) {
            (Flavor::Guards, GpKind::Normal) => (
                "normal grace period",
                format!(
                    "the read-side critical section of {}",
                    record.describe_thread()
                ),
                "",
            ),
            (Flavor::Guards, GpKind::Expedited) => (
                "expedited grace period",
                format!(
                    "the read-side critical section of {}",
                    record.describe_thread()
                ),
                "",
            ),
            (Flavor::Qsbr { .. }, kind) => (
                if kind == GpKind::Normal {
                    "normal grace period"
                } else {
                    "expedited grace period"
                },
                format!(
                    "{}, which is online and has announced no quiescent state",
                    record.describe_thread()
                ),
                "call quiescent_state() or offline() in that thread",
            ),
        };
        Report::Stall(Stall {
            domain_kind: match self.flavor {
                Flavor::Guards => "domain",
                Flavor::Qsbr { .. } => "QSBR domain",
            },
            domain: self.name.clone(),
            waiter,
            reader,
            waited: held,
            timeout: self.stall_timeout,
            advice,
        })
    }

    /// Whose reader records these are.
    pub(crate) fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The barrier a writer runs between asking readers to wake it and looking at them
    /// (S2 of [`wake`](crate::docs::internal::reader::wake)), if it may sleep until they do,
    /// and whom it asks: a fence where every reader runs one after leaving (fenced quiescent
    /// states), asking only the reader it sleeps on; else the heavy barrier for expedited
    /// grace periods, where `membarrier` and futexes exist, or none, asking every reader
    /// still inside.
    #[cfg(not(rcukit_loom))]
    fn wake_barrier(&self, kind: GpKind) -> WakeBarrier {
        use crate::reader::wake;
        let (barrier, ask_all): (Option<fn()>, bool) =
            if self.flavor.fenced() && wake::sleep_available() {
                (Some(wake::fence), false)
            } else if kind == GpKind::Expedited && wake::available() {
                (Some(wake::barrier), true)
            } else {
                (None, true)
            };
        WakeBarrier { barrier, ask_all }
    }
}

/// S2 of a waiter about to sleep, and whether S1 asks every reader still inside or only the
/// one it sleeps on (see [`GpCore::wake_barrier`] and `ask`).
#[cfg(not(rcukit_loom))]
struct WakeBarrier {
    barrier: Option<fn()>,
    ask_all: bool,
}

/// Tracks how long one grace period has waited, and says once when it passes the timeout.
/// (Also used by [`RecSeq`](crate::RecSeq)'s writer wait.)
pub(crate) struct StallWatch {
    timeout: Duration,
    started: Option<Instant>,
    reported: bool,
}

impl StallWatch {
    pub(crate) fn new(timeout: Duration) -> StallWatch {
        StallWatch {
            timeout,
            started: None,
            reported: false,
        }
    }

    /// Returns how long the grace period has been held, the first time it exceeds the timeout.
    pub(crate) fn check(&mut self) -> Option<Duration> {
        if self.reported {
            return None;
        }
        let started = *self.started.get_or_insert_with(Instant::now);
        let held = started.elapsed();
        if held >= self.timeout {
            self.reported = true;
            Some(held)
        } else {
            None
        }
    }
}

#[cfg(all(test, not(rcukit_loom)))]
mod sleep_order_tests {
    use super::sleep_first;

    #[test]
    fn a_waiter_sleeps_first_on_the_reader_its_domain_last_slept_on_while_it_is_inside() {
        let addresses = [10, 20, 30];
        let all = |_| true;
        assert_eq!(sleep_first(addresses.into_iter(), 30, all), Some(2));
        assert_eq!(sleep_first(addresses.into_iter(), 99, all), Some(0));
        // The hinted reader has left: the first one still inside.
        assert_eq!(
            sleep_first(addresses.into_iter(), 10, |at| at != 0),
            Some(1)
        );
        assert_eq!(
            sleep_first(addresses.into_iter(), 20, |at| at == 2),
            Some(2)
        );
        assert_eq!(sleep_first(addresses.into_iter(), 20, |_| false), None);
    }
}

#[cfg(all(test, target_os = "linux", not(rcukit_loom), not(miri)))]
mod tests {
    use crate::Rcu;
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    use std::time::{Duration, Instant};

    /// Pin the calling thread to `cpu`; false if the process may not run there.
    fn pin(cpu: usize) -> bool {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; the calls only read and write it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) == 0
        }
    }

    /// A CPU this process may run on.
    fn some_cpu() -> Option<usize> {
        // SAFETY: as in `pin`.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) != 0 {
                return None;
            }
            (0..libc::CPU_SETSIZE as usize).find(|&cpu| libc::CPU_ISSET(cpu, &set))
        }
    }

    /// Times the calling thread was switched out while runnable (yields count here).
    fn involuntary_switches() -> i64 {
        // SAFETY: getrusage writes the struct it is given.
        unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut usage), 0);
            usage.ru_nivcsw
        }
    }

    /// The calling thread's involuntary context switches during 20 runs of `f`.
    fn switches_during(mut f: impl FnMut()) -> i64 {
        let before = involuntary_switches();
        for _ in 0..20 {
            f();
        }
        involuntary_switches() - before
    }

    /// A tried grace period waits out a reader by spinning only: with another runnable thread
    /// on its core, it gives up without handing that thread the core (a yield there costs a
    /// whole time slice, milliseconds, which `retire` callers paid at their p99.99).
    #[test]
    fn a_tried_grace_period_gives_up_without_giving_its_core_away() {
        let Some(cpu) = some_cpu() else { return };
        let (rcu, stop) = (&Rcu::new(), &AtomicBool::new(false));
        let (entered, inside) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(move || {
                let _guard = rcu.read(); // the reader in the way, until the end
                entered.send(()).unwrap();
                while !stop.load(Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
            s.spawn(move || {
                if !pin(cpu) {
                    return;
                }
                while !stop.load(Relaxed) {
                    std::hint::spin_loop();
                }
            });
            inside.recv().unwrap();
            let trier = s.spawn(move || {
                if !pin(cpu) {
                    return None;
                }
                // The spinner shares the core.
                std::thread::sleep(Duration::from_millis(5));
                // Rounds of 20 tries, each beside a control of 20 plain 20 µs spins: both meet
                // the same preemptions (other load on the machine), only a yield adds more.
                let (mut tries, mut control) = (0, 0);
                for _ in 0..5 {
                    tries += switches_during(|| {
                        let core = &rcu.inner.core;
                        assert!(!core.try_wait_for_readers(Duration::from_micros(20)));
                    });
                    control += switches_during(|| {
                        let start = Instant::now();
                        while start.elapsed() < Duration::from_micros(20) {
                            std::hint::spin_loop();
                        }
                    });
                }
                Some((tries, control))
            });
            let switches = trier.join().unwrap();
            stop.store(true, Relaxed);
            // A waiter that yields hands the spinner the core at least once per try (the code
            // that yielded after 64 spins switched 1,000+ times in 20 tries); spinning meets
            // only the preemptions that the control loop meets too.
            if let Some((tries, control)) = switches {
                assert!(
                    tries <= 2 * control + 30,
                    "{tries} switches in 100 tries, {control} in as much plain spinning"
                );
            }
        });
    }
}
