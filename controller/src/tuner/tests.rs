//! The search against synthetic maps whose throughput is a known function of
//! the settings: does it find the best, refuse noise, honour the kernel's
//! read-back, snap back, pause? (The real kernel is in the VM tests.)
use super::window::{PathFigures, window};
use super::*;
use crate::tuner::settings::example;

/// What the kernel keeps of a requested setting, given the current one.
type KeepFn = Box<dyn Fn(&Settings, &Settings) -> Settings>;
/// The paths' figures under a setting.
type PathsFn = Box<dyn Fn(&Settings) -> Vec<PathFigures>>;

struct Plant {
    f: Box<dyn Fn(&Settings) -> f64>,
    /// Relative noise amplitude.
    noise: f64,
    rng: u64,
    caps: Vec<f64>,
    keeps: KeepFn,
    stall_ms: Option<f64>,
    /// The paths' figures under a setting, where not `caps` at half load.
    paths: Option<PathsFn>,
}

impl Plant {
    fn new(f: impl Fn(&Settings) -> f64 + 'static, caps: Vec<f64>) -> Self {
        Plant {
            f: Box::new(f),
            noise: 0.02,
            rng: 42,
            caps,
            keeps: Box::new(|_, req| req.clone()),
            stall_ms: Some(20.0),
            paths: None,
        }
    }

    fn rand(&mut self) -> f64 {
        // xorshift: deterministic noise in [-1, 1].
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng % 2001) as f64 / 1000.0 - 1.0
    }

    fn window(&mut self, s: &Settings, kib: f64, seq: f64, read: f64) -> Window {
        let mib = (self.f)(s) * (1.0 + self.noise * self.rand());
        let mut w = window(mib, kib, seq, read);
        // Every path busy half the time at half its capacity.
        w.paths = match &self.paths {
            Some(f) => f(s),
            None => self
                .caps
                .iter()
                .map(|c| PathFigures {
                    mib_s: c * 0.5,
                    iops: c * 0.5 * 1024.0 / kib,
                    util: Some(0.5),
                })
                .collect(),
        };
        w
    }
}

struct Run {
    tuner: Tuner,
    t: f64,
    applied: Vec<(Knob, Settings)>,
}

impl Run {
    fn new(mode: Mode, start: Settings) -> Self {
        let sels = vec![
            Selector::RoundRobin,
            Selector::QueueLength,
            Selector::ServiceTime,
        ];
        Run {
            tuner: Tuner::new("mpatha", mode, TunerConfig::default(), start, sels),
            t: 0.0,
            applied: vec![],
        }
    }

    /// `n` windows of 5 s of one workload.
    fn steps(&mut self, p: &mut Plant, n: usize, kib: f64, seq: f64, read: f64, h: &Health) {
        for _ in 0..n {
            self.t += 5.0;
            let w = p.window(self.tuner.settings(), kib, seq, read);
            if let Some(a) = self.tuner.on_window(self.t, &w, h) {
                let rb = (p.keeps)(self.tuner.settings(), &a.to);
                self.applied.push((a.knob, a.to.clone()));
                self.tuner.applied(
                    self.t,
                    a.knob,
                    &a.to,
                    rb,
                    if a.knob.needs_reload() {
                        p.stall_ms
                    } else {
                        None
                    },
                );
            }
        }
    }
}

/// The asym testbed's figures: 4 paths capped 10/20/40/80 MiB/s.
fn asym(s: &Settings) -> f64 {
    match (&s.selector, s.weights.as_slice()) {
        (Selector::RoundRobin, _) => 41.8,
        (Selector::QueueLength, _) => 129.5,
        (Selector::ServiceTime, []) => 129.5,
        (Selector::ServiceTime, w) if w == [13, 25, 50, 100] => 148.2,
        (Selector::ServiceTime, _) => 135.0,
        _ => 10.0,
    }
}

#[test]
fn unequal_paths_leave_round_robin_and_weight_service_time() {
    let mut p = Plant::new(asym, vec![10.0, 20.0, 40.0, 80.0]);
    let mut r = Run::new(Mode::Tune, example(4));
    assert!(r.tuner.measuring(), "a baseline is measured in full");
    r.steps(&mut p, 40, 64.0, 0.0, 1.0, &Health::default());
    let s = r.tuner.settings().clone();
    assert_eq!(s.selector, Selector::ServiceTime, "{:#?}", r.tuner.drain());
    assert_eq!(s.weights, vec![13, 25, 50, 100]);
    assert_eq!(r.tuner.state(), "converged", "{:#?}", r.tuner.drain());
    assert!(
        !r.tuner.measuring(),
        "converged: observation may be sampled"
    );
    r.tuner.set_mode(Mode::Observe);
    assert!(!r.tuner.measuring());
    let log = r.tuner.drain();
    // Straight there: the weighted service-time (which brings the
    // selector with it) is the first trial, not a plain selector first.
    let first = log.iter().find(|d| d.knob.is_some()).expect("a trial");
    assert_eq!(first.knob, Some(Knob::Weights), "{log:#?}");
    assert!(
        log.iter()
            .any(|d| d.outcome == Outcome::Kept && d.knob == Some(Knob::Weights))
    );
    assert!(
        log.iter()
            .all(|d| d.class.as_deref() == Some("read-medium-random"))
    );
}

#[test]
fn a_gain_inside_the_noise_is_reverted() {
    // 1 MiB sequential reads on 2 paths: 512 doubles, 256 and 128 add nothing.
    let f = |s: &Settings| match s.max_sectors_kb {
        1280 => 17.5,
        512 => 33.7,
        _ => 33.4,
    };
    let mut p = Plant::new(f, vec![20.0, 20.0]);
    let mut r = Run::new(Mode::Tune, example(2));
    r.steps(&mut p, 40, 1024.0, 1.0, 1.0, &Health::default());
    let log = r.tuner.drain();
    assert_eq!(r.tuner.settings().max_sectors_kb, 512, "{log:#?}");
    let kept: Vec<_> = log.iter().filter(|d| d.outcome == Outcome::Kept).collect();
    assert_eq!(kept.len(), 1, "{log:#?}");
    assert_eq!(
        (kept[0].old.as_str(), kept[0].new.as_str()),
        ("1280", "512")
    );
    assert!(
        log.iter()
            .any(|d| d.outcome == Outcome::Reverted && d.knob == Some(Knob::MaxSectorsKb)),
        "256 is no better than 512: reverted"
    );
    // Every revert was applied: the last applied max_sectors_kb is 512.
    let last = r
        .applied
        .iter()
        .rev()
        .find(|(k, _)| *k == Knob::MaxSectorsKb)
        .unwrap();
    assert_eq!(last.1.max_sectors_kb, 512);
}

