//! Reading a ClusterNetworkPolicy document strictly, as `kubectl apply` (server-side field
//! validation `Strict`, its default) has the API server read it: a field the schema does not
//! declare (`ingres:`, a `networks` peer under `from`) is an error naming its path, never
//! silently dropped.

use serde_json::Value;

use super::types::ClusterNetworkPolicy;

/// Why a document is not a ClusterNetworkPolicy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A value of the wrong type (`priority: high`).
    #[error("{0}")]
    Shape(String),
    /// Fields the schema does not declare, by path.
    #[error("strict decoding error: {}", unknown_list(.0))]
    UnknownFields(Vec<String>),
}

fn unknown_list(fields: &[String]) -> String {
    let each: Vec<String> = fields
        .iter()
        .map(|f| format!("unknown field {f:?}"))
        .collect();
    each.join(", ")
}

/// `value` as a ClusterNetworkPolicy, refusing undeclared fields.
pub fn decode(value: &Value) -> Result<ClusterNetworkPolicy, DecodeError> {
    let policy: ClusterNetworkPolicy =
        serde_json::from_value(value.clone()).map_err(|e| DecodeError::Shape(e.to_string()))?;
    // What the types kept, written back: a key of the input it lacks was not declared.
    let kept = serde_json::to_value(&policy).map_err(|e| DecodeError::Shape(e.to_string()))?;
    let mut unknown = Vec::new();
    undeclared(value, &kept, "", &mut unknown);
    match unknown.is_empty() {
        true => Ok(policy),
        false => Err(DecodeError::UnknownFields(unknown)),
    }
}

/// The paths of `input` that `kept` does not have (`null` values count as absent).
fn undeclared(input: &Value, kept: &Value, at: &str, out: &mut Vec<String>) {
    match (input, kept) {
        (Value::Object(fields), Value::Object(kept_fields)) => {
            for (key, value) in fields {
                if value.is_null() {
                    continue;
                }
                let here = match at.is_empty() {
                    true => key.clone(),
                    false => format!("{at}.{key}"),
                };
                match kept_fields.get(key) {
                    None => out.push(here),
                    Some(k) => undeclared(value, k, &here, out),
                }
            }
        }
        (Value::Array(items), Value::Array(kept_items)) => {
            for (i, (item, k)) in items.iter().zip(kept_items).enumerate() {
                undeclared(item, k, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn undeclared_fields_are_named_by_path_and_nulls_are_absent() {
        let value = json!({
            "apiVersion": "policy.networking.k8s.io/v1alpha2",
            "kind": "ClusterNetworkPolicy",
            "metadata": {"name": "x", "creationTimestamp": null},
            "spec": {"tier": "Admin", "priority": 1, "ingres": [],
                "subject": {"namespaces": {}},
                "ingress": [{"action": "Deny", "from": [
                    {"namespaces": {"namespaceSelector": {}}},
                    {"networks": ["198.18.0.0/15"]}]}]}
        });
        assert_eq!(
            decode(&value).unwrap_err().to_string(),
            "strict decoding error: unknown field \"spec.ingres\", unknown field \
             \"spec.ingress[0].from[0].namespaces.namespaceSelector\", unknown field \
             \"spec.ingress[0].from[1].networks\""
        );
        let fine = json!({"kind": "ClusterNetworkPolicy", "metadata": {"name": "x"},
            "spec": {"tier": "Baseline", "priority": 3, "subject": {"pods": {"podSelector": {}}},
                "egress": [{"action": "Pass", "to": [{"networks": ["198.18.0.0/15"]}],
                    "protocols": [{"tcp": {"destinationPort": {"range": {"start": 1, "end": 2}}}}]}]},
            "status": {"conditions": []}});
        let p = decode(&fine).unwrap();
        assert_eq!(p.spec.unwrap().priority, Some(3));
    }

    #[test]
    fn a_value_of_the_wrong_type_is_a_shape_error() {
        let value = json!({"kind": "ClusterNetworkPolicy", "spec": {"priority": "high"}});
        assert!(matches!(decode(&value), Err(DecodeError::Shape(_))));
    }
}
