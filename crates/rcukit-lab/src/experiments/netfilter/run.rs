//! The readers and the writer, per scheme, and the figures.

use crate::env::Environment;
use crate::experiments::kit::{rounds_of, with_ratios};
use crate::measure::{self, per_sec, ratio, Counter, Rounds, StopFlag, Summary};
use crate::progress::Progress;
use anyhow::Result;
use serde::Serialize;
use std::hint::black_box;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::rules::{packets, Op, Packet, Rule};
use super::schemes::{RuleTable, SchemeId};
use super::{Config, Netfilter, Report, NAME, UNAVAILABLE};
use crate::experiments::{join, measure_each, seeds, spawn_scoped, Envelope, OnExit, Unavailable};

/// Reader lookups per second (all readers together) in each phase.
#[derive(Clone, Debug, Serialize)]
pub struct LookupRates {
    /// During the sustained-update phase (the writer updating back to back).
    pub during_writer: f64,
    /// In the reader-only phase.
    pub alone: f64,
    /// During the timed additions (over `writer_window_ms`; noisy when that is short).
    pub during_additions: f64,
}

/// Ratios of a scheme's figures to the baseline's.
#[derive(Clone, Debug, Serialize)]
pub struct Ratios {
    /// This scheme's total update time / the baseline's.
    pub update_time: Option<f64>,
    /// This scheme's lookups/s while the writer runs / the baseline's.
    pub lookups_during_writer: Option<f64>,
    /// This scheme's lookups/s alone / the baseline's.
    pub lookups_alone: Option<f64>,
}

/// One scheme's figures.
#[derive(Clone, Debug, Serialize)]
pub struct SchemeResult {
    /// Scheme id.
    pub scheme: SchemeId,
    /// What its writer does.
    pub description: &'static str,
    /// Total time of all additions, milliseconds.
    pub update_ms_total: f64,
    /// Per-addition time, microseconds.
    pub update_us: Summary,
    /// Reader throughput (all readers together).
    pub reader_lookups_per_s: LookupRates,
    /// Length of the window `during_additions` was measured over (= the update time).
    pub writer_window_ms: f64,
    /// Updates per second the writer achieved in the sustained phase.
    pub sustained_updates_per_s: f64,
    /// Ratios to the baseline scheme.
    pub vs_baseline: Ratios,
    /// Tables replaced by the writer (additions and sustained updates; 0 when updated in
    /// place).
    pub tables_replaced: u64,
    /// Replaced tables freed by the end of the run (must equal `tables_replaced`).
    pub tables_freed: u64,
    /// Rules in the final table (must be rules + additions: the sustained phase adds and
    /// removes in pairs).
    pub final_rules: usize,
    /// Lookups that returned a verdict other than the expected one (must be 0).
    pub wrong_verdicts: u64,
}

/// A scheme's per-addition median, timed again in interleaved rounds.
///
/// The main run measures each scheme once, one after another, about four seconds apart; on a
/// shared machine the speed of memory traffic drifts over such spans (every copying scheme's
/// additions went from about 1.4 to about 3 µs together between runs), so one scheme's p50
/// against another's decides nothing. Here every scheme times its additions once per round,
/// in an order rotated from round to round, and the ratio to the baseline is taken round by
/// round.
#[derive(Clone, Debug, Serialize)]
pub struct AdditionRounds {
    /// Scheme id.
    pub scheme: SchemeId,
    /// Each round's p50 per addition, µs.
    pub p50_us: Rounds,
    /// Round by round: this scheme's p50 / the baseline's p50 of the same round.
    pub vs_baseline: Rounds,
    /// Lookups that returned a wrong verdict in these rounds (must be 0).
    pub wrong_verdicts: u64,
}

/// The seed's figures.
#[derive(Clone, Debug, Serialize)]
pub struct SeedFigures {
    /// Where they come from.
    pub source: &'static str,
    /// 200 additions with the current xt_recseq scheme, ms.
    pub current_ms: f64,
    /// ... with synchronize_rcu(), ms.
    pub synchronize_rcu_ms: f64,
    /// ... with synchronize_rcu_expedited(), ms.
    pub expedited_ms: f64,
    /// synchronize_rcu / current.
    pub synchronize_ratio: f64,
    /// expedited / current.
    pub expedited_ratio: f64,
    /// The 2009 regression: RCU in 2.6.30-rc1 (6.0 s) / rwlock in 2.6.29 (0.2 s).
    pub history_rcu_vs_rwlock_ratio: f64,
}

