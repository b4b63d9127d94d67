//! A validated ClusterNetworkPolicy in typed form: its tier, priority, the pods it selects, and
//! each rule's action, peers and ports. What the evaluator walks and `rcni policy explain`
//! prints; the dataplane compiles the same form into chains.

use std::fmt;

use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::cluster::{Cluster, Pod, Protocol};
use crate::effective::Direction;
use crate::selector::{matches, SelectorError, SelectorText};
use crate::validate::FieldError;

use super::types::{self, ClusterNetworkPolicy, EgressPeer, IngressPeer, NamespacedPod};
use super::validate::validate_cluster_policy;

/// Where a policy is evaluated: Admin before NetworkPolicy, Baseline after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    Admin,
    Baseline,
}

impl Tier {
    /// The API's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Admin => "Admin",
            Tier::Baseline => "Baseline",
        }
    }
}

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Allowed; no later rule of any tier is consulted for this direction.
    Accept,
    /// Dropped; no later rule of any tier is consulted.
    Deny,
    /// The rest of this tier is skipped; the next tier decides.
    Pass,
}

impl Action {
    /// The API's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Action::Accept => "Accept",
            Action::Deny => "Deny",
            Action::Pass => "Pass",
        }
    }
}

/// Pods by namespace labels, or by namespace and pod labels.
#[derive(Debug, Clone, PartialEq)]
pub enum Selection {
    /// Every pod of the namespaces this selects.
    Namespaces(LabelSelector),
    /// The pods `pods` selects in the namespaces `namespaces` selects.
    Pods {
        namespaces: LabelSelector,
        pods: LabelSelector,
    },
}

impl Selection {
    fn of_pods(p: &NamespacedPod) -> Selection {
        Selection::Pods {
            namespaces: p.namespace_selector.clone().unwrap_or_default(),
            pods: p.pod_selector.clone().unwrap_or_default(),
        }
    }

    /// Whether `pod` of `cluster` is selected.
    pub fn selects(&self, cluster: &Cluster, pod: &Pod) -> Result<bool, SelectorError> {
        let ns_labels = cluster.namespace_labels(&pod.namespace);
        match self {
            Selection::Namespaces(ns) => matches(ns, &ns_labels),
            Selection::Pods { namespaces, pods } => {
                Ok(matches(namespaces, &ns_labels)? && matches(pods, &pod.labels)?)
            }
        }
    }
}

/// The other end a rule is about.
#[derive(Debug, Clone, PartialEq)]
pub enum PeerMatch {
    /// Pods, by their addresses.
    Pods(Selection),
    /// The addresses of the nodes whose labels this selects (egress only).
    Nodes(LabelSelector),
    /// Addresses in these CIDRs, pods' included (egress only).
    Networks(Vec<IpNet>),
}

/// The traffic a rule is about, when it names protocols.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortMatch {
    /// `protocol` to a destination port in `range` (inclusive), or to any port when `None`.
    Numbered {
        protocol: Protocol,
        range: Option<(u16, u16)>,
    },
    /// The destination pod's container port of this name, with its protocol.
    Named(String),
}

impl PortMatch {
    /// Whether `protocol`/`port` to `destination` is this traffic.
    pub fn admits(&self, protocol: Protocol, port: u16, destination: Option<&Pod>) -> bool {
        match self {
            PortMatch::Numbered { protocol: p, range } => {
                *p == protocol && range.is_none_or(|(lo, hi)| (lo..=hi).contains(&port))
            }
            PortMatch::Named(name) => destination
                .and_then(|d| d.named_ports.get(name))
                .is_some_and(|&(p, number)| p == protocol && number == port),
        }
    }
}

/// One rule of one direction.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Its index in the policy's `ingress` or `egress` list (rules are evaluated in order).
    pub index: usize,
    pub name: Option<String>,
    pub action: Action,
    /// At least one; the rule matches when any does.
    pub peers: Vec<PeerMatch>,
    /// `None`: all traffic (every protocol and port); else traffic any of these admits.
    pub ports: Option<Vec<PortMatch>>,
}

