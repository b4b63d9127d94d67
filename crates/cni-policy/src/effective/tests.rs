//! The upstream conformance model evaluated without a kernel: namespaces x, y, z (labelled
//! `ns=<name>`), pods a, b, c in each (labelled `pod=<name>`), every pod probing every pod.
//! Matrices are written row = source, column = destination in the order xa xb xc ya … zc;
//! `.` allowed, `X` denied.

use std::net::{IpAddr, Ipv4Addr};

use super::*;
use crate::objects::{parse_documents, Document};

fn model() -> Cluster {
    let mut c = Cluster::default();
    for (n, ns) in ["x", "y", "z"].iter().enumerate() {
        c.namespaces
            .insert(ns.to_string(), [("ns".to_string(), ns.to_string())].into());
        for (m, pod) in ["a", "b", "c"].iter().enumerate() {
            let ip = IpAddr::V4(Ipv4Addr::new(198, 18, n as u8, m as u8 + 10));
            c.pods.push(Pod {
                namespace: ns.to_string(),
                name: pod.to_string(),
                labels: [("pod".to_string(), pod.to_string())].into(),
                ips: vec![ip],
                named_ports: [("serve-80-tcp".to_string(), (Protocol::Tcp, 80))].into(),
            });
        }
    }
    c
}

fn with(yaml: &str) -> Cluster {
    let mut c = model();
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

fn matrix(c: &Cluster, protocol: Protocol, port: u16) -> Vec<String> {
    c.pods
        .iter()
        .map(|src| {
            c.pods
                .iter()
                .map(|dst| {
                    let ok = allows(c, Endpoint::Pod(src), Endpoint::Pod(dst), protocol, port);
                    if ok.unwrap() {
                        '.'
                    } else {
                        'X'
                    }
                })
                .collect()
        })
        .collect()
}

/// `want` with every pod allowed to reach itself (loopback is never filtered).
fn with_loopback(want: &[&str]) -> Vec<String> {
    want.iter()
        .enumerate()
        .map(|(i, row)| {
            row.chars()
                .enumerate()
                .map(|(j, c)| if i == j { '.' } else { c })
                .collect()
        })
        .collect()
}

#[track_caller]
fn expect(c: &Cluster, protocol: Protocol, port: u16, want: &[&str]) {
    let got = matrix(c, protocol, port);
    let want = with_loopback(want);
    assert_eq!(got, want, "\n got: {got:#?}\nwant: {want:#?}");
}

const OPEN: [&str; 9] = [
    ".........",
    ".........",
    ".........",
    ".........",
    ".........",
    ".........",
    ".........",
    ".........",
    ".........",
];

fn policy(ns: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{spec}---\n"
    )
}

#[test]
fn without_policies_everything_is_open() {
    expect(&model(), Protocol::Tcp, 80, &OPEN);
}

#[test]
fn default_deny_ingress_isolates_every_pod_of_the_namespace() {
    let c = with(&policy(
        "x",
        "deny",
        "  podSelector: {}\n  policyTypes: [Ingress]\n",
    ));
    let want = [
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
    ];
    expect(&c, Protocol::Tcp, 80, &want);
    expect(&c, Protocol::Udp, 81, &want);
}

#[test]
fn default_deny_egress_and_both() {
    let c = with(&policy(
        "x",
        "deny",
        "  podSelector: {}\n  policyTypes: [Egress]\n",
    ));
    let want = [
        "XXXXXXXXX",
        "XXXXXXXXX",
        "XXXXXXXXX",
        ".........",
        ".........",
        ".........",
        ".........",
        ".........",
        ".........",
    ];
    expect(&c, Protocol::Tcp, 80, &want);
    let c = with(&policy(
        "x",
        "deny",
        "  podSelector: {}\n  policyTypes: [Ingress, Egress]\n",
    ));
    let want = [
        "XXXXXXXXX",
        "XXXXXXXXX",
        "XXXXXXXXX",
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
    ];
    expect(&c, Protocol::Tcp, 80, &want);
}

#[test]
fn allow_from_the_same_namespace() {
    let c = with(&policy(
        "x",
        "same-ns",
        "  podSelector: {}\n  ingress:\n  - from: [{podSelector: {}}]\n",
    ));
    let want = [
        ".........",
        ".........",
        ".........",
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
    ];
    expect(&c, Protocol::Tcp, 80, &want);
}

