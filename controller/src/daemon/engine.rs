//! The daemon's engine: one thread that owns the maps, the observer, the
//! checkers and the tuners. It wakes on dm events, checker reports and
//! control requests, and every window it measures, tunes and publishes.
//!
//! Order of authority, as in multipathd: the kernel's table and status are
//! the truth (read back after every change); the checker decides whether a
//! path is usable; the tuner only acts on a healthy map.
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc::{self, Receiver, RecvTimeoutError},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::{
    actuator::{self, Target},
    checker::{Checkers, Verdict},
    config::Config,
    protocol::{ErrorCode, Request, Response},
    shared::{Change, Shared},
    status::{DaemonStatus, LOG_KEEP, LoggedDecision, MapState, PathState, Rates, Totals},
};
use crate::{
    blockdev::{BlockDev, DevNum},
    discovery::{self, naming},
    dm::{self, Dm, Message, multipathd},
    mpath::{Feature, MultipathTable, PathState as DmPathState, Selector},
    observer::{DeviceInterval, Observer, Scope, Snapshot},
    tuner::{Decision, Health, Mode, Tuner, Window},
};

/// Where the daemon remembers which maps it created, so that after a
/// restart it adopts them as they are instead of reloading them.
pub const STATE_FILE: &str = "/run/pathpilot/maps.json";

/// A command outstanding on a path this long (seconds) holds the tuner
/// back: a reload's suspend would wait for it, and for ever on a path that
/// has hung but is not failed yet.
const STALLED_S: f64 = 1.0;

#[derive(Default, Serialize, Deserialize)]
struct Owned {
    /// map name -> WWID
    maps: BTreeMap<String, String>,
}

