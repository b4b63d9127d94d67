//! NetworkPolicy on simulated nodes: pods made with `rcni pod run --namespace NS --label
//! pod=NAME` on a node (their records in the node's `pods/` directory, which its agent reads
//! with `--pod-state-dir`), each serving TCP and UDP on ports 80 and 81; policies and
//! namespaces written to etcd in the layout of `cni_policy::stored`; the matrix of real
//! probes between every pair of pods compared with what `cni_policy::allows_matrix` says for
//! the same cluster.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use cni_policy::stored::Keys;
use cni_policy::{allows_matrix, parse_documents, Cluster as Model, Document, Pod, Protocol};
use cni_testkit::{bin_path, reach_matrix, serve_tcp_udp, Netns, Servers, Transport};
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
    _servers: Servers,
}

/// Pods, namespaces and policies of one test, and what the model says of them.
pub struct World {
    pub pods: Vec<NetPod>,
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Stored policies by key, as documents.
    pub policies: BTreeMap<String, Value>,
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

/// The IPv4 address of `eth0` in `ns`.
fn eth0_ip(ns: &Netns) -> IpAddr {
    let addrs = ip_json(&ns.name, &["-4", "addr", "show", "eth0"]);
    addrs[0]["addr_info"][0]["local"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

impl World {
    /// Namespaces x, y, z (labelled `ns=<name>`, written to etcd) and pods a, b, c in each,
    /// placed on the nodes in turn.
    pub fn new(c: &Cluster) -> World {
        let mut world = World {
            pods: Vec::new(),
            namespaces: BTreeMap::new(),
            policies: BTreeMap::new(),
        };
        for ns in ["x", "y", "z"] {
            let labels: BTreeMap<String, String> = [("ns".to_string(), ns.to_string())].into();
            let doc = json!({"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": ns, "labels": labels}});
            c.etcdctl(&["put", &Keys::new(PREFIX).namespace(ns), &doc.to_string()]);
            world.namespaces.insert(ns.into(), labels);
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
        let ip = eth0_ip(&netns);
        let servers = serve_tcp_udp(&netns.name, ip, &PORTS).unwrap();
        self.pods.push(NetPod {
            netns,
            pod: Pod {
                namespace: ns.into(),
                name: name.into(),
                labels: [("pod".to_string(), name.to_string())].into(),
                ips: vec![ip],
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
                    .map(|p| SocketAddr::new(p.ips[0], port))
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

/// The addresses in verdict map `name` of a listed table.
pub fn map_addresses(table: &Value, name: &str) -> Vec<String> {
    let mut addrs: Vec<String> = table["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o.get("map"))
        .filter(|m| m["name"] == name)
        .flat_map(|m| m["elem"].as_array().cloned().unwrap_or_default())
        .filter_map(|e| e[0].as_str().map(String::from))
        .collect();
    addrs.sort();
    addrs
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
