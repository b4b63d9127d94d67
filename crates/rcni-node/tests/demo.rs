//! The multi-node demo (`scripts/node-demo`): three simulated nodes with `rcni-node` on a VXLAN
//! (or host-gw) network, a pod on each, and an HTTP request from a pod on node 1 to a pod on
//! node 3, narrated on stdout; with `RCNI_DEMO_DUAL_STACK=1` (`scripts/node-demo --dual-stack`)
//! the network is dual-stack and the request goes over IPv6 too. Ignored in the default suite
//! (the cluster and dual-stack tests prove the same).

mod harness;

use std::time::Duration;

use cni_testkit::{http_get, http_server};
use harness::*;
use serde_json::json;

#[test]
#[ignore = "demo: scripts/node-demo"]
fn demo_three_nodes_and_a_cross_node_http_request() {
    if skip_unless_root() {
        return;
    }
    let backend = std::env::var("RCNI_DEMO_BACKEND").unwrap_or_else(|_| "vxlan".into());
    let dual = std::env::var("RCNI_DEMO_DUAL_STACK").is_ok_and(|v| !v.is_empty());
    let mut config = json!({"Network": CLUSTER_NET, "SubnetLen": 24, "Backend": {"Type": backend}});
    if dual {
        config["EnableIPv6"] = true.into();
        config["IPv6Network"] = CLUSTER_NET6.into();
    }
    println!("== etcd in the underlay namespace, network config: {config}");
    let mut c = Cluster::with_config(config);
    for _ in 0..3 {
        let i = c.add_node();
        c.start_agent(i);
        let n = &c.nodes[i];
        println!(
            "== node{} ({}): rcni-node holds subnet {}",
            n.index,
            n.ip,
            n.subnets().join(" and ")
        );
    }
    let took = c.wait_converged(Duration::from_secs(30)).unwrap();
    println!("== every node has a path to every other node ({took:?})");
    println!(
        "{}",
        c.etcdctl(&["get", "--prefix", &format!("{PREFIX}/subnets/")])
    );
    println!("== routes of node1 (proto 124 = rcni-node):");
    println!(
        "{}",
        sh(&[
            "ip",
            "-n",
            &c.nodes[0].ns.name,
            "route",
            "show",
            "proto",
            "124"
        ])
    );
    let a = c.add_pod(0);
    let b = c.add_pod(2);
    println!("== pod A on node1: {}   pod B on node3: {}", a.ip, b.ip);
    let server = http_server(&b.ns.name, b.ip, 8080).unwrap();
    let body = http_get(&a.ns.name, &server.url()).unwrap();
    println!("== pod A -> GET {} -> {body:?}", server.url());
    assert_eq!(body, cni_testkit::HTTP_BODY);
    if let (true, Some(b6)) = (dual, b.ip6) {
        println!("== routes of node1 over IPv6:");
        println!(
            "{}",
            sh(&[
                "ip",
                "-n",
                &c.nodes[0].ns.name,
                "-6",
                "route",
                "show",
                "proto",
                "124"
            ])
        );
        let server6 = http_server(&b.ns.name, b6, 8080).unwrap();
        // The pods' IPv6 addresses may still be finishing duplicate address detection.
        let got = wait_for(Duration::from_secs(5), || {
            http_get(&a.ns.name, &server6.url()).is_ok()
        });
        assert!(got.is_some(), "GET {} over IPv6", server6.url());
        println!(
            "== pod A -> GET {} -> {:?}",
            server6.url(),
            cni_testkit::HTTP_BODY
        );
    }
    println!("== done; everything is removed now");
}
