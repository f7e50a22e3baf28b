//! Memory given back after a backlog. A test binary of its own: it counts every byte the
//! process has allocated, so no other test may run beside it.

use rcukit::Rcu;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The system allocator, counting live bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to `System` and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Relaxed);
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Relaxed);
        // SAFETY: forwarded with the caller's arguments.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: isize = 1 << 20;

/// A backlog of 5 million callbacks (held back by a reader) used to leave the worker's list at
/// its peak size, over 100 MB, for the domain's lifetime.
#[test]
fn a_drained_backlog_gives_its_memory_back() {
    // No expedited hurry: the worker takes the whole backlog into its list.
    let rcu = Arc::new(Rcu::builder().expedited_callbacks(false).build().unwrap());
    rcu.call(|| ()); // warm up: threads, chunks, thread-locals
    rcu.barrier();
    let baseline = LIVE.load(Relaxed);

    let (hold, release) = std::sync::mpsc::channel::<()>();
    let (entered, in_reader) = std::sync::mpsc::channel::<()>();
    let reader = {
        let rcu = rcu.clone();
        std::thread::spawn(move || {
            let _guard = rcu.read();
            entered.send(()).unwrap();
            let _ = release.recv();
        })
    };
    // The backlog builds up behind the reader only once it is in its section.
    in_reader.recv().unwrap();
    for _ in 0..5_000_000 {
        rcu.call(|| ()); // a zero-sized closure: rcukit's own memory only
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while rcu.stats().callbacks_pending > 0 && LIVE.load(Relaxed) - baseline < 64 * MIB {
        assert!(
            Instant::now() < deadline,
            "the worker did not take the backlog"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let peak = LIVE.load(Relaxed) - baseline;
    drop(hold);
    reader.join().unwrap();
    rcu.barrier();
    assert_eq!(rcu.stats().callbacks_pending, 0);

    // The worker shrinks its list as it drains and on its next passes.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let live = LIVE.load(Relaxed) - baseline;
        if live < 4 * MIB {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} MiB still allocated after the backlog drained (peak {} MiB above the start)",
            live / MIB,
            peak / MIB
        );
        rcu.call(|| ()); // a pass of the worker
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        peak > 64 * MIB,
        "the backlog never built up ({} MiB)",
        peak / MIB
    );
}
