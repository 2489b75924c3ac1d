//! The watch list: each watched device has a slot in the programs' maps,
//! found from its dev_t by open addressing, and its sysfs files kept open.
use aya::maps::PerCpuValues;
use pathpilot_common::{
    CgroupCache, CgroupKey, DevShared, MAX_SLOTS, SLOT_EMPTY, SLOT_GONE, SLOT_PROBES, Slot,
    slot_home,
};

use super::{ObserveError, Observer, map_err};
use crate::blockdev::{self, BlockDev, DevNum};

/// Requests in flight in the kernel's own count (`/sys/block/X/inflight`,
/// reads and writes).
fn inflight_of(text: &str) -> u64 {
    text.split_whitespace()
        .filter_map(|v| v.parse::<u64>().ok())
        .sum()
}

impl Observer {
    pub(super) fn slot_of(&self, dev: u32) -> Option<u32> {
        let home = slot_home(dev);
        (0..SLOT_PROBES)
            .map(|i| (home + i) & (MAX_SLOTS - 1))
            .take_while(|s| self.table[*s as usize] != SLOT_EMPTY)
            .find(|s| self.table[*s as usize] == dev)
    }

    pub(super) fn zeros<T: aya::Pod>(&self, v: T) -> Result<PerCpuValues<T>, ObserveError> {
        PerCpuValues::try_from(vec![v; self.ncpus])
            .map_err(|e| ObserveError::Map("per-CPU", e.to_string()))
    }

    /// Clears a slot's counters (a slot is reused by another device).
    pub(super) fn reset_slot(&mut self, slot: u32) -> Result<(), ObserveError> {
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
    pub(super) fn watch_present(&mut self) {
        let Ok(dir) = std::fs::read_dir("/sys/block") else {
            return;
        };
        for e in dir.flatten() {
            if let Some(b) = BlockDev::by_name(&e.file_name().to_string_lossy()) {
                let _ = self.watch(b.dev);
            }
        }
    }

    /// A watched device's sysfs attribute, through its kept file.
    pub(super) fn sysfs_attr(&mut self, dev: DevNum, attr: &'static str) -> Option<String> {
        self.sysfs_files
            .read((dev.kernel(), attr), || dev.sysfs().join(attr))
            .ok()
    }

    /// Closes a device's kept sysfs files.
    pub(super) fn forget_files(&mut self, k: u32) {
        self.sysfs_files.retain(|(d, _)| *d != k);
    }
}
