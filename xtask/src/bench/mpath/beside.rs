//! multipathd in the bench: the map handed to multipathd (its default
//! configuration, as on a host that runs multipath-tools), alone or with
//! the daemon beside it, and back to pathpilot's map; and the `handover`
//! scenario, the stalls of a takeover and a handback against multipathd's
//! own reconfigure and reload.
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use pathpilot_testbed::figures::median;
use pathpilot_testbed::{Link, Testbed};
use serde_json::json;

use super::measure::parse_fio_json;
use super::opts::Opts;
use super::report::{Point, Report, Row};
use super::rig::{Rig, show_settings, start_guest_daemon};
use super::scenarios::boot;

/// multipath.conf of a host that runs multipath-tools as installed, with
/// friendly names (so that its map is `mpatha`, as pathpilot's is) and
/// every multipath device claimed.
const MULTIPATHD_CONF: &str = "defaults {\n    user_friendly_names yes\n    find_multipaths no\n}";

/// The file `beside.apply` writes under multipath-tools' conf.d, and the
/// daemon's state file that remembers what it applied.
const CONF_D_FILE: &str = "/etc/multipath/conf.d/pathpilot.conf";
const STATE_FILE: &str = "/run/pathpilot/maps.json";

/// How a row with multipathd runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Beside {
    /// multipathd owns the map, nothing else runs.
    Alone,
    /// The daemon in tune mode beside it: queue knobs, table advice only.
    Tune,
    /// ... with `beside.apply`: its table advice through multipathd.
    Apply,
}

impl Beside {
    pub const ALL: [Beside; 3] = [Beside::Alone, Beside::Tune, Beside::Apply];

    pub fn row(self) -> &'static str {
        match self {
            Beside::Alone => "multipathd alone",
            Beside::Tune => "pathpilot beside mpd",
            Beside::Apply => "pathpilot beside+apply",
        }
    }
}

impl Rig<'_> {
    /// Runs `f` on multipathd's own map of the LUN, with the daemon beside
    /// it as `how` says; `f` gets multipathd's first table (its
    /// parameters). pathpilot's map is made again after, whatever `f`
    /// returned. The daemon must not be running.
    pub fn with_multipathd<T>(&self, how: Beside, f: impl FnOnce(&str) -> Result<T>) -> Result<T> {
        self.hand_to_multipathd()?;
        let run = (|| -> Result<T> {
            let first = self.table_params()?;
            if how != Beside::Alone {
                self.start_daemon_beside(how == Beside::Apply)?;
            }
            let out = f(&first)?;
            if how != Beside::Alone {
                self.stop_daemon()?;
            }
            Ok(out)
        })();
        let back = self.back_from_multipathd();
        let out = run?;
        back?;
        Ok(out)
    }

    /// Removes pathpilot's map and lets multipathd make its own of the
    /// LUN.
    fn hand_to_multipathd(&self) -> Result<()> {
        self.tb.sh("dmsetup remove mpatha")?;
        self.tb
            .start_multipathd(MULTIPATHD_CONF, &[], "mpatha", self.disks.len())
            .context("multipathd's map of the LUN")?;
        self.same_device("multipathd's map")
    }

    /// Stops multipathd (its map stays), removes its map and what
    /// `beside.apply` wrote, and makes pathpilot's map again.
    fn back_from_multipathd(&self) -> Result<()> {
        self.tb.stop_multipathd()?;
        self.tb.sh(&format!("rm -f {CONF_D_FILE} {STATE_FILE}"))?;
        self.tb.flush_multipath_tools()?;
        self.tb
            .sh("pathpilot create --all --selector service-time >/dev/null")?;
        self.same_device("pathpilot's map again")
    }

    /// The map's block device is the one every row is measured on.
    fn same_device(&self, what: &str) -> Result<()> {
        let minor = self.tb.sh("dmsetup info -c --noheadings -o minor mpatha")?;
        let dm = format!("dm-{}", minor.trim());
        ensure!(dm == self.dm, "{what} is {dm}, not {}", self.dm);
        Ok(())
    }

    /// Starts the daemon beside multipathd (`apply`: with `beside.apply`).
    fn start_daemon_beside(&self, apply: bool) -> Result<()> {
        let tail = if apply {
            "[beside]\napply = true\n"
        } else {
            ""
        };
        self.start_daemon_tail("tune", tail)
    }

    /// The map's table parameters (after `multipath`).
    pub fn table_params(&self) -> Result<String> {
        let t = self.tb.sh("dmsetup table mpatha")?;
        Ok(t.split_once(" multipath ")
            .map_or(t.trim(), |(_, p)| p.trim())
            .to_string())
    }
}

