//! Maps through pathpilot in the VM testbed: create, list,
//! reload, messages, knobs and remove against real dm-multipath, checked
//! against `dmsetup` and multipath-tools' `multipath -ll` (no daemon).
//! Each test boots its own VM; the testbed lock runs them one at a time.
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use pathpilot::mpath::{MultipathStatus, MultipathTable};
use pathpilot_testbed::Testbed;
use pathpilot_tests::boot_or_skip;
use pathpilot_tests::guest::{self, TestbedExt};
use serde_json::Value;

const WWID: &str = "35000c500deadbeef";

fn json(s: &str) -> Result<Value> {
    serde_json::from_str(s).with_context(|| format!("not JSON: {s}"))
}

/// `dmsetup table` of a map, without the kernel's trailing space.
fn dm_table(tb: &Testbed, map: &str) -> Result<String> {
    Ok(tb.sh(&format!("dmsetup table {map}"))?.trim().to_string())
}

fn dm_line(tb: &Testbed, map: &str) -> Result<String> {
    Ok(format!("{map}: {}", dm_table(tb, map)?))
}

fn create_all(tb: &Testbed, selector: &str) -> Result<Value> {
    tb.wait_disks(4, Duration::from_secs(10))?;
    let out = tb.sh(&format!(
        "pathpilot create --all --selector {selector} --json"
    ))?;
    json(&out)
}

/// The guest's answer to a command expected to fail: a short error
/// containing `needle`.
fn fails(tb: &Testbed, cmd: &str, code: i32, needle: &str) -> Result<()> {
    let err = guest::fails(tb, cmd, code)?;
    ensure!(
        err.contains(needle),
        "{cmd}: stderr lacks {needle:?}: {err}"
    );
    ensure!(
        err.lines().count() <= 3,
        "{cmd}: the error should be short: {err}"
    );
    Ok(())
}

