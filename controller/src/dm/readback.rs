//! Comparing a table pathpilot loaded with the table the kernel reports, so
//! that only what the kernel kept is ever reported as applied.
use serde::Serialize;

use crate::{
    blockdev::DevNum,
    mpath::{Feature, MultipathTable, PathArgs, QueueMode, Selector},
};

/// The note for a repeat count the kernel replaced by 1.
pub const PINNED: &str = "pinned to 1 by this kernel (>= 4.6)";

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoteKind {
    /// A value the kernel is known to replace (repeat count > 1).
    Pinned,
    /// A value the kernel prints differently without changing its meaning
    /// (hw handler arguments, default queue_mode, initial group).
    Normalised,
    /// A difference nothing explains.
    Mismatch,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Note {
    pub kind: NoteKind,
    /// What the note is about: `repeat_count of 8:16`, `features`.
    pub what: String,
    pub requested: String,
    pub applied: String,
    pub why: String,
}

impl Note {
    pub fn describe(&self) -> String {
        match self.kind {
            NoteKind::Pinned => format!(
                "{}: requested {}, reads back {}: {}",
                self.what, self.requested, self.applied, self.why
            ),
            NoteKind::Normalised => format!(
                "{}: requested {}, kernel shows {} ({})",
                self.what, self.requested, self.applied, self.why
            ),
            NoteKind::Mismatch => format!(
                "{}: requested {}, but the kernel applied {} ({})",
                self.what, self.requested, self.applied, self.why
            ),
        }
    }
}

/// The result of a read-back.
#[derive(Clone, Debug, Serialize)]
pub struct Readback {
    /// The table as the kernel reports it, rendered.
    pub applied: String,
    /// True when the kernel reports exactly the requested table.
    pub exact: bool,
    pub notes: Vec<Note>,
}

impl Readback {
    /// Whether anything differs that the kernel's known behaviour does not
    /// explain.
    pub fn has_mismatch(&self) -> bool {
        self.notes.iter().any(|n| n.kind == NoteKind::Mismatch)
    }

    pub fn pinned(&self) -> bool {
        self.notes.iter().any(|n| n.kind == NoteKind::Pinned)
    }
}

fn feature_text(fs: &[Feature]) -> String {
    let mut t = Vec::new();
    for f in fs {
        t.extend(feature_tokens(f));
    }
    let mut out = vec![t.len().to_string()];
    out.extend(t);
    out.join(" ")
}

/// The tokens of one feature as the table carries them.
pub fn feature_tokens(f: &Feature) -> Vec<String> {
    match f {
        Feature::PgInitRetries(n) | Feature::PgInitDelayMsecs(n) => {
            vec![f.name().to_string(), n.to_string()]
        }
        Feature::QueueMode(m) => vec![f.name().to_string(), m.as_str().to_string()],
        Feature::Other(t) => t.clone(),
        _ => vec![f.name().to_string()],
    }
}

/// `0`, `1 queue_if_no_path`: the count-prefixed form `multipath -ll` shows.
pub fn features_string(t: &MultipathTable) -> String {
    feature_text(&t.features)
}

/// `0` or `1 alua`.
pub fn hwhandler_string(t: &MultipathTable) -> String {
    match &t.hw_handler {
        None => "0".into(),
        Some(h) => {
            let mut v = vec![(1 + h.args.len()).to_string(), h.name.clone()];
            v.extend(h.args.iter().cloned());
            v.join(" ")
        }
    }
}

/// Compares what was loaded with what reads back.
pub fn compare(requested: &MultipathTable, applied: &MultipathTable) -> Readback {
    let mut notes = Vec::new();
    let exact = requested == applied;
    if !exact {
        compare_features(requested, applied, &mut notes);
        compare_hw(requested, applied, &mut notes);
        if requested.initial_pg != applied.initial_pg {
            notes.push(Note {
                kind: NoteKind::Normalised,
                what: "initial path group".into(),
                requested: requested.initial_pg.to_string(),
                applied: applied.initial_pg.to_string(),
                why: "the kernel prints the group in use".into(),
            });
        }
        compare_groups(requested, applied, &mut notes);
        if (requested.start, requested.length) != (applied.start, applied.length) {
            notes.push(Note {
                kind: NoteKind::Mismatch,
                what: "extent".into(),
                requested: format!("{} {}", requested.start, requested.length),
                applied: format!("{} {}", applied.start, applied.length),
                why: "different sector range".into(),
            });
        }
    }
    Readback {
        applied: applied.render_line(),
        exact,
        notes,
    }
}

fn compare_features(r: &MultipathTable, a: &MultipathTable, notes: &mut Vec<Note>) {
    // queue_mode rq/mq are the default and are not printed since 5.0.
    let significant = |fs: &[Feature]| -> Vec<Feature> {
        fs.iter()
            .filter(|f| !matches!(f, Feature::QueueMode(QueueMode::Rq | QueueMode::Mq)))
            .cloned()
            .collect()
    };
    let (mut rs, mut as_) = (significant(&r.features), significant(&a.features));
    if r.features == a.features {
        return;
    }
    let key = |f: &Feature| f.name().to_string();
    rs.sort_by_key(key);
    as_.sort_by_key(key);
    let (kind, why) = if rs == as_ {
        (
            NoteKind::Normalised,
            "same features; the kernel prints them in its own order and omits the default queue_mode",
        )
    } else {
        (NoteKind::Mismatch, "the kernel kept different features")
    };
    notes.push(Note {
        kind,
        what: "features".into(),
        requested: feature_text(&r.features),
        applied: feature_text(&a.features),
        why: why.into(),
    });
}

fn compare_hw(r: &MultipathTable, a: &MultipathTable, notes: &mut Vec<Note>) {
    if r.hw_handler == a.hw_handler {
        return;
    }
    let same_name =
        r.hw_handler.as_ref().map(|h| &h.name) == a.hw_handler.as_ref().map(|h| &h.name);
    let retain = a.has_feature("retain_attached_hw_handler");
    let (kind, why) = if same_name {
        (
            NoteKind::Normalised,
            "the kernel does not print handler arguments",
        )
    } else if retain {
        (
            NoteKind::Normalised,
            "retain_attached_hw_handler: the handler already attached is used",
        )
    } else {
        (NoteKind::Mismatch, "a different hardware handler")
    };
    notes.push(Note {
        kind,
        what: "hardware handler".into(),
        requested: hwhandler_string(r),
        applied: hwhandler_string(a),
        why: why.into(),
    });
}

fn compare_groups(r: &MultipathTable, a: &MultipathTable, notes: &mut Vec<Note>) {
    if r.groups.len() != a.groups.len() {
        notes.push(Note {
            kind: NoteKind::Mismatch,
            what: "path groups".into(),
            requested: r.groups.len().to_string(),
            applied: a.groups.len().to_string(),
            why: "a different number of groups".into(),
        });
        return;
    }
    for (i, (rg, ag)) in r.groups.iter().zip(&a.groups).enumerate() {
        let g = i + 1;
        if rg.selector != ag.selector {
            notes.push(Note {
                kind: NoteKind::Mismatch,
                what: format!("selector of group {g}"),
                requested: rg.selector.to_string(),
                applied: ag.selector.to_string(),
                why: "a different path selector".into(),
            });
            continue;
        }
        let hst = rg.selector == Selector::HistoricalServiceTime;
        if rg.selector_args != ag.selector_args {
            notes.push(Note {
                kind: if hst {
                    NoteKind::Normalised
                } else {
                    NoteKind::Mismatch
                },
                what: format!("selector arguments of group {g}"),
                requested: rg.selector_args.join(" "),
                applied: ag.selector_args.join(" "),
                why: if hst {
                    "historical-service-time prints its effective base weight and threshold".into()
                } else {
                    "different selector arguments".into()
                },
            });
        }
        let rdevs: Vec<_> = rg.paths.iter().map(|p| p.dev).collect();
        let adevs: Vec<_> = ag.paths.iter().map(|p| p.dev).collect();
        if rdevs != adevs {
            let fmt = |v: &[DevNum]| {
                v.iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            notes.push(Note {
                kind: NoteKind::Mismatch,
                what: format!("paths of group {g}"),
                requested: fmt(&rdevs),
                applied: fmt(&adevs),
                why: "different paths".into(),
            });
            continue;
        }
        for (rp, ap) in rg.paths.iter().zip(&ag.paths) {
            compare_path_args(g, &rg.selector, rp.dev, &rp.args, &ap.args, notes);
        }
    }
}

/// Path arguments for a message: `(none)` where there are none.
fn shown_args(a: &PathArgs) -> String {
    match a {
        PathArgs::Empty => "(none)".into(),
        a => a.text(),
    }
}

fn compare_path_args(
    g: usize,
    sel: &Selector,
    dev: DevNum,
    r: &PathArgs,
    a: &PathArgs,
    notes: &mut Vec<Note>,
) {
    if r == a {
        return;
    }
    let (rrc, arc) = (r.repeat_count(), a.repeat_count());
    if sel.takes_repeat_count()
        && let (Some(rrc), Some(arc)) = (rrc, arc)
        && rrc != arc
    {
        notes.push(Note {
            kind: if rrc > 1 && arc == 1 {
                NoteKind::Pinned
            } else {
                NoteKind::Mismatch
            },
            what: format!("repeat_count of {dev} (group {g})"),
            requested: rrc.to_string(),
            applied: arc.to_string(),
            why: if rrc > 1 && arc == 1 {
                PINNED.into()
            } else {
                "a different repeat count".into()
            },
        });
    }
    if *sel == Selector::ServiceTime && r.relative_throughput() != a.relative_throughput() {
        notes.push(Note {
            kind: NoteKind::Mismatch,
            what: format!("relative_throughput of {dev} (group {g})"),
            requested: r
                .relative_throughput()
                .map_or("?".into(), |w| w.to_string()),
            applied: a
                .relative_throughput()
                .map_or("?".into(), |w| w.to_string()),
            why: "a different weight".into(),
        });
    }
    let explained = r.repeat_count() != a.repeat_count()
        || (r.relative_throughput() != a.relative_throughput());
    let same_meaning =
        r.repeat_count() == a.repeat_count() && r.relative_throughput() == a.relative_throughput();
    if !explained {
        notes.push(Note {
            kind: if same_meaning || *sel == Selector::HistoricalServiceTime {
                NoteKind::Normalised
            } else {
                NoteKind::Mismatch
            },
            what: format!("arguments of {dev} (group {g})"),
            requested: shown_args(r),
            applied: shown_args(a),
            why: "the kernel prints the selector's own argument form".into(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> MultipathTable {
        MultipathTable::parse_line(s).unwrap()
    }

    #[test]
    fn exact_read_back_has_no_notes() {
        let a = t("0 8 multipath 0 0 1 1 service-time 0 2 2 8:0 1 1 8:16 1 4");
        let r = compare(&a, &a.clone());
        assert!(r.exact && r.notes.is_empty());
    }

    #[test]
    fn repeat_count_is_reported_pinned_never_applied() {
        let req = t("0 8 multipath 0 0 1 1 round-robin 0 2 1 8:0 100 8:16 100");
        let got = t("0 8 multipath 0 0 1 1 round-robin 0 2 1 8:0 1 8:16 1");
        let r = compare(&req, &got);
        assert!(!r.exact && r.pinned() && !r.has_mismatch());
        assert_eq!(r.notes.len(), 2);
        assert!(r.notes[0].describe().contains(PINNED), "{:?}", r.notes);
    }

    #[test]
    fn lost_weights_are_a_mismatch() {
        let req = t("0 8 multipath 0 0 1 1 service-time 0 2 2 8:0 1 5 8:16 1 1");
        let got = t("0 8 multipath 0 0 1 1 service-time 0 2 2 8:0 1 1 8:16 1 1");
        let r = compare(&req, &got);
        assert!(r.has_mismatch());
    }

    #[test]
    fn kernel_normalisations_are_not_mismatches() {
        let req =
            t("0 8 multipath 3 queue_mode mq queue_if_no_path 1 alua 1 1 round-robin 0 1 1 8:0 1");
        let got = t("0 8 multipath 1 queue_if_no_path 1 alua 1 1 round-robin 0 1 1 8:0 1");
        let r = compare(&req, &got);
        assert!(!r.has_mismatch(), "{:?}", r.notes);
        assert_eq!(features_string(&got), "1 queue_if_no_path");
        assert_eq!(hwhandler_string(&got), "1 alua");
    }
}
