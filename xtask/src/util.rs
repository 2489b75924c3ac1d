//! Small process, path and figure helpers shared by the xtask commands
//! and the VM tests.
use std::path::PathBuf;

use anyhow::{Context, Result, bail};

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent directory")
        .to_path_buf()
}

/// `~/.cache/pathpilot`, where tools and the testbed images are kept
/// between runs (outside the clone, so a fresh clone reuses them).
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PATHPILOT_CACHE") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/pathpilot")
}

/// Runs a command, inheriting stdio; fails with the command line on a
/// non-zero exit.
pub fn run(cmd: &mut std::process::Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let st = cmd
        .status()
        .with_context(|| format!("cannot start {shown}"))?;
    if !st.success() {
        bail!("{shown} failed: {st}");
    }
    Ok(())
}

/// Runs a command and returns its stdout; fails with stderr on non-zero exit.
pub fn output(cmd: &mut std::process::Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .with_context(|| format!("cannot start {shown}"))?;
    if !out.status.success() {
        bail!(
            "{shown} failed: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The median (sorts `v`); NaN for none.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
