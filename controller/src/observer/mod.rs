//! The per-path observer: loads the eBPF programs, keeps the watch list,
//! and takes cumulative snapshots of the per-device counters; `interval`
//! turns two snapshots into per-interval figures.
use std::{
    collections::{BTreeMap, HashMap as StdHashMap},
    time::Instant,
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap, MapData, PerCpuHashMap, PerCpuValues},
    programs::{RawTracePoint, TracePoint},
    util::nr_cpus,
};
use pathpilot_common::{
    CgroupKey, CgroupStats, Config, DevShared, DevStats, ReqKey, START_REQUEUED,
};
use thiserror::Error;

use crate::blockdev::{BlockDev, DevNum};

pub mod btf;
pub mod hist;
pub mod interval;
pub mod tracefs;

pub use interval::{DeviceInterval, MapInterval};

/// The compiled eBPF object, embedded at build time by build.rs.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/pathpilot"));

/// A 64-bit FNV-1a hash of the embedded eBPF object, for `--version`: two
/// binaries with the same hash run the same programs in the kernel.
pub fn object_hash() -> u64 {
    OBJECT.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

/// Every classic tracepoint the programs attach to (category `block`); the
/// program carries the event's name.
pub const TRACEPOINTS: [&str; 8] = [
    "block_rq_issue",
    "block_rq_requeue",
    "block_rq_insert",
    "block_rq_merge",
    "block_bio_backmerge",
    "block_bio_frontmerge",
    "block_bio_queue",
    "block_rq_remap",
];

#[derive(Debug, Error)]
pub enum ObserveError {
    #[error("loading eBPF programs needs root (CAP_BPF and CAP_PERFMON); run as root")]
    NotRoot,
    #[error("{0}")]
    NoTracefs(String),
    #[error("unexpected tracepoint layout: {0}")]
    Layout(String),
    #[error(
        "the kernel has no BTF (/sys/kernel/btf/vmlinux is missing); pathpilot needs a kernel built with CONFIG_DEBUG_INFO_BTF"
    )]
    NoBtf,
    #[error("loading the eBPF programs failed: {0}")]
    Load(String),
    #[error("attaching to tracepoint block/{0} failed: {1}")]
    Attach(String, String),
    #[error("reading eBPF map {0}: {1}")]
    Map(&'static str, String),
}

/// How the observer chooses devices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// Only devices added with [`Observer::watch`].
    #[default]
    WatchList,
    /// Every block device (for `pathpilot stat` with no device given).
    All,
}

/// Cumulative counters of one device, summed over CPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceCounters {
    pub stats: DevStats,
    /// Requests in flight now (never negative: requests that were in flight
    /// when the observer attached complete without an issue seen).
    pub inflight: u64,
    /// The highest in-flight count since the previous snapshot.
    pub inflight_peak: u64,
}

/// Everything the programs counted, as of one instant.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub taken: Instant,
    pub devices: BTreeMap<DevNum, DeviceCounters>,
    /// dm path -> dm map, as seen in block_rq_remap.
    pub remaps: BTreeMap<DevNum, DevNum>,
    /// (device, cgroup id) -> bios and bytes submitted.
    pub cgroups: BTreeMap<(DevNum, u64), CgroupStats>,
    /// `io_ticks` (ms busy) per device, for utilisation.
    pub io_ticks_ms: BTreeMap<DevNum, u64>,
}

/// The loaded and attached programs. Dropping it detaches and unloads them
/// (the kernel frees programs whose last file descriptor closes, so nothing
/// outlives the process even on a crash).
pub struct Observer {
    _ebpf: Ebpf,
    stats: PerCpuHashMap<MapData, u32, DevStats>,
    shared: HashMap<MapData, u32, DevShared>,
    peak: PerCpuHashMap<MapData, u32, i64>,
    watch: HashMap<MapData, u32, u8>,
    remaps: HashMap<MapData, u32, u32>,
    cgroups: PerCpuHashMap<MapData, CgroupKey, CgroupStats>,
    start: HashMap<MapData, ReqKey, u64>,
    snapshots: u64,
    ncpus: usize,
    scope: Scope,
    /// Program ids, so tests can check they are gone after drop.
    prog_ids: Vec<u32>,
}

