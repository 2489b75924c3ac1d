//! The stall of a table reload (docs/architecture.md): how long a reader's
//! I/O is held while a map is suspended and resumed, for pathpilot's ioctl
//! path and for `dmsetup` doing what multipathd does with the same table
//! (a load, then one resume with noflush: the kernel suspends inside the
//! resume, so no process starts while I/O is held), at idle, QD4 and QD16,
//! in one VM run.
//!
//! The stall is measured as the reader sees it: fio logs every completion
//! with its latency (wall-clock timestamps), each reload is bracketed by
//! guest timestamps, and a reload's stall is the worst latency of the I/Os
//! in flight during it. "idle" has a QD1 4 KiB probe reader so there is a
//! reader to ask; the loaded levels read 64 KiB at QD4 and QD16.
use std::time::Duration;

use anyhow::{Context, Result, bail};
use pathpilot_testbed::{Config, Testbed};
use serde_json::json;

use super::save;

#[derive(clap::Args)]
pub struct Args {
    /// Reloads per method and load level.
    #[arg(long, default_value_t = 20)]
    reloads: u32,
    /// Per-path bandwidth cap in MiB/s (the testbed's throttle).
    #[arg(long, default_value_t = 20.0)]
    cap: f64,
    /// Number of paths.
    #[arg(long, default_value_t = 4)]
    paths: usize,
}

struct Level {
    name: &'static str,
    bs: &'static str,
    qd: u32,
}

const LEVELS: [Level; 3] = [
    Level {
        name: "idle",
        bs: "4k",
        qd: 1,
    },
    Level {
        name: "qd4",
        bs: "64k",
        qd: 4,
    },
    Level {
        name: "qd16",
        bs: "64k",
        qd: 16,
    },
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    Pathpilot,
    Dmsetup,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Pathpilot => "pathpilot",
            Method::Dmsetup => "dmsetup load+resume",
        }
    }

    /// One reload of the live table, printing the ioctl-level stall (µs)
    /// where the method reports one.
    fn command(self) -> &'static str {
        match self {
            Method::Pathpilot => {
                "pathpilot reload mpatha --force --json | tr -d ' \\n' | sed -n 's/.*\"stall\":\\([0-9]*\\).*/\\1/p'"
            }
            Method::Dmsetup => {
                "dmsetup load mpatha --table \"$T\" && dmsetup resume --noflush mpatha && echo -"
            }
        }
    }
}

fn script(level: &Level, method: Method, reloads: u32) -> String {
    format!(
        r#"set -e
# busybox date has no %N; adjtimex has the wall clock in microseconds.
now() {{ busybox adjtimex | awk '/tv_sec/ {{ s = $2 }} /tv_usec/ {{ u = $2 }} END {{ printf "%d%06d", s, u }}'; }}
T=$(dmsetup table mpatha)
rm -f /tmp/b_lat.log
fio --name=b --filename=/dev/mapper/mpatha --rw=randread --bs={bs} --direct=1 \
  --ioengine=libaio --iodepth={qd} --time_based --runtime=600 --randrepeat=0 \
  --write_lat_log=/tmp/b --log_avg_msec=0 --log_unix_epoch=1 --per_job_logs=0 \
  >/dev/null 2>&1 &
F=$!
sleep 1.5
i=0
while [ $i -lt {reloads} ]; do
  t0=$(now)
  s=$({cmd})
  t1=$(now)
  echo "R $t0 $t1 $s"
  sleep 0.4
  i=$((i+1))
done
sleep 0.5
kill -INT $F
wait $F || true
awk '{{ printf "L %s %s\n", $1, $2 }}' /tmp/b_lat.log | tr -d ,
"#,
        bs = level.bs,
        qd = level.qd,
        cmd = method.command(),
    )
}

/// One reload as the reader saw it.
struct Sample {
    /// Worst completion latency of I/O overlapping the reload (ms).
    reader_ms: f64,
    /// The suspend-to-resume time pathpilot measured (ms), if reported.
    ioctl_ms: Option<f64>,
}

