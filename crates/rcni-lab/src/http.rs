//! A real HTTP request between two pods: a one-shot server bound inside one namespace and a
//! client connecting from another. Sockets stay in the namespace they were created in, so each
//! is made on a namespace thread and then used from an ordinary thread. Bounded in time.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cni_linux::NetNs;

const DEADLINE: Duration = Duration::from_secs(5);

/// Serves one request with `body`, then stops (or gives up after the deadline).
pub struct OneShotServer {
    pub addr: SocketAddr,
    handle: JoinHandle<Result<(), String>>,
}

impl OneShotServer {
    pub fn start(ns: &NetNs, ip: IpAddr, port: u16, body: String) -> Result<OneShotServer, String> {
        let listener = ns
            .run(|| TcpListener::bind(SocketAddr::new(ip, port)))
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("bind {ip}:{port}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let handle = std::thread::spawn(move || serve_one(listener, &body));
        Ok(OneShotServer { addr, handle })
    }

    pub fn finish(self) -> Result<(), String> {
        self.handle
            .join()
            .unwrap_or_else(|_| Err("server thread panicked".into()))
    }
}

fn serve_one(listener: TcpListener, body: &str) -> Result<(), String> {
    let started = Instant::now();
    loop {
        match listener.accept() {
            Ok((mut conn, _)) => {
                conn.set_nonblocking(false).map_err(|e| e.to_string())?;
                conn.set_read_timeout(Some(DEADLINE))
                    .map_err(|e| e.to_string())?;
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf);
                let reply = format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                return conn.write_all(reply.as_bytes()).map_err(|e| e.to_string());
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if started.elapsed() > DEADLINE {
                    return Err("no request arrived".into());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// `GET /` from inside `ns` to `addr`; returns the status line and the body.
pub fn get(ns: &NetNs, addr: SocketAddr) -> Result<(String, String), String> {
    let mut stream = ns
        .run(|| TcpStream::connect_timeout(&addr, DEADLINE))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(DEADLINE))
        .map_err(|e| e.to_string())?;
    let host = addr.ip();
    stream
        .write_all(format!("GET / HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| e.to_string())?;
    let status = response.lines().next().unwrap_or_default().to_string();
    let body = response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    Ok((status, body))
}
