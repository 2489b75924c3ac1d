//! pathpilot beside the people and programs around it, with the daemon in
//! tune mode: a path failed by hand stays failed across reloads and
//! restarts; an operator's `reload` goes through the daemon and is kept
//! (pinned) until released; a change made behind the daemon's back stops
//! tuning and is logged; a corrupt state file stops the start; one daemon
//! per host; one writer per map.
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use pathpilot_testbed::Testbed;
use pathpilot_tests::{
    boot_or_skip,
    guest::{
        TestbedExt, daemon_log, daemon_status, expect_clean, multipath_table, poll, start_daemon,
        stop_daemon, verified_writer, wait_map_ready,
    },
};

fn config() -> String {
    r#"mode = "tune"
window_secs = 2
metrics = "off"
[maps]
selector = "service-time"
[checker]
interval_secs = 1
timeout_secs = 3
[tuner]
windows = 2
settle_windows = 1
reload_min_interval_secs = 2
flap_hold_secs = 6
"#
    .into()
}

/// `dmsetup status` of mpatha: (dev, active) per path.
fn states(tb: &Testbed) -> Result<Vec<(String, bool)>> {
    tb.map_paths("mpatha")
}

fn is_failed(tb: &Testbed, dev: &str) -> Result<bool> {
    Ok(states(tb)?.iter().any(|(d, a)| d == dev && !a))
}

fn log(tb: &Testbed) -> String {
    tb.sh("pathpilot log").unwrap_or_default()
}

#[test]
fn a_path_failed_by_hand_stays_failed_across_reloads_and_restarts() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(3).cap_mib(20.0));
    start_daemon(&tb, &config(), "")?;
    wait_map_ready(&tb, 3)?;
    let job = tb.spawn(&verified_writer(75))?;
    std::thread::sleep(Duration::from_secs(3));
    // Path 0 by hand, path 2 leaves and returns, path 2 goes offline: one
    // disk each, whatever names the guest gave them.
    let disks = tb.disks()?;
    let (hand, hdev) = (disks[0].name.clone(), disks[0].dev.clone());
    let out = tb.sh(&format!("pathpilot path fail {hand}"))?;
    eprintln!("{}", out.trim());
    assert!(
        out.contains("active -> failed") && out.contains("daemon"),
        "{out}"
    );
    assert!(is_failed(&tb, &hdev)?);
    // Another path leaves (its SCSI device deleted): the daemon reloads.
    tb.pull_path(2)?;
    poll(
        &tb,
        "the pulled path dropped",
        Duration::from_secs(15),
        |tb| Ok(states(tb)?.len() == 2),
    )?;
    assert!(
        is_failed(&tb, &hdev)?,
        "{hand} active again after the reload that dropped a path:\n{}",
        daemon_log(&tb)
    );
    // It returns (a new disk, a host rescan): the daemon reloads again.
    tb.restore_path(2)?;
    poll(
        &tb,
        "the path back in the map",
        Duration::from_secs(20),
        |tb| Ok(states(tb)?.len() == 3),
    )?;
    assert!(
        is_failed(&tb, &hdev)?,
        "{hand} active again after the reload that added a path:\n{}",
        daemon_log(&tb)
    );
    // A restart: the state file keeps the operator's decision.
    stop_daemon(&tb)?;
    start_daemon(&tb, &config(), "")?;
    std::thread::sleep(Duration::from_secs(3));
    assert!(is_failed(&tb, &hdev)?, "{}", daemon_log(&tb));
    let s = daemon_status(&tb)?;
    let held = s["maps"][0]["paths"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == hand.as_str()).cloned())
        .context("the path failed by hand in the status")?;
    assert_eq!(held["operator_failed"], true, "{held}");
    // A path the checker holds failed (its device offline) stays failed
    // across a reload too: here an operator's.
    let last = tb.disks()?.get(2).context("path 2")?.clone();
    tb.sh(&format!(
        "echo offline > /sys/block/{}/device/state",
        last.name
    ))?;
    poll(
        &tb,
        "the offline path failed",
        Duration::from_secs(15),
        |tb| is_failed(tb, &last.dev),
    )?;
    let out = tb.sh("pathpilot reload mpatha --selector queue-length")?;
    eprintln!("{}", out.trim());
    assert!(out.contains("pinned: selector"), "{out}");
    let st = states(&tb)?;
    assert!(
        is_failed(&tb, &hdev)? && is_failed(&tb, &last.dev)?,
        "after the operator's reload: {st:?}\n{}",
        daemon_log(&tb)
    );
    tb.sh(&format!(
        "echo running > /sys/block/{}/device/state",
        last.name
    ))?;
    poll(&tb, "the path back in use", Duration::from_secs(15), |tb| {
        Ok(!is_failed(tb, &last.dev)?)
    })?;
    // Only a reinstate by hand ends it.
    assert!(is_failed(&tb, &hdev)?);
    tb.sh(&format!("pathpilot path reinstate {hand}"))?;
    assert!(!is_failed(&tb, &hdev)?);
    expect_clean(&tb, &job, "failed by hand, across reloads and a restart")?;
    // Both daemons' logs (the decision log itself starts anew with each).
    let dl = daemon_log(&tb);
    assert!(
        dl.contains(&format!("path {hand} ({hdev}) failed by the operator"))
            && dl.contains(&format!(
                "{hdev} failed again after the reload (failed by the operator)"
            )),
        "{dl}"
    );
    Ok(())
}

