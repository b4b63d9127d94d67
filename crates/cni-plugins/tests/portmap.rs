//! portmap end to end: the real `rcni-plugins` binary chained after Debian's Go bridge +
//! host-local inside throwaway namespaces, checked with real traffic and `nft -j`.

mod nft_common;

use std::net::SocketAddr;
use std::sync::Arc;

use cni_testkit::{http_get, http_server, HTTP_BODY};
use nft_common::*;
use serde_json::{json, Value};

const NET: &str = "pmnet";

fn portmap_keys() -> Value {
    json!({ "type": "portmap", "capabilities": { "portMappings": true } })
}

fn mappings(list: Value) -> Option<Value> {
    Some(json!({ "portMappings": list }))
}

/// Comments of every rule and element in the portmap tables.
fn owned_comments(ns: &str) -> Vec<String> {
    let rules = rules(ns).into_iter().map(|(_, t, _, c)| (t, c));
    let elems = elements(ns).into_iter().map(|(_, t, _, c)| (t, c));
    rules
        .chain(elems)
        .filter(|(t, _)| t == "cni_hostport")
        .map(|(_, c)| c)
        .collect()
}

/// Rules and elements of the attachment (keyed layout or per-mapping rules).
fn tag_rules(lab: &Lab, cid: &str) -> usize {
    owned_with(&lab.host().name, "cni_hostport", &format!("id: {cid}"))
}

#[test]
fn tcp_mapping_reaches_the_pod_from_everywhere() {
    if !pod_plugins_available() {
        return;
    }
    let lab = Lab::new();
    let outside = lab.add_outside();
    let conf = lab.bridge_conf(NET, "cni0", "198.19.128.0/24", None);
    let (pod_a, res_a) = lab.add_pod("pod-a", &conf);
    let (pod_b, _res_b) = lab.add_pod("pod-b", &conf);
    let _srv = http_server(&pod_a.name, [0, 0, 0, 0], 80).unwrap();

    let stdin = chained(
        NET,
        portmap_keys(),
        Some(&res_a),
        mappings(json!([{ "hostPort": 8080, "containerPort": 80, "protocol": "tcp" }])),
    );
    let out = lab.rcni(
        "portmap",
        "ADD",
        "pod-a",
        &pod_a.path.display().to_string(),
        &stdin,
    );
    out.assert_success();
    // The result is prevResult passed through.
    let got = out.json().unwrap();
    assert_eq!(got["ips"], res_a["ips"], "{out}");
    assert_eq!(got["interfaces"], res_a["interfaces"]);

    let host = lab.host().name.clone();
    let url = format!("http://{HOST_IP4}:8080/");
    let from_host = eventually("host -> hostIP:hostPort", || http_get(&host, &url));
    assert_eq!(from_host, HTTP_BODY);
    let from_outside = eventually("outside -> hostIP:hostPort", || {
        http_get(&outside.name, &url)
    });
    assert_eq!(from_outside, HTTP_BODY);
    let from_b = eventually("other pod -> hostIP:hostPort", || {
        http_get(&pod_b.name, &url)
    });
    assert_eq!(from_b, HTTP_BODY);
    let hairpin = eventually("hairpin pod -> own host port", || {
        http_get(&pod_a.name, &url)
    });
    assert_eq!(hairpin, HTTP_BODY);
    let localhost = eventually("host -> 127.0.0.1:hostPort", || {
        http_get(&host, "http://127.0.0.1:8080/")
    });
    assert_eq!(localhost, HTTP_BODY);
    assert_eq!(
        lab.host_sh("cat /proc/sys/net/ipv4/conf/cni0/route_localnet")
            .trim(),
        "1"
    );

    // CHECK passes for this IPv4-only attachment (Go fails here, upstream #819).
    let out = lab.rcni(
        "portmap",
        "CHECK",
        "pod-a",
        &pod_a.path.display().to_string(),
        &stdin,
    );
    assert_eq!(out.stdout, "", "{out}");
    out.assert_success();

    // A repeated ADD replaces, it does not duplicate.
    let before = tag_rules(&lab, "pod-a");
    lab.rcni(
        "portmap",
        "ADD",
        "pod-a",
        &pod_a.path.display().to_string(),
        &stdin,
    )
    .assert_success();
    assert_eq!(tag_rules(&lab, "pod-a"), before);
    assert_eq!(
        chain_rules(&host, "ip", "cni_hostport", "rcni_prerouting"),
        2
    );
    // The keyed layout: one element per mapping, two hairpin sources, all tagged.
    let tagged = |set: &str| {
        elements(&host)
            .iter()
            .filter(|(f, _, s, c)| f == "ip" && s.starts_with(set) && c.ends_with("id: pod-a"))
            .count()
    };
    assert_eq!(tagged("rcni_hostports"), 1);
    // The pod's /24 and 127.0.0.1/32, in the sets of those prefix lengths.
    assert_eq!(tagged("rcni_hairpin_24"), 1);
    assert_eq!(tagged("rcni_hairpin_32"), 1);

    // DEL without portMappings (and without prevResult) removes everything of the pod.
    let bare = chained(NET, portmap_keys(), None, None);
    let out = lab.rcni(
        "portmap",
        "DEL",
        "pod-a",
        &pod_a.path.display().to_string(),
        &bare,
    );
    assert_eq!(out.stdout, "", "{out}");
    out.assert_success();
    assert_eq!(tag_rules(&lab, "pod-a"), 0, "{:#?}", rules(&host));
    assert!(
        http_get(&outside.name, &url).is_err(),
        "mapping survived DEL"
    );
    // CHECK now fails.
    let out = lab.rcni(
        "portmap",
        "CHECK",
        "pod-a",
        &pod_a.path.display().to_string(),
        &stdin,
    );
    assert!(!out.success(), "{out}");
    // DEL again is fine.
    lab.rcni(
        "portmap",
        "DEL",
        "pod-a",
        &pod_a.path.display().to_string(),
        &bare,
    )
    .assert_success();
}

