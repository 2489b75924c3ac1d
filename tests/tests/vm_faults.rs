//! Faults under load, with the daemon in tune mode and fio writing with
//! `verify=crc32c` (read back as it goes, `verify_backlog`): a cable pull
//! and its return, every path pulled (queueing, then `no_path_retry`
//! exhausted), a hung path, a flapping path, the daemon SIGKILLed in the
//! middle of a reload, and the kernel refusing a table. In every case:
//! no I/O error, no verify failure, and the figures are printed.
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use pathpilot_testbed::Testbed;
use pathpilot_tests::{
    boot_or_skip,
    guest::{
        TestbedExt, daemon_alive, daemon_log, daemon_status, expect_clean, parse_fio_terse, poll,
        poll_since, start_daemon, stop_daemon, verified_writer, wait_map_ready,
    },
    prom,
};

/// Checker timing of these tests (seconds).
const CHECK_INTERVAL: f64 = 1.0;
const CHECK_TIMEOUT: f64 = 3.0;

/// A config for fast tests: 2 s windows, a 1 s checker with a 3 s
/// timeout, short settle and hold times; `extra` goes under `[maps]`.
fn config(maps_extra: &str) -> String {
    const METRICS: &str = prom::ADDR;
    format!(
        r#"mode = "tune"
window_secs = 2
metrics = "{METRICS}"
[maps]
selector = "service-time"
{maps_extra}
[checker]
interval_secs = {CHECK_INTERVAL}
timeout_secs = {CHECK_TIMEOUT}
[tuner]
windows = 2
settle_windows = 1
reload_min_interval_secs = 2
flap_hold_secs = 6
"#
    )
}

/// (maj:min, active) of every path of mpatha, from the kernel's status.
fn kernel_paths(tb: &Testbed) -> Result<Vec<(String, bool)>> {
    tb.map_paths("mpatha")
}

fn path_state(tb: &Testbed, dev: &str) -> Result<Option<bool>> {
    Ok(kernel_paths(tb)?
        .into_iter()
        .find(|(d, _)| d == dev)
        .map(|(_, a)| a))
}

/// All of `n` paths in the map and active.
fn all_active(tb: &Testbed, n: usize) -> Result<bool> {
    let p = kernel_paths(tb)?;
    Ok(p.len() == n && p.iter().all(|(_, a)| *a))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[test]
fn cable_pull_and_return() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(3).cap_mib(20.0));
    start_daemon(&tb, &config(""), "")?;
    wait_map_ready(&tb, 3)?;
    let pulled = tb.disks()?[1].dev.clone();
    let job = tb.spawn(&verified_writer(25))?;
    std::thread::sleep(Duration::from_secs(5)); // load established
    let t = Instant::now();
    tb.pull_path(1)?;
    let qmp = t.elapsed();
    // Failed in the kernel (or already dropped from the table).
    let failed = poll_since(
        &tb,
        t,
        "the pulled path failed",
        Duration::from_secs(10),
        |tb| Ok(path_state(tb, &pulled)? != Some(true)),
    )?;
    let dropped = poll_since(
        &tb,
        t,
        "the pulled path dropped from the table",
        Duration::from_secs(10),
        |tb| Ok(path_state(tb, &pulled)?.is_none()),
    )?;
    eprintln!(
        "cable pull: QMP device_del {:.0} ms; pull -> failed {:.0} ms; pull -> dropped from the table {:.0} ms",
        ms(qmp),
        ms(failed),
        ms(dropped)
    );
    assert!(
        failed.as_secs_f64() <= CHECK_INTERVAL + 1.0,
        "pull -> failed took {failed:?}, more than the checker interval"
    );

    std::thread::sleep(Duration::from_secs(4)); // I/O on 2 paths a while
    let t = Instant::now();
    tb.restore_path(1)?;
    let back = poll_since(
        &tb,
        t,
        "the returned disk active in the map",
        Duration::from_secs(15),
        |tb| all_active(tb, 3),
    )?;
    let new = tb.disks()?;
    eprintln!(
        "cable return: return -> new disk active in the map {:.0} ms (disks now {})",
        ms(back),
        new.iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    );
    assert!(
        back.as_secs_f64() <= CHECK_INTERVAL + 4.0,
        "return -> active took {back:?}"
    );
    expect_clean(&tb, &job, "cable pull")?;
    Ok(())
}

