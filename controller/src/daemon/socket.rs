//! The control socket server: JSON lines over a Unix socket (the protocol is
//! in [`crate::ctl::protocol`] and docs/control-socket.md). Reads are answered from the
//! published status without waiting on the engine; changes go to the engine
//! thread and its reply comes back.
//!
//! Each connection is its own task that reads one line, answers it, and only
//! then reads the next, so a connection never buffers more than one request
//! and one response; a client that stops reading is dropped after
//! [`WRITE_TIMEOUT`] and holds nothing of the others.
use std::{
    io,
    os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt},
    path::Path,
    sync::Arc,
    time::Duration,
};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use tokio::{
    io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::{UnixListener, UnixStream},
    sync::Semaphore,
    time::timeout,
};

use super::shared::Shared;
use crate::ctl::{
    protocol::{self, ControlRequest, ErrorCode, MAX_LINE, Response},
    status::LoggedDecision,
};

/// A client whose socket buffer stays full this long is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection that sends no complete line for this long is closed, so
/// idle clients cannot use up [`MAX_CLIENTS`].
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Connections served at once; more are told `unavailable` and closed.
pub const MAX_CLIENTS: usize = 128;

/// Who may do what on the socket, decided by the peer's credentials.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AccessPolicy {
    /// Members of this group (primary or supplementary) may read.
    pub read_gid: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    None,
    Read,
    Full,
}

impl AccessPolicy {
    pub fn access(&self, uid: u32, gid: u32, groups: &[u32]) -> Access {
        if uid == 0 {
            return Access::Full;
        }
        match self.read_gid {
            Some(g) if gid == g || groups.contains(&g) => Access::Read,
            _ => Access::None,
        }
    }
}

/// The supplementary groups of the `Groups:` line of /proc/PID/status.
pub fn parse_proc_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The peer's supplementary groups. SO_PEERGROUPS gives them as they were
/// at connect time; /proc is the fallback for kernels before 4.13, where a
/// recycled pid could mislead, which is why it is only the fallback.
fn peer_groups(stream: &UnixStream, pid: Option<i32>) -> Vec<u32> {
    use std::os::fd::AsRawFd;
    let mut buf = [0u32; 256];
    let mut len = std::mem::size_of_val(&buf) as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `buf` and updates len.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERGROUPS,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc == 0 {
        let n = (len as usize / std::mem::size_of::<u32>()).min(buf.len());
        return buf[..n].to_vec();
    }
    pid.and_then(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .map(|s| parse_proc_groups(&s))
        .unwrap_or_default()
}

fn peer_access(stream: &UnixStream, policy: AccessPolicy) -> Access {
    match stream.peer_cred() {
        Ok(c) => policy.access(c.uid(), c.gid(), &peer_groups(stream, c.pid())),
        Err(_) => Access::None,
    }
}

/// Creates the control socket at `path`: mode 0660 root:`read_gid`, or 0600
/// root:root without a read group, verified by stat afterwards. A stale
/// socket is replaced; a live one (another daemon) is an error. Must be
/// called inside the tokio runtime that will serve it.
pub fn bind(path: &Path, read_gid: Option<u32>) -> Result<UnixListener> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        // The umask may have narrowed it; clients in the read group need x.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot set the mode of {}", dir.display()))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(md) if !md.file_type().is_socket() => bail!(
            "{} exists and is not a socket; remove it or configure another socket path",
            path.display()
        ),
        Ok(_) => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => bail!("another pathpilot daemon is running on {}", path.display()),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => std::fs::remove_file(path)
                .with_context(|| format!("cannot remove the stale socket {}", path.display()))?,
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("cannot probe the socket {}", path.display()));
            }
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot stat {}", path.display())),
    }
    let listener = std::os::unix::net::UnixListener::bind(path)
        .with_context(|| format!("cannot create the control socket {}", path.display()))?;
    // Between bind and chmod the socket has the umask's mode; a client that
    // connects in that moment is still judged by its credentials.
    let (mode, gid) = match read_gid {
        Some(g) => (0o660, g),
        None => (0o600, 0),
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set the mode of {}", path.display()))?;
    std::os::unix::fs::chown(path, Some(0), Some(gid)).with_context(|| {
        format!(
            "cannot give {} to root:{gid} (the daemon must run as root)",
            path.display()
        )
    })?;
    check_socket_file(path, mode, 0, gid)?;
    listener
        .set_nonblocking(true)
        .context("cannot make the control socket non-blocking")?;
    UnixListener::from_std(listener).context("cannot register the control socket")
}

