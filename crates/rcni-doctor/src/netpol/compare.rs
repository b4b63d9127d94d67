//! Where the kernel's table disagrees with the program the datastore calls for, per local
//! pod (and for the table as a whole).

use std::collections::BTreeSet;
use std::net::IpAddr;

use cni_nft::Verdict;
use cni_policy::effective::Direction;
use cni_policy::nft::{dispatch_map_name, BASE_CHAINS, TABLE};

use super::expected::{DirectionPlan, Expected, PodPlan};
use super::kernel::Observed;

/// One disagreement: of pod `namespace/name`, or of the node's table (`pod` is `None`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Disagreement {
    pub pod: Option<String>,
    pub problem: String,
}

/// Every disagreement between `expected` and `observed`.
pub fn compare(expected: &Expected, observed: &Observed) -> Vec<Disagreement> {
    let isolated = expected.isolated();
    if !observed.table {
        if isolated.is_empty() {
            return Vec::new();
        }
        return vec![Disagreement {
            pod: None,
            problem: format!(
                "table inet {TABLE} is missing while policies isolate {} local pod(s) ({}): \
                 none of them is enforced",
                isolated.len(),
                isolated.join(", ")
            ),
        }];
    }
    let mut out = Vec::new();
    for chain in BASE_CHAINS
        .iter()
        .filter(|c| !observed.base_chains.contains(**c))
    {
        out.push(Disagreement {
            pod: None,
            problem: format!("base chain {chain} is missing: the {chain} of no pod is filtered"),
        });
    }
    for pod in &expected.pods {
        for plan in &pod.directions {
            let problems = match plan.isolated {
                true => isolated_pod(expected, observed, pod, plan),
                false => open_pod(observed, pod, plan),
            };
            out.extend(problems.into_iter().map(|problem| Disagreement {
                pod: Some(pod.key.clone()),
                problem,
            }));
        }
    }
    out.extend(strangers(expected, observed));
    out
}

fn word(d: Direction) -> &'static str {
    match d {
        Direction::Ingress => "ingress",
        Direction::Egress => "egress",
    }
}

/// A verdict as `nft` writes it.
fn text(v: &Verdict) -> String {
    match v {
        Verdict::Accept => "accept".into(),
        Verdict::Drop => "drop".into(),
        Verdict::Continue => "continue".into(),
        Verdict::Return => "return".into(),
        Verdict::Jump(c) => format!("jump {c}"),
        Verdict::Goto(c) => format!("goto {c}"),
    }
}

fn element<'a>(observed: &'a Observed, map: &str, ip: &IpAddr) -> Option<&'a Verdict> {
    observed.maps.get(map).and_then(|m| m.get(ip))
}

/// A pod some policy isolates in `plan`'s direction: its dispatch elements, its chain's
/// jumps, the policy chains and the peer sets.
fn isolated_pod(
    expected: &Expected,
    observed: &Observed,
    pod: &PodPlan,
    plan: &DirectionPlan,
) -> Vec<String> {
    let dir = word(plan.direction);
    let mut out = Vec::new();
    for ip in &pod.ips {
        let map = dispatch_map_name(plan.direction, *ip);
        match element(observed, map, ip) {
            None => out.push(format!(
                "{dir}: no element for {ip} in map {map}: the pod's {dir} is not filtered"
            )),
            Some(Verdict::Jump(c)) if *c == plan.chain => {}
            Some(v) => out.push(format!(
                "{dir}: the element for {ip} in map {map} is {}, not jump {}",
                text(v),
                plan.chain
            )),
        }
    }
    let policy = |chain: &str| {
        expected
            .policy_chains
            .get(chain)
            .map_or("no policy selecting the pod".to_string(), |p| p.clone())
    };
    match observed.jumps.get(&plan.chain) {
        None => out.push(format!("{dir}: pod chain {} is missing", plan.chain)),
        Some(jumps) => {
            for missing in plan.jumps.iter().filter(|c| !jumps.contains(c)) {
                out.push(format!(
                    "{dir}: chain {} does not jump to {missing} (policy {})",
                    plan.chain,
                    policy(missing)
                ));
            }
            for extra in jumps.iter().filter(|c| !plan.jumps.contains(c)) {
                out.push(format!(
                    "{dir}: chain {} jumps to {extra} ({})",
                    plan.chain,
                    policy(extra)
                ));
            }
        }
    }
    for chain in plan.jumps.iter().filter(|c| !observed.chains.contains(*c)) {
        out.push(format!(
            "{dir}: policy chain {chain} (policy {}) is missing",
            policy(chain)
        ));
    }
    for name in &plan.peer_sets {
        out.extend(peer_set(expected, observed, name, dir));
    }
    out
}

/// Members a peer set lacks or has in excess.
fn peer_set(expected: &Expected, observed: &Observed, name: &str, dir: &str) -> Vec<String> {
    let Some(want) = expected.peer_sets.get(name) else {
        return Vec::new();
    };
    let empty = BTreeSet::new();
    let have = observed.sets.get(name).unwrap_or(&empty);
    let mut out = Vec::new();
    for ip in want.members.difference(have) {
        out.push(format!("{dir}: peer set {name} ({}) lacks {ip}", want.what));
    }
    for ip in have.difference(&want.members) {
        out.push(format!(
            "{dir}: peer set {name} ({}) has {ip}, which the peer does not select",
            want.what
        ));
    }
    out
}

