//! The feedback tuner of one map: a pure state machine. The daemon feeds it
//! a [`Window`] of figures and the map's [`Health`] every tuning window; the
//! tuner answers with at most one [`Action`] (a full [`Settings`] to apply,
//! differing in one knob), and the daemon reports back what the kernel
//! actually kept with [`Tuner::applied`]. Every step is logged as a
//! [`Decision`].
//!
//! The search: measure a baseline, try one knob change, measure again, keep
//! the change only when its gain is beyond the measured noise, otherwise
//! revert; remember the best settings per workload class, so a returning
//! workload snaps back to them.
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use crate::mpath::Selector;

mod candidates;
mod config;
mod decision;
pub mod settings;
pub mod window;

use candidates::clearly_unequal;
pub use candidates::weights_from;
#[cfg(test)]
use candidates::{differs_enough, split_kib};
pub use config::{Mode, TunerConfig};
pub use decision::{Action, Decision, Health, Outcome};
pub use settings::{Knob, Settings};
pub use window::{Class, Per, Size, Window};

/// Bios this many times larger or smaller than when a measurement began,
/// or a read share this far from it, are another workload.
const SHAPE_RATIO: f64 = 1.6;
const SHAPE_READ: f64 = 0.3;

/// The window-to-window noise of a workload is pooled over this many of
/// its latest measurements (baselines and trials).
const NOISE_GROUPS: usize = 8;

/// A trial whose gain clears the floor but not the noise is measured on,
/// up to this many times its windows, before it is judged.
const EXTEND_UP_TO: usize = 3;

/// How much of a path's best delivery a window later still stands for its
/// capacity: the estimate is a running maximum fading by this per window.
const CAP_FADE: f64 = 0.95;

#[derive(Clone, Debug, PartialEq)]
struct Stats {
    mean: f64,
    sd: f64,
    n: usize,
}

