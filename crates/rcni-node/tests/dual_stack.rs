//! Root-only: IPv6 and dual-stack networks (flannel's `EnableIPv6`/`IPv6Network`, and an
//! IPv6-only network with `EnableIPv4: false`) on simulated nodes, and the conflist's
//! `cniVersion` chosen from the plugins (rcni's: 1.1.0; Debian's Go plugins: 1.0.0). See
//! `harness/mod.rs` for the topology.

mod harness;

use std::time::Duration;

use cni_testkit::{http_get, http_server, ping, HTTP_BODY};
use harness::*;
use serde_json::{json, Value};

fn dual_stack(backend: Value) -> Value {
    json!({
        "Network": CLUSTER_NET, "SubnetLen": 24,
        "EnableIPv6": true, "IPv6Network": CLUSTER_NET6, "IPv6SubnetLen": 64,
        "Backend": backend
    })
}

/// Every pair of pods (one per node) talks over IPv6 (ping and HTTP); pod-to-pod keeps the
/// pod's IPv6 address, traffic to the external namespace is masqueraded to the node's.
fn every_pair_talks_over_ipv6(c: &Cluster) -> Vec<Pod> {
    let pods: Vec<Pod> = (0..c.nodes.len()).map(|i| c.add_pod(i)).collect();
    let servers: Vec<_> = pods
        .iter()
        .map(|p| http_server(&p.ns.name, p.ip6.expect("an IPv6 address"), 0).unwrap())
        .collect();
    for (a, from) in pods.iter().enumerate() {
        for (b, to) in pods.iter().enumerate() {
            if a == b {
                continue;
            }
            let to6 = to.ip6.unwrap();
            let answered = wait_for(Duration::from_secs(5), || ping(&from.ns.name, to6));
            assert!(answered.is_some(), "ping6 pod{a} -> pod{b} ({to6})");
            let body = http_get(&from.ns.name, &servers[b].url()).unwrap();
            assert_eq!(body, HTTP_BODY, "HTTP over IPv6 pod{a} -> pod{b}");
        }
    }
    let listener = listen_in(&pods[1].ns, pods[1].ip6.unwrap());
    assert_eq!(
        source_seen(&pods[0].ns, &listener, pods[1].ip6.unwrap()),
        pods[0].ip6.unwrap(),
        "pod-to-pod over IPv6 keeps the pod's address"
    );
    let listener = listen_in(&c.external, EXTERNAL_IP6);
    assert_eq!(
        source_seen(&pods[0].ns, &listener, EXTERNAL_IP6),
        c.nodes[0].ip6(),
        "IPv6 traffic leaving the cluster network is masqueraded"
    );
    pods
}

/// The lease of node `i` as stored in etcd: its key and JSON value.
fn stored_lease(c: &Cluster, i: usize) -> (String, Value) {
    let out = c.etcdctl(&["get", "--prefix", &format!("{PREFIX}/subnets/")]);
    let lines: Vec<&str> = out.lines().collect();
    for pair in lines.chunks(2) {
        let value: Value = serde_json::from_str(pair[1]).unwrap();
        if value["rcniNodeName"] == format!("node{}", c.nodes[i].index) {
            return (pair[0].to_string(), value);
        }
    }
    panic!("no lease of node{} in {out}", c.nodes[i].index)
}

/// Stops the last node with `--release-on-exit`; every other node drops its IPv6 path.
fn a_released_node_leaves_no_ipv6_route(c: &mut Cluster) {
    let last = c.nodes.len() - 1;
    c.nodes[last].agent.kill();
    c.nodes[last].extra.push("--release-on-exit".into());
    c.start_agent(last);
    // The first run's status file may still say healthy: wait for the second run's lease.
    let restarted = wait_for(Duration::from_secs(20), || {
        c.nodes[last].agent_log().matches("node subnet").count() == 2
    });
    assert!(restarted.is_some(), "{}", c.nodes[last].agent_log());
    let subnet6 = c.nodes[last].subnet6().unwrap();
    assert!(c.nodes[0].has_route(&subnet6));
    c.nodes[last].agent.terminate();
    let gone = wait_for(Duration::from_secs(20), || {
        c.nodes[..last].iter().all(|n| !n.has_route(&subnet6))
    });
    assert!(
        gone.is_some(),
        "IPv6 routes of the released node removed:\n{}\n---\n{}",
        c.nodes[last].agent_log(),
        c.nodes[0].agent_log()
    );
}

