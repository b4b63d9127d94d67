//! Root-only: the `wireguard` backend on simulated nodes (see `harness/mod.rs` for the
//! topology, `harness/wireguard.rs` for each node's own `/run/wireguard`). This machine's
//! kernel has no WireGuard, so these run the userspace implementation (Debian's
//! `wireguard-go`); the kernel implementation's tests skip, naming the missing module, where
//! it is missing. The tunnels are checked with `wg show` (wireguard-tools), `ip -j` and a
//! capture of the underlay with `tcpdump`.

mod harness;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use cni_testkit::{http_get, http_server, ping, PingStream, HTTP_BODY};
use harness::wireguard::{kernel_has_wireguard, kill_pid};
use harness::*;
use serde_json::{json, Value};

fn wireguard() -> Value {
    json!({"Type": "wireguard"})
}

fn dual_stack() -> Value {
    json!({
        "Network": CLUSTER_NET, "SubnetLen": 24,
        "EnableIPv6": true, "IPv6Network": CLUSTER_NET6, "IPv6SubnetLen": 64,
        "Backend": wireguard()
    })
}

/// The lease of node `i` as stored in etcd: its key and JSON value.
fn stored_lease(c: &Cluster, i: usize) -> (String, Value) {
    let out = c.etcdctl(&["get", "--prefix", &format!("{PREFIX}/subnets/")]);
    let lines: Vec<&str> = out.lines().collect();
    for pair in lines.chunks(2) {
        let value: Value = serde_json::from_str(pair[1]).unwrap();
        if value["rcniNodeName"] == format!("node{}", c.nodes[i].index) {
            return (pair[0].to_string(), value);
        }
    }
    panic!("no lease of node{} in {out}", c.nodes[i].index)
}

/// The public key node `i` publishes (`BackendData.PublicKey`, or the IPv6 one).
fn published_key(c: &Cluster, i: usize) -> String {
    let (_, lease) = stored_lease(c, i);
    let data = if lease["BackendData"].is_null() {
        &lease["BackendV6Data"]
    } else {
        &lease["BackendData"]
    };
    data["PublicKey"].as_str().unwrap().to_string()
}

/// Every other node's published key is a peer of node `i`'s `device`, with that node's
/// subnet as allowed IPs and its public address and port as endpoint.
fn peers_match_the_leases(c: &Cluster, i: usize, device: &str, ipv6: bool) {
    let peers = c.nodes[i].wg_peers(device);
    let others: Vec<usize> = (0..c.nodes.len()).filter(|j| *j != i).collect();
    assert_eq!(peers.len(), others.len(), "{peers:?}");
    for j in others {
        let (_, lease) = stored_lease(c, j);
        let data = if ipv6 {
            &lease["BackendV6Data"]
        } else {
            &lease["BackendData"]
        };
        let key = data["PublicKey"].as_str().unwrap();
        let peer = peers
            .iter()
            .find(|p| p.public_key == key)
            .unwrap_or_else(|| panic!("no peer {key} on node{} {device}: {peers:?}", i + 1));
        let (subnet, endpoint) = if ipv6 {
            (
                c.nodes[j].subnet6().unwrap(),
                format!("[{}]:{}", c.nodes[j].ip6(), data["Port"]),
            )
        } else {
            (
                c.nodes[j].subnet().unwrap(),
                format!("{}:{}", c.nodes[j].ip, data["Port"]),
            )
        };
        assert_eq!(peer.allowed_ips, subnet);
        assert_eq!(peer.endpoint, endpoint);
        assert_eq!(peer.preshared_key, "(none)");
        let family = if ipv6 { "-6" } else { "-4" };
        let route = ip_json(
            &c.nodes[i].ns.name,
            &[family, "route", "show", &subnet, "proto", "124"],
        );
        assert_eq!(route[0]["dev"], device, "{route}");
        assert!(route[0]["gateway"].is_null(), "{route}");
    }
}

