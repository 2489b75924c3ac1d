//! A synchronous QMP client: enough to pull and restore paths and to
//! change throttle limits while the guest runs.
use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::lines::read_line_until;

pub struct Qmp {
    r: BufReader<UnixStream>,
    w: UnixStream,
    /// Events seen while waiting for command replies: `wait_event` must
    /// find an event that arrived before it was called.
    events: Vec<Value>,
}

impl Qmp {
    pub fn handshake(stream: UnixStream) -> Result<Self> {
        let w = stream.try_clone()?;
        let mut q = Qmp {
            r: BufReader::new(stream),
            w,
            events: Vec::new(),
        };
        let greeting = q
            .read(Instant::now() + Duration::from_secs(10))?
            .context("no QMP greeting within 10 s")?;
        if greeting.get("QMP").is_none() {
            bail!("unexpected QMP greeting: {greeting}");
        }
        q.execute("qmp_capabilities", json!({}))?;
        Ok(q)
    }

    fn read(&mut self, deadline: Instant) -> Result<Option<Value>> {
        let mut buf = Vec::new();
        if !read_line_until(&mut self.r, &mut buf, deadline, &mut || Ok(()))? {
            return Ok(None);
        }
        let v: Value = serde_json::from_slice(&buf)
            .with_context(|| format!("bad QMP message: {}", String::from_utf8_lossy(&buf)))?;
        Ok(Some(v))
    }

    /// Runs a command; an `error` reply becomes an `Err` naming the command.
    pub fn execute(&mut self, cmd: &str, args: Value) -> Result<Value> {
        let msg = json!({"execute": cmd, "arguments": args});
        writeln!(self.w, "{msg}").context("QMP socket closed")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let m = self
                .read(deadline)?
                .with_context(|| format!("QMP {cmd}: no reply within 30 s"))?;
            if m.get("event").is_some() {
                self.events.push(m);
            } else if let Some(r) = m.get("return") {
                return Ok(r.clone());
            } else if let Some(e) = m.get("error") {
                bail!("QMP {msg} failed: {}", e.get("desc").unwrap_or(e));
            }
        }
    }

    /// Waits for an event (possibly already received) matching `pred`.
    pub fn wait_event(
        &mut self,
        name: &str,
        pred: impl Fn(&Value) -> bool,
        timeout: Duration,
    ) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self
                .events
                .iter()
                .position(|e| e["event"] == name && pred(&e["data"]))
            {
                return Ok(self.events.remove(i));
            }
            match self.read(deadline)? {
                Some(m) if m.get("event").is_some() => self.events.push(m),
                Some(_) => {}
                None => bail!("QMP event {name} not seen within {timeout:?}"),
            }
        }
    }
}
