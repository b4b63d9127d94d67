//! Measurements of the node's policy program at scale (ignored tests; `scripts/policy-density`
//! runs them in a release build and prints their `RESULT` lines). Nothing here asserts a time:
//! the figures are reported.
//!
//! - `cpu_per_change`: 1,000 local pods (50 namespaces × 20) and 500 policies (10 per
//!   namespace, a mix of pod selectors, namespace selectors, both in one peer, match
//!   expressions, ipBlocks with except, ports and port ranges); the agent CPU time of
//!   `Enforcer::update` for one policy's selectors edited, one policy added, one pod
//!   relabelled and one pod added (median of `RCNI_POLICY_CHANGES` changes, default 20), and
//!   the time its batch takes to commit into a throwaway namespace's kernel.
//! - `object_counts`: chains, sets, elements and rules in the kernel at 100/500/1,000 pods ×
//!   50/250/500 policies, beside the number of distinct peer selectors.
//! - `latency`: ping RTT and HTTP request time between two pods on a bridge (through
//!   `br_netfilter`) with the program of 0 policies and of 500 policies, a dozen of them
//!   selecting each of the two pods (the allowing one last in their chains).

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cni_nft::{Batch, Nft};
use cni_policy::nft::{program, Enforcer, TABLE};
use cni_policy::{parse_documents, Cluster, Document, Pod};
use cni_testkit::{run_in, Sandbox};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::Value;

mod common;

const APPS: [&str; 5] = ["web", "api", "db", "cache", "worker"];

fn changes() -> usize {
    std::env::var("RCNI_POLICY_CHANGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

/// The process's CPU time (every thread), the figure the "agent CPU" means.
fn cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the kernel to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.4} ms", d.as_secs_f64() * 1000.0)
}

fn pod_ip(n: usize) -> IpAddr {
    IpAddr::from([198, 18, 100 + (n / 250) as u8, (n % 250) as u8 + 1])
}

fn pod(ns: usize, j: usize, n: usize) -> Pod {
    let labels = [
        ("app", APPS[j % 5].to_string()),
        (
            "tier",
            if j.is_multiple_of(2) {
                "backend"
            } else {
                "frontend"
            }
            .into(),
        ),
        ("rev", format!("r{}", j % 3)),
    ];
    Pod {
        namespace: format!("ns{ns:02}"),
        name: format!("p{j:02}"),
        labels: labels.map(|(k, v)| (k.to_string(), v)).into(),
        ips: vec![pod_ip(n)],
        named_ports: Default::default(),
    }
}

/// Policy `j` of namespace `ns`: one of ten shapes, `shift` rotating the app its peer
/// selects (a selector edit).
fn policy(ns: usize, j: usize, shape: usize, shift: usize) -> NetworkPolicy {
    let a = APPS[(ns + j) % 5];
    let b = APPS[(ns + j + 1 + shift) % 5];
    let team = (ns + 3 + shift) % 10;
    let spec = match shape % 10 {
        0 => "  podSelector: {}\n  policyTypes: [Ingress]\n".to_string(),
        1 => format!("  podSelector: {{matchLabels: {{app: {a}}}}}\n  ingress:\n  - from: [{{podSelector: {{matchLabels: {{app: {b}}}}}}}]\n    ports: [{{port: 8080}}]\n"),
        2 => format!("  podSelector: {{matchLabels: {{app: {a}}}}}\n  ingress:\n  - from: [{{namespaceSelector: {{matchLabels: {{team: t{team}}}}}}}]\n    ports: [{{port: 80}}, {{port: 443}}]\n"),
        3 => format!("  podSelector: {{matchLabels: {{app: {a}}}}}\n  ingress:\n  - from: [{{ipBlock: {{cidr: 198.18.0.0/16, except: [198.18.{}.0/24]}}}}]\n    ports: [{{port: 5432}}]\n", 200 + shift % 50),
        4 => format!("  podSelector: {{matchLabels: {{app: {a}}}}}\n  policyTypes: [Egress]\n  egress:\n  - to: [{{namespaceSelector: {{matchLabels: {{env: prod}}}}, podSelector: {{matchLabels: {{app: {b}}}}}}}]\n    ports: [{{port: 5000, endPort: 5100}}]\n"),
        5 => format!("  podSelector: {{matchLabels: {{tier: frontend}}}}\n  ingress:\n  - from: [{{namespaceSelector: {{matchLabels: {{team: t{team}}}}}, podSelector: {{matchLabels: {{app: {b}}}}}}}]\n"),
        6 => format!("  podSelector: {{matchExpressions: [{{key: app, operator: In, values: [{a}, {b}]}}]}}\n  ingress:\n  - from: [{{podSelector: {{matchExpressions: [{{key: tier, operator: NotIn, values: [frontend]}}]}}}}]\n"),
        7 => format!("  podSelector: {{matchLabels: {{app: {a}}}}}\n  policyTypes: [Egress]\n  egress:\n  - to: [{{ipBlock: {{cidr: 0.0.0.0/0, except: [198.18.0.0/15]}}}}]\n    ports: [{{port: 53, protocol: UDP}}]\n  - to: [{{podSelector: {{matchLabels: {{app: {b}}}}}}}]\n"),
        8 => format!("  podSelector: {{matchLabels: {{app: {a}}}}}\n  ingress:\n  - from: [{{namespaceSelector: {{}}, podSelector: {{matchLabels: {{app: {b}, rev: r{}}}}}}}]\n", shift % 3),
        _ => "  podSelector: {}\n  ingress:\n  - ports: [{port: 80}]\n".to_string(),
    };
    common::network_policy(&format!("ns{ns:02}"), &format!("pol{j:02}"), &spec)
}

