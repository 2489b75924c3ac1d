//! Snapshots: every watched device's counters, read at one instant and
//! floored to the kernel's own counts.
use std::{
    collections::{BTreeMap, HashMap as StdHashMap},
    sync::Arc,
    time::Instant,
};

use pathpilot_common::{
    CgroupStats, DIR_DISCARD, DIR_FLUSH, DIR_OTHER, DIR_READ, DIR_WRITE, DIRS, DevShared, DevStats,
    SLOT_EMPTY, SLOT_GONE,
};

use super::{
    Bios, ObserveError, Observed, Observer, Scope, StallClock, map_err, monotonic_ns, silence,
};
use crate::blockdev::{self, DevNum, KernelCounts};

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
/// (a queue depth's worth at once now and then, with no recursion miss on
/// the program). Only a floor: where the probes count
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
    /// counters are kilobytes, too many to copy (and move about a map's
    /// nodes) for every device at every snapshot.
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
pub(super) struct Last {
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

impl Observer {
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
    pub(super) fn kernel_stats(
        &mut self,
        want: &[DevNum],
    ) -> StdHashMap<DevNum, Option<blockdev::Stat>> {
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
        // A reading is kilobytes: sized once, not copied as it grows.
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
