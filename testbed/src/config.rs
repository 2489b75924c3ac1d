//! What a testbed boot is made from: the paths and their caps, the link
//! model, the guest's size, an ALUA array; [`Builder`] sets them fluently
//! (`Testbed::builder()`); `machine` adds [`Builder::boot`].
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};

use crate::alua::{AluaSpec, Backstore};

/// The WWN every path reports: one LUN, N paths.
pub const WWN: u64 = 0x5000c500deadbeef;
/// The SCSI serial every path reports.
pub const SERIAL: &str = "MPATHLUN0";
pub const MAX_PATHS: usize = 8;

/// How a path's bandwidth cap is enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Link {
    /// QEMU drive throttling: cheap and boots fast, but a leaky bucket, so
    /// a single request is not slowed by size/rate.
    #[default]
    Throttle,
    /// NBD over a `tc tbf`-shaped veth per path: a request takes
    /// size/rate, like a real link.
    Wire,
}

impl std::str::FromStr for Link {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "throttle" => Ok(Link::Throttle),
            "wire" => Ok(Link::Wire),
            _ => bail!("unknown link model {s:?} (throttle or wire)"),
        }
    }
}

/// Everything a testbed boot is made from. Use [`Builder`].
#[derive(Clone, Debug)]
pub struct Config {
    /// `None`: as many as the longest cap list, else 4.
    pub paths: Option<usize>,
    /// MiB/s per path; one value applies to all; empty or 0 = uncapped.
    pub caps_mib: Vec<f64>,
    /// IOPS per path; one value applies to all; empty or 0 = uncapped.
    pub iops: Vec<u64>,
    /// One IOPS budget shared by all paths (a QEMU throttle group: the
    /// array's per-command cost).
    pub shared_iops: Option<u64>,
    pub link: Link,
    pub mem_mib: u32,
    pub smp: u32,
    pub boot_timeout: Duration,
    /// Default per-command timeout of [`crate::Testbed::sh`] and [`crate::Testbed::run`].
    pub cmd_timeout: Duration,
    /// Host directory shared at /share (9p).
    pub share: Option<PathBuf>,
    pub lun_mib: u64,
    /// Console on stdio and an interactive shell (`cargo xtask vm shell`).
    pub interactive: bool,
    /// Hold a machine-wide lock while the VM runs so two testbeds never
    /// share the 2 host cores: throughput assertions would be meaningless.
    pub exclusive: bool,
    /// An ALUA array in the guest (LIO) in front of the paths: see `alua`.
    pub alua: Option<AluaSpec>,
    /// What the LUN says it is (its INQUIRY data): the LIO array's LUN
    /// where there is one, else the QEMU disks.
    pub inquiry: Inquiry,
}

/// A LUN's vendor, product and revision as INQUIRY reports them: any
/// array a multipath.conf device entry names (`NETAPP`/`LUN`, `PURE`/
/// `FlashArray`, ...). Unset fields keep the emulator's own (`QEMU`/`QEMU
/// HARDDISK`, `LIO-ORG`/`RAMDISK-MCP`...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inquiry {
    /// At most 8 characters.
    pub vendor: Option<String>,
    /// At most 16 characters.
    pub product: Option<String>,
    /// At most 4 characters.
    pub revision: Option<String>,
}

impl Inquiry {
    /// The fields set, with the most characters INQUIRY holds for each.
    pub fn fields(&self) -> Vec<(&'static str, &str, usize)> {
        [
            ("vendor", &self.vendor, 8),
            ("product", &self.product, 16),
            ("revision", &self.revision, 4),
        ]
        .into_iter()
        .filter_map(|(k, v, max)| v.as_deref().map(|v| (k, v, max)))
        .collect()
    }

    fn validate(&self) -> Result<()> {
        for (k, v, max) in self.fields() {
            if v.is_empty() || v.len() > max {
                bail!("{k} {v:?}: 1 to {max} characters (INQUIRY's field)");
            }
            if !v.bytes().all(|b| (0x20..0x7f).contains(&b)) || v.contains(',') {
                bail!("{k} {v:?}: printable ASCII without commas");
            }
        }
        Ok(())
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            paths: None,
            caps_mib: Vec::new(),
            iops: Vec::new(),
            shared_iops: None,
            link: Link::Throttle,
            mem_mib: 512,
            smp: 1,
            boot_timeout: Duration::from_secs(60),
            cmd_timeout: Duration::from_secs(120),
            share: None,
            lun_mib: 1024,
            interactive: false,
            exclusive: true,
            alua: None,
            inquiry: Inquiry::default(),
        }
    }
}

fn per_path<T: Copy + Default>(v: &[T], i: usize) -> T {
    match v.len() {
        0 => T::default(),
        1 => v[0],
        _ => v.get(i).copied().unwrap_or_default(),
    }
}

