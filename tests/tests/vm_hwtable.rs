//! Arrays of multipath-tools' built-in table, emulated in the VM by their
//! INQUIRY vendor and product (the QEMU disks, or the LIO ALUA array's
//! LUN): the guest's multipath-tools 0.9.4 builds its map for the array,
//! and pathpilot's `create` must build the same table, or differ only
//! where its dry run says it deliberately does; then verified writes go
//! through pathpilot's map. And a multipath.conf pathpilot cannot follow
//! is refused in one line, with nothing created.
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use pathpilot::{
    mpath::MultipathTable,
    mpconf::plan::{differences, kernel_view},
};
use pathpilot_testbed::{AluaSpec, Backstore, Builder, Testbed};
use pathpilot_tests::{
    boot_or_skip,
    guest::{self, parse_fio_terse},
};
use serde_json::Value;

fn json(s: &str) -> Result<Value> {
    serde_json::from_str(s).with_context(|| format!("not JSON: {s}"))
}

/// An ALUA array with one optimized and one non-optimized port, its LUN a
/// LIO ramdisk that says it is `vendor`/`product`.
fn alua_array(vendor: &str, product: &str) -> Result<Builder> {
    let mut a = AluaSpec::parse("10:ao,20:an")?;
    a.backstore = Backstore::Ramdisk(128);
    Ok(Testbed::builder().alua(a).vendor(vendor).product(product))
}

/// Four QEMU paths to one LUN that says it is `vendor`/`product`.
fn plain_array(vendor: &str, product: &str) -> Builder {
    Testbed::builder().paths(4).vendor(vendor).product(product)
}

/// The guest's disks that report `vendor`, and the WWID of their LUN.
fn array_disks(tb: &Testbed, vendor: &str) -> Result<(Vec<String>, String)> {
    let disks: Vec<String> = tb
        .sh(&format!(
            "for d in /sys/block/sd*; do [ \"$(sed 's/ *$//' $d/device/vendor)\" = '{vendor}' ] \
             && echo ${{d##*/}}; done"
        ))?
        .lines()
        .map(str::to_string)
        .collect();
    ensure!(!disks.is_empty(), "no disk reports vendor {vendor}");
    // The WWID as pathpilot reads it, which `create --wwid` takes.
    let plan = json(&tb.sh("pathpilot create --all --multipath-conf ignore --dry-run --json")?)?;
    let wwid = plan["created"]
        .as_array()
        .and_then(|c| {
            c.iter().find(|c| {
                c["device"]
                    .as_str()
                    .is_some_and(|d| d.starts_with(&format!("{vendor},")))
            })
        })
        .and_then(|c| c["wwid"].as_str())
        .with_context(|| format!("no LUN of {vendor} in {plan}"))?
        .to_string();
    Ok((disks, wwid))
}

/// What one array's comparison found.
struct Compared {
    /// multipath-tools' map as the kernel holds it.
    theirs: MultipathTable,
    /// pathpilot's map as the kernel holds it.
    ours: MultipathTable,
    /// pathpilot's map's name.
    name: String,
    /// The dry run's report of this map (its `created[0]`).
    dry: Value,
    /// The dry run's text.
    text: String,
}

