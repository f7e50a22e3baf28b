//! Documentation only: background that belongs to no single module.
//!
//! Nothing here is code. The modules below gather what the rest of the documentation refers to
//! in passing:
//!
//! * [`choosing`]: which type for which job (`RcuCell` or arc-swap, `RcuHashMap` or the
//!   concurrent maps, `Qsbr`, `RecSeq` or `PerCpuRwLock` or `Rcu`, guards or snapshots), and
//!   when not to use RCU, with the measured trade-offs.
//! * [`seeds`]: the five texts (seeds 000 to 004) the library and its lab are built from, what
//!   each one measured, and where rcukit answers it.
//! * [`performance`]: what a read, a grace period of each kind, a `retire` and the alternatives
//!   cost, with the measured figures and where they come from.
//! * [`internal`]: how rcukit works inside: every internal module's essay on why its algorithm
//!   is correct, in the order of the layers the modules form.
//! * [`limitations`]: what rcukit does not do, or does only under conditions: `fork()`,
//!   platforms without `membarrier`, QSBR on a busy machine, user code on the retiring thread,
//!   and the checks that need a nightly toolchain.
//!
//! A newcomer to the code reads the crate documentation first (the model and the guarantees),
//! then these pages, and the modules' essays last, in the order [`internal`] gives them: from
//! the bottom layer up.

pub mod internal;

