//! Where the programs find what they read in the running kernel, from its
//! BTF: every program is on a BTF-enabled tracepoint and loads the members
//! it needs from the structure the tracepoint hands over, so no tracefs
//! format file is read (nor tracefs needed at all).
use pathpilot_common::Layout;

use super::{ObserveError, btf::Btf};

/// `struct request`, `struct bio` and `struct block_device` members and
/// the `enum req_op` values the programs use. A kernel that lacks one fails
/// here, naming it, rather than producing wrong numbers.
pub fn layout(btf: &Btf) -> Result<Layout, ObserveError> {
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
    let iter = member("bio", "bi_iter")?;
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
        bio_bdev: member("bio", "bi_bdev")?,
        bdev_dev: member("block_device", "bd_dev")?,
        bio_sector: iter + member("bvec_iter", "bi_sector")?,
        bio_size: iter + member("bvec_iter", "bi_size")?,
    })
}

/// A `cmd_flags` bit of `enum req_flag_bits`. dm-multipath allocates each
/// clone with the original's flags plus REQ_NOMERGE, then adds
/// REQ_FAILFAST_TRANSPORT (drivers/md/dm-mpath.c, multipath_clone_and_map,
/// the same from 4.x to 6.18): see `Layout::clone_flags`.
fn flag_bit(btf: &Btf, name: &str) -> Result<u32, String> {
    let b = btf.enum_value("req_flag_bits", name)?;
    if b >= 32 {
        return Err(format!("{name} is bit {b}, beyond cmd_flags' 32 bits"));
    }
    Ok(1 << b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_kernel_has_every_member() {
        // Host and VM kernels both must: this is what the probes read.
        let btf = Btf::from_sys().expect("kernel BTF");
        let l = layout(&btf).expect("layout");
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
        // struct bvec_iter { sector_t bi_sector; unsigned int bi_size; ... }
        assert!(l.bio_bdev > 0 && l.bio_bdev.is_multiple_of(8));
        assert_eq!(l.bio_size, l.bio_sector + 8);
    }
}
