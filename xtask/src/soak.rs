//! `cargo xtask soak --minutes N`: a long run (a benchmark, not CI). In the
//! VM testbed, the daemon in tune mode runs for N minutes while the
//! workload changes every 30 s and a path fault is injected in each phase
//! (cable pull and return, a hung path, an operator fail/reinstate, a
//! flapping path, none). Every write is verified (crc32c, read back as it
//! goes). It reports I/O errors and verify failures (both must be 0), the
//! daemon's RSS and open fds every 10 s, its BPF map entries against the
//! devices it should watch (a removed device must leave no entry), and the
//! decisions made and reverted. Exits non-zero if data was lost or entries
//! leaked.
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use pathpilot_testbed::dirs::workspace_root;
use pathpilot_testbed::{Job, Testbed, process};
use serde_json::Value;

#[derive(clap::Args)]
pub struct Args {
    /// How long to run.
    #[arg(long, default_value_t = 10.0)]
    pub minutes: f64,
    /// Run only the workloads whose name contains this (repeatable), e.g.
    /// "1M seq write"; default: all, in turn.
    #[arg(long)]
    pub workload: Vec<String>,
    /// Inject only the faults whose name contains this (repeatable), e.g.
    /// "hung"; default: all, in turn.
    #[arg(long)]
    pub fault: Vec<String>,
}

/// The entries of `all` whose name contains one of `wanted` (all when
/// `wanted` is empty); an error names a filter that matches nothing.
fn pick<'a, T>(
    all: &'a [T],
    name: impl Fn(&T) -> &str,
    wanted: &[String],
    what: &str,
) -> Result<Vec<&'a T>> {
    for w in wanted {
        if !all.iter().any(|t| name(t).contains(w.as_str())) {
            let names: Vec<&str> = all.iter().map(&name).collect();
            bail!(
                "no {what} named like {w:?}; there are: {}",
                names.join(", ")
            );
        }
    }
    Ok(all
        .iter()
        .filter(|t| wanted.is_empty() || wanted.iter().any(|w| name(t).contains(w.as_str())))
        .collect())
}

const PHASE: Duration = Duration::from_secs(30);
const SAMPLE: Duration = Duration::from_secs(10);
const PATHS: usize = 4;
const CAP_MIB: f64 = 20.0;

/// fio jobs of 28 s (inside a 30 s phase), all but one verified writers.
const WORKLOADS: &[(&str, &str)] = &[
    (
        "64k randwrite QD8",
        "--rw=randwrite --bs=64k --iodepth=8 --verify=crc32c --verify_backlog=16",
    ),
    (
        "1M seq write QD2",
        "--rw=write --bs=1M --iodepth=2 --verify=crc32c --verify_backlog=4",
    ),
    (
        "4k randwrite QD32",
        "--rw=randwrite --bs=4k --iodepth=32 --verify=crc32c --verify_backlog=64",
    ),
    ("64k randread QD16", "--rw=randread --bs=64k --iodepth=16"),
];

const FAULTS: &[&str] = &[
    "cable pull",
    "hung path",
    "operator fail",
    "flapping",
    "none",
];

const CONFIG: &str = r#"mode = "tune"
window_secs = 2
metrics = "off"
[checker]
interval_secs = 1
timeout_secs = 3
[tuner]
windows = 2
settle_windows = 1
reload_min_interval_secs = 2
flap_hold_secs = 6
"#;

struct Sample {
    t: f64,
    rss_kib: u64,
    fds: u64,
    threads: u64,
    bpf_watched: u64,
    bpf_counted: u64,
    expected: u64,
}

#[derive(Default)]
struct Tally {
    jobs: u32,
    io_errors: u32,
    verify_failures: u32,
    written_mib: u64,
    read_mib: u64,
}

