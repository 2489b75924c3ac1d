//! Time-sampled observation (config `observe_duty` below 1): the programs
//! that run on every request attached for a share of each window only.
//! When they switch ([`Sampling`]), the switching itself, and the clocks
//! that time a device's silence from the kernel's own counts while they
//! are detached.
use std::{
    collections::HashMap as StdHashMap,
    time::{Duration, Instant},
};

use aya::programs::BtfTracePoint;
use pathpilot_common::{DevShared, PER_REQUEST};

use super::{ObserveError, Observer, monotonic_ns, silence};
use crate::blockdev::{self, DevNum};

/// The programs sampling attaches and detaches: those on every request or
/// bio. The others (merges, splits) run only when a merge or a split
/// happens; they stay attached and count in full, as each switch of a
/// program patches its tracepoint in the kernel's text.
fn sampled(tracepoint: &str) -> bool {
    PER_REQUEST.contains(&tracepoint)
}

/// The schedule of the switches while sampling: the probes attached across
/// every other window's end, for the last `duty` of the window that ends
/// there and the first `duty` of the next. Each window is observed for its
/// share, as when each had its own stretch at its end, with half the
/// switches: attaching and detaching the programs is the part of observing
/// that grows with the number of windows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sampling {
    /// The window under way began with the probes attached (every other
    /// one does).
    opens_attached: bool,
}

impl Sampling {
    /// Where the probes switch in the window that ends at `next_window`:
    /// detached from there in a window that opens attached, attached from
    /// there in one that does not.
    pub fn switch_at(&self, next_window: Instant, window: Duration, duty: f64) -> Instant {
        let share = window.mul_f64(duty);
        if self.opens_attached {
            next_window - window + share
        } else {
            next_window - share
        }
    }

    /// Whether the probes are due attached at `now`.
    pub fn due(&self, now: Instant, next_window: Instant, window: Duration, duty: f64) -> bool {
        let at = self.switch_at(next_window, window, duty);
        if self.opens_attached {
            now < at
        } else {
            now >= at
        }
    }

    /// When the probes, `attached` or not now, next switch within the
    /// window under way; None when they stay as they are until its end.
    pub fn next_switch(
        &self,
        attached: bool,
        next_window: Instant,
        window: Duration,
        duty: f64,
    ) -> Option<Instant> {
        (attached == self.opens_attached).then(|| self.switch_at(next_window, window, duty))
    }

    /// A window closed: the next one begins as this one ended.
    pub fn window_closed(&mut self) {
        self.opens_attached = !self.opens_attached;
    }
}

/// The programs' attached time, as of a snapshot: cumulative, on
/// CLOCK_MONOTONIC, both read at one instant (so a pair of snapshots with
/// the programs attached throughout gives exactly 100%).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    pub at_ns: u64,
    pub attached_ns: u64,
}

impl Observed {
    /// The share of the time from `prev` to `self` that the programs were
    /// attached, in percent (100 over no time at all).
    pub fn pct_since(&self, prev: &Observed) -> f64 {
        let span = self.at_ns.saturating_sub(prev.at_ns);
        if span == 0 || prev.at_ns == 0 {
            return 100.0;
        }
        let on = self.attached_ns.saturating_sub(prev.attached_ns);
        (on as f64 / span as f64 * 1000.0).round().min(1000.0) / 10.0
    }
}

/// Time-sampled observation's clock of a stalled device, from the kernel's
/// own counts (the programs, detached part of the time, cannot time a
/// silence): when its completions last moved or it was last idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct StallClock {
    completed: u64,
    in_flight: u64,
    moved_ns: u64,
    read_ns: u64,
}

impl StallClock {
    /// The clock after a read at `now_ns` of the kernel's completed count
    /// and in-flight count. A completion somewhere since the last read is
    /// taken as at this one, and a silence runs only to the last read:
    /// it is never overstated (it is timed a snapshot at a time).
    pub(super) fn next(
        prev: Option<StallClock>,
        completed: u64,
        in_flight: u64,
        now_ns: u64,
    ) -> Self {
        let moved_ns = match prev {
            Some(p) if in_flight > 0 && p.in_flight > 0 && p.completed == completed => p.moved_ns,
            _ => now_ns,
        };
        StallClock {
            completed,
            in_flight,
            moved_ns,
            read_ns: now_ns,
        }
    }

    pub(super) fn silence(&self) -> Option<u64> {
        (self.in_flight > 0).then(|| self.read_ns.saturating_sub(self.moved_ns))
    }
}

impl Observer {
    /// Follows what the daemon wants: sampled, the programs attached or
    /// not (`Some`), or observed in full (`None`).
    pub fn set_sampling(&mut self, attached: Option<bool>) -> Result<(), ObserveError> {
        match attached {
            Some(on) => self.sample(on),
            None if self.sampling() => self.observe_fully(),
            None => Ok(()),
        }
    }

