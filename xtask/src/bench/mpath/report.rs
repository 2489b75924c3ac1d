//! What a scenario produced: measured points, rows, targets met or
//! missed; printed as a table, saved as JSON, a text table and a chart.
use std::collections::BTreeMap;

use anyhow::Result;
use pathpilot_testbed::Link;
use pathpilot_testbed::dirs::workspace_root;
use pathpilot_testbed::figures::median;
use serde_json::{Value, json};

use super::chart;
use super::opts::Opts;
use crate::bench::save;

/// One measured point.
#[derive(Clone, Debug, Default)]
pub struct Point {
    pub mib_s: f64,
    pub iops: f64,
    pub lat_p99_ms: f64,
    /// fio's median and 99.9th percentile completion latency, where kept.
    pub lat_p50_ms: Option<f64>,
    pub lat_p999_ms: Option<f64>,
    /// At the measured device (the dm device, or the raw path).
    pub avg_request_kib: f64,
    pub merge_pct: f64,
    /// Bytes per SCSI command over all paths (iorequest_cnt).
    pub path_avg_request_kib: Option<f64>,
    /// Clone issues that bounced off a full path, per second.
    pub bounces_s: Option<f64>,
}

impl Point {
    /// A point of fio's figures alone, no block counters around it.
    pub fn fio_only(mib_s: f64, iops: f64, lat_p99_ms: f64) -> Point {
        Point {
            mib_s,
            iops,
            lat_p99_ms,
            avg_request_kib: f64::NAN,
            merge_pct: f64::NAN,
            ..Point::default()
        }
    }

    pub fn median_of(v: &[Point]) -> Point {
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
            lat_p50_ms: fo(&|p| p.lat_p50_ms),
            lat_p999_ms: fo(&|p| p.lat_p999_ms),
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
        if let Some(x) = self.p.lat_p50_ms {
            m.insert("lat_p50_ms".into(), r2(x));
        }
        if let Some(x) = self.p.lat_p999_ms {
            m.insert("lat_p999_ms".into(), r2(x));
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

    pub fn finish(&self, o: &Opts, secs: f64) -> Result<()> {
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
            "{:<18} {:<23} {:>8} {:>8} {:>8} {:>7} {:>8} {:>8}  {}\n",
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
                "{:<18} {:<23} {:>8} {:>8} {:>8} {:>7} {:>8} {:>8}  {setting}{settle}\n",
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

/// The settle target for every daemon row of a scenario: its last kept
/// change within 15 s of the workload's start, so a tuner that finds the
/// right setting late does not pass for one that finds it at all.
pub fn settle_verdicts(r: &mut Report) {
    let lines: Vec<(String, bool)> = r
        .rows
        .iter()
        .filter(|x| x.config.starts_with("pathpilot") && !x.extra.contains_key("beside"))
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