#[test]
fn host_gw_dual_stack_pods_on_three_nodes_talk_over_ipv6_and_leaving_traffic_is_masqueraded() {
    if skip_unless_root() {
        return;
    }
    let mut c = Cluster::with_config_and_nodes(dual_stack(json!({"Type": "host-gw"})), 3);
    let n0 = &c.nodes[0];
    for other in &c.nodes[1..] {
        let routes = ip_json(
            &n0.ns.name,
            &["-6", "route", "show", &other.subnet6().unwrap()],
        );
        assert_eq!(routes[0]["gateway"], other.ip6().to_string());
        assert_eq!(routes[0]["dev"], "eth0");
    }
    // The lease: flannel's dual-stack key, PublicIPv6, and the node's name.
    let (key, value) = stored_lease(&c, 0);
    let v4 = n0.subnet().unwrap().replace('/', "-");
    let v6 = n0.subnet6().unwrap().replace('/', "-");
    assert_eq!(key, format!("{PREFIX}/subnets/{v4}&{v6}"));
    assert_eq!(value["PublicIP"], n0.ip.to_string());
    assert_eq!(value["PublicIPv6"], n0.ip6().to_string());
    // The subnet file and the conflist.
    let env = std::fs::read_to_string(n0.subnet_file()).unwrap();
    assert!(
        env.contains(&format!("FLANNEL_IPV6_NETWORK={CLUSTER_NET6}\n")),
        "{env}"
    );
    assert!(env.contains("FLANNEL_IPMASQ=true\n"), "{env}");
    let list: Value =
        serde_json::from_slice(&std::fs::read(n0.conf_dir().join("10-rcni.conflist")).unwrap())
            .unwrap();
    // 1.0.0 for runtimes that read only `cniVersion`; the list goes up to rcni's 1.1.0.
    assert_eq!(list["cniVersion"], "1.0.0");
    assert_eq!(
        list["cniVersions"],
        serde_json::json!(["0.4.0", "1.0.0", "1.1.0"])
    );
    assert_eq!(list["plugins"][0]["ipam"]["routes"][1]["dst"], CLUSTER_NET6);
    let pods = every_pair_talks_over_ipv6(&c);
    assert!(ping(&pods[0].ns.name, pods[2].ip), "IPv4 still works");
    // A deleted IPv6 route is put back by the resync.
    let subnet6 = c.nodes[1].subnet6().unwrap();
    sh(&[
        "ip",
        "-n",
        &c.nodes[0].ns.name,
        "-6",
        "route",
        "del",
        &subnet6,
    ]);
    let back = wait_for(Duration::from_secs(20), || c.nodes[0].has_route(&subnet6));
    assert!(
        back.is_some(),
        "IPv6 route restored:\n{}",
        c.nodes[0].agent_log()
    );
    a_released_node_leaves_no_ipv6_route(&mut c);
}

#[test]
fn vxlan_dual_stack_pods_on_three_nodes_talk_over_an_ipv6_tunnel() {
    if skip_unless_root() {
        return;
    }
    let mut c = Cluster::with_config_and_nodes(dual_stack(json!({"Type": "vxlan", "VNI": 1})), 3);
    let n0 = &c.nodes[0];
    let link = ip_json(&n0.ns.name, &["-d", "link", "show", "rcni6.1"]);
    assert_eq!(link[0]["linkinfo"]["info_data"]["id"], 1);
    assert_eq!(link[0]["linkinfo"]["info_data"]["learning"], false);
    assert_eq!(
        link[0]["linkinfo"]["info_data"]["local6"],
        n0.ip6().to_string()
    );
    assert_eq!(link[0]["mtu"], 1430, "underlay MTU minus 70 for IPv6 VXLAN");
    let env = std::fs::read_to_string(n0.subnet_file()).unwrap();
    assert!(
        env.contains("FLANNEL_MTU=1430\n"),
        "pod MTU fits both tunnels: {env}"
    );
    let (_, value) = stored_lease(&c, 0);
    assert!(value["BackendV6Data"]["VtepMAC"].is_string(), "{value}");
    assert_ne!(
        value["BackendV6Data"]["VtepMAC"],
        value["BackendData"]["VtepMAC"]
    );
    for other in &c.nodes[1..] {
        let subnet6 = other.subnet6().unwrap();
        let gw = subnet6.split('/').next().unwrap();
        let routes = ip_json(&n0.ns.name, &["-6", "route", "show", &subnet6]);
        assert_eq!(routes[0]["gateway"], gw);
        assert_eq!(routes[0]["dev"], "rcni6.1");
        assert_eq!(routes[0]["flags"][0], "onlink");
        let fdb = sh(&["bridge", "-n", &n0.ns.name, "fdb", "show", "dev", "rcni6.1"]);
        assert!(fdb.contains(&format!("dst {}", other.ip6())), "{fdb}");
        let neigh = ip_json(&n0.ns.name, &["-6", "neigh", "show", gw, "dev", "rcni6.1"]);
        assert_eq!(neigh[0]["state"][0], "PERMANENT");
    }
    every_pair_talks_over_ipv6(&c);
    // A deleted IPv6 onlink route is put back by the resync.
    let subnet6 = c.nodes[1].subnet6().unwrap();
    sh(&[
        "ip",
        "-n",
        &c.nodes[0].ns.name,
        "-6",
        "route",
        "del",
        &subnet6,
    ]);
    let back = wait_for(Duration::from_secs(20), || c.nodes[0].has_route(&subnet6));
    assert!(
        back.is_some(),
        "IPv6 route restored:\n{}",
        c.nodes[0].agent_log()
    );
    // A released node's IPv6 route, FDB entry and neighbour go away everywhere.
    let last_ip6 = c.nodes[2].ip6().to_string();
    a_released_node_leaves_no_ipv6_route(&mut c);
    let n0 = &c.nodes[0];
    let fdb_gone = wait_for(Duration::from_secs(20), || {
        !sh(&["bridge", "-n", &n0.ns.name, "fdb", "show", "dev", "rcni6.1"])
            .contains(&format!("dst {last_ip6}"))
    });
    assert!(fdb_gone.is_some(), "FDB entry of the released node removed");
}

