//! What the CLI and the daemon share over the control socket: the
//! protocol, the status the daemon serves, and the CLI's client.
pub mod client;
#[cfg(test)]
pub(crate) mod fixture;
pub mod protocol;
pub mod status;
