//! The workload (creator loops, the cleanup thread, a `for_each_net` reader) and the figures.

use super::schemes::{walk, Net, NetList, NetLock, SchemeId};
use super::{Config, Netns, Report, NAME};
use crate::env::Environment;
use crate::experiments::{join, measure_each, seeds, spawn_scoped, Envelope, OnExit};
use crate::measure::{self, per_sec, ratio, spin_for, StopFlag, Summary};
use crate::progress::Progress;
use anyhow::Result;
use parking_lot::{Condvar, Mutex};
use rcukit::Rcu;
use serde::Serialize;
use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One scheme's figures.
#[derive(Clone, Debug, Serialize)]
pub struct SchemeResult {
    /// Scheme id.
    pub scheme: SchemeId,
    /// Description.
    pub description: &'static str,
    /// Namespaces created in the measuring window.
    pub creates: u64,
    /// Creates per second.
    pub creates_per_s: f64,
    /// Time per `copy_net_ns` (lock wait + setup), microseconds.
    pub create_us: Summary,
    /// Teardown batches run.
    pub cleanup_batches: u64,
    /// Mean namespaces per teardown batch.
    pub mean_batch: f64,
    /// Time teardown spent in `synchronize()` per batch (with the lock held), milliseconds.
    pub gp_wait_ms: Summary,
    /// Namespaces created in the whole run.
    pub created_total: u64,
    /// Namespaces torn down (must equal `created_total`).
    pub destroyed: u64,
    /// Namespaces freed (must equal `created_total`).
    pub freed: u64,
    /// `for_each_net` walks done by the reader.
    pub reader_walks: u64,
}

/// The experiment's figures (inside the [`Envelope`]).
#[derive(Clone, Debug, Serialize)]
pub struct Body {
    /// Both schemes.
    pub schemes: Vec<SchemeResult>,
    /// creates/s after (rwsem) / before (mutex).
    pub ratio: Option<f64>,
    /// The seed's ratio for `unshare -n bash -c exit` (84.19 s / 18.235 s).
    pub seed_ratio: f64,
    /// The seed's ratio for the C `unshare()` loop (99.85 s / 68.34 s).
    pub seed_ratio_c_loop: f64,
    /// Where the seed's figures come from.
    pub seed_source: &'static str,
}

impl Body {
    /// The result of one scheme.
    pub fn scheme(&self, id: SchemeId) -> Option<&SchemeResult> {
        self.schemes.iter().find(|s| s.scheme == id)
    }
}

/// Run the experiment.
pub fn run(cfg: &Config, progress: &Progress) -> Result<Report> {
    cfg.validate()?;
    let env = Environment::collect(cfg.quick);
    let schemes = measure_each(progress, NAME, &SchemeId::ALL, SchemeId::id, |id| {
        run_scheme(cfg, id)
    })?;
    let body = Body {
        ratio: ratio(schemes[1].creates_per_s, schemes[0].creates_per_s),
        schemes,
        seed_ratio: seeds::netns::SHELL_BEFORE_S / seeds::netns::SHELL_AFTER_S,
        seed_ratio_c_loop: seeds::netns::C_LOOP_BEFORE_S / seeds::netns::C_LOOP_AFTER_S,
        seed_source: seeds::netns::SOURCE,
    };
    Ok(Envelope::new::<Netns>(env, cfg.clone(), body))
}

/// Shared state of one scheme's run.
struct World {
    lock: NetLock,
    list: NetList,
    queue: Mutex<Vec<Arc<Net>>>,
    queued: Condvar,
    next_id: AtomicU64,
    destroyed: AtomicU64,
    freed: Arc<AtomicU64>,
    batches: Mutex<(u64, Vec<f64>)>,
}

impl World {
    fn new(id: SchemeId) -> Result<World> {
        let rcu = Arc::new(Rcu::builder().name("lab-netns").build()?);
        Ok(World {
            lock: NetLock::new(id),
            list: NetList::with_domain(rcu),
            queue: Mutex::new(Vec::new()),
            queued: Condvar::new(),
            next_id: AtomicU64::new(0),
            destroyed: AtomicU64::new(0),
            freed: Arc::new(AtomicU64::new(0)),
            batches: Mutex::new((0, Vec::new())),
        })
    }
}

