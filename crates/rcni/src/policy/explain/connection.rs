//! `explain POD --from PEER` or `--to PEER`: one new connection judged by the reference
//! evaluator, and for each direction the tier and rule that decided it.
//!
//! ```text
//! Connection shop/frontend-1 (198.19.2.7) -> shop/web-1 (198.19.1.5) TCP/8080: allowed
//!   Egress of shop/frontend-1: allowed by default (no tier decides it)
//!   Ingress of shop/web-1: allowed by the NetworkPolicy tier: shop/web-from-frontend[0]
//! ```

use std::net::IpAddr;

use cni_policy::cluster_policy::{DecidedBy, Decision, Evaluator, RuleRef, Verdict};
use cni_policy::effective::Endpoint;
use cni_policy::{Pod, Protocol};
use cni_types::code;
use serde_json::{json, Value};

use crate::policy::Problem;

/// The connection asked about, from the explained pod's point of view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// `true`: from `peer` to the pod (`--from`); `false`: from the pod to `peer` (`--to`).
    pub inbound: bool,
    /// `NAMESPACE/NAME` of a published pod, or an address.
    pub peer: String,
    pub protocol: Protocol,
    pub port: u16,
}

impl Connection {
    /// The connection of the flags, if `--from` or `--to` is given.
    pub fn of(
        from: &Option<String>,
        to: &Option<String>,
        protocol: &str,
        port: Option<u16>,
    ) -> Result<Option<Connection>, Problem> {
        let (inbound, peer) = match (from, to) {
            (Some(f), _) => (true, f.clone()),
            (None, Some(t)) => (false, t.clone()),
            (None, None) => return Ok(None),
        };
        let protocol = Protocol::parse(&protocol.to_ascii_uppercase()).ok_or_else(|| {
            Problem::new(
                code::INVALID_ENVIRONMENT,
                format!("error: --protocol {protocol:?}: TCP, UDP or SCTP"),
            )
        })?;
        let port = port.ok_or_else(|| {
            Problem::new(
                code::INVALID_ENVIRONMENT,
                "error: give the connection's --port",
            )
        })?;
        Ok(Some(Connection {
            inbound,
            peer,
            protocol,
            port,
        }))
    }

    /// Judges the connection with `pod` at one end.
    pub fn decide<'p>(
        &self,
        evaluator: &'p Evaluator<'p>,
        pod: &'p Pod,
    ) -> Result<Decided<'p>, Problem> {
        let peer = self.endpoint(evaluator)?;
        let (src, dst) = match self.inbound {
            true => (peer, Endpoint::Pod(pod)),
            false => (Endpoint::Pod(pod), peer),
        };
        let verdict = evaluator
            .connection(src, dst, self.protocol, self.port)
            .map_err(|e| Problem::new(code::DECODING_FAILURE, format!("error: {e}")))?;
        Ok(Decided {
            src,
            dst,
            protocol: self.protocol,
            port: self.port,
            verdict,
        })
    }

    fn endpoint<'p>(&self, evaluator: &'p Evaluator<'p>) -> Result<Endpoint<'p>, Problem> {
        if let Some((ns, name)) = self.peer.split_once('/') {
            return evaluator
                .cluster()
                .pod(ns, name)
                .map(Endpoint::Pod)
                .ok_or_else(|| {
                    Problem::new(
                        code::UNKNOWN_CONTAINER,
                        format!(
                            "error: pod {} is not known (no node publishes it)",
                            self.peer
                        ),
                    )
                });
        }
        self.peer
            .parse::<IpAddr>()
            .map(Endpoint::External)
            .map_err(|_| {
                Problem::new(
                    code::INVALID_ENVIRONMENT,
                    format!(
                        "error: {:?}: give a pod as NAMESPACE/NAME or an address",
                        self.peer
                    ),
                )
            })
    }
}

/// A judged connection.
pub struct Decided<'p> {
    src: Endpoint<'p>,
    dst: Endpoint<'p>,
    protocol: Protocol,
    port: u16,
    verdict: Verdict,
}

impl Decided<'_> {
    pub fn to_text(&self) -> String {
        let outcome = if self.verdict.allowed {
            "allowed"
        } else {
            "denied"
        };
        let mut out = format!(
            "Connection {} -> {} {}/{}: {outcome}\n",
            end_text(self.src),
            end_text(self.dst),
            self.protocol,
            self.port
        );
        if self.verdict.loopback {
            out += "  a pod's traffic to its own address is not filtered\n";
        }
        if let Some(d) = &self.verdict.egress {
            out += &format!("  Egress of {}: {}\n", end_name(self.src), decision_text(d));
        }
        if let Some(d) = &self.verdict.ingress {
            out += &format!(
                "  Ingress of {}: {}\n",
                end_name(self.dst),
                decision_text(d)
            );
        }
        out
    }

    pub fn to_json(&self) -> Value {
        json!({
            "from": end_name(self.src), "to": end_name(self.dst),
            "protocol": self.protocol.to_string(), "port": self.port,
            "allowed": self.verdict.allowed, "loopback": self.verdict.loopback,
            "egress": self.verdict.egress.as_ref().map(decision_json),
            "ingress": self.verdict.ingress.as_ref().map(decision_json),
        })
    }
}

