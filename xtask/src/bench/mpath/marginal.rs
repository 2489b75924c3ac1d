//! Scenario `marginal`: one path of four turns sick mid-run,
//! slow (a twentieth of its rate) or failing 1% of its writes, and each
//! way of meeting it is measured alike: its p99 and throughput before and
//! while the path is sick, and the time it took to react.
//!
//! The ways: static tables, with pathpilot's checker failing and
//! reinstating paths as any path checker would (the daemon in advise
//! mode: it changes nothing else); the two actions open to a controller,
//! applied by hand at the onset (set aside in a last group, or weight 0
//! under service-time: which of the two recovers the map better is measured);
//! pathpilot tuning the map; and multipathd itself with
//! `marginal_pathgroups on` and the `marginal_path_*` method (the
//! pathpilot daemon then only observes, so every row pays the observer).
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use pathpilot_testbed::figures::median;
use pathpilot_testbed::{Link, Testbed};
use serde_json::{Value, json};

use super::opts::Opts;
use super::report::{Point, Report, Row};
use super::rig::{Rig, wwid};
use super::statics::Static;

/// Every path's cap (MiB/s); path `SICK` turns sick.
const CAPS: [f64; 4] = [20.0; 4];
const SICK: usize = 1;

/// multipathd's settings for its row: multibus over service-time as the
/// other rows, and the marginal_path method with the values the option
/// descriptions give (sample time "no less than 120"), a 1% (10 per
/// mille) error-rate threshold, and marginal path groups on.
const MULTIPATHD_DEFAULTS: &str = "    path_grouping_policy multibus
    path_selector \"service-time 0\"
    marginal_pathgroups on
    marginal_path_double_failed_time 60
    marginal_path_err_sample_time 120
    marginal_path_err_rate_threshold 10
    marginal_path_err_recheck_gap_time 300
";

/// How the path turns sick.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Sickness {
    Slow,
    Errors,
}

impl Sickness {
    fn fio(self) -> &'static str {
        match self {
            // Reads: the slow path's queue shows in the map's p99.
            Sickness::Slow => "--rw=randread --bs=64k --iodepth=16",
            // 4 KiB writes: the testbed fails writes (then reads) at one
            // 4 KiB block in a hundred, and small writes reach many of them.
            Sickness::Errors => "--rw=randwrite --bs=4k --iodepth=16",
        }
    }
    fn healthy_case(self) -> &'static str {
        match self {
            Sickness::Slow => "64k randread, healthy",
            Sickness::Errors => "4k randwrite, healthy",
        }
    }
    fn sick_case(self) -> &'static str {
        match self {
            Sickness::Slow => "64k randread, path 1 at 1/20",
            Sickness::Errors => "4k randwrite, path 1 fails 1%",
        }
    }
    fn start(self, tb: &Testbed) -> Result<()> {
        match self {
            Sickness::Slow => tb.set_caps(SICK, CAPS[SICK] / 20.0, 0),
            Sickness::Errors => tb.set_error_pct(SICK, 1.0, 4),
        }
    }
    fn end(self, tb: &Testbed) -> Result<()> {
        match self {
            Sickness::Slow => tb.set_caps(SICK, CAPS[SICK], 0),
            Sickness::Errors => tb.set_error_pct(SICK, 0.0, 4),
        }
    }
}

/// A way of meeting the sick path: one row per case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Meet {
    /// `STATICS[i]`, left as it is.
    Static(usize),
    /// service-time; at the onset the path is set aside in a last group.
    AsideByHand,
    /// service-time; at the onset the path is weighted 0.
    WeightZeroByHand,
    Pathpilot,
    Multipathd,
}

const STATICS: [&str; 3] = ["round-robin", "queue-length", "service-time"];

