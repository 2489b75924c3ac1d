//! `pathpilot create`: one multipath map per LUN, named and identified the
//! way multipath-tools does it (`mpatha`.., DM UUID `mpath-<wwid>`).
use std::collections::HashSet;

use anyhow::{Context, Result, bail};
use clap::Args as ClapArgs;
use serde::Serialize;

use crate::{
    cli::{NotFoundError, UsageError, list, reload::parse_selector},
    discovery::{self, Filter, Lun, Rule, naming},
    dm::{
        self, Dm, multipathd,
        readback::{self, Readback},
    },
    mpath::{Feature, MultipathTable, QueueMode, Selector},
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
    /// Path selector (default service-time, as multipath-tools).
    #[arg(long, value_parser = parse_selector, default_value = "service-time")]
    pub selector: Selector,
    /// Features, comma-separated: queue_if_no_path, pg_init_retries=N,
    /// pg_init_delay_msecs=N, queue_mode=bio|rq|mq, retain_attached_hw_handler.
    #[arg(long, value_parser = parse_features)]
    pub features: Option<Features>,
    /// Map name (one LUN only); default the first free mpathX.
    #[arg(long)]
    pub alias: Option<String>,
    /// Exclude devices: wwid=REGEX, devnode=REGEX, device=VENDOR[/PRODUCT]
    /// (multipath.conf blacklist; repeatable).
    #[arg(long, value_parser = Rule::parse)]
    pub deny: Vec<Rule>,
    /// Exceptions to --deny, same forms (blacklist_exceptions; repeatable).
    #[arg(long, value_parser = Rule::parse)]
    pub allow: Vec<Rule>,
    /// Show what would be created, create nothing.
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
    pub table: String,
    /// Absent on a dry run.
    pub readback: Option<Readback>,
    pub map: Option<list::MapView>,
}

#[derive(Debug, Serialize)]
pub struct Skipped {
    pub wwid: String,
    pub reason: String,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub dry_run: bool,
    pub created: Vec<Created>,
    pub skipped: Vec<Skipped>,
    pub excluded: Vec<discovery::Excluded>,
}

/// The table for a LUN: one group of all its paths, in disk order.
pub fn table_for(lun: &Lun, selector: &Selector, features: &[Feature]) -> Result<MultipathTable> {
    let sizes: HashSet<u64> = lun.paths.iter().map(|p| p.size_sectors).collect();
    if sizes.len() > 1 {
        bail!(
            "the paths of {} disagree on the size ({}): not one LUN?",
            lun.wwid,
            lun.paths
                .iter()
                .map(|p| format!("{} {}", p.name, p.size_sectors))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let size = lun.paths.first().map_or(0, |p| p.size_sectors);
    let devs: Vec<_> = lun.paths.iter().map(|p| p.dev).collect();
    let mut t = MultipathTable::new(size, &devs, selector.clone())
        .map_err(|e| UsageError(format!("{}: {e}", lun.wwid)))?;
    t.features = features.to_vec();
    Ok(t)
}

pub fn run(args: Args) -> Result<()> {
    if args.alias.is_some() && args.all {
        bail!(UsageError(
            "--alias names one map; use it with --wwid".into()
        ));
    }
    let filter = Filter::new(args.deny.clone(), args.allow.clone());
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
    let bindings = naming::system_bindings();
    let features = args.features.clone().map(|f| f.0).unwrap_or_default();
    let mut report = Report {
        dry_run: args.dry_run,
        created: Vec::new(),
        skipped: Vec::new(),
        excluded: scan.excluded.clone(),
    };
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
        let name = args
            .alias
            .clone()
            .unwrap_or_else(|| naming::pick(&lun.wwid, &in_use, &bindings));
        if in_use.contains(&name) {
            bail!(dm::DmError::Exists(name));
        }
        let table = table_for(lun, &args.selector, &features)?;
        let uuid = format!("mpath-{}", lun.wwid);
        let mut c = Created {
            name: name.clone(),
            wwid: lun.wwid.clone(),
            uuid: uuid.clone(),
            table: table.render_line(),
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

fn print_report(report: &Report) {
    for c in &report.created {
        if report.dry_run {
            println!("would create {} ({}): {}", c.name, c.wwid, c.table);
            continue;
        }
        println!("created {} ({})", c.name, c.wwid);
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
