//! What the engine knows of each map and its paths, and what it can tell
//! from that alone.
use std::{collections::BTreeMap, time::Instant};

use super::{figures::MapFigures, say};
use crate::{
    blockdev::DevNum,
    ctl::status::Totals,
    daemon::{actuator::Target, checker::Checkers},
    discovery::alua::AccessState,
    mpath::{MultipathStatus, MultipathTable, PathState},
    policy::{marginal, no_path_retry::NoPathRetry, schedule::Look, sync::Hold},
    sysfs_attr::KeptFiles,
    sysfs_knobs::KnobFiles,
    tuner::Tuner,
};

pub(super) struct PathEntry {
    pub(super) name: String,
    pub(super) dev: DevNum,
    pub(super) hctl: String,
    /// The kernel's last word on it (from the map status).
    pub(super) dm_failed: bool,
    /// When we saw the kernel fail it: only a check started after that
    /// may reinstate it.
    pub(super) failed_at: Option<Instant>,
    /// Failed by an operator: stays failed, whatever the checker says and
    /// across reloads and restarts, until an operator reinstates it.
    pub(super) admin_failed: bool,
    pub(super) fail_count: u32,
    pub(super) group: usize,
    /// The group it was in before it was set aside as marginal.
    pub(super) home: usize,
    pub(super) totals: Totals,
    /// Seconds from its port's last return to its serving the map's I/O.
    pub(super) port_return_s: Option<f64>,
}

impl PathEntry {
    pub(super) fn new(name: String, dev: DevNum, group: usize, admin_failed: bool) -> Self {
        PathEntry {
            hctl: crate::blockdev::hctl(dev),
            name,
            dev,
            dm_failed: false,
            failed_at: None,
            admin_failed,
            fail_count: 0,
            group,
            home: group,
            totals: Totals::default(),
            port_return_s: None,
        }
    }
}

pub(super) struct MapEntry {
    pub(super) name: String,
    pub(super) wwid: String,
    pub(super) dev: DevNum,
    pub(super) kernel_name: String,
    pub(super) vendor_model: String,
    pub(super) managed: bool,
    pub(super) unmanaged_reason: Option<String>,
    /// multipathd owns the map (its table, its paths' checks): pathpilot
    /// observes it, tunes its queue knobs, and acts on its paths only
    /// through multipathd's commands.
    pub(super) beside: bool,
    /// The live table as last read.
    pub(super) table: Option<MultipathTable>,
    /// The table pathpilot last left on the map (read back after each of
    /// its own changes): a live table that differs was changed by someone
    /// else. Managed maps only.
    pub(super) expected: Option<MultipathTable>,
    /// The path groups are not the tuner's (an adopted map's own groups):
    /// it tunes the first group and never regroups.
    pub(super) fixed_groups: bool,
    pub(super) suspended: bool,
    /// The live table's queue_if_no_path (what the kernel does now).
    pub(super) queue_if_no_path: bool,
    /// Whether the map is meant to queue with no path (its table had
    /// queue_if_no_path when it was found or made).
    pub(super) wants_queue: bool,
    pub(super) no_path_retry: NoPathRetry,
    /// Its own time without a usable path before queued I/O fails
    /// (multipath.conf's `no_path_retry` N for its array, where followed);
    /// unset: maps.no_path_retry_secs.
    pub(super) no_path_retry_secs: Option<f64>,
    pub(super) paths: Vec<PathEntry>,
    pub(super) tuner: Option<Tuner>,
    pub(super) last_path_change: Option<Instant>,
    pub(super) last_event: u32,
    /// Its last window's figures and its totals.
    pub(super) figures: MapFigures,
    /// Its paths' health (marginal or not), from their figures.
    pub(super) health: marginal::HealthModel,
    /// The marginal paths the daemon set aside in the map's last group.
    pub(super) set_aside: Vec<DevNum>,
    /// Its groups and its paths' ALUA states when they last matched: the
    /// per-interval look regroups only when these change.
    pub(super) alua_seen: AluaSeen,
    /// When its table and knobs are next compared with what the daemon
    /// left (a change made by someone else).
    pub(super) look: Look,
    /// When its table and status are next read though its event counter
    /// has not moved.
    pub(super) status_look: Look,
    /// Its knob files, open between looks.
    pub(super) knob_files: KnobFiles,
    /// Its `dm/suspended` attribute, open between looks.
    pub(super) suspended_file: KeptFiles<()>,
}

