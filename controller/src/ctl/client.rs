//! A small blocking client of the control socket, for the CLI (`pathpilot
//! log`, `pathpilot top`): one connection per request, so a client never
//! holds a slot on the daemon between polls.
use std::{
    io::{self, BufRead, BufReader, Read, Write},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    time::Duration,
};

use serde::{Deserialize, Serialize};

use super::{
    protocol::{ControlRequest, ErrorCode, Response},
    status::MapReport,
};
use crate::tuner::Mode;

/// Where the daemon listens unless configured otherwise.
pub const DEFAULT_SOCKET: &str = "/run/pathpilot/control.sock";

/// Longer than the daemon's own wait on the engine (10 s), so a slow engine
/// is reported by the daemon as `unavailable`, not here as a timeout.
pub const TIMEOUT: Duration = Duration::from_secs(15);

/// A status of a few hundred paths and a full decision log is a few MiB;
/// anything far beyond that is not a reply of ours.
const MAX_REPLY: u64 = 256 * 1024 * 1024;

/// The OS error is in the message, not a `source`, so the CLI's one-line
/// error (the cause chain joined) does not say it twice.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no pathpilot daemon is running (cannot connect to {}: {})", .path.display(), os_text(.err))]
    NoDaemon { path: PathBuf, err: io::Error },
    #[error(
        "permission denied on {} (the control socket is for root and the daemon's read group)",
        .path.display()
    )]
    PermissionDenied { path: PathBuf },
    #[error("the pathpilot daemon on {} did not answer within {} s", .path.display(), .secs)]
    Timeout { path: PathBuf, secs: u64 },
    #[error("talking to the pathpilot daemon on {}: {}", .path.display(), os_text(.err))]
    Io { path: PathBuf, err: io::Error },
    #[error("the pathpilot daemon sent a reply that is not understood: {0}")]
    BadReply(String),
    /// The daemon answered with an error.
    #[error("{message}")]
    Refused { code: ErrorCode, message: String },
}

/// The OS message without Rust's " (os error N)" suffix, for one-line errors.
fn os_text(e: &io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Sends one request and reads its response (which may be an error
/// response: see [`call`] for the data or a [`ClientError::Refused`]).
pub fn request(socket: &Path, req: &ControlRequest) -> Result<Response, ClientError> {
    request_with_timeout(socket, req, TIMEOUT)
}

pub fn request_with_timeout(
    socket: &Path,
    req: &ControlRequest,
    timeout: Duration,
) -> Result<Response, ClientError> {
    let line = serde_json::to_vec(req).map_err(|e| ClientError::BadReply(e.to_string()))?;
    request_line(socket, &line, timeout)
}

/// Sends one raw request line (as given: `pathpilot ctl` lets a script
/// send anything, the daemon judges it) and reads the response.
pub fn request_line(
    socket: &Path,
    line: &[u8],
    timeout: Duration,
) -> Result<Response, ClientError> {
    let path = socket.to_path_buf();
    let stream = UnixStream::connect(socket).map_err(|e| match e.kind() {
        io::ErrorKind::PermissionDenied => ClientError::PermissionDenied { path: path.clone() },
        _ => ClientError::NoDaemon {
            path: path.clone(),
            err: e,
        },
    })?;
    let io_err = |e: io::Error| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ClientError::Timeout {
            path: path.clone(),
            secs: timeout.as_secs().max(1),
        },
        _ => ClientError::Io {
            path: path.clone(),
            err: e,
        },
    };
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(io_err)?;
    let mut line = line.to_vec();
    line.push(b'\n');
    (&stream).write_all(&line).map_err(io_err)?;
    let mut reply = Vec::new();
    BufReader::new((&stream).take(MAX_REPLY))
        .read_until(b'\n', &mut reply)
        .map_err(io_err)?;
    if reply.last() != Some(&b'\n') {
        return Err(ClientError::Io {
            path: path.clone(),
            err: io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the daemon closed the connection without a complete answer",
            ),
        });
    }
    serde_json::from_slice(&reply).map_err(|e| ClientError::BadReply(e.to_string()))
}

