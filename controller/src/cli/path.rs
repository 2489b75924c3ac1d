//! `pathpilot path fail|reinstate|unmark DEV`: a path's state in its map,
//! by message (no reload, no stall), read back from the map's status; or
//! the end of a marginal state the daemon judged.
use anyhow::{Result, bail};
use clap::{Args as ClapArgs, ValueEnum};
use serde::Serialize;

use crate::{
    blockdev::{DevNum, display_name},
    cli::{
        NotFoundError,
        reload::resolve_path,
        route::{self, Via},
    },
    ctl::protocol::ControlRequest,
    dm::{Dm, Message},
    mpath::PathState,
};

#[derive(Clone, Copy, Debug, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Mark the path failed: no I/O goes to it until reinstated.
    Fail,
    /// Put a failed path back into use.
    Reinstate,
    /// End the marginal state the daemon judged the path in: it leaves
    /// the map's last group and serves again at once (daemon only).
    Unmark,
}

#[derive(ClapArgs, Debug)]
pub struct Args {
    pub action: Action,
    /// The path: `sdb`, `/dev/sdb` or `8:16` (MAJ:MIN works after the disk is gone).
    pub dev: String,
    /// The map holding it (default: found from the tables).
    #[arg(long)]
    pub map: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub map: String,
    pub path: String,
    pub dev: DevNum,
    pub action: Action,
    pub before: String,
    pub after: String,
    pub fail_count: u32,
}

fn state_name(s: Option<PathState>) -> String {
    match s {
        Some(PathState::Active) => "active",
        Some(PathState::Failed) => "failed",
        None => "absent",
    }
    .into()
}

/// The multipath map whose table has `dev`.
pub fn map_of(dm: &Dm, dev: DevNum) -> Result<Option<String>> {
    for e in dm.list()? {
        if let Ok(t) = dm.multipath_table(&e.name)
            && t.find_path(dev).is_some()
        {
            return Ok(Some(e.name));
        }
    }
    Ok(None)
}

pub fn run(args: Args) -> Result<()> {
    let dev = resolve_path(&args.dev)?;
    let dmc = Dm::open()?;
    let map = match &args.map {
        Some(m) => m.clone(),
        None => map_of(&dmc, dev)?.ok_or_else(|| {
            NotFoundError(format!(
                "{} ({dev}) is not a path of any multipath map",
                args.dev
            ))
        })?,
    };
    let before = dmc.multipath_status(&map)?;
    let Some(b) = before.path(dev) else {
        bail!(NotFoundError(format!(
            "{} ({dev}) is not a path of map {map}",
            args.dev
        )));
    };
    let msg = match args.action {
        Action::Fail => Message::FailPath(dev),
        Action::Reinstate => Message::ReinstatePath(dev),
        Action::Unmark => return unmark(&args, &map, dev),
    };
    // Through the daemon when it manages the map: it keeps the path
    // failed across reloads and restarts until reinstated the same way.
    let req = match args.action {
        Action::Fail => ControlRequest::Fail {
            path: dev.to_string(),
        },
        Action::Reinstate => ControlRequest::Reinstate {
            path: dev.to_string(),
        },
        Action::Unmark => ControlRequest::Unmark {
            path: dev.to_string(),
        },
    };
    let by_daemon = match route::change(&map, "pathpilot path", &req)? {
        Via::Daemon(_) => true,
        Via::Here(_lock) => {
            dmc.message(&map, &msg)?;
            false
        }
    };
    let after = dmc.multipath_status(&map)?;
    let a = after.path(dev);
    let report = Report {
        map: map.clone(),
        path: display_name(dev),
        dev,
        action: args.action,
        before: state_name(Some(b.state)),
        after: state_name(a.map(|p| p.state)),
        fail_count: a.map_or(0, |p| p.fail_count),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{map}: {} ({dev}) {} -> {} (fail count {}){}",
            report.path,
            report.before,
            report.after,
            report.fail_count,
            match (by_daemon, args.action) {
                (true, Action::Fail) =>
                    "; by the pathpilot daemon, which keeps it failed until reinstated",
                (true, _) => "; by the pathpilot daemon",
                _ => "",
            }
        );
    }
    let wanted = match args.action {
        Action::Fail => "failed",
        Action::Reinstate | Action::Unmark => "active",
    };
    if report.after != wanted {
        bail!(
            "{map}: the kernel reports {} as {} after {msg}",
            report.path,
            report.after
        );
    }
    Ok(())
}

/// Marginal states live in the daemon: without one there is nothing to end.
fn unmark(args: &Args, map: &str, dev: DevNum) -> Result<()> {
    let req = ControlRequest::Unmark {
        path: dev.to_string(),
    };
    let data = match route::change(map, "pathpilot path", &req)? {
        Via::Daemon(d) => d,
        Via::Here(_) => bail!(
            "{map}: no pathpilot daemon manages it, and only the daemon judges paths marginal: \
             nothing to unmark"
        ),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&data)?);
    } else {
        let was = data["was"].as_str().unwrap_or("?");
        println!(
            "{map}: {} ({dev}) {was} -> healthy{}",
            display_name(dev),
            if was == "healthy" {
                " (it was not marginal)"
            } else {
                "; by the pathpilot daemon: it serves again"
            }
        );
    }
    Ok(())
}