/// The setting column of a row with multipathd: its table, and what the
/// daemon beside it holds.
pub fn describe(rig: &Rig, how: Beside) -> Result<String> {
    let table = rig.table_params()?;
    Ok(match how {
        Beside::Alone => format!("multipathd's table: {table}"),
        _ => format!(
            "multipathd's table: {table}; {}",
            show_settings(&rig.settings()?)
        ),
    })
}

/// Shell that waits (up to 20 s) until multipathd holds `mpatha`.
macro_rules! until_multipathd_holds_mpatha {
    () => {
        "i=0 && until multipathd show maps raw format '%n' 2>/dev/null | grep -qx mpatha; do \
         i=$((i+1)); [ $i -lt 200 ] || exit 1; sleep 0.1; done"
    };
}

/// One handover case: what runs 5 s into the reader's point.
struct Case {
    name: &'static str,
    /// Shell run in the guest; its time is the event's.
    cmd: &'static str,
}

const CASES: [Case; 6] = [
    Case {
        name: "no event",
        cmd: "true",
    },
    Case {
        name: "multipathd reconfigure",
        cmd: "multipathd reconfigure >/dev/null",
    },
    Case {
        name: "multipathd reload map",
        cmd: "multipathd reload map mpatha >/dev/null",
    },
    Case {
        name: "multipathd restart",
        // Its own stop and start, done when it holds the map again: the
        // start a handback cannot do without.
        cmd: concat!(
            "multipathd shutdown >/dev/null; i=0; while pidof multipathd >/dev/null; do \
             i=$((i+1)); [ $i -lt 200 ] || exit 1; sleep 0.05; done; \
             multipathd </dev/null >/dev/null 2>&1 && ",
            until_multipathd_holds_mpatha!()
        ),
    },
    Case {
        name: "pathpilot takeover",
        cmd: "pathpilot takeover mpatha >/dev/null",
    },
    Case {
        name: "pathpilot handback",
        // Done when multipathd holds the map again.
        cmd: concat!(
            "pathpilot handback mpatha >/dev/null && ",
            until_multipathd_holds_mpatha!()
        ),
    },
];

/// What one point of the handover scenario measured.
#[derive(Clone, Debug)]
struct Stall {
    mib_s: f64,
    iops: f64,
    p99_ms: f64,
    p999_ms: f64,
    max_ms: f64,
    errors: u64,
    /// The event's own time (the command, and for a handback until
    /// multipathd holds the map).
    event_ms: f64,
    /// The rise of the map's event counter during the point (the
    /// multipath target raises it when a path fails or returns, or its
    /// path group switches).
    reloads: u64,
}

/// The reader of the handover scenario: small random reads, so that a
/// stall of a few milliseconds stands out of the completion latencies.
const READER: &str = "--rw=randread --bs=4k --iodepth=4";
const POINT_S: u32 = 20;
const EVENT_AT_S: u32 = 5;

