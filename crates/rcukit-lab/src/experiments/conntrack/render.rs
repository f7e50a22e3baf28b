//! Tables, plot and headlines.

use super::run::Point;
use super::{MapId, Report};
use crate::experiments::{unavailable_note, Rendered};
use crate::measure::{ratio, Summary};
use crate::plot::{self, Axis, Panel};
use crate::report::{self, Table};
use anyhow::Result;

/// A writer below this share of its target pace was held back by the map.
pub const STARVED_BELOW: f64 = 0.9;

/// `map at N threads (share%)` for every point whose writer fell below [`STARVED_BELOW`].
fn starved_writers(r: &Report) -> Vec<String> {
    if r.config.churn_rate == 0 {
        return Vec::new();
    }
    r.maps
        .iter()
        .flat_map(|m| {
            m.points.iter().filter_map(move |p| {
                let share = p.writer.share_of_target.unwrap_or(0.0);
                (share < STARVED_BELOW).then(|| {
                    format!(
                        "`{}` at {} packet thread(s) ({:.0}%)",
                        m.map.id(),
                        p.packet_threads,
                        share * 100.0
                    )
                })
            })
        })
        .collect()
}

fn ns(x: f64) -> String {
    report::num(x)
}

/// Tables, plot and headlines.
pub(super) fn render(r: &Report) -> Result<Rendered> {
    let mut md = intro(r);
    for &threads in &r.config.packet_threads {
        md.push_str(&format!(
            "### {threads} packet thread(s), writer at {} pairs/s\n\n",
            report::num(r.config.churn_rate as f64)
        ));
        md.push_str(&point_table(r, threads));
        md.push('\n');
    }
    md.push_str(&notes(r));
    md.push('\n');
    md.push_str("### rcukit's claims\n\n");
    md.push_str(&claims_table(r));
    md.push_str("\n### Checks\n\n");
    md.push_str(&checks(r));
    md.push_str(&unavailable_note(&r.not_available));
    Ok(Rendered {
        markdown: md,
        svg: Some(svg(r)?),
        headlines: headlines(r),
    })
}

/// The workload in words.
fn intro(r: &Report) -> String {
    let c = &r.config;
    format!(
        "A flow table of {} flows (5-tuple keys, 48-byte records). Packet threads look up one \
         flow per packet ({}% of packets belong to no flow), each lookup one read-side \
         section; one writer creates a flow and expires the oldest at {} pairs/s{}. {} ms per \
         point × {} round(s), the maps interleaved. Hash: {}.\n\nLatency: {}.\n\n",
        c.flows,
        c.miss_percent,
        report::num(c.churn_rate as f64),
        if c.churn_rate == 0 {
            " (here: no writer)"
        } else {
            ""
        },
        c.point.as_millis(),
        c.rounds,
        r.hasher,
        r.latency_method
    )
}

/// One row per map at `threads` packet threads.
fn point_table(r: &Report, threads: usize) -> String {
    let mut t = Table::new(&[
        "map",
        "lookups/s",
        "vs rwlock",
        "per thread",
        "p50 ns",
        "p99 ns",
        "p99 vs rwlock",
        "writer pairs/s",
        "of target",
        "misses",
    ]);
    for m in &r.maps {
        let Some(p) = m.points.iter().find(|p| p.packet_threads == threads) else {
            continue;
        };
        let mean_thread = if p.lookups_per_s_per_thread.is_empty() {
            0.0
        } else {
            p.lookups_per_s_per_thread.iter().sum::<f64>() / p.lookups_per_s_per_thread.len() as f64
        };
        t.row(vec![
            format!("`{}`", m.map.id()),
            report::num(p.lookups_per_s),
            report::ratio(p.vs_baseline.lookups),
            report::num(mean_thread),
            ns(p.latency_ns.p50),
            ns(p.latency_ns.p99),
            report::ratio(p.vs_baseline.p99),
            report::num(p.writer.achieved_per_s),
            p.writer
                .share_of_target
                .map_or("n/a".into(), |s| format!("{:.0}%", s * 100.0)),
            format!("{:.1}%", p.miss_share * 100.0),
        ]);
    }
    t.to_markdown()
}

/// What the ratio columns mean, and the maps whose writer was held back.
fn notes(r: &Report) -> String {
    let mut md = String::new();
    md.push_str(&format!(
        "`vs rwlock`: lookups/s ÷ `{}`'s in this run (higher is better); `p99 vs rwlock`: p99 \
         ÷ its p99 (lower is better); `per thread`: mean over the packet threads; `of \
         target`: the writer's achieved pace.\n",
        r.baseline
    ));
    let starved = starved_writers(r);
    if !starved.is_empty() {
        md.push_str(&format!(
            "\n**Writer held back** (below {:.0}% of its pace): {}. Those maps served their \
             lookups while doing less of the writer's work, so their lookups/s are not a like-\
             for-like comparison.\n",
            STARVED_BELOW * 100.0,
            starved.join(", ")
        ));
    }
    md
}

/// rcukit's claims for `RcuHashMap`, checked.
fn claims_table(r: &Report) -> String {
    let mut t = Table::new(&[
        "claim",
        "needed",
        "measured",
        "rounds: min to max",
        "holds",
        "their writer's pace",
    ]);
    for cl in &r.claims {
        let lo = cl.ratio_by_round.iter().copied().reduce(f64::min);
        let hi = cl.ratio_by_round.iter().copied().reduce(f64::max);
        t.row(vec![
            cl.claim.clone(),
            format!("{:.1}x", cl.needed),
            report::ratio(cl.ratio),
            match (lo, hi) {
                (Some(lo), Some(hi)) => {
                    format!("{} to {}", report::ratio(Some(lo)), report::ratio(Some(hi)))
                }
                _ => "n/a".into(),
            },
            match cl.holds {
                Some(true) => "yes".into(),
                Some(false) => "**no**".into(),
                None => "not measured".into(),
            },
            cl.their_writer_share
                .map_or("n/a".into(), |s| format!("{:.0}%", s * 100.0)),
        ]);
    }
    t.to_markdown()
}

