//! Block-layer observers. Every program first checks the watch list, so an
//! unwatched device costs one hash lookup per event; field offsets come from
//! the LAYOUT global that the loader fills from tracefs before loading.
#![no_std]
#![no_main]
#![feature(asm_experimental_arch)]

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_cgroup_id, bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::{map, raw_tracepoint, tracepoint},
    maps::{HashMap, PerCpuArray, PerCpuHashMap},
    programs::{RawTracePointContext, TracePointContext},
};
use pathpilot_common::{
    CgroupKey, CgroupStats, Config, DIR_DISCARD, DIR_FLUSH, DIR_OTHER, DIR_READ, DIR_WRITE,
    DevShared, DevStats, LAT_BUCKETS, Layout, ReqKey, SIZE_BUCKETS, log2,
};

const MAX_DEVICES: u32 = 4096;

#[map]
static STATS: PerCpuHashMap<u32, DevStats> = PerCpuHashMap::with_max_entries(MAX_DEVICES, 0);
#[map]
static SHARED: HashMap<u32, DevShared> = HashMap::with_max_entries(MAX_DEVICES, 0);
/// Devices to account (value unused) unless CONFIG.watch_all.
/// Per CPU, the highest device-wide in-flight count this CPU saw at issue;
/// userspace takes the max over CPUs and zeroes it every interval.
#[map]
static PEAK: PerCpuHashMap<u32, i64> = PerCpuHashMap::with_max_entries(MAX_DEVICES, 0);
#[map]
static WATCH: HashMap<u32, u8> = HashMap::with_max_entries(MAX_DEVICES, 0);
/// dm path dev_t -> dm map dev_t, learnt from block_rq_remap.
#[map]
static REMAPS: HashMap<u32, u32> = HashMap::with_max_entries(MAX_DEVICES, 0);
/// Issue timestamps of requests in flight. A plain preallocated hash (an
/// LRU map costs a lock per update on this hot path); userspace sweeps out
/// entries whose completion was never seen.
#[map]
static START: HashMap<ReqKey, u64> = HashMap::with_max_entries(65536, 0);

/// A request found in flight again within this long of its issue is the
/// same one re-dispatched (see the issue probe).
const REDISPATCH_NS: u64 = 2_000_000_000;
/// Marks a START entry whose request the driver put back (requeue): it
/// is not at the device until issued again. (ktime stays below 2^63.)
const REQUEUED: u64 = pathpilot_common::START_REQUEUED;
#[map]
static CGROUPS: PerCpuHashMap<CgroupKey, CgroupStats> =
    PerCpuHashMap::with_max_entries(MAX_DEVICES * 4, 0);
/// A zeroed DevStats to insert from: it is larger than the 512-byte eBPF stack.
#[map]
static ZERO: PerCpuArray<DevStats> = PerCpuArray::with_max_entries(1, 0);

#[unsafe(no_mangle)]
static LAYOUT: Layout = Layout::UNSET;
#[unsafe(no_mangle)]
static CONFIG: Config = Config {
    watch_all: 0,
    _pad: 0,
};

#[inline(always)]
fn layout() -> Layout {
    // volatile: the loader rewrites this read-only data, so the compiler
    // must not fold the initial value into the code.
    unsafe { core::ptr::read_volatile(&LAYOUT) }
}

#[inline(always)]
fn watched(dev: u32) -> bool {
    let cfg = unsafe { core::ptr::read_volatile(&CONFIG) };
    cfg.watch_all != 0 || unsafe { WATCH.get(&dev) }.is_some()
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

#[inline(always)]
fn read<T>(ctx: &TracePointContext, off: u32) -> Result<T, i32> {
    unsafe { ctx.read_at::<T>(off as usize) }
}

#[inline(always)]
fn stats(dev: u32) -> Option<&'static mut DevStats> {
    if let Some(p) = STATS.get_ptr_mut(&dev) {
        return Some(unsafe { &mut *p });
    }
    let zero = ZERO.get_ptr(0)?;
    let _ = STATS.insert(&dev, unsafe { &*zero }, BPF_NOEXIST as u64);
    STATS.get_ptr_mut(&dev).map(|p| unsafe { &mut *p })
}

