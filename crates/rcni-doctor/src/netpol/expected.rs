//! What the node's `inet rcni_policy` table should hold for the cluster as stored: per local
//! pod and direction, its chain, the policy chains it jumps to and the peer sets their rules
//! use, named as `cni_policy::nft` names them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use cni_policy::effective::{effective, Direction, Peer};
use cni_policy::nft::{peer_sets, pod_chain_name, policy_chain_name};
use cni_policy::{Cluster, SelectorError};

/// The program of one node, as names and members.
#[derive(Debug, Default)]
pub struct Expected {
    /// Every local pod, in the cluster's order.
    pub pods: Vec<PodPlan>,
    /// The policy each policy chain belongs to, by chain name.
    pub policy_chains: BTreeMap<String, String>,
    /// Peer sets by name.
    pub peer_sets: BTreeMap<String, PeerSet>,
}

/// One local pod.
#[derive(Debug)]
pub struct PodPlan {
    /// `namespace/name`.
    pub key: String,
    pub ips: Vec<IpAddr>,
    /// Ingress, then egress.
    pub directions: Vec<DirectionPlan>,
}

/// One pod in one direction.
#[derive(Debug)]
pub struct DirectionPlan {
    pub direction: Direction,
    /// Selected by some policy of this direction (then its packets go through `chain`).
    pub isolated: bool,
    pub chain: String,
    /// The policy chains `chain` jumps to, in order.
    pub jumps: Vec<String>,
    /// The peer sets the rules of those policies match.
    pub peer_sets: BTreeSet<String>,
}

/// The addresses of one pod-selecting peer.
#[derive(Debug)]
pub struct PeerSet {
    /// The peer's selectors in words.
    pub what: String,
    pub members: BTreeSet<IpAddr>,
}

impl Expected {
    /// The program for the pods `is_local` picks.
    pub fn of(cluster: &Cluster, is_local: impl Fn(&str) -> bool) -> Result<Self, SelectorError> {
        let mut out = Expected::default();
        for pod in cluster.pods.iter().filter(|p| is_local(&p.key())) {
            let mut directions = Vec::new();
            for direction in [Direction::Ingress, Direction::Egress] {
                let eff = effective(cluster, pod, direction)?;
                let mut plan = DirectionPlan {
                    direction,
                    isolated: eff.isolated(),
                    chain: pod_chain_name(&pod.key(), direction),
                    jumps: Vec::new(),
                    peer_sets: BTreeSet::new(),
                };
                for policy in &eff.policies {
                    let chain = policy_chain_name(policy, direction);
                    out.policy_chains.insert(chain.clone(), policy.clone());
                    plan.jumps.push(chain);
                }
                for rule in &eff.rules {
                    for peer in rule.peers.iter().flatten() {
                        plan.peer_sets.extend(out.add_peer_sets(peer));
                    }
                }
                directions.push(plan);
            }
            out.pods.push(PodPlan {
                key: pod.key(),
                ips: pod.ips.clone(),
                directions,
            });
        }
        Ok(out)
    }

    /// The sets of a pod-selecting peer (one per address family with members; none for an
    /// ipBlock, matched without a set).
    fn add_peer_sets(&mut self, peer: &Peer) -> Vec<String> {
        let Peer::Pods { what, ips } = peer else {
            return Vec::new();
        };
        let mut names = Vec::new();
        for (name, _, members) in peer_sets(what, ips) {
            self.peer_sets.entry(name.clone()).or_insert(PeerSet {
                what: what.clone(),
                members: members.into_iter().collect(),
            });
            names.push(name);
        }
        names
    }

    /// The local pods isolated in some direction.
    pub fn isolated(&self) -> Vec<&str> {
        self.pods
            .iter()
            .filter(|p| p.directions.iter().any(|d| d.isolated))
            .map(|p| p.key.as_str())
            .collect()
    }
}
