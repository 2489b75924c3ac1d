//! The dashboard fed by the daemon: each refresh is one `status` request
//! over the control socket, and the keys' requests (pause, fail, ...) are
//! sent there too.
use std::{
    collections::{HashMap, VecDeque},
    path::PathBuf,
    time::Duration,
};

use pathpilot_dashboards::{
    app::Request as UiRequest,
    model::{DecisionView, MapView, Model, PathView, SizeClassView},
    term,
};

use crate::ctl::{
    client::{self, ClientError, LogEntry, StatusView},
    protocol::ControlRequest,
    status::{MapReport, PathReport},
};
use crate::observer::interval::cgroup_shares;

/// Sparkline samples kept per path.
const HISTORY: usize = 120;

/// (bucket, count) pairs, the dashboard's histogram form.
type Hist = Vec<(u64, u64)>;

/// What is remembered of a map between refreshes to show its histograms
/// per daemon window rather than since the daemon started.
#[derive(Default)]
struct MapMemory {
    /// The cumulative histograms last seen.
    totals: (Hist, Hist),
    /// The last non-empty difference: a refresh that sees the same window
    /// again (the dashboard refreshes faster than the daemon's window)
    /// shows it again instead of an empty histogram.
    shown: (Hist, Hist),
}

pub struct DaemonSource {
    pub socket: PathBuf,
    pub interval: Duration,
    /// Throughput samples per "map/path", in KiB/s.
    pub history: HashMap<String, VecDeque<u64>>,
    maps: HashMap<String, MapMemory>,
    /// Whether each map was paused at the last refresh, for the `p` toggle.
    paused: HashMap<String, bool>,
}

impl DaemonSource {
    pub fn new(socket: PathBuf, interval: Duration) -> Self {
        DaemonSource {
            socket,
            interval,
            history: HashMap::new(),
            maps: HashMap::new(),
            paused: HashMap::new(),
        }
    }

    /// Whether a daemon answers `status` on the socket.
    pub fn probe(socket: &std::path::Path) -> Result<(), ClientError> {
        client::call(socket, &ControlRequest::Status).map(drop)
    }

    /// The dashboard model of a status (the socket's JSON).
    pub fn model(&mut self, s: &StatusView) -> Model {
        self.paused = s.maps.iter().map(|m| (m.name.clone(), m.paused)).collect();
        let maps = s.maps.iter().map(|m| self.map_view(m)).collect();
        let mode = s
            .mode
            .map(|m| format!("{m:?}").to_lowercase())
            .unwrap_or_else(|| "-".into());
        Model {
            source: format!("daemon pid {} ({mode})", s.pid),
            interval_s: if s.window_s > 0.0 {
                s.window_s
            } else {
                self.interval.as_secs_f64()
            },
            maps,
            hidden_maps: 0,
            decisions: s.decisions.iter().map(decision_view).collect(),
            cgroups_not_counted: !s.bio_probe,
        }
    }

    fn map_view(&mut self, m: &MapReport) -> MapView {
        let mem = self.maps.entry(m.name.clone()).or_default();
        let cur = (m.totals.size_hist.clone(), m.totals.lat_hist.clone());
        if mem.totals != cur {
            // On the first sight there is no earlier total: the histograms
            // since the daemon started are better than nothing.
            mem.shown = (
                hist_delta(&cur.0, &mem.totals.0),
                hist_delta(&cur.1, &mem.totals.1),
            );
            mem.totals = cur;
        }
        let (size_hist, lat_hist) = mem.shown.clone();
        let paths = m.paths.iter().map(|p| self.path_view(&m.name, p)).collect();
        MapView {
            name: m.name.clone(),
            wwid: m.wwid.clone(),
            dm_dev: m.dm_name.clone(),
            selector: m.selector.clone(),
            features: m.features.clone(),
            state: m.state.clone(),
            tuner: if m.paused {
                "paused".into()
            } else if m.tuner.is_empty() {
                "-".into()
            } else {
                m.tuner.clone()
            },
            iops: m.rates.iops,
            mib_s: m.rates.read_mib_s + m.rates.write_mib_s,
            paths,
            size_hist,
            lat_hist,
            cgroups: cgroup_views(&m.cgroups),
        }
    }

