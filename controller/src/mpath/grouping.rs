//! Path grouping policies, with multipath.conf's names and meanings: which
//! paths share a priority group, and the groups' order (the first is used
//! while it has a usable path). Pure: priorities and target port groups
//! come from discovery.
use serde::{Deserialize, Serialize};

use super::{HwHandler, ModelError, MultipathTable, Path, PriorityGroup, Selector};
use crate::blockdev::DevNum;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grouping {
    /// One path per group, the highest priority first.
    Failover,
    /// Every path in one group.
    Multibus,
    /// One group per priority, the highest first (ALUA arrays: the
    /// optimized ports, then the non-optimized, ...).
    GroupByPrio,
    /// One group per target port group, ordered by priority.
    GroupByTpg,
}

impl std::str::FromStr for Grouping {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "failover" => Grouping::Failover,
            "multibus" => Grouping::Multibus,
            "group_by_prio" => Grouping::GroupByPrio,
            "group_by_tpg" => Grouping::GroupByTpg,
            _ => {
                return Err(format!(
                    "unknown path_grouping_policy '{s}' (failover, multibus, group_by_prio, group_by_tpg)"
                ));
            }
        })
    }
}

impl Grouping {
    pub fn name(self) -> &'static str {
        match self {
            Grouping::Failover => "failover",
            Grouping::Multibus => "multibus",
            Grouping::GroupByPrio => "group_by_prio",
            Grouping::GroupByTpg => "group_by_tpg",
        }
    }
}

/// A path as grouping sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub dev: DevNum,
    pub prio: u32,
    /// Target port group, where the array reports one.
    pub tpg: Option<u16>,
}

/// The groups of `paths` under `policy`, in order, each with its priority
/// (its best path's); paths keep their given order inside a group, and
/// groups of equal priority theirs.
pub fn group(policy: Grouping, paths: &[Candidate]) -> Vec<(u32, Vec<DevNum>)> {
    let mut groups: Vec<(u32, Vec<DevNum>)> = vec![];
    let mut keys: Vec<Option<u32>> = vec![];
    for (i, p) in paths.iter().enumerate() {
        // Which group a path joins: by policy, a key shared by its peers.
        let key = match policy {
            Grouping::Multibus => Some(0),
            Grouping::Failover => Some(i as u32 + 1),
            Grouping::GroupByPrio => Some(p.prio),
            Grouping::GroupByTpg => p.tpg.map(u32::from).or(Some(0x1_0000 + i as u32)),
        };
        match keys.iter().position(|k| *k == key) {
            Some(g) => {
                groups[g].0 = groups[g].0.max(p.prio);
                groups[g].1.push(p.dev);
            }
            None => {
                keys.push(key);
                groups.push((p.prio, vec![p.dev]));
            }
        }
    }
    // Stable: equal priorities keep their order.
    groups.sort_by_key(|g| std::cmp::Reverse(g.0));
    groups
}

/// A table over `groups` (in priority order) with `selector` in each,
/// the hardware handler `hw` (`alua` for an ALUA array).
pub fn table(
    length: u64,
    groups: &[(u32, Vec<DevNum>)],
    selector: Selector,
    hw: Option<&str>,
) -> Result<MultipathTable, ModelError> {
    let all: Vec<DevNum> = groups.iter().flat_map(|(_, g)| g.iter().copied()).collect();
    let mut t = MultipathTable::new(length, &all, selector.clone())?;
    let args = t.groups[0].paths[0].args.clone();
    t.groups = groups
        .iter()
        .filter(|(_, g)| !g.is_empty())
        .map(|(_, g)| PriorityGroup {
            selector: selector.clone(),
            selector_args: vec![],
            paths: g
                .iter()
                .map(|d| Path {
                    dev: *d,
                    args: args.clone(),
                })
                .collect(),
        })
        .collect();
    t.hw_handler = hw.map(|name| HwHandler {
        name: name.into(),
        args: vec![],
    });
    Ok(t)
}

