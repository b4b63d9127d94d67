//! A flow: the policy verdicts the kernel gave one kind of connection attempt (same verdict,
//! direction, protocol, source and destination address and destination port), with when
//! they were first and last seen and how many records the kernel sent. Its JSON form is what
//! `/flows` serves and `rcni flows --json` prints, one object per line:
//!
//! ```json
//! {"time":"2025-05-01T10:00:02.117Z","firstSeen":"2025-05-01T10:00:01.004Z",
//!  "verdict":"denied","direction":"ingress","protocol":"TCP",
//!  "src":{"ip":"198.19.1.5","port":40312,"namespace":"shop","pod":"web-1"},
//!  "dst":{"ip":"198.19.2.7","port":5432,"namespace":"shop","pod":"db-0"},
//!  "policies":["shop/db-ingress"],"count":3}
//! ```
//!
//! For a denied flow `policies` are the policies isolating the pod in that direction (none
//! of which allowed it); for an allowed one, the policy whose `rule` allowed it. A held flow
//! was dropped because its pod's address was not programmed yet (its labels unknown).

use std::fmt;
use std::net::IpAddr;

use jiff::Timestamp;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What the policy program did with the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// A policy isolates the pod in this direction and none allows the connection.
    Denied,
    /// A policy rule allows it (recorded with `--flow-log all`).
    Allowed,
    /// The pod's address was not programmed yet: held until the agent knows its labels.
    Held,
}

/// Which side of the pod the verdict was given on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Leaving the pod (the source is the node's pod).
    Egress,
    /// Entering the pod (the destination is the node's pod).
    Ingress,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Denied => "denied",
            Verdict::Allowed => "allowed",
            Verdict::Held => "held",
        }
    }
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::Egress => "egress",
            Direction::Ingress => "ingress",
        }
    }
}

/// A transport protocol by its IP number, written by name where it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Protocol(pub u8);

impl Protocol {
    pub const TCP: Protocol = Protocol(6);
    pub const UDP: Protocol = Protocol(17);
    pub const SCTP: Protocol = Protocol(132);

    const NAMES: [(u8, &'static str); 5] = [
        (6, "TCP"),
        (17, "UDP"),
        (132, "SCTP"),
        (1, "ICMP"),
        (58, "ICMPv6"),
    ];

    /// `TCP`, `UDP`, `SCTP`, `ICMP`, `ICMPv6`, or the number.
    pub fn parse(s: &str) -> Option<Protocol> {
        Self::NAMES
            .iter()
            .find(|(_, n)| n.eq_ignore_ascii_case(s))
            .map(|(p, _)| Protocol(*p))
            .or_else(|| s.parse().ok().map(Protocol))
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Self::NAMES.iter().find(|(p, _)| *p == self.0) {
            Some((_, name)) => f.write_str(name),
            None => write!(f, "{}", self.0),
        }
    }
}

impl Serialize for Protocol {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Protocol {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Protocol, D::Error> {
        let s = String::deserialize(d)?;
        Protocol::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("protocol {s:?}")))
    }
}

/// One end of a flow: its address and port, and the pod holding the address when the agent
/// knows it (any node's pod).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Endpoint {
    pub ip: IpAddr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
}

impl Endpoint {
    /// `namespace/pod`, when the pod is known.
    pub fn pod_key(&self) -> Option<String> {
        Some(format!(
            "{}/{}",
            self.namespace.as_ref()?,
            self.pod.as_ref()?
        ))
    }

    /// `namespace/pod`, else the address; with the port when there is one.
    pub fn describe(&self) -> String {
        let who = self.pod_key().unwrap_or_else(|| match self.ip {
            IpAddr::V6(ip) => format!("[{ip}]"),
            IpAddr::V4(ip) => ip.to_string(),
        });
        match self.port {
            Some(port) => format!("{who}:{port}"),
            None => who,
        }
    }
}

/// The verdicts given to one kind of connection attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Flow {
    /// When the last record came.
    pub time: Timestamp,
    /// When the first record came.
    pub first_seen: Timestamp,
    pub verdict: Verdict,
    pub direction: Direction,
    pub protocol: Protocol,
    /// The source (its port is the last record's).
    pub src: Endpoint,
    pub dst: Endpoint,
    /// Denied: the policies isolating the pod in this direction; allowed: the one whose rule
    /// allowed it (`namespace/name` each).
    pub policies: Vec<String>,
    /// Allowed: which rule of the policy (`ingress[0]`, `egress[1]`), and what it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Records the kernel sent for this flow (repeats its rate limit let through).
    pub count: u64,
}

impl Flow {
    /// The pod the verdict was given for: the source for egress, the destination for
    /// ingress.
    pub fn subject(&self) -> &Endpoint {
        match self.direction {
            Direction::Egress => &self.src,
            Direction::Ingress => &self.dst,
        }
    }

    /// One JSON line (no newline).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_reads_back_from_its_json_with_the_documented_keys() {
        let flow = Flow {
            time: "2025-05-01T10:00:02.117Z".parse().unwrap(),
            first_seen: "2025-05-01T10:00:01.004Z".parse().unwrap(),
            verdict: Verdict::Denied,
            direction: Direction::Ingress,
            protocol: Protocol::TCP,
            src: Endpoint {
                ip: "198.19.1.5".parse().unwrap(),
                port: Some(40312),
                namespace: Some("shop".into()),
                pod: Some("web-1".into()),
            },
            dst: Endpoint {
                ip: "2001:db8::7".parse().unwrap(),
                port: Some(5432),
                namespace: None,
                pod: None,
            },
            policies: vec!["shop/db-ingress".into()],
            rule: None,
            count: 3,
        };
        let line = flow.to_json_line();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["time"], "2025-05-01T10:00:02.117Z");
        assert_eq!(v["verdict"], "denied");
        assert_eq!(v["direction"], "ingress");
        assert_eq!(v["protocol"], "TCP");
        assert_eq!(v["src"]["pod"], "web-1");
        assert_eq!(v["dst"]["port"], 5432);
        assert!(v["dst"].get("pod").is_none());
        assert_eq!(v["policies"][0], "shop/db-ingress");
        assert_eq!(v["count"], 3);
        assert!(v.get("rule").is_none());
        assert_eq!(serde_json::from_str::<Flow>(&line).unwrap(), flow);
        assert_eq!(flow.subject().describe(), "[2001:db8::7]:5432");
        assert_eq!(flow.src.describe(), "shop/web-1:40312");
    }

    #[test]
    fn protocols_by_name_or_number() {
        assert_eq!(Protocol::parse("udp"), Some(Protocol::UDP));
        assert_eq!(Protocol(58).to_string(), "ICMPv6");
        assert_eq!(Protocol(47).to_string(), "47");
        assert_eq!(Protocol::parse("47"), Some(Protocol(47)));
        assert_eq!(Protocol::parse("gre"), None);
    }
}
