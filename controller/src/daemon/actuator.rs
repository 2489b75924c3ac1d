//! Turns a tuner [`Settings`] into kernel state and back: table changes
//! (selector, weights, active paths) by a reload, queue knobs by sysfs
//! writes; and what the kernel shows afterwards, read back, is the result.
use anyhow::{Context, Result, anyhow};

use crate::{
    blockdev::DevNum,
    dm::Dm,
    mpath::{MultipathTable, Path as MPath, PathArgs, PriorityGroup, Selector},
    sysfs_knobs::{self, KnobFiles, QueueKnob},
    tuner::{Knob, Settings},
};

/// The map as the actuator needs it.
pub struct Target<'a> {
    pub map: &'a str,
    /// `dm-N`, for the queue knobs.
    pub kernel_name: &'a str,
    /// The paths the tuner works on, in its order: (kernel name, dev).
    /// With fixed groups, the first group's.
    pub paths: &'a [(String, DevNum)],
    /// The path groups are the map's own (adopted, or an array's priority
    /// groups): kept as they are; the tuner's knobs apply to the first.
    pub fixed_groups: bool,
}

fn read_u32(files: &mut KnobFiles, dev: &str, k: QueueKnob) -> Result<u32> {
    let v = files.read(dev, k)?;
    v.parse()
        .map_err(|_| anyhow!("{dev} {}: '{v}' is not a number", k.name()))
}

/// The honoured knobs as the kernel shows them now.
pub fn read_settings(dm: &Dm, t: &Target) -> Result<Settings> {
    let table = dm.multipath_table(t.map)?;
    settings_of(&table, t, &mut KnobFiles::default())
}

/// [`read_settings`] with the live table already read, the knob files
/// read through `files` (kept open for the next look; those of devices no
/// longer in `t` are closed).
pub fn settings_of(table: &MultipathTable, t: &Target, files: &mut KnobFiles) -> Result<Settings> {
    files.retain(|d| d == t.kernel_name || t.paths.iter().any(|(p, _)| p == d));
    let selector = table
        .groups
        .first()
        .map(|g| g.selector.clone())
        .unwrap_or(Selector::RoundRobin);
    let weights: Vec<u32> = if selector == Selector::ServiceTime {
        t.paths
            .iter()
            .map(|(_, d)| {
                table
                    .find_path(*d)
                    .and_then(|p| p.args.relative_throughput())
                    .unwrap_or(1)
            })
            .collect()
    } else {
        vec![]
    };
    // All equal weights weigh nothing: that is the "equal" setting.
    let weights = if weights.windows(2).all(|w| w[0] == w[1]) {
        vec![]
    } else {
        weights
    };
    let active_paths = if table.groups.len() > 1 || t.fixed_groups {
        table.groups.first().map_or(0, |g| g.paths.len())
    } else {
        table.paths().count()
    };
    // The paths share one queue_depth in the tuner's model; report the
    // smallest so a partial write is visible as a mismatch.
    let mut qd = u32::MAX;
    for (name, _) in t.paths {
        if let Ok(v) = read_u32(files, name, QueueKnob::QueueDepth) {
            qd = qd.min(v);
        }
    }
    Ok(Settings {
        selector,
        weights,
        active_paths,
        max_sectors_kb: read_u32(files, t.kernel_name, QueueKnob::MaxSectorsKb)?,
        nr_requests: read_u32(files, t.kernel_name, QueueKnob::NrRequests)?,
        scheduler: files.read(t.kernel_name, QueueKnob::Scheduler)?,
        queue_depth: if qd == u32::MAX { 0 } else { qd },
    })
}

