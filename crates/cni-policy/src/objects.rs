//! Reading the documents `rcni policy apply -f` takes: YAML or JSON, one document or many
//! (`---`-separated, or a `kind: List` with `items`), each a `NetworkPolicy`, a `Namespace`, a
//! `ClusterNetworkPolicy` or a `Node` as `kubectl` would send it to the API server.

use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde::Deserialize;
use serde_json::Value;

use crate::cluster_policy::{decode, types, ClusterNetworkPolicy};

/// One object of the input.
#[derive(Debug, Clone, PartialEq)]
pub enum Document {
    NetworkPolicy(Box<NetworkPolicy>),
    Namespace(Box<Namespace>),
    /// Cluster-scoped: a namespace in its metadata is not part of it.
    ClusterNetworkPolicy(Box<ClusterNetworkPolicy>),
    /// A node's labels and addresses, for `nodes` peers.
    Node(Box<Node>),
}

/// Why the input could not be read; `index` counts documents from 0.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("document {index}: not valid YAML or JSON: {message}")]
    Syntax { index: usize, message: String },
    #[error(
        "document {index}: {kind:?} is not supported (NetworkPolicy, Namespace, \
         ClusterNetworkPolicy and Node are)"
    )]
    Kind { index: usize, kind: String },
    #[error(
        "document {index}: no matches for kind {kind:?} in version {version:?} (supported: {})",
        supported.join(", ")
    )]
    Version {
        index: usize,
        kind: String,
        version: String,
        supported: Vec<&'static str>,
    },
    #[error("document {index} ({kind}): {message}")]
    Shape {
        index: usize,
        kind: String,
        message: String,
    },
}

/// Every object in `text`, in input order; empty documents are skipped.
pub fn parse_documents(text: &str) -> Result<Vec<Document>, ParseError> {
    let mut out = Vec::new();
    for (index, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(doc).map_err(|e| ParseError::Syntax {
            index,
            message: e.to_string(),
        })?;
        collect(index, value, &mut out)?;
    }
    Ok(out)
}

