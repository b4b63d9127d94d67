//! firewall end to end: the real `rcni-plugins` binary chained after Debian's Go bridge +
//! host-local, with podman/Nomad-style configs, checked with real traffic and `nft -j`.

mod nft_common;

use std::net::IpAddr;

use cni_testkit::{http_get, http_server, PluginCall};
use nft_common::*;
use serde_json::{json, Value};

const TABLE: &str = "cni_firewall";
/// iptables-nft's table, where the accept rules live.
const FILTER: &str = "filter";

fn fw(extra: Value) -> Value {
    let mut keys = json!({ "type": "firewall" });
    for (k, v) in extra.as_object().unwrap() {
        keys[k] = v.clone();
    }
    keys
}

#[test]
fn same_bridge_isolation_blocks_other_bridges_until_del() {
    if !pod_plugins_available() {
        return;
    }
    let lab = Lab::new();
    let outside = lab.add_outside();
    let conf1 = lab.bridge_conf("net1", "br1", "198.19.1.0/24", None);
    let conf2 = lab.bridge_conf("net2", "br2", "198.19.2.0/24", None);
    let (p1, r1) = lab.add_pod("p1", &conf1);
    let (p2, r2) = lab.add_pod("p2", &conf2);
    let ip2: IpAddr = result_ip(&r2, false).parse().unwrap();
    let _srv = http_server(&p2.name, [0, 0, 0, 0], 80).unwrap();
    let url2 = format!("http://{ip2}/");
    eventually("p1 -> p2 before isolation", || http_get(&p1.name, &url2));

    let keys = fw(json!({ "backend": "", "ingressPolicy": "same-bridge" }));
    let s1 = chained("net1", keys.clone(), Some(&r1), None);
    let s2 = chained("net2", keys, Some(&r2), None);
    let out = lab.rcni("firewall", "ADD", "p1", &p1.path.display().to_string(), &s1);
    out.assert_success();
    assert_eq!(
        out.json().unwrap()["ips"],
        r1["ips"],
        "prevResult passed through"
    );
    lab.rcni("firewall", "ADD", "p2", &p2.path.display().to_string(), &s2)
        .assert_success();

    assert!(
        http_get(&p1.name, &url2).is_err(),
        "isolated bridges still talk"
    );
    // Leaving the host is still allowed.
    assert!(cni_testkit::ping(
        &p1.name,
        OUTSIDE_IP4.parse::<IpAddr>().unwrap()
    ));
    assert!(cni_testkit::ping(&outside.name, ip2));

    for (cid, p, s) in [("p1", &p1, &s1), ("p2", &p2, &s2)] {
        let out = lab.rcni("firewall", "CHECK", cid, &p.path.display().to_string(), s);
        assert_eq!(out.stdout, "", "{out}");
        out.assert_success();
    }

    // DEL needs no prevResult.
    let bare = chained("net1", fw(json!({})), None, None);
    lab.rcni(
        "firewall",
        "DEL",
        "p1",
        &p1.path.display().to_string(),
        &bare,
    )
    .assert_success();
    let host = lab.host().name.clone();
    assert_eq!(rules_with(&host, TABLE, "id: p1"), 0, "{:#?}", rules(&host));
    assert!(rules_with(&host, TABLE, "id: p2") > 0);
    // Isolation is between isolated bridges (Go's semantics): with br1's last attachment
    // gone, br1 is no longer isolated and p1 reaches p2 again.
    eventually("p1 -> p2 after p1's DEL", || http_get(&p1.name, &url2));
    let out = lab.rcni(
        "firewall",
        "CHECK",
        "p1",
        &p1.path.display().to_string(),
        &s1,
    );
    assert!(!out.success(), "CHECK after DEL must fail: {out}");

    // DEL after the namespace is gone.
    lab.sb.remove_container(&p2).unwrap();
    lab.rcni("firewall", "DEL", "p2", &p2.path.display().to_string(), &s2)
        .assert_success();
    assert_eq!(rules_with(&host, TABLE, "id: "), 0, "{:#?}", rules(&host));
}