/// The table for `s`: `active_paths` paths in group 1, the others in a
/// standby group 2, each group in the tuner's order. The active ones are
/// those of the highest service-time weights (the weights are the paths'
/// measured capacity; ties and unweighted paths go by the tuner's order):
/// fewer paths must not mean the slowest ones. Features and hardware
/// handler kept from `current`. With fixed groups, `current`'s groups stay
/// as they are: the selector changes in each, and the weights of the
/// first group's paths.
pub fn table_for(current: &MultipathTable, t: &Target, s: &Settings) -> Result<MultipathTable> {
    if t.fixed_groups {
        return fixed_table_for(current, t, s);
    }
    let args = |i: usize| -> Result<PathArgs> {
        let d = s
            .selector
            .default_path_args()
            .ok_or_else(|| anyhow!("selector {} needs explicit path arguments", s.selector))?;
        Ok(match (d, s.weights.get(i)) {
            (PathArgs::ServiceTime { repeat_count, .. }, Some(w)) => PathArgs::ServiceTime {
                repeat_count,
                relative_throughput: *w,
            },
            (d, _) => d,
        })
    };
    let k = s.active_paths.clamp(1, t.paths.len().max(1));
    let weight = |i: usize| match s.selector {
        Selector::ServiceTime => s.weights.get(i).copied().unwrap_or(1),
        _ => 1,
    };
    let mut rank: Vec<usize> = (0..t.paths.len()).collect();
    rank.sort_by_key(|&i| std::cmp::Reverse(weight(i)));
    let active = |i: usize| rank[..k.min(rank.len())].contains(&i);
    let mut groups = vec![];
    for in_group_1 in [true, false] {
        let paths = (0..t.paths.len())
            .filter(|&i| active(i) == in_group_1)
            .map(|i| -> Result<MPath> {
                Ok(MPath {
                    dev: t.paths[i].1,
                    args: args(i)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if !paths.is_empty() {
            groups.push(PriorityGroup {
                selector: s.selector.clone(),
                selector_args: vec![],
                paths,
            });
        }
    }
    Ok(MultipathTable {
        start: current.start,
        length: current.length,
        features: current.features.clone(),
        hw_handler: current.hw_handler.clone(),
        initial_pg: 1,
        groups,
    })
}

fn fixed_table_for(current: &MultipathTable, t: &Target, s: &Settings) -> Result<MultipathTable> {
    let default = s
        .selector
        .default_path_args()
        .ok_or_else(|| anyhow!("selector {} needs explicit path arguments", s.selector))?;
    let mut table = current.clone();
    for g in &mut table.groups {
        g.selector = s.selector.clone();
        g.selector_args.clear();
        for p in &mut g.paths {
            let w = t
                .paths
                .iter()
                .position(|(_, d)| *d == p.dev)
                .and_then(|i| s.weights.get(i));
            p.args = match (&default, w) {
                (PathArgs::ServiceTime { repeat_count, .. }, Some(w)) => PathArgs::ServiceTime {
                    repeat_count: *repeat_count,
                    relative_throughput: *w,
                },
                (d, _) => d.clone(),
            };
        }
    }
    Ok(table)
}

/// Sets knob `k` of `s` from its text form (as [`Settings::show`] gives
/// it): how pinned queue knobs are kept in the state file.
pub fn set_from_text(s: &mut Settings, k: Knob, v: &str) -> Result<()> {
    let num = || -> Result<u32> {
        v.parse()
            .map_err(|_| anyhow!("'{v}' is not a number for {}", k.name()))
    };
    match k {
        Knob::MaxSectorsKb => s.max_sectors_kb = num()?,
        Knob::NrRequests => s.nr_requests = num()?,
        Knob::QueueDepth => s.queue_depth = num()?,
        Knob::Scheduler => s.scheduler = v.to_string(),
        // The table keeps these itself.
        Knob::Selector | Knob::Weights | Knob::ActivePaths => {}
    }
    Ok(())
}

/// Writes the queue knobs (sysfs) of `want` that differ from `now`: the
/// dm device's limits and scheduler, every tuned path's queue_depth.
/// Whether it wrote any (if not, `now` still stands as read).
pub fn write_queue_knobs(t: &Target, now: &Settings, want: &Settings) -> Result<bool> {
    let mut wrote = false;
    for k in want.diff(now) {
        let (dev, sk, v) = match k {
            Knob::MaxSectorsKb => (
                t.kernel_name,
                QueueKnob::MaxSectorsKb,
                want.max_sectors_kb.to_string(),
            ),
            Knob::NrRequests => (
                t.kernel_name,
                QueueKnob::NrRequests,
                want.nr_requests.to_string(),
            ),
            Knob::Scheduler => (t.kernel_name, QueueKnob::Scheduler, want.scheduler.clone()),
            Knob::QueueDepth => {
                for (name, _) in t.paths {
                    sysfs_knobs::write(name, QueueKnob::QueueDepth, &want.queue_depth.to_string())
                        .with_context(|| format!("{} queue_depth", t.map))?;
                    wrote = true;
                }
                continue;
            }
            _ => continue,
        };
        sysfs_knobs::write(dev, sk, &v).with_context(|| format!("{} {}", t.map, k.name()))?;
        wrote = true;
    }
    Ok(wrote)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(paths: &[(String, DevNum)]) -> Target<'_> {
        Target {
            map: "mpatha",
            kernel_name: "dm-0",
            paths,
            fixed_groups: false,
        }
    }

    #[test]
    fn tables_follow_settings() {
        let paths: Vec<(String, DevNum)> = (0..4)
            .map(|i| {
                (
                    format!("sd{}", (b'a' + i as u8) as char),
                    DevNum::new(8, i * 16),
                )
            })
            .collect();
        let cur: MultipathTable = "0 2097152 multipath 1 queue_if_no_path 0 1 1 round-robin 0 4 1 8:0 1 8:16 1 8:32 1 8:48 1"
            .parse()
            .unwrap();
        let mut s = crate::tuner::settings::example(4);
        s.selector = Selector::ServiceTime;
        s.weights = vec![13, 25, 50, 100];
        let t = table_for(&cur, &target(&paths), &s).unwrap();
        assert_eq!(
            t.render_line(),
            "0 2097152 multipath 1 queue_if_no_path 0 1 1 service-time 0 4 2 8:0 1 13 8:16 1 25 8:32 1 50 8:48 1 100"
        );
        let back = settings_of(&t, &target(&paths), &mut KnobFiles::default()).unwrap_err();
        // Reading the queue knobs needs the real devices; the table part is
        // checked through the model here and against the kernel in the VM.
        assert!(back.to_string().contains("dm-0"), "{back}");
        s.selector = Selector::QueueLength;
        s.weights.clear();
        s.active_paths = 2;
        let t = table_for(&cur, &target(&paths), &s).unwrap();
        assert_eq!(
            t.render_line(),
            "0 2097152 multipath 1 queue_if_no_path 0 2 1 queue-length 0 2 1 8:0 1 8:16 1 queue-length 0 2 1 8:32 1 8:48 1"
        );
        // Fewer weighted paths: the two of the most capacity stay active,
        // in path order, whatever their place in the map.
        s.selector = Selector::ServiceTime;
        s.weights = vec![50, 13, 100, 25];
        let t = table_for(&cur, &target(&paths), &s).unwrap();
        assert_eq!(
            t.render_line(),
            "0 2097152 multipath 1 queue_if_no_path 0 2 1 service-time 0 2 2 8:0 1 50 8:32 1 100 service-time 0 2 2 8:16 1 13 8:48 1 25"
        );
        s.active_paths = 1;
        s.weights = vec![100, 100, 13, 25];
        let t = table_for(&cur, &target(&paths), &s).unwrap();
        assert!(
            t.render_line().contains(
                "service-time 0 1 2 8:0 1 100 service-time 0 3 2 8:16 1 100 8:32 1 13 8:48 1 25"
            ),
            "{}",
            t.render_line()
        );
    }

    #[test]
    fn fixed_groups_keep_their_shape() {
        // An ALUA map: the optimized ports first, with the handler.
        let cur: MultipathTable = "0 2097152 multipath 0 1 alua 2 1 round-robin 0 2 1 8:0 1 8:16 1 round-robin 0 2 1 8:32 1 8:48 1"
            .parse()
            .unwrap();
        let first: Vec<(String, DevNum)> = vec![
            ("sda".into(), DevNum::new(8, 0)),
            ("sdb".into(), DevNum::new(8, 16)),
        ];
        let t = Target {
            fixed_groups: true,
            ..target(&first)
        };
        let mut s = crate::tuner::settings::example(2);
        s.selector = Selector::ServiceTime;
        s.weights = vec![50, 100];
        s.active_paths = 1; // not the tuner's to change here
        assert_eq!(
            table_for(&cur, &t, &s).unwrap().render_line(),
            "0 2097152 multipath 0 1 alua 2 1 service-time 0 2 2 8:0 1 50 8:16 1 100 service-time 0 2 2 8:32 1 1 8:48 1 1"
        );
    }
}
