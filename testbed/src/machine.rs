//! The running VM: QEMU, the command agent (see `agent`) and QMP.
//!
//! The guest stays up while a test talks to it. Commands travel over a
//! virtio-serial port (not the console, which carries kernel messages and
//! is kept as a log): the host listens on a unix socket that QEMU connects
//! to at startup, so the channel exists before the guest boots and no
//! polling for a socket file is needed. QMP is connected the same way.
use std::fs;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::agent::{Agent, Output};
use crate::alua::{self, AluaSpec, AluaState};
use crate::base64;
use crate::config::{Builder, Config, Link, SERIAL, WWN};
use crate::dirs::testbed_dir;
use crate::image::{self, Images};
use crate::lock::Lock;
use crate::prerequisites::check_host;
use crate::process::die_with_parent;
use crate::qmp::Qmp;
use crate::wire::{self, Wire};

/// One port of an ALUA testbed's array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AluaPort {
    /// 1-based, as `pp-alua` and [`Testbed::move_port`] take it.
    pub port: usize,
    /// The guest's disk behind it (`sde`).
    pub disk: String,
    /// Its target port group at boot.
    pub group: u16,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A guest command started in the background by [`Testbed::spawn`].
#[derive(Debug, Clone)]
pub struct Job {
    pub id: u64,
    pub pid: u32,
}

/// A booted VM. Dropping it powers the guest off (killing QEMU if it does
/// not exit) and removes the wire namespaces, also when a test panics.
///
/// Keep it on the thread that booted it (e.g. not in a `static` shared by
/// tests): QEMU is tied to that thread's lifetime so that a killed test
/// process cannot leave it running.
pub struct Testbed {
    cfg: Config,
    images: Images,
    run_dir: PathBuf,
    sock_dir: PathBuf,
    qemu: Mutex<Option<Child>>,
    agent: Mutex<Option<Agent>>,
    qmp: Mutex<Option<Qmp>>,
    wire: Option<Wire>,
    /// Current caps per path: (MiB/s, IOPS), 0 = none.
    caps: Mutex<Vec<(f64, u64)>>,
    /// Paths failing a share of their commands (a blkdebug node `e{i}`
    /// under their throttle), in percent.
    errors: Mutex<Vec<f64>>,
    boot_time: Duration,
    /// The ALUA array's ports, when there is one.
    ports: Vec<AluaPort>,
    /// Set when something failed, so Drop prints the console tail.
    failed: AtomicBool,
    jobs: AtomicU64,
    _lock: Option<Lock>,
}

fn host_tsc_khz() -> Result<u64> {
    let info = fs::read_to_string("/proc/cpuinfo")?;
    let mhz: f64 = info
        .lines()
        .find_map(|l| {
            l.strip_prefix("cpu MHz")?
                .split(':')
                .nth(1)?
                .trim()
                .parse()
                .ok()
        })
        .context("no `cpu MHz` in /proc/cpuinfo")?;
    Ok((mhz * 1000.0) as u64)
}

