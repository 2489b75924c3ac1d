//! `pathpilot daemon`: owns the multipath maps, watches every path, checks
//! them, and tunes each map (see the module docs of each part).
pub mod actuator;
pub mod checker;
pub mod engine;
pub mod metrics;
pub mod run;
pub mod shared;
pub mod socket;
pub mod state;
pub mod tur;

/// Runs the server `start` makes on a tokio runtime of its own thread, as
/// the daemon runs its servers, for the tests that talk to them.
#[cfg(test)]
pub(crate) fn serve_in_thread<F>(start: impl FnOnce() -> F + Send + 'static)
where
    F: std::future::Future,
{
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(start());
    });
}