/// Parses the guest's `R t0_us t1_us [stall_us]` and `L epoch_ms lat_ns`
/// lines; also returns the latencies of I/O that overlapped no reload (the
/// reader's baseline).
fn analyse(out: &str) -> Result<(Vec<Sample>, Vec<f64>)> {
    let mut reloads = Vec::new();
    let mut lats: Vec<(f64, f64)> = Vec::new();
    for l in out.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            ["R", t0, t1, rest @ ..] => {
                // Wall clock in µs, as fio's epoch timestamps are in ms.
                let t0: f64 = t0.parse::<f64>().context("t0")? / 1e3;
                let t1: f64 = t1.parse::<f64>().context("t1")? / 1e3;
                let us = rest.first().and_then(|s| s.parse::<f64>().ok());
                reloads.push((t0, t1, us.map(|u| u / 1000.0)));
            }
            ["L", t, lat] => {
                // Completion time in epoch ms; latency in ns (fio >= 3.x).
                lats.push((t.parse()?, lat.parse::<f64>()? / 1e6));
            }
            _ => {}
        }
    }
    if lats.is_empty() {
        bail!("fio logged no latencies:\n{out}");
    }
    let overlaps = |t: f64, lat: f64, t0: f64, t1: f64| t >= t0 && t - lat <= t1;
    let baseline: Vec<f64> = lats
        .iter()
        .filter(|(t, lat)| {
            !reloads
                .iter()
                .any(|(t0, t1, _)| overlaps(*t, *lat, *t0, *t1))
        })
        .map(|(_, lat)| *lat)
        .collect();
    let samples = reloads
        .into_iter()
        .map(|(t0, t1, ioctl_ms)| {
            // In flight during [t0, t1]: completed after t0, started before t1.
            let worst = lats
                .iter()
                .filter(|(t, lat)| overlaps(*t, *lat, t0, t1))
                .map(|(_, lat)| *lat)
                .fold(0.0, f64::max);
            Sample {
                reader_ms: worst,
                ioctl_ms,
            }
        })
        .collect();
    Ok((samples, baseline))
}

/// Nearest-rank percentile.
fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * s.len() as f64).ceil().max(1.0) as usize;
    s[rank.min(s.len()) - 1]
}

pub fn run(args: Args) -> Result<()> {
    let cfg = Config {
        paths: Some(args.paths),
        caps_mib: vec![args.cap],
        cmd_timeout: Duration::from_secs(600),
        ..Config::default()
    };
    let tb = Testbed::boot(cfg)?;
    tb.sh("pathpilot create --all --selector service-time >/dev/null")?;
    let kernel = tb.sh("uname -r")?.trim().to_string();
    let mut rows = Vec::new();
    println!(
        "reload stall, {} paths x {} MiB/s, {} reloads each (ms; reader = worst I/O latency across the reload)",
        args.paths, args.cap, args.reloads
    );
    println!(
        "{:<6} {:<10} {:>11} {:>11} {:>11} {:>11} {:>13}",
        "load", "method", "reader p50", "reader p99", "ioctl p50", "ioctl p99", "no-reload p99"
    );
    for level in &LEVELS {
        // Alternate which method goes first per level so drift is shared.
        let order = if level.qd == 4 {
            [Method::Dmsetup, Method::Pathpilot]
        } else {
            [Method::Pathpilot, Method::Dmsetup]
        };
        for method in order {
            let out = tb.sh(&script(level, method, args.reloads))?;
            let (samples, baseline) = analyse(&out)?;
            let reader: Vec<f64> = samples.iter().map(|s| s.reader_ms).collect();
            let ioctl: Vec<f64> = samples.iter().filter_map(|s| s.ioctl_ms).collect();
            let f = |v: f64| {
                if v.is_nan() {
                    "-".to_string()
                } else {
                    format!("{v:.1}")
                }
            };
            println!(
                "{:<6} {:<10} {:>11} {:>11} {:>11} {:>11} {:>13}",
                level.name,
                method.name(),
                f(pct(&reader, 50.0)),
                f(pct(&reader, 99.0)),
                f(pct(&ioctl, 50.0)),
                f(pct(&ioctl, 99.0)),
                f(pct(&baseline, 99.0))
            );
            rows.push(json!({
                "load": level.name,
                "bs": level.bs,
                "iodepth": level.qd,
                "method": method.name(),
                "reloads": samples.len(),
                "no_reload_latency_ms": {"p50": pct(&baseline, 50.0), "p99": pct(&baseline, 99.0), "max": pct(&baseline, 100.0), "ios": baseline.len()},
                "reader_ms": {"p50": pct(&reader, 50.0), "p99": pct(&reader, 99.0), "max": pct(&reader, 100.0), "all": reader},
                "ioctl_stall_ms": if ioctl.is_empty() { serde_json::Value::Null } else {
                    json!({"p50": pct(&ioctl, 50.0), "p99": pct(&ioctl, 99.0), "all": ioctl})
                },
            }));
        }
    }
    tb.power_off()?;
    let path = save(
        "reload",
        &json!({
            "kernel": kernel,
            "paths": args.paths,
            "cap_mib": args.cap,
            "selector": "service-time",
            "rows": rows,
        }),
    )?;
    println!("wrote {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stall_is_the_worst_overlapping_latency() {
        // Reload from t=1000.0 to 1010.0 ms; I/O at 1015 with 20 ms latency
        // started at 995: it overlaps. One at 2000 does not.
        let out = "R 1000000 1010000 9000\nL 1015 20000000\nL 2000 90000000\nL 999 5000000\n";
        let (s, base) = analyse(out).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(base.len(), 2);
        assert!((s[0].reader_ms - 20.0).abs() < 1e-9);
        assert_eq!(s[0].ioctl_ms, Some(9.0));
        assert_eq!(pct(&[1.0, 2.0, 3.0, 4.0], 50.0), 2.0);
        assert_eq!(pct(&[1.0, 2.0, 3.0, 4.0], 99.0), 4.0);
    }
}
