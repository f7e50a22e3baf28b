#![doc = include_str!("wake.md")]

use crate::sync::AtomicU32;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, SeqCst};
use std::time::Duration;

/// What a writer sleeps on and a leaving reader looks at.
pub(crate) struct WakeWord {
    /// Set by writers that are about to sleep (S1), cleared by the reader that wakes them.
    asked: AtomicU32,
    /// Bumped by every wake (the futex word).
    seq: AtomicU32,
    #[cfg(rcukit_loom)]
    futex: loom_futex::Futex,
}

impl WakeWord {
    pub(crate) fn new() -> WakeWord {
        WakeWord {
            asked: AtomicU32::new(0),
            seq: AtomicU32::new(0),
            #[cfg(rcukit_loom)]
            futex: loom_futex::Futex::new(),
        }
    }

    /// The request word, for [`RawSection`](crate::RawSection)'s read side written outside
    /// Rust (its L3 loads it).
    #[cfg(all(feature = "raw-sections", not(rcukit_loom)))]
    pub(crate) fn asked_word(&self) -> &AtomicU32 {
        &self.asked
    }

    /// L2-L3: right after the store that ends a section or announces a quiescent state.
    #[inline(always)]
    pub(crate) fn after_leaving(&self) {
        crate::sync::compiler_fence(SeqCst);
        self.look();
    }

    /// L3.
    #[inline(always)]
    fn look(&self) {
        if self.asked.load(Relaxed) != 0 {
            self.wake_all();
        }
    }

    #[cold]
    #[inline(never)]
    fn wake_all(&self) {
        if self.asked.swap(0, AcqRel) == 0 {
            return; // another leaving of this reader woke them already (an orphan's guards)
        }
        self.seq.fetch_add(1, AcqRel);
        #[cfg(rcukit_loom)]
        self.futex.wake_all();
        #[cfg(not(rcukit_loom))]
        futex::wake_all(&self.seq);
    }

    /// S1: ask the reader to wake this writer when it next leaves. Returns the wake count to
    /// sleep on, read *before* the request is raised, so that the wake that answers this
    /// request always moves the count past it. The caller then runs the heavy barrier (S2,
    /// [`barrier`]) before it looks at the reader (S3).
    pub(crate) fn ask(&self) -> u32 {
        let seen = self.seq.load(Acquire);
        self.asked.store(1, SeqCst);
        seen
    }

    /// Has a wake come since the request that returned `seen`? If not, that request still
    /// stands (or its wake is on its way, and a sleep on `seen` returns when it lands).
    pub(crate) fn woken_since(&self, seen: u32) -> bool {
        self.seq.load(Acquire) != seen
    }

    /// S1 as it was first written, reading the count *after* raising the request: a wake that
    /// answers the request can land in between, and a writer whose reader's leaving did not
    /// end its wait (a quiescent state that read an old epoch) then sleeps on a count no
    /// later wake moves. For the loom models' busted twin.
    #[cfg(all(test, rcukit_loom))]
    fn ask_count_after_request(&self) -> u32 {
        self.asked.store(1, SeqCst);
        self.seq.load(Acquire)
    }

    /// S4: sleep until a wake after the one counted in `seen`, or `timeout`.
    pub(crate) fn sleep(&self, seen: u32, timeout: Duration) {
        #[cfg(rcukit_loom)]
        {
            let _ = timeout;
            self.futex.wait_while(|| self.seq.load(Acquire) == seen);
        }
        #[cfg(not(rcukit_loom))]
        futex::wait(&self.seq, seen, timeout);
    }
}

/// Can writers sleep on [`WakeWord`]s here (is there a barrier to pair with the readers'
/// compiler fence)?
pub(crate) fn available() -> bool {
    #[cfg(rcukit_loom)]
    {
        true
    }
    #[cfg(not(rcukit_loom))]
    {
        futex::AVAILABLE && crate::barrier::support().private_expedited
    }
}

/// Can writers sleep on [`WakeWord`]s of readers that run a full fence after leaving
/// ([`fence`] pairs with it)?
#[cfg(not(rcukit_loom))]
pub(crate) fn sleep_available() -> bool {
    futex::AVAILABLE
}

/// S2 where every reader runs a full fence between leaving and looking (L2 as a fence, as in
/// fenced quiescent states): a full fence of the writer's own pairs with it.
#[cfg(not(rcukit_loom))]
pub(crate) fn fence() {
    crate::sync::fence(SeqCst);
}

/// S2: the barrier between a writer's [`ask`](WakeWord::ask) and its look at the
/// reader. (Under loom, a `SeqCst` fence, as the models' readers use one too.)
pub(crate) fn barrier() {
    #[cfg(rcukit_loom)]
    crate::sync::fence(SeqCst);
    #[cfg(not(rcukit_loom))]
    crate::barrier::heavy(
        crate::barrier::FenceKind::Membarrier,
        crate::barrier::Heavy::Expedited,
    );
}

