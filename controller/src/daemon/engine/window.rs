//! One measurement window, in steps: the snapshot; per map its figures,
//! its paths' health, a look for changes made outside, then its tuner's
//! answer carried out.
use std::{collections::HashMap, time::Duration};

use anyhow::{Context, Result};

use super::{Engine, map_entry::MapEntry};
use crate::{
    blockdev::DevNum,
    daemon::{actuator, checker::Checkers},
    observer::Snapshot,
    tuner::{Action, Health, Knob, Settings, Window},
};

/// A command outstanding on a path this long (seconds) holds the tuner
/// back: a reload's suspend would wait for it, and for ever on a path that
/// has hung but is not failed yet.
const STALLED_S: f64 = 1.0;

/// The last window, as it closed.
pub(super) struct LastWindow {
    /// Its closing snapshot, the next window's start.
    pub(super) snapshot: Snapshot,
    /// The share of it the probes were attached, %.
    pub(super) observed_pct: f64,
}

impl LastWindow {
    /// Before any window: a first snapshot, fully observed.
    pub(super) fn new(snapshot: Snapshot) -> Self {
        LastWindow {
            snapshot,
            observed_pct: 100.0,
        }
    }

    /// The window that ends with snapshot `cur` closes.
    fn close(&mut self, cur: Snapshot) {
        self.observed_pct = cur.observed.pct_since(&self.snapshot.observed);
        self.snapshot = cur;
    }
}

impl Engine {
    /// One measurement window: figures per map and path, changes made
    /// behind the daemon's back, then the tuners.
    pub(super) fn window(&mut self) -> Result<()> {
        let (cur, silent) = self.timed("observer", |e| -> Result<_> {
            Ok((e.obs.snapshot()?, e.obs.silences()))
        })?;
        let t = self.t();
        for mi in 0..self.maps.len() {
            let (pis, w) = self.maps[mi].measure(&self.last.snapshot, &cur);
            if self.maps[mi].tuner.is_none() {
                continue;
            }
            self.judge_health(mi, t, &pis);
            self.look_if_due(mi, t);
            let health = tuner_health(&self.maps[mi], &self.checkers, &silent, t);
            self.tune(mi, t, &w, &health);
            self.drain_tuner(mi);
            self.apply_advice_if_due(mi);
        }
        self.last.close(cur);
        Ok(())
    }

    /// Map `mi`'s tuner's answer to the window, carried out.
    fn tune(&mut self, mi: usize, t: f64, w: &Window, health: &Health) {
        let action = self.maps[mi]
            .tuner
            .as_mut()
            .and_then(|tu| tu.on_window(t, w, health));
        if let Some(a) = action {
            self.timed("changes", |e| e.carry_out(mi, t, a));
        }
    }

    /// Applies the tuner's action under the map's lock and tells the tuner
    /// what the kernel kept, or what a change that failed part way left.
    fn carry_out(&mut self, mi: usize, t: f64, a: Action) {
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
                // A change made outside, found under the lock: the tuner
                // has withdrawn this one.
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
}

/// A map's health as its tuner weighs it at `t`: the paths failed (by the
/// kernel or the checker), those silent with commands outstanding
/// (`silent`, per device), suspended, queueing with no path.
fn tuner_health(
    m: &MapEntry,
    checkers: &Checkers,
    silent: &HashMap<DevNum, Duration>,
    t: f64,
) -> Health {
    let failed: Vec<String> = m
        .paths
        .iter()
        .filter(|p| p.dm_failed || checkers.verdict(&p.name).is_bad())
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
    Health {
        queueing_without_paths: m.queue_if_no_path && failed.len() == m.paths.len(),
        failed_paths: failed,
        suspended: m.suspended,
        last_path_change: m.last_path_change.map(|c| t - c.elapsed().as_secs_f64()),
        stalled_paths,
    }
}
