//! Paths that come and go: a new device of a managed map's LUN joins the
//! map, a vanished one leaves it, both by one reload; the last path never
//! leaves (the map keeps it, failed, until a path returns, so queued I/O
//! has somewhere to go).
use crate::{
    blockdev::DevNum,
    mpath::{MultipathTable, Path},
};

/// A table change for the paths that came and went.
#[derive(Debug, PartialEq)]
pub struct Plan {
    pub table: MultipathTable,
    /// (kernel name, dev) of the paths that join.
    pub added: Vec<(String, DevNum)>,
    pub dropped: Vec<DevNum>,
}

/// The new table for `table` when the paths `gone` vanished and `new`
/// appeared (free devices with the map's WWID). New paths join group
/// `join_group` (0-based; clamped to the groups there are) with the
/// selector's default arguments. `None`: nothing to change.
pub fn plan(
    table: &MultipathTable,
    gone: &[DevNum],
    new: &[(String, DevNum)],
    join_group: usize,
) -> Option<Plan> {
    let mut t = table.clone();
    // Joins first: the table is never without a path in between.
    let mut added = vec![];
    for (name, dev) in new {
        if t.find_path(*dev).is_some() {
            continue;
        }
        let g = join_group.min(t.groups.len().saturating_sub(1));
        let Some(args) = t
            .groups
            .get(g)
            .and_then(|grp| grp.selector.default_path_args())
        else {
            continue;
        };
        if t.add_path(g + 1, Path { dev: *dev, args }).is_ok() {
            added.push((name.clone(), *dev));
        }
    }
    let mut dropped = vec![];
    for d in gone {
        // The model refuses to remove the last path: it stays, failed.
        if t.paths().count() > 1 && t.remove_path(*d).is_ok() {
            dropped.push(*d);
        }
    }
    (!dropped.is_empty() || !added.is_empty()).then_some(Plan {
        table: t,
        added,
        dropped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::policy::testing::{T3 as T, d};

    #[test]
    fn a_path_leaves_and_a_new_one_joins() {
        let t: MultipathTable = T.parse().unwrap();
        let p = plan(&t, &[d(16)], &[], 0).unwrap();
        assert_eq!(p.dropped, vec![d(16)]);
        assert_eq!(
            p.table.render_params(),
            "1 queue_if_no_path 0 1 1 service-time 0 2 2 8:0 1 1 8:32 1 1"
        );
        let p = plan(&p.table, &[], &[("sde".into(), d(64))], 0).unwrap();
        assert_eq!(p.added, vec![("sde".to_string(), d(64))]);
        assert!(
            p.table
                .render_params()
                .ends_with("8:0 1 1 8:32 1 1 8:64 1 1"),
            "{}",
            p.table
        );
        assert_eq!(plan(&p.table, &[], &[("sde".into(), d(64))], 0), None);
        // sdb comes back: in its place, as a table built with it reads.
        let p = plan(&p.table, &[], &[("sdb".into(), d(16))], 0).unwrap();
        assert!(
            p.table
                .render_params()
                .ends_with("8:0 1 1 8:16 1 1 8:32 1 1 8:64 1 1"),
            "{}",
            p.table
        );
    }

    #[test]
    fn the_last_path_never_leaves() {
        let t: MultipathTable = T.parse().unwrap();
        let p = plan(&t, &[d(0), d(16), d(32)], &[], 0).unwrap();
        assert_eq!(p.dropped, vec![d(0), d(16)]);
        assert_eq!(p.table.paths().count(), 1);
        // Alone and gone: still kept.
        assert_eq!(plan(&p.table, &[d(32)], &[], 0), None);
        // Unless a path comes to replace it.
        let p = plan(&p.table, &[d(32)], &[("sdf".into(), d(80))], 0).unwrap();
        assert_eq!(p.dropped, vec![d(32)]);
        assert_eq!(
            p.table.render_params(),
            "1 queue_if_no_path 0 1 1 service-time 0 1 2 8:80 1 1"
        );
    }

    #[test]
    fn new_paths_join_the_group_asked_for() {
        let t: MultipathTable =
            "0 8 multipath 0 0 2 1 round-robin 0 1 1 8:0 1 round-robin 0 1 1 8:16 1"
                .parse()
                .unwrap();
        let p = plan(&t, &[], &[("sdc".into(), d(32))], 1).unwrap();
        assert_eq!(
            p.table.render_params(),
            "0 0 2 1 round-robin 0 1 1 8:0 1 round-robin 0 2 1 8:16 1 8:32 1"
        );
        // A group past the last is the last.
        let p = plan(&t, &[], &[("sdc".into(), d(32))], 7).unwrap();
        assert_eq!(p.table.groups[1].paths.len(), 2);
    }
}
