//! The per-path observer: loads the eBPF programs, keeps the watch list,
//! and takes cumulative snapshots of the per-device counters; `interval`
//! turns two snapshots into per-interval figures.
use std::collections::HashMap as StdHashMap;

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, IterableMap, MapData, PerCpuArray, PerCpuHashMap},
    programs::{BtfTracePoint, tp_btf::BtfTracePointLinkId},
    util::nr_cpus,
};
use pathpilot_common::{
    CgroupCache, CgroupKey, CgroupStats, DevShared, MAX_SLOTS, SLOT_EMPTY, SLOT_GONE, Slot,
};
use thiserror::Error;

use crate::{
    blockdev::{self, BlockDev, DevNum, KernelCounts},
    sysfs_attr::KeptFiles,
};

pub mod btf;
mod cgroups;
pub mod hist;
pub mod interval;
pub mod layout;
mod load;
pub mod sampling;
mod snapshot;
mod stats;
mod view;
mod watch;

pub use stats::Access;

pub use cgroups::cgroup2_root;
pub use interval::{DeviceInterval, MapInterval, SizeClassLatency};
use sampling::StallClock;
pub use sampling::{Observed, Sampling};
use snapshot::Last;
pub use snapshot::{DeviceCounters, Snapshot, floor_to_kernel};

/// The compiled eBPF object, embedded at build time by build.rs.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/pathpilot"));

/// A 64-bit FNV-1a hash of the embedded eBPF object, for `--version`: two
/// binaries with the same hash run the same programs in the kernel.
pub fn object_hash() -> u64 {
    OBJECT.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

/// The tracepoints the programs are on; `block_bio_queue`
/// ([`BIO_TRACEPOINT`]) only with [`Bios::Probed`].
pub use pathpilot_common::{BIO_TRACEPOINT, BTF_TRACEPOINTS};

/// Where the figures of bios as submitted come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Bios {
    /// A probe on every bio (`block_bio_queue`): bios and their bytes,
    /// their order as submitted, and the bytes of each cgroup. A program
    /// run per bio: without it, about a fifth less eBPF time per I/O.
    #[default]
    Probed,
    /// No per-bio probe: bios counted as the requests made plus the bios
    /// merged into them less the splits, and their bytes as the requests'
    /// (exact counts, at completion rather than submission); no bio order
    /// (the request order stands in) and no cgroup bytes.
    FromRequests,
}

impl Bios {
    /// With the per-bio probe or without it.
    pub fn probed(on: bool) -> Self {
        if on { Bios::Probed } else { Bios::FromRequests }
    }
}

#[derive(Debug, Error)]
pub enum ObserveError {
    #[error("loading eBPF programs needs root (CAP_BPF and CAP_PERFMON); run as root")]
    NotRoot,
    #[error("unexpected kernel layout: {0}")]
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
    #[error("cannot watch {0}: all {1} device slots are in use")]
    Full(DevNum, u32),
}

/// What one of the observer's programs has cost, as the kernel accounts
/// it: its runs and their time, counted only while
/// `kernel.bpf_stats_enabled` is 1 (the accounting times every run of
/// every program, so it is off unless someone asks; see [`bpf_stats_enabled`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProgramCost {
    /// The program, named for its tracepoint (`block_rq_issue`).
    pub program: String,
    pub runs: u64,
    pub run_ns: u64,
}

/// Whether the kernel now accounts programs' runs
/// (`/proc/sys/kernel/bpf_stats_enabled`); None where it cannot tell.
pub fn bpf_stats_enabled() -> Option<bool> {
    let v = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").ok()?;
    Some(v.trim() != "0")
}

/// How the observer chooses devices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// Only devices added with [`Observer::watch`].
    #[default]
    WatchList,
    /// Every block device (for `pathpilot stat` with no device given):
    /// those in /sys/block at each snapshot.
    All,
}

