//! `pathpilot daemon`: owns the multipath maps, watches every path, checks
//! them, and tunes each map (see the module docs of each part).
pub mod actuator;
pub mod checker;
pub mod client;
pub mod config;
pub mod engine;
pub mod metrics;
#[cfg(test)]
mod metrics_docs;
pub mod ops;
pub mod policy;
pub mod protocol;
pub mod run;
pub mod shared;
pub mod socket;
pub mod state;
pub mod status;
pub mod tur;
