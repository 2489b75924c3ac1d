//! Turns a tuner [`Settings`] into kernel state and back: table changes
//! (selector, weights, active paths) by a reload, queue knobs by sysfs
//! writes; and what the kernel shows afterwards, read back, is the result.
use anyhow::{Context, Result, anyhow};

use crate::{
    blockdev::DevNum,
    dm::Dm,
    mpath::{MultipathTable, Path as MPath, PathArgs, PriorityGroup, Selector},
    sysfs_knobs::{self, Knob as SysKnob},
    tuner::{Knob, Settings},
};

/// The map as the actuator needs it.
pub struct Target<'a> {
    pub map: &'a str,
    /// `dm-N`, for the queue knobs.
    pub kernel_name: &'a str,
    /// The map's paths in the tuner's order: (kernel name, dev).
    pub paths: &'a [(String, DevNum)],
}

fn read_u32(dev: &str, k: SysKnob) -> Result<u32> {
    let v = sysfs_knobs::read(dev, k)?;
    v.parse()
        .map_err(|_| anyhow!("{dev} {}: '{v}' is not a number", k.name()))
}

/// The honoured knobs as the kernel shows them now.
pub fn read_settings(dm: &Dm, t: &Target) -> Result<Settings> {
    let table = dm.multipath_table(t.map)?;
    settings_of(&table, t)
}

fn settings_of(table: &MultipathTable, t: &Target) -> Result<Settings> {
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
    let active_paths = if table.groups.len() > 1 {
        table.groups[0].paths.len()
    } else {
        table.paths().count()
    };
    // The paths share one queue_depth in the tuner's model; report the
    // smallest so a partial write is visible as a mismatch.
    let mut qd = u32::MAX;
    for (name, _) in t.paths {
        if let Ok(v) = read_u32(name, SysKnob::QueueDepth) {
            qd = qd.min(v);
        }
    }
    Ok(Settings {
        selector,
        weights,
        active_paths,
        max_sectors_kb: read_u32(t.kernel_name, SysKnob::MaxSectorsKb)?,
        nr_requests: read_u32(t.kernel_name, SysKnob::NrRequests)?,
        scheduler: sysfs_knobs::read(t.kernel_name, SysKnob::Scheduler)?,
        queue_depth: if qd == u32::MAX { 0 } else { qd },
    })
}

/// The table for `s`: the first `active_paths` paths (in the tuner's order)
/// in group 1, the others in a standby group 2; features and hardware
/// handler kept from `current`.
pub fn table_for(current: &MultipathTable, t: &Target, s: &Settings) -> Result<MultipathTable> {
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
    let mut groups = vec![];
    for range in [0..k, k..t.paths.len()] {
        let paths = range
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

/// Applies `to` (which differs from the kernel's state in `knob`) and
/// returns the settings read back, with the reload's stall in ms.
pub fn apply(dm: &Dm, t: &Target, knob: Knob, to: &Settings) -> Result<(Settings, Option<f64>)> {
    let mut stall = None;
    let mut now = read_settings(dm, t)?;
    if knob.needs_reload() || to.diff(&now).iter().any(|k| k.needs_reload()) {
        let current = dm.multipath_table(t.map)?;
        let table = table_for(&current, t, to)?;
        let timing = dm
            .reload(t.map, &table)
            .with_context(|| format!("reloading {}", t.map))?;
        stall = Some(timing.stall.as_secs_f64() * 1000.0);
        // A new table recomputes the dm queue's limits: max_sectors_kb is
        // back at its default, so compare the sysfs knobs with what the
        // kernel holds after the reload, not before it.
        now = read_settings(dm, t)?;
    }
    for k in to.diff(&now) {
        let (dev, sk, v) = match k {
            Knob::MaxSectorsKb => (
                t.kernel_name,
                SysKnob::MaxSectorsKb,
                to.max_sectors_kb.to_string(),
            ),
            Knob::NrRequests => (
                t.kernel_name,
                SysKnob::NrRequests,
                to.nr_requests.to_string(),
            ),
            Knob::Scheduler => (t.kernel_name, SysKnob::Scheduler, to.scheduler.clone()),
            Knob::QueueDepth => {
                for (name, _) in t.paths {
                    sysfs_knobs::write(name, SysKnob::QueueDepth, &to.queue_depth.to_string())?;
                }
                continue;
            }
            _ => continue,
        };
        sysfs_knobs::write(dev, sk, &v)?;
    }
    Ok((read_settings(dm, t)?, stall))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(paths: &[(String, DevNum)]) -> Target<'_> {
        Target {
            map: "mpatha",
            kernel_name: "dm-0",
            paths,
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
        let back = settings_of(&t, &target(&paths)).unwrap_err();
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
    }
}