#[inline(always)]
fn shared(dev: u32) -> Option<&'static mut DevShared> {
    if let Some(p) = SHARED.get_ptr_mut(&dev) {
        return Some(unsafe { &mut *p });
    }
    let _ = SHARED.insert(&dev, &DevShared::ZERO, BPF_NOEXIST as u64);
    SHARED.get_ptr_mut(&dev).map(|p| unsafe { &mut *p })
}

/// Direction from the `rwbs` string: a leading 'F' is a preflush when a data
/// op follows it. Requests with no sectors are flushes whatever they say.
#[inline(always)]
fn direction(rwbs: &[u8; 4], nr_sector: u32) -> usize {
    // 'N': no block operation (SCSI passthrough such as a checker's TEST
    // UNIT READY, driver-private requests): neither data nor a flush.
    if rwbs[0] == b'N' {
        return DIR_OTHER;
    }
    if nr_sector == 0 {
        return DIR_FLUSH;
    }
    let op = if rwbs[0] == b'F' { rwbs[1] } else { rwbs[0] };
    match op {
        b'W' => DIR_WRITE,
        b'D' => DIR_DISCARD,
        b'R' => DIR_READ,
        _ => DIR_READ,
    }
}

#[tracepoint]
pub fn block_rq_issue(ctx: TracePointContext) -> u32 {
    let _ = try_rq_issue(&ctx);
    0
}

fn try_rq_issue(ctx: &TracePointContext) -> Result<(), i32> {
    let l = layout();
    let dev: u32 = read(ctx, l.issue_dev)?;
    if !watched(dev) {
        return Ok(());
    }
    let sector: u64 = read(ctx, l.issue_sector)?;
    let nr: u32 = read(ctx, l.issue_nr_sector)?;
    let rwbs: [u8; 4] = read(ctx, l.issue_rwbs)?;
    let dir = direction(&rwbs, nr);
    let bytes = nr as u64 * 512;
    let key = ReqKey {
        dev,
        _pad: 0,
        sector,
    };
    let now_ns = unsafe { bpf_ktime_get_ns() };
    // A key already in the table is the same request dispatched again: dm
    // re-dispatches a request each time its clone bounces off a busy path
    // (hundreds of times a second; through a requeue, which marks the
    // entry, or straight back), and counting each dispatch made a map's
    // bytes read 2-6x what was written. It keeps its first issue time, so
    // latency is what the submitter waited. An old unmarked entry is a
    // completion never seen: start over.
    let fresh = START.insert(&key, &now_ns, BPF_NOEXIST as u64).is_ok();
    if !fresh && let Some(t) = START.get_ptr_mut(&key) {
        let t0 = unsafe { *t };
        if t0 & REQUEUED != 0 {
            // Back at the driver after a requeue: in flight again.
            unsafe { *t = t0 & !REQUEUED };
            if let Some(sh) = shared(dev) {
                atomic_add(&mut sh.inflight, 1);
            }
            return Ok(());
        }
        if now_ns.saturating_sub(t0) < REDISPATCH_NS {
            return Ok(());
        }
        unsafe { *t = now_ns };
    }
    let s = stats(dev).ok_or(-1i32)?;
    if let Some(n) = s.ios.get_mut(dir) {
        *n += 1;
    }
    if let Some(b) = s.bytes.get_mut(dir) {
        *b += bytes;
    }
    if dir != DIR_FLUSH && dir != DIR_OTHER {
        if let Some(h) = s.size_hist.get_mut(log2(bytes).min(SIZE_BUCKETS - 1)) {
            *h += 1;
        }
    }
    if let Some(sh) = shared(dev) {
        // Atomic: issues and completions race on other CPUs.
        if fresh {
            atomic_add(&mut sh.inflight, 1);
        }
        let now = unsafe { core::ptr::read_volatile(&sh.inflight) };
        match PEAK.get_ptr_mut(&dev) {
            Some(p) => unsafe {
                if now > *p {
                    *p = now;
                }
            },
            None => {
                let _ = PEAK.insert(&dev, &now, BPF_NOEXIST as u64);
            }
        }
        if dir != DIR_FLUSH && dir != DIR_OTHER {
            if sh.next_sector == sector {
                s.sequential += 1;
            } else {
                s.random += 1;
            }
            sh.next_sector = sector + nr as u64;
        }
    }
    Ok(())
}