fn end_name(e: Endpoint) -> String {
    match e {
        Endpoint::Pod(p) => p.key(),
        Endpoint::External(ip) => ip.to_string(),
    }
}

fn end_text(e: Endpoint) -> String {
    match e {
        Endpoint::Pod(p) => {
            let ip = p.ips.first().map(|ip| ip.to_string()).unwrap_or_default();
            format!("{} ({ip})", p.key())
        }
        Endpoint::External(ip) => ip.to_string(),
    }
}

/// `Admin deny-metadata[0] "no-md" (priority 10)`.
fn rule_text(r: &RuleRef) -> String {
    let name = match &r.name {
        Some(n) if !n.is_empty() => format!(" {n:?}"),
        _ => String::new(),
    };
    format!(
        "{}[{}]{name} (priority {}, {})",
        r.policy,
        r.index,
        r.priority,
        r.action.name()
    )
}

/// `denied by the Admin tier: deny-y[0] (priority 10, Deny)`, with the Pass rules passed.
pub fn decision_text(d: &Decision) -> String {
    let outcome = if d.allowed { "allowed" } else { "denied" };
    let by = match &d.by {
        DecidedBy::Rule(r) => format!("by the {} tier: {}", r.tier.name(), rule_text(r)),
        DecidedBy::NetworkPolicy {
            rule: Some((p, i)), ..
        } => format!("by the NetworkPolicy tier: {p}[{i}]"),
        DecidedBy::NetworkPolicy {
            policies,
            rule: None,
        } => format!(
            "by the NetworkPolicy tier: isolated by {} and no rule admits it",
            policies.join(", ")
        ),
        DecidedBy::Default => "by default (no tier decides it)".to_string(),
    };
    let passes: String = d
        .passed
        .iter()
        .map(|p| {
            format!(
                ", after the {} tier passed it at {}",
                p.tier.name(),
                rule_text(p)
            )
        })
        .collect();
    format!("{outcome} {by}{passes}")
}

fn rule_json(r: &RuleRef) -> Value {
    json!({"tier": r.tier.name(), "policy": r.policy, "priority": r.priority,
        "index": r.index, "name": r.name, "action": r.action.name()})
}

fn decision_json(d: &Decision) -> Value {
    let by = match &d.by {
        DecidedBy::Rule(r) => json!({"tier": r.tier.name(), "rule": rule_json(r)}),
        DecidedBy::NetworkPolicy { policies, rule } => json!({"tier": "NetworkPolicy",
            "policies": policies,
            "rule": rule.as_ref().map(|(p, i)| json!({"policy": p, "index": i}))}),
        DecidedBy::Default => json!({"tier": null}),
    };
    let passed: Vec<Value> = d.passed.iter().map(rule_json).collect();
    json!({"allowed": d.allowed, "decidedBy": by, "passed": passed})
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_policy::cluster_policy::{Action, Tier};
    use cni_policy::Direction;

    #[test]
    fn decisions_in_words() {
        let pass = RuleRef {
            tier: Tier::Admin,
            policy: "delegate".into(),
            priority: 3,
            index: 0,
            name: None,
            action: Action::Pass,
        };
        let isolated = Decision {
            direction: Direction::Ingress,
            allowed: false,
            by: DecidedBy::NetworkPolicy {
                policies: vec!["x/a".into(), "x/b".into()],
                rule: None,
            },
            passed: vec![pass],
        };
        assert_eq!(
            decision_text(&isolated),
            "denied by the NetworkPolicy tier: isolated by x/a, x/b and no rule admits it, \
             after the Admin tier passed it at delegate[0] (priority 3, Pass)"
        );
        let json = decision_json(&isolated);
        assert_eq!(json["decidedBy"]["tier"], "NetworkPolicy");
        assert_eq!(json["decidedBy"]["rule"], Value::Null);
        assert_eq!(json["passed"][0]["policy"], "delegate");
        let default = Decision {
            direction: Direction::Egress,
            allowed: true,
            by: DecidedBy::Default,
            passed: vec![],
        };
        assert_eq!(
            decision_text(&default),
            "allowed by default (no tier decides it)"
        );
    }

    #[test]
    fn the_flags_make_a_connection() {
        let none = Connection::of(&None, &None, "TCP", None).unwrap();
        assert_eq!(none, None);
        let c = Connection::of(&Some("x/a".into()), &None, "udp", Some(53))
            .unwrap()
            .unwrap();
        assert!(c.inbound);
        assert_eq!((c.protocol, c.port), (Protocol::Udp, 53));
        assert!(Connection::of(&None, &Some("x/a".into()), "icmp", Some(1)).is_err());
    }
}
