//! What the engine thread shares with the servers (control socket,
//! metrics): the latest status, and a queue of messages for the engine
//! (changes to carry out, each with a reply channel, and requests for a
//! fresh status).
//!
//! The status is built when someone reads it, not every window: at 64
//! paths building it was a tenth of the engine's work under load, for a
//! status nobody read between two windows. The engine builds it at the
//! end of a window (or after an event or a change) only when it was read
//! since the last build, as by a dashboard polling it; otherwise it only
//! marks it stale, and the next reader asks the engine for a fresh one
//! and waits for it (never longer than [`REFRESH_WAIT`]: an engine held
//! up in a long reload still lets its last status be read).
use std::{
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::Duration,
};

use crate::ctl::{
    protocol::{ControlRequest, Response},
    status::DaemonStatus,
};

/// The longest a reader waits for the engine to build a fresh status.
pub const REFRESH_WAIT: Duration = Duration::from_secs(1);

/// A change request on its way to the engine.
pub struct Change {
    pub request: ControlRequest,
    pub reply: tokio::sync::oneshot::Sender<Response>,
}

/// What the servers send the engine.
pub enum ToEngine {
    Change(Change),
    /// A reader found the status stale: build it, then say so.
    Refresh(tokio::sync::oneshot::Sender<()>),
}

#[derive(Clone)]
pub struct Shared {
    status: Arc<RwLock<DaemonStatus>>,
    /// The engine has moved on since the status was built.
    stale: Arc<AtomicBool>,
    /// The status was read since it was built.
    read: Arc<AtomicBool>,
    messages: mpsc::Sender<ToEngine>,
}

impl Shared {
    pub fn new(initial: DaemonStatus) -> (Self, mpsc::Receiver<ToEngine>) {
        let (tx, rx) = mpsc::channel();
        (
            Shared {
                status: Arc::new(RwLock::new(initial)),
                stale: Arc::new(AtomicBool::new(false)),
                read: Arc::new(AtomicBool::new(false)),
                messages: tx,
            },
            rx,
        )
    }

    /// Reads the latest status without copying it. [`Self::fresh`] first
    /// makes it current.
    pub fn with_status<T>(&self, f: impl FnOnce(&DaemonStatus) -> T) -> T {
        self.read.store(true, Ordering::SeqCst);
        f(&self.status.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Waits until the status is current (the engine builds it on
    /// request), or for [`REFRESH_WAIT`] at most, or not at all when the
    /// engine is gone.
    pub async fn fresh(&self) {
        if !self.stale.load(Ordering::SeqCst) {
            return;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.messages.send(ToEngine::Refresh(tx)).is_ok() {
            let _ = tokio::time::timeout(REFRESH_WAIT, rx).await;
        }
    }

    /// For the engine: whether to build the status now (someone read the
    /// last one); when not, it is marked stale for the next reader.
    pub fn wanted(&self) -> bool {
        if self.read.swap(false, Ordering::SeqCst) {
            return true;
        }
        self.stale.store(true, Ordering::SeqCst);
        false
    }

    pub fn publish(&self, s: DaemonStatus) {
        *self.status.write().unwrap_or_else(|e| e.into_inner()) = s;
        self.stale.store(false, Ordering::SeqCst);
    }

    /// Queues a change for the engine; `None` when the engine is gone.
    pub fn submit(
        &self,
        request: ControlRequest,
    ) -> Option<tokio::sync::oneshot::Receiver<Response>> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.messages
            .send(ToEngine::Change(Change { request, reply }))
            .ok()?;
        Some(rx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn a_status_is_built_for_its_readers_and_not_for_nobody() {
        let (shared, rx) = Shared::new(DaemonStatus::default());
        // A test engine: builds the status (pid 42) when asked.
        let engine = shared.clone();
        std::thread::spawn(move || {
            for m in rx {
                if let ToEngine::Refresh(done) = m {
                    engine.publish(DaemonStatus {
                        pid: 42,
                        ..Default::default()
                    });
                    let _ = done.send(());
                }
            }
        });
        // Nobody has read it: the window only marks it stale.
        assert!(!shared.wanted());
        // A reader gets it built, fresh.
        block_on(shared.fresh());
        assert_eq!(shared.with_status(|s| s.pid), 42);
        // Read since: the next window builds it (a dashboard polling it
        // reads each window's), the one after not unless read again.
        assert!(shared.wanted());
        assert!(!shared.wanted());
        shared.with_status(|_| ());
        assert!(shared.wanted());
    }

    #[test]
    fn a_reader_gets_the_last_status_from_an_engine_held_up() {
        let (shared, rx) = Shared::new(DaemonStatus {
            pid: 7,
            ..Default::default()
        });
        assert!(!shared.wanted());
        // The engine never answers (held up in a reload): the reader
        // stops waiting and reads what there is.
        let t = Instant::now();
        block_on(shared.fresh());
        assert!(t.elapsed() >= REFRESH_WAIT);
        assert!(t.elapsed() < REFRESH_WAIT * 10, "{:?}", t.elapsed());
        assert_eq!(shared.with_status(|s| s.pid), 7);
        // An engine gone: no wait at all.
        drop(rx);
        block_on(shared.fresh());
    }
}
