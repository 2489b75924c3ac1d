//! The metrics endpoint: `GET /metrics` (or HEAD) answered with the
//! encoded status, one request per connection, then close.
use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::{Context, Result};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
    time::timeout,
};

use super::render;
use crate::daemon::shared::Shared;

/// A scrape request's head is a few hundred bytes; more is not a scraper.
const MAX_REQUEST: usize = 8 * 1024;
const IO_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_CONNECTIONS: usize = 16;

/// Listens for scrapes; binding fails early (address in use) so the daemon
/// can report it at start.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for metrics on {addr}"))
}

/// Binds `addr` and serves `/metrics` until the task is dropped.
pub async fn serve(addr: SocketAddr, shared: Shared) -> Result<()> {
    let l = bind(addr).await?;
    serve_listener(l, shared).await;
    Ok(())
}

pub async fn serve_listener(listener: TcpListener, shared: Shared) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    let _ = stream.try_write(&response(
                        "503 Service Unavailable",
                        "text/plain",
                        b"busy\n",
                        false,
                    ));
                    continue;
                };
                let shared = shared.clone();
                tokio::spawn(async move {
                    http(stream, shared).await;
                    drop(slot);
                });
            }
            Err(e) => {
                eprintln!("pathpilot: metrics: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

fn response(status: &str, ctype: &str, body: &[u8], head_only: bool) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if status.starts_with("405") {
        r.push_str("Allow: GET, HEAD\r\n");
    }
    r.push_str("\r\n");
    let mut r = r.into_bytes();
    if !head_only {
        r.extend_from_slice(body);
    }
    r
}

/// Reads the request head; `false` when it exceeds the limit.
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut chunk = [0u8; 1024];
    loop {
        if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n") {
            return Ok(true);
        }
        if buf.len() > MAX_REQUEST {
            return Ok(false);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The response to a request head.
fn route(head: &[u8], shared: &Shared) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut first = text.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return response("405 Method Not Allowed", "text/plain", b"only GET\n", false);
    }
    if path != "/metrics" {
        return response("404 Not Found", "text/plain", b"see /metrics\n", head_only);
    }
    let body = shared.with_status(render);
    response(
        "200 OK",
        "text/plain; version=0.0.4; charset=utf-8",
        body.as_bytes(),
        head_only,
    )
}

async fn http(mut stream: TcpStream, shared: Shared) {
    let mut buf = Vec::with_capacity(1024);
    let reply = match timeout(IO_TIMEOUT, read_head(&mut stream, &mut buf)).await {
        Ok(Ok(true)) => {
            shared.fresh().await;
            route(&buf, &shared)
        }
        Ok(Ok(false)) => response(
            "431 Request Header Fields Too Large",
            "text/plain",
            b"request too large\n",
            false,
        ),
        _ => return,
    };
    let _ = timeout(IO_TIMEOUT, async {
        stream.write_all(&reply).await?;
        stream.shutdown().await
    })
    .await;
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;
    use crate::ctl::fixture::example_status;

    #[test]
    fn http_serves_metrics_only() {
        let (shared, _rx) = Shared::new(example_status());
        let (tx, rx) = std::sync::mpsc::channel();
        crate::daemon::serve_in_thread(move || async move {
            let l = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            serve_listener(l, shared).await
        });
        let addr = rx.recv().unwrap();
        let get = |req: &[u8]| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let _ = s.write_all(req);
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            String::from_utf8_lossy(&out).into_owned()
        };
        let r = get(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("Content-Type: text/plain; version=0.0.4"), "{r}");
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        assert_eq!(body, render(&example_status()));
        let r = get(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        let r = get(b"GET / HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 404"), "{r}");
        let r = get(b"POST /metrics HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 405"), "{r}");
        let r = get(b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(
            r.starts_with("HTTP/1.1 200") && r.ends_with("\r\n\r\n"),
            "{r}"
        );
        let mut big = b"GET /metrics HTTP/1.1\r\n".to_vec();
        big.extend(std::iter::repeat_n(b'x', 20_000));
        let r = get(&big);
        assert!(r.starts_with("HTTP/1.1 431"), "{r}");
        // A client that sends nothing does not stop the next one.
        let _idle = std::net::TcpStream::connect(addr).unwrap();
        let r = get(b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
    }
}
