//! Root-only measurements (ignored by default; `scripts/node-convergence` runs them): join and
//! leave convergence with N simulated nodes (host-gw, VXLAN, WireGuard), the time one node
//! takes to program 200 remote nodes whose leases are written straight into etcd, and the
//! time a joining WireGuard node takes to program 500 and 5,000 remote nodes' peers and
//! routes.

mod harness;

use std::time::{Duration, Instant};

use etcd_client::{Client, PutOptions};
use harness::*;
use serde_json::json;

fn measure_join_and_leave(backend: serde_json::Value, n: usize) {
    let mut c = Cluster::new(backend.clone());
    for _ in 0..n {
        let i = c.add_node();
        c.nodes[i].extra.push("--release-on-exit".into());
        c.start_agent(i);
    }
    c.wait_converged(Duration::from_secs(60))
        .expect("converged");
    let i = c.add_node();
    c.nodes[i].extra.push("--release-on-exit".into());
    let start = Instant::now();
    c.spawn_agent(i);
    let learned = wait_for(Duration::from_secs(60), || {
        c.nodes[i]
            .subnet()
            .is_some_and(|s| c.nodes[..n].iter().all(|o| o.has_route(&s)))
    })
    .map(|_| start.elapsed())
    .expect("join converged");
    let subnet = c.nodes[i].subnet().unwrap();
    let start = Instant::now();
    c.nodes[i].agent.terminate();
    let stopped = start.elapsed();
    let forgotten = wait_for(Duration::from_secs(60), || {
        c.nodes[..n].iter().all(|o| !o.has_route(&subnet))
    })
    .map(|_| start.elapsed())
    .expect("leave converged");
    println!(
        "RESULT backend={} nodes={} join_ms={:.1} leave_ms={:.1} (agent exit {:.1} ms)",
        backend["Type"].as_str().unwrap(),
        n + 1,
        learned.as_secs_f64() * 1e3,
        forgotten.as_secs_f64() * 1e3,
        stopped.as_secs_f64() * 1e3
    );
}

#[test]
#[ignore = "measurement: scripts/node-convergence"]
fn convergence_with_3_and_10_nodes() {
    if skip_unless_root() {
        return;
    }
    let sizes: Vec<usize> = std::env::var("RCNI_NODE_SIZES")
        .unwrap_or_else(|_| "3,10".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    println!(
        "RESULT agent binary: {}",
        cni_testkit::bin_path("rcni-node").unwrap().display()
    );
    for backend in [
        json!({"Type": "host-gw"}),
        json!({"Type": "vxlan"}),
        json!({"Type": "wireguard"}),
    ] {
        for &n in &sizes {
            // n nodes in total: n - 1 running, one joins and leaves.
            measure_join_and_leave(backend.clone(), n.max(2) - 1);
        }
    }
}

#[test]
#[ignore = "measurement: scripts/node-convergence"]
fn programming_200_remote_nodes() {
    if skip_unless_root() {
        return;
    }
    let remotes: u32 = std::env::var("RCNI_NODE_REMOTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
        .min(240);
    let mut c = Cluster::new(json!({"Type": "vxlan"}));
    let i = c.add_node();
    c.start_agent(i);
    let start = Instant::now();
    // The client runs on a thread inside the underlay namespace, never in the root one.
    let underlay = cni_linux::NetNs::open(&c.sb.host().path).unwrap();
    let own = c.nodes[i].subnet().unwrap();
    underlay.run(move || write_leases(remotes, &own)).unwrap();
    let written = start.elapsed();
    let node = &c.nodes[i];
    let done = wait_for(Duration::from_secs(120), || {
        ip_json(&node.ns.name, &["route", "show", "proto", "124"])
            .as_array()
            .is_some_and(|a| a.len() == remotes as usize)
    })
    .map(|_| start.elapsed())
    .unwrap_or_else(|| {
        let n = ip_json(&node.ns.name, &["route", "show", "proto", "124"]);
        let log = node.agent_log();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        panic!(
            "{} of {remotes} routes; agent log (last lines, newest first):\n{}",
            n.as_array().map_or(0, Vec::len),
            tail.join("\n")
        )
    });
    let fdb = sh(&[
        "bridge",
        "-n",
        &node.ns.name,
        "fdb",
        "show",
        "dev",
        "rcni.1",
    ]);
    assert_eq!(
        fdb.lines().filter(|l| l.contains(" dst ")).count(),
        remotes as usize
    );
    println!(
        "RESULT remotes={remotes} written_ms={:.1} programmed_ms={:.1}",
        written.as_secs_f64() * 1e3,
        done.as_secs_f64() * 1e3
    );

    // A fresh node joining that cluster: from its agent's start to every path programmed.
    let j = c.add_node();
    let start = Instant::now();
    c.spawn_agent(j);
    let fresh = &c.nodes[j];
    let want = remotes as usize + 1;
    wait_for(Duration::from_secs(120), || {
        ip_json(&fresh.ns.name, &["route", "show", "proto", "124"])
            .as_array()
            .is_some_and(|a| a.len() == want)
    })
    .expect("the joining node programs every remote");
    println!(
        "RESULT joining node: {want} remotes programmed {:.1} ms after the agent started",
        start.elapsed().as_secs_f64() * 1e3
    );
}

/// Writes `remotes` fake VXLAN leases straight into etcd, bound to one 10-minute lease.
fn write_leases(remotes: u32, own: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = Client::connect([format!("http://{UNDERLAY_GW}:2379")], None)
            .await
            .unwrap();
        let lease = client.lease_grant(600, None).await.unwrap().id();
        // Subnets 198.19.x.0/24 other than the node's own, VTEPs 198.18.(1 + k/250).(k%250 + 1):
        // routes and FDB entries need no reachable peer.
        let subnets = (1..=255u32)
            .map(|x| format!("198.19.{x}.0/24"))
            .filter(|s| s != own)
            .take(remotes as usize);
        for (k, subnet) in (0u32..).zip(subnets) {
            let key = format!("{PREFIX}/subnets/{}", subnet.replace('/', "-"));
            let value = json!({
                "PublicIP": format!("198.18.{}.{}", 1 + k / 250, k % 250 + 1),
                "BackendType": "vxlan",
                "BackendData": {"VNI": 1, "VtepMAC": format!("0e:00:00:00:{:02x}:{:02x}", k / 256, k % 256)}
            });
            client
                .put(key, value.to_string(), Some(PutOptions::new().with_lease(lease)))
                .await
                .unwrap();
        }
    });
}