#[test]
fn namespace_selector_and_pod_selector_in_one_peer_is_and_in_two_peers_is_or() {
    let and = with(&policy(
        "x",
        "and",
        "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {ns: y}}\n      podSelector: {matchLabels: {pod: b}}\n",
    ));
    // Only y/b reaches x/a; x/b and x/c stay open.
    let want = [
        "X........",
        "X........",
        "X........",
        "X........",
        ".........",
        "X........",
        "X........",
        "X........",
        "X........",
    ];
    expect(&and, Protocol::Tcp, 80, &want);
    let or = with(&policy(
        "x",
        "or",
        "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {ns: y}}\n    - podSelector: {matchLabels: {pod: b}}\n",
    ));
    // Every pod of y, and x/b (a podSelector alone means the policy's namespace).
    let want = [
        "X........",
        ".........",
        "X........",
        ".........",
        ".........",
        ".........",
        "X........",
        "X........",
        "X........",
    ];
    expect(&or, Protocol::Tcp, 80, &want);
}

#[test]
fn match_expressions_on_namespaces() {
    let c = with(&policy(
        "x",
        "expr",
        "  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector:\n        matchExpressions: [{key: ns, operator: NotIn, values: [y]}]\n",
    ));
    let want = [
        ".........",
        ".........",
        ".........",
        "XXX......",
        "XXX......",
        "XXX......",
        ".........",
        ".........",
        ".........",
    ];
    expect(&c, Protocol::Tcp, 80, &want);
}

#[test]
fn ip_block_with_except() {
    // y's pods are 198.18.1.10-12: allow 198.18.1.0/24 except y/b's /32.
    let c = with(&policy(
        "x",
        "block",
        "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from: [{ipBlock: {cidr: 198.18.1.0/24, except: [198.18.1.11/32]}}]\n",
    ));
    let want = [
        "X........",
        "X........",
        "X........",
        ".........",
        "X........",
        ".........",
        "X........",
        "X........",
        "X........",
    ];
    expect(&c, Protocol::Tcp, 80, &want);
}

#[test]
fn ports_end_ports_and_named_ports() {
    let c = with(&policy(
        "x",
        "ports",
        "  podSelector: {}\n  ingress:\n  - ports: [{port: 81, endPort: 90, protocol: UDP}, {port: serve-80-tcp}]\n",
    ));
    let closed = [
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
        "XXX......",
    ];
    expect(&c, Protocol::Tcp, 80, &OPEN); // the named port
    expect(&c, Protocol::Tcp, 81, &closed);
    expect(&c, Protocol::Udp, 85, &OPEN);
    expect(&c, Protocol::Udp, 80, &closed);
    expect(&c, Protocol::Udp, 91, &closed);
}

#[test]
fn egress_allowed_only_to_a_port_and_two_policies_union() {
    let only_80 = policy(
        "x",
        "egress-80",
        "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - ports: [{port: 80}]\n",
    );
    let c = with(&only_80);
    expect(&c, Protocol::Tcp, 80, &OPEN);
    let want81 = [
        "XXXXXXXXX",
        ".........",
        ".........",
        ".........",
        ".........",
        ".........",
        ".........",
        ".........",
        ".........",
    ];
    expect(&c, Protocol::Tcp, 81, &want81);
    // A second policy selecting x/a adds egress to z on any port: the union.
    let c = with(&(only_80
        + &policy(
            "x",
            "egress-z",
            "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - to: [{namespaceSelector: {matchLabels: {ns: z}}}]\n",
        )));
    let want81 = [
        "XXXXXX...",
        ".........",
        ".........",
        ".........",
        ".........",
        ".........",
        ".........",
        ".........",
        ".........",
    ];
    expect(&c, Protocol::Tcp, 81, &want81);
}

#[test]
fn relabelled_namespace_and_pod_change_the_answer() {
    let text = policy(
        "x",
        "from-team",
        "  podSelector: {}\n  ingress:\n  - from: [{namespaceSelector: {matchLabels: {team: blue}}}]\n",
    );
    let mut c = with(&text);
    assert!(!allows(
        &c,
        Endpoint::Pod(&c.pods[3]),
        Endpoint::Pod(&c.pods[0]),
        Protocol::Tcp,
        80
    )
    .unwrap());
    c.namespaces
        .get_mut("y")
        .unwrap()
        .insert("team".into(), "blue".into());
    assert!(allows(
        &c,
        Endpoint::Pod(&c.pods[3]),
        Endpoint::Pod(&c.pods[0]),
        Protocol::Tcp,
        80
    )
    .unwrap());
    // A namespace without an object still has its name label.
    let by_name = with(&policy(
        "x",
        "from-w",
        "  podSelector: {}\n  ingress:\n  - from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: w}}}]\n",
    ));
    let mut c = by_name;
    c.pods.push(Pod {
        namespace: "w".into(),
        name: "d".into(),
        ips: vec!["198.18.3.10".parse().unwrap()],
        ..Pod::default()
    });
    let w = c.pods.last().unwrap().clone();
    assert!(allows(
        &c,
        Endpoint::Pod(&w),
        Endpoint::Pod(&c.pods[0]),
        Protocol::Tcp,
        80
    )
    .unwrap());
    assert!(!allows(
        &c,
        Endpoint::Pod(&c.pods[3]),
        Endpoint::Pod(&c.pods[0]),
        Protocol::Tcp,
        80
    )
    .unwrap());
}

