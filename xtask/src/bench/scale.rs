//! `cargo xtask bench scale`: the daemon's own cost on a SAN host's
//! scale, 16 LUNs x 4 paths (LIO ramdisks behind 4 tcm_loop ports in the
//! VM), idle and under random reads on every map (first while pathpilot's
//! tuners try their candidates, then once they have settled), against multipathd
//! managing the same LUNs. Every row gets the same settle and the same
//! measuring time; rows alternate order between rounds.
//!
//! CPU is the process's user + system time (all its threads) over the
//! measuring time, as a percentage of one (emulated) core: under TCG a
//! syscall costs tens of times what it does on hardware, so the figures
//! compare rows with each other, not with a real host.
use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use pathpilot_testbed::{AluaSpec, Backstore, Testbed};
use serde_json::{Value, json};

use pathpilot_testbed::figures::median;

use super::{Share, save};

#[derive(clap::Args)]
pub struct Args {
    /// LUNs behind every port.
    #[arg(long, default_value_t = 16)]
    luns: usize,
    /// Ports (paths per LUN).
    #[arg(long, default_value_t = 4)]
    ports: usize,
    /// Seconds each figure is measured over (idle, then under load).
    #[arg(long, default_value_t = 20)]
    secs: u64,
    /// Rounds; the rows' order is reversed every other round.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Seconds of load between the first figure under load and the
    /// steady one, the same for every row: time for pathpilot's tuners to
    /// try every candidate for the workload (they try again only after
    /// `retry_after_s`, 600 s by default).
    #[arg(long, default_value_t = 60)]
    hold: u64,
    /// Seconds the steady figure is measured over: a minute holds one of
    /// pathpilot's periodic full discovery passes (one a minute, in case a
    /// uevent was lost), which a shorter figure holds or misses by chance.
    #[arg(long, default_value_t = 60)]
    steady_secs: u64,
    /// Compare this pathpilot binary (one built before a change) with the
    /// current one, both at 1 s windows, alternated in the same boot,
    /// instead of the four rows.
    #[arg(long)]
    baseline_bin: Option<PathBuf>,
}

/// Where the guest keeps `--baseline-bin` (copied from the share, so that
/// no row pages its code in over 9p).
const BASELINE: &str = "/tmp/pathpilot-baseline";

/// Seconds from the load's start to its first figure, every row.
const RAMP_S: u64 = 3;

#[derive(Clone, Copy)]
enum Daemon {
    /// pathpilot: window and check interval, seconds; `baseline`: the
    /// binary of `--baseline-bin`.
    Pathpilot {
        window: u32,
        checks: u32,
        baseline: bool,
    },
    /// multipathd: polling_interval, seconds.
    Multipathd { polling: u32 },
}

impl Daemon {
    fn label(self) -> String {
        match self {
            Daemon::Pathpilot {
                window,
                checks,
                baseline,
            } => format!(
                "pathpilot{}, {window} s windows, checks every {checks} s",
                if baseline { " (baseline)" } else { "" }
            ),
            Daemon::Multipathd { polling } => {
                format!("multipathd, polling_interval {polling}")
            }
        }
    }
}

const ROWS: [Daemon; 4] = [
    Daemon::Pathpilot {
        window: 1,
        checks: 1,
        baseline: false,
    },
    Daemon::Multipathd { polling: 1 },
    // Both daemons' defaults.
    Daemon::Pathpilot {
        window: 5,
        checks: 2,
        baseline: false,
    },
    Daemon::Multipathd { polling: 5 },
];

/// One row's figures in one round.
#[derive(Default, Clone)]
struct Sample {
    ready_s: f64,
    cpu_idle: f64,
    cpu_load: f64,
    /// Under the same load, `hold` seconds later.
    cpu_steady: f64,
    /// pathpilot only: maps whose tuner had converged at the start and at
    /// the end of the steady figure, and the changes made during it.
    steady_tuners: Option<(usize, usize, f64)>,
    threads: f64,
    rss_mib: f64,
    hwm_mib: f64,
    /// pathpilot only: the engine's CPU per window on the observer (its
    /// snapshot and, while sampling, attaching and detaching its programs),
    /// the knob read-back and the window's own work, ms.
    window_ms: Option<f64>,
    /// pathpilot only: the engine's CPU on discovery passes during the
    /// steady figure, ms per minute (a minute holds one full pass).
    scan_ms_per_min: Option<f64>,
}

