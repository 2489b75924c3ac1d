//! The daemon's engine: one thread that owns the maps, the observer, the
//! checkers and the tuners. It wakes on dm events, checker reports and
//! control requests, and every window it measures, tunes and publishes
//! (builds its status for the servers when someone reads it).
//!
//! Order of authority, as in multipathd: the kernel's table and status are
//! the truth (read back after every change); the operator's decisions
//! (paths failed by hand, knobs pinned) outrank the daemon's own; the
//! checker decides whether a path is usable; the tuner only acts on a
//! healthy map. The rules themselves live in [`crate::policy`] and the
//! tuner; this module is the loop that feeds them and carries them out.
use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc::{self, Receiver, RecvTimeoutError},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use super::{
    actuator::{self, Target},
    checker::{Checkers, Verdict},
    shared::{Shared, ToEngine},
    state::SavedState,
};
use crate::{
    blockdev::DevNum,
    clock::unix_now,
    config::Config,
    ctl::status::{
        DaemonStatus, LOG_KEEP, LoggedDecision, MapReport, PathReport, Rates, SizeLatency, Totals,
    },
    discovery::{alua::AccessState, uevent::UeventMonitor},
    dm::{self, Dm, Message, multipathd},
    lock::{Locks, MapLock},
    mpath::{MultipathStatus, MultipathTable, PathState, Selector, grouping},
    observer::{Access, Bios, DeviceInterval, Observer, Scope, Snapshot},
    policy::{
        marginal,
        no_path_retry::NoPathRetry,
        outside,
        schedule::{Look, Reads, Scan, ScanSchedule},
        sync::{self, Hold},
    },
    sysfs_attr::KeptFiles,
    sysfs_knobs::KnobFiles,
    tuner::{Decision, Health, Knob, Mode, Settings, Tuner, Window},
};

mod health;
mod maps;
mod operator;

pub use super::state::STATE_FILE;

/// A command outstanding on a path this long (seconds) holds the tuner
/// back: a reload's suspend would wait for it, and for ever on a path that
/// has hung but is not failed yet.
const STALLED_S: f64 = 1.0;

/// How long the engine waits for another writer (an operator's command)
/// to finish with a map before it gives up on a change for now.
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// Who the daemon is, in lock files.
const WHO: &str = "pathpilot daemon";

/// Daemon log line (stderr: the journal under systemd).
macro_rules! say {
    ($($a:tt)*) => { eprintln!("pathpilot: {}", format!($($a)*)) };
}
pub(crate) use say;

struct PathEntry {
    name: String,
    dev: DevNum,
    hctl: String,
    /// The kernel's last word on it (from the map status).
    dm_failed: bool,
    /// When we saw the kernel fail it: only a check started after that
    /// may reinstate it.
    failed_at: Option<Instant>,
    /// Failed by an operator: stays failed, whatever the checker says and
    /// across reloads and restarts, until an operator reinstates it.
    admin_failed: bool,
    fail_count: u32,
    group: usize,
    /// The group it was in before it was set aside as marginal.
    home: usize,
    totals: Totals,
    /// Seconds from its port's last return to its serving the map's I/O.
    port_return_s: Option<f64>,
}

