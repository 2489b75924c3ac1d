//! One writer per map, and one daemon per host.
//!
//! Every process that changes a map (the daemon, `pathpilot reload`, `set`,
//! `path`) holds the map's lock file under `/run/pathpilot/locks` while it
//! does: an flock, released by the kernel when the process ends, however
//! it ends. The file doubles as the map's reload journal: a writer records
//! that a reload is under way before it loads a table and clears it once
//! the map is resumed, so a writer that died in between is known to the
//! next daemon start, which repairs that map, and only that one.
//!
//! The daemon holds `/run/pathpilot/daemon.lock`: a second daemon refuses
//! to start whatever its socket, and commands find the running daemon's
//! control socket there.
use std::{
    fs::{File, OpenOptions},
    io::{Read, Seek, SeekFrom, Write},
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

use crate::clock::unix_now;

/// The daemon's runtime directory.
pub const RUN_DIR: &str = "/run/pathpilot";

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{map} is being changed by {holder}; try again when it is done")]
    Busy { map: String, holder: String },
    #[error(
        "another pathpilot daemon is running ({holder}, control socket {socket}): stop it first"
    )]
    DaemonRunning { holder: String, socket: String },
    #[error("lock file {path}: {err}")]
    Io { path: String, err: std::io::Error },
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> LockError + '_ {
    move |err| LockError::Io {
        path: path.display().to_string(),
        err,
    }
}

/// What a lock file says of its holder.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    /// `pathpilot daemon`, `pathpilot reload`, ...
    pub by: String,
    /// The daemon's control socket (daemon lock only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    /// Set while a reload is between its load and its resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reloading_since: Option<f64>,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (pid {})", self.by, self.pid)
    }
}

/// Where the lock files live: [`Locks::system`] in production, a scratch
/// directory in tests.
#[derive(Clone, Debug)]
pub struct Locks {
    dir: PathBuf,
}

