//! pathpilot on a host that runs multipathd, in the VM with udevd and
//! multipath-tools' own daemon as a distribution has them
//! (`user_friendly_names yes`, `find_multipaths no`: multipathd builds its
//! default failover map, four groups of one path). Beside it, the daemon
//! tunes the map's queue knobs (read back), follows multipathd's reloads
//! without fighting them, and advises on the table (applied through
//! multipathd with `beside.apply`). Then the map passes to pathpilot and
//! back under verified writes: no I/O error, no rename, no reload; a
//! daemon killed in the middle of either repairs it at its next start.
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use pathpilot_testbed::Testbed;
use pathpilot_tests::{
    boot_or_skip,
    guest::{
        daemon_log, daemon_status, expect_clean, fast_config, parse_fio_terse, poll, start_daemon,
        stop_daemon, verified_writer,
    },
};

/// multipath.conf as a distribution's installer leaves it.
const MULTIPATH_CONF: &str = "defaults {
    user_friendly_names yes
    find_multipaths no
}";

fn boot() -> Result<Option<Testbed>> {
    pathpilot_tests::guest::boot_or_skip(Testbed::builder().caps_mib(&[10.0, 20.0, 40.0, 80.0]))
}

fn multipathd_running(tb: &Testbed) -> Result<bool> {
    Ok(tb.run("pidof multipathd >/dev/null")?.success())
}

/// The map's table and status as the kernel holds them.
fn table_and_status(tb: &Testbed) -> Result<(String, String)> {
    Ok((
        tb.sh("dmsetup table mpatha")?.trim().to_string(),
        tb.sh("dmsetup status mpatha")?.trim().to_string(),
    ))
}

fn event_nr(tb: &Testbed) -> Result<u64> {
    Ok(tb
        .sh("dmsetup info -c --noheadings -o events mpatha")?
        .trim()
        .parse()?)
}

/// Runs `f` while the guest's kernel uevents are recorded; with its answer,
/// how many times a dm device was resumed meanwhile (a reload resumes the
/// map; a path failing or returning sends a change with `DM_ACTION`).
fn resumes_during<T>(tb: &Testbed, f: impl FnOnce() -> Result<T>) -> Result<(T, usize)> {
    let mon = tb
        .spawn("udevadm monitor --kernel --property --subsystem-match=block > /tmp/uevents 2>&1")?;
    std::thread::sleep(Duration::from_secs(1));
    let out = f();
    std::thread::sleep(Duration::from_secs(3));
    // A change of a path disk, last: the recording is known to have
    // caught everything before it.
    tb.sh("echo change > /sys/block/sda/uevent; sleep 1; pkill -INT -x udevadm || true")?;
    let _ = tb.wait_job(&mon, Duration::from_secs(10));
    let log = tb.sh("cat /tmp/uevents")?;
    ensure!(
        log.lines()
            .any(|l| l.contains(" change ") && l.contains("/block/sda (block)")),
        "the uevent recording caught the last event:\n{log}"
    );
    let resumes = log
        .split("\n\n")
        .filter(|ev| {
            let head = ev.trim_start().lines().next().unwrap_or("");
            head.contains(" change ") && head.contains("/dm-") && !ev.contains("DM_ACTION=")
        })
        .count();
    Ok((out?, resumes))
}

fn map_status(tb: &Testbed) -> Result<serde_json::Value> {
    let s = daemon_status(tb)?;
    s["maps"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["name"] == "mpatha"))
        .cloned()
        .context("mpatha in the daemon's status")
}

