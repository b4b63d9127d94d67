//! Integration tests of rcni's bridge plugin: the real `rcni-plugins` binary in throwaway
//! namespaces (cni-testkit), kernel state read back with `ip -j`/`bridge -j`, real traffic,
//! fault injection with zero leftovers, and differential runs against Debian's Go bridge.
//! Needs root.

mod attach;

use std::net::IpAddr;

use attach::*;
use cni_testkit::{http_get, http_server, ping, IpFamily};
use serde_json::{json, Value};

const NET: &str = "brnet";
const BR: &str = "br0";
const SUBNET: &str = "198.18.44.0/24";

fn slave_data(l: &Value) -> Value {
    l["linkinfo"]["info_slave_data"].clone()
}

fn flags(l: &Value) -> Vec<String> {
    l["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect()
}

/// The host veth named in an ADD result.
fn host_veth(result: &Value) -> String {
    result["interfaces"][1]["name"]
        .as_str()
        .unwrap()
        .to_string()
}

fn container_ip(result: &Value) -> IpAddr {
    let a = result["ips"][0]["address"].as_str().unwrap();
    a.split('/').next().unwrap().parse().unwrap()
}

/// The IPv6 link-local addresses on `eth0` in `ns`, read with `ip -6 addr`.
fn link_local_addrs(env: &Env, ns: &str) -> Vec<String> {
    let out = env
        .sb
        .exec_in(
            ns,
            [
                "ip", "-j", "-6", "addr", "show", "dev", "eth0", "scope", "link",
            ],
        )
        .unwrap();
    out.assert_success();
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
    v.as_array()
        .into_iter()
        .flatten()
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a["local"].as_str().map(str::to_string))
        .collect()
}

/// Host links other than `lo` and the bridge.
fn host_ports(env: &Env) -> Vec<String> {
    link_names(env.host())
        .into_iter()
        .filter(|n| n != "lo" && n != BR)
        .collect()
}

#[test]
fn add_check_del_with_gateway() {
    let env = Env::new();
    let pod = env.pod();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
    let r = env.add("bridge", &pod, "c1", &conf);

    // Result shape (as Go's bridge: bridge, host veth, container veth).
    assert_eq!(r["cniVersion"], "1.0.0");
    let ifaces = r["interfaces"].as_array().unwrap();
    assert_eq!(ifaces.len(), 3, "{r}");
    assert_eq!(ifaces[0]["name"], BR);
    assert!(ifaces[0].get("sandbox").is_none());
    let veth = host_veth(&r);
    assert!(veth.starts_with("veth") && veth.len() == 12, "{veth}");
    assert!(ifaces[1].get("sandbox").is_none());
    assert_eq!(ifaces[2]["name"], "eth0");
    assert_eq!(ifaces[2]["sandbox"], pod.path.to_str().unwrap());
    assert_eq!(r["ips"][0]["interface"], 2);
    assert_eq!(r["ips"][0]["address"], "198.18.44.2/24");
    assert_eq!(r["ips"][0]["gateway"], "198.18.44.1");

    // Kernel: bridge with the gateway, host port, container address, sysctls.
    let br = link(env.host(), BR);
    assert_eq!(br["linkinfo"]["info_kind"], "bridge");
    assert_eq!(br["address"], ifaces[0]["mac"]);
    assert!(flags(&br).contains(&"UP".to_string()));
    assert_eq!(addrs_of(env.host(), BR), ["198.18.44.1/24"]);
    let port = link(env.host(), &veth);
    assert_eq!(port["master"], BR);
    assert_eq!(port["address"], ifaces[1]["mac"]);
    assert_eq!(port["operstate"], "UP");
    assert_eq!(slave_data(&port)["hairpin"], false);
    assert_eq!(slave_data(&port)["isolated"], false);
    // A bridge port has no use for IPv6: it is off there (rcni; Go leaves the default), so the
    // host has neither an address nor a multicast route on the port.
    assert_ipv6_off(&env, env.host(), &veth);
    let eth0 = link(&pod.name, "eth0");
    assert_eq!(eth0["address"], ifaces[2]["mac"]);
    assert_eq!(eth0["linkinfo"]["info_kind"], "veth");
    assert_eq!(addrs_of(&pod.name, "eth0"), ["198.18.44.2/24"]);
    assert_eq!(sysctl(&env, env.host(), "net.ipv4.ip_forward"), "1");
    assert_eq!(
        sysctl(&env, env.host(), &format!("net.ipv6.conf.{BR}.accept_ra")),
        "0"
    );
    assert_eq!(
        sysctl(&env, &pod.name, "net.ipv4.conf.eth0.arp_notify"),
        "1"
    );
    // IPv4 only: no IPv6 link-local address (rcni; Go leaves the kernel default), and so no
    // IPv6 sysctl was needed in the pod.
    assert_eq!(eth0["inet6_addr_gen_mode"], "none", "{eth0}");
    assert_eq!(link_local_addrs(&env, &pod.name), Vec::<String>::new());
    assert_eq!(env.leases(NET), ["198.18.44.2"]);

    // CHECK passes, then fails once the address is removed by hand.
    let check = Env::with_prev(&conf, &r);
    env.run("bridge", &env.call("CHECK", &pod, "c1", &check.to_string()))
        .assert_success();
    env.sb
        .exec_in(
            &pod.name,
            ["ip", "addr", "del", "198.18.44.2/24", "dev", "eth0"],
        )
        .unwrap()
        .assert_success();
    let out = env.run("bridge", &env.call("CHECK", &pod, "c1", &check.to_string()));
    assert!(
        !out.success(),
        "CHECK must fail without the address:\n{out}"
    );
    assert!(out.stdout.contains("198.18.44.2"), "{out}");

    // DEL twice: the pair and the lease are gone, the bridge (shared) stays.
    for _ in 0..2 {
        env.run("bridge", &env.call("DEL", &pod, "c1", &conf.to_string()))
            .assert_success();
    }
    assert!(!has_link(&pod.name, "eth0"));
    assert!(host_ports(&env).is_empty(), "{:?}", host_ports(&env));
    assert!(has_link(env.host(), BR));
    assert!(env.leases(NET).is_empty());
}

