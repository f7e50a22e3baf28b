//! Unit tests of the trims' rules, in a world with a clock of their own.

use super::*;
use std::sync::atomic::AtomicUsize;
use std::time::Instant;

const SECOND: u64 = 1_000_000_000;

/// A world with a clock that only [`World::sleep`] moves (by exactly what was asked),
/// that counts trims and threads, and that can hold a sleep or a trim until released.
struct Fake {
    now: AtomicU64,
    trims: AtomicUsize,
    threads: AtomicUsize,
    hold_sleep: AtomicBool,
    hold_trim: AtomicBool,
    in_trim: AtomicBool,
    refuse_threads: AtomicBool,
}

impl Fake {
    const fn at(now: u64) -> Fake {
        Fake {
            now: AtomicU64::new(now),
            trims: AtomicUsize::new(0),
            threads: AtomicUsize::new(0),
            hold_sleep: AtomicBool::new(false),
            hold_trim: AtomicBool::new(false),
            in_trim: AtomicBool::new(false),
            refuse_threads: AtomicBool::new(false),
        }
    }

    fn set(&self, now: u64) {
        self.now.store(now, SeqCst);
    }

    fn trims(&self) -> usize {
        self.trims.load(SeqCst)
    }
}

fn spin_while(held: &AtomicBool) {
    while held.load(SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl World for Fake {
    fn now(&self) -> Option<u64> {
        Some(self.now.load(SeqCst))
    }

    fn trim(&self) {
        self.in_trim.store(true, SeqCst);
        spin_while(&self.hold_trim);
        self.trims.fetch_add(1, SeqCst);
    }

    fn sleep(&self, nanos: u64) {
        spin_while(&self.hold_sleep);
        self.now.fetch_add(nanos, SeqCst);
    }

    fn spawn(&self, body: Box<dyn FnOnce() + Send>) -> bool {
        if self.refuse_threads.load(SeqCst) {
            return false;
        }
        self.threads.fetch_add(1, SeqCst);
        crate::threads::spawn("trim-test".to_string(), body).is_ok()
    }

    fn process(&self) -> u64 {
        u64::from(std::process::id())
    }
}

/// Wait until `done`, for at most `limit` (a guard against a hang, not a measurement: it
/// takes milliseconds); whether it happened.
fn within(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// [`within`] 30 s, which must happen.
fn eventually(what: &str, done: impl FnMut() -> bool) {
    assert!(
        within(Duration::from_secs(30), done),
        "{what}: never happened"
    );
}

/// Run `child` in a forked child (under a 10 s deadline), and whether it returned true.
fn in_child(child: impl FnOnce() -> bool) -> bool {
    // SAFETY: the child runs `child` (atomics, the fake world's threads, sleeps) and leaves
    // with `_exit`, running none of the parent's destructors.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = child();
        // SAFETY: leaving the child at once.
        unsafe { libc::_exit(if ok { 0 } else { 3 }) };
    }
    let mut status = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    // SAFETY: waiting for our own child.
    while unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } != pid {
        if Instant::now() > deadline {
            // SAFETY: killing our own child, which hung.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the child hung");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

/// The system's word for "this process" changes in a forked child, so that a child tells
/// its parent's waiting thread (which it does not have) from one of its own.
#[test]
fn a_forked_child_is_another_process_to_the_waiting_thread() {
    // Building a domain installs the fork handlers, which count forks; every trim is asked
    // for by a domain's callback, so they are installed wherever a thread waits.
    let _ = crate::Rcu::global();
    let parent = System.process();
    assert!(in_child(move || System.process() != parent));
}

#[test]
fn trims_start_at_least_a_second_apart_and_one_racer_wins() {
    let trims = Trims::new();
    assert_eq!(trims.claim(5 * SECOND), Claim::Won, "the first trim");
    assert_eq!(trims.claim(5 * SECOND + SECOND / 2), Claim::TooSoon);
    assert_eq!(trims.claim(6 * SECOND), Claim::Won, "a second later");
    // Threads that all find the same old time: exactly one of them trims.
    let trims = Trims::new();
    trims.started.store(SECOND, SeqCst);
    let won = std::thread::scope(|s| {
        let racers: Vec<_> = (0..4)
            .map(|_| s.spawn(|| trims.claim(3 * SECOND)))
            .collect();
        racers
            .into_iter()
            .map(|r| r.join().unwrap())
            .filter(|&claim| claim == Claim::Won)
            .count()
    });
    assert_eq!(won, 1);
    assert_eq!(trims.started.load(SeqCst), 3 * SECOND);
    assert_eq!(
        trims.claim(3 * SECOND + 1),
        Claim::TooSoon,
        "after the race"
    );
}

/// A trim asked for less than a second after the last one is not lost: one thread waits
/// and trims when the second is up, once for all the asks that came meanwhile.
#[test]
fn a_trim_asked_too_soon_runs_when_the_second_is_up() {
    static TRIMS: Trims = Trims::new();
    static WORLD: Fake = Fake::at(10 * SECOND);
    TRIMS.ask(&WORLD);
    assert_eq!((WORLD.trims(), WORLD.threads.load(SeqCst)), (1, 0));
    WORLD.hold_sleep.store(true, SeqCst);
    // Both asks at the same time: the waiting thread reads the clock when it likes, and a
    // clock moved under it would move the time of its trim.
    WORLD.set(10 * SECOND + SECOND / 2);
    TRIMS.ask(&WORLD);
    TRIMS.ask(&WORLD);
    assert_eq!(WORLD.trims(), 1, "nothing trims before the second is up");
    assert_eq!(
        WORLD.threads.load(SeqCst),
        1,
        "one waiting thread for both asks"
    );
    WORLD.hold_sleep.store(false, SeqCst);
    eventually("the deferred trim", || WORLD.trims() == 2);
    assert_eq!(
        TRIMS.started.load(SeqCst),
        11 * SECOND,
        "a second after the first"
    );
    eventually("the waiting thread's exit", || {
        TRIMS.waiter.load(SeqCst) == 0
    });
    assert_eq!(WORLD.trims(), 2, "one trim for both asks");
    // The next ask too soon starts a new waiting thread.
    WORLD.set(11 * SECOND + 1);
    TRIMS.ask(&WORLD);
    eventually("the next deferred trim", || WORLD.trims() == 3);
    assert_eq!(WORLD.threads.load(SeqCst), 2);
}

/// A trim asked for too soon when no thread can be started to wait runs at once on the
/// asker (module docs: "No thread"): it is not left for a later ask that may never come.
#[test]
fn a_trim_asked_too_soon_with_no_thread_to_wait_runs_at_once() {
    static TRIMS: Trims = Trims::new();
    static WORLD: Fake = Fake::at(10 * SECOND);
    TRIMS.ask(&WORLD);
    WORLD.refuse_threads.store(true, SeqCst);
    WORLD.set(10 * SECOND + SECOND / 2);
    TRIMS.ask(&WORLD);
    assert_eq!(WORLD.trims(), 2, "the trim ran at once");
    assert_eq!(TRIMS.waiter.load(SeqCst), 0, "no thread waits");
    assert_eq!(TRIMS.started.load(SeqCst), 10 * SECOND + SECOND / 2);
    // Threads again: the next trim waits for its second as before.
    WORLD.refuse_threads.store(false, SeqCst);
    WORLD.set(10 * SECOND + SECOND * 6 / 10);
    TRIMS.ask(&WORLD);
    eventually("the deferred trim", || WORLD.trims() == 3);
    assert_eq!(WORLD.threads.load(SeqCst), 1);
    assert_eq!(TRIMS.started.load(SeqCst), 11 * SECOND + SECOND / 2);
}

/// A clock behind the time of the last trim (a process in another time namespace, module
/// docs: "Clocks") allows a trim at once, where a wait would last the whole offset.
#[test]
fn a_clock_behind_the_last_trim_allows_one_at_once() {
    static TRIMS: Trims = Trims::new();
    static WORLD: Fake = Fake::at(1000 * SECOND);
    TRIMS.ask(&WORLD);
    WORLD.set(10 * SECOND);
    TRIMS.ask(&WORLD);
    assert_eq!(
        (WORLD.trims(), WORLD.threads.load(SeqCst)),
        (2, 0),
        "trimmed at once, no thread waiting"
    );
    assert_eq!(
        TRIMS.started.load(SeqCst),
        10 * SECOND,
        "the new clock's time"
    );
    // And the once-a-second rule holds on the new clock.
    WORLD.set(10 * SECOND + SECOND / 2);
    assert_eq!(TRIMS.claim(10 * SECOND + SECOND / 2), Claim::TooSoon);
    assert_eq!(wait_left(10 * SECOND, 10 * SECOND + SECOND / 2), SECOND / 2);
}

/// A trim owed when the process forks, asked for too soon or queued on a domain, runs in
/// the forking thread before the fork (module docs: "Forks"); with none owed, a fork trims
/// nothing.
#[test]
fn a_trim_owed_at_a_fork_runs_before_it() {
    static TRIMS: Trims = Trims::new();
    static WORLD: Fake = Fake::at(10 * SECOND);
    TRIMS.before_fork(&WORLD);
    assert_eq!(WORLD.trims(), 0, "nothing owed");
    TRIMS.ask(&WORLD);
    TRIMS.before_fork(&WORLD);
    assert_eq!(WORLD.trims(), 1, "nothing owed after a trim");
    // Asked for too soon: a thread waits for the second.
    WORLD.hold_sleep.store(true, SeqCst);
    WORLD.set(10 * SECOND + SECOND / 2);
    TRIMS.ask(&WORLD);
    assert_eq!(WORLD.trims(), 1);
    TRIMS.before_fork(&WORLD);
    assert_eq!(WORLD.trims(), 2, "the waiting trim ran before the fork");
    assert_eq!(TRIMS.started.load(SeqCst), 10 * SECOND + SECOND / 2);
    WORLD.hold_sleep.store(false, SeqCst);
    eventually("the waiting thread's trim", || WORLD.trims() == 3);
    eventually("the waiting thread's exit", || {
        TRIMS.waiter.load(SeqCst) == 0
    });
    // Queued on a domain and not run yet.
    let queued = Queued::new(&TRIMS);
    TRIMS.before_fork(&WORLD);
    assert_eq!(WORLD.trims(), 4, "the queued trim ran before the fork");
    drop(queued);
    TRIMS.before_fork(&WORLD);
    assert_eq!(WORLD.trims(), 4, "nothing owed once it ran");
}

/// A trim asked for with no domain to queue it on (a map consumed by `into_iter`) runs on
/// the waiting thread: at once when the last trim is a second old.
#[test]
fn a_trim_asked_of_the_waiting_thread_runs_there() {
    static TRIMS: Trims = Trims::new();
    static WORLD: Fake = Fake::at(10 * SECOND);
    TRIMS.ask_waiter(&WORLD);
    eventually("the trim", || WORLD.trims() == 1);
    assert_eq!(WORLD.threads.load(SeqCst), 1, "on the waiting thread");
    assert_eq!(TRIMS.started.load(SeqCst), 10 * SECOND, "with no wait");
}

/// The rule of "When": an ask each time a map has freed [`FROM_BYTES`] since its last.
#[test]
fn a_map_asks_each_time_it_freed_enough() {
    let freed = Freed::default();
    assert!(!freed.count(FROM_BYTES - 1), "not enough yet");
    assert!(freed.count(1), "enough, counted over two frees");
    assert!(!freed.count(FROM_BYTES / 2), "the count starts again");
    assert!(freed.count(FROM_BYTES), "enough again");
    assert!(freed.count(2 * FROM_BYTES), "enough at once");
}

/// Several threads counting at once: at least one of them asks, and never more than one
/// per [`FROM_BYTES`] counted.
#[test]
fn threads_counting_at_once_ask_at_most_once_per_mark() {
    let freed = Freed::default();
    let (threads, per_thread, each) = (4, 1000, FROM_BYTES / 8);
    let asks = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..per_thread {
                    if freed.count(each) {
                        asks.fetch_add(1, SeqCst);
                    }
                }
            });
        }
    });
    let asks = asks.load(SeqCst);
    let most = threads * per_thread * each / FROM_BYTES;
    assert!((1..=most).contains(&asks), "{asks} asks, at most {most}");
}