#[test]
fn an_operators_reload_is_kept_until_released() -> Result<()> {
    // Unequal paths: round-robin is what the tuner would leave first.
    let tb = boot_or_skip!(
        Testbed::builder()
            .paths(4)
            .caps_mib(&[4.0, 8.0, 16.0, 32.0])
    );
    start_daemon(&tb, &config(), "")?;
    wait_map_ready(&tb, 4)?;
    let load = tb.spawn(
        "fio --name=r --filename=/dev/mapper/mpatha --rw=randread --bs=64k --direct=1 \
         --ioengine=libaio --iodepth=16 --runtime=100 --time_based --output=/dev/null",
    )?;
    std::thread::sleep(Duration::from_secs(6));
    let out = tb.sh("pathpilot reload mpatha --selector round-robin")?;
    eprintln!("{}", out.trim());
    assert!(
        out.contains("applied by the pathpilot daemon; pinned: selector"),
        "{out}"
    );
    std::thread::sleep(Duration::from_secs(40));
    let table = tb.sh("dmsetup table mpatha")?;
    let l = log(&tb);
    assert!(
        table.contains("round-robin"),
        "the operator's selector was undone: {table}\n{l}"
    );
    assert!(
        l.lines()
            .any(|x| x.contains("selector") && x.contains("operator") && x.contains("round-robin")),
        "{l}"
    );
    assert_eq!(daemon_status(&tb)?["maps"][0]["pinned"][0], "selector");
    // Released: the tuner may leave round-robin again, and does.
    let out = tb.sh("pathpilot reload mpatha --release")?;
    assert!(out.contains("released selector"), "{out}");
    let t = Instant::now();
    poll(
        &tb,
        "the tuner to leave round-robin",
        Duration::from_secs(45),
        |tb| Ok(!tb.sh("dmsetup table mpatha")?.contains("round-robin")),
    )?;
    eprintln!(
        "released: round-robin left after {:.0} s",
        t.elapsed().as_secs_f64()
    );
    tb.wait_job(&load, Duration::from_secs(120))?;
    Ok(())
}

#[test]
fn a_change_behind_the_daemons_back_stops_tuning() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(2).cap_mib(20.0));
    start_daemon(&tb, &config(), "")?;
    wait_map_ready(&tb, 2)?;
    // Suspended by someone else: the tuner waits (the daemon reads the
    // map's sysfs flag), and goes on once the map is resumed.
    tb.sh("DM_DISABLE_UDEV=1 dmsetup suspend --noflush --nolockfs mpatha")?;
    poll(
        &tb,
        "tuning paused while suspended",
        Duration::from_secs(10),
        |tb| Ok(log(tb).contains("paused: the map is suspended")),
    )?;
    tb.sh("DM_DISABLE_UDEV=1 dmsetup resume mpatha")?;
    poll(&tb, "tuning resumed", Duration::from_secs(10), |tb| {
        Ok(log(tb).contains("resumed: the map is suspended is over"))
    })?;
    let paused =
        |tb: &Testbed| -> Result<bool> { Ok(daemon_status(tb)?["maps"][0]["tuner"] == "paused") };
    // A table loaded with dmsetup, as multipathd or an admin would.
    let disks = tb.disks()?;
    let devs: Vec<&str> = disks.iter().map(|d| d.dev.as_str()).collect();
    let sectors: u64 = tb.sh("blockdev --getsz /dev/sda")?.trim().parse()?;
    let rr = multipath_table(sectors, "round-robin", &devs);
    tb.sh(&format!(
        "export DM_DISABLE_UDEV=1; dmsetup load mpatha --table '{rr}' && dmsetup resume mpatha"
    ))?;
    poll(&tb, "tuning stopped", Duration::from_secs(10), |tb| {
        paused(tb)
    })?;
    let s = daemon_status(&tb)?;
    let why = s["maps"][0]["outside_change"].as_str().unwrap_or("");
    assert!(
        why.contains("table changed outside pathpilot") && why.contains("round-robin"),
        "{s}"
    );
    let l = log(&tb);
    assert!(l.contains("outside"), "{l}");
    // The daemon does not fight: the table stays as loaded.
    std::thread::sleep(Duration::from_secs(6));
    assert!(tb.sh("dmsetup table mpatha")?.contains("round-robin"));
    // Resumed by the operator, then a queue knob set behind its back.
    tb.sh("pathpilot ctl '{\"cmd\":\"resume\",\"map\":\"mpatha\"}'")?;
    assert!(!paused(&tb)?);
    // A table loaded and a resume right after it, before the daemon's next
    // look: the resume covers the change (it used to stop tuning again a
    // window later, for the change the operator had just resumed from).
    let ql = multipath_table(sectors, "queue-length", &devs);
    tb.sh(&format!(
        "export DM_DISABLE_UDEV=1; dmsetup load mpatha --table '{ql}' && dmsetup resume mpatha \
         && pathpilot ctl '{{\"cmd\":\"resume\",\"map\":\"mpatha\"}}' >/dev/null"
    ))?;
    std::thread::sleep(Duration::from_secs(4));
    let s = daemon_status(&tb)?;
    assert_ne!(s["maps"][0]["tuner"], "paused", "{s}\n{}", log(&tb));
    tb.sh("echo 32 > /sys/block/dm-0/queue/nr_requests")?;
    poll(&tb, "tuning stopped again", Duration::from_secs(10), |tb| {
        paused(tb)
    })?;
    let s = daemon_status(&tb)?;
    assert!(
        s["maps"][0]["outside_change"]
            .as_str()
            .unwrap_or("")
            .contains("nr_requests"),
        "{s}"
    );
    Ok(())
}

