//! Maps passing between multipathd and the daemon (the rules are
//! [`crate::policy::handover`]'s): a takeover stops multipathd, leaving
//! its maps as they are, and manages them from then on, without a reload;
//! a handback lets pathpilot's maps go and starts multipathd, which adopts
//! them. Each is journaled in the state file first, so that a daemon
//! killed in the middle finishes or undoes it at its next start.
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Engine, maps::tables_changed, say};
use crate::{
    ctl::protocol::{ErrorCode, Response},
    dm::{self, Message, multipathd},
    policy::handover::{self, Direction, Journal, Refusal, Repair},
};

/// How long multipathd may take to stop, or to start and answer.
const STOP_WAIT: Duration = Duration::from_secs(20);
const START_WAIT: Duration = Duration::from_secs(30);

fn refused(r: Refusal) -> Response {
    let code = match r {
        Refusal::NoMap(_) => ErrorCode::NotFound,
        _ => ErrorCode::Conflict,
    };
    Response::err(code, r.message())
}

impl Engine {
    /// The maps a takeover (multipathd's) or a handback (the daemon's)
    /// moves, or why it refuses.
    fn plan(&self, direction: Direction, map: Option<String>) -> Result<Vec<String>, Refusal> {
        let held: Vec<String> = self
            .maps
            .iter()
            .filter(|m| match direction {
                Direction::Takeover => m.beside,
                Direction::Handback => m.managed,
            })
            .map(|m| m.name.clone())
            .collect();
        let running = multipathd::running().is_some();
        handover::plan(direction, self.hands_off(), running, &held, map.as_deref())
    }

    fn journal(&mut self, direction: Direction, names: &[String]) {
        let maps = self
            .maps
            .iter()
            .filter(|m| names.contains(&m.name))
            .map(|m| (m.name.clone(), m.wwid.clone()))
            .collect();
        self.state.handover = Some(Journal { direction, maps });
        self.save_state();
    }

    fn journal_done(&mut self) {
        self.state.handover = None;
        self.save_state();
    }

    /// `pathpilot takeover`: multipathd's maps become the daemon's.
    pub(super) fn op_takeover(&mut self, map: Option<String>) -> Response {
        let names = match self.plan(Direction::Takeover, map) {
            Ok(n) => n,
            Err(r) => return refused(r),
        };
        let t0 = Instant::now();
        self.journal(Direction::Takeover, &names);
        let how = match multipathd::stop(STOP_WAIT) {
            Ok(how) => how,
            Err(e) => {
                self.journal_done();
                return Response::err(
                    ErrorCode::Unavailable,
                    format!("multipathd did not stop ({e}): its maps stay its own"),
                );
            }
        };
        dm::fault_point("takeover-after-stop");
        let restored = self.adopt_taken(&names);
        self.journal_done();
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        say!(
            "takeover: {} from multipathd in {ms:.0} ms ({how}); no reload: names, groups and \
             path states as they were{}",
            names.join(", "),
            if restored.is_empty() {
                String::new()
            } else {
                format!("; queueing restored on {}", restored.join(", "))
            }
        );
        Response::ok(json!({
            "maps": names,
            "multipathd": how,
            "took_ms": ms,
            "queueing_restored": restored,
        }))
    }

    /// The maps `names` (multipathd stopped) are managed from now on, as
    /// they are, and at every start. Returns the maps whose queueing with
    /// no path had to be turned on again.
    fn adopt_taken(&mut self, names: &[String]) -> Vec<String> {
        self.multipathd = None;
        let mut restored = vec![];
        for mi in 0..self.maps.len() {
            if !names.contains(&self.maps[mi].name) {
                continue;
            }
            let (name, wwid) = (self.maps[mi].name.clone(), self.maps[mi].wwid.clone());
            self.state.maps.insert(name.clone(), wwid);
            let table = self.maps[mi].table.clone();
            let fixed = table.as_ref().is_none_or(|t| self.groups_fixed(t, true));
            let m = &mut self.maps[mi];
            m.beside = false;
            m.managed = true;
            m.unmanaged_reason = None;
            m.expected = table;
            for p in &m.paths {
                self.checkers.add(&p.name);
            }
            if let Some(tu) = m.tuner.as_mut() {
                tu.set_queue_knobs_only(false);
                tu.set_fixed_groups(fixed);
            }
            // multipathd was told to leave queueing as it was; a map that
            // stopped queueing anyway queues again, as its table says.
            if m.wants_queue
                && !m.queue_if_no_path
                && self.dm.message(&name, &Message::QueueIfNoPath).is_ok()
            {
                m.queue_if_no_path = true;
                restored.push(name);
            }
        }
        self.save_state();
        restored
    }

