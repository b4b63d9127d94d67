//! ClusterNetworkPolicy (kubernetes-sigs/network-policy-api, `policy.networking.k8s.io`
//! `v1alpha2` and `v1beta1`): the cluster administrators' policies, evaluated in an Admin tier
//! before NetworkPolicy and a Baseline tier after it, each rule with an action (`Accept`,
//! `Deny`, `Pass`). As data and semantics, without kernel or datastore:
//!
//! - [`types`]: the objects as the API writes them; [`decode`]: reading one strictly (an
//!   undeclared field is an error).
//! - [`validate`]: the CRD's schema and CEL rules, errors named as `kubectl` prints them.
//! - [`compile`]: a validated policy in typed form ([`Policy`]: tier, priority, subject,
//!   rules with [`Action`], [`PeerMatch`], [`PortMatch`]).
//! - [`nodes`]: the nodes `nodes` peers select, from leases and stored `Node` objects.
//! - [`evaluate`]: the reference evaluator of the three tiers ([`Evaluator`]): one
//!   connection's [`Verdict`], which tier and rule decided each direction, and what applies to
//!   a pod, in evaluation order.
//! - [`stored`]: where policies and nodes are kept under the network's prefix, and reading
//!   them back.
//! - `cases` (with the `conformance-cases` feature, and in this crate's tests): the upstream
//!   conformance cases and rcni's own, as data, run against the evaluator.
//!
//! The semantics are those of the API reference (`apis/v1alpha2/clusternetworkpolicy_types.go`),
//! its documentation (`site-src/api-overview.md`) and its conformance suite (`conformance/`).

#[cfg(any(test, feature = "conformance-cases"))]
pub mod cases;
pub mod compile;
pub mod decode;
pub mod evaluate;
pub mod nodes;
pub mod stored;
pub mod types;
pub mod validate;

pub use compile::{Action, CompileError, PeerMatch, Policy, PortMatch, Rule, Selection, Tier};
pub use decode::{decode, DecodeError};
pub use evaluate::{Applying, DecidedBy, Decision, Evaluator, RuleRef, Verdict};
pub use nodes::{validate_node, Node};
pub use types::ClusterNetworkPolicy;
pub use validate::validate_cluster_policy;