fn load_owned(p: &std::path::Path) -> Owned {
    std::fs::read_to_string(p)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

fn save_owned(p: &std::path::Path, o: &Owned) {
    if let Some(d) = p.parent() {
        let _ = std::fs::create_dir_all(d);
    }
    let tmp = p.with_extension("tmp");
    if std::fs::write(&tmp, serde_json::to_string_pretty(o).unwrap_or_default()).is_ok() {
        let _ = std::fs::rename(&tmp, p);
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Daemon log line (stderr: the journal under systemd).
macro_rules! say {
    ($($a:tt)*) => { eprintln!("pathpilot: {}", format!($($a)*)) };
}

struct PathEntry {
    name: String,
    dev: DevNum,
    hctl: String,
    /// The kernel's last word on it (from the map status).
    dm_failed: bool,
    /// When we saw the kernel fail it: only a check started after that
    /// may reinstate it.
    failed_at: Option<Instant>,
    /// Failed by an operator (socket `fail`): stays failed, whatever the
    /// checker says, until an operator reinstates it.
    admin_failed: bool,
    fail_count: u32,
    group: usize,
    totals: Totals,
}

struct MapEntry {
    name: String,
    wwid: String,
    dev: DevNum,
    kernel_name: String,
    vendor_model: String,
    managed: bool,
    unmanaged_reason: Option<String>,
    table: Option<MultipathTable>,
    suspended: bool,
    /// The live table's queue_if_no_path (what the kernel does now).
    queue_if_no_path: bool,
    /// Whether the map is meant to queue with no path (its table had
    /// queue_if_no_path when it was found or made).
    wants_queue: bool,
    /// Since when no path has been usable (for maps.no_path_retry_secs).
    no_path_since: Option<Instant>,
    /// We sent fail_if_no_path after maps.no_path_retry_secs: queueing
    /// comes back with the first usable path.
    queue_off: bool,
    paths: Vec<PathEntry>,
    tuner: Option<Tuner>,
    last_path_change: Option<Instant>,
    last_event: u32,
    rates: Rates,
    path_rates: HashMap<DevNum, (Rates, f64)>,
    totals: Totals,
    cgroups: Vec<(u64, u64)>,
    class: Option<String>,
}

impl MapEntry {
    fn target_paths(&self) -> Vec<(String, DevNum)> {
        self.paths.iter().map(|p| (p.name.clone(), p.dev)).collect()
    }
}

pub struct Engine {
    cfg: Config,
    config_path: String,
    dm: Dm,
    obs: Observer,
    checkers: Checkers,
    maps: Vec<MapEntry>,
    owned_path: PathBuf,
    owned: Owned,
    shared: Shared,
    prev: Snapshot,
    t0: Instant,
    started_unix: f64,
    next_seq: u64,
    decisions: Vec<LoggedDecision>,
    decision_counts: BTreeMap<String, u64>,
    multipathd: Option<String>,
    stop: Arc<AtomicBool>,
    reload_config: Arc<AtomicBool>,
}

fn totals_add(t: &mut Totals, i: &DeviceInterval) {
    t.read_ios += i.read_ios;
    t.write_ios += i.write_ios;
    t.read_bytes += i.read_bytes;
    t.write_bytes += i.write_bytes;
    t.errors += i.errors;
    t.merges += i.merges;
    let add = |acc: &mut Vec<(u64, u64)>, h: &BTreeMap<u64, u64>| {
        let mut m: BTreeMap<u64, u64> = acc.iter().copied().collect();
        for (k, v) in h {
            *m.entry(*k).or_default() += v;
        }
        *acc = m.into_iter().collect();
    };
    add(&mut t.size_hist, &i.size_hist);
    add(&mut t.lat_hist, &i.lat_hist);
    t.lat_sum_ns += i
        .lat_mean_us
        .map(|m| (m * 1000.0 * i.lat_samples as f64) as u64)
        .unwrap_or(0);
}

fn rates_of(i: &DeviceInterval) -> Rates {
    let n = i.sequential_ios + i.random_ios;
    Rates {
        interval_s: i.interval_s,
        iops: i.iops,
        read_mib_s: i.read_mib_s,
        write_mib_s: i.write_mib_s,
        avg_request_kib: (i.avg_request_bytes / 1024.0 * 10.0).round() / 10.0,
        merge_pct: i.merge_pct,
        lat_p50_us: i.lat_p50_us,
        lat_p99_us: i.lat_p99_us,
        inflight: i.inflight,
        inflight_max: i.inflight_max,
        util_pct: i.util_pct,
        seq_pct: (n > 0).then(|| (i.sequential_ios as f64 / n as f64 * 1000.0).round() / 10.0),
    }
}

impl Engine {
    pub fn start(
        cfg: Config,
        config_path: String,
        shared: Shared,
        stop: Arc<AtomicBool>,
        reload_config: Arc<AtomicBool>,
    ) -> Result<Self> {
        let mut dm = Dm::open().context("device-mapper")?;
        // A reload's suspend waits for the paths' in-flight I/O: past the
        // checker's timeout a path is hung by the daemon's own measure, and
        // waiting on would freeze the map and this thread with it.
        dm.set_suspend_limit(Duration::from_secs_f64(cfg.checker.timeout_secs));
        let obs = Observer::load(Scope::WatchList).context("cannot start the observer")?;
        let checkers = Checkers::new(
            Duration::from_secs_f64(cfg.checker.interval_secs),
            Duration::from_secs_f64(cfg.checker.timeout_secs),
        );
        let owned_path = PathBuf::from(STATE_FILE);
        let owned = load_owned(&owned_path);
        let mut obs = obs;
        let prev = obs.snapshot()?;
        let mut e = Engine {
            cfg,
            config_path,
            dm,
            obs,
            checkers,
            maps: vec![],
            owned_path,
            owned,
            shared,
            prev,
            t0: Instant::now(),
            started_unix: unix_now(),
            next_seq: 1,
            decisions: vec![],
            decision_counts: BTreeMap::new(),
            multipathd: multipathd::running(),
            stop,
            reload_config,
        };
        if let Some(m) = &e.multipathd {
            say!("multipathd is running ({m}): its maps are observed only, none adopted");
        }
        e.adopt_existing()?;
        if e.cfg.maps.create && !e.hands_off() {
            e.create_missing()?;
        }
        e.publish();
        Ok(e)
    }

    /// observe mode changes nothing at all: no maps created, no paths
    /// failed or reinstated, no reloads; it only reports.
    fn hands_off(&self) -> bool {
        self.cfg.mode == Mode::Observe
    }

    fn t(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Every multipath map already present: ours from a previous run and
    /// adopted WWIDs are managed as they are (no reload); others observed.
    fn adopt_existing(&mut self) -> Result<()> {
        for m in self.dm.list()? {
            let Ok(table) = self.dm.multipath_table(&m.name) else {
                continue; // not a multipath target
            };
            let mut info = self.dm.info(&m.name)?;
            let wwid = info
                .uuid
                .as_deref()
                .and_then(|u| u.strip_prefix("mpath-"))
                .unwrap_or("")
                .to_string();
            let ours = self.owned.maps.get(&m.name) == Some(&wwid) && !wwid.is_empty();
            let adopt = !wwid.is_empty() && self.cfg.maps.adopt.contains(&wwid);
            let (managed, reason) = match (&self.multipathd, ours, adopt) {
                (Some(md), _, _) => (
                    false,
                    Some(format!("multipathd is running ({md}) and may own it")),
                ),
                (None, true, _) => (true, None),
                (None, false, true) => (true, None),
                (None, false, false) => (
                    false,
                    Some(format!(
                        "made by another tool: add \"{}\" to maps.adopt to manage it",
                        if wwid.is_empty() { "<its WWID>" } else { &wwid }
                    )),
                ),
            };
            say!(
                "found map {} ({}): {}",
                m.name,
                if wwid.is_empty() { "no WWID" } else { &wwid },
                if managed {
                    if ours {
                        "ours from a previous run, adopted as it is"
                    } else {
                        "adopted (maps.adopt)"
                    }
                } else {
                    "observed only"
                }
            );
            if managed && (info.suspended || info.inactive_table) {
                if self.hands_off() {
                    say!(
                        "{}: left {} by an interrupted reload; observe mode leaves it so",
                        m.name,
                        if info.suspended {
                            "suspended"
                        } else {
                            "with an inactive table"
                        }
                    );
                } else {
                    self.repair(&m.name, &info);
                    info = self.dm.info(&m.name)?;
                }
            }
            self.add_map(m.name.clone(), wwid, info.dev, managed, reason, table)?;
        }
        Ok(())
    }

    /// A controller that died in the middle of a reload (between load and
    /// resume) leaves the map with an inactive table, or suspended with
    /// I/O queued. The live table is the last one known to work: drop the
    /// inactive one first, so that the resume cannot swap it in, then
    /// resume. Nothing else is reloaded.
    fn repair(&self, map: &str, info: &dm::MapInfo) {
        if info.inactive_table {
            match self.dm.clear_inactive(map) {
                Ok(()) => say!("{map}: dropped an inactive table left by an interrupted reload"),
                Err(e) => say!("{map}: cannot drop its inactive table: {e}"),
            }
        }
        if info.suspended {
            match self.dm.resume(map) {
                Ok(()) => say!(
                    "{map}: was left suspended by an interrupted reload: resumed with its live table"
                ),
                Err(e) => say!("{map}: is suspended and cannot be resumed: {e}"),
            }
        }
    }

    fn add_map(
        &mut self,
        name: String,
        wwid: String,
        dev: DevNum,
        managed: bool,
        unmanaged_reason: Option<String>,
        table: MultipathTable,
    ) -> Result<()> {
        let mut paths = vec![];
        for (gi, g) in table.groups.iter().enumerate() {
            for p in &g.paths {
                let name = BlockDev::from_dev(p.dev)
                    .map(|b| b.name)
                    .unwrap_or_else(|| p.dev.to_string());
                paths.push(PathEntry {
                    hctl: crate::cli::top::hctl(p.dev),
                    name,
                    dev: p.dev,
                    dm_failed: false,
                    failed_at: None,
                    admin_failed: false,
                    fail_count: 0,
                    group: gi + 1,
                    totals: Totals::default(),
                });
            }
        }
        paths.sort_by(|a, b| discovery::disk_order(&a.name, &b.name));
        let vendor_model = paths
            .first()
            .and_then(|p| discovery::PathDevice::read(&p.name))
            .map(|d| format!("{},{}", d.vendor, d.model))
            .unwrap_or_default();
        for p in &paths {
            self.obs.watch(p.dev)?;
            if managed {
                self.checkers.add(&p.name);
            }
        }
        self.obs.watch(dev)?;
        let kernel_name = format!("dm-{}", dev.minor);
        let queue_if_no_path = table.has_feature("queue_if_no_path");
        // A map of ours found without queueing was switched off by
        // no_path_retry before a restart: it is still meant to queue.
        let wants_queue = queue_if_no_path
            || (managed
                && self.cfg.maps.queue_if_no_path
                && self.owned.maps.get(&name) == Some(&wwid));
        let mut entry = MapEntry {
            name,
            wwid,
            dev,
            kernel_name,
            vendor_model,
            managed,
            unmanaged_reason,
            table: Some(table),
            suspended: false,
            queue_if_no_path,
            wants_queue,
            no_path_since: None,
            queue_off: wants_queue && !queue_if_no_path,
            paths,
            tuner: None,
            last_path_change: None,
            last_event: 0,
            rates: Rates::default(),
            path_rates: HashMap::new(),
            totals: Totals::default(),
            cgroups: vec![],
            class: None,
        };
        if managed {
            let tp = entry.target_paths();
            let target = Target {
                map: &entry.name,
                kernel_name: &entry.kernel_name,
                paths: &tp,
            };
            let settings = actuator::read_settings(&self.dm, &target)
                .with_context(|| format!("reading {}'s settings", entry.name))?;
            let sels: Vec<Selector> = [
                Selector::ServiceTime,
                Selector::QueueLength,
                Selector::RoundRobin,
            ]
            .into_iter()
            .filter(|s| dm::selector_available(s.name()))
            .collect();
            entry.tuner = Some(Tuner::new(
                &entry.name,
                self.cfg.mode,
                self.cfg.tuner(),
                settings,
                sels,
            ));
        }
        self.maps.push(entry);
        Ok(())
    }

    /// Creates a map for every LUN with enough paths and no map yet.
    fn create_missing(&mut self) -> Result<()> {
        if self.multipathd.is_some() {
            return Ok(());
        }
        let filter = self.cfg.filter().map_err(anyhow::Error::msg)?;
        let scan = discovery::scan(&filter);
        let held: HashSet<DevNum> = self
            .maps
            .iter()
            .flat_map(|m| m.paths.iter().map(|p| p.dev))
            .collect();
        for lun in scan.luns {
            if self.maps.iter().any(|m| m.wwid == lun.wwid) {
                continue;
            }
            let free: Vec<&discovery::PathDevice> = lun
                .paths
                .iter()
                .filter(|p| p.holders.is_empty() && !held.contains(&p.dev))
                .collect();
            if free.len() < self.cfg.maps.min_paths {
                continue;
            }
            let in_use: HashSet<String> = self.dm.list()?.into_iter().map(|m| m.name).collect();
            let mut bindings: Vec<(String, String)> = self
                .cfg
                .maps
                .aliases
                .iter()
                .map(|(w, a)| (a.clone(), w.clone()))
                .collect();
            bindings.extend(naming::system_bindings());
            let name = naming::pick(&lun.wwid, &in_use, &bindings);
            let devs: Vec<DevNum> = free.iter().map(|p| p.dev).collect();
            let selector = Selector::from_name(&self.cfg.maps.selector);
            let mut table = MultipathTable::new(free[0].size_sectors, &devs, selector)?;
            if self.cfg.maps.queue_if_no_path {
                table.features.push(Feature::QueueIfNoPath);
            }
            match self
                .dm
                .create(&name, &format!("mpath-{}", lun.wwid), &table)
            {
                Ok(info) => {
                    say!(
                        "created {name} ({}) over {} paths: {}",
                        lun.wwid,
                        devs.len(),
                        free.iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(" ")
                    );
                    self.owned.maps.insert(name.clone(), lun.wwid.clone());
                    save_owned(&self.owned_path, &self.owned);
                    let applied = self.dm.multipath_table(&name)?;
                    self.add_map(name, lun.wwid.clone(), info.dev, true, None, applied)?;
                }
                Err(e) => say!("cannot create a map for {}: {e}", lun.wwid),
            }
        }
        Ok(())
    }

    /// Runs until stopped. `changes` carries control-socket requests.
    pub fn run(mut self, changes: Receiver<Change>) -> Result<()> {
        // One channel wakes the loop: dm events and control requests.
        let (wake_tx, wake) = mpsc::channel::<Wake>();
        {
            let tx = wake_tx.clone();
            std::thread::Builder::new()
                .name("control".into())
                .spawn(move || {
                    while let Ok(c) = changes.recv() {
                        if tx.send(Wake::Change(c)).is_err() {
                            break;
                        }
                    }
                })?;
        }
        spawn_event_watcher(wake_tx.clone(), self.stop.clone())?;
        let tick = Duration::from_millis(200);
        let mut next_window = Instant::now() + self.cfg.window();
        let mut next_scan =
            Instant::now() + Duration::from_secs_f64(self.cfg.checker.interval_secs);
        while !self.stop.load(Ordering::SeqCst) {
            match wake.recv_timeout(tick) {
                Ok(Wake::Change(c)) => {
                    let r = self.handle(c.request);
                    let _ = c.reply.send(r);
                    self.publish();
                }
                Ok(Wake::DmEvent) => {
                    self.refresh_status();
                    self.publish();
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if self.reload_config.swap(false, Ordering::SeqCst) {
                self.reread_config();
            }
            let now = Instant::now();
            self.run_checkers(now);
            // Published at once: clients see the map stop (or resume)
            // queueing when its I/O fails (or flows), not a window later.
            if self.no_path_retry(now) {
                self.publish();
            }
            if now >= next_scan {
                next_scan = now + Duration::from_secs_f64(self.cfg.checker.interval_secs);
                self.refresh_status();
                if let Err(e) = self.rescan() {
                    say!("rescan failed: {e:#}");
                }
            }
            if now >= next_window {
                next_window += self.cfg.window();
                if next_window < now {
                    next_window = now + self.cfg.window();
                }
                if let Err(e) = self.window() {
                    say!("window failed: {e:#}");
                }
                self.publish();
            }
        }
        say!("stopping: detaching the probes, leaving the maps as they are");
        Ok(())
    }

    fn reread_config(&mut self) {
        let path = std::path::Path::new(&self.config_path);
        match Config::load(
            path,
            path != std::path::Path::new(super::config::DEFAULT_PATH),
        ) {
            Ok(c) => {
                if c.socket != self.cfg.socket || c.metrics != self.cfg.metrics {
                    say!("SIGHUP: socket and metrics addresses change only on restart");
                }
                self.checkers.set_timing(
                    Duration::from_secs_f64(c.checker.interval_secs),
                    Duration::from_secs_f64(c.checker.timeout_secs),
                );
                self.dm
                    .set_suspend_limit(Duration::from_secs_f64(c.checker.timeout_secs));
                for m in &mut self.maps {
                    if let Some(t) = &mut m.tuner {
                        t.set_mode(c.mode);
                    }
                }
                say!(
                    "SIGHUP: configuration {} re-read (mode {:?})",
                    self.config_path,
                    c.mode
                );
                self.cfg = c;
            }
            Err(e) => say!("SIGHUP: keeping the old configuration: {e}"),
        }
    }

    /// Re-reads every map's status: path states from the kernel.
    fn refresh_status(&mut self) {
        let now = Instant::now();
        for m in &mut self.maps {
            let Ok(info) = self.dm.info(&m.name) else {
                continue;
            };
            m.suspended = info.suspended;
            m.last_event = info.event_nr;
            if let Ok(t) = self.dm.multipath_table(&m.name) {
                m.queue_if_no_path = t.has_feature("queue_if_no_path");
                m.table = Some(t);
            }
            let Ok(st) = self.dm.multipath_status(&m.name) else {
                continue;
            };
            for p in &mut m.paths {
                if let Some(ps) = st.path(p.dev) {
                    let failed = ps.state == DmPathState::Failed;
                    if failed && !p.dm_failed {
                        p.failed_at = Some(now);
                    }
                    if failed != p.dm_failed {
                        say!(
                            "{}: path {} is {} in the kernel (fail count {})",
                            m.name,
                            p.name,
                            if failed { "failed" } else { "active" },
                            ps.fail_count
                        );
                        m.last_path_change = Some(now);
                    }
                    p.dm_failed = failed;
                    p.fail_count = ps.fail_count;
                }
            }
        }
    }

    /// Checker verdicts to dm messages: fail a path the checker finds bad,
    /// reinstate one it finds good that the kernel holds failed.
    fn run_checkers(&mut self, now: Instant) {
        let (maps, obs) = (&self.maps, &self.obs);
        let mut oldest = |name: &str| {
            let dev = maps
                .iter()
                .flat_map(|m| m.paths.iter())
                .find(|p| p.name == name)?
                .dev;
            obs.oldest_inflight(dev)
        };
        let (changes, notes) = self.checkers.tick(now, &mut oldest);
        for n in notes {
            say!("checker: {n}");
        }
        for c in changes {
            let Some((mi, pi)) = self.find_path(&c.path) else {
                continue;
            };
            let m = &mut self.maps[mi];
            // A first verdict is not a change of the path, only of what we
            // know about it.
            if c.from != Verdict::Unknown {
                m.last_path_change = Some(now);
            }
            say!(
                "{}: checker: path {} {} -> {}{}",
                m.name,
                c.path,
                c.from.word(),
                c.to.word(),
                c.detail
                    .as_deref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            );
            if !m.managed || self.cfg.mode == Mode::Observe {
                continue;
            }
            let dev = m.paths[pi].dev;
            let msg = if c.to.is_bad() {
                Message::FailPath(dev)
            } else if c.to == Verdict::Ready
                && m.paths[pi].dm_failed
                && !m.paths[pi].admin_failed
                && self.checkers.ready_since(&c.path, m.paths[pi].failed_at)
            {
                Message::ReinstatePath(dev)
            } else {
                continue;
            };
            match self.dm.message(&m.name, &msg) {
                Ok(()) => say!("{}: sent {}", m.name, msg.render()),
                Err(e) => say!("{}: {} failed: {e}", m.name, msg.render()),
            }
        }
        // A path the kernel failed on its own (I/O error) that checks ready
        // again is reinstated, as multipathd does.
        if self.hands_off() {
            return;
        }
        for m in &mut self.maps {
            if !m.managed {
                continue;
            }
            for p in &mut m.paths {
                // A ready verdict from a check that started before the
                // kernel failed the path is stale: reinstating on it made a
                // pulled path ping-pong (fail, reinstate, fail, ...) until
                // the next check.
                if p.dm_failed
                    && !p.admin_failed
                    && self.checkers.ready_since(&p.name, p.failed_at)
                    && self
                        .dm
                        .message(&m.name, &Message::ReinstatePath(p.dev))
                        .is_ok()
                {
                    say!("{}: reinstated {} (checker ready)", m.name, p.name);
                    p.dm_failed = false;
                    m.last_path_change = Some(now);
                }
            }
        }
    }

    /// maps.no_path_retry_secs: a map that has queued with no usable path
    /// for that long stops queueing (queued and new I/O fail with EIO; the
    /// map stays); it queues again as soon as a path is usable.
    fn no_path_retry(&mut self, now: Instant) -> bool {
        let mut changed = false;
        if self.hands_off() {
            return changed;
        }
        let limit = self.cfg.maps.no_path_retry_secs;
        for m in &mut self.maps {
            if !m.managed || !m.wants_queue {
                continue;
            }
            if m.paths.iter().any(|p| !p.dm_failed) {
                m.no_path_since = None;
                if m.queue_off {
                    match self.dm.message(&m.name, &Message::QueueIfNoPath) {
                        Ok(()) => {
                            say!("{}: a path is usable again: queue_if_no_path", m.name);
                            m.queue_off = false;
                            m.queue_if_no_path = true;
                            changed = true;
                        }
                        Err(e) => say!("{}: queue_if_no_path failed: {e}", m.name),
                    }
                }
                continue;
            }
            let since = *m.no_path_since.get_or_insert(now);
            let Some(limit) = limit else {
                continue;
            };
            let waited = now.duration_since(since).as_secs_f64();
            if !m.queue_off && waited >= limit {
                match self.dm.message(&m.name, &Message::FailIfNoPath) {
                    Ok(()) => {
                        say!(
                            "{}: no usable path for {waited:.1} s (maps.no_path_retry_secs = \
                             {limit}): fail_if_no_path, queued I/O fails with EIO",
                            m.name
                        );
                        m.queue_off = true;
                        m.queue_if_no_path = false;
                        changed = true;
                    }
                    Err(e) => say!("{}: fail_if_no_path failed: {e}", m.name),
                }
            }
        }
        changed
    }

    fn find_path(&self, name_or_dev: &str) -> Option<(usize, usize)> {
        for (mi, m) in self.maps.iter().enumerate() {
            for (pi, p) in m.paths.iter().enumerate() {
                if p.name == name_or_dev || p.dev.to_string() == name_or_dev {
                    return Some((mi, pi));
                }
            }
        }
        None
    }

    /// Paths that appeared or vanished: a new path of a managed map's LUN
    /// joins it by a reload; a vanished one is failed and dropped (never
    /// the last one: the map keeps it, failed, until a path returns).
    fn rescan(&mut self) -> Result<()> {
        if self.hands_off() {
            return Ok(());
        }
        let filter = self.cfg.filter().map_err(anyhow::Error::msg)?;
        let scan = discovery::scan(&filter);
        for mi in 0..self.maps.len() {
            if !self.maps[mi].managed {
                continue;
            }
            let wwid = self.maps[mi].wwid.clone();
            let present: Vec<discovery::PathDevice> =
                scan.lun(&wwid).map(|l| l.paths.clone()).unwrap_or_default();
            let known: HashSet<DevNum> = self.maps[mi].paths.iter().map(|p| p.dev).collect();
            let new: Vec<&discovery::PathDevice> = present
                .iter()
                .filter(|p| !known.contains(&p.dev) && p.holders.is_empty())
                .collect();
            let gone: Vec<DevNum> = self.maps[mi]
                .paths
                .iter()
                .filter(|p| !p.dev.sysfs().exists())
                .map(|p| p.dev)
                .collect();
            if new.is_empty() && gone.is_empty() {
                continue;
            }
            let m = &mut self.maps[mi];
            let Ok(mut table) = self.dm.multipath_table(&m.name) else {
                continue;
            };
            let keep_one = gone.len() >= m.paths.len() && new.is_empty();
            let mut dropped = vec![];
            for d in &gone {
                if keep_one && dropped.len() + 1 >= m.paths.len() {
                    break;
                }
                if table.remove_path(*d).is_ok() {
                    dropped.push(*d);
                }
            }
            let mut added = vec![];
            for p in &new {
                let sel = table
                    .groups
                    .first()
                    .map(|g| g.selector.clone())
                    .unwrap_or(Selector::ServiceTime);
                let Some(args) = sel.default_path_args() else {
                    continue;
                };
                if table
                    .add_path(1, crate::mpath::Path { dev: p.dev, args })
                    .is_ok()
                {
                    added.push((p.name.clone(), p.dev));
                }
            }
            if dropped.is_empty() && added.is_empty() {
                continue;
            }
            match self.dm.reload(&m.name, &table) {
                Ok(t) => {
                    say!(
                        "{}: paths {}{} (reload stalled I/O {:.1} ms)",
                        m.name,
                        added
                            .iter()
                            .map(|(n, _)| format!("+{n} "))
                            .collect::<String>(),
                        dropped.iter().map(|d| format!("-{d} ")).collect::<String>(),
                        t.stall.as_secs_f64() * 1000.0
                    );
                    for d in &dropped {
                        if let Some(i) = m.paths.iter().position(|p| p.dev == *d) {
                            let p = m.paths.remove(i);
                            self.checkers.remove(&p.name);
                            let _ = self.obs.unwatch(p.dev);
                        }
                    }
                    for (name, dev) in added {
                        self.obs.watch(dev)?;
                        self.checkers.add(&name);
                        m.paths.push(PathEntry {
                            hctl: crate::cli::top::hctl(dev),
                            name,
                            dev,
                            dm_failed: false,
                            failed_at: None,
                            admin_failed: false,
                            fail_count: 0,
                            group: 1,
                            totals: Totals::default(),
                        });
                    }
                    m.paths
                        .sort_by(|a, b| discovery::disk_order(&a.name, &b.name));
                    m.last_path_change = Some(Instant::now());
                    // The tuner's path order changed: it starts again from
                    // what the kernel has now.
                    if let Some(t) = &mut m.tuner {
                        let tp = m
                            .paths
                            .iter()
                            .map(|p| (p.name.clone(), p.dev))
                            .collect::<Vec<_>>();
                        if let Ok(s) = actuator::read_settings(
                            &self.dm,
                            &Target {
                                map: &m.name,
                                kernel_name: &m.kernel_name,
                                paths: &tp,
                            },
                        ) {
                            let sels = vec![
                                Selector::ServiceTime,
                                Selector::QueueLength,
                                Selector::RoundRobin,
                            ];
                            *t = Tuner::new(&m.name, t.mode(), self.cfg.tuner(), s, sels);
                        }
                    }
                }
                Err(e) => say!("{}: cannot update paths: {e}", m.name),
            }
        }
        if self.cfg.maps.create {
            self.create_missing()?;
        }
        Ok(())
    }

    /// One measurement window: figures per map and path, then the tuners.
    fn window(&mut self) -> Result<()> {
        let cur = self.obs.snapshot()?;
        let oldest = self.obs.oldest_inflight_all();
        let t = self.t();
        for m in &mut self.maps {
            let mi = DeviceInterval::between_or_idle(m.dev, &m.kernel_name, None, &self.prev, &cur);
            let pis: Vec<DeviceInterval> = m
                .paths
                .iter()
                .map(|p| DeviceInterval::between_or_idle(p.dev, &p.name, None, &self.prev, &cur))
                .collect();
            totals_add(&mut m.totals, &mi);
            m.rates = rates_of(&mi);
            let total: u64 = pis.iter().map(|i| i.read_bytes + i.write_bytes).sum();
            m.path_rates.clear();
            for (p, i) in m.paths.iter_mut().zip(&pis) {
                totals_add(&mut p.totals, i);
                let share = if total > 0 {
                    ((i.read_bytes + i.write_bytes) as f64 / total as f64 * 1000.0).round() / 10.0
                } else {
                    0.0
                };
                m.path_rates.insert(p.dev, (rates_of(i), share));
            }
            let mut cg: BTreeMap<u64, u64> = BTreeMap::new();
            for ((d, id), s) in &cur.cgroups {
                if *d == m.dev {
                    let before = self.prev.cgroups.get(&(*d, *id)).map_or(0, |p| p.bytes);
                    *cg.entry(*id).or_default() += s.bytes.saturating_sub(before);
                }
            }
            m.cgroups = cg
                .iter()
                .filter(|(_, b)| **b > 0)
                .map(|(k, v)| (*k, *v))
                .collect();
            let bio_bytes: u64 = cg.values().sum();
            let w = Window::from_intervals(&mi, bio_bytes, &pis);
            m.class = crate::tuner::Class::of(&w).map(|c| c.key());
            let Some(tuner) = &mut m.tuner else {
                continue;
            };
            let failed: Vec<String> = m
                .paths
                .iter()
                .filter(|p| p.dm_failed || self.checkers.verdict(&p.name).is_bad())
                .map(|p| p.name.clone())
                .collect();
            let stalled_paths = m
                .paths
                .iter()
                .filter_map(|p| {
                    let age = oldest.get(&p.dev)?.as_secs_f64();
                    (age >= STALLED_S).then(|| (p.name.clone(), age))
                })
                .collect();
            let health = Health {
                queueing_without_paths: m.queue_if_no_path && failed.len() == m.paths.len(),
                failed_paths: failed,
                suspended: m.suspended,
                last_path_change: m.last_path_change.map(|c| t - c.elapsed().as_secs_f64()),
                stalled_paths,
            };
            if let Some(a) = tuner.on_window(t, &w, &health) {
                let tp: Vec<(String, DevNum)> =
                    m.paths.iter().map(|p| (p.name.clone(), p.dev)).collect();
                let target = Target {
                    map: &m.name,
                    kernel_name: &m.kernel_name,
                    paths: &tp,
                };
                match actuator::apply(&self.dm, &target, a.knob, &a.to) {
                    Ok((rb, stall)) => tuner.applied(t, a.knob, &a.to, rb, stall),
                    Err(e) => {
                        let rb = actuator::read_settings(&self.dm, &target)
                            .unwrap_or_else(|_| tuner.settings().clone());
                        tuner.failed(t, a.knob, &a.to, rb, &format!("{e:#}"));
                    }
                }
            }
            for d in tuner.drain() {
                Self::log_decision(
                    &mut self.decisions,
                    &mut self.decision_counts,
                    &mut self.next_seq,
                    d,
                );
            }
        }
        self.prev = cur;
        Ok(())
    }

    fn log_decision(
        log: &mut Vec<LoggedDecision>,
        counts: &mut BTreeMap<String, u64>,
        seq: &mut u64,
        d: Decision,
    ) {
        let outcome = serde_json::to_value(d.outcome)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        *counts.entry(outcome.clone()).or_default() += 1;
        say!(
            "{}: {} {}{} [{}] {}",
            d.map,
            d.knob.map(|k| k.name()).unwrap_or("tuner"),
            if d.old.is_empty() && d.new.is_empty() {
                String::new()
            } else {
                format!("{} -> {} ", d.old, d.new)
            },
            d.class
                .as_deref()
                .map(|c| format!("({c})"))
                .unwrap_or_default(),
            outcome,
            d.reason
        );
        log.push(LoggedDecision {
            seq: *seq,
            unix: unix_now(),
            decision: d,
        });
        *seq += 1;
        if log.len() > LOG_KEEP {
            let extra = log.len() - LOG_KEEP;
            log.drain(..extra);
        }
    }

    fn handle(&mut self, r: Request) -> Response {
        let t = self.t();
        let map_idx = |maps: &[MapEntry], name: &str| maps.iter().position(|m| m.name == name);
        match r {
            Request::Status | Request::Log { .. } => {
                Response::err(ErrorCode::BadRequest, "reads are served by the socket")
            }
            Request::Pause { map } | Request::Resume { map }
                if map_idx(&self.maps, &map).is_none() =>
            {
                Response::err(ErrorCode::NotFound, format!("no map '{map}'"))
            }
            Request::Pause { map } => self.pause(&map, true, t),
            Request::Resume { map } => self.pause(&map, false, t),
            Request::Fail { path } | Request::Reinstate { path }
                if self.find_path(&path).is_none() =>
            {
                Response::err(
                    ErrorCode::NotFound,
                    format!("'{path}' is not a path of any map"),
                )
            }
            Request::Fail { path } => self.path_message(&path, true),
            Request::Reinstate { path } => self.path_message(&path, false),
            Request::Mode { mode, map } => {
                let mut n = 0;
                for m in &mut self.maps {
                    if map.as_deref().is_none_or(|x| x == m.name)
                        && let Some(tu) = &mut m.tuner
                    {
                        tu.set_mode(mode);
                        n += 1;
                    }
                }
                match (n, map) {
                    (0, Some(m)) => {
                        Response::err(ErrorCode::NotFound, format!("no managed map '{m}'"))
                    }
                    _ => {
                        if n > 0 {
                            say!("mode set to {mode:?} on {n} map(s)");
                        }
                        Response::ok(serde_json::json!({ "maps": n, "mode": mode }))
                    }
                }
            }
        }
    }

    fn pause(&mut self, map: &str, paused: bool, t: f64) -> Response {
        let Some(m) = self.maps.iter_mut().find(|m| m.name == map) else {
            return Response::err(ErrorCode::NotFound, format!("no map '{map}'"));
        };
        let Some(tu) = &mut m.tuner else {
            return Response::err(
                ErrorCode::NotFound,
                format!(
                    "{map} is not managed: {}",
                    m.unmanaged_reason.clone().unwrap_or_default()
                ),
            );
        };
        tu.set_user_paused(paused, t);
        for d in tu.drain() {
            Self::log_decision(
                &mut self.decisions,
                &mut self.decision_counts,
                &mut self.next_seq,
                d,
            );
        }
        Response::ok(serde_json::json!({ "map": map, "paused": paused }))
    }

    fn path_message(&mut self, path: &str, fail: bool) -> Response {
        let Some((mi, pi)) = self.find_path(path) else {
            return Response::err(
                ErrorCode::NotFound,
                format!("'{path}' is not a path of any map"),
            );
        };
        let (map, name, dev) = {
            let m = &self.maps[mi];
            (m.name.clone(), m.paths[pi].name.clone(), m.paths[pi].dev)
        };
        let msg = if fail {
            Message::FailPath(dev)
        } else {
            Message::ReinstatePath(dev)
        };
        match self.dm.message(&map, &msg) {
            Ok(()) => {
                say!("{map}: {} (requested over the socket)", msg.render());
                self.maps[mi].paths[pi].admin_failed = fail;
                self.refresh_status();
                let st = self.maps[mi]
                    .paths
                    .iter()
                    .find(|p| p.name == name)
                    .map(|p| p.dm_failed);
                Response::ok(serde_json::json!({
                    "map": map, "path": name,
                    "dm_state": if st == Some(true) { "failed" } else { "active" },
                }))
            }
            Err(e) => Response::err(ErrorCode::Kernel, format!("{map}: {e}")),
        }
    }

    fn publish(&self) {
        let maps = self
            .maps
            .iter()
            .map(|m| {
                let settings = m.tuner.as_ref().map(|t| t.settings().clone());
                let weights: HashMap<DevNum, u32> = m
                    .table
                    .as_ref()
                    .map(|t| {
                        t.paths()
                            .filter_map(|p| p.args.relative_throughput().map(|w| (p.dev, w)))
                            .collect()
                    })
                    .unwrap_or_default();
                let group_of: HashMap<DevNum, usize> = m
                    .table
                    .as_ref()
                    .map(|t| {
                        t.groups
                            .iter()
                            .enumerate()
                            .flat_map(|(i, g)| g.paths.iter().map(move |p| (p.dev, i + 1)))
                            .collect()
                    })
                    .unwrap_or_default();
                let failed = m.paths.iter().filter(|p| p.dm_failed).count();
                let state = if m.paths.is_empty() || failed == m.paths.len() {
                    if m.queue_if_no_path {
                        "queueing"
                    } else {
                        "no paths"
                    }
                } else if failed > 0 {
                    "degraded"
                } else {
                    "ok"
                };
                MapState {
                    name: m.name.clone(),
                    wwid: m.wwid.clone(),
                    dm_name: m.kernel_name.clone(),
                    dev: m.dev.to_string(),
                    vendor_model: m.vendor_model.clone(),
                    size_sectors: m.table.as_ref().map_or(0, |t| t.length),
                    managed: m.managed,
                    unmanaged_reason: m.unmanaged_reason.clone(),
                    selector: m
                        .table
                        .as_ref()
                        .and_then(|t| t.groups.first())
                        .map(|g| format!("{} {}", g.selector.name(), g.selector_args.len()))
                        .unwrap_or_default(),
                    features: m
                        .table
                        .as_ref()
                        .map(dm::readback::features_string)
                        .unwrap_or_default(),
                    hwhandler: m
                        .table
                        .as_ref()
                        .map(dm::readback::hwhandler_string)
                        .unwrap_or_default(),
                    state: state.into(),
                    mode: m.tuner.as_ref().map(|t| t.mode()),
                    tuner: m.tuner.as_ref().map_or("-".into(), |t| t.state()),
                    paused: m.tuner.as_ref().is_some_and(|t| t.state() == "paused"),
                    class: m.class.clone(),
                    settings,
                    rates: m.rates.clone(),
                    totals: m.totals.clone(),
                    cgroups: m.cgroups.clone(),
                    paths: m
                        .paths
                        .iter()
                        .map(|p| {
                            let (rates, share) =
                                m.path_rates.get(&p.dev).cloned().unwrap_or_default();
                            PathState {
                                name: p.name.clone(),
                                dev: p.dev.to_string(),
                                hctl: p.hctl.clone(),
                                group: group_of.get(&p.dev).copied().unwrap_or(p.group),
                                dm_state: if p.dm_failed { "failed" } else { "active" }.into(),
                                fail_count: p.fail_count,
                                checker: if m.managed {
                                    self.checkers.verdict(&p.name).word().into()
                                } else {
                                    "-".into()
                                },
                                checker_ms: self.checkers.last_ms(&p.name),
                                weight: weights.get(&p.dev).copied(),
                                share_pct: share,
                                rates,
                                totals: p.totals.clone(),
                            }
                        })
                        .collect(),
                }
            })
            .collect();
        self.shared.publish(DaemonStatus {
            version: env!("CARGO_PKG_VERSION").into(),
            pid: std::process::id(),
            mode: Some(self.cfg.mode),
            started_unix: self.started_unix,
            config: self.config_path.clone(),
            window_s: self.cfg.window_secs,
            multipathd: self.multipathd.clone(),
            maps,
            decisions: self.decisions.clone(),
            decision_counts: self
                .decision_counts
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            bpf_watched: self.obs.watched().len(),
            bpf_counted: self.prev.devices.len(),
        });
    }
}

enum Wake {
    Change(Change),
    DmEvent,
}

/// Wakes the engine on any dm event (a path failed by the kernel, a table
/// swapped), so kernel-detected failures are seen at once, not at the next
/// scan.
fn spawn_event_watcher(tx: mpsc::Sender<Wake>, stop: Arc<AtomicBool>) -> Result<()> {
    let dm = Dm::open()?;
    std::thread::Builder::new()
        .name("dm-events".into())
        .spawn(move || {
            let mut last: HashMap<String, u32> = HashMap::new();
            while !stop.load(Ordering::SeqCst) {
                let Ok(list) = dm.list() else {
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                };
                let mut changed = false;
                for m in &list {
                    let ev = m.event_nr.unwrap_or(0);
                    if last.insert(m.name.clone(), ev).is_some_and(|old| old != ev) {
                        changed = true;
                    }
                }
                if changed && tx.send(Wake::DmEvent).is_err() {
                    break;
                }
                // Block until any map's event counter moves (or 1 s).
                if let Some(first) = list.first() {
                    let ev = last.get(&first.name).copied().unwrap_or(0);
                    let _ = dm.wait_event(&first.name, ev, Duration::from_secs(1));
                } else {
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        })?;
    Ok(())
}
