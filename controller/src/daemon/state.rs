//! What the daemon keeps across its restarts, in `/run/pathpilot/maps.json`:
//! the maps it made (adopted as they are, without a reload, at the next
//! start), and per map what the operator decided: the paths failed by hand
//! and the knobs pinned. /run is emptied at boot, as the maps are.
//!
//! A file that cannot be read or parsed stops the start: silently starting
//! empty would leave the daemon's own maps unmanaged (no checker, no
//! failover handling) and forget every path an operator failed.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use crate::{blockdev::DevNum, tuner::Knob};

pub const STATE_FILE: &str = "/run/pathpilot/maps.json";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedState {
    /// map name -> WWID: the maps this daemon made.
    #[serde(default)]
    pub maps: BTreeMap<String, String>,
    /// Operator decisions per map name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub operator: BTreeMap<String, OperatorState>,
    /// WWID -> the multipath.conf entry applied through multipathd
    /// (`beside.apply`), as written under its conf.d.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub beside_entries: BTreeMap<String, String>,
    /// A takeover or handback under way: what to finish or undo if the
    /// daemon dies before it is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handover: Option<crate::policy::handover::Journal>,
}

/// What an operator decided for one map; it lasts until the operator
/// undoes it (`path reinstate`, a release).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorState {
    /// Paths failed by hand, as `maj:min`.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub failed_paths: BTreeSet<String>,
    /// Knobs the operator set, with the value set: the tuner leaves them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pins: BTreeMap<Knob, String>,
    /// When the knobs became pinned (Unix seconds): since then the tuner
    /// has left them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_unix: Option<f64>,
}

impl OperatorState {
    pub fn failed(&self) -> BTreeSet<DevNum> {
        self.failed_paths
            .iter()
            .filter_map(|s| s.parse().ok())
            .collect()
    }

    pub fn set_failed(&mut self, dev: DevNum, failed: bool) {
        if failed {
            self.failed_paths.insert(dev.to_string());
        } else {
            self.failed_paths.remove(&dev.to_string());
        }
    }

    pub fn is_empty(&self) -> bool {
        self.failed_paths.is_empty() && self.pins.is_empty()
    }

    /// Sets the pinned knobs (`pins`) at Unix time `now`: the time they
    /// became pinned stays while any is, and goes with the last.
    pub fn set_pins(&mut self, pins: BTreeMap<Knob, String>, now: f64) {
        self.pinned_unix = match (pins.is_empty(), self.pinned_unix) {
            (true, _) => None,
            (false, Some(t)) => Some(t),
            (false, None) => Some(now),
        };
        self.pins = pins;
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(
        "state file {path} cannot be read ({err}); it lists the maps pathpilot made and the \
         paths an operator failed. Fix its permissions, or start with --reset-state to move it \
         aside (pathpilot's maps are then only observed until adopted)"
    )]
    Unreadable { path: String, err: std::io::Error },
    #[error(
        "state file {path} is corrupt ({err}); it lists the maps pathpilot made and the paths \
         an operator failed. Repair it, or start with --reset-state to move it aside \
         (pathpilot's maps are then only observed until adopted)"
    )]
    Corrupt { path: String, err: String },
    #[error("cannot write state file {path}: {err}")]
    Write { path: String, err: std::io::Error },
}