/// 50 namespaces with `pods` pods and `policies` policies spread evenly.
fn cluster(pods: usize, policies: usize) -> Cluster {
    let mut c = Cluster::default();
    let (per_ns_pods, per_ns_policies) = (pods / 50, policies / 50);
    for ns in 0..50usize {
        let labels = [
            ("team", format!("t{}", ns % 10)),
            (
                "env",
                if ns.is_multiple_of(2) { "prod" } else { "dev" }.into(),
            ),
        ];
        c.namespaces.insert(
            format!("ns{ns:02}"),
            labels.map(|(k, v)| (k.to_string(), v)).into(),
        );
        for j in 0..per_ns_pods {
            c.pods.push(pod(ns, j, ns * per_ns_pods + j));
        }
        for j in 0..per_ns_policies {
            c.policies.push(policy(ns, j, ns + j, 0));
        }
    }
    c
}

fn all(_: &Pod) -> bool {
    true
}

fn host() -> Option<Sandbox> {
    if !cni_testkit::is_root() {
        eprintln!("skipping: needs root");
        return None;
    }
    Some(Sandbox::new().expect("sandbox"))
}

/// The update's CPU time, and the commit's wall time and batch size.
fn measure(e: &mut Enforcer, c: &Cluster, nft: &mut Nft) -> (Duration, Duration, usize) {
    let start = cpu_time();
    let (batch, _) = e.update(c, all).unwrap();
    let cpu = cpu_time() - start;
    let start = Instant::now();
    nft.commit(&batch).unwrap();
    (cpu, start.elapsed(), batch.len())
}

fn report(what: &str, samples: Vec<(Duration, Duration, usize)>) {
    let n = samples.len();
    let cpu = median(samples.iter().map(|s| s.0).collect());
    let max = samples.iter().map(|s| s.0).max().unwrap();
    let commit = median(samples.iter().map(|s| s.1).collect());
    let mut sizes: Vec<usize> = samples.iter().map(|s| s.2).collect();
    sizes.sort();
    println!(
        "RESULT 1000 pods/500 policies, {what}: update CPU median {} (max {}), commit {} median, {} batch messages median, n={n}",
        ms(cpu),
        ms(max),
        ms(commit),
        sizes[n / 2]
    );
}

#[test]
#[ignore = "measurement: scripts/policy-density"]
fn cpu_per_change() {
    let Some(sb) = host() else { return };
    let mut nft = run_in(&sb.host().name, || Ok(Nft::new()?)).unwrap();
    let mut c = cluster(1000, 500);
    let mut e = Enforcer::new();
    let start = cpu_time();
    let (batch, summary) = e.update(&c, all).unwrap();
    let full_cpu = cpu_time() - start;
    let start = Instant::now();
    nft.commit(&batch).unwrap();
    println!(
        "RESULT 1000 pods/500 policies, first (full) program: update CPU {}, commit {}, {} batch messages, {summary:?}",
        ms(full_cpu),
        ms(start.elapsed()),
        batch.len()
    );
    let n = changes();
    let mut edited = Vec::new();
    for i in 0..n {
        // Shape-1 policies (a pod selector peer): policy j of namespace ns has shape ns + j.
        let ns = (i * 2) % 50;
        let j = (11 - ns % 10) % 10;
        c.policies[ns * 10 + j] = policy(ns, j, 1, i + 1);
        edited.push(measure(&mut e, &c, &mut nft));
    }
    report("one policy's peer selector edited", edited);
    let mut added = Vec::new();
    for i in 0..n {
        let ns = (i * 2 + 1) % 50;
        c.policies.push(policy(ns, 10 + i, i, 0));
        added.push(measure(&mut e, &c, &mut nft));
    }
    report("one policy added", added);
    let mut relabelled = Vec::new();
    for i in 0..n {
        let p = &mut c.pods[(i * 53) % 1000];
        let app = APPS[(i + 2) % 5].to_string();
        p.labels.insert("app".into(), app);
        relabelled.push(measure(&mut e, &c, &mut nft));
    }
    report("one pod relabelled", relabelled);
    let mut pods_added = Vec::new();
    for i in 0..n {
        c.pods.push(pod((i * 3) % 50, 20 + i, 1100 + i));
        pods_added.push(measure(&mut e, &c, &mut nft));
    }
    report("one pod added", pods_added);
    let start = cpu_time();
    let _ = program(&c, all).unwrap();
    println!(
        "RESULT for comparison, a full program() of the same cluster: CPU {}",
        ms(cpu_time() - start)
    );
}

