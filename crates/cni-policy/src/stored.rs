//! How policies, namespaces and pods are kept in the datastore, under the network's key prefix
//! (the prefix `rcni-node` leases subnets under, `/rcni.io/network` by default):
//!
//! | key | value |
//! |---|---|
//! | `<prefix>/policies/<namespace>/<name>` | a `NetworkPolicy` as JSON, as applied |
//! | `<prefix>/namespaces/<name>` | a `Namespace` as JSON (its labels are what counts) |
//! | `<prefix>/pods/<node>/<namespace>/<name>` | a [`PodRecord`], bound to the node's lease |
//! | `<prefix>/clusterpolicies/<name>` | a `ClusterNetworkPolicy` as JSON ([`crate::cluster_policy::stored`]) |
//! | `<prefix>/nodes/<name>` | a `Node` as JSON: labels and addresses for `nodes` peers |
//!
//! `rcni policy` writes all but the pods; each node agent writes the pods of its node, so a node
//! that goes away takes its pods with it when its lease expires. Every node reads the first three
//! to build its [`Cluster`]. Kubernetes names cannot contain `/`, so the keys split uniquely.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, Pod, Protocol};
use crate::effective::policy_namespace;
use crate::selector::Labels;

/// The key layout under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

/// What a key under the prefix names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Policy {
        namespace: String,
        name: String,
    },
    Namespace {
        name: String,
    },
    Pod {
        node: String,
        namespace: String,
        name: String,
    },
}

impl Keys {
    /// The layout under `prefix` (a trailing `/` is ignored).
    pub fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.trim_end_matches('/').to_string(),
        }
    }

    /// The prefix, without a trailing `/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The key of policy `namespace/name`.
    pub fn policy(&self, namespace: &str, name: &str) -> String {
        format!("{}/policies/{namespace}/{name}", self.prefix)
    }

    /// The key of `policy` (its namespace defaulted to `default` as the API server does).
    pub fn policy_of(&self, policy: &NetworkPolicy) -> String {
        self.policy(
            policy_namespace(policy),
            policy.metadata.name.as_deref().unwrap_or_default(),
        )
    }

    /// The key prefix of every policy (with `Some(ns)`: of namespace `ns`).
    pub fn policies(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) => format!("{}/policies/{ns}/", self.prefix),
            None => format!("{}/policies/", self.prefix),
        }
    }

    /// The key of namespace `name`.
    pub fn namespace(&self, name: &str) -> String {
        format!("{}/namespaces/{name}", self.prefix)
    }

    /// The key prefix of every namespace.
    pub fn namespaces(&self) -> String {
        format!("{}/namespaces/", self.prefix)
    }

    /// The key of pod `namespace/name` on `node`.
    pub fn pod(&self, node: &str, namespace: &str, name: &str) -> String {
        format!("{}/pods/{node}/{namespace}/{name}", self.prefix)
    }

    /// The key prefix of every pod (with `Some(node)`: of that node's pods).
    pub fn pods(&self, node: Option<&str>) -> String {
        match node {
            Some(node) => format!("{}/pods/{node}/", self.prefix),
            None => format!("{}/pods/", self.prefix),
        }
    }

    /// What `key` names; `None` for keys outside these three kinds (leases, config).
    pub fn parse(&self, key: &str) -> Option<Key> {
        let rest = key.strip_prefix(&self.prefix)?.strip_prefix('/')?;
        let parts: Vec<&str> = rest.split('/').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return None;
        }
        match parts.as_slice() {
            ["policies", ns, name] => Some(Key::Policy {
                namespace: ns.to_string(),
                name: name.to_string(),
            }),
            ["namespaces", name] => Some(Key::Namespace {
                name: name.to_string(),
            }),
            ["pods", node, ns, name] => Some(Key::Pod {
                node: node.to_string(),
                namespace: ns.to_string(),
                name: name.to_string(),
            }),
            _ => None,
        }
    }
}

