//! multipathd, the daemon of multipath-tools: whether it runs, and its
//! control socket. Where it runs it owns its maps (it reloads any of them
//! from its own configuration), so pathpilot works beside it through the
//! commands it offers (fail and reinstate a path, set one marginal,
//! reconfigure) and takes its maps over only when it has stopped.
//!
//! The socket is the one `multipathd -k` talks to: an abstract unix socket;
//! a command is its length (a native `size_t`, counting a final NUL) and
//! its text, and so is the reply. "ok" and "fail" are the replies of the
//! commands that change something; the others reply with text.
use std::{
    fs,
    io::{Read, Write},
    os::{linux::net::SocketAddrExt, unix::net::UnixStream},
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

/// multipathd's control socket, an abstract unix socket.
const SOCKET: &str = "/org/kernel/linux/storage/multipathd";

/// How long a command may take before multipathd is taken for stuck (its
/// own client waits 4 s; a reconfigure is answered before it is done).
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Replies are at most this long (multipathd's own limit).
const MAX_REPLY: usize = 32 << 20;

/// How multipathd was found running, if it was.
pub fn running() -> Option<String> {
    if let Ok(unix) = fs::read_to_string("/proc/net/unix")
        && unix
            .lines()
            .any(|l| l.split_whitespace().last() == Some(&format!("@{SOCKET}")[..]))
    {
        return Some(format!("its socket @{SOCKET} is open"));
    }
    let pid = fs::read_to_string("/run/multipathd.pid").ok()?;
    let pid = pid.trim();
    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    (comm.trim() == "multipathd").then(|| format!("pid {pid} (/run/multipathd.pid)"))
}

/// Why a command to multipathd did not do what was asked.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MultipathdError {
    #[error("multipathd is not running (no socket @{SOCKET}: {0})")]
    NotRunning(String),
    #[error("multipathd: talking to its socket failed: {0}")]
    Io(String),
    #[error("multipathd refused '{command}': {reply}")]
    Refused { command: String, reply: String },
}

/// One command's packet: its length, counting the final NUL, then the
/// text and the NUL.
pub fn encode(command: &str) -> Vec<u8> {
    let len = command.len() + 1;
    let mut p = Vec::with_capacity(size_of::<usize>() + len);
    p.extend_from_slice(&len.to_ne_bytes());
    p.extend_from_slice(command.as_bytes());
    p.push(0);
    p
}

/// A reply's text from its data (the final NUL and anything after it
/// left out).
pub fn decode(data: &[u8]) -> String {
    let end = data.iter().position(|b| *b == 0).unwrap_or(data.len());
    String::from_utf8_lossy(&data[..end]).into_owned()
}

/// Whether the reply to a command that changes something says it was
/// done: "ok"; anything else ("fail", a message) says why not.
pub fn accepted(reply: &str) -> bool {
    reply.trim() == "ok"
}

/// Sends `command` over `s` and reads the reply.
fn exchange(s: &mut UnixStream, command: &str) -> Result<String, MultipathdError> {
    let io = |e: std::io::Error| MultipathdError::Io(e.to_string());
    s.set_read_timeout(Some(REPLY_TIMEOUT)).map_err(io)?;
    s.set_write_timeout(Some(REPLY_TIMEOUT)).map_err(io)?;
    s.write_all(&encode(command)).map_err(io)?;
    let mut len = [0u8; size_of::<usize>()];
    s.read_exact(&mut len).map_err(io)?;
    let len = usize::from_ne_bytes(len);
    if len == 0 || len >= MAX_REPLY {
        return Err(MultipathdError::Io(format!("a reply of {len} bytes")));
    }
    let mut data = vec![0u8; len];
    s.read_exact(&mut data).map_err(io)?;
    Ok(decode(&data))
}

/// A connection to multipathd's control socket.
pub struct Multipathd {
    stream: UnixStream,
}

impl Multipathd {
    pub fn connect() -> Result<Self, MultipathdError> {
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(SOCKET)
            .map_err(|e| MultipathdError::Io(e.to_string()))?;
        let stream = UnixStream::connect_addr(&addr)
            .map_err(|e| MultipathdError::NotRunning(e.to_string()))?;
        Ok(Multipathd { stream })
    }

    /// Sends `command` (as `multipathd -k` takes it) and returns the reply.
    pub fn command(&mut self, command: &str) -> Result<String, MultipathdError> {
        exchange(&mut self.stream, command)
    }

    /// Sends a command that changes something; an error unless "ok".
    pub fn act(&mut self, command: &str) -> Result<(), MultipathdError> {
        let reply = self.command(command)?;
        if accepted(&reply) {
            Ok(())
        } else {
            Err(MultipathdError::Refused {
                command: command.to_string(),
                reply: reply.trim().to_string(),
            })
        }
    }
}

/// Whether systemd manages the services here (else multipathd runs as a
/// plain daemon, as in a minimal system or a test guest).
fn systemd() -> bool {
    Path::new("/run/systemd/system").exists()
}

fn systemctl(args: &[&str]) -> Result<(), MultipathdError> {
    let out = Command::new("systemctl")
        .args(args)
        .output()
        .map_err(|e| MultipathdError::Io(format!("systemctl: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(MultipathdError::Io(format!(
            "systemctl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Waits until multipathd runs (`want`) or not, at most `timeout`.
fn wait_running(want: bool, timeout: Duration) -> bool {
    let t = Instant::now();
    loop {
        if running().is_some() == want {
            return true;
        }
        if t.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stops multipathd so that it leaves its maps in place, queueing as they
/// are (`forcequeueing daemon` first: with `queue_without_daemon no`, its
/// default, it would switch every map to fail with no path as it exits),
/// and so that nothing starts it again (its socket unit, or `multipath
/// -u` from udev) until [`start`]. Returns how it was stopped.
pub fn stop(timeout: Duration) -> Result<String, MultipathdError> {
    Multipathd::connect()?.act("forcequeueing daemon")?;
    let how = if systemd() {
        // Masked first: nothing may start it between the stop and the mask.
        systemctl(&[
            "mask",
            "--runtime",
            "multipathd.socket",
            "multipathd.service",
        ])?;
        systemctl(&["stop", "multipathd.socket", "multipathd.service"])?;
        "systemctl mask --runtime, then stop, multipathd.socket and multipathd.service"
    } else {
        Multipathd::connect()?.act("shutdown")?;
        "multipathd's shutdown command (no systemd)"
    };
    if !wait_running(false, timeout) {
        let _ = Multipathd::connect().and_then(|mut c| c.act("restorequeueing daemon"));
        return Err(MultipathdError::Io(format!(
            "still running {} s after {how}",
            timeout.as_secs()
        )));
    }
    Ok(how.into())
}

/// Keeps a multipathd that is not running from being started (after a
/// stop that was cut short before the mask).
pub fn keep_stopped() {
    if systemd() {
        let _ = systemctl(&[
            "mask",
            "--runtime",
            "multipathd.socket",
            "multipathd.service",
        ]);
    }
}

/// Starts multipathd (unmasked first where systemd runs), and waits until
/// it answers on its socket. Returns how it was started.
pub fn start(timeout: Duration) -> Result<String, MultipathdError> {
    let how = if systemd() {
        systemctl(&[
            "unmask",
            "--runtime",
            "multipathd.socket",
            "multipathd.service",
        ])?;
        systemctl(&["start", "multipathd.service"])?;
        "systemctl unmask --runtime, then start, multipathd.service"
    } else {
        let st = Command::new("multipathd")
            .status()
            .map_err(|e| MultipathdError::Io(format!("multipathd: {e}")))?;
        if !st.success() {
            return Err(MultipathdError::Io(format!("multipathd: {st}")));
        }
        "multipathd (no systemd)"
    };
    let t = Instant::now();
    loop {
        if Multipathd::connect()
            .and_then(|mut c| c.command("show daemon"))
            .is_ok()
        {
            return Ok(how.into());
        }
        if t.elapsed() > timeout {
            return Err(MultipathdError::Io(format!(
                "not answering {} s after {how}",
                timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether multipathd's configuration groups marginal paths apart
/// (`marginal_pathgroups`), as its `show config` says.
pub fn marginal_groups() -> Result<bool, MultipathdError> {
    let config = Multipathd::connect()?.command("show config")?;
    Ok(marginal_groups_in(&config))
}

/// [`marginal_groups`] from the text of `show config` (its `defaults`
/// section: yes/no in 0.9.4, on/off/fpin later).
pub fn marginal_groups_in(config: &str) -> bool {
    config.lines().any(|l| {
        let mut w = l.split_whitespace();
        w.next() == Some("marginal_pathgroups")
            && matches!(
                w.next().map(|v| v.trim_matches('"')),
                Some("yes" | "on" | "fpin")
            )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packet_is_its_length_with_the_nul_then_the_text() {
        let p = encode("show maps");
        let n = size_of::<usize>();
        assert_eq!(usize::from_ne_bytes(p[..n].try_into().unwrap()), 10);
        assert_eq!(&p[n..], b"show maps\0");
        assert_eq!(decode(b"ok\n\0"), "ok\n");
        assert_eq!(decode(b"no nul"), "no nul");
        assert!(accepted("ok\n"));
        assert!(!accepted("fail\n"));
        assert!(!accepted("timeout\n"));
    }

    #[test]
    fn marginal_groups_are_read_from_the_config() {
        assert!(!marginal_groups_in(
            "defaults {\n\tmarginal_pathgroups \"no\"\n}\n"
        ));
        assert!(marginal_groups_in(
            "defaults {\n\tmarginal_pathgroups \"yes\"\n}\n"
        ));
        assert!(marginal_groups_in(
            "defaults {\n\tmarginal_pathgroups \"fpin\"\n}\n"
        ));
        assert!(!marginal_groups_in("defaults {\n}\n"));
    }

    #[test]
    fn a_command_and_its_reply_cross_the_socket() {
        // A peer that answers as multipathd does: "ok" to one command,
        // "fail" to another.
        let (mut ours, mut theirs) = UnixStream::pair().unwrap();
        let peer = std::thread::spawn(move || {
            for _ in 0..2 {
                let mut len = [0u8; size_of::<usize>()];
                theirs.read_exact(&mut len).unwrap();
                let mut cmd = vec![0u8; usize::from_ne_bytes(len)];
                theirs.read_exact(&mut cmd).unwrap();
                let reply: &[u8] = if decode(&cmd) == "fail path sdb" {
                    b"ok\n\0"
                } else {
                    b"fail\n\0"
                };
                theirs.write_all(&reply.len().to_ne_bytes()).unwrap();
                theirs.write_all(reply).unwrap();
            }
        });
        let mut m = Multipathd {
            stream: ours.try_clone().unwrap(),
        };
        assert_eq!(m.act("fail path sdb"), Ok(()));
        assert_eq!(
            m.act("reinstate path sdz"),
            Err(MultipathdError::Refused {
                command: "reinstate path sdz".into(),
                reply: "fail".into()
            })
        );
        peer.join().unwrap();
        // The peer gone: an I/O error, not a hang.
        let e = exchange(&mut ours, "show maps").unwrap_err();
        assert!(matches!(e, MultipathdError::Io(_)), "{e:?}");
    }
}
