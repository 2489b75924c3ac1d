//! `pathpilot log`: the tuner's decision log, read from the daemon.
use std::{
    io::Write,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use crate::ctl::{
    client::{self, DEFAULT_SOCKET, LogData, LogEntry},
    protocol::ControlRequest,
};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Keep printing new decisions as they are made, until Ctrl-C.
    #[arg(short, long)]
    pub follow: bool,
    /// One JSON object per decision, as the daemon sends it.
    #[arg(long)]
    pub json: bool,
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
}

/// How often `--follow` asks the daemon for news.
const POLL: Duration = Duration::from_secs(1);

fn mib(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

/// One line for people: time, map, knob old -> new, outcome, figures, and
/// the reason last, since it is free text.
pub fn human_line(d: &LogEntry, utc_offset_s: i64) -> String {
    let mut s = format!("{} {}", client::clock(d.unix, utc_offset_s), d.map);
    match &d.knob {
        Some(k) => s.push_str(&format!(" {k} {} -> {}", d.old, d.new)),
        None if !(d.old.is_empty() && d.new.is_empty()) => {
            s.push_str(&format!(" {} -> {}", d.old, d.new))
        }
        None => {}
    }
    s.push(' ');
    s.push_str(&d.outcome);
    if d.before_mib_s.is_some() || d.after_mib_s.is_some() {
        s.push_str(&format!(
            " {} -> {} MiB/s",
            mib(d.before_mib_s),
            mib(d.after_mib_s)
        ));
    }
    if !d.reason.is_empty() {
        s.push_str(": ");
        s.push_str(&d.reason);
    }
    s
}

/// The lines to print for a batch of decisions.
pub fn format_batch(decisions: &[serde_json::Value], json: bool) -> Result<Vec<String>> {
    decisions
        .iter()
        .map(|v| {
            if json {
                return Ok(v.to_string());
            }
            let d: LogEntry = serde_json::from_value(v.clone())
                .context("the daemon sent a decision that is not understood")?;
            Ok(human_line(&d, client::local_offset(d.unix)))
        })
        .collect()
}

fn fetch(args: &Args, since: Option<u64>) -> Result<LogData> {
    let data = client::call(&args.socket, &ControlRequest::Log { since })?;
    serde_json::from_value(data).context("the daemon's log reply is not understood")
}

pub fn run(args: Args) -> Result<()> {
    if args.follow {
        super::signals::install();
    }
    let mut out = std::io::stdout().lock();
    let mut since = None;
    loop {
        let data = fetch(&args, since)?;
        // A daemon restarted since the last poll numbers from 1 again.
        let restarted = since.is_some_and(|s| data.last_seq < s);
        let data = if restarted {
            eprintln!("pathpilot: the daemon was restarted; its log starts again");
            fetch(&args, None)?
        } else {
            data
        };
        for line in format_batch(&data.decisions, args.json)? {
            writeln!(out, "{line}")?;
        }
        out.flush()?;
        if !args.follow {
            return Ok(());
        }
        since = Some(data.last_seq);
        if !super::signals::sleep_until(Instant::now() + POLL) {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctl::fixture::example_status;

    fn entries() -> Vec<serde_json::Value> {
        let s = example_status();
        s.decisions
            .iter()
            .map(|d| serde_json::to_value(d).unwrap())
            .collect()
    }

    #[test]
    fn one_line_per_decision_for_people() {
        let lines: Vec<String> = entries()
            .iter()
            .map(|v| human_line(&serde_json::from_value(v.clone()).unwrap(), 0))
            .collect();
        assert_eq!(
            lines,
            [
                "22:14:21 mpatha paused: path sdc failed",
                "22:15:22 mpatha max_sectors_kb 1280 -> 512 kept 17.5 -> 33.7 MiB/s: \
                 large requests split across paths: +92%",
                "22:16:23 mpatha selector service-time -> round-robin reverted 17.5 -> 33.7 MiB/s: \
                 gain 1.2% within noise",
            ]
        );
    }

    #[test]
    fn json_lines_pass_the_daemon_objects_through() {
        let lines = format_batch(&entries(), true).unwrap();
        assert_eq!(lines.len(), 3);
        let v: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
        assert_eq!(v["seq"], 2);
        assert_eq!(v["knob"], "max_sectors_kb");
        assert_eq!(v["outcome"], "kept");
        assert_eq!(v["class"], "read/large/seq");
        assert!(!lines[1].contains('\n'));
    }

    #[test]
    fn a_decision_without_figures() {
        let d = LogEntry {
            seq: 9,
            unix: 3600.0,
            map: "mpathb".into(),
            outcome: "resumed".into(),
            ..Default::default()
        };
        assert_eq!(human_line(&d, 0), "01:00:00 mpathb resumed");
        let d = LogEntry {
            before_mib_s: Some(10.0),
            ..d
        };
        assert_eq!(human_line(&d, 0), "01:00:00 mpathb resumed 10.0 -> - MiB/s");
    }

    #[test]
    fn no_daemon_exits_6_and_refusals_by_code() {
        use crate::{
            cli::{exit, exit_code},
            ctl::{client::ClientError, protocol::ErrorCode},
        };
        let args = Args {
            follow: false,
            json: false,
            socket: "/nonexistent-pathpilot/control.sock".into(),
        };
        let e = run(args).unwrap_err();
        assert_eq!(exit_code(&e), exit::NO_DAEMON);
        assert!(
            e.to_string().starts_with("no pathpilot daemon is running"),
            "{e}"
        );
        let refused = |code| {
            exit_code(&anyhow::Error::new(ClientError::Refused {
                code,
                message: String::new(),
            }))
        };
        assert_eq!(refused(ErrorCode::Forbidden), exit::NOT_ROOT);
        assert_eq!(refused(ErrorCode::NotFound), exit::NOT_FOUND);
        assert_eq!(refused(ErrorCode::Unavailable), exit::FAILURE);
    }
}
