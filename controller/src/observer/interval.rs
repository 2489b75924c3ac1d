//! Per-interval figures from two cumulative snapshots: what `pathpilot stat`
//! prints and what the tuner reads. Counts are per interval, never since start.
use std::collections::BTreeMap;

use pathpilot_common::{
    DIR_DISCARD, DIR_FLUSH, DIR_OTHER, DIR_READ, DIR_WRITE, LAT_BUCKETS, LAT_CLASS_LOG2_MIN,
    SIZE_CLASSES,
};
use serde::Serialize;

use super::{Bios, DeviceCounters, Snapshot, hist};
use crate::blockdev::DevNum;

/// One device over one interval. Field names are the `--json` schema.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DeviceInterval {
    pub device: String,
    pub dev: String,
    /// The dm map this device is a path of, when it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map: Option<String>,
    pub interval_s: f64,
    pub read_ios: u64,
    pub write_ios: u64,
    pub flush_ios: u64,
    pub discard_ios: u64,
    /// Requests with no block operation (SCSI passthrough such as TEST UNIT
    /// READY), counted apart from data and flushes.
    pub other_ios: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub discard_bytes: u64,
    pub iops: f64,
    pub read_mib_s: f64,
    pub write_mib_s: f64,
    /// bios merged into a request (back + front) plus request merges.
    pub merges: u64,
    /// Share of submitted bios that were merged into another request.
    pub merge_pct: f64,
    /// Bios submitted: counted by a probe on each, or (`stat
    /// --no-bio-probe`, the daemon's `bio_probe = false`) as the requests
    /// made plus the bios merged into them less the splits.
    pub bios: u64,
    /// Bytes of those bios: what the workload asked for (without the bio
    /// probe, those of the data requests completed).
    pub bio_bytes: u64,
    /// Bios split at the device's limits (max_sectors_kb, segments).
    pub splits: u64,
    /// Mean size of data requests (read, write, discard), in bytes.
    pub avg_request_bytes: f64,
    /// Data requests by size: bucket lower bound in bytes -> count.
    pub size_hist: BTreeMap<u64, u64>,
    /// Completions the probes saw (the figures by direction above may
    /// include `untraced_ios` more).
    pub completed: u64,
    /// Completions the kernel counted that its tracepoint never reported:
    /// the direction figures are raised to the kernel's count; sizes,
    /// latency and the rest cover what the probes saw.
    pub untraced_ios: u64,
    /// Latency samples (completions matched to their issue).
    pub lat_samples: u64,
    /// Issue-to-complete latency by bucket: lower bound in ns -> count.
    pub lat_hist: BTreeMap<u64, u64>,
    pub lat_mean_us: Option<f64>,
    pub lat_p50_us: Option<f64>,
    pub lat_p90_us: Option<f64>,
    pub lat_p99_us: Option<f64>,
    /// Latency by request size class (only the classes with samples): a
    /// path's speed is comparable only within a class.
    pub lat_by_size: Vec<SizeClassLatency>,
    pub inflight: u64,
    pub inflight_max: u64,
    pub sequential_ios: u64,
    pub random_ios: u64,
    /// Bios submitted where the previous bio ended, and the others (before
    /// merging and splitting; the workload's own pattern). Both 0 without
    /// the bio probe.
    pub sequential_bios: u64,
    pub random_bios: u64,
    pub errors: u64,
    pub requeues: u64,
    /// Requests a dm map cloned onto this device.
    pub remapped: u64,
    /// Time with I/O in flight as a share of the interval (sysfs io_ticks).
    pub util_pct: Option<f64>,
    /// The share of the interval the programs were attached: 100 unless
    /// observation is time-sampled (the daemon's `observe_duty`). The
    /// counts by direction, bytes, rates, in-flight and busy figures are
    /// the kernel's, and merges and splits the programs' that stay
    /// attached, exact whatever this is; sizes, latency, sequentiality,
    /// errors, requeues and remaps cover this share.
    pub observed_pct: f64,
}