fn accept_until(
    l: &UnixListener,
    what: &str,
    deadline: Instant,
    alive: &mut dyn FnMut() -> Result<()>,
) -> Result<UnixStream> {
    l.set_nonblocking(true)?;
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                alive()?;
                if Instant::now() > deadline {
                    bail!("QEMU did not connect the {what} socket");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Deletes run directories (console logs) older than two days.
fn prune_runs(dir: &Path) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|a| a > Duration::from_secs(2 * 86400));
        if old {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

impl Builder {
    /// Boots the testbed this builder describes.
    pub fn boot(self) -> Result<Testbed> {
        Testbed::boot(self.cfg)
    }
}

impl Testbed {
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Builds images as needed, boots, and waits for the guest agent.
    pub fn boot(cfg: Config) -> Result<Testbed> {
        cfg.validate()?;
        check_host(cfg.link)?;
        let images = image::prepare(cfg.lun_mib)?;
        wire::sweep_stale();
        let lock = if cfg.exclusive {
            Some(Lock::take(
                &testbed_dir().join("vm.lock"),
                "another testbed VM to finish",
            )?)
        } else {
            None
        };
        let seq = SEQ.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let stamp = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)?
            .as_secs();
        let runs = testbed_dir().join("runs");
        prune_runs(&runs);
        let run_dir = runs.join(format!("{stamp}-{pid}-{seq}"));
        fs::create_dir_all(&run_dir)?;
        // Unix socket paths are limited to 108 bytes; /tmp keeps them short.
        let sock_dir = std::env::temp_dir().join(format!("pp-tb-{pid}-{seq}"));
        let _ = fs::remove_dir_all(&sock_dir);
        fs::create_dir_all(&sock_dir)?;
        let n = cfg.n_paths();
        let caps = (0..n).map(|i| (cfg.cap_mib(i), cfg.iops_of(i))).collect();
        let mut tb = Testbed {
            cfg,
            images,
            run_dir,
            sock_dir,
            qemu: Mutex::new(None),
            agent: Mutex::new(None),
            qmp: Mutex::new(None),
            wire: None,
            caps: Mutex::new(caps),
            errors: Mutex::new(vec![]),
            boot_time: Duration::ZERO,
            ports: vec![],
            failed: AtomicBool::new(false),
            jobs: AtomicU64::new(0),
            _lock: lock,
        };
        // Any error from here on drops `tb`, which cleans up.
        match tb.start() {
            Ok(()) => Ok(tb),
            Err(e) => {
                tb.failed.store(true, Ordering::SeqCst);
                Err(e.context(format!("testbed boot failed{}", tb.console_tail_msg(40))))
            }
        }
    }

    fn qemu_args(&self) -> Result<Vec<String>> {
        let c = &self.cfg;
        let mut a: Vec<String> = Vec::new();
        let mut push = |v: &[&str]| a.extend(v.iter().map(|s| s.to_string()));
        push(&[
            "-nodefaults",
            "-no-user-config",
            "-machine",
            "microvm,rtc=on",
            "-accel",
            "tcg,thread=multi",
            "-cpu",
            "max",
        ]);
        push(&[
            "-smp",
            &c.smp.to_string(),
            "-m",
            &c.mem_mib.to_string(),
            "-display",
            "none",
            "-no-reboot",
        ]);
        push(&[
            "-kernel",
            &self.images.vmlinux.to_string_lossy(),
            "-initrd",
            &self.images.initrd.to_string_lossy(),
        ]);
        // microvm has no PIT/HPET calibration under TCG: without the TSC
        // rate the kernel hangs; TCG's guest TSC runs at the host's rate.
        let mut append = format!(
            "console=ttyS0 panic=-1 quiet loglevel=4 mitigations=off nokaslr tsc=reliable no_timer_check \
             scsi_mod.scan=sync cryptomgr.notests initcall_blacklist=crypto_kdf108_init \
             i8042.noaux i8042.nokbd i8042.nopnp i8042.dumbkbd=1 tsc_early_khz={}",
            host_tsc_khz()?
        );
        // For boot debugging, e.g. PATHPILOT_VM_APPEND="loglevel=7 pp.debug=1".
        if let Ok(extra) = std::env::var("PATHPILOT_VM_APPEND") {
            append.push(' ');
            append.push_str(&extra);
        }
        if c.interactive {
            append.push_str(" pp.shell=1");
            push(&["-serial", "mon:stdio"]);
        } else {
            let log = self.run_dir.join("console.log");
            push(&["-serial", &format!("file:{}", log.display())]);
            let agent = self.sock_dir.join("agent.sock");
            let qmp = self.sock_dir.join("qmp.sock");
            push(&[
                "-chardev",
                &format!("socket,id=agent,path={}", agent.display()),
            ]);
            push(&[
                "-device",
                "virtio-serial-device,max_ports=2",
                "-device",
                "virtserialport,chardev=agent,name=pp.agent",
            ]);
            push(&["-chardev", &format!("socket,id=qmp,path={}", qmp.display())]);
            push(&["-mon", "chardev=qmp,mode=control"]);
        }
        if let Some(s) = &c.share {
            append.push_str(" pp.share=1");
            let s = s.canonicalize()?;
            push(&[
                "-fsdev",
                &format!("local,id=fs0,path={},security_model=none", s.display()),
            ]);
            push(&["-device", "virtio-9p-device,fsdev=fs0,mount_tag=share"]);
        }
        push(&["-append", &append]);
        if let Some(iops) = c.shared_iops {
            push(&[
                "-object",
                &format!("throttle-group,id=tgs,x-iops-total={iops}"),
            ]);
        }
        for i in 0..c.n_paths() {
            match c.link {
                Link::Throttle => push(&[
                    "-blockdev",
                    &format!(
                        "driver=file,node-name=f{i},filename={},locking=off,cache.direct=on,aio=threads",
                        self.images.lun.display()
                    ),
                ]),
                Link::Wire => push(&[
                    "-blockdev",
                    &format!(
                        "driver=nbd,node-name=f{i},server.type=inet,server.host={},server.port={},export=lun",
                        Wire::server_addr(i),
                        wire::NBD_PORT
                    ),
                ]),
            }
            // Every path gets its own throttle group, even uncapped, so its
            // caps can be changed live.
            let mut tg = format!("throttle-group,id=tg{i}");
            let bps = if c.link == Link::Throttle {
                (c.cap_mib(i) * 1048576.0) as u64
            } else {
                0
            };
            if bps > 0 {
                tg.push_str(&format!(",x-bps-total={bps}"));
            }
            if c.iops_of(i) > 0 {
                tg.push_str(&format!(",x-iops-total={}", c.iops_of(i)));
            }
            push(&["-object", &tg]);
            push(&[
                "-blockdev",
                &format!("driver=throttle,node-name=t{i},throttle-group=tg{i},file=f{i}"),
            ]);
            if c.shared_iops.is_some() {
                push(&[
                    "-blockdev",
                    &format!("driver=throttle,node-name=s{i},throttle-group=tgs,file=t{i}"),
                ]);
            }
            push(&["-device", &format!("virtio-scsi-device,id=scsi{i}")]);
            push(&["-device", &self.scsi_hd(i).1]);
        }
        Ok(a)
    }

    /// The block node a path's disk sits on, and the `-device` string of
    /// that disk: every path is the same LUN (WWN and serial).
    fn scsi_hd(&self, i: usize) -> (String, String) {
        let top = if self.cfg.shared_iops.is_some() {
            format!("s{i}")
        } else {
            format!("t{i}")
        };
        // The target id tells the guest which disk is path i: the disks
        // probe in parallel, so names and host numbers can differ by boot.
        let mut dev = format!(
            "scsi-hd,id=hd{i},bus=scsi{i}.0,drive={top},wwn={WWN:#x},serial={SERIAL},share-rw=on,scsi-id={i}"
        );
        // Under an ALUA array the LUN is LIO's, which reports the inquiry.
        if self.cfg.alua.is_none() {
            for (k, v, _) in self.cfg.inquiry.fields() {
                let k = if k == "revision" { "ver" } else { k };
                dev.push_str(&format!(",{k}={v}"));
            }
        }
        (top, dev)
    }

    fn spawn_qemu(&self, args: &[String]) -> Result<Child> {
        let mut cmd = match &self.wire {
            Some(w) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &w.client_ns, "qemu-system-x86_64"]);
                c
            }
            None => Command::new("qemu-system-x86_64"),
        };
        cmd.args(args);
        die_with_parent(&mut cmd);
        if !self.cfg.interactive {
            let log = fs::File::create(self.run_dir.join("qemu.log"))?;
            cmd.stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log);
        }
        fs::write(self.run_dir.join("qemu.cmdline"), format!("{cmd:?}\n"))?;
        cmd.spawn().context("cannot start qemu-system-x86_64")
    }

    fn start(&mut self) -> Result<()> {
        let t0 = Instant::now();
        if self.cfg.link == Link::Wire {
            let rates: Vec<u64> = (0..self.cfg.n_paths())
                .map(|i| wire::kbit_for_mib(self.cfg.cap_mib(i)))
                .collect();
            self.wire = Some(Wire::create(&rates, &self.images.lun, &self.run_dir)?);
            eprintln!(
                "testbed: wire namespaces up in {:.2} s",
                t0.elapsed().as_secs_f64()
            );
        }
        let args = self.qemu_args()?;
        if self.cfg.interactive {
            *self.qemu.lock().unwrap() = Some(self.spawn_qemu(&args)?);
            return Ok(());
        }
        let agent_l = UnixListener::bind(self.sock_dir.join("agent.sock"))?;
        let qmp_l = UnixListener::bind(self.sock_dir.join("qmp.sock"))?;
        let t_qemu = Instant::now();
        *self.qemu.lock().unwrap() = Some(self.spawn_qemu(&args)?);
        let deadline = t_qemu + self.cfg.boot_timeout;
        let agent_s = accept_until(&agent_l, "agent", deadline, &mut || self.check_alive())?;
        let qmp_s = accept_until(&qmp_l, "QMP", deadline, &mut || self.check_alive())?;
        *self.qmp.lock().unwrap() = Some(Qmp::handshake(qmp_s)?);
        let mut agent = Agent::new(agent_s)?;
        let up = agent
            .wait_ready(deadline, &mut || self.check_alive())?
            .with_context(|| {
                format!(
                    "the guest agent did not answer within {:?}",
                    self.cfg.boot_timeout
                )
            })?;
        self.boot_time = t_qemu.elapsed();
        eprintln!(
            "testbed: booted in {:.2} s (guest uptime {up} s), {} path(s), link {:?}, console {}",
            self.boot_time.as_secs_f64(),
            self.cfg.n_paths(),
            self.cfg.link,
            self.console_path().display()
        );
        *self.agent.lock().unwrap() = Some(agent);
        if let Some(spec) = self.cfg.alua.clone() {
            let t = Instant::now();
            self.ports = self.build_array(&spec)?;
            eprintln!(
                "testbed: ALUA array up in {:.2} s: {}",
                t.elapsed().as_secs_f64(),
                self.ports
                    .iter()
                    .map(|p| format!("port {} {} (group {})", p.port, p.disk, p.group))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Ok(())
    }

    /// The QEMU disks present, in path order: path i is the disk with SCSI
    /// target id i (see `scsi_hd`). A pulled path is missing from the list.
    pub fn path_disks(&self) -> Result<Vec<(usize, String)>> {
        let out = self.sh(&format!(
            "for d in /sys/block/sd*; do [ -e \"$d/device\" ] || continue; \
             [ \"$(sed 's/ *$//' $d/device/vendor)\" = '{}' ] || continue; \
             echo \"$(basename $(readlink $d/device) | cut -d: -f3) ${{d##*/}}\"; done",
            self.qemu_vendor()
        ))?;
        let mut disks: Vec<(usize, String)> = out
            .lines()
            .filter_map(|l| {
                let (t, name) = l.split_once(' ')?;
                Some((t.parse().ok()?, name.to_string()))
            })
            .collect();
        disks.sort();
        Ok(disks)
    }

    /// The vendor the QEMU disks report: the testbed's LUN's where the
    /// disks are the LUN, QEMU's own under an ALUA array.
    fn qemu_vendor(&self) -> &str {
        match (&self.cfg.alua, &self.cfg.inquiry.vendor) {
            (None, Some(v)) => v,
            _ => "QEMU",
        }
    }

    /// Builds the ALUA array over the QEMU paths, in path order.
    fn build_array(&self, spec: &AluaSpec) -> Result<Vec<AluaPort>> {
        let raw: Vec<String> = self.path_disks()?.into_iter().map(|(_, n)| n).collect();
        let out = self.sh(&spec.setup_script(&raw, &self.cfg.inquiry)?)?;
        let ports: Vec<AluaPort> = out
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                (w.next()? == "port").then_some(())?;
                let port: usize = w.next()?.parse().ok()?;
                let disk = w.next()?.to_string();
                Some(AluaPort {
                    port,
                    group: *spec.ports.get(port - 1)?,
                    disk,
                })
            })
            .collect();
        if ports.len() != spec.ports.len() {
            bail!(
                "the array's {} ports should show {} disks, saw: {out}",
                spec.ports.len(),
                spec.ports.len()
            );
        }
        Ok(ports)
    }

    /// The array's ports (ALUA testbeds): port, guest disk, group.
    pub fn alua_ports(&self) -> &[AluaPort] {
        &self.ports
    }

    /// Sets target port group `group` to `state` on the array (every LIO
    /// device): an array failing over.
    pub fn set_alua_state(&self, group: u16, state: AluaState) -> Result<()> {
        self.sh(&alua::state_script(group, state))?;
        Ok(())
    }

    /// Lets multipath-tools build its own map for `disk`'s LUN, as an
    /// unconfigured install does (no multipath.conf: find_multipaths
    /// strict, so the WWID is added first; named by WWID). It finds paths
    /// through udev's database, so udevd runs for it and is stopped after
    /// (its /run/udev gone too: device-mapper users would otherwise wait
    /// on udev cookies nobody answers).
    /// Returns `multipath -ll`; the map stays until [`Testbed::flush_multipath_tools`].
    pub fn multipath_tools(&self, disk: &str) -> Result<String> {
        self.multipath_tools_with(disk, "-v2")
    }

    /// [`Testbed::multipath_tools`] with `multipath`'s options for making
    /// the map (`-q -v2`: keep `queue_if_no_path` though no multipathd
    /// runs, the table multipathd would load).
    pub fn multipath_tools_with(&self, disk: &str, opts: &str) -> Result<String> {
        self.start_udevd()?;
        let made = self.sh(&format!(
            "set -e; multipath -a /dev/{disk} >/dev/null\n\
             multipath {opts} >/dev/null\n\
             udevadm settle -t 30; multipath -ll"
        ));
        self.stop_udevd()?;
        made
    }

    /// Starts udevd and has it read every device, as multipath-tools needs
    /// (it finds paths through udev's database).
    pub fn start_udevd(&self) -> Result<()> {
        self.sh("set -e; mkdir -p /run/udev /etc/udev /etc/multipath\n\
             ln -sf $(command -v udevadm) /tmp/systemd-udevd\n\
             pidof systemd-udevd >/dev/null || /tmp/systemd-udevd --daemon\n\
             udevadm trigger --action=add; udevadm settle -t 30")?;
        Ok(())
    }

    /// Stops udevd and removes its database: device-mapper users would
    /// otherwise wait on udev cookies nobody answers.
    pub fn stop_udevd(&self) -> Result<()> {
        self.sh("udevadm control --exit\n\
             while pidof systemd-udevd >/dev/null; do sleep 0.1; done\n\
             rm -rf /run/udev")?;
        Ok(())
    }

    /// multipath-tools' daemon in the guest as on a host that runs it:
    /// udevd (multipathd finds paths through its database and follows its
    /// events) and multipathd with `conf` as /etc/multipath.conf (the WWIDs
    /// in `wwids` added to /etc/multipath/wwids first, for a configuration
    /// whose `find_multipaths` wants them known). Returns once multipathd
    /// holds a map named `map` of `paths` paths, with its table.
    pub fn start_multipathd(
        &self,
        conf: &str,
        wwids: &[&str],
        map: &str,
        paths: usize,
    ) -> Result<String> {
        let wwids: String = wwids.iter().map(|w| format!("/{w}/\n")).collect();
        self.sh(&format!(
            "set -e; mkdir -p /etc/multipath\n\
             cat > /etc/multipath.conf <<'EOF'\n{conf}\nEOF\n\
             printf '{wwids}' > /etc/multipath/wwids"
        ))?;
        self.start_udevd()?;
        self.sh(&format!(
            "set -e; multipathd </dev/null >/tmp/multipathd.out 2>&1\n\
             i=0; until multipathd show maps raw format '%n %N' 2>/dev/null | grep -q '^{map} {paths}$'; do \
               i=$((i+1)); [ $i -lt 150 ] || {{ cat /tmp/multipathd.out; multipathd show maps; exit 1; }}; \
               sleep 0.2; done\n\
             dmsetup table {map}"
        ))
    }

    /// multipathd and udevd stop; the maps stay.
    pub fn stop_multipathd(&self) -> Result<()> {
        self.sh("multipathd shutdown >/dev/null 2>&1; i=0; \
             while pidof multipathd >/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done\n\
             rm -f /etc/multipath.conf /etc/multipath/wwids; ! pidof multipathd")
            .context("stopping multipathd")?;
        self.stop_udevd()
    }

    /// Removes the maps multipath-tools made (`multipath -F`) and forgets
    /// their WWIDs, so that pathpilot can make its own.
    pub fn flush_multipath_tools(&self) -> Result<()> {
        self.sh("multipath -F && multipath -W >/dev/null; rm -f /etc/multipath/wwids")?;
        Ok(())
    }

    /// Moves port `port` (1-based) into target port group `group`.
    pub fn move_port(&self, port: usize, group: u16) -> Result<()> {
        self.sh(&alua::move_script(port, group))?;
        Ok(())
    }

    fn check_alive(&self) -> Result<()> {
        let mut q = self.qemu.lock().unwrap();
        if let Some(c) = q.as_mut()
            && let Some(st) = c.try_wait()?
        {
            q.take();
            let log = fs::read_to_string(self.run_dir.join("qemu.log")).unwrap_or_default();
            bail!("QEMU exited ({st}): {}", log.trim());
        }
        Ok(())
    }

    /// Time from starting QEMU to the guest agent answering.
    pub fn boot_time(&self) -> Duration {
        self.boot_time
    }
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    pub fn images(&self) -> &Images {
        &self.images
    }
    /// Where this run's logs are kept (console.log, qemu.log, qemu.cmdline).
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }
    pub fn console_path(&self) -> PathBuf {
        self.run_dir.join("console.log")
    }
    pub fn console_log(&self) -> String {
        fs::read_to_string(self.console_path()).unwrap_or_default()
    }
    /// The last `n` console lines.
    pub fn console_tail(&self, n: usize) -> String {
        let log = self.console_log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
    fn console_tail_msg(&self, n: usize) -> String {
        format!(
            "\n--- console ({}), last {n} lines:\n{}\n---",
            self.console_path().display(),
            self.console_tail(n)
        )
    }

    /// Runs `script` with the guest's `sh` under the default timeout;
    /// any exit code is `Ok`.
    pub fn run(&self, script: &str) -> Result<Output> {
        self.run_timeout(script, self.cfg.cmd_timeout)
    }

    /// As [`Self::run`] with an explicit timeout. The guest kills the
    /// command at the timeout (the VM stays usable); if the guest itself
    /// stops answering, the testbed is marked failed.
    pub fn run_timeout(&self, script: &str, timeout: Duration) -> Result<Output> {
        let o = self
            .exec(script, timeout)
            .inspect_err(|_| self.failed.store(true, Ordering::SeqCst));
        let o = o.with_context(|| format!("guest command failed: {}", short(script)))?;
        // busybox timeout -s KILL: the shell dies with 128+9. The VM is
        // fine, so this is not a testbed failure.
        if o.code == 137 && o.elapsed >= timeout {
            bail!(
                "guest command timed out after {timeout:?}: {}\nstdout:\n{}\nstderr:\n{}",
                short(script),
                o.stdout_str().trim_end(),
                o.stderr_str().trim_end()
            );
        }
        Ok(o)
    }

    fn exec(&self, script: &str, timeout: Duration) -> Result<Output> {
        let mut guard = self.agent.lock().unwrap();
        let a = guard
            .as_mut()
            .context("the testbed has no agent (interactive, or powered off)")?;
        match a.exec(script, timeout, &mut || self.check_alive())? {
            Some(o) => Ok(o),
            None => bail!(
                "the guest did not answer within {} s + 15 s{}",
                timeout.as_secs().max(1),
                self.console_tail_msg(20)
            ),
        }
    }

    /// Runs `script`; a non-zero exit is an error carrying both outputs.
    /// Returns stdout.
    pub fn sh(&self, script: &str) -> Result<String> {
        let o = self.run(script)?;
        if !o.success() {
            self.failed.store(true, Ordering::SeqCst);
            bail!(
                "guest command exited {}: {}\nstdout:\n{}\nstderr:\n{}",
                o.code,
                short(script),
                o.stdout_str().trim_end(),
                o.stderr_str().trim_end()
            );
        }
        Ok(o.stdout_str())
    }

    /// Starts `script` in the background in the guest (e.g. a reader that
    /// must keep running while the host pulls a path).
    pub fn spawn(&self, script: &str) -> Result<Job> {
        let id = self.jobs.fetch_add(1, Ordering::SeqCst);
        let f = format!("/tmp/.pp/job{id}");
        let cmd = format!(
            "echo {} | base64 -d > {f}.sh\n(sh {f}.sh > {f}.out 2> {f}.err; echo $? > {f}.rc.tmp; mv {f}.rc.tmp {f}.rc) </dev/null >/dev/null 2>&1 &\necho $!",
            base64::encode(script.as_bytes())
        );
        let pid = self.sh(&cmd)?.trim().parse().context("spawn: no pid")?;
        Ok(Job { id, pid })
    }

    /// Waits for a background job and returns its output.
    pub fn wait_job(&self, job: &Job, timeout: Duration) -> Result<Output> {
        let f = format!("/tmp/.pp/job{}", job.id);
        let script = format!(
            "while [ ! -f {f}.rc ]; do sleep 0.1; done; cat {f}.out; cat {f}.err >&2; exit $(cat {f}.rc)"
        );
        self.run_timeout(&script, timeout)
    }

    /// Runs a raw QMP command.
    pub fn qmp(&self, cmd: &str, args: Value) -> Result<Value> {
        let mut g = self.qmp.lock().unwrap();
        g.as_mut().context("no QMP connection")?.execute(cmd, args)
    }

    fn check_path(&self, i: usize) -> Result<()> {
        if i >= self.cfg.n_paths() {
            bail!(
                "no path {i}: the testbed has {} paths (0-based)",
                self.cfg.n_paths()
            );
        }
        Ok(())
    }

    /// Cable pull: removes path `i`'s SCSI disk (in-flight commands abort,
    /// dm fails the path). The backing node survives for [`Self::restore_path`].
    pub fn pull_path(&self, i: usize) -> Result<Duration> {
        self.check_path(i)?;
        let t = Instant::now();
        let mut g = self.qmp.lock().unwrap();
        let q = g.as_mut().context("no QMP connection")?;
        let id = format!("hd{i}");
        q.execute("device_del", json!({"id": id}))?;
        q.wait_event(
            "DEVICE_DELETED",
            |d| d["device"] == id.as_str(),
            Duration::from_secs(20),
        )
        .with_context(|| format!("pull path {i}"))?;
        Ok(t.elapsed())
    }

    /// Plugs path `i`'s disk back in. The guest sees a new disk (new name
    /// and dev_t, same WWID): a map must be reloaded to use it.
    pub fn restore_path(&self, i: usize) -> Result<Duration> {
        self.check_path(i)?;
        let t = Instant::now();
        let (top, _) = self.scsi_hd(i);
        let mut dev = json!({"driver": "scsi-hd", "id": format!("hd{i}"), "bus": format!("scsi{i}.0"),
                             "drive": top, "wwn": WWN, "serial": SERIAL, "share-rw": true, "scsi-id": i});
        if self.cfg.alua.is_none() {
            for (k, v, _) in self.cfg.inquiry.fields() {
                dev[if k == "revision" { "ver" } else { k }] = json!(v);
            }
        }
        self.qmp("device_add", dev)
            .with_context(|| format!("restore path {i}"))?;
        Ok(t.elapsed())
    }

    /// Changes path `i`'s caps live (MiB/s, IOPS; 0 = none). With the wire
    /// model the bandwidth is the link's tbf rate. A cap of about zero
    /// (`set_caps(i, 1.0 / 1048576.0, 0)`: 1 B/s) hangs the path; setting a
    /// usable cap again releases the requests it held.
    pub fn set_caps(&self, i: usize, mib: f64, iops: u64) -> Result<()> {
        self.check_path(i)?;
        let bps = match &self.wire {
            Some(w) => {
                w.set_rate(i, wire::kbit_for_mib(mib))?;
                0
            }
            None => (mib * 1048576.0) as u64,
        };
        // A request queued under a near-zero limit (a hung path) waits for
        // a timer computed under that limit: hours at ~1 B/s. Reopening
        // the throttle node drains it, which re-issues the queued requests.
        let stalls = |(mib, iops): (f64, u64)| {
            (self.wire.is_none() && mib > 0.0 && mib * 1048576.0 < 65536.0) || iops == 1
        };
        let was_stalled = stalls(self.caps.lock().unwrap()[i]);
        self.qmp(
            "qom-set",
            json!({"path": format!("tg{i}"), "property": "limits", "value": {"bps-total": bps, "iops-total": iops}}),
        )?;
        self.caps.lock().unwrap()[i] = (mib, iops);
        if was_stalled && !stalls((mib, iops)) {
            let file = self.throttle_file(i);
            self.reopen_throttle(i, &file)?;
        }
        Ok(())
    }

    /// The node under path `i`'s throttle.
    fn throttle_file(&self, i: usize) -> String {
        let failing = self.errors.lock().unwrap().get(i).is_some_and(|p| *p > 0.0);
        if failing {
            format!("e{i}")
        } else {
            format!("f{i}")
        }
    }

    fn reopen_throttle(&self, i: usize, file: &str) -> Result<()> {
        self.qmp(
            "blockdev-reopen",
            json!({"options": [{"driver": "throttle", "node-name": format!("t{i}"),
                                "throttle-group": format!("tg{i}"), "file": file}]}),
        )?;
        Ok(())
    }

    /// Makes path `i` fail `pct` percent of its aligned `block_kib` KiB
    /// commands, live (0: none). A blkdebug node slid under the path's
    /// throttle fails with EIO every read or write that touches the first
    /// sector of one block in each `100 / pct` of the LUN: the guest sees
    /// ABORTED COMMAND, its retries fail alike, and dm fails the path and
    /// sends the I/O elsewhere; the other paths see the blocks as they are.
    pub fn set_error_pct(&self, i: usize, pct: f64, block_kib: u64) -> Result<()> {
        self.check_path(i)?;
        if !(0.0..=50.0).contains(&pct) {
            bail!("error share {pct}% out of range (0-50)");
        }
        if self.cfg.alua.is_some() {
            bail!("failing commands is for plain paths, not an ALUA array's ports");
        }
        let was = self.throttle_file(i) != format!("f{i}");
        if was {
            self.reopen_throttle(i, &format!("f{i}"))?;
            self.qmp("blockdev-del", json!({"node-name": format!("e{i}")}))?;
            self.set_error_share(i, 0.0);
        }
        if pct == 0.0 {
            return Ok(());
        }
        if block_kib == 0 || !block_kib.is_power_of_two() {
            bail!("block size {block_kib} KiB: a power of two, at least 1");
        }
        let block_sectors = block_kib * 2;
        let blocks = self.cfg.lun_mib * 1024 * 1024 / 512 / block_sectors;
        let every = ((100.0 / pct).round() as u64).max(1);
        // The error rules activate on each write; they then hold for reads
        // too.
        let rules: Vec<Value> = (0..blocks / every)
            .map(|j| {
                json!({"event": "pwritev", "errno": 5,
                       "sector": (j * every + every / 2) * block_sectors})
            })
            .collect();
        self.qmp(
            "blockdev-add",
            json!({"driver": "blkdebug", "node-name": format!("e{i}"), "image": format!("f{i}"),
                   "inject-error": rules}),
        )
        .with_context(|| format!("a failing node for path {i}"))?;
        if let Err(e) = self.reopen_throttle(i, &format!("e{i}")) {
            let _ = self.qmp("blockdev-del", json!({"node-name": format!("e{i}")}));
            return Err(e.context(format!("sliding the failing node under path {i}")));
        }
        self.set_error_share(i, pct);
        Ok(())
    }

    fn set_error_share(&self, i: usize, pct: f64) {
        let mut e = self.errors.lock().unwrap();
        if e.len() <= i {
            e.resize(i + 1, 0.0);
        }
        e[i] = pct;
    }

    /// Current caps of every path: (MiB/s, IOPS), 0 = none.
    pub fn caps(&self) -> Vec<(f64, u64)> {
        self.caps.lock().unwrap().clone()
    }

    /// The wire fabric, for link-level actions (`set_link`).
    pub fn wire(&self) -> Option<&Wire> {
        self.wire.as_ref()
    }

    /// Powers the guest off and returns how long it took.
    pub fn power_off(self) -> Result<Duration> {
        let t = Instant::now();
        let st = self.shutdown();
        st.map(|_| t.elapsed())
    }

    /// Waits for an interactive session (console on stdio) to end.
    pub fn wait(&self) -> Result<ExitStatus> {
        let mut q = self.qemu.lock().unwrap();
        let c = q.as_mut().context("QEMU is not running")?;
        let st = c.wait()?;
        q.take();
        Ok(st)
    }

    /// Asks the agent to power off; QMP `quit` if the guest does not go
    /// within 5 s; SIGKILL as a last resort.
    fn shutdown(&self) -> Result<Option<ExitStatus>> {
        let mut q = self.qemu.lock().unwrap();
        let Some(mut child) = q.take() else {
            return Ok(None);
        };
        if let Some(mut a) = self.agent.lock().unwrap().take() {
            a.power_off();
        }
        let wait = |child: &mut Child, d: Duration| -> Option<ExitStatus> {
            let t = Instant::now();
            while t.elapsed() < d {
                if let Ok(Some(st)) = child.try_wait() {
                    return Some(st);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            None
        };
        if let Some(st) = wait(&mut child, Duration::from_secs(5)) {
            return Ok(Some(st));
        }
        eprintln!("testbed: guest did not power off in 5 s; QMP quit");
        if let Some(qm) = self.qmp.lock().unwrap().as_mut() {
            let _ = qm.execute("quit", json!({}));
        }
        if let Some(st) = wait(&mut child, Duration::from_secs(3)) {
            return Ok(Some(st));
        }
        eprintln!("testbed: killing QEMU");
        let _ = child.kill();
        let st = child.wait()?;
        bail!("QEMU had to be killed ({st})")
    }
}

fn short(script: &str) -> String {
    let s = script.trim();
    if s.len() > 200 {
        format!("{}...", &s[..s.floor_char_boundary(200)])
    } else {
        s.to_string()
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if std::thread::panicking() || self.failed.load(Ordering::SeqCst) {
            eprintln!(
                "testbed: run dir {} kept{}",
                self.run_dir.display(),
                self.console_tail_msg(40)
            );
        }
        if let Err(e) = self.shutdown() {
            eprintln!("testbed: {e:#}");
        }
        // QEMU is gone: now the namespaces can go.
        self.wire.take();
        let _ = fs::remove_dir_all(&self.sock_dir);
    }
}
