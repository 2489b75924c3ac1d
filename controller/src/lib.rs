//! pathpilot: a controller for Linux dm-multipath.
pub mod blockdev;
pub mod cli;
pub mod mpath;
pub mod observer;
pub mod tuner;