#[test]
fn check_tolerates_a_rewritten_host_veth_mac() {
    let env = Env::new();
    let pod = env.pod();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
    let r = env.add("bridge", &pod, "c1", &conf);
    // What udev's MACAddressPolicy=persistent does to a random MAC
    // (containernetworking/plugins issue #805).
    env.sb
        .exec_host([
            "ip",
            "link",
            "set",
            &host_veth(&r),
            "address",
            "02:11:22:33:44:55",
        ])
        .unwrap()
        .assert_success();
    let check = Env::with_prev(&conf, &r);
    env.run("bridge", &env.call("CHECK", &pod, "c1", &check.to_string()))
        .assert_success();
}

#[test]
fn default_gateway_routes_and_dns() {
    let env = Env::new();
    let pod = env.pod();
    let conf = bridge_conf(
        &env,
        NET,
        BR,
        SUBNET,
        json!({"isDefaultGateway": true, "dns": {"nameservers": ["198.18.44.53"], "search": ["svc"]}}),
    );
    let r = env.add("bridge", &pod, "c1", &conf);
    assert_eq!(
        r["routes"],
        json!([{"dst": "0.0.0.0/0", "gw": "198.18.44.1"}]),
        "{r}"
    );
    assert_eq!(
        r["dns"],
        json!({"nameservers": ["198.18.44.53"], "search": ["svc"]})
    );
    let routes = main_routes(&pod.name, IpFamily::V4);
    assert!(
        routes.contains(&"default via 198.18.44.1 dev eth0".to_string()),
        "{routes:?}"
    );
    assert!(
        routes
            .iter()
            .any(|r| r.starts_with("198.18.44.0/24 dev eth0")),
        "{routes:?}"
    );
    // isDefaultGateway implies isGateway.
    assert_eq!(addrs_of(env.host(), BR), ["198.18.44.1/24"]);
    let check = Env::with_prev(&conf, &r);
    env.run("bridge", &env.call("CHECK", &pod, "c1", &check.to_string()))
        .assert_success();
    env.sb
        .exec_in(&pod.name, ["ip", "route", "del", "default"])
        .unwrap()
        .assert_success();
    let out = env.run("bridge", &env.call("CHECK", &pod, "c1", &check.to_string()));
    assert!(!out.success() && out.stdout.contains("0.0.0.0/0"), "{out}");
}

#[test]
fn mtu_promisc_and_port_isolation() {
    let env = Env::new();
    let pod = env.pod();
    let conf = bridge_conf(
        &env,
        NET,
        BR,
        SUBNET,
        json!({"mtu": 1400, "promiscMode": true, "portIsolation": true}),
    );
    let r = env.add("bridge", &pod, "c1", &conf);
    let br = link(env.host(), BR);
    assert_eq!(br["mtu"], 1400);
    assert!(flags(&br).contains(&"PROMISC".to_string()), "{br}");
    let port = link(env.host(), &host_veth(&r));
    assert_eq!(port["mtu"], 1400);
    assert_eq!(slave_data(&port)["isolated"], true);
    assert_eq!(slave_data(&port)["hairpin"], false);
    assert_eq!(link(&pod.name, "eth0")["mtu"], 1400);
    // No isGateway: no address on the bridge, no forwarding change needed.
    assert!(addrs_of(env.host(), BR).is_empty());
    // CHECK compares the promisc state with the config.
    let check = Env::with_prev(&conf, &r);
    env.run("bridge", &env.call("CHECK", &pod, "c1", &check.to_string()))
        .assert_success();
    let mut no_promisc = check.clone();
    no_promisc["promiscMode"] = json!(false);
    let out = env.run(
        "bridge",
        &env.call("CHECK", &pod, "c1", &no_promisc.to_string()),
    );
    assert!(!out.success() && out.stdout.contains("Promisc"), "{out}");
}

#[test]
fn hairpin_on_and_off() {
    let env = Env::new();
    let on = env.pod();
    let off = env.pod();
    let r_on = env.add(
        "bridge",
        &on,
        "c-on",
        &bridge_conf(&env, NET, BR, SUBNET, json!({"hairpinMode": true})),
    );
    let r_off = env.add(
        "bridge",
        &off,
        "c-off",
        &bridge_conf(&env, NET, BR, SUBNET, json!({"hairpinMode": false})),
    );
    assert_eq!(
        slave_data(&link(env.host(), &host_veth(&r_on)))["hairpin"],
        true
    );
    assert_eq!(
        slave_data(&link(env.host(), &host_veth(&r_off)))["hairpin"],
        false
    );
    // Hairpin and promiscuous mode together are refused before anything is created.
    let both = bridge_conf(
        &env,
        NET,
        "br9",
        SUBNET,
        json!({"hairpinMode": true, "promiscMode": true}),
    );
    let third = env.pod();
    let out = env.run("bridge", &env.call("ADD", &third, "c3", &both.to_string()));
    assert_eq!(out.error_code(), Some(7), "{out}");
    assert!(!has_link(env.host(), "br9"));
}

#[test]
fn two_pods_ping_and_http() {
    let env = Env::new();
    let a = env.pod();
    let b = env.pod();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
    let ra = env.add("bridge", &a, "ca", &conf);
    let rb = env.add("bridge", &b, "cb", &conf);
    let (ip_a, ip_b) = (container_ip(&ra), container_ip(&rb));
    assert_ne!(ip_a, ip_b);
    assert!(ping(&a.name, ip_b), "pod a cannot ping pod b");
    assert!(ping(&b.name, ip_a), "pod b cannot ping pod a");
    assert!(
        ping(env.host(), ip_a),
        "host cannot ping pod a via the bridge gateway"
    );
    let server = http_server(&b.name, ip_b, 0).unwrap();
    let body = http_get(&a.name, &server.url()).unwrap();
    assert_eq!(body, cni_testkit::HTTP_BODY);
    // Port isolation cuts pod-to-pod traffic on the bridge.
    let c = env.pod();
    let d = env.pod();
    let iso = bridge_conf(
        &env,
        "isonet",
        "br1",
        "198.18.45.0/24",
        json!({"portIsolation": true}),
    );
    let rc = env.add("bridge", &c, "cc", &iso);
    let rd = env.add("bridge", &d, "cd", &iso);
    assert!(
        !ping(&c.name, container_ip(&rd)),
        "isolated ports must not reach each other"
    );
    let _ = rc;
}