#[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
mod futex {
    use rustix::thread::futex::{self, Flags, Timespec};
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    pub(super) const AVAILABLE: bool = true;

    pub(super) fn wait(word: &AtomicU32, seen: u32, timeout: Duration) {
        let timeout = Timespec {
            tv_sec: timeout.as_secs() as _,
            tv_nsec: timeout.subsec_nanos() as _,
        };
        // EAGAIN (the word moved on), EINTR and ETIMEDOUT all mean: look again.
        let _ = futex::wait(word, Flags::PRIVATE, seen, Some(&timeout));
    }

    pub(super) fn wake_all(word: &AtomicU32) {
        let _ = futex::wake(word, Flags::PRIVATE, i32::MAX as u32);
    }
}

#[cfg(all(not(all(target_os = "linux", not(miri))), not(rcukit_loom)))]
mod futex {
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    /// No futex here: [`available`](super::available) is false and nobody sleeps.
    pub(super) const AVAILABLE: bool = false;

    pub(super) fn wait(_word: &AtomicU32, _seen: u32, timeout: Duration) {
        std::thread::sleep(timeout.min(Duration::from_millis(1)));
    }

    pub(super) fn wake_all(_word: &AtomicU32) {}
}

/// A futex for loom: the compare-and-sleep made atomic by a mutex, which every waker takes
/// before it notifies.
#[cfg(rcukit_loom)]
mod loom_futex {
    use loom::sync::{Condvar, Mutex};

    pub(super) struct Futex {
        lock: Mutex<()>,
        cond: Condvar,
    }

    impl Futex {
        pub(super) fn new() -> Futex {
            Futex {
                lock: Mutex::new(()),
                cond: Condvar::new(),
            }
        }

        pub(super) fn wait_while(&self, mut unchanged: impl FnMut() -> bool) {
            let mut guard = self.lock.lock().unwrap();
            while unchanged() {
                guard = self.cond.wait(guard).unwrap();
            }
        }

        pub(super) fn wake_all(&self) {
            drop(self.lock.lock().unwrap());
            self.cond.notify_all();
        }
    }
}

#[cfg(all(test, rcukit_loom))]
mod loom_models {
    use super::WakeWord;
    use crate::sync::AtomicU64;
    use loom::sync::Arc;
    use loom::thread;
    use std::sync::atomic::Ordering::{Acquire, Release};
    use std::time::Duration;

    /// A reader of the models: its section counter and its wake word.
    type Reader = (Arc<AtomicU64>, Arc<WakeWord>);

    /// A reader inside a section leaves it (L1-L3) while a writer that waits for it goes to
    /// sleep (S1-S5): the writer must always wake up.
    fn reader_leaves_while_the_writer_goes_to_sleep(busted_reader: bool) {
        loom::model(move || {
            let ctr = Arc::new(AtomicU64::new(1)); // inside a section
            let word = Arc::new(WakeWord::new());
            let reader = {
                let (ctr, word) = (ctr.clone(), word.clone());
                thread::spawn(move || {
                    ctr.store(0, Release); // L1
                    if !busted_reader {
                        // L2 with the writer's membarrier acting on it: a full fence.
                        crate::sync::fence(std::sync::atomic::Ordering::SeqCst);
                    }
                    word.look(); // L3
                })
            };
            loop {
                let seen = word.ask(); // S1
                super::barrier(); // S2
                if ctr.load(Acquire) == 0 {
                    break; // S3
                }
                word.sleep(seen, Duration::from_secs(1)); // S4
            }
            reader.join().unwrap();
        });
    }

    #[test]
    fn loom_wake_protocol_loses_no_wake_up() {
        reader_leaves_while_the_writer_goes_to_sleep(false);
    }