/// A raw tracepoint, not a classic one: completions run in hard-IRQ
/// context, and a classic tracepoint program that interrupts another one on
/// the same CPU is skipped by the kernel (the per-CPU bpf_prog_active
/// guard), so completions would be lost under load. Raw tracepoints guard
/// each program on its own. Arguments: (struct request *rq, blk_status_t
/// error, unsigned int nr_bytes).
#[raw_tracepoint(tracepoint = "block_rq_complete")]
pub fn block_rq_complete(ctx: RawTracePointContext) -> i32 {
    let _ = try_rq_complete(&ctx);
    0
}

#[inline(always)]
fn kread<T>(base: u64, off: u32) -> Result<T, i32> {
    unsafe { bpf_probe_read_kernel((base + off as u64) as *const T) }.map_err(|e| e as i32)
}

fn try_rq_complete(ctx: &RawTracePointContext) -> Result<(), i32> {
    let l = layout();
    let rq: u64 = ctx.arg(0);
    let error: u64 = ctx.arg(1);
    let q: u64 = kread(rq, l.rq_q)?;
    let disk: u64 = kread(q, l.q_disk)?;
    if disk == 0 {
        return Ok(());
    }
    let major: i32 = kread(disk, l.disk_major)?;
    let minor: i32 = kread(disk, l.disk_first_minor)?;
    let dev = ((major as u32) << 20) | (minor as u32 & 0xf_ffff);
    if !watched(dev) {
        return Ok(());
    }
    let raw_sector: u64 = kread(rq, l.rq_sector)?;
    // As the classic issue tracepoint reports it: no position -> 0.
    let sector = if raw_sector == u64::MAX {
        0
    } else {
        raw_sector
    };
    let key = ReqKey {
        dev,
        _pad: 0,
        sector,
    };
    // Only a completion matched to its issue counts: a request completes in
    // several steps on some devices (dm ends each request twice, the second
    // time with 0 bytes), and requests issued before the probes were
    // attached have no issue to match.
    let Some(t) = (unsafe { START.get(&key) }).copied() else {
        return Ok(());
    };
    let _ = START.remove(&key);
    // Ended while requeued (failed without a new dispatch): it already
    // left the in-flight count.
    let requeued = t & REQUEUED != 0;
    let t0 = t & !REQUEUED;
    let lat = unsafe { bpf_ktime_get_ns() }.saturating_sub(t0);
    let s = stats(dev).ok_or(-1i32)?;
    s.completed += 1;
    if error as u8 != 0 {
        s.errors += 1;
    }
    s.lat_sum_ns += lat;
    if let Some(h) = s.lat_hist.get_mut(log2(lat).min(LAT_BUCKETS - 1)) {
        *h += 1;
    }
    if !requeued && let Some(sh) = shared(dev) {
        atomic_add(&mut sh.inflight, -1);
    }
    Ok(())
}

