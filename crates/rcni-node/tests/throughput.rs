//! Root-only measurement (ignored by default; `scripts/node-throughput` runs it): pod-to-pod
//! TCP throughput (Debian's `iperf3`) and request latency between two simulated nodes, for
//! the host-gw, VXLAN and WireGuard backends side by side in one run, and, in the WireGuard
//! cluster's node namespaces, Debian's `wireguard-go` configured by hand with `wg` and `ip`
//! (the reference userspace implementation) over the same underlay, next to the agent's own
//! tunnel between those same two node namespaces.
//!
//! Each round runs every path once, in turn, so that a change of the machine's load touches
//! them all; the median of the rounds is printed. CPU is what the measured processes used
//! (both `iperf3`, and the two `wireguard-go` on a WireGuard path, from `/proc/<pid>/stat`)
//! plus the softirq time of the whole machine (the kernel's packet path runs there), per
//! second of transfer, divided by the throughput: cores per Gbit/s.

mod harness;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cni_linux::NetNs;
use harness::*;
use serde_json::{json, Value};

/// Clock ticks per second of `/proc` CPU times.
const TICKS: f64 = 100.0;

/// One path to measure: where the client and the server run and the server's address.
struct Path2 {
    name: String,
    client_ns: String,
    server_ns: String,
    server: IpAddr,
    /// Processes whose CPU counts besides the two iperf3 (a path's wireguard-go).
    helpers: Vec<u32>,
}

fn proc_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(end) = stat.rfind(')') else {
        return 0;
    };
    let f: Vec<&str> = stat[end + 2..].split_whitespace().collect();
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

fn softirq_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let cpu: Vec<u64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    cpu[5] + cpu[6]
}

/// One iperf3 run of `seconds`: Gbit/s received, and cores used per Gbit/s.
fn iperf(path: &Path2, seconds: u32, port: u16) -> (f64, f64) {
    let server = Command::new("ip")
        .args(["netns", "exec", &path.server_ns, "iperf3", "-s", "-1", "-B"])
        .arg(path.server.to_string())
        .args(["-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 (Debian package iperf3)");
    let server = Guard(Some(server));
    std::thread::sleep(Duration::from_millis(300));
    let server_pid = server.pid().unwrap();
    let client = Command::new("ip")
        .args(["netns", "exec", &path.client_ns, "iperf3", "-J", "-c"])
        .arg(path.server.to_string())
        .args(["-p", &port.to_string(), "-t", &seconds.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client_pid = client.id();
    let pids: Vec<u32> = [server_pid, client_pid]
        .into_iter()
        .chain(path.helpers.iter().copied())
        .collect();
    let before: u64 = pids.iter().map(|p| proc_ticks(*p)).sum::<u64>() + softirq_ticks();
    let started = Instant::now();
    // The client's own CPU is read just before it exits: poll until its output is done.
    let mut last = before;
    let mut child = client;
    let out = loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut text = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut text)
                .unwrap();
            assert!(
                status.success() || !text.is_empty(),
                "iperf3 on {}",
                path.name
            );
            break text;
        }
        last = pids.iter().map(|p| proc_ticks(*p)).sum::<u64>() + softirq_ticks();
        std::thread::sleep(Duration::from_millis(50));
    };
    let elapsed = started.elapsed().as_secs_f64();
    drop(server);
    let report: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("iperf3 JSON on {}: {e}: {out}", path.name));
    let bps = report["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("iperf3 on {}: {report}", path.name));
    let gbps = bps / 1e9;
    let cores = (last - before) as f64 / TICKS / elapsed;
    (gbps, cores / gbps)
}

