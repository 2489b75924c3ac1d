//! SCSI TEST UNIT READY through SG_IO, for the one case a read cannot
//! check: a port in ALUA standby. The kernel's alua handler fails reads on
//! it before they reach the array (as designed: standby serves no I/O
//! until the handler activates its group), but a pass-through command
//! still goes out, and the array answers "not ready, standby" while the
//! port is alive. multipath-tools calls such a path a ghost: usable once
//! its group is activated, so it must stay in the map, not be failed.
use std::{fs::File, os::fd::AsRawFd};

/// What the array said.
#[derive(Debug, PartialEq, Eq)]
pub enum Tur {
    Ready,
    /// Alive, in standby (NOT READY, 04h/0Bh).
    Standby,
    /// Something else: the reason.
    Down(String),
}

/// Reads the answer to a TEST UNIT READY: SCSI status and sense data.
pub fn verdict(status: u8, host: u16, driver: u16, sense: &[u8]) -> Tur {
    if host != 0 {
        return Tur::Down(format!("host status {host:#x}"));
    }
    if status == 0 && driver & 0x0f == 0 {
        return Tur::Ready;
    }
    // CHECK CONDITION: fixed (70h/71h) or descriptor (72h/73h) sense.
    let (key, asc, ascq) = match sense.first().map(|b| b & 0x7f) {
        Some(0x70 | 0x71) if sense.len() >= 14 => (sense[2] & 0x0f, sense[12], sense[13]),
        Some(0x72 | 0x73) if sense.len() >= 4 => (sense[1] & 0x0f, sense[2], sense[3]),
        _ => return Tur::Down(format!("SCSI status {status:#x}, no sense data")),
    };
    match (key, asc, ascq) {
        (0x02, 0x04, 0x0b) => Tur::Standby,
        // A unit attention (an ALUA state change, a reset) is the device
        // answering; the caller asks again.
        (0x06, _, _) => Tur::Ready,
        _ => Tur::Down(format!(
            "sense key {key:#x}, ASC/ASCQ {asc:02x}h/{ascq:02x}h"
        )),
    }
}

/// `struct sg_io_hdr` (scsi/sg.h).
#[repr(C)]
struct SgIoHdr {
    interface_id: i32,
    dxfer_direction: i32,
    cmd_len: u8,
    mx_sb_len: u8,
    iovec_count: u16,
    dxfer_len: u32,
    dxferp: *mut libc::c_void,
    cmdp: *const u8,
    sbp: *mut u8,
    timeout: u32,
    flags: u32,
    pack_id: i32,
    usr_ptr: *mut libc::c_void,
    status: u8,
    masked_status: u8,
    msg_status: u8,
    sb_len_wr: u8,
    host_status: u16,
    driver_status: u16,
    resid: i32,
    duration: u32,
    info: u32,
}

const SG_IO: libc::c_ulong = 0x2285;
const SG_DXFER_NONE: i32 = -1;

/// Sends TEST UNIT READY to `/dev/<name>`, asking again after a unit
/// attention (at most three times).
pub fn test_unit_ready(name: &str, timeout_ms: u32) -> Result<Tur, String> {
    let dev = format!("/dev/{name}");
    let f = File::open(&dev).map_err(|e| format!("open {dev}: {e}"))?;
    let mut last = Tur::Ready;
    for _ in 0..3 {
        let cdb = [0u8; 6];
        let mut sense = [0u8; 32];
        let mut h = SgIoHdr {
            interface_id: b'S' as i32,
            dxfer_direction: SG_DXFER_NONE,
            cmd_len: cdb.len() as u8,
            mx_sb_len: sense.len() as u8,
            iovec_count: 0,
            dxfer_len: 0,
            dxferp: std::ptr::null_mut(),
            cmdp: cdb.as_ptr(),
            sbp: sense.as_mut_ptr(),
            timeout: timeout_ms,
            flags: 0,
            pack_id: 0,
            usr_ptr: std::ptr::null_mut(),
            status: 0,
            masked_status: 0,
            msg_status: 0,
            sb_len_wr: 0,
            host_status: 0,
            driver_status: 0,
            resid: 0,
            duration: 0,
            info: 0,
        };
        // SAFETY: h is a valid sg_io_hdr whose pointers (cdb, sense) live
        // across the call; no data buffer is transferred.
        let r = unsafe { libc::ioctl(f.as_raw_fd(), SG_IO, &mut h as *mut SgIoHdr) };
        if r < 0 {
            return Err(format!(
                "TEST UNIT READY on {dev}: {}",
                std::io::Error::last_os_error()
            ));
        }
        let n = (h.sb_len_wr as usize).min(sense.len());
        let unit_attention = h.status != 0
            && n >= 3
            && matches!(sense[0] & 0x7f, 0x70 | 0x71)
            && sense[2] & 0x0f == 0x06;
        last = verdict(h.status, h.host_status, h.driver_status, &sense[..n]);
        if !unit_attention {
            break;
        }
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(key: u8, asc: u8, ascq: u8) -> Vec<u8> {
        let mut s = vec![0u8; 18];
        s[0] = 0x70;
        s[2] = key;
        s[12] = asc;
        s[13] = ascq;
        s
    }

    #[test]
    fn answers_are_read_as_multipath_tools_reads_them() {
        assert_eq!(verdict(0, 0, 0, &[]), Tur::Ready);
        assert_eq!(verdict(2, 0, 0x08, &fixed(2, 4, 0x0b)), Tur::Standby);
        // Descriptor sense says the same.
        assert_eq!(verdict(2, 0, 0x08, &[0x72, 2, 4, 0x0b]), Tur::Standby);
        // Unavailable (04h/0Ch) is down, as is a dead transport.
        assert!(
            matches!(verdict(2, 0, 0x08, &fixed(2, 4, 0x0c)), Tur::Down(r) if r.contains("04h/0ch"))
        );
        assert!(matches!(verdict(0, 0x01, 0, &[]), Tur::Down(_)));
        assert!(matches!(verdict(2, 0, 0x08, &[]), Tur::Down(_)));
        assert_eq!(verdict(2, 0, 0x08, &fixed(6, 0x2a, 6)), Tur::Ready);
    }
}
