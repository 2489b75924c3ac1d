//! `pathpilot advise`: what multipath.conf could say better for each map,
//! from the daemon's figures (see [`crate::policy::advice`]).
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::{
    cli::NotFoundError,
    ctl::{
        client::{self, DEFAULT_SOCKET},
        protocol::ControlRequest,
        status::MapReport,
    },
    policy::advice::{self, Advice, CONF_D_FILE},
};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Only this map (its name or WWID).
    pub map: Option<String>,
    /// Print only the multipath.conf entries, ready for a file under
    /// /etc/multipath/conf.d/ (then `multipathd reconfigure`).
    #[arg(long)]
    pub multipath_conf: bool,
    /// The advice as JSON: per map its settings with their reasons, and
    /// notes.
    #[arg(long, conflicts_with = "multipath_conf")]
    pub json: bool,
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    let v = client::call(&a.socket, &ControlRequest::Status)?;
    let all: Vec<MapReport> =
        serde_json::from_value(v["maps"].clone()).context("the daemon's status")?;
    let maps: Vec<_> = all
        .iter()
        .filter(|m| a.map.as_ref().is_none_or(|n| *n == m.name || *n == m.wwid))
        .collect();
    if let Some(n) = &a.map
        && maps.is_empty()
    {
        return Err(NotFoundError(format!("no map '{n}' (by name or WWID)")).into());
    }
    let advice: Vec<(bool, Advice)> = maps
        .iter()
        .map(|m| (m.beside_multipathd, advice::advise(m)))
        .collect();
    if a.json {
        let list: Vec<&Advice> = advice.iter().map(|(_, x)| x).collect();
        println!("{}", serde_json::to_string(&list)?);
    } else if a.multipath_conf {
        print!("{}", conf(&advice));
    } else {
        print!("{}", human(&advice));
    }
    Ok(())
}

/// The multipath.conf entries of the maps something is advised for.
fn conf(advice: &[(bool, Advice)]) -> String {
    let entries: Vec<String> = advice
        .iter()
        .filter_map(|(_, a)| a.multipath_conf())
        .collect();
    if entries.is_empty() {
        return "# pathpilot advise: nothing to change in multipath.conf\n".into();
    }
    format!(
        "# pathpilot advise: for {CONF_D_FILE}, then `multipathd reconfigure`\n{}",
        entries.concat()
    )
}

/// The advice for people: per map what to set and why, then the notes.
fn human(advice: &[(bool, Advice)]) -> String {
    let mut s = String::new();
    for (beside, a) in advice {
        let owner = if *beside {
            "multipathd's"
        } else {
            "not multipathd's"
        };
        s.push_str(&format!("{} ({}), {owner}:\n", a.map, a.wwid));
        if a.settings.is_empty() {
            s.push_str("  nothing to change in multipath.conf\n");
        }
        for x in &a.settings {
            s.push_str(&format!("  {} {}\n    {}\n", x.key, x.value, x.reason));
        }
        for n in &a.notes {
            s.push_str(&format!("  note: {n}\n"));
        }
        if !a.settings.is_empty() {
            s.push_str(&format!(
                "  to apply: `pathpilot advise {} --multipath-conf` into {CONF_D_FILE}, then \
                 `multipathd reconfigure` (it reloads only the maps whose table changes), or \
                 let the daemon do it (beside.apply = true)\n",
                a.map
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::advice::Setting;

    fn some() -> Advice {
        Advice {
            map: "mpatha".into(),
            wwid: "w".into(),
            settings: vec![Setting {
                key: "path_grouping_policy",
                value: "multibus".into(),
                reason: "sda carries 100%".into(),
            }],
            notes: vec!["weights cannot be said".into()],
        }
    }

    #[test]
    fn the_advice_reads_for_people_and_as_multipath_conf() {
        let none = Advice {
            settings: vec![],
            ..some()
        };
        let h = human(&[(true, some()), (false, none.clone())]);
        assert!(
            h.contains(
                "mpatha (w), multipathd's:\n  path_grouping_policy multibus\n    sda carries 100%"
            ),
            "{h}"
        );
        assert!(h.contains("not multipathd's:\n  nothing to change"), "{h}");
        assert!(h.contains("note: weights cannot be said"), "{h}");
        let c = conf(&[(true, some()), (false, none.clone())]);
        assert!(c.starts_with("# pathpilot advise: for /etc/multipath/conf.d/pathpilot.conf"));
        assert_eq!(c.matches("multipaths {").count(), 1, "{c}");
        assert_eq!(
            conf(&[(true, none)]),
            "# pathpilot advise: nothing to change in multipath.conf\n"
        );
    }
}