/// One request size class's latency over an interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SizeClassLatency {
    /// `<16k`, `16k-64k`, `64k-256k`, `>=256k`.
    pub class: &'static str,
    pub samples: u64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    /// The class's latencies by bucket, as `DeviceInterval::lat_hist`
    /// (lower bound in ns -> count): the daemon adds them up for its
    /// metrics. Not in `stat --json`.
    #[serde(skip)]
    pub hist: BTreeMap<u64, u64>,
}

/// The names of the size classes (`pathpilot_common::SIZE_CLASS_BOUNDS`).
pub const SIZE_CLASS_NAMES: [&str; SIZE_CLASSES] = ["<16k", "16k-64k", "64k-256k", ">=256k"];

fn d(a: u64, b: u64) -> u64 {
    a.saturating_sub(b)
}

/// Busy time over the interval, % (iostat's %util).
fn util(dev: DevNum, prev: &Snapshot, cur: &Snapshot, secs: f64) -> Option<f64> {
    match (cur.io_ticks_ms.get(&dev), prev.io_ticks_ms.get(&dev)) {
        (Some(a), Some(b)) if secs > 0.0 => Some(round(
            (d(*a, *b) as f64 / (secs * 1000.0) * 100.0).min(100.0),
            1,
        )),
        _ => None,
    }
}

fn nonzero_buckets(h: &[u64], low: impl Fn(usize) -> u64) -> BTreeMap<u64, u64> {
    h.iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(k, c)| (low(k), *c))
        .collect()
}

fn round(x: f64, places: i32) -> f64 {
    let m = 10f64.powi(places);
    (x * m).round() / m
}

impl DeviceInterval {
    /// The figures of `dev` between `prev` and `cur`. A device absent from
    /// `prev` (first seen in this interval) counts from zero.
    pub fn between(
        dev: DevNum,
        name: &str,
        map: Option<String>,
        prev: &Snapshot,
        cur: &Snapshot,
    ) -> Option<Self> {
        let c = cur.devices.get(&dev)?;
        Some(Self::from_counters(dev, name, map, prev, cur, c))
    }

    fn from_counters(
        dev: DevNum,
        name: &str,
        map: Option<String>,
        prev: &Snapshot,
        cur: &Snapshot,
        c: &DeviceCounters,
    ) -> Self {
        let zero = DeviceCounters::ZERO;
        let p = prev.devices.get(&dev).map_or(&zero, |c| &**c);
        if c.stats == p.stats {
            // Nothing counted (most paths of an idle host): every figure is
            // zero, with no histogram to take apart.
            let secs = cur.taken.duration_since(prev.taken).as_secs_f64();
            return Self {
                device: name.to_string(),
                dev: dev.to_string(),
                map,
                interval_s: round(secs, 3),
                inflight: c.inflight,
                inflight_max: c.inflight_peak,
                util_pct: util(dev, prev, cur, secs),
                observed_pct: cur.observed.pct_since(&prev.observed),
                ..Self::default()
            };
        }
        Self::counted(dev, name, map, prev, cur, c, p)
    }

