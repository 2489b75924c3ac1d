//! Test support: see the modules.
//!
//! - [`host`]: host-side helpers (loop devices, real eBPF);
//! - [`vm`]: the dm-multipath VM testbed (a wrapper over `xtask::testbed`
//!   that adds the skip policy for machines without QEMU).
pub mod host;
pub mod vm;
