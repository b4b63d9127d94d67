//! What the program tells the node agent about its verdicts: `log group` rules sending a
//! record of each packet that opens a connection and is denied (or, with [`FlowLog::All`],
//! allowed) to the nfnetlink_log group [`FLOW_LOG_GROUP`], with a prefix ([`LogTag`]) naming
//! the chain that decided, so that the agent can name the pod, the policies and the rule
//! through its view of the cluster. No packet leaves the kernel for a decision: the log
//! rules only copy the first packet of a connection, and a named rate limit per verdict
//! bounds how many records the kernel sends; named counters before and after the limit say
//! how many it held back.
//!
//! Prefixes are short and stable (the chains' names are hashes of the pods' and policies'
//! keys), well within the kernel's 127 bytes:
//!
//! | prefix | sent by |
//! |---|---|
//! | `rcni:deny:pod-e-<hash>` | a pod's chain, before its `drop`: no policy allowed it |
//! | `rcni:allow:pol-i-<hash>:<n>` | a policy's chain, the rules made from its `ingress[n]` (or `egress[n]`) |
//! | `rcni:hold:e`, `rcni:hold:i` | the hold of a base chain: the pod's address is not programmed yet |

use std::fmt;
use std::str::FromStr;

use cni_nft::{ct_state, Batch, Limit, RuleBuilder};

use super::{ProgramError, F, TABLE};
use crate::effective::Direction;

/// The nfnetlink_log group the program's log rules send to, and the node agent reads.
pub const FLOW_LOG_GROUP: u16 = 7700;

/// Bytes of each logged packet copied: the IPv4 or IPv6 header (with a few extension
/// headers) and the transport header's ports and flags.
pub const FLOW_LOG_SNAPLEN: u32 = 128;

/// The named rate limits of the log rules, one per kind of verdict, so that a flood of
/// denied packets does not hold back the records of allowed connections (held packets share
/// the denied one).
pub const DENIED_LIMIT: &str = "flowlog-denied";
pub const ALLOWED_LIMIT: &str = "flowlog-allowed";

/// The named counters around each limit: every packet a log rule saw (`…-seen`), and those
/// its limit let through to the group (`…-sent`); their difference is what the limit held
/// back.
pub const DENIED_COUNTERS: [&str; 2] = ["flowlog-denied-seen", "flowlog-denied-sent"];
pub const ALLOWED_COUNTERS: [&str; 2] = ["flowlog-allowed-seen", "flowlog-allowed-sent"];

/// The rate of records of denied (and held) connections the kernel sends, node-wide: a
/// flood of denied packets costs the agent at most this many records a second.
pub const DENIED_RATE: Limit = Limit {
    rate: 1000,
    per_seconds: 1,
    burst: 1000,
};
/// The rate of records of allowed connections (`--flow-log all`).
pub const ALLOWED_RATE: Limit = DENIED_RATE;

/// Which verdicts the program logs (`rcni-node --flow-log`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FlowLog {
    /// No log rule at all.
    Off,
    /// The first packet of every connection a policy denies (or the hold drops).
    #[default]
    Denied,
    /// Those, and the first packet of every connection a policy rule allows.
    All,
}

impl FlowLog {
    /// Whether denied (and held) connections are logged.
    pub fn denied(self) -> bool {
        self != FlowLog::Off
    }

    /// Whether allowed connections are logged.
    pub fn allowed(self) -> bool {
        self == FlowLog::All
    }
}

impl FromStr for FlowLog {
    type Err = String;

    fn from_str(s: &str) -> Result<FlowLog, String> {
        match s {
            "off" => Ok(FlowLog::Off),
            "denied" => Ok(FlowLog::Denied),
            "all" => Ok(FlowLog::All),
            _ => Err(format!("{s:?}: give denied, all or off")),
        }
    }
}

impl fmt::Display for FlowLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FlowLog::Off => "off",
            FlowLog::Denied => "denied",
            FlowLog::All => "all",
        })
    }
}

/// The chain that decided a logged packet, as its log prefix says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTag {
    /// A pod's chain dropped it: no policy isolating the pod in the chain's direction
    /// allowed it.
    Denied { pod_chain: String },
    /// The rules of `policy_chain` made from the policy's rule `rule` allowed it.
    Allowed { policy_chain: String, rule: usize },
    /// The hold dropped it.
    Held { direction: Direction },
}

const PREFIX: &str = "rcni:";

impl LogTag {
    /// The prefix of the log rule.
    pub fn prefix(&self) -> String {
        match self {
            LogTag::Denied { pod_chain } => format!("{PREFIX}deny:{pod_chain}"),
            LogTag::Allowed { policy_chain, rule } => {
                format!("{PREFIX}allow:{policy_chain}:{rule}")
            }
            LogTag::Held { direction } => format!("{PREFIX}hold:{}", letter(*direction)),
        }
    }

