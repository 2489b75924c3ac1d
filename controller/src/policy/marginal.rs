//! Marginal paths: a path that is not dead but sick (many times slower
//! than its peers, or failing some of its commands) is judged from the I/O
//! the observer already sees, with no probe traffic, and set aside in a
//! last path group (multipath-tools' `marginal_pathgroups`) until a
//! recovery time has passed; then it serves again on probation.
//!
//! Slow is relative, and measured so that the selector does not matter: a
//! path's *service time* in its busiest request-size class (its median
//! latency over the requests it held in flight on average, Little's law,
//! at least one) is divided by the median of its peers' (a slower array
//! slows every path alike), and that ratio by the path's usual one (paths
//! of unequal speed are normal: the tuner's business). How loaded a path
//! runs depends on the routing (selector, weights, active paths, request
//! size limit, path queue depth), the workload and the size class, so the
//! usual ratio is learnt per each of them, from the first `LEARN_WINDOWS`
//! windows and then from healthy ones: a tuner's trial is no sickness. A
//! routing not learnt yet is judged against the most lenient ratio learnt
//! under the same selector, workload, size limit and queue depth where the
//! path carried as large a share of the completions; with none, latency
//! judges nothing until learnt. A path is *bad* in a window when its ratio
//! reaches `latency_ratio` times its usual one, *marginal* when bad for
//! `sample_secs` on end.
//!
//! Errors are a rate over the last `ERROR_SPAN_SECS`: a path that failed
//! `error_rate_pct` of its commands, in more than one window (a burst at
//! one moment is a failure, the checker's business), is marginal at once.
//! They count while the checker finds the path up, whether or not dm has
//! failed it: dm fails a path at each error and the checker reinstates it,
//! which is what a sick path looks like.
//!
//! A window without enough samples says nothing. Each episode doubles the
//! next recovery time (up to 8x), so a path that toggles does not flap the
//! map; a long healthy spell forgets them.
use std::collections::{BTreeMap, VecDeque};

use serde::Deserialize;

use crate::blockdev::DevNum;

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MarginalConfig {
    pub enabled: bool,
    /// Bad: service time at least this many times the peers' median,
    /// beyond the path's usual ratio to them.
    pub latency_ratio: f64,
    /// Bad: at least this share of the path's commands failed (percent).
    pub error_rate_pct: f64,
    /// Bad for this long on end: marginal.
    pub sample_secs: f64,
    /// Set aside this long before serving again on probation (doubled
    /// per episode).
    pub recovery_secs: f64,
    /// Latency samples a path needs in a window to be judged on latency.
    pub min_samples: u64,
}

impl Default for MarginalConfig {
    fn default() -> Self {
        MarginalConfig {
            enabled: true,
            latency_ratio: 8.0,
            error_rate_pct: 0.25,
            sample_secs: 3.0,
            recovery_secs: 20.0,
            min_samples: 5,
        }
    }
}

/// Completions a window needs before its error rate counts.
const MIN_COMMANDS: u64 = 50;
/// How fast a path's usual ratio follows its healthy windows.
const USUAL_ALPHA: f64 = 0.1;
/// Windows that learn a path's usual ratio under a new setting.
const LEARN_WINDOWS: u32 = 5;
/// How much larger a path's share of the map's completions may be under a
/// new routing than under a learnt one whose usual ratio judges it (the
/// share moves a little from window to window).
const SHARE_SLACK: f64 = 1.25;
/// How far back a path's error rate looks.
const ERROR_SPAN_SECS: f64 = 10.0;
/// Episodes beyond which the recovery time stops doubling.
const MAX_DOUBLINGS: u32 = 3;

/// How a map routes I/O to its paths, and the I/O it routes: a path's
/// usual ratio to its peers is learnt per routing.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Routing {
    pub selector: String,
    /// Everything else that shapes the split (weights, active paths).
    pub detail: String,
    /// The workload class (the tuner's), or "idle".
    pub workload: String,
    /// The map's request size limit and its paths' queue
    /// depth: how the workload's I/O is cut into requests and how many of
    /// them each path holds at once (at queue depth 1, paths at their cap
    /// run many times the service time of idle peers that were level at a
    /// deep queue).
    pub max_sectors_kb: u32,
    pub queue_depth: u32,
}

impl Routing {
    pub fn new(
        selector: &str,
        detail: String,
        workload: String,
        max_sectors_kb: u32,
        queue_depth: u32,
    ) -> Self {
        Routing {
            selector: selector.to_string(),
            detail,
            workload,
            max_sectors_kb,
            queue_depth,
        }
    }
}