impl Rule {
    /// `name[index]`, or `[index]` for an unnamed rule: how explanations point at it.
    pub fn label(&self) -> String {
        match &self.name {
            Some(n) if !n.is_empty() => format!("[{}] {n:?}", self.index),
            _ => format!("[{}]", self.index),
        }
    }
}

/// A ClusterNetworkPolicy ready to evaluate.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub name: String,
    pub tier: Tier,
    /// 0 to 1000, lowest first within the tier.
    pub priority: u16,
    pub subject: Selection,
    pub ingress: Vec<Rule>,
    pub egress: Vec<Rule>,
}

/// A stored or applied policy that does not validate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ClusterNetworkPolicy {name:?} is invalid: {}", errors.join(", "))]
pub struct CompileError {
    pub name: String,
    pub errors: Vec<String>,
}

impl Policy {
    /// `policy` in typed form, after the checks of [`validate_cluster_policy`].
    pub fn compile(policy: &ClusterNetworkPolicy) -> Result<Policy, CompileError> {
        let name = policy.name().to_string();
        let fail = |errors: Vec<FieldError>| CompileError {
            name: name.clone(),
            errors: errors.iter().map(FieldError::to_string).collect(),
        };
        let errors = validate_cluster_policy(policy);
        if !errors.is_empty() {
            return Err(fail(errors));
        }
        let spec = policy.spec.clone().unwrap_or_default();
        let subject = spec.subject.unwrap_or_default();
        let subject = match (subject.namespaces, subject.pods) {
            (Some(ns), _) => Selection::Namespaces(ns),
            (None, Some(pods)) => Selection::of_pods(&pods),
            (None, None) => unreachable!("validated: the subject has one field"),
        };
        let ingress = spec.ingress.unwrap_or_default().into_iter().enumerate();
        let egress = spec.egress.unwrap_or_default().into_iter().enumerate();
        Ok(Policy {
            name: name.clone(),
            tier: match spec.tier.as_deref() {
                Some("Admin") => Tier::Admin,
                _ => Tier::Baseline,
            },
            priority: spec.priority.unwrap_or_default() as u16,
            subject,
            ingress: ingress
                .map(|(i, r)| {
                    let peers = r.from.iter().flatten().map(ingress_peer).collect();
                    rule(i, r.name, r.action, peers, r.protocols)
                })
                .collect(),
            egress: egress
                .map(|(i, r)| {
                    let peers = r.to.iter().flatten().map(egress_peer).collect();
                    rule(i, r.name, r.action, peers, r.protocols)
                })
                .collect(),
        })
    }

    /// The rules of `direction`, in evaluation order.
    pub fn rules(&self, direction: Direction) -> &[Rule] {
        match direction {
            Direction::Ingress => &self.ingress,
            Direction::Egress => &self.egress,
        }
    }

    /// Whether the policy applies to `pod`.
    pub fn selects(&self, cluster: &Cluster, pod: &Pod) -> Result<bool, SelectorError> {
        self.subject.selects(cluster, pod)
    }
}

fn rule(
    index: usize,
    name: Option<String>,
    action: Option<String>,
    peers: Vec<PeerMatch>,
    protocols: Option<Vec<types::ProtocolMatch>>,
) -> Rule {
    let action = match action.as_deref() {
        Some("Accept") => Action::Accept,
        Some("Pass") => Action::Pass,
        _ => Action::Deny,
    };
    let ports = protocols.map(|ps| ps.iter().map(port_match).collect());
    Rule {
        index,
        name,
        action,
        peers,
        ports,
    }
}

fn ingress_peer(p: &IngressPeer) -> PeerMatch {
    match (&p.namespaces, &p.pods) {
        (Some(ns), _) => PeerMatch::Pods(Selection::Namespaces(ns.clone())),
        (None, Some(pods)) => PeerMatch::Pods(Selection::of_pods(pods)),
        (None, None) => unreachable!("validated: a peer has one field"),
    }
}

