//! The scenarios of `bench mpath`, each in its own testbed boot(s).
use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context, Result};
use pathpilot_testbed::figures::median;
use pathpilot_testbed::{Builder, Link, Testbed};
use serde_json::{Value, json};

use super::super::{Loss, ProgramReading, Share, floor, program_costs};
use super::toggled::{self, Observer};

use super::beside::{self, Beside};
use super::compare::{Tuned, Workload, compare};
use super::opts::Opts;
use super::report::{Point, Report, Row, settle_verdicts};
use super::rig::{Rig, show_settings};
use super::statics::{MULTIPATH_TOOLS, Static};

/// The row of the daemon started from round-robin.
pub(super) const FROM_RR: &str = "pathpilot from rr";

pub(super) fn boot(paths: usize, caps: &[f64], link: Link) -> Builder {
    Testbed::builder()
        .paths(paths)
        .caps_mib(caps)
        .link(link)
        .mem_mib(768)
        .cmd_timeout(Duration::from_secs(600))
}

/// `a`'s MiB/s over `b`'s in one case.
fn ratio(r: &Report, case: &str, a: &str, b: &str) -> f64 {
    match (r.row(case, a), r.row(case, b)) {
        (Some(x), Some(y)) if y.p.mib_s > 0.0 => x.p.mib_s / y.p.mib_s,
        _ => f64::NAN,
    }
}

/// Unequal paths (10/20/40/80 MiB/s), 64 KiB random reads at QD16.
pub fn asym(o: &Opts) -> Result<Report> {
    let caps = [10.0, 20.0, 40.0, 80.0];
    let tb = boot(4, &caps, Link::Throttle).boot()?;
    let rig = Rig::new(&tb, o)?;
    // single-path: the fastest one.
    let mut statics = Static::standard(3);
    statics.push(Static::grid("st 13:25:50:100").weights(&[13, 25, 50, 100]));
    if !o.quick {
        statics.push(
            Static::grid("st 3 fastest 25:50:100")
                .weights(&[13, 25, 50, 100])
                .active(&[1, 2, 3]),
        );
        statics.push(
            Static::grid("ql 2 fastest")
                .selector("queue-length")
                .active(&[2, 3]),
        );
    }
    let case = "64k randread qd16";
    let w = [Workload {
        case: case.into(),
        fio: "--rw=randread --bs=64k --iodepth=16".into(),
    }];
    let mut r = Report::new("asym", Link::Throttle, caps.iter().sum());
    // The tuner from the worst static setting too: its own work, not the
    // default's.
    let mut tuned = Tuned::defaults();
    tuned.push(Tuned::from(
        FROM_RR,
        Static::sel("round-robin", "round-robin"),
    ));
    // A host that runs multipath-tools: its map alone, the daemon beside
    // it, and its advice applied through multipathd.
    tuned.extend(Tuned::beside_multipathd());
    r.rows = compare(&rig, &w, &statics, &tuned)?;
    tb.power_off()?;
    let pp = r.row(case, "pathpilot").map_or(f64::NAN, |x| x.p.mib_s);
    let share = pp / r.sum_of_caps;
    r.verdict(
        format!("pathpilot >= 95% of the sum of caps: {:.0}%", share * 100.0),
        share >= 0.95,
    );
    let x = ratio(&r, case, "pathpilot", "round-robin");
    r.verdict(format!("pathpilot >= 3x round-robin: {x:.2}x"), x >= 3.0);
    let from_rr = r.row(case, FROM_RR).context("no row from round-robin")?;
    // Its time: to the last change it kept (nothing kept: it stayed at
    // round-robin, and its figure says so).
    let kept = from_rr.extra["kept_s"].as_f64().unwrap_or(0.0);
    let share = from_rr.p.mib_s / r.sum_of_caps;
    r.verdict(
        format!(
            "{FROM_RR}: >= 95% of the sum of caps within 30 s: {:.0}%, last kept change at {kept:.0} s",
            share * 100.0
        ),
        share >= 0.95 && kept <= 30.0,
    );
    beside_verdicts(&mut r, case);
    tail_verdicts(&mut r, case);
    settle_verdicts(&mut r);
    Ok(r)
}