/// One point: the reader on the map for [`POINT_S`] s, the case's command
/// [`EVENT_AT_S`] s in.
fn stall_point(tb: &Testbed, case: &Case) -> Result<Stall> {
    let script = format!(
        "ev() {{ dmsetup info -c --noheadings -o events mpatha; }}\n\
         e0=$(ev)\n\
         fio --name=h --filename=/dev/mapper/mpatha --direct=1 --ioengine=libaio --time_based \
         --runtime={POINT_S} --randrepeat=0 --percentile_list=99:99.9 {READER} \
         --output-format=json --output=/tmp/h.json >/tmp/h.err 2>&1 &\n\
         f=$!\n\
         sleep {EVENT_AT_S}\n\
         t0=$(cut -d' ' -f1 /proc/uptime)\n\
         ( {cmd} ) >/tmp/h.cmd 2>&1; rc=$?\n\
         t1=$(cut -d' ' -f1 /proc/uptime)\n\
         wait $f; frc=$?\n\
         echo \"EVENT $rc $(awk \"BEGIN {{ print ($t1 - $t0) * 1000 }}\") $(( $(ev) - e0 ))\"\n\
         [ $rc = 0 ] || {{ echo CMD; cat /tmp/h.cmd; }}\n\
         [ $frc = 0 ] || {{ echo FIO; cat /tmp/h.err; }}\n\
         cat /tmp/h.json",
        cmd = case.cmd
    );
    let out = match tb.run_timeout(&script, Duration::from_secs(u64::from(POINT_S) + 120)) {
        Ok(o) => o,
        Err(e) => {
            let seen = tb
                .run_timeout(
                    "cat /tmp/h.cmd; dmsetup info mpatha; dmsetup status mpatha; ps; \
                     tail -20 /tmp/daemon.log",
                    Duration::from_secs(30),
                )
                .map_or_else(|e| format!("(no answer: {e:#})"), |o| o.stdout_str());
            bail!("{}: {e:#}\nthe guest then:\n{seen}", case.name);
        }
    };
    let text = out.stdout_str();
    let ev = text
        .lines()
        .find_map(|l| l.strip_prefix("EVENT "))
        .with_context(|| {
            format!(
                "{}: no event line (exit {}): {text}\n{}",
                case.name,
                out.code,
                out.stderr_str()
            )
        })?;
    let f: Vec<&str> = ev.split_whitespace().collect();
    if f.first() != Some(&"0") {
        bail!("{}: the command failed: {text}", case.name);
    }
    // /proc/uptime's resolution: 10 ms.
    let event_ms = f
        .get(1)
        .and_then(|x| x.parse::<f64>().ok())
        .unwrap_or(f64::NAN);
    let reloads = f.get(2).and_then(|x| x.parse().ok()).unwrap_or(0);
    let f = parse_fio_json(&text[text.find('{').context("no fio JSON")?..])?;
    Ok(Stall {
        mib_s: f.mib_s,
        iops: f.iops,
        p99_ms: f.p99_ms,
        p999_ms: f.p999_ms,
        max_ms: f.max_ms,
        errors: f.errors,
        event_ms,
        reloads,
    })
}

/// The daemon's config in the handover scenario: tune mode (a takeover
/// needs it), its first baseline longer than the scenario, so that the
/// handovers are all that touches the map.
const HANDOVER_DAEMON: &str = r#"mode = "tune"
window_secs = 10
metrics = "off"
[maps]
create = false
[tuner]
windows = 100
"#;