impl Locks {
    pub fn system() -> Self {
        Locks {
            dir: PathBuf::from(RUN_DIR),
        }
    }

    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Locks { dir: dir.into() }
    }

    fn map_path(&self, map: &str) -> PathBuf {
        // Map names never contain '/' (device-mapper refuses them).
        self.dir.join("locks").join(format!("{map}.lock"))
    }

    fn daemon_path(&self) -> PathBuf {
        self.dir.join("daemon.lock")
    }

    /// Takes map `map`'s lock for `by`, waiting up to `wait` for another
    /// writer to finish.
    pub fn map(&self, map: &str, by: &str, wait: Duration) -> Result<MapLock, LockError> {
        let path = self.map_path(map);
        let file = open(&path)?;
        let t = Instant::now();
        loop {
            if try_flock(&file).map_err(io_err(&path))? {
                break;
            }
            if t.elapsed() >= wait {
                let holder = read_holder(&file)
                    .map_or_else(|| "another process".to_string(), |h| h.to_string());
                return Err(LockError::Busy {
                    map: map.into(),
                    holder,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // What the last holder left: a reload it never finished.
        let left = read_holder(&file).and_then(|h| h.reloading_since.map(|s| (h, s)));
        let lock = MapLock {
            file,
            path,
            map: map.into(),
            holder: Holder {
                pid: std::process::id(),
                by: by.into(),
                socket: None,
                reloading_since: None,
            },
            interrupted: left.map(|(h, since)| Interrupted { by: h, since }),
        };
        // Keep the journal of an interrupted reload until it is repaired.
        if lock.interrupted.is_none() {
            lock.write()?;
        }
        Ok(lock)
    }

    /// Becomes the host's one daemon, or says which daemon already is.
    pub fn daemon(&self, socket: &str) -> Result<DaemonLock, LockError> {
        let path = self.daemon_path();
        let file = open(&path)?;
        if !try_flock(&file).map_err(io_err(&path))? {
            let h = read_holder(&file).unwrap_or_default();
            return Err(LockError::DaemonRunning {
                holder: h.to_string(),
                socket: h.socket.unwrap_or_else(|| "unknown".into()),
            });
        }
        let holder = Holder {
            pid: std::process::id(),
            by: "pathpilot daemon".into(),
            socket: Some(socket.into()),
            reloading_since: None,
        };
        write_holder(&file, &holder).map_err(io_err(&path))?;
        Ok(DaemonLock { _file: file })
    }

    /// The running daemon, if one holds the daemon lock.
    pub fn running_daemon(&self) -> Option<Holder> {
        let path = self.daemon_path();
        let file = File::open(&path).ok()?;
        if try_flock(&file).ok()? {
            return None; // nobody holds it (the lock goes with `file`)
        }
        read_holder(&file)
    }
}

fn open(path: &Path) -> Result<File, LockError> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(io_err(d))?;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io_err(path))
}

/// flock(LOCK_EX | LOCK_NB): Ok(false) when another open file holds it.
fn try_flock(f: &File) -> std::io::Result<bool> {
    // SAFETY: a valid open descriptor.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// The holder a lock file names, read through a descriptor already open
/// on it (from its start: the file's one offset is rewound).
fn read_holder(mut f: &File) -> Option<Holder> {
    let mut s = String::new();
    f.seek(SeekFrom::Start(0)).ok()?;
    f.read_to_string(&mut s).ok()?;
    serde_json::from_str(s.trim()).ok()
}

fn write_holder(mut f: &File, h: &Holder) -> std::io::Result<()> {
    let text = serde_json::to_string(h).map_err(std::io::Error::other)?;
    f.set_len(0)?;
    f.seek(SeekFrom::Start(0))?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_data()
}

/// A reload that a writer began and never finished (it died between load
/// and resume).
#[derive(Clone, Debug, PartialEq)]
pub struct Interrupted {
    pub by: Holder,
    pub since: f64,
}

/// A held map lock. Dropping it releases it.
#[derive(Debug)]
pub struct MapLock {
    file: File,
    path: PathBuf,
    map: String,
    holder: Holder,
    interrupted: Option<Interrupted>,
}

impl MapLock {
    pub fn map(&self) -> &str {
        &self.map
    }

    /// The reload a previous holder left unfinished, if any: the map may
    /// be suspended or hold an inactive table because of it.
    pub fn interrupted(&self) -> Option<&Interrupted> {
        self.interrupted.as_ref()
    }

    /// The interrupted reload is dealt with: the journal is this holder's.
    pub fn repaired(&mut self) -> Result<(), LockError> {
        self.interrupted = None;
        self.write()
    }

    fn write(&self) -> Result<(), LockError> {
        write_holder(&self.file, &self.holder).map_err(io_err(&self.path))
    }

    /// Runs `reload` with the journal saying a reload is under way, so
    /// that a death inside it is known to the next daemon start.
    pub fn journaled<T>(&mut self, reload: impl FnOnce() -> T) -> Result<T, LockError> {
        self.holder.reloading_since = Some(unix_now());
        self.write()?;
        let r = reload();
        self.holder.reloading_since = None;
        self.write()?;
        Ok(r)
    }
}

/// The daemon's lock, held for its whole life.
#[derive(Debug)]
pub struct DaemonLock {
    _file: File,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> Locks {
        let d = std::env::temp_dir().join(format!("pathpilot-locks-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        Locks::at(d)
    }

    #[test]
    fn one_writer_per_map() {
        let l = scratch("one");
        let a = l.map("mpatha", "pathpilot reload", Duration::ZERO).unwrap();
        // flock belongs to the open file: a second open in this process
        // contends as another process would.
        let e = l
            .map("mpatha", "pathpilot daemon", Duration::from_millis(50))
            .unwrap_err();
        assert!(
            e.to_string().contains(&format!(
                "mpatha is being changed by pathpilot reload (pid {})",
                std::process::id()
            )),
            "{e}"
        );
        // Another map is free.
        let _b = l.map("mpathb", "pathpilot daemon", Duration::ZERO).unwrap();
        drop(a);
        l.map("mpatha", "pathpilot daemon", Duration::ZERO).unwrap();
    }

    #[test]
    fn a_reload_cut_short_is_in_the_journal() {
        let l = scratch("journal");
        let mut a = l.map("mpatha", "pathpilot reload", Duration::ZERO).unwrap();
        assert!(a.interrupted().is_none());
        a.journaled(|| ()).unwrap();
        drop(a);
        // Finished: nothing interrupted.
        let mut b = l.map("mpatha", "pathpilot daemon", Duration::ZERO).unwrap();
        assert!(b.interrupted().is_none());
        // A holder that dies inside the reload leaves the journal (the
        // lock itself goes with the process).
        b.holder.reloading_since = Some(1.0);
        b.write().unwrap();
        drop(b);
        let mut c = l.map("mpatha", "pathpilot daemon", Duration::ZERO).unwrap();
        let i = c.interrupted().cloned().expect("journal");
        assert_eq!(i.by.by, "pathpilot daemon");
        assert_eq!(i.since, 1.0);
        // Kept until repaired, even across another holder.
        drop(c);
        c = l.map("mpatha", "pathpilot daemon", Duration::ZERO).unwrap();
        assert!(c.interrupted().is_some());
        c.repaired().unwrap();
        drop(c);
        assert!(
            l.map("mpatha", "x", Duration::ZERO)
                .unwrap()
                .interrupted()
                .is_none()
        );
    }

    #[test]
    fn one_daemon_whatever_its_socket() {
        let l = scratch("daemon");
        assert!(l.running_daemon().is_none());
        let d = l.daemon("/run/a.sock").unwrap();
        let e = l.daemon("/run/b.sock").unwrap_err();
        assert!(e.to_string().contains("control socket /run/a.sock"), "{e}");
        let h = l.running_daemon().expect("running");
        assert_eq!(h.socket.as_deref(), Some("/run/a.sock"));
        assert_eq!(h.pid, std::process::id());
        drop(d);
        assert!(l.running_daemon().is_none());
        l.daemon("/run/b.sock").unwrap();
    }
}