#[test]
fn all_paths_pulled_queue_then_no_path_retry() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(2).cap_mib(20.0));
    start_daemon(&tb, &config(""), "")?;
    wait_map_ready(&tb, 2)?;

    // 1. queue_if_no_path (the default): I/O waits for a path, nothing lost.
    let job = tb.spawn(&verified_writer(20))?;
    std::thread::sleep(Duration::from_secs(4));
    tb.pull_path(0)?;
    tb.pull_path(1)?;
    poll(&tb, "the map queueing", Duration::from_secs(10), |tb| {
        Ok(daemon_status(tb)?["maps"][0]["state"] == "queueing")
    })?;
    // The shipped rules page someone: no usable path, I/O queued.
    let queued = prom::firing(&prom::scrape(&tb)?, "PathpilotMapAllPathsDownQueueing")?;
    eprintln!("all paths pulled: alerts fired: PathpilotMapAllPathsDownQueueing {queued:?}");
    assert!(
        queued.len() == 1 && queued[0]["map"] == "mpatha",
        "the queueing map is alerted on: {queued:?}"
    );
    // Writes are held, not failed: the job is still running 5 s later.
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        !tb.run(&format!("[ -f /tmp/.pp/job{}.rc ]", job.id))?
            .success(),
        "fio ended while no path existed:\n{}",
        tb.sh(&format!("cat /tmp/.pp/job{}.out", job.id))?
    );
    let t = Instant::now();
    tb.restore_path(0)?;
    let back = poll_since(
        &tb,
        t,
        "a returned path active",
        Duration::from_secs(15),
        |tb| Ok(kernel_paths(tb)?.iter().any(|(_, a)| *a)),
    )?;
    eprintln!(
        "all paths pulled: I/O queued 5 s; return -> path active {:.0} ms",
        ms(back)
    );
    expect_clean(&tb, &job, "all paths pulled, one returned")?;

    // 2. no_path_retry: after 3 s with no path, queued I/O fails with EIO.
    tb.sh(&format!(
        "cat > /etc/pathpilot/test.toml <<'EOF'\n{}EOF\nkill -HUP $(cat /tmp/daemon.pid)",
        config("no_path_retry_secs = 3")
    ))?;
    poll(&tb, "SIGHUP handled", Duration::from_secs(5), |tb| {
        Ok(tb
            .sh("cat /tmp/daemon.log")?
            .contains("SIGHUP: configuration"))
    })?;
    let writer = tb.spawn(
        "fio --name=e --filename=/dev/mapper/mpatha --rw=write --bs=64k --direct=1 \
         --ioengine=libaio --iodepth=4 --size=64m --time_based --runtime=60 \
         --output-format=terse --terse-version=3 2>&1",
    )?;
    std::thread::sleep(Duration::from_secs(2));
    let t = Instant::now();
    tb.pull_path(0)?;
    let out = tb.wait_job(&writer, Duration::from_secs(30))?;
    let failed_after = t.elapsed();
    let f = parse_fio_terse(&out.stdout_str())?;
    eprintln!(
        "no_path_retry_secs = 3: pull -> fio failed {:.0} ms, error {} ({})",
        ms(failed_after),
        f.error,
        if f.error == 5 { "EIO" } else { "?" }
    );
    assert_eq!(f.error, 5, "I/O fails with EIO: {}", out.stdout_str());
    assert!(
        failed_after.as_secs_f64() <= 3.0 + CHECK_INTERVAL + 3.0,
        "fail_if_no_path came late: {failed_after:?}"
    );
    // The map stays, no longer queueing, and new I/O fails at once.
    let table = tb.sh("dmsetup table mpatha")?;
    assert!(!table.contains("queue_if_no_path"), "{table}");
    let t = Instant::now();
    let o = tb.run(
        "fio --name=r --filename=/dev/mapper/mpatha --rw=read --bs=4k --size=4k --direct=1 \
         --output-format=terse --terse-version=3 2>&1",
    )?;
    assert_eq!(
        parse_fio_terse(&o.stdout_str())?.error,
        5,
        "a read with no path: {}",
        o.stdout_str()
    );
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(daemon_status(&tb)?["maps"][0]["state"], "no paths");
    // A path returns: it joins the map, queueing is back, I/O works.
    let t = Instant::now();
    tb.restore_path(1)?;
    let back = poll_since(
        &tb,
        t,
        "queueing back with a path",
        Duration::from_secs(15),
        |tb| {
            Ok(kernel_paths(tb)?.iter().any(|(_, a)| *a)
                && tb.sh("dmsetup table mpatha")?.contains("queue_if_no_path"))
        },
    )?;
    eprintln!(
        "no_path_retry: return -> path active and queue_if_no_path again {:.0} ms",
        ms(back)
    );
    let job = tb.spawn(&verified_writer(6))?;
    expect_clean(&tb, &job, "after no_path_retry, a path returned")?;
    let log = daemon_log(&tb);
    assert!(
        log.contains("fail_if_no_path") && log.contains("queue_if_no_path"),
        "{log}"
    );
    Ok(())
}

