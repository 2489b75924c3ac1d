//! The daemon's metrics as Prometheus sees them: a scrape of the guest's
//! endpoint, checked by promtool, and the shipped alerting rules evaluated
//! on it (promtool's rule tests, fed the scrape as series that hold their
//! value for a quarter of an hour).
use std::{collections::BTreeMap, path::PathBuf, process::Command};

use anyhow::{Context, Result, bail};

use pathpilot_testbed::Testbed;

/// The metrics endpoint the tests' daemons listen on in the guest.
pub const ADDR: &str = "127.0.0.1:9777";

/// One scrape of the daemon's `/metrics` in the guest.
pub fn scrape(tb: &Testbed) -> Result<String> {
    tb.sh(&format!(
        "ip link set lo up 2>/dev/null; wget -q -O - http://{ADDR}/metrics"
    ))
}

/// `promtool check metrics` on `text`: its complaints, one a line (none
/// when the exposition is clean).
pub fn check_metrics(text: &str) -> Result<Vec<String>> {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("promtool runs (run `cargo xtask setup`: Debian's prometheus package has it)")?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&out.stderr).lines())
        .map(str::to_string)
        .filter(|l| !l.trim().is_empty())
        .collect())
}

/// The series of a scrape: `name{labels}` and value, comments left out.
pub fn samples(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            Some((series.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// A scrape's series by what they are about: (the host's, the maps',
/// the paths').
pub fn series_by_scope(text: &str) -> (usize, usize, usize) {
    let (mut host, mut map, mut path) = (0, 0, 0);
    for (s, _) in samples(text) {
        if s.contains("path=\"") {
            path += 1;
        } else if s.contains("map=\"") {
            map += 1;
        } else {
            host += 1;
        }
    }
    (host, map, path)
}

fn rules_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dashboards/prometheus")
}

/// The alerts named `alert` that the shipped rules fire on `scrape` once
/// it has held for 15 minutes (past every `for:`), as the label sets
/// Prometheus would give them (the target's `instance` is `testbed`,
/// its `job` `pathpilot`).
pub fn firing(scrape: &str, alert: &str) -> Result<Vec<BTreeMap<String, String>>> {
    let dir =
        std::env::temp_dir().join(format!("pathpilot-rules-{}-{}", std::process::id(), alert));
    std::fs::create_dir_all(&dir)?;
    let target = r#"instance="testbed",job="pathpilot""#;
    let mut series = vec![format!(
        "      - series: 'up{{{target}}}'\n        values: '1x30'\n"
    )];
    for (s, v) in samples(scrape) {
        if !v.is_finite() {
            continue;
        }
        let s = match s.split_once('{') {
            Some((name, rest)) => format!("{name}{{{target},{rest}"),
            None => format!("{s}{{{target}}}"),
        };
        series.push(format!(
            "      - series: '{}'\n        values: '{v}x30'\n",
            s.replace('\'', "''")
        ));
    }
    let test = format!(
        "rule_files:\n  - {alerts}\n  - {records}\nevaluation_interval: 30s\ntests:\n  \
         - interval: 30s\n    input_series:\n{series}    alert_rule_test:\n      \
         - eval_time: 15m\n        alertname: {alert}\n        exp_alerts: []\n",
        alerts = rules_dir().join("pathpilot-alerts.yml").display(),
        records = rules_dir().join("pathpilot-records.yml").display(),
        series = series.concat(),
    );
    std::fs::write(dir.join("test.yml"), test)?;
    let out = Command::new("promtool")
        .current_dir(&dir)
        .args(["test", "rules", "test.yml"])
        .output()
        .context("promtool runs")?;
    let _ = std::fs::remove_dir_all(&dir);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        return Ok(vec![]);
    }
    // No alert expected, so any that fires fails the test and is listed
    // under "got:" with its labels.
    let Some(got) = text.split("got:").nth(1) else {
        bail!("promtool failed without listing alerts:\n{text}");
    };
    Ok(got
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Labels:{"))
        .map(|l| {
            l.trim_end_matches('}')
                .split(", ")
                .filter_map(|kv| {
                    let (k, v) = kv.split_once('=')?;
                    Some((k.to_string(), v.trim_matches('"').to_string()))
                })
                .collect()
        })
        .collect())
}
