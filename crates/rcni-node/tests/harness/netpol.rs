//! NetworkPolicy on simulated nodes: pods made with `rcni pod run --namespace NS --label
//! pod=NAME` on a node (their records in the node's `pods/` directory, which its agent reads
//! with `--pod-state-dir`), each serving TCP and UDP on ports 80 and 81; policies and
//! namespaces written to etcd in the layout of `cni_policy::stored`; the matrix of real
//! probes between every pair of pods compared with what `cni_policy::allows_matrix` says for
//! the same cluster.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cni_policy::stored::Keys;
use cni_policy::{allows_matrix, parse_documents, Cluster as Model, Document, Pod, Protocol};
use cni_testkit::{bin_path, reach_matrix, run_in, serve_tcp_udp, Netns, Servers, Transport};
use serde_json::{json, Value};

use super::{ip_json, wait_for, Cluster, PREFIX};

pub const PORTS: [u16; 2] = [80, 81];
/// How long a denied probe waits (an allowed one between simulated nodes takes well under a
/// millisecond; this leaves room on a loaded machine).
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Where node `dir`'s `rcni pod` records are (the harness points its agent there).
pub fn pod_state_dir(dir: &std::path::Path) -> PathBuf {
    dir.join("pods")
}

/// One pod: its namespace, the model's view of it, the node it runs on and its servers.
pub struct NetPod {
    pub netns: Netns,
    pub pod: Pod,
    pub node: usize,
    pub id: String,
    /// The servers of each of its addresses.
    _servers: Vec<Servers>,
}

/// Pods, namespaces and policies of one test, and what the model says of them.
pub struct World {
    pub pods: Vec<NetPod>,
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Stored policies by key, as documents.
    pub policies: BTreeMap<String, Value>,
    /// The probes go to the pods' IPv6 addresses (their IPv4 ones otherwise).
    pub probe_ipv6: bool,
}

