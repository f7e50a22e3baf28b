//! Tables, plots and headlines.

use crate::measure::{self};
use crate::plot::{self, Axis, Panel, Series};
use crate::report::{self, Table};
use anyhow::Result;

use super::{Latency, PendingDelay, PendingPoint, Report};
use crate::experiments::Rendered;

/// Tables, plots and headlines.
pub(super) fn render(r: &Report) -> Result<Rendered> {
    let mut md = intro(r);
    md.push_str("### The seed's figures beside ours\n\n");
    md.push_str(&seed_table(r));
    md.push_str(&format!(
        "\nSeed: {}. Our ratios are larger than the kernel's because the gap between the two \
         kinds is wider here: a normal grace period waits for `membarrier(GLOBAL)` (itself a \
         kernel grace period, about 10 ms) after a 1 ms batching window, while an expedited one \
         takes microseconds; so with the switch on, callbacks wait about as long as the gap \
         between expedited grace periods, not a normal one. The kernel's callbacks also wait \
         for softirq or rcuog processing that expedited grace periods do not shorten.\n\n",
        r.seed.source
    ));
    md.push_str("### (a) Pending bytes against the expedited rate\n\n");
    md.push_str(&pending_table(r));
    md.push_str("\n### (b) synchronize() latency\n\n");
    md.push_str(&latency_table(r));
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
        "Same build, two domains per point: `expedited_callbacks(false)` (baseline, before the \
         series) and `(true)` (on). Backlog hurry disabled in both.\n\n\
         (a) {} churn thread(s) retire {}-byte objects, {} per batch with a {} µs pause; {} \
         thread(s) run expedited grace periods with a sleep of 0-10 ms between them; pending \
         bytes sampled every {} µs for {} ms per point.\n\n\
         (b) {} writer(s) time {} synchronize() calls each while {} thread(s) run expedited \
         grace periods.\n\n",
        c.churn_threads,
        r.object_bytes,
        c.churn_batch,
        measure::us(c.churn_pause),
        c.exp_threads,
        measure::us(c.sample),
        c.point.as_millis(),
        c.writers,
        c.runs,
        c.sync_exp_threads,
    )
}

/// Part (a)'s baseline / on ratios of mean pending bytes, lowest and highest (`None` when
/// no delay has one).
fn pending_range(r: &Report) -> Option<(f64, f64)> {
    let ratios: Vec<f64> = r.pending.iter().filter_map(|p| p.ratio_mean).collect();
    if ratios.is_empty() {
        return None;
    }
    Some(
        ratios
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
                (a.min(x), b.max(x))
            }),
    )
}

/// The seed's figures beside ours.
fn seed_table(r: &Report) -> String {
    let seed = &r.seed;
    let mut side = Table::new(&["", "seed (kernel)", "ours (this run)"]);
    side.row(vec![
        "memory held by pending frees, baseline / on".into(),
        format!(
            "{:.1}-{:.1}x less sock_inode slab",
            seed.slab_ratio_low, seed.slab_ratio_high
        ),
        match pending_range(r) {
            None => "n/a".into(),
            Some((lo, hi)) => {
                format!("{lo:.2}-{hi:.2}x less pending bytes (mean, over the delays)")
            }
        },
    ]);
    if let Some(p) = r.synchronize.first() {
        side.row(vec![
            "synchronize() mean, baseline → on".into(),
            format!(
                "{:.1} → {:.1} ms ({:.2}x)",
                seed.sync_before_ms, seed.sync_after_ms, seed.sync_ratio
            ),
            format!(
                "{:.2} → {:.2} ms ({}), expedited every {} µs",
                p.baseline.mean_us / 1e3,
                p.on.mean_us / 1e3,
                report::ratio(p.ratio_mean),
                p.exp_interval_us
            ),
        ]);
    }
    side.to_markdown()
}

/// Part (a): one row per delay.
fn pending_table(r: &Report) -> String {
    let mut t = Table::new(&[
        "delay (ms)",
        "exp GPs/s (base / on)",
        "mean pending, baseline",
        "mean pending, on",
        "baseline / on",
        "peak, baseline",
        "peak, on",
        "peak ratio",
        "released by exp (on)",
        "freed / retired (base; on)",
    ]);
    for p in &r.pending {
        t.row(vec![
            format!("{}", p.delay_ms),
            format!(
                "{} / {}",
                report::num(p.baseline.exp_gps_per_s),
                report::num(p.on.exp_gps_per_s)
            ),
            report::bytes(p.baseline.mean_pending_bytes),
            report::bytes(p.on.mean_pending_bytes),
            report::ratio(p.ratio_mean),
            report::bytes(p.baseline.peak_pending_bytes as f64),
            report::bytes(p.on.peak_pending_bytes as f64),
            report::ratio(p.ratio_peak),
            format!(
                "{:.0} %",
                100.0 * p.on.released_by_expedited as f64
                    / (p.on.released_by_expedited + p.on.released_by_normal).max(1) as f64
            ),
            format!(
                "{}/{}; {}/{}",
                p.baseline.freed, p.baseline.retired, p.on.freed, p.on.retired
            ),
        ]);
    }
    t.to_markdown()
}

