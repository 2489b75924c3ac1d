//! `cargo xtask demo`: the README's first command. Sets up what it needs,
//! boots the VM testbed with 4 unequal paths (10/20/40/80 MiB/s), measures
//! a few static settings per workload phase (the yardstick), starts
//! `pathpilot daemon` in tune mode from round-robin (the worst of them)
//! under an fio workload that changes every 40 s, and shows `pathpilot top`
//! on it: interactive on a terminal, or with `--no-tui` a text summary every
//! 5 s. It ends with a table per phase: throughput at its start and at its
//! end, against the best static setting measured in the same boot.
//!
//! The dashboard runs on the host and reaches the guest's daemon through a
//! host-side unix socket that relays each request line over the testbed's
//! command channel (`pathpilot ctl` in the guest).
use std::{
    io::{BufRead, BufReader, IsTerminal, Write},
    os::unix::net::UnixListener,
    process::{Child, Command},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use pathpilot_testbed::figures::{bw_per_second, median};
use pathpilot_testbed::{Job, Testbed, WWN, base64, dirs::workspace_root, process};
use serde_json::Value;

#[derive(clap::Args)]
pub struct Args {
    /// Print a text summary every 10 s instead of the dashboard.
    #[arg(long)]
    pub no_tui: bool,
    /// How long the tuned run lasts (the dashboard also stops on `q`).
    #[arg(long, default_value_t = 160)]
    pub secs: u64,
    /// Seconds of each workload phase.
    #[arg(long, default_value_t = 40)]
    pub phase_secs: u64,
    /// Seconds of each static setting's measurement (after a 1 s ramp).
    #[arg(long, default_value_t = 3)]
    pub static_secs: u64,
}

/// The daemon adopts the map the demo made (and measured static settings
/// on), from round-robin; 1 s windows so that a phase is long enough.
fn config() -> String {
    format!(
        r#"mode = "tune"
window_secs = 1
metrics = "127.0.0.1:9777"
[maps]
create = false
adopt = ["3{:x}"]
[checker]
interval_secs = 1
timeout_secs = 5
[tuner]
windows = 2
settle_windows = 1
reload_min_interval_secs = 2
flap_hold_secs = 6
"#,
        WWN
    )
}

/// The workload's phases, each a different kind of I/O: name, fio args.
const PHASES: [(&str, &str); 3] = [
    ("random-64k-qd16", "--rw=randread --bs=64k --iodepth=16"),
    ("sequential-1m-qd1", "--rw=read --bs=1m --iodepth=1"),
    (
        "sequential-4k-writes-qd32",
        "--rw=write --bs=4k --iodepth=32 --size=512m",
    ),
];

/// The static settings measured per phase: name, selector, service-time
/// weights of the paths in path order (none: the selector's defaults).
const STATICS: [(&str, &str, Option<[u32; 4]>); 4] = [
    ("round-robin", "round-robin", None),
    ("queue-length", "queue-length", None),
    ("service-time", "service-time", Some([1, 1, 1, 1])),
    (
        "service-time 13:25:50:100",
        "service-time",
        Some([13, 25, 50, 100]),
    ),
];

/// `pathpilot reload` args for a static setting; `disks` are the path
/// names in path order (names follow probe order, so they are looked up).
fn static_args(selector: &str, weights: Option<[u32; 4]>, disks: &[String]) -> String {
    let mut a = format!("--selector {selector}");
    if let Some(w) = weights {
        let w: Vec<String> = disks
            .iter()
            .zip(w)
            .map(|(d, w)| format!("{d}={w}"))
            .collect();
        a.push_str(&format!(" --weights {}", w.join(",")));
    }
    a
}

/// The workload: the phases in turn, each fio run numbered, its phase in
/// /tmp/phase-N and its throughput per second in /tmp/bw-N_bw.1.log.
fn workload(phase: u64) -> String {
    let runs: Vec<String> = PHASES
        .iter()
        .map(|(name, args)| {
            format!(
                "i=$((i+1)); echo {name} > /tmp/phase; echo {name} > /tmp/phase-$i; \
                 fio --name={name} --filename=/dev/mapper/mpatha --direct=1 --ioengine=libaio \
                 --time_based --runtime={phase} --output=/dev/null --write_bw_log=/tmp/bw-$i \
                 --log_avg_msec=1000 {args}"
            )
        })
        .collect();
    format!(
        "echo $$ > /tmp/workload.pid; i=0; while true; do {}; done",
        runs.join("; ")
    )
}

/// MiB/s of `secs` of phase `args` on the map, after a 1 s ramp: the
/// median of fio's per-second figures, as the phase table takes the tuned
/// run's, so that a second the host stole from the guest weighs the same
/// on both sides.
fn measure(tb: &Testbed, args: &str, secs: u64) -> Result<f64> {
    let out = tb.sh(&format!(
        "rm -f /tmp/static_bw.1.log; fio --name=s --filename=/dev/mapper/mpatha --direct=1 \
         --ioengine=libaio --time_based --runtime={} --output=/dev/null \
         --write_bw_log=/tmp/static --log_avg_msec=1000 {args} 2>&1 && \
         cut -d, -f1,2 /tmp/static_bw.1.log",
        secs + 1
    ))?;
    let mut per_sec = bw_per_second(&out)?;
    per_sec.retain(|p| p.0 > 1.0);
    if per_sec.is_empty() {
        bail!("no fio per-second figures: {out}");
    }
    Ok(median_mib_s(&per_sec))
}

/// The median MiB/s of (second, MiB/s) points.
fn median_mib_s(per_sec: &[(f64, f64)]) -> f64 {
    median(&mut per_sec.iter().map(|p| p.1).collect::<Vec<_>>())
}

/// The best static setting of each phase: (setting, MiB/s).
fn yardstick(tb: &Testbed, secs: u64) -> Result<Vec<(String, f64)>> {
    let mut best = vec![(String::new(), 0.0); PHASES.len()];
    let disks: Vec<String> = tb.path_disks()?.into_iter().map(|(_, n)| n).collect();
    for (sname, selector, weights) in STATICS {
        let sargs = static_args(selector, weights, &disks);
        tb.sh(&format!("pathpilot reload mpatha {sargs} >/dev/null"))?;
        for (pi, (pname, pargs)) in PHASES.iter().enumerate() {
            let mib = measure(tb, pargs, secs)?;
            println!("demo: static {sname:<26} {pname:<26} {mib:>6.1} MiB/s");
            if mib > best[pi].1 {
                best[pi] = (sname.to_string(), mib);
            }
        }
    }
    Ok(best)
}

/// One phase run: its number, its phase, and (second, MiB/s) from fio.
type PhaseRun = (u32, String, Vec<(f64, f64)>);

/// Throughput at the start and at the end of each phase run, from fio's
/// per-second log: the median of seconds 2-6 and of the last 5.
fn phase_table(tb: &Testbed, best: &[(String, f64)]) -> Result<String> {
    let out = tb.sh("for p in /tmp/phase-*; do i=${p#/tmp/phase-}; \
         [ -s /tmp/bw-${i}_bw.1.log ] || continue; \
         echo \"P $i $(cat $p)\"; cut -d, -f1,2 /tmp/bw-${i}_bw.1.log | sed 's/^/L /'; done")?;
    let mut runs: Vec<PhaseRun> = vec![];
    for l in out.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            ["P", i, name] => runs.push((i.parse()?, name.to_string(), vec![])),
            ["L", rest @ ..] => {
                if let Some(r) = runs.last_mut() {
                    r.2.extend(bw_per_second(&rest.join(" "))?);
                }
            }
            _ => {}
        }
    }
    runs.sort_by_key(|r| r.0);
    let mut s = format!(
        "{:<30} {:>11} {:>9} {:>11}  {:<26} {:>8}\n",
        "phase", "start MiB/s", "end MiB/s", "best static", "(setting)", "end/best"
    );
    for (i, name, pts) in runs {
        let Some(pi) = PHASES.iter().position(|p| p.0 == name) else {
            continue;
        };
        let start: Vec<(f64, f64)> = pts
            .iter()
            .copied()
            .filter(|p| p.0 > 1.0 && p.0 <= 6.0)
            .collect();
        let tail = &pts[pts.len().saturating_sub(5)..];
        let (b, bm) = &best[pi];
        let end = median_mib_s(tail);
        s.push_str(&format!(
            "{:<30} {:>11.1} {:>9.1} {:>11.1}  {:<26} {:>7.0}%\n",
            format!("{i}. {name}"),
            median_mib_s(&start),
            end,
            bm,
            b,
            end / bm * 100.0
        ));
    }
    Ok(s)
}

