//! Wall-clock time, as the daemon stamps its decisions, lock files and
//! saved state.
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the epoch (0 on a clock set before it).
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
