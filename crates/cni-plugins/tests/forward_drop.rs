//! firewall on a host whose iptables `filter FORWARD` policy is DROP (Docker and hardened
//! hosts), in a throwaway host namespace: rcni's bridge (ipMasq) and
//! host-local build the pods, an "outside world" namespace is the external peer, and
//! `iptables-nft` (inside that namespace only) sets the policy and reads the rules back.

mod nft_common;

use std::net::IpAddr;

use cni_testkit::{http_get, http_server, ping, Netns};
use nft_common::*;
use serde_json::{json, Value};

const NET: &str = "fwdrop";

fn bridge_conf(lab: &Lab, bridge: &str, subnet: &str) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": NET,
        "type": "bridge",
        "bridge": bridge,
        "isGateway": true,
        "ipMasq": true,
        "ipam": {
            "type": "host-local",
            "ranges": [[{ "subnet": subnet }]],
            "routes": [{ "dst": "0.0.0.0/0" }],
            "dataDir": lab.sb.dir().join("ipam"),
        }
    })
}

/// A lab whose host namespace has `iptables -P FORWARD DROP` (iptables-nft).
fn drop_lab() -> Lab {
    let lab = Lab::new();
    lab.sb
        .link_plugins(BIN, &["bridge", "host-local"])
        .expect("plugin links");
    lab.host_sh("iptables-nft -P FORWARD DROP");
    lab
}

fn add_pod(lab: &Lab, cid: &str, conf: &Value) -> (Netns, Value) {
    let pod = lab.sb.add_container().expect("pod namespace");
    let out = lab.rcni(
        "bridge",
        "ADD",
        cid,
        pod.path.to_str().unwrap(),
        &conf.to_string(),
    );
    out.assert_success();
    lab.sh(&pod.name, "ip link set lo up");
    (pod, out.json().expect("bridge result"))
}

fn firewall(
    lab: &Lab,
    command: &str,
    cid: &str,
    pod: &Netns,
    prev: &Value,
) -> cni_testkit::PluginOutput {
    let stdin = chained(
        NET,
        json!({ "type": "firewall", "backend": "iptables" }),
        Some(prev),
        None,
    );
    lab.rcni("firewall", command, cid, pod.path.to_str().unwrap(), &stdin)
}

fn outside() -> IpAddr {
    OUTSIDE_IP4.parse().unwrap()
}

/// `iptables-nft -S CNI-FORWARD` of the host namespace.
fn cni_forward(lab: &Lab) -> String {
    lab.host_sh("iptables-nft -S CNI-FORWARD")
}

#[test]
fn pods_reach_the_outside_only_through_the_firewall_accepts() {
    let lab = drop_lab();
    let _outside = lab.add_outside();
    let conf = bridge_conf(&lab, "fwd0", "198.18.40.0/24");
    let (p1, r1) = add_pod(&lab, "fd1", &conf);
    let (p2, r2) = add_pod(&lab, "fd2", &conf);
    let (ip1, ip2) = (result_ip(&r1, false), result_ip(&r2, false));

    // (a) Without the firewall plugin the DROP policy wins, as with Go.
    assert!(
        !ping(&p1.name, outside()),
        "FORWARD DROP must block the pod"
    );
    for (cid, pod, res) in [("fd1", &p1, &r1), ("fd2", &p2, &r2)] {
        firewall(&lab, "ADD", cid, pod, res).assert_success();
    }
    assert!(
        ping(&p1.name, outside()),
        "p1 blocked with the firewall accepts"
    );
    assert!(
        ping(&p2.name, outside()),
        "p2 blocked with the firewall accepts"
    );
    let rules = cni_forward(&lab);
    assert!(rules.contains(&format!("-s {ip1}/32")), "{rules}");
    assert!(rules.contains(&format!("-d {ip2}/32")), "{rules}");
    assert!(rules.contains("--ctstate DNAT"), "{rules}");
    assert!(lab
        .host_sh("iptables-nft -S FORWARD")
        .contains("-j CNI-FORWARD"));

    // (c) An administrator's drop in CNI-ADMIN comes first.
    lab.host_sh(&format!("iptables-nft -A CNI-ADMIN -s {ip1}/32 -j DROP"));
    assert!(!ping(&p1.name, outside()), "CNI-ADMIN drop ignored");
    assert!(ping(&p2.name, outside()));
    lab.host_sh(&format!("iptables-nft -D CNI-ADMIN -s {ip1}/32 -j DROP"));
    assert!(ping(&p1.name, outside()));

    // (d) DEL removes only this attachment's rules.
    firewall(&lab, "DEL", "fd1", &p1, &r1).assert_success();
    let rules = cni_forward(&lab);
    assert!(!rules.contains(&format!("{ip1}/32")), "{rules}");
    assert!(rules.contains(&format!("-s {ip2}/32")), "{rules}");
    assert!(!ping(&p1.name, outside()), "p1 still forwarded after DEL");
    assert!(ping(&p2.name, outside()), "p2 lost by p1's DEL");
    let host = lab.host().name.clone();
    assert_eq!(
        rules_with(&host, "filter", "id: fd1"),
        0,
        "{:#?}",
        nft_common::rules(&host)
    );
    assert_eq!(rules_with(&host, "filter", "id: fd2"), 3);

    // (e) CHECK notices the FORWARD -> CNI-FORWARD jump is gone; ADD puts it back.
    firewall(&lab, "CHECK", "fd2", &p2, &r2).assert_success();
    lab.host_sh(
        "iptables-nft -D FORWARD -m comment --comment 'CNI firewall plugin rules' -j CNI-FORWARD",
    );
    assert!(!ping(&p2.name, outside()));
    let msg = assert_code(&firewall(&lab, "CHECK", "fd2", &p2, &r2), 999);
    assert!(
        msg.contains("FORWARD") && msg.contains("CNI-FORWARD"),
        "{msg}"
    );
    firewall(&lab, "ADD", "fd2", &p2, &r2).assert_success();
    assert!(ping(&p2.name, outside()));
    firewall(&lab, "CHECK", "fd2", &p2, &r2).assert_success();
}

