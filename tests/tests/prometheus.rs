//! The Prometheus rules and the Grafana dashboard, checked by Prometheus's
//! own tool: `promtool check rules` (syntax and PromQL), `promtool test
//! rules` (every alert fires on a failing map and stays quiet on a healthy
//! one and through a planned reload), and every dashboard query parsed as
//! PromQL. `cargo xtask setup` installs promtool (Debian's prometheus).
use std::{
    path::{Path, PathBuf},
    process::Command,
};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn prometheus_dir() -> PathBuf {
    root().join("dashboards/prometheus")
}

/// Runs promtool with `args` in `dir`; its output, or a failure that says
/// what it printed.
fn promtool(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("promtool")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("promtool runs (run `cargo xtask setup`: Debian's prometheus package has it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn the_rules_are_valid_prometheus_rules() {
    let out = promtool(
        &prometheus_dir(),
        &[
            "check",
            "rules",
            "pathpilot-alerts.yml",
            "pathpilot-records.yml",
        ],
    );
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn every_alert_fires_on_failure_and_stays_quiet_otherwise() {
    let dir = prometheus_dir().join("tests");
    let out = promtool(&dir, &["test", "rules", "pathpilot-alerts-test.yml"]);
    assert!(out.contains("SUCCESS"), "{out}");
    // Every alert of the rules has a test that expects it to fire.
    let rules = std::fs::read_to_string(prometheus_dir().join("pathpilot-alerts.yml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("pathpilot-alerts-test.yml")).unwrap();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 8, "{alerts:?}");
    for a in alerts {
        // The text from "alertname: A" to the next evaluation.
        let tested = tests.split("alertname: ").skip(1).any(|t| {
            let body = t.split("- eval_time").next().unwrap_or("");
            body.starts_with(&format!("{a}\n")) && body.contains("exp_labels")
        });
        assert!(tested, "no test expects {a} to fire");
    }
}

/// The dashboard's queries with Grafana's variables given values.
fn dashboard_queries(json: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(json).expect("the dashboard is JSON");
    let mut out = vec![];
    let mut visit = vec![&v];
    while let Some(x) = visit.pop() {
        match x {
            serde_json::Value::Object(m) => {
                if let Some(e) = m.get("expr").and_then(|e| e.as_str()) {
                    out.push(
                        e.replace("$__rate_interval", "5m")
                            .replace("$__interval", "1m")
                            .replace("$instance", ".*")
                            .replace("$map", ".*"),
                    );
                }
                visit.extend(m.values());
            }
            serde_json::Value::Array(a) => visit.extend(a),
            _ => {}
        }
    }
    out
}

#[test]
fn every_dashboard_query_parses_as_promql() {
    let json = std::fs::read_to_string(root().join("dashboards/grafana/pathpilot.json")).unwrap();
    let queries = dashboard_queries(&json);
    assert!(queries.len() > 20, "{}", queries.len());
    // promtool parses PromQL in rule files: each query becomes a rule.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, q) in queries.iter().enumerate() {
        assert!(!q.contains('$'), "a Grafana variable left in {q}");
        let q = serde_json::to_string(q).unwrap();
        rules.push_str(&format!(
            "      - record: dashboard:query_{i}\n        expr: {q}\n"
        ));
    }
    let dir = std::env::temp_dir().join(format!("pathpilot-dashboard-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("queries.yml"), rules).unwrap();
    let out = promtool(&dir, &["check", "rules", "queries.yml"]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", queries.len())),
        "{out}"
    );
}

#[test]
fn a_broken_query_is_caught() {
    // The check above fails on a query that is not PromQL.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    rules.push_str("      - record: dashboard:broken\n        expr: \"sum by (map (x)\"\n");
    let dir = std::env::temp_dir().join(format!("pathpilot-broken-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("queries.yml"), rules).unwrap();
    let out = Command::new("promtool")
        .current_dir(&dir)
        .args(["check", "rules", "queries.yml"])
        .output()
        .expect("promtool runs");
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!out.status.success());
}

#[test]
fn the_rules_evaluated_on_a_scrape_name_what_fires() {
    use pathpilot_tests::prom::firing;
    let scrape = |sdc_up: u8| {
        format!(
            "# TYPE pathpilot_path_up gauge\n\
             pathpilot_path_up{{map=\"mpatha\",wwid=\"w\",path=\"sdb\"}} 1\n\
             pathpilot_path_up{{map=\"mpatha\",wwid=\"w\",path=\"sdc\"}} {sdc_up}\n\
             # TYPE pathpilot_map_paths gauge\n\
             pathpilot_map_paths{{map=\"mpatha\",wwid=\"w\"}} 2\n"
        )
    };
    assert!(firing(&scrape(1), "PathpilotPathDown").unwrap().is_empty());
    let down = firing(&scrape(0), "PathpilotPathDown").unwrap();
    assert_eq!(down.len(), 1, "{down:?}");
    assert_eq!(down[0]["path"], "sdc");
    assert_eq!(down[0]["instance"], "testbed");
    assert_eq!(down[0]["severity"], "warning");
    let degraded = firing(&scrape(0), "PathpilotMapDegraded").unwrap();
    assert_eq!(degraded.len(), 1, "{degraded:?}");
    assert_eq!(degraded[0]["map"], "mpatha");
}
