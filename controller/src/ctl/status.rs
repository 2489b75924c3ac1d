//! The daemon's view of the world, as served over the control socket and
//! rendered as metrics: the engine builds a fresh [`DaemonStatus`] after a
//! window, an event or a change when the last one was read, and on a
//! reader's request otherwise; a reader waits on the engine for a second at
//! most (see `shared`).
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::tuner::{Decision, Mode, Settings};

/// Cumulative counters of a device since the daemon started watching it
/// (Prometheus counters and histograms are built from these).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub read_ios: u64,
    pub write_ios: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub errors: u64,
    pub merges: u64,
    /// Cumulative request sizes: (bucket lower bound in bytes, count).
    pub size_hist: Vec<(u64, u64)>,
    /// Cumulative latencies: (bucket lower bound in ns, count).
    pub lat_hist: Vec<(u64, u64)>,
    pub lat_sum_ns: u64,
    /// Cumulative latencies by request size class (`<16k`, ...), in the
    /// buckets of `lat_hist`; only classes seen.
    #[serde(default)]
    pub lat_by_size_hist: Vec<(String, Vec<(u64, u64)>)>,
}

/// One window's figures of a device (a subset of `pathpilot stat --json`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    pub interval_s: f64,
    pub iops: f64,
    pub read_mib_s: f64,
    pub write_mib_s: f64,
    pub avg_request_kib: f64,
    pub merge_pct: f64,
    pub lat_p50_us: Option<f64>,
    pub lat_p99_us: Option<f64>,
    pub inflight: u64,
    pub inflight_max: u64,
    pub util_pct: Option<f64>,
    pub seq_pct: Option<f64>,
    /// Latency by request size class (the classes with samples).
    #[serde(default)]
    pub lat_by_size: Vec<SizeLatency>,
}

