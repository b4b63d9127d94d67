//! The simulated cluster's content, generated deterministically from its size: namespaces
//! with team and environment labels, pods with app/tier/version/team labels spread over the
//! remote nodes, NetworkPolicies of the shapes clusters write (default deny, same namespace,
//! by app, by team's namespaces, by environment, monitoring and DNS, ipBlock with except,
//! expressions), the node's own pods, and the stream of changes elsewhere in the cluster.
//!
//! Addresses: the network is IPv6-only, because 150,000 pods do not fit in 198.18.0.0/15,
//! the IPv4 range tests draw from. Remote node `k` holds `2001:2:1:<k>::/64` (the harness's
//! cluster network) with its underlay address `2001:2::1:0:<k>`; its pod `j` is
//! `2001:2:1:<k>::<j + 16>`; ipBlocks lie in `2001:2:0:f000::/52`.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};

use cni_policy::stored::PodRecord;
use serde_json::{json, Value};

/// The size of the simulation.
#[derive(Debug, Clone, Copy)]
pub struct Size {
    pub nodes: u32,
    pub pods_per_node: u32,
    pub policies: u32,
    /// Ordinary namespaces (10 per team), besides `monitoring` and `kube-system`.
    pub namespaces: u32,
}

const TIERS: [&str; 4] = ["frontend", "backend", "db", "cache"];
const ENVS: [&str; 3] = ["prod", "staging", "dev"];
const APPS_PER_NAMESPACE: u32 = 8;
/// The label every probe pod carries, selected by the probe policy.
pub const PROBE_LABEL: &str = "scale-probe";

/// A small deterministic generator (64-bit LCG; the high bits are used).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(6364136223846793005).wrapping_add(1))
    }
    pub fn below(&mut self, n: u32) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % u64::from(n.max(1))) as u32
    }
}

/// Ordinary namespace `i`: `t<team>-n<k>`.
pub fn namespace(i: u32) -> String {
    format!("t{:02}-n{}", i / 10, i % 10)
}

fn team(i: u32) -> String {
    format!("t{:02}", i / 10)
}

/// Every namespace with its labels.
pub fn namespaces(size: &Size) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for i in 0..size.namespaces {
        let name = namespace(i);
        let labels = [
            ("team", team(i)),
            ("env", ENVS[(i % 3) as usize].to_string()),
            ("kubernetes.io/metadata.name", name.clone()),
        ];
        out.insert(name, labels.map(|(k, v)| (k.to_string(), v)).into());
    }
    for name in ["monitoring", "kube-system"] {
        let labels = [("kubernetes.io/metadata.name".to_string(), name.to_string())];
        out.insert(name.to_string(), labels.into());
    }
    out
}

/// A namespace document as stored.
pub fn namespace_doc(name: &str, labels: &BTreeMap<String, String>) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

/// The labels of app `a` of namespace `ns_index`, pod template `variant`.
pub fn app_labels(ns_index: u32, a: u32, variant: u32) -> BTreeMap<String, String> {
    let labels = [
        ("app", format!("{}-a{a}", namespace(ns_index))),
        ("tier", TIERS[(a % 4) as usize].to_string()),
        ("version", format!("v{}", 1 + variant % 3)),
        ("team", team(ns_index)),
        (
            "pod-template-hash",
            format!(
                "{:08x}",
                (ns_index * 131 + a * 7 + variant).wrapping_mul(2654435761)
            ),
        ),
    ];
    labels.map(|(k, v)| (k.to_string(), v)).into()
}

/// Remote node `k` (1-based): its name, its subnet's network address and underlay address.
pub fn node_name(k: u32) -> String {
    format!("sim-{k:05}")
}

pub fn node_subnet(k: u32) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 2, 1, k as u16, 0, 0, 0, 0)
}

pub fn node_underlay(k: u32) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 2, 0, 0, 0, 1, 0, k as u16)
}

/// Address `host` of remote node `k`'s subnet.
pub fn pod_ip(k: u32, host: u32) -> IpAddr {
    let s = node_subnet(k).segments();
    IpAddr::V6(Ipv6Addr::new(
        s[0],
        s[1],
        s[2],
        s[3],
        0,
        0,
        (host >> 16) as u16,
        host as u16,
    ))
}

/// A pod of a workload placed by `rng` (1 in 100 in `monitoring` or `kube-system`).
pub fn random_pod(size: &Size, rng: &mut Rng, node: u32, name: String, ip: IpAddr) -> PodRecord {
    let (namespace, labels) = match rng.below(100) {
        0 => (
            "monitoring".to_string(),
            [("app".to_string(), "prometheus".to_string())].into(),
        ),
        1 => (
            "kube-system".to_string(),
            [("k8s-app".to_string(), "kube-dns".to_string())].into(),
        ),
        _ => {
            let ns = rng.below(size.namespaces);
            let app = rng.below(APPS_PER_NAMESPACE);
            (namespace(ns), app_labels(ns, app, rng.below(3)))
        }
    };
    PodRecord {
        namespace,
        name,
        node: node_name(node),
        labels,
        ips: vec![ip],
        named_ports: BTreeMap::new(),
    }
}

