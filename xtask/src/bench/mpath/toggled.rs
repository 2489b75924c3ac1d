//! The observer's cost measured inside one fio run: the daemon (or the
//! floor's empty programs, see [`Observer`]) started and stopped in turn
//! while fio runs on, fio's IOPS logged each second, and each window with
//! it compared with the windows without it on either side. Separate fio
//! runs drift: in the testbed guest, runs of the same configuration a
//! minute apart differ by 10-15%, and one boot's level by more than
//! another's, which swamped a loss of a few percent (16.5% +- 9.3 from
//! rotated 10 s runs, where toggling in one run measured 6-9% +- 2).
//! Windows seconds apart, in one run, share the guest's state.
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::rig::Rig;
use crate::bench::floor;

/// What is started and stopped between the windows without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observer<'a> {
    /// The daemon in observe mode, these top-level keys added to its config.
    Daemon(&'a str),
    /// Empty programs on the observer's tracepoints (`bench::floor`; its
    /// binary installed in the guest).
    Floor,
}

impl Observer<'_> {
    /// Starts it; its pid once its programs are attached.
    pub fn start(self, rig: &Rig) -> Result<String> {
        match self {
            Observer::Daemon(extra) => {
                rig.start_daemon_with("observe", extra)?;
                Ok(rig.daemon_pid()?.to_string())
            }
            Observer::Floor => floor::start_in_guest(rig.tb),
        }
    }

    /// Stops it and waits for it to go.
    pub fn stop(self, rig: &Rig, pid: &str) -> Result<()> {
        match self {
            Observer::Daemon(_) => rig.stop_daemon(),
            Observer::Floor => rig.tb.terminate(pid),
        }
    }

    fn describe(self) -> String {
        match self {
            Observer::Daemon("") => "the daemon".into(),
            Observer::Daemon(extra) => format!("the daemon ({})", extra.trim()),
            Observer::Floor => "the empty programs".into(),
        }
    }
}

/// Each window measured: long enough for four or five of fio's one-second
/// samples, short enough that its neighbours are seconds away.
pub const WINDOW: Duration = Duration::from_secs(5);
/// After the daemon answers (its probes attached) and after it has gone,
/// before a window starts: its start and its exit are not what is measured.
pub const SETTLE: Duration = Duration::from_secs(2);
/// fio's sampling period (`--log_avg_msec`).
const SAMPLE_MS: u64 = 1000;

/// What one toggled run measured.
#[derive(Debug, Default)]
pub struct Toggled {
    /// Per configuration, one pair per window with the daemon: (the mean
    /// IOPS of the windows without it on either side, its own IOPS).
    pub pairs: Vec<Vec<(f64, f64)>>,
    /// Per configuration, the daemon's CPU (% of the guest's one CPU) in
    /// each of its windows.
    pub cpu: Vec<Vec<f64>>,
}

impl Toggled {
    /// Adds another run's windows, of the first configurations (`more`
    /// measured the first `more.pairs.len()` of this run's).
    pub fn extend_first(&mut self, more: Toggled) {
        for (a, b) in self.pairs.iter_mut().zip(more.pairs) {
            a.extend(b);
        }
        for (a, b) in self.cpu.iter_mut().zip(more.cpu) {
            a.extend(b);
        }
    }
}