/// `rcni pod <args>` on node `i` with its conflist and record directory; stdout.
pub fn rcni_pod(c: &Cluster, i: usize, args: &[&str]) -> String {
    let node = &c.nodes[i];
    let out = Command::new("ip")
        .args(["netns", "exec", &node.ns.name])
        .arg(bin_path("rcni").expect("cargo build -p rcni first"))
        .arg("--conf-dir")
        .arg(node.conf_dir())
        .arg("--bin-dir")
        .arg(&c.plugins)
        .arg("--cache-dir")
        .arg(node.dir.join("cache"))
        .arg("pod")
        .arg("--state-dir")
        .arg(pod_state_dir(&node.dir))
        .arg("--run-dir")
        .arg(node.dir.join("run"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "rcni pod {args:?} on node{}: {}{}",
        node.index,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The global addresses of `eth0` in `ns`, IPv4 first, once none is tentative (IPv6
/// duplicate address detection) so that servers can bind them.
fn eth0_ips(ns: &Netns) -> Vec<IpAddr> {
    let mut ips = Vec::new();
    let settled = wait_for(Duration::from_secs(10), || {
        let mut tentative = false;
        ips.clear();
        for family in ["-4", "-6"] {
            let addrs = ip_json(
                &ns.name,
                &[family, "addr", "show", "eth0", "scope", "global"],
            );
            // `ip -j` adds empty objects to `addr_info`; only those with `local` count.
            let infos = addrs.as_array().unwrap().iter();
            for info in infos.flat_map(|link| link["addr_info"].as_array().unwrap()) {
                if let Some(local) = info["local"].as_str() {
                    tentative |= info["tentative"] == true;
                    ips.push(local.parse().unwrap());
                }
            }
        }
        !tentative
    });
    assert!(
        settled.is_some(),
        "{}: addresses stay tentative: {ips:?}",
        ns.name
    );
    ips
}

impl World {
    /// No pods, namespaces or policies (yet).
    pub fn empty() -> World {
        World {
            pods: Vec::new(),
            namespaces: BTreeMap::new(),
            policies: BTreeMap::new(),
            probe_ipv6: false,
        }
    }

    /// Namespaces x, y, z (labelled `ns=<name>`, written to etcd) and pods a, b, c in each,
    /// placed on the nodes in turn.
    pub fn new(c: &Cluster) -> World {
        let mut world = World::empty();
        for ns in ["x", "y", "z"] {
            world.label_namespace(c, ns, &[("ns", ns)]);
        }
        let mut k = 0;
        for ns in ["x", "y", "z"] {
            for name in ["a", "b", "c"] {
                world.add_pod(c, k % c.nodes.len(), ns, name);
                k += 1;
            }
        }
        world
    }

    /// Runs pod `ns/name` (label `pod=<name>`) on node `i` and starts its servers.
    pub fn add_pod(&mut self, c: &Cluster, i: usize, ns: &str, name: &str) {
        let netns = c.sb.add_container().unwrap();
        let id = format!("{ns}-{name}");
        let path = netns.path.to_string_lossy().into_owned();
        let label = format!("pod={name}");
        rcni_pod(
            c,
            i,
            &[
                "run",
                name,
                "--namespace",
                ns,
                "--id",
                &id,
                "--netns",
                &path,
                "--label",
                &label,
            ],
        );
        let ips = eth0_ips(&netns);
        let servers = ips
            .iter()
            .map(|ip| serve_tcp_udp(&netns.name, *ip, &PORTS).unwrap())
            .collect();
        self.pods.push(NetPod {
            netns,
            pod: Pod {
                namespace: ns.into(),
                name: name.into(),
                labels: [("pod".to_string(), name.to_string())].into(),
                ips,
                named_ports: Default::default(),
            },
            node: i,
            id,
            _servers: servers,
        });
    }

    /// Replaces the labels of pod `ns/name` in its sandbox record (as a runtime updating
    /// the pod would), atomically.
    pub fn relabel(&mut self, c: &Cluster, ns: &str, name: &str, labels: &[(&str, &str)]) {
        let p = self
            .pods
            .iter_mut()
            .find(|p| p.pod.namespace == ns && p.pod.name == name)
            .unwrap();
        let dir = pod_state_dir(&c.nodes[p.node].dir);
        let path = dir.join(format!("{}.json", p.id));
        let mut record: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let map: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        record["pod"]["labels"] = json!(map);
        let tmp = dir.join(format!(".{}.relabel", p.id));
        std::fs::write(&tmp, serde_json::to_vec_pretty(&record).unwrap()).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        p.pod.labels = map;
    }

    /// Writes namespace `ns` with `labels` to etcd (replacing its labels).
    pub fn label_namespace(&mut self, c: &Cluster, ns: &str, labels: &[(&str, &str)]) {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let doc = json!({"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": ns, "labels": labels}});
        c.etcdctl(&["put", &Keys::new(PREFIX).namespace(ns), &doc.to_string()]);
        self.namespaces.insert(ns.into(), labels);
    }

    /// Pod `ns/name`.
    pub fn pod(&self, ns: &str, name: &str) -> &NetPod {
        self.pods
            .iter()
            .find(|p| p.pod.namespace == ns && p.pod.name == name)
            .unwrap_or_else(|| panic!("no pod {ns}/{name}"))
    }

    /// The address of `pod` the probes use.
    pub fn target(&self, pod: &Pod) -> IpAddr {
        pod.ips
            .iter()
            .copied()
            .find(|ip| ip.is_ipv6() == self.probe_ipv6)
            .unwrap_or_else(|| panic!("pod {} has no address of the probed family", pod.key()))
    }

    /// Writes the policies of `yaml` to etcd (replacing those of the same name).
    pub fn apply(&mut self, c: &Cluster, yaml: &str) {
        let keys = Keys::new(PREFIX);
        for doc in parse_documents(yaml).unwrap() {
            let Document::NetworkPolicy(p) = doc else {
                panic!("not a policy: {yaml}")
            };
            let key = keys.policy_of(&p);
            let value = serde_json::to_value(&*p).unwrap();
            c.etcdctl(&["put", &key, &value.to_string()]);
            self.policies.insert(key, value);
        }
    }

    /// Deletes policy `ns/name` from etcd.
    pub fn delete(&mut self, c: &Cluster, ns: &str, name: &str) {
        let key = Keys::new(PREFIX).policy(ns, name);
        c.etcdctl(&["del", &key]);
        self.policies.remove(&key);
    }

    /// Deletes every policy.
    pub fn clear(&mut self, c: &Cluster) {
        c.etcdctl(&["del", "--prefix", &Keys::new(PREFIX).policies(None)]);
        self.policies.clear();
    }

    /// The cluster as the model sees it.
    pub fn model(&self) -> Model {
        Model {
            namespaces: self.namespaces.clone(),
            pods: self.pods.iter().map(|p| p.pod.clone()).collect(),
            policies: self
                .policies
                .values()
                .map(|v| serde_json::from_value(v.clone()).unwrap())
                .collect(),
        }
    }

    /// Observed and expected matrices of every protocol and port, labelled.
    pub fn matrices(&self) -> Vec<(String, Vec<String>, Vec<String>)> {
        let model = self.model();
        let sources: Vec<&str> = self.pods.iter().map(|p| p.netns.name.as_str()).collect();
        let pods: Vec<Pod> = self.pods.iter().map(|p| p.pod.clone()).collect();
        let mut out = Vec::new();
        for (proto, transport) in [
            (Protocol::Tcp, Transport::Tcp),
            (Protocol::Udp, Transport::Udp),
        ] {
            for port in PORTS {
                let targets: Vec<SocketAddr> = pods
                    .iter()
                    .map(|p| SocketAddr::new(self.target(p), port))
                    .collect();
                let seen = reach_matrix(&sources, &targets, transport, PROBE_TIMEOUT);
                let want = allows_matrix(&model, &pods, proto, port).unwrap();
                out.push((format!("{proto}/{port}"), seen, want));
            }
        }
        out
    }

    /// Whether every probe agrees with the model now.
    pub fn agrees(&self) -> bool {
        self.matrices().iter().all(|(_, seen, want)| seen == want)
    }

    /// The pods' names as the matrices order them (`ns/name@node`).
    pub fn legend(&self) -> String {
        self.pods
            .iter()
            .map(|p| format!("{}@node{}", p.pod.key(), p.node + 1))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Waits until the probes agree with the model; how long it took. Panics with the
    /// matrices (kernel left, model right) and the agents' logs when they never do.
    #[track_caller]
    pub fn enforced(&self, c: &Cluster, case: &str) -> Duration {
        match wait_for(Duration::from_secs(30), || self.agrees()) {
            Some(took) => took,
            None => panic!("{}", self.report(c, case)),
        }
    }

    /// Checks that the probes agree with the model now, without waiting for a change:
    /// a connection the model denies that gets through fails at once; one it allows that
    /// times out is probed again (up to three rounds: a probe can time out on a loaded
    /// machine, a leak cannot be a fluke). Panics like [`World::enforced`].
    #[track_caller]
    pub fn agrees_now(&self, c: &Cluster, case: &str) {
        for round in 1..=3 {
            let matrices = self.matrices();
            let leaks = matrices.iter().any(|(_, seen, want)| {
                seen.iter()
                    .zip(want)
                    .any(|(s, w)| s.chars().zip(w.chars()).any(|(s, w)| s == '.' && w == 'X'))
            });
            if leaks {
                break;
            }
            if matrices.iter().all(|(_, seen, want)| seen == want) {
                return;
            }
            eprintln!("{case}: round {round}: an allowed probe timed out; probing again");
        }
        panic!("{}", self.report(c, case));
    }

    /// The matrices (kernel left, model right) and the end of the agents' logs.
    fn report(&self, c: &Cluster, case: &str) -> String {
        let mut report = format!(
            "{case}: kernel (left) and model (right) differ\npods: {}\n",
            self.legend()
        );
        for (label, seen, want) in self.matrices() {
            report += &format!("{label}:\n");
            for (s, w) in seen.iter().zip(&want) {
                let mark = if s == w { "" } else { "   <-" };
                report += &format!("  {s}   {w}{mark}\n");
            }
        }
        for n in &c.nodes {
            let log = n.agent_log();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            report += &format!(
                "node{} agent log (newest first):\n{}\n",
                n.index,
                tail.join("\n")
            );
        }
        report
    }
}

/// `nft -j list table inet rcni_policy` in node `ns`; `None` when there is no such table.
pub fn policy_table(ns: &str) -> Option<Value> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "nft",
            "-j",
            "list",
            "table",
            "inet",
            "rcni_policy",
        ])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).unwrap())
}

