//! Configuring the global domain before its first use (`RcuBuilder::build_global`). A test
//! binary of its own: the global domain can be built only once per process.

use rcukit::{Error, Rcu, RcuCell};
use std::sync::Mutex;
use std::time::Duration;

static HELD: Mutex<u64> = Mutex::new(0);

/// Its `Drop` takes the lock that the writer below holds while it stores.
struct TakesTheLock;

impl Drop for TakesTheLock {
    fn drop(&mut self) {
        *HELD.lock().unwrap() += 1;
    }
}

#[test]
fn the_global_domain_can_be_built_once_with_worker_side_drops() {
    let global = Rcu::builder()
        .retire_on_producers(false)
        .build_global()
        .expect("nothing has used the global domain yet");
    assert!(std::ptr::eq(global, Rcu::global()));
    assert_eq!(global.name(), "rcu-global");
    assert!(matches!(
        Rcu::builder().build_global(),
        Err(Error::GlobalAlreadyBuilt)
    ));

    // `RcuCell::new` uses the global domain: with worker-side drops, a store made under a
    // lock that the old value's `Drop` takes cannot deadlock.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let cell = RcuCell::new(TakesTheLock);
        for i in 0..100_000u32 {
            let held = HELD.lock().unwrap();
            cell.store(TakesTheLock);
            drop(held);
            if i % 10_000 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        drop(cell);
        Rcu::global().barrier();
        tx.send(()).unwrap();
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("hung: a store under the caller's lock deadlocked");
    assert_eq!(*HELD.lock().unwrap(), 100_001);
    assert_eq!(Rcu::global().stats().callbacks_run_by_producers, 0);
}
