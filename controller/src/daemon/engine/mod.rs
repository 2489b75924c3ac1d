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
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc::{Receiver, RecvTimeoutError},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use super::{
    actuator,
    checker::Checkers,
    shared::{Shared, ToEngine},
    state::SavedState,
};
use crate::{
    config::Config,
    discovery::uevent::UeventMonitor,
    dm::{Dm, multipathd},
    lock::{Locks, MapLock},
    mpath::{MultipathTable, grouping},
    observer::{Access, Bios, Observer, Sampling, Scope},
    policy::{
        schedule::{Scan, ScanSchedule},
        sync,
    },
    tuner::{Mode, Settings, Tuner},
};

mod beside;
mod cpu;
mod decisions;
mod events;
mod figures;
mod handover;
mod health;
mod looks;
mod map_entry;
mod maps;
mod operator;
mod status;
mod verdicts;
mod window;

use cpu::{CpuAccount, thread_cpu};
use decisions::DecisionLog;
use events::Wake;
use map_entry::MapEntry;
use window::LastWindow;

pub use super::state::STATE_FILE;

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

/// When the daemon started: the zero of the tuners' and policies' clock
/// (seconds, monotonic), and as wall-clock time for the status.
struct Started {
    at: Instant,
    unix: f64,
}

impl Started {
    fn now() -> Self {
        Started {
            at: Instant::now(),
            unix: crate::clock::unix_now(),
        }
    }
}

