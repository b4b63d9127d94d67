//! The nf_tables program enforcing policies on real traffic, on one simulated node: a throwaway
//! host namespace with a bridge and nine pods (namespaces x, y, z; pods a, b, c), each serving
//! TCP and UDP on ports 80 and 81. For each case the program is committed, every pod probes
//! every pod on every port and protocol with a real connection, and the observed matrix must
//! equal the one `cni_policy::allows` computes (which the unit tests check against the
//! upstream conformance model by hand). The cases are committed one after the other by one
//! `nft::Enforcer`, so every case after the first runs on an incremental batch.

use std::cell::RefCell;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use cni_nft::Nft;
use cni_policy::nft::Enforcer;
use cni_policy::{allows_matrix, parse_documents, Cluster, Document, Pod, Protocol};
use cni_testkit::{reach_matrix, run_in, serve_tcp_udp, Netns, Sandbox, Servers, Transport};

mod common;

const PORTS: [u16; 2] = [80, 81];
/// How long a denied probe waits: long enough on a loaded 2-core machine for an allowed
/// connection on a local bridge, which takes well under a millisecond.
const PROBE_TIMEOUT: Duration = Duration::from_millis(400);

/// Fields drop in order: the servers stop before the sandbox removes the namespaces.
struct Node {
    enforcer: RefCell<Enforcer>,
    _servers: Vec<Servers>,
    sb: Sandbox,
    pods: Vec<(Netns, Pod)>,
}

fn ip4(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(198, 18, 20, n))
}

fn node() -> Option<Node> {
    let sb = common::bridged_host()?;
    let mut pods = Vec::new();
    let mut servers = Vec::new();
    for (n, ns) in ["x", "y", "z"].iter().enumerate() {
        for (m, name) in ["a", "b", "c"].iter().enumerate() {
            let i = n * 3 + m;
            let ip = ip4(10 + i as u8);
            let netns = common::bridged_pod(&sb, i, ip);
            servers.push(serve_tcp_udp(&netns.name, ip, &PORTS).unwrap());
            pods.push((
                netns,
                Pod {
                    namespace: ns.to_string(),
                    name: name.to_string(),
                    labels: [("pod".to_string(), name.to_string())].into(),
                    ips: vec![ip],
                    named_ports: [("serve-81-udp".to_string(), (Protocol::Udp, 81))].into(),
                },
            ));
        }
    }
    Some(Node {
        enforcer: RefCell::new(Enforcer::new()),
        sb,
        pods,
        _servers: servers,
    })
}

fn cluster(node: &Node, yaml: &str) -> Cluster {
    let mut c = Cluster::default();
    for ns in ["x", "y", "z"] {
        c.namespaces
            .insert(ns.into(), [("ns".to_string(), ns.to_string())].into());
    }
    c.pods = node.pods.iter().map(|(_, p)| p.clone()).collect();
    for doc in parse_documents(yaml).unwrap() {
        match doc {
            Document::NetworkPolicy(p) => c.policies.push(*p),
            Document::Namespace(n) => {
                let name = n.metadata.name.clone().unwrap();
                c.namespaces
                    .insert(name, n.metadata.labels.clone().unwrap_or_default());
            }
            other => panic!("not used here: {other:?}"),
        }
    }
    c
}

fn commit(node: &Node, c: &Cluster) {
    let (batch, _) = node.enforcer.borrow_mut().update(c, |_| true).unwrap();
    run_in(
        &node.sb.host().name,
        move || Ok(Nft::new()?.commit(&batch)?),
    )
    .unwrap();
}

/// Observed and expected matrices for one protocol and port (rows: source, columns: dest).
fn matrices(node: &Node, c: &Cluster, proto: Protocol, port: u16) -> (Vec<String>, Vec<String>) {
    let sources: Vec<&str> = node.pods.iter().map(|(ns, _)| ns.name.as_str()).collect();
    let targets: Vec<SocketAddr> = node
        .pods
        .iter()
        .map(|(_, p)| SocketAddr::new(p.ips[0], port))
        .collect();
    let transport = match proto {
        Protocol::Udp => Transport::Udp,
        _ => Transport::Tcp,
    };
    let seen = reach_matrix(&sources, &targets, transport, PROBE_TIMEOUT);
    let pods: Vec<Pod> = node.pods.iter().map(|(_, p)| p.clone()).collect();
    (seen, allows_matrix(c, &pods, proto, port).unwrap())
}

/// Commits the program for `yaml` and checks every matrix; returns the TCP/80 one.
#[track_caller]
fn enforced(node: &Node, yaml: &str) -> Vec<String> {
    let c = cluster(node, yaml);
    commit(node, &c);
    let mut tcp80 = Vec::new();
    for proto in [Protocol::Tcp, Protocol::Udp] {
        for port in PORTS {
            let (seen, want) = matrices(node, &c, proto, port);
            assert_eq!(
                seen, want,
                "{proto}/{port}: kernel (left) and policy model (right) differ\n{yaml}"
            );
            if (proto, port) == (Protocol::Tcp, 80) {
                tcp80 = seen;
            }
        }
    }
    tcp80
}

fn policy(ns: &str, name: &str, spec: &str) -> String {
    format!("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{spec}---\n")
}

#[test]
fn conformance_cases_match_the_model_on_real_traffic() {
    let Some(node) = node() else { return };
    // Without policies every pod reaches every pod: the probes and servers work.
    let open = enforced(&node, "");
    assert!(open.iter().all(|r| r == "........."), "{open:#?}");

    let deny = enforced(
        &node,
        &policy("x", "deny", "  podSelector: {}\n  policyTypes: [Ingress]\n"),
    );
    assert_eq!(deny[0], ".XX......", "{deny:#?}");
    assert_eq!(deny[3], "XXX......", "{deny:#?}");

    for case in [
        policy("x", "deny-egress", "  podSelector: {}\n  policyTypes: [Egress]\n"),
        policy("x", "same-ns", "  podSelector: {}\n  ingress:\n  - from: [{podSelector: {}}]\n"),
        policy(
            "x",
            "and",
            "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {ns: y}}\n      podSelector: {matchLabels: {pod: b}}\n",
        ),
        policy(
            "x",
            "or",
            "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {ns: y}}\n    - podSelector: {matchLabels: {pod: b}}\n",
        ),
        policy(
            "y",
            "block",
            "  podSelector: {}\n  ingress:\n  - from: [{ipBlock: {cidr: 198.18.20.0/28, except: [198.18.20.11/32]}}]\n",
        ),
        policy(
            "z",
            "ports",
            "  podSelector: {}\n  ingress:\n  - ports: [{port: 80, endPort: 80}, {port: serve-81-udp, protocol: UDP}]\n",
        ),
        policy(
            "x",
            "egress-80-to-y",
            "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - to: [{namespaceSelector: {matchLabels: {ns: y}}}]\n    ports: [{port: 80}]\n",
        ) + &policy(
            "x",
            "egress-z",
            "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - to: [{namespaceSelector: {matchExpressions: [{key: ns, operator: In, values: [z]}]}}]\n",
        ),
    ] {
        enforced(&node, &case);
    }

    // Removing every policy opens everything again.
    let open = enforced(&node, "");
    assert!(open.iter().all(|r| r == "........."), "{open:#?}");
}