fn map_err(name: &'static str) -> impl Fn(aya::maps::MapError) -> ObserveError {
    move |e| ObserveError::Map(name, e.to_string())
}

fn take<T>(ebpf: &mut Ebpf, name: &'static str) -> Result<T, ObserveError>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    let m = ebpf
        .take_map(name)
        .ok_or_else(|| ObserveError::Map(name, "missing from the object".into()))?;
    T::try_from(m).map_err(map_err(name))
}

impl Observer {
    /// Loads the programs with the running kernel's tracepoint layout and
    /// attaches them all. Nothing is counted until a device is watched,
    /// unless `scope` is [`Scope::All`].
    pub fn load(scope: Scope) -> Result<Self, ObserveError> {
        if unsafe { libc::geteuid() } != 0 {
            return Err(ObserveError::NotRoot);
        }
        if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            return Err(ObserveError::NoBtf);
        }
        let root = tracefs::locate()?;
        // The kernel BTF is large: read the offsets and let it go before
        // the loader, which parses the kernel BTF once more on its own.
        let layout = tracefs::layout(&root, &btf::Btf::from_sys()?)?;
        let config = Config {
            watch_all: u32::from(scope == Scope::All),
            _pad: 0,
        };
        // No CO-RE relocations in the object: the loader needs no BTF.
        let mut ebpf = EbpfLoader::new()
            .btf(None)
            .override_global("LAYOUT", &layout, true)
            .override_global("CONFIG", &config, true)
            .load(OBJECT)
            .map_err(|e| ObserveError::Load(format!("{e:#}")))?;
        let mut prog_ids = Vec::new();
        for tp in TRACEPOINTS {
            let prog: &mut TracePoint = ebpf
                .program_mut(tp)
                .ok_or_else(|| ObserveError::Load(format!("program {tp} missing")))?
                .try_into()
                .map_err(|e| ObserveError::Load(format!("{tp}: {e}")))?;
            prog.load()
                .map_err(|e| ObserveError::Load(format!("{tp}: {e:#}")))?;
            prog.attach("block", tp)
                .map_err(|e| ObserveError::Attach(tp.into(), format!("{e:#}")))?;
            if let Ok(info) = prog.info() {
                prog_ids.push(info.id());
            }
        }
        // Completions run in IRQ context: a raw tracepoint (see the probe).
        {
            let tp = "block_rq_complete";
            let prog: &mut RawTracePoint = ebpf
                .program_mut(tp)
                .ok_or_else(|| ObserveError::Load(format!("program {tp} missing")))?
                .try_into()
                .map_err(|e| ObserveError::Load(format!("{tp}: {e}")))?;
            prog.load()
                .map_err(|e| ObserveError::Load(format!("{tp}: {e:#}")))?;
            prog.attach(tp)
                .map_err(|e| ObserveError::Attach(tp.into(), format!("{e:#}")))?;
            if let Ok(info) = prog.info() {
                prog_ids.push(info.id());
            }
        }
        // Loading parsed the kernel's BTF (aya does it eagerly, ~20 MiB):
        // hand that memory back rather than carry it for the daemon's life.
        // SAFETY: malloc_trim only releases free heap pages.
        unsafe {
            libc::malloc_trim(0);
        }
        let ncpus = nr_cpus().map_err(|(f, e)| ObserveError::Load(format!("{f}: {e}")))?;
        Ok(Self {
            stats: take(&mut ebpf, "STATS")?,
            shared: take(&mut ebpf, "SHARED")?,
            peak: take(&mut ebpf, "PEAK")?,
            watch: take(&mut ebpf, "WATCH")?,
            remaps: take(&mut ebpf, "REMAPS")?,
            cgroups: take(&mut ebpf, "CGROUPS")?,
            start: take(&mut ebpf, "START")?,
            snapshots: 0,
            _ebpf: ebpf,
            ncpus,
            scope,
            prog_ids,
        })
    }

    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// Kernel ids of the loaded programs.
    pub fn program_ids(&self) -> &[u32] {
        &self.prog_ids
    }

    /// Starts counting a device.
    pub fn watch(&mut self, dev: DevNum) -> Result<(), ObserveError> {
        self.watch
            .insert(dev.kernel(), 1, 0)
            .map_err(map_err("WATCH"))
    }

    /// Stops counting a device and forgets its counters, so a removed
    /// device leaves no entries behind.
    pub fn unwatch(&mut self, dev: DevNum) -> Result<(), ObserveError> {
        let k = dev.kernel();
        let _ = self.watch.remove(&k);
        let _ = self.stats.remove(&k);
        let _ = self.shared.remove(&k);
        let _ = self.peak.remove(&k);
        let _ = self.remaps.remove(&k);
        let stale: Vec<CgroupKey> = self
            .cgroups
            .keys()
            .filter_map(Result::ok)
            .filter(|c| c.dev == k)
            .collect();
        for c in stale {
            let _ = self.cgroups.remove(&c);
        }
        Ok(())
    }

    /// The devices on the watch list.
    pub fn watched(&self) -> Vec<DevNum> {
        let mut v: Vec<DevNum> = self
            .watch
            .keys()
            .filter_map(Result::ok)
            .map(DevNum::from_kernel)
            .collect();
        v.sort();
        v
    }

    /// How long the oldest request the driver of `dev` holds has been
    /// outstanding (`None`: nothing in flight there). A device that still
    /// completes its commands has only young ones, however long the queue
    /// in front of it; a hung one keeps an old one.
    pub fn oldest_inflight(&self, dev: DevNum) -> Option<std::time::Duration> {
        self.oldest_inflight_all().remove(&dev)
    }

    /// [`Self::oldest_inflight`] of every device with requests at its
    /// driver, in one pass over the table.
    pub fn oldest_inflight_all(&self) -> StdHashMap<DevNum, std::time::Duration> {
        let mut oldest: StdHashMap<u32, u64> = StdHashMap::new();
        for (key, t) in self.start.iter().filter_map(Result::ok) {
            if t & START_REQUEUED == 0 {
                let e = oldest.entry(key.dev).or_insert(t);
                *e = (*e).min(t);
            }
        }
        let now = monotonic_ns();
        oldest
            .into_iter()
            .map(|(d, t)| {
                (
                    DevNum::from_kernel(d),
                    std::time::Duration::from_nanos(now.saturating_sub(t)),
                )
            })
            .collect()
    }

    /// Forgets in-flight entries older than `age`: a completion the probes
    /// could not see (a device unwatched mid-request) must not leave its
    /// entry forever in the fixed-size table. Returns how many went.
    pub fn sweep_inflight(&mut self, age: std::time::Duration) -> usize {
        let now_ns = monotonic_ns();
        let old: Vec<ReqKey> = self
            .start
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, t)| now_ns.saturating_sub(t & !START_REQUEUED) > age.as_nanos() as u64)
            .map(|(k, _)| k)
            .collect();
        for k in &old {
            let _ = self.start.remove(k);
        }
        old.len()
    }

    /// Reads every counter once. Peaks restart from here, so each snapshot
    /// carries the peak of the interval that ends with it.
    pub fn snapshot(&mut self) -> Result<Snapshot, ObserveError> {
        self.snapshots += 1;
        if self.snapshots.is_multiple_of(64) {
            self.sweep_inflight(std::time::Duration::from_secs(300));
        }
        let taken = Instant::now();
        let mut devices = BTreeMap::new();
        for item in self.stats.iter() {
            let (k, per_cpu) = item.map_err(map_err("STATS"))?;
            let mut sum = DevStats::ZERO;
            for v in per_cpu.iter() {
                add(&mut sum, v);
            }
            let inflight = self.shared.get(&k, 0).map(|s| s.inflight).unwrap_or(0);
            let peak = self
                .peak
                .get(&k, 0)
                .map(|p| p.iter().copied().max().unwrap_or(0))
                .unwrap_or(0);
            devices.insert(
                DevNum::from_kernel(k),
                DeviceCounters {
                    stats: sum,
                    inflight: inflight.max(0) as u64,
                    inflight_peak: peak.max(inflight).max(0) as u64,
                },
            );
        }
        let keys: Vec<u32> = self.peak.keys().filter_map(Result::ok).collect();
        for k in keys {
            let zeros = PerCpuValues::try_from(vec![0i64; self.ncpus])
                .map_err(|e| ObserveError::Map("PEAK", e.to_string()))?;
            let _ = self.peak.insert(k, zeros, 0);
        }
        let remaps = self
            .remaps
            .iter()
            .filter_map(Result::ok)
            .map(|(p, m)| (DevNum::from_kernel(p), DevNum::from_kernel(m)))
            .collect();
        let mut cgroups: BTreeMap<(DevNum, u64), CgroupStats> = BTreeMap::new();
        for item in self.cgroups.iter() {
            let (k, per_cpu) = item.map_err(map_err("CGROUPS"))?;
            let e = cgroups
                .entry((DevNum::from_kernel(k.dev), k.cgroup_id))
                .or_default();
            for v in per_cpu.iter() {
                e.bios += v.bios;
                e.bytes += v.bytes;
            }
        }
        // Watched devices too: the first interval of a device needs a base.
        let mut io_ticks_ms = BTreeMap::new();
        for d in devices.keys().copied().chain(self.watched()) {
            if let Some(t) = BlockDev::io_ticks_ms(d) {
                io_ticks_ms.insert(d, t);
            }
        }
        Ok(Snapshot {
            taken,
            devices,
            remaps,
            cgroups,
            io_ticks_ms,
        })
    }
}

