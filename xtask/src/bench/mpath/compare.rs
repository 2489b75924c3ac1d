//! The standard comparison of one boot: every static configuration and
//! the daemon, round by round, as rows.
use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Result;
use pathpilot_testbed::figures::median;
use serde_json::{Value, json};

use super::beside::{self, Beside};
use super::report::{Point, Row};
use super::rig::{Rig, Settled, show_settings};
use super::statics::Static;

/// A workload of a scenario case.
#[derive(Clone, Debug)]
pub struct Workload {
    /// The case it belongs to in the table ("2 paths QD1").
    pub case: String,
    pub fio: String,
}

/// A daemon configuration of a comparison: its row and the setting the
/// map starts from (`None`: the map's defaults), or multipathd's map with
/// the daemon beside it or not.
pub struct Tuned {
    pub name: &'static str,
    pub start: Option<Static>,
    pub beside: Option<Beside>,
}

impl Tuned {
    /// The daemon from the map's defaults.
    pub fn defaults() -> Vec<Tuned> {
        vec![Tuned {
            name: "pathpilot",
            start: None,
            beside: None,
        }]
    }

    /// The daemon from `start`.
    pub fn from(name: &'static str, start: Static) -> Tuned {
        Tuned {
            name,
            start: Some(start),
            beside: None,
        }
    }

    /// multipathd's map alone, with the daemon beside it, and with its
    /// advice applied.
    pub fn beside_multipathd() -> Vec<Tuned> {
        Beside::ALL
            .iter()
            .map(|b| Tuned {
                name: b.row(),
                start: None,
                beside: Some(*b),
            })
            .collect()
    }
}

/// The standard comparison of one boot: static configurations, a grid and
/// the daemon in every round, in an order reversed each round (the daemon
/// last, then first); each daemon run tunes from its start until settled
/// and is measured once, as each static is once per round after its
/// reload; medians over the rounds; the oracle is the best static median.
/// Returns the rows, in case order.
pub fn compare(
    rig: &Rig,
    workloads: &[Workload],
    statics: &[Static],
    tuned: &[Tuned],
) -> Result<Vec<Row>> {
    let o = rig.o;
    // Warm-up: queues, NBD connections, page cache of the LUN's host file.
    rig.reset()?;
    rig.measure_secs(&rig.dm, &workloads[0].fio, 2)?;
    let mut samples: BTreeMap<(usize, usize), Vec<Point>> = BTreeMap::new();
    let mut runs: Vec<Vec<Vec<Ours>>> = tuned.iter().map(|_| vec![]).collect();
    let run_tuned = |runs: &mut Vec<Vec<Vec<Ours>>>| -> Result<()> {
        for (ti, t) in tuned.iter().enumerate() {
            eprintln!("bench: {} (round {})", t.name, runs[ti].len() + 1);
            let run = match t.beside {
                Some(how) => beside_and_measure(rig, workloads, how)?,
                None => tune_and_measure_from(rig, workloads, t.start.as_ref(), 1)?,
            };
            runs[ti].push(run);
        }
        Ok(())
    };
    for round in 0..o.reps {
        let forward = round % 2 == 0;
        if !forward {
            run_tuned(&mut runs)?;
        }
        let order: Vec<usize> = if forward {
            (0..statics.len()).collect()
        } else {
            (0..statics.len()).rev().collect()
        };
        for si in order {
            let s = &statics[si];
            rig.apply(s)?;
            for (wi, w) in workloads.iter().enumerate() {
                let p = rig.measure(&rig.dev_of(s), &w.fio)?;
                eprintln!(
                    "bench: {} / {} [{}]: {:.1} MiB/s, {:.1} KiB, {:.0}% merged",
                    w.case,
                    s.name,
                    s.describe(),
                    p.mib_s,
                    p.avg_request_kib,
                    p.merge_pct
                );
                samples.entry((si, wi)).or_default().push(p);
            }
        }
        if forward {
            run_tuned(&mut runs)?;
        }
    }
    let mut rows = vec![];
    for (wi, w) in workloads.iter().enumerate() {
        let mut best: Option<(usize, Point)> = None;
        let mut grid_rows = vec![];
        for (si, s) in statics.iter().enumerate() {
            let p = Point::median_of(&samples[&(si, wi)]);
            if best.as_ref().is_none_or(|(_, b)| p.mib_s > b.mib_s) {
                best = Some((si, p.clone()));
            }
            let named = Static::standard(0).iter().any(|x| x.name == s.name);
            let row = Row::new(&w.case, if named { &s.name } else { "grid" }, p)
                .with("setting", json!(rig.describe(s)));
            if named {
                rows.push(row);
            } else {
                grid_rows.push(row.with("label", json!(s.name)));
            }
        }
        if let Some((si, p)) = best {
            rows.push(
                Row::new(&w.case, "oracle", p)
                    .with("setting", json!(rig.describe(&statics[si])))
                    .with("label", json!("oracle")),
            );
        }
        for (ti, t) in tuned.iter().enumerate() {
            let rounds: Vec<Ours> = runs[ti].iter().map(|r| r[wi].clone()).collect();
            let o = across_rounds(&rounds);
            rows.push(match t.beside {
                Some(Beside::Alone) => Row::new(&w.case, t.name, Point::median_of(&o.pts))
                    .with("setting", json!(o.settings))
                    .with("beside", json!(true)),
                Some(_) => ours_row(&w.case, t.name, &o).with("beside", json!(true)),
                None => ours_row(&w.case, t.name, &o),
            });
        }
        rows.extend(grid_rows);
    }
    Ok(rows)
}

