//! The reference evaluator of the three tiers: what the API documentation says one connection
//! gets, the model the dataplane's tests compare the kernel with (as [`crate::effective::allows`]
//! is for NetworkPolicy alone).
//!
//! Each direction is decided on its own, from the point of view of the pod it concerns: the
//! source pod's egress and the destination pod's ingress; a connection passes when every
//! direction that concerns a pod allows it. For one direction of one pod:
//!
//! 1. **Admin tier**: the Admin policies selecting the pod, by priority (lowest first), each
//!    one's rules in order. The first rule that matches decides: `Accept` allows, `Deny` drops,
//!    `Pass` skips the rest of the Admin tier.
//! 2. **NetworkPolicy tier**: when NetworkPolicies isolate the pod in this direction, they
//!    decide ([`crate::effective`]): allowed if some rule admits, else dropped.
//! 3. **Baseline tier**: as the Admin tier, with the Baseline policies; `Pass` skips the rest.
//! 4. Nothing decided: allowed.
//!
//! Policies of one tier with the same priority are ordered by name. The API leaves their
//! order undefined ("the implementation can apply any of the matching policies"); the name
//! makes it stable, and the dataplane follows the same order.
//!
//! A pod's traffic to its own address is never filtered (the API: "a Pod connecting to its own
//! Pod IP is not subject to CNP"). An address that belongs to a pod is that pod, whichever
//! way the caller names it: the dataplane sees only addresses.

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::cluster::{Cluster, Pod, Protocol};
use crate::effective::{effective, Direction, Effective, Endpoint};
use crate::selector::{matches, SelectorError};

use super::compile::{Action, CompileError, PeerMatch, Policy, Rule, Tier};
use super::nodes::Node;
use super::types::ClusterNetworkPolicy;

/// The cluster, its ClusterNetworkPolicies in evaluation order, and its nodes.
#[derive(Debug, Clone)]
pub struct Evaluator<'a> {
    cluster: &'a Cluster,
    nodes: &'a [Node],
    /// Admin policies, then Baseline ones, each by (priority, name).
    policies: Vec<Policy>,
}

/// A rule of a ClusterNetworkPolicy that matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleRef {
    pub tier: Tier,
    pub policy: String,
    pub priority: u16,
    /// The rule's index in the policy's list of its direction.
    pub index: usize,
    pub name: Option<String>,
    pub action: Action,
}

/// Who decided one direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecidedBy {
    /// An `Accept` or `Deny` rule of the Admin or the Baseline tier.
    Rule(RuleRef),
    /// The NetworkPolicies isolating the pod (`namespace/name` of each): allowed by `rule`
    /// (`namespace/name` and index), or dropped when `None`.
    NetworkPolicy {
        policies: Vec<String>,
        rule: Option<(String, usize)>,
    },
    /// No tier decided: allowed, as Kubernetes is by default.
    Default,
}

/// The outcome of one direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub direction: Direction,
    pub allowed: bool,
    pub by: DecidedBy,
    /// The `Pass` rules that handed the decision on, in the order they matched (at most one
    /// per tier).
    pub passed: Vec<RuleRef>,
}

impl Decision {
    /// The tier that decided: `Admin`, `NetworkPolicy`, `Baseline` or `default`.
    pub fn tier_name(&self) -> &'static str {
        match &self.by {
            DecidedBy::Rule(r) => r.tier.name(),
            DecidedBy::NetworkPolicy { .. } => "NetworkPolicy",
            DecidedBy::Default => "default",
        }
    }
}

/// The outcome of one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    /// A pod to its own address: not filtered, no direction decided.
    pub loopback: bool,
    /// The source pod's egress, when the source is a pod.
    pub egress: Option<Decision>,
    /// The destination pod's ingress, when the destination is a pod.
    pub ingress: Option<Decision>,
}

/// What applies to one pod in one direction, in evaluation order.
#[derive(Debug, Clone)]
pub struct Applying<'e> {
    pub direction: Direction,
    /// The Admin policies selecting the pod that have rules in this direction.
    pub admin: Vec<&'e Policy>,
    pub network_policy: Effective,
    /// The Baseline policies selecting the pod that have rules in this direction.
    pub baseline: Vec<&'e Policy>,
}

/// One end as the evaluator sees it: its address, and the pod it belongs to if any.
#[derive(Debug, Clone, Copy)]
struct End<'x> {
    ip: IpAddr,
    pod: Option<&'x Pod>,
}

/// How one tier came out.
enum TierOutcome {
    Decided(RuleRef),
    Passed(RuleRef),
    Undecided,
}

