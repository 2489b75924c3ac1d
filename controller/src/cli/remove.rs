//! `pathpilot remove MAP`: remove a map nothing holds open.
use anyhow::{Result, bail};
use clap::Args as ClapArgs;
use serde::Serialize;

use crate::{
    cli::UsageError,
    dm::{Dm, DmError, multipathd},
};

#[derive(ClapArgs, Debug)]
pub struct Args {
    pub map: String,
    /// Remove even though multipathd runs.
    #[arg(long)]
    pub ignore_multipathd: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    removed: &'a str,
    uuid: Option<String>,
    dm: String,
}

pub fn run(args: Args) -> Result<()> {
    let dm = Dm::open()?;
    // Only multipath maps: removing someone's LVM volume is not our job.
    match dm.multipath_table(&args.map) {
        Ok(_) => {}
        Err(e @ DmError::NotMultipath { .. }) => bail!(UsageError(e.to_string())),
        Err(e) => return Err(e.into()),
    }
    if let Some(how) = multipathd::running()
        && !args.ignore_multipathd
    {
        bail!(UsageError(format!(
            "multipathd is running ({how}) and may recreate {}; stop it or pass --ignore-multipathd",
            args.map
        )));
    }
    let info = dm.remove(&args.map)?;
    if dm.exists(&args.map)? {
        bail!("{} still exists after DM_DEV_REMOVE", args.map);
    }
    let r = Report {
        removed: &args.map,
        uuid: info.uuid.clone(),
        dm: info.kernel_name(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!("removed {} ({})", args.map, r.dm);
    }
    Ok(())
}