#[test]
fn a_value_the_kernel_does_not_keep_is_never_reported_tuned() {
    let mut p = Plant::new(asym, vec![10.0, 20.0, 40.0, 80.0]);
    // This kernel refuses every selector change (as if the module were missing).
    p.keeps = Box::new(|cur, req| {
        let mut s = req.clone();
        s.selector = cur.selector.clone();
        s
    });
    let mut r = Run::new(Mode::Tune, example(4));
    r.steps(&mut p, 30, 64.0, 0.0, 1.0, &Health::default());
    let log = r.tuner.drain();
    assert_eq!(r.tuner.settings().selector, Selector::RoundRobin);
    assert!(
        log.iter()
            .any(|d| d.outcome == Outcome::Ignored && d.knob == Some(Knob::Selector))
    );
    assert!(
        !log.iter()
            .any(|d| d.outcome == Outcome::Kept && d.knob == Some(Knob::Selector))
    );
    // The first trial, weights, moves the selector with it: the read-back
    // finds it dead there, and it is not tried on its own after.
    let tries = log
        .iter()
        .filter(|d| d.outcome == Outcome::Trying && d.knob == Some(Knob::Selector))
        .count();
    assert_eq!(tries, 0, "a dead knob is not tried again: {log:#?}");
}

#[test]
fn a_returning_workload_snaps_back() {
    // Large sequential reads want small max_sectors_kb; small sequential
    // writes want a low queue depth; each is indifferent to the other knob.
    let f = |s: &Settings| {
        10.0 + if s.max_sectors_kb <= 512 { 20.0 } else { 0.0 }
            + if s.queue_depth <= 8 { 5.0 } else { 0.0 }
    };
    let mut p = Plant::new(f, vec![20.0, 20.0]);
    let mut r = Run::new(Mode::Tune, example(2));
    let h = Health::default();
    r.steps(&mut p, 40, 1024.0, 1.0, 1.0, &h);
    let big = r.tuner.settings().clone();
    assert_eq!(big.max_sectors_kb, 512, "{:#?}", r.tuner.drain());
    r.steps(&mut p, 60, 4.0, 0.9, 0.0, &h);
    let small = r.tuner.settings().clone();
    assert!(small.queue_depth <= 8, "{small:?}");
    r.tuner.drain();
    let n = r.applied.len();
    r.steps(&mut p, 1, 1024.0, 1.0, 1.0, &h);
    let log = r.tuner.drain();
    assert_eq!(log[0].outcome, Outcome::SnapBack, "{log:#?}");
    assert_eq!(r.applied.len(), n + 1);
    assert_eq!(
        *r.tuner.settings(),
        big,
        "the first workload's best settings, at once"
    );
}

#[test]
fn failed_paths_and_flapping_pause_the_search() {
    let mut p = Plant::new(asym, vec![10.0, 20.0, 40.0, 80.0]);
    let mut r = Run::new(Mode::Tune, example(4));
    let failed = Health {
        failed_paths: vec!["sdb".into()],
        ..Default::default()
    };
    r.steps(&mut p, 10, 64.0, 0.0, 1.0, &failed);
    assert!(r.applied.is_empty(), "no change while a path is failed");
    assert_eq!(r.tuner.state(), "paused");
    // The path came back 5 s ago: still paused until paths settle.
    let recent = Health {
        last_path_change: Some(r.t),
        ..Default::default()
    };
    r.steps(&mut p, 2, 64.0, 0.0, 1.0, &recent);
    assert!(r.applied.is_empty());
    r.steps(
        &mut p,
        30,
        64.0,
        0.0,
        1.0,
        &Health {
            last_path_change: Some(r.t - 10.0),
            ..Default::default()
        },
    );
    assert!(!r.applied.is_empty(), "resumes once paths are stable");
    let log = r.tuner.drain();
    assert_eq!(
        log.iter().filter(|d| d.outcome == Outcome::Paused).count(),
        1,
        "one entry, not one per window"
    );
    assert!(log[0].reason.contains("path sdb failed"), "{log:#?}");
    assert!(log.iter().any(|d| d.outcome == Outcome::Resumed));
}

#[test]
fn a_trial_in_flight_when_a_path_fails_is_dropped_not_judged() {
    let mut p = Plant::new(asym, vec![10.0, 20.0, 40.0, 80.0]);
    let mut r = Run::new(Mode::Tune, example(4));
    // The first window only sets the class; three more make the baseline.
    r.steps(&mut p, 4, 64.0, 0.0, 1.0, &Health::default());
    assert_eq!(r.applied.len(), 1, "a trial started");
    r.steps(
        &mut p,
        5,
        64.0,
        0.0,
        1.0,
        &Health {
            failed_paths: vec!["sda".into()],
            ..Default::default()
        },
    );
    let log = r.tuner.drain();
    assert!(
        !log.iter()
            .any(|d| matches!(d.outcome, Outcome::Kept | Outcome::Reverted)),
        "{log:#?}"
    );
}

#[test]
fn observe_changes_nothing_and_advise_only_logs() {
    let mut p = Plant::new(asym, vec![10.0, 20.0, 40.0, 80.0]);
    let mut r = Run::new(Mode::Observe, example(4));
    r.steps(&mut p, 30, 64.0, 0.0, 1.0, &Health::default());
    assert!(r.applied.is_empty());
    assert!(r.tuner.drain().is_empty());
    let mut r = Run::new(Mode::Advise, example(4));
    r.steps(&mut p, 30, 64.0, 0.0, 1.0, &Health::default());
    assert!(r.applied.is_empty());
    let log = r.tuner.drain();
    assert!(!log.is_empty());
    assert!(
        log.iter().all(|d| d.outcome == Outcome::Advised),
        "{log:#?}"
    );
    assert!(log.iter().any(|d| d.new == "service-time"));
}

#[test]
fn a_long_stall_stops_reloads() {
    let mut p = Plant::new(asym, vec![10.0, 20.0, 40.0, 80.0]);
    p.stall_ms = Some(900.0);
    let mut r = Run::new(Mode::Tune, example(4));
    r.steps(&mut p, 60, 64.0, 0.0, 1.0, &Health::default());
    let reloads = r.applied.iter().filter(|(k, _)| k.needs_reload()).count();
    assert!(
        reloads <= 2,
        "one trial and its revert at most: {:?}",
        r.applied
    );
    let log = r.tuner.drain();
    assert!(log.iter().any(|d| d.outcome == Outcome::Budget), "{log:#?}");
}

#[test]
fn small_sequential_writes_lower_queue_depth() {
    // Seed 001: merging starts once paths x queue_depth < I/Os in flight.
    let f = |s: &Settings| match s.queue_depth {
        128 | 32 => 1.55,
        8 => 2.6,
        2 => 4.4,
        _ => 6.4,
    };
    let mut p = Plant::new(f, vec![1.0; 4]);
    let mut r = Run::new(Mode::Tune, example(4));
    r.steps(&mut p, 60, 4.0, 0.95, 0.0, &Health::default());
    let qd = r.tuner.settings().queue_depth;
    assert_eq!(qd, 1, "{:#?}", r.tuner.drain());
}

#[test]
fn beside_another_owner_only_the_queue_knobs_are_tried() {
    // Unequal paths, where the table knobs would win most: they are
    // another program's. Small sequential writes, where queue depth wins.
    let f = |s: &Settings| {
        asym(s)
            + match s.queue_depth {
                2 => 20.0,
                _ => 0.0,
            }
    };
    let mut p = Plant::new(f, vec![10.0, 20.0, 40.0, 80.0]);
    let mut r = Run::new(Mode::Tune, example(4));
    r.tuner.set_queue_knobs_only(true);
    r.steps(&mut p, 80, 4.0, 0.95, 0.0, &Health::default());
    assert!(!r.applied.is_empty(), "{:#?}", r.tuner.drain());
    assert!(
        r.applied.iter().all(|(k, _)| k.is_queue_knob()),
        "{:?}",
        r.applied.iter().map(|(k, _)| k).collect::<Vec<_>>()
    );
    assert_eq!(r.tuner.settings().selector, example(4).selector);
    let qd = r.tuner.settings().queue_depth;
    assert_eq!(qd, 2, "{:#?}", r.tuner.drain());
}

