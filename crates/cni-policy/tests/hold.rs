//! The hold on real traffic, on one simulated node (a throwaway host namespace with a bridge
//! holding the node's address, and pods on it): an address of the node's pod subnet that the
//! program does not know is dropped both ways, while the node itself still reaches it (its
//! traffic takes the `output` hook, the replies the `input` hook); the batch that gives the
//! pod its dispatch element releases it. A pod whose labels are not known yet is held only
//! in the directions a policy of its namespace might isolate.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use cni_nft::Nft;
use cni_policy::compact::{Interner, PodInfo};
use cni_policy::nft::{Change, Enforcer};
use cni_policy::{Pod, Protocol};
use cni_testkit::{run_in, serve_tcp_udp, tcp_connects, Netns, Sandbox, Servers};

mod common;

const PROBE: Duration = Duration::from_millis(300);

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(198, 18, 21, n))
}

/// Fields drop in order: the servers stop before the sandbox removes the namespaces.
struct Node {
    _servers: Vec<Servers>,
    sb: Sandbox,
    pods: Vec<Netns>,
}

impl Node {
    fn host(&self) -> &str {
        &self.sb.host().name
    }

    /// Whether a TCP connection from pod `from` (or the host, `None`) to pod `to` opens.
    fn reaches(&self, from: Option<usize>, to: usize) -> bool {
        let ns = from.map_or(self.host(), |i| self.pods[i].name.as_str());
        tcp_connects(ns, SocketAddr::new(ip(10 + to as u8), 80), PROBE)
    }

    fn commit(&self, e: &mut Enforcer) {
        let delta = e.batch().unwrap();
        let batch = delta.batch;
        run_in(self.host(), move || Ok(Nft::new()?.commit(&batch)?)).unwrap();
    }
}

/// Three pods (198.18.21.10 to .12, serving TCP/80) on the bridge of a host whose own address
/// is 198.18.21.1.
fn node() -> Option<Node> {
    let sb = common::bridged_host()?;
    sb.exec_host(["ip", "addr", "add", "198.18.21.1/24", "dev", "br0"])
        .unwrap()
        .assert_success();
    let mut pods = Vec::new();
    let mut servers = Vec::new();
    for i in 0..3 {
        let netns = common::bridged_pod(&sb, i, ip(10 + i as u8));
        servers.push(serve_tcp_udp(&netns.name, ip(10 + i as u8), &[80]).unwrap());
        pods.push(netns);
    }
    Some(Node {
        _servers: servers,
        sb,
        pods,
    })
}

fn pod_change(interner: &mut Interner, i: usize, labelled: bool) -> Change {
    let pod = Pod {
        namespace: "x".into(),
        name: format!("p{i}"),
        labels: [("app".to_string(), format!("p{i}"))].into(),
        ips: vec![ip(10 + i as u8)],
        named_ports: Default::default(),
    };
    let mut info = PodInfo::of(&pod, interner);
    if !labelled {
        info.labels = None;
    }
    Change::Pod {
        id: pod.key().into(),
        pod: Some(Arc::new(info)),
        local: true,
    }
}

#[test]
fn an_address_the_program_does_not_know_is_held_both_ways_but_its_node_reaches_it() {
    let Some(node) = node() else { return };
    let mut interner = Interner::default();
    let mut e = Enforcer::with_hold(vec!["198.18.21.0/24".parse().unwrap()]);
    for i in [0, 1] {
        e.apply(pod_change(&mut interner, i, true)).unwrap();
    }
    node.commit(&mut e);
    assert!(node.reaches(Some(0), 1), "known pods talk");
    assert!(!node.reaches(Some(0), 2), "nothing gets into the held pod");
    assert!(
        !node.reaches(Some(2), 0),
        "nothing gets out of the held pod"
    );
    assert!(node.reaches(None, 2), "the node reaches the held pod");
    assert!(node.reaches(None, 0), "and the others");

    // Programmed: released.
    e.apply(pod_change(&mut interner, 2, true)).unwrap();
    node.commit(&mut e);
    assert!(node.reaches(Some(0), 2) && node.reaches(Some(2), 0));

    // Its labels unknown, in a namespace whose only policy isolates ingress: it sends, and
    // receives nothing.
    let policy = common::network_policy("x", "in", "  podSelector: {matchLabels: {app: web}}\n");
    e.apply(Change::Policy {
        key: "x/in".into(),
        policy: Some(Arc::new(policy)),
    })
    .unwrap();
    e.apply(pod_change(&mut interner, 2, false)).unwrap();
    node.commit(&mut e);
    assert!(node.reaches(Some(2), 0), "egress: no policy can isolate it");
    assert!(!node.reaches(Some(0), 2), "ingress: held");
    assert!(node.reaches(None, 2), "the node reaches it");
    assert!(!e.admits(ip(10), ip(12), Protocol::Tcp, 80));
}
