//! Requests from the control socket: an operator's changes go through the
//! daemon, the one writer of the maps it manages. Each is applied under
//! the map's lock, read back, logged as the operator's, and kept: a path
//! failed by hand stays failed across reloads and restarts, a knob set by
//! hand is pinned (the tuner leaves it until released).
use std::collections::BTreeSet;

use super::{Engine, say};
use crate::{
    blockdev::DevNum,
    ctl::protocol::{ControlRequest, ErrorCode, Response},
    daemon::actuator,
    dm::Message,
    lock::LockError,
    mpath::MultipathTable,
    sysfs_knobs::{self, KnobError, Setting},
    tuner::{Decision, Knob, Outcome},
};

/// The tuner's knob for a sysfs knob an operator sets.
fn tuner_knob(k: sysfs_knobs::QueueKnob) -> Knob {
    match k {
        sysfs_knobs::QueueKnob::MaxSectorsKb => Knob::MaxSectorsKb,
        sysfs_knobs::QueueKnob::NrRequests => Knob::NrRequests,
        sysfs_knobs::QueueKnob::Scheduler => Knob::Scheduler,
        sysfs_knobs::QueueKnob::QueueDepth => Knob::QueueDepth,
    }
}

fn lock_err(e: anyhow::Error) -> Response {
    match e.downcast_ref::<LockError>() {
        Some(l @ LockError::Busy { .. }) => Response::err(ErrorCode::Busy, l.to_string()),
        _ => Response::err(ErrorCode::Kernel, format!("{e:#}")),
    }
}

