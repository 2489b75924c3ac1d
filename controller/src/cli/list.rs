//! `pathpilot list`: multipath maps and their paths, in the shape admins
//! know from `multipath -ll`.
use anyhow::Result;
use clap::Args as ClapArgs;
use serde::Serialize;

use crate::{
    blockdev::DevNum,
    discovery::PathDevice,
    dm::{
        Dm, DmError, MapInfo,
        readback::{features_string, hwhandler_string},
    },
    mpath::{GroupState, MultipathStatus, MultipathTable, PathState},
};

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Only this map (default: every multipath map).
    pub map: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct PathView {
    /// `H:C:T:L`, or `#:#:#:#` when the device is gone.
    pub hctl: String,
    /// Kernel name, `-` when the device is gone.
    pub name: String,
    pub dev: DevNum,
    /// The kernel's view: `active` or `failed`.
    pub dm_state: String,
    /// From the SCSI device state (a real checker sends TUR): `ready`,
    /// `faulty`, `undef`.
    pub checker: String,
    /// sysfs `device/state`: `running`, `offline`, ...
    pub online: String,
    pub fail_count: u32,
    /// The selector's arguments for this path, as the table has them.
    pub args: Vec<String>,
    /// The selector's per-path status, as the kernel prints it.
    pub info: Vec<String>,
    /// On an ALUA array: the port's access state (`active/optimized`, ...).
    pub alua: Option<String>,
    /// ... and the priority multipath-tools' alua prioritizer gives it.
    #[serde(skip)]
    pub alua_prio: Option<u32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupView {
    /// 1-based, in priority order (the table's order).
    pub number: usize,
    /// `service-time 0`: the selector and its group arguments.
    pub policy: String,
    /// On an ALUA array, the best priority of its paths as multipath-tools'
    /// alua prioritizer gives them (50 optimized, 10 non-optimized, ...);
    /// otherwise the table order: the first group gets the highest.
    pub prio: u32,
    /// `active`, `enabled` or `disabled`.
    pub status: String,
    pub paths: Vec<PathView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MapView {
    pub name: String,
    /// From the DM UUID `mpath-<wwid>`.
    pub wwid: Option<String>,
    pub uuid: Option<String>,
    /// `dm-0`.
    pub dm: String,
    pub dev: DevNum,
    pub vendor: String,
    pub model: String,
    pub size_sectors: u64,
    pub features: String,
    pub hwhandler: String,
    pub read_only: bool,
    pub open_count: i32,
    pub suspended: bool,
    pub groups: Vec<GroupView>,
    /// The live table and status lines, verbatim from the kernel (rendered
    /// through the model).
    pub table: String,
    pub status: String,
}

/// `size=` as multipath prints it: one decimal below 10 units.
pub fn human_size(sectors: u64) -> String {
    let mut s = sectors as f64 / 2.0;
    let units = ['K', 'M', 'G', 'T', 'P', 'E'];
    let mut u = 0;
    while s >= 1024.0 && u + 1 < units.len() {
        s /= 1024.0;
        u += 1;
    }
    if s < 10.0 {
        format!("{s:.1}{}", units[u])
    } else {
        format!("{s:.0}{}", units[u])
    }
}

/// The map's view, or `None` if it is not a multipath map.
pub fn view(dm: &Dm, name: &str) -> Result<Option<MapView>, DmError> {
    let info = dm.info(name)?;
    let table = match dm.multipath_table(name) {
        Ok(t) => t,
        Err(DmError::NotMultipath { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let status = dm.multipath_status(name)?;
    Ok(Some(build(&info, &table, &status)))
}

/// Assembles a view from the kernel's answers and sysfs.
pub fn build(info: &MapInfo, table: &MultipathTable, status: &MultipathStatus) -> MapView {
    let mut vendor = String::new();
    let mut model = String::new();
    let groups = table
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let gs = status.groups.get(i);
            let paths: Vec<PathView> = g
                .paths
                .iter()
                .map(|p| {
                    let st = status.path(p.dev);
                    let bd = p.dev;
                    let dev = crate::blockdev::BlockDev::from_dev(bd)
                        .and_then(|b| PathDevice::read(&b.name));
                    if let Some(d) = &dev
                        && vendor.is_empty()
                    {
                        vendor = d.vendor.clone();
                        model = d.model.clone();
                    }
                    let online = dev
                        .as_ref()
                        .and_then(|d| d.state.clone())
                        .unwrap_or_else(|| "-".into());
                    let checker = match (&dev, online.as_str()) {
                        (None, _) => "faulty",
                        (Some(_), "running") => "ready",
                        (Some(_), "offline" | "transport-offline") => "faulty",
                        (Some(_), "-") => "ready",
                        _ => "undef",
                    };
                    PathView {
                        hctl: dev
                            .as_ref()
                            .and_then(|d| d.hctl.clone())
                            .unwrap_or_else(|| "#:#:#:#".into()),
                        name: dev.as_ref().map_or_else(|| "-".into(), |d| d.name.clone()),
                        dev: bd,
                        dm_state: match st.map(|s| s.state) {
                            Some(PathState::Active) => "active",
                            Some(PathState::Failed) => "failed",
                            None => "undef",
                        }
                        .into(),
                        checker: checker.into(),
                        online,
                        fail_count: st.map_or(0, |s| s.fail_count),
                        args: path_args(table, p.dev),
                        info: st.map(|s| s.info.clone()).unwrap_or_default(),
                        alua: dev
                            .as_ref()
                            .and_then(|d| d.alua)
                            .map(|a| a.state.name().to_string()),
                        alua_prio: dev.as_ref().and_then(|d| d.alua).map(|a| a.prio()),
                    }
                })
                .collect();
            let mut policy = vec![
                g.selector.name().to_string(),
                g.selector_args.len().to_string(),
            ];
            policy.extend(g.selector_args.iter().cloned());
            let alua_prio = paths.iter().filter_map(|p: &PathView| p.alua_prio).max();
            GroupView {
                number: i + 1,
                policy: policy.join(" "),
                prio: alua_prio.unwrap_or((table.groups.len() - i) as u32),
                status: match gs.map(|s| s.state) {
                    Some(GroupState::Active) => "active",
                    Some(GroupState::Enabled) => "enabled",
                    Some(GroupState::Disabled) => "disabled",
                    None => "undef",
                }
                .into(),
                paths,
            }
        })
        .collect();
    MapView {
        name: info.name.clone(),
        wwid: info
            .uuid
            .as_deref()
            .and_then(|u| u.strip_prefix("mpath-"))
            .map(str::to_string),
        uuid: info.uuid.clone(),
        dm: info.kernel_name(),
        dev: info.dev,
        vendor,
        model,
        size_sectors: table.length,
        features: features_string(table),
        hwhandler: hwhandler_string(table),
        read_only: info.read_only,
        open_count: info.open_count,
        suspended: info.suspended,
        groups,
        table: table.render_line(),
        status: status.render_line(),
    }
}

fn path_args(t: &MultipathTable, dev: DevNum) -> Vec<String> {
    use crate::mpath::PathArgs;
    match t.find_path(dev).map(|p| &p.args) {
        None | Some(PathArgs::Empty) => vec![],
        Some(PathArgs::RepeatCount(n)) => vec![n.to_string()],
        Some(PathArgs::ServiceTime {
            repeat_count,
            relative_throughput,
        }) => vec![repeat_count.to_string(), relative_throughput.to_string()],
        Some(PathArgs::CpuMask(m)) => vec![m.as_str().to_string()],
        Some(PathArgs::Raw(t)) => t.clone(),
    }
}

/// The `multipath -ll` text of one map.
pub fn render(m: &MapView) -> String {
    let mut out = String::new();
    let wwid = m.wwid.as_deref().or(m.uuid.as_deref()).unwrap_or("-");
    let vm = if m.vendor.is_empty() {
        "##,##".to_string()
    } else {
        format!("{},{}", m.vendor, m.model)
    };
    out.push_str(&format!("{} ({}) {} {}\n", m.name, wwid, m.dm, vm));
    out.push_str(&format!(
        "size={} features='{}' hwhandler='{}' wp={}{}\n",
        human_size(m.size_sectors),
        m.features,
        m.hwhandler,
        if m.read_only { "ro" } else { "rw" },
        if m.suspended { " SUSPENDED" } else { "" }
    ));
    let ng = m.groups.len();
    for (gi, g) in m.groups.iter().enumerate() {
        let last_g = gi + 1 == ng;
        out.push_str(&format!(
            "{}-+- policy='{}' prio={} status={}\n",
            if last_g { '`' } else { '|' },
            g.policy,
            g.prio,
            g.status
        ));
        let np = g.paths.len();
        for (pi, p) in g.paths.iter().enumerate() {
            out.push_str(&format!(
                "{} {}- {} {} {} {} {} {}{}\n",
                if last_g { ' ' } else { '|' },
                if pi + 1 == np { '`' } else { '|' },
                p.hctl,
                p.name,
                p.dev,
                p.dm_state,
                p.checker,
                p.online,
                p.alua
                    .as_deref()
                    .map(|a| format!(" {a}"))
                    .unwrap_or_default()
            ));
        }
    }
    out
}

/// Every multipath map, by name.
pub fn all_views(dm: &Dm) -> Result<Vec<MapView>, DmError> {
    let mut v = Vec::new();
    for e in dm.list()? {
        match view(dm, &e.name) {
            Ok(Some(m)) => v.push(m),
            Ok(None) => {}
            // Removed between list and info: not an error for a listing.
            Err(DmError::NoSuchMap(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(v)
}

pub fn run(args: Args) -> Result<()> {
    let dm = Dm::open()?;
    let maps = match &args.map {
        Some(name) => match view(&dm, name)? {
            Some(m) => vec![m],
            None => {
                return Err(DmError::NotMultipath {
                    map: name.clone(),
                    targets: dm
                        .table(name)?
                        .iter()
                        .map(|t| t.target_type.clone())
                        .collect::<Vec<_>>()
                        .join(", "),
                }
                .into());
            }
        },
        None => all_views(&dm)?,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&maps)?);
    } else {
        for m in &maps {
            print!("{}", render(m));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_like_multipath() {
        assert_eq!(human_size(2 * 1024 * 1024), "1.0G");
        assert_eq!(human_size(2 * 1024 * 1024 * 20), "20G");
        assert_eq!(human_size(1024), "512K");
        assert_eq!(human_size(2 * 1024 * 1536), "1.5G");
    }

    #[test]
    fn renders_the_multipath_ll_shape() {
        let info = MapInfo {
            name: "mpatha".into(),
            uuid: Some("mpath-35000c500deadbeef".into()),
            dev: DevNum::new(254, 0),
            open_count: 0,
            event_nr: 0,
            suspended: false,
            read_only: false,
            live_table: true,
            inactive_table: false,
        };
        let t = MultipathTable::parse_line(
            "0 2097152 multipath 0 0 2 1 service-time 0 1 2 8:0 1 1 round-robin 0 1 1 8:16 1",
        )
        .unwrap();
        let s = MultipathStatus::parse_line(
            "0 2097152 multipath 2 0 0 0 2 1 A 0 1 2 8:0 A 0 0 1 E 0 1 0 8:16 F 1",
        )
        .unwrap();
        let m = build(&info, &t, &s);
        let text = render(&m);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("mpatha (35000c500deadbeef) dm-0 "),
            "{text}"
        );
        assert_eq!(lines[1], "size=1.0G features='0' hwhandler='0' wp=rw");
        assert_eq!(
            lines[2],
            "|-+- policy='service-time 0' prio=2 status=active"
        );
        assert!(
            lines[3].starts_with("| `- ") && lines[3].contains(" 8:0 active "),
            "{text}"
        );
        assert_eq!(
            lines[4],
            "`-+- policy='round-robin 0' prio=1 status=enabled"
        );
        assert!(
            lines[5].starts_with("  `- ") && lines[5].contains(" 8:16 failed "),
            "{text}"
        );
        assert_eq!(m.groups[1].paths[0].fail_count, 1);
    }
}
