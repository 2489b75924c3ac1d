//! The dm ioctls the daemon issues every second or more often, with a
//! buffer sized to the answer: a map's table or status (`DM_TABLE_STATUS`),
//! the list of maps with their event counters (`DM_LIST_DEVICES`), and the
//! arming of the control device's poll (`DM_DEV_ARM_POLL`). The crate
//! passes 16 KiB each way for every ioctl: zeroed here, copied in by the
//! kernel, allocated and cleared there, for an answer of a few hundred
//! bytes. At 16 maps in the emulated guest that copying was a tenth of the
//! daemon's CPU. The header is written and read by its fields' offsets in
//! `linux/dm-ioctl.h`; the one unsafe step is the ioctl itself.
use std::{
    fs::File,
    os::fd::AsRawFd,
    sync::atomic::{AtomicUsize, Ordering},
};

use super::{MapEntry, Target};
use crate::blockdev::DevNum;

/// `struct dm_ioctl`: its size, and its fields' offsets.
const HDR: usize = 312;
const VERSION: usize = 0;
const DATA_SIZE: usize = 12;
const DATA_START: usize = 16;
const TARGET_COUNT: usize = 20;
const FLAGS: usize = 28;
const NAME: usize = 48;
const NAME_LEN: usize = 128;

/// `struct dm_target_spec`: its size, and its fields' offsets.
const SPEC: usize = 40;
const SPEC_START: usize = 0;
const SPEC_LENGTH: usize = 8;
const SPEC_NEXT: usize = 20;
const SPEC_TYPE: usize = 24;
const TYPE_LEN: usize = 16;

/// `struct dm_name_list`: its fields' offsets (the name runs from `NL_NAME`).
const NL_DEV: usize = 0;
const NL_NEXT: usize = 8;
const NL_NAME: usize = 12;

pub const STATUS_TABLE_FLAG: u32 = 1 << 4;
const BUFFER_FULL_FLAG: u32 = 1 << 8;
pub const NOFLUSH_FLAG: u32 = 1 << 11;

/// The commands, by their numbers in `enum { DM_VERSION_CMD, ... }`.
const LIST_DEVICES_CMD: u8 = 2;
const TABLE_STATUS_CMD: u8 = 12;
const DEV_ARM_POLL_CMD: u8 = 16;

/// `_IOWR(DM_IOCTL, cmd, struct dm_ioctl)`.
const fn request_code(cmd: u8) -> libc::c_ulong {
    (3 << 30) | ((HDR as libc::c_ulong) << 16) | (0xfd << 8) | cmd as libc::c_ulong
}

/// Interface 4.0.0 has every command here; the kernel answers with its own.
const ABI: [u32; 3] = [4, 0, 0];

/// The interface from which a list carries each map's event counter.
const EVENT_NR_ABI: (u32, u32) = (4, 37);

/// Each command's first buffer: the largest answer yet (a map's table and
/// status grow with its paths, the list with the maps), at least a table
/// of a few paths.
static FIRST_TABLE: AtomicUsize = AtomicUsize::new(2048);
static FIRST_LIST: AtomicUsize = AtomicUsize::new(2048);

/// Why the ioctl failed: its errno, or an answer that does not parse.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    Errno(i32),
    Malformed(&'static str),
}

/// The targets of `name`'s live table (`STATUS_TABLE_FLAG`) or their
/// status lines (`NOFLUSH_FLAG`: status of targets with metadata must not
/// write; harmless here).
pub fn table_status(control: &File, name: &str, flags: u32) -> Result<Vec<Target>, Failure> {
    parse(&call(control, TABLE_STATUS_CMD, name, flags, &FIRST_TABLE)?)
}

/// Every map: its name, device and (kernels with interface 4.37 or later)
/// event counter, in the kernel's order (by name).
pub fn list_devices(control: &File) -> Result<Vec<MapEntry>, Failure> {
    parse_list(&call(control, LIST_DEVICES_CMD, "", 0, &FIRST_LIST)?)
}

/// Arms the control device's poll: it wakes on any map's event after this.
pub fn arm_poll(control: &File) -> Result<(), Failure> {
    let mut buf = request("", 0, HDR);
    ioctl(control, DEV_ARM_POLL_CMD, &mut buf)
}

