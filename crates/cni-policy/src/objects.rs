//! Reading the documents `rcni policy apply -f` takes: YAML or JSON, one document or many
//! (`---`-separated, or a `kind: List` with `items`), each a `NetworkPolicy` or a `Namespace`
//! as `kubectl` would send it to the API server.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde::Deserialize;
use serde_json::Value;

/// One object of the input.
#[derive(Debug, Clone, PartialEq)]
pub enum Document {
    NetworkPolicy(Box<NetworkPolicy>),
    Namespace(Box<Namespace>),
}

/// Why the input could not be read; `index` counts documents from 0.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("document {index}: not valid YAML or JSON: {message}")]
    Syntax { index: usize, message: String },
    #[error("document {index}: {kind:?} is not supported (NetworkPolicy and Namespace are)")]
    Kind { index: usize, kind: String },
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
            "document 0: \"Pod\" is not supported (NetworkPolicy and Namespace are)"
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
}
