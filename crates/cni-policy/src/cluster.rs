//! What a node knows of the cluster: namespaces with their labels, pods with their namespace,
//! labels, addresses and named ports, and the NetworkPolicies.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use k8s_openapi::api::networking::v1::NetworkPolicy;

use crate::selector::Labels;

/// The label Kubernetes puts on every namespace, with the namespace's name as its value.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The transport protocols a NetworkPolicy port names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// `TCP`, `UDP` or `SCTP` (the API's spelling); `None` for anything else.
    pub fn parse(s: &str) -> Option<Protocol> {
        match s {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        })
    }
}

/// A pod as policies see it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    pub ips: Vec<IpAddr>,
    /// Container port names and what they stand for, where known (for named ports).
    pub named_ports: BTreeMap<String, (Protocol, u16)>,
}

impl Pod {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Everything policy decisions depend on.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    /// Labels of the namespaces that have an object; others only have
    /// [`NAMESPACE_NAME_LABEL`].
    pub namespaces: BTreeMap<String, Labels>,
    pub pods: Vec<Pod>,
    pub policies: Vec<NetworkPolicy>,
}

impl Cluster {
    /// The labels of namespace `name`, with [`NAMESPACE_NAME_LABEL`] always set as Kubernetes
    /// sets it.
    pub fn namespace_labels(&self, name: &str) -> Labels {
        let mut labels = self.namespaces.get(name).cloned().unwrap_or_default();
        labels.insert(NAMESPACE_NAME_LABEL.to_string(), name.to_string());
        labels
    }

    /// Every namespace the cluster knows of: those with an object and those of pods.
    pub fn namespace_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.namespaces.keys().cloned().collect();
        names.extend(self.pods.iter().map(|p| p.namespace.clone()));
        names.sort();
        names.dedup();
        names
    }

    /// The pod with address `ip`, if any.
    pub fn pod_with_ip(&self, ip: IpAddr) -> Option<&Pod> {
        self.pods.iter().find(|p| p.ips.contains(&ip))
    }

    /// The pod `namespace/name`, if any.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&Pod> {
        self.pods
            .iter()
            .find(|p| p.namespace == namespace && p.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_namespace_carries_its_name_label() {
        let mut c = Cluster::default();
        c.namespaces
            .insert("x".into(), [("ns".to_string(), "x".to_string())].into());
        c.pods.push(Pod {
            namespace: "y".into(),
            name: "a".into(),
            ..Pod::default()
        });
        assert_eq!(c.namespace_labels("x")["ns"], "x");
        assert_eq!(c.namespace_labels("x")[NAMESPACE_NAME_LABEL], "x");
        assert_eq!(c.namespace_labels("y").len(), 1);
        assert_eq!(c.namespace_names(), ["x", "y"]);
    }
}
