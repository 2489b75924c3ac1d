//! The table of a new map: the one multipath-tools would build for the
//! array (from [`select`](super::select)'s choices), and pathpilot's,
//! which follows it except where pathpilot deliberately differs, each
//! difference with its reason. Pure.
//!
//! pathpilot follows multipath-tools where multipath-tools says something
//! of its own about the array or the host: the LUN's `multipaths` entry,
//! `overrides`, the array's device entry (built in or the admin's), the
//! defaults the admin wrote, what it detects on the paths (ALUA). Where
//! it only falls back to its generic defaults (`failover`, no queueing),
//! pathpilot's own defaults apply (group by priority on ALUA arrays,
//! every path in one group elsewhere; the daemon queues), and the
//! difference is shown. pathpilot's own explicit choices (a flag, a
//! `[maps]` key) win over both.
use serde::Serialize;

use super::{
    model::{NoPathRetry, Prio, RrWeight},
    select::{Origin, Selection, Setting, features_text, hw_text},
};
use crate::{
    blockdev::DevNum,
    discovery::alua::Alua,
    mpath::{
        Feature, HwHandler, MultipathTable, Path, PathArgs, PriorityGroup, QueueMode, Selector,
        grouping::{self, Candidate, Grouping},
    },
};

/// One path of the new map, as planning needs it.
#[derive(Clone, Debug)]
pub struct PlanPath {
    pub name: String,
    pub dev: DevNum,
    pub alua: Option<Alua>,
    /// VPD page 0x80's serial (`group_by_serial`).
    pub serial: Option<String>,
    /// The target node name (`group_by_node_name`).
    pub node_name: Option<String>,
}

/// What pathpilot itself says about a new map.
#[derive(Clone, Debug, Default)]
pub struct Own {
    /// Explicit choices (`create`'s flags): they win over multipath-tools'.
    pub selector: Option<Setting<Selector>>,
    pub grouping: Option<Setting<Grouping>>,
    /// The whole features list, `queue_if_no_path` included.
    pub features: Option<Setting<Vec<Feature>>>,
    /// pathpilot's defaults (the daemon's `[maps]` keys), for where
    /// multipath-tools has only its generic ones: the selector (unset:
    /// service-time), the grouping (unset: group_by_prio on ALUA arrays,
    /// multibus elsewhere), and whether a map queues (the daemon queues,
    /// `create` does not).
    pub default_selector: Option<Setting<Selector>>,
    pub default_grouping: Option<Setting<Grouping>>,
    pub default_queue_if_no_path: bool,
}

/// One aspect of a table where pathpilot's and multipath-tools' differ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// `path groups`, `features`, `selector`, `hardware handler`, ...
    pub aspect: String,
    pub ours: String,
    pub theirs: String,
    /// Why, and whether pathpilot means it.
    pub why: String,
    pub deliberate: bool,
}

impl Difference {
    pub fn describe(&self) -> String {
        format!(
            "{}: {} ({}; multipath-tools: {})",
            self.aspect, self.ours, self.why, self.theirs
        )
    }
}

/// A setting's value in words and where it came from, for the dry run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Shown {
    pub setting: String,
    pub value: String,
    pub origin: String,
    /// pathpilot takes this value (false: it does otherwise, see the
    /// differences).
    pub followed: bool,
}

/// How the map treats I/O while no path is usable.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Queueing {
    pub queue_if_no_path: bool,
    /// Fail queued I/O after this many seconds without a usable path
    /// (multipath.conf's `no_path_retry` N: N checks of
    /// `polling_interval` seconds each).
    pub fail_after_secs: Option<f64>,
}

/// The new map's tables and the reasons for their differences.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    /// pathpilot's table, as loaded.
    #[serde(serialize_with = "line")]
    pub ours: MultipathTable,
    /// multipath-tools' table as the kernel would hold it (repeat counts
    /// pinned to 1, service-time's two arguments per path), when its
    /// configuration is followed.
    #[serde(serialize_with = "opt_line")]
    pub theirs: Option<MultipathTable>,
    pub differences: Vec<Difference>,
    /// The settings that shaped the tables and their origins.
    pub settings: Vec<Shown>,
    /// Notes on what pathpilot cannot or does not do as multipath-tools
    /// would, outside the table (a prioritizer it does not run, a checker).
    pub notes: Vec<String>,
    pub queueing: Queueing,
}

