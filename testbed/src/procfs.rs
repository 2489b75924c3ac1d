//! A guest process's figures from /proc (threads, memory, CPU), read in
//! one command so that they describe one moment: for the tests and the
//! benchmarks that hold the daemon to its budget.
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::machine::Testbed;

/// A process's figures at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcFigures {
    /// Threads, without the short-lived `suspend-guard` one a reload runs
    /// beside the engine (joined when the reload ends).
    pub threads: u64,
    pub rss_kib: u64,
    /// The peak resident set (VmHWM).
    pub hwm_kib: u64,
    /// User and system time, in ticks of 10 ms (USER_HZ is 100).
    pub ticks: u64,
}

impl ProcFigures {
    /// Parses the output of [`ProcFigures::command`].
    fn parse(out: &str) -> Result<Self> {
        let v: Vec<u64> = out
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        let [threads, hwm_kib, rss_kib, user, system] = v[..] else {
            bail!("/proc figures: {out}");
        };
        // /proc/PID/status lists VmHWM before VmRSS.
        Ok(ProcFigures {
            threads,
            rss_kib,
            hwm_kib,
            ticks: user + system,
        })
    }

    /// The guest command; `pid` may be a shell expression. The CPU fields
    /// are counted after the `)` that ends the command name, which may
    /// hold spaces.
    fn command(pid: &str) -> String {
        format!(
            "p={pid}; cat /proc/$p/task/*/comm | grep -vc '^suspend-guard$'; \
             grep -E '^(VmHWM|VmRSS):' /proc/$p/status | tr -s ' ' | cut -d' ' -f2; \
             cut -d')' -f2 /proc/$p/stat | cut -d' ' -f13,14"
        )
    }
}

impl Testbed {
    /// The figures of guest process `pid` (a number or a shell expression
    /// such as `$(cat /tmp/daemon.pid)`).
    pub fn proc_figures(&self, pid: &str) -> Result<ProcFigures> {
        ProcFigures::parse(&self.sh(&ProcFigures::command(pid))?)
    }

    /// The CPU `pid` used over `secs`, in percent of one core, and its
    /// figures at the end.
    pub fn cpu_over(&self, pid: &str, secs: u64) -> Result<(f64, ProcFigures)> {
        let a = self.proc_figures(pid)?.ticks;
        let t = Instant::now();
        std::thread::sleep(Duration::from_secs(secs));
        let f = self.proc_figures(pid)?;
        // A tick is 10 ms: ticks per second are percent of a core.
        Ok((
            f.ticks.saturating_sub(a) as f64 / t.elapsed().as_secs_f64(),
            f,
        ))
    }

    /// Whether `script` succeeded within `timeout`, tried every `every`.
    pub fn until_success(&self, script: &str, timeout: Duration, every: Duration) -> Result<bool> {
        let t = Instant::now();
        while t.elapsed() < timeout {
            if self.run(script)?.success() {
                return Ok(true);
            }
            std::thread::sleep(every);
        }
        Ok(false)
    }

    /// SIGTERM to guest process `pid`, and an error unless it is gone
    /// within 10 s.
    pub fn terminate(&self, pid: &str) -> Result<()> {
        self.sh(&format!(
            "kill {pid}; i=0; while [ -d /proc/{pid} ] && [ $i -lt 100 ]; do sleep 0.1; \
             i=$((i+1)); done; [ ! -d /proc/{pid} ]"
        ))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_read_in_proc_order() {
        let f = ProcFigures::parse("68\n9120\n8604\n1234 567\n").unwrap();
        assert_eq!(
            f,
            ProcFigures {
                threads: 68,
                rss_kib: 8604,
                hwm_kib: 9120,
                ticks: 1801
            }
        );
        assert!(ProcFigures::parse("68\n9120\n").is_err(), "a gone process");
    }
}
