//! `pathpilot reload MAP ...`: change a map's table online. Prints the old
//! and new table as a diff, loads it and resumes once (the kernel suspends
//! the map inside the resume), then reports what the kernel kept and the
//! stall I/O saw.
use std::collections::{BTreeMap, HashSet};

use anyhow::{Context, Result, bail};
use clap::Args as ClapArgs;
use serde::Serialize;

use crate::{
    blockdev::{BlockDev, DevNum, display_name},
    cli::{
        UsageError,
        route::{self, Via},
    },
    ctl::{
        client::ClientError,
        protocol::{ControlRequest, ErrorCode},
    },
    discovery::PathDevice,
    dm::{
        Dm, ReloadTiming, multipathd,
        readback::{self, Readback, features_string, hwhandler_string},
    },
    mpath::{MultipathTable, Path, PathArgs, PriorityGroup, Selector},
    policy::sync::{self, Hold},
    tuner::Knob,
};

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The map (`mpatha`).
    pub map: String,
    /// Path selector for every group: round-robin, queue-length,
    /// service-time, historical-service-time.
    #[arg(long, value_parser = parse_selector)]
    pub selector: Option<Selector>,
    /// service-time relative throughput per path: `sdb=10,sdc=90` (0..=100).
    #[arg(long, value_parser = parse_weights)]
    pub weights: Option<Weights>,
    /// Repeat count for every path (current kernels keep only 1; the
    /// read-back says so).
    #[arg(long)]
    pub repeat_count: Option<u32>,
    /// Path groups in priority order: `sdb,sdc;sdd,sde` is two groups, the
    /// first preferred. Paths left out leave the map; a path not yet in the
    /// map may join if it has the map's WWID.
    #[arg(long, value_parser = parse_groups)]
    pub groups: Option<Groups>,
    /// Remove a path from the map (repeatable).
    #[arg(long = "remove-path", value_name = "PATH")]
    pub remove_path: Vec<String>,
    /// Add a path with the map's WWID to the first group, in device-number
    /// order among its paths (repeatable).
    #[arg(long = "add-path", value_name = "PATH")]
    pub add_path: Vec<String>,
    /// Show the change, do nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Reload even though multipathd runs (it will likely undo the change).
    #[arg(long)]
    pub ignore_multipathd: bool,
    /// Reload even if the new table equals the old one.
    #[arg(long)]
    pub force: bool,
    /// Hand the table's knobs (selector, weights, path groups) that an
    /// earlier `reload` pinned back to the daemon's tuner; changes nothing
    /// else. Needs a running daemon.
    #[arg(long, conflicts_with_all = ["selector", "weights", "repeat_count", "groups", "remove_path", "add_path", "force", "dry_run"])]
    pub release: bool,
    #[arg(long)]
    pub json: bool,
}

/// The selectors a table can name; anything else is refused before the
/// kernel sees it.
pub const SELECTORS: &[&str] = &[
    "round-robin",
    "queue-length",
    "service-time",
    "historical-service-time",
    "io-affinity",
];

