//! The host side of the guest's command agent (`/init`, init.sh): one
//! line per message on the virtio-serial port, payloads in base64.
//!
//! host -> guest: `HELLO`, `C <id> <timeout-s> <base64 script>`, `OFF`;
//! guest -> host: `@@READY <uptime>`, and per command
//! `@@R <id> <rc>`, `@@O`, base64 stdout, `@@E`, base64 stderr, `@@Z <id>`.
use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::base64;
use crate::lines::read_line_until;

/// The result of one guest command.
#[derive(Debug, Clone)]
pub struct Output {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Host-side round trip, including the agent's overhead.
    pub elapsed: Duration,
}

impl Output {
    pub fn success(&self) -> bool {
        self.code == 0
    }
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// The agent's channel, once QEMU has connected it.
pub struct Agent {
    r: BufReader<UnixStream>,
    w: UnixStream,
    next_id: u64,
}

impl Agent {
    pub fn new(stream: UnixStream) -> Result<Agent> {
        Ok(Agent {
            r: BufReader::new(stream.try_clone()?),
            w: stream,
            next_id: 1,
        })
    }

    /// Greets the agent and waits for it to say it is ready; returns the
    /// guest's uptime as it reports it, or `None` at the deadline.
    pub fn wait_ready(
        &mut self,
        deadline: Instant,
        alive: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Option<String>> {
        writeln!(self.w, "HELLO")?;
        let mut line = Vec::new();
        loop {
            line.clear();
            if !read_line_until(&mut self.r, &mut line, deadline, alive)? {
                return Ok(None);
            }
            if let Some(up) = line.strip_prefix(b"@@READY ") {
                return Ok(Some(String::from_utf8_lossy(up).into_owned()));
            }
        }
    }

    /// Runs `script` with the guest's `sh`, killed by the guest after
    /// `timeout` (at least 1 s). `None`: no answer within that and 15 s
    /// more.
    pub fn exec(
        &mut self,
        script: &str,
        timeout: Duration,
        alive: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Option<Output>> {
        let id = self.next_id;
        self.next_id += 1;
        let secs = timeout.as_secs().max(1);
        let t = Instant::now();
        writeln!(
            self.w,
            "C {id} {secs} {}",
            base64::encode(script.as_bytes())
        )
        .context("the agent channel is closed")?;
        let deadline = t + Duration::from_secs(secs + 15);
        let (mut code, mut out, mut err) = (None, Vec::new(), Vec::new());
        let mut section = 0u8;
        let mut line = Vec::new();
        loop {
            line.clear();
            if !read_line_until(&mut self.r, &mut line, deadline, alive)? {
                return Ok(None);
            }
            if let Some(rest) = line.strip_prefix(b"@@R ") {
                let s = String::from_utf8_lossy(rest);
                let mut it = s.split_whitespace();
                if it.next() != Some(&id.to_string()) {
                    continue; // a stale reply to a command that timed out
                }
                code = it.next().and_then(|c| c.parse::<i32>().ok());
                section = 0;
            } else if code.is_none() {
                continue;
            } else if line == b"@@O" {
                section = 1;
            } else if line == b"@@E" {
                section = 2;
            } else if line.starts_with(b"@@Z ") {
                break;
            } else if section == 1 {
                out.extend_from_slice(&line);
            } else if section == 2 {
                err.extend_from_slice(&line);
            }
        }
        Ok(Some(Output {
            code: code.unwrap_or(-1),
            stdout: base64::decode(&out)?,
            stderr: base64::decode(&err)?,
            elapsed: t.elapsed(),
        }))
    }

    /// Asks the guest to power off (best effort: the caller waits for
    /// QEMU to exit, and kills it otherwise).
    pub fn power_off(&mut self) {
        let _ = writeln!(self.w, "OFF");
    }
}
