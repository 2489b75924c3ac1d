//! The benchmark pages under `docs/benchmarks/`. Every bench writes its
//! run to `target/bench/NAME.json` (with the date, the machine and the
//! command line under `"run"`); `cargo xtask bench ... --write-docs`, or
//! `cargo xtask bench docs` afterwards, renders the latest table of each
//! run into `docs/benchmarks/NAME.md` between [`BEGIN`] and [`END`], so a
//! page always shows the last run and git keeps the earlier ones.
//!
//! [`render`] and [`splice`] are pure (JSON in, markdown out); only
//! [`run_info`] looks at the machine.
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use pathpilot_testbed::dirs::workspace_root;
use pathpilot_testbed::figures::median;

/// The line before a page's latest table.
pub const BEGIN: &str = "<!-- bench:latest:begin -->";
/// The line after it.
pub const END: &str = "<!-- bench:latest:end -->";

/// Every bench that writes a page: `bench mpath`'s scenarios, then the
/// benches of their own.
pub const PAGES: &[&str] = &[
    "asym", "stream", "merge", "switch", "overhead", "repeat", "marginal", "handover", "openloop",
    "observer", "reload", "scale",
];

/// The page of bench `name`, from the workspace root.
pub fn page_path(name: &str) -> PathBuf {
    workspace_root().join(format!("docs/benchmarks/{name}.md"))
}

/// The JSON a bench wrote for `name`.
pub fn json_path(name: &str) -> PathBuf {
    workspace_root().join(format!("target/bench/{name}.json"))
}

/// What a run records about itself: the date (UTC), the machine and the
/// command line that made it.
pub fn run_info() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|r| r.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let args: Vec<String> = std::env::args()
        .skip(1)
        .map(|a| {
            if a.is_empty() || a.contains(char::is_whitespace) {
                format!("{a:?}")
            } else {
                a
            }
        })
        .collect();
    json!({
        "date": civil_date(secs),
        "machine": {"cpu": cpu, "cores": cores, "kernel": kernel},
        "command": format!("cargo xtask {}", args.join(" ")),
    })
}

