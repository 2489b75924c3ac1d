//! Block devices as the user names them (`/dev/sdb`, `sdb`, `8:16`) and as
//! the kernel numbers them, resolved through sysfs.
use pathpilot_common::{DIR_DISCARD, DIR_FLUSH, DIR_READ, DIR_WRITE, DIRS};
use std::{fmt, fs, path::Path, str::FromStr};

use thiserror::Error;

/// The SCSI address (`H:C:T:L`) of a disk, or `-` for one without (a
/// disk that is gone, a non-SCSI device).
pub fn hctl(dev: DevNum) -> String {
    std::fs::read_link(dev.sysfs().join("device"))
        .ok()
        .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| n.split(':').count() == 4)
        .unwrap_or_else(|| "-".into())
}

/// A block device number (major:minor), the userspace form of a dev_t.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct DevNum {
    pub major: u32,
    pub minor: u32,
}

impl DevNum {
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }

    /// The encoding block tracepoints use (`major << 20 | minor`).
    pub const fn kernel(self) -> u32 {
        pathpilot_common::kdev(self.major, self.minor)
    }

    pub const fn from_kernel(dev: u32) -> Self {
        Self::new(
            pathpilot_common::kdev_major(dev),
            pathpilot_common::kdev_minor(dev),
        )
    }

    /// From `st_rdev` of a device node (glibc's encoding).
    pub fn from_rdev(rdev: u64) -> Self {
        Self::new(libc::major(rdev), libc::minor(rdev))
    }

    /// `/sys/dev/block/M:m`, the device's sysfs directory.
    pub fn sysfs(self) -> std::path::PathBuf {
        format!("/sys/dev/block/{self}").into()
    }
}

impl fmt::Display for DevNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error("'{0}' is not MAJ:MIN")]
pub struct DevNumParseError(String);

impl FromStr for DevNum {
    type Err = DevNumParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || DevNumParseError(s.to_string());
        let (a, b) = s.split_once(':').ok_or_else(bad)?;
        let major = a.parse().map_err(|_| bad())?;
        let minor: u32 = b.parse().map_err(|_| bad())?;
        if minor > 0xf_ffff || major > 0xfff {
            return Err(bad());
        }
        Ok(Self::new(major, minor))
    }
}

#[derive(Debug, Error)]
pub enum ResolveError {
    #[error("no such block device: {0}")]
    NotFound(String),
    #[error("{0} is not a block device")]
    NotBlock(String),
}

/// A block device known to sysfs: its number and kernel name (`sdb`, `dm-0`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockDev {
    pub dev: DevNum,
    pub name: String,
}

impl BlockDev {
    /// Resolves what a user typed: a path to a device node, a kernel name,
    /// or MAJ:MIN. The device must exist now.
    pub fn resolve(arg: &str) -> Result<Self, ResolveError> {
        if let Ok(dev) = arg.parse::<DevNum>() {
            return Self::from_dev(dev).ok_or_else(|| ResolveError::NotFound(arg.into()));
        }
        if arg.contains('/') {
            use std::os::unix::fs::{FileTypeExt, MetadataExt};
            let md = fs::metadata(arg).map_err(|_| ResolveError::NotFound(arg.into()))?;
            if !md.file_type().is_block_device() {
                return Err(ResolveError::NotBlock(arg.into()));
            }
            return Self::from_dev(DevNum::from_rdev(md.rdev()))
                .ok_or_else(|| ResolveError::NotFound(arg.into()));
        }
        Self::by_name(arg).ok_or_else(|| ResolveError::NotFound(arg.into()))
    }

    /// The device with this number, if sysfs knows it.
    pub fn from_dev(dev: DevNum) -> Option<Self> {
        let uevent = fs::read_to_string(dev.sysfs().join("uevent")).ok()?;
        let name = uevent
            .lines()
            .find_map(|l| l.strip_prefix("DEVNAME="))?
            .to_string();
        Some(Self { dev, name })
    }

    /// A whole disk or partition by kernel name, via /sys/class/block.
    pub fn by_name(name: &str) -> Option<Self> {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return None;
        }
        let dev = fs::read_to_string(Path::new("/sys/class/block").join(name).join("dev")).ok()?;
        Some(Self {
            dev: dev.trim().parse().ok()?,
            name: name.to_string(),
        })
    }
}

/// What the kernel counted as completed on a device, by direction (the
/// `DIR_*` indices of the probes' counters): requests and bytes, from its
/// sysfs `stat`. Reads, writes and discards carry bytes; flushes are
/// counted only by kernels that have the field (4.18 and later).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelCounts {
    pub ios: [u64; DIRS],
    pub bytes: [u64; DIRS],
}

