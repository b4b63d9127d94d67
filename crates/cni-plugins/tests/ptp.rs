//! Integration tests of rcni's ptp plugin: the real `rcni-plugins` binary in throwaway
//! namespaces (cni-testkit), kernel state read back with `ip -j`, real traffic, fault
//! injection with zero leftovers, and differential runs against Debian's Go ptp. Needs root.

mod attach;

use std::net::IpAddr;

use attach::*;
use cni_testkit::{http_get, http_server, ping, IpFamily};
use serde_json::{json, Value};

const NET: &str = "ptpnet";
const SUBNET: &str = "198.18.55.0/24";

fn host_veth(result: &Value) -> String {
    result["interfaces"][0]["name"]
        .as_str()
        .unwrap()
        .to_string()
}

fn container_ip(result: &Value) -> IpAddr {
    let a = result["ips"][0]["address"].as_str().unwrap();
    a.split('/').next().unwrap().parse().unwrap()
}

fn host_links(env: &Env) -> Vec<String> {
    link_names(env.host())
        .into_iter()
        .filter(|n| n != "lo")
        .collect()
}

#[test]
fn add_check_del() {
    let env = Env::new();
    let pod = env.pod();
    let conf = ptp_conf(&env, NET, SUBNET, json!({"mtu": 1400}));
    let r = env.add("ptp", &pod, "c1", &conf);

    // Result: [host veth, container veth], IPs on interface 1.
    let ifaces = r["interfaces"].as_array().unwrap();
    assert_eq!(ifaces.len(), 2, "{r}");
    let veth = host_veth(&r);
    assert!(veth.starts_with("veth") && veth.len() == 12);
    assert!(ifaces[0].get("sandbox").is_none());
    assert_eq!(ifaces[1]["name"], "eth0");
    assert_eq!(ifaces[1]["sandbox"], pod.path.to_str().unwrap());
    assert_eq!(r["ips"][0]["interface"], 1);
    assert_eq!(r["ips"][0]["address"], "198.18.55.2/24");
    assert_eq!(r["ips"][0]["gateway"], "198.18.55.1");

    // Container: address, no on-link subnet route, gw/32 on-link, subnet via gw.
    assert_eq!(addrs_of(&pod.name, "eth0"), ["198.18.55.2/24"]);
    let mut routes = main_routes(&pod.name, IpFamily::V4);
    routes.sort();
    assert_eq!(
        routes,
        [
            "198.18.55.0/24 via 198.18.55.1 dev eth0",
            "198.18.55.1 dev eth0 scope link"
        ],
        "{routes:?}"
    );
    assert_eq!(link(&pod.name, "eth0")["mtu"], 1400);

    // Host: gateway /32 on the veth, host route to the container, forwarding on.
    let hv = link(env.host(), &veth);
    assert_eq!(hv["mtu"], 1400);
    assert_eq!(hv["operstate"], "UP");
    assert_eq!(addrs_of(env.host(), &veth), ["198.18.55.1/32"]);
    let host_routes = main_routes(env.host(), IpFamily::V4);
    assert!(
        host_routes.contains(&format!("198.18.55.2 dev {veth} scope host")),
        "{host_routes:?}"
    );
    assert_eq!(sysctl(&env, env.host(), "net.ipv4.ip_forward"), "1");
    // IPv4 only: IPv6 is off on the host end (rcni; Go leaves it on), so the host has no IPv6
    // route through it.
    assert_ipv6_off(&env, env.host(), &veth);
    assert!(ping(&pod.name, "198.18.55.1".parse::<IpAddr>().unwrap()));
    assert_eq!(env.leases(NET), ["198.18.55.2"]);

    // CHECK passes, and fails after the address is removed by hand.
    let check = Env::with_prev(&conf, &r);
    env.run("ptp", &env.call("CHECK", &pod, "c1", &check.to_string()))
        .assert_success();
    env.sb
        .exec_in(
            &pod.name,
            ["ip", "addr", "del", "198.18.55.2/24", "dev", "eth0"],
        )
        .unwrap()
        .assert_success();
    let out = env.run("ptp", &env.call("CHECK", &pod, "c1", &check.to_string()));
    assert!(
        !out.success() && out.stdout.contains("198.18.55.2"),
        "{out}"
    );

    for _ in 0..2 {
        env.run("ptp", &env.call("DEL", &pod, "c1", &conf.to_string()))
            .assert_success();
    }
    assert!(!has_link(&pod.name, "eth0"));
    assert!(host_links(&env).is_empty(), "{:?}", host_links(&env));
    assert!(env.leases(NET).is_empty());
    assert!(!main_routes(env.host(), IpFamily::V4)
        .iter()
        .any(|r| r.starts_with("198.18.55.2")));
}

