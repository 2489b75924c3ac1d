//! The command line: one binary, one subcommand per job. Each command
//! returns an error that `exit_code` maps to a documented exit status.
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::{blockdev::ResolveError, observer::ObserveError};

pub mod signals;
pub mod stat;
pub mod top;

#[derive(Parser, Debug)]
#[command(
    name = "pathpilot",
    version,
    about = "A controller for Linux dm-multipath: builds maps, observes every path with eBPF, retunes online",
    after_help = "Exit status: 0 ok, 1 failure, 2 usage error, 3 not found, 4 refused by the kernel, 5 needs root."
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Per-device I/O figures from eBPF, like iostat: requests, bytes, sizes,
    /// merges, latency percentiles, queue depth, sequential share.
    Stat(stat::Args),
    /// Live dashboard of the maps and their paths (from the daemon, or a
    /// read-only observer of its own).
    Top(top::Args),
}

/// Exit statuses, documented in `--help` and the README.
pub mod exit {
    pub const FAILURE: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const NOT_FOUND: u8 = 3;
    pub const KERNEL: u8 = 4;
    pub const NOT_ROOT: u8 = 5;
}

/// The exit status for an error, from the most specific cause in its chain.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if let Some(e) = cause.downcast_ref::<ResolveError>() {
            return match e {
                ResolveError::NotFound(_) => exit::NOT_FOUND,
                ResolveError::NotBlock(_) => exit::USAGE,
            };
        }
        if let Some(e) = cause.downcast_ref::<ObserveError>() {
            return match e {
                ObserveError::NotRoot => exit::NOT_ROOT,
                _ => exit::KERNEL,
            };
        }
        if cause.downcast_ref::<UsageError>().is_some() {
            return exit::USAGE;
        }
    }
    exit::FAILURE
}

/// A value the user gave that makes no sense (beyond what clap checks).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Parses `500ms`, `1s`, `1.5s`, `2m` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (try 500ms, 1s, 2m)"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        _ => return Err(format!("'{s}': unknown unit '{unit}' (use ms, s or m)")),
    };
    if !(secs.is_finite() && secs > 0.0 && secs <= 86400.0) {
        return Err(format!(
            "'{s}' is out of range (more than 0, at most a day)"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("1h").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn exit_codes_follow_the_cause() {
        let e = anyhow::Error::new(ResolveError::NotFound("x".into())).context("stat");
        assert_eq!(exit_code(&e), exit::NOT_FOUND);
        assert_eq!(
            exit_code(&anyhow::Error::new(ObserveError::NotRoot)),
            exit::NOT_ROOT
        );
        assert_eq!(exit_code(&anyhow::anyhow!("boom")), exit::FAILURE);
    }
}
