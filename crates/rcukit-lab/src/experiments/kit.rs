//! What every experiment shares: the [`Experiment`] trait, the JSON [`Envelope`], the
//! [`Rendered`] output and the generic drivers that turn a config into an [`Outcome`].
//!
//! Adding an experiment is filling in a template: a folder `experiments/NAME/` with
//!
//! * `mod.rs`: the `Config` (defaults from [`Common`], `validate`), the clap `Args` (applied
//!   with [`override_fields!`](crate::override_fields)) and the `impl Experiment`;
//! * `schemes.rs`: the schemes, as one `SchemeId` enum (`ALL`, `id`, `describe`) with a `match`
//!   where the scheme's behaviour differs;
//! * `run.rs`: the workload and the measurements, returning `Envelope<Config, Body>`;
//! * `render.rs`: Markdown tables, the plot and the headlines, as [`Rendered`];
//!
//! and the seed's own figures in [`seeds`](super::seeds).

use super::{Common, Outcome};
use crate::env::Environment;
use crate::measure::Rounds;
use crate::progress::{Progress, Task};
use anyhow::Result;
use serde::Serialize;

/// One experiment: its names, settings, flags, measurements and rendering.
pub trait Experiment {
    /// File stem and subcommand name (`netns` → `netns.json`).
    const NAME: &'static str;
    /// Section title in the report.
    const TITLE: &'static str;
    /// The seeds it reproduces (empty for the peer comparisons).
    const SEEDS: &'static [&'static str];
    /// Every setting.
    type Config: Clone + Serialize;
    /// The subcommand's flags, overriding the config when the experiment runs alone.
    type Args: clap::Args;
    /// The full result, written as `NAME.json`.
    type Report: Serialize;

    /// Defaults for `common`.
    fn config(common: &Common) -> Self::Config;
    /// Apply the flags given on top of `cfg`.
    fn apply(args: &Self::Args, cfg: &mut Self::Config);
    /// Check `cfg`'s settings (bad ones are errors, before anything is measured or written).
    fn validate(cfg: &Self::Config) -> Result<()>;
    /// Validate `cfg` and measure.
    fn run(cfg: &Self::Config, progress: &Progress) -> Result<Self::Report>;
    /// Tables, plot and headlines.
    fn render(report: &Self::Report) -> Result<Rendered>;
}

/// What an experiment's renderer produces; [`outcome`] adds the names and the JSON.
#[derive(Clone, Debug, Default)]
pub struct Rendered {
    /// Markdown: the seed's figures beside ours, our tables, notes.
    pub markdown: String,
    /// The plot, if any.
    pub svg: Option<String>,
    /// One-line headline figures for the summary.
    pub headlines: Vec<String>,
}

/// The JSON report every experiment writes: what ran, where, with which settings, and the
/// experiment's own figures (`body`, flattened into the same object).
#[derive(Clone, Debug, Serialize)]
pub struct Envelope<C, B> {
    /// The experiment's name.
    pub experiment: &'static str,
    /// Seeds reproduced (left out of the JSON when there are none).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub seeds: &'static [&'static str],
    /// Where and how it ran.
    pub env: Environment,
    /// Settings.
    pub config: C,
    /// The figures.
    #[serde(flatten)]
    pub body: B,
}

impl<C, B> Envelope<C, B> {
    /// The envelope of experiment `E`, with `env` collected before measuring.
    pub fn new<E: Experiment>(env: Environment, config: C, body: B) -> Self {
        Envelope {
            experiment: E::NAME,
            seeds: E::SEEDS,
            env,
            config,
            body,
        }
    }
}

impl<C, B> std::ops::Deref for Envelope<C, B> {
    type Target = B;
    fn deref(&self) -> &B {
        &self.body
    }
}

/// Render `report` and wrap it with the experiment's names and JSON.
pub fn outcome<E: Experiment>(report: &E::Report) -> Result<Outcome> {
    let Rendered {
        markdown,
        svg,
        headlines,
    } = E::render(report)?;
    Ok(Outcome {
        name: E::NAME,
        title: E::TITLE.to_string(),
        seeds: E::SEEDS.join(", "),
        json: serde_json::to_value(report)?,
        markdown,
        svg,
        headlines,
    })
}