/// A pod as a node agent publishes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodRecord {
    pub namespace: String,
    pub name: String,
    /// The node the pod runs on.
    pub node: String,
    #[serde(default)]
    pub labels: Labels,
    #[serde(default)]
    pub ips: Vec<IpAddr>,
    /// Container port names, where the source knows them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub named_ports: BTreeMap<String, NamedPort>,
}

/// What a named container port stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedPort {
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: StoredProtocol,
    pub port: u16,
}

/// [`Protocol`] as stored (the API's spelling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum StoredProtocol {
    Tcp,
    Udp,
    Sctp,
}

impl From<StoredProtocol> for Protocol {
    fn from(p: StoredProtocol) -> Protocol {
        match p {
            StoredProtocol::Tcp => Protocol::Tcp,
            StoredProtocol::Udp => Protocol::Udp,
            StoredProtocol::Sctp => Protocol::Sctp,
        }
    }
}

impl From<Protocol> for StoredProtocol {
    fn from(p: Protocol) -> StoredProtocol {
        match p {
            Protocol::Tcp => StoredProtocol::Tcp,
            Protocol::Udp => StoredProtocol::Udp,
            Protocol::Sctp => StoredProtocol::Sctp,
        }
    }
}

impl PodRecord {
    /// The record of `pod` on `node`.
    pub fn of(pod: &Pod, node: &str) -> PodRecord {
        PodRecord {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            node: node.to_string(),
            labels: pod.labels.clone(),
            ips: pod.ips.clone(),
            named_ports: pod
                .named_ports
                .iter()
                .map(|(n, (protocol, port))| {
                    let protocol = (*protocol).into();
                    (
                        n.clone(),
                        NamedPort {
                            protocol,
                            port: *port,
                        },
                    )
                })
                .collect(),
        }
    }

    /// The pod as policies see it.
    pub fn pod(&self) -> Pod {
        Pod {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            labels: self.labels.clone(),
            ips: self.ips.clone(),
            named_ports: self
                .named_ports
                .iter()
                .map(|(n, p)| (n.clone(), (p.protocol.into(), p.port)))
                .collect(),
        }
    }
}

/// A stored value that could not be read; the rest of the cluster is still used.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {message}")]
pub struct BadEntry {
    pub key: String,
    pub message: String,
}

/// One stored value, decoded.
#[derive(Debug, Clone)]
pub enum Stored {
    /// The policy `namespace/name` (its metadata agrees with its key).
    Policy {
        namespace: String,
        name: String,
        policy: Box<NetworkPolicy>,
    },
    /// The labels of namespace `name`'s object.
    Namespace { name: String, labels: Labels },
    /// A pod published by `node`.
    Pod { node: String, record: PodRecord },
}

/// The value stored at `key` (of the layout `keys`): `Ok(None)` for keys of other kinds
/// (leases, config), an error for a value that does not decode, or a policy whose metadata
/// names another namespace or name than its key.
pub fn decode(keys: &Keys, key: &str, value: &[u8]) -> Result<Option<Stored>, BadEntry> {
    let Some(kind) = keys.parse(key) else {
        return Ok(None);
    };
    let fail = |message: String| BadEntry {
        key: key.to_string(),
        message,
    };
    Ok(Some(match kind {
        Key::Policy { namespace, name } => {
            let mut policy =
                serde_json::from_slice::<NetworkPolicy>(value).map_err(|e| fail(e.to_string()))?;
            let meta = &mut policy.metadata;
            let stated = meta.namespace.get_or_insert_with(|| namespace.clone());
            if *stated != namespace || meta.name.as_deref() != Some(name.as_str()) {
                return Err(fail(format!(
                    "the policy is named {}/{} but stored under {namespace}/{name}",
                    stated,
                    meta.name.as_deref().unwrap_or_default()
                )));
            }
            Stored::Policy {
                namespace,
                name,
                policy: Box::new(policy),
            }
        }
        Key::Namespace { name } => {
            let ns = serde_json::from_slice::<Namespace>(value).map_err(|e| fail(e.to_string()))?;
            Stored::Namespace {
                name,
                labels: ns.metadata.labels.unwrap_or_default(),
            }
        }
        Key::Pod { node, .. } => {
            let record =
                serde_json::from_slice::<PodRecord>(value).map_err(|e| fail(e.to_string()))?;
            Stored::Pod { node, record }
        }
    }))
}