impl<'a> Evaluator<'a> {
    /// The evaluator of `cluster` (pods, namespaces, NetworkPolicies), its `policies` and
    /// `nodes`; a policy that does not validate is the error.
    pub fn new(
        cluster: &'a Cluster,
        policies: &[ClusterNetworkPolicy],
        nodes: &'a [Node],
    ) -> Result<Evaluator<'a>, CompileError> {
        let compiled = policies
            .iter()
            .map(Policy::compile)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Evaluator::of_compiled(cluster, compiled, nodes))
    }

    /// The same from policies already compiled.
    pub fn of_compiled(
        cluster: &'a Cluster,
        mut policies: Vec<Policy>,
        nodes: &'a [Node],
    ) -> Evaluator<'a> {
        policies.sort_by(|a, b| (a.tier, a.priority, &a.name).cmp(&(b.tier, b.priority, &b.name)));
        Evaluator {
            cluster,
            nodes,
            policies,
        }
    }

    /// Every policy, in evaluation order.
    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    pub fn cluster(&self) -> &Cluster {
        self.cluster
    }

    pub fn nodes(&self) -> &[Node] {
        self.nodes
    }

    /// Whether a new connection from `src` to `dst` on `protocol`/`port` is allowed, and by
    /// whom in each direction.
    pub fn connection(
        &self,
        src: Endpoint,
        dst: Endpoint,
        protocol: Protocol,
        port: u16,
    ) -> Result<Verdict, SelectorError> {
        let (Some(src), Some(dst)) = (self.end(src), self.end(dst)) else {
            return Ok(Verdict {
                allowed: false,
                loopback: false,
                egress: None,
                ingress: None,
            });
        };
        if let (Some(s), Some(d)) = (src.pod, dst.pod) {
            if s.key() == d.key() {
                return Ok(Verdict {
                    allowed: true,
                    loopback: true,
                    egress: None,
                    ingress: None,
                });
            }
        }
        let egress = match src.pod {
            Some(s) => Some(self.decide_end(s, Direction::Egress, dst, protocol, port, dst.pod)?),
            None => None,
        };
        let ingress = match dst.pod {
            Some(d) => {
                Some(self.decide_end(d, Direction::Ingress, src, protocol, port, Some(d))?)
            }
            None => None,
        };
        let allowed = egress.iter().chain(&ingress).all(|d| d.allowed);
        Ok(Verdict {
            allowed,
            loopback: false,
            egress,
            ingress,
        })
    }

    /// [`Evaluator::connection`]'s verdict alone.
    pub fn allows(
        &self,
        src: Endpoint,
        dst: Endpoint,
        protocol: Protocol,
        port: u16,
    ) -> Result<bool, SelectorError> {
        Ok(self.connection(src, dst, protocol, port)?.allowed)
    }

    /// The decision for `pod` in `direction` about traffic with the other end `peer`.
    pub fn decide(
        &self,
        pod: &Pod,
        direction: Direction,
        peer: Endpoint,
        protocol: Protocol,
        port: u16,
    ) -> Result<Option<Decision>, SelectorError> {
        let Some(far) = self.end(peer) else {
            return Ok(None);
        };
        let destination = match direction {
            Direction::Ingress => Some(pod),
            Direction::Egress => far.pod,
        };
        self.decide_end(pod, direction, far, protocol, port, destination)
            .map(Some)
    }

    fn decide_end(
        &self,
        pod: &Pod,
        direction: Direction,
        far: End,
        protocol: Protocol,
        port: u16,
        destination: Option<&Pod>,
    ) -> Result<Decision, SelectorError> {
        let mut passed = Vec::new();
        let traffic = Traffic {
            far,
            protocol,
            port,
            destination,
        };
        match self.tier(Tier::Admin, pod, direction, &traffic)? {
            TierOutcome::Decided(r) => return Ok(decided(direction, r, passed)),
            TierOutcome::Passed(r) => passed.push(r),
            TierOutcome::Undecided => {}
        }
        let np = effective(self.cluster, pod, direction)?;
        if np.isolated() {
            let rule = np.rules.iter().find(|r| {
                r.peers
                    .as_ref()
                    .is_none_or(|ps| ps.iter().any(|p| p.admits(far.ip)))
                    && r.ports
                        .as_ref()
                        .is_none_or(|ps| ps.iter().any(|p| p.admits(protocol, port, destination)))
            });
            return Ok(Decision {
                direction,
                allowed: rule.is_some(),
                by: DecidedBy::NetworkPolicy {
                    policies: np.policies.clone(),
                    rule: rule.map(|r| (r.policy.clone(), r.index)),
                },
                passed,
            });
        }
        match self.tier(Tier::Baseline, pod, direction, &traffic)? {
            TierOutcome::Decided(r) => return Ok(decided(direction, r, passed)),
            TierOutcome::Passed(r) => passed.push(r),
            TierOutcome::Undecided => {}
        }
        Ok(Decision {
            direction,
            allowed: true,
            by: DecidedBy::Default,
            passed,
        })
    }

    /// The first rule of `tier` that matches, in evaluation order.
    fn tier(
        &self,
        tier: Tier,
        pod: &Pod,
        direction: Direction,
        traffic: &Traffic,
    ) -> Result<TierOutcome, SelectorError> {
        for policy in self.policies.iter().filter(|p| p.tier == tier) {
            if policy.rules(direction).is_empty() || !policy.selects(self.cluster, pod)? {
                continue;
            }
            for rule in policy.rules(direction) {
                if !self.rule_matches(rule, traffic)? {
                    continue;
                }
                let at = rule_ref(policy, rule);
                return Ok(match rule.action {
                    Action::Pass => TierOutcome::Passed(at),
                    Action::Accept | Action::Deny => TierOutcome::Decided(at),
                });
            }
        }
        Ok(TierOutcome::Undecided)
    }

    fn rule_matches(&self, rule: &Rule, traffic: &Traffic) -> Result<bool, SelectorError> {
        let ports = rule.ports.as_ref().is_none_or(|ps| {
            ps.iter()
                .any(|p| p.admits(traffic.protocol, traffic.port, traffic.destination))
        });
        if !ports {
            return Ok(false);
        }
        for peer in &rule.peers {
            if self.peer_matches(peer, traffic.far)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn peer_matches(&self, peer: &PeerMatch, far: End) -> Result<bool, SelectorError> {
        match peer {
            PeerMatch::Pods(selection) => match far.pod {
                Some(pod) => selection.selects(self.cluster, pod),
                None => Ok(false),
            },
            PeerMatch::Nodes(selector) => {
                for node in self.nodes.iter().filter(|n| n.addresses.contains(&far.ip)) {
                    if matches(selector, &node.labels)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            PeerMatch::Networks(nets) => Ok(nets.iter().any(|n| n.contains(&far.ip))),
        }
    }

    /// The addresses `peer` stands for, where they are a finite set (pods and nodes; `None`
    /// for networks).
    pub fn peer_addresses(
        &self,
        peer: &PeerMatch,
    ) -> Result<Option<BTreeSet<IpAddr>>, SelectorError> {
        let mut out = BTreeSet::new();
        match peer {
            PeerMatch::Pods(selection) => {
                for pod in &self.cluster.pods {
                    if selection.selects(self.cluster, pod)? {
                        out.extend(pod.ips.iter().copied());
                    }
                }
            }
            PeerMatch::Nodes(selector) => {
                for node in self.nodes {
                    if matches(selector, &node.labels)? {
                        out.extend(node.addresses.iter().copied());
                    }
                }
            }
            PeerMatch::Networks(_) => return Ok(None),
        }
        Ok(Some(out))
    }

    /// What applies to `pod` in `direction`: the Admin policies, the NetworkPolicies and the
    /// Baseline policies, each in evaluation order.
    pub fn applying(&self, pod: &Pod, direction: Direction) -> Result<Applying<'_>, SelectorError> {
        let mut admin = Vec::new();
        let mut baseline = Vec::new();
        for policy in &self.policies {
            if policy.rules(direction).is_empty() || !policy.selects(self.cluster, pod)? {
                continue;
            }
            match policy.tier {
                Tier::Admin => admin.push(policy),
                Tier::Baseline => baseline.push(policy),
            }
        }
        Ok(Applying {
            direction,
            admin,
            network_policy: effective(self.cluster, pod, direction)?,
            baseline,
        })
    }

    /// The policies selecting `pod` (whatever their rules), in evaluation order.
    pub fn selecting(&self, pod: &Pod) -> Result<Vec<&Policy>, SelectorError> {
        let mut out = Vec::new();
        for policy in &self.policies {
            if policy.selects(self.cluster, pod)? {
                out.push(policy);
            }
        }
        Ok(out)
    }

    /// The address and pod of `e`: an address of a pod is that pod.
    fn end<'x>(&'x self, e: Endpoint<'x>) -> Option<End<'x>> {
        match e {
            Endpoint::Pod(p) => p.ips.first().map(|&ip| End { ip, pod: Some(p) }),
            Endpoint::External(ip) => Some(End {
                ip,
                pod: self.cluster.pod_with_ip(ip),
            }),
        }
    }
}

/// The traffic one direction is decided for.
struct Traffic<'x> {
    far: End<'x>,
    protocol: Protocol,
    port: u16,
    /// The pod the destination port belongs to (for named ports).
    destination: Option<&'x Pod>,
}

fn rule_ref(policy: &Policy, rule: &Rule) -> RuleRef {
    RuleRef {
        tier: policy.tier,
        policy: policy.name.clone(),
        priority: policy.priority,
        index: rule.index,
        name: rule.name.clone(),
        action: rule.action,
    }
}

fn decided(direction: Direction, rule: RuleRef, passed: Vec<RuleRef>) -> Decision {
    Decision {
        direction,
        allowed: rule.action == Action::Accept,
        by: DecidedBy::Rule(rule),
        passed,
    }
}

#[cfg(test)]
mod tests;
