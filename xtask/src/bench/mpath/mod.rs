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
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use pathpilot_testbed::dirs::workspace_root;
use pathpilot_testbed::figures::median;
use pathpilot_testbed::{Job, Link, Testbed, WWN};
use serde_json::{Value, json};

use super::save;

mod chart;
mod marginal;
mod scenarios;
mod toggled;

#[derive(clap::Args)]
pub struct Args {
    /// Scenario to run (repeatable; default all): stream, merge, asym,
    /// switch, overhead, repeat, marginal.
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

pub const SCENARIOS: [&str; 7] = [
    "asym", "stream", "merge", "switch", "overhead", "repeat", "marginal",
];

/// Run lengths.
#[derive(Clone, Debug)]
pub struct Opts {
    pub quick: bool,
    pub reps: usize,
    /// fio seconds measured per point (after `ramp`).
    pub secs: u32,
    pub ramp: u32,
    /// The longest wait for the daemon to settle.
    pub max_settle: Duration,
    /// The daemon's window (seconds) and windows per measurement.
    pub window_s: u32,
    pub windows: u32,
}

pub fn run(args: Args) -> Result<()> {
    let quick = args.quick;
    let o = Opts {
        quick,
        reps: args.reps.unwrap_or(if quick { 1 } else { 3 }).max(1),
        secs: if quick { 2 } else { 10 },
        ramp: 1,
        max_settle: Duration::from_secs(if quick { 90 } else { 300 }),
        window_s: if quick { 1 } else { 3 },
        windows: if quick { 2 } else { 3 },
    };
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

/// One measured point.
#[derive(Clone, Debug, Default)]
pub struct Point {
    pub mib_s: f64,
    pub iops: f64,
    pub lat_p99_ms: f64,
    /// At the measured device (the dm device, or the raw path).
    pub avg_request_kib: f64,
    pub merge_pct: f64,
    /// Bytes per SCSI command over all paths (iorequest_cnt).
    pub path_avg_request_kib: Option<f64>,
    /// Clone issues that bounced off a full path, per second.
    pub bounces_s: Option<f64>,
}

impl Point {
    fn median_of(v: &[Point]) -> Point {
        let f = |g: &dyn Fn(&Point) -> f64| {
            let mut x: Vec<f64> = v.iter().map(g).filter(|x| x.is_finite()).collect();
            median(&mut x)
        };
        let fo = |g: &dyn Fn(&Point) -> Option<f64>| {
            let mut x: Vec<f64> = v.iter().filter_map(g).collect();
            (!x.is_empty()).then(|| median(&mut x))
        };
        Point {
            mib_s: f(&|p| p.mib_s),
            iops: f(&|p| p.iops),
            lat_p99_ms: f(&|p| p.lat_p99_ms),
            avg_request_kib: f(&|p| p.avg_request_kib),
            merge_pct: f(&|p| p.merge_pct),
            path_avg_request_kib: fo(&|p| p.path_avg_request_kib),
            bounces_s: fo(&|p| p.bounces_s),
        }
    }
}

/// One line of a scenario's table and JSON.
#[derive(Clone, Debug)]
pub struct Row {
    pub case: String,
    pub config: String,
    pub p: Point,
    /// Extra JSON fields (setting, settle_s, ...).
    pub extra: serde_json::Map<String, Value>,
}

impl Row {
    pub fn new(case: &str, config: &str, p: Point) -> Row {
        Row {
            case: case.into(),
            config: config.into(),
            p,
            extra: Default::default(),
        }
    }
    pub fn with(mut self, k: &str, v: Value) -> Row {
        self.extra.insert(k.into(), v);
        self
    }
    fn json(&self) -> Value {
        let r2 = |x: f64| {
            if x.is_finite() {
                json!((x * 100.0).round() / 100.0)
            } else {
                Value::Null
            }
        };
        let mut m = serde_json::Map::new();
        m.insert("case".into(), json!(self.case));
        m.insert("config".into(), json!(self.config));
        m.insert("mib_s".into(), r2(self.p.mib_s));
        m.insert("iops".into(), r2(self.p.iops));
        m.insert("avg_request_kib".into(), r2(self.p.avg_request_kib));
        m.insert("merge_pct".into(), r2(self.p.merge_pct));
        m.insert("lat_p99_ms".into(), r2(self.p.lat_p99_ms));
        if let Some(k) = self.p.path_avg_request_kib {
            m.insert("path_avg_request_kib".into(), r2(k));
        }
        if let Some(b) = self.p.bounces_s {
            m.insert("bounces_s".into(), r2(b));
        }
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }
}

/// A target's outcome.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    Met,
    Missed,
    Inconclusive,
}

impl Verdict {
    fn label(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::Missed => "MISSED",
            Verdict::Inconclusive => "INCONCLUSIVE",
        }
    }

    /// For the JSON: null when the measurement said nothing.
    fn met(self) -> Option<bool> {
        match self {
            Verdict::Met => Some(true),
            Verdict::Missed => Some(false),
            Verdict::Inconclusive => None,
        }
    }
}

/// What a scenario produced.
pub struct Report {
    pub name: &'static str,
    pub link: Link,
    pub sum_of_caps: f64,
    /// The sum of caps per case where cases differ (stream's 2 and 4 paths).
    pub case_caps: BTreeMap<String, f64>,
    pub rows: Vec<Row>,
    /// Target lines for the table's foot.
    pub verdicts: Vec<(String, Verdict)>,
    pub notes: Vec<String>,
    pub extra: serde_json::Map<String, Value>,
    /// The chart's unit (MiB/s unless said).
    pub unit: &'static str,
}

