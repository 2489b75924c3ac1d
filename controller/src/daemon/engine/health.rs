//! The loop around [`marginal`]: each window's path figures go to the
//! map's health model; a path it judges marginal is set aside in the map's
//! last group (tune mode; advise mode only says so), and taken back when
//! it serves again on probation or an operator unmarks it.
use anyhow::{Context, Result};

use super::{Engine, say};
use crate::{
    blockdev::DevNum, daemon::actuator, dm::multipathd, mpath::grouping, observer::DeviceInterval,
    policy::marginal, tuner::Mode,
};

impl Engine {
    /// Feeds map `mi`'s path figures of one window (`pis`, in the map's
    /// path order) to its health model, and acts on what changed.
    pub(super) fn judge_health(&mut self, mi: usize, t: f64, pis: &[DeviceInterval]) {
        let m = &self.maps[mi];
        // Judged as the tuner decides: not in observe mode, and not while
        // someone else owns the table. A tuner paused for a failed path
        // goes on judging: a path that dm fails again and again is sick.
        let Some(tu) = m.tuner.as_ref() else { return };
        if !(m.managed || m.beside)
            || tu.mode() == Mode::Observe
            || tu.hands_off()
            || !self.cfg.marginal.enabled
        {
            return;
        }
        let mode = tu.mode();
        // A path's usual standing among its peers depends on how I/O is
        // routed to them and on the I/O: learnt per setting and workload
        // (and request size limit and queue depth, which shape the requests
        // each path holds).
        let s = tu.settings();
        let routing = marginal::Routing::new(
            s.selector.name(),
            format!("{:?} {}", s.weights, s.active_paths),
            tu.class().map_or_else(|| "idle".to_string(), |c| c.key()),
            s.max_sectors_kb,
            s.queue_depth,
        );
        let secs = pis.first().map_or(0.0, |i| i.interval_s);
        let samples: Vec<marginal::Sample> = m
            .paths
            .iter()
            .zip(pis)
            .map(|(p, i)| {
                let checker_up = !self.checkers.verdict(&p.name).is_bad();
                marginal::Sample {
                    dev: p.dev,
                    in_service: !p.dm_failed && checker_up && !m.set_aside.contains(&p.dev),
                    checker_up,
                    latency: i
                        .lat_by_size
                        .iter()
                        .filter_map(|c| Some((c.class, c.samples, c.p50_us?)))
                        .collect(),
                    completed: i.completed,
                    errors: i.errors,
                    observed: i.observed_pct / 100.0,
                }
            })
            .collect();
        let changes = self.maps[mi].health.step(t, secs, &routing, &samples);
        if changes.is_empty() {
            return;
        }
        let name = self.maps[mi].name.clone();
        let mut why = vec![];
        for c in &changes {
            let path = self.maps[mi].path_name(c.dev);
            say!("{name}: path {path} ({}) {}: {}", c.dev, c.to, c.why);
            why.push(format!("path {path} {}: {}", c.to, c.why));
        }
        let why = why.join("; ");
        if mode == Mode::Tune && self.maps[mi].beside {
            self.follow_health_beside(mi, t, &why);
        } else if mode == Mode::Tune {
            self.follow_health(mi, &why);
        } else if let Some(tu) = self.maps[mi].tuner.as_mut() {
            tu.health_changed(t, format!("{why} (advise: the map is left as it is)"), None);
            self.drain_tuner(mi);
        }
    }

    /// Beside multipathd a marginal path is set aside by multipathd
    /// itself (`setmarginal path`, into its marginal path group) where its
    /// configuration groups marginal paths apart; elsewhere pathpilot only
    /// says what it would do: its own table would fight multipathd's.
    fn follow_health_beside(&mut self, mi: usize, t: f64, why: &str) {
        let want = self.maps[mi].health.marginal();
        let name = self.maps[mi].name.clone();
        let m = &self.maps[mi];
        let newly: Vec<String> = want
            .iter()
            .filter(|d| !m.set_aside.contains(d))
            .map(|d| m.path_name(*d))
            .collect();
        let back: Vec<String> = m
            .set_aside
            .iter()
            .filter(|d| !want.contains(d))
            .map(|d| m.path_name(*d))
            .collect();
        let said = match multipathd::marginal_groups() {
            Ok(true) => {
                let mut done = vec![];
                for (cmd, paths) in [("setmarginal", &newly), ("unsetmarginal", &back)] {
                    for p in paths {
                        match multipathd::Multipathd::connect()
                            .and_then(|mut c| c.act(&format!("{cmd} path {p}")))
                        {
                            Ok(()) => done.push(format!("multipathd {cmd} path {p}")),
                            Err(e) => say!("{name}: {e}"),
                        }
                    }
                }
                self.maps[mi].set_aside = want;
                format!("{why}; sent: {}", done.join(", "))
            }
            Ok(false) => format!(
                "{why} (multipathd's marginal_pathgroups is off: it would serve a marginal \
                 path as any other; set marginal_pathgroups in multipath.conf to let \
                 pathpilot set marginal paths aside through multipathd)"
            ),
            Err(e) => format!("{why} (multipathd cannot be asked: {e})"),
        };
        say!("{name}: {said}");
        if let Some(tu) = self.maps[mi].tuner.as_mut() {
            tu.health_changed(t, said, None);
        }
        self.drain_tuner(mi);
    }