    fn counted(
        dev: DevNum,
        name: &str,
        map: Option<String>,
        prev: &Snapshot,
        cur: &Snapshot,
        c: &DeviceCounters,
        p: &DeviceCounters,
    ) -> Self {
        let secs = cur.taken.duration_since(prev.taken).as_secs_f64();
        let (cs, ps) = (&c.stats, &p.stats);
        let ios = |i: usize| d(cs.ios[i], ps.ios[i]);
        let bytes = |i: usize| d(cs.bytes[i], ps.bytes[i]);
        let data_ios = ios(DIR_READ) + ios(DIR_WRITE) + ios(DIR_DISCARD);
        let data_bytes = bytes(DIR_READ) + bytes(DIR_WRITE) + bytes(DIR_DISCARD);
        let bio_merges =
            d(cs.bio_backmerges, ps.bio_backmerges) + d(cs.bio_frontmerges, ps.bio_frontmerges);
        let splits = d(cs.splits, ps.splits);
        let observed_pct = cur.observed.pct_since(&prev.observed);
        // Each bio submitted became a request or merged into one, less one
        // per split (which makes a bio two). Merges and splits are counted
        // in full even while sampled (their programs stay attached), and
        // requests by the kernel: bios from them are exact.
        let (mut bios, mut bio_bytes) = match cur.bios {
            Bios::Probed => (d(cs.bios, ps.bios), d(cs.bio_bytes, ps.bio_bytes)),
            Bios::FromRequests => ((data_ios + bio_merges).saturating_sub(splits), data_bytes),
        };
        let seen_requests = d(cs.sequential, ps.sequential) + d(cs.random, ps.random);
        if observed_pct < 100.0 && seen_requests > 0 && cur.bios == Bios::Probed {
            // Sampled, the bio probe sees the attached part only: its bios
            // per request there, over the kernel's exact count of requests,
            // so that a bio's size (the tuner's class and shape) reads as
            // in full observation.
            let scale = data_ios as f64 / seen_requests as f64;
            bio_bytes = (bio_bytes as f64 * scale).round() as u64;
            bios = (bios as f64 * scale).round() as u64;
        }
        let size = hist::delta(&cs.size_hist, &ps.size_hist);
        let lat = hist::delta(&cs.lat_hist, &ps.lat_hist);
        let lat_samples = hist::total(&lat);
        let lat_sum = d(cs.lat_sum_ns, ps.lat_sum_ns);
        let us = |ns: Option<f64>| ns.map(|v| round(v / 1000.0, 1));
        let per_s = |x: f64| if secs > 0.0 { x / secs } else { 0.0 };
        let util = util(dev, prev, cur, secs);
        Self {
            device: name.to_string(),
            dev: dev.to_string(),
            map,
            interval_s: round(secs, 3),
            read_ios: ios(DIR_READ),
            write_ios: ios(DIR_WRITE),
            flush_ios: ios(DIR_FLUSH),
            discard_ios: ios(DIR_DISCARD),
            other_ios: ios(DIR_OTHER),
            read_bytes: bytes(DIR_READ),
            write_bytes: bytes(DIR_WRITE),
            discard_bytes: bytes(DIR_DISCARD),
            iops: round(
                per_s((data_ios + ios(DIR_FLUSH) + ios(DIR_OTHER)) as f64),
                1,
            ),
            read_mib_s: round(per_s(bytes(DIR_READ) as f64) / 1048576.0, 3),
            write_mib_s: round(per_s(bytes(DIR_WRITE) as f64) / 1048576.0, 3),
            merges: bio_merges + d(cs.rq_merges, ps.rq_merges),
            merge_pct: if bios > 0 {
                round(bio_merges as f64 / bios as f64 * 100.0, 1)
            } else {
                0.0
            },
            bios,
            bio_bytes,
            splits,
            avg_request_bytes: if data_ios > 0 {
                round(data_bytes as f64 / data_ios as f64, 1)
            } else {
                0.0
            },
            size_hist: nonzero_buckets(&size, hist::bucket_low),
            completed: d(cs.completed, ps.completed),
            untraced_ios: d(c.untraced, p.untraced),
            lat_samples,
            lat_hist: nonzero_buckets(&lat, hist::bucket_low),
            lat_mean_us: (lat_samples > 0)
                .then(|| round(lat_sum as f64 / lat_samples as f64 / 1000.0, 1)),
            lat_p50_us: us(hist::quantile(&lat, 0.50)),
            lat_p90_us: us(hist::quantile(&lat, 0.90)),
            lat_p99_us: us(hist::quantile(&lat, 0.99)),
            lat_by_size: (0..SIZE_CLASSES)
                .filter_map(|k| {
                    // Shifted into the overall histogram's buckets, whose
                    // quantiles know their bounds.
                    let mut h = [0u64; LAT_BUCKETS];
                    for (b, (c, p)) in cs.lat_by_size[k]
                        .iter()
                        .zip(ps.lat_by_size[k].iter())
                        .enumerate()
                    {
                        h[(b + LAT_CLASS_LOG2_MIN).min(LAT_BUCKETS - 1)] += d(*c, *p);
                    }
                    let samples = hist::total(&h);
                    (samples > 0).then(|| SizeClassLatency {
                        class: SIZE_CLASS_NAMES[k],
                        samples,
                        p50_us: us(hist::quantile(&h, 0.50)),
                        p99_us: us(hist::quantile(&h, 0.99)),
                        hist: nonzero_buckets(&h, hist::bucket_low),
                    })
                })
                .collect(),
            inflight: c.inflight,
            inflight_max: c.inflight_peak,
            sequential_ios: d(cs.sequential, ps.sequential),
            random_ios: d(cs.random, ps.random),
            sequential_bios: d(cs.bio_sequential, ps.bio_sequential),
            random_bios: d(cs.bio_random, ps.bio_random),
            errors: d(cs.errors, ps.errors),
            requeues: d(cs.requeues, ps.requeues),
            remapped: d(cs.remapped, ps.remapped),
            util_pct: util,
            observed_pct,
        }
    }

