//! A router's forwarding table and firewall rules, served to reader threads while a control
//! thread updates them: netfilter's `table->private` as an [`RcuCell`] and a rule chain as an
//! [`RcuList`] (seed 001's CK_LIST).
//!
//! * Reader threads ("the data plane") look up random destination addresses: longest-prefix
//!   match in the routing table, then a walk of the firewall rules. They take no lock.
//! * The control thread adds and withdraws routes with copy-update ([`RcuCell::update_with`],
//!   cycling through the three ways to reclaim the old table) and inserts, replaces and
//!   removes firewall rules.
//! * Every table carries a checksum that readers verify, so a torn or freed table would be
//!   reported.
//!
//! Run with `cargo run --release --example rule_table -- [--seconds S] [--readers N]`.

use rcukit::{Rcu, RcuCell, RcuList, Reclaim};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

/// One route: a prefix, its length and the next hop.
#[derive(Clone, Copy, Debug)]
struct Route {
    prefix: u32,
    len: u8,
    next_hop: u32,
}

impl Route {
    fn mask(len: u8) -> u32 {
        if len == 0 {
            0
        } else {
            u32::MAX << (32 - len)
        }
    }

    fn matches(&self, addr: u32) -> bool {
        addr & Route::mask(self.len) == self.prefix
    }
}

/// An immutable routing table: routes sorted longest prefix first, plus a checksum.
#[derive(Clone, Debug)]
struct Routes {
    generation: u64,
    routes: Vec<Route>,
    checksum: u64,
}

impl Routes {
    fn new(generation: u64, mut routes: Vec<Route>) -> Routes {
        routes.sort_by(|a, b| b.len.cmp(&a.len).then(a.prefix.cmp(&b.prefix)));
        let checksum = Routes::sum(generation, &routes);
        Routes {
            generation,
            routes,
            checksum,
        }
    }

    fn sum(generation: u64, routes: &[Route]) -> u64 {
        routes.iter().fold(generation, |acc, r| {
            acc.rotate_left(5)
                ^ (u64::from(r.prefix) << 8 | u64::from(r.len))
                ^ u64::from(r.next_hop)
        })
    }

    /// Longest-prefix match (linear: the table is small, and this is about RCU, not tries).
    fn lookup(&self, addr: u32) -> Option<u32> {
        self.routes
            .iter()
            .find(|r| r.matches(addr))
            .map(|r| r.next_hop)
    }

    fn is_intact(&self) -> bool {
        Routes::sum(self.generation, &self.routes) == self.checksum
    }

    /// A copy with `route` added (or its next hop replaced).
    fn with(&self, route: Route) -> Routes {
        let mut routes: Vec<Route> = self
            .routes
            .iter()
            .copied()
            .filter(|r| (r.prefix, r.len) != (route.prefix, route.len))
            .collect();
        routes.push(route);
        Routes::new(self.generation + 1, routes)
    }

    /// A copy without the route for (`prefix`, `len`).
    fn without(&self, prefix: u32, len: u8) -> Routes {
        let routes = self
            .routes
            .iter()
            .copied()
            .filter(|r| (r.prefix, r.len) != (prefix, len))
            .collect();
        Routes::new(self.generation + 1, routes)
    }
}

/// A firewall rule: drop traffic to a prefix while enabled.
#[derive(Debug)]
struct Rule {
    id: u64,
    route: Route,
    /// Disabled rules stay in the chain but match nothing.
    enabled: bool,
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn random_route(rng: &mut XorShift, next_hop: u32) -> Route {
    let len = 8 + (rng.next() % 17) as u8;
    Route {
        prefix: (rng.next() as u32) & Route::mask(len),
        len,
        next_hop,
    }
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} needs a number")),
        None => default,
    }
}

