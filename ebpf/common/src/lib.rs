//! The `#[repr(C)]` types that cross the kernel/userspace boundary.
//!
//! The eBPF programs (`pathpilot-ebpf`) write these into BPF maps and the
//! collector in `controller/` reads them back, so both sides must agree on the
//! exact layout: everything here is plain old data with explicit widths.
#![no_std]

/// log2 buckets of the request-size histogram: bucket k counts sizes in
/// `[2^k, 2^(k+1))` bytes, the last bucket also holds everything larger.
pub const SIZE_BUCKETS: usize = 32;
/// log2 buckets of the issue-to-complete latency histogram, in nanoseconds:
/// bucket k counts latencies in `[2^k, 2^(k+1))` ns; 2^39 ns is about 9 minutes.
pub const LAT_BUCKETS: usize = 40;

/// Request direction as classified from the tracepoint's `rwbs` string.
pub const DIR_READ: usize = 0;
pub const DIR_WRITE: usize = 1;
/// A flush carries no data (nr_sector 0) and is counted apart.
pub const DIR_FLUSH: usize = 2;
pub const DIR_DISCARD: usize = 3;
/// Requests with no block operation (SCSI passthrough, driver-private).
pub const DIR_OTHER: usize = 4;
pub const DIRS: usize = 5;

/// Per-device counters, the value of a per-CPU hash map keyed by the kernel
/// dev_t (`major << 20 | minor`). Userspace sums the per-CPU copies.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevStats {
    /// Requests issued to the driver, by direction (`DIR_*`).
    pub ios: [u64; DIRS],
    /// Bytes of the issued requests, by direction.
    pub bytes: [u64; DIRS],
    /// Requests completed (block_rq_complete), and those completed with an error.
    pub completed: u64,
    pub errors: u64,
    /// Requests put back on the queue by the driver (block_rq_requeue).
    pub requeues: u64,
    /// Requests inserted into the scheduler / dispatch list (block_rq_insert).
    pub inserts: u64,
    /// A request merged into another (block_rq_merge), and bios merged into a
    /// request at its back or front.
    pub rq_merges: u64,
    pub bio_backmerges: u64,
    pub bio_frontmerges: u64,
    /// Bios submitted to the device (block_bio_queue).
    pub bios: u64,
    /// Data requests that started where the previous one on the device ended,
    /// and those that did not.
    pub sequential: u64,
    pub random: u64,
    /// The same for bios as submitted (block_bio_queue), before merging or
    /// splitting reorder them: a property of the workload, not of the
    /// queue's settings.
    pub bio_sequential: u64,
    pub bio_random: u64,
    /// Requests a dm map cloned onto this device (block_rq_remap, counted on
    /// the destination path).
    pub remapped: u64,
    /// Latency samples: the sum of their latencies, for the mean.
    pub lat_sum_ns: u64,
    /// Issued data requests by log2 size in bytes.
    pub size_hist: [u64; SIZE_BUCKETS],
    /// Issue-to-complete latency by log2 nanoseconds.
    pub lat_hist: [u64; LAT_BUCKETS],
}

impl DevStats {
    pub const ZERO: Self = Self {
        ios: [0; DIRS],
        bytes: [0; DIRS],
        completed: 0,
        errors: 0,
        requeues: 0,
        inserts: 0,
        rq_merges: 0,
        bio_backmerges: 0,
        bio_frontmerges: 0,
        bios: 0,
        sequential: 0,
        random: 0,
        bio_sequential: 0,
        bio_random: 0,
        remapped: 0,
        lat_sum_ns: 0,
        size_hist: [0; SIZE_BUCKETS],
        lat_hist: [0; LAT_BUCKETS],
    };
}

/// Per-device state shared by all CPUs (a plain hash map, not per-CPU):
/// updated with atomic adds where several CPUs race.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevShared {
    /// Requests issued and not yet completed, across all CPUs.
    pub inflight: i64,
    /// Sector just past the end of the last data request issued, for the
    /// sequential/random classification.
    pub next_sector: u64,
    /// The same for the last bio submitted.
    pub next_bio_sector: u64,
}

impl DevShared {
    pub const ZERO: Self = Self {
        inflight: 0,
        next_sector: u64::MAX,
        next_bio_sector: u64::MAX,
    };
}

/// Set in an in-flight table entry (issue time in ns) while the driver has
/// put the request back (requeued): the request is not at the device.
pub const START_REQUEUED: u64 = 1 << 63;

