//! A SAN host's scale in the VM: LIO exports 16 LUNs through 4 ports, 64
//! paths. The daemon must discover, build, check and watch all of them,
//! show them in `top` (scrolled, filtered) and `list`, and keep its
//! threads bounded while windows pass under I/O on every map.
use std::time::Duration;

use anyhow::{Result, ensure};
use pathpilot_testbed::{AluaSpec, Backstore, Testbed};
use pathpilot_tests::{
    boot_or_skip,
    guest::{daemon_log, daemon_status, poll, start_daemon},
    prom,
};

const LUNS: usize = 16;
const PORTS: usize = 4;

const CONFIG: &str = r#"mode = "tune"
window_secs = 1
metrics = "127.0.0.1:9777"
[checker]
interval_secs = 1
timeout_secs = 5
"#;

const DAEMON: &str = "$(cat /tmp/daemon.pid)";

/// CPU ticks per thread name of the daemon, summed (the checker threads
/// are one line).
fn thread_ticks(tb: &Testbed) -> Result<std::collections::BTreeMap<String, u64>> {
    let out = tb.sh(&format!(
        "for t in /proc/{DAEMON}/task/*; do \
         echo \"$(cat $t/comm | sed 's/^check-.*/check-*/') $(cut -d' ' -f14,15 $t/stat)\"; done"
    ))?;
    let mut by = std::collections::BTreeMap::new();
    for l in out.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if let [name, u, s] = w[..] {
            *by.entry(name.to_string()).or_default() +=
                u.parse::<u64>().unwrap_or(0) + s.parse::<u64>().unwrap_or(0);
        }
    }
    Ok(by)
}

/// Each kind of work's share of a core between two [`engine_secs`] taken
/// 10 s apart.
fn engine_share(
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
) -> String {
    let v: Vec<String> = after
        .iter()
        .map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0.0);
            format!("{k} {:.1}%", d * 10.0)
        })
        .collect();
    v.join(", ")
}

/// A status field of (name, number) pairs: `engine_secs` (the engine's
/// time by kind of work so far), `decision_counts` (the tuner's decisions
/// by outcome).
fn pairs(s: &serde_json::Value, key: &str) -> std::collections::BTreeMap<String, f64> {
    s[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p[0].as_str()?.to_string(), p[1].as_f64()?)))
        .collect()
}

fn engine_secs(tb: &Testbed) -> Result<std::collections::BTreeMap<String, f64>> {
    Ok(pairs(&daemon_status(tb)?, "engine_secs"))
}

/// The changes the tuner made between two statuses (a trial begun, or one
/// undone) and the engine's CPU per change: how many trials fall in a
/// measured span swings its figure, the cost of each does not.
fn changes_made(before: &serde_json::Value, after: &serde_json::Value) -> String {
    let n = |s: &serde_json::Value| {
        let d = pairs(s, "decision_counts");
        ["trying", "reverted", "snap_back"]
            .iter()
            .map(|k| d.get(*k).copied().unwrap_or(0.0))
            .sum::<f64>()
    };
    let secs = |s: &serde_json::Value| {
        pairs(s, "engine_secs")
            .get("changes")
            .copied()
            .unwrap_or(0.0)
    };
    let changes = n(after) - n(before);
    if changes == 0.0 {
        return "no change".into();
    }
    format!(
        "{changes} changes, {:.1} ms of the engine's CPU each",
        (secs(after) - secs(before)) * 1000.0 / changes
    )
}

