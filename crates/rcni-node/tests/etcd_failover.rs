//! Root-only: rcni-node against a three-member etcd cluster (one member per namespace on the
//! underlay), the agents given all three endpoints and a 6 s lease TTL. The member each agent
//! talks to is stopped, then another one (quorum lost), then both come back. Checked: no
//! lease is lost (the same etcd lease IDs from start to end), the agents' routes are never
//! deleted (netlink monitors), STATUS is never 50 while quorum holds and is 50 while it is
//! lost, the agents are healthy again once quorum returns, and pods still talk. Measured and
//! printed: how long the failover took, how long until STATUS said 50, and how long after
//! quorum returned the agents were healthy again.

mod harness;

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cni_testkit::ping;
use harness::etcd::{self, Member};
use harness::*;
use serde_json::json;

const MEMBERS: usize = 3;

/// The cluster's members and their processes.
struct Members {
    members: Vec<Member>,
    ns: Vec<String>,
    guards: Vec<Guard>,
    initial: String,
    dir: PathBuf,
}

impl Members {
    fn start(&mut self, k: usize) {
        self.guards[k] = Guard(Some(self.members[k].spawn(
            &self.ns[k],
            &self.dir,
            &self.initial,
            &[],
        )));
    }
    fn stop(&mut self, k: usize) {
        self.guards[k].kill();
    }
    fn index_of(&self, url: &str) -> usize {
        self.members
            .iter()
            .position(|m| m.client_url == url)
            .unwrap()
    }
}

fn three_members(c: &mut Cluster) -> Members {
    let mut m = Members {
        members: Vec::new(),
        ns: Vec::new(),
        guards: Vec::new(),
        initial: String::new(),
        dir: c.sb.dir().to_path_buf(),
    };
    for k in 0..MEMBERS {
        let ip = std::net::Ipv4Addr::new(198, 18, 0, 2 + k as u8);
        m.ns.push(c.add_member_ns(k as u32 + 1, ip).name.clone());
        m.members.push(Member {
            name: format!("m{}", k + 1),
            client_url: format!("http://{ip}:2379"),
            peer_url: format!("http://{ip}:2380"),
        });
        m.guards.push(Guard(None));
    }
    let entries: Vec<String> = m
        .members
        .iter()
        .map(Member::initial_cluster_entry)
        .collect();
    m.initial = entries.join(",");
    for k in 0..MEMBERS {
        m.start(k);
    }
    let urls: Vec<String> = m.members.iter().map(|x| x.client_url.clone()).collect();
    c.etcd_url = urls.join(",");
    c.agent_etcd_args = vec!["--etcd-endpoints".into(), c.etcd_url.clone()];
    c.wait_etcd_healthy(&c.etcd_url.clone());
    m
}

/// The endpoint node `n`'s agent said it uses last.
fn endpoint_in_use(n: &Node) -> String {
    n.agent_log()
        .lines()
        .rev()
        .find_map(|l| l.split("etcd: using ").nth(1))
        .expect("the agent names its endpoint")
        .trim()
        .to_string()
}

/// One sample: time since the start, healthy per node.
type Sample = (Duration, Vec<bool>);

