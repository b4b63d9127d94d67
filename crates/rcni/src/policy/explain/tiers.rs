//! A pod's explanation when ClusterNetworkPolicies exist: the ones selecting it, then per
//! direction the rules that apply in evaluation order: the Admin tier's (by priority, each
//! policy's rules in order), the NetworkPolicies', the Baseline tier's.
//!
//! ```text
//! Cluster network policies:
//!   Admin deny-metadata (priority 10): subject namespaces: any
//! Ingress, in evaluation order:
//!   Admin tier: no rule
//!   NetworkPolicy tier: isolated by x/allow-b
//!     x/allow-b[0]: from pods: pod=b in namespace x (1 address); on any port
//!   Baseline tier: not reached (NetworkPolicies isolate the pod)
//!   Otherwise: allowed
//! ```

use cni_policy::cluster_policy::{Applying, Evaluator, PeerMatch, Policy};
use cni_policy::{Direction, Pod, SelectorError};
use serde_json::{json, Value};

use super::Explanation;

/// What the tiers hold for one pod.
pub struct Tiers<'e> {
    evaluator: &'e Evaluator<'e>,
    /// Every ClusterNetworkPolicy selecting the pod, in evaluation order.
    selecting: Vec<&'e Policy>,
    ingress: Applying<'e>,
    egress: Applying<'e>,
}

impl<'e> Tiers<'e> {
    pub fn of(evaluator: &'e Evaluator<'e>, pod: &Pod) -> Result<Tiers<'e>, SelectorError> {
        Ok(Tiers {
            evaluator,
            selecting: evaluator.selecting(pod)?,
            ingress: evaluator.applying(pod, Direction::Ingress)?,
            egress: evaluator.applying(pod, Direction::Egress)?,
        })
    }

    /// `header` (the pod and its NetworkPolicies), the ClusterNetworkPolicies, each direction.
    pub fn to_text(&self, header: &str, np: &Explanation) -> String {
        let mut out = header.to_string();
        if self.selecting.is_empty() {
            out += "Cluster network policies: none selects the pod\n";
        } else {
            out += "Cluster network policies:\n";
            for p in &self.selecting {
                out += &format!(
                    "  {} {} (priority {}): subject {}\n",
                    p.tier.name(),
                    p.name,
                    p.priority,
                    p.subject
                );
            }
        }
        out += &self.direction_text(&self.ingress, &np.ingress.to_string());
        out += &self.direction_text(&self.egress, &np.egress.to_string());
        out
    }

    /// One direction; `np` is the NetworkPolicy explanation of it (`Ingress: isolated by...`).
    fn direction_text(&self, a: &Applying, np: &str) -> String {
        let mut out = format!("{:?}, in evaluation order:\n", a.direction);
        out += &self.tier_text("Admin", &a.admin, a.direction);
        // The NetworkPolicy lines without their direction, one level deeper.
        let mut lines = np.lines();
        let first = lines.next().unwrap_or_default();
        let first = first.split_once(": ").map_or(first, |(_, rest)| rest);
        out += &format!("  NetworkPolicy tier: {first}\n");
        for line in lines {
            out += &format!("  {line}\n");
        }
        if a.network_policy.isolated() {
            out += "  Baseline tier: not reached (NetworkPolicies isolate the pod)\n";
        } else {
            out += &self.tier_text("Baseline", &a.baseline, a.direction);
            out += "  Otherwise: allowed\n";
        }
        out
    }

    fn tier_text(&self, tier: &str, policies: &[&Policy], direction: Direction) -> String {
        if policies.is_empty() {
            return format!("  {tier} tier: no rule\n");
        }
        let mut out = format!("  {tier} tier:\n");
        for p in policies {
            for rule in p.rules(direction) {
                let towards = match direction {
                    Direction::Ingress => "from",
                    Direction::Egress => "to",
                };
                let peers: Vec<String> = rule.peers.iter().map(|x| self.peer_text(x)).collect();
                out += &format!(
                    "    {} (priority {}){}: {} {towards} {}; {}\n",
                    p.name,
                    p.priority,
                    rule.label(),
                    rule.action.name(),
                    peers.join(" or "),
                    rule.ports_text()
                );
            }
        }
        out
    }

    /// A peer with how many addresses it stands for now (pods and nodes).
    fn peer_text(&self, peer: &PeerMatch) -> String {
        match self.evaluator.peer_addresses(peer) {
            Ok(Some(ips)) if ips.len() == 1 => format!("{peer} (1 address)"),
            Ok(Some(ips)) => format!("{peer} ({} addresses)", ips.len()),
            _ => peer.to_string(),
        }
    }

    /// The tiers added to the JSON explanation: `clusterNetworkPolicies`, and per direction
    /// `admin` and `baseline` rule lists beside the NetworkPolicy ones (`isolated`, `rules`).
    pub fn add_json(&self, v: &mut Value) {
        let selecting: Vec<Value> = self
            .selecting
            .iter()
            .map(|p| {
                json!({"name": p.name, "tier": p.tier.name(), "priority": p.priority,
                    "subject": p.subject.to_string()})
            })
            .collect();
        v["clusterNetworkPolicies"] = Value::Array(selecting);
        for (key, a) in [("ingress", &self.ingress), ("egress", &self.egress)] {
            v[key]["admin"] = self.rules_json(&a.admin, a.direction);
            v[key]["baseline"] = self.rules_json(&a.baseline, a.direction);
        }
    }

    fn rules_json(&self, policies: &[&Policy], direction: Direction) -> Value {
        let mut out = Vec::new();
        for p in policies {
            for rule in p.rules(direction) {
                let peers: Vec<Value> = rule
                    .peers
                    .iter()
                    .map(|peer| {
                        let ips = self.evaluator.peer_addresses(peer).ok().flatten();
                        json!({"peer": peer.to_string(), "ips": ips})
                    })
                    .collect();
                let ports = rule
                    .ports
                    .as_ref()
                    .map(|ps| ps.iter().map(|p| p.to_string()).collect::<Vec<_>>());
                out.push(
                    json!({"policy": p.name, "priority": p.priority, "index": rule.index,
                    "name": rule.name, "action": rule.action.name(), "peers": peers,
                    "ports": ports}),
                );
            }
        }
        Value::Array(out)
    }
}
