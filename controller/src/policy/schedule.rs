//! When the daemon looks at what it cannot be told about cheaply. Reading
//! every disk in sysfs each check interval and every map's knobs each
//! window grows with the paths into most of the daemon's CPU; the kernel's
//! uevents say when a disk came or went and when a map's table was
//! swapped, so the full looks happen on those events, with a slow periodic
//! look in case an event was lost (or for what sends none: a knob written
//! in sysfs).
use std::time::{Duration, Instant};

use crate::discovery::uevent::Drained;

/// What a discovery pass reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    /// Every disk in sysfs: new paths, new LUNs, the whole ALUA view.
    Full,
    /// The known paths only: still there, and their ALUA states.
    Light,
}

/// The discovery passes: one each check interval, a full one after a disk
/// event (and at the next two intervals, since a disk's attributes may
/// settle a moment after its event), at least every [`Self::FULL_EVERY`],
/// and every time when no uevents can be had.
#[derive(Debug)]
pub struct ScanSchedule {
    monitored: bool,
    next: Instant,
    full_owed: u8,
    next_full: Instant,
}

impl ScanSchedule {
    /// A full scan at least this often even with uevents, in case one was
    /// lost without the socket saying so.
    pub const FULL_EVERY: Duration = Duration::from_secs(60);
    /// Full scans owed after a disk event.
    const AFTER_EVENT: u8 = 3;

    /// `monitored`: uevents arrive (a full scan on events only).
    pub fn new(now: Instant, interval: Duration, monitored: bool) -> Self {
        ScanSchedule {
            monitored,
            next: now + interval,
            full_owed: 0,
            next_full: now + Self::FULL_EVERY,
        }
    }

    /// Events drained since the last call: a disk came, went or changed
    /// (or events were lost) → a full scan now, and twice more.
    pub fn on_uevents(&mut self, d: &Drained, now: Instant) {
        if d.path_events > 0 || d.lost {
            self.full_owed = Self::AFTER_EVENT;
            self.next = now;
        }
    }

    /// The pass due at `now`, if any; `interval` is the check interval in
    /// force (it may change on SIGHUP).
    pub fn due(&mut self, now: Instant, interval: Duration) -> Option<Scan> {
        if now < self.next {
            return None;
        }
        self.next = now + interval;
        let full = !self.monitored || self.full_owed > 0 || now >= self.next_full;
        if !full {
            return Some(Scan::Light);
        }
        self.full_owed = self.full_owed.saturating_sub(1);
        self.next_full = now + Self::FULL_EVERY;
        Some(Scan::Full)
    }
}

/// What a look at a map reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    /// Its live table (a dm ioctl and a parse) and its paths' knobs.
    TableAndKnobs,
    /// Its paths' knobs in sysfs; the table is the one the daemon last
    /// left, as no swap was announced.
    Knobs,
}

/// When to read something of a map that may change without the daemon
/// being told: owed on an announcement, else every [`Self::EVERY`].
/// - Its table and knobs against what the daemon last left: a table swapped
///   by anyone sends a `change` uevent on the map's dm device; a knob
///   written in sysfs sends nothing, so the slow periodic look finds those.
///   The daemon also looks before every change of its own (it must not
///   overwrite someone else's) and before each window that may end a
///   trial with its change kept (a change under the trial spoils it; a
///   window earlier in the trial decides nothing, and a revert is a change
///   of its own): at the knobs alone, unless a swap was announced or the
///   periodic look is due, since the table cannot have moved unannounced.
///   Looking every window of a trial cost 16 maps trying at once a
///   hundred sysfs reads a second.
/// - Its table and status: path states move with the map's event counter
///   (every map's read each interval by one list ioctl); a table swap or a
///   message from someone else does not move it.
#[derive(Clone, Debug)]
pub struct Look {
    /// Uevents arrive (else every window is a look).
    monitored: bool,
    owed: bool,
    next: Instant,
}

impl Look {
    /// The periodic look, for changes nothing announces.
    pub const EVERY: Duration = Duration::from_secs(5);

    /// A new map is looked at first thing. `monitored`: uevents arrive.
    pub fn new(now: Instant, monitored: bool) -> Self {
        Look {
            monitored,
            owed: true,
            next: now,
        }
    }

    /// The map's device changed (its table was swapped), or events were
    /// lost.
    pub fn changed(&mut self) {
        self.owed = true;
    }

