//! Tables, plot and headlines.

use crate::measure::ratio;
use crate::plot::{self, Axis, Panel};
use crate::report::{self, Table};
use anyhow::Result;

use super::{Report, SchemeId};
use crate::experiments::seeds::netfilter::{HISTORY_RCU_S, HISTORY_RWLOCK_S, SEED_ADDITIONS};
use crate::experiments::{unavailable_note, Rendered};

/// Tables, plot and headlines.
pub(super) fn render(r: &Report) -> Result<Rendered> {
    let mut md = String::new();
    md.push_str(&format!(
        "{} rule additions (each a copy of the table plus one rule) against a {}-rule table \
         while {} reader thread(s) classify packets by linear scan.\n\n",
        r.config.additions, r.config.rules, r.config.readers
    ));
    md.push_str("### The seed's figures beside ours\n\n");
    md.push_str(&seed_table(r));
    md.push_str(&seed_note(r));
    md.push_str("### Our measurements\n\n");
    md.push_str(&our_table(r));
    md.push_str(&format!(
        "\n\"During writer\": the {} ms sustained phase in which the writer adds and removes a \
         rule back to back, as fast as its scheme lets it (its rate is the column before). \
         \"Alone\": readers only, {} ms. Lookups/s count all readers together.\n",
        r.config.phase.as_millis(),
        r.config.phase.as_millis()
    ));
    md.push_str(&rounds_section(r));
    md.push_str(&unavailable_note(&r.not_available));
    Ok(Rendered {
        markdown: md,
        svg: Some(svg(r)?),
        headlines: headlines(r),
    })
}

/// The seed's figures beside ours.
fn seed_table(r: &Report) -> String {
    let seed = &r.seed;
    let mut side = Table::new(&["comparison", "seed (kernel)", "ours (this run)"]);
    side.row(current_row(r));
    side.row(vec![
        "synchronize / current".into(),
        format!(
            "{:.0} / {:.0} ms = {:.2}x",
            seed.synchronize_rcu_ms, seed.current_ms, seed.synchronize_ratio
        ),
        ours_vs_baseline(r, SchemeId::RcuSync),
    ]);
    side.row(vec![
        "expedited / current".into(),
        format!(
            "{:.0} / {:.0} ms = {:.2}x",
            seed.expedited_ms, seed.current_ms, seed.expedited_ratio
        ),
        ours_vs_baseline(r, SchemeId::RcuExpedited),
    ]);
    side.row(vec![
        "time synchronize adds to each addition".into(),
        format!(
            "{:+.2} ms per addition",
            (seed.synchronize_rcu_ms - seed.current_ms) / f64::from(SEED_ADDITIONS)
        ),
        added_per_addition(r, SchemeId::RcuSync),
    ]);
    side.row(vec![
        "time expedited adds to each addition".into(),
        format!(
            "{:+.3} ms per addition",
            (seed.expedited_ms - seed.current_ms) / f64::from(SEED_ADDITIONS)
        ),
        added_per_addition(r, SchemeId::RcuExpedited),
    ]);
    side.row(history_row(r));
    side.to_markdown()
}

/// The seed table's first row: the current scheme's update time, the seed's and ours.
fn current_row(r: &Report) -> Vec<String> {
    let (seed, base) = (&r.seed, r.baseline.id());
    vec![
        format!("current, {} additions", r.config.additions),
        format!(
            "xt_recseq: {:.0} ms for {SEED_ADDITIONS} ({:.2} ms each, mostly starting `iptables`)",
            seed.current_ms,
            seed.current_ms / f64::from(SEED_ADDITIONS)
        ),
        r.scheme(r.baseline)
            .map(|b| {
                format!(
                    "{base}: {} ms ({} µs each, p50 {} µs)",
                    report::num(b.update_ms_total),
                    report::num(b.update_ms_total * 1e3 / r.config.additions as f64),
                    report::num(b.update_us.p50)
                )
            })
            .unwrap_or_else(|| "not run".into()),
    ]
}

/// Our figure for `id` against the baseline: both update times and their ratio.
fn ours_vs_baseline(r: &Report, id: SchemeId) -> String {
    let base = r.baseline.id();
    r.scheme(id)
        .map(|s| {
            format!(
                "{} / {base} = {} / {} ms = {}",
                id.id(),
                report::num(s.update_ms_total),
                report::num(r.scheme(r.baseline).map_or(f64::NAN, |b| b.update_ms_total)),
                report::ratio(s.vs_baseline.update_time)
            )
        })
        .unwrap_or_else(|| "not run".into())
}