/// The MAC pod `on`'s kernel holds for `ip` on its eth0 (`None` without an entry).
fn neighbour_mac(env: &Env, on: &str, ip: &str) -> Option<String> {
    let out = env
        .sb
        .exec_in(on, ["ip", "-j", "neigh", "show", ip, "dev", "eth0"])
        .unwrap();
    out.assert_success();
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    v.as_array()?.first()?["lladdr"]
        .as_str()
        .map(str::to_string)
}

/// An ADD sends no gratuitous ARP across the bridge (`arp_notify` is set once the pod's
/// interface is up): Go's announcement never gets past its still-disabled port either, and a
/// flooded one costs every pod on the bridge work. A pod already there keeps the stale
/// entries it holds for the new pods' addresses. Four new pods, as rcni made them before,
/// would have announced in most ADDs.
#[test]
fn an_add_announces_nothing_to_the_pods_already_on_the_bridge() {
    let env = Env::new();
    let first = env.pod();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
    env.add("bridge", &first, "c0", &conf);
    const STALE: &str = "02:00:5e:00:53:01";
    let next: Vec<String> = (3..7).map(|i| format!("198.18.44.{i}")).collect();
    for ip in &next {
        env.sb
            .exec_in(
                &first.name,
                [
                    "ip", "neigh", "replace", ip, "lladdr", STALE, "dev", "eth0", "nud", "stale",
                ],
            )
            .unwrap()
            .assert_success();
    }
    let pods: Vec<_> = (1..=next.len()).map(|_| env.pod()).collect();
    for (i, pod) in pods.iter().enumerate() {
        let r = env.add("bridge", pod, &format!("c{}", i + 1), &conf);
        assert_eq!(container_ip(&r).to_string(), next[i], "{r}");
        assert_eq!(
            sysctl(&env, &pod.name, "net.ipv4.conf.eth0.arp_notify"),
            "1"
        );
    }
    // Whatever was sent has been delivered by now.
    std::thread::sleep(std::time::Duration::from_millis(300));
    for ip in &next {
        assert_eq!(
            neighbour_mac(&env, &first.name, ip).as_deref(),
            Some(STALE),
            "an ADD announced {ip} to the pods on the bridge"
        );
    }
}

#[test]
fn vlan_options_need_bridge_vlan_filtering() {
    let env = Env::new();
    let pod = env.pod();
    let conf = bridge_conf(
        &env,
        NET,
        BR,
        SUBNET,
        json!({"vlan": 100, "vlanTrunk": [{"id": 200}, {"minID": 300, "maxID": 302}]}),
    );
    let out = env.run("bridge", &env.call("ADD", &pod, "c1", &conf.to_string()));
    if !out.success() {
        // This kernel has no CONFIG_BRIDGE_VLAN_FILTERING: the bridge cannot filter VLANs.
        assert!(
            out.stdout.contains("CONFIG_BRIDGE_VLAN_FILTERING"),
            "error must name the missing kernel feature:\n{out}"
        );
        eprintln!(
            "skipped VLAN kernel checks: kernel lacks bridge VLAN filtering \
             (CONFIG_BRIDGE_VLAN_FILTERING); verified the clean refusal instead"
        );
        assert!(!has_link(&pod.name, "eth0"));
        assert!(host_ports(&env).is_empty());
        assert!(env.leases(NET).is_empty());

        // On an existing bridge the VLAN entries of the port fail instead: rolled back too.
        let plain = bridge_conf(&env, NET, BR, SUBNET, json!({}));
        env.add("bridge", &pod, "c0", &plain);
        let other = env.pod();
        let out = env.run("bridge", &env.call("ADD", &other, "c1", &conf.to_string()));
        assert!(!out.success(), "{out}");
        assert!(out.stdout.contains("vlan"), "{out}");
        assert!(!has_link(&other.name, "eth0"));
        assert_eq!(
            host_ports(&env).len(),
            1,
            "only the plain pod's port remains"
        );
        assert_eq!(env.leases(NET).len(), 1);
        return;
    }
    let r = out.json().unwrap();
    let vlans = cni_testkit::bridge_vlans(env.host()).unwrap();
    let port = vlans
        .iter()
        .find(|p| p["ifname"] == host_veth(&r).as_str())
        .expect("port vlans");
    let ids: Vec<u64> = port["vlans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["vlan"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [100, 200, 300, 301, 302], "{port}");
}

/// ipMasq rules in the host namespace's `inet cni_plugins_masquerade` table carrying `id`.
fn masq_rules_of(env: &Env, id: &str) -> usize {
    nft_rule_comments(env.host(), "cni_plugins_masquerade")
        .iter()
        .filter(|c| c.ends_with(&format!("id: {id}")))
        .count()
}

#[test]
fn ip_masq_rules_follow_the_attachment_even_without_the_netns() {
    let env = Env::new();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"ipMasq": true}));
    let (a, b) = (env.pod(), env.pod());
    env.add("bridge", &a, "c1", &conf);
    env.add("bridge", &b, "c2", &conf);
    assert_eq!(
        (masq_rules_of(&env, "c1"), masq_rules_of(&env, "c2")),
        (1, 1)
    );
    // DEL after the namespace is gone still removes the rule (Go's iptables backend leaks, #810).
    env.sb.remove_container(&a).unwrap();
    env.run("bridge", &env.call("DEL", &a, "c1", &conf.to_string()))
        .assert_success();
    assert_eq!(masq_rules_of(&env, "c1"), 0);
    // GC with c2 no longer valid removes its rule too.
    let mut gc = conf.clone();
    gc["cniVersion"] = json!("1.1.0");
    gc["cni.dev/valid-attachments"] = json!([]);
    env.run("bridge", &env.call("GC", &b, "", &gc.to_string()))
        .assert_success();
    assert_eq!(masq_rules_of(&env, "c2"), 0);
    env.run("bridge", &env.call("DEL", &b, "c2", &conf.to_string()))
        .assert_success();
}