    /// What to read at `now`, if anything: the table and knobs on a
    /// change, when the periodic look is due, and always when no uevents
    /// can be had; the knobs alone when `judging` (the window may end a
    /// trial with its change kept).
    pub fn due(&self, now: Instant, judging: bool) -> Option<Reads> {
        if !self.monitored || self.owed || now >= self.next {
            Some(Reads::TableAndKnobs)
        } else {
            judging.then_some(Reads::Knobs)
        }
    }

    /// A look at the table and knobs was taken at `now` (one at the knobs
    /// alone leaves the periodic look where it was).
    pub fn looked(&mut self, now: Instant) {
        self.owed = false;
        self.next = now + Self::EVERY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn disk_event() -> Drained {
        Drained {
            path_events: 1,
            ..Drained::default()
        }
    }

    #[test]
    fn quiet_intervals_are_light_and_a_full_scan_comes_every_minute() {
        let t0 = Instant::now();
        let mut s = ScanSchedule::new(t0, S, true);
        assert_eq!(s.due(t0, S), None, "nothing before the first interval");
        let mut full_at = vec![];
        for i in 1..=130u64 {
            let now = t0 + S * i as u32;
            match s.due(now, S) {
                Some(Scan::Full) => full_at.push(i),
                Some(Scan::Light) => {}
                None => panic!("no pass at {i} s"),
            }
        }
        assert_eq!(full_at, vec![60, 120]);
    }

    #[test]
    fn a_disk_event_scans_fully_at_once_and_at_the_next_two_intervals() {
        let t0 = Instant::now();
        let mut s = ScanSchedule::new(t0, S, true);
        let half = t0 + Duration::from_millis(500);
        // Events that touch no disk change nothing.
        s.on_uevents(&Drained::default(), half);
        assert_eq!(s.due(half, S), None);
        s.on_uevents(&disk_event(), half);
        assert_eq!(s.due(half, S), Some(Scan::Full), "at once, not at 1 s");
        assert_eq!(s.due(t0 + S, S), None, "the next pass is an interval on");
        let passes: Vec<_> = (2..=4)
            .map(|i| s.due(half + S * i - S, S).unwrap())
            .collect();
        assert_eq!(passes, vec![Scan::Full, Scan::Full, Scan::Light]);
    }

    #[test]
    fn lost_events_scan_fully_and_without_uevents_every_pass_is_full() {
        let t0 = Instant::now();
        let mut s = ScanSchedule::new(t0, S, true);
        s.on_uevents(
            &Drained {
                lost: true,
                ..Drained::default()
            },
            t0,
        );
        assert_eq!(s.due(t0, S), Some(Scan::Full));
        let mut blind = ScanSchedule::new(t0, S, false);
        for i in 1..=5 {
            assert_eq!(blind.due(t0 + S * i, S), Some(Scan::Full));
        }
    }

    #[test]
    fn a_longer_interval_after_sighup_spaces_the_passes() {
        let t0 = Instant::now();
        let mut s = ScanSchedule::new(t0, S, true);
        assert!(s.due(t0 + S, S * 5).is_some());
        assert_eq!(s.due(t0 + S * 5, S * 5), None);
        assert!(s.due(t0 + S * 6, S * 5).is_some());
    }

    #[test]
    fn knobs_are_looked_at_on_a_change_before_a_judgement_and_every_five_seconds() {
        let t0 = Instant::now();
        let full = Some(Reads::TableAndKnobs);
        let mut l = Look::new(t0, true);
        assert_eq!(l.due(t0, false), full, "a new map first thing");
        l.looked(t0);
        let quiet: Vec<u64> = (1..=11)
            .filter(|i| {
                let now = t0 + S * *i as u32;
                let due = l.due(now, false);
                if due.is_some() {
                    assert_eq!(due, full);
                    l.looked(now);
                }
                due.is_some()
            })
            .collect();
        assert_eq!(quiet, vec![5, 10]);
        let now = t0 + S * 11;
        assert_eq!(l.due(now, false), None);
        assert_eq!(
            l.due(now, true),
            Some(Reads::Knobs),
            "a trial may be judged, no swap announced"
        );
        assert_eq!(
            l.due(t0 + S * 15, true),
            full,
            "the periodic look reads the table, trial or not"
        );
        assert_eq!(
            Look::new(t0, false).due(now, false),
            full,
            "no uevents: every window, table and all"
        );
        assert_eq!(Look::new(t0, false).due(now, true), full);
        l.changed();
        assert_eq!(l.due(now, false), full, "the table was swapped");
        assert_eq!(l.due(now, true), full);
        l.looked(now);
        assert_eq!(l.due(now, false), None);
    }
}
