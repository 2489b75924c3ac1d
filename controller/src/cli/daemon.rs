//! `pathpilot daemon`.
use std::path::PathBuf;

use anyhow::Result;

use crate::tuner::Mode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Configuration file (TOML; every key and its default is in the README).
    /// Without it, /etc/pathpilot/config.toml if it exists, else defaults.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// observe: change nothing; advise: log what would be tried; tune: act.
    /// Overrides the config's `mode`.
    #[arg(long)]
    pub mode: Option<Mode>,
}

pub fn run(a: Args) -> Result<()> {
    crate::daemon::run::run(a.config, a.mode)
}