fn egress_peer(p: &EgressPeer) -> PeerMatch {
    if let Some(ns) = &p.namespaces {
        return PeerMatch::Pods(Selection::Namespaces(ns.clone()));
    }
    if let Some(pods) = &p.pods {
        return PeerMatch::Pods(Selection::of_pods(pods));
    }
    if let Some(nodes) = &p.nodes {
        return PeerMatch::Nodes(nodes.clone());
    }
    let networks = p.networks.iter().flatten();
    PeerMatch::Networks(networks.filter_map(|n| n.parse().ok()).collect())
}

fn port_match(p: &types::ProtocolMatch) -> PortMatch {
    if let Some(name) = &p.destination_named_port {
        return PortMatch::Named(name.clone());
    }
    let (protocol, ports) = match (&p.tcp, &p.udp, &p.sctp) {
        (Some(t), _, _) => (Protocol::Tcp, t),
        (None, Some(u), _) => (Protocol::Udp, u),
        (None, None, Some(s)) => (Protocol::Sctp, s),
        (None, None, None) => unreachable!("validated: a protocol has one field"),
    };
    let port = |n: Option<i64>| n.unwrap_or_default() as u16;
    let range = ports
        .destination_port
        .as_ref()
        .map(|d| match (&d.number, &d.range) {
            (Some(n), _) => (port(Some(*n)), port(Some(*n))),
            (None, Some(r)) => (port(r.start), port(r.end)),
            (None, None) => (1, 65535),
        });
    PortMatch::Numbered { protocol, range }
}

/// A selector in words: `any` for the empty one, else as Kubernetes prints it.
fn selector_text(s: &LabelSelector) -> String {
    let text = SelectorText(s);
    match text.is_everything() {
        true => "any".into(),
        false => text.to_string(),
    }
}

impl fmt::Display for Selection {
    /// `namespaces: ns=x`, `pods: app=web in namespaces: any`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selection::Namespaces(ns) => write!(f, "namespaces: {}", selector_text(ns)),
            Selection::Pods { namespaces, pods } => write!(
                f,
                "pods: {} in namespaces: {}",
                selector_text(pods),
                selector_text(namespaces)
            ),
        }
    }
}

impl fmt::Display for PeerMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerMatch::Pods(s) => s.fmt(f),
            PeerMatch::Nodes(n) => write!(f, "nodes: {}", selector_text(n)),
            PeerMatch::Networks(nets) => {
                let each: Vec<String> = nets.iter().map(IpNet::to_string).collect();
                write!(f, "networks: {}", each.join(", "))
            }
        }
    }
}

impl fmt::Display for PortMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortMatch::Numbered { protocol, range } => match range {
                None => write!(f, "{protocol} any port"),
                Some((lo, hi)) if lo == hi => write!(f, "{protocol}/{lo}"),
                Some((lo, hi)) => write!(f, "{protocol}/{lo}-{hi}"),
            },
            PortMatch::Named(name) => write!(f, "named port {name}"),
        }
    }
}

impl Rule {
    /// `[2] "deny-web": Deny to pods: app=web in namespaces: any; on TCP/80, UDP/53`.
    pub fn describe(&self, direction: Direction) -> String {
        let towards = match direction {
            Direction::Ingress => "from",
            Direction::Egress => "to",
        };
        let peers: Vec<String> = self.peers.iter().map(PeerMatch::to_string).collect();
        format!(
            "{}: {} {towards} {}; {}",
            self.label(),
            self.action.name(),
            peers.join(" or "),
            self.ports_text()
        )
    }

    /// `all traffic`, or `on TCP/80, UDP/53-54, named port web`.
    pub fn ports_text(&self) -> String {
        match &self.ports {
            None => "all traffic".to_string(),
            Some(ps) => {
                let each: Vec<String> = ps.iter().map(PortMatch::to_string).collect();
                format!("on {}", each.join(", "))
            }
        }
    }
}
