//! The parser and the precedence on real `multipath -t` output of Debian
//! 12's multipath-tools 0.9.4: the bare install, and one with an admin's
//! multipath.conf and a conf.d file (captured with those files in place;
//! the fixtures directory holds all four).
use super::{
    model::{FindMultipaths, NoPathRetry},
    select::{LunFacts, Origin, PathFacts, select},
    *,
};
use crate::{
    discovery::identity::Tpgs,
    mpath::{Feature, Selector, grouping::Grouping},
};

const BARE: &str = include_str!("../../tests/fixtures/multipath-t-0.9.4.conf");
const ADMIN_T: &str = include_str!("../../tests/fixtures/admin-multipath-t-0.9.4.conf");
const ADMIN_CONF: &str = include_str!("../../tests/fixtures/admin-multipath.conf");
const ADMIN_CONFD: &str = include_str!("../../tests/fixtures/admin-conf.d-10-local.conf");

fn bare() -> Effective {
    Effective {
        conf: parse(BARE, "multipath -t").unwrap(),
        admin: Conf::default(),
        builtin: true,
    }
}

fn admin() -> Effective {
    Effective {
        conf: parse(ADMIN_T, "multipath -t").unwrap(),
        admin: Conf::merge_files(vec![
            parse(ADMIN_CONF, "/etc/multipath.conf").unwrap(),
            parse(ADMIN_CONFD, "/etc/multipath/conf.d/10-local.conf").unwrap(),
        ]),
        builtin: true,
    }
}

fn path(tpgs: Tpgs, dh: Option<&str>) -> PathFacts {
    PathFacts {
        tpgs,
        dh_state: dh.map(str::to_string),
        access_state: dh == Some("alua"),
    }
}

fn lun<'a>(
    wwid: &'a str,
    vendor: &'a str,
    product: &'a str,
    paths: &'a [PathFacts],
) -> LunFacts<'a> {
    LunFacts {
        wwid,
        vendor,
        product,
        revision: "0001",
        paths,
    }
}

#[test]
fn multipath_t_output_round_trips_byte_for_byte() {
    for text in [BARE, ADMIN_T] {
        let doc = syntax::Document::parse(text).unwrap();
        assert_eq!(doc.render(), text);
        assert_eq!(syntax::Document::parse(&doc.render()).unwrap(), doc);
    }
    // An admin's file loses its comments and takes -t's layout, and reads
    // back as the same tree.
    let doc = syntax::Document::parse(ADMIN_CONF).unwrap();
    let again = syntax::Document::parse(&doc.render()).unwrap();
    let strip = |d: &syntax::Document| d.render();
    assert_eq!(strip(&again), strip(&doc));
}

#[test]
fn the_builtin_table_is_read_whole() {
    let c = parse(BARE, "multipath -t").unwrap();
    // Debian 12's build: 123 device entries, and 14 management LUNs in
    // the blacklist from their product_blacklist.
    assert_eq!(c.devices.len(), 123);
    assert_eq!(c.blacklist.device.len(), 14);
    let lio = c.devices_for("LIO-ORG", "RAMDISK-MCP", "4.0");
    assert_eq!(lio.len(), 1);
    assert_eq!(lio[0].name(), "(LIO-ORG|SUSE)/.*");
    assert_eq!(
        c.defaults.find_multipaths.as_ref().unwrap().value,
        FindMultipaths::Strict
    );
    assert_eq!(c.defaults.polling_interval.as_ref().unwrap().value, 5);
    // The default blacklist: the devnode regex, the management LUNs
    // (product_blacklist), and the udev property exception.
    assert_eq!(
        c.blacklist.devnode[0].value.text(),
        "!^(sd[a-z]|dasd[a-z]|nvme[0-9])"
    );
    assert_eq!(
        c.exceptions.property[0].value.text(),
        "(SCSI_IDENT_|ID_WWN)"
    );
    let netapp = c.devices_for("NETAPP", "LUN", "9300");
    assert_eq!(netapp[0].name(), "NETAPP/LUN");
    assert_eq!(
        netapp[0].attrs.features.as_ref().unwrap().value,
        vec![Feature::PgInitRetries(50)]
    );
    assert!(c.devices_for("QEMU", "QEMU HARDDISK", "2.5+").is_empty());
}

#[test]
fn a_pure_array_behind_alua_ports_takes_its_device_entry() {
    let e = bare();
    let paths = [
        path(Tpgs::Implicit, Some("alua")),
        path(Tpgs::Implicit, Some("alua")),
    ];
    let s = select(&e, &lun("3624a9370", "PURE", "FlashArray", &paths));
    assert_eq!(s.devices, ["PURE/FlashArray"]);
    assert_eq!(s.path_grouping_policy.value, Grouping::GroupByPrio);
    assert_eq!(
        s.path_grouping_policy.origin,
        Origin::Device {
            entry: "PURE/FlashArray".into(),
            at: None
        }
    );
    assert_eq!(
        s.path_grouping_policy.origin.to_string(),
        "device entry PURE/FlashArray, multipath-tools' built-in hwtable"
    );
    // The handler the kernel attached wins over the entry's (the same).
    assert_eq!(s.hardware_handler.value.as_ref().unwrap().name, "alua");
    assert!(matches!(s.hardware_handler.origin, Origin::Detected { .. }));
    // detect_prio: sysfs where the kernel shows the access state.
    assert_eq!(s.prio[0].value.name, "sysfs");
    // No entry sets the selector: multipath-tools' default.
    assert_eq!(s.path_selector.value.selector, Selector::ServiceTime);
    assert_eq!(s.path_selector.origin, Origin::Builtin);
    assert_eq!(s.no_path_retry.value, None);
    assert_eq!(s.path_checker.value, "tur");
}