#[tracepoint]
pub fn block_rq_requeue(ctx: TracePointContext) -> u32 {
    let _ = (|| -> Result<(), i32> {
        let l = layout();
        let dev: u32 = read(&ctx, l.requeue_dev)?;
        if !watched(dev) {
            return Ok(());
        }
        let sector: u64 = read(&ctx, l.requeue_sector)?;
        let s = stats(dev).ok_or(-1i32)?;
        s.requeues += 1;
        // The request goes back to the queue: no longer at the device.
        // Its entry stays, marked, so its next issue is not counted as a
        // new request and its latency runs from the first issue.
        let key = ReqKey {
            dev,
            _pad: 0,
            sector,
        };
        if let Some(t) = START.get_ptr_mut(&key) {
            let t0 = unsafe { *t };
            if t0 & REQUEUED == 0 {
                unsafe { *t = t0 | REQUEUED };
                if let Some(sh) = shared(dev) {
                    atomic_add(&mut sh.inflight, -1);
                }
            }
        }
        Ok(())
    })();
    0
}

/// Counts one event on a watched device, reading only its dev field.
#[inline(always)]
fn count(ctx: &TracePointContext, dev_off: u32, f: impl FnOnce(&mut DevStats)) {
    if let Ok(dev) = read::<u32>(ctx, dev_off) {
        if watched(dev) {
            if let Some(s) = stats(dev) {
                f(s);
            }
        }
    }
}

#[tracepoint]
pub fn block_rq_insert(ctx: TracePointContext) -> u32 {
    count(&ctx, layout().insert_dev, |s| s.inserts += 1);
    0
}

#[tracepoint]
pub fn block_rq_merge(ctx: TracePointContext) -> u32 {
    count(&ctx, layout().merge_dev, |s| s.rq_merges += 1);
    0
}

#[tracepoint]
pub fn block_bio_backmerge(ctx: TracePointContext) -> u32 {
    count(&ctx, layout().backmerge_dev, |s| s.bio_backmerges += 1);
    0
}

#[tracepoint]
pub fn block_bio_frontmerge(ctx: TracePointContext) -> u32 {
    count(&ctx, layout().frontmerge_dev, |s| s.bio_frontmerges += 1);
    0
}

#[tracepoint]
pub fn block_bio_queue(ctx: TracePointContext) -> u32 {
    let _ = (|| -> Result<(), i32> {
        let l = layout();
        let dev: u32 = read(&ctx, l.bio_queue_dev)?;
        if !watched(dev) {
            return Ok(());
        }
        let nr: u32 = read(&ctx, l.bio_queue_nr_sector)?;
        let sector: u64 = read(&ctx, l.bio_queue_sector)?;
        if let Some(s) = stats(dev) {
            s.bios += 1;
            if nr > 0
                && let Some(sh) = shared(dev)
            {
                if sh.next_bio_sector == sector {
                    s.bio_sequential += 1;
                } else {
                    s.bio_random += 1;
                }
                sh.next_bio_sector = sector + nr as u64;
            }
        }
        // bio_queue runs in the submitter's context: its cgroup is the one
        // the I/O is charged to.
        let key = CgroupKey {
            dev,
            _pad: 0,
            cgroup_id: unsafe { bpf_get_current_cgroup_id() },
        };
        let add = nr as u64 * 512;
        if let Some(c) = CGROUPS.get_ptr_mut(&key) {
            unsafe {
                (*c).bios += 1;
                (*c).bytes += add;
            }
        } else {
            let _ = CGROUPS.insert(
                &key,
                &CgroupStats {
                    bios: 1,
                    bytes: add,
                },
                BPF_NOEXIST as u64,
            );
        }
        Ok(())
    })();
    0
}

#[tracepoint]
pub fn block_rq_remap(ctx: TracePointContext) -> u32 {
    let _ = (|| -> Result<(), i32> {
        let l = layout();
        let path: u32 = read(&ctx, l.remap_dev)?;
        let map: u32 = read(&ctx, l.remap_old_dev)?;
        if !watched(path) && !watched(map) {
            return Ok(());
        }
        if unsafe { REMAPS.get(&path) }.copied() != Some(map) {
            let _ = REMAPS.insert(&path, &map, 0);
        }
        if let Some(s) = stats(path) {
            s.remapped += 1;
        }
        Ok(())
    })();
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
