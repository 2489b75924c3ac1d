//! A status with every kind of figure, for the tests of the status's
//! readers: the metrics encoder, the socket, and the CLI's views.
use std::sync::Arc;

use super::status::{
    DaemonStatus, LoggedDecision, MapReport, PathReport, Rates, SizeLatency, Totals,
};
use crate::{
    mpath::Selector,
    tuner::{Decision, Knob, Mode, Outcome, Settings},
};

/// A status with every kind of figure, shared by the daemon's and the
/// CLI's tests.
pub(crate) fn example_status() -> DaemonStatus {
    let totals = |k: u64| Totals {
        read_ios: 100 * k,
        write_ios: 10 * k,
        read_bytes: 100 * k * 65536,
        write_bytes: 10 * k * 4096,
        errors: k - 1,
        merges: 7 * k,
        size_hist: vec![(4096, 10 * k), (65536, 100 * k)],
        lat_hist: vec![(0, 1), (131072, 60 * k), (1 << 20, 50 * k), (1 << 40, 1)],
        lat_sum_ns: 110 * k * 400_000,
        lat_by_size_hist: vec![
            ("<16k".into(), vec![(131072, 10 * k)]),
            ("64k-256k".into(), vec![(131072, 50 * k), (1 << 20, 50 * k)]),
        ],
    };
    let rates = |mib: f64| Rates {
        interval_s: 1.0,
        iops: mib * 16.0,
        read_mib_s: mib,
        write_mib_s: 0.5,
        avg_request_kib: 64.0,
        merge_pct: 12.5,
        lat_p50_us: Some(250.0),
        lat_p99_us: Some(1800.0),
        inflight: 4,
        inflight_max: 16,
        util_pct: Some(80.0),
        seq_pct: Some(95.0),
        lat_by_size: vec![SizeLatency {
            class: "<16k".into(),
            samples: 100,
            p50_us: Some(250.0),
            p99_us: Some(1800.0),
        }],
    };
    let path = |name: &str, dev: &str, k: u64, state: &str, checker: &str| PathReport {
        name: name.into(),
        dev: dev.into(),
        hctl: format!("2:0:0:{k}"),
        group: 1,
        dm_state: state.into(),
        fail_count: u32::from(state != "active"),
        checker: checker.into(),
        checker_ms: Some(1.5),
        weight: Some(10 * k as u32),
        share_pct: if state == "active" { 75.0 } else { 25.0 },
        rates: rates(10.0 * k as f64),
        totals: totals(k),
        operator_failed: false,
        health: if k == 2 { "marginal" } else { "healthy" }.into(),
        port_return_s: None,
    };
    let decision = |seq: u64, knob: Option<Knob>, old: &str, new: &str, outcome, reason: &str| {
        LoggedDecision {
            seq,
            unix: 1_700_000_000.0 + seq as f64 * 61.0,
            decision: Decision {
                t: seq as f64 * 61.0,
                map: "mpatha".into(),
                class: Some("read/large/seq".into()),
                knob,
                old: old.into(),
                new: new.into(),
                before_mib_s: knob.map(|_| 17.5),
                after_mib_s: knob.map(|_| 33.7),
                reason: reason.into(),
                outcome,
            },
        }
    };
    DaemonStatus {
        bpf_watched: 5,
        bpf_counted: 5,
        bio_probe: true,
        metrics_histograms: Default::default(),
        observed_pct: 100.0,
        bpf_stats: Some(true),
        bpf_programs: vec![
            crate::observer::ProgramCost {
                program: "block_rq_complete".into(),
                runs: 4000,
                run_ns: 480_000,
            },
            crate::observer::ProgramCost {
                program: "block_rq_issue".into(),
                runs: 2000,
                run_ns: 130_000,
            },
        ],
        engine_secs: vec![("window".into(), 0.25), ("rescan".into(), 1.5)],
        version: "0.1.0".into(),
        pid: 4321,
        mode: Some(Mode::Tune),
        started_unix: 1_700_000_000.0,
        config: "/etc/pathpilot/config.toml".into(),
        window_s: 2.0,
        multipathd: None,
        maps: vec![
            MapReport {
                name: "mpatha".into(),
                wwid: "36001405aaaa\"quoted\\".into(),
                dm_name: "dm-0".into(),
                dev: "254:0".into(),
                vendor_model: "LIO-ORG disk".into(),
                size_sectors: 2_097_152,
                managed: true,
                unmanaged_reason: None,
                beside_multipathd: false,
                selector: "service-time".into(),
                features: "queue_if_no_path".into(),
                hwhandler: "0".into(),
                state: "degraded".into(),
                mode: Some(Mode::Tune),
                tuner: "tune".into(),
                paused: false,
                class: Some("read/large/seq".into()),
                pinned: vec!["nr_requests".into()],
                outside_change: Some("table changed outside pathpilot: selector".into()),
                outside_change_since_unix: Some(1_700_000_100.0),
                pinned_since_unix: Some(1_700_000_200.0),
                queue_if_no_path: true,
                settings: Some(Settings {
                    selector: Selector::ServiceTime,
                    weights: vec![10, 20],
                    active_paths: 2,
                    max_sectors_kb: 512,
                    nr_requests: 256,
                    scheduler: "mq-deadline".into(),
                    queue_depth: 32,
                }),
                rates: rates(30.0),
                totals: totals(3),
                paths: vec![
                    path("sdb", "8:16", 1, "active", "ready"),
                    path("sdc", "8:32", 2, "failed", "faulty"),
                ],
                cgroups: vec![(1234, 3 << 20), (99, 1 << 20)],
            },
            MapReport {
                name: "mpathb".into(),
                wwid: "36001405bbbb".into(),
                dm_name: "dm-1".into(),
                dev: "254:1".into(),
                managed: false,
                unmanaged_reason: Some("owned by multipathd".into()),
                selector: "round-robin".into(),
                state: "ok".into(),
                tuner: "observe".into(),
                paused: true,
                totals: Totals::default(),
                ..Default::default()
            },
        ],
        decisions: Arc::new(vec![
            decision(1, None, "", "", Outcome::Paused, "path sdc failed"),
            decision(
                2,
                Some(Knob::MaxSectorsKb),
                "1280",
                "512",
                Outcome::Kept,
                "large requests split across paths: +92%",
            ),
            decision(
                3,
                Some(Knob::Selector),
                "service-time",
                "round-robin",
                Outcome::Reverted,
                "gain 1.2% within noise",
            ),
        ]),
        decision_counts: vec![
            ("kept".into(), 1),
            ("reverted".into(), 1),
            ("paused".into(), 1),
        ],
    }
}