#[test]
fn macspoofchk_chains_follow_the_attachment() {
    let env = Env::new();
    let pod = env.pod();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"macspoofchk": true}));
    env.add("bridge", &pod, "c1", &conf);
    let chains = nft_chain_names(env.host(), "nat");
    assert!(
        chains.contains(&"cni-br-iface-c1-eth0".to_string()),
        "{chains:?}"
    );
    assert!(
        chains.contains(&"cni-br-iface-c1-eth0-mac".to_string()),
        "{chains:?}"
    );
    env.run("bridge", &env.call("DEL", &pod, "c1", &conf.to_string()))
        .assert_success();
    let chains = nft_chain_names(env.host(), "nat");
    assert!(
        !chains.iter().any(|c| c.starts_with("cni-br-iface-c1")),
        "{chains:?}"
    );
}

/// The spoof-check chains in the host's `bridge nat` table whose name starts with `prefix`.
fn spoofcheck_chains(env: &Env, prefix: &str) -> Vec<String> {
    nft_chain_names(env.host(), "nat")
        .into_iter()
        .filter(|c| c.starts_with(prefix))
        .collect()
}

/// Bridge GC removes the spoof checks of attachments whose veth is gone and that are not
/// valid, and keeps the valid ones and those whose veth lives (Go's chain names carry no
/// network: an attachment of another network is not in this GC's valid list).
#[test]
fn gc_removes_the_spoof_checks_of_dead_attachments_only() {
    let env = Env::new();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"macspoofchk": true}));
    let other = bridge_conf(
        &env,
        "brnet2",
        "br2",
        "198.18.45.0/24",
        json!({"macspoofchk": true}),
    );
    let (live, dead, elsewhere) = (env.pod(), env.pod(), env.pod());
    env.add("bridge", &live, "live", &conf);
    let result = env.add("bridge", &dead, "dead", &conf);
    env.add("bridge", &elsewhere, "elsewhere", &other);
    let dead_veth = result["interfaces"][1]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(has_link(env.host(), &dead_veth), "{result}");
    // The pod's namespace goes without a DEL: its veth goes with it, its checks stay.
    env.sb.remove_container(&dead).unwrap();
    assert!(
        eventually(|| !has_link(env.host(), &dead_veth)),
        "the veth went with the namespace"
    );
    assert_eq!(spoofcheck_chains(&env, "cni-br-iface-dead").len(), 2);
    let mut gc = conf.clone();
    gc["cniVersion"] = json!("1.1.0");
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "live", "ifname": "eth0"}]);
    env.run("bridge", &env.call("GC", &live, "", &gc.to_string()))
        .assert_success();
    assert_eq!(
        spoofcheck_chains(&env, "cni-br-iface-dead"),
        Vec::<String>::new()
    );
    assert_eq!(spoofcheck_chains(&env, "cni-br-iface-live").len(), 2);
    assert_eq!(spoofcheck_chains(&env, "cni-br-iface-elsewhere").len(), 2);
    env.run("bridge", &env.call("DEL", &live, "live", &conf.to_string()))
        .assert_success();
    env.run(
        "bridge",
        &env.call("DEL", &elsewhere, "elsewhere", &other.to_string()),
    )
    .assert_success();
}

#[test]
fn an_unknown_ip_masq_backend_is_refused_before_anything_is_made() {
    let env = Env::new();
    let pod = env.pod();
    let conf = bridge_conf(
        &env,
        NET,
        BR,
        SUBNET,
        json!({"ipMasq": true, "ipMasqBackend": "pf"}),
    );
    let out = env.run("bridge", &env.call("ADD", &pod, "c1", &conf.to_string()));
    assert_eq!(out.error_code(), Some(7), "{out}");
    assert!(out.stdout.contains("ipMasqBackend"), "{out}");
    assert!(!has_link(env.host(), BR), "nothing is created");
    assert!(env.leases(NET).is_empty());
}

#[test]
fn layer2_only_and_disabled_container_interface() {
    let env = Env::new();
    let pod = env.pod();
    let l2 = json!({"cniVersion": "1.0.0", "name": "l2", "type": "bridge", "bridge": BR});
    let r = env.add("bridge", &pod, "c1", &l2);
    assert!(r.get("ips").is_none(), "{r}");
    let eth0 = link(&pod.name, "eth0");
    assert!(flags(&eth0).contains(&"UP".to_string()));
    assert!(addrs_of(&pod.name, "eth0").is_empty());
    // CHECK of an L2-only attachment works (Go's runs an empty IPAM type and fails).
    let check = Env::with_prev(&l2, &r);
    env.run("bridge", &env.call("CHECK", &pod, "c1", &check.to_string()))
        .assert_success();
    env.run("bridge", &env.call("DEL", &pod, "c1", &l2.to_string()))
        .assert_success();

    let mut disabled = l2.clone();
    disabled["disableContainerInterface"] = json!(true);
    env.add("bridge", &pod, "c2", &disabled);
    assert!(!flags(&link(&pod.name, "eth0")).contains(&"UP".to_string()));
    // STATUS without IPAM is ready; GC without IPAM has nothing to do.
    let mut v11 = disabled.clone();
    v11["cniVersion"] = json!("1.1.0");
    // GC carries the valid list every GC must have (the skeleton refuses one without).
    v11["cni.dev/valid-attachments"] = json!([{"containerID": "c2", "ifname": "eth0"}]);
    for cmd in ["STATUS", "GC"] {
        env.run("bridge", &env.call(cmd, &pod, "c2", &v11.to_string()))
            .assert_success();
    }
    // With IPAM, disableContainerInterface is an error.
    let bad = bridge_conf(
        &env,
        NET,
        BR,
        SUBNET,
        json!({"disableContainerInterface": true}),
    );
    let other = env.pod();
    let out = env.run("bridge", &env.call("ADD", &other, "c3", &bad.to_string()));
    assert_eq!(out.error_code(), Some(7), "{out}");
}