/// Whether `node` has a link named `name`.
fn has_link(node: &Node, name: &str) -> bool {
    ip_json(&node.ns.name, &["link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l["ifname"] == name)
}

/// HTTP from every pod to every other, over one family.
fn every_pair_gets_http(pods: &[Pod], ipv6: bool) {
    let addr = |p: &Pod| -> std::net::IpAddr {
        if ipv6 {
            p.ip6.unwrap().into()
        } else {
            p.ip.into()
        }
    };
    let servers: Vec<_> = pods
        .iter()
        .map(|p| http_server(&p.ns.name, addr(p), 0).unwrap())
        .collect();
    for (a, from) in pods.iter().enumerate() {
        for (b, to) in pods.iter().enumerate().filter(|(b, _)| *b != a) {
            let answered = wait_for(Duration::from_secs(5), || ping(&from.ns.name, addr(to)));
            assert!(answered.is_some(), "ping pod{a} -> pod{b} ({})", addr(to));
            let body = http_get(&from.ns.name, &servers[b].url()).unwrap();
            assert_eq!(body, HTTP_BODY, "HTTP pod{a} -> pod{b}");
        }
    }
}

#[test]
fn userspace_pods_on_three_nodes_reach_each_other_through_wireguard_go() {
    if skip_unless_root() {
        return;
    }
    let c = Cluster::with_nodes(wireguard(), 3);
    for (i, node) in c.nodes.iter().enumerate() {
        let log = node.agent_log();
        assert!(
            log.contains("wireguard: userspace implementation"),
            "the implementation is logged:\n{log}"
        );
        let link = ip_json(&node.ns.name, &["-d", "link", "show", "rcni-wg"]);
        assert_eq!(link[0]["linkinfo"]["info_kind"], "tun", "{link}");
        assert_eq!(link[0]["mtu"], 1440, "1500 minus 60 over an IPv4 underlay");
        assert!(node.wireguard_go_pid("rcni-wg").is_some());
        peers_match_the_leases(&c, i, "rcni-wg", false);
        // The private key: 0600, and nowhere the agent writes for others.
        let key_file = node.dir.join("state/wireguard/private.key");
        let mode = fs::metadata(&key_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let private = fs::read_to_string(&key_file).unwrap().trim().to_string();
        let metrics = node.health_get("/metrics").unwrap();
        let status = fs::read_to_string(node.dir.join("state/wireguard/status.json")).unwrap();
        for (what, text) in [("log", &log), ("metrics", &metrics), ("status", &status)] {
            assert!(!text.contains(&private), "the private key is in the {what}");
        }
        assert!(metrics.contains(&format!("public_key=\"{}\"", published_key(&c, i))));
    }
    let pods: Vec<Pod> = (0..3).map(|i| c.add_pod(i)).collect();
    every_pair_talks(&pods.iter().map(|p| (&p.ns, p.ip)).collect::<Vec<_>>());
    // The pods got the tunnel's MTU, and a full-size datagram crosses it.
    let link = ip_json(&pods[0].ns.name, &["link", "show", "eth0"]);
    assert_eq!(link[0]["mtu"], 1440);
    assert_eq!(
        udp_payload(&pods[0].ns, &pods[1].ns, pods[1].ip, 1412).ok(),
        Some(1412)
    );
    // Pod to pod keeps the pod's address; leaving traffic is masqueraded.
    let listener = listen_in(&pods[1].ns, pods[1].ip);
    assert_eq!(source_seen(&pods[0].ns, &listener, pods[1].ip), pods[0].ip);
    let listener = listen_in(&c.external, EXTERNAL_IP);
    assert_eq!(
        source_seen(&pods[0].ns, &listener, EXTERNAL_IP),
        c.nodes[0].ip
    );
    // Every peer has shaken hands; the status and /metrics say so.
    std::thread::sleep(Duration::from_millis(1500));
    let metrics = c.nodes[0].health_get("/metrics").unwrap();
    let handshakes: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("rcni_node_wireguard_peer_last_handshake_timestamp_seconds{"))
        .collect();
    assert_eq!(handshakes.len(), 2, "{metrics}");
    assert!(
        handshakes.iter().all(|l| !l.ends_with(" 0")),
        "{handshakes:?}"
    );
    for node in ["node2", "node3"] {
        assert!(metrics.contains(&format!("node=\"{node}\"")), "{metrics}");
    }
}

#[test]
fn dual_stack_pods_talk_over_both_families_through_a_device_per_family() {
    if skip_unless_root() {
        return;
    }
    let c = Cluster::with_config_and_nodes(dual_stack(), 3);
    for i in 0..3 {
        peers_match_the_leases(&c, i, "rcni-wg", false);
        peers_match_the_leases(&c, i, "rcni-wg-v6", true);
        let v6 = ip_json(&c.nodes[i].ns.name, &["link", "show", "rcni-wg-v6"]);
        assert_eq!(v6[0]["mtu"], 1420, "1500 minus 80 over an IPv6 underlay");
    }
    let pods: Vec<Pod> = (0..3).map(|i| c.add_pod(i)).collect();
    every_pair_gets_http(&pods, false);
    every_pair_gets_http(&pods, true);
}

#[test]
fn one_device_mode_carries_both_families_over_ipv6() {
    if skip_unless_root() {
        return;
    }
    let mut config = dual_stack();
    config["Backend"]["Mode"] = json!("ipv6");
    let c = Cluster::with_config_and_nodes(config, 2);
    let peers = c.nodes[0].wg_peers("rcni-wg");
    assert_eq!(peers.len(), 1);
    assert_eq!(peers[0].endpoint, format!("[{}]:51820", c.nodes[1].ip6()));
    let subnets: BTreeSet<String> = peers[0].allowed_ips.split(',').map(String::from).collect();
    let want: BTreeSet<String> = c.nodes[1].subnets().into_iter().collect();
    assert_eq!(subnets, want);
    assert!(!has_link(&c.nodes[0], "rcni-wg-v6"));
    let pods: Vec<Pod> = (0..2).map(|i| c.add_pod(i)).collect();
    every_pair_gets_http(&pods, false);
    every_pair_gets_http(&pods, true);
}

#[test]
fn the_kernel_implementation_without_the_module_stops_the_agent_naming_it() {
    if skip_unless_root() {
        return;
    }
    let mut c = Cluster::new(wireguard());
    let i = c.add_node();
    if kernel_has_wireguard(&c.nodes[i].ns) {
        eprintln!("skipping: this kernel has WireGuard (the missing-module case cannot happen)");
        return;
    }
    c.nodes[i]
        .extra
        .extend(["--wireguard-implementation".into(), "kernel".into()]);
    c.spawn_agent(i);
    let exited = wait_for(Duration::from_secs(20), || {
        c.nodes[i]
            .agent
            .0
            .as_mut()
            .is_some_and(|child| child.try_wait().ok().flatten().is_some())
    });
    let log = c.nodes[i].agent_log();
    assert!(exited.is_some(), "the agent stopped:\n{log}");
    assert!(log.contains("wireguard module"), "{log}");
    assert!(log.contains("--wireguard-implementation kernel"), "{log}");
    assert!(!has_link(&c.nodes[i], "rcni-wg"), "no device left behind");
}

#[test]
fn kernel_pods_on_three_nodes_reach_each_other() {
    if skip_unless_root() {
        return;
    }
    let mut c = Cluster::new(wireguard());
    for _ in 0..3 {
        let i = c.add_node();
        if !kernel_has_wireguard(&c.nodes[i].ns) {
            eprintln!("skipping: this kernel has no WireGuard (the wireguard module)");
            return;
        }
        c.nodes[i]
            .extra
            .extend(["--wireguard-implementation".into(), "kernel".into()]);
        c.start_agent(i);
    }
    c.wait_converged(Duration::from_secs(30))
        .expect("converged");
    for (i, node) in c.nodes.iter().enumerate() {
        assert!(node
            .agent_log()
            .contains("wireguard: kernel implementation"));
        let link = ip_json(&node.ns.name, &["-d", "link", "show", "rcni-wg"]);
        assert_eq!(link[0]["linkinfo"]["info_kind"], "wireguard", "{link}");
        peers_match_the_leases(&c, i, "rcni-wg", false);
    }
    let pods: Vec<Pod> = (0..3).map(|i| c.add_pod(i)).collect();
    every_pair_talks(&pods.iter().map(|p| (&p.ns, p.ip)).collect::<Vec<_>>());
}

#[test]
fn a_killed_wireguard_go_is_started_again_and_traffic_resumes() {
    if skip_unless_root() {
        return;
    }
    let c = Cluster::with_nodes(wireguard(), 2);
    let a = c.add_pod(0);
    let b = c.add_pod(1);
    assert!(ping(&a.ns.name, b.ip));
    let old = c.nodes[1].wireguard_go_pid("rcni-wg").unwrap();
    let pings = PingStream::start(&a.ns.name, b.ip, Duration::from_millis(2)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let killed = Instant::now();
    kill_pid(old);
    let restarted = wait_for(Duration::from_secs(10), || {
        c.nodes[1]
            .wireguard_go_pid("rcni-wg")
            .is_some_and(|p| p != old)
    })
    .expect("wireguard-go started again");
    let resumed = wait_for(Duration::from_secs(20), || ping(&a.ns.name, b.ip))
        .map(|_| killed.elapsed())
        .expect("traffic resumes");
    std::thread::sleep(Duration::from_millis(500));
    let count = pings.stop();
    eprintln!(
        "wireguard-go killed: started again after {restarted:.2?}, traffic back {resumed:.2?} \
         after the kill; pings every 2 ms: {} sent, {} lost",
        count.sent,
        count.sent - count.received
    );
    let log = c.nodes[1].agent_log();
    assert!(log.contains("starting wireguard-go again"), "{log}");
    let metrics = c.nodes[1].health_get("/metrics").unwrap();
    assert!(
        metrics.contains("rcni_node_wireguard_process_restarts_total{device=\"rcni-wg\"} 1"),
        "{metrics}"
    );
    // Peers and routes are back as before, and both ways carry traffic.
    peers_match_the_leases(&c, 1, "rcni-wg", false);
    assert!(ping(&b.ns.name, a.ip));
}

#[test]
fn a_leaving_node_is_removed_as_a_peer_and_a_route_in_the_same_round() {
    if skip_unless_root() {
        return;
    }
    let mut c = Cluster::new(wireguard());
    for _ in 0..3 {
        let i = c.add_node();
        c.nodes[i].extra.push("--release-on-exit".into());
        c.start_agent(i);
    }
    c.wait_converged(Duration::from_secs(30)).unwrap();
    let leaving = c.nodes[2].subnet().unwrap();
    let key = published_key(&c, 2);
    assert!(c.nodes[0]
        .wg_peers("rcni-wg")
        .iter()
        .any(|p| p.public_key == key));
    let start = Instant::now();
    c.nodes[2].agent.terminate();
    let gone = wait_for(Duration::from_secs(20), || {
        c.nodes[..2].iter().all(|n| {
            !n.has_route(&leaving) && !n.wg_peers("rcni-wg").iter().any(|p| p.public_key == key)
        })
    })
    .map(|_| start.elapsed())
    .expect("the leaving node's peer and route are removed");
    eprintln!("wireguard leave (release-on-exit), 3 nodes: peer and route gone after {gone:.2?}");
    for n in &c.nodes[..2] {
        let log = n.agent_log();
        let removing: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(&format!("remote node {leaving} gone")))
            .collect();
        assert_eq!(removing.len(), 1, "one removal round: {removing:?}");
    }
    // The stopped node's own tunnel and wireguard-go stay (a graceful stop keeps the data
    // path); the others keep talking.
    assert!(c.nodes[2].wireguard_go_pid("rcni-wg").is_some());
    let a = c.add_pod(0);
    let b = c.add_pod(1);
    assert!(ping(&a.ns.name, b.ip));
}

/// `rcni doctor --json` on node `i` (its conf and cache dirs, its own `/run/wireguard`): the
/// report, and whether it exited 0.
fn doctor(c: &Cluster, i: usize) -> (Value, bool, String) {
    let node = &c.nodes[i];
    let run = |json: bool| {
        let mut cmd = std::process::Command::new("ip");
        cmd.args(["netns", "exec", &node.ns.name])
            .args(node.wireguard_mounts())
            .arg(cni_testkit::bin_path("rcni").unwrap())
            .arg("doctor")
            .arg("--conf-dir")
            .arg(node.conf_dir())
            .arg("--cache-dir")
            .arg(node.dir.join("cache"))
            .arg("--bin-dir")
            .arg(&c.plugins)
            .arg("--pod-state-dir")
            .arg(node.dir.join("pods"));
        if json {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    };
    let out = run(true);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor JSON: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    let text = String::from_utf8_lossy(&run(false).stdout).into_owned();
    (report, out.status.success(), text)
}

#[test]
fn doctor_names_the_peers_without_a_recent_handshake() {
    if skip_unless_root() {
        return;
    }
    let c = Cluster::with_nodes(wireguard(), 2);
    let pods: Vec<Pod> = (0..2).map(|i| c.add_pod(i)).collect();
    assert!(ping(&pods[0].ns.name, pods[1].ip));
    // A node whose lease is there but whose tunnel never answers: no handshake, ever.
    let absent = json!({
        "PublicIP": "198.18.0.99",
        "BackendType": "wireguard",
        "BackendData": {"PublicKey": "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=", "Port": 51820},
        "rcniNodeName": "node9"
    });
    c.etcdctl(&[
        "put",
        &format!("{PREFIX}/subnets/198.19.99.0-24"),
        &absent.to_string(),
    ]);
    let known = wait_for(Duration::from_secs(10), || {
        c.nodes[0].wg_peers("rcni-wg").len() == 2
    });
    assert!(known.is_some(), "node 1 has node9 as a peer");
    // The agent's status (which names the node behind each key) follows at the next resync.
    std::thread::sleep(Duration::from_millis(1500));
    let (report, _, text) = doctor(&c, 0);
    let device = &report["wireguard"]["devices"][0];
    assert_eq!(device["name"], "rcni-wg");
    assert_eq!(device["implementation"], "userspace");
    let peers = device["peers"].as_array().unwrap();
    assert_eq!(peers.len(), 2, "{report}");
    let by_node = |n: &str| {
        peers
            .iter()
            .find(|p| p["node"] == n)
            .unwrap_or_else(|| panic!("{report}"))
            .clone()
    };
    assert_eq!(by_node("node2")["recent"], true, "{report}");
    assert_eq!(by_node("node9")["recent"], false, "{report}");
    assert!(by_node("node9")["lastHandshakeSecondsAgo"].is_null());
    eprintln!("doctor on node 1:\n{text}");
    assert!(
        text.contains(
            "wireguard rcni-wg (userspace): 2 peer(s), 1 without a handshake in the last 180 s"
        ),
        "{text}"
    );
    assert!(
        text.contains("node9 (HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=): no handshake yet"),
        "{text}"
    );
    assert!(
        !text.contains("node2 ("),
        "only the stale peer is named: {text}"
    );
    // The node goes: every peer left is recent.
    c.etcdctl(&["del", &format!("{PREFIX}/subnets/198.19.99.0-24")]);
    let gone = wait_for(Duration::from_secs(10), || {
        c.nodes[0].wg_peers("rcni-wg").len() == 1
    });
    assert!(gone.is_some());
    let (_, _, text) = doctor(&c, 0);
    assert!(
        text.contains("1 peer(s), every one with a handshake in the last 180 s"),
        "{text}"
    );
}
