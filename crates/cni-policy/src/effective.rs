//! What NetworkPolicies mean for one pod in one direction, and for one connection.
//!
//! A pod selected by no policy of a direction is open in that direction; a selected pod
//! allows only what some rule of some selecting policy allows (the union). A rule without
//! peers allows every peer, a rule without ports every port; a policy of a direction with no
//! rules allows nothing. `policyTypes` defaults as the API server defaults it: `Ingress`
//! always, `Egress` when the policy has egress rules. Replies of allowed connections are not
//! decided here: the dataplane lets them through by connection tracking.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::cluster::{Cluster, Pod, Protocol};
use crate::selector::{matches, Labels, SelectorError, SelectorText};

/// The direction of traffic, from the selected pod's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    Ingress,
    Egress,
}

impl Direction {
    fn name(self) -> &'static str {
        match self {
            Direction::Ingress => "Ingress",
            Direction::Egress => "Egress",
        }
    }
}

/// The other end a rule allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// The pods a `podSelector` / `namespaceSelector` peer selects, by address (`what` says
    /// which selectors, for explanations).
    Pods { what: String, ips: BTreeSet<IpAddr> },
    /// An `ipBlock`: `cidr` but none of `except`.
    Block { cidr: IpNet, except: Vec<IpNet> },
}

impl Peer {
    /// Whether the peer is the other end `ip`.
    pub fn admits(&self, ip: IpAddr) -> bool {
        match self {
            Peer::Pods { ips, .. } => ips.contains(&ip),
            Peer::Block { cidr, except } => {
                cidr.contains(&ip) && !except.iter().any(|e| e.contains(&ip))
            }
        }
    }
}

/// The ports a rule allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortSpec {
    /// `protocol` on ports `range` (inclusive), or on every port when `None`.
    Numbered {
        protocol: Protocol,
        range: Option<(u16, u16)>,
    },
    /// A named container port of the destination pod.
    Named { protocol: Protocol, name: String },
}

impl PortSpec {
    /// Whether `protocol`/`port` to the pod `destination` is this port.
    pub fn admits(&self, protocol: Protocol, port: u16, destination: Option<&Pod>) -> bool {
        match self {
            PortSpec::Numbered { protocol: p, range } => {
                *p == protocol && range.is_none_or(|(lo, hi)| (lo..=hi).contains(&port))
            }
            PortSpec::Named { protocol: p, name } => {
                *p == protocol
                    && destination
                        .and_then(|d| d.named_ports.get(name))
                        .is_some_and(|&(np, number)| np == protocol && number == port)
            }
        }
    }
}

/// What a named port does where pods carry no port names (the pods rcni-node learns from
/// `rcni pod` records and CRI sandboxes have none: port names belong to containers).
pub const UNRESOLVED_NAMED_PORT: &str =
    "named port: pods publish no port names, so it admits nothing";

/// One rule of one policy, resolved against the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// `namespace/name` of the policy.
    pub policy: String,
    /// The rule's index in the policy's `ingress` or `egress` list.
    pub index: usize,
    /// `None`: every peer.
    pub peers: Option<Vec<Peer>>,
    /// `None`: every port.
    pub ports: Option<Vec<PortSpec>>,
}

/// What is allowed for one pod in one direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub direction: Direction,
    /// `namespace/name` of every policy selecting the pod in this direction.
    pub policies: Vec<String>,
    pub rules: Vec<Rule>,
}

impl Effective {
    /// Selected by some policy of this direction: only what [`Effective::rules`] allow passes.
    pub fn isolated(&self) -> bool {
        !self.policies.is_empty()
    }

    /// Whether traffic with the other end `peer` on `protocol`/`port` passes; `destination`
    /// is the pod the port belongs to (for named ports).
    pub fn admits(
        &self,
        peer: IpAddr,
        protocol: Protocol,
        port: u16,
        destination: Option<&Pod>,
    ) -> bool {
        !self.isolated()
            || self.rules.iter().any(|r| {
                r.peers
                    .as_ref()
                    .is_none_or(|ps| ps.iter().any(|p| p.admits(peer)))
                    && r.ports
                        .as_ref()
                        .is_none_or(|ps| ps.iter().any(|p| p.admits(protocol, port, destination)))
            })
    }
}

