//! The seed's figure beside ours, our table, the plot and the headline.

use super::{Report, SchemeId};
use crate::experiments::{unavailable_note, Rendered};
use crate::plot::{self, Axis, Panel, Series};
use crate::report::{self, Table};
use anyhow::Result;

/// Tables, plot and headlines.
pub(super) fn render(r: &Report) -> Result<Rendered> {
    let maxt = r.config.thread_counts.iter().copied().max().unwrap_or(1);
    let mut md = String::new();
    md.push_str(&format!(
        "Reader threads scan a {}-entry table under each scheme's read side; no writer. \
         {} ms per point.\n\n",
        r.config.work,
        r.config.point.as_millis()
    ));
    md.push_str("### The seed's figure beside ours\n\n");
    md.push_str(&seed_table(r, maxt));
    md.push_str(&format!("\nSeed: {}.\n\n", r.seed_source));
    md.push_str("### Our measurements (reads/s, all threads)\n\n");
    md.push_str(&our_table(r, maxt));
    md.push_str(&unavailable_note(&r.not_available));
    let headlines = vec![format!(
        "reads/s at {maxt} thread(s) vs the central rwlock: percpu-rwlock {}, rcu {}, qsbr {} \
         (seed: ipt_do_table at 1/3 of its CPU after per-CPU locks)",
        vs(r, SchemeId::PercpuRwlock, maxt),
        vs(r, SchemeId::Rcu, maxt),
        vs(r, SchemeId::Qsbr, maxt)
    )];
    Ok(Rendered {
        markdown: md,
        svg: Some(svg(r)?),
        headlines,
    })
}

/// Scheme `id`'s reads/s against the rwlock's at `threads` threads.
fn vs(r: &Report, id: SchemeId, threads: usize) -> String {
    r.scheme(id)
        .and_then(|s| s.points.iter().find(|p| p.threads == threads))
        .map(|p| report::ratio(p.vs_rwlock))
        .unwrap_or_else(|| "n/a".into())
}

/// The seed's figure beside our ratios at `maxt` threads.
fn seed_table(r: &Report, maxt: usize) -> String {
    let vs = |id: SchemeId| vs(r, id, maxt);
    let mut side = Table::new(&["", "seed (2 CPUs, 2005)", "ours (this run)"]);
    side.row(vec![
        "central rwlock → per-CPU rwlocks".into(),
        format!(
            "ipt_do_table uses {:.2} of its former CPU (per-CPU locks, unrolling, NUMA)",
            r.seed_cpu_fraction_after
        ),
        format!(
            "percpu-rwlock reads/s = {} of rwlock at {maxt} thread(s)",
            vs(SchemeId::PercpuRwlock)
        ),
    ]);
    side.row(vec![
        "readers that write no shared line at all".into(),
        "(not measured by the seed)".into(),
        format!(
            "rcu {}, qsbr {} of rwlock at {maxt} thread(s)",
            vs(SchemeId::Rcu),
            vs(SchemeId::Qsbr)
        ),
    ]);
    side.to_markdown()
}

/// Reads/s per scheme and thread count, with the ratios and the scaling.
fn our_table(r: &Report, maxt: usize) -> String {
    let mut header = vec!["scheme".to_string()];
    for t in &r.config.thread_counts {
        header.push(format!("{t} thread(s)"));
        header.push("vs rwlock".to_string());
    }
    header.push(format!(
        "scaling {}→{}",
        r.config.thread_counts.iter().min().unwrap_or(&1),
        maxt
    ));
    let mut t = Table::new(&header);
    for s in &r.schemes {
        let mut row = vec![format!("`{}`", s.scheme.id())];
        for p in &s.points {
            row.push(report::num(p.reads_per_s));
            row.push(report::ratio(p.vs_rwlock));
        }
        row.push(report::ratio(s.scaling));
        t.row(row);
    }
    t.to_markdown()
}

/// Read throughput by thread count.
fn svg(r: &Report) -> Result<String> {
    plot::render(&[Panel::Lines {
        title: "read throughput by thread count".into(),
        x: Axis::linear("reader threads"),
        y: Axis::log("reads/s, all threads (log)"),
        series: r
            .schemes
            .iter()
            .map(|s| Series {
                name: s.scheme.id().into(),
                points: s
                    .points
                    .iter()
                    .map(|p| (p.threads as f64, p.reads_per_s))
                    .collect(),
            })
            .collect(),
    }])
}