#[test]
fn create_all_agrees_with_multipath_and_dmsetup() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(4));
    let rep = create_all(&tb, "service-time")?;
    let created = rep["created"].as_array().context("created[]")?;
    ensure!(created.len() == 1, "one LUN, one map: {rep}");
    let c = &created[0];
    ensure!(c["name"] == "mpatha" && c["wwid"] == WWID, "{c}");
    ensure!(c["uuid"] == format!("mpath-{WWID}"), "{c}");
    ensure!(c["readback"]["exact"] == true, "{c}");

    // dmsetup sees the same table, UUID and name.
    let table = dm_table(&tb, "mpatha")?;
    ensure!(
        table == c["table"].as_str().unwrap_or_default(),
        "{table} vs {c}"
    );
    ensure!(
        table
            == "0 2097152 multipath 0 0 1 1 service-time 0 4 2 8:0 1 1 8:16 1 1 8:32 1 1 8:48 1 1",
        "{table}"
    );
    let uuid = tb.sh("dmsetup info -c --noheadings -o uuid mpatha")?;
    ensure!(uuid.trim() == format!("mpath-{WWID}"), "{uuid}");

    // multipath -ll (no daemon, no udev db) recognises it as pathpilot lists it.
    let ours = tb.sh("pathpilot list")?;
    let theirs = tb.sh("multipath -ll 2>/dev/null")?;
    eprintln!("pathpilot list:\n{ours}\nmultipath -ll:\n{theirs}");
    let head = format!("mpatha ({WWID}) dm-0 QEMU,QEMU HARDDISK");
    let hctl: std::collections::HashMap<String, String> = tb
        .sh("for d in sda sdb sdc sdd; do echo $d $(basename $(readlink /sys/block/$d/device)); done")?
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    for (who, text) in [("pathpilot", &ours), ("multipath", &theirs)] {
        let lines: Vec<&str> = text.lines().collect();
        ensure!(
            lines.first().is_some_and(|l| l.trim() == head),
            "{who}: {text}"
        );
        ensure!(
            lines
                .get(1)
                .is_some_and(|l| l.starts_with("size=1.0G features='0' hwhandler='0' wp=rw")),
            "{who}: {text}"
        );
        ensure!(text.contains("policy='service-time 0'"), "{who}: {text}");
        for (sd, dev) in [
            ("sda", "8:0"),
            ("sdb", "8:16"),
            ("sdc", "8:32"),
            ("sdd", "8:48"),
        ] {
            // The guest numbers its SCSI hosts in the order the controllers
            // probe, which varies from boot to boot: sysfs says which.
            let want = format!("{} {sd} {dev}", hctl.get(sd).map_or("?", String::as_str));
            let line = lines
                .iter()
                .find(|l| {
                    l.split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ")
                        .contains(&want)
                })
                .with_context(|| format!("{who}: no line for {want}: {text}"))?;
            ensure!(line.contains("active ready running"), "{who}: {line}");
        }
    }
    // A second create finds nothing new and says why.
    let again = json(&tb.sh("pathpilot create --all --json")?)?;
    ensure!(
        again["created"].as_array().is_some_and(|a| a.is_empty()),
        "{again}"
    );
    ensure!(
        again["skipped"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("mpatha")),
        "{again}"
    );

    // A map made by dmsetup is listed as the kernel has it.
    tb.sh("dmsetup create other --table '0 2097152 multipath 1 queue_if_no_path 0 2 1 round-robin 0 1 1 8:0 1 queue-length 0 1 1 8:16 1'")?;
    let l = json(&tb.sh("pathpilot list other --json")?)?;
    let m = &l[0];
    ensure!(m["name"] == "other" && m["wwid"].is_null(), "{m}");
    ensure!(
        m["features"] == "1 queue_if_no_path" && m["hwhandler"] == "0",
        "{m}"
    );
    ensure!(m["groups"][0]["policy"] == "round-robin 0", "{m}");
    ensure!(m["groups"][1]["policy"] == "queue-length 0", "{m}");
    ensure!(m["groups"][0]["paths"][0]["name"] == "sda", "{m}");
    ensure!(m["groups"][1]["paths"][0]["dev"]["minor"] == 16, "{m}");
    ensure!(m["table"] == dm_table(&tb, "other")?, "{m}");
    let st = tb.sh("dmsetup status other")?;
    ensure!(m["status"] == st.trim(), "{m} vs {st}");

    // remove: refused while open, with the reason; then done.
    let o = tb.run("exec 3</dev/dm-1; pathpilot remove other; echo rc=$?")?;
    ensure!(o.stdout_str().contains("rc=4"), "{o:?}");
    ensure!(
        o.stderr_str().contains("in use (open count 1"),
        "{}",
        o.stderr_str()
    );
    tb.sh("pathpilot remove other")?;
    fails(&tb, "pathpilot remove other", 3, "no map named 'other'")?;
    ensure!(!tb.sh("dmsetup ls")?.contains("other"), "other still there");
    Ok(())
}