pub struct Engine {
    cfg: Config,
    config_path: String,
    dm: Dm,
    obs: Observer,
    checkers: Checkers,
    maps: Vec<MapEntry>,
    state: SavedState,
    locks: Locks,
    shared: Shared,
    last: LastWindow,
    /// When the probes are attached while observation is time-sampled.
    sampling: Sampling,
    started: Started,
    log: DecisionLog,
    multipathd: Option<String>,
    /// Applying table advice through multipathd (`beside.apply`).
    beside_apply: beside::BesideApply,
    stop: Arc<AtomicBool>,
    reload_config: Arc<AtomicBool>,
    cpu: CpuAccount,
    /// The kernel's uevents: a full discovery scan only when a disk came,
    /// went or changed (None where unavailable: a full scan every time).
    uevents: Option<UeventMonitor>,
    /// When discovery reads every disk, and when only the known paths.
    scans: ScanSchedule,
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
            state,
            locks: Locks::system(),
            shared,
            last: LastWindow::new(prev),
            sampling: Sampling::default(),
            started: Started::now(),
            log: DecisionLog::default(),
            multipathd: multipathd::running(),
            beside_apply: Default::default(),
            stop,
            reload_config,
            cpu: CpuAccount::default(),
            // The first pass one interval after the start, a full one on
            // every pass when no uevents arrive.
            scans: ScanSchedule::new(Instant::now(), interval, uevents.is_some()),
            uevents,
        };
        if let Some(m) = &e.multipathd {
            say!(
                "multipathd is running ({m}): its maps are its own; pathpilot observes them, \
                 tunes their queue knobs beside it and advises on their tables \
                 (`pathpilot advise`; `pathpilot takeover` hands them to pathpilot)"
            );
        }
        e.repair_handover();
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
        self.started.at.elapsed().as_secs_f64()
    }

    fn save_state(&self) {
        if let Err(e) = self.state.save(Path::new(STATE_FILE)) {
            say!("{e}: the operator's decisions and the daemon's maps will not survive a restart");
        }
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
        let held = self.maps[mi].held(&self.checkers);
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
        self.maps[mi].note_status(&r.synced.status, Instant::now());
        Ok(r)
    }

    /// Runs until stopped. `messages` carries the servers' requests: changes
    /// to carry out, and fresh statuses for readers.
    pub fn run(mut self, messages: Receiver<ToEngine>) -> Result<()> {
        let wake = events::wake_channel(messages, self.stop.clone())?;
        let tick = Duration::from_millis(200);
        let mut next_window = Instant::now() + self.cfg.window();
        while !self.stop.load(Ordering::SeqCst) {
            // Woken in time to close the window, and to attach or detach
            // the probes when sampling: a window closed late would take
            // the probes' share from the next (they switch once each way
            // every two windows).
            let at = self
                .next_probe_switch(next_window)
                .map_or(next_window, |a| a.min(next_window));
            let wait = at.saturating_duration_since(Instant::now()).min(tick);
            match wake.recv_timeout(wait) {
                Ok(w) => self.on_wake(w),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if self.reload_config.swap(false, Ordering::SeqCst) {
                self.reread_config();
            }
            let now = Instant::now();
            self.between_windows(now);
            self.pace_observer(Instant::now(), next_window);
            if now >= next_window {
                next_window += self.cfg.window();
                if next_window < now {
                    next_window = now + self.cfg.window();
                }
                self.close_window();
                self.pace_observer(Instant::now(), next_window);
            }
        }
        say!("stopping: detaching the probes, leaving the maps as they are");
        Ok(())
    }

    /// A request, a reader's call for a fresh status, or a dm event.
    fn on_wake(&mut self, w: Wake) {
        match w {
            Wake::Message(ToEngine::Change(c)) => {
                let r = self.timed("requests", |e| e.handle(c.request));
                // Before the reply: a client that reads the status
                // after its change has been answered sees the change.
                self.publish();
                let _ = c.reply.send(r);
            }
            Wake::Message(ToEngine::Refresh(done)) => {
                self.publish_now();
                let _ = done.send(());
            }
            Wake::DmEvent => {
                self.timed("dm_status", |e| e.refresh_status(false));
                self.publish();
            }
        }
    }

    /// What does not wait for the window: the checkers' verdicts,
    /// no_path_retry, the kernel's uevents, and the status reads and
    /// discovery scans due.
    fn between_windows(&mut self, now: Instant) {
        self.timed("checkers", |e| e.run_checkers(now));
        // Published at once: clients see the map stop (or resume)
        // queueing when its I/O fails (or flows), not a window later.
        if self.no_path_retry() {
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
            self.timed("dm_status", |e| e.refresh_status(false));
            self.timed("rescan", |e| {
                if let Err(err) = e.rescan(scan == Scan::Full) {
                    say!("rescan failed: {err:#}");
                }
            });
        }
    }

    /// Ends the window under way: its figures and the tuners' answers, a
    /// status, and the sampling schedule's next window.
    fn close_window(&mut self) {
        // The observer's, the probes', the knobs' and the tuner's changes'
        // shares are their own.
        let apart = ["observer", "probes", "knobs", "changes"];
        self.timed_apart("window", &apart, |e| {
            if let Err(err) = e.window() {
                say!("window failed: {err:#}");
            }
        });
        self.publish();
        self.sampling.window_closed();
    }

    /// Runs `f` with the engine thread's CPU time accounted to `what`.
    fn timed<T>(&mut self, what: &'static str, f: impl FnOnce(&mut Self) -> T) -> T {
        self.timed_apart(what, &[], f)
    }

    /// [`Self::timed`], less what the kinds of work `apart` done within it
    /// account as their own.
    fn timed_apart<T>(
        &mut self,
        what: &'static str,
        apart: &[&str],
        f: impl FnOnce(&mut Self) -> T,
    ) -> T {
        let before = self.cpu.spent_on(apart);
        let since = thread_cpu();
        let r = f(self);
        let within = self.cpu.spent_on(apart) - before;
        self.cpu.add(what, since, within);
        r
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

    /// When the probes next switch within the window under way, while
    /// sampling.
    fn next_probe_switch(&self, next_window: Instant) -> Option<Instant> {
        if !self.obs.sampling() {
            return None;
        }
        let attached = self.obs.attached();
        self.sampling.next_switch(
            attached,
            next_window,
            self.cfg.window(),
            self.cfg.observe_duty,
        )
    }

    /// Attaches or detaches the probes as sampling wants them at `now`.
    fn pace_observer(&mut self, now: Instant, next_window: Instant) {
        // Apart from the snapshots: while sampling, attaching and detaching
        // the programs is the part that grows with the windows.
        self.timed("probes", |e| {
            let due = e.sampling_wanted().then(|| {
                e.sampling
                    .due(now, next_window, e.cfg.window(), e.cfg.observe_duty)
            });
            if let Err(err) = e.obs.set_sampling(due) {
                say!("observer: {err}");
            }
        });
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

    fn drain_tuner(&mut self, mi: usize) {
        let Some(tu) = self.maps[mi].tuner.as_mut() else {
            return;
        };
        for d in tu.drain() {
            self.log.log(d);
        }
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
        self.timed("publish", |e| e.shared.publish(e.status()));
    }
}
