//! WWIDs as multipath-tools computes them: udev's `ID_SERIAL` for SCSI,
//! which `scsi_id` derives from VPD page 0x83. Without a udev database we
//! derive the same string from sysfs.

/// The designator types of VPD page 0x83 (SPC-4 7.8.6), as `scsi_id`'s
/// prefix digit.
const T10_VENDOR: u8 = 1;
const EUI64: u8 = 2;
const NAA: u8 = 3;
const SCSI_NAME: u8 = 8;

/// A target port group designator (of the target port, association 1).
const TARGET_PORT_GROUP: u8 = 5;

/// Code sets.
const BINARY: u8 = 1;
const ASCII: u8 = 2;
const UTF8: u8 = 3;

struct Designator<'a> {
    code_set: u8,
    association: u8,
    kind: u8,
    data: &'a [u8],
}

fn designators(page: &[u8]) -> Vec<Designator<'_>> {
    let mut out = Vec::new();
    if page.len() < 4 || page[1] != 0x83 {
        return out;
    }
    let len = u16::from_be_bytes([page[2], page[3]]) as usize;
    let end = (4 + len).min(page.len());
    let mut i = 4;
    while i + 4 <= end {
        let dlen = page[i + 3] as usize;
        let Some(data) = page.get(i + 4..i + 4 + dlen) else {
            break;
        };
        out.push(Designator {
            code_set: page[i] & 0x0f,
            association: (page[i + 1] >> 4) & 0x3,
            kind: page[i + 1] & 0x0f,
            data,
        });
        i += 4 + dlen;
    }
    out
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

/// The WWID `scsi_id --page=0x83` prints for a raw VPD page 0x83 (as in
/// `/sys/block/sdX/device/vpd_pg83`): the designator type as one hex
/// digit, then the identifier (lowercase hex for binary ones). Only
/// designators of the logical unit count; preference follows scsi_id:
/// NAA (registered extended, registered, extended, local), EUI-64, T10
/// vendor id, SCSI name string.
pub fn wwid_from_pg83(page: &[u8]) -> Option<String> {
    let ds: Vec<Designator<'_>> = designators(page)
        .into_iter()
        .filter(|d| d.association == 0 && !d.data.is_empty())
        .collect();
    let naa_rank = |d: &Designator<'_>| match d.data[0] >> 4 {
        6 => 0,
        5 => 1,
        2 => 2,
        3 => 3,
        _ => 4,
    };
    if let Some(d) = ds
        .iter()
        .filter(|d| d.kind == NAA && d.code_set == BINARY)
        .min_by_key(|d| naa_rank(d))
    {
        return Some(format!("{NAA:x}{}", hex(d.data)));
    }
    if let Some(d) = ds.iter().find(|d| d.kind == EUI64 && d.code_set == BINARY) {
        return Some(format!("{EUI64:x}{}", hex(d.data)));
    }
    for kind in [T10_VENDOR, SCSI_NAME] {
        if let Some(d) = ds
            .iter()
            .find(|d| d.kind == kind && matches!(d.code_set, ASCII | UTF8))
        {
            let text = String::from_utf8_lossy(d.data);
            let text = text.trim_end_matches('\0').trim();
            if !text.is_empty() {
                // scsi_id squeezes runs of blanks to one underscore.
                let squeezed: Vec<&str> = text.split_whitespace().collect();
                return Some(format!("{kind:x}{}", squeezed.join("_")));
            }
        }
    }
    None
}

/// The WWID from the kernel's `device/wwid` attribute (`naa.5000c5...`,
/// `eui.…`, `t10.…`), in `scsi_id`'s form.
/// The target port group the page's port belongs to (ALUA arrays report
/// it as a designator of the target port).
pub fn target_port_group(page: &[u8]) -> Option<u16> {
    designators(page)
        .into_iter()
        .find(|d| d.kind == TARGET_PORT_GROUP && d.association == 1 && d.data.len() >= 4)
        .map(|d| u16::from_be_bytes([d.data[2], d.data[3]]))
}