/// `cmd` for `name` in a buffer of the size `first` remembers, doubled
/// until the answer fits; the answer.
fn call(
    control: &File,
    cmd: u8,
    name: &str,
    flags: u32,
    first: &AtomicUsize,
) -> Result<Vec<u8>, Failure> {
    let mut size = first.load(Ordering::Relaxed).max(HDR + SPEC);
    loop {
        let mut buf = request(name, flags, size);
        ioctl(control, cmd, &mut buf)?;
        if u32_at(&buf, FLAGS) & BUFFER_FULL_FLAG == 0 {
            first.fetch_max(size, Ordering::Relaxed);
            return Ok(buf);
        }
        size = size
            .checked_mul(2)
            .filter(|s| *s <= u32::MAX as usize)
            .ok_or(Failure::Malformed(
                "an answer larger than an ioctl can carry",
            ))?;
    }
}

fn ioctl(control: &File, cmd: u8, buf: &mut [u8]) -> Result<(), Failure> {
    assert!(buf.len() >= HDR && u32_at(buf, DATA_SIZE) as usize == buf.len());
    // SAFETY: the request code's size is the header's, and buf holds
    // `data_size` (= buf.len(), asserted) bytes, which the kernel reads and
    // writes no further than.
    let r = unsafe { libc::ioctl(control.as_raw_fd(), request_code(cmd), buf.as_mut_ptr()) };
    if r < 0 {
        let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        return Err(Failure::Errno(e));
    }
    Ok(())
}

/// The header of a request for `name` in a buffer of `size` bytes.
fn request(name: &str, flags: u32, size: usize) -> Vec<u8> {
    let mut buf = vec![0u8; size];
    for (i, v) in ABI.iter().enumerate() {
        put_u32(&mut buf, VERSION + 4 * i, *v);
    }
    put_u32(&mut buf, DATA_SIZE, size as u32);
    put_u32(&mut buf, DATA_START, HDR as u32);
    put_u32(&mut buf, FLAGS, flags);
    // dm_name() has checked the length; a NUL stays at the end.
    let n = name.len().min(NAME_LEN - 1);
    buf[NAME..NAME + n].copy_from_slice(&name.as_bytes()[..n]);
    buf
}

/// The targets of an answer: `target_count` specs from `data_start`, each
/// followed by its NUL-terminated text, `next` the offset of the one after.
fn parse(buf: &[u8]) -> Result<Vec<Target>, Failure> {
    let data = data(buf)?;
    let mut out = Vec::new();
    let mut at = 0;
    for _ in 0..u32_at(buf, TARGET_COUNT) {
        let spec = data
            .get(at..at + SPEC)
            .ok_or(Failure::Malformed("a target spec past the answer"))?;
        let text = c_str(&data[at + SPEC..]).ok_or(Failure::Malformed("unterminated params"))?;
        let ty = c_str(&spec[SPEC_TYPE..SPEC_TYPE + TYPE_LEN]).unwrap_or(&spec[SPEC_TYPE..]);
        out.push(Target {
            start: u64_at(spec, SPEC_START),
            length: u64_at(spec, SPEC_LENGTH),
            target_type: String::from_utf8_lossy(ty).into_owned(),
            params: String::from_utf8_lossy(text).into_owned(),
        });
        at = u32_at(spec, SPEC_NEXT) as usize;
    }
    Ok(out)
}