/// A child forked while a thread of its parent is in the middle of a trim trims a second
/// later: it inherits the time of that trim, not a lock that nobody in the child would
/// ever release.
#[test]
fn a_child_forked_during_a_trim_trims_again() {
    static TRIMS: Trims = Trims::new();
    static WORLD: Fake = Fake::at(10 * SECOND);
    WORLD.hold_trim.store(true, SeqCst);
    let trimmer = std::thread::spawn(|| TRIMS.ask(&WORLD));
    eventually("the parent's trim", || WORLD.in_trim.load(SeqCst));
    let child_trimmed = in_child(|| {
        WORLD.hold_trim.store(false, SeqCst);
        WORLD.set(10 * SECOND + SECOND / 2);
        TRIMS.ask(&WORLD);
        within(Duration::from_secs(5), || WORLD.trims() != 0);
        WORLD.trims() == 1 && TRIMS.started.load(SeqCst) == 11 * SECOND
    });
    WORLD.hold_trim.store(false, SeqCst);
    trimmer.join().unwrap();
    assert!(
        child_trimmed,
        "the child did not trim a second after its parent's trim"
    );
}

/// A child forked while a thread of its parent waits to trim does not count on that
/// thread, which it does not have: it starts its own.
#[test]
fn a_child_forked_while_a_trim_waits_starts_its_own_waiting_thread() {
    static TRIMS: Trims = Trims::new();
    static WORLD: Fake = Fake::at(10 * SECOND);
    TRIMS.ask(&WORLD);
    WORLD.hold_sleep.store(true, SeqCst);
    WORLD.set(10 * SECOND + SECOND / 2);
    TRIMS.ask(&WORLD);
    assert_eq!(WORLD.threads.load(SeqCst), 1, "the parent's waiting thread");
    let child_trimmed = in_child(|| {
        WORLD.hold_sleep.store(false, SeqCst);
        WORLD.set(10 * SECOND + SECOND * 6 / 10);
        TRIMS.ask(&WORLD);
        within(Duration::from_secs(5), || WORLD.trims() != 1);
        WORLD.trims() == 2 && WORLD.threads.load(SeqCst) == 2
    });
    WORLD.hold_sleep.store(false, SeqCst);
    eventually("the parent's deferred trim", || WORLD.trims() == 2);
    assert!(child_trimmed, "the child waited for its parent's thread");
}
