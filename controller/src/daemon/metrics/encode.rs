//! The exposition text of a [`DaemonStatus`]. Counters and histograms
//! come from the cumulative [`Totals`]; gauges from the last window. Every
//! family is written once with HELP and TYPE, even when it has no series,
//! so dashboards and alerts see a stable schema.
use std::fmt::Write as _;

use crate::{
    config::MetricsHistograms,
    ctl::status::{DaemonStatus, MapReport, PathReport, Totals},
};

/// Size buckets hold [2^k, 2^(k+1)) bytes, so `le` is 2^(k+1) - 1: exact,
/// where a bound of 2^(k+1) would wrongly claim the 2^(k+1)-byte requests
/// (requests are mostly exact powers of two). 1 KiB - 1 .. 32 MiB - 1.
const SIZE_LE_LOG2: std::ops::RangeInclusive<u32> = 10..=25;
/// Latency buckets hold [2^k, 2^(k+1)) ns; time is continuous, so the
/// exclusive bound 2^(k+1) ns is used as `le`. ~1 us .. ~17 s.
const LAT_LE_LOG2: std::ops::RangeInclusive<u32> = 10..=34;

/// A label value with `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn labels(pairs: &[(&str, &str)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// A sample value as Prometheus spells it (Rust writes `inf`, `NaN`).
fn num(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{v}")
    }
}

struct Out(String);

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &str, v: f64) {
        let _ = writeln!(self.0, "{name}{labels} {}", num(v));
    }

    /// A family with one series per item; `value` returns `None` to skip.
    fn each<T>(
        &mut self,
        name: &str,
        kind: &str,
        help: &str,
        items: &[(String, &T)],
        value: impl Fn(&T) -> Option<f64>,
    ) {
        self.family(name, kind, help);
        for (l, x) in items {
            if let Some(v) = value(x) {
                self.sample(name, &labels_with(l, &[]), v);
            }
        }
    }

    fn histogram(
        &mut self,
        name: &str,
        base: &str,
        hist: &[(u64, u64)],
        le_log2: &std::ops::RangeInclusive<u32>,
        le_of: impl Fn(u32) -> f64,
        sum: f64,
    ) {
        self.buckets(name, base, hist, le_log2, le_of);
        self.sample(&format!("{name}_sum"), &labels_with(base, &[]), sum);
    }

    /// A histogram's buckets and count (a histogram without a sum).
    fn buckets(
        &mut self,
        name: &str,
        base: &str,
        hist: &[(u64, u64)],
        le_log2: &std::ops::RangeInclusive<u32>,
        le_of: impl Fn(u32) -> f64,
    ) {
        // Bucket [low, 2 low), and [0, 2) for the first: counted in every
        // `le` at or above its last value.
        let high = |low: u64| if low == 0 { 2 } else { low.saturating_mul(2) };
        for k in le_log2.clone() {
            let bound = 1u64 << k;
            let c: u64 = hist
                .iter()
                .filter(|(low, _)| high(*low) <= bound)
                .map(|(_, c)| *c)
                .sum();
            let le = num(le_of(k));
            self.sample(
                &format!("{name}_bucket"),
                &labels_with(base, &[("le", &le)]),
                c as f64,
            );
        }
        let count: u64 = hist.iter().map(|(_, c)| *c).sum();
        self.sample(
            &format!("{name}_bucket"),
            &labels_with(base, &[("le", "+Inf")]),
            count as f64,
        );
        self.sample(
            &format!("{name}_count"),
            &labels_with(base, &[]),
            count as f64,
        );
    }
}

/// `{base,extra}` from an already rendered `{base}` (or "") and more pairs.
fn labels_with(base: &str, extra: &[(&str, &str)]) -> String {
    let more = labels(extra);
    match (base.is_empty(), more.is_empty()) {
        (true, _) => more,
        (false, true) => base.to_string(),
        (false, false) => format!("{},{}", &base[..base.len() - 1], &more[1..]),
    }
}