/// The maps of a list: `dm_name_list` entries from `data_start`, each with
/// its NUL-terminated name, then (interface 4.37 on) its event counter at
/// the next 8-byte boundary; `next` the offset of the entry after, 0 on the
/// last. An empty answer is no maps.
fn parse_list(buf: &[u8]) -> Result<Vec<MapEntry>, Failure> {
    let data = data(buf)?;
    let with_event_nr = (u32_at(buf, VERSION), u32_at(buf, VERSION + 4)) >= EVENT_NR_ABI;
    let mut out = Vec::new();
    let mut at = 0;
    while !data.is_empty() {
        let entry = data
            .get(at..at + NL_NAME)
            .ok_or(Failure::Malformed("a map's entry past the answer"))?;
        let name = c_str(&data[at + NL_NAME..]).ok_or(Failure::Malformed("unterminated name"))?;
        let event_nr = if with_event_nr {
            let e = (at + NL_NAME + name.len() + 1).div_ceil(8) * 8;
            let nr = data
                .get(e..e + 4)
                .ok_or(Failure::Malformed("an event counter past the answer"))?;
            Some(u32_at(nr, 0))
        } else {
            None
        };
        out.push(MapEntry {
            name: String::from_utf8_lossy(name).into_owned(),
            dev: decode_dev(u64_at(entry, NL_DEV)),
            event_nr,
        });
        match u32_at(entry, NL_NEXT) as usize {
            0 => break,
            next => at += next,
        }
    }
    Ok(out)
}

/// An answer's data: from `data_start` to `data_size`.
fn data(buf: &[u8]) -> Result<&[u8], Failure> {
    let start = u32_at(buf, DATA_START) as usize;
    let end = (u32_at(buf, DATA_SIZE) as usize).min(buf.len());
    buf.get(start..end.max(start))
        .ok_or(Failure::Malformed("data_start past the buffer"))
}

/// The kernel's `huge_encode_dev`, undone: minor's low byte, major, then
/// the minor's high bits.
fn decode_dev(d: u64) -> DevNum {
    let major = ((d >> 8) & 0xfff) as u32;
    let minor = ((d & 0xff) | ((d >> 12) & 0xfff00)) as u32;
    DevNum::new(major, minor)
}