/// One fio run of `fio` on the map, with each of `configs` started in turn
/// (`rounds` times each, the order rotated from round to round) between
/// windows without any.
pub fn run(rig: &Rig, fio: &str, configs: &[Observer], rounds: usize) -> Result<Toggled> {
    let log = "/tmp/toggled";
    let job = rig.tb.spawn(&format!(
        "rm -f {log}_iops.*.log; awk '{{print int($1*1000)}}' /proc/uptime > {log}.t0\n\
         fio --name=t --filename=/dev/{dm} --direct=1 --ioengine=libaio --time_based \
         --runtime=86400 --randrepeat=0 {fio} --write_iops_log={log} --log_avg_msec={SAMPLE_MS} \
         --output=/dev/null & echo $! > {log}.pid; wait\ncat {log}.t0 {log}_iops.1.log",
        dm = rig.dm
    ))?;
    let measured = windows(rig, configs, rounds);
    rig.tb
        .sh(&format!("kill -INT $(cat {log}.pid) 2>/dev/null; true"))?;
    let out = rig.tb.wait_job(&job, Duration::from_secs(120))?;
    let (marks, cpu) = measured?;
    if !out.success() {
        bail!("fio failed: {}{}", out.stdout_str(), out.stderr_str());
    }
    let text = out.stdout_str();
    let (t0, rest) = text.split_once('\n').context("fio's log: no start time")?;
    let t0: u64 = t0.trim().parse().context("fio's start time")?;
    let samples = parse_iops_log(rest);
    let means = marks
        .iter()
        .map(|m| {
            let mean = window_mean(
                &samples,
                m.from_ms.saturating_sub(t0),
                m.to_ms.saturating_sub(t0),
            )
            .with_context(|| format!("no fio sample inside {m:?} (fio started at {t0})"))?;
            Ok((m.config, mean))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Toggled {
        pairs: pairs(&means, configs.len()),
        cpu,
    })
}

/// One window: `config` (an index into the configurations; `None` without
/// the daemon) from `from_ms` to `to_ms`, on the guest's uptime clock.
#[derive(Clone, Copy, Debug)]
struct Mark {
    config: Option<usize>,
    from_ms: u64,
    to_ms: u64,
}

/// The windows, timed on the guest's clock, and the daemon's CPU in each
/// of its own: without it, then each configuration followed by a window
/// without it.
fn windows(rig: &Rig, configs: &[Observer], rounds: usize) -> Result<(Vec<Mark>, Vec<Vec<f64>>)> {
    let uptime_ms = || -> Result<u64> {
        let t = rig.tb.sh("cat /proc/uptime")?;
        let s: f64 = t
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .context("/proc/uptime")?;
        Ok((s * 1000.0) as u64)
    };
    // Every window, with the daemon or without it, is timed by this one
    // piece: the same settle, the same length. With `pid`, the daemon's
    // CPU in it too (a tick is 10 ms: ticks per second are percent of a
    // core).
    let window = |config: Option<usize>, pid: Option<&str>| -> Result<(Mark, f64)> {
        let ticks = |pid: &str| rig.tb.proc_figures(pid).map(|f| f.ticks);
        std::thread::sleep(SETTLE);
        let t0 = pid.map(ticks).transpose()?;
        let from_ms = uptime_ms()?;
        std::thread::sleep(WINDOW);
        let to_ms = uptime_ms()?;
        let t1 = pid.map(ticks).transpose()?;
        let secs = (to_ms.saturating_sub(from_ms) as f64 / 1e3).max(1e-3);
        let cpu = t0
            .zip(t1)
            .map_or(0.0, |(a, b)| b.saturating_sub(a) as f64 / secs);
        Ok((
            Mark {
                config,
                from_ms,
                to_ms,
            },
            cpu,
        ))
    };
    // fio's own start: ramped like any point, then settled like any window.
    std::thread::sleep(Duration::from_secs(rig.o.ramp.into()));
    let mut marks = vec![window(None, None)?.0];
    let mut cpu = vec![vec![]; configs.len()];
    let mut order: Vec<usize> = (0..configs.len()).collect();
    for _ in 0..rounds {
        for &c in &order {
            let pid = configs[c].start(rig)?;
            let (mark, used) = window(Some(c), Some(&pid))?;
            configs[c].stop(rig, &pid)?;
            cpu[c].push(used);
            marks.push(mark);
            marks.push(window(None, None)?.0);
            eprintln!(
                "bench: toggled: window {} of {} with {} done",
                marks.len() / 2,
                rounds * configs.len(),
                configs[c].describe()
            );
        }
        order.rotate_left(1);
    }
    Ok((marks, cpu))
}

/// fio's IOPS log as written with `--log_avg_msec`: (end of the period in
/// ms since the job started, IOPS over it) per line; other fields ignored.
fn parse_iops_log(text: &str) -> Vec<(u64, f64)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(',').map(str::trim);
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect()
}

/// The mean IOPS of the samples wholly inside `from..=to` (ms on fio's
/// clock).
fn window_mean(samples: &[(u64, f64)], from: u64, to: u64) -> Option<f64> {
    let inside: Vec<f64> = samples
        .iter()
        .filter(|(end, _)| end.saturating_sub(SAMPLE_MS) >= from && *end <= to)
        .map(|(_, v)| *v)
        .collect();
    (!inside.is_empty()).then(|| inside.iter().sum::<f64>() / inside.len() as f64)
}

/// Each window with the daemon beside the mean of the windows without it
/// just before and just after it, grouped by configuration.
fn pairs(means: &[(Option<usize>, f64)], configs: usize) -> Vec<Vec<(f64, f64)>> {
    let mut out = vec![vec![]; configs];
    for (i, (config, with)) in means.iter().enumerate() {
        let Some(c) = config else { continue };
        let around: Vec<f64> = [i.checked_sub(1), Some(i + 1)]
            .into_iter()
            .flatten()
            .filter_map(|j| means.get(j))
            .filter(|(cfg, _)| cfg.is_none())
            .map(|(_, v)| *v)
            .collect();
        if !around.is_empty() {
            out[*c].push((around.iter().sum::<f64>() / around.len() as f64, *with));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fios_log_is_read_with_or_without_its_later_fields() {
        let log = "1000, 3456, 0, 0, 0\n2001, 3502, 0, 0, 0, 0\n\nbad line\n3000, 3399\n";
        assert_eq!(
            parse_iops_log(log),
            vec![(1000, 3456.0), (2001, 3502.0), (3000, 3399.0)]
        );
    }

    #[test]
    fn a_window_takes_only_the_seconds_wholly_inside_it() {
        let s: Vec<(u64, f64)> = (1..=10).map(|i| (i * 1000, i as f64)).collect();
        // 2500..6200 holds the seconds ending at 4000, 5000 and 6000.
        assert_eq!(window_mean(&s, 2500, 6200), Some(5.0));
        assert_eq!(window_mean(&s, 2000, 3000), Some(3.0));
        assert_eq!(window_mean(&s, 2500, 3400), None);
    }

    #[test]
    fn each_window_with_the_daemon_is_paired_with_its_neighbours() {
        let m = [
            (None, 100.0),
            (Some(0), 90.0),
            (None, 120.0),
            (Some(1), 99.0),
            (None, 100.0),
            (Some(1), 50.0),
        ];
        let p = pairs(&m, 2);
        assert_eq!(p[0], vec![(110.0, 90.0)]);
        // The last has a neighbour on one side only.
        assert_eq!(p[1], vec![(110.0, 99.0), (100.0, 50.0)]);
    }
}
