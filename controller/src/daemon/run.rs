//! Start-up and shut-down of `pathpilot daemon`: the config, the control
//! socket and metrics servers (tokio), the engine thread, and signals
//! (SIGTERM/SIGINT stop cleanly, SIGHUP re-reads the config).
use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use anyhow::{Context, Result, bail};
use tokio::signal::unix::{SignalKind, signal};

use super::{
    config::{self, Config},
    engine::Engine,
    metrics,
    shared::Shared,
    socket::{self, AccessPolicy},
    status::DaemonStatus,
};
use crate::{cli::UsageError, tuner::Mode};

#[derive(Debug, thiserror::Error)]
#[error("pathpilot daemon needs root (it loads eBPF programs and changes device-mapper maps)")]
pub struct NotRoot;

/// The gid of a group name, from the group database.
fn group_id(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: getgrnam returns a pointer into static storage or null; the
    // gid is copied out at once, and the daemon is single-threaded here.
    let g = unsafe { libc::getgrnam(c.as_ptr()) };
    (!g.is_null()).then(|| unsafe { (*g).gr_gid })
}

pub fn run(config_path: Option<PathBuf>, mode: Option<Mode>) -> Result<()> {
    let explicit = config_path.is_some();
    let path = config_path.unwrap_or_else(|| PathBuf::from(config::DEFAULT_PATH));
    let mut cfg = Config::load(&path, explicit).map_err(|e| UsageError(e.to_string()))?;
    if let Some(m) = mode {
        cfg.mode = m;
    }
    if unsafe { libc::geteuid() } != 0 {
        bail!(NotRoot);
    }
    // A client that hangs up mid-answer must cost an error on that
    // connection, not the daemon (main restores SIGPIPE for the CLI).
    // SAFETY: no other thread exists yet.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let read_gid = match &cfg.read_group {
        Some(g) => Some(group_id(g).ok_or_else(|| {
            UsageError(format!(
                "config {}: read_group: no group named '{g}'",
                path.display()
            ))
        })?),
        None => None,
    };
    let metrics_addr: Option<SocketAddr> = match cfg.metrics.as_str() {
        "off" => None,
        a => Some(
            a.parse()
                .map_err(|_| UsageError(format!("metrics: bad address '{a}'")))?,
        ),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(serve(cfg, path, read_gid, metrics_addr))
}

async fn serve(
    cfg: Config,
    path: PathBuf,
    read_gid: Option<u32>,
    metrics_addr: Option<SocketAddr>,
) -> Result<()> {
    let socket_path = PathBuf::from(&cfg.socket);
    let listener = socket::bind(&socket_path, read_gid)?;
    let metrics_listener = match metrics_addr {
        Some(a) => Some(metrics::bind(a).await?),
        None => None,
    };
    let (shared, changes) = Shared::new(DaemonStatus::default());
    let stop = Arc::new(AtomicBool::new(false));
    let hup = Arc::new(AtomicBool::new(false));
    // The engine owns blocking resources (ioctls, eBPF maps, checker
    // threads): it runs on its own thread; start-up errors come back here.
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<Result<(), String>>();
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel::<Result<(), String>>();
    let engine_thread = {
        let (shared, stop, hup) = (shared.clone(), stop.clone(), hup.clone());
        let cfg = cfg.clone();
        let shown = path.display().to_string();
        std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || match Engine::start(cfg, shown, shared, stop, hup) {
                Ok(e) => {
                    let _ = ready_tx.send(Ok(()));
                    let r = e.run(changes).map_err(|e| format!("{e:#}"));
                    let _ = done_tx.send(r);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("{e:#}")));
                }
            })?
    };
    if let Err(e) = ready_rx
        .await
        .unwrap_or_else(|_| Err("the engine thread died".into()))
    {
        let _ = std::fs::remove_file(&socket_path);
        let _ = engine_thread.join();
        bail!("cannot start: {e}");
    }
    let policy = AccessPolicy { read_gid };
    let socket_task = tokio::spawn(socket::serve(listener, shared.clone(), policy));
    let metrics_task =
        metrics_listener.map(|l| tokio::spawn(metrics::serve_listener(l, shared.clone())));
    eprintln!(
        "pathpilot: daemon ready: mode {:?}, control socket {}, metrics {}",
        cfg.mode,
        socket_path.display(),
        metrics_addr.map_or("off".into(), |a| format!("http://{a}/metrics"))
    );
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hupsig = signal(SignalKind::hangup())?;
    let result = loop {
        tokio::select! {
            _ = term.recv() => break Ok(()),
            _ = int.recv() => break Ok(()),
            _ = hupsig.recv() => hup.store(true, Ordering::SeqCst),
            r = &mut done_rx => break match r {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(anyhow::anyhow!("the engine stopped: {e}")),
                Err(_) => Err(anyhow::anyhow!("the engine thread died")),
            },
        }
    };
    stop.store(true, Ordering::SeqCst);
    socket_task.abort();
    if let Some(t) = metrics_task {
        t.abort();
    }
    let _ = tokio::task::spawn_blocking(move || engine_thread.join()).await;
    remove_socket(&socket_path);
    eprintln!("pathpilot: daemon stopped");
    result
}

fn remove_socket(p: &Path) {
    let _ = std::fs::remove_file(p);
}
