//! `pathpilot top`: the live dashboard. With a daemon it shows the daemon's
//! view (maps, checker, tuner); without one it runs its own read-only
//! observer on the given devices, or on the paths of every dm map.
use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use pathpilot_dashboards::{
    app::{Request, Ui},
    model::{MapView, Model, PathView, SizeClassView},
    render_text, term,
};

use super::{UsageError, parse_duration, top_daemon::cgroup_views};
use crate::{
    blockdev::{BlockDev, DevNum, display_name, hctl},
    observer::{
        DeviceInterval, Observer, Scope, Snapshot,
        interval::{byte_shares, cgroup_bytes},
        path_to_map,
    },
};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Devices to watch when no daemon runs (default: the paths of every
    /// dm map). A path, a kernel name or MAJ:MIN.
    pub devices: Vec<String>,
    /// Refresh interval.
    #[arg(short, long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Print one screen as text after one interval and exit (for scripts).
    #[arg(long)]
    pub once: bool,
    /// Show only the maps whose name, WWID or dm device contains TEXT (any
    /// case); `/` changes it in the dashboard. With --once, the first
    /// matching map's paths are shown.
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub filter: String,
    /// Screen size for --once, as COLSxROWS.
    #[arg(long, default_value = "120x40")]
    pub size: String,
    /// The daemon's control socket; without a daemon answering there, the
    /// dashboard observes on its own.
    #[arg(long, value_name = "PATH", default_value = crate::ctl::client::DEFAULT_SOCKET)]
    pub socket: std::path::PathBuf,
}

/// Sparkline history kept per device, in samples.
const HISTORY: usize = 120;

/// The dashboard fed by a local, read-only observer.
pub struct ObserverSource {
    obs: Observer,
    prev: Snapshot,
    /// Devices shown when given explicitly; otherwise dm map paths.
    explicit: Vec<BlockDev>,
    history: HashMap<DevNum, VecDeque<u64>>,
    interval: Duration,
}

impl ObserverSource {
    pub fn new(explicit: Vec<BlockDev>, interval: Duration) -> Result<Self> {
        let mut obs = Observer::load(Scope::WatchList).context("cannot start the observer")?;
        for d in &explicit {
            obs.watch(d.dev)?;
        }
        let mut me = Self {
            prev: obs.snapshot()?,
            obs,
            explicit,
            history: HashMap::new(),
            interval,
        };
        me.watch_map_paths(&path_to_map())?;
        Ok(me)
    }

    /// Without explicit devices, follows the dm maps as they come and go
    /// (`maps`: path -> map, as `path_to_map` read them).
    fn watch_map_paths(&mut self, maps: &HashMap<DevNum, DevNum>) -> Result<()> {
        if !self.explicit.is_empty() {
            return Ok(());
        }
        let watched = self.obs.watched();
        for (&p, &m) in maps {
            for d in [p, m] {
                if !watched.contains(&d) {
                    self.obs.watch(d)?;
                }
            }
        }
        Ok(())
    }

    fn path_view(&mut self, i: &DeviceInterval, share_pct: f64, weight: String) -> PathView {
        let dev: DevNum = i.dev.parse().unwrap_or(DevNum::new(0, 0));
        let h = self.history.entry(dev).or_default();
        h.push_back(((i.read_mib_s + i.write_mib_s) * 1024.0) as u64);
        while h.len() > HISTORY {
            h.pop_front();
        }
        PathView {
            device: i.device.clone(),
            hctl: hctl(dev),
            dev: i.dev.clone(),
            dm_state: "-".into(),
            checker: "-".into(),
            iops: i.iops,
            mib_s: i.read_mib_s + i.write_mib_s,
            share_pct,
            avg_kib: i.avg_request_bytes / 1024.0,
            merge_pct: i.merge_pct,
            lat_p50_us: i.lat_p50_us,
            lat_p99_us: i.lat_p99_us,
            inflight: i.inflight,
            weight,
            history: h.iter().copied().collect(),
            lat_by_size: i
                .lat_by_size
                .iter()
                .map(|c| SizeClassView {
                    class: c.class.to_string(),
                    samples: c.samples,
                    p50_us: c.p50_us,
                    p99_us: c.p99_us,
                })
                .collect(),
        }
    }
}

fn interval_of(dev: DevNum, prev: &Snapshot, cur: &Snapshot) -> DeviceInterval {
    DeviceInterval::between_or_idle(dev, &display_name(dev), None, prev, cur)
}

fn hist(h: &BTreeMap<u64, u64>) -> Vec<(u64, u64)> {
    h.iter().map(|(k, v)| (*k, *v)).collect()
}

