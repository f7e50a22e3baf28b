//! The seed's figures beside ours, our table, the plot and the headline.

use super::{Report, SchemeId};
use crate::experiments::{seeds, Rendered};
use crate::measure::{self, Summary};
use crate::plot::{self, Axis, Panel, Series};
use crate::report::{self, Table};
use anyhow::Result;

/// Tables, plot and headlines.
pub(super) fn render(r: &Report) -> Result<Rendered> {
    let mut md = String::new();
    md.push_str(&format!(
        "{} creator loop(s): {} µs of process work, then create a namespace ({} µs under the \
         lock); a cleanup thread tears namespaces down in batches, waiting in synchronize() \
         with the lock held ({} µs exit work each). {} s per scheme.\n\n",
        r.config.creators,
        measure::us(r.config.process),
        measure::us(r.config.setup),
        measure::us(r.config.exit),
        r.config.duration.as_secs_f64()
    ));
    md.push_str("### The seed's figures beside ours\n\n");
    md.push_str(&seed_table(r));
    md.push_str(&format!(
        "\nSeed: {}. Our ratio depends on how long a normal grace period takes here (the \
         `synchronize()` column) against the 1.8 ms of work per iteration taken from the seed.\n\n",
        r.seed_source
    ));
    md.push_str("### Our measurements\n\n");
    md.push_str(&our_table(r));
    let old = r.scheme(SchemeId::NetMutex);
    let headlines = vec![format!(
        "creates/s with the rwsem {} of the mutex's (seed: {:.1}x); teardown's synchronize() \
         took {} ms on average",
        report::ratio(r.ratio),
        r.seed_ratio,
        old.map_or("n/a".into(), |s| report::num(s.gp_wait_ms.mean))
    )];
    Ok(Rendered {
        markdown: md,
        svg: Some(svg(r)?),
        headlines,
    })
}

/// The seed's ratios beside ours.
fn seed_table(r: &Report) -> String {
    use seeds::netns::{C_LOOP_AFTER_S, C_LOOP_BEFORE_S, SHELL_AFTER_S, SHELL_BEFORE_S};
    let mut side = Table::new(&["", "seed (kernel)", "ours (this run)"]);
    let old = r.scheme(SchemeId::NetMutex);
    let new = r.scheme(SchemeId::NetRwsem);
    side.row(vec![
        "create/destroy loop, rwsem / mutex".into(),
        format!(
            "{SHELL_BEFORE_S} s / {SHELL_AFTER_S} s = {:.2}x (`unshare -n bash -c exit`)",
            r.seed_ratio
        ),
        format!(
            "{} / {} creates/s = {}",
            new.map_or("n/a".into(), |s| report::num(s.creates_per_s)),
            old.map_or("n/a".into(), |s| report::num(s.creates_per_s)),
            report::ratio(r.ratio)
        ),
    ]);
    side.row(vec![
        "tight unshare() loop in C".into(),
        format!(
            "{C_LOOP_BEFORE_S} s / {C_LOOP_AFTER_S} s = {:.2}x",
            r.seed_ratio_c_loop
        ),
        "(not modelled separately)".into(),
    ]);
    side.to_markdown()
}

/// Our figures, one row per scheme.
fn our_table(r: &Report) -> String {
    let mut t = Table::new(&[
        "scheme",
        "lock",
        "creates/s",
        "copy_net_ns p50 / p99 (µs)",
        "synchronize() in teardown, mean (ms)",
        "teardown batches (mean size)",
        "created / destroyed / freed",
        "for_each_net walks",
    ]);
    for s in &r.schemes {
        t.row(vec![
            format!("`{}`", s.scheme.id()),
            s.description.into(),
            report::num(s.creates_per_s),
            format!(
                "{} / {}",
                report::num(s.create_us.p50),
                report::num(s.create_us.p99)
            ),
            report::num(s.gp_wait_ms.mean),
            format!("{} ({:.1})", s.cleanup_batches, s.mean_batch),
            format!("{} / {} / {}", s.created_total, s.destroyed, s.freed),
            s.reader_walks.to_string(),
        ]);
    }
    t.to_markdown()
}

/// Creates per second, and the create latency percentiles.
fn svg(r: &Report) -> Result<String> {
    plot::render(&[
        Panel::Bars {
            title: "namespaces created per second".into(),
            value: Axis::linear("creates/s"),
            categories: r.schemes.iter().map(|s| s.scheme.id().into()).collect(),
            series: vec![(
                "creates/s".into(),
                r.schemes.iter().map(|s| s.creates_per_s).collect(),
            )],
        },
        Panel::Lines {
            title: "copy_net_ns latency (lock wait + setup): percentiles".into(),
            x: Axis::log("microseconds (log)"),
            y: Axis::linear("fraction of creates"),
            series: r
                .schemes
                .iter()
                .map(|s| Series {
                    name: s.scheme.id().into(),
                    points: percentile_points(&s.create_us),
                })
                .collect(),
        },
    ])
}

/// The summary's percentiles as (value, fraction) points (the JSON keeps summaries).
fn percentile_points(s: &Summary) -> Vec<(f64, f64)> {
    if s.count == 0 {
        return Vec::new();
    }
    vec![
        (s.min, 0.0),
        (s.p50, 0.5),
        (s.p90, 0.9),
        (s.p99, 0.99),
        (s.max, 1.0),
    ]
}