fn add(sum: &mut DevStats, v: &DevStats) {
    for i in 0..sum.ios.len() {
        sum.ios[i] += v.ios[i];
        sum.bytes[i] += v.bytes[i];
    }
    sum.completed += v.completed;
    sum.errors += v.errors;
    sum.requeues += v.requeues;
    sum.inserts += v.inserts;
    sum.rq_merges += v.rq_merges;
    sum.bio_backmerges += v.bio_backmerges;
    sum.bio_frontmerges += v.bio_frontmerges;
    sum.bios += v.bios;
    sum.sequential += v.sequential;
    sum.random += v.random;
    sum.bio_sequential += v.bio_sequential;
    sum.bio_random += v.bio_random;
    sum.remapped += v.remapped;
    sum.lat_sum_ns += v.lat_sum_ns;
    for (a, b) in sum.size_hist.iter_mut().zip(v.size_hist.iter()) {
        *a += b;
    }
    for (a, b) in sum.lat_hist.iter_mut().zip(v.lat_hist.iter()) {
        *a += b;
    }
}

/// Now on bpf_ktime_get_ns's clock (CLOCK_MONOTONIC).
fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// Which dm map each path belongs to: from the remaps the programs saw,
/// completed by sysfs (`/sys/block/dm-N/slaves`) for maps that carried no
/// I/O yet.
pub fn path_to_map(snap: &Snapshot) -> StdHashMap<DevNum, DevNum> {
    let mut out: StdHashMap<DevNum, DevNum> = snap.remaps.iter().map(|(p, m)| (*p, *m)).collect();
    if let Ok(dir) = std::fs::read_dir("/sys/block") {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("dm-") {
                continue;
            }
            let Some(map) = BlockDev::by_name(&name) else {
                continue;
            };
            if let Ok(slaves) = std::fs::read_dir(e.path().join("slaves")) {
                for s in slaves.flatten() {
                    if let Some(p) = BlockDev::by_name(&s.file_name().to_string_lossy()) {
                        out.entry(p.dev).or_insert(map.dev);
                    }
                }
            }
        }
    }
    out
}
