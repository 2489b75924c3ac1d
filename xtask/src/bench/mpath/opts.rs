//! How long `bench mpath` runs each thing.
use std::time::Duration;

/// Run lengths.
#[derive(Clone, Debug)]
pub struct Opts {
    pub quick: bool,
    pub reps: usize,
    /// fio seconds measured per point (after `ramp`).
    pub secs: u32,
    pub ramp: u32,
    /// The longest wait for the daemon to settle.
    pub max_settle: Duration,
    /// The daemon's window (seconds) and windows per measurement.
    pub window_s: u32,
    pub windows: u32,
}

impl Opts {
    /// Full runs, or short ones (`--quick`); `reps` repeats per point
    /// (default 3, 1 with `--quick`).
    pub fn new(quick: bool, reps: Option<usize>) -> Opts {
        Opts {
            quick,
            reps: reps.unwrap_or(if quick { 1 } else { 3 }).max(1),
            secs: if quick { 2 } else { 10 },
            ramp: 1,
            max_settle: Duration::from_secs(if quick { 90 } else { 300 }),
            window_s: if quick { 1 } else { 3 },
            windows: if quick { 2 } else { 3 },
        }
    }
}