/// The seed's figures, from [`seeds::netfilter`].
pub(super) fn seed_figures() -> SeedFigures {
    use seeds::netfilter::*;
    SeedFigures {
        source: SOURCE,
        current_ms: CURRENT_MS,
        synchronize_rcu_ms: SYNCHRONIZE_RCU_MS,
        expedited_ms: EXPEDITED_MS,
        synchronize_ratio: SYNCHRONIZE_RCU_MS / CURRENT_MS,
        expedited_ratio: EXPEDITED_MS / CURRENT_MS,
        history_rcu_vs_rwlock_ratio: HISTORY_RCU_S / HISTORY_RWLOCK_S,
    }
}

/// The experiment's figures (inside the [`Envelope`]).
#[derive(Clone, Debug, Serialize)]
pub struct Body {
    /// The scheme ratios are taken against.
    pub baseline: SchemeId,
    /// Why that baseline.
    pub baseline_note: &'static str,
    /// Every scheme run, in order.
    pub schemes: Vec<SchemeResult>,
    /// Per-addition medians in interleaved rounds (every scheme but `rcu-sync`, whose
    /// additions take seconds), the baseline first.
    pub addition_rounds: Vec<AdditionRounds>,
    /// Schemes not in this build.
    pub not_available: Vec<Unavailable>,
    /// The seed's own figures.
    pub seed: SeedFigures,
}

impl Body {
    /// The result of one scheme.
    pub fn scheme(&self, id: SchemeId) -> Option<&SchemeResult> {
        self.schemes.iter().find(|s| s.scheme == id)
    }
}

/// Run the experiment.
pub fn run(cfg: &Config, progress: &Progress) -> Result<Report> {
    cfg.validate()?;
    let env = Environment::collect(cfg.quick);
    let mut schemes = measure_each(progress, NAME, &SchemeId::ALL, SchemeId::id, |id| {
        run_scheme(cfg, id)
    })?;
    let baseline = SchemeId::ALL[0];
    let base = schemes[0].clone();
    for s in &mut schemes {
        s.vs_baseline = Ratios {
            update_time: ratio(s.update_ms_total, base.update_ms_total),
            lookups_during_writer: ratio(
                s.reader_lookups_per_s.during_writer,
                base.reader_lookups_per_s.during_writer,
            ),
            lookups_alone: ratio(
                s.reader_lookups_per_s.alone,
                base.reader_lookups_per_s.alone,
            ),
        };
    }
    let addition_rounds = addition_rounds(cfg, progress)?;
    let body = Body {
        baseline,
        addition_rounds,
        baseline_note: "recseq is the seed's \"current\" scheme, netfilter's xt_recseq rebuilt \
                        as rcukit::RecSeq: readers make a per-thread sequence counter odd (with a \
                        full fence) while they classify, the writer swaps in the new table and \
                        waits until every counter that was odd has moved",
        schemes,
        not_available: UNAVAILABLE.to_vec(),
        seed: seed_figures(),
    };
    Ok(Envelope::new::<Netfilter>(env, cfg.clone(), body))
}

/// The schemes timed in [`AdditionRounds`]: all but `rcu-sync`.
pub fn round_schemes() -> Vec<SchemeId> {
    SchemeId::ALL
        .iter()
        .copied()
        .filter(|&id| id != SchemeId::RcuSync)
        .collect()
}

/// Time every scheme of [`round_schemes`]'s additions once per round, `cfg.rounds` times, in
/// an order rotated from round to round (see [`AdditionRounds`]). Each round of a scheme is a
/// whole run of it (fresh table and readers) with short phases after the additions.
fn addition_rounds(cfg: &Config, progress: &Progress) -> Result<Vec<AdditionRounds>> {
    let short = Config {
        warmup: cfg.warmup.min(Duration::from_millis(50)),
        phase: Duration::from_millis(10),
        ..cfg.clone()
    };
    let ids = round_schemes();
    let task = progress.task(&format!("{NAME} rounds"), (cfg.rounds * ids.len()) as u64);
    let mut wrong = vec![0u64; ids.len()];
    let p50s = rounds_of(cfg.rounds, &task, "additions", &ids, SchemeId::id, |id| {
        let result = run_scheme(&short, id)?;
        let at = ids.iter().position(|&i| i == id).unwrap_or(0);
        wrong[at] += result.wrong_verdicts;
        Ok(result.update_us.p50)
    })?;
    task.finish();
    let base = ids.iter().position(|&id| id == SchemeId::ALL[0]);
    Ok(ids
        .into_iter()
        .zip(with_ratios(p50s, base))
        .zip(wrong)
        .map(
            |((scheme, (p50_us, vs_baseline)), wrong_verdicts)| AdditionRounds {
                scheme,
                p50_us,
                vs_baseline,
                wrong_verdicts,
            },
        )
        .collect())
}