/// A pod no policy isolates in `plan`'s direction: it must have no dispatch element.
fn open_pod(observed: &Observed, pod: &PodPlan, plan: &DirectionPlan) -> Vec<String> {
    let dir = word(plan.direction);
    pod.ips
        .iter()
        .filter_map(|ip| {
            let map = dispatch_map_name(plan.direction, *ip);
            element(observed, map, ip).map(|v| {
                format!(
                    "{dir}: map {map} has {ip} ({}) though no policy isolates the pod for {dir}",
                    text(v)
                )
            })
        })
        .collect()
}

/// Dispatch elements for addresses of no local pod.
fn strangers(expected: &Expected, observed: &Observed) -> Vec<Disagreement> {
    let local: BTreeSet<&IpAddr> = expected.pods.iter().flat_map(|p| &p.ips).collect();
    let mut out = Vec::new();
    for (map, elements) in &observed.maps {
        for (ip, v) in elements.iter().filter(|(ip, _)| !local.contains(ip)) {
            out.push(Disagreement {
                pod: None,
                problem: format!(
                    "map {map} has {ip} ({}), an address of no pod of this node",
                    text(v)
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_policy::nft::{peer_set_name, pod_chain_name};
    use cni_policy::{Cluster, Document, Pod};

    /// x/a (local, ingress only from pod=b) and x/b (local, open).
    fn expected() -> Expected {
        let mut c = Cluster::default();
        let docs = cni_policy::parse_documents(
            "kind: NetworkPolicy\nmetadata: {name: p, namespace: x}\nspec:\n  podSelector: {matchLabels: {pod: a}}\n  ingress: [{from: [{podSelector: {matchLabels: {pod: b}}}]}]\n",
        )
        .unwrap();
        for d in docs {
            if let Document::NetworkPolicy(p) = d {
                c.policies.push(*p);
            }
        }
        for (name, ip) in [("a", "198.18.0.1"), ("b", "198.18.0.2")] {
            c.pods.push(Pod {
                namespace: "x".into(),
                name: name.into(),
                labels: [("pod".to_string(), name.to_string())].into(),
                ips: vec![ip.parse().unwrap()],
                named_ports: Default::default(),
            });
        }
        Expected::of(&c, |_| true).unwrap()
    }

    /// The kernel holding exactly `e`.
    fn programmed(e: &Expected) -> Observed {
        let mut o = Observed {
            table: true,
            ..Observed::default()
        };
        o.chains.extend(e.policy_chains.keys().cloned());
        o.base_chains.extend(BASE_CHAINS.map(String::from));
        for pod in &e.pods {
            for plan in pod.directions.iter().filter(|d| d.isolated) {
                o.chains.insert(plan.chain.clone());
                o.jumps.insert(plan.chain.clone(), plan.jumps.clone());
                for ip in &pod.ips {
                    let map = dispatch_map_name(plan.direction, *ip);
                    let m = o.maps.entry(map.to_string()).or_default();
                    m.insert(*ip, Verdict::Jump(plan.chain.clone()));
                }
            }
        }
        for (name, set) in &e.peer_sets {
            o.sets.insert(name.clone(), set.members.clone());
        }
        o
    }

    #[test]
    fn wrong_targets_extra_members_and_strangers_are_named() {
        let e = expected();
        let mut o = programmed(&e);
        assert_eq!(compare(&e, &o), []);

        let a: IpAddr = "198.18.0.1".parse().unwrap();
        let wrong = pod_chain_name("x/b", Direction::Ingress);
        o.maps
            .get_mut("ingress4")
            .unwrap()
            .insert(a, Verdict::Jump(wrong.clone()));
        let set = peer_set_name("pods: pod=b in namespace x", false);
        o.sets
            .get_mut(&set)
            .unwrap()
            .insert("198.18.0.9".parse().unwrap());
        o.maps
            .get_mut("ingress4")
            .unwrap()
            .insert("198.18.7.7".parse().unwrap(), Verdict::Accept);
        let right = pod_chain_name("x/a", Direction::Ingress);
        let found = compare(&e, &o);
        let text = |d: &Disagreement| (d.pod.clone(), d.problem.clone());
        assert_eq!(
            found.iter().map(text).collect::<Vec<_>>(),
            [
                (
                    Some("x/a".to_string()),
                    format!("ingress: the element for 198.18.0.1 in map ingress4 is jump {wrong}, not jump {right}")
                ),
                (
                    Some("x/a".to_string()),
                    format!("ingress: peer set {set} (pods: pod=b in namespace x) has 198.18.0.9, which the peer does not select")
                ),
                (
                    None,
                    "map ingress4 has 198.18.7.7 (accept), an address of no pod of this node"
                        .to_string()
                ),
            ]
        );
    }

    #[test]
    fn a_missing_table_matters_only_when_a_local_pod_is_isolated() {
        let e = expected();
        let found = compare(&e, &Observed::default());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].pod, None);
        assert!(found[0].problem.contains("isolate 1 local pod(s) (x/a)"));
        let open = Expected::of(&Cluster::default(), |_| true).unwrap();
        assert_eq!(compare(&open, &Observed::default()), []);
    }
}
