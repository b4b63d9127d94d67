//! Decisions from the enforcer's own state, with no cluster snapshot: what a policy chain's
//! rules depend on ([`Context`]), whether the program lets a new connection through
//! ([`Enforcer::admits`], for deleting the conntrack entries of connections a change
//! denies), and which local pods a batch may have narrowed.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::super::objects::Touched;
use super::super::pod_chain_name;
use super::super::rules::{PeerRef, PolicyContext, PolicyRule};
use super::policy::PolicyState;
use super::{Enforcer, PodId, DIRECTIONS};
use crate::cluster::Protocol;
use crate::compact::PodInfo;
use crate::effective::{Direction, PortSpec};

/// What a policy chain's rules depend on, from the enforcer's state.
pub(super) struct Context<'a> {
    pub enforcer: &'a Enforcer,
    pub policy: &'a PolicyState,
    pub direction: Direction,
}

impl PolicyContext for Context<'_> {
    fn families(&self, what: &str) -> [bool; 2] {
        self.enforcer
            .peers
            .get(what)
            .map_or([false, false], |p| p.families.map(|n| n > 0))
    }

    /// For ingress the local pods the policy selects (its chain only sees traffic into
    /// them); for egress every pod with named ports (the peer match narrows it to the
    /// allowed destinations).
    fn named_port(&self, protocol: Protocol, name: &str) -> Vec<(IpAddr, u16)> {
        let ids: Box<dyn Iterator<Item = &PodId>> = match self.direction {
            Direction::Ingress => Box::new(self.policy.selected_local.iter()),
            Direction::Egress => Box::new(self.enforcer.named_port_pods.iter()),
        };
        ids.filter_map(|id| self.enforcer.pods.get(id))
            .filter_map(|s| Some((&s.pod.ips, s.pod.named_port(protocol, name)?)))
            .flat_map(|(ips, number)| ips.iter().map(move |ip| (*ip, number)))
            .collect()
    }
}

impl Enforcer {
    /// Whether the program lets a new connection from `src` to `dst` on `protocol`/`port`
    /// through: by the egress of `src` and the ingress of `dst` where they are local pods
    /// (others are not this node's to decide). An address of the node's pod subnets that is
    /// no local pod, or a local pod held in that direction, lets nothing through.
    pub fn admits(&self, src: IpAddr, dst: IpAddr, protocol: Protocol, port: u16) -> bool {
        let (from, to) = (self.local_ips.get(&src), self.local_ips.get(&dst));
        if from.is_some() && from == to {
            return true;
        }
        let connection = Connection {
            src,
            dst,
            protocol,
            port,
        };
        self.end_admits(from, src, Direction::Egress, &connection)
            && self.end_admits(to, dst, Direction::Ingress, &connection)
    }

    /// Whether the end `ip` (local pod `id`, if any) lets `connection` pass in `direction`.
    fn end_admits(
        &self,
        id: Option<&PodId>,
        ip: IpAddr,
        direction: Direction,
        connection: &Connection,
    ) -> bool {
        let Some(id) = id else {
            return !self.hold.iter().any(|net| net.contains(&ip));
        };
        let Some(state) = self.pods.get(id) else {
            return false;
        };
        let Some(ns) = self.namespaces.get(&*state.pod.namespace) else {
            return true;
        };
        let mut isolated = false;
        for key in &ns.policies {
            let Some(p) = self.policies.get(key) else {
                continue;
            };
            if !p.types.contains(&direction) {
                continue;
            }
            if state.pod.labels.is_none() {
                // Held where a policy of its namespace might select it; without a hold, its
                // packets pass.
                return self.hold.is_empty();
            }
            if !p.selected_local.contains(id) {
                continue;
            }
            isolated = true;
            let rules = p.rules(direction);
            if rules
                .iter()
                .any(|r| self.rule_admits(r, direction, connection))
            {
                return true;
            }
        }
        !isolated
    }

    fn rule_admits(&self, rule: &PolicyRule, direction: Direction, c: &Connection) -> bool {
        let other = match direction {
            Direction::Ingress => c.src,
            Direction::Egress => c.dst,
        };
        let peer_ok = rule.peers.as_ref().is_none_or(|peers| {
            peers.iter().any(|p| match p {
                PeerRef::Pods(what) => self
                    .peers
                    .get(what)
                    .is_some_and(|s| s.ips.contains_key(&other)),
                PeerRef::Block { cidr, except } => {
                    cidr.contains(&other) && !except.iter().any(|e| e.contains(&other))
                }
            })
        });
        let port_ok = rule.ports.as_ref().is_none_or(|ports| {
            ports.iter().any(|p| match p {
                PortSpec::Numbered { protocol, range } => {
                    *protocol == c.protocol
                        && range.is_none_or(|(lo, hi)| (lo..=hi).contains(&c.port))
                }
                PortSpec::Named { protocol, name } => {
                    *protocol == c.protocol
                        && self
                            .pod_at(c.dst)
                            .and_then(|pod| pod.named_port(c.protocol, name))
                            == Some(c.port)
                }
            })
        });
        peer_ok && port_ok
    }

    /// The pod with address `ip` among the local pods and the pods with named ports.
    fn pod_at(&self, ip: IpAddr) -> Option<&PodInfo> {
        if let Some(id) = self.local_ips.get(&ip) {
            return self.pods.get(id).map(|s| &*s.pod);
        }
        self.named_port_pods
            .iter()
            .filter_map(|id| self.pods.get(id))
            .map(|s| &*s.pod)
            .find(|p| p.ips.contains(&ip))
    }

    /// The addresses of the local pods a delta may have narrowed: their chains or the
    /// chains of the policies selecting them changed, a set their policies match lost
    /// members, or their dispatch element changed.
    pub(super) fn narrowed(&self, touched: &Touched) -> Vec<IpAddr> {
        let mut pods: BTreeSet<&PodId> = BTreeSet::new();
        if !touched.chains.is_empty() {
            let chains: BTreeSet<&str> = touched.chains.iter().map(String::as_str).collect();
            for key in &self.with_chains {
                let Some(p) = self.policies.get(key) else {
                    continue;
                };
                if p.chain_names.iter().any(|n| chains.contains(n.as_str())) {
                    pods.extend(&p.selected_local);
                }
            }
            for id in self.local_ips.values() {
                if DIRECTIONS
                    .iter()
                    .any(|d| chains.contains(pod_chain_name(id, *d).as_str()))
                {
                    pods.insert(id);
                }
            }
        }
        for set in &touched.shrunk_sets {
            let users = self
                .peers
                .values()
                .filter(|p| p.names.iter().any(|n| n == set))
                .flat_map(|p| &p.users);
            for key in users {
                if let Some(p) = self.policies.get(key) {
                    pods.extend(&p.selected_local);
                }
            }
        }
        let mut out: BTreeSet<IpAddr> = touched.dispatch.iter().copied().collect();
        for id in pods {
            if let Some(s) = self.pods.get(id) {
                out.extend(s.pod.ips.iter().copied());
            }
        }
        out.into_iter().collect()
    }
}

/// A new connection, as the program judges it.
struct Connection {
    src: IpAddr,
    dst: IpAddr,
    protocol: Protocol,
    port: u16,
}
