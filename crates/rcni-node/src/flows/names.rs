//! From a kernel record to a flow: the record's prefix says which chain decided
//! ([`LogTag`]), its copied headers say who talked to whom, and the agent's view of the
//! cluster ([`ClusterNames`]) names the pods, the policies isolating the pod and the rule
//! that allowed the connection.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::SystemTime;

use cni_nft::nflog::LogRecord;
use cni_policy::nft::flow_log::LogTag;
use rcni_flows::{Direction, Endpoint, Flow, Protocol, Verdict};

/// A pod: its namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
}

impl PodRef {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// One of the node's pods as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LocalPod {
    pub namespace: String,
    pub name: String,
    pub ips: Vec<IpAddr>,
    pub labels: BTreeMap<String, String>,
    /// The policies isolating it in each direction (empty: open).
    pub ingress: Vec<String>,
    pub egress: Vec<String>,
    /// Its labels are not known yet: its address is held.
    pub held: bool,
}

/// What the agent knows of the cluster that a record needs to become a flow: implemented
/// by the NetworkPolicy view, which the policy pipeline keeps up to date.
pub trait ClusterNames: Send + Sync {
    /// The pod, of any node, holding `ip`.
    fn pod_at(&self, ip: IpAddr) -> Option<PodRef>;
    /// The local pod whose chain is named `chain` (see `cni_policy::nft::pod_chain_name`).
    fn pod_of_chain(&self, chain: &str) -> Option<PodRef>;
    /// The policies (`namespace/name`) isolating the local pod `pod` in `direction`.
    fn isolating(&self, pod: &PodRef, direction: Direction) -> Vec<String>;
    /// The policy whose chain is named `chain` (see `cni_policy::nft::policy_chain_name`),
    /// and its rule `rule` of the chain's direction described (`ingress[0]: from ... on
    /// TCP/80`).
    fn policy_rule(&self, chain: &str, rule: usize) -> Option<(String, String)>;
    /// Whether policy `namespace/name` exists.
    fn has_policy(&self, key: &str) -> bool;
    /// The node's pods.
    fn local_pods(&self) -> Vec<LocalPod>;
}

/// Why a record gave no flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unnamed {
    /// Its prefix is not one of the program's.
    Prefix,
    /// Its copied bytes hold no IP header.
    Headers,
}