#[test]
fn status_delegates_to_ipam() {
    let env = Env::new();
    let pod = env.pod();
    let conf = json!({"cniVersion": "1.1.0", "name": NET, "type": "bridge",
                      "ipam": {"type": "no-such-ipam"}});
    let out = env.run("bridge", &env.call("STATUS", &pod, "c1", &conf.to_string()));
    assert!(!out.success(), "STATUS must ask the IPAM plugin:\n{out}");
    assert!(out.stdout.contains("no-such-ipam"), "{out}");
}

#[test]
fn container_mac_from_each_source() {
    let env = Env::new();
    for (i, (args, extra, want)) in [
        ("IgnoreUnknown=1;K8S_POD_NAME=p;MAC=02:aa:00:00:00:01", json!({}), "02:aa:00:00:00:01"),
        ("IgnoreUnknown=1;MAC=02:aa:00:00:00:01", json!({"args": {"cni": {"mac": "02:aa:00:00:00:02"}}}), "02:aa:00:00:00:02"),
        (
            "",
            json!({"args": {"cni": {"mac": "02:aa:00:00:00:02"}}, "runtimeConfig": {"mac": "02:AA:00:00:00:03"}}),
            "02:aa:00:00:00:03",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let pod = env.pod();
        let conf = bridge_conf(&env, NET, BR, SUBNET, extra);
        let cid = format!("c{i}");
        let out = env.run("bridge", &env.call("ADD", &pod, &cid, &conf.to_string()).args(args));
        out.assert_success();
        let r = out.json().unwrap();
        assert_eq!(r["interfaces"][2]["mac"], want, "{r}");
        assert_eq!(link(&pod.name, "eth0")["address"], want);
    }
}

#[test]
fn dual_stack_without_dad_delay() {
    let env = Env::new();
    let pod = env.pod();
    let mut conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isDefaultGateway": true}));
    conf["ipam"]["ranges"] = json!([[{"subnet": SUBNET}], [{"subnet": "2001:2:0:44::/64"}]]);
    let started = std::time::Instant::now();
    let r = env.add("bridge", &pod, "c1", &conf);
    let took = started.elapsed();
    assert_eq!(r["ips"].as_array().unwrap().len(), 2, "{r}");
    assert_eq!(r["ips"][1]["gateway"], "2001:2:0:44::1");
    assert!(addrs_of(&pod.name, "eth0").contains(&"2001:2:0:44::2/64".to_string()));
    let mut br_addrs = addrs_of(env.host(), BR);
    br_addrs.sort();
    assert_eq!(br_addrs, ["198.18.44.1/24", "2001:2:0:44::1/64"]);
    // The port has IPv6 off even for an IPv6 pod (the ping below still crosses the bridge).
    assert_ipv6_off(&env, env.host(), &host_veth(&r));
    assert_eq!(
        sysctl(&env, env.host(), "net.ipv6.conf.all.forwarding"),
        "1"
    );
    assert_eq!(
        sysctl(&env, &pod.name, "net.ipv6.conf.eth0.keep_addr_on_down"),
        "1"
    );
    let v6 = main_routes(&pod.name, IpFamily::V6);
    assert!(
        v6.contains(&"default via 2001:2:0:44::1 dev eth0".to_string()),
        "{v6:?}"
    );
    // No tentative addresses were waited for (DAD is off in the container, as in Go).
    eprintln!("dual-stack ADD took {took:?}");
    // With an IPv6 address the interface keeps its link-local one, and DAD is off as in Go.
    assert_eq!(link(&pod.name, "eth0")["inet6_addr_gen_mode"], "eui64");
    assert_eq!(link_local_addrs(&env, &pod.name).len(), 1);
    assert!(link_local_addrs(&env, &pod.name)[0].starts_with("fe80::"));
    assert_eq!(
        sysctl(&env, &pod.name, "net.ipv6.conf.eth0.accept_dad"),
        "0"
    );
    let check = Env::with_prev(&conf, &r);
    env.run("bridge", &env.call("CHECK", &pod, "c1", &check.to_string()))
        .assert_success();
    // The bridge's gateway address does DAD (as in Go), so it may answer only after ~1 s.
    let gw6: IpAddr = "2001:2:0:44::1".parse().unwrap();
    assert!((0..10).any(|_| ping(&pod.name, gw6) || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        false
    }));
}

#[test]
fn force_address_replaces_a_conflicting_gateway() {
    let env = Env::new();
    env.sb
        .exec_host(["ip", "link", "add", BR, "type", "bridge"])
        .unwrap()
        .assert_success();
    env.sb
        .exec_host(["ip", "addr", "add", "198.19.99.1/16", "dev", BR])
        .unwrap()
        .assert_success();
    let pod = env.pod();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
    let out = env.run("bridge", &env.call("ADD", &pod, "c1", &conf.to_string()));
    assert!(!out.success());
    assert!(
        out.stdout
            .contains("already has an IP address different from 198.18.44.1/24"),
        "{out}"
    );
    // The failed ADD left nothing of its own: no pair, no lease.
    assert!(!has_link(&pod.name, "eth0"));
    assert!(host_ports(&env).is_empty());
    assert!(env.leases(NET).is_empty());

    let forced = bridge_conf(
        &env,
        NET,
        BR,
        SUBNET,
        json!({"isGateway": true, "forceAddress": true}),
    );
    env.add("bridge", &pod, "c1", &forced);
    assert_eq!(addrs_of(env.host(), BR), ["198.18.44.1/24"]);
}

