//! `DM_TABLE_STATUS` (a map's table, or its status) with a buffer sized to
//! the answer. The crate passes 16 KiB each way for every ioctl: zeroed
//! here, copied in by the kernel, allocated and cleared there, for an
//! answer of a few hundred bytes. The daemon reads every map's status each
//! checker interval and a map's table each window while a trial runs; at
//! 16 maps in the emulated guest that copying was a tenth of its CPU.
//! The header is written and read by its fields' offsets in
//! `linux/dm-ioctl.h`; the one unsafe step is the ioctl itself.
use std::{
    fs::File,
    os::fd::AsRawFd,
    sync::atomic::{AtomicUsize, Ordering},
};

use super::Target;

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

pub const STATUS_TABLE_FLAG: u32 = 1 << 4;
const BUFFER_FULL_FLAG: u32 = 1 << 8;
pub const NOFLUSH_FLAG: u32 = 1 << 11;

/// `_IOWR(DM_IOCTL, DM_TABLE_STATUS_CMD, struct dm_ioctl)`.
const DM_TABLE_STATUS: libc::c_ulong =
    (3 << 30) | ((HDR as libc::c_ulong) << 16) | (0xfd << 8) | 12;

/// Interface 4.0.0 has DM_TABLE_STATUS; the kernel answers with its own.
const ABI: [u32; 3] = [4, 0, 0];

/// The first buffer's size: the largest answer yet (a map's table and
/// status grow with its paths), at least a table of a few paths.
static FIRST: AtomicUsize = AtomicUsize::new(2048);

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
    let mut size = FIRST.load(Ordering::Relaxed).max(HDR + SPEC);
    loop {
        let mut buf = request(name, flags, size);
        // SAFETY: the request code's size is the header's, and buf holds
        // `data_size` (= buf.len()) bytes, which the kernel reads and
        // writes no further than.
        let r = unsafe { libc::ioctl(control.as_raw_fd(), DM_TABLE_STATUS, buf.as_mut_ptr()) };
        if r < 0 {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            return Err(Failure::Errno(e));
        }
        if u32_at(&buf, FLAGS) & BUFFER_FULL_FLAG == 0 {
            FIRST.fetch_max(size, Ordering::Relaxed);
            return parse(&buf);
        }
        size = size
            .checked_mul(2)
            .filter(|s| *s <= u32::MAX as usize)
            .ok_or(Failure::Malformed(
                "an answer larger than an ioctl can carry",
            ))?;
    }
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
    let start = u32_at(buf, DATA_START) as usize;
    let end = (u32_at(buf, DATA_SIZE) as usize).min(buf.len());
    let data = buf
        .get(start..end.max(start))
        .ok_or(Failure::Malformed("data_start past the buffer"))?;
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
        // _IOWR(0xfd, 12, struct dm_ioctl), as libdevmapper sends it.
        assert_eq!(DM_TABLE_STATUS, 0xc138_fd0c);
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
