//! `pathpilot daemon`.
use std::path::PathBuf;

use anyhow::Result;

use crate::tuner::Mode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Configuration file (TOML; every key and its default is in
    /// pathpilot.conf(5) and docs/configuration.md).
    /// Without it, /etc/pathpilot/config.toml if it exists, else defaults.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// observe: change nothing; advise: log what would be tried; tune: act.
    /// Overrides the config's `mode`.
    #[arg(long)]
    pub mode: Option<Mode>,
    /// Move a state file that cannot be read (/run/pathpilot/maps.json)
    /// aside and start without it: the maps pathpilot made are then
    /// observed only until adopted, and the paths an operator failed are
    /// no longer held failed.
    #[arg(long)]
    pub reset_state: bool,
}

pub fn run(a: Args) -> Result<()> {
    crate::daemon::run::run(a.config, a.mode, a.reset_state)
}
