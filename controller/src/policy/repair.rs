//! What a daemon start does with a map found suspended or holding an
//! inactive table. Only a reload pathpilot itself began and never finished
//! (its journal in the map's lock file says so) is undone: the live table
//! is the last one known to work, so the inactive one is dropped first and
//! the map resumed with the live one. A map suspended by someone else, or
//! holding a table someone else loaded, is theirs to finish: left as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Repair {
    Nothing,
    /// Drop the inactive table (if `drop_inactive`), then resume (if
    /// `resume`).
    Undo {
        drop_inactive: bool,
        resume: bool,
    },
    /// Leave the map as it is, for this reason.
    Leave(String),
}

pub fn decide(suspended: bool, inactive_table: bool, interrupted_reload: bool) -> Repair {
    match (suspended, inactive_table, interrupted_reload) {
        (false, false, _) => Repair::Nothing,
        (s, i, true) => Repair::Undo {
            drop_inactive: i,
            resume: s,
        },
        (true, _, false) => Repair::Leave(
            "suspended, and not by an unfinished reload of pathpilot's: left suspended \
             (tuning waits until it is resumed)"
                .into(),
        ),
        (false, true, false) => Repair::Leave(
            "holds an inactive table that someone else loaded and has not resumed: left as it is"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_interrupted_reload_of_ours_is_undone() {
        assert_eq!(decide(false, false, false), Repair::Nothing);
        assert_eq!(decide(false, false, true), Repair::Nothing);
        assert_eq!(
            decide(true, true, true),
            Repair::Undo {
                drop_inactive: true,
                resume: true
            }
        );
        assert_eq!(
            decide(false, true, true),
            Repair::Undo {
                drop_inactive: true,
                resume: false
            }
        );
        // An operator's `dmsetup suspend`: theirs.
        assert!(
            matches!(decide(true, false, false), Repair::Leave(w) if w.contains("left suspended"))
        );
        assert!(matches!(decide(false, true, false), Repair::Leave(_)));
    }
}