/// The policy types of `policy`, defaulted as the API server defaults them.
pub fn policy_types(policy: &NetworkPolicy) -> Vec<Direction> {
    let spec = policy.spec.clone().unwrap_or_default();
    match spec.policy_types {
        Some(types) => {
            let mut out: Vec<Direction> = types
                .iter()
                .filter_map(|t| match t.as_str() {
                    "Ingress" => Some(Direction::Ingress),
                    "Egress" => Some(Direction::Egress),
                    _ => None,
                })
                .collect();
            out.sort();
            out.dedup();
            out
        }
        None if spec.egress.is_some_and(|e| !e.is_empty()) => {
            vec![Direction::Ingress, Direction::Egress]
        }
        None => vec![Direction::Ingress],
    }
}

/// The namespace of `policy` (`default` when unset, as `kubectl apply` does).
pub fn policy_namespace(policy: &NetworkPolicy) -> &str {
    policy.metadata.namespace.as_deref().unwrap_or("default")
}

/// `namespace/name` of `policy`.
pub fn policy_key(policy: &NetworkPolicy) -> String {
    format!(
        "{}/{}",
        policy_namespace(policy),
        policy.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Whether `policy` selects `pod` (same namespace, `podSelector` matches its labels).
pub fn selects(policy: &NetworkPolicy, pod: &Pod) -> Result<bool, SelectorError> {
    if policy_namespace(policy) != pod.namespace {
        return Ok(false);
    }
    let selector = policy
        .spec
        .as_ref()
        .and_then(|s| s.pod_selector.clone())
        .unwrap_or_default();
    matches(&selector, &pod.labels)
}

/// The peers and ports of one ingress or egress rule as the API has them.
pub(crate) type RawRule = (
    Option<Vec<NetworkPolicyPeer>>,
    Option<Vec<NetworkPolicyPort>>,
);

/// The rules of `policy` in `direction`, as the API has them.
pub(crate) fn raw_rules(policy: &NetworkPolicy, direction: Direction) -> Vec<RawRule> {
    let spec = policy.spec.clone().unwrap_or_default();
    match direction {
        Direction::Ingress => spec
            .ingress
            .unwrap_or_default()
            .into_iter()
            .map(|r| (r.from, r.ports))
            .collect(),
        Direction::Egress => spec
            .egress
            .unwrap_or_default()
            .into_iter()
            .map(|r| (r.to, r.ports))
            .collect(),
    }
}

/// What the cluster's policies allow for `pod` in `direction`.
pub fn effective(
    cluster: &Cluster,
    pod: &Pod,
    direction: Direction,
) -> Result<Effective, SelectorError> {
    let mut out = Effective {
        direction,
        policies: Vec::new(),
        rules: Vec::new(),
    };
    for policy in &cluster.policies {
        if !policy_types(policy).contains(&direction) || !selects(policy, pod)? {
            continue;
        }
        let key = policy_key(policy);
        for (index, (peers, ports)) in raw_rules(policy, direction).into_iter().enumerate() {
            out.rules.push(Rule {
                policy: key.clone(),
                index,
                peers: resolve_peers(cluster, policy_namespace(policy), peers)?,
                ports: resolve_ports(ports),
            });
        }
        out.policies.push(key);
    }
    Ok(out)
}

/// An empty or missing list means "everything" (`None`).
fn resolve_peers(
    cluster: &Cluster,
    namespace: &str,
    peers: Option<Vec<NetworkPolicyPeer>>,
) -> Result<Option<Vec<Peer>>, SelectorError> {
    let Some(peers) = peers.filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    let mut out = Vec::new();
    for peer in peers {
        if let Some(block) = &peer.ip_block {
            out.extend(ip_block(block));
            continue;
        }
        let mut ips = BTreeSet::new();
        for pod in &cluster.pods {
            if peer_selects(
                &peer,
                namespace,
                pod,
                &cluster.namespace_labels(&pod.namespace),
            )? {
                ips.extend(pod.ips.iter().copied());
            }
        }
        out.push(Peer::Pods {
            what: describe_peer(&peer, namespace),
            ips,
        });
    }
    Ok(Some(out))
}

/// An `ipBlock` peer. Validation refuses unparsable CIDRs; one that slips through allows
/// nothing (`None`).
pub(crate) fn ip_block(block: &IPBlock) -> Option<Peer> {
    let cidr = block.cidr.parse().ok()?;
    let except = block
        .except
        .iter()
        .flatten()
        .filter_map(|e| e.parse().ok())
        .collect();
    Some(Peer::Block { cidr, except })
}

/// Whether the pod-selecting `peer` of a policy in `namespace` selects `pod`, whose
/// namespace has `namespace_labels`.
pub(crate) fn peer_selects(
    peer: &NetworkPolicyPeer,
    namespace: &str,
    pod: &Pod,
    namespace_labels: &Labels,
) -> Result<bool, SelectorError> {
    let in_namespace = match &peer.namespace_selector {
        None => pod.namespace == namespace,
        Some(sel) => matches(sel, namespace_labels)?,
    };
    Ok(in_namespace
        && match &peer.pod_selector {
            None => true,
            Some(sel) => matches(sel, &pod.labels)?,
        })
}

pub(crate) fn resolve_ports(ports: Option<Vec<NetworkPolicyPort>>) -> Option<Vec<PortSpec>> {
    let ports = ports.filter(|p| !p.is_empty())?;
    Some(
        ports
            .into_iter()
            .filter_map(|p| {
                let protocol = Protocol::parse(p.protocol.as_deref().unwrap_or("TCP"))?;
                Some(match p.port {
                    None => PortSpec::Numbered {
                        protocol,
                        range: None,
                    },
                    Some(IntOrString::Int(n)) => {
                        let lo = u16::try_from(n).ok()?;
                        let hi = p.end_port.map_or(Some(lo), |e| u16::try_from(e).ok())?;
                        PortSpec::Numbered {
                            protocol,
                            range: Some((lo, hi)),
                        }
                    }
                    Some(IntOrString::String(name)) => PortSpec::Named { protocol, name },
                })
            })
            .collect(),
    )
}

/// A `podSelector` / `namespaceSelector` peer in words, its selectors as Kubernetes prints
/// them: `pods: app=web in namespace x`, `any pod in namespaces: ns=x`, `any pod in any
/// namespace`. The text also names the peer's address sets in the dataplane.
pub(crate) fn describe_peer(peer: &NetworkPolicyPeer, namespace: &str) -> String {
    let pods = match &peer.pod_selector {
        Some(p) if !SelectorText(p).is_everything() => format!("pods: {}", SelectorText(p)),
        _ => "any pod".to_string(),
    };
    let namespaces = match &peer.namespace_selector {
        None => format!("namespace {namespace}"),
        Some(n) if SelectorText(n).is_everything() => "any namespace".to_string(),
        Some(n) => format!("namespaces: {}", SelectorText(n)),
    };
    format!("{pods} in {namespaces}")
}

impl fmt::Display for Peer {
    /// The peer's selectors (see `describe_peer`), or `ipBlock CIDR except A, B`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Pods { what, .. } => f.write_str(what),
            Peer::Block { cidr, except } if except.is_empty() => write!(f, "ipBlock {cidr}"),
            Peer::Block { cidr, except } => {
                let except: Vec<String> = except.iter().map(|e| e.to_string()).collect();
                write!(f, "ipBlock {cidr} except {}", except.join(", "))
            }
        }
    }
}

