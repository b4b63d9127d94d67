//! DEL of a veth plugin finds the host end without listing the node's links: it follows the
//! container end's peer index into the host namespace (one look-up by index before and one
//! after deleting the container end), and lists the host's veths (a dump the kernel filters by
//! kind) only when that does not prove the attachment's host end gone. These tests build the
//! look-alikes that an index or a name alone would confuse and check with `ip -j` that DEL
//! removes exactly the attachment's links.

mod common;

use serde_json::{json, Value};

use cni_testkit::assert_silent_success;
use cni_testkit::{link, links, Netns, PluginCall};
use common::Setup;

const NET: &str = "peernet";
const BRIDGE: &str = "peerbr0";

fn conf(s: &Setup) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": NET,
        "type": "bridge",
        "bridge": BRIDGE,
        "ipam": {
            "type": "host-local",
            "subnet": "198.18.92.0/24",
            "dataDir": s.sb.dir().join("ipam").display().to_string(),
        },
    })
}

fn run(s: &Setup, command: &str, cid: &str, pod: Option<&Netns>) {
    let netns = pod
        .map(|p| p.path.display().to_string())
        .unwrap_or_default();
    let call = PluginCall::new(command)
        .container_id(cid)
        .netns(netns)
        .ifname("eth0")
        .path(&s.cni_dir)
        .stdin(conf(s).to_string());
    let out = s.run("bridge", &call);
    if command == "ADD" {
        out.assert_success();
    } else {
        assert_silent_success(&out);
    }
}

/// The host's bridge ports: (name, index), read with `ip -j`.
fn ports(s: &Setup) -> Vec<(String, u64)> {
    links(&s.sb.host().name)
        .unwrap()
        .iter()
        .filter(|l| l["master"].as_str() == Some(BRIDGE))
        .map(|l| {
            (
                l["ifname"].as_str().unwrap_or_default().to_string(),
                l["ifindex"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

fn ip_in(s: &Setup, ns: &str, args: &[&str]) {
    let mut argv = vec!["ip", "-n", ns];
    argv.extend_from_slice(args);
    s.sb.exec_host(argv).unwrap().assert_success();
}

#[test]
fn del_removes_its_own_pair_and_leaves_same_named_look_alikes() {
    let s = Setup::new(&["bridge", "host-local"]);
    let other = s.sb.add_container().unwrap();
    let go_pod = s.sb.add_container().unwrap();
    run(&s, "ADD", "c1", Some(&s.pod));
    let mine = ports(&s);
    run(&s, "ADD", "c2", Some(&other));
    // An untagged pair as Go's plugins make it, its container end also named eth0.
    s.sb.exec_host([
        "ip",
        "link",
        "add",
        "veth0badf00d",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        &go_pod.name,
    ])
    .unwrap()
    .assert_success();
    let before = ports(&s);
    assert_eq!(before.len(), 2, "{before:?}");

    run(&s, "DEL", "c1", Some(&s.pod));

    let after = ports(&s);
    assert!(!after.contains(&mine[0]), "c1's host end kept: {after:?}");
    assert_eq!(after.len(), 1, "{after:?}");
    assert!(link(&s.pod.name, "eth0").unwrap().is_none());
    assert!(
        link(&other.name, "eth0").unwrap().is_some(),
        "c2's pod end went"
    );
    assert!(
        link(&go_pod.name, "eth0").unwrap().is_some(),
        "Go's pod end went"
    );
    assert!(link(&s.sb.host().name, "veth0badf00d").unwrap().is_some());
}

#[test]
fn del_is_not_fooled_by_a_peer_index_from_another_namespace() {
    let s = Setup::new(&["bridge", "host-local"]);
    let elsewhere = s.sb.add_container().unwrap();
    let third = s.sb.add_container().unwrap();
    run(&s, "ADD", "c1", Some(&s.pod));
    let (host_end, index) = ports(&s).remove(0);
    // c1's pair now has its container end in another namespace, and the pod's eth0 is a veth
    // whose peer lives in a third namespace under the same index as c1's host end, and which
    // has the old eth0's index, so that c1's host end even points back at it: following the
    // indexes alone would count c1's host end deleted with the pod's eth0.
    ip_in(
        &s,
        &s.pod.name,
        &["link", "set", "eth0", "netns", &elsewhere.name],
    );
    let moved = link(&elsewhere.name, "eth0").unwrap().unwrap();
    let old_index = moved["ifindex"].as_u64().unwrap().to_string();
    let index = index.to_string();
    ip_in(
        &s,
        &third.name,
        &[
            "link",
            "add",
            "lookalike",
            "index",
            &index,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "index",
            &old_index,
            "netns",
            &s.pod.name,
        ],
    );
    let eth0 = link(&s.pod.name, "eth0").unwrap().unwrap();
    assert_eq!(eth0["ifindex"].as_u64().unwrap().to_string(), old_index);

    run(&s, "DEL", "c1", Some(&s.pod));

    assert!(link(&s.pod.name, "eth0").unwrap().is_none());
    assert!(link(&third.name, "lookalike").unwrap().is_none());
    assert!(
        link(&s.sb.host().name, &host_end).unwrap().is_none(),
        "c1's host end kept"
    );
    assert!(link(&elsewhere.name, "eth0").unwrap().is_none());
}

#[test]
fn del_without_netns_finds_the_tagged_host_end_among_other_veths() {
    let s = Setup::new(&["bridge", "host-local"]);
    let other = s.sb.add_container().unwrap();
    let parked = s.sb.add_container().unwrap();
    run(&s, "ADD", "c1", Some(&s.pod));
    let (mine, _) = ports(&s).remove(0);
    run(&s, "ADD", "c2", Some(&other));
    // The pod's namespace is gone for DEL, but a holder kept c1's pair alive.
    ip_in(
        &s,
        &s.pod.name,
        &["link", "set", "eth0", "netns", &parked.name],
    );

    run(&s, "DEL", "c1", None);

    let after = ports(&s);
    assert!(after.iter().all(|(n, _)| n != &mine), "{after:?}");
    assert_eq!(after.len(), 1, "c2's host end went: {after:?}");
    assert!(link(&parked.name, "eth0").unwrap().is_none());
    assert!(link(&other.name, "eth0").unwrap().is_some());
}