#[test]
fn nomad_admin_chain_is_created_and_never_flushed() {
    if !pod_plugins_available() {
        return;
    }
    let lab = Lab::new();
    let conf = lab.bridge_conf("nomad", "nomad", "198.19.3.0/24", Some("2001:2:0:3::/64"));
    let (pod, res) = lab.add_pod("n1", &conf);
    let keys = fw(json!({ "backend": "iptables", "iptablesAdminChainName": "NOMAD-ADMIN" }));
    let stdin = chained("nomad", keys, Some(&res), None);
    let netns = pod.path.display().to_string();
    lab.rcni("firewall", "ADD", "n1", &netns, &stdin)
        .assert_success();
    let host = lab.host().name.clone();
    // Two addresses, three rules each.
    assert_eq!(
        rules_with(&host, FILTER, "id: n1"),
        6,
        "{:#?}",
        rules(&host)
    );
    assert_eq!(chain_rules(&host, "ip", FILTER, "FORWARD"), 1);
    assert_eq!(chain_rules(&host, "ip6", FILTER, "FORWARD"), 1);

    // An administrator's rule in the admin chain drops the pod's forwarded traffic...
    let outside = lab.add_outside();
    let ip4 = result_ip(&res, false);
    assert!(cni_testkit::ping(
        &pod.name,
        OUTSIDE_IP4.parse::<IpAddr>().unwrap()
    ));
    lab.host_sh(&format!(
        "nft add rule ip {FILTER} NOMAD-ADMIN ip saddr {ip4} drop"
    ));
    assert!(!cni_testkit::ping(
        &pod.name,
        OUTSIDE_IP4.parse::<IpAddr>().unwrap()
    ));
    // ...and survives the next ADD and DEL.
    lab.rcni("firewall", "ADD", "n1", &netns, &stdin)
        .assert_success();
    assert_eq!(rules_with(&host, FILTER, "id: n1"), 6);
    assert_eq!(chain_rules(&host, "ip", FILTER, "FORWARD"), 1);
    lab.rcni("firewall", "DEL", "n1", &netns, &stdin)
        .assert_success();
    assert_eq!(chain_rules(&host, "ip", FILTER, "NOMAD-ADMIN"), 1);
    assert_eq!(rules_with(&host, FILTER, "id: n1"), 0);
    let _ = outside;
}

#[test]
fn gc_and_bad_inputs() {
    let lab = Lab::new();
    let ns = lab.sb.add_container().unwrap().path.display().to_string();
    let prev = |ip: &str| {
        json!({
            "cniVersion": "1.0.0",
            "interfaces": [{ "name": "cni0" }, { "name": "eth0", "sandbox": "/x" }],
            "ips": [{ "address": format!("{ip}/24"), "interface": 1 }]
        })
    };
    for (net, cid, ip) in [
        ("fnet", "keep", "198.18.5.2"),
        ("fnet", "gone", "198.18.5.3"),
        ("other", "gone", "198.18.6.3"),
    ] {
        let stdin = chained(net, fw(json!({})), Some(&prev(ip)), None);
        lab.rcni("firewall", "ADD", cid, &ns, &stdin)
            .assert_success();
    }
    let gc = json!({
        "cniVersion": "1.1.0", "name": "fnet", "type": "firewall",
        "cni.dev/valid-attachments": [{ "containerID": "keep", "ifname": "eth0" }]
    });
    let out = lab
        .sb
        .run_plugin(
            lab.rcni_dir.join("firewall"),
            &PluginCall::new("GC")
                .path(&lab.cni_path)
                .stdin(gc.to_string()),
        )
        .unwrap();
    assert_eq!(out.stdout, "", "{out}");
    out.assert_success();
    let host = lab.host().name.clone();
    assert_eq!(
        rules_with(&host, FILTER, "net: fnet, if: eth0, id: keep"),
        3
    );
    assert_eq!(
        rules_with(&host, FILTER, "net: fnet, if: eth0, id: gone"),
        0
    );
    assert_eq!(
        rules_with(&host, FILTER, "net: other, if: eth0, id: gone"),
        3
    );

    let code = |stdin: String| -> (u64, String) {
        let out = lab.rcni("firewall", "ADD", "bad", &ns, &stdin);
        assert!(!out.success(), "{out}");
        assert!(!out.stdout.contains("panicked"), "{out}");
        let v = out.json().unwrap();
        (
            v["code"].as_u64().unwrap(),
            v["msg"].as_str().unwrap().to_string(),
        )
    };
    let (c, msg) = code(chained(
        "fnet",
        fw(json!({ "backend": "firewalld" })),
        Some(&prev("198.18.5.9")),
        None,
    ));
    assert_eq!(c, 7);
    assert!(msg.contains("firewalld is not supported"), "{msg}");
    assert_eq!(code(chained("fnet", fw(json!({})), None, None)).0, 7);
    assert_eq!(
        code(chained(
            "fnet",
            fw(json!({ "ingressPolicy": "nope" })),
            Some(&prev("198.18.5.9")),
            None
        ))
        .0,
        7
    );
    // Like Go's firewall plugin, 0.3.x configs are refused.
    let old = json!({ "cniVersion": "0.3.1", "name": "fnet", "type": "firewall", "prevResult": prev("198.18.5.9") });
    assert_eq!(code(old.to_string()).0, 1);
    assert_eq!(rules_with(&host, FILTER, "id: bad"), 0);
    assert_eq!(rules_with(&host, TABLE, "id: bad"), 0);
}