fn run_scheme(cfg: &Config, id: SchemeId) -> Result<SchemeResult> {
    let world = World::new(id)?;
    let walks = AtomicU64::new(0);
    let (creates, window, create_us) = measure_window(&world, cfg, &walks)?;
    let World {
        list,
        next_id,
        destroyed,
        freed,
        batches,
        ..
    } = world;
    // Free every retired list node, then the list itself.
    while list.domain().stats().callbacks_pending > 0 {
        list.domain().barrier();
    }
    drop(list);
    let (cleanup_batches, gp_ms) = batches.into_inner();
    let destroyed = destroyed.load(Relaxed);
    Ok(SchemeResult {
        scheme: id,
        description: id.describe(),
        creates,
        creates_per_s: per_sec(creates, window),
        create_us: Summary::of(&create_us),
        cleanup_batches,
        mean_batch: if cleanup_batches > 0 {
            destroyed as f64 / cleanup_batches as f64
        } else {
            0.0
        },
        gp_wait_ms: Summary::of(&gp_ms),
        created_total: next_id.load(Relaxed),
        destroyed,
        freed: freed.load(Relaxed),
        reader_walks: walks.load(Relaxed),
    })
}

/// Run the creators for `cfg.duration` beside the cleanup thread and the reader; returns
/// (creates, the measuring window, create latencies in µs) once every thread has stopped.
fn measure_window(
    world: &World,
    cfg: &Config,
    walks: &AtomicU64,
) -> Result<(u64, Duration, Vec<f64>)> {
    let stop_creators = StopFlag::new();
    let stop_cleanup = StopFlag::new();
    std::thread::scope(|s| -> Result<_> {
        let _release = OnExit(|| {
            stop_creators.stop();
            stop_cleanup.stop();
        });
        let w = world;
        let cleanup = {
            let stop = &stop_cleanup;
            spawn_scoped(s, "netns-cleanup", move || cleanup(w, cfg, stop))?
        };
        let reader = {
            let stop = &stop_cleanup;
            spawn_scoped(s, "netns-for-each", move || {
                while !stop.stopped() {
                    std::hint::black_box(walk(&w.list));
                    walks.fetch_add(1, Relaxed);
                    std::thread::sleep(Duration::from_micros(200));
                }
            })?
        };
        let start = Instant::now();
        let mut creators = Vec::new();
        for c in 0..cfg.creators {
            let stop = &stop_creators;
            creators.push(spawn_scoped(s, &format!("netns-create{c}"), move || {
                creator(w, cfg, stop)
            })?);
        }
        measure::sleep_until(start + cfg.duration);
        stop_creators.stop();
        let mut creates = 0;
        let mut create_us = Vec::new();
        for h in creators {
            let (n, lat) = join(h)?;
            creates += n;
            create_us.extend(lat);
        }
        let window = start.elapsed();
        stop_cleanup.stop();
        world.queued.notify_all();
        join(cleanup)?;
        join(reader)?;
        Ok((creates, window, create_us))
    })
}

/// The `unshare -n bash -c exit` loop: returns (creates, create latencies in µs).
fn creator(w: &World, cfg: &Config, stop: &StopFlag) -> (u64, Vec<f64>) {
    let mut n = 0;
    let mut lat = Vec::new();
    while !stop.stopped() {
        spin_for(cfg.process);
        let t = Instant::now();
        let net = w.lock.with(|| {
            spin_for(cfg.setup);
            let net = Arc::new(Net {
                id: w.next_id.fetch_add(1, Relaxed),
                freed: w.freed.clone(),
            });
            w.list.push_back(net.clone());
            net
        });
        lat.push(measure::us(t.elapsed()));
        n += 1;
        // The process exits: its namespace goes to the cleanup work queue.
        w.queue.lock().push(net);
        w.queued.notify_one();
    }
    (n, lat)
}

/// `cleanup_net`: tear down queued namespaces in batches until stopped and drained.
fn cleanup(w: &World, cfg: &Config, stop: &StopFlag) {
    loop {
        let batch = {
            let mut q = w.queue.lock();
            while q.is_empty() && !stop.stopped() {
                w.queued.wait_for(&mut q, Duration::from_millis(10));
            }
            if q.is_empty() {
                return;
            }
            std::mem::take(&mut *q)
        };
        let gp_ms = w.lock.with(|| {
            let dying: HashSet<u64> = batch.iter().map(|n| n.id).collect();
            w.list.retain(|n| !dying.contains(&n.id));
            let t = Instant::now();
            w.list.domain().synchronize();
            let gp = measure::ms(t.elapsed());
            for _ in &batch {
                spin_for(cfg.exit);
            }
            gp
        });
        w.destroyed.fetch_add(batch.len() as u64, Relaxed);
        drop(batch);
        let mut b = w.batches.lock();
        b.0 += 1;
        b.1.push(gp_ms);
    }
}
