//! Root-only: simulated nodes (throwaway namespaces on a shared underlay with a real etcd), each
//! running `rcni-node`, with pods attached through the conflist the agent wrote. See
//! `harness/mod.rs` for the topology.

mod harness;

use std::time::Duration;

use cni_testkit::ping;
use harness::*;
use serde_json::json;

fn every_pair_talks_and_only_leaving_traffic_is_masqueraded(c: &Cluster, payload: Option<usize>) {
    let pods: Vec<Pod> = (0..c.nodes.len()).map(|i| c.add_pod(i)).collect();
    every_pair_talks(&pods.iter().map(|p| (&p.ns, p.ip)).collect::<Vec<_>>());
    if let Some(size) = payload {
        for (a, from) in pods.iter().enumerate() {
            for (b, to) in pods.iter().enumerate().filter(|(b, _)| *b != a) {
                let got = udp_payload(&from.ns, &to.ns, to.ip, size);
                assert_eq!(
                    got.ok(),
                    Some(size),
                    "{size}-byte UDP payload pod{a} -> pod{b}"
                );
            }
        }
    }
    // Pod to pod across nodes keeps the pod's address.
    let listener = listen_in(&pods[1].ns, pods[1].ip);
    assert_eq!(source_seen(&pods[0].ns, &listener, pods[1].ip), pods[0].ip);
    // Pod to outside the cluster network is masqueraded to the node's address.
    let listener = listen_in(&c.external, EXTERNAL_IP);
    assert_eq!(
        source_seen(&pods[0].ns, &listener, EXTERNAL_IP),
        c.nodes[0].ip
    );
}

#[test]
fn host_gw_pods_on_three_nodes_reach_each_other_and_only_leaving_traffic_is_masqueraded() {
    if skip_unless_root() {
        return;
    }
    let c = Cluster::with_nodes(json!({"Type": "host-gw"}), 3);
    // Independent check of one node's routes: through each other node's public IP.
    for other in &c.nodes[1..] {
        let subnet = other.subnet().unwrap();
        let routes = ip_json(&c.nodes[0].ns.name, &["route", "show", &subnet]);
        assert_eq!(routes[0]["gateway"], other.ip.to_string());
        assert_eq!(routes[0]["dev"], "eth0");
    }
    every_pair_talks_and_only_leaving_traffic_is_masqueraded(&c, None);
    // A deleted host-gw route is put back by the resync.
    let subnet = c.nodes[1].subnet().unwrap();
    sh(&["ip", "-n", &c.nodes[0].ns.name, "route", "del", &subnet]);
    let back = wait_for(Duration::from_secs(20), || c.nodes[0].has_route(&subnet));
    assert!(
        back.is_some(),
        "host-gw route restored:\n{}",
        c.nodes[0].agent_log()
    );
}

#[test]
fn vxlan_pods_on_three_nodes_reach_each_other_with_1400_byte_payloads() {
    if skip_unless_root() {
        return;
    }
    let c = Cluster::with_nodes(json!({"Type": "vxlan", "VNI": 1}), 3);
    let n0 = &c.nodes[0];
    let link = ip_json(&n0.ns.name, &["-d", "link", "show", "rcni.1"]);
    assert_eq!(link[0]["linkinfo"]["info_data"]["id"], 1);
    assert_eq!(link[0]["linkinfo"]["info_data"]["learning"], false);
    assert_eq!(link[0]["linkinfo"]["info_data"]["local"], n0.ip.to_string());
    assert_eq!(link[0]["mtu"], 1450);
    let env = std::fs::read_to_string(n0.subnet_file()).unwrap();
    assert!(env.contains("FLANNEL_MTU=1450\n"), "{env}");
    assert!(env.contains("FLANNEL_NETWORK=198.19.0.0/16\n"), "{env}");
    for other in &c.nodes[1..] {
        let subnet = other.subnet().unwrap();
        let gw = subnet.split('/').next().unwrap();
        let routes = ip_json(&n0.ns.name, &["route", "show", &subnet]);
        assert_eq!(routes[0]["gateway"], gw);
        assert_eq!(routes[0]["dev"], "rcni.1");
        assert_eq!(routes[0]["flags"][0], "onlink");
        let fdb = sh(&["bridge", "-n", &n0.ns.name, "fdb", "show", "dev", "rcni.1"]);
        assert!(fdb.contains(&format!("dst {}", other.ip)), "{fdb}");
    }
    every_pair_talks_and_only_leaving_traffic_is_masqueraded(&c, Some(1400));
    // The pods got the underlay MTU minus the VXLAN overhead.
    let pod = c.add_pod(0);
    let link = ip_json(&pod.ns.name, &["link", "show", "eth0"]);
    assert_eq!(link[0]["mtu"], 1450);
}

