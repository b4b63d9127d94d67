//! Root-only: a cluster assembled the way Kubernetes nodes run a CNI. Three simulated nodes
//! (see `harness/mod.rs`), each running a real containerd (Debian's 1.6, whose CRI plugin
//! carries libcni 1.1) that executes the node's CNI plugins with the conflist `rcni-node`
//! wrote, and pods made through CRI calls like kubelet's (see `harness/containerd.rs` and
//! `harness/kubelet.rs`). Skipped, saying why, where containerd, crun or gcc is missing.

mod harness;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use cni_testkit::{http_get, http_server, ping, HTTP_BODY};
use harness::containerd::missing_tools;
use harness::cri::PodSpec;
use harness::kubelet::CriPod;
use harness::*;
use serde_json::{json, Value};

/// The hostPort of the port-mapping pod, and the port its server listens on in the pod.
const HOST_PORT: u16 = 30080;
const CONTAINER_PORT: u16 = 8080;
/// Sandboxes made on each node (the latency sample is all of them).
const PODS_PER_NODE: usize = 3;

fn skip() -> bool {
    if skip_unless_root() {
        return true;
    }
    if let Some(why) = missing_tools() {
        eprintln!("skipping: the containerd tests need containerd, ctr, crun and gcc ({why})");
        return true;
    }
    false
}

/// Which CNI plugins the nodes' bin dir holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Plugins {
    Rcni,
    Go,
}

