//! Root-only: what the `wireguard` backend protects, on simulated nodes running the userspace
//! implementation (see `tests/wireguard.rs`): the underlay carries only WireGuard's UDP and
//! never a pod's bytes; a node replaced by an impostor with another key can neither inject
//! traffic nor read any; a rotated key reaches every peer with connectivity lost for no more
//! than a handshake; a preshared key from a file is used, and a node with another one is shut
//! out. Captures are `tcpdump`'s, peers are read with `wg show`.

mod harness;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use cni_linux::wireguard::uapi::UserspaceDevice;
use cni_linux::NetNs;
use cni_testkit::{bin_path, http_get, http_server, ping, Netns, PingStream, HTTP_BODY};
use harness::wireguard::{contains_bytes, ip_packets, Capture};
use harness::*;
use serde_json::{json, Value};

fn wireguard() -> Value {
    json!({"Type": "wireguard"})
}

/// A marker no packet carries by chance.
fn marker(what: &str) -> String {
    format!(
        "RCNI-{what}-MARKER-{}-{}",
        std::process::id(),
        rand_suffix()
    )
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// A UDP socket bound in namespace `ns` on `ip` (any port), reading with a timeout.
fn udp_listener(ns: &Netns, ip: IpAddr) -> UdpSocket {
    let sock = NetNs::open(&ns.path)
        .unwrap()
        .run(move || UdpSocket::bind(SocketAddr::new(ip, 0)))
        .unwrap()
        .unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    sock
}

/// Sends `payload` in `count` datagrams from namespace `from` to `to`.
fn send_udp(from: &Netns, to: SocketAddr, payload: &[u8], count: usize) {
    let payload = payload.to_vec();
    NetNs::open(&from.path)
        .unwrap()
        .run(move || {
            let any: SocketAddr = match to {
                SocketAddr::V4(_) => "0.0.0.0:0".parse().unwrap(),
                SocketAddr::V6(_) => "[::]:0".parse().unwrap(),
            };
            let tx = UdpSocket::bind(any).unwrap();
            for _ in 0..count {
                // An unreachable destination is the impostor test's expected outcome.
                let _ = tx.send_to(&payload, to);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
        .unwrap();
}

/// Every datagram `sock` has received, as text.
fn received(sock: &UdpSocket) -> Vec<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 2048];
    while let Ok((n, _)) = sock.recv_from(&mut buf) {
        out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    out
}

#[test]
fn the_underlay_carries_only_wireguards_udp_and_never_a_pods_bytes() {
    if skip_unless_root() {
        return;
    }
    let c = Cluster::with_config_and_nodes(
        json!({
            "Network": CLUSTER_NET, "SubnetLen": 24,
            "EnableIPv6": true, "IPv6Network": CLUSTER_NET6, "IPv6SubnetLen": 64,
            "Backend": wireguard()
        }),
        2,
    );
    let a = c.add_pod(0);
    let b = c.add_pod(1);
    assert!(ping(&a.ns.name, b.ip));
    // The pods' IPv6 addresses are usable once duplicate address detection is done.
    let v6 = wait_for(Duration::from_secs(10), || ping(&a.ns.name, b.ip6.unwrap()));
    assert!(v6.is_some(), "ping6 pod A -> pod B");
    let underlay = Capture::start(&c.sb.host().name, "ul0", c.sb.dir().join("underlay.pcap"));
    let inside = Capture::start(
        &c.nodes[0].ns.name,
        "rcni-wg",
        c.sb.dir().join("inside.pcap"),
    );
    let mark = marker("PLAINTEXT");
    // UDP over both families, and TCP (the marker in an HTTP request).
    let rx4 = udp_listener(&b.ns, b.ip.into());
    let rx6 = udp_listener(&b.ns, b.ip6.unwrap().into());
    send_udp(&a.ns, rx4.local_addr().unwrap(), mark.as_bytes(), 5);
    send_udp(&a.ns, rx6.local_addr().unwrap(), mark.as_bytes(), 5);
    let server = http_server(&b.ns.name, b.ip, 0).unwrap();
    let body = http_get(&a.ns.name, &format!("{}{mark}", server.url())).unwrap();
    assert_eq!(body, HTTP_BODY);
    let got4 = received(&rx4);
    let got6 = received(&rx6);
    assert!(
        got4.contains(&mark) && got6.contains(&mark),
        "the marker arrived: {got4:?} {got6:?}"
    );
    let plain = inside.stop();
    let wire = underlay.stop();
    assert!(
        contains_bytes(&plain, mark.as_bytes()),
        "the capture inside the tunnel sees the marker (the captures work)"
    );
    assert!(
        !contains_bytes(&wire, mark.as_bytes()),
        "the marker crossed the underlay in clear"
    );
    let nodes: Vec<IpAddr> = c
        .nodes
        .iter()
        .flat_map(|n| [IpAddr::V4(n.ip), IpAddr::V6(n.ip6())])
        .collect();
    let between_nodes: Vec<_> = ip_packets(&wire)
        .into_iter()
        .filter(|p| nodes.contains(&p.src) && nodes.contains(&p.dst))
        .collect();
    let wireguard_port = |p: &harness::wireguard::CapturedPacket| {
        p.protocol == 17
            && [p.src_port, p.dst_port]
                .iter()
                .any(|port| matches!(port, Some(51820 | 51821)))
    };
    let other: Vec<_> = between_nodes
        .iter()
        .filter(|p| !wireguard_port(p))
        .collect();
    eprintln!(
        "underlay capture: {} packets between the nodes, all UDP to or from the WireGuard \
         ports: {}",
        between_nodes.len(),
        other.is_empty()
    );
    assert!(
        between_nodes.len() >= 20,
        "the tunnels' packets were captured"
    );
    assert!(
        other.is_empty(),
        "packets between nodes that are not WireGuard's: {:?}",
        other
            .iter()
            .map(|p| (p.src, p.dst, p.protocol, p.src_port, p.dst_port))
            .collect::<Vec<_>>()
    );
    assert!(
        between_nodes.iter().any(|p| p.src.is_ipv6()),
        "IPv6 underlay used too"
    );
}

/// `wg <args>` in the host's mount namespace (an impostor's own device), inside `ns`.
fn wg_in(ns: &str, args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "wg"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "wg {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The lease of node `i`: its JSON value.
fn lease_of(c: &Cluster, i: usize) -> Value {
    let out = c.etcdctl(&["get", "--prefix", &format!("{PREFIX}/subnets/")]);
    let lines: Vec<&str> = out.lines().collect();
    lines
        .chunks(2)
        .map(|pair| serde_json::from_str::<Value>(pair[1]).unwrap())
        .find(|v| v["rcniNodeName"] == format!("node{}", c.nodes[i].index))
        .unwrap()
}

fn key_of(c: &Cluster, i: usize) -> String {
    lease_of(c, i)["BackendData"]["PublicKey"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Writes a new WireGuard private key for an impostor into `path` (`wg genkey`).
fn genkey(path: &Path) {
    let out = Command::new("wg").arg("genkey").output().unwrap();
    std::fs::write(path, &out.stdout).unwrap();
}

#[test]
fn an_impostor_with_another_key_can_neither_inject_traffic_nor_read_any() {
    if skip_unless_root() {
        return;
    }
    let mut c = Cluster::with_nodes(wireguard(), 3);
    let a = c.add_pod(0);
    let victim = c.add_pod(2);
    assert!(ping(&a.ns.name, victim.ip));
    let key_a = key_of(&c, 0);
    let subnet_a = c.nodes[0].subnet().unwrap();
    let subnet_c = c.nodes[2].subnet().unwrap();
    let handshake_before = c.nodes[0]
        .wg_peers("rcni-wg")
        .into_iter()
        .find(|p| p.allowed_ips == subnet_c)
        .unwrap()
        .latest_handshake;
    // Node 3 is taken over: its agent and tunnel gone, an impostor with its own key in its
    // place (its underlay address, its pod subnet), claiming node 3's subnet towards node 1.
    c.nodes[2].agent.kill();
    c.nodes[2].kill_wireguard_go();
    let ns = c.nodes[2].ns.name.clone();
    sh(&["ip", "-n", &ns, "link", "del", "rcni-wg"]);
    let key_file = c.nodes[2].dir.join("impostor.key");
    genkey(&key_file);
    let mut impostor = Guard(Some(
        Command::new("ip")
            .args(["netns", "exec", &ns, "wireguard-go", "-f", "wgimpostor"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    // Serving (listening), not only bound: `wg` would take a refused socket for no device.
    let up = wait_for(Duration::from_secs(5), || {
        UserspaceDevice::new("/run/wireguard/wgimpostor.sock")
            .server_pid()
            .is_ok()
    });
    assert!(up.is_some(), "the impostor's wireguard-go runs");
    let gateway_c = subnet_c.replace(".0/24", ".0/32");
    wg_in(
        &ns,
        &[
            "set",
            "wgimpostor",
            "private-key",
            key_file.to_str().unwrap(),
            "listen-port",
            "51820",
            "peer",
            &key_a,
            "endpoint",
            &format!("{}:51820", c.nodes[0].ip),
            "allowed-ips",
            &subnet_a,
        ],
    );
    sh(&[
        "ip",
        "-n",
        &ns,
        "addr",
        "add",
        &gateway_c,
        "dev",
        "wgimpostor",
    ]);
    sh(&["ip", "-n", &ns, "link", "set", "wgimpostor", "up"]);
    sh(&[
        "ip",
        "-n",
        &ns,
        "route",
        "add",
        &subnet_a,
        "dev",
        "wgimpostor",
    ]);
    // It sends to pod A from node 3's subnet, and pod A sends to node 3's pod.
    let mark = marker("IMPOSTOR");
    let rx = udp_listener(&a.ns, a.ip.into());
    let impostor_ns = Netns {
        name: ns.clone(),
        path: c.nodes[2].ns.path.clone(),
    };
    send_udp(&impostor_ns, rx.local_addr().unwrap(), mark.as_bytes(), 20);
    let injected = received(&rx);
    let reply = ping(&a.ns.name, victim.ip);
    std::thread::sleep(Duration::from_secs(1));
    let impostor_view = wg_in(&ns, &["show", "wgimpostor", "dump"]);
    let peer: Vec<&str> = impostor_view.lines().nth(1).unwrap().split('\t').collect();
    let (handshake, rx_bytes) = (
        peer[4].parse::<u64>().unwrap(),
        peer[5].parse::<u64>().unwrap(),
    );
    let node_a_view = c.nodes[0].wg_peers("rcni-wg");
    let c_on_a = node_a_view
        .iter()
        .find(|p| p.allowed_ips == subnet_c)
        .unwrap();
    eprintln!(
        "impostor on node 3's address: {} of 20 datagrams reached pod A; pod A's ping to \
         node 3's pod answered: {reply}; impostor's handshakes with node 1: {handshake}, bytes \
         it decrypted: {rx_bytes}; node 1's peer for node 3 still has the real key: {}",
        injected.len(),
        c_on_a.public_key == key_of(&c, 2)
    );
    assert!(injected.is_empty(), "the impostor injected {injected:?}");
    assert!(!reply, "nobody answers in node 3's place");
    assert_eq!(
        handshake, 0,
        "node 1 never completed a handshake with the impostor"
    );
    assert_eq!(rx_bytes, 0, "the impostor decrypted nothing");
    assert_eq!(c_on_a.public_key, key_of(&c, 2));
    assert_eq!(
        c_on_a.latest_handshake, handshake_before,
        "no handshake with another key"
    );
    assert!(node_a_view.iter().all(|p| !p.public_key.is_empty()));
    // SIGTERM: wireguard-go removes its socket from the host's /run/wireguard.
    impostor.terminate();
}

#[test]
fn a_rotated_key_reaches_every_peer_losing_no_more_than_a_handshake() {
    if skip_unless_root() {
        return;
    }
    let mut c = Cluster::with_nodes(wireguard(), 3);
    let a = c.add_pod(0);
    let b = c.add_pod(1);
    let target = c.add_pod(2);
    assert!(ping(&a.ns.name, target.ip) && ping(&b.ns.name, target.ip));
    let old = key_of(&c, 2);
    let pings = PingStream::start(&a.ns.name, target.ip, Duration::from_millis(2)).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let out = Command::new(bin_path("rcni-node").unwrap())
        .arg("rotate-wireguard-key")
        .arg("--state-dir")
        .arg(c.nodes[2].dir.join("state"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let new = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_ne!(new, old);
    let everywhere = wait_for(Duration::from_secs(10), || {
        key_of(&c, 2) == new
            && c.nodes[..2].iter().all(|n| {
                let peers = n.wg_peers("rcni-wg");
                peers.iter().any(|p| p.public_key == new)
                    && !peers.iter().any(|p| p.public_key == old)
            })
    })
    .expect("the new key is published and every peer has it");
    std::thread::sleep(Duration::from_millis(1000));
    let count = pings.stop();
    let lost = count.sent - count.received;
    eprintln!(
        "key rotation: new key on every peer {everywhere:.2?} after the command; pings every \
         2 ms: {} sent, {lost} lost (about {} ms without an answer)",
        count.sent,
        lost * 2
    );
    assert!(
        ping(&b.ns.name, target.ip),
        "node 2 reaches node 3 with its new key"
    );
    let wg_key = c.nodes[2].wg(&["show", "rcni-wg", "public-key"]);
    assert_eq!(wg_key.trim(), new, "the device has the new key");
    assert!(lost * 2 < 1000, "lost {lost} pings ({count:?})");
    assert!(c.nodes[2]
        .agent_log()
        .contains(&format!("new public key {new}")));
    // A restart keeps the rotated key.
    c.nodes[2].agent.terminate();
    c.restart_agent(2);
    assert_eq!(key_of(&c, 2), new);
    assert!(ping(&a.ns.name, target.ip));
}

#[test]
fn a_preshared_key_from_a_file_is_used_and_a_node_with_another_is_shut_out() {
    if skip_unless_root() {
        return;
    }
    let mut c = Cluster::new(wireguard());
    let psk_of = |c: &Cluster, i: usize, name: &str| {
        let path = c.nodes[i].dir.join(name);
        let out = Command::new("wg").arg("genpsk").output().unwrap();
        std::fs::write(&path, &out.stdout).unwrap();
        path
    };
    for _ in 0..3 {
        c.add_node();
    }
    let shared = psk_of(&c, 0, "psk");
    let other = psk_of(&c, 2, "other-psk");
    for (i, file) in [(0, &shared), (1, &shared), (2, &other)] {
        c.nodes[i].extra.extend([
            "--wireguard-psk-file".into(),
            file.to_string_lossy().into_owned(),
        ]);
        c.start_agent(i);
    }
    c.wait_converged(Duration::from_secs(30)).unwrap();
    let pods: Vec<Pod> = (0..3).map(|i| c.add_pod(i)).collect();
    assert!(ping(&pods[0].ns.name, pods[1].ip), "same preshared key");
    let psk = std::fs::read_to_string(&shared).unwrap().trim().to_string();
    let peers = c.nodes[0].wg_peers("rcni-wg");
    assert!(peers.iter().all(|p| p.preshared_key == psk), "{peers:?}");
    assert!(
        !ping(&pods[0].ns.name, pods[2].ip),
        "another preshared key: no handshake"
    );
    assert!(
        !c.nodes[0].agent_log().contains(&psk),
        "the preshared key is never logged"
    );
}
