//! The most frequent denied pairs: flows dropped from one source to one destination and
//! port, added up (what `rcni doctor` lists).

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::model::{Flow, Protocol, Verdict};

/// Denied (or held) connection attempts from one source to one destination port.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeniedPair {
    /// `namespace/pod`, else the address.
    pub from: String,
    /// `namespace/pod`, else the address.
    pub to: String,
    pub protocol: Protocol,
    pub port: Option<u16>,
    /// The policies named by its flows.
    pub policies: Vec<String>,
    /// Whether some of its packets were held (the pod's address not programmed yet).
    pub held: bool,
    pub count: u64,
    pub last_seen: Timestamp,
}

/// The pairs of the dropped `flows`, most records first (the most recent first among
/// equals), at most `top`.
pub fn denied_pairs(flows: &[Flow], top: usize) -> Vec<DeniedPair> {
    let mut pairs: BTreeMap<(String, String, Protocol, Option<u16>), DeniedPair> = BTreeMap::new();
    for f in flows.iter().filter(|f| f.verdict != Verdict::Allowed) {
        let who = |e: &crate::model::Endpoint| e.pod_key().unwrap_or_else(|| e.ip.to_string());
        let (from, to) = (who(&f.src), who(&f.dst));
        let pair = pairs
            .entry((from.clone(), to.clone(), f.protocol, f.dst.port))
            .or_insert_with(|| DeniedPair {
                from,
                to,
                protocol: f.protocol,
                port: f.dst.port,
                policies: Vec::new(),
                held: false,
                count: 0,
                last_seen: f.time,
            });
        pair.count += f.count;
        pair.held |= f.verdict == Verdict::Held;
        pair.last_seen = pair.last_seen.max(f.time);
        for p in &f.policies {
            if !pair.policies.contains(p) {
                pair.policies.push(p.clone());
            }
        }
    }
    let mut out: Vec<DeniedPair> = pairs.into_values().collect();
    out.sort_by(|a, b| b.count.cmp(&a.count).then(b.last_seen.cmp(&a.last_seen)));
    out.truncate(top);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Direction, Endpoint};

    fn flow(
        src: &str,
        dst_pod: &str,
        port: u16,
        verdict: Verdict,
        count: u64,
        policy: &str,
    ) -> Flow {
        let at: Timestamp = "2025-05-01T10:00:00Z".parse().unwrap();
        Flow {
            time: at,
            first_seen: at,
            verdict,
            direction: Direction::Ingress,
            protocol: Protocol::TCP,
            src: Endpoint {
                ip: src.parse().unwrap(),
                port: Some(40000),
                namespace: None,
                pod: None,
            },
            dst: Endpoint {
                ip: "198.19.2.3".parse().unwrap(),
                port: Some(port),
                namespace: Some("shop".into()),
                pod: Some(dst_pod.into()),
            },
            policies: vec![policy.into()],
            rule: None,
            count,
        }
    }

    #[test]
    fn pairs_add_up_across_flows_and_sort_by_count() {
        let flows = [
            flow("198.19.1.2", "db", 5432, Verdict::Denied, 3, "shop/a"),
            flow("198.19.1.2", "db", 5432, Verdict::Denied, 4, "shop/b"),
            flow("198.19.1.9", "db", 5432, Verdict::Held, 5, "shop/a"),
            flow("198.19.1.2", "db", 5432, Verdict::Allowed, 50, "shop/a"),
            flow("198.19.1.2", "web", 80, Verdict::Denied, 1, "shop/a"),
        ];
        let pairs = denied_pairs(&flows, 2);
        assert_eq!(pairs.len(), 2);
        assert_eq!(
            (pairs[0].from.as_str(), pairs[0].to.as_str(), pairs[0].count),
            ("198.19.1.2", "shop/db", 7)
        );
        assert_eq!(pairs[0].policies, ["shop/a", "shop/b"]);
        assert!(!pairs[0].held);
        assert_eq!((pairs[1].count, pairs[1].held), (5, true));
    }
}