/// Run `E` with the default configuration for `common` and render it.
pub fn run_default<E: Experiment>(common: &Common, progress: &Progress) -> Result<Outcome> {
    outcome::<E>(&E::run(&E::config(common), progress)?)
}

/// The defaults for `common` with `args` applied on top, checked.
pub fn configure<E: Experiment>(common: &Common, args: &E::Args) -> Result<E::Config> {
    let mut cfg = E::config(common);
    E::apply(args, &mut cfg);
    E::validate(&cfg)?;
    Ok(cfg)
}

/// Run `E` with `cfg` (from [`configure`]) and render it.
pub fn run_configured<E: Experiment>(cfg: &E::Config, progress: &Progress) -> Result<Outcome> {
    outcome::<E>(&E::run(cfg, progress)?)
}

/// Copy every flag that was given (`Some`) into the config field of the same name:
/// `override_fields!(args => cfg; creators, duration)`.
#[macro_export]
/// List flags (`Vec`, empty when not given) go after `lists:`:
/// `override_fields!(args => cfg; work; lists: thread_counts)`.
macro_rules! override_fields {
    ($args:expr => $cfg:expr; $($field:ident),* $(,)?) => {
        $(
            if let Some(v) = &$args.$field {
                $cfg.$field = v.clone();
            }
        )*
    };
    ($args:expr => $cfg:expr; $($field:ident),* ; lists: $($list:ident),+ $(,)?) => {
        $crate::override_fields!($args => $cfg; $($field),*);
        $(
            if !$args.$list.is_empty() {
                $cfg.$list = $args.$list.clone();
            }
        )+
    };
}

/// Measure every scheme in `ids` in turn with `f`, showing progress as task `name`.
pub fn measure_each<I: Copy, R>(
    progress: &Progress,
    name: &str,
    ids: &[I],
    label: impl Fn(I) -> &'static str,
    mut f: impl FnMut(I) -> Result<R>,
) -> Result<Vec<R>> {
    let task = progress.task(name, ids.len() as u64);
    let mut out = Vec::with_capacity(ids.len());
    for &id in ids {
        task.message(label(id));
        out.push(f(id)?);
        task.inc();
    }
    task.finish();
    Ok(out)
}

/// Measure every one of `peers` once per round, `rounds` times, in an order rotated from
/// round to round (see [`one_round`]). Returns each peer's values, in the order of `peers`.
pub fn rounds_of<P: Copy>(
    rounds: usize,
    task: &Task,
    what: &str,
    peers: &[P],
    id: impl Fn(P) -> &'static str,
    mut measure: impl FnMut(P) -> Result<f64>,
) -> Result<Vec<Vec<f64>>> {
    let mut values = vec![Vec::with_capacity(rounds); peers.len()];
    for round in 0..rounds {
        let label = format!("{what}, round {}/{rounds}", round + 1);
        one_round(task, &label, peers, round, &id, &mut measure, &mut values)?;
    }
    Ok(values)
}

/// Measure every one of `peers` once, starting `round` peers further on (so that no peer
/// always runs first, or always right after the same one), and append each value to the
/// peer's list in `values`.
pub fn one_round<P: Copy, T>(
    task: &Task,
    label: &str,
    peers: &[P],
    round: usize,
    id: &impl Fn(P) -> &'static str,
    measure: &mut impl FnMut(P) -> Result<T>,
    values: &mut [Vec<T>],
) -> Result<()> {
    for k in 0..peers.len() {
        let at = (k + round) % peers.len();
        task.message(format!("{label}: {}", id(peers[at])));
        values[at].push(measure(peers[at])?);
        task.inc();
    }
    Ok(())
}

/// The rounds of every peer, and their round-by-round ratios to the peer at `base`.
pub fn with_ratios(values: Vec<Vec<f64>>, base: Option<usize>) -> Vec<(Rounds, Rounds)> {
    let rounds: Vec<Rounds> = values.into_iter().map(Rounds::of).collect();
    let base = base.map(|b| rounds[b].clone());
    rounds
        .into_iter()
        .map(|r| {
            let ratios = base.as_ref().map(|b| r.ratio_to(b)).unwrap_or_default();
            (r, ratios)
        })
        .collect()
}