/// The tail at no loss of throughput: each pathpilot row's p99 within
/// 1.5x of the oracle's, its MiB/s at least 99% of the oracle's.
fn tail_verdicts(r: &mut Report, case: &str) {
    let Some(oracle) = r.row(case, "oracle").map(|x| x.p.clone()) else {
        return;
    };
    let ours: Vec<(String, f64, f64)> = ["pathpilot", FROM_RR]
        .iter()
        .filter_map(|n| r.row(case, n))
        .map(|x| (x.config.clone(), x.p.mib_s, x.p.lat_p99_ms))
        .collect();
    for (name, mib, p99) in ours {
        let ratio = p99 / oracle.lat_p99_ms;
        r.verdict(
            format!(
                "{name}: p99 <= 1.5x the oracle's at no loss of throughput: {p99:.1} vs {:.1} ms \
                 ({ratio:.2}x), {:.0}% of its MiB/s",
                oracle.lat_p99_ms,
                mib / oracle.mib_s * 100.0
            ),
            ratio <= 1.5 && mib >= oracle.mib_s * 0.99,
        );
    }
}

/// What the daemon beside multipathd gains over multipathd alone: with
/// the queue knobs only (a note: multipathd's table decides), and with its
/// table advice applied (a target: at least 2x).
fn beside_verdicts(r: &mut Report, case: &str) {
    let mib = |b: Beside| r.row(case, b.row()).map_or(f64::NAN, |x| x.p.mib_s);
    let alone = mib(Beside::Alone);
    let tune = mib(Beside::Tune) / alone;
    let apply = mib(Beside::Apply) / alone;
    r.notes.push(format!(
        "{}: {tune:.2}x {} (the queue knobs only; multipathd's table decides)",
        Beside::Tune.row(),
        Beside::Alone.row()
    ));
    r.verdict(
        format!(
            "{} >= 2x {}: {apply:.2}x",
            Beside::Apply.row(),
            Beside::Alone.row()
        ),
        apply >= 2.0,
    );
}

/// One 1 MiB sequential reader over the wire link, 2 and 4 equal paths.
pub fn stream(o: &Opts) -> Result<Report> {
    let cap = 20.0;
    let mut r = Report::new("stream", Link::Wire, 4.0 * cap);
    for n in [2usize, 4] {
        let tb = boot(n, &[cap], Link::Wire).boot()?;
        let rig = Rig::new(&tb, o)?;
        let mut statics = Static::standard(0);
        let kbs: &[u32] = match (o.quick, n) {
            (true, 2) => &[512],
            (true, _) => &[256],
            _ => &[512, 256, 128],
        };
        for kb in kbs {
            statics.push(Static::grid(&format!("st max_sectors_kb {kb}")).msk(*kb));
        }
        // Deep queues fill every path under any selector: --quick shows
        // that once, on 4 paths.
        let qds: &[u32] = if o.quick && n == 2 { &[1] } else { &[1, 8] };
        let w: Vec<Workload> = qds
            .iter()
            .map(|qd| Workload {
                case: format!("{n} paths 1m qd{qd}"),
                fio: format!("--rw=read --bs=1m --iodepth={qd}"),
            })
            .collect();
        for x in &w {
            r.case_caps.insert(x.case.clone(), n as f64 * cap);
        }
        r.rows
            .extend(compare(&rig, &w, &statics, &Tuned::defaults())?);
        tb.power_off()?;
        let target = if n == 2 { 1.8 } else { 3.4 };
        let case = format!("{n} paths 1m qd1");
        let x = ratio(&r, &case, "pathpilot", "single-path");
        r.verdict(
            format!("{n} paths QD1: pathpilot >= {target}x one path: {x:.2}x"),
            x >= target,
        );
        if n == 4 {
            // The guest may cap every setting below 3.4x: what the tuner
            // owes is the best static setting of the same boot.
            let of = ratio(&r, &case, "pathpilot", "oracle");
            r.verdict(
                format!(
                    "4 paths QD1: pathpilot >= 95% of the best static setting (medians of {} round(s)): {:.0}%",
                    o.reps,
                    of * 100.0
                ),
                of >= 0.95,
            );
        }
    }
    settle_verdicts(&mut r);
    Ok(r)
}