fn line<S: serde::Serializer>(t: &MultipathTable, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.render_line())
}

fn opt_line<S: serde::Serializer>(t: &Option<MultipathTable>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&t.render_line()),
        None => s.serialize_none(),
    }
}

/// The priority a path's prioritizer gives it, where pathpilot can tell:
/// `alua`/`sysfs` from the ALUA state, `const` 1.
fn priority(prio: &Prio, alua: Option<&Alua>) -> Option<u32> {
    match prio.name.as_str() {
        "alua" | "sysfs" => alua.map(Alua::prio),
        "const" => Some(1),
        _ => None,
    }
}

/// Features in the order the kernel prints them, so that a loaded table
/// reads back unchanged.
fn canonical(mut f: Vec<Feature>) -> Vec<Feature> {
    let rank = |f: &Feature| match f {
        Feature::QueueIfNoPath => 0,
        Feature::PgInitRetries(_) => 1,
        Feature::PgInitDelayMsecs(_) => 2,
        Feature::RetainAttachedHwHandler => 3,
        Feature::QueueMode(_) => 4,
        _ => 5,
    };
    f.dedup();
    f.sort_by_key(rank);
    f
}

/// A table as the kernel reads it back (since 4.6): repeat counts of the
/// request-based selectors pinned to 1, service-time's path arguments as
/// two numbers (the weight 1 where none was given), the handler without
/// arguments, features in the kernel's order without the default
/// queue_mode. Two tables the kernel would hold alike compare equal.
pub fn kernel_view(t: &MultipathTable) -> MultipathTable {
    let mut k = t.clone();
    k.features = canonical(
        k.features
            .into_iter()
            .filter(|f| !matches!(f, Feature::QueueMode(QueueMode::Rq | QueueMode::Mq)))
            .collect(),
    );
    if let Some(h) = &mut k.hw_handler {
        h.args.clear();
    }
    for g in &mut k.groups {
        for p in &mut g.paths {
            let w = p.args.relative_throughput().unwrap_or(1);
            p.args = match (&g.selector, p.args.repeat_count()) {
                (Selector::ServiceTime, Some(_)) => PathArgs::ServiceTime {
                    repeat_count: 1,
                    relative_throughput: w,
                },
                (s, Some(_)) if s.takes_repeat_count() => PathArgs::RepeatCount(1),
                _ => p.args.clone(),
            };
        }
    }
    k
}

