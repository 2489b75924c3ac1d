//! Block-layer observers, built to cost as little per I/O as possible: no
//! hash table is touched on the per-I/O path. A watched device has a slot
//! (its index in array maps, found from its dev_t by open addressing in
//! SLOTS); its counters live in STATS, one entry per CPU for each slot.
//! Requests are seen at their issue, requeue and completion through BTF-enabled
//! tracepoints, which hand over `struct request` itself: the programs load
//! what they need from it in place (offsets from the kernel's BTF, in
//! LAYOUT), find its device through its queue's disk, and
//! time a request from the kernel's own stamps, so no table of requests in
//! flight is kept. Bios, merges and splits are seen the same way, from the
//! `struct bio` or `struct request` their tracepoints hand over: no
//! program is on a classic tracepoint, whose record the kernel would build
//! (device, sector, size, the flags as text, the task's name) on every
//! event before the program ran, work outside the kernel's accounting of
//! the program. A dm clone is known by its flags, at no cost of its own.
#![no_std]
#![no_main]
#![feature(asm_experimental_arch)]

use aya_ebpf::{
    bindings::{BPF_F_MMAPABLE, BPF_NOEXIST},
    helpers::{bpf_get_current_cgroup_id, bpf_get_smp_processor_id, bpf_ktime_get_ns},
    macros::{btf_tracepoint, map},
    maps::{Array, LruPerCpuHashMap, PerCpuArray},
    programs::BtfTracePointContext,
};
use pathpilot_common::{
    CgroupCache, CgroupKey, CgroupStats, DIR_DISCARD, DIR_FLUSH, DIR_OTHER, DIR_READ, DIR_WRITE,
    DevShared, DevStats, LAT_BUCKETS, LAT_CLASS_BUCKETS, LAT_CLASS_LOG2_MIN, Layout, MAX_SLOTS,
    SIZE_BUCKETS, SLOT_EMPTY, SLOT_PROBES, Slot, log2, size_class, slot_home,
};

/// The watch list (see `Slot`).
#[map]
static SLOTS: Array<Slot> = Array::with_max_entries(MAX_SLOTS, 0);
/// Each slot's counters on each CPU, side by side: entry `slot * NCPUS +
/// cpu` (the loader sizes it). A plain array rather than a per-CPU one,
/// so that userspace can map it and read every busy device's counters
/// with no syscall, or read a device's for every CPU in one.
#[map]
static STATS: Array<DevStats> = Array::with_max_entries(MAX_SLOTS, BPF_F_MMAPABLE);
/// Possible CPUs, set by the loader.
#[unsafe(no_mangle)]
static NCPUS: u32 = 1;
/// Mappable: userspace reads it with no syscall, to skip devices whose
/// state has not moved since its last snapshot.
#[map]
static SHARED: Array<DevShared> = Array::with_max_entries(MAX_SLOTS, BPF_F_MMAPABLE);
/// Per CPU and slot, the last cgroup's bios not yet added to CGROUPS.
#[map]
static CGCACHE: PerCpuArray<CgroupCache> = PerCpuArray::with_max_entries(MAX_SLOTS, 0);
/// (device, cgroup) -> bios and bytes. LRU: bounded however many cgroups
/// come and go (an entry not updated for long is the one evicted).
#[map]
static CGROUPS: LruPerCpuHashMap<CgroupKey, CgroupStats> =
    LruPerCpuHashMap::with_max_entries(4096, 0);

#[unsafe(no_mangle)]
static LAYOUT: Layout = Layout::UNSET;

/// One field of `LAYOUT`. Volatile: the loader rewrites this read-only
/// data, so the compiler must not fold the initial value into the code.
/// Field by field, so a program loads only what it uses: a volatile copy
/// of the whole struct cost every run of every program some fifty loads,
/// spills and reloads.
macro_rules! lay {
    ($field:ident) => {
        unsafe { core::ptr::read_volatile(&raw const LAYOUT.$field) }
    };
}

/// The slot of a watched device.
#[inline(always)]
fn slot_of(dev: u32) -> Option<u32> {
    let home = slot_home(dev);
    for i in 0..SLOT_PROBES {
        let idx = (home + i) & (MAX_SLOTS - 1);
        let s = SLOTS.get(idx)?;
        if s.dev == dev {
            return Some(idx);
        }
        if s.dev == SLOT_EMPTY {
            return None;
        }
    }
    None
}

/// An atomic add with no fetch (BPF_ATOMIC | BPF_ADD), which every eBPF
/// CPU version has; core's atomics need fetch variants the target lacks.
#[inline(always)]
fn atomic_add(p: &mut i64, v: i64) {
    unsafe {
        core::arch::asm!("lock *(u64 *)({0} + 0) += {1}", in(reg) p as *mut i64, in(reg) v,
            options(nostack));
    }
}

