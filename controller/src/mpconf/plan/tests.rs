//! Table derivation on the built-in hwtable of multipath-tools 0.9.4 (the
//! `multipath -t` fixture), for arrays of each kind.
use super::*;
use crate::{
    discovery::{
        alua::{AccessState, Alua},
        identity::Tpgs,
    },
    mpconf::{
        Conf, Effective, parse,
        select::{LunFacts, PathFacts, select},
    },
};

const BARE: &str = include_str!("../../../tests/fixtures/multipath-t-0.9.4.conf");

fn bare() -> Effective {
    Effective {
        conf: parse(BARE, "multipath -t").unwrap(),
        admin: Conf::default(),
        builtin: true,
    }
}

fn d(minor: u32) -> DevNum {
    DevNum::new(8, minor)
}

/// A path: its minor, and its ALUA state and port group where it has one.
fn p(minor: u32, alua: Option<(AccessState, u16)>) -> PlanPath {
    PlanPath {
        name: format!("sd{}", (b'a' + (minor / 16) as u8) as char),
        dev: d(minor),
        alua: alua.map(|(state, g)| Alua {
            state,
            preferred: false,
            group: Some(g),
        }),
        serial: None,
        node_name: None,
    }
}

fn facts(paths: &[PlanPath]) -> Vec<PathFacts> {
    paths
        .iter()
        .map(|p| PathFacts {
            tpgs: if p.alua.is_some() {
                Tpgs::Implicit
            } else {
                Tpgs::None
            },
            dh_state: p.alua.map(|_| "alua".to_string()),
            access_state: p.alua.is_some(),
        })
        .collect()
}

/// pathpilot's and multipath-tools' tables for an array.
fn planned(vendor: &str, product: &str, paths: &[PlanPath], own: &Own) -> Plan {
    let e = bare();
    let f = facts(paths);
    let s = select(
        &e,
        &LunFacts {
            wwid: "3600",
            vendor,
            product,
            revision: "1",
            paths: &f,
        },
    );
    plan(2097152, paths, Some(&s), own)
}

fn alua_ports() -> Vec<PlanPath> {
    vec![
        p(0, Some((AccessState::NonOptimized, 20))),
        p(16, Some((AccessState::Optimized, 10))),
        p(32, Some((AccessState::Standby, 30))),
    ]
}

#[test]
fn an_alua_array_s_table_is_multipath_tools_own() {
    for (vendor, product, features) in [
        ("PURE", "FlashArray", "0"),
        ("3PARdata", "VV", "1 queue_if_no_path"),
        ("IBM", "2145", "1 queue_if_no_path"),
        ("LIO-ORG", "RAMDISK-MCP", "1 queue_if_no_path"),
    ] {
        let pl = planned(vendor, product, &alua_ports(), &Own::default());
        let t = pl.theirs.as_ref().unwrap();
        assert_eq!(pl.ours, kernel_view(t), "{vendor}: {}", pl.ours);
        assert!(pl.differences.is_empty(), "{vendor}: {:?}", pl.differences);
        assert_eq!(
            pl.ours.render_line(),
            format!(
                "0 2097152 multipath {features} 1 alua 3 1 service-time 0 1 2 8:16 1 1 \
                 service-time 0 1 2 8:0 1 1 service-time 0 1 2 8:32 1 1"
            ),
            "{vendor}"
        );
    }
    // 3PAR: no_path_retry 18 checks of 5 s.
    let pl = planned("3PARdata", "VV", &alua_ports(), &Own::default());
    assert_eq!(pl.queueing.fail_after_secs, Some(90.0));
    assert!(
        pl.notes.iter().any(|n| n.contains("no_path_retry 18")),
        "{:?}",
        pl.notes
    );
}

#[test]
fn multibus_and_queueing_arrays_follow_their_entries() {
    let plain = [p(0, None), p(16, None), p(32, None)];
    // EMC Symmetrix: multibus, no_path_retry 6.
    let pl = planned("EMC", "SYMMETRIX", &plain, &Own::default());
    assert_eq!(
        pl.ours.render_line(),
        "0 2097152 multipath 1 queue_if_no_path 0 1 1 service-time 0 3 2 8:0 1 1 8:16 1 1 8:32 1 1"
    );
    assert!(pl.differences.is_empty(), "{:?}", pl.differences);
    assert_eq!(pl.queueing.fail_after_secs, Some(30.0));
    // NetApp: group_by_prio with ontap, which pathpilot does not run: one
    // group, said so; pg_init_retries from the entry, queueing for ever.
    let pl = planned("NETAPP", "LUN", &plain, &Own::default());
    assert_eq!(
        pl.ours.render_line(),
        "0 2097152 multipath 3 queue_if_no_path pg_init_retries 50 0 1 1 \
         service-time 0 3 2 8:0 1 1 8:16 1 1 8:32 1 1"
    );
    assert!(pl.differences.is_empty());
    assert!(
        pl.notes.iter().any(|n| n.starts_with("prio ontap")),
        "{:?}",
        pl.notes
    );
    assert_eq!(pl.queueing.fail_after_secs, None);
    // NFINIDAT: round-robin, rr_weight priorities: the kernel pins the
    // repeat counts, so only a note.
    let pl = planned("NFINIDAT", "InfiniBox", &alua_ports(), &Own::default());
    assert!(
        pl.ours.render_line().contains("round-robin 0 1 1 8:16 1"),
        "{}",
        pl.ours
    );
    assert!(pl.differences.is_empty(), "{:?}", pl.differences);
    assert!(pl.notes.iter().any(|n| n.starts_with("repeat counts")));
}

