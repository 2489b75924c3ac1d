//! `pathpilot set TARGET KNOB=VALUE...`: block-layer knobs of a map
//! (`nr_requests`, `scheduler`, `max_sectors_kb` on its dm device) or of a
//! path (`queue_depth`; on a map it applies to every path). Each write is
//! read back and reported as the kernel kept it.
use anyhow::{Result, bail};
use clap::Args as ClapArgs;

use crate::{
    blockdev::{BlockDev, display_name},
    cli::UsageError,
    dm::{Dm, DmError},
    sysfs_knobs::{self, Applied, Outcome, Setting},
};

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// A map (`mpatha`) or a path device (`sdb`, `/dev/sdb`, `8:16`).
    pub target: String,
    /// `nr_requests=N`, `scheduler=NAME`, `max_sectors_kb=N`, `queue_depth=N`.
    #[arg(required = true, value_parser = parse_setting)]
    pub settings: Vec<Setting>,
    #[arg(long)]
    pub json: bool,
}

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

pub fn run(args: Args) -> Result<()> {
    let target = resolve(&args.target)?;
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
