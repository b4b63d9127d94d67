//! Measurements of the flow log (ignored; `scripts/flow-log-bench` runs them in a release
//! build and docs/performance.md, section "NetworkPolicy: the flow log", keeps the figures).
//! Two simulated dual-stack host-gw nodes; on node1 pod x/a (isolated by a `podSelector: {}`
//! deny and admitting y/b on TCP/80) and y/b; y/a on node2. Prints RESULT lines:
//!
//! - the delay from a denied packet to its flow on `rcni flows --follow` (p50, p99, max);
//! - pod-to-pod request latency (a new TCP connection, one byte each way) and throughput (one
//!   TCP stream) of allowed traffic through x/a's policy chains, with `--flow-log denied`
//!   and `off`, interleaved rounds, and their ratios;
//! - a flood of denied packets at 50,000 packets/s from node2: the agent's CPU (share of one
//!   core) and memory (RSS, the store's estimate), and allowed request latency beside it
//!   against without it (interleaved rounds), with the flow log on and, as a control, off.
//!
//! `RCNI_FLOW_BENCH_QUICK=1` shortens every part.

mod harness;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cni_testkit::{run_in, tcp_connects};
use harness::netpol::*;
use harness::*;
use serde_json::{json, Value};

const X_DENY: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny, namespace: x}\nspec:\n  podSelector: {}\n  policyTypes: [Ingress]\n";
const A_FROM_B: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: a-from-b, namespace: x}\nspec:\n  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {ns: y}}\n      podSelector: {matchLabels: {pod: b}}\n    ports: [{protocol: TCP, port: 80}]\n";
/// The port of the measured server on x/a (the pods' own servers hold 80 and 81).
const PORT: u16 = 8080;

fn quick() -> bool {
    std::env::var_os("RCNI_FLOW_BENCH_QUICK").is_some()
}

/// Percentile `p` (0..=100) of sorted `v`.
fn pct(v: &[Duration], p: usize) -> Duration {
    v[((v.len() - 1) * p) / 100]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

/// A server on `at` in `ns`: each connection gets its byte echoed (requests) or is read to
/// the end (throughput), on threads of its own; stops with the flag.
fn server(ns: &str, at: SocketAddr, stop: Arc<AtomicBool>) {
    let l = run_in(ns, move || Ok(TcpListener::bind(at)?)).unwrap();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                let Ok(n) = conn.read(&mut buf) else { return };
                if n == 1 {
                    let _ = conn.write_all(&buf[..1]);
                    return;
                }
                while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
}

/// `n` requests from `from` to `to`, each a new connection with one byte each way; their
/// times, sorted.
fn requests(from: &str, to: SocketAddr, n: usize) -> Vec<Duration> {
    run_in(from, move || {
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(2))?;
            s.write_all(b"?")?;
            let mut b = [0u8; 1];
            s.read_exact(&mut b)?;
            times.push(t.elapsed());
        }
        times.sort();
        Ok(times)
    })
    .unwrap()
}

/// MB/s of one TCP stream from `from` to `to` for `secs`.
fn throughput(from: &str, to: SocketAddr, secs: f64) -> f64 {
    run_in(from, move || {
        let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(2))?;
        let chunk = vec![7u8; 64 * 1024];
        let t = Instant::now();
        let mut sent = 0usize;
        while t.elapsed().as_secs_f64() < secs {
            s.write_all(&chunk)?;
            sent += chunk.len();
        }
        Ok(sent as f64 / t.elapsed().as_secs_f64() / 1e6)
    })
    .unwrap()
}

/// The agent's CPU time (user + system) and RSS in bytes.
fn agent_usage(pid: u32) -> (Duration, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat(5), counted from the state (field 3) here.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .unwrap()
        .unwrap_or(100) as u64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    (Duration::from_millis(ticks * 1000 / hz), rss_kb * 1024)
}