/// Request/response round trips (1 byte each way over one TCP connection, as netperf's
/// TCP_RR): median and 99th percentile in microseconds.
fn round_trips(path: &Path2, count: usize) -> (f64, f64) {
    let server_ip = path.server;
    let listener = NetNs::open(Path::new("/run/netns").join(&path.server_ns))
        .unwrap()
        .run(move || TcpListener::bind(SocketAddr::new(server_ip, 0)))
        .unwrap()
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let echo = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_nodelay(true).unwrap();
        let mut byte = [0u8; 1];
        while conn.read_exact(&mut byte).is_ok() {
            conn.write_all(&byte).unwrap();
        }
    });
    let mut conn = NetNs::open(Path::new("/run/netns").join(&path.client_ns))
        .unwrap()
        .run(move || TcpStream::connect_timeout(&addr, Duration::from_secs(5)))
        .unwrap()
        .unwrap();
    conn.set_nodelay(true).unwrap();
    let mut times = Vec::with_capacity(count);
    let mut byte = [7u8; 1];
    for _ in 0..count + 50 {
        let t = Instant::now();
        conn.write_all(&byte).unwrap();
        conn.read_exact(&mut byte).unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    drop(conn);
    echo.join().unwrap();
    let mut times = times.split_off(50); // warm-up: handshakes, caches
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], times[times.len() * 99 / 100])
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Two nodes with a pod each on `backend`; the path from pod A to pod B.
fn pod_path(name: &str, backend: Value) -> (Cluster, Vec<Pod>, Path2) {
    let c = Cluster::with_nodes(backend, 2);
    let a = c.add_pod(0);
    let b = c.add_pod(1);
    assert!(
        cni_testkit::ping(&a.ns.name, b.ip),
        "{name}: pod A -> pod B"
    );
    let helpers = (0..2)
        .filter_map(|i| c.nodes[i].wireguard_go_pid("rcni-wg"))
        .collect();
    let path = Path2 {
        name: name.into(),
        client_ns: a.ns.name.clone(),
        server_ns: b.ns.name.clone(),
        server: b.ip.into(),
        helpers,
    };
    (c, vec![a, b], path)
}

/// Debian's wireguard-go between node A's and node B's namespaces, configured by hand
/// (devices `wgrefa`/`wgrefb`, 198.18.250.1 and .2, port 51830): the reference userspace path.
fn reference_path(c: &Cluster) -> (Vec<Guard>, Path2) {
    let mut guards = Vec::new();
    let mut keys = Vec::new();
    for (i, dev) in [(0, "wgrefa"), (1, "wgrefb")] {
        let ns = &c.nodes[i].ns.name;
        guards.push(Guard(Some(
            Command::new("ip")
                .args(["netns", "exec", ns, "wireguard-go", "-f", dev])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )));
        let key = c.nodes[i].dir.join(format!("{dev}.key"));
        let private = Command::new("wg").arg("genkey").output().unwrap().stdout;
        std::fs::write(&key, &private).unwrap();
        let mut public = Command::new("wg")
            .arg("pubkey")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        public.stdin.take().unwrap().write_all(&private).unwrap();
        let public = public.wait_with_output().unwrap().stdout;
        keys.push((key, String::from_utf8(public).unwrap().trim().to_string()));
    }
    // Serving (listening), not only bound: `wg` would take a refused socket for no device.
    let up = wait_for(Duration::from_secs(5), || {
        ["wgrefa", "wgrefb"].iter().all(|d| {
            cni_linux::wireguard::uapi::UserspaceDevice::new(format!("/run/wireguard/{d}.sock"))
                .server_pid()
                .is_ok()
        })
    });
    assert!(up.is_some(), "the reference wireguard-go runs");
    for (i, dev, other) in [(0, "wgrefa", 1), (1, "wgrefb", 0)] {
        let ns = &c.nodes[i].ns.name;
        let endpoint = format!("{}:51830", c.nodes[other].ip);
        let allowed = format!("198.18.250.{}/32", other + 1);
        sh(&[
            "ip",
            "netns",
            "exec",
            ns,
            "wg",
            "set",
            dev,
            "private-key",
            keys[i].0.to_str().unwrap(),
            "listen-port",
            "51830",
            "peer",
            &keys[other].1,
            "endpoint",
            &endpoint,
            "allowed-ips",
            &allowed,
        ]);
        let addr = format!("198.18.250.{}/24", i + 1);
        sh(&["ip", "-n", ns, "addr", "add", &addr, "dev", dev]);
        sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
    }
    assert!(cni_testkit::ping(
        &c.nodes[0].ns.name,
        "198.18.250.2".parse::<IpAddr>().unwrap()
    ));
    let helpers = guards.iter().filter_map(Guard::pid).collect();
    let path = Path2 {
        name: "wireguard-go by hand".into(),
        client_ns: c.nodes[0].ns.name.clone(),
        server_ns: c.nodes[1].ns.name.clone(),
        server: "198.18.250.2".parse().unwrap(),
        helpers,
    };
    (guards, path)
}