/// A device's sysfs `stat` (or its fields in `/proc/diskstats`), parsed
/// once for every figure taken from it: a busy device's line was parsed
/// three times each window, once per figure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    /// Milliseconds with I/O in flight (`io_ticks`, field 10): the basis
    /// of utilisation.
    pub io_ticks_ms: u64,
    /// Requests in flight now (field 9): the same count as the device's
    /// `inflight` file, so one read gives both it and the counters.
    pub in_flight: u64,
    /// Completed requests and bytes (fields 1 and 3 reads, 5 and 7
    /// writes, 12 and 14 discards, 16 flushes; a field the kernel does not
    /// have reads as 0).
    pub counts: KernelCounts,
}

impl Stat {
    /// Fields in the longest `stat` read (6.x has 17).
    const FIELDS: usize = 17;

    /// None unless every field is a number and the eleven every kernel
    /// has are there.
    pub fn parse(stat: &str) -> Option<Self> {
        let mut f = [0u64; Self::FIELDS];
        let mut n = 0;
        for v in stat.split_ascii_whitespace() {
            let v = v.parse().ok()?;
            if let Some(slot) = f.get_mut(n) {
                *slot = v;
            }
            n += 1;
        }
        if n < 11 {
            return None;
        }
        let mut counts = KernelCounts::default();
        for (dir, ios, sectors) in [(DIR_READ, 0, 2), (DIR_WRITE, 4, 6), (DIR_DISCARD, 11, 13)] {
            counts.ios[dir] = f[ios];
            counts.bytes[dir] = f[sectors] << 9;
        }
        counts.ios[DIR_FLUSH] = f[15];
        Some(Stat {
            io_ticks_ms: f[9],
            in_flight: f[8],
            counts,
        })
    }
}

/// Milliseconds a device has spent with I/O in flight, from its sysfs
/// `stat` (see [`Stat`]).
pub fn io_ticks_ms(stat: &str) -> Option<u64> {
    Stat::parse(stat).map(|s| s.io_ticks_ms)
}

/// Every block device's counters in one read of `/proc/diskstats`: the
/// same fields as each one's sysfs `stat`, in the same order, after its
/// numbers and name. Reading a hundred devices busy at once costs a few
/// reads here where their `stat` files cost a hundred (the kernel's work
/// for each device is the same either way).
#[derive(Default)]
pub struct DiskStats {
    file: Option<fs::File>,
    /// One page (seq_file hands out a page per read), zeroed once.
    chunk: Vec<u8>,
    text: Vec<u8>,
    /// Lines at the last read: how many devices one read costs.
    pub lines: Option<usize>,
}

impl DiskStats {
    /// Each device's `stat` (as its sysfs `stat` shows it) for the
    /// devices `want` accepts; a line that does not parse is left out.
    pub fn read(&mut self, want: impl Fn(DevNum) -> bool) -> std::io::Result<Vec<(DevNum, Stat)>> {
        use std::os::unix::fs::FileExt;
        if self.file.is_none() {
            self.file = Some(fs::File::open("/proc/diskstats")?);
        }
        let f = self.file.as_ref().expect("opened above");
        if self.chunk.is_empty() {
            self.chunk = vec![0; 4096];
        }
        self.text.clear();
        loop {
            let n = f.read_at(&mut self.chunk, self.text.len() as u64)?;
            if n == 0 {
                break;
            }
            self.text.extend_from_slice(&self.chunk[..n]);
        }
        let text = String::from_utf8_lossy(&self.text);
        let mut lines = 0;
        let mut got = Vec::new();
        for l in text.lines() {
            lines += 1;
            if let Some((d, f)) = diskstats_line(l).filter(|(d, _)| want(*d))
                && let Some(st) = Stat::parse(f)
            {
                got.push((d, st));
            }
        }
        self.lines = Some(lines);
        Ok(got)
    }
}

/// A `/proc/diskstats` line: the device and the text of its fields.
fn diskstats_line(l: &str) -> Option<(DevNum, &str)> {
    let mut rest = l.trim_start();
    let mut next = || -> Option<&str> {
        let (word, tail) = rest.split_once(char::is_whitespace)?;
        rest = tail.trim_start();
        Some(word)
    };
    let major = next()?.parse().ok()?;
    let minor = next()?.parse().ok()?;
    next()?;
    Some((DevNum::new(major, minor), rest))
}