#[test]
fn udp_and_ipv6_mappings() {
    if !pod_plugins_available() {
        return;
    }
    let lab = Lab::new();
    let outside = lab.add_outside();
    let conf = lab.bridge_conf(NET, "cni0", "198.19.128.0/24", Some("fd00:88::/64"));
    let (pod, res) = lab.add_pod("pod-6", &conf);
    let ip6 = result_ip(&res, true);
    udp_echo(&pod, "0.0.0.0:5353".parse().unwrap());
    let _srv6 = http_server(&pod.name, "::".parse::<std::net::IpAddr>().unwrap(), 80).unwrap();

    let stdin = chained(
        NET,
        portmap_keys(),
        Some(&res),
        mappings(json!([
            { "hostPort": 5353, "containerPort": 5353, "protocol": "udp" },
            { "hostPort": 8086, "containerPort": 80, "protocol": "tcp", "hostIP": HOST_IP6 }
        ])),
    );
    let netns = pod.path.display().to_string();
    lab.rcni("portmap", "ADD", "pod-6", &netns, &stdin)
        .assert_success();

    let udp_to: SocketAddr = format!("{HOST_IP4}:5353").parse().unwrap();
    let echo = eventually("UDP outside -> hostIP:5353", || {
        udp_roundtrip(&outside, udp_to, "ping")
    });
    assert_eq!(echo, "ping");

    // The pod answers on its IPv6 address directly, then through the mapping.
    eventually("pod IPv6 reachable", || {
        http_get(&outside.name, &format!("http://[{ip6}]:80/"))
    });
    let url6 = format!("http://[{HOST_IP6}]:8086/");
    let body = eventually("outside -> [hostIP6]:8086", || {
        http_get(&outside.name, &url6)
    });
    assert_eq!(body, HTTP_BODY);
    // The IPv6-only mapping is not installed for IPv4.
    assert!(http_get(&outside.name, &format!("http://{HOST_IP4}:8086/")).is_err());

    lab.rcni("portmap", "CHECK", "pod-6", &netns, &stdin)
        .assert_success();
    let host = lab.host().name.clone();
    assert!(elements(&host).iter().any(|(f, _, set, c)| f == "ip6"
        && set == "rcni_hostip_hostports"
        && c.ends_with("id: pod-6")));

    // DEL after the pod's namespace is gone.
    lab.sb.remove_container(&pod).unwrap();
    let out = lab.rcni("portmap", "DEL", "pod-6", &netns, &stdin);
    out.assert_success();
    assert_eq!(tag_rules(&lab, "pod-6"), 0, "{:#?}", rules(&host));
    // Tables and base chains stay; no per-attachment rule is left.
    for chain in ["hostports", "hostip_hostports", "masquerading"] {
        assert_eq!(chain_rules(&host, "ip", "cni_hostport", chain), 0);
        assert_eq!(chain_rules(&host, "ip6", "cni_hostport", chain), 0);
    }
}

