//! The nodes a `nodes` egress peer selects from. rcni has no Node objects of its own: a node is
//! known from its subnet lease (`rcni-node --node-name` as `rcniNodeName`, its `PublicIP` and
//! `PublicIPv6`) and from a `Node` object stored with `rcni policy apply` (its labels, and its
//! `status.addresses` of type `InternalIP` and `ExternalIP`, for nodes without a lease or with
//! more addresses). Every node carries the labels kubelet gives a Linux node,
//! `kubernetes.io/hostname=<name>` and `kubernetes.io/os=linux`; a stored object's labels are
//! added over them.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Node as NodeObject;

use crate::selector::Labels;
use crate::validate::{label_value_problem, Errors, FieldError};

/// The label kubelet sets to the node's name.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// The label kubelet sets to the node's operating system.
pub const OS_LABEL: &str = "kubernetes.io/os";

/// A node as policies see it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Node {
    pub name: String,
    pub labels: Labels,
    /// Its addresses: the lease's, then the object's, without repeats.
    pub addresses: Vec<IpAddr>,
}

/// What a node's lease says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasedNode {
    pub name: String,
    pub addresses: Vec<IpAddr>,
}

/// The address types of `status.addresses` that are the node's IPs.
const ADDRESS_TYPES: [&str; 2] = ["InternalIP", "ExternalIP"];

/// The nodes known from `leases` and stored `objects`, by name.
pub fn nodes(leases: &[LeasedNode], objects: &[NodeObject]) -> Vec<Node> {
    let mut by_name: BTreeMap<String, Node> = BTreeMap::new();
    fn entry<'m>(by_name: &'m mut BTreeMap<String, Node>, name: &str) -> &'m mut Node {
        by_name.entry(name.to_string()).or_insert_with(|| Node {
            name: name.to_string(),
            labels: [
                (HOSTNAME_LABEL.to_string(), name.to_string()),
                (OS_LABEL.to_string(), "linux".to_string()),
            ]
            .into(),
            addresses: Vec::new(),
        })
    }
    for lease in leases {
        let node = entry(&mut by_name, &lease.name);
        for ip in &lease.addresses {
            if !node.addresses.contains(ip) {
                node.addresses.push(*ip);
            }
        }
    }
    for object in objects {
        let Some(name) = object.metadata.name.as_deref() else {
            continue;
        };
        let node = entry(&mut by_name, name);
        node.labels
            .extend(object.metadata.labels.clone().unwrap_or_default());
        let addresses = object
            .status
            .iter()
            .flat_map(|s| s.addresses.iter().flatten());
        for a in addresses.filter(|a| ADDRESS_TYPES.contains(&a.type_.as_str())) {
            if let Ok(ip) = a.address.parse::<IpAddr>() {
                if !node.addresses.contains(&ip) {
                    node.addresses.push(ip);
                }
            }
        }
    }
    by_name.into_values().collect()
}

/// Every field error of a `Node` document (its name, labels and IP addresses: what rcni uses
/// of it); empty when it can be stored.
pub fn validate_node(node: &NodeObject) -> Vec<FieldError> {
    let mut v = Errors::default();
    match node.metadata.name.as_deref() {
        None | Some("") => v.required("metadata.name", "name or generateName is required"),
        Some(name) => v.dns_subdomain("metadata.name", name),
    }
    for (key, value) in node.metadata.labels.iter().flatten() {
        v.label_key("metadata.labels", key);
        if let Some(why) = label_value_problem(value) {
            v.invalid("metadata.labels".to_string(), value, why);
        }
    }
    let addresses = node
        .status
        .iter()
        .flat_map(|s| s.addresses.iter().flatten());
    for (i, a) in addresses.enumerate() {
        if ADDRESS_TYPES.contains(&a.type_.as_str()) && a.address.parse::<IpAddr>().is_err() {
            v.invalid(
                format!("status.addresses[{i}].address"),
                &a.address,
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            );
        }
    }
    v.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::{parse_documents, Document};

    fn object(yaml: &str) -> NodeObject {
        match parse_documents(yaml).unwrap().remove(0) {
            Document::Node(n) => *n,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn leases_and_objects_make_one_node_each_with_kubelets_labels() {
        let leases = [
            LeasedNode {
                name: "n1".into(),
                addresses: vec!["198.19.0.1".parse().unwrap()],
            },
            LeasedNode {
                name: "n2".into(),
                addresses: vec!["198.19.0.2".parse().unwrap()],
            },
        ];
        let objects = [object(
            "apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {zone: a, kubernetes.io/os: linux}}\nstatus:\n  addresses:\n  - {type: InternalIP, address: 198.19.0.1}\n  - {type: ExternalIP, address: 198.18.9.1}\n  - {type: Hostname, address: n1.example}\n",
        ), object("apiVersion: v1\nkind: Node\nmetadata: {name: cp, labels: {role: control}}\nstatus: {addresses: [{type: InternalIP, address: 198.19.0.9}]}\n")];
        let nodes = nodes(&leases, &objects);
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["cp", "n1", "n2"]);
        assert_eq!(
            nodes[1].addresses,
            [
                "198.19.0.1".parse::<IpAddr>().unwrap(),
                "198.18.9.1".parse().unwrap()
            ]
        );
        assert_eq!(nodes[1].labels["zone"], "a");
        assert_eq!(nodes[1].labels[HOSTNAME_LABEL], "n1");
        assert_eq!(nodes[2].labels[OS_LABEL], "linux");
        assert_eq!(nodes[2].labels.len(), 2);
        assert_eq!(nodes[0].labels["role"], "control");
        assert_eq!(
            nodes[0].addresses,
            ["198.19.0.9".parse::<IpAddr>().unwrap()]
        );
    }

    #[test]
    fn a_node_with_a_bad_name_label_or_address_is_refused() {
        let n = object(
            "apiVersion: v1\nkind: Node\nmetadata: {name: Bad_Name, labels: {zone: -a}}\nstatus: {addresses: [{type: InternalIP, address: not-an-ip}, {type: Hostname, address: not-an-ip}]}\n",
        );
        let e: Vec<String> = validate_node(&n).iter().map(|e| e.to_string()).collect();
        assert_eq!(e.len(), 3, "{e:#?}");
        assert!(
            e[0].starts_with("metadata.name: Invalid value: \"Bad_Name\""),
            "{}",
            e[0]
        );
        assert!(
            e[1].starts_with("metadata.labels: Invalid value: \"-a\""),
            "{}",
            e[1]
        );
        assert_eq!(e[2], "status.addresses[0].address: Invalid value: \"not-an-ip\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)");
        let missing = object("apiVersion: v1\nkind: Node\nmetadata: {}\n");
        assert_eq!(
            validate_node(&missing)[0].to_string(),
            "metadata.name: Required value: name or generateName is required"
        );
    }
}
