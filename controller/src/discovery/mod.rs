//! Finding paths: block devices, their WWIDs and identity, grouped by WWID.
//!
//! The WWID is udev's `ID_SERIAL` (what multipath-tools uses, so maps line
//! up with `multipath -ll` and udev rules). Where udev has no database for a
//! device (no udevd, as in the testbed), the same string is derived from
//! sysfs: VPD page 0x83, then `device/wwid`.
use std::{
    collections::{BTreeMap, HashSet},
    fs,
    path::{Path, PathBuf},
};

use serde::Serialize;

use crate::blockdev::DevNum;

pub mod alua;
pub mod filter;
pub mod identity;
pub mod naming;
pub mod uevent;
pub mod vpd;

pub use filter::{Filter, Rule, Subject};

/// Where a path's WWID came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WwidSource {
    /// A udev database property (`ID_SERIAL`, or `ID_WWN` for NVMe).
    Udev,
    /// sysfs `device/vpd_pg83`, decoded as scsi_id does.
    VpdPg83,
    /// sysfs `device/wwid` (or `wwid` for NVMe), converted.
    SysfsWwid,
}

/// A block device that can be (or is) a path of a map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PathDevice {
    /// Kernel name, `sdb`.
    pub name: String,
    pub dev: DevNum,
    pub wwid: Option<String>,
    pub wwid_source: Option<WwidSource>,
    pub vendor: String,
    pub model: String,
    pub rev: String,
    /// SCSI address `H:C:T:L`.
    pub hctl: Option<String>,
    pub size_sectors: u64,
    /// sysfs `device/state` (`running`, `offline`, ...).
    pub state: Option<String>,
    /// Devices stacked on this one (`dm-0`).
    pub holders: Vec<String>,
    /// The path's ALUA state, on an array that reports one.
    pub alua: Option<alua::Alua>,
}

impl PathDevice {
    /// Reads everything about `/sys/block/<name>`; `None` if it vanished.
    pub fn read(name: &str) -> Option<Self> {
        let sys = Path::new("/sys/class/block").join(name);
        let dev: DevNum = read_trim(&sys.join("dev"))?.parse().ok()?;
        let devdir = sys.join("device");
        let attr = |f: &str| read_trim(&devdir.join(f)).unwrap_or_default();
        let (wwid, wwid_source) = match wwid_of(name, dev, &sys) {
            Some((w, s)) => (Some(w), Some(s)),
            None => (None, None),
        };
        let hctl = fs::canonicalize(&devdir)
            .ok()
            .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
            .filter(|s| {
                s.split(':').count() == 4 && s.split(':').all(|n| n.parse::<u32>().is_ok())
            });
        Some(PathDevice {
            name: name.to_string(),
            dev,
            wwid,
            wwid_source,
            vendor: attr("vendor"),
            model: attr("model"),
            rev: attr("rev"),
            hctl,
            size_sectors: read_trim(&sys.join("size"))
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            state: read_trim(&devdir.join("state")),
            holders: list_dir(&sys.join("holders")),
            alua: alua::Alua::read(&sys),
        })
    }

    /// Whether the device answers I/O as far as sysfs knows (the SCSI
    /// device state; a real checker sends TUR).
    pub fn online(&self) -> bool {
        self.state.as_deref().is_none_or(|s| s == "running")
    }
}

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn list_dir(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(p)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn wwid_of(name: &str, dev: DevNum, sys: &Path) -> Option<(String, WwidSource)> {
    // udev's database only exists where udevd ran; the crate then reads
    // /run/udev/data/b<M:m>.
    if Path::new(&format!("/run/udev/data/b{dev}")).exists()
        && let Ok(d) = udev::Device::from_syspath(sys)
    {
        let key = if name.starts_with("nvme") {
            "ID_WWN"
        } else {
            "ID_SERIAL"
        };
        if let Some(v) = d.property_value(key).and_then(|v| v.to_str())
            && !v.trim().is_empty()
        {
            return Some((v.trim().to_string(), WwidSource::Udev));
        }
    }
    if let Ok(page) = fs::read(sys.join("device/vpd_pg83"))
        && let Some(w) = vpd::wwid_from_pg83(&page)
    {
        return Some((w, WwidSource::VpdPg83));
    }
    if name.starts_with("nvme") {
        // multipath-tools takes NVMe's wwid attribute verbatim.
        return read_trim(&sys.join("wwid"))
            .filter(|w| !w.is_empty())
            .map(|w| (w, WwidSource::SysfsWwid));
    }
    read_trim(&sys.join("device/wwid"))
        .and_then(|w| vpd::wwid_from_sysfs_wwid(&w))
        .map(|w| (w, WwidSource::SysfsWwid))
}

/// A device left out, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Excluded {
    pub name: String,
    pub reason: String,
}

/// Paths sharing one WWID: one LUN.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Lun {
    pub wwid: String,
    /// Sorted by name as the kernel orders disks (sda..sdz, sdaa..).
    pub paths: Vec<PathDevice>,
}

impl Lun {
    /// dm devices already stacked on any of the paths.
    pub fn holders(&self) -> Vec<String> {
        let set: HashSet<&String> = self.paths.iter().flat_map(|p| &p.holders).collect();
        let mut v: Vec<String> = set.into_iter().cloned().collect();
        v.sort();
        v
    }

    /// `vendor,model` of the first path, as `multipath -ll` shows it.
    pub fn vendor_model(&self) -> String {
        self.paths
            .first()
            .map(|p| format!("{},{}", p.vendor, p.model))
            .unwrap_or_default()
    }
}