/// `YYYY-MM-DD` (UTC) of a Unix time.
pub fn civil_date(unix_secs: u64) -> String {
    // Days to a proleptic Gregorian date (Howard Hinnant's algorithm).
    let z = (unix_secs / 86400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Replaces what lies between the page's markers with `block`.
pub fn splice(page: &str, block: &str) -> Result<String> {
    let b = page
        .find(BEGIN)
        .with_context(|| format!("the page has no {BEGIN} line"))?;
    let e = page
        .find(END)
        .with_context(|| format!("the page has no {END} line"))?;
    if e < b {
        bail!("{END} comes before {BEGIN}");
    }
    Ok(format!(
        "{}{BEGIN}\n\n{}\n\n{}",
        &page[..b],
        block.trim(),
        &page[e..]
    ))
}

/// The markdown of a run's latest table: a line on when, where and how it
/// ran, the table, and its targets and notes.
pub fn render(name: &str, v: &Value) -> Result<String> {
    let mut out = vec![run_line(v)];
    if v.get("scenario").is_some() {
        mpath(v, &mut out)?;
    } else {
        match name {
            "observer" => observer(v, &mut out)?,
            "scale" => scale(v, &mut out)?,
            "reload" => reload(v, &mut out)?,
            _ => bail!("no page layout for bench {name:?}"),
        }
    }
    Ok(out.join("\n\n") + "\n")
}

/// `Recorded on DATE by `COMMAND` (N s), on CPU (N cores), Linux KERNEL.`
fn run_line(v: &Value) -> String {
    let run = &v["run"];
    let Some(date) = run["date"].as_str() else {
        return "Date and machine not recorded.".into();
    };
    let mut s = format!("Recorded on {date}");
    if let Some(c) = run["command"].as_str() {
        s.push_str(&format!(" by `{c}`"));
    }
    if let Some(e) = v["elapsed_s"].as_f64() {
        s.push_str(&format!(" ({e:.0} s)"));
    }
    let m = &run["machine"];
    s.push_str(&format!(
        ", on {} ({} cores), Linux {}.",
        m["cpu"].as_str().unwrap_or("an unknown CPU"),
        m["cores"].as_u64().unwrap_or(0),
        m["kernel"].as_str().unwrap_or("unknown")
    ));
    s
}

/// A number with `d` decimals, `-` for none.
fn num(v: &Value, d: usize) -> String {
    match v.as_f64() {
        Some(x) if x.is_finite() => format!("{x:.d$}"),
        _ => "-".into(),
    }
}

/// A markdown table; `right` says which columns hold figures.
fn table(head: &[&str], right: &[bool], rows: &[Vec<String>]) -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut t = format!(
        "| {} |\n|{}|\n",
        head.join(" | "),
        right
            .iter()
            .map(|r| if *r { "---:" } else { "---" })
            .collect::<Vec<_>>()
            .join("|")
    );
    for r in rows {
        t.push_str(&format!(
            "| {} |\n",
            r.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")
        ));
    }
    t.trim_end().to_string()
}

/// A bulleted list, or nothing.
fn list(head: &str, items: &[String], out: &mut Vec<String>) {
    if !items.is_empty() {
        let body: Vec<String> = items.iter().map(|i| format!("- {i}")).collect();
        out.push(format!("{head}\n\n{}", body.join("\n")));
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str().map(str::to_string))
        .collect()
}

/// `bench mpath`'s scenarios: one row per case and configuration.
fn mpath(v: &Value, out: &mut Vec<String>) -> Result<()> {
    let rows = v["rows"].as_array().context("no rows")?;
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut setting = r["setting"].as_str().unwrap_or("").to_string();
            if let Some(s) = r["settle_s"].as_f64() {
                let kept = match r["kept_s"].as_f64() {
                    Some(k) => format!("last kept {k:.0} s"),
                    None => "nothing kept".into(),
                };
                setting.push_str(&format!(" settle {s:.0} s, {kept}"));
                if r["settled"] == json!(false) {
                    setting.push_str(" (not settled)");
                }
            }
            vec![
                r["case"].as_str().unwrap_or("").to_string(),
                r["config"].as_str().unwrap_or("").to_string(),
                num(&r["mib_s"], 1),
                num(&r["iops"], 0),
                num(&r["avg_request_kib"], 1),
                num(&r["merge_pct"], 1),
                num(&r["lat_p99_ms"], 1),
                num(&r["path_avg_request_kib"], 1),
                setting.trim().to_string(),
            ]
        })
        .collect();
    out.push(table(
        &[
            "case", "config", "MiB/s", "IOPS", "req KiB", "merge %", "p99 ms", "path KiB",
            "setting",
        ],
        &[false, false, true, true, true, true, true, true, false],
        &body,
    ));
    let targets: Vec<String> = v["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let verdict = match t["verdict"].as_str() {
                Some("met") => "met",
                Some("missed") => "**MISSED**",
                _ => "INCONCLUSIVE",
            };
            format!("{verdict}: {}", t["target"].as_str().unwrap_or(""))
        })
        .collect();
    list("Targets:", &targets, out);
    list("Notes:", &strings(&v["notes"]), out);
    Ok(())
}

