//! Sets, verdict maps and batches far larger than one netlink attribute: a list of elements
//! is split across messages of one transaction, and the kernel holds every element, read back
//! with `nft -j` inside a throwaway namespace.

mod common;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cni_nft::{Batch, Chain, Family, Set, SetElement, SetType, Verdict, VerdictMap};
use common::TestNs;
use serde_json::Value;

const T: &str = "big";

/// `n` distinct IPv4 addresses in 198.18.0.0/15.
fn ipv4(n: u32) -> Vec<IpAddr> {
    assert!(n <= 1 << 17);
    (0..n)
        .map(|i| IpAddr::V4(Ipv4Addr::from(0xc612_0000 + i)))
        .collect()
}

/// `n` distinct IPv6 addresses in fd00:198:18::/64.
fn ipv6(n: u32) -> Vec<IpAddr> {
    (0..n)
        .map(|i| {
            IpAddr::V6(Ipv6Addr::from(
                0xfd00_0198_0018_0000_0000_0000_0000_0000u128 + u128::from(i) * 7 + 1,
            ))
        })
        .collect()
}

/// The elements of a set or map as `nft -j list <kind> inet big <name>` prints them: the
/// address of each (a map's element is `[address, verdict]`), and the verdicts seen.
fn listed(ns: &TestNs, kind: &str, name: &str) -> (BTreeSet<IpAddr>, BTreeSet<String>) {
    let out = ns.exec_ok(&["nft", "-j", "list", kind, "inet", T, name]);
    let doc: Value = serde_json::from_str(&out).unwrap();
    let obj = doc["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|o| o.get(kind))
        .unwrap_or_else(|| panic!("no {kind} {name} in {out:.300}"));
    let mut addrs = BTreeSet::new();
    let mut verdicts = BTreeSet::new();
    for el in obj
        .get("elem")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
    {
        let (key, verdict) = match el.as_array() {
            Some(pair) => (pair[0].clone(), Some(pair[1].to_string())),
            None => (el, None),
        };
        let text = key.as_str().unwrap_or_else(|| panic!("element {key}"));
        assert!(addrs.insert(text.parse().unwrap()), "{text} listed twice");
        verdicts.extend(verdict);
    }
    (addrs, verdicts)
}

fn set(name: &str, key: SetType) -> Set {
    Set::new(Family::Inet, T, name, key)
}

fn elements(addrs: &[IpAddr]) -> Vec<SetElement> {
    addrs.iter().map(|a| SetElement::addr(*a)).collect()
}

fn jump_to(chain: &str, addrs: &[IpAddr]) -> Vec<(IpAddr, Verdict)> {
    addrs
        .iter()
        .map(|a| (*a, Verdict::Jump(chain.into())))
        .collect()
}

#[test]
fn sets_of_70000_ipv4_and_70000_ipv6_members_commit_in_one_batch() {
    let Some(ns) = TestNs::new() else { return };
    let (v4, v6) = (ipv4(70_000), ipv6(70_000));
    let mut b = Batch::new();
    b.add_table(Family::Inet, T).unwrap();
    b.add_set(&set("peer4", SetType::Ipv4Addr)).unwrap();
    b.add_set(&set("peer6", SetType::Ipv6Addr)).unwrap();
    b.add_elements(&set("peer4", SetType::Ipv4Addr), &elements(&v4))
        .unwrap();
    b.add_elements(&set("peer6", SetType::Ipv6Addr), &elements(&v6))
        .unwrap();
    ns.nft().commit(&b).unwrap();

    let (got4, _) = listed(&ns, "set", "peer4");
    assert_eq!(got4.len(), 70_000);
    assert_eq!(got4, v4.iter().copied().collect());
    let (got6, _) = listed(&ns, "set", "peer6");
    assert_eq!(got6.len(), 70_000);
    assert_eq!(got6, v6.iter().copied().collect());
}

#[test]
fn a_verdict_map_of_70000_elements_commits_and_lists_back() {
    let Some(ns) = TestNs::new() else { return };
    let map = VerdictMap::new(Family::Inet, T, "dispatch", SetType::Ipv4Addr);
    let addrs = ipv4(70_000);
    let mut b = Batch::new();
    b.add_table(Family::Inet, T).unwrap();
    b.add_chain(&Chain::regular(
        Family::Inet,
        T,
        "pod-with-a-long-chain-name",
    ))
    .unwrap();
    b.add_verdict_map(&map).unwrap();
    b.add_verdict_elements(&map, &jump_to("pod-with-a-long-chain-name", &addrs))
        .unwrap();
    ns.nft().commit(&b).unwrap();

    let (got, verdicts) = listed(&ns, "map", "dispatch");
    assert_eq!(got.len(), 70_000);
    assert_eq!(got, addrs.iter().copied().collect());
    assert_eq!(
        verdicts.into_iter().collect::<Vec<_>>(),
        [r#"{"jump":{"target":"pod-with-a-long-chain-name"}}"#]
    );
    // Our own reader agrees.
    assert_eq!(ns.nft().list_verdict_elements(&map).unwrap().len(), 70_000);
}

#[test]
fn deleting_70000_elements_in_one_batch_empties_the_set_and_the_map() {
    let Some(ns) = TestNs::new() else { return };
    let peers = set("peer6", SetType::Ipv6Addr);
    let map = VerdictMap::new(Family::Inet, T, "dispatch", SetType::Ipv4Addr);
    let (v4, v6) = (ipv4(70_001), ipv6(70_000));
    let mut b = Batch::new();
    b.add_table(Family::Inet, T).unwrap();
    b.add_chain(&Chain::regular(Family::Inet, T, "pod"))
        .unwrap();
    b.add_set(&peers).unwrap();
    b.add_verdict_map(&map).unwrap();
    b.add_elements(&peers, &elements(&v6)).unwrap();
    b.add_verdict_elements(&map, &jump_to("pod", &v4)).unwrap();
    let mut nft = ns.nft();
    nft.commit(&b).unwrap();
    assert_eq!(listed(&ns, "set", "peer6").0.len(), 70_000);

    let mut d = Batch::new();
    d.delete_elements(&peers, &elements(&v6)).unwrap();
    d.delete_verdict_elements(&map, &v4[..70_000]).unwrap();
    nft.commit(&d).unwrap();
    assert!(listed(&ns, "set", "peer6").0.is_empty());
    let (left, _) = listed(&ns, "map", "dispatch");
    assert_eq!(left, [v4[70_000]].into_iter().collect());

    // A delete of elements that are gone fails as a whole, naming a message of the batch.
    let mut again = Batch::new();
    again.delete_elements(&peers, &elements(&v6)).unwrap();
    let err = nft.commit(&again).unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(err.to_string().contains("of set inet big peer6"), "{err}");
}

#[test]
fn a_batch_of_150000_elements_commits() {
    let Some(ns) = TestNs::new() else { return };
    let map = VerdictMap::new(Family::Inet, T, "dispatch6", SetType::Ipv6Addr);
    let addrs = ipv6(150_000);
    let mut b = Batch::new();
    b.add_table(Family::Inet, T).unwrap();
    b.add_chain(&Chain::regular(Family::Inet, T, "pod"))
        .unwrap();
    b.add_verdict_map(&map).unwrap();
    b.add_verdict_elements(&map, &jump_to("pod", &addrs))
        .unwrap();
    assert!(b.len() > 60, "{} messages", b.len());
    ns.nft().commit(&b).unwrap();

    let (got, _) = listed(&ns, "map", "dispatch6");
    assert_eq!(got.len(), 150_000);
    assert_eq!(got, addrs.iter().copied().collect());
}
