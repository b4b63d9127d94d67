//! Root-only: a cluster assembled the way Kubernetes nodes run a CNI. Three simulated nodes
//! (see `harness/mod.rs`), each running a real containerd (Debian's 1.6, whose CRI plugin
//! carries libcni 1.1) that executes the node's CNI plugins with the conflist `rcni-node`
//! wrote, and pods made through CRI calls like kubelet's (see `harness/containerd.rs` and
//! `harness/kubelet.rs`). Skipped, saying why, where containerd or crun is missing; building
//! the sandbox image needs gcc with a static libc (Debian's `gcc` and `libc6-dev`).

mod harness;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use cni_testkit::{http_get, http_server, ping, HTTP_BODY};
use harness::containerd::skip_without_containerd as skip;
use harness::cri::PodSpec;
use harness::kubelet::CriPod;
use harness::*;
use serde_json::{json, Value};

/// The hostPort of the port-mapping pod, and the port its server listens on in the pod.
const HOST_PORT: u16 = 30080;
const CONTAINER_PORT: u16 = 8080;
/// Sandboxes made on each node (the latency sample is all of them).
const PODS_PER_NODE: usize = 3;

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
        let ready = poll_every(Duration::from_millis(5), Duration::from_secs(30), || {
            cri.network_ready().is_ok_and(|(ready, _)| ready)
        });
        assert!(
            ready.is_some(),
            "node{}: NetworkReady after the agent started:\n{}\n{}",
            i + 1,
            c.nodes[i].agent_log(),
            c.containerd_log_tail(i)
        );
        to_ready.push(ready.unwrap());
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
    every_pair_talks(&first.iter().map(|p| (&p.ns, p.ip)).collect::<Vec<_>>());
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

/// `RunPodSandbox` on node `i` until the runtime refuses one (each sandbox it accepts
/// meanwhile is stopped and removed again); the refusal's message, or `None` after `timeout`.
fn first_refusal(c: &Cluster, i: usize, timeout: Duration) -> Option<String> {
    let mut cri = c.cri(i);
    let started = Instant::now();
    for attempt in 0.. {
        let spec = PodSpec::named(&format!("probe-{attempt}"));
        match cri.run_pod_sandbox(&spec) {
            Err(refused) => return Some(refused.message().to_string()),
            Ok(id) => {
                cri.stop_pod_sandbox(&id).unwrap();
                cri.remove_pod_sandbox(&id).unwrap();
            }
        }
        if started.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    unreachable!("the attempts never run out")
}

#[test]
fn a_dead_agent_makes_its_node_refuse_new_pods_until_it_is_back() {
    if skip() {
        return;
    }
    let Some(mut c) = cluster(json!({"Type": "vxlan"}), Plugins::Rcni, 2) else {
        return;
    };
    let a = c.run_pod(0, &PodSpec::named("a"));
    let b = c.run_pod(1, &PodSpec::named("b"));
    assert!(ping(&a.ns.name, b.ip));
    let live_pod_only = c.pod_leftovers(1, &[b.ip], &[]);

    c.nodes[1].agent.kill();
    let killed = Instant::now();
    let refusal = first_refusal(&c, 1, Duration::from_secs(30)).unwrap_or_else(|| {
        panic!(
            "node2 kept accepting pods with its agent dead:\n{}",
            c.containerd_log_tail(1)
        )
    });
    eprintln!(
        "RunPodSandbox refused {:?} after the agent's SIGKILL: {refusal}",
        killed.elapsed()
    );
    assert!(
        refusal.contains("rcni-node") && refusal.contains("node2"),
        "the refusal names the agent and the node: {refusal}"
    );
    assert_eq!(
        c.pod_leftovers(1, &[b.ip], &[]),
        live_pod_only,
        "the refused sandboxes left nothing"
    );
    assert!(
        ping(&a.ns.name, b.ip) && ping(&b.ns.name, a.ip),
        "the node's pods keep their traffic"
    );
    // The containerd of 1.6 never asks STATUS: it still reports the network ready.
    let (ready, _) = c.cri(1).network_ready().unwrap();
    assert!(ready);

    c.start_agent(1);
    let after = c.run_pod(1, &PodSpec::named("after"));
    assert!(
        ping(&a.ns.name, after.ip),
        "a pod made once the agent is back"
    );
    teardown_leaves_nothing(&c, vec![vec![a], vec![b, after]]);
}

#[test]
fn restarting_an_agent_disturbs_neither_containerd_nor_its_pods() {
    if skip() {
        return;
    }
    let Some(mut c) = cluster(json!({"Type": "host-gw"}), Plugins::Rcni, 2) else {
        return;
    };
    let a = c.run_pod(0, &PodSpec::named("a"));
    let b = c.run_pod(1, &PodSpec::named("b"));
    for round in 0..4 {
        // Graceful stops and SIGKILLs in turn.
        if round % 2 == 0 {
            c.nodes[1].agent.terminate();
        } else {
            c.nodes[1].agent.kill();
        }
        assert!(
            ping(&a.ns.name, b.ip),
            "round {round}: traffic while the agent is down"
        );
        c.start_agent(1);
        let (ready, message) = c.cri(1).network_ready().unwrap();
        assert!(
            ready,
            "round {round}: NetworkReady after the restart: {message}"
        );
        let fresh = c.run_pod(1, &PodSpec::named(&format!("fresh-{round}")));
        assert!(
            ping(&fresh.ns.name, a.ip) && ping(&b.ns.name, a.ip),
            "round {round}: old and new pods talk across nodes"
        );
        c.remove_pod(fresh);
    }
    // The agent's conflist writes never showed containerd a partial or temporary file.
    let log = c.nodes[1].containerd.as_ref().unwrap().log();
    let noise: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("failed to reload cni configuration"))
        .collect();
    assert!(
        noise.is_empty(),
        "containerd saw the agent's writes: {noise:#?}"
    );
    teardown_leaves_nothing(&c, vec![vec![a], vec![b]]);
}