struct Kill(Option<Child>);
impl Drop for Kill {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn b64(s: &str) -> String {
    base64::encode(s.as_bytes())
}

/// One request to the guest daemon, as a response line.
fn relay(tb: &Testbed, line: &str) -> String {
    let cmd = format!("pathpilot ctl \"$(echo {} | base64 -d)\"", b64(line.trim()));
    match tb.run(&cmd) {
        Ok(o) if !o.stdout.is_empty() => o.stdout_str().trim().to_string(),
        Ok(o) => format!(
            r#"{{"ok":false,"code":"unavailable","error":{}}}"#,
            Value::from(o.stderr_str().trim())
        ),
        Err(e) => format!(
            r#"{{"ok":false,"code":"unavailable","error":{}}}"#,
            Value::from(format!("{e:#}"))
        ),
    }
}

fn status(tb: &Testbed) -> Result<Value> {
    let v: Value = serde_json::from_str(&relay(tb, r#"{"cmd":"status"}"#))?;
    if v["ok"] != true {
        bail!("daemon: {}", v["error"]);
    }
    Ok(v["data"].clone())
}

fn summary(tb: &Testbed, t: f64) -> Result<String> {
    let s = status(tb)?;
    let phase = tb.sh("cat /tmp/phase 2>/dev/null").unwrap_or_default();
    let m = &s["maps"][0];
    let paths: Vec<String> = m["paths"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| {
                    format!(
                        "{} {:.1} ({:.0}%)",
                        p["name"].as_str().unwrap_or("?"),
                        p["rates"]["read_mib_s"].as_f64().unwrap_or(0.0)
                            + p["rates"]["write_mib_s"].as_f64().unwrap_or(0.0),
                        p["share_pct"].as_f64().unwrap_or(0.0)
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let last = s["decisions"]
        .as_array()
        .and_then(|d| d.last())
        .map(|d| {
            format!(
                "{} {} -> {} [{}]",
                d["knob"].as_str().unwrap_or("tuner"),
                d["old"].as_str().unwrap_or(""),
                d["new"].as_str().unwrap_or(""),
                d["outcome"].as_str().unwrap_or("")
            )
        })
        .unwrap_or_else(|| "-".into());
    Ok(format!(
        "{t:>5.0}s {:<26} {} {:>7.1} MiB/s  tuner {:<7} selector {:<16} max_sectors_kb {:<5} | {} | last: {last}",
        phase.trim(),
        m["name"].as_str().unwrap_or("-"),
        m["rates"]["read_mib_s"].as_f64().unwrap_or(0.0)
            + m["rates"]["write_mib_s"].as_f64().unwrap_or(0.0),
        m["tuner"].as_str().unwrap_or("-"),
        m["selector"].as_str().unwrap_or("-"),
        m["settings"]["max_sectors_kb"],
        paths.join(", "),
    ))
}

pub fn run_demo(args: Args) -> Result<()> {
    crate::setup::run(crate::setup::Args { no_apt: false })?;
    println!("demo: building pathpilot (release)");
    process::run(
        Command::new(env!("CARGO"))
            .current_dir(workspace_root())
            .args(["build", "--release", "-p", "pathpilot"]),
    )?;
    println!("demo: booting the testbed: 4 paths to one LUN, capped 10/20/40/80 MiB/s");
    let tb = Testbed::builder()
        .paths(4)
        .caps_mib(&[10.0, 20.0, 40.0, 80.0])
        .mem_mib(768)
        .boot()?;
    tb.sh("pathpilot create --all --selector round-robin >/dev/null")?;
    println!(
        "demo: the yardstick: {} static settings x {} phases, {} s each",
        STATICS.len(),
        PHASES.len(),
        args.static_secs + 1
    );
    // Like with like: the static settings pay the observer's cost too (in
    // the emulated guest it is large), as `pathpilot stat` at the daemon's
    // 1 s windows.
    tb.sh("pathpilot stat --interval 1s >/dev/null 2>&1 & echo $! > /tmp/stat.pid")?;
    let best = yardstick(&tb, args.static_secs);
    tb.sh("kill $(cat /tmp/stat.pid)")?;
    let best = best?;
    tb.sh("pathpilot reload mpatha --selector round-robin >/dev/null")?;
    println!("demo: the daemon starts from round-robin");
    tb.sh(&format!(
        "mkdir -p /etc/pathpilot && echo {} | base64 -d > /etc/pathpilot/config.toml && \
         (pathpilot daemon > /tmp/daemon.log 2>&1 &)",
        b64(&config())
    ))?;
    let t0 = Instant::now();
    while status(&tb).is_err() {
        if t0.elapsed() > Duration::from_secs(30) {
            bail!(
                "the daemon did not start:\n{}",
                tb.sh("cat /tmp/daemon.log")?
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    println!(
        "demo: {}",
        tb.sh("cat /tmp/daemon.log")?
            .trim()
            .replace('\n', "\ndemo: ")
    );
    let _load: Job = tb.spawn(&workload(args.phase_secs))?;
    let interactive = !args.no_tui && std::io::stdout().is_terminal();
    let t0 = Instant::now();
    if interactive {
        let sock = std::env::temp_dir().join(format!("pathpilot-demo-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&sock);
        let listener = UnixListener::bind(&sock).context("demo relay socket")?;
        listener.set_nonblocking(true)?;
        let mut top = Kill(Some(
            Command::new(workspace_root().join("target/release/pathpilot"))
                .args(["top", "--interval", "2s", "--socket"])
                .arg(&sock)
                .spawn()
                .context("starting pathpilot top")?,
        ));
        loop {
            if let Some(c) = top.0.as_mut()
                && c.try_wait()?.is_some()
            {
                break;
            }
            if t0.elapsed() > Duration::from_secs(args.secs) {
                break;
            }
            match listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false)?;
                    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
                    let mut line = String::new();
                    if BufReader::new(&stream).read_line(&mut line).is_ok()
                        && !line.trim().is_empty()
                    {
                        let reply = relay(&tb, &line);
                        let _ = (&stream).write_all(format!("{reply}\n").as_bytes());
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e.into()),
            }
        }
        drop(top);
        let _ = std::fs::remove_file(&sock);
    } else {
        println!(
            "demo: {} s, a summary every 10 s (phases change every {} s)",
            args.secs, args.phase_secs
        );
        while t0.elapsed() < Duration::from_secs(args.secs) {
            // Each status costs the emulated guest CPU that the tuner
            // measures: not too often.
            std::thread::sleep(Duration::from_secs(10));
            match summary(&tb, t0.elapsed().as_secs_f64()) {
                Ok(l) => println!("{l}"),
                Err(e) => println!("{:>5.0}s (no status: {e:#})", t0.elapsed().as_secs_f64()),
            }
        }
    }
    println!("\ndemo: the tuner's decisions:");
    println!("{}", tb.sh("pathpilot log")?);
    println!("demo: the map now:\n{}", tb.sh("pathpilot list")?);
    let s = status(&tb)?;
    println!("demo: decisions by outcome: {}", s["decision_counts"]);
    let stopped = stop_workload(&tb)?;
    println!(
        "\ndemo: per phase, from round-robin (fio's per-second figures; best static \
         measured above in this boot, with the observer attached):\n{}",
        phase_table(&tb, &best)?
    );
    if !stopped {
        bail!(
            "the workload did not stop within {STOP_SECS} s of SIGINT (its state is above); \
             the table lacks the phase that was running"
        );
    }
    Ok(())
}

/// How long fio gets to finish its in-flight I/O and write its log.
const STOP_SECS: u32 = 60;

/// Stops the workload loop and fio (which writes its per-second log as it
/// ends); whether fio ended. If it did not (once in six runs it hung past
/// the guest command's timeout), what the guest looks like is printed (a
/// map left suspended would hold fio's I/O) and fio is killed, so that the
/// phases that did end still make their table.
fn stop_workload(tb: &Testbed) -> Result<bool> {
    let stopped = tb.run(&format!(
        "kill $(cat /tmp/workload.pid); killall -INT fio; i=0; \
         while pidof fio >/dev/null; do i=$((i+1)); [ $i -gt {} ] && exit 3; sleep 0.2; done",
        STOP_SECS * 5
    ))?;
    if stopped.success() {
        return Ok(true);
    }
    println!(
        "demo: fio still running {STOP_SECS} s after SIGINT; the guest now:\n{}",
        tb.run(
            "for p in $(pidof fio); do echo \"fio $p: $(cut -d' ' -f3 /proc/$p/stat) \
             waiting in $(cat /proc/$p/wchan)\"; done; \
             dmsetup info -c; dmsetup status; \
             grep -H . /sys/block/sd*/inflight /sys/block/dm-*/inflight; \
             echo '--- the daemon log, last 30 lines'; tail -n 30 /tmp/daemon.log"
        )
        .map(|o| format!("{}{}", o.stdout_str(), o.stderr_str()))
        .unwrap_or_else(|e| format!("(the guest did not answer: {e:#})"))
        .trim_end()
    );
    tb.run("killall -KILL fio")?;
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_fio_seconds() {
        let v = bw_per_second("1000, 10240\n2000, 20480\n\n3000, 5120\n").unwrap();
        assert_eq!(median_mib_s(&v), 10.0);
    }
}