#[test]
fn two_pods_route_through_the_host() {
    let env = Env::new();
    let a = env.pod();
    let b = env.pod();
    let conf = ptp_conf(&env, NET, SUBNET, json!({}));
    let ra = env.add("ptp", &a, "ca", &conf);
    let rb = env.add("ptp", &b, "cb", &conf);
    // Both host veths carry the same gateway address.
    assert_eq!(addrs_of(env.host(), &host_veth(&ra)), ["198.18.55.1/32"]);
    assert_eq!(addrs_of(env.host(), &host_veth(&rb)), ["198.18.55.1/32"]);
    let ip_b = container_ip(&rb);
    assert!(
        ping(&a.name, ip_b),
        "pod a cannot reach pod b through the host"
    );
    assert!(ping(env.host(), container_ip(&ra)));
    let server = http_server(&b.name, ip_b, 0).unwrap();
    assert_eq!(
        http_get(&a.name, &server.url()).unwrap(),
        cni_testkit::HTTP_BODY
    );
}

#[test]
fn dual_stack_and_default_route() {
    let env = Env::new();
    let pod = env.pod();
    let mut conf = ptp_conf(
        &env,
        NET,
        SUBNET,
        json!({"dns": {"nameservers": ["198.18.55.53"]}}),
    );
    conf["ipam"]["ranges"] = json!([[{"subnet": SUBNET}], [{"subnet": "2001:2:0:55::/64"}]]);
    conf["ipam"]["routes"] = json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]);
    let r = env.add("ptp", &pod, "c1", &conf);
    assert_eq!(r["dns"], json!({"nameservers": ["198.18.55.53"]}));
    let veth = host_veth(&r);
    let mut host_addrs = addrs_of(env.host(), &veth);
    host_addrs.sort();
    assert_eq!(host_addrs, ["198.18.55.1/32", "2001:2:0:55::1/128"]);
    // With IPv6 addresses the host end keeps IPv6, with router advertisements ignored.
    assert_eq!(
        sysctl(
            &env,
            env.host(),
            &format!("net.ipv6.conf.{veth}.disable_ipv6")
        ),
        "0"
    );
    assert_eq!(
        sysctl(&env, env.host(), &format!("net.ipv6.conf.{veth}.accept_ra")),
        "0"
    );
    let v6 = main_routes(&pod.name, IpFamily::V6);
    for want in [
        "default via 2001:2:0:55::1 dev eth0",
        "2001:2:0:55::/64 via 2001:2:0:55::1 dev eth0",
    ] {
        assert!(
            v6.iter().any(|r| r.starts_with(want)),
            "{want} missing: {v6:?}"
        );
    }
    assert!(main_routes(&pod.name, IpFamily::V4)
        .contains(&"default via 198.18.55.1 dev eth0".to_string()));
    assert_eq!(
        sysctl(&env, env.host(), "net.ipv6.conf.all.forwarding"),
        "1"
    );
    let check = Env::with_prev(&conf, &r);
    env.run("ptp", &env.call("CHECK", &pod, "c1", &check.to_string()))
        .assert_success();
    let gw6: IpAddr = "2001:2:0:55::1".parse().unwrap();
    assert!(ping(&pod.name, gw6));
}

#[test]
fn ip_masq_rules_are_removed_even_when_the_netns_is_gone() {
    let env = Env::new();
    let pod = env.pod();
    let conf = ptp_conf(&env, NET, SUBNET, json!({"ipMasq": true}));
    env.add("ptp", &pod, "c1", &conf);
    let ours = || {
        nft_rule_comments(env.host(), "cni_plugins_masquerade")
            .iter()
            .filter(|c| c.ends_with("id: c1"))
            .count()
    };
    assert_eq!(ours(), 1);
    env.sb.remove_container(&pod).unwrap();
    env.run("ptp", &env.call("DEL", &pod, "c1", &conf.to_string()))
        .assert_success();
    assert_eq!(ours(), 0);
}

#[test]
fn status_and_gc_go_to_ipam() {
    let env = Env::new();
    let pod = env.pod();
    let conf = json!({"cniVersion": "1.1.0", "name": NET, "type": "ptp",
                      "ipam": {"type": "no-such-ipam"},
                      "cni.dev/valid-attachments": []});
    for cmd in ["STATUS", "GC"] {
        let out = env.run("ptp", &env.call(cmd, &pod, "c1", &conf.to_string()));
        assert!(
            !out.success() && out.stdout.contains("no-such-ipam"),
            "{cmd}: {out}"
        );
    }
}

// ---- fault injection ----

