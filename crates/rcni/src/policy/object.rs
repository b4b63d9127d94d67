//! The objects `rcni policy` stores: what each is called the way `kubectl` calls it, where
//! it is stored, and its checked, stored form.

use cni_policy::stored::Keys;
use cni_policy::{validate_namespace, validate_policy, Document, FieldError};
use serde_json::Value;

/// A NetworkPolicy (its namespace defaulted to `default`) or a Namespace, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub kind: Kind,
    pub name: String,
    /// The stored form: the object as `k8s-openapi` writes it.
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Policy { namespace: String },
    Namespace,
}

impl Object {
    /// What `doc` names and its stored form, unchecked (what `delete -f` needs).
    pub fn named(doc: &Document) -> Result<Object, String> {
        let (kind, name, value) = match doc {
            Document::NetworkPolicy(p) => {
                let mut p = p.clone();
                let ns = cni_policy::effective::policy_namespace(&p).to_string();
                p.metadata.namespace = Some(ns.clone());
                let value = serde_json::to_value(&p);
                (Kind::Policy { namespace: ns }, p.metadata.name, value)
            }
            Document::Namespace(n) => (
                Kind::Namespace,
                n.metadata.name.clone(),
                serde_json::to_value(n),
            ),
        };
        Ok(Object {
            kind,
            name: name.unwrap_or_default(),
            value: value.map_err(|e| format!("error: {e}"))?,
        })
    }

    /// `doc` checked as the API server checks it: the `kubectl` message when it is invalid.
    pub fn of(doc: &Document) -> Result<Object, String> {
        let object = Object::named(doc)?;
        let errors = match doc {
            Document::NetworkPolicy(p) => validate_policy(p),
            Document::Namespace(n) => validate_namespace(n),
        };
        match errors.is_empty() {
            true => Ok(object),
            false => Err(object.invalid(&errors)),
        }
    }

    /// Where it is stored.
    pub fn key(&self, keys: &Keys) -> String {
        match &self.kind {
            Kind::Policy { namespace } => keys.policy(namespace, &self.name),
            Kind::Namespace => keys.namespace(&self.name),
        }
    }

    /// `networkpolicy.networking.k8s.io/NAME` or `namespace/NAME`, as `kubectl` names it.
    pub fn label(&self) -> String {
        format!("{}/{}", self.resource().0, self.name)
    }

    /// The label and `action` (`created`...), as `kubectl apply` prints it.
    pub fn applied(&self, action: &str) -> String {
        format!("{} {action}", self.label())
    }

    /// The resource `kubectl` names in `delete` and `NotFound` messages.
    fn resource(&self) -> (&'static str, &'static str) {
        match self.kind {
            Kind::Policy { .. } => ("networkpolicy.networking.k8s.io", "networkpolicies"),
            Kind::Namespace => ("namespace", "namespaces"),
        }
    }

    /// `networkpolicy.networking.k8s.io "NAME" deleted`.
    pub fn deleted(&self) -> String {
        format!("{} \"{}\" deleted", self.resource().0, self.name)
    }

    /// `Error from server (NotFound): networkpolicies.networking.k8s.io "NAME" not found`.
    pub fn not_found(&self) -> String {
        let plural = self.resource().1;
        let group = match self.kind {
            Kind::Policy { .. } => ".networking.k8s.io",
            Kind::Namespace => "",
        };
        format!(
            "Error from server (NotFound): {plural}{group} \"{}\" not found",
            self.name
        )
    }

    /// The API server's refusal as `kubectl` prints it: one field error inline, several as
    /// a bracketed list.
    fn invalid(&self, errors: &[FieldError]) -> String {
        let kind = match self.kind {
            Kind::Policy { .. } => "NetworkPolicy",
            Kind::Namespace => "Namespace",
        };
        let list: Vec<String> = errors.iter().map(FieldError::to_string).collect();
        let causes = match list.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        format!("The {kind} \"{}\" is invalid: {causes}", self.name)
    }
}

/// A policy named `name` in `namespace`, for the verbs that take names.
pub fn policy_named(namespace: &str, name: &str) -> Object {
    Object {
        kind: Kind::Policy {
            namespace: namespace.to_string(),
        },
        name: name.to_string(),
        value: Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(text: &str) -> Result<Object, String> {
        let docs = cni_policy::parse_documents(text).unwrap();
        Object::of(&docs[0])
    }

    #[test]
    fn a_policy_gets_the_default_namespace_and_kubectls_names() {
        let o = object(
            "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: web}\nspec: {podSelector: {}}\n",
        )
        .unwrap();
        assert_eq!(o.value["metadata"]["namespace"], "default");
        assert_eq!(o.key(&Keys::new("/p")), "/p/policies/default/web");
        assert_eq!(
            o.applied("created"),
            "networkpolicy.networking.k8s.io/web created"
        );
        assert_eq!(
            o.deleted(),
            "networkpolicy.networking.k8s.io \"web\" deleted"
        );
        assert_eq!(
            o.not_found(),
            "Error from server (NotFound): networkpolicies.networking.k8s.io \"web\" not found"
        );
        let ns = object("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n").unwrap();
        assert_eq!(ns.applied("unchanged"), "namespace/x unchanged");
        assert_eq!(
            ns.not_found(),
            "Error from server (NotFound): namespaces \"x\" not found"
        );
    }

    #[test]
    fn invalid_objects_are_refused_as_kubectl_prints_it() {
        let one = object(
            "kind: NetworkPolicy\nmetadata: {name: p}\nspec:\n  podSelector: {}\n  ingress: [{ports: [{port: 80, endPort: 79}]}]\n",
        )
        .unwrap_err();
        assert!(
            one.starts_with("The NetworkPolicy \"p\" is invalid: spec.ingress[0].ports[0].endPort: Invalid value: 79: "),
            "{one}"
        );
        let two = object(
            "kind: NetworkPolicy\nmetadata: {name: p}\nspec:\n  podSelector: {}\n  policyTypes: [Sideways]\n  ingress: [{from: [{ipBlock: {cidr: nope}}]}]\n",
        )
        .unwrap_err();
        assert!(
            two.starts_with("The NetworkPolicy \"p\" is invalid: [spec."),
            "{two}"
        );
        assert!(two.ends_with(']') && two.contains(", spec."), "{two}");
        let ns = object("kind: Namespace\nmetadata: {name: Bad_Name}\n").unwrap_err();
        assert!(
            ns.starts_with(
                "The Namespace \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\""
            ),
            "{ns}"
        );
    }
}