#[test]
fn existing_link_that_is_not_a_bridge() {
    let env = Env::new();
    env.sb
        .exec_host([
            "ip", "link", "add", BR, "type", "veth", "peer", "name", "notbr1",
        ])
        .unwrap()
        .assert_success();
    let pod = env.pod();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({}));
    let out = env.run("bridge", &env.call("ADD", &pod, "c1", &conf.to_string()));
    assert!(
        out.stdout.contains("already exists but is not a bridge"),
        "{out}"
    );
    assert!(!has_link(&pod.name, "eth0"));
    assert!(env.leases(NET).is_empty());
}

// ---- fault injection: every failure leaves nothing of the attachment behind ----

/// Asserts the attachment left nothing: no container interface, no host port, no lease.
#[track_caller]
fn assert_no_leftovers(env: &Env, pod: &cni_testkit::Netns, net: &str) {
    assert!(
        !has_link(&pod.name, "eth0"),
        "container interface left behind"
    );
    assert!(
        host_ports(env).is_empty(),
        "host links left: {:?}",
        host_ports(env)
    );
    assert!(
        env.leases(net).is_empty(),
        "leases left: {:?}",
        env.leases(net)
    );
    // Only the bridge (shared, kept as in Go) may carry addresses.
    assert!(addrs_of(&pod.name, "eth0").is_empty());
}

#[test]
fn fault_ipam_type_that_does_not_exist() {
    let env = Env::new();
    let pod = env.pod();
    let mut conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
    conf["ipam"]["type"] = json!("no-such-ipam");
    let out = env.run("bridge", &env.call("ADD", &pod, "c1", &conf.to_string()));
    assert!(!out.success());
    assert!(out.stdout.contains("no-such-ipam"), "{out}");
    assert_no_leftovers(&env, &pod, NET);
}

#[test]
fn fault_netns_that_does_not_exist() {
    let env = Env::new();
    let pod = env.pod();
    env.sb.remove_container(&pod).unwrap();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
    let out = env.run("bridge", &env.call("ADD", &pod, "c1", &conf.to_string()));
    assert!(!out.success(), "{out}");
    assert!(host_ports(&env).is_empty());
    assert!(env.leases(NET).is_empty());
    assert!(
        !has_link(env.host(), BR),
        "the netns is opened before anything is created"
    );
}

#[test]
fn fault_interface_name_taken_in_container() {
    let env = Env::new();
    let pod = env.pod();
    env.sb
        .exec_in(
            &pod.name,
            [
                "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "other0",
            ],
        )
        .unwrap()
        .assert_success();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
    let out = env.run("bridge", &env.call("ADD", &pod, "c1", &conf.to_string()));
    assert!(out.stdout.contains("already exists"), "{out}");
    assert!(host_ports(&env).is_empty());
    assert!(env.leases(NET).is_empty());
    // The container's own eth0 is untouched.
    assert_eq!(link(&pod.name, "eth0")["linkinfo"]["info_kind"], "veth");
}

#[test]
fn fault_ipam_exhausted() {
    let env = Env::new();
    let first = env.pod();
    // A /30 has exactly one allocatable address besides the gateway.
    let conf = bridge_conf(&env, NET, BR, "198.18.46.0/30", json!({"isGateway": true}));
    let r = env.add("bridge", &first, "c1", &conf);
    let kept_port = host_veth(&r);
    let pod = env.pod();
    let out = env.run("bridge", &env.call("ADD", &pod, "c2", &conf.to_string()));
    assert!(!out.success(), "{out}");
    assert!(
        !has_link(&pod.name, "eth0"),
        "the veth pair was rolled back"
    );
    assert_eq!(
        host_ports(&env),
        [kept_port],
        "only the first pod's port remains"
    );
    assert_eq!(env.leases(NET), ["198.18.46.2"]);
}

#[test]
fn repeated_add_of_the_same_attachment_fails_and_keeps_the_first() {
    let env = Env::new();
    let pod = env.pod();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
    let r = env.add("bridge", &pod, "c1", &conf);
    let out = env.run("bridge", &env.call("ADD", &pod, "c1", &conf.to_string()));
    assert!(
        !out.success(),
        "second ADD of the same interface must fail:\n{out}"
    );
    assert_eq!(host_ports(&env), [host_veth(&r)]);
    assert_eq!(env.leases(NET), ["198.18.44.2"]);
    let check = Env::with_prev(&conf, &r);
    env.run("bridge", &env.call("CHECK", &pod, "c1", &check.to_string()))
        .assert_success();
}

#[test]
fn del_after_the_netns_is_gone_and_with_no_netns() {
    let env = Env::new();
    let pod = env.pod();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
    env.add("bridge", &pod, "c1", &conf);
    env.sb.remove_container(&pod).unwrap();
    env.run("bridge", &env.call("DEL", &pod, "c1", &conf.to_string()))
        .assert_success();
    assert!(env.leases(NET).is_empty());
    assert!(
        eventually(|| host_ports(&env).is_empty()),
        "the host veth outlived its namespace: {:?}",
        host_ports(&env)
    );

    let other = env.pod();
    env.add("bridge", &other, "c2", &conf);
    let del = env.call("DEL", &other, "c2", &conf.to_string()).netns("");
    env.run("bridge", &del).assert_success();
    assert!(
        env.leases(NET).is_empty(),
        "empty CNI_NETNS still releases the lease"
    );
}

#[test]
fn older_result_versions() {
    let env = Env::new();
    for (i, v) in ["0.3.1", "0.4.0", "0.2.0"].into_iter().enumerate() {
        let pod = env.pod();
        let mut conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
        conf["cniVersion"] = json!(v);
        let r = env.add("bridge", &pod, &format!("c{i}"), &conf);
        assert_eq!(r["cniVersion"], v);
        if v == "0.2.0" {
            assert!(r["ip4"]["ip"].as_str().is_some(), "{r}");
        } else {
            assert_eq!(r["ips"][0]["version"], "4", "{r}");
            assert_eq!(r["ips"][0]["interface"], 2);
        }
    }
}

// ---- differential tests against Debian's Go bridge ----

