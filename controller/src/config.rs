//! The daemon's configuration file (TOML). Every key is optional and has
//! the default documented in docs/configuration.md; an unknown key or a bad
//! value is an error that names the key and its line.
use std::{net::SocketAddr, path::Path, time::Duration};

use serde::{Deserialize, Serialize};

use crate::{
    discovery::{Filter, Rule},
    mpath::{Selector, grouping::Grouping},
    policy::marginal,
    tuner::{self, Mode},
};

pub const DEFAULT_PATH: &str = "/etc/pathpilot/config.toml";

/// The metrics endpoint's default address (loopback: metrics reveal the
/// storage layout).
pub const DEFAULT_METRICS: &str = "127.0.0.1:9777";

/// Which latency and request-size histograms the metrics endpoint exports.
/// They are most of a host's series (a path's latency by size class alone
/// is some hundred), so a large fleet keeps only the coarser ones; the
/// shipped alerting and recording rules need only the maps'.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MetricsHistograms {
    /// Maps', paths' and paths' latency by request size class.
    #[default]
    SizeClasses,
    /// Maps' and paths'.
    Paths,
    /// Maps' only.
    Maps,
}

impl MetricsHistograms {
    pub fn name(self) -> &'static str {
        match self {
            MetricsHistograms::SizeClasses => "size_classes",
            MetricsHistograms::Paths => "paths",
            MetricsHistograms::Maps => "maps",
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// observe | advise | tune
    pub mode: Mode,
    /// Seconds of one measurement window (figures, checker health, tuner).
    pub window_secs: f64,
    pub socket: String,
    /// A group whose members may read status and the log over the socket.
    pub read_group: Option<String>,
    /// Address of the Prometheus endpoint, or "off".
    pub metrics: String,
    /// The finest histograms the endpoint exports (see
    /// [`MetricsHistograms`]): fewer series for a large fleet.
    pub metrics_histograms: MetricsHistograms,
    /// A probe on every bio submitted to a map (block_bio_queue): each
    /// cgroup's bytes, and the workload's own bio order. Off by default:
    /// about a fifth less eBPF time per I/O, for figures nothing in the
    /// daemon's decisions needs (bio sizes and counts then come from the
    /// requests, merges and splits, and the tuner classifies by the
    /// requests' order, which keeps a workload's class).
    pub bio_probe: bool,
    /// The share of each window the probes are attached while no tuner
    /// measures and no path is suspect (time-sampled observation, see
    /// `Observer::sample`): 1 keeps them attached. Below 1 (the default,
    /// a quarter: in the testbed guest, the always-attached probes cost
    /// more than the 5% of throughput an observer may take), I/Os, bytes,
    /// in-flight and busy
    /// time stay exact (the kernel's counts), as do merges and splits
    /// (their programs stay attached), while latency, sizes, order and
    /// errors come from the attached part: the end of one window and the
    /// start of the next, every other window.
    pub observe_duty: f64,
    pub maps: MapsConfig,
    pub checker: CheckerConfig,
    pub tuner: TunerConfig,
    pub marginal: marginal::MarginalConfig,
    pub filter: FilterConfig,
    pub beside: BesideConfig,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MapsConfig {
    /// Create a map for every WWID with at least `min_paths` paths.
    pub create: bool,
    pub min_paths: usize,
    /// Selector of the maps pathpilot creates.
    pub selector: String,
    /// multipath.conf's path_grouping_policy for the maps pathpilot
    /// creates; unset: group_by_prio on ALUA arrays, multibus otherwise.
    pub path_grouping_policy: Option<String>,
    /// `queue_if_no_path` on created maps: I/O waits for a path to return
    /// instead of failing.
    pub queue_if_no_path: bool,
    /// With `queue_if_no_path`: after this many seconds with no usable
    /// path, send `fail_if_no_path` so queued and new I/O fail with EIO
    /// instead of waiting forever (multipath.conf's `no_path_retry`, in
    /// seconds); `queue_if_no_path` is set again when a path returns.
    /// Absent: queue until a path returns.
    pub no_path_retry_secs: Option<f64>,
    /// Follow multipath-tools' configuration (multipath.conf, its
    /// built-in table per array) for the maps pathpilot creates. Unset:
    /// where multipath-tools is installed (docs/multipath-conf.md).
    pub follow_multipath_conf: Option<bool>,
    /// WWIDs of maps made by others that pathpilot may manage.
    pub adopt: Vec<String>,
    /// WWID -> map name.
    pub aliases: std::collections::BTreeMap<String, String>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CheckerConfig {
    /// Seconds between checks of a path.
    pub interval_secs: f64,
    /// A path that stays healthy is checked less often, up to every this
    /// many seconds (unset: 4 x interval_secs, as multipathd's
    /// max_polling_interval).
    pub max_interval_secs: Option<f64>,
    /// A check that has not answered after this many seconds fails the path.
    pub timeout_secs: f64,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TunerConfig {
    pub windows: usize,
    pub settle_windows: usize,
    pub min_gain_pct: f64,
    pub reload_min_interval_secs: f64,
    pub max_stall_ms: f64,
    pub reload_cooldown_secs: f64,
    pub flap_hold_secs: f64,
    pub retry_after_secs: f64,
}

/// Working beside multipathd, on the maps it owns.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BesideConfig {
    /// Apply the advice for a map's table (`pathpilot advise`) through
    /// multipathd: its entry in /etc/multipath/conf.d/pathpilot.conf,
    /// then `multipathd reconfigure`. Off: advice only.
    pub apply: bool,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FilterConfig {
    /// multipath.conf `blacklist` entries: `wwid=RE`, `devnode=RE`,
    /// `device=VENDOR[/PRODUCT]`.
    pub deny: Vec<String>,
    /// `blacklist_exceptions`.
    pub allow: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::Tune,
            window_secs: 5.0,
            socket: "/run/pathpilot/control.sock".into(),
            read_group: None,
            metrics: DEFAULT_METRICS.into(),
            metrics_histograms: MetricsHistograms::SizeClasses,
            bio_probe: false,
            observe_duty: 0.25,
            maps: MapsConfig::default(),
            checker: CheckerConfig::default(),
            tuner: TunerConfig::default(),
            marginal: marginal::MarginalConfig::default(),
            filter: FilterConfig::default(),
            beside: BesideConfig::default(),
        }
    }
}

impl Default for MapsConfig {
    fn default() -> Self {
        MapsConfig {
            create: true,
            min_paths: 2,
            selector: "service-time".into(),
            path_grouping_policy: None,
            queue_if_no_path: true,
            no_path_retry_secs: None,
            follow_multipath_conf: None,
            adopt: vec![],
            aliases: Default::default(),
        }
    }
}

impl Default for CheckerConfig {
    fn default() -> Self {
        CheckerConfig {
            interval_secs: 2.0,
            max_interval_secs: None,
            timeout_secs: 5.0,
        }
    }
}

impl Default for TunerConfig {
    fn default() -> Self {
        let t = tuner::TunerConfig::default();
        TunerConfig {
            windows: t.windows,
            settle_windows: t.settle_windows,
            min_gain_pct: t.min_gain * 100.0,
            reload_min_interval_secs: t.reload_min_interval_s,
            max_stall_ms: t.max_stall_ms,
            reload_cooldown_secs: t.reload_cooldown_s,
            flap_hold_secs: t.flap_hold_s,
            retry_after_secs: t.retry_after_s,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("config {path}: {msg}")]
    Invalid { path: String, msg: String },
}

impl Config {
    /// Reads a config file. The default path may be absent (defaults apply);
    /// a path given explicitly must exist.
    pub fn load(path: &Path, explicit: bool) -> Result<Config, ConfigError> {
        let shown = path.display().to_string();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
                return Ok(Config::default());
            }
            Err(err) => return Err(ConfigError::Read { path: shown, err }),
        };
        Config::parse(&text).map_err(|msg| ConfigError::Invalid { path: shown, msg })
    }

    /// Parses and checks a config text; the error names the key and line.
    pub fn parse(text: &str) -> Result<Config, String> {
        let c: Config = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                // Bytes, not a str slice: a span need not fall on a char
                // boundary, and an error must never become a panic.
                .map(|s| {
                    text.as_bytes()[..s.start.min(text.len())]
                        .iter()
                        .filter(|b| **b == b'\n')
                        .count()
                        + 1
                });
            // toml's own message repeats the offending line; one line is
            // enough. A bad value's message does not name its key: the
            // line does.
            let msg = e.message().to_string();
            let key = line
                .and_then(|l| text.lines().nth(l - 1))
                .and_then(|l| l.split_once('='))
                .map(|(k, _)| k.trim())
                .filter(|k| !k.is_empty() && !k.starts_with('[') && !msg.contains(*k));
            match (line, key) {
                (Some(l), Some(k)) => format!("line {l}: {k}: {msg}"),
                (Some(l), None) => format!("line {l}: {msg}"),
                _ => msg,
            }
        })?;
        c.check(text)?;
        Ok(c)
    }

    fn check(&self, text: &str) -> Result<(), String> {
        let line_of = |key: &str| {
            text.lines()
                .position(|l| l.trim_start().starts_with(key))
                .map(|i| format!("line {}: ", i + 1))
                .unwrap_or_default()
        };
        let bad = |key: &str, why: String| Err(format!("{}{key}: {why}", line_of(key)));
        if !(0.5..=3600.0).contains(&self.window_secs) {
            return bad(
                "window_secs",
                format!("{} is out of range (0.5 to 3600)", self.window_secs),
            );
        }
        if !(0.05..=1.0).contains(&self.observe_duty) {
            return bad(
                "observe_duty",
                format!("{} is out of range (0.05 to 1)", self.observe_duty),
            );
        }
        if self.metrics != "off" && self.metrics.parse::<SocketAddr>().is_err() {
            return bad(
                "metrics",
                format!(
                    "'{}' is not an address like 127.0.0.1:9777, nor \"off\"",
                    self.metrics
                ),
            );
        }
        if !self.socket.starts_with('/') {
            return bad(
                "socket",
                format!("'{}' is not an absolute path", self.socket),
            );
        }
        if self.maps.min_paths < 1 {
            return bad("min_paths", "must be at least 1".into());
        }
        if !matches!(
            Selector::from_name(&self.maps.selector),
            Selector::RoundRobin
                | Selector::QueueLength
                | Selector::ServiceTime
                | Selector::HistoricalServiceTime
        ) {
            return bad(
                "selector",
                format!(
                    "unknown selector '{}' (round-robin, queue-length, service-time, historical-service-time)",
                    self.maps.selector
                ),
            );
        }
        if let Some(g) = &self.maps.path_grouping_policy {
            match g.parse::<Grouping>() {
                Err(e) => return bad("path_grouping_policy", e),
                // The identity policies need what only planning a map from
                // multipath.conf reads (serials, node names).
                Ok(Grouping::GroupBySerial | Grouping::GroupByNodeName) => {
                    return bad(
                        "path_grouping_policy",
                        format!(
                            "'{g}' is multipath.conf's alone (here: failover, multibus, group_by_prio, group_by_tpg)"
                        ),
                    );
                }
                Ok(_) => {}
            }
        }
        if let Some(s) = self.maps.no_path_retry_secs
            && !(0.0..=86400.0).contains(&s)
        {
            return bad(
                "no_path_retry_secs",
                format!("{s} is out of range (0 to 86400)"),
            );
        }
        for (wwid, alias) in &self.maps.aliases {
            if alias.is_empty() || alias.len() > 127 || alias.contains('/') {
                return bad(
                    "aliases",
                    format!("'{alias}' (for {wwid}) is not a usable map name"),
                );
            }
        }
        let c = &self.checker;
        if !(0.1..=600.0).contains(&c.interval_secs) {
            return bad(
                "interval_secs",
                format!("{} is out of range (0.1 to 600)", c.interval_secs),
            );
        }
        if let Some(m) = c.max_interval_secs
            && !(c.interval_secs..=3600.0).contains(&m)
        {
            return bad(
                "max_interval_secs",
                format!(
                    "{m} is out of range (interval_secs, {}, to 3600)",
                    c.interval_secs
                ),
            );
        }
        if !(0.1..=600.0).contains(&c.timeout_secs) {
            return bad(
                "timeout_secs",
                format!("{} is out of range (0.1 to 600)", c.timeout_secs),
            );
        }
        let t = &self.tuner;
        if !(1..=100).contains(&t.windows) {
            return bad(
                "windows",
                format!("{} is out of range (1 to 100)", t.windows),
            );
        }
        if t.settle_windows > 100 {
            return bad(
                "settle_windows",
                format!("{} is out of range (0 to 100)", t.settle_windows),
            );
        }
        if !(0.0..=100.0).contains(&t.min_gain_pct) {
            return bad(
                "min_gain_pct",
                format!("{} is out of range (0 to 100)", t.min_gain_pct),
            );
        }
        for (k, v) in [
            ("reload_min_interval_secs", t.reload_min_interval_secs),
            ("max_stall_ms", t.max_stall_ms),
            ("reload_cooldown_secs", t.reload_cooldown_secs),
            ("flap_hold_secs", t.flap_hold_secs),
            ("retry_after_secs", t.retry_after_secs),
        ] {
            if !(0.0..=86400.0 * 1000.0).contains(&v) {
                return bad(k, format!("{v} is out of range"));
            }
        }
        let m = &self.marginal;
        for (k, v, range) in [
            ("latency_ratio", m.latency_ratio, 1.5..=1000.0),
            ("error_rate_pct", m.error_rate_pct, 0.01..=100.0),
            ("sample_secs", m.sample_secs, 0.0..=3600.0),
            ("recovery_secs", m.recovery_secs, 1.0..=86400.0),
        ] {
            if !range.contains(&v) {
                return bad(
                    k,
                    format!("{v} is out of range ({} to {})", range.start(), range.end()),
                );
            }
        }
        if !(1..=100_000).contains(&m.min_samples) {
            return bad(
                "min_samples",
                format!("{} is out of range (1 to 100000)", m.min_samples),
            );
        }
        self.filter()
            .map_err(|e| format!("{}{e}", line_of("deny")))?;
        Ok(())
    }

    pub fn filter(&self) -> Result<Filter, String> {
        let rules = |v: &[String]| {
            v.iter()
                .map(|r| Rule::parse(r))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Filter::new(
            rules(&self.filter.deny)?,
            rules(&self.filter.allow)?,
        ))
    }

    /// The rules a scan for paths applies: `[filter]`'s, and
    /// multipath.conf's blacklist and exceptions where it is followed.
    pub fn scan_filter(&self) -> Result<Filter, String> {
        let mut f = self.filter()?;
        if let Some(eff) = crate::mpconf::followed(self).map_err(|e| e.to_string())? {
            let (deny, allow) = crate::mpconf::lun::filter_rules(&eff)?;
            f.deny.extend(deny);
            f.allow.extend(allow);
        }
        Ok(f)
    }

    /// Whether maps follow multipath-tools' configuration: the key, else
    /// whether multipath-tools is `installed`.
    pub fn follow_multipath_conf(&self, installed: bool) -> bool {
        self.maps.follow_multipath_conf.unwrap_or(installed)
    }

    /// The grouping of a new map: the configured one, else group_by_prio
    /// on an ALUA array (`alua`), multibus otherwise.
    pub fn grouping(&self, alua: bool) -> Grouping {
        match self.maps.path_grouping_policy.as_deref().map(str::parse) {
            Some(Ok(g)) => g,
            _ if alua => Grouping::GroupByPrio,
            _ => Grouping::Multibus,
        }
    }

    pub fn tuner(&self) -> tuner::TunerConfig {
        let t = &self.tuner;
        tuner::TunerConfig {
            windows: t.windows,
            settle_windows: t.settle_windows,
            min_gain: t.min_gain_pct / 100.0,
            reload_min_interval_s: t.reload_min_interval_secs,
            max_stall_ms: t.max_stall_ms,
            reload_cooldown_s: t.reload_cooldown_secs,
            flap_hold_s: t.flap_hold_secs,
            retry_after_s: t.retry_after_secs,
        }
    }

    pub fn window(&self) -> Duration {
        Duration::from_secs_f64(self.window_secs)
    }

    /// How often each path is checked and discovery looks for changes.
    pub fn checker_interval(&self) -> Duration {
        Duration::from_secs_f64(self.checker.interval_secs)
    }

    /// The longest time between two checks of a healthy path.
    pub fn checker_max_interval(&self) -> Duration {
        Duration::from_secs_f64(
            self.checker
                .max_interval_secs
                .unwrap_or(4.0 * self.checker.interval_secs),
        )
    }
}