/// The flow of one record (count 1), named through `names`; `received` is when the agent
/// got it, the time used when the kernel did not stamp the packet.
pub fn to_flow(
    record: &LogRecord,
    names: &dyn ClusterNames,
    received: SystemTime,
) -> Result<Flow, Unnamed> {
    let tag = LogTag::parse(&record.prefix).ok_or(Unnamed::Prefix)?;
    let headers = record.headers().ok_or(Unnamed::Headers)?;
    let ports = headers.transport.ports();
    let endpoint = |ip: IpAddr, port: Option<u16>| {
        let pod = names.pod_at(ip);
        Endpoint {
            ip,
            port,
            namespace: pod.as_ref().map(|p| p.namespace.clone()),
            pod: pod.map(|p| p.name),
        }
    };
    let src = endpoint(headers.src, ports.map(|p| p.0));
    let dst = endpoint(headers.dst, ports.map(|p| p.1));
    let direction = match tag.direction() {
        cni_policy::Direction::Egress => Direction::Egress,
        cni_policy::Direction::Ingress => Direction::Ingress,
    };
    let (verdict, policies, rule) = match &tag {
        LogTag::Denied { pod_chain } => {
            // The pod the chain is for; else the one holding the address it guards.
            let subject = names.pod_of_chain(pod_chain).or_else(|| {
                let e = if direction == Direction::Egress {
                    &src
                } else {
                    &dst
                };
                Some(PodRef {
                    namespace: e.namespace.clone()?,
                    name: e.pod.clone()?,
                })
            });
            let policies = subject
                .map(|p| names.isolating(&p, direction))
                .unwrap_or_default();
            (Verdict::Denied, policies, None)
        }
        LogTag::Allowed { policy_chain, rule } => match names.policy_rule(policy_chain, *rule) {
            Some((policy, described)) => (Verdict::Allowed, vec![policy], Some(described)),
            None => (Verdict::Allowed, Vec::new(), None),
        },
        LogTag::Held { .. } => (Verdict::Held, Vec::new(), None),
    };
    // Milliseconds are what a reader compares; finer digits only lengthen every line.
    let time = jiff::Timestamp::try_from(record.timestamp.unwrap_or(received))
        .ok()
        .and_then(|t| jiff::Timestamp::from_millisecond(t.as_millisecond()).ok())
        .unwrap_or_else(jiff::Timestamp::now);
    Ok(Flow {
        time,
        first_seen: time,
        verdict,
        direction,
        protocol: Protocol(headers.protocol),
        src,
        dst,
        policies,
        rule,
        count: 1,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A fixed view: pods by address, chains by name.
    #[derive(Default)]
    pub(crate) struct FixedNames {
        pub pods: HashMap<IpAddr, PodRef>,
        pub chains: HashMap<String, PodRef>,
        pub isolating: HashMap<(PodRef, Direction), Vec<String>>,
        pub rules: HashMap<(String, usize), (String, String)>,
    }

    impl ClusterNames for FixedNames {
        fn pod_at(&self, ip: IpAddr) -> Option<PodRef> {
            self.pods.get(&ip).cloned()
        }
        fn pod_of_chain(&self, chain: &str) -> Option<PodRef> {
            self.chains.get(chain).cloned()
        }
        fn isolating(&self, pod: &PodRef, direction: Direction) -> Vec<String> {
            self.isolating
                .get(&(pod.clone(), direction))
                .cloned()
                .unwrap_or_default()
        }
        fn policy_rule(&self, chain: &str, rule: usize) -> Option<(String, String)> {
            self.rules.get(&(chain.to_string(), rule)).cloned()
        }
        fn has_policy(&self, key: &str) -> bool {
            self.isolating
                .values()
                .any(|ps| ps.iter().any(|p| p == key))
                || self.rules.values().any(|(p, _)| p == key)
        }
        fn local_pods(&self) -> Vec<LocalPod> {
            Vec::new()
        }
    }

    pub(crate) fn pod(ns: &str, name: &str) -> PodRef {
        PodRef {
            namespace: ns.into(),
            name: name.into(),
        }
    }

    /// A TCP SYN from `src`:40000 to `dst`:`port` (IPv4).
    pub(crate) fn syn(src: [u8; 4], dst: [u8; 4], port: u16) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0];
        p.extend(src);
        p.extend(dst);
        p.extend(40000u16.to_be_bytes());
        p.extend(port.to_be_bytes());
        p.extend([0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0, 0, 0, 0, 0, 0]);
        p
    }

    pub(crate) fn record(prefix: &str, payload: Vec<u8>) -> LogRecord {
        LogRecord {
            family: 2,
            group: 7700,
            prefix: prefix.into(),
            hook: Some(2),
            mark: None,
            timestamp: None,
            in_dev: None,
            out_dev: None,
            phys_in_dev: None,
            phys_out_dev: None,
            seq: None,
            seq_global: None,
            payload,
        }
    }

    pub(crate) fn names() -> FixedNames {
        let (web, db) = (pod("shop", "web"), pod("shop", "db"));
        let mut n = FixedNames::default();
        n.pods.insert("198.19.1.2".parse().unwrap(), web);
        n.pods.insert("198.19.1.3".parse().unwrap(), db.clone());
        n.chains.insert("pod-i-00000000000000db".into(), db.clone());
        n.isolating.insert(
            (db, Direction::Ingress),
            vec!["shop/db-only-api".into(), "shop/deny-all".into()],
        );
        n.rules.insert(
            ("pol-i-0000000000000001".into(), 0),
            ("shop/web".into(), "ingress[0]: from any on TCP/80".into()),
        );
        n
    }

    #[test]
    fn a_denied_syn_names_both_pods_and_the_policies_isolating_the_destination() {
        let r = record(
            "rcni:deny:pod-i-00000000000000db",
            syn([198, 19, 1, 2], [198, 19, 1, 3], 5432),
        );
        let f = to_flow(&r, &names(), SystemTime::now()).unwrap();
        assert_eq!(
            (f.verdict, f.direction, f.protocol),
            (Verdict::Denied, Direction::Ingress, Protocol::TCP)
        );
        assert_eq!(f.src.describe(), "shop/web:40000");
        assert_eq!(f.dst.describe(), "shop/db:5432");
        assert_eq!(f.policies, ["shop/db-only-api", "shop/deny-all"]);
        assert_eq!(f.count, 1);
    }

    #[test]
    fn a_chain_the_view_no_longer_has_is_named_by_the_address_it_guards() {
        let r = record(
            "rcni:deny:pod-i-0000000000000999",
            syn([198, 18, 9, 9], [198, 19, 1, 3], 5432),
        );
        let f = to_flow(&r, &names(), SystemTime::now()).unwrap();
        assert_eq!(f.src.pod, None);
        assert_eq!(f.policies, ["shop/db-only-api", "shop/deny-all"]);
    }

    #[test]
    fn allowed_and_held_records_and_what_is_not_a_flow() {
        let allowed = record(
            "rcni:allow:pol-i-0000000000000001:0",
            syn([198, 19, 1, 2], [198, 19, 1, 3], 80),
        );
        let f = to_flow(&allowed, &names(), SystemTime::now()).unwrap();
        assert_eq!(f.verdict, Verdict::Allowed);
        assert_eq!(f.policies, ["shop/web"]);
        assert_eq!(f.rule.as_deref(), Some("ingress[0]: from any on TCP/80"));
        let held = record("rcni:hold:e", syn([198, 19, 1, 2], [198, 19, 1, 3], 80));
        let f = to_flow(&held, &names(), SystemTime::now()).unwrap();
        assert_eq!((f.verdict, f.direction), (Verdict::Held, Direction::Egress));
        assert!(f.policies.is_empty());
        let other = record("ulogd", syn([198, 19, 1, 2], [198, 19, 1, 3], 80));
        assert_eq!(
            to_flow(&other, &names(), SystemTime::now()),
            Err(Unnamed::Prefix)
        );
        let cut = record("rcni:hold:e", vec![0x45, 0]);
        assert_eq!(
            to_flow(&cut, &names(), SystemTime::now()),
            Err(Unnamed::Headers)
        );
    }
}