#[test]
fn weights_follow_capacity() {
    assert_eq!(
        weights_from(&[10.0, 20.0, 40.0, 80.0]),
        vec![13, 25, 50, 100]
    );
    assert_eq!(weights_from(&[0.1, 100.0]), vec![1, 100]);
    assert!(!differs_enough(&[13, 25, 50, 100], &[12, 25, 50, 100]));
    assert!(differs_enough(&[50, 100], &[100, 100]));
    // What capacity noise moves (a 10 MiB/s path reading 9; switch
    // --quick's two reverted trials)...
    assert!(!differs_enough(&[11, 25, 50, 100], &[13, 25, 50, 100]));
    assert!(!differs_enough(&[11, 23, 52, 100], &[15, 29, 59, 100]));
    assert!(!differs_enough(&[12, 25, 50, 100], &[15, 29, 59, 100]));
    // ...and what it does not (the demo's first kept weights, then the
    // 80 MiB/s path found to be the fastest).
    assert!(differs_enough(&[6, 32, 64, 100], &[18, 70, 100, 82]));
    assert!(differs_enough(&[13, 25, 50, 100], &[100, 100, 100, 100]));
}

#[test]
fn the_noise_is_the_workloads_not_that_of_two_windows() {
    let st = |mean: f64, sd: f64| Stats { mean, sd, n: 2 };
    let mut t = Tuner::new(
        "mpatha",
        Mode::Tune,
        TunerConfig::default(),
        example(4),
        vec![Selector::ServiceTime],
    );
    // A baseline whose two windows happened to differ by 40% of the mean
    // (one window caught a hiccup), and a trial 25% above it.
    let (base, after) = (st(100.0, 30.0), st(125.0, 2.5));
    t.pool(&base);
    let alone = t.needed(&base, &after);
    assert!(alone > 40.0, "two measurements: the hiccup rules ({alone})");
    // The same workload measured steady (2%) six times before.
    t.noise.clear();
    for _ in 0..6 {
        t.pool(&st(100.0, 2.0));
    }
    t.pool(&base);
    let pooled = t.needed(&base, &after);
    assert!(pooled < 25.0, "the workload's noise rules ({pooled})");
    // Never below the floor, and only the latest measurements count.
    for _ in 0..NOISE_GROUPS {
        t.pool(&st(100.0, 0.0));
    }
    assert_eq!(t.needed(&st(100.0, 0.0), &st(101.0, 0.0)), 5.0);
}

#[test]
fn merging_under_a_trial_keeps_the_workload_sequential() {
    // In the VM (seed 001's writes), queue_depth 2 makes requests merge and
    // reach the paths out of order: the request-level sequential share
    // drops to ~0.3. The trial must be judged, not dropped as a workload
    // change, and the search must reach the deep cut.
    let f = |s: &Settings| match s.queue_depth {
        1 => 6.4,
        2 => 4.4,
        _ => 1.55,
    };
    let mut p = Plant::new(f, vec![1.0; 4]);
    let mut r = Run::new(Mode::Tune, example(4));
    let mut log = vec![];
    for _ in 0..40 {
        r.t += 5.0;
        let s = r.tuner.settings().clone();
        let mut w = p.window(&s, 4.0, 0.95, 0.0);
        if s.queue_depth <= 2 {
            w.seq_share = 0.3;
            w.merge_pct = 75.0;
            w.avg_request_kib = 16.0;
        }
        if let Some(a) = r.tuner.on_window(r.t, &w, &Health::default()) {
            r.tuner.applied(r.t, a.knob, &a.to, a.to.clone(), None);
        }
        log.extend(r.tuner.drain());
    }
    assert!(
        !log.iter().any(|d| d.reason.contains("workload changed")),
        "{log:#?}"
    );
    assert_eq!(r.tuner.settings().queue_depth, 1, "{log:#?}");
    // The deepest cut comes first: no trial of 32, 8 or 2 before it.
    let first = log
        .iter()
        .find(|d| d.knob == Some(Knob::QueueDepth))
        .unwrap();
    assert_eq!(first.new, "1", "{log:#?}");
}

#[test]
fn an_array_that_overlaps_two_requests_a_path_ends_at_queue_depth_2() {
    // queue_depth 1 is kept first (it beats 128 by far), and 2, better
    // still, is tried once fewer paths have been tried.
    let f = |s: &Settings| match s.queue_depth {
        1 => 6.4,
        2 => 8.0,
        _ => 1.55,
    };
    let mut p = Plant::new(f, vec![1.0; 4]);
    let mut r = Run::new(Mode::Tune, example(4));
    r.steps(&mut p, 80, 4.0, 0.95, 0.0, &Health::default());
    let log = r.tuner.drain();
    assert_eq!(r.tuner.settings().queue_depth, 2, "{log:#?}");
    let at = |f: &dyn Fn(&(Knob, Settings)) -> bool| {
        r.applied
            .iter()
            .position(f)
            .unwrap_or_else(|| panic!("no such trial: {:?}", r.applied))
    };
    let one = at(&|(k, s)| *k == Knob::QueueDepth && s.queue_depth == 1);
    let two = at(&|(k, s)| *k == Knob::QueueDepth && s.queue_depth == 2);
    let paths = at(&|(k, _)| *k == Knob::ActivePaths);
    assert!(
        r.applied[..one].iter().all(|(k, _)| *k != Knob::QueueDepth),
        "1 is the first queue_depth tried: {:?}",
        r.applied
    );
    assert!(
        one < paths && paths < two,
        "1, the paths, then 2: {:?}",
        r.applied
    );
}

#[test]
fn equal_paths_that_one_request_each_leaves_uneven_are_not_weighted() {
    // Seen in a merge bench (4 paths of 100 IOPS, 4 KiB sequential writes,
    // service-time): at queue_depth 1 two paths took the writes, merged to
    // 40 KiB, and two idled on 4 KiB ones, delivering 0/0/4/3 MiB/s
    // (1/4/3/1 MiB/s by busy time); weights and queue-length tried on that
    // lost 15-27%. Counted in requests per busy second, they are alike.
    let f = |s: &Settings| if s.queue_depth == 1 { 6.4 } else { 1.55 };
    let mut p = Plant::new(f, vec![0.4; 4]);
    p.paths = Some(Box::new(|s: &Settings| {
        let fig = |kib: f64, iops: f64, util: f64| PathFigures {
            mib_s: kib * iops / 1024.0,
            iops,
            util: Some(util),
        };
        if s.queue_depth == 1 {
            vec![
                fig(4.0, 8.0, 0.08),
                fig(4.0, 10.0, 0.1),
                fig(40.0, 100.0, 1.0),
                fig(40.0, 75.0, 0.75),
            ]
        } else {
            vec![fig(4.0, 100.0, 1.0); 4]
        }
    }));
    let mut start = example(4);
    start.selector = Selector::ServiceTime;
    let mut r = Run::new(Mode::Tune, start);
    r.steps(&mut p, 40, 4.0, 0.95, 0.0, &Health::default());
    let log = r.tuner.drain();
    assert_eq!(r.tuner.settings().queue_depth, 1, "{log:#?}");
    assert!(
        r.applied.iter().all(|(k, _)| *k != Knob::Weights),
        "{:?}",
        r.applied
    );
    // Other selectors are tried as on any even paths, not as a cure for
    // paths that differ.
    assert!(
        log.iter().all(|d| !d.reason.contains("paths differ")),
        "{log:#?}"
    );
}