#[test]
fn external_sources_and_destinations() {
    let c = with(&policy(
        "x",
        "world",
        "  podSelector: {}\n  policyTypes: [Ingress, Egress]\n  ingress:\n  - from: [{ipBlock: {cidr: 198.19.0.0/16}}]\n  egress:\n  - to: [{ipBlock: {cidr: 198.19.1.0/24}}]\n",
    ));
    let x_a = Endpoint::Pod(&c.pods[0]);
    let outside = |s: &str| Endpoint::External(s.parse().unwrap());
    assert!(allows(&c, outside("198.19.9.9"), x_a, Protocol::Tcp, 80).unwrap());
    assert!(!allows(&c, outside("198.18.9.9"), x_a, Protocol::Tcp, 80).unwrap());
    assert!(allows(&c, x_a, outside("198.19.1.1"), Protocol::Udp, 53).unwrap());
    assert!(!allows(&c, x_a, outside("198.19.2.1"), Protocol::Udp, 53).unwrap());
}

#[test]
fn policy_types_default_as_the_api_server_does() {
    let docs = |s: &str| match parse_documents(&policy("x", "p", s)).unwrap().remove(0) {
        Document::NetworkPolicy(p) => *p,
        _ => unreachable!(),
    };
    assert_eq!(
        policy_types(&docs("  podSelector: {}\n")),
        [Direction::Ingress]
    );
    assert_eq!(
        policy_types(&docs("  podSelector: {}\n  egress: [{}]\n")),
        [Direction::Ingress, Direction::Egress]
    );
    assert_eq!(
        policy_types(&docs("  podSelector: {}\n  egress: []\n")),
        [Direction::Ingress]
    );
    assert_eq!(
        policy_types(&docs("  podSelector: {}\n  policyTypes: [Egress]\n")),
        [Direction::Egress]
    );
}

#[test]
fn explanation_lists_policies_and_rules() {
    let c = with(&(policy(
        "x",
        "web",
        "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from: [{podSelector: {matchLabels: {pod: b}}}, {ipBlock: {cidr: 198.19.0.0/16, except: [198.19.1.0/24]}}]\n    ports: [{port: 80}, {port: 81, endPort: 82, protocol: UDP}]\n",
    ) + &policy("x", "none", "  podSelector: {}\n  policyTypes: [Egress]\n")
        + &policy(
            "x",
            "out",
            "  podSelector: {matchLabels: {pod: b}}\n  egress:\n  - to: [{namespaceSelector: {matchLabels: {ns: y}}, podSelector: {matchExpressions: [{key: pod, operator: In, values: [c, a]}]}}, {namespaceSelector: {}}, {podSelector: {}}]\n  - to: [{namespaceSelector: {matchLabels: {ns: z}}}]\n  - ports: [{port: 53, protocol: UDP}]\n",
        )));
    let xa = &c.pods[0];
    let text = effective(&c, xa, Direction::Ingress).unwrap().to_string();
    assert_eq!(
        text,
        "Ingress: isolated by x/web\n  x/web[0]: from pods: pod=b in namespace x (1 address) or ipBlock 198.19.0.0/16 except 198.19.1.0/24; on TCP/80, UDP/81-82\n"
    );
    let text = effective(&c, xa, Direction::Egress).unwrap().to_string();
    assert_eq!(text, "Egress: isolated by x/none\n  nothing allowed\n");
    let text = effective(&c, &c.pods[1], Direction::Egress)
        .unwrap()
        .to_string();
    assert_eq!(
        text,
        "Egress: isolated by x/none, x/out\n  \
         x/out[0]: to pods: pod in (a,c) in namespaces: ns=y (2 addresses) or any pod in any namespace (9 addresses) or any pod in namespace x (3 addresses); on any port\n  \
         x/out[1]: to any pod in namespaces: ns=z (3 addresses); on any port\n  \
         x/out[2]: to anywhere; on UDP/53\n"
    );
    let text = effective(&c, &c.pods[3], Direction::Ingress)
        .unwrap()
        .to_string();
    assert_eq!(
        text,
        "Ingress: not isolated (no policy selects the pod): all allowed\n"
    );
}
