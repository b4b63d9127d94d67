//! Verdict maps in the kernel: created, filled and read back with `nft -j`, and dispatching
//! real traffic (a ping dropped or counted by the chain its source address maps to) inside
//! throwaway namespaces.

mod common;

use std::net::IpAddr;

use cni_nft::{
    priority, Batch, Chain, ChainType, Family, Hook, Policy, Rule, SetType, Verdict, VerdictMap,
};
use common::TestNs;
use serde_json::{json, Value};

const T: &str = "vm";

fn addr(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn pings(from: &TestNs, to: &str) -> bool {
    cni_testkit::ping(&from.name, addr(to))
}

fn map_elements(ns: &TestNs) -> Vec<Value> {
    let out = ns.exec_ok(&["nft", "-j", "list", "map", "inet", T, "by_source"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    v["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|o| o.get("map"))
        .and_then(|m| m.get("elem"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

#[test]
fn source_addresses_dispatch_to_chains_and_elements_come_and_go() {
    let Some(a) = TestNs::new() else { return };
    let Some(b) = TestNs::new() else { return };
    a.ip(&[
        "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", &b.name,
    ]);
    a.ip(&["addr", "add", "198.18.7.1/24", "dev", "va"]);
    a.ip(&["link", "set", "va", "up"]);
    b.ip(&["addr", "add", "198.18.7.2/24", "dev", "vb"]);
    b.ip(&["link", "set", "vb", "up"]);
    assert!(pings(&a, "198.18.7.2"), "no path before any rule");

    let map = VerdictMap::new(Family::Inet, T, "by_source", SetType::Ipv4Addr);
    let mut batch = Batch::new();
    batch.add_table(Family::Inet, T).unwrap();
    batch
        .add_chain(&Chain::regular(Family::Inet, T, "counted"))
        .unwrap();
    batch
        .add_chain(&Chain::regular(Family::Inet, T, "refused"))
        .unwrap();
    batch
        .add_chain(
            &Chain::base(
                Family::Inet,
                T,
                "input",
                ChainType::Filter,
                Hook::Input,
                priority::FILTER,
            )
            .with_policy(Policy::Accept),
        )
        .unwrap();
    batch.add_verdict_map(&map).unwrap();
    batch.add_rule(
        &Rule::builder(Family::Inet, T, "counted")
            .counter()
            .build()
            .unwrap(),
    );
    batch.add_rule(
        &Rule::builder(Family::Inet, T, "refused")
            .drop()
            .build()
            .unwrap(),
    );
    batch.add_rule(
        &Rule::builder(Family::Inet, T, "input")
            .saddr_vmap(&map)
            .build()
            .unwrap(),
    );
    batch
        .add_verdict_elements(
            &map,
            &[
                (addr("198.18.7.1"), Verdict::Jump("counted".into())),
                (addr("198.18.7.9"), Verdict::Jump("refused".into())),
            ],
        )
        .unwrap();
    b.nft().commit(&batch).unwrap();

    let mut elems = map_elements(&b);
    elems.sort_by_key(|e| e[0].to_string());
    assert_eq!(
        elems,
        [
            json!(["198.18.7.1", {"jump": {"target": "counted"}}]),
            json!(["198.18.7.9", {"jump": {"target": "refused"}}]),
        ]
    );
    let rules = b.exec_ok(&["nft", "list", "chain", "inet", T, "input"]);
    assert!(rules.contains("ip saddr vmap @by_source"), "{rules}");

    // 198.18.7.1 jumps to `counted` and passes.
    assert!(pings(&a, "198.18.7.2"));
    let counted = b.exec_ok(&["nft", "list", "chain", "inet", T, "counted"]);
    assert!(!counted.contains("packets 0 "), "{counted}");

    // Mapped to `refused` instead (delete and add in one batch), it is dropped.
    let mut swap = Batch::new();
    swap.delete_verdict_elements(&map, &[addr("198.18.7.1")])
        .unwrap();
    swap.add_verdict_elements(
        &map,
        &[(addr("198.18.7.1"), Verdict::Jump("refused".into()))],
    )
    .unwrap();
    b.nft().commit(&swap).unwrap();
    assert!(!pings(&a, "198.18.7.2"));

    // Without its element the address falls through to the chain's policy.
    let mut del = Batch::new();
    del.delete_verdict_elements(&map, &[addr("198.18.7.1")])
        .unwrap();
    b.nft().commit(&del).unwrap();
    assert!(pings(&a, "198.18.7.2"));
    assert_eq!(map_elements(&b).len(), 1);

    // A key of the wrong family and an element jumping to a missing chain are refused.
    let mut bad = Batch::new();
    assert!(bad
        .add_verdict_elements(&map, &[(addr("2001:db8::1"), Verdict::Accept)])
        .is_err());
    bad.add_verdict_elements(
        &map,
        &[(addr("198.18.7.5"), Verdict::Jump("nowhere".into()))],
    )
    .unwrap();
    let err = b.nft().commit(&bad).unwrap_err().to_string();
    assert!(err.contains("by_source"), "{err}");
    assert_eq!(map_elements(&b).len(), 1);
}
