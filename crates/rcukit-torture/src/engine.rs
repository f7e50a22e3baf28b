//! The run: start the threads, supervise them, stop them, drain, and collect the report.
//!
//! # Threads
//!
//! One writer, `updaters` updaters, `readers` reader slots, with faults on one fault
//! injector, in a map run [`MAP_WRITERS`](crate::map::MAP_WRITERS) map writers, and for a
//! flavor with owned sections [`HELPERS`](crate::handoff::HELPERS) helper threads that
//! end the owned sections readers move to them. The calling thread supervises: it respawns readers that exited (with faults on,
//! readers live 0.1-1 s), prints progress lines, watches for errors when `stop_on_error` is
//! set, and warns when the writer has made no progress for a long time.
//!
//! # The end
//!
//! The supervisor raises `stop` and waits for every thread to finish (the writer first drains
//! its removed list). Then it calls `barrier()` until no call or retire chain holds an element,
//! and checks the books: every element is back in the free list (or current), the domain
//! counted exactly the callback panics that were injected, and in a map run every map value
//! was dropped once and came back (see [`crate::map`]). A thread that does not finish
//! within [`STOP_PATIENCE`] (a wait that never returns: a forward-progress failure) is
//! reported, and the run returns without joining it; the flavor is then leaked rather than
//! dropped under a blocked thread.

use crate::config::Config;
use crate::flavor::{Flavor, UpdateKind};
use crate::handoff::Inbox;
use crate::map::{ClearRace, MapTorture, MAP_WRITERS};
use crate::reader::owned;
use crate::report::{Progress, Report};
use crate::shared::Shared;
use crate::{faults, map, map_writer, reader, updater, writer};
use fastrand::Rng;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the end of a run waits for its threads and chains before giving up on them.
pub(crate) const STOP_PATIENCE: Duration = Duration::from_secs(60);

/// The writer making no progress for this long prints a warning.
const WRITER_WATCHDOG: Duration = Duration::from_secs(20);

/// A reader's lifetime range when faults are on, in milliseconds.
const READER_LIFETIME_MS: std::ops::RangeInclusive<u64> = 100..=1_000;

/// Counts a thread as finished when it returns or unwinds.
struct FinishGuard<'a>(&'a AtomicUsize);

impl Drop for FinishGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Relaxed);
    }
}

struct Threads<F: Flavor> {
    shared: Arc<Shared<F>>,
    spawned: usize,
    others: Vec<(String, JoinHandle<()>)>,
    readers: Vec<Option<JoinHandle<()>>>,
    problems: Vec<String>,
}

impl<F: Flavor> Threads<F> {
    fn spawn(
        &mut self,
        name: String,
        body: impl FnOnce(&Arc<Shared<F>>) + Send + 'static,
    ) -> std::io::Result<JoinHandle<()>> {
        let shared = self.shared.clone();
        let handle = std::thread::Builder::new().name(name).spawn(move || {
            let _finish = FinishGuard(&shared.finished);
            body(&shared);
        })?;
        self.spawned += 1;
        Ok(handle)
    }

    fn spawn_reader(&mut self, slot: usize, rng: &mut Rng, faults: bool) -> std::io::Result<()> {
        let seed = rng.u64(..);
        let lifetime = faults.then(|| Duration::from_millis(rng.u64(READER_LIFETIME_MS)));
        let handle = self.spawn(format!("torture-reader-{slot}"), move |shared| {
            reader::run(shared, seed, lifetime)
        })?;
        self.readers[slot] = Some(handle);
        Ok(())
    }

    /// Join readers that exited and start new ones in their slots.
    fn respawn_readers(&mut self, rng: &mut Rng, faults: bool) {
        for slot in 0..self.readers.len() {
            if self.readers[slot].as_ref().is_some_and(|h| h.is_finished()) {
                let handle = self.readers[slot].take().expect("checked above");
                if handle.join().is_err() {
                    self.problems.push(format!("reader {slot} panicked"));
                    self.shared.counters.failed.store(true, Relaxed);
                }
                self.shared.counters.reader_exits.fetch_add(1, Relaxed);
                if let Err(e) = self.spawn_reader(slot, rng, faults) {
                    self.problems
                        .push(format!("could not respawn reader {slot}: {e}"));
                }
            }
        }
    }