#[test]
fn one_daemon_one_writer_and_an_honest_state_file() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(2).cap_mib(20.0));
    start_daemon(&tb, &config(), "")?;
    wait_map_ready(&tb, 2)?;
    // A second daemon, on another socket: refused.
    let o = tb.run(
        "sed 's|^metrics.*|socket = \"/run/other.sock\"\\nmetrics = \"off\"|' \
         /etc/pathpilot/test.toml > /tmp/other.toml; \
         timeout 20 pathpilot daemon --config /tmp/other.toml",
    )?;
    let err = o.stderr_str();
    eprintln!("second daemon: exit {}: {}", o.code, err.trim());
    assert_ne!(o.code, 0);
    assert!(
        err.contains("another pathpilot daemon is running") && err.contains("control.sock"),
        "{err}"
    );
    stop_daemon(&tb)?;
    // No daemon: a command holds the map's lock while it changes the map;
    // another writer waits, then says who holds it.
    tb.sh("mkdir -p /run/pathpilot/locks; \
         (flock /run/pathpilot/locks/mpatha.lock sleep 14) >/dev/null 2>&1 &")?;
    poll(&tb, "the lock taken", Duration::from_secs(5), |tb| {
        Ok(tb.sh("cat /proc/locks")?.contains("FLOCK"))
    })?;
    let t = Instant::now();
    let o = tb.run("pathpilot reload mpatha --selector round-robin")?;
    let err = o.stderr_str();
    eprintln!(
        "locked map: exit {} after {:.1} s: {}",
        o.code,
        t.elapsed().as_secs_f64(),
        err.trim()
    );
    assert_ne!(o.code, 0);
    assert!(err.contains("mpatha is being changed by"), "{err}");
    assert!(tb.sh("dmsetup table mpatha")?.contains("service-time"));
    std::thread::sleep(Duration::from_secs(5));
    // Once free, the command goes ahead (no daemon: by itself).
    let out = tb.sh("pathpilot reload mpatha --selector round-robin")?;
    assert!(out.contains("applied (read back): as requested"), "{out}");
    // A state file that cannot be parsed stops the start, naming the fix.
    tb.sh("echo '{\"maps\": {' > /run/pathpilot/maps.json")?;
    let o = tb.run("timeout 20 pathpilot daemon --config /etc/pathpilot/test.toml")?;
    let err = o.stderr_str();
    eprintln!("corrupt state: exit {}: {}", o.code, err.trim());
    assert_ne!(o.code, 0);
    assert!(
        err.contains("/run/pathpilot/maps.json") && err.contains("--reset-state"),
        "{err}"
    );
    // --reset-state moves it aside, loudly, and starts.
    tb.sh(
        "pathpilot daemon --config /etc/pathpilot/test.toml --reset-state >> /tmp/daemon.log 2>&1 & \
         echo $! > /tmp/daemon.pid",
    )?;
    poll(&tb, "the daemon up", Duration::from_secs(20), |tb| {
        Ok(tb
            .run("pathpilot ctl '{\"cmd\":\"status\"}' >/dev/null")?
            .success())
    })?;
    let l = daemon_log(&tb);
    assert!(
        l.contains("--reset-state: moved /run/pathpilot/maps.json"),
        "{l}"
    );
    assert!(tb.sh("ls /run/pathpilot")?.contains("maps.json.bad-"));
    Ok(())
}
