//! The block-layer knobs a current kernel honours for multipath (see
//! docs/architecture.md): the dm device's `queue/nr_requests`, `queue/scheduler`,
//! `queue/max_sectors_kb`, and each SCSI path's `device/queue_depth`.
//! Every write is read back; what is reported is what the kernel kept.
use std::{
    fmt, fs,
    io::{ErrorKind, Write},
    path::{Path, PathBuf},
    str::FromStr,
};

use crate::sysfs_attr::KeptFiles;

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueKnob {
    NrRequests,
    Scheduler,
    MaxSectorsKb,
    QueueDepth,
}

impl QueueKnob {
    pub fn name(self) -> &'static str {
        match self {
            QueueKnob::NrRequests => "nr_requests",
            QueueKnob::Scheduler => "scheduler",
            QueueKnob::MaxSectorsKb => "max_sectors_kb",
            QueueKnob::QueueDepth => "queue_depth",
        }
    }

    /// Whether the knob belongs to a path (SCSI device) rather than a map.
    pub fn per_path(self) -> bool {
        self == QueueKnob::QueueDepth
    }

    /// The attribute under `/sys/class/block/<dev>/`.
    pub fn attr(self) -> &'static str {
        match self {
            QueueKnob::NrRequests => "queue/nr_requests",
            QueueKnob::Scheduler => "queue/scheduler",
            QueueKnob::MaxSectorsKb => "queue/max_sectors_kb",
            QueueKnob::QueueDepth => "device/queue_depth",
        }
    }
}

impl fmt::Display for QueueKnob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `knob=value` as the user writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting {
    pub knob: QueueKnob,
    pub value: String,
}

impl FromStr for Setting {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| format!("'{s}': expected KNOB=VALUE"))?;
        let knob = match k {
            "nr_requests" => QueueKnob::NrRequests,
            "scheduler" => QueueKnob::Scheduler,
            "max_sectors_kb" => QueueKnob::MaxSectorsKb,
            "queue_depth" => QueueKnob::QueueDepth,
            _ => {
                return Err(format!(
                    "unknown knob '{k}' (nr_requests, scheduler, max_sectors_kb, queue_depth)"
                ));
            }
        };
        let ok = match knob {
            QueueKnob::Scheduler => {
                !v.is_empty()
                    && v.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            }
            _ => v.parse::<u32>().is_ok_and(|n| n > 0),
        };
        if !ok {
            return Err(match knob {
                QueueKnob::Scheduler => format!("'{v}' is not a scheduler name"),
                _ => format!("{k} must be a positive integer, not '{v}'"),
            });
        }
        Ok(Setting {
            knob,
            value: v.to_string(),
        })
    }
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.knob, self.value)
    }
}