/// The result of a scan: LUNs by WWID, and what was left out.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Scan {
    pub luns: Vec<Lun>,
    pub excluded: Vec<Excluded>,
}

impl Scan {
    pub fn lun(&self, wwid: &str) -> Option<&Lun> {
        self.luns.iter().find(|l| l.wwid == wwid)
    }
}

/// Kernel disk-name order: shorter first, then alphabetical (sdz < sdaa).
pub fn disk_order(a: &str, b: &str) -> std::cmp::Ordering {
    (a.len(), a).cmp(&(b.len(), b))
}

/// Which devices a scan reads in full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Held {
    /// Every device, and what is stacked on it (what an admin listing
    /// paths wants to see).
    Read,
    /// Only devices nothing is stacked on; the others are excluded
    /// unread. A daemon's scan for new paths and new LUNs: a held device
    /// can join nothing and found nothing, and reading one in full (its
    /// identity, VPD and ALUA view, some hundred syscalls) would make the
    /// daemon's periodic full scan cost in proportion to every path it
    /// already holds.
    Skip,
}

/// Scans `/sys/block` and groups usable devices by WWID.
pub fn scan(filter: &Filter) -> Scan {
    scan_root(Path::new("/sys/block"), filter, Held::Read)
}

/// [`scan`] of the devices nothing is stacked on ([`Held::Skip`]).
pub fn scan_free(filter: &Filter) -> Scan {
    scan_root(Path::new("/sys/block"), filter, Held::Skip)
}

fn scan_root(root: &Path, filter: &Filter, held: Held) -> Scan {
    let mut names = list_dir(root);
    names.sort_by(|a, b| disk_order(a, b));
    let mut by_wwid: BTreeMap<String, Vec<PathDevice>> = BTreeMap::new();
    let mut excluded = Vec::new();
    for name in names {
        let mut skip = |reason: String| {
            excluded.push(Excluded {
                name: name.clone(),
                reason,
            })
        };
        let sys: PathBuf = root.join(&name);
        if sys.join("partition").exists() {
            skip("a partition".into());
            continue;
        }
        if sys.join("dm").is_dir() {
            skip("a device-mapper device".into());
            continue;
        }
        if held == Held::Skip {
            let holders = list_dir(&sys.join("holders"));
            if !holders.is_empty() {
                skip(format!("in use by {}", holders.join(" ")));
                continue;
            }
        }
        let Some(p) = PathDevice::read(&name) else {
            skip("vanished while scanning".into());
            continue;
        };
        let props = filter
            .wants_properties()
            .then(|| identity::udev_properties(&p.name, p.dev))
            .flatten();
        let protocol = filter
            .wants_protocol()
            .then(|| identity::Identity::read(&p.name).map(|i| i.protocol))
            .flatten();
        let mut subject = Subject::new(&p.name, p.wwid.as_deref(), &p.vendor, &p.model);
        subject.properties = props.as_deref();
        subject.protocol = protocol.as_deref();
        if let Err(why) = filter.check(&subject) {
            skip(why);
            continue;
        }
        if p.size_sectors == 0 {
            skip("size 0 (no medium)".into());
            continue;
        }
        let Some(w) = p.wwid.clone() else {
            skip("no WWID (no udev ID_SERIAL, no VPD page 0x83 identifier, no device/wwid)".into());
            continue;
        };
        by_wwid.entry(w).or_default().push(p);
    }
    Scan {
        luns: by_wwid
            .into_iter()
            .map(|(wwid, paths)| Lun { wwid, paths })
            .collect(),
        excluded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_names_sort_as_the_kernel_numbers_them() {
        let mut v = vec!["sdaa", "sdb", "sda", "sdz"];
        v.sort_by(|a, b| disk_order(a, b));
        assert_eq!(v, ["sda", "sdb", "sdz", "sdaa"]);
    }

    #[test]
    fn scan_of_an_empty_root_is_empty() {
        let s = scan_root(Path::new("/nonexistent"), &Filter::default(), Held::Read);
        assert!(s.luns.is_empty() && s.excluded.is_empty());
    }

    #[test]
    fn a_scan_of_free_devices_leaves_held_ones_unread() {
        let root = std::env::temp_dir().join(format!("pp-scan-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("ppheld0/holders/dm-7")).unwrap();
        fs::create_dir_all(root.join("ppfree0/holders")).unwrap();
        let why = |held| {
            let s = scan_root(&root, &Filter::default(), held);
            assert!(s.luns.is_empty());
            s.excluded
                .into_iter()
                .map(|e| (e.name, e.reason))
                .collect::<Vec<_>>()
        };
        // Not in /sys/class/block: read in full, each one vanished.
        let gone = "vanished while scanning".to_string();
        assert_eq!(
            why(Held::Read),
            [
                ("ppfree0".into(), gone.clone()),
                ("ppheld0".into(), gone.clone())
            ]
        );
        assert_eq!(
            why(Held::Skip),
            [
                ("ppfree0".into(), gone),
                ("ppheld0".into(), "in use by dm-7".into())
            ]
        );
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn host_scan_excludes_loop_devices() {
        // The host has loop devices and no SCSI disks with WWIDs to speak of;
        // whatever it finds, loop devices must be excluded by the defaults.
        let s = scan(&Filter::default());
        for l in &s.luns {
            assert!(l.paths.iter().all(|p| !p.name.starts_with("loop")));
        }
    }
}
