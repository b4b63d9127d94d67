//! Connection probes for policy tests: TCP and UDP servers on given ports inside a namespace
//! (stopped when dropped), and single connection attempts from another namespace with a
//! timeout, so that a test can probe a whole matrix of pods with real connections.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;

use crate::in_netns::run_in;

/// How often the servers look at their stop flag.
const POLL: Duration = Duration::from_millis(50);

/// TCP servers (accept and close) and UDP echo servers on `ports` of `addr` in a namespace.
pub struct Servers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Starts the servers; returns once every socket is bound.
pub fn serve_tcp_udp(ns: &str, addr: IpAddr, ports: &[u16]) -> anyhow::Result<Servers> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for &port in ports {
        let at = SocketAddr::new(addr, port);
        let (tcp, udp) = run_in(ns, move || {
            let tcp = TcpListener::bind(at).with_context(|| format!("bind tcp {at}"))?;
            tcp.set_nonblocking(true)?;
            let udp = UdpSocket::bind(at).with_context(|| format!("bind udp {at}"))?;
            udp.set_read_timeout(Some(POLL))?;
            Ok((tcp, udp))
        })?;
        let flag = stop.clone();
        threads.push(std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                match tcp.accept() {
                    Ok((conn, _)) => drop(conn),
                    Err(_) => std::thread::sleep(POLL),
                }
            }
        }));
        let flag = stop.clone();
        threads.push(std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while !flag.load(Ordering::SeqCst) {
                if let Ok((n, from)) = udp.recv_from(&mut buf) {
                    let _ = udp.send_to(&buf[..n], from);
                }
            }
        }));
    }
    Ok(Servers { stop, threads })
}

/// True when a TCP connection from namespace `from_ns` to `to` is established within
/// `timeout`.
pub fn tcp_connects(from_ns: &str, to: SocketAddr, timeout: Duration) -> bool {
    run_in(from_ns, move || {
        Ok(TcpStream::connect_timeout(&to, timeout).is_ok())
    })
    .unwrap_or(false)
}

/// True when a UDP datagram from namespace `from_ns` to `to` is echoed within `timeout`.
pub fn udp_echoes(from_ns: &str, to: SocketAddr, timeout: Duration) -> bool {
    run_in(from_ns, move || {
        let any: SocketAddr = if to.is_ipv4() {
            "0.0.0.0:0".parse()?
        } else {
            "[::]:0".parse()?
        };
        let sock = UdpSocket::bind(any)?;
        sock.set_read_timeout(Some(timeout))?;
        sock.send_to(b"probe", to)?;
        let mut buf = [0u8; 16];
        Ok(matches!(sock.recv_from(&mut buf), Ok((5, from)) if from == to))
    })
    .unwrap_or(false)
}

/// The transport a probe uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
}

/// The character of one probe outcome in a matrix: `.` reached, `X` not.
pub fn reach_mark(reached: bool) -> char {
    if reached {
        '.'
    } else {
        'X'
    }
}

/// Probes from every namespace of `sources` to every address of `targets` with `transport`,
/// all at once (a matrix takes one `timeout` at most); one row per source, one `.` or `X`
/// per target.
pub fn reach_matrix(
    sources: &[&str],
    targets: &[SocketAddr],
    transport: Transport,
    timeout: Duration,
) -> Vec<String> {
    std::thread::scope(|s| {
        let probes: Vec<Vec<_>> = sources
            .iter()
            .map(|from| {
                targets
                    .iter()
                    .map(|to| {
                        s.spawn(move || match transport {
                            Transport::Tcp => tcp_connects(from, *to, timeout),
                            Transport::Udp => udp_echoes(from, *to, timeout),
                        })
                    })
                    .collect()
            })
            .collect();
        probes
            .into_iter()
            .map(|row| {
                row.into_iter()
                    .map(|h| reach_mark(h.join().unwrap_or(false)))
                    .collect()
            })
            .collect()
    })
}
