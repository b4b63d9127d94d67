//! The multi-node demo (`scripts/node-demo`): three simulated nodes with `rcni-node` on a VXLAN
//! (or host-gw) network, a pod on each, and an HTTP request from a pod on node 1 to a pod on
//! node 3, narrated on stdout. Ignored in the default suite (the cluster tests prove the same).

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
    println!("== etcd in the underlay namespace, network config: {CLUSTER_NET}, backend {backend}");
    let mut c = Cluster::new(json!({"Type": backend}));
    for _ in 0..3 {
        let i = c.add_node();
        c.start_agent(i);
        let n = &c.nodes[i];
        println!(
            "== node{} ({}): rcni-node holds subnet {}",
            n.index,
            n.ip,
            n.subnet().unwrap()
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
    println!("== done; everything is removed now");
}
