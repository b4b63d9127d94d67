//! Kernel tests of element reads: many keys in one GETSETELEM request, and a dump of a set,
//! checked against `nft -j list set` inside a throwaway namespace.

mod common;

use cni_nft::{concat, Batch, ConcatElement, ConcatSet, Family, SetType};
use common::TestNs;

fn index_set() -> ConcatSet {
    ConcatSet::set(Family::Ip, "t", "idx", &[SetType::Ipv6Addr, SetType::Mark])
}

fn key(owner: u8, slot: u32) -> Vec<u8> {
    concat(&[&[owner; 16], &slot.to_ne_bytes()])
}

#[test]
fn many_keys_in_one_request_stop_at_the_first_missing_one() {
    let Some(ns) = TestNs::new() else { return };
    let mut nft = ns.nft();
    let set = index_set();
    // Nothing there yet: no table, no set.
    assert!(nft
        .get_concat_elements(&set, &[key(1, 0)])
        .unwrap()
        .is_empty());
    assert!(nft.list_concat_elements(&set).unwrap().is_empty());

    let mut b = Batch::new();
    b.add_table(Family::Ip, "t").unwrap();
    b.add_concat_set(&set).unwrap();
    // Owner 1 has 600 slots (more than one request's worth), owner 2 has three.
    let mut els: Vec<ConcatElement> = (0..600)
        .map(|s| ConcatElement::new(key(1, s)).comment(&format!("owner 1 slot {s}")))
        .collect();
    els.extend((0..3).map(|s| ConcatElement::new(key(2, s)).comment(&format!("owner 2 slot {s}"))));
    b.add_concat_elements(&set, &els, true).unwrap();
    nft.commit(&b).unwrap();

    let keys: Vec<Vec<u8>> = (0..600).map(|s| key(1, s)).collect();
    let got = nft.get_concat_elements(&set, &keys).unwrap();
    assert_eq!(got.len(), 600);
    for (s, el) in got.iter().enumerate() {
        assert_eq!(el.key, key(1, s as u32));
        assert_eq!(
            el.comment.as_deref(),
            Some(format!("owner 1 slot {s}").as_str())
        );
    }
    // Owner 2 has slots 0..3: a request for 0..5 answers the three, in order.
    let keys: Vec<Vec<u8>> = (0..5).map(|s| key(2, s)).collect();
    let got = nft.get_concat_elements(&set, &keys).unwrap();
    let comments: Vec<_> = got.iter().filter_map(|e| e.comment.clone()).collect();
    assert_eq!(
        comments,
        ["owner 2 slot 0", "owner 2 slot 1", "owner 2 slot 2"]
    );
    assert!(nft
        .get_concat_elements(&set, &[key(3, 0)])
        .unwrap()
        .is_empty());

    // The dump sees all of them; `nft` agrees on the count.
    assert_eq!(nft.list_concat_elements(&set).unwrap().len(), 603);
    let doc: serde_json::Value =
        serde_json::from_str(&ns.exec_ok(&["nft", "-j", "list", "set", "ip", "t", "idx"])).unwrap();
    let listed = doc["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|o| o["set"]["elem"].as_array())
        .map_or(0, Vec::len);
    assert_eq!(listed, 603);
}