    /// Time-sampled observation: the programs attached (`attached`) or
    /// detached, the caller alternating the two. A program that is not
    /// attached costs an I/O nothing, not even the tracepoint's call into
    /// it, which in an emulated guest is most of the observer's cost.
    /// While sampling, what the kernel counts itself stays exact (I/Os and
    /// bytes by direction, from its `stat`, read for every watched device
    /// at each snapshot; in flight; busy time), as do merges and splits
    /// (their programs stay attached: see [`sampled`]), and a device's
    /// silence is timed from the kernel's counts, a snapshot at a time;
    /// latency, sizes, sequentiality, bios, errors, requeues and remaps are
    /// those of the attached part (`Snapshot::observed`).
    pub fn sample(&mut self, attached: bool) -> Result<(), ObserveError> {
        if self.sampling.is_none() {
            self.sampling = Some(self.clocks_from_probes());
        }
        self.attach(attached)
    }

    /// The stall clocks sampling starts with: each device's silence as
    /// the probes, attached until now, timed it, on the kernel's counts
    /// read now. A stall under way goes on being timed from its start:
    /// the daemon starts sampling when its tuner stops measuring, which a
    /// stall itself does (it pauses the tuner).
    pub(super) fn clocks_from_probes(&mut self) -> StdHashMap<u32, StallClock> {
        let now = monotonic_ns();
        let watched = self.watched();
        let kernel = self.kernel_stats(&watched);
        watched
            .into_iter()
            .filter_map(|dev| {
                let s = kernel.get(&dev).copied().flatten()?;
                let slot = self.slot_of(dev.kernel())?;
                let quiet = self.shared_view.get(slot).and_then(|sh| silence(&sh, now));
                let mut c = StallClock::next(None, s.counts.ios.iter().sum(), s.in_flight, now);
                c.moved_ns = now.saturating_sub(quiet.unwrap_or(0));
                Some((dev.kernel(), c))
            })
            .collect()
    }

    /// Ends time-sampled observation: the programs attached for good.
    pub fn observe_fully(&mut self) -> Result<(), ObserveError> {
        self.attach(true)?;
        self.sampling = None;
        Ok(())
    }

    /// Whether observation is time-sampled ([`Self::sample`]).
    pub fn sampling(&self) -> bool {
        self.sampling.is_some()
    }

    /// Whether the programs are attached now.
    pub fn attached(&self) -> bool {
        self.attached_at.is_some()
    }

    pub(super) fn attach(&mut self, on: bool) -> Result<(), ObserveError> {
        if on == self.attached() {
            return Ok(());
        }
        let now = monotonic_ns();
        if on {
            // Requests issued while detached complete once attached: each
            // device's count in flight starts again from the kernel's, and
            // its clocks from its stall clock's, read now (from now if it
            // completed something in the gap: no silence is read into it;
            // a stall under way goes on from its start).
            let watched = self.watched();
            let kernel = self.kernel_stats(&watched);
            for dev in watched {
                let Some(slot) = self.slot_of(dev.kernel()) else {
                    continue;
                };
                let stat = kernel.get(&dev).copied().flatten();
                let n = stat.map_or(0, |s| s.in_flight);
                // A second reading of the stall clocks each window.
                if let Some(s) = &stat {
                    self.stall_clock(dev, s, now);
                }
                let since = self
                    .sampling
                    .as_ref()
                    .and_then(|c| c.get(&dev.kernel()))
                    .filter(|c| c.in_flight > 0)
                    .map_or(now, |c| c.moved_ns);
                for (field, v) in [
                    (std::mem::offset_of!(DevShared, inflight), n),
                    (std::mem::offset_of!(DevShared, busy_since_ns), since),
                    (std::mem::offset_of!(DevShared, last_complete_ns), since),
                ] {
                    self.shared_view.store_u64(slot, field, v);
                }
            }
        }
        for (tp, link) in self.links.iter_mut().filter(|(tp, _)| sampled(tp)) {
            let prog: &mut BtfTracePoint = self
                .ebpf
                .program_mut(tp)
                .ok_or_else(|| ObserveError::Load(format!("program {tp} missing")))?
                .try_into()
                .map_err(|e| ObserveError::Load(format!("{tp}: {e}")))?;
            match link.take() {
                Some(l) if !on => prog.detach(l).map_err(|e| {
                    ObserveError::Attach(tp.to_string(), format!("detaching: {e:#}"))
                })?,
                None if on => {
                    *link = Some(
                        prog.attach()
                            .map_err(|e| ObserveError::Attach(tp.to_string(), format!("{e:#}")))?,
                    )
                }
                l => *link = l,
            }
        }
        if on {
            self.attached_at = Some(now);
        } else if let Some(since) = self.attached_at.take() {
            self.attached_ns += now.saturating_sub(since);
        }
        Ok(())
    }