/// The device families shared by maps and paths (`what` is "map"/"path");
/// the histograms' series only with `histograms` (their families are
/// declared either way).
fn device_families(o: &mut Out, what: &str, items: &[(String, &Totals)], histograms: bool) {
    let hist_items = if histograms { items } else { &[] };
    let p = format!("pathpilot_{what}");
    o.each(
        &format!("{p}_read_bytes_total"),
        "counter",
        &format!("Bytes read through the {what} since the daemon started watching it."),
        items,
        |t| Some(t.read_bytes as f64),
    );
    o.each(
        &format!("{p}_write_bytes_total"),
        "counter",
        &format!("Bytes written through the {what} since the daemon started watching it."),
        items,
        |t| Some(t.write_bytes as f64),
    );
    let name = format!("{p}_ios_total");
    o.family(
        &name,
        "counter",
        &format!("Requests completed on the {what}, by direction."),
    );
    for (l, t) in items {
        o.sample(
            &name,
            &labels_with(l, &[("dir", "read")]),
            t.read_ios as f64,
        );
        o.sample(
            &name,
            &labels_with(l, &[("dir", "write")]),
            t.write_ios as f64,
        );
    }
    o.each(
        &format!("{p}_errors_total"),
        "counter",
        &format!("Requests on the {what} that completed with an error."),
        items,
        |t| Some(t.errors as f64),
    );
    o.each(
        &format!("{p}_merges_total"),
        "counter",
        &format!("Bios and requests merged into another request on the {what}."),
        items,
        |t| Some(t.merges as f64),
    );
    let name = format!("{p}_request_size_bytes");
    o.family(
        &name,
        "histogram",
        &format!("Size of the requests on the {what} (log2 buckets, le = 2^k - 1)."),
    );
    for (l, t) in hist_items {
        o.histogram(
            &name,
            l,
            &t.size_hist,
            &SIZE_LE_LOG2,
            |k| ((1u64 << k) - 1) as f64,
            (t.read_bytes + t.write_bytes) as f64,
        );
    }
    let name = format!("{p}_latency_seconds");
    o.family(
        &name,
        "histogram",
        &format!("Issue-to-completion time of the requests on the {what} (log2 buckets)."),
    );
    for (l, t) in hist_items {
        o.histogram(
            &name,
            l,
            &t.lat_hist,
            &LAT_LE_LOG2,
            |k| (1u64 << k) as f64 / 1e9,
            t.lat_sum_ns as f64 / 1e9,
        );
    }
}