/// One documented key of the config file: where it is, its default (read
/// off [`Config::default`], so the documentation cannot drift from the
/// code) and one line on it. docs/configuration.md's config block, the packaged
/// `/etc/pathpilot/config.toml` and pathpilot.conf(5) are made from this.
pub struct KeyDoc {
    /// `""` for the top level, else the table (`maps`, `checker`, ...).
    pub section: &'static str,
    pub key: &'static str,
    /// The default as TOML; `None`: unset by default (`example` shows a value).
    pub default: fn(&Config) -> Option<String>,
    /// A value to show for a key that is unset by default.
    pub example: Option<&'static str>,
    pub doc: &'static str,
}

fn toml_str(s: &str) -> String {
    format!("{s:?}")
}

fn toml_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn toml_list(v: &[String]) -> String {
    format!(
        "[{}]",
        v.iter().map(|s| toml_str(s)).collect::<Vec<_>>().join(", ")
    )
}

/// Every key of the config file, in file order.
pub const KEYS: &[KeyDoc] = &[
    KeyDoc {
        section: "",
        key: "mode",
        default: |c| Some(toml_str(mode_name(c.mode))),
        example: None,
        doc: "observe | advise | tune",
    },
    KeyDoc {
        section: "",
        key: "window_secs",
        default: |c| Some(toml_num(c.window_secs)),
        example: None,
        doc: "measurement and tuning window (0.5..3600)",
    },
    KeyDoc {
        section: "",
        key: "socket",
        default: |c| Some(toml_str(&c.socket)),
        example: None,
        doc: "the control socket",
    },
    KeyDoc {
        section: "",
        key: "read_group",
        default: |c| c.read_group.as_deref().map(toml_str),
        example: Some("\"storage\""),
        doc: "a group that may read status/log (unset: root only)",
    },
    KeyDoc {
        section: "",
        key: "metrics",
        default: |c| Some(toml_str(&c.metrics)),
        example: None,
        doc: "Prometheus endpoint address, or \"off\"",
    },
    KeyDoc {
        section: "",
        key: "metrics_histograms",
        default: |c| Some(toml_str(c.metrics_histograms.name())),
        example: None,
        doc: "finest histograms exported: size_classes | paths | maps (fewer series)",
    },
    KeyDoc {
        section: "",
        key: "bio_probe",
        default: |c| Some(c.bio_probe.to_string()),
        example: None,
        doc: "per-bio probe: cgroup bytes, bio order (true: about 30% more eBPF per I/O)",
    },
    KeyDoc {
        section: "",
        key: "observe_duty",
        default: |c| Some(toml_num(c.observe_duty)),
        example: None,
        doc: "share of each window the probes run, unless tuning or a path is suspect (0.05..1; docs/sampled-observation.md)",
    },
    KeyDoc {
        section: "maps",
        key: "create",
        default: |c| Some(c.maps.create.to_string()),
        example: None,
        doc: "create maps for discovered WWIDs",
    },
    KeyDoc {
        section: "maps",
        key: "min_paths",
        default: |c| Some(c.maps.min_paths.to_string()),
        example: None,
        doc: "... that have at least this many paths",
    },
    KeyDoc {
        section: "maps",
        key: "selector",
        default: |c| Some(toml_str(&c.maps.selector)),
        example: None,
        doc: "round-robin | queue-length | service-time | historical-service-time",
    },
    KeyDoc {
        section: "maps",
        key: "path_grouping_policy",
        default: |c| c.maps.path_grouping_policy.as_deref().map(toml_str),
        example: Some("\"group_by_prio\""),
        doc: "failover | multibus | group_by_prio | group_by_tpg (unset: group_by_prio on ALUA arrays, else multibus)",
    },
    KeyDoc {
        section: "maps",
        key: "queue_if_no_path",
        default: |c| Some(c.maps.queue_if_no_path.to_string()),
        example: None,
        doc: "queue I/O while no path is usable",
    },
    KeyDoc {
        section: "maps",
        key: "no_path_retry_secs",
        default: |c| c.maps.no_path_retry_secs.map(toml_num),
        example: Some("30"),
        doc: "unset: queue until a path returns",
    },
    KeyDoc {
        section: "maps",
        key: "follow_multipath_conf",
        default: |c| c.maps.follow_multipath_conf.map(|b| b.to_string()),
        example: Some("true"),
        doc: "build maps as multipath.conf and its per-array table say (unset: where multipath-tools is installed)",
    },
    KeyDoc {
        section: "maps",
        key: "adopt",
        default: |c| Some(toml_list(&c.maps.adopt)),
        example: None,
        doc: "WWIDs of maps made by others to manage",
    },
    KeyDoc {
        section: "maps",
        key: "aliases",
        default: |c| {
            Some(format!(
                "{{{}}}",
                c.maps
                    .aliases
                    .iter()
                    .map(|(k, v)| format!(" {} = {} ", toml_str(k), toml_str(v)))
                    .collect::<Vec<_>>()
                    .join(",")
            ))
        },
        example: None,
        doc: "{ \"<wwid>\" = \"name\" }",
    },
    KeyDoc {
        section: "checker",
        key: "interval_secs",
        default: |c| Some(toml_num(c.checker.interval_secs)),
        example: None,
        doc: "between checks of a path (0.1..600)",
    },
    KeyDoc {
        section: "checker",
        key: "max_interval_secs",
        default: |c| c.checker.max_interval_secs.map(toml_num),
        example: Some("8"),
        doc: "a healthy path's checks slow down to this (unset: 4 x interval)",
    },
    KeyDoc {
        section: "checker",
        key: "timeout_secs",
        default: |c| Some(toml_num(c.checker.timeout_secs)),
        example: None,
        doc: "a check silent this long fails the path",
    },
    KeyDoc {
        section: "tuner",
        key: "windows",
        default: |c| Some(c.tuner.windows.to_string()),
        example: None,
        doc: "windows measured per baseline and per trial",
    },
    KeyDoc {
        section: "tuner",
        key: "settle_windows",
        default: |c| Some(c.tuner.settle_windows.to_string()),
        example: None,
        doc: "windows skipped after a change",
    },
    KeyDoc {
        section: "tuner",
        key: "min_gain_pct",
        default: |c| Some(toml_num(c.tuner.min_gain_pct)),
        example: None,
        doc: "smallest gain kept, whatever the noise",
    },
    KeyDoc {
        section: "tuner",
        key: "reload_min_interval_secs",
        default: |c| Some(toml_num(c.tuner.reload_min_interval_secs)),
        example: None,
        doc: "between two reloads of a map",
    },
    KeyDoc {
        section: "tuner",
        key: "max_stall_ms",
        default: |c| Some(toml_num(c.tuner.max_stall_ms)),
        example: None,
        doc: "a reload stalling I/O longer stops reloads ...",
    },
    KeyDoc {
        section: "tuner",
        key: "reload_cooldown_secs",
        default: |c| Some(toml_num(c.tuner.reload_cooldown_secs)),
        example: None,
        doc: "... for this long",
    },
    KeyDoc {
        section: "tuner",
        key: "flap_hold_secs",
        default: |c| Some(toml_num(c.tuner.flap_hold_secs)),
        example: None,
        doc: "quiet time after a path state change",
    },
    KeyDoc {
        section: "tuner",
        key: "retry_after_secs",
        default: |c| Some(toml_num(c.tuner.retry_after_secs)),
        example: None,
        doc: "before a rejected or failed change is tried again",
    },
    KeyDoc {
        section: "marginal",
        key: "enabled",
        default: |c| Some(c.marginal.enabled.to_string()),
        example: None,
        doc: "judge paths sick from their I/O, set them aside",
    },
    KeyDoc {
        section: "marginal",
        key: "latency_ratio",
        default: |c| Some(toml_num(c.marginal.latency_ratio)),
        example: None,
        doc: "bad: service time this x the peers' (beyond usual)",
    },
    KeyDoc {
        section: "marginal",
        key: "error_rate_pct",
        default: |c| Some(toml_num(c.marginal.error_rate_pct)),
        example: None,
        doc: "bad: this share of its commands failed",
    },
    KeyDoc {
        section: "marginal",
        key: "sample_secs",
        default: |c| Some(toml_num(c.marginal.sample_secs)),
        example: None,
        doc: "bad this long on end: marginal",
    },
    KeyDoc {
        section: "marginal",
        key: "recovery_secs",
        default: |c| Some(toml_num(c.marginal.recovery_secs)),
        example: None,
        doc: "set aside this long, doubled per episode",
    },
    KeyDoc {
        section: "marginal",
        key: "min_samples",
        default: |c| Some(c.marginal.min_samples.to_string()),
        example: None,
        doc: "latency samples a window needs to judge a path",
    },
    KeyDoc {
        section: "filter",
        key: "deny",
        default: |c| Some(toml_list(&c.filter.deny)),
        example: None,
        doc: "\"wwid=RE\", \"devnode=RE\", \"device=VENDOR[/PRODUCT]\", \"property=RE\", \"protocol=RE\"",
    },
    KeyDoc {
        section: "filter",
        key: "allow",
        default: |c| Some(toml_list(&c.filter.allow)),
        example: None,
        doc: "blacklist_exceptions",
    },
    KeyDoc {
        section: "beside",
        key: "apply",
        default: |c| Some(c.beside.apply.to_string()),
        example: None,
        doc: "apply table advice through multipathd (conf.d + reconfigure)",
    },
];