#[test]
fn reloads_under_fio_verify_read_back_as_requested() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(4).cap_mib(10.0));
    create_all(&tb, "round-robin")?;
    // Writes with a checksum, verified while writing (backlog) and at the end.
    let fio = tb.spawn(
        "fio --name=v --filename=/dev/mapper/mpatha --rw=randwrite --bs=64k --size=160M \
         --direct=1 --ioengine=libaio --iodepth=8 --verify=crc32c --verify_backlog=32 \
         --verify_fatal=1 --do_verify=1 --output-format=json",
    )?;
    std::thread::sleep(Duration::from_millis(1500));
    let steps: [(&str, &str); 4] = [
        (
            "--selector service-time --weights sda=10,sdb=20,sdc=40,sdd=80",
            "0 2097152 multipath 0 0 1 1 service-time 0 4 2 8:0 1 10 8:16 1 20 8:32 1 40 8:48 1 80",
        ),
        (
            "--selector queue-length",
            "0 2097152 multipath 0 0 1 1 queue-length 0 4 1 8:0 1 8:16 1 8:32 1 8:48 1",
        ),
        (
            "--selector round-robin --groups 'sda,sdb;sdc,sdd'",
            "0 2097152 multipath 0 0 2 1 round-robin 0 2 1 8:0 1 8:16 1 round-robin 0 2 1 8:32 1 8:48 1",
        ),
        (
            "--groups 'sda,sdb,sdc,sdd'",
            "0 2097152 multipath 0 0 1 1 round-robin 0 4 1 8:0 1 8:16 1 8:32 1 8:48 1",
        ),
    ];
    for (args, want) in steps {
        let r = json(&tb.sh(&format!("pathpilot reload mpatha {args} --json"))?)?;
        ensure!(r["new_table"] == want, "{args}: planned {}", r["new_table"]);
        ensure!(r["readback"]["exact"] == true, "{args}: {r}");
        ensure!(r["readback"]["applied"] == want, "{args}: {r}");
        ensure!(
            dm_table(&tb, "mpatha")? == want,
            "{args}: dmsetup disagrees"
        );
        let stall = r["timing"]["stall"].as_u64().unwrap_or(0);
        eprintln!("reload {args}: stall {} ms", stall as f64 / 1000.0);
        ensure!(stall > 0, "{r}");
        let running = tb.run(&format!("kill -0 {}", fio.pid))?.success();
        ensure!(
            running,
            "fio ended before the reload '{args}': the test lost its load"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let o = tb.wait_job(&fio, Duration::from_secs(240))?;
    ensure!(
        o.success(),
        "fio failed: {}\n{}",
        o.stdout_str(),
        o.stderr_str()
    );
    let out = o.stdout_str();
    let start = out.find('{').context("no fio JSON")?;
    let v = json(&out[start..])?;
    let job = &v["jobs"][0];
    ensure!(job["error"] == 0, "fio error: {job}");
    ensure!(job["write"]["io_bytes"].as_u64().unwrap_or(0) > 0, "{job}");
    ensure!(
        !out.contains("verify:") && !o.stderr_str().contains("verify"),
        "{out}"
    );
    // The map never lost a path on the way.
    let st = tb.sh("dmsetup status mpatha")?;
    let st = MultipathStatus::parse_line(st.trim())?;
    ensure!(st.paths().all(|p| p.fail_count == 0), "{st}");
    Ok(())
}

#[test]
fn repeat_count_reports_pinning_and_reads_back_1() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(4));
    create_all(&tb, "service-time")?;
    let text = tb.sh("pathpilot reload mpatha --repeat-count 100")?;
    ensure!(
        text.contains("pinned to 1 by this kernel (>= 4.6)"),
        "{text}"
    );
    ensure!(!text.contains("as requested"), "{text}");
    let table = dm_table(&tb, "mpatha")?;
    let t = MultipathTable::parse_line(&table)?;
    ensure!(
        t.paths().all(|p| p.args.repeat_count() == Some(1)),
        "{table}"
    );

    let r = json(&tb.sh("pathpilot reload mpatha --repeat-count 1000 --json")?)?;
    let notes = r["readback"]["notes"].as_array().context("notes")?;
    ensure!(notes.len() == 4, "{r}");
    ensure!(
        notes
            .iter()
            .all(|n| n["kind"] == "pinned" && n["applied"] == "1" && n["requested"] == "1000"),
        "{r}"
    );
    ensure!(r["readback"]["exact"] == false, "{r}");
    Ok(())
}