#[test]
fn gc_removes_only_stale_attachments_of_its_network() {
    let (lab, ns) = fake_lab();
    // Distinct ports: every attachment owns keyed elements and an index chain.
    for (net, cid, ip, port) in [
        (NET, "keep", "198.19.144.2", 9000),
        (NET, "gone", "198.19.144.3", 9001),
        ("other", "gone", "198.19.144.4", 9002),
    ] {
        let map = mappings(json!([{ "hostPort": port, "containerPort": 80 }]));
        let stdin = chained(net, portmap_keys(), Some(&fake_result(ip)), map);
        lab.rcni("portmap", "ADD", cid, &ns, &stdin)
            .assert_success();
    }
    let host = lab.host().name.clone();
    let count = |net: &str, cid: &str| {
        owned_comments(&host)
            .iter()
            .filter(|c| c.contains(&format!("net: {net},")) && c.ends_with(&format!("id: {cid}")))
            .count()
    };
    assert!(count(NET, "keep") > 0 && count(NET, "gone") > 0 && count("other", "gone") > 0);
    let gc = json!({
        "cniVersion": "1.1.0", "name": NET, "type": "portmap",
        "cni.dev/valid-attachments": [{ "containerID": "keep", "ifname": "eth0" }]
    });
    let out = lab
        .sb
        .run_plugin(
            lab.rcni_dir.join("portmap"),
            &cni_testkit::PluginCall::new("GC")
                .path(&lab.cni_path)
                .stdin(gc.to_string()),
        )
        .unwrap();
    assert_eq!(out.stdout, "", "{out}");
    out.assert_success();
    assert!(count(NET, "keep") > 0);
    assert_eq!(count(NET, "gone"), 0);
    assert!(
        count("other", "gone") > 0,
        "GC must not touch another network"
    );
    // DEL with an empty CNI_NETNS (nerdctl, upstream #810) still removes the rules.
    let bare = chained(NET, portmap_keys(), None, None);
    lab.rcni("portmap", "DEL", "keep", "", &bare)
        .assert_success();
    assert_eq!(count(NET, "keep"), 0);
}

