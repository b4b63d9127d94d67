//! rcni's bridge plugin `ipMasq` measured with traffic: a pod's TCP
//! connection to an "outside world" namespace arrives from the host's address with
//! `ipMasq: true`, and from the pod's own address with `ipMasq: false`, over IPv4 and IPv6.
//! DEL removes the masquerade rules. Needs root.

mod nft_common;

use std::net::{IpAddr, SocketAddr};

use cni_plugins::common::masquerade;
use cni_testkit::Netns;
use nft_common::{
    assert_code, result_ip, rules_with, source_seen, Lab, BIN, HOST_IP4, HOST_IP6, OUTSIDE_IP4,
    OUTSIDE_IP6,
};
use serde_json::{json, Value};

const NET: &str = "masq-traffic";

/// A dual-stack rcni bridge config with `ipMasq` as given.
fn bridge_conf(lab: &Lab, ip_masq: bool) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": NET,
        "type": "bridge",
        "bridge": "rmasq0",
        "isGateway": true,
        "ipMasq": ip_masq,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": "198.18.190.0/24"}], [{"subnet": "2001:2:0:190::/64"}]],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
            "dataDir": lab.sb.dir().join("ipam"),
        }
    })
}

/// Attaches a new pod with rcni's bridge and host-local; returns it and the plugin's output.
fn attach(lab: &Lab, cid: &str, conf: &Value) -> (Netns, cni_testkit::PluginOutput) {
    lab.sb
        .link_plugins(BIN, &["bridge", "host-local"])
        .expect("plugin links");
    let pod = lab.sb.add_container().expect("pod namespace");
    let out = lab.rcni(
        "bridge",
        "ADD",
        cid,
        pod.path.to_str().unwrap(),
        &conf.to_string(),
    );
    out.assert_success();
    (pod, out)
}

/// Attaches a new pod; returns it and the result.
fn add_pod(lab: &Lab, cid: &str, conf: &Value) -> (Netns, Value) {
    let (pod, out) = attach(lab, cid, conf);
    (pod, out.json().expect("bridge result"))
}

/// The source addresses the outside sees for IPv4 and IPv6 connections from `pod`.
fn sources(pod: &Netns, outside: &Netns, port: u16) -> (IpAddr, IpAddr) {
    let seen = |ip: &str| {
        let target = SocketAddr::new(ip.parse().unwrap(), port);
        source_seen(pod, outside, target).unwrap_or_else(|| panic!("no connection to {target}"))
    };
    (seen(OUTSIDE_IP4), seen(OUTSIDE_IP6))
}

#[test]
fn ip_masq_true_leaves_with_the_host_address() {
    let lab = Lab::new();
    let outside = lab.add_outside();
    let conf = bridge_conf(&lab, true);
    let (pod, result) = add_pod(&lab, "masq-on", &conf);
    let (v4, v6) = sources(&pod, &outside, 7201);
    assert_eq!(
        v4.to_string(),
        HOST_IP4,
        "IPv4 masqueraded to the host address"
    );
    assert_eq!(
        v6.to_string(),
        HOST_IP6,
        "IPv6 masqueraded to the host address"
    );
    assert_ne!(v4.to_string(), result_ip(&result, false));

    let host = lab.host().name.clone();
    assert!(rules_with(&host, masquerade::TABLE, "id: masq-on") > 0);
    let del = lab.rcni(
        "bridge",
        "DEL",
        "masq-on",
        pod.path.to_str().unwrap(),
        &conf.to_string(),
    );
    del.assert_success();
    assert_eq!(rules_with(&host, masquerade::TABLE, "id: masq-on"), 0);
}

#[test]
fn ip_masq_false_keeps_the_pod_address() {
    let lab = Lab::new();
    let outside = lab.add_outside();
    let conf = bridge_conf(&lab, false);
    let (pod, result) = add_pod(&lab, "masq-off", &conf);
    let (v4, v6) = sources(&pod, &outside, 7202);
    assert_eq!(
        v4.to_string(),
        result_ip(&result, false),
        "IPv4 not masqueraded"
    );
    assert_eq!(
        v6.to_string(),
        result_ip(&result, true),
        "IPv6 not masqueraded"
    );
    let host = lab.host().name.clone();
    assert_eq!(rules_with(&host, masquerade::TABLE, "id: masq-off"), 0);
}

#[test]
fn gc_without_a_valid_list_is_code_7_and_keeps_the_masquerade() {
    let lab = Lab::new();
    let conf = bridge_conf(&lab, true);
    let (pod, _) = add_pod(&lab, "masq-gc", &conf);
    let host = lab.host().name.clone();
    let before = rules_with(&host, masquerade::TABLE, "id: masq-gc");
    assert!(before > 0);
    let mut gc = conf.clone();
    gc["cniVersion"] = json!("1.1.0");
    let msg = assert_code(&lab.rcni_gc("bridge", &gc.to_string()), 7);
    assert!(msg.contains("valid-attachments"), "{msg}");
    assert_eq!(rules_with(&host, masquerade::TABLE, "id: masq-gc"), before);
    // The pod's interface is still there too.
    lab.sh(&pod.name, "ip link show eth0");
}

#[test]
fn ip_masq_backend_iptables_and_a_negative_mtu_are_answered_on_stderr() {
    let lab = Lab::new();
    let mut conf = bridge_conf(&lab, true);
    conf["ipMasqBackend"] = json!("iptables");
    conf["mtu"] = json!(-1);
    let (pod, out) = attach(&lab, "masq-warn", &conf);
    out.json().expect("stdout is the result alone");
    let once = |needle: &str| {
        assert_eq!(out.stderr.matches(needle).count(), 1, "{needle}: {out}");
    };
    once("bridge: ipMasqBackend \"iptables\" is not honoured: rcni masquerades with nftables");
    once("bridge: mtu -1 is not honoured: a negative MTU is ignored and the kernel default MTU is used");
    assert_eq!(out.stderr.lines().count(), 2, "{out}");
    // Honoured the rcni way: masqueraded by the nftables rules, default MTU.
    let host = lab.host().name.clone();
    assert!(rules_with(&host, masquerade::TABLE, "id: masq-warn") > 0);
    assert!(lab.sh(&pod.name, "ip link show eth0").contains("mtu 1500"));
}
