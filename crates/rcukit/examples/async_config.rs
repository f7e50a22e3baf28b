//! A Tokio service whose request handlers read their configuration across `.await`s while a
//! reloader replaces it: owned read sections (`Rcu::read_owned`) on the handlers' side, an
//! awaited grace period (`Rcu::wait_for`) on the reloader's side, and no blocked executor
//! thread anywhere.
//!
//! * The configuration lives in an `RcuCell<Config>` of the service's own domain. It owns a
//!   resource, a (simulated) connection pool, which must be closed when the configuration is
//!   retired, but never while a handler still uses it.
//! * A handler takes an `OwnedGuard` (`Send + 'static`, unlike a `Guard`, so the task can
//!   hold it across `.await` and the runtime may resume the task on another worker thread),
//!   loads the configuration, checks out a connection, awaits its "I/O", uses the connection
//!   again, and only then drops the guard.
//! * The reloader publishes a new configuration with `swap`, which hands back the old one
//!   wrapped in an `Unpublished`; it awaits the grace period (`wait_for` the swap's cookie),
//!   after which no handler can still hold the old configuration, takes it back and closes
//!   its pool. The pool asserts that nobody uses it when it closes, and every use asserts that
//!   the pool is still open.
//!
//! Run with `cargo run --release -p rcukit --example async_config`.

use rcukit::{Rcu, RcuCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Handler tasks serving requests concurrently.
const HANDLERS: u64 = 32;
/// Configuration reloads before the service shuts down.
const RELOADS: u64 = 20;
/// Time between two reloads.
const RELOAD_EVERY: Duration = Duration::from_millis(50);

/// A simulated connection pool: the resource an old configuration must release.
struct ConnectionPool {
    name: String,
    open: AtomicBool,
    /// Connections checked out now.
    in_use: AtomicU64,
}

impl ConnectionPool {
    fn open(name: String) -> ConnectionPool {
        ConnectionPool {
            name,
            open: AtomicBool::new(true),
            in_use: AtomicU64::new(0),
        }
    }

    /// Check out a connection, which the handler keeps across its `.await`s.
    fn checkout(&self, stats: &Stats) -> Connection<'_> {
        self.in_use.fetch_add(1, Relaxed);
        let connection = Connection { pool: self };
        connection.query(stats);
        connection
    }

    /// Release the pool's resources. The grace period the reloader awaited orders every
    /// handler's last use (and its `in_use` decrement) before this, so relaxed atomics are
    /// enough to check that nothing uses the pool any more.
    fn close(&self) {
        let in_use = self.in_use.load(Relaxed);
        assert_eq!(
            in_use, 0,
            "{} closed with {in_use} connection(s) in use",
            self.name
        );
        assert!(self.open.swap(false, Relaxed), "{} closed twice", self.name);
    }
}

/// A connection checked out of a pool.
struct Connection<'p> {
    pool: &'p ConnectionPool,
}

impl Connection<'_> {
    /// Use the connection: its pool must still be open.
    fn query(&self, stats: &Stats) {
        if !self.pool.open.load(Relaxed) {
            stats.uses_after_close.fetch_add(1, Relaxed);
        }
    }
}

impl Drop for Connection<'_> {
    fn drop(&mut self) {
        self.pool.in_use.fetch_sub(1, Relaxed);
    }
}

/// The service's configuration: a version, a setting, and the resource it owns.
struct Config {
    version: u64,
    io_time: Duration,
    pool: ConnectionPool,
}

impl Config {
    fn new(version: u64) -> Config {
        Config {
            version,
            io_time: Duration::from_micros(500 + 250 * (version % 4)),
            pool: ConnectionPool::open(format!("pool of config v{version}")),
        }
    }
}

#[derive(Default)]
struct Stats {
    served: AtomicU64,
    /// Requests whose task resumed on another worker thread than it started on, with its
    /// guard (and the configuration borrowed from it) moved along.
    moved: AtomicU64,
    /// Configurations replaced and closed by the reloader.
    reloads: AtomicU64,
    closed: AtomicU64,
    uses_after_close: AtomicU64,
}

