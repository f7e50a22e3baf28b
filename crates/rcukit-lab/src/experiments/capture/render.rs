//! Tables, plot and headlines.

use crate::plot::{self, Axis, Panel, Series};
use crate::report::{self, Table};
use anyhow::Result;

use super::{Report, SchemeId};
use crate::experiments::{unavailable_note, Rendered};

/// The rate the headline quotes: the highest swept rate at which the machine itself keeps up
/// (the `no-listener` reference drops under 5 %), else the lowest.
pub fn headline_rate(r: &Report) -> f64 {
    let lowest = r.config.rates.iter().copied().fold(f64::INFINITY, f64::min);
    r.scheme(SchemeId::NoListener)
        .and_then(|s| {
            s.points
                .iter()
                .filter(|p| p.drop_fraction < 0.05)
                .map(|p| p.rate_pps_per_thread)
                .reduce(f64::max)
        })
        .unwrap_or(lowest)
}

fn pct(x: f64) -> String {
    format!("{:.2} %", x * 100.0)
}

/// Tables, plot and headlines.
pub(super) fn render(r: &Report) -> Result<Rendered> {
    let mut md = String::new();
    md.push_str(&format!(
        "{} packet thread(s), each a NIC queue with a {}-packet ring; one descriptor always \
         attached, a tcpdump thread attaching and detaching a second every {} ms; filters of \
         {} comparisons. Offered rates swept per thread.\n\n",
        r.config.packet_threads,
        r.config.ring,
        r.config.interval.as_secs_f64() * 1e3,
        r.config.filter_len
    ));
    md.push_str("### The seed's figures beside ours\n\n");
    md.push_str(&seed_table(r));
    md.push_str(&format!(
        "\nSeed: {}. Our machine has far fewer cores, so the contention that costs FreeBSD {:.0} % \
         of {:.0} Mpps shows here as a lower per-thread capacity: the rate at which each scheme \
         starts dropping. Quoted rate: the highest at which the `no-listener` reference (no \
         lock, no filter) drops under 5 %.\n\n",
        r.seed.source,
        r.seed.drop_fraction * 100.0,
        r.seed.inbound_pps / 1e6
    ));
    md.push_str("### Our measurements\n\n");
    md.push_str(&our_table(r));
    md.push_str(
        "\nCapacity: the highest swept rate at which drops stay within one percentage point \
         of `no-listener`, which runs no lock and no filter: its drops are the machine's own \
         noise. `filter-only` runs the same filters with no synchronization: its capacity is \
         the filter work's own, and a scheme at 1.00x of it loses nothing to synchronization \
         (the seed's \"drops gone\"). Capacity is only as fine as the swept rates. Freed / \
         retired: descriptor-list versions, or for `rcu-list` list nodes.\n",
    );
    md.push_str(&unavailable_note(&r.not_available));
    Ok(Rendered {
        markdown: md,
        svg: Some(svg(r)?),
        headlines: headlines(r),
    })
}

/// Scheme `id`'s drops at `rate` packets/s per thread.
fn drops_at(r: &Report, id: SchemeId, rate: f64) -> String {
    r.scheme(id)
        .and_then(|s| s.points.iter().find(|p| p.rate_pps_per_thread == rate))
        .map(|p| pct(p.drop_fraction))
        .unwrap_or_else(|| "not run".into())
}

/// The seed's figures beside ours, at the headline rate.
fn seed_table(r: &Report) -> String {
    let mut side = Table::new(&["", "seed (FreeBSD, 28 cores)", "ours (this run)"]);
    let top = headline_rate(r);
    let at_top = |id: SchemeId| drops_at(r, id, top);
    side.row(vec![
        "drops with the rwlock while tcpdump runs".into(),
        format!(
            "{} of {} pkt/s = {}",
            report::num(r.seed.idrops_pps),
            report::num(r.seed.inbound_pps),
            pct(r.seed.drop_fraction)
        ),
        format!(
            "{} at {} pkt/s per thread",
            at_top(SchemeId::Rwlock),
            report::num(top)
        ),
    ]);
    side.row(vec![
        "drops with epoch(9) / RCU".into(),
        "gone (the patch's point)".into(),
        format!(
            "rcu {}, rcu-list {}, qsbr {}, epoch {} at {} pkt/s per thread",
            at_top(SchemeId::Rcu),
            at_top(SchemeId::RcuList),
            at_top(SchemeId::Qsbr),
            at_top(SchemeId::Epoch),
            report::num(top)
        ),
    ]);
    side.to_markdown()
}

