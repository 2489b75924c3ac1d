//! The `#[repr(C)]` types that cross the kernel/userspace boundary.
//!
//! The eBPF programs (`pathpilot-ebpf`) write these into BPF maps and the
//! collector in `controller/` reads them back, so both sides must agree on the
//! exact layout: everything here is plain old data with explicit widths.
#![no_std]

/// The BTF-enabled tracepoints the programs are on (each program carries
/// its event's name): the request's own issue, requeue and completion, and
/// the merges and splits. `block_bio_queue` ([`BIO_TRACEPOINT`]) is one of
/// them only where per-bio figures are asked for. Here, beside the types,
/// so that the loader and the benches (which put empty programs on the
/// same events, to measure what any program there costs) read one list.
pub const BTF_TRACEPOINTS: [&str; 7] = [
    "block_rq_issue",
    "block_rq_requeue",
    "block_rq_complete",
    "block_rq_merge",
    "block_bio_backmerge",
    "block_bio_frontmerge",
    "block_split",
];

/// The per-bio tracepoint.
pub const BIO_TRACEPOINT: &str = "block_bio_queue";

/// The tracepoints that fire on every request or bio: time-sampled
/// observation attaches and detaches their programs. The others fire only
/// when a merge or a split happens, and stay attached.
pub const PER_REQUEST: [&str; 4] = [
    "block_rq_issue",
    "block_rq_requeue",
    "block_rq_complete",
    BIO_TRACEPOINT,
];

/// The tracepoints attached: every one of [`BTF_TRACEPOINTS`], and
/// [`BIO_TRACEPOINT`] when `bio`.
pub fn tracepoints(bio: bool) -> impl Iterator<Item = &'static str> {
    BTF_TRACEPOINTS
        .into_iter()
        .chain(bio.then_some(BIO_TRACEPOINT))
}

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

/// Latency by request size: size classes (upper bounds, bytes; the last
/// class holds everything larger). A path's speed is comparable only within
/// a size class: latency is flat up to ~16 KiB and grows with size beyond.
pub const SIZE_CLASS_BOUNDS: [u64; SIZE_CLASSES - 1] = [16 << 10, 64 << 10, 256 << 10];
pub const SIZE_CLASSES: usize = 4;
/// Latency buckets of the per-size-class histograms: log2 ns from 2^10
/// (~1 us) to 2^33 (~8.6 s); the first and last also hold what lies beyond.
pub const LAT_CLASS_BUCKETS: usize = 24;
pub const LAT_CLASS_LOG2_MIN: usize = 10;

/// The size class of a request of `bytes`.
#[inline(always)]
pub fn size_class(bytes: u64) -> usize {
    if bytes < SIZE_CLASS_BOUNDS[0] {
        0
    } else if bytes < SIZE_CLASS_BOUNDS[1] {
        1
    } else if bytes < SIZE_CLASS_BOUNDS[2] {
        2
    } else {
        3
    }
}

/// Per-device counters: the value of a per-CPU array indexed by the
/// device's slot (see [`Slot`]). Userspace sums the per-CPU copies.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevStats {
    /// Requests completed, by direction (`DIR_*`): each request once, at
    /// its completion (a request dm dispatches again after a bounce, or
    /// ends twice, counts once).
    pub ios: [u64; DIRS],
    /// Bytes of the completed requests, by direction.
    pub bytes: [u64; DIRS],
    /// Requests completed (every direction), and those completed with an error.
    pub completed: u64,
    pub errors: u64,
    /// Requests put back on the queue by the driver (block_rq_requeue).
    pub requeues: u64,
    /// A request merged into another (block_rq_merge), and bios merged into a
    /// request at its back or front.
    pub rq_merges: u64,
    pub bio_backmerges: u64,
    pub bio_frontmerges: u64,
    /// Bios split at the device's limits (block_split): each split makes
    /// one bio two, so the bios submitted are the requests made plus the
    /// bios merged into them less the splits, with no per-bio probe.
    pub splits: u64,
    /// Bios submitted to the device (block_bio_queue), and their bytes.
    pub bios: u64,
    pub bio_bytes: u64,
    /// Data requests that started, at their issue, where the previous one
    /// on the device ended, and those that did not.
    pub sequential: u64,
    pub random: u64,
    /// The same for bios as submitted (block_bio_queue), before merging or
    /// splitting reorder them: a property of the workload, not of the
    /// queue's settings.
    pub bio_sequential: u64,
    pub bio_random: u64,
    /// Requests a dm map cloned onto this device, counted as they complete
    /// (see `Layout::clone_flags`).
    pub remapped: u64,
    /// Latency samples: their count and the sum of their latencies.
    pub lat_samples: u64,
    pub lat_sum_ns: u64,
    /// Completed data requests by log2 size in bytes.
    pub size_hist: [u64; SIZE_BUCKETS],
    /// Latency (see the completion probe) by log2 nanoseconds.
    pub lat_hist: [u64; LAT_BUCKETS],
    /// The same by size class (`size_class`), in `LAT_CLASS_BUCKETS`
    /// buckets from 2^`LAT_CLASS_LOG2_MIN` ns.
    pub lat_by_size: [[u64; LAT_CLASS_BUCKETS]; SIZE_CLASSES],
}

