//! What the simulation reads about the agent, from outside it: its CPU time and memory
//! (`/proc/<pid>/stat` and `status`), the kernel's nf_tables notifications in its namespace
//! (`nft monitor`, each line timestamped as it arrives: a change is "in the kernel" when the
//! kernel announces it), its `/metrics`, and the policy table's objects (`nft -j`).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The agent process.
pub struct Proc {
    pub pid: u32,
    tick: Duration,
}

impl Proc {
    /// The agent started as `ip netns exec … rcni-node` with `pid` (`ip` execs the agent in
    /// its own process once it entered the namespace).
    pub fn new(pid: u32) -> Proc {
        let comm = || std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let started = Instant::now();
        while comm().trim() == "ip" && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            comm().starts_with("rcni-node"),
            "pid {pid} is not the agent"
        );
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .unwrap_or(100);
        Proc {
            pid,
            tick: Duration::from_secs(1) / hz as u32,
        }
    }

    /// User and system CPU time of every thread so far (resolution: one clock tick).
    pub fn cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).unwrap();
        // Fields after the command name (which may hold spaces) start at field 3.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<u64> = rest
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        // utime and stime are fields 14 and 15, here 11 and 12 (0-based from field 3).
        self.tick * (f[11] + f[12]) as u32
    }

    fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// Resident memory now and at its peak, in MiB.
    pub fn rss_mib(&self) -> f64 {
        self.status_kib("VmRSS:") as f64 / 1024.0
    }
    pub fn peak_rss_mib(&self) -> f64 {
        self.status_kib("VmHWM:") as f64 / 1024.0
    }

    /// Waits until the agent used at most one tick of CPU over `quiet` (its periodic work,
    /// the status file and the pod scan, takes less); the time it took, `None` on timeout.
    pub fn wait_idle(&self, quiet: Duration, timeout: Duration) -> Option<Duration> {
        let started = Instant::now();
        let mut mark = (Instant::now(), self.cpu());
        while started.elapsed() < timeout {
            std::thread::sleep(Duration::from_millis(100));
            let now = self.cpu();
            if now > mark.1 + self.tick {
                mark = (Instant::now(), now);
            } else if mark.0.elapsed() >= quiet {
                return Some(mark.0 - started);
            }
        }
        None
    }
}

/// `nft monitor` in a namespace: every line with the instant it arrived.
pub struct Monitor {
    child: Child,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl Monitor {
    pub fn start(ns: &str) -> Monitor {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, "nft", "monitor"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("nft monitor");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push((Instant::now(), line));
            }
        });
        // Let it subscribe before anything is measured.
        std::thread::sleep(Duration::from_millis(300));
        Monitor { child, lines }
    }

    /// How many lines arrived so far (a mark to search after).
    pub fn mark(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    /// The arrival of the first line after `mark` that `matches`, waiting up to `timeout`,
    /// and the mark just after it.
    pub fn wait(
        &self,
        mark: usize,
        timeout: Duration,
        matches: impl Fn(&str) -> bool,
    ) -> Option<(Instant, usize)> {
        let started = Instant::now();
        loop {
            {
                let lines = self.lines.lock().unwrap();
                let from = mark.min(lines.len());
                if let Some(n) = lines[from..].iter().position(|(_, l)| matches(l)) {
                    return Some((lines[from + n].0, from + n + 1));
                }
            }
            if started.elapsed() > timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A value of the agent's `/metrics` text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Objects of the policy table: chains, rules, sets (and maps), elements in them.
#[derive(Debug, Default)]
pub struct Objects {
    pub chains: usize,
    pub rules: usize,
    pub sets: usize,
    pub elements: usize,
}

pub fn objects(ns: &str, table: &str) -> Objects {
    let out = Command::new("ip")
        .args([
            "netns", "exec", ns, "nft", "-j", "list", "table", "inet", table,
        ])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let mut o = Objects::default();
    for item in doc["nftables"].as_array().into_iter().flatten() {
        if item.get("chain").is_some() {
            o.chains += 1;
        } else if item.get("rule").is_some() {
            o.rules += 1;
        } else if let Some(set) = item.get("set").or_else(|| item.get("map")) {
            o.sets += 1;
            o.elements += set["elem"].as_array().map_or(0, Vec::len);
        }
    }
    o
}

/// Whether the policy table's text mentions `needle` (one read of the whole table).
pub fn table_mentions(ns: &str, table: &str, needle: &str) -> bool {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "list", "table", "inet", table])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains(needle)
}

/// The `p`-th percentile (0..=100) of `values`, in their unit.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[rank]
}