#[test]
fn where_multipath_tools_only_has_its_defaults_pathpilot_s_apply_and_say_so() {
    let plain = [p(0, None), p(16, None)];
    let pl = planned("QEMU", "QEMU HARDDISK", &plain, &Own::default());
    assert_eq!(
        pl.ours.render_line(),
        "0 2097152 multipath 0 0 1 1 service-time 0 2 2 8:0 1 1 8:16 1 1"
    );
    assert_eq!(
        pl.theirs.as_ref().unwrap().render_line(),
        "0 2097152 multipath 0 0 2 1 service-time 0 1 2 8:0 1 1 service-time 0 1 2 8:16 1 1"
    );
    assert_eq!(pl.differences.len(), 1, "{:?}", pl.differences);
    let g = &pl.differences[0];
    assert_eq!(g.aspect, "path groups");
    assert!(g.deliberate);
    assert_eq!(
        g.describe(),
        "path groups: 8:0,8:16 (multibus from pathpilot's default; multipath-tools' failover \
         comes from multipath-tools' default; multipath-tools: 8:0 | 8:16)"
    );
    // The daemon queues by default where multipath-tools does not.
    let own = Own {
        default_queue_if_no_path: true,
        ..Own::default()
    };
    let pl = planned("QEMU", "QEMU HARDDISK", &plain, &own);
    let f = pl
        .differences
        .iter()
        .find(|d| d.aspect == "features")
        .unwrap();
    assert_eq!(f.ours, "1 queue_if_no_path");
    assert!(f.why.contains("pathpilot's default"), "{}", f.why);
}

#[test]
fn pathpilot_s_explicit_choices_win_and_are_explained() {
    let own = Own {
        selector: Some(Setting {
            value: Selector::RoundRobin,
            origin: Origin::Pathpilot {
                how: "--selector".into(),
            },
        }),
        grouping: Some(Setting {
            value: Grouping::Multibus,
            origin: Origin::Pathpilot {
                how: "[maps] path_grouping_policy".into(),
            },
        }),
        ..Own::default()
    };
    let pl = planned("PURE", "FlashArray", &alua_ports(), &own);
    let aspects: Vec<&str> = pl.differences.iter().map(|d| d.aspect.as_str()).collect();
    assert_eq!(aspects, ["path groups", "selector"]);
    assert!(pl.differences.iter().all(|d| d.deliberate));
    assert_eq!(
        pl.differences[1].describe(),
        "selector: round-robin 0 (round-robin from --selector; multipath-tools' from \
         multipath-tools' default; multipath-tools: service-time 0)"
    );
    let shown = pl
        .settings
        .iter()
        .find(|s| s.setting == "path_grouping_policy")
        .unwrap();
    assert!(!shown.followed);
}

#[test]
fn without_multipath_tools_pathpilot_s_own_rules_make_the_table() {
    let pl = plan(2097152, &alua_ports(), None, &Own::default());
    assert!(pl.theirs.is_none() && pl.differences.is_empty());
    assert_eq!(
        pl.ours.render_line(),
        "0 2097152 multipath 0 1 alua 3 1 service-time 0 1 2 8:16 1 1 \
         service-time 0 1 2 8:0 1 1 service-time 0 1 2 8:32 1 1"
    );
    let plain = [p(0, None), p(16, None)];
    let pl = plan(
        8,
        &plain,
        None,
        &Own {
            default_queue_if_no_path: true,
            ..Own::default()
        },
    );
    assert_eq!(
        pl.ours.render_line(),
        "0 8 multipath 1 queue_if_no_path 0 1 1 service-time 0 2 2 8:0 1 1 8:16 1 1"
    );
}

#[test]
fn group_by_serial_groups_each_controller() {
    let mut paths = vec![p(0, None), p(16, None), p(32, None), p(48, None)];
    for (i, s) in ["B", "A", "B", "A"].iter().enumerate() {
        paths[i].serial = Some(s.to_string());
    }
    // Nexenta COMSTAR: group_by_serial, no_path_retry 30.
    let pl = planned("NEXENTA", "COMSTAR", &paths, &Own::default());
    assert_eq!(
        pl.ours.render_line(),
        "0 2097152 multipath 1 queue_if_no_path 0 2 1 service-time 0 2 2 8:0 1 1 8:32 1 1 \
         service-time 0 2 2 8:16 1 1 8:48 1 1"
    );
    assert!(pl.differences.is_empty());
}

#[test]
fn tables_compare_as_the_kernel_holds_them() {
    let theirs = MultipathTable::parse_line(
        "0 8 multipath 2 pg_init_retries 50 1 alua 1 1 service-time 0 2 1 8:0 1 8:16 1",
    )
    .unwrap();
    let ours = MultipathTable::parse_line(
        "0 8 multipath 2 pg_init_retries 50 1 alua 1 1 service-time 0 2 2 8:0 1 1 8:16 1 1",
    )
    .unwrap();
    assert!(differences(&ours, &theirs).is_empty());
    let rr = MultipathTable::parse_line("0 8 multipath 0 0 1 1 round-robin 0 2 1 8:0 50 8:16 10")
        .unwrap();
    assert_eq!(
        kernel_view(&rr).render_line(),
        "0 8 multipath 0 0 1 1 round-robin 0 2 1 8:0 1 8:16 1"
    );
    let weighted = MultipathTable::parse_line(
        "0 8 multipath 2 pg_init_retries 50 1 alua 1 1 service-time 0 2 2 8:0 1 30 8:16 1 70",
    )
    .unwrap();
    let d = differences(&weighted, &theirs);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].0, "path arguments");
    assert_eq!(d[0].1, "8:0 1 30, 8:16 1 70");
}