#[test]
fn beside_multipathd_queue_knobs_are_tuned_its_reloads_followed_and_its_table_advised() -> Result<()>
{
    let tb = boot_or_skip!(Testbed::builder().caps_mib(&[10.0, 20.0, 40.0, 80.0]));
    let table = tb.start_multipathd(MULTIPATH_CONF, &[], "mpatha", 4)?;
    eprintln!("multipathd's map: {}", table.trim());
    ensure!(
        table.contains("multipath 0 0 4 1"),
        "multipathd's default: failover, four groups: {table}"
    );
    start_daemon(&tb, &fast_config("tune"), "")?;
    let m = map_status(&tb)?;
    ensure!(
        m["beside_multipathd"] == true && m["managed"] == false,
        "beside multipathd: {m}"
    );
    // Small sequential writes, where the queue knobs matter (merging at
    // the dm queue).
    let job = tb.spawn(
        "fio --name=w --filename=/dev/mapper/mpatha --rw=write --bs=4k --direct=1 \
         --ioengine=libaio --iodepth=32 --time_based --runtime=200 \
         --output-format=terse --terse-version=3 2>&1",
    )?;
    let tried = poll(&tb, "a queue knob tried", Duration::from_secs(90), |tb| {
        Ok(daemon_status(tb)?["decisions"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["outcome"] == "trying")))
    })?;
    let decisions = daemon_status(&tb)?["decisions"].clone();
    let knobs: Vec<&str> = decisions
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["knob"].as_str())
        .collect();
    eprintln!(
        "beside: first trial after {:.1} s; knobs decided on: {knobs:?}",
        tried.as_secs_f64()
    );
    ensure!(
        !knobs.is_empty()
            && knobs
                .iter()
                .all(|k| ["nr_requests", "scheduler", "queue_depth"].contains(k)),
        "only the queue knobs: {knobs:?}\n{}",
        daemon_log(&tb)
    );
    ensure!(
        tb.sh("dmsetup table mpatha")?.trim() == table.trim().trim_start_matches("mpatha: "),
        "the table is multipathd's, untouched"
    );
    // What the daemon says it holds is what the kernel holds.
    std::thread::sleep(Duration::from_secs(6));
    let s = map_status(&tb)?["settings"].clone();
    let dm = tb
        .sh("b=$(dmsetup info -c --noheadings -o blkdevname mpatha); cat /sys/block/$b/queue/nr_requests")?;
    ensure!(
        s["nr_requests"].as_u64() == dm.trim().parse().ok(),
        "nr_requests read back: status {s}, kernel {dm}"
    );

    // A path event: multipathd reloads the map without one path, then
    // with it again. The daemon follows; it does not fight (no outside
    // change, no change of its own to undo multipathd's) for 60 s.
    let before = daemon_log(&tb).lines().count();
    let gone = tb.sh("multipathd show paths raw format '%d' | head -1")?;
    let gone = gone.trim().to_string();
    let gone_dev = tb
        .sh(&format!("cat /sys/block/{gone}/dev"))?
        .trim()
        .to_string();
    let paths_in_table = |tb: &Testbed| -> Result<usize> {
        Ok(tb.sh("dmsetup table mpatha")?.matches(" 1 1").count())
    };
    tb.sh(&format!("multipathd del path {gone}"))?;
    poll(
        &tb,
        "multipathd's table without the path",
        Duration::from_secs(20),
        |tb| Ok(paths_in_table(tb)? == 3),
    )?;
    std::thread::sleep(Duration::from_secs(5));
    tb.sh(&format!("multipathd add path {gone}"))?;
    poll(
        &tb,
        "multipathd's table with the path again",
        Duration::from_secs(20),
        |tb| Ok(paths_in_table(tb)? == 4),
    )?;
    std::thread::sleep(Duration::from_secs(40));
    let after: Vec<String> = daemon_log(&tb)
        .lines()
        .skip(before)
        .map(String::from)
        .collect();
    eprintln!("after the path event:\n{}", after.join("\n"));
    ensure!(
        after
            .iter()
            .any(|l| l.contains("tuning follows") && l.contains(&format!("-{gone_dev}")))
            && after
                .iter()
                .any(|l| l.contains("tuning follows") && l.contains(&format!("+{gone_dev}"))),
        "the daemon follows multipathd's reloads, without {gone} and with it again"
    );
    let paths = map_status(&tb)?["paths"].as_array().map_or(0, Vec::len);
    ensure!(
        paths == 4,
        "the daemon's map has its four paths again: {paths}"
    );
    ensure!(
        !after
            .iter()
            .any(|l| l.contains("tuning stopped") || l.contains("changed outside")),
        "multipathd's reload is no outside change"
    );
    ensure!(
        tb.sh("dmsetup table mpatha")?.contains("multipath 0 0 4 1"),
        "still multipathd's table"
    );

    // Advice on the table, with what was measured.
    let advice = tb.sh("pathpilot advise mpatha")?;
    eprintln!("{advice}");
    ensure!(
        advice.contains("path_grouping_policy multibus") && advice.contains("carries 100%"),
        "{advice}"
    );
    let conf = tb.sh("pathpilot advise --multipath-conf")?;
    ensure!(
        conf.contains("multipaths {") && conf.contains("alias mpatha"),
        "{conf}"
    );

    // Applied through multipathd (beside.apply): its table becomes one
    // group of four paths, loaded by multipathd.
    let events = event_nr(&tb)?;
    let probe = tb.spawn(
        "fio --name=r --filename=/dev/mapper/mpatha --rw=randread --bs=64k --direct=1 \
         --ioengine=libaio --iodepth=4 --time_based --runtime=40 \
         --output-format=terse --terse-version=3 2>&1",
    )?;
    tb.sh(&format!(
        "cat > /etc/pathpilot/test.toml <<'EOF'\n{}[beside]\napply = true\nEOF\n\
         kill -HUP $(cat /tmp/daemon.pid)",
        fast_config("tune")
    ))?;
    let applied = poll(
        &tb,
        "multipathd's table in one group",
        Duration::from_secs(40),
        |tb| Ok(tb.sh("dmsetup table mpatha")?.contains("multipath 0 0 1 1")),
    )?;
    let probe_out = tb.wait_job(&probe, Duration::from_secs(60))?;
    let f = parse_fio_terse(&probe_out.stdout_str())?;
    let table = tb.sh("dmsetup table mpatha")?;
    let file = tb.sh("cat /etc/multipath/conf.d/pathpilot.conf")?;
    eprintln!(
        "beside.apply: multipathd's table {:.1} s after the SIGHUP: {}; reader's longest \
         read {:.1} ms, error {}; map events {} -> {}",
        applied.as_secs_f64(),
        table.trim(),
        f.read_lat_max_ms,
        f.error,
        events,
        event_nr(&tb)?
    );
    ensure!(f.error == 0, "the reader saw an error: {f:?}");
    ensure!(file.contains("path_grouping_policy multibus"), "{file}");
    ensure!(
        poll(
            &tb,
            "the reconfigure reported",
            Duration::from_secs(10),
            |tb| { Ok(daemon_log(tb).contains("after `multipathd reconfigure`")) }
        )
        .is_ok(),
        "{}",
        daemon_log(&tb)
    );
    tb.sh("pkill -f name=w || true")?;
    let _ = tb.wait_job(&job, Duration::from_secs(30));
    Ok(())
}

