//! Advice for a map whose table belongs to multipathd: the multipath.conf
//! settings its figures argue for, each with the measured reason, and the
//! `multipaths { multipath { ... } }` entry that carries them. pathpilot
//! tunes the queue knobs of such a map itself; its table (grouping,
//! selector) is multipathd's to load, from its configuration.
use std::{collections::BTreeMap, fmt::Write as _};

use serde::Serialize;

use crate::ctl::status::{MapReport, PathReport};

/// pathpilot's file under multipath-tools' conf.d: where `beside.apply`
/// writes the entries it applies, and where a user may paste them.
pub const CONF_D_FILE: &str = "/etc/multipath/conf.d/pathpilot.conf";

/// One multipath.conf setting advised, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Setting {
    /// The multipath.conf keyword.
    pub key: &'static str,
    /// Its value as multipath.conf takes it.
    pub value: String,
    /// What was measured (or read) that argues for it.
    pub reason: String,
}

/// The advice for one map.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Advice {
    pub map: String,
    pub wwid: String,
    pub settings: Vec<Setting>,
    /// What else a reader should know (what cannot be said in
    /// multipath.conf, what pathpilot does itself).
    pub notes: Vec<String>,
}

impl Advice {
    /// The map's `multipath` entry for multipath.conf (its alias kept, so
    /// applying it renames nothing), the reasons as comments; `None` when
    /// nothing is advised.
    pub fn multipath_conf(&self) -> Option<String> {
        if self.settings.is_empty() {
            return None;
        }
        let mut s = String::new();
        let _ = writeln!(s, "multipaths {{");
        let _ = writeln!(s, "\tmultipath {{");
        let _ = writeln!(s, "\t\twwid {}", self.wwid);
        let _ = writeln!(s, "\t\talias {}", self.map);
        for x in &self.settings {
            let _ = writeln!(s, "\t\t# {}", x.reason);
            let _ = writeln!(s, "\t\t{} {}", x.key, x.value);
        }
        let _ = writeln!(s, "\t}}");
        let _ = writeln!(s, "}}");
        Some(s)
    }
}

