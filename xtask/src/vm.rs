//! `cargo xtask vm ...` (see issue 3).
use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum Cmd {}

pub fn run(cmd: Cmd) -> Result<()> {
    match cmd {}
}
