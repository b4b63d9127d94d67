//! The agent's memory of recent verdicts: flows keyed by verdict, direction, protocol,
//! source and destination address and destination port (the source port is left out: each
//! retry of a connection comes from a new one), each record of the same key adding to its
//! count. It is bounded twice, by a number of flows and by an estimate of the bytes they
//! take ([`Bounds`]); past either, the flows updated least recently go first, and are
//! counted ([`Usage::evicted`]).
//!
//! Every change gets a sequence number, so a follower (`rcni flows --follow`, the page) asks
//! for what changed since the last number it saw ([`FlowStore::updated_since`]).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use crate::model::{Direction, Flow, Protocol, Verdict};
use crate::query::Filter;

/// How much the store may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Flows at most.
    pub max_flows: usize,
    /// Estimated bytes at most (the flows, their names and the two indexes over them).
    pub max_bytes: usize,
}

impl Default for Bounds {
    /// 10,000 flows and 8 MiB.
    fn default() -> Self {
        Bounds {
            max_flows: 10_000,
            max_bytes: 8 << 20,
        }
    }
}

/// What the store holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub flows: usize,
    /// The estimate [`Bounds::max_bytes`] bounds.
    pub bytes: usize,
    /// Flows pushed out by newer ones since the start.
    pub evicted: u64,
    /// Records taken since the start.
    pub records: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    verdict: Verdict,
    direction: Direction,
    protocol: Protocol,
    src: IpAddr,
    dst: IpAddr,
    dst_port: Option<u16>,
}

impl Key {
    fn of(f: &Flow) -> Key {
        Key {
            verdict: f.verdict,
            direction: f.direction,
            protocol: f.protocol,
            src: f.src.ip,
            dst: f.dst.ip,
            dst_port: f.dst.port,
        }
    }
}

struct Slot {
    flow: Flow,
    /// The sequence number of its last change.
    seq: u64,
    bytes: usize,
}

/// Recent flows, bounded.
pub struct FlowStore {
    bounds: Bounds,
    flows: HashMap<Key, Slot>,
    /// Keys by the sequence number of their last change: the eviction order, and what a
    /// follower reads.
    order: BTreeMap<u64, Key>,
    seq: u64,
    usage: Usage,
}

impl FlowStore {
    pub fn new(bounds: Bounds) -> FlowStore {
        FlowStore {
            bounds,
            flows: HashMap::new(),
            order: BTreeMap::new(),
            seq: 0,
            usage: Usage::default(),
        }
    }

    /// Takes one record (a flow of count 1, or more): a new flow, or the repeat of one (its
    /// count grows, its time, source port, policies and rule become the record's).
    pub fn record(&mut self, record: Flow) -> u64 {
        self.seq += 1;
        self.usage.records += 1;
        let key = Key::of(&record);
        let seq = self.seq;
        match self.flows.get_mut(&key) {
            Some(slot) => {
                self.order.remove(&slot.seq);
                self.usage.bytes -= slot.bytes;
                let f = &mut slot.flow;
                f.count += record.count;
                f.first_seen = f.first_seen.min(record.first_seen);
                f.time = f.time.max(record.time);
                f.src = record.src;
                f.dst = record.dst;
                f.policies = record.policies;
                f.rule = record.rule;
                slot.seq = seq;
                slot.bytes = estimate(&slot.flow);
                self.usage.bytes += slot.bytes;
            }
            None => {
                let bytes = estimate(&record);
                self.usage.bytes += bytes;
                self.flows.insert(
                    key.clone(),
                    Slot {
                        flow: record,
                        seq,
                        bytes,
                    },
                );
            }
        }
        self.order.insert(seq, key);
        self.evict();
        seq
    }

    /// Removes the least recently updated flows until both bounds hold.
    fn evict(&mut self) {
        while self.flows.len() > self.bounds.max_flows || self.usage.bytes > self.bounds.max_bytes {
            let Some((_, key)) = self.order.pop_first() else {
                break;
            };
            if let Some(slot) = self.flows.remove(&key) {
                self.usage.bytes -= slot.bytes;
                self.usage.evicted += 1;
            }
        }
        self.usage.flows = self.flows.len();
    }

    /// The sequence number of the last change (0: none yet).
    pub fn latest(&self) -> u64 {
        self.seq
    }

    /// The flows changed after change `seq`, oldest change first, each with its number.
    pub fn updated_since(&self, seq: u64) -> Vec<(u64, Flow)> {
        self.order
            .range(seq + 1..)
            .filter_map(|(n, key)| Some((*n, self.flows.get(key)?.flow.clone())))
            .collect()
    }