/// The elements of verdict map `name` of a listed table: address and verdict (`accept`, or
/// `jump` for a pod's chain), sorted.
pub fn map_elements(table: &Value, name: &str) -> Vec<(String, String)> {
    let mut elements: Vec<(String, String)> = table["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o.get("map"))
        .filter(|m| m["name"] == name)
        .flat_map(|m| m["elem"].as_array().cloned().unwrap_or_default())
        .filter_map(|e| {
            let verdict = e[1].as_object()?.keys().next()?.clone();
            Some((e[0].as_str()?.to_string(), verdict))
        })
        .collect();
    elements.sort();
    elements
}

/// The addresses in verdict map `name` of a listed table (every local pod has one).
pub fn map_addresses(table: &Value, name: &str) -> Vec<String> {
    map_elements(table, name)
        .into_iter()
        .map(|(a, _)| a)
        .collect()
}

/// The addresses verdict map `name` sends to a pod's chain (isolated pods).
pub fn map_jumps(table: &Value, name: &str) -> Vec<String> {
    map_elements(table, name)
        .into_iter()
        .filter(|(_, v)| v == "jump")
        .map(|(a, _)| a)
        .collect()
}

/// The published pod records under `<prefix>/pods/`, as `node/ns/name` → labels.
pub fn published(c: &Cluster) -> BTreeMap<String, Value> {
    let prefix = Keys::new(PREFIX).pods(None);
    // etcdctl's simple output: a line with the key, a line with the value (one-line JSON).
    let text = c.etcdctl(&["get", "--prefix", &prefix]);
    let lines: Vec<&str> = text.lines().collect();
    lines
        .chunks(2)
        .map(|kv| {
            let record: Value = serde_json::from_str(kv[1]).unwrap();
            let short = kv[0].trim_start_matches(prefix.as_str()).to_string();
            (short, record["labels"].clone())
        })
        .collect()
}

/// A TCP echo server on `addr:port` in namespace `ns`: every connection gets back what it
/// sends until it closes. Stopped when dropped.
pub struct EchoServer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How often the echo server's threads look at their stop flag.
const ECHO_POLL: Duration = Duration::from_millis(50);

pub fn echo_server(ns: &str, addr: IpAddr, port: u16) -> EchoServer {
    let at = SocketAddr::new(addr, port);
    let listener = run_in(ns, move || {
        let l = TcpListener::bind(at)?;
        l.set_nonblocking(true)?;
        Ok(l)
    })
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut conns = Vec::new();
        while !flag.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((conn, _)) => {
                    let flag = flag.clone();
                    conns.push(std::thread::spawn(move || echo(conn, &flag)));
                }
                Err(_) => std::thread::sleep(ECHO_POLL),
            }
        }
        for c in conns {
            let _ = c.join();
        }
    });
    EchoServer {
        stop,
        thread: Some(thread),
    }
}

