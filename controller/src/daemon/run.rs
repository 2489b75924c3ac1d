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
    engine::Engine,
    metrics,
    shared::Shared,
    socket::{self, AccessPolicy},
    state::{STATE_FILE, SavedState},
};
use crate::{
    config::{self, Config},
    ctl::status::DaemonStatus,
    error::{NotRoot, UsageError},
    lock::Locks,
    tuner::Mode,
};

/// The gid of a group name, from the group database.
fn group_id(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: getgrnam returns a pointer into static storage or null; the
    // gid is copied out at once, and the daemon is single-threaded here.
    let g = unsafe { libc::getgrnam(c.as_ptr()) };
    (!g.is_null()).then(|| unsafe { (*g).gr_gid })
}

/// Tells systemd (Type=notify) how the daemon is doing; a no-op outside
/// systemd. `READY=1` goes out once the maps are adopted and created, so
/// units ordered after pathpilot (the mounts on its maps) start then.
fn sd_notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sock = match std::os::unix::net::UnixDatagram::unbound() {
        Ok(s) => s,
        Err(_) => return,
    };
    let bytes = path.as_encoded_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        // An abstract socket.
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|a| sock.send_to_addr(state.as_bytes(), &a))
    } else {
        sock.send_to(state.as_bytes(), Path::new(&path))
    };
    if let Err(e) = sent {
        eprintln!("pathpilot: cannot notify systemd ({state}): {e}");
    }
}

/// Loads the state file; `reset` moves a bad one aside first, loudly.
fn load_state(reset: bool) -> Result<SavedState> {
    let path = Path::new(STATE_FILE);
    if reset {
        let unix = crate::clock::unix_now() as u64;
        match SavedState::move_aside(path, unix)? {
            Some(to) => eprintln!(
                "pathpilot: --reset-state: moved {} to {}: the maps pathpilot made are \
                 observed only until adopted (maps.adopt), and the paths an operator failed \
                 are no longer held failed",
                path.display(),
                to.display()
            ),
            None => eprintln!("pathpilot: --reset-state: there was no {}", path.display()),
        }
    }
    Ok(SavedState::load(path)?)
}

pub fn run(config_path: Option<PathBuf>, mode: Option<Mode>, reset_state: bool) -> Result<()> {
    let explicit = config_path.is_some();
    let path = config_path.unwrap_or_else(|| PathBuf::from(config::DEFAULT_PATH));
    let mut cfg = Config::load(&path, explicit).map_err(|e| UsageError(e.to_string()))?;
    if let Some(m) = mode {
        cfg.mode = m;
    }
    if unsafe { libc::geteuid() } != 0 {
        bail!(NotRoot);
    }
    // One daemon per host, whatever its socket: before anything else is
    // touched.
    let daemon_lock = Locks::system().daemon(&cfg.socket)?;
    let state = load_state(reset_state)?;
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
    let r = rt.block_on(serve(cfg, path, state, read_gid, metrics_addr));
    drop(daemon_lock);
    r
}

async fn serve(
    cfg: Config,
    path: PathBuf,
    state: SavedState,
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
            .spawn(
                move || match Engine::start(cfg, shown, state, shared, stop, hup) {
                    Ok(e) => {
                        let _ = ready_tx.send(Ok(()));
                        let r = e.run(changes).map_err(|e| format!("{e:#}"));
                        let _ = done_tx.send(r);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("{e:#}")));
                    }
                },
            )?
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
    sd_notify("READY=1");
    eprintln!(
        "pathpilot: daemon ready: mode {:?}, control socket {}, metrics {}, {}",
        cfg.mode,
        socket_path.display(),
        metrics_addr.map_or("off".into(), |a| format!("http://{a}/metrics")),
        bio_probe_note(cfg.bio_probe)
    );
    if cfg.observe_duty < 1.0 {
        eprintln!(
            "pathpilot: observation sampled: the probes run for {:.0}% of each window (across \
             every other window's end) while no tuner measures and no path is suspect \
             (observe_duty = {}; latency, sizes, order and errors from that part; I/Os, bytes, \
             merges and splits exact)",
            cfg.observe_duty * 100.0,
            cfg.observe_duty
        );
    }
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
    sd_notify("STOPPING=1");
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

/// The ready line's word on the per-bio probe: off by default since it
/// became opt-in, and a user who read bytes per cgroup before is told why
/// they are gone and how to have them back.
fn bio_probe_note(on: bool) -> &'static str {
    if on {
        "bio probe on (bytes per cgroup counted)"
    } else {
        "bio probe off (no bytes per cgroup; bio_probe = true counts them)"
    }
}

fn remove_socket(p: &Path) {
    let _ = std::fs::remove_file(p);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ready_line_says_whether_bytes_per_cgroup_are_counted() {
        assert!(bio_probe_note(false).contains("bio_probe = true"));
        assert!(bio_probe_note(true).contains("counted"));
        assert_ne!(bio_probe_note(false), bio_probe_note(true));
    }
}