/// What happened to a write, judged by the read-back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Outcome {
    /// Reads back as written.
    Applied,
    /// The kernel kept a different value (clamped, rounded or ignored).
    Adjusted,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub device: String,
    pub knob: QueueKnob,
    pub before: String,
    pub requested: String,
    pub after: String,
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl Applied {
    /// One line for people.
    pub fn describe(&self) -> String {
        match self.outcome {
            Outcome::Applied if self.before == self.after => format!(
                "{} {}: {} (already set)",
                self.device, self.knob, self.after
            ),
            Outcome::Applied => format!(
                "{} {}: {} -> {} (applied)",
                self.device, self.knob, self.before, self.after
            ),
            Outcome::Adjusted => format!(
                "{} {}: requested {}, the kernel kept {} (was {})",
                self.device, self.knob, self.requested, self.after, self.before
            ),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KnobError {
    #[error("writing {path} needs root")]
    NotRoot { path: PathBuf },
    #[error("{device} has no {knob} ({path} is missing)")]
    Missing {
        device: String,
        knob: QueueKnob,
        path: PathBuf,
    },
    #[error("{device}: scheduler '{requested}' is not available (available: {available})")]
    UnknownScheduler {
        device: String,
        requested: String,
        available: String,
    },
    #[error("the kernel refused {knob}={value} on {device}: {err}")]
    Refused {
        device: String,
        knob: QueueKnob,
        value: String,
        err: std::io::Error,
    },
}

/// The current value, as the knob means it (the scheduler in brackets).
pub fn read(device: &str, knob: QueueKnob) -> Result<String, KnobError> {
    let path = attr_path(device, knob);
    let raw = fs::read_to_string(&path).map_err(|_| missing(device, knob, path))?;
    Ok(value_of(knob, &raw))
}

fn missing(device: &str, knob: QueueKnob, path: PathBuf) -> KnobError {
    KnobError::Missing {
        device: device.into(),
        knob,
        path,
    }
}

fn value_of(knob: QueueKnob, raw: &str) -> String {
    match knob {
        QueueKnob::Scheduler => selected_scheduler(raw).unwrap_or_else(|| raw.trim().to_string()),
        _ => raw.trim().to_string(),
    }
}

/// Knob files kept open between reads ([`KeptFiles`]): the daemon looks at
/// every managed map's knobs every few seconds for changes made outside it.
#[derive(Default)]
pub struct KnobFiles {
    kept: KeptFiles<(String, QueueKnob)>,
}

impl KnobFiles {
    /// [`read`], through the kept file.
    pub fn read(&mut self, device: &str, knob: QueueKnob) -> Result<String, KnobError> {
        let path = || attr_path(device, knob);
        let raw = self
            .kept
            .read((device.to_string(), knob), path)
            .map_err(|_| missing(device, knob, path()))?;
        Ok(value_of(knob, &raw))
    }

    /// Closes the files of devices for which `keep` is false (a path that
    /// left the map, a map that went away).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.kept.retain(|(d, _)| keep(d));
    }

    /// How many files are open.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }
}

fn attr_path(device: &str, knob: QueueKnob) -> PathBuf {
    Path::new("/sys/class/block").join(device).join(knob.attr())
}

/// `mq-deadline` from `[mq-deadline] kyber none`.
pub fn selected_scheduler(s: &str) -> Option<String> {
    let start = s.find('[')?;
    let end = s[start..].find(']')? + start;
    Some(s[start + 1..end].to_string())
}

/// The schedulers listed as available.
pub fn available_schedulers(s: &str) -> Vec<String> {
    s.split_whitespace()
        .map(|t| t.trim_matches(|c| c == '[' || c == ']').to_string())
        .collect()
}

/// Writes `value` to `device`'s knob and reads it back.
pub fn write(device: &str, knob: QueueKnob, value: &str) -> Result<Applied, KnobError> {
    let path = attr_path(device, knob);
    let before = read(device, knob)?;
    if knob == QueueKnob::Scheduler {
        let raw = fs::read_to_string(&path).unwrap_or_default();
        let avail = available_schedulers(&raw);
        if !avail.iter().any(|a| a == value) {
            return Err(KnobError::UnknownScheduler {
                device: device.into(),
                requested: value.into(),
                available: avail.join(", "),
            });
        }
    }
    let res = fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|mut f| f.write_all(value.as_bytes()));
    if let Err(err) = res {
        return Err(match err.kind() {
            ErrorKind::PermissionDenied => KnobError::NotRoot { path },
            _ => KnobError::Refused {
                device: device.into(),
                knob,
                value: value.into(),
                err,
            },
        });
    }
    let after = read(device, knob)?;
    let outcome = if after == value {
        Outcome::Applied
    } else {
        Outcome::Adjusted
    };
    Ok(Applied {
        device: device.into(),
        knob,
        before,
        requested: value.into(),
        after,
        outcome,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_and_refuse() {
        let s: Setting = "nr_requests=64".parse().unwrap();
        assert_eq!((s.knob, s.value.as_str()), (QueueKnob::NrRequests, "64"));
        let s: Setting = "scheduler=mq-deadline".parse().unwrap();
        assert_eq!(s.knob, QueueKnob::Scheduler);
        assert!(
            "queue_depth=0"
                .parse::<Setting>()
                .unwrap_err()
                .contains("positive")
        );
        assert!("nr_requests=-1".parse::<Setting>().is_err());
        assert!(
            "rr_min_io=1"
                .parse::<Setting>()
                .unwrap_err()
                .contains("unknown knob")
        );
        assert!("scheduler=a b".parse::<Setting>().is_err());
        assert!("nr_requests".parse::<Setting>().is_err());
    }

    #[test]
    fn scheduler_files() {
        assert_eq!(
            selected_scheduler("[mq-deadline] kyber none\n").as_deref(),
            Some("mq-deadline")
        );
        assert_eq!(selected_scheduler("none").as_deref(), None);
        assert_eq!(
            available_schedulers("mq-deadline [none]"),
            ["mq-deadline", "none"]
        );
    }

    #[test]
    fn missing_devices_are_reported_as_missing() {
        assert!(matches!(
            read("no-such-dev", QueueKnob::NrRequests),
            Err(KnobError::Missing { .. })
        ));
        let mut files = KnobFiles::default();
        assert!(matches!(
            files.read("no-such-dev", QueueKnob::NrRequests),
            Err(KnobError::Missing { .. })
        ));
        assert!(files.is_empty());
    }

    #[test]
    fn kept_files_read_what_the_kernel_holds_now() {
        let Some(lo) = crate::test_loop::TestLoop::attach("knobfiles") else {
            return;
        };
        let dev = lo.name();
        let mut files = KnobFiles::default();
        let first = files.read(dev, QueueKnob::MaxSectorsKb).unwrap();
        assert_eq!(first, read(dev, QueueKnob::MaxSectorsKb).unwrap());
        assert_eq!(files.len(), 1);
        // A change made by someone else shows through the kept file.
        let want = if first == "64" { "32" } else { "64" };
        let w = write(dev, QueueKnob::MaxSectorsKb, want).unwrap();
        assert_eq!(w.outcome, Outcome::Applied, "{w:?}");
        assert_eq!(files.read(dev, QueueKnob::MaxSectorsKb).unwrap(), want);
        assert_eq!(files.len(), 1, "read again through the same file");
        let sched = files.read(dev, QueueKnob::Scheduler).unwrap();
        assert_eq!(sched, read(dev, QueueKnob::Scheduler).unwrap());
        assert!(!sched.contains('['), "{sched}");
        write(dev, QueueKnob::MaxSectorsKb, &first).unwrap();
        assert_eq!(files.read(dev, QueueKnob::MaxSectorsKb).unwrap(), first);
        files.retain(|d| d != dev);
        assert!(files.is_empty());
    }
}