#[derive(Debug, Default, PartialEq)]
pub(super) struct AluaSeen {
    pub(super) groups: Vec<Vec<DevNum>>,
    pub(super) states: Vec<(DevNum, Option<AccessState>)>,
}

impl MapEntry {
    /// The paths the tuner works on, in its order: every path, or the
    /// first group's when the groups are fixed; never one set aside.
    pub(super) fn tuned_paths(&self) -> Vec<(String, DevNum)> {
        let first: Option<Vec<DevNum>> = self
            .fixed_groups
            .then_some(self.table.as_ref())
            .flatten()
            .and_then(|t| t.groups.first())
            .map(|g| g.paths.iter().map(|p| p.dev).collect());
        self.paths
            .iter()
            .filter(|p| first.as_ref().is_none_or(|f| f.contains(&p.dev)))
            .filter(|p| !self.set_aside.contains(&p.dev))
            .map(|p| (p.name.clone(), p.dev))
            .collect()
    }

    pub(super) fn target<'a>(&'a self, paths: &'a [(String, DevNum)]) -> Target<'a> {
        Target {
            map: &self.name,
            kernel_name: &self.kernel_name,
            paths,
            fixed_groups: self.fixed_groups,
        }
    }

    /// The paths of the map that must carry no I/O, and why.
    pub(super) fn held(&self, checkers: &Checkers) -> BTreeMap<DevNum, Hold> {
        self.paths
            .iter()
            .filter_map(|p| {
                let h = if p.admin_failed {
                    Hold::Operator
                } else if self.managed && checkers.verdict(&p.name).is_bad() {
                    Hold::Checker
                } else if p.dm_failed && !checkers.ready_since(&p.name, p.failed_at) {
                    Hold::Kernel
                } else {
                    return None;
                };
                Some((p.dev, h))
            })
            .collect()
    }

    /// A path's name, or its device where it is not one of the map's.
    pub(super) fn path_name(&self, dev: DevNum) -> String {
        self.paths
            .iter()
            .find(|p| p.dev == dev)
            .map_or_else(|| dev.to_string(), |p| p.name.clone())
    }

    /// The map's state word: "ok", "degraded", "queueing" or "no paths".
    pub(super) fn state_word(&self) -> &'static str {
        let failed = self.paths.iter().filter(|p| p.dm_failed).count();
        if self.paths.is_empty() || failed == self.paths.len() {
            if self.queue_if_no_path {
                "queueing"
            } else {
                "no paths"
            }
        } else if failed > 0 {
            "degraded"
        } else {
            "ok"
        }
    }

    /// A map's path states from its status: records what the kernel changed.
    /// Returns whether any path changed state.
    pub(super) fn note_status(&mut self, st: &MultipathStatus, now: Instant) -> bool {
        let mut changed = false;
        for p in &mut self.paths {
            if let Some(ps) = st.path(p.dev) {
                let failed = ps.state == PathState::Failed;
                if failed && !p.dm_failed {
                    p.failed_at = Some(now);
                }
                if failed != p.dm_failed {
                    say!(
                        "{}: path {} is {} in the kernel (fail count {})",
                        self.name,
                        p.name,
                        if failed { "failed" } else { "active" },
                        ps.fail_count
                    );
                    changed = true;
                }
                p.dm_failed = failed;
                p.fail_count = ps.fail_count;
            }
        }
        if changed {
            self.last_path_change = Some(now);
        }
        changed
    }
}