#[track_caller]
fn assert_no_leftovers(env: &Env, pod: &cni_testkit::Netns) {
    assert!(
        !has_link(&pod.name, "eth0"),
        "container interface left behind"
    );
    assert!(
        host_links(env).is_empty(),
        "host links left: {:?}",
        host_links(env)
    );
    assert!(
        env.leases(NET).is_empty(),
        "leases left: {:?}",
        env.leases(NET)
    );
    assert!(
        !main_routes(env.host(), IpFamily::V4)
            .iter()
            .any(|r| r.starts_with("198.18.55.")),
        "host routes left"
    );
}

#[test]
fn fault_ipam_type_that_does_not_exist() {
    let env = Env::new();
    let pod = env.pod();
    let mut conf = ptp_conf(&env, NET, SUBNET, json!({}));
    conf["ipam"]["type"] = json!("no-such-ipam");
    let out = env.run("ptp", &env.call("ADD", &pod, "c1", &conf.to_string()));
    assert!(
        !out.success() && out.stdout.contains("no-such-ipam"),
        "{out}"
    );
    assert_no_leftovers(&env, &pod);
}

#[test]
fn fault_netns_that_does_not_exist() {
    let env = Env::new();
    let pod = env.pod();
    env.sb.remove_container(&pod).unwrap();
    let conf = ptp_conf(&env, NET, SUBNET, json!({}));
    let out = env.run("ptp", &env.call("ADD", &pod, "c1", &conf.to_string()));
    assert!(!out.success(), "{out}");
    assert!(host_links(&env).is_empty());
    assert!(env.leases(NET).is_empty());
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
    let conf = ptp_conf(&env, NET, SUBNET, json!({}));
    let out = env.run("ptp", &env.call("ADD", &pod, "c1", &conf.to_string()));
    assert!(out.stdout.contains("already exists"), "{out}");
    // The lease taken before the clash was released again.
    assert!(host_links(&env).is_empty());
    assert!(env.leases(NET).is_empty());
}

#[test]
fn fault_ipam_exhausted_and_repeated_add() {
    let env = Env::new();
    let first = env.pod();
    let conf = ptp_conf(&env, NET, "198.18.55.0/30", json!({}));
    let r = env.add("ptp", &first, "c1", &conf);
    let kept = host_veth(&r);
    // The same attachment again: refused, the first one intact.
    let out = env.run("ptp", &env.call("ADD", &first, "c1", &conf.to_string()));
    assert!(!out.success(), "{out}");
    assert_eq!(host_links(&env), std::slice::from_ref(&kept));
    assert_eq!(env.leases(NET), ["198.18.55.2"]);
    // Another pod: the range is exhausted.
    let pod = env.pod();
    let out = env.run("ptp", &env.call("ADD", &pod, "c2", &conf.to_string()));
    assert!(!out.success(), "{out}");
    assert!(!has_link(&pod.name, "eth0"));
    assert_eq!(host_links(&env), [kept]);
    assert_eq!(env.leases(NET), ["198.18.55.2"]);
}

#[test]
fn del_after_the_netns_is_gone_and_with_no_netns() {
    let env = Env::new();
    let pod = env.pod();
    let conf = ptp_conf(&env, NET, SUBNET, json!({}));
    env.add("ptp", &pod, "c1", &conf);
    env.sb.remove_container(&pod).unwrap();
    env.run("ptp", &env.call("DEL", &pod, "c1", &conf.to_string()))
        .assert_success();
    assert!(env.leases(NET).is_empty());
    assert!(
        eventually(|| host_links(&env).is_empty()),
        "the host veth outlived its namespace: {:?}",
        host_links(&env)
    );
    let other = env.pod();
    env.add("ptp", &other, "c2", &conf);
    env.run(
        "ptp",
        &env.call("DEL", &other, "c2", &conf.to_string()).netns(""),
    )
    .assert_success();
    assert!(env.leases(NET).is_empty());
}

// ---- differential tests against Debian's Go ptp ----

fn kernel_shape(env: &Env, pod: &cni_testkit::Netns, veth: &str) -> Value {
    let mut container_routes = main_routes(&pod.name, IpFamily::V4);
    container_routes.sort();
    let host_routes: Vec<String> = main_routes(env.host(), IpFamily::V4)
        .iter()
        .map(|r| normalize_names(r))
        .collect();
    json!({
        "host_links": host_links(env).iter().map(|n| normalize_names(n)).collect::<Vec<_>>(),
        "host_veth_addrs": addrs_of(env.host(), veth),
        "host_veth_mtu": link(env.host(), veth)["mtu"],
        "host_routes": host_routes,
        "container_addrs": addrs_of(&pod.name, "eth0"),
        "container_routes": container_routes,
        "container_mtu": link(&pod.name, "eth0")["mtu"],
        "forwarding": sysctl(env, env.host(), "net.ipv4.ip_forward"),
    })
}

