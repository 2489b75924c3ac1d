//! What the engine thread shares with the servers (control socket,
//! metrics): the latest status, readable at any time, and a queue of changes
//! for the engine to carry out, each with a reply channel.
use std::sync::{Arc, RwLock, mpsc};

use super::{
    protocol::{Request, Response},
    status::DaemonStatus,
};

/// A change request on its way to the engine.
pub struct Change {
    pub request: Request,
    pub reply: tokio::sync::oneshot::Sender<Response>,
}

#[derive(Clone)]
pub struct Shared {
    status: Arc<RwLock<DaemonStatus>>,
    changes: mpsc::Sender<Change>,
}

impl Shared {
    pub fn new(initial: DaemonStatus) -> (Self, mpsc::Receiver<Change>) {
        let (tx, rx) = mpsc::channel();
        (
            Shared {
                status: Arc::new(RwLock::new(initial)),
                changes: tx,
            },
            rx,
        )
    }

    /// A copy of the latest status.
    pub fn status(&self) -> DaemonStatus {
        self.status
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads the latest status without copying it.
    pub fn with_status<T>(&self, f: impl FnOnce(&DaemonStatus) -> T) -> T {
        f(&self.status.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn publish(&self, s: DaemonStatus) {
        *self.status.write().unwrap_or_else(|e| e.into_inner()) = s;
    }

    /// Queues a change for the engine; `None` when the engine is gone.
    pub fn submit(&self, request: Request) -> Option<tokio::sync::oneshot::Receiver<Response>> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.changes.send(Change { request, reply }).ok()?;
        Some(rx)
    }
}