    /// As [`between`](Self::between), but a device with no counters yet
    /// (watched, quiet so far) gets an all-zero row instead of none.
    pub fn between_or_idle(
        dev: DevNum,
        name: &str,
        map: Option<String>,
        prev: &Snapshot,
        cur: &Snapshot,
    ) -> Self {
        let zero = DeviceCounters::ZERO;
        let counters = cur.devices.get(&dev).map_or(&zero, |c| &**c);
        Self::from_counters(dev, name, map, prev, cur, counters)
    }

    /// Whether anything happened on the device in this interval.
    pub fn active(&self) -> bool {
        self.read_ios
            + self.write_ios
            + self.flush_ios
            + self.discard_ios
            + self.bios
            + self.completed
            > 0
    }
}

/// A dm map's paths summed: how the map's load spread over its paths.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MapInterval {
    pub map: String,
    pub dev: String,
    pub paths: Vec<String>,
    pub read_ios: u64,
    pub write_ios: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub iops: f64,
    pub mib_s: f64,
    pub errors: u64,
    /// Each path's share of the map's bytes, in path order.
    pub path_share_pct: Vec<f64>,
}

impl MapInterval {
    pub fn sum(map: &str, dev: DevNum, paths: &[&DeviceInterval]) -> Self {
        Self {
            map: map.to_string(),
            dev: dev.to_string(),
            paths: paths.iter().map(|p| p.device.clone()).collect(),
            read_ios: paths.iter().map(|p| p.read_ios).sum(),
            write_ios: paths.iter().map(|p| p.write_ios).sum(),
            read_bytes: paths.iter().map(|p| p.read_bytes).sum(),
            write_bytes: paths.iter().map(|p| p.write_bytes).sum(),
            iops: round(paths.iter().map(|p| p.iops).sum(), 1),
            mib_s: round(paths.iter().map(|p| p.read_mib_s + p.write_mib_s).sum(), 3),
            errors: paths.iter().map(|p| p.errors).sum(),
            path_share_pct: byte_shares(paths.iter().copied())
                .into_iter()
                .map(|s| round(s, 1))
                .collect(),
        }
    }
}

/// Each device's share of the bytes the devices moved in the interval,
/// percent, in their order (0 each when none moved any): a path's share of
/// its map's load.
pub fn byte_shares<'a>(devices: impl IntoIterator<Item = &'a DeviceInterval>) -> Vec<f64> {
    let bytes: Vec<u64> = devices
        .into_iter()
        .map(|d| d.read_bytes + d.write_bytes)
        .collect();
    let total: u64 = bytes.iter().sum();
    bytes
        .iter()
        .map(|b| {
            if total == 0 {
                0.0
            } else {
                *b as f64 / total as f64 * 100.0
            }
        })
        .collect()
}

/// Bytes submitted to `devs` per cgroup between two snapshots: (cgroup id,
/// bytes), by id, the cgroups that submitted nothing left out.
pub fn cgroup_bytes(prev: &Snapshot, cur: &Snapshot, devs: &[DevNum]) -> Vec<(u64, u64)> {
    let mut by: BTreeMap<u64, u64> = BTreeMap::new();
    for ((d, id), s) in &cur.cgroups {
        if devs.contains(d) {
            let before = prev.cgroups.get(&(*d, *id)).map_or(0, |p| p.bytes);
            *by.entry(*id).or_default() += s.bytes.saturating_sub(before);
        }
    }
    by.into_iter().filter(|(_, b)| *b > 0).collect()
}

