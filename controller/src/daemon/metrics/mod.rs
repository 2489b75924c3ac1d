//! Prometheus metrics: the text exposition format 0.0.4 rendered from the
//! published status ([`encode`]), served by a minimal HTTP/1.1 server on
//! `GET /metrics` ([`server`]).
#[cfg(test)]
mod docs;
pub mod encode;
pub mod server;

pub use encode::render;
pub use server::{bind, serve, serve_listener};
