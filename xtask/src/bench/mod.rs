//! `cargo xtask bench ...`: figures measured side by side in one run,
//! printed as a table and written to `target/bench/NAME.json`.
use anyhow::Result;
use clap::Subcommand;
use xtask::util::workspace_root;

mod mpath;
mod observer;
mod reload;
mod scale;

#[derive(Subcommand)]
pub enum Cmd {
    /// The observer's cost: fio 4 KiB random reads on a page-cache-backed
    /// loop device with the probes attached and detached, alternated.
    Observer(observer::Args),
    /// The stall of a table reload (reader's worst latency across it):
    /// pathpilot's ioctls vs dmsetup, idle / QD4 / QD16, in the VM.
    Reload(reload::Args),
    /// The seeds' experiments and the tuner against every static
    /// configuration, in the VM testbed (stream, merge, asym, switch,
    /// overhead, repeat, marginal): tables, target/bench/NAME.json and
    /// .png.
    Mpath(mpath::Args),
    /// The daemon's own cost at a SAN host's scale (16 LUNs x 4 paths in
    /// the VM), idle and under load, against multipathd on the same LUNs.
    Scale(scale::Args),
}

pub fn run(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Observer(a) => observer::run(a),
        Cmd::Reload(a) => reload::run(a),
        Cmd::Mpath(a) => mpath::run(a),
        Cmd::Scale(a) => scale::run(a),
    }
}

/// Writes a benchmark's JSON next to the others.
pub fn save(name: &str, value: &serde_json::Value) -> Result<std::path::PathBuf> {
    let dir = workspace_root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(value)? + "\n")?;
    Ok(path)
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
