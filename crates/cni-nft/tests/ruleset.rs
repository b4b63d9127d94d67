//! Kernel tests: build nf_tables objects over netlink inside a throwaway namespace, then read
//! them back with `nft -j list ruleset` (an independent decoder) and delete them by comment.

mod common;

use std::net::IpAddr;

use cni_nft::{ct_state, priority, Batch, Chain, ChainType, Family, Hook, L4Proto, Policy, Rule};
use common::{objects, statements, TestNs};
use ipnet::IpNet;
use serde_json::{json, Value};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

const MASQ_TABLE: &str = "cni_plugins_masquerade";

fn ipmasq_batch(comment4: &str, comment6: &str) -> Batch {
    let f = Family::Inet;
    let mut b = Batch::new();
    b.add_table(f, MASQ_TABLE).unwrap();
    b.add_chain(&Chain::regular(f, MASQ_TABLE, "masq_checks"))
        .unwrap();
    b.add_chain(&Chain::base(
        f,
        MASQ_TABLE,
        "postrouting",
        ChainType::Nat,
        Hook::Postrouting,
        priority::SRCNAT,
    ))
    .unwrap();
    b.flush_chain(f, MASQ_TABLE, "postrouting").unwrap();
    let post = |r: cni_nft::RuleBuilder| r.build().unwrap();
    b.add_rule(&post(
        Rule::builder(f, MASQ_TABLE, "postrouting")
            .daddr(net("224.0.0.0/4"))
            .ret(),
    ));
    b.add_rule(&post(
        Rule::builder(f, MASQ_TABLE, "postrouting")
            .daddr(net("ff00::/8"))
            .ret(),
    ));
    b.add_rule(&post(
        Rule::builder(f, MASQ_TABLE, "postrouting").goto("masq_checks"),
    ));
    b.add_rule(
        &Rule::builder(f, MASQ_TABLE, "masq_checks")
            .saddr(ip("198.18.128.5"))
            .daddr_not(net("198.18.128.0/24"))
            .masquerade()
            .comment(comment4)
            .build()
            .unwrap(),
    );
    b.add_rule(
        &Rule::builder(f, MASQ_TABLE, "masq_checks")
            .saddr(ip("fd00::5"))
            .daddr_not(net("fd00::/64"))
            .masquerade()
            .comment(comment6)
            .build()
            .unwrap(),
    );
    b
}

/// `{"match": {"op": op, "left": {"payload": {...}}, "right": right}}` for one header field.
fn payload_match(protocol: &str, field: &str, op: &str, right: Value) -> Value {
    json!({"match": {"op": op, "left": {"payload": {"protocol": protocol, "field": field}}, "right": right}})
}