    /// While sampling, moves a device's stall clock on with a reading of
    /// its kernel figures taken at `now_ns`.
    pub(super) fn stall_clock(&mut self, dev: DevNum, s: &blockdev::Stat, now_ns: u64) {
        if let Some(clocks) = self.sampling.as_mut() {
            let k = dev.kernel();
            let completed = s.counts.ios.iter().sum();
            let c = StallClock::next(clocks.get(&k).copied(), completed, s.in_flight, now_ns);
            clocks.insert(k, c);
        }
    }

    pub(super) fn observed(&self, now_ns: u64) -> Observed {
        Observed {
            at_ns: now_ns,
            attached_ns: self.attached_ns
                + self.attached_at.map_or(0, |a| now_ns.saturating_sub(a)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_probes_are_attached_across_every_other_window_end() {
        let t0 = Instant::now();
        let w = Duration::from_secs(4);
        let end = t0 + w;
        let at = |ms, opens| {
            Sampling {
                opens_attached: opens,
            }
            .due(t0 + Duration::from_millis(ms), end, w, 0.25)
        };
        // A window that ends attached.
        assert!(!at(0, false), "it begins detached");
        assert!(!at(2_999, false));
        assert!(at(3_000, false), "its last quarter attached");
        assert!(at(3_999, false));
        assert!(at(4_500, false), "overdue, it keeps them attached");
        // The next, which begins attached.
        assert!(at(0, true), "its first quarter attached");
        assert!(at(999, true));
        assert!(!at(1_000, true), "detached after its share");
        assert!(
            !at(3_999, true),
            "detached at its end: one switch each way per two"
        );
        assert!(!at(4_500, true), "overdue, still detached");
        // Each window is observed for its share either way.
        let on = |opens| (0..4_000).step_by(10).filter(|ms| at(*ms, opens)).count();
        assert_eq!((on(false), on(true)), (100, 100));
        let full = |opens| {
            Sampling {
                opens_attached: opens,
            }
            .due(t0, end, w, 1.0)
        };
        assert!(full(false) && full(true));
    }

    #[test]
    fn the_next_switch_is_where_the_schedule_changes_the_probes() {
        let t0 = Instant::now();
        let w = Duration::from_secs(4);
        let end = t0 + w;
        let mut s = Sampling::default();
        // Detached in a window that ends attached: attached at its last quarter.
        assert_eq!(
            s.next_switch(false, end, w, 0.25),
            Some(t0 + Duration::from_secs(3))
        );
        assert_eq!(s.next_switch(true, end, w, 0.25), None);
        s.window_closed();
        // Attached in one that began so: detached after its first quarter.
        assert_eq!(
            s.next_switch(true, end, w, 0.25),
            Some(t0 + Duration::from_secs(1))
        );
        assert_eq!(s.next_switch(false, end, w, 0.25), None);
        // The switch is where `due` changes.
        for opens in [false, true] {
            let s = Sampling {
                opens_attached: opens,
            };
            let at = s.switch_at(end, w, 0.25);
            assert_ne!(
                s.due(at - Duration::from_nanos(1), end, w, 0.25),
                s.due(at, end, w, 0.25)
            );
        }
    }

    #[test]
    fn a_stall_is_timed_from_the_last_read_that_saw_the_kernel_complete_or_idle() {
        let s = |c: Option<StallClock>, done, inflight, at| StallClock::next(c, done, inflight, at);
        let c = s(None, 100, 4, 1_000);
        assert_eq!(c.silence(), Some(0), "a first read starts the clock");
        let c = s(Some(c), 100, 4, 2_000);
        assert_eq!(c.silence(), Some(1_000), "nothing completed since 1000");
        let c = s(Some(c), 100, 4, 3_000);
        assert_eq!(c.silence(), Some(2_000));
        let c = s(Some(c), 101, 4, 4_000);
        assert_eq!(c.silence(), Some(0), "a completion restarts it");
        let c = s(Some(c), 101, 0, 5_000);
        assert_eq!(c.silence(), None, "idle is not silent");
        let c = s(Some(c), 101, 2, 7_000);
        assert_eq!(c.silence(), Some(0), "busy again: from this read");
        let c = s(Some(c), 101, 2, 8_000);
        assert_eq!(c.silence(), Some(1_000));
    }

    #[test]
    fn the_observed_share_is_the_attached_time_over_the_span() {
        let a = Observed {
            at_ns: 10_000,
            attached_ns: 10_000,
        };
        let b = Observed {
            at_ns: 20_000,
            attached_ns: 12_500,
        };
        assert_eq!(b.pct_since(&a), 25.0);
        assert_eq!(a.pct_since(&a), 100.0);
        assert_eq!(b.pct_since(&Observed::default()), 100.0);
    }
}