/// 4 KiB sequential writes against IOPS caps, per path and shared: where
/// merging at the map's queue is worth more than spreading.
pub fn merge(o: &Opts) -> Result<Report> {
    let mut r = Report::new("merge", Link::Throttle, 0.0);
    r.unit = "MIB/S";
    r.notes.push(
        "workload: one fio job, 4 KiB sequential O_DIRECT writes, 32 in flight (32 writers at \
         QD1 in one interleaved stream repeat it within a factor 2 only, and 32 writers on their \
         own ranges never merge); sum_of_caps is in IOPS x 4 KiB"
            .into(),
    );
    for shared in [false, true] {
        let mut b = boot(4, &[], Link::Throttle);
        let case = if shared {
            b = b.shared_iops(400);
            "shared 400 iops"
        } else {
            b = b.iops(&[100]);
            "100 iops per path"
        };
        let tb = b.boot()?;
        let rig = Rig::new(&tb, o)?;
        let mut statics = Static::standard(0);
        let mut grid: Vec<Static> = vec![];
        if !o.quick {
            grid.push(Static::grid("2 active").active(&[0, 1]));
        }
        if !o.quick {
            grid.push(Static::grid("1 active").active(&[0]));
            grid.push(Static::grid("qd 32").qd(32));
            grid.push(Static::grid("qd 16").qd(16));
        }
        if !o.quick || !shared {
            grid.push(Static::grid("qd 4").qd(4));
        }
        grid.push(Static::grid("qd 1").qd(1));
        if !o.quick {
            for nr in [128, 256, 1024] {
                grid.push(Static::grid(&format!("qd 1 nr {nr}")).qd(1).nr(nr));
            }
        }
        grid.push(Static::grid("2 active qd 1").active(&[0, 1]).qd(1));
        if shared {
            grid.push(Static::grid("1 active qd 1").active(&[0]).qd(1));
        }
        statics.extend(grid);
        let w = [Workload {
            case: case.into(),
            fio: "--rw=write --bs=4k --iodepth=32 --size=256m".into(),
        }];
        r.case_caps.insert(case.into(), 400.0 * 4.0 / 1024.0);
        r.rows
            .extend(compare(&rig, &w, &statics, &Tuned::defaults())?);
        tb.power_off()?;
        let target = if shared { 5.0 } else { 3.0 };
        let x = ratio(&r, case, "pathpilot", MULTIPATH_TOOLS);
        r.verdict(
            format!("{case}: pathpilot >= {target}x {MULTIPATH_TOOLS}: {x:.2}x"),
            x >= target,
        );
    }
    r.sum_of_caps = 400.0 * 4.0 / 1024.0;
    settle_verdicts(&mut r);
    Ok(r)
}

/// A phase of the switching workload.
struct Phase {
    name: &'static str,
    fio: &'static str,
}

const PHASES: [Phase; 3] = [
    Phase {
        name: "64k randread qd16",
        fio: "--rw=randread --bs=64k --iodepth=16",
    },
    Phase {
        name: "1m read qd1",
        fio: "--rw=read --bs=1m --iodepth=1",
    },
    Phase {
        name: "4k write qd32",
        fio: "--rw=write --bs=4k --iodepth=32 --size=256m",
    },
];

/// Runs the phase sequence on the map; returns per-phase points and the
/// guest's unix time at each phase's start.
fn run_phases(rig: &Rig, phase_s: u32, cycles: usize) -> Result<(Vec<Point>, Vec<f64>)> {
    let mut pts = vec![];
    let mut starts = vec![];
    for _ in 0..cycles {
        for ph in &PHASES {
            let t = rig.tb.sh("date +%s")?.trim().parse::<f64>().unwrap_or(0.0);
            starts.push(t);
            // No ramp: a workload change is what is measured.
            let p = rig.measure_secs(&rig.dm, &format!("{} --ramp_time=0", ph.fio), phase_s)?;
            pts.push(p);
        }
    }
    Ok((pts, starts))
}