pub mod choosing {
    //! Choosing: which type for which job, and what the measurements say about each choice.
    //!
    //! Every figure here is quoted from `docs/benchmarks.md` in the repository, which gives the
    //! command, the date and the conditions of each (a shared 2-vCPU virtual machine; ratios are taken
    //! within one run). Rerun the commands on your hardware before relying on a number.
    //!
    //! # In short
    //!
    //! | you have | use | consider instead |
    //! |---|---|---|
    //! | one value (a configuration, a routing table) read on every request, replaced now and then | [`RcuCell<T>`] | arc-swap, if you want no background threads or keep values for long |
    //! | a value a reader must keep after its read: across `.await`, in a struct, on another thread | [`RcuCell::snapshot`] (bounded time) or [`RcuCell::load_arc`] (any time) | arc-swap's `load_full` |
    //! | a list walked by readers, edited by writers | [`RcuList<T>`] | a `Vec` in an `RcuCell` (whole copy per edit) |
    //! | a hash map with many more lookups than writes | [`RcuHashMap<K, V>`] | papaya (close on lookups), DashMap or a locked `HashMap` (one thread, many writes, large tables) |
    //! | threads that own their cores and can announce quiescent states (packet loops) | [`Qsbr`] | [`Rcu`] whenever threads can be preempted while online |
    //! | a rarely written table, a writer that may block, no background threads | [`RecSeq<T>`] | [`Rcu`] when readers must not pay a fence |
    //! | data updated in place under a lock that readers take very often | [`PerCpuRwLock<T>`] | `parking_lot::RwLock` when there is one reader thread |
    //! | your own lock-free structure | [`Rcu`] (`read`, `retire`, `synchronize*`) | crossbeam-epoch, seize |
    //! | write-heavy data | a `Mutex`, an `RwLock` or a concurrent map | RCU (see [When not to use RCU](#when-not-to-use-rcu)) |
    //!
    //! # One value: `RcuCell` or arc-swap
    //!
    //! Both publish a new version with one pointer swap and let readers load without a lock.
    //!
    //! * **Reads.** A whole `RcuCell::read` (enter, load, leave) measured 2.25 ns at one reader thread
    //!   and 1.99 ns at two, against 14.12 ns and 13.55 ns for arc-swap's `load` (6.3x and 6.8x; the
    //!   `cell` bench). In the `owned` bench's loop arc-swap's `load` was closer: 4.43 ns against
    //!   3.33 ns (1.33x) at one thread. Neither writes a shared cache line on a read; a `RwLock<Arc<T>>`
    //!   does, and costs 11.70 ns at one reader and 51.35 ns at two. With one guard held over many
    //!   loads, an `RcuCell::load` is 0.4-0.6 ns.
    //! * **Keeping a value.** arc-swap's `load_full` returns an `Arc` that holds nothing back. rcukit
    //!   has three answers: [`RcuCell::load_arc`] on an `RcuCell<Arc<T>>` does the same (a guarded read
    //!   and an `Arc` clone); [`RcuCell::snapshot`] gives an owned value with no reference count at all
    //!   (an owned read section and the pointer), at the price of holding back the domain's grace
    //!   periods while it lives; an [`OwnedGuard`] lets several containers be read under one owned
    //!   section. `read_owned` measured 2.1x to 2.2x a `read()`, and 0.37x to 0.67x of arc-swap's
    //!   `load_full`; in three runs on a busy machine a snapshot cost 0.37x to 0.81x and
    //!   `load_arc` 0.32x to 0.53x of `load_full`, at one and two threads (the `owned` bench).
    //! * **Writes.** An `RcuCell` write boxes the new value, swaps it under the cell's writer lock
    //!   (so `update(|old| new)` loses no concurrent write) and retires the old one: 74 ns for the
    //!   writer ([`Reclaim::Deferred`]). A writer can also wait for its readers
    //!   ([`Reclaim::Expedited`]: 1.5-2.0 µs with no readers; [`Reclaim::Synchronize`]: 8.6-8.7 ms,
    //!   free for readers) or take the old value back after a grace period ([`RcuCell::swap`]).
    //! * **What rcukit costs that arc-swap does not:** each domain runs three background threads (a
    //!   grace-period thread, an expedited helper, a callback worker); the global domain's run until
    //!   the process exits. Readers must be inside a guard of the cell's domain (the borrow checker
    //!   enforces it). Without `membarrier(2)` (outside Linux, under Miri) every outermost read pays a
    //!   full fence: [`RecSeq`]'s reads, which have the same shape, cost 5.38 ns with the fence and
    //!   1.04 ns without it (the `alternatives` bench).
    //!
    //! Prefer arc-swap when values are `Arc`s you pass around anyway and keep for long, when a
    //! background thread is not acceptable, or when readers run on a platform without `membarrier`.
    //! Prefer [`RcuCell`] on hot read paths with many reader threads, when values should not need an
    //! `Arc`, when a writer must know that no reader still sees the old value, or when many cells
    //! share one domain.
    //!
    //! # A map: `RcuHashMap`, papaya, DashMap, scc or evmap
    //!
    //! [`RcuHashMap`] lookups take no lock and write nothing shared; writers lock one bucket; the table
    //! grows and shrinks incrementally while readers and writers run. Measured beside its peers with
    //! `u64` keys and values and one hasher for all (the `map` bench on a 2-core machine, a guard per
    //! lookup; `RcuHashMap`'s rate ÷ the peer's, medians of interleaved rounds):
    //!
    //! | | `RwLock<hashbrown>` (std) | DashMap | papaya | `scc::HashMap` | `scc::HashIndex` | evmap |
    //! |---|---:|---:|---:|---:|---:|---:|
    //! | lookups, 100 k keys, 2 readers | 3.50x | 3.05x | 1.12x | 4.17x | 1.26x | 1.40x |
    //! | lookups, 100 k keys, 1 reader | 0.67x | 0.75x | 1.30x | 1.53x | 1.28x | 1.91x |
    //! | lookups, 1 M keys, 2 readers | 0.99x | 0.78x | 1.05x | 1.03x | 0.95x | 0.92x |
    //! | lookups, 1 M keys, 1 reader | 0.56x | 0.59x | 1.08x | 1.19x | 1.06x | 0.82x |
    //! | one thread filling 100 k / 1 M keys | 0.29x / 0.34x | 0.30x / 0.26x | 0.99x / 0.88x | 0.49x / 0.34x | 0.48x / 0.38x | |
    //!
    //! * **Readers on several threads** are where it leads: no lock, nothing written, so two readers
    //!   read twice as fast as one, where the locked maps' readers contend on the lock's word.
    //! * **One reader thread, large tables, many writes**: a hashbrown-based map (DashMap, a locked
    //!   `HashMap`) wins. A node-based map (`RcuHashMap`, papaya, `scc::HashIndex`, liburcu's
    //!   `rculfhash`) pays a cache miss for the bucket and one for the entry where hashbrown pays
    //!   about one, and a write here allocates a node, locks a bucket and retires what it replaced.
    //! * **Memory**: 52 bytes per entry at a million `u64` entries (hashbrown 36, scc 42, papaya 54);
    //!   emptied, the map gives its memory back to the system (about 4 MiB of it stay just after
    //!   removing a million entries and 0.6 MiB a second later, against 35 MiB for hashbrown and
    //!   50 MiB for papaya).
    //! * **evmap** keeps two copies of the map and shows readers a writer's changes only when the
    //!   writer publishes them (`refresh`), with one writer at a time; choose it when that batching is
    //!   what you want.
    //!
    //! Prefer [`RcuHashMap`] for lookup-heavy tables that readers on several threads share, where
    //! readers must never wait for a writer, and when references into the map under a guard (no
    //! clone, no lock) matter. `docs/benchmarks.md` ("RcuHashMap vs peers") has every figure, with
    //! writers running beside the readers, and the commands.
    //!
    //! [`RcuFlatMap`](crate::RcuFlatMap) keeps the entries in the table itself, in hashbrown's
    //! layout: a lookup pays about one cache miss, a write allocates and retires nothing, and a
    //! rebuild clones the live entries into a new table. With `u64` entries its one-thread writes
    //! run at 1.8-4.4x papaya's rate and 0.6-0.9x the locked hashbrowns', and on a
    //! [`Qsbr`](crate::Qsbr) domain one reader reads about as fast as hashbrown under its lock
    //! (the bench's `RcuFlatMap` sections). Take it for maps of numbers, addresses and small
    //! `Clone` values; take [`RcuHashMap`] when values own much memory and are written often (a
    //! million `String` values fill at 0.70-0.74x `RcuHashMap`'s rate, every rebuild cloning
    //! them), when an entry must never be cloned or moved (state inside it that readers change),
    //! or when a removed value must be dropped within a grace period (`RcuFlatMap` drops it with
    //! its table, after the next rebuild).
    //!
    //! # `Rcu`, `Qsbr`, `RecSeq` or `PerCpuRwLock`
    //!
    //! | scheme | read, 1 / 2 threads | writer, 1 / 2 busy readers | background threads | updates |
    //! |---|---:|---:|---|---|
    //! | [`Rcu`] (membarrier) | 1.22 / 1.25-1.29 ns (lab `peers`) | expedited grace period 18.14 / 57.57 µs; normal 9.2-9.6 ms; `retire` never blocks | 3 per domain | copy and publish; retire or wait |
    //! | [`Qsbr`] | 0.21 / 0.27 ns (a quiescent state per 64 reads) | expedited 0.47 / 3,285.75 µs | as `Rcu` | as `Rcu` |
    //! | [`RecSeq`] (`SeqCst`, the default) | 5.38 / 5.60 ns | 0.19 / 0.19 µs | none | copy and publish; the writer always waits |
    //! | [`RecSeq`] (`Membarrier`) | 1.04 / 1.01 ns | 1.34 / 21.59 µs | none | as above |
    //! | [`PerCpuRwLock`] | 1.26 / 1.31 ns | write lock 13.57 / 38.09 µs | none | in place, under the write lock |
    //! | `parking_lot::RwLock` | 9.55 / 53.55 ns | 0.04 / 0.04 µs | none | in place |
    //!
    //! (The `alternatives` bench: 2026-11-22 for `Qsbr` and `Rcu`'s writers, 2026-11-25 for the
    //! rest; `Rcu`'s read from the lab's `peers`, 2026-11-25. Compare rows of one run for ratios.
    //! Two busy readers and a writer are three busy threads on two cores, so the 2-reader column
    //! includes the scheduler.)
    //!
    //! * **[`Qsbr`]** reads cost nothing beyond the load, but every registered thread is inside a read
    //!   section whenever it is online: it must announce quiescent states and go offline around
    //!   anything that blocks, and an online thread that loses its CPU holds every grace period until
    //!   it runs again (3.3 ms above, with more busy threads than cores). Use it for threads that own
    //!   their cores.
    //! * **[`RecSeq`]** (netfilter's `xt_recseq`): the writer waits only for the sections running at
    //!   its swap, with no batching window, no callbacks and no thread of its own, and its readers
    //!   cost the same at 1,000 instances read in turn (1.2x of one). Every update blocks, and its
    //!   readers pay a full fence unless its writer pays an IPI (`Membarrier`).
    //! * **[`PerCpuRwLock`]** is a real reader-writer lock (`lock_api`): a writer updates in place and
    //!   excludes readers, so nothing is copied or retired; its readers do not slow each other down
    //!   (parking_lot's lock word is 41x slower at two threads), and its writer pays one `membarrier`.
    //!   Use it when copying the data for each update is too expensive.
    //! * **[`Rcu`]** is the general answer: readers almost as cheap as [`RecSeq`] with `Membarrier`,
    //!   writers that never block ([`Rcu::retire`], [`Rcu::call`]) or wait microseconds (expedited)
    //!   or milliseconds (normal, free for readers), polling cookies, owned sections, and any number
    //!   of domains.
    //!
    //! # Guards, owned sections, snapshots or `Arc`s
    //!
    //! | reader holds | cost | may cross `.await` / threads | holds back grace periods |
    //! |---|---|---|---|
    //! | [`Guard`] (`rcu.read()`, `cell.read()`) | 1.2-2.3 ns | no (`!Send`) | while held |
    //! | [`OwnedGuard`] (`rcu.read_owned()`) | 2.1-2.2x a `read()` | yes | while held |
    //! | [`Snapshot`] (`cell.snapshot()`) | an owned guard and a load; 0.37-0.81x arc-swap's `load_full` | yes (`T: Sync`) | while held |
    //! | `Arc` from [`RcuCell::load_arc`] | a guarded read and an `Arc` clone (a shared count); 0.32-0.53x `load_full` | yes | no |
    //!
    //! Hold a guard for the length of one operation (a packet, a request); an owned section or a
    //! snapshot for one request that awaits (never while the same task waits for a grace period of the
    //! domain: it would wait for itself); an `Arc` for anything longer. A reader that holds a section
    //! for seconds keeps every value retired meanwhile in memory.
    //!
    //! # When not to use RCU
    //!
    //! * **Write-heavy data.** Every update copies the value and retires the old copy; reclamation
    //!   keeps up with millions of small retires a second (44-48 M objects/s for one thread in the
    //!   lab's `peers`), but copying a large value per update does not scale: a `Mutex`, an `RwLock`,
    //!   [`PerCpuRwLock`] (in-place updates) or a concurrent map fit better.
    //! * **Writers that must not wait and values that are large.** Retired copies wait for a grace
    //!   period; declare their size ([`RcuCell::retired_size`]) so that they are reclaimed after a few
    //!   updates, or use a lock that updates in place.
    //! * **Readers that keep what they read for long.** A reader inside a section holds back every
    //!   grace period of its domain; keep `Arc`s instead ([`RcuCell::load_arc`]).
    //! * **One reader thread, few reads.** An uncontended `RwLock` read costs 9.5-12 ns; rcukit's
    //!   advantage is at many readers and high rates, and it brings background threads along.
    //! * **No `membarrier`.** Outside Linux every outermost read pays a full fence (see the figures of
    //!   [`RecSeq`] above); the expedited grace periods interrupt other CPUs on Linux, which
    //!   latency-critical neighbours may notice ([`limitations`](super::limitations)).
    //!
    //! [`RcuCell<T>`]: crate::RcuCell
    //! [`RcuCell`]: crate::RcuCell
    //! [`RcuCell::snapshot`]: crate::RcuCell::snapshot
    //! [`RcuCell::load_arc`]: crate::RcuCell::load_arc
    //! [`RcuCell::swap`]: crate::RcuCell::swap
    //! [`RcuCell::retired_size`]: crate::RcuCell::retired_size
    //! [`RcuList<T>`]: crate::RcuList
    //! [`RcuHashMap<K, V>`]: crate::RcuHashMap
    //! [`RcuHashMap`]: crate::RcuHashMap
    //! [`Qsbr`]: crate::Qsbr
    //! [`RecSeq<T>`]: crate::RecSeq
    //! [`RecSeq`]: crate::RecSeq
    //! [`PerCpuRwLock<T>`]: crate::PerCpuRwLock
    //! [`PerCpuRwLock`]: crate::PerCpuRwLock
    //! [`Rcu`]: crate::Rcu
    //! [`Rcu::retire`]: crate::Rcu::retire
    //! [`Rcu::call`]: crate::Rcu::call
    //! [`Guard`]: crate::Guard
    //! [`OwnedGuard`]: crate::OwnedGuard
    //! [`Snapshot`]: crate::cell::Snapshot
    //! [`Reclaim::Deferred`]: crate::Reclaim::Deferred
    //! [`Reclaim::Expedited`]: crate::Reclaim::Expedited
    //! [`Reclaim::Synchronize`]: crate::Reclaim::Synchronize
}