#[test]
fn concurrent_add_and_del_lose_and_duplicate_nothing() {
    let (lab, ns) = fake_lab();
    let (lab, ns) = (Arc::new(lab), Arc::new(ns));
    let map = json!([
        { "hostPort": 10000, "containerPort": 80, "protocol": "tcp" },
        { "hostPort": 10001, "containerPort": 53, "protocol": "udp" }
    ]);
    let threads: Vec<_> = (0..100)
        .map(|i| {
            let lab = Arc::clone(&lab);
            let ns = Arc::clone(&ns);
            let map = map.clone();
            std::thread::spawn(move || {
                let cid = format!("ctr{i}");
                let ip = format!("198.19.{}.{}", 145 + i / 200, 2 + i % 200);
                // Two networks share the tables.
                let net = if i % 4 < 2 { NET } else { "pmnet2" };
                let stdin = chained(net, portmap_keys(), Some(&fake_result(&ip)), mappings(map));
                let out = lab.rcni("portmap", "ADD", &cid, &ns, &stdin);
                if !out.success() {
                    return Err(format!("ADD {cid}: {out}"));
                }
                if i % 2 == 0 {
                    let out = lab.rcni("portmap", "DEL", &cid, &ns, &stdin);
                    if !out.success() {
                        return Err(format!("DEL {cid}: {out}"));
                    }
                }
                Ok(())
            })
        })
        .collect();
    // Join every thread before asserting, so the sandbox is always dropped.
    let failures: Vec<String> = threads
        .into_iter()
        .filter_map(|t| {
            t.join()
                .unwrap_or_else(|_| Err("thread panicked".into()))
                .err()
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let host = lab.host().name.clone();
    let all = owned_comments(&host);
    // All map the same host ports. A port key has one owner, with an element (and an index
    // slot); an ADD that finds a key owned gets per-mapping rules for it (2 marks + dnat, and
    // 1 masquerade rule). Every attachment has an index header. The owner of both keys has
    // 4 elements (2 ports, 2 hairpin sources), their 4 slots and the header = 9; an
    // attachment with rules for both has 7 + 1 = 8; one that owns one key (its first owner
    // went meanwhile) has 3 + 3 + 1 + 3 + 1 = 11.
    for i in 0..100 {
        let n = all
            .iter()
            .filter(|c| c.ends_with(&format!("id: ctr{i}")))
            .count();
        if i % 2 == 0 {
            assert_eq!(n, 0, "ctr{i}");
        } else {
            assert!([8, 9, 11].contains(&n), "ctr{i}: {n}");
        }
    }
    let port_elements = elements(&host)
        .iter()
        .filter(|(_, _, set, _)| set == "rcni_hostports")
        .count();
    assert!(port_elements <= 2, "{port_elements} elements for 2 keys");
    assert_eq!(chain_rules(&host, "ip", "cni_hostport", "prerouting"), 2);
    assert_eq!(chain_rules(&host, "ip", "cni_hostport", "output"), 2);
}

#[test]
fn bad_inputs_get_cni_error_codes() {
    let (lab, ns) = fake_lab();
    let prev = fake_result("198.19.144.9");
    let code = |stdin: String| -> u64 {
        let out = lab.rcni("portmap", "ADD", "bad", &ns, &stdin);
        assert!(!out.success(), "{out}");
        assert!(!out.stdout.contains("panicked"), "{out}");
        out.json().unwrap()["code"].as_u64().unwrap()
    };
    let m = |v: Value| mappings(json!([v]));
    assert_eq!(
        code(chained(
            NET,
            portmap_keys(),
            None,
            m(json!({"hostPort": 80, "containerPort": 80}))
        )),
        7
    );
    assert_eq!(
        code(chained(
            NET,
            portmap_keys(),
            Some(&prev),
            m(json!({"hostPort": 80, "containerPort": 80, "protocol": "icmp"}))
        )),
        7
    );
    assert_eq!(
        code(chained(
            NET,
            portmap_keys(),
            Some(&prev),
            m(json!({"hostPort": 0, "containerPort": 80}))
        )),
        7
    );
    assert_eq!(
        code(chained(
            NET,
            portmap_keys(),
            Some(&prev),
            m(json!({"hostPort": 70000, "containerPort": 80}))
        )),
        7
    );
    let keys = json!({ "type": "portmap", "conditionsV4": ["-m", "conntrack"] });
    assert_eq!(
        code(chained(
            NET,
            keys,
            Some(&prev),
            m(json!({"hostPort": 80, "containerPort": 80}))
        )),
        7
    );
    // Nothing was installed by the failed ADDs.
    assert_eq!(tag_rules(&lab, "bad"), 0);
    // No mappings: prevResult passes through and nothing is installed.
    let out = lab.rcni(
        "portmap",
        "ADD",
        "none",
        &ns,
        &chained(NET, portmap_keys(), Some(&prev), None),
    );
    out.assert_success();
    assert_eq!(out.json().unwrap()["ips"], prev["ips"]);
    assert_eq!(tag_rules(&lab, "none"), 0);
}

#[test]
fn conditions_restrict_the_mapping() {
    if !pod_plugins_available() {
        return;
    }
    let lab = Lab::new();
    let outside = lab.add_outside();
    let conf = lab.bridge_conf(NET, "cni0", "198.19.128.0/24", None);
    let (pod, res) = lab.add_pod("pod-c", &conf);
    let _srv = http_server(&pod.name, [0, 0, 0, 0], 80).unwrap();
    let keys = json!({ "type": "portmap", "conditionsV4": ["!", "-s", OUTSIDE_IP4] });
    let stdin = chained(
        NET,
        keys,
        Some(&res),
        mappings(json!([{ "hostPort": 8081, "containerPort": 80 }])),
    );
    lab.rcni(
        "portmap",
        "ADD",
        "pod-c",
        &pod.path.display().to_string(),
        &stdin,
    )
    .assert_success();
    let url = format!("http://{HOST_IP4}:8081/");
    let host = lab.host().name.clone();
    eventually("host allowed by the condition", || http_get(&host, &url));
    assert!(
        http_get(&outside.name, &url).is_err(),
        "excluded source got through"
    );
}

#[test]
fn udp_conntrack_entries_are_flushed_on_add() {
    if !pod_plugins_available() {
        return;
    }
    let lab = Lab::new();
    let outside = lab.add_outside();
    let conf = lab.bridge_conf(NET, "cni0", "198.19.128.0/24", None);
    let (pod, res) = lab.add_pod("pod-u", &conf);
    udp_echo(&pod, "0.0.0.0:5454".parse().unwrap());
    let netns = pod.path.display().to_string();
    let tcp_only = mappings(json!([{ "hostPort": 8090, "containerPort": 80 }]));
    // A first ADD turns on NAT (and so connection tracking) in the host namespace.
    lab.rcni(
        "portmap",
        "ADD",
        "pod-u",
        &netns,
        &chained(NET, portmap_keys(), Some(&res), tcp_only),
    )
    .assert_success();

    // A client talks to the port before it is mapped: conntrack remembers an un-NATed flow.
    let client = udp_client(&outside, format!("{OUTSIDE_IP4}:40000").parse().unwrap());
    let to: SocketAddr = format!("{HOST_IP4}:5454").parse().unwrap();
    assert!(udp_exchange(&client, to, "early").is_err());

    let with_udp = mappings(json!([
        { "hostPort": 8090, "containerPort": 80 },
        { "hostPort": 5454, "containerPort": 5454, "protocol": "udp" }
    ]));
    lab.rcni(
        "portmap",
        "ADD",
        "pod-u",
        &netns,
        &chained(NET, portmap_keys(), Some(&res), with_udp),
    )
    .assert_success();
    // Same client socket (same 5-tuple): it reaches the pod only if the stale entry is gone.
    let echo = eventually("UDP from the same source after ADD", || {
        udp_exchange(&client, to, "late")
    });
    assert_eq!(echo, "late");
}

#[test]
fn gc_without_a_valid_list_is_code_7_and_removes_nothing() {
    let (lab, ns) = fake_lab();
    let map = mappings(json!([{ "hostPort": 9001, "containerPort": 80 }]));
    let stdin = chained(NET, portmap_keys(), Some(&fake_result("198.19.144.7")), map);
    lab.rcni("portmap", "ADD", "gc-none", &ns, &stdin)
        .assert_success();
    let before = tag_rules(&lab, "gc-none");
    assert!(before > 0);
    let gc = json!({ "cniVersion": "1.1.0", "name": NET, "type": "portmap" });
    let msg = assert_code(&lab.rcni_gc("portmap", &gc.to_string()), 7);
    assert!(msg.contains("valid-attachments"), "{msg}");
    assert_eq!(tag_rules(&lab, "gc-none"), before);
}

#[test]
fn iptables_only_options_are_answered_on_stderr() {
    let (lab, ns) = fake_lab();
    let map = mappings(json!([{ "hostPort": 9002, "containerPort": 80 }]));
    let mut keys = portmap_keys();
    keys["backend"] = json!("iptables");
    keys["externalSetMarkChain"] = json!("KUBE-MARK-MASQ");
    let stdin = chained(NET, keys, Some(&fake_result("198.19.144.8")), map);
    let out = lab.rcni("portmap", "ADD", "pm-warn", &ns, &stdin);
    out.assert_success();
    out.json().expect("stdout is the result alone");
    for needle in [
        "portmap: backend \"iptables\" is not honoured: rcni writes the port mappings with nftables",
        "portmap: externalSetMarkChain \"KUBE-MARK-MASQ\" is not honoured: rcni marks and masquerades",
    ] {
        assert_eq!(out.stderr.matches(needle).count(), 1, "{needle}: {out}");
    }
    assert_eq!(out.stderr.lines().count(), 2, "{out}");
    assert!(tag_rules(&lab, "pm-warn") > 0);
}

/// A second attachment asking for a host port another one holds gets per-mapping rules: the
/// first keeps the port, and when it goes the second takes over, with real traffic.
#[test]
fn a_taken_port_goes_to_the_first_and_then_to_the_next() {
    if !pod_plugins_available() {
        return;
    }
    let lab = Lab::new();
    let outside = lab.add_outside();
    let conf = lab.bridge_conf(NET, "cni0", "198.19.128.0/24", None);
    let (pod_a, res_a) = lab.add_pod("pod-first", &conf);
    let (pod_b, res_b) = lab.add_pod("pod-next", &conf);
    let map = |cport: u16| mappings(json!([{ "hostPort": 8085, "containerPort": cport }]));
    let stdin_a = chained(NET, portmap_keys(), Some(&res_a), map(80));
    let stdin_b = chained(NET, portmap_keys(), Some(&res_b), map(81));
    let ns_a = pod_a.path.display().to_string();
    let ns_b = pod_b.path.display().to_string();
    lab.rcni("portmap", "ADD", "pod-first", &ns_a, &stdin_a)
        .assert_success();
    lab.rcni("portmap", "ADD", "pod-next", &ns_b, &stdin_b)
        .assert_success();
    let host = lab.host().name.clone();
    // The second has rules (2 marks, dnat, masquerade), the first the keyed element.
    let rules_of = |cid: &str| {
        rules(&host)
            .iter()
            .filter(|(_, t, ch, c)| {
                t == "cni_hostport"
                    && ["hostports", "masquerading"].contains(&ch.as_str())
                    && c.ends_with(&format!("id: {cid}"))
            })
            .count()
    };
    assert_eq!(rules_of("pod-next"), 4, "{:#?}", rules(&host));
    assert_eq!(rules_of("pod-first"), 0);
    lab.rcni("portmap", "CHECK", "pod-first", &ns_a, &stdin_a)
        .assert_success();
    lab.rcni("portmap", "CHECK", "pod-next", &ns_b, &stdin_b)
        .assert_success();

    // Which pod a connection from outside to the host port reaches: a probe listens on the
    // container port of one of them only.
    let target: SocketAddr = format!("{HOST_IP4}:8085").parse().unwrap();
    let reaches = |pod: &cni_testkit::Netns, port: u16| {
        let probe = peer_probe(pod, format!("0.0.0.0:{port}").parse().unwrap());
        for _ in 0..10 {
            if tcp_connect(&outside, target).is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        probe.join().expect("probe thread").is_some()
    };
    assert!(reaches(&pod_a, 80), "the first attachment keeps the port");

    lab.rcni("portmap", "DEL", "pod-first", &ns_a, &stdin_a)
        .assert_success();
    assert!(reaches(&pod_b, 81), "the next attachment took over");
    lab.rcni("portmap", "DEL", "pod-next", &ns_b, &stdin_b)
        .assert_success();
    assert_eq!(
        tag_rules(&lab, "pod-first") + tag_rules(&lab, "pod-next"),
        0
    );
}

/// Rules written before the keyed layout (per-mapping rules, which `conditionsV4` still uses)
/// are replaced by a later ADD and removed by DEL: the upgrade path.
#[test]
fn per_mapping_rules_are_replaced_by_add_and_removed_by_del() {
    let (lab, ns) = fake_lab();
    let map = mappings(json!([{ "hostPort": 9005, "containerPort": 80 }]));
    let with_conditions = json!({ "type": "portmap", "conditionsV4": ["-s", "198.18.0.0/15"] });
    let stdin = chained(
        NET,
        with_conditions,
        Some(&fake_result("198.19.144.9")),
        map.clone(),
    );
    lab.rcni("portmap", "ADD", "upgrade", &ns, &stdin)
        .assert_success();
    let host = lab.host().name.clone();
    let in_chain = |chain: &str| {
        rules(&host)
            .iter()
            .filter(|(_, _, ch, c)| ch == chain && c.ends_with("id: upgrade"))
            .count()
    };
    assert_eq!(in_chain("hostports"), 3);
    assert_eq!(in_chain("masquerading"), 1);
    lab.rcni("portmap", "CHECK", "upgrade", &ns, &stdin)
        .assert_success();

    let stdin = chained(NET, portmap_keys(), Some(&fake_result("198.19.144.9")), map);
    lab.rcni("portmap", "ADD", "upgrade", &ns, &stdin)
        .assert_success();
    assert_eq!(in_chain("hostports") + in_chain("masquerading"), 0);
    // The index header, then a slot + an element for the port and each hairpin source.
    assert_eq!(
        tag_rules(&lab, "upgrade"),
        7,
        "{:#?}",
        owned_comments(&host)
    );
    lab.rcni("portmap", "CHECK", "upgrade", &ns, &stdin)
        .assert_success();

    // Back to rules, then DEL without mappings removes them.
    let with_conditions = json!({ "type": "portmap", "conditionsV4": ["-s", "198.18.0.0/15"] });
    let map = mappings(json!([{ "hostPort": 9005, "containerPort": 80 }]));
    let stdin = chained(
        NET,
        with_conditions,
        Some(&fake_result("198.19.144.9")),
        map,
    );
    lab.rcni("portmap", "ADD", "upgrade", &ns, &stdin)
        .assert_success();
    // 3 rules in hostports, 1 in masquerading, and the index header that says so.
    assert_eq!(
        tag_rules(&lab, "upgrade"),
        5,
        "{:#?}",
        owned_comments(&host)
    );
    let bare = chained(NET, portmap_keys(), None, None);
    lab.rcni("portmap", "DEL", "upgrade", &ns, &bare)
        .assert_success();
    assert_eq!(
        tag_rules(&lab, "upgrade"),
        0,
        "{:#?}",
        owned_comments(&host)
    );
}

/// A lab with the outside namespace and two pods on one bridge (no mapping yet).
fn lab_with_two_pods(
    a: &str,
    b: &str,
) -> (
    Lab,
    cni_testkit::Netns,
    (cni_testkit::Netns, Value),
    (cni_testkit::Netns, Value),
) {
    let lab = Lab::new();
    let outside = lab.add_outside();
    let conf = lab.bridge_conf(NET, "cni0", "198.19.128.0/24", None);
    let pod_a = lab.add_pod(a, &conf);
    let pod_b = lab.add_pod(b, &conf);
    (lab, outside, pod_a, pod_b)
}

/// containernetworking/plugins#1209: a mapping, with or without `hostIP`, applies only to
/// packets addressed to the host itself. Pod A is the target of a mapping of port 8081 (no
/// hostIP) and of 8082 with `hostIP` set to the outside server's address (an address the host
/// does not own). Connections to the outside server on those ports, from another pod, from
/// pod A itself and from the host, all arrive at the outside server; the mapping itself is
/// live (the host's address on 8081 reaches pod A).
#[test]
fn mappings_capture_only_traffic_addressed_to_the_host() {
    if !pod_plugins_available() {
        return;
    }
    let (lab, outside, (pod_a, res_a), (pod_b, res_b)) = lab_with_two_pods("pod-a", "pod-b");
    let _srv = http_server(&pod_a.name, [0, 0, 0, 0], 80).unwrap();
    let stdin = chained(
        NET,
        portmap_keys(),
        Some(&res_a),
        mappings(json!([
            { "hostPort": 8081, "containerPort": 80, "protocol": "tcp" },
            { "hostPort": 8082, "containerPort": 80, "protocol": "tcp", "hostIP": OUTSIDE_IP4 }
        ])),
    );
    let netns = pod_a.path.display().to_string();
    lab.rcni("portmap", "ADD", "pod-a", &netns, &stdin)
        .assert_success();
    let live = eventually("outside -> hostIP:8081 reaches pod A", || {
        http_get(&outside.name, &format!("http://{HOST_IP4}:8081/"))
    });
    assert_eq!(live, HTTP_BODY);

    let ip = |res: &Value| -> std::net::IpAddr { result_ip(res, false).parse().unwrap() };
    let host_ip: std::net::IpAddr = HOST_IP4.parse().unwrap();
    for port in [8081u16, 8082] {
        let target: SocketAddr = format!("{OUTSIDE_IP4}:{port}").parse().unwrap();
        for (who, from, source) in [
            ("pod B", &pod_b, ip(&res_b)),
            ("pod A (the mapping's target)", &pod_a, ip(&res_a)),
            ("the host", lab.host(), host_ip),
        ] {
            assert_eq!(
                source_seen(from, &outside, target),
                Some(source),
                "{who} -> {target}: did not reach the outside server\n{:#?}",
                rules(&lab.host().name)
            );
        }
    }
}

/// A UDP responder in `ns` answering every datagram with `tag`; runs until the test ends.
fn udp_tagged(ns: &cni_testkit::Netns, addr: SocketAddr, tag: &'static str) {
    let sock = cni_testkit::run_in(&ns.name, move || Ok(std::net::UdpSocket::bind(addr)?)).unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((_, peer)) = sock.recv_from(&mut buf) {
            let _ = sock.send_to(tag.as_bytes(), peer);
        }
    });
}

/// A UDP client that keeps sending from one source port (one conntrack entry) to the host's
/// port 5353 while the pod behind the mapping is replaced: after pod 1's DEL it is answered by
/// the host's own service on that port (DEL flushed the entry DNATed to pod 1), after pod 2's
/// ADD by pod 2 (ADD flushed the entry of the unmapped port).
#[test]
fn a_udp_client_that_keeps_sending_follows_the_mapping_when_the_pod_is_replaced() {
    if !pod_plugins_available() {
        return;
    }
    let (lab, outside, (pod1, res1), (pod2, res2)) = lab_with_two_pods("pod-1", "pod-2");
    let any: SocketAddr = "0.0.0.0:5353".parse().unwrap();
    udp_tagged(&pod1, any, "pod-1");
    udp_tagged(&pod2, any, "pod-2");
    udp_tagged(lab.host(), any, "host");
    let map = || mappings(json!([{ "hostPort": 5353, "containerPort": 5353, "protocol": "udp" }]));
    let portmap = |verb: &str, cid: &str, pod: &cni_testkit::Netns, res: &Value| {
        let stdin = chained(NET, portmap_keys(), Some(res), map());
        let netns = pod.path.display().to_string();
        lab.rcni("portmap", verb, cid, &netns, &stdin)
            .assert_success();
    };
    portmap("ADD", "pod-1", &pod1, &res1);

    let client = udp_client(&outside, format!("{OUTSIDE_IP4}:40053").parse().unwrap());
    client
        .set_read_timeout(Some(std::time::Duration::from_millis(100)))
        .unwrap();
    let to: SocketAddr = format!("{HOST_IP4}:5353").parse().unwrap();
    let last = Arc::new(std::sync::Mutex::new(String::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sender = {
        let (last, stop) = (last.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(tag) = udp_exchange(&client, to, "who?") {
                    *last.lock().unwrap() = tag;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    let answered_by = |want: &str| {
        eventually(&format!("the client is answered by {want}"), || {
            let got = last.lock().unwrap().clone();
            anyhow::ensure!(got == want, "answered by {got:?}");
            Ok(())
        })
    };
    answered_by("pod-1");
    portmap("DEL", "pod-1", &pod1, &res1);
    answered_by("host");
    portmap("ADD", "pod-2", &pod2, &res2);
    answered_by("pod-2");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sender.join().unwrap();
}