/// The Prometheus text exposition (format 0.0.4) of a status.
pub fn render(s: &DaemonStatus) -> String {
    let mut o = Out(String::with_capacity(64 * 1024));
    o.family(
        "pathpilot_build_info",
        "gauge",
        "The daemon's version (always 1).",
    );
    o.sample(
        "pathpilot_build_info",
        &labels(&[("version", &s.version)]),
        1.0,
    );
    o.family(
        "pathpilot_daemon_start_time_seconds",
        "gauge",
        "When the daemon started, seconds since the epoch.",
    );
    o.sample("pathpilot_daemon_start_time_seconds", "", s.started_unix);
    o.family(
        "pathpilot_tuner_window_seconds",
        "gauge",
        "Length of the tuner's measuring window.",
    );
    o.sample("pathpilot_tuner_window_seconds", "", s.window_s);
    o.family(
        "pathpilot_tuner_decisions_total",
        "counter",
        "Tuner decisions since the daemon started, by outcome.",
    );
    let count = |o: &str| {
        s.decision_counts
            .iter()
            .filter(|(k, _)| k == o)
            .map(|(_, n)| *n)
            .sum::<u64>()
    };
    // Every outcome, as 0 until seen, so rates and alerts have a series
    // from the start.
    let outcomes = crate::tuner::Outcome::ALL.map(|o| o.word());
    for out in outcomes {
        let l = labels(&[("outcome", out)]);
        o.sample("pathpilot_tuner_decisions_total", &l, count(out) as f64);
    }
    for (k, n) in &s.decision_counts {
        if !outcomes.contains(&k.as_str()) {
            let l = labels(&[("outcome", k)]);
            o.sample("pathpilot_tuner_decisions_total", &l, *n as f64);
        }
    }

    o.family(
        "pathpilot_engine_seconds_total",
        "counter",
        "CPU time the daemon's engine thread spent since start, by kind of work.",
    );
    for (work, secs) in &s.engine_secs {
        o.sample(
            "pathpilot_engine_seconds_total",
            &labels(&[("work", work)]),
            *secs,
        );
    }

    o.family(
        "pathpilot_observed_ratio",
        "gauge",
        "Share of the last window the probes were attached: 1 unless observation is sampled \
         (config observe_duty); latency, sizes, order and errors cover this share.",
    );
    o.sample("pathpilot_observed_ratio", "", s.observed_pct / 100.0);
    o.family(
        "pathpilot_bpf_stats_enabled",
        "gauge",
        "1 while the kernel accounts eBPF programs' runs (kernel.bpf_stats_enabled), which \
         the program run figures need.",
    );
    if let Some(on) = s.bpf_stats {
        o.sample(
            "pathpilot_bpf_stats_enabled",
            "",
            if on { 1.0 } else { 0.0 },
        );
    }
    o.family(
        "pathpilot_bpf_program_runs_total",
        "counter",
        "Runs of each of the observer's eBPF programs while the kernel accounted them.",
    );
    for p in &s.bpf_programs {
        let l = labels(&[("program", &p.program)]);
        o.sample("pathpilot_bpf_program_runs_total", &l, p.runs as f64);
    }
    o.family(
        "pathpilot_bpf_program_run_seconds_total",
        "counter",
        "Time spent in each of the observer's eBPF programs while the kernel accounted it.",
    );
    for p in &s.bpf_programs {
        let l = labels(&[("program", &p.program)]);
        o.sample(
            "pathpilot_bpf_program_run_seconds_total",
            &l,
            p.run_ns as f64 / 1e9,
        );
    }

    let map_l = |m: &MapReport| labels(&[("map", &m.name), ("wwid", &m.wwid)]);
    let maps: Vec<(String, &MapReport)> = s.maps.iter().map(|m| (map_l(m), m)).collect();
    let map_totals: Vec<(String, &Totals)> =
        maps.iter().map(|(l, m)| (l.clone(), &m.totals)).collect();
    device_families(&mut o, "map", &map_totals, true);
    o.each(
        "pathpilot_map_inflight",
        "gauge",
        "Requests in flight on the map's dm device at the end of the last window.",
        &maps,
        |m| Some(m.rates.inflight as f64),
    );
    o.each(
        "pathpilot_map_paths",
        "gauge",
        "Paths in the map's table.",
        &maps,
        |m| Some(m.paths.len() as f64),
    );
    o.each(
        "pathpilot_map_managed",
        "gauge",
        "1 when pathpilot manages the map, 0 when it only observes it.",
        &maps,
        |m| Some(f64::from(u8::from(m.managed))),
    );
    o.each(
        "pathpilot_map_tuner_paused",
        "gauge",
        "1 while tuning of the map is paused.",
        &maps,
        |m| Some(f64::from(u8::from(m.paused))),
    );
    o.each(
        "pathpilot_map_queue_if_no_path",
        "gauge",
        "1 while the map queues I/O when it has no usable path (queue_if_no_path).",
        &maps,
        |m| Some(f64::from(u8::from(m.queue_if_no_path))),
    );
    o.family(
        "pathpilot_map_tuning_held_since_seconds",
        "gauge",
        "Since when tuning of the map has been held, seconds since the epoch, by reason: \
         outside_change (a change made outside pathpilot, until resumed) or pinned (knobs \
         an operator set, until released).",
    );
    for (l, m) in &maps {
        for (reason, since) in [
            ("outside_change", m.outside_change_since_unix),
            ("pinned", m.pinned_since_unix),
        ] {
            if let Some(t) = since {
                let l = labels_with(l, &[("reason", reason)]);
                o.sample("pathpilot_map_tuning_held_since_seconds", &l, t);
            }
        }
    }
    o.family(
        "pathpilot_map_knob",
        "gauge",
        "The map's numeric tuner knobs as read back from the kernel.",
    );
    for (l, m) in &maps {
        let Some(st) = &m.settings else { continue };
        for (knob, v) in [
            ("active_paths", st.active_paths as f64),
            ("max_sectors_kb", f64::from(st.max_sectors_kb)),
            ("nr_requests", f64::from(st.nr_requests)),
            ("queue_depth", f64::from(st.queue_depth)),
        ] {
            o.sample("pathpilot_map_knob", &labels_with(l, &[("knob", knob)]), v);
        }
    }
    o.family(
        "pathpilot_map_selector_info",
        "gauge",
        "The map's path selector (always 1).",
    );
    for (l, m) in &maps {
        let sel = labels_with(l, &[("selector", &m.selector)]);
        o.sample("pathpilot_map_selector_info", &sel, 1.0);
    }
    o.family(
        "pathpilot_map_scheduler_info",
        "gauge",
        "The I/O scheduler of the map's dm device (always 1).",
    );
    for (l, m) in &maps {
        if let Some(st) = &m.settings {
            let sch = labels_with(l, &[("scheduler", &st.scheduler)]);
            o.sample("pathpilot_map_scheduler_info", &sch, 1.0);
        }
    }

    let paths: Vec<(String, &PathReport)> = s
        .maps
        .iter()
        .flat_map(|m| {
            m.paths.iter().map(move |p| {
                let l = labels(&[("map", &m.name), ("wwid", &m.wwid), ("path", &p.name)]);
                (l, p)
            })
        })
        .collect();
    let path_totals: Vec<(String, &Totals)> =
        paths.iter().map(|(l, p)| (l.clone(), &p.totals)).collect();
    let detail = s.metrics_histograms;
    device_families(
        &mut o,
        "path",
        &path_totals,
        detail != MetricsHistograms::Maps,
    );
    o.each(
        "pathpilot_path_inflight",
        "gauge",
        "Requests in flight on the path at the end of the last window.",
        &paths,
        |p| Some(p.rates.inflight as f64),
    );
    o.each(
        "pathpilot_path_up",
        "gauge",
        "1 when device-mapper holds the path active, 0 when failed.",
        &paths,
        |p| Some(f64::from(u8::from(p.dm_state == "active"))),
    );
    o.each(
        "pathpilot_path_checker_ok",
        "gauge",
        "1 when the path checker's last verdict was ready.",
        &paths,
        |p| Some(f64::from(u8::from(p.checker == "ready"))),
    );
    o.each(
        "pathpilot_path_checker_duration_seconds",
        "gauge",
        "Duration of the path's last completed check.",
        &paths,
        |p| p.checker_ms.map(|ms| ms / 1000.0),
    );
    o.each(
        "pathpilot_path_marginal",
        "gauge",
        "1 when the daemon judges the path marginal (set aside in the map's last group).",
        &paths,
        |p| Some(f64::from(u8::from(p.health == "marginal"))),
    );
    o.each(
        "pathpilot_path_dm_failures",
        "gauge",
        "device-mapper's fail count of the path (reset by a table reload).",
        &paths,
        |p| Some(f64::from(p.fail_count)),
    );
    o.each(
        "pathpilot_path_share_ratio",
        "gauge",
        "The path's share of the map's bytes in the last window (0..1).",
        &paths,
        |p| Some(p.share_pct / 100.0),
    );
    // By request size class: a path's speed is comparable only within one.
    // The probes count each class's latencies by bucket but keep no time
    // sum per class, so the histogram has buckets and a count, no sum.
    let name = "pathpilot_path_latency_by_size_seconds";
    o.family(
        name,
        "histogram",
        "Issue-to-completion time of the requests on the path by request size class \
         (log2 buckets; no _sum).",
    );
    if detail == MetricsHistograms::SizeClasses {
        for (l, p) in &paths {
            for (class, hist) in &p.totals.lat_by_size_hist {
                let l = labels_with(l, &[("size_class", class)]);
                o.buckets(name, &l, hist, &LAT_LE_LOG2, |k| (1u64 << k) as f64 / 1e9);
            }
        }
    }
    o.each(
        "pathpilot_path_weight",
        "gauge",
        "The path's service-time relative_throughput, when the selector has one.",
        &paths,
        |p| p.weight.map(f64::from),
    );
    o.each(
        "pathpilot_path_group",
        "gauge",
        "The path's priority group (1 is tried first).",
        &paths,
        |p| Some(p.group as f64),
    );
    o.family(
        "pathpilot_path_info",
        "gauge",
        "The path's device number and SCSI address (always 1).",
    );
    for (l, p) in &paths {
        let info = labels_with(l, &[("dev", &p.dev), ("hctl", &p.hctl)]);
        o.sample("pathpilot_path_info", &info, 1.0);
    }
    o.0
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;
    use crate::ctl::fixture::example_status;

    fn families(text: &str) -> (BTreeMap<String, String>, Vec<String>) {
        let mut types = BTreeMap::new();
        let mut helps = Vec::new();
        for l in text.lines() {
            if let Some(r) = l.strip_prefix("# TYPE ") {
                let (n, t) = r.split_once(' ').unwrap();
                assert!(
                    types.insert(n.to_string(), t.to_string()).is_none(),
                    "{n} twice"
                );
            } else if let Some(r) = l.strip_prefix("# HELP ") {
                helps.push(r.split_once(' ').unwrap().0.to_string());
            }
        }
        (types, helps)
    }

    /// The family a sample name belongs to, given the declared families.
    fn family_of<'a>(types: &'a BTreeMap<String, String>, sample: &str) -> Option<&'a str> {
        if types.contains_key(sample) {
            return types.get_key_value(sample).map(|(k, _)| k.as_str());
        }
        ["_bucket", "_sum", "_count"].iter().find_map(|suf| {
            let base = sample.strip_suffix(suf)?;
            let (name, kind) = types.get_key_value(base)?;
            (kind == "histogram").then_some(name.as_str())
        })
    }

    #[test]
    fn exposition_parses_and_follows_the_conventions() {
        let text = render(&example_status());
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .expect("parses as Prometheus text");
        // Histograms count as one sample each here.
        assert!(scrape.samples.len() > 80, "{}", scrape.samples.len());

        let (types, helps) = families(&text);
        let help_set: BTreeSet<&String> = helps.iter().collect();
        assert_eq!(help_set.len(), helps.len(), "a HELP twice");
        for (name, kind) in &types {
            assert!(help_set.contains(name), "{name} has no HELP");
            assert!(name.starts_with("pathpilot_"), "{name}");
            assert_eq!(
                kind == "counter",
                name.ends_with("_total"),
                "{name} is a {kind}"
            );
        }
        // Every sample belongs to a declared family, and a family's samples
        // are contiguous (the format requires one group per family).
        let mut seen: Vec<&str> = Vec::new();
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap();
            let fam = family_of(&types, name).unwrap_or_else(|| panic!("undeclared: {l}"));
            if seen.last() != Some(&fam) {
                assert!(!seen.contains(&fam), "{fam} is split");
                seen.push(fam);
            }
        }

        // Histograms: cumulative, ending with +Inf equal to _count.
        let mut hists = 0;
        for s in &scrape.samples {
            if let prometheus_parse::Value::Histogram(buckets) = &s.value {
                hists += 1;
                let counts: Vec<f64> = buckets.iter().map(|b| b.count).collect();
                assert!(
                    counts.windows(2).all(|w| w[0] <= w[1]),
                    "{}: {counts:?}",
                    s.metric
                );
                let last = buckets.last().unwrap();
                assert!(last.less_than.is_infinite(), "{}", s.metric);
            }
        }
        assert!(hists >= 4, "{hists}");
        // The same check on the text, series by series.
        let mut inf = BTreeMap::new();
        let mut count = BTreeMap::new();
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, v) = l.rsplit_once(' ').unwrap();
            if let Some(rest) = series.split_once("_bucket{") {
                if rest.1.contains("le=\"+Inf\"") {
                    let key = format!("{}{{{}", rest.0, rest.1.replace(",le=\"+Inf\"", ""));
                    inf.insert(key, v.to_string());
                }
            } else if let Some((name, labels)) = series.split_once("_count{")
                && types.get(name).is_some_and(|t| t == "histogram")
            {
                count.insert(format!("{name}{{{labels}"), v.to_string());
            }
        }
        assert!(!inf.is_empty());
        assert_eq!(inf, count);
    }

    #[test]
    fn a_fleet_drops_the_finer_histograms_and_keeps_every_family() {
        let series = |detail| {
            let mut s = example_status();
            s.metrics_histograms = detail;
            let text = render(&s);
            let count = |prefix: &str| {
                text.lines()
                    .filter(|l| !l.starts_with('#') && l.starts_with(prefix))
                    .count()
            };
            let families = text.lines().filter(|l| l.starts_with("# TYPE")).count();
            (
                count("pathpilot_path_latency_by_size_seconds"),
                count("pathpilot_path_latency_seconds") + count("pathpilot_path_request_size"),
                count("pathpilot_map_latency_seconds"),
                count("pathpilot_"),
                families,
            )
        };
        let full = series(MetricsHistograms::SizeClasses);
        let paths = series(MetricsHistograms::Paths);
        let maps = series(MetricsHistograms::Maps);
        assert!(full.0 > 0 && full.1 > 0 && full.2 > 0, "{full:?}");
        assert_eq!(
            (paths.0, paths.1, paths.2),
            (0, full.1, full.2),
            "{paths:?}"
        );
        assert_eq!((maps.0, maps.1, maps.2), (0, 0, full.2), "{maps:?}");
        assert!(full.3 > paths.3 && paths.3 > maps.3);
        // Every family is still declared.
        assert_eq!((full.4, paths.4), (maps.4, maps.4));
    }

    #[test]
    fn figures_are_right() {
        let text = render(&example_status());
        let has = |l: &str| assert!(text.lines().any(|x| x == l), "missing {l}\n{text}");
        let a = r#"map="mpatha",wwid="36001405aaaa\"quoted\\""#;
        has(&format!("pathpilot_map_read_bytes_total{{{a}}} 19660800"));
        has(&format!(r#"pathpilot_map_ios_total{{{a},dir="write"}} 30"#));
        has(&format!(r#"pathpilot_path_up{{{a},path="sdc"}} 0"#));
        has(&format!(r#"pathpilot_path_checker_ok{{{a},path="sdb"}} 1"#));
        has(&format!(r#"pathpilot_path_marginal{{{a},path="sdb"}} 0"#));
        has(&format!(r#"pathpilot_path_marginal{{{a},path="sdc"}} 1"#));
        has(&format!(
            r#"pathpilot_path_share_ratio{{{a},path="sdb"}} 0.75"#
        ));
        has(&format!(
            r#"pathpilot_map_knob{{{a},knob="max_sectors_kb"}} 512"#
        ));
        has(&format!(
            r#"pathpilot_map_selector_info{{{a},selector="service-time"}} 1"#
        ));
        has(r#"pathpilot_map_tuner_paused{map="mpathb",wwid="36001405bbbb"} 1"#);
        has(r#"pathpilot_tuner_decisions_total{outcome="kept"} 1"#);
        has(r#"pathpilot_tuner_decisions_total{outcome="budget"} 0"#);
        has(r#"pathpilot_tuner_decisions_total{outcome="outside"} 0"#);
        has(r#"pathpilot_engine_seconds_total{work="rescan"} 1.5"#);
        has("pathpilot_bpf_stats_enabled 1");
        has("pathpilot_observed_ratio 1");
        has(r#"pathpilot_bpf_program_runs_total{program="block_rq_complete"} 4000"#);
        has(r#"pathpilot_bpf_program_run_seconds_total{program="block_rq_issue"} 0.00013"#);
        // By size class: a histogram per class seen, in the latency buckets.
        let b = format!(r#"pathpilot_path_latency_by_size_seconds_bucket{{{a},path="sdb""#);
        has(&format!(r#"{b},size_class="<16k",le="0.000131072"}} 0"#));
        has(&format!(r#"{b},size_class="<16k",le="0.000262144"}} 10"#));
        has(&format!(
            r#"{b},size_class="64k-256k",le="0.000262144"}} 50"#
        ));
        has(&format!(
            r#"{b},size_class="64k-256k",le="0.002097152"}} 100"#
        ));
        has(&format!(r#"{b},size_class="64k-256k",le="+Inf"}} 100"#));
        has(&format!(
            r#"pathpilot_path_latency_by_size_seconds_count{{{a},path="sdb",size_class="<16k"}} 10"#
        ));
        assert!(
            !text.contains(r#"size_class="16k-64k""#),
            "a class never seen"
        );
        assert!(!text.contains("pathpilot_path_latency_by_size_seconds_sum"));
        has(&format!("pathpilot_map_queue_if_no_path{{{a}}} 1"));
        has(r#"pathpilot_map_queue_if_no_path{map="mpathb",wwid="36001405bbbb"} 0"#);
        has(&format!(
            r#"pathpilot_map_tuning_held_since_seconds{{{a},reason="outside_change"}} 1700000100"#
        ));
        has(&format!(
            r#"pathpilot_map_tuning_held_since_seconds{{{a},reason="pinned"}} 1700000200"#
        ));
        assert!(
            !text.contains(r#"held_since_seconds{map="mpathb""#),
            "not held"
        );
        // A 4 KiB request is at or below 8191 but not 4095; 64 KiB ones
        // from 131071 on.
        let b = format!("pathpilot_map_request_size_bytes_bucket{{{a}");
        has(&format!(r#"{b},le="4095"}} 0"#));
        has(&format!(r#"{b},le="8191"}} 30"#));
        has(&format!(r#"{b},le="131071"}} 330"#));
        has(&format!(r#"{b},le="+Inf"}} 330"#));
        // Latency: the [2^40 ns, ...) outlier is only in +Inf.
        let b = format!("pathpilot_map_latency_seconds_bucket{{{a}");
        has(&format!(r#"{b},le="0.000001024"}} 1"#));
        has(&format!(r#"{b},le="0.000262144"}} 181"#));
        has(&format!(r#"{b},le="17.179869184"}} 331"#));
        has(&format!(r#"{b},le="+Inf"}} 332"#));
        has(&format!("pathpilot_map_latency_seconds_sum{{{a}}} 0.132"));
        // The map without settings has no knob series but its families.
        assert!(!text.contains(r#"pathpilot_map_knob{map="mpathb""#));
    }

    #[test]
    fn empty_status_still_declares_every_family() {
        let full = families(&render(&example_status())).0;
        let empty = families(&render(&DaemonStatus::default())).0;
        assert_eq!(full, empty);
        prometheus_parse::Scrape::parse(
            render(&DaemonStatus::default())
                .lines()
                .map(|l| Ok(l.to_string())),
        )
        .unwrap();
    }

    #[test]
    fn escaping_and_numbers() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(num(f64::NAN), "NaN");
        assert_eq!(num(f64::INFINITY), "+Inf");
        assert_eq!(num(0.5), "0.5");
        assert_eq!(num(1e21), "1000000000000000000000");
        assert_eq!(labels_with(r#"{a="1"}"#, &[("b", "2")]), r#"{a="1",b="2"}"#);
        assert_eq!(labels_with("", &[("b", "2")]), r#"{b="2"}"#);
    }

    /// Every metric the Grafana dashboard queries is one `render` produces.
    #[test]
    fn grafana_uses_only_exported_metrics() {
        let json = include_str!("../../../../dashboards/grafana/pathpilot.json");
        let dash: serde_json::Value = serde_json::from_str(json).expect("the dashboard is JSON");
        assert!(dash["panels"].as_array().is_some_and(|p| p.len() >= 5));
        let (types, _) = families(&render(&example_status()));
        let re = regex_lite::Regex::new(r"pathpilot_[a-z_]+").unwrap();
        let mut used = BTreeSet::new();
        // Only the query expressions: titles and descriptions may say anything.
        fn exprs(v: &serde_json::Value, out: &mut Vec<String>) {
            match v {
                serde_json::Value::Object(m) => {
                    for (k, x) in m {
                        match (k.as_str(), x) {
                            ("expr" | "query" | "definition", serde_json::Value::String(s)) => {
                                out.push(s.clone())
                            }
                            (_, x) => exprs(x, out),
                        }
                    }
                }
                serde_json::Value::Array(a) => a.iter().for_each(|x| exprs(x, out)),
                _ => {}
            }
        }
        let mut all = Vec::new();
        exprs(&dash, &mut all);
        for e in &all {
            for m in re.find_iter(e) {
                used.insert(m.as_str().to_string());
            }
        }
        assert!(used.len() >= 8, "{used:?}");
        for name in &used {
            assert!(family_of(&types, name).is_some(), "{name} is not exported");
        }
    }

    #[test]
    fn the_prometheus_rules_use_only_exported_metrics() {
        let (types, _) = families(&render(&example_status()));
        let re = regex_lite::Regex::new(r"pathpilot_[a-z_]+").unwrap();
        // Recording rules' names (`level:metric:operations`) are the rules'
        // own series.
        let recorded = regex_lite::Regex::new(r"[a-z_]+:[a-z_]+:[a-z0-9_]+").unwrap();
        let mut used = BTreeSet::new();
        for rules in [
            include_str!("../../../../dashboards/prometheus/pathpilot-alerts.yml"),
            include_str!("../../../../dashboards/prometheus/pathpilot-records.yml"),
        ] {
            // Only expressions: recording rules' own names (`instance:..`)
            // and annotations may say anything.
            for l in rules.lines().map(str::trim) {
                if l.starts_with("record:") || l.starts_with("summary:") || l.starts_with('#') {
                    continue;
                }
                let l = recorded.replace_all(l, "");
                used.extend(re.find_iter(&l).map(|m| m.as_str().to_string()));
            }
        }
        assert!(used.len() >= 10, "{used:?}");
        for name in &used {
            assert!(family_of(&types, name).is_some(), "{name} is not exported");
        }
    }
}