/// What a bridge ADD left in the kernel, with veth names and MACs taken out.
fn kernel_shape(env: &Env, pod: &cni_testkit::Netns) -> Value {
    let host_links: Vec<Value> = cni_testkit::links(env.host())
        .unwrap()
        .into_iter()
        .filter(|l| l["ifname"] != "lo")
        .map(|l| {
            json!({
                "name": normalize_names(l["ifname"].as_str().unwrap()),
                "kind": l["linkinfo"]["info_kind"],
                "master": l["master"],
                "mtu": l["mtu"],
                "operstate": l["operstate"],
                "hairpin": l["linkinfo"]["info_slave_data"]["hairpin"],
                "isolated": l["linkinfo"]["info_slave_data"]["isolated"],
            })
        })
        .collect();
    let eth0 = link(&pod.name, "eth0");
    json!({
        "host_links": host_links,
        "bridge_addrs": addrs_of(env.host(), BR),
        "container_addrs": addrs_of(&pod.name, "eth0"),
        "container_routes": main_routes(&pod.name, IpFamily::V4),
        "container_routes6": main_routes(&pod.name, IpFamily::V6)
            .into_iter()
            .filter(|r| !r.starts_with("fe80") && !r.starts_with("multicast"))
            .collect::<Vec<_>>(),
        "container_mtu": eth0["mtu"],
        "forwarding": sysctl(env, env.host(), "net.ipv4.ip_forward"),
        "arp_notify": sysctl(env, &pod.name, "net.ipv4.conf.eth0.arp_notify"),
    })
}

/// A result with names and MACs taken out.
fn result_shape(r: &Value) -> Value {
    let mut r = r.clone();
    if let Some(ifaces) = r["interfaces"].as_array_mut() {
        for i in ifaces {
            i["mac"] = json!(i["mac"].as_str().map(|m| m.len()));
            i["name"] = json!(normalize_names(i["name"].as_str().unwrap()));
            if i.get("sandbox").is_some() {
                i["sandbox"] = json!("<netns>");
            }
        }
    }
    // libcni before v1.2 writes an empty "dns" object.
    if r["dns"] == json!({}) {
        r.as_object_mut().unwrap().remove("dns");
    }
    r
}

#[test]
fn differential_same_config_through_go_and_rcni() {
    let configs = [
        json!({"isGateway": true}),
        json!({"isDefaultGateway": true, "mtu": 1400, "hairpinMode": true}),
        // portIsolation is left out: Debian's Go bridge (v1.1.1) predates it (v1.7.0).
        json!({"promiscMode": true}),
        json!({"isDefaultGateway": true, "ipam": {"ranges": [[{"subnet": SUBNET}], [{"subnet": "2001:2:0:44::/64"}]]}}),
    ];
    for extra in configs {
        let mut shapes = Vec::new();
        for imp in [Impl::Go, Impl::Rcni] {
            let Some(env) = Env::with(imp, Some(Impl::Go)) else {
                return;
            };
            let pod = env.pod();
            let mut extra = extra.clone();
            let ranges = extra.as_object_mut().unwrap().remove("ipam");
            let mut conf = bridge_conf(&env, NET, BR, SUBNET, extra);
            if let Some(ipam) = ranges {
                conf["ipam"]["ranges"] = ipam["ranges"].clone();
            }
            let r = env.add("bridge", &pod, "c1", &conf);
            shapes.push((result_shape(&r), kernel_shape(&env, &pod)));
            env.run("bridge", &env.call("DEL", &pod, "c1", &conf.to_string()))
                .assert_success();
            assert!(
                host_ports(&env).is_empty(),
                "{imp:?} DEL left {:?}",
                host_ports(&env)
            );
        }
        assert_eq!(shapes[0].0, shapes[1].0, "result differs for {extra}");
        assert_eq!(shapes[0].1, shapes[1].1, "kernel state differs for {extra}");
    }
}

#[test]
fn mixed_chain_go_host_local_under_rcni_bridge() {
    let Some(env) = Env::with(Impl::Rcni, Some(Impl::Go)) else {
        return;
    };
    let a = env.pod();
    let b = env.pod();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
    let ra = env.add("bridge", &a, "ca", &conf);
    let rb = env.add("bridge", &b, "cb", &conf);
    assert!(ping(&a.name, container_ip(&rb)));
    assert_eq!(env.leases(NET).len(), 2);
    let _ = ra;
    for (pod, cid) in [(&a, "ca"), (&b, "cb")] {
        env.run("bridge", &env.call("DEL", pod, cid, &conf.to_string()))
            .assert_success();
    }
    assert!(env.leases(NET).is_empty());
}

#[test]
fn mixed_chain_rcni_host_local_under_go_bridge() {
    let Some(env) = Env::with(Impl::Go, Some(Impl::Rcni)) else {
        return;
    };
    let pod = env.pod();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
    let r = env.add("bridge", &pod, "c1", &conf);
    assert_eq!(r["ips"][0]["address"], "198.18.44.2/24");
    assert!(ping(env.host(), container_ip(&r)));
    env.run("bridge", &env.call("DEL", &pod, "c1", &conf.to_string()))
        .assert_success();
    assert!(env.leases(NET).is_empty());
}

#[test]
fn del_by_rcni_of_an_attachment_made_by_go() {
    let Some(env) = Env::with(Impl::Go, Some(Impl::Go)) else {
        return;
    };
    let pod = env.pod();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
    let r = env.add("bridge", &pod, "c1", &conf);
    // Swap the bridge plugin for rcni's and let it CHECK and DEL Go's attachment.
    std::fs::remove_file(env.cni_dir.join("bridge")).unwrap();
    std::os::unix::fs::symlink(BIN, env.cni_dir.join("bridge")).unwrap();
    let check = Env::with_prev(&conf, &r);
    env.run("bridge", &env.call("CHECK", &pod, "c1", &check.to_string()))
        .assert_success();
    env.run("bridge", &env.call("DEL", &pod, "c1", &conf.to_string()))
        .assert_success();
    assert!(host_ports(&env).is_empty());
    assert!(env.leases(NET).is_empty());
}

