//! The `wire` link model: each path is an NBD connection over its own veth
//! pair shaped by `tc tbf`, so a request takes size/rate on the wire, as on
//! a real link (QEMU's throttle is a leaky bucket: one QD1 stream over two
//! throttled paths already gets the sum of their caps).
//!
//! Two network namespaces per testbed, named after the pid so parallel runs
//! never collide and leftovers of a killed run can be recognised and
//! removed. Addresses (10.201.<path>.0/24) exist only inside them.
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::process::{self, die_with_parent};

/// tbf `burst`: well below the 1 MiB request size, or the bucket lets a
/// whole request through at once and the leaky-bucket behaviour returns.
const BURST: &str = "32kb";
/// tbf `latency` must hold a whole request in the queue, or packets drop.
const LATENCY: &str = "100ms";
/// TCP/IP and NBD headers: ~4.5% of the line rate is not payload.
const PAYLOAD_EFFICIENCY: f64 = 0.955;
pub const NBD_PORT: u16 = 10809;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// tbf rate in kbit/s that carries `mib` MiB/s of payload.
pub fn kbit_for_mib(mib: f64) -> u64 {
    (mib * 1048576.0 * 8.0 / PAYLOAD_EFFICIENCY / 1000.0).round() as u64
}

pub struct Wire {
    pub client_ns: String,
    pub server_ns: String,
    paths: usize,
    qsd: Option<Child>,
}

fn ip(args: &[&str]) -> Result<()> {
    process::output(Command::new("ip").args(args)).map(drop)
}

fn tc(ns: &str, args: &[&str]) -> Result<()> {
    process::output(Command::new("tc").args(["-n", ns]).args(args)).map(drop)
}

impl Wire {
    /// The host address the client reaches path `i`'s server at.
    pub fn server_addr(i: usize) -> String {
        format!("10.201.{i}.1")
    }

    pub fn veth(i: usize) -> (String, String) {
        (format!("ppc{i}"), format!("pps{i}"))
    }

