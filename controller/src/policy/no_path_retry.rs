//! `no_path_retry` (multipath.conf's, in seconds): a map that queues I/O
//! while it has no usable path stops queueing after that long (queued and
//! new I/O fail with EIO; the map stays), and queues again as soon as a
//! path is usable.
use crate::dm::Message;

/// The state of one map that is meant to queue with no path.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NoPathRetry {
    /// Since when (seconds, the caller's clock) no path has been usable.
    since: Option<f64>,
    /// `fail_if_no_path` was sent: the map does not queue now.
    off: bool,
}

impl NoPathRetry {
    /// `off`: the map was found not queueing although it is meant to (the
    /// limit ran out before a restart).
    pub fn new(off: bool) -> Self {
        NoPathRetry { since: None, off }
    }

    pub fn queueing_off(&self) -> bool {
        self.off
    }

    /// One look at the map: `usable` when some path is active in the
    /// kernel; `limit` the configured seconds (None: queue for ever).
    /// Returns the message to send; report it sent with [`Self::sent`].
    pub fn step(&mut self, now: f64, usable: bool, limit: Option<f64>) -> Option<Message> {
        if usable {
            self.since = None;
            return self.off.then_some(Message::QueueIfNoPath);
        }
        let since = *self.since.get_or_insert(now);
        match limit {
            Some(l) if !self.off && now - since >= l => Some(Message::FailIfNoPath),
            _ => None,
        }
    }

    /// The kernel took `msg`.
    pub fn sent(&mut self, msg: &Message) {
        match msg {
            Message::FailIfNoPath => self.off = true,
            Message::QueueIfNoPath => self.off = false,
            _ => {}
        }
    }

    /// Seconds without a usable path so far.
    pub fn waited(&self, now: f64) -> f64 {
        self.since.map_or(0.0, |s| now - s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queueing_stops_after_the_limit_and_returns_with_a_path() {
        let mut n = NoPathRetry::new(false);
        assert_eq!(n.step(0.0, true, Some(30.0)), None);
        assert_eq!(n.step(10.0, false, Some(30.0)), None);
        assert_eq!(n.step(39.9, false, Some(30.0)), None);
        assert_eq!(n.waited(39.9), 29.9);
        let m = n.step(40.0, false, Some(30.0)).unwrap();
        assert_eq!(m, Message::FailIfNoPath);
        // Not sent (the kernel refused): asked again.
        assert_eq!(n.step(41.0, false, Some(30.0)), Some(Message::FailIfNoPath));
        n.sent(&m);
        assert!(n.queueing_off());
        assert_eq!(n.step(50.0, false, Some(30.0)), None);
        // A path returns: queue again, once.
        let m = n.step(60.0, true, Some(30.0)).unwrap();
        assert_eq!(m, Message::QueueIfNoPath);
        n.sent(&m);
        assert_eq!(n.step(61.0, true, Some(30.0)), None);
        // The clock starts over at the next loss.
        assert_eq!(n.step(70.0, false, Some(30.0)), None);
        assert_eq!(n.step(99.0, false, Some(30.0)), None);
        assert!(n.step(100.0, false, Some(30.0)).is_some());
    }

    #[test]
    fn no_limit_queues_for_ever() {
        let mut n = NoPathRetry::new(false);
        for t in 0..1000 {
            assert_eq!(n.step(t as f64, false, None), None);
        }
    }

    #[test]
    fn found_off_it_queues_again_with_a_path() {
        let mut n = NoPathRetry::new(true);
        assert_eq!(n.step(0.0, false, Some(5.0)), None);
        assert_eq!(n.step(1.0, true, Some(5.0)), Some(Message::QueueIfNoPath));
    }
}