#[test]
fn a_released_node_is_removed_everywhere_and_a_joining_node_is_learned() {
    if skip_unless_root() {
        return;
    }
    let mut c = Cluster::new(json!({"Type": "host-gw"}));
    for _ in 0..3 {
        let i = c.add_node();
        c.nodes[i].extra.push("--release-on-exit".into());
        c.start_agent(i);
    }
    c.wait_converged(Duration::from_secs(30)).unwrap();
    let leaving = c.nodes[2].subnet().unwrap();
    c.nodes[2].agent.terminate();
    let took = wait_for(Duration::from_secs(20), || {
        !c.nodes[0].has_route(&leaving) && !c.nodes[1].has_route(&leaving)
    })
    .expect("the released node's routes are removed");
    eprintln!("convergence: leave (release-on-exit), 3 nodes: {took:?}");
    let key = format!("{PREFIX}/subnets/{}", leaving.replace('/', "-"));
    assert!(c.etcdctl(&["get", &key]).trim().is_empty(), "lease deleted");

    let i = c.add_node();
    c.spawn_agent(i);
    let took = wait_for(Duration::from_secs(30), || {
        c.nodes[i]
            .subnet()
            .is_some_and(|s| c.nodes[0].has_route(&s) && c.nodes[1].has_route(&s))
    })
    .expect("the joining node is learned");
    eprintln!("convergence: join, 3 nodes: {took:?}");

    // The released node comes back: its lease is gone, so it takes the subnet in its subnet
    // file, which is still free.
    c.start_agent(2);
    assert_eq!(c.nodes[2].subnet().unwrap(), leaving);
    let key_value = c.etcdctl(&["get", &key]);
    assert!(
        key_value.contains(&c.nodes[2].ip.to_string()),
        "{key_value}"
    );
}

#[test]
fn a_killed_nodes_lease_expires_and_the_others_remove_its_paths() {
    if skip_unless_root() {
        return;
    }
    let mut c = Cluster::new(json!({"Type": "vxlan"}));
    c.ttl = 3;
    for _ in 0..3 {
        let i = c.add_node();
        c.start_agent(i);
    }
    c.wait_converged(Duration::from_secs(30)).unwrap();
    let gone = c.nodes[2].subnet().unwrap();
    assert_eq!(c.status_code(2), 0);
    c.nodes[2].agent.kill();
    let took = wait_for(Duration::from_secs(20), || {
        !c.nodes[0].has_route(&gone) && !c.nodes[1].has_route(&gone)
    })
    .expect("the killed node's paths are removed after its TTL");
    eprintln!("convergence: leave (killed, TTL 3 s), 3 nodes: {took:?}");
    let gw = gone.split('/').next().unwrap();
    let neigh = ip_json(&c.nodes[0].ns.name, &["neigh", "show", "dev", "rcni.1"]);
    assert!(
        !neigh.as_array().unwrap().iter().any(|n| n["dst"] == gw),
        "neighbour removed: {neigh}"
    );
    // The killed agent stopped refreshing its status file: its node's STATUS is 50.
    let stale = wait_for(Duration::from_secs(20), || c.status_code(2) == 50);
    assert!(
        stale.is_some(),
        "STATUS 50 once the killed agent's status expired"
    );
}

