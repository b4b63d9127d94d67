//! Root-only: simulated nodes each running a real containerd, rcni-node and CNI plugins; pods
//! are made through CRI calls like kubelet's. See `harness/containerd.rs` and
//! `harness/kubelet.rs`.

mod harness;

use std::time::{Duration, Instant};

use cni_testkit::ping;
use harness::containerd::missing_tools;
use harness::cri::PodSpec;
use harness::*;
use serde_json::json;

fn skip() -> bool {
    if skip_unless_root() {
        return true;
    }
    if let Some(why) = missing_tools() {
        eprintln!("skipping: containerd tests need containerd, ctr, crun and gcc ({why})");
        return true;
    }
    false
}

#[test]
fn go_plugins_through_containerd_two_nodes_ping() {
    if skip() {
        return;
    }
    let Some(go) = cni_testkit::go_plugins_dir() else {
        eprintln!("skipping: Go reference plugins not installed");
        return;
    };
    let mut c = Cluster::new(json!({"Type": "host-gw"}));
    c.plugins = go;
    for _ in 0..2 {
        let i = c.add_node();
        c.start_containerd(i);
        let (ready, _) = c.cri(i).network_ready().unwrap();
        assert!(!ready, "NetworkReady before the agent wrote its conflist");
        c.start_agent(i);
    }
    c.wait_converged(Duration::from_secs(30)).unwrap();
    let started = Instant::now();
    let a = c.run_pod(0, &PodSpec::named("a"));
    eprintln!("RunPodSandbox: {:?}", started.elapsed());
    let b = c.run_pod(1, &PodSpec::named("b"));
    assert!(ping(&a.ns.name, b.ip));
    c.remove_pod(a);
    c.remove_pod(b);
}
