//! Observer cost on the host: the same fio job bare, under `pathpilot stat`,
//! and under bpftrace's classic biolatency (issue and complete tracepoints,
//! a hash keyed by device and sector: what users already run), rotated
//! within each round so drift on this shared machine hits every side. The
//! kernel's own accounting (`kernel.bpf_stats_enabled`) gives each tool's
//! eBPF time: run_time_ns summed over its programs, divided by fio's I/Os.
//! pathpilot runs as it comes and with `--bio-probe`. With `--baseline-rev
//! REV`, the pathpilot of another commit runs in the same rounds (before
//! and after, measured alike), with that commit's defaults (before the
//! bio probe became opt-in, that is the `--bio-probe` row's work). Empty
//! programs on pathpilot's tracepoints run in the same rounds too
//! (`bench::floor`): the floor under any program on those events, which
//! pathpilot's time is also read against.
use std::{
    collections::BTreeMap,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use pathpilot_testbed::dirs::workspace_root;
use pathpilot_testbed::process;
use serde_json::json;

use pathpilot_testbed::figures::median;

use super::{Loss, save};

#[derive(clap::Args)]
pub struct Args {
    /// Rounds; each runs every configuration once, in rotated order.
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    /// Seconds per fio run.
    #[arg(long, default_value_t = 6)]
    secs: u64,
    /// A one-minute collector run for CPU and memory after the rounds.
    #[arg(long, default_value_t = 60)]
    collector_secs: u64,
    /// Also measure the pathpilot of this git revision (built into
    /// target/bench-baseline), e.g. the commit before an observer change.
    /// The target of a fifth of the baseline's eBPF time is judged only
    /// against release 0.1.0 (65ec2f7); against any other revision the
    /// ratio is printed alone.
    #[arg(long, conflicts_with = "baseline_bin")]
    baseline_rev: Option<String>,
    /// Also measure this pathpilot binary as the baseline (one already
    /// built, e.g. copied aside before a change).
    #[arg(long)]
    baseline_bin: Option<PathBuf>,
}

/// Release 0.1.0, whose observer the target is set against: a fifth of
/// its eBPF time per I/O, judged against this baseline only.
const ISSUE_CODE: &str = "65ec2f7";

/// The full commit id `rev` names, if any.
fn commit_of(rev: &str) -> Option<String> {
    process::output(
        Command::new("git")
            .current_dir(workspace_root())
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("{rev}^{{commit}}")),
    )
    .ok()
    .map(|s| s.trim().to_string())
}

/// The line comparing `name` with the baseline: the target's verdict when
/// the baseline is release 0.1.0, else the ratio alone.
fn baseline_line(name: &str, pp: f64, base: f64, issue_code: bool) -> String {
    if issue_code {
        format!(
            "target {}: {name}, a fifth of 0.1.0's ({ISSUE_CODE}): {pp:.0} vs {base:.0} ns \
             ({:.2}x)",
            if pp * 5.0 <= base { "met" } else { "MISSED" },
            pp / base
        )
    } else {
        format!(
            "{name} against the baseline: {pp:.0} vs {base:.0} ns ({:.2}x; the fifth is judged \
             with --baseline-rev {ISSUE_CODE})",
            pp / base
        )
    }
}

/// biolatency as bpftrace's tools had it before block_io_* tracepoints:
/// the classic issue and complete tracepoints, a hash keyed by dev, sector.
const BIOLATENCY: &str = r#"tracepoint:block:block_rq_issue { @start[args->dev, args->sector] = nsecs; }
tracepoint:block:block_rq_complete /@start[args->dev, args->sector]/ {
  @usecs = hist((nsecs - @start[args->dev, args->sector]) / 1000);
  delete(@start[args->dev, args->sector]);
}
"#;

struct Loop {
    dev: String,
    image: PathBuf,
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
        let _ = std::fs::remove_file(&self.image);
    }
}