#[test]
fn bad_input_changes_nothing() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(4));
    create_all(&tb, "service-time")?;
    let before = dm_line(&tb, "mpatha")?;
    let cases: &[(&str, i32, &str)] = &[
        (
            "pathpilot reload mpatha --selector fastest",
            2,
            "unknown path selector 'fastest'",
        ),
        (
            "pathpilot reload mpatha --weights sdb=101",
            2,
            "out of range",
        ),
        (
            "pathpilot reload mpatha --weights 9:9=5",
            2,
            "not part of the map",
        ),
        (
            "pathpilot reload mpatha --weights sdz=5",
            3,
            "no such block device: sdz",
        ),
        (
            "pathpilot reload mpatha --remove-path sda --remove-path sdb --remove-path sdc --remove-path sdd",
            2,
            "last path",
        ),
        (
            "pathpilot reload mpathzz --selector round-robin",
            3,
            "no map named 'mpathzz'",
        ),
        (
            "pathpilot reload mpatha --groups 'sda,,sdb'",
            2,
            "empty path name",
        ),
        (
            "pathpilot reload mpatha --groups 'sda;sda'",
            2,
            "appears twice",
        ),
        ("pathpilot reload mpatha --groups ';'", 2, "is empty"),
        (
            "pathpilot reload mpatha --selector round-robin --weights sda=5",
            2,
            "service-time",
        ),
        ("pathpilot path fail sdz", 3, "no such block device"),
        (
            "pathpilot path fail 9:9",
            3,
            "not a path of any multipath map",
        ),
        ("pathpilot set mpatha scheduler=nosuch", 2, "not available"),
        ("pathpilot set mpatha rr_min_io=5", 2, "unknown knob"),
        ("pathpilot set sdb nr_requests=8", 2, "name the map instead"),
        ("pathpilot remove mpathzz", 3, "no map named"),
        (
            "pathpilot create --wwid 3nosuch",
            3,
            "no usable paths with WWID 3nosuch",
        ),
    ];
    for (cmd, code, needle) in cases {
        fails(&tb, cmd, *code, needle)?;
        let after = dm_line(&tb, "mpatha")?;
        ensure!(
            after == before,
            "{cmd} changed the map: {before} -> {after}"
        );
    }
    // A dry run shows the change and makes none.
    let o = tb.sh("pathpilot reload mpatha --selector queue-length --dry-run")?;
    ensure!(
        o.contains("+ group 1: policy='queue-length 0'") && o.contains("dry run"),
        "{o}"
    );
    ensure!(dm_line(&tb, "mpatha")? == before, "dry run changed the map");
    // Messages and knobs, read back.
    let o = json(&tb.sh("pathpilot path fail sdb --json")?)?;
    ensure!(
        o["before"] == "active" && o["after"] == "failed" && o["map"] == "mpatha",
        "{o}"
    );
    let st = MultipathStatus::parse_line(tb.sh("dmsetup status mpatha")?.trim())?;
    ensure!(
        st.paths().filter(|p| p.fail_count == 1).count() == 1,
        "{st}"
    );
    let o = json(&tb.sh("pathpilot path reinstate /dev/sdb --json")?)?;
    ensure!(o["after"] == "active", "{o}");
    let o = json(&tb.sh("pathpilot set mpatha nr_requests=64 max_sectors_kb=512 --json")?)?;
    ensure!(o[0]["after"] == "64" && o[0]["outcome"] == "applied", "{o}");
    ensure!(o[1]["after"] == "512", "{o}");
    ensure!(
        tb.sh("cat /sys/block/dm-0/queue/nr_requests")?.trim() == "64",
        "nr_requests"
    );
    let o = json(&tb.sh("pathpilot set mpatha queue_depth=4 --json")?)?;
    ensure!(o.as_array().is_some_and(|a| a.len() == 4), "{o}");
    ensure!(
        tb.sh("cat /sys/block/sdc/device/queue_depth")?.trim() == "4",
        "queue_depth"
    );
    fails(&tb, "pathpilot set sdb queue_depth=100000", 4, "refused")?;
    Ok(())
}

/// Real table/status strings for every selector and feature this kernel
/// ships round-trip through the model exactly (the same strings are in
/// controller/tests/corpus/).
#[test]
fn live_strings_round_trip_through_the_model() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(4));
    tb.wait_disks(4, Duration::from_secs(10))?;
    let tables = [
        "0 0 1 1 round-robin 0 4 1 8:0 1 8:16 1 8:32 1 8:48 1",
        "1 queue_if_no_path 0 2 1 queue-length 0 2 1 8:0 1 8:16 1 queue-length 0 2 1 8:32 1 8:48 1",
        "0 0 2 2 service-time 0 2 2 8:0 1 0 8:16 1 100 service-time 0 2 2 8:32 1 1 8:48 1 1",
        "4 pg_init_retries 50 pg_init_delay_msecs 2500 0 1 1 round-robin 0 2 1 8:0 1 8:16 1",
        "2 queue_mode bio 0 1 1 round-robin 0 2 1 8:0 1 8:16 1",
        "1 retain_attached_hw_handler 0 1 1 service-time 0 2 0 8:0 8:16",
    ];
    for (i, t) in tables.iter().enumerate() {
        let name = format!("rt{i}");
        tb.sh(&format!(
            "dmsetup create {name} --table '0 2097152 multipath {t}' && \
             dmsetup message {name} 0 fail_path 8:16 && dd if=/dev/mapper/{name} of=/dev/null bs=4k count=1 iflag=direct 2>/dev/null; true"
        ))?;
        for (what, s) in [
            ("table", tb.sh(&format!("dmsetup table {name}"))?),
            ("status", tb.sh(&format!("dmsetup status {name}"))?),
        ] {
            let line = s.trim_end_matches('\n');
            let rendered = if what == "table" {
                MultipathTable::parse_line(line)?.render_line()
            } else {
                MultipathStatus::parse_line(line)?.render_line()
            };
            ensure!(
                rendered == line.trim_end(),
                "{what} round trip: {line:?} -> {rendered:?}"
            );
        }
        tb.sh(&format!("dmsetup remove {name}"))?;
    }
    Ok(())
}

