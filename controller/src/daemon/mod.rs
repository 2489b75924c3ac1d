//! `pathpilot daemon`: owns the multipath maps, watches every path, checks
//! them, and tunes each map (see the module docs of each part).
pub mod actuator;
pub mod checker;
pub mod engine;
pub mod metrics;
pub mod run;
pub mod shared;
pub mod socket;
pub mod state;
pub mod tur;
