//! `rcni policy explain NAMESPACE/POD`: the whole cluster as stored (policies, namespaces,
//! the pods the nodes publish, ClusterNetworkPolicies, nodes), and for one pod what applies to
//! it in each direction. With ClusterNetworkPolicies stored, each direction is shown in
//! evaluation order, tier by tier ([`tiers`]); with `--from` or `--to`, which tier and rule
//! decide one connection ([`connection`]).

mod connection;
mod recent;
mod tiers;

use cni_policy::cluster_policy::Evaluator;
use cni_policy::effective::{effective, policy_types, selects};
use cni_policy::selector::SelectorText;
use cni_policy::{Cluster, Direction, Effective, Peer, Pod, PortSpec};
use cni_types::code;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{json, Value};

pub use connection::Connection;
pub use recent::Recent;

use super::store::Datastore;
use super::Problem;

/// Explains `pod`; with a connection, also shows the recent flows of the pair that `agent`
/// has.
pub fn run(
    ds: &mut Datastore,
    pod: &str,
    connection: Option<&Connection>,
    agent: Option<&rcni_flows::Agent>,
    json: bool,
) -> Result<(), Problem> {
    let Some((namespace, name)) = pod.split_once('/') else {
        return Err(Problem::new(
            code::INVALID_ENVIRONMENT,
            format!("error: {pod:?}: give the pod as NAMESPACE/NAME"),
        ));
    };
    let stored = ds.cluster()?;
    for b in &stored.bad {
        eprintln!("warning: ignoring {b}");
    }
    let cluster = &stored.cluster;
    let Some(found) = cluster.pod(namespace, name) else {
        return Err(Problem::new(
            code::UNKNOWN_CONTAINER,
            unknown(cluster, namespace, name),
        ));
    };
    let node = stored.nodes.get(&found.key()).cloned().unwrap_or_default();
    let failed =
        |e: cni_policy::SelectorError| Problem::new(code::DECODING_FAILURE, format!("error: {e}"));
    let explanation = explain(cluster, found).map_err(failed)?;
    let evaluator = Evaluator::of_compiled(cluster, stored.tiers.compiled(), &stored.tiers.nodes);
    let tiers = match stored.tiers.policies.is_empty() {
        true => None,
        false => Some(tiers::Tiers::of(&evaluator, found).map_err(failed)?),
    };
    let decided = connection
        .map(|c| c.decide(&evaluator, found))
        .transpose()?;
    let recent = match (connection, agent) {
        (Some(c), Some(agent)) => Some(Recent::of(agent, pod, c)),
        _ => None,
    };
    if json {
        let mut v = to_json(found, &node, &explanation);
        if let Some(t) = &tiers {
            t.add_json(&mut v);
        }
        if let Some(d) = &decided {
            v["connection"] = d.to_json();
        }
        if let Some(r) = &recent {
            r.add_json(&mut v["connection"]);
        }
        println!("{v}");
    } else {
        let text = match &tiers {
            None => to_text(found, &node, &explanation),
            Some(t) => t.to_text(&header(found, &node, &explanation), &explanation),
        };
        print!("{text}");
        if let Some(d) = &decided {
            print!("{}", d.to_text());
        }
        match recent.as_ref().map(Recent::to_text) {
            Some(Ok(text)) => print!("{text}"),
            Some(Err(note)) => eprintln!("{note}"),
            None => {}
        }
    }
    Ok(())
}

/// The policies selecting a pod and what each direction allows.
pub struct Explanation {
    pub policies: Vec<Selecting>,
    pub ingress: Effective,
    pub egress: Effective,
}

fn explain(cluster: &Cluster, pod: &Pod) -> Result<Explanation, cni_policy::SelectorError> {
    let mut policies = Vec::new();
    for p in &cluster.policies {
        if selects(p, pod)? {
            let name = format!(
                "{}/{}",
                cni_policy::effective::policy_namespace(p),
                p.metadata.name.as_deref().unwrap_or_default()
            );
            let selector = p.spec.as_ref().and_then(|s| s.pod_selector.clone());
            policies.push(Selecting {
                name,
                types: policy_types(p),
                pod_selector: pod_selector_text(&selector.unwrap_or_default()),
            });
        }
    }
    Ok(Explanation {
        policies,
        ingress: effective(cluster, pod, Direction::Ingress)?,
        egress: effective(cluster, pod, Direction::Egress)?,
    })
}

/// A policy selecting the pod.
pub struct Selecting {
    /// `namespace/name`.
    pub name: String,
    /// Its policy types, defaulted.
    pub types: Vec<Direction>,
    /// Its pod selector as `kubectl describe networkpolicy` prints it.
    pub pod_selector: String,
}

/// A policy's pod selector in `kubectl describe networkpolicy`'s words.
fn pod_selector_text(selector: &LabelSelector) -> String {
    let text = SelectorText(selector);
    match text.is_everything() {
        true => format!("{text} (Allowing the specific traffic to all pods in this namespace)"),
        false => text.to_string(),
    }
}

fn types_text(types: &[Direction]) -> String {
    let names: Vec<String> = types.iter().map(|d| format!("{d:?}")).collect();
    names.join(", ")
}

/// The pod is not published: say so, and which pods of its namespace are.
fn unknown(cluster: &Cluster, namespace: &str, name: &str) -> String {
    let known: Vec<&str> = cluster
        .pods
        .iter()
        .filter(|p| p.namespace == namespace)
        .map(|p| p.name.as_str())
        .collect();
    let others = match known.is_empty() {
        true => format!("no node publishes a pod of namespace {namespace}"),
        false => format!("pods of namespace {namespace}: {}", known.join(", ")),
    };
    format!("error: pod {namespace}/{name} is not known (no node publishes it); {others}")
}