/// The workload changes every phase; throughput over the whole run.
pub fn switch(o: &Opts) -> Result<Report> {
    let caps = [10.0, 20.0, 40.0, 80.0];
    let tb = boot(4, &caps, Link::Throttle).boot()?;
    let rig = Rig::new(&tb, o)?;
    let (phase_s, cycles) = if o.quick { (10, 1) } else { (60, 2) };
    let mut statics = if o.quick {
        vec![Static::sel("service-time", "service-time")]
    } else {
        Static::standard(3)
            .into_iter()
            .filter(|s| s.raw.is_none())
            .collect()
    };
    statics.push(Static::grid("st 13:25:50:100").weights(&[13, 25, 50, 100]));
    let mut r = Report::new("switch", Link::Throttle, caps.iter().sum());
    r.notes.push(format!(
        "phases of {phase_s} s, {cycles} cycle(s): {}; mib_s = MiB moved / seconds measured",
        PHASES
            .iter()
            .map(|p| p.name)
            .collect::<Vec<_>>()
            .join(" -> ")
    ));
    if o.quick {
        r.notes.push(
            "--quick compares service-time and the weighted grid point (the best static) only"
                .into(),
        );
    }
    rig.reset()?;
    rig.measure_secs(&rig.dm, PHASES[0].fio, 2)?;
    let case = "switching";
    let summarize = |pts: &[Point]| -> Point {
        let secs = phase_s as f64;
        let n = pts.len().max(1) as f64;
        Point::fio_only(
            pts.iter().map(|p| p.mib_s * secs).sum::<f64>() / (secs * n),
            pts.iter().map(|p| p.iops).sum::<f64>() / n,
            pts.iter().map(|p| p.lat_p99_ms).fold(0.0, f64::max),
        )
    };
    let phase_json = |pts: &[Point]| -> Value {
        json!(
            pts.iter()
                .enumerate()
                .map(|(i, p)| json!({"phase": PHASES[i % PHASES.len()].name, "mib_s": (p.mib_s * 100.0).round() / 100.0,
                    "avg_request_kib": (p.avg_request_kib * 10.0).round() / 10.0, "merge_pct": (p.merge_pct * 10.0).round() / 10.0}))
                .collect::<Vec<_>>()
        )
    };
    let mut best: Option<Row> = None;
    let mut rows = vec![];
    // Per phase run: the best static point and whose it was.
    let mut per_phase: Vec<(Point, String)> = vec![];
    for s in &statics {
        rig.apply(s)?;
        let (pts, _) = run_phases(&rig, phase_s, cycles)?;
        for (i, p) in pts.iter().enumerate() {
            match per_phase.get_mut(i) {
                Some((b, _)) if p.mib_s <= b.mib_s => {}
                Some(best) => *best = (p.clone(), s.name.clone()),
                None => per_phase.push((p.clone(), s.name.clone())),
            }
        }
        let row = Row::new(
            case,
            if s.name.starts_with("st ") {
                "grid"
            } else {
                s.name.as_str()
            },
            summarize(&pts),
        )
        .with("setting", json!(rig.describe(s)))
        .with("phases", phase_json(&pts))
        .with("label", json!(s.name));
        eprintln!("bench: switch / {}: {:.1} MiB/s", s.name, row.p.mib_s);
        if best.as_ref().is_none_or(|b| row.p.mib_s > b.p.mib_s) {
            best = Some(row.clone());
        }
        rows.push(row);
    }
    // pathpilot from the defaults, learning as the workload changes, and
    // from round-robin, the worst static setting: its own work, not the
    // default's.
    let tuned = |name: &str, start: Option<&Static>| -> Result<Row> {
        rig.start_tuning_from(start)?;
        let (pts, starts) = run_phases(&rig, phase_s, cycles)?;
        let st = rig.status()?;
        let settings = show_settings(&st["maps"][0]["settings"]);
        let decisions = st["decisions"].as_array().cloned().unwrap_or_default();
        let log = rig.decisions(0)?;
        rig.stop_daemon()?;
        // Settle time after each change: the last decision within the phase.
        let mut settle = vec![];
        for (i, t0) in starts.iter().enumerate() {
            let t1 = starts.get(i + 1).copied().unwrap_or(f64::INFINITY);
            let within = |d: &&Value| d["unix"].as_f64().is_some_and(|u| u >= *t0 && u < t1);
            let last = decisions
                .iter()
                .filter(within)
                .filter_map(|d| d["unix"].as_f64())
                .reduce(f64::max);
            settle.push(json!({
                "phase": PHASES[i % PHASES.len()].name,
                "settle_s": last.map(|u| ((u - t0) * 10.0).round() / 10.0),
                "decisions": decisions.iter().filter(within).count(),
            }));
        }
        eprintln!("bench: switch / {name}:\n  {}", log.join("\n  "));
        Ok(Row::new(case, name, summarize(&pts))
            .with("setting", json!(settings))
            .with("phases", phase_json(&pts))
            .with("settle_per_phase", json!(settle))
            .with("decisions", json!(log)))
    };
    let ours = tuned("pathpilot", None)?;
    let from_rr = tuned(FROM_RR, Some(&Static::sel("round-robin", "round-robin")))?;
    // A host that runs multipath-tools: its map alone, the daemon beside
    // it, and its advice applied through multipathd, each over the same
    // phases.
    let mut with_multipathd = vec![];
    for how in Beside::ALL {
        with_multipathd.push(rig.with_multipathd(how, |_| {
            let (pts, _) = run_phases(&rig, phase_s, cycles)?;
            let setting = beside::describe(&rig, how)?;
            let log = if how == Beside::Alone {
                vec![]
            } else {
                rig.decisions(0)?
            };
            eprintln!(
                "bench: switch / {}: {setting}\n  {}",
                how.row(),
                log.join("\n  ")
            );
            Ok(Row::new(case, how.row(), summarize(&pts))
                .with("setting", json!(setting))
                .with("phases", phase_json(&pts))
                .with("decisions", json!(log))
                .with("beside", json!(true)))
        })?);
    }
    tb.power_off()?;
    let mut out: Vec<Row> = rows
        .iter()
        .filter(|r| r.config != "grid")
        .cloned()
        .collect();
    if let Some(b) = best {
        let setting = b.extra.get("setting").cloned().unwrap_or(Value::Null);
        let mut o = Row::new(case, "oracle", b.p.clone()).with("setting", setting);
        o.extra.insert("phases".into(), b.extra["phases"].clone());
        out.push(o.with("label", json!("oracle")));
    }
    let best_static = out.iter().map(|r| r.p.mib_s).fold(0.0, f64::max);
    // The ceiling for a tuner that keeps one setting per phase: each
    // phase's best static point, over the run.
    let pts: Vec<Point> = per_phase.iter().map(|(p, _)| p.clone()).collect();
    let oracle = summarize(&pts);
    let whose = per_phase
        .iter()
        .map(|(_, n)| n.as_str())
        .collect::<Vec<_>>()
        .join(" / ");
    let ceiling = oracle.mib_s;
    out.push(
        Row::new(case, "oracle per phase", oracle)
            .with("setting", json!(format!("best per phase: {whose}")))
            .with("phases", phase_json(&pts))
            .with("label", json!("oracle per phase")),
    );
    for row in [&ours, &from_rr] {
        let name = &row.config;
        r.verdict(
            format!(
                "{name} over the whole run >= the best static configuration: {:.1} vs {:.1} MiB/s",
                row.p.mib_s, best_static
            ),
            row.p.mib_s >= best_static,
        );
        let share = row.p.mib_s / ceiling * 100.0;
        if o.quick {
            r.notes.push(format!(
                "{name} reached {share:.0}% of the per-phase oracle ({ceiling:.1} MiB/s); the \
                 full run holds it to 90%"
            ));
        } else {
            r.verdict(
                format!("{name} >= 90% of the per-phase oracle: {share:.0}% of {ceiling:.1} MiB/s"),
                share >= 90.0,
            );
        }
    }
    out.push(ours);
    out.push(from_rr);
    out.extend(with_multipathd);
    out.extend(rows.into_iter().filter(|r| r.config == "grid"));
    r.rows = out;
    beside_verdicts(&mut r, case);
    tail_verdicts(&mut r, case);
    Ok(r)
}

