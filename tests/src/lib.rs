//! Test support: see the modules.
//!
//! - [`host`]: host-side helpers (loop devices, real eBPF, the built
//!   binaries);
//! - [`guest`]: helpers over the dm-multipath VM testbed
//!   (`pathpilot_testbed`): the skip policy for machines without QEMU,
//!   maps, the daemon and fio in the guest;
//! - [`prom`]: the daemon's metrics as Prometheus sees them (promtool's
//!   checks, the shipped alerting rules evaluated on a scrape).
pub mod guest;
pub mod host;
pub mod prom;