pub mod seeds {
    //! The seeds: the five texts behind rcukit, and what each one asks of it.
    //!
    //! The design started from five write-ups of real systems that protect read-mostly data:
    //! four from the Linux kernel, one from FreeBSD. Each reports a measurement, and the lab
    //! (`cargo run --release -p rcukit-lab -- reproduce`) repeats each measurement in user space
    //! with rcukit beside the schemes the seed compares. Module docs name them by number
    //! ("seed 004"); this page says once what the numbers mean.
    //!
    //! | seed | source | in rcukit | lab experiment |
    //! |---|---|---|---|
    //! | 000 | an article on locking in netfilter | [`RecSeq`], [`RcuCell`] | `netfilter` |
    //! | 001 | a FreeBSD patch for packet capture | [`RcuList`], [`Qsbr`] | `capture` |
    //! | 002 | Eric Dumazet's ip_tables series, 2005 | [`PerCpuRwLock`] | `percpu`, `netfilter` |
    //! | 003 | Kirill Tkhai's `net_mutex` patch, 2017 | cookies, `call`, `retire` | `netns` |
    //! | 004 | a kernel series: callbacks and expedited GPs | [`GpCookie`] | `callbacks` |
    //!
    //! # Seed 000: netfilter's rule table and the writer's wait
    //!
    //! A Japanese article in the series "新Linuxカーネル解読室" (a new reading of the Linux
    //! kernel) walks through how iptables rules are protected. Packets read a table through
    //! `table->private`; `xt_replace_table()` installs a new table by swapping that pointer and
    //! then waits, CPU by CPU, until each CPU's `xt_recseq` sequence count shows that the
    //! packet it was processing at the swap is done. The article compares that scheme with the
    //! rwlock and the RCU versions netfilter used in the past. RCU was merged twice and
    //! reverted twice because updates became slow: the thread around commit 942e4a2bd680
    //! reports 200 rule additions taking 0.2 s with the rwlock of 2.6.29 and 6.0 s with RCU in
    //! 2.6.30-rc1. The author's own measurement of 200 `iptables -A` on a Raspberry Pi 4 with
    //! Linux 6.11: 1109 ms with today's sequence counts, 5073 ms with `synchronize_rcu()`,
    //! 1104 ms with `synchronize_rcu_expedited()`.
    //!
    //! The lesson rcukit takes: readers are not the whole story; a writer that waits for a
    //! normal grace period per update is several times slower than one that waits only for the
    //! readers running at its swap, and an expedited grace period closes the gap.
    //! [`RecSeq`] is `xt_recseq` as a safe type, [`RcuCell`] is `table->private`, and both
    //! kinds of grace period are first-class ([`Rcu::synchronize_expedited`]).
    //!
    //! # Seed 001: packet capture in FreeBSD
    //!
    //! A FreeBSD patch removed the reader-writer lock from the BPF fast path (`bpf_mtap`,
    //! which runs for every inbound packet once a listener is attached). On a 28-core Xeon
    //! with a Mellanox 100G NIC receiving 6 Mpps, starting `tcpdump` made the machine drop
    //! between 500 kpps and 1.5 Mpps, from contention on that lock alone (the `netstat` sample
    //! it quotes shows 1.9 M input drops per second). The patch moved the descriptor lists to
    //! Concurrency Kit's `CK_LIST` under `epoch(9)`, so that packets take no lock, and freed
    //! detached interfaces and replaced filter programs with `epoch_call()` once no reader
    //! could still use them.
    //!
    //! In rcukit: [`RcuList`] is `CK_LIST` with the reference tied to its guard, and [`Qsbr`]
    //! serves the packet loop whose threads own their CPUs and can announce a quiescent state
    //! between bursts.
    //!
    //! # Seed 002: one lock word shared by every reader
    //!
    //! Eric Dumazet's 2005 series for ip_tables replaced each table's central rwlock with one
    //! lock per CPU. Even though readers can hold a rwlock together, each of them has to own
    //! the lock's cache line for its two atomic operations at entry and exit, so the line
    //! travels between CPUs on every packet. With per-CPU locks (and loop unrolling and NUMA
    //! placement in the same series), `ipt_do_table()` fell from the top of the profile to sixth
    //! place, using a third of the CPU it used before, on dual Xeon and dual Opteron machines.
    //!
    //! In rcukit: [`PerCpuRwLock`], one cache-line-padded reader lock per slot, whose readers
    //! do not even need an atomic read-modify-write on the slot a thread owns.
    //!
    //! # Seed 003: a mutex held across `synchronize_rcu()`
    //!
    //! A 2017 thread on Kirill Tkhai's patch (with Eric W. Biederman's review). Tearing down a
    //! network namespace (`cleanup_net()`) took `net_mutex`, unlinked the namespace with
    //! `list_del_rcu()` and then slept in `synchronize_rcu()` with the mutex still held; every
    //! namespace creation needs the same mutex, so creations queued behind each teardown's
    //! grace period. Turning the mutex into a reader-writer semaphore taken for reading on both
    //! paths made a loop of 10,000 `unshare -n bash -c exit` take 18.235 s instead of
    //! 1m24.19s (4.6 times faster), and 100,000 `unshare()` calls in a C loop 1:08.34 instead
    //! of 1:39.85 elapsed.
    //!
    //! The lesson: a grace period is long, and whatever lock is held across it is held that
    //! long. rcukit gives updaters ways not to wait under a lock: [`Rcu::call`] and
    //! [`Rcu::retire`] defer the work, and the polling cookies ([`Rcu::get_state`],
    //! [`Rcu::cond_synchronize`]) let the caller take a cookie under the lock and wait after
    //! releasing it. The lab's `netns` experiment models the kernel's list, lock and teardown.
    //!
    //! # Seed 004: callbacks released by expedited grace periods
    //!
    //! A presentation of a ten-patch kernel series. The kernel has two grace-period state
    //! machines, normal and expedited, with separate counters; both prove that every earlier
    //! reader has finished. Before the series, `call_rcu()` callbacks were stamped with the
    //! normal counter only, so an expedited grace period that ended first released nothing.
    //! The series stamps each segment of the callback list with both counters and releases it
    //! when *either* has passed its target, and closes three places where the end of an
    //! expedited grace period went unnoticed (the offload threads were not woken, the per-tick
    //! check did not look, the softirq could not advance the list). Measured on the same
    //! hardware with and without it: 1.5 to 1.7 times less `sock_inode` slab in a benchmark
    //! that closes UDP sockets while BPF map-in-map updates run expedited grace periods, and an
    //! average `synchronize_rcu()` latency of 8.1 ms instead of 12.0 ms with two threads
    //! running expedited grace periods beside 16 writers.
    //!
    //! In rcukit this is the default design, not a retrofit: a [`GpCookie`] holds both targets and
    //! expires when either is reached ([`seq`](crate::docs::internal::seq)); both grace-period
    //! engines wake every waiter of either kind when they finish
    //! ([`gp`](crate::docs::internal::gp)), so none of the three gaps can exist; and
    //! [`RcuBuilder::expedited_callbacks`]`(false)` restores the old behaviour on the same build,
    //! so the lab and the benches can compare the two.
    //!
    //! [`RecSeq`]: crate::RecSeq
    //! [`RcuCell`]: crate::RcuCell
    //! [`RcuList`]: crate::RcuList
    //! [`Qsbr`]: crate::Qsbr
    //! [`PerCpuRwLock`]: crate::PerCpuRwLock
    //! [`GpCookie`]: crate::GpCookie
    //! [`Rcu::synchronize_expedited`]: crate::Rcu::synchronize_expedited
    //! [`Rcu::call`]: crate::Rcu::call
    //! [`Rcu::retire`]: crate::Rcu::retire
    //! [`Rcu::get_state`]: crate::Rcu::get_state
    //! [`Rcu::cond_synchronize`]: crate::Rcu::cond_synchronize
    //! [`RcuBuilder::expedited_callbacks`]: crate::RcuBuilder::expedited_callbacks
}