    /// Wait up to [`STOP_PATIENCE`] for every thread, then join the ones that finished.
    /// Returns false if some did not.
    fn join_all(&mut self) -> bool {
        let deadline = Instant::now() + STOP_PATIENCE;
        while self.shared.finished.load(Relaxed) < self.spawned && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut all = true;
        let mut handles: Vec<(String, JoinHandle<()>)> = self.others.drain(..).collect();
        for (slot, handle) in self.readers.iter_mut().enumerate() {
            if let Some(handle) = handle.take() {
                handles.push((format!("reader {slot}"), handle));
            }
        }
        for (name, handle) in handles {
            if !handle.is_finished() {
                all = false;
                self.problems.push(format!(
                    "{name} did not stop within {STOP_PATIENCE:?} of the end of the run (a wait \
                     for a grace period or a barrier never returned)"
                ));
            } else if handle.join().is_err() {
                self.problems.push(format!("{name} panicked"));
            }
        }
        all
    }
}

/// Torture `flavor` (and `map`, a map on its domain, if given) as `config` says.
pub(crate) fn run<F: Flavor>(
    flavor: F,
    map: Option<MapTorture>,
    config: &Config,
    seed: u64,
) -> Report {
    let description = flavor.describe();
    let (shared, inboxes) = Shared::new(flavor, map, config);
    let shared = Arc::new(shared);
    let mut rng = Rng::with_seed(seed);
    let mut threads = Threads {
        shared: shared.clone(),
        spawned: 0,
        others: Vec::new(),
        readers: (0..config.readers).map(|_| None).collect(),
        problems: Vec::new(),
    };

    let started = Instant::now();
    let spawned = start_threads(&mut threads, config, &mut rng, inboxes);
    if let Err(e) = spawned {
        threads
            .problems
            .push(format!("could not start a thread: {e}"));
    }
    if threads.problems.is_empty() {
        supervise(&mut threads, config, &mut rng, started);
    }
    shared.stop.store(true, Relaxed);
    let elapsed = started.elapsed();

    let joined = threads.join_all();
    let drained = joined && drain(&shared, &mut threads.problems);
    if joined && drained {
        check_books(&shared, &mut threads.problems);
        if let Some(m) = &shared.map {
            map::finish(&shared.flavor, m, &mut threads.problems);
        }
    }
    let report = Report::collect(
        &shared,
        config,
        seed,
        description,
        elapsed,
        std::mem::take(&mut threads.problems),
    );
    if !(joined && drained) {
        // Threads or callbacks still hold the flavor and may be blocked in it: dropping it
        // would wait for them forever.
        std::mem::forget(shared);
    }
    report
}

fn start_threads<F: Flavor>(
    threads: &mut Threads<F>,
    config: &Config,
    rng: &mut Rng,
    inboxes: Vec<Inbox<F::Cookie>>,
) -> std::io::Result<()> {
    for (i, inbox) in inboxes.into_iter().enumerate() {
        let helper = threads.spawn(format!("torture-owned-helper-{i}"), move |s| {
            owned::run_helper(s, inbox)
        })?;
        threads
            .others
            .push((format!("owned-section helper {i}"), helper));
    }
    let seed = rng.u64(..);
    let writer = threads.spawn("torture-writer".into(), move |s| writer::run(s, seed))?;
    threads.others.push(("the writer".into(), writer));
    for i in 0..config.updaters {
        let seed = rng.u64(..);
        let updater = threads.spawn(format!("torture-updater-{i}"), move |s| {
            updater::run(s, seed)
        })?;
        threads.others.push((format!("updater {i}"), updater));
    }
    if threads.shared.map.is_some() {
        for i in 0..MAP_WRITERS {
            let seed = rng.u64(..);
            let writer = threads.spawn(format!("torture-map-writer-{i}"), move |s| {
                map_writer::run(s, i, seed)
            })?;
            threads.others.push((format!("map writer {i}"), writer));
        }
    }
    start_clear_race(threads, rng)?;
    for slot in 0..config.readers {
        threads.spawn_reader(slot, rng, config.faults)?;
    }
    if config.faults {
        let injector = threads.spawn("torture-faults".into(), |s| faults::run(s))?;
        threads.others.push(("the fault injector".into(), injector));
    }
    Ok(())
}

