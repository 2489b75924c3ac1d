//! pathpilot: a controller for Linux dm-multipath.
pub mod blockdev;
pub mod cli;
pub mod clock;
pub mod config;
pub mod ctl;
pub mod daemon;
pub mod discovery;
pub mod dm;
pub mod error;
pub mod lock;
pub mod mpath;
pub mod mpconf;
pub mod observer;
pub mod policy;
pub mod sysfs_attr;
pub mod sysfs_knobs;
#[cfg(test)]
mod test_loop;
pub mod tuner;