pub fn wwid_from_sysfs_wwid(s: &str) -> Option<String> {
    let s = s.trim().trim_end_matches('\0');
    let (prefix, rest) = s.split_once('.')?;
    if rest.is_empty() {
        return None;
    }
    let digit = match prefix {
        "naa" => NAA,
        "eui" => EUI64,
        "t10" => T10_VENDOR,
        _ => return None,
    };
    if digit == T10_VENDOR {
        let parts: Vec<&str> = rest.split_whitespace().collect();
        return Some(format!("1{}", parts.join("_")));
    }
    if !rest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(format!("{digit:x}{}", rest.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QEMU's scsi-hd with `wwn=0x5000c500deadbeef,serial=MPATHLUN0`: a T10
    /// vendor designator, then the NAA.
    fn qemu_page() -> Vec<u8> {
        let mut p = vec![0x00, 0x83, 0x00, 0x00];
        // T10 vendor id, ASCII, LUN association.
        let t10 = b"QEMU    MPATHLUN0";
        p.extend([0x02, 0x01, 0x00, t10.len() as u8]);
        p.extend_from_slice(t10);
        // NAA, binary, LUN association.
        p.extend([0x01, 0x03, 0x00, 0x08]);
        p.extend([0x50, 0x00, 0xc5, 0x00, 0xde, 0xad, 0xbe, 0xef]);
        let len = (p.len() - 4) as u16;
        p[2..4].copy_from_slice(&len.to_be_bytes());
        p
    }

    #[test]
    fn naa_wins_and_gets_the_prefix_3() {
        assert_eq!(
            wwid_from_pg83(&qemu_page()).as_deref(),
            Some("35000c500deadbeef")
        );
    }

    #[test]
    fn the_target_port_group_is_read() {
        // NAA of the LU, then a target port group designator (type 5,
        // association 1): group 0x14.
        let mut p = vec![0x00, 0x83, 0x00, 0x14];
        p.extend([
            0x01, 0x03, 0x00, 0x08, 0x60, 0x01, 0x40, 0x51, 0xb2, 0xc3, 0xd4, 0xe5,
        ]);
        p.extend([0x01, 0x15, 0x00, 0x04, 0x00, 0x00, 0x00, 0x14]);
        assert_eq!(target_port_group(&p), Some(20));
        assert_eq!(target_port_group(&qemu_page()), None);
    }

    #[test]
    fn target_port_designators_do_not_count() {
        let mut p = vec![0x00, 0x83, 0x00, 0x0c];
        // NAA, association 1 (target port).
        p.extend([0x01, 0x13, 0x00, 0x08, 0x50, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(wwid_from_pg83(&p), None);
    }

    #[test]
    fn naa_registered_extended_beats_registered() {
        let mut p = vec![0x00, 0x83, 0x00, 0x00];
        p.extend([0x01, 0x03, 0x00, 0x08, 0x50, 0, 0, 0, 0, 0, 0, 1]);
        p.extend([
            0x01, 0x03, 0x00, 0x10, 0x60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2,
        ]);
        let len = (p.len() - 4) as u16;
        p[2..4].copy_from_slice(&len.to_be_bytes());
        assert_eq!(
            wwid_from_pg83(&p).as_deref(),
            Some("360000000000000000000000000000002")
        );
    }

    #[test]
    fn eui_and_t10_fallbacks() {
        let mut p = vec![0x00, 0x83, 0x00, 0x0c];
        p.extend([0x01, 0x02, 0x00, 0x08, 0xab, 0xcd, 0, 0, 0, 0, 0, 1]);
        assert_eq!(wwid_from_pg83(&p).as_deref(), Some("2abcd000000000001"));
        let mut p = vec![0x00, 0x83, 0x00, 0x0f];
        p.extend([0x02, 0x01, 0x00, 0x0b]);
        p.extend_from_slice(b"ACME  DISK ");
        assert_eq!(wwid_from_pg83(&p).as_deref(), Some("1ACME_DISK"));
    }

    #[test]
    fn truncated_and_garbage_pages_give_none() {
        assert_eq!(wwid_from_pg83(&[]), None);
        assert_eq!(wwid_from_pg83(&[0, 0x80, 0, 4, 1, 2, 3, 4]), None);
        // Designator claims 8 bytes, only 3 present.
        assert_eq!(
            wwid_from_pg83(&[0, 0x83, 0, 7, 1, 3, 0, 8, 0x50, 1, 2]),
            None
        );
    }

    #[test]
    fn sysfs_wwid_forms() {
        assert_eq!(
            wwid_from_sysfs_wwid("naa.5000c500deadbeef\n").as_deref(),
            Some("35000c500deadbeef")
        );
        assert_eq!(
            wwid_from_sysfs_wwid("naa.5000C500DEADBEEF").as_deref(),
            Some("35000c500deadbeef")
        );
        assert_eq!(wwid_from_sysfs_wwid("eui.0011").as_deref(), Some("20011"));
        assert_eq!(
            wwid_from_sysfs_wwid("t10.QEMU    QEMU HARDDISK").as_deref(),
            Some("1QEMU_QEMU_HARDDISK")
        );
        assert_eq!(wwid_from_sysfs_wwid("naa."), None);
        assert_eq!(wwid_from_sysfs_wwid("naa.xyz"), None);
        assert_eq!(wwid_from_sysfs_wwid("garbage"), None);
    }
}