#[test]
fn a_restarted_agent_keeps_its_subnet_and_pod_traffic() {
    if skip_unless_root() {
        return;
    }
    let mut c = Cluster::with_nodes(json!({"Type": "vxlan"}), 2);
    let a = c.add_pod(0);
    let b = c.add_pod(1);
    assert!(ping(&a.ns.name, b.ip));
    let before = c.nodes[1].subnet().unwrap();
    c.nodes[1].agent.terminate();
    // Graceful stop keeps the lease, the device and the routes: traffic continues.
    assert!(ping(&a.ns.name, b.ip), "traffic while the agent is down");
    c.start_agent(1);
    assert_eq!(c.nodes[1].subnet().unwrap(), before);
    c.wait_converged(Duration::from_secs(30)).unwrap();
    assert!(ping(&a.ns.name, b.ip) && ping(&b.ns.name, a.ip));
    // Killed and restarted: the same.
    c.nodes[1].agent.kill();
    c.start_agent(1);
    assert_eq!(c.nodes[1].subnet().unwrap(), before);
    assert!(ping(&b.ns.name, a.ip));
    // The takeovers revoke the previous runs' store leases (right after the subnet is taken
    // back, so allow the agent a moment): one per node is left.
    let mut leases = String::new();
    for _ in 0..100 {
        leases = c.etcdctl(&["lease", "list"]);
        if leases.starts_with("found 2 leases") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(leases.starts_with("found 2 leases"), "{leases}");
}

#[test]
fn two_nodes_started_together_always_get_distinct_subnets() {
    if skip_unless_root() {
        return;
    }
    // Exactly two subnets: the nodes often pick the same one, and the loser of the
    // create-if-absent transaction must choose again.
    let mut c = Cluster::with_config(json!({
        "Network": CLUSTER_NET, "SubnetLen": 24,
        "SubnetMin": "198.19.1.0", "SubnetMax": "198.19.2.0",
        "Backend": {"Type": "host-gw"}
    }));
    c.add_node();
    c.add_node();
    for round in 0..20 {
        for n in &c.nodes {
            let _ = std::fs::remove_file(n.subnet_file());
        }
        c.spawn_agent(0);
        c.spawn_agent(1);
        let both = wait_for(Duration::from_secs(30), || {
            c.nodes.iter().all(|n| n.subnet().is_some())
        });
        assert!(both.is_some(), "round {round}: both nodes got a subnet");
        let (s0, s1) = (c.nodes[0].subnet().unwrap(), c.nodes[1].subnet().unwrap());
        assert_ne!(s0, s1, "round {round}");
        let keys = c.etcdctl(&[
            "get",
            "--prefix",
            "--keys-only",
            &format!("{PREFIX}/subnets/"),
        ]);
        assert_eq!(
            keys.lines().filter(|l| !l.is_empty()).count(),
            2,
            "round {round}: {keys}"
        );
        // Stop both and drop their leases so the next round contends again.
        for n in &mut c.nodes {
            n.agent.kill();
        }
        c.etcdctl(&["del", "--prefix", &format!("{PREFIX}/subnets/")]);
    }
    let lost: usize = c
        .nodes
        .iter()
        .map(|n| n.agent_log().matches("was taken meanwhile").count())
        .sum();
    eprintln!("contention: {lost} lost claims in 20 rounds, every round distinct");
}

#[test]
fn a_deleted_route_fdb_entry_and_neighbour_are_put_back_by_the_resync() {
    if skip_unless_root() {
        return;
    }
    let c = Cluster::with_nodes(json!({"Type": "vxlan"}), 2);
    let (n0, n1) = (&c.nodes[0], &c.nodes[1]);
    let subnet = n1.subnet().unwrap();
    sh(&["ip", "-n", &n0.ns.name, "route", "del", &subnet]);
    let fdb = sh(&["bridge", "-n", &n0.ns.name, "fdb", "show", "dev", "rcni.1"]);
    let mac = fdb
        .lines()
        .find(|l| l.contains(&format!("dst {}", n1.ip)))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_string();
    sh(&[
        "bridge",
        "-n",
        &n0.ns.name,
        "fdb",
        "del",
        &mac,
        "dev",
        "rcni.1",
        "dst",
        &n1.ip.to_string(),
    ]);
    let gw = subnet.split('/').next().unwrap().to_string();
    sh(&[
        "ip",
        "-n",
        &n0.ns.name,
        "neigh",
        "del",
        &gw,
        "dev",
        "rcni.1",
    ]);
    let neighbour_back = || {
        ip_json(&n0.ns.name, &["neigh", "show", &gw, "dev", "rcni.1"])
            .as_array()
            .is_some_and(|a| a.iter().any(|n| n["lladdr"] == mac.as_str()))
    };
    // The resync runs every second; the margin is for a loaded CI machine.
    let back = wait_for(Duration::from_secs(20), || {
        neighbour_back()
            && n0.has_route(&subnet)
            && sh(&["bridge", "-n", &n0.ns.name, "fdb", "show", "dev", "rcni.1"])
                .contains(&format!("dst {}", n1.ip))
    });
    assert!(
        back.is_some(),
        "resync restored the route, the neighbour and the FDB entry:\n{}",
        n0.agent_log()
    );
    let metrics = n0.health_get("/metrics").unwrap();
    assert!(metrics.contains("rcni_node_leases_known 1\n"), "{metrics}");
    assert!(
        metrics.contains("rcni_node_remotes_programmed 1\n"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("rcni_node_repairs_total 0\n"),
        "{metrics}"
    );
    assert_eq!(n0.health_get("/healthz").unwrap(), "ok\n");
    // Someone deletes this node's own lease key: the agent writes it back.
    let own_key = format!(
        "{PREFIX}/subnets/{}",
        n0.subnet().unwrap().replace('/', "-")
    );
    c.etcdctl(&["del", &own_key]);
    let rewritten = wait_for(Duration::from_secs(10), || {
        !c.etcdctl(&["get", &own_key]).trim().is_empty()
    });
    assert!(
        rewritten.is_some(),
        "own lease written back:\n{}",
        n0.agent_log()
    );
    // A route the agent did not make is left alone.
    sh(&[
        "ip",
        "-n",
        &n0.ns.name,
        "route",
        "add",
        "198.19.250.0/24",
        "via",
        "198.18.0.1",
    ]);
    std::thread::sleep(Duration::from_secs(3));
    let foreign = ip_json(&n0.ns.name, &["route", "show", "198.19.250.0/24"]);
    assert_eq!(
        foreign.as_array().unwrap().len(),
        1,
        "foreign route untouched"
    );
    let a = c.add_pod(0);
    let b = c.add_pod(1);
    assert!(ping(&a.ns.name, b.ip));
}

/// The etcd outage: `RCNI_ETCD_OUTAGE_SECS` (default 8; the 30 with
/// `scripts/node-etcd-outage`).
#[test]
fn etcd_outage_keeps_traffic_reports_status_50_and_recovers() {
    if skip_unless_root() {
        return;
    }
    let outage: u64 = std::env::var("RCNI_ETCD_OUTAGE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let mut c = Cluster::with_nodes(json!({"Type": "vxlan"}), 2);
    let a = c.add_pod(0);
    let b = c.add_pod(1);
    assert_eq!(c.status_code(0), 0, "STATUS ready while healthy");
    c.stop_etcd();
    let unhealthy = wait_for(Duration::from_secs(outage.max(8)), || {
        c.status_code(0) == 50
    });
    assert!(
        unhealthy.is_some(),
        "STATUS 50 during the outage:\n{}",
        c.nodes[0].agent_log()
    );
    assert!(ping(&a.ns.name, b.ip), "pod traffic continues without etcd");
    std::thread::sleep(Duration::from_secs(
        outage.saturating_sub(unhealthy.unwrap().as_secs()),
    ));
    assert!(ping(&b.ns.name, a.ip), "pod traffic continues without etcd");
    c.start_etcd();
    let recovered = wait_for(Duration::from_secs(30), || {
        c.status_code(0) == 0 && c.status_code(1) == 0
    });
    assert!(
        recovered.is_some(),
        "STATUS recovers:\n{}",
        c.nodes[0].agent_log()
    );
    eprintln!(
        "STATUS back to ready {:?} after etcd returned",
        recovered.unwrap()
    );
    // The watch works again: a new node is learned.
    let i = c.add_node();
    c.start_agent(i);
    c.wait_converged(Duration::from_secs(30))
        .expect("converged after the outage");
}

#[test]
fn a_bad_network_config_stops_the_agent_with_the_reason_and_writes_nothing() {
    if skip_unless_root() {
        return;
    }
    let mut c = Cluster::with_config(json!({"Network": CLUSTER_NET, "Backend": {"Type": "udp"}}));
    let i = c.add_node();
    c.spawn_agent(i);
    let exited = wait_for(Duration::from_secs(20), || {
        c.nodes[i]
            .agent
            .0
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(Some(s)) if !s.success()))
    });
    let log = c.nodes[i].agent_log();
    assert!(exited.is_some(), "agent exits on a bad config:\n{log}");
    assert!(
        log.contains("Backend.Type \"udp\" is not supported"),
        "{log}"
    );
    assert!(!c.nodes[i].conf_dir().join("10-rcni.conflist").exists());
    assert!(c.nodes[i].subnet().is_none());
    let keys = c.etcdctl(&[
        "get",
        "--prefix",
        "--keys-only",
        &format!("{PREFIX}/subnets/"),
    ]);
    assert!(keys.trim().is_empty(), "no lease taken: {keys}");
}