impl Meet {
    fn all() -> Vec<Meet> {
        let mut v: Vec<Meet> = (0..STATICS.len()).map(Meet::Static).collect();
        v.extend([
            Meet::AsideByHand,
            Meet::WeightZeroByHand,
            Meet::Pathpilot,
            Meet::Multipathd,
        ]);
        v
    }
    fn name(self) -> &'static str {
        match self {
            Meet::Static(i) => STATICS[i],
            Meet::AsideByHand => "st, last group by hand",
            Meet::WeightZeroByHand => "st, weight 0 by hand",
            Meet::Pathpilot => "pathpilot",
            Meet::Multipathd => "multipathd marginal",
        }
    }
    /// The table before the onset.
    fn base(self) -> Static {
        match self {
            Meet::Static(i) => Static::sel(STATICS[i], STATICS[i]),
            _ => Static::sel("service-time", "service-time"),
        }
    }
    /// The table applied by hand at the onset.
    fn by_hand(self) -> Option<Static> {
        let others: Vec<usize> = (0..CAPS.len()).filter(|i| *i != SICK).collect();
        let mut w = vec![1; CAPS.len()];
        w[SICK] = 0;
        match self {
            Meet::AsideByHand => Some(Static::grid(self.name()).active(&others)),
            Meet::WeightZeroByHand => Some(Static::grid(self.name()).weights(&w)),
            _ => None,
        }
    }
}

/// One measurement: before, while sick, and the reaction (s from the
/// onset) where the row reacts on its own.
type Round = (Point, Point, Option<f64>);