/// The loaded and attached programs. Dropping it detaches and unloads them
/// (the kernel frees programs whose last file descriptor closes, so nothing
/// outlives the process even on a crash).
pub struct Observer {
    ebpf: Ebpf,
    slots: Array<MapData, Slot>,
    /// Each slot's counters on each CPU.
    stats: stats::Stats,
    shared: Array<MapData, DevShared>,
    /// SHARED mapped into our memory: read with no syscall.
    shared_view: view::ArrayView<DevShared>,
    cgcache: PerCpuArray<MapData, CgroupCache>,
    /// An LRU per-CPU hash in the kernel.
    cgroups: PerCpuHashMap<MapData, CgroupKey, CgroupStats>,
    /// The slot table as written to SLOTS (kernel dev_t per slot).
    table: Vec<u32>,
    snapshots: u64,
    /// Per watched device (kernel dev_t): what the last snapshot read of
    /// it. A device idle then whose shared state has not moved since did
    /// no I/O in between (every request in flight moves `inflight`, every
    /// completion `last_complete_ns`): its counters are taken from here,
    /// with no map or sysfs read (on mostly idle paths, those reads would
    /// be most of a window's work).
    last: StdHashMap<u32, Last>,
    /// Each watched device's sysfs `stat` (its busy time) and `inflight`
    /// (the kernel's own count, read while the probes count some in
    /// flight: under load, most windows), kept open.
    sysfs_files: KeptFiles<(u32, &'static str)>,
    /// Per watched device: the kernel's completed counts when it was
    /// watched, the zero of its `untraced` floor (see `floor_to_kernel`).
    kernel_base: StdHashMap<u32, KernelCounts>,
    /// Many busy devices' kernel figures in one file.
    diskstats: blockdev::DiskStats,
    diskstats_reads: u64,
    ncpus: usize,
    scope: Scope,
    /// Program ids, so tests can check they are gone after drop.
    prog_ids: Vec<u32>,
    bios: Bios,
    /// Each program's tracepoint and its link while attached.
    links: Vec<(&'static str, Option<BtfTracePointLinkId>)>,
    /// Time-sampled observation (see [`Self::sample`]): per watched device,
    /// the kernel's clock of its silence.
    sampling: Option<StdHashMap<u32, StallClock>>,
    /// Cumulative time attached before `attached_at`, and since when the
    /// programs are attached (None while detached).
    attached_ns: u64,
    attached_at: Option<u64>,
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
    /// Loads the programs with the running kernel's layout and attaches
    /// them all. Nothing is counted until a device is watched, unless
    /// `scope` is [`Scope::All`].
    pub fn load(scope: Scope) -> Result<Self, ObserveError> {
        Self::load_with(scope, Access::Auto, Bios::Probed)
    }

    /// [`Self::load`], reading the counters as `access` says and the bios
    /// as `bios` says.
    pub fn load_with(scope: Scope, access: Access, bios: Bios) -> Result<Self, ObserveError> {
        if unsafe { libc::geteuid() } != 0 {
            return Err(ObserveError::NotRoot);
        }
        if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            return Err(ObserveError::NoBtf);
        }
        let attached: Vec<&str> = pathpilot_common::tracepoints(bios == Bios::Probed).collect();
        // The kernel BTF is large: read the offsets and the attach ids and
        // let it go before the loader.
        let (layout, index) = {
            let kernel = btf::Btf::from_sys()?;
            let ids = attached
                .iter()
                .map(|tp| {
                    let name = format!("btf_trace_{tp}");
                    let id = kernel
                        .typedef_id(&name)
                        .map_err(|e| ObserveError::Layout(format!("kernel BTF: {e}")))?;
                    Ok((id, name))
                })
                .collect::<Result<Vec<_>, ObserveError>>()?;
            let index = load::attach_index(&ids)
                .map_err(|e| ObserveError::Load(format!("the tracepoints' BTF index: {e}")))?;
            (layout::layout(&kernel)?, index)
        };
        let ncpus = nr_cpus().map_err(|(f, e)| ObserveError::Load(format!("{f}: {e}")))?;
        let cpus = ncpus as u32;
        let mut ebpf = load::without_kernel_btf(|| {
            // No CO-RE relocations in the object: the loader needs no BTF.
            EbpfLoader::new()
                .btf(None)
                .override_global("LAYOUT", &layout, true)
                .override_global("NCPUS", &cpus, true)
                .map_max_entries("STATS", stats::entries(ncpus))
                .load(OBJECT)
                .map_err(|e| ObserveError::Load(format!("{e:#}")))
        })?;
        let mut prog_ids = Vec::new();
        let mut links = Vec::new();
        for tp in attached {
            let prog: &mut BtfTracePoint = ebpf
                .program_mut(tp)
                .ok_or_else(|| ObserveError::Load(format!("program {tp} missing")))?
                .try_into()
                .map_err(|e| ObserveError::Load(format!("{tp}: {e}")))?;
            prog.load(tp, &index)
                .map_err(|e| ObserveError::Load(format!("{tp}: {e:#}")))?;
            let link = prog
                .attach()
                .map_err(|e| ObserveError::Attach(tp.into(), format!("{e:#}")))?;
            links.push((tp, Some(link)));
            if let Ok(info) = prog.info() {
                prog_ids.push(info.id());
            }
        }
        // SAFETY: malloc_trim only releases free heap pages.
        unsafe {
            libc::malloc_trim(0);
        }
        let shared: Array<MapData, DevShared> = take(&mut ebpf, "SHARED")?;
        let shared_view = view::ArrayView::map(shared.map(), MAX_SLOTS)
            .map_err(|e| ObserveError::Map("SHARED", format!("mapping it: {e}")))?;
        let stats = stats::Stats::new(take(&mut ebpf, "STATS")?, ncpus, access)
            .map_err(|e| ObserveError::Map("STATS", format!("mapping it: {e}")))?;
        let mut o = Self {
            slots: take(&mut ebpf, "SLOTS")?,
            stats,
            shared,
            shared_view,
            cgcache: take(&mut ebpf, "CGCACHE")?,
            cgroups: take(&mut ebpf, "CGROUPS")?,
            table: vec![SLOT_EMPTY; MAX_SLOTS as usize],
            snapshots: 0,
            last: StdHashMap::new(),
            sysfs_files: KeptFiles::default(),
            kernel_base: StdHashMap::new(),
            diskstats: blockdev::DiskStats::default(),
            diskstats_reads: 0,
            ebpf,
            ncpus,
            scope,
            prog_ids,
            bios,
            links,
            sampling: None,
            attached_ns: 0,
            attached_at: Some(monotonic_ns()),
        };
        if scope == Scope::All {
            o.watch_present();
        }
        Ok(o)
    }

    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// Kernel ids of the loaded programs.
    pub fn program_ids(&self) -> &[u32] {
        &self.prog_ids
    }

    /// Each attached program's runs and run time so far (zero while the
    /// kernel's accounting is off), by name. One syscall per program.
    pub fn program_costs(&self) -> Vec<ProgramCost> {
        let mut v: Vec<ProgramCost> = self
            .ebpf
            .programs()
            .filter_map(|(name, p)| {
                // A program left out (the bio probe) was never loaded.
                let info = p.info().ok()?;
                Some(ProgramCost {
                    program: name.to_string(),
                    runs: info.run_count(),
                    run_ns: u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX),
                })
            })
            .collect();
        v.sort_by(|a, b| a.program.cmp(&b.program));
        v
    }

