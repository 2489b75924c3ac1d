//! Detecting multipathd: it reloads any map it owns from its own config, so
//! a change pathpilot makes under it would be undone without a word.
use std::fs;

/// multipathd's control socket, an abstract unix socket.
const SOCKET: &str = "@/org/kernel/linux/storage/multipathd";

/// How multipathd was found running, if it was.
pub fn running() -> Option<String> {
    if let Ok(unix) = fs::read_to_string("/proc/net/unix")
        && unix
            .lines()
            .any(|l| l.split_whitespace().last() == Some(SOCKET))
    {
        return Some(format!("its socket {SOCKET} is open"));
    }
    let pid = fs::read_to_string("/run/multipathd.pid").ok()?;
    let pid = pid.trim();
    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    (comm.trim() == "multipathd").then(|| format!("pid {pid} (/run/multipathd.pid)"))
}