    /// The flows `filter` picks, least recently updated first.
    pub fn flows(&self, filter: &Filter, now: jiff::Timestamp) -> Vec<Flow> {
        self.order
            .values()
            .filter_map(|key| self.flows.get(key))
            .map(|slot| &slot.flow)
            .filter(|f| filter.matches(f, now))
            .cloned()
            .collect()
    }

    pub fn usage(&self) -> Usage {
        self.usage
    }
}

/// The bytes one flow takes: its slot and key in the map, its entry in the order index,
/// and the text it owns.
fn estimate(f: &Flow) -> usize {
    const PER_FLOW: usize = std::mem::size_of::<Slot>()
        + 2 * std::mem::size_of::<Key>()
        + std::mem::size_of::<u64>()
        // the map's control byte and the index's node share, rounded up
        + 32;
    let endpoint = |e: &crate::model::Endpoint| {
        e.namespace.as_ref().map_or(0, String::capacity)
            + e.pod.as_ref().map_or(0, String::capacity)
    };
    PER_FLOW
        + endpoint(&f.src)
        + endpoint(&f.dst)
        + f.policies.capacity() * std::mem::size_of::<String>()
        + f.policies.iter().map(String::capacity).sum::<usize>()
        + f.rule.as_ref().map_or(0, String::capacity)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Endpoint;

    pub(crate) fn flow(src: &str, dst: &str, port: u16, at_ms: i64) -> Flow {
        let at = jiff::Timestamp::from_millisecond(at_ms).unwrap();
        let end = |ip: &str, port| Endpoint {
            ip: ip.parse().unwrap(),
            port,
            namespace: Some("ns".into()),
            pod: Some(format!("pod-{ip}")),
        };
        Flow {
            time: at,
            first_seen: at,
            verdict: Verdict::Denied,
            direction: Direction::Ingress,
            protocol: Protocol::TCP,
            src: end(src, Some(40000)),
            dst: end(dst, Some(port)),
            policies: vec!["ns/deny".into()],
            rule: None,
            count: 1,
        }
    }

    #[test]
    fn repeats_add_up_and_keep_the_first_and_last_times() {
        let mut s = FlowStore::new(Bounds::default());
        s.record(flow("198.19.1.2", "198.19.2.3", 80, 1000));
        let mut again = flow("198.19.1.2", "198.19.2.3", 80, 3000);
        again.src.port = Some(40001);
        s.record(again);
        s.record(flow("198.19.1.2", "198.19.2.3", 443, 2000));
        let all = s.flows(&Filter::default(), jiff::Timestamp::now());
        assert_eq!(all.len(), 2);
        let f = &all[0];
        assert_eq!(
            (f.dst.port, f.count, f.src.port),
            (Some(80), 2, Some(40001))
        );
        assert_eq!(f.first_seen.as_millisecond(), 1000);
        assert_eq!(f.time.as_millisecond(), 3000);
        assert_eq!(s.usage().records, 3);
        // A follower that saw change 1 gets the two flows changed after it, in order.
        let since: Vec<(u64, Option<u16>)> = s
            .updated_since(1)
            .into_iter()
            .map(|(n, f)| (n, f.dst.port))
            .collect();
        assert_eq!(since, [(2, Some(80)), (3, Some(443))]);
        assert!(s.updated_since(3).is_empty());
    }

    #[test]
    fn the_least_recently_updated_flows_go_past_either_bound() {
        let mut s = FlowStore::new(Bounds {
            max_flows: 3,
            max_bytes: usize::MAX,
        });
        for port in 1..=5 {
            s.record(flow("198.19.1.2", "198.19.2.3", port, 1000));
        }
        // Port 3 again: now the most recent.
        s.record(flow("198.19.1.2", "198.19.2.3", 3, 2000));
        s.record(flow("198.19.1.2", "198.19.2.3", 6, 2000));
        let ports: Vec<u16> = s
            .flows(&Filter::default(), jiff::Timestamp::now())
            .iter()
            .filter_map(|f| f.dst.port)
            .collect();
        assert_eq!(ports, [5, 3, 6]);
        assert_eq!(s.usage().evicted, 3);
        assert_eq!(s.usage().flows, 3);

        let one = estimate(&flow("198.19.1.2", "198.19.2.3", 1, 0));
        let mut s = FlowStore::new(Bounds {
            max_flows: usize::MAX,
            max_bytes: one * 2,
        });
        for port in 1..=10 {
            s.record(flow("198.19.1.2", "198.19.2.3", port, 0));
        }
        assert_eq!(s.usage().flows, 2);
        assert!(s.usage().bytes <= one * 2);
        assert_eq!(s.usage().evicted, 8);
    }
}
