//! The status the engine publishes for the servers (socket, metrics):
//! built from its maps, figures and logs only when someone reads it.
use std::collections::HashMap;

use super::{Engine, map_entry::MapEntry};
use crate::{
    blockdev::DevNum,
    ctl::status::{DaemonStatus, MapReport, PathReport},
    daemon::checker::Checkers,
    dm,
};

impl Engine {
    /// The status as it is now.
    pub(super) fn status(&self) -> DaemonStatus {
        DaemonStatus {
            version: env!("CARGO_PKG_VERSION").into(),
            pid: std::process::id(),
            mode: Some(self.cfg.mode),
            started_unix: self.started.unix,
            config: self.config_path.clone(),
            window_s: self.cfg.window_secs,
            multipathd: self.multipathd.clone(),
            maps: self
                .maps
                .iter()
                .map(|m| {
                    let pinned = self.state.operator(&m.name).pinned_unix;
                    map_report(m, &self.checkers, self.started.unix, pinned)
                })
                .collect(),
            decisions: self.log.kept(),
            decision_counts: self.log.counts(),
            bpf_watched: self.obs.watched().len(),
            bpf_counted: self.last.snapshot.devices.len(),
            bio_probe: self.cfg.bio_probe,
            metrics_histograms: self.cfg.metrics_histograms,
            observed_pct: self.last.observed_pct,
            bpf_stats: crate::observer::bpf_stats_enabled(),
            bpf_programs: self.obs.program_costs(),
            engine_secs: self.cpu.secs(),
        }
    }
}

/// A map as the status shows it; `started_unix` is when the tuners'
/// clock started, `pinned_unix` when the operator's pins were made.
pub(super) fn map_report(
    m: &MapEntry,
    checkers: &Checkers,
    started_unix: f64,
    pinned_unix: Option<f64>,
) -> MapReport {
    let tuner = m.tuner.as_ref();
    let table = m.table.as_ref();
    let weights: HashMap<DevNum, u32> = table
        .map(|t| {
            t.paths()
                .filter_map(|p| p.args.relative_throughput().map(|w| (p.dev, w)))
                .collect()
        })
        .unwrap_or_default();
    let group_of: HashMap<DevNum, usize> = table
        .map(|t| {
            t.groups
                .iter()
                .enumerate()
                .flat_map(|(i, g)| g.paths.iter().map(move |p| (p.dev, i + 1)))
                .collect()
        })
        .unwrap_or_default();
    let f = &m.figures;
    MapReport {
        name: m.name.clone(),
        wwid: m.wwid.clone(),
        dm_name: m.kernel_name.clone(),
        dev: m.dev.to_string(),
        vendor_model: m.vendor_model.clone(),
        size_sectors: table.map_or(0, |t| t.length),
        managed: m.managed,
        beside_multipathd: m.beside,
        unmanaged_reason: m.unmanaged_reason.clone(),
        selector: table
            .and_then(|t| t.groups.first())
            .map(|g| format!("{} {}", g.selector.name(), g.selector_args.len()))
            .unwrap_or_default(),
        features: table.map(dm::readback::features_string).unwrap_or_default(),
        hwhandler: table
            .map(dm::readback::hwhandler_string)
            .unwrap_or_default(),
        state: m.state_word().into(),
        mode: tuner.map(|t| t.mode()),
        tuner: tuner.map_or("-".into(), |t| t.state()),
        paused: tuner.is_some_and(|t| t.state() == "paused"),
        class: f.class.clone(),
        settings: tuner.map(|t| t.settings().clone()),
        pinned: tuner
            .map(|t| t.pinned().iter().map(|k| k.name().to_string()).collect())
            .unwrap_or_default(),
        outside_change: tuner.and_then(|t| t.held().map(str::to_string)),
        outside_change_since_unix: tuner.and_then(|t| t.held_since()).map(|t| started_unix + t),
        pinned_since_unix: pinned_unix.filter(|_| tuner.is_some_and(|t| !t.pinned().is_empty())),
        queue_if_no_path: m.queue_if_no_path,
        rates: f.rates.clone(),
        totals: f.totals.clone(),
        cgroups: f.cgroups.clone(),
        paths: m
            .paths
            .iter()
            .map(|p| {
                let (rates, share) = f.path_rates.get(&p.dev).cloned().unwrap_or_default();
                PathReport {
                    name: p.name.clone(),
                    dev: p.dev.to_string(),
                    hctl: p.hctl.clone(),
                    group: group_of.get(&p.dev).copied().unwrap_or(p.group),
                    dm_state: if p.dm_failed { "failed" } else { "active" }.into(),
                    fail_count: p.fail_count,
                    checker: if m.managed {
                        checkers.verdict(&p.name).word().into()
                    } else {
                        "-".into()
                    },
                    checker_ms: checkers.last_ms(&p.name),
                    weight: weights.get(&p.dev).copied(),
                    share_pct: share,
                    rates,
                    totals: p.totals.clone(),
                    operator_failed: p.admin_failed,
                    health: m.health.state(p.dev).word().into(),
                    port_return_s: p.port_return_s,
                }
            })
            .collect(),
    }
}