impl DevStats {
    pub const ZERO: Self = Self {
        ios: [0; DIRS],
        bytes: [0; DIRS],
        completed: 0,
        errors: 0,
        requeues: 0,
        rq_merges: 0,
        bio_backmerges: 0,
        bio_frontmerges: 0,
        splits: 0,
        bios: 0,
        bio_bytes: 0,
        sequential: 0,
        random: 0,
        bio_sequential: 0,
        bio_random: 0,
        remapped: 0,
        lat_samples: 0,
        lat_sum_ns: 0,
        size_hist: [0; SIZE_BUCKETS],
        lat_hist: [0; LAT_BUCKETS],
        lat_by_size: [[0; LAT_CLASS_BUCKETS]; SIZE_CLASSES],
    };
}

/// Per-device state shared by all CPUs (an array indexed by slot): updated
/// with atomic adds where several CPUs race.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevShared {
    /// Requests issued to the driver and not yet completed or requeued.
    pub inflight: i64,
    /// Sector just past the end of the last data request issued, for the
    /// sequential/random classification.
    pub next_sector: u64,
    /// The same for the last bio submitted.
    pub next_bio_sector: u64,
    /// When the device last went from idle to busy (an issue found
    /// nothing else in flight), and when it last completed a request
    /// (ns, bpf_ktime_get_ns's clock): with requests in flight, the later
    /// of the two is how long the device has been silent. The first is
    /// the later of that request's creation (the kernel's stamp) and the
    /// device's last requeue: never before the device went idle, never
    /// after the issue.
    pub busy_since_ns: u64,
    pub last_complete_ns: u64,
    /// When a request was last put back on the queue (block_rq_requeue).
    pub requeued_ns: u64,
    /// The highest in-flight count an issue saw since userspace last
    /// zeroed it (through its mapping, once per interval). Kept here, not
    /// per CPU: the issue probe has this entry in hand already, and
    /// userspace reads and clears it with no syscall. Updated without a
    /// lock: two CPUs racing may keep the lower of two near-equal peaks.
    pub peak: i64,
}

impl DevShared {
    pub const ZERO: Self = Self {
        inflight: 0,
        next_sector: u64::MAX,
        next_bio_sector: u64::MAX,
        busy_since_ns: 0,
        last_complete_ns: 0,
        requeued_ns: 0,
        peak: 0,
    };
}

/// The watch list: an array of `MAX_SLOTS` slots, a device in the slot
/// its dev_t hashes to or one of the `SLOT_PROBES` after it (open
/// addressing). The slot index is where the device's counters live in the
/// other arrays: no hash table on the per-I/O path. Userspace fills it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slot {
    /// The kernel dev_t; `SLOT_EMPTY` or `SLOT_GONE` (a removed entry that
    /// lookups step over).
    pub dev: u32,
    pub _pad: u32,
}

pub const MAX_SLOTS: u32 = 256;
pub const SLOT_PROBES: u32 = 8;
pub const SLOT_EMPTY: u32 = 0;
pub const SLOT_GONE: u32 = u32::MAX;

/// The first slot to look in for `dev` (Fibonacci hashing).
#[inline(always)]
pub const fn slot_home(dev: u32) -> u32 {
    dev.wrapping_mul(0x9E37_79B1) >> (32 - MAX_SLOTS.trailing_zeros())
}