    fn path_view(&mut self, map: &str, p: &PathReport) -> PathView {
        let mib_s = p.rates.read_mib_s + p.rates.write_mib_s;
        let h = self.history.entry(format!("{map}/{}", p.name)).or_default();
        h.push_back((mib_s * 1024.0).max(0.0) as u64);
        while h.len() > HISTORY {
            h.pop_front();
        }
        PathView {
            device: p.name.clone(),
            hctl: p.hctl.clone(),
            dev: p.dev.clone(),
            // A path set aside (or back on probation) is marked in the
            // DM column; failed says more, and wins.
            dm_state: match p.health.as_str() {
                "marginal" if p.dm_state == "active" => "marg".into(),
                "probation" if p.dm_state == "active" => "prob".into(),
                _ => p.dm_state.clone(),
            },
            checker: p.checker.clone(),
            iops: p.rates.iops,
            mib_s,
            share_pct: p.share_pct,
            avg_kib: p.rates.avg_request_kib,
            merge_pct: p.rates.merge_pct,
            lat_p50_us: p.rates.lat_p50_us,
            lat_p99_us: p.rates.lat_p99_us,
            inflight: p.rates.inflight,
            weight: match p.weight {
                Some(w) => w.to_string(),
                None => format!("pg{}", p.group),
            },
            history: h.iter().copied().collect(),
            lat_by_size: p
                .rates
                .lat_by_size
                .iter()
                .map(|c| SizeClassView {
                    class: c.class.clone(),
                    samples: c.samples,
                    p50_us: c.p50_us,
                    p99_us: c.p99_us,
                })
                .collect(),
        }
    }

    fn send(&self, req: ControlRequest, done: impl FnOnce(&serde_json::Value) -> String) -> String {
        match client::call(&self.socket, &req) {
            Ok(v) => done(&v),
            Err(e) => format!("error: {e}"),
        }
    }
}

fn hist_delta(cur: &[(u64, u64)], prev: &[(u64, u64)]) -> Hist {
    cur.iter()
        .map(|(k, c)| {
            let p = prev.iter().find(|(pk, _)| pk == k).map_or(0, |(_, c)| *c);
            (*k, c.saturating_sub(p))
        })
        .filter(|(_, c)| *c > 0)
        .collect()
}

/// Each cgroup's share of the bytes submitted to a map, as the dashboard
/// names them, largest first.
pub(super) fn cgroup_views(bytes: &[(u64, u64)]) -> Vec<(String, f64)> {
    cgroup_shares(bytes)
        .into_iter()
        .map(|(id, pct)| (format!("cgroup {id}"), pct))
        .collect()
}

fn decision_view(d: &LogEntry) -> DecisionView {
    DecisionView {
        time: client::local_clock(d.unix),
        map: d.map.clone(),
        knob: d.knob.clone().unwrap_or_else(|| "-".into()),
        change: if d.old.is_empty() && d.new.is_empty() {
            String::new()
        } else {
            format!("{} -> {}", d.old, d.new)
        },
        reason: d.reason.clone(),
        outcome: d.outcome.clone(),
    }
}

impl term::Source for DaemonSource {
    fn refresh(&mut self) -> Result<Model, String> {
        let data =
            client::call(&self.socket, &ControlRequest::Status).map_err(|e| e.to_string())?;
        let s: StatusView = serde_json::from_value(data)
            .map_err(|e| format!("the daemon's status is not understood: {e}"))?;
        Ok(self.model(&s))
    }