#[test]
#[ignore = "measurement: scripts/node-throughput"]
fn pod_to_pod_throughput_and_latency_per_backend() {
    if skip_unless_root() {
        return;
    }
    let seconds: u32 = std::env::var("RCNI_IPERF_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let rounds: usize = std::env::var("RCNI_IPERF_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    println!(
        "RESULT agent binary: {}; load before: {}",
        cni_testkit::bin_path("rcni-node").unwrap().display(),
        std::fs::read_to_string("/proc/loadavg").unwrap().trim()
    );
    let (_hg, _hg_pods, host_gw) = pod_path("host-gw", json!({"Type": "host-gw"}));
    let (_vx, _vx_pods, vxlan) = pod_path("vxlan", json!({"Type": "vxlan"}));
    let (wg, _wg_pods, wireguard) = pod_path("wireguard", json!({"Type": "wireguard"}));
    let (mut reference_processes, reference) = reference_path(&wg);
    // The agent's tunnel between the same two node namespaces as the reference: node A to
    // the address node B's rcni-wg holds (its subnet's first address).
    let node_b_tunnel: IpAddr = wg.nodes[1]
        .subnet()
        .unwrap()
        .parse::<ipnet::Ipv4Net>()
        .unwrap()
        .network()
        .into();
    let wireguard_nodes = Path2 {
        name: "wireguard node to node".into(),
        client_ns: wg.nodes[0].ns.name.clone(),
        server_ns: wg.nodes[1].ns.name.clone(),
        server: node_b_tunnel,
        helpers: wireguard.helpers.clone(),
    };
    let implementation = if wg.nodes[0].agent_log().contains("userspace implementation") {
        "userspace"
    } else {
        "kernel"
    };
    let paths = [&host_gw, &vxlan, &wireguard, &wireguard_nodes, &reference];
    let mut gbps: Vec<Vec<f64>> = vec![Vec::new(); paths.len()];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); paths.len()];
    for round in 0..rounds {
        for (i, path) in paths.iter().enumerate() {
            let (g, c) = iperf(path, seconds, 5201 + (round * paths.len() + i) as u16);
            gbps[i].push(g);
            cpu[i].push(c);
        }
    }
    let mut rtt = Vec::new();
    for path in paths {
        rtt.push(round_trips(path, 2000));
    }
    let g: Vec<f64> = gbps.iter().map(|v| median(v.clone())).collect();
    for (i, path) in paths.iter().enumerate() {
        println!(
            "RESULT path={} throughput_gbps={:.2} (rounds {:?}) cores_per_gbps={:.2} \
             rr_median_us={:.0} rr_p99_us={:.0} vs_host_gw={:.3}",
            path.name,
            g[i],
            gbps[i]
                .iter()
                .map(|x| (x * 100.0).round() / 100.0)
                .collect::<Vec<_>>(),
            median(cpu[i].clone()),
            rtt[i].0,
            rtt[i].1,
            g[i] / g[0]
        );
    }
    println!(
        "RESULT wireguard ({implementation}) / wireguard-go by hand: pod to pod {:.3}, node to \
         node {:.3}; vxlan / host-gw = {:.3}; wireguard / vxlan = {:.3}; load after: {}",
        g[2] / g[4],
        g[3] / g[4],
        g[1] / g[0],
        g[2] / g[1],
        std::fs::read_to_string("/proc/loadavg").unwrap().trim()
    );
    // SIGTERM: wireguard-go removes its socket from the host's /run/wireguard.
    reference_processes.iter_mut().for_each(Guard::terminate);
}