fn result_shape(r: &Value) -> Value {
    let mut r = r.clone();
    for i in r["interfaces"].as_array_mut().unwrap() {
        i["mac"] = json!(i["mac"].as_str().map(|m| m.len()));
        i["name"] = json!(normalize_names(i["name"].as_str().unwrap()));
        if i.get("sandbox").is_some() {
            i["sandbox"] = json!("<netns>");
        }
    }
    if r["dns"] == json!({}) {
        r.as_object_mut().unwrap().remove("dns");
    }
    r
}

#[test]
fn differential_same_config_through_go_and_rcni() {
    for extra in [
        json!({}),
        json!({"mtu": 1400, "dns": {"nameservers": ["198.18.55.53"]}}),
    ] {
        let mut shapes = Vec::new();
        for imp in [Impl::Go, Impl::Rcni] {
            let Some(env) = Env::with(imp, Some(Impl::Go)) else {
                return;
            };
            let pod = env.pod();
            let mut conf = ptp_conf(&env, NET, SUBNET, extra.clone());
            conf["ipam"]["routes"] = json!([{"dst": "0.0.0.0/0"}]);
            let r = env.add("ptp", &pod, "c1", &conf);
            shapes.push((result_shape(&r), kernel_shape(&env, &pod, &host_veth(&r))));
            env.run("ptp", &env.call("DEL", &pod, "c1", &conf.to_string()))
                .assert_success();
            assert!(
                host_links(&env).is_empty(),
                "{imp:?} DEL left {:?}",
                host_links(&env)
            );
        }
        assert_eq!(shapes[0].0, shapes[1].0, "result differs for {extra}");
        assert_eq!(shapes[0].1, shapes[1].1, "kernel state differs for {extra}");
    }
}

#[test]
fn mixed_chain_go_host_local_under_rcni_ptp_and_go_del() {
    let Some(env) = Env::with(Impl::Rcni, Some(Impl::Go)) else {
        return;
    };
    let pod = env.pod();
    let conf = ptp_conf(&env, NET, SUBNET, json!({}));
    let r = env.add("ptp", &pod, "c1", &conf);
    assert!(ping(env.host(), container_ip(&r)));
    // Go's ptp CHECKs and DELs what rcni made.
    let Some(go) = go_dir_or_skip("Go ptp") else {
        return;
    };
    std::fs::remove_file(env.cni_dir.join("ptp")).unwrap();
    std::os::unix::fs::symlink(go.join("ptp"), env.cni_dir.join("ptp")).unwrap();
    let check = Env::with_prev(&conf, &r);
    env.run("ptp", &env.call("CHECK", &pod, "c1", &check.to_string()))
        .assert_success();
    env.run("ptp", &env.call("DEL", &pod, "c1", &conf.to_string()))
        .assert_success();
    assert!(host_links(&env).is_empty());
    assert!(env.leases(NET).is_empty());
}

#[test]
fn mixed_chain_rcni_host_local_under_go_ptp() {
    let Some(env) = Env::with(Impl::Go, Some(Impl::Rcni)) else {
        return;
    };
    let pod = env.pod();
    let conf = ptp_conf(&env, NET, SUBNET, json!({}));
    let r = env.add("ptp", &pod, "c1", &conf);
    assert!(ping(env.host(), container_ip(&r)));
    env.run("ptp", &env.call("DEL", &pod, "c1", &conf.to_string()))
        .assert_success();
    assert!(env.leases(NET).is_empty());
}

/// Every ADD step failing in turn (debug-build hook `RCNI_TEST_FAIL_AT`) leaves no pair, no
/// lease and no host route; a later ADD of the same attachment works.
#[test]
fn fault_each_add_step_in_turn() {
    let env = Env::new();
    let conf = ptp_conf(&env, NET, SUBNET, json!({}));
    for step in ["ipam", "veth", "container", "host", "done"] {
        let pod = env.pod();
        let call = env
            .call("ADD", &pod, "c1", &conf.to_string())
            .env("RCNI_TEST_FAIL_AT", format!("ptp:{step}"));
        let out = env.run("ptp", &call);
        assert!(
            out.stdout
                .contains(&format!("injected failure at ptp:{step}")),
            "{step}: {out}"
        );
        assert_no_leftovers(&env, &pod);
        env.add("ptp", &pod, "c1", &conf);
        // Only this lease exists: the failed ADD released its own.
        assert_eq!(env.leases(NET).len(), 1, "{step}: {:?}", env.leases(NET));
        env.run("ptp", &env.call("DEL", &pod, "c1", &conf.to_string()))
            .assert_success();
        assert_no_leftovers(&env, &pod);
    }
}
