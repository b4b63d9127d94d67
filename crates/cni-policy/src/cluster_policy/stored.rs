//! Where ClusterNetworkPolicies and Nodes are kept under the network's prefix, beside the
//! layout of [`crate::stored`], and reading them back with the nodes' leases:
//!
//! | key | value |
//! |---|---|
//! | `<prefix>/clusterpolicies/<name>` | a `ClusterNetworkPolicy` as JSON, as applied (no status, no namespace) |
//! | `<prefix>/nodes/<name>` | a `Node` as JSON, as applied: its labels and addresses |
//! | `<prefix>/subnets/<subnet>` | a node's lease (rcni-node's): `rcniNodeName`, `PublicIP`, `PublicIPv6` |
//!
//! A lease without `rcniNodeName` (written by flannel) names its node by its public address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use k8s_openapi::api::core::v1::Node as NodeObject;
use serde::Deserialize;

use crate::stored::{BadEntry, Keys};

use super::compile::Policy;
use super::decode::decode;
use super::nodes::{nodes, validate_node, LeasedNode, Node};
use super::types::ClusterNetworkPolicy;

/// What a key of this layout names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterKey {
    Policy { name: String },
    Node { name: String },
    Lease,
}

impl Keys {
    /// The key of ClusterNetworkPolicy `name`.
    pub fn cluster_policy(&self, name: &str) -> String {
        format!("{}/clusterpolicies/{name}", self.prefix())
    }

    /// The key prefix of every ClusterNetworkPolicy.
    pub fn cluster_policies(&self) -> String {
        format!("{}/clusterpolicies/", self.prefix())
    }

    /// The key of Node `name`.
    pub fn node(&self, name: &str) -> String {
        format!("{}/nodes/{name}", self.prefix())
    }

    /// The key prefix of every Node.
    pub fn nodes(&self) -> String {
        format!("{}/nodes/", self.prefix())
    }

    /// The key prefix of the nodes' subnet leases.
    pub fn leases(&self) -> String {
        format!("{}/subnets/", self.prefix())
    }

    /// What `key` names among these three kinds.
    pub fn parse_cluster(&self, key: &str) -> Option<ClusterKey> {
        let rest = key.strip_prefix(self.prefix())?.strip_prefix('/')?;
        match rest.split_once('/')? {
            ("clusterpolicies", name) if valid_name(name) => Some(ClusterKey::Policy {
                name: name.to_string(),
            }),
            ("nodes", name) if valid_name(name) => Some(ClusterKey::Node {
                name: name.to_string(),
            }),
            ("subnets", subnet) if valid_name(subnet) => Some(ClusterKey::Lease),
            _ => None,
        }
    }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty() && !s.contains('/')
}

/// The ClusterNetworkPolicies and nodes as stored.
#[derive(Debug, Default)]
pub struct Stored {
    /// The policies that decode and validate, by name.
    pub policies: Vec<ClusterNetworkPolicy>,
    /// Every node known from a lease or an object, by name.
    pub nodes: Vec<Node>,
    /// Entries that do not decode or validate (the rest is still used).
    pub bad: Vec<BadEntry>,
}

impl Stored {
    /// The policies in typed form (all of them validated when read).
    pub fn compiled(&self) -> Vec<Policy> {
        self.policies
            .iter()
            .filter_map(|p| Policy::compile(p).ok())
            .collect()
    }
}

/// What a lease says of its node (the rest of flannel's value is not read here).
#[derive(Deserialize)]
struct LeaseValue {
    #[serde(rename = "PublicIP")]
    public_ip: Option<Ipv4Addr>,
    #[serde(rename = "PublicIPv6", default)]
    public_ipv6: Option<Ipv6Addr>,
    #[serde(rename = "rcniNodeName", default)]
    node_name: Option<String>,
}

/// The ClusterNetworkPolicies, Node objects and leases among `entries` (other keys are
/// skipped).
pub fn read<'a>(keys: &Keys, entries: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Stored {
    let mut out = Stored::default();
    let mut leases = Vec::new();
    let mut objects = Vec::new();
    for (key, value) in entries {
        let Some(kind) = keys.parse_cluster(key) else {
            continue;
        };
        let bad = |message: String| BadEntry {
            key: key.to_string(),
            message,
        };
        match kind {
            ClusterKey::Policy { .. } => match policy(value) {
                Ok(p) => out.policies.push(p),
                Err(message) => out.bad.push(bad(message)),
            },
            ClusterKey::Node { .. } => match node_object(value) {
                Ok(n) => objects.push(n),
                Err(message) => out.bad.push(bad(message)),
            },
            ClusterKey::Lease => match serde_json::from_slice::<LeaseValue>(value) {
                Ok(lease) => leases.extend(leased(lease)),
                Err(e) => out.bad.push(bad(e.to_string())),
            },
        }
    }
    out.policies.sort_by(|a, b| a.name().cmp(b.name()));
    out.nodes = nodes(&leases, &objects);
    out
}

