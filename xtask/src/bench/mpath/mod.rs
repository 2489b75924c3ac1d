//! `cargo xtask bench mpath`: the tuner against every static configuration
//! of the knobs the kernel honours, scenario by scenario, in the VM
//! testbed (docs/benchmarks/README.md).
//!
//! Each scenario boots its testbed once (per path count or cap model) and
//! measures every configuration in that boot: the static ones in rounds
//! (each round runs every configuration once, so drift is shared), the
//! daemon after the first round (reset to the map's defaults, started in
//! tune mode under the workload, measured once its decision log has been
//! quiet for a while). A point is one fio run; the median of the repeats
//! is reported. Throughput, IOPS and p99 latency come from fio's JSON;
//! request size and merges at the dm device (and at the paths) from
//! `/sys/block/*/stat` deltas around the run, and each path's SCSI
//! commands from `device/iorequest_cnt` (a path's stat counts clones that
//! bounced off a full path as I/Os).
//!
//! The modules: `scenarios`, `marginal`, `openloop` and `beside` (what
//! each scenario runs; `beside` also hands the map to multipathd and
//! back),
//! `compare` (statics against the daemon, round by round), `measure` (one
//! fio run and the block counters around it), `rig` (the testbed's map
//! and the daemon in the guest), `report` (rows, targets, the table and
//! the JSON), `statics` (the static configurations), `opts` (run
//! lengths), `chart` (the PNG).
use std::time::Instant;

use anyhow::{Result, bail};

use opts::Opts;

mod beside;
mod chart;
mod compare;
mod marginal;
mod measure;
mod openloop;
mod opts;
mod report;
mod rig;
mod scenarios;
mod statics;
mod toggled;

#[derive(clap::Args)]
pub struct Args {
    /// Scenario to run (repeatable; default all): stream, merge, asym,
    /// switch, overhead, repeat, marginal, handover, openloop.
    #[arg(long = "scenario")]
    scenario: Vec<String>,
    /// Short runs (fio 3 s a point, one repeat, 1 s tuner windows, short
    /// phases, fewer grid points and cases): every
    /// scenario in about 10 minutes on 2 cores.
    #[arg(long)]
    quick: bool,
    /// Repeats per point (default 3, 1 with --quick).
    #[arg(long)]
    reps: Option<usize>,
}

pub const SCENARIOS: [&str; 9] = [
    "asym", "stream", "merge", "switch", "overhead", "repeat", "marginal", "handover", "openloop",
];

pub fn run(args: Args) -> Result<()> {
    let quick = args.quick;
    let o = Opts::new(quick, args.reps);
    let names: Vec<String> = if args.scenario.is_empty() {
        SCENARIOS.iter().map(|s| s.to_string()).collect()
    } else {
        args.scenario.clone()
    };
    for n in &names {
        if !SCENARIOS.contains(&n.as_str()) {
            bail!("unknown scenario {n:?} (one of {})", SCENARIOS.join(", "));
        }
    }
    let t0 = Instant::now();
    let mut times = vec![];
    for n in &names {
        let t = Instant::now();
        let rep = match n.as_str() {
            "stream" => scenarios::stream(&o)?,
            "merge" => scenarios::merge(&o)?,
            "asym" => scenarios::asym(&o)?,
            "switch" => scenarios::switch(&o)?,
            "overhead" => scenarios::overhead(&o)?,
            "repeat" => scenarios::repeat(&o)?,
            "marginal" => marginal::run(&o)?,
            "handover" => beside::handover(&o)?,
            "openloop" => openloop::run(&o)?,
            _ => unreachable!(),
        };
        let secs = t.elapsed().as_secs_f64();
        rep.finish(&o, secs)?;
        times.push((n.clone(), secs));
    }
    let total = t0.elapsed().as_secs_f64();
    println!(
        "\nbench mpath{}: {} in {:.0} s ({})",
        if quick { " --quick" } else { "" },
        names.join(", "),
        total,
        times
            .iter()
            .map(|(n, s)| format!("{n} {s:.0} s"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}