#[test]
fn unequal_paths_under_small_writes_are_weighted_by_their_bandwidth() {
    // 10/20/40/80 MiB/s paths under 4 KiB writes differ counted in
    // requests as well as in bytes: weighted by their MiB/s.
    let f = |s: &Settings| {
        if s.weights == [13, 25, 50, 100] {
            60.0
        } else {
            40.0
        }
    };
    let mut p = Plant::new(f, vec![10.0, 20.0, 40.0, 80.0]);
    let mut start = example(4);
    start.selector = Selector::ServiceTime;
    let mut r = Run::new(Mode::Tune, start);
    r.steps(&mut p, 40, 4.0, 0.0, 0.0, &Health::default());
    let log = r.tuner.drain();
    assert_eq!(
        r.tuner.settings().weights,
        vec![13, 25, 50, 100],
        "{log:#?}"
    );
}

#[test]
fn a_trial_cut_short_by_a_pause_is_undone_on_resume() {
    // Seen in the VM: an active_paths trial paused by a path state change
    // stayed in place, never judged, and became the next baseline.
    let mut p = Plant::new(asym, vec![10.0, 20.0, 40.0, 80.0]);
    let start = example(4);
    let mut r = Run::new(Mode::Tune, start.clone());
    r.steps(&mut p, 4, 64.0, 0.0, 1.0, &Health::default());
    assert_eq!(r.applied.len(), 1, "a trial started");
    let trial = r.applied[0].clone();
    let failed = Health {
        failed_paths: vec!["sda".into()],
        ..Default::default()
    };
    r.steps(&mut p, 2, 64.0, 0.0, 1.0, &failed);
    assert_eq!(r.applied.len(), 1, "nothing is changed while paused");
    r.steps(&mut p, 1, 64.0, 0.0, 1.0, &Health::default());
    let log = r.tuner.drain();
    let undo = log
        .iter()
        .find(|d| d.outcome == Outcome::Reverted)
        .unwrap_or_else(|| panic!("{log:#?}"));
    assert!(undo.reason.contains("paused during the trial"), "{undo:?}");
    assert_eq!(r.applied.len(), 2);
    assert_eq!(r.applied[1].0, trial.0);
    assert_eq!(
        r.applied[1].1, start,
        "back to the settings before the trial"
    );
    // The same change is not tried again at once.
    r.steps(&mut p, 12, 64.0, 0.0, 1.0, &Health::default());
    assert!(
        !r.applied[2..].iter().any(|(_, s)| *s == trial.1),
        "{:#?}",
        r.tuner.drain()
    );
}

#[test]
fn one_active_path_leaves_no_selector_to_try() {
    // Seed 001 with one IOPS budget shared by every path: one active path
    // merges most. What the idle paths "deliver" then says nothing.
    let f = |s: &Settings| match s.active_paths {
        1 => 12.4,
        2 => 10.5,
        _ => 5.8,
    };
    let mut p = Plant::new(f, vec![12.0, 0.01, 0.01, 0.01]);
    let mut r = Run::new(Mode::Tune, example(4));
    r.steps(&mut p, 80, 4.0, 0.95, 0.0, &Health::default());
    let log = r.tuner.drain();
    assert_eq!(r.tuner.settings().active_paths, 1, "{log:#?}");
    let one = log
        .iter()
        .position(|d| {
            d.outcome == Outcome::Kept && d.knob == Some(Knob::ActivePaths) && d.new == "1"
        })
        .expect("active paths 1 kept");
    assert!(
        log[one..]
            .iter()
            .all(|d| !matches!(d.knob, Some(Knob::Selector | Knob::Weights))),
        "{log:#?}"
    );
    assert_eq!(r.tuner.state(), "converged", "{log:#?}");
}

#[test]
fn one_large_reader_on_unequal_paths_is_weighted_to_the_fastest_first() {
    // The switch benchmark's 1 MiB QD1 phase: plain service-time rotates
    // the one request over 10/20/40/80 MiB/s paths; weighted, it goes to
    // the fastest. Splitting it then shares its pieces out by weight; in
    // the demo (weighted 5:35:71:100): 512 KiB +0.2%, 256 +15.9%, 128 +35%.
    let f = |s: &Settings| match (s.weights.is_empty(), s.max_sectors_kb) {
        (false, 1280 | 512) => 80.0,
        (false, 256) => 92.0,
        (false, _) => 124.0,
        (true, 1280) => 40.0,
        (true, _) => 35.0,
    };
    let (log, now) = unweighted_large_reader(Plant::new(f, vec![10.0, 20.0, 40.0, 80.0]));
    let trials = trials(&log);
    // With the split that gives each of 4 unequal paths two pieces of a
    // 1 MiB request, in the same trial: no trial spent on weights alone,
    // nor on 512 or 256.
    assert_eq!(trials[0].knob, Some(Knob::Weights), "{log:#?}");
    assert!(
        trials[0].reason.ends_with("(max_sectors_kb 1280 -> 128)"),
        "{log:#?}"
    );
    let kept: Vec<_> = log.iter().filter(|d| d.outcome == Outcome::Kept).collect();
    assert_eq!(kept.len(), 1, "{log:#?}");
    assert_eq!(now.weights, vec![13, 25, 50, 100], "{log:#?}");
    assert_eq!(now.max_sectors_kb, 128, "{log:#?}");
    // The pair's split replaced 1280 KiB, which lost with it: no trial
    // goes back there.
    assert!(trials.iter().all(|d| d.new != "1280"), "{log:#?}");
    // Nor on queue-length, which would count the pieces out evenly.
    assert!(log.iter().all(|d| d.new != "queue-length"), "{log:#?}");
}

#[test]
fn a_split_the_kernel_ignores_leaves_the_weights_to_be_judged_alone() {
    let f = |s: &Settings| if s.weights.is_empty() { 40.0 } else { 80.0 };
    let mut p = Plant::new(f, vec![10.0, 20.0, 40.0, 80.0]);
    p.keeps = Box::new(|cur, req| {
        let mut s = req.clone();
        s.max_sectors_kb = cur.max_sectors_kb;
        s
    });
    let (log, now) = unweighted_large_reader(p);
    let ignored: Vec<_> = log
        .iter()
        .filter(|d| d.outcome == Outcome::Ignored)
        .collect();
    assert_eq!(ignored.len(), 1, "{log:#?}");
    assert_eq!(ignored[0].knob, Some(Knob::MaxSectorsKb), "{log:#?}");
    // Judged as what the kernel kept: the weights alone.
    let kept = kept_weights(&log);
    assert_eq!(kept.new, "13:25:50:100", "{log:#?}");
    // No split is tried again on this map.
    assert!(
        log.iter()
            .all(|d| d.outcome != Outcome::Trying || d.knob != Some(Knob::MaxSectorsKb)),
        "{log:#?}"
    );
    assert_eq!(now.max_sectors_kb, 1280, "{log:#?}");
}