/// The bytes before the first NUL, if there is one.
fn c_str(b: &[u8]) -> Option<&[u8]> {
    b.iter().position(|c| *c == 0).map(|n| &b[..n])
}

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer as the kernel lays it out (`retrieve_status`): specs
    /// 8-aligned, `next` relative to the data's start.
    fn answer(targets: &[(u64, u64, &str, &str)]) -> Vec<u8> {
        let mut buf = request("mpatha", STATUS_TABLE_FLAG, HDR);
        let mut data = Vec::new();
        for (start, len, ty, text) in targets {
            let at = data.len();
            data.resize(at + SPEC, 0);
            data[at..at + 8].copy_from_slice(&start.to_ne_bytes());
            data[at + 8..at + 16].copy_from_slice(&len.to_ne_bytes());
            data[at + SPEC_TYPE..at + SPEC_TYPE + ty.len()].copy_from_slice(ty.as_bytes());
            data.extend_from_slice(text.as_bytes());
            data.push(0);
            data.resize(data.len().div_ceil(8) * 8, 0);
            let next = data.len() as u32;
            data[at + SPEC_NEXT..at + SPEC_NEXT + 4].copy_from_slice(&next.to_ne_bytes());
        }
        buf.extend_from_slice(&data);
        let size = buf.len() as u32;
        put_u32(&mut buf, DATA_SIZE, size);
        put_u32(&mut buf, TARGET_COUNT, targets.len() as u32);
        buf
    }

    #[test]
    fn the_header_is_the_kernels() {
        let buf = request("mpatha", NOFLUSH_FLAG, 1024);
        assert_eq!(buf.len(), 1024);
        assert_eq!(u32_at(&buf, VERSION), 4);
        assert_eq!(u32_at(&buf, DATA_SIZE), 1024);
        assert_eq!(u32_at(&buf, DATA_START), 312);
        assert_eq!(u32_at(&buf, FLAGS), NOFLUSH_FLAG);
        assert_eq!(&buf[NAME..NAME + 7], b"mpatha\0");
        // _IOWR(0xfd, cmd, struct dm_ioctl), as libdevmapper sends them.
        assert_eq!(request_code(TABLE_STATUS_CMD), 0xc138_fd0c);
        assert_eq!(request_code(LIST_DEVICES_CMD), 0xc138_fd02);
        assert_eq!(request_code(DEV_ARM_POLL_CMD), 0xc138_fd10);
    }

    #[test]
    fn an_answer_parses_into_its_targets() {
        let t = "0 1 alua 1 1 round-robin 0 2 1 8:16 1 8:32 1";
        let got = parse(&answer(&[(0, 2048, "multipath", t), (2048, 8, "zero", "")])).unwrap();
        assert_eq!(
            got,
            vec![
                Target {
                    start: 0,
                    length: 2048,
                    target_type: "multipath".into(),
                    params: t.into()
                },
                Target {
                    start: 2048,
                    length: 8,
                    target_type: "zero".into(),
                    params: String::new()
                }
            ]
        );
        // No table: no targets.
        assert_eq!(parse(&answer(&[])).unwrap(), vec![]);
    }

    /// A list as the kernel's `list_devices` lays it out: each entry
    /// 8-aligned, its event counter and flags after the name, `next`
    /// relative to the entry; answered by interface `minor`.
    fn list_answer(maps: &[(&str, u64, u32)], minor: u32) -> Vec<u8> {
        let mut buf = request("", 0, HDR);
        put_u32(&mut buf, VERSION + 4, minor);
        let mut data = Vec::new();
        let mut last = None;
        for (name, dev, ev) in maps {
            let at = data.len();
            if let Some(l) = last {
                let next = (at - l) as u32;
                data[l + NL_NEXT..l + NL_NEXT + 4].copy_from_slice(&next.to_ne_bytes());
            }
            data.extend_from_slice(&dev.to_ne_bytes());
            data.extend_from_slice(&0u32.to_ne_bytes());
            data.extend_from_slice(name.as_bytes());
            data.push(0);
            data.resize(data.len().div_ceil(8) * 8, 0);
            data.extend_from_slice(&ev.to_ne_bytes());
            data.extend_from_slice(&0u32.to_ne_bytes());
            last = Some(at);
        }
        buf.extend_from_slice(&data);
        let size = buf.len() as u32;
        put_u32(&mut buf, DATA_SIZE, size);
        buf
    }

    #[test]
    fn a_list_parses_into_names_devices_and_event_counters() {
        // 253:3, and a minor past 255 (huge_encode_dev splits it).
        let (d3, d300) = (
            253 << 8 | 3,
            (300 & 0xff) | (253 << 8) | ((300 & !0xff) << 12),
        );
        let maps = [("mpatha", d3, 7), ("a-longer-name", d300, 0)];
        let entry = |name: &str, minor, event_nr| MapEntry {
            name: name.into(),
            dev: DevNum::new(253, minor),
            event_nr,
        };
        assert_eq!(
            parse_list(&list_answer(&maps, 48)).unwrap(),
            vec![
                entry("mpatha", 3, Some(7)),
                entry("a-longer-name", 300, Some(0))
            ]
        );
        // Before interface 4.37 no counters follow the names.
        assert_eq!(
            parse_list(&list_answer(&maps[..1], 36)).unwrap(),
            vec![entry("mpatha", 3, None)]
        );
        assert_eq!(parse_list(&list_answer(&[], 48)).unwrap(), vec![]);
    }

    #[test]
    fn a_truncated_list_is_an_error_not_a_panic() {
        let mut buf = list_answer(&[("mpatha", 253 << 8, 1), ("mpathb", 253 << 8 | 1, 2)], 48);
        let size = (buf.len() - 8) as u32;
        put_u32(&mut buf, DATA_SIZE, size);
        assert!(matches!(parse_list(&buf), Err(Failure::Malformed(_))));
    }

    #[test]
    fn a_truncated_answer_is_an_error_not_a_panic() {
        let mut buf = answer(&[(0, 2048, "multipath", "0 0 1 1 round-robin 0 1 1 8:16 1")]);
        // One more target than the data holds.
        put_u32(&mut buf, TARGET_COUNT, 2);
        assert!(matches!(parse(&buf), Err(Failure::Malformed(_))));
        // Params running off the end.
        let end = buf.len() - 1;
        buf.truncate(end - 7);
        let size = buf.len() as u32;
        put_u32(&mut buf, DATA_SIZE, size);
        put_u32(&mut buf, TARGET_COUNT, 1);
        assert!(matches!(parse(&buf), Err(Failure::Malformed(_))));
    }
}
