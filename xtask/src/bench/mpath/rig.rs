//! The testbed with one map of every path, `mpatha`: setting a static
//! configuration on it, and the daemon in the guest (start, status,
//! settling, stop) with a load running.
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use pathpilot_testbed::{Job, Testbed, WWN};
use serde_json::Value;

use super::opts::Opts;
use super::statics::Static;

/// The WWID multipath-tools gives the testbed's LUN.
pub fn wwid() -> String {
    format!("3{:x}", WWN)
}

/// The map's defaults, read right after it is made.
#[derive(Clone, Debug)]
pub struct Defaults {
    pub max_sectors_kb: u32,
    pub nr_requests: u32,
    pub scheduler: String,
    pub queue_depth: u32,
}

/// The testbed with one map `mpatha` of every path.
pub struct Rig<'a> {
    pub tb: &'a Testbed,
    pub o: &'a Opts,
    /// Disk names in path order (by SCSI host).
    pub disks: Vec<String>,
    pub dm: String,
    pub def: Defaults,
    daemon_cfg: String,
    /// The table multipath-tools built for the LUN (params after
    /// `multipath`), with no multipath.conf.
    pub multipath_tools: String,
}

impl<'a> Rig<'a> {
    /// Makes `mpatha` (service-time, one group of every path) and reads the
    /// defaults.
    pub fn new(tb: &'a Testbed, o: &'a Opts) -> Result<Rig<'a>> {
        // First, the map multipath-tools makes of the LUN on its own (its
        // baseline row loads that table as it is); then pathpilot's.
        tb.multipath_tools("sda")
            .context("multipath-tools' own map of the LUN")?;
        let mt = tb.sh(&format!("dmsetup table {}", wwid()))?;
        let multipath_tools = mt
            .split_once(" multipath ")
            .map(|(_, p)| p.trim().to_string())
            .with_context(|| format!("multipath-tools made no multipath map: {mt}"))?;
        tb.flush_multipath_tools()?;
        eprintln!("bench: multipath-tools' own map: {multipath_tools}");
        tb.sh("pathpilot create --all --selector service-time >/dev/null")?;
        let dm = tb
            .sh("dmsetup info -c --noheadings -o minor mpatha")?
            .trim()
            .to_string();
        let dm = format!("dm-{dm}");
        let disks: Vec<String> = tb.path_disks()?.into_iter().map(|(_, n)| n).collect();
        let q = tb.sh(&format!(
            "cd /sys/block/{dm}/queue && cat max_sectors_kb nr_requests scheduler && cat /sys/block/{}/device/queue_depth",
            disks[0]
        ))?;
        let l: Vec<&str> = q.lines().collect();
        if l.len() < 4 {
            bail!("unexpected queue defaults: {q}");
        }
        let scheduler = l[2]
            .split_whitespace()
            .find(|s| s.starts_with('['))
            .map(|s| s.trim_matches(|c| c == '[' || c == ']').to_string())
            .unwrap_or_else(|| "none".into());
        let def = Defaults {
            max_sectors_kb: l[0].trim().parse()?,
            nr_requests: l[1].trim().parse()?,
            scheduler,
            queue_depth: l[3].trim().parse()?,
        };
        let (window, windows) = (o.window_s, o.windows);
        let daemon_cfg = format!(
            r#"mode = "tune"
window_secs = {window}
metrics = "off"
[maps]
create = false
adopt = ["{}"]
[checker]
interval_secs = 2
timeout_secs = 5
[tuner]
windows = {windows}
settle_windows = 1
reload_min_interval_secs = 2
flap_hold_secs = 6
"#,
            wwid()
        );
        let rig = Rig {
            tb,
            o,
            disks,
            dm,
            def,
            daemon_cfg,
            multipath_tools,
        };
        eprintln!(
            "bench: map mpatha = {} over {} ({:?})",
            rig.dm,
            rig.disks.join(" "),
            rig.def
        );
        Ok(rig)
    }

    /// What a configuration sets, for the table: multipath-tools' row
    /// shows the table it built.
    pub fn describe(&self, s: &Static) -> String {
        if s.multipath_tools {
            format!("its table: {}", self.multipath_tools)
        } else {
            s.describe()
        }
    }

    pub fn window_s(&self) -> f64 {
        f64::from(self.o.window_s)
    }

    /// Sets every honoured knob to `s` (the rest to the defaults); returns
    /// the table the kernel holds.
    pub fn apply(&self, s: &Static) -> Result<String> {
        if s.multipath_tools {
            // As multipathd reloads: a load, then one noflush resume; the
            // queue knobs at the map's defaults.
            let d = &self.def;
            let size = self.tb.sh("dmsetup table mpatha | cut -d' ' -f2")?;
            let script = format!(
                "export DM_DISABLE_UDEV=1\n\
                 dmsetup load mpatha --table '0 {} multipath {}' && dmsetup resume --noflush mpatha\n\
                 pathpilot set mpatha max_sectors_kb={} nr_requests={} scheduler={} queue_depth={} >/dev/null\n\
                 dmsetup table mpatha",
                size.trim(),
                self.multipath_tools,
                d.max_sectors_kb,
                d.nr_requests,
                d.scheduler,
                d.queue_depth
            );
            return Ok(self.tb.sh(&script)?.trim().to_string());
        }
        let cmd = self.reload_cmd(s);
        let d = &self.def;
        let script = format!(
            "{cmd} >/tmp/reload.out 2>&1 || {{ cat /tmp/reload.out; exit 1; }}\n\
             pathpilot set mpatha max_sectors_kb={} nr_requests={} scheduler={} queue_depth={} >/dev/null\n\
             dmsetup table mpatha",
            s.max_sectors_kb.unwrap_or(d.max_sectors_kb),
            s.nr_requests.unwrap_or(d.nr_requests),
            d.scheduler,
            s.queue_depth.unwrap_or(d.queue_depth),
        );
        Ok(self.tb.sh(&script)?.trim().to_string())
    }

    /// The `pathpilot reload` that sets `s`'s table knobs (selector, path
    /// groups, weights, repeat count).
    pub fn reload_cmd(&self, s: &Static) -> String {
        let n = self.disks.len();
        let active: Vec<usize> = if s.active.is_empty() {
            (0..n).collect()
        } else {
            s.active.clone()
        };
        let rest: Vec<usize> = (0..n).filter(|i| !active.contains(i)).collect();
        let names = |v: &[usize]| {
            v.iter()
                .map(|i| self.disks[*i].clone())
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut groups = names(&active);
        if !rest.is_empty() {
            groups = format!("{groups};{}", names(&rest));
        }
        let mut cmd = format!(
            "pathpilot reload mpatha --selector {} --groups '{groups}'",
            s.selector
        );
        // Weights always, for service-time: a reload keeps the path
        // arguments of an unchanged selector, so a previous point's weights
        // would stay.
        if s.selector == "service-time" {
            let w: Vec<String> = (0..n)
                .map(|i| {
                    format!(
                        "{}={}",
                        self.disks[i],
                        s.weights.get(i).copied().unwrap_or(1)
                    )
                })
                .collect();
            cmd.push_str(&format!(" --weights {}", w.join(",")));
        }
        cmd.push_str(&format!(" --repeat-count {}", s.repeat.unwrap_or(1)));
        cmd
    }

    /// The default map (pathpilot's start): service-time over every path.
    pub fn reset(&self) -> Result<String> {
        self.apply(&Static::sel("default", "service-time"))
    }

    /// The device a configuration is measured on.
    pub fn dev_of(&self, s: &Static) -> String {
        match s.raw {
            Some(i) => self.disks[i].clone(),
            None => self.dm.clone(),
        }
    }

    /// The map at `start` (its defaults when `None`), then the daemon
    /// tuning it.
    pub fn start_tuning_from(&self, start: Option<&Static>) -> Result<()> {
        match start {
            Some(s) => self.apply(s).map(drop)?,
            None => self.reset().map(drop)?,
        }
        self.start_daemon("tune")
    }

    /// Starts `pathpilot daemon` with the bench config in `mode`.
    pub fn start_daemon(&self, mode: &str) -> Result<()> {
        self.start_daemon_with(mode, "")
    }

    /// [`Self::start_daemon`] with `extra` top-level keys in its config.
    pub fn start_daemon_with(&self, mode: &str, extra: &str) -> Result<()> {
        self.start_daemon_in(mode, extra, "")
    }

    /// [`Self::start_daemon`] with `tail` (tables) after its config.
    pub fn start_daemon_tail(&self, mode: &str, tail: &str) -> Result<()> {
        self.start_daemon_in(mode, "", tail)
    }

    fn start_daemon_in(&self, mode: &str, extra: &str, tail: &str) -> Result<()> {
        let cfg = self
            .daemon_cfg
            .replace("mode = \"tune\"", &format!("{extra}mode = \"{mode}\""))
            + tail;
        start_guest_daemon(self.tb, &cfg)
    }

    pub fn status(&self) -> Result<Value> {
        let out = self.tb.sh("pathpilot ctl '{\"cmd\":\"status\"}'")?;
        let v: Value = serde_json::from_str(out.trim()).context("status JSON")?;
        Ok(v["data"].clone())
    }

    pub fn daemon_pid(&self) -> Result<u64> {
        self.status()?["pid"].as_u64().context("no daemon pid")
    }

    /// SIGTERM, and wait for it to go (the maps stay as they are).
    pub fn stop_daemon(&self) -> Result<()> {
        self.tb.terminate(&self.daemon_pid()?.to_string())
    }

    /// Starts `fio_args` on the map in the background until [`Self::stop_load`].
    pub fn start_load(&self, fio_args: &str) -> Result<Job> {
        self.tb.spawn(&format!(
            "fio --name=l --filename=/dev/{} --direct=1 --ioengine=libaio --time_based --runtime=3600 \
             --randrepeat=0 {fio_args} --output=/dev/null & echo $! > /tmp/load.pid; wait",
            self.dm
        ))
    }

    pub fn stop_load(&self, job: &Job) -> Result<()> {
        self.tb.sh("kill $(cat /tmp/load.pid) 2>/dev/null; true")?;
        self.tb.wait_job(job, Duration::from_secs(60))?;
        Ok(())
    }

    /// Waits (the load running) until the tuner says it has converged, or
    /// has been quiet for a while: not trying anything and no new decision.
    /// `seen`: decisions already in the log before `since`; returns how it
    /// settled and the decisions in the log by then.
    pub fn wait_settled(&self, since: Instant, seen: usize) -> Result<(Settled, usize)> {
        let w = self.window_s();
        // A revert is followed by a recovery window and a baseline before
        // the next trial: quiet for longer than that means nothing is left.
        let quiet = Duration::from_secs_f64(w * 6.0);
        let mut n = seen;
        let mut last_change = since;
        let mut last_decision: Option<Instant> = None;
        let mut last_kept: Option<Instant> = None;
        loop {
            std::thread::sleep(Duration::from_secs_f64(w));
            let s = self.status()?;
            let log = s["decisions"].as_array().map_or(&[][..], Vec::as_slice);
            let state = s["maps"][0]["tuner"].as_str().unwrap_or("").to_string();
            if log.len() != n {
                let now = Instant::now();
                if log.iter().skip(n).any(|d| d["outcome"] == "kept") {
                    last_kept = Some(now);
                }
                n = log.len();
                last_change = now;
                last_decision = Some(now);
            }
            let from_since = |t: Option<Instant>| t.map(|t| (t - since).as_secs_f64());
            // "converged": every candidate for this workload tried (after
            // a few windows, so it is this workload's verdict, not the last).
            let converged = state == "converged" && since.elapsed().as_secs_f64() >= 3.0 * w;
            let settled = converged || (state != "trying" && last_change.elapsed() >= quiet);
            if settled || since.elapsed() >= self.o.max_settle {
                let how = Settled {
                    settle_s: if settled {
                        from_since(last_decision).unwrap_or(0.0)
                    } else {
                        since.elapsed().as_secs_f64()
                    },
                    kept_s: from_since(last_kept),
                    settled,
                };
                return Ok((how, n));
            }
        }
    }

    /// The decision log as short lines (for the JSON and the report).
    pub fn decisions(&self, from: usize) -> Result<Vec<String>> {
        let s = self.status()?;
        Ok(s["decisions"]
            .as_array()
            .map(|a| {
                a.iter()
                    .skip(from)
                    .map(|d| {
                        format!(
                            "{:.0}s {} {} {} -> {} [{}] {} -> {} MiB/s: {}",
                            d["t"].as_f64().unwrap_or(0.0),
                            d["class"].as_str().unwrap_or("-"),
                            d["knob"].as_str().unwrap_or("tuner"),
                            d["old"].as_str().unwrap_or(""),
                            d["new"].as_str().unwrap_or(""),
                            d["outcome"].as_str().unwrap_or(""),
                            d["before_mib_s"],
                            d["after_mib_s"],
                            d["reason"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The tuned settings, as the daemon reports them.
    pub fn settings(&self) -> Result<Value> {
        Ok(self.status()?["maps"][0]["settings"].clone())
    }
}

/// Starts `pathpilot daemon` in the guest with `cfg` as its config file;
/// returns once it answers on its socket.
pub fn start_guest_daemon(tb: &Testbed, cfg: &str) -> Result<()> {
    tb.sh(&format!(
        "mkdir -p /etc/pathpilot && cat > /etc/pathpilot/bench.toml <<'EOF'\n{cfg}EOF\n\
         (pathpilot daemon --config /etc/pathpilot/bench.toml > /tmp/daemon.log 2>&1 &)"
    ))?;
    if tb.until_success(
        "pathpilot ctl '{\"cmd\":\"status\"}' >/dev/null 2>&1",
        Duration::from_secs(30),
        Duration::from_millis(300),
    )? {
        return Ok(());
    }
    bail!(
        "the daemon did not come up:\n{}",
        tb.sh("cat /tmp/daemon.log")?
    )
}

/// Short text of the daemon's settings.
pub fn show_settings(s: &Value) -> String {
    let mut v = vec![s["selector"].as_str().unwrap_or("?").to_string()];
    if let Some(w) = s["weights"].as_array().filter(|w| !w.is_empty()) {
        v.push(format!(
            "w {}",
            w.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(":")
        ));
    }
    for (k, name) in [
        ("active_paths", "active"),
        ("max_sectors_kb", "max_sectors_kb"),
        ("nr_requests", "nr_requests"),
        ("queue_depth", "qd"),
    ] {
        v.push(format!("{name} {}", s[k]));
    }
    v.join(", ")
}

/// How a daemon run came to rest (see [`Rig::wait_settled`]).
#[derive(Clone, Copy, Debug)]
pub struct Settled {
    /// Seconds to its last decision (kept or reverted), or the whole wait
    /// when it did not settle.
    pub settle_s: f64,
    /// Seconds to its last kept change; `None`: nothing kept.
    pub kept_s: Option<f64>,
    pub settled: bool,
}
