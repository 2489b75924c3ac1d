//! The per-path observer: loads the eBPF programs, keeps the watch list,
//! and takes cumulative snapshots of the per-device counters; `interval`
//! turns two snapshots into per-interval figures.
use std::{
    collections::{BTreeMap, HashMap as StdHashMap},
    sync::Arc,
    time::Instant,
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, IterableMap, MapData, PerCpuArray, PerCpuHashMap, PerCpuValues},
    programs::{BtfTracePoint, tp_btf::BtfTracePointLinkId},
    util::nr_cpus,
};
use pathpilot_common::{
    CgroupCache, CgroupKey, CgroupStats, DIR_DISCARD, DIR_FLUSH, DIR_OTHER, DIR_READ, DIR_WRITE,
    DIRS, DevShared, DevStats, MAX_SLOTS, SLOT_EMPTY, SLOT_GONE, SLOT_PROBES, Slot, slot_home,
};
use thiserror::Error;

use crate::{
    blockdev::{self, BlockDev, DevNum, KernelCounts},
    sysfs_attr::KeptFiles,
};

pub mod btf;
pub mod hist;
pub mod interval;
pub mod layout;
mod load;
mod stats;
mod view;

pub use stats::Access;

pub use interval::{DeviceInterval, MapInterval, SizeClassLatency};

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

/// The programs time-sampled observation attaches and detaches: those that
/// run on every request or bio. The others (merges, splits) run only when
/// a merge or a split happens, stay attached and count in full: each
/// switch of a program costs its tracepoint's patching in the kernel's
/// text, and at 64 paths and 1 s windows the switches of all seven were
/// most of what observing cost the daemon under steady load.
fn sampled(tracepoint: &str) -> bool {
    matches!(
        tracepoint,
        "block_rq_issue" | "block_rq_requeue" | "block_rq_complete"
    ) || tracepoint == BIO_TRACEPOINT
}

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

/// Cumulative counters of one device, summed over CPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceCounters {
    pub stats: DevStats,
    /// Requests in flight now.
    pub inflight: u64,
    /// The highest in-flight count since the previous snapshot.
    pub inflight_peak: u64,
    /// With requests in flight: how long the device has completed nothing
    /// (since its last completion, or since it became busy if later).
    pub silent_ns: Option<u64>,
    /// Completions the kernel counted that the tracepoint never reported
    /// to the probes (since the device was watched); `stats` includes them.
    pub untraced: u64,
}

impl DeviceCounters {
    pub const ZERO: Self = Self {
        stats: DevStats::ZERO,
        inflight: 0,
        inflight_peak: 0,
        silent_ns: None,
        untraced: 0,
    };
}

/// Raises the probes' per-direction counts to what the kernel counted as
/// completed since `base` (a device's sysfs `stat` when it was watched),
/// and returns by how many requests. The kernel's count is exact; the
/// probes miss a completion the tracepoint does not report, which happens
/// (a queue depth's worth at once now and then on 6.18 loop devices, with
/// no recursion miss on the program). Only a floor: where the probes count
/// more (a path's flush clones, which the kernel does not count on the
/// path; passthrough commands, which it never counts), theirs stands.
///
/// Writes are raised by their bytes: the kernel's write count also holds
/// callers' empty flushes (never sent to the device; the probes count the
/// flush request that was), so the requests behind missing bytes are
/// taken at the mean size of the writes seen.
pub fn floor_to_kernel(stats: &mut DevStats, now: &KernelCounts, base: &KernelCounts) -> u64 {
    let since = |dir: usize| {
        (
            now.ios[dir].saturating_sub(base.ios[dir]),
            now.bytes[dir].saturating_sub(base.bytes[dir]),
        )
    };
    let mut raised = 0;
    for dir in [DIR_READ, DIR_DISCARD, DIR_FLUSH] {
        let (ios, bytes) = since(dir);
        if ios > stats.ios[dir] {
            raised += ios - stats.ios[dir];
            stats.ios[dir] = ios;
        }
        stats.bytes[dir] = stats.bytes[dir].max(bytes);
    }
    let (_, bytes) = since(DIR_WRITE);
    let (seen, seen_bytes) = (stats.ios[DIR_WRITE], stats.bytes[DIR_WRITE]);
    if bytes > seen_bytes {
        // With no write seen, no size to go by: one request at least.
        let mean = seen_bytes.checked_div(seen).unwrap_or(bytes).max(1);
        let missing = (bytes - seen_bytes).div_ceil(mean);
        raised += missing;
        stats.ios[DIR_WRITE] += missing;
        stats.bytes[DIR_WRITE] = bytes;
    }
    raised
}