    /// Two writers (a normal grace period's thread and an expedited caller) sleep on one
    /// record while its reader leaves, enters a new section (with an epoch that satisfies
    /// both) and leaves again: the one wake, and the cleared request, lose neither writer.
    #[test]
    fn loom_wake_protocol_wakes_every_sleeping_writer() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let ctr = Arc::new(AtomicU64::new(1));
            let word = Arc::new(WakeWord::new());
            let writer = |ctr: Arc<AtomicU64>, word: Arc<WakeWord>| {
                thread::spawn(move || loop {
                    let seen = word.ask();
                    super::barrier();
                    let v = ctr.load(Acquire);
                    if v == 0 || v >= 2 {
                        break;
                    }
                    word.sleep(seen, Duration::from_secs(1));
                })
            };
            let a = writer(ctr.clone(), word.clone());
            let b = writer(ctr.clone(), word.clone());
            for v in [0, 2, 0] {
                ctr.store(v, Release);
                crate::sync::fence(std::sync::atomic::Ordering::SeqCst);
                word.look();
            }
            a.join().unwrap();
            b.join().unwrap();
        });
    }

    /// A reader that leaves once per value of `values` (L1-L3, or Q2-Q3 of a quiescent state):
    /// the store, the fence that the writer's `membarrier` stands for, the look.
    fn spawn_leaving(
        ctr: &Arc<AtomicU64>,
        word: &Arc<WakeWord>,
        values: &'static [u64],
    ) -> thread::JoinHandle<()> {
        let (ctr, word) = (ctr.clone(), word.clone());
        thread::spawn(move || {
            for &v in values {
                ctr.store(v, Release);
                crate::sync::fence(std::sync::atomic::Ordering::SeqCst);
                word.look();
            }
        })
    }

    /// A QSBR reader whose first quiescent state read an old epoch (its record still short of
    /// the writer's target) and whose second did not: the first answers the writer's request
    /// without ending its wait, and the writer must still be woken by the second.
    fn reader_answers_before_it_satisfies(busted_ask: bool) {
        loom::model(move || {
            let ctr = Arc::new(AtomicU64::new(1)); // online, at an old epoch
            let word = Arc::new(WakeWord::new());
            let reader = spawn_leaving(&ctr, &word, &[1, 2]);
            loop {
                let seen = if busted_ask {
                    word.ask_count_after_request()
                } else {
                    word.ask()
                };
                super::barrier();
                if ctr.load(Acquire) >= 2 {
                    break;
                }
                word.sleep(seen, Duration::from_secs(1));
            }
            reader.join().unwrap();
        });
    }

    #[test]
    fn loom_wake_protocol_survives_an_answer_that_does_not_end_the_wait() {
        reader_answers_before_it_satisfies(false);
    }

    /// With the wake count read after the request is raised, the first quiescent state's wake
    /// can land in between: the writer sleeps on a count that the second quiescent state
    /// (which finds no request) never moves.
    #[test]
    #[should_panic]
    fn loom_busted_wake_count_read_after_the_request_loses_a_wake_up() {
        reader_answers_before_it_satisfies(true);
    }

    /// One writer waits for two QSBR readers, each of which answers once with an old epoch
    /// and then satisfies it, the way `GpCore::sleep_on_each` waits: a request nobody has
    /// answered since is not made again (and needs no second barrier); one that was answered
    /// is.
    fn writer_keeps_standing_requests(busted_refresh: bool) {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(2);
        model.check(move || {
            let readers: Vec<_> = (0..2)
                .map(|_| (Arc::new(AtomicU64::new(1)), Arc::new(WakeWord::new())))
                .collect();
            let threads: Vec<_> = readers
                .iter()
                .map(|(ctr, word)| spawn_leaving(ctr, word, &[1, 2]))
                .collect();
            // Each reader, and the wake count last seen on its word.
            let mut pending: Vec<(&Reader, Option<u32>)> =
                readers.iter().map(|r| (r, None)).collect();
            loop {
                pending.retain(|((ctr, _), _)| ctr.load(Acquire) < 2);
                if pending.is_empty() {
                    break;
                }
                let mut asked = false;
                for ((_, word), seen) in pending.iter_mut() {
                    match *seen {
                        Some(s) if !word.woken_since(s) => {} // still stands
                        Some(_) if busted_refresh => *seen = Some(word.seq.load(Acquire)),
                        _ => {
                            *seen = Some(word.ask());
                            asked = true;
                        }
                    }
                }
                if asked {
                    super::barrier();
                }
                let ((ctr, word), seen) = pending[0];
                if ctr.load(Acquire) < 2 {
                    word.sleep(seen.unwrap(), Duration::from_secs(1));
                }
            }
            for t in threads {
                t.join().unwrap();
            }
        });
    }

    #[test]
    fn loom_wake_protocol_keeps_standing_requests_without_a_miss() {
        writer_keeps_standing_requests(false);
    }

    /// Taking an answered request for a standing one (a fresh wake count, no new request):
    /// that reader's next leaving finds nothing to answer, and the writer sleeps forever.
    #[test]
    #[should_panic]
    fn loom_busted_answered_request_taken_as_standing_loses_a_wake_up() {
        writer_keeps_standing_requests(true);
    }

    /// Without the reader's barrier between leaving and looking, its look can miss the
    /// writer's announcement while the writer's look misses its leaving: the writer sleeps
    /// forever.
    #[test]
    #[should_panic]
    fn loom_busted_wake_protocol_loses_a_wake_up() {
        reader_leaves_while_the_writer_goes_to_sleep(true);
    }
}
