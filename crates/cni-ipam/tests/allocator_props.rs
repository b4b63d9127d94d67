//! Property tests of the allocator against a model of host-local's order: the allocatable
//! addresses listed range by range, and each new allocation taking the first free one after the
//! last reserved address, cyclically.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cni_ipam::{HostLocal, IpamError};
use proptest::prelude::*;
use serde_json::{json, Value};

/// One range: which /prefix block of the family it lives in, and offsets within it.
#[derive(Debug, Clone)]
struct RangeCase {
    start: u32,
    len: u32,
    gateway: Option<u32>,
}

#[derive(Debug, Clone)]
struct SetCase {
    ipv6: bool,
    /// Host bits of each range's subnet (2..=5, i.e. /30../27 or /126../123).
    host_bits: u32,
    ranges: Vec<RangeCase>,
}

#[derive(Debug, Clone)]
enum Op {
    Allocate(u8),
    Release(u8),
}

fn addr(ipv6: bool, block: usize, host_bits: u32, offset: u32) -> IpAddr {
    let base = (block as u32 + 1) << 8;
    let value = base + (offset & ((1 << host_bits) - 1));
    if ipv6 {
        IpAddr::V6(Ipv6Addr::from(0xfd00_u128 << 112 | u128::from(value)))
    } else {
        IpAddr::V4(Ipv4Addr::from(0xc612_8000 | value))
    }
}

impl SetCase {
    fn size(&self) -> u32 {
        1 << self.host_bits
    }

    /// Range bounds as offsets in the subnet, clamped so that the range is valid.
    fn bounds(&self, range: &RangeCase) -> (u32, u32) {
        let size = self.size();
        let start = range.start % size;
        let end = (start + range.len).min(size - 1);
        (start, end)
    }

    fn json(&self) -> Value {
        let prefix = if self.ipv6 { 128 } else { 32 } - self.host_bits;
        let ranges: Vec<Value> = self
            .ranges
            .iter()
            .enumerate()
            .map(|(block, range)| {
                let (start, end) = self.bounds(range);
                let mut value = json!({
                    "subnet": format!("{}/{prefix}", addr(self.ipv6, block, self.host_bits, 0)),
                    "rangeStart": addr(self.ipv6, block, self.host_bits, start).to_string(),
                    "rangeEnd": addr(self.ipv6, block, self.host_bits, end).to_string(),
                });
                if let Some(gateway) = range.gateway {
                    value["gateway"] =
                        json!(addr(self.ipv6, block, self.host_bits, gateway).to_string());
                }
                value
            })
            .collect();
        Value::Array(ranges)
    }

    /// The model: every address the allocator may hand out, in iteration order.
    fn candidates(&self) -> Vec<IpAddr> {
        let mut out = Vec::new();
        for (block, range) in self.ranges.iter().enumerate() {
            let (start, end) = self.bounds(range);
            let gateway = range.gateway.map_or(1, |g| g & (self.size() - 1));
            for offset in start..=end {
                let reserved = !self.ipv6 && (offset == 0 || offset == self.size() - 1);
                if offset != gateway && !reserved {
                    out.push(addr(self.ipv6, block, self.host_bits, offset));
                }
            }
        }
        out
    }
}

fn range_case() -> impl Strategy<Value = RangeCase> {
    (0u32..32, 0u32..32, proptest::option::of(0u32..32)).prop_map(|(start, len, gateway)| {
        RangeCase {
            start,
            len,
            gateway,
        }
    })
}

fn set_case(ipv6: bool) -> impl Strategy<Value = SetCase> {
    (2u32..=5, proptest::collection::vec(range_case(), 1..=3)).prop_map(
        move |(host_bits, ranges)| SetCase {
            ipv6,
            host_bits,
            ranges,
        },
    )
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(
        prop_oneof![
            3 => (0u8..24).prop_map(Op::Allocate),
            1 => (0u8..24).prop_map(Op::Release),
        ],
        1..60,
    )
}

fn host_local(dir: &std::path::Path, sets: &[&SetCase]) -> HostLocal {
    let ranges: Vec<Value> = sets.iter().map(|s| s.json()).collect();
    HostLocal::new(&common::config(dir, Value::Array(ranges))).unwrap()
}