impl Report {
    pub fn new(name: &'static str, link: Link, sum_of_caps: f64) -> Report {
        Report {
            name,
            link,
            sum_of_caps,
            case_caps: BTreeMap::new(),
            rows: vec![],
            verdicts: vec![],
            notes: vec![],
            extra: Default::default(),
            unit: "MIB/S",
        }
    }

    pub fn row(&self, case: &str, config: &str) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.case == case && r.config == config)
    }

    pub fn verdict(&mut self, what: String, met: bool) {
        let v = if met { Verdict::Met } else { Verdict::Missed };
        self.verdicts.push((what, v));
    }

    /// A target whose measurement says nothing either way (a loss within
    /// its own spread, or a gain from adding work).
    pub fn inconclusive(&mut self, what: String) {
        self.verdicts.push((what, Verdict::Inconclusive));
    }

    fn finish(&self, o: &Opts, secs: f64) -> Result<()> {
        println!(
            "\n== {} ({} link, sum of caps {:.0} MiB/s{})",
            self.name,
            match self.link {
                Link::Wire => "wire",
                Link::Throttle => "throttle",
            },
            self.sum_of_caps,
            if o.quick { ", --quick" } else { "" }
        );
        print!("{}", self.table());
        for (what, v) in &self.verdicts {
            println!("target {}: {what}", v.label());
        }
        for n in &self.notes {
            println!("note: {n}");
        }
        let mut v = json!({
            "scenario": self.name,
            "link": match self.link { Link::Wire => "wire", Link::Throttle => "throttle" },
            "sum_of_caps_mib_s": self.sum_of_caps,
            "quick": o.quick,
            "repeats": o.reps,
            "fio_secs": o.secs,
            "elapsed_s": (secs * 10.0).round() / 10.0,
            "rows": self.rows.iter().map(|r| r.json()).collect::<Vec<_>>(),
            "targets": self.verdicts.iter().map(|(w, v)| json!({"target": w, "met": v.met(), "verdict": v.label().to_lowercase()})).collect::<Vec<_>>(),
            "notes": self.notes,
        });
        if !self.case_caps.is_empty() {
            v["sum_of_caps_by_case"] = json!(self.case_caps);
        }
        for (k, x) in &self.extra {
            v[k] = x.clone();
        }
        let path = save(self.name, &v)?;
        // The table as printed.
        let mut txt = self.table();
        for (what, v) in &self.verdicts {
            txt.push_str(&format!("target {}: {what}\n", v.label()));
        }
        std::fs::write(path.with_extension("txt"), txt)?;
        let png = path.with_extension("png");
        let mut groups: Vec<chart::Group> = vec![];
        for r in &self.rows {
            if r.config == "grid" {
                continue;
            }
            if groups
                .last()
                .is_none_or(|g| g.title != r.case.to_uppercase())
            {
                groups.push(chart::Group {
                    title: r.case.to_uppercase(),
                    bars: vec![],
                    limit: self
                        .case_caps
                        .get(&r.case)
                        .copied()
                        .or((self.sum_of_caps > 0.0).then_some(self.sum_of_caps)),
                });
            }
            let label = match r.extra.get("label").and_then(|l| l.as_str()) {
                Some(l) => l.to_string(),
                None => r.config.clone(),
            };
            groups.last_mut().unwrap().bars.push(chart::Bar {
                label,
                value: r.p.mib_s,
                ours: r.config.starts_with("pathpilot"),
            });
        }
        chart::draw(
            &png,
            &format!("PATHPILOT BENCH MPATH {}", self.name.to_uppercase()),
            self.unit,
            &groups,
        )?;
        println!(
            "wrote {} and {} ({secs:.0} s)",
            path.display(),
            png.strip_prefix(workspace_root()).unwrap_or(&png).display()
        );
        Ok(())
    }

    /// The text table.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:<18} {:<19} {:>8} {:>8} {:>8} {:>7} {:>8} {:>8}  {}\n",
            "case", "config", "MiB/s", "IOPS", "req KiB", "merge%", "p99 ms", "path KiB", "setting"
        );
        let f = |x: f64, d: usize| {
            if x.is_finite() {
                format!("{x:.d$}")
            } else {
                "-".into()
            }
        };
        for r in &self.rows {
            let setting = r
                .extra
                .get("setting")
                .and_then(|v| v.as_str())
                .unwrap_or("");
            let settle = r
                .extra
                .get("settle_s")
                .and_then(|v| v.as_f64())
                .map(|x| {
                    let kept = match r.extra.get("kept_s").and_then(|v| v.as_f64()) {
                        Some(k) => format!("last kept {k:.0} s"),
                        None => "nothing kept".into(),
                    };
                    format!(
                        " settle {x:.0} s, {kept}{}",
                        if r.extra.get("settled") == Some(&json!(false)) {
                            " (not settled)"
                        } else {
                            ""
                        }
                    )
                })
                .unwrap_or_default();
            s.push_str(&format!(
                "{:<18} {:<19} {:>8} {:>8} {:>8} {:>7} {:>8} {:>8}  {setting}{settle}\n",
                r.case,
                r.config,
                f(r.p.mib_s, 1),
                f(r.p.iops, 0),
                f(r.p.avg_request_kib, 1),
                f(r.p.merge_pct, 1),
                f(r.p.lat_p99_ms, 1),
                r.p.path_avg_request_kib
                    .map(|k| f(k, 1))
                    .unwrap_or_else(|| "-".into()),
            ));
        }
        s
    }
}