fn run_scheme(cfg: &Config, id: SchemeId) -> Result<SchemeResult> {
    let table = id.build((0..cfg.rules).map(Rule::initial).collect())?;
    let table: &dyn RuleTable = &*table;
    let counters: Vec<Counter> = (0..cfg.readers).map(|_| Counter::default()).collect();
    let wrong = AtomicU64::new(0);
    let stop = StopFlag::new();
    let mut update_times = Vec::with_capacity(cfg.additions);
    let mut sustained_updates = 0u64;
    let phases = std::thread::scope(|s| -> Result<_> {
        let _release = OnExit(|| stop.stop());
        let mut handles = Vec::new();
        for (t, counter) in counters.iter().enumerate() {
            let packets = packets(cfg.rules, t);
            let (stop, wrong) = (&stop, &wrong);
            handles.push(spawn_scoped(s, &format!("nf-reader{t}"), move || {
                reader(table, &packets, counter, stop, wrong)
            })?);
        }
        std::thread::sleep(cfg.warmup);
        let phases = writer_phases(
            cfg,
            table,
            &counters,
            &mut update_times,
            &mut sustained_updates,
        );
        stop.stop();
        for h in handles {
            join(h)?;
        }
        Ok(phases)
    })?;
    let final_rules = table.finish();
    let [(additions, window), (sustained, sustained_len), (alone, alone_len)] = phases;
    Ok(SchemeResult {
        scheme: id,
        description: id.describe(),
        update_ms_total: measure::ms(window),
        update_us: Summary::of(&update_times),
        reader_lookups_per_s: LookupRates {
            during_writer: per_sec(sustained, sustained_len),
            alone: per_sec(alone, alone_len),
            during_additions: per_sec(additions, window),
        },
        writer_window_ms: measure::ms(window),
        sustained_updates_per_s: per_sec(sustained_updates, sustained_len),
        vs_baseline: Ratios {
            update_time: None,
            lookups_during_writer: None,
            lookups_alone: None,
        },
        tables_replaced: table.replaced(),
        tables_freed: table.freed(),
        final_rules,
        wrong_verdicts: wrong.load(Relaxed),
    })
}

/// How many times its length a phase may stretch while the readers have not run.
const PHASE_STRETCH: u32 = 50;

/// The writer's three phases while the readers run: the seed's timed additions (their times
/// into `update_times`), sustained updates (an addition and a removal at a time, as fast as
/// the scheme lets the writer go; counted in `sustained_updates`), then the readers alone.
/// Returns each phase's lookups and length.
fn writer_phases(
    cfg: &Config,
    table: &dyn RuleTable,
    counters: &[Counter],
    update_times: &mut Vec<f64>,
    sustained_updates: &mut u64,
) -> [(u64, Duration); 3] {
    let (c0, t0) = (measure::sum(counters), Instant::now());
    for i in 0..cfg.additions {
        let start = Instant::now();
        table.update(Op::Append(Rule::added(i + 1)));
        update_times.push(measure::us(start.elapsed()));
    }
    let (c1, t1) = (measure::sum(counters), Instant::now());
    let extra = Rule::added(cfg.additions + 1);
    // Each phase lasts `cfg.phase`, and longer (up to `PHASE_STRETCH` times) while the readers
    // have not run at all: on a loaded machine they may get no CPU in a short phase, and a
    // rate of zero would then describe the scheduler, not the scheme. The rates divide by the
    // phase's real length.
    let idle = |since: u64| measure::sum(counters) == since;
    while t1.elapsed() < cfg.phase
        || *sustained_updates % 2 == 1
        || (idle(c1) && t1.elapsed() < cfg.phase * PHASE_STRETCH)
    {
        let op = if *sustained_updates % 2 == 0 {
            Op::Append(extra)
        } else {
            Op::RemoveLast
        };
        table.update(op);
        *sustained_updates += 1;
    }
    let (c2, t2) = (measure::sum(counters), Instant::now());
    std::thread::sleep(cfg.phase);
    while idle(c2) && t2.elapsed() < cfg.phase * PHASE_STRETCH {
        std::thread::sleep(cfg.phase / 10);
    }
    let (c3, t3) = (measure::sum(counters), Instant::now());
    [(c1 - c0, t1 - t0), (c2 - c1, t2 - t1), (c3 - c2, t3 - t2)]
}

fn reader(
    table: &dyn RuleTable,
    packets: &[(Packet, u8)],
    counter: &Counter,
    stop: &StopFlag,
    wrong: &AtomicU64,
) {
    let mask = packets.len() - 1;
    let (mut n, mut i, mut bad) = (0u64, 0usize, 0u64);
    while !stop.stopped() {
        for _ in 0..16 {
            let (p, expected) = &packets[i];
            if table.classify(black_box(p)) != *expected {
                bad += 1;
            }
            i = (i + 1) & mask;
        }
        n += 16;
        counter.publish(n);
    }
    wrong.fetch_add(bad, Relaxed);
}
