//! Changes pathpilot did not make. The daemon remembers the table it left
//! on each map (read back after each of its own changes) and the knobs as
//! it last read them; a live table or knob that differs was changed by
//! someone else (`dmsetup`, multipathd, an admin's echo into sysfs). The
//! daemon then stops tuning that map and says so, rather than fight.
use std::collections::BTreeSet;

use crate::{
    mpath::MultipathTable,
    tuner::{Knob, Settings},
};

/// What differs between the table pathpilot left (`expected`) and the live
/// one, in words; `None` when they are the same.
pub fn table_change(expected: &MultipathTable, live: &MultipathTable) -> Option<String> {
    // The kernel reports the group it uses (or will switch to) as the
    // initial one: a path group failing over changes it, nobody's table.
    let same_but_group = MultipathTable {
        initial_pg: live.initial_pg,
        ..expected.clone()
    };
    if same_but_group == *live {
        return None;
    }
    let mut what = vec![];
    let sel = |t: &MultipathTable| {
        t.groups
            .iter()
            .map(|g| g.selector.name())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join(",")
    };
    if sel(expected) != sel(live) {
        what.push(format!("selector {} -> {}", sel(expected), sel(live)));
    }
    let devs = |t: &MultipathTable| t.paths().map(|p| p.dev).collect::<BTreeSet<_>>();
    let (a, b) = (devs(expected), devs(live));
    let moved: Vec<String> = b
        .difference(&a)
        .map(|d| format!("+{d}"))
        .chain(a.difference(&b).map(|d| format!("-{d}")))
        .collect();
    if !moved.is_empty() {
        what.push(format!("paths {}", moved.join(" ")));
    }
    if expected.groups.len() != live.groups.len() {
        what.push(format!(
            "{} -> {} path groups",
            expected.groups.len(),
            live.groups.len()
        ));
    }
    if expected.features != live.features {
        what.push("features".into());
    }
    if expected.hw_handler != live.hw_handler {
        what.push("hardware handler".into());
    }
    if what.is_empty() {
        // Same paths and selectors: their arguments or their order moved;
        // the tables say which.
        what.push(format!("path arguments or order: '{expected}' -> '{live}'"));
    }
    Some(what.join(", "))
}

/// The knobs whose live value is not what the daemon last read back.
pub fn knob_change(expected: &Settings, live: &Settings) -> Vec<Knob> {
    expected.diff(live)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuner::settings::example;

    const T: &str =
        "0 2097152 multipath 1 queue_if_no_path 0 1 1 service-time 0 2 2 8:0 1 1 8:16 1 1";

    #[test]
    fn a_table_loaded_behind_the_daemon_is_named() {
        let a: MultipathTable = T.parse().unwrap();
        assert_eq!(table_change(&a, &a.clone()), None);
        let b: MultipathTable = "0 2097152 multipath 0 0 1 1 round-robin 0 2 1 8:0 1 8:32 1"
            .parse()
            .unwrap();
        assert_eq!(
            table_change(&a, &b).unwrap(),
            "selector service-time -> round-robin, paths +8:32 -8:16, features"
        );
        let w: MultipathTable = T.replace("8:16 1 1", "8:16 1 50").parse().unwrap();
        assert!(
            table_change(&a, &w)
                .unwrap()
                .starts_with("path arguments or order: '0 "),
            "{:?}",
            table_change(&a, &w)
        );
    }

    #[test]
    fn a_path_leaving_a_failover_map_is_named_by_path_and_groups() {
        let four: MultipathTable = "0 2097152 multipath 0 0 4 1 service-time 0 1 2 8:0 1 1 \
                                    service-time 0 1 2 8:16 1 1 service-time 0 1 2 8:32 1 1 \
                                    service-time 0 1 2 8:48 1 1"
            .parse()
            .unwrap();
        let three: MultipathTable = "0 2097152 multipath 0 0 3 1 service-time 0 1 2 8:16 1 1 \
                                     service-time 0 1 2 8:32 1 1 service-time 0 1 2 8:48 1 1"
            .parse()
            .unwrap();
        assert_eq!(
            table_change(&four, &three).unwrap(),
            "paths -8:0, 4 -> 3 path groups"
        );
    }

    #[test]
    fn a_group_failing_over_is_nobodys_change() {
        let two = "0 2097152 multipath 1 queue_if_no_path 1 alua 2 1 service-time 0 1 2 8:0 1 1 \
                   service-time 0 1 2 8:16 1 1";
        let a: MultipathTable = two.parse().unwrap();
        let b: MultipathTable = two.replace(" 2 1 service", " 2 2 service").parse().unwrap();
        assert_eq!(b.initial_pg, 2);
        assert_eq!(table_change(&a, &b), None);
    }

    #[test]
    fn a_knob_set_behind_the_daemon_is_named() {
        let a = example(4);
        assert!(knob_change(&a, &a).is_empty());
        let mut b = a.clone();
        b.queue_depth = 4;
        assert_eq!(knob_change(&a, &b), vec![Knob::QueueDepth]);
    }
}
