//! `rcni policy get` and `list` of the cluster-scoped kinds: ClusterNetworkPolicies (the
//! table of `kubectl get clusternetworkpolicies`, its printer columns TIER and PRIORITY) and
//! nodes (each node as policies see it: its lease's and its object's addresses, kubelet's
//! labels and the stored ones, shown as a `Node`).

use cni_policy::cluster_policy::{self, ClusterNetworkPolicy, Node};
use cni_types::code;
use serde_json::{json, Value};

use super::object::Resource;
use super::printer::{columns, list_of, render};
use super::store::Datastore;
use super::{Output, Problem};

/// `policy get cnp/NAME`.
pub fn get_policy(ds: &mut Datastore, name: &str, output: Option<Output>) -> Result<(), Problem> {
    let target = Resource::ClusterNetworkPolicy.named("", name);
    let key = target.key(&ds.keys);
    let entry = ds
        .get(&key)?
        .ok_or_else(|| Problem::new(code::UNKNOWN_CONTAINER, target.not_found()))?;
    let policy = decode(&key, &entry.value)?;
    match output {
        Some(format) => print!("{}", render(&to_value(&policy), format)),
        None => print!("{}", policy_table(&[policy])),
    }
    Ok(())
}

/// `policy list clusternetworkpolicies`.
pub fn list_policies(ds: &mut Datastore, output: Option<Output>) -> Result<(), Problem> {
    let entries = ds.list(&ds.keys.cluster_policies())?;
    let mut policies = Vec::new();
    for e in &entries {
        match decode(&e.key, &e.value) {
            Ok(p) => policies.push(p),
            Err(problem) => eprintln!("warning: {}", problem.text),
        }
    }
    match output {
        Some(format) => {
            let items = policies.iter().map(to_value).collect();
            print!("{}", render(&list_of(items), format));
        }
        None if policies.is_empty() => eprintln!("No resources found"),
        None => print!("{}", policy_table(&policies)),
    }
    Ok(())
}

/// `policy get node/NAME`: a node known from its lease or its object.
pub fn get_node(ds: &mut Datastore, name: &str, output: Option<Output>) -> Result<(), Problem> {
    let stored = ds.cluster_objects()?;
    let Some(node) = stored.nodes.iter().find(|n| n.name == name) else {
        let target = Resource::Node.named("", name);
        return Err(Problem::new(code::UNKNOWN_CONTAINER, target.not_found()));
    };
    match output {
        Some(format) => print!("{}", render(&node_object(node), format)),
        None => print!("{}", node_table(std::slice::from_ref(node))),
    }
    Ok(())
}

/// `policy list nodes`.
pub fn list_nodes(ds: &mut Datastore, output: Option<Output>) -> Result<(), Problem> {
    let stored = ds.cluster_objects()?;
    for b in stored
        .bad
        .iter()
        .filter(|b| b.key.starts_with(&ds.keys.nodes()))
    {
        eprintln!("warning: ignoring {b}");
    }
    match output {
        Some(format) => {
            let items = stored.nodes.iter().map(node_object).collect();
            print!("{}", render(&list_of(items), format));
        }
        None if stored.nodes.is_empty() => eprintln!("No resources found"),
        None => print!("{}", node_table(&stored.nodes)),
    }
    Ok(())
}

fn decode(key: &str, value: &[u8]) -> Result<ClusterNetworkPolicy, Problem> {
    let bad = |e: String| Problem::new(code::DECODING_FAILURE, format!("error: {key}: {e}"));
    let json: Value = serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
    cluster_policy::decode(&json).map_err(|e| bad(e.to_string()))
}

fn to_value(policy: &ClusterNetworkPolicy) -> Value {
    serde_json::to_value(policy).unwrap_or(Value::Null)
}

/// `kubectl get clusternetworkpolicies` without AGE (the store keeps no creation time).
pub fn policy_table(policies: &[ClusterNetworkPolicy]) -> String {
    let mut rows = vec![vec!["NAME".into(), "TIER".into(), "PRIORITY".into()]];
    for p in policies {
        let spec = p.spec.clone().unwrap_or_default();
        rows.push(vec![
            p.name().to_string(),
            spec.tier.unwrap_or_default(),
            spec.priority.map(|n| n.to_string()).unwrap_or_default(),
        ]);
    }
    columns(&rows)
}

/// Nodes with their addresses and labels (as `kubectl get nodes --show-labels` prints
/// labels).
pub fn node_table(nodes: &[Node]) -> String {
    let mut rows = vec![vec!["NAME".into(), "ADDRESSES".into(), "LABELS".into()]];
    for n in nodes {
        let addresses: Vec<String> = n.addresses.iter().map(|a| a.to_string()).collect();
        let labels: Vec<String> = n.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        rows.push(vec![
            n.name.clone(),
            if addresses.is_empty() {
                "<none>".into()
            } else {
                addresses.join(",")
            },
            labels.join(","),
        ]);
    }
    columns(&rows)
}

/// A node as a `Node` object: its labels, its addresses as `InternalIP`.
pub fn node_object(node: &Node) -> Value {
    let addresses: Vec<Value> = node
        .addresses
        .iter()
        .map(|a| json!({"address": a.to_string(), "type": "InternalIP"}))
        .collect();
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"labels": node.labels, "name": node.name},
        "status": {"addresses": addresses}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_of_cluster_network_policies_and_nodes() {
        let docs = cni_policy::parse_documents(
            "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {name: deny-metadata}\nspec: {tier: Admin, priority: 5, subject: {namespaces: {}}}\n---\napiVersion: policy.networking.k8s.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: default}\nspec: {tier: Baseline, priority: 1000, subject: {namespaces: {}}}\n",
        )
        .unwrap();
        let policies: Vec<ClusterNetworkPolicy> = docs
            .into_iter()
            .map(|d| match d {
                cni_policy::Document::ClusterNetworkPolicy(p) => *p,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            policy_table(&policies),
            "NAME            TIER       PRIORITY\n\
             deny-metadata   Admin      5\n\
             default         Baseline   1000\n"
        );
        let node = Node {
            name: "n1".into(),
            labels: [("kubernetes.io/os".to_string(), "linux".to_string())].into(),
            addresses: vec!["198.19.0.1".parse().unwrap()],
        };
        assert_eq!(
            node_table(std::slice::from_ref(&node)),
            "NAME   ADDRESSES    LABELS\nn1     198.19.0.1   kubernetes.io/os=linux\n"
        );
        let v = node_object(&node);
        assert_eq!(v["status"]["addresses"][0]["address"], "198.19.0.1");
        assert_eq!(v["metadata"]["labels"]["kubernetes.io/os"], "linux");
    }
}