/// The observer's cost: the daemon in observe mode vs none, on uncapped
/// paths (the guest CPU is the limit: the per-I/O cost shows in full) and
/// on paths capped below that (the storage is the limit, as on a real
/// disk: what a user loses). Measured inside one fio run
/// per case, the daemon started and stopped in turn (see `toggled`).
/// Only the daemon as it comes is judged; windows of it alone are added
/// while its loss's confidence interval straddles the target, up to a
/// bound; one still straddling it is reported inconclusive, never met.
pub fn overhead(o: &Opts) -> Result<Report> {
    // This binary reaches the guest for the empty programs (the floor).
    let share = Share::new("pp-overhead")?;
    floor::share_self(&share.0)?;
    let tb = boot(4, &[], Link::Throttle).share(&share.0).boot()?;
    floor::install_in_guest(&tb)?;
    let rig = Rig::new(&tb, o)?;
    let fio = "--rw=randread --bs=4k --iodepth=16";
    let io_bytes = 4096.0;
    let first = if o.quick { 4 } else { 6 } * o.reps.max(1);
    // The guest's windows differ by about 10% from their neighbours: a
    // loss of 2-3% needs some 70 of them to be told from 5%.
    let most = first * 12;
    rig.reset()?;
    rig.measure_secs(&rig.dm, fio, 2)?;
    let mut r = Report::new("overhead", Link::Throttle, 0.0);
    r.notes.push(format!(
        "4 KiB random reads at QD16 on the map, in one fio run per case, fio's IOPS logged each \
         second: the daemon in observe mode started and stopped in turn, as it comes (its probes \
         attached a quarter of each window, observe_duty's default) and with them \
         always attached (observe_duty = 1), and empty programs on the same {n} tracepoints \
         (the floor: what any program there costs), in rotated order, each {window} s window \
         with one between two {window} s windows without any, each window after {settle} s to \
         settle (a start or an exit); each window with one against the mean of its two \
         neighbours; {first} windows per configuration, then windows of the daemon as it comes \
         alone (up to {most}) while its loss's 95% interval straddles the target (the others \
         are measured, not judged); medians; the CPU share is of the one guest CPU in its \
         windows",
        n = floor::tracepoints(true).len(),
        window = toggled::WINDOW.as_secs(),
        settle = toggled::SETTLE.as_secs(),
    ));
    // The first is judged: the daemon as it comes.
    let configs = [
        (
            "observer",
            "observer (sampled a quarter of the time, the default)",
            Observer::Daemon(""),
            "pathpilot daemon --mode observe",
        ),
        (
            "always attached",
            "observer always attached",
            Observer::Daemon("observe_duty = 1\n"),
            "pathpilot daemon --mode observe, observe_duty = 1",
        ),
        (
            "empty programs",
            "empty programs on the same tracepoints",
            Observer::Floor,
            "empty eBPF programs on the observer's tracepoints",
        ),
    ];
    let extras: Vec<Observer> = configs.iter().map(|c| c.2).collect();
    // The uncapped case first: its IOPS set the capped case's budget.
    let mut cpu_bound_iops = 0.0f64;
    for capped in [false, true] {
        // The loss allowed, in percent: with the storage the limit, what a
        // user loses (2%); with the guest's CPU the limit, where every
        // emulated instruction shows in full, 5%.
        let target = if capped { 2.0 } else { 5.0 };
        let case = if capped {
            // Half of what the CPU can do, spread over the paths.
            let per_path = (cpu_bound_iops / 2.0 / 4.0).max(50.0) as u64;
            for i in 0..4 {
                tb.set_caps(i, 0.0, per_path)?;
            }
            format!("capped {} IOPS", per_path * 4)
        } else {
            "uncapped (CPU)".to_string()
        };
        let mut t = toggled::run(&rig, fio, &extras, first)?;
        let losses = loop {
            let losses: Vec<Loss> = t
                .pairs
                .iter()
                .map(|p| {
                    let (bare, with): (Vec<f64>, Vec<f64>) = p.iter().copied().unzip();
                    Loss::of(&bare, &with)
                })
                .collect();
            let done = t.pairs[0].len();
            if losses[0].within(target).is_some() || done >= most {
                break losses;
            }
            eprintln!(
                "bench: overhead / {case}: the daemon as it comes after {done} windows: \
                 {:.1}% +- {:.1} straddles {target}%: more",
                losses[0].mean, losses[0].half_width
            );
            let more = toggled::run(&rig, fio, &extras[..1], first.min(most - done))?;
            t.extend_first(more);
        };
        let mib = |iops: f64| iops * io_bytes / 1048576.0;
        let point = |iops: f64| Point::fio_only(mib(iops), iops, f64::NAN);
        let runs = |v: &[f64]| {
            json!(
                v.iter()
                    .map(|iops| (mib(*iops) * 100.0).round() / 100.0)
                    .collect::<Vec<_>>()
            )
        };
        let bare: Vec<f64> = t.pairs.iter().flatten().map(|p| p.0).collect();
        let bare_iops = median(&mut bare.clone());
        if !capped {
            cpu_bound_iops = bare_iops;
            // Where the guest's time per I/O goes, program by program.
            for (config, _, observer, _) in configs {
                let note = guest_program_costs(&rig, fio, observer)
                    .with_context(|| format!("the programs' costs ({config})"))?;
                eprintln!("bench: overhead / {config}: {note}");
                r.notes.push(format!("{config}, {note}"));
            }
        }
        r.rows.push(
            Row::new(&case, "detached", point(bare_iops))
                .with("setting", json!("no daemon (the windows either side)"))
                .with("runs", runs(&bare)),
        );
        let what = if capped {
            "storage the limit (a user's case)"
        } else {
            "guest CPU the limit (the per-I/O cost in full)"
        };
        for (i, (((config, said, observer, how), loss), (pairs, cpu))) in configs
            .iter()
            .zip(losses)
            .zip(t.pairs.iter().zip(&t.cpu))
            .enumerate()
        {
            let with: Vec<f64> = pairs.iter().map(|p| p.1).collect();
            let cpu_med = median(&mut cpu.clone());
            r.rows.push(
                Row::new(&case, config, point(median(&mut with.clone())))
                    .with("setting", json!(format!("{how}, cpu {cpu_med:.1}%")))
                    .with("cpu_pct", json!((cpu_med * 10.0).round() / 10.0))
                    .with(
                        "throughput_lost_pct",
                        json!((loss.mean * 10.0).round() / 10.0),
                    )
                    .with(
                        "throughput_lost_ci95_half_width",
                        json!((loss.half_width * 10.0).round() / 10.0),
                    )
                    .with("runs", runs(&with)),
            );
            if i > 0 {
                let whose = if *observer == Observer::Floor {
                    "the floor, not judged"
                } else {
                    "opt-in, not judged"
                };
                r.notes.push(format!(
                    "{case}: {said} ({whose}): {:.1}% +- {:.1} (95%, {} windows against their \
                     neighbours; CPU {cpu_med:.1}%)",
                    loss.mean, loss.half_width, loss.pairs
                ));
                continue;
            }
            let what = format!(
                "{what}: {said} costs <= {target}% throughput: {:.1}% +- {:.1} (95%, {} windows \
                 against their neighbours; daemon CPU {cpu_med:.1}%)",
                loss.mean, loss.half_width, loss.pairs
            );
            match loss.within(target) {
                Some(met) => r.verdict(what, met),
                None => r.inconclusive(what),
            }
        }
    }
    tb.power_off()?;
    Ok(r)
}

