//! Checker verdicts carried out (a path failed or reinstated by a dm
//! message), and maps.no_path_retry: a map with no usable path stops
//! queueing after a while, and queues again once a path is usable.
use std::time::Instant;

use super::{Engine, say};
use crate::{daemon::checker::Verdict, dm::Message, tuner::Mode};

impl Engine {
    /// Checker verdicts to dm messages: fail a path the checker finds bad,
    /// reinstate one it finds good that the kernel holds failed (never one
    /// an operator failed).
    pub(super) fn run_checkers(&mut self, now: Instant) {
        // A path the kernel failed is checked at the base interval, so it
        // is reinstated as soon as it answers again.
        for p in self.maps.iter().flat_map(|m| &m.paths) {
            if p.dm_failed {
                self.checkers.hurry(&p.name);
            }
        }
        let (maps, obs) = (&self.maps, &mut self.obs);
        let mut silent = |name: &str| {
            let dev = maps
                .iter()
                .flat_map(|m| m.paths.iter())
                .find(|p| p.name == name)?
                .dev;
            obs.silence(dev)
        };
        let (changes, notes) = self.checkers.tick(now, &mut silent);
        for n in notes {
            say!("checker: {n}");
        }
        for c in changes {
            let Some((mi, pi)) = self.find_path(&c.path) else {
                continue;
            };
            let m = &mut self.maps[mi];
            // A first verdict is not a change of the path, only of what we
            // know about it.
            if c.from != Verdict::Unknown {
                m.last_path_change = Some(now);
            }
            say!(
                "{}: checker: path {} {} -> {}{}",
                m.name,
                c.path,
                c.from.word(),
                c.to.word(),
                c.detail
                    .as_deref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            );
            if !m.managed || self.cfg.mode == Mode::Observe {
                continue;
            }
            let dev = m.paths[pi].dev;
            let msg = if c.to.is_bad() {
                Message::FailPath(dev)
            } else if c.to == Verdict::Ready
                && m.paths[pi].dm_failed
                && !m.paths[pi].admin_failed
                && self.checkers.ready_since(&c.path, m.paths[pi].failed_at)
            {
                Message::ReinstatePath(dev)
            } else {
                continue;
            };
            match self.dm.message(&m.name, &msg) {
                Ok(()) => say!("{}: sent {}", m.name, msg.render()),
                Err(e) => say!("{}: {} failed: {e}", m.name, msg.render()),
            }
        }
        // A path the kernel failed on its own (I/O error) that checks ready
        // again is reinstated, as multipathd does.
        if self.hands_off() {
            return;
        }
        for m in &mut self.maps {
            if !m.managed {
                continue;
            }
            for p in &mut m.paths {
                // A ready verdict from a check that started before the
                // kernel failed the path is stale: reinstating on it made a
                // pulled path ping-pong (fail, reinstate, fail, ...) until
                // the next check.
                if p.dm_failed
                    && !p.admin_failed
                    && self.checkers.ready_since(&p.name, p.failed_at)
                    && self
                        .dm
                        .message(&m.name, &Message::ReinstatePath(p.dev))
                        .is_ok()
                {
                    say!("{}: reinstated {} (checker ready)", m.name, p.name);
                    p.dm_failed = false;
                    m.last_path_change = Some(now);
                }
            }
        }
    }

    /// maps.no_path_retry_secs, through [`NoPathRetry`]. Returns whether a
    /// map's queueing changed.
    pub(super) fn no_path_retry(&mut self) -> bool {
        let mut changed = false;
        if self.hands_off() {
            return changed;
        }
        let t = self.t();
        for m in &mut self.maps {
            if !m.managed || !m.wants_queue {
                continue;
            }
            let limit = m.no_path_retry_secs.or(self.cfg.maps.no_path_retry_secs);
            let usable = m.paths.iter().any(|p| !p.dm_failed);
            let waited = m.no_path_retry.waited(t);
            let Some(msg) = m.no_path_retry.step(t, usable, limit) else {
                continue;
            };
            match self.dm.message(&m.name, &msg) {
                Ok(()) => {
                    m.no_path_retry.sent(&msg);
                    m.queue_if_no_path = msg == Message::QueueIfNoPath;
                    changed = true;
                    if msg == Message::QueueIfNoPath {
                        say!("{}: a path is usable again: queue_if_no_path", m.name);
                    } else {
                        say!(
                            "{}: no usable path for {waited:.1} s ({} = {}): fail_if_no_path, \
                             queued I/O fails with EIO",
                            m.name,
                            if m.no_path_retry_secs.is_some() {
                                "multipath.conf's no_path_retry"
                            } else {
                                "maps.no_path_retry_secs"
                            },
                            limit.unwrap_or_default()
                        );
                    }
                }
                Err(e) => say!("{}: {} failed: {e}", m.name, msg.render()),
            }
        }
        changed
    }
}
