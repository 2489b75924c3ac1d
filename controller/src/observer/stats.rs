//! Reading STATS, the probes' counters: each slot's counters for every CPU
//! side by side (entry `slot * ncpus + cpu`), one CPU's written only by the
//! programs running on it. Where the whole map is small it is mapped into
//! our memory and read with no syscall (the daemon reads every busy
//! device's counters each window, and a lookup per device would be the
//! largest part of its snapshot). A mapping of an
//! eBPF array shows in the process's RSS whole, so on a machine with many
//! CPUs, where the map is large and syscalls are cheap, a device's
//! counters are one batch lookup instead.
use std::os::fd::{AsFd, AsRawFd};

use aya::maps::{Array, IterableMap, MapData};
use pathpilot_common::{DevStats, MAX_SLOTS};

use super::view::ArrayView;

/// The largest map mapped: 10 possible CPUs at 256 slots.
const MAP_BUDGET: usize = 4 << 20;

/// How the counters are read: [`Access::Auto`] maps the map when it is
/// small; [`Access::Syscalls`] always looks them up (what a machine with
/// many CPUs does; tests ask for it to cover that path here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Auto,
    Syscalls,
}

/// Entries of STATS for `ncpus` possible CPUs.
pub fn entries(ncpus: usize) -> u32 {
    MAX_SLOTS * ncpus as u32
}

pub struct Stats {
    map: Array<MapData, DevStats>,
    view: Option<ArrayView<DevStats>>,
    ncpus: usize,
}

impl Stats {
    pub fn new(
        map: Array<MapData, DevStats>,
        ncpus: usize,
        access: Access,
    ) -> std::io::Result<Self> {
        let len = entries(ncpus);
        let small = len as usize * std::mem::size_of::<DevStats>() <= MAP_BUDGET;
        let view = match access {
            Access::Auto if small => Some(ArrayView::map(map.map(), len)?),
            _ => None,
        };
        Ok(Self { map, view, ncpus })
    }

    /// Whether the counters are read through a mapping.
    pub fn mapped(&self) -> bool {
        self.view.is_some()
    }

    /// A slot's counters on each CPU.
    pub fn per_cpu(&self, slot: u32) -> std::io::Result<Vec<DevStats>> {
        let first = slot * self.ncpus as u32;
        match &self.view {
            Some(v) => (first..first + self.ncpus as u32)
                .map(|i| {
                    v.get(i).ok_or_else(|| {
                        std::io::Error::other(format!("entry {i} beyond the mapping"))
                    })
                })
                .collect(),
            None => {
                let mut out = vec![DevStats::ZERO; self.ncpus];
                lookup_batch(self.map.map(), first, &mut out)?;
                Ok(out)
            }
        }
    }

    /// Zeroes a slot's counters on every CPU (a slot reused by another
    /// device).
    pub fn reset(&mut self, slot: u32) -> Result<(), aya::maps::MapError> {
        let first = slot * self.ncpus as u32;
        for i in first..first + self.ncpus as u32 {
            self.map.set(i, DevStats::ZERO, 0)?;
        }
        Ok(())
    }
}

/// `BPF_MAP_LOOKUP_BATCH` in `enum bpf_cmd`.
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;

/// The `batch` member of `union bpf_attr`.
#[repr(C)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Entries `first..first + out.len()` of an array map, in one syscall
/// (Linux 5.7 and later). An array's batch starts after the key given.
fn lookup_batch<T: aya::Pod>(map: &MapData, first: u32, out: &mut [T]) -> std::io::Result<()> {
    let prev = first.wrapping_sub(1);
    let mut next = 0u32;
    let mut keys = vec![0u32; out.len()];
    let mut attr = BatchAttr {
        in_batch: if first == 0 {
            0
        } else {
            &prev as *const u32 as u64
        },
        out_batch: &mut next as *mut u32 as u64,
        keys: keys.as_mut_ptr() as u64,
        values: out.as_mut_ptr() as u64,
        count: out.len() as u32,
        map_fd: map.fd().as_fd().as_raw_fd() as u32,
        elem_flags: 0,
        flags: 0,
    };
    // SAFETY: every pointer in attr is valid for the sizes the kernel
    // uses: keys and values for `count` entries of the map's key and
    // value size (T is the map's value type; an array's values are
    // 8-byte multiples, as T's size is), the batch tokens for one key.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_LOOKUP_BATCH,
            &mut attr as *mut BatchAttr,
            std::mem::size_of::<BatchAttr>(),
        )
    };
    // ENOENT: the batch reached the map's end, full or not.
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOENT) {
            return Err(e);
        }
    }
    if attr.count as usize != out.len() {
        return Err(std::io::Error::other(format!(
            "batch lookup of {} entries from {first} gave {}",
            out.len(),
            attr.count
        )));
    }
    Ok(())
}