/// Lets multipath-tools (with `conf` as /etc/multipath.conf) build its map
/// for the LUN behind `disk`, then pathpilot: its dry run while udev and
/// multipath -d can see the paths, then the map itself.
fn compare(tb: &Testbed, disk: &str, wwid: &str, conf: Option<&str>) -> Result<Compared> {
    if let Some(c) = conf {
        tb.sh(&format!(
            "mkdir -p /etc/multipath; cat > /etc/multipath.conf <<'EOF'\n{c}EOF"
        ))?;
    }
    tb.start_udevd()?;
    let dry = (|| -> Result<(String, Value)> {
        // find_multipaths strict (Debian's default) maps known WWIDs only.
        tb.sh(&format!("multipath -a /dev/{disk} >/dev/null"))?;
        let text = tb.sh(&format!("pathpilot create --wwid {wwid} --dry-run"))?;
        let j = json(&tb.sh(&format!("pathpilot create --wwid {wwid} --dry-run --json"))?)?;
        // -q: keep queue_if_no_path though no multipathd runs, as
        // multipathd would load the map.
        tb.sh("multipath -q -v2 >/dev/null; udevadm settle -t 30")?;
        Ok((text, j))
    })();
    tb.stop_udevd()?;
    let (text, dry) = dry?;
    eprintln!("pathpilot create --dry-run:\n{text}");
    let theirs_name = tb
        .sh("dmsetup ls --target multipath | cut -f1")?
        .trim()
        .to_string();
    ensure!(
        !theirs_name.is_empty() && !theirs_name.contains('\n'),
        "multipath-tools made one map: {theirs_name:?}"
    );
    let theirs: MultipathTable = tb
        .sh(&format!("dmsetup table {theirs_name}"))?
        .trim()
        .parse()?;
    eprintln!("multipath-tools' map {theirs_name}: {theirs}");
    tb.flush_multipath_tools()?;
    ensure!(
        tb.sh("dmsetup ls --target multipath")?.trim() == "No devices found",
        "multipath-tools' map is gone"
    );
    let made = json(&tb.sh(&format!("pathpilot create --wwid {wwid} --json"))?)?;
    let name = made["created"][0]["name"]
        .as_str()
        .context("created[0].name")?
        .to_string();
    let ours: MultipathTable = tb.sh(&format!("dmsetup table {name}"))?.trim().parse()?;
    eprintln!("pathpilot's map {name}: {ours}");
    Ok(Compared {
        theirs,
        ours,
        name,
        dry: dry["created"][0].clone(),
        text,
    })
}

