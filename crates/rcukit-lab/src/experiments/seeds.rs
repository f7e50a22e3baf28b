//! The seeds' own figures, quoted once: every experiment's "seed" columns, ratios and source
//! lines come from here (the seeds themselves are described in `rcukit::docs`).

/// Seed 003 (Kirill Tkhai, Nov 2017): `net_mutex` made a reader-writer semaphore.
pub mod netns {
    /// `for i in {1..10000}; do unshare -n bash -c exit; done` before the patch, seconds.
    pub const SHELL_BEFORE_S: f64 = 84.19;
    /// The same loop after the patch, seconds.
    pub const SHELL_AFTER_S: f64 = 18.235;
    /// 100,000 `unshare()` in a C loop before the patch, seconds.
    pub const C_LOOP_BEFORE_S: f64 = 99.85;
    /// The C loop after the patch, seconds.
    pub const C_LOOP_AFTER_S: f64 = 68.34;
    /// Where the figures come from.
    pub const SOURCE: &str = "seed 003: Kirill Tkhai, Nov 2017, `for i in {1..10000}; do \
                              unshare -n bash -c exit; done` 1m24.190s before, 0m18.235s \
                              after; 100,000 unshare() in C 1:39.85 before, 1:08.34 after";
}

/// Seed 002 (Eric Dumazet, 2005): ip_tables' central rwlock replaced by per-CPU locks.
pub mod percpu {
    /// `ipt_do_table`'s CPU use after the series, as a fraction of before ("a third").
    pub const CPU_FRACTION_AFTER: f64 = 1.0 / 3.0;
    /// Where the figure comes from.
    pub const SOURCE: &str = "seed 002: Eric Dumazet, 2005, oprofile of ipt_do_table on dual \
                              Xeon and dual Opteron before and after per-CPU locks (with loop \
                              unrolling and NUMA placement in the same series)";
}

/// Seed 004 (Puranjay Mohan, LSFMM+BPF 2026): callbacks released by expedited grace periods.
pub mod callbacks {
    /// `sock_inode` slab held before / after, low end of the range.
    pub const SLAB_RATIO_LOW: f64 = 1.5;
    /// `sock_inode` slab held before / after, high end of the range.
    pub const SLAB_RATIO_HIGH: f64 = 1.7;
    /// rcuscale's mean `synchronize_rcu()` before the series, ms.
    pub const SYNC_BEFORE_MS: f64 = 12.0;
    /// The same after, ms.
    pub const SYNC_AFTER_MS: f64 = 8.1;
    /// Where the figures come from.
    pub const SOURCE: &str = "seed 004: Puranjay Mohan, \"Enabling RCU Callbacks to Benefit \
                              from Expedited Grace Periods\" (LSFMM+BPF 2026): 15 socket \
                              threads + BPF map-in-map expedited GPs every 0-10 ms, sock_inode \
                              slab; rcuscale 16 writers + 2 expedited threads, 30 runs";
}

/// Seeds 000 and 002: 200 `iptables -A` on a Raspberry Pi 4 (Linux v6.11), and the 2009
/// regression when netfilter first moved to RCU.
pub mod netfilter {
    /// Rule additions the seed timed (`iptables -A`, one process each).
    pub const SEED_ADDITIONS: u32 = 200;
    /// 200 additions with the current `xt_recseq` scheme, ms.
    pub const CURRENT_MS: f64 = 1109.0;
    /// ... with `synchronize_rcu()`, ms.
    pub const SYNCHRONIZE_RCU_MS: f64 = 5073.0;
    /// ... with `synchronize_rcu_expedited()`, ms.
    pub const EXPEDITED_MS: f64 = 1104.0;
    /// The 2009 regression: the rwlock in 2.6.29, seconds.
    pub const HISTORY_RWLOCK_S: f64 = 0.2;
    /// ... and RCU in 2.6.30-rc1, seconds.
    pub const HISTORY_RCU_S: f64 = 6.0;
    /// Where the figures come from.
    pub const SOURCE: &str = "seed 000: 200 × `iptables -A`, Raspberry Pi 4 (4 cores), Linux \
                              v6.11; history from commit 942e4a2bd680's thread (2.6.29 rwlock \
                              0.2 s, 2.6.30-rc1 RCU 6.0 s)";
}

/// Seed 001 (FreeBSD's BPF): packet drops while tcpdump attaches and detaches filters.
pub mod capture {
    /// Inbound rate, packets/s.
    pub const INBOUND_PPS: f64 = 6.0e6;
    /// Drops while tcpdump ran (netstat idrops), packets/s.
    pub const IDROPS_PPS: f64 = 1.9e6;
    /// idrops / inbound (1.9 / 6.0, computed as the seed's figures were quoted).
    pub const DROP_FRACTION: f64 = 1.9 / 6.0;
    /// Where the figures come from.
    pub const SOURCE: &str = "seed 001: 28-core Xeon, Mellanox 100G mlx5en, 6 Mpps inbound, \
                              `tcpdump -npi mce3 host 198.18.0.1` (netstat -hw1)";
}
