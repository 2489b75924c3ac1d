//! What the tuner is told and what it answers: the map's health with each
//! window, an action to apply, and every step logged as a decision with
//! its outcome.
use serde::Serialize;

use super::{Knob, Settings};

/// What the daemon knows of the map's health when it feeds a window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Health {
    /// Paths the kernel or the checker holds failed, or being checked.
    pub failed_paths: Vec<String>,
    pub suspended: bool,
    /// Queueing I/O with no valid path.
    pub queueing_without_paths: bool,
    /// When a path last changed state (seconds, the tuner's clock).
    pub last_path_change: Option<f64>,
    /// Paths holding a command outstanding for long (name, seconds): a
    /// reload's suspend would wait for it, the map's I/O frozen meanwhile,
    /// forever if the path is hung and not yet failed.
    pub stalled_paths: Vec<(String, f64)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A change was applied and is being measured.
    Trying,
    Kept,
    Reverted,
    /// advise mode: what tune mode would try.
    Advised,
    /// The kernel did not keep the value (read back differs).
    Ignored,
    /// The best known settings of a returning workload, applied at once.
    SnapBack,
    Paused,
    Resumed,
    /// A reload stalled I/O beyond the budget.
    Budget,
    /// An operator set the knob (through the daemon): the tuner leaves it
    /// until released.
    Operator,
    /// An operator released a knob: the tuner may change it again.
    Released,
    /// Someone other than pathpilot changed the map: tuning stops until
    /// an operator resumes it.
    Outside,
    /// The array moved its ports' ALUA states: the map was regrouped and
    /// tuning starts over on the new first group.
    Array,
    /// A path turned marginal (set aside), went on probation or is
    /// healthy again.
    Marginal,
}

impl Outcome {
    /// Every outcome, for counters that start at 0.
    pub const ALL: [Outcome; 14] = [
        Outcome::Trying,
        Outcome::Kept,
        Outcome::Reverted,
        Outcome::Advised,
        Outcome::Ignored,
        Outcome::SnapBack,
        Outcome::Paused,
        Outcome::Resumed,
        Outcome::Budget,
        Outcome::Operator,
        Outcome::Released,
        Outcome::Outside,
        Outcome::Array,
        Outcome::Marginal,
    ];

    /// The word in logs and metrics (its JSON form).
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Trying => "trying",
            Outcome::Kept => "kept",
            Outcome::Reverted => "reverted",
            Outcome::Advised => "advised",
            Outcome::Ignored => "ignored",
            Outcome::SnapBack => "snap_back",
            Outcome::Paused => "paused",
            Outcome::Resumed => "resumed",
            Outcome::Budget => "budget",
            Outcome::Operator => "operator",
            Outcome::Released => "released",
            Outcome::Outside => "outside",
            Outcome::Array => "array",
            Outcome::Marginal => "marginal",
        }
    }
}

/// One entry of the decision log.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Decision {
    /// Seconds on the tuner's clock; the daemon adds wall time.
    pub t: f64,
    pub map: String,
    pub class: Option<String>,
    pub knob: Option<Knob>,
    pub old: String,
    pub new: String,
    pub before_mib_s: Option<f64>,
    pub after_mib_s: Option<f64>,
    pub reason: String,
    pub outcome: Outcome,
}

impl Decision {
    /// A decision that changes no knob (an operator's, an event's), with
    /// no class and no figures.
    pub fn note(t: f64, map: &str, reason: String, outcome: Outcome) -> Self {
        Decision {
            t,
            map: map.into(),
            class: None,
            knob: None,
            old: String::new(),
            new: String::new(),
            before_mib_s: None,
            after_mib_s: None,
            reason,
            outcome,
        }
    }
}

/// What the tuner asks the daemon to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Action {
    pub to: Settings,
    pub knob: Knob,
}
