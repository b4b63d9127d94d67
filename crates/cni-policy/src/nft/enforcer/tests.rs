use super::*;
use crate::objects::{parse_documents, Document};

fn pod(ns: &str, name: &str, label: &str, ips: &[&str]) -> Pod {
    Pod {
        namespace: ns.into(),
        name: name.into(),
        labels: [("pod".to_string(), label.to_string())].into(),
        ips: ips.iter().map(|ip| ip.parse().unwrap()).collect(),
        named_ports: [("web".to_string(), (Protocol::Tcp, 8080))].into(),
    }
}

fn policy(ns: &str, name: &str, spec: &str) -> NetworkPolicy {
    let yaml = format!("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{spec}");
    match parse_documents(&yaml).unwrap().remove(0) {
        Document::NetworkPolicy(p) => *p,
        other => panic!("{other:?}"),
    }
}

fn base() -> Cluster {
    let mut c = Cluster::default();
    for ns in ["x", "y", "z"] {
        c.namespaces
            .insert(ns.into(), [("ns".to_string(), ns.to_string())].into());
    }
    let mut n = 10;
    for ns in ["x", "y", "z"] {
        for name in ["a", "b", "c"] {
            c.pods
                .push(pod(ns, name, name, &[&format!("198.18.30.{n}")]));
            n += 1;
        }
    }
    c.pods.push(pod("x", "remote", "a", &["198.18.31.1"]));
    c.policies = vec![
        policy("x", "deny", "  podSelector: {}\n"),
        policy(
            "y",
            "from-x",
            "  podSelector: {}\n  ingress:\n  - from: [{namespaceSelector: {matchLabels: {ns: x}}}]\n    ports: [{port: 80}, {port: 81, protocol: UDP}]\n",
        ),
        policy(
            "z",
            "egress-b",
            "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - to: [{podSelector: {matchLabels: {pod: b}}, namespaceSelector: {}}, {ipBlock: {cidr: 198.18.0.0/15, except: [198.18.30.0/24]}}]\n    ports: [{port: 80, endPort: 90}]\n",
        ),
    ];
    c
}

fn local(p: &Pod) -> bool {
    p.name != "remote"
}

/// The objects of `e` equal those of a fresh program for `c`.
#[track_caller]
fn assert_same_as_fresh(e: &Enforcer, c: &Cluster, step: &str) {
    let mut fresh = Enforcer::new();
    fresh.update(c, local).unwrap();
    let (a, b) = (&e.objects, &fresh.objects);
    assert_eq!(a.sets.current(), b.sets.current(), "{step}: sets");
    assert_eq!(
        a.dispatch.current(),
        b.dispatch.current(),
        "{step}: dispatch"
    );
    let names = |o: &Objects| o.chains.current().keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(a), names(b), "{step}: chain names");
    assert_eq!(a.chains.current(), b.chains.current(), "{step}: rules");
    assert_eq!(a.summary(), b.summary(), "{step}: summary");
}

#[test]
fn every_update_ends_where_a_fresh_program_would_be() {
    let mut c = base();
    let mut e = Enforcer::new();
    let (first, summary) = e.update(&c, local).unwrap();
    assert!(!first.is_empty());
    assert_eq!(summary.isolated_pods, 7, "{summary:?}");
    assert_same_as_fresh(&e, &c, "first");
    let (again, _) = e.update(&c, local).unwrap();
    assert!(again.is_empty(), "nothing changed: {again:?}");

    type Step = (&'static str, fn(&mut Cluster));
    let steps: [Step; 14] = [
        ("policy added", |c| {
            c.policies.push(policy(
                "x",
                "allow-a",
                "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from: [{namespaceSelector: {matchLabels: {ns: y}}, podSelector: {matchLabels: {pod: b}}}]\n",
            ))
        }),
        ("peer selector changed", |c| {
            c.policies[1] = policy(
                "y",
                "from-x",
                "  podSelector: {}\n  ingress:\n  - from: [{namespaceSelector: {matchLabels: {ns: z}}}]\n    ports: [{port: 80}, {port: 81, protocol: UDP}]\n",
            )
        }),
        ("namespace relabelled", |c| {
            c.namespaces
                .insert("x".into(), [("ns".into(), "z".into())].into());
        }),
        ("pod selector changed", |c| {
            c.policies[1] = policy(
                "y",
                "from-x",
                "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from: [{namespaceSelector: {matchLabels: {ns: z}}}]\n    ports: [{port: 80}, {port: 81, protocol: UDP}]\n",
            )
        }),
        ("port removed", |c| {
            c.policies[1] = policy(
                "y",
                "from-x",
                "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from: [{namespaceSelector: {matchLabels: {ns: z}}}]\n    ports: [{port: 80}]\n",
            )
        }),
        ("policy deleted", |c| {
            c.policies.remove(0);
        }),
        ("pod added", |c| {
            c.pods.push(pod("z", "d", "b", &["198.18.30.40"]))
        }),
        ("pod removed", |c| {
            c.pods.retain(|p| p.key() != "z/b");
        }),
        ("pod relabelled", |c| {
            c.pods[0].labels = [("pod".into(), "b".into())].into()
        }),
        ("pod address changed and IPv6 added", |c| {
            c.pods[4].ips = vec!["198.18.30.99".parse().unwrap(), "fd00::4".parse().unwrap()]
        }),
        ("pod moved to another node", |c| {
            c.pods[3].name = "remote".into()
        }),
        ("named port policy", |c| {
            c.policies.push(policy(
                "z",
                "web",
                "  podSelector: {}\n  ingress:\n  - ports: [{port: web}]\n",
            ))
        }),
        ("pod with the named port added", |c| {
            c.pods.push(pod("z", "e", "e", &["198.18.30.41"]))
        }),
        ("every policy deleted", |c| c.policies.clear()),
    ];
    for (step, change) in steps {
        change(&mut c);
        let (batch, _) = e.update(&c, local).unwrap();
        assert!(!batch.is_empty(), "{step}: empty batch");
        assert_same_as_fresh(&e, &c, step);
    }
    assert_eq!(e.objects.summary(), Summary::default());
}

#[test]
fn a_bad_selector_fails_and_the_next_update_starts_over() {
    let mut c = base();
    let mut e = Enforcer::new();
    e.update(&c, local).unwrap();
    c.policies.push(policy(
        "x",
        "bad",
        "  podSelector: {matchExpressions: [{key: pod, operator: Like, values: [a]}]}\n",
    ));
    assert!(matches!(
        e.update(&c, local),
        Err(ProgramError::Selector(_))
    ));
    c.policies.pop();
    let (batch, _) = e.update(&c, local).unwrap();
    let (full, _) = super::super::program(&c, local).unwrap();
    assert_eq!(
        batch, full,
        "after an error the next batch replaces the table"
    );
}

#[test]
fn reset_makes_the_next_batch_a_full_replace() {
    let c = base();
    let mut e = Enforcer::new();
    e.update(&c, local).unwrap();
    e.reset();
    let (batch, _) = e.update(&c, local).unwrap();
    assert_eq!(batch, super::super::program(&c, local).unwrap().0);
}
