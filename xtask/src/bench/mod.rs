//! `cargo xtask bench ...`: figures measured side by side in one run,
//! printed as a table and written to `target/bench/NAME.json`; with
//! `--write-docs` (or `cargo xtask bench docs` later) also rendered into
//! `docs/benchmarks/NAME.md` (see [`crate::benchdoc`]).
use std::sync::Mutex;

use anyhow::{Context, Result};
use clap::Subcommand;
use pathpilot_testbed::dirs::workspace_root;

use crate::benchdoc;

mod floor;
mod mpath;
mod observer;
mod reload;
mod scale;

#[derive(clap::Args)]
pub struct Args {
    /// Also render the run's latest table into its page,
    /// docs/benchmarks/NAME.md (between the page's bench:latest markers).
    #[arg(long, global = true)]
    write_docs: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// The observer's cost: fio 4 KiB random reads on a page-cache-backed
    /// loop device with the probes attached and detached, alternated.
    Observer(observer::Args),
    /// The stall of a table reload (reader's worst latency across it):
    /// pathpilot's ioctls vs dmsetup, idle / QD4 / QD16, in the VM.
    Reload(reload::Args),
    /// The tuner against every static configuration, in the VM testbed,
    /// scenario by scenario (asym, stream, merge, switch, overhead,
    /// repeat, marginal): tables, target/bench/NAME.json and .png.
    Mpath(mpath::Args),
    /// The daemon's own cost at a SAN host's scale (16 LUNs x 4 paths in
    /// the VM), idle and under load, against multipathd on the same LUNs.
    Scale(scale::Args),
    /// Render the latest run of each bench named (default: every one with
    /// a target/bench/NAME.json) into docs/benchmarks/NAME.md.
    Docs(DocsArgs),
    /// Empty programs on the observer's tracepoints, held until
    /// interrupted: the floor the benches measure pathpilot against.
    #[command(hide = true)]
    FloorProbes(floor::Args),
}

#[derive(clap::Args)]
pub struct DocsArgs {
    /// Benches or scenarios (asym, stream, merge, switch, overhead, repeat,
    /// marginal, observer, reload, scale).
    names: Vec<String>,
}

pub fn run(a: Args) -> Result<()> {
    match a.cmd {
        Cmd::Observer(a) => observer::run(a),
        Cmd::Reload(a) => reload::run(a),
        Cmd::Mpath(a) => mpath::run(a),
        Cmd::Scale(a) => scale::run(a),
        Cmd::Docs(d) => {
            let names = if d.names.is_empty() {
                benchdoc::PAGES
                    .iter()
                    .filter(|n| benchdoc::json_path(n).is_file())
                    .map(|n| n.to_string())
                    .collect()
            } else {
                d.names
            };
            return write_docs(&names);
        }
        Cmd::FloorProbes(a) => floor::run(a),
    }?;
    if a.write_docs {
        let names = SAVED.lock().map(|v| v.clone()).unwrap_or_default();
        write_docs(&names)?;
    }
    Ok(())
}

/// The benches saved in this run, for `--write-docs`.
static SAVED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Renders each bench's latest JSON into its page.
fn write_docs(names: &[String]) -> Result<()> {
    for name in names {
        if !benchdoc::PAGES.contains(&name.as_str()) {
            anyhow::bail!(
                "no page for {name:?} (one of {})",
                benchdoc::PAGES.join(", ")
            );
        }
        let json = benchdoc::json_path(name);
        let v: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(&json).with_context(|| format!("{}", json.display()))?,
        )
        .with_context(|| format!("{}", json.display()))?;
        let page = benchdoc::page_path(name);
        let text = std::fs::read_to_string(&page).with_context(|| format!("{}", page.display()))?;
        let new = benchdoc::splice(&text, &benchdoc::render(name, &v)?)
            .with_context(|| format!("{}", page.display()))?;
        std::fs::write(&page, new)?;
        println!(
            "wrote {}",
            page.strip_prefix(workspace_root())
                .unwrap_or(&page)
                .display()
        );
    }
    Ok(())
}

/// A host directory shared with the guest (a binary to run there),
/// removed however the bench ends.
pub struct Share(pub std::path::PathBuf);