#[test]
#[ignore = "measurement: scripts/node-convergence"]
fn a_joining_wireguard_node_programs_thousands_of_peers() {
    if skip_unless_root() {
        return;
    }
    let sizes: Vec<u32> = std::env::var("RCNI_WG_REMOTES")
        .unwrap_or_else(|_| "500,5000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    for remotes in sizes {
        measure_wireguard_join(remotes);
    }
}

/// A cluster of `remotes` WireGuard leases (written straight into etcd: /29 subnets of
/// 198.19.0.0/16, addresses 198.18.x.y that need not answer, random keys), then one node
/// joining: from its agent's start to every peer and route programmed.
fn measure_wireguard_join(remotes: u32) {
    let mut c = Cluster::with_config(json!({
        "Network": CLUSTER_NET, "SubnetLen": 29, "Backend": {"Type": "wireguard"}
    }));
    let underlay = cni_linux::NetNs::open(&c.sb.host().path).unwrap();
    let start = Instant::now();
    underlay
        .run(move || write_wireguard_leases(remotes))
        .unwrap();
    let written = start.elapsed();
    let i = c.add_node();
    let start = Instant::now();
    c.spawn_agent(i);
    let node = &c.nodes[i];
    let routes = || {
        ip_json(&node.ns.name, &["route", "show", "proto", "124"])
            .as_array()
            .map_or(0, Vec::len)
    };
    let done = wait_for(Duration::from_secs(120), || routes() == remotes as usize)
        .map(|_| start.elapsed())
        .unwrap_or_else(|| panic!("{} of {remotes} routes:\n{}", routes(), node.agent_log()));
    let peers = node.wg_peers("rcni-wg").len();
    assert_eq!(peers, remotes as usize);
    println!(
        "RESULT wireguard joining node: {remotes} remote nodes' peers and routes programmed \
         {:.1} ms after the agent started ({} implementation; leases written in {:.1} s)",
        done.as_secs_f64() * 1e3,
        if node.agent_log().contains("userspace implementation") {
            "userspace"
        } else {
            "kernel"
        },
        written.as_secs_f64()
    );
}

/// Writes `remotes` WireGuard leases straight into etcd, bound to one 10-minute lease.
fn write_wireguard_leases(remotes: u32) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = Client::connect([format!("http://{UNDERLAY_GW}:2379")], None)
            .await
            .unwrap();
        let lease = client.lease_grant(600, None).await.unwrap().id();
        for k in 0..remotes {
            // /29 number k + 8 of 198.19.0.0/16 (the first ones stay free for the joining node).
            let n = (k + 8) * 8;
            let subnet = format!("198.19.{}.{}-29", n / 256, n % 256);
            let key = format!("{PREFIX}/subnets/{subnet}");
            let mut public = [0u8; 32];
            public[..4].copy_from_slice(&k.to_be_bytes());
            public[31] = 0x5a;
            let value = json!({
                "PublicIP": format!("198.18.{}.{}", 1 + k / 250, k % 250 + 1),
                "BackendType": "wireguard",
                "BackendData": {"PublicKey": base64_of(&public), "Port": 51820}
            });
            client
                .put(
                    key,
                    value.to_string(),
                    Some(PutOptions::new().with_lease(lease)),
                )
                .await
                .unwrap();
        }
    });
}

fn base64_of(bytes: &[u8; 32]) -> String {
    cni_linux::wireguard::PublicKey(*bytes).to_base64()
}