/// A daemon configuration's runs of one workload as one: every point,
/// the median settle times (settled only if every run was), the settings
/// each run ended on, and the decisions of each run.
fn across_rounds(rounds: &[Ours]) -> Ours {
    let pts = rounds.iter().flat_map(|r| r.pts.clone()).collect();
    let mut settles: Vec<f64> = rounds.iter().map(|r| r.settled.settle_s).collect();
    // A run that kept nothing kept it at 0 s.
    let mut kept: Vec<f64> = rounds
        .iter()
        .map(|r| r.settled.kept_s.unwrap_or(0.0))
        .collect();
    let mut settings: Vec<String> = vec![];
    for r in rounds {
        if !settings.contains(&r.settings) {
            settings.push(r.settings.clone());
        }
    }
    let log = if rounds.len() == 1 {
        rounds[0].log.clone()
    } else {
        rounds
            .iter()
            .enumerate()
            .flat_map(|(i, r)| r.log.iter().map(move |l| format!("[round {}] {l}", i + 1)))
            .collect()
    };
    Ours {
        pts,
        settled: Settled {
            settle_s: median(&mut settles),
            kept_s: rounds
                .iter()
                .any(|r| r.settled.kept_s.is_some())
                .then(|| median(&mut kept)),
            settled: rounds.iter().all(|r| r.settled.settled),
        },
        settings: settings.join(" | "),
        log,
    }
}

/// A daemon run of one workload: its points, how it settled, the settings
/// it ended on and its decisions.
#[derive(Clone, Debug)]
struct Ours {
    pts: Vec<Point>,
    settled: Settled,
    settings: String,
    log: Vec<String>,
}

/// The row of a daemon run: median, settle times, settings, decisions.
fn ours_row(case: &str, config: &str, o: &Ours) -> Row {
    let r1 = |x: f64| json!((x * 10.0).round() / 10.0);
    Row::new(case, config, Point::median_of(&o.pts))
        .with("settle_s", r1(o.settled.settle_s))
        .with("kept_s", o.settled.kept_s.map_or(Value::Null, r1))
        .with("settled", json!(o.settled.settled))
        .with("setting", json!(o.settings))
        .with("decisions", json!(o.log))
}

/// The daemon from `start` (the map's defaults when `None`): for each
/// workload, run it until the tuner settles, then measure it `measures`
/// times with the daemon running.
fn tune_and_measure_from(
    rig: &Rig,
    workloads: &[Workload],
    start: Option<&Static>,
    measures: usize,
) -> Result<Vec<Ours>> {
    rig.start_tuning_from(start)?;
    let mut out = vec![];
    let mut seen = 0;
    for w in workloads {
        let since = Instant::now();
        let job = rig.start_load(&w.fio)?;
        let (settled, n) = rig.wait_settled(since, seen)?;
        rig.stop_load(&job)?;
        let log = rig.decisions(seen)?;
        seen = n;
        let settings = show_settings(&rig.settings()?);
        eprintln!(
            "bench: {} / pathpilot: {} in {:.0} s, last kept change at {} ({settings})\n  {}",
            w.case,
            if settled.settled {
                "settled"
            } else {
                "NOT settled"
            },
            settled.settle_s,
            settled
                .kept_s
                .map_or("-".to_string(), |k| format!("{k:.0} s")),
            log.join("\n  ")
        );
        let mut pts = vec![];
        for _ in 0..measures {
            let p = rig.measure(&rig.dm, &w.fio)?;
            eprintln!("bench: {} / pathpilot: {:.1} MiB/s", w.case, p.mib_s);
            pts.push(p);
        }
        out.push(Ours {
            pts,
            settled,
            settings,
            log,
        });
    }
    rig.stop_daemon()?;
    Ok(out)
}

/// multipathd's map (the daemon beside it as `how` says): for each
/// workload, the daemon's run until it settles (and, with `beside.apply`,
/// until multipathd has loaded the table it advised), then one
/// measurement.
fn beside_and_measure(rig: &Rig, workloads: &[Workload], how: Beside) -> Result<Vec<Ours>> {
    rig.with_multipathd(how, |first| beside_runs(rig, workloads, how, first))
}

fn beside_runs(rig: &Rig, workloads: &[Workload], how: Beside, first: &str) -> Result<Vec<Ours>> {
    let mut out = vec![];
    let mut seen = 0;
    for w in workloads {
        let mut settled = Settled {
            settle_s: 0.0,
            kept_s: None,
            settled: true,
        };
        let mut log = vec![];
        if how != Beside::Alone {
            let since = Instant::now();
            let job = rig.start_load(&w.fio)?;
            let (mut s, mut n) = rig.wait_settled(since, seen)?;
            let mut applied = None;
            if how == Beside::Apply {
                loop {
                    let t = rig.table_params()?;
                    if t != first {
                        applied = Some((since.elapsed().as_secs_f64(), t));
                        break;
                    }
                    if since.elapsed() >= rig.o.max_settle {
                        break;
                    }
                    (s, n) = rig.wait_settled(since, n)?;
                }
            }
            rig.stop_load(&job)?;
            log = rig.decisions(seen)?;
            log.push(match applied {
                Some((t, table)) => format!("{t:.0}s multipathd's table after the advice: {table}"),
                None if how == Beside::Apply => "multipathd's table unchanged".to_string(),
                None => "multipathd's table kept".to_string(),
            });
            seen = n;
            settled = s;
        }
        let settings = beside::describe(rig, how)?;
        eprintln!(
            "bench: {} / {}: {settings}\n  {}",
            w.case,
            how.row(),
            log.join("\n  ")
        );
        let p = rig.measure(&rig.dm, &w.fio)?;
        eprintln!("bench: {} / {}: {:.1} MiB/s", w.case, how.row(), p.mib_s);
        out.push(Ours {
            pts: vec![p],
            settled,
            settings,
            log,
        });
    }
    Ok(out)
}
