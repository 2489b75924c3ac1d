//! Helpers over the VM testbed for the integration tests: booting or
//! skipping, the guest's disks and maps, the daemon, fio.
//!
//! ```no_run
//! use pathpilot_testbed::Testbed;
//! use pathpilot_tests::guest::{TestbedExt, boot_or_skip};
//! fn t() -> anyhow::Result<()> {
//!     let Some(tb) = boot_or_skip(Testbed::builder().paths(4).caps_mib(&[10.0, 20.0, 40.0, 80.0]))? else {
//!         return Ok(()); // PATHPILOT_SKIP_VM=1 and no QEMU: already reported as SKIPPED
//!     };
//!     let disks = tb.disks()?;
//!     tb.pull_path(1)?;
//!     tb.restore_path(1)?;
//!     Ok(())
//! }
//! ```
//!
//! Tests boot one VM each; a machine-wide lock serialises them (the host
//! has 2 cores and throughput checks need them).
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use pathpilot_testbed::{Builder, Job, Testbed, check_host, image};

/// Set to `1` to let VM tests skip (loudly) where the testbed cannot run.
pub const SKIP_ENV: &str = "PATHPILOT_SKIP_VM";

fn skip_allowed() -> bool {
    std::env::var(SKIP_ENV).is_ok_and(|v| v == "1")
}

/// Boots `b`, unless the host cannot run the testbed at all (no QEMU, no
/// kernel package) and `PATHPILOT_SKIP_VM=1`: then prints a loud SKIPPED
/// line and returns `None`. Without that variable a missing prerequisite is
/// an error: a VM test never passes without running.
pub fn boot_or_skip(b: Builder) -> Result<Option<Testbed>> {
    let pre =
        check_host(b.config().link).and_then(|_| image::prepare(b.config().lun_mib).map(drop));
    if let Err(e) = pre {
        if skip_allowed() {
            eprintln!(
                "\n!!!!!!!! SKIPPED (VM test): {SKIP_ENV}=1 and the testbed cannot run here: {e:#}\n"
            );
            return Ok(None);
        }
        return Err(e.context(format!(
            "the VM testbed cannot run on this host (set {SKIP_ENV}=1 to skip VM tests loudly)"
        )));
    }
    b.boot().map(Some)
}

/// Boots or returns early from the calling test (which must return
/// `anyhow::Result<()>`) when the VM tests are skipped.
#[macro_export]
macro_rules! boot_or_skip {
    ($b:expr) => {
        match $crate::guest::boot_or_skip($b)? {
            Some(tb) => tb,
            None => return Ok(()),
        }
    };
}

/// One SCSI disk the guest sees (a path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    /// `sda`, ...
    pub name: String,
    /// `major:minor`, as dm tables name devices.
    pub dev: String,
    pub wwid: String,
}

/// Guest-side helpers on top of [`Testbed`].
pub trait TestbedExt {
    /// The SCSI disks in path order (the testbed's path i has SCSI target
    /// id i; names follow probe order, which differs between boots).
    fn disks(&self) -> Result<Vec<Disk>>;
    /// Waits until exactly `n` SCSI disks exist (after a pull or restore).
    fn wait_disks(&self, n: usize, timeout: Duration) -> Result<Vec<Disk>>;
    /// Creates multipath map `name` over `devs` with `selector`
    /// (round-robin, queue-length, service-time) via dmsetup.
    fn create_map(&self, name: &str, selector: &str, devs: &[&str]) -> Result<()>;
    /// Reloads map `name` with a new path list (suspend/resume).
    fn reload_map(&self, name: &str, selector: &str, devs: &[&str]) -> Result<()>;
    /// The kernel name of a dm map (`dm-0`): /dev/mapper/NAME is a plain
    /// node without udev, not a symlink to find it by.
    fn dm_name(&self, name: &str) -> Result<String>;
    /// `dmsetup status` of a map, parsed to (dev, active) per path.
    fn map_paths(&self, name: &str) -> Result<Vec<(String, bool)>>;
    /// fio sequential 1 MiB O_DIRECT read bandwidth in MiB/s.
    fn fio_read_mib(&self, dev: &str, qd: u32, secs: u32, offset_mib: u64) -> Result<f64>;
}