/// The cluster as stored: every entry under the prefix that is a policy, namespace or pod
/// (other keys are skipped). Entries that do not decode are returned beside it, so one bad
/// value does not hide the rest. Pods are sorted by namespace and name, policies likewise.
pub fn cluster_from<'a>(
    keys: &Keys,
    entries: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> (Cluster, Vec<BadEntry>) {
    let mut cluster = Cluster::default();
    let mut bad = Vec::new();
    for (key, value) in entries {
        match decode(keys, key, value) {
            Ok(None) => {}
            Ok(Some(Stored::Policy { policy, .. })) => cluster.policies.push(*policy),
            Ok(Some(Stored::Namespace { name, labels })) => {
                cluster.namespaces.insert(name, labels);
            }
            Ok(Some(Stored::Pod { record, .. })) => cluster.pods.push(record.pod()),
            Err(e) => bad.push(e),
        }
    }
    cluster
        .pods
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    cluster.policies.sort_by(|a, b| {
        let key = |p: &NetworkPolicy| (policy_namespace(p).to_string(), p.metadata.name.clone());
        key(a).cmp(&key(b))
    });
    (cluster, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_other_keys_are_not_ours() {
        let k = Keys::new("/coreos.com/network/");
        let pol = k.policy("x", "deny");
        assert_eq!(pol, "/coreos.com/network/policies/x/deny");
        assert_eq!(
            k.parse(&pol),
            Some(Key::Policy {
                namespace: "x".into(),
                name: "deny".into()
            })
        );
        assert_eq!(
            k.parse(&k.pod("n1", "y", "b")),
            Some(Key::Pod {
                node: "n1".into(),
                namespace: "y".into(),
                name: "b".into()
            })
        );
        assert_eq!(
            k.parse(&k.namespace("z")),
            Some(Key::Namespace { name: "z".into() })
        );
        assert_eq!(k.parse("/coreos.com/network/config"), None);
        assert_eq!(k.parse("/coreos.com/network/subnets/198.18.1.0-24"), None);
        assert_eq!(k.parse("/coreos.com/network/policies/x/"), None);
        assert_eq!(k.parse("/coreos.com/networkX/policies/x/a"), None);
        assert!(k.pods(Some("n1")).ends_with("/pods/n1/"));
    }

    #[test]
    fn the_cluster_is_read_from_entries_and_a_bad_one_is_reported_alone() {
        let k = Keys::new("/p");
        let pod = Pod {
            namespace: "x".into(),
            name: "a".into(),
            labels: [("pod".to_string(), "a".to_string())].into(),
            ips: vec!["198.18.0.5".parse().unwrap()],
            named_ports: [("http".to_string(), (Protocol::Tcp, 80))].into(),
        };
        let record = serde_json::to_vec(&PodRecord::of(&pod, "n1")).unwrap();
        let ns = br#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x","labels":{"ns":"x"}}}"#;
        let pol = br#"{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"d","namespace":"x"},"spec":{"podSelector":{}}}"#;
        let pod_key = k.pod("n1", "x", "a");
        let bad_key = k.pod("n1", "x", "b");
        let entries: Vec<(&str, &[u8])> = vec![
            (pod_key.as_str(), record.as_slice()),
            ("/p/namespaces/x", ns.as_slice()),
            ("/p/policies/x/d", pol.as_slice()),
            // Stored under another name than its own.
            ("/p/policies/y/d", pol.as_slice()),
            (bad_key.as_str(), b"{not json".as_slice()),
            ("/p/config", b"{}".as_slice()),
        ];
        let (cluster, bad) = cluster_from(&k, entries);
        assert_eq!(cluster.pods, vec![pod]);
        assert_eq!(cluster.namespace_labels("x")["ns"], "x");
        assert_eq!(cluster.policies.len(), 1);
        assert_eq!(bad.len(), 2);
        assert!(bad[0].message.contains("stored under y/d"), "{}", bad[0]);
        assert_eq!(bad[1].key, bad_key);
    }
}