    fn request(&mut self, r: &UiRequest) -> String {
        match r {
            UiRequest::Quit => String::new(),
            UiRequest::TogglePause { map } => {
                if self.paused.get(map).copied().unwrap_or(false) {
                    self.send(ControlRequest::Resume { map: map.clone() }, |_| {
                        format!("resumed tuning on {map}")
                    })
                } else {
                    self.send(ControlRequest::Pause { map: map.clone() }, |_| {
                        format!("paused tuning on {map}")
                    })
                }
            }
            UiRequest::FailPath { map, path } => self
                .send(ControlRequest::Fail { path: path.clone() }, |_| {
                    format!("failed {path} in {map}")
                }),
            UiRequest::ReinstatePath { map, path } => self
                .send(ControlRequest::Reinstate { path: path.clone() }, |_| {
                    format!("reinstated {path} in {map}")
                }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctl::fixture::example_status;

    fn view() -> StatusView {
        serde_json::from_value(serde_json::to_value(example_status()).unwrap()).unwrap()
    }

    #[test]
    fn status_becomes_the_model() {
        let mut src = DaemonSource::new("/nonexistent".into(), Duration::from_secs(1));
        let m = src.model(&view());
        assert_eq!(m.source, "daemon pid 4321 (tune)");
        assert_eq!(m.interval_s, 2.0);
        assert_eq!(m.maps.len(), 2);
        let a = &m.maps[0];
        assert_eq!(
            (a.name.as_str(), a.dm_dev.as_str(), a.selector.as_str()),
            ("mpatha", "dm-0", "service-time")
        );
        assert_eq!((a.state.as_str(), a.tuner.as_str()), ("degraded", "tune"));
        assert_eq!(a.mib_s, 30.5);
        assert_eq!(a.iops, 480.0);
        // First sight: the histograms since the daemon started.
        assert_eq!(a.size_hist, [(4096, 30), (65536, 300)]);
        assert_eq!(a.lat_hist.len(), 4);
        assert_eq!(a.cgroups[0].0, "cgroup 1234");
        assert_eq!(a.cgroups[0].1, 75.0);
        let sdc = &a.paths[1];
        assert_eq!(sdc.device, "sdc");
        assert_eq!(
            (sdc.dm_state.as_str(), sdc.checker.as_str()),
            ("failed", "faulty")
        );
        assert_eq!(sdc.hctl, "2:0:0:2");
        assert_eq!(sdc.weight, "20");
        assert_eq!(sdc.share_pct, 25.0);
        assert_eq!(sdc.mib_s, 20.5);
        assert_eq!(sdc.history, [20992]);
        assert_eq!(sdc.lat_p99_us, Some(1800.0));
        assert_eq!(m.maps[1].tuner, "paused");
        assert!(m.maps[1].paths.is_empty());
        // A marginal path that is active is marked; a failed one says so.
        let mut s = view();
        s.maps[0].paths[0].health = "marginal".into();
        let m = src.model(&s);
        assert_eq!(m.maps[0].paths[0].dm_state, "marg");
        assert_eq!(m.maps[0].paths[1].dm_state, "failed");
        let m = DaemonSource::new("/nonexistent".into(), Duration::from_secs(1)).model(&view());

        assert_eq!(m.decisions.len(), 3);
        let d = &m.decisions[1];
        assert_eq!(d.knob, "max_sectors_kb");
        assert_eq!(d.change, "1280 -> 512");
        assert_eq!(d.outcome, "kept");
        assert_eq!(d.time.len(), 8);
        assert_eq!(m.decisions[0].knob, "-");
        assert_eq!(m.decisions[0].change, "");
    }

    #[test]
    fn a_daemon_without_the_bio_probe_shows_cgroups_as_not_counted() {
        let mut src = DaemonSource::new("/nonexistent".into(), Duration::from_secs(1));
        assert!(!src.model(&view()).cgroups_not_counted);
        let mut s = view();
        s.bio_probe = false;
        assert!(src.model(&s).cgroups_not_counted);
        // An older daemon's status has no such field: it always probed.
        let mut v = serde_json::to_value(example_status()).unwrap();
        v.as_object_mut().unwrap().remove("bio_probe");
        let old: StatusView = serde_json::from_value(v).unwrap();
        assert!(!src.model(&old).cgroups_not_counted);
    }

    #[test]
    fn histograms_are_per_window_and_held_between_windows() {
        let mut src = DaemonSource::new("/nonexistent".into(), Duration::from_secs(1));
        let mut s = view();
        src.model(&s);
        s.maps[0].totals.size_hist = vec![(4096, 35), (65536, 300), (1 << 20, 2)];
        let m = src.model(&s);
        assert_eq!(m.maps[0].size_hist, [(4096, 5), (1 << 20, 2)]);
        assert_eq!(m.maps[0].lat_hist, []);
        // The same window again: the same histogram, not an empty one.
        let m = src.model(&s);
        assert_eq!(m.maps[0].size_hist, [(4096, 5), (1 << 20, 2)]);
        assert_eq!(m.maps[0].paths[0].history.len(), 3);
    }

    #[test]
    fn the_pause_key_toggles_from_the_last_status() {
        let mut src = DaemonSource::new("/nonexistent/control.sock".into(), Duration::from_secs(1));
        src.model(&view());
        assert_eq!(src.paused.get("mpathb"), Some(&true));
        assert_eq!(src.paused.get("mpatha"), Some(&false));
        // Without a daemon the footer says so instead of failing.
        let msg = term::Source::request(
            &mut src,
            &UiRequest::TogglePause {
                map: "mpatha".into(),
            },
        );
        assert!(
            msg.starts_with("error: no pathpilot daemon is running"),
            "{msg}"
        );
    }
}