#[test]
fn ipmasq_shape_reads_back_and_deletes_by_comment() {
    let Some(ns) = TestNs::new() else { return };
    let mut nft = ns.nft();
    let c4 = "aaaa-bbbb, net: mynet, if: eth0, id: cid-1";
    let c6 = "aaaa-cccc, net: mynet, if: eth1, id: cid-1";
    nft.commit(&ipmasq_batch(c4, c6)).unwrap();
    // Setup batches are re-runnable: tables and chains are created only when missing and the
    // base chain is flushed before its rules are rewritten.
    nft.commit(&ipmasq_batch("dup-4", "dup-6")).unwrap();

    let doc = ns.ruleset();
    let chains = objects(&doc, "chain");
    let post = chains.iter().find(|c| c["name"] == "postrouting").unwrap();
    assert_eq!(post["type"], "nat");
    assert_eq!(post["hook"], "postrouting");
    assert_eq!(post["prio"], 100);

    let post_rules = ns.rules("inet", MASQ_TABLE, "postrouting");
    assert_eq!(
        post_rules.len(),
        3,
        "flushed and rewritten: {post_rules:#?}"
    );
    assert_eq!(
        post_rules[0]["expr"],
        json!([
            payload_match("ip", "daddr", "==", json!({"prefix": {"addr": "224.0.0.0", "len": 4}})),
            {"return": null}
        ])
    );
    assert_eq!(
        post_rules[1]["expr"][0],
        payload_match(
            "ip6",
            "daddr",
            "==",
            json!({"prefix": {"addr": "ff00::", "len": 8}})
        )
    );
    assert_eq!(
        post_rules[2]["expr"],
        json!([{"goto": {"target": "masq_checks"}}])
    );

    let checks = ns.rules("inet", MASQ_TABLE, "masq_checks");
    assert_eq!(checks.len(), 4);
    assert_eq!(checks[0]["comment"], c4);
    assert_eq!(
        checks[0]["expr"],
        json!([
            payload_match("ip", "saddr", "==", json!("198.18.128.5")),
            payload_match("ip", "daddr", "!=", json!({"prefix": {"addr": "198.18.128.0", "len": 24}})),
            {"masquerade": null}
        ])
    );
    assert_eq!(checks[1]["comment"], c6);
    assert_eq!(
        checks[1]["expr"][1],
        payload_match(
            "ip6",
            "daddr",
            "!=",
            json!({"prefix": {"addr": "fd00::", "len": 64}})
        )
    );

    // Our own listing agrees with nft on handles and comments.
    let listed = nft
        .list_rules(Family::Inet, MASQ_TABLE, "masq_checks")
        .unwrap();
    let ours: Vec<(u64, Option<String>)> = listed
        .iter()
        .map(|r| (r.handle, r.comment.clone()))
        .collect();
    let theirs: Vec<(u64, Option<String>)> = checks
        .iter()
        .map(|r| {
            (
                r["handle"].as_u64().unwrap(),
                r["comment"].as_str().map(String::from),
            )
        })
        .collect();
    assert_eq!(ours, theirs);

    // Select by comment, delete by handle.
    let n = nft
        .delete_rules_where(
            Family::Inet,
            MASQ_TABLE,
            &["masq_checks", "missing_chain"],
            |r| {
                r.comment
                    .as_deref()
                    .is_some_and(|c| c.starts_with("aaaa-bbbb"))
            },
        )
        .unwrap();
    assert_eq!(n, 1);
    let left: Vec<Value> = ns
        .rules("inet", MASQ_TABLE, "masq_checks")
        .iter()
        .map(|r| r["comment"].clone())
        .collect();
    assert_eq!(left, vec![json!(c6), json!("dup-4"), json!("dup-6")]);
    for c in [c6, "dup-4", "dup-6"] {
        assert_eq!(
            nft.delete_rules_with_comment(Family::Inet, MASQ_TABLE, &["masq_checks"], c)
                .unwrap(),
            1
        );
    }
    assert!(ns.rules("inet", MASQ_TABLE, "masq_checks").is_empty());
    assert_eq!(
        nft.delete_rules_with_comment(Family::Inet, MASQ_TABLE, &["masq_checks"], c4)
            .unwrap(),
        0
    );

    // Tear everything down; destroy also works on a table that is already gone.
    let mut b = Batch::new();
    b.destroy_table(Family::Inet, MASQ_TABLE).unwrap();
    nft.commit(&b).unwrap();
    nft.commit(&b).unwrap();
    assert!(objects(&ns.ruleset(), "table").is_empty());
    assert!(!nft.table_exists(Family::Inet, MASQ_TABLE).unwrap());
}

const HOSTPORT: &str = "cni_hostport";

fn hostport_setup(family: Family) -> Batch {
    let mut b = Batch::new();
    b.add_table(family, HOSTPORT).unwrap();
    for chain in ["hostports", "hostip_hostports", "hostports_all"] {
        b.add_chain(&Chain::regular(family, HOSTPORT, chain))
            .unwrap();
    }
    let bases = [
        ("prerouting", Hook::Prerouting, priority::DSTNAT),
        ("output", Hook::Output, priority::DSTNAT),
        ("masquerading", Hook::Postrouting, priority::SRCNAT),
    ];
    for (name, hook, prio) in bases {
        b.add_chain(&Chain::base(
            family,
            HOSTPORT,
            name,
            ChainType::Nat,
            hook,
            prio,
        ))
        .unwrap();
    }
    b.flush_chain(family, HOSTPORT, "hostports_all").unwrap();
    for target in ["hostip_hostports", "hostports"] {
        b.add_rule(
            &Rule::builder(family, HOSTPORT, "hostports_all")
                .jump(target)
                .build()
                .unwrap(),
        );
    }
    for base in ["prerouting", "output"] {
        b.flush_chain(family, HOSTPORT, base).unwrap();
        b.add_rule(
            &Rule::builder(family, HOSTPORT, base)
                .fib_daddr_local()
                .jump("hostports_all")
                .build()
                .unwrap(),
        );
    }
    b
}