/// (IOPS, I/Os) of one fio run.
fn fio(dev: &str, secs: u64) -> Result<(f64, u64)> {
    let out = process::output(Command::new("fio").args([
        "--name=bench",
        &format!("--filename={dev}"),
        "--rw=randread",
        "--bs=4k",
        "--direct=1",
        "--ioengine=psync",
        "--numjobs=1",
        "--time_based",
        &format!("--runtime={secs}"),
        "--randrepeat=0",
        "--output-format=json",
    ]))?;
    let v: serde_json::Value = serde_json::from_str(&out).context("fio json")?;
    let r = &v["jobs"][0]["read"];
    Ok((
        r["iops"].as_f64().context("fio iops")?,
        r["total_ios"].as_u64().context("fio total_ios")?,
    ))
}

/// A tool attached to the block tracepoints while fio runs.
#[derive(Clone, Debug, PartialEq)]
enum Tool {
    Bare,
    /// `pathpilot stat` as it comes: no per-bio probe.
    Pathpilot(PathBuf),
    /// The same with its per-bio probe (`stat --bio-probe`: cgroup bytes,
    /// bio order), as every pathpilot before the probe became opt-in.
    WithBios(PathBuf),
    Baseline(PathBuf),
    Biolatency,
    /// Empty programs on pathpilot's tracepoints (see `bench::floor`).
    Floor,
}

impl Tool {
    fn name(&self) -> &'static str {
        match self {
            Tool::Bare => "bare",
            Tool::Pathpilot(_) => "pathpilot",
            Tool::WithBios(_) => "pathpilot --bio-probe",
            Tool::Baseline(_) => "pathpilot (baseline)",
            Tool::Biolatency => "biolatency",
            Tool::Floor => "empty programs",
        }
    }

    /// Starts the tool and waits until its programs are attached.
    fn start(&self, dev: &str) -> Result<Option<Child>> {
        let mut c = match self {
            Tool::Bare => return Ok(None),
            Tool::Pathpilot(bin) | Tool::WithBios(bin) | Tool::Baseline(bin) => Command::new(bin)
                .args(["stat", dev, "--interval", "1s", "--json"])
                .args(matches!(self, Tool::WithBios(_)).then_some("--bio-probe"))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()?,
            Tool::Biolatency => {
                tracefs()?;
                Command::new("bpftrace")
                    .args(["-e", BIOLATENCY])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .context("bpftrace (cargo xtask setup installs it)")?
            }
            Tool::Floor => Command::new(std::env::current_exe()?)
                .args(["bench", "floor-probes"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()?,
        };
        use std::io::BufRead;
        let mut line = String::new();
        // pathpilot and the floor say "observing" on stderr, bpftrace
        // "Attaching N probes" on stdout.
        let (want, r): (&str, Box<dyn std::io::Read + Send>) = match self {
            Tool::Biolatency => ("Attaching", Box::new(c.stdout.take().context("stdout")?)),
            _ => ("observing", Box::new(c.stderr.take().context("stderr")?)),
        };
        let mut r = std::io::BufReader::new(r);
        let t = Instant::now();
        // What it said before it failed to start, for the error.
        let mut said = String::new();
        while !line.contains(want) {
            line.clear();
            if r.read_line(&mut line)? == 0 || t.elapsed() > Duration::from_secs(30) {
                let _ = c.kill();
                // bpftrace's errors are on the stream not read above.
                if let Some(mut e) = c.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut said);
                }
                let _ = c.wait();
                bail!("{} did not start: {}", self.name(), said.trim());
            }
            said.push_str(&line);
        }
        // Keep draining its output so it never blocks on a full pipe
        // (bpftrace's stderr too, the stream not read above).
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        });
        if let Some(mut e) = c.stderr.take() {
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut e, &mut std::io::sink());
            });
        }
        // bpftrace prints before its programs are all attached.
        std::thread::sleep(Duration::from_millis(500));
        Ok(Some(c))
    }
}