pub mod performance {
    //! The performance model: what each operation costs, and the measurements behind it.
    //!
    //! # Where the figures come from
    //!
    //! Every figure on this page is quoted from `docs/benchmarks.md` in the repository, which
    //! names the command that produced each table. They were taken on a shared 2-vCPU virtual
    //! machine (AMD EPYC, Linux 6.18, rustc 1.95.0, `membarrier` available) with nothing else
    //! running. Absolute times drift between runs on such a machine (the file allows ±30% on
    //! the two-thread rows); the ratios against baselines measured in the same run are what to
    //! compare. Rerun the benches on your own hardware before relying on any number:
    //!
    //! ```sh
    //! cargo bench -p rcukit --bench cell           # reads, list walks, RcuCell updates
    //! cargo bench -p rcukit --bench alternatives   # Qsbr, RecSeq, PerCpuRwLock, writers
    //! cargo bench -p rcukit --bench callbacks      # retire throughput, backlog, seed 004
    //! ```
    //!
    //! # A read
    //!
    //! The outermost [`Rcu::read`] loads the domain's epoch, stores it in the calling thread's
    //! own reader record and issues the read-side half of the barrier pair; dropping the guard
    //! stores 0 into the record. With [`FenceKind::Membarrier`] (the default wherever the
    //! kernel offers it) that half is a compiler fence: no fence instruction and no atomic
    //! read-modify-write. With [`FenceKind::SeqCst`] it is a full fence, tens of cycles. A
    //! nested read only increments a counter private to the thread. The reader writes nothing
    //! another thread writes, so a second reader thread does not slow the first down.
    //!
    //! A thread finds its record through a one-entry cache (the domain it read last, in a
    //! thread-local without destructor): reading one domain is one compare. A thread that reads
    //! several domains in turn finds each record in a 256-slot direct-mapped cache, and past that
    //! with a hash probe, the same at any number of domains
    //! ([`per_thread`](crate::docs::internal::per_thread)). The `Rcu` handle points at the domain's
    //! read-side line (epoch, fence, key), and those lines are packed 32 to a page
    //! ([`gp::read_side`](crate::docs::internal::gp::read_side)), so a hundred domains' lines take
    //! four pages. The first read of a thread in a domain allocates and registers the record, once.
    //!
    //! In the lab's `peers` (7 interleaved rounds, median; measured 2026-11-25), a
    //! section of `Rcu::global().read()` with the lookup of the global domain in the loop cost
    //! 1.22 ns at one thread and 1.25-1.29 ns at two, a domain handle's 1.14 and 1.16 ns,
    //! against liburcu's memb flavor at 1.56-1.57 and 1.59-1.60 ns and ck_epoch at 5.0 and
    //! 5.1-5.2 ns in the same runs. One thread reading 10, 50 or 100 domains in turn paid
    //! 1.46-1.55x the one-domain cost per section, 200 domains 2.0-2.1x (`domains` bench).
    //!
    //! Measured (`cell` and `alternatives` benches):
    //!
    //! | read path | 1 thread | 2 threads |
    //! |---|---:|---:|
    //! | `AtomicPtr` load, unprotected (the floor) | 0.30 ns | 0.69 ns |
    //! | `RcuCell::read`: guard, load, leave | 2.25 ns | 1.99 ns |
    //! | `RcuCell::load`, one guard for 1,024 loads | 0.57 ns | 0.43 ns |
    //! | arc-swap `load` | 14.12 ns | 13.55 ns |
    //! | std `RwLock<Arc<T>>` read | 11.70 ns | 51.35 ns |
    //!
    //! so a whole protected read is 6.3 to 6.8 times faster than arc-swap's `load`, and unlike
    //! a reader-writer lock its cost does not grow with a second reader. In the `alternatives`
    //! bench's own run, `Rcu::read` (membarrier) measured 2.78 ns and 2.84 ns. That bench
    //! gives no `Rcu::read` row for [`FenceKind::SeqCst`]; its [`RecSeq`] rows show what the
    //! fence costs in a reader of the same shape: 7.50 ns with the fence, 2.26 ns without
    //! (one thread).
    //!
    //! A [`Qsbr`] read is a plain load; the thread pays one store per quiescent state. With a
    //! quiescent state every 64 reads it measured 0.21 ns and 0.27 ns (1 and 2 threads, floor
    //! 0.33 ns and 0.21 ns in that run); with one per read, 0.69 ns and 0.77 ns.
    //!
    //! # A normal grace period
    //!
    //! [`Rcu::synchronize`] asks the domain's grace-period thread for a grace period and
    //! sleeps. The thread waits a short batching window (`normal_gp_delay`, 1 ms by default),
    //! then runs one grace period for every request that arrived before it started, with
    //! `MEMBARRIER_CMD_GLOBAL` as its heavy barrier: the kernel waits for its own normal grace
    //! period and interrupts no CPU. Readers pay nothing for it; the caller pays latency. An
    //! idle `synchronize()` took 9.2 ms to 9.6 ms (`callbacks` bench), and an `RcuCell` update
    //! that waits for one ([`Reclaim::Synchronize`]) 8.72 ms, or 115 updates a second
    //! (`cell` bench; a second run gave 8.56 ms). Concurrent callers share grace periods, so
    //! a thousand callers cost one or two, not a thousand.
    //!
    //! # An expedited grace period
    //!
    //! [`Rcu::synchronize_expedited`] runs the grace period in the caller with
    //! `MEMBARRIER_CMD_PRIVATE_EXPEDITED`, which interrupts every CPU currently running a
    //! thread of this process, then scans the reader records. Callers that arrive while one
    //! runs wait for the next and share it. Measured:
    //!
    //! * an `RcuCell` update that waits for one ([`Reclaim::Expedited`]): 1,533 ns, with no
    //!   readers (`cell` bench; a second run gave 1,984 ns);
    //! * one replacement while busy readers read (`alternatives` bench): 18.14 µs with one
    //!   reader and 57.57 µs with two (two readers and the writer are three busy threads on two
    //!   cores, so the second figure includes the scheduler).
    //!
    //! A [`Qsbr`] expedited grace period interrupts nobody and only waits for quiescent states:
    //! 0.47 µs with one busy reader, but 3,285.75 µs with two, because an online reader that
    //! has lost its CPU holds the grace period until it runs again.
    //!
    //! # `retire` and `call`
    //!
    //! [`Rcu::retire`] never blocks. By default the retiring thread keeps its objects in a list of
    //! its own, stamps them in blocks of up to 256 (64 KiB, or whatever it retired within 1 ms),
    //! tries an expedited grace period itself every 2,048 objects or 256 KiB (giving up at once if
    //! a reader is in the way: the helper thread finishes it), and drops objects whose grace period
    //! has ended two at a time, so that memory is reused while it is warm; past the backlog
    //! threshold (10,000 callbacks by default) it asks the domain's helper thread for an expedited
    //! grace period. [`Rcu::call`] closures go to a worker thread. Values that own memory of their
    //! own say how much ([`Rcu::retire_sized`](crate::Rcu::retire_sized),
    //! [`RcuCell::retired_size`](crate::RcuCell::retired_size)), or thousands of them wait before
    //! the thresholds see them.
    //!
    //! One thread retiring 56-byte objects, end to end (first allocation to last drop), in the
    //! lab's `peers` (two runs of 7 rounds, glibc malloc): 44.44 and 47.84 M objects/s, against
    //! ck_epoch's 43.61 and 45.30, crossbeam-epoch's 21.11 and 22.02 and seize's 28.15 and
    //! 28.80 in the same runs. The `callbacks` bench (16-byte objects): 39.14 M objects/s,
    //! crossbeam-epoch 23.84 M (pin per operation).
    //!
    //! The retired-but-not-yet-dropped backlog stayed far below one normal grace period's worth of
    //! objects: 0.10 of it for a steady stream of 2 M objects/s, 0.01 for a flood. An `RcuCell`
    //! update that retires the old value ([`Reclaim::Deferred`]) cost the writer 74 ns (`cell`
    //! bench).
    //!
    //! Releasing callbacks on expedited grace periods (seed 004, see `seeds`)
    //! matters most when other threads run expedited grace periods anyway: with one every
    //! millisecond and 1 KiB objects retired at a steady rate, the mean of pending bytes was
    //! 19.5 times lower with [`RcuBuilder::expedited_callbacks`] on than off (the
    //! kernel series reports 1.5 to 1.7 times). rcukit's normal grace period is far slower
    //! relative to an expedited one than the kernel's, so it gains more.
    //!
    //! # The alternatives
    //!
    //! From the `alternatives` bench (per thread, 1 and 2 threads; writers with 1 and 2 busy
    //! readers; 2026-11-25):
    //!
    //! | scheme | read, 1 thread | read, 2 threads | writer, 1 reader | writer, 2 readers |
    //! |---|---:|---:|---:|---:|
    //! | [`RecSeq`] (default, `SeqCst`) | 5.38 ns | 5.60 ns | 0.19 µs | 0.19 µs |
    //! | [`RecSeq`] (`Membarrier`) | 1.04 ns | 1.01 ns | 1.34 µs | 21.59 µs |
    //! | [`PerCpuRwLock`] | 1.26 ns | 1.31 ns | 13.57 µs | 38.09 µs |
    //! | `parking_lot::RwLock` | 9.55 ns | 53.55 ns | 0.04 µs | 0.04 µs |
    //!
    //! A [`RecSeq`] writer waits only for the sections running at its swap, with no batching
    //! window and no thread of its own, which is why seed 000's netfilter chose it; in exchange
    //! its readers pay a full fence (or its writer an IPI) and every update blocks. A
    //! [`PerCpuRwLock`] read costs the same with two readers as with one (parking_lot's lock
    //! is 8.2 times slower at two threads), and its writer pays one `membarrier`.
    //!
    //! [`Rcu::read`]: crate::Rcu::read
    //! [`Rcu::synchronize`]: crate::Rcu::synchronize
    //! [`Rcu::synchronize_expedited`]: crate::Rcu::synchronize_expedited
    //! [`Rcu::retire`]: crate::Rcu::retire
    //! [`Rcu::call`]: crate::Rcu::call
    //! [`RcuBuilder::expedited_callbacks`]: crate::RcuBuilder::expedited_callbacks
    //! [`FenceKind::Membarrier`]: crate::FenceKind::Membarrier
    //! [`FenceKind::SeqCst`]: crate::FenceKind::SeqCst
    //! [`Reclaim::Synchronize`]: crate::Reclaim::Synchronize
    //! [`Reclaim::Expedited`]: crate::Reclaim::Expedited
    //! [`Reclaim::Deferred`]: crate::Reclaim::Deferred
    //! [`Qsbr`]: crate::Qsbr
    //! [`RecSeq`]: crate::RecSeq
    //! [`PerCpuRwLock`]: crate::PerCpuRwLock
}

