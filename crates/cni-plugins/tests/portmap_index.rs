//! portmap's index: every attachment's keys are listed in one flat set (`rcni_index`), not in
//! a chain of its own; DEL and GC still remove the index chains of the previous layout, empty
//! ones too. Real `rcni-plugins` binary, throwaway namespaces, checked with `nft -j`.

mod nft_common;

use cni_attribution::AttachmentId;
use cni_linux::NetNs;
use cni_nft::{concat, Batch, Chain, ConcatElement, ConcatSet, Family, Nft, Rule, SetType};
use nft_common::*;
use serde_json::{json, Value};

const NET: &str = "pmidx";
const TABLE: &str = "cni_hostport";

fn portmap_keys() -> Value {
    json!({ "type": "portmap", "capabilities": { "portMappings": true } })
}

fn add(lab: &Lab, ns: &str, cid: &str, ip: &str, port: u16) {
    let map = json!({ "portMappings": [{ "hostPort": port, "containerPort": 80 }] });
    let stdin = chained(NET, portmap_keys(), Some(&fake_result(ip)), Some(map));
    lab.rcni("portmap", "ADD", cid, ns, &stdin).assert_success();
}

/// Names of the chains of `ip cni_hostport`.
fn chains(lab: &Lab) -> Vec<String> {
    let doc: Value =
        serde_json::from_str(&lab.host_sh("nft -j list chains ip")).expect("nft -j list chains");
    doc["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o.get("chain"))
        .filter(|c| c["table"] == TABLE)
        .map(|c| c["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Comments of the `ip cni_hostport` rules and elements of container `cid`.
fn owned(lab: &Lab, cid: &str) -> Vec<(String, String)> {
    let host = lab.host().name.clone();
    rules(&host)
        .into_iter()
        .chain(elements(&host))
        .filter(|(f, t, _, c)| f == "ip" && t == TABLE && c.ends_with(&format!("id: {cid}")))
        .map(|(_, _, place, c)| (place, c))
        .collect()
}

fn index_set() -> ConcatSet {
    ConcatSet::set(
        Family::Ip,
        TABLE,
        "rcni_index",
        &[SetType::Ipv6Addr, SetType::Mark],
    )
}

fn in_host<T: Send>(lab: &Lab, f: impl FnOnce(&mut Nft) -> T + Send) -> T {
    NetNs::open(&lab.host().path)
        .expect("open the host namespace")
        .run(|| f(&mut Nft::new().expect("netfilter socket")))
        .expect("run in the host namespace")
}

/// Turns container `cid`'s index entry into the previous layout's index chain (named by its
/// tag prefix, one expression-less rule per key), keeping its elements: what an rcni before
/// the flat index left on the host. Built with cni-nft, since `nft` cannot parse a chain name
/// that starts with a digit.
fn to_previous_layout(lab: &Lab, cid: &str) -> String {
    let lines: Vec<String> = owned(lab, cid)
        .into_iter()
        .filter(|(place, _)| place == "rcni_index")
        .map(|(_, c)| c)
        .collect();
    let header = lines
        .iter()
        .find(|c| c.contains(" n="))
        .expect("an index header");
    let prefix = header.split(' ').next().unwrap().to_string();
    let (net, att) = prefix.split_once('-').unwrap();
    let id: Vec<u8> = (0..16)
        .map(|i| {
            let hex = if i < 8 { net } else { att };
            let j = 2 * (i % 8);
            u8::from_str_radix(&hex[j..j + 2], 16).unwrap()
        })
        .collect();
    let slots: Vec<ConcatElement> = (0..lines.len() as u32)
        .map(|s| ConcatElement::new(concat(&[&id, &s.to_ne_bytes()])))
        .collect();
    let mut b = Batch::new();
    b.delete_concat_elements(&index_set(), &slots).unwrap();
    b.add_chain(&Chain::regular(Family::Ip, TABLE, &prefix))
        .unwrap();
    for line in lines.iter().filter(|c| !c.contains(" n=")) {
        b.add_rule(
            &Rule::builder(Family::Ip, TABLE, &prefix)
                .comment(line)
                .build()
                .unwrap(),
        );
    }
    in_host(lab, |nft| nft.commit(&b)).expect("write the previous layout");
    prefix
}

#[test]
fn attachments_share_one_flat_index_and_no_chain_each() {
    let (lab, ns) = fake_lab();
    let before = {
        add(&lab, &ns, "first", "198.19.144.2", 9100);
        chains(&lab)
    };
    for (i, cid) in ["a", "b", "c"].iter().enumerate() {
        add(
            &lab,
            &ns,
            cid,
            &format!("198.19.144.{}", 3 + i),
            9101 + i as u16,
        );
    }
    // The chains are the constant ones, whatever the number of attachments.
    assert_eq!(chains(&lab), before);
    assert!(before.iter().all(|c| !c.contains('-')), "{before:?}");
    for cid in ["first", "a", "b", "c"] {
        let mine = owned(&lab, cid);
        // A header + 3 slots (the port and two hairpin sources), and their 3 elements.
        let index = mine.iter().filter(|(p, _)| p == "rcni_index").count();
        assert_eq!(index, 4, "{cid}: {mine:#?}");
        assert_eq!(mine.len(), 7, "{cid}: {mine:#?}");
    }
    // The index of "a" says what DEL removes: only its own entries go.
    let bare = chained(NET, portmap_keys(), None, None);
    lab.rcni("portmap", "DEL", "a", &ns, &bare).assert_success();
    assert!(owned(&lab, "a").is_empty());
    for cid in ["first", "b", "c"] {
        assert_eq!(owned(&lab, cid).len(), 7, "{cid}");
    }
    // CHECK of a survivor passes; CHECK after its index entry is gone fails.
    let map = json!({ "portMappings": [{ "hostPort": 9102, "containerPort": 80 }] });
    let stdin = chained(
        NET,
        portmap_keys(),
        Some(&fake_result("198.19.144.4")),
        Some(map),
    );
    lab.rcni("portmap", "CHECK", "b", &ns, &stdin)
        .assert_success();
    lab.host_sh("nft flush set ip cni_hostport rcni_index");
    let out = lab.rcni("portmap", "CHECK", "b", &ns, &stdin);
    assert!(!out.success(), "{out}");
}

#[test]
fn del_and_gc_remove_index_chains_of_the_previous_layout() {
    let (lab, ns) = fake_lab();
    add(&lab, &ns, "old-del", "198.19.144.10", 9200);
    add(&lab, &ns, "old-gc", "198.19.144.11", 9201);
    add(&lab, &ns, "kept", "198.19.144.12", 9202);
    let del_chain = to_previous_layout(&lab, "old-del");
    let gc_chain = to_previous_layout(&lab, "old-gc");
    let old_chain = to_previous_layout(&lab, "kept");
    let chains_now = chains(&lab);
    for c in [&del_chain, &gc_chain, &old_chain] {
        assert!(chains_now.contains(c), "{c} in {chains_now:?}");
    }
    // Each now has 3 index rules and 3 elements, and nothing in the index set.
    for cid in ["old-del", "old-gc", "kept"] {
        let mine = owned(&lab, cid);
        assert_eq!(mine.len(), 6, "{cid}: {mine:#?}");
        assert!(mine.iter().all(|(p, _)| p != "rcni_index"), "{mine:#?}");
    }

    // DEL finds its elements through the old chain and removes both.
    let bare = chained(NET, portmap_keys(), None, None);
    lab.rcni("portmap", "DEL", "old-del", &ns, &bare)
        .assert_success();
    assert!(owned(&lab, "old-del").is_empty());
    assert!(!chains(&lab).contains(&del_chain));

    // A repeated ADD of an old-layout attachment moves it to the index set.
    add(&lab, &ns, "kept", "198.19.144.12", 9202);
    assert!(!chains(&lab).contains(&old_chain));
    let mine = owned(&lab, "kept");
    assert_eq!(
        mine.iter().filter(|(p, _)| p == "rcni_index").count(),
        4,
        "{mine:#?}"
    );
    assert_eq!(mine.len(), 7, "{mine:#?}");

    // GC removes the invalid attachment's old chain and elements, and keeps the valid one.
    let gc = json!({
        "cniVersion": "1.1.0", "name": NET, "type": "portmap",
        "cni.dev/valid-attachments": [{ "containerID": "kept", "ifname": "eth0" }]
    });
    lab.rcni_gc("portmap", &gc.to_string()).assert_success();
    assert!(owned(&lab, "old-gc").is_empty());
    assert!(!chains(&lab).contains(&gc_chain));
    assert_eq!(owned(&lab, "kept").len(), 7);

    // GC with nothing valid removes the rest, index entries included.
    let gc = json!({
        "cniVersion": "1.1.0", "name": NET, "type": "portmap",
        "cni.dev/valid-attachments": []
    });
    lab.rcni_gc("portmap", &gc.to_string()).assert_success();
    assert!(owned(&lab, "kept").is_empty());
    let left: Vec<_> = elements(&lab.host().name)
        .into_iter()
        .filter(|(_, t, s, _)| t == TABLE && s == "rcni_index")
        .collect();
    assert!(left.is_empty(), "{left:#?}");
}

#[test]
fn empty_index_chains_of_the_previous_layout_are_removed_too() {
    let (lab, ns) = fake_lab();
    // The table exists (a live attachment), plus two empty chains named as the previous
    // layout named an attachment's index: what an old DEL that flushed the chain but was
    // killed before deleting it left behind.
    add(&lab, &ns, "live", "198.19.145.10", 9300);
    let prefix = |cid: &str| AttachmentId::new(NET, cid, "eth0").prefix();
    let mut b = Batch::new();
    for cid in ["empty-del", "empty-gc"] {
        b.add_chain(&Chain::regular(Family::Ip, TABLE, &prefix(cid)))
            .unwrap();
    }
    in_host(&lab, |nft| nft.commit(&b)).expect("make the empty chains");
    for cid in ["empty-del", "empty-gc"] {
        assert!(chains(&lab).contains(&prefix(cid)), "{cid}");
    }

    let bare = chained(NET, portmap_keys(), None, None);
    lab.rcni("portmap", "DEL", "empty-del", &ns, &bare)
        .assert_success();
    assert!(!chains(&lab).contains(&prefix("empty-del")));
    assert!(chains(&lab).contains(&prefix("empty-gc")));

    let gc = json!({
        "cniVersion": "1.1.0", "name": NET, "type": "portmap",
        "cni.dev/valid-attachments": [{ "containerID": "live", "ifname": "eth0" }]
    });
    lab.rcni_gc("portmap", &gc.to_string()).assert_success();
    assert!(!chains(&lab).contains(&prefix("empty-gc")));
    assert!(
        !owned(&lab, "live").is_empty(),
        "GC kept the valid attachment"
    );
}
