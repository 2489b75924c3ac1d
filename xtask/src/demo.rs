//! `cargo xtask demo`: the README's first command. Sets up what it needs,
//! boots the VM testbed with 4 unequal paths (10/20/40/80 MiB/s), starts
//! `pathpilot daemon` in tune mode under an fio workload that changes every
//! 30 s, and shows `pathpilot top` on it: interactive on a terminal, or
//! with `--no-tui` a text summary every 5 s and a closing table.
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
use serde_json::Value;
use xtask::{
    testbed::{Job, Testbed},
    util::{run, workspace_root},
};

#[derive(clap::Args)]
pub struct Args {
    /// Print a text summary every 5 s instead of the dashboard.
    #[arg(long)]
    pub no_tui: bool,
    /// How long the demo runs (the dashboard also stops on `q`).
    #[arg(long, default_value_t = 150)]
    pub secs: u64,
    /// Seconds of each workload phase.
    #[arg(long, default_value_t = 30)]
    pub phase_secs: u64,
}

const CONFIG: &str = r#"mode = "tune"
window_secs = 2
metrics = "127.0.0.1:9777"
[maps]
selector = "round-robin"
[checker]
interval_secs = 1
timeout_secs = 5
[tuner]
windows = 2
settle_windows = 1
reload_min_interval_secs = 4
flap_hold_secs = 6
"#;

/// The workload: three phases, each a different kind of I/O.
fn workload(phase: u64) -> String {
    let fio = |name: &str, args: &str| {
        format!(
            "echo {name} > /tmp/phase; fio --name={name} --filename=/dev/mapper/mpatha --direct=1 \
             --ioengine=libaio --time_based --runtime={phase} --output=/dev/null {args}"
        )
    };
    format!(
        "while true; do {}; {}; {}; done",
        fio("random-64k-qd16", "--rw=randread --bs=64k --iodepth=16"),
        fio("sequential-1m-qd1", "--rw=read --bs=1m --iodepth=1"),
        fio(
            "sequential-4k-writes-qd32",
            "--rw=write --bs=4k --iodepth=32 --size=512m"
        ),
    )
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
    xtask::testbed::base64::encode(s.as_bytes())
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
    run(Command::new(env!("CARGO"))
        .current_dir(workspace_root())
        .args(["build", "--release", "-p", "pathpilot"]))?;
    println!("demo: booting the testbed: 4 paths to one LUN, capped 10/20/40/80 MiB/s");
    let tb = Testbed::builder()
        .paths(4)
        .caps_mib(&[10.0, 20.0, 40.0, 80.0])
        .mem_mib(768)
        .boot()?;
    tb.sh(&format!(
        "mkdir -p /etc/pathpilot && echo {} | base64 -d > /etc/pathpilot/config.toml && \
         (pathpilot daemon > /tmp/daemon.log 2>&1 &)",
        b64(CONFIG)
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
            "demo: {} s, a summary every 5 s (phases change every {} s)",
            args.secs, args.phase_secs
        );
        while t0.elapsed() < Duration::from_secs(args.secs) {
            std::thread::sleep(Duration::from_secs(5));
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
    Ok(())
}
