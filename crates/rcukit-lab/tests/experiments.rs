//! Every experiment in a tiny configuration: the result is complete and consistent (every
//! scheme present, every retired object freed, ratios finite), and it renders to Markdown, JSON
//! and SVG. These tests assert behaviour only, never timings.

use rcukit_lab::experiments::{
    callbacks, capture, conntrack, netfilter, netns, outcome, peers, percpu, Common, Outcome,
    Unavailable,
};
use rcukit_lab::progress::Progress;
use serde_json::Value;
use std::time::Duration;

fn common() -> Common {
    Common {
        quick: true,
        threads: 2,
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A finite, positive number at `ptr` in `v`.
fn finite(v: &Value, ptr: &str) -> f64 {
    let x = v
        .pointer(ptr)
        .unwrap_or_else(|| panic!("missing {ptr} in {v}"))
        .as_f64()
        .unwrap_or_else(|| panic!("{ptr} is not a number: {v}"));
    assert!(
        x.is_finite() && x > 0.0,
        "{ptr} = {x} is not finite and positive"
    );
    x
}

fn ids(list: &Value, key: &str) -> Vec<String> {
    list.as_array()
        .expect("an array")
        .iter()
        .map(|s| s[key].as_str().expect("a string id").to_string())
        .collect()
}

fn check_outcome(o: &Outcome, name: &str) {
    assert_eq!(o.name, name);
    assert!(o.markdown.contains('|'), "no table in the Markdown");
    let svg = o.svg.as_deref().expect("a plot");
    assert!(
        svg.starts_with("<svg") && svg.contains("<text"),
        "plot without text"
    );
    assert!(!o.headlines.is_empty());
    assert_eq!(o.json["env"]["mode"], "quick");
    assert!(o.json["env"]["cores"].as_u64().unwrap() >= 1);
}

fn check_unavailable(json: &Value, expected: &[Unavailable]) {
    let listed = ids(&json["not_available"], "scheme");
    let wanted: Vec<String> = expected.iter().map(|u| u.scheme.to_string()).collect();
    assert_eq!(listed, wanted);
}

#[test]
fn netfilter_tiny() {
    let mut cfg = netfilter::Config::new(&common());
    cfg.rules = 100;
    cfg.additions = 10;
    cfg.readers = 1;
    cfg.warmup = ms(10);
    cfg.phase = ms(40);
    cfg.rounds = 2;
    let r = netfilter::run(&cfg, &Progress::hidden()).unwrap();
    let json = serde_json::to_value(&r).unwrap();
    // Interleaved rounds: every scheme but rcu-sync, the baseline first (its ratios are 1).
    let round_ids: Vec<String> = netfilter::round_schemes()
        .iter()
        .map(|s| s.id().to_string())
        .collect();
    assert!(!round_ids.contains(&"rcu-sync".to_string()));
    assert_eq!(ids(&json["addition_rounds"], "scheme"), round_ids);
    for (i, a) in r.addition_rounds.iter().enumerate() {
        assert_eq!(a.p50_us.values.len(), 2, "{a:?}");
        finite(&json, &format!("/addition_rounds/{i}/p50_us/median"));
        finite(&json, &format!("/addition_rounds/{i}/vs_baseline/median"));
        assert_eq!(a.wrong_verdicts, 0, "{a:?}");
    }
    assert_eq!(r.addition_rounds[0].vs_baseline.values, vec![1.0, 1.0]);
    let expected: Vec<String> = netfilter::SchemeId::ALL
        .iter()
        .map(|s| s.id().to_string())
        .collect();
    assert_eq!(ids(&json["schemes"], "scheme"), expected);
    for (i, s) in json["schemes"].as_array().unwrap().iter().enumerate() {
        let at = |k: &str| format!("/schemes/{i}/{k}");
        finite(&json, &at("update_ms_total"));
        // A lock whose writer updates back to back can keep the single reader out for a whole
        // 40 ms phase (seen in CI: `rwlock`, 0 lookups): zero is a measurement there, not a
        // failure. Schemes whose readers take no lock must always make progress.
        let during = &at("reader_lookups_per_s/during_writer");
        if s["scheme"].as_str().is_some_and(|id| id.contains("rwlock")) {
            let x = json.pointer(during).and_then(Value::as_f64).expect(during);
            assert!(x.is_finite() && x >= 0.0, "{during} = {x}");
        } else {
            finite(&json, during);
        }
        finite(&json, &at("reader_lookups_per_s/alone"));
        finite(&json, &at("vs_baseline/update_time"));
        finite(&json, &at("vs_baseline/lookups_alone"));
        assert_eq!(s["tables_freed"], s["tables_replaced"], "{s}");
        let id = netfilter::SchemeId::ALL[i];
        if id.in_place() {
            assert_eq!(s["tables_replaced"].as_u64().unwrap(), 0, "{s}");
        } else {
            // Every scheme but the in-place ones replaces the table at every update.
            assert!(s["tables_replaced"].as_u64().unwrap() >= cfg.additions as u64);
        }
        assert_eq!(s["final_rules"].as_u64().unwrap(), 110);
        assert_eq!(s["wrong_verdicts"].as_u64().unwrap(), 0);
        assert_eq!(s["update_us"]["count"].as_u64().unwrap(), 10);
    }
    check_unavailable(&json, netfilter::UNAVAILABLE);
    assert_eq!(json["baseline"], "recseq");
    assert_eq!(json["seed"]["current_ms"], 1109.0);
    check_outcome(&outcome::<netfilter::Netfilter>(&r).unwrap(), "netfilter");
}

#[test]
fn capture_tiny() {
    let mut cfg = capture::Config::new(&common());
    cfg.packet_threads = 2;
    cfg.rates = vec![50e3, 200e3];
    cfg.point = ms(60);
    cfg.rounds = 2;
    let r = capture::run(&cfg, &Progress::hidden()).unwrap();
    let json = serde_json::to_value(&r).unwrap();
    let expected: Vec<String> = capture::SchemeId::ALL
        .iter()
        .map(|s| s.id().to_string())
        .collect();
    assert_eq!(ids(&json["schemes"], "scheme"), expected);
    for s in &r.schemes {
        assert_eq!(s.points.len(), 2);
        for p in &s.points {
            assert_eq!(p.processed + p.drops + p.backlog, p.offered, "{p:?}");
            assert!(p.offered > 0);
        }
        assert_eq!(
            s.drops + s.processed + s.points.iter().map(|p| p.backlog).sum::<u64>(),
            s.offered
        );
        assert_eq!(s.lists_freed, s.lists_retired, "{:?}", s.scheme);
        use capture::SchemeId::{FilterOnly, NoListener, Rwlock};
        if s.scheme == FilterOnly && s.capacity_pps_per_thread.is_some() {
            assert_eq!(
                s.capacity_vs_filter_only,
                Some(1.0),
                "the reference against itself"
            );
        }
        if ![NoListener, FilterOnly, Rwlock].contains(&s.scheme) {
            assert!(s.lists_retired > 0, "{:?} retired nothing", s.scheme);
        }
    }
    check_unavailable(&json, capture::UNAVAILABLE);
    check_outcome(&outcome::<capture::Capture>(&r).unwrap(), "capture");
}

#[test]
fn percpu_tiny() {
    let mut cfg = percpu::Config::new(&common());
    cfg.thread_counts = vec![1, 2];
    cfg.point = ms(30);
    let r = percpu::run(&cfg, &Progress::hidden()).unwrap();
    let json = serde_json::to_value(&r).unwrap();
    let expected: Vec<String> = percpu::SchemeId::ALL
        .iter()
        .map(|s| s.id().to_string())
        .collect();
    assert_eq!(ids(&json["schemes"], "scheme"), expected);
    for (i, s) in r.schemes.iter().enumerate() {
        assert_eq!(s.points.len(), 2);
        for (j, p) in s.points.iter().enumerate() {
            assert_eq!(p.threads, cfg.thread_counts[j]);
            finite(&json, &format!("/schemes/{i}/points/{j}/reads_per_s"));
            finite(&json, &format!("/schemes/{i}/points/{j}/vs_rwlock"));
        }
        finite(&json, &format!("/schemes/{i}/scaling"));
    }
    check_unavailable(&json, percpu::UNAVAILABLE);
    check_outcome(&outcome::<percpu::Percpu>(&r).unwrap(), "percpu");
}

#[test]
fn netns_tiny() {
    let mut cfg = netns::Config::new(&common());
    cfg.duration = ms(250);
    cfg.process = Duration::from_micros(200);
    cfg.setup = Duration::from_micros(50);
    let r = netns::run(&cfg, &Progress::hidden()).unwrap();
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(ids(&json["schemes"], "scheme"), ["net-mutex", "net-rwsem"]);
    for s in &r.schemes {
        assert!(s.creates > 0);
        assert_eq!(s.destroyed, s.created_total, "{s:?}");
        assert_eq!(s.freed, s.created_total, "{s:?}");
        assert!(s.cleanup_batches > 0);
    }
    finite(&json, "/ratio");
    finite(&json, "/seed_ratio");
    check_outcome(&outcome::<netns::Netns>(&r).unwrap(), "netns");
}

#[test]
fn callbacks_tiny() {
    let mut cfg = callbacks::Config::new(&common());
    cfg.churn_threads = 2;
    cfg.delays = vec![ms(0), ms(5)];
    cfg.point = ms(100);
    cfg.writers = 2;
    cfg.runs = 3;
    cfg.exp_intervals = vec![ms(1)];
    let r = callbacks::run(&cfg, &Progress::hidden()).unwrap();
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(r.pending.len(), 2);
    for (i, d) in r.pending.iter().enumerate() {
        for (which, p) in [("baseline", &d.baseline), ("on", &d.on)] {
            assert!(p.retired > 0, "{which}: nothing retired");
            assert_eq!(p.freed, p.retired, "{which}: every retired object is freed");
            assert_eq!(p.callbacks_invoked, p.callbacks_queued, "{which}");
            assert!(p.samples > 0);
            finite(&json, &format!("/pending/{i}/{which}/mean_pending_bytes"));
        }
        // The switch off means no callback is ever released by an expedited grace period.
        assert_eq!(d.baseline.released_by_expedited, 0);
        finite(&json, &format!("/pending/{i}/ratio_mean"));
    }
    assert_eq!(r.synchronize.len(), 1);
    let s = &r.synchronize[0];
    for l in [&s.baseline, &s.on] {
        assert_eq!(l.samples, cfg.writers * cfg.runs);
        assert_eq!(l.all_us.len(), l.samples);
    }
    for key in ["mean_us", "p50_us", "p99_us"] {
        finite(&json, &format!("/synchronize/0/baseline/{key}"));
        finite(&json, &format!("/synchronize/0/on/{key}"));
    }
    finite(&json, "/synchronize/0/ratio_mean");
    check_outcome(&outcome::<callbacks::Callbacks>(&r).unwrap(), "callbacks");
}

#[test]
fn peers_tiny() {
    let mut cfg = peers::Config::new(&common());
    cfg.read_threads = vec![1, 2];
    cfg.read_time = ms(10);
    cfg.gp_time = ms(60);
    cfg.gp_max_samples = 50;
    cfg.retire_objects = 10_000;
    cfg.rounds = 2;
    let r = peers::run(&cfg, &Progress::hidden()).unwrap();
    let json = serde_json::to_value(&r).unwrap();
    let expected: Vec<String> = peers::ReadPeer::all()
        .iter()
        .map(|p| p.id().to_string())
        .collect();
    let got: Vec<String> = r.read.iter().map(|x| x.peer.id().to_string()).collect();
    assert_eq!(got, expected);
    for x in &r.read {
        assert_eq!(x.ns_per_op.len(), 2);
        assert!(x
            .ns_per_op
            .iter()
            .all(|(_, ns)| ns.is_finite() && *ns > 0.0));
        assert!(x.vs_rcukit.iter().all(|(_, v)| v.is_some()));
        for (_, rounds) in &x.rounds {
            assert_eq!(rounds.values.len(), 2, "{:?}: one value per round", x.peer);
            assert!(rounds.min <= rounds.median && rounds.median <= rounds.max);
        }
    }
    let base = r
        .read
        .iter()
        .find(|x| x.peer == peers::ReadPeer::RcukitGlobal);
    assert!(base.unwrap().vs_rcukit_rounds[0]
        .1
        .values
        .iter()
        .all(|&v| v == 1.0));
    assert_eq!(r.grace_period.len(), peers::GpPeer::all().len());
    for g in &r.grace_period {
        assert!(g.latency_us.count > 0, "{:?}", g.peer);
        assert!(g.vs_rcukit_expedited.is_some());
        assert_eq!(g.mean_us_rounds.values.len(), 2);
    }
    assert_eq!(r.retire.len(), peers::RetirePeer::all().len());
    for x in &r.retire {
        assert_eq!(
            x.freed, x.retired,
            "{:?}: every retired object is freed",
            x.peer
        );
        assert_eq!(x.retired, 20_000, "two rounds of 10,000");
        assert_eq!(x.objects_per_s_rounds.values.len(), 2);
        assert!(x.vs_rcukit.is_some());
    }
    check_unavailable(&json, peers::UNAVAILABLE);
    check_outcome(&outcome::<peers::Peers>(&r).unwrap(), "peers");
}

#[test]
fn conntrack_tiny() {
    let mut cfg = conntrack::Config::new(&common());
    cfg.flows = 5_000;
    cfg.packet_threads = vec![1, 2];
    cfg.churn_rate = 20_000;
    cfg.point = ms(60);
    cfg.rounds = 2;
    cfg.sample_every = 8;
    let r = conntrack::run(&cfg, &Progress::hidden()).unwrap();
    let json = serde_json::to_value(&r).unwrap();
    let expected: Vec<String> = conntrack::MapId::all()
        .iter()
        .map(|m| m.id().to_string())
        .collect();
    assert_eq!(ids(&json["maps"], "map"), expected);
    assert_eq!(json["baseline"], "rwlock-hashmap");
    for (i, m) in r.maps.iter().enumerate() {
        assert_eq!(m.points.len(), 2);
        for (j, p) in m.points.iter().enumerate() {
            let at = |k: &str| format!("/maps/{i}/points/{j}/{k}");
            assert_eq!(p.packet_threads, cfg.packet_threads[j]);
            assert_eq!(p.lookups_per_s_per_thread.len(), p.packet_threads);
            finite(&json, &at("lookups_per_s"));
            finite(&json, &at("latency_ns/p50"));
            finite(&json, &at("latency_ns/p99"));
            finite(&json, &at("vs_baseline/lookups"));
            finite(&json, &at("vs_baseline/p99"));
            // A writer that waits on the map's locks (DashMap's shards, the RwLock) can be
            // held at zero for a whole 60 ms point on a loaded 2-core machine; the report
            // flags that ("writer held back"). Its rate is a measurement, not a check.
            let pace = p.writer.achieved_per_s;
            assert!(
                pace.is_finite() && pace >= 0.0,
                "{:?}: writer pace {pace}",
                m.map
            );
            assert!(p.latency_ns.count > 0, "{:?}: no latency sample", m.map);
            assert_eq!(p.hits + p.misses, p.lookups, "{:?}", m.map);
            assert!(p.misses > 0 && p.hits > p.misses, "{:?}: {p:?}", m.map);
            // Correctness, never timing: no wrong record, no live flow missed, every expiry
            // found its flow.
            assert_eq!(p.wrong_records, 0, "{:?}", m.map);
            assert_eq!(p.lost_flows, 0, "{:?}", m.map);
            assert_eq!(p.writer.expire_misses, 0, "{:?}", m.map);
        }
        assert_eq!(m.flows_expected, cfg.flows, "{:?}", m.map);
        assert_eq!(m.flows_at_end, m.flows_expected, "{:?}", m.map);
        assert!(
            m.records_created > cfg.flows,
            "{:?}: the writer created nothing",
            m.map
        );
        assert_eq!(
            m.records_freed, m.records_created,
            "{:?}: every record created is freed",
            m.map
        );
    }
    assert_eq!(r.claims.len(), 3);
    for c in &r.claims {
        assert_eq!(c.packet_threads, 2);
        assert_eq!(c.holds.is_some(), c.ratio.is_some(), "{c:?}");
    }
    check_unavailable(&json, conntrack::UNAVAILABLE);
    let o = outcome::<conntrack::Conntrack>(&r).unwrap();
    check_outcome(&o, "conntrack");
    assert!(o.markdown.contains("| `rcu-hashmap`"), "{}", o.markdown);
    assert!(o.markdown.contains("p99 ns"));
}

#[test]
fn conntrack_without_writer_claims_nothing() {
    let mut cfg = conntrack::Config::new(&common());
    cfg.flows = 2_000;
    cfg.packet_threads = vec![1];
    cfg.churn_rate = 0;
    cfg.point = ms(30);
    cfg.maps = vec![
        conntrack::MapId::RwlockHashmap,
        conntrack::MapId::RcuHashmap,
    ];
    let r = conntrack::run(&cfg, &Progress::hidden()).unwrap();
    for m in &r.maps {
        assert_eq!(m.records_created, cfg.flows);
        assert_eq!(m.records_freed, cfg.flows);
        assert_eq!(m.points[0].writer.achieved_per_s, 0.0);
    }
    // The claims are about a running writer (and dashmap and papaya were not run).
    assert!(r.claims.iter().all(|c| c.holds.is_none()), "{:?}", r.claims);
    check_outcome(&outcome::<conntrack::Conntrack>(&r).unwrap(), "conntrack");
}

#[test]
fn bad_settings_are_errors() {
    let mut cfg = netfilter::Config::new(&common());
    cfg.readers = 0;
    let err = netfilter::run(&cfg, &Progress::hidden()).unwrap_err();
    assert!(err.to_string().contains("--readers"), "{err}");

    let mut cfg = capture::Config::new(&common());
    cfg.rates = vec![];
    assert!(capture::run(&cfg, &Progress::hidden()).is_err());

    let mut cfg = netns::Config::new(&common());
    cfg.duration = Duration::ZERO;
    let err = netns::run(&cfg, &Progress::hidden()).unwrap_err();
    assert!(err.to_string().contains("--duration"), "{err}");

    let mut cfg = callbacks::Config::new(&common());
    cfg.runs = 0;
    assert!(callbacks::run(&cfg, &Progress::hidden()).is_err());

    let mut cfg = percpu::Config::new(&common());
    cfg.thread_counts = vec![0];
    assert!(percpu::run(&cfg, &Progress::hidden()).is_err());

    let mut cfg = peers::Config::new(&common());
    cfg.retire_objects = 0;
    assert!(peers::run(&cfg, &Progress::hidden()).is_err());

    let mut cfg = conntrack::Config::new(&common());
    cfg.miss_percent = 101;
    let err = conntrack::run(&cfg, &Progress::hidden()).unwrap_err();
    assert!(err.to_string().contains("--miss-percent"), "{err}");
    let mut cfg = conntrack::Config::new(&common());
    cfg.maps = vec![];
    assert!(conntrack::run(&cfg, &Progress::hidden()).is_err());
}