impl term::Source for ObserverSource {
    fn refresh(&mut self) -> Result<Model, String> {
        let cur = self.obs.snapshot().map_err(|e| e.to_string())?;
        let mut groups: BTreeMap<String, (Option<DevNum>, Vec<DevNum>)> = BTreeMap::new();
        // One read of sysfs serves the grouping and the watch list.
        let map_of = if self.explicit.is_empty() {
            path_to_map()
        } else {
            HashMap::new()
        };
        if self.explicit.is_empty() {
            for (&p, &m) in &map_of {
                groups
                    .entry(display_name(m))
                    .or_insert((Some(m), vec![]))
                    .1
                    .push(p);
            }
        } else {
            groups.insert(
                "(watched)".into(),
                (None, self.explicit.iter().map(|d| d.dev).collect()),
            );
        }
        let mut maps = Vec::new();
        for (name, (mapdev, mut paths)) in groups {
            paths.sort();
            let rows: Vec<DeviceInterval> = paths
                .iter()
                .map(|p| interval_of(*p, &self.prev, &cur))
                .collect();
            let path_views: Vec<PathView> = rows
                .iter()
                .zip(byte_shares(&rows))
                .map(|(r, share)| self.path_view(r, share, "-".into()))
                .collect();
            // The map's own figures where it is a dm device; else the sum.
            let top = mapdev.map(|m| interval_of(m, &self.prev, &cur));
            let (iops, mib_s) = match &top {
                Some(t) => (t.iops, t.read_mib_s + t.write_mib_s),
                None => (
                    path_views.iter().map(|p| p.iops).sum(),
                    path_views.iter().map(|p| p.mib_s).sum(),
                ),
            };
            let (size_hist, lat_hist) = match &top {
                Some(t) => (hist(&t.size_hist), hist(&t.lat_hist)),
                None => merged_hists(&rows),
            };
            let wwid = mapdev
                .and_then(|m| std::fs::read_to_string(m.sysfs().join("dm/uuid")).ok())
                .map(|u| u.trim().trim_start_matches("mpath-").to_string())
                .unwrap_or_else(|| "-".into());
            maps.push(MapView {
                name,
                wwid,
                dm_dev: mapdev.map(display_name).unwrap_or_else(|| "-".into()),
                selector: "-".into(),
                features: "-".into(),
                state: "-".into(),
                tuner: "-".into(),
                iops,
                mib_s,
                paths: path_views,
                size_hist,
                lat_hist,
                cgroups: cgroup_views(&cgroup_bytes(
                    &self.prev,
                    &cur,
                    &mapdev.into_iter().chain(paths).collect::<Vec<_>>(),
                )),
            });
        }
        self.prev = cur;
        self.watch_map_paths(&map_of).map_err(|e| e.to_string())?;
        Ok(Model {
            source: "observer (read-only)".into(),
            interval_s: self.interval.as_secs_f64(),
            maps,
            hidden_maps: 0,
            decisions: vec![],
            cgroups_not_counted: false,
        })
    }

    fn request(&mut self, r: &Request) -> String {
        match r {
            Request::Quit => String::new(),
            _ => "read-only: no pathpilot daemon is running (start `pathpilot daemon`)".into(),
        }
    }
}

/// (bucket, count) pairs, the dashboard's histogram form.
type Hist = Vec<(u64, u64)>;

fn merged_hists(rows: &[DeviceInterval]) -> (Hist, Hist) {
    let mut s: BTreeMap<u64, u64> = BTreeMap::new();
    let mut l: BTreeMap<u64, u64> = BTreeMap::new();
    for r in rows {
        for (k, v) in &r.size_hist {
            *s.entry(*k).or_default() += v;
        }
        for (k, v) in &r.lat_hist {
            *l.entry(*k).or_default() += v;
        }
    }
    (hist(&s), hist(&l))
}

fn parse_size(s: &str) -> Result<(u16, u16)> {
    let bad = || UsageError(format!("--size '{s}': expected COLSxROWS, e.g. 80x24"));
    let (a, b) = s.split_once('x').ok_or_else(bad)?;
    let (w, h): (u16, u16) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
    if !(20..=1000).contains(&w) || !(5..=1000).contains(&h) {
        return Err(bad().into());
    }
    Ok((w, h))
}

pub fn run(args: Args) -> Result<()> {
    let size = parse_size(&args.size)?;
    let explicit: Vec<BlockDev> = args
        .devices
        .iter()
        .map(|d| BlockDev::resolve(d))
        .collect::<Result<_, _>>()?;
    // The daemon first: it knows the checker and the tuner, and needs no
    // root from us. Devices given explicitly ask for the local observer.
    let probe = explicit
        .is_empty()
        .then(|| super::top_daemon::DaemonSource::probe(&args.socket));
    let mut source: Box<dyn term::Source> = match probe {
        Some(Ok(())) => Box::new(super::top_daemon::DaemonSource::new(
            args.socket.clone(),
            args.interval,
        )),
        no_daemon => {
            // Without a daemon, the dashboard needs its own observer, and so root.
            let obs =
                ObserverSource::new(explicit, args.interval).map_err(|e| match no_daemon {
                    Some(Err(why)) => e.context(format!(
                        "{why}, and the dashboard cannot observe on its own"
                    )),
                    _ => e.context("the dashboard cannot observe on its own"),
                })?;
            Box::new(obs)
        }
    };
    super::signals::install();
    let ui = Ui {
        filter: args.filter.clone(),
        ..Ui::default()
    };
    if args.once {
        std::thread::sleep(args.interval);
        let m = source.refresh().map_err(anyhow::Error::msg)?;
        print!("{}", render_text(&m, &ui, size.0, size.1));
        return Ok(());
    }
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        bail!(UsageError(
            "pathpilot top needs a terminal; use --once for a text snapshot".into()
        ));
    }
    term::run(source.as_mut(), args.interval, ui)?;
    Ok(())
}
