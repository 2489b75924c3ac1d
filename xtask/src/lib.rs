//! Build helpers, the VM testbed and the benchmarks. The testbed is a
//! library so the integration tests in `tests/` drive the same code as
//! `cargo xtask vm`.
pub mod benchdoc;
pub mod fio;
pub mod package;
pub mod testbed;
pub mod util;
