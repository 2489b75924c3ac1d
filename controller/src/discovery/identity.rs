//! What multipath-tools knows of a path beyond its WWID, read from sysfs
//! the way `libmultipath/discovery.c` finds it: the path's place in sysfs
//! (which orders its paths), ALUA support from the INQUIRY data, the
//! device handler attached, the serial number, the transport and its
//! target node name, and udev's property names (for `property`
//! blacklists). Read only where a map is planned: the daemon's periodic
//! scans do without.
use std::{fs, path::Path};

use serde::Serialize;

/// Target port group support (INQUIRY byte 5, bits 4-5): ALUA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tpgs {
    None,
    Implicit,
    Explicit,
    Both,
    /// The INQUIRY data could not be read.
    Unknown,
}

impl Tpgs {
    /// From a standard INQUIRY response.
    pub fn from_inquiry(inq: &[u8]) -> Tpgs {
        match inq.get(5).map(|b| (b >> 4) & 3) {
            Some(0) => Tpgs::None,
            Some(1) => Tpgs::Implicit,
            Some(2) => Tpgs::Explicit,
            Some(_) => Tpgs::Both,
            None => Tpgs::Unknown,
        }
    }

    /// The array speaks ALUA on this path.
    pub fn supported(self) -> bool {
        matches!(self, Tpgs::Implicit | Tpgs::Explicit | Tpgs::Both)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Identity {
    /// The device's path under /sys/devices (udev's order of devices,
    /// which is multipath-tools' order of paths).
    pub devpath: String,
    pub tpgs: Tpgs,
    /// The SCSI device handler attached (`alua`, `rdac`, ...; never
    /// `detached`).
    pub dh_state: Option<String>,
    /// VPD page 0x80's serial number, as the array gives it.
    pub serial: Option<String>,
    /// The transport as multipath.conf's `protocol` names it (`scsi:fcp`,
    /// `scsi:iscsi`, `scsi:sas`, `scsi:unspec`, `nvme:tcp`, ...).
    pub protocol: String,
    /// The target's node name (FC node, iSCSI target name, SAS address);
    /// empty where the transport has none.
    pub node_name: String,
}

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

impl Identity {
    /// Reads `/sys/class/block/<name>`'s identity; `None` if it vanished.
    pub fn read(name: &str) -> Option<Identity> {
        Identity::read_at(&Path::new("/sys/class/block").join(name), name)
    }

    fn read_at(sys: &Path, name: &str) -> Option<Identity> {
        let devpath = fs::canonicalize(sys).ok()?.to_string_lossy().into_owned();
        let dev = sys.join("device");
        let tpgs = fs::read(dev.join("inquiry"))
            .map(|i| Tpgs::from_inquiry(&i))
            .unwrap_or(Tpgs::Unknown);
        let dh_state = read_trim(&dev.join("dh_state")).filter(|s| s != "detached");
        let serial = fs::read(dev.join("vpd_pg80"))
            .ok()
            .and_then(|p| serial_from_pg80(&p));
        let (protocol, node_name) = if name.starts_with("nvme") {
            let t = read_trim(&dev.join("transport")).unwrap_or_else(|| "unspec".into());
            (format!("nvme:{t}"), String::new())
        } else {
            transport(Path::new(&devpath))
        };
        Some(Identity {
            devpath,
            tpgs: if name.starts_with("nvme") {
                Tpgs::None
            } else {
                tpgs
            },
            dh_state,
            serial,
            protocol,
            node_name,
        })
    }
}

/// The serial number in a VPD page 0x80.
pub fn serial_from_pg80(page: &[u8]) -> Option<String> {
    if page.len() < 4 || page[1] != 0x80 {
        return None;
    }
    let len = page[3] as usize;
    let s = page.get(4..4 + len)?;
    Some(
        String::from_utf8_lossy(s)
            .trim_end_matches('\0')
            .to_string(),
    )
}

/// The transport and target node name of the SCSI disk at `devpath`
/// (`/sys/devices/.../H:C:T:L/block/sdX`), in `sysfs_get_tgt_nodename`'s
/// order: SAS, USB, FC, iSCSI, ATA, else unspecified.
fn transport(devpath: &Path) -> (String, String) {
    let ancestors: Vec<&Path> = devpath.ancestors().collect();
    // The SCSI device: the ancestor named H:C:T:L.
    let Some(sdev) = ancestors.iter().find(|p| {
        p.file_name().and_then(|f| f.to_str()).is_some_and(|f| {
            f.split(':').count() == 4 && f.split(':').all(|n| n.parse::<u32>().is_ok())
        })
    }) else {
        return ("undef".into(), String::new());
    };
    let name_of = |p: &Path| {
        p.file_name()
            .and_then(|f| f.to_str())
            .unwrap_or("")
            .to_string()
    };
    let up: Vec<&Path> = sdev.ancestors().skip(1).collect();
    if let Some(addr) = read_trim(&sdev.join("sas_address"))
        && up.iter().any(|p| name_of(p).starts_with("end_device-"))
    {
        return ("scsi:sas".into(), addr);
    }
    if let Some(u) = up.iter().find(|p| {
        fs::read_link(p.join("subsystem"))
            .ok()
            .is_some_and(|s| s.file_name().is_some_and(|n| n == "usb"))
    }) {
        return ("scsi:usb".into(), name_of(u));
    }
    if let Some(r) = up
        .iter()
        .map(|p| name_of(p))
        .find(|n| n.starts_with("rport-"))
        && let Some(node) = read_trim(
            &Path::new("/sys/class/fc_remote_ports")
                .join(&r)
                .join("node_name"),
        )
    {
        return ("scsi:fcp".into(), node);
    }
    if let Some(s) = up.iter().map(|p| name_of(p)).find(|n| {
        n.strip_prefix("session")
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
    }) && let Some(t) = read_trim(
        &Path::new("/sys/class/iscsi_session")
            .join(&s)
            .join("targetname"),
    ) {
        return ("scsi:iscsi".into(), t);
    }
    if let Some(n) = up.iter().map(|p| name_of(p)).find_map(|n| {
        n.strip_prefix("ata")
            .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            .map(str::to_string)
    }) {
        return ("scsi:ata".into(), format!("ata-{n}.00"));
    }
    ("scsi:unspec".into(), String::new())
}

/// udev's property names for a device, where udev has a database for it
/// (`None` without one: no udevd ran, and multipath-tools then has only
/// the kernel's few, none of them its `uid_attribute`).
pub fn udev_properties(name: &str, dev: crate::blockdev::DevNum) -> Option<Vec<String>> {
    if !Path::new(&format!("/run/udev/data/b{dev}")).exists() {
        return None;
    }
    let d = udev::Device::from_syspath(&Path::new("/sys/class/block").join(name)).ok()?;
    Some(
        d.properties()
            .map(|p| p.name().to_string_lossy().into_owned())
            .collect(),
    )
}

/// `path_compare`: paths compared component by component, the order in
/// which udev enumerates devices (`sdb` under `host10` sorts before one
/// under `host2`, as strings do).
pub fn devpath_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.split('/')
        .filter(|c| !c.is_empty())
        .cmp(b.split('/').filter(|c| !c.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tpgs_from_inquiry() {
        let mut inq = vec![0u8; 36];
        assert_eq!(Tpgs::from_inquiry(&inq), Tpgs::None);
        inq[5] = 0x10;
        assert_eq!(Tpgs::from_inquiry(&inq), Tpgs::Implicit);
        inq[5] = 0x30;
        assert!(Tpgs::from_inquiry(&inq).supported());
        assert_eq!(Tpgs::from_inquiry(&inq[..3]), Tpgs::Unknown);
    }

    #[test]
    fn serials_and_devpath_order() {
        let mut p = vec![0, 0x80, 0, 9];
        p.extend_from_slice(b"MPATHLUN0");
        assert_eq!(serial_from_pg80(&p).as_deref(), Some("MPATHLUN0"));
        assert_eq!(serial_from_pg80(&[0, 0x83, 0, 0]), None);
        assert_eq!(serial_from_pg80(&[0, 0x80, 0, 9, b'x']), None);
        let mut v = [
            "/sys/devices/platform/virtio-mmio.2/virtio2/host2/target2:0:1/2:0:1:0/block/sdb",
            "/sys/devices/platform/virtio-mmio.10/virtio10/host9/target9:0:0/9:0:0:0/block/sda",
            "/sys/devices/platform/virtio-mmio.1/virtio1/host1/target1:0:0/1:0:0:0/block/sdc",
        ];
        v.sort_by(|a, b| devpath_order(a, b));
        assert_eq!(
            v.iter()
                .map(|p| p.rsplit('/').next().unwrap())
                .collect::<Vec<_>>(),
            ["sdc", "sda", "sdb"]
        );
    }

    #[test]
    fn a_missing_device_has_no_identity() {
        assert_eq!(Identity::read("pp-no-such-disk"), None);
    }
}