pub fn run(args: Args) -> Result<()> {
    if args.minutes.is_nan() || args.minutes <= 0.0 {
        bail!("--minutes must be more than 0");
    }
    let workloads = pick(WORKLOADS, |w| w.0, &args.workload, "workload")?;
    let faults = pick(FAULTS, |f| f, &args.fault, "fault")?;
    println!("soak: building pathpilot (release)");
    process::run(
        std::process::Command::new(env!("CARGO"))
            .current_dir(workspace_root())
            .args(["build", "--release", "-p", "pathpilot"]),
    )?;
    let tb = Testbed::builder()
        .paths(PATHS)
        .cap_mib(CAP_MIB)
        .cmd_timeout(Duration::from_secs(60))
        .boot()?;
    tb.sh(&format!(
        "mkdir -p /etc/pathpilot && cat > /etc/pathpilot/soak.toml <<'EOF'\n{CONFIG}EOF\n\
         pathpilot daemon --config /etc/pathpilot/soak.toml > /tmp/daemon.log 2>&1 &\n\
         echo $! > /tmp/daemon.pid"
    ))?;
    wait_until(&tb, Duration::from_secs(30), |tb| {
        Ok(status(tb).is_ok_and(|s| {
            s["maps"][0]["paths"]
                .as_array()
                .is_some_and(|p| p.len() == PATHS)
        }))
    })
    .context("the daemon did not make its map")?;
    let pid: u32 = tb.sh("cat /tmp/daemon.pid")?.trim().parse()?;
    println!(
        "soak: {} minutes, {PATHS} paths at {CAP_MIB} MiB/s, daemon pid {pid}; a phase every {} s",
        args.minutes,
        PHASE.as_secs()
    );

    let total = Duration::from_secs_f64(args.minutes * 60.0);
    let t0 = Instant::now();
    let mut samples = vec![];
    let mut tally = Tally::default();
    let mut next_sample = t0;
    let mut phase = 0usize;
    while t0.elapsed() < total {
        let start = Instant::now();
        let (wname, wargs) = *workloads[phase % workloads.len()];
        let fault = *faults[phase % faults.len()];
        println!(
            "soak: {:>5.0} s phase {phase}: {wname}, fault: {fault}",
            t0.elapsed().as_secs_f64()
        );
        let job = tb.spawn(&format!(
            "fio --name=s --filename=/dev/mapper/mpatha --direct=1 --ioengine=libaio \
             --size=256m --time_based --runtime=28 --verify_fatal=1 {wargs} \
             --output-format=terse --terse-version=3 2>&1"
        ))?;
        let mut step = 0;
        while start.elapsed() < PHASE - Duration::from_millis(500) {
            if Instant::now() >= next_sample {
                next_sample += SAMPLE;
                let s = sample(&tb, pid, t0)?;
                samples.push(s);
            }
            fault_step(&tb, fault, start.elapsed(), &mut step)?;
            std::thread::sleep(Duration::from_millis(250));
        }
        fault_end(&tb, fault, &mut step)?;
        collect(&tb, &job, wname, &mut tally)?;
        phase += 1;
    }
    // Settle: every path back, then the final figures.
    wait_until(&tb, Duration::from_secs(30), |tb| {
        let s = status(tb)?;
        let p = s["maps"][0]["paths"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        Ok(p.len() == PATHS && p.iter().all(|p| p["dm_state"] == "active"))
    })
    .context("the paths did not all come back")?;
    std::thread::sleep(Duration::from_secs(3)); // one more window
    let last = sample(&tb, pid, t0)?;
    let s = status(&tb)?;
    tb.sh("kill $(cat /tmp/daemon.pid)")?;
    let stopped = wait_until(&tb, Duration::from_secs(10), |tb| {
        Ok(!tb
            .run("kill -0 $(cat /tmp/daemon.pid) 2>/dev/null")?
            .success())
    });
    samples.push(last);
    report(&samples, &tally, &s, phase);
    let last = samples.last().expect("a sample");
    let mut bad = vec![];
    if tally.io_errors > 0 || tally.verify_failures > 0 {
        bad.push(format!(
            "{} I/O errors and {} verify failures",
            tally.io_errors, tally.verify_failures
        ));
    }
    if last.bpf_watched != last.expected {
        bad.push(format!(
            "{} devices watched, {} expected: entries of removed devices remain",
            last.bpf_watched, last.expected
        ));
    }
    if stopped.is_err() {
        bad.push("the daemon did not stop on SIGTERM".into());
    }
    if !bad.is_empty() {
        bail!(
            "soak failed: {}\n{}",
            bad.join("; "),
            tb.sh("tail -50 /tmp/daemon.log").unwrap_or_default()
        );
    }
    println!("soak: ok");
    Ok(())
}

fn status(tb: &Testbed) -> Result<Value> {
    let out = tb.sh("pathpilot ctl '{\"cmd\":\"status\"}'")?;
    let v: Value = serde_json::from_str(out.trim()).context("status JSON")?;
    Ok(v["data"].clone())
}

fn wait_until(
    tb: &Testbed,
    timeout: Duration,
    mut cond: impl FnMut(&Testbed) -> Result<bool>,
) -> Result<()> {
    let t = Instant::now();
    while t.elapsed() < timeout {
        if cond(tb)? {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    bail!("timed out after {timeout:?}")
}

/// Drives one phase's fault by its time into the phase; `step` counts the
/// actions done.
fn fault_step(tb: &Testbed, fault: &str, at: Duration, step: &mut u32) -> Result<()> {
    let s = at.as_secs_f64();
    match (fault, *step) {
        ("cable pull", 0) if s >= 8.0 => {
            tb.pull_path(1)?;
            *step = 1;
        }
        ("cable pull", 1) if s >= 16.0 => {
            tb.restore_path(1)?;
            *step = 2;
        }
        ("hung path", 0) if s >= 8.0 => {
            tb.set_caps(2, 1.0 / 1048576.0, 0)?;
            *step = 1;
        }
        ("hung path", 1) if s >= 16.0 => {
            tb.set_caps(2, CAP_MIB, 0)?;
            *step = 2;
        }
        ("operator fail", 0) if s >= 8.0 => {
            let name = path_name(tb, 0)?;
            tb.sh(&format!(
                "pathpilot ctl '{{\"cmd\":\"fail\",\"path\":\"{name}\"}}' > /tmp/admin.path; echo {name} > /tmp/admin.name"
            ))?;
            *step = 1;
        }
        ("operator fail", 1) if s >= 16.0 => {
            tb.sh(
                "pathpilot ctl \"{\\\"cmd\\\":\\\"reinstate\\\",\\\"path\\\":\\\"$(cat /tmp/admin.name)\\\"}\" >/dev/null",
            )?;
            *step = 2;
        }
        // Down 2 s, up 2 s, from 6 s to 22 s into the phase.
        ("flapping", n) if n < 8 && s >= 6.0 + 2.0 * f64::from(n) => {
            if n % 2 == 0 {
                tb.pull_path(3)?;
            } else {
                tb.restore_path(3)?;
            }
            *step = n + 1;
        }
        _ => {}
    }
    Ok(())
}

/// Undoes whatever a phase's fault left (a phase cut short).
fn fault_end(tb: &Testbed, fault: &str, step: &mut u32) -> Result<()> {
    match (fault, *step) {
        ("cable pull", 1) => {
            tb.restore_path(1)?;
        }
        ("hung path", 1) => tb.set_caps(2, CAP_MIB, 0)?,
        ("operator fail", 1) => {
            tb.sh(
                "pathpilot ctl \"{\\\"cmd\\\":\\\"reinstate\\\",\\\"path\\\":\\\"$(cat /tmp/admin.name)\\\"}\" >/dev/null",
            )?;
        }
        ("flapping", n) if n % 2 == 1 => {
            tb.restore_path(3)?;
        }
        _ => {}
    }
    *step = 99;
    Ok(())
}

/// The kernel name of the map's `i`th path.
fn path_name(tb: &Testbed, i: usize) -> Result<String> {
    let s = status(tb)?;
    s["maps"][0]["paths"][i]["name"]
        .as_str()
        .map(str::to_string)
        .context("no such path in the status")
}

fn collect(tb: &Testbed, job: &Job, what: &str, tally: &mut Tally) -> Result<()> {
    let out = tb.wait_job(job, Duration::from_secs(120))?;
    let text = out.stdout_str();
    tally.jobs += 1;
    let verify = text
        .lines()
        .filter(|l| l.contains("verify") && (l.contains("bad") || l.contains("fail")))
        .count() as u32;
    let Some(line) = text.lines().find(|l| l.starts_with("3;")) else {
        println!(
            "soak:   {what}: fio printed no result (exit {}):\n{text}",
            out.code
        );
        tally.io_errors += 1;
        tally.verify_failures += verify;
        return Ok(());
    };
    let f: Vec<&str> = line.split(';').collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let err = num(4);
    tally.written_mib += num(46) / 1024;
    tally.read_mib += num(5) / 1024;
    if err != 0 || !out.success() {
        tally.io_errors += 1;
        // fio's own words (which offset, what was expected) and the
        // daemon's recent actions, for the post-mortem.
        let said: Vec<&str> = text.lines().filter(|l| !l.starts_with("3;")).collect();
        println!(
            "soak:   {what}: fio exit {}:\n{}\n{}",
            out.code,
            said.join("\n"),
            tb.sh("tail -40 /tmp/daemon.log; dmesg | tail -20")
                .unwrap_or_default()
        );
    }
    tally.verify_failures += verify;
    println!(
        "soak:   {what}: wrote {} MiB, read {} MiB, error {err}, verify failures {verify}",
        num(46) / 1024,
        num(5) / 1024
    );
    Ok(())
}

fn sample(tb: &Testbed, pid: u32, t0: Instant) -> Result<Sample> {
    let out = tb.sh(&format!(
        "grep -E '^(VmRSS|Threads):' /proc/{pid}/status; ls /proc/{pid}/fd | wc -l"
    ))?;
    let mut rss = 0;
    let mut threads = 0;
    let mut fds = 0;
    for l in out.lines() {
        let n = |l: &str| {
            l.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        if l.starts_with("VmRSS:") {
            rss = n(l);
        } else if l.starts_with("Threads:") {
            threads = n(l);
        } else if let Ok(v) = l.trim().parse() {
            fds = v;
        }
    }
    let s = status(tb)?;
    let maps = s["maps"].as_array().cloned().unwrap_or_default();
    let expected = maps.len() as u64
        + maps
            .iter()
            .map(|m| m["paths"].as_array().map_or(0, |p| p.len() as u64))
            .sum::<u64>();
    Ok(Sample {
        t: t0.elapsed().as_secs_f64(),
        rss_kib: rss,
        fds,
        threads,
        bpf_watched: s["bpf_watched"].as_u64().unwrap_or(0),
        bpf_counted: s["bpf_counted"].as_u64().unwrap_or(0),
        expected,
    })
}

fn report(samples: &[Sample], tally: &Tally, status: &Value, phases: usize) {
    println!("\nsoak: daemon over time");
    println!(
        "{:>7} {:>9} {:>5} {:>8} {:>8} {:>8} {:>9}",
        "t (s)", "RSS KiB", "fds", "threads", "watched", "counted", "expected"
    );
    for s in samples {
        println!(
            "{:>7.0} {:>9} {:>5} {:>8} {:>8} {:>8} {:>9}",
            s.t, s.rss_kib, s.fds, s.threads, s.bpf_watched, s.bpf_counted, s.expected
        );
    }
    let first = samples.first();
    let last = samples.last();
    let max_rss = samples.iter().map(|s| s.rss_kib).max().unwrap_or(0);
    let max_fds = samples.iter().map(|s| s.fds).max().unwrap_or(0);
    let counts: Vec<String> = status["decision_counts"]
        .as_array()
        .map(|v| {
            v.iter()
                .map(|c| format!("{} {}", c[0].as_str().unwrap_or("?"), c[1]))
                .collect()
        })
        .unwrap_or_default();
    println!(
        "\nsoak: {phases} phases, {} fio jobs: {} MiB written, {} MiB read; I/O errors {}, verify failures {}",
        tally.jobs, tally.written_mib, tally.read_mib, tally.io_errors, tally.verify_failures
    );
    if let (Some(f), Some(l)) = (first, last) {
        println!(
            "soak: RSS {} -> {} KiB (max {max_rss}), fds {} -> {} (max {max_fds}), threads {} -> {}",
            f.rss_kib, l.rss_kib, f.fds, l.fds, f.threads, l.threads
        );
        println!(
            "soak: BPF entries at the end: {} watched, {} with counters, {} devices expected (map + paths)",
            l.bpf_watched, l.bpf_counted, l.expected
        );
    }
    println!("soak: decisions by outcome: {}", counts.join(", "));
}