/// One end of a connection: a pod of the cluster, or an address outside it.
#[derive(Debug, Clone, Copy)]
pub enum Endpoint<'a> {
    Pod(&'a Pod),
    External(IpAddr),
}

impl Endpoint<'_> {
    fn ip(&self) -> Option<IpAddr> {
        match self {
            Endpoint::Pod(p) => p.ips.first().copied(),
            Endpoint::External(ip) => Some(*ip),
        }
    }
}

/// Whether a new connection from `src` to `dst` on `protocol`/`port` is allowed: by `src`'s
/// egress policies when `src` is a pod, and by `dst`'s ingress policies when `dst` is one. A
/// pod's traffic to itself never leaves it and is always allowed, as the upstream conformance
/// tests expect (their `AllowLoopback`).
pub fn allows(
    cluster: &Cluster,
    src: Endpoint,
    dst: Endpoint,
    protocol: Protocol,
    port: u16,
) -> Result<bool, SelectorError> {
    let (Some(src_ip), Some(dst_ip)) = (src.ip(), dst.ip()) else {
        return Ok(false);
    };
    let dst_pod = match dst {
        Endpoint::Pod(p) => Some(p),
        Endpoint::External(_) => None,
    };
    if let (Endpoint::Pod(s), Some(d)) = (src, dst_pod) {
        if s.key() == d.key() {
            return Ok(true);
        }
    }
    if let Endpoint::Pod(s) = src {
        if !effective(cluster, s, Direction::Egress)?.admits(dst_ip, protocol, port, dst_pod) {
            return Ok(false);
        }
    }
    if let Some(d) = dst_pod {
        if !effective(cluster, d, Direction::Ingress)?.admits(src_ip, protocol, port, Some(d)) {
            return Ok(false);
        }
    }
    Ok(true)
}

