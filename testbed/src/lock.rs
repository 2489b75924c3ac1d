//! An exclusive `flock` on a file, held while it is alive.
use std::fs;
use std::os::fd::AsRawFd;
use std::path::Path;

use anyhow::{Context, Result, bail};

/// An exclusive `flock` on a file, released on drop: keeps concurrent
/// builds (two test binaries, a test and `cargo xtask vm`) from writing the
/// same cache entry, and two VMs from sharing the host's cores.
pub struct Lock(#[allow(dead_code)] fs::File);

impl Lock {
    /// Takes the lock, waiting (and saying so, naming `what`) while
    /// another process holds it.
    pub fn take(path: &Path, what: &str) -> Result<Self> {
        if let Some(d) = path.parent() {
            fs::create_dir_all(d)?;
        }
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .with_context(|| format!("cannot open lock {}", path.display()))?;
        // SAFETY: flock on a file descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            eprintln!("testbed: waiting for {what} (lock {})", path.display());
            // SAFETY: as above.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
                bail!(
                    "flock {}: {}",
                    path.display(),
                    std::io::Error::last_os_error()
                );
            }
        }
        Ok(Lock(f))
    }
}
