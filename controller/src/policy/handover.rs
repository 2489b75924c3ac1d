//! Maps passing between multipathd and pathpilot: `pathpilot takeover`
//! (multipathd stops and leaves its maps in place, pathpilot manages them
//! as they are) and `pathpilot handback` (pathpilot lets them go and
//! multipathd starts and adopts them). multipathd owns every multipath
//! map of a host it runs on, so the maps pass all together. Both are
//! journaled: a daemon killed in the middle finishes, or undoes, at its
//! next start ([`repair`]).
use serde::{Deserialize, Serialize};

/// Which way the maps pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// From multipathd to pathpilot.
    Takeover,
    /// From pathpilot to multipathd.
    Handback,
}

impl Direction {
    pub fn word(self) -> &'static str {
        match self {
            Direction::Takeover => "takeover",
            Direction::Handback => "handback",
        }
    }
}

/// Why a handover cannot start: nothing has changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The daemon's mode changes nothing.
    Observe,
    /// The other side is not there (or already is).
    NotNow(String),
    /// No such map on the side it would leave.
    NoMap(String),
    /// One map asked for while the side holds others: they pass together.
    AllOrNothing(String),
}

impl Refusal {
    pub fn message(&self) -> String {
        match self {
            Refusal::Observe => {
                "observe mode changes nothing: set the mode to tune or advise first".into()
            }
            Refusal::NotNow(why) | Refusal::NoMap(why) | Refusal::AllOrNothing(why) => why.clone(),
        }
    }
}

/// The maps a handover moves, or why it cannot start. `held` are the maps
/// on the side they would leave (multipathd's for a takeover, pathpilot's
/// for a handback); `map` is the one asked for (all when `None`);
/// `multipathd` whether it runs; `observe` whether the daemon only
/// observes.
pub fn plan(
    dir: Direction,
    observe: bool,
    multipathd: bool,
    held: &[String],
    map: Option<&str>,
) -> Result<Vec<String>, Refusal> {
    if observe {
        return Err(Refusal::Observe);
    }
    match (dir, multipathd) {
        (Direction::Takeover, false) => {
            return Err(Refusal::NotNow(
                "multipathd is not running: there is nothing to take over (maps of other \
                 tools are managed with maps.adopt)"
                    .into(),
            ));
        }
        (Direction::Handback, true) => {
            return Err(Refusal::NotNow(
                "multipathd is running already: pathpilot's maps pass to it only when it \
                 starts (stop it first, or leave them as they are)"
                    .into(),
            ));
        }
        _ => {}
    }
    let side = match dir {
        Direction::Takeover => "multipathd",
        Direction::Handback => "pathpilot",
    };
    if held.is_empty() {
        return Err(Refusal::NoMap(format!("{side} holds no map to pass")));
    }
    match map {
        None => Ok(held.to_vec()),
        Some(m) if !held.iter().any(|h| h == m) => Err(Refusal::NoMap(format!(
            "no map '{m}' of {side}'s (it holds {})",
            held.join(", ")
        ))),
        Some(_) if held.len() > 1 => Err(Refusal::AllOrNothing(format!(
            "multipathd owns every multipath map of a host it runs on, so the maps pass \
             together: {} (use --all)",
            held.join(", ")
        ))),
        Some(m) => Ok(vec![m.to_string()]),
    }
}

/// What a daemon that starts with a handover in its journal does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repair {
    /// The maps are pathpilot's: manage them (multipathd stopped).
    Adopt,
    /// The maps are multipathd's: leave them to it (it runs).
    Release,
    /// The maps were let go but multipathd does not run: start it.
    StartMultipathd,
}

/// The repair of an interrupted handover, from which way it went and
/// whether multipathd runs now. A takeover cut short before multipathd
/// stopped is undone (the maps stay its own); after, it is finished. A
/// handback is always finished: the maps were let go.
pub fn repair(dir: Direction, multipathd: bool) -> Repair {
    match (dir, multipathd) {
        (Direction::Takeover, true) => Repair::Release,
        (Direction::Takeover, false) => Repair::Adopt,
        (Direction::Handback, true) => Repair::Release,
        (Direction::Handback, false) => Repair::StartMultipathd,
    }
}

/// A handover in progress, kept in the daemon's state file until done.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    pub direction: Direction,
    /// The maps passing: name -> WWID.
    pub maps: std::collections::BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn maps(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_takeover_needs_multipathd_and_takes_its_maps_together() {
        use Direction::*;
        let two = maps(&["mpatha", "mpathb"]);
        assert_eq!(plan(Takeover, false, true, &two, None), Ok(two.clone()));
        assert_eq!(
            plan(Takeover, false, true, &two[..1], Some("mpatha")),
            Ok(maps(&["mpatha"]))
        );
        assert!(matches!(
            plan(Takeover, false, true, &two, Some("mpatha")),
            Err(Refusal::AllOrNothing(m)) if m.contains("mpatha, mpathb") && m.contains("--all")
        ));
        assert!(matches!(
            plan(Takeover, false, true, &two, Some("mpathz")),
            Err(Refusal::NoMap(m)) if m.contains("mpathz")
        ));
        assert!(matches!(
            plan(Takeover, false, false, &two, None),
            Err(Refusal::NotNow(m)) if m.contains("not running")
        ));
        assert_eq!(
            plan(Takeover, true, true, &two, None),
            Err(Refusal::Observe)
        );
        assert!(matches!(
            plan(Takeover, false, true, &[], None),
            Err(Refusal::NoMap(_))
        ));
    }

    #[test]
    fn a_handback_needs_multipathd_stopped() {
        use Direction::*;
        let one = maps(&["mpatha"]);
        assert_eq!(plan(Handback, false, false, &one, None), Ok(one.clone()));
        assert!(matches!(
            plan(Handback, false, true, &one, None),
            Err(Refusal::NotNow(m)) if m.contains("running already")
        ));
    }

    #[test]
    fn an_interrupted_handover_is_finished_or_undone_by_who_runs() {
        use Direction::*;
        assert_eq!(repair(Takeover, true), Repair::Release);
        assert_eq!(repair(Takeover, false), Repair::Adopt);
        assert_eq!(repair(Handback, true), Repair::Release);
        assert_eq!(repair(Handback, false), Repair::StartMultipathd);
    }
}
