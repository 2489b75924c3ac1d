//! Test support: see the modules.
pub mod host;