/// Fails unless `path` is a socket with exactly this mode and owner.
pub fn check_socket_file(path: &Path, mode: u32, uid: u32, gid: u32) -> Result<()> {
    let md = std::fs::symlink_metadata(path)
        .with_context(|| format!("cannot stat the control socket {}", path.display()))?;
    let (m, u, g) = (md.mode() & 0o7777, md.uid(), md.gid());
    if !md.file_type().is_socket() || m != mode || u != uid || g != gid {
        bail!(
            "the control socket {} has mode {m:04o} owner {u}:{g}, expected a socket with mode \
             {mode:04o} owner {uid}:{gid}",
            path.display()
        );
    }
    Ok(())
}

/// Serves the control socket until the task is dropped.
pub async fn serve(listener: UnixListener, shared: Shared, policy: AccessPolicy) {
    let slots = Arc::new(Semaphore::new(MAX_CLIENTS));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => match slots.clone().try_acquire_owned() {
                Ok(slot) => {
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        connection(stream, shared, policy).await;
                        drop(slot);
                    });
                }
                Err(_) => {
                    // A fresh socket's buffer is empty: this cannot block.
                    let busy = Response::err(
                        ErrorCode::Unavailable,
                        format!("too many clients (at most {MAX_CLIENTS}); try again"),
                    );
                    let _ = stream.try_write(encode(&busy).as_bytes());
                }
            },
            Err(e) => {
                // Out of fds, most likely: back off instead of spinning.
                eprintln!("pathpilot: control socket: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

enum Line {
    Complete,
    TooLong,
    Eof,
}

/// Reads one line (without its newline) into `out`, never holding more than
/// `max` bytes of it. A last line without a newline counts as a line.
async fn read_line_limited<R: AsyncBufRead + Unpin>(
    r: &mut R,
    out: &mut Vec<u8>,
    max: usize,
) -> io::Result<Line> {
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if out.is_empty() {
                Line::Eof
            } else {
                Line::Complete
            });
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        if out.len() + take > max {
            return Ok(Line::TooLong);
        }
        out.extend_from_slice(&buf[..take]);
        r.consume(if done { take + 1 } else { take });
        if done {
            return Ok(Line::Complete);
        }
    }
}

async fn connection(stream: UnixStream, shared: Shared, policy: AccessPolicy) {
    let access = peer_access(&stream, policy);
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::with_capacity(16 * 1024, rd);
    let mut line = Vec::new();
    loop {
        line.clear();
        let got = match timeout(
            IDLE_TIMEOUT,
            read_line_limited(&mut rd, &mut line, MAX_LINE),
        )
        .await
        {
            Ok(Ok(l)) => l,
            Ok(Err(_)) | Err(_) => return,
        };
        let reply = match got {
            Line::Eof => return,
            Line::TooLong => {
                let e = Response::err(
                    ErrorCode::BadRequest,
                    format!("request line longer than {MAX_LINE} bytes"),
                );
                let _ = send(&mut wr, encode(&e)).await;
                return;
            }
            Line::Complete => match answer(&line, access, &shared).await {
                Some(r) => r,
                None => continue,
            },
        };
        if send(&mut wr, reply).await.is_err() {
            return;
        }
    }
}

async fn send(wr: &mut tokio::net::unix::OwnedWriteHalf, mut line: String) -> io::Result<()> {
    line.push('\n');
    match timeout(WRITE_TIMEOUT, wr.write_all(line.as_bytes())).await {
        Ok(r) => r,
        Err(_) => Err(io::ErrorKind::TimedOut.into()),
    }
}

fn encode(r: &Response) -> String {
    serde_json::to_string(r).unwrap_or_else(|_| {
        r#"{"ok":false,"code":"unavailable","error":"cannot encode the response"}"#.into()
    })
}