#[test]
fn hung_path_is_failed_by_the_checker_timeout() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(3).cap_mib(20.0));
    start_daemon(&tb, &config(""), "")?;
    wait_map_ready(&tb, 3)?;
    let disks = tb.disks()?;
    let hung = disks[1].dev.clone();
    let job = tb.spawn(&verified_writer(30))?;
    std::thread::sleep(Duration::from_secs(4));
    // Under load and healthy: a clean exposition, and no alert.
    let healthy = prom::scrape(&tb)?;
    let lint = prom::check_metrics(&healthy)?;
    assert!(lint.is_empty(), "promtool check metrics: {lint:#?}");
    for alert in ["PathpilotPathDown", "PathpilotMapDegraded"] {
        let fired = prom::firing(&healthy, alert)?;
        assert!(fired.is_empty(), "{alert} on a healthy map: {fired:?}");
    }
    // ~1 byte/s: commands stop completing, nothing errors.
    let t = Instant::now();
    tb.set_caps(1, 1.0 / 1048576.0, 0)?;
    let failed = poll_since(
        &tb,
        t,
        "the hung path failed",
        Duration::from_secs(15),
        |tb| Ok(path_state(tb, &hung)? == Some(false)),
    )?;
    eprintln!(
        "hung path: throttled to ~0 -> failed {:.0} ms (checker interval {CHECK_INTERVAL} s, timeout {CHECK_TIMEOUT} s)",
        ms(failed)
    );
    assert!(
        failed.as_secs_f64() <= CHECK_INTERVAL + CHECK_TIMEOUT + 1.5,
        "the checker timeout failed the path only after {failed:?}"
    );
    assert!(
        daemon_log(&tb).contains("no answer to a 4 KiB read")
            && daemon_log(&tb).contains("with commands outstanding"),
        "{}",
        daemon_log(&tb)
    );
    // The shipped rules fire on what the daemon exports now: the path
    // down and its map degraded, each named.
    let failed_scrape = prom::scrape(&tb)?;
    let down = prom::firing(&failed_scrape, "PathpilotPathDown")?;
    let degraded = prom::firing(&failed_scrape, "PathpilotMapDegraded")?;
    eprintln!(
        "hung path: alerts fired: PathpilotPathDown {down:?}; PathpilotMapDegraded {degraded:?}"
    );
    assert!(
        down.len() == 1 && down[0]["path"] == disks[1].name && down[0]["map"] == "mpatha",
        "PathpilotPathDown names the hung path: {down:?}"
    );
    assert!(
        degraded.len() == 1 && degraded[0]["map"] == "mpatha",
        "PathpilotMapDegraded names the map: {degraded:?}"
    );
    // New I/O goes on over the other two paths. (The verified writer
    // itself waits: fio quiesces its in-flight writes, one of them stuck
    // on the hung path, before each read-back.)
    let sectors_read = |tb: &Testbed, d: &str| -> Result<u64> {
        let s = tb.sh(&format!("cat /sys/block/{d}/stat"))?;
        Ok(s.split_whitespace().nth(2).context("stat")?.parse()?)
    };
    let hung_before = sectors_read(&tb, &disks[1].name)?;
    let o = tb.sh(
        "fio --name=n --filename=/dev/mapper/mpatha --rw=randread --bs=64k --direct=1 \
         --ioengine=libaio --iodepth=4 --time_based --runtime=3 \
         --output-format=terse --terse-version=3 2>&1",
    )?;
    let f = parse_fio_terse(&o)?;
    let mib_s = f.read_kib as f64 / 1024.0 / 3.0;
    eprintln!(
        "hung path: new reads on the map while it was failed: {mib_s:.1} MiB/s, error {}",
        f.error
    );
    assert!(
        mib_s > 1.0 && f.error == 0,
        "new I/O did not continue on the other paths: {o}"
    );
    assert_eq!(
        sectors_read(&tb, &disks[1].name)?,
        hung_before,
        "new reads went to the failed path"
    );
    // It answers again: reinstated.
    let t = Instant::now();
    tb.set_caps(1, 20.0, 0)?;
    let back = poll_since(
        &tb,
        t,
        "the path reinstated",
        Duration::from_secs(15),
        |tb| Ok(path_state(tb, &hung)? == Some(true)),
    )?;
    eprintln!("hung path: caps restored -> reinstated {:.0} ms", ms(back));
    assert!(back.as_secs_f64() <= CHECK_INTERVAL + 2.0, "{back:?}");
    expect_clean(&tb, &job, "hung path")?;
    Ok(())
}

