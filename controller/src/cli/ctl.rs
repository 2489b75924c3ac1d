//! `pathpilot ctl REQUEST`: one raw request to the daemon's control socket,
//! its response printed as JSON. For scripts and for trying the protocol
//! (docs/control-socket.md): `pathpilot ctl '{"cmd":"status"}'`.
use std::path::PathBuf;

use anyhow::Result;

use crate::ctl::{client, protocol::ErrorCode};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// One request line, e.g. '{"cmd":"pause","map":"mpatha"}'.
    pub request: String,
    #[arg(long, default_value = client::DEFAULT_SOCKET)]
    pub socket: PathBuf,
}

/// The daemon refused a request: its code and message, for the exit status.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Refused {
    pub code: ErrorCode,
    pub message: String,
}

pub fn run(a: Args) -> Result<()> {
    let r = client::request_line(&a.socket, a.request.trim_end().as_bytes(), client::TIMEOUT)?;
    println!("{}", serde_json::to_string(&r)?);
    if r.ok {
        return Ok(());
    }
    Err(Refused {
        code: r.code.unwrap_or(ErrorCode::BadRequest),
        message: r.error.unwrap_or_default(),
    }
    .into())
}