/// The WWID multipath-tools gives the testbed's LUN.
pub fn wwid() -> String {
    format!("3{:x}", WWN)
}

/// The row of the map multipath-tools itself builds, unconfigured.
pub const MULTIPATH_TOOLS: &str = "multipath-tools default";

/// A static configuration of the knobs the kernel honours
/// (docs/architecture.md).
#[derive(Clone, Debug)]
pub struct Static {
    pub name: String,
    pub selector: &'static str,
    /// service-time relative_throughput per path, in path order.
    pub weights: Vec<u32>,
    /// Paths (indices) in the active group; the rest wait in a second one.
    pub active: Vec<usize>,
    pub max_sectors_kb: Option<u32>,
    pub nr_requests: Option<u32>,
    pub queue_depth: Option<u32>,
    pub repeat: Option<u32>,
    /// Measure this raw path instead of the map (single-path).
    pub raw: Option<usize>,
    /// Load the table multipath-tools built for the LUN, as it is.
    pub multipath_tools: bool,
}

impl Static {
    pub fn sel(name: &str, selector: &'static str) -> Static {
        Static {
            name: name.into(),
            selector,
            weights: vec![],
            active: vec![],
            max_sectors_kb: None,
            nr_requests: None,
            queue_depth: None,
            repeat: None,
            raw: None,
            multipath_tools: false,
        }
    }
    /// The five configurations every scenario compares.
    pub fn standard(single: usize) -> Vec<Static> {
        let mut raw = Static::sel("single-path", "service-time");
        raw.raw = Some(single);
        let mut mpd = Static::sel(MULTIPATH_TOOLS, "service-time");
        mpd.multipath_tools = true;
        vec![
            raw,
            Static::sel("round-robin", "round-robin"),
            Static::sel("queue-length", "queue-length"),
            Static::sel("service-time", "service-time"),
            mpd,
        ]
    }
    pub fn grid(name: &str) -> Static {
        Static::sel(name, "service-time")
    }
    pub fn msk(mut self, kb: u32) -> Static {
        self.max_sectors_kb = Some(kb);
        self
    }
    pub fn qd(mut self, qd: u32) -> Static {
        self.queue_depth = Some(qd);
        self
    }
    pub fn nr(mut self, nr: u32) -> Static {
        self.nr_requests = Some(nr);
        self
    }
    pub fn active(mut self, a: &[usize]) -> Static {
        self.active = a.to_vec();
        self
    }
    pub fn weights(mut self, w: &[u32]) -> Static {
        self.weights = w.to_vec();
        self
    }
    pub fn selector(mut self, s: &'static str) -> Static {
        self.selector = s;
        self
    }
    /// The knobs it sets, for the table.
    pub fn describe(&self) -> String {
        let mut v = vec![];
        if self.multipath_tools {
            v.push("multipath-tools' own map".to_string());
        } else if let Some(i) = self.raw {
            v.push(format!("raw path {i}"));
        } else {
            v.push(self.selector.to_string());
        }
        if !self.weights.is_empty() {
            v.push(format!(
                "w {}",
                self.weights
                    .iter()
                    .map(|w| w.to_string())
                    .collect::<Vec<_>>()
                    .join(":")
            ));
        }
        if !self.active.is_empty() {
            v.push(format!("{} active", self.active.len()));
        }
        if let Some(k) = self.max_sectors_kb {
            v.push(format!("max_sectors_kb {k}"));
        }
        if let Some(k) = self.nr_requests {
            v.push(format!("nr_requests {k}"));
        }
        if let Some(k) = self.queue_depth {
            v.push(format!("qd {k}"));
        }
        if let Some(k) = self.repeat {
            v.push(format!("rr_min_io_rq {k}"));
        }
        v.join(", ")
    }
}

/// The map's defaults, read right after it is made.
#[derive(Clone, Debug)]
pub struct Defaults {
    pub max_sectors_kb: u32,
    pub nr_requests: u32,
    pub scheduler: String,
    pub queue_depth: u32,
}

/// The testbed with one map `mpatha` of every path.
pub struct Rig<'a> {
    pub tb: &'a Testbed,
    pub o: &'a Opts,
    /// Disk names in path order (by SCSI host).
    pub disks: Vec<String>,
    pub dm: String,
    pub def: Defaults,
    daemon_cfg: String,
    /// The table multipath-tools built for the LUN (params after
    /// `multipath`), with no multipath.conf.
    pub multipath_tools: String,
}

/// fio's figures of one run.
fn parse_fio(out: &str) -> Result<(f64, f64, f64)> {
    let start = out.find('{').context("no fio JSON")?;
    let v: Value = serde_json::from_str(&out[start..])
        .with_context(|| format!("fio JSON: {}", &out[..out.len().min(400)]))?;
    let j = &v["jobs"][0];
    let (mut kib, mut iops) = (0.0, 0.0);
    let mut p99: f64 = 0.0;
    let mut best_ios = -1.0;
    for d in ["read", "write"] {
        let x = &j[d];
        kib += x["bw"].as_f64().unwrap_or(0.0);
        let io = x["iops"].as_f64().unwrap_or(0.0);
        iops += io;
        if io > best_ios {
            best_ios = io;
            p99 = x["clat_ns"]["percentile"]["99.000000"]
                .as_f64()
                .unwrap_or(f64::NAN)
                / 1e6;
        }
    }
    Ok((kib / 1024.0, iops, p99))
}

