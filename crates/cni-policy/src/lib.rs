//! Kubernetes NetworkPolicy (`networking.k8s.io/v1`) as data and semantics, with no kernel and
//! no datastore: what the node agent's dataplane and `rcni policy` are built on.
//!
//! - [`objects`]: reading `NetworkPolicy` and `Namespace` documents (YAML or JSON, one or many,
//!   as `kubectl apply -f` takes them) into the types of the `k8s-openapi` crate.
//! - [`validate`]: the API server's validation of a NetworkPolicy, with its field paths and
//!   messages (`spec.ingress[0].ports[0].endPort: Invalid value: ...`).
//! - [`selector`]: label selectors (`matchLabels`, `matchExpressions` with `In`, `NotIn`,
//!   `Exists`, `DoesNotExist`).
//! - [`cluster`]: the view a node has of the cluster: namespaces with their labels, pods with
//!   their namespace, labels, addresses and named ports.
//! - [`compact`]: pods as the incremental pipeline keeps them (interned strings, shared label
//!   sets), a few hundred bytes each.
//! - [`effective`]: per pod and direction, whether it is isolated and what is allowed: the
//!   policies selecting it, each rule's resolved peers (pod addresses, CIDRs with exceptions)
//!   and ports; [`effective::allows`] decides one connection, the reference the dataplane's
//!   tests compare the kernel with.
//! - [`stored`]: the datastore layout of policies, namespaces and the pods each node
//!   publishes, and reading a [`Cluster`] back from it.
//! - [`cluster_policy`]: ClusterNetworkPolicy (`policy.networking.k8s.io`, Admin and Baseline
//!   tiers): its objects, validation, storage, and the reference evaluator of the three tiers
//!   ([`cluster_policy::Evaluator`]).
//! - [`nft`]: the nf_tables program enforcing the policies of a node's pods (verdict maps
//!   dispatching to per-pod and per-policy chains, address sets per selector): built whole
//!   as one atomic batch ([`nft::program`]), or kept up to date by [`nft::Enforcer`] from
//!   changes, each batch of only the objects that changed.
//!
//! The semantics are those of the Kubernetes API reference for NetworkPolicy
//! (<https://kubernetes.io/docs/reference/kubernetes-api/policy-resources/network-policy-v1/>)
//! and the upstream network policy conformance tests
//! (kubernetes/kubernetes `test/e2e/network/netpol/`).

pub mod cluster;
pub mod cluster_policy;
pub mod compact;
pub mod effective;
pub mod nft;
pub mod objects;
pub mod selector;
pub mod stored;
pub mod validate;

pub use cluster::{Cluster, Pod, Protocol};
pub use effective::{allows, allows_matrix, Direction, Effective, Peer, PortSpec, Rule};
pub use objects::{parse_documents, Document, ParseError};
pub use selector::{matches, SelectorError};
pub use validate::{validate_namespace, validate_policy, FieldError};
