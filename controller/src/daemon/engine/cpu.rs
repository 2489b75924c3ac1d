//! The engine thread's own CPU time, per kind of work, so the daemon's
//! cost at scale is visible (status `engine_secs`, metric
//! `pathpilot_engine_seconds_total{work}`).
use std::{collections::BTreeMap, time::Duration};

/// CPU time of the calling thread: its own work only, not the checker
/// threads it wakes (wall time would count them on a busy CPU).
pub(super) fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out-pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU the engine thread spent per kind of work since start.
#[derive(Debug, Default)]
pub(super) struct CpuAccount {
    spent: BTreeMap<&'static str, Duration>,
}

impl CpuAccount {
    /// Adds the thread's CPU time since `since` (a [`thread_cpu`] reading)
    /// to `what`, less what the kinds in `apart` grew by meanwhile (work
    /// of their own done within it).
    pub(super) fn add(&mut self, what: &'static str, since: Duration, apart: Duration) {
        let now = thread_cpu();
        *self.spent.entry(what).or_default() += now.saturating_sub(since).saturating_sub(apart);
    }

    /// The time spent on the kinds `what`, together.
    pub(super) fn spent_on(&self, what: &[&str]) -> Duration {
        what.iter().filter_map(|w| self.spent.get(w)).sum()
    }

    /// Seconds per kind of work, by name.
    pub(super) fn secs(&self) -> Vec<(String, f64)> {
        self.spent
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_secs_f64()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_is_accounted_by_kind_less_what_is_accounted_apart() {
        let mut a = CpuAccount::default();
        // Since the thread began: some time, all of it this kind's.
        a.add("window", Duration::ZERO, Duration::ZERO);
        let all = a.spent_on(&["window"]);
        assert!(all > Duration::ZERO);
        // Work all accounted apart adds nothing.
        a.add("knobs", thread_cpu(), Duration::from_secs(3600));
        assert_eq!(a.spent_on(&["knobs"]), Duration::ZERO);
        assert_eq!(a.spent_on(&["window", "knobs", "nothing"]), all);
        let names: Vec<String> = a.secs().into_iter().map(|(k, _)| k).collect();
        assert_eq!(names, ["knobs", "window"]);
    }
}