#[test]
fn an_ipv6_only_network_gives_pods_only_ipv6_and_keys_without_an_ipv4_subnet() {
    if skip_unless_root() {
        return;
    }
    let config = json!({
        "EnableIPv4": false, "EnableIPv6": true, "IPv6Network": CLUSTER_NET6,
        "Backend": {"Type": "host-gw"}
    });
    let c = Cluster::with_config_and_nodes(config, 2);
    let (key, value) = stored_lease(&c, 0);
    assert!(
        key.starts_with(&format!("{PREFIX}/subnets/0.0.0.0-0&2001:2:1:")),
        "{key}"
    );
    assert_eq!(value["PublicIP"], "0.0.0.0");
    let env = std::fs::read_to_string(c.nodes[0].subnet_file()).unwrap();
    assert!(!env.contains("FLANNEL_NETWORK="), "{env}");
    assert!(env.contains("FLANNEL_IPV6_SUBNET="), "{env}");
    let a = c.add_pod(0);
    let b = c.add_pod(1);
    assert!(a.ip.is_unspecified(), "no IPv4 address");
    let answered = wait_for(Duration::from_secs(5), || ping(&a.ns.name, b.ip6.unwrap()));
    assert!(
        answered.is_some(),
        "ping6 across nodes on an IPv6-only network"
    );
}

#[test]
fn with_debians_go_plugins_the_conflist_says_1_0_0_and_pods_talk() {
    if skip_unless_root() {
        return;
    }
    let Some(go) = cni_testkit::go_plugins_dir() else {
        eprintln!("skipped: Go reference plugins not installed");
        return;
    };
    let mut c = Cluster::new(json!({"Type": "host-gw"}));
    c.plugins = go;
    for _ in 0..2 {
        let i = c.add_node();
        c.start_agent(i);
    }
    c.wait_converged(Duration::from_secs(30))
        .expect("converged");
    let list: Value = serde_json::from_slice(
        &std::fs::read(c.nodes[0].conf_dir().join("10-rcni.conflist")).unwrap(),
    )
    .unwrap();
    assert_eq!(list["cniVersion"], "1.0.0");
    assert_eq!(
        list["cniVersions"],
        serde_json::json!(["0.4.0", "1.0.0"]),
        "the Go plugins stop at 1.0.0"
    );
    let a = c.add_pod(0);
    let b = c.add_pod(1);
    assert!(ping(&a.ns.name, b.ip), "Go plugins' pods talk across nodes");
    // The node's name is in /metrics too.
    let metrics = c.nodes[0].health_get("/metrics").unwrap();
    assert!(
        metrics.contains("rcni_node_info{node=\"node1\","),
        "{metrics}"
    );
    let env = std::fs::read_to_string(c.nodes[0].subnet_file()).unwrap();
    assert!(env.contains("RCNI_NODE_NAME=node1\n"), "{env}");
}
