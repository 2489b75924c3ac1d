//! The maps' life in the engine: found at start (adopted, repaired only
//! where pathpilot's own reload was cut short), created, paths joining and
//! leaving, the kernel's status followed, and changes made by others
//! noticed.
use std::{
    collections::{BTreeSet, HashMap, HashSet},
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Result;

use super::{
    Engine, WHO,
    figures::MapFigures,
    map_entry::{AluaSeen, MapEntry, PathEntry},
    say,
};
use crate::{
    blockdev::{BlockDev, DevNum},
    daemon::actuator,
    discovery::{self, alua::Alua, naming},
    dm::Message,
    lock::MapLock,
    mpath::{
        MultipathStatus, MultipathTable, Selector,
        grouping::{self, Candidate, Grouping},
    },
    mpconf::{self, lun as mplun},
    policy::{
        failback, hotplug, marginal,
        no_path_retry::NoPathRetry,
        outside,
        repair::{self, Repair},
        schedule::Look,
        sync,
    },
    tuner::Tuner,
};

/// How long the start waits for another writer to finish with a map.
const START_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Engine {
    /// Every multipath map already present: ours from a previous run and
    /// adopted WWIDs are managed as they are (no reload); others observed.
    pub(super) fn adopt_existing(&mut self) -> Result<()> {
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
            let ours = self.state.maps.get(&m.name) == Some(&wwid) && !wwid.is_empty();
            let adopt = !wwid.is_empty() && self.cfg.maps.adopt.contains(&wwid);
            let beside = self.multipathd.is_some() && !self.hands_off();
            let (managed, reason) = match (&self.multipathd, ours, adopt) {
                (Some(md), _, _) => (
                    false,
                    Some(format!(
                        "multipathd owns it ({md}): its queue knobs are tuned beside it, \
                         its table only advised (`pathpilot advise`)"
                    )),
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
                } else if beside {
                    "multipathd's: tuned beside it (queue knobs)"
                } else {
                    "observed only"
                }
            );
            if self.multipathd.is_none() {
                let mut lock = self.locks.map(&m.name, WHO, START_LOCK_WAIT)?;
                if self.repair(&mut lock, &info) {
                    info = self.dm.info(&m.name)?;
                }
            }
            let table = self.dm.multipath_table(&m.name).unwrap_or(table);
            let fixed = self.groups_fixed(&table, ours);
            self.add_map(
                m.name.clone(),
                wwid,
                info.dev,
                managed,
                reason,
                table,
                fixed,
            )?;
            if beside {
                self.beside(self.maps.len() - 1)?;
            }
            if info.suspended
                && let Some(e) = self.maps.last_mut()
            {
                e.suspended = true;
            }
        }
        Ok(())
    }

    /// A map found suspended or holding an inactive table: undone only if
    /// the lock file's journal says a reload of pathpilot's was cut short
    /// there (see [`repair::decide`]). Returns whether it changed the map.
    fn repair(&self, lock: &mut MapLock, info: &crate::dm::MapInfo) -> bool {
        let map = &info.name;
        let interrupted = lock.interrupted().cloned();
        match repair::decide(info.suspended, info.inactive_table, interrupted.is_some()) {
            Repair::Nothing => {
                if interrupted.is_some() {
                    let _ = lock.repaired();
                }
                false
            }
            Repair::Leave(why) => {
                say!("{map}: {why}");
                false
            }
            Repair::Undo { .. } if self.hands_off() => {
                say!(
                    "{map}: left {} by an interrupted reload; observe mode leaves it so",
                    if info.suspended {
                        "suspended"
                    } else {
                        "with an inactive table"
                    }
                );
                false
            }
            Repair::Undo {
                drop_inactive,
                resume,
            } => {
                let by = interrupted.map(|i| i.by.to_string()).unwrap_or_default();
                if drop_inactive {
                    match self.dm.clear_inactive(map) {
                        Ok(()) => say!(
                            "{map}: dropped an inactive table left by an interrupted reload ({by})"
                        ),
                        Err(e) => say!("{map}: cannot drop its inactive table: {e}"),
                    }
                }
                if resume {
                    match self.dm.resume(map) {
                        Ok(()) => say!(
                            "{map}: was left suspended by an interrupted reload ({by}): resumed with its live table"
                        ),
                        Err(e) => say!("{map}: is suspended and cannot be resumed: {e}"),
                    }
                }
                let _ = lock.repaired();
                true
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn add_map(
        &mut self,
        name: String,
        wwid: String,
        dev: DevNum,
        managed: bool,
        unmanaged_reason: Option<String>,
        table: MultipathTable,
        fixed_groups: bool,
    ) -> Result<()> {
        let operator = self.state.operator(&name);
        let admin_failed = operator.failed();
        let mut paths = vec![];
        for (gi, g) in table.groups.iter().enumerate() {
            for p in &g.paths {
                let pname = BlockDev::from_dev(p.dev)
                    .map(|b| b.name)
                    .unwrap_or_else(|| p.dev.to_string());
                paths.push(PathEntry::new(
                    pname,
                    p.dev,
                    gi + 1,
                    admin_failed.contains(&p.dev),
                ));
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
                && self.state.maps.get(&name) == Some(&wwid));
        let mut entry = MapEntry {
            name,
            wwid,
            dev,
            kernel_name,
            vendor_model,
            managed,
            unmanaged_reason,
            beside: false,
            expected: managed.then(|| table.clone()),
            table: Some(table),
            fixed_groups,
            suspended: false,
            queue_if_no_path,
            wants_queue,
            no_path_retry: NoPathRetry::new(wants_queue && !queue_if_no_path),
            no_path_retry_secs: None,
            paths,
            tuner: None,
            last_path_change: None,
            last_event: 0,
            figures: MapFigures::default(),
            health: marginal::HealthModel::new(self.cfg.marginal.clone()),
            set_aside: vec![],
            alua_seen: Default::default(),
            look: Look::new(Instant::now(), self.uevents.is_some()),
            status_look: Look::new(Instant::now(), self.uevents.is_some()),
            knob_files: Default::default(),
            suspended_file: Default::default(),
        };
        if managed {
            let tp = entry.tuned_paths();
            let settings = actuator::read_settings(&self.dm, &entry.target(&tp))
                .map_err(|e| anyhow::anyhow!("reading {}'s settings: {e:#}", entry.name))?;
            let mut tuner = Tuner::new(
                &entry.name,
                self.cfg.mode,
                self.cfg.tuner(),
                settings,
                available_selectors(),
            );
            tuner.set_pins(operator.pins.keys().copied().collect());
            tuner.set_fixed_groups(fixed_groups);
            entry.tuner = Some(tuner);
        }
        let name = entry.name.clone();
        self.maps.push(entry);
        // The paths an operator failed stay failed, whatever happened
        // while no daemon ran.
        let mi = self.maps.len() - 1;
        if managed && !admin_failed.is_empty() && !self.hands_off() {
            let held = self.maps[mi].held(&self.checkers);
            match sync::sync(&self.dm, &name, &held) {
                Ok(s) => {
                    for (d, why) in s.refailed {
                        say!("{name}: {d} failed again at start ({})", why.word());
                    }
                    self.maps[mi].note_status(&s.status, Instant::now());
                }
                Err(e) => say!("{name}: cannot fail the operator's failed paths: {e}"),
            }
        }
        Ok(())
    }

    /// Map `e`, multipathd's, is tuned beside it: a tuner that moves only
    /// the queue knobs (multipathd reloads the table from its own
    /// configuration, and never writes those).
    fn beside(&mut self, mi: usize) -> Result<()> {
        let e = &self.maps[mi];
        let tp = e.tuned_paths();
        let settings = actuator::read_settings(&self.dm, &e.target(&tp))
            .map_err(|err| anyhow::anyhow!("reading {}'s settings: {err:#}", e.name))?;
        let mut tuner = Tuner::new(
            &e.name,
            self.cfg.mode,
            self.cfg.tuner(),
            settings,
            available_selectors(),
        );
        tuner.set_queue_knobs_only(true);
        tuner.set_fixed_groups(true);
        let e = &mut self.maps[mi];
        e.beside = true;
        e.tuner = Some(tuner);
        Ok(())
    }

    /// Creates a map for every LUN with enough paths and no map yet.
    pub(super) fn create_missing(&mut self) -> Result<()> {
        let filter = self.cfg.scan_filter().map_err(anyhow::Error::msg)?;
        self.create_missing_from(discovery::scan_free(&filter))
    }

    /// [`Self::create_missing`] from a scan already made.
    fn create_missing_from(&mut self, scan: discovery::Scan) -> Result<()> {
        if self.multipathd.is_some() {
            return Ok(());
        }
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
            let devs: Vec<DevNum> = free.iter().map(|p| p.dev).collect();
            // The table multipath-tools would build where its configuration
            // is followed (docs/multipath-conf.md), else pathpilot's own:
            // an ALUA array's ports grouped by priority with the alua
            // handler, one group elsewhere.
            let free_lun = discovery::Lun {
                wwid: lun.wwid.clone(),
                paths: free.iter().map(|p| (*p).clone()).collect(),
            };
            let planned = mpconf::followed(&self.cfg)
                .map_err(|e| e.to_string())
                .and_then(|eff| {
                    let p =
                        mplun::plan_lun(&free_lun, eff.as_deref(), &mplun::daemon_own(&self.cfg))?;
                    Ok((p, eff))
                });
            let (planned, eff) = match planned {
                Ok(p) => p,
                Err(e) => {
                    say!("cannot create a map for {}: {e}", lun.wwid);
                    continue;
                }
            };
            let rule = match (&eff, &planned.selection) {
                (Some(e), Some(sel)) => Some(mplun::naming(sel, e)),
                _ => None,
            };
            // The admin's find_multipaths decides which LUNs get a map, as
            // it decides for multipathd.
            if let Some(sel) = &planned.selection
                && sel.find_multipaths.origin.specific()
                && mplun::wanted(
                    sel.find_multipaths.value,
                    free.len(),
                    eff.as_ref()
                        .is_some_and(|e| mplun::known_wwids(e).contains(&lun.wwid)),
                )
                .is_err()
            {
                continue;
            }
            // pathpilot's own aliases win over multipath-tools' naming.
            let (name, _) = match self.cfg.maps.aliases.get(&lun.wwid) {
                Some(a) if !in_use.contains(a) => (a.clone(), None),
                _ => mplun::name(&lun.wwid, rule.as_ref(), &in_use, &bindings),
            };
            for d in &planned.plan.differences {
                say!("{name}: differs from multipath-tools: {}", d.describe());
            }
            let table = planned.plan.ours;
            let fail_after = planned.plan.queueing.fail_after_secs;
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
                    self.state.maps.insert(name.clone(), lun.wwid.clone());
                    // An operator state of a map of that name is of another
                    // map, gone since.
                    self.state.operator.remove(&name);
                    self.save_state();
                    let applied = self.dm.multipath_table(&name)?;
                    let fixed = self.groups_fixed(&applied, true);
                    self.add_map(name, lun.wwid.clone(), info.dev, true, None, applied, fixed)?;
                    if let Some(m) = self.maps.last_mut() {
                        m.no_path_retry_secs = fail_after;
                    }
                }
                Err(e) => say!("cannot create a map for {}: {e}", lun.wwid),
            }
        }
        Ok(())
    }

    /// Makes map `mi`'s path list follow `table` (what the kernel holds
    /// now): paths that joined are watched and checked, paths that left
    /// are forgotten. Operator-failed marks of paths that left go too.
    pub(super) fn follow_table(&mut self, mi: usize, table: MultipathTable) -> Result<()> {
        let devs: BTreeSet<DevNum> = table.paths().map(|p| p.dev).collect();
        let managed = self.maps[mi].managed;
        let name = self.maps[mi].name.clone();
        let mut gone = vec![];
        self.maps[mi].paths.retain(|p| {
            let keep = devs.contains(&p.dev);
            if !keep {
                gone.push((p.name.clone(), p.dev));
            }
            keep
        });
        for (pname, dev) in &gone {
            self.checkers.remove(pname);
            let _ = self.obs.unwatch(*dev);
        }
        let known: HashSet<DevNum> = self.maps[mi].paths.iter().map(|p| p.dev).collect();
        let mut added = vec![];
        for (gi, g) in table.groups.iter().enumerate() {
            for p in &g.paths {
                if known.contains(&p.dev) {
                    continue;
                }
                let pname = BlockDev::from_dev(p.dev)
                    .map(|b| b.name)
                    .unwrap_or_else(|| p.dev.to_string());
                self.obs.watch(p.dev)?;
                if managed {
                    self.checkers.add(&pname);
                }
                added.push(PathEntry::new(pname, p.dev, gi + 1, false));
            }
        }
        let m = &mut self.maps[mi];
        let changed = !gone.is_empty() || !added.is_empty();
        m.set_aside.retain(|d| devs.contains(d));
        m.health.retain(&devs.iter().copied().collect::<Vec<_>>());
        m.paths.extend(added);
        m.paths
            .sort_by(|a, b| discovery::disk_order(&a.name, &b.name));
        for p in &mut m.paths {
            p.group = table.group_of(p.dev).unwrap_or(p.group);
        }
        m.queue_if_no_path = table.has_feature("queue_if_no_path");
        m.table = Some(table);
        if changed {
            m.last_path_change = Some(Instant::now());
            let mut o = self.state.operator(&name);
            let before = o.clone();
            for (_, dev) in &gone {
                o.set_failed(*dev, false);
            }
            if o != before {
                self.state.set_operator(&name, o);
                self.save_state();
            }
        }
        Ok(())
    }

    /// Each multipath map's live table, by name: a table multipathd
    /// changes shows here; a reload of the same table does not.
    pub(super) fn map_tables(&self) -> HashMap<String, String> {
        let names = self.dm.list().unwrap_or_default();
        names
            .into_iter()
            .filter_map(|e| {
                let t = self.dm.multipath_table(&e.name).ok()?;
                Some((e.name, t.to_string()))
            })
            .collect()
    }

    /// Each dm device's event counter, by name (none where listing fails).
    pub(super) fn map_events(&self) -> HashMap<String, u32> {
        self.dm
            .list()
            .map(|l| {
                l.into_iter()
                    .filter_map(|e| Some((e.name, e.event_nr?)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Re-reads the maps' tables and status: path states from the kernel,
    /// and a table someone else loaded. `all`: every map; else those whose
    /// event counter moved, whose dm device announced a change, or not
    /// read for [`Look::EVERY`] (a message from someone else moves
    /// nothing).
    pub(super) fn refresh_status(&mut self, all: bool) {
        let now = Instant::now();
        let t = self.t();
        let events = self.map_events();
        for mi in 0..self.maps.len() {
            let name = self.maps[mi].name.clone();
            let Some((event_nr, suspended)) = self.event_and_suspended(mi, &events) else {
                continue;
            };
            let returning = self.awaits_return(mi, now);
            let m = &mut self.maps[mi];
            m.suspended = suspended;
            let moved = event_nr != m.last_event;
            m.last_event = event_nr;
            if !all && !moved && !returning && m.status_look.due(now, false).is_none() {
                continue;
            }
            m.status_look.looked(now);
            if let Ok(live) = self.dm.multipath_table(&name) {
                self.check_table(mi, live, t);
            }
            let Ok(st) = self.dm.multipath_status(&name) else {
                continue;
            };
            self.maps[mi].note_status(&st, now);
            self.fail_back(mi, &st);
            self.note_returns(mi, &st, now);
        }
    }

    /// Whether a path of map `mi` has a port that returned and does not
    /// serve yet: its status is read at every pass until it does (the
    /// kernel starts using a group without an event), for
    /// [`Self::RETURN_WATCH`] at most.
    fn awaits_return(&mut self, mi: usize, now: Instant) -> bool {
        let mut waiting = false;
        for p in &self.maps[mi].paths {
            match self.checkers.returned(&p.name) {
                Some(t) if now.duration_since(t) > Self::RETURN_WATCH => {
                    self.checkers.forget_return(&p.name)
                }
                Some(_) => waiting = true,
                None => {}
            }
        }
        waiting
    }

    /// How long the daemon watches for a returned port's path to serve: a
    /// port that returns non-optimized beside an optimized one may never.
    const RETURN_WATCH: Duration = Duration::from_secs(60);

    /// A path whose port returned that now serves the map's I/O: the time
    /// from the return is logged and kept in the path's status.
    fn note_returns(&mut self, mi: usize, st: &MultipathStatus, now: Instant) {
        let m = &mut self.maps[mi];
        for p in &mut m.paths {
            let Some(since) = self.checkers.returned(&p.name) else {
                continue;
            };
            if !failback::serving(st, p.dev) {
                continue;
            }
            let secs = now.duration_since(since).as_secs_f64();
            let state = self.checkers.alua(&p.name).map_or("usable", |s| s.name());
            say!(
                "{}: {} serves I/O again {secs:.1} s after its port returned ({state})",
                m.name,
                p.name
            );
            p.port_return_s = Some(secs);
            self.checkers.forget_return(&p.name);
        }
    }

    /// Map `mi`'s event counter and whether it is suspended: from the one
    /// list of every map (`events`) and its sysfs `dm/suspended`, through
    /// a kept file. An info ioctl per map instead copies the crate's 16 KiB
    /// buffer each way, which grows with the maps into most of an idle
    /// daemon's time in the kernel. A kernel whose list carries no event
    /// counters, or a map whose attribute does not read, is asked by info.
    fn event_and_suspended(
        &mut self,
        mi: usize,
        events: &HashMap<String, u32>,
    ) -> Option<(u32, bool)> {
        let m = &mut self.maps[mi];
        if let Some(ev) = events.get(&m.name) {
            let dm = &m.kernel_name;
            let flag = m
                .suspended_file
                .read((), || Path::new("/sys/block").join(dm).join("dm/suspended"));
            match flag.as_deref().map(str::trim) {
                Ok("0") => return Some((*ev, false)),
                Ok("1") => return Some((*ev, true)),
                _ => {}
            }
        }
        let info = self.dm.info(&m.name).ok()?;
        Some((info.event_nr, info.suspended))
    }

    /// An ALUA map of ours running on a lower group while the first one
    /// has a usable path again goes back to it (multipathd's failback).
    fn fail_back(&mut self, mi: usize, st: &MultipathStatus) {
        let m = &self.maps[mi];
        let alua = m
            .table
            .as_ref()
            .and_then(|t| t.hw_handler.as_ref())
            .is_some_and(|h| h.name == "alua");
        if !m.managed || !alua || self.hands_off() {
            return;
        }
        let Some(g) = failback::failback(st) else {
            return;
        };
        let msg = Message::SwitchGroup(g);
        match self.dm.message(&m.name, &msg) {
            Ok(()) => say!(
                "{}: failback: path group {g} has a usable path again: sent {}",
                m.name,
                msg.render()
            ),
            Err(e) => say!("{}: failback: {} failed: {e}", m.name, msg.render()),
        }
    }

    /// A live table that is not the one pathpilot left: someone else
    /// loaded it. It is the map's table from now on; tuning stops until an
    /// operator resumes it.
    pub(super) fn check_table(&mut self, mi: usize, live: MultipathTable, t: f64) {
        let m = &self.maps[mi];
        let change = m
            .expected
            .as_ref()
            .and_then(|e| outside::table_change(e, &live));
        let Some(what) = change else {
            let moved = m
                .table
                .as_ref()
                .filter(|_| m.beside)
                .and_then(|old| outside::table_change(old, &live));
            if let Err(e) = self.follow_table(mi, live) {
                say!("{}: {e:#}", self.maps[mi].name);
            }
            if let Some(moved) = moved {
                self.follow_owner(mi, &moved);
            }
            return;
        };
        let name = m.name.clone();
        let why = format!("table changed outside pathpilot: {what}");
        say!("{name}: {why}");
        self.maps[mi].expected = Some(live.clone());
        if let Err(e) = self.follow_table(mi, live) {
            say!("{name}: {e:#}");
        }
        let now = self.read_settings(mi);
        if let (Some(tu), Ok(now)) = (self.maps[mi].tuner.as_mut(), now) {
            tu.outside_change(t, &why, now);
        }
        self.drain_tuner(mi);
    }

    /// multipathd loaded a new table for map `mi` (a path came or went, its
    /// configuration changed): the tuner starts again from what the kernel
    /// holds now, the table's knobs and the new paths' queue knobs being
    /// multipathd's and the kernel's, not changes to undo.
    fn follow_owner(&mut self, mi: usize, moved: &str) {
        say!(
            "{}: multipathd reloaded the map ({moved}): tuning follows from what the kernel holds",
            self.maps[mi].name
        );
        let Ok(now) = self.read_settings(mi) else {
            return;
        };
        if let Some(tu) = self.maps[mi].tuner.as_mut()
            && tu.settings() != &now
        {
            tu.reset_to(now);
        }
    }

    /// Whether a map's path groups are not the tuner's to change: an
    /// adopted map's own groups, an ALUA array's priority groups, or any
    /// grouping configured other than multibus. (A map of ours in two
    /// groups is otherwise the tuner's own split.)
    pub(super) fn groups_fixed(&self, table: &MultipathTable, ours: bool) -> bool {
        let alua = table.hw_handler.as_ref().is_some_and(|h| h.name == "alua");
        alua || self.cfg.grouping(false) != Grouping::Multibus || (!ours && table.groups.len() > 1)
    }

    /// An ALUA array's port states, against the map's groups: when the
    /// array changed them (a controller failed over, a LUN's owner moved),
    /// the map is regrouped by a reload (path states synced), and the tuner
    /// starts again on the new first group.
    pub(super) fn follow_array(&mut self, mi: usize, full: bool) {
        let m = &self.maps[mi];
        let Some(table) = m.table.clone() else {
            return;
        };
        if !m.managed || table.hw_handler.as_ref().is_none_or(|h| h.name != "alua") {
            return;
        }
        // The states alone each interval, as the paths' checkers last read
        // them; the whole ALUA view (preferred bit, port group) when one
        // changed, or on a full scan.
        let seen = AluaSeen {
            groups: table
                .groups
                .iter()
                .map(|g| g.paths.iter().map(|p| p.dev).collect())
                .collect(),
            states: m
                .paths
                .iter()
                .map(|p| (p.dev, self.checkers.alua(&p.name)))
                .collect(),
        };
        if !full && seen == m.alua_seen {
            return;
        }
        self.maps[mi].alua_seen = seen;
        let m = &self.maps[mi];
        // Every scan interval, on every path of every ALUA map: only the
        // ALUA attributes, not the whole device (VPD, identity).
        let devs: Vec<(&str, DevNum, Alua)> = m
            .paths
            .iter()
            .filter_map(|p| {
                let a = Alua::read(&Path::new("/sys/class/block").join(&p.name))?;
                Some((p.name.as_str(), p.dev, a))
            })
            .collect();
        let cands: Vec<Candidate> = devs
            .iter()
            .map(|(_, dev, a)| Candidate {
                dev: *dev,
                prio: a.prio(),
                tpg: a.group,
            })
            .collect();
        let Some(new) = grouping::regroup(&table, self.cfg.grouping(true), &cands) else {
            return;
        };
        // Paths set aside as marginal stay so: no change if that is all.
        if grouping::set_aside(&new, &table, &m.set_aside) == table {
            return;
        }
        let name = m.name.clone();
        let states: Vec<String> = devs
            .iter()
            .map(|(name, _, a)| format!("{name} {}", a.state.name()))
            .collect();
        let why = format!("the array's port states: {}", states.join(", "));
        let mut lock = match self.lock(&name) {
            Ok(l) => l,
            Err(e) => {
                say!("{name}: {why}; the regrouping waits: {e:#}");
                self.maps[mi].alua_seen = AluaSeen::default();
                return;
            }
        };
        let t = self.t();
        match self.reload_locked(&mut lock, mi, &new) {
            Ok(r) => {
                say!(
                    "{name}: {why}: regrouped (reload stalled I/O {:.1} ms)",
                    r.timing.stall.as_secs_f64() * 1000.0
                );
                let now = self.read_settings(mi);
                if let Some(tu) = self.maps[mi].tuner.as_mut() {
                    tu.array_changed(t, &why, now.ok());
                }
                self.drain_tuner(mi);
            }
            Err(e) => {
                say!("{name}: {why}; cannot regroup: {e:#}");
                self.maps[mi].alua_seen = AluaSeen::default();
            }
        }
    }

    /// Paths that appeared or vanished: a new path of a managed map's LUN
    /// joins it by a reload; a vanished one leaves (never the last one:
    /// the map keeps it, failed, until a path returns).
    /// `full` reads every block device nothing is stacked on (new paths,
    /// new LUNs): the daemon asks for it when the kernel announced a disk,
    /// or now and then; else only vanished paths and ALUA states are
    /// looked at.
    pub(super) fn rescan(&mut self, full: bool) -> Result<()> {
        if self.hands_off() {
            return Ok(());
        }
        let scan = if full {
            let filter = self.cfg.scan_filter().map_err(anyhow::Error::msg)?;
            Some(discovery::scan_free(&filter))
        } else {
            None
        };
        for mi in 0..self.maps.len() {
            // Between full scans nothing came or went: the kernel would
            // have said so (a full scan follows every disk event).
            if !self.maps[mi].managed || scan.is_none() {
                continue;
            }
            let wwid = self.maps[mi].wwid.clone();
            let present: Vec<discovery::PathDevice> = scan
                .as_ref()
                .and_then(|s| s.lun(&wwid))
                .map(|l| l.paths.clone())
                .unwrap_or_default();
            let known: HashSet<DevNum> = self.maps[mi].paths.iter().map(|p| p.dev).collect();
            let new: Vec<(String, DevNum)> = present
                .iter()
                .filter(|p| !known.contains(&p.dev) && p.holders.is_empty())
                .map(|p| (p.name.clone(), p.dev))
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
            let name = self.maps[mi].name.clone();
            let Ok(table) = self.dm.multipath_table(&name) else {
                continue;
            };
            // New paths of a map with fixed groups wait in its last group
            // (they carry I/O only once the others fail); of ours, they
            // join the first.
            let join = if self.maps[mi].fixed_groups {
                usize::MAX
            } else {
                0
            };
            let Some(plan) = hotplug::plan(&table, &gone, &new, join) else {
                continue;
            };
            let mut lock = match self.lock(&name) {
                Ok(l) => l,
                Err(e) => {
                    say!("{name}: paths changed, the map's update waits: {e:#}");
                    continue;
                }
            };
            match self.reload_locked(&mut lock, mi, &plan.table) {
                Ok(r) => {
                    say!(
                        "{name}: paths {}{} (reload stalled I/O {:.1} ms)",
                        plan.added
                            .iter()
                            .map(|(n, _)| format!("+{n} "))
                            .collect::<String>(),
                        plan.dropped
                            .iter()
                            .map(|d| format!("-{d} "))
                            .collect::<String>(),
                        r.timing.stall.as_secs_f64() * 1000.0
                    );
                    // The new table reset the dm queue's limits: the pinned
                    // knobs go back as the operator set them, and the tuner
                    // starts again from what the kernel holds.
                    self.restore_pins(mi);
                    let now = self.read_settings(mi);
                    if let (Some(tu), Ok(now)) = (self.maps[mi].tuner.as_mut(), now) {
                        tu.reset_to(now);
                    }
                }
                Err(e) => say!("{name}: cannot update paths: {e:#}"),
            }
        }
        for mi in 0..self.maps.len() {
            self.follow_array(mi, full);
        }
        if let Some(scan) = scan
            && self.cfg.maps.create
        {
            self.create_missing_from(scan)?;
        }
        Ok(())
    }

    /// Writes the operator's pinned queue knobs again (after a reload,
    /// which resets the dm queue's limits).
    pub(super) fn restore_pins(&mut self, mi: usize) {
        let name = self.maps[mi].name.clone();
        let pins = self.state.operator(&name).pins;
        if pins.is_empty() {
            return;
        }
        let paths = self.maps[mi].tuned_paths();
        let target = self.maps[mi].target(&paths);
        let Ok(now) = actuator::read_settings(&self.dm, &target) else {
            return;
        };
        let mut want = now.clone();
        for (k, v) in &pins {
            if let Err(e) = actuator::set_from_text(&mut want, *k, v) {
                say!("{name}: pinned {} = {v}: {e}", k.name());
            }
        }
        if let Err(e) = actuator::write_queue_knobs(&target, &now, &want) {
            say!("{name}: cannot restore the pinned knobs: {e:#}");
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
    .filter(|s| crate::dm::selector_available(s.name()))
    .collect()
}

/// The maps whose table is not the one it was, sorted by name.
pub(super) fn tables_changed(
    before: &HashMap<String, String>,
    after: &HashMap<String, String>,
) -> Vec<String> {
    let mut v: Vec<String> = after
        .iter()
        .filter(|(n, t)| before.get(*n).is_some_and(|b| b != *t))
        .map(|(n, _)| n.clone())
        .collect();
    v.sort();
    v
}