/// One run of `observer` (the daemon in observe mode, or the floor's empty
/// programs) with the kernel's accounting of program runs on
/// (`kernel.bpf_stats_enabled`, which times every run: never on in the
/// rounds): each program's time per run and runs per I/O, against the
/// guest's CPU time per I/O (its one CPU is the limit).
fn guest_program_costs(rig: &Rig, fio: &str, observer: Observer) -> Result<String> {
    const STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";
    /// The programs by name, and the map's I/Os completed.
    type Reading = (BTreeMap<String, ProgramReading>, u64);
    let pid = observer.start(rig)?;
    rig.tb.sh(&format!("echo 1 > {STATS}"))?;
    let read = || -> Result<Reading> {
        let progs = match observer {
            // The daemon says what its programs cost.
            Observer::Daemon(_) => rig.status()?["bpf_programs"]
                .as_array()
                .context("no bpf_programs in the status")?
                .iter()
                .map(|p| {
                    let name = p["program"].as_str().unwrap_or("").to_string();
                    let reading = (
                        name.clone(),
                        p["run_ns"].as_u64().unwrap_or(0),
                        p["runs"].as_u64().unwrap_or(0),
                    );
                    (name, reading)
                })
                .collect(),
            Observer::Floor => floor::readings_in_guest(rig.tb, &pid)?
                .into_values()
                .map(|r| (r.0.clone(), r))
                .collect(),
        };
        // Reads and writes completed at the map: fio's I/Os.
        let k = rig.tb.sh(&format!("cat /sys/block/{}/stat", rig.dm))?;
        let f: Vec<u64> = k
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        Ok((
            progs,
            f.first().copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0),
        ))
    };
    let measured = (|| {
        let (p0, k0) = read()?;
        let point = rig.measure(&rig.dm, fio)?;
        let (p1, k1) = read()?;
        anyhow::Ok((p0, k0, point, p1, k1))
    })();
    let off = rig.tb.sh(&format!("echo 0 > {STATS}"));
    observer.stop(rig, &pid)?;
    off?;
    let (p0, k0, point, p1, k1) = measured?;
    let ios = k1.saturating_sub(k0);
    let (ns_per_io, programs) = program_costs(&p0, &p1, ios);
    let total_us = ns_per_io / 1e3;
    let each: Vec<String> = programs
        .iter()
        .map(|(name, (ns_per_run, runs_per_io))| {
            format!(
                "{name} {:.1} us x {runs_per_io:.2} = {:.1} us",
                ns_per_run / 1e3,
                ns_per_run * runs_per_io / 1e3
            )
        })
        .collect();
    let cpu_us = 1e6 / point.iops.max(1e-9);
    Ok(format!(
        "eBPF per I/O with bpf_stats on (one run, {ios} I/Os at {:.0} IOPS): {total_us:.1} us \
         of {cpu_us:.0} us of guest CPU per I/O ({:.1}%): {}",
        point.iops,
        total_us / cpu_us * 100.0,
        each.join(", ")
    ))
}

