//! The daemon's decision log: every decision, the tuner's and the
//! operator's, said in the daemon's log, numbered, stamped and kept (the
//! last [`LOG_KEEP`]) for the socket, and counted by outcome.
use std::{collections::BTreeMap, sync::Arc};

use super::say;
use crate::{
    clock::unix_now,
    ctl::status::{LOG_KEEP, LoggedDecision},
    tuner::Decision,
};

#[derive(Debug)]
pub(super) struct DecisionLog {
    next_seq: u64,
    /// Shared with the published status: copied only when a decision is
    /// logged while a reader still holds the previous status.
    kept: Arc<Vec<LoggedDecision>>,
    counts: BTreeMap<String, u64>,
}

impl Default for DecisionLog {
    fn default() -> Self {
        DecisionLog {
            next_seq: 1,
            kept: Arc::default(),
            counts: BTreeMap::new(),
        }
    }
}

impl DecisionLog {
    pub(super) fn log(&mut self, d: Decision) {
        let outcome = d.outcome.word().to_string();
        *self.counts.entry(outcome.clone()).or_default() += 1;
        say!(
            "{}: {} {}{} [{}] {}",
            d.map,
            d.knob.map(|k| k.name()).unwrap_or("tuner"),
            if d.old.is_empty() && d.new.is_empty() {
                String::new()
            } else {
                format!("{} -> {} ", d.old, d.new)
            },
            d.class
                .as_deref()
                .map(|c| format!("({c})"))
                .unwrap_or_default(),
            outcome,
            d.reason
        );
        let kept = Arc::make_mut(&mut self.kept);
        kept.push(LoggedDecision {
            seq: self.next_seq,
            unix: unix_now(),
            decision: d,
        });
        self.next_seq += 1;
        if kept.len() > LOG_KEEP {
            let extra = kept.len() - LOG_KEEP;
            kept.drain(..extra);
        }
    }

    /// The decisions kept, newest last, shared with the status.
    pub(super) fn kept(&self) -> Arc<Vec<LoggedDecision>> {
        self.kept.clone()
    }

    /// Decisions counted since start, by outcome.
    pub(super) fn counts(&self) -> Vec<(String, u64)> {
        self.counts.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuner::Outcome;

    fn decision(outcome: Outcome) -> Decision {
        Decision::note(0.0, "mpatha", "test".into(), outcome)
    }

    #[test]
    fn decisions_are_numbered_counted_and_the_last_kept() {
        let mut log = DecisionLog::default();
        for _ in 0..LOG_KEEP + 2 {
            log.log(decision(Outcome::Kept));
        }
        log.log(decision(Outcome::Operator));
        let kept = log.kept();
        assert_eq!(kept.len(), LOG_KEEP);
        assert_eq!(kept.last().map(|d| d.seq), Some(LOG_KEEP as u64 + 3));
        assert_eq!(kept.first().map(|d| d.seq), Some(4));
        assert_eq!(
            log.counts(),
            vec![("kept".into(), LOG_KEEP as u64 + 2), ("operator".into(), 1)]
        );
    }
}