fn collect(index: usize, value: Value, out: &mut Vec<Document>) -> Result<(), ParseError> {
    if value.is_null() {
        return Ok(());
    }
    let kind = value["kind"].as_str().unwrap_or_default().to_string();
    let shape = |e: serde_json::Error| ParseError::Shape {
        index,
        kind: kind.clone(),
        message: e.to_string(),
    };
    match kind.as_str() {
        "NetworkPolicy" => out.push(Document::NetworkPolicy(Box::new(
            serde_json::from_value(value.clone()).map_err(shape)?,
        ))),
        "Namespace" => out.push(Document::Namespace(Box::new(
            serde_json::from_value(value.clone()).map_err(shape)?,
        ))),
        types::KIND => {
            let version = value["apiVersion"].as_str().unwrap_or_default();
            if !types::API_VERSIONS.contains(&version) {
                return Err(ParseError::Version {
                    index,
                    kind,
                    version: version.to_string(),
                    supported: types::API_VERSIONS.to_vec(),
                });
            }
            let mut policy = decode(&value).map_err(|e| ParseError::Shape {
                index,
                kind: kind.clone(),
                message: format!("ClusterNetworkPolicy in version {version:?} cannot be handled as a ClusterNetworkPolicy: {e}"),
            })?;
            policy.metadata.namespace = None;
            out.push(Document::ClusterNetworkPolicy(Box::new(policy)));
        }
        "Node" => {
            let mut node: Node = serde_json::from_value(value.clone()).map_err(shape)?;
            node.metadata.namespace = None;
            out.push(Document::Node(Box::new(node)));
        }
        "List" => {
            let Value::Array(items) = value["items"].clone() else {
                return Err(ParseError::Shape {
                    index,
                    kind,
                    message: "a List needs an items array".into(),
                });
            };
            for item in items {
                collect(index, item, out)?;
            }
        }
        _ => return Err(ParseError::Kind { index, kind }),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_stream_with_policy_and_namespace() {
        let text = r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-all, namespace: x}
spec:
  podSelector: {}
  policyTypes: [Ingress]
---
apiVersion: v1
kind: Namespace
metadata:
  name: x
  labels: {ns: x}
---
"#;
        let docs = parse_documents(text).unwrap();
        assert_eq!(docs.len(), 2);
        let Document::NetworkPolicy(p) = &docs[0] else {
            panic!("{docs:?}")
        };
        assert_eq!(p.metadata.name.as_deref(), Some("deny-all"));
        assert_eq!(
            p.spec.as_ref().unwrap().policy_types,
            Some(vec!["Ingress".to_string()])
        );
        let Document::Namespace(n) = &docs[1] else {
            panic!("{docs:?}")
        };
        assert_eq!(n.metadata.labels.as_ref().unwrap()["ns"], "x");
    }

    #[test]
    fn json_list_of_policies() {
        let text = r#"{"apiVersion":"v1","kind":"List","items":[
            {"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy",
             "metadata":{"name":"a","namespace":"y"},"spec":{"podSelector":{}}},
            {"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy",
             "metadata":{"name":"b","namespace":"y"},"spec":{"podSelector":{}}}]}"#;
        assert_eq!(parse_documents(text).unwrap().len(), 2);
    }

    #[test]
    fn other_kinds_and_bad_shapes_are_refused_with_the_document_index() {
        let e = parse_documents("kind: Pod\napiVersion: v1\nmetadata: {name: p}\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "document 0: \"Pod\" is not supported (NetworkPolicy, Namespace, ClusterNetworkPolicy and Node are)"
        );
        let e = parse_documents(
            "kind: Namespace\napiVersion: v1\nmetadata: {name: x}\n---\nkind: NetworkPolicy\napiVersion: networking.k8s.io/v1\nmetadata: {name: p}\nspec: {podSelector: 3}\n",
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("document 1 (NetworkPolicy): "),
            "{e}"
        );
        let e = parse_documents("kind: [").unwrap_err();
        assert!(matches!(e, ParseError::Syntax { index: 0, .. }), "{e}");
    }

    #[test]
    fn cluster_network_policies_of_both_versions_and_nodes() {
        let text = r#"
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: a, namespace: ignored}
spec:
  tier: Admin
  priority: 10
  subject: {namespaces: {}}
  egress: [{action: Deny, to: [{networks: [169.254.169.254/32]}]}]
---
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: b}
spec: {tier: Baseline, priority: 0, subject: {pods: {podSelector: {}}}}
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {zone: a}}
"#;
        let docs = parse_documents(text).unwrap();
        let Document::ClusterNetworkPolicy(a) = &docs[0] else {
            panic!("{docs:?}")
        };
        assert_eq!(a.name(), "a");
        assert_eq!(a.metadata.namespace, None, "cluster-scoped");
        assert_eq!(a.spec.as_ref().unwrap().tier.as_deref(), Some("Admin"));
        assert!(matches!(&docs[1], Document::ClusterNetworkPolicy(b) if b.name() == "b"));
        let Document::Node(n) = &docs[2] else {
            panic!("{docs:?}")
        };
        assert_eq!(n.metadata.labels.as_ref().unwrap()["zone"], "a");
    }

    #[test]
    fn a_cluster_network_policy_of_another_version_or_with_undeclared_fields_is_refused() {
        let e = parse_documents(
            "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: ClusterNetworkPolicy\nmetadata: {name: a}\n",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "document 0: no matches for kind \"ClusterNetworkPolicy\" in version \
             \"policy.networking.k8s.io/v1alpha1\" (supported: policy.networking.k8s.io/v1beta1, \
             policy.networking.k8s.io/v1alpha2)"
        );
        let e = parse_documents(
            "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {name: a}\nspec: {tier: Admin, priorty: 3}\n",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "document 0 (ClusterNetworkPolicy): ClusterNetworkPolicy in version \
             \"policy.networking.k8s.io/v1alpha2\" cannot be handled as a ClusterNetworkPolicy: \
             strict decoding error: unknown field \"spec.priorty\""
        );
    }
}
