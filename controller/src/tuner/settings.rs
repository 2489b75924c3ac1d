//! The knobs a current kernel honours (see docs/architecture.md), as one value
//! per map, so a trial is "this setting instead of that one" and a revert is
//! applying the old value.
use serde::{Deserialize, Serialize};

use crate::mpath::Selector;

/// Which knob a change touches (a change touches exactly one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Knob {
    Selector,
    Weights,
    ActivePaths,
    MaxSectorsKb,
    NrRequests,
    Scheduler,
    QueueDepth,
}

impl Knob {
    pub const ALL: [Knob; 7] = [
        Knob::Selector,
        Knob::Weights,
        Knob::ActivePaths,
        Knob::MaxSectorsKb,
        Knob::NrRequests,
        Knob::Scheduler,
        Knob::QueueDepth,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Knob::Selector => "selector",
            Knob::Weights => "weights",
            Knob::ActivePaths => "active_paths",
            Knob::MaxSectorsKb => "max_sectors_kb",
            Knob::NrRequests => "nr_requests",
            Knob::Scheduler => "scheduler",
            Knob::QueueDepth => "queue_depth",
        }
    }

    /// Changing it needs a table reload (a suspend and its stall), as
    /// opposed to a sysfs write.
    pub fn needs_reload(self) -> bool {
        matches!(self, Knob::Selector | Knob::Weights | Knob::ActivePaths)
    }

    /// A queue knob: written in sysfs, and no program that reloads the
    /// map's table sets it again (multipathd sets max_sectors_kb on a path
    /// as it adds it, so that one is the table's).
    pub fn is_queue_knob(self) -> bool {
        matches!(self, Knob::NrRequests | Knob::Scheduler | Knob::QueueDepth)
    }
}

/// One map's setting of every honoured knob.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Settings {
    #[serde(with = "selector_name")]
    pub selector: Selector,
    /// service-time `relative_throughput` per path, in the map's path order;
    /// empty means every path weighs the same.
    pub weights: Vec<u32>,
    /// How many paths are in the active priority group (the others wait in
    /// a second group); the paths are ranked by measured capacity.
    pub active_paths: usize,
    /// The dm device's queue limits and scheduler.
    pub max_sectors_kb: u32,
    pub nr_requests: u32,
    pub scheduler: String,
    /// Every path's SCSI queue_depth (one value for all paths).
    pub queue_depth: u32,
}

mod selector_name {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::mpath::Selector;

    pub fn serialize<S: Serializer>(s: &Selector, ser: S) -> Result<S::Ok, S::Error> {
        ser.serialize_str(s.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Selector, D::Error> {
        Ok(Selector::from_name(&String::deserialize(d)?))
    }
}

impl Settings {
    /// The value of one knob, for the decision log.
    pub fn show(&self, k: Knob) -> String {
        match k {
            Knob::Selector => self.selector.name().to_string(),
            Knob::Weights if self.weights.is_empty() => "equal".into(),
            Knob::Weights => self
                .weights
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(":"),
            Knob::ActivePaths => self.active_paths.to_string(),
            Knob::MaxSectorsKb => self.max_sectors_kb.to_string(),
            Knob::NrRequests => self.nr_requests.to_string(),
            Knob::Scheduler => self.scheduler.clone(),
            Knob::QueueDepth => self.queue_depth.to_string(),
        }
    }

    /// The knobs on which two settings differ.
    pub fn diff(&self, other: &Settings) -> Vec<Knob> {
        Knob::ALL
            .into_iter()
            .filter(|k| self.show(*k) != other.show(*k))
            .collect()
    }

    /// `self` with knob `k` taken from `from`.
    pub fn with(&self, k: Knob, from: &Settings) -> Settings {
        let mut s = self.clone();
        match k {
            Knob::Selector => s.selector = from.selector.clone(),
            Knob::Weights => s.weights = from.weights.clone(),
            Knob::ActivePaths => s.active_paths = from.active_paths,
            Knob::MaxSectorsKb => s.max_sectors_kb = from.max_sectors_kb,
            Knob::NrRequests => s.nr_requests = from.nr_requests,
            Knob::Scheduler => s.scheduler = from.scheduler.clone(),
            Knob::QueueDepth => s.queue_depth = from.queue_depth,
        }
        s
    }
}

#[cfg(test)]
pub(crate) fn example(paths: usize) -> Settings {
    Settings {
        selector: Selector::RoundRobin,
        weights: vec![],
        active_paths: paths,
        max_sectors_kb: 1280,
        nr_requests: 256,
        scheduler: "mq-deadline".into(),
        queue_depth: 128,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_and_with() {
        let a = example(4);
        let mut b = a.clone();
        b.selector = Selector::ServiceTime;
        b.weights = vec![10, 20, 40, 80];
        assert_eq!(a.diff(&b), vec![Knob::Selector, Knob::Weights]);
        let c = a.with(Knob::Weights, &b);
        assert_eq!(c.diff(&a), vec![Knob::Weights]);
        assert_eq!(b.show(Knob::Weights), "10:20:40:80");
        assert_eq!(a.show(Knob::Weights), "equal");
    }

    #[test]
    fn serde_round_trip() {
        let mut a = example(2);
        a.selector = Selector::QueueLength;
        let j = serde_json::to_string(&a).unwrap();
        assert!(j.contains("\"selector\":\"queue-length\""), "{j}");
        assert_eq!(serde_json::from_str::<Settings>(&j).unwrap(), a);
    }
}
