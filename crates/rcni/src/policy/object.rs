//! The objects `rcni policy` stores: what each is called the way `kubectl` calls it, where
//! it is stored, and its checked, stored form.

use cni_policy::cluster_policy::{validate_cluster_policy, validate_node};
use cni_policy::stored::Keys;
use cni_policy::{validate_namespace, validate_policy, Document, FieldError};
use serde_json::Value;

/// A NetworkPolicy (its namespace defaulted to `default`), a Namespace, a
/// ClusterNetworkPolicy or a Node, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub kind: Kind,
    pub name: String,
    /// The stored form: the object as applied (k8s-openapi's form for the core kinds), without
    /// the status of a ClusterNetworkPolicy (the API server ignores it outside the status
    /// subresource).
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Policy { namespace: String },
    Namespace,
    ClusterPolicy,
    Node,
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
            Document::ClusterNetworkPolicy(p) => {
                let mut p = p.clone();
                p.status = None;
                let value = serde_json::to_value(&p);
                (Kind::ClusterPolicy, p.metadata.name, value)
            }
            Document::Node(n) => (Kind::Node, n.metadata.name.clone(), serde_json::to_value(n)),
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
            Document::ClusterNetworkPolicy(p) => validate_cluster_policy(p),
            Document::Node(n) => validate_node(n),
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
            Kind::ClusterPolicy => keys.cluster_policy(&self.name),
            Kind::Node => keys.node(&self.name),
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

    /// The resource `kubectl` names in `delete` and `NotFound` messages: singular with its
    /// group, plural with its group.
    fn resource(&self) -> (&'static str, &'static str) {
        match self.kind {
            Kind::Policy { .. } => (
                "networkpolicy.networking.k8s.io",
                "networkpolicies.networking.k8s.io",
            ),
            Kind::Namespace => ("namespace", "namespaces"),
            Kind::ClusterPolicy => (
                "clusternetworkpolicy.policy.networking.k8s.io",
                "clusternetworkpolicies.policy.networking.k8s.io",
            ),
            Kind::Node => ("node", "nodes"),
        }
    }

    /// `networkpolicy.networking.k8s.io "NAME" deleted`.
    pub fn deleted(&self) -> String {
        format!("{} \"{}\" deleted", self.resource().0, self.name)
    }

    /// `Error from server (NotFound): networkpolicies.networking.k8s.io "NAME" not found`.
    pub fn not_found(&self) -> String {
        format!(
            "Error from server (NotFound): {} \"{}\" not found",
            self.resource().1,
            self.name
        )
    }

    /// The API server's refusal as `kubectl` prints it: one field error inline, several as
    /// a bracketed list.
    fn invalid(&self, errors: &[FieldError]) -> String {
        let kind = match self.kind {
            Kind::Policy { .. } => "NetworkPolicy",
            Kind::Namespace => "Namespace",
            Kind::ClusterPolicy => "ClusterNetworkPolicy",
            Kind::Node => "Node",
        };
        let list: Vec<String> = errors.iter().map(FieldError::to_string).collect();
        let causes = match list.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        format!("The {kind} \"{}\" is invalid: {causes}", self.name)
    }
}

/// The kinds the verbs that take names and types handle, named as `kubectl` names them
/// (`get cnp/NAME`, `list clusternetworkpolicies`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    NetworkPolicy,
    ClusterNetworkPolicy,
    Node,
}

impl Resource {
    /// `name` (singular, plural, short or with its group) as a resource.
    pub fn parse(name: &str) -> Result<Resource, String> {
        match name {
            "networkpolicy"
            | "networkpolicies"
            | "netpol"
            | "networkpolicy.networking.k8s.io"
            | "networkpolicies.networking.k8s.io" => Ok(Resource::NetworkPolicy),
            "clusternetworkpolicy"
            | "clusternetworkpolicies"
            | "cnp"
            | "clusternetworkpolicy.policy.networking.k8s.io"
            | "clusternetworkpolicies.policy.networking.k8s.io" => {
                Ok(Resource::ClusterNetworkPolicy)
            }
            "node" | "nodes" | "no" => Ok(Resource::Node),
            other => Err(format!(
                "error: the server doesn't have a resource type \"{other}\" (rcni policy knows \
                 networkpolicies, clusternetworkpolicies and nodes)"
            )),
        }
    }

