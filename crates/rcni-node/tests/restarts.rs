//! Root-only: restarting a node's agent never disturbs the paths to live nodes. Node A's kernel
//! is watched with netlink monitors (`ip monitor route neigh`, `bridge monitor fdb`) while its
//! agent is restarted 20 times (SIGTERM and SIGKILL in turn, each time until the new run is
//! healthy and has resynced once), and a pod on node A pings a pod on node B every 2 ms across all of it: no route,
//! neighbour or FDB entry of the agent's may be deleted and no echo may go unanswered. With
//! WireGuard the restarted agent also keeps the wireguard-go its first run started and no peer
//! shakes hands again. A remote lease that changes (a new VTEP MAC) moves its path without
//! deleting its route or neighbour entry.

mod harness;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cni_testkit::{ping, PingStream};
use harness::*;
use serde_json::{json, Value};

const RESTARTS: usize = 20;

/// A netlink monitor of a namespace, its output in a file; killed by PID when dropped.
struct Monitor {
    out: PathBuf,
    process: Guard,
}

impl Monitor {
    fn start(dir: &Path, name: &str, command: &[&str]) -> Monitor {
        let out = dir.join(format!("{name}.monitor"));
        let child = Command::new(command[0])
            .args(&command[1..])
            .stdout(fs::File::create(&out).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {command:?}: {e}"));
        Monitor {
            out,
            process: Guard(Some(child)),
        }
    }

    /// Stops the monitor; its `Deleted` lines.
    fn deletions(mut self) -> Vec<String> {
        self.process.kill();
        fs::read_to_string(&self.out)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("Deleted"))
            .map(str::to_string)
            .collect()
    }
}

/// Deletions that can only be the agent's: routes it tags (`proto 124`), or anything on its
/// VXLAN or WireGuard devices.
fn the_agents(line: &str) -> bool {
    line.contains("proto 124")
        || line.contains("dev rcni.")
        || line.contains("dev rcni6.")
        || line.contains("dev rcni-wg")
}

/// For WireGuard: node A's wireguard-go and the last handshake of each of its peers.
fn tunnel_state(c: &Cluster) -> Option<(u32, Vec<(String, u64)>)> {
    let node = &c.nodes[0];
    let pid = node.wireguard_go_pid("rcni-wg")?;
    let mut peers: Vec<(String, u64)> = node
        .wg_peers("rcni-wg")
        .into_iter()
        .map(|p| (p.public_key, p.latest_handshake))
        .collect();
    // wireguard-go lists its peers in no particular order.
    peers.sort();
    Some((pid, peers))
}

