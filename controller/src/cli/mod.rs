//! The command line: one binary, one subcommand per job. Each command
//! returns an error that `exit_code` maps to a documented exit status.
use std::time::Duration;

use clap::{Parser, Subcommand};

pub use crate::error::{NotFoundError, UsageError};
use crate::{
    blockdev::ResolveError, dm::DmError, mpath::ModelError, observer::ObserveError,
    sysfs_knobs::KnobError,
};

pub mod advise;
pub mod create;
pub mod ctl;
pub mod daemon;
pub mod generate;
pub mod handover;
pub mod list;
pub mod log;
pub mod path;
pub mod reload;
pub mod remove;
pub mod route;
pub mod set;
pub mod signals;
pub mod stat;
pub mod top;
pub mod top_daemon;

#[derive(Parser, Debug)]
#[command(
    name = "pathpilot",
    version,
    about = "A controller for Linux dm-multipath: builds maps, observes every path with eBPF, retunes online",
    after_help = "Exit status: 0 ok, 1 failure, 2 usage error, 3 not found, 4 refused by the kernel, 5 needs root, 6 no daemon running."
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
    /// Multipath maps and their paths, in the shape of `multipath -ll`.
    List(list::Args),
    /// Create maps from discovered paths (one per WWID).
    Create(create::Args),
    /// Change a map's table online (selector, weights, groups, paths) and
    /// report what the kernel applied and the stall.
    Reload(reload::Args),
    /// Set block-layer knobs of a map or a path, read back.
    Set(set::Args),
    /// Fail or reinstate a path by message (no reload).
    Path(path::Args),
    /// Remove a map nothing holds open.
    Remove(remove::Args),
    /// The controller: owns the maps, checks every path, tunes each map
    /// online, serves the control socket and the metrics.
    Daemon(daemon::Args),
    /// Send one raw request to the daemon's control socket and print the
    /// JSON response (the protocol is in docs/control-socket.md).
    Ctl(ctl::Args),
    /// The tuner's decisions, from the daemon (`--follow` to keep watching).
    Log(log::Args),
    /// What multipath.conf could say better for the maps multipathd owns
    /// (grouping, selector), with the reasons measured by the daemon.
    Advise(advise::Args),
    /// multipathd's maps pass to the daemon: multipathd stops and leaves
    /// them in place, the daemon manages them as they are (no reload).
    Takeover(handover::Args),
    /// The daemon's maps pass to multipathd, which starts and adopts them.
    Handback(handover::Args),
    /// Man pages, shell completions or the default config file, for
    /// packagers.
    #[command(hide = true)]
    Generate(generate::Args),
}

/// The version `--version` prints: the release, the git commit it was
/// built from, and a hash of the eBPF object embedded in the binary (the
/// programs that run in the kernel).
pub fn long_version() -> &'static str {
    static V: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        format!(
            "{} (commit {}, eBPF object {:016x})",
            env!("CARGO_PKG_VERSION"),
            option_env!("PATHPILOT_GIT_COMMIT").unwrap_or("unknown"),
            crate::observer::object_hash()
        )
    })
}

/// Exit statuses, documented in `--help` and docs/commands.md.
pub mod exit {
    pub const FAILURE: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const NOT_FOUND: u8 = 3;
    pub const KERNEL: u8 = 4;
    pub const NOT_ROOT: u8 = 5;
    /// A command that needs the daemon found none on its socket.
    pub const NO_DAEMON: u8 = 6;
}

/// The exit status for an error, from the most specific cause in its chain.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if let Some(r) = cause.downcast_ref::<ctl::Refused>() {
            return refusal_exit_code(r.code);
        }
        if let Some(e) = cause.downcast_ref::<crate::ctl::client::ClientError>() {
            return client_exit_code(e);
        }
        if let Some(e) = cause.downcast_ref::<ResolveError>() {
            return match e {
                ResolveError::NotFound(_) => exit::NOT_FOUND,
                ResolveError::NotBlock(_) => exit::USAGE,
            };
        }
        if cause.downcast_ref::<crate::error::NotRoot>().is_some() {
            return exit::NOT_ROOT;
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
        if cause.downcast_ref::<NotFoundError>().is_some() {
            return exit::NOT_FOUND;
        }
        if cause.downcast_ref::<ModelError>().is_some() {
            return exit::USAGE;
        }
        if let Some(e) = cause.downcast_ref::<DmError>() {
            return match e {
                DmError::NotRoot(_) => exit::NOT_ROOT,
                DmError::NoSuchMap(_) => exit::NOT_FOUND,
                DmError::BadName(_) | DmError::NotMultipath { .. } => exit::USAGE,
                DmError::Kernel { .. }
                | DmError::ResumeFailed { .. }
                | DmError::SuspendTimeout { .. }
                | DmError::InUse { .. } => exit::KERNEL,
                _ => exit::FAILURE,
            };
        }
        if let Some(e) = cause.downcast_ref::<KnobError>() {
            return match e {
                KnobError::NotRoot { .. } => exit::NOT_ROOT,
                KnobError::Missing { .. } => exit::NOT_FOUND,
                KnobError::UnknownScheduler { .. } => exit::USAGE,
                KnobError::Refused { .. } => exit::KERNEL,
            };
        }
    }
    exit::FAILURE
}

/// A daemon client's failure: its own (no daemon, socket permission) or
/// the daemon's answer, by error code.
fn client_exit_code(e: &crate::ctl::client::ClientError) -> u8 {
    use crate::ctl::client::ClientError;
    match e {
        ClientError::NoDaemon { .. } => exit::NO_DAEMON,
        ClientError::PermissionDenied { .. } => exit::NOT_ROOT,
        ClientError::Refused { code, .. } => refusal_exit_code(*code),
        _ => exit::FAILURE,
    }
}

/// The exit status for the daemon's refusal, by its error code.
fn refusal_exit_code(code: crate::ctl::protocol::ErrorCode) -> u8 {
    use crate::ctl::protocol::ErrorCode as C;
    match code {
        C::BadRequest => exit::USAGE,
        C::Forbidden => exit::NOT_ROOT,
        C::NotFound => exit::NOT_FOUND,
        C::Kernel => exit::KERNEL,
        C::Unavailable | C::NotManaged | C::Conflict | C::Busy => exit::FAILURE,
    }
}

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
        let e = anyhow::Error::new(DmError::NoSuchMap("mpathz".into())).context("reload");
        assert_eq!(exit_code(&e), exit::NOT_FOUND);
        let e = anyhow::Error::new(DmError::NotRoot("DM_TABLE_LOAD".into()));
        assert_eq!(exit_code(&e), exit::NOT_ROOT);
        let e = anyhow::Error::new(DmError::InUse {
            map: "mpatha".into(),
            open_count: 1,
            holders: vec![],
        });
        assert_eq!(exit_code(&e), exit::KERNEL);
        let e = anyhow::Error::new(ModelError::LastPath(crate::blockdev::DevNum::new(8, 0)));
        assert_eq!(exit_code(&e), exit::USAGE);
        let e = anyhow::Error::new(NotFoundError("no LUN".into()));
        assert_eq!(exit_code(&e), exit::NOT_FOUND);
    }
}