/// Everything the programs counted, as of one instant.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub taken: Instant,
    /// Shared with the observer's memory of the last read: a device's
    /// counters are kilobytes, and copying them (and moving them about a
    /// map's nodes) was a visible share of a snapshot at 80 devices.
    pub devices: BTreeMap<DevNum, Arc<DeviceCounters>>,
    /// (device, cgroup id) -> bios and bytes submitted; none unless bios
    /// are [`Bios::Probed`].
    pub cgroups: BTreeMap<(DevNum, u64), CgroupStats>,
    /// Where the bio figures come from.
    pub bios: Bios,
    /// `io_ticks` (ms busy) per device, for utilisation.
    pub io_ticks_ms: BTreeMap<DevNum, u64>,
    /// How long the programs were attached, for the share of an interval
    /// they saw (see [`Observer::sample`]).
    pub observed: Observed,
}

/// The programs' attached time, as of a snapshot: cumulative, on
/// CLOCK_MONOTONIC, both read at one instant (so a pair of snapshots with
/// the programs attached throughout gives exactly 100%).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    pub at_ns: u64,
    pub attached_ns: u64,
}

impl Observed {
    /// The share of the time from `prev` to `self` that the programs were
    /// attached, in percent (100 over no time at all).
    pub fn pct_since(&self, prev: &Observed) -> f64 {
        let span = self.at_ns.saturating_sub(prev.at_ns);
        if span == 0 || prev.at_ns == 0 {
            return 100.0;
        }
        let on = self.attached_ns.saturating_sub(prev.attached_ns);
        (on as f64 / span as f64 * 1000.0).round().min(1000.0) / 10.0
    }
}

/// Time-sampled observation's clock of a stalled device, from the kernel's
/// own counts (the programs, detached part of the time, cannot time a
/// silence): when its completions last moved or it was last idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StallClock {
    completed: u64,
    in_flight: u64,
    moved_ns: u64,
    read_ns: u64,
}

impl StallClock {
    /// The clock after a read at `now_ns` of the kernel's completed count
    /// and in-flight count. A completion somewhere since the last read is
    /// taken as at this one, and a silence runs only to the last read:
    /// it is never overstated (it is timed a snapshot at a time).
    fn next(prev: Option<StallClock>, completed: u64, in_flight: u64, now_ns: u64) -> Self {
        let moved_ns = match prev {
            Some(p) if in_flight > 0 && p.in_flight > 0 && p.completed == completed => p.moved_ns,
            _ => now_ns,
        };
        StallClock {
            completed,
            in_flight,
            moved_ns,
            read_ns: now_ns,
        }
    }