struct Service {
    /// The configuration, in the service's own domain (`Arc<Rcu>`, so the cell and the tasks
    /// share it).
    config: RcuCell<Config, Arc<Rcu>>,
    stats: Stats,
    stop: AtomicBool,
}

impl Service {
    fn rcu(&self) -> &Rcu {
        self.config.domain()
    }
}

/// One request: read the configuration, and keep reading it across the awaits.
async fn handle(service: &Service) {
    // An owned section may live across `.await`: the task may move to another thread, and the
    // guard with it. Every grace period that starts after this line waits for the drop below.
    let guard = service.rcu().read_owned();
    let config = service.config.load(&guard);
    let started_on = std::thread::current().id();
    let connection = config.pool.checkout(&service.stats);
    tokio::time::sleep(config.io_time).await; // the request's I/O
    tokio::task::yield_now().await;
    connection.query(&service.stats); // the old pool must still be open here
    if std::thread::current().id() != started_on {
        service.stats.moved.fetch_add(1, Relaxed);
    }
    drop(connection);
    drop(guard); // from here on, the configuration may be closed
}

/// A handler task: serve requests until the service stops.
async fn handler(service: Arc<Service>) {
    while !service.stop.load(Relaxed) {
        handle(&service).await;
        service.stats.served.fetch_add(1, Relaxed);
    }
}

/// The reloader: publish a new configuration, await the grace period, close the old one.
async fn reloader(service: Arc<Service>) {
    for version in 2..=RELOADS + 1 {
        tokio::time::sleep(RELOAD_EVERY).await;
        // Readers that start from now on see the new configuration; the old one comes back
        // wrapped, unusable until a grace period has passed.
        let old = service.config.swap(Config::new(version));
        // Await that grace period without blocking a worker thread: every handler that could
        // have loaded the old configuration has dropped its guard when this completes.
        service.rcu().wait_for(&old.cookie()).await;
        let old = old
            .try_take()
            .expect("a grace period has passed since the swap");
        old.pool.close();
        service.stats.closed.fetch_add(1, Relaxed);
        service.stats.reloads.fetch_add(1, Relaxed);
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let started = Instant::now();
    let rcu = Arc::new(Rcu::builder().name("config").build().expect("a domain"));
    let service = Arc::new(Service {
        config: RcuCell::with_domain(Config::new(1), rcu),
        stats: Stats::default(),
        stop: AtomicBool::new(false),
    });
    let handlers: Vec<_> = (0..HANDLERS)
        .map(|_| tokio::spawn(handler(service.clone())))
        .collect();
    tokio::spawn(reloader(service.clone()))
        .await
        .expect("the reloader finished");
    service.stop.store(true, Relaxed);
    for handler in handlers {
        handler.await.expect("a handler finished");
    }

    // Shut down: every task is done, so the last configuration is ours; close its pool too.
    let service = Arc::into_inner(service).expect("no task holds the service any more");
    let last = service.config.into_inner();
    last.pool.close();
    let stats = &service.stats;
    stats.closed.fetch_add(1, Relaxed);

    let uses_after_close = stats.uses_after_close.load(Relaxed);
    println!(
        "async_config: {} requests served by {HANDLERS} handlers ({} resumed on another thread \
         with their guard), {} reloads (last config v{}), {} pools closed, {} uses after close, \
         in {:.2?}",
        stats.served.load(Relaxed),
        stats.moved.load(Relaxed),
        stats.reloads.load(Relaxed),
        last.version,
        stats.closed.load(Relaxed),
        uses_after_close,
        started.elapsed()
    );
    assert_eq!(uses_after_close, 0, "a handler used a closed pool");
    assert_eq!(stats.closed.load(Relaxed), RELOADS + 1);
}