/// Sends one request; the response's data, or its error as `Refused`.
pub fn call(socket: &Path, req: &ControlRequest) -> Result<serde_json::Value, ClientError> {
    into_data(request(socket, req)?)
}

pub fn into_data(r: Response) -> Result<serde_json::Value, ClientError> {
    if r.ok {
        return Ok(r.data.unwrap_or(serde_json::Value::Null));
    }
    Err(ClientError::Refused {
        code: r.code.unwrap_or(ErrorCode::BadRequest),
        message: r.error.unwrap_or_else(|| "the daemon refused".into()),
    })
}

/// A decision as it travels over the socket (the daemon's `LoggedDecision`
/// flattened). Lenient: a newer daemon may add fields, and the knob and
/// outcome stay strings so a client never rejects a value it does not know.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogEntry {
    pub seq: u64,
    pub unix: f64,
    #[serde(default)]
    pub map: String,
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub knob: Option<String>,
    #[serde(default)]
    pub old: String,
    #[serde(default)]
    pub new: String,
    #[serde(default)]
    pub before_mib_s: Option<f64>,
    #[serde(default)]
    pub after_mib_s: Option<f64>,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub outcome: String,
}

/// The data of a `log` response.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogData {
    /// Decisions with `seq > since`, oldest first.
    pub decisions: Vec<serde_json::Value>,
    /// The newest sequence number the daemon has (0 when none): lower than
    /// the `since` asked for means the daemon was restarted.
    pub last_seq: u64,
}

/// The parts of a `status` response the dashboard needs.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct StatusView {
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub pid: u32,
    #[serde(default)]
    pub mode: Option<Mode>,
    #[serde(default)]
    pub window_s: f64,
    #[serde(default)]
    pub maps: Vec<MapReport>,
    #[serde(default)]
    pub decisions: Vec<LogEntry>,
    /// Absent from an older daemon's status, which always probed bios.
    #[serde(default = "probed")]
    pub bio_probe: bool,
}

fn probed() -> bool {
    true
}

/// `HH:MM:SS` of a Unix time, `utc_offset_s` east of UTC.
pub fn clock(unix: f64, utc_offset_s: i64) -> String {
    let t = if unix.is_finite() {
        unix.floor() as i64
    } else {
        0
    };
    let day = (t + utc_offset_s).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", day / 3600, day / 60 % 60, day % 60)
}

/// The local zone's offset from UTC at `unix` (0 when unknown).
pub fn local_offset(unix: f64) -> i64 {
    let t = unix as libc::time_t;
    // SAFETY: localtime_r writes only into the tm we pass.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            0
        } else {
            tm.tm_gmtoff
        }
    }
}

/// `HH:MM:SS` of a Unix time in the local zone.
pub fn local_clock(unix: f64) -> String {
    clock(unix, local_offset(unix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_daemon_is_one_clear_line() {
        let p = Path::new("/nonexistent-pathpilot-dir/control.sock");
        let e = request(p, &ControlRequest::Status).unwrap_err();
        assert!(matches!(e, ClientError::NoDaemon { .. }));
        assert!(std::error::Error::source(&e).is_none(), "said once");
        assert_eq!(
            e.to_string(),
            "no pathpilot daemon is running (cannot connect to \
             /nonexistent-pathpilot-dir/control.sock: No such file or directory)"
        );
    }

    #[test]
    fn clock_wraps_days_and_offsets() {
        assert_eq!(clock(0.0, 0), "00:00:00");
        assert_eq!(clock(86_399.9, 0), "23:59:59");
        assert_eq!(clock(3_600.0 * 25.0 + 61.0, 0), "01:01:01");
        assert_eq!(clock(0.0, -3600), "23:00:00");
        assert_eq!(clock(f64::NAN, 0), "00:00:00");
    }

    #[test]
    fn error_responses_become_refused() {
        let r = Response::err(ErrorCode::Forbidden, "changes need root");
        match into_data(r) {
            Err(ClientError::Refused { code, message }) => {
                assert_eq!(code, ErrorCode::Forbidden);
                assert_eq!(message, "changes need root");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            into_data(Response::ok(serde_json::json!(1))).unwrap(),
            serde_json::json!(1)
        );
    }
}