#[test]
fn a_large_reader_tries_queue_length_where_service_time_is_missing() {
    // A kernel without service-time: on unequal paths queue-length is
    // the one load-aware selector left, whatever the request size.
    let f = |s: &Settings| match s.selector {
        Selector::QueueLength => 60.0,
        _ => 40.0,
    };
    let mut p = Plant::new(f, vec![10.0, 20.0, 40.0, 80.0]);
    let sels = vec![Selector::RoundRobin, Selector::QueueLength];
    let mut r = Run {
        tuner: Tuner::new(
            "mpatha",
            Mode::Tune,
            TunerConfig::default(),
            example(4),
            sels,
        ),
        t: 0.0,
        applied: vec![],
    };
    r.steps(&mut p, 40, 1024.0, 1.0, 1.0, &Health::default());
    let log = r.tuner.drain();
    assert_eq!(
        r.tuner.settings().selector,
        Selector::QueueLength,
        "{log:#?}"
    );
}

#[test]
fn a_selector_that_beats_weighted_service_time_is_not_re_weighed_at_once() {
    // Random reads on unequal paths where queue-length wins: weighted
    // service-time just lost to it, whatever the next estimate.
    let f = |s: &Settings| match (&s.selector, s.weights.is_empty()) {
        (Selector::QueueLength, _) => 150.0,
        (Selector::ServiceTime, false) => 120.0,
        _ => 60.0,
    };
    let mut p = Plant::new(f, vec![10.0, 20.0, 40.0, 80.0]);
    let mut r = Run::new(Mode::Tune, example(4));
    r.steps(&mut p, 40, 64.0, 0.0, 1.0, &Health::default());
    let log = r.tuner.drain();
    let ql = log
        .iter()
        .position(|d| d.outcome == Outcome::Kept && d.new == "queue-length")
        .unwrap_or_else(|| panic!("queue-length kept: {log:#?}"));
    assert!(
        log[..ql]
            .iter()
            .any(|d| d.outcome == Outcome::Kept && d.knob == Some(Knob::Weights)),
        "weights kept first: {log:#?}"
    );
    assert!(
        log[ql..].iter().all(|d| d.knob != Some(Knob::Weights)),
        "{log:#?}"
    );
    assert_eq!(
        r.tuner.settings().selector,
        Selector::QueueLength,
        "{log:#?}"
    );
}

#[test]
fn weights_that_lose_with_a_split_are_tried_alone() {
    // Paths whose array reassembles split requests slowly: the weights
    // double a 1 MiB reader, its pieces halve it again.
    let f = |s: &Settings| match (s.weights.is_empty(), s.max_sectors_kb) {
        (false, 1280) => 80.0,
        (_, 1280) => 40.0,
        _ => 30.0,
    };
    let (log, now) = unweighted_large_reader(Plant::new(f, vec![10.0, 20.0, 40.0, 80.0]));
    let trials = trials(&log);
    assert!(
        trials[0].reason.contains("max_sectors_kb 1280 -> 128"),
        "{log:#?}"
    );
    assert_eq!(trials[1].knob, Some(Knob::Weights), "{log:#?}");
    assert!(!trials[1].reason.contains("max_sectors_kb"), "{log:#?}");
    assert_eq!(
        (now.weights.as_slice(), now.max_sectors_kb),
        ([13, 25, 50, 100].as_slice(), 1280),
        "{log:#?}"
    );
}

#[test]
fn a_weighted_map_splits_a_large_reader_before_it_reweighs() {
    // Switch's second phase: the random reads left weights that are not
    // the capacities' own (28:55:100:100 where these are 13:25:50:100),
    // and re-weighting a 1 MiB reader gained 0.5% there: the split comes
    // first.
    let f = |s: &Settings| match s.max_sectors_kb {
        1280 | 512 => 80.0,
        256 => 92.0,
        _ => 124.0,
    };
    let (first, now, log) = large_reader(f, vec![10.0, 20.0, 40.0, 80.0], &[28, 55, 100, 100], 6);
    assert_eq!(first, (Some(Knob::MaxSectorsKb), "128".into()), "{log:#?}");
    assert_eq!(now.max_sectors_kb, 128, "{log:#?}");
}

#[test]
fn a_large_reader_on_even_paths_is_split_one_piece_per_path_first() {
    // stream's 4 equal paths: 256 KiB was the best static point; 512
    // first cost the full run's tuner a trial and its settle time (25 s).
    let f = |s: &Settings| match s.max_sectors_kb {
        1280 => 19.5,
        512 => 38.0,
        256 => 66.4,
        _ => 64.0,
    };
    let (first, now, log) = large_reader(f, vec![20.0; 4], &[], 12);
    assert_eq!(first, (Some(Knob::MaxSectorsKb), "256".into()), "{log:#?}");
    // 128 is tried from there and reverted: 256 stays.
    assert_eq!(now.max_sectors_kb, 256, "{log:#?}");
}

/// 14 windows of one 1 MiB sequential reader from round-robin on `p`'s
/// paths: the log and the settings at the end.
fn unweighted_large_reader(mut p: Plant) -> (Vec<Decision>, Settings) {
    let mut r = Run::new(Mode::Tune, example(4));
    r.steps(&mut p, 14, 1024.0, 1.0, 1.0, &Health::default());
    (r.tuner.drain(), r.tuner.settings().clone())
}

fn trials(log: &[Decision]) -> Vec<&Decision> {
    log.iter()
        .filter(|d| d.outcome == Outcome::Trying)
        .collect()
}

/// `windows` of one 1 MiB sequential reader on a 4-path service-time map
/// with `weights`: the first trial (knob, new value), the settings at the
/// end, and the log.
fn large_reader(
    f: impl Fn(&Settings) -> f64 + 'static,
    caps: Vec<f64>,
    weights: &[u32],
    windows: usize,
) -> ((Option<Knob>, String), Settings, Vec<Decision>) {
    let mut p = Plant::new(f, caps);
    let mut start = example(4);
    start.selector = Selector::ServiceTime;
    start.weights = weights.to_vec();
    let mut r = Run::new(Mode::Tune, start);
    r.steps(&mut p, windows, 1024.0, 1.0, 1.0, &Health::default());
    let log = r.tuner.drain();
    let first = log
        .iter()
        .find(|d| d.knob.is_some())
        .map(|d| (d.knob, d.new.clone()))
        .unwrap_or_else(|| panic!("no trial: {log:#?}"));
    (first, r.tuner.settings().clone(), log)
}

#[test]
fn the_split_gives_each_path_its_pieces() {
    assert_eq!(split_kib(1024.0, 2), 512);
    assert_eq!(split_kib(1024.0, 4), 256);
    assert_eq!(split_kib(1024.0, 8), 128);
    // Larger requests than the largest split, smaller than the smallest.
    assert_eq!(split_kib(8192.0, 4), 512);
    assert_eq!(split_kib(300.0, 4), 128);
    assert_eq!(split_kib(1000.0, 0), 512);
}

/// The decision that kept a weighting (the test fails without one).
fn kept_weights(log: &[Decision]) -> &Decision {
    log.iter()
        .find(|d| d.outcome == Outcome::Kept && d.knob == Some(Knob::Weights))
        .unwrap_or_else(|| panic!("no weighting kept: {log:#?}"))
}