/// A line on each table, after its `[name]`.
fn section_doc(section: &str) -> &'static str {
    match section {
        "filter" => "multipath.conf blacklist semantics",
        "beside" => "maps multipathd owns (docs/migration.md)",
        "marginal" => "sick paths (docs/marginal-paths.md)",
        _ => "",
    }
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Observe => "observe",
        Mode::Advise => "advise",
        Mode::Tune => "tune",
    }
}

/// The config file with every key at its default and a line on each:
/// `commented` comments the keys out (the packaged file: an untouched file
/// is all defaults); otherwise docs/configuration.md's form. Keys unset by default
/// are always commented, with an example value.
pub fn default_file(commented: bool) -> String {
    let d = Config::default();
    let mut out = String::new();
    let mut section = "";
    for k in KEYS {
        if k.section != section {
            section = k.section;
            let head = format!("[{section}]");
            let doc = section_doc(section);
            if doc.is_empty() {
                out.push_str(&format!("\n{head}\n"));
            } else {
                out.push_str(&format!("\n{head:<37} # {doc}\n"));
            }
        }
        let (value, hash) = match (k.default)(&d) {
            Some(v) => (v, if commented { "# " } else { "" }),
            None => (k.example.unwrap_or("").to_string(), "# "),
        };
        let line = format!("{hash}{} = {value}", k.key);
        out.push_str(&format!("{line:<37} # {}\n", k.doc));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_all_defaults() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn a_full_config_parses() {
        let c = Config::parse(
            r#"
mode = "advise"
window_secs = 2
metrics = "off"
read_group = "storage"
[maps]
selector = "queue-length"
adopt = ["35000c500deadbeef"]
aliases = { "35000c500deadbeef" = "data" }
[checker]
interval_secs = 1
timeout_secs = 3
[tuner]
min_gain_pct = 3
[filter]
deny = ["devnode=^sda$"]
allow = ["wwid=^3500"]
"#,
        )
        .unwrap();
        assert_eq!(c.mode, Mode::Advise);
        assert_eq!(c.maps.aliases["35000c500deadbeef"], "data");
        assert_eq!(c.tuner().min_gain, 0.03);
        assert!(c.filter().is_ok());
    }

    #[test]
    fn unknown_keys_name_key_and_line() {
        let e = Config::parse("mode = \"tune\"\n\n[checker]\ninterval = 2\n").unwrap_err();
        assert!(e.contains("line 4") && e.contains("interval"), "{e}");
        let e = Config::parse("colour = 1").unwrap_err();
        assert!(e.contains("line 1") && e.contains("colour"), "{e}");
    }

    #[test]
    fn bad_values_name_key_and_line() {
        let e = Config::parse("mode = \"fast\"").unwrap_err();
        assert!(e.contains("line 1") && e.contains("fast"), "{e}");
        let e = Config::parse("window_secs = 0").unwrap_err();
        assert!(e.contains("line 1: window_secs"), "{e}");
        let e = Config::parse("[maps]\nselector = \"random\"").unwrap_err();
        assert!(
            e.contains("line 2: selector: unknown selector 'random'"),
            "{e}"
        );
        let e = Config::parse("observe_duty = 0").unwrap_err();
        assert!(
            e.contains("line 1: observe_duty: 0 is out of range (0.05 to 1)"),
            "{e}"
        );
        assert!(Config::parse("observe_duty = 1.5").is_err());
        assert_eq!(
            Config::parse("observe_duty = 0.25").unwrap().observe_duty,
            0.25
        );
        assert_eq!(Config::default().observe_duty, 0.25);
        let e = Config::parse("metrics = \"everywhere\"").unwrap_err();
        assert!(e.contains("metrics"), "{e}");
        let e = Config::parse("metrics_histograms = \"all\"").unwrap_err();
        assert!(
            e.contains("metrics_histograms") && e.contains("size_classes"),
            "{e}"
        );
        assert_eq!(
            Config::parse("metrics_histograms = \"maps\"")
                .unwrap()
                .metrics_histograms,
            MetricsHistograms::Maps
        );
        let e = Config::parse("[maps]\nno_path_retry_secs = -3").unwrap_err();
        assert!(e.contains("line 2: no_path_retry_secs"), "{e}");
        assert_eq!(
            Config::parse("[maps]\nno_path_retry_secs = 30")
                .unwrap()
                .maps
                .no_path_retry_secs,
            Some(30.0)
        );
        let e = Config::parse("[maps]\npath_grouping_policy = \"by_luck\"").unwrap_err();
        assert!(e.contains("line 2: path_grouping_policy: unknown"), "{e}");
        let c = Config::parse("[maps]\npath_grouping_policy = \"failover\"").unwrap();
        assert_eq!(c.grouping(true), Grouping::Failover);
        assert_eq!(Config::default().grouping(true), Grouping::GroupByPrio);
        assert_eq!(Config::default().grouping(false), Grouping::Multibus);
        let e = Config::parse("[checker]\ntimeout_secs = -1").unwrap_err();
        assert!(e.contains("line 2: timeout_secs"), "{e}");
        let e = Config::parse("[checker]\ninterval_secs = 2\nmax_interval_secs = 1").unwrap_err();
        assert!(
            e.contains("max_interval_secs: 1 is out of range (interval_secs, 2, to 3600)"),
            "{e}"
        );
        let c = Config::parse("[checker]\ninterval_secs = 1").unwrap();
        assert_eq!(c.checker_max_interval(), Duration::from_secs(4));
        let c = Config::parse("[checker]\ninterval_secs = 1\nmax_interval_secs = 1").unwrap();
        assert_eq!(
            c.checker_max_interval(),
            Duration::from_secs(1),
            "no back-off"
        );
        let e = Config::parse("[marginal]\nenabled = true\nlatency_ratio = 1").unwrap_err();
        assert!(
            e.contains("line 3: latency_ratio: 1 is out of range (1.5 to 1000)"),
            "{e}"
        );
        let e = Config::parse("[marginal]\nmin_samples = 0").unwrap_err();
        assert!(e.contains("line 2: min_samples"), "{e}");
        let e = Config::parse("[marginal]\nsample_time = 4").unwrap_err();
        assert!(e.contains("sample_time"), "{e}");
        let c = Config::parse("[marginal]\nenabled = false\nrecovery_secs = 60").unwrap();
        assert!(!c.marginal.enabled);
        assert_eq!(c.marginal.recovery_secs, 60.0);
        let e = Config::parse("[filter]\ndeny = [\"nonsense\"]").unwrap_err();
        assert!(e.contains("line 2") && e.contains("nonsense"), "{e}");
        let e = Config::parse("window_secs = \"five\"").unwrap_err();
        assert!(
            e.contains("line 1") && e.contains("window_secs") || e.contains("invalid type"),
            "{e}"
        );
    }

    #[test]
    fn the_default_file_may_be_absent_an_explicit_one_not() {
        let p = Path::new("/nonexistent/pathpilot.toml");
        assert!(Config::load(p, false).is_ok());
        let e = Config::load(p, true).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/pathpilot.toml"), "{e}");
    }

    #[test]
    fn the_documented_defaults_are_the_defaults() {
        // Every key, uncommented, parses to the built-in defaults.
        let text: String = default_file(false)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(Config::parse(&text).unwrap(), Config::default(), "{text}");
        // The packaged file, all commented out, too; and it names every key.
        let packaged = default_file(true);
        assert_eq!(Config::parse(&packaged).unwrap(), Config::default());
        for k in KEYS {
            assert!(packaged.contains(&format!("# {} = ", k.key)), "{}", k.key);
        }
        // An unset key's example is a valid value for it.
        let examples: String = default_file(false)
            .lines()
            .map(|l| l.trim_start_matches("# "))
            .map(|l| format!("{l}\n"))
            .collect();
        Config::parse(&examples).unwrap();
    }

    #[test]
    fn the_configuration_page_shows_the_documented_defaults() {
        let page = include_str!("../../docs/configuration.md");
        let block = page
            .split("```toml\n")
            .nth(1)
            .and_then(|b| b.split("```").next())
            .expect("a toml block in docs/configuration.md");
        assert_eq!(
            block.trim(),
            default_file(false).trim(),
            "docs/configuration.md's config block differs from the defaults in the code: \
             paste the config.toml of `pathpilot generate config --uncommented DIR`"
        );
        // Every key has its own entry below the block.
        for k in KEYS {
            let entry = match k.section {
                "" => format!("### `{}`", k.key),
                s => format!("### `{s}.{}`", k.key),
            };
            assert!(
                page.contains(&entry),
                "docs/configuration.md has no {entry:?}"
            );
        }
    }
}
