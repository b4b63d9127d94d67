//! A tiny HTTP server and client bound inside namespaces, for connectivity tests.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};

use crate::in_netns::{enter, run_in};

/// The body every [`http_server`] answers with.
pub const HTTP_BODY: &str = "rcni-testkit ok\n";

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const IO_TIMEOUT: Duration = Duration::from_secs(3);
const ACCEPT_POLL: Duration = Duration::from_millis(10);
/// Requests larger than this are answered without reading the rest.
const MAX_REQUEST: usize = 8 * 1024;

/// A running [`http_server`]; dropping it stops the server and waits for its thread.
#[derive(Debug)]
pub struct HttpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HttpServer {
    /// The address it listens on (with the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>:<port>/`, ready for [`http_get`].
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Serves [`HTTP_BODY`] on `addr:port` inside namespace `ns` (port 0 picks a free one)
/// until the returned guard is dropped. Returns once the socket listens.
pub fn http_server(ns: &str, addr: impl Into<IpAddr>, port: u16) -> anyhow::Result<HttpServer> {
    let bind_to = SocketAddr::new(addr.into(), port);
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let ns_owned = ns.to_owned();
    let stop_flag = Arc::clone(&stop);
    let thread = thread::spawn(move || {
        let listener = enter(&ns_owned).and_then(|()| listen(bind_to));
        let listener = match listener {
            Ok(listener) => {
                let _ = ready_tx.send(listener.local_addr().map_err(anyhow::Error::from));
                listener
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e));
                return;
            }
        };
        serve(&listener, &stop_flag);
    });
    let addr = ready_rx
        .recv()
        .map_err(|_| anyhow!("http server thread for {ns} died"))?
        .with_context(|| format!("http server on {bind_to} in {ns}"))?;
    Ok(HttpServer {
        addr,
        stop,
        thread: Some(thread),
    })
}

fn listen(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(addr).with_context(|| format!("cannot bind {addr}"))?;
    // Non-blocking accept lets the loop notice the stop flag.
    listener.set_nonblocking(true)?;
    Ok(listener)
}

fn serve(listener: &TcpListener, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                // One small client at a time is all connectivity tests need.
                let _ = answer(stream);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => thread::sleep(ACCEPT_POLL),
            Err(_) => thread::sleep(ACCEPT_POLL),
        }
    }
}

fn answer(mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    read_request_head(&mut stream)?;
    let response = format!(
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{HTTP_BODY}",
        HTTP_BODY.len()
    );
    stream.write_all(response.as_bytes())
}

fn read_request_head(stream: &mut TcpStream) -> std::io::Result<()> {
    let mut request = Vec::new();
    let mut chunk = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < MAX_REQUEST {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&chunk[..n]);
    }
    Ok(())
}

/// GETs `url` (`http://<ip literal>[:port]/path`) from inside namespace `from_ns` and
/// returns the body of a 200 answer; any other status is an error. Connecting gives up
/// after 2 s, reading after 3 s.
pub fn http_get(from_ns: &str, url: &str) -> anyhow::Result<String> {
    let (addr, path) = parse_url(url)?;
    let stream = run_in(from_ns, move || {
        TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
            .with_context(|| format!("cannot connect to {addr}"))
    })?;
    // The socket stays in the namespace it was made in; the I/O can happen here.
    fetch(stream, addr, &path).with_context(|| format!("GET {url} from {from_ns}"))
}

fn fetch(mut stream: TcpStream, addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("malformed HTTP response: {response:?}"))?;
    let status = head.split_whitespace().nth(1).unwrap_or_default();
    if status != "200" {
        bail!("HTTP status {status}: {head}");
    }
    Ok(body.to_owned())
}

/// Splits `http://host[:port][/path]`; host must be an IP literal (IPv6 in brackets).
fn parse_url(url: &str) -> anyhow::Result<(SocketAddr, String)> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("only http:// URLs are supported: {url}"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = authority
        .parse::<SocketAddr>()
        .or_else(|_| {
            let ip = authority.trim_start_matches('[').trim_end_matches(']');
            ip.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 80))
        })
        .map_err(|_| anyhow!("host of {url} is not an IP address with an optional port"))?;
    Ok((addr, path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_with_ip_literals_parse() {
        let (a, p) = parse_url("http://198.18.0.1:8080/x/y").unwrap();
        assert_eq!(
            (a.to_string(), p.as_str()),
            ("198.18.0.1:8080".into(), "/x/y")
        );
        let (a, p) = parse_url("http://198.18.0.1").unwrap();
        assert_eq!((a.to_string(), p.as_str()), ("198.18.0.1:80".into(), "/"));
        let (a, _) = parse_url("http://[2001:2::1]:81/").unwrap();
        assert_eq!(a.to_string(), "[2001:2::1]:81");
        let (a, _) = parse_url("http://[2001:2::1]/").unwrap();
        assert_eq!(a.to_string(), "[2001:2::1]:80");
        assert!(parse_url("https://198.18.0.1/").is_err());
        assert!(parse_url("http://example.com/").is_err());
    }

    #[test]
    fn server_in_a_missing_namespace_fails_to_start() {
        assert!(http_server("rcnit-does-not-exist", [127, 0, 0, 1], 0).is_err());
    }
}