/// Under service-time at a low path queue_depth, dm re-dispatches a request
/// each time its clone bounces off a busy path (hundreds of times a second
/// here): `pathpilot stat` must count each request of the map once, so the
/// map's bytes are what fio wrote, not a multiple of it. Each request of
/// the map reaches a path as exactly one clone that completes: the paths'
/// `remapped` add up to the map's requests, bounced clones not counted,
/// and neither is a path's own readahead (which carries a clone's failfast
/// flag, and its REQ_NOMERGE too where a split gives it), while the map's
/// readahead, cloned (REQ_RAHEAD with a clone's flags), is.
#[test]
fn a_maps_requests_count_once_however_often_they_bounce() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(4).shared_iops(400));
    create_all(&tb, "service-time")?;
    let dm = tb
        .sh("dmsetup info -c --noheadings -o minor mpatha")?
        .trim()
        .to_string();
    tb.sh("for q in /sys/block/sd*/device/queue_depth; do echo 2 > $q; done")?;
    let out = tb.sh(&format!(
        "pathpilot stat dm-{dm} $(ls /sys/block/dm-{dm}/slaves) --interval 1 --json \
         > /tmp/stat.json 2>/tmp/stat.err & S=$!\n\
         sleep 2\n\
         fio --name=b --filename=/dev/mapper/mpatha --rw=write --bs=4k --direct=1 \
         --ioengine=libaio --iodepth=32 --size=256m --time_based --runtime=6 \
         --output-format=terse --terse-version=3 | cut -d';' -f47\n\
         dd if=/dev/mapper/mpatha of=/dev/null bs=1M count=8 status=none\n\
         dd if=/dev/$(ls /sys/block/dm-{dm}/slaves | head -1) of=/dev/null bs=1M count=8 \
         skip=64 status=none\n\
         sleep 2.5; kill -INT $S; wait $S"
    ))?;
    let fio_bytes: u64 = out.trim().parse::<u64>().context("fio write KiB")? * 1024;
    let lines = tb.sh("cat /tmp/stat.json")?;
    let (mut bytes, mut ios, mut requeues) = (0u64, 0u64, 0u64);
    let (mut map_completed, mut map_remapped, mut clones) = (0u64, 0u64, 0u64);
    let mut paths = std::collections::BTreeSet::new();
    for l in lines.lines().filter(|l| !l.trim().is_empty()) {
        let v = json(l)?;
        let remapped = v["remapped"].as_u64().context("remapped")?;
        if v["device"] != format!("dm-{dm}").as_str() {
            clones += remapped;
            paths.insert(v["device"].to_string());
            continue;
        }
        bytes += v["write_bytes"].as_u64().context("write_bytes")?;
        ios += v["write_ios"].as_u64().context("write_ios")?;
        requeues += v["requeues"].as_u64().unwrap_or(0);
        map_completed += v["completed"].as_u64().context("completed")?;
        map_remapped += remapped;
    }
    eprintln!(
        "the map completed {map_completed} requests; its {} paths completed {clones} clones",
        paths.len()
    );
    ensure!(paths.len() == 4, "stat reported paths {paths:?}");
    ensure!(
        clones == map_completed && map_remapped == 0,
        "the paths' remapped add up to {clones}, the map completed {map_completed} \
         requests (and counts {map_remapped} clones of its own)"
    );
    let ratio = bytes as f64 / fio_bytes as f64;
    eprintln!(
        "bouncing map: fio wrote {fio_bytes} B; pathpilot stat counted {bytes} B in {ios} \
         requests ({ratio:.3}x), {requeues} requeues"
    );
    // Requests merge at the dm queue, so bytes, not request counts, are
    // comparable; a bounced request counted again would show as 2-6x.
    ensure!(
        (0.97..=1.03).contains(&ratio),
        "the map's bytes are {ratio:.3}x what fio wrote"
    );
    Ok(())
}