/// `{"ok":true,"data":DATA}` from data serialized in place, so a large
/// status is written once, not copied into a `Value` first.
fn ok_raw<T: Serialize + ?Sized>(data: &T) -> String {
    match serde_json::to_string(data) {
        Ok(d) => format!(r#"{{"ok":true,"data":{d}}}"#),
        Err(e) => encode(&Response::err(
            ErrorCode::Unavailable,
            format!("cannot encode the status: {e}"),
        )),
    }
}

/// The response line to one request line; `None` for a blank line.
async fn answer(line: &[u8], access: Access, shared: &Shared) -> Option<String> {
    let Ok(text) = std::str::from_utf8(line) else {
        return Some(encode(&Response::err(
            ErrorCode::BadRequest,
            "not JSON: the request is not UTF-8",
        )));
    };
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let req = match protocol::parse(text) {
        Ok(r) => r,
        Err(e) => return Some(encode(&e)),
    };
    Some(match (access, req.is_change()) {
        (Access::None, _) => encode(&Response::err(
            ErrorCode::Forbidden,
            "not allowed: the control socket is for root and the daemon's read group",
        )),
        (Access::Read, true) => encode(&Response::err(ErrorCode::Forbidden, "changes need root")),
        (_, false) => {
            shared.fresh().await;
            read(&req, shared)
        }
        (Access::Full, true) => encode(&change(req, shared).await),
    })
}

#[derive(Serialize)]
struct LogData<'a> {
    decisions: &'a [LoggedDecision],
    last_seq: u64,
}

fn read(req: &ControlRequest, shared: &Shared) -> String {
    match req {
        ControlRequest::Log { since } => shared.with_status(|s| {
            let since = since.unwrap_or(0);
            // Kept in seq order, so the newer ones are a suffix.
            let from = s.decisions.partition_point(|d| d.seq <= since);
            ok_raw(&LogData {
                decisions: &s.decisions[from..],
                last_seq: s.decisions.last().map_or(0, |d| d.seq),
            })
        }),
        _ => shared.with_status(ok_raw),
    }
}