/// bpftrace finds the classic tracepoints (biolatency's) through tracefs,
/// which a fresh machine may not have mounted; pathpilot itself needs no
/// tracefs. Mounted where the kernel expects it, as bpftrace's docs ask.
fn tracefs() -> Result<()> {
    let has = |dir: &str| std::path::Path::new(dir).join("events/block").is_dir();
    if has("/sys/kernel/tracing") || has("/sys/kernel/debug/tracing") {
        return Ok(());
    }
    process::run(Command::new("mount").args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"]))
        .context(
            "biolatency's classic tracepoints need tracefs: mounting it at /sys/kernel/tracing",
        )?;
    if !has("/sys/kernel/tracing") {
        bail!("tracefs mounted at /sys/kernel/tracing holds no block events");
    }
    println!("bench observer: mounted tracefs at /sys/kernel/tracing (for bpftrace's biolatency)");
    Ok(())
}

fn stop(c: Option<Child>) -> Result<()> {
    if let Some(mut c) = c {
        unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
        c.wait()?;
    }
    Ok(())
}

/// The programs a process holds, by id.
fn programs_of(pid: u32) -> Result<BTreeMap<u32, super::ProgramReading>> {
    let mut ids = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))?.flatten() {
        if let Ok(t) = std::fs::read_to_string(e.path()) {
            ids.extend(t.lines().filter_map(|l| {
                l.strip_prefix("prog_id:")
                    .and_then(|v| v.trim().parse::<u32>().ok())
            }));
        }
    }
    let all: serde_json::Value = serde_json::from_str(&process::output(
        Command::new("bpftool").args(["-j", "prog", "show"]),
    )?)?;
    Ok(all
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let id = p["id"].as_u64()? as u32;
            ids.contains(&id).then(|| {
                (
                    id,
                    (
                        p["name"].as_str().unwrap_or("").to_string(),
                        p["run_time_ns"].as_u64().unwrap_or(0),
                        p["run_cnt"].as_u64().unwrap_or(0),
                    ),
                )
            })
        })
        .collect())
}

/// One measured run.
struct Run {
    iops: f64,
    ns_per_io: f64,
    /// Program name -> (ns per run, runs per I/O).
    programs: BTreeMap<String, (f64, f64)>,
}

fn measure(tool: &Tool, dev: &str, secs: u64) -> Result<Run> {
    let child = tool.start(dev)?;
    let pid = child.as_ref().map(|c| c.id());
    let before = pid.map(programs_of).transpose()?.unwrap_or_default();
    let r = fio(dev, secs);
    let after = pid.map(programs_of).transpose()?.unwrap_or_default();
    stop(child)?;
    let (iops, ios) = r?;
    let (ns_per_io, programs) = super::program_costs(&before, &after, ios);
    Ok(Run {
        iops,
        ns_per_io,
        programs,
    })
}

/// utime + stime in seconds, from /proc/PID/stat.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = s.rsplit_once(')').context("stat format")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>()? + f[12].parse::<f64>()?;
    Ok(ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64)
}

/// A `/proc/PID/status` size in KiB (`VmHWM`: the peak, `VmRSS`: now).
fn status_kib(pid: u32, field: &str) -> Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| {
            v.trim_start_matches(':')
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()
        })
        .with_context(|| field.to_string())
}

/// pathpilot's time per I/O against the floor's: what empty programs on the
/// same events cost, matched round by round to the programs each
/// configuration ran and how often (medians over the rounds).
fn floor_lines(runs: &BTreeMap<&'static str, Vec<Run>>) -> Vec<String> {
    let Some(floor) = runs.get(Tool::Floor.name()) else {
        return vec![];
    };
    let mut out = vec![format!(
        "floor: {:.0} ns of eBPF per I/O for empty programs on pathpilot's {} tracepoints \
         (the kernel's dispatch of each event to a program, and the accounting that times it)",
        median(&mut floor.iter().map(|r| r.ns_per_io).collect::<Vec<_>>()),
        super::floor::tracepoints(true).len()
    )];
    let mut above_of = BTreeMap::new();
    for name in ["pathpilot", "pathpilot --bio-probe", "pathpilot (baseline)"] {
        let Some(v) = runs.get(name) else { continue };
        let (mut at, mut above): (Vec<f64>, Vec<f64>) = v
            .iter()
            .zip(floor)
            .filter_map(|(r, f)| {
                let m = super::floor::matched(&r.programs, &f.programs)?;
                Some((m, r.ns_per_io - m))
            })
            .unzip();
        if above.is_empty() {
            continue;
        }
        let a = median(&mut above);
        above_of.insert(name, a);
        out.push(format!(
            "{name}: {a:.0} ns per I/O above the floor of its own programs' runs ({:.0} ns)",
            median(&mut at)
        ));
    }
    // Beside the target's measure (all of the time), not instead of it.
    if let Some(base) = above_of.get("pathpilot (baseline)") {
        for name in ["pathpilot", "pathpilot --bio-probe"] {
            if let Some(a) = above_of.get(name) {
                out.push(format!(
                    "{name} above the floor against the baseline above it: {:.2}x (the \
                     targets are judged on the whole time, above)",
                    a / base
                ));
            }
        }
    }
    out
}