/// The correctness checks per map, and the load average.
fn checks(r: &Report) -> String {
    let mut md = String::new();
    let mut t = Table::new(&[
        "map",
        "fill ms",
        "fill bytes/flow",
        "drain ms",
        "drain misses",
        "wrong records",
        "lost flows",
        "expiries that missed",
        "flows at end / expected",
        "records freed / created",
    ]);
    for m in &r.maps {
        let sum = |f: fn(&Point) -> u64| m.points.iter().map(f).sum::<u64>();
        t.row(vec![
            format!("`{}`", m.map.id()),
            format!("{:.1}", m.fill_ms),
            m.fill_rss_bytes_per_flow
                .map_or("-".into(), |b| format!("{b:.0}")),
            format!("{:.1}", m.drain_ms),
            m.drain_misses.to_string(),
            sum(|p| p.wrong_records).to_string(),
            sum(|p| p.lost_flows).to_string(),
            sum(|p| p.writer.expire_misses).to_string(),
            format!("{} / {}", m.flows_at_end, m.flows_expected),
            format!("{} / {}", m.records_freed, m.records_created),
        ]);
    }
    md.push_str(&t.to_markdown());
    md.push_str(
        "\nOne thread inserts the flows into the empty map (`fill ms`; `fill bytes/flow`: the \
         resident set's growth meanwhile) and, after the last round, removes every live flow \
         one at a time (`drain ms`). Every other column must read 0, or equal counts: a wrong \
         record, a lost flow (live before and after its lookup, not found), an expiry or a \
         drain removal that found nothing is a bug in the map; so is a record never freed.\n",
    );
    if let Some(load) = r.load_average_1m_end {
        md.push_str(&format!(
            "\nLoad average (1 min) at the start {} and at the end {load:.2} on {} cores{}.\n",
            r.env
                .load_average_1m
                .map_or("unknown".into(), |l| format!("{l:.2}")),
            r.env.cores,
            if load > r.env.cores as f64 {
                ": other work shared the machine, and the figures (above all at the most \
                 threads) move with it"
            } else {
                ""
            }
        ));
    }
    md
}

/// Lookups/s per map and thread count, and the latency at the most threads.
fn svg(r: &Report) -> Result<String> {
    let c = &r.config;
    let maxt = r.max_threads();
    let names: Vec<String> = r.maps.iter().map(|m| m.map.id().to_string()).collect();
    let throughput: Vec<(String, Vec<f64>)> = c
        .packet_threads
        .iter()
        .map(|&threads| {
            (
                format!("{threads} packet thread(s)"),
                r.maps
                    .iter()
                    .map(|m| {
                        r.point(m.map, threads)
                            .map_or(f64::NAN, |p| p.lookups_per_s)
                    })
                    .collect(),
            )
        })
        .collect();
    let lat = |f: fn(&Summary) -> f64| -> Vec<f64> {
        r.maps
            .iter()
            .map(|m| r.point(m.map, maxt).map_or(f64::NAN, |p| f(&p.latency_ns)))
            .collect()
    };
    plot::render(&[
        Panel::Bars {
            title: format!(
                "flow lookups/s with the writer at {} pairs/s",
                report::num(c.churn_rate as f64)
            ),
            value: Axis::linear("lookups/s, all packet threads"),
            categories: names.clone(),
            series: throughput,
        },
        Panel::Bars {
            title: format!("sampled lookup latency at {maxt} packet thread(s)"),
            value: Axis::log("ns (log)"),
            categories: names,
            series: vec![
                ("p50".into(), lat(|s| s.p50)),
                ("p99".into(), lat(|s| s.p99)),
            ],
        },
    ])
}

/// The rcu-hashmap's ratios at the most threads, and the claims' verdicts.
fn headlines(r: &Report) -> Vec<String> {
    let c = &r.config;
    let maxt = r.max_threads();
    let mut headlines = Vec::new();
    if let Some(p) = r.point(MapId::RcuHashmap, maxt) {
        let others: Vec<String> = r
            .maps
            .iter()
            .filter(|m| m.map != MapId::RcuHashmap)
            .filter_map(|m| {
                let o = r.point(m.map, maxt)?;
                Some(format!(
                    "{} {}",
                    report::ratio(ratio(p.lookups_per_s, o.lookups_per_s)),
                    m.map.id()
                ))
            })
            .collect();
        headlines.push(format!(
            "rcu-hashmap at {maxt} packet thread(s), writer at {} pairs/s: {} lookups/s (p99 {} \
             ns) = {}",
            report::num(c.churn_rate as f64),
            report::num(p.lookups_per_s),
            ns(p.latency_ns.p99),
            others.join(", ")
        ));
    }
    let verdicts: Vec<String> = r
        .claims
        .iter()
        .map(|cl| {
            format!(
                "≥{}x {}: {}",
                cl.needed,
                cl.against,
                match cl.holds {
                    Some(true) => format!("holds ({})", report::ratio(cl.ratio)),
                    Some(false) => format!("does not hold ({})", report::ratio(cl.ratio)),
                    None => "not measured".into(),
                }
            )
        })
        .collect();
    headlines.push(format!("claims: {}", verdicts.join("; ")));
    headlines
}