    /// `pathpilot handback`: the daemon's maps become multipathd's.
    pub(super) fn op_handback(&mut self, map: Option<String>) -> Response {
        let names = match self.plan(Direction::Handback, map) {
            Ok(n) => n,
            Err(r) => return refused(r),
        };
        let t0 = Instant::now();
        self.journal(Direction::Handback, &names);
        let before = self.map_tables();
        self.release(&names);
        dm::fault_point("handback-after-release");
        let how = match multipathd::start(START_WAIT) {
            Ok(how) => how,
            Err(e) => {
                // The journal stays: the next start tries again.
                return Response::err(
                    ErrorCode::Unavailable,
                    format!(
                        "multipathd did not start ({e}): {} are let go and observed; start \
                         multipathd by hand",
                        names.join(", ")
                    ),
                );
            }
        };
        self.multipathd = multipathd::running();
        self.journal_done();
        let after = self.map_tables();
        let changed: Vec<String> = tables_changed(&before, &after)
            .into_iter()
            .filter(|n| names.contains(n))
            .collect();
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        say!(
            "handback: {} to multipathd in {ms:.0} ms ({how}); multipathd changed the table of {}",
            names.join(", "),
            if changed.is_empty() {
                "none of them".to_string()
            } else {
                changed.join(", ")
            }
        );
        Response::ok(json!({
            "maps": names,
            "multipathd": how,
            "took_ms": ms,
            "tables_changed": changed,
        }))
    }

    /// Lets the maps `names` go: no checks, no table changes, and not
    /// adopted at the next start; their queue knobs are tuned beside
    /// multipathd.
    fn release(&mut self, names: &[String]) {
        for m in &mut self.maps {
            if !names.contains(&m.name) {
                continue;
            }
            self.state.maps.remove(&m.name);
            m.managed = false;
            m.beside = true;
            m.unmanaged_reason = Some(
                "multipathd owns it (handed back): its queue knobs are tuned beside it".into(),
            );
            m.expected = None;
            for p in &m.paths {
                self.checkers.remove(&p.name);
            }
            if let Some(tu) = m.tuner.as_mut() {
                tu.set_queue_knobs_only(true);
                tu.set_fixed_groups(true);
            }
        }
        self.save_state();
    }

    /// A handover the journal says was cut short: finished or undone, as
    /// [`handover::repair`] decides, before the maps are looked at.
    pub(super) fn repair_handover(&mut self) {
        let Some(j) = self.state.handover.clone() else {
            return;
        };
        let running = self.multipathd.is_some();
        let names: Vec<&String> = j.maps.keys().collect();
        let mut done = true;
        let what = match handover::repair(j.direction, running) {
            Repair::Release => {
                for n in &names {
                    self.state.maps.remove(*n);
                }
                let _ = multipathd::Multipathd::connect()
                    .and_then(|mut c| c.act("restorequeueing daemon"));
                "the maps stay multipathd's".to_string()
            }
            Repair::Adopt => {
                multipathd::keep_stopped();
                for (n, w) in &j.maps {
                    self.state.maps.insert(n.clone(), w.clone());
                }
                "the maps are pathpilot's".to_string()
            }
            Repair::StartMultipathd => {
                for n in &names {
                    self.state.maps.remove(*n);
                }
                match multipathd::start(START_WAIT) {
                    Ok(how) => {
                        self.multipathd = multipathd::running();
                        format!("multipathd started ({how}): the maps are its own")
                    }
                    Err(e) => {
                        done = false;
                        format!("multipathd did not start ({e}): start it by hand")
                    }
                }
            }
        };
        say!(
            "a {} of {} was cut short: {what}",
            j.direction.word(),
            names
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        if done {
            self.journal_done();
        }
    }
}
