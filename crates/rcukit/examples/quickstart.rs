//! A quick tour: readers, the three ways to wait for a grace period, polling cookies and
//! deferred reclamation, with the domain's statistics at the end.
//!
//! Run with `cargo run --release --example quickstart`.

use rcukit::Rcu;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let rcu = Rcu::global();
    println!("fence kind: {}", rcu.fence_kind());

    // A "rule table" that readers scan and a writer replaces.
    let table = Arc::new(AtomicPtr::new(Box::into_raw(Box::new(vec![0u64; 64]))));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (table, stop) = (table.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut lookups = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let _guard = Rcu::global().read();
                    // SAFETY: tables are only freed after a grace period.
                    let rules = unsafe { &*table.load(Ordering::Acquire) };
                    std::hint::black_box(rules.iter().sum::<u64>());
                    lookups += 1;
                }
                lookups
            })
        })
        .collect();

    let replace = |generation: u64| {
        let new = Box::into_raw(Box::new(vec![generation; 64]));
        table.swap(new, Ordering::AcqRel)
    };

    for (label, wait) in [
        ("synchronize()", &(|| rcu.synchronize()) as &dyn Fn()),
        ("synchronize_expedited()", &(|| rcu.synchronize_expedited())),
    ] {
        let start = Instant::now();
        for i in 0..20 {
            let old = replace(i);
            wait();
            // SAFETY: a grace period has passed since `old` was unpublished.
            drop(unsafe { Box::from_raw(old) });
        }
        println!(
            "20 replacements with {label:<26} {:>10.2?}",
            start.elapsed()
        );
    }

    let start = Instant::now();
    for i in 0..20 {
        let old = replace(i);
        // SAFETY: `old` came from Box::into_raw and is unpublished.
        rcu.retire(unsafe { Box::from_raw(old) });
    }
    println!(
        "20 replacements with {:<26} {:>10.2?}",
        "retire()",
        start.elapsed()
    );

    // Polling: start a grace period, do other work, check later.
    let cookie = rcu.start_poll();
    let mut polls = 0;
    while !rcu.poll(&cookie) {
        polls += 1;
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    println!("start_poll() cookie expired after {polls} polls of 100 µs");

    stop.store(true, Ordering::Relaxed);
    let lookups: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    rcu.barrier();
    // SAFETY: all readers have exited.
    drop(unsafe { Box::from_raw(table.load(Ordering::Acquire)) });
    println!("reader lookups: {lookups}");
    println!("{:#?}", rcu.stats());
}
