//! The nf_tables program that enforces the policies of a node's pods, built as one atomic
//! [`Batch`] that replaces the previous program (connections already established keep
//! flowing: the connection-tracking accept is part of every program).
//!
//! Layout, in the `inet` table [`TABLE`]:
//!
//! - two base chains on the `forward` hook: `egress` (priority 0) then `ingress` (priority 1).
//!   Each accepts packets of established connections, then dispatches with one verdict-map
//!   lookup (`ip saddr vmap @egress4`, `ip daddr vmap @ingress4`, and the `ip6` maps) to the
//!   chain of the pod the packet leaves or enters. A pod no policy isolates in a direction
//!   has no element and its packets pass. An `accept` ends only the base chain it is in, so
//!   a packet allowed out of its source pod is still checked into its destination pod.
//! - one chain per isolated local pod and direction (`pod-e-…`, `pod-i-…`): a jump to the
//!   chain of each policy selecting the pod, then `drop`.
//! - one chain per policy and direction (`pol-e-…`, `pol-i-…`): one rule per allowed
//!   combination of peer and port, ending in `accept`.
//! - one address set per distinct pod-selecting peer (`peer4-…`, `peer6-…`), shared by every
//!   policy with the same selectors: the program grows with selectors, not with pods times
//!   policies.
//!
//! Bridged traffic between pods of one node reaches the `forward` hook through
//! `br_netfilter` (`net.bridge.bridge-nf-call-iptables` and `-ip6tables`, which the agent sets
//! in its namespace); traffic between nodes is routed and reaches it directly. Traffic from
//! the node itself to its pods (kubelet probes) takes the `output` hook and is never
//! filtered.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use cni_nft::{
    ct_state, Batch, Chain, ChainType, Family, Hook, L4Proto, Policy, Rule, RuleBuilder, Set,
    SetElement, SetType, Verdict, VerdictMap,
};

use crate::cluster::{Cluster, Pod, Protocol};
use crate::effective::{effective, Direction, Peer, PortSpec};
use crate::selector::SelectorError;

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
    /// Local pods isolated in at least one direction.
    pub isolated_pods: usize,
    /// Policy chains (per policy and direction in use).
    pub policy_chains: usize,
    /// Peer address sets.
    pub peer_sets: usize,
    /// Addresses in peer sets and verdict maps.
    pub elements: usize,
}

/// The program for the pods `is_local` picks (the pods whose traffic this node forwards),
/// as one batch that first removes the previous program.
pub fn program(
    cluster: &Cluster,
    is_local: impl Fn(&Pod) -> bool,
) -> Result<(Batch, Summary), ProgramError> {
    let mut b = Builder::default();
    b.batch.add_table(F, TABLE)?;
    b.batch.destroy_table(F, TABLE)?;
    b.batch.add_table(F, TABLE)?;
    b.skeleton()?;
    for pod in cluster.pods.iter().filter(|p| is_local(p)) {
        let mut isolated = false;
        for direction in [Direction::Egress, Direction::Ingress] {
            let eff = effective(cluster, pod, direction)?;
            if !eff.isolated() {
                continue;
            }
            isolated = true;
            let chain = b.pod_chain(pod, direction)?;
            for policy in &eff.policies {
                let target = b.policy_chain(cluster, policy, direction, &eff.rules)?;
                b.rule(Rule::builder(F, TABLE, &chain).jump(&target))?;
            }
            b.rule(Rule::builder(F, TABLE, &chain).drop())?;
            b.dispatch(pod, direction, &chain)?;
        }
        b.summary.isolated_pods += usize::from(isolated);
    }
    b.flush_maps()?;
    Ok((b.batch, b.summary))
}

#[derive(Default)]
struct Builder {
    batch: Batch,
    summary: Summary,
    /// Policy chains already written, by name.
    policy_chains: BTreeSet<String>,
    /// Peer sets already written, by name.
    peer_sets: BTreeSet<String>,
    /// Verdict map elements, per map name.
    dispatch: BTreeMap<&'static str, Vec<(IpAddr, Verdict)>>,
}

/// The base chains on the `forward` hook: egress (dispatching by source), then ingress.
pub const BASE_CHAINS: [&str; 2] = ["egress", "ingress"];

/// The verdict maps dispatching to pod chains, with their key type.
pub const MAPS: [(&str, SetType); 4] = [
    ("egress4", SetType::Ipv4Addr),
    ("egress6", SetType::Ipv6Addr),
    ("ingress4", SetType::Ipv4Addr),
    ("ingress6", SetType::Ipv6Addr),
];

/// The verdict map `name` of [`MAPS`].
pub fn map(name: &str) -> VerdictMap {
    let key = MAPS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(SetType::Ipv4Addr, |(_, k)| *k);
    VerdictMap::new(F, TABLE, name, key)
}