#[test]
fn portmap_shape_reads_back_and_deletes_by_container_id() {
    let Some(ns) = TestNs::new() else { return };
    let mut nft = ns.nft();
    let cid = "0123456789abcdef";
    let mut b = hostport_setup(Family::Ip);
    b.add_rule(
        &Rule::builder(Family::Ip, HOSTPORT, "hostports")
            .daddr(ip("198.18.145.1"))
            .dport(L4Proto::Tcp, 8080)
            .dnat(ip("198.18.128.2"), Some(80))
            .comment(cid)
            .build()
            .unwrap(),
    );
    b.add_rule(
        &Rule::builder(Family::Ip, HOSTPORT, "hostports")
            .dport(L4Proto::Udp, 5353)
            .dnat(ip("198.18.128.2"), Some(53))
            .comment(cid)
            .build()
            .unwrap(),
    );
    b.add_rule(
        &Rule::builder(Family::Ip, HOSTPORT, "masquerading")
            .saddr(ip("198.18.128.2"))
            .daddr(ip("198.18.128.2"))
            .masquerade()
            .comment(cid)
            .build()
            .unwrap(),
    );
    nft.commit(&b).unwrap();

    let mut b6 = hostport_setup(Family::Ip6);
    b6.add_rule(
        &Rule::builder(Family::Ip6, HOSTPORT, "hostports")
            .dport(L4Proto::Sctp, 9000)
            .dnat(ip("fd00::2"), Some(9001))
            .comment(cid)
            .build()
            .unwrap(),
    );
    nft.commit(&b6).unwrap();

    let pre = ns.rules("ip", HOSTPORT, "prerouting");
    assert_eq!(pre.len(), 1);
    assert_eq!(
        pre[0]["expr"],
        json!([
            {"match": {"op": "==", "left": {"fib": {"result": "type", "flags": ["daddr"]}}, "right": "local"}},
            {"jump": {"target": "hostports_all"}}
        ])
    );
    let all = ns.rules("ip", HOSTPORT, "hostports_all");
    assert_eq!(all.len(), 2);
    assert_eq!(all[1]["expr"], json!([{"jump": {"target": "hostports"}}]));

    let hp = ns.rules("ip", HOSTPORT, "hostports");
    assert_eq!(hp.len(), 2);
    assert_eq!(hp[0]["comment"], cid);
    assert_eq!(
        hp[0]["expr"],
        json!([
            payload_match("ip", "daddr", "==", json!("198.18.145.1")),
            payload_match("tcp", "dport", "==", json!(8080)),
            {"dnat": {"addr": "198.18.128.2", "port": 80}}
        ])
    );
    assert_eq!(
        hp[1]["expr"][0],
        payload_match("udp", "dport", "==", json!(5353))
    );
    let hp6 = ns.rules("ip6", HOSTPORT, "hostports");
    assert_eq!(
        hp6[0]["expr"],
        json!([
            payload_match("sctp", "dport", "==", json!(9000)),
            {"dnat": {"addr": "fd00::2", "port": 9001}}
        ])
    );
    let masq = ns.rules("ip", HOSTPORT, "masquerading");
    assert_eq!(statements(&masq[0], "masquerade").len(), 1);

    // DEL: per family, every rule carrying the container ID in the three chains.
    let chains = ["hostports", "hostip_hostports", "masquerading"];
    assert_eq!(
        nft.delete_rules_with_comment(Family::Ip, HOSTPORT, &chains, cid)
            .unwrap(),
        3
    );
    assert_eq!(
        nft.delete_rules_with_comment(Family::Ip6, HOSTPORT, &chains, cid)
            .unwrap(),
        1
    );
    let commented: Vec<Value> = objects(&ns.ruleset(), "rule")
        .into_iter()
        .filter(|r| r.get("comment").is_some())
        .collect();
    assert!(commented.is_empty(), "{commented:#?}");
    // Tables and the shared chains stay, like the Go plugin.
    assert_eq!(ns.rules("ip", HOSTPORT, "prerouting").len(), 1);
    let chains = nft.list_chains(Family::Ip, HOSTPORT).unwrap();
    assert_eq!(chains.len(), 6);
    assert_eq!(chains.iter().filter(|c| c.is_base).count(), 3);
}