/// Restarts node1's agent with `--flow-log mode` and waits until its program is back and
/// y/b reaches x/a again.
fn agent_with(c: &mut Cluster, w: &World, mode: &str, a: SocketAddr) {
    c.nodes[0].agent.terminate();
    c.nodes[0].extra = vec!["--flow-log".into(), mode.into()];
    c.restart_agent(0);
    let b = &w.pod("y", "b").netns.name;
    let logs = |t: &str| t.contains("rcni:deny:pod-i-");
    let ok = wait_for(Duration::from_secs(30), || {
        policy_table(&c.nodes[0].ns.name).is_some_and(|t| logs(&t.to_string()) == (mode != "off"))
            && tcp_connects(b, a, Duration::from_millis(300))
    });
    assert!(
        ok.is_some(),
        "agent with --flow-log {mode}:\n{}",
        c.nodes[0].agent_log()
    );
}

#[test]
#[ignore = "a measurement: scripts/flow-log-bench"]
fn flow_log_measurements() {
    if skip_unless_root() || !br_netfilter_loaded() {
        return;
    }
    let config = json!({
        "Network": CLUSTER_NET, "SubnetLen": 24,
        "EnableIPv6": true, "IPv6Network": "fd52:18::/48", "IPv6SubnetLen": 64,
        "Backend": {"Type": "host-gw"}
    });
    let mut c = Cluster::with_config(config);
    let multi = cni_testkit::bin_path("rcni-plugins").unwrap();
    std::os::unix::fs::symlink(multi, c.plugins.join("loopback")).unwrap();
    for _ in 0..2 {
        let i = c.add_node();
        c.start_agent(i);
    }
    c.wait_converged(Duration::from_secs(30))
        .expect("converged");
    let mut w = World::empty();
    for ns in ["x", "y"] {
        w.label_namespace(&c, ns, &[("ns", ns)]);
    }
    w.add_pod(&c, 0, "x", "a");
    w.add_pod(&c, 0, "y", "b");
    w.add_pod(&c, 1, "y", "a");
    w.apply(&c, X_DENY);
    w.apply(&c, A_FROM_B);
    let xa = w.pod("x", "a").pod.ips[0];
    let stop = Arc::new(AtomicBool::new(false));
    let to = SocketAddr::new(xa, PORT);
    w.apply(
        &c,
        &A_FROM_B
            .replace("port: 80}", "port: 8080}")
            .replace("a-from-b", "a-from-b-8080"),
    );
    server(&w.pod("x", "a").netns.name, to, stop.clone());
    let b = w.pod("y", "b").netns.name.clone();
    assert!(wait_for(Duration::from_secs(20), || tcp_connects(
        &b,
        to,
        Duration::from_millis(300)
    ))
    .is_some());

    listing_delay(&c, &w, xa);
    allowed_cost(&mut c, &w, to);
    agent_with(&mut c, &w, "denied", to);
    flood(&mut c, &w, xa, to);
    stop.store(true, Ordering::SeqCst);
}

