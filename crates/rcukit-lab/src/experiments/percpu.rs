//! stub
use super::{Common, Outcome};
use crate::progress::Progress;
use anyhow::Result;

/// Name.
pub const NAME: &str = "percpu";

/// Settings.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Config {}
impl Config {
    /// Defaults.
    pub fn new(_c: &Common) -> Config { Config {} }
}
/// Flags.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Args {}
impl Args {
    /// Apply.
    pub fn apply(&self, _cfg: &mut Config) {}
}
/// Report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {}
/// Run.
pub fn run(_cfg: &Config, _p: &Progress) -> Result<Report> { anyhow::bail!("todo") }
/// Render.
pub fn render(_r: &Report) -> Result<Outcome> { anyhow::bail!("todo") }