/// `/sys/block/X/stat` fields (and iorequest_cnt) by device, before and after.
fn parse_snaps(out: &str) -> BTreeMap<(String, String), Vec<u64>> {
    let mut m = BTreeMap::new();
    for l in out.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6 || (f[0] != "SB" && f[0] != "SA") {
            continue;
        }
        let vals: Vec<u64> = f[2..]
            .iter()
            .map(|x| {
                x.strip_prefix("0x")
                    .map(|h| u64::from_str_radix(h, 16).unwrap_or(0))
                    .unwrap_or_else(|| x.parse().unwrap_or(0))
            })
            .collect();
        m.insert((f[0].to_string(), f[1].to_string()), vals);
    }
    m
}

/// Figures of device `dev` (and `paths`) from the snapshot lines.
fn stat_figures(out: &str, dev: &str, paths: &[String], secs: f64, p: &mut Point) {
    let s = parse_snaps(out);
    let delta = |d: &str, i: usize| -> u64 {
        let b = s.get(&("SB".into(), d.into())).and_then(|v| v.get(i));
        let a = s.get(&("SA".into(), d.into())).and_then(|v| v.get(i));
        match (b, a) {
            (Some(b), Some(a)) => a.saturating_sub(*b),
            _ => 0,
        }
    };
    let ios = delta(dev, 0) + delta(dev, 4);
    let merges = delta(dev, 1) + delta(dev, 5);
    let sectors = delta(dev, 2) + delta(dev, 6);
    p.avg_request_kib = if ios > 0 {
        sectors as f64 * 512.0 / ios as f64 / 1024.0
    } else {
        f64::NAN
    };
    p.merge_pct = if ios + merges > 0 {
        merges as f64 * 100.0 / (ios + merges) as f64
    } else {
        f64::NAN
    };
    if !paths.is_empty() {
        // iorequest_cnt is the 12th value after the 11+ stat fields: the last.
        let (mut cmds, mut psect, mut pios) = (0u64, 0u64, 0u64);
        for d in paths {
            let n = s.get(&("SA".into(), d.clone())).map_or(0, |v| v.len());
            if n == 0 {
                continue;
            }
            cmds += delta(d, n - 1);
            psect += delta(d, 2) + delta(d, 6);
            pios += delta(d, 0) + delta(d, 4);
        }
        if cmds > 0 {
            p.path_avg_request_kib = Some(psect as f64 * 512.0 / cmds as f64 / 1024.0);
            p.bounces_s = Some(pios.saturating_sub(cmds) as f64 / secs.max(1e-9));
        }
    }
}

