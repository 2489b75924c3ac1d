//! Marginal paths, in the VM under fio writing with `verify=crc32c`: a
//! path slowed to a twentieth of its rate at runtime is judged marginal
//! from its own I/O and set aside in the map's last group, the map's p99
//! latency comes back, and once the path is fast again it serves again;
//! an operator can end a marginal state by hand. No I/O error throughout.
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use pathpilot_tests::{
    boot_or_skip,
    vm::{Testbed, TestbedExt, daemon_log, daemon_status, expect_clean, start_daemon, stop_daemon},
};

/// Tune mode (marginal paths are set aside only there), 1 s windows; the
/// tuner's own defaults otherwise (a reload at most every 10 s), so that
/// its trials do not dominate the map's p99.
const CONFIG: &str = r#"mode = "tune"
window_secs = 1
metrics = "off"
[maps]
selector = "service-time"
[checker]
interval_secs = 1
timeout_secs = 5
"#;

/// The path's health as the daemon reports it.
fn health(tb: &Testbed, path: &str) -> Result<String> {
    let s = daemon_status(tb)?;
    let p = s["maps"][0]["paths"]
        .as_array()
        .and_then(|v| v.iter().find(|p| p["name"] == path).cloned())
        .with_context(|| format!("{path} in the status: {s}"))?;
    Ok(p["health"].as_str().unwrap_or("").to_string())
}

/// The map's p99 latency over the last window, ms.
fn p99_ms(tb: &Testbed) -> Result<Option<f64>> {
    Ok(daemon_status(tb)?["maps"][0]["rates"]["lat_p99_us"]
        .as_f64()
        .map(|u| u / 1000.0))
}

