//! `cargo xtask vm ...`: the testbed for people (docs/testing.md); the
//! tests and the benches drive the same crate, `pathpilot_testbed`.
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::{Args as ClapArgs, Subcommand};
use pathpilot_testbed::{AluaSpec, Backstore, Config, Inquiry, Link, Testbed};

#[derive(Subcommand)]
pub enum Cmd {
    /// Boot, run COMMAND in the guest shell (pathpilot, fio, dmsetup,
    /// multipath on PATH), print its output, exit with its exit code.
    Run {
        #[command(flatten)]
        opts: Opts,
        /// The guest command (joined with spaces, run by `sh`).
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Boot with an interactive guest shell on the console; `exit` powers
    /// off (Ctrl-A x kills QEMU).
    Shell {
        #[command(flatten)]
        opts: Opts,
    },
}

#[derive(ClapArgs)]
pub struct Opts {
    /// Number of paths to the LUN (1-8); default: one per --cap, else 4.
    #[arg(long)]
    paths: Option<usize>,
    /// Bandwidth cap per path in MiB/s (one value for all, or one per path).
    #[arg(long, value_delimiter = ',')]
    cap: Vec<f64>,
    /// IOPS cap per path (one value for all, or one per path).
    #[arg(long, value_delimiter = ',')]
    iops: Vec<u64>,
    /// One IOPS budget shared by all paths (the array's per-command cost).
    #[arg(long)]
    shared_iops: Option<u64>,
    /// throttle (QEMU drive throttling) or wire (NBD over shaped veths).
    #[arg(long, default_value = "throttle")]
    link: Link,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 512)]
    mem: u32,
    /// Command timeout in seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Host directory mounted at /share in the guest (9p).
    #[arg(long)]
    share: Option<PathBuf>,
    /// An ALUA array (LIO) in front of the paths: one port per item,
    /// GROUP:STATE (ao optimized, an non-optimized, standby, unavailable),
    /// e.g. `10:ao,20:an`. In the guest, `pp-alua state GROUP CODE` and
    /// `pp-alua move PORT GROUP` change it while the VM runs (codes: 0
    /// optimized, 1 non-optimized, 2 standby, 3 unavailable).
    #[arg(long, value_parser = parse_alua)]
    alua: Option<AluaSpec>,
    /// With --alua: one ramdisk of this many MiB behind every port instead
    /// of one LIO device over each (capped) path.
    #[arg(long)]
    alua_ramdisk: Option<u64>,
    /// With --alua-ramdisk: this many LUNs (ramdisks, each its own WWID)
    /// behind every port, e.g. 16 LUNs x 4 ports = 64 paths.
    #[arg(long, default_value_t = 1, requires = "alua_ramdisk")]
    luns: usize,
    /// With --alua: the delay LIO adds to each command on a non-optimized port.
    #[arg(long, default_value_t = 20)]
    nonop_delay_ms: u32,
    /// The LUN's INQUIRY vendor, e.g. NETAPP, PURE, 3PARdata (the LIO
    /// array's LUN with --alua, else the QEMU disks).
    #[arg(long)]
    vendor: Option<String>,
    /// The LUN's INQUIRY product, e.g. LUN, FlashArray, VV.
    #[arg(long)]
    product: Option<String>,
    /// The LUN's INQUIRY revision.
    #[arg(long)]
    revision: Option<String>,
    /// A sick path from boot: PATH:PCT fails PCT percent of path PATH's
    /// aligned 4 KiB commands with I/O errors (0-based PATH; e.g. `1:1`).
    #[arg(long, value_parser = parse_errors)]
    errors: Vec<(usize, f64)>,
}

fn parse_errors(s: &str) -> Result<(usize, f64), String> {
    let (i, p) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: expected PATH:PCT, e.g. 1:1"))?;
    let i = i.parse().map_err(|_| format!("{i:?}: not a path number"))?;
    let p: f64 = p.parse().map_err(|_| format!("{p:?}: not a percentage"))?;
    if !(0.0..=50.0).contains(&p) {
        return Err(format!("{p}%: out of range (0-50)"));
    }
    Ok((i, p))
}

fn parse_alua(s: &str) -> Result<AluaSpec, String> {
    AluaSpec::parse(s).map_err(|e| format!("{e:#}"))
}

impl Opts {
    /// Boots the testbed these options describe.
    fn boot(self, interactive: bool) -> Result<Testbed> {
        let errors = self.errors.clone();
        let tb = Testbed::boot(self.config(interactive))?;
        for (i, pct) in errors {
            tb.set_error_pct(i, pct, 4)?;
        }
        Ok(tb)
    }

    fn config(self, interactive: bool) -> Config {
        Config {
            paths: self.paths,
            caps_mib: self.cap,
            iops: self.iops,
            shared_iops: self.shared_iops,
            link: self.link,
            mem_mib: self.mem,
            cmd_timeout: Duration::from_secs(self.timeout),
            share: self.share,
            interactive,
            alua: self.alua.map(|mut a| {
                a.nonop_delay_ms = self.nonop_delay_ms;
                if let Some(mib) = self.alua_ramdisk {
                    a.backstore = Backstore::Ramdisk(mib);
                }
                a.luns = self.luns;
                a
            }),
            inquiry: Inquiry {
                vendor: self.vendor,
                product: self.product,
                revision: self.revision,
            },
            ..Config::default()
        }
    }
}

pub fn run(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Run { opts, command } => {
            let t = Instant::now();
            let tb = opts.boot(false)?;
            let o = tb.run(&command.join(" "))?;
            use std::io::Write;
            std::io::stdout().write_all(&o.stdout)?;
            std::io::stderr().write_all(&o.stderr)?;
            let cmd_t = o.elapsed;
            let boot = tb.boot_time();
            let off = tb.power_off()?;
            eprintln!(
                "testbed: boot {:.2} s, command {:.2} s, power-off {:.2} s, total {:.2} s, exit {}",
                boot.as_secs_f64(),
                cmd_t.as_secs_f64(),
                off.as_secs_f64(),
                t.elapsed().as_secs_f64(),
                o.code
            );
            std::process::exit(o.code);
        }
        Cmd::Shell { opts } => {
            let tb = opts.boot(true)?;
            let st = tb.wait()?;
            drop(tb);
            std::process::exit(st.code().unwrap_or(1));
        }
    }
}