/// Sends back what `conn` reads until it closes or `stop` is set.
fn echo(mut conn: TcpStream, stop: &AtomicBool) {
    let _ = conn.set_read_timeout(Some(ECHO_POLL));
    let mut buf = [0u8; 256];
    while !stop.load(Ordering::SeqCst) {
        match conn.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if conn.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

/// A long-lived TCP connection opened from a namespace (the socket stays in it).
pub struct Conversation {
    stream: TcpStream,
    pub what: String,
}

impl Conversation {
    /// Connects from namespace `from` to `to`.
    pub fn open(from: &str, to: SocketAddr, what: &str) -> Conversation {
        let stream = run_in(from, move || {
            Ok(TcpStream::connect_timeout(&to, Duration::from_secs(2))?)
        })
        .unwrap_or_else(|e| panic!("{what}: connect: {e:#}"));
        Conversation {
            stream,
            what: what.to_string(),
        }
    }

    /// Whether a message sent now comes back within `timeout`.
    pub fn echoes(&mut self, timeout: Duration) -> bool {
        let msg = b"still there?";
        if self.stream.write_all(msg).is_err() {
            return false;
        }
        let _ = self.stream.set_read_timeout(Some(timeout));
        let mut got = [0u8; 12];
        self.stream.read_exact(&mut got).is_ok() && &got == msg
    }

    /// Whether it still echoes, asked up to three times (an echo can be slow on a loaded
    /// machine; a dropped connection never echoes).
    pub fn alive(&mut self) -> bool {
        (0..3).any(|_| self.echoes(Duration::from_secs(1)))
    }
}