fn main() {
    let seconds = arg("--seconds", 2);
    let readers = arg("--readers", 2) as usize;
    let rcu = Rcu::global();
    println!(
        "rule_table: {readers} reader thread(s), 1 control thread, {seconds} s, fence kind {}",
        rcu.fence_kind()
    );

    let mut rng = XorShift(0x5eed);
    let initial: Vec<Route> = (0..64).map(|i| random_route(&mut rng, i)).collect();
    let default_route = Route {
        prefix: 0,
        len: 0,
        next_hop: 9999,
    };
    let table = RcuCell::new(Routes::new(0, [initial, vec![default_route]].concat()));
    let rules: RcuList<Rule> = (0..16)
        .map(|id| Rule {
            id,
            route: random_route(&mut rng, 0),
            enabled: true,
        })
        .collect();

    let stop = AtomicBool::new(false);
    let lookups = AtomicU64::new(0);
    let dropped = AtomicU64::new(0);
    let route_updates = AtomicU64::new(0);
    let rule_edits = AtomicU64::new(0);
    let newest_seen = AtomicU64::new(0);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);

    std::thread::scope(|s| {
        for r in 0..readers {
            let (table, rules, stop) = (&table, &rules, &stop);
            let (lookups, dropped, newest_seen) = (&lookups, &dropped, &newest_seen);
            s.spawn(move || {
                let mut rng = XorShift(0xabcd + r as u64);
                let (mut n, mut denied, mut newest) = (0u64, 0u64, 0u64);
                while !stop.load(Relaxed) {
                    for _ in 0..256 {
                        let addr = rng.next() as u32;
                        // One read-side critical section per packet: a load, a store and a
                        // compiler fence (with membarrier), no lock, no atomic RMW.
                        let guard = rcu.read();
                        let routes = table.load(&guard);
                        assert!(routes.is_intact(), "torn or freed routing table");
                        newest = newest.max(routes.generation);
                        let hop = routes.lookup(addr).expect("the default route matches");
                        let deny = rules
                            .iter(&guard)
                            .any(|rule| rule.enabled && rule.route.matches(addr));
                        denied += u64::from(deny);
                        std::hint::black_box(hop);
                        n += 1;
                    }
                }
                lookups.fetch_add(n, Relaxed);
                dropped.fetch_add(denied, Relaxed);
                newest_seen.fetch_max(newest, Relaxed);
            });
        }

        // The control plane.
        let mut rng = XorShift(0xc0ffee);
        let mut next_rule = 16;
        let ways = [Reclaim::Deferred, Reclaim::Expedited, Reclaim::Synchronize];
        let mut i = 0u64;
        while Instant::now() < deadline {
            let route = random_route(&mut rng, i as u32);
            let how = ways[(i % 3) as usize];
            if rng.next() % 3 == 0 {
                table.update_with(how, |old| match old.routes.first() {
                    Some(r) if r.len > 0 => old.without(r.prefix, r.len),
                    _ => old.with(route),
                });
            } else {
                table.update_with(how, |old| old.with(route));
            }
            route_updates.fetch_add(1, Relaxed);

            match rng.next() % 3 {
                0 => rules.push_front(Rule {
                    id: next_rule,
                    route: random_route(&mut rng, 0),
                    enabled: true,
                }),
                1 => {
                    let victim = rng.next() % next_rule;
                    rules.remove_first(|rule| rule.id >= victim);
                }
                _ => {
                    let victim = rng.next() % next_rule;
                    rules.update_first(
                        |rule| rule.id == victim,
                        |old| Rule {
                            id: old.id,
                            route: old.route,
                            enabled: !old.enabled,
                        },
                    );
                }
            }
            next_rule += 1;
            rule_edits.fetch_add(1, Relaxed);
            i += 1;
            std::thread::sleep(Duration::from_micros(100));
        }
        stop.store(true, Relaxed);
    });

    let elapsed = start.elapsed().as_secs_f64();
    let lookups = lookups.load(Relaxed);
    let guard = rcu.read();
    let final_table = table.load(&guard);
    println!(
        "lookups: {lookups} ({:.1} M/s over all readers), denied by a rule: {}",
        lookups as f64 / elapsed / 1e6,
        dropped.load(Relaxed)
    );
    println!(
        "route updates: {} ({:.0}/s; final table: generation {}, {} routes; readers saw up to \
         generation {})",
        route_updates.load(Relaxed),
        route_updates.load(Relaxed) as f64 / elapsed,
        final_table.generation,
        final_table.routes.len(),
        newest_seen.load(Relaxed)
    );
    println!(
        "rule edits: {} ({} rules now)",
        rule_edits.load(Relaxed),
        rules.len()
    );
    drop(guard);
    rcu.barrier();
    let stats = rcu.stats();
    println!(
        "grace periods: {} normal, {} expedited; callbacks run: {} (released by normal: {}, by \
         expedited: {})",
        stats.normal_gps,
        stats.expedited_gps,
        stats.callbacks_invoked,
        stats.released_by_normal,
        stats.released_by_expedited
    );
}
