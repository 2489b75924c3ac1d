//! `openloop`: an application that offers a rate. Poisson arrivals of
//! 64 KiB random reads at a share of the paths' caps, with depth enough
//! that any setting able to carry the rate does: throughput cannot tell
//! such settings apart, their latency can.
use anyhow::Result;
use pathpilot_testbed::Link;
use serde_json::json;

use super::compare::{Tuned, Workload, compare};
use super::opts::Opts;
use super::report::{Report, Row};
use super::rig::Rig;
use super::scenarios::{FROM_RR, boot};
use super::statics::Static;

/// The offered rates, in percent of the sum of the caps.
const RATES_PCT: [u32; 3] = [20, 50, 80];
const BS_KIB: f64 = 64.0;

/// The case name of a rate.
fn case(pct: u32, mib_s: f64) -> String {
    format!("{pct}% ({mib_s:.0} MiB/s)")
}

/// Paths 10/20/40/80 MiB/s; every static setting and the daemon (from
/// the defaults and from round-robin) at each rate.
pub fn run(o: &Opts) -> Result<Report> {
    let caps = [10.0, 20.0, 40.0, 80.0];
    let sum: f64 = caps.iter().sum();
    let tb = boot(4, &caps, Link::Throttle).boot()?;
    let rig = Rig::new(&tb, o)?;
    let mut statics = Static::standard(3);
    // historical-service-time (Linux 5.8+) where the guest's kernel has
    // its module.
    let hst = tb
        .run("grep -q '^dm_historical_service_time ' /proc/modules")?
        .success();
    if hst {
        statics.push(Static::sel(
            "historical-service-time",
            "historical-service-time",
        ));
    }
    statics.push(Static::grid("st 13:25:50:100").weights(&[13, 25, 50, 100]));
    let w: Vec<Workload> = RATES_PCT
        .iter()
        .map(|&pct| {
            let mib = sum * f64::from(pct) / 100.0;
            let iops = (mib * 1024.0 / BS_KIB).round();
            Workload {
                case: case(pct, mib),
                fio: format!(
                    "--rw=randread --bs={}k --iodepth=64 --rate_iops={iops} --rate_process=poisson",
                    BS_KIB as u32
                ),
            }
        })
        .collect();
    let mut tuned = Tuned::defaults();
    tuned.push(Tuned::from(
        FROM_RR,
        Static::sel("round-robin", "round-robin"),
    ));
    let mut r = Report::new("openloop", Link::Throttle, sum);
    r.notes.push(
        "64 KiB random reads, Poisson arrivals (fio rate_iops, rate_process=poisson) at a share \
         of the sum of the caps, up to 64 in flight; the setting column starts with fio's p50 and \
         p99.9 completion latency"
            .into(),
    );
    if !hst {
        r.notes.push(
            "no historical-service-time row: the guest's kernel has no \
             dm-historical-service-time module"
                .into(),
        );
    }
    r.rows = compare(&rig, &w, &statics, &tuned)?;
    tb.power_off()?;
    for row in &mut r.rows {
        let lat = format!(
            "p50 {} ms, p99.9 {} ms; ",
            ms(row.p.lat_p50_ms),
            ms(row.p.lat_p999_ms)
        );
        let setting = row
            .extra
            .get("setting")
            .and_then(|s| s.as_str())
            .unwrap_or("");
        let setting = format!("{lat}{setting}");
        row.extra.insert("setting".into(), json!(setting));
    }
    for &pct in &RATES_PCT {
        let offered = sum * f64::from(pct) / 100.0;
        let c = case(pct, offered);
        verdicts(&mut r, &c, offered);
    }
    Ok(r)
}

fn ms(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{x:.1}"))
}

/// At one rate: each daemon row carries the rate (within 1%) with a p99
/// within 1.1x of the best static setting of the map that carries it (a
/// raw path, without the map, is shown but is no setting of it).
fn verdicts(r: &mut Report, case: &str, offered: f64) {
    let carries = |x: &Row| x.p.mib_s >= offered * 0.99;
    let best = r
        .rows
        .iter()
        .filter(|x| x.case == case && !x.config.starts_with("pathpilot") && carries(x))
        .filter(|x| !["oracle", "single-path"].contains(&x.config.as_str()))
        .min_by(|a, b| a.p.lat_p99_ms.total_cmp(&b.p.lat_p99_ms))
        .map(|x| {
            let label = x
                .extra
                .get("label")
                .and_then(|l| l.as_str())
                .unwrap_or(&x.config)
                .to_string();
            (label, x.p.lat_p99_ms)
        });
    let ours: Vec<(String, f64, f64)> = r
        .rows
        .iter()
        .filter(|x| x.case == case && x.config.starts_with("pathpilot"))
        .map(|x| (x.config.clone(), x.p.mib_s, x.p.lat_p99_ms))
        .collect();
    for (name, mib, p99) in ours {
        r.verdict(
            format!("{case} / {name}: carries the rate: {mib:.1} of {offered:.1} MiB/s"),
            mib >= offered * 0.99,
        );
        match &best {
            Some((label, b)) => r.verdict(
                format!(
                    "{case} / {name}: p99 <= 1.1x the best static's ({label}): {p99:.1} vs {b:.1} ms, {:.2}x",
                    p99 / b
                ),
                p99 <= b * 1.1,
            ),
            None => r.inconclusive(format!(
                "{case} / {name}: no static setting carried the rate to compare p99 with"
            )),
        }
    }
}
