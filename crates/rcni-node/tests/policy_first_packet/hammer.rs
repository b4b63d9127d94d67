//! The prober: watches a node for new pods from their first trace — a host-local lease file
//! (the address exists) and a network namespace file in containerd's `/run/netns` — and from
//! that instant hammers each one with TCP connection attempts every 2 ms: into the pod's
//! address from a prober pod on the other node (a SYN-ACK or a RST means the SYN reached
//! the pod), and out of the pod's namespace to the prober pod's server (a completed
//! connection). Each hammer runs on a thread of its own that entered the namespace it sends
//! from, with a single-threaded tokio runtime (one socket per attempt, 250 ms to answer).

use std::collections::HashSet;
use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Attempts start this far apart.
pub const EVERY: Duration = Duration::from_millis(2);
/// A hammer whose pod was never matched stops after this long.
const LONGEST: Duration = Duration::from_secs(30);

/// One hammered pod trace: a lease (`key` the address) or a namespace (`key` its file name).
pub struct Probe {
    pub key: String,
    /// When the trace appeared.
    pub seen: Instant,
    /// Arrival of each answer (ingress: SYN-ACK or RST; egress: connection completed).
    pub hits: Arc<Mutex<Vec<Instant>>>,
    pub attempts: Arc<AtomicU64>,
    /// When to stop (set once the pod is known).
    pub end: Arc<Mutex<Option<Instant>>>,
}

impl Probe {
    /// Stops at `at`, or at the earlier end already set.
    pub fn stop_at(&self, at: Instant) {
        let mut end = self.end.lock().unwrap();
        *end = Some(end.map_or(at, |e| e.min(at)));
    }
}

/// Starts a hammer from namespace file `from` to `target`; `refused_counts`: a RST is an
/// answer too.
fn hammer(from: PathBuf, target: SocketAddr, refused_counts: bool, key: String) -> Probe {
    let probe = Probe {
        key,
        seen: Instant::now(),
        hits: Arc::default(),
        attempts: Arc::default(),
        end: Arc::default(),
    };
    let (hits, attempts, end, seen) = (
        probe.hits.clone(),
        probe.attempts.clone(),
        probe.end.clone(),
        probe.seen,
    );
    std::thread::spawn(move || {
        // containerd creates the file, then mounts the namespace on it: entering works from
        // then on. A namespace already gone (a pod that failed) is not probed.
        if !enter(&from, seen + Duration::from_secs(2)) {
            return;
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                let stop = end.lock().unwrap().unwrap_or(seen + LONGEST);
                if Instant::now() >= stop.min(seen + LONGEST) {
                    break;
                }
                attempts.fetch_add(1, Ordering::Relaxed);
                let hits = hits.clone();
                tokio::spawn(async move {
                    let attempt = tokio::net::TcpStream::connect(target);
                    let answered =
                        match tokio::time::timeout(Duration::from_millis(250), attempt).await {
                            Ok(Ok(_)) => true,
                            Ok(Err(e)) => {
                                refused_counts && e.kind() == std::io::ErrorKind::ConnectionRefused
                            }
                            Err(_) => false,
                        };
                    if answered {
                        hits.lock().unwrap().push(Instant::now());
                    }
                });
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        });
    });
    probe
}

/// Moves this thread into the network namespace of file `path`, trying until `deadline`.
fn enter(path: &std::path::Path, deadline: Instant) -> bool {
    loop {
        if let Ok(ns) = File::open(path) {
            if nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).is_ok() {
                return true;
            }
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// What a [`Watcher`] hammers for each new entry of its directory.
#[derive(Clone)]
pub enum Target {
    /// A lease file named after an address: into `address:port` from namespace `from`.
    IntoLease { from: PathBuf, port: u16 },
    /// A namespace file: out of it to `to`.
    OutOf { to: SocketAddr },
}

/// Polls a directory every millisecond and starts a hammer for each entry that appears.
pub struct Watcher {
    pub probes: Arc<Mutex<Vec<Probe>>>,
    stop: Arc<AtomicBool>,
}

impl Watcher {
    pub fn start(dir: PathBuf, target: Target) -> Watcher {
        let probes: Arc<Mutex<Vec<Probe>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (sink, stopped) = (probes.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut present: HashSet<String> = HashSet::new();
            while !stopped.load(Ordering::SeqCst) {
                let now: HashSet<String> = std::fs::read_dir(&dir)
                    .map(|d| {
                        d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                            .collect()
                    })
                    .unwrap_or_default();
                for name in now.difference(&present) {
                    if let Some(probe) = start_for(&dir, name, &target) {
                        sink.lock().unwrap().push(probe);
                    }
                }
                present = now;
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        Watcher { probes, stop }
    }
}

fn start_for(dir: &std::path::Path, name: &str, target: &Target) -> Option<Probe> {
    match target {
        Target::IntoLease { from, port } => {
            let ip: std::net::IpAddr = name.parse().ok()?;
            Some(hammer(
                from.clone(),
                SocketAddr::new(ip, *port),
                true,
                name.to_string(),
            ))
        }
        Target::OutOf { to } => name
            .starts_with("cni-")
            .then(|| hammer(dir.join(name), *to, false, name.to_string())),
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}