impl<'a> Rig<'a> {
    /// Makes `mpatha` (service-time, one group of every path) and reads the
    /// defaults.
    pub fn new(tb: &'a Testbed, o: &'a Opts) -> Result<Rig<'a>> {
        // First, the map multipath-tools makes of the LUN on its own (its
        // baseline row loads that table as it is); then pathpilot's.
        tb.multipath_tools("sda")
            .context("multipath-tools' own map of the LUN")?;
        let mt = tb.sh(&format!("dmsetup table {}", wwid()))?;
        let multipath_tools = mt
            .split_once(" multipath ")
            .map(|(_, p)| p.trim().to_string())
            .with_context(|| format!("multipath-tools made no multipath map: {mt}"))?;
        tb.flush_multipath_tools()?;
        eprintln!("bench: multipath-tools' own map: {multipath_tools}");
        tb.sh("pathpilot create --all --selector service-time >/dev/null")?;
        let dm = tb
            .sh("dmsetup info -c --noheadings -o minor mpatha")?
            .trim()
            .to_string();
        let dm = format!("dm-{dm}");
        let disks: Vec<String> = tb.path_disks()?.into_iter().map(|(_, n)| n).collect();
        let q = tb.sh(&format!(
            "cd /sys/block/{dm}/queue && cat max_sectors_kb nr_requests scheduler && cat /sys/block/{}/device/queue_depth",
            disks[0]
        ))?;
        let l: Vec<&str> = q.lines().collect();
        if l.len() < 4 {
            bail!("unexpected queue defaults: {q}");
        }
        let scheduler = l[2]
            .split_whitespace()
            .find(|s| s.starts_with('['))
            .map(|s| s.trim_matches(|c| c == '[' || c == ']').to_string())
            .unwrap_or_else(|| "none".into());
        let def = Defaults {
            max_sectors_kb: l[0].trim().parse()?,
            nr_requests: l[1].trim().parse()?,
            scheduler,
            queue_depth: l[3].trim().parse()?,
        };
        let (window, windows) = (o.window_s, o.windows);
        let daemon_cfg = format!(
            r#"mode = "tune"
window_secs = {window}
metrics = "off"
[maps]
create = false
adopt = ["{}"]
[checker]
interval_secs = 2
timeout_secs = 5
[tuner]
windows = {windows}
settle_windows = 1
reload_min_interval_secs = 2
flap_hold_secs = 6
"#,
            wwid()
        );
        let rig = Rig {
            tb,
            o,
            disks,
            dm,
            def,
            daemon_cfg,
            multipath_tools,
        };
        eprintln!(
            "bench: map mpatha = {} over {} ({:?})",
            rig.dm,
            rig.disks.join(" "),
            rig.def
        );
        Ok(rig)
    }

    /// What a configuration sets, for the table: multipath-tools' row
    /// shows the table it built.
    pub fn describe(&self, s: &Static) -> String {
        if s.multipath_tools {
            format!("its table: {}", self.multipath_tools)
        } else {
            s.describe()
        }
    }

    pub fn window_s(&self) -> f64 {
        f64::from(self.o.window_s)
    }

    /// Sets every honoured knob to `s` (the rest to the defaults); returns
    /// the table the kernel holds.
    pub fn apply(&self, s: &Static) -> Result<String> {
        if s.multipath_tools {
            // As multipathd reloads: a load, then one noflush resume; the
            // queue knobs at the map's defaults.
            let d = &self.def;
            let size = self.tb.sh("dmsetup table mpatha | cut -d' ' -f2")?;
            let script = format!(
                "export DM_DISABLE_UDEV=1\n\
                 dmsetup load mpatha --table '0 {} multipath {}' && dmsetup resume --noflush mpatha\n\
                 pathpilot set mpatha max_sectors_kb={} nr_requests={} scheduler={} queue_depth={} >/dev/null\n\
                 dmsetup table mpatha",
                size.trim(),
                self.multipath_tools,
                d.max_sectors_kb,
                d.nr_requests,
                d.scheduler,
                d.queue_depth
            );
            return Ok(self.tb.sh(&script)?.trim().to_string());
        }
        let cmd = self.reload_cmd(s);
        let d = &self.def;
        let script = format!(
            "{cmd} >/tmp/reload.out 2>&1 || {{ cat /tmp/reload.out; exit 1; }}\n\
             pathpilot set mpatha max_sectors_kb={} nr_requests={} scheduler={} queue_depth={} >/dev/null\n\
             dmsetup table mpatha",
            s.max_sectors_kb.unwrap_or(d.max_sectors_kb),
            s.nr_requests.unwrap_or(d.nr_requests),
            d.scheduler,
            s.queue_depth.unwrap_or(d.queue_depth),
        );
        Ok(self.tb.sh(&script)?.trim().to_string())
    }

    /// The `pathpilot reload` that sets `s`'s table knobs (selector, path
    /// groups, weights, repeat count).
    pub fn reload_cmd(&self, s: &Static) -> String {
        let n = self.disks.len();
        let active: Vec<usize> = if s.active.is_empty() {
            (0..n).collect()
        } else {
            s.active.clone()
        };
        let rest: Vec<usize> = (0..n).filter(|i| !active.contains(i)).collect();
        let names = |v: &[usize]| {
            v.iter()
                .map(|i| self.disks[*i].clone())
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut groups = names(&active);
        if !rest.is_empty() {
            groups = format!("{groups};{}", names(&rest));
        }
        let mut cmd = format!(
            "pathpilot reload mpatha --selector {} --groups '{groups}'",
            s.selector
        );
        // Weights always, for service-time: a reload keeps the path
        // arguments of an unchanged selector, so a previous point's weights
        // would stay.
        if s.selector == "service-time" {
            let w: Vec<String> = (0..n)
                .map(|i| {
                    format!(
                        "{}={}",
                        self.disks[i],
                        s.weights.get(i).copied().unwrap_or(1)
                    )
                })
                .collect();
            cmd.push_str(&format!(" --weights {}", w.join(",")));
        }
        cmd.push_str(&format!(" --repeat-count {}", s.repeat.unwrap_or(1)));
        cmd
    }

    /// The default map (pathpilot's start): service-time over every path.
    pub fn reset(&self) -> Result<String> {
        self.apply(&Static::sel("default", "service-time"))
    }

    /// The device a configuration is measured on.
    pub fn dev_of(&self, s: &Static) -> String {
        match s.raw {
            Some(i) => self.disks[i].clone(),
            None => self.dm.clone(),
        }
    }

    /// One fio run of `fio_args` on `dev` with stat snapshots around it.
    pub fn measure(&self, dev: &str, fio_args: &str) -> Result<Point> {
        self.measure_secs(dev, fio_args, self.o.secs)
    }

    pub fn measure_secs(&self, dev: &str, fio_args: &str, secs: u32) -> Result<Point> {
        let paths: Vec<String> = if dev.starts_with("dm-") {
            self.disks.clone()
        } else {
            vec![]
        };
        let snap = format!(
            "snap() {{ echo \"$1 {dev} $(cat /sys/block/{dev}/stat)\"; for p in {}; do echo \"$1 $p $(cat /sys/block/$p/stat) $(cat /sys/block/$p/device/iorequest_cnt)\"; done; }}",
            paths.join(" ")
        );
        let script = format!(
            "{snap}\nsnap SB\n\
             fio --name=b --filename=/dev/{dev} --direct=1 --ioengine=libaio --time_based \
             --ramp_time={ramp} --runtime={secs} --randrepeat=0 --group_reporting {fio_args} \
             --output-format=json --output=/tmp/fio.json >/tmp/fio.err 2>&1\nrc=$?\nsnap SA\n\
             if [ $rc != 0 ]; then cat /tmp/fio.err /tmp/fio.json; exit $rc; fi\ncat /tmp/fio.json",
            ramp = self.o.ramp,
        );
        let out = self
            .tb
            .run_timeout(&script, Duration::from_secs(secs as u64 + 120))?;
        if !out.success() {
            bail!("fio failed on {dev} ({fio_args}): {}", out.stdout_str());
        }
        let text = out.stdout_str();
        let json_part = &text[text.find('{').unwrap_or(0)..];
        let (mib_s, iops, lat_p99_ms) = parse_fio(json_part)?;
        let mut p = Point {
            mib_s,
            iops,
            lat_p99_ms,
            ..Point::default()
        };
        stat_figures(&text, dev, &paths, (secs + self.o.ramp) as f64, &mut p);
        Ok(p)
    }

    /// The map at `start` (its defaults when `None`), then the daemon
    /// tuning it.
    pub fn start_tuning_from(&self, start: Option<&Static>) -> Result<()> {
        match start {
            Some(s) => self.apply(s).map(drop)?,
            None => self.reset().map(drop)?,
        }
        self.start_daemon("tune")
    }

    /// Starts `pathpilot daemon` with the bench config in `mode`.
    pub fn start_daemon(&self, mode: &str) -> Result<()> {
        self.start_daemon_with(mode, "")
    }

    /// [`Self::start_daemon`] with `extra` top-level keys in its config.
    pub fn start_daemon_with(&self, mode: &str, extra: &str) -> Result<()> {
        let cfg = self
            .daemon_cfg
            .replace("mode = \"tune\"", &format!("{extra}mode = \"{mode}\""));
        self.tb.sh(&format!(
            "mkdir -p /etc/pathpilot && cat > /etc/pathpilot/bench.toml <<'EOF'\n{cfg}EOF\n\
             (pathpilot daemon --config /etc/pathpilot/bench.toml > /tmp/daemon.log 2>&1 &)"
        ))?;
        if self.tb.until_success(
            "pathpilot ctl '{\"cmd\":\"status\"}' >/dev/null 2>&1",
            Duration::from_secs(30),
            Duration::from_millis(300),
        )? {
            return Ok(());
        }
        bail!(
            "the daemon did not come up:\n{}",
            self.tb.sh("cat /tmp/daemon.log")?
        )
    }

    pub fn status(&self) -> Result<Value> {
        let out = self.tb.sh("pathpilot ctl '{\"cmd\":\"status\"}'")?;
        let v: Value = serde_json::from_str(out.trim()).context("status JSON")?;
        Ok(v["data"].clone())
    }

    pub fn daemon_pid(&self) -> Result<u64> {
        self.status()?["pid"].as_u64().context("no daemon pid")
    }

    /// SIGTERM, and wait for it to go (the maps stay as they are).
    pub fn stop_daemon(&self) -> Result<()> {
        self.tb.terminate(&self.daemon_pid()?.to_string())
    }

    /// Starts `fio_args` on the map in the background until [`Self::stop_load`].
    pub fn start_load(&self, fio_args: &str) -> Result<Job> {
        self.tb.spawn(&format!(
            "fio --name=l --filename=/dev/{} --direct=1 --ioengine=libaio --time_based --runtime=3600 \
             --randrepeat=0 {fio_args} --output=/dev/null & echo $! > /tmp/load.pid; wait",
            self.dm
        ))
    }

    pub fn stop_load(&self, job: &Job) -> Result<()> {
        self.tb.sh("kill $(cat /tmp/load.pid) 2>/dev/null; true")?;
        self.tb.wait_job(job, Duration::from_secs(60))?;
        Ok(())
    }

    /// Waits (the load running) until the tuner says it has converged, or
    /// has been quiet for a while: not trying anything and no new decision.
    /// `seen`: decisions already in the log before `since`; returns how it
    /// settled and the decisions in the log by then.
    pub fn wait_settled(&self, since: Instant, seen: usize) -> Result<(Settled, usize)> {
        let w = self.window_s();
        // A revert is followed by a recovery window and a baseline before
        // the next trial: quiet for longer than that means nothing is left.
        let quiet = Duration::from_secs_f64(w * 6.0);
        let mut n = seen;
        let mut last_change = since;
        let mut last_decision: Option<Instant> = None;
        let mut last_kept: Option<Instant> = None;
        loop {
            std::thread::sleep(Duration::from_secs_f64(w));
            let s = self.status()?;
            let log = s["decisions"].as_array().map_or(&[][..], Vec::as_slice);
            let state = s["maps"][0]["tuner"].as_str().unwrap_or("").to_string();
            if log.len() != n {
                let now = Instant::now();
                if log.iter().skip(n).any(|d| d["outcome"] == "kept") {
                    last_kept = Some(now);
                }
                n = log.len();
                last_change = now;
                last_decision = Some(now);
            }
            let from_since = |t: Option<Instant>| t.map(|t| (t - since).as_secs_f64());
            // "converged": every candidate for this workload tried (after
            // a few windows, so it is this workload's verdict, not the last).
            let converged = state == "converged" && since.elapsed().as_secs_f64() >= 3.0 * w;
            let settled = converged || (state != "trying" && last_change.elapsed() >= quiet);
            if settled || since.elapsed() >= self.o.max_settle {
                let how = Settled {
                    settle_s: if settled {
                        from_since(last_decision).unwrap_or(0.0)
                    } else {
                        since.elapsed().as_secs_f64()
                    },
                    kept_s: from_since(last_kept),
                    settled,
                };
                return Ok((how, n));
            }
        }
    }

    /// The decision log as short lines (for the JSON and the report).
    pub fn decisions(&self, from: usize) -> Result<Vec<String>> {
        let s = self.status()?;
        Ok(s["decisions"]
            .as_array()
            .map(|a| {
                a.iter()
                    .skip(from)
                    .map(|d| {
                        format!(
                            "{:.0}s {} {} {} -> {} [{}] {} -> {} MiB/s: {}",
                            d["t"].as_f64().unwrap_or(0.0),
                            d["class"].as_str().unwrap_or("-"),
                            d["knob"].as_str().unwrap_or("tuner"),
                            d["old"].as_str().unwrap_or(""),
                            d["new"].as_str().unwrap_or(""),
                            d["outcome"].as_str().unwrap_or(""),
                            d["before_mib_s"],
                            d["after_mib_s"],
                            d["reason"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The tuned settings, as the daemon reports them.
    pub fn settings(&self) -> Result<Value> {
        Ok(self.status()?["maps"][0]["settings"].clone())
    }
}

/// Short text of the daemon's settings.
pub fn show_settings(s: &Value) -> String {
    let mut v = vec![s["selector"].as_str().unwrap_or("?").to_string()];
    if let Some(w) = s["weights"].as_array().filter(|w| !w.is_empty()) {
        v.push(format!(
            "w {}",
            w.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(":")
        ));
    }
    for (k, name) in [
        ("active_paths", "active"),
        ("max_sectors_kb", "max_sectors_kb"),
        ("nr_requests", "nr_requests"),
        ("queue_depth", "qd"),
    ] {
        v.push(format!("{name} {}", s[k]));
    }
    v.join(", ")
}

/// A workload of a scenario case.
#[derive(Clone, Debug)]
pub struct Workload {
    /// The case it belongs to in the table ("2 paths QD1").
    pub case: String,
    pub fio: String,
}

/// A daemon configuration of a comparison: its row and the setting the
/// map starts from (`None`: the map's defaults).
pub struct Tuned {
    pub name: &'static str,
    pub start: Option<Static>,
}

impl Tuned {
    /// The daemon from the map's defaults.
    pub fn defaults() -> Vec<Tuned> {
        vec![Tuned {
            name: "pathpilot",
            start: None,
        }]
    }
}

/// The standard comparison of one boot: static configurations, a grid and
/// the daemon in every round, in an order reversed each round (the daemon
/// last, then first); each daemon run tunes from its start until settled
/// and is measured once, as each static is once per round after its
/// reload; medians over the rounds; the oracle is the best static median.
/// Returns the rows, in case order.
pub fn compare(
    rig: &Rig,
    workloads: &[Workload],
    statics: &[Static],
    tuned: &[Tuned],
) -> Result<Vec<Row>> {
    let o = rig.o;
    // Warm-up: queues, NBD connections, page cache of the LUN's host file.
    rig.reset()?;
    rig.measure_secs(&rig.dm, &workloads[0].fio, 2)?;
    let mut samples: BTreeMap<(usize, usize), Vec<Point>> = BTreeMap::new();
    let mut runs: Vec<Vec<Vec<Ours>>> = tuned.iter().map(|_| vec![]).collect();
    let run_tuned = |runs: &mut Vec<Vec<Vec<Ours>>>| -> Result<()> {
        for (ti, t) in tuned.iter().enumerate() {
            eprintln!("bench: {} (round {})", t.name, runs[ti].len() + 1);
            runs[ti].push(tune_and_measure_from(rig, workloads, t.start.as_ref(), 1)?);
        }
        Ok(())
    };
    for round in 0..o.reps {
        let forward = round % 2 == 0;
        if !forward {
            run_tuned(&mut runs)?;
        }
        let order: Vec<usize> = if forward {
            (0..statics.len()).collect()
        } else {
            (0..statics.len()).rev().collect()
        };
        for si in order {
            let s = &statics[si];
            rig.apply(s)?;
            for (wi, w) in workloads.iter().enumerate() {
                let p = rig.measure(&rig.dev_of(s), &w.fio)?;
                eprintln!(
                    "bench: {} / {} [{}]: {:.1} MiB/s, {:.1} KiB, {:.0}% merged",
                    w.case,
                    s.name,
                    s.describe(),
                    p.mib_s,
                    p.avg_request_kib,
                    p.merge_pct
                );
                samples.entry((si, wi)).or_default().push(p);
            }
        }
        if forward {
            run_tuned(&mut runs)?;
        }
    }
    let mut rows = vec![];
    for (wi, w) in workloads.iter().enumerate() {
        let mut best: Option<(usize, Point)> = None;
        let mut grid_rows = vec![];
        for (si, s) in statics.iter().enumerate() {
            let p = Point::median_of(&samples[&(si, wi)]);
            if best.as_ref().is_none_or(|(_, b)| p.mib_s > b.mib_s) {
                best = Some((si, p.clone()));
            }
            let named = Static::standard(0).iter().any(|x| x.name == s.name);
            let row = Row::new(&w.case, if named { &s.name } else { "grid" }, p)
                .with("setting", json!(rig.describe(s)));
            if named {
                rows.push(row);
            } else {
                grid_rows.push(row.with("label", json!(s.name)));
            }
        }
        if let Some((si, p)) = best {
            rows.push(
                Row::new(&w.case, "oracle", p)
                    .with("setting", json!(rig.describe(&statics[si])))
                    .with("label", json!("oracle")),
            );
        }
        for (ti, t) in tuned.iter().enumerate() {
            let rounds: Vec<Ours> = runs[ti].iter().map(|r| r[wi].clone()).collect();
            rows.push(ours_row(&w.case, t.name, &across_rounds(&rounds)));
        }
        rows.extend(grid_rows);
    }
    Ok(rows)
}

/// A daemon configuration's runs of one workload as one: every point,
/// the median settle times (settled only if every run was), the settings
/// each run ended on, and the decisions of each run.
fn across_rounds(rounds: &[Ours]) -> Ours {
    let pts = rounds.iter().flat_map(|r| r.pts.clone()).collect();
    let mut settles: Vec<f64> = rounds.iter().map(|r| r.settled.settle_s).collect();
    // A run that kept nothing kept it at 0 s.
    let mut kept: Vec<f64> = rounds
        .iter()
        .map(|r| r.settled.kept_s.unwrap_or(0.0))
        .collect();
    let mut settings: Vec<String> = vec![];
    for r in rounds {
        if !settings.contains(&r.settings) {
            settings.push(r.settings.clone());
        }
    }
    let log = if rounds.len() == 1 {
        rounds[0].log.clone()
    } else {
        rounds
            .iter()
            .enumerate()
            .flat_map(|(i, r)| r.log.iter().map(move |l| format!("[round {}] {l}", i + 1)))
            .collect()
    };
    Ours {
        pts,
        settled: Settled {
            settle_s: median(&mut settles),
            kept_s: rounds
                .iter()
                .any(|r| r.settled.kept_s.is_some())
                .then(|| median(&mut kept)),
            settled: rounds.iter().all(|r| r.settled.settled),
        },
        settings: settings.join(" | "),
        log,
    }
}

/// How a daemon run came to rest (see [`Rig::wait_settled`]).
#[derive(Clone, Copy, Debug)]
pub struct Settled {
    /// Seconds to its last decision (kept or reverted), or the whole wait
    /// when it did not settle.
    pub settle_s: f64,
    /// Seconds to its last kept change; `None`: nothing kept.
    pub kept_s: Option<f64>,
    pub settled: bool,
}

/// A daemon run of one workload: its points, how it settled, the settings
/// it ended on and its decisions.
#[derive(Clone, Debug)]
struct Ours {
    pts: Vec<Point>,
    settled: Settled,
    settings: String,
    log: Vec<String>,
}

/// The row of a daemon run: median, settle times, settings, decisions.
fn ours_row(case: &str, config: &str, o: &Ours) -> Row {
    let r1 = |x: f64| json!((x * 10.0).round() / 10.0);
    Row::new(case, config, Point::median_of(&o.pts))
        .with("settle_s", r1(o.settled.settle_s))
        .with("kept_s", o.settled.kept_s.map_or(Value::Null, r1))
        .with("settled", json!(o.settled.settled))
        .with("setting", json!(o.settings))
        .with("decisions", json!(o.log))
}

/// The settle target for every daemon row of a scenario: its last kept
/// change within 15 s of the workload's start, so a tuner that finds the
/// right setting late does not pass for one that finds it at all.
pub fn settle_verdicts(r: &mut Report) {
    let lines: Vec<(String, bool)> = r
        .rows
        .iter()
        .filter(|x| x.config.starts_with("pathpilot"))
        .map(|x| {
            let kept = x.extra.get("kept_s").and_then(|v| v.as_f64());
            let what = match kept {
                Some(k) => format!("{k:.0} s"),
                None => "nothing kept".into(),
            };
            (
                format!(
                    "{} / {}: last kept change within 15 s: {what}",
                    x.case, x.config
                ),
                kept.is_none_or(|k| k <= 15.0),
            )
        })
        .collect();
    for (what, met) in lines {
        r.verdict(what, met);
    }
}

/// The daemon from `start` (the map's defaults when `None`): for each
/// workload, run it until the tuner settles, then measure it `measures`
/// times with the daemon running.
fn tune_and_measure_from(
    rig: &Rig,
    workloads: &[Workload],
    start: Option<&Static>,
    measures: usize,
) -> Result<Vec<Ours>> {
    rig.start_tuning_from(start)?;
    let mut out = vec![];
    let mut seen = 0;
    for w in workloads {
        let since = Instant::now();
        let job = rig.start_load(&w.fio)?;
        let (settled, n) = rig.wait_settled(since, seen)?;
        rig.stop_load(&job)?;
        let log = rig.decisions(seen)?;
        seen = n;
        let settings = show_settings(&rig.settings()?);
        eprintln!(
            "bench: {} / pathpilot: {} in {:.0} s, last kept change at {} ({settings})\n  {}",
            w.case,
            if settled.settled {
                "settled"
            } else {
                "NOT settled"
            },
            settled.settle_s,
            settled
                .kept_s
                .map_or("-".to_string(), |k| format!("{k:.0} s")),
            log.join("\n  ")
        );
        let mut pts = vec![];
        for _ in 0..measures {
            let p = rig.measure(&rig.dm, &w.fio)?;
            eprintln!("bench: {} / pathpilot: {:.1} MiB/s", w.case, p.mib_s);
            pts.push(p);
        }
        out.push(Ours {
            pts,
            settled,
            settings,
            log,
        });
    }
    rig.stop_daemon()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fio_and_stat_parsing() {
        let fio = r#"{"jobs":[{"read":{"bw":20480,"iops":20.0,"clat_ns":{"percentile":{"99.000000":50000000}}},"write":{"bw":0,"iops":0.0}}]}"#;
        let (mib, iops, p99) = parse_fio(fio).unwrap();
        assert_eq!((mib, iops, p99), (20.0, 20.0, 50.0));
        let snaps = "SB dm-0 10 0 80 0 0 0 0 0 0 0 0\nSB sda 5 0 40 0 0 0 0 0 0 0 0 0x5\n\
                     SA dm-0 20 10 240 0 0 0 0 0 0 0 0\nSA sda 17 0 120 0 0 0 0 0 0 0 0 0x9\n";
        let mut p = Point::default();
        stat_figures(snaps, "dm-0", &["sda".into()], 2.0, &mut p);
        // 10 requests of 160 sectors: 8 KiB each; 10 merged of 20 bios.
        assert_eq!(p.avg_request_kib, 8.0);
        assert_eq!(p.merge_pct, 50.0);
        // 80 sectors over 4 SCSI commands; 8 bounced issues in 2 s.
        assert_eq!(p.path_avg_request_kib, Some(10.0));
        assert_eq!(p.bounces_s, Some(4.0));
    }
}