/// What a thread of the clear race runs: the race, the run's stop flag, a seed.
type RaceRole = fn(&ClearRace, &AtomicBool, u64);

/// The clear race's two threads, in a `map` run (see `map::clear_race`).
fn start_clear_race<F: Flavor>(threads: &mut Threads<F>, rng: &mut Rng) -> std::io::Result<()> {
    if threads
        .shared
        .map
        .as_ref()
        .is_none_or(|m| m.clear_race.is_none())
    {
        return Ok(());
    }
    let roles: [(&str, RaceRole); 2] = [
        ("grower", ClearRace::grow),
        ("clearer", ClearRace::clear_and_look),
    ];
    for (role, run) in roles {
        let seed = rng.u64(..);
        let handle = threads.spawn(format!("torture-clear-race-{role}"), move |s| {
            run(clear_race(s), &s.stop, seed)
        })?;
        threads
            .others
            .push((format!("the clear race's {role}"), handle));
    }
    Ok(())
}

/// The run's clear race (a `map` run's; see `map::clear_race`).
fn clear_race<F: Flavor>(shared: &Shared<F>) -> &ClearRace {
    shared
        .map
        .as_ref()
        .and_then(|m| m.clear_race.as_ref())
        .expect("a map run with a clear race")
}

fn supervise<F: Flavor>(
    threads: &mut Threads<F>,
    config: &Config,
    rng: &mut Rng,
    started: Instant,
) {
    let shared = threads.shared.clone();
    let end = started + config.duration;
    let mut next_progress = config.progress.map(|p| started + p);
    let mut last_versions = 0;
    let mut last_progress_at = started;
    loop {
        let now = Instant::now();
        if now >= end || (config.stop_on_error && shared.failed()) {
            return;
        }
        threads.respawn_readers(rng, config.faults);
        if let (Some(at), Some(every)) = (next_progress, config.progress) {
            if now >= at {
                crate::warn_line(format_args!(
                    "{}",
                    Progress::collect(&shared, now - started)
                ));
                next_progress = Some(at + every);
            }
        }
        let versions = shared.pool.allocated.load(Relaxed);
        if versions != last_versions {
            last_versions = versions;
            last_progress_at = now;
        } else if now - last_progress_at >= WRITER_WATCHDOG {
            crate::warn_line(format_args!(
                "{}-torture: warning: the writer has published nothing for {:.1?}",
                shared.flavor.name(),
                now - last_progress_at
            ));
            last_progress_at = now;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(20)));
    }
}

/// Call `barrier()` until no chain holds an element, then once more so that the last links
/// have returned. False (with a problem noted) if that takes longer than [`STOP_PATIENCE`].
fn drain<F: Flavor>(shared: &Shared<F>, problems: &mut Vec<String>) -> bool {
    if !shared.flavor.supports(UpdateKind::Call) && !shared.flavor.supports(UpdateKind::Retire) {
        return true;
    }
    let deadline = Instant::now() + STOP_PATIENCE;
    loop {
        shared.flavor.barrier();
        if shared.counters.chains_in_flight.load(Relaxed) == 0 {
            shared.flavor.barrier();
            return true;
        }
        if Instant::now() >= deadline {
            problems.push(format!(
                "{} callback chains still held elements {STOP_PATIENCE:?} after the end of the \
                 run",
                shared.counters.chains_in_flight.load(Relaxed)
            ));
            return false;
        }
    }
}

/// The end-of-run bookkeeping checks.
fn check_books<F: Flavor>(shared: &Shared<F>, problems: &mut Vec<String>) {
    let free = shared.pool.free_count();
    if free + 1 != shared.pool.size() {
        problems.push(format!(
            "{} of {} elements did not come back to the free list",
            shared.pool.size() - 1 - free,
            shared.pool.size() - 1
        ));
    }
    let injected = shared.faults.panics_injected.load(Relaxed);
    let counted = shared.flavor.stats().callback_panics;
    if counted != injected {
        problems.push(format!(
            "{injected} panicking callbacks were injected but the flavor counted {counted}"
        ));
    }
}