/// This CPU's counters of `slot`: no other CPU writes them, as with a
/// per-CPU array (the programs run with migration disabled).
#[inline(always)]
fn stats(slot: u32) -> Option<&'static mut DevStats> {
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let n = unsafe { core::ptr::read_volatile(&raw const NCPUS) };
    STATS
        .get_ptr_mut(slot * n + cpu)
        .map(|p| unsafe { &mut *p })
}

#[inline(always)]
fn shared(slot: u32) -> Option<&'static mut DevShared> {
    SHARED.get_ptr_mut(slot).map(|p| unsafe { &mut *p })
}

/// A kernel structure read in place. The BTF-enabled tracepoints hand
/// over `struct request` as a pointer whose type the verifier knows, so
/// its members, and those of the structures it points to, are plain loads
/// (one that faults reads 0) at the offsets in LAYOUT, which the verifier
/// sees as constants: no helper call, where a helper call to read the
/// request cost each program more than the rest of its work.
#[derive(Clone, Copy)]
struct Kernel(*const u8);

impl Kernel {
    #[inline(always)]
    fn at<T>(self, off: u32) -> T {
        unsafe { core::ptr::read_volatile(self.0.add(off as usize) as *const T) }
    }

    #[inline(always)]
    fn u64_at(self, off: u32) -> u64 {
        self.at(off)
    }

    #[inline(always)]
    fn u32_at(self, off: u32) -> u32 {
        self.at(off)
    }

    #[inline(always)]
    fn ptr_at(self, off: u32) -> Kernel {
        Kernel(self.at(off))
    }
}

/// The slot of the device a request is for: its queue's disk's dev_t.
#[inline(always)]
fn slot_of_request(rq: Kernel) -> Option<u32> {
    let disk = rq.ptr_at(lay!(rq_q)).ptr_at(lay!(q_disk));
    if disk.0.is_null() {
        return None;
    }
    // gendisk's major and first_minor, side by side.
    let major = disk.u32_at(lay!(disk_major));
    let minor = disk.u32_at(lay!(disk_major) + 4);
    slot_of((major << 20) | (minor & 0xf_ffff))
}

/// A bio's device (the classic tracepoints' `bio_dev()`).
#[inline(always)]
fn dev_of_bio(bio: Kernel) -> u32 {
    bio.ptr_at(lay!(bio_bdev)).u32_at(lay!(bdev_dev))
}

/// A request's direction from its operation (`enum req_op`), as the
/// kernel's diskstats group it: a zone command (no data) counts as a read
/// or a write like any other operation.
#[inline(always)]
fn direction(op: u32, data_len: u32) -> usize {
    if op == lay!(op_drv_in) || op == lay!(op_drv_out) {
        // SCSI passthrough (a checker's TEST UNIT READY): neither data nor a flush.
        DIR_OTHER
    } else if op == lay!(op_flush) || (op == lay!(op_write) && data_len == 0) {
        // A flush request, or a caller's empty flush (a write of nothing).
        DIR_FLUSH
    } else if op == lay!(op_discard) {
        DIR_DISCARD
    } else if op & 1 == lay!(op_write) & 1 {
        // Writes are odd operations (op_is_write()).
        DIR_WRITE
    } else {
        DIR_READ
    }
}

/// A read or write ended with nothing left to transfer: not a request the
/// device executed (see `try_complete`). Zone commands carry no data and
/// are executed.
#[inline(always)]
fn nothing_left(op: u32, data_len: u32) -> bool {
    data_len == 0 && (op == lay!(op_read) || op == lay!(op_write))
}

#[btf_tracepoint(function = "block_rq_issue")]
pub fn block_rq_issue(ctx: BtfTracePointContext) -> i32 {
    let _ = try_issue(&ctx);
    0
}

fn try_issue(ctx: &BtfTracePointContext) -> Result<(), i32> {
    let r = Kernel(ctx.arg(0));
    let Some(slot) = slot_of_request(r) else {
        return Ok(());
    };
    let sh = shared(slot).ok_or(-1)?;
    // Atomic: issues and completions race on other CPUs.
    atomic_add(&mut sh.inflight, 1);
    let now = unsafe { core::ptr::read_volatile(&sh.inflight) };
    if now == 1 {
        // Idle until now: the device's silence is measured from the
        // request's creation, stamped by the kernel (iostats or a
        // scheduler), not from a clock read of our own, which at QD1,
        // where every issue finds the device idle, was a helper call per
        // I/O (60 ns of this program's 150 on the host). Silence is judged
        // in seconds; the microseconds from creation to issue do not
        // count. A request requeued while the device went idle keeps its
        // first stamp: never before that requeue.
        let created = r.u64_at(lay!(rq_start_time_ns));
        sh.busy_since_ns = if created != 0 {
            created.max(sh.requeued_ns)
        } else {
            unsafe { bpf_ktime_get_ns() }
        };
    }
    if now > sh.peak {
        sh.peak = now;
    }
    let op = r.u32_at(lay!(rq_cmd_flags)) & lay!(op_mask);
    let len = r.u32_at(lay!(rq_data_len));
    let dir = direction(op, len);
    if dir != DIR_FLUSH && dir != DIR_OTHER && len != 0 {
        let sector = r.u64_at(lay!(rq_sector));
        let s = stats(slot).ok_or(-1)?;
        if sh.next_sector == sector {
            s.sequential += 1;
        } else {
            s.random += 1;
        }
        sh.next_sector = sector + (len as u64 >> 9);
    }
    Ok(())
}