#[test]
fn a_flapping_path_pauses_the_tuner() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(3).cap_mib(20.0));
    start_daemon(&tb, &config(""), "")?;
    wait_map_ready(&tb, 3)?;
    let job = tb.spawn(&verified_writer(55))?;
    std::thread::sleep(Duration::from_secs(6));
    let clock = |tb: &Testbed| -> Result<f64> { Ok(tb.sh("date +%s")?.trim().parse()?) };
    let start_unix = clock(&tb)?;
    let t0 = Instant::now();
    let mut flaps = 0;
    while t0.elapsed() < Duration::from_secs(40) {
        tb.pull_path(1)?;
        std::thread::sleep(Duration::from_secs(2));
        tb.restore_path(1)?;
        std::thread::sleep(Duration::from_secs(2));
        flaps += 1;
    }
    let end_unix = clock(&tb)?;
    eprintln!(
        "flapping: {flaps} pull/return cycles (2 s down, 2 s up) in {:.0} s",
        t0.elapsed().as_secs_f64()
    );
    expect_clean(&tb, &job, "flapping path")?;
    // A pulled path is failed once per pull, not reinstated on a stale
    // ready verdict and failed again by the kernel (ping-pong).
    let log = daemon_log(&tb);
    let reinstated = log.matches("reinstated").count();
    eprintln!("flapping: {reinstated} reinstatements of pulled paths");
    assert!(reinstated <= 2, "a pulled path ping-ponged:\n{log}");
    poll(&tb, "all 3 paths back", Duration::from_secs(15), |tb| {
        all_active(tb, 3)
    })?;
    let log: Vec<serde_json::Value> = tb
        .sh("pathpilot log --json")?
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    // `pathpilot log` shows kept ones; the status has every decision.
    let all = daemon_status(&tb)?["decisions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let during: Vec<&serde_json::Value> = all
        .iter()
        .filter(|d| {
            let u = d["unix"].as_f64().unwrap_or(0.0);
            // One second of grace: the first pull may meet a trial.
            u >= start_unix + 1.0 && u <= end_unix
        })
        .collect();
    let acting: Vec<&&serde_json::Value> =
        during.iter().filter(|d| d["outcome"] != "paused").collect();
    let paused = during.iter().filter(|d| d["outcome"] == "paused").count();
    eprintln!(
        "flapping: {} decisions while flapping, {paused} 'paused', {} acting; {} kept overall",
        during.len(),
        acting.len(),
        log.len()
    );
    for d in &during {
        eprintln!("  {} {} {}", d["outcome"], d["knob"], d["reason"]);
    }
    assert!(
        acting.is_empty(),
        "the tuner acted while the path flapped: {acting:?}"
    );
    let says_so = all.iter().any(|d| {
        d["outcome"] == "paused"
            && d["reason"]
                .as_str()
                .is_some_and(|r| r.contains("path") && r.contains("paused"))
    });
    assert!(says_so, "the decision log says why it paused: {all:?}");
    // Once the paths settle, tuning resumes.
    poll(&tb, "tuning resumed", Duration::from_secs(25), |tb| {
        Ok(daemon_status(tb)?["decisions"].as_array().is_some_and(|v| {
            v.iter()
                .any(|d| d["outcome"] == "resumed" && d["unix"].as_f64().unwrap_or(0.0) > end_unix)
        }))
    })?;
    Ok(())
}