impl Sample {
    /// pathpilot only: the maps whose tuner had converged through the
    /// whole steady figure (at its start and at its end).
    fn converged(&self) -> Option<usize> {
        self.steady_tuners.map(|(c0, c1, _)| c0.min(c1))
    }
}

fn pid_of(tb: &Testbed, d: Daemon) -> Result<String> {
    let cmd = match d {
        Daemon::Pathpilot { .. } => "cat /tmp/daemon.pid",
        Daemon::Multipathd { .. } => "pidof multipathd",
    };
    let pid = tb.sh(cmd)?.trim().to_string();
    pid.parse::<u32>()
        .with_context(|| format!("no pid for {}", d.label()))?;
    Ok(pid)
}

/// The daemon's status, as the control socket serves it.
fn status(tb: &Testbed) -> Result<Value> {
    let out = tb.sh("pathpilot ctl '{\"cmd\":\"status\"}'")?;
    let v: Value = serde_json::from_str(out.trim()).context("status JSON")?;
    Ok(v["data"].clone())
}

/// The engine's CPU seconds since it started, by work.
fn engine_works(tb: &Testbed) -> Result<BTreeMap<String, f64>> {
    Ok(status(tb)?["engine_secs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p[0].as_str()?.to_string(), p[1].as_f64()?)))
        .collect())
}

/// The engine's CPU seconds since it started on the works named.
fn engine_secs(tb: &Testbed, works: &[&str]) -> Result<f64> {
    Ok(secs_on(&engine_works(tb)?, works))
}

/// Of one reading by work, the seconds on the works named.
fn secs_on(reading: &BTreeMap<String, f64>, works: &[&str]) -> f64 {
    works.iter().filter_map(|w| reading.get(*w)).sum()
}

/// The engine's CPU between two readings by work, in ms, the largest
/// first: where a figure's time went (the engine thread is nearly all of
/// the process; its checker threads mostly sleep).
fn by_work(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> String {
    let mut v: Vec<(&str, f64)> = after
        .iter()
        .map(|(w, s)| (w.as_str(), (s - before.get(w).unwrap_or(&0.0)) * 1000.0))
        .filter(|(_, ms)| *ms >= 0.5)
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v.iter()
        .map(|(w, ms)| format!("{w} {ms:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A window's work: the observer (snapshot, and the probes attached and
/// detached while sampling), the knob read-back, the window itself.
const WINDOW_WORK: &[&str] = &["observer", "probes", "knobs", "window"];
/// Discovery: a light pass each check interval, a full one a minute.
const SCAN_WORK: &[&str] = &["rescan"];

/// Maps whose tuner has converged (every candidate for the workload
/// tried), and the changes the daemon has made since it started.
fn tuners(tb: &Testbed) -> Result<(usize, f64)> {
    let v = status(tb)?;
    let converged = v["maps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["tuner"] == "converged")
        .count();
    let changes = v["decision_counts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| matches!(p[0].as_str(), Some("trying" | "reverted" | "snap_back")))
        .filter_map(|p| p[1].as_f64())
        .sum();
    Ok((converged, changes))
}

fn start(tb: &Testbed, d: Daemon) -> Result<()> {
    match d {
        Daemon::Pathpilot {
            window,
            checks,
            baseline,
        } => tb.sh(&format!(
            "mkdir -p /etc/pathpilot && cat > /etc/pathpilot/scale.toml <<'EOF'\n\
             mode = \"tune\"\nwindow_secs = {window}\nmetrics = \"off\"\n\
             [checker]\ninterval_secs = {checks}\nEOF\n\
             {} daemon --config /etc/pathpilot/scale.toml > /tmp/daemon.log 2>&1 &\n\
             echo $! > /tmp/daemon.pid",
            if baseline { BASELINE } else { "pathpilot" }
        ))?,
        // As an admin sets it up: udevd for multipathd's path discovery,
        // the LUNs' WWIDs added (find_multipaths strict, the default).
        Daemon::Multipathd { polling } => tb.sh(&format!(
            "set -e; mkdir -p /run/udev /etc/udev /etc/multipath\n\
             printf 'defaults {{\\n    polling_interval {polling}\\n}}\\n' > /etc/multipath.conf\n\
             ln -sf $(command -v udevadm) /tmp/systemd-udevd\n\
             /tmp/systemd-udevd --daemon\n\
             udevadm trigger --action=add; udevadm settle -t 60\n\
             for d in /sys/block/sd*; do grep -q LIO $d/device/vendor && \
               multipath -a /dev/${{d##*/}} >/dev/null; done; true\n\
             multipathd </dev/null >/tmp/multipathd.out 2>&1"
        ))?,
    };
    Ok(())
}

fn stop(tb: &Testbed, d: Daemon) -> Result<()> {
    match d {
        Daemon::Pathpilot { .. } => tb.sh(
            "p=$(cat /tmp/daemon.pid); kill $p; i=0; \
             while [ -d /proc/$p ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; \
             dmsetup remove_all; [ -z \"$(dmsetup ls --target multipath | grep -v 'No devices')\" ]",
        )?,
        Daemon::Multipathd { .. } => tb.sh(
            "multipathd shutdown >/dev/null 2>&1; i=0; \
             while pidof multipathd >/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done\n\
             multipath -F >/dev/null 2>&1; dmsetup remove_all\n\
             udevadm control --exit; while pidof systemd-udevd >/dev/null; do sleep 0.1; done\n\
             rm -rf /run/udev /etc/multipath.conf /etc/multipath/wwids; ! pidof multipathd",
        )?,
    };
    Ok(())
}

/// Waits until `luns` multipath maps hold `luns x ports` active paths.
fn wait_ready(tb: &Testbed, luns: usize, ports: usize) -> Result<Duration> {
    let t = Instant::now();
    loop {
        let out = tb.sh(
            "echo $(dmsetup ls --target multipath 2>/dev/null | grep -vc 'No devices'); \
             dmsetup status --target multipath 2>/dev/null | grep -o ' A ' | wc -l",
        )?;
        let v: Vec<usize> = out
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        if v == [luns, luns * ports] {
            return Ok(t.elapsed());
        }
        if t.elapsed() > Duration::from_secs(120) {
            bail!(
                "{luns} maps of {ports} active paths not there after 120 s (maps, active paths: {out}):\n{}",
                tb.sh(
                    "dmsetup table; cat /tmp/daemon.log /tmp/multipathd.out 2>/dev/null | tail -30"
                )?
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn measure(tb: &Testbed, d: Daemon, a: &Args) -> Result<Sample> {
    start(tb, d)?;
    let ready = wait_ready(tb, a.luns, a.ports)?;
    let pid = pid_of(tb, d)?;
    // The same settle for every row: discovery done, first windows past.
    std::thread::sleep(Duration::from_secs(5));
    let e0 = matches!(d, Daemon::Pathpilot { .. })
        .then(|| engine_secs(tb, WINDOW_WORK))
        .transpose()?;
    let (cpu_idle, idle) = tb.cpu_over(&pid, a.secs)?;
    let window_ms = match (d, e0) {
        (Daemon::Pathpilot { window, .. }, Some(e0)) => {
            let windows = a.secs as f64 / f64::from(window);
            Some((engine_secs(tb, WINDOW_WORK)? - e0) * 1000.0 / windows)
        }
        _ => None,
    };
    let maps = tb.sh("dmsetup ls --target multipath | cut -f1 | tr '\\n' ' '")?;
    let files: Vec<String> = maps
        .split_whitespace()
        .map(|m| format!("/dev/mapper/{m}"))
        .collect();
    let job = tb.spawn(&format!(
        "fio --name=scale --filename={} --file_service_type=roundrobin --rw=randread \
         --bs=4k --direct=1 --ioengine=libaio --iodepth=16 --time_based --runtime={} \
         --output=/dev/null",
        files.join(":"),
        a.secs + a.hold + a.steady_secs + 2 * RAMP_S
    ))?;
    std::thread::sleep(Duration::from_secs(RAMP_S));
    let is_pp = matches!(d, Daemon::Pathpilot { .. });
    let w0 = is_pp.then(|| engine_works(tb)).transpose()?;
    let (cpu_load, load) = tb.cpu_over(&pid, a.secs)?;
    if let Some(w0) = w0 {
        eprintln!(
            "bench: scale / {}: the engine's CPU while the tuners explore, ms: {}",
            d.label(),
            by_work(&w0, &engine_works(tb)?)
        );
    }
    std::thread::sleep(Duration::from_secs(a.hold));
    let t0 = is_pp.then(|| tuners(tb)).transpose()?;
    let w2 = is_pp.then(|| engine_works(tb)).transpose()?;
    let (cpu_steady, steady) = tb.cpu_over(&pid, a.steady_secs)?;
    let w3 = is_pp.then(|| engine_works(tb)).transpose()?;
    if let (Some(w2), Some(w3)) = (&w2, &w3) {
        eprintln!(
            "bench: scale / {}: the engine's CPU under steady load, ms: {}",
            d.label(),
            by_work(w2, w3)
        );
    }
    let t1 = is_pp.then(|| tuners(tb)).transpose()?;
    let scan_ms_per_min = w2.zip(w3).map(|(w2, w3)| {
        (secs_on(&w3, SCAN_WORK) - secs_on(&w2, SCAN_WORK)) * 1000.0 * 60.0 / a.steady_secs as f64
    });
    let steady_tuners = t0.zip(t1).map(|(a, b)| (a.0, b.0, b.1 - a.1));
    tb.wait_job(
        &job,
        Duration::from_secs(a.secs + a.hold + a.steady_secs + 60),
    )?;
    stop(tb, d)?;
    let s = Sample {
        ready_s: ready.as_secs_f64(),
        cpu_idle,
        cpu_load,
        cpu_steady,
        steady_tuners,
        threads: idle.threads.max(load.threads).max(steady.threads) as f64,
        rss_mib: idle.rss_kib.max(load.rss_kib).max(steady.rss_kib) as f64 / 1024.0,
        hwm_mib: steady.hwm_kib as f64 / 1024.0,
        window_ms,
        scan_ms_per_min,
    };
    let tuned = s.steady_tuners.map_or(String::new(), |(c0, c1, n)| {
        format!(" (maps converged {c0} -> {c1} of {}, {n} changes)", a.luns)
    });
    eprintln!(
        "bench: scale / {}: ready {:.1} s, CPU {:.1}% idle {:.1}% load {:.1}% steady{tuned}, {} threads, RSS {:.1} MiB",
        d.label(),
        s.ready_s,
        s.cpu_idle,
        s.cpu_load,
        s.cpu_steady,
        s.threads,
        s.rss_mib
    );
    Ok(s)
}

pub fn run(a: Args) -> Result<()> {
    let mut array = AluaSpec::parse(&vec!["10:ao"; a.ports].join(","))?;
    array.backstore = Backstore::Ramdisk(8);
    array.luns = a.luns;
    let mut tb = Testbed::builder().paths(1).alua(array);
    // The baseline reaches the guest through a share of its own.
    let share = match &a.baseline_bin {
        Some(bin) => {
            if !bin.is_file() {
                bail!("--baseline-bin {}: no such file", bin.display());
            }
            let dir = Share::new("pp-scale")?;
            std::fs::copy(bin, dir.0.join("pathpilot"))
                .with_context(|| format!("copying {}", bin.display()))?;
            tb = tb.share(&dir.0);
            Some(dir)
        }
        None => None,
    };
    let tb = tb.boot()?;
    let daemons: Vec<Daemon> = if share.is_some() {
        tb.sh(&format!("cp /share/pathpilot {BASELINE}"))?;
        [false, true]
            .map(|baseline| Daemon::Pathpilot {
                window: 1,
                checks: 1,
                baseline,
            })
            .to_vec()
    } else {
        ROWS.to_vec()
    };
    let mut got: Vec<Vec<Sample>> = vec![vec![]; daemons.len()];
    for round in 0..a.rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..daemons.len()).collect()
        } else {
            (0..daemons.len()).rev().collect()
        };
        for i in order {
            got[i].push(measure(&tb, daemons[i], &a)?);
        }
    }
    let med =
        |v: &[Sample], f: fn(&Sample) -> f64| median(&mut v.iter().map(f).collect::<Vec<_>>());
    // A figure only some samples have (pathpilot's): None when none has it.
    let med_some = |v: &[Sample], f: fn(&Sample) -> Option<f64>| {
        let mut got: Vec<f64> = v.iter().filter_map(f).collect();
        (!got.is_empty()).then(|| median(&mut got))
    };
    println!(
        "\nscale: {} LUNs x {} paths = {} paths, {} s per figure, {} round(s), medians; CPU is % of one emulated core; \
         load from {} s after the load starts, steady from {} s for {} s",
        a.luns,
        a.ports,
        a.luns * a.ports,
        a.secs,
        a.rounds,
        RAMP_S,
        RAMP_S + a.secs + a.hold,
        a.steady_secs
    );
    println!(
        "{:<52} {:>8} {:>9} {:>9} {:>10} {:>9} {:>8} {:>9} {:>10} {:>12}",
        "daemon",
        "ready s",
        "CPU idle",
        "CPU load",
        "CPU steady",
        "converged",
        "threads",
        "RSS MiB",
        "window ms",
        "scan ms/min"
    );
    let mut rows = vec![];
    for (d, v) in daemons.iter().zip(&got) {
        let window_ms = med_some(v, |s| s.window_ms);
        let scan_ms = med_some(v, |s| s.scan_ms_per_min);
        // The fewest maps converged through a steady figure, over rounds.
        let settled = v
            .iter()
            .filter_map(Sample::converged)
            .min()
            .map_or("-".into(), |c| format!("{c}/{}", a.luns));
        println!(
            "{:<52} {:>8.1} {:>8.1}% {:>8.1}% {:>9.1}% {:>9} {:>8.0} {:>9.1} {:>10} {:>12}",
            d.label(),
            med(v, |s| s.ready_s),
            med(v, |s| s.cpu_idle),
            med(v, |s| s.cpu_load),
            med(v, |s| s.cpu_steady),
            settled,
            med(v, |s| s.threads),
            med(v, |s| s.rss_mib),
            window_ms.map_or("-".into(), |w| format!("{w:.1}")),
            scan_ms.map_or("-".into(), |w| format!("{w:.0}"))
        );
        rows.push(json!({
            "daemon": d.label(),
            "ready_s": med(v, |s| s.ready_s),
            "cpu_idle_pct": med(v, |s| s.cpu_idle),
            "cpu_load_pct": med(v, |s| s.cpu_load),
            "cpu_steady_pct": med(v, |s| s.cpu_steady),
            "converged": settled,
            "threads": med(v, |s| s.threads),
            "rss_mib": med(v, |s| s.rss_mib),
            "peak_rss_mib": med(v, |s| s.hwm_mib),
            "window_cpu_ms": window_ms,
            "scan_cpu_ms_per_min": scan_ms,
            "samples": v.iter().map(|s| json!([s.cpu_idle, s.cpu_load, s.cpu_steady])).collect::<Vec<_>>(),
            "steady_tuners": v.iter().filter_map(|s| s.steady_tuners)
                .map(|(c0, c1, n)| json!({"converged_before": c0, "converged_after": c1, "changes": n}))
                .collect::<Vec<_>>(),
        }));
    }
    // The target for the daemon at 1 s windows, the first row: at most
    // 2% of a core, idle and under steady load.
    let pp = &got[0];
    let mark = |x: f64| if x <= 2.0 { "met" } else { "MISSED" };
    let (idle, steady) = (med(pp, |s| s.cpu_idle), med(pp, |s| s.cpu_steady));
    let mut targets = vec![format!(
        "target {}: {} <= 2% of a core idle: {idle:.1}%",
        mark(idle),
        daemons[0].label()
    )];
    // Steady only if every map's tuner had converged through it.
    let settled = pp.iter().all(|s| s.converged() == Some(a.luns));
    targets.push(format!(
        "target {}: {} <= 2% of a core under steady load: {steady:.1}% \
         (tuners converged through it: {}); while they explore: {:.1}%",
        if settled {
            mark(steady)
        } else {
            "not judged (tuners still trying)"
        },
        daemons[0].label(),
        pp.iter()
            .filter_map(Sample::converged)
            .map(|c| format!("{c}/{}", a.luns))
            .collect::<Vec<_>>()
            .join(", "),
        med(pp, |s| s.cpu_load)
    ));
    for line in &targets {
        println!("{line}");
    }
    let p = save(
        "scale",
        &json!({
            "luns": a.luns, "ports": a.ports, "secs": a.secs, "rounds": a.rounds, "hold": a.hold,
            "steady_secs": a.steady_secs,
            "baseline_bin": a.baseline_bin.as_ref().map(|b| b.display().to_string()),
            "rows": rows,
            "targets": targets,
        }),
    )?;
    println!("written: {}", p.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_is_listed_by_what_it_took_largest_first() {
        let m = |v: &[(&str, f64)]| -> BTreeMap<String, f64> {
            v.iter().map(|(k, s)| (k.to_string(), *s)).collect()
        };
        let before = m(&[("window", 1.0), ("observer", 2.0), ("publish", 0.5)]);
        // A work first seen in the second reading counts from zero; one
        // that did not move (under half a millisecond) is left out.
        let after = m(&[
            ("window", 1.107),
            ("observer", 2.084),
            ("publish", 0.5002),
            ("changes", 0.148),
        ]);
        assert_eq!(
            by_work(&before, &after),
            "changes 148, window 107, observer 84"
        );
    }
}