    fn silence(&self) -> Option<u64> {
        (self.in_flight > 0).then(|| self.read_ns.saturating_sub(self.moved_ns))
    }
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
    /// with no map or sysfs read (at 64 mostly idle paths, those reads
    /// were most of a window's work).
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

/// Devices busy at once from which the kernel's figures come from
/// `/proc/diskstats` (when it holds at most twice as many).
const DISKSTATS_MIN: usize = 8;

/// A device being read by a snapshot: its shared state, then the probes'
/// counters, read; the kernel's figures to come.
struct Reading {
    slot: u32,
    dev: DevNum,
    sh: DevShared,
    prev: Option<Last>,
    sum: DevStats,
}

/// One device as the last snapshot read it; `shared` was read before the
/// counters, so anything counted after it moves it.
#[derive(Clone)]
struct Last {
    shared: DevShared,
    counters: Arc<DeviceCounters>,
    /// The completions the probes counted, by direction (`counters` may be
    /// raised to the kernel's count): whether the device did I/O since.
    traced_ios: [u64; DIRS],
    /// Cgroup bytes in the CPUs' caches.
    cgcache: Vec<(u64, CgroupStats)>,
    io_ticks_ms: Option<u64>,
    kernel: Option<KernelCounts>,
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

/// Requests in flight in the kernel's own count (`/sys/block/X/inflight`,
/// reads and writes).
fn inflight_of(text: &str) -> u64 {
    text.split_whitespace()
        .filter_map(|v| v.parse::<u64>().ok())
        .sum()
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

    /// Time-sampled observation: the programs attached (`attached`) or
    /// detached, the caller alternating the two. A program that is not
    /// attached costs an I/O nothing, not even the tracepoint's call into
    /// it, which in an emulated guest was most of the observer's cost.
    /// While sampling, what the kernel counts itself stays exact (I/Os and
    /// bytes by direction, from its `stat`, read for every watched device
    /// at each snapshot; in flight; busy time), as do merges and splits
    /// (their programs stay attached: see [`sampled`]), and a device's
    /// silence is timed from the kernel's counts, a snapshot at a time;
    /// latency, sizes, sequentiality, bios, errors, requeues and remaps are
    /// those of the attached part (`Snapshot::observed`).
    pub fn sample(&mut self, attached: bool) -> Result<(), ObserveError> {
        if self.sampling.is_none() {
            self.sampling = Some(self.clocks_from_probes());
        }
        self.attach(attached)
    }

    /// The stall clocks sampling starts with: each device's silence as
    /// the probes, attached until now, timed it, on the kernel's counts
    /// read now. A stall under way goes on being timed from its start:
    /// the daemon starts sampling when its tuner stops measuring, which a
    /// stall itself does (it pauses the tuner).
    fn clocks_from_probes(&mut self) -> StdHashMap<u32, StallClock> {
        let now = monotonic_ns();
        let watched = self.watched();
        let kernel = self.kernel_stats(&watched);
        watched
            .into_iter()
            .filter_map(|dev| {
                let s = kernel.get(&dev).copied().flatten()?;
                let slot = self.slot_of(dev.kernel())?;
                let quiet = self.shared_view.get(slot).and_then(|sh| silence(&sh, now));
                let mut c = StallClock::next(None, s.counts.ios.iter().sum(), s.in_flight, now);
                c.moved_ns = now.saturating_sub(quiet.unwrap_or(0));
                Some((dev.kernel(), c))
            })
            .collect()
    }

    /// Ends time-sampled observation: the programs attached for good.
    pub fn observe_fully(&mut self) -> Result<(), ObserveError> {
        self.attach(true)?;
        self.sampling = None;
        Ok(())
    }

    /// Whether observation is time-sampled ([`Self::sample`]).
    pub fn sampling(&self) -> bool {
        self.sampling.is_some()
    }

    /// Whether the programs are attached now.
    pub fn attached(&self) -> bool {
        self.attached_at.is_some()
    }

    fn attach(&mut self, on: bool) -> Result<(), ObserveError> {
        if on == self.attached() {
            return Ok(());
        }
        let now = monotonic_ns();
        if on {
            // Requests issued while detached complete once attached: each
            // device's count in flight starts again from the kernel's, and
            // its clocks from its stall clock's, read now (from now if it
            // completed something in the gap: no silence is read into it;
            // a stall under way goes on from its start).
            let watched = self.watched();
            let kernel = self.kernel_stats(&watched);
            for dev in watched {
                let Some(slot) = self.slot_of(dev.kernel()) else {
                    continue;
                };
                let stat = kernel.get(&dev).copied().flatten();
                let n = stat.map_or(0, |s| s.in_flight);
                // A second reading of the stall clocks each window.
                if let Some(s) = &stat {
                    self.stall_clock(dev, s, now);
                }
                let since = self
                    .sampling
                    .as_ref()
                    .and_then(|c| c.get(&dev.kernel()))
                    .filter(|c| c.in_flight > 0)
                    .map_or(now, |c| c.moved_ns);
                for (field, v) in [
                    (std::mem::offset_of!(DevShared, inflight), n),
                    (std::mem::offset_of!(DevShared, busy_since_ns), since),
                    (std::mem::offset_of!(DevShared, last_complete_ns), since),
                ] {
                    self.shared_view.store_u64(slot, field, v);
                }
            }
        }
        for (tp, link) in self.links.iter_mut().filter(|(tp, _)| sampled(tp)) {
            let prog: &mut BtfTracePoint = self
                .ebpf
                .program_mut(tp)
                .ok_or_else(|| ObserveError::Load(format!("program {tp} missing")))?
                .try_into()
                .map_err(|e| ObserveError::Load(format!("{tp}: {e}")))?;
            match link.take() {
                Some(l) if !on => prog.detach(l).map_err(|e| {
                    ObserveError::Attach(tp.to_string(), format!("detaching: {e:#}"))
                })?,
                None if on => {
                    *link = Some(
                        prog.attach()
                            .map_err(|e| ObserveError::Attach(tp.to_string(), format!("{e:#}")))?,
                    )
                }
                l => *link = l,
            }
        }
        if on {
            self.attached_at = Some(now);
        } else if let Some(since) = self.attached_at.take() {
            self.attached_ns += now.saturating_sub(since);
        }
        Ok(())
    }

    /// While sampling, moves a device's stall clock on with a reading of
    /// its kernel figures taken at `now_ns`.
    fn stall_clock(&mut self, dev: DevNum, s: &blockdev::Stat, now_ns: u64) {
        if let Some(clocks) = self.sampling.as_mut() {
            let k = dev.kernel();
            let completed = s.counts.ios.iter().sum();
            let c = StallClock::next(clocks.get(&k).copied(), completed, s.in_flight, now_ns);
            clocks.insert(k, c);
        }
    }

    fn observed(&self, now_ns: u64) -> Observed {
        Observed {
            at_ns: now_ns,
            attached_ns: self.attached_ns
                + self.attached_at.map_or(0, |a| now_ns.saturating_sub(a)),
        }
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

    fn slot_of(&self, dev: u32) -> Option<u32> {
        let home = slot_home(dev);
        (0..SLOT_PROBES)
            .map(|i| (home + i) & (MAX_SLOTS - 1))
            .take_while(|s| self.table[*s as usize] != SLOT_EMPTY)
            .find(|s| self.table[*s as usize] == dev)
    }

    fn zeros<T: aya::Pod>(&self, v: T) -> Result<PerCpuValues<T>, ObserveError> {
        PerCpuValues::try_from(vec![v; self.ncpus])
            .map_err(|e| ObserveError::Map("per-CPU", e.to_string()))
    }

    /// Clears a slot's counters (a slot is reused by another device).
    fn reset_slot(&mut self, slot: u32) -> Result<(), ObserveError> {
        self.stats.reset(slot).map_err(map_err("STATS"))?;
        let z = self.zeros(CgroupCache::default())?;
        self.cgcache.set(slot, z, 0).map_err(map_err("CGCACHE"))?;
        Ok(())
    }

    /// Starts counting a device.
    pub fn watch(&mut self, dev: DevNum) -> Result<(), ObserveError> {
        let k = dev.kernel();
        if self.slot_of(k).is_some() {
            return Ok(());
        }
        let home = slot_home(k);
        let slot = (0..SLOT_PROBES)
            .map(|i| (home + i) & (MAX_SLOTS - 1))
            .find(|s| matches!(self.table[*s as usize], SLOT_EMPTY | SLOT_GONE))
            .ok_or(ObserveError::Full(dev, MAX_SLOTS))?;
        self.reset_slot(slot)?;
        self.forget_files(k);
        // Requests already in flight complete after this: start from the
        // kernel's own count so that the in-flight figure stays right.
        let shared = DevShared {
            inflight: self
                .sysfs_attr(dev, "inflight")
                .map_or(0, |t| inflight_of(&t)) as i64,
            ..DevShared::ZERO
        };
        self.shared
            .set(slot, shared, 0)
            .map_err(map_err("SHARED"))?;
        self.slots
            .set(slot, Slot { dev: k, _pad: 0 }, 0)
            .map_err(map_err("SLOTS"))?;
        self.table[slot as usize] = k;
        self.last.remove(&k);
        // Read once the slot is live: a completion the kernel counted
        // before the probes could see it is not one they missed. With no
        // base there is no floor (a zero one would count since boot).
        if let Some(base) = self
            .sysfs_attr(dev, "stat")
            .and_then(|s| blockdev::Stat::parse(&s))
            .map(|s| s.counts)
        {
            self.kernel_base.insert(k, base);
        }
        Ok(())
    }

    /// Stops counting a device and forgets its counters, so a removed
    /// device leaves no entries behind.
    pub fn unwatch(&mut self, dev: DevNum) -> Result<(), ObserveError> {
        let k = dev.kernel();
        let Some(slot) = self.slot_of(k) else {
            return Ok(());
        };
        // A removed entry is stepped over by lookups of devices placed
        // after it; a free one ends them.
        let next = (slot + 1) & (MAX_SLOTS - 1);
        let mark = if self.table[next as usize] == SLOT_EMPTY {
            SLOT_EMPTY
        } else {
            SLOT_GONE
        };
        self.slots
            .set(slot, Slot { dev: mark, _pad: 0 }, 0)
            .map_err(map_err("SLOTS"))?;
        self.table[slot as usize] = mark;
        self.last.remove(&k);
        self.kernel_base.remove(&k);
        if let Some(c) = self.sampling.as_mut() {
            c.remove(&k);
        }
        self.forget_files(k);
        self.reset_slot(slot)?;
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
            .table
            .iter()
            .filter(|d| !matches!(**d, SLOT_EMPTY | SLOT_GONE))
            .map(|d| DevNum::from_kernel(*d))
            .collect();
        v.sort();
        v
    }

    /// Scope::All: every device in /sys/block is watched (new ones as they
    /// appear), as far as the slots go.
    fn watch_present(&mut self) {
        let Ok(dir) = std::fs::read_dir("/sys/block") else {
            return;
        };
        for e in dir.flatten() {
            if let Some(b) = BlockDev::by_name(&e.file_name().to_string_lossy()) {
                let _ = self.watch(b.dev);
            }
        }
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

    /// A watched device's sysfs attribute, through its kept file.
    fn sysfs_attr(&mut self, dev: DevNum, attr: &'static str) -> Option<String> {
        self.sysfs_files
            .read((dev.kernel(), attr), || dev.sysfs().join(attr))
            .ok()
    }

    /// Closes a device's kept sysfs files.
    fn forget_files(&mut self, k: u32) {
        self.sysfs_files.retain(|(d, _)| *d != k);
    }

    /// A slot's counters, summed over the CPUs.
    fn read_stats(&self, slot: u32) -> Result<DevStats, ObserveError> {
        let per_cpu = self
            .stats
            .per_cpu(slot)
            .map_err(|e| ObserveError::Map("STATS", format!("slot {slot}: {e}")))?;
        let mut sum = DevStats::ZERO;
        for v in &per_cpu {
            add(&mut sum, v);
        }
        Ok(sum)
    }

    /// Whether a device being read needs the kernel's figures again.
    /// Busy time and the kernel's counts move with data I/O, not with a
    /// passthrough command (a tick one did add is read with the next data
    /// I/O); with requests in flight, the same read gives the kernel's
    /// in-flight count, for the correction in [`Self::read_device`].
    fn wants_stat(&self, r: &Reading) -> bool {
        self.sampling.is_some()
            || !matches!(&r.prev, Some(p)
            if p.io_ticks_ms.is_some()
                && r.sh.inflight == 0
                && p.traced_ios[..DIR_OTHER] == r.sum.ios[..DIR_OTHER])
    }

    /// The kernel's `stat` of each device in `want` (None: its read
    /// failed). Many at once come from `/proc/diskstats` in a few reads,
    /// unless it holds many more devices than asked for; a few come from
    /// their own kept files.
    fn kernel_stats(&mut self, want: &[DevNum]) -> StdHashMap<DevNum, Option<blockdev::Stat>> {
        let many =
            want.len() >= DISKSTATS_MIN && self.diskstats.lines.is_none_or(|l| want.len() * 2 >= l);
        if many {
            let set: std::collections::HashSet<DevNum> = want.iter().copied().collect();
            if let Ok(got) = self.diskstats.read(|d| set.contains(&d)) {
                self.diskstats_reads += 1;
                let mut m: StdHashMap<DevNum, Option<blockdev::Stat>> =
                    want.iter().map(|d| (*d, None)).collect();
                m.extend(got.into_iter().map(|(d, f)| (d, Some(f))));
                return m;
            }
        }
        want.iter()
            .map(|d| {
                let st = self.sysfs_attr(*d, "stat");
                (*d, st.as_deref().and_then(blockdev::Stat::parse))
            })
            .collect()
    }

    /// Finishes reading one device: its peak (then zeroed), the kernel's
    /// figures (`stat`: None when not read, [`Self::wants_stat`]), and
    /// what the last snapshot's read cannot stand for -- the cgroup caches
    /// after bios, the busy time after data I/O.
    fn read_device(
        &mut self,
        r: Reading,
        stat: Option<Option<blockdev::Stat>>,
        now_ns: u64,
    ) -> Result<Last, ObserveError> {
        let Reading {
            slot,
            dev,
            mut sh,
            prev,
            mut sum,
        } = r;
        let prev = prev.as_ref();
        // A count gone wrong (a completion whose issue came before the
        // probes, or one the tracepoint never reported: see
        // `floor_to_kernel`) is put right when the kernel says the device
        // is idle. (Its `stat` says so as its `inflight` does: one read of
        // a busy device each interval, where there were two.) The one
        // field is stored, so the probes' updates of the others stand.
        let corrected = sh.inflight != 0 && matches!(stat, Some(Some(s)) if s.in_flight == 0);
        if corrected {
            sh.inflight = 0;
            self.shared_view
                .store_u64(slot, std::mem::offset_of!(DevShared, inflight), 0);
        }
        let peak = sh.peak;
        if peak != 0 {
            // The next interval's peak starts from here. The one field is
            // stored, so an issue's concurrent update of the others stands.
            self.shared_view
                .store_u64(slot, std::mem::offset_of!(DevShared, peak), 0);
            sh.peak = 0;
        }
        // Cgroup bytes still in the CPUs' caches: only bios move them.
        let cgcache = match prev {
            _ if self.bios == Bios::FromRequests => vec![],
            Some(p) if p.counters.stats.bios == sum.bios => p.cgcache.clone(),
            _ => self.cgcache.get(&slot, 0).map_or_else(
                |_| vec![],
                |caches| {
                    caches
                        .iter()
                        .filter(|c| c.cgroup_id != 0 && c.bios != 0)
                        .map(|c| {
                            (
                                c.cgroup_id,
                                CgroupStats {
                                    bios: c.bios,
                                    bytes: c.bytes,
                                },
                            )
                        })
                        .collect()
                },
            ),
        };
        let (io_ticks_ms, kernel) = match (stat, prev) {
            (None, Some(p)) => (p.io_ticks_ms, p.kernel),
            (Some(Some(s)), _) => (Some(s.io_ticks_ms), Some(s.counts)),
            _ => (None, None),
        };
        // While sampling, the kernel's in-flight count (the programs' is
        // reset at each attach) and its clock of a silence.
        let mut kernel_inflight = None;
        if let (true, Some(Some(s))) = (self.sampling.is_some(), stat) {
            self.stall_clock(dev, &s, now_ns);
            kernel_inflight = Some(s.in_flight);
        }
        let base = self.kernel_base.get(&dev.kernel()).copied();
        let mut untraced = 0;
        let mut traced_ios = sum.ios;
        if let (Some(now), Some(base)) = (kernel, base) {
            // The kernel's count was read after the probes': completions in
            // between are not missed ones. Read the probes' again first.
            if floor_to_kernel(&mut sum.clone(), &now, &base) > 0 {
                sum = self.read_stats(slot)?;
                traced_ios = sum.ios;
            }
            untraced = floor_to_kernel(&mut sum, &now, &base);
        }
        Ok(Last {
            shared: sh,
            counters: Arc::new(DeviceCounters {
                stats: sum,
                inflight: kernel_inflight.unwrap_or(sh.inflight.max(0) as u64),
                inflight_peak: (peak.max(sh.inflight).max(0) as u64)
                    .max(kernel_inflight.unwrap_or(0)),
                silent_ns: match &self.sampling {
                    Some(c) => c.get(&dev.kernel()).and_then(StallClock::silence),
                    None => silence(&sh, now_ns),
                },
                untraced,
            }),
            traced_ios,
            cgcache,
            io_ticks_ms,
            kernel,
        })
    }

    /// Reads every counter once. Peaks restart from here, so each snapshot
    /// carries the peak of the interval that ends with it.
    pub fn snapshot(&mut self) -> Result<Snapshot, ObserveError> {
        if self.scope == Scope::All {
            self.watch_present();
        }
        self.snapshots += 1;
        if self.snapshots.is_multiple_of(64) && self.bios == Bios::Probed {
            self.prune_cgroups();
        }
        let taken = Instant::now();
        let now_ns = monotonic_ns();
        let mut devices = BTreeMap::new();
        let mut cgroups: BTreeMap<(DevNum, u64), CgroupStats> = BTreeMap::new();
        let mut io_ticks_ms = BTreeMap::new();
        let watched: Vec<(u32, u32)> = self
            .table
            .iter()
            .enumerate()
            .filter(|(_, d)| !matches!(**d, SLOT_EMPTY | SLOT_GONE))
            .map(|(s, d)| (s as u32, *d))
            .collect();
        // Every device's shared state, then its counters, before the
        // kernel's figures of them all: whatever the probes count after
        // these reads moves them, and the next snapshot reads them again.
        let mut read = Vec::with_capacity(watched.len());
        // A reading is kilobytes: grown a push at a time, it was copied
        // over and over.
        let mut reading = Vec::with_capacity(watched.len());
        for (slot, k) in watched {
            let dev = DevNum::from_kernel(k);
            let sh = self
                .shared_view
                .get(slot)
                .ok_or_else(|| ObserveError::Map("SHARED", format!("slot {slot} not mapped")))?;
            match self.last.remove(&k) {
                // While sampling, the programs' state stands still while
                // they are detached: every device is read.
                Some(mut l) if l.shared == sh && sh.inflight == 0 && self.sampling.is_none() => {
                    if l.counters.inflight_peak != 0 || l.counters.silent_ns.is_some() {
                        // A copy when the last snapshot still holds them.
                        let c = Arc::make_mut(&mut l.counters);
                        c.inflight_peak = 0;
                        c.silent_ns = None;
                    }
                    read.push((k, l));
                }
                prev => reading.push(Reading {
                    slot,
                    dev,
                    sh,
                    prev,
                    sum: self.read_stats(slot)?,
                }),
            }
        }
        let want: Vec<DevNum> = reading
            .iter()
            .filter(|r| self.wants_stat(r))
            .map(|r| r.dev)
            .collect();
        let mut stats = self.kernel_stats(&want);
        for r in reading {
            let k = r.dev.kernel();
            let stat = stats.remove(&r.dev);
            read.push((k, self.read_device(r, stat, now_ns)?));
        }
        let mut last = StdHashMap::with_capacity(read.len());
        for (k, l) in read {
            let dev = DevNum::from_kernel(k);
            for (id, c) in &l.cgcache {
                let e = cgroups.entry((dev, *id)).or_default();
                e.bios += c.bios;
                e.bytes += c.bytes;
            }
            if let Some(t) = l.io_ticks_ms {
                io_ticks_ms.insert(dev, t);
            }
            devices.insert(dev, l.counters.clone());
            last.insert(k, l);
        }
        self.last = last;
        // Empty unless bios are probed: no syscall to find that out.
        let probed = (self.bios == Bios::Probed).then_some(&self.cgroups);
        for item in probed.into_iter().flat_map(|c| c.iter()) {
            let (k, per_cpu) = item.map_err(map_err("CGROUPS"))?;
            let e = cgroups
                .entry((DevNum::from_kernel(k.dev), k.cgroup_id))
                .or_default();
            for v in per_cpu.iter() {
                e.bios += v.bios;
                e.bytes += v.bytes;
            }
        }
        Ok(Snapshot {
            taken,
            devices,
            cgroups,
            bios: self.bios,
            io_ticks_ms,
            observed: self.observed(now_ns),
        })
    }

    /// Whether the counters are read through a mapping (see [`Access`]).
    pub fn stats_mapped(&self) -> bool {
        self.stats.mapped()
    }

    /// How many snapshots took the kernel's figures from `/proc/diskstats`.
    pub fn diskstats_reads(&self) -> u64 {
        self.diskstats_reads
    }

    /// Entries of the CGROUPS map now.
    pub fn cgroup_entries(&self) -> usize {
        self.cgroups.keys().filter_map(Result::ok).count()
    }

    /// Forgets the cgroups that no longer exist (a cgroup v2 id is its
    /// directory's inode number): the map is an LRU bounded anyway, and
    /// this keeps it to the cgroups alive. Returns how many went.
    pub fn prune_cgroups(&mut self) -> usize {
        let Some(root) = cgroup2_root() else {
            return 0;
        };
        let mut alive = std::collections::HashSet::new();
        let mut dirs = vec![root];
        while let Some(d) = dirs.pop() {
            if let Ok(m) = std::fs::metadata(&d) {
                use std::os::unix::fs::MetadataExt;
                alive.insert(m.ino());
            }
            if let Ok(rd) = std::fs::read_dir(&d) {
                dirs.extend(
                    rd.flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
        let gone: Vec<CgroupKey> = self
            .cgroups
            .keys()
            .filter_map(Result::ok)
            .filter(|k| !alive.contains(&k.cgroup_id))
            .collect();
        for k in &gone {
            let _ = self.cgroups.remove(k);
        }
        gone.len()
    }
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup`, or
/// `/sys/fs/cgroup/unified` on a hybrid system).
pub fn cgroup2_root() -> Option<std::path::PathBuf> {
    let m = std::fs::read_to_string("/proc/mounts").ok()?;
    m.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(2) == Some(&"cgroup2"))
        .and_then(|f| f.get(1).map(std::path::PathBuf::from))
}

/// With requests in flight, ns since the device last completed one or
/// became busy.
fn silence(sh: &DevShared, now_ns: u64) -> Option<u64> {
    (sh.inflight > 0).then(|| now_ns.saturating_sub(sh.last_complete_ns.max(sh.busy_since_ns)))
}

fn add(sum: &mut DevStats, v: &DevStats) {
    for i in 0..sum.ios.len() {
        sum.ios[i] += v.ios[i];
        sum.bytes[i] += v.bytes[i];
    }
    sum.completed += v.completed;
    sum.errors += v.errors;
    sum.requeues += v.requeues;
    sum.rq_merges += v.rq_merges;
    sum.bio_backmerges += v.bio_backmerges;
    sum.bio_frontmerges += v.bio_frontmerges;
    sum.splits += v.splits;
    sum.bios += v.bios;
    sum.bio_bytes += v.bio_bytes;
    sum.sequential += v.sequential;
    sum.random += v.random;
    sum.bio_sequential += v.bio_sequential;
    sum.bio_random += v.bio_random;
    sum.remapped += v.remapped;
    sum.lat_samples += v.lat_samples;
    sum.lat_sum_ns += v.lat_sum_ns;
    for (a, b) in sum.size_hist.iter_mut().zip(v.size_hist.iter()) {
        *a += b;
    }
    for (a, b) in sum.lat_hist.iter_mut().zip(v.lat_hist.iter()) {
        *a += b;
    }
    for (ra, rb) in sum.lat_by_size.iter_mut().zip(v.lat_by_size.iter()) {
        for (a, b) in ra.iter_mut().zip(rb.iter()) {
            *a += b;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(reads: u64, writes: u64, flushes: u64) -> KernelCounts {
        let mut k = KernelCounts::default();
        k.ios[DIR_READ] = reads;
        k.bytes[DIR_READ] = reads * 4096;
        k.ios[DIR_WRITE] = writes;
        k.bytes[DIR_WRITE] = writes * 4096;
        k.ios[DIR_FLUSH] = flushes;
        k
    }

    #[test]
    fn a_stall_is_timed_from_the_last_read_that_saw_the_kernel_complete_or_idle() {
        let s = |c: Option<StallClock>, done, inflight, at| StallClock::next(c, done, inflight, at);
        let c = s(None, 100, 4, 1_000);
        assert_eq!(c.silence(), Some(0), "a first read starts the clock");
        let c = s(Some(c), 100, 4, 2_000);
        assert_eq!(c.silence(), Some(1_000), "nothing completed since 1000");
        let c = s(Some(c), 100, 4, 3_000);
        assert_eq!(c.silence(), Some(2_000));
        let c = s(Some(c), 101, 4, 4_000);
        assert_eq!(c.silence(), Some(0), "a completion restarts it");
        let c = s(Some(c), 101, 0, 5_000);
        assert_eq!(c.silence(), None, "idle is not silent");
        let c = s(Some(c), 101, 2, 7_000);
        assert_eq!(c.silence(), Some(0), "busy again: from this read");
        let c = s(Some(c), 101, 2, 8_000);
        assert_eq!(c.silence(), Some(1_000));
    }

    #[test]
    fn the_observed_share_is_the_attached_time_over_the_span() {
        let a = Observed {
            at_ns: 10_000,
            attached_ns: 10_000,
        };
        let b = Observed {
            at_ns: 20_000,
            attached_ns: 12_500,
        };
        assert_eq!(b.pct_since(&a), 25.0);
        assert_eq!(a.pct_since(&a), 100.0);
        assert_eq!(b.pct_since(&Observed::default()), 100.0);
    }

    #[test]
    fn counts_are_raised_to_the_kernels_since_the_watch_and_never_lowered() {
        let base = kernel(1000, 50, 7);
        let mut s = DevStats::ZERO;
        s.ios[DIR_READ] = 3999;
        s.bytes[DIR_READ] = 3999 * 4096;
        s.ios[DIR_WRITE] = 500;
        s.bytes[DIR_WRITE] = 500 * 4096;
        // A path's flush clones: the kernel does not count them there.
        s.ios[DIR_FLUSH] = 41;
        s.ios[DIR_OTHER] = 12;
        // The kernel's writes hold 300 empty flushes of callers: no bytes.
        let mut now = kernel(5000, 550, 7);
        now.ios[DIR_WRITE] += 300;
        let raised = floor_to_kernel(&mut s, &now, &base);
        assert_eq!(raised, 1, "one read the tracepoint did not report");
        assert_eq!((s.ios[DIR_READ], s.bytes[DIR_READ]), (4000, 4000 * 4096));
        assert_eq!((s.ios[DIR_WRITE], s.bytes[DIR_WRITE]), (500, 500 * 4096));
        assert_eq!((s.ios[DIR_FLUSH], s.ios[DIR_OTHER]), (41, 12));
        // A write not reported: its bytes are missing, at the writes' size.
        s.ios[DIR_WRITE] = 499;
        s.bytes[DIR_WRITE] = 499 * 4096;
        assert_eq!(floor_to_kernel(&mut s, &now, &base), 1);
        assert_eq!((s.ios[DIR_WRITE], s.bytes[DIR_WRITE]), (500, 500 * 4096));
        // A kernel count that went back (a new device under the old
        // number) raises nothing.
        let mut t = DevStats::ZERO;
        assert_eq!(floor_to_kernel(&mut t, &kernel(10, 0, 0), &base), 0);
        assert_eq!(t, DevStats::ZERO);
    }
}
