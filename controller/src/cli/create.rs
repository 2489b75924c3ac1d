//! `pathpilot create`: one multipath map per LUN, named and identified the
//! way multipath-tools does it (`mpatha`.., DM UUID `mpath-<wwid>`), with
//! the table multipath-tools would build for the array where its
//! configuration is followed (docs/multipath-conf.md).
use std::{collections::HashSet, path::PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args as ClapArgs;
use serde::Serialize;

use crate::{
    cli::{NotFoundError, UsageError, list, reload::parse_selector},
    config::{self, Config},
    discovery::{self, Filter, Lun, Rule, naming},
    dm::{
        self, Dm, multipathd,
        readback::{self, Readback},
    },
    mpath::{Feature, QueueMode, Selector},
    mpconf::{
        self, Effective, Sources, lun as mplun,
        plan::{self, Difference, Own, Plan},
        select::{Origin, Setting},
    },
};

#[derive(ClapArgs, Debug)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["wwid", "all"])))]
pub struct Args {
    /// The LUN to map, by WWID (as `multipath -ll` shows it).
    #[arg(long)]
    pub wwid: Option<String>,
    /// Every LUN found that has no map yet.
    #[arg(long)]
    pub all: bool,
    /// Path selector; default multipath-tools' for the array where its
    /// configuration is followed, else service-time.
    #[arg(long, value_parser = parse_selector)]
    pub selector: Option<Selector>,
    /// Features, comma-separated: queue_if_no_path, pg_init_retries=N,
    /// pg_init_delay_msecs=N, queue_mode=bio|rq|mq, retain_attached_hw_handler.
    #[arg(long, value_parser = parse_features)]
    pub features: Option<Features>,
    /// Map name (one LUN only); default the first free mpathX.
    #[arg(long)]
    pub alias: Option<String>,
    /// Exclude devices: wwid=REGEX, devnode=REGEX, device=VENDOR[/PRODUCT],
    /// property=REGEX, protocol=REGEX (multipath.conf blacklist; repeatable).
    #[arg(long, value_parser = Rule::parse)]
    pub deny: Vec<Rule>,
    /// Exceptions to --deny, same forms (blacklist_exceptions; repeatable).
    #[arg(long, value_parser = Rule::parse)]
    pub allow: Vec<Rule>,
    /// Follow multipath-tools' configuration (multipath.conf, its
    /// per-array table) or ignore it; default the config file's
    /// [maps] follow_multipath_conf, else follow where it is installed.
    #[arg(long, value_parser = ["follow", "ignore"])]
    pub multipath_conf: Option<String>,
    /// pathpilot's configuration file, for [maps] follow_multipath_conf
    /// (default /etc/pathpilot/config.toml, if present).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Show what would be created and how it compares with what
    /// multipath-tools would build; create nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Create even though multipathd runs.
    #[arg(long)]
    pub ignore_multipathd: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Features(pub Vec<Feature>);

pub fn parse_features(s: &str) -> Result<Features, String> {
    let mut v = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, val) = match item.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (item, None),
        };
        let num = |v: Option<&str>, max: u32| -> Result<u32, String> {
            let v = v.ok_or_else(|| format!("{name} needs a value ({name}=N)"))?;
            v.parse::<u32>()
                .ok()
                .filter(|n| *n <= max)
                .ok_or_else(|| format!("{name}={v}: expected 0..={max}"))
        };
        let f = match name {
            "queue_if_no_path" => Feature::QueueIfNoPath,
            "retain_attached_hw_handler" => Feature::RetainAttachedHwHandler,
            "pg_init_retries" => Feature::PgInitRetries(num(val, 50)?),
            "pg_init_delay_msecs" => Feature::PgInitDelayMsecs(num(val, 60000)?),
            "queue_mode" => Feature::QueueMode(match val {
                Some("bio") => QueueMode::Bio,
                Some("rq") => QueueMode::Rq,
                Some("mq") => QueueMode::Mq,
                _ => return Err("queue_mode takes bio, rq or mq".into()),
            }),
            _ => {
                return Err(format!(
                    "unknown feature '{name}' (queue_if_no_path, pg_init_retries=N, pg_init_delay_msecs=N, queue_mode=bio|rq|mq, retain_attached_hw_handler)"
                ));
            }
        };
        if val.is_some() && matches!(f, Feature::QueueIfNoPath | Feature::RetainAttachedHwHandler) {
            return Err(format!("{name} takes no value"));
        }
        v.push(f);
    }
    Ok(Features(v))
}

