//! A bridge/ptp host veth is always attributable to its attachment, also when the plugin is
//! killed half-way: it is made under a temporary name derived from the attachment
//! (`rc<hash4(net)><hash9(ifname:cid)>`) and then renamed and tagged with its alias in one
//! request. These tests leave a veth as a kill between the two requests would, and prove
//! that GC, DEL without a netns and a repeated ADD remove it, and nothing that is not theirs.

mod common;

use serde_json::{json, Value};
use sha2::{Digest, Sha512};

use cni_testkit::assert_silent_success;
use cni_testkit::{link, links, PluginCall};
use common::Setup;

const NET: &str = "attrnet";

fn hash_hex(text: &str, len: usize) -> String {
    let d = Sha512::digest(text.as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect::<String>()[..len].to_string()
}

/// The temporary host name of (NET, cid, ifname), computed independently of the plugin.
fn temp_name(cid: &str, ifname: &str) -> String {
    format!(
        "rc{}{}",
        hash_hex(NET, 4),
        hash_hex(&format!("{ifname}:{cid}"), 9)
    )
}

fn conf(s: &Setup, version: &str) -> Value {
    json!({
        "cniVersion": version,
        "name": NET,
        "type": "bridge",
        "bridge": "attrbr0",
        "ipam": {
            "type": "host-local",
            "subnet": "198.18.91.0/24",
            "dataDir": s.sb.dir().join("ipam").display().to_string(),
        },
    })
}

fn call(s: &Setup, command: &str, cid: &str, netns: &str, stdin: &Value) -> PluginCall {
    PluginCall::new(command)
        .container_id(cid)
        .netns(netns)
        .ifname("eth0")
        .path(&s.cni_dir)
        .stdin(stdin.to_string())
}

/// A veth as a kill after the creation request leaves it: the host end under its temporary
/// name, the other end in `peer_ns` as `peer`.
fn leave_temp_veth(s: &Setup, host_name: &str, peer: &str, peer_ns: &str) {
    s.sb.exec_host([
        "ip", "link", "add", host_name, "type", "veth", "peer", "name", peer, "netns", peer_ns,
    ])
    .unwrap()
    .assert_success();
}

fn host_link_names(s: &Setup) -> Vec<String> {
    links(&s.sb.host().name)
        .unwrap()
        .iter()
        .filter_map(|l| l["ifname"].as_str().map(String::from))
        .collect()
}

#[test]
fn a_finished_add_leaves_a_renamed_and_tagged_host_veth() {
    let s = Setup::new(&["bridge", "host-local"]);
    let c = conf(&s, "1.1.0");
    let out = s.run(
        "bridge",
        &call(&s, "ADD", "c1", &s.pod.path.display().to_string(), &c),
    );
    out.assert_success();
    let result = out.json().unwrap();
    let host = result["interfaces"][1]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        host.starts_with("veth") && host.len() == 12,
        "Go-style name: {host}"
    );
    let l = link(&s.sb.host().name, &host).unwrap().unwrap();
    let alias = l["ifalias"].as_str().unwrap_or_default();
    assert!(
        alias.starts_with(&format!("{}-", hash_hex(NET, 16))),
        "alias {alias:?}"
    );
    assert!(
        !host_link_names(&s).iter().any(|n| n.starts_with("rc")),
        "a temporary name is left: {:?}",
        host_link_names(&s)
    );
}

#[test]
fn gc_removes_a_killed_adds_temporarily_named_veth_and_nothing_else() {
    let s = Setup::new(&["bridge", "host-local"]);
    let other = s.sb.add_container().unwrap();
    let stale = temp_name("c1", "eth0");
    let valid = temp_name("c2", "eth0");
    leave_temp_veth(&s, &stale, "eth0", &s.pod.name);
    leave_temp_veth(&s, &valid, "eth0", &other.name);
    // An untagged veth of someone else (Go's plugins name theirs like this).
    leave_temp_veth(&s, "veth0badf00d", "peer0", &other.name);

    let mut gc = conf(&s, "1.1.0");
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "c2", "ifname": "eth0"}]);
    assert_silent_success(&s.run(
        "bridge",
        &PluginCall::new("GC").path(&s.cni_dir).stdin(gc.to_string()),
    ));

    let names = host_link_names(&s);
    assert!(!names.contains(&stale), "stale temp veth kept: {names:?}");
    assert!(link(&s.pod.name, "eth0").unwrap().is_none());
    assert!(
        names.contains(&valid),
        "a valid attachment's veth went: {names:?}"
    );
    assert!(names.contains(&"veth0badf00d".to_string()), "{names:?}");
}

#[test]
fn del_without_netns_removes_the_temporarily_named_veth() {
    let s = Setup::new(&["bridge", "host-local"]);
    let stale = temp_name("c1", "eth0");
    leave_temp_veth(&s, &stale, "eth0", &s.pod.name);
    assert_silent_success(&s.run("bridge", &call(&s, "DEL", "c1", "", &conf(&s, "1.0.0"))));
    assert!(!host_link_names(&s).contains(&stale));
    assert!(link(&s.pod.name, "eth0").unwrap().is_none());
}

#[test]
fn add_after_a_kill_replaces_the_leftover() {
    let s = Setup::new(&["bridge", "host-local"]);
    let other = s.sb.add_container().unwrap();
    let stale = temp_name("c1", "eth0");
    leave_temp_veth(&s, &stale, "leftover", &other.name);
    let out = s.run(
        "bridge",
        &call(
            &s,
            "ADD",
            "c1",
            &s.pod.path.display().to_string(),
            &conf(&s, "1.0.0"),
        ),
    );
    out.assert_success();
    assert!(!host_link_names(&s).contains(&stale));
    assert!(link(&other.name, "leftover").unwrap().is_none());
    assert!(link(&s.pod.name, "eth0").unwrap().is_some());
}