/// Median of `n` one-second readings of the map's p99.
fn p99_median(tb: &Testbed, n: usize) -> Result<f64> {
    let mut v = vec![];
    for _ in 0..n {
        std::thread::sleep(Duration::from_secs(1));
        v.extend(p99_ms(tb)?);
    }
    ensure!(!v.is_empty(), "no p99 readings");
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

/// Polls the path's health every second until it is `want`.
fn wait_health(tb: &Testbed, path: &str, want: &str, timeout: Duration) -> Result<Duration> {
    let t = Instant::now();
    loop {
        if health(tb, path)? == want {
            return Ok(t.elapsed());
        }
        ensure!(
            t.elapsed() < timeout,
            "{path} not {want} after {timeout:?}:\n{}\n{}",
            tb.sh("dmsetup table mpatha").unwrap_or_default(),
            daemon_log(tb)
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The 1-based group of `dev` in mpatha's live table, and the group count.
fn group_of(tb: &Testbed, dev: &str) -> Result<(usize, usize)> {
    let t = tb.sh("dmsetup table mpatha")?;
    let words: Vec<&str> = t.split_whitespace().collect();
    // Groups follow their selector's name; count them up to the path.
    let mut group = 0;
    let mut at = None;
    for w in &words {
        if ["service-time", "queue-length", "round-robin"].contains(w) {
            group += 1;
        }
        if *w == dev && at.is_none() {
            at = Some(group);
        }
    }
    Ok((at.with_context(|| format!("{dev} not in {t}"))?, group))
}

#[test]
fn a_slow_path_is_set_aside_and_serves_again_once_it_recovers() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(4).cap_mib(20.0));
    start_daemon(&tb, CONFIG, "")?;
    pathpilot_tests::vm::wait_map_ready(&tb, 4)?;
    let sick = tb.disks()?[1].clone();
    // 24 MiB/s of verified 64 KiB writes: three paths carry it as well as four.
    let job = tb.spawn(
        "fio --name=v --filename=/dev/mapper/mpatha --rw=randwrite --bs=64k --direct=1 \
         --ioengine=libaio --iodepth=8 --size=128m --time_based --runtime=110 --rate=24m \
         --verify=crc32c --verify_backlog=16 --verify_fatal=1 \
         --output-format=terse --terse-version=3 2>&1",
    )?;
    std::thread::sleep(Duration::from_secs(12));
    let before = p99_median(&tb, 9)?;

    // A twentieth of its rate: slow, not dead (the checker's reads pass).
    tb.set_caps(1, 1.0, 0)?;
    let found = wait_health(&tb, &sick.name, "marginal", Duration::from_secs(25))?;
    let (g, groups) = group_of(&tb, &sick.dev)?;
    eprintln!(
        "MEASURED marginal: {} slowed 20 MiB/s -> 1 MiB/s, judged marginal after {:.1} s; \
         set aside in group {g} of {groups}",
        sick.name,
        found.as_secs_f64()
    );
    ensure!(found <= Duration::from_secs(10), "judged after {found:?}");
    ensure!(
        g == groups && g >= 2,
        "not in a last group of its own: {g}/{groups}"
    );
    std::thread::sleep(Duration::from_secs(3));
    let aside = p99_median(&tb, 9)?;
    eprintln!(
        "MEASURED marginal: map p99 {before:.1} ms before, {aside:.1} ms with the slow path \
         set aside ({:.2}x)",
        aside / before
    );
    ensure!(
        aside <= 1.5 * before,
        "p99 {aside:.1} ms set aside vs {before:.1} ms before"
    );

    // Fast again: it serves again on probation, then healthy.
    let t = Instant::now();
    tb.set_caps(1, 20.0, 0)?;
    wait_health(&tb, &sick.name, "healthy", Duration::from_secs(45))?;
    let back = t.elapsed();
    let (g, groups) = group_of(&tb, &sick.dev)?;
    eprintln!(
        "MEASURED marginal: fast again -> healthy after {:.1} s (group {g} of {groups})",
        back.as_secs_f64()
    );
    ensure!(
        back <= Duration::from_secs(30),
        "healthy only after {back:?}"
    );
    ensure!(groups == 1, "still {groups} groups once healthy");

    // Slow again: set aside again; an operator ends it by hand.
    tb.set_caps(1, 1.0, 0)?;
    wait_health(&tb, &sick.name, "marginal", Duration::from_secs(25))?;
    tb.set_caps(1, 20.0, 0)?;
    let out = tb.sh(&format!("pathpilot path unmark {}", sick.name))?;
    eprintln!("{}", out.trim());
    ensure!(out.contains("marginal -> healthy"), "{out}");
    ensure!(health(&tb, &sick.name)? == "healthy");
    ensure!(
        group_of(&tb, &sick.dev)?.1 == 1,
        "unmarked, still set aside"
    );

    expect_clean(&tb, &job, "a path slowed, set aside, back")?;
    let dl = daemon_log(&tb);
    for l in dl
        .lines()
        .filter(|l| l.contains("marginal") || l.contains("set aside"))
    {
        eprintln!("{l}");
    }
    let log = tb.sh("pathpilot log")?;
    ensure!(
        log.contains("marginal") && log.contains("unmarked by the operator"),
        "{log}"
    );
    // Without the daemon there is nothing to unmark: a clear error.
    stop_daemon(&tb)?;
    let out = tb.sh(&format!(
        "pathpilot path unmark {} 2>&1; echo rc=$?",
        sick.name
    ))?;
    ensure!(
        out.contains("only the daemon judges paths marginal") && !out.contains("rc=0"),
        "{out}"
    );
    Ok(())
}

#[test]
fn a_path_toggling_slow_and_fast_does_not_flap_the_map() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(4).cap_mib(20.0));
    start_daemon(&tb, CONFIG, "")?;
    pathpilot_tests::vm::wait_map_ready(&tb, 4)?;
    let sick = tb.disks()?[1].clone();
    let job = tb.spawn(
        "fio --name=v --filename=/dev/mapper/mpatha --rw=randwrite --bs=64k --direct=1 \
         --ioengine=libaio --iodepth=8 --size=128m --time_based --runtime=85 --rate=24m \
         --verify=crc32c --verify_backlog=16 --verify_fatal=1 \
         --output-format=terse --terse-version=3 2>&1",
    )?;
    std::thread::sleep(Duration::from_secs(10));
    // Slow and fast every 5 s for 60 s.
    let t = Instant::now();
    for i in 0..12 {
        let mib = if i % 2 == 0 { 1.0 } else { 20.0 };
        tb.set_caps(1, mib, 0)?;
        let next = Duration::from_secs(5 * (i + 1));
        std::thread::sleep(next.saturating_sub(t.elapsed()));
    }
    tb.set_caps(1, 20.0, 0)?;
    let onsets: Vec<String> = daemon_log(&tb)
        .lines()
        .filter(|l| l.contains(&format!("path {} ({}) marginal:", sick.name, sick.dev)))
        .map(str::to_string)
        .collect();
    eprintln!(
        "MEASURED marginal: {} toggling 1 <-> 20 MiB/s every 5 s for 60 s: {} marginal \
         transition(s)",
        sick.name,
        onsets.len()
    );
    for l in &onsets {
        eprintln!("{l}");
    }
    ensure!(
        (1..=2).contains(&onsets.len()),
        "{} marginal transitions in 60 s:\n{}",
        onsets.len(),
        daemon_log(&tb)
    );
    expect_clean(&tb, &job, "a path toggling slow and fast")?;
    Ok(())
}