impl Builder {
    fn rule(&mut self, rule: RuleBuilder) -> Result<(), ProgramError> {
        self.batch.add_rule(&rule.build()?);
        Ok(())
    }

    /// The base chains, their connection-tracking accept and the verdict-map dispatch.
    fn skeleton(&mut self) -> Result<(), ProgramError> {
        for (name, _) in MAPS {
            self.batch.add_verdict_map(&map(name))?;
        }
        for (chain, priority, maps, by_source) in [
            (BASE_CHAINS[0], 0, ["egress4", "egress6"], true),
            (BASE_CHAINS[1], 1, ["ingress4", "ingress6"], false),
        ] {
            self.batch.add_chain(
                &Chain::base(F, TABLE, chain, ChainType::Filter, Hook::Forward, priority)
                    .with_policy(Policy::Accept),
            )?;
            self.rule(
                Rule::builder(F, TABLE, chain)
                    .ct_state(ct_state::ESTABLISHED | ct_state::RELATED)
                    .accept(),
            )?;
            for m in maps {
                let m = map(m);
                let r = Rule::builder(F, TABLE, chain);
                self.rule(if by_source {
                    r.saddr_vmap(&m)
                } else {
                    r.daddr_vmap(&m)
                })?;
            }
        }
        Ok(())
    }

    fn pod_chain(&mut self, pod: &Pod, direction: Direction) -> Result<String, ProgramError> {
        let name = pod_chain_name(&pod.key(), direction);
        self.batch.add_chain(&Chain::regular(F, TABLE, &name))?;
        Ok(name)
    }

    /// The verdict-map elements sending `pod`'s packets of `direction` to `chain`.
    fn dispatch(
        &mut self,
        pod: &Pod,
        direction: Direction,
        chain: &str,
    ) -> Result<(), ProgramError> {
        for ip in &pod.ips {
            let map = dispatch_map_name(direction, *ip);
            self.dispatch
                .entry(map)
                .or_default()
                .push((*ip, Verdict::Jump(chain.to_string())));
        }
        Ok(())
    }

    fn flush_maps(&mut self) -> Result<(), ProgramError> {
        for (name, elements) in std::mem::take(&mut self.dispatch) {
            self.summary.elements += elements.len();
            self.batch.add_verdict_elements(&map(name), &elements)?;
        }
        Ok(())
    }

    /// The chain of `policy`'s rules in `direction` (written once however many pods it
    /// selects). `rules` are the pod's resolved rules; the policy's own are those naming it.
    fn policy_chain(
        &mut self,
        cluster: &Cluster,
        policy: &str,
        direction: Direction,
        rules: &[crate::effective::Rule],
    ) -> Result<String, ProgramError> {
        let name = policy_chain_name(policy, direction);
        if !self.policy_chains.insert(name.clone()) {
            return Ok(name);
        }
        self.summary.policy_chains += 1;
        self.batch.add_chain(&Chain::regular(F, TABLE, &name))?;
        for rule in rules.iter().filter(|r| r.policy == policy) {
            let peers = match &rule.peers {
                None => vec![None],
                Some(ps) => ps.iter().map(Some).collect(),
            };
            let ports = match &rule.ports {
                None => vec![None],
                Some(ps) => ps.iter().map(Some).collect(),
            };
            for peer in &peers {
                for matcher in self.peer_matchers(*peer)? {
                    for port in &ports {
                        for port_match in port_matchers(cluster, *port, direction, policy) {
                            let r = Rule::builder(F, TABLE, &name);
                            let r = port_match.apply(matcher.apply(r, direction));
                            self.rule(r.accept())?;
                        }
                    }
                }
            }
        }
        Ok(name)
    }

    /// How a rule matches `peer` (one matcher per address family with addresses; none for a
    /// pod selector that selects no address, which then allows nothing).
    fn peer_matchers(&mut self, peer: Option<&Peer>) -> Result<Vec<AddrMatch>, ProgramError> {
        match peer {
            None => Ok(vec![AddrMatch::Any]),
            Some(Peer::Block { cidr, except }) => Ok(vec![AddrMatch::Block {
                cidr: *cidr,
                except: except.clone(),
            }]),
            Some(Peer::Pods { what, ips }) => {
                let mut out = Vec::new();
                for (name, key, members) in peer_sets(what, ips) {
                    let set = Set::new(F, TABLE, &name, key);
                    if self.peer_sets.insert(name) {
                        self.summary.peer_sets += 1;
                        self.summary.elements += members.len();
                        self.batch.add_set(&set)?;
                        let elements: Vec<SetElement> =
                            members.iter().map(|ip| SetElement::addr(*ip)).collect();
                        self.batch.add_elements(&set, &elements)?;
                    }
                    out.push(AddrMatch::InSet(set));
                }
                Ok(out)
            }
        }
    }
}