/// The dm-multipath table for `devs` (sectors from the first path).
pub fn multipath_table(sectors: u64, selector: &str, devs: &[&str]) -> String {
    let st = selector == "service-time";
    let mut t = format!(
        "0 {sectors} multipath 0 0 1 1 {selector} 0 {} {}",
        devs.len(),
        if st { 2 } else { 1 }
    );
    for d in devs {
        t.push_str(&format!(" {d} 1{}", if st { " 1" } else { "" }));
    }
    t
}

/// [`multipath_table`] for `devs`, sized as the first path is.
fn sized_table(tb: &Testbed, selector: &str, devs: &[&str]) -> Result<String> {
    let first = devs.first().context("no paths")?;
    let sz = tb.sh(&format!("cat /sys/dev/block/{first}/size"))?;
    Ok(multipath_table(sz.trim().parse()?, selector, devs))
}

impl TestbedExt for Testbed {
    fn disks(&self) -> Result<Vec<Disk>> {
        let out = self.sh("for d in /sys/block/sd*; do [ -e \"$d\" ] || continue; \
             echo \"$(basename $(readlink $d/device) | cut -d: -f3) ${d##*/} $(cat $d/dev) \
             $(cat $d/device/wwid 2>/dev/null | tr ' ' _)\"; done")?;
        let mut v: Vec<(usize, Disk)> = out
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let target = it.next()?.parse().ok()?;
                Some((
                    target,
                    Disk {
                        name: it.next()?.into(),
                        dev: it.next()?.into(),
                        wwid: it.next().unwrap_or_default().into(),
                    },
                ))
            })
            .collect();
        v.sort_by(|(ta, a), (tb, b)| (ta, a.name.len(), &a.name).cmp(&(tb, b.name.len(), &b.name)));
        Ok(v.into_iter().map(|(_, d)| d).collect())
    }

    fn wait_disks(&self, n: usize, timeout: Duration) -> Result<Vec<Disk>> {
        let t = std::time::Instant::now();
        loop {
            let d = self.disks()?;
            if d.len() == n {
                return Ok(d);
            }
            if t.elapsed() > timeout {
                bail!("expected {n} disks within {timeout:?}, have {d:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn create_map(&self, name: &str, selector: &str, devs: &[&str]) -> Result<()> {
        let t = sized_table(self, selector, devs)?;
        self.sh(&format!("dmsetup create {name} --table '{t}'"))?;
        Ok(())
    }

    fn reload_map(&self, name: &str, selector: &str, devs: &[&str]) -> Result<()> {
        let t = sized_table(self, selector, devs)?;
        self.sh(&format!(
            "dmsetup load {name} --table '{t}' && dmsetup suspend {name} && dmsetup resume {name}"
        ))?;
        Ok(())
    }

    fn dm_name(&self, name: &str) -> Result<String> {
        let m = self.sh(&format!("dmsetup info -c --noheadings -o minor {name}"))?;
        Ok(format!("dm-{}", m.trim()))
    }

    fn map_paths(&self, name: &str) -> Result<Vec<(String, bool)>> {
        let st = self.sh(&format!("dmsetup status {name}"))?;
        // ... <dev> <A|F> <fail count> [selector args] ...: pick dev:dev A/F pairs.
        let w: Vec<&str> = st.split_whitespace().collect();
        Ok(w.windows(2)
            .filter(|p| p[0].contains(':') && (p[1] == "A" || p[1] == "F"))
            .map(|p| (p[0].to_string(), p[1] == "A"))
            .collect())
    }

    fn fio_read_mib(&self, dev: &str, qd: u32, secs: u32, offset_mib: u64) -> Result<f64> {
        let out = self.sh(&format!(
            "fio --name=r --filename={dev} --rw=read --bs=1M --direct=1 --ioengine=libaio --iodepth={qd} \
             --offset={offset_mib}M --size=256M --runtime={secs} --time_based --output-format=terse \
             --terse-version=3 2>&1"
        ))?;
        Ok(parse_fio_terse(&out)?.read_kib_s / 1024.0)
    }
}

/// A daemon config for fast tests in `mode`: 2 s windows, short settle
/// and hold times. It ends in the `[tuner]` table, so a caller may add
/// tuner keys, then tables of its own.
pub fn fast_config(mode: &str) -> String {
    format!(
        r#"mode = "{mode}"
window_secs = 2
metrics = "off"
[checker]
interval_secs = 1
timeout_secs = 4
[tuner]
windows = 2
settle_windows = 1
reload_min_interval_secs = 2
flap_hold_secs = 6
"#
    )
}

/// Runs `cmd` in the guest, expecting it to exit with `code`; its stderr,
/// trimmed.
pub fn fails(tb: &Testbed, cmd: &str, code: i32) -> Result<String> {
    let o = tb.run(cmd)?;
    let err = o.stderr_str();
    anyhow::ensure!(
        o.code == code,
        "{cmd}: exit {} (want {code})\nstdout: {}\nstderr: {err}",
        o.code,
        o.stdout_str()
    );
    Ok(err.trim().to_string())
}

/// Starts `pathpilot daemon` in the guest with config text `cfg` and
/// environment `env` (e.g. `PATHPILOT_FAULT=...`, or empty), and waits
/// until it answers on its socket. Its pid goes to /tmp/daemon.pid, its
/// log is appended to /tmp/daemon.log.
pub fn start_daemon(tb: &Testbed, cfg: &str, env: &str) -> Result<()> {
    tb.sh(&format!(
        "mkdir -p /etc/pathpilot && cat > /etc/pathpilot/test.toml <<'EOF'\n{cfg}EOF\n\
         {env} pathpilot daemon --config /etc/pathpilot/test.toml >> /tmp/daemon.log 2>&1 &\n\
         echo $! > /tmp/daemon.pid"
    ))?;
    if tb.until_success(
        "pathpilot ctl '{\"cmd\":\"status\"}' >/dev/null",
        Duration::from_secs(20),
        Duration::from_millis(200),
    )? {
        return Ok(());
    }
    bail!("the daemon did not come up:\n{}", daemon_log(tb))
}

/// The guest daemon's log so far.
pub fn daemon_log(tb: &Testbed) -> String {
    tb.sh("cat /tmp/daemon.log").unwrap_or_default()
}

/// The daemon's `status` data, as JSON.
pub fn daemon_status(tb: &Testbed) -> Result<serde_json::Value> {
    let out = tb.sh("pathpilot ctl '{\"cmd\":\"status\"}'")?;
    let v: serde_json::Value = serde_json::from_str(out.trim()).context("status JSON")?;
    Ok(v["data"].clone())
}

pub fn daemon_alive(tb: &Testbed) -> Result<bool> {
    Ok(tb
        .run("kill -0 $(cat /tmp/daemon.pid) 2>/dev/null")?
        .success())
}

/// SIGTERM, and wait until it is gone.
pub fn stop_daemon(tb: &Testbed) -> Result<()> {
    tb.sh("kill $(cat /tmp/daemon.pid)")?;
    poll(tb, "the daemon to stop", Duration::from_secs(10), |tb| {
        Ok(!daemon_alive(tb)?)
    })?;
    Ok(())
}

/// Polls `cond` every 50 ms until it holds; returns how long that took.
pub fn poll(
    tb: &Testbed,
    what: &str,
    timeout: Duration,
    cond: impl FnMut(&Testbed) -> Result<bool>,
) -> Result<Duration> {
    poll_since(tb, Instant::now(), what, timeout, cond)
}

/// As [`poll`], timed from `t` (the fault, before the call that made it).
pub fn poll_since(
    tb: &Testbed,
    t: Instant,
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut(&Testbed) -> Result<bool>,
) -> Result<Duration> {
    loop {
        if cond(tb)? {
            return Ok(t.elapsed());
        }
        if t.elapsed() > timeout {
            bail!(
                "timed out after {timeout:?} waiting for {what}\n{}\n{}\n{}",
                tb.sh("dmsetup table; dmsetup status; ls /sys/block")
                    .unwrap_or_default(),
                daemon_log(tb),
                daemon_threads(tb)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Where each of the daemon's threads is (kernel wait channel and stack):
/// a daemon that stops acting shows what it waits for.
pub fn daemon_threads(tb: &Testbed) -> String {
    tb.sh("for t in /proc/$(cat /tmp/daemon.pid)/task/*; do \
         echo \"== $(cat $t/comm) wchan=$(cat $t/wchan) $(cut -d' ' -f3 $t/stat)\"; \
         cat $t/stack 2>/dev/null | head -12; done")
        .unwrap_or_default()
}

/// Waits until the daemon has made mpatha over `n` paths, all active and
/// checked ready.
pub fn wait_map_ready(tb: &Testbed, n: usize) -> Result<()> {
    poll(tb, "mpatha ready", Duration::from_secs(20), |tb| {
        let s = daemon_status(tb)?;
        let paths = s["maps"][0]["paths"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        Ok(paths.len() == n
            && paths
                .iter()
                .all(|p| p["dm_state"] == "active" && p["checker"] == "ready"))
    })?;
    Ok(())
}

/// fio writing 64 KiB blocks at QD8 with crc32c checksums for `secs`,
/// reading back every 16 written blocks (so verification happens during
/// the fault, not only at the end).
pub fn verified_writer(secs: u32) -> String {
    format!(
        "fio --name=v --filename=/dev/mapper/mpatha --rw=randwrite --bs=64k --direct=1 \
         --ioengine=libaio --iodepth=8 --size=128m --time_based --runtime={secs} \
         --verify=crc32c --verify_backlog=16 --verify_fatal=1 \
         --output-format=terse --terse-version=3 2>&1"
    )
}

/// What fio's terse v3 line says.
#[derive(Debug)]
pub struct Fio {
    /// fio's first error (errno), 0 when none.
    pub error: u64,
    pub read_kib: u64,
    /// Read bandwidth, KiB/s.
    pub read_kib_s: f64,
    pub write_kib: u64,
    /// The longest issue-to-completion time of a read and of a write, ms.
    pub read_lat_max_ms: f64,
    pub write_lat_max_ms: f64,
    pub verify_failures: usize,
}

pub fn parse_fio_terse(out: &str) -> Result<Fio> {
    let line = out
        .lines()
        .find(|l| l.starts_with("3;"))
        .with_context(|| format!("no fio terse line in:\n{out}"))?;
    let f: Vec<&str> = line.split(';').collect();
    let field = |i: usize| f.get(i).with_context(|| format!("short fio line: {line}"));
    let num = |i: usize| -> Result<u64> {
        field(i)?
            .parse()
            .with_context(|| format!("fio field {i}: {line}"))
    };
    Ok(Fio {
        error: num(4)?,
        read_kib: num(5)?,
        read_kib_s: field(6)?
            .parse()
            .with_context(|| format!("fio field 6: {line}"))?,
        write_kib: num(46)?,
        // Total latency max, in microseconds: field 39 of each direction
        // (1-based; the write fields follow the read ones 41 on).
        read_lat_max_ms: field(38)?.parse::<f64>().unwrap_or(0.0) / 1000.0,
        write_lat_max_ms: field(79)?.parse::<f64>().unwrap_or(0.0) / 1000.0,
        verify_failures: out
            .lines()
            .filter(|l| l.contains("verify") && (l.contains("bad") || l.contains("fail")))
            .count(),
    })
}

/// Waits for a verified writer and asserts it wrote, read back, and saw no
/// I/O error and no verify failure.
pub fn expect_clean(tb: &Testbed, job: &Job, what: &str) -> Result<Fio> {
    let out = tb.wait_job(job, Duration::from_secs(150))?;
    let text = out.stdout_str();
    let f = parse_fio_terse(&text)?;
    eprintln!(
        "{what}: fio wrote {} MiB, read back {} MiB, error {}, verify failures {}",
        f.write_kib / 1024,
        f.read_kib / 1024,
        f.error,
        f.verify_failures
    );
    if !out.success() || f.error != 0 || f.verify_failures != 0 {
        bail!(
            "{what}: fio saw an I/O error or a verify failure (exit {}): {f:?}\n{text}\n{}",
            out.code,
            daemon_log(tb)
        );
    }
    assert!(f.write_kib > 0 && f.read_kib > 0, "{what}: {f:?}");
    Ok(f)
}