impl Engine {
    pub(super) fn handle(&mut self, r: ControlRequest) -> Response {
        let t = self.t();
        match r {
            ControlRequest::Status | ControlRequest::Log { .. } => {
                Response::err(ErrorCode::BadRequest, "reads are served by the socket")
            }
            ControlRequest::Pause { map } => self.pause(&map, true, t),
            ControlRequest::Resume { map } => self.pause(&map, false, t),
            ControlRequest::Fail { path } => self.path_message(&path, true),
            ControlRequest::Reinstate { path } => self.path_message(&path, false),
            ControlRequest::Unmark { path } => self.op_unmark(&path),
            ControlRequest::Mode { mode, map } => {
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
            ControlRequest::Reload { map, expect, table } => self.op_reload(&map, &expect, &table),
            ControlRequest::Set { target, settings } => self.op_set(&target, &settings),
            ControlRequest::Release { map, knobs } => self.op_release(&map, &knobs),
            ControlRequest::Takeover { map } => self.op_takeover(map),
            ControlRequest::Handback { map } => self.op_handback(map),
        }
    }

    /// The index of a managed map, or the response that says why not.
    fn managed_map(&self, map: &str) -> Result<usize, Response> {
        let Some(mi) = self.maps.iter().position(|m| m.name == map) else {
            return Err(Response::err(
                ErrorCode::NotFound,
                format!("no map '{map}'"),
            ));
        };
        let m = &self.maps[mi];
        if !m.managed || m.tuner.is_none() {
            return Err(Response::err(
                ErrorCode::NotManaged,
                format!(
                    "{map} is not managed by the daemon: {}",
                    m.unmanaged_reason.clone().unwrap_or_default()
                ),
            ));
        }
        Ok(mi)
    }

    fn persist_operator(&mut self, mi: usize) {
        let m = &self.maps[mi];
        let mut o = self.state.operator(&m.name);
        for p in &m.paths {
            o.set_failed(p.dev, p.admin_failed);
        }
        let pins = m.tuner.as_ref().map_or_else(Default::default, |tu| {
            tu.pinned()
                .iter()
                .map(|k| (*k, tu.settings().show(*k)))
                .collect()
        });
        o.set_pins(pins, crate::clock::unix_now());
        let name = m.name.clone();
        self.state.set_operator(&name, o);
        self.save_state();
    }

    fn log_operator(&mut self, map: &str, reason: String) {
        let d = Decision::note(self.t(), map, reason, Outcome::Operator);
        self.log.log(d);
    }

    fn pause(&mut self, map: &str, paused: bool, t: f64) -> Response {
        let mi = match self.managed_map(map) {
            Ok(mi) => mi,
            Err(r) if r.code == Some(ErrorCode::NotManaged) => {
                return Response::err(ErrorCode::NotFound, r.error.unwrap_or_default());
            }
            Err(r) => return r,
        };
        // A resume covers every change made before it: one the daemon has
        // not read yet (it looks once a window) is taken in first, not
        // left to stop tuning again right after the resume.
        if !paused {
            self.check_knobs(mi, t);
        }
        if let Some(tu) = &mut self.maps[mi].tuner {
            tu.set_user_paused(paused, t);
        }
        self.drain_tuner(mi);
        Response::ok(serde_json::json!({ "map": map, "paused": paused }))
    }

    /// A path of a managed map, for an operator's request on it: its map
    /// and path index, the map's name, its own name and device.
    fn managed_path(&self, path: &str) -> Result<(usize, usize, String, String, DevNum), Response> {
        let Some((mi, pi)) = self.find_path(path) else {
            return Err(Response::err(
                ErrorCode::NotFound,
                format!("'{path}' is not a path of any map"),
            ));
        };
        let map = self.maps[mi].name.clone();
        self.managed_map(&map)?;
        let p = &self.maps[mi].paths[pi];
        Ok((mi, pi, map, p.name.clone(), p.dev))
    }

    /// Fails or reinstates a path by message, for the operator: a failed
    /// path stays failed (across reloads, restarts, the checker's verdicts)
    /// until reinstated the same way.
    fn path_message(&mut self, path: &str, fail: bool) -> Response {
        let (mi, pi, map, name, dev) = match self.managed_path(path) {
            Ok(x) => x,
            Err(r) => return r,
        };
        let _lock = match self.lock(&map) {
            Ok(l) => l,
            Err(e) => return lock_err(e),
        };
        let msg = if fail {
            Message::FailPath(dev)
        } else {
            Message::ReinstatePath(dev)
        };
        match self.dm.message(&map, &msg) {
            Ok(()) => {
                self.maps[mi].paths[pi].admin_failed = fail;
                self.persist_operator(mi);
                self.log_operator(
                    &map,
                    format!(
                        "path {name} ({dev}) {} by the operator{}",
                        if fail { "failed" } else { "reinstated" },
                        if fail {
                            ": it stays failed until reinstated by hand"
                        } else {
                            ""
                        }
                    ),
                );
                self.refresh_status(true);
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

    /// Ends a path's marginal state for the operator: it serves again at
    /// once, judged afresh.
    fn op_unmark(&mut self, path: &str) -> Response {
        let (mi, _, map, name, dev) = match self.managed_path(path) {
            Ok(x) => x,
            Err(r) => return r,
        };
        let was = self.maps[mi].health.state(dev).word();
        match self.unmark(mi, dev) {
            Ok(true) => {
                self.log_operator(
                    &map,
                    format!("path {name} ({dev}) unmarked by the operator (was {was})"),
                );
                Response::ok(serde_json::json!({
                    "map": map, "path": name, "was": was, "health": "healthy",
                }))
            }
            Ok(false) => Response::ok(serde_json::json!({
                "map": map, "path": name, "was": was, "health": "healthy",
            })),
            Err(e) => Response::err(ErrorCode::Kernel, format!("{map}: {e:#}")),
        }
    }

    /// `pathpilot reload` through the daemon.
    fn op_reload(&mut self, map: &str, expect: &str, table: &str) -> Response {
        let mi = match self.managed_map(map) {
            Ok(mi) => mi,
            Err(r) => return r,
        };
        let parse = |what: &str, s: &str| -> Result<MultipathTable, Response> {
            MultipathTable::parse_line(s)
                .map_err(|e| Response::err(ErrorCode::BadRequest, format!("{what}: {e}")))
        };
        let (expect, new) = match (parse("expect", expect), parse("table", table)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(r), _) | (_, Err(r)) => return r,
        };
        let mut lock = match self.lock(map) {
            Ok(l) => l,
            Err(e) => return lock_err(e),
        };
        let live = match self.dm.multipath_table(map) {
            Ok(t) => t,
            Err(e) => return Response::err(ErrorCode::Kernel, e.to_string()),
        };
        if live != expect {
            return Response::err(
                ErrorCode::Conflict,
                format!("{map} changed since its table was read: plan the change again"),
            );
        }
        let t = self.t();
        let before = match self.read_settings(mi) {
            Ok(s) => s,
            Err(e) => return Response::err(ErrorCode::Kernel, format!("{e:#}")),
        };
        let r = match self.reload_locked(&mut lock, mi, &new) {
            Ok(r) => r,
            Err(e) => return Response::err(ErrorCode::Kernel, format!("{e:#}")),
        };
        drop(lock);
        // The new table reset the dm queue's limits: the queue knobs go
        // back to what they were (the operator changed the table only).
        let paths = self.maps[mi].tuned_paths();
        let target = self.maps[mi].target(&paths);
        if let Ok(now) = actuator::read_settings(&self.dm, &target)
            && let Err(e) = actuator::write_queue_knobs(&target, &now, &before)
        {
            say!("{map}: after the operator's reload: {e:#}");
        }
        let after = match self.read_settings(mi) {
            Ok(s) => s,
            Err(e) => return Response::err(ErrorCode::Kernel, format!("{e:#}")),
        };
        let changed: Vec<Knob> = before
            .diff(&after)
            .into_iter()
            .filter(|k| k.needs_reload())
            .collect();
        if let Some(tu) = self.maps[mi].tuner.as_mut() {
            tu.operator_set(t, &changed, &before, after, "pathpilot reload");
        }
        self.drain_tuner(mi);
        self.persist_operator(mi);
        Response::ok(serde_json::json!({
            "map": map,
            "applied": r.table.render_line(),
            "timing": r.timing,
            "pinned": changed.iter().map(|k| k.name()).collect::<Vec<_>>(),
            "kept_failed": r.synced.refailed.iter().map(|(d, _)| d.to_string()).collect::<Vec<_>>(),
        }))
    }

    /// `pathpilot set` through the daemon.
    fn op_set(&mut self, target: &str, settings: &[String]) -> Response {
        // A map by name or dm-N, or one of a map's paths.
        let by_map = self
            .maps
            .iter()
            .position(|m| m.name == target || m.kernel_name == target);
        let (mi, path) = match (by_map, self.find_path(target)) {
            (Some(mi), _) => (mi, None),
            (None, Some((mi, pi))) => (mi, Some(self.maps[mi].paths[pi].name.clone())),
            (None, None) => {
                return Response::err(
                    ErrorCode::NotManaged,
                    format!("{target} is not a map or path the daemon knows"),
                );
            }
        };
        let map = self.maps[mi].name.clone();
        if let Err(r) = self.managed_map(&map) {
            return r;
        }
        let mut parsed: Vec<Setting> = vec![];
        for s in settings {
            match s.parse::<Setting>() {
                Ok(v) => parsed.push(v),
                Err(e) => return Response::err(ErrorCode::BadRequest, e),
            }
        }
        if let Some(p) = &path
            && let Some(s) = parsed.iter().find(|s| !s.knob.per_path())
        {
            return Response::err(
                ErrorCode::BadRequest,
                format!(
                    "{} is a knob of the map's dm device, and {p} is a path; name the map instead",
                    s.knob
                ),
            );
        }
        let _lock = match self.lock(&map) {
            Ok(l) => l,
            Err(e) => return lock_err(e),
        };
        let t = self.t();
        let kernel_name = self.maps[mi].kernel_name.clone();
        let before = match self.read_settings(mi) {
            Ok(s) => s,
            Err(e) => return Response::err(ErrorCode::Kernel, format!("{e:#}")),
        };
        let mut results = vec![];
        for s in &parsed {
            let devices: Vec<String> = match (&path, s.knob.per_path()) {
                (Some(p), _) => vec![p.clone()],
                (None, true) => self.maps[mi].paths.iter().map(|p| p.name.clone()).collect(),
                (None, false) => vec![kernel_name.clone()],
            };
            for d in devices {
                match sysfs_knobs::write(&d, s.knob, &s.value) {
                    Ok(r) => results.push(r),
                    Err(e) => {
                        let code = match e {
                            KnobError::UnknownScheduler { .. } => ErrorCode::BadRequest,
                            KnobError::Missing { .. } => ErrorCode::NotFound,
                            _ => ErrorCode::Kernel,
                        };
                        return Response::err(code, e.to_string());
                    }
                }
            }
        }
        let after = match self.read_settings(mi) {
            Ok(s) => s,
            Err(e) => return Response::err(ErrorCode::Kernel, format!("{e:#}")),
        };
        let knobs: Vec<Knob> = parsed
            .iter()
            .map(|s| tuner_knob(s.knob))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if let Some(tu) = self.maps[mi].tuner.as_mut() {
            tu.operator_set(t, &knobs, &before, after, "pathpilot set");
        }
        self.drain_tuner(mi);
        self.persist_operator(mi);
        Response::ok(serde_json::json!({
            "map": map,
            "results": results,
            "pinned": knobs.iter().map(|k| k.name()).collect::<Vec<_>>(),
        }))
    }

    /// Hands pinned knobs back to the tuner.
    fn op_release(&mut self, map: &str, knobs: &[Knob]) -> Response {
        let mi = match self.managed_map(map) {
            Ok(mi) => mi,
            Err(r) => return r,
        };
        let t = self.t();
        let released = self.maps[mi]
            .tuner
            .as_mut()
            .map(|tu| tu.release(t, knobs))
            .unwrap_or_default();
        self.drain_tuner(mi);
        self.persist_operator(mi);
        let still: Vec<&str> = self.maps[mi]
            .tuner
            .as_ref()
            .map(|tu| tu.pinned().iter().map(|k| k.name()).collect())
            .unwrap_or_default();
        Response::ok(serde_json::json!({
            "map": map,
            "released": released.iter().map(|k| k.name()).collect::<Vec<_>>(),
            "pinned": still,
        }))
    }
}