fn labels_text(pod: &Pod) -> String {
    let labels: Vec<String> = pod.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    match labels.is_empty() {
        true => "<none>".into(),
        false => labels.join(","),
    }
}

/// The pod and the NetworkPolicies selecting it.
fn header(pod: &Pod, node: &str, e: &Explanation) -> String {
    let ips: Vec<String> = pod.ips.iter().map(|ip| ip.to_string()).collect();
    let mut out = format!(
        "Pod {}/{} on node {node}: {} (labels {})\n",
        pod.namespace,
        pod.name,
        ips.join(", "),
        labels_text(pod)
    );
    if e.policies.is_empty() {
        out += "Policies: none selects the pod\n";
    } else {
        out += "Policies:\n";
        for p in &e.policies {
            out += &format!(
                "  {}: PodSelector: {}; Policy Types: {}\n",
                p.name,
                p.pod_selector,
                types_text(&p.types)
            );
        }
    }
    out
}

/// The explanation without ClusterNetworkPolicies: the NetworkPolicies of each direction.
pub fn to_text(pod: &Pod, node: &str, e: &Explanation) -> String {
    let mut out = header(pod, node, e);
    out += &e.ingress.to_string();
    out += &e.egress.to_string();
    out
}

fn effective_json(e: &Effective) -> Value {
    let rules: Vec<Value> = e
        .rules
        .iter()
        .map(|r| {
            let peers = r.peers.as_ref().map(|ps| {
                ps.iter()
                    .map(|p| match p {
                        Peer::Pods { what, ips } => json!({"pods": what, "ips": ips}),
                        Peer::Block { cidr, except } => json!({"cidr": cidr, "except": except}),
                    })
                    .collect::<Vec<_>>()
            });
            let ports = r.ports.as_ref().map(|ps| {
                ps.iter()
                    .map(|p| match p {
                        PortSpec::Numbered { protocol, range } => json!({
                            "protocol": protocol.to_string(),
                            "port": range.map(|r| r.0),
                            "endPort": range.map(|r| r.1),
                        }),
                        PortSpec::Named { protocol, name } => {
                            json!({"protocol": protocol.to_string(), "name": name})
                        }
                    })
                    .collect::<Vec<_>>()
            });
            json!({"policy": r.policy, "index": r.index, "peers": peers, "ports": ports})
        })
        .collect();
    json!({"isolated": e.isolated(), "policies": e.policies, "rules": rules})
}

pub fn to_json(pod: &Pod, node: &str, e: &Explanation) -> Value {
    let policies: Vec<Value> = e
        .policies
        .iter()
        .map(|p| {
            let types: Vec<String> = p.types.iter().map(|d| format!("{d:?}")).collect();
            json!({"name": p.name, "policyTypes": types, "podSelector": p.pod_selector})
        })
        .collect();
    json!({
        "pod": {"namespace": pod.namespace, "name": pod.name, "node": node,
                "ips": pod.ips, "labels": pod.labels},
        "policies": policies,
        "ingress": effective_json(&e.ingress),
        "egress": effective_json(&e.egress),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> Cluster {
        let docs = cni_policy::parse_documents(
            "kind: NetworkPolicy\nmetadata: {name: in, namespace: x}\nspec:\n  podSelector: {}\n  ingress: [{ports: [{port: 80}, {protocol: UDP, port: 53, endPort: 54}]}]\n",
        )
        .unwrap();
        let mut c = Cluster::default();
        for d in docs {
            if let cni_policy::Document::NetworkPolicy(p) = d {
                c.policies.push(*p);
            }
        }
        c.pods.push(Pod {
            namespace: "x".into(),
            name: "a".into(),
            labels: [("app".to_string(), "a".to_string())].into(),
            ips: vec!["198.18.0.5".parse().unwrap()],
            named_ports: Default::default(),
        });
        c
    }

    #[test]
    fn the_explanation_names_the_node_the_policies_and_each_direction() {
        let c = cluster();
        let e = explain(&c, &c.pods[0]).unwrap();
        assert_eq!(
            to_text(&c.pods[0], "n1", &e),
            "Pod x/a on node n1: 198.18.0.5 (labels app=a)\n\
             Policies:\n  x/in: PodSelector: <none> (Allowing the specific traffic to all pods in this namespace); Policy Types: Ingress\n\
             Ingress: isolated by x/in\n  x/in[0]: from anywhere; on TCP/80, UDP/53-54\n\
             Egress: not isolated (no policy selects the pod): all allowed\n"
        );
        let v = to_json(&c.pods[0], "n1", &e);
        assert_eq!(
            v["egress"],
            json!({"isolated": false, "policies": [], "rules": []})
        );
        assert_eq!(
            v["ingress"]["rules"][0]["ports"],
            json!([{"protocol": "TCP", "port": 80, "endPort": 80},
                   {"protocol": "UDP", "port": 53, "endPort": 54}])
        );
        assert_eq!(v["ingress"]["rules"][0]["peers"], Value::Null);
    }

    #[test]
    fn an_unknown_pod_lists_the_known_ones_of_its_namespace() {
        let c = cluster();
        assert_eq!(
            unknown(&c, "x", "b"),
            "error: pod x/b is not known (no node publishes it); pods of namespace x: a"
        );
        assert!(unknown(&c, "y", "b").ends_with("no node publishes a pod of namespace y"));
    }
}
