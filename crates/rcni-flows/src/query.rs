//! Which flows a reader wants: the flags of `rcni flows` and `rcni policy explain`, the query
//! string of `/flows` (`?denied=1&pod=shop/db-0&since=300`), and the test of a flow against
//! them: one definition for the agent that filters and the clients that ask.

use std::time::Duration;

use jiff::Timestamp;

use crate::model::{Flow, Protocol, Verdict};

/// A choice of flows; the default takes every flow.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only packets dropped: denied by a policy, or held.
    pub denied: bool,
    /// Only flows from or to this pod (`namespace/name`).
    pub pod: Option<String>,
    /// Only flows from this pod.
    pub from: Option<String>,
    /// Only flows to this pod.
    pub to: Option<String>,
    /// Only flows to this destination port.
    pub port: Option<u16>,
    pub protocol: Option<Protocol>,
    /// Only flows seen in this last while (by the agent's clock).
    pub since: Option<Duration>,
}

/// A query string that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("query parameter {name}: {why}")]
pub struct BadQuery {
    pub name: String,
    pub why: String,
}

impl Filter {
    /// Whether `flow` is one of these, at time `now`.
    pub fn matches(&self, flow: &Flow, now: Timestamp) -> bool {
        let pod_is = |want: &Option<String>, e: &crate::model::Endpoint| {
            want.as_ref()
                .is_none_or(|w| e.pod_key().is_some_and(|k| &k == w))
        };
        let recent = self.since.is_none_or(|since| {
            let age = now.duration_since(flow.time);
            age.is_negative() || age.unsigned_abs() <= since
        });
        (!self.denied || flow.verdict != Verdict::Allowed)
            && self.pod.as_ref().is_none_or(|p| {
                [&flow.src, &flow.dst]
                    .iter()
                    .any(|e| e.pod_key().is_some_and(|k| &k == p))
            })
            && pod_is(&self.from, &flow.src)
            && pod_is(&self.to, &flow.dst)
            && self.port.is_none_or(|p| flow.dst.port == Some(p))
            && self.protocol.is_none_or(|p| flow.protocol == p)
            && recent
    }

    /// The query string of `/flows` (without `?`), plus `follow=1` when asked.
    pub fn to_query(&self, follow: bool) -> String {
        let mut parts: Vec<String> = Vec::new();
        if self.denied {
            parts.push("denied=1".into());
        }
        for (name, value) in [("pod", &self.pod), ("from", &self.from), ("to", &self.to)] {
            if let Some(v) = value {
                parts.push(format!("{name}={v}"));
            }
        }
        if let Some(p) = self.port {
            parts.push(format!("port={p}"));
        }
        if let Some(p) = self.protocol {
            parts.push(format!("protocol={}", p.0));
        }
        if let Some(s) = self.since {
            parts.push(format!("since={}", s.as_secs_f64()));
        }
        if follow {
            parts.push("follow=1".into());
        }
        parts.join("&")
    }

    /// Reads a query string (without `?`): the filter, and whether `follow=1` was asked.
    pub fn from_query(query: &str) -> Result<(Filter, bool), BadQuery> {
        let mut f = Filter::default();
        let mut follow = false;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let bad = |why: &str| BadQuery {
                name: name.to_string(),
                why: format!("{why}: {value:?}"),
            };
            match name {
                "denied" => f.denied = flag(value).ok_or_else(|| bad("not 0 or 1"))?,
                "follow" => follow = flag(value).ok_or_else(|| bad("not 0 or 1"))?,
                "pod" | "from" | "to" => {
                    let key = pod_key(value).ok_or_else(|| bad("not NAMESPACE/NAME"))?;
                    *match name {
                        "pod" => &mut f.pod,
                        "from" => &mut f.from,
                        _ => &mut f.to,
                    } = Some(key);
                }
                "port" => f.port = Some(value.parse().map_err(|_| bad("not a port"))?),
                "protocol" => {
                    f.protocol = Some(Protocol::parse(value).ok_or_else(|| bad("unknown"))?)
                }
                "since" => {
                    let secs: f64 = value.parse().map_err(|_| bad("not seconds"))?;
                    let since =
                        Duration::try_from_secs_f64(secs).map_err(|_| bad("not seconds"))?;
                    f.since = Some(since);
                }
                _ => return Err(bad("unknown parameter")),
            }
        }
        Ok((f, follow))
    }
}

fn flag(v: &str) -> Option<bool> {
    match v {
        "1" | "true" => Some(true),
        "0" | "false" => Some(false),
        _ => None,
    }
}

/// `namespace/name` made of the characters Kubernetes names have (so it needs no escaping
/// in a query string).
pub fn pod_key(s: &str) -> Option<String> {
    let (ns, name) = s.split_once('/')?;
    let ok = |p: &str| {
        !p.is_empty()
            && p.len() <= 253
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    (ok(ns) && ok(name)).then(|| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Direction, Endpoint};

    fn flow(verdict: Verdict, at: &str) -> Flow {
        let end = |ip: &str, pod: &str, port| Endpoint {
            ip: ip.parse().unwrap(),
            port,
            namespace: Some("shop".into()),
            pod: Some(pod.into()),
        };
        Flow {
            time: at.parse().unwrap(),
            first_seen: at.parse().unwrap(),
            verdict,
            direction: Direction::Ingress,
            protocol: Protocol::TCP,
            src: end("198.19.1.2", "web", Some(40000)),
            dst: end("198.19.2.3", "db", Some(5432)),
            policies: vec![],
            rule: None,
            count: 1,
        }
    }

    #[test]
    fn a_filter_round_trips_through_its_query_string() {
        let f = Filter {
            denied: true,
            pod: Some("shop/db".into()),
            from: Some("shop/web".into()),
            to: None,
            port: Some(5432),
            protocol: Some(Protocol::TCP),
            since: Some(Duration::from_secs(300)),
        };
        let q = f.to_query(true);
        assert_eq!(
            q,
            "denied=1&pod=shop/db&from=shop/web&port=5432&protocol=6&since=300&follow=1"
        );
        assert_eq!(Filter::from_query(&q).unwrap(), (f, true));
        assert_eq!(Filter::from_query("").unwrap(), (Filter::default(), false));
        for bad in [
            "pod=x",
            "pod=A/b",
            "since=-1",
            "port=70000",
            "what=1",
            "denied=yes",
        ] {
            assert!(Filter::from_query(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_filter_picks_by_verdict_pods_port_and_age() {
        let now: Timestamp = "2025-05-01T10:10:00Z".parse().unwrap();
        let denied = flow(Verdict::Denied, "2025-05-01T10:09:00Z");
        let allowed = flow(Verdict::Allowed, "2025-05-01T10:09:00Z");
        let old = flow(Verdict::Held, "2025-05-01T09:00:00Z");
        let f = |q: &str| Filter::from_query(q).unwrap().0;
        assert!(f("denied=1").matches(&denied, now));
        assert!(f("denied=1").matches(&old, now));
        assert!(!f("denied=1").matches(&allowed, now));
        assert!(f("pod=shop/web").matches(&denied, now));
        assert!(f("pod=shop/db").matches(&denied, now));
        assert!(!f("pod=shop/other").matches(&denied, now));
        assert!(f("from=shop/web&to=shop/db&port=5432").matches(&denied, now));
        assert!(!f("from=shop/db").matches(&denied, now));
        assert!(!f("port=80").matches(&denied, now));
        assert!(!f("protocol=UDP").matches(&denied, now));
        assert!(f("since=300").matches(&denied, now));
        assert!(!f("since=300").matches(&old, now));
    }
}
