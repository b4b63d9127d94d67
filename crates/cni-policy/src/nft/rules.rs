//! The rules of the program: the skeleton (base chains dispatching through verdict maps), a
//! pod's chain (jumps to its policies' chains, then drop) and a policy's chain (one accept
//! per allowed combination of peer and port).

use std::net::IpAddr;

use cni_nft::{
    ct_state, Batch, Chain, ChainType, Hook, L4Proto, Policy, Rule, RuleBuilder, Set, SetType,
    VerdictMap,
};
use ipnet::IpNet;

use super::{peer_set_name, ProgramError, F, TABLE};
use crate::cluster::Protocol;
use crate::effective::{Direction, PortSpec};

/// The base chains on the `forward` hook: egress (dispatching by source), then ingress.
pub const BASE_CHAINS: [&str; 2] = ["egress", "ingress"];

/// The verdict maps and their key types.
pub const MAPS: [(&str, SetType); 4] = [
    ("egress4", SetType::Ipv4Addr),
    ("egress6", SetType::Ipv6Addr),
    ("ingress4", SetType::Ipv4Addr),
    ("ingress6", SetType::Ipv6Addr),
];

/// The verdict map dispatching `ip`'s packets of `direction`.
pub fn dispatch_map_name(direction: Direction, ip: IpAddr) -> &'static str {
    match (direction, ip) {
        (Direction::Egress, IpAddr::V4(_)) => "egress4",
        (Direction::Egress, IpAddr::V6(_)) => "egress6",
        (Direction::Ingress, IpAddr::V4(_)) => "ingress4",
        (Direction::Ingress, IpAddr::V6(_)) => "ingress6",
    }
}

/// The base chains, their connection-tracking accept, the verdict-map dispatch and, for each
/// network of `hold` (the node's pod subnets), a drop of what is still from it (egress) or to
/// it (ingress): an address of the node the dispatch does not know is held.
pub(super) fn skeleton(b: &mut Batch, hold: &[IpNet]) -> Result<(), ProgramError> {
    for (name, key) in MAPS {
        b.add_verdict_map(&VerdictMap::new(F, TABLE, name, key))?;
    }
    for (chain, priority, by_source) in [(BASE_CHAINS[0], 0, true), (BASE_CHAINS[1], 1, false)] {
        b.add_chain(
            &Chain::base(F, TABLE, chain, ChainType::Filter, Hook::Forward, priority)
                .with_policy(Policy::Accept),
        )?;
        b.add_rule(
            &Rule::builder(F, TABLE, chain)
                .ct_state(ct_state::ESTABLISHED | ct_state::RELATED)
                .accept()
                .build()?,
        );
        for (name, key) in MAPS.iter().filter(|(n, _)| n.starts_with(chain)) {
            let m = VerdictMap::new(F, TABLE, name, *key);
            let r = Rule::builder(F, TABLE, chain);
            let r = if by_source {
                r.saddr_vmap(&m)
            } else {
                r.daddr_vmap(&m)
            };
            b.add_rule(&r.build()?);
        }
        for net in hold {
            let r = Rule::builder(F, TABLE, chain);
            let r = if by_source {
                r.saddr(*net)
            } else {
                r.daddr(*net)
            };
            b.add_rule(&r.drop().build()?);
        }
    }
    Ok(())
}

/// The rules of a pod's chain: a jump to each policy chain, then drop.
pub(super) fn pod_chain(chain: &str, targets: &[String]) -> Result<Vec<Rule>, ProgramError> {
    let mut out = Vec::with_capacity(targets.len() + 1);
    for target in targets {
        out.push(Rule::builder(F, TABLE, chain).jump(target).build()?);
    }
    out.push(Rule::builder(F, TABLE, chain).drop().build()?);
    Ok(out)
}

/// The other end a policy rule names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum PeerRef {
    /// Pods, by the peer's description (the key of its address sets).
    Pods(String),
    Block {
        cidr: IpNet,
        except: Vec<IpNet>,
    },
}

/// One ingress or egress rule of a policy; `None` lists mean "every".
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PolicyRule {
    pub peers: Option<Vec<PeerRef>>,
    pub ports: Option<Vec<PortSpec>>,
}

/// What a policy chain's rules depend on beyond the policy itself.
pub(super) trait PolicyContext {
    /// Whether the pods of peer `what` have IPv4 and IPv6 addresses (a family without
    /// addresses gets no set and no rule).
    fn families(&self, what: &str) -> [bool; 2];
    /// The addresses and port numbers of the pods naming port `name` for `protocol`.
    fn named_port(&self, protocol: Protocol, name: &str) -> Vec<(IpAddr, u16)>;
}

/// The rules of a policy's chain in `direction`: one accept per combination of peer and port.
pub(super) fn policy_chain(
    chain: &str,
    direction: Direction,
    rules: &[PolicyRule],
    context: &dyn PolicyContext,
) -> Result<Vec<Rule>, ProgramError> {
    let mut out = Vec::new();
    for rule in rules {
        let peers: Vec<AddrMatch> = match &rule.peers {
            None => vec![AddrMatch::Any],
            Some(ps) => ps.iter().flat_map(|p| addr_matches(p, context)).collect(),
        };
        let ports: Vec<PortMatch> = match &rule.ports {
            None => vec![PortMatch::Any],
            Some(ps) => ps.iter().flat_map(|p| port_matches(p, context)).collect(),
        };
        for peer in &peers {
            for port in &ports {
                let r = port.apply(peer.apply(Rule::builder(F, TABLE, chain), direction));
                out.push(r.accept().build()?);
            }
        }
    }
    Ok(out)
}

/// How one rule matches the other end's address.
enum AddrMatch {
    Any,
    InSet(Set),
    Block { cidr: IpNet, except: Vec<IpNet> },
}

/// One match per address family the peer has addresses of; none for a pod selector that
/// selects no address, which then allows nothing.
fn addr_matches(peer: &PeerRef, context: &dyn PolicyContext) -> Vec<AddrMatch> {
    match peer {
        PeerRef::Block { cidr, except } => vec![AddrMatch::Block {
            cidr: *cidr,
            except: except.clone(),
        }],
        PeerRef::Pods(what) => {
            let families = context.families(what);
            [(false, SetType::Ipv4Addr), (true, SetType::Ipv6Addr)]
                .into_iter()
                .filter(|(v6, _)| families[usize::from(*v6)])
                .map(|(v6, key)| {
                    AddrMatch::InSet(Set::new(F, TABLE, &peer_set_name(what, v6), key))
                })
                .collect()
        }
    }
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

/// The port matches of one port spec; a named port becomes one match per pod naming it.
fn port_matches(port: &PortSpec, context: &dyn PolicyContext) -> Vec<PortMatch> {
    match port {
        PortSpec::Numbered {
            protocol,
            range: None,
        } => vec![PortMatch::Proto(l4(*protocol))],
        PortSpec::Numbered {
            protocol,
            range: Some((lo, hi)),
        } => vec![PortMatch::Range(l4(*protocol), *lo, *hi)],
        PortSpec::Named { protocol, name } => context
            .named_port(*protocol, name)
            .into_iter()
            .map(|(ip, number)| PortMatch::At(ip, l4(*protocol), number))
            .collect(),
    }
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