/// `table` regrouped under `policy` for new priorities, keeping every
/// path's selector and arguments (weights stay with their path): `None`
/// when the grouping is already that (same groups, same order).
pub fn regroup(
    table: &MultipathTable,
    policy: Grouping,
    paths: &[Candidate],
) -> Option<MultipathTable> {
    let in_table: Vec<Candidate> = table
        .paths()
        .filter_map(|p| paths.iter().find(|c| c.dev == p.dev).copied())
        .collect();
    let want = group(policy, &in_table);
    let have: Vec<Vec<DevNum>> = table
        .groups
        .iter()
        .map(|g| g.paths.iter().map(|p| p.dev).collect())
        .collect();
    let want_devs: Vec<Vec<DevNum>> = want.iter().map(|(_, g)| g.clone()).collect();
    // Paths the table has that discovery did not report stay where they
    // are; compare only what both know.
    if in_table.len() != table.paths().count() || want_devs == have {
        return None;
    }
    let mut t = table.clone();
    let selector = table.groups[0].selector.clone();
    t.groups = want_devs
        .iter()
        .map(|g| PriorityGroup {
            selector: selector.clone(),
            selector_args: table.groups[0].selector_args.clone(),
            paths: g
                .iter()
                .filter_map(|d| table.find_path(*d).cloned())
                .collect(),
        })
        .collect();
    t.initial_pg = 1;
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(minor: u32, prio: u32, tpg: u16) -> Candidate {
        Candidate {
            dev: DevNum::new(8, minor),
            prio,
            tpg: Some(tpg),
        }
    }

    fn devs(g: &[(u32, Vec<DevNum>)]) -> Vec<(u32, Vec<u32>)> {
        g.iter()
            .map(|(p, d)| (*p, d.iter().map(|x| x.minor).collect()))
            .collect()
    }

    #[test]
    fn policies_group_as_multipath_tools_does() {
        // Two non-optimized ports first in discovery order, then two optimized.
        let p = [c(0, 10, 2), c(16, 10, 2), c(32, 50, 1), c(48, 50, 1)];
        assert_eq!(
            devs(&group(Grouping::GroupByPrio, &p)),
            vec![(50, vec![32, 48]), (10, vec![0, 16])]
        );
        assert_eq!(
            devs(&group(Grouping::GroupByTpg, &p)),
            vec![(50, vec![32, 48]), (10, vec![0, 16])]
        );
        assert_eq!(
            devs(&group(Grouping::Multibus, &p)),
            vec![(50, vec![0, 16, 32, 48])]
        );
        assert_eq!(
            devs(&group(Grouping::Failover, &p)),
            vec![
                (50, vec![32]),
                (50, vec![48]),
                (10, vec![0]),
                (10, vec![16])
            ]
        );
        assert_eq!("group_by_tpg".parse::<Grouping>(), Ok(Grouping::GroupByTpg));
        assert!("by_luck".parse::<Grouping>().is_err());
    }

    #[test]
    fn an_alua_table_and_its_regrouping() {
        let p = [c(16, 50, 1), c(32, 10, 2)];
        let t = table(
            524288,
            &group(Grouping::GroupByPrio, &p),
            Selector::ServiceTime,
            Some("alua"),
        )
        .unwrap();
        // multipath-tools 0.9.4's table for this LUN (the reference).
        assert_eq!(
            t.render_line(),
            "0 524288 multipath 0 1 alua 2 1 service-time 0 1 2 8:16 1 1 service-time 0 1 2 8:32 1 1"
        );
        assert_eq!(regroup(&t, Grouping::GroupByPrio, &p), None);
        // The array fails over: the other port is optimized now.
        let q = [c(16, 10, 1), c(32, 50, 2)];
        let mut w = t.clone();
        w.set_relative_throughput(DevNum::new(8, 32), 70).unwrap();
        let r = regroup(&w, Grouping::GroupByPrio, &q).unwrap();
        assert_eq!(
            r.render_line(),
            "0 524288 multipath 0 1 alua 2 1 service-time 0 1 2 8:32 1 70 service-time 0 1 2 8:16 1 1"
        );
        // Both optimized: one group.
        let both = [c(16, 50, 1), c(32, 50, 2)];
        assert_eq!(
            regroup(&t, Grouping::GroupByPrio, &both)
                .unwrap()
                .groups
                .len(),
            1
        );
    }
}