impl Share {
    /// A new empty directory under the temporary directory.
    pub fn new(prefix: &str) -> Result<Self> {
        let dir = Share(std::env::temp_dir().join(format!("{prefix}-{}", std::process::id())));
        std::fs::create_dir_all(&dir.0)?;
        Ok(dir)
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes a benchmark's JSON next to the others, with the date, the
/// machine and the command line under `"run"`.
pub fn save(name: &str, value: &serde_json::Value) -> Result<std::path::PathBuf> {
    let dir = workspace_root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{name}.json"));
    let mut value = value.clone();
    if let Some(m) = value.as_object_mut() {
        m.insert("run".into(), benchdoc::run_info());
    }
    std::fs::write(&path, serde_json::to_string_pretty(&value)? + "\n")?;
    if let Ok(mut v) = SAVED.lock() {
        v.push(name.to_string());
    }
    Ok(path)
}

/// One eBPF program as the kernel accounts it: (name, run ns, runs).
pub type ProgramReading = (String, u64, u64);

/// What programs cost over a span, from their readings before and after
/// it (keyed so that programs of the same name stay apart) and the I/Os
/// done in it: eBPF ns per I/O in all, and per program that ran, by name,
/// (ns per run, runs per I/O).
pub fn program_costs<K: Ord>(
    before: &std::collections::BTreeMap<K, ProgramReading>,
    after: &std::collections::BTreeMap<K, ProgramReading>,
    ios: u64,
) -> (f64, std::collections::BTreeMap<String, (f64, f64)>) {
    let ios = ios.max(1) as f64;
    let mut total = 0u64;
    let mut programs = std::collections::BTreeMap::new();
    for (k, (name, t1, c1)) in after {
        let (t0, c0) = before.get(k).map_or((0, 0), |(_, t, c)| (*t, *c));
        let (dt, dc) = (t1.saturating_sub(t0), c1.saturating_sub(c0));
        total += dt;
        if dc > 0 {
            programs.insert(name.clone(), (dt as f64 / dc as f64, dc as f64 / ios));
        }
    }
    (total as f64 / ios, programs)
}

/// What a tool costs over paired rounds, in percent of the bare figure:
/// the mean of the pairs' losses and the half-width of its 95% confidence
/// interval (Student's t), so that a verdict is given only when the
/// interval is on one side of the target.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Loss {
    pub mean: f64,
    pub half_width: f64,
    pub pairs: usize,
}

impl Loss {
    /// `bare[i]` beside `with[i]`, in any unit where more is better.
    pub fn of(bare: &[f64], with: &[f64]) -> Loss {
        let v: Vec<f64> = bare
            .iter()
            .zip(with)
            .map(|(b, w)| (1.0 - w / b) * 100.0)
            .collect();
        let n = v.len();
        let mean = v.iter().sum::<f64>() / n.max(1) as f64;
        let half_width = if n < 2 {
            f64::INFINITY
        } else {
            let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            t95(n - 1) * (var / n as f64).sqrt()
        };
        Loss {
            mean,
            half_width,
            pairs: n,
        }
    }

    /// Whether the tool measurably costs anything: the interval above 0.
    pub fn measurable(&self) -> bool {
        self.mean - self.half_width > 0.0
    }

    /// Met (`Some(true)`) when the whole interval is within `target`,
    /// missed when it is all beyond it, `None` (inconclusive: measure
    /// more) when it straddles it.
    pub fn within(&self, target: f64) -> Option<bool> {
        if self.mean + self.half_width <= target {
            Some(true)
        } else if self.mean - self.half_width > target {
            Some(false)
        } else {
            None
        }
    }
}

/// Student's t for a two-sided 95% interval, rounded up (safe side).
fn t95(df: usize) -> f64 {
    const T: [f64; 10] = [12.71, 4.31, 3.19, 2.78, 2.58, 2.45, 2.37, 2.31, 2.27, 2.23];
    match df {
        0 => f64::INFINITY,
        1..=10 => T[df - 1],
        11..=20 => 2.2,
        21..=30 => 2.09,
        _ => 2.04,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_costs_are_the_differences_per_run_and_per_io() {
        let r = |n: &str, ns, runs| (n.to_string(), ns, runs);
        let before = [(1, r("issue", 1_000, 10)), (2, r("complete", 500, 10))].into();
        // A program loaded during the span counts from zero; one that did
        // not run is left out.
        let after = [
            (1, r("issue", 21_000, 110)),
            (2, r("complete", 500, 10)),
            (3, r("split", 600, 2)),
        ]
        .into();
        let (total, each) = program_costs(&before, &after, 100);
        assert_eq!(total, 206.0);
        assert_eq!(each.len(), 2);
        assert_eq!(each["issue"], (200.0, 1.0));
        assert_eq!(each["split"], (300.0, 0.02));
    }

    #[test]
    fn a_loss_is_judged_only_when_its_interval_is_on_one_side() {
        let l = Loss::of(&[100.0, 100.0, 100.0], &[90.0, 91.0, 89.0]);
        assert!((l.mean - 10.0).abs() < 1e-9 && l.pairs == 3);
        // sd 1, t(2) 4.31: 10 +- 2.5.
        assert!((l.half_width - 4.31 / 3f64.sqrt()).abs() < 1e-9);
        assert!(l.measurable());
        assert_eq!(l.within(2.0), Some(false));
        assert_eq!(l.within(15.0), Some(true));
        assert_eq!(l.within(11.0), None, "11 is inside 10 +- 2.5");
        let l = Loss::of(&[100.0, 100.0, 100.0], &[99.0, 104.0, 98.0]);
        assert!(!l.measurable(), "a spread of 6 points around a loss of 1");
        assert_eq!(l.within(2.0), None);
        let l = Loss::of(&[100.0, 100.0, 100.0], &[101.0, 102.0, 101.0]);
        assert!(l.mean < 0.0 && !l.measurable(), "faster with the tool");
        assert_eq!(l.within(2.0), Some(true), "no cost is within any target");
        let l = Loss::of(&[100.0], &[50.0]);
        assert_eq!(l.within(2.0), None, "one pair says nothing");
    }
}