#[test]
fn capacity_seen_under_random_reads_weights_a_later_large_reader() {
    // The switch benchmark: random reads at depth fill every path and show
    // 10/20/40/80, where weights add nothing; then one 1 MiB reader whose
    // own figures look even (the selector rotates it over the paths), for
    // which weighting by what was seen earlier doubles the throughput.
    let f = |s: &Settings| match (s.max_sectors_kb, s.weights.is_empty()) {
        (0, _) => 0.0,
        (_, true) => 40.0,
        (_, false) => 80.0,
    };
    // Random reads: the same 150 MiB/s whatever the settings; each path
    // delivers half its cap (the plant's figures): 5/10/20/40.
    let mut p = Plant::new(|_| 150.0, vec![10.0, 20.0, 40.0, 80.0]);
    let mut r = Run::new(Mode::Tune, example(4));
    r.steps(&mut p, 12, 64.0, 0.0, 1.0, &Health::default());
    p.f = Box::new(f);
    p.caps = vec![20.0; 4];
    r.steps(&mut p, 20, 1024.0, 1.0, 1.0, &Health::default());
    let log = r.tuner.drain();
    let kept = kept_weights(&log);
    assert_eq!(kept.class.as_deref(), Some("read-large-seq"));
    assert!(
        kept.reason
            .starts_with("earlier measured path capacity 5/10/20/40"),
        "{}",
        kept.reason
    );
}

#[test]
fn the_fastest_path_is_ranked_by_the_best_it_delivered_not_by_one_window() {
    // The switch benchmark as it ran: random reads at depth in a guest
    // whose CPU caps the total fill the 10/20/40 MiB/s paths; the 80 one
    // delivers 45-60 (what is left), and the last window of the phase, at
    // a trickle, shows 1/2/4/4. Weighted by that last window, the one 1 MiB
    // reader that follows went to the 40 MiB/s path (weights 100 and 99).
    let mut p = Plant::new(|_| 120.0, vec![20.0, 40.0, 80.0, 90.0]);
    let mut r = Run::new(Mode::Tune, example(4));
    for top in [90.0, 120.0, 100.0, 90.0] {
        p.caps = vec![20.0, 40.0, 80.0, top];
        r.steps(&mut p, 3, 64.0, 0.0, 1.0, &Health::default());
    }
    p.caps = vec![2.0, 4.0, 8.0, 8.0];
    r.steps(&mut p, 1, 64.0, 0.0, 1.0, &Health::default());
    // One large reader: the fastest path, whichever weighting sends it
    // there, doubles what the 40 MiB/s path gives.
    p.f = Box::new(|s: &Settings| match s.weights.as_slice() {
        [_, _, a, b] if b > a => 80.0,
        _ => 40.0,
    });
    p.caps = vec![0.0, 0.0, 80.0, 0.0];
    r.steps(&mut p, 20, 1024.0, 1.0, 1.0, &Health::default());
    let log = r.tuner.drain();
    let kept = kept_weights(&log);
    assert!(
        kept.reason
            .starts_with("earlier measured path capacity 10/20/40/5"),
        "the 80 MiB/s path by its best: {}",
        kept.reason
    );
    let w = &r.tuner.settings().weights;
    assert!(w.len() == 4 && w[3] > w[2], "{w:?} {log:#?}");
}

#[test]
fn a_map_weighted_by_capacity_does_not_try_round_robin() {
    // asym from round-robin as it ran: weights kept at 5:44:89:100, under
    // which the slowest path delivers nothing in a window, so no window
    // measures the paths; round-robin (every path at the slowest one's
    // pace) was tried next and cost 70% for a trial.
    let mut start = example(4);
    start.selector = Selector::ServiceTime;
    start.weights = vec![5, 44, 89, 100];
    let mut p = Plant::new(
        |s: &Settings| match s.selector {
            Selector::RoundRobin => 40.0,
            _ => 130.0,
        },
        vec![0.0, 40.0, 80.0, 120.0],
    );
    let mut r = Run::new(Mode::Tune, start);
    r.steps(&mut p, 30, 64.0, 0.0, 1.0, &Health::default());
    let log = r.tuner.drain();
    assert!(
        log.iter().any(|d| d.knob.is_some()),
        "still explores: {log:#?}"
    );
    assert!(
        r.applied
            .iter()
            .all(|(_, s)| s.selector != Selector::RoundRobin),
        "{log:#?}"
    );
}

#[test]
fn a_path_holding_a_command_for_long_pauses_the_search() {
    let mut p = Plant::new(asym, vec![10.0, 20.0, 40.0, 80.0]);
    let mut r = Run::new(Mode::Tune, example(4));
    let stalled = Health {
        stalled_paths: vec![("sdb".into(), 2.5)],
        ..Default::default()
    };
    r.steps(&mut p, 10, 64.0, 0.0, 1.0, &stalled);
    assert!(
        r.applied.is_empty(),
        "no reload while a path holds a command"
    );
    assert_eq!(r.tuner.state(), "paused");
    let log = r.tuner.drain();
    assert!(
        log.iter().any(|d| d.outcome == Outcome::Paused
            && d.reason.contains("sdb has completed nothing for 2.5 s")),
        "{log:#?}"
    );
    r.steps(&mut p, 30, 64.0, 0.0, 1.0, &Health::default());
    assert!(!r.applied.is_empty(), "resumes once it completes");
}

#[test]
fn a_pinned_knob_is_never_moved() {
    // The operator chose round-robin on unequal paths: every trial that
    // would move the selector is off, weights included (they bring
    // service-time with them); knobs not pinned are still tuned.
    let f = |s: &Settings| {
        asym(s)
            * match s.max_sectors_kb {
                1280 => 1.0,
                _ => 1.5,
            }
    };
    let mut p = Plant::new(f, vec![10.0, 20.0, 40.0, 80.0]);
    let mut r = Run::new(Mode::Tune, example(4));
    r.tuner.set_pins([Knob::Selector].into());
    r.steps(&mut p, 40, 1024.0, 1.0, 1.0, &Health::default());
    let log = r.tuner.drain();
    assert!(
        r.applied
            .iter()
            .all(|(_, s)| s.selector == Selector::RoundRobin),
        "{:?}\n{log:#?}",
        r.applied
    );
    assert!(r.tuner.settings().max_sectors_kb < 1280, "{log:#?}");
    // Released: the selector is the tuner's again.
    assert_eq!(r.tuner.release(r.t, &[]), vec![Knob::Selector]);
    r.steps(&mut p, 40, 64.0, 0.0, 1.0, &Health::default());
    assert_ne!(r.tuner.settings().selector, Selector::RoundRobin);
    assert!(
        r.tuner
            .drain()
            .iter()
            .any(|d| d.outcome == Outcome::Released)
    );
}