/// From a denied datagram's send to its flow's line on `rcni flows --follow`.
fn listing_delay(c: &Cluster, w: &World, xa: IpAddr) {
    let n = if quick() { 50 } else { 300 };
    let state = c.nodes[0].dir.join("state");
    let mut follow = Command::new("ip")
        .args(["netns", "exec", &c.nodes[0].ns.name])
        .arg(cni_testkit::bin_path("rcni").unwrap())
        .args([
            "flows",
            "--follow",
            "--json",
            "--state-dir",
            state.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let seen: Arc<Mutex<Vec<(u16, Instant)>>> = Arc::default();
    let out = follow.stdout.take().unwrap();
    let lines = seen.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            let at = Instant::now();
            let v: Value = serde_json::from_str(&line).unwrap_or_default();
            if let Some(port) = v["dst"]["port"].as_u64() {
                lines.lock().unwrap().push((port as u16, at));
            }
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    let sock = run_in(&w.pod("y", "b").netns.name, || {
        Ok(UdpSocket::bind("0.0.0.0:0")?)
    })
    .unwrap();
    let mut sent = Vec::with_capacity(n);
    for i in 0..n {
        // A port of its own: a new flow each.
        let port = 20_000 + i as u16;
        sent.push((port, Instant::now()));
        sock.send_to(b"denied", SocketAddr::new(xa, port)).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(2));
    let seen = seen.lock().unwrap().clone();
    let _ = follow.kill();
    let _ = follow.wait();
    let mut delays: Vec<Duration> = sent
        .iter()
        .filter_map(|(port, t)| {
            let (_, at) = seen.iter().find(|(p, _)| p == port)?;
            Some(at.duration_since(*t))
        })
        .collect();
    delays.sort();
    println!(
        "RESULT listing delay: {} of {n} denied datagrams listed by rcni flows --follow; p50 {}, p99 {}, max {}",
        delays.len(),
        ms(pct(&delays, 50)),
        ms(pct(&delays, 99)),
        ms(*delays.last().unwrap())
    );
}

/// Request latency and throughput of allowed traffic, `--flow-log denied` against `off`.
fn allowed_cost(c: &mut Cluster, w: &World, to: SocketAddr) {
    let (rounds, n, secs) = if quick() {
        (2, 300, 1.0)
    } else {
        (4, 2000, 3.0)
    };
    let b = w.pod("y", "b").netns.name.clone();
    let mut p50 = [Vec::new(), Vec::new()];
    let mut p99 = [Vec::new(), Vec::new()];
    let mut mbps = [Vec::new(), Vec::new()];
    for _ in 0..rounds {
        for (k, mode) in ["off", "denied"].into_iter().enumerate() {
            agent_with(c, w, mode, to);
            let t = requests(&b, to, n);
            p50[k].push(pct(&t, 50));
            p99[k].push(pct(&t, 99));
            mbps[k].push(throughput(&b, to, secs));
        }
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let median_f = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (off50, den50) = (median(&mut p50[0]), median(&mut p50[1]));
    let (off99, den99) = (median(&mut p99[0]), median(&mut p99[1]));
    let (offt, dent) = (median_f(&mut mbps[0]), median_f(&mut mbps[1]));
    println!(
        "RESULT allowed request latency ({rounds} rounds of {n}, median of rounds): off p50 {} p99 {}; denied p50 {} p99 {}; ratio p50 {:.3}, p99 {:.3}",
        ms(off50),
        ms(off99),
        ms(den50),
        ms(den99),
        den50.as_secs_f64() / off50.as_secs_f64(),
        den99.as_secs_f64() / off99.as_secs_f64()
    );
    println!(
        "RESULT allowed throughput (one TCP stream, {secs} s, median of {rounds}): off {offt:.0} MB/s, denied {dent:.0} MB/s; ratio {:.3}",
        dent / offt
    );
}

/// Runs `work` while y/a (node2) sends 50,000 denied datagrams a second to x/a, a new port
/// each (so the store fills); what `work` gave, the datagrams sent and for how long.
fn flood_while<T>(w: &World, xa: IpAddr, work: impl FnOnce() -> T) -> (T, u64, Duration) {
    let sender = w.pod("y", "a").netns.name.clone();
    let flooding = Arc::new(AtomicBool::new(true));
    let flag = flooding.clone();
    let started = Instant::now();
    let flood = std::thread::spawn(move || {
        run_in(&sender, move || {
            let s = UdpSocket::bind("0.0.0.0:0")?;
            let (mut sent, mut port) = (0u64, 1024u16);
            let t = Instant::now();
            while flag.load(Ordering::SeqCst) {
                // 50,000 a second, sent as they fall due.
                let due = t.elapsed().as_micros() as u64 / 20;
                while sent < due {
                    port = if port == 65_000 { 1024 } else { port + 1 };
                    let _ = s.send_to(b"flood", SocketAddr::new(xa, port));
                    sent += 1;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(sent)
        })
        .unwrap()
    });
    // The flood at its rate before the work starts.
    std::thread::sleep(Duration::from_millis(500));
    let out = work();
    flooding.store(false, Ordering::SeqCst);
    let sent = flood.join().unwrap();
    (out, sent, started.elapsed())
}

/// Allowed request latency without and beside a flood, in interleaved rounds: the medians
/// over the rounds of (p50, p99) without and with.
fn beside_flood(
    w: &World,
    xa: IpAddr,
    to: SocketAddr,
    rounds: usize,
    n: usize,
) -> [(Duration, Duration); 2] {
    let b = w.pod("y", "b").netns.name.clone();
    let mut v: [[Vec<Duration>; 2]; 2] = Default::default();
    for _ in 0..rounds {
        let quiet = requests(&b, to, n);
        let (busy, _, _) = flood_while(w, xa, || requests(&b, to, n));
        for (k, t) in [quiet, busy].iter().enumerate() {
            v[k][0].push(pct(t, 50));
            v[k][1].push(pct(t, 99));
        }
    }
    let median = |mut d: Vec<Duration>| {
        d.sort();
        d[d.len() / 2]
    };
    let [q, f] = v;
    let [q50, q99] = q;
    let [f50, f99] = f;
    [(median(q50), median(q99)), (median(f50), median(f99))]
}

/// A flood of denied packets at 50,000 a second: the agent's CPU and memory over `secs`, and
/// allowed request latency beside it against without it, with the flow log on (`denied`)
/// and, as a control, off.
fn flood(c: &mut Cluster, w: &World, xa: IpAddr, to: SocketAddr) {
    let (secs, rounds, n) = if quick() {
        (3u64, 1, 300)
    } else {
        (10, 3, 2000)
    };
    let pid = c.nodes[0].agent.pid().unwrap();
    let (cpu0, rss0) = agent_usage(pid);
    let ((), sent, wall) = flood_while(w, xa, || std::thread::sleep(Duration::from_secs(secs)));
    let (cpu1, rss1) = agent_usage(pid);
    let metrics = c.nodes[0].health_get("/metrics").unwrap_or_default();
    let value = |series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(f64::NAN)
    };
    println!(
        "RESULT flood: {sent} denied packets in {:.1} s ({:.0}/s): agent CPU {:.1}% of one core; RSS {} -> {} KiB; store {} flows, {:.0} KiB estimated, {} evicted; records {}, suppressed {}, lost {}",
        wall.as_secs_f64(),
        sent as f64 / wall.as_secs_f64(),
        (cpu1 - cpu0).as_secs_f64() / wall.as_secs_f64() * 100.0,
        rss0 / 1024,
        rss1 / 1024,
        value("rcni_node_flows "),
        value("rcni_node_flow_memory_bytes ") / 1024.0,
        value("rcni_node_flows_evicted_total "),
        value("rcni_node_flow_records_total "),
        value("rcni_node_flow_records_suppressed_total{verdict=\"denied\"} "),
        value("rcni_node_flow_records_lost_total "),
    );
    for mode in ["denied", "off"] {
        if mode == "off" {
            agent_with(c, w, "off", to);
        }
        let [(q50, q99), (f50, f99)] = beside_flood(w, xa, to, rounds, n);
        println!(
            "RESULT allowed request latency beside the flood, --flow-log {mode} ({rounds} rounds of {n}, median of rounds): without p50 {} p99 {}; with p50 {} p99 {}; ratio p50 {:.3}, p99 {:.3}",
            ms(q50),
            ms(q99),
            ms(f50),
            ms(f99),
            f50.as_secs_f64() / q50.as_secs_f64(),
            f99.as_secs_f64() / q99.as_secs_f64()
        );
    }
}