async fn change(req: ControlRequest, shared: &Shared) -> Response {
    let stopping = || Response::err(ErrorCode::Unavailable, "the daemon is stopping");
    let wait = req.engine_timeout();
    let Some(reply) = shared.submit(req) else {
        return stopping();
    };
    match timeout(wait, reply).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => stopping(),
        Err(_) => Response::err(
            ErrorCode::Unavailable,
            format!(
                "the daemon's engine did not answer within {} s (the change may still be carried out)",
                wait.as_secs()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::{
        io::{BufRead, BufReader, Read, Write},
        os::unix::net::UnixStream as StdStream,
        path::PathBuf,
        sync::atomic::{AtomicUsize, Ordering},
        time::Instant,
    };

    use serde_json::{Value, json};

    use super::*;
    use crate::{
        ctl::{client, fixture::example_status},
        daemon::shared::ToEngine,
    };

    /// A directory of its own under the temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            static N: AtomicUsize = AtomicUsize::new(0);
            let p = std::env::temp_dir().join(format!(
                "pathpilot-sock-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::SeqCst)
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            TempDir(p)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Answers changes like the engine would: known map and path, or not_found.
    fn engine(rx: std::sync::mpsc::Receiver<ToEngine>) {
        for m in rx {
            let ToEngine::Change(c) = m else { continue };
            let r = match &c.request {
                ControlRequest::Pause { map } | ControlRequest::Resume { map }
                    if map == "mpatha" =>
                {
                    Response::ok(json!({"map": map}))
                }
                ControlRequest::Fail { path } | ControlRequest::Reinstate { path }
                    if path == "sdb" =>
                {
                    Response::ok(json!({"path": path}))
                }
                ControlRequest::Pause { map } | ControlRequest::Resume { map } => {
                    Response::err(ErrorCode::NotFound, format!("no map '{map}'"))
                }
                other => Response::err(ErrorCode::NotFound, format!("{other:?}")),
            };
            let _ = c.reply.send(r);
        }
    }

    struct Daemon {
        dir: TempDir,
    }

    impl Daemon {
        fn path(&self) -> PathBuf {
            self.dir.0.join("control.sock")
        }
    }

    /// Serves a socket of `mode` with a test engine. The mode is wide open
    /// in the credential tests so the peer check, not the file mode, decides.
    fn start(policy: AccessPolicy, mode: u32) -> Daemon {
        let d = Daemon {
            dir: TempDir::new("srv"),
        };
        let path = d.path();
        let (shared, rx) = Shared::new(example_status());
        std::thread::spawn(move || engine(rx));
        let (ready_tx, ready) = std::sync::mpsc::channel();
        crate::daemon::serve_in_thread(move || async move {
            let l = UnixListener::bind(&path).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            ready_tx.send(()).unwrap();
            serve(l, shared, policy).await
        });
        ready.recv().unwrap();
        d
    }

    fn exchange(s: &mut BufReader<StdStream>, line: &str) -> Value {
        s.get_mut().write_all(line.as_bytes()).unwrap();
        s.get_mut().write_all(b"\n").unwrap();
        let mut out = String::new();
        s.read_line(&mut out).unwrap();
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out:?}"))
    }

    fn connect(p: &Path) -> BufReader<StdStream> {
        let s = StdStream::connect(p).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        BufReader::new(s)
    }

    #[test]
    fn reads_answer_from_the_status() {
        let d = start(AccessPolicy::default(), 0o600);
        let r = client::call(&d.path(), &ControlRequest::Status).unwrap();
        assert_eq!(r["maps"][0]["name"], "mpatha");
        assert_eq!(r["maps"][0]["paths"].as_array().unwrap().len(), 2);
        assert_eq!(r["decisions"].as_array().unwrap().len(), 3);

        let all: client::LogData = serde_json::from_value(
            client::call(&d.path(), &ControlRequest::Log { since: None }).unwrap(),
        )
        .unwrap();
        assert_eq!(all.decisions.len(), 3);
        assert_eq!(all.last_seq, 3);
        let newer: client::LogData = serde_json::from_value(
            client::call(&d.path(), &ControlRequest::Log { since: Some(1) }).unwrap(),
        )
        .unwrap();
        let seqs: Vec<u64> = newer
            .decisions
            .iter()
            .map(|d| d["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, [2, 3]);
        assert_eq!(newer.decisions[0]["knob"], "max_sectors_kb");
        let none: client::LogData = serde_json::from_value(
            client::call(&d.path(), &ControlRequest::Log { since: Some(3) }).unwrap(),
        )
        .unwrap();
        assert!(none.decisions.is_empty());
    }

    #[test]
    fn changes_go_to_the_engine() {
        let d = start(AccessPolicy::default(), 0o600);
        let r = client::call(
            &d.path(),
            &ControlRequest::Pause {
                map: "mpatha".into(),
            },
        )
        .unwrap();
        assert_eq!(r, json!({"map": "mpatha"}));
        match client::call(
            &d.path(),
            &ControlRequest::Pause {
                map: "mpathz".into(),
            },
        ) {
            Err(client::ClientError::Refused { code, message }) => {
                assert_eq!(code, ErrorCode::NotFound);
                assert_eq!(message, "no map 'mpathz'");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_lines_get_errors_and_the_connection_stays() {
        let d = start(AccessPolicy::default(), 0o600);
        let mut s = connect(&d.path());
        let r = exchange(&mut s, "hello");
        assert_eq!(r["ok"], false);
        assert_eq!(r["code"], "bad_request");
        assert!(r["error"].as_str().unwrap().starts_with("not JSON"), "{r}");
        let r = exchange(&mut s, r#"{"cmd":"explode"}"#);
        assert_eq!(r["code"], "bad_request");
        assert!(r["error"].as_str().unwrap().contains("explode"), "{r}");
        let r = exchange(&mut s, r#"{"cmd":"pause"}"#);
        assert_eq!(r["code"], "bad_request");
        let r = exchange(&mut s, "\u{7f}\u{1}{]");
        assert_eq!(r["code"], "bad_request");
        // A blank line is no request and gets no answer: the next line's
        // answer is the status.
        s.get_mut().write_all(b"\r\n\n").unwrap();
        let r = exchange(&mut s, r#"{"cmd":"status"}"#);
        assert_eq!(r["ok"], true, "{r}");
        // Not UTF-8.
        s.get_mut().write_all(&[0xff, 0xfe, b'\n']).unwrap();
        let mut out = String::new();
        s.read_line(&mut out).unwrap();
        assert!(out.contains("not UTF-8"), "{out}");
    }

    #[test]
    fn a_line_of_the_limit_is_served_a_longer_one_closes() {
        let d = start(AccessPolicy::default(), 0o600);
        let mut s = connect(&d.path());
        let mut exact = r#"{"cmd":"status"}"#.to_string();
        exact.push_str(&" ".repeat(MAX_LINE - exact.len()));
        assert_eq!(exact.len(), MAX_LINE);
        assert_eq!(exchange(&mut s, &exact)["ok"], true);

        let mut s = connect(&d.path());
        let long = vec![b'a'; MAX_LINE + 1];
        // The server may close before it has read everything: ignore EPIPE.
        let _ = s.get_mut().write_all(&long);
        let _ = s.get_mut().write_all(b"\n");
        let mut out = String::new();
        s.read_line(&mut out).unwrap();
        let r: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(r["code"], "bad_request");
        assert_eq!(r["error"], "request line longer than 65536 bytes");
        // Then the connection is closed: EOF (or a reset), never an answer.
        let mut rest = Vec::new();
        let n = s.read_to_end(&mut rest).unwrap_or(0);
        assert_eq!(n, 0, "{:?}", String::from_utf8_lossy(&rest));
    }

    #[test]
    fn fifty_clients_at_once() {
        let d = start(AccessPolicy::default(), 0o600);
        let started = Instant::now();
        let handles: Vec<_> = (0..50)
            .map(|i| {
                let p = d.path();
                std::thread::spawn(move || {
                    // All connect first, then all talk: the server holds 50.
                    let mut s = connect(&p);
                    std::thread::sleep(Duration::from_millis(100));
                    let r = exchange(&mut s, r#"{"cmd":"status"}"#);
                    assert_eq!(r["ok"], true);
                    let r = exchange(&mut s, &format!(r#"{{"cmd":"log","since":{}}}"#, i % 4));
                    assert_eq!(r["data"]["last_seq"], 3);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_client_that_never_reads_blocks_nobody() {
        let d = start(AccessPolicy::default(), 0o600);
        let stuck = StdStream::connect(d.path()).unwrap();
        let mut w = stuck.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            let req = r#"{"cmd":"status"}"#.to_string() + "\n";
            let started = Instant::now();
            // Writes until the daemon drops the connection (EPIPE/ECONNRESET).
            loop {
                if w.write_all(req.as_bytes()).is_err() {
                    return Some(started.elapsed());
                }
                if started.elapsed() > Duration::from_secs(30) {
                    return None;
                }
            }
        });
        // Let the stuck connection fill both socket buffers.
        std::thread::sleep(Duration::from_millis(500));
        for _ in 0..5 {
            let t = Instant::now();
            let r = client::call(&d.path(), &ControlRequest::Status).unwrap();
            assert_eq!(r["maps"][0]["name"], "mpatha");
            assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        }
        let dropped = writer.join().unwrap();
        let dropped = dropped.expect("the stuck client was never dropped");
        assert!(
            dropped >= WRITE_TIMEOUT - Duration::from_secs(1),
            "{dropped:?}"
        );
        drop(stuck);
    }

    const HELPER_SOCKET: &str = "PATHPILOT_TEST_PEER_SOCKET";
    const HELPER_REQUEST: &str = "PATHPILOT_TEST_PEER_REQUEST";

    /// The client side of the credential tests, run by `as_user` in a child
    /// process under another uid: one request, its answer on stdout.
    #[test]
    #[ignore = "helper, run by peer_credentials_decide under another uid"]
    fn peer_helper() {
        let (Ok(sock), Ok(req)) = (std::env::var(HELPER_SOCKET), std::env::var(HELPER_REQUEST))
        else {
            return;
        };
        let mut s = connect(Path::new(&sock));
        let r = exchange(&mut s, &req);
        println!("PEER-RESPONSE {r}");
    }

    fn as_user(sock: &Path, req: &str, gid: u32, groups: &[u32]) -> Value {
        use std::os::unix::process::CommandExt;
        let groups = groups.to_vec();
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "daemon::socket::tests::peer_helper",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_SOCKET, sock)
        .env(HELPER_REQUEST, req);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(65534) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("PEER-RESPONSE ").map(|(_, r)| r))
            .unwrap_or_else(|| {
                panic!(
                    "helper printed no response: {stdout}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        serde_json::from_str(line).unwrap()
    }

    #[test]
    fn peer_credentials_decide() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: changing uid needs root");
            return;
        }
        const READERS: u32 = 4242;
        let d = start(
            AccessPolicy {
                read_gid: Some(READERS),
            },
            0o666,
        );
        let p = d.path();
        let status = r#"{"cmd":"status"}"#;
        let pause = r#"{"cmd":"pause","map":"mpatha"}"#;

        // A stranger: nothing, not even reads.
        for req in [status, pause] {
            let r = as_user(&p, req, 65534, &[]);
            assert_eq!(r["code"], "forbidden", "{req}: {r}");
        }
        // The read group, as a supplementary group or the primary one.
        for (gid, groups) in [(65534, vec![READERS]), (READERS, vec![])] {
            let r = as_user(&p, status, gid, &groups);
            assert_eq!(r["ok"], true, "{r}");
            assert_eq!(r["data"]["maps"][0]["name"], "mpatha");
            let r = as_user(&p, r#"{"cmd":"log","since":2}"#, gid, &groups);
            assert_eq!(r["data"]["decisions"][0]["seq"], 3, "{r}");
            let r = as_user(&p, pause, gid, &groups);
            assert_eq!(r["code"], "forbidden", "{r}");
            assert_eq!(r["error"], "changes need root");
        }
        // Root may change.
        let r = client::call(
            &p,
            &ControlRequest::Pause {
                map: "mpatha".into(),
            },
        )
        .unwrap();
        assert_eq!(r["map"], "mpatha");
    }

    #[test]
    fn access_policy() {
        let none = AccessPolicy::default();
        assert_eq!(none.access(0, 0, &[]), Access::Full);
        assert_eq!(none.access(1000, 1000, &[]), Access::None);
        let g = AccessPolicy { read_gid: Some(7) };
        assert_eq!(g.access(1000, 7, &[]), Access::Read);
        assert_eq!(g.access(1000, 1000, &[3, 7]), Access::Read);
        assert_eq!(g.access(1000, 1000, &[3]), Access::None);
        assert_eq!(
            parse_proc_groups("Name:\tx\nGid:\t1\t1\t1\t1\nGroups:\t4 24 27 \nNgid:\t0\n"),
            [4, 24, 27]
        );
        assert!(parse_proc_groups("Groups:\t\n").is_empty());
    }

    fn bind_in_runtime(path: &Path, gid: Option<u32>) -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async { bind(path, gid).map(drop) })
    }

    #[test]
    fn bind_sets_and_checks_mode_and_owner() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: chown needs root");
            return;
        }
        let dir = TempDir::new("bind");
        let path = dir.0.join("run/pathpilot/control.sock");
        bind_in_runtime(&path, None).unwrap();
        let md = std::fs::metadata(path.parent().unwrap()).unwrap();
        assert_eq!(md.mode() & 0o7777, 0o755);
        check_socket_file(&path, 0o600, 0, 0).unwrap();

        // The listener is gone, the file stays: stale, replaced.
        bind_in_runtime(&path, Some(4242)).unwrap();
        check_socket_file(&path, 0o660, 0, 4242).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = check_socket_file(&path, 0o660, 0, 4242)
            .unwrap_err()
            .to_string();
        assert!(e.contains("has mode 0666 owner 0:4242, expected"), "{e}");

        // A live daemon on the path is not disturbed.
        let live = std::os::unix::net::UnixListener::bind(dir.0.join("live.sock")).unwrap();
        let e = bind_in_runtime(&dir.0.join("live.sock"), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("another pathpilot daemon is running on "),
            "{e}"
        );
        assert!(dir.0.join("live.sock").exists());
        drop(live);

        // Nor is a file that is not a socket.
        let file = dir.0.join("file");
        std::fs::write(&file, "x").unwrap();
        let e = bind_in_runtime(&file, None).unwrap_err().to_string();
        assert!(e.contains("exists and is not a socket"), "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    }
}