/// Remote pod `j` of node `k` (each drawn from a generator of its own, so any one is made
/// without the others).
pub fn remote_pod(size: &Size, k: u32, j: u32) -> PodRecord {
    let mut rng = Rng::new(u64::from(k) << 20 | u64::from(j));
    random_pod(size, &mut rng, k, format!("p{k}-{j}"), pod_ip(k, j + 16))
}

/// Every remote pod, node by node.
pub fn remote_pods(size: &Size) -> impl Iterator<Item = PodRecord> + '_ {
    (1..=size.nodes).flat_map(move |k| (0..size.pods_per_node).map(move |j| remote_pod(size, k, j)))
}

/// The node's own pods: (namespace, name, labels), in namespaces the policies cover, one per
/// tier and more.
pub fn local_pods(size: &Size) -> Vec<(String, String, BTreeMap<String, String>)> {
    let picks = [
        (0, 0),
        (0, 1),
        (1, 2),
        (3, 3),
        (10 % size.namespaces, 0),
        (11 % size.namespaces, 1),
    ];
    picks
        .iter()
        .enumerate()
        .map(|(i, (ns, app))| {
            (
                namespace(*ns),
                format!("local-{i}"),
                app_labels(*ns, *app, 0),
            )
        })
        .collect()
}

fn labels_eq(pairs: &[(&str, &str)]) -> Value {
    json!({"matchLabels": pairs.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()})
}

fn tcp(ports: &[u16]) -> Value {
    json!(ports
        .iter()
        .map(|p| json!({"protocol": "TCP", "port": p}))
        .collect::<Vec<_>>())
}

/// The spec of policy shape `shape` in namespace index `ns`.
fn spec(shape: u32, ns: u32, size: &Size) -> Value {
    let app0 = format!("{}-a0", namespace(ns));
    let other_team = team((ns + 10) % size.namespaces);
    match shape {
        0 => json!({"podSelector": {}, "policyTypes": ["Ingress"]}),
        1 => json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}),
        2 => json!({"podSelector": labels_eq(&[("tier", "frontend")]),
            "ingress": [{"from": [{"namespaceSelector": labels_eq(&[("team", &team(ns))])}], "ports": tcp(&[80, 443])}]}),
        3 => json!({"podSelector": labels_eq(&[("tier", "backend")]),
            "ingress": [{"from": [{"podSelector": labels_eq(&[("tier", "frontend")])}], "ports": tcp(&[8080])}]}),
        4 => json!({"podSelector": labels_eq(&[("tier", "db")]),
            "ingress": [{"from": [{"namespaceSelector": labels_eq(&[("team", &other_team)]),
                                   "podSelector": labels_eq(&[("tier", "backend")])}], "ports": tcp(&[5432])}]}),
        5 => json!({"podSelector": labels_eq(&[("app", &app0)]),
            "ingress": [{"from": [{"namespaceSelector": labels_eq(&[("env", "prod")])}]}]}),
        6 => json!({"podSelector": {},
            "ingress": [{"from": [{"namespaceSelector": labels_eq(&[("kubernetes.io/metadata.name", "monitoring")]),
                                   "podSelector": labels_eq(&[("app", "prometheus")])}], "ports": tcp(&[9090])}]}),
        7 => json!({"podSelector": labels_eq(&[("tier", "backend")]), "policyTypes": ["Egress"],
            "egress": [
                {"to": [{"namespaceSelector": labels_eq(&[("kubernetes.io/metadata.name", "kube-system")]),
                         "podSelector": labels_eq(&[("k8s-app", "kube-dns")])}],
                 "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                {"to": [{"podSelector": labels_eq(&[("tier", "db")])}], "ports": tcp(&[5432])}]}),
        8 => {
            json!({"podSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["frontend", "cache"]}]},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"ipBlock": {"cidr": "2001:2:0:f000::/52", "except": ["2001:2:0:f001::/64"]}}], "ports": tcp(&[443])}],
            "egress": [{"to": [{"ipBlock": {"cidr": "::/0", "except": ["2001:2:1::/48"]}}]}]})
        }
        _ => {
            json!({"podSelector": {"matchExpressions": [{"key": "version", "operator": "In", "values": ["v2", "v3"]}]},
            "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": [team(ns), other_team]}]},
                                   "podSelector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]}}]}]})
        }
    }
}

/// A policy document.
pub fn policy_doc(namespace: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"name": name, "namespace": namespace}, "spec": spec})
}