#[btf_tracepoint(function = "block_rq_requeue")]
pub fn block_rq_requeue(ctx: BtfTracePointContext) -> i32 {
    let _ = (|| -> Result<(), i32> {
        let r = Kernel(ctx.arg(0));
        let Some(slot) = slot_of_request(r) else {
            return Ok(());
        };
        // Back to the queue: no longer at the device (issued again later).
        // The tracepoint also fires for a request that a driver turned
        // away before starting it (SCSI when its host is busy): that one
        // was never counted in.
        let state = r.u32_at(lay!(rq_state));
        if state != lay!(rq_state_idle) {
            let sh = shared(slot).ok_or(-1)?;
            atomic_add(&mut sh.inflight, -1);
            sh.requeued_ns = unsafe { bpf_ktime_get_ns() };
        }
        stats(slot).ok_or(-1)?.requeues += 1;
        Ok(())
    })();
    0
}

/// A raw (BTF-enabled) tracepoint, not a classic one: completions run in
/// hard-IRQ context, and a classic tracepoint program that interrupts
/// another one on the same CPU is skipped by the kernel (the per-CPU
/// bpf_prog_active guard), so completions would be lost under load. Raw
/// tracepoints guard each program on its own. Arguments: (struct request
/// *rq, blk_status_t error, unsigned int nr_bytes).
#[btf_tracepoint(function = "block_rq_complete")]
pub fn block_rq_complete(ctx: BtfTracePointContext) -> i32 {
    let _ = try_complete(&ctx);
    0
}

fn try_complete(ctx: &BtfTracePointContext) -> Result<(), i32> {
    let r = Kernel(ctx.arg(0));
    let Some(slot) = slot_of_request(r) else {
        return Ok(());
    };
    let error: u64 = ctx.arg(1);
    let nr_bytes = ctx.arg::<u64>(2) as u32;
    let flags = r.u32_at(lay!(rq_cmd_flags));
    let op = flags & lay!(op_mask);
    let len = r.u32_at(lay!(rq_data_len));
    let dir = direction(op, len);
    // Only what the device executed counts, as the kernel's diskstats
    // count it: a data request's data, a flush request (the block layer's
    // own, or dm's clone of one), a zone command, a passthrough command. A
    // read or write ended with nothing left to transfer is none of these,
    // and was either counted already or never issued: dm ends each request
    // a second time once its clone's data is in; the flush machinery ends a
    // caller's empty flush (never issued: its flush request was) and a data
    // request after the flush that follows it. Counting those kept the
    // in-flight count off by one per flush sequence.
    if nothing_left(op, len) {
        return Ok(());
    }
    let s = stats(slot).ok_or(-1)?;
    if let Some(b) = s.bytes.get_mut(dir) {
        *b += nr_bytes as u64;
    }
    // A request completed in pieces (a partial completion) is one request:
    // counted at the piece that ends it.
    if nr_bytes < len {
        return Ok(());
    }
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(n) = s.ios.get_mut(dir) {
        *n += 1;
    }
    s.completed += 1;
    // A clone dm-multipath sent down this path: counted here, once, rather
    // than by a program on block_rq_remap, which cost every I/O through a
    // map a program run of its own (a fifth of the observer's cost in the
    // testbed guest).
    if lay!(clone_flags) != 0
        && flags & lay!(clone_flags) == lay!(clone_flags)
        && (flags & lay!(rahead_flag) == 0 || r.u64_at(lay!(rq_end_io)) != 0)
    {
        s.remapped += 1;
    }
    if error as u8 != 0 {
        s.errors += 1;
    }
    if dir != DIR_FLUSH && dir != DIR_OTHER && len != 0 {
        if let Some(h) = s.size_hist.get_mut(log2(len as u64).min(SIZE_BUCKETS - 1)) {
            *h += 1;
        }
    }
    // Timed from the kernel's own stamp: the issue to the device where the
    // queue keeps blk-stat, else the request's start (as iostat's await).
    let io_start = r.u64_at(lay!(rq_io_start_time_ns));
    let start = if io_start != 0 {
        io_start
    } else {
        r.u64_at(lay!(rq_start_time_ns))
    };
    if start != 0 && start <= now {
        let lat = now - start;
        let b = log2(lat);
        s.lat_samples += 1;
        s.lat_sum_ns += lat;
        if let Some(h) = s.lat_hist.get_mut(b.min(LAT_BUCKETS - 1)) {
            *h += 1;
        }
        let cb = b
            .saturating_sub(LAT_CLASS_LOG2_MIN)
            .min(LAT_CLASS_BUCKETS - 1);
        if let Some(row) = s.lat_by_size.get_mut(size_class(len as u64))
            && let Some(h) = row.get_mut(cb)
        {
            *h += 1;
        }
    }
    let sh = shared(slot).ok_or(-1)?;
    sh.last_complete_ns = now;
    atomic_add(&mut sh.inflight, -1);
    Ok(())
}

