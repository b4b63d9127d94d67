//! A policy as the program uses it: its selector, directions and rules resolved once, and
//! the local pods it selects.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::super::rules::{PeerRef, PolicyRule};
use super::super::{policy_chain_name, ProgramError};
use super::PodId;
use crate::compact::PodInfo;
use crate::effective::{
    describe_peer, ip_block, policy_namespace, policy_types, raw_rules, resolve_ports, Direction,
    Peer, PortSpec,
};
use crate::selector::{check, matches};

pub(super) struct PolicyState {
    pub policy: NetworkPolicy,
    pub namespace: String,
    pod_selector: LabelSelector,
    pub types: Vec<Direction>,
    ingress: Vec<PolicyRule>,
    egress: Vec<PolicyRule>,
    /// The pod-selecting peers of its rules by description, per direction.
    peers: BTreeMap<String, (NetworkPolicyPeer, BTreeSet<Direction>)>,
    pub named_ports: bool,
    /// The local pods it selects: it has chains (in each of its `types`) while there are any.
    pub selected_local: BTreeSet<PodId>,
    /// Its chains' names (egress, ingress).
    pub chain_names: [String; 2],
}

impl PolicyState {
    /// `policy` (`key`: `namespace/name`) resolved; an error for a selector Kubernetes would
    /// refuse.
    pub fn new(key: &str, policy: &NetworkPolicy) -> Result<Self, ProgramError> {
        let namespace = policy_namespace(policy).to_string();
        let pod_selector = policy
            .spec
            .as_ref()
            .and_then(|s| s.pod_selector.clone())
            .unwrap_or_default();
        check(&pod_selector)?;
        let mut peers = BTreeMap::new();
        let mut named_ports = false;
        let mut rules = |direction| -> Result<Vec<PolicyRule>, ProgramError> {
            let mut out = Vec::new();
            for (raw_peers, raw_ports) in raw_rules(policy, direction) {
                let ports = resolve_ports(raw_ports);
                named_ports |= ports
                    .iter()
                    .flatten()
                    .any(|p| matches!(p, PortSpec::Named { .. }));
                let peers = match raw_peers.filter(|p| !p.is_empty()) {
                    None => None,
                    Some(list) => {
                        let mut refs = Vec::new();
                        for p in &list {
                            if let Some(r) = peer_ref(p, &namespace, direction, &mut peers)? {
                                refs.push(r);
                            }
                        }
                        Some(refs)
                    }
                };
                out.push(PolicyRule { peers, ports });
            }
            Ok(out)
        };
        let ingress = rules(Direction::Ingress)?;
        let egress = rules(Direction::Egress)?;
        Ok(Self {
            policy: policy.clone(),
            pod_selector,
            types: policy_types(policy),
            ingress,
            egress,
            peers,
            named_ports,
            selected_local: BTreeSet::new(),
            chain_names: [
                policy_chain_name(key, Direction::Egress),
                policy_chain_name(key, Direction::Ingress),
            ],
            namespace,
        })
    }

    pub fn rules(&self, direction: Direction) -> &[PolicyRule] {
        match direction {
            Direction::Ingress => &self.ingress,
            Direction::Egress => &self.egress,
        }
    }

    /// Whether it selects `pod` (of its namespace; a pod of unknown labels is selected by
    /// no policy).
    pub fn selects(&self, pod: &PodInfo) -> bool {
        pod.labels
            .as_ref()
            .is_some_and(|labels| matches(&self.pod_selector, labels).unwrap_or(false))
    }

    /// The peers its chains use: those of the rules of its directions.
    pub fn used_peers(&self) -> impl Iterator<Item = (&String, &NetworkPolicyPeer)> {
        self.peers
            .iter()
            .filter(|(_, (_, dirs))| dirs.iter().any(|d| self.types.contains(d)))
            .map(|(what, (peer, _))| (what, peer))
    }
}

/// The rule peer for `peer`; pod-selecting peers are also recorded in `peers`. An error for
/// a selector Kubernetes would refuse.
fn peer_ref(
    peer: &NetworkPolicyPeer,
    namespace: &str,
    direction: Direction,
    peers: &mut BTreeMap<String, (NetworkPolicyPeer, BTreeSet<Direction>)>,
) -> Result<Option<PeerRef>, ProgramError> {
    if let Some(block) = &peer.ip_block {
        let Some(Peer::Block { cidr, except }) = ip_block(block) else {
            return Ok(None);
        };
        return Ok(Some(PeerRef::Block { cidr, except }));
    }
    for selector in [&peer.pod_selector, &peer.namespace_selector]
        .into_iter()
        .flatten()
    {
        check(selector)?;
    }
    let what = describe_peer(peer, namespace);
    let entry = peers
        .entry(what.clone())
        .or_insert_with(|| (peer.clone(), BTreeSet::new()));
    entry.1.insert(direction);
    Ok(Some(PeerRef::Pods(what)))
}