/// Health samples of every node every 20 ms.
struct Recorder {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    start: Instant,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Recorder {
    fn start(files: Vec<PathBuf>) -> Recorder {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let start = Instant::now();
        let (s, out) = (stop.clone(), samples.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let healthy = files
                    .iter()
                    .map(|f| {
                        fs::read(f)
                            .ok()
                            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                            .is_some_and(|v| v["healthy"] == true)
                    })
                    .collect();
                out.lock().unwrap().push((start.elapsed(), healthy));
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Recorder {
            stop,
            samples,
            start,
            thread: Some(thread),
        }
    }
    fn now(&self) -> Duration {
        self.start.elapsed()
    }
    /// Whether some node was unhealthy in a sample between `from` and `to`.
    fn any_unhealthy(&self, from: Duration, to: Duration) -> bool {
        self.samples
            .lock()
            .unwrap()
            .iter()
            .any(|(t, h)| *t >= from && *t <= to && h.iter().any(|x| !x))
    }
    /// The first sample time at or after `from` where `want` holds.
    fn first(&self, from: Duration, want: impl Fn(&[bool]) -> bool) -> Option<Duration> {
        self.samples
            .lock()
            .unwrap()
            .iter()
            .find(|(t, h)| *t >= from && want(h))
            .map(|(t, _)| *t - from)
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `ip monitor route` of a node into a file; its `Deleted` lines of the agent's routes.
fn route_monitor(n: &Node) -> (Guard, PathBuf) {
    let out = n.dir.join("routes.monitor");
    let child = Command::new("ip")
        .args(["-n", &n.ns.name, "monitor", "route"])
        .stdout(fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (Guard(Some(child)), out)
}

fn agent_route_deletions(file: &PathBuf) -> Vec<String> {
    fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("Deleted") && l.contains("proto 124"))
        .map(str::to_string)
        .collect()
}

/// Whether etcd has quorum (a write through any member succeeds).
fn quorum(c: &Cluster) -> bool {
    Command::new("ip")
        .args(["netns", "exec", &c.sb.host().name, "etcdctl"])
        .args(["--endpoints", &c.etcd_url, "--command-timeout=1s"])
        .args(["put", "/quorum-probe", "x"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn members_stop_and_return_without_lost_leases_or_route_flaps() {
    if skip_unless_root() {
        return;
    }
    let config = json!({"Network": CLUSTER_NET, "SubnetLen": 24, "Backend": {"Type": "host-gw"}});
    let mut c = Cluster::bare(&config);
    let mut m = three_members(&mut c);
    c.put_config(&config);
    c.ttl = 6;
    for _ in 0..2 {
        let i = c.add_node();
        c.start_agent(i);
    }
    c.wait_converged(Duration::from_secs(30))
        .expect("converged");
    let pods = [c.add_pod(0), c.add_pod(1)];
    let leases = etcd::lease_ids(&c);
    assert_eq!(leases.len(), 2);
    let monitors: Vec<_> = c.nodes.iter().map(route_monitor).collect();
    std::thread::sleep(Duration::from_millis(300));
    let rec = Recorder::start(c.nodes.iter().map(Node::status_file).collect());

    // 1. The member node1 talks to stops; quorum holds (two of three).
    let first = m.index_of(&endpoint_in_use(&c.nodes[0]));
    let t_first = rec.now();
    m.stop(first);
    let moved = wait_for(Duration::from_secs(20), || {
        m.index_of(&endpoint_in_use(&c.nodes[0])) != first
    })
    .expect("node1 moved to another member");
    // Beyond the lease TTL: renewals must have gone through another member.
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(
        etcd::lease_ids(&c),
        leases,
        "no lease lost while quorum holds"
    );
    let t_second = rec.now();
    assert!(
        !rec.any_unhealthy(t_first, t_second),
        "STATUS must not be 50 while quorum holds"
    );

    // 2. Another member stops (node2's, if it is alive): quorum is lost.
    let in_use2 = m.index_of(&endpoint_in_use(&c.nodes[1]));
    let second = if in_use2 != first {
        in_use2
    } else {
        (first + 1) % MEMBERS
    };
    m.stop(second);
    let down = wait_for(Duration::from_secs(30), || {
        c.status_code(0) == 50 && c.status_code(1) == 50
    });
    assert!(down.is_some(), "STATUS 50 while quorum is lost");
    std::thread::sleep(Duration::from_secs(8));
    let unhealthy_after = rec.first(t_second, |h| h.iter().all(|x| !x));

    // 3. Both members return.
    m.start(first);
    m.start(second);
    let quorum_after = wait_for(Duration::from_secs(60), || quorum(&c)).expect("quorum back");
    let t_quorum = rec.now();
    let healthy = wait_for(Duration::from_secs(30), || {
        c.nodes.iter().all(Node::healthy)
    });
    assert!(healthy.is_some(), "agents healthy after quorum returned");
    std::thread::sleep(Duration::from_secs(2));
    let recovered = rec.first(t_quorum, |h| h.iter().all(|x| *x));
    drop(rec);

    assert_eq!(
        etcd::lease_ids(&c),
        leases,
        "the same leases from start to end"
    );
    for (n, (mut guard, file)) in c.nodes.iter().zip(monitors) {
        guard.kill();
        assert_eq!(
            agent_route_deletions(&file),
            Vec::<String>::new(),
            "node{} routes",
            n.index
        );
        assert!(
            !n.agent_log().contains("taking it back"),
            "node{} lost its lease",
            n.index
        );
    }
    assert!(ping(&pods[0].ns.name, pods[1].ip), "pods talk after it all");
    eprintln!(
        "measured: failover of node1 from {} in {:?}; STATUS 50 on both {:?} after quorum was lost; \
         quorum back {:?} after the members restarted; both healthy {:?} after quorum returned",
        m.members[first].client_url, moved, unhealthy_after, quorum_after, recovered
    );
}