    /// How long each watched device with requests in flight has completed
    /// nothing (since its last completion, or since it became busy if that
    /// is later). A device that still completes commands, however long
    /// the queue in front of it, is never silent long; a hung one is.
    pub fn silences(&self) -> StdHashMap<DevNum, std::time::Duration> {
        let now = monotonic_ns();
        if let Some(clocks) = &self.sampling {
            return clocks
                .iter()
                .filter_map(|(d, c)| {
                    let s = c.silence()?;
                    Some((DevNum::from_kernel(*d), std::time::Duration::from_nanos(s)))
                })
                .collect();
        }
        self.table
            .iter()
            .enumerate()
            .filter(|(_, d)| !matches!(**d, SLOT_EMPTY | SLOT_GONE))
            .filter_map(|(slot, d)| {
                let sh = self.shared_view.get(slot as u32)?;
                let s = silence(&sh, now)?;
                Some((DevNum::from_kernel(*d), std::time::Duration::from_nanos(s)))
            })
            .collect()
    }

    /// [`Self::silences`] of one device. While sampling, its kernel
    /// figures are read now: the checker asks between snapshots, and a
    /// clock moved only at snapshots would understate a stall by up to a
    /// window.
    pub fn silence(&mut self, dev: DevNum) -> Option<std::time::Duration> {
        if self.sampling.is_some() {
            self.slot_of(dev.kernel())?;
            if let Some(s) = self.kernel_stats(&[dev]).remove(&dev).flatten() {
                self.stall_clock(dev, &s, monotonic_ns());
            }
            let s = self.sampling.as_ref()?.get(&dev.kernel())?.silence()?;
            return Some(std::time::Duration::from_nanos(s));
        }
        let slot = self.slot_of(dev.kernel())?;
        let sh = self.shared_view.get(slot)?;
        silence(&sh, monotonic_ns()).map(std::time::Duration::from_nanos)
    }

    /// Whether the counters are read through a mapping (see [`Access`]).
    pub fn stats_mapped(&self) -> bool {
        self.stats.mapped()
    }

    /// How many snapshots took the kernel's figures from `/proc/diskstats`.
    pub fn diskstats_reads(&self) -> u64 {
        self.diskstats_reads
    }
}

/// With requests in flight, ns since the device last completed one or
/// became busy.
fn silence(sh: &DevShared, now_ns: u64) -> Option<u64> {
    (sh.inflight > 0).then(|| now_ns.saturating_sub(sh.last_complete_ns.max(sh.busy_since_ns)))
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

/// Which dm map each path belongs to, from sysfs (`/sys/block/dm-N/slaves`).
pub fn path_to_map() -> StdHashMap<DevNum, DevNum> {
    let mut out = StdHashMap::new();
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