/// Where two tables differ, aspect by aspect, compared as the kernel holds
/// them: `(aspect, ours, theirs)`.
pub fn differences(
    ours: &MultipathTable,
    theirs: &MultipathTable,
) -> Vec<(String, String, String)> {
    let (o, t) = (kernel_view(ours), kernel_view(theirs));
    let mut out = vec![];
    // A group's paths as a set: their order inside it selects nothing.
    let groups = |m: &MultipathTable| {
        m.groups
            .iter()
            .map(|g| {
                let mut devs: Vec<DevNum> = g.paths.iter().map(|p| p.dev).collect();
                devs.sort();
                devs.iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect::<Vec<_>>()
            .join(" | ")
    };
    if groups(&o) != groups(&t) {
        out.push(("path groups".into(), groups(&o), groups(&t)));
    }
    if o.hw_handler != t.hw_handler {
        out.push((
            "hardware handler".into(),
            hw_text(&o.hw_handler),
            hw_text(&t.hw_handler),
        ));
    }
    if o.features != t.features {
        out.push((
            "features".into(),
            features_text(&o.features),
            features_text(&t.features),
        ));
    }
    let selectors = |m: &MultipathTable| {
        let mut v: Vec<String> = m
            .groups
            .iter()
            .map(|g| format!("{} {}", g.selector, g.selector_args.len()))
            .collect();
        v.dedup();
        v.join(", ")
    };
    if selectors(&o) != selectors(&t) {
        out.push(("selector".into(), selectors(&o), selectors(&t)));
    } else {
        let args = |m: &MultipathTable| {
            let mut v: Vec<(DevNum, String)> = m
                .groups
                .iter()
                .flat_map(|g| g.paths.iter())
                .map(|p| (p.dev, p.args.text()))
                .collect();
            v.sort();
            v.iter()
                .map(|(d, a)| format!("{d} {a}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if args(&o) != args(&t) {
            out.push(("path arguments".into(), args(&o), args(&t)));
        }
    }
    if (o.initial_pg, o.length) != (t.initial_pg, t.length) {
        out.push((
            "initial group and size".into(),
            format!("{} {}", o.initial_pg, o.length),
            format!("{} {}", t.initial_pg, t.length),
        ));
    }
    out
}

/// Builds a table: groups of paths in priority order, one selector.
fn build(
    length: u64,
    groups: &[(u32, Vec<DevNum>)],
    selector: &Selector,
    selector_args: &[String],
    args_of: &dyn Fn(DevNum) -> PathArgs,
    features: Vec<Feature>,
    hw: Option<HwHandler>,
) -> MultipathTable {
    let groups: Vec<PriorityGroup> = groups
        .iter()
        .filter(|(_, g)| !g.is_empty())
        .map(|(_, g)| PriorityGroup {
            selector: selector.clone(),
            selector_args: selector_args.to_vec(),
            paths: g
                .iter()
                .map(|d| Path {
                    dev: *d,
                    args: args_of(*d),
                })
                .collect(),
        })
        .collect();
    MultipathTable {
        start: 0,
        length,
        features: canonical(features),
        hw_handler: hw,
        initial_pg: u32::from(!groups.is_empty()),
        groups,
    }
}

fn pp(how: &str) -> Origin {
    Origin::Pathpilot { how: how.into() }
}

/// pathpilot's table for a LUN, following `sel` (multipath-tools' choices
/// for it) where it is specific, or pathpilot's own choices alone when
/// `sel` is `None` (multipath-tools' configuration not followed). `paths`
/// in the order multipath-tools lists them (udev's: `devpath_order`).
pub fn plan(length: u64, paths: &[PlanPath], sel: Option<&Selection>, own: &Own) -> Plan {
    let alua = paths.iter().any(|p| p.alua.is_some());
    let mut notes = vec![];
    let mut settings = vec![];
    let mut show = |setting: &str, value: String, origin: &Origin, followed: bool| {
        settings.push(Shown {
            setting: setting.into(),
            value,
            origin: origin.to_string(),
            followed,
        })
    };

    // Priorities: multipath-tools' prioritizers where pathpilot can tell
    // what they give, else one value for every path.
    let prios: Vec<Option<u32>> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| match sel.and_then(|s| s.prio.get(i)) {
            Some(s) => priority(&s.value, p.alua.as_ref()),
            None => Some(p.alua.map_or(1, |a| a.prio())),
        })
        .collect();
    if let Some(s) = sel
        && let Some(p) = s.prio.first()
    {
        show("prio", super::select::prio_text(&p.value), &p.origin, true);
        if prios.iter().any(Option::is_none) {
            notes.push(format!(
                "prio {}: pathpilot does not run this prioritizer; every path counts as one \
                 priority (one group under group_by_prio), where multipath-tools asks the array",
                p.value.name
            ));
        }
    }
    let cands: Vec<Candidate> = paths
        .iter()
        .zip(&prios)
        .map(|(p, pr)| Candidate {
            dev: p.dev,
            prio: pr.unwrap_or(1),
            tpg: p.alua.and_then(|a| a.group),
        })
        .collect();

    // The grouping.
    let own_grouping = own.default_grouping.clone().unwrap_or_else(|| Setting {
        value: if alua {
            Grouping::GroupByPrio
        } else {
            Grouping::Multibus
        },
        origin: pp(if alua {
            "pathpilot's default on an ALUA array"
        } else {
            "pathpilot's default"
        }),
    });
    let grouping = pick(
        own.grouping.clone(),
        sel.map(|s| s.path_grouping_policy.clone()),
        own_grouping,
    );
    if let Some(s) = sel {
        show(
            "path_grouping_policy",
            s.path_grouping_policy.value.name().into(),
            &s.path_grouping_policy.origin,
            grouping.value == s.path_grouping_policy.value,
        );
    }
    let idents = |g: Grouping| -> Vec<Option<&str>> {
        paths
            .iter()
            .map(|p| match g {
                Grouping::GroupBySerial => p.serial.as_deref(),
                Grouping::GroupByNodeName => p.node_name.as_deref(),
                _ => None,
            })
            .collect()
    };
    // Inside a group pathpilot lists paths in device-number order, as its
    // reloads keep them (the order inside a group selects nothing); the
    // groups' order is multipath-tools'.
    let groups: Vec<(u32, Vec<DevNum>)> =
        grouping::group_with(grouping.value, &cands, &idents(grouping.value))
            .into_iter()
            .map(|(p, mut g)| {
                g.sort();
                (p, g)
            })
            .collect();

    // The selector.
    let own_selector = own.default_selector.clone().unwrap_or_else(|| Setting {
        value: Selector::ServiceTime,
        origin: pp("pathpilot's default"),
    });
    let their_spec = sel.map(|s| s.path_selector.clone());
    let selector = pick(
        own.selector.clone(),
        their_spec.as_ref().map(|s| Setting {
            value: s.value.selector.clone(),
            origin: s.origin.clone(),
        }),
        own_selector,
    );
    let selector_args: Vec<String> = match &their_spec {
        Some(s) if s.value.selector == selector.value => s.value.args.clone(),
        _ => vec![],
    };
    if let Some(s) = &their_spec {
        show(
            "path_selector",
            s.value.to_string(),
            &s.origin,
            selector.value == s.value.selector,
        );
    }

    // Queueing and features.
    let their_queue: Option<Setting<Option<NoPathRetry>>> = sel.map(|s| s.no_path_retry.clone());
    let polling = sel.map_or(5, |s| s.polling_interval.value);
    let queueing = match (&own.features, &their_queue) {
        (Some(f), _) => Queueing {
            queue_if_no_path: f.value.contains(&Feature::QueueIfNoPath),
            fail_after_secs: None,
        },
        (None, Some(t)) if t.origin.specific() => match t.value {
            Some(NoPathRetry::Queue) => Queueing {
                queue_if_no_path: true,
                fail_after_secs: None,
            },
            Some(NoPathRetry::Checks(n)) => Queueing {
                queue_if_no_path: true,
                fail_after_secs: Some(f64::from(n) * f64::from(polling)),
            },
            _ => Queueing {
                queue_if_no_path: false,
                fail_after_secs: None,
            },
        },
        _ => Queueing {
            queue_if_no_path: own.default_queue_if_no_path,
            fail_after_secs: None,
        },
    };
    if let Some(t) = &their_queue {
        let value = t.value.map_or("undefined (fail)".into(), |v| v.to_string());
        let theirs_queue = matches!(t.value, Some(NoPathRetry::Queue | NoPathRetry::Checks(_)));
        show(
            "no_path_retry",
            value,
            &t.origin,
            theirs_queue == queueing.queue_if_no_path,
        );
        if let (Some(NoPathRetry::Checks(n)), Some(secs)) = (t.value, queueing.fail_after_secs) {
            notes.push(format!(
                "no_path_retry {n}: queue, then fail I/O after {n} checks of {polling} s \
                 ({secs:.0} s without a usable path): pathpilot's daemon does this on the maps \
                 it manages"
            ));
        }
    }
    let their_features = sel.map(|s| s.features.clone());
    let mut features = match (&own.features, &their_features) {
        (Some(f), _) => f.value.clone(),
        (None, Some(f)) => f.value.clone(),
        (None, None) => vec![],
    };
    features.retain(|f| *f != Feature::QueueIfNoPath);
    if queueing.queue_if_no_path {
        features.push(Feature::QueueIfNoPath);
    }
    if let Some(f) = &their_features {
        show(
            "features",
            features_text(&f.value),
            &f.origin,
            own.features.is_none(),
        );
    }

    // The hardware handler: multipath-tools', else alua on an ALUA array.
    let hw = match sel {
        Some(s) => {
            show(
                "hardware_handler",
                hw_text(&s.hardware_handler.value),
                &s.hardware_handler.origin,
                true,
            );
            s.hardware_handler.value.clone()
        }
        None => alua.then(|| HwHandler {
            name: "alua".into(),
            args: vec![],
        }),
    };
    if let Some(s) = sel {
        show(
            "path_checker",
            s.path_checker.value.clone(),
            &s.path_checker.origin,
            false,
        );
        show(
            "failback",
            s.failback.value.to_string(),
            &s.failback.origin,
            false,
        );
        if s.rr_weight.value == RrWeight::Priorities || s.rr_min_io_rq.value != 1 {
            notes.push(format!(
                "repeat counts: multipath-tools loads {}{} per path, which this kernel pins \
                 to 1 (>= 4.6); pathpilot loads 1",
                s.rr_min_io_rq.value,
                if s.rr_weight.value == RrWeight::Priorities {
                    " times the path's priority"
                } else {
                    ""
                }
            ));
        }
    }

    // pathpilot writes service-time's weight explicitly: the tuner sets it
    // per path later without changing the group's arity.
    let own_args = selector
        .value
        .default_path_args()
        .unwrap_or(PathArgs::Raw(vec!["1".into()]));
    let ours = build(
        length,
        &groups,
        &selector.value,
        &selector_args,
        &|_| own_args.clone(),
        features,
        hw.clone(),
    );

    let theirs = sel.map(|s| {
        let groups = grouping::group_with(
            s.path_grouping_policy.value,
            &cands,
            &idents(s.path_grouping_policy.value),
        );
        let mut f = s.features.value.clone();
        if matches!(
            s.no_path_retry.value,
            Some(NoPathRetry::Queue | NoPathRetry::Checks(_))
        ) {
            f.push(Feature::QueueIfNoPath);
        }
        let spec = &s.path_selector.value;
        let minio = s.rr_min_io_rq.value;
        let args = |_: DevNum| match &spec.selector {
            Selector::ServiceTime => PathArgs::ServiceTime {
                repeat_count: 1,
                relative_throughput: 1,
            },
            sel if sel.takes_repeat_count() => PathArgs::RepeatCount(1),
            _ => PathArgs::Raw(vec![minio.to_string()]),
        };
        build(
            length,
            &groups,
            &spec.selector,
            &spec.args,
            &args,
            f,
            s.hardware_handler.value.clone(),
        )
    });

    let differences = match (&theirs, sel) {
        (Some(t), Some(s)) => explain(&ours, t, s, &grouping, &selector, own, &queueing, &notes),
        _ => vec![],
    };
    Plan {
        ours,
        theirs,
        differences,
        settings,
        notes,
        queueing,
    }
}

/// pathpilot's explicit choice, else multipath-tools' where it is
/// specific, else pathpilot's default.
fn pick<T>(own: Option<Setting<T>>, theirs: Option<Setting<T>>, default: Setting<T>) -> Setting<T> {
    own.or(theirs.filter(|t| t.origin.specific()))
        .unwrap_or(default)
}

#[allow(clippy::too_many_arguments)]
fn explain(
    ours: &MultipathTable,
    theirs: &MultipathTable,
    sel: &Selection,
    grouping: &Setting<Grouping>,
    selector: &Setting<Selector>,
    own: &Own,
    queueing: &Queueing,
    notes: &[String],
) -> Vec<Difference> {
    differences(ours, theirs)
        .into_iter()
        .map(|(aspect, o, t)| {
            let (why, deliberate) = match aspect.as_str() {
                "path groups" if grouping.value != sel.path_grouping_policy.value => (
                    format!(
                        "{} from {}; multipath-tools' {} comes from {}",
                        grouping.value.name(),
                        grouping.origin,
                        sel.path_grouping_policy.value.name(),
                        sel.path_grouping_policy.origin
                    ),
                    true,
                ),
                "path groups" => (
                    notes
                        .iter()
                        .find(|n| n.starts_with("prio "))
                        .cloned()
                        .unwrap_or_else(|| "the paths' priorities differ".into()),
                    false,
                ),
                "selector" => (
                    format!(
                        "{} from {}; multipath-tools' from {}",
                        selector.value, selector.origin, sel.path_selector.origin
                    ),
                    true,
                ),
                "features" => {
                    let why = match &own.features {
                        Some(f) => format!("from {}", f.origin),
                        None if queueing.queue_if_no_path => format!(
                            "queue_if_no_path: pathpilot's default; multipath-tools' \
                             no_path_retry is {} ({})",
                            sel.no_path_retry
                                .value
                                .map_or("undefined".into(), |v| v.to_string()),
                            sel.no_path_retry.origin
                        ),
                        _ => "no queueing: pathpilot's default".into(),
                    };
                    (why, true)
                }
                _ => ("not explained by any setting".into(), false),
            };
            Difference {
                aspect,
                ours: o,
                theirs: t,
                why,
                deliberate,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