pub mod limitations {
    //! Limitations: what rcukit does not do, and what it does only under conditions.
    //!
    //! # `fork()`
    //!
    //! A child's domains repair themselves on first use
    //! ([`fork`](crate::docs::internal::domain::fork) explains how), with these limits:
    //!
    //! * Callbacks queued before the fork are abandoned in the child: they run in the parent,
    //!   and running them in the child as well would run each closure twice. Their memory
    //!   (the child's copy) is not freed either; [`Stats::callbacks_abandoned`] counts them.
    //! * [`RecSeq`] and [`PerCpuRwLock`] own no threads and are not repaired: a read section or
    //!   a write lock held by a thread that did not survive the fork stays held in the child,
    //!   as with any lock, and a writer waits for it forever.
    //! * An owned section ([`OwnedGuard`]) open at the fork stays open in the child until the
    //!   child drops its copy of the guard. A guard that only a thread which did not survive
    //!   the fork could drop (one on that thread's stack) keeps the child's grace periods of
    //!   its domain waiting forever, which the stall report shows; unlike a `Guard`, an owned
    //!   guard is not tied to a thread, so the child cannot tell such a copy from one it holds.
    //! * **Threads the program starts in the child.** The standard library's thread start and exit
    //!   take a process-wide lock of its own (the stack-overflow bookkeeping); a fork while any
    //!   thread of the parent held it leaves it locked in the child, where every
    //!   `std::thread::spawn` then waits forever. rcukit's own threads do not use that path (see
    //!   [`threads`](crate::docs::internal::threads): the child's repair and the domains it builds
    //!   work whatever other threads were doing), but threads *the program* starts in the child
    //!   with `std::thread` still hang if the parent forked while another of its threads was
    //!   starting or exiting. A child that needs threads of its own should be forked when the
    //!   parent's threads are quiet, or should `exec` (or use `posix_spawn`) instead.
    //! * Forking from code that rcukit runs (a report hook, a callback, a `Drop` of a retired
    //!   object) is not supported: that thread may be halfway through the state being copied.
    //! * The child may only rely on what its C library makes safe after `fork()` in a
    //!   multithreaded process; rcukit's repair allocates and starts threads, on first use.
    //!
    //! # Platforms and the barrier pair
    //!
    //! The cheap read side needs Linux's `membarrier(2)` (the private expedited command, and
    //! `MEMBARRIER_CMD_GLOBAL` for IPI-free normal grace periods). Elsewhere, on kernels
    //! without it, under Miri and under loom, and with `RCUKIT_NO_MEMBARRIER=1`, every domain
    //! uses [`FenceKind::SeqCst`]: correct, but each outermost read pays a full fence.
    //! Without `MEMBARRIER_CMD_GLOBAL`, normal grace periods fall back to the private
    //! expedited command and so interrupt the CPUs running the process, as expedited ones do.
    //! Asking a builder for [`FenceKind::Membarrier`] where it is unavailable is an error, not a
    //! silent fallback.
    //!
    //! # Waiting, blocking and stalls
    //!
    //! * Waiting for a grace period or a barrier of a domain from inside one of its read-side
    //!   critical sections (or while online in a QSBR domain) would wait for itself: it panics
    //!   with an explanation instead. The same holds for [`RecSeq::replace`] under a guard of the
    //!   same `RecSeq`, and for a report hook that waits.
    //! * A reader that stays in its critical section holds every grace period of its domain.
    //!   After the stall timeout (10 s by default) rcukit reports it (naming the thread) and
    //!   counts it in [`Stats::stalls`], then keeps waiting: a stall is reported, never
    //!   broken.
    //! * A [`Qsbr`] reader is inside a critical section whenever it is online, so a preempted
    //!   online thread holds every grace period until the scheduler runs it again (3.3 ms in
    //!   the `alternatives` bench with more busy threads than CPUs; see
    //!   `performance`). QSBR suits threads that own a CPU and go offline
    //!   around anything that blocks; with more runnable threads than CPUs, use [`Rcu`].
    //! * A grace period waiting for a reader sleeps until the reader wakes it as it leaves.
    //!   Expedited grace periods on a kernel with `membarrier` rely on that wake-up alone;
    //!   normal grace periods (which must not interrupt other CPUs) and domains without
    //!   `membarrier` may miss it in a narrow race and then notice the reader's exit on a
    //!   timer, up to 1 ms late. Owned sections are still waited for with growing naps (up to
    //!   1 ms), and a leaving reader that finds a grace period asked to be woken pays one
    //!   `futex` wake-up system call, once per request.
    //! * A `RecSeq` writer always blocks: it has no `call` or `retire`.
    //! * An [`OwnedGuard`] is not tied to a thread, so waiting for a grace period while holding
    //!   one (from any thread or task, with the blocking or the async waits) cannot be refused
    //!   the way it is for a [`Guard`]: it waits for itself forever. The grace period reports
    //!   the stall after the stall timeout, naming the owned sections it waits for, and
    //!   [`Stats::owned_sections`] shows how many are open. An owned guard leaked with
    //!   `mem::forget` holds every later grace period of its domain, as a leaked `Guard` does.
    //! * Polling a grace-period future inside a [`Guard`] of the same domain panics, like
    //!   `synchronize()`, at whichever poll it happens; so does awaiting `barrier_async()` on
    //!   one of the domain's callback workers (a runtime blocked inside a callback).
    //! * An owned guard of a domain other than the global one takes no reference count (the state
    //!   of a dropped handle is *parked* until its last owned guard closes, see
    //!   [`owned`](crate::docs::internal::domain::owned)), but closing one after its handle was
    //!   dropped runs a grace period's scan in the closing thread.
    //! * Dropping a handle while owned guards of its domain are open returns at once: the pending
    //!   callbacks run, and the domain's threads stop, once the last of them closes, on a finisher
    //!   thread (see [`domain`](crate::docs::internal::domain)'s lifetime). Call `barrier()` before
    //!   the drop (not while holding an owned guard) when their effects must be done by then.
    //! * rcukit's threads are started with `pthread_create` on Unix (see
    //!   [`threads`](crate::docs::internal::threads)): `std::thread::current().name()` is `None` on
    //!   them (the kernel knows their names: `ps -L`, debuggers and rcukit's stall reports show
    //!   them), and a stack overflow there is reported as a plain segmentation fault.
    //!
    //! # Where user code runs
    //!
    //! By default a `retire` (and so an [`RcuCell`] write or an [`RcuList`] removal) may run the
    //! `Drop` of *earlier* retired objects on the calling thread. rcukit never does so under a
    //! lock of its own, inside a read-side critical section of the domain, while unwinding or
    //! inside another such drop, but it cannot know the caller's locks: a `Drop` that takes a
    //! lock the retiring thread may hold needs [`RcuBuilder::retire_on_producers`]`(false)`
    //! (for the global domain, with [`RcuBuilder::build_global`] before its first use). The
    //! global domain's settings cannot change after its first use, and its threads run until
    //! the process exits.
    //!
    //! The `Waker`s of futures waiting for a grace period are woken by whichever thread ends
    //! the grace period, which may be one of the domain's threads or a thread inside `retire`
    //! or `synchronize_expedited`: a `wake` should only schedule its task (one that panics is
    //! caught and reported; one that waits for a grace period or `barrier()` of the same domain
    //! on one of the domain's grace-period threads panics, as a wait inside a guard does: it
    //! could wait for that very thread).
    //!
    //! # Signal handlers
    //!
    //! A signal handler may read a domain through a [`ThreadReader`](crate::ThreadReader) its
    //! thread made beforehand, and read containers under that guard: an `RcuCell`'s value, an
    //! `RcuList`'s or an `RcuFlatMap`'s iteration, a map's lookups (`get`, `get_key_value`,
    //! `contains_key`). Not an [`RcuHashMap`](crate::RcuHashMap)'s iteration (`iter`, `keys`,
    //! `values`): it keeps a record of the buckets it walked, which allocates, and a handler
    //! that interrupted the allocator would wait for its lock for ever. Nor `get_cloned` or
    //! `get_copied`, which take a guard of their own.
    //! [`Rcu::read`](crate::Rcu::read) is not for handlers (it finds the thread's record
    //! through caches the interrupted code may be changing, and allocates at thread exit).
    //! Nothing else (writes, waits, `call`, `retire`) is async-signal-safe.
    //!
    //! # Floods of callbacks
    //!
    //! `call` and `retire` never wait for a grace period, but a thread that queues callbacks
    //! far faster than the domain's workers run them gives way to them: it yields its CPU, and
    //! past a million pending in its shard pauses for up to a millisecond every 1,024 calls
    //! (see "Floods" in [`Rcu::call`](crate::Rcu::call)). That bounds a flood from threads
    //! outside read-side critical sections; from threads inside one, or online in a QSBR
    //! domain, whose pauses hold the grace periods back too, it only slows its growth.
    //!
    //! # Reclamation that interrupts other threads
    //!
    //! A thread that retires quickly tries an expedited grace period itself every 2,048 objects
    //! or 256 KiB, at most every 50 µs: each one is a `membarrier(2)`, which interrupts the CPUs
    //! running the process's other threads (readers included) for a few microseconds. Set
    //! [`producer_backlog_callbacks`](crate::RcuBuilder::producer_backlog_callbacks) and
    //! [`producer_backlog_bytes`](crate::RcuBuilder::producer_backlog_bytes) to
    //! `u64::MAX` to leave reclamation to normal grace periods (and the backlog thresholds).
    //! A retired value that owns more memory than its own size is only counted at that size
    //! unless it says otherwise ([`Rcu::retire_sized`](crate::Rcu::retire_sized),
    //! [`RcuCell::retired_size`](crate::RcuCell::retired_size)).
    //!
    //! # Memory kept per domain and per thread
    //!
    //! * A domain's read side (its epoch, fence kind and key: 128 bytes) lives on pages shared by
    //!   all domains ([`gp::read_side`](crate::docs::internal::gp::read_side)); a dropped domain's
    //!   line is reused by the next domain built, and the pages are never returned to the
    //!   allocator. A program that once had a million domains alive keeps 128 MB for them.
    //! * Every thread of the process carries a 4 KiB direct-mapped cache of its reader records (256
    //!   slots; see [`per_thread`](crate::docs::internal::per_thread)) in static thread-local
    //!   storage, whether it reads or not (a cache made on a thread's first read, behind a pointer,
    //!   cost a thread reading ten to a hundred domains in turn about 10% more per section). Each
    //!   reader record is 256 bytes with its `Arc`.
    //!
    //! # Checks that need more than stable Rust
    //!
    //! `cargo test --workspace` and `.ci/run` (which adds release tests and the loom models)
    //! need only stable Rust. Two checks need a nightly toolchain and are run by hand, not by
    //! `.ci/run`:
    //!
    //! * **Miri** runs the `RcuCell`, `RcuList`, `RcuHashMap` and thread-exit tests (the
    //!   README gives the command); membarrier does not exist there, so only the
    //!   [`FenceKind::SeqCst`] mode is checked.
    //! * **AddressSanitizer** (`scripts/asan.sh`, nightly with `rust-src`) runs the stress and
    //!   hostile tests and a torture run per fence mode.
    //!
    //! The loom models run on stable but explore a bounded number of preemptions (more with
    //! `LOOM_MAX_PREEMPTIONS`, much more slowly); they check the protocols in
    //! [`FenceKind::SeqCst`] mode, since loom cannot model a system call that reaches into
    //! other threads. The membarrier mode is covered by the stress tests and the torture, not
    //! by a model.
    //!
    //! [`Stats::callbacks_abandoned`]: crate::Stats::callbacks_abandoned
    //! [`Stats::stalls`]: crate::Stats::stalls
    //! [`Stats::owned_sections`]: crate::Stats::owned_sections
    //! [`OwnedGuard`]: crate::OwnedGuard
    //! [`Guard`]: crate::Guard
    //! [`RecSeq`]: crate::RecSeq
    //! [`RecSeq::replace`]: crate::RecSeq::replace
    //! [`PerCpuRwLock`]: crate::PerCpuRwLock
    //! [`FenceKind::SeqCst`]: crate::FenceKind::SeqCst
    //! [`FenceKind::Membarrier`]: crate::FenceKind::Membarrier
    //! [`Qsbr`]: crate::Qsbr
    //! [`Rcu`]: crate::Rcu
    //! [`RcuCell`]: crate::RcuCell
    //! [`RcuList`]: crate::RcuList
    //! [`RcuBuilder::retire_on_producers`]: crate::RcuBuilder::retire_on_producers
    //! [`RcuBuilder::build_global`]: crate::RcuBuilder::build_global
}