/// The handles of node `ns`'s masquerade table, chain and rules (new ones if replaced).
fn masquerade_handles(ns: &str) -> Vec<u64> {
    let out = sh(&[
        "ip",
        "netns",
        "exec",
        ns,
        "nft",
        "-j",
        "list",
        "table",
        "ip",
        "rcni-node",
    ]);
    let listed: Value = serde_json::from_str(&out).unwrap();
    let handles: Vec<u64> = listed["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o.as_object()?.values().next()?["handle"].as_u64())
        .collect();
    assert!(handles.len() >= 5, "table, chain and 3 rules: {out}");
    handles
}

fn restarts_remove_nothing_and_lose_no_ping(backend: Value) {
    let mut c = Cluster::with_nodes(backend.clone(), 3);
    let a = c.add_pod(0);
    let b = c.add_pod(1);
    assert!(ping(&a.ns.name, b.ip), "pod A -> pod B before the restarts");
    let node_a = c.nodes[0].ns.name.clone();
    let dir = c.nodes[0].dir.clone();
    let masquerade = masquerade_handles(&node_a);
    let routes = Monitor::start(
        &dir,
        "route-neigh",
        &["ip", "-n", &node_a, "monitor", "route", "neigh"],
    );
    let fdb = Monitor::start(&dir, "fdb", &["bridge", "-n", &node_a, "monitor", "fdb"]);
    // Let the monitors subscribe before anything happens.
    std::thread::sleep(Duration::from_millis(300));
    let pings = PingStream::start(&a.ns.name, b.ip, Duration::from_millis(2)).unwrap();
    let tunnels = tunnel_state(&c);

    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for round in 0..RESTARTS {
        if round % 2 == 0 {
            c.nodes[0].agent.terminate();
        } else {
            c.nodes[0].agent.kill();
        }
        let t = Instant::now();
        c.restart_agent(0);
        slowest = slowest.max(t.elapsed());
        // Each run lives past one periodic resync (the harness's agents resync every second).
        std::thread::sleep(Duration::from_millis(1200));
    }
    // One resync period of the last run, with the pings still going.
    std::thread::sleep(Duration::from_millis(1500));
    let count = pings.stop();
    let took = started.elapsed();

    // Proof that the monitors see deletions: a route and a neighbour of the test's own (the
    // route outside CLUSTER_NET, where a node may hold any /24).
    sh(&[
        "ip",
        "-n",
        &node_a,
        "route",
        "add",
        "198.18.250.0/24",
        "via",
        &UNDERLAY_GW.to_string(),
    ]);
    sh(&["ip", "-n", &node_a, "route", "del", "198.18.250.0/24"]);
    sh(&[
        "ip",
        "-n",
        &node_a,
        "neigh",
        "add",
        "198.18.0.99",
        "lladdr",
        "02:00:c6:12:00:99",
        "dev",
        "eth0",
    ]);
    sh(&[
        "ip",
        "-n",
        &node_a,
        "neigh",
        "del",
        "198.18.0.99",
        "dev",
        "eth0",
    ]);
    let vxlan = backend["Type"] == "vxlan";
    if vxlan {
        for op in ["add", "del"] {
            sh(&[
                "bridge",
                "-n",
                &node_a,
                "fdb",
                op,
                "02:00:c6:12:00:99",
                "dev",
                "eth0",
            ]);
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut deleted = routes.deletions();
    deleted.extend(fdb.deletions());
    assert!(
        deleted.iter().any(|l| l.contains("198.18.250.0/24")),
        "the route monitor saw no deletion: {deleted:?}"
    );
    assert!(
        deleted.iter().any(|l| l.contains("198.18.0.99")),
        "the neighbour monitor saw no deletion: {deleted:?}"
    );
    if vxlan {
        assert!(
            deleted
                .iter()
                .filter(|l| l.contains("02:00:c6:12:00:99"))
                .count()
                >= 1,
            "the FDB monitor saw no deletion: {deleted:?}"
        );
    }
    let agents: Vec<&String> = deleted.iter().filter(|l| the_agents(l)).collect();
    let stale_removed = c.nodes[0]
        .agent_log()
        .lines()
        .filter(|l| l.contains("stale removed"))
        .count();
    eprintln!(
        "restarts ({}): {RESTARTS} restarts of node A's agent in {took:.1?} (slowest to healthy \
         {slowest:.2?}); deletions of the agent's routes/neighbours/FDB entries: {}; other \
         deletions: {}; pings pod A -> pod B every 2 ms: {} sent, {} lost (first lost: {:?}); \
         resync log lines with removals: {stale_removed}",
        backend["Type"],
        agents.len(),
        deleted.len() - agents.len(),
        count.sent,
        count.sent - count.received,
        count.lost,
    );
    assert!(agents.is_empty(), "live paths deleted: {agents:#?}");
    assert_eq!(
        tunnel_state(&c),
        tunnels,
        "the same wireguard-go, no new handshake"
    );
    assert_eq!(
        masquerade_handles(&node_a),
        masquerade,
        "the masquerade rules were replaced"
    );
    assert_eq!(count.sent, count.received, "lost pings: {count:?}");
    assert!(
        count.sent > 1000,
        "the pings ran across the restarts: {count:?}"
    );
    // The paths are all still there and carry traffic.
    c.wait_converged(Duration::from_secs(10))
        .expect("converged after the restarts");
    assert!(ping(&b.ns.name, a.ip));
}

#[test]
fn host_gw_agent_restarts_delete_no_live_route_and_lose_no_ping() {
    if skip_unless_root() {
        return;
    }
    restarts_remove_nothing_and_lose_no_ping(json!({"Type": "host-gw"}));
}

#[test]
fn vxlan_agent_restarts_delete_no_live_route_neighbour_or_fdb_entry_and_lose_no_ping() {
    if skip_unless_root() {
        return;
    }
    restarts_remove_nothing_and_lose_no_ping(json!({"Type": "vxlan", "VNI": 1}));
}

#[test]
fn wireguard_agent_restarts_delete_no_live_route_or_peer_keep_wireguard_go_and_lose_no_ping() {
    if skip_unless_root() {
        return;
    }
    restarts_remove_nothing_and_lose_no_ping(json!({"Type": "wireguard"}));
}

#[test]
fn a_changed_vtep_mac_moves_the_path_without_deleting_the_route_or_the_neighbour() {
    if skip_unless_root() {
        return;
    }
    let c = Cluster::with_nodes(json!({"Type": "vxlan", "VNI": 1}), 2);
    let node_a = c.nodes[0].ns.name.clone();
    let subnet_b = c.nodes[1].subnet().unwrap();
    let gateway_b = subnet_b.split('/').next().unwrap().to_string();
    let key = format!("{PREFIX}/subnets/{}", subnet_b.replace('/', "-"));
    let mut lease: Value =
        serde_json::from_str(c.etcdctl(&["get", &key, "--print-value-only"]).trim()).unwrap();
    let old_mac = lease["BackendData"]["VtepMAC"]
        .as_str()
        .unwrap()
        .to_string();
    let new_mac = "02:00:c6:13:00:42";
    let monitors = [
        Monitor::start(
            &c.nodes[0].dir,
            "change-route-neigh",
            &["ip", "-n", &node_a, "monitor", "route", "neigh"],
        ),
        Monitor::start(
            &c.nodes[0].dir,
            "change-fdb",
            &["bridge", "-n", &node_a, "monitor", "fdb"],
        ),
    ];
    std::thread::sleep(Duration::from_millis(300));
    lease["BackendData"]["VtepMAC"] = json!(new_mac);
    c.etcdctl(&["put", "--ignore-lease", &key, &lease.to_string()]);
    let fdb = || sh(&["bridge", "-n", &node_a, "fdb", "show", "dev", "rcni.1"]);
    let moved = wait_for(Duration::from_secs(10), || {
        let neigh = ip_json(&node_a, &["neigh", "show", &gateway_b, "dev", "rcni.1"]);
        neigh[0]["lladdr"] == new_mac && fdb().contains(new_mac) && !fdb().contains(&old_mac)
    });
    assert!(moved.is_some(), "{}\n{}", fdb(), c.nodes[0].agent_log());
    std::thread::sleep(Duration::from_millis(300));
    let deleted: Vec<String> = monitors.into_iter().flat_map(Monitor::deletions).collect();
    eprintln!("changed VTEP MAC: deletions on node A: {deleted:?}");
    // Both monitors report the FDB entry (`ip monitor neigh` shows bridge neighbours too).
    assert!(
        !deleted.is_empty() && deleted.iter().all(|l| l.contains(&old_mac)),
        "only the old MAC's FDB entry goes: {deleted:?}"
    );
    assert!(
        !deleted
            .iter()
            .any(|l| l.contains(&format!("{gateway_b} ")) || l.contains(&subnet_b)),
        "{deleted:?}"
    );
    assert!(c.nodes[0].has_route(&subnet_b));
}
