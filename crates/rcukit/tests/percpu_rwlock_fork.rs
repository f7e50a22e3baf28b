//! `fork()` while other threads take and give back `PerCpuRwLock` thread indices (each short
//! thread takes one at its first read and gives it back at exit): the child's first read (its
//! first index), on a lock from before the fork and on one made in the child, and a write of
//! the child's lock, must not hang. With the indices given back kept under a process-wide lock, a child
//! forked while another thread held it waited for it for ever (about one fork in a thousand
//! here).
//!
//! A test binary of its own with one test: the child starts no `std` thread, and no other
//! test's threads start or exit while it forks. `RCUKIT_FORK_ROUNDS` sets the number of forks
//! (default 3,000).
#![cfg(all(unix, not(miri)))]

mod common;

use common::fork::child_round;
use rcukit::PerCpuRwLock;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn forks_amid_threads_taking_and_giving_back_indices_leave_working_children() {
    let rounds: u64 = std::env::var("RCUKIT_FORK_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000);
    let lock = Arc::new(PerCpuRwLock::new(0u64));
    *lock.write() += 1;
    let stop = Arc::new(AtomicBool::new(false));
    let churn: Vec<_> = (0..3)
        .map(|_| {
            let (lock, stop) = (Arc::clone(&lock), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Relaxed) {
                    let lock = Arc::clone(&lock);
                    std::thread::spawn(move || drop(lock.read()))
                        .join()
                        .unwrap();
                }
            })
        })
        .collect();
    for round in 0..rounds {
        child_round(round, Duration::from_secs(20), &stop, || {
            // A read only: a read guard held at the fork by a thread the child does not have
            // keeps writers out of this lock in the child (see the fork limits).
            assert_eq!(*lock.read(), 1);
            let fresh = PerCpuRwLock::new(0u64);
            let read = *fresh.read();
            *fresh.write() += read + 1;
            assert_eq!(*fresh.read(), 1);
        });
    }
    stop.store(true, Relaxed);
    for t in churn {
        t.join().unwrap();
    }
}