/// How one rule matches the other end's address.
enum AddrMatch {
    Any,
    InSet(Set),
    Block {
        cidr: ipnet::IpNet,
        except: Vec<ipnet::IpNet>,
    },
}

impl AddrMatch {
    /// Ingress rules match the source, egress rules the destination.
    fn apply(&self, r: RuleBuilder, direction: Direction) -> RuleBuilder {
        let source = direction == Direction::Ingress;
        match self {
            AddrMatch::Any => r,
            AddrMatch::InSet(set) if source => r.saddr_in(set),
            AddrMatch::InSet(set) => r.daddr_in(set),
            AddrMatch::Block { cidr, except } => {
                let mut r = if source {
                    r.saddr(*cidr)
                } else {
                    r.daddr(*cidr)
                };
                for e in except {
                    r = if source {
                        r.saddr_not(*e)
                    } else {
                        r.daddr_not(*e)
                    };
                }
                r
            }
        }
    }
}

/// How one rule matches the destination port.
enum PortMatch {
    Any,
    Proto(L4Proto),
    Range(L4Proto, u16, u16),
    /// A named port resolved for one destination address.
    At(IpAddr, L4Proto, u16),
}

impl PortMatch {
    fn apply(&self, r: RuleBuilder) -> RuleBuilder {
        match *self {
            PortMatch::Any => r,
            PortMatch::Proto(p) => r.l4proto(p),
            PortMatch::Range(p, lo, hi) if lo == hi => r.dport(p, lo),
            PortMatch::Range(p, lo, hi) => r.dport_range(p, lo, hi),
            PortMatch::At(ip, p, port) => r.daddr(ip).dport(p, port),
        }
    }
}

fn l4(p: Protocol) -> L4Proto {
    match p {
        Protocol::Tcp => L4Proto::Tcp,
        Protocol::Udp => L4Proto::Udp,
        Protocol::Sctp => L4Proto::Sctp,
    }
}

/// The port matches of one port spec. A named port becomes one match per pod that names
/// it: for ingress the pods the policy selects, for egress every pod (the peer match
/// narrows it to the allowed destinations).
fn port_matchers(
    cluster: &Cluster,
    port: Option<&PortSpec>,
    direction: Direction,
    policy: &str,
) -> Vec<PortMatch> {
    match port {
        None => vec![PortMatch::Any],
        Some(PortSpec::Numbered {
            protocol,
            range: None,
        }) => vec![PortMatch::Proto(l4(*protocol))],
        Some(PortSpec::Numbered {
            protocol,
            range: Some((lo, hi)),
        }) => vec![PortMatch::Range(l4(*protocol), *lo, *hi)],
        Some(PortSpec::Named { protocol, name }) => {
            let selected = |pod: &Pod| {
                direction == Direction::Egress
                    || cluster
                        .policies
                        .iter()
                        .filter(|p| policy_key(p) == policy)
                        .any(|p| crate::effective::selects(p, pod).unwrap_or(false))
            };
            cluster
                .pods
                .iter()
                .filter(|pod| selected(pod))
                .filter_map(|pod| {
                    let &(np, number) = pod.named_ports.get(name)?;
                    (np == *protocol).then_some((pod, number))
                })
                .flat_map(|(pod, number)| {
                    pod.ips
                        .iter()
                        .map(move |ip| PortMatch::At(*ip, l4(*protocol), number))
                })
                .collect()
        }
    }
}

fn policy_key(p: &k8s_openapi::api::networking::v1::NetworkPolicy) -> String {
    format!(
        "{}/{}",
        crate::effective::policy_namespace(p),
        p.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The chain of pod `pod_key` (`namespace/name`) in `direction`.
pub fn pod_chain_name(pod_key: &str, direction: Direction) -> String {
    format!("pod-{}-{}", letter(direction), short_hash(pod_key))
}

/// The chain of policy `policy` (`namespace/name`) in `direction`.
pub fn policy_chain_name(policy: &str, direction: Direction) -> String {
    format!("pol-{}-{}", letter(direction), short_hash(policy))
}

/// The address set of a pod-selecting peer (`what` of [`Peer::Pods`]), per family.
pub fn peer_set_name(what: &str, v6: bool) -> String {
    format!("peer{}-{}", if v6 { 6 } else { 4 }, short_hash(what))
}

/// The address sets of a pod-selecting peer (`what` and `ips` of [`Peer::Pods`]): one per
/// address family with members, as name, key type and members.
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

/// The verdict map holding `ip`'s element for `direction`.
pub fn dispatch_map_name(direction: Direction, ip: IpAddr) -> &'static str {
    match (direction, ip) {
        (Direction::Egress, IpAddr::V4(_)) => "egress4",
        (Direction::Egress, IpAddr::V6(_)) => "egress6",
        (Direction::Ingress, IpAddr::V4(_)) => "ingress4",
        (Direction::Ingress, IpAddr::V6(_)) => "ingress6",
    }
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
