//! The program's flow log on real traffic, on one simulated node (a host namespace with a
//! bridge and three pods, `br_netfilter` on): a reader of the flow log group gets a record of
//! each connection a policy denies, with the prefix naming the denying pod chain; with
//! `FlowLog::All` also one per allowed connection naming the policy chain and its rule; a
//! held address's packets as held; only the first packet of a connection is recorded;
//! `FlowLog::Off` programs no log rule and no named object (read back with `nft -j`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cni_nft::nflog::{LogRecord, NflogGroup, NflogOptions};
use cni_nft::Nft;
use cni_policy::compact::{Interner, PodInfo};
use cni_policy::nft::flow_log::{FlowLog, LogTag, FLOW_LOG_GROUP};
use cni_policy::nft::{pod_chain_name, policy_chain_name, Change, Enforcer, TABLE};
use cni_policy::{Direction, Pod};
use cni_testkit::{run_in, serve_tcp_udp, tcp_connects, Netns, Sandbox, Servers};

mod common;

const PROBE: Duration = Duration::from_millis(300);

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(198, 18, 22, n))
}

struct Node {
    _servers: Vec<Servers>,
    sb: Sandbox,
    pods: Vec<Netns>,
}

impl Node {
    fn host(&self) -> &str {
        &self.sb.host().name
    }

    fn reaches(&self, from: usize, to: usize, port: u16) -> bool {
        let to = SocketAddr::new(ip(10 + to as u8), port);
        tcp_connects(&self.pods[from].name, to, PROBE)
    }

    fn commit(&self, e: &mut Enforcer) {
        let batch = e.batch().unwrap().batch;
        run_in(self.host(), move || Ok(Nft::new()?.commit(&batch)?)).unwrap();
    }

    fn group(&self) -> NflogGroup {
        run_in(self.host(), || {
            Ok(NflogGroup::bind(FLOW_LOG_GROUP, &NflogOptions::default())?)
        })
        .unwrap()
    }

    /// The program's rules as `nft -j` lists them.
    fn listed(&self) -> String {
        let out = self
            .sb
            .exec_host(["nft", "-j", "list", "table", "inet", TABLE])
            .unwrap();
        out.assert_success();
        out.stdout
    }
}

/// Pods 198.18.22.10 to .12 of namespace `x` (`app=p0` ...), serving TCP/80 and TCP/81.
fn node() -> Option<Node> {
    let sb = common::bridged_host()?;
    let mut pods = Vec::new();
    let mut servers = Vec::new();
    for i in 0..3 {
        let netns = common::bridged_pod(&sb, i, ip(10 + i as u8));
        servers.push(serve_tcp_udp(&netns.name, ip(10 + i as u8), &[80, 81]).unwrap());
        pods.push(netns);
    }
    Some(Node {
        _servers: servers,
        sb,
        pods,
    })
}

fn pods(e: &mut Enforcer, interner: &mut Interner, labelled: &[bool]) {
    for (i, labelled) in labelled.iter().enumerate() {
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
        e.apply(Change::Pod {
            id: pod.key().into(),
            pod: Some(Arc::new(info)),
            local: true,
        })
        .unwrap();
    }
}

/// p1 takes TCP/80 from p0 only (`ingress[0]`).
fn policy(e: &mut Enforcer) {
    let spec = "  podSelector: {matchLabels: {app: p1}}\n  ingress:\n  - from: [{podSelector: {matchLabels: {app: p0}}}]\n    ports: [{port: 80}]\n";
    e.apply(Change::Policy {
        key: "x/p1-from-p0".into(),
        policy: Some(Arc::new(common::network_policy("x", "p1-from-p0", spec))),
    })
    .unwrap();
}

/// The records that come within 2 s (until `want` came).
fn records(g: &mut NflogGroup, want: usize) -> Vec<LogRecord> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while out.len() < want && Instant::now() < deadline {
        out.extend(g.receive(Duration::from_millis(100)).unwrap().records);
    }
    // Anything more that comes shortly after.
    out.extend(g.receive(Duration::from_millis(300)).unwrap().records);
    out
}