/// The aspects the dry run declares deliberate differences.
fn deliberate(dry: &Value) -> Vec<String> {
    dry["plan"]["differences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|d| d["deliberate"] == true)
                .filter_map(|d| d["aspect"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The kernel's two maps differ only where the dry run said pathpilot
/// deliberately differs, and the dry run's `multipath -d` comparison says
/// the same of multipath-tools' own dry run.
fn differs_only_as_declared(c: &Compared) -> Result<Vec<String>> {
    let real: Vec<String> = differences(&c.ours, &c.theirs)
        .into_iter()
        .map(|(a, ours, theirs)| {
            eprintln!("differs: {a}: pathpilot {ours}, multipath-tools {theirs}");
            a
        })
        .collect();
    let declared = deliberate(&c.dry);
    ensure!(
        real == declared,
        "the maps differ in {real:?}; the dry run declared {declared:?}\n{}",
        c.text
    );
    let d = &c.dry["multipath_d"];
    ensure!(
        d["table"].is_string(),
        "the dry run compared with multipath -d: {d}"
    );
    let vs_d: Vec<&str> = d["differs"]
        .as_array()
        .context("multipath_d.differs")?
        .iter()
        .filter_map(|x| x["aspect"].as_str())
        .collect();
    ensure!(
        vs_d == declared,
        "multipath -d differs in {vs_d:?}, declared {declared:?}"
    );
    ensure!(
        d["misread"].as_array().is_some_and(|m| m.is_empty()),
        "pathpilot read multipath-tools' configuration as multipath -d does: {d}"
    );
    // The table the dry run showed is the one created.
    ensure!(
        kernel_view(&c.dry["table"].as_str().unwrap_or_default().parse()?) == kernel_view(&c.ours),
        "the dry run showed {} and created {}",
        c.dry["table"],
        c.ours
    );
    Ok(real)
}

/// crc32c-verified writes through pathpilot's map: every block written is
/// read back and checked, with no I/O error.
fn verified_writes(tb: &Testbed, name: &str) -> Result<()> {
    let out = tb.run_timeout(
        &format!(
            "fio --name=v --filename=/dev/mapper/{name} --rw=randwrite --bs=64k --direct=1 \
             --ioengine=libaio --iodepth=8 --size=48m --time_based --runtime=6 \
             --verify=crc32c --verify_backlog=16 --verify_fatal=1 \
             --output-format=terse --terse-version=3 2>&1"
        ),
        Duration::from_secs(90),
    )?;
    let text = out.stdout_str();
    let f = parse_fio_terse(&text)?;
    eprintln!(
        "{name}: fio wrote {} MiB, read back {} MiB, error {}, verify failures {}",
        f.write_kib / 1024,
        f.read_kib / 1024,
        f.error,
        f.verify_failures
    );
    ensure!(
        out.success() && f.error == 0 && f.verify_failures == 0,
        "fio through {name}: {f:?}\n{text}"
    );
    ensure!(f.write_kib > 0 && f.read_kib > 0, "{f:?}");
    Ok(())
}

fn setting<'a>(dry: &'a Value, name: &str) -> &'a Value {
    dry["plan"]["settings"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["setting"] == name))
        .unwrap_or(&Value::Null)
}

/// `major:minor` of each disk, in the order given.
fn devs(tb: &Testbed, disks: &[String]) -> Result<Vec<String>> {
    disks
        .iter()
        .map(|d| {
            Ok(tb
                .sh(&format!("cat /sys/block/{d}/dev"))?
                .trim()
                .to_string())
        })
        .collect()
}

/// `t` with each group's paths in device-number order: the order inside a
/// group selects nothing (pathpilot lists it so, multipath-tools in udev's
/// order of devices), the groups' order does.
fn in_device_order(t: &MultipathTable) -> MultipathTable {
    let mut t = t.clone();
    for g in &mut t.groups {
        g.paths.sort_by_key(|p| p.dev);
    }
    t
}

fn groups(t: &MultipathTable) -> Vec<Vec<String>> {
    t.groups
        .iter()
        .map(|g| {
            let mut v: Vec<String> = g.paths.iter().map(|p| p.dev.to_string()).collect();
            v.sort();
            v
        })
        .collect()
}

#[test]
fn a_pure_flasharray_behind_alua_ports_is_grouped_by_priority_as_multipath_tools_does() -> Result<()>
{
    let tb = boot_or_skip!(alua_array("PURE", "FlashArray")?);
    let (disks, wwid) = array_disks(&tb, "PURE")?;
    let c = compare(&tb, &disks[0], &wwid, None)?;
    assert_eq!(differs_only_as_declared(&c)?, Vec::<String>::new());
    assert_eq!(
        in_device_order(&c.ours),
        in_device_order(&c.theirs),
        "the kernel holds the same table"
    );
    // Port 1 optimized, port 2 not: a group each, the optimized first,
    // the alua handler, no queueing (the entry sets no no_path_retry).
    let port_devs = devs(
        &tb,
        &tb.alua_ports()
            .iter()
            .map(|p| p.disk.clone())
            .collect::<Vec<_>>(),
    )?;
    assert_eq!(
        groups(&c.ours),
        vec![vec![port_devs[0].clone()], vec![port_devs[1].clone()]]
    );
    assert_eq!(
        c.ours.hw_handler.as_ref().map(|h| h.name.as_str()),
        Some("alua")
    );
    assert!(c.ours.features.is_empty(), "{}", c.ours);
    let g = setting(&c.dry, "path_grouping_policy");
    assert_eq!(g["value"], "group_by_prio");
    assert_eq!(
        g["origin"],
        "device entry PURE/FlashArray, multipath-tools' built-in hwtable"
    );
    assert!(
        c.text
            .contains("multipath-tools would build the same table"),
        "{}",
        c.text
    );
    assert!(
        c.text.contains("multipath -d: the same table"),
        "{}",
        c.text
    );
    verified_writes(&tb, &c.name)
}

#[test]
fn an_ibm_svc_queues_with_no_path_as_its_entry_says() -> Result<()> {
    let tb = boot_or_skip!(alua_array("IBM", "2145")?);
    let (disks, wwid) = array_disks(&tb, "IBM")?;
    let c = compare(&tb, &disks[0], &wwid, None)?;
    assert_eq!(differs_only_as_declared(&c)?, Vec::<String>::new());
    assert_eq!(in_device_order(&c.ours), in_device_order(&c.theirs));
    // no_path_retry queue: queue_if_no_path; the entry names no handler,
    // the kernel attached alua to the ALUA ports.
    assert!(c.ours.has_feature("queue_if_no_path"), "{}", c.ours);
    assert_eq!(c.ours.groups.len(), 2);
    let q = setting(&c.dry, "no_path_retry");
    assert_eq!(q["value"], "queue");
    assert_eq!(
        q["origin"],
        "device entry IBM/^2145, multipath-tools' built-in hwtable"
    );
    assert_eq!(c.dry["plan"]["queueing"]["fail_after_secs"], Value::Null);
    verified_writes(&tb, &c.name)
}

#[test]
fn a_3par_queues_for_its_no_path_retry_checks() -> Result<()> {
    let tb = boot_or_skip!(alua_array("3PARdata", "VV")?);
    let (disks, wwid) = array_disks(&tb, "3PARdata")?;
    let c = compare(&tb, &disks[0], &wwid, None)?;
    assert_eq!(differs_only_as_declared(&c)?, Vec::<String>::new());
    assert_eq!(in_device_order(&c.ours), in_device_order(&c.theirs));
    assert!(c.ours.has_feature("queue_if_no_path"));
    // no_path_retry 18 checks of polling_interval 5 s.
    assert_eq!(c.dry["plan"]["queueing"]["fail_after_secs"], 90.0);
    verified_writes(&tb, &c.name)
}

#[test]
fn an_emc_symmetrix_is_multibus_with_its_entrys_queueing() -> Result<()> {
    let tb = boot_or_skip!(plain_array("EMC", "SYMMETRIX"));
    let (disks, wwid) = array_disks(&tb, "EMC")?;
    ensure!(disks.len() == 4, "{disks:?}");
    let c = compare(&tb, &disks[0], &wwid, None)?;
    assert_eq!(differs_only_as_declared(&c)?, Vec::<String>::new());
    assert_eq!(in_device_order(&c.ours), in_device_order(&c.theirs));
    assert_eq!(c.ours.groups.len(), 1, "multibus: {}", c.ours);
    assert_eq!(c.ours.groups[0].paths.len(), 4);
    assert!(c.ours.has_feature("queue_if_no_path"));
    assert_eq!(c.dry["plan"]["queueing"]["fail_after_secs"], 30.0);
    verified_writes(&tb, &c.name)
}

/// An admin's device entry for an array the built-in table does not know:
/// failover, each path a group of its own, in multipath-tools' order.
const FAILOVER_CONF: &str = "\
# The admin's entry for an array of their own.
devices {
\tdevice {
\t\tvendor \"ACME\"
\t\tproduct \"^Failover\"
\t\tpath_grouping_policy failover
\t\tno_path_retry 4
\t}
}
";

#[test]
fn an_admins_failover_entry_gives_a_group_per_path_in_multipath_tools_order() -> Result<()> {
    let tb = boot_or_skip!(plain_array("ACME", "Failover-2"));
    let (disks, wwid) = array_disks(&tb, "ACME")?;
    let c = compare(&tb, &disks[0], &wwid, Some(FAILOVER_CONF))?;
    assert_eq!(differs_only_as_declared(&c)?, Vec::<String>::new());
    assert_eq!(
        in_device_order(&c.ours),
        in_device_order(&c.theirs),
        "the same groups in the same order"
    );
    assert_eq!(c.ours.groups.len(), 4, "failover: {}", c.ours);
    let g = setting(&c.dry, "path_grouping_policy");
    assert_eq!(g["value"], "failover");
    assert_eq!(
        g["origin"],
        "device entry ACME/^Failover, /etc/multipath.conf line 6"
    );
    assert_eq!(c.dry["plan"]["queueing"]["fail_after_secs"], 20.0);
    verified_writes(&tb, &c.name)
}

#[test]
fn a_netapp_lun_takes_its_entrys_features_and_is_named_by_its_wwid() -> Result<()> {
    let tb = boot_or_skip!(plain_array("NETAPP", "LUN"));
    let (disks, wwid) = array_disks(&tb, "NETAPP")?;
    let c = compare(&tb, &disks[0], &wwid, None)?;
    assert_eq!(differs_only_as_declared(&c)?, Vec::<String>::new());
    assert_eq!(in_device_order(&c.ours), in_device_order(&c.theirs));
    // pg_init_retries 50 from the entry, no_path_retry queue; the ontap
    // prioritizer, which this array does not answer: one group.
    assert!(c.ours.has_feature("queue_if_no_path"));
    assert!(c.ours.has_feature("pg_init_retries"), "{}", c.ours);
    assert_eq!(c.ours.groups.len(), 1);
    assert!(c.text.contains("note: prio ontap"), "{}", c.text);
    // The entry says user_friendly_names no: named by WWID, as
    // multipath-tools names it.
    assert_eq!(c.name, wwid);
    assert!(
        c.dry["name_origin"]
            .as_str()
            .is_some_and(|o| o.contains("NETAPP/LUN")),
        "{}",
        c.dry
    );
    verified_writes(&tb, &c.name)
}

#[test]
fn an_array_multipath_tools_does_not_know_differs_only_where_the_dry_run_says() -> Result<()> {
    // No device entry for QEMU: multipath-tools' generic failover, which
    // pathpilot deliberately does not follow.
    let tb = boot_or_skip!(Testbed::builder().paths(2));
    let (disks, wwid) = array_disks(&tb, "QEMU")?;
    let c = compare(&tb, &disks[0], &wwid, None)?;
    assert_eq!(
        differs_only_as_declared(&c)?,
        vec!["path groups".to_string()]
    );
    assert_eq!(groups(&c.ours).len(), 1);
    assert_eq!(groups(&c.theirs).len(), 2);
    assert!(
        c.text.contains("differs: path groups:")
            && c.text.contains("multibus from pathpilot's default"),
        "{}",
        c.text
    );
    verified_writes(&tb, &c.name)
}

/// The guest's answer to a command expected to fail: its one-line error.
fn fails(tb: &Testbed, cmd: &str, code: i32) -> Result<String> {
    let err = guest::fails(tb, cmd, code)?;
    ensure!(
        err.lines().count() == 1,
        "{cmd}: the error is one line: {err}"
    );
    Ok(err)
}

#[test]
fn a_multipath_conf_pathpilot_cannot_follow_is_refused_and_nothing_is_made() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(2));
    let (_, wwid) = array_disks(&tb, "QEMU")?;
    let nothing = |tb: &Testbed| -> Result<()> {
        let ls = tb.sh("dmsetup ls")?;
        ensure!(ls.trim() == "No devices found", "a map was made: {ls}");
        Ok(())
    };
    // A section never closed: multipath-tools would read the blacklist as
    // part of the defaults; pathpilot names the line.
    tb.sh(
        "mkdir -p /etc/multipath; printf 'defaults {\\n\\tuser_friendly_names yes\\n\\n\
         blacklist {\\n\\twwid \".*\"\\n}\\n' > /etc/multipath.conf",
    )?;
    for cmd in [
        "pathpilot create --all",
        "pathpilot create --all --dry-run",
        &format!("pathpilot create --wwid {wwid}"),
    ] {
        let e = fails(&tb, cmd, 2)?;
        assert!(
            e.ends_with(
                "/etc/multipath.conf line 1: 'defaults {' is never closed (a '}' is missing)"
            ),
            "{cmd}: {e}"
        );
        nothing(&tb)?;
    }
    // A bad value of a key pathpilot follows.
    tb.sh(
        "printf 'devices {\\n\\tdevice {\\n\\t\\tvendor QEMU\\n\\t\\tproduct .*\\n\
         \\t\\tfeatures \"1 pg_init_retries 50\"\\n\\t}\\n}\\n' > /etc/multipath.conf",
    )?;
    let e = fails(&tb, "pathpilot create --all", 2)?;
    assert!(
        e.contains("/etc/multipath.conf line 5: features")
            && e.contains("counts 1 word, but 2 follow"),
        "{e}"
    );
    nothing(&tb)?;
    // A blacklist that excludes everything: nothing to map, and why.
    tb.sh("printf 'blacklist {\\n\\twwid \".*\"\\n}\\n' > /etc/multipath.conf")?;
    let e = fails(&tb, "pathpilot create --all", 3)?;
    assert!(
        e.contains("no LUNs to map")
            && e.contains(&format!(
                "wwid {wwid} denied by wwid '.*' (multipath.conf, /etc/multipath.conf line 2)"
            )),
        "{e}"
    );
    nothing(&tb)?;
    // Told to ignore multipath.conf, pathpilot maps the LUN as its own
    // rules say.
    let made = json(&tb.sh("pathpilot create --all --multipath-conf ignore --json")?)?;
    assert_eq!(made["created"][0]["wwid"], wwid.as_str(), "{made}");
    let name = made["created"][0]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    verified_writes(&tb, &name)
}
