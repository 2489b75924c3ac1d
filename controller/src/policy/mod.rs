//! The daemon's rules, each a pure function or a small state machine with
//! its own tests: what to do when a path, the array, another program or an
//! operator changes something. The engine is the loop that feeds them what
//! the kernel shows and carries out what they decide, through
//! [`ops::MapOps`] where device-mapper is involved.
pub mod advice;
pub mod failback;
pub mod handover;
pub mod hotplug;
pub mod marginal;
pub mod no_path_retry;
pub mod ops;
pub mod outside;
pub mod repair;
pub mod schedule;
pub mod sync;

#[cfg(test)]
pub(crate) mod testing {
    //! Fixtures the policies' tests share.
    use crate::blockdev::DevNum;

    /// A map of three paths, as pathpilot creates them.
    pub const T3: &str =
        "0 2097152 multipath 1 queue_if_no_path 0 1 1 service-time 0 3 2 8:0 1 1 8:16 1 1 8:32 1 1";

    /// SCSI disk `8:minor`.
    pub fn d(minor: u32) -> DevNum {
        DevNum::new(8, minor)
    }
}