/// Request size x repeat count, written and read back,
/// next to the same sizes over the honoured knob (max_sectors_kb).
pub fn repeat(o: &Opts) -> Result<Report> {
    let cap = 20.0;
    let tb = boot(2, &[cap], Link::Wire).boot()?;
    let rig = Rig::new(&tb, o)?;
    let (sizes, counts, kbs): (&[u32], &[u32], &[u32]) = if o.quick {
        (&[4, 1024], &[1, 1000], &[512])
    } else {
        (
            &[4, 16, 64, 256, 1024],
            &[1, 10, 100, 1000],
            &[512, 256, 128],
        )
    };
    let secs = if o.quick { 3 } else { o.secs };
    let mut r = Report::new("repeat", Link::Wire, 2.0 * cap);
    r.notes.push(
        "one sequential O_DIRECT reader at QD1 (as sg_dd reads), round-robin, 2 paths on the wire link"
            .into(),
    );
    rig.reset()?;
    rig.measure_secs(&rig.dm, "--rw=read --bs=1m --iodepth=1", 2)?;
    let mut grid = vec![];
    for &n in counts {
        let mut s = Static::sel(&format!("rr_min_io {n}"), "round-robin");
        s.repeat = Some(n);
        let table = rig.apply(&s)?;
        let kept = kept_repeat(&table).context("repeat count in the table")?;
        for &kib in sizes {
            let p =
                rig.measure_secs(&rig.dm, &format!("--rw=read --bs={kib}k --iodepth=1"), secs)?;
            eprintln!(
                "bench: repeat {n} (kept {kept}) {kib} KiB: {:.1} MiB/s",
                p.mib_s
            );
            r.rows.push(
                Row::new(&format!("{kib} KiB"), "round-robin", p)
                    .with("repeat_count_set", json!(n))
                    .with("repeat_count_kept", json!(kept))
                    .with("request_kib", json!(kib))
                    .with(
                        "setting",
                        json!(format!("rr_min_io {n} -> kernel kept {kept}")),
                    )
                    .with("label", json!(format!("rr {n}"))),
            );
        }
    }
    for &kb in kbs {
        let s = Static::grid(&format!("max_sectors_kb {kb}"))
            .selector("round-robin")
            .msk(kb);
        rig.apply(&s)?;
        for &kib in sizes {
            let p =
                rig.measure_secs(&rig.dm, &format!("--rw=read --bs={kib}k --iodepth=1"), secs)?;
            eprintln!(
                "bench: repeat grid max_sectors_kb {kb} {kib} KiB: {:.1} MiB/s",
                p.mib_s
            );
            grid.push(
                Row::new(&format!("{kib} KiB"), "max_sectors_kb", p)
                    .with("request_kib", json!(kib))
                    .with("max_sectors_kb", json!(kb))
                    .with(
                        "setting",
                        json!(format!("round-robin, max_sectors_kb {kb}")),
                    )
                    .with("label", json!(format!("msk {kb}"))),
            );
        }
    }
    tb.power_off()?;
    r.rows.extend(grid);
    // Chart and table by request size.
    r.rows.sort_by_key(|x| {
        x.extra
            .get("request_kib")
            .and_then(|v| v.as_u64())
            .unwrap_or(0)
    });
    let pinned = r
        .rows
        .iter()
        .filter_map(|x| x.extra.get("repeat_count_kept").and_then(|v| v.as_u64()))
        .all(|k| k == 1);
    r.verdict(
        "every repeat count reads back as 1 (pinned since Linux 4.6), and is reported so".into(),
        pinned,
    );
    Ok(r)
}

/// The repeat count of the first path in a round-robin table line.
fn kept_repeat(table: &str) -> Option<u64> {
    let t: Vec<&str> = table.split_whitespace().collect();
    let i = t.iter().position(|x| *x == "round-robin")?;
    // round-robin <#sel_args> <#paths> <#path_args> <dev> <repeat>
    t.get(i + 5)?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn repeat_count_from_table() {
        let t = "0 2097152 multipath 0 0 1 1 round-robin 0 2 1 8:0 1 8:16 1";
        assert_eq!(super::kept_repeat(t), Some(1));
    }
}
