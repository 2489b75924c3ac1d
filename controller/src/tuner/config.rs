//! How the tuner runs: its mode and its configuration (the daemon's
//! `[tuner]` keys).
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Change nothing.
    Observe,
    /// Log what would be tried and why, change nothing.
    Advise,
    /// Act.
    Tune,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "observe" => Ok(Mode::Observe),
            "advise" => Ok(Mode::Advise),
            "tune" => Ok(Mode::Tune),
            _ => Err(format!("'{s}' is not a mode (observe, advise, tune)")),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct TunerConfig {
    /// Windows measured before a decision, for the baseline and each trial.
    pub windows: usize,
    /// Windows skipped after a change, while queues drain and refill.
    pub settle_windows: usize,
    /// Smallest relative gain worth keeping (0.05 = 5%), whatever the noise.
    pub min_gain: f64,
    /// Seconds between two reloads of the same map.
    pub reload_min_interval_s: f64,
    /// A reload that stalled I/O longer than this stops reload-based trials
    /// on the map for `reload_cooldown_s`.
    pub max_stall_ms: f64,
    pub reload_cooldown_s: f64,
    /// Seconds without any path state change before tuning resumes.
    pub flap_hold_s: f64,
    /// Seconds before a rejected candidate is tried again for a class.
    pub retry_after_s: f64,
}

impl Default for TunerConfig {
    fn default() -> Self {
        TunerConfig {
            windows: 3,
            settle_windows: 1,
            min_gain: 0.05,
            reload_min_interval_s: 10.0,
            max_stall_ms: 500.0,
            reload_cooldown_s: 600.0,
            flap_hold_s: 20.0,
            retry_after_s: 600.0,
        }
    }
}