    /// `[RESOURCE/]NAME`: a NetworkPolicy when no resource is given.
    pub fn split(arg: &str) -> Result<(Resource, &str), String> {
        match arg.split_once('/') {
            Some((resource, name)) => Ok((Resource::parse(resource)?, name)),
            None => Ok((Resource::NetworkPolicy, arg)),
        }
    }

    /// The object `name` of this resource (in `namespace` for a NetworkPolicy).
    pub fn named(self, namespace: &str, name: &str) -> Object {
        let kind = match self {
            Resource::NetworkPolicy => Kind::Policy {
                namespace: namespace.to_string(),
            },
            Resource::ClusterNetworkPolicy => Kind::ClusterPolicy,
            Resource::Node => Kind::Node,
        };
        Object {
            kind,
            name: name.to_string(),
            value: Value::Null,
        }
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

    #[test]
    fn cluster_network_policies_and_nodes_are_cluster_scoped_with_kubectls_names() {
        let o = object(
            "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {name: deny-md, namespace: x}\nspec: {tier: Admin, priority: 1, subject: {namespaces: {}}}\nstatus: {conditions: []}\n",
        )
        .unwrap();
        assert_eq!(o.key(&Keys::new("/p")), "/p/clusterpolicies/deny-md");
        assert_eq!(o.value.get("status"), None, "the status is not stored");
        assert_eq!(o.value["metadata"].get("namespace"), None);
        assert_eq!(
            o.applied("created"),
            "clusternetworkpolicy.policy.networking.k8s.io/deny-md created"
        );
        assert_eq!(
            o.not_found(),
            "Error from server (NotFound): clusternetworkpolicies.policy.networking.k8s.io \"deny-md\" not found"
        );
        let bad = object(
            "apiVersion: policy.networking.k8s.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: p}\nspec: {tier: Admin, priority: 1, subject: {namespaces: {}}, egress: [{action: Deny, to: [{domainNames: [example.com]}]}]}\n",
        )
        .unwrap_err();
        assert_eq!(
            bad,
            "The ClusterNetworkPolicy \"p\" is invalid: spec.egress[0].to[0].domainNames: Forbidden: domain name peers are not supported by rcni"
        );
        let n = object("apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {zone: a}}\n")
            .unwrap();
        assert_eq!(n.key(&Keys::new("/p")), "/p/nodes/n1");
        assert_eq!(n.deleted(), "node \"n1\" deleted");
    }

    #[test]
    fn resources_are_named_as_kubectl_names_them() {
        assert_eq!(
            Resource::split("cnp/deny").unwrap(),
            (Resource::ClusterNetworkPolicy, "deny")
        );
        assert_eq!(
            Resource::split("clusternetworkpolicies.policy.networking.k8s.io/deny").unwrap(),
            (Resource::ClusterNetworkPolicy, "deny")
        );
        assert_eq!(
            Resource::split("web").unwrap(),
            (Resource::NetworkPolicy, "web")
        );
        assert_eq!(
            Resource::split("netpol/web").unwrap().0,
            Resource::NetworkPolicy
        );
        assert_eq!(Resource::parse("nodes").unwrap(), Resource::Node);
        assert!(Resource::split("pods/web")
            .unwrap_err()
            .starts_with("error: the server doesn't have a resource type \"pods\""));
        assert_eq!(
            Resource::Node.named("ignored", "n1").key(&Keys::new("/p")),
            "/p/nodes/n1"
        );
    }
}