#[test]
fn concurrent_add_and_del_keep_exactly_the_live_rules() {
    let lab = std::sync::Arc::new(Lab::new());
    let ns = lab.sb.add_container().unwrap().path.display().to_string();
    let workers: Vec<_> = (0..40)
        .map(|i| {
            let lab = std::sync::Arc::clone(&lab);
            let ns = ns.clone();
            std::thread::spawn(move || {
                let cid = format!("f{i}");
                let (net, br) = if i % 2 == 0 { ("fa", "bra") } else { ("fb", "brb") };
                let prev = json!({
                    "cniVersion": "1.0.0",
                    "interfaces": [{ "name": br }, { "name": "eth0", "sandbox": "/x" }],
                    "ips": [{ "address": format!("198.19.{}.{}/16", i / 200, 2 + i % 200), "interface": 1 }]
                });
                let keys = fw(json!({ "ingressPolicy": "same-bridge" }));
                let stdin = chained(net, keys, Some(&prev), None);
                let out = lab.rcni("firewall", "ADD", &cid, &ns, &stdin);
                if !out.success() {
                    return Err(format!("ADD {cid}: {out}"));
                }
                if i % 4 < 2 {
                    let out = lab.rcni("firewall", "DEL", &cid, &ns, &stdin);
                    if !out.success() {
                        return Err(format!("DEL {cid}: {out}"));
                    }
                }
                Ok(())
            })
        })
        .collect();
    let failures: Vec<String> = workers
        .into_iter()
        .filter_map(|t| {
            t.join()
                .unwrap_or_else(|_| Err("thread panicked".into()))
                .err()
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let host = lab.host().name.clone();
    let all = rules(&host);
    for i in 0..40 {
        let n = all
            .iter()
            .filter(|(_, _, _, c)| c.ends_with(&format!("id: f{i}")))
            .count();
        // 3 accept rules + 2 isolation rules per live attachment.
        assert_eq!(n, if i % 4 < 2 { 0 } else { 5 }, "f{i}");
    }
    assert_eq!(chain_rules(&host, "inet", TABLE, "forward"), 1);
    assert_eq!(chain_rules(&host, "ip", FILTER, "FORWARD"), 1);
}

#[test]
fn gc_without_a_valid_list_is_code_7_and_removes_nothing() {
    let lab = Lab::new();
    let ns = lab.sb.add_container().unwrap().path.display().to_string();
    let prev = fake_prev("198.18.5.2");
    let keys = fw(json!({ "ingressPolicy": "same-bridge" }));
    let stdin = chained("fgc", keys, Some(&prev), None);
    lab.rcni("firewall", "ADD", "gc-none", &ns, &stdin)
        .assert_success();
    let host = lab.host().name.clone();
    let count =
        || rules_with(&host, FILTER, "id: gc-none") + rules_with(&host, TABLE, "id: gc-none");
    assert_eq!(count(), 5);
    let gc = json!({ "cniVersion": "1.1.0", "name": "fgc", "type": "firewall" });
    let msg = assert_code(&lab.rcni_gc("firewall", &gc.to_string()), 7);
    assert!(msg.contains("valid-attachments"), "{msg}");
    assert_eq!(count(), 5);
}

#[test]
fn firewalld_zone_is_answered_on_stderr() {
    let lab = Lab::new();
    let ns = lab.sb.add_container().unwrap().path.display().to_string();
    let prev = fake_prev("198.18.6.2");
    let keys = fw(json!({ "backend": "iptables", "firewalldZone": "trusted" }));
    let out = lab.rcni(
        "firewall",
        "ADD",
        "fz",
        &ns,
        &chained("fz", keys, Some(&prev), None),
    );
    out.assert_success();
    out.json().expect("stdout is the result alone");
    let needle =
        "firewall: firewalldZone \"trusted\" is not honoured: rcni has no firewalld backend";
    assert_eq!(out.stderr.matches(needle).count(), 1, "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "{out}");
    assert_eq!(rules_with(&lab.host().name, FILTER, "id: fz"), 3);
}

/// A prevResult for a fabricated container address on bridge `cni0`.
fn fake_prev(ip: &str) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "interfaces": [{ "name": "cni0" }, { "name": "eth0", "sandbox": "/x" }],
        "ips": [{ "address": format!("{ip}/24"), "interface": 1 }]
    })
}
