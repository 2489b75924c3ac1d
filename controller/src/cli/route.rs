//! Where a command's change to a map goes: one writer per map. When a
//! daemon runs, the change is sent to it: it applies it under the map's
//! lock, logs it as the operator's, and its tuner leaves the knob alone
//! until released. A map the daemon only observes, or no daemon at all,
//! and the command makes the change itself, holding the map's lock.
use std::{path::PathBuf, time::Duration};

use anyhow::{Result, bail};

use crate::{
    ctl::{
        client::{self, ClientError},
        protocol::{ControlRequest, ErrorCode},
    },
    lock::{Locks, MapLock},
};

/// How long a command waits for another writer of the map to finish.
pub const LOCK_WAIT: Duration = Duration::from_secs(10);

/// The control socket of the daemon that runs on this host, if one does
/// (from its lock file, so a daemon on another socket is found too).
pub fn daemon_socket() -> Option<(PathBuf, u32)> {
    let h = Locks::system().running_daemon()?;
    Some((
        PathBuf::from(h.socket.unwrap_or_else(|| client::DEFAULT_SOCKET.into())),
        h.pid,
    ))
}

/// What the daemon said to a change.
pub enum Via {
    /// It made the change: its answer's data.
    Daemon(serde_json::Value),
    /// No daemon, or not a map it manages: the command makes the change,
    /// holding this lock.
    Here(MapLock),
}

/// Sends `req` (a change to `map`) to the running daemon, or takes the
/// map's lock for the command to make it itself. A daemon that runs and
/// does not answer is an error: the change is not made behind its back.
pub fn change(map: &str, by: &str, req: &ControlRequest) -> Result<Via> {
    if let Some((socket, pid)) = daemon_socket() {
        match client::call(&socket, req) {
            Ok(data) => return Ok(Via::Daemon(data)),
            Err(ClientError::Refused {
                code: ErrorCode::NotManaged,
                ..
            }) => {}
            Err(e @ ClientError::Refused { .. }) => return Err(e.into()),
            Err(e) => bail!(
                "a pathpilot daemon runs (pid {pid}) and changes to its maps go through it, \
                 but it does not answer on {}: {e}; try again, or stop the daemon",
                socket.display()
            ),
        }
    }
    Ok(Via::Here(Locks::system().map(map, by, LOCK_WAIT)?))
}