#[test]
fn the_map_passes_to_pathpilot_and_back_under_verified_writes() -> Result<()> {
    let Some(tb) = boot()? else { return Ok(()) };
    tb.start_multipathd(MULTIPATH_CONF, &[], "mpatha", 4)?;
    start_daemon(&tb, &fast_config("tune"), "")?;
    // Bad input first: nothing to hand back while multipathd owns it, no
    // map of that name.
    let r = tb.run("pathpilot handback --all")?;
    ensure!(
        !r.success() && r.stderr_str().contains("multipathd is running already"),
        "{}",
        r.stderr_str()
    );
    let r = tb.run("pathpilot takeover mpathz")?;
    ensure!(
        r.code == 3 && r.stderr_str().lines().count() == 1,
        "{}",
        r.stderr_str()
    );
    let job = tb.spawn(&verified_writer(60))?;
    std::thread::sleep(Duration::from_secs(5));
    let (table, status) = table_and_status(&tb)?;
    let events = event_nr(&tb)?;
    let t = Instant::now();
    let (out, resumes) = resumes_during(&tb, || tb.sh("pathpilot takeover --all"))?;
    let took = t.elapsed();
    eprintln!(
        "takeover ({:.0} ms with the uevent recording): {}; dm resumes meanwhile: {resumes}",
        took.as_secs_f64() * 1000.0,
        out.trim()
    );
    ensure!(
        resumes == 0,
        "a takeover reloads nothing: {resumes} resumes"
    );
    ensure!(!multipathd_running(&tb)?, "multipathd stopped");
    let (table2, status2) = table_and_status(&tb)?;
    ensure!(table2 == table, "the table as it was:\n{table}\n{table2}");
    ensure!(event_nr(&tb)? == events, "no reload: {}", status2);
    let m = map_status(&tb)?;
    ensure!(
        m["managed"] == true && m["beside_multipathd"] == false,
        "the daemon's now: {m}"
    );
    let _ = status;
    // Its checker runs now.
    poll(
        &tb,
        "the daemon's checker ready",
        Duration::from_secs(10),
        |tb| {
            Ok(map_status(tb)?["paths"]
                .as_array()
                .is_some_and(|p| p.iter().all(|p| p["checker"] == "ready")))
        },
    )?;
    // Taking over twice: refused, nothing changed.
    let r = tb.run("pathpilot takeover --all")?;
    ensure!(
        !r.success() && r.stderr_str().contains("not running"),
        "{}",
        r.stderr_str()
    );
    std::thread::sleep(Duration::from_secs(10));
    // And back: multipathd starts and adopts the map as it is.
    let events = event_nr(&tb)?;
    let table = tb.sh("dmsetup table mpatha")?;
    let (out, resumes) = resumes_during(&tb, || {
        let out = tb.sh("pathpilot handback --all")?;
        poll(
            &tb,
            "multipathd holds mpatha",
            Duration::from_secs(20),
            |tb| {
                Ok(tb
                    .sh("multipathd show maps raw format '%n'")?
                    .lines()
                    .any(|l| l.trim() == "mpatha"))
            },
        )?;
        Ok(out)
    })?;
    eprintln!("handback: {}; dm resumes meanwhile: {resumes}", out.trim());
    ensure!(multipathd_running(&tb)?, "multipathd runs");
    ensure!(
        resumes == 0,
        "multipathd adopts its own table without a reload: {resumes} resumes"
    );
    let m = map_status(&tb)?;
    ensure!(m["beside_multipathd"] == true, "multipathd's again: {m}");
    eprintln!(
        "handback: map events {events} -> {}, table {}",
        event_nr(&tb)?,
        if tb.sh("dmsetup table mpatha")? == table {
            "as it was"
        } else {
            "reloaded by multipathd"
        }
    );
    let f = expect_clean(&tb, &job, "takeover and handback")?;
    eprintln!(
        "takeover and handback: the writer's longest write {:.1} ms",
        f.write_lat_max_ms
    );
    Ok(())
}

