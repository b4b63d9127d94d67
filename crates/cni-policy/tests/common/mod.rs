//! Setup shared by the kernel tests of this crate: a throwaway host namespace with a bridge
//! whose traffic `br_netfilter` sends through the `forward` hook, pods attached to it, and
//! NetworkPolicy objects from their spec's YAML.

// Each test binary uses only some of these.
#![allow(dead_code)]

use std::net::IpAddr;

use cni_policy::{parse_documents, Document};
use cni_testkit::{Netns, Sandbox};
use k8s_openapi::api::networking::v1::NetworkPolicy;

/// A sandbox whose host namespace has the bridge `br0` and `br_netfilter` on; `None` (with
/// the reason printed) without root or without `br_netfilter`.
pub fn bridged_host() -> Option<Sandbox> {
    if !cni_testkit::is_root() {
        eprintln!("skipping: needs root");
        return None;
    }
    let sb = Sandbox::new().expect("sandbox");
    if !sb
        .exec_host(["sysctl", "-w", "net.bridge.bridge-nf-call-iptables=1"])
        .is_ok_and(|o| o.success())
    {
        eprintln!("skipping: the kernel has no br_netfilter (net.bridge.bridge-nf-call-iptables)");
        return None;
    }
    run(
        &sb,
        &sb.host().name,
        &["ip", "link", "add", "br0", "type", "bridge"],
    );
    run(&sb, &sb.host().name, &["ip", "link", "set", "br0", "up"]);
    Some(sb)
}

fn run(sb: &Sandbox, ns: &str, args: &[&str]) {
    sb.exec_in(ns, args.iter().copied())
        .unwrap()
        .assert_success();
}

/// A pod namespace whose `eth0` (address `ip`/24) is a veth on `br0`, host end `vp<index>`.
pub fn bridged_pod(sb: &Sandbox, index: usize, ip: IpAddr) -> Netns {
    let netns = sb.add_container().unwrap();
    let host = sb.host().name.clone();
    let host_end = format!("vp{index}");
    let veth = ["ip", "link", "add", &host_end, "type", "veth"];
    let peer = ["peer", "name", "eth0", "netns", &netns.name];
    run(sb, &host, &[&veth[..], &peer[..]].concat());
    run(
        sb,
        &host,
        &["ip", "link", "set", &host_end, "master", "br0", "up"],
    );
    let addr = format!("{ip}/24");
    run(
        sb,
        &netns.name,
        &["ip", "addr", "add", &addr, "dev", "eth0"],
    );
    run(sb, &netns.name, &["ip", "link", "set", "eth0", "up"]);
    run(sb, &netns.name, &["ip", "link", "set", "lo", "up"]);
    netns
}

/// The NetworkPolicy `ns/name` with `spec` (YAML lines indented by two spaces).
pub fn network_policy(ns: &str, name: &str, spec: &str) -> NetworkPolicy {
    let yaml = format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{spec}"
    );
    match parse_documents(&yaml).unwrap().remove(0) {
        Document::NetworkPolicy(p) => *p,
        other => panic!("not a NetworkPolicy: {other:?}"),
    }
}