#[test]
fn an_svc_without_a_handler_in_its_entry_gets_alua_from_tpgs() {
    let e = bare();
    // Paths that support ALUA, no handler attached yet.
    let paths = [path(Tpgs::Implicit, None), path(Tpgs::Implicit, None)];
    let s = select(&e, &lun("36005076", "IBM", "2145", &paths));
    assert_eq!(s.no_path_retry.value, Some(NoPathRetry::Queue));
    assert_eq!(s.hardware_handler.value.as_ref().unwrap().name, "alua");
    assert_eq!(
        s.hardware_handler.origin.to_string(),
        "detected: every path supports ALUA (TPGS)"
    );
    assert_eq!(s.prio[0].value.name, "alua");
    // A path without ALUA: no handler, and prio alua falls back to const.
    let mixed = [path(Tpgs::Implicit, None), path(Tpgs::None, None)];
    let s = select(&e, &lun("36005076", "IBM", "2145", &mixed));
    assert_eq!(s.hardware_handler.value, None);
    assert_eq!(s.prio[0].value.name, "alua");
    assert_eq!(s.prio[1].value.name, "const");
}

#[test]
fn a_netapp_lun_without_alua_keeps_its_entrys_prioritizer_and_features() {
    let e = bare();
    let paths = [path(Tpgs::None, None), path(Tpgs::None, None)];
    let s = select(&e, &lun("360a98000", "NETAPP", "LUN", &paths));
    assert_eq!(s.prio[0].value.name, "ontap");
    assert_eq!(s.features.value, vec![Feature::PgInitRetries(50)]);
    assert_eq!(s.no_path_retry.value, Some(NoPathRetry::Queue));
    assert_eq!(s.hardware_handler.value, None);
    assert!(!s.user_friendly_names.value, "the entry names maps by WWID");
    assert!(s.user_friendly_names.origin.specific());
}

#[test]
fn an_array_with_no_entry_gets_multipath_tools_defaults() {
    let e = bare();
    let paths = [path(Tpgs::None, None), path(Tpgs::None, None)];
    let s = select(
        &e,
        &lun("35000c500deadbeef", "QEMU", "QEMU HARDDISK", &paths),
    );
    assert!(s.devices.is_empty());
    assert_eq!(s.path_grouping_policy.value, Grouping::Failover);
    assert_eq!(s.path_grouping_policy.origin, Origin::Builtin);
    assert_eq!(s.prio[0].value.name, "const");
    assert_eq!(s.no_path_retry.origin, Origin::Builtin);
    assert!(!s.user_friendly_names.origin.specific());
}

#[test]
fn precedence_follows_propsel_and_names_the_admins_lines() {
    let e = admin();
    let paths = [path(Tpgs::None, None), path(Tpgs::None, None)];
    // The admin's conf.d entry merged into multipath.conf's.
    let s = select(&e, &lun("3acme1", "ACME", "Failover-2", &paths));
    assert_eq!(s.path_grouping_policy.value, Grouping::Failover);
    assert_eq!(
        s.path_grouping_policy.origin.to_string(),
        "device entry ACME/^Failover, /etc/multipath.conf line 31"
    );
    assert_eq!(
        s.failback.origin.to_string(),
        "device entry ACME/^Failover, /etc/multipath/conf.d/10-local.conf line 6"
    );
    assert_eq!(s.no_path_retry.value, Some(NoPathRetry::Checks(4)));
    // overrides beat device entries and defaults ...
    assert_eq!(s.features.value, vec![Feature::PgInitRetries(7)]);
    assert_eq!(
        s.features.origin.to_string(),
        "overrides, /etc/multipath.conf line 36"
    );
    // ... the admin's defaults are theirs, with the line ...
    assert_eq!(s.path_selector.value.selector, Selector::RoundRobin);
    assert_eq!(
        s.path_selector.origin.to_string(),
        "defaults, /etc/multipath.conf line 6"
    );
    assert_eq!(s.polling_interval.value, 10);
    assert_eq!(s.find_multipaths.value, FindMultipaths::On);
    assert!(s.user_friendly_names.value);
    // ... and a multipaths entry beats overrides.
    let wwid = "36001405aaaaaaaaaaaaaaaaaaaaaaaaa";
    let s = select(&e, &lun(wwid, "ACME", "Failover-2", &paths));
    assert_eq!(s.path_grouping_policy.value, Grouping::Multibus);
    assert_eq!(
        s.path_grouping_policy.origin.to_string(),
        format!("multipaths entry {wwid}, /etc/multipath.conf line 46")
    );
    assert_eq!(s.alias.as_ref().unwrap().value, "data");
    // The admin's PURE entry merged into the built-in one: the admin's
    // key names the admin's line, the built-in ones the hwtable.
    let s = select(&e, &lun("3624a", "PURE", "FlashArray", &paths));
    assert_eq!(s.no_path_retry.value, Some(NoPathRetry::Queue));
    assert_eq!(
        s.no_path_retry.origin.to_string(),
        "device entry PURE/FlashArray, /etc/multipath.conf line 26"
    );
    assert_eq!(
        s.failback.origin.to_string(),
        "device entry PURE/FlashArray, multipath-tools' built-in hwtable"
    );
}

