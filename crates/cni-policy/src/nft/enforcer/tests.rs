use std::collections::BTreeMap;
use std::net::IpAddr;

use super::*;
use crate::cluster::{Cluster, Pod, Protocol};
use crate::effective::{allows, Endpoint};
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

/// What an enforcer's program holds, comparable: chains, sets with their members, dispatch.
#[derive(Debug, PartialEq)]
struct Snapshot {
    chains: BTreeMap<String, Vec<cni_nft::Rule>>,
    sets: BTreeMap<String, (SetType, Vec<IpAddr>)>,
    dispatch: BTreeMap<(&'static str, IpAddr), Target>,
    summary: Summary,
}

fn snapshot(e: &Enforcer) -> Snapshot {
    let sets = e
        .objects
        .sets
        .current()
        .iter()
        .map(|(name, key)| {
            let members = peers::members_of(&e.peers, name);
            (name.clone(), (*key, members))
        })
        .collect();
    Snapshot {
        chains: e.objects.chains.current().clone(),
        sets,
        dispatch: e.objects.dispatch.current().clone(),
        summary: e.summary(),
    }
}

/// The objects of `e` equal those of a fresh program for `c`.
#[track_caller]
fn assert_same_as_fresh(e: &Enforcer, c: &Cluster, step: &str) {
    let mut fresh = Enforcer::new();
    fresh.update(c, local).unwrap();
    assert_eq!(snapshot(e), snapshot(&fresh), "{step}");
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
    let summary = e.summary();
    assert_eq!(summary.isolated_pods, 0);
    assert_eq!(summary.peer_sets, 0);
    // Without a hold, open pods need no element: nothing remains.
    assert_eq!(summary.elements, 0);
}

#[test]
fn with_a_hold_open_local_pods_are_accepted_and_remote_ones_have_no_element() {
    let mut c = base();
    c.policies.clear();
    let mut e = Enforcer::with_hold(vec!["198.18.30.0/24".parse().unwrap()]);
    e.update(&c, local).unwrap();
    let dispatch = e.objects.dispatch.current();
    let remote: IpAddr = "198.18.31.1".parse().unwrap();
    assert!(dispatch.keys().all(|(_, ip)| *ip != remote));
    assert_eq!(dispatch.len(), 2 * 9);
    assert!(dispatch.values().all(|t| *t == Target::Accept));
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
fn a_bad_change_is_refused_alone() {
    let c = base();
    let mut e = Enforcer::new();
    e.update(&c, local).unwrap();
    let bad = policy(
        "x",
        "deny",
        "  podSelector: {}\n  ingress:\n  - from: [{podSelector: {matchExpressions: [{key: pod, operator: Like}]}}]\n",
    );
    let refused = e.apply(Change::Policy {
        key: "x/deny".into(),
        policy: Some(Arc::new(bad)),
    });
    assert!(matches!(refused, Err(ProgramError::Selector(_))));
    assert!(e.batch().unwrap().batch.is_empty(), "the old version stays");
    assert_same_as_fresh(&e, &c, "after a refused change");
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

#[test]
fn a_pod_of_unknown_labels_is_held_where_a_policy_might_select_it() {
    let hold: IpNet = "198.18.30.0/24".parse().unwrap();
    let mut e = Enforcer::with_hold(vec![hold]);
    let mut interner = Interner::default();
    let ingress_only = policy("x", "in", "  podSelector: {matchLabels: {pod: q}}\n");
    e.apply(Change::Policy {
        key: "x/in".into(),
        policy: Some(Arc::new(ingress_only)),
    })
    .unwrap();
    let mut info = PodInfo::of(&pod("x", "new", "new", &["198.18.30.77"]), &mut interner);
    info.labels = None;
    let id: PodId = "x/new".into();
    let pod_change = |info: PodInfo| Change::Pod {
        id: id.clone(),
        pod: Some(Arc::new(info)),
        local: true,
    };
    e.apply(pod_change(info.clone())).unwrap();
    let first = e.batch().unwrap();
    assert_eq!(first.summary.held_addresses, 1);
    let ip: IpAddr = "198.18.30.77".parse().unwrap();
    let element = |e: &Enforcer, d| {
        let map = dispatch_map_name(d, ip);
        e.objects.dispatch.current().get(&(map, ip)).cloned()
    };
    // No egress policy in x: egress is released; ingress is held.
    assert_eq!(element(&e, Direction::Egress), Some(Target::Accept));
    assert_eq!(element(&e, Direction::Ingress), None);
    let outside: IpAddr = "198.19.0.1".parse().unwrap();
    assert!(!e.admits(outside, ip, Protocol::Tcp, 80));
    assert!(e.admits(ip, outside, Protocol::Tcp, 80));
    // An address of the node no pod has is held too.
    let stranger: IpAddr = "198.18.30.78".parse().unwrap();
    assert!(!e.admits(outside, stranger, Protocol::Tcp, 80));

    // Its labels arrive: the policy does not select it, it is released.
    let mut known = info.clone();
    known.labels = Some(interner.labels([("pod", "new")]));
    e.apply(pod_change(known)).unwrap();
    let delta = e.batch().unwrap();
    assert!(!delta.batch.is_empty());
    assert_eq!(delta.summary.held_addresses, 0);
    assert_eq!(element(&e, Direction::Ingress), Some(Target::Accept));
    assert!(delta.released.is_empty(), "the same pod keeps its address");

    // Relabelled to what the policy selects: isolated (and denied: no rule allows).
    let mut selected = info;
    selected.labels = Some(interner.labels([("pod", "q")]));
    e.apply(pod_change(selected)).unwrap();
    let delta = e.batch().unwrap();
    assert_eq!(delta.narrowed, vec![ip]);
    assert!(matches!(
        element(&e, Direction::Ingress),
        Some(Target::Jump(_))
    ));
    assert!(!e.admits(outside, ip, Protocol::Tcp, 80));

    // Gone: its address is released (its connections are stale) and held again.
    e.apply(Change::Pod {
        id: id.clone(),
        pod: None,
        local: true,
    })
    .unwrap();
    let delta = e.batch().unwrap();
    assert_eq!(delta.released, vec![ip]);
    assert_eq!(element(&e, Direction::Egress), None);
    assert!(!e.admits(ip, outside, Protocol::Tcp, 80));
}

/// A tiny deterministic generator for the randomized sequences (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const NAMESPACES: [&str; 4] = ["x", "y", "z", "w"];
const POLICY_SPECS: [&str; 8] = [
    "  podSelector: {}\n",
    "  podSelector: {matchLabels: {app: a}}\n  ingress:\n  - from: [{podSelector: {matchLabels: {app: b}}}]\n",
    "  podSelector: {}\n  ingress:\n  - from: [{namespaceSelector: {matchLabels: {team: t1}}}]\n    ports: [{port: 80}]\n",
    "  podSelector: {matchExpressions: [{key: app, operator: NotIn, values: [c]}]}\n  policyTypes: [Egress]\n  egress:\n  - to: [{namespaceSelector: {}, podSelector: {matchLabels: {app: a}}}]\n",
    "  podSelector: {matchLabels: {app: b}}\n  policyTypes: [Ingress, Egress]\n  ingress:\n  - from: [{ipBlock: {cidr: 198.18.0.0/16, except: [198.18.1.0/24]}}]\n  egress:\n  - ports: [{port: 53, protocol: UDP}]\n",
    "  podSelector: {}\n  ingress:\n  - ports: [{port: web}]\n",
    "  podSelector: {matchLabels: {app: c}}\n  ingress:\n  - from: [{namespaceSelector: {matchExpressions: [{key: team, operator: Exists}]}, podSelector: {}}]\n",
    "  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  - to: [{podSelector: {}}]\n    ports: [{port: 81, endPort: 90, protocol: TCP}]\n",
];

/// The cluster a randomized sequence has built so far, with which pods are local and which
/// have no labels yet.
#[derive(Default, Clone)]
struct World {
    namespaces: BTreeMap<String, Labels>,
    pods: BTreeMap<String, (PodInfo, bool)>,
    policies: BTreeMap<String, NetworkPolicy>,
}

impl World {
    fn changes(&self) -> Vec<Change> {
        let mut out: Vec<Change> = self
            .namespaces
            .iter()
            .map(|(name, labels)| Change::Namespace {
                name: name.clone(),
                labels: Some(labels.clone()),
            })
            .collect();
        out.extend(self.pods.iter().map(|(id, (info, local))| Change::Pod {
            id: id.as_str().into(),
            pod: Some(Arc::new(info.clone())),
            local: *local,
        }));
        out.extend(self.policies.iter().map(|(key, p)| Change::Policy {
            key: key.clone(),
            policy: Some(Arc::new(p.clone())),
        }));
        out
    }

    /// The model's cluster: the pods of known labels.
    fn model(&self) -> Cluster {
        Cluster {
            namespaces: self.namespaces.clone(),
            pods: self
                .pods
                .values()
                .filter(|(p, _)| p.labels.is_some())
                .map(|(p, _)| p.to_pod())
                .collect(),
            policies: self.policies.values().cloned().collect(),
        }
    }
}

/// One random change to `w`, as the enforcer takes it.
fn random_change(rng: &mut Rng, w: &mut World, interner: &mut Interner) -> Change {
    match rng.below(10) {
        0 | 1 => {
            let ns = *rng.pick(&NAMESPACES);
            let key = format!("{ns}/p{}", rng.below(4));
            if rng.below(4) == 0 {
                w.policies.remove(&key);
                return Change::Policy { key, policy: None };
            }
            let spec: &&str = rng.pick(&POLICY_SPECS);
            let p = policy(ns, &key[2..], spec);
            w.policies.insert(key.clone(), p.clone());
            Change::Policy {
                key,
                policy: Some(Arc::new(p)),
            }
        }
        2 => {
            let name = rng.pick(&NAMESPACES).to_string();
            if rng.below(3) == 0 {
                w.namespaces.remove(&name);
                return Change::Namespace { name, labels: None };
            }
            let labels: Labels = [("team".to_string(), format!("t{}", rng.below(2)))].into();
            w.namespaces.insert(name.clone(), labels.clone());
            Change::Namespace {
                name,
                labels: Some(labels),
            }
        }
        _ => {
            let ns = *rng.pick(&NAMESPACES);
            let n = rng.below(6);
            let local = n < 4;
            // Local pods are told apart by namespace/name, remote ones by another key.
            let id = match local {
                true => format!("{ns}/q{n}"),
                false => format!("/pods/n2/{ns}/q{n}"),
            };
            if rng.below(5) == 0 {
                w.pods.remove(&id);
                return Change::Pod {
                    id: id.as_str().into(),
                    pod: None,
                    local,
                };
            }
            let mut p = pod(ns, &format!("q{n}"), "", &[]);
            p.labels = [("app".to_string(), rng.pick(&["a", "b", "c"]).to_string())].into();
            // Addresses from a small pool, so that remote pods share them now and then; a
            // local address is one pod's only (the node agent sees to it).
            // (24 addresses for the 16 local pods there can be.)
            let mut host = 1 + rng.below(24);
            let subnet = if local { 30 } else { 31 };
            if local {
                let taken = |h: usize| {
                    let ip: IpAddr = format!("198.18.30.{h}").parse().unwrap();
                    w.pods
                        .iter()
                        .any(|(other, (p, _))| *other != id && p.ips.contains(&ip))
                };
                while taken(host) {
                    host = host % 24 + 1;
                }
            }
            p.ips = vec![format!("198.18.{subnet}.{host}").parse().unwrap()];
            if rng.below(3) == 0 {
                p.ips
                    .push(format!("fd00::{subnet}:{host}").parse().unwrap());
            }
            if rng.below(2) == 0 {
                p.named_ports.clear();
            }
            let mut info = PodInfo::of(&p, interner);
            if local && rng.below(4) == 0 {
                info.labels = None;
            }
            w.pods.insert(id.clone(), (info.clone(), local));
            Change::Pod {
                id: id.as_str().into(),
                pod: Some(Arc::new(info)),
                local,
            }
        }
    }
}

/// Random sequences of changes, batched by a few: after every batch the enforcer's objects
/// equal those of a fresh enforcer given the whole resulting cluster, its full batch is the
/// fresh one's, and its decisions for connections between local pods are the model's.
#[test]
fn random_changes_end_where_a_fresh_program_of_the_same_cluster_would_be() {
    let hold: Vec<IpNet> = vec!["198.18.30.0/24".parse().unwrap()];
    #[derive(Default, Debug)]
    struct Stats {
        steps: usize,
        isolated: usize,
        sets: usize,
        held: usize,
    }
    let mut stats = Stats::default();
    for seed in 1..=30u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut interner = Interner::default();
        let mut w = World::default();
        let mut e = Enforcer::with_hold(hold.clone());
        for step in 0..50 {
            for _ in 0..1 + rng.below(4) {
                let change = random_change(&mut rng, &mut w, &mut interner);
                e.apply(change).unwrap();
            }
            e.batch().unwrap();
            let mut fresh = Enforcer::with_hold(hold.clone());
            for change in w.changes() {
                fresh.apply(change).unwrap();
            }
            let fresh_batch = fresh.batch().unwrap().batch;
            let what = format!("seed {seed}, step {step}");
            let now = snapshot(&e);
            assert_eq!(now, snapshot(&fresh), "{what}");
            assert_eq!(e.objects.mirror, mirror_of(&now), "{what}: the deltas");
            stats.isolated += usize::from(now.summary.isolated_pods > 0);
            stats.sets += usize::from(now.summary.peer_sets > 0);
            stats.held += usize::from(now.summary.held_addresses > 0);
            stats.steps += 1;
            if step % 10 == 9 {
                e.reset();
                assert_eq!(e.batch().unwrap().batch, fresh_batch, "{what}: full batch");
            }
            decisions_agree(&e, &w, &what);
        }
    }
    // The sequences reach the interesting states often.
    for n in [stats.isolated, stats.sets, stats.held] {
        assert!(n * 4 > stats.steps, "{stats:?}");
    }
}

/// The kernel's table as a snapshot says it should be.
fn mirror_of(s: &Snapshot) -> super::super::objects::mirror::Mirror {
    super::super::objects::mirror::Mirror {
        sets: s
            .sets
            .iter()
            .map(|(n, (_, m))| (n.clone(), m.iter().copied().collect()))
            .collect(),
        chains: s.chains.clone(),
        dispatch: s.dispatch.clone(),
    }
}

/// For every pair of local pods of known labels, [`Enforcer::admits`] says what the model
/// says, on a port of each kind of rule.
#[track_caller]
fn decisions_agree(e: &Enforcer, w: &World, what: &str) {
    let model = w.model();
    let locals: Vec<Pod> = w
        .pods
        .values()
        .filter(|(p, local)| *local && p.labels.is_some())
        .map(|(p, _)| p.to_pod())
        .collect();
    // A model pod per address: pods sharing an address make the answer ambiguous.
    let mut owners: BTreeMap<IpAddr, usize> = BTreeMap::new();
    for p in w.pods.values().map(|(p, _)| p) {
        for ip in p.ips.iter() {
            *owners.entry(*ip).or_default() += 1;
        }
    }
    let unique = |p: &Pod| p.ips.iter().all(|ip| owners[ip] == 1);
    for src in locals.iter().filter(|p| unique(p)) {
        for dst in locals.iter().filter(|p| unique(p)) {
            for (protocol, port) in [
                (Protocol::Tcp, 80),
                (Protocol::Udp, 53),
                (Protocol::Tcp, 8080),
            ] {
                let want = allows(
                    &model,
                    Endpoint::Pod(src),
                    Endpoint::Pod(dst),
                    protocol,
                    port,
                )
                .unwrap();
                let got = e.admits(src.ips[0], dst.ips[0], protocol, port);
                assert_eq!(
                    got,
                    want,
                    "{what}: {} -> {} {protocol}/{port}",
                    src.key(),
                    dst.key()
                );
            }
        }
    }
}
