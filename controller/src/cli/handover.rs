//! `pathpilot takeover` and `pathpilot handback`: the maps pass between
//! multipathd and the daemon, which does the work (it is the one that
//! manages them after a takeover; see docs/migration.md).
use std::{path::PathBuf, time::Duration};

use anyhow::Result;

use crate::ctl::{
    client::{self, DEFAULT_SOCKET},
    protocol::ControlRequest,
};

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["map", "all"])))]
pub struct Args {
    /// The map (by name); multipathd owns every map of a host it runs on,
    /// so a map alone passes only when it is the only one.
    pub map: Option<String>,
    /// Every map.
    #[arg(long)]
    pub all: bool,
    /// The daemon's answer as JSON.
    #[arg(long)]
    pub json: bool,
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
}

/// The daemon waits for multipathd to stop or start: up to a minute.
const WAIT: Duration = Duration::from_secs(70);

fn send(a: &Args, req: ControlRequest) -> Result<serde_json::Value> {
    let resp = client::request_with_timeout(&a.socket, &req, WAIT)?;
    Ok(client::into_data(resp)?)
}

fn names(v: &serde_json::Value) -> String {
    v["maps"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|x| x.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// `pathpilot takeover`: multipathd stops, leaving its maps in place; the
/// daemon manages them as they are.
pub fn takeover(a: Args) -> Result<()> {
    let v = send(&a, ControlRequest::Takeover { map: a.map.clone() })?;
    if a.json {
        println!("{v}");
        return Ok(());
    }
    println!(
        "took over {} from multipathd in {:.0} ms, without a reload ({})",
        names(&v),
        v["took_ms"].as_f64().unwrap_or(0.0),
        v["multipathd"].as_str().unwrap_or("")
    );
    if let Some(r) = v["queueing_restored"].as_array().filter(|r| !r.is_empty()) {
        println!("queueing with no path turned on again: {r:?}");
    }
    println!("`pathpilot handback --all` gives them back to multipathd");
    Ok(())
}

/// `pathpilot handback`: the daemon lets its maps go and multipathd
/// starts and adopts them.
pub fn handback(a: Args) -> Result<()> {
    let v = send(&a, ControlRequest::Handback { map: a.map.clone() })?;
    if a.json {
        println!("{v}");
        return Ok(());
    }
    let changed = names(&serde_json::json!({ "maps": v["tables_changed"] }));
    println!(
        "handed {} back to multipathd in {:.0} ms ({}); it changed the table of {}",
        names(&v),
        v["took_ms"].as_f64().unwrap_or(0.0),
        v["multipathd"].as_str().unwrap_or(""),
        if changed.is_empty() {
            "none of them"
        } else {
            &changed
        }
    );
    Ok(())
}
