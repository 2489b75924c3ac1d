//! Path grouping policies, with multipath.conf's names and meanings: which
//! paths share a priority group, and the groups' order (the first is used
//! while it has a usable path). Pure: priorities and target port groups
//! come from discovery.
use serde::{Deserialize, Serialize};

use super::{HwHandler, ModelError, MultipathTable, Path, PathArgs, PriorityGroup, Selector};
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
    /// One group per serial number (VPD page 0x80): the paths through one
    /// controller of an array that gives each its own serial.
    GroupBySerial,
    /// One group per target node name (the FC node, the iSCSI target).
    GroupByNodeName,
}

impl std::str::FromStr for Grouping {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "failover" => Grouping::Failover,
            "multibus" => Grouping::Multibus,
            "group_by_prio" => Grouping::GroupByPrio,
            "group_by_tpg" => Grouping::GroupByTpg,
            "group_by_serial" => Grouping::GroupBySerial,
            "group_by_node_name" => Grouping::GroupByNodeName,
            _ => {
                return Err(format!(
                    "unknown path_grouping_policy '{s}' (failover, multibus, group_by_prio, group_by_tpg, group_by_serial, group_by_node_name)"
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
            Grouping::GroupBySerial => "group_by_serial",
            Grouping::GroupByNodeName => "group_by_node_name",
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

/// The groups of `paths` under `policy`, in order, each with its priority,
/// as multipath-tools' `group_paths` and `sort_pathgroups` make them: a
/// group's priority is the mean of its paths' (integer division); groups
/// go highest priority first, and between equal priorities the one with
/// more paths first, else in the order their first paths came. Paths keep
/// their given order inside a group. The identity policies
/// (`group_by_serial`, `group_by_node_name`) group by [`group_with`]'s
/// identities; without them every path has the empty one, as
/// multipath-tools' paths whose identity it cannot read.
pub fn group(policy: Grouping, paths: &[Candidate]) -> Vec<(u32, Vec<DevNum>)> {
    group_with(policy, paths, &[])
}

/// [`group`] with each path's identity for the identity policies: its
/// serial for `group_by_serial`, its target node name for
/// `group_by_node_name` (`idents[i]` is path i's; missing ones are empty).
pub fn group_with(
    policy: Grouping,
    paths: &[Candidate],
    idents: &[Option<&str>],
) -> Vec<(u32, Vec<DevNum>)> {
    #[derive(PartialEq)]
    enum Key<'a> {
        One,
        Own(usize),
        Prio(u32),
        Tpg(u32),
        Ident(&'a str),
    }
    let mut groups: Vec<(Key<'_>, Vec<&Candidate>)> = vec![];
    for (i, p) in paths.iter().enumerate() {
        // Which group a path joins: by policy, a key shared by its peers.
        let key = match policy {
            Grouping::Multibus => Key::One,
            Grouping::Failover => Key::Own(i),
            Grouping::GroupByPrio => Key::Prio(p.prio),
            Grouping::GroupByTpg => p.tpg.map_or(Key::Own(i), |t| Key::Tpg(u32::from(t))),
            Grouping::GroupBySerial | Grouping::GroupByNodeName => {
                Key::Ident(idents.get(i).copied().flatten().unwrap_or(""))
            }
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(p),
            None => groups.push((key, vec![p])),
        }
    }
    let mut out: Vec<(u32, Vec<DevNum>)> = groups
        .into_iter()
        .map(|(_, g)| {
            let sum: u64 = g.iter().map(|p| u64::from(p.prio)).sum();
            (
                (sum / g.len() as u64) as u32,
                g.iter().map(|p| p.dev).collect(),
            )
        })
        .collect();
    // Stable: equal priorities and sizes keep their order.
    out.sort_by_key(|(prio, devs)| (std::cmp::Reverse(*prio), std::cmp::Reverse(devs.len())));
    out
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
/// when the grouping is already that (the same groups in the same order;
/// the order of paths inside a group selects nothing and is not worth a
/// reload). A new grouping lists each group's paths in device-number
/// order, as a table built from discovery does, however they arrived.
pub fn regroup(
    table: &MultipathTable,
    policy: Grouping,
    paths: &[Candidate],
) -> Option<MultipathTable> {
    let in_table: Vec<Candidate> = table
        .paths()
        .filter_map(|p| paths.iter().find(|c| c.dev == p.dev).copied())
        .collect();
    // Paths the table has that discovery did not report stay where they
    // are; compare only what both know.
    if in_table.len() != table.paths().count() {
        return None;
    }
    let sorted = |mut devs: Vec<DevNum>| {
        devs.sort();
        devs
    };
    let want_devs: Vec<Vec<DevNum>> = group(policy, &in_table)
        .into_iter()
        .map(|(_, g)| sorted(g))
        .collect();
    let have: Vec<Vec<DevNum>> = table
        .groups
        .iter()
        .map(|g| sorted(g.paths.iter().map(|p| p.dev).collect()))
        .collect();
    if want_devs == have {
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

/// The arguments a path takes in `g`: its own where they have the
/// group's arity (a group's paths all have the same number), else the
/// selector's defaults, else a copy of a peer's.
fn args_for(g: &PriorityGroup, own: &PathArgs) -> PathArgs {
    let default = g.selector.default_path_args();
    let want = match (g.paths.first(), &default) {
        (Some(p), _) => p.args.arity(),
        (None, Some(d)) => d.arity(),
        (None, None) => own.arity(),
    };
    if own.arity() == want {
        return own.clone();
    }
    match (default, g.paths.first()) {
        (Some(d), _) if d.arity() == want => d,
        (_, Some(p)) => p.args.clone(),
        _ => own.clone(),
    }
}

/// `table` with the `marginal` paths set aside in a last group of their
/// own (multipath-tools' `marginal_pathgroups`): dm uses it only once no
/// other group has a usable path. A marginal path missing from `table`
/// (a tuner's table over the healthy paths only) is taken from `live`
/// with its arguments; one in neither is gone and skipped. Never sets
/// every path aside: then `table` is returned as it is.
pub fn set_aside(
    table: &MultipathTable,
    live: &MultipathTable,
    marginal: &[DevNum],
) -> MultipathTable {
    let mut t = table.clone();
    let mut aside: Vec<Path> = vec![];
    for d in marginal {
        let p = match t.find_path(*d) {
            Some(_) if t.paths().count() > 1 => t.remove_path(*d).ok(),
            Some(_) => return table.clone(),
            None => live.find_path(*d).cloned(),
        };
        aside.extend(p);
    }
    if aside.is_empty() || t.groups.is_empty() {
        return table.clone();
    }
    let mut g = PriorityGroup {
        selector: t.groups[0].selector.clone(),
        selector_args: t.groups[0].selector_args.clone(),
        paths: vec![],
    };
    for p in aside {
        let args = args_for(&g, &p.args);
        g.paths.push(Path { dev: p.dev, args });
    }
    t.groups.push(g);
    t
}

/// `table` with `dev` back in group `home` (1-based; the first group if
/// there is no such group any more), from wherever it was set aside.
pub fn take_back(table: &MultipathTable, dev: DevNum, home: usize) -> MultipathTable {
    let mut t = table.clone();
    let Some(at) = t.group_of(dev) else {
        return t;
    };
    if at == home || t.paths().count() == 1 {
        return t;
    }
    let Ok(p) = t.remove_path(dev) else {
        return table.clone();
    };
    // Removing the path may have removed its group (always after `home`:
    // the set-aside group is last), so `home` still names the same group.
    let home = if home >= 1 && home <= t.groups.len() {
        home
    } else {
        1
    };
    let args = args_for(&t.groups[home - 1], &p.args);
    if t.add_path(home, Path { dev, args }).is_err() {
        return table.clone();
    }
    t
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
        // A group's priority is its paths' mean.
        assert_eq!(
            devs(&group(Grouping::Multibus, &p)),
            vec![(30, vec![0, 16, 32, 48])]
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
    fn identity_policies_group_by_serial_or_node_and_sort_by_mean_then_size() {
        // Two controllers, each with its own serial: A's ports optimized.
        let p = [
            c(0, 10, 2),
            c(16, 50, 1),
            c(32, 10, 2),
            c(48, 50, 1),
            c(64, 50, 1),
        ];
        let ids = [Some("B"), Some("A"), Some("B"), Some("A"), None];
        assert_eq!(
            devs(&group_with(Grouping::GroupBySerial, &p, &ids)),
            vec![(50, vec![16, 48]), (50, vec![64]), (10, vec![0, 32])]
        );
        // Means: (50 + 10) / 2 = 30 for the mixed group; a bigger group
        // goes first between equals.
        let q = [c(0, 1, 1), c(16, 1, 1), c(32, 1, 1)];
        let ids = [Some("x"), Some("y"), Some("y")];
        assert_eq!(
            devs(&group_with(Grouping::GroupByNodeName, &q, &ids)),
            vec![(1, vec![16, 32]), (1, vec![0])]
        );
        let r = [c(0, 50, 1), c(16, 10, 1), c(32, 20, 1)];
        let ids = [Some("x"), Some("x"), Some("y")];
        assert_eq!(
            devs(&group_with(Grouping::GroupByNodeName, &r, &ids)),
            vec![(30, vec![0, 16]), (20, vec![32])]
        );
        // Without identities: one group, as multipath-tools with none read.
        assert_eq!(
            devs(&group(Grouping::GroupBySerial, &q)),
            vec![(1, vec![0, 16, 32])]
        );
        assert_eq!(
            "group_by_node_name".parse::<Grouping>(),
            Ok(Grouping::GroupByNodeName)
        );
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

    fn line(s: &str) -> MultipathTable {
        MultipathTable::parse_line(s).unwrap()
    }

    #[test]
    fn a_regrouping_lists_paths_in_device_order_and_order_alone_is_no_reason() {
        // 8:64 joined late, into the last group, and turned out optimized.
        let t = line(
            "0 8 multipath 0 1 alua 2 1 round-robin 0 1 1 8:80 1 round-robin 0 2 1 8:112 1 8:64 1",
        );
        let p = [c(64, 50, 1), c(80, 50, 1), c(112, 10, 2)];
        let r = regroup(&t, Grouping::GroupByPrio, &p).unwrap();
        assert_eq!(
            r.render_line(),
            "0 8 multipath 0 1 alua 2 1 round-robin 0 2 1 8:64 1 8:80 1 round-robin 0 1 1 8:112 1"
        );
        // The right groups in another order inside: left as they are.
        let q = [c(64, 10, 2), c(80, 50, 1), c(112, 10, 2)];
        assert_eq!(regroup(&t, Grouping::GroupByPrio, &q), None);
    }

    #[test]
    fn a_marginal_path_is_set_aside_in_a_last_group_and_taken_back() {
        let live = line("0 100 multipath 0 0 1 1 service-time 0 3 2 8:0 1 10 8:16 1 20 8:32 1 40");
        let sdb = DevNum::new(8, 16);
        let aside = set_aside(&live, &live, &[sdb]);
        assert_eq!(
            aside.render_line(),
            "0 100 multipath 0 0 2 1 service-time 0 2 2 8:0 1 10 8:32 1 40 \
             service-time 0 1 2 8:16 1 20"
        );
        // Idempotent: every reload sets it aside again, to the same table.
        assert_eq!(set_aside(&aside, &aside, &[sdb]), aside);
        assert_eq!(
            take_back(&aside, sdb, 1).render_line(),
            "0 100 multipath 0 0 1 1 service-time 0 3 2 8:0 1 10 8:16 1 20 8:32 1 40"
        );
        // Back in its place: the table it was set aside from.
        assert_eq!(take_back(&aside, sdb, 1), live);
        // Never every path aside.
        let two = [DevNum::new(8, 0), DevNum::new(8, 32)];
        let all = [two[0], sdb, two[1]];
        assert_eq!(set_aside(&live, &live, &all), live);
    }

    #[test]
    fn a_tuners_table_without_the_marginal_path_gets_it_from_the_live_one() {
        // The live table has round-robin (one argument per path); the
        // tuner's new one service-time over the two healthy paths.
        let live =
            line("0 100 multipath 0 0 2 1 round-robin 0 2 1 8:0 1 8:32 1 round-robin 0 1 1 8:16 1");
        let tuned = line("0 100 multipath 0 0 1 1 service-time 0 2 2 8:0 1 30 8:32 1 70");
        let t = set_aside(&tuned, &live, &[DevNum::new(8, 16), DevNum::new(8, 48)]);
        assert_eq!(
            t.render_line(),
            "0 100 multipath 0 0 2 1 service-time 0 2 2 8:0 1 30 8:32 1 70 \
             service-time 0 1 2 8:16 1 1"
        );
        // An ALUA map: the marginal group comes after the non-optimized one.
        let alua = line(
            "0 100 multipath 0 1 alua 2 1 queue-length 0 2 1 8:0 1 8:16 1 queue-length 0 1 1 8:32 1",
        );
        let t = set_aside(&alua, &alua, &[DevNum::new(8, 0)]);
        assert_eq!(
            t.render_line(),
            "0 100 multipath 0 1 alua 3 1 queue-length 0 1 1 8:16 1 queue-length 0 1 1 8:32 1 \
             queue-length 0 1 1 8:0 1"
        );
        assert_eq!(take_back(&t, DevNum::new(8, 0), 1).groups[0].paths.len(), 2);
        // A home group that is gone: the first.
        assert_eq!(take_back(&t, DevNum::new(8, 0), 7).groups[0].paths.len(), 2);
    }
}