/// The time `id` adds to each addition, over the baseline.
fn added_per_addition(r: &Report, id: SchemeId) -> String {
    match (r.scheme(id), r.scheme(r.baseline)) {
        (Some(s), Some(b)) => format!(
            "{:+.3} ms per addition ({} − {})",
            (s.update_ms_total - b.update_ms_total) / r.config.additions as f64,
            id.id(),
            r.baseline.id()
        ),
        _ => "not run".into(),
    }
}

/// The seed table's last row: RCU against the rwlock, in the kernel's history and here.
fn history_row(r: &Report) -> Vec<String> {
    vec![
        "RCU (2.6.30-rc1) / rwlock (2.6.29)".into(),
        format!(
            "{HISTORY_RCU_S:.1} / {HISTORY_RWLOCK_S:.1} s = {:.0}x",
            r.seed.history_rcu_vs_rwlock_ratio
        ),
        match (r.scheme(SchemeId::RcuSync), r.scheme(SchemeId::RwlockCopy)) {
            (Some(s), Some(c)) => format!(
                "rcu-sync / rwlock-copy = {} / {} ms = {}",
                report::num(s.update_ms_total),
                report::num(c.update_ms_total),
                report::ratio(ratio(s.update_ms_total, c.update_ms_total))
            ),
            _ => "not run".into(),
        },
    ]
}

/// Where the seed's figures come from, and how ours compare.
fn seed_note(r: &Report) -> String {
    let seed = &r.seed;
    let base = r.baseline.id();
    let get = |id| r.scheme(id);
    let order = match (
        get(SchemeId::RcuSync),
        get(SchemeId::RcuExpedited),
        get(r.baseline),
    ) {
        (Some(sync), Some(exp), Some(b)) => format!(
            " In this run synchronize took {} of expedited's time and expedited {} of \
             `{base}`'s (seed: {:.2}x and {:.2}x).",
            report::ratio(ratio(sync.update_ms_total, exp.update_ms_total)),
            report::ratio(ratio(exp.update_ms_total, b.update_ms_total)),
            seed.synchronize_rcu_ms / seed.expedited_ms,
            seed.expedited_ratio
        ),
        _ => String::new(),
    };
    format!(
        "\nSeed: {}. Our \"current\" is `{base}`: {}. The seed's times include starting \
         `iptables` 200 times (about 5 ms each), which ours do not have, so our ratios are \
         far larger; the time each wait *adds* to an addition compares directly.{order}\n\n",
        seed.source, r.baseline_note
    )
}

/// One row per scheme.
fn our_table(r: &Report) -> String {
    let mut t = Table::new(&[
        "scheme",
        "writer",
        "additions total (ms)",
        "vs baseline",
        "per addition p50 / p99 (µs)",
        "writer updates/s (sustained)",
        "lookups/s during writer",
        "vs baseline",
        "lookups/s alone",
        "vs baseline",
        "tables freed / replaced",
        "wrong verdicts",
    ]);
    for s in &r.schemes {
        t.row(vec![
            format!("`{}`", s.scheme.id()),
            s.description.into(),
            format!("{:.1}", s.update_ms_total),
            report::ratio(s.vs_baseline.update_time),
            format!(
                "{} / {}",
                report::num(s.update_us.p50),
                report::num(s.update_us.p99)
            ),
            report::num(s.sustained_updates_per_s),
            report::num(s.reader_lookups_per_s.during_writer),
            report::ratio(s.vs_baseline.lookups_during_writer),
            report::num(s.reader_lookups_per_s.alone),
            report::ratio(s.vs_baseline.lookups_alone),
            format!("{} / {}", s.tables_freed, s.tables_replaced),
            s.wrong_verdicts.to_string(),
        ]);
    }
    t.to_markdown()
}