/// Each cgroup's share of `bytes` ([`cgroup_bytes`]), percent, largest
/// first.
pub fn cgroup_shares(bytes: &[(u64, u64)]) -> Vec<(u64, f64)> {
    let total: u64 = bytes.iter().map(|(_, b)| *b).sum();
    if total == 0 {
        return vec![];
    }
    let mut v: Vec<(u64, f64)> = bytes
        .iter()
        .filter(|(_, b)| *b > 0)
        .map(|(id, b)| (*id, *b as f64 / total as f64 * 100.0))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use pathpilot_common::{CgroupStats, DevStats};

    use super::*;

    fn snap(at: Instant, dev: DevNum, s: DevStats, peak: u64) -> Snapshot {
        Snapshot {
            taken: at,
            devices: [(
                dev,
                std::sync::Arc::new(DeviceCounters {
                    stats: s,
                    inflight: 1,
                    inflight_peak: peak,
                    silent_ns: None,
                    untraced: 0,
                }),
            )]
            .into(),
            cgroups: Default::default(),
            bios: Bios::Probed,
            io_ticks_ms: [(dev, 1000)].into(),
            observed: Default::default(),
        }
    }

    /// `n` requests completed in `dir`, of 2^`size_log2` bytes, each in
    /// latency bucket `lat_bucket`.
    fn done(dir: usize, n: u64, size_log2: usize, lat_bucket: usize) -> DevStats {
        let mut s = DevStats::ZERO;
        s.ios[dir] = n;
        s.bytes[dir] = n << size_log2;
        s.size_hist[size_log2] = n;
        s.lat_hist[lat_bucket] = n;
        s.completed = n;
        s
    }

    #[test]
    fn interval_is_the_difference() {
        let dev = DevNum::new(7, 0);
        let t0 = Instant::now();
        let a = done(DIR_WRITE, 10, 16, 20);
        let mut b = a;
        b.ios[DIR_WRITE] = 110;
        b.bytes[DIR_WRITE] = 110 * 65536;
        b.size_hist[16] = 110;
        b.lat_hist[20] = 60;
        b.lat_hist[21] = 50;
        b.completed = 110;
        // 64 KiB requests, as the overall histogram: 1-2 ms and 2-4 ms.
        b.lat_by_size[2][10] = 50;
        b.lat_by_size[2][11] = 50;
        b.bios = 200;
        b.bio_backmerges = 100;
        b.sequential = 99;
        b.random = 1;
        let mut p = snap(t0, dev, a, 3);
        let mut c = snap(t0 + Duration::from_secs(2), dev, b, 4);
        p.io_ticks_ms.insert(dev, 1000);
        c.io_ticks_ms.insert(dev, 2000);
        let i = DeviceInterval::between(dev, "loop0", None, &p, &c).unwrap();
        assert_eq!(i.write_ios, 100);
        assert_eq!(i.write_bytes, 6_553_600);
        assert_eq!(i.size_hist, [(65536, 100)].into());
        assert_eq!(i.avg_request_bytes, 65536.0);
        assert_eq!(i.iops, 50.0);
        assert_eq!(i.lat_samples, 100);
        assert_eq!(i.completed, 100);
        assert_eq!(i.merges, 100);
        assert_eq!(i.merge_pct, 50.0);
        assert_eq!(i.util_pct, Some(50.0));
        assert_eq!(i.inflight_max, 4);
        assert_eq!((i.sequential_ios, i.random_ios), (99, 1));
        let (p50, p99) = (i.lat_p50_us.unwrap(), i.lat_p99_us.unwrap());
        assert!(p50 <= i.lat_p90_us.unwrap() && i.lat_p90_us.unwrap() <= p99);
        assert!((1048.5..=2097.2).contains(&p50), "{p50}");
        assert_eq!(i.lat_by_size.len(), 1);
        assert_eq!(i.lat_by_size[0].class, "64k-256k");
        assert_eq!(i.lat_by_size[0].samples, 100);
        assert_eq!(i.lat_by_size[0].p50_us, Some(p50));
        assert!(i.active());
    }

    #[test]
    fn without_the_bio_probe_bios_are_the_requests_and_merges_less_the_splits() {
        let dev = DevNum::new(7, 0);
        let t0 = Instant::now();
        let a = DevStats::ZERO;
        // 10 bios of 1 MiB, each split into 8 requests of 128 KiB, then 4
        // of 4 KiB merged into a fifth: 80 + 1 requests, 3 merges, 70 splits.
        let mut b = done(DIR_WRITE, 81, 17, 20);
        b.bytes[DIR_WRITE] = (10 << 20) + 4 * 4096;
        b.bio_backmerges = 3;
        b.splits = 70;
        let mut p = snap(t0, dev, a, 0);
        let mut c = snap(t0 + Duration::from_secs(1), dev, b, 1);
        (p.bios, c.bios) = (Bios::FromRequests, Bios::FromRequests);
        let i = DeviceInterval::between(dev, "loop0", None, &p, &c).unwrap();
        assert_eq!((i.bios, i.splits), (14, 70));
        assert_eq!(i.bio_bytes, (10 << 20) + 4 * 4096);
        assert_eq!((i.sequential_bios, i.random_bios), (0, 0));
        // Probed, the probe's own counts stand.
        (p.bios, c.bios) = (Bios::Probed, Bios::Probed);
        let i = DeviceInterval::between(dev, "loop0", None, &p, &c).unwrap();
        assert_eq!((i.bios, i.bio_bytes, i.splits), (0, 0, 70));
    }

    #[test]
    fn a_quiet_interval_is_what_counting_it_gives() {
        let dev = DevNum::new(8, 16);
        let t0 = Instant::now();
        let mut s = done(DIR_READ, 7, 12, 17);
        s.lat_by_size[0][7] = 7;
        let p = snap(t0, dev, s, 2);
        let mut c = snap(t0 + Duration::from_millis(1500), dev, s, 3);
        // A passthrough command's tick moves the busy time alone.
        c.io_ticks_ms.insert(dev, 1015);
        let quiet = DeviceInterval::between(dev, "sdb", Some("mpatha".into()), &p, &c).unwrap();
        let counted = DeviceInterval::counted(
            dev,
            "sdb",
            Some("mpatha".into()),
            &p,
            &c,
            &c.devices[&dev],
            &p.devices[&dev],
        );
        assert_eq!(quiet, counted);
        assert_eq!(
            (quiet.interval_s, quiet.inflight_max, quiet.util_pct),
            (1.5, 3, Some(1.0))
        );
        assert!(!quiet.active());
    }

    #[test]
    fn a_sampled_interval_says_what_share_it_saw_and_scales_probed_bios_by_it() {
        let dev = DevNum::new(8, 0);
        let t0 = Instant::now();
        let mut p = snap(t0, dev, DevStats::ZERO, 0);
        p.bios = Bios::FromRequests;
        p.observed = super::super::Observed {
            at_ns: 1_000_000_000,
            attached_ns: 5_000_000,
        };
        // The kernel's 1000 reads, of which the programs, attached a
        // quarter of the second, saw 250 issued; 50 bios merged, counted
        // in full (the merge programs stay attached).
        let mut s = DevStats::ZERO;
        s.ios[DIR_READ] = 1000;
        s.bytes[DIR_READ] = 1000 * 4096;
        s.random = 250;
        s.bio_backmerges = 50;
        let mut c = snap(t0 + Duration::from_secs(1), dev, s, 0);
        c.bios = Bios::FromRequests;
        c.observed = super::super::Observed {
            at_ns: 2_000_000_000,
            attached_ns: 255_000_000,
        };
        let i = DeviceInterval::between(dev, "sda", None, &p, &c).unwrap();
        assert_eq!((i.observed_pct, i.read_ios), (25.0, 1000));
        // Bios from the kernel's requests and the full merge count: 1050,
        // 50 of them merged, whatever share the issue program saw.
        assert_eq!((i.bios, i.bio_bytes), (1050, 1000 * 4096));
        assert_eq!(i.merge_pct, 4.8);
        // Split bios (512 KiB cut in four): the kernel's 400 requests, 300
        // splits: 100 bios of 512 KiB.
        let mut split = s;
        split.ios[DIR_READ] = 400;
        split.bytes[DIR_READ] = 400 << 17;
        (split.random, split.bio_backmerges, split.splits) = (100, 0, 300);
        let mut cs = snap(t0 + Duration::from_secs(1), dev, split, 0);
        (cs.bios, cs.observed) = (Bios::FromRequests, c.observed);
        let i = DeviceInterval::between(dev, "sda", None, &p, &cs).unwrap();
        assert_eq!((i.bios, i.bio_bytes / i.bios), (100, 512 << 10));
        // With the bio probe, attached as the issue program is: the 25 bios
        // it saw per 100 requests seen, over the kernel's 400.
        let mut probed = split;
        (probed.bios, probed.bio_bytes) = (25, 25 << 19);
        let mut cp = snap(t0 + Duration::from_secs(1), dev, probed, 0);
        cp.observed = c.observed;
        p.bios = Bios::Probed;
        let i = DeviceInterval::between(dev, "sda", None, &p, &cp).unwrap();
        assert_eq!((i.bios, i.bio_bytes), (100, 100 << 19));
        // Attached throughout: all of it, the merges as sampled.
        c.observed.attached_ns = 1_005_000_000;
        let i = DeviceInterval::between(dev, "sda", None, &p, &c).unwrap();
        assert_eq!((i.observed_pct, i.merge_pct), (100.0, 4.8));
        let quiet = DeviceInterval::between(dev, "sda", None, &c, &c).unwrap();
        assert_eq!(quiet.observed_pct, 100.0);
    }

    #[test]
    fn a_new_device_counts_from_zero() {
        let dev = DevNum::new(8, 0);
        let t0 = Instant::now();
        let mut s = DevStats::ZERO;
        s.ios[DIR_READ] = 5;
        let empty = Snapshot {
            taken: t0,
            devices: Default::default(),
            cgroups: Default::default(),
            bios: Bios::Probed,
            io_ticks_ms: Default::default(),
            observed: Default::default(),
        };
        let c = snap(t0 + Duration::from_secs(1), dev, s, 1);
        let i = DeviceInterval::between(dev, "sda", None, &empty, &c).unwrap();
        assert_eq!(i.read_ios, 5);
        assert_eq!(i.util_pct, None);
        assert!(DeviceInterval::between(DevNum::new(1, 1), "x", None, &empty, &c).is_none());
    }

    #[test]
    fn map_sums_and_shares() {
        let dev = DevNum::new(8, 0);
        let t0 = Instant::now();
        let mk = |r: u64| {
            let mut s = DevStats::ZERO;
            s.ios[DIR_READ] = r;
            s.bytes[DIR_READ] = r * 4096;
            snap(t0 + Duration::from_secs(1), dev, s, 0)
        };
        let p = snap(t0, dev, DevStats::ZERO, 0);
        let a = DeviceInterval::between(dev, "sda", None, &p, &mk(30)).unwrap();
        let b = DeviceInterval::between(dev, "sdb", None, &p, &mk(10)).unwrap();
        let m = MapInterval::sum("mpatha", DevNum::new(254, 0), &[&a, &b]);
        assert_eq!(m.read_ios, 40);
        assert_eq!(m.path_share_pct, vec![75.0, 25.0]);
        assert_eq!(m.paths, vec!["sda", "sdb"]);
    }

    #[test]
    fn cgroup_bytes_and_shares_are_of_the_devices_named() {
        let (a, b) = (DevNum::new(8, 0), DevNum::new(8, 16));
        let t0 = Instant::now();
        let stats = |bytes| CgroupStats { bios: 1, bytes };
        let mut p = snap(t0, a, DevStats::ZERO, 0);
        p.cgroups = [((a, 1), stats(100))].into();
        let mut c = snap(t0 + Duration::from_secs(1), a, DevStats::ZERO, 0);
        c.cgroups = [
            ((a, 1), stats(400)),
            ((a, 2), stats(100)),
            ((a, 3), stats(0)),
            ((b, 1), stats(500)),
        ]
        .into();
        let on_a = cgroup_bytes(&p, &c, &[a]);
        assert_eq!(on_a, vec![(1, 300), (2, 100)]);
        assert_eq!(cgroup_bytes(&p, &c, &[a, b]), vec![(1, 800), (2, 100)]);
        assert_eq!(cgroup_shares(&on_a), vec![(1, 75.0), (2, 25.0)]);
        assert!(cgroup_shares(&[]).is_empty());
    }
}