/// A path's usual log-ratio is kept per routing and size class.
type UsualKey = (Routing, &'static str);

/// A path's usual standing under one routing and size class.
#[derive(Clone, Copy, Debug)]
struct Usual {
    /// Its log-ratio to its peers.
    log_ratio: f64,
    /// Its share of the map's completions.
    share: f64,
    /// The windows behind them.
    windows: u32,
}

/// One path's figures over a window.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub dev: DevNum,
    /// It carries the map's I/O (not failed, not set aside).
    pub in_service: bool,
    /// The checker finds it up (dm may have failed it for an I/O error).
    pub checker_up: bool,
    /// Per request-size class: (class, latency samples, median µs).
    pub latency: Vec<(&'static str, u64, f64)>,
    pub completed: u64,
    pub errors: u64,
    /// The share of the window its latencies, completions and errors
    /// cover (0..1): 1 unless observation is time-sampled.
    pub observed: f64,
}

impl Sample {
    /// Latency samples it needs in a class to be judged on latency: a
    /// sampled window holds its share of them (a path slowed to 16 IOPS
    /// completes 4 in a quarter of a 1 s window, never 5), so it needs
    /// that share of `min`, at least 2. What it judges bad brings full
    /// observation back (`Model::suspects`), whose windows need `min`
    /// again to go on with the run; only those teach a path's usual ratio.
    fn min_samples(&self, min: u64) -> u64 {
        if self.observed >= 1.0 {
            return min;
        }
        ((min as f64 * self.observed).ceil() as u64).clamp(min.min(2), min)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum PathHealth {
    Healthy,
    /// Set aside until `back_at`.
    Marginal {
        since: f64,
        back_at: f64,
    },
    /// Serving again; judged as any path, against its usual ratio.
    Probation {
        since: f64,
    },
}

impl PathHealth {
    pub fn word(&self) -> &'static str {
        match self {
            PathHealth::Healthy => "healthy",
            PathHealth::Marginal { .. } => "marginal",
            PathHealth::Probation { .. } => "probation",
        }
    }
}

/// A path's change of state, with the figures behind it.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub dev: DevNum,
    pub to: &'static str,
    pub why: String,
}

#[derive(Clone, Debug)]
struct PathRecord {
    state: PathHealth,
    bad_since: Option<f64>,
    /// What made the path bad first in this run of bad windows.
    bad_why: String,
    /// Windows of the run that were judged bad (not merely silent).
    bad_windows: u32,
    good_since: Option<f64>,
    usual: BTreeMap<UsualKey, Usual>,
    episodes: u32,
    healthy_since: f64,
    /// Windows of the last `ERROR_SPAN_SECS` the path was up in: (end,
    /// length, commands, errors).
    errs: VecDeque<(f64, f64, u64, u64)>,
}

impl PathRecord {
    fn new(t: f64) -> Self {
        PathRecord {
            state: PathHealth::Healthy,
            bad_since: None,
            bad_why: String::new(),
            bad_windows: 0,
            good_since: None,
            usual: BTreeMap::new(),
            episodes: 0,
            healthy_since: t,
            errs: VecDeque::new(),
        }
    }

    /// Notes a window's commands and errors; the error rate over the last
    /// `ERROR_SPAN_SECS` when it makes the path bad: (why, start of the
    /// span).
    fn errors(
        &mut self,
        cfg: &MarginalConfig,
        t: f64,
        secs: f64,
        s: &Sample,
    ) -> Option<(String, f64)> {
        if !s.checker_up {
            self.errs.clear();
            return None;
        }
        self.errs
            .push_back((t, secs, s.completed + s.errors, s.errors));
        while self
            .errs
            .front()
            .is_some_and(|(end, ..)| *end <= t - ERROR_SPAN_SECS + 1e-9)
        {
            self.errs.pop_front();
        }
        // The rate since it began to err: clean seconds before that would
        // hide it for the whole span.
        let first = self.errs.iter().position(|e| e.3 > 0)?;
        let since = self.errs.range(first..);
        let covered: f64 = since.clone().map(|e| e.1).sum();
        let commands: u64 = since.clone().map(|e| e.2).sum();
        let errors: u64 = since.clone().map(|e| e.3).sum();
        let erring = since.filter(|e| e.3 > 0).count();
        if commands < MIN_COMMANDS || erring < 2 {
            return None;
        }
        let pct = errors as f64 * 100.0 / commands as f64;
        (pct >= cfg.error_rate_pct).then(|| {
            (
                format!("{pct:.1}% of {commands} commands failed in {covered:.0} s"),
                t - covered,
            )
        })
    }
}

/// The health of one map's paths.
#[derive(Clone, Debug)]
pub struct HealthModel {
    cfg: MarginalConfig,
    paths: BTreeMap<DevNum, PathRecord>,
}

/// Service time per request, µs: median latency over the mean number of
/// requests in flight (at least one), from `n` completions in `secs` (the
/// time they were observed in).
fn service_us(median_us: f64, n: u64, secs: f64) -> f64 {
    let in_flight = n as f64 * median_us / 1e6 / secs.max(1e-3);
    median_us / in_flight.max(1.0)
}

/// A path's standing against its peers in its busiest size class.
struct Standing {
    /// Its service time over the peers' median.
    ratio: f64,
    class: &'static str,
    /// Its samples of that class.
    samples: u64,
    /// Its service time and the peers' median, µs.
    mine: f64,
    peers: f64,
}

/// A path's service-time ratio to its peers in its busiest size class.
fn ratio(s: &Sample, all: &[Sample], min: u64, secs: f64) -> Option<Standing> {
    let (class, n, lat) = s
        .latency
        .iter()
        .filter(|(_, n, _)| *n >= s.min_samples(min))
        .max_by_key(|(_, n, _)| *n)?;
    let mine = service_us(*lat, *n, secs * s.observed);
    let mut peers: Vec<f64> = all
        .iter()
        .filter(|p| p.dev != s.dev && p.in_service)
        .filter_map(|p| {
            p.latency
                .iter()
                .find(|(c, n, _)| c == class && *n >= p.min_samples(min))
                .map(|l| service_us(l.2, l.1, secs * p.observed))
        })
        .collect();
    if peers.is_empty() {
        return None;
    }
    peers.sort_by(f64::total_cmp);
    let mid = peers.len() / 2;
    let median = if peers.len().is_multiple_of(2) {
        (peers[mid - 1] + peers[mid]) / 2.0
    } else {
        peers[mid]
    };
    (median > 0.0).then(|| Standing {
        ratio: mine / median,
        class,
        samples: *n,
        mine,
        peers: median,
    })
}

impl HealthModel {
    pub fn new(cfg: MarginalConfig) -> Self {
        HealthModel {
            cfg,
            paths: BTreeMap::new(),
        }
    }

    /// New settings (SIGHUP); what was judged stays.
    pub fn set_config(&mut self, cfg: MarginalConfig) {
        self.cfg = cfg;
    }

    pub fn state(&self, dev: DevNum) -> PathHealth {
        self.paths
            .get(&dev)
            .map_or(PathHealth::Healthy, |p| p.state.clone())
    }

    /// The paths to keep set aside now.
    pub fn marginal(&self) -> Vec<DevNum> {
        self.paths
            .iter()
            .filter(|(_, p)| matches!(p.state, PathHealth::Marginal { .. }))
            .map(|(d, _)| *d)
            .collect()
    }

    /// Whether any path is under suspicion: not healthy, in a run of bad
    /// windows, or with an error in its error span. Time-sampled
    /// observation (which sees a share of the errors and latencies) then
    /// gives way to full observation until the map is clear again.
    pub fn suspects(&self) -> bool {
        self.paths.values().any(|p| {
            p.state != PathHealth::Healthy
                || p.bad_since.is_some()
                || p.errs.iter().any(|e| e.3 > 0)
        })
    }

    /// An operator ends a path's marginal state (or probation): healthy,
    /// with its episodes forgotten. False if it was healthy already.
    pub fn unmark(&mut self, dev: DevNum, t: f64) -> bool {
        let Some(p) = self.paths.get_mut(&dev) else {
            return false;
        };
        let was = p.state != PathHealth::Healthy;
        p.state = PathHealth::Healthy;
        p.bad_since = None;
        p.good_since = None;
        p.episodes = 0;
        p.healthy_since = t;
        was
    }

    /// Paths that left the map are forgotten.
    pub fn retain(&mut self, devs: &[DevNum]) {
        self.paths.retain(|d, _| devs.contains(d));
    }

    /// One window's figures (`secs` long, ending at time `t`, under
    /// `routing`): the paths whose state changed.
    pub fn step(
        &mut self,
        t: f64,
        secs: f64,
        routing: &Routing,
        samples: &[Sample],
    ) -> Vec<Transition> {
        let mut out = vec![];
        if !self.cfg.enabled {
            return out;
        }
        let cfg = self.cfg.clone();
        // Never the last path in service: a sick path beats none.
        let serving = samples.iter().filter(|s| s.in_service).count();
        let mut set_aside_now = 0;
        for s in samples {
            let p = self
                .paths
                .entry(s.dev)
                .or_insert_with(|| PathRecord::new(t));
            if let PathHealth::Marginal { back_at, .. } = p.state {
                if t >= back_at {
                    p.state = PathHealth::Probation { since: t };
                    p.bad_since = None;
                    p.good_since = None;
                    out.push(Transition {
                        dev: s.dev,
                        to: "probation",
                        why: format!(
                            "set aside {:.0} s: serving again on probation",
                            t - p.healthy_since
                        ),
                    });
                }
                continue;
            }
            let erring = p.errors(&cfg, t, secs, s);
            let new_run = p.bad_since.is_none();
            if !s.in_service && erring.is_none() {
                p.bad_since = None;
                continue;
            }
            // A window that says nothing goes on with a bad run (a slow
            // path gets few requests from a load-aware selector), but only
            // a bad window starts one.
            let now = erring.is_some();
            let judged = match erring {
                Some((why, start)) => {
                    // The error span is a sample time of its own.
                    p.bad_since = Some(p.bad_since.map_or(start, |b| b.min(start)));
                    Some(Verdict {
                        bad: true,
                        why,
                        learn: None,
                    })
                }
                None => {
                    // A good window's reason is said only when it ends a
                    // probation: not formatted for every path each window.
                    let explain = matches!(p.state, PathHealth::Probation { .. });
                    judge(&cfg, s, samples, secs, routing, &p.usual, explain)
                }
            };
            let silent = judged.is_none();
            let Verdict { bad, why, learn } = match judged {
                Some(j) => j,
                None if p.bad_since.is_some() && p.bad_windows >= 2 => Verdict {
                    bad: true,
                    why: "too few samples".to_string(),
                    learn: None,
                },
                None => continue,
            };
            if !bad {
                if let Some((key, now)) = learn {
                    let u = p.usual.entry(key).or_insert(Usual { windows: 0, ..now });
                    let alpha = if u.windows < LEARN_WINDOWS {
                        1.0 / f64::from(u.windows + 1)
                    } else {
                        USUAL_ALPHA
                    };
                    u.log_ratio += alpha * (now.log_ratio - u.log_ratio);
                    u.share += alpha * (now.share - u.share);
                    u.windows += 1;
                }
                p.bad_since = None;
                // Spans count from the start of their first window.
                let good = *p.good_since.get_or_insert(t - secs);
                if let PathHealth::Probation { since } = p.state
                    && t - good >= cfg.sample_secs
                {
                    p.state = PathHealth::Healthy;
                    p.healthy_since = t;
                    out.push(Transition {
                        dev: s.dev,
                        to: "healthy",
                        why: format!(
                            "good for {:.0} s on probation (since {:.0} s ago): {why}",
                            t - good,
                            t - since
                        ),
                    });
                }
                if p.state == PathHealth::Healthy
                    && p.episodes > 0
                    && t - p.healthy_since >= 4.0 * cfg.recovery_secs
                {
                    p.episodes = 0;
                }
                continue;
            }
            p.good_since = None;
            let since = *p.bad_since.get_or_insert(t - secs);
            if new_run {
                p.bad_why = why.clone();
                p.bad_windows = 0;
            }
            if !silent {
                p.bad_windows += 1;
            }
            // Never the last path in service.
            let others = serving.saturating_sub(set_aside_now + usize::from(s.in_service));
            if (!now && t - since + 1e-9 < cfg.sample_secs) || others == 0 {
                continue;
            }
            let hold = cfg.recovery_secs * f64::from(1u32 << p.episodes.min(MAX_DOUBLINGS));
            p.episodes += 1;
            p.state = PathHealth::Marginal {
                since: t,
                back_at: t + hold,
            };
            p.healthy_since = t;
            p.bad_since = None;
            p.errs.clear();
            set_aside_now += usize::from(s.in_service);
            out.push(Transition {
                dev: s.dev,
                to: "marginal",
                why: if p.bad_why == why {
                    format!(
                        "bad for {:.0} s ({why}): set aside for {hold:.0} s (episode {})",
                        t - since,
                        p.episodes
                    )
                } else {
                    format!(
                        "bad for {:.0} s ({}; now {why}): set aside for {hold:.0} s (episode {})",
                        t - since,
                        p.bad_why,
                        p.episodes
                    )
                },
            });
        }
        out
    }
}

/// One window's judgement of a path.
struct Verdict {
    bad: bool,
    why: String,
    /// The path's standing in the window, and the key it is learnt under.
    learn: Option<(UsualKey, Usual)>,
}

/// Whether a path in service was bad in this window, and why; `None`
/// when the window says nothing.
fn judge(
    cfg: &MarginalConfig,
    s: &Sample,
    all: &[Sample],
    secs: f64,
    routing: &Routing,
    usual: &BTreeMap<UsualKey, Usual>,
    explain: bool,
) -> Option<Verdict> {
    if !s.in_service {
        return None;
    }
    let Standing {
        ratio: r,
        class,
        samples,
        mine,
        peers,
    } = ratio(s, all, cfg.min_samples, secs)?;
    let key = (routing.clone(), class);
    let figures = || {
        format!(
            "service time {} {:.1} ms, peers {:.1} ms: {r:.1}x",
            class,
            mine / 1000.0,
            peers / 1000.0
        )
    };
    let l = r.ln();
    let learnt = |u: &Usual| (u.windows >= LEARN_WINDOWS).then_some(u.log_ratio.exp());
    let total: u64 = all
        .iter()
        .filter(|p| p.in_service)
        .map(|p| p.completed)
        .sum();
    let share = s.completed as f64 / total.max(1) as f64;
    // Its usual ratio under this routing, else, while this routing learns,
    // the most lenient one learnt under the same selector, workload,
    // request size limit and queue depth where the path carried as large a
    // share of the I/O: one that gets more of it now runs busier beside
    // peers that idle more, which is the new routing, not sickness (weights
    // from a misread capacity can send equal paths' writes to two of them,
    // many times slower than their idle peers), while a sick path gets
    // less.
    let (usual, own) = match usual.get(&key).and_then(learnt) {
        Some(u) => (Some(u), true),
        None => (
            usual
                .iter()
                .filter(|((rt, c), _)| {
                    rt.selector == routing.selector
                        && rt.workload == routing.workload
                        && rt.max_sectors_kb == routing.max_sectors_kb
                        && rt.queue_depth == routing.queue_depth
                        && *c == class
                })
                .filter(|(_, u)| share <= u.share * SHARE_SLACK)
                .filter_map(|(_, v)| learnt(v))
                .max_by(f64::total_cmp),
            false,
        ),
    };
    let bad = usual.is_some_and(|u| r >= cfg.latency_ratio * u);
    let why = match usual {
        _ if !bad && !explain => String::new(),
        Some(u) if own => format!("{} (usually {u:.1}x)", figures()),
        Some(u) => format!(
            "{} (learning; up to {u:.1}x under {})",
            figures(),
            routing.selector
        ),
        None => format!("{} (learning)", figures()),
    };
    // Fewer samples than `min` judge a sampled window, but teach nothing.
    let enough = samples >= cfg.min_samples;
    Some(Verdict {
        bad,
        why,
        learn: enough.then_some((
            key,
            Usual {
                log_ratio: l,
                share,
                windows: 1,
            },
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::d;

    /// A 1 s window where path `i` completed `p[i].1` requests of the 64k
    /// class with median `p[i].0` ms.
    fn w(p: &[(f64, u64)], out: &[usize]) -> Vec<Sample> {
        p.iter()
            .enumerate()
            .map(|(i, (ms, n))| Sample {
                dev: d(16 * i as u32),
                in_service: !out.contains(&i),
                checker_up: true,
                latency: vec![("64k-256k", *n, ms * 1000.0)],
                completed: *n,
                errors: 0,
                observed: 1.0,
            })
            .collect()
    }

    fn run(
        m: &mut HealthModel,
        t0: f64,
        secs: usize,
        p: &[(f64, u64)],
        out: &[usize],
    ) -> Vec<(f64, Transition)> {
        run_in(m, "st", t0, secs, p, out)
    }

    /// "selector detail" as a routing, "/workload" after it if not the
    /// usual one, and "@max_sectors_kb:queue_depth" after that if not
    /// 1280:128.
    fn routing(setting: &str) -> Routing {
        let (setting, queues) = setting.split_once('@').unwrap_or((setting, "1280:128"));
        let (kb, qd) = queues.split_once(':').unwrap();
        let (setting, workload) = setting
            .split_once('/')
            .unwrap_or((setting, "read-medium-random"));
        let (sel, detail) = setting.split_once(' ').unwrap_or((setting, ""));
        Routing::new(
            sel,
            detail.to_string(),
            workload.to_string(),
            kb.parse().unwrap(),
            qd.parse().unwrap(),
        )
    }

    /// `run` under the routing named `setting` ("selector detail").
    fn run_in(
        m: &mut HealthModel,
        setting: &str,
        t0: f64,
        secs: usize,
        p: &[(f64, u64)],
        out: &[usize],
    ) -> Vec<(f64, Transition)> {
        let mut v = vec![];
        for i in 0..secs {
            let t = t0 + i as f64;
            for tr in m.step(t, 1.0, &routing(setting), &w(p, out)) {
                v.push((t, tr));
            }
        }
        v
    }

    /// Four 20 MiB/s paths at QD16 of 64 KiB (4 in flight each).
    const EVEN: [(f64, u64); 4] = [(12.5, 320), (12.5, 320), (12.5, 320), (12.5, 320)];
    /// Path 1 at a twentieth of its rate: as many in flight (queue-length),
    /// a twentieth of the completions.
    const SICK: [(f64, u64); 4] = [(12.5, 320), (250.0, 16), (12.5, 320), (12.5, 320)];

    #[test]
    fn a_sampled_window_judges_a_slow_path_on_its_share_of_the_samples() {
        // A quarter of each 1 s window observed: a quarter of EVEN's and
        // SICK's completions, 4 on the sick path, where 5 judge a full one.
        let quarter = |p: &[(f64, u64); 4], share: f64| {
            let mut v = w(&p.map(|(ms, n)| (ms, n / 4)), &[]);
            for s in &mut v {
                s.observed = share;
            }
            v
        };
        let r = routing("st");
        let mut m = HealthModel::new(MarginalConfig::default());
        for t in 0..30 {
            assert!(m.step(t as f64, 1.0, &r, &quarter(&EVEN, 0.25)).is_empty());
        }
        // Taken as full windows, 4 samples say nothing.
        let mut full = m.clone();
        full.step(30.0, 1.0, &r, &quarter(&SICK, 1.0));
        assert!(!full.suspects(), "4 samples judged a full window");
        // Sampled, they start a bad run: the path is suspect (the probes
        // stay attached from there) but not marginal on that alone.
        assert!(m.step(30.0, 1.0, &r, &quarter(&SICK, 0.25)).is_empty());
        assert!(m.suspects(), "the sick path not judged from its share");
        assert_eq!(m.state(d(16)), PathHealth::Healthy);
        // In full observation from there, it is set aside as ever.
        let tr = run(&mut m, 31.0, 4, &SICK, &[]);
        assert_eq!(tr.len(), 1, "{tr:?}");
        assert_eq!((tr[0].1.dev, tr[0].1.to), (d(16), "marginal"));
        // Judged on 2 of 5 samples, a window teaches no usual ratio: a
        // healthy path with 3 samples leaves the learnt ones as they were.
        let mut few = HealthModel::new(MarginalConfig::default());
        let mut thin = quarter(&EVEN, 0.25);
        for s in &mut thin {
            s.latency[0].1 = 3;
        }
        few.step(0.0, 1.0, &r, &thin);
        assert!(few.paths.values().all(|p| p.usual.is_empty()));
    }

    #[test]
    fn a_path_twenty_times_slower_is_set_aside_and_serves_again_after_recovery() {
        let mut m = HealthModel::new(MarginalConfig::default());
        assert!(run(&mut m, 0.0, 30, &EVEN, &[]).is_empty());
        let tr = run(&mut m, 30.0, 10, &SICK, &[]);
        assert_eq!(tr.len(), 1, "{tr:?}");
        let (t, x) = &tr[0];
        assert_eq!((x.dev, x.to), (d(16), "marginal"));
        assert_eq!(*t, 32.0, "bad from the window ending at 30 s: 3 s at 32 s");
        assert!(x.why.contains("20.0x"), "{}", x.why);
        assert_eq!(m.marginal(), vec![d(16)]);
        assert_eq!(m.state(d(16)).word(), "marginal");
        // Set aside, it gets no I/O (the figures say nothing of it) ...
        let aside = [(12.5, 420), (0.0, 0), (12.5, 420), (12.5, 420)];
        assert!(run(&mut m, 40.0, 12, &aside, &[1]).is_empty());
        // ... until its recovery time is over; healthy again, it stays.
        let tr = run(&mut m, 52.0, 12, &EVEN, &[]);
        let to: Vec<(f64, &str)> = tr.iter().map(|(t, x)| (*t, x.to)).collect();
        assert_eq!(to, vec![(52.0, "probation"), (55.0, "healthy")]);
        assert!(m.marginal().is_empty());
    }

    #[test]
    fn silent_windows_carry_a_bad_run_but_do_not_start_one() {
        let mut m = HealthModel::new(MarginalConfig::default());
        run(&mut m, 0.0, 10, &EVEN, &[]);
        // Bad twice, then the selector sends it too little to judge.
        let few = [(12.5, 320), (250.0, 2), (12.5, 320), (12.5, 320)];
        assert!(run(&mut m, 10.0, 2, &SICK, &[]).is_empty());
        let tr = run(&mut m, 12.0, 3, &few, &[]);
        assert_eq!(tr.len(), 1, "{tr:?}");
        assert_eq!(tr[0].0, 12.0, "3 s from the start of the first bad window");
        // One bad window (noise) and then silence: nothing.
        let mut m = HealthModel::new(MarginalConfig::default());
        run(&mut m, 0.0, 10, &EVEN, &[]);
        assert!(run(&mut m, 10.0, 1, &SICK, &[]).is_empty());
        assert!(run(&mut m, 11.0, 10, &few, &[]).is_empty());
    }

    #[test]
    fn unequal_paths_and_the_tuners_trials_are_not_sickness() {
        let mut m = HealthModel::new(MarginalConfig::default());
        // 4/8/16/32 MiB/s under queue-length (4 in flight each).
        let ql = [(62.5, 64), (31.2, 128), (15.6, 256), (7.8, 512)];
        assert!(run_in(&mut m, "ql", 0.0, 30, &ql, &[]).is_empty());
        // Under round-robin the slowest path holds 13 of the 16 requests
        // while the others idle at their bare latency (the throttle's
        // burst): 30x its peers, and its usual for this setting.
        let rr = [(203.0, 64), (0.5, 64), (0.5, 64), (0.5, 64)];
        assert!(run_in(&mut m, "rr", 30.0, 30, &rr, &[]).is_empty());
        // Back and forth, as the tuner's trials go: nothing either.
        assert!(run_in(&mut m, "ql", 60.0, 10, &ql, &[]).is_empty());
        assert!(run_in(&mut m, "rr", 70.0, 10, &rr, &[]).is_empty());
        // A path that really sickens is seen.
        let sick = [(62.5, 64), (31.2, 128), (15.6, 256), (160.0, 25)];
        let tr = run_in(&mut m, "ql", 80.0, 6, &sick, &[]);
        assert_eq!(tr.len(), 1, "{tr:?}");
        assert_eq!(tr[0].1.dev, d(48));
        assert!(tr[0].1.why.contains("usually 0.2x"), "{}", tr[0].1.why);
    }

    #[test]
    fn a_path_slow_from_the_start_is_learnt_not_judged() {
        // Latency says nothing of a path until its usual is learnt: one
        // slow since the daemon first saw it is unequal, not sick.
        let mut m = HealthModel::new(MarginalConfig::default());
        assert!(run(&mut m, 0.0, 30, &SICK, &[]).is_empty());
        // A setting it has not seen yet is learnt first too.
        assert!(run_in(&mut m, "rr", 30.0, 5, &EVEN, &[]).is_empty());
        let tr = run_in(&mut m, "rr", 35.0, 5, &SICK, &[]);
        assert_eq!(tr.len(), 1, "{tr:?}");
    }

    #[test]
    fn a_path_that_sickens_as_the_tuner_moves_weights_is_not_learnt_as_usual() {
        let mut m = HealthModel::new(MarginalConfig::default());
        assert!(run_in(&mut m, "st [1, 1, 1, 1] 4", 0.0, 30, &EVEN, &[]).is_empty());
        // New weights, and path 1 slows at once: judged by the selector's
        // usual ratio while the new setting learns.
        let tr = run_in(&mut m, "st [1, 1, 1, 4] 4", 30.0, 10, &SICK, &[]);
        assert_eq!(tr.len(), 1, "{tr:?}");
        assert_eq!((tr[0].0, tr[0].1.dev), (32.0, d(16)));
        assert!(
            tr[0].1.why.contains("up to 1.0x under st"),
            "{}",
            tr[0].1.why
        );
        // A new setting that only shifts the split a little is learnt.
        let mut m = HealthModel::new(MarginalConfig::default());
        run_in(&mut m, "st [1, 1, 1, 1] 4", 0.0, 30, &EVEN, &[]);
        let shifted = [(12.5, 320), (50.0, 80), (12.5, 320), (12.5, 320)];
        assert!(run_in(&mut m, "st [1, 1, 1, 4] 4", 30.0, 30, &shifted, &[]).is_empty());
    }

    #[test]
    fn paths_given_more_of_the_io_by_new_weights_are_learnt_not_judged() {
        // 4 paths of 100 IOPS, 4 KiB sequential writes, service-time: level
        // under equal weights, then a trial of weights from a misread
        // capacity sends the writes to two paths, busy at their cap beside
        // two idling at 1 ms. The busy ones are not sick.
        let mut m = HealthModel::new(MarginalConfig::default());
        let st = "st [1, 1, 1, 1] 4/write-small-sequential";
        let level = [(12.5, 100), (12.5, 100), (12.5, 100), (12.5, 100)];
        assert!(run_in(&mut m, st, 0.0, 30, &level, &[]).is_empty());
        let trial = "st [1, 1, 100, 75] 4/write-small-sequential";
        let two_busy = [(1.0, 10), (1.0, 10), (12.5, 100), (12.5, 100)];
        let tr = run_in(&mut m, trial, 30.0, 30, &two_busy, &[]);
        assert!(tr.is_empty(), "{tr:?}");
        // Learnt under the trial's weights, a busy path that sickens is seen.
        let sick = [(1.0, 10), (1.0, 10), (12.5, 100), (150.0, 8)];
        let tr = run_in(&mut m, trial, 60.0, 6, &sick, &[]);
        assert_eq!(tr.len(), 1, "{tr:?}");
        assert_eq!(tr[0].1.dev, d(48));
        // While the trial learns, a path that gets less of the I/O is
        // judged by the equal weights' usual: one that sickens is seen.
        let mut m = HealthModel::new(MarginalConfig::default());
        run_in(&mut m, st, 0.0, 30, &level, &[]);
        let idle_sick = [(100.0, 10), (1.0, 10), (12.5, 100), (12.5, 100)];
        let tr = run_in(&mut m, trial, 30.0, 6, &idle_sick, &[]);
        assert_eq!(tr.len(), 1, "{tr:?}");
        assert_eq!(tr[0].1.dev, d(0));
        assert!(tr[0].1.why.contains("learning; up to"), "{}", tr[0].1.why);
    }

    #[test]
    fn a_new_workload_is_learnt_not_judged_by_another_workloads_usual() {
        // 4 paths capped 10/20/40/80 MiB/s, service-time: under random
        // 64 KiB reads the 40 MiB/s path idles beside its peers; under
        // sequential 1 MiB reads it runs full, 6.5x their service time,
        // with nothing wrong with it.
        let mut m = HealthModel::new(MarginalConfig::default());
        let random = [(0.5, 100), (0.5, 200), (0.3, 400), (0.5, 800)];
        assert!(run_in(&mut m, "st [1, 1, 1, 1] 4", 0.0, 30, &random, &[]).is_empty());
        let full = [(0.4, 100), (0.4, 200), (2.6, 400), (0.4, 800)];
        let seq = "st [1, 1, 1, 1] 4/read-large-sequential";
        assert!(run_in(&mut m, seq, 30.0, 30, &full, &[]).is_empty());
        // Under the new workload's own usual, a path that sickens is seen,
        // even as the tuner moves the weights.
        let sick = [(0.4, 100), (0.4, 200), (2.6, 400), (20.0, 40)];
        let tr = run_in(
            &mut m,
            "st [1, 1, 1, 4] 4/read-large-sequential",
            60.0,
            6,
            &sick,
            &[],
        );
        assert_eq!(tr.len(), 1, "{tr:?}");
        assert_eq!(tr[0].1.dev, d(48));
        assert!(tr[0].1.why.contains("under st"), "{}", tr[0].1.why);
    }

    #[test]
    fn a_new_request_size_limit_is_learnt_not_judged_by_the_old_ones_usual() {
        // 4 paths capped 10/20/40/80 MiB/s, one 1 MiB reader, service-time
        // weighted by capacity: the tuner tries max_sectors_kb 1280 -> 256,
        // and the 80 MiB/s path, 0.2x its idle peers' service time while it
        // takes whole 1 MiB requests, serves the pieces at 3.7x. It is not
        // sick.
        let mut m = HealthModel::new(MarginalConfig::default());
        let weighted = "st [12, 25, 50, 100] 4/read-large-sequential";
        let whole = [(4.0, 10), (4.0, 10), (4.0, 10), (0.8, 60)];
        assert!(run_in(&mut m, weighted, 0.0, 30, &whole, &[]).is_empty());
        let pieces = [(0.8, 10), (0.8, 10), (0.8, 10), (3.0, 200)];
        let split = format!("{weighted}@256:128");
        let tr = run_in(&mut m, &split, 30.0, 30, &pieces, &[]);
        assert!(tr.is_empty(), "{tr:?}");
        // Learnt under the new limit, a path that sickens is seen.
        let sick = [(0.8, 10), (0.8, 10), (0.8, 10), (30.0, 20)];
        let tr = run_in(&mut m, &split, 60.0, 6, &sick, &[]);
        assert_eq!(tr.len(), 1, "{tr:?}");
        assert_eq!(tr[0].1.dev, d(48));
        assert!(tr[0].1.why.contains("usually 3.8x"), "{}", tr[0].1.why);
    }

    #[test]
    fn a_new_queue_depth_is_learnt_not_judged_by_the_old_ones_usual() {
        // 4 paths of 100 IOPS, 4 KiB sequential writes at QD32,
        // service-time: level at queue depth 128, then at queue depth 1 two
        // paths run at their cap (12.5 ms a request) while two idle at
        // 1 ms. The busy ones are not sick.
        let mut m = HealthModel::new(MarginalConfig::default());
        let st = "st [] 4/write-small-sequential";
        let level = [(12.5, 100), (12.5, 100), (12.5, 100), (12.5, 100)];
        assert!(run_in(&mut m, st, 0.0, 30, &level, &[]).is_empty());
        let qd1 = format!("{st}@1280:1");
        let two_busy = [(12.5, 80), (1.0, 20), (1.0, 20), (12.5, 80)];
        let tr = run_in(&mut m, &qd1, 30.0, 30, &two_busy, &[]);
        assert!(tr.is_empty(), "{tr:?}");
        // Learnt at the new depth, a path that sickens is seen.
        let sick = [(150.0, 8), (1.0, 20), (1.0, 20), (12.5, 80)];
        let tr = run_in(&mut m, &qd1, 60.0, 6, &sick, &[]);
        assert_eq!(tr.len(), 1, "{tr:?}");
        assert_eq!(tr[0].1.dev, d(0));
    }

    #[test]
    fn a_toggling_path_does_not_flap_the_map() {
        let mut m = HealthModel::new(MarginalConfig::default());
        run(&mut m, 0.0, 20, &EVEN, &[]);
        // Slow and fast every 5 s for 120 s.
        let mut marginal = vec![];
        for i in 0..120 {
            let t = 20.0 + i as f64;
            let slow = (i / 5) % 2 == 0;
            let aside = m.marginal().contains(&d(16));
            let p = if slow { SICK } else { EVEN };
            for tr in m.step(
                t,
                1.0,
                &routing("st"),
                &w(&p, if aside { &[1] } else { &[] }),
            ) {
                if tr.to == "marginal" {
                    marginal.push(t);
                }
            }
        }
        // At most 2 per minute, fewer as the recovery time doubles.
        for start in [20.0, 80.0] {
            let n = marginal
                .iter()
                .filter(|t| **t >= start && **t < start + 60.0)
                .count();
            assert!(n <= 2, "{marginal:?}");
        }
        assert!(!marginal.is_empty());
    }

    #[test]
    fn errors_make_a_path_marginal_and_the_last_path_is_never_set_aside() {
        let mut m = HealthModel::new(MarginalConfig::default());
        let mut s = w(&[(12.5, 100), (12.5, 100)], &[]);
        s[0].errors = 2; // 2 of 102: 2%
        let mut marg = vec![];
        for i in 0..6 {
            marg.extend(m.step(i as f64, 1.0, &routing("st"), &s));
        }
        assert_eq!(marg.len(), 1);
        assert!(
            marg[0].why.contains("2.0% of 204 commands failed in 2 s"),
            "{}",
            marg[0].why
        );
        // Now the other one errs too: it is the last in service, it stays.
        s[0].in_service = false;
        s[1].errors = 5;
        for i in 6..20 {
            let tr = m.step(i as f64, 1.0, &routing("st"), &s);
            assert!(tr.iter().all(|x| x.dev != d(16)), "{tr:?}");
        }
    }

    #[test]
    fn a_path_is_suspect_from_its_first_error_until_its_error_span_is_clean() {
        let mut m = HealthModel::new(MarginalConfig::default());
        run(&mut m, 0.0, 10, &EVEN, &[]);
        assert!(!m.suspects(), "healthy paths and no errors");
        let mut s = w(&EVEN, &[]);
        s[1].errors = 1;
        m.step(10.0, 1.0, &routing("st"), &s);
        assert!(
            m.suspects(),
            "one error (one of 321, not yet a rate): suspect"
        );
        run(&mut m, 11.0, 8, &EVEN, &[]);
        assert!(m.suspects(), "the error is still in its span");
        run(&mut m, 19.0, 2, &EVEN, &[]);
        assert!(!m.suspects(), "the span is clean again");
    }

    #[test]
    fn a_path_failing_some_commands_as_dm_and_the_checker_flap_it_is_set_aside() {
        let mut m = HealthModel::new(MarginalConfig::default());
        run(&mut m, 0.0, 10, &EVEN, &[]);
        // 1 command in 100 fails; dm fails the path at each error and the
        // checker reinstates it: out of service every other window.
        let mut tr = vec![];
        for i in 10..20 {
            let mut s = w(&[(12.5, 200), (12.5, 99), (12.5, 200), (12.5, 200)], &[]);
            s[1].errors = 1;
            s[1].in_service = i % 2 == 0;
            tr.extend(
                m.step(i as f64, 1.0, &routing("st"), &s)
                    .into_iter()
                    .map(|x| (i, x)),
            );
        }
        assert_eq!(tr.len(), 1, "{tr:?}");
        let (i, x) = &tr[0];
        assert_eq!((*i, x.dev, x.to), (11, d(16), "marginal"));
        assert!(
            x.why.contains("1.0% of 200 commands failed in 2 s"),
            "{}",
            x.why
        );
    }

    #[test]
    fn a_burst_of_errors_as_a_path_dies_is_the_checkers_business() {
        let mut m = HealthModel::new(MarginalConfig::default());
        run(&mut m, 0.0, 10, &EVEN, &[]);
        // Its in-flight commands fail at once, then dm and the checker
        // find it down; it comes back clean.
        let mut s = w(&[(12.5, 320), (12.5, 40), (12.5, 320), (12.5, 320)], &[]);
        s[1].errors = 8;
        assert!(m.step(10.0, 1.0, &routing("st"), &s).is_empty());
        let mut down = w(&[(12.5, 420), (0.0, 0), (12.5, 420), (12.5, 420)], &[1]);
        down[1].checker_up = false;
        for i in 11..20 {
            assert!(m.step(i as f64, 1.0, &routing("st"), &down).is_empty());
        }
        assert!(run(&mut m, 20.0, 10, &EVEN, &[]).is_empty());
        // A burst while the checker still finds it up is one window: no rate.
        let mut s = w(&EVEN, &[]);
        s[1].errors = 30;
        assert!(m.step(30.0, 1.0, &routing("st"), &s).is_empty());
        assert!(run(&mut m, 31.0, 10, &EVEN, &[]).is_empty());
        // Two lone errors 8 s apart are a rate of 0.08%: nothing.
        let mut s = w(&EVEN, &[]);
        s[1].errors = 1;
        assert!(m.step(41.0, 1.0, &routing("st"), &s).is_empty());
        assert!(run(&mut m, 42.0, 7, &EVEN, &[]).is_empty());
        assert!(m.step(49.0, 1.0, &routing("st"), &s).is_empty());
    }

    #[test]
    fn too_few_samples_say_nothing_and_unmark_ends_it_by_hand() {
        let mut m = HealthModel::new(MarginalConfig::default());
        run(&mut m, 0.0, 10, &EVEN[..3], &[]);
        let mut s = w(&SICK[..3], &[]);
        s[1].latency[0].1 = 3;
        for i in 10..20 {
            assert!(m.step(i as f64, 1.0, &routing("st"), &s).is_empty());
        }
        s[1].latency[0].1 = 16;
        for i in 20..30 {
            m.step(i as f64, 1.0, &routing("st"), &s);
        }
        assert_eq!(m.marginal(), vec![d(16)]);
        assert!(m.unmark(d(16), 30.0));
        assert!(m.marginal().is_empty());
        assert!(!m.unmark(d(16), 30.0));
        // Disabled: nothing is judged.
        let mut off = HealthModel::new(MarginalConfig {
            enabled: false,
            ..MarginalConfig::default()
        });
        for i in 0..20 {
            assert!(off.step(i as f64, 1.0, &routing("st"), &s).is_empty());
        }
    }
}