impl Advice {
    /// What is advised, without the reasons (which carry each window's
    /// figures): two windows advise the same when this is the same.
    pub fn key(&self) -> String {
        self.settings
            .iter()
            .map(|s| format!("{} {}", s.key, s.value))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// When the daemon applies a map's advice through multipathd
/// (`beside.apply`): once the same advice has stood for
/// [`Applier::STABLE_WINDOWS`] windows in a row, and never the same advice
/// twice for a map (advice multipathd did not act on is not written
/// again and again).
#[derive(Debug, Default)]
pub struct Applier {
    /// Per WWID: the advice seen, and for how many windows in a row.
    seen: BTreeMap<String, (String, u32)>,
    /// Per WWID: the advice last applied.
    applied: BTreeMap<String, String>,
}

impl Applier {
    pub const STABLE_WINDOWS: u32 = 3;

    /// A window's advice for a map: whether to apply it now.
    pub fn window(&mut self, a: &Advice) -> bool {
        let key = a.key();
        if key.is_empty() {
            self.seen.remove(&a.wwid);
            return false;
        }
        let n = match self.seen.get(&a.wwid) {
            Some((k, n)) if *k == key => n + 1,
            _ => 1,
        };
        self.seen.insert(a.wwid.clone(), (key.clone(), n));
        if n < Self::STABLE_WINDOWS || self.applied.get(&a.wwid) == Some(&key) {
            return false;
        }
        self.applied.insert(a.wwid.clone(), key);
        true
    }
}

/// The file pathpilot keeps under multipath-tools' conf.d: the entries
/// applied, one `multipaths` section each (multipath.conf merges them).
pub fn conf_d_file(entries: &BTreeMap<String, String>) -> String {
    let mut s = String::from(
        "# Written by pathpilot (beside.apply): the multipath.conf entries it applied\n\
         # through multipathd, each with the reasons it measured. Remove this file and\n\
         # run `multipathd reconfigure` to undo them.\n",
    );
    for e in entries.values() {
        s.push_str(e);
    }
    s
}

fn usable(p: &PathReport) -> bool {
    p.dm_state == "active" && !matches!(p.checker.as_str(), "faulty" | "timeout")
}

fn mib_s(p: &PathReport) -> f64 {
    p.rates.read_mib_s + p.rates.write_mib_s
}

/// The table's selector name (`service-time`) from the status's
/// `service-time 0` form.
fn selector_name(m: &MapReport) -> &str {
    m.selector.split_whitespace().next().unwrap_or("")
}

/// Under this much I/O a window says nothing about how a map spreads it.
const IDLE_MIB_S: f64 = 0.5;

/// What multipath.conf could say better for `m`, from its table and its
/// last window's figures.
pub fn advise(m: &MapReport) -> Advice {
    let mut settings = vec![];
    let mut notes = vec![];
    let alua = m.hwhandler.contains("alua");
    let groups = m.paths.iter().map(|p| p.group).max().unwrap_or(0);
    let total: f64 = m.paths.iter().map(mib_s).sum();
    let idle = total < IDLE_MIB_S;
    let all_usable = !m.paths.is_empty() && m.paths.iter().all(usable);
    let first: Vec<&PathReport> = m.paths.iter().filter(|p| p.group == 1).collect();
    // Failover groups on an array without port priorities: one path
    // carries everything while the others, usable, wait.
    if !alua && groups > 1 && all_usable && first.len() == 1 {
        let others = m.paths.len() - 1;
        let reason = if idle {
            format!(
                "{} groups of one path: all I/O goes to {} while {others} other usable path(s) \
                 wait (the map was idle in the last window: read from the table)",
                groups, first[0].name
            )
        } else {
            let busy = first[0]
                .rates
                .util_pct
                .map(|u| format!(", busy {u:.0}% of the time"))
                .unwrap_or_default();
            format!(
                "{} carries {:.0}% of the map's {total:.1} MiB/s{busy}, while {others} other \
                 usable path(s) in groups of their own carry {:.1} MiB/s",
                first[0].name,
                first[0].share_pct,
                total - mib_s(first[0])
            )
        };
        settings.push(Setting {
            key: "path_grouping_policy",
            value: "multibus".into(),
            reason,
        });
    }
    // Paths that share the I/O and differ in speed: service-time sends
    // each request to the path with the least outstanding work for its
    // speed; round-robin holds the fast ones to the pace of the slow.
    let sharing = groups <= 1 || settings.iter().any(|s| s.key == "path_grouping_policy");
    if sharing && m.paths.len() > 1 && selector_name(m) == "round-robin" {
        let p99: Vec<(String, f64)> = m
            .paths
            .iter()
            .filter_map(|p| Some((p.name.clone(), p.rates.lat_p99_us? / 1000.0)))
            .collect();
        let spread = p99
            .iter()
            .map(|(_, v)| *v)
            .fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        let reason = if idle || p99.len() < 2 {
            "round-robin spreads requests evenly whatever each path's speed; service-time \
             follows each path's outstanding work (the map was idle in the last window)"
                .to_string()
        } else {
            format!(
                "round-robin spreads requests evenly, and the paths' p99 latency ranges from \
                 {:.1} to {:.1} ms ({}): service-time sends each request where the least work \
                 waits",
                spread.0,
                spread.1,
                p99.iter()
                    .map(|(n, v)| format!("{n} {v:.1}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        settings.push(Setting {
            key: "path_selector",
            value: "\"service-time 0\"".into(),
            reason,
        });
    }
    if alua {
        notes.push(
            "an ALUA array: its priority groups (group_by_prio, prio alua) are the array's; \
             pathpilot advises nothing on them"
                .into(),
        );
    }
    notes.push(
        "pathpilot tunes this map's nr_requests, scheduler and each path's queue_depth itself \
         (none of them is a multipath.conf setting); service-time weights per path cannot be \
         said in multipath.conf at all: only a map pathpilot owns (pathpilot takeover) gets them"
            .into(),
    );
    Advice {
        map: m.name.clone(),
        wwid: m.wwid.clone(),
        settings,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctl::status::Rates;

    fn path(name: &str, group: usize, mib: f64, share: f64, p99_ms: f64) -> PathReport {
        PathReport {
            name: name.into(),
            group,
            dm_state: "active".into(),
            checker: "-".into(),
            share_pct: share,
            rates: Rates {
                read_mib_s: mib,
                util_pct: Some(if mib > 0.0 { 100.0 } else { 0.0 }),
                lat_p99_us: (mib > 0.0).then_some(p99_ms * 1000.0),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn failover(mib: [f64; 4]) -> MapReport {
        MapReport {
            name: "mpatha".into(),
            wwid: "35000c500deadbeef".into(),
            selector: "service-time 0".into(),
            hwhandler: "0".into(),
            paths: (0..4)
                .map(|i| {
                    let total: f64 = mib.iter().sum();
                    let share = if total > 0.0 {
                        mib[i] / total * 100.0
                    } else {
                        0.0
                    };
                    path(
                        &format!("sd{}", (b'a' + i as u8) as char),
                        i + 1,
                        mib[i],
                        share,
                        6.0,
                    )
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn failover_groups_on_usable_paths_are_advised_multibus_with_what_was_measured() {
        let a = advise(&failover([10.0, 0.0, 0.0, 0.0]));
        assert_eq!(a.settings.len(), 1, "{a:#?}");
        assert_eq!(a.settings[0].key, "path_grouping_policy");
        assert_eq!(a.settings[0].value, "multibus");
        assert!(
            a.settings[0]
                .reason
                .contains("sda carries 100% of the map's 10.0 MiB/s")
                && a.settings[0].reason.contains("3 other usable path(s)"),
            "{}",
            a.settings[0].reason
        );
        assert!(a.notes.iter().any(|n| n.contains("weights")), "{a:#?}");
        let conf = a.multipath_conf().unwrap();
        assert!(conf.contains("wwid 35000c500deadbeef") && conf.contains("alias mpatha"));
        assert!(
            conf.contains("\t\tpath_grouping_policy multibus\n"),
            "{conf}"
        );
        // Idle: the same advice, said to come from the table.
        let a = advise(&failover([0.0; 4]));
        assert!(a.settings[0].reason.contains("idle"), "{a:#?}");
    }

    #[test]
    fn advice_is_applied_once_it_has_held_and_never_twice() {
        let mut ap = Applier::default();
        let busy = advise(&failover([10.0, 0.0, 0.0, 0.0]));
        let idle = advise(&failover([0.0; 4]));
        assert_eq!(busy.key(), idle.key(), "the reasons' figures do not count");
        assert!(!ap.window(&busy));
        assert!(!ap.window(&idle));
        assert!(ap.window(&busy), "three windows of the same advice");
        // Applied: the same advice again (multipathd did not act on it) is
        // not written again.
        for _ in 0..10 {
            assert!(!ap.window(&busy));
        }
        // A window with nothing to advise starts the count again.
        let mut ap = Applier::default();
        let none = Advice {
            settings: vec![],
            ..busy.clone()
        };
        assert!(!ap.window(&busy) && !ap.window(&none) && !ap.window(&busy));
        assert!(!ap.window(&busy));
        assert!(ap.window(&busy));
        let file = conf_d_file(&BTreeMap::from([(
            busy.wwid.clone(),
            busy.multipath_conf().unwrap(),
        )]));
        assert!(
            file.starts_with("# Written by pathpilot") && file.contains("wwid 35000c500deadbeef")
        );
    }

    #[test]
    fn a_failed_path_or_an_alua_array_gets_no_grouping_advice() {
        let mut m = failover([10.0, 0.0, 0.0, 0.0]);
        m.paths[2].dm_state = "failed".into();
        assert!(advise(&m).settings.is_empty());
        let mut m = failover([10.0, 0.0, 0.0, 0.0]);
        m.hwhandler = "1 alua".into();
        let a = advise(&m);
        assert!(
            a.settings.is_empty() && a.multipath_conf().is_none(),
            "{a:#?}"
        );
        assert!(a.notes.iter().any(|n| n.contains("ALUA")));
    }

    #[test]
    fn round_robin_over_unequal_paths_is_advised_service_time() {
        let mut m = failover([10.0, 20.0, 40.0, 80.0]);
        for p in &mut m.paths {
            p.group = 1;
        }
        m.paths[0].rates.lat_p99_us = Some(25_000.0);
        m.selector = "round-robin 0".into();
        let a = advise(&m);
        assert_eq!(a.settings.len(), 1, "{a:#?}");
        assert_eq!(a.settings[0].key, "path_selector");
        assert_eq!(a.settings[0].value, "\"service-time 0\"");
        assert!(a.settings[0].reason.contains("6.0 to 25.0 ms"), "{a:#?}");
        // Already service-time: nothing.
        m.selector = "service-time 0".into();
        assert!(advise(&m).settings.is_empty());
    }
}