/// A device's last cgroup on one CPU, counted here until another cgroup
/// submits to the device on that CPU (then added to the CGROUPS map): a
/// hash update per bio costs more than the rest of the bio's accounting.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupCache {
    pub cgroup_id: u64,
    pub bios: u64,
    pub bytes: u64,
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

/// Where the programs find what they read, written into their read-only
/// data at load time: `struct request`, `struct bio` and `struct
/// block_device` members (every program reads the kernel's own structure,
/// handed over by a BTF-enabled tracepoint) from the kernel's BTF, and
/// `enum req_op` values.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Offsets in `struct request`.
    pub rq_q: u32,
    pub rq_cmd_flags: u32,
    pub rq_data_len: u32,
    pub rq_sector: u32,
    pub rq_start_time_ns: u32,
    pub rq_io_start_time_ns: u32,
    /// `request.state` (read apart, only on requeue) and its value for a
    /// request not started, `MQ_RQ_IDLE` of `enum mq_rq_state`.
    pub rq_state: u32,
    pub rq_state_idle: u32,
    /// `request_queue.disk`, `gendisk.major` (first_minor follows it).
    pub q_disk: u32,
    pub disk_major: u32,
    /// `enum req_op` values (the low bits of cmd_flags under `op_mask`).
    pub op_mask: u32,
    pub op_read: u32,
    pub op_write: u32,
    pub op_flush: u32,
    pub op_discard: u32,
    pub op_drv_in: u32,
    pub op_drv_out: u32,
    /// The `cmd_flags` bits that every clone dm-multipath sends down a path
    /// carries (REQ_NOMERGE | REQ_FAILFAST_TRANSPORT, `enum
    /// req_flag_bits`): a request with both is a dm clone, counted as
    /// `remapped` with no program on block_rq_remap. Readahead
    /// (`rahead_flag`) carries every failfast bit, and a split bio
    /// REQ_NOMERGE, so a readahead request with both is a clone only if it
    /// has an `end_io` (`rq_end_io`; dm's end_clone_request), which a
    /// request from the page cache has not.
    pub clone_flags: u32,
    pub rahead_flag: u32,
    pub rq_end_io: u32,
    /// `bio.bi_bdev`, `block_device.bd_dev` (a bio's device, as the
    /// classic tracepoints' `bio_dev()`), and `bio.bi_iter`'s `bi_sector`
    /// and `bi_size` (offsets from the bio).
    pub bio_bdev: u32,
    pub bdev_dev: u32,
    pub bio_sector: u32,
    pub bio_size: u32,
}

impl Layout {
    pub const UNSET: Self = Self {
        rq_q: 0,
        rq_cmd_flags: 0,
        rq_data_len: 0,
        rq_sector: 0,
        rq_start_time_ns: 0,
        rq_io_start_time_ns: 0,
        rq_state: 0,
        rq_state_idle: 0,
        q_disk: 0,
        disk_major: 0,
        op_mask: 0,
        op_read: 0,
        op_write: 0,
        op_flush: 0,
        op_discard: 0,
        op_drv_in: 0,
        op_drv_out: 0,
        clone_flags: 0,
        rahead_flag: 0,
        rq_end_io: 0,
        bio_bdev: 0,
        bdev_dev: 0,
        bio_sector: 0,
        bio_size: 0,
    };
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
    unsafe impl aya::Pod for Slot {}
    unsafe impl aya::Pod for CgroupCache {}
    unsafe impl aya::Pod for CgroupKey {}
    unsafe impl aya::Pod for CgroupStats {}
    unsafe impl aya::Pod for Layout {}
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
    fn slots_and_size_classes() {
        for dev in [kdev(8, 0), kdev(8, 16), kdev(254, 0), kdev(259, 70000)] {
            assert!(slot_home(dev) < MAX_SLOTS);
        }
        assert_ne!(slot_home(kdev(8, 0)), slot_home(kdev(8, 16)));
        assert_eq!(size_class(4096), 0);
        assert_eq!(size_class(16 << 10), 1);
        assert_eq!(size_class(64 << 10), 2);
        assert_eq!(size_class(1 << 20), 3);
    }

    #[test]
    fn kdev_round_trips() {
        let d = kdev(259, 70000);
        assert_eq!((kdev_major(d), kdev_minor(d)), (259, 70000));
    }
}