/// Every ADD step failing in turn (debug-build hook `RCNI_TEST_FAIL_AT`) leaves no pair, no
/// lease and no container address; a later ADD of the same attachment works.
#[test]
fn fault_each_add_step_in_turn() {
    let env = Env::new();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isDefaultGateway": true}));
    for step in ["veth", "port", "ipam", "container", "gateway", "done"] {
        let pod = env.pod();
        let call = env
            .call("ADD", &pod, "c1", &conf.to_string())
            .env("RCNI_TEST_FAIL_AT", format!("bridge:{step}"));
        let out = env.run("bridge", &call);
        assert!(
            out.stdout
                .contains(&format!("injected failure at bridge:{step}")),
            "{step}: {out}"
        );
        assert_no_leftovers(&env, &pod, NET);
        env.add("bridge", &pod, "c1", &conf);
        // Only this lease exists: the failed ADD released its own.
        assert_eq!(env.leases(NET).len(), 1, "{step}: {:?}", env.leases(NET));
        env.run("bridge", &env.call("DEL", &pod, "c1", &conf.to_string()))
            .assert_success();
        assert_no_leftovers(&env, &pod, NET);
    }
}

#[test]
fn enabledad_turns_dad_on_in_the_container() {
    let env = Env::new();
    let pod = env.pod();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"enabledad": true}));
    env.add("bridge", &pod, "c1", &conf);
    assert_eq!(
        sysctl(&env, &pod.name, "net.ipv6.conf.eth0.accept_dad"),
        "1"
    );
    assert_eq!(
        sysctl(&env, &pod.name, "net.ipv6.conf.eth0.enhanced_dad"),
        "1"
    );
}

#[test]
fn concurrent_adds_share_one_bridge() {
    let env = Env::new();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
    let pods: Vec<_> = (0..4).map(|_| env.pod()).collect();
    let results: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = pods
            .iter()
            .enumerate()
            .map(|(i, pod)| {
                let (env, conf) = (&env, &conf);
                s.spawn(move || env.add("bridge", pod, &format!("c{i}"), conf))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ips: Vec<String> = results
        .iter()
        .map(|r| container_ip(r).to_string())
        .collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 4, "{ips:?}");
    assert_eq!(host_ports(&env).len(), 4);
    assert_eq!(addrs_of(env.host(), BR), ["198.18.44.1/24"]);
    assert!(ping(&pods[0].name, container_ip(&results[3])));
}

#[test]
fn go_bridge_checks_and_deletes_what_rcni_made() {
    let Some(env) = Env::with(Impl::Rcni, Some(Impl::Go)) else {
        return;
    };
    let Some(go) = go_dir_or_skip("Go bridge") else {
        return;
    };
    let pod = env.pod();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isDefaultGateway": true}));
    let r = env.add("bridge", &pod, "c1", &conf);
    std::fs::remove_file(env.cni_dir.join("bridge")).unwrap();
    std::os::unix::fs::symlink(go.join("bridge"), env.cni_dir.join("bridge")).unwrap();
    let check = Env::with_prev(&conf, &r);
    env.run("bridge", &env.call("CHECK", &pod, "c1", &check.to_string()))
        .assert_success();
    env.run("bridge", &env.call("DEL", &pod, "c1", &conf.to_string()))
        .assert_success();
    assert!(host_ports(&env).is_empty());
    assert!(env.leases(NET).is_empty());
}

#[test]
fn status_and_gc_at_1_1_0_with_rcni_host_local() {
    if !rcni_has("host-local") {
        eprintln!("skipped: rcni host-local is not built yet");
        return;
    }
    let env = Env::new();
    let pod = env.pod();
    let mut conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
    conf["cniVersion"] = json!("1.1.0");
    let r = env.add("bridge", &pod, "c1", &conf);
    assert_eq!(r["cniVersion"], "1.1.0");
    env.run("bridge", &env.call("STATUS", &pod, "c1", &conf.to_string()))
        .assert_success();
    // GC with no valid attachments releases the lease through host-local.
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    env.run("bridge", &env.call("GC", &pod, "", &gc.to_string()))
        .assert_success();
    assert!(env.leases(NET).is_empty(), "{:?}", env.leases(NET));
}

/// `ipv6LinkLocal: true` keeps Go's behaviour on an IPv4-only attachment: the container
/// interface makes its link-local address, without DAD (`accept_dad=0`, `enabledad` unset), and
/// the pods reach each other over it through the bridge.
#[test]
fn ipv6_link_local_kept_when_asked() {
    let env = Env::new();
    let conf = bridge_conf(
        &env,
        NET,
        BR,
        SUBNET,
        json!({"isGateway": true, "ipv6LinkLocal": true}),
    );
    let (a, b) = (env.pod(), env.pod());
    env.add("bridge", &a, "c1", &conf);
    env.add("bridge", &b, "c2", &conf);
    for pod in [&a, &b] {
        assert_eq!(link(&pod.name, "eth0")["inet6_addr_gen_mode"], "eui64");
        assert_eq!(
            sysctl(&env, &pod.name, "net.ipv6.conf.eth0.accept_dad"),
            "0"
        );
    }
    let peer = link_local_addrs(&env, &b.name);
    assert_eq!(peer.len(), 1, "{peer:?}");
    env.sb
        .exec_in(
            &a.name,
            [
                "ping",
                "-6",
                "-c",
                "1",
                "-W",
                "3",
                &format!("{}%eth0", peer[0]),
            ],
        )
        .unwrap()
        .assert_success();
    // A wrong type is refused like every other flag.
    let mut bad = conf.clone();
    bad["ipv6LinkLocal"] = json!("yes");
    let c = env.pod();
    let out = env.run("bridge", &env.call("ADD", &c, "c3", &bad.to_string()));
    assert!(!out.success(), "{out}");
    assert!(
        out.stdout.contains("\"code\": 7") || out.stdout.contains("\"code\":7"),
        "{out}"
    );
}