/// Chains, sets (maps included), elements and rules of the table in `ns`.
fn count_objects(sb: &Sandbox) -> [usize; 4] {
    let out = sb
        .exec_host(["nft", "-j", "list", "table", "inet", TABLE])
        .unwrap();
    let json: Value = serde_json::from_str(&out.assert_success().stdout).unwrap();
    let mut counts = [0; 4];
    for item in json["nftables"].as_array().unwrap() {
        if item.get("chain").is_some() {
            counts[0] += 1;
        }
        for kind in ["set", "map"] {
            if let Some(s) = item.get(kind) {
                counts[1] += 1;
                counts[2] += s["elem"].as_array().map_or(0, Vec::len);
            }
        }
        if item.get("rule").is_some() {
            counts[3] += 1;
        }
    }
    counts
}

#[test]
#[ignore = "measurement: scripts/policy-density"]
fn object_counts() {
    let Some(sb) = host() else { return };
    let mut nft = run_in(&sb.host().name, || Ok(Nft::new()?)).unwrap();
    println!(
        "RESULT objects: pods policies pods*policies | peer-selectors chains sets elements rules"
    );
    for pods in [100, 500, 1000] {
        for policies in [50, 250, 500] {
            let c = cluster(pods, policies);
            let (batch, summary) = program(&c, all).unwrap();
            nft.commit(&batch).unwrap();
            let [chains, sets, elements, rules] = count_objects(&sb);
            println!(
                "RESULT objects: {pods:>5} {policies:>4} {:>7} | {:>4} {chains:>5} {sets:>4} {elements:>6} {rules:>6}",
                pods * policies,
                summary.peer_sets
            );
        }
    }
}

/// Latency between two real pods; `pods` are their namespaces and addresses.
struct Pair {
    sb: Sandbox,
    pods: Vec<(String, IpAddr)>,
}

fn pair() -> Option<Pair> {
    let sb = common::bridged_host()?;
    let pods = (0..2u8)
        .map(|i| {
            let ip = IpAddr::from([198, 18, 60, 10 + i]);
            (common::bridged_pod(&sb, i.into(), ip).name, ip)
        })
        .collect();
    Some(Pair { sb, pods })
}

/// The 1,000-pod cluster with the two real pods as `ns00/p00` (client) and `ns01/p00`
/// (server). With policies: 480 of the generated ones, 9 more egress policies over the
/// client's namespace and 9 more ingress policies over the server's (none allowing their
/// traffic), and the two that allow it, named to come last in the pods' chains: 500 in all.
fn latency_cluster(pair: &Pair, policies: bool) -> Cluster {
    let mut c = cluster(1000, if policies { 500 } else { 0 });
    c.policies.truncate(480);
    c.pods[0].ips = vec![pair.pods[0].1];
    c.pods[20].ips = vec![pair.pods[1].1];
    if !policies {
        return c;
    }
    let mut docs = String::new();
    for k in 0..9 {
        docs += &format!("---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: extra-e{k}, namespace: ns00}}\nspec:\n  podSelector: {{}}\n  policyTypes: [Egress]\n  egress:\n  - to: [{{ipBlock: {{cidr: 10.{k}.0.0/16}}}}]\n    ports: [{{port: {}}}]\n", 80 + k);
        docs += &format!("---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: extra-i{k}, namespace: ns01}}\nspec:\n  podSelector: {{}}\n  ingress:\n  - from: [{{namespaceSelector: {{matchLabels: {{team: t{k}}}}}, podSelector: {{matchLabels: {{app: db}}}}}}]\n    ports: [{{port: 5432}}]\n");
    }
    docs += "---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: zz-out, namespace: ns00}\nspec:\n  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  - to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ns01}}}]\n";
    docs += "---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: zz-in, namespace: ns01}\nspec:\n  podSelector: {}\n  ingress:\n  - from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ns00}}}]\n";
    for doc in parse_documents(&docs).unwrap() {
        let Document::NetworkPolicy(p) = doc else {
            unreachable!()
        };
        c.policies.push(*p);
    }
    c
}

