//! What the dashboard shows, already reduced to display values: the
//! controller fills it from the daemon's status or its own observer, and the
//! view renders it. Nothing here knows about sockets or eBPF.
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Model {
    /// Where the figures come from ("daemon", "observer (read-only)").
    pub source: String,
    pub interval_s: f64,
    pub maps: Vec<MapView>,
    /// Maps left out by the dashboard's filter (0 unfiltered).
    #[serde(default)]
    pub hidden_maps: usize,
    /// Newest last.
    pub decisions: Vec<DecisionView>,
    /// The source counts no bytes per cgroup (a daemon with `bio_probe =
    /// false`): the cgroups pane says so, rather than showing none.
    #[serde(default)]
    pub cgroups_not_counted: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MapView {
    pub name: String,
    pub wwid: String,
    pub dm_dev: String,
    pub selector: String,
    pub features: String,
    /// "ok", "degraded", "queueing", "no paths".
    pub state: String,
    /// "tune", "trying", "converged", "advise", "observe", "paused", or
    /// "-" without a daemon.
    pub tuner: String,
    pub iops: f64,
    pub mib_s: f64,
    pub paths: Vec<PathView>,
    /// Request sizes at the map: (bucket lower bound in bytes, count).
    pub size_hist: Vec<(u64, u64)>,
    /// Latency at the map: (bucket lower bound in ns, count).
    pub lat_hist: Vec<(u64, u64)>,
    /// Share of the map's bytes per cgroup: (cgroup, percent).
    pub cgroups: Vec<(String, f64)>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PathView {
    pub device: String,
    pub hctl: String,
    pub dev: String,
    /// The kernel's view: "active" or "failed".
    pub dm_state: String,
    /// The checker's view: "ready", "faulty", "checking", "-".
    pub checker: String,
    pub iops: f64,
    pub mib_s: f64,
    pub share_pct: f64,
    pub avg_kib: f64,
    pub merge_pct: f64,
    pub lat_p50_us: Option<f64>,
    pub lat_p99_us: Option<f64>,
    pub inflight: u64,
    /// service-time weight, or the priority group ("pg2").
    pub weight: String,
    /// Recent throughput samples in KiB/s, oldest first, for the sparkline.
    pub history: Vec<u64>,
    /// Latency by request size class in the last interval (the classes
    /// with samples): a path's speed compares only within a class.
    #[serde(default)]
    pub lat_by_size: Vec<SizeClassView>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SizeClassView {
    /// `<16k`, `16k-64k`, `64k-256k`, `>=256k`.
    pub class: String,
    pub samples: u64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DecisionView {
    pub time: String,
    pub map: String,
    pub knob: String,
    pub change: String,
    pub reason: String,
    /// "kept", "reverted", "advised", "trying".
    pub outcome: String,
}
