//! `pathpilot set TARGET KNOB=VALUE...`: block-layer knobs of a map
//! (`nr_requests`, `scheduler`, `max_sectors_kb` on its dm device) or of a
//! path (`queue_depth`; on a map it applies to every path). Each write is
//! read back and reported as the kernel kept it.
use anyhow::{Result, bail};
use clap::Args as ClapArgs;

use crate::{
    blockdev::{BlockDev, display_name},
    cli::{
        UsageError,
        path::map_of,
        route::{self, Via},
    },
    ctl::protocol::ControlRequest,
    dm::{Dm, DmError},
    sysfs_knobs::{self, Applied, Outcome, Setting},
    tuner::Knob as TunerKnob,
};

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// A map (`mpatha`) or a path device (`sdb`, `/dev/sdb`, `8:16`).
    pub target: String,
    /// `nr_requests=N`, `scheduler=NAME`, `max_sectors_kb=N`, `queue_depth=N`.
    #[arg(required_unless_present = "release", value_parser = parse_setting)]
    pub settings: Vec<Setting>,
    /// Hand the queue knobs (nr_requests, scheduler, max_sectors_kb,
    /// queue_depth) that an earlier `set` pinned back to the daemon's
    /// tuner; changes nothing else. Needs a running daemon.
    #[arg(long, conflicts_with = "settings")]
    pub release: bool,
    #[arg(long)]
    pub json: bool,
}

/// The knobs `set` sets (and pins, through the daemon).
pub const QUEUE_KNOBS: [TunerKnob; 4] = [
    TunerKnob::MaxSectorsKb,
    TunerKnob::NrRequests,
    TunerKnob::Scheduler,
    TunerKnob::QueueDepth,
];

fn parse_setting(s: &str) -> Result<Setting, String> {
    s.parse()
}

/// What a target names: a map (with its dm device and paths) or one path.
enum Target {
    Map {
        name: String,
        dm: String,
        paths: Vec<String>,
    },
    Path(String),
}

fn resolve(target: &str) -> Result<Target> {
    // A map name first: map names and kernel names do not collide (dm-N is
    // the kernel's, mpathX ours), and a map is what users mostly mean.
    let dmc = Dm::open();
    if let Ok(dmc) = &dmc {
        match dmc.info(target) {
            Ok(info) => return map_target(dmc, &info.name),
            Err(DmError::NoSuchMap(_) | DmError::BadName(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let bd = BlockDev::resolve(target)?;
    if bd.name.starts_with("dm-") {
        let dmc = dmc?;
        let Some(e) = dmc.list()?.into_iter().find(|e| e.dev == bd.dev) else {
            bail!(DmError::NoSuchMap(bd.name));
        };
        return map_target(&dmc, &e.name);
    }
    Ok(Target::Path(bd.name))
}

fn map_target(dmc: &Dm, name: &str) -> Result<Target> {
    let info = dmc.info(name)?;
    let t = dmc.multipath_table(name)?;
    Ok(Target::Map {
        name: name.to_string(),
        dm: info.kernel_name(),
        paths: t.paths().map(|p| display_name(p.dev)).collect(),
    })
}

/// The map a target belongs to: itself, or the map holding the path.
fn map_name(target: &Target) -> Result<Option<String>> {
    Ok(match target {
        Target::Map { name, .. } => Some(name.clone()),
        Target::Path(p) => {
            let dev = BlockDev::resolve(p)?.dev;
            match Dm::open() {
                Ok(dm) => map_of(&dm, dev)?,
                Err(_) => None,
            }
        }
    })
}

pub fn run(args: Args) -> Result<()> {
    let target = resolve(&args.target)?;
    if args.release {
        let Some(map) = map_name(&target)? else {
            bail!(UsageError(format!(
                "{} is not a map, nor a path of one: nothing is pinned",
                args.target
            )));
        };
        return crate::cli::reload::release(&map, &QUEUE_KNOBS, args.json);
    }
    // Check every setting against the target before writing any.
    for s in &args.settings {
        if let Target::Path(p) = &target
            && !s.knob.per_path()
        {
            bail!(UsageError(format!(
                "{} is a knob of the map's dm device, and {p} is a path; name the map instead",
                s.knob
            )));
        }
    }
    // One writer per map: through the daemon when it manages the map.
    let _lock = match map_name(&target)? {
        Some(map) => {
            let req = ControlRequest::Set {
                target: args.target.clone(),
                settings: args.settings.iter().map(|s| s.to_string()).collect(),
            };
            match route::change(&map, "pathpilot set", &req)? {
                Via::Daemon(data) => return report_daemon(&args, &map, data),
                Via::Here(lock) => Some(lock),
            }
        }
        None => None,
    };
    let mut results: Vec<Applied> = Vec::new();
    for s in &args.settings {
        let devices: Vec<String> = match (&target, s.knob.per_path()) {
            (Target::Map { paths, .. }, true) => paths.clone(),
            (Target::Map { dm, .. }, false) => vec![dm.clone()],
            (Target::Path(p), _) => vec![p.clone()],
        };
        for d in devices {
            let r = sysfs_knobs::write(&d, s.knob, &s.value)?;
            if !args.json {
                let label = match &target {
                    Target::Map { name, .. } => format!("{name} ({})", r.describe()),
                    Target::Path(_) => r.describe(),
                };
                println!("{label}");
            }
            results.push(r);
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    }
    let adjusted = results
        .iter()
        .filter(|r| r.outcome == Outcome::Adjusted)
        .count();
    if adjusted > 0 && !args.json {
        println!(
            "{adjusted} of {} writes were not kept as requested (see above)",
            results.len()
        );
    }
    Ok(())
}

/// Prints what the daemon applied, as the command does when it writes
/// itself, and what it pinned.
fn report_daemon(args: &Args, map: &str, data: serde_json::Value) -> Result<()> {
    let results: Vec<Applied> = serde_json::from_value(data["results"].clone())
        .map_err(|e| anyhow::anyhow!("the daemon's answer: {e}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
        return Ok(());
    }
    for r in &results {
        println!("{map} ({})", r.describe());
    }
    let pinned: Vec<&str> = data["pinned"]
        .as_array()
        .map(|v| v.iter().filter_map(|k| k.as_str()).collect())
        .unwrap_or_default();
    println!(
        "{map}: applied by the pathpilot daemon; pinned: {} (until `pathpilot set {map} --release`)",
        pinned.join(", ")
    );
    Ok(())
}
