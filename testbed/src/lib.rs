//! The VM testbed (docs/testing.md): real dm-multipath over N emulated paths to one
//! LUN, in a QEMU VM running a stock Debian kernel, because the development
//! host has no device-mapper. `cargo xtask vm`, the benches and the
//! integration tests all drive it through this crate.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use pathpilot_testbed::Testbed;
//! let tb = Testbed::builder().paths(4).caps_mib(&[10.0, 20.0, 40.0, 80.0]).boot()?;
//! let disks = tb.sh("ls /sys/block")?;
//! tb.pull_path(1)?;
//! tb.restore_path(1)?;
//! # Ok(()) }
//! ```
//!
//! The modules, each importing only those listed after it:
//! - [`procfs`]: a guest process's figures from /proc;
//! - `machine`: the running VM ([`Testbed`]): QEMU, guest commands, path
//!   actions;
//! - `agent`: the guest's command agent, host side ([`Output`]);
//! - `qmp`: the QMP client;
//! - [`wire`]: the network-namespace link model;
//! - [`image`]: the cached kernel / initramfs / LUN image build;
//! - `prerequisites`: what the host must have ([`check_host`]);
//! - `config`: what a boot is made from ([`Config`], [`Builder`]);
//! - `alua`: an ALUA array (LIO) in the guest ([`AluaSpec`]);
//! - `cpio`, [`base64`], `lines`, `lock`: formats and primitives;
//! - [`process`], [`dirs`]: host commands, and where things are kept;
//! - [`figures`]: the median and fio's bandwidth log, for the callers'
//!   measurements.
mod agent;
mod alua;
pub mod base64;
mod config;
mod cpio;
pub mod dirs;
pub mod figures;
pub mod image;
mod lines;
mod lock;
mod machine;
mod prerequisites;
pub mod process;
pub mod procfs;
mod qmp;
pub mod wire;

pub use agent::Output;
pub use alua::{AluaSpec, AluaState, Backstore};
pub use config::{Builder, Config, Inquiry, Link, MAX_PATHS, SERIAL, WWN};
pub use machine::{AluaPort, Job, Testbed};
pub use prerequisites::check_host;