/// One request size class's latency in the last window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SizeLatency {
    /// `<16k`, `16k-64k`, `64k-256k`, `>=256k`.
    pub class: String,
    pub samples: u64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PathReport {
    /// Kernel name (`sdb`).
    pub name: String,
    /// `maj:min`.
    pub dev: String,
    pub hctl: String,
    /// 1-based priority group.
    pub group: usize,
    /// The kernel's view: "active" or "failed".
    pub dm_state: String,
    pub fail_count: u32,
    /// The checker's view: "ready", "faulty", "timeout", "checking", "-".
    pub checker: String,
    /// Duration of the last completed check, ms.
    pub checker_ms: Option<f64>,
    /// service-time relative_throughput, when the selector has one.
    pub weight: Option<u32>,
    /// This path's share of the map's bytes in the last window, percent.
    pub share_pct: f64,
    pub rates: Rates,
    pub totals: Totals,
    /// Failed by an operator: stays failed across reloads and restarts
    /// until an operator reinstates it.
    #[serde(default)]
    pub operator_failed: bool,
    /// From its I/O: "healthy", "marginal" (set aside in the map's last
    /// group) or "probation" (serving again, watched).
    #[serde(default)]
    pub health: String,
    /// Seconds from its ALUA port's last return (the check that read the
    /// port take I/O again) to the path serving the map's I/O.
    #[serde(default)]
    pub port_return_s: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MapReport {
    pub name: String,
    pub wwid: String,
    /// `dm-N` and `maj:min`.
    pub dm_name: String,
    pub dev: String,
    pub vendor_model: String,
    pub size_sectors: u64,
    /// Whether pathpilot manages the map (created or adopted) or only
    /// observes it, and why not.
    pub managed: bool,
    pub unmanaged_reason: Option<String>,
    /// multipathd owns the map; pathpilot tunes its queue knobs beside it
    /// and advises on its table.
    #[serde(default)]
    pub beside_multipathd: bool,
    pub selector: String,
    pub features: String,
    pub hwhandler: String,
    /// "ok", "degraded", "queueing", "no paths".
    pub state: String,
    pub mode: Option<Mode>,
    /// The tuner's state word (tune, advise, observe, paused, trying).
    pub tuner: String,
    pub paused: bool,
    /// The workload class of the last window.
    pub class: Option<String>,
    /// The honoured knobs as last read back from the kernel.
    pub settings: Option<Settings>,
    /// Knobs an operator set, which the tuner leaves until released.
    #[serde(default)]
    pub pinned: Vec<String>,
    /// Why tuning stopped for a change someone else made, until resumed.
    #[serde(default)]
    pub outside_change: Option<String>,
    /// When tuning stopped for it (Unix seconds).
    #[serde(default)]
    pub outside_change_since_unix: Option<f64>,
    /// When the operator's pins were made (Unix seconds), while any is.
    #[serde(default)]
    pub pinned_since_unix: Option<f64>,
    /// The map queues I/O while it has no usable path (queue_if_no_path
    /// as the kernel holds it now).
    #[serde(default)]
    pub queue_if_no_path: bool,
    pub rates: Rates,
    pub totals: Totals,
    pub paths: Vec<PathReport>,
    /// Bytes submitted to the map per cgroup id in the last window.
    pub cgroups: Vec<(u64, u64)>,
}

/// A decision as logged by the daemon: the tuner's, stamped.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LoggedDecision {
    /// Monotonic sequence number, for `log --follow`.
    pub seq: u64,
    /// Wall-clock time, seconds since the epoch.
    pub unix: f64,
    #[serde(flatten)]
    pub decision: Decision,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DaemonStatus {
    pub version: String,
    pub pid: u32,
    pub mode: Option<Mode>,
    pub started_unix: f64,
    pub config: String,
    /// Window of the tuner and of the figures, seconds.
    pub window_s: f64,
    /// A running multipathd, if any ("pid N"): its maps are left alone.
    pub multipathd: Option<String>,
    pub maps: Vec<MapReport>,
    /// The last decisions (newest last), at most `LOG_KEEP`. Shared with
    /// the engine's own log: a status is built as often as every window
    /// and event, and copying up to `LOG_KEEP` decisions each time would
    /// cost more than the rest of the status once the log is full.
    pub decisions: Arc<Vec<LoggedDecision>>,
    /// Tuner decisions counted since start, by outcome (for metrics).
    pub decision_counts: Vec<(String, u64)>,
    /// Entries of the observer's BPF maps: devices on the watch list and
    /// devices with counters (a removed device must leave neither).
    pub bpf_watched: usize,
    pub bpf_counted: usize,
    /// The per-bio probe is attached (config `bio_probe`): without it no
    /// bytes are counted per cgroup, and `cgroups` stays empty.
    pub bio_probe: bool,
    /// The finest histograms the metrics endpoint exports (config
    /// `metrics_histograms`).
    #[serde(default)]
    pub metrics_histograms: crate::config::MetricsHistograms,
    /// The share of the last window the probes were attached, in percent:
    /// 100 unless observation is time-sampled (config `observe_duty`), and
    /// 100 then too while a tuner measures toward a decision.
    pub observed_pct: f64,
    /// Whether the kernel accounts programs' runs now
    /// (`kernel.bpf_stats_enabled`; None where it cannot tell): only then
    /// do `bpf_programs`' figures grow.
    pub bpf_stats: Option<bool>,
    /// The observer's programs, each with its runs and their time while
    /// the kernel accounted them: what observing costs on this host.
    pub bpf_programs: Vec<crate::observer::ProgramCost>,
    /// CPU seconds the engine thread spent per kind of work since start:
    /// `checkers` (starting checks, reading their verdicts), `dm_status`
    /// (each map's table and status), `rescan` (path discovery),
    /// `observer` (reading the BPF maps), `probes` (attaching and
    /// detaching the observer's programs while sampling), `knobs` (reading back each
    /// managed map's knobs), `window` (figures, health, the tuner's
    /// decisions), `changes` (applying and reading back the changes the
    /// tuner makes), `publish` (this status), `requests` (control socket).
    pub engine_secs: Vec<(String, f64)>,
}

/// How many decisions the daemon keeps in memory for the socket.
pub const LOG_KEEP: usize = 1000;