pub fn parse_selector(s: &str) -> Result<Selector, String> {
    if SELECTORS.contains(&s) {
        Ok(Selector::from_name(s))
    } else {
        Err(format!(
            "unknown path selector '{s}' (known: {})",
            SELECTORS[..4].join(", ")
        ))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Weights(pub Vec<(String, u32)>);

pub fn parse_weights(s: &str) -> Result<Weights, String> {
    let mut v: Vec<(String, u32)> = Vec::new();
    for item in s.split(',') {
        let (p, w) = item
            .split_once('=')
            .ok_or_else(|| format!("'{item}': expected PATH=WEIGHT (e.g. sdb=10,sdc=90)"))?;
        if p.is_empty() {
            return Err(format!("'{item}': no path before '='"));
        }
        let w: u32 = w
            .parse()
            .map_err(|_| format!("weight '{w}' for {p} is not a number (0..=100)"))?;
        if w > crate::mpath::table::MAX_RELATIVE_THROUGHPUT {
            return Err(format!(
                "weight {w} for {p} is out of range (service-time takes 0..=100)"
            ));
        }
        if v.iter().any(|(q, _)| q == p) {
            return Err(format!("{p} is given two weights"));
        }
        v.push((p.to_string(), w));
    }
    Ok(Weights(v))
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Groups(pub Vec<Vec<String>>);

pub fn parse_groups(s: &str) -> Result<Groups, String> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for (gi, g) in s.split(';').enumerate() {
        let g = g.trim();
        if g.is_empty() {
            return Err(format!(
                "group {} of '{s}' is empty (groups are ';'-separated lists of ','-separated paths, e.g. sdb,sdc;sdd)",
                gi + 1
            ));
        }
        let mut paths = Vec::new();
        for p in g.split(',') {
            let p = p.trim();
            if p.is_empty() {
                return Err(format!("group {} of '{s}' has an empty path name", gi + 1));
            }
            if p.contains(char::is_whitespace) {
                return Err(format!("'{p}' in '{s}' is not a path name"));
            }
            if !seen.insert(p.to_string()) {
                return Err(format!("{p} appears twice in '{s}'"));
            }
            paths.push(p.to_string());
        }
        out.push(paths);
    }
    Ok(Groups(out))
}

/// A path as the user names it: `sdb`, `/dev/sdb` or `8:16`. A bare
/// MAJ:MIN is taken as is, so a path whose disk is gone can still be named.
pub fn resolve_path(arg: &str) -> Result<DevNum> {
    if let Ok(d) = arg.parse::<DevNum>() {
        return Ok(d);
    }
    Ok(BlockDev::resolve(arg)?.dev)
}

fn wwid_of_map(dm: &Dm, map: &str) -> Option<String> {
    dm.info(map)
        .ok()?
        .uuid?
        .strip_prefix("mpath-")
        .map(str::to_string)
}

/// The new table the arguments ask for.
pub fn plan(
    old: &MultipathTable,
    args: &Args,
    map_wwid: Option<&str>,
    resolve: &dyn Fn(&str) -> Result<DevNum>,
) -> Result<MultipathTable> {
    let map = &args.map;
    let mut t = old.clone();
    let joinable = |arg: &str, dev: DevNum| -> Result<()> {
        if old.find_path(dev).is_some() {
            return Ok(());
        }
        let name = display_name(dev);
        let wwid = PathDevice::read(&name).and_then(|p| p.wwid);
        match (map_wwid, wwid.as_deref()) {
            (Some(m), Some(w)) if m == w => Ok(()),
            (m, w) => Err(UsageError(format!(
                "{arg} is not a path of map {map} (its WWID is {}, the map's {})",
                w.unwrap_or("unknown"),
                m.unwrap_or("unknown")
            ))
            .into()),
        }
    };
    if let Some(Groups(spec)) = &args.groups {
        let sel0 = t
            .groups
            .first()
            .map(|g| (g.selector.clone(), g.selector_args.clone()))
            .context("the map has no path groups")?;
        let mut groups = Vec::new();
        for names in spec {
            let mut paths = Vec::new();
            for n in names {
                let dev = resolve(n)?;
                joinable(n, dev)?;
                let md = dev;
                let args = old
                    .find_path(md)
                    .filter(|_| old.groups.iter().all(|g| g.selector == sel0.0))
                    .map(|p| p.args.clone())
                    .or_else(|| sel0.0.default_path_args())
                    .unwrap_or(PathArgs::Empty);
                paths.push(Path { dev: md, args });
            }
            // Mixed arities (paths from groups written differently): use defaults.
            if paths
                .windows(2)
                .any(|w| w[0].args.arity() != w[1].args.arity())
                && let Some(d) = sel0.0.default_path_args()
            {
                for p in &mut paths {
                    p.args = d.clone();
                }
            }
            groups.push(PriorityGroup {
                selector: sel0.0.clone(),
                selector_args: sel0.1.clone(),
                paths,
            });
        }
        t.groups = groups;
        t.initial_pg = 1;
    }
    for a in &args.add_path {
        let dev = resolve(a)?;
        joinable(a, dev)?;
        let g = t.groups.first().context("the map has no path groups")?;
        let pargs = match g.paths.first() {
            Some(p) if g.selector == Selector::ServiceTime => PathArgs::ServiceTime {
                repeat_count: p.args.repeat_count().unwrap_or(1),
                relative_throughput: 1,
            },
            _ => g.selector.default_path_args().ok_or_else(|| {
                UsageError(format!("cannot add a path to a {} group", g.selector))
            })?,
        };
        t.add_path(1, Path { dev, args: pargs })
            .with_context(|| format!("adding {a} to {map}"))?;
    }
    for r in &args.remove_path {
        let dev = resolve(r)?;
        t.remove_path(dev)
            .map_err(|e| UsageError(format!("removing {r} from {map}: {e}")))?;
    }
    if let Some(sel) = &args.selector {
        t.set_selector(sel.clone())
            .map_err(|e| UsageError(format!("{map}: {e}")))?;
    }
    if let Some(n) = args.repeat_count {
        if n == 0 {
            bail!(UsageError("--repeat-count must be at least 1".into()));
        }
        t.set_repeat_count(n);
    }
    if let Some(Weights(ws)) = &args.weights {
        for (p, w) in ws {
            let dev = resolve(p)?;
            t.set_relative_throughput(dev, *w)
                .map_err(|e| UsageError(format!("weight for {p} on {map}: {e}")))?;
        }
    }
    Ok(t)
}

/// A table as lines for people, so a diff shows what moved.
pub fn describe(t: &MultipathTable) -> Vec<String> {
    let mut v = vec![format!(
        "features='{}' hwhandler='{}' initial_pg={}",
        features_string(t),
        hwhandler_string(t),
        t.initial_pg
    )];
    for (i, g) in t.groups.iter().enumerate() {
        let mut pol = vec![
            g.selector.name().to_string(),
            g.selector_args.len().to_string(),
        ];
        pol.extend(g.selector_args.iter().cloned());
        v.push(format!("group {}: policy='{}'", i + 1, pol.join(" ")));
        for p in &g.paths {
            let args = match &p.args {
                PathArgs::Empty => String::new(),
                PathArgs::RepeatCount(n) => format!("repeat_count={n}"),
                PathArgs::ServiceTime {
                    repeat_count,
                    relative_throughput,
                } => {
                    format!("repeat_count={repeat_count} relative_throughput={relative_throughput}")
                }
                PathArgs::CpuMask(m) => format!("cpumask={}", m.as_str()),
                PathArgs::Raw(r) => r.join(" "),
            };
            v.push(format!("  {} {} {}", p.dev, display_name(p.dev), args));
        }
    }
    v
}

/// A line diff (LCS): each line prefixed with ' ', '-' or '+'.
pub fn diff(old: &[String], new: &[String]) -> Vec<String> {
    let (n, m) = (old.len(), new.len());
    let mut l = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            l[i][j] = if old[i] == new[j] {
                l[i + 1][j + 1] + 1
            } else {
                l[i + 1][j].max(l[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < n && j < m {
        if old[i] == new[j] {
            out.push(format!("  {}", old[i]));
            i += 1;
            j += 1;
        } else if l[i + 1][j] >= l[i][j + 1] {
            out.push(format!("- {}", old[i]));
            i += 1;
        } else {
            out.push(format!("+ {}", new[j]));
            j += 1;
        }
    }
    out.extend(old[i..].iter().map(|s| format!("- {s}")));
    out.extend(new[j..].iter().map(|s| format!("+ {s}")));
    out
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub map: String,
    pub dry_run: bool,
    pub changed: bool,
    pub old_table: String,
    pub new_table: String,
    pub diff: Vec<String>,
    /// Absent on a dry run or when nothing changed.
    pub readback: Option<Readback>,
    pub timing: Option<ReloadTiming>,
    /// Knobs the daemon pinned for the operator (empty without a daemon).
    pub pinned: Vec<String>,
}

/// The knobs a reload sets (and pins, through the daemon).
pub const TABLE_KNOBS: [Knob; 3] = [Knob::Selector, Knob::Weights, Knob::ActivePaths];

/// Asks the daemon to release `knobs` of `map` (`--release`), and says
/// what it did.
pub fn release(map: &str, knobs: &[Knob], json: bool) -> Result<()> {
    let Some((socket, _)) = route::daemon_socket() else {
        bail!(UsageError(format!(
            "no pathpilot daemon runs: nothing of {map} is pinned"
        )));
    };
    let data = crate::ctl::client::call(
        &socket,
        &ControlRequest::Release {
            map: map.into(),
            knobs: knobs.to_vec(),
        },
    )?;
    if json {
        println!("{}", serde_json::to_string_pretty(&data)?);
        return Ok(());
    }
    let names = |k: &str| -> String {
        data[k]
            .as_array()
            .map(|v| {
                v.iter()
                    .filter_map(|x| x.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    let released = names("released");
    println!(
        "{map}: {}",
        if released.is_empty() {
            "nothing to release".to_string()
        } else {
            format!("released {released}: the tuner may change them again")
        }
    );
    let still = names("pinned");
    if !still.is_empty() {
        println!("{map}: still pinned: {still}");
    }
    Ok(())
}

pub fn run(args: Args) -> Result<()> {
    if args.release {
        return release(&args.map, &TABLE_KNOBS, args.json);
    }
    let dm = Dm::open()?;
    // The daemon refuses a table planned from one that changed meanwhile
    // (its tuner reloads too): plan again from the new one, a few times.
    for attempt in 0.. {
        match attempt_reload(&dm, &args) {
            Err(e)
                if attempt < 3
                    && e.downcast_ref::<ClientError>().is_some_and(|c| {
                        matches!(
                            c,
                            ClientError::Refused {
                                code: ErrorCode::Conflict,
                                ..
                            }
                        )
                    }) =>
            {
                continue;
            }
            r => return r,
        }
    }
    unreachable!("the loop returns")
}

/// The timing of a reload made by the daemon, from its answer (micros).
fn timing_of(v: &serde_json::Value) -> ReloadTiming {
    let us = |k: &str| std::time::Duration::from_micros(v[k].as_u64().unwrap_or(0));
    ReloadTiming {
        load: us("load"),
        stall: us("stall"),
    }
}

fn attempt_reload(dm: &Dm, args: &Args) -> Result<()> {
    let old = dm.multipath_table(&args.map)?;
    let wwid = wwid_of_map(dm, &args.map);
    let new = plan(&old, args, wwid.as_deref(), &resolve_path)?;
    let d = diff(&describe(&old), &describe(&new));
    let changed = new != old;
    let mut report = Report {
        map: args.map.clone(),
        dry_run: args.dry_run,
        changed,
        old_table: old.render_line(),
        new_table: new.render_line(),
        diff: d,
        readback: None,
        timing: None,
        pinned: vec![],
    };
    if !args.json {
        println!("{}: old table: {}", args.map, report.old_table);
        println!("{}: new table: {}", args.map, report.new_table);
        for l in &report.diff {
            println!("{l}");
        }
    }
    if args.dry_run || (!changed && !args.force) {
        if !args.json {
            println!(
                "{}",
                if args.dry_run {
                    "dry run: nothing changed"
                } else {
                    "no change: not reloading (--force reloads anyway)"
                }
            );
        }
        return emit_json(args, &report);
    }
    if let Some(how) = multipathd::running()
        && !args.ignore_multipathd
    {
        bail!(UsageError(format!(
            "multipathd is running ({how}) and would reload {} from its own config; stop it or pass --ignore-multipathd",
            args.map
        )));
    }
    let req = ControlRequest::Reload {
        map: args.map.clone(),
        expect: report.old_table.clone(),
        table: report.new_table.clone(),
    };
    let (applied, timing) = match route::change(&args.map, "pathpilot reload", &req)? {
        Via::Daemon(data) => {
            let line = data["applied"].as_str().unwrap_or_default();
            let applied = MultipathTable::parse_line(line)
                .map_err(|e| anyhow::anyhow!("the daemon's read-back '{line}': {e}"))?;
            report.pinned = data["pinned"]
                .as_array()
                .map(|v| {
                    v.iter()
                        .filter_map(|k| k.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            (applied, timing_of(&data["timing"]))
        }
        Via::Here(mut lock) => {
            // A new table starts with every path active: the paths the
            // kernel held failed are failed again, as multipathd does.
            let held: BTreeMap<DevNum, Hold> = dm
                .multipath_status(&args.map)
                .map(|st| {
                    crate::policy::ops::failed_in(&st)
                        .into_iter()
                        .map(|d| (d, Hold::Kernel))
                        .collect()
                })
                .unwrap_or_default();
            let r = lock
                .journaled(|| sync::reload(dm, &args.map, &new, &held))?
                .with_context(|| format!("reloading {}", args.map))?;
            (r.table, r.timing)
        }
    };
    let rb = readback::compare(&new, &applied);
    if !args.json {
        println!(
            "{}: applied (read back): {}",
            args.map,
            if rb.exact {
                "as requested".to_string()
            } else {
                rb.applied.clone()
            }
        );
        for n in &rb.notes {
            println!("{}: {}", args.map, n.describe());
        }
        println!(
            "{}: stall {:.1} ms (one resume: the kernel suspended, swapped, resumed; load {:.1} ms before it)",
            args.map,
            ms(timing.stall),
            ms(timing.load)
        );
        if !report.pinned.is_empty() {
            println!(
                "{}: applied by the pathpilot daemon; pinned: {} (its tuner leaves {} until \
                 `pathpilot reload {} --release`)",
                args.map,
                report.pinned.join(", "),
                if report.pinned.len() == 1 {
                    "it"
                } else {
                    "them"
                },
                args.map
            );
        }
    }
    report.readback = Some(rb);
    report.timing = Some(timing);
    emit_json(args, &report)
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn emit_json(args: &Args, r: &Report) -> Result<()> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(r)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_syntax() {
        assert_eq!(
            parse_groups("sdb,sdc;sdd").unwrap(),
            Groups(vec![vec!["sdb".into(), "sdc".into()], vec!["sdd".into()]])
        );
        assert_eq!(
            parse_groups("8:16").unwrap().0,
            vec![vec!["8:16".to_string()]]
        );
        for bad in ["", ";", "sdb;", "sdb,,sdc", "sdb;sdb", "sdb, ;sdc", "a b"] {
            assert!(parse_groups(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_groups("sdb;;sdc").unwrap_err().contains("group 2"));
    }

    #[test]
    fn weights_syntax() {
        assert_eq!(
            parse_weights("sdb=10,sdc=100").unwrap(),
            Weights(vec![("sdb".into(), 10), ("sdc".into(), 100)])
        );
        assert!(
            parse_weights("sdb=101")
                .unwrap_err()
                .contains("out of range")
        );
        assert!(
            parse_weights("sdb=-1")
                .unwrap_err()
                .contains("not a number")
        );
        assert!(parse_weights("sdb").unwrap_err().contains("PATH=WEIGHT"));
        assert!(parse_weights("=5").is_err());
        assert!(
            parse_weights("sdb=1,sdb=2")
                .unwrap_err()
                .contains("two weights")
        );
    }

    #[test]
    fn selectors() {
        assert_eq!(
            parse_selector("queue-length").unwrap(),
            Selector::QueueLength
        );
        assert!(
            parse_selector("fastest")
                .unwrap_err()
                .contains("unknown path selector")
        );
    }

    fn args(map: &str) -> Args {
        Args {
            map: map.into(),
            selector: None,
            weights: None,
            repeat_count: None,
            groups: None,
            remove_path: vec![],
            add_path: vec![],
            dry_run: false,
            ignore_multipathd: false,
            force: false,
            release: false,
            json: false,
        }
    }

    fn fake_resolve(s: &str) -> Result<DevNum> {
        Ok(match s {
            "sda" => DevNum::new(8, 0),
            "sdb" => DevNum::new(8, 16),
            "sdc" => DevNum::new(8, 32),
            other => other.parse()?,
        })
    }

    fn rr2() -> MultipathTable {
        MultipathTable::parse_line("0 8 multipath 0 0 1 1 round-robin 0 2 1 8:0 1 8:16 1").unwrap()
    }

    #[test]
    fn plan_selector_weights_repeat() {
        let mut a = args("m");
        a.selector = Some(Selector::ServiceTime);
        a.weights = Some(Weights(vec![("sdb".into(), 40)]));
        let t = plan(&rr2(), &a, None, &fake_resolve).unwrap();
        assert_eq!(
            t.render_line(),
            "0 8 multipath 0 0 1 1 service-time 0 2 2 8:0 1 1 8:16 1 40"
        );
        let mut a = args("m");
        a.repeat_count = Some(100);
        let t = plan(&rr2(), &a, None, &fake_resolve).unwrap();
        assert_eq!(
            t.render_line(),
            "0 8 multipath 0 0 1 1 round-robin 0 2 1 8:0 100 8:16 100"
        );
    }

    #[test]
    fn plan_groups_and_refusals() {
        let mut a = args("m");
        a.groups = Some(parse_groups("sdb;sda").unwrap());
        let t = plan(&rr2(), &a, None, &fake_resolve).unwrap();
        assert_eq!(
            t.render_line(),
            "0 8 multipath 0 0 2 1 round-robin 0 1 1 8:16 1 round-robin 0 1 1 8:0 1"
        );
        // Weights on round-robin, a path not in the map, the last path.
        let mut a = args("m");
        a.weights = Some(Weights(vec![("sda".into(), 5)]));
        let e = plan(&rr2(), &a, None, &fake_resolve).unwrap_err();
        assert!(e.to_string().contains("service-time"), "{e}");
        let mut a = args("m");
        a.selector = Some(Selector::ServiceTime);
        a.weights = Some(Weights(vec![("sdc".into(), 5)]));
        let e = plan(&rr2(), &a, None, &fake_resolve).unwrap_err();
        assert!(e.to_string().contains("not part of the map"), "{e}");
        let mut a = args("m");
        a.remove_path = vec!["sda".into(), "sdb".into()];
        let e = plan(&rr2(), &a, None, &fake_resolve).unwrap_err();
        assert!(e.to_string().contains("last path"), "{e}");
        let mut a = args("m");
        a.groups = Some(parse_groups("sdc").unwrap());
        let e = plan(&rr2(), &a, Some("3abc"), &fake_resolve).unwrap_err();
        assert!(e.to_string().contains("not a path of map m"), "{e}");
    }

    #[test]
    fn diff_marks_changes() {
        let o: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let n: Vec<String> = ["a", "x", "c"].iter().map(|s| s.to_string()).collect();
        assert_eq!(diff(&o, &n), ["  a", "- b", "+ x", "  c"]);
    }
}
