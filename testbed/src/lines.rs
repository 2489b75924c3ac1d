//! Lines from the VM's sockets (the command agent, QMP), read against a
//! deadline.
use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Reads one `\n`-terminated line (without the `\n`) before `deadline`.
/// Returns `Ok(false)` on timeout; `alive` runs between short waits so a
/// dead QEMU is reported at once rather than at the deadline.
pub fn read_line_until(
    r: &mut BufReader<UnixStream>,
    buf: &mut Vec<u8>,
    deadline: Instant,
    alive: &mut dyn FnMut() -> Result<()>,
) -> Result<bool> {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Ok(false);
        }
        let slice = (deadline - now).clamp(Duration::from_millis(1), Duration::from_millis(250));
        r.get_ref().set_read_timeout(Some(slice))?;
        match r.read_until(b'\n', buf) {
            Ok(_) if buf.last() == Some(&b'\n') => {
                buf.pop();
                return Ok(true);
            }
            Ok(_) => bail!("the VM closed the channel"),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                alive()?
            }
            Err(e) => return Err(e).context("reading from the VM"),
        }
    }
}