#[test]
fn firewall_shapes_sets_and_positions() {
    let Some(ns) = TestNs::new() else { return };
    let mut nft = ns.nft();
    let (f, t) = (Family::Inet, "cni_firewall");
    let ports = cni_nft::Set::new(f, t, "allowed_ports", cni_nft::SetType::InetService);
    let mut b = Batch::new();
    b.add_table(f, t).unwrap();
    b.add_chain(
        &Chain::base(
            f,
            t,
            "forward",
            ChainType::Filter,
            Hook::Forward,
            priority::FILTER,
        )
        .with_policy(Policy::Drop),
    )
    .unwrap();
    b.add_set(&ports).unwrap();
    let hosts = cni_nft::Set::new(f, t, "hosts", cni_nft::SetType::Ipv4Addr);
    b.add_set(&hosts).unwrap();
    b.add_elements(&hosts, &[cni_nft::SetElement::addr(ip("198.18.128.9"))])
        .unwrap();
    b.add_elements(
        &ports,
        &[
            cni_nft::SetElement::port(22),
            cni_nft::SetElement::port(443),
        ],
    )
    .unwrap();
    b.add_rule(
        &Rule::builder(f, t, "forward")
            .daddr(ip("198.18.128.7"))
            .ct_state(ct_state::ESTABLISHED | ct_state::RELATED)
            .counter()
            .accept()
            .comment("cid-7")
            .build()
            .unwrap(),
    );
    b.add_rule(
        &Rule::builder(f, t, "forward")
            .iifname("br0")
            .oifname_not("br0")
            .set_mark(0x2000)
            .accept()
            .build()
            .unwrap(),
    );
    b.add_rule(
        &Rule::builder(f, t, "forward")
            .dport_in(L4Proto::Tcp, &ports)
            .accept()
            .build()
            .unwrap(),
    );
    b.add_rule(
        &Rule::builder(f, t, "forward")
            .daddr_in(&hosts)
            .ct_mark(7)
            .set_ct_mark(9)
            .nfproto(Family::Ip)
            .accept()
            .build()
            .unwrap(),
    );
    nft.commit(&b).unwrap();
    let first = nft.list_rules(f, t, "forward").unwrap()[0].handle;
    let mut b = Batch::new();
    b.insert_rule(
        &Rule::builder(f, t, "forward")
            .saddr(ip("198.18.128.7"))
            .mark(0x1000, 0x1000)
            .drop()
            .comment("inserted")
            .build()
            .unwrap(),
    );
    b.add_rule(
        &Rule::builder(f, t, "forward")
            .iifname("eth0")
            .ret()
            .position(first)
            .comment("after-first")
            .build()
            .unwrap(),
    );
    nft.commit(&b).unwrap();

    let doc = ns.ruleset();
    let chain = objects(&doc, "chain").into_iter().next().unwrap();
    assert_eq!(chain["policy"], "drop");
    assert_eq!(chain["hook"], "forward");
    let sets = objects(&doc, "set");
    assert_eq!(sets[0]["type"], "inet_service");
    assert_eq!(sets[0]["elem"], json!([22, 443]));
    assert_eq!(sets[1]["type"], "ipv4_addr");
    assert_eq!(sets[1]["elem"], json!(["198.18.128.9"]));

    let rules = ns.rules("inet", t, "forward");
    let comments: Vec<Value> = rules.iter().map(|r| r["comment"].clone()).collect();
    assert_eq!(
        comments,
        vec![
            json!("inserted"),
            json!("cid-7"),
            json!("after-first"),
            Value::Null,
            Value::Null,
            Value::Null
        ]
    );
    assert_eq!(
        rules[0]["expr"][1],
        json!({"match": {"op": "==", "left": {"&": [{"meta": {"key": "mark"}}, 4096]}, "right": 4096}})
    );
    assert_eq!(
        rules[1]["expr"],
        json!([
            payload_match("ip", "daddr", "==", json!("198.18.128.7")),
            {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established", "related"]}},
            {"counter": {"packets": 0, "bytes": 0}},
            {"accept": null}
        ])
    );
    assert_eq!(
        rules[3]["expr"],
        json!([
            {"match": {"op": "==", "left": {"meta": {"key": "iifname"}}, "right": "br0"}},
            {"match": {"op": "!=", "left": {"meta": {"key": "oifname"}}, "right": "br0"}},
            {"mangle": {"key": {"meta": {"key": "mark"}}, "value": 8192}},
            {"accept": null}
        ])
    );
    assert_eq!(
        rules[4]["expr"][0],
        payload_match("tcp", "dport", "==", json!("@allowed_ports"))
    );
    assert_eq!(
        rules[5]["expr"],
        json!([
            payload_match("ip", "daddr", "==", json!("@hosts")),
            {"match": {"op": "==", "left": {"ct": {"key": "mark"}}, "right": 7}},
            {"mangle": {"key": {"ct": {"key": "mark"}}, "value": 9}},
            {"match": {"op": "==", "left": {"meta": {"key": "nfproto"}}, "right": "ipv4"}},
            {"accept": null}
        ])
    );
    let mut b = Batch::new();
    b.delete_elements(&ports, &[cni_nft::SetElement::port(22)])
        .unwrap();
    nft.commit(&b).unwrap();
    let set = objects(&ns.ruleset(), "set").into_iter().next().unwrap();
    assert_eq!(set["elem"], json!([443]));
}

#[test]
fn failed_batch_names_the_message_and_changes_nothing() {
    let Some(ns) = TestNs::new() else { return };
    let mut nft = ns.nft();
    let mut b = Batch::new();
    b.add_table(Family::Ip, "t").unwrap();
    b.add_chain(&Chain::regular(Family::Ip, "t", "c")).unwrap();
    b.add_rule(
        &Rule::builder(Family::Ip, "t", "no_such_chain")
            .accept()
            .comment("x")
            .build()
            .unwrap(),
    );
    let err = nft.commit(&b).unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(
        err.to_string().contains("add rule ip t no_such_chain"),
        "{err}"
    );
    assert!(objects(&ns.ruleset(), "table").is_empty());
    assert!(!nft.table_exists(Family::Ip, "t").unwrap());

    // Deleting a chain that does not exist fails; a chain in use cannot be deleted.
    let mut b = Batch::new();
    b.add_table(Family::Ip, "t").unwrap();
    b.add_chain(&Chain::regular(Family::Ip, "t", "c")).unwrap();
    b.add_chain(&Chain::regular(Family::Ip, "t", "d")).unwrap();
    b.add_rule(
        &Rule::builder(Family::Ip, "t", "c")
            .jump("d")
            .build()
            .unwrap(),
    );
    nft.commit(&b).unwrap();
    assert!(nft.table_exists(Family::Ip, "t").unwrap());
    assert!(nft.chain_exists(Family::Ip, "t", "d").unwrap());
    assert!(!nft.chain_exists(Family::Ip, "t", "e").unwrap());
    let mut b = Batch::new();
    b.delete_chain(Family::Ip, "t", "d").unwrap();
    let err = nft.commit(&b).unwrap_err();
    assert_eq!(err.errno(), Some(libc_ebusy()), "{err}");
    let mut b = Batch::new();
    b.delete_chain(Family::Ip, "t", "e").unwrap();
    assert!(nft.commit(&b).unwrap_err().is_not_found());
    // Listing a chain or table that does not exist is empty, not an error.
    assert!(nft.list_rules(Family::Ip, "t", "e").unwrap().is_empty());
    assert!(nft.list_rules(Family::Ip, "nope", "e").unwrap().is_empty());
    assert!(nft.list_chains(Family::Ip6, "t").unwrap().is_empty());
}

fn libc_ebusy() -> i32 {
    16
}

#[test]
fn large_batches_are_fully_acknowledged() {
    let Some(ns) = TestNs::new() else { return };
    let mut nft = ns.nft();
    let mut b = Batch::new();
    b.add_table(Family::Ip, "big").unwrap();
    b.add_chain(&Chain::regular(Family::Ip, "big", "c"))
        .unwrap();
    for i in 0..2000u32 {
        let addr = std::net::Ipv4Addr::from(0xc612_8000 + i);
        b.add_rule(
            &Rule::builder(Family::Ip, "big", "c")
                .saddr(IpAddr::V4(addr))
                .dport(L4Proto::Tcp, 80)
                .dnat(ip("198.18.144.1"), Some(8080))
                .comment(&format!("id-{}", i % 3))
                .build()
                .unwrap(),
        );
    }
    nft.commit(&b).unwrap();
    let rules = nft.list_rules(Family::Ip, "big", "c").unwrap();
    assert_eq!(rules.len(), 2000);
    assert_eq!(ns.rules("ip", "big", "c").len(), 2000);
    let n = nft
        .delete_rules_with_comment(Family::Ip, "big", &["c"], "id-1")
        .unwrap();
    assert_eq!(n, 667);
    assert_eq!(nft.list_rules(Family::Ip, "big", "c").unwrap().len(), 1333);
}

#[test]
fn rules_written_by_nft_are_listed_and_deleted_by_comment() {
    // The Go plugins write their rules with the nft tool; DEL and GC here must find them.
    let Some(ns) = TestNs::new() else { return };
    let script = r#"
table ip cni_hostport {
    chain hostports {
        tcp dport 8080 dnat to 198.18.128.2:80 comment "cid-go"
        udp dport 53 dnat to 198.18.128.3:53 comment "cid-other"
        tcp dport 8081 dnat to 198.18.128.2:81 comment "cid-go"
    }
}
"#;
    let path = std::env::temp_dir().join(format!("{}-go.nft", ns.name));
    std::fs::write(&path, script).unwrap();
    let applied = ns.exec(&["nft", "-f", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    assert!(applied.status.success(), "{applied:?}");

    let mut nft = ns.nft();
    let listed = nft.list_rules(Family::Ip, HOSTPORT, "hostports").unwrap();
    let comments: Vec<Option<&str>> = listed.iter().map(|r| r.comment.as_deref()).collect();
    assert_eq!(
        comments,
        vec![Some("cid-go"), Some("cid-other"), Some("cid-go")]
    );
    assert_eq!(
        nft.delete_rules_with_comment(Family::Ip, HOSTPORT, &["hostports"], "cid-go")
            .unwrap(),
        2
    );
    let left = ns.rules("ip", HOSTPORT, "hostports");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["comment"], "cid-other");
}

#[test]
fn snat_and_inet_dnat_read_back() {
    let Some(ns) = TestNs::new() else { return };
    let mut nft = ns.nft();
    let (f, t) = (Family::Inet, "nat_inet");
    let mut b = Batch::new();
    b.add_table(f, t).unwrap();
    b.add_chain(&Chain::base(
        f,
        t,
        "pre",
        ChainType::Nat,
        Hook::Prerouting,
        priority::DSTNAT,
    ))
    .unwrap();
    b.add_chain(&Chain::base(
        f,
        t,
        "post",
        ChainType::Nat,
        Hook::Postrouting,
        priority::SRCNAT,
    ))
    .unwrap();
    b.add_rule(
        &Rule::builder(f, t, "pre")
            .daddr(ip("192.0.2.1"))
            .dport(L4Proto::Tcp, 80)
            .dnat(ip("198.18.128.2"), Some(8080))
            .build()
            .unwrap(),
    );
    b.add_rule(
        &Rule::builder(f, t, "pre")
            .dport(L4Proto::Udp, 53)
            .dnat(ip("fd00::2"), None)
            .build()
            .unwrap(),
    );
    b.add_rule(
        &Rule::builder(f, t, "post")
            .saddr(net("198.18.128.0/24"))
            .oifname("eth0")
            .snat(ip("192.0.2.1"), Some(4000))
            .build()
            .unwrap(),
    );
    nft.commit(&b).unwrap();
    let pre = ns.rules("inet", t, "pre");
    assert_eq!(
        statements(&pre[0], "dnat"),
        vec![&json!({"family": "ip", "addr": "198.18.128.2", "port": 8080})]
    );
    assert_eq!(
        statements(&pre[1], "dnat"),
        vec![&json!({"family": "ip6", "addr": "fd00::2"})]
    );
    let post = ns.rules("inet", t, "post");
    assert_eq!(
        post[0]["expr"],
        json!([
            payload_match("ip", "saddr", "==", json!({"prefix": {"addr": "198.18.128.0", "len": 24}})),
            {"match": {"op": "==", "left": {"meta": {"key": "oifname"}}, "right": "eth0"}},
            {"snat": {"family": "ip", "addr": "192.0.2.1", "port": 4000}}
        ])
    );
}