#[test]
fn a_rebooted_node_cleans_up_its_dead_sandboxes_and_runs_new_ones() {
    if skip() {
        return;
    }
    let Some(mut c) = cluster(json!({"Type": "vxlan"}), Plugins::Rcni, 2) else {
        return;
    };
    let a = c.run_pod(0, &PodSpec::named("a"));
    let mut mapped = PodSpec::named("mapped");
    mapped.host_ports.push((HOST_PORT, CONTAINER_PORT));
    let dead: Vec<CriPod> = vec![c.run_pod(1, &mapped), c.run_pod(1, &PodSpec::named("b"))];
    let dead_ips: Vec<Ipv4Addr> = dead.iter().map(|p| p.ip).collect();
    // The reboot: the agent, containerd, its shims and pods die, `/run` starts empty and
    // `/var/lib` (containerd's metadata, the libcni cache, the leases) is kept.
    c.nodes[1].agent.kill();
    for pod in &dead {
        c.sb.remove_container(&pod.ns).unwrap();
    }
    c.nodes[1].containerd.as_mut().unwrap().restart();
    c.start_agent(1);

    // The kubelet stand-in stops and removes what the runtime reports not ready.
    let dead_ids: Vec<&str> = dead.iter().map(|p| p.id.as_str()).collect();
    c.remove_notready_sandboxes(1, &dead_ids);
    let left = c.pod_leftovers(1, &dead_ips, &[HOST_PORT]);
    assert!(
        left.is_empty(),
        "node2 after removing the dead sandboxes: {left:#?}"
    );

    let fresh = c.run_pod(1, &mapped);
    every_pair_talks(&[(&a.ns, a.ip), (&fresh.ns, fresh.ip)]);
    host_port_is_reached_from_another_node(&c, &fresh);
    teardown_leaves_nothing(&c, vec![vec![a], vec![fresh]]);
}