/// Lease files on disk: address -> content.
fn leases(dir: &std::path::Path) -> BTreeMap<IpAddr, String> {
    common::files(dir)
        .into_iter()
        .filter_map(|(name, bytes)| Some((name.parse().ok()?, String::from_utf8(bytes).unwrap())))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Order, idempotency, wrap-around and exhaustion follow the model; nothing is handed out
    /// twice; gateways, network and broadcast addresses never are.
    #[test]
    fn single_set_follows_the_model(ipv6 in any::<bool>(), seed_set in set_case(false), ops in ops()) {
        let set = SetCase { ipv6, ..seed_set };
        let candidates = set.candidates();
        prop_assume!(!candidates.is_empty());
        let dir = tempfile::tempdir().unwrap();
        let ipam = host_local(dir.path(), &[&set]);

        let mut held: BTreeMap<u8, IpAddr> = BTreeMap::new();
        let mut last: Option<usize> = None;
        for op in ops {
            match op {
                Op::Allocate(id) => {
                    let result = ipam.allocate(&format!("c{id}"), "eth0", &[]);
                    if let Some(existing) = held.get(&id) {
                        prop_assert_eq!(common::addrs(&result.unwrap()), vec![*existing]);
                        continue;
                    }
                    let used: BTreeSet<IpAddr> = held.values().copied().collect();
                    let from = last.map_or(0, |pos| pos + 1);
                    let expected = (0..candidates.len())
                        .map(|i| (from + i) % candidates.len())
                        .find(|&pos| !used.contains(&candidates[pos]));
                    match expected {
                        Some(pos) => {
                            let got = result.unwrap();
                            prop_assert_eq!(got[0].address.addr(), candidates[pos]);
                            held.insert(id, candidates[pos]);
                            last = Some(pos);
                        }
                        None => {
                            let error = result.unwrap_err();
                            prop_assert!(
                                matches!(&error, IpamError::RangeSetFailed { source, .. } if matches!(**source, IpamError::RangeSetExhausted { .. })),
                                "{}", error
                            );
                        }
                    }
                }
                Op::Release(id) => {
                    let released = ipam.release(&format!("c{id}"), "eth0").unwrap();
                    prop_assert_eq!(released, held.remove(&id).into_iter().collect::<Vec<_>>());
                }
            }
            let on_disk = leases(dir.path());
            let model: BTreeMap<IpAddr, String> =
                held.iter().map(|(id, ip)| (*ip, format!("c{id}\r\neth0"))).collect();
            prop_assert_eq!(&on_disk, &model);
            for ip in on_disk.keys() {
                prop_assert!(candidates.contains(ip), "{} is not allocatable", ip);
            }
        }
        // STATUS agrees with the model about exhaustion.
        prop_assert_eq!(ipam.status().is_ok(), held.len() < candidates.len());
    }

    /// Dual stack: one address of each family per attachment, all distinct; when one family runs
    /// out, the failed ADD leaves nothing behind.
    #[test]
    fn dual_stack_allocates_one_per_family(v4 in set_case(false), v6 in set_case(true), count in 1usize..40) {
        let (v4_total, v6_total) = (v4.candidates().len(), v6.candidates().len());
        prop_assume!(v4_total > 0 && v6_total > 0);
        let dir = tempfile::tempdir().unwrap();
        let ipam = host_local(dir.path(), &[&v4, &v6]);
        let capacity = v4_total.min(v6_total);
        for n in 0..count {
            let id = format!("c{n}");
            let result = ipam.allocate(&id, "eth0", &[]);
            if n < capacity {
                let got = common::addrs(&result.unwrap());
                prop_assert!(got[0].is_ipv4() && got[1].is_ipv6());
            } else {
                prop_assert!(result.is_err());
                prop_assert!(ipam.check(&id, "eth0").is_err());
            }
        }
        let on_disk = leases(dir.path());
        let allocated = count.min(capacity);
        prop_assert_eq!(on_disk.len(), 2 * allocated);
        prop_assert_eq!(on_disk.keys().filter(|ip| ip.is_ipv4()).count(), allocated);
        let all: BTreeSet<IpAddr> = v4.candidates().into_iter().chain(v6.candidates()).collect();
        prop_assert!(on_disk.keys().all(|ip| all.contains(ip)));
    }
}
