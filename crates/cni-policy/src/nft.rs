//! The nf_tables program that enforces the policies of a node's pods. [`program`] builds it
//! as one atomic [`Batch`] that replaces the previous program (connections already
//! established keep flowing: the connection-tracking accept is part of every program);
//! [`Enforcer`] keeps it up to date from changes ([`Change`]), each batch of only the objects
//! that changed (set and verdict-map elements added or deleted, chains and sets created or
//! deleted, and only the chains whose rules changed flushed and rewritten).
//!
//! Layout, in the `inet` table [`TABLE`]:
//!
//! - two base chains on the `forward` hook: `egress` (priority 0) then `ingress` (priority 1).
//!   Each accepts packets of established connections, then dispatches with one verdict-map
//!   lookup (`ip saddr vmap @egress4`, `ip daddr vmap @ingress4`, and the `ip6` maps) on the
//!   pod the packet leaves or enters: a jump to the pod's chain in a direction a policy
//!   isolates it, and with the hold `accept` in the others (without the hold, a pod no
//!   policy isolates has no element and its packets pass). An `accept` ends only the base
//!   chain it is in, so a packet allowed out of its source pod is still checked into its
//!   destination pod.
//! - the hold ([`Enforcer::with_hold`]): after the dispatch, each base chain drops what is
//!   still from (egress: `ip saddr <subnet> drop`) or to (ingress: `ip daddr <subnet>
//!   drop`) the node's pod subnets. An address of the node that the program does not know
//!   (a pod whose ADD just allocated it, or whose labels are not known yet where a policy
//!   might select it) is dropped both ways from the instant it exists, and released by the
//!   batch that gives it its element. The node's own traffic to its pods takes the `output`
//!   hook, their replies the `input` hook: neither passes these chains, so the node (kubelet
//!   probes) reaches a held pod.
//! - one chain per isolated local pod and direction (`pod-e-…`, `pod-i-…`): a jump to the
//!   chain of each policy selecting the pod, then `drop`.
//! - one chain per policy and direction (`pol-e-…`, `pol-i-…`): one rule per allowed
//!   combination of peer and port, ending in `accept`.
//! - one address set per distinct pod-selecting peer (`peer4-…`, `peer6-…`), shared by every
//!   policy with the same selectors: the program grows with selectors, not with pods times
//!   policies.
//!
//! Object names come from [`pod_chain_name`], [`policy_chain_name`] and [`peer_set_name`]:
//! stable hashes, the same from one program to the next for the same pod, policy or peer.
//! The regular chains' rules are listed in name order; a pod chain jumps to its policies'
//! chains in the order of the policies' `namespace/name`.
//!
//! Bridged traffic between pods of one node reaches the `forward` hook through
//! `br_netfilter` (`net.bridge.bridge-nf-call-iptables` and `-ip6tables`, which the agent sets
//! in its namespace); traffic between nodes is routed and reaches it directly. Traffic from
//! the node itself to its pods (kubelet probes) takes the `output` hook and is never
//! filtered.

use std::collections::BTreeSet;
use std::net::IpAddr;

use cni_nft::{Batch, Family, SetType};
use ipnet::IpNet;

use crate::cluster::{Cluster, Pod};
use crate::effective::Direction;
use crate::selector::SelectorError;

mod enforcer;
mod objects;
mod rules;

pub use enforcer::{Change, Delta, Enforcer, PodId};
pub use objects::verdict_map as map;
pub use rules::{dispatch_map_name, BASE_CHAINS, MAPS};

/// The table the program lives in.
pub const TABLE: &str = "rcni_policy";
const F: Family = Family::Inet;

/// Why no program could be built.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    #[error(transparent)]
    Selector(#[from] SelectorError),
    #[error("nf_tables: {0}")]
    Nft(#[from] cni_nft::Error),
}

/// What a program holds, for metrics and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Policies known (whether or not they select a local pod).
    pub policies: usize,
    /// Local pods isolated in at least one direction.
    pub isolated_pods: usize,
    /// Policy chains (per policy and direction in use).
    pub policy_chains: usize,
    /// Peer address sets.
    pub peer_sets: usize,
    /// Addresses in peer sets and verdict maps.
    pub elements: usize,
    /// Addresses of local pods without a dispatch element in some direction (held).
    pub held_addresses: usize,
}

/// The program for the pods `is_local` picks (the pods whose traffic this node forwards),
/// as one batch that first removes the previous program: the first batch of a new
/// [`Enforcer`].
pub fn program(
    cluster: &Cluster,
    is_local: impl Fn(&Pod) -> bool,
) -> Result<(Batch, Summary), ProgramError> {
    Enforcer::new().update(cluster, is_local)
}

/// [`program`] with the hold of `subnets` (the node's pod subnets).
pub fn program_with_hold(
    subnets: &[IpNet],
    cluster: &Cluster,
    is_local: impl Fn(&Pod) -> bool,
) -> Result<(Batch, Summary), ProgramError> {
    Enforcer::with_hold(subnets.to_vec()).update(cluster, is_local)
}

/// The chain of pod `pod_key` (`namespace/name`) in `direction`.
pub fn pod_chain_name(pod_key: &str, direction: Direction) -> String {
    format!("pod-{}-{}", letter(direction), short_hash(pod_key))
}

/// The chain of policy `policy_key` (`namespace/name`) in `direction`.
pub fn policy_chain_name(policy_key: &str, direction: Direction) -> String {
    format!("pol-{}-{}", letter(direction), short_hash(policy_key))
}

/// The address set of the IPv4 (or IPv6) members of the pod-selecting peer described as
/// `what` ([`crate::Peer::Pods`]).
pub fn peer_set_name(what: &str, v6: bool) -> String {
    format!("peer{}-{}", if v6 { 6 } else { 4 }, short_hash(what))
}

/// The peer sets of the peer described as `what` with members `ips`: (name, key type,
/// members) for each address family that has members.
pub fn peer_sets(what: &str, ips: &BTreeSet<IpAddr>) -> Vec<(String, SetType, Vec<IpAddr>)> {
    [(false, SetType::Ipv4Addr), (true, SetType::Ipv6Addr)]
        .into_iter()
        .filter_map(|(v6, key)| {
            let members: Vec<IpAddr> = ips
                .iter()
                .copied()
                .filter(|ip| ip.is_ipv6() == v6)
                .collect();
            (!members.is_empty()).then(|| (peer_set_name(what, v6), key, members))
        })
        .collect()
}

fn letter(d: Direction) -> char {
    match d {
        Direction::Egress => 'e',
        Direction::Ingress => 'i',
    }
}

/// A stable 64-bit FNV-1a hash in hex: object names that stay the same from one program to
/// the next for the same pod, policy or selector.
fn short_hash(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}