#[derive(Debug, Serialize)]
pub struct Created {
    pub name: String,
    pub wwid: String,
    pub uuid: String,
    /// `VENDOR,PRODUCT` of its first path.
    pub device: String,
    pub table: String,
    /// Where the name came from, when multipath-tools' configuration chose it.
    pub name_origin: Option<String>,
    /// The tables and their differences (`theirs` when multipath-tools'
    /// configuration is followed).
    pub plan: Plan,
    /// What `multipath -d` says it would load (dry runs, where the binary
    /// is installed).
    pub multipath_d: Option<MultipathD>,
    /// Absent on a dry run.
    pub readback: Option<Readback>,
    pub map: Option<list::MapView>,
}

/// `multipath -d`'s table for the LUN, compared.
#[derive(Debug, Serialize)]
pub struct MultipathD {
    pub table: Option<String>,
    /// Where pathpilot's table differs from it.
    pub differs: Vec<Difference>,
    /// Where pathpilot's reading of multipath-tools' configuration differs
    /// from it (nothing, when pathpilot reads it right).
    pub misread: Vec<String>,
    pub note: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Skipped {
    pub wwid: String,
    pub reason: String,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub dry_run: bool,
    /// Where multipath-tools' configuration was read from, when followed.
    pub multipath_conf: Option<String>,
    pub created: Vec<Created>,
    pub skipped: Vec<Skipped>,
    pub excluded: Vec<discovery::Excluded>,
}

fn own(selector: Option<Selector>, features: Option<Vec<Feature>>) -> Own {
    let flag = |how: &str| Origin::Pathpilot { how: how.into() };
    Own {
        selector: selector.map(|value| Setting {
            value,
            origin: flag("--selector"),
        }),
        features: features.map(|value| Setting {
            value,
            origin: flag("--features"),
        }),
        ..Own::default()
    }
}

/// Whether to follow multipath-tools' configuration, and it read.
fn multipath_conf(args: &Args) -> Result<Option<(Sources, Effective)>> {
    let src = Sources::system();
    let follow = match args.multipath_conf.as_deref() {
        Some(f) => f == "follow",
        None => {
            let (path, explicit) = match &args.config {
                Some(p) => (p.clone(), true),
                None => (PathBuf::from(config::DEFAULT_PATH), false),
            };
            Config::load(&path, explicit)
                .map_err(|e| UsageError(e.to_string()))?
                .follow_multipath_conf(src.installed())
        }
    };
    if !follow {
        return Ok(None);
    }
    let eff = mpconf::read(&src).map_err(|e| UsageError(e.to_string()))?;
    Ok(Some((src, eff)))
}

/// `multipath -d`'s table for the LUN, compared with pathpilot's and with
/// pathpilot's reading of the configuration.
fn multipath_d(src: &Sources, lun: &Lun, plan: &Plan) -> Option<MultipathD> {
    let bin = src.binary.as_ref()?;
    let dev = format!("/dev/{}", lun.paths.first()?.name);
    let d = match mpconf::dry_run(bin, &dev, &lun.wwid, plan.ours.length) {
        Err(e) => MultipathD {
            table: None,
            differs: vec![],
            misread: vec![],
            note: Some(e),
        },
        Ok(None) => MultipathD {
            table: None,
            differs: vec![],
            misread: vec![],
            note: Some(format!(
                "multipath -d {dev} would make no map for {} (a path udev has not \
                 initialised, or its own blacklist or find_multipaths)",
                lun.wwid
            )),
        },
        Ok(Some(t)) => MultipathD {
            table: Some(t.render_line()),
            differs: plan::differences(&plan.ours, &t)
                .into_iter()
                .map(|(aspect, ours, theirs)| {
                    let known = plan.differences.iter().find(|d| d.aspect == aspect);
                    Difference {
                        why: known.map_or("not explained by any setting".into(), |d| d.why.clone()),
                        deliberate: known.is_some_and(|d| d.deliberate),
                        aspect,
                        ours,
                        theirs,
                    }
                })
                .collect(),
            misread: plan
                .theirs
                .as_ref()
                .map(|mine| {
                    plan::differences(mine, &t)
                        .into_iter()
                        .map(|(a, mine, real)| {
                            format!("{a}: read as {mine}, multipath -d has {real}")
                        })
                        .collect()
                })
                .unwrap_or_default(),
            note: None,
        },
    };
    Some(d)
}

pub fn run(args: Args) -> Result<()> {
    if args.alias.is_some() && args.all {
        bail!(UsageError(
            "--alias names one map; use it with --wwid".into()
        ));
    }
    let mp = multipath_conf(&args)?;
    let eff = mp.as_ref().map(|(_, e)| e);
    let (mut deny, mut allow) = (args.deny.clone(), args.allow.clone());
    if let Some(e) = eff {
        let (d, a) = mplun::filter_rules(e).map_err(UsageError)?;
        deny.extend(d);
        allow.extend(a);
    }
    let filter = Filter::new(deny, allow);
    let scan = discovery::scan(&filter);
    let dm = Dm::open()?;
    let existing = dm.list()?;
    let mut in_use: HashSet<String> = existing.iter().map(|e| e.name.clone()).collect();
    let mut mapped: Vec<(String, String)> = Vec::new();
    for e in &existing {
        if let Ok(i) = dm.info(&e.name)
            && let Some(w) = i.uuid.as_deref().and_then(|u| u.strip_prefix("mpath-"))
        {
            mapped.push((w.to_string(), e.name.clone()));
        }
    }
    let luns: Vec<&Lun> = match &args.wwid {
        Some(w) => vec![scan.lun(w).ok_or_else(|| {
            NotFoundError(format!(
                "no usable paths with WWID {w} (found: {})",
                if scan.luns.is_empty() {
                    "none".to_string()
                } else {
                    scan.luns
                        .iter()
                        .map(|l| l.wwid.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ))
        })?],
        None => scan.luns.iter().collect(),
    };
    if !args.dry_run
        && let Some(how) = multipathd::running()
        && !args.ignore_multipathd
    {
        bail!(UsageError(format!(
            "multipathd is running ({how}) and owns map creation; stop it or pass --ignore-multipathd"
        )));
    }
    let own = own(args.selector.clone(), args.features.clone().map(|f| f.0));
    let known = eff.map(mplun::known_wwids).unwrap_or_default();
    let mut report = Report {
        dry_run: args.dry_run,
        multipath_conf: mp.as_ref().map(|(src, _)| src.describe()),
        created: Vec::new(),
        skipped: Vec::new(),
        excluded: scan.excluded.clone(),
    };
    // Plan every map first: a LUN that cannot be planned changes nothing.
    let mut planned = vec![];
    for lun in luns {
        if let Some((_, m)) = mapped.iter().find(|(w, _)| *w == lun.wwid) {
            report.skipped.push(Skipped {
                wwid: lun.wwid.clone(),
                reason: format!("already mapped as {m}"),
            });
            continue;
        }
        let held = lun.holders();
        if !held.is_empty() {
            report.skipped.push(Skipped {
                wwid: lun.wwid.clone(),
                reason: format!("paths held by {}", held.join(", ")),
            });
            continue;
        }
        let p = mplun::plan_lun(lun, eff, &own).map_err(UsageError)?;
        // multipath-tools' find_multipaths decides which LUNs `--all`
        // maps, where the admin set it; a LUN named with --wwid is mapped
        // as `multipath DEVICE` maps it.
        if args.all
            && let Some(sel) = &p.selection
            && sel.find_multipaths.origin.specific()
            && let Err(why) = mplun::wanted(
                sel.find_multipaths.value,
                lun.paths.len(),
                known.contains(&lun.wwid),
            )
        {
            report.skipped.push(Skipped {
                wwid: lun.wwid.clone(),
                reason: format!("{why} ({})", sel.find_multipaths.origin),
            });
            continue;
        }
        planned.push((lun, p));
    }
    for (lun, p) in planned {
        let rule = match (eff, &p.selection) {
            (Some(e), Some(sel)) => Some(mplun::naming(sel, e)),
            _ => None,
        };
        let (name, name_origin) = match &args.alias {
            Some(a) => (a.clone(), None),
            None => mplun::name(
                &lun.wwid,
                rule.as_ref(),
                &in_use,
                &naming::system_bindings(),
            ),
        };
        if in_use.contains(&name) {
            bail!(dm::DmError::Exists(name));
        }
        let table = p.plan.ours.clone();
        let uuid = format!("mpath-{}", lun.wwid);
        let mut c = Created {
            name: name.clone(),
            wwid: lun.wwid.clone(),
            uuid: uuid.clone(),
            device: lun.vendor_model(),
            table: table.render_line(),
            name_origin,
            multipath_d: match (&mp, args.dry_run) {
                (Some((src, _)), true) => multipath_d(src, lun, &p.plan),
                _ => None,
            },
            plan: p.plan,
            readback: None,
            map: None,
        };
        if !args.dry_run {
            dm.create(&name, &uuid, &table)
                .with_context(|| format!("creating {name} for {}", lun.wwid))?;
            let applied = dm.multipath_table(&name)?;
            c.readback = Some(readback::compare(&table, &applied));
            c.map = list::view(&dm, &name)?;
        }
        in_use.insert(name);
        report.created.push(c);
    }
    let nothing = report.created.is_empty() && report.skipped.is_empty();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    if nothing {
        let why: Vec<String> = report
            .excluded
            .iter()
            .map(|e| format!("{}: {}", e.name, e.reason))
            .collect();
        bail!(NotFoundError(format!(
            "no LUNs to map{}",
            if why.is_empty() {
                String::new()
            } else {
                format!(" (excluded: {})", why.join("; "))
            }
        )));
    }
    Ok(())
}

/// The lines that say how a map compares with multipath-tools'.
fn comparison(c: &Created, out: &mut Vec<String>) {
    let p = &c.plan;
    let Some(theirs) = &p.theirs else {
        return;
    };
    if p.differences.is_empty() {
        out.push("  multipath-tools would build the same table".into());
    } else {
        out.push(format!("  multipath-tools: {}", theirs.render_line()));
        for d in &p.differences {
            out.push(format!(
                "  differs: {}{}",
                d.describe(),
                if d.deliberate {
                    ""
                } else {
                    " [not deliberate]"
                }
            ));
        }
    }
    if let Some(o) = &c.name_origin {
        out.push(format!("  name {}: {o}", c.name));
    }
    for s in &p.settings {
        out.push(format!(
            "  {} {}: {}{}",
            s.setting,
            s.value,
            s.origin,
            match (s.followed, s.setting.as_str()) {
                (_, "path_checker") => " (pathpilot's daemon checks paths by reading through them)",
                (_, "failback") => {
                    " (pathpilot's daemon fails back to the first group as soon as it is usable)"
                }
                (true, _) => "",
                (false, _) => " (not followed)",
            }
        ));
    }
    for n in &p.notes {
        out.push(format!("  note: {n}"));
    }
    if let Some(d) = &c.multipath_d {
        match (&d.table, &d.note) {
            (Some(_), _) if d.differs.is_empty() => {
                out.push("  multipath -d: the same table".into());
            }
            (Some(t), _) => {
                out.push(format!("  multipath -d: {t}"));
                for x in &d.differs {
                    out.push(format!("  multipath -d differs: {}", x.describe()));
                }
            }
            (None, Some(n)) => out.push(format!("  multipath -d: {n}")),
            (None, None) => {}
        }
        for m in &d.misread {
            out.push(format!(
                "  warning: pathpilot's reading of multipath-tools' configuration differs from multipath -d: {m}"
            ));
        }
    }
}

fn print_report(report: &Report) {
    if let Some(src) = &report.multipath_conf {
        println!("following multipath-tools' configuration: {src}");
    }
    for c in &report.created {
        let mut lines = vec![];
        if report.dry_run {
            println!(
                "would create {} ({}) {}: {}",
                c.name, c.wwid, c.device, c.table
            );
            comparison(c, &mut lines);
            for l in lines {
                println!("{l}");
            }
            continue;
        }
        println!("created {} ({})", c.name, c.wwid);
        for d in &c.plan.differences {
            println!("{}: differs from multipath-tools: {}", c.name, d.describe());
        }
        if let Some(rb) = &c.readback {
            for n in &rb.notes {
                println!("{}: {}", c.name, n.describe());
            }
        }
        if let Some(m) = &c.map {
            print!("{}", list::render(m));
        }
    }
    for s in &report.skipped {
        println!("skipped {}: {}", s.wwid, s.reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_syntax() {
        assert_eq!(
            parse_features("queue_if_no_path,pg_init_retries=5").unwrap(),
            Features(vec![Feature::QueueIfNoPath, Feature::PgInitRetries(5)])
        );
        assert!(parse_features("pg_init_retries=51").is_err());
        assert!(parse_features("pg_init_retries").is_err());
        assert!(parse_features("queue_if_no_path=1").is_err());
        assert!(
            parse_features("no_such")
                .unwrap_err()
                .contains("unknown feature")
        );
        assert_eq!(
            parse_features("queue_mode=bio").unwrap().0,
            vec![Feature::QueueMode(QueueMode::Bio)]
        );
    }
}