pub fn run(o: &Opts) -> Result<Report> {
    let tb = super::scenarios::boot(4, &CAPS, Link::Throttle).boot()?;
    let rig = Rig::new(&tb, o)?;
    let sick_name = rig.disks[SICK].clone();
    let (before_s, sick_s) = if o.quick { (4, 10) } else { (10, 20) };
    let mode = |m: &str| -> Result<String> {
        tb.sh(&format!(
            "pathpilot ctl '{{\"cmd\":\"mode\",\"mode\":\"{m}\",\"map\":\"mpatha\"}}'"
        ))
    };
    rig.reset()?;
    // advise: the checker fails and reinstates paths; nothing else moves.
    rig.start_daemon("advise")?;
    rig.measure_secs(&rig.dm, Sickness::Slow.fio(), 2)?;
    let mut got: BTreeMap<(Sickness, Meet), Vec<Round>> = BTreeMap::new();
    let mut seen = 0;
    let mut order: Vec<(Sickness, Meet)> = [Sickness::Slow, Sickness::Errors]
        .into_iter()
        .flat_map(|s| Meet::all().into_iter().map(move |m| (s, m)))
        .collect();
    let t0 = Instant::now();
    for round in 0..o.reps {
        for (k, &(sick, meet)) in order.iter().enumerate() {
            let fio = sick.fio();
            let name = meet.name();
            eprintln!(
                "bench: marginal round {}/{} point {}/{} ({:.0} s): {} / {name}",
                round + 1,
                o.reps,
                k + 1,
                order.len(),
                t0.elapsed().as_secs_f64(),
                sick.sick_case()
            );
            rig.apply(&meet.base())?;
            if meet == Meet::Multipathd {
                rig.stop_daemon()?;
                start_multipathd(&tb)?;
                rig.start_daemon("observe")?;
            }
            if meet == Meet::Pathpilot {
                // From the default, the tuner settles on this load first,
                // free to move every knob (the other rows' reloads went
                // through the daemon, which pinned what they set).
                tb.sh("pathpilot reload mpatha --release >/dev/null")?;
                mode("tune")?;
                tb.sh(r#"pathpilot ctl '{"cmd":"resume","map":"mpatha"}'"#)?;
                let since = Instant::now();
                let job = rig.start_load(fio)?;
                let (settled, n) = rig.wait_settled(since, seen)?;
                rig.stop_load(&job)?;
                seen = n;
                eprintln!(
                    "bench: marginal / pathpilot: tuner settled in {:.0} s",
                    settled.settle_s
                );
            }
            let before = rig.measure_secs(&rig.dm, fio, before_s)?;
            // Every row runs the same poll (so pays the same for it): a
            // dmsetup every 0.5 s, until a little after the sick period,
            // for the moment the path is alone in a last group (pathpilot's
            // set-aside and multipathd's marginal group alike).
            let poll = tb.spawn(&format!(
                "d=$(cat /sys/block/{sick_name}/dev); n={}; i=0; while [ $i -lt $n ]; do \
                 dmsetup table mpatha | grep -Eq \"(robin|length|time) 0 1 [0-9]+ $d( [0-9]+)* *$\" \
                 && break; sleep 0.5; i=$((i+1)); done; \
                 if [ $i -lt $n ]; then cut -d' ' -f1 /proc/uptime; else echo never; fi",
                (sick_s + 2) * 2
            ))?;
            sick.start(&tb)?;
            let onset: f64 = tb.sh("cut -d' ' -f1 /proc/uptime")?.trim().parse()?;
            let during = if let Some(s) = meet.by_hand() {
                // The action's reload is part of what it costs.
                let job = tb.spawn(&format!(
                    "sleep 0.5; {} >/tmp/hand.out 2>&1 || cat /tmp/hand.out",
                    rig.reload_cmd(&s)
                ))?;
                let p = rig.measure_secs(&rig.dm, fio, sick_s)?;
                tb.wait_job(&job, Duration::from_secs(60))?;
                p
            } else {
                rig.measure_secs(&rig.dm, fio, sick_s)?
            };
            sick.end(&tb)?;
            let out = tb.wait_job(&poll, Duration::from_secs(60))?;
            let at: f64 = out.stdout_str().trim().parse().unwrap_or(f64::NAN);
            let react = match meet {
                Meet::Pathpilot | Meet::Multipathd => Some(at - onset).filter(|r| *r >= 0.0),
                _ => None,
            };
            eprintln!(
                "bench: marginal / {name}: before {:.1} MiB/s p99 {:.1} ms; {}: {:.1} MiB/s \
                 p99 {:.1} ms{}",
                before.mib_s,
                before.lat_p99_ms,
                sick.sick_case(),
                during.mib_s,
                during.lat_p99_ms,
                react.map_or(String::new(), |r| format!("; reacted after {r:.1} s"))
            );
            match meet {
                Meet::Pathpilot => {
                    // Healthy again for the next point, and advise mode.
                    tb.sh(&format!(
                        "pathpilot path unmark {sick_name} >/dev/null 2>&1; true"
                    ))?;
                    mode("advise")?;
                }
                Meet::Multipathd => {
                    rig.stop_daemon()?;
                    tb.stop_multipathd()?;
                    rig.start_daemon("advise")?;
                }
                _ => {}
            }
            got.entry((sick, meet))
                .or_default()
                .push((before, during, react));
        }
        // Interleaved: the next round runs the other way round.
        order.reverse();
    }
    tb.power_off()?;
    report(o, &sick_name, before_s, sick_s, &got)
}

/// multipathd takes the map over with [`MULTIPATHD_DEFAULTS`]; udevd runs
/// for it (it finds paths through udev's database).
fn start_multipathd(tb: &Testbed) -> Result<()> {
    let conf = format!(
        "defaults {{\n{MULTIPATHD_DEFAULTS}}}\n\
         multipaths {{\n    multipath {{\n        wwid {w}\n        alias mpatha\n    }}\n}}",
        w = wwid()
    );
    let out = tb.start_multipathd(&conf, &[&wwid()], "mpatha", 4)?;
    eprintln!("bench: multipathd holds mpatha: {}", out.trim());
    Ok(())
}

fn report(
    o: &Opts,
    sick_name: &str,
    before_s: u32,
    sick_s: u32,
    got: &BTreeMap<(Sickness, Meet), Vec<Round>>,
) -> Result<Report> {
    let mut r = Report::new("marginal", Link::Throttle, CAPS.iter().sum());
    r.notes.push(format!(
        "QD16; {before_s} s measured, then path 1 ({sick_name}) cut from 20 to 1 MiB/s (reads) \
         or failing 1% of its writes, and {sick_s} s measured from that moment; medians of {} \
         round(s), interleaved; the daemon attached to every row (advise mode, checker on, for \
         the static and by-hand rows; observe mode beside multipathd)",
        o.reps
    ));
    r.notes.push(format!(
        "multipathd: multipath-tools' own daemon with {}",
        MULTIPATHD_DEFAULTS
            .lines()
            .map(str::trim)
            .collect::<Vec<_>>()
            .join("; ")
    ));
    let median_react = |v: &[Round]| {
        let mut x: Vec<f64> = v.iter().filter_map(|x| x.2).collect();
        (!x.is_empty()).then(|| median(&mut x))
    };
    for sick in [Sickness::Slow, Sickness::Errors] {
        let mut rows_sick = vec![];
        for meet in Meet::all() {
            let v = &got[&(sick, meet)];
            let b: Vec<Point> = v.iter().map(|x| x.0.clone()).collect();
            let s: Vec<Point> = v.iter().map(|x| x.1.clone()).collect();
            r.rows.push(Row::new(
                sick.healthy_case(),
                meet.name(),
                Point::median_of(&b),
            ));
            let mut row = Row::new(sick.sick_case(), meet.name(), Point::median_of(&s));
            match meet {
                Meet::Pathpilot | Meet::Multipathd => {
                    let react = median_react(v);
                    row = row
                        .with("react_s", json!(react.map(|x| (x * 10.0).round() / 10.0)))
                        .with(
                            "setting",
                            json!(react.map_or("never reacted".into(), |x| format!(
                                "reacted after {x:.1} s (median)"
                            ))),
                        );
                }
                Meet::AsideByHand | Meet::WeightZeroByHand => {
                    row = row.with("setting", json!("applied 0.5 s after the onset"));
                }
                Meet::Static(_) => {}
            }
            rows_sick.push(row);
        }
        r.rows.extend(rows_sick);
    }
    verdicts(&mut r);
    Ok(r)
}

fn verdicts(r: &mut Report) {
    let p99 = |r: &Report, case: &str, meet: Meet| r.row(case, meet.name()).map(|x| x.p.lat_p99_ms);
    let (slow, slow_ok) = (Sickness::Slow.sick_case(), Sickness::Slow.healthy_case());
    if let (Some(pp), Some(ppb)) = (
        p99(r, slow, Meet::Pathpilot),
        p99(r, slow_ok, Meet::Pathpilot),
    ) {
        let x = pp / ppb;
        r.verdict(
            format!(
                "pathpilot's p99 while the path is slow within 1.5x of before: {pp:.1} vs \
                 {ppb:.1} ms ({x:.2}x)"
            ),
            x <= 1.5,
        );
    }
    for sick in [Sickness::Slow, Sickness::Errors] {
        let case = sick.sick_case();
        let best = (0..STATICS.len())
            .filter_map(|i| Some((STATICS[i], p99(r, case, Meet::Static(i))?)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some(pp), Some((bn, b))) = (p99(r, case, Meet::Pathpilot), best) {
            r.verdict(
                format!(
                    "{case}: pathpilot's p99 below the best static's ({bn}): {pp:.1} vs {b:.1} ms"
                ),
                pp < b,
            );
        }
        if let (Some(pp), Some(m)) = (
            p99(r, case, Meet::Pathpilot),
            p99(r, case, Meet::Multipathd),
        ) {
            r.verdict(
                format!("{case}: pathpilot's p99 at most multipathd's: {pp:.1} vs {m:.1} ms"),
                pp <= m,
            );
        }
        let react = r
            .row(case, Meet::Pathpilot.name())
            .and_then(|x| x.extra.get("react_s"))
            .and_then(Value::as_f64);
        r.verdict(
            format!(
                "{case}: pathpilot judges the path marginal within 10 s: {}",
                react.map_or("never".into(), |x| format!("{x:.1} s"))
            ),
            react.is_some_and(|x| x <= 10.0),
        );
        // The issue's question: of the two actions, which recovers the map
        // better (both take one reload each way). Figures, not a target.
        if let (Some(a), Some(w)) = (
            p99(r, case, Meet::AsideByHand),
            p99(r, case, Meet::WeightZeroByHand),
        ) {
            r.notes.push(format!(
                "{case}: p99 with the path in a last group {a:.1} ms, with weight 0 {w:.1} ms \
                 ({:.2}x)",
                a / w
            ));
        }
    }
}