/// Part (b): two rows (baseline, on) per expedited interval.
fn latency_table(r: &Report) -> String {
    let mut t = Table::new(&[
        "exp interval (µs)",
        "switch",
        "mean (ms)",
        "p50 (ms)",
        "p90 (ms)",
        "p99 (ms)",
        "samples",
        "exp GPs/s",
        "baseline / on (mean)",
    ]);
    for p in &r.synchronize {
        for (name, l, ratio_cell) in [
            ("baseline", &p.baseline, String::new()),
            ("on", &p.on, report::ratio(p.ratio_mean)),
        ] {
            t.row(vec![
                format!("{}", p.exp_interval_us),
                name.into(),
                format!("{:.2}", l.mean_us / 1e3),
                format!("{:.2}", l.p50_us / 1e3),
                format!("{:.2}", l.p90_us / 1e3),
                format!("{:.2}", l.p99_us / 1e3),
                l.samples.to_string(),
                report::num(l.exp_gps_per_s),
                ratio_cell,
            ]);
        }
    }
    t.to_markdown()
}

/// (a) pending bytes against the expedited rate; (b) the `synchronize()` latency CDF.
fn svg(r: &Report) -> Result<String> {
    let c = &r.config;
    let pending_series = |name: &str, pick: fn(&PendingDelay) -> &PendingPoint| Series {
        name: name.into(),
        points: r
            .pending
            .iter()
            .map(|p| {
                let q = pick(p);
                (q.exp_gps_per_s, q.mean_pending_bytes / 1024.0)
            })
            .collect(),
    };
    let mut panels = vec![Panel::Lines {
        title: "(a) mean pending bytes against the expedited grace-period rate".into(),
        x: Axis::log("expedited grace periods per second (log)"),
        y: Axis::linear("mean pending KiB"),
        series: vec![
            pending_series("baseline (expedited_callbacks off)", |p| &p.baseline),
            pending_series("on", |p| &p.on),
        ],
    }];
    if let Some(p) = r.synchronize.first() {
        let cdf = |l: &Latency| {
            measure::cdf(&l.all_us, 200)
                .into_iter()
                .map(|(x, y)| (x / 1e3, y))
                .collect()
        };
        panels.push(Panel::Lines {
            title: format!(
                "(b) synchronize() latency, CDF ({} writers, {} expedited threads every {} µs)",
                c.writers, c.sync_exp_threads, p.exp_interval_us
            ),
            x: Axis::log("milliseconds (log)"),
            y: Axis::linear("fraction of calls"),
            series: vec![
                Series {
                    name: "baseline".into(),
                    points: cdf(&p.baseline),
                },
                Series {
                    name: "on".into(),
                    points: cdf(&p.on),
                },
            ],
        });
    }
    plot::render(&panels)
}

/// Part (a)'s range of ratios and part (b)'s first interval, beside the seed's.
fn headlines(r: &Report) -> Vec<String> {
    let seed = &r.seed;
    let mut headlines = Vec::new();
    if let Some((lo, hi)) = pending_range(r) {
        headlines.push(format!(
            "pending bytes {lo:.2}-{hi:.2}x lower with expedited callbacks (seed: {:.1}-{:.1}x \
             less slab)",
            seed.slab_ratio_low, seed.slab_ratio_high
        ));
    }
    if let Some(p) = r.synchronize.first() {
        headlines.push(format!(
            "synchronize() mean {:.2} → {:.2} ms ({}) with 2 expedited threads every {} µs (seed: \
             {:.1} → {:.1} ms, {:.2}x)",
            p.baseline.mean_us / 1e3,
            p.on.mean_us / 1e3,
            report::ratio(p.ratio_mean),
            p.exp_interval_us,
            seed.sync_before_ms,
            seed.sync_after_ms,
            seed.sync_ratio
        ));
    }
    headlines
}