/// The per-packet RTTs of `count` pings, 2 ms apart (`ping` prints them in whole
/// microseconds: averages over many packets resolve below that).
fn ping_rtts(pair: &Pair, count: usize) -> Vec<Duration> {
    let (from, to) = (&pair.pods[0].0, pair.pods[1].1.to_string());
    let n = count.to_string();
    let out = pair
        .sb
        .exec_in(from, ["ping", "-n", "-c", &n, "-i", "0.002", &to])
        .unwrap();
    out.assert_success()
        .stdout
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.trim_end_matches(" ms").parse::<f64>().ok())
        .map(|t| Duration::from_secs_f64(t / 1000.0))
        .collect()
}

/// The mean of the fastest 95 % (a few packets meet a busy CPU on a shared machine).
fn trimmed_mean(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.truncate(v.len() * 95 / 100);
    v.iter().sum::<Duration>() / v.len() as u32
}

/// A blocking one-request-per-connection HTTP server in the server pod, until dropped.
struct Server {
    stop: Arc<AtomicBool>,
    at: SocketAddr,
    /// The client pod's namespace, to wake the accept from.
    client: String,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(pair: &Pair) -> Server {
        let at = SocketAddr::new(pair.pods[1].1, 8080);
        let listener = run_in(&pair.pods[1].0, move || Ok(TcpListener::bind(at)?)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
            }
        });
        Server {
            stop,
            at,
            client: pair.pods[0].0.clone(),
            thread: Some(thread),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the blocking accept with a connection from the client pod (never from the
        // test's own namespace).
        if let Some(t) = self.thread.take() {
            let at = self.at;
            let _ = run_in(&self.client, move || {
                Ok(TcpStream::connect_timeout(&at, Duration::from_millis(500)))
            });
            let _ = t.join();
        }
    }
}

/// Median time of `count` HTTP requests, each on a new connection (connect, request, whole
/// answer).
fn http_time(pair: &Pair, at: SocketAddr, count: usize) -> Duration {
    let times = run_in(&pair.pods[0].0, move || {
        let mut times = Vec::with_capacity(count);
        for _ in 0..count {
            let start = Instant::now();
            let mut s = TcpStream::connect_timeout(&at, Duration::from_secs(2))?;
            s.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
            let mut answer = Vec::new();
            s.read_to_end(&mut answer)?;
            anyhow::ensure!(answer.starts_with(b"HTTP/1.0 200"), "bad answer");
            times.push(start.elapsed());
        }
        Ok(times)
    })
    .unwrap();
    median(times)
}

fn commit_in(pair: &Pair, batch: Batch) {
    run_in(
        &pair.sb.host().name,
        move || Ok(Nft::new()?.commit(&batch)?),
    )
    .unwrap();
}

#[test]
#[ignore = "measurement: scripts/policy-density"]
fn latency() {
    let Some(pair) = pair() else { return };
    let server = Server::start(&pair);
    let rounds = changes().div_ceil(4).max(2);
    let (empty, _) = program(&latency_cluster(&pair, false), all).unwrap();
    let full = latency_cluster(&pair, true);
    let (loaded, summary) = program(&full, all).unwrap();
    let chains = |i: usize| {
        let p = &full.pods[i];
        full.policies
            .iter()
            .filter(|pol| cni_policy::effective::selects(pol, p).unwrap())
            .count()
    };
    println!(
        "RESULT latency: {} policies, the client pod under {}, the server pod under {}; {summary:?}",
        full.policies.len(),
        chains(0),
        chains(20)
    );
    let mut ping: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut http = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        // Alternating which program goes first cancels any drift within a round.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            let batch = [&empty, &loaded][k];
            commit_in(&pair, batch.clone());
            // The program is on the measured path: the client's namespace denies ingress
            // from the server's under the 500 policies.
            let back = cni_testkit::ping(&pair.pods[1].0, pair.pods[0].1);
            assert_eq!(
                back,
                k == 0,
                "server pings client with {} policies",
                k * 500
            );
            ping[k].extend(ping_rtts(&pair, 300));
            http[k].push(http_time(&pair, server.at, 300));
        }
    }
    let [p0, p500] = ping.map(trimmed_mean);
    let [h0, h500] = http.map(median);
    let ratio = |a: Duration, b: Duration| b.as_secs_f64() / a.as_secs_f64();
    println!(
        "RESULT latency ping RTT (mean of the fastest 95%): 0 policies {}, 500 policies {}, ratio {:.3}",
        ms(p0),
        ms(p500),
        ratio(p0, p500)
    );
    println!(
        "RESULT latency HTTP request (connect+GET+answer) median: 0 policies {}, 500 policies {}, ratio {:.3}",
        ms(h0),
        ms(h500),
        ratio(h0, h500)
    );
}