/// A zoned device's zone commands (open, close, finish, reset: requests
/// with no data) are requests the device executes: the probes count them as
/// the kernel's diskstats do (by the operation's direction, with no bytes),
/// and each one's completion takes it out of the in-flight count. A rule
/// that took every completion with nothing left to transfer for a second
/// end of one already counted missed them all.
#[test]
fn zone_commands_are_counted_as_the_kernel_counts_them() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(1));
    // 1 GiB in 4 MiB zones, not backed by memory: zone 0 is written, read
    // back (as zeroes), and zones are opened, closed, finished and reset.
    tb.sh("modprobe null_blk nr_devices=1 zoned=1 zone_size=4 gb=1 && test -b /dev/nullb0")
        .context("a zoned null_blk device in the guest")?;
    let zone = 4 * 1024 * 1024 / 512;
    let out = tb.sh(&format!(
        "pathpilot stat nullb0 --interval 1 --json > /tmp/z.json 2>/tmp/z.err & S=$!\n\
         sleep 1.5\n\
         k0=$(cat /sys/block/nullb0/stat)\n\
         blkzone reset /dev/nullb0\n\
         dd if=/dev/zero of=/dev/nullb0 bs=64k count=16 oflag=direct status=none\n\
         for z in 1 2 3; do blkzone open -o $((z*{zone})) -c 1 /dev/nullb0; done\n\
         for z in 1 2; do blkzone close -o $((z*{zone})) -c 1 /dev/nullb0; done\n\
         blkzone finish -o $((3*{zone})) -c 1 /dev/nullb0\n\
         dd if=/dev/nullb0 of=/dev/null bs=64k count=16 iflag=direct status=none\n\
         for z in 0 1 2 3; do blkzone reset -o $((z*{zone})) -c 1 /dev/nullb0; done\n\
         sleep 2.5\n\
         k1=$(cat /sys/block/nullb0/stat)\n\
         kill -INT $S; wait $S\n\
         echo $k0; echo $k1; blkzone report -c 4 /dev/nullb0 >&2"
    ))?;
    let kernel: Vec<Vec<u64>> = out
        .lines()
        .rev()
        .take(2)
        .map(|l| {
            l.split_whitespace()
                .map(|v| v.parse().unwrap_or(0))
                .collect()
        })
        .collect();
    let (k1, k0) = (&kernel[0], &kernel[1]);
    let kd = |i: usize| k1[i] - k0[i];
    let lines = tb.sh("cat /tmp/z.json; cat /tmp/z.err >&2")?;
    let (mut reads, mut writes, mut wbytes, mut untraced, mut peak) = (0, 0, 0, 0, 0);
    let mut last_inflight = None;
    for l in lines.lines().filter(|l| !l.trim().is_empty()) {
        let v = json(l)?;
        let n = |k: &str| v[k].as_u64().with_context(|| format!("{k} in {l}"));
        reads += n("read_ios")?;
        writes += n("write_ios")?;
        wbytes += n("write_bytes")?;
        untraced += n("untraced_ios")?;
        peak = peak.max(n("inflight_max")?);
        last_inflight = Some(n("inflight")?);
    }
    eprintln!(
        "zoned: pathpilot reads {reads} writes {writes} ({wbytes} B) untraced {untraced} \
         peak {peak}; kernel reads {} writes {} ({} sectors)",
        kd(0),
        kd(4),
        kd(6)
    );
    // 16 data writes and 16 reads, and the zone commands, which the kernel
    // counts as writes (their operations are odd, as writes' are): the
    // probes must count each one, with no count raised from sysfs.
    ensure!(
        kd(4) > 16,
        "the kernel counted zone commands: {k0:?} -> {k1:?}"
    );
    ensure!(
        (reads, writes, wbytes) == (kd(0), kd(4), kd(6) * 512),
        "pathpilot counted {reads} reads and {writes} writes ({wbytes} B); the kernel {} and {} \
         ({} B)",
        kd(0),
        kd(4),
        kd(6) * 512
    );
    ensure!(
        untraced == 0,
        "every completion reached the probes: {untraced} did not"
    );
    // One command at a time: a completion not counted out leaves the count
    // high until sysfs puts it right.
    ensure!(
        peak <= 1,
        "in-flight peak {peak} with one request at a time"
    );
    ensure!(
        last_inflight == Some(0),
        "in flight at the end: {last_inflight:?}"
    );
    Ok(())
}
