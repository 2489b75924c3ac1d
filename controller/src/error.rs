//! Errors that name what the user gave, shared by the commands and the
//! daemon (which reports the same mistakes over its socket).

/// A value the user gave that makes no sense (beyond what clap checks).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Something the user named does not exist (a LUN, a path of a map).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotFoundError(pub String);

/// The daemon run by a user other than root.
#[derive(Debug, thiserror::Error)]
#[error("pathpilot daemon needs root (it loads eBPF programs and changes device-mapper maps)")]
pub struct NotRoot;
