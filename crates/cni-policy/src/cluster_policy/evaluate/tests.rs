//! The evaluation order and what each decision reports, on a small cluster: namespaces x and
//! y (labelled `ns=<name>`), pods x/a, x/b, y/a (labelled `pod=<name>`), node n1.

use std::net::{IpAddr, Ipv4Addr};

use super::*;
use crate::objects::{parse_documents, Document};

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(198, 18, 0, last))
}

fn cluster(yaml: &str) -> (Cluster, Vec<ClusterNetworkPolicy>) {
    let mut c = Cluster::default();
    for ns in ["x", "y"] {
        c.namespaces
            .insert(ns.into(), [("ns".to_string(), ns.to_string())].into());
    }
    for (i, (ns, name)) in [("x", "a"), ("x", "b"), ("y", "a")].iter().enumerate() {
        c.pods.push(Pod {
            namespace: ns.to_string(),
            name: name.to_string(),
            labels: [("pod".to_string(), name.to_string())].into(),
            ips: vec![ip(10 + i as u8)],
            named_ports: [("web".to_string(), (Protocol::Tcp, 80))].into(),
        });
    }
    let mut cnps = Vec::new();
    for doc in parse_documents(yaml).unwrap() {
        match doc {
            Document::NetworkPolicy(p) => c.policies.push(*p),
            Document::ClusterNetworkPolicy(p) => cnps.push(*p),
            other => panic!("{other:?}"),
        }
    }
    (c, cnps)
}

fn nodes() -> Vec<Node> {
    vec![Node {
        name: "n1".into(),
        labels: [("role".to_string(), "worker".to_string())].into(),
        addresses: vec!["198.19.0.1".parse().unwrap()],
    }]
}

fn cnp(name: &str, tier: &str, priority: u16, rest: &str) -> String {
    format!(
        "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {{name: {name}}}\nspec:\n  tier: {tier}\n  priority: {priority}\n{rest}---\n"
    )
}

fn np(ns: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{spec}---\n"
    )
}

const SUBJECT_X: &str = "  subject: {namespaces: {matchLabels: {ns: x}}}\n";

/// The verdict of `src` → `dst` (pod keys) on TCP `port`.
fn verdict(c: &Cluster, cnps: &[ClusterNetworkPolicy], src: &str, dst: &str, port: u16) -> Verdict {
    let nodes = nodes();
    let e = Evaluator::new(c, cnps, &nodes).unwrap();
    let pod = |k: &str| {
        let (ns, n) = k.split_once('/').unwrap();
        Endpoint::Pod(c.pod(ns, n).unwrap())
    };
    e.connection(pod(src), pod(dst), Protocol::Tcp, port)
        .unwrap()
}