/// Policy `p`: in namespace `p % namespaces`, of shape `p / namespaces` (so every namespace
/// gets the shapes in order).
pub fn policy(size: &Size, p: u32) -> (String, String, Value) {
    let ns = p % size.namespaces;
    let shape = (p / size.namespaces) % 10;
    let name = format!("pol-{p}");
    let doc = policy_doc(&namespace(ns), &name, spec(shape, ns, size));
    (namespace(ns), name, doc)
}

/// The probe policy: local pod 0 accepts pods labelled [`PROBE_LABEL`] from anywhere.
pub fn probe_policy(size: &Size) -> (String, String, Value) {
    let (ns, _, labels) = &local_pods(size)[0];
    let spec = json!({"podSelector": labels_eq(&[("app", &labels["app"])]),
        "ingress": [{"from": [{"namespaceSelector": {}, "podSelector": labels_eq(&[(PROBE_LABEL, "yes")])}]}]});
    (
        ns.clone(),
        "scale-probe".into(),
        policy_doc(ns, "scale-probe", spec),
    )
}

/// A probe policy `k` that lets an ipBlock of its own reach local pod 0.
pub fn probe_block_policy(size: &Size, k: u32) -> (String, String, Value, String) {
    let (ns, _, labels) = &local_pods(size)[0];
    let cidr = format!(
        "{}/64",
        Ipv6Addr::new(0x2001, 2, 0, 0xf800 + k as u16, 0, 0, 0, 0)
    );
    let spec = json!({"podSelector": labels_eq(&[("app", &labels["app"])]),
        "ingress": [{"from": [{"ipBlock": {"cidr": cidr}}]}]});
    let name = format!("scale-probe-block-{k}");
    (ns.clone(), name.clone(), policy_doc(ns, &name, spec), cidr)
}

/// A probe pod `k` on remote node 1, matched by the probe policy.
pub fn probe_pod(k: u32) -> PodRecord {
    PodRecord {
        namespace: namespace(1),
        name: format!("probe-{k}"),
        node: node_name(1),
        labels: [(PROBE_LABEL.to_string(), "yes".to_string())].into(),
        ips: vec![pod_ip(1, 0x10_000 + k)],
        named_ports: BTreeMap::new(),
    }
}

/// One change elsewhere in the cluster.
pub enum Change {
    PutPod(PodRecord),
    DeletePod {
        node: String,
        namespace: String,
        name: String,
    },
    PutPolicy {
        namespace: String,
        name: String,
        doc: Value,
    },
    DeletePolicy {
        namespace: String,
        name: String,
    },
}

/// `count` changes: pod starts (45 %), stops (35 %) and relabels (10 %) on remote nodes,
/// and policies added or deleted in namespaces without local pods (10 %).
pub fn changes(size: &Size, count: u32, seed: u64) -> Vec<Change> {
    let mut rng = Rng::new(seed);
    let locals: Vec<String> = local_pods(size).into_iter().map(|(ns, _, _)| ns).collect();
    let mut added_policies: Vec<(String, String)> = Vec::new();
    let mut gone = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for i in 0..count {
        let k = 1 + rng.below(size.nodes);
        let roll = rng.below(100);
        let j = rng.below(size.pods_per_node);
        let change = if roll < 45 {
            let name = format!("ev-{seed}-{i}");
            Change::PutPod(random_pod(size, &mut rng, k, name, pod_ip(k, 0x20_000 + i)))
        } else if roll < 80 && gone.insert((k, j)) {
            let pod = remote_pod(size, k, j);
            Change::DeletePod {
                node: pod.node,
                namespace: pod.namespace,
                name: pod.name,
            }
        } else if roll < 90 && !gone.contains(&(k, j)) {
            let mut pod = remote_pod(size, k, j);
            pod.labels.insert("version".into(), format!("v{}", 4 + i));
            Change::PutPod(pod)
        } else if let Some((namespace, name)) = added_policies.pop().filter(|_| rng.below(2) == 0) {
            Change::DeletePolicy { namespace, name }
        } else {
            let mut ns = rng.below(size.namespaces);
            while locals.contains(&namespace(ns)) {
                ns = (ns + 1) % size.namespaces;
            }
            let name = format!("ev-pol-{seed}-{i}");
            let doc = policy_doc(&namespace(ns), &name, spec(rng.below(10), ns, size));
            added_policies.push((namespace(ns), name.clone()));
            Change::PutPolicy {
                namespace: namespace(ns),
                name,
                doc,
            }
        };
        out.push(change);
    }
    out
}