fn policy(value: &[u8]) -> Result<ClusterNetworkPolicy, String> {
    let json: serde_json::Value = serde_json::from_slice(value).map_err(|e| e.to_string())?;
    let p = decode(&json).map_err(|e| e.to_string())?;
    Policy::compile(&p).map_err(|e| e.to_string())?;
    Ok(p)
}

fn node_object(value: &[u8]) -> Result<NodeObject, String> {
    let n: NodeObject = serde_json::from_slice(value).map_err(|e| e.to_string())?;
    let errors = validate_node(&n);
    match errors.is_empty() {
        true => Ok(n),
        false => Err(errors[0].to_string()),
    }
}

fn leased(lease: LeaseValue) -> Option<LeasedNode> {
    let mut addresses = Vec::new();
    let v4 = lease.public_ip.filter(|ip| !ip.is_unspecified());
    addresses.extend(v4.map(IpAddr::V4));
    addresses.extend(lease.public_ipv6.map(IpAddr::V6));
    let name = lease
        .node_name
        .or_else(|| addresses.first().map(IpAddr::to_string))?;
    Some(LeasedNode { name, addresses })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_cluster_policies_nodes_and_leases() {
        let k = Keys::new("/p/");
        assert_eq!(k.cluster_policy("deny"), "/p/clusterpolicies/deny");
        assert_eq!(k.node("n1"), "/p/nodes/n1");
        assert_eq!(
            k.parse_cluster("/p/clusterpolicies/deny"),
            Some(ClusterKey::Policy {
                name: "deny".into()
            })
        );
        assert_eq!(
            k.parse_cluster("/p/nodes/n1"),
            Some(ClusterKey::Node { name: "n1".into() })
        );
        assert_eq!(
            k.parse_cluster("/p/subnets/198.19.3.0-24"),
            Some(ClusterKey::Lease)
        );
        assert_eq!(k.parse_cluster("/p/clusterpolicies/"), None);
        assert_eq!(k.parse_cluster("/p/policies/x/deny"), None);
        assert_eq!(k.parse_cluster("/p/nodes/a/b"), None);
        // The NetworkPolicy layout does not see these keys.
        assert_eq!(k.parse("/p/clusterpolicies/deny"), None);
        assert_eq!(k.parse("/p/nodes/n1"), None);
    }

    #[test]
    fn policies_nodes_and_leases_are_read_and_a_bad_entry_is_reported_alone() {
        let k = Keys::new("/p");
        let good = br#"{"apiVersion":"policy.networking.k8s.io/v1alpha2","kind":"ClusterNetworkPolicy","metadata":{"name":"b"},"spec":{"tier":"Admin","priority":5,"subject":{"namespaces":{}},"egress":[{"action":"Deny","to":[{"nodes":{}}]}]}}"#;
        let invalid = br#"{"kind":"ClusterNetworkPolicy","metadata":{"name":"c"},"spec":{"tier":"Middle","priority":5,"subject":{"namespaces":{}}}}"#;
        let node =
            br#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","labels":{"zone":"a"}}}"#;
        let lease1 = br#"{"PublicIP":"198.19.0.1","BackendType":"host-gw","rcniNodeName":"n1"}"#;
        let lease2 = br#"{"PublicIP":"0.0.0.0","PublicIPv6":"2001:db8::2","BackendType":"vxlan"}"#;
        let entries: Vec<(&str, &[u8])> = vec![
            ("/p/clusterpolicies/b", good.as_slice()),
            ("/p/clusterpolicies/c", invalid.as_slice()),
            ("/p/clusterpolicies/d", b"{".as_slice()),
            ("/p/nodes/n1", node.as_slice()),
            ("/p/subnets/198.18.1.0-24", lease1.as_slice()),
            ("/p/subnets/0.0.0.0-0&2001:db8:1::-64", lease2.as_slice()),
            ("/p/policies/x/y", b"{}".as_slice()),
        ];
        let stored = read(&k, entries);
        assert_eq!(stored.policies.len(), 1);
        assert_eq!(stored.compiled()[0].name, "b");
        let bad: Vec<&str> = stored.bad.iter().map(|b| b.key.as_str()).collect();
        assert_eq!(bad, ["/p/clusterpolicies/c", "/p/clusterpolicies/d"]);
        assert!(
            stored.bad[0]
                .message
                .contains("spec.tier: Unsupported value: \"Middle\""),
            "{}",
            stored.bad[0].message
        );
        let names: Vec<&str> = stored.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["2001:db8::2", "n1"]);
        assert_eq!(stored.nodes[1].labels["zone"], "a");
        assert_eq!(
            stored.nodes[1].addresses,
            ["198.19.0.1".parse::<IpAddr>().unwrap()]
        );
    }
}