#[test]
fn a_snap_back_leaves_pinned_knobs_alone() {
    let mut p = Plant::new(asym, vec![10.0, 20.0, 40.0, 80.0]);
    let mut r = Run::new(Mode::Tune, example(4));
    r.steps(&mut p, 40, 64.0, 0.0, 1.0, &Health::default());
    assert_eq!(r.tuner.settings().selector, Selector::ServiceTime);
    // Another workload; the operator sets round-robin meanwhile.
    r.steps(&mut p, 3, 1024.0, 1.0, 0.0, &Health::default());
    let before = r.tuner.settings().clone();
    let mut now = before.clone();
    now.selector = Selector::RoundRobin;
    now.weights.clear();
    r.tuner.operator_set(
        r.t,
        &[Knob::Selector, Knob::Weights],
        &before,
        now,
        "pathpilot reload",
    );
    r.applied.clear();
    // The first workload returns: its best settings, but not the selector.
    r.steps(&mut p, 10, 64.0, 0.0, 1.0, &Health::default());
    assert!(
        r.applied
            .iter()
            .all(|(_, s)| s.selector == Selector::RoundRobin && s.weights.is_empty()),
        "{:?}",
        r.applied
    );
    let log = r.tuner.drain();
    assert!(
        log.iter()
            .any(|d| d.outcome == Outcome::Operator && d.knob == Some(Knob::Selector)),
        "{log:#?}"
    );
}

#[test]
fn a_path_set_aside_is_not_asked_back_by_the_tuner() {
    // The daemon sets one of 4 paths aside: 3 active. Where the tuner
    // started is 3 now, not 4 (which the kernel would refuse).
    let mut p = Plant::new(asym, vec![10.0, 20.0, 40.0, 80.0]);
    let mut r = Run::new(Mode::Tune, example(4));
    r.steps(&mut p, 4, 64.0, 0.0, 1.0, &Health::default());
    let mut now = r.tuner.settings().clone();
    now.active_paths = 3;
    r.tuner
        .health_changed(r.t, "path sdb marginal".into(), Some(now));
    r.steps(&mut p, 60, 64.0, 0.0, 1.0, &Health::default());
    assert!(
        r.applied.iter().all(|(k, _)| *k != Knob::ActivePaths),
        "{:?}",
        r.applied
    );
    assert_eq!(r.tuner.settings().active_paths, 3);
}

#[test]
fn settings_remembered_on_other_paths_are_not_snapped_back_onto_these() {
    // Random reads weight 4 paths; large reads come; the daemon sets the
    // second path aside. When random reads return, their best known
    // weights (4, by position) must not land on the 3 left: the kernel
    // would take the first three (the set-aside path's among them) and
    // the read-back would call the weights ignored.
    let mut p = Plant::new(asym, vec![10.0, 20.0, 40.0, 80.0]);
    let mut r = Run::new(Mode::Tune, example(4));
    let h = Health::default();
    r.steps(&mut p, 40, 64.0, 0.0, 1.0, &h);
    assert_eq!(r.tuner.settings().weights, vec![13, 25, 50, 100]);
    r.steps(&mut p, 2, 1024.0, 1.0, 1.0, &h);
    let mut now = r.tuner.settings().clone();
    now.active_paths = 3;
    if !now.weights.is_empty() {
        now.weights.remove(1);
    }
    r.tuner
        .health_changed(r.t, "path sdb marginal".into(), Some(now));
    r.tuner.drain();
    r.applied.clear();
    let mut p = Plant::new(asym, vec![10.0, 40.0, 80.0]);
    // The kernel on 3 paths: a weight per path, 3 active at most.
    p.keeps = Box::new(|_, req| {
        let mut s = req.clone();
        s.weights.truncate(3);
        s.active_paths = s.active_paths.min(3);
        s
    });
    r.steps(&mut p, 4, 1024.0, 1.0, 1.0, &h);
    r.steps(&mut p, 40, 64.0, 0.0, 1.0, &h);
    assert!(
        r.applied
            .iter()
            .all(|(_, s)| s.weights.len() != 4 && s.active_paths <= 3),
        "{:?}",
        r.applied
    );
    let log = r.tuner.drain();
    assert!(
        log.iter().all(|d| d.outcome != Outcome::Ignored),
        "{log:#?}"
    );
    // What the paths do not shape (the queue knobs) is still remembered.
    assert!(
        log.iter().any(|d| d.outcome == Outcome::SnapBack),
        "{log:#?}"
    );
}

#[test]
fn fixed_groups_are_never_regrouped() {
    // Small sequential writes would try fewer active paths: not on a map
    // whose groups are not the tuner's.
    let f = |s: &Settings| match (s.queue_depth, s.active_paths) {
        (_, 1) => 9.0,
        (1, _) => 6.4,
        _ => 1.55,
    };
    let mut p = Plant::new(f, vec![1.0; 4]);
    let mut r = Run::new(Mode::Tune, example(4));
    r.tuner.set_fixed_groups(true);
    r.steps(&mut p, 60, 4.0, 0.95, 0.0, &Health::default());
    assert!(
        r.applied.iter().all(|(k, _)| *k != Knob::ActivePaths),
        "{:?}",
        r.applied
    );
    assert_eq!(r.tuner.settings().active_paths, 4);
}

/// Someone else sets queue-length on the map; what the kernel shows now.
fn change_outside(r: &mut Run) -> Settings {
    let mut now = r.tuner.settings().clone();
    now.selector = Selector::QueueLength;
    r.tuner.outside_change(
        r.t,
        "table changed outside pathpilot: selector",
        now.clone(),
    );
    now
}

#[test]
fn an_outside_change_stops_tuning_until_resumed() {
    let mut p = Plant::new(asym, vec![10.0, 20.0, 40.0, 80.0]);
    let mut r = Run::new(Mode::Tune, example(4));
    r.steps(&mut p, 4, 64.0, 0.0, 1.0, &Health::default());
    assert!(!r.applied.is_empty(), "a trial is on");
    let now = change_outside(&mut r);
    assert_eq!(r.tuner.state(), "paused");
    assert_eq!(r.tuner.settings(), &now);
    r.applied.clear();
    r.steps(&mut p, 20, 64.0, 0.0, 1.0, &Health::default());
    assert!(r.applied.is_empty(), "nothing is changed, nothing undone");
    let log = r.tuner.drain();
    assert!(
        log.iter().any(|d| d.outcome == Outcome::Outside),
        "{log:#?}"
    );
    r.tuner.set_user_paused(false, r.t);
    assert_ne!(r.tuner.state(), "paused");
    r.steps(&mut p, 40, 64.0, 0.0, 1.0, &Health::default());
    assert!(!r.applied.is_empty());
}

#[test]
fn a_change_found_before_the_tuners_own_is_not_overwritten_nor_logged_as_tried() {
    let mut p = Plant::new(asym, vec![10.0, 20.0, 40.0, 80.0]);
    let mut r = Run::new(Mode::Tune, example(4));
    // Windows until the tuner proposes a change; the daemon looks before
    // making it and finds the map changed by someone else.
    let action = (0..20)
        .find_map(|_| {
            r.t += 5.0;
            let w = p.window(r.tuner.settings(), 64.0, 0.0, 1.0);
            r.tuner.on_window(r.t, &w, &Health::default())
        })
        .expect("a trial is proposed");
    assert!(r.tuner.trying());
    let now = change_outside(&mut r);
    let log = r.tuner.drain();
    assert!(
        !log.iter().any(|d| d.outcome == Outcome::Trying),
        "the proposal was never made: {log:#?}"
    );
    assert_eq!(log.last().map(|d| d.outcome), Some(Outcome::Outside));
    assert!(!r.tuner.trying());
    assert_eq!(r.tuner.settings(), &now, "the other party's change stands");
    let since = r
        .tuner
        .held_since()
        .expect("held since the change was found");
    assert_eq!(since, r.t);
    r.steps(&mut p, 10, 64.0, 0.0, 1.0, &Health::default());
    assert!(r.applied.is_empty(), "nothing is changed while held");
    // A second change while held keeps the time tuning stopped.
    change_outside(&mut r);
    assert_eq!(r.tuner.held_since(), Some(since));
    // Resumed, the withdrawn candidate is not held as rejected: the tuner
    // may propose it again at once.
    r.tuner.set_user_paused(false, r.t);
    assert!(
        !r.tuner.tried.keys().any(|(_, k, _)| *k == action.knob),
        "{:?}",
        r.tuner.tried
    );
}