/// The stalls of the handover: the daemon beside multipathd takes the
/// map over and hands it back under a reader, against multipathd's own
/// `reconfigure` and `reload map` of it, and a point with no event;
/// interleaved rounds, medians.
pub fn handover(o: &Opts) -> Result<Report> {
    let caps = [20.0; 4];
    let tb = boot(4, &caps, Link::Throttle).boot()?;
    let table = tb.start_multipathd(MULTIPATHD_CONF, &[], "mpatha", 4)?;
    eprintln!("bench: multipathd's map: {}", table.trim());
    start_guest_daemon(&tb, HANDOVER_DAEMON)?;
    let mut samples: Vec<Vec<Stall>> = CASES.iter().map(|_| vec![]).collect();
    // Warm-up: the LUN's host file in the page cache, the queues.
    stall_point(&tb, &CASES[0])?;
    let t = Instant::now();
    for round in 0..o.reps {
        // Takeover before handback in every round; the four with
        // multipathd owning the map reversed each round.
        let mut order: Vec<usize> = vec![0, 1, 2, 3];
        if round % 2 == 1 {
            order.reverse();
        }
        order.extend([4, 5]);
        for ci in order {
            let s = stall_point(&tb, &CASES[ci])?;
            eprintln!(
                "bench: handover round {} / {}: {:.1} MiB/s, p99 {:.1} ms, p99.9 {:.1} ms, \
                 max {:.1} ms, {} error(s), the event {:.0} ms, {} map event(s)",
                round + 1,
                CASES[ci].name,
                s.mib_s,
                s.p99_ms,
                s.p999_ms,
                s.max_ms,
                s.errors,
                s.event_ms,
                s.reloads
            );
            samples[ci].push(s);
        }
    }
    eprintln!(
        "bench: handover rounds in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    tb.power_off()?;
    let mut r = Report::new("handover", Link::Throttle, caps.iter().sum());
    r.notes.push(format!(
        "4 KiB random reads at QD4 on multipathd's map (its default failover table, 4 paths of \
         20 MiB/s) for {POINT_S} s a point, the case's command {EVENT_AT_S} s in; the daemon \
         runs beside multipathd throughout (its tuner's first baseline longer than the run); \
         medians of {} interleaved round(s)",
        o.reps
    ));
    let mut med: Vec<(f64, f64, u64)> = vec![];
    for (ci, c) in CASES.iter().enumerate() {
        let v = &samples[ci];
        let m = |g: &dyn Fn(&Stall) -> f64| {
            let mut x: Vec<f64> = v.iter().map(g).filter(|x| x.is_finite()).collect();
            median(&mut x)
        };
        let worst = v.iter().map(|s| s.max_ms).fold(0.0, f64::max);
        let errors: u64 = v.iter().map(|s| s.errors).sum();
        let reloads: Vec<u64> = v.iter().map(|s| s.reloads).collect();
        let (max, event) = (m(&|s| s.max_ms), m(&|s| s.event_ms));
        med.push((max, worst, errors));
        let p = Point::fio_only(m(&|s| s.mib_s), m(&|s| s.iops), m(&|s| s.p99_ms));
        let r1 = |x: f64| json!((x * 10.0).round() / 10.0);
        r.rows.push(
            Row::new("4k randread qd4", c.name, p)
                .with(
                    "setting",
                    json!(format!(
                        "p99.9 {:.1} ms, max {max:.1} ms (worst {worst:.1}), the event {event:.0} ms, \
                         map events {reloads:?}, {errors} error(s)",
                        m(&|s| s.p999_ms)
                    )),
                )
                .with("lat_p999_ms", r1(m(&|s| s.p999_ms)))
                .with("lat_max_ms", r1(max))
                .with("lat_max_worst_ms", r1(worst))
                .with("event_ms", r1(event))
                .with("map_events", json!(reloads))
                .with("errors", json!(errors)),
        );
    }
    // The bound of each, with 15% for the guest's noise: a takeover only
    // stops multipathd, so one reload of the map by multipathd; a handback
    // starts multipathd, so multipathd's own restart.
    let (reload_max, _, _) = med[2];
    let (restart_max, _, _) = med[3];
    for (ci, bound_name, bound) in [
        (4, CASES[2].name, reload_max),
        (5, CASES[3].name, restart_max),
    ] {
        let (max, _, errors) = med[ci];
        r.verdict(
            format!(
                "{}: 0 errors and the longest read <= {bound_name}'s + 15%: {errors} error(s), \
                 {max:.1} ms vs {bound:.1} ms",
                CASES[ci].name
            ),
            errors == 0 && max <= bound * 1.15,
        );
    }
    Ok(r)
}