/// `bench observer`: one row per configuration, medians over the rounds.
fn observer(v: &Value, out: &mut Vec<String>) -> Result<()> {
    let rows = v["configurations"]
        .as_array()
        .context("no configurations")?;
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let name = r["configuration"].as_str().unwrap_or("").to_string();
            let mut iops: Vec<f64> = r["iops"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_f64)
                .collect();
            let lost = if name == "bare" {
                "-".to_string()
            } else if r["iops_lost_measurable"] == json!(false) {
                format!("{}% (inconclusive)", num(&r["iops_lost_pct"], 1))
            } else {
                format!("{}%", num(&r["iops_lost_pct"], 1))
            };
            vec![
                name,
                num(&json!(median(&mut iops)), 0),
                num(&r["ns_per_io_median"], 0),
                lost,
                num(&r["iops_lost_ci95_half_width"], 1),
            ]
        })
        .collect();
    out.push(table(
        &["configuration", "IOPS", "eBPF ns/I/O", "IOPS lost", "+-95%"],
        &[false, true, true, true, true],
        &body,
    ));
    let programs: Vec<String> = v["programs"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, p)| Some(format!("`{k}`: {}", p.as_str()?)))
        .collect();
    list("Per program (the last round):", &programs, out);
    list("Targets:", &strings(&v["targets"]), out);
    list("Notes:", &strings(&v["notes"]), out);
    if v["collector_cpu_s_per_min"].is_number() {
        out.push(format!(
            "Collector (`pathpilot stat` at 1 s intervals under the same load): {} CPU s per \
             minute, peak RSS {} MiB (steady {} MiB; target < 20 MiB).",
            num(&v["collector_cpu_s_per_min"], 3),
            num(&v["collector_peak_rss_mib"], 1),
            num(&v["collector_rss_running_max_mib"], 1)
        ));
    }
    Ok(())
}

/// `bench scale`: one row per daemon, medians over the rounds.
fn scale(v: &Value, out: &mut Vec<String>) -> Result<()> {
    let rows = v["rows"].as_array().context("no rows")?;
    let pct = |x: &Value| format!("{}%", num(x, 1));
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r["daemon"].as_str().unwrap_or("").to_string(),
                num(&r["ready_s"], 1),
                pct(&r["cpu_idle_pct"]),
                pct(&r["cpu_load_pct"]),
                pct(&r["cpu_steady_pct"]),
                r["converged"].as_str().unwrap_or("-").to_string(),
                num(&r["threads"], 0),
                num(&r["rss_mib"], 1),
                num(&r["window_cpu_ms"], 1),
                num(&r["scan_cpu_ms_per_min"], 0),
            ]
        })
        .collect();
    if let (Some(l), Some(p)) = (v["luns"].as_u64(), v["ports"].as_u64()) {
        out.push(format!(
            "{l} LUNs x {p} paths, {} s per figure, {} round(s), medians; CPU is % of one \
             emulated core.",
            num(&v["secs"], 0),
            num(&v["rounds"], 0)
        ));
    }
    out.push(table(
        &[
            "daemon",
            "ready s",
            "CPU idle",
            "CPU load",
            "CPU steady",
            "converged",
            "threads",
            "RSS MiB",
            "window ms",
            "scan ms/min",
        ],
        &[false, true, true, true, true, true, true, true, true, true],
        &body,
    ));
    list("Targets:", &strings(&v["targets"]), out);
    Ok(())
}