/// A cluster of `n` nodes each running containerd and an agent. Checks that every node's
/// NetworkReady is false until its agent wrote the conflist, and reports how long each agent
/// took from its start to NetworkReady. `None` when the Go plugins are asked for but missing.
fn cluster(backend: Value, plugins: Plugins, n: usize) -> Option<Cluster> {
    let mut c = Cluster::new(backend.clone());
    if plugins == Plugins::Go {
        let Some(go) = cni_testkit::go_plugins_dir() else {
            eprintln!("skipping: Go reference plugins not installed");
            return None;
        };
        c.plugins = go;
    }
    let mut to_ready = Vec::new();
    for _ in 0..n {
        let i = c.add_node();
        c.start_containerd(i);
        let mut cri = c.cri(i);
        let (ready, message) = cri.network_ready().unwrap();
        assert!(!ready, "NetworkReady before the agent wrote its conflist");
        eprintln!(
            "node{}: NetworkReady false before the agent: {message}",
            i + 1
        );
        c.spawn_agent(i);
        let started = Instant::now();
        let ready = wait_for(Duration::from_secs(30), || {
            cri.network_ready().is_ok_and(|(ready, _)| ready)
        });
        assert!(
            ready.is_some(),
            "node{}: NetworkReady after the agent started:\n{}\n{}",
            i + 1,
            c.nodes[i].agent_log(),
            c.containerd_log_tail(i)
        );
        to_ready.push(started.elapsed());
    }
    c.wait_converged(Duration::from_secs(30))
        .expect("converged");
    eprintln!("agent start -> NetworkReady ({plugins:?} plugins, {backend}): {to_ready:?}");
    Some(c)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// `PODS_PER_NODE` sandboxes on every node through CRI, checked to be in their node's
/// subnet; the first of node 1 (index 1) maps `HOST_PORT`. Reports the RunPodSandbox
/// latency. Returns the pods of each node.
fn run_pods(c: &Cluster, label: &str) -> Vec<Vec<CriPod>> {
    let mut latencies = Vec::new();
    let mut pods = Vec::new();
    for i in 0..c.nodes.len() {
        let subnet: ipnet::Ipv4Net = c.nodes[i].subnet().unwrap().parse().unwrap();
        let mut on_node = Vec::new();
        for k in 0..PODS_PER_NODE {
            let mut spec = PodSpec::named(&format!("pod-{}-{k}", i + 1));
            if i == 1 && k == 0 {
                spec.host_ports.push((HOST_PORT, CONTAINER_PORT));
            }
            let started = Instant::now();
            let pod = c.run_pod(i, &spec);
            latencies.push(started.elapsed());
            assert!(
                subnet.contains(&pod.ip),
                "{} got {} outside node{}'s subnet {subnet}",
                spec.name,
                pod.ip,
                i + 1
            );
            on_node.push(pod);
        }
        pods.push(on_node);
    }
    eprintln!(
        "RunPodSandbox through containerd ({label}): median {:?} of {} ({latencies:?})",
        median(latencies.clone()),
        latencies.len()
    );
    pods
}

/// Ping and HTTP between the first pods of every pair of nodes.
fn every_pair_talks(pods: &[&CriPod]) {
    let servers: Vec<_> = pods
        .iter()
        .map(|p| http_server(&p.ns.name, p.ip, 0).unwrap())
        .collect();
    for (a, from) in pods.iter().enumerate() {
        for (b, to) in pods.iter().enumerate() {
            if a == b {
                continue;
            }
            assert!(
                ping(&from.ns.name, to.ip),
                "ping node{} pod -> node{} pod ({})",
                a + 1,
                b + 1,
                to.ip
            );
            let body = http_get(&from.ns.name, &servers[b].url()).unwrap();
            assert_eq!(
                body,
                HTTP_BODY,
                "HTTP node{} pod -> node{} pod",
                a + 1,
                b + 1
            );
        }
    }
}

/// The hostPort of node 1's first pod answers on node 1's address from node 0.
fn host_port_is_reached_from_another_node(c: &Cluster, mapped: &CriPod) {
    let _server = http_server(&mapped.ns.name, mapped.ip, CONTAINER_PORT).unwrap();
    let url = format!("http://{}:{HOST_PORT}/", c.nodes[1].ip);
    let body = http_get(&c.nodes[0].ns.name, &url)
        .unwrap_or_else(|e| panic!("hostPort {url} from node1's namespace: {e:#}"));
    assert_eq!(body, HTTP_BODY);
}

/// Traffic between pods keeps the pod's address; traffic leaving the cluster network leaves
/// with the node's address.
fn only_leaving_traffic_is_masqueraded(c: &Cluster, from: &CriPod, to: &CriPod) {
    let at_pod = listen_in(&to.ns, to.ip);
    assert_eq!(source_seen(&from.ns, &at_pod, to.ip), from.ip);
    let outside = listen_in(&c.external, EXTERNAL_IP);
    assert_eq!(
        source_seen(&from.ns, &outside, EXTERNAL_IP),
        c.nodes[from.node].ip
    );
}

/// Stop + Remove of every pod, then nothing of them is left on any node.
fn teardown_leaves_nothing(c: &Cluster, pods: Vec<Vec<CriPod>>) {
    let ips: Vec<Ipv4Addr> = pods.iter().flatten().map(|p| p.ip).collect();
    let pids: Vec<u32> = pods.iter().flatten().map(|p| p.pid).collect();
    for pod in pods.into_iter().flatten() {
        c.remove_pod(pod);
    }
    for i in 0..c.nodes.len() {
        let left = c.pod_leftovers(i, &ips, &[HOST_PORT]);
        assert!(left.is_empty(), "node{} after teardown: {left:#?}", i + 1);
    }
    let gone = wait_for(Duration::from_secs(5), || {
        pids.iter()
            .all(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
    });
    assert!(gone.is_some(), "sandbox processes exited");
}

fn pods_on_three_nodes_through_containerd(backend: Value, plugins: Plugins) {
    let Some(c) = cluster(backend.clone(), plugins, 3) else {
        return;
    };
    let pods = run_pods(&c, &format!("{plugins:?} plugins, {backend}"));
    let first: Vec<&CriPod> = pods.iter().map(|on_node| &on_node[0]).collect();
    every_pair_talks(&first);
    host_port_is_reached_from_another_node(&c, first[1]);
    only_leaving_traffic_is_masqueraded(&c, first[0], first[2]);
    teardown_leaves_nothing(&c, pods);
}

#[test]
fn host_gw_pods_through_containerd_with_rcni_plugins() {
    if skip() {
        return;
    }
    pods_on_three_nodes_through_containerd(json!({"Type": "host-gw"}), Plugins::Rcni);
}

#[test]
fn vxlan_pods_through_containerd_with_rcni_plugins() {
    if skip() {
        return;
    }
    pods_on_three_nodes_through_containerd(json!({"Type": "vxlan"}), Plugins::Rcni);
}

#[test]
fn host_gw_pods_through_containerd_with_go_plugins() {
    if skip() {
        return;
    }
    pods_on_three_nodes_through_containerd(json!({"Type": "host-gw"}), Plugins::Go);
}

#[test]
fn vxlan_pods_through_containerd_with_go_plugins() {
    if skip() {
        return;
    }
    pods_on_three_nodes_through_containerd(json!({"Type": "vxlan"}), Plugins::Go);
}