fn rule_of(d: &Option<Decision>) -> (String, usize) {
    match &d.as_ref().unwrap().by {
        DecidedBy::Rule(r) => (r.policy.clone(), r.index),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_admin_deny_wins_over_a_networkpolicy_allow() {
    let (c, cnps) = cluster(&format!(
        "{}{}",
        cnp(
            "deny-y",
            "Admin",
            10,
            &format!("{SUBJECT_X}  ingress: [{{action: Deny, from: [{{namespaces: {{matchLabels: {{ns: y}}}}}}]}}]\n")
        ),
        np("x", "allow-all", "  podSelector: {}\n  ingress: [{}]\n"),
    ));
    let v = verdict(&c, &cnps, "y/a", "x/a", 80);
    assert!(!v.allowed);
    assert_eq!(v.ingress.as_ref().unwrap().tier_name(), "Admin");
    assert_eq!(rule_of(&v.ingress), ("deny-y".into(), 0));
    // The source's egress is not isolated by anything: decided by default.
    assert_eq!(v.egress.as_ref().unwrap().by, DecidedBy::Default);
    // From its own namespace the NetworkPolicy decides.
    let v = verdict(&c, &cnps, "x/b", "x/a", 80);
    assert!(v.allowed);
    assert_eq!(
        v.ingress.unwrap().by,
        DecidedBy::NetworkPolicy {
            policies: vec!["x/allow-all".into()],
            rule: Some(("x/allow-all".into(), 0))
        }
    );
}

#[test]
fn a_pass_hands_to_the_networkpolicy_and_where_it_isolates_the_baseline_is_not_reached() {
    let policies = format!(
        "{}{}{}",
        cnp(
            "pass-y",
            "Admin",
            10,
            &format!("{SUBJECT_X}  ingress: [{{name: delegate, action: Pass, from: [{{namespaces: {{matchLabels: {{ns: y}}}}}}]}}, {{action: Deny, from: [{{namespaces: {{}}}}]}}]\n")
        ),
        cnp(
            "accept-all",
            "Baseline",
            0,
            &format!("{SUBJECT_X}  ingress: [{{action: Accept, from: [{{namespaces: {{}}}}]}}]\n")
        ),
        np("x", "only-b", "  podSelector: {matchLabels: {pod: a}}\n  ingress: [{from: [{podSelector: {matchLabels: {pod: b}}}]}]\n"),
    );
    let (c, cnps) = cluster(&policies);
    // y/a → x/a: passed to the NetworkPolicy, which isolates x/a and does not admit y/a.
    let v = verdict(&c, &cnps, "y/a", "x/a", 80);
    assert!(!v.allowed);
    let d = v.ingress.unwrap();
    assert_eq!(d.tier_name(), "NetworkPolicy");
    assert_eq!(d.passed.len(), 1);
    assert_eq!(d.passed[0].name.as_deref(), Some("delegate"));
    assert_eq!(d.passed[0].action, Action::Pass);
    // y/a → x/b: passed; no NetworkPolicy selects x/b, so the Baseline tier accepts.
    let v = verdict(&c, &cnps, "y/a", "x/b", 80);
    assert!(v.allowed);
    assert_eq!(rule_of(&v.ingress), ("accept-all".into(), 0));
    // x/b → x/a: the Admin rule after the Pass denies.
    let v = verdict(&c, &cnps, "x/b", "x/a", 80);
    assert!(!v.allowed);
    assert_eq!(rule_of(&v.ingress), ("pass-y".into(), 1));
}

#[test]
fn a_baseline_deny_is_refined_by_a_networkpolicy_allow() {
    let (c, cnps) = cluster(&format!(
        "{}{}",
        cnp(
            "default-deny",
            "Baseline",
            100,
            "  subject: {namespaces: {}}\n  ingress: [{action: Deny, from: [{namespaces: {}}]}]\n"
        ),
        np("x", "web", "  podSelector: {matchLabels: {pod: a}}\n  ingress: [{from: [{namespaceSelector: {matchLabels: {ns: y}}}]}]\n"),
    ));
    assert!(verdict(&c, &cnps, "y/a", "x/a", 80).allowed);
    assert!(
        !verdict(&c, &cnps, "x/b", "x/a", 80).allowed,
        "isolated by the NetworkPolicy"
    );
    let v = verdict(&c, &cnps, "x/a", "x/b", 80);
    assert!(!v.allowed);
    assert_eq!(v.ingress.unwrap().tier_name(), "Baseline");
}

#[test]
fn lower_priority_first_then_the_name_for_equal_priorities() {
    let deny = format!("{SUBJECT_X}  ingress: [{{action: Deny, from: [{{namespaces: {{}}}}]}}]\n");
    let accept =
        format!("{SUBJECT_X}  ingress: [{{action: Accept, from: [{{namespaces: {{}}}}]}}]\n");
    let (c, cnps) = cluster(&format!(
        "{}{}",
        cnp("z-accept", "Admin", 5, &accept),
        cnp("a-deny", "Admin", 6, &deny)
    ));
    assert!(verdict(&c, &cnps, "y/a", "x/a", 80).allowed);
    let (c, cnps) = cluster(&format!(
        "{}{}",
        cnp("z-accept", "Admin", 6, &accept),
        cnp("a-deny", "Admin", 6, &deny)
    ));
    let v = verdict(&c, &cnps, "y/a", "x/a", 80);
    assert!(!v.allowed);
    assert_eq!(rule_of(&v.ingress), ("a-deny".into(), 0));
    // Every Admin policy comes before every Baseline one, whatever the numbers.
    let (c, cnps) = cluster(&format!(
        "{}{}",
        cnp("base", "Baseline", 0, &deny),
        cnp("admin", "Admin", 1000, &accept)
    ));
    assert!(verdict(&c, &cnps, "y/a", "x/a", 80).allowed);
    let nodes = nodes();
    let e = Evaluator::new(&c, &cnps, &nodes).unwrap();
    let order: Vec<&str> = e.policies().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(order, ["admin", "base"]);
}

#[test]
fn an_egress_accept_still_needs_the_destinations_ingress() {
    let (c, cnps) = cluster(&format!(
        "{}{}",
        cnp(
            "out",
            "Admin",
            1,
            "  subject: {namespaces: {matchLabels: {ns: y}}}\n  egress: [{action: Accept, to: [{namespaces: {}}]}]\n"
        ),
        cnp(
            "in",
            "Admin",
            2,
            &format!("{SUBJECT_X}  ingress: [{{action: Deny, from: [{{namespaces: {{matchLabels: {{ns: y}}}}}}]}}]\n")
        ),
    ));
    let v = verdict(&c, &cnps, "y/a", "x/a", 80);
    assert!(!v.allowed);
    assert!(v.egress.as_ref().unwrap().allowed);
    assert!(!v.ingress.as_ref().unwrap().allowed);
}

#[test]
fn a_baseline_pass_leaves_the_default_and_a_pod_to_itself_is_never_filtered() {
    let (c, cnps) = cluster(&cnp(
        "b",
        "Baseline",
        1,
        &format!("{SUBJECT_X}  ingress: [{{action: Pass, from: [{{namespaces: {{}}}}]}}, {{action: Deny, from: [{{namespaces: {{}}}}]}}]\n"),
    ));
    let v = verdict(&c, &cnps, "y/a", "x/a", 80);
    assert!(v.allowed);
    let d = v.ingress.unwrap();
    assert_eq!(d.by, DecidedBy::Default);
    assert_eq!(d.passed[0].tier, Tier::Baseline);
    let (c, cnps) = cluster(&cnp(
        "deny",
        "Admin",
        1,
        &format!("{SUBJECT_X}  ingress: [{{action: Deny, from: [{{namespaces: {{}}}}]}}]\n  egress: [{{action: Deny, to: [{{networks: [0.0.0.0/0]}}]}}]\n"),
    ));
    let v = verdict(&c, &cnps, "x/a", "x/a", 80);
    assert!(v.allowed && v.loopback);
    assert!(!verdict(&c, &cnps, "x/b", "x/a", 80).allowed);
}

#[test]
fn networks_match_pod_addresses_and_outside_ones_and_nodes_match_node_addresses() {
    let (c, cnps) = cluster(&cnp(
        "egress",
        "Admin",
        1,
        &format!("{SUBJECT_X}  egress:\n  - {{action: Accept, to: [{{nodes: {{matchLabels: {{role: worker}}}}}}], protocols: [{{tcp: {{destinationPort: {{range: {{start: 10250, end: 10255}}}}}}}}]}}\n  - {{action: Deny, to: [{{nodes: {{}}}}]}}\n  - {{action: Deny, to: [{{networks: [198.18.0.12/32, 203.0.113.0/24]}}]}}\n"),
    ));
    let nodes = nodes();
    let e = Evaluator::new(&c, &cnps, &nodes).unwrap();
    let xa = Endpoint::Pod(c.pod("x", "a").unwrap());
    let ext = |s: &str| Endpoint::External(s.parse().unwrap());
    let allows = |dst, port| e.allows(xa, dst, Protocol::Tcp, port).unwrap();
    assert!(allows(ext("198.19.0.1"), 10250));
    assert!(!allows(ext("198.19.0.1"), 22));
    assert!(allows(ext("198.19.0.2"), 22), "not a node");
    assert!(!allows(ext("203.0.113.7"), 443));
    assert!(
        !allows(Endpoint::Pod(c.pod("y", "a").unwrap()), 80),
        "y/a is 198.18.0.12"
    );
    // An address of a pod is that pod.
    assert!(!allows(ext("198.18.0.12"), 80));
    assert!(allows(Endpoint::Pod(c.pod("x", "b").unwrap()), 80));
    // Traffic from outside is only ever matched by ingress rules naming pods.
    let v = e
        .connection(ext("203.0.113.7"), xa, Protocol::Tcp, 80)
        .unwrap();
    assert!(v.allowed && v.egress.is_none());
    let peers = &e.policies()[0].egress;
    assert_eq!(
        e.peer_addresses(&peers[0].peers[0]).unwrap(),
        Some(["198.19.0.1".parse().unwrap()].into())
    );
    assert_eq!(e.peer_addresses(&peers[2].peers[0]).unwrap(), None);
}

#[test]
fn named_ports_are_the_destination_pods_and_protocols_narrow_a_rule() {
    let (c, cnps) = cluster(&cnp(
        "ports",
        "Admin",
        1,
        &format!("{SUBJECT_X}  ingress:\n  - {{action: Accept, from: [{{namespaces: {{}}}}], protocols: [{{destinationNamedPort: web}}]}}\n  - {{action: Deny, from: [{{namespaces: {{}}}}], protocols: [{{udp: {{destinationPort: {{number: 80}}}}}}]}}\n  - {{action: Deny, from: [{{namespaces: {{}}}}]}}\n"),
    ));
    let nodes = nodes();
    let e = Evaluator::new(&c, &cnps, &nodes).unwrap();
    let ya = Endpoint::Pod(c.pod("y", "a").unwrap());
    let xa = Endpoint::Pod(c.pod("x", "a").unwrap());
    let d = |protocol, port| {
        e.connection(ya, xa, protocol, port)
            .unwrap()
            .ingress
            .unwrap()
    };
    assert!(d(Protocol::Tcp, 80).allowed);
    let udp = d(Protocol::Udp, 80);
    assert!(!udp.allowed);
    assert!(matches!(&udp.by, DecidedBy::Rule(r) if r.index == 1));
    let other = d(Protocol::Tcp, 81);
    assert!(matches!(&other.by, DecidedBy::Rule(r) if r.index == 2));
}

#[test]
fn what_applies_to_a_pod_is_listed_per_tier_in_evaluation_order() {
    let rule = format!("{SUBJECT_X}  ingress: [{{action: Deny, from: [{{namespaces: {{}}}}]}}]\n");
    let (c, cnps) = cluster(&format!(
        "{}{}{}{}{}",
        cnp("b2", "Baseline", 2, &rule),
        cnp("a9", "Admin", 9, &rule),
        cnp("a1", "Admin", 1, &rule),
        cnp(
            "egress-only",
            "Admin",
            0,
            &format!("{SUBJECT_X}  egress: [{{action: Deny, to: [{{namespaces: {{}}}}]}}]\n")
        ),
        cnp(
            "other-ns",
            "Admin",
            0,
            "  subject: {namespaces: {matchLabels: {ns: y}}}\n  ingress: [{action: Deny, from: [{namespaces: {}}]}]\n"
        ),
    ));
    let nodes = nodes();
    let e = Evaluator::new(&c, &cnps, &nodes).unwrap();
    let xa = c.pod("x", "a").unwrap();
    let a = e.applying(xa, Direction::Ingress).unwrap();
    let names = |ps: &[&Policy]| ps.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&a.admin), ["a1", "a9"]);
    assert_eq!(names(&a.baseline), ["b2"]);
    assert!(!a.network_policy.isolated());
    let sel = e.selecting(xa).unwrap();
    assert_eq!(names(&sel), ["egress-only", "a1", "a9", "b2"]);
}

#[test]
fn an_invalid_policy_is_refused_by_the_evaluator() {
    let text = "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {name: bad}\nspec: {tier: Admin, priority: 2000, subject: {namespaces: {}}}\n";
    let (c, cnps) = cluster(text);
    let nodes = nodes();
    let e = Evaluator::new(&c, &cnps, &nodes).unwrap_err();
    assert_eq!(
        e.to_string(),
        "ClusterNetworkPolicy \"bad\" is invalid: spec.priority: Invalid value: 2000: spec.priority in body should be less than or equal to 1000"
    );
}