#[test]
fn sixteen_luns_of_four_paths_are_built_checked_watched_and_shown() -> Result<()> {
    let mut array = AluaSpec::parse(&["10:ao"; PORTS].join(","))?;
    array.backstore = Backstore::Ramdisk(8);
    array.luns = LUNS;
    // One QEMU path: its disk has no second path, so no map of its own.
    let tb = boot_or_skip!(Testbed::builder().paths(1).alua(array));
    start_daemon(&tb, CONFIG, "")?;
    let built = poll(
        &tb,
        "16 maps of 4 ready paths",
        Duration::from_secs(90),
        |tb| {
            let s = daemon_status(tb)?;
            let maps = s["maps"].as_array().cloned().unwrap_or_default();
            Ok(maps.len() == LUNS
                && maps.iter().all(|m| {
                    let paths = m["paths"].as_array().cloned().unwrap_or_default();
                    m["managed"] == true
                        && paths.len() == PORTS
                        && paths
                            .iter()
                            .all(|p| p["dm_state"] == "active" && p["checker"] == "ready")
                }))
        },
    )?;
    eprintln!(
        "16 maps x 4 paths built and checked ready in {:.1} s",
        built.as_secs_f64()
    );
    let s = daemon_status(&tb)?;
    let names: Vec<String> = s["maps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap_or_default().to_string())
        .collect();
    let mut wwids: Vec<&str> = s["maps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["wwid"].as_str().unwrap_or_default())
        .collect();
    wwids.sort();
    wwids.dedup();
    assert_eq!(wwids.len(), LUNS, "one map per LUN: {wwids:?}");
    // Every path and every map on the observer's watch list, nothing else.
    assert_eq!(
        s["bpf_watched"].as_u64(),
        Some((LUNS * PORTS + LUNS) as u64),
        "watched devices"
    );
    let idle = tb.proc_figures(DAEMON)?;
    let before = thread_ticks(&tb)?;
    let engine_before = engine_secs(&tb)?;
    let cpu_idle = tb.cpu_over(DAEMON, 10)?.0;
    let after = thread_ticks(&tb)?;
    eprintln!(
        "idle engine time by work over 10 s: {}",
        engine_share(&engine_before, &engine_secs(&tb)?)
    );
    let by: Vec<String> = after
        .iter()
        .map(|(k, v)| format!("{k} {}", v - before.get(k).copied().unwrap_or(0)))
        .collect();
    eprintln!("idle CPU ticks per thread over 10 s: {}", by.join(", "));

    // I/O on every map in turn, through whichever path each selector picks.
    let files: Vec<String> = names.iter().map(|n| format!("/dev/mapper/{n}")).collect();
    let job = tb.spawn(&format!(
        "fio --name=scale --filename={} --file_service_type=roundrobin --rw=randread \
         --bs=4k --direct=1 --ioengine=libaio --iodepth=16 --time_based --runtime=25 \
         --output-format=terse",
        files.join(":")
    ))?;
    std::thread::sleep(Duration::from_secs(5));
    let before = daemon_status(&tb)?;
    let cpu_load = tb.cpu_over(DAEMON, 10)?.0;
    let after = daemon_status(&tb)?;
    eprintln!(
        "engine time by work over 10 s under load: {}; {}",
        engine_share(
            &pairs(&before, "engine_secs"),
            &pairs(&after, "engine_secs")
        ),
        changes_made(&before, &after)
    );
    let seen = poll(
        &tb,
        "reads counted on every path",
        Duration::from_secs(15),
        |tb| {
            let s = daemon_status(tb)?;
            Ok(s["maps"].as_array().is_some_and(|maps| {
                maps.iter().all(|m| {
                    m["paths"].as_array().is_some_and(|ps| {
                        ps.iter()
                            .all(|p| p["totals"]["read_ios"].as_u64().unwrap_or(0) > 0)
                    })
                })
            }))
        },
    )?;
    eprintln!(
        "every path counted reads {:.1} s after the check began",
        seen.as_secs_f64()
    );
    let load = tb.proc_figures(DAEMON)?;
    let fio = tb.wait_job(&job, Duration::from_secs(60))?;
    ensure!(fio.success(), "fio over every map: {}", fio.stderr_str());
    let s = daemon_status(&tb)?;
    eprintln!(
        "daemon at 64 paths: threads {} idle, {} under load; \
         RSS {:.1} MiB idle (peak {:.1}), {:.1} MiB under load (peak {:.1}); \
         CPU {cpu_idle:.1}% of a core idle, {cpu_load:.1}% under load; \
         BPF entries watched {} counted {}",
        idle.threads,
        load.threads,
        idle.rss_kib as f64 / 1024.0,
        idle.hwm_kib as f64 / 1024.0,
        load.rss_kib as f64 / 1024.0,
        load.hwm_kib as f64 / 1024.0,
        s["bpf_watched"],
        s["bpf_counted"]
    );
    // Bounded: a checker thread per path and a few of the daemon's own,
    // the same number under load as idle (nothing spawned per window).
    assert!(
        idle.threads as usize <= LUNS * PORTS + 8,
        "{} threads for {} paths",
        idle.threads,
        LUNS * PORTS
    );
    assert!(
        load.threads <= idle.threads,
        "threads grew under load: {} -> {}\n{}",
        idle.threads,
        load.threads,
        tb.sh(&format!("cat /proc/{DAEMON}/task/*/comm | sort | uniq -c"))?
    );

    // What a fleet's Prometheus stores of this host: series by scope, at
    // each level of `metrics_histograms` (re-read on SIGHUP), and the
    // exposition clean by promtool's lint.
    let mut budget = vec![];
    for detail in ["size_classes", "paths", "maps"] {
        tb.sh(&format!(
            "cat > /etc/pathpilot/test.toml <<'EOF'\nmetrics_histograms = \"{detail}\"\n{CONFIG}EOF\n\
             kill -HUP {DAEMON}"
        ))?;
        let text = poll(
            &tb,
            "the new histograms exported",
            Duration::from_secs(10),
            |tb| {
                let s = daemon_status(tb)?;
                Ok(s["metrics_histograms"] == detail)
            },
        )
        .and_then(|_| prom::scrape(&tb))?;
        let lint = prom::check_metrics(&text)?;
        ensure!(
            lint.is_empty(),
            "promtool check metrics ({detail}): {lint:#?}"
        );
        let (host, map, path) = prom::series_by_scope(&text);
        eprintln!(
            "MEASURED series with metrics_histograms = {detail}: {} in all at {LUNS} maps x \
             {PORTS} paths: host {host}, maps {map} ({:.0} a map), paths {path} ({:.0} a path)",
            host + map + path,
            map as f64 / LUNS as f64,
            path as f64 / (LUNS * PORTS) as f64
        );
        budget.push((host, map, path));
    }
    ensure!(
        budget[0].2 > budget[1].2 && budget[1].2 > budget[2].2 && budget[0].1 == budget[2].1,
        "each level drops only path histograms: {budget:?}"
    );

    // The operator's views: every map in `list`; `top` scrolls and filters.
    let list = tb.sh("pathpilot list")?;
    for n in &names {
        assert!(list.contains(n.as_str()), "{n} missing from list:\n{list}");
    }
    let top = tb.sh("pathpilot top --once --interval 1s --size 120x30")?;
    assert!(top.contains("16 maps") && top.contains("maps 1-"), "{top}");
    let last = names.last().unwrap();
    let top = tb.sh(&format!(
        "pathpilot top --once --interval 1s --size 120x30 --filter {last}"
    ))?;
    eprintln!("{top}");
    assert!(top.contains(&format!("1 match /{last}/")), "{top}");
    assert!(top.contains(&format!("paths of {last}")), "{top}");
    let last_paths = s["maps"].as_array().unwrap().last().unwrap()["paths"]
        .as_array()
        .unwrap()
        .clone();
    for p in last_paths {
        let name = p["name"].as_str().unwrap();
        assert!(top.contains(name), "path {name} of {last} missing:\n{top}");
    }

    // What observing costs, in the status: each program's runs while the
    // kernel accounts them (off until now: the figures above are without).
    let runs = |s: &serde_json::Value, p: &str| -> Option<u64> {
        s["bpf_programs"]
            .as_array()?
            .iter()
            .find(|x| x["program"] == p)?["runs"]
            .as_u64()
    };
    ensure!(s["bpf_stats"] == false, "bpf_stats: {}", s["bpf_stats"]);
    for p in ["block_rq_issue", "block_rq_complete"] {
        ensure!(runs(&s, p).is_some(), "{p} not in {}", s["bpf_programs"]);
    }
    // The per-bio probe only when asked for (`bio_probe = true`).
    ensure!(
        runs(&s, "block_bio_queue").is_none() && s["bio_probe"] == false,
        "a bio probe by default: {}",
        s["bpf_programs"]
    );
    // And the daemon says so as it starts, with what the probe would add.
    let log = daemon_log(&tb);
    ensure!(
        log.contains("daemon ready") && log.contains("bio probe off (no bytes per cgroup"),
        "{log}"
    );
    // The status is the last window's: it says the accounting is on from
    // the next window, and has the runs counted by the one after the I/O.
    tb.sh("echo 1 > /proc/sys/kernel/bpf_stats_enabled")?;
    let mut before = s.clone();
    poll(
        &tb,
        "the status to say bpf_stats",
        Duration::from_secs(10),
        |tb| {
            before = daemon_status(tb)?;
            Ok(before["bpf_stats"] == true)
        },
    )?;
    let from = runs(&before, "block_rq_issue").unwrap();
    tb.sh(&format!(
        "dd if=/dev/mapper/{last} of=/dev/null bs=4k count=100 iflag=direct status=none"
    ))?;
    // 100 reads, each issued at the map and again down a path.
    let mut issued = 0;
    let counted = poll(&tb, "200 issues counted", Duration::from_secs(10), |tb| {
        issued = runs(&daemon_status(tb)?, "block_rq_issue").unwrap() - from;
        Ok(issued >= 200)
    });
    tb.sh("echo 0 > /proc/sys/kernel/bpf_stats_enabled")?;
    counted.map_err(|e| e.context(format!("block_rq_issue ran {issued} times for 100 reads")))?;
    Ok(())
}