#[test]
fn a_denied_connection_is_recorded_once_naming_the_pod_chain_that_dropped_it() {
    let Some(node) = node() else { return };
    let mut e =
        Enforcer::with_hold(vec!["198.18.22.0/24".parse().unwrap()]).with_flow_log(FlowLog::Denied);
    let mut interner = Interner::default();
    pods(&mut e, &mut interner, &[true, true, true]);
    policy(&mut e);
    node.commit(&mut e);
    let mut group = node.group();

    assert!(node.reaches(0, 1, 80), "allowed");
    assert!(!node.reaches(2, 1, 80), "denied: p2 is not p0");
    let got = records(&mut group, 1);
    let prefixes: Vec<&str> = got.iter().map(|r| r.prefix.as_str()).collect();
    let denied = LogTag::Denied {
        pod_chain: pod_chain_name("x/p1", Direction::Ingress),
    };
    // The SYN and its retransmissions are each a new connection's first packet (none is
    // confirmed); the allowed connection and everything after its SYN are not recorded.
    assert!(!prefixes.is_empty(), "no record");
    assert!(
        prefixes.iter().all(|p| *p == denied.prefix()),
        "{prefixes:?}"
    );
    let h = got[0].headers().unwrap();
    assert_eq!((h.src, h.dst), (ip(12), ip(11)));
    assert_eq!(h.transport.ports().map(|p| p.1), Some(80));
    assert!(matches!(h.transport, cni_nft::nflog::Transport::Tcp { flags, .. } if flags.is_syn()));
}

#[test]
fn with_all_an_allowed_connection_names_its_policy_rule_and_a_held_address_is_held() {
    let Some(node) = node() else { return };
    let mut e =
        Enforcer::with_hold(vec!["198.18.22.0/24".parse().unwrap()]).with_flow_log(FlowLog::All);
    let mut interner = Interner::default();
    // p2's labels are not known yet: held where a policy of x might select it (ingress).
    pods(&mut e, &mut interner, &[true, true, false]);
    policy(&mut e);
    node.commit(&mut e);
    let mut group = node.group();

    assert!(node.reaches(0, 1, 80));
    let got = records(&mut group, 1);
    let allowed = LogTag::Allowed {
        policy_chain: policy_chain_name("x/p1-from-p0", Direction::Ingress),
        rule: 0,
    };
    assert_eq!(
        got.iter().map(|r| r.prefix.clone()).collect::<Vec<_>>(),
        [allowed.prefix()],
        "one record: the first packet"
    );

    assert!(!node.reaches(0, 2, 80), "held");
    let got = records(&mut group, 1);
    let held = LogTag::Held {
        direction: Direction::Ingress,
    };
    assert!(
        !got.is_empty() && got.iter().all(|r| r.prefix == held.prefix()),
        "{got:?}"
    );
}

#[test]
fn off_programs_no_log_rule_and_no_named_object() {
    let Some(node) = node() else { return };
    let listed = |mode| {
        let mut e =
            Enforcer::with_hold(vec!["198.18.22.0/24".parse().unwrap()]).with_flow_log(mode);
        let mut interner = Interner::default();
        pods(&mut e, &mut interner, &[true, true, true]);
        policy(&mut e);
        node.commit(&mut e);
        node.listed()
    };
    let off = listed(FlowLog::Off);
    assert!(!off.contains("\"log\""), "{off}");
    assert!(
        !off.contains("\"limit\"") && !off.contains("\"counter\""),
        "{off}"
    );
    let denied = listed(FlowLog::Denied);
    assert!(
        denied.contains(&format!("\"group\": {FLOW_LOG_GROUP}")),
        "{denied}"
    );
    assert!(denied.contains("flowlog-denied"), "{denied}");
    assert!(!denied.contains("rcni:allow"), "{denied}");
    let all = listed(FlowLog::All);
    assert!(all.contains("rcni:allow:pol-i-"), "{all}");
    assert!(all.contains("flowlog-allowed-seen"), "{all}");
}