impl fmt::Display for Effective {
    /// The explanation `rcni policy explain` prints for one direction.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dir = self.direction.name();
        if !self.isolated() {
            return writeln!(
                f,
                "{dir}: not isolated (no policy selects the pod): all allowed"
            );
        }
        writeln!(f, "{dir}: isolated by {}", self.policies.join(", "))?;
        if self.rules.is_empty() {
            return writeln!(f, "  nothing allowed");
        }
        let (towards, anywhere) = match self.direction {
            Direction::Ingress => ("from", "from anywhere"),
            Direction::Egress => ("to", "to anywhere"),
        };
        for r in &self.rules {
            let peers = match &r.peers {
                None => anywhere.to_string(),
                Some(ps) => {
                    let each: Vec<String> = ps
                        .iter()
                        .map(|p| match p {
                            Peer::Pods { ips, .. } if ips.len() == 1 => format!("{p} (1 address)"),
                            Peer::Pods { ips, .. } => format!("{p} ({} addresses)", ips.len()),
                            Peer::Block { .. } => p.to_string(),
                        })
                        .collect();
                    format!("{towards} {}", each.join(" or "))
                }
            };
            let ports = match &r.ports {
                None => "any port".to_string(),
                Some(ps) => ps
                    .iter()
                    .map(|p| match p {
                        PortSpec::Numbered {
                            protocol,
                            range: None,
                        } => format!("{protocol} any"),
                        PortSpec::Numbered {
                            protocol,
                            range: Some((lo, hi)),
                        } if lo == hi => {
                            format!("{protocol}/{lo}")
                        }
                        PortSpec::Numbered {
                            protocol,
                            range: Some((lo, hi)),
                        } => {
                            format!("{protocol}/{lo}-{hi}")
                        }
                        PortSpec::Named { protocol, name } => {
                            format!("{protocol}/{name} ({UNRESOLVED_NAMED_PORT})")
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            writeln!(f, "  {}[{}]: {peers}; on {ports}", r.policy, r.index)?;
        }
        Ok(())
    }
}

/// What [`allows`] says for every pair of `pods` (rows: sources, columns: destinations), one
/// `.` (allowed) or `X` (denied) per pair: the matrix probes of a dataplane are compared with.
pub fn allows_matrix(
    cluster: &Cluster,
    pods: &[Pod],
    protocol: Protocol,
    port: u16,
) -> Result<Vec<String>, SelectorError> {
    pods.iter()
        .map(|src| {
            pods.iter()
                .map(|dst| {
                    let ok = allows(
                        cluster,
                        Endpoint::Pod(src),
                        Endpoint::Pod(dst),
                        protocol,
                        port,
                    )?;
                    Ok(if ok { '.' } else { 'X' })
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests;