    /// Creates the namespaces and links and starts the NBD server of `lun`.
    /// `rates_kbit[i] == 0` leaves path `i` unshaped.
    pub fn create(rates_kbit: &[u64], lun: &Path, run_dir: &Path) -> Result<Wire> {
        sweep_stale();
        let tag = format!(
            "ppw{}x{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        let mut w = Wire {
            client_ns: format!("{tag}c"),
            server_ns: format!("{tag}s"),
            paths: rates_kbit.len(),
            qsd: None,
        };
        // From here on, Drop undoes whatever was made.
        ip(&["netns", "add", &w.client_ns])
            .context("cannot create a network namespace (root needed)")?;
        ip(&["netns", "add", &w.server_ns])?;
        for ns in [&w.client_ns, &w.server_ns] {
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        for (i, &rate) in rates_kbit.iter().enumerate() {
            let (c, s) = Self::veth(i);
            ip(&[
                "link",
                "add",
                &c,
                "netns",
                &w.client_ns,
                "type",
                "veth",
                "peer",
                "name",
                &s,
                "netns",
                &w.server_ns,
            ])?;
            ip(&[
                "-n",
                &w.client_ns,
                "addr",
                "add",
                &format!("10.201.{i}.2/24"),
                "dev",
                &c,
            ])?;
            ip(&[
                "-n",
                &w.server_ns,
                "addr",
                "add",
                &format!("10.201.{i}.1/24"),
                "dev",
                &s,
            ])?;
            ip(&["-n", &w.client_ns, "link", "set", &c, "up"])?;
            ip(&["-n", &w.server_ns, "link", "set", &s, "up"])?;
            w.set_rate(i, rate)?;
        }
        let pidfile = run_dir.join("qsd.pid");
        let log = fs::File::create(run_dir.join("qsd.log"))?;
        // --pidfile is written after the NBD server listens (documented
        // ordering), which is our readiness signal.
        let mut cmd = Command::new("ip");
        die_with_parent(&mut cmd);
        let child = cmd
            .args(["netns", "exec", &w.server_ns, "qemu-storage-daemon"])
            .arg("--blockdev")
            .arg(format!(
                "driver=file,node-name=file0,filename={},locking=off,aio=threads,cache.direct=off",
                lun.display()
            ))
            .args(["--blockdev", "driver=raw,node-name=lun,file=file0"])
            .arg("--nbd-server")
            .arg(format!(
                "addr.type=inet,addr.host=0.0.0.0,addr.port={NBD_PORT},max-connections=16"
            ))
            .args([
                "--export",
                "type=nbd,id=exp0,node-name=lun,name=lun,writable=on",
            ])
            .arg("--pidfile")
            .arg(&pidfile)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start qemu-storage-daemon")?;
        w.qsd = Some(child);
        let t = Instant::now();
        while !pidfile.exists() {
            if let Some(st) = w.qsd.as_mut().unwrap().try_wait()? {
                bail!(
                    "qemu-storage-daemon exited ({st}): {}",
                    fs::read_to_string(run_dir.join("qsd.log"))
                        .unwrap_or_default()
                        .trim()
                );
            }
            if t.elapsed() > Duration::from_secs(15) {
                bail!("qemu-storage-daemon did not start within 15 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(w)
    }

    /// Shapes both directions of path `i` (0 = unshaped). Live: in-flight
    /// requests see the new rate at once.
    pub fn set_rate(&self, i: usize, kbit: u64) -> Result<()> {
        let (c, s) = Self::veth(i);
        for (ns, dev) in [(&self.server_ns, &s), (&self.client_ns, &c)] {
            if kbit == 0 {
                let _ = tc(ns, &["qdisc", "del", "dev", dev, "root"]);
            } else {
                let rate = format!("{kbit}kbit");
                tc(
                    ns,
                    &[
                        "qdisc", "replace", "dev", dev, "root", "tbf", "rate", &rate, "burst",
                        BURST, "latency", LATENCY,
                    ],
                )?;
            }
        }
        Ok(())
    }

    /// Takes path `i`'s link down or up (server side): a silent cable cut
    /// that QEMU does not notice: virtio-scsi never times the command
    /// out, so the whole map stalls until a checker with its own timeout
    /// fails the path.
    pub fn set_link(&self, i: usize, up: bool) -> Result<()> {
        let (_, s) = Self::veth(i);
        ip(&[
            "-n",
            &self.server_ns,
            "link",
            "set",
            &s,
            if up { "up" } else { "down" },
        ])
    }

    pub fn paths(&self) -> usize {
        self.paths
    }
}

fn kill_ns_pids(ns: &str) {
    if let Ok(out) = process::output(Command::new("ip").args(["netns", "pids", ns])) {
        for pid in out.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
            // SAFETY: plain kill(2) of processes inside our own namespace.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        if let Some(mut c) = self.qsd.take() {
            // SAFETY: SIGTERM to our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(3) {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.client_ns, &self.server_ns] {
            kill_ns_pids(ns);
            // Deleting a namespace deletes the veths in it.
            let _ = process::output(Command::new("ip").args(["netns", "del", ns]));
        }
    }
}

/// Deletes namespaces left by testbeds whose process is gone (killed before
/// Drop could run).
pub(crate) fn sweep_stale() {
    let Ok(list) = process::output(Command::new("ip").args(["netns", "list"])) else {
        return;
    };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(rest) = name.strip_prefix("ppw") else {
            continue;
        };
        let Some(pid) = rest.split('x').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !PathBuf::from(format!("/proc/{pid}")).exists() {
            eprintln!("testbed: removing stale namespace {name} (pid {pid} is gone)");
            kill_ns_pids(name);
            let _ = process::output(Command::new("ip").args(["netns", "del", name]));
        }
    }
}