impl Config {
    pub fn n_paths(&self) -> usize {
        if let Some(n) = self.paths {
            return n;
        }
        // An array's ports sit on the paths: one each, or one for all.
        match self.alua.as_ref().map(|a| a.backstore) {
            Some(Backstore::Iblock) => return self.alua.as_ref().map_or(1, |a| a.ports.len()),
            Some(Backstore::Ramdisk(_)) => return 1,
            None => {}
        }
        match self.caps_mib.len().max(self.iops.len()) {
            l if l > 1 => l,
            _ => 4,
        }
    }
    /// The cap of path `i` in MiB/s (0 = none).
    pub fn cap_mib(&self, i: usize) -> f64 {
        per_path(&self.caps_mib, i)
    }
    pub fn iops_of(&self, i: usize) -> u64 {
        per_path(&self.iops, i)
    }

    pub fn validate(&self) -> Result<()> {
        let n = self.n_paths();
        if !(1..=MAX_PATHS).contains(&n) {
            bail!("paths must be 1..={MAX_PATHS}, not {n}");
        }
        for (what, len) in [("caps", self.caps_mib.len()), ("iops", self.iops.len())] {
            if len > 1 && len != n {
                bail!("{len} {what} given for {n} paths (give one value for all, or one per path)");
            }
        }
        if self.caps_mib.iter().any(|c| !c.is_finite() || *c < 0.0) {
            bail!("caps must be >= 0 MiB/s");
        }
        if self.mem_mib < 256 {
            bail!(
                "--mem {} MiB is too small (the initramfs alone is ~100 MiB)",
                self.mem_mib
            );
        }
        if let Some(s) = &self.share
            && !s.is_dir()
        {
            bail!("share {} is not a directory", s.display());
        }
        self.inquiry.validate()?;
        Ok(())
    }
}

/// Fluent construction of a [`Config`]; [`Builder::boot`] starts the VM.
#[derive(Clone, Debug, Default)]
pub struct Builder {
    pub cfg: Config,
}

impl Builder {
    pub fn paths(mut self, n: usize) -> Self {
        self.cfg.paths = Some(n);
        self
    }
    pub fn caps_mib(mut self, caps: &[f64]) -> Self {
        self.cfg.caps_mib = caps.to_vec();
        self
    }
    pub fn cap_mib(self, cap: f64) -> Self {
        self.caps_mib(&[cap])
    }
    pub fn iops(mut self, iops: &[u64]) -> Self {
        self.cfg.iops = iops.to_vec();
        self
    }
    pub fn shared_iops(mut self, iops: u64) -> Self {
        self.cfg.shared_iops = Some(iops);
        self
    }
    pub fn link(mut self, link: Link) -> Self {
        self.cfg.link = link;
        self
    }
    pub fn wire(self) -> Self {
        self.link(Link::Wire)
    }
    pub fn mem_mib(mut self, m: u32) -> Self {
        self.cfg.mem_mib = m;
        self
    }
    pub fn smp(mut self, n: u32) -> Self {
        self.cfg.smp = n;
        self
    }
    pub fn boot_timeout(mut self, d: Duration) -> Self {
        self.cfg.boot_timeout = d;
        self
    }
    pub fn cmd_timeout(mut self, d: Duration) -> Self {
        self.cfg.cmd_timeout = d;
        self
    }
    pub fn share(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cfg.share = Some(dir.into());
        self
    }
    pub fn lun_mib(mut self, m: u64) -> Self {
        self.cfg.lun_mib = m;
        self
    }
    /// An ALUA array in the guest: LIO ports over the paths (see `alua`).
    pub fn alua(mut self, spec: AluaSpec) -> Self {
        self.cfg.alua = Some(spec);
        self
    }

    /// The LUN's INQUIRY vendor (the array's, e.g. `NETAPP`).
    pub fn vendor(mut self, v: &str) -> Self {
        self.cfg.inquiry.vendor = Some(v.into());
        self
    }
    /// The LUN's INQUIRY product (e.g. `LUN`, `FlashArray`).
    pub fn product(mut self, p: &str) -> Self {
        self.cfg.inquiry.product = Some(p.into());
        self
    }
    /// The LUN's INQUIRY revision.
    pub fn revision(mut self, r: &str) -> Self {
        self.cfg.inquiry.revision = Some(r.into());
        self
    }
    pub fn exclusive(mut self, on: bool) -> Self {
        self.cfg.exclusive = on;
        self
    }
    pub fn config(&self) -> &Config {
        &self.cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inquiry_fits_its_fields() {
        let ok = Builder::default()
            .vendor("NETAPP")
            .product("LUN")
            .revision("9300");
        ok.config().validate().unwrap();
        assert_eq!(
            ok.config().inquiry.fields(),
            vec![
                ("vendor", "NETAPP", 8),
                ("product", "LUN", 16),
                ("revision", "9300", 4)
            ]
        );
        for (b, why) in [
            (Builder::default().vendor("TOOLONGVENDOR"), "1 to 8"),
            (Builder::default().product("A product too long"), "1 to 16"),
            (Builder::default().vendor("A,B"), "without commas"),
            (Builder::default().revision(""), "1 to 4"),
        ] {
            let e = b.config().validate().unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }
}