#[test]
fn sigkill_in_the_middle_of_a_reload() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(3).cap_mib(20.0));
    let cfg = config("");
    start_daemon(&tb, &cfg, "")?;
    wait_map_ready(&tb, 3)?;
    // A reload is due whenever a disk appears: start from 2 paths.
    tb.pull_path(2)?;
    poll(
        &tb,
        "the pulled path dropped",
        Duration::from_secs(10),
        |tb| Ok(kernel_paths(tb)?.len() == 2),
    )?;
    stop_daemon(&tb)?;
    let job = tb.spawn(&verified_writer(45))?;
    let info = |tb: &Testbed| -> Result<String> {
        Ok(tb
            .sh("dmsetup info -c --noheadings -o attr,events mpatha")?
            .trim()
            .to_string())
    };
    // pathpilot's reload holds I/O only inside one resume ioctl, so it
    // cannot die with the map suspended; a process that suspends and
    // resumes in two ioctls can (an older pathpilot, a dmsetup script):
    // the map is left so by hand after the kill.
    for step in ["reload-after-load", "left-suspended"] {
        start_daemon(&tb, &cfg, "PATHPILOT_FAULT=reload-after-load")?;
        std::thread::sleep(Duration::from_secs(2)); // I/O through the map
        // A disk appears: the daemon reloads to add it and dies at `step`.
        tb.restore_path(2)?;
        poll(
            &tb,
            "the daemon killed by the hook",
            Duration::from_secs(10),
            |tb| Ok(!daemon_alive(tb)?),
        )?;
        if step == "left-suspended" {
            tb.sh("DM_DISABLE_UDEV=1 dmsetup suspend --noflush --nolockfs mpatha")?;
        }
        let left = info(&tb)?;
        eprintln!("{step}: daemon SIGKILLed; map left as attr,events = {left}");
        // attr: L live table, I inactive table, s suspended.
        let attr = left.split(':').next().unwrap_or("");
        assert!(attr.contains('I'), "{step}: no inactive table: {left}");
        assert_eq!(
            attr.contains('s'),
            step == "left-suspended",
            "{step}: {left}"
        );
        // Undo the cause, so nothing needs a reload at the next start.
        tb.pull_path(2)?;
        let table = tb.sh("dmsetup table mpatha")?;
        let events = left.split(':').nth(1).unwrap_or("").to_string();
        let t = Instant::now();
        start_daemon(&tb, &cfg, "")?;
        let up = t.elapsed();
        // Give it a few checker rounds and scans to do anything it would.
        std::thread::sleep(Duration::from_secs(3));
        let after = info(&tb)?;
        let table_after = tb.sh("dmsetup table mpatha")?;
        eprintln!(
            "{step}: restarted in {:.0} ms; map now attr,events = {after}",
            ms(up)
        );
        let attr = after.split(':').next().unwrap_or("");
        assert!(
            !attr.contains('I') && !attr.contains('s') && attr.contains('L'),
            "{step}: not repaired: {after}\n{}",
            daemon_log(&tb)
        );
        assert_eq!(table, table_after, "{step}: the live table changed");
        // No reload at adoption: the event counter did not move (a resume
        // raises no dm event; a table swap would).
        assert_eq!(
            after.split(':').nth(1).unwrap_or(""),
            events,
            "{step}: the restart reloaded the map\n{}",
            daemon_log(&tb)
        );
        let s = daemon_status(&tb)?;
        assert_eq!(s["maps"][0]["managed"], true, "{s}");
        stop_daemon(&tb)?;
    }
    expect_clean(&tb, &job, "SIGKILL mid-reload")?;
    let log = daemon_log(&tb);
    assert!(
        log.contains("dropped an inactive table") && log.contains("resumed with its live table"),
        "{log}"
    );
    Ok(())
}

