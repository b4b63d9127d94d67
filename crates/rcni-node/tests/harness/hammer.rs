//! Probing a pod from its first instant: threads that open TCP connections as fast as they
//! can (each attempt sends a SYN and waits 2 ms for any answer) from one namespace to one
//! address, from the moment that address exists (a new host-local lease on the node, or a
//! fixed target) until stopped. Every answer counts: a connection opened (SYN-ACK) or
//! refused (RST) means a packet got through both ways; only silence is a drop.

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cni_testkit::run_in;

/// How long one attempt waits for an answer.
const ATTEMPT: Duration = Duration::from_millis(2);

/// What one prober saw.
#[derive(Debug, Default, Clone)]
pub struct Probed {
    /// The address it probed (once known).
    pub target: Option<IpAddr>,
    /// Attempts made once the address existed.
    pub attempts: u64,
    /// Attempts answered (opened or refused).
    pub answered: u64,
    /// When the first answer came, after the address appeared.
    pub first_answer: Option<Duration>,
}

/// A running prober.
pub struct Hammer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Probed>>,
}

impl Hammer {
    /// Stops and returns what it saw.
    pub fn finish(mut self) -> Probed {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Hammer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The leases (addresses) in host-local's directory `dir`.
pub fn leases(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.parse::<IpAddr>().is_ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Probes from namespace `from` the IPv4 address of the first lease that appears in `dir`
/// beyond `known`, on `port`, from the instant its file exists.
pub fn from_new_lease(from: &str, dir: PathBuf, known: BTreeSet<String>, port: u16) -> Hammer {
    start(from, port, move |stop| loop {
        if stop.load(Ordering::SeqCst) {
            return None;
        }
        let fresh = leases(&dir)
            .into_iter()
            .filter(|l| !known.contains(l))
            .find_map(|l| l.parse::<IpAddr>().ok().filter(IpAddr::is_ipv4));
        if fresh.is_some() {
            return fresh;
        }
        std::thread::sleep(Duration::from_micros(200));
    })
}

/// Probes `to` from namespace `from` (whose own address may not exist yet: attempts that
/// fail at once, before any packet leaves, are not counted).
pub fn to(from: &str, to: SocketAddr) -> Hammer {
    start(from, to.port(), move |_| Some(to.ip()))
}

fn start(
    from: &str,
    port: u16,
    target: impl FnOnce(&AtomicBool) -> Option<IpAddr> + Send + 'static,
) -> Hammer {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let from = from.to_string();
    let thread = std::thread::spawn(move || {
        run_in(&from, move || {
            let mut seen = Probed::default();
            let Some(ip) = target(&flag) else {
                return Ok(seen);
            };
            seen.target = Some(ip);
            let at = SocketAddr::new(ip, port);
            let since = Instant::now();
            while !flag.load(Ordering::SeqCst) {
                let tried = Instant::now();
                let answer = match TcpStream::connect_timeout(&at, ATTEMPT) {
                    Ok(_) => true,
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => true,
                    // No route or address yet: nothing left; do not spin.
                    Err(_) if tried.elapsed() < ATTEMPT / 2 => {
                        std::thread::sleep(Duration::from_micros(200));
                        continue;
                    }
                    Err(_) => false,
                };
                seen.attempts += 1;
                if answer {
                    seen.answered += 1;
                    seen.first_answer.get_or_insert(since.elapsed());
                }
            }
            Ok(seen)
        })
        .unwrap()
    });
    Hammer {
        stop,
        thread: Some(thread),
    }
}