/// The daemon looks for a change made outside only before a window that
/// may keep a trial: every kept trial had that look, and most windows of a
/// trial go without one.
#[test]
fn a_trial_is_kept_only_in_a_window_announced_as_judging() {
    let mut p = Plant::new(asym, vec![10.0, 20.0, 40.0, 80.0]);
    let mut r = Run::new(Mode::Tune, example(4));
    let (mut kept, mut trying, mut looked) = (0, 0, 0);
    for _ in 0..120 {
        let judging = r.tuner.may_keep();
        assert!(!judging || r.tuner.trying(), "only a trial is judged");
        trying += usize::from(r.tuner.trying());
        looked += usize::from(judging);
        r.steps(&mut p, 1, 64.0, 0.0, 1.0, &Health::default());
        for d in r.tuner.drain() {
            if d.outcome == Outcome::Kept {
                assert!(judging, "kept unannounced at {}: {d:?}", d.t);
                kept += 1;
            }
        }
    }
    assert!(kept > 0, "a trial was kept");
    assert!(
        looked * 2 <= trying,
        "{looked} of {trying} trial windows looked at"
    );
}

#[test]
fn a_change_that_failed_is_tried_again_later() {
    let mut p = Plant::new(asym, vec![10.0, 20.0, 40.0, 80.0]);
    let cfg = TunerConfig {
        retry_after_s: 100.0,
        ..Default::default()
    };
    let sels = vec![Selector::RoundRobin, Selector::QueueLength];
    let mut t = Tuner::new("mpatha", Mode::Tune, cfg, example(4), sels);
    let mut now = 0.0;
    let mut fails = 0;
    let mut tries_after_fail = 0;
    for _ in 0..60 {
        now += 5.0;
        let w = p.window(t.settings(), 64.0, 0.0, 1.0);
        if let Some(a) = t.on_window(now, &w, &Health::default()) {
            if now < 50.0 {
                // The first attempts fail (a suspend cut short, say).
                fails += 1;
                let cur = t.settings().clone();
                t.failed(now, a.knob, &a.to, cur, "suspend interrupted");
            } else {
                if fails > 0 && a.to.selector == Selector::QueueLength {
                    tries_after_fail += 1;
                }
                t.applied(now, a.knob, &a.to, a.to.clone(), Some(10.0));
            }
        }
    }
    assert!(fails >= 1);
    assert!(tries_after_fail >= 1, "{:#?}", t.drain());
    assert_eq!(t.settings().selector, Selector::QueueLength);
}

#[test]
fn new_settings_apply_to_a_running_tuner() {
    let mut p = Plant::new(asym, vec![10.0, 20.0, 40.0, 80.0]);
    let mut r = Run::new(Mode::Tune, example(4));
    let cfg = TunerConfig {
        windows: 10,
        ..Default::default()
    };
    r.tuner.set_config(cfg.clone());
    assert_eq!(r.tuner.config(), &cfg);
    // Ten windows of baseline before the first trial, not three (after
    // the first window, which finds the workload's class).
    r.steps(&mut p, 10, 64.0, 0.0, 1.0, &Health::default());
    assert!(r.applied.is_empty());
    r.steps(&mut p, 1, 64.0, 0.0, 1.0, &Health::default());
    assert_eq!(r.applied.len(), 1);
}

#[test]
fn a_workload_change_inside_a_trial_restarts_it() {
    // Two workloads of one class (medium random reads: 64 and 192 KiB
    // bios). The change comes in the middle of the first trial.
    let mut p = Plant::new(asym, vec![10.0, 20.0, 40.0, 80.0]);
    let mut r = Run::new(Mode::Tune, example(4));
    let h = Health::default();
    // Class, then a baseline, then the first trial is applied.
    r.steps(&mut p, 4, 64.0, 0.0, 1.0, &h);
    assert_eq!(r.applied.len(), 1, "a trial is on: {:#?}", r.tuner.drain());
    let trial = r.applied[0].clone();
    r.steps(&mut p, 1, 192.0, 0.0, 1.0, &h);
    let log = r.tuner.drain();
    let undone = log
        .iter()
        .find(|d| d.outcome == Outcome::Reverted)
        .unwrap_or_else(|| panic!("{log:#?}"));
    assert!(
        undone
            .reason
            .contains("the workload changed (bios 64 -> 192 KiB")
            && undone.reason.contains("undone unjudged"),
        "{undone:#?}"
    );
    assert!(!log.iter().any(|d| d.outcome == Outcome::Kept), "{log:#?}");
    assert_eq!(r.applied.len(), 2, "the change was undone");
    assert_eq!(r.applied[1].1, example(4));
    // The first workload returns: the same trial is made again, and judged.
    r.steps(&mut p, 30, 64.0, 0.0, 1.0, &h);
    assert!(r.applied[2..].contains(&trial), "{:?}", r.applied);
    let log = r.tuner.drain();
    assert!(
        log.iter()
            .any(|d| d.outcome == Outcome::Kept && d.knob == Some(trial.0)),
        "{log:#?}"
    );
}

#[test]
fn a_gain_hidden_by_noise_is_measured_longer() {
    // queue-length is 40% better than round-robin on these paths, and the
    // windows are noisy (+-35%): three windows cannot tell, more can.
    let f = |s: &Settings| match s.selector {
        Selector::QueueLength => 140.0,
        _ => 100.0,
    };
    let mut p = Plant::new(f, vec![20.0; 4]);
    p.noise = 0.3;
    let sels = vec![Selector::RoundRobin, Selector::QueueLength];
    let mut t = Tuner::new(
        "mpatha",
        Mode::Tune,
        TunerConfig::default(),
        example(4),
        sels,
    );
    let mut now = 0.0;
    let mut windows_in_trial = 0;
    for _ in 0..40 {
        now += 5.0;
        let w = p.window(t.settings(), 64.0, 0.0, 1.0);
        if t.state() == "trying" {
            windows_in_trial += 1;
        }
        if let Some(a) = t.on_window(now, &w, &Health::default()) {
            t.applied(now, a.knob, &a.to, a.to.clone(), Some(10.0));
        }
        if t.settings().selector == Selector::QueueLength && t.state() != "trying" {
            break;
        }
    }
    let log = t.drain();
    assert_eq!(t.settings().selector, Selector::QueueLength, "{log:#?}");
    assert!(
        windows_in_trial > TunerConfig::default().windows + 1,
        "measured beyond the usual windows: {windows_in_trial}"
    );
}