    /// Sets aside what the health model calls marginal now, and takes
    /// back what it no longer does, by one reload; the tuner starts over.
    pub(super) fn follow_health(&mut self, mi: usize, why: &str) {
        let want = self.maps[mi].health.marginal();
        let t = self.t();
        let r = self.regroup_marginal(mi, want);
        let name = self.maps[mi].name.clone();
        match r {
            Ok(Some(stall)) => {
                let aside: Vec<String> = self.maps[mi]
                    .set_aside
                    .iter()
                    .map(|d| self.maps[mi].path_name(*d))
                    .collect();
                say!(
                    "{name}: regrouped: set aside in the last group: {} (reload stalled I/O \
                     {stall:.1} ms)",
                    if aside.is_empty() {
                        "none".to_string()
                    } else {
                        aside.join(", ")
                    }
                );
                let now = self.read_settings(mi).ok();
                if let Some(tu) = self.maps[mi].tuner.as_mut() {
                    tu.health_changed(t, why.to_string(), now);
                }
            }
            Ok(None) => {
                if let Some(tu) = self.maps[mi].tuner.as_mut() {
                    tu.health_changed(t, why.to_string(), None);
                }
            }
            Err(e) => say!("{name}: {why}; cannot regroup: {e:#}"),
        }
        self.drain_tuner(mi);
    }

    /// One reload that leaves exactly `want` set aside; the reload's stall
    /// in ms, or `None` when the map already is so. When it fails, what was
    /// set aside stays as it was.
    fn regroup_marginal(&mut self, mi: usize, want: Vec<DevNum>) -> Result<Option<f64>> {
        let before = self.maps[mi].set_aside.clone();
        let r = self.try_regroup_marginal(mi, want);
        if r.is_err() {
            self.maps[mi].set_aside = before;
        }
        r
    }

    fn try_regroup_marginal(&mut self, mi: usize, want: Vec<DevNum>) -> Result<Option<f64>> {
        let m = &mut self.maps[mi];
        if m.set_aside == want {
            return Ok(None);
        }
        let back: Vec<(DevNum, usize)> = m
            .paths
            .iter()
            .filter(|p| m.set_aside.contains(&p.dev) && !want.contains(&p.dev))
            .map(|p| (p.dev, p.home))
            .collect();
        for p in &mut m.paths {
            if want.contains(&p.dev) && !m.set_aside.contains(&p.dev) {
                p.home = p.group;
            }
        }
        // Every path in service was active: so is every one after.
        let all_active = self
            .read_settings(mi)
            .is_ok_and(|s| s.active_paths >= self.maps[mi].tuned_paths().len());
        let m = &mut self.maps[mi];
        m.set_aside = want;
        let name = m.name.clone();
        let mut lock = self.lock(&name)?;
        let live = self.dm.multipath_table(&name)?;
        let table = if self.maps[mi].fixed_groups {
            back.iter().fold(live.clone(), |t, (d, home)| {
                grouping::take_back(&t, *d, *home)
            })
        } else {
            let paths = self.maps[mi].tuned_paths();
            let mut now = self.read_settings(mi)?;
            if all_active {
                now.active_paths = paths.len();
            }
            actuator::table_for(&live, &self.maps[mi].target(&paths), &now)?
        };
        let r = self
            .reload_locked(&mut lock, mi, &table)
            .with_context(|| format!("reloading {name}"))?;
        Ok(Some(r.timing.stall.as_secs_f64() * 1000.0))
    }

    /// An operator ends a path's marginal state: it serves again at once.
    pub(super) fn unmark(&mut self, mi: usize, dev: DevNum) -> Result<bool> {
        let t = self.t();
        if !self.maps[mi].health.unmark(dev, t) {
            return Ok(false);
        }
        let want = self.maps[mi].health.marginal();
        self.regroup_marginal(mi, want)?;
        let now = self.read_settings(mi).ok();
        let why = format!(
            "path {} unmarked by the operator: healthy",
            self.maps[mi].path_name(dev)
        );
        if let Some(tu) = self.maps[mi].tuner.as_mut() {
            tu.health_changed(t, why, now);
        }
        self.drain_tuner(mi);
        Ok(true)
    }
}