/// Drops per scheme and rate, capacity and the checks.
fn our_table(r: &Report) -> String {
    let mut header = vec!["scheme".to_string()];
    for rate in &r.config.rates {
        header.push(format!("drops @ {}/s", report::num(*rate)));
    }
    header.extend([
        "capacity (pkt/s/thread)".to_string(),
        "capacity vs filter-only".to_string(),
        "drops / processed (all rates)".to_string(),
        "drops vs rwlock".to_string(),
        "freed / retired".to_string(),
    ]);
    let mut t = Table::new(&header);
    for s in &r.schemes {
        let mut row = vec![format!("`{}`", s.scheme.id())];
        for p in &s.points {
            row.push(pct(p.drop_fraction));
        }
        row.push(match (s.scheme, s.capacity_pps_per_thread) {
            (SchemeId::NoListener, _) => "(reference)".into(),
            (_, Some(c)) => report::num(c),
            (_, None) => "below the lowest rate".into(),
        });
        row.push(match s.scheme {
            SchemeId::NoListener => "".into(),
            SchemeId::FilterOnly => "(reference)".into(),
            _ => report::ratio(s.capacity_vs_filter_only),
        });
        row.push(format!(
            "{} / {}",
            report::num(s.drops as f64),
            report::num(s.processed as f64)
        ));
        row.push(if s.drops == 0 {
            "0".into()
        } else {
            report::ratio(s.drops_vs_rwlock)
        });
        row.push(if s.lists_retired == 0 {
            "n/a".into()
        } else {
            format!("{} / {}", s.lists_freed, s.lists_retired)
        });
        t.row(row);
    }
    t.to_markdown()
}

/// Drops against the offered rate, per scheme.
fn svg(r: &Report) -> Result<String> {
    let series = r
        .schemes
        .iter()
        .map(|s| Series {
            name: s.scheme.id().to_string(),
            points: s
                .points
                .iter()
                .map(|p| (p.rate_pps_per_thread, p.drop_fraction * 100.0))
                .collect(),
        })
        .collect();
    plot::render(&[Panel::Lines {
        title: "packets dropped while tcpdump attaches and detaches".into(),
        x: Axis::log("offered packets/s per thread (log)"),
        y: Axis::linear("dropped (%)"),
        series,
    }])
}

/// Drops at the headline rate and each scheme's capacity.
fn headlines(r: &Report) -> Vec<String> {
    let top = headline_rate(r);
    let at_top = |id: SchemeId| drops_at(r, id, top);
    let mut headlines = Vec::new();
    let cap = |id| {
        r.scheme(id)
            .and_then(|s| s.capacity_pps_per_thread)
            .map(report::num)
            .unwrap_or_else(|| "below the lowest rate".into())
    };
    let listed = |f: &dyn Fn(SchemeId) -> String| {
        [
            SchemeId::Rwlock,
            SchemeId::Rcu,
            SchemeId::RcuList,
            SchemeId::Qsbr,
            SchemeId::Epoch,
        ]
        .iter()
        .map(|&id| format!("{} {}", id.id(), f(id)))
        .collect::<Vec<_>>()
        .join(", ")
    };
    let vs_filter = |id| {
        r.scheme(id)
            .map(|s| report::ratio(s.capacity_vs_filter_only))
            .unwrap_or_else(|| "n/a".into())
    };
    headlines.push(format!(
        "drops at {}/s per thread: {} (seed: {:.0} % with the rwlock, none with epoch); capacity \
         (pkt/s/thread): {}, filter-only {}; capacity vs filter-only: {}",
        report::num(top),
        listed(&at_top),
        r.seed.drop_fraction * 100.0,
        listed(&cap),
        cap(SchemeId::FilterOnly),
        listed(&vs_filter)
    ));
    headlines
}
