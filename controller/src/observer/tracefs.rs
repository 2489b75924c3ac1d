//! Field offsets of the block tracepoints, read from tracefs at load time:
//! the programs read the classic tracepoints' fields at built-in offsets
//! (see `REC_DEV`), and a kernel that puts them elsewhere is refused here.
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use pathpilot_common::{Layout, REC_DEV, REC_NR_SECTOR, REC_SECTOR};

use super::ObserveError;

const CANDIDATES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Finds tracefs, mounting it at /sys/kernel/tracing when nothing is mounted
/// (fresh machines and minimal VMs often have it unmounted; we are root).
pub fn locate() -> Result<PathBuf, ObserveError> {
    for c in CANDIDATES {
        if Path::new(c).join("events/block").is_dir() {
            return Ok(c.into());
        }
    }
    let target = CANDIDATES[0];
    let mounted = std::ffi::CString::new(target)
        .ok()
        .map(|t| unsafe {
            libc::mount(
                c"tracefs".as_ptr(),
                t.as_ptr(),
                c"tracefs".as_ptr(),
                0,
                std::ptr::null(),
            ) == 0
        })
        .unwrap_or(false);
    if mounted && Path::new(target).join("events/block").is_dir() {
        return Ok(target.into());
    }
    Err(ObserveError::NoTracefs(format!(
        "tracefs with block events is not mounted at {} and mounting it failed ({})",
        CANDIDATES.join(" or "),
        std::io::Error::last_os_error()
    )))
}

/// `name -> (offset, size)` of an event's fields, from its format file.
pub fn fields(format: &str) -> HashMap<String, (u32, u32)> {
    let mut out = HashMap::new();
    for line in format.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        let mut decl = None;
        let mut offset = None;
        let mut size = None;
        for part in rest.split(';') {
            let part = part.trim();
            if let Some(v) = part.strip_prefix("offset:") {
                offset = v.parse().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.parse().ok();
            } else if decl.is_none() && !part.is_empty() && !part.contains(':') {
                decl = Some(part);
            }
        }
        // "dev_t dev", "char rwbs[10]", "__data_loc char[] cmd": the name is
        // the last word, without any array suffix.
        let name = decl
            .and_then(|d| d.split_whitespace().last())
            .map(|n| n.split('[').next().unwrap_or(n).to_string());
        if let (Some(n), Some(o), Some(s)) = (name, offset, size) {
            out.insert(n, (o, s));
        }
    }
    out
}

/// Reads one field's offset, checking its size against what the programs
/// read: a kernel whose layout differs fails here with a clear message
/// instead of producing wrong numbers.
fn field(
    root: &Path,
    event: &str,
    name: &str,
    size: u32,
    cache: &mut HashMap<String, HashMap<String, (u32, u32)>>,
) -> Result<u32, ObserveError> {
    if !cache.contains_key(event) {
        let path = root.join("events/block").join(event).join("format");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ObserveError::Layout(format!("cannot read {}: {e}", path.display())))?;
        cache.insert(event.to_string(), fields(&text));
    }
    let (off, sz) = cache[event].get(name).copied().ok_or_else(|| {
        ObserveError::Layout(format!("tracepoint block/{event} has no field '{name}'"))
    })?;
    // rwbs is a char array: the programs read its first 4 bytes.
    if (name == "rwbs" && sz < size) || (name != "rwbs" && sz != size) {
        return Err(ObserveError::Layout(format!(
            "tracepoint block/{event} field '{name}' is {sz} bytes, expected {size}"
        )));
    }
    Ok(off)
}

/// Checks that the classic tracepoints keep the fields the programs read
/// where the programs read them.
fn fixed_fields(
    root: &Path,
    cache: &mut HashMap<String, HashMap<String, (u32, u32)>>,
) -> Result<(), ObserveError> {
    for (event, name, size, at) in [
        ("block_rq_merge", "dev", 4, REC_DEV),
        ("block_bio_queue", "dev", 4, REC_DEV),
        ("block_bio_queue", "sector", 8, REC_SECTOR),
        ("block_bio_queue", "nr_sector", 4, REC_NR_SECTOR),
        ("block_bio_backmerge", "dev", 4, REC_DEV),
        ("block_bio_frontmerge", "dev", 4, REC_DEV),
        ("block_split", "dev", 4, REC_DEV),
    ] {
        let off = field(root, event, name, size, cache)?;
        if off as usize != at {
            return Err(ObserveError::Layout(format!(
                "tracepoint block/{event} field '{name}' is at offset {off}; the probes read it at {at}"
            )));
        }
    }
    Ok(())
}

