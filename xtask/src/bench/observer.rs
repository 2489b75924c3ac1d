//! Observer overhead: the same fio job with and without `pathpilot stat`
//! attached, alternated so drift on this shared machine hits both sides.
use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::json;
use xtask::util::{output, run as run_cmd, workspace_root};

use super::{median, save};

#[derive(clap::Args)]
pub struct Args {
    /// Pairs of runs (detached, attached).
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    /// Seconds per fio run.
    #[arg(long, default_value_t = 6)]
    secs: u64,
    /// A one-minute collector run for CPU and memory after the pairs.
    #[arg(long, default_value_t = 60)]
    collector_secs: u64,
}

struct Loop {
    dev: String,
    image: std::path::PathBuf,
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
        let _ = std::fs::remove_file(&self.image);
    }
}

fn fio_iops(dev: &str, secs: u64) -> Result<f64> {
    let out = output(Command::new("fio").args([
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
    v["jobs"][0]["read"]["iops"]
        .as_f64()
        .context("fio printed no read iops")
}

fn start_stat(bin: &std::path::Path, dev: &str) -> Result<Child> {
    let mut c = Command::new(bin)
        .args(["stat", dev, "--interval", "1s", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    // Wait for "observing ..." so the probes are attached before fio starts.
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(c.stderr.take().context("stderr")?).read_line(&mut line)?;
    if !line.contains("observing") {
        bail!("pathpilot stat did not start: {line}");
    }
    Ok(c)
}

fn stop(mut c: Child) -> Result<()> {
    unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
    let st = c.wait()?;
    if !st.success() {
        bail!("pathpilot stat exited with {st}");
    }
    Ok(())
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

pub fn run(args: Args) -> Result<()> {
    run_build()?;
    let bin = workspace_root().join("target/release/pathpilot");
    // The backing file lives in the page cache, so the loop device answers
    // from memory and the probes' own cost is what shows.
    let image = std::env::temp_dir().join(format!("pathpilot-bench-{}.img", std::process::id()));
    std::fs::write(&image, vec![0x5au8; 256 << 20])?;
    let dev = output(
        Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&image),
    )?
    .trim()
    .to_string();
    let lo = Loop { dev, image };
    println!(
        "bench observer: {} rounds x 2 runs of {} s of fio 4 KiB random reads (psync, O_DIRECT) on {} (page-cache backed)",
        args.rounds, args.secs, lo.dev
    );
    fio_iops(&lo.dev, 2)?; // warm-up
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for r in 0..args.rounds {
        // Alternate which side goes first so slow drift cancels out.
        for attached in if r % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        } {
            let iops = if attached {
                let c = start_stat(&bin, &lo.dev)?;
                let v = fio_iops(&lo.dev, args.secs);
                stop(c)?;
                v?
            } else {
                fio_iops(&lo.dev, args.secs)?
            };
            println!(
                "  round {} {:<8} {:>10.0} IOPS",
                r + 1,
                if attached { "attached" } else { "detached" },
                iops
            );
            if attached {
                on.push(iops)
            } else {
                off.push(iops)
            }
        }
    }
    let (m_off, m_on) = (median(&mut off), median(&mut on));
    let lost_pct = (1.0 - m_on / m_off) * 100.0;

    println!(
        "bench observer: collector at 1 s interval for {} s under the same load",
        args.collector_secs
    );
    let c = start_stat(&bin, &lo.dev)?;
    let pid = c.id();
    let cpu0 = cpu_seconds(pid)?;
    let t0 = Instant::now();
    let mut fio = Command::new("fio")
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
    // The steady state (after loading) and the all-time peak, which aya's
    // loader sets while it parses the kernel BTF.
    let mut rss = 0;
    while fio.try_wait()?.is_none() {
        rss = rss.max(status_kib(pid, "VmRSS")?);
        std::thread::sleep(Duration::from_millis(500));
    }
    let cpu = cpu_seconds(pid)? - cpu0;
    let elapsed = t0.elapsed().as_secs_f64();
    let hwm = status_kib(pid, "VmHWM")?;
    rss = rss.max(status_kib(pid, "VmRSS")?);
    stop(c)?;
    let cpu_per_min = cpu / elapsed * 60.0;

    println!();
    println!("{:<34} {:>12}", "figure", "value");
    println!("{:<34} {:>12.0}", "IOPS detached (median)", m_off);
    println!("{:<34} {:>12.0}", "IOPS attached (median)", m_on);
    println!("{:<34} {:>12.3}", "attached / detached", m_on / m_off);
    println!("{:<34} {:>11.2}%  (target <= 3%)", "IOPS lost", lost_pct);
    println!("{:<34} {:>12.3}", "collector CPU s per minute", cpu_per_min);
    println!(
        "{:<34} {:>9.1} MiB  (target < 20 MiB)",
        "collector peak RSS",
        hwm as f64 / 1024.0
    );
    let path = save(
        "observer",
        &json!({
            "bench": "observer",
            "rounds": args.rounds,
            "secs": args.secs,
            "iops_detached": off,
            "iops_attached": on,
            "iops_detached_median": m_off,
            "iops_attached_median": m_on,
            "ratio": m_on / m_off,
            "iops_lost_pct": lost_pct,
            "collector_cpu_s_per_min": cpu_per_min,
            "collector_rss_running_max_mib": rss as f64 / 1024.0,
            "collector_peak_rss_mib": hwm as f64 / 1024.0,
        }),
    )?;
    println!("wrote {}", path.display());
    Ok(())
}

fn run_build() -> Result<()> {
    run_cmd(
        Command::new(env!("CARGO"))
            .current_dir(workspace_root())
            .args(["build", "--release", "-p", "pathpilot"]),
    )
}