#[test]
fn without_the_binary_the_files_are_the_configuration() {
    let files = Conf::merge_files(vec![
        parse(ADMIN_CONF, "/etc/multipath.conf").unwrap(),
        parse(ADMIN_CONFD, "/etc/multipath/conf.d/10-local.conf").unwrap(),
    ]);
    let e = Effective {
        conf: files.clone(),
        admin: files,
        builtin: false,
    };
    let paths = [path(Tpgs::None, None)];
    // No built-in hwtable: PURE is the admin's entry alone.
    let s = select(&e, &lun("3624a", "PURE", "FlashArray", &paths));
    assert_eq!(s.path_grouping_policy.value, Grouping::Failover);
    assert_eq!(s.path_grouping_policy.origin, Origin::Builtin);
    assert_eq!(
        s.no_path_retry.origin.to_string(),
        "device entry PURE/FlashArray, /etc/multipath.conf line 26"
    );
    assert_eq!(
        s.path_selector.origin.to_string(),
        "defaults, /etc/multipath.conf line 6"
    );
}

#[test]
fn a_mistake_in_a_file_names_the_file_and_line() {
    let e = parse(
        "defaults {\n\tuser_friendly_names yes\n\nblacklist {\n\twwid \".*\"\n}\n",
        "/etc/multipath.conf",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "/etc/multipath.conf line 1: 'defaults {' is never closed (a '}' is missing)"
    );
}

#[test]
fn reading_a_host_without_multipath_tools() {
    let dir = std::env::temp_dir().join(format!("pp-mpconf-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("conf.d")).unwrap();
    let src = Sources {
        conf_file: dir.join("multipath.conf"),
        conf_dir: dir.join("conf.d"),
        binary: None,
    };
    assert!(!src.installed());
    let e = read(&src).unwrap();
    assert!(e.conf.devices.is_empty() && !e.builtin);
    std::fs::write(dir.join("multipath.conf"), ADMIN_CONF).unwrap();
    std::fs::write(dir.join("conf.d/10-local.conf"), ADMIN_CONFD).unwrap();
    std::fs::write(dir.join("conf.d/README"), "not a conf file {").unwrap();
    assert!(src.installed());
    let e = read(&src).unwrap();
    assert_eq!(e.conf.devices.len(), 2);
    std::fs::write(dir.join("conf.d/20-bad.conf"), "devices {\n").unwrap();
    let err = read(&src).unwrap_err().to_string();
    assert!(
        err.ends_with("20-bad.conf line 1: 'devices {' is never closed (a '}' is missing)"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn dry_run_output_gives_the_assembled_tables() {
    let out = "\
8321.1 | sda: prio = sysfs (setting: storage device autodetected)\n\
8321.2 | mpatha: assembled map [1 queue_if_no_path 1 alua 2 1 service-time 0 1 1 8:0 1 service-time 0 1 1 8:16 1]\n\
create: mpatha (36001405abc) undef LIO-ORG,RAMDISK-MCP\n\
size=256M features='1 queue_if_no_path' hwhandler='1 alua' wp=undef\n";
    let maps = parse_dry_run(out, 524288);
    assert_eq!(maps.len(), 1);
    assert_eq!(maps[0].0, "36001405abc");
    assert_eq!(
        maps[0].1.render_line(),
        "0 524288 multipath 1 queue_if_no_path 1 alua 2 1 service-time 0 1 1 8:0 1 service-time 0 1 1 8:16 1"
    );
    // 0.9.4's dry run: no action word, and the WWID alone where it is the
    // alias (captured from the guest's multipath -d -v4).
    let out = "\
10.576417 | 360014051b2c3d4e5f6047189a0bc1d2e: assembled map [0 1 alua 2 1 service-time 0 1 1 8:16 1 service-time 0 1 1 8:32 1]\n\
: 360014051b2c3d4e5f6047189a0bc1d2e undef PURE,FlashArray\n\
size=64M features='0' hwhandler='1 alua' wp=undef\n";
    let maps = parse_dry_run(out, 131072);
    assert_eq!(maps[0].0, "360014051b2c3d4e5f6047189a0bc1d2e");
    assert_eq!(maps[0].1.groups.len(), 2);
}