/// Everything the programs read, located in the running kernel: `struct
/// request` members (the request probes read the request) and `enum
/// req_op` values from BTF; the classic tracepoints' fields are checked
/// against tracefs.
pub fn layout(root: &Path, btf: &super::btf::Btf) -> Result<Layout, ObserveError> {
    fixed_fields(root, &mut HashMap::new())?;
    let bad = |e: String| ObserveError::Layout(format!("kernel BTF: {e}"));
    let member = |s: &str, m: &str| btf.member_offset(s, m).map_err(bad);
    let rq = |m: &str| member("request", m);
    let op = |name: &str| btf.enum_value("req_op", name).map_err(bad);
    let major = member("gendisk", "major")?;
    if member("gendisk", "first_minor")? != major + 4 {
        return Err(ObserveError::Layout(
            "gendisk: first_minor does not follow major".into(),
        ));
    }
    Ok(Layout {
        rq_q: rq("q")?,
        rq_cmd_flags: rq("cmd_flags")?,
        rq_data_len: rq("__data_len")?,
        rq_sector: rq("__sector")?,
        rq_start_time_ns: rq("start_time_ns")?,
        rq_io_start_time_ns: rq("io_start_time_ns")?,
        rq_state: rq("state")?,
        rq_state_idle: btf.enum_value("mq_rq_state", "MQ_RQ_IDLE").map_err(bad)?,
        q_disk: member("request_queue", "disk")?,
        disk_major: major,
        // REQ_OP_BITS is a macro (8 since Linux 4.x), not in BTF.
        op_mask: 0xff,
        op_read: op("REQ_OP_READ")?,
        op_write: op("REQ_OP_WRITE")?,
        op_flush: op("REQ_OP_FLUSH")?,
        op_discard: op("REQ_OP_DISCARD")?,
        op_drv_in: op("REQ_OP_DRV_IN")?,
        op_drv_out: op("REQ_OP_DRV_OUT")?,
        clone_flags: flag_bit(btf, "__REQ_NOMERGE").map_err(bad)?
            | flag_bit(btf, "__REQ_FAILFAST_TRANSPORT").map_err(bad)?,
        rahead_flag: flag_bit(btf, "__REQ_RAHEAD").map_err(bad)?,
        rq_end_io: rq("end_io")?,
    })
}

/// A `cmd_flags` bit of `enum req_flag_bits`. dm-multipath allocates each
/// clone with the original's flags plus REQ_NOMERGE, then adds
/// REQ_FAILFAST_TRANSPORT (drivers/md/dm-mpath.c, multipath_clone_and_map,
/// the same from 4.x to 6.18): see `Layout::clone_flags`.
fn flag_bit(btf: &super::btf::Btf, name: &str) -> Result<u32, String> {
    let b = btf.enum_value("req_flag_bits", name)?;
    if b >= 32 {
        return Err(format!("{name} is bit {b}, beyond cmd_flags' 32 bits"));
    }
    Ok(1 << b)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQUEUE: &str = "name: block_rq_requeue
ID: 2100
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:dev_t dev;\toffset:8;\tsize:4;\tsigned:0;
\tfield:sector_t sector;\toffset:16;\tsize:8;\tsigned:0;
\tfield:unsigned int nr_sector;\toffset:24;\tsize:4;\tsigned:0;
\tfield:unsigned short ioprio;\toffset:28;\tsize:2;\tsigned:0;
\tfield:char rwbs[10];\toffset:30;\tsize:10;\tsigned:0;
\tfield:__data_loc char[] cmd;\toffset:40;\tsize:4;\tsigned:0;

print fmt: \"%d,%d\"
";

    #[test]
    fn parses_a_format_file() {
        let f = fields(REQUEUE);
        assert_eq!(f["dev"], (8, 4));
        assert_eq!(f["sector"], (16, 8));
        assert_eq!(f["rwbs"], (30, 10));
        assert_eq!(f["cmd"], (40, 4));
        assert_eq!(f["common_pid"], (4, 4));
    }

    #[test]
    fn checks_sizes() {
        let dir = std::env::temp_dir().join(format!("pp-tracefs-{}", std::process::id()));
        let ev = dir.join("events/block/block_rq_requeue");
        std::fs::create_dir_all(&ev).unwrap();
        std::fs::write(ev.join("format"), REQUEUE.replace("size:8", "size:4")).unwrap();
        let err = field(&dir, "block_rq_requeue", "sector", 8, &mut HashMap::new()).unwrap_err();
        assert!(err.to_string().contains("is 4 bytes, expected 8"), "{err}");
        let err = field(&dir, "block_rq_requeue", "nope", 4, &mut HashMap::new()).unwrap_err();
        assert!(err.to_string().contains("no field 'nope'"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_record_field_where_the_probes_do_not_read_it_is_refused() {
        let dir = std::env::temp_dir().join(format!("pp-tracefs-fixed-{}", std::process::id()));
        let write = |event: &str, text: &str| {
            let ev = dir.join("events/block").join(event);
            std::fs::create_dir_all(&ev).unwrap();
            std::fs::write(ev.join("format"), text).unwrap();
        };
        for event in [
            "block_rq_merge",
            "block_bio_queue",
            "block_bio_backmerge",
            "block_bio_frontmerge",
            "block_split",
        ] {
            write(event, REQUEUE);
        }
        fixed_fields(&dir, &mut HashMap::new()).expect("fields where the probes read them");
        write(
            "block_bio_queue",
            &REQUEUE.replace("offset:16;\tsize:8", "offset:32;\tsize:8"),
        );
        let err = fixed_fields(&dir, &mut HashMap::new()).unwrap_err();
        assert!(
            err.to_string().contains(
                "block_bio_queue field 'sector' is at offset 32; the probes read it at 16"
            ),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_running_kernel_has_every_field() {
        // Host and VM kernels both must: this is what the probes read.
        let root = locate().expect("tracefs (run as root)");
        let btf = super::super::btf::Btf::from_sys().expect("kernel BTF");
        let l = layout(&root, &btf).expect("layout");
        assert_eq!(l.rq_q, 0);
        assert_eq!(
            (l.op_read, l.op_write, l.op_flush, l.op_discard),
            (0, 1, 2, 3)
        );
        assert!(l.op_drv_in > l.op_discard && l.op_drv_out == l.op_drv_in + 1);
        // Two distinct bits above the operation's 8.
        assert_eq!(l.clone_flags.count_ones(), 2, "{:#x}", l.clone_flags);
        assert_eq!(l.clone_flags & l.op_mask, 0);
        assert_eq!(l.rahead_flag.count_ones(), 1);
        assert_eq!(l.clone_flags & l.rahead_flag, 0);
        assert!(l.rq_end_io > l.rq_sector, "{}", l.rq_end_io);
    }
}