    /// The tag of a prefix, if it is one of the program's.
    pub fn parse(prefix: &str) -> Option<LogTag> {
        let rest = prefix.strip_prefix(PREFIX)?;
        let (kind, rest) = rest.split_once(':')?;
        match kind {
            "deny" if direction_of_chain(rest, "pod-").is_some() => Some(LogTag::Denied {
                pod_chain: rest.to_string(),
            }),
            "allow" => {
                let (chain, rule) = rest.rsplit_once(':')?;
                direction_of_chain(chain, "pol-")?;
                Some(LogTag::Allowed {
                    policy_chain: chain.to_string(),
                    rule: rule.parse().ok()?,
                })
            }
            "hold" => Some(LogTag::Held {
                direction: match rest {
                    "e" => Direction::Egress,
                    "i" => Direction::Ingress,
                    _ => return None,
                },
            }),
            _ => None,
        }
    }

    /// The direction the verdict was given in.
    pub fn direction(&self) -> Direction {
        match self {
            LogTag::Denied { pod_chain } => direction_of_chain(pod_chain, "pod-"),
            LogTag::Allowed { policy_chain, .. } => direction_of_chain(policy_chain, "pol-"),
            LogTag::Held { direction } => Some(*direction),
        }
        .unwrap_or(Direction::Ingress)
    }
}

/// The named limits and counters of the log rules `mode` asks for (in the skeleton: they
/// are made with the table and never change).
pub(super) fn objects(b: &mut Batch, mode: FlowLog) -> Result<(), ProgramError> {
    let kinds = [
        (mode.denied(), DENIED_LIMIT, DENIED_RATE, DENIED_COUNTERS),
        (
            mode.allowed(),
            ALLOWED_LIMIT,
            ALLOWED_RATE,
            ALLOWED_COUNTERS,
        ),
    ];
    for (_, limit, rate, counters) in kinds.into_iter().filter(|k| k.0) {
        b.add_limit(F, TABLE, limit, rate)?;
        for counter in counters {
            b.add_counter(F, TABLE, counter)?;
        }
    }
    Ok(())
}

/// `r` (the matches of the packets a verdict applies to) made a log rule for `tag`: packets
/// that open a connection are counted, rate-limited, counted again and sent to the group.
/// The rule has no verdict: the chain goes on to the rule that decides.
pub(super) fn log_rule(r: RuleBuilder, tag: &LogTag) -> RuleBuilder {
    let (limit, [seen, sent]) = match tag {
        LogTag::Allowed { .. } => (ALLOWED_LIMIT, ALLOWED_COUNTERS),
        _ => (DENIED_LIMIT, DENIED_COUNTERS),
    };
    r.ct_state(ct_state::NEW)
        .counter_named(seen)
        .limit_named(limit)
        .counter_named(sent)
        .log_group(FLOW_LOG_GROUP, &tag.prefix(), FLOW_LOG_SNAPLEN)
}

/// The direction of a chain named `<kind>e-…` or `<kind>i-…` (see [`super::pod_chain_name`]).
fn direction_of_chain(chain: &str, kind: &str) -> Option<Direction> {
    match chain.strip_prefix(kind)?.split_once('-')? {
        ("e", hash) if !hash.is_empty() => Some(Direction::Egress),
        ("i", hash) if !hash.is_empty() => Some(Direction::Ingress),
        _ => None,
    }
}

fn letter(d: Direction) -> char {
    match d {
        Direction::Egress => 'e',
        Direction::Ingress => 'i',
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::{pod_chain_name, policy_chain_name};

    #[test]
    fn tags_round_trip_through_their_prefixes_and_fit_the_kernel() {
        let tags = [
            LogTag::Denied {
                pod_chain: pod_chain_name("shop/db-0", Direction::Ingress),
            },
            LogTag::Allowed {
                policy_chain: policy_chain_name("shop/allow-web", Direction::Egress),
                rule: 12,
            },
            LogTag::Held {
                direction: Direction::Egress,
            },
        ];
        for tag in tags {
            let p = tag.prefix();
            assert!(p.len() <= cni_nft::MAX_LOG_PREFIX_LEN, "{p}");
            assert_eq!(LogTag::parse(&p), Some(tag.clone()), "{p}");
        }
        let denied = LogTag::parse("rcni:deny:pod-i-0123456789abcdef").unwrap();
        assert_eq!(denied.direction(), Direction::Ingress);
        let allowed = LogTag::parse("rcni:allow:pol-e-0123456789abcdef:0").unwrap();
        assert_eq!(allowed.direction(), Direction::Egress);
        for other in [
            "",
            "rcni:",
            "kube:deny:pod-e-1",
            "rcni:deny:pol-e-1",
            "rcni:deny:pod-x-1",
            "rcni:allow:pol-e-1",
            "rcni:allow:pol-e-1:x",
            "rcni:hold:x",
        ] {
            assert_eq!(LogTag::parse(other), None, "{other}");
        }
    }

    #[test]
    fn the_flag_values() {
        assert_eq!("all".parse::<FlowLog>(), Ok(FlowLog::All));
        assert_eq!(FlowLog::default().to_string(), "denied");
        assert!(FlowLog::Denied.denied() && !FlowLog::Denied.allowed());
        assert!(!FlowLog::Off.denied());
        assert!("none".parse::<FlowLog>().is_err());
    }
}