impl SavedState {
    /// Reads the state file; an absent file is an empty state.
    pub fn load(path: &Path) -> Result<SavedState, StateError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(SavedState::default()),
            Err(err) => {
                return Err(StateError::Unreadable {
                    path: path.display().to_string(),
                    err,
                });
            }
        };
        serde_json::from_str(&text).map_err(|e| StateError::Corrupt {
            path: path.display().to_string(),
            err: e.to_string(),
        })
    }

    /// Writes the state atomically (a new file renamed over the old one).
    pub fn save(&self, path: &Path) -> Result<(), StateError> {
        let werr = |err| StateError::Write {
            path: path.display().to_string(),
            err,
        };
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(werr)?;
        }
        let tmp = path.with_extension("tmp");
        let text =
            serde_json::to_string_pretty(self).map_err(|e| werr(std::io::Error::other(e)))?;
        std::fs::write(&tmp, text).map_err(werr)?;
        std::fs::rename(&tmp, path).map_err(werr)
    }

    /// Moves a bad state file aside (`--reset-state`); returns where to.
    pub fn move_aside(path: &Path, unix: u64) -> std::io::Result<Option<PathBuf>> {
        if !path.exists() {
            return Ok(None);
        }
        let to = path.with_extension(format!("json.bad-{unix}"));
        std::fs::rename(path, &to)?;
        Ok(Some(to))
    }

    pub fn operator(&self, map: &str) -> OperatorState {
        self.operator.get(map).cloned().unwrap_or_default()
    }

    /// Sets one map's operator state (an empty one is dropped).
    pub fn set_operator(&mut self, map: &str, o: OperatorState) {
        if o.is_empty() {
            self.operator.remove(map);
        } else {
            self.operator.insert(map.into(), o);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pathpilot-state-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d.join("maps.json")
    }

    #[test]
    fn pins_keep_the_time_they_were_first_pinned() {
        let mut o = OperatorState::default();
        let pins = |ks: &[Knob]| ks.iter().map(|k| (*k, "x".to_string())).collect();
        o.set_pins(pins(&[Knob::Selector]), 100.0);
        assert_eq!(o.pinned_unix, Some(100.0));
        // Another knob pinned later: pinned since the first.
        o.set_pins(pins(&[Knob::Selector, Knob::NrRequests]), 200.0);
        assert_eq!(o.pinned_unix, Some(100.0));
        o.set_pins(pins(&[Knob::NrRequests]), 300.0);
        assert_eq!(o.pinned_unix, Some(100.0));
        // All released: not pinned; pinned again, from then.
        o.set_pins(pins(&[]), 400.0);
        assert_eq!(o.pinned_unix, None);
        o.set_pins(pins(&[Knob::NrRequests]), 500.0);
        assert_eq!(o.pinned_unix, Some(500.0));
    }

    #[test]
    fn round_trip_and_the_old_format() {
        let p = scratch("rt");
        assert_eq!(SavedState::load(&p).unwrap(), SavedState::default());
        // The format of earlier versions: maps only.
        std::fs::write(&p, r#"{"maps":{"mpatha":"35000c500deadbeef"}}"#).unwrap();
        let mut s = SavedState::load(&p).unwrap();
        assert_eq!(s.maps["mpatha"], "35000c500deadbeef");
        let mut o = OperatorState::default();
        o.set_failed(DevNum::new(8, 16), true);
        o.pins.insert(Knob::Selector, "round-robin".into());
        o.pinned_unix = Some(1_700_000_000.0);
        s.set_operator("mpatha", o.clone());
        s.save(&p).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.contains("\"8:16\"") && text.contains("\"selector\""),
            "{text}"
        );
        let back = SavedState::load(&p).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.operator("mpatha"), o);
        assert_eq!(
            o.failed().into_iter().collect::<Vec<_>>(),
            vec![DevNum::new(8, 16)]
        );
        assert_eq!(back.operator("mpathb"), OperatorState::default());
        s.set_operator("mpatha", OperatorState::default());
        assert!(s.operator.is_empty());
    }

    #[test]
    fn a_corrupt_file_stops_with_the_fix_named() {
        let p = scratch("bad");
        std::fs::write(&p, "{\"maps\": {\"mpatha\": ").unwrap();
        let e = SavedState::load(&p).unwrap_err().to_string();
        assert!(
            e.contains(&p.display().to_string())
                && e.contains("corrupt")
                && e.contains("--reset-state"),
            "{e}"
        );
        // Unknown content is not half-understood either.
        std::fs::write(&p, r#"{"mapz":{}}"#).unwrap();
        assert!(SavedState::load(&p).is_err());
        let to = SavedState::move_aside(&p, 7).unwrap().unwrap();
        assert!(
            to.display().to_string().ends_with("maps.json.bad-7"),
            "{}",
            to.display()
        );
        assert!(!p.exists());
        assert_eq!(SavedState::load(&p).unwrap(), SavedState::default());
    }

    #[test]
    fn an_unreadable_file_is_not_an_empty_one() {
        let p = scratch("dir");
        std::fs::create_dir_all(&p).unwrap(); // a directory where the file should be
        let e = SavedState::load(&p).unwrap_err().to_string();
        assert!(e.contains("cannot be read"), "{e}");
    }
}