#[test]
fn a_table_the_kernel_refuses_leaves_the_old_one_live() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(2).cap_mib(20.0));
    // Make a selector module missing: unload it and hide it from modprobe.
    let hidden = tb.sh("rmmod dm_historical_service_time 2>/dev/null; \
         f=$(find /lib/modules -name 'dm-historical-service-time.ko*' | head -1); \
         [ -n \"$f\" ] && mv \"$f\" /tmp/ && depmod 2>/dev/null; \
         [ -e /sys/module/dm_historical_service_time ] && echo builtin || echo hidden")?;
    assert_eq!(hidden.trim(), "hidden", "cannot make the module missing");
    start_daemon(&tb, &config(""), "")?;
    wait_map_ready(&tb, 2)?;
    // The tuner must not change the map under the comparison.
    tb.sh("pathpilot ctl '{\"cmd\":\"pause\",\"map\":\"mpatha\"}' >/dev/null")?;
    let job = tb.spawn(&verified_writer(20))?;
    std::thread::sleep(Duration::from_secs(3));
    let snapshot = "dmsetup table; dmsetup info -c --noheadings -o name,attr; \
                    cat /sys/block/dm-0/queue/max_sectors_kb /sys/block/dm-0/queue/nr_requests \
                        /sys/block/dm-0/queue/scheduler /sys/block/sd*/device/queue_depth";
    let before = tb.sh(snapshot)?;
    let o = tb.run("pathpilot reload mpatha --selector historical-service-time")?;
    let err = o.stderr_str();
    eprintln!("refused table: exit {}, stderr: {}", o.code, err.trim());
    assert_eq!(o.code, 4, "exit 4 (refused by the kernel): {err}");
    assert!(
        err.contains("DM_TABLE_LOAD") && err.contains("dm-historical-service-time"),
        "{err}"
    );
    let after = tb.sh(snapshot)?;
    assert_eq!(
        before, after,
        "the old table is live and nothing is left loaded"
    );
    // Bad input where device-mapper exists: one line, a non-zero exit,
    // nothing on stdout, and nothing changed.
    for (cmd, code) in [
        ("list nosuchmap", 3),
        ("reload nosuchmap --selector service-time", 3),
        ("reload mpatha --remove-path sdz", 3),
        ("reload mpatha --weights sda=101", 2),
        ("path fail sdz", 3),
        ("path reinstate 8:250 --map mpatha", 0),
        ("remove nosuchmap", 3),
        ("remove mpatha", 4),
        ("set mpatha max_sectors_kb=0", 0),
        ("set sda queue_depth=100000", 0),
    ] {
        let o = tb.run(&format!("pathpilot {cmd}"))?;
        let err = o.stderr_str();
        eprintln!(
            "bad input: pathpilot {cmd}: exit {}: {}",
            o.code,
            err.trim()
        );
        assert!(
            o.code != 0 && (code == 0 || o.code == code),
            "pathpilot {cmd}: exit {} (want {code})",
            o.code
        );
        assert_eq!(err.lines().count(), 1, "pathpilot {cmd}: {err}");
        assert!(o.stdout.is_empty(), "pathpilot {cmd}: {}", o.stdout_str());
    }
    assert_eq!(before, tb.sh(snapshot)?, "bad input changed something");
    assert!(daemon_alive(&tb)?);
    expect_clean(&tb, &job, "refused table")?;
    Ok(())
}

/// A path saturated at queue_depth 1 behind a shared IOPS budget keeps the
/// checker's read waiting behind dm's queued writes for longer than the
/// timeout; the device still completes commands, so the path must not be
/// failed (it was, before the checker asked the observer).
#[test]
fn a_saturated_path_is_slow_not_failed() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(4).shared_iops(100));
    // advise: the checker acts, the tuner leaves queue_depth alone.
    let cfg = config("").replace("mode = \"tune\"", "mode = \"advise\"");
    start_daemon(&tb, &cfg, "")?;
    wait_map_ready(&tb, 4)?;
    tb.sh("for q in /sys/block/sd*/device/queue_depth; do echo 1 > $q; done")?;
    // Whether a check lands behind enough queued writes to wait past its
    // timeout is a matter of timing: up to three rounds of 20 s, until one
    // did (no path may be failed in any of them).
    let mut waits = 0;
    for round in 1..=3 {
        let job = tb.spawn(
            "fio --name=s --filename=/dev/mapper/mpatha --rw=write --bs=4k --direct=1 \
             --ioengine=libaio --iodepth=32 --size=256m --time_based --runtime=20 \
             --output-format=terse --terse-version=3 2>&1",
        )?;
        let t = Instant::now();
        let mut failed_seen = vec![];
        while t.elapsed() < Duration::from_secs(20) {
            for (d, active) in kernel_paths(&tb)? {
                if !active && !failed_seen.contains(&d) {
                    failed_seen.push(d);
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let out = tb.wait_job(&job, Duration::from_secs(60))?;
        let f = parse_fio_terse(&out.stdout_str())?;
        let log = daemon_log(&tb);
        waits = log.matches("behind queued I/O").count();
        eprintln!(
            "saturated paths, round {round}: fio wrote {} KiB, error {}; checks that waited past \
             the {CHECK_TIMEOUT} s timeout behind a device still answering: {waits}; paths \
             failed: {failed_seen:?}",
            f.write_kib, f.error
        );
        assert!(
            failed_seen.is_empty(),
            "a saturated path was failed:\n{log}"
        );
        assert!(!log.contains("-> timeout"), "{log}");
        assert_eq!(f.error, 0);
        if waits > 0 {
            break;
        }
    }
    let log = daemon_log(&tb);
    // The case happened: without this the test proves nothing.
    assert!(waits > 0, "no check waited past its timeout:\n{log}");
    Ok(())
}