/// Builds the pathpilot of `rev` in a worktree of its own.
fn build_baseline(rev: &str) -> Result<PathBuf> {
    let root = workspace_root();
    let tree = root.join("target/bench-baseline/src");
    let _ = Command::new("git")
        .current_dir(&root)
        .args(["worktree", "remove", "--force"])
        .arg(&tree)
        .status();
    process::run(
        Command::new("git")
            .current_dir(&root)
            .args(["worktree", "add", "--detach"])
            .arg(&tree)
            .arg(rev),
    )?;
    println!("bench observer: building the baseline {rev} (a separate target dir)");
    process::run(
        Command::new(env!("CARGO"))
            .current_dir(&tree)
            .env(
                "CARGO_TARGET_DIR",
                root.join("target/bench-baseline/target"),
            )
            .args(["build", "--release", "-p", "pathpilot"]),
    )?;
    Ok(root.join("target/bench-baseline/target/release/pathpilot"))
}

pub fn run(args: Args) -> Result<()> {
    process::run(
        Command::new(env!("CARGO"))
            .current_dir(workspace_root())
            .args(["build", "--release", "-p", "pathpilot"]),
    )?;
    let bin = workspace_root().join("target/release/pathpilot");
    let mut tools = vec![
        Tool::Bare,
        Tool::Pathpilot(bin.clone()),
        Tool::WithBios(bin.clone()),
        Tool::Biolatency,
        Tool::Floor,
    ];
    let issue_code = args.baseline_rev.as_deref().is_some_and(|rev| {
        let c = commit_of(rev);
        c.is_some() && c == commit_of(ISSUE_CODE)
    });
    if let Some(rev) = &args.baseline_rev {
        tools.push(Tool::Baseline(build_baseline(rev)?));
    }
    if let Some(bin) = &args.baseline_bin {
        if !bin.is_file() {
            bail!("--baseline-bin {}: no such file", bin.display());
        }
        tools.push(Tool::Baseline(bin.clone()));
    }
    process::run(Command::new("sysctl").args(["-qw", "kernel.bpf_stats_enabled=1"]))?;
    // The backing file lives in the page cache, so the loop device answers
    // from memory and the probes' own cost is what shows.
    let image = std::env::temp_dir().join(format!("pathpilot-bench-{}.img", std::process::id()));
    std::fs::write(&image, vec![0x5au8; 256 << 20])?;
    let dev = process::output(
        Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&image),
    )?
    .trim()
    .to_string();
    let lo = Loop { dev, image };
    println!(
        "bench observer: {} rounds of {} s fio 4 KiB random reads (psync, O_DIRECT) on {} \
         (page-cache backed), each of: {}",
        args.rounds,
        args.secs,
        lo.dev,
        tools.iter().map(Tool::name).collect::<Vec<_>>().join(", ")
    );
    fio(&lo.dev, 2)?; // warm-up
    let mut runs: BTreeMap<&'static str, Vec<Run>> = BTreeMap::new();
    for r in 0..args.rounds as usize {
        let mut order = tools.clone();
        order.rotate_left(r % tools.len());
        for t in &order {
            let m = measure(t, &lo.dev, args.secs)?;
            println!(
                "  round {} {:<26} {:>9.0} IOPS {:>7.0} ns of eBPF per I/O",
                r + 1,
                t.name(),
                m.iops,
                m.ns_per_io
            );
            runs.entry(t.name()).or_default().push(m);
        }
    }
    let col = |name: &str, f: &dyn Fn(&Run) -> f64| -> Vec<f64> {
        runs.get(name)
            .map(|v| v.iter().map(f).collect())
            .unwrap_or_default()
    };
    let bare = col("bare", &|r| r.iops);
    println!();
    println!(
        "{:<26} {:>10} {:>12} {:>12} {:>9}",
        "configuration", "IOPS", "eBPF ns/I/O", "IOPS lost", "+-95%"
    );
    let mut table = vec![];
    let mut ns = BTreeMap::new();
    for t in &tools {
        let name = t.name();
        let mut iops = col(name, &|r| r.iops);
        let mut n = col(name, &|r| r.ns_per_io);
        let l = (*t != Tool::Bare).then(|| Loss::of(&bare, &iops));
        let (lost, half_width, measurable) =
            l.map_or((0.0, 0.0, true), |l| (l.mean, l.half_width, l.measurable()));
        let ns_m = median(&mut n);
        ns.insert(name, ns_m);
        let lost_s = if *t == Tool::Bare {
            "-".to_string()
        } else if measurable {
            format!("{lost:.1}%")
        } else {
            format!("{lost:.1}% (inconclusive)")
        };
        println!(
            "{:<26} {:>10.0} {:>12.0} {:>12} {:>8.1}",
            name,
            median(&mut iops),
            ns_m,
            lost_s,
            half_width
        );
        table.push(json!({
            "configuration": name, "iops": iops, "ns_per_io": n, "ns_per_io_median": ns_m,
            "iops_lost_pct": lost, "iops_lost_ci95_half_width": half_width, "iops_lost_measurable": measurable,
        }));
    }
    // Per program, from the last round (they barely move between rounds).
    println!();
    let mut programs = BTreeMap::new();
    for (name, v) in &runs {
        if let Some(last) = v.last().filter(|r| !r.programs.is_empty()) {
            let p: Vec<String> = last
                .programs
                .iter()
                .map(|(n, (t, k))| format!("{n} {t:.0} ns x {k:.2}"))
                .collect();
            println!("{name:<26} {}", p.join(", "));
            programs.insert(*name, p.join(", "));
        }
    }
    let anchor = ns["biolatency"];
    println!();
    let mut targets = vec![];
    for name in ["pathpilot", "pathpilot --bio-probe"] {
        let pp = ns[name];
        targets.push(format!(
            "target {}: {name}'s eBPF per I/O <= biolatency's: {pp:.0} vs {anchor:.0} ns ({:.2}x)",
            if pp <= anchor { "met" } else { "MISSED" },
            pp / anchor
        ));
        if let Some(base) = ns.get("pathpilot (baseline)") {
            targets.push(baseline_line(name, pp, *base, issue_code));
        }
    }
    for line in &targets {
        println!("{line}");
    }
    println!();
    let floor = floor_lines(&runs);
    for line in &floor {
        println!("{line}");
    }

    println!(
        "bench observer: collector at 1 s interval for {} s under the same load",
        args.collector_secs
    );
    let c = Tool::Pathpilot(bin)
        .start(&lo.dev)?
        .context("pathpilot stat")?;
    let pid = c.id();
    let cpu0 = cpu_seconds(pid)?;
    let t0 = Instant::now();
    let mut load = Command::new("fio")
        .args([
            "--name=load",
            &format!("--filename={}", lo.dev),
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--ioengine=psync",
            "--time_based",
            &format!("--runtime={}", args.collector_secs),
            "--output=/dev/null",
        ])
        .stdout(Stdio::null())
        .spawn()?;
    let mut rss = 0;
    while load.try_wait()?.is_none() {
        rss = rss.max(status_kib(pid, "VmRSS")?);
        std::thread::sleep(Duration::from_millis(500));
    }
    let cpu = cpu_seconds(pid)? - cpu0;
    let elapsed = t0.elapsed().as_secs_f64();
    let hwm = status_kib(pid, "VmHWM")?;
    rss = rss.max(status_kib(pid, "VmRSS")?);
    stop(Some(c))?;
    let cpu_per_min = cpu / elapsed * 60.0;
    println!("{:<34} {:>9.3}", "collector CPU s per minute", cpu_per_min);
    println!(
        "{:<34} {:>9.1} MiB  (steady {:.1} MiB; target < 20 MiB)",
        "collector peak RSS",
        hwm as f64 / 1024.0,
        rss as f64 / 1024.0
    );
    let path = save(
        "observer",
        &json!({
            "bench": "observer",
            "rounds": args.rounds,
            "secs": args.secs,
            "configurations": table,
            "programs": programs,
            "targets": targets,
            "notes": floor,
            "collector_cpu_s_per_min": cpu_per_min,
            "collector_rss_running_max_mib": rss as f64 / 1024.0,
            "collector_peak_rss_mib": hwm as f64 / 1024.0,
        }),
    )?;
    println!("wrote {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fifth_is_judged_only_against_the_issues_code() {
        let l = baseline_line("pathpilot", 286.0, 868.0, true);
        assert!(
            l.starts_with("target MISSED: pathpilot, a fifth of 0.1.0's (65ec2f7)"),
            "{l}"
        );
        assert!(baseline_line("pathpilot", 170.0, 868.0, true).starts_with("target met"));
        let l = baseline_line("pathpilot", 286.0, 278.0, false);
        assert!(!l.contains("target"), "{l}");
        assert!(l.contains("286 vs 278 ns (1.03x"), "{l}");
    }

    #[test]
    fn pathpilot_is_read_above_the_floor_of_its_own_programs_runs() {
        let run = |ns_per_io: f64, programs: &[(&str, f64, f64)]| Run {
            iops: 1.0,
            ns_per_io,
            programs: programs
                .iter()
                .map(|(n, ns, k)| (n.to_string(), (*ns, *k)))
                .collect(),
        };
        let mut runs: BTreeMap<&'static str, Vec<Run>> = BTreeMap::new();
        runs.insert(
            "empty programs",
            vec![
                run(
                    110.0,
                    &[
                        ("issue", 35.0, 1.0),
                        ("bio", 40.0, 1.0),
                        ("done", 35.0, 1.0),
                    ],
                ),
                run(
                    120.0,
                    &[
                        ("issue", 40.0, 1.0),
                        ("bio", 40.0, 1.0),
                        ("done", 40.0, 1.0),
                    ],
                ),
            ],
        );
        runs.insert(
            "pathpilot",
            vec![
                run(200.0, &[("issue", 90.0, 1.0), ("done", 110.0, 1.0)]),
                run(230.0, &[("issue", 100.0, 1.0), ("done", 130.0, 1.0)]),
            ],
        );
        let l = floor_lines(&runs);
        assert_eq!(l.len(), 2, "{l:?}");
        assert!(
            l[0].starts_with("floor: 115 ns of eBPF per I/O"),
            "{}",
            l[0]
        );
        // Rounds: 200 - 70 and 230 - 80; the floor of its runs 70 and 80.
        assert_eq!(
            l[1],
            "pathpilot: 140 ns per I/O above the floor of its own programs' runs \
             (75 ns)"
        );
        runs.insert(
            "pathpilot (baseline)",
            vec![
                run(630.0, &[("issue", 300.0, 1.0), ("done", 330.0, 1.0)]),
                run(640.0, &[("issue", 300.0, 1.0), ("done", 340.0, 1.0)]),
            ],
        );
        let l = floor_lines(&runs);
        assert_eq!(l.len(), 4, "{l:?}");
        // 140 above the floor against the baseline's 560.
        assert!(
            l[3].starts_with("pathpilot above the floor against the baseline above it: 0.25x"),
            "{}",
            l[3]
        );
        assert!(floor_lines(&BTreeMap::new()).is_empty());
    }
}