/// Counts one event on a watched device.
#[inline(always)]
fn count(slot: Option<u32>, f: impl FnOnce(&mut DevStats)) {
    if let Some(slot) = slot
        && let Some(s) = stats(slot)
    {
        f(s);
    }
}

/// Arguments of the merge and split tracepoints: (struct request *rq) for
/// a request merge, (struct bio *bio) for a bio merged into a request,
/// (struct bio *bio, unsigned int new_sector) for a split.
#[btf_tracepoint(function = "block_rq_merge")]
pub fn block_rq_merge(ctx: BtfTracePointContext) -> i32 {
    count(slot_of_request(Kernel(ctx.arg(0))), |s| s.rq_merges += 1);
    0
}

#[btf_tracepoint(function = "block_bio_backmerge")]
pub fn block_bio_backmerge(ctx: BtfTracePointContext) -> i32 {
    count(slot_of(dev_of_bio(Kernel(ctx.arg(0)))), |s| {
        s.bio_backmerges += 1
    });
    0
}

#[btf_tracepoint(function = "block_bio_frontmerge")]
pub fn block_bio_frontmerge(ctx: BtfTracePointContext) -> i32 {
    count(slot_of(dev_of_bio(Kernel(ctx.arg(0)))), |s| {
        s.bio_frontmerges += 1
    });
    0
}

#[btf_tracepoint(function = "block_split")]
pub fn block_split(ctx: BtfTracePointContext) -> i32 {
    count(slot_of(dev_of_bio(Kernel(ctx.arg(0)))), |s| s.splits += 1);
    0
}

/// Attached only where per-bio figures are asked for (cgroup bytes, the
/// workload's own bio order): a program run on every bio, whose absence
/// takes about a fifth off the observer's time per I/O. Argument: (struct
/// bio *bio).
#[btf_tracepoint(function = "block_bio_queue")]
pub fn block_bio_queue(ctx: BtfTracePointContext) -> i32 {
    let _ = try_bio_queue(&ctx);
    0
}

fn try_bio_queue(ctx: &BtfTracePointContext) -> Result<(), i32> {
    let bio = Kernel(ctx.arg(0));
    let dev = dev_of_bio(bio);
    let Some(slot) = slot_of(dev) else {
        return Ok(());
    };
    // bio_sectors(), as the classic tracepoint's nr_sector.
    let nr = bio.u32_at(lay!(bio_size)) >> 9;
    let sector = bio.u64_at(lay!(bio_sector));
    let bytes = nr as u64 * 512;
    let s = stats(slot).ok_or(-1)?;
    s.bios += 1;
    s.bio_bytes += bytes;
    if nr > 0 {
        let sh = shared(slot).ok_or(-1)?;
        if sh.next_bio_sector == sector {
            s.bio_sequential += 1;
        } else {
            s.bio_random += 1;
        }
        sh.next_bio_sector = sector + nr as u64;
    }
    // bio_queue runs in the submitter's context: its cgroup is the one the
    // I/O is charged to. Counted in this CPU's cache until another cgroup
    // comes along.
    let id = unsafe { bpf_get_current_cgroup_id() };
    let c = unsafe { &mut *CGCACHE.get_ptr_mut(slot).ok_or(-1)? };
    if c.cgroup_id != id {
        if c.cgroup_id != 0 && c.bios != 0 {
            let key = CgroupKey {
                dev,
                _pad: 0,
                cgroup_id: c.cgroup_id,
            };
            if let Some(e) = CGROUPS.get_ptr_mut(&key) {
                unsafe {
                    (*e).bios += c.bios;
                    (*e).bytes += c.bytes;
                }
            } else {
                let _ = CGROUPS.insert(
                    &key,
                    &CgroupStats {
                        bios: c.bios,
                        bytes: c.bytes,
                    },
                    BPF_NOEXIST as u64,
                );
            }
        }
        c.cgroup_id = id;
        c.bios = 0;
        c.bytes = 0;
    }
    c.bios += 1;
    c.bytes += bytes;
    Ok(())
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