#[test]
fn host_ports_are_reachable_from_outside_only_with_the_firewall() {
    let lab = drop_lab();
    let peer = lab.add_outside();
    let conf = bridge_conf(&lab, "fwd1", "198.18.41.0/24");
    let (pod, res) = add_pod(&lab, "fp1", &conf);
    let _srv = http_server(&pod.name, [0, 0, 0, 0], 80).unwrap();
    let maps =
        json!({ "portMappings": [{ "hostPort": 8081, "containerPort": 80, "protocol": "tcp" }] });
    let pm = chained(
        NET,
        json!({ "type": "portmap", "capabilities": { "portMappings": true } }),
        Some(&res),
        Some(maps),
    );
    lab.rcni("portmap", "ADD", "fp1", pod.path.to_str().unwrap(), &pm)
        .assert_success();
    let url = format!("http://{HOST_IP4}:8081/");
    // (b) Without the firewall the DNATed connection meets FORWARD's DROP.
    assert!(
        http_get(&peer.name, &url).is_err(),
        "FORWARD DROP must block the host port"
    );
    // Debian's Go firewall (no DNAT accept) leaves this blocked; rcni accepts it.
    firewall(&lab, "ADD", "fp1", &pod, &res).assert_success();
    eventually("outside -> hostPort with the firewall", || {
        http_get(&peer.name, &url)
    });
    firewall(&lab, "DEL", "fp1", &pod, &res).assert_success();
    assert!(
        http_get(&peer.name, &url).is_err(),
        "still reachable after the firewall's DEL"
    );
}

#[test]
fn an_iptables_legacy_host_is_refused_with_the_reason() {
    if which("iptables-legacy").is_none() {
        eprintln!("skipped: iptables-legacy is not installed");
        return;
    }
    let lab = Lab::new();
    lab.host_sh("iptables-legacy -A FORWARD -j ACCEPT");
    let pod = lab.sb.add_container().unwrap();
    let prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{ "name": "cni0" }, { "name": "eth0", "sandbox": "/x" }],
        "ips": [{ "address": "198.18.42.2/24", "interface": 1 }]
    });
    let msg = assert_code(&firewall(&lab, "ADD", "fl1", &pod, &prev), 999);
    assert!(msg.contains("iptables-legacy"), "{msg}");
    assert_eq!(rules_with(&lab.host().name, "filter", "id: fl1"), 0);
}

#[test]
fn go_and_rcni_firewalls_share_the_layout() {
    if !pod_plugins_available() {
        return;
    }
    let lab = drop_lab();
    let _outside = lab.add_outside();
    let conf = bridge_conf(&lab, "fwd3", "198.18.43.0/24");
    let (go_pod, go_res) = add_pod(&lab, "fg1", &conf);
    let (rs_pod, rs_res) = add_pod(&lab, "fr1", &conf);
    let keys = json!({ "type": "firewall", "backend": "iptables" });
    let go_stdin = chained(NET, keys, Some(&go_res), None);
    let go_ns = go_pod.path.to_str().unwrap();
    lab.go("firewall", "ADD", "fg1", go_ns, &go_stdin)
        .assert_success();
    firewall(&lab, "ADD", "fr1", &rs_pod, &rs_res).assert_success();
    assert!(ping(&go_pod.name, outside()), "Go's pod blocked");
    assert!(ping(&rs_pod.name, outside()), "rcni's pod blocked");
    let forward = lab.host_sh("iptables-nft -S FORWARD");
    assert_eq!(forward.matches("-j CNI-FORWARD").count(), 1, "{forward}");
    lab.go("firewall", "CHECK", "fg1", go_ns, &go_stdin)
        .assert_success();
    firewall(&lab, "CHECK", "fr1", &rs_pod, &rs_res).assert_success();

    // Deleting each leaves the other.
    firewall(&lab, "DEL", "fr1", &rs_pod, &rs_res).assert_success();
    assert!(!ping(&rs_pod.name, outside()));
    assert!(ping(&go_pod.name, outside()), "rcni's DEL broke Go's pod");
    firewall(&lab, "ADD", "fr1", &rs_pod, &rs_res).assert_success();
    lab.go("firewall", "DEL", "fg1", go_ns, &go_stdin)
        .assert_success();
    assert!(!ping(&go_pod.name, outside()));
    assert!(ping(&rs_pod.name, outside()), "Go's DEL broke rcni's pod");
    firewall(&lab, "CHECK", "fr1", &rs_pod, &rs_res).assert_success();
}

fn which(tool: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
        .map(|d| std::path::Path::new(d).join(tool))
        .find(|p| p.is_file())
}