/// `bench reload`: one row per load level and method.
fn reload(v: &Value, out: &mut Vec<String>) -> Result<()> {
    let rows = v["rows"].as_array().context("no rows")?;
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r["load"].as_str().unwrap_or("").to_string(),
                r["method"].as_str().unwrap_or("").to_string(),
                num(&r["reader_ms"]["p50"], 1),
                num(&r["reader_ms"]["p99"], 1),
                num(&r["ioctl_stall_ms"]["p50"], 1),
                num(&r["ioctl_stall_ms"]["p99"], 1),
                num(&r["no_reload_latency_ms"]["p99"], 1),
            ]
        })
        .collect();
    out.push(format!(
        "{} paths x {} MiB/s, {} reloads a row; ms; reader = the worst latency of the I/O in \
         flight across a reload; guest kernel {}.",
        num(&v["paths"], 0),
        num(&v["cap_mib"], 0),
        rows.first().map_or("-".into(), |r| num(&r["reloads"], 0)),
        v["kernel"].as_str().unwrap_or("unknown")
    ));
    out.push(table(
        &[
            "load",
            "method",
            "reader p50",
            "reader p99",
            "ioctl p50",
            "ioctl p99",
            "no-reload p99",
        ],
        &[false, false, true, true, true, true, true],
        &body,
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> Value {
        json!({"date": "2026-12-07", "command": "cargo xtask bench mpath --scenario asym",
               "machine": {"cpu": "AMD EPYC 7B13", "cores": 2, "kernel": "6.18.1"}})
    }

    #[test]
    fn dates_are_utc_calendar_days() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(951_782_400), "2000-02-29");
        assert_eq!(civil_date(1_796_687_999), "2026-12-07");
        assert_eq!(civil_date(1_796_688_000), "2026-12-08");
    }

    #[test]
    fn a_scenario_renders_its_rows_targets_and_notes() {
        let v = json!({
            "scenario": "asym", "elapsed_s": 794.2, "run": run(),
            "rows": [
                {"case": "64k randread qd16", "config": "round-robin", "mib_s": 39.71,
                 "iops": 634.4, "avg_request_kib": 64.0, "merge_pct": 0.0, "lat_p99_ms": 99.1,
                 "path_avg_request_kib": 64.0, "setting": "round-robin"},
                {"case": "64k randread qd16", "config": "pathpilot", "mib_s": 149.8,
                 "iops": 2395.0, "avg_request_kib": 64.0, "merge_pct": 0.0, "lat_p99_ms": null,
                 "setting": "service-time | queue-length", "settle_s": 48.0, "kept_s": null},
                {"case": "c", "config": "pathpilot from rr", "mib_s": 1.0, "iops": 1.0,
                 "avg_request_kib": 1.0, "merge_pct": 0.0, "lat_p99_ms": 1.0,
                 "setting": "st", "settle_s": 61.4, "kept_s": 27.0, "settled": false}
            ],
            "targets": [
                {"target": "pathpilot >= 3x round-robin: 3.77x", "met": true, "verdict": "met"},
                {"target": "last kept change within 15 s: 27 s", "met": false, "verdict": "missed"},
                {"target": "loss <= 5%", "met": null, "verdict": "inconclusive"}
            ],
            "notes": ["one note"]
        });
        let md = render("asym", &v).unwrap();
        assert!(
            md.starts_with(
                "Recorded on 2026-12-07 by `cargo xtask bench mpath --scenario asym` (794 s), on \
             AMD EPYC 7B13 (2 cores), Linux 6.18.1.\n\n| case | config | MiB/s |"
            ),
            "{md}"
        );
        assert!(md.contains(
            "| 64k randread qd16 | round-robin | 39.7 | 634 | 64.0 | 0.0 | 99.1 | 64.0 | round-robin |"
        ), "{md}");
        // A cell's `|` is escaped; a missing figure is `-`; the settle
        // time follows the setting as the bench prints it.
        assert!(md.contains(
            "| 149.8 | 2395 | 64.0 | 0.0 | - | - | service-time \\| queue-length settle 48 s, nothing kept |"
        ), "{md}");
        assert!(
            md.contains("st settle 61 s, last kept 27 s (not settled) |"),
            "{md}"
        );
        assert!(
            md.contains(
                "Targets:\n\n- met: pathpilot >= 3x round-robin: 3.77x\n- **MISSED**: last kept"
            ),
            "{md}"
        );
        assert!(md.contains("- INCONCLUSIVE: loss <= 5%"), "{md}");
        assert!(md.ends_with("Notes:\n\n- one note\n"), "{md}");
    }

    #[test]
    fn the_other_benches_render_their_own_columns() {
        let v = json!({"run": run(), "rounds": 3, "configurations": [
            {"configuration": "bare", "iops": [3.0, 1.0, 2.0], "ns_per_io_median": 0.0,
             "iops_lost_pct": 0.0, "iops_lost_ci95_half_width": 0.0, "iops_lost_measurable": true},
            {"configuration": "pathpilot", "iops": [2.0, 1.0], "ns_per_io_median": 304.4,
             "iops_lost_pct": -1.12, "iops_lost_ci95_half_width": 3.9, "iops_lost_measurable": false}],
            "programs": {"pathpilot": "block_rq_complete 116 ns x 1.00"},
            "targets": ["target met: x"], "collector_cpu_s_per_min": 0.0591,
            "collector_peak_rss_mib": 13.81, "collector_rss_running_max_mib": 7.6});
        let md = render("observer", &v).unwrap();
        assert!(md.contains("| bare | 2 | 0 | - | 0.0 |"), "{md}");
        assert!(
            md.contains("| pathpilot | 2 | 304 | -1.1% (inconclusive) | 3.9 |"),
            "{md}"
        );
        assert!(
            md.contains("- `pathpilot`: block_rq_complete 116 ns x 1.00"),
            "{md}"
        );
        assert!(md.contains("- target met: x"), "{md}");
        assert!(
            md.contains("0.059 CPU s per minute, peak RSS 13.8 MiB (steady 7.6 MiB"),
            "{md}"
        );

        let v = json!({"run": run(), "luns": 16, "ports": 4, "secs": 20, "rounds": 1, "rows": [
            {"daemon": "multipathd, polling_interval 1", "ready_s": 3.75, "cpu_idle_pct": 3.5,
             "cpu_load_pct": 2.6, "cpu_steady_pct": 2.9, "threads": 8.0, "rss_mib": 28.0,
             "window_cpu_ms": null, "scan_cpu_ms_per_min": null}],
            "targets": ["target met: idle"]});
        let md = render("scale", &v).unwrap();
        assert!(
            md.contains("16 LUNs x 4 paths, 20 s per figure, 1 round(s)"),
            "{md}"
        );
        assert!(md.contains(
            "| multipathd, polling_interval 1 | 3.8 | 3.5% | 2.6% | 2.9% | - | 8 | 28.0 | - | - |"
        ), "{md}");

        let v = json!({"run": run(), "paths": 4, "cap_mib": 20.0, "kernel": "6.1.0-28-amd64",
            "rows": [{"load": "idle", "method": "dmsetup", "reloads": 40,
                      "reader_ms": {"p50": 16.1, "p99": 102.5}, "ioctl_stall_ms": null,
                      "no_reload_latency_ms": {"p99": 1.23}}]});
        let md = render("reload", &v).unwrap();
        assert!(md.contains("4 paths x 20 MiB/s, 40 reloads a row"), "{md}");
        assert!(
            md.contains("| idle | dmsetup | 16.1 | 102.5 | - | - | 1.2 |"),
            "{md}"
        );

        assert!(render("nosuch", &json!({})).is_err());
        assert!(
            render("reload", &json!({"rows": []}))
                .unwrap()
                .starts_with("Date and machine not recorded.")
        );
    }

    #[test]
    fn the_block_replaces_only_what_lies_between_the_markers() {
        let page = format!("# asym\n\nintro\n\n{BEGIN}\nold table\n{END}\n\nafter\n");
        let new = splice(&page, "new table\n").unwrap();
        assert_eq!(
            new,
            format!("# asym\n\nintro\n\n{BEGIN}\n\nnew table\n\n{END}\n\nafter\n")
        );
        assert_eq!(splice(&new, "new table").unwrap(), new, "idempotent");
        assert!(splice("no markers", "x").is_err());
        assert!(splice(&format!("{END}\n{BEGIN}\n"), "x").is_err());
    }

    #[test]
    fn every_page_has_its_markers() {
        for name in PAGES {
            let p = page_path(name);
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            splice(&text, "x").unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        }
    }
}