/// The per-addition medians of the interleaved rounds.
fn rounds_section(r: &Report) -> String {
    let base = r.baseline.id();
    let mut t = Table::new(&[
        "scheme",
        "per addition p50 (µs), median of rounds (min-max)",
        &format!("vs `{base}`, round by round"),
        "wrong verdicts",
    ]);
    for a in &r.addition_rounds {
        t.row(vec![
            format!("`{}`", a.scheme.id()),
            format!(
                "{} ({}-{})",
                report::num(a.p50_us.median),
                report::num(a.p50_us.min),
                report::num(a.p50_us.max)
            ),
            format!(
                "{} ({}-{})",
                report::ratio(a.vs_baseline.median_ratio()),
                report::ratio(ratio(a.vs_baseline.min, 1.0)),
                report::ratio(ratio(a.vs_baseline.max, 1.0))
            ),
            a.wrong_verdicts.to_string(),
        ]);
    }
    format!(
        "\n### Per-addition time in {} interleaved rounds\n\nThe table above measures each \
         scheme once, seconds apart, and the machine's memory speed drifts over such spans. \
         Here each scheme (but `rcu-sync`, whose additions take seconds) times its {} \
         additions once per round, on a fresh table with its readers, in an order rotated from \
         round to round; ratios are taken within each round.\n\n{}",
        r.config.rounds,
        r.config.additions,
        t.to_markdown()
    )
}

/// Total update time, and reader lookups with and without the writer.
fn svg(r: &Report) -> Result<String> {
    let cats: Vec<String> = r
        .schemes
        .iter()
        .map(|s| s.scheme.id().to_string())
        .collect();
    plot::render(&[
        Panel::Bars {
            title: format!("{} rule additions: total time", r.config.additions),
            value: Axis::log("milliseconds (log)"),
            categories: cats.clone(),
            series: vec![(
                "total".into(),
                r.schemes.iter().map(|s| s.update_ms_total).collect(),
            )],
        },
        Panel::Bars {
            title: "reader lookups per second".into(),
            value: Axis::linear("lookups/s (all readers)"),
            categories: cats,
            series: vec![
                (
                    "during writer".into(),
                    r.schemes
                        .iter()
                        .map(|s| s.reader_lookups_per_s.during_writer)
                        .collect(),
                ),
                (
                    "alone".into(),
                    r.schemes
                        .iter()
                        .map(|s| s.reader_lookups_per_s.alone)
                        .collect(),
                ),
            ],
        },
    ])
}

/// What each wait adds to an addition, and the readers' ratios, beside the seed's.
fn headlines(r: &Report) -> Vec<String> {
    let seed = &r.seed;
    let base = r.baseline.id();
    let get = |id| r.scheme(id);
    let mut headlines = Vec::new();
    if let (Some(sync), Some(exp), Some(b)) = (
        get(SchemeId::RcuSync),
        get(SchemeId::RcuExpedited),
        get(r.baseline),
    ) {
        let n = r.config.additions as f64;
        headlines.push(format!(
            "each addition: synchronize adds {:+.2} ms, expedited {:+.3} ms over `{base}` (seed: \
             {:+.2} ms and {:+.3} ms over current); totals {} and {} of `{base}`",
            (sync.update_ms_total - b.update_ms_total) / n,
            (exp.update_ms_total - b.update_ms_total) / n,
            (seed.synchronize_rcu_ms - seed.current_ms) / f64::from(SEED_ADDITIONS),
            (seed.expedited_ms - seed.current_ms) / f64::from(SEED_ADDITIONS),
            report::ratio(sync.vs_baseline.update_time),
            report::ratio(exp.vs_baseline.update_time),
        ));
    }
    let lookups = |id: SchemeId| {
        get(id).map_or_else(
            || "not run".to_string(),
            |s| {
                format!(
                    "{} {} / {}",
                    id.id(),
                    report::ratio(s.vs_baseline.lookups_during_writer),
                    report::ratio(s.vs_baseline.lookups_alone)
                )
            },
        )
    };
    if let Some(retire) = r
        .addition_rounds
        .iter()
        .find(|a| a.scheme == SchemeId::RcuRetire)
    {
        headlines.push(format!(
            "per addition, median of {} interleaved rounds: rcu-retire {} µs, {} of `{base}`'s \
             (rounds {}-{})",
            r.config.rounds,
            report::num(retire.p50_us.median),
            report::ratio(retire.vs_baseline.median_ratio()),
            report::ratio(ratio(retire.vs_baseline.min, 1.0)),
            report::ratio(ratio(retire.vs_baseline.max, 1.0))
        ));
    }
    headlines.push(format!(
        "reader lookups/s vs `{base}`, while the writer runs flat out / readers alone: {}, {}, \
         {}",
        lookups(SchemeId::RcuRetire),
        lookups(SchemeId::PercpuRwlock),
        lookups(SchemeId::Rwlock)
    ));
    headlines
}