/// Key of the in-flight request table used for latency: the classic
/// tracepoints do not expose the `struct request` pointer, so a request is
/// identified by its device and start sector.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReqKey {
    pub dev: u32,
    pub _pad: u32,
    pub sector: u64,
}

/// Key of the per-cgroup accounting: which cgroup sent how much to a device.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupKey {
    pub dev: u32,
    pub _pad: u32,
    pub cgroup_id: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupStats {
    pub bios: u64,
    pub bytes: u64,
}

/// Byte offsets of the fields the programs read, per tracepoint, taken from
/// `/sys/kernel/tracing/events/block/<event>/format` at load time and written
/// into the programs' read-only data before they are loaded (the layouts
/// differ between events and between kernels: block_rq_requeue's `rwbs` is
/// not where block_rq_issue's is).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub issue_dev: u32,
    pub issue_sector: u32,
    pub issue_nr_sector: u32,
    pub issue_rwbs: u32,
    /// The completion probe is a raw tracepoint: it reads `struct request`
    /// at these BTF offsets (rq->q, q->disk, disk->major/first_minor,
    /// rq->__sector).
    pub rq_q: u32,
    pub rq_sector: u32,
    pub q_disk: u32,
    pub disk_major: u32,
    pub disk_first_minor: u32,
    pub insert_dev: u32,
    pub requeue_dev: u32,
    pub requeue_sector: u32,
    pub merge_dev: u32,
    pub bio_queue_dev: u32,
    pub bio_queue_sector: u32,
    pub bio_queue_nr_sector: u32,
    pub backmerge_dev: u32,
    pub frontmerge_dev: u32,
    /// block_rq_remap: `dev` is the path the clone goes to, `old_dev` the dm map.
    pub remap_dev: u32,
    pub remap_old_dev: u32,
}

impl Layout {
    pub const UNSET: Self = Self {
        issue_dev: 0,
        issue_sector: 0,
        issue_nr_sector: 0,
        issue_rwbs: 0,
        rq_q: 0,
        rq_sector: 0,
        q_disk: 0,
        disk_major: 0,
        disk_first_minor: 0,
        insert_dev: 0,
        requeue_dev: 0,
        requeue_sector: 0,
        merge_dev: 0,
        bio_queue_dev: 0,
        bio_queue_sector: 0,
        bio_queue_nr_sector: 0,
        backmerge_dev: 0,
        frontmerge_dev: 0,
        remap_dev: 0,
        remap_old_dev: 0,
    };
}

/// Runtime switches in the programs' read-only data.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// 1: account every device; 0: only devices in the WATCH map.
    pub watch_all: u32,
    pub _pad: u32,
}

/// The kernel's dev_t encoding used inside tracepoints.
pub const fn kdev(major: u32, minor: u32) -> u32 {
    (major << 20) | minor
}

pub const fn kdev_major(dev: u32) -> u32 {
    dev >> 20
}

pub const fn kdev_minor(dev: u32) -> u32 {
    dev & 0xf_ffff
}

/// log2 of `x`, floor; 0 for 0 and 1. Branch-light so the verifier accepts it.
#[inline(always)]
pub fn log2(mut x: u64) -> usize {
    let mut r = 0;
    if x >= 1 << 32 {
        x >>= 32;
        r += 32;
    }
    if x >= 1 << 16 {
        x >>= 16;
        r += 16;
    }
    if x >= 1 << 8 {
        x >>= 8;
        r += 8;
    }
    if x >= 1 << 4 {
        x >>= 4;
        r += 4;
    }
    if x >= 1 << 2 {
        x >>= 2;
        r += 2;
    }
    if x >= 1 << 1 {
        r += 1;
    }
    r
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    unsafe impl aya::Pod for DevStats {}
    unsafe impl aya::Pod for DevShared {}
    unsafe impl aya::Pod for ReqKey {}
    unsafe impl aya::Pod for CgroupKey {}
    unsafe impl aya::Pod for CgroupStats {}
    unsafe impl aya::Pod for Layout {}
    unsafe impl aya::Pod for Config {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_is_floor() {
        assert_eq!(log2(0), 0);
        assert_eq!(log2(1), 0);
        assert_eq!(log2(2), 1);
        assert_eq!(log2(3), 1);
        assert_eq!(log2(65536), 16);
        assert_eq!(log2(65535), 15);
        assert_eq!(log2(1 << 40), 40);
        assert_eq!(log2(u64::MAX), 63);
    }

    #[test]
    fn kdev_round_trips() {
        let d = kdev(259, 70000);
        assert_eq!((kdev_major(d), kdev_minor(d)), (259, 70000));
    }
}