fn stats(v: &[f64]) -> Stats {
    let n = v.len();
    let mean = v.iter().sum::<f64>() / n.max(1) as f64;
    let var = if n > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64
    } else {
        0.0
    };
    Stats {
        mean,
        sd: var.sqrt(),
        n,
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Trial {
    knob: Knob,
    from: Settings,
    to: Settings,
    base: Stats,
    reason: String,
}

#[derive(Clone, Debug, PartialEq)]
enum Phase {
    Baseline(Vec<f64>),
    /// Waiting for the daemon to report the change applied.
    Applying(Trial),
    Settling(Trial, usize),
    Measuring(Trial, Vec<f64>),
    /// Settling after a revert or a snap-back, then a fresh baseline.
    Recovering(usize),
    Converged,
    Paused(String),
}

/// The tuner of one map.
pub struct Tuner {
    map: String,
    mode: Mode,
    cfg: TunerConfig,
    current: Settings,
    /// The settings the map started with: "back to default" candidates.
    initial: Settings,
    available_selectors: Vec<Selector>,
    phase: Phase,
    class: Option<Class>,
    /// Best known settings and their throughput, per class.
    memory: HashMap<String, (Settings, f64)>,
    /// (class, knob, value) -> when it was last rejected.
    tried: HashMap<(String, Knob, String), f64>,
    /// Knobs the kernel did not keep on this map.
    dead: HashSet<Knob>,
    /// Knobs an operator set: never changed by a trial or a snap-back.
    pinned: BTreeSet<Knob>,
    /// The map's path groups are not the tuner's to change (an adopted
    /// map's, or an array's priority groups): it tunes the first group.
    fixed_groups: bool,
    /// The map's table is another program's (multipathd's): only the
    /// queue knobs, set through sysfs, are the tuner's.
    queue_knobs_only: bool,
    /// Someone else changed the map (why, and when tuning first stopped
    /// for it): no tuning until an operator resumes.
    held: Option<(String, f64)>,
    /// The workload's own shape (mean bio size, read share) when the
    /// measurement in progress began: a window far from it means the
    /// workload changed, even inside one class.
    shape: Option<(f64, f64)>,
    /// Per-path capacity seen clearly unequal under random reads at depth
    /// (see `learn_caps`): a fact of the paths, not of the workload, so a
    /// later workload whose own figures cannot show it (one large request
    /// at a time) can still be weighted by it.
    path_caps: Option<Vec<f64>>,
    /// The workload's latest measurements, whose spread is its noise: two
    /// windows a side say little of it (judged by them alone, the gain
    /// needed swings from the floor to many times it), many together say
    /// more.
    noise: VecDeque<Stats>,
    last_reload: Option<f64>,
    reload_blocked_until: f64,
    user_paused: bool,
    /// A trial cut short by a pause: undone once tuning resumes.
    dropped: Option<Trial>,
    log: Vec<Decision>,
    last_t: f64,
}

impl Tuner {
    pub fn new(
        map: &str,
        mode: Mode,
        cfg: TunerConfig,
        current: Settings,
        available_selectors: Vec<Selector>,
    ) -> Self {
        Tuner {
            map: map.to_string(),
            mode,
            cfg,
            initial: current.clone(),
            current,
            available_selectors,
            phase: Phase::Baseline(vec![]),
            class: None,
            memory: HashMap::new(),
            tried: HashMap::new(),
            dead: HashSet::new(),
            pinned: BTreeSet::new(),
            fixed_groups: false,
            queue_knobs_only: false,
            held: None,
            shape: None,
            path_caps: None,
            noise: VecDeque::new(),
            last_reload: None,
            reload_blocked_until: 0.0,
            user_paused: false,
            dropped: None,
            log: vec![],
            last_t: 0.0,
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn set_mode(&mut self, m: Mode) {
        self.mode = m;
    }

    pub fn settings(&self) -> &Settings {
        &self.current
    }

    /// New tuning parameters (SIGHUP): they apply from the next window.
    pub fn set_config(&mut self, cfg: TunerConfig) {
        self.cfg = cfg;
    }

    pub fn config(&self) -> &TunerConfig {
        &self.cfg
    }

    /// The knobs an operator pinned.
    pub fn pinned(&self) -> &BTreeSet<Knob> {
        &self.pinned
    }

    /// Sets the pinned knobs (from the daemon's state at start).
    pub fn set_pins(&mut self, pins: BTreeSet<Knob>) {
        self.pinned = pins;
    }

    /// Whether the path groups are fixed (see the field).
    pub fn set_fixed_groups(&mut self, fixed: bool) {
        self.fixed_groups = fixed;
    }

    /// Whether only the queue knobs are the tuner's (see the field).
    pub fn set_queue_knobs_only(&mut self, only: bool) {
        self.queue_knobs_only = only;
    }

    /// Knobs no trial or snap-back may move.
    fn off_limits(&self, k: Knob) -> bool {
        self.pinned.contains(&k)
            || self.dead.contains(&k)
            || (self.fixed_groups && k == Knob::ActivePaths)
            || (self.queue_knobs_only && !k.is_queue_knob())
    }

    /// Why tuning stopped for a change made by someone else, if it did.
    pub fn held(&self) -> Option<&str> {
        self.held.as_ref().map(|(why, _)| why.as_str())
    }

    /// When tuning stopped for a change made by someone else (the tuner's
    /// clock), if it did.
    pub fn held_since(&self) -> Option<f64> {
        self.held.as_ref().map(|(_, t)| *t)
    }

    /// An operator paused the map, or someone else changed it: the table
    /// is not pathpilot's to change. (A pause for a failed path is not.)
    pub fn hands_off(&self) -> bool {
        self.user_paused || self.held.is_some()
    }

    /// Someone other than pathpilot changed the map (`why` says what):
    /// the settings are what the kernel shows now, and tuning stops until
    /// an operator resumes it. A trial in progress is dropped unjudged
    /// and not undone: undoing it would overwrite the other party's change.
    /// One only proposed (the daemon looks before it acts, and found this
    /// change) was never made: it is withdrawn, its note with it, and it
    /// stays untried.
    pub fn outside_change(&mut self, t: f64, why: &str, now: Settings) {
        if let Phase::Applying(tr) = &self.phase
            && let Some(i) = self
                .log
                .iter()
                .rposition(|d| d.outcome == Outcome::Trying && d.knob == Some(tr.knob))
        {
            self.log.remove(i);
        }
        self.event(t, format!("{why}: tuning stopped (resume with `pathpilot ctl '{{\"cmd\":\"resume\",\"map\":\"{}\"}}'`)", self.map), Outcome::Outside);
        self.current = now;
        self.dropped = None;
        let since = self.held_since().unwrap_or(t);
        self.held = Some((why.to_string(), since));
        self.phase = Phase::Baseline(vec![]);
    }

    /// An operator set `knobs` through the daemon; `now` is what the
    /// kernel shows after it. They are pinned (the tuner leaves them until
    /// released). A trial of another knob in progress is undone at the
    /// next window; one of a knob the operator set is simply over.
    pub fn operator_set(
        &mut self,
        t: f64,
        knobs: &[Knob],
        before: &Settings,
        now: Settings,
        how: &str,
    ) {
        for k in knobs {
            self.note(
                t,
                Some(*k),
                &before.show(*k),
                &now.show(*k),
                None,
                None,
                format!("set by the operator ({how}): pinned until released"),
                Outcome::Operator,
            );
            self.pinned.insert(*k);
        }
        if let Phase::Applying(tr) | Phase::Settling(tr, _) | Phase::Measuring(tr, _) = &self.phase
            && !knobs.contains(&tr.knob)
        {
            let mut tr = tr.clone();
            tr.from = now.with(tr.knob, &tr.from);
            tr.to = now.clone();
            self.dropped = Some(tr);
        }
        self.current = now;
        self.phase = Phase::Baseline(vec![]);
    }

    /// The operator released `knobs` (all pinned ones if empty).
    pub fn release(&mut self, t: f64, knobs: &[Knob]) -> Vec<Knob> {
        let gone: Vec<Knob> = if knobs.is_empty() {
            self.pinned.iter().copied().collect()
        } else {
            knobs
                .iter()
                .copied()
                .filter(|k| self.pinned.contains(k))
                .collect()
        };
        for k in &gone {
            self.pinned.remove(k);
            self.note(
                t,
                Some(*k),
                &self.current.show(*k),
                "",
                None,
                None,
                "released by the operator: the tuner may change it again".into(),
                Outcome::Released,
            );
        }
        if !gone.is_empty() && matches!(self.phase, Phase::Converged) {
            self.phase = Phase::Baseline(vec![]);
        }
        gone
    }

    /// The daemon changed the map for a reason of its own (paths joined
    /// or left): the settings are what the kernel shows now, and any
    /// trial is over, unjudged.
    pub fn reset_to(&mut self, now: Settings) {
        self.follow_paths(&now);
        self.current = now;
        self.dropped = None;
        self.phase = Phase::Baseline(vec![]);
    }

    /// The daemon changed the paths in service (`now` is what the kernel
    /// holds on them). When the tuner had left the active count as it
    /// found it, where it started is the new count (else "back to the
    /// initial" would ask for paths that are not there). Weights are by
    /// path position, so those kept from before (where it started, and
    /// each workload's best known settings) would land on other paths,
    /// and a snap-back's read-back would report the knob ignored: the
    /// paths' own now. A remembered selector and the queue knobs stay.
    fn follow_paths(&mut self, now: &Settings) {
        if self.current.active_paths == self.initial.active_paths {
            self.initial.active_paths = now.active_paths;
        }
        let on_these_paths = |s: &mut Settings| {
            s.active_paths = now.active_paths;
            s.weights = if s.selector == Selector::ServiceTime {
                now.weights.clone()
            } else {
                vec![]
            };
        };
        if !self.initial.weights.is_empty() {
            self.initial.weights = now.weights.clone();
        }
        for (s, _) in self.memory.values_mut() {
            on_these_paths(s);
        }
    }

    /// The array changed its ports' ALUA states and the daemon regrouped
    /// the map: the paths that carry I/O are others now, so what was
    /// measured (trial, baseline, path capacities) is of no use.
    pub fn array_changed(&mut self, t: f64, why: &str, now: Option<Settings>) {
        self.regrouped(
            t,
            format!("{why}: regrouped; tuning starts again on the new first group"),
            Outcome::Array,
            now,
        );
    }

    /// A path's health changed (`why`); `now`: the daemon regrouped the
    /// map for it (a path set aside or back), and tuning starts over on
    /// the paths in service. Without it (advise mode) only the decision.
    pub fn health_changed(&mut self, t: f64, why: String, now: Option<Settings>) {
        match now {
            Some(now) => self.regrouped(t, why, Outcome::Marginal, Some(now)),
            None => self.event(t, why, Outcome::Marginal),
        }
    }

    fn regrouped(&mut self, t: f64, why: String, outcome: Outcome, now: Option<Settings>) {
        self.event(t, why, outcome);
        if let Some(now) = now {
            self.follow_paths(&now);
            self.current = now;
        }
        self.dropped = None;
        self.path_caps = None;
        self.shape = None;
        self.phase = Phase::Baseline(vec![]);
    }

    pub fn class(&self) -> Option<Class> {
        self.class
    }

    /// A short word for dashboards: tune (searching), trying (a change
    /// under test), converged (nothing left to try for this workload),
    /// advise, observe, paused.
    pub fn state(&self) -> String {
        match (&self.phase, self.hands_off(), self.mode) {
            (_, true, _) => "paused".into(),
            (_, _, Mode::Observe) => "observe".into(),
            (Phase::Paused(_), _, _) => "paused".into(),
            _ if self.trying() => "trying".into(),
            (_, _, Mode::Advise) => "advise".into(),
            // Every candidate for this workload tried: a bench or an admin
            // can stop waiting for more decisions.
            (Phase::Converged, _, _) => "converged".into(),
            _ => "tune".into(),
        }
    }

    /// A change is under test (applied, settling or measured), on a map
    /// the tuner may change: the state `trying`.
    pub fn trying(&self) -> bool {
        !self.hands_off()
            && self.mode != Mode::Observe
            && matches!(
                self.phase,
                Phase::Applying(_) | Phase::Settling(..) | Phase::Measuring(..)
            )
    }

    /// Measuring toward a decision (a baseline, a trial, the settling
    /// after a revert): the daemon then keeps its observer attached
    /// throughout (no time-sampling, config `observe_duty`), so the
    /// windows compared all pay the same cost of observation. Not when
    /// converged, paused, hands off or only observing.
    pub fn measuring(&self) -> bool {
        !self.hands_off()
            && self.mode != Mode::Observe
            && !matches!(self.phase, Phase::Converged | Phase::Paused(_))
    }

    /// The next window may end the trial in progress with its change
    /// kept: the one decision that makes no change, so none passes through
    /// the map's lock, where the daemon looks for a change made outside
    /// (a revert or a new trial does). A change made outside under the
    /// trial spoils its measurement, so the daemon looks before such a
    /// window; the windows before it decide nothing.
    pub fn may_keep(&self) -> bool {
        self.trying()
            && matches!(&self.phase, Phase::Measuring(_, v) if self.measured_enough(v.len() + 1))
    }

    /// Whether `n` windows measured are enough to judge a baseline or a
    /// trial (more may follow when the gain is unclear).
    fn measured_enough(&self, n: usize) -> bool {
        n >= self.cfg.windows
    }

    /// Decisions made since the last call.
    pub fn drain(&mut self) -> Vec<Decision> {
        std::mem::take(&mut self.log)
    }

    /// The operator pauses or resumes tuning of this map.
    pub fn set_user_paused(&mut self, paused: bool, t: f64) {
        // A resume also ends a stop for an outside change.
        let held = !paused && self.held.take().is_some();
        if self.user_paused == paused && !held {
            return;
        }
        self.user_paused = paused;
        let (outcome, reason) = if paused {
            (Outcome::Paused, "paused by the operator")
        } else {
            (Outcome::Resumed, "resumed by the operator")
        };
        self.note(t, None, "", "", None, None, reason.into(), outcome);
        self.drop_trial();
        self.phase = Phase::Baseline(vec![]);
    }

    /// A decision about the map as a whole: no knob, no figures.
    fn event(&mut self, t: f64, reason: String, outcome: Outcome) {
        self.note(t, None, "", "", None, None, reason, outcome);
    }

    /// [`Self::event`] with the throughput of the window it happened in.
    fn event_in(&mut self, t: f64, w: &Window, reason: String, outcome: Outcome) {
        self.note(t, None, "", "", Some(w.mib_s), None, reason, outcome);
    }

    #[allow(clippy::too_many_arguments)]
    fn note(
        &mut self,
        t: f64,
        knob: Option<Knob>,
        old: &str,
        new: &str,
        before: Option<f64>,
        after: Option<f64>,
        reason: String,
        outcome: Outcome,
    ) {
        let round = |v: Option<f64>| v.map(|x| (x * 100.0).round() / 100.0);
        self.log.push(Decision {
            t,
            map: self.map.clone(),
            class: self.class.map(|c| c.key()),
            knob,
            old: old.into(),
            new: new.into(),
            before_mib_s: round(before),
            after_mib_s: round(after),
            reason,
            outcome,
        });
    }

    /// Feeds one window; returns a change to apply, if any.
    pub fn on_window(&mut self, t: f64, w: &Window, h: &Health) -> Option<Action> {
        self.last_t = t;
        if self.mode == Mode::Observe || self.hands_off() {
            return None;
        }
        if let Some(why) = self.unsafe_reason(t, h) {
            if !matches!(self.phase, Phase::Paused(_)) {
                // A trial under a failing path measures the failure, not
                // the knob: drop it and leave the settings as they are.
                self.event_in(t, w, format!("paused: {why}"), Outcome::Paused);
                self.drop_trial();
                self.phase = Phase::Paused(why);
            }
            return None;
        }
        if let Phase::Paused(why) = &self.phase {
            let reason = format!("resumed: {why} is over");
            self.event_in(t, w, reason, Outcome::Resumed);
            self.phase = Phase::Baseline(vec![]);
        }
        // A change left in place by a pause was never judged: undo it
        // before measuring anything, and do not retry it before
        // retry_after (it may be what disturbed the paths).
        if let Some(tr) = self.dropped.take()
            && self.mode == Mode::Tune
        {
            if let Some(c) = self.class {
                self.tried.insert(
                    (c.key(), tr.knob, trial_value(tr.knob, &tr.from, &tr.to)),
                    t,
                );
            }
            let why = format!("{}: paused during the trial: reverted unjudged", tr.reason);
            return self.undo_unjudged(t, tr, w, why);
        }
        let class = Class::of(w)?;
        // Not the first window of a class, which may straddle the change
        // (the last of a random phase, at a trickle), nor one right after a
        // change of settings.
        if class.size == Size::Medium
            && !class.sequential
            && self.class == Some(class)
            && self.current.selector != Selector::RoundRobin
            && !matches!(self.phase, Phase::Applying(_) | Phase::Settling(..))
            && let Some(c) = w.delivered(Per::Byte)
        {
            self.learn_caps(&c);
        }
        if self.class != Some(class) {
            self.shape = Some((w.avg_bio_kib, w.read_share));
            return self.class_changed(t, class, w);
        }
        if let Some(why) = self.shape_changed(w) {
            return self.restart(t, &why, w);
        }
        match std::mem::replace(&mut self.phase, Phase::Converged) {
            Phase::Baseline(mut v) => {
                v.push(w.mib_s);
                if !self.measured_enough(v.len()) {
                    self.phase = Phase::Baseline(v);
                    return None;
                }
                let base = stats(&v);
                self.pool(&base);
                self.remember(class, base.mean);
                self.next_trial(t, class, base, w)
            }
            Phase::Applying(trial) => {
                // Still waiting for the daemon's report: measure nothing.
                self.phase = Phase::Applying(trial);
                None
            }
            Phase::Settling(trial, left) => {
                self.phase = if left > 1 {
                    Phase::Settling(trial, left - 1)
                } else {
                    Phase::Measuring(trial, vec![])
                };
                None
            }
            Phase::Measuring(trial, mut v) => {
                v.push(w.mib_s);
                if !self.measured_enough(v.len()) {
                    self.phase = Phase::Measuring(trial, v);
                    return None;
                }
                // A gain above the floor but inside the noise: more
                // windows shrink the noise; judge when it is clear or the
                // windows run out.
                if v.len() < self.cfg.windows * EXTEND_UP_TO
                    && self.undecided(&trial.base, &stats(&v))
                {
                    self.phase = Phase::Measuring(trial, v);
                    return None;
                }
                self.judge(t, class, trial, stats(&v), w)
            }
            Phase::Recovering(left) => {
                self.phase = if left > 1 {
                    Phase::Recovering(left - 1)
                } else {
                    Phase::Baseline(vec![])
                };
                None
            }
            Phase::Converged => {
                self.phase = Phase::Converged;
                // Explore again once rejected candidates may be retried.
                if self.candidates(class, w).into_iter().next().is_some() {
                    self.phase = Phase::Baseline(vec![]);
                }
                None
            }
            Phase::Paused(_) => unreachable!("handled above"),
        }
    }

    /// Keeps the trial in progress, if any, to be undone on resume.
    fn drop_trial(&mut self) {
        if let Phase::Applying(tr) | Phase::Settling(tr, _) | Phase::Measuring(tr, _) = &self.phase
        {
            self.dropped = Some(tr.clone());
        }
    }

    fn unsafe_reason(&self, t: f64, h: &Health) -> Option<String> {
        if h.suspended {
            return Some("the map is suspended".into());
        }
        if h.queueing_without_paths {
            return Some("the map is queueing I/O with no valid path".into());
        }
        if !h.failed_paths.is_empty() {
            return Some(format!("path {} failed", h.failed_paths.join(", ")));
        }
        if let Some((p, s)) = h.stalled_paths.first() {
            return Some(format!(
                "path {p} has completed nothing for {s:.1} s with commands outstanding (a reload would wait for them)"
            ));
        }
        if let Some(c) = h.last_path_change
            && t - c < self.cfg.flap_hold_s
        {
            return Some(format!(
                "a path changed state {:.0} s ago (waiting {:.0} s for paths to settle)",
                t - c,
                self.cfg.flap_hold_s
            ));
        }
        None
    }

    /// Folds what each path delivered this window into its capacity
    /// estimate. A path the selector did not fill delivers less than it
    /// could (where something else caps the total, the fastest paths
    /// deliver about alike), so one window
    /// cannot rank the fastest paths and a trickle can invert them: a path
    /// is credited with the best it delivered lately. Kept only while the
    /// paths clearly differ.
    fn learn_caps(&mut self, delivered: &[f64]) {
        let caps: Vec<f64> = match &self.path_caps {
            Some(old) if old.len() == delivered.len() => old
                .iter()
                .zip(delivered)
                .map(|(o, d)| d.max(o * CAP_FADE))
                .collect(),
            _ => delivered.to_vec(),
        };
        self.path_caps = clearly_unequal(&caps).then_some(caps);
    }

    fn remember(&mut self, class: Class, mib_s: f64) {
        let key = class.key();
        match self.memory.get(&key) {
            Some((s, _)) if *s == self.current => {
                self.memory.insert(key, (self.current.clone(), mib_s));
            }
            None => {
                self.memory.insert(key, (self.current.clone(), mib_s));
            }
            _ => {}
        }
    }

    /// The workload changed inside its class (bios twice as large, reads
    /// turned writes): no measurement may span that.
    fn shape_changed(&mut self, w: &Window) -> Option<String> {
        let (kib, read) = *self.shape.get_or_insert((w.avg_bio_kib, w.read_share));
        let ratio = if kib > 0.0 && w.avg_bio_kib > 0.0 {
            (w.avg_bio_kib / kib).max(kib / w.avg_bio_kib)
        } else {
            1.0
        };
        (ratio > SHAPE_RATIO || (w.read_share - read).abs() > SHAPE_READ).then(|| {
            format!(
                "the workload changed (bios {kib:.0} -> {:.0} KiB, reads {:.0}% -> {:.0}%)",
                w.avg_bio_kib,
                read * 100.0,
                w.read_share * 100.0
            )
        })
    }

    /// Starts the measurement in progress over: a baseline is taken
    /// again; a trial's change is undone unjudged and left to be tried
    /// again (nothing was learnt of it).
    fn restart(&mut self, t: f64, why: &str, w: &Window) -> Option<Action> {
        self.shape = Some((w.avg_bio_kib, w.read_share));
        self.noise.clear();
        match std::mem::replace(&mut self.phase, Phase::Baseline(vec![])) {
            Phase::Applying(tr) | Phase::Settling(tr, _) | Phase::Measuring(tr, _)
                if self.mode == Mode::Tune =>
            {
                let why = format!("{why} during the trial: undone unjudged, to be tried again");
                self.undo_unjudged(t, tr, w, why)
            }
            // A baseline (or a pause's recovery) simply starts over.
            Phase::Recovering(n) => {
                self.phase = Phase::Recovering(n);
                None
            }
            Phase::Converged => {
                self.phase = Phase::Converged;
                None
            }
            _ => None,
        }
    }

    /// Puts back what a trial changed without judging it, and recovers.
    fn undo_unjudged(&mut self, t: f64, tr: Trial, w: &Window, why: String) -> Option<Action> {
        self.note(
            t,
            Some(tr.knob),
            &tr.to.show(tr.knob),
            &tr.from.show(tr.knob),
            Some(tr.base.mean),
            Some(w.mib_s),
            why,
            Outcome::Reverted,
        );
        self.phase = Phase::Recovering(self.cfg.settle_windows);
        Some(Action {
            to: tr.from,
            knob: tr.knob,
        })
    }

    fn class_changed(&mut self, t: f64, class: Class, w: &Window) -> Option<Action> {
        let old = self.class.replace(class);
        self.noise.clear();
        // A trial cannot be judged across a workload change.
        let abandoned = match std::mem::replace(&mut self.phase, Phase::Baseline(vec![])) {
            Phase::Applying(tr) | Phase::Settling(tr, _) | Phase::Measuring(tr, _) => Some(tr),
            _ => None,
        };
        let best = self.memory.get(&class.key()).cloned();
        let reason = format!(
            "workload changed{} to {}",
            old.map(|o| format!(" from {}", o.key()))
                .unwrap_or_default(),
            class.key()
        );
        // Pinned knobs stay as the operator set them.
        let best = best.map(|(mut s, mib)| {
            for k in Knob::ALL {
                if self.off_limits(k) {
                    s = s.with(k, &self.current);
                }
            }
            (s, mib)
        });
        match (best, self.mode) {
            (Some((s, mib)), Mode::Tune) if s != self.current => {
                let knob = self
                    .current
                    .diff(&s)
                    .first()
                    .copied()
                    .unwrap_or(Knob::Selector);
                let changed: Vec<String> = self
                    .current
                    .diff(&s)
                    .iter()
                    .map(|k| format!("{} {} -> {}", k.name(), self.current.show(*k), s.show(*k)))
                    .collect();
                self.note(
                    t,
                    Some(knob),
                    &self.current.show(knob),
                    &s.show(knob),
                    Some(w.mib_s),
                    None,
                    format!(
                        "{reason}: back to its best known settings ({:.1} MiB/s): {}",
                        mib,
                        changed.join(", ")
                    ),
                    Outcome::SnapBack,
                );
                self.phase = Phase::Recovering(self.cfg.settle_windows + 1);
                Some(Action { to: s, knob })
            }
            _ => {
                if let Some(tr) = abandoned
                    && self.mode == Mode::Tune
                {
                    // Undo the unjudged change.
                    self.note(
                        t,
                        Some(tr.knob),
                        &tr.to.show(tr.knob),
                        &tr.from.show(tr.knob),
                        None,
                        Some(w.mib_s),
                        format!("{reason} during the trial: reverted unjudged"),
                        Outcome::Reverted,
                    );
                    self.phase = Phase::Recovering(self.cfg.settle_windows);
                    return Some(Action {
                        to: tr.from,
                        knob: tr.knob,
                    });
                }
                None
            }
        }
    }

    fn reload_allowed(&self, t: f64) -> bool {
        t >= self.reload_blocked_until
            && self
                .last_reload
                .is_none_or(|r| t - r >= self.cfg.reload_min_interval_s)
    }

    fn next_trial(&mut self, t: f64, class: Class, base: Stats, w: &Window) -> Option<Action> {
        let cands = self.candidates(class, w);
        let reload_ok = self.reload_allowed(t);
        let Some((knob, to, reason)) = cands
            .into_iter()
            .find(|(k, _, _)| reload_ok || !k.needs_reload())
        else {
            // Nothing left to try (or only reloads, not allowed yet).
            self.phase = if reload_ok {
                Phase::Converged
            } else {
                Phase::Baseline(vec![])
            };
            return None;
        };
        let (old, new) = (self.current.show(knob), to.show(knob));
        if self.mode == Mode::Advise {
            self.note(
                t,
                Some(knob),
                &old,
                &new,
                Some(base.mean),
                None,
                reason,
                Outcome::Advised,
            );
            self.tried.insert(
                (class.key(), knob, trial_value(knob, &self.current, &to)),
                t,
            );
            self.phase = Phase::Baseline(vec![]);
            return None;
        }
        self.note(
            t,
            Some(knob),
            &old,
            &new,
            Some(base.mean),
            None,
            reason.clone(),
            Outcome::Trying,
        );
        self.phase = Phase::Applying(Trial {
            knob,
            from: self.current.clone(),
            to: to.clone(),
            base,
            reason,
        });
        Some(Action { to, knob })
    }

    /// The gain needed to keep a change measured as `after` against `base`:
    /// beyond both the floor and twice the standard error of the
    /// difference of the two means, the windows' relative spread pooled
    /// over the workload's latest measurements (`base` among them).
    fn needed(&self, base: &Stats, after: &Stats) -> f64 {
        let (ss, df) = self
            .noise
            .iter()
            .chain([after])
            .filter(|g| g.n > 1 && g.mean > 0.0)
            .fold((0.0, 0usize), |(ss, df), g| {
                (
                    ss + (g.n - 1) as f64 * (g.sd / g.mean).powi(2),
                    df + g.n - 1,
                )
            });
        let rel = if df > 0 { (ss / df as f64).sqrt() } else { 0.0 };
        let se = ((rel * base.mean).powi(2) / base.n.max(1) as f64
            + (rel * after.mean).powi(2) / after.n.max(1) as f64)
            .sqrt();
        (self.cfg.min_gain * base.mean).max(2.0 * se)
    }

    /// Adds a finished measurement to the workload's noise.
    fn pool(&mut self, g: &Stats) {
        if self.noise.len() == NOISE_GROUPS {
            self.noise.pop_front();
        }
        self.noise.push_back(g.clone());
    }

    /// A gain above the floor that the noise still hides.
    fn undecided(&self, base: &Stats, after: &Stats) -> bool {
        let gain = after.mean - base.mean;
        gain > self.cfg.min_gain * base.mean && gain <= self.needed(base, after)
    }

    fn judge(
        &mut self,
        t: f64,
        class: Class,
        tr: Trial,
        after: Stats,
        _w: &Window,
    ) -> Option<Action> {
        let base = &tr.base;
        let gain = after.mean - base.mean;
        let needed = self.needed(base, &after);
        self.pool(&after);
        let pct = if base.mean > 0.0 {
            gain / base.mean * 100.0
        } else {
            0.0
        };
        let (old, new) = (tr.from.show(tr.knob), tr.to.show(tr.knob));
        if gain > needed {
            self.note(
                t,
                Some(tr.knob),
                &old,
                &new,
                Some(base.mean),
                Some(after.mean),
                format!(
                    "{}: {pct:+.1}% (needed {:+.1}%)",
                    tr.reason,
                    needed / base.mean.max(1e-9) * 100.0
                ),
                Outcome::Kept,
            );
            self.memory
                .insert(class.key(), (self.current.clone(), after.mean));
            // The values it replaced just lost: no point going back to
            // them (to a pair's split no more than to its weights).
            for k in tr.from.diff(&tr.to) {
                self.tried
                    .insert((class.key(), k, trial_value(k, &tr.to, &tr.from)), t);
            }
            // The trial's windows are the new baseline: go straight on.
            self.next_trial(t, class, after, _w)
        } else {
            self.note(
                t,
                Some(tr.knob),
                &new,
                &old,
                Some(base.mean),
                Some(after.mean),
                format!(
                    "{}: {pct:+.1}%, not beyond noise and the {:.0}% floor (needed {:+.1}%)",
                    tr.reason,
                    self.cfg.min_gain * 100.0,
                    needed / base.mean.max(1e-9) * 100.0
                ),
                Outcome::Reverted,
            );
            self.tried.insert(
                (class.key(), tr.knob, trial_value(tr.knob, &tr.from, &tr.to)),
                t,
            );
            self.phase = Phase::Recovering(self.cfg.settle_windows);
            Some(Action {
                to: tr.from,
                knob: tr.knob,
            })
        }
    }

    /// The daemon applied `requested`; `readback` is what the kernel shows
    /// now, `stall_ms` the I/O stall of a reload.
    pub fn applied(
        &mut self,
        t: f64,
        knob: Knob,
        requested: &Settings,
        readback: Settings,
        stall_ms: Option<f64>,
    ) {
        if knob.needs_reload() || stall_ms.is_some() {
            self.last_reload = Some(t);
        }
        if let Some(ms) = stall_ms
            && ms > self.cfg.max_stall_ms
        {
            self.reload_blocked_until = t + self.cfg.reload_cooldown_s;
            self.note(
                t,
                Some(knob),
                "",
                "",
                None,
                None,
                format!(
                    "the reload stalled I/O {ms:.0} ms (budget {:.0} ms): no reloads on this map for {:.0} s",
                    self.cfg.max_stall_ms, self.cfg.reload_cooldown_s
                ),
                Outcome::Budget,
            );
        }
        // Every knob the change moved reads back as asked, not only the
        // one it is named after (weights bring the selector, and a large
        // reader's first weights a split).
        let mut asked = self.current.diff(requested);
        if !asked.contains(&knob) {
            asked.push(knob);
        }
        asked.retain(|k| readback.show(*k) != requested.show(*k));
        self.current = readback;
        for k in &asked {
            self.dead.insert(*k);
            self.note(
                t,
                Some(*k),
                &requested.show(*k),
                &self.current.show(*k),
                None,
                None,
                format!(
                    "the kernel did not keep {} = {} (reads back {}): not tuned, not tried again on this map",
                    k.name(),
                    requested.show(*k),
                    self.current.show(*k)
                ),
                Outcome::Ignored,
            );
        }
        if asked.contains(&knob) {
            self.phase = Phase::Recovering(self.cfg.settle_windows);
            return;
        }
        // A trial starts settling, judged on what the kernel kept of it;
        // after a revert or a snap-back the phase set when it was asked
        // (recovering) stays.
        if let Phase::Applying(tr) = &self.phase {
            let mut tr = tr.clone();
            tr.to = self.current.clone();
            self.phase = Phase::Settling(tr, self.cfg.settle_windows.max(1));
        }
    }

    /// The daemon could not apply a change (an error, not a read-back
    /// mismatch): stay where the kernel is.
    pub fn failed(
        &mut self,
        t: f64,
        knob: Knob,
        requested: &Settings,
        readback: Settings,
        error: &str,
    ) {
        let before = std::mem::replace(&mut self.current, readback);
        // Most failures pass (a suspend cut short by its time limit, the
        // map's lock held by an operator's command): the value may be
        // tried again after retry_after, not never.
        if let Some(c) = self.class {
            self.tried
                .insert((c.key(), knob, trial_value(knob, &before, requested)), t);
        }
        self.note(
            t,
            Some(knob),
            &self.current.show(knob),
            &requested.show(knob),
            None,
            None,
            format!(
                "applying failed: {error}; not tried again for {:.0} s",
                self.cfg.retry_after_s
            ),
            Outcome::Ignored,
        );
        self.phase = Phase::Recovering(self.cfg.settle_windows);
    }
}

/// What identifies a trial (from `from` to `to`) for "already tried": the
/// value, except for weights, whose estimate moves a little every window:
/// one weighted trial per class (and retry period) is enough. A trial that
/// splits requests as well is another trial: weights that lost with a
/// split may still win alone.
fn trial_value(k: Knob, from: &Settings, to: &Settings) -> String {
    let v = match k {
        Knob::Weights if !to.weights.is_empty() => "measured".into(),
        _ => to.show(k),
    };
    if k != Knob::MaxSectorsKb && from.max_sectors_kb != to.max_sectors_kb {
        format!("{v} with max_sectors_kb {}", to.max_sectors_kb)
    } else {
        v
    }
}

#[cfg(test)]
mod tests;