/// The name of a device number for display, `M:m` when sysfs has no name.
pub fn display_name(dev: DevNum) -> String {
    BlockDev::from_dev(dev)
        .map(|b| b.name)
        .unwrap_or_else(|| dev.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_time_and_requests_in_flight_are_fields_10_and_9_of_stat() {
        let stat = "  1459   0  45398   2205   11   4   120   9   7   1713   2215   0 0 0 0 0 0\n";
        let st = Stat::parse(stat).unwrap();
        assert_eq!((st.io_ticks_ms, st.in_flight), (1713, 7));
        assert_eq!(io_ticks_ms(stat), Some(1713));
        assert_eq!(io_ticks_ms("1 2 3"), None);
    }

    #[test]
    fn kernel_counts_read_each_direction_from_stat() {
        // 6.x: 17 fields (reads, writes, in flight and busy time, discards,
        // flushes).
        let stat = "  4000  1  32000  900  500  2  4000  80  0  1713  990  7  0  56  3  957  40";
        let k = Stat::parse(stat).unwrap().counts;
        assert_eq!(k.ios[DIR_READ], 4000);
        assert_eq!(k.bytes[DIR_READ], 32000 * 512);
        assert_eq!((k.ios[DIR_WRITE], k.bytes[DIR_WRITE]), (500, 4000 * 512));
        assert_eq!((k.ios[DIR_DISCARD], k.bytes[DIR_DISCARD]), (7, 56 * 512));
        assert_eq!(k.ios[DIR_FLUSH], 957);
        assert_eq!(k.ios[pathpilot_common::DIR_OTHER], 0);
        // 4.x before discards: no discard or flush figures, the rest read.
        let old = Stat::parse("10 0 80 1 2 0 16 1 0 5 6").unwrap().counts;
        assert_eq!((old.ios[DIR_READ], old.ios[DIR_WRITE]), (10, 2));
        assert_eq!((old.ios[DIR_DISCARD], old.ios[DIR_FLUSH]), (0, 0));
        // A later kernel's extra fields are no reason to fail.
        assert_eq!(
            Stat::parse(&format!("{stat} 11 12")).map(|s| s.counts),
            Some(k)
        );
        assert_eq!(Stat::parse("1 2 3"), None);
        assert_eq!(Stat::parse("1 2 x 4 5 6 7 8 9 10 11"), None);
    }

    #[test]
    fn devnum_parses_and_encodes() {
        let d: DevNum = "8:16".parse().unwrap();
        assert_eq!(d, DevNum::new(8, 16));
        assert_eq!(d.to_string(), "8:16");
        assert_eq!(DevNum::from_kernel(d.kernel()), d);
        assert!("8".parse::<DevNum>().is_err());
        assert!("a:1".parse::<DevNum>().is_err());
        assert!("8:1048576".parse::<DevNum>().is_err());
    }

    #[test]
    fn a_diskstats_line_gives_the_fields_of_the_devices_stat() {
        let l = "   8      16 sdb 1786 12 95442 310 82 3 1296 41 0 620 352 0 0 0 0 7 1";
        let (dev, fields) = diskstats_line(l).unwrap();
        assert_eq!(dev, DevNum::new(8, 16));
        let st = Stat::parse(fields).unwrap();
        assert_eq!((st.in_flight, st.io_ticks_ms), (0, 620));
        let k = st.counts;
        assert_eq!(k.ios[DIR_READ], 1786);
        assert_eq!(k.bytes[DIR_WRITE], 1296 << 9);
        assert_eq!(k.ios[DIR_FLUSH], 7);
        assert_eq!(diskstats_line(" 8 16"), None);
        assert_eq!(diskstats_line("x 16 sdb 1 2"), None);
    }

    #[test]
    fn diskstats_agrees_with_each_devices_stat() {
        // Quiet devices (loop0 exists here; its counts do not move).
        let mut d = DiskStats::default();
        let lo = DevNum::new(7, 0);
        let all = d.read(|_| true).unwrap();
        assert!(d.lines.unwrap() >= all.len());
        let got = d.read(|x| x == lo).unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        let sysfs = fs::read_to_string(lo.sysfs().join("stat")).unwrap();
        assert_eq!(Some(got[0].1), Stat::parse(&sysfs));
    }

    #[test]
    fn resolve_rejects_missing_and_non_block() {
        assert!(matches!(
            BlockDev::resolve("/dev/does-not-exist"),
            Err(ResolveError::NotFound(_))
        ));
        assert!(matches!(
            BlockDev::resolve("/dev/null"),
            Err(ResolveError::NotBlock(_))
        ));
        assert!(matches!(
            BlockDev::resolve("no-such-disk"),
            Err(ResolveError::NotFound(_))
        ));
        assert!(BlockDev::resolve("4095:1048575").is_err());
    }

    #[test]
    fn resolve_finds_loop0_three_ways() {
        // loop0 exists on every machine here (the loop driver is built in).
        let Ok(by_path) = BlockDev::resolve("/dev/loop0") else {
            panic!("/dev/loop0 missing: the host tests need the loop driver");
        };
        assert_eq!(by_path.name, "loop0");
        assert_eq!(BlockDev::resolve("loop0").unwrap(), by_path);
        assert_eq!(
            BlockDev::resolve(&by_path.dev.to_string()).unwrap(),
            by_path
        );
    }
}