impl PathEntry {
    fn new(name: String, dev: DevNum, group: usize, admin_failed: bool) -> Self {
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

struct MapEntry {
    name: String,
    wwid: String,
    dev: DevNum,
    kernel_name: String,
    vendor_model: String,
    managed: bool,
    unmanaged_reason: Option<String>,
    /// The live table as last read.
    table: Option<MultipathTable>,
    /// The table pathpilot last left on the map (read back after each of
    /// its own changes): a live table that differs was changed by someone
    /// else. Managed maps only.
    expected: Option<MultipathTable>,
    /// The path groups are not the tuner's (an adopted map's own groups):
    /// it tunes the first group and never regroups.
    fixed_groups: bool,
    suspended: bool,
    /// The live table's queue_if_no_path (what the kernel does now).
    queue_if_no_path: bool,
    /// Whether the map is meant to queue with no path (its table had
    /// queue_if_no_path when it was found or made).
    wants_queue: bool,
    no_path_retry: NoPathRetry,
    paths: Vec<PathEntry>,
    tuner: Option<Tuner>,
    last_path_change: Option<Instant>,
    last_event: u32,
    rates: Rates,
    path_rates: HashMap<DevNum, (Rates, f64)>,
    totals: Totals,
    cgroups: Vec<(u64, u64)>,
    class: Option<String>,
    /// Its paths' health (marginal or not), from their figures.
    health: marginal::HealthModel,
    /// The marginal paths the daemon set aside in the map's last group.
    set_aside: Vec<DevNum>,
    /// Its groups and its paths' ALUA states when they last matched: the
    /// per-interval look regroups only when these change.
    alua_seen: AluaSeen,
    /// When its table and knobs are next compared with what the daemon
    /// left (a change made by someone else).
    look: Look,
    /// When its table and status are next read though its event counter
    /// has not moved.
    status_look: Look,
    /// Its knob files, open between looks.
    knob_files: KnobFiles,
    /// Its `dm/suspended` attribute, open between looks.
    suspended_file: KeptFiles<()>,
}

#[derive(Debug, Default, PartialEq)]
struct AluaSeen {
    groups: Vec<Vec<DevNum>>,
    states: Vec<(DevNum, Option<AccessState>)>,
}

impl MapEntry {
    /// The paths the tuner works on, in its order: every path, or the
    /// first group's when the groups are fixed; never one set aside.
    fn tuned_paths(&self) -> Vec<(String, DevNum)> {
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

    fn target<'a>(&'a self, paths: &'a [(String, DevNum)]) -> Target<'a> {
        Target {
            map: &self.name,
            kernel_name: &self.kernel_name,
            paths,
            fixed_groups: self.fixed_groups,
        }
    }
}

/// The selectors the tuner may try: those the kernel can load.
fn available_selectors() -> Vec<Selector> {
    [
        Selector::ServiceTime,
        Selector::QueueLength,
        Selector::RoundRobin,
    ]
    .into_iter()
    .filter(|s| dm::selector_available(s.name()))
    .collect()
}

pub struct Engine {
    cfg: Config,
    config_path: String,
    dm: Dm,
    obs: Observer,
    checkers: Checkers,
    maps: Vec<MapEntry>,
    state_path: PathBuf,
    state: SavedState,
    locks: Locks,
    shared: Shared,
    prev: Snapshot,
    /// The share of the last window the probes were attached, %.
    observed_pct: f64,
    /// Whether the window under way began with the probes attached while
    /// sampling (see [`probes_due`]): every other one does.
    opens_attached: bool,
    t0: Instant,
    started_unix: f64,
    next_seq: u64,
    /// Shared with the published status: copied only when a decision is
    /// logged while a reader still holds the previous status.
    decisions: Arc<Vec<LoggedDecision>>,
    decision_counts: BTreeMap<String, u64>,
    multipathd: Option<String>,
    stop: Arc<AtomicBool>,
    reload_config: Arc<AtomicBool>,
    /// CPU the engine thread spent per kind of work since start, so the
    /// daemon's own cost at scale is visible (status, metrics).
    spent: BTreeMap<&'static str, Duration>,
    /// The kernel's uevents: a full discovery scan only when a disk came,
    /// went or changed (None where unavailable: a full scan every time).
    uevents: Option<UeventMonitor>,
    /// When discovery reads every disk, and when only the known paths.
    scans: ScanSchedule,
}

fn totals_add(t: &mut Totals, i: &DeviceInterval) {
    t.read_ios += i.read_ios;
    t.write_ios += i.write_ios;
    t.read_bytes += i.read_bytes;
    t.write_bytes += i.write_bytes;
    t.errors += i.errors;
    t.merges += i.merges;
    // In place, kept sorted by bucket: a map built and taken apart per
    // histogram per device per window was a visible share of the window
    // at 80 busy devices, and a bucket once seen stays.
    let add = |acc: &mut Vec<(u64, u64)>, h: &BTreeMap<u64, u64>| {
        for (k, v) in h {
            match acc.binary_search_by_key(k, |(b, _)| *b) {
                Ok(i) => acc[i].1 += v,
                Err(i) => acc.insert(i, (*k, *v)),
            }
        }
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
        lat_by_size: i
            .lat_by_size
            .iter()
            .map(|c| SizeLatency {
                class: c.class.to_string(),
                samples: c.samples,
                p50_us: c.p50_us,
                p99_us: c.p99_us,
            })
            .collect(),
    }
}

/// A map's path states from its status: records what the kernel changed.
/// Returns whether any path changed state.
fn note_status(m: &mut MapEntry, st: &MultipathStatus, now: Instant) -> bool {
    let mut changed = false;
    for p in &mut m.paths {
        if let Some(ps) = st.path(p.dev) {
            let failed = ps.state == PathState::Failed;
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
                changed = true;
            }
            p.dm_failed = failed;
            p.fail_count = ps.fail_count;
        }
    }
    if changed {
        m.last_path_change = Some(now);
    }
    changed
}

impl Engine {
    pub fn start(
        cfg: Config,
        config_path: String,
        state: SavedState,
        shared: Shared,
        stop: Arc<AtomicBool>,
        reload_config: Arc<AtomicBool>,
    ) -> Result<Self> {
        let mut dm = Dm::open().context("device-mapper")?;
        // A reload's suspend waits for the paths' in-flight I/O: past the
        // checker's timeout a path is hung by the daemon's own measure, and
        // waiting on would freeze the map and this thread with it.
        dm.set_suspend_limit(Duration::from_secs_f64(cfg.checker.timeout_secs));
        let bios = Bios::probed(cfg.bio_probe);
        let obs = Observer::load_with(Scope::WatchList, Access::Auto, bios)
            .context("cannot start the observer")?;
        let checkers = Checkers::new(
            cfg.checker_interval(),
            cfg.checker_max_interval(),
            Duration::from_secs_f64(cfg.checker.timeout_secs),
        );
        let mut obs = obs;
        let prev = obs.snapshot()?;
        let uevents = match UeventMonitor::open() {
            Ok(m) => Some(m),
            Err(e) => {
                say!(
                    "no kernel uevents ({e}): paths are found by scanning sysfs every check interval"
                );
                None
            }
        };
        let interval = cfg.checker_interval();
        let mut e = Engine {
            cfg,
            config_path,
            dm,
            obs,
            checkers,
            maps: vec![],
            state_path: PathBuf::from(STATE_FILE),
            state,
            locks: Locks::system(),
            shared,
            prev,
            observed_pct: 100.0,
            opens_attached: false,
            t0: Instant::now(),
            started_unix: unix_now(),
            next_seq: 1,
            decisions: Arc::default(),
            decision_counts: BTreeMap::new(),
            multipathd: multipathd::running(),
            stop,
            reload_config,
            spent: BTreeMap::new(),
            // The first pass one interval after the start, a full one on
            // every pass when no uevents arrive.
            scans: ScanSchedule::new(Instant::now(), interval, uevents.is_some()),
            uevents,
        };
        if let Some(m) = &e.multipathd {
            say!("multipathd is running ({m}): its maps are observed only, none adopted");
        }
        e.adopt_existing()?;
        if e.cfg.maps.create && !e.hands_off() {
            e.create_missing()?;
        }
        e.publish_now();
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

    fn save_state(&self) {
        if let Err(e) = self.state.save(&self.state_path) {
            say!("{e}: the operator's decisions and the daemon's maps will not survive a restart");
        }
    }

    /// The paths of a map that must carry no I/O, and why.
    fn held(&self, m: &MapEntry) -> BTreeMap<DevNum, Hold> {
        m.paths
            .iter()
            .filter_map(|p| {
                let h = if p.admin_failed {
                    Hold::Operator
                } else if m.managed && self.checkers.verdict(&p.name).is_bad() {
                    Hold::Checker
                } else if p.dm_failed && !self.checkers.ready_since(&p.name, p.failed_at) {
                    Hold::Kernel
                } else {
                    return None;
                };
                Some((p.dev, h))
            })
            .collect()
    }

    /// Map `mi`'s honoured knobs as the kernel holds them now, read
    /// through the map's kept knob files.
    fn read_settings(&mut self, mi: usize) -> Result<Settings> {
        let table = self.dm.multipath_table(&self.maps[mi].name)?;
        self.settings_of(mi, &table)
    }

    /// [`Self::read_settings`] with the live table already read.
    fn settings_of(&mut self, mi: usize, table: &MultipathTable) -> Result<Settings> {
        let m = &mut self.maps[mi];
        let paths = m.tuned_paths();
        let mut files = std::mem::take(&mut m.knob_files);
        let s = actuator::settings_of(table, &m.target(&paths), &mut files);
        m.knob_files = files;
        s
    }

    /// Takes the map's lock for a change of the daemon's own.
    fn lock(&self, map: &str) -> Result<MapLock> {
        Ok(self.locks.map(map, WHO, LOCK_WAIT)?)
    }

    /// Reloads map `mi` with `table` under `lock`: journaled, then the
    /// path states synced (held paths failed again), the table read back
    /// and remembered as pathpilot's, the paths' list following the table.
    fn reload_locked(
        &mut self,
        lock: &mut MapLock,
        mi: usize,
        table: &MultipathTable,
    ) -> Result<sync::Reloaded> {
        let held = self.held(&self.maps[mi]);
        let name = self.maps[mi].name.clone();
        // Marginal paths stay set aside whatever the reload is for, as
        // held paths stay failed.
        let m = &self.maps[mi];
        let table = &grouping::set_aside(table, m.table.as_ref().unwrap_or(table), &m.set_aside);
        let dm = &self.dm;
        let r = lock.journaled(|| sync::reload(dm, &name, table, &held))??;
        for (dev, why) in &r.synced.refailed {
            say!(
                "{name}: {dev} failed again after the reload ({})",
                why.word()
            );
        }
        for e in &r.synced.errors {
            say!("{name}: after the reload: {e}");
        }
        self.maps[mi].expected = Some(r.table.clone());
        self.follow_table(mi, r.table.clone())?;
        note_status(&mut self.maps[mi], &r.synced.status, Instant::now());
        Ok(r)
    }

    /// Sets `to`'s values of `knobs` on map `mi`, on top of what the
    /// kernel holds now (only these knobs move: a knob someone else set
    /// stays as they set it), under the map's lock. The table knobs go by
    /// one reload; the queue knobs by sysfs, also those a reload reset.
    /// Returns the settings read back and the reload's stall in ms, or
    /// None when the map under the lock showed a change made outside
    /// (see [`Self::live_unless_outside`]): nothing written.
    fn apply_settings(
        &mut self,
        mi: usize,
        knobs: &[Knob],
        to: &Settings,
        t: f64,
    ) -> Result<Option<(Settings, Option<f64>)>> {
        let name = self.maps[mi].name.clone();
        let mut lock = self.lock(&name)?;
        // The table is read once under the lock, and after a reload taken
        // from its read-back (only the queue knobs move after it; a table
        // swapped by someone else sends a uevent that the next look
        // reads). The knobs are read again after each write: the reload's
        // reset of the queue limits, then the sysfs writes if any.
        let table = self.dm.multipath_table(&name)?;
        let Some((mut table, live)) = self.live_unless_outside(mi, table, t)? else {
            return Ok(None);
        };
        let paths = self.maps[mi].tuned_paths();
        let want = knobs.iter().fold(live.clone(), |s, k| s.with(*k, to));
        let mut stall = None;
        if knobs.iter().any(|k| k.needs_reload()) {
            let next = actuator::table_for(&table, &self.maps[mi].target(&paths), &want)?;
            let r = self
                .reload_locked(&mut lock, mi, &next)
                .with_context(|| format!("reloading {name}"))?;
            stall = Some(r.timing.stall.as_secs_f64() * 1000.0);
            table = r.table;
        }
        // A reload resets the queue limits: read them again before
        // writing what it left short of `want`.
        let now = if stall.is_some() {
            self.settings_of(mi, &table)?
        } else {
            live
        };
        if actuator::write_queue_knobs(&self.maps[mi].target(&paths), &now, &want)? {
            Ok(Some((self.settings_of(mi, &table)?, stall)))
        } else {
            Ok(Some((now, stall)))
        }
    }

    /// Never overwrite someone else's change: `table` (read under the
    /// map's lock) and the knobs, against what the daemon left. A change
    /// found stops tuning, and the tuner withdraws what it proposed: None.
    /// Otherwise the live table and settings. The look under the lock is
    /// the look before the change: a separate look just before taking the
    /// lock read the same table and knobs once more.
    fn live_unless_outside(
        &mut self,
        mi: usize,
        mut table: MultipathTable,
        t: f64,
    ) -> Result<Option<(MultipathTable, Settings)>> {
        let held = |e: &Self| {
            e.maps[mi]
                .tuner
                .as_ref()
                .is_some_and(|tu| tu.held().is_some())
        };
        let before = held(self);
        if self.maps[mi].expected.as_ref().is_some_and(|e| *e != table) {
            self.check_table(mi, table, t);
            if !before && held(self) {
                return Ok(None);
            }
            // Only a form the daemon follows (see `check_table`): as it is now.
            table = self.dm.multipath_table(&self.maps[mi].name)?;
        }
        let live = self.settings_of(mi, &table)?;
        self.compare_live(mi, &live, t);
        // A full look: the periodic one starts again from here.
        self.maps[mi].look.looked(Instant::now());
        Ok((before || !held(self)).then_some((table, live)))
    }

    /// Runs until stopped. `messages` carries the servers' requests: changes
    /// to carry out, and fresh statuses for readers.
    pub fn run(mut self, messages: Receiver<ToEngine>) -> Result<()> {
        // One channel wakes the loop: dm events and the servers' messages.
        let (wake_tx, wake) = mpsc::channel::<Wake>();
        {
            let tx = wake_tx.clone();
            std::thread::Builder::new()
                .name("control".into())
                .spawn(move || {
                    while let Ok(m) = messages.recv() {
                        if tx.send(Wake::Message(m)).is_err() {
                            break;
                        }
                    }
                })?;
        }
        spawn_event_watcher(wake_tx.clone(), self.stop.clone())?;
        let tick = Duration::from_millis(200);
        let mut next_window = Instant::now() + self.cfg.window();
        while !self.stop.load(Ordering::SeqCst) {
            // Woken in time to close the window, and to attach or detach
            // the probes when sampling: a window closed late would take
            // the probes' share from the next (they switch once each way
            // every two windows).
            let at = self
                .probes_at(next_window)
                .map_or(next_window, |a| a.min(next_window));
            let wait = at.saturating_duration_since(Instant::now()).min(tick);
            match wake.recv_timeout(wait) {
                Ok(Wake::Message(ToEngine::Change(c))) => {
                    let t = thread_cpu();
                    let r = self.handle(c.request);
                    self.account("requests", t);
                    // Before the reply: a client that reads the status
                    // after its change has been answered sees the change.
                    self.publish();
                    let _ = c.reply.send(r);
                }
                Ok(Wake::Message(ToEngine::Refresh(done))) => {
                    self.publish_now();
                    let _ = done.send(());
                }
                Ok(Wake::DmEvent) => {
                    let t = thread_cpu();
                    self.refresh_status(false);
                    self.account("dm_status", t);
                    self.publish();
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if self.reload_config.swap(false, Ordering::SeqCst) {
                self.reread_config();
            }
            let now = Instant::now();
            let t = thread_cpu();
            self.run_checkers(now);
            self.account("checkers", t);
            // Published at once: clients see the map stop (or resume)
            // queueing when its I/O fails (or flows), not a window later.
            if self.no_path_retry(now) {
                self.publish();
            }
            if let Some(d) = self.uevents.as_ref().map(UeventMonitor::drain) {
                self.scans.on_uevents(&d, now);
                for m in &mut self.maps {
                    if d.lost || d.dm_changed.contains(&m.kernel_name) {
                        m.look.changed();
                        m.status_look.changed();
                    }
                }
            }
            if let Some(scan) = self.scans.due(now, self.cfg.checker_interval()) {
                let t = thread_cpu();
                self.refresh_status(false);
                let t = self.account("dm_status", t);
                if let Err(e) = self.rescan(scan == Scan::Full) {
                    say!("rescan failed: {e:#}");
                }
                self.account("rescan", t);
            }
            self.pace_observer(Instant::now(), next_window);
            if now >= next_window {
                next_window += self.cfg.window();
                if next_window < now {
                    next_window = now + self.cfg.window();
                }
                let t = thread_cpu();
                let own = ["observer", "probes", "knobs", "changes"];
                let sub = self.spent_on(&own);
                if let Err(e) = self.window() {
                    say!("window failed: {e:#}");
                }
                // The observer's, the knobs' and the tuner's changes'
                // shares are their own.
                let t = t + (self.spent_on(&own) - sub);
                self.account("window", t);
                self.publish();
                self.opens_attached = !self.opens_attached;
                self.pace_observer(Instant::now(), next_window);
            }
        }
        say!("stopping: detaching the probes, leaving the maps as they are");
        Ok(())
    }

    /// Whether observation is time-sampled now (config `observe_duty`
    /// below 1): not while any tuner measures toward a decision, nor while
    /// any path is suspect (an error, a bad run, marginal or on
    /// probation): those judgements want every error and latency.
    fn sampling_wanted(&self) -> bool {
        self.cfg.observe_duty < 1.0
            && !self
                .maps
                .iter()
                .any(|m| m.tuner.as_ref().is_some_and(Tuner::measuring) || m.health.suspects())
    }

    /// When the probes are next due to be attached or detached within the
    /// window under way, while sampling (see [`probes_due`]).
    fn probes_at(&self, next_window: Instant) -> Option<Instant> {
        if !self.obs.sampling() {
            return None;
        }
        let (window, share) = (
            self.cfg.window(),
            self.cfg.window().mul_f64(self.cfg.observe_duty),
        );
        match (self.obs.attached(), self.opens_attached) {
            (false, false) => Some(next_window - share),
            (true, true) => Some(next_window - window + share),
            _ => None,
        }
    }

    /// Attaches or detaches the probes as sampling wants them at `now`.
    fn pace_observer(&mut self, now: Instant, next_window: Instant) {
        let t = thread_cpu();
        let r = if self.sampling_wanted() {
            let due = probes_due(
                now,
                next_window,
                self.cfg.window(),
                self.cfg.observe_duty,
                self.opens_attached,
            );
            self.obs.sample(due)
        } else if self.obs.sampling() {
            self.obs.observe_fully()
        } else {
            Ok(())
        };
        if let Err(e) = r {
            say!("observer: {e}");
        }
        // Apart from the snapshots: while sampling, attaching and detaching
        // the programs is the part that grows with the windows.
        self.account("probes", t);
    }

    fn reread_config(&mut self) {
        let path = std::path::Path::new(&self.config_path);
        match Config::load(
            path,
            path != std::path::Path::new(crate::config::DEFAULT_PATH),
        ) {
            Ok(c) => {
                if c.socket != self.cfg.socket || c.metrics != self.cfg.metrics {
                    say!("SIGHUP: socket and metrics addresses change only on restart");
                }
                if c.bio_probe != self.cfg.bio_probe {
                    say!("SIGHUP: bio_probe changes only on restart");
                }
                self.checkers.set_timing(
                    c.checker_interval(),
                    c.checker_max_interval(),
                    Duration::from_secs_f64(c.checker.timeout_secs),
                );
                self.dm
                    .set_suspend_limit(Duration::from_secs_f64(c.checker.timeout_secs));
                for m in &mut self.maps {
                    if let Some(t) = &mut m.tuner {
                        t.set_mode(c.mode);
                        t.set_config(c.tuner());
                    }
                    m.health.set_config(c.marginal.clone());
                }
                say!(
                    "SIGHUP: configuration {} re-read (mode {:?}; checker, tuner, marginal \
                     and map settings apply from now on)",
                    self.config_path,
                    c.mode
                );
                self.cfg = c;
            }
            Err(e) => say!("SIGHUP: keeping the old configuration: {e}"),
        }
    }

    /// Checker verdicts to dm messages: fail a path the checker finds bad,
    /// reinstate one it finds good that the kernel holds failed (never one
    /// an operator failed).
    fn run_checkers(&mut self, now: Instant) {
        // A path the kernel failed is checked at the base interval, so it
        // is reinstated as soon as it answers again.
        for p in self.maps.iter().flat_map(|m| &m.paths) {
            if p.dm_failed {
                self.checkers.hurry(&p.name);
            }
        }
        let (maps, obs) = (&self.maps, &mut self.obs);
        let mut silent = |name: &str| {
            let dev = maps
                .iter()
                .flat_map(|m| m.paths.iter())
                .find(|p| p.name == name)?
                .dev;
            obs.silence(dev)
        };
        let (changes, notes) = self.checkers.tick(now, &mut silent);
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

    /// maps.no_path_retry_secs, through [`NoPathRetry`]. Returns whether a
    /// map's queueing changed.
    fn no_path_retry(&mut self, now: Instant) -> bool {
        let mut changed = false;
        if self.hands_off() {
            return changed;
        }
        let limit = self.cfg.maps.no_path_retry_secs;
        let t = self.t0.elapsed().as_secs_f64();
        let _ = now;
        for m in &mut self.maps {
            if !m.managed || !m.wants_queue {
                continue;
            }
            let usable = m.paths.iter().any(|p| !p.dm_failed);
            let waited = m.no_path_retry.waited(t);
            let Some(msg) = m.no_path_retry.step(t, usable, limit) else {
                continue;
            };
            match self.dm.message(&m.name, &msg) {
                Ok(()) => {
                    m.no_path_retry.sent(&msg);
                    m.queue_if_no_path = msg == Message::QueueIfNoPath;
                    changed = true;
                    if msg == Message::QueueIfNoPath {
                        say!("{}: a path is usable again: queue_if_no_path", m.name);
                    } else {
                        say!(
                            "{}: no usable path for {waited:.1} s (maps.no_path_retry_secs = \
                             {}): fail_if_no_path, queued I/O fails with EIO",
                            m.name,
                            limit.unwrap_or_default()
                        );
                    }
                }
                Err(e) => say!("{}: {} failed: {e}", m.name, msg.render()),
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

    /// One measurement window: figures per map and path, changes made
    /// behind the daemon's back, then the tuners.
    fn window(&mut self) -> Result<()> {
        let t0 = thread_cpu();
        let cur = self.obs.snapshot()?;
        let silent = self.obs.silences();
        self.account("observer", t0);
        let t = self.t();
        for mi in 0..self.maps.len() {
            let m = &mut self.maps[mi];
            let mi_int =
                DeviceInterval::between_or_idle(m.dev, &m.kernel_name, None, &self.prev, &cur);
            let pis: Vec<DeviceInterval> = m
                .paths
                .iter()
                .map(|p| DeviceInterval::between_or_idle(p.dev, &p.name, None, &self.prev, &cur))
                .collect();
            totals_add(&mut m.totals, &mi_int);
            m.rates = rates_of(&mi_int);
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
            let bio_bytes = mi_int.bio_bytes;
            // The tuner sees the paths it tunes.
            let tuned = m.tuned_paths();
            let tuned_pis = m
                .paths
                .iter()
                .zip(&pis)
                .filter(|(p, _)| tuned.iter().any(|(_, d)| *d == p.dev))
                .map(|(_, i)| i);
            let w = Window::from_intervals(&mi_int, bio_bytes, tuned_pis);
            m.class = crate::tuner::Class::of(&w).map(|c| c.key());
            if m.tuner.is_none() {
                continue;
            }
            self.judge_health(mi, t, &pis);
            let now = Instant::now();
            let judging = self.maps[mi].tuner.as_ref().is_some_and(Tuner::may_keep);
            let look = self.maps[mi].look.due(now, judging);
            if let Some(reads) = look {
                self.look_outside(mi, t, now, reads);
            }
            let m = &self.maps[mi];
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
                    let age = silent.get(&p.dev)?.as_secs_f64();
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
            let action = self.maps[mi]
                .tuner
                .as_mut()
                .and_then(|tu| tu.on_window(t, &w, &health));
            if let Some(a) = action {
                let cpu = thread_cpu();
                let knobs = self.maps[mi]
                    .tuner
                    .as_ref()
                    .map(|tu| tu.settings().diff(&a.to))
                    .unwrap_or_default();
                let r = self.apply_settings(mi, &knobs, &a.to, t);
                // A change that failed part way: what it left.
                let rb = r.is_err().then(|| self.read_settings(mi));
                if let Some(tuner) = self.maps[mi].tuner.as_mut() {
                    match r {
                        // A change made outside, found under the lock: the
                        // tuner has withdrawn this one.
                        Ok(None) => {}
                        Ok(Some((rb, stall))) => tuner.applied(t, a.knob, &a.to, rb, stall),
                        Err(e) => {
                            let rb = rb
                                .and_then(Result::ok)
                                .unwrap_or_else(|| tuner.settings().clone());
                            tuner.failed(t, a.knob, &a.to, rb, &format!("{e:#}"));
                        }
                    }
                }
                self.account("changes", cpu);
            }
            self.drain_tuner(mi);
        }
        self.observed_pct = cur.observed.pct_since(&self.prev.observed);
        self.prev = cur;
        Ok(())
    }

    /// [`Self::check_knobs`] at `now` (the live table read, or the one
    /// the daemon left taken as it), its CPU accounted.
    fn look_outside(&mut self, mi: usize, t: f64, now: Instant, reads: Reads) {
        let cpu = thread_cpu();
        if reads == Reads::TableAndKnobs {
            self.check_knobs(mi, t);
            self.maps[mi].look.looked(now);
        } else {
            self.check_queue_knobs(mi, t);
        }
        self.account("knobs", cpu);
    }

    /// The queue knobs and table knobs of a managed map as the kernel holds
    /// them, against what the tuner last read back: a difference is a
    /// change someone else made (the daemon reads back after each of its
    /// own), and tuning stops until an operator resumes it.
    pub(super) fn check_knobs(&mut self, mi: usize, t: f64) {
        // A table loaded behind the daemon's back moves table knobs (and
        // resets the queue limits): said as the table change it is.
        let Ok(table) = self.dm.multipath_table(&self.maps[mi].name) else {
            return;
        };
        if self.maps[mi].expected.as_ref().is_some_and(|e| *e != table) {
            self.check_table(mi, table, t);
            return;
        }
        self.compare_knobs(mi, &table, t);
    }

    /// [`Self::check_knobs`] with the table the daemon last left taken as
    /// the live one: for a look while no swap was announced (a table swap
    /// sends a uevent; a knob written in sysfs sends nothing).
    fn check_queue_knobs(&mut self, mi: usize, t: f64) {
        let Some(table) = self.maps[mi].expected.take() else {
            return self.check_knobs(mi, t);
        };
        self.compare_knobs(mi, &table, t);
        self.maps[mi].expected = Some(table);
    }

    /// The map's knobs as the kernel holds them with `table` live, against
    /// what the tuner last read back.
    fn compare_knobs(&mut self, mi: usize, table: &MultipathTable, t: f64) {
        if let Ok(live) = self.settings_of(mi, table) {
            self.compare_live(mi, &live, t);
        }
    }

    /// The map's knobs as read (`live`) against what the tuner last read
    /// back: a difference is reported to the tuner, which stops tuning.
    fn compare_live(&mut self, mi: usize, live: &Settings, t: f64) {
        let m = &mut self.maps[mi];
        let Some(tuner) = m.tuner.as_mut() else {
            return;
        };
        let moved = outside::knob_change(tuner.settings(), live);
        if moved.is_empty() {
            return;
        }
        let what: Vec<String> = moved
            .iter()
            .map(|k| {
                format!(
                    "{} {} -> {}",
                    k.name(),
                    tuner.settings().show(*k),
                    live.show(*k)
                )
            })
            .collect();
        let why = format!("changed outside pathpilot: {}", what.join(", "));
        say!("{}: {why}", m.name);
        tuner.outside_change(t, &why, live.clone());
    }

    fn drain_tuner(&mut self, mi: usize) {
        let Some(tu) = self.maps[mi].tuner.as_mut() else {
            return;
        };
        for d in tu.drain() {
            Self::log_decision(
                &mut self.decisions,
                &mut self.decision_counts,
                &mut self.next_seq,
                d,
            );
        }
    }

    fn log_decision(
        log: &mut Arc<Vec<LoggedDecision>>,
        counts: &mut BTreeMap<String, u64>,
        seq: &mut u64,
        d: Decision,
    ) {
        let outcome = d.outcome.word().to_string();
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
        let log = Arc::make_mut(log);
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

    /// Adds the engine thread's CPU time since `t` (a [`thread_cpu`]
    /// reading) to `what`; returns the new reading, for the next phase.
    fn account(&mut self, what: &'static str, t: Duration) -> Duration {
        let now = thread_cpu();
        *self.spent.entry(what).or_default() += now.saturating_sub(t);
        now
    }

    fn spent_on(&self, what: &[&str]) -> Duration {
        what.iter().filter_map(|w| self.spent.get(w)).sum()
    }

    /// The status as it now is, for the servers: built at once if it was
    /// read since the last build, else only marked stale, for the next
    /// reader to ask for (see `shared`).
    fn publish(&mut self) {
        if self.shared.wanted() {
            self.publish_now();
        }
    }

    fn publish_now(&mut self) {
        let t = thread_cpu();
        self.publish_status();
        self.account("publish", t);
    }

    fn publish_status(&self) {
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
                MapReport {
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
                    pinned: m
                        .tuner
                        .as_ref()
                        .map(|t| t.pinned().iter().map(|k| k.name().to_string()).collect())
                        .unwrap_or_default(),
                    outside_change: m.tuner.as_ref().and_then(|t| t.held().map(str::to_string)),
                    rates: m.rates.clone(),
                    totals: m.totals.clone(),
                    cgroups: m.cgroups.clone(),
                    paths: m
                        .paths
                        .iter()
                        .map(|p| {
                            let (rates, share) =
                                m.path_rates.get(&p.dev).cloned().unwrap_or_default();
                            PathReport {
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
                                operator_failed: p.admin_failed,
                                health: m.health.state(p.dev).word().into(),
                                port_return_s: p.port_return_s,
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
            bio_probe: self.cfg.bio_probe,
            observed_pct: self.observed_pct,
            bpf_stats: crate::observer::bpf_stats_enabled(),
            bpf_programs: self.obs.program_costs(),
            engine_secs: self
                .spent
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_secs_f64()))
                .collect(),
        });
    }
}

/// Time-sampled observation's schedule: the probes attached across every
/// other window's end, for the last `duty` of the window that ends there
/// and the first `duty` of the next (`opens`, the window under way began
/// attached). Each window is observed for its share, as when each had its
/// own stretch at its end, with half the switches: at 64 paths and 1 s
/// windows, attaching and detaching the programs every window was most of
/// the observer's cost under steady load (394 ms a minute of the engine's
/// CPU against 239 for the snapshots).
fn probes_due(
    now: Instant,
    next_window: Instant,
    window: Duration,
    duty: f64,
    opens: bool,
) -> bool {
    let left = next_window.saturating_duration_since(now);
    let share = window.mul_f64(duty);
    if opens {
        window.saturating_sub(left) < share
    } else {
        left <= share
    }
}

/// CPU time of the calling thread: its own work only, not the checker
/// threads it wakes (wall time would count them on a busy CPU).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out-pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

enum Wake {
    Message(ToEngine),
    DmEvent,
}

/// Wakes the engine on any dm event of any map (a path failed by the
/// kernel, a table swapped), so kernel-detected failures and changes made
/// by others are seen at once, not at the next scan.
fn spawn_event_watcher(tx: mpsc::Sender<Wake>, stop: Arc<AtomicBool>) -> Result<()> {
    let dm = Dm::open()?;
    std::thread::Builder::new()
        .name("dm-events".into())
        .spawn(move || {
            let mut last: HashMap<String, u32> = HashMap::new();
            while !stop.load(Ordering::SeqCst) {
                // Armed before the counters are read: an event after the
                // read wakes the poll below.
                if dm.arm_events().is_err() {
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                }
                let Ok(list) = dm.list() else {
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                };
                let mut changed = false;
                let mut now: HashMap<String, u32> = HashMap::new();
                for m in &list {
                    let ev = m.event_nr.unwrap_or(0);
                    if last.get(&m.name).is_some_and(|old| *old != ev) {
                        changed = true;
                    }
                    now.insert(m.name.clone(), ev);
                }
                // A map that appeared or went is a change too.
                changed |= !last.is_empty() && now.len() != last.len();
                last = now;
                if changed && tx.send(Wake::DmEvent).is_err() {
                    break;
                }
                let _ = dm.poll_events(Duration::from_secs(1));
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_probes_are_attached_across_every_other_window_end() {
        let t0 = std::time::Instant::now();
        let w = std::time::Duration::from_secs(4);
        let end = t0 + w;
        let at = |ms, opens| {
            probes_due(
                t0 + std::time::Duration::from_millis(ms),
                end,
                w,
                0.25,
                opens,
            )
        };
        // A window that ends attached.
        assert!(!at(0, false), "it begins detached");
        assert!(!at(2_999, false));
        assert!(at(3_000, false), "its last quarter attached");
        assert!(at(3_999, false));
        assert!(at(4_500, false), "overdue, it keeps them attached");
        // The next, which begins attached.
        assert!(at(0, true), "its first quarter attached");
        assert!(at(999, true));
        assert!(!at(1_000, true), "detached after its share");
        assert!(
            !at(3_999, true),
            "detached at its end: one switch each way per two"
        );
        assert!(!at(4_500, true), "overdue, still detached");
        // Each window is observed for its share either way.
        let on = |opens| (0..4_000).step_by(10).filter(|ms| at(*ms, opens)).count();
        assert_eq!((on(false), on(true)), (100, 100));
        assert!(probes_due(t0, end, w, 1.0, false) && probes_due(t0, end, w, 1.0, true));
    }

    #[test]
    fn totals_add_histograms_bucket_by_bucket_in_order() {
        let mut t = Totals::default();
        let mut i = DeviceInterval {
            read_ios: 3,
            size_hist: BTreeMap::from([(4096, 2), (65536, 1)]),
            lat_hist: BTreeMap::from([(1024, 3)]),
            ..Default::default()
        };
        totals_add(&mut t, &i);
        // New buckets on either side and between, one seen before.
        i.size_hist = BTreeMap::from([(512, 1), (4096, 5), (16384, 2), (1 << 20, 1)]);
        totals_add(&mut t, &i);
        assert_eq!(
            t.size_hist,
            vec![(512, 1), (4096, 7), (16384, 2), (65536, 1), (1 << 20, 1)]
        );
        assert_eq!(t.lat_hist, vec![(1024, 6)]);
        assert_eq!(t.read_ios, 6);
    }
}