#[test]
fn a_takeover_or_handback_cut_short_is_repaired_at_the_next_start() -> Result<()> {
    let Some(tb) = boot()? else { return Ok(()) };
    tb.start_multipathd(MULTIPATH_CONF, &[], "mpatha", 4)?;
    let job = tb.spawn(&verified_writer(50))?;
    start_daemon(
        &tb,
        &fast_config("tune"),
        "PATHPILOT_FAULT=takeover-after-stop",
    )?;
    let r = tb.run("pathpilot takeover --all")?;
    ensure!(
        !r.success(),
        "the daemon died in the middle: {}",
        r.stdout_str()
    );
    ensure!(!multipathd_running(&tb)?, "multipathd had stopped");
    start_daemon(&tb, &fast_config("tune"), "")?;
    ensure!(
        daemon_log(&tb).contains("a takeover of mpatha was cut short: the maps are pathpilot's"),
        "{}",
        daemon_log(&tb)
    );
    ensure!(map_status(&tb)?["managed"] == true, "pathpilot's");
    stop_daemon(&tb)?;
    start_daemon(
        &tb,
        &fast_config("tune"),
        "PATHPILOT_FAULT=handback-after-release",
    )?;
    let r = tb.run("pathpilot handback --all")?;
    ensure!(!r.success(), "the daemon died in the middle");
    ensure!(!multipathd_running(&tb)?, "multipathd not started yet");
    start_daemon(&tb, &fast_config("tune"), "")?;
    ensure!(
        daemon_log(&tb).contains("a handback of mpatha was cut short: multipathd started"),
        "{}",
        daemon_log(&tb)
    );
    ensure!(multipathd_running(&tb)?, "multipathd runs");
    ensure!(
        map_status(&tb)?["beside_multipathd"] == true,
        "multipathd's"
    );
    expect_clean(&tb, &job, "handovers cut short")?;
    Ok(())
}
